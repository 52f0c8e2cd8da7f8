"""Replay cost per call at small sizes, for one or more source trees side by side.

    python bench/replay_ab.py                          # this tree
    python bench/replay_ab.py /path/to/old /path/to/new --rounds 7

Each round starts one fresh process per tree (in alternating order), so that both trees see
the same machine noise; each process times the README's optimisation step at 16 elements
(float32) and an empty call of the same arguments in interleaved batches, and reports its
median.  The table gives the median over rounds of those medians.  This is the check for
changes that touch the replay path: "within 5%" means the ratio column.

    python bench/replay_ab.py /old /new --instructions   # + instructions per call (callgrind)

Timings on a shared 2-core machine drift by 30% between runs; `--instructions` also counts
the instructions one replay call executes under valgrind's callgrind (the difference between
runs of 1000 and 3000 calls, so start-up and tracing cancel out), which is repeatable to a
few instructions and is the number to compare when the timings disagree.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys
import numpy as np
import fastlaunch as fl
from fastlaunch.benchtools import floor_call, interleaved

def step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss

n = int(sys.argv[1])
rng = np.random.default_rng(0)
p, m, v, t = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
f = fl.compile(step)
out = f(p, m, v, t, 1e-2)
floor = floor_call(list(out))
res = interleaved({"replay": lambda: f(p, m, v, t, 1e-2),
                   "floor": lambda: floor(p, m, v, t, 1e-2)},
                  min_batch_seconds=0.02, batches=9)
print(json.dumps(res))
"""


COUNT_CHILD = r"""
import sys
import numpy as np
import fastlaunch as fl

def step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss

n, calls = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
p, m, v, t = (rng.standard_normal(n).astype(np.float32) for _ in range(4))
f = fl.compile(step)
f(p, m, v, t, 1e-2)
for _ in range(calls):
    f(p, m, v, t, 1e-2)
"""


def count_instructions(tree: str, n: int, calls: int) -> int:
    """Total instructions of a process making `calls` replay calls, under callgrind."""
    import re
    import tempfile
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), FASTLAUNCH_CACHE_DIR="",
               FASTLAUNCH_NUM_THREADS="1", PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        # count only inside the dispatcher's __call__ (tracing and start-up excluded)
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--collect-atstart=no", "--toggle-collect=__pyx_pw_*Dispatcher_*__call__",
                        sys.executable, "-c", COUNT_CHILD, str(n), str(calls)],
                       env=env, cwd=tree, capture_output=True, text=True, check=True)
        text = open(out).read()
    return int(re.search(r"^summary:\s+(\d+)", text, re.M).group(1))


def instructions_per_call(tree: str, n: int) -> float:
    return (count_instructions(tree, n, 3000) - count_instructions(tree, n, 1000)) / 2000


def measure(tree: str, n: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), FASTLAUNCH_CACHE_DIR="")
    out = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trees", nargs="*", default=[os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--instructions", action="store_true",
                   help="also count instructions per replay call with callgrind")
    a = p.parse_args(argv)
    samples = {t: {"replay": [], "floor": []} for t in a.trees}
    for r in range(a.rounds):
        order = a.trees if r % 2 == 0 else list(reversed(a.trees))
        for t in order:
            res = measure(t, a.n)
            for k in res:
                samples[t][k].append(res[k])
    base = statistics.median(samples[a.trees[0]]["replay"])
    print(f"step at n={a.n}, float32: median over {a.rounds} rounds of per-process medians")
    print(f"{'tree':<40} {'replay':>10} {'empty call':>11} {'vs first':>9}")
    for t in a.trees:
        rep = statistics.median(samples[t]["replay"])
        flo = statistics.median(samples[t]["floor"])
        print(f"{t:<40} {rep * 1e9:8.0f} ns {flo * 1e9:8.0f} ns {rep / base:8.3f}x")
    if a.instructions:
        counts = {t: instructions_per_call(t, a.n) for t in a.trees}
        first = counts[a.trees[0]]
        print("\ninstructions per replay call (callgrind, one thread)")
        for t in a.trees:
            print(f"{t:<40} {counts[t]:10.0f} {counts[t] / first:8.3f}x")


if __name__ == "__main__":
    main()
