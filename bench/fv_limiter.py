"""A 1-D finite-volume step as CFD teaching codes write it (Burgers, MUSCL reconstruction
with a minmod or van Leer slope limiter, a Rusanov flux, two periodic ghost cells each side
filled from the interior), with and without the limiter, and the limiter alone: fastlaunch
against NumPy, same run, with the fused plan's kernels, per-element work and stores.

    python bench/fv_limiter.py [--n 1000000] [--batches 5]
    PYTHONPATH=/work/prev python bench/fv_limiter.py      # another tree (no sys.path edit)

The steps are tests/unit/test_finite_volume.py's.  Medians of interleaved batches
(benchtools.interleaved), one thread unless FASTLAUNCH_NUM_THREADS says otherwise.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if "PYTHONPATH" not in os.environ:
    sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
os.environ.setdefault("FASTLAUNCH_NUM_THREADS", "1")

import fastlaunch as fl                                        # noqa: E402
from fastlaunch.benchtools import format_table, interleaved    # noqa: E402
from test_finite_volume import (first_order_step, minmod, muscl_step,  # noqa: E402
                                plan_work, upwind_roll, van_leer_step, wave)


def limiter_alone(u):
    return minmod(u[1:-1] - u[:-2], u[2:] - u[1:-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=5)
    a = ap.parse_args()
    u = wave(a.n, np.float64, 0)
    print(f"fastlaunch from {os.path.dirname(fl.__file__)}, n={a.n}, float64")
    rows = []
    for name, fn, args in [("first order + ghosts", first_order_step, (u, 0.3)),
                           ("minmod MUSCL + ghosts", muscl_step, (u, 0.3)),
                           ("van Leer MUSCL + ghosts", van_leer_step, (u, 0.3)),
                           ("minmod, np.roll", upwind_roll, (u, 0.3)),
                           ("minmod limiter alone", limiter_alone, (u,))]:
        f = fl.compile(fn)
        np.testing.assert_allclose(f(*args), fn(*args), rtol=1e-12, atol=1e-12)
        kernels, work, stored = plan_work(fn, *args)
        t = interleaved({"fl": lambda: f(*args), "np": lambda: fn(*args)}, batches=a.batches)
        rows.append([name, f"{t['fl'] * 1e3:.3f} ms", f"{t['np'] * 1e3:.2f} ms",
                     f"{t['np'] / t['fl']:.1f}x", str(len(kernels)), f"{work:.1f}",
                     f"{stored:.2f}"])
    print(format_table(["step", "fastlaunch", "NumPy", "speed-up", "kernels", "work/elem",
                        "stores/elem"], rows))


if __name__ == "__main__":
    main()
