"""Resident memory of a compiled function that meets many shapes, before and after clear().

    python bench/memory_shapes.py --shapes 1000
    python bench/memory_shapes.py --shapes 1000 --cache-dir ""      # no disk cache: compile all

Runs in a fresh process: one compiled function with a reduction (its kernels are specialised
to each shape, so every shape brings new kernels); a warm-up of `--warmup` shapes and clear()
first (LLVM's pass pipelines, the allocator's first arenas: one-time costs); then `--shapes`
new shapes and clear().  Prints the resident set size (/proc/self/statm) at the start, at the
peak and after clear(), in MB, as JSON on the last line.  The cache holds at most
`--max-entries` signatures (default 512): older ones are dropped, with their kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import gc, json, os, sys, time, warnings
import numpy as np
import fastlaunch as fl
from fastlaunch.backends import get_backend

warnings.simplefilter("ignore")
page = os.sysconf("SC_PAGE_SIZE")

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page / 2**20

shapes, warmup, base, max_entries = (int(x) for x in sys.argv[1:5])
f = fl.compile(lambda a, b: (a * b + 1.0).sum())
if max_entries:
    f.max_entries = max_entries
for n in range(base, base + warmup):
    f(np.ones(n), np.ones(n))
f.clear()
gc.collect()
start = rss_mb()
t0 = time.perf_counter()
peak = start
for n in range(base + warmup, base + warmup + shapes):
    f(np.ones(n), np.ones(n))
    if n % 50 == 0:
        peak = max(peak, rss_mb())
peak = max(peak, rss_mb())
seconds = time.perf_counter() - t0
entries = len(f._entries_list())
f.clear()
gc.collect()
after = rss_mb()
print(json.dumps({"shapes": shapes, "start_mb": start, "peak_mb": peak, "after_clear_mb": after,
                  "entries_at_peak": entries, "seconds": seconds,
                  "loaded_kernels_after": getattr(get_backend("cpu"), "loaded_kernels", None)}))
"""


def measure(shapes: int, warmup: int = 100, base: int = 1000, cache_dir=None,
            tree: str = ROOT, max_entries: int = 0) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    if cache_dir is not None:
        env["FASTLAUNCH_CACHE_DIR"] = cache_dir
    out = subprocess.run([sys.executable, "-c", CHILD, str(shapes), str(warmup), str(base),
                          str(max_entries)],
                         env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--base", type=int, default=1000, help="first array length")
    p.add_argument("--cache-dir", default=None, help="FASTLAUNCH_CACHE_DIR for the child")
    p.add_argument("--max-entries", type=int, default=0, help="0: the default (512)")
    p.add_argument("--tree", default=ROOT)
    a = p.parse_args(argv)
    r = measure(a.shapes, a.warmup, a.base, a.cache_dir, a.tree, a.max_entries)
    print(f"{a.tree}: {r['shapes']} shapes in {r['seconds']:.1f} s: start {r['start_mb']:.1f} MB, "
          f"peak {r['peak_mb']:.1f} MB ({r['entries_at_peak']} entries), after clear() "
          f"{r['after_clear_mb']:.1f} MB ({r['after_clear_mb'] - r['start_mb']:+.1f} MB)")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
