"""Recomputation cliffs (issue 13): where fusing a producer into its consumer would recompute
it many times per element, the cost model in ir/fuse.py materialises it instead.

    python bench/fusion_cases.py                 # medians of 9 interleaved batches
    python bench/fusion_cases.py --batches 15 --batch-seconds 0.1

Cases (float32), each checked against NumPy before it is timed:
  * mlp: a 3-layer MLP, tanh(x @ W + b) twice then @ W3 + b3, x 64x128, W 128x128:
    compiled vs NumPy;
  * stencil: ten steps of a 2-D heat stencil (512x512) in one compiled function, vs NumPy, vs
    ten calls of a compiled one-step function; two formulations: `shrinking` (each step a
    pure expression of shifted slices: the valid interior) and `copy-update` (copy, then
    update the interior in place, as a NumPy user writes it).
Prints per-call medians and the ratios; kernel launches per call for the compiled functions.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import compare_outputs, fmt_time, format_table, interleaved  # noqa: E402

STEPS = 10


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = np.tanh(x @ w1 + b1)
    h = np.tanh(h @ w2 + b2)
    return h @ w3 + b3


def heat_shrinking(u):
    return u[1:-1, 1:-1] + 0.1 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
                                  - 4.0 * u[1:-1, 1:-1])


def heat_copy_update(u):
    out = u.copy()
    out[1:-1, 1:-1] = u[1:-1, 1:-1] + 0.1 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2]
                                             + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1])
    return out


def steps_of(step):
    def many(u):
        for _ in range(STEPS):
            u = step(u)
        return u
    many.__name__ = f"{step.__name__}_x{STEPS}"
    return many


def calls_of(compiled_step):
    def many(u):
        for _ in range(STEPS):
            u = compiled_step(u)
        return u
    return many


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=9)
    p.add_argument("--batch-seconds", type=float, default=0.05)
    p.add_argument("--size", type=int, default=512, help="stencil grid side (512)")
    opts = p.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []

    def run_case(name, runners, args, reference):
        want = [reference(*args)]
        for rname, f in runners.items():
            why, _ = compare_outputs(want, [f(*args)], 1e-4)
            if why:
                raise SystemExit(f"{name} {rname}: disagrees with NumPy: {why}")
        times = interleaved({k: (lambda f=f: f(*args)) for k, f in runners.items()},
                            min_batch_seconds=opts.batch_seconds, batches=opts.batches)
        base = times["numpy"]
        for rname, t in times.items():
            f = runners[rname]
            launches = (f.lower(*args).program.launch_count()
                        if isinstance(f, fl.Compiled) else "")
            rows.append([name, rname, fmt_time(t), f"{base / t:.2f}x", launches])
        return times

    k = 128
    margs = (rng.standard_normal((64, k)).astype(np.float32),
             *(a for _ in range(2) for a in (
                 (rng.standard_normal((k, k)) * 0.1).astype(np.float32),
                 rng.standard_normal(k).astype(np.float32))),
             (rng.standard_normal((k, k)) * 0.1).astype(np.float32),
             rng.standard_normal(k).astype(np.float32))
    run_case("mlp 64x128x128", {"numpy": mlp, "compiled": fl.compile(mlp)}, margs, mlp)

    u = rng.standard_normal((opts.size, opts.size)).astype(np.float32)
    for step in (heat_shrinking, heat_copy_update):
        one = fl.compile(step)
        run_case(f"stencil {step.__name__[5:]} x{STEPS}",
                 {"numpy": steps_of(step), "compiled": fl.compile(steps_of(step)),
                  "one step per call": calls_of(one)}, (u,), steps_of(step))
    print(f"medians of {opts.batches} interleaved batches (float32); speed-up = NumPy's time / "
          "this runner's")
    print(format_table(["case", "runner", "per call", "speed-up vs numpy", "launches"], rows))
    print("launches: kernel launches of one compiled call (one-step-per-call: per step)")


if __name__ == "__main__":
    main()
