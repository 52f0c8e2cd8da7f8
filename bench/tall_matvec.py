"""A tall matrix-vector product, `X.T @ e` with X 100,000 x 50 (a least-squares gradient):
fastlaunch against NumPy, same run.  The product is a BLAS gemv call (csrc/library.c routes
a matrix product with one row or one column there) on X's memory as it is: X.T is X's
transpose flag, not a copy.

    python bench/tall_matvec.py [--batches 7] [--rows 100000] [--cols 50]

Medians of interleaved batches (fastlaunch.benchtools.interleaved); ratio = fastlaunch's
time over NumPy's.  Results are checked against NumPy first (gemv: the same bits).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastlaunch as fl                                        # noqa: E402
from fastlaunch.benchtools import format_table, interleaved    # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--cols", type=int, default=50)
    opts = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for dt in (np.float64, np.float32):
        X = rng.standard_normal((opts.rows, opts.cols)).astype(dt)
        e = rng.standard_normal(opts.rows).astype(dt)
        w = rng.standard_normal(opts.cols).astype(dt)
        for label, fn, args in [("X.T @ e", lambda X, e: X.T @ e, (X, e)),
                                ("X @ w", lambda X, w: X @ w, (X, w)),
                                ("gradient X.T @ (X @ w - e)",
                                 lambda X, w, e: X.T @ (X @ w - e), (X, w, e))]:
            g = fl.compile(fn)
            want, got = fn(*args), g(*args)
            tol = 1e-4 if dt == np.float32 else 1e-10
            assert np.allclose(got, want, rtol=tol, atol=tol * np.abs(want).max()), label
            t = interleaved({"numpy": lambda: fn(*args), "fastlaunch": lambda: g(*args)},
                            batches=opts.batches)
            rows.append([label, np.dtype(dt).name, f"{t['numpy'] * 1e3:.3f}",
                         f"{t['fastlaunch'] * 1e3:.3f}", f"{t['fastlaunch'] / t['numpy']:.2f}"])
            print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"],
                               rows[-1:]), flush=True)
    print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"], rows))


if __name__ == "__main__":
    main()
