"""Gradients through a whole fl.iterate loop (issue 28's targets): a 1-D heat equation.

    python bench/grad_loop.py                     # 64 points, 100 000 steps
    python bench/grad_loop.py --steps 10000 --points 256 --checkpoints 100

`forward`: the loop alone, `fl.iterate(step, n, u0, k, carry=("u",), collect=False)` and the
loss after it, compiled (one program); `value_and_grad`: the loss and its gradient with
respect to the initial state and the diffusivity, one compiled program whose backward pass
runs checkpointed loops (frontend/loops.py).  Times are medians of interleaved batches.  Memory: the
programs' peak temporaries against storing every state (n x points x 8 bytes).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import fmt_time, format_table, interleaved  # noqa: E402


def step(u, k):
    return u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--points", type=int, default=64)
    ap.add_argument("--checkpoints", type=int, default=None)
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args(argv)
    n, m = args.steps, args.points
    target = np.sin(np.linspace(0, np.pi, m))

    def loss(u0, k):
        u = fl.iterate(step, n, u0, k, carry=("u",), collect=False, checkpoints=args.checkpoints)
        return np.sum((u - target) ** 2)
    forward = fl.compile(loss)
    vg = fl.value_and_grad(loss, argnums=(0, 1))
    u0 = np.cos(np.linspace(0, 3, m))
    k = 0.2
    v_f = forward(u0, k)
    v_g, (g0, gk) = vg(u0, k)
    assert abs(v_f - v_g) <= 1e-12 * abs(v_f), (v_f, v_g)
    # a directional check against central differences (of the compiled forward)
    d = np.random.default_rng(0).standard_normal(m)
    eps = 1e-6
    fd0 = (forward(u0 + eps * d, k) - forward(u0 - eps * d, k)) / (2 * eps)
    fdk = (forward(u0, k + eps) - forward(u0, k - eps)) / (2 * eps)
    times = interleaved({"forward": lambda: forward(u0, k), "value_and_grad": lambda: vg(u0, k)},
                        min_batch_seconds=0.2, batches=args.batches)
    peak_f = forward.lower(u0, k).program.peak_temp_bytes()
    peak_g = vg.lower(u0, k).program.peak_temp_bytes()
    every = n * m * 8
    load = os.getloadavg()
    print(f"heat equation, {m} points, {n} steps, float64; load average {load[0]:.2f}\n")
    print(format_table(["program", "time per call", "per step", "peak temporaries"], [
        ["forward", fmt_time(times["forward"]), fmt_time(times["forward"] / n), f"{peak_f} B"],
        ["value_and_grad", fmt_time(times["value_and_grad"]),
         fmt_time(times["value_and_grad"] / n), f"{peak_g} B"]]))
    print(f"\nvalue_and_grad / forward: {times['value_and_grad'] / times['forward']:.2f}x")
    print(f"extra memory: {peak_g - peak_f} B = {100 * (peak_g - peak_f) / every:.2f}% of "
          f"storing every state ({every} B)")
    print(f"check: d/du0 . d {np.sum(g0 * d):.6e} vs central differences {fd0:.6e}; "
          f"d/dk {gk:.6e} vs {fdk:.6e}")


if __name__ == "__main__":
    main()
