"""k-means step at 2M points: assign each point to its nearest centroid (argmin of squared
distances), then per-cluster sums and counts with np.bincount(labels, weights, minlength=k).

    python bench/kmeans_bincount.py                   # 2M points, k=8, d=3, float64
    python bench/kmeans_bincount.py --n 200000 --k 16 --d 2
    python bench/kmeans_bincount.py --dtype float32

Runners (each checked against NumPy before timing):
  numpy            the NumPy code below
  fastlaunch       fastlaunch.compile of the same code (replayed calls)
  numba            @njit of an explicit loop over the points (serial), if numba is installed
Two formulations of the distances are timed: "broadcast" sums ((x[:, None] - c)**2) over the
last axis (NumPy materialises an (n, k, d) array); "unrolled" adds the d squared differences
of (n, k) arrays in a Python loop.  fastlaunch fuses the distances into the argmin in both:
a sum of at most ops.SMALL_REDUCE (8) elements per result is unrolled by the fuser into
elementwise additions in NumPy's order (fuse.unroll_small_reductions), so the broadcast form's
sum over d no longer makes an (n, k) temporary between two reductions, and its labels are
NumPy's bit for bit, float32 included.  Times are medians of interleaved batches
(fastlaunch.benchtools.interleaved); the machine's load average is printed with them.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import fastlaunch as fl
from fastlaunch.benchtools import format_table, fmt_time, interleaved


def step_broadcast(x, c):
    k = c.shape[0]
    labels = ((x[:, None, :] - c[None, :, :]) ** 2).sum(-1).argmin(1)
    counts = np.bincount(labels, minlength=k)
    sums = np.stack([np.bincount(labels, weights=x[:, j], minlength=k)
                     for j in range(x.shape[1])], axis=1)
    return sums, counts


def step_unrolled(x, c):
    k, d = c.shape
    dist = (x[:, 0:1] - c[None, :, 0]) ** 2
    for j in range(1, d):
        dist = dist + (x[:, j:j + 1] - c[None, :, j]) ** 2
    labels = dist.argmin(1)
    counts = np.bincount(labels, minlength=k)
    sums = np.stack([np.bincount(labels, weights=x[:, j], minlength=k) for j in range(d)],
                    axis=1)
    return sums, counts


def numba_step():
    try:
        from numba import njit
    except ImportError as err:
        return None, f"not available: {err}"

    @njit(cache=False)
    def step(x, c):
        n, d = x.shape
        k = c.shape[0]
        sums = np.zeros((k, d))
        counts = np.zeros(k, np.int64)
        for i in range(n):
            best, best_j = np.inf, 0
            for j in range(k):
                s = 0.0
                for m in range(d):
                    t = x[i, m] - c[j, m]
                    s += t * t
                if s < best:
                    best, best_j = s, j
            counts[best_j] += 1
            for m in range(d):
                sums[best_j, m] += x[i, m]
        return sums, counts
    return step, "njit, serial loop"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--batches", type=int, default=7)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    dt = np.dtype(args.dtype)
    x = rng.standard_normal((args.n, args.d)).astype(dt)
    c = rng.standard_normal((args.k, args.d)).astype(dt)
    nb, nb_note = numba_step()
    print(f"k-means step: n={args.n} points, k={args.k} clusters, d={args.d}, {dt}; "
          f"{os.cpu_count()} CPUs, load average before: "
          f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    rows = []
    for name, body in (("broadcast", step_broadcast), ("unrolled", step_unrolled)):
        ref_sums, ref_counts = body(x, c)
        compiled = fl.compile(body)
        sums, counts = compiled(x, c)
        assert counts.dtype == ref_counts.dtype and np.array_equal(counts, ref_counts), name
        assert sums.dtype == ref_sums.dtype and np.allclose(sums, ref_sums, rtol=1e-9), name
        runners = {"numpy": lambda: body(x, c), "fastlaunch": lambda: compiled(x, c)}
        if nb is not None:
            s2, c2 = nb(x, c)
            assert np.array_equal(c2, ref_counts) and np.allclose(s2, ref_sums, rtol=1e-9)
            runners["numba"] = lambda: nb(x, c)
        times = interleaved(runners, min_batch_seconds=0.3, batches=args.batches)
        base = times["numpy"]
        for r, t in times.items():
            rows.append([name, r, fmt_time(t), f"{base / t:.1f}x"])
        rows.append([name, "(fastlaunch kernels)", str(compiled.stats["history"][-1].kernels),
                     ""])
    print(format_table(["distances", "runner", "median per call", "vs numpy"], rows))
    if nb is None:
        print(f"numba: {nb_note}")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
