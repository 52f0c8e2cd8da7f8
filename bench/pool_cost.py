"""The measurements behind the CPU schedule's thread decisions (backends/cpu_schedule.py:
NS_PER_WORK, SPLIT_NS, THREAD_NS): serial time per unit of estimated work, and what a split
over the worker pool costs.

    python bench/pool_cost.py                  # a few minutes; run it on a quiet machine
    python bench/pool_cost.py --rounds 9

1. ns per work unit: each workload's kernels at sizes that fit in the caches, run on the
   caller alone (`_core.set_parallel_threshold` above every launch), the empty call's time
   taken off, over (launch size x work per launch index) summed over the kernels.
2. the split: the 14-op chain (bench/workloads.chain_user) at sizes from 2048 to 262144,
   serial (S) against split over the whole pool (P, `set_parallel_threshold(0)`), in
   alternating batches; with t threads, P - S / t is what the split costs (hand-off, claims,
   join, cache lines moving between cores).  The smallest size where P < S is the break-even.

Times are the minimum over rounds of per-batch medians (the least disturbed), with the load
average printed beside them: on a loaded machine the split's cost grows with it (a worker
waits for a core), which is why the schedule asks several times SPLIT_NS of work per thread.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl  # noqa: E402
from fastlaunch import _core  # noqa: E402
from fastlaunch.backends import cpu_schedule  # noqa: E402
from fastlaunch.benchtools import floor_call  # noqa: E402
from workloads import WORKLOADS, as_list  # noqa: E402

SERIAL = 1 << 62          # a parallel threshold above every launch: all on the caller
WHOLE_POOL = 0            # every launch over the whole pool


def per_call(fn, seconds: float) -> float:
    """Median per-call time over 5 short batches."""
    fn()
    n, t = 1, 0.0
    while t < seconds / 20:
        n *= 2
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
    calls = max(1, int(n * seconds / 5 / t))
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls)
    return statistics.median(samples)


def with_threshold(threshold, fn):
    def run():
        _core.set_parallel_threshold(threshold)
        try:
            return fn()
        finally:
            _core.set_parallel_threshold(-1)
    return run


def ns_per_work(rounds: int) -> list:
    rows = []
    for name in ("chain", "chain_user", "normalise", "softmax", "black_scholes",
                 "black_scholes_poly", "step"):
        w = WORKLOADS[name]
        for n in (16384, 65536):
            args = w.args(n)
            f = fl.compile(w.fn)
            out = f(*args)
            floor = floor_call(as_list(out))
            work = sum(k.schedule.launch_size * max(k.schedule.work_per_item, 1)
                       for k in f.lower(*args).plan.kernels if k.schedule is not None)
            best = min(with_threshold(SERIAL, lambda: per_call(lambda: f(*args), 0.05))() -
                       per_call(lambda: floor(*args), 0.02) for _ in range(rounds))
            rows.append((name, n, work, best, best * 1e9 / work))
    return rows


def split_cost(rounds: int) -> list:
    w = WORKLOADS["chain_user"]
    f = fl.compile(w.fn)
    rows = []
    for n in (2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144):
        args = w.args(n)
        f(*args)
        s, p = [], []
        for _ in range(rounds):
            time.sleep(0.02)
            s.append(with_threshold(SERIAL, lambda: per_call(lambda: f(*args), 0.03))())
            time.sleep(0.02)
            p.append(with_threshold(WHOLE_POOL, lambda: per_call(lambda: f(*args), 0.03))())
        rows.append((n, min(s), min(p), statistics.median(s), statistics.median(p)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    threads = _core.start_threads(0)
    print(f"fastlaunch {fl.__version__}; pool of {threads} threads; load average "
          f"{os.getloadavg()[0]:.2f}")
    rows = ns_per_work(a.rounds)
    print("\n1. serial time per unit of work (minimum over rounds, empty call taken off)")
    print(f"{'workload':20s} {'n':>7s} {'work':>10s} {'time':>10s} {'ns/work':>8s}")
    for name, n, work, t, r in rows:
        print(f"{name:20s} {n:7d} {work:10d} {t * 1e6:8.1f}us {r:8.4f}")
    print(f"median ns/work {statistics.median(r for *_, r in rows):.4f} (schedule: "
          f"NS_PER_WORK = {cpu_schedule.NS_PER_WORK})")
    rows = split_cost(a.rounds)
    print(f"\n2. the 14-op chain, serial (S) vs split over {threads} threads (P); "
          f"cost of the split P - S/{threads}")
    print(f"{'n':>7s} {'S min':>9s} {'P min':>9s} {'P-S/t min':>10s} {'S med':>9s} "
          f"{'P med':>9s} {'P-S/t med':>10s}")
    even = None
    for n, s, p, sm, pm in rows:
        print(f"{n:7d} {s * 1e6:7.2f}us {p * 1e6:7.2f}us {(p - s / threads) * 1e9:8.0f}ns "
              f"{sm * 1e6:7.2f}us {pm * 1e6:7.2f}us {(pm - sm / threads) * 1e9:8.0f}ns")
        if even is None and p < s:
            even = n
    print(f"break-even (minimum times): n = {even}; schedule: SPLIT_NS = "
          f"{cpu_schedule.SPLIT_NS}, THREAD_NS = {cpu_schedule.THREAD_NS}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
