"""Replay cost per call at small sizes, for one or more source trees side by side.

    python bench/replay_ab.py                          # this tree
    python bench/replay_ab.py /path/to/old /path/to/new --rounds 7

Each round starts one fresh process per tree (in alternating order), so that both trees see
the same machine noise; each process times the DESIGN.md optimisation step at 16 elements
(float32) and an empty call of the same arguments in interleaved batches, and reports its
median.  The table gives the median over rounds of those medians.  This is the check for
changes that touch the replay path: "within 5%" means the ratio column.
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


if __name__ == "__main__":
    main()
