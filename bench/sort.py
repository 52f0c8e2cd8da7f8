"""Sorting along the last axis, compiled against NumPy, in the same run (issue 12, acceptance 4:
np.sort of (1000, 1000) float32 within 1.5x of NumPy).

    python bench/sort.py                         # the acceptance case plus a few more
    python bench/sort.py --shape 1000,1000 --dtype float32 --batches 9

Each case is checked against NumPy first (sort: exactly; argsort: stable kind, exactly), then
timed with benchtools.interleaved: NumPy and the compiled call alternate in batches and the
median seconds per call of each is reported with their ratio.  Run it once with the default
worker pool and once with FASTLAUNCH_NUM_THREADS=1 to see the single-thread kernel.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import fmt_time, format_table, interleaved  # noqa: E402

CASES = {
    "sort": (lambda a: np.sort(a, axis=-1), lambda a: np.sort(a, axis=-1)),
    "argsort stable": (lambda a: np.argsort(a, axis=-1, kind="stable"),
                       lambda a: np.argsort(a, axis=-1, kind="stable")),
    "sort axis 0": (lambda a: np.sort(a, axis=0), lambda a: np.sort(a, axis=0)),
    "median": (lambda a: np.median(a, axis=-1), lambda a: np.median(a, axis=-1)),
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="1000,1000")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batches", type=int, default=9)
    p.add_argument("--batch-seconds", type=float, default=0.1)
    p.add_argument("--case", action="append", help=f"one of {', '.join(CASES)} (default: all)")
    args = p.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split(","))
    x = np.random.default_rng(0).standard_normal(shape).astype(args.dtype)
    rows = []
    for name in args.case or CASES:
        ref, body = CASES[name]
        compiled = fl.compile(body)
        want, got = ref(x), compiled(x)
        if not np.array_equal(want, got, equal_nan=True):
            raise SystemExit(f"{name}: the compiled result differs from NumPy's")
        t = interleaved({"numpy": lambda: ref(x), "compiled": lambda: compiled(x)},
                        min_batch_seconds=args.batch_seconds, batches=args.batches)
        rows.append([name, f"{args.dtype}{list(shape)}", fmt_time(t["numpy"]),
                     fmt_time(t["compiled"]), f"{t['compiled'] / t['numpy']:.2f}"])
    print(f"threads: {os.environ.get('FASTLAUNCH_NUM_THREADS', 'default')}, "
          f"numpy {np.__version__}")
    print(format_table(["case", "input", "numpy", "compiled", "compiled/numpy"], rows))


if __name__ == "__main__":
    main()
