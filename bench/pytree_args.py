"""Replay cost per call of a 16-element function whose arguments come in a dict (an
optimiser's config of Python floats, of NumPy scalars, of arrays), a tuple, or positionally,
and of one that returns a dict; for one or more source trees side by side.

    python bench/pytree_args.py                          # this tree: times and NumPy's
    python bench/pytree_args.py /work/prev $PWD --instructions

Times are medians of interleaved batches in one process per tree (NumPy's own call in the
same batches, as the reference); `--instructions` adds instructions per call under
callgrind (counted inside the dispatcher's __call__, the difference between 1000 and 3000
calls), which is the number to compare on a noisy machine.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SETUP = r"""
import sys, json
import numpy as np
import fastlaunch as fl

def step_pos(p, g, lr, beta):
    return p - lr * (g + beta * p)

def step_dict(p, g, cfg):
    return p - cfg["lr"] * (g + cfg["beta"] * p)

def step_tuple(p, g, cfg):
    return p - cfg[0] * (g + cfg[1] * p)

def step_nested(p, g, cfg):
    return p - cfg["opt"]["lr"] * (g + cfg["opt"]["beta"] * p)

def update(params, grads, cfg):
    return {k: params[k] - cfg["lr"] * grads[k] for k in params}

def update_pos(p0, p1, p2, p3, g0, g1, g2, g3, lr):
    return (p0 - lr * g0, p1 - lr * g1, p2 - lr * g2, p3 - lr * g3)

rng = np.random.default_rng(0)
p, g = rng.standard_normal(16), rng.standard_normal(16)
P = {f"w{i}": rng.standard_normal(16) for i in range(4)}
G = {f"w{i}": rng.standard_normal(16) for i in range(4)}
CASES = {
    "positional floats": (step_pos, (p, g, 0.01, 0.9)),
    "dict of floats": (step_dict, (p, g, {"lr": 0.01, "beta": 0.9})),
    "dict of np.float64": (step_dict, (p, g, {"lr": np.float64(0.01), "beta": np.float64(0.9)})),
    "dict of arrays": (step_dict, (p, g, {"lr": np.full(16, 0.01), "beta": np.full(16, 0.9)})),
    "tuple of floats": (step_tuple, (p, g, (0.01, 0.9))),
    "nested dict": (step_nested, (p, g, {"opt": {"lr": 0.01, "beta": 0.9}})),
    "4 arrays x2 positional": (update_pos, tuple(P.values()) + tuple(G.values()) + (0.01,)),
    "dicts in, dict out": (update, (P, G, {"lr": 0.01})),
}
"""

TIME_CHILD = SETUP + r"""
from fastlaunch.benchtools import interleaved
runners, compiled = {}, {}
for name, (fn, args) in CASES.items():
    f = compiled[name] = fl.compile(fn)
    f(*args)
    runners[name + "|fl"] = (lambda f, args: lambda: f(*args))(f, args)
    runners[name + "|numpy"] = (lambda fn, args: lambda: fn(*args))(fn, args)
for r in runners.values():          # warm: the first batches of the first case ran cold
    for _ in range(2000):
        r()
# every case in each round of batches, so that the machine's noise falls on all of them
res = interleaved(runners, min_batch_seconds=0.01, batches=9)
for name, f in compiled.items():
    assert f.stats["traces"] == 1, name
out = {}
for key, t in res.items():
    name, who = key.split("|")
    out.setdefault(name, {})[who] = t
print(json.dumps(out))
"""

COUNT_CHILD = SETUP + r"""
fn, args = CASES[sys.argv[1]]
f = fl.compile(fn)
f(*args)
for _ in range(int(sys.argv[2])):
    f(*args)
"""


def names() -> list:
    return re.findall(r'^    "([^"]+)":', SETUP, re.M)


def count(tree: str, case: str, calls: int) -> int:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), FASTLAUNCH_CACHE_DIR="",
               FASTLAUNCH_NUM_THREADS="1", PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        "--collect-atstart=no", "--toggle-collect=__pyx_pw_*Dispatcher_*__call__",
                        sys.executable, "-c", COUNT_CHILD, case, str(calls)],
                       env=env, cwd=tree, capture_output=True, text=True, check=True)
        text = open(out).read()
    return int(re.search(r"^summary:\s+(\d+)", text, re.M).group(1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", default=[os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))])
    ap.add_argument("--instructions", action="store_true")
    ap.add_argument("--cases", nargs="*", help="cases to count instructions for (default: all; "
                    "each costs two callgrind runs per tree)")
    a = ap.parse_args(argv)
    times = {}
    for t in a.trees:
        env = dict(os.environ, PYTHONPATH=os.path.abspath(t), FASTLAUNCH_CACHE_DIR="")
        out = subprocess.run([sys.executable, "-c", TIME_CHILD], env=env, cwd=t,
                             capture_output=True, text=True, check=True)
        times[t] = json.loads(out.stdout.strip().splitlines()[-1])
    cases = names()
    head = f"{'case':<24}" + "".join(f"{'fl ' + str(i):>10}{'NumPy':>9}{'x':>6}"
                                      for i in range(len(a.trees)))
    print("per-call time, 16 elements (medians of interleaved batches); trees:",
          ", ".join(f"{i}={t}" for i, t in enumerate(a.trees)))
    print(head)
    for c in cases:
        row = f"{c:<24}"
        for t in a.trees:
            r = times[t][c]
            row += f"{r['fl'] * 1e9:8.0f}ns{r['numpy'] * 1e9:7.0f}ns{r['numpy'] / r['fl']:6.1f}"
        print(row)
    if a.instructions:
        print("\ninstructions per call inside Dispatcher.__call__ (callgrind)")
        print(f"{'case':<24}" + "".join(f"{'tree ' + str(i):>12}" for i in range(len(a.trees))))
        for c in a.cases or cases:
            row = f"{c:<24}"
            for t in a.trees:
                row += f"{(count(t, c, 3000) - count(t, c, 1000)) / 2000:12.0f}"
            print(row)


if __name__ == "__main__":
    main()
