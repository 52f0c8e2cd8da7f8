"""Gradients through a plain Python loop (rolled before differentiation, roll.roll_traced):
the 1-D heat equation written as a `for` loop inside the differentiated function.

    python bench/grad_python_loop.py                   # 64 points, 2000 steps
    python bench/grad_python_loop.py --steps 1000 --points 256

`first call`: trace, roll, differentiate, fuse, compile and run once, for 10 steps (too few
to roll: unrolled) and for --steps, with the kernels, bytecode instructions and LOOPs of the
program.  Then per-call times (medians of interleaved batches) of the Python loop's
value_and_grad, the same loss written with fl.iterate, and the forward program alone; and
the peak temporaries of each program against storing every state (steps x points x 8 B).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import fmt_time, format_table, interleaved  # noqa: E402


def step(u, k):
    return u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))


def python_loss(n, target):
    def loss(u, k):
        for _ in range(n):
            u = u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
        return np.sum((u - target) ** 2)
    return loss


def iterate_loss(n, target):
    def loss(u0, k):
        u = fl.iterate(step, n, u0, k, carry=("u",), collect=False)
        return np.sum((u - target) ** 2)
    return loss


def first_call(n, u0, k, target):
    f = fl.value_and_grad(python_loss(n, target), argnums=(0, 1))
    t = time.perf_counter()
    f(u0, k)
    seconds = time.perf_counter() - t
    program = f.lower(u0, k).program
    return f, seconds, [f"{n} steps", f"{seconds:.2f} s", f.stats["history"][0].kernels,
                        len(list(program.instructions())), len(program.loops()),
                        f"{program.peak_temp_bytes()} B"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--points", type=int, default=64)
    ap.add_argument("--batches", type=int, default=5)
    args = ap.parse_args(argv)
    n, m = args.steps, args.points
    target = np.sin(np.linspace(0, np.pi, m))
    u0 = np.cos(np.linspace(0, 3, m))
    k = 0.2
    _, _, short = first_call(10, u0, k, target)
    vg, _, long = first_call(n, u0, k, target)
    reason = vg.stats["history"][0].reason
    it = fl.value_and_grad(iterate_loss(n, target), argnums=(0, 1))
    forward = fl.compile(python_loss(n, target))
    v_p, (g0, gk) = vg(u0, k)
    v_i, (h0, hk) = it(u0, k)
    v_f = forward(u0, k)
    d = np.random.default_rng(0).standard_normal(m)
    eps = 1e-6
    fd0 = (forward(u0 + eps * d, k) - forward(u0 - eps * d, k)) / (2 * eps)
    load = os.getloadavg()
    print(f"heat equation as a Python loop under fl.value_and_grad, {m} points, float64; "
          f"load average {load[0]:.2f}\n{reason}\n")
    print(format_table(["first call", "seconds", "kernels", "instructions", "LOOPs",
                        "peak temporaries"], [short, long]))
    times = interleaved({"python loop": lambda: vg(u0, k), "fl.iterate": lambda: it(u0, k),
                         "forward": lambda: forward(u0, k)},
                        min_batch_seconds=0.2, batches=args.batches)
    every = n * m * 8
    peak = {"python loop": vg.lower(u0, k).program.peak_temp_bytes(),
            "fl.iterate": it.lower(u0, k).program.peak_temp_bytes(),
            "forward": forward.lower(u0, k).program.peak_temp_bytes()}
    print()
    print(format_table(["program", "time per call", "per step", "peak temporaries",
                        "of every state"],
                       [[name, fmt_time(times[name]), fmt_time(times[name] / n),
                         f"{peak[name]} B", f"{100 * peak[name] / every:.2f}%"]
                        for name in times]))
    print(f"\nextra memory of the gradient: {peak['python loop'] - peak['forward']} B "
          f"(storing every state: {every} B)")
    print(f"check: values {v_p!r} (python loop) {v_i!r} (fl.iterate) {v_f!r} (forward); "
          f"d/du0 . d {np.sum(g0 * d):.9e} vs central differences {fd0:.9e}; "
          f"largest gradient difference to fl.iterate's "
          f"{max(np.max(np.abs(g0 - h0)), abs(gk - hk)):.2e}")


if __name__ == "__main__":
    main()
