"""Measured accuracy of fastlaunch's math functions: max ULP error against a high-precision
reference, beside NumPy's own functions and fastlaunch's libm/libmvec mode, on the same inputs.

float32: every one of the 2^32 bit patterns (--stride 1, the default; minutes per function),
or every stride-th one.  The reference is the float64 function (glibc libm, < 1 float64 ULP:
far below a float32 ULP) evaluated unrounded.
float64: a dense sample (--f64-samples random bit patterns over every exponent, plus a dense
grid of the ranges that matter); the reference is the np.longdouble (x87, 64-bit
significand) function.

The ULP error of y against reference v is |y - v| / ulp(v), ulp(v) the spacing of the
result type at |v| (the denormal spacing below the normal range).  Where the correctly
rounded result is a special value (NaN, inf) or y is one, y must be it exactly: those count
as "special mismatches" instead.

    python bench/vmath_accuracy.py                       # exhaustive float32 + float64 sample
    python bench/vmath_accuracy.py --stride 4099 --funcs sin,cos --markdown docs/math-accuracy.md
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastlaunch as fl                                        # noqa: E402
from fastlaunch.backends import register_backend                # noqa: E402

F32_FUNCS = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tanh"]
F64_FUNCS = ["exp", "log"]


def _backend(math):
    """A CPU backend in one math mode: "libm", or explicitly "inline" (the default "auto"
    mode calls libmvec for sin, cos and tanh)."""
    def make():
        from fastlaunch.backends.cpu import CPUBackend
        return CPUBackend(math=math)
    return make


def compiled(name, backend):
    f = getattr(np, name)
    return fl.compile(lambda a: f(a), backend=backend)


def ulp_of(ref: np.ndarray, dt) -> np.ndarray:
    """The spacing of dt at |ref| (ref in a wider type)."""
    fi = np.finfo(dt)
    _, e = np.frexp(ref.astype(np.longdouble) if dt == np.float64 else ref)
    e = np.maximum(e - 1, fi.minexp)
    return np.ldexp(np.ones(ref.shape, ref.dtype), e - fi.nmant)


def errors(y: np.ndarray, ref: np.ndarray, dt):
    """(max ULP error over ordinary results, count of special mismatches)."""
    rounded = ref.astype(dt)
    special = ~np.isfinite(rounded) | ~np.isfinite(y)
    same_special = (rounded == y) | (np.isnan(rounded) & np.isnan(y))
    bad_special = int(np.count_nonzero(special & ~same_special))
    ok = ~special
    if not ok.any():
        return 0.0, bad_special
    r = ref[ok]
    err = np.abs(y[ok].astype(ref.dtype) - r) / ulp_of(r, dt)
    return float(err.max()), bad_special


def sweep_f32(name, fns, stride, chunk=1 << 22, log=None):
    """Max ULP of each of fns (label -> callable) over float32 bit patterns 0, stride, ..."""
    ref_fn = getattr(np, name)
    worst = {k: 0.0 for k in fns}
    bad = {k: 0 for k in fns}
    where = {k: None for k in fns}
    total = 1 << 32
    step = chunk * stride
    for start in range(0, total, step):
        bits = np.arange(start, min(start + step, total), stride, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        with np.errstate(all="ignore"):
            ref = ref_fn(x.astype(np.float64))
            for k, fn in fns.items():
                y = fn(x)
                m, b = errors(y, ref, np.float32)
                if m > worst[k]:
                    worst[k] = m
                    rounded = ref.astype(np.float32)
                    ok = np.isfinite(rounded) & np.isfinite(y)
                    err = np.where(ok, np.abs(y.astype(np.float64) - ref)
                                   / ulp_of(np.where(ok, ref, 1.0), np.float32), 0)
                    where[k] = float(x[int(np.argmax(err))])
                bad[k] += b
        if log:
            log(start + step, total)
    return worst, bad, where


def sample_f64(name, fns, n, seed=1):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 64, n, dtype=np.uint64, endpoint=False)
    x = np.concatenate([bits.view(np.float64), np.linspace(-750, 750, n // 4),
                        np.linspace(-10, 10, n // 4), np.geomspace(1e-310, 1e308, n // 4),
                        np.linspace(0.5, 2.0, n // 4)])
    ref_fn = getattr(np, name)
    worst, bad = {}, {}
    with np.errstate(all="ignore"):
        ref = ref_fn(x.astype(np.longdouble))
        for k, fn in fns.items():
            worst[k], bad[k] = errors(fn(x), ref, np.float64)
    return worst, bad, len(x)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stride", type=int, default=1, help="float32: every stride-th bit pattern")
    ap.add_argument("--funcs", default=",".join(F32_FUNCS))
    ap.add_argument("--f64-samples", type=int, default=4_000_000)
    ap.add_argument("--markdown", help="write the table to this file")
    args = ap.parse_args(argv)
    register_backend("cpu-libm-bench", _backend("libm"))
    register_backend("cpu-inline-bench", _backend("inline"))
    funcs = [f for f in args.funcs.split(",") if f]
    rows = []
    for name in funcs:
        if name not in F32_FUNCS:
            continue
        t0 = time.time()
        fns = {"inline": compiled(name, "cpu-inline-bench"),
               "libm": compiled(name, "cpu-libm-bench"),
               "numpy": getattr(np, name)}
        worst, bad, where = sweep_f32(name, fns, args.stride)
        rows.append(("float32", name, worst, bad, where.get("inline")))
        print(f"float32 {name}: " + ", ".join(f"{k} {worst[k]:.3f} ulp ({bad[k]} special)"
                                                for k in fns)
              + f"  worst inline x={where['inline']!r}  [{time.time() - t0:.0f} s]", flush=True)
    for name in funcs:
        if name not in F64_FUNCS:
            continue
        fns = {"inline": compiled(name, "cpu-inline-bench"),
               "libm": compiled(name, "cpu-libm-bench"),
               "numpy": getattr(np, name)}
        worst, bad, n = sample_f64(name, fns, args.f64_samples)
        rows.append(("float64", name, worst, bad, None))
        print(f"float64 {name} ({n} samples): " + ", ".join(
            f"{k} {worst[k]:.3f} ulp ({bad[k]} special)" for k in fns), flush=True)
    if args.markdown:
        write_markdown(args, rows)


def write_markdown(args, rows):
    cmd = "python bench/vmath_accuracy.py " + " ".join(sys.argv[1:])
    f32 = ("every float32 (2^32 inputs)" if args.stride == 1 else
           f"every {args.stride}-th float32 bit pattern ({(1 << 32) // args.stride} inputs)")
    lines = [
        "# Accuracy of the inlined math functions",
        "",
        "Generated by `bench/vmath_accuracy.py`; do not edit by hand.  Command:",
        "",
        f"    {cmd}",
        "",
        f"Host: {os.uname().machine}, NumPy {np.__version__}.  float32: {f32}, against the "
        "float64 function evaluated unrounded.  float64: random bit patterns over every "
        f"exponent plus dense grids ({args.f64_samples} + 4 x {args.f64_samples // 4} inputs), "
        "against np.longdouble.  Columns: the maximum error in ULPs of fastlaunch's inline "
        "code (`FASTLAUNCH_MATH=inline`; the default `auto` mode uses it for the exp and log families only), of fastlaunch with `FASTLAUNCH_MATH=libm` (glibc libm/libmvec), and "
        "of NumPy on the same inputs; \"special\" counts inputs whose correctly rounded result "
        "is NaN or inf, or whose computed result is, where the two differ (must be 0).",
        "",
        "| dtype | function | inline max ULP | libm mode max ULP | NumPy max ULP | special mismatches (inline / libm / NumPy) | worst inline input |",
        "|---|---|---|---|---|---|---|",
    ]
    for dt, name, worst, bad, where in rows:
        lines.append(f"| {dt} | {name} | {worst['inline']:.3f} | {worst['libm']:.3f} | "
                     f"{worst['numpy']:.3f} | {bad['inline']} / {bad['libm']} / {bad['numpy']} | "
                     f"{'' if where is None else repr(where)} |")
    lines.append("")
    with open(args.markdown, "w") as fh:
        fh.write("\n".join(lines))


if __name__ == "__main__":
    main()
