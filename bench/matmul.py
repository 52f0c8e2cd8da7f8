"""Matrix products: fastlaunch (BLAS gemm through LIBCALL) against np.matmul, same run.

    python bench/matmul.py                 # 64^3 .. 1024^3 and batched cases, float32/float64
    python bench/matmul.py --full          # adds 2048^3
    python bench/matmul.py --threshold     # small sizes: the gemm call against the compiled
                                           # (tiled) kernel, the measurement behind
                                           # cpu_schedule.GEMM_MIN_FLOPS
    python bench/matmul.py --instructions  # instructions per call under callgrind, one
                                           # BLAS thread: NumPy's matmul against the replay

On a loaded machine timings drift by much more than 10%; `--instructions` counts what one
call executes (callgrind: inside np.matmul's ufunc call for NumPy, inside the dispatcher's
__call__ for fastlaunch; the difference of runs with 3 and 1 calls), which is repeatable.

Medians of interleaved batches (fastlaunch.benchtools.interleaved); the ratio is fastlaunch's
time over NumPy's (below 1: faster).  Results are checked against NumPy first.  BLAS threads
are OpenBLAS's own (scipy's build for fastlaunch, NumPy's for NumPy): set OPENBLAS_NUM_THREADS
to compare at a fixed thread count.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastlaunch as fl                                        # noqa: E402
from fastlaunch.backends import cpu_schedule                   # noqa: E402
from fastlaunch.benchtools import format_table, interleaved    # noqa: E402


def cases(full: bool):
    sizes = [64, 128, 256, 512, 1024] + ([2048] if full else [])
    for dt in (np.float32, np.float64):
        for n in sizes:
            yield f"{n}^3", dt, (n, n), (n, n)
        yield "batched 64 x 64^3", dt, (64, 64, 64), (64, 64, 64)
        yield "batched 8 x 256^3", dt, (8, 256, 256), (8, 256, 256)
        yield "broadcast 8 x 256^3 @ W", dt, (8, 256, 256), (256, 256)
        yield "MLP layer tanh(x @ W + b) 512x256x256", dt, (512, 256), (256, 256)


def _fn(label):
    if label.startswith("MLP"):
        return lambda x, w, b: np.tanh(x @ w + b)
    return lambda a, b: a @ b


def run(full: bool, batches: int):
    rows, out = [], []
    rng = np.random.default_rng(0)
    for label, dt, sa, sb in cases(full):
        a = rng.standard_normal(sa).astype(dt)
        b = rng.standard_normal(sb).astype(dt)
        args = (a, b) + ((rng.standard_normal(sb[-1]).astype(dt),) if label.startswith("MLP") else ())
        fn = _fn(label)
        g = fl.compile(fn)
        want, got = fn(*args), g(*args)
        err = float(np.max(np.abs(want - got)) / max(1e-30, float(np.max(np.abs(want)))))
        assert err < (1e-5 if dt == np.float32 else 1e-12), (label, err)
        t = interleaved({"numpy": lambda: fn(*args), "fastlaunch": lambda: g(*args)},
                        batches=batches)
        ratio = t["fastlaunch"] / t["numpy"]
        rows.append([label, np.dtype(dt).name, f"{t['numpy'] * 1e3:.3f}",
                     f"{t['fastlaunch'] * 1e3:.3f}", f"{ratio:.2f}"])
        out.append(dict(case=label, dtype=np.dtype(dt).name, numpy_ms=t["numpy"] * 1e3,
                        fastlaunch_ms=t["fastlaunch"] * 1e3, ratio=ratio))
        print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"], rows[-1:]),
              flush=True)
    print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"], rows))
    print(json.dumps(out))


def threshold(batches: int):
    """The gemm call against the compiled kernel on small products (and batches of them)."""
    rows = []
    rng = np.random.default_rng(0)
    saved = cpu_schedule.GEMM_MIN_FLOPS
    for batch in (1, 1000):
        for n in (4, 8, 12, 16, 24, 32, 48, 64):
            for dt in (np.float32, np.float64):
                shape = (batch, n, n) if batch > 1 else (n, n)
                a, b = rng.standard_normal(shape).astype(dt), rng.standard_normal(shape).astype(dt)
                try:
                    cpu_schedule.GEMM_MIN_FLOPS = 0
                    blas = fl.compile(lambda a, b: a @ b)
                    blas(a, b)
                    cpu_schedule.GEMM_MIN_FLOPS = 1 << 62
                    kern = fl.compile(lambda a, b: a @ b)
                    kern(a, b)
                finally:
                    cpu_schedule.GEMM_MIN_FLOPS = saved
                t = interleaved({"numpy": lambda: a @ b, "gemm": lambda: blas(a, b),
                                 "kernel": lambda: kern(a, b)}, batches=batches)
                rows.append([f"{batch} x {n}^3", np.dtype(dt).name,
                             f"{t['numpy'] * 1e6:.1f}", f"{t['gemm'] * 1e6:.1f}",
                             f"{t['kernel'] * 1e6:.1f}"])
                print(format_table(["case", "dtype", "NumPy us", "gemm us", "kernel us"],
                                   rows[-1:]), flush=True)
    print(format_table(["case", "dtype", "NumPy us", "gemm us", "kernel us"], rows))


COUNT_CHILD = r"""
import sys
import numpy as np
import fastlaunch as fl
which, dt, calls = sys.argv[1], np.dtype(sys.argv[2]), int(sys.argv[3])
sa, sb = eval(sys.argv[4]), eval(sys.argv[5])
rng = np.random.default_rng(0)
a, b = rng.standard_normal(sa).astype(dt), rng.standard_normal(sb).astype(dt)
f = fl.compile(lambda a, b: a @ b)
f(a, b)
np.matmul(a, b)
for _ in range(calls):
    f(a, b) if which == "fastlaunch" else np.matmul(a, b)
"""


def _count(which, dt, sa, sb, calls) -> int:
    import re
    import subprocess
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, FASTLAUNCH_CACHE_DIR="", OPENBLAS_NUM_THREADS="1",
               FASTLAUNCH_NUM_THREADS="1", PYTHONHASHSEED="0")
    toggle = "__pyx_pw_*Dispatcher_*__call__" if which == "fastlaunch" else \
        "ufunc_generic_fastcall"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--collect-atstart=no", f"--toggle-collect={toggle}",
                        sys.executable, "-c", COUNT_CHILD, which, np.dtype(dt).name, str(calls),
                        repr(sa), repr(sb)],
                       env=env, cwd=root, capture_output=True, text=True, check=True)
        text = open(out).read()
    return int(re.search(r"^summary:\s+(\d+)", text, re.M).group(1))


def instructions():
    rows = []
    for label, sa, sb in [("64^3", (64, 64), (64, 64)), ("256^3", (256, 256), (256, 256)),
                          ("512^3", (512, 512), (512, 512)),
                          ("batched 8 x 64^3", (8, 64, 64), (8, 64, 64)),
                          ("batched 4 x 256^3", (4, 256, 256), (4, 256, 256))]:
        for dt in (np.float32, np.float64):
            per = {w: (_count(w, dt, sa, sb, 3) - _count(w, dt, sa, sb, 1)) / 2
                   for w in ("numpy", "fastlaunch")}
            rows.append([label, np.dtype(dt).name, f"{per['numpy']:.0f}",
                         f"{per['fastlaunch']:.0f}", f"{per['fastlaunch'] / per['numpy']:.3f}"])
            print(format_table(["case", "dtype", "NumPy instr", "fastlaunch instr", "ratio"],
                               rows[-1:]), flush=True)
    print(format_table(["case", "dtype", "NumPy instr", "fastlaunch instr", "ratio"], rows))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="include 2048^3")
    ap.add_argument("--threshold", action="store_true", help="gemm vs compiled kernel, small")
    ap.add_argument("--instructions", action="store_true",
                    help="instructions per call (callgrind, one BLAS thread)")
    ap.add_argument("--batches", type=int, default=7)
    opts = ap.parse_args()
    if opts.instructions:
        instructions()
    elif opts.threshold:
        threshold(opts.batches)
    else:
        run(opts.full, opts.batches)
