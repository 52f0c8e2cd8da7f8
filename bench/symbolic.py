"""Symbolic sizes (fastlaunch/program/symbolic.py): what an instance costs against a static entry.

    python bench/symbolic.py                 # 4M and 16 elements, new-size cost
    python bench/symbolic.py --big 1000000   # another large size

Three figures, each with the step below (an optimiser update, elementwise: the README's step
without its loss, whose np.mean is a reduction over the size and stays static):

1. replay at `--big` elements (float32): a static entry (dynamic=False) against a symbolic
   instance (the template built at a nearby size, then called at exactly this size);
   interleaved batches, median; target: within 5%.
2. the same at 16 elements; target: within 15%.
3. the first call at a new size after the symbolic trace (instantiate: relations, size
   expressions, verify, link; then run) minus a replay at that size, median over 200 new
   sizes; target: at most 50 us.

It also prints why the README's own step stays static (its trace reason).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import interleaved  # noqa: E402


def step(p, m, v, g, lr):
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v


def readme_step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss


def args_of(n, seed=0):
    rng = np.random.default_rng(seed)
    p, m, v, g = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
    return [p, m, np.abs(v), g, 1e-2]


def replay_pair(n: int, batches: int) -> tuple[float, float]:
    static = fl.compile(step, dynamic=False)
    sym = fl.compile(step, dynamic=True)
    a = args_of(n)
    sym(*args_of(n + 1000 if n > 1000 else n + 8, 1))         # the template's base
    want = static(*a)
    got = sym(*a)                                            # an instance
    assert sym.stats["traces"] == 1 and sym.stats["entries"] == 2, sym.stats
    for w, g in zip(want, got):
        assert np.array_equal(w, g)
    res = interleaved({"static": lambda: static(*a), "symbolic": lambda: sym(*a)},
                      min_batch_seconds=0.05 if n > 10000 else 0.02, batches=batches)
    return res["static"], res["symbolic"]


def new_size_cost(count: int) -> tuple[float, float, float]:
    sym = fl.compile(step, dynamic=True)
    sym(*args_of(64))
    firsts, replays = [], []
    for k in range(count):
        a = args_of(100 + 3 * k, k)
        t0 = time.perf_counter()
        sym(*a)
        t1 = time.perf_counter()
        sym(*a)
        t2 = time.perf_counter()
        sym(*a)
        t3 = time.perf_counter()
        firsts.append(t1 - t0)
        replays.append(min(t2 - t1, t3 - t2))
    assert sym.stats["traces"] == 1, sym.stats
    extra = [f - r for f, r in zip(firsts, replays)]
    return statistics.median(extra), statistics.median(firsts), statistics.median(replays)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--big", type=int, default=4 << 20)
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--batches", type=int, default=9)
    ap.add_argument("--new-sizes", type=int, default=200)
    a = ap.parse_args()
    for n, target in ((a.big, 0.05), (a.small, 0.15)):
        s, y = replay_pair(n, a.batches)
        print(f"n={n:>9}: static {s * 1e6:9.2f} us, symbolic {y * 1e6:9.2f} us, "
              f"ratio {y / s:.3f} (target <= {1 + target:.2f})")
    extra, first, replay = new_size_cost(a.new_sizes)
    print(f"new size: first call {first * 1e6:.1f} us, replay {replay * 1e6:.1f} us, "
          f"extra {extra * 1e6:.1f} us (target <= 50 us)")
    c = fl.compile(readme_step)
    for n in (16, 24):
        c(*args_of(n))
    print(f"README step: {c.stats['history'][-1].reason}")


if __name__ == "__main__":
    main()
