"""Speed of the inlined math functions (codegen/vmath.py) against fastlaunch's libm/libmvec
mode and NumPy, side by side in one process: medians of interleaved batches
(fastlaunch.benchtools.interleaved), ratios within the same run.

    python bench/vmath.py                   # 4,194,304 float32 elements
    python bench/vmath.py --n 65536 --batches 9
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl                                        # noqa: E402
from fastlaunch.backends import register_backend                # noqa: E402
from fastlaunch.benchtools import format_table, fmt_time, interleaved  # noqa: E402
from workloads import WORKLOADS                                 # noqa: E402


def _libm_backend():
    from fastlaunch.backends.cpu import CPUBackend
    return CPUBackend(math="libm")


register_backend("cpu-libm-vmath", _libm_backend)


def sincos(x):
    return np.sin(x) + np.cos(x)


CASES = {
    "sin": (np.sin, lambda rng, n: (rng.uniform(-100, 100, n).astype(np.float32),)),
    "cos": (np.cos, lambda rng, n: (rng.uniform(-100, 100, n).astype(np.float32),)),
    "sin+cos": (sincos, lambda rng, n: (rng.uniform(-100, 100, n).astype(np.float32),)),
    "exp": (np.exp, lambda rng, n: (rng.uniform(-80, 80, n).astype(np.float32),)),
    "log": (np.log, lambda rng, n: (rng.uniform(0, 1000, n).astype(np.float32),)),
    "tanh": (np.tanh, lambda rng, n: (rng.uniform(-5, 5, n).astype(np.float32),)),
    "black_scholes": (WORKLOADS["black_scholes"].fn,
                      lambda rng, n: WORKLOADS["black_scholes"].make_args(n, rng)),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4_194_304)
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--cases", default=",".join(CASES))
    args = ap.parse_args(argv)
    rows = []
    for name in args.cases.split(","):
        fn, make = CASES[name]
        a = make(np.random.default_rng(0), args.n)
        inline = fl.compile(fn, backend="cpu")
        libm = fl.compile(fn, backend="cpu-libm-vmath")
        want = fn(*a)
        for label, f in (("inline", inline), ("libm", libm)):
            got = f(*a)
            err = np.max(np.abs(got - want) / (1 + np.abs(want)))
            assert err < 1e-3, (name, label, err)
        t = interleaved({"inline": lambda: inline(*a), "libm": lambda: libm(*a),
                         "numpy": lambda: fn(*a)}, batches=args.batches)
        rows.append([name, fmt_time(t["inline"]), fmt_time(t["libm"]), fmt_time(t["numpy"]),
                     f"{t['libm'] / t['inline']:.2f}x", f"{t['numpy'] / t['inline']:.2f}x"])
        print(" ".join(map(str, rows[-1])), flush=True)
    print()
    print(f"float32, n = {args.n:,}, medians of {args.batches} interleaved batches")
    print(format_table(["case", "inline", "libm mode", "NumPy", "libm/inline", "NumPy/inline"],
                       rows))


if __name__ == "__main__":
    main()
