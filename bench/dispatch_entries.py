"""Dispatch cost against the number of live cache entries of one compiled function.

    python bench/dispatch_entries.py                      # timings, 1 and 1000 entries
    python bench/dispatch_entries.py --entries 1,100,1000 --instructions

Each configuration runs in a fresh process: one compiled function (a small elementwise body
at 16 float64 elements) is traced once, then its cache is filled with N - 1 further entries
for other shapes (entries cloned from the traced one with those shapes' signatures: the
dispatcher sees N genuine entries without N traces), and the calls are timed:

  mru        the most recently used entry, over and over (a loop calling with one signature)
  alternate  two traced entries in turn, so that every call misses the most-recent slot and
             goes through the hash table (at least 2 entries)

`--instructions` also counts the instructions per call under callgrind (inside the
dispatcher's __call__, the difference between 3000 and 1000 calls, so set-up cancels out):
repeatable to a few instructions, unlike timings on a loaded machine.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETUP = r"""
import sys
import numpy as np
import fastlaunch as fl
from fastlaunch import _core

def body(a, b):
    return a * b + 1.0

n_entries, mode = int(sys.argv[1]), sys.argv[2]
f = fl.compile(body)
f.max_entries = n_entries + 8
a, b = np.ones(16), np.full(16, 2.0)
c, d = np.ones(17), np.full(17, 2.0)
f(c, d)                              # traced (the second measured entry, alternate mode)
f(a, b)                              # traced
keep = 2 if mode == "alternate" else 1
if keep == 1:
    f._forget()
    f(a, b)
traced = f._entries_list()[-1]
# the other entries: other shapes' signatures, cloned from the traced entry (never called)
for k in range(n_entries - keep):
    x = np.ones(100 + k)
    f._install(_core.Entry(_core.encode((x, x), ())[0], [], [], traced.executable, traced.info))
f(a, b)                              # the measured entry is the most recently used
assert len(f._entries_list()) == max(n_entries, keep), len(f._entries_list())
if mode == "alternate":
    def call():
        f(a, b)
        f(c, d)
else:
    def call():
        f(a, b)
"""

TIME_CHILD = SETUP + r"""
import json
from fastlaunch.benchtools import interleaved
res = interleaved({"call": call}, min_batch_seconds=0.02, batches=15)
print(json.dumps(res["call"] / (2 if mode == "alternate" else 1)))
"""

COUNT_CHILD = SETUP + r"""
for _ in range(int(sys.argv[3])):
    call()
"""


def _env():
    return dict(os.environ, PYTHONPATH=ROOT, FASTLAUNCH_CACHE_DIR="", FASTLAUNCH_NUM_THREADS="1",
                PYTHONHASHSEED="0")


def seconds_per_call(n: int, mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", TIME_CHILD, str(n), mode], env=_env(), cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _count(n: int, mode: str, calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--collect-atstart=no",
                        "--toggle-collect=__pyx_pw_*Dispatcher_*__call__",
                        sys.executable, "-c", COUNT_CHILD, str(n), mode, str(calls)],
                       env=_env(), cwd=ROOT, capture_output=True, text=True, check=True)
        text = open(out).read()
    return int(re.search(r"^summary:\s+(\d+)", text, re.M).group(1))


def instructions_per_call(n: int, mode: str) -> float:
    per_round = 2 if mode == "alternate" else 1
    return (_count(n, mode, 3000) - _count(n, mode, 1000)) / (2000 * per_round)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", default="1,1000")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--instructions", action="store_true")
    a = p.parse_args(argv)
    counts = [int(x) for x in a.entries.split(",")]
    rows = []
    for mode in ("mru", "alternate"):
        for n in counts:
            times = [seconds_per_call(n, mode) for _ in range(a.rounds)]
            row = {"mode": mode, "entries": n, "ns": statistics.median(times) * 1e9}
            if a.instructions:
                row["instructions"] = instructions_per_call(n, mode)
            rows.append(row)
    print(f"{'lookup':<10} {'entries':>8} {'ns/call':>9}" +
          (f" {'instr/call':>11}" if a.instructions else ""))
    for r in rows:
        print(f"{r['mode']:<10} {r['entries']:>8} {r['ns']:9.0f}" +
              (f" {r['instructions']:11.0f}" if a.instructions else ""))


if __name__ == "__main__":
    main()
