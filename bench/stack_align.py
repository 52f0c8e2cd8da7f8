"""Kernel frames aligned for vector spills ("stackrealign") against 16-byte aligned frames.

    python bench/stack_align.py                      # step at 65536 and 4194304, 8 rounds
    python bench/stack_align.py --sizes 4194304 --rounds 12 --threads 1

Why fresh processes: where a thread's stack lands modulo 64 bytes is decided at random when
the process (or thread) starts, so a kernel whose 64-byte vector spills sit in a 16-byte
aligned frame is fast in about one process in four and slow in the others, steadily within
each.  Each round starts one process per variant, in alternating order; each process reports
the median of its timed batches; the table lists every process and the median over rounds.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = r"""
import os, sys, time
import numpy as np
from fastlaunch.codegen import llvm_cpu
if sys.argv[1] == "unaligned":
    footer = llvm_cpu.CPUEmitter.footer
    llvm_cpu.CPUEmitter.footer = lambda self: footer(self).replace(' "stackrealign"', '')
import fastlaunch
from fastlaunch.__main__ import step
n = int(sys.argv[2])
rng = np.random.default_rng(0)
args = (rng.standard_normal(n).astype("f4"), (rng.standard_normal(n) * 0.1).astype("f4"),
        (rng.random(n) * 0.1).astype("f4"), rng.standard_normal(n).astype("f4"), 1e-2)
f = fastlaunch.compile(step)
f(*args)
calls = max(10, 2_000_000 // n)
batches = []
for _ in range(7):
    t = []
    for _ in range(calls):
        t0 = time.perf_counter(); f(*args); t.append(time.perf_counter() - t0)
    batches.append(sorted(t)[len(t) // 2])
print(sorted(batches)[3])
"""

VARIANTS = ("aligned", "unaligned")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="65536,4194304")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0, help="FASTLAUNCH_NUM_THREADS (0: all)")
    a = ap.parse_args(argv)
    env = None
    if a.threads:
        import os
        env = dict(os.environ, FASTLAUNCH_NUM_THREADS=str(a.threads))
    for n in (int(s) for s in a.sizes.split(",")):
        times = {v: [] for v in VARIANTS}
        for r in range(a.rounds):
            for v in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
                out = subprocess.run([sys.executable, "-c", CHILD, v, str(n)], env=env,
                                     check=True, capture_output=True, text=True).stdout
                times[v].append(float(out.split()[-1]))
        print(f"step, n={n}, float32: per-process medians (us), {a.rounds} rounds")
        for v in VARIANTS:
            each = " ".join(f"{t * 1e6:.0f}" for t in times[v])
            print(f"  {v:10s} median {statistics.median(times[v]) * 1e6:8.1f}   [{each}]")
        ratio = statistics.median(times["unaligned"]) / statistics.median(times["aligned"])
        print(f"  unaligned / aligned: {ratio:.2f}x")


if __name__ == "__main__":
    main()
