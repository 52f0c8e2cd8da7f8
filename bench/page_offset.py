"""How a kernel's time depends on where its inputs sit in a 4 KiB page relative to its
pooled output (4K aliasing: a load whose address matches an in-flight store's in the low 12
bits waits for it), one source of the 65,536-element cells' run-to-run spread (issue 31).

    python bench/page_offset.py                       # chain at 65536, d from -1024 to 1024
    python bench/page_offset.py --workload chain_user --n 65536 --step 16

The output is the memory pool's block (the same one on every call: results are dropped), at
page offset O; the inputs are copied to page offset O + d and the replay is timed serially
(`_core.set_parallel_threshold` above every launch, so the pool's hand-off adds no noise):
the minimum over batches per d, and its ratio to the median over all d.  Where an array of
128 KiB and up lands in its page depends on the process's allocation history (glibc serves
it from mmap, at offset 16, until a large block is freed, then from the heap at any 16-byte
offset), so d differs from one process to the next.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl  # noqa: E402
from fastlaunch import _core  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

PAGE = 4096


def at_page_offset(a: np.ndarray, offset: int, keep: list) -> np.ndarray:
    """A copy of `a` whose data starts `offset` bytes into a page."""
    buf = np.empty(a.nbytes + 2 * PAGE, np.uint8)
    keep.append(buf)
    start = (-buf.ctypes.data) % PAGE + offset % PAGE
    out = buf[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def best_time(f, args, batches: int, calls: int) -> float:
    best = float("inf")
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            f(*args)
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="chain", choices=sorted(WORKLOADS))
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--lo", type=int, default=-1024)
    ap.add_argument("--hi", type=int, default=1024)
    ap.add_argument("--step", type=int, default=32)
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--calls", type=int, default=100)
    a = ap.parse_args(argv)
    w = WORKLOADS[a.workload]
    base = w.args(a.n)
    f = fl.compile(w.fn)
    _core.set_parallel_threshold(1 << 62)       # every launch on the caller alone
    try:
        out = f(*base)
        outputs = out if isinstance(out, tuple) else (out,)
        page = outputs[0].ctypes.data % PAGE
        del out, outputs
        rows = []
        for d in range(a.lo, a.hi, a.step):
            keep: list = []
            args = tuple(at_page_offset(x, page + d, keep) if isinstance(x, np.ndarray) else x
                         for x in base)
            f(*args)
            rows.append((d, best_time(f, args, a.batches, a.calls)))
    finally:
        _core.set_parallel_threshold(-1)
    median = statistics.median(t for _, t in rows)
    print(f"{a.workload} at n={a.n}: output at page offset {page}; inputs at offset + d; "
          f"serial; min of {a.batches} batches of {a.calls} calls; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("     d   per call  vs median")
    for d, t in rows:
        mark = "  <-" if t > 1.1 * median else ""
        print(f"{d:6d} {t * 1e6:8.2f} us  {t / median:8.2f}x{mark}")


if __name__ == "__main__":
    main()
