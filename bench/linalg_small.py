"""Small dense linear algebra, batched: fastlaunch (LAPACK library calls, LIBCALL) against
NumPy's batched np.linalg in the same run.

    python bench/linalg_small.py            # 4x4 x 10 000 inv / solve / det (+ 16x16, 64x64)

Medians of interleaved batches; ratio = fastlaunch / NumPy (below 1: faster).  Results are
checked against NumPy first.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastlaunch as fl                                        # noqa: E402
from fastlaunch.benchtools import format_table, interleaved    # noqa: E402

FUNCS = {
    "inv": (lambda a, b: np.linalg.inv(a)),
    "solve": (lambda a, b: np.linalg.solve(a, b)),
    "det": (lambda a, b: np.linalg.det(a)),
    "slogdet": (lambda a, b: tuple(np.linalg.slogdet(a))),
    "cholesky": (lambda a, b: np.linalg.cholesky(a)),
    "eigh": (lambda a, b: tuple(np.linalg.eigh(a))),
}


def main(batches: int, quick: bool):
    rng = np.random.default_rng(0)
    shapes = [(10000, 4)] if quick else [(10000, 4), (1000, 16), (100, 64)]
    rows, out = [], []
    for batch, n in shapes:
        for dt in (np.float32, np.float64):
            x = rng.standard_normal((batch, n, n))
            a = (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dt)    # SPD: every fn works
            b = rng.standard_normal((batch, n, 1)).astype(dt)
            for name, fn in FUNCS.items():
                if quick and name not in ("inv", "solve"):
                    continue
                g = fl.compile(fn)
                want, got = fn(a, b), g(a, b)
                for w, v in zip(want if isinstance(want, tuple) else (want,),
                                got if isinstance(got, tuple) else (got,)):
                    if name == "eigh":
                        w, v = np.abs(w), np.abs(v)
                    np.testing.assert_allclose(v, w, rtol=2e-3 if dt == np.float32 else 1e-8,
                                               atol=1e-4 if dt == np.float32 else 1e-10)
                t = interleaved({"numpy": lambda: fn(a, b), "fastlaunch": lambda: g(a, b)},
                                batches=batches)
                ratio = t["fastlaunch"] / t["numpy"]
                row = [f"{name} {n}x{n} x {batch}", np.dtype(dt).name,
                       f"{t['numpy'] * 1e3:.3f}", f"{t['fastlaunch'] * 1e3:.3f}", f"{ratio:.2f}"]
                rows.append(row)
                print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"], [row]),
                      flush=True)
                out.append(dict(case=row[0], dtype=row[1], numpy_ms=t["numpy"] * 1e3,
                                fastlaunch_ms=t["fastlaunch"] * 1e3, ratio=ratio))
    print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"], rows))
    print(json.dumps(out))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="only 4x4 x 10000 inv and solve")
    opts = ap.parse_args()
    main(opts.batches, opts.quick)
