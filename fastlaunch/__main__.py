"""python -m fastlaunch            the demo: an optimisation step, NumPy vs re-trace vs replay
python -m fastlaunch cache      where the kernel disk cache is, and how big
python -m fastlaunch cache --clear
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from fastlaunch._version import __version__
from fastlaunch.benchtools import copy_bandwidth, floor_call, fmt_time, format_table, interleaved
from fastlaunch.jit import compile as compile_fn


def step(p, m, v, target, lr):
    """The optimisation step of DESIGN.md: a loss reduction and an Adam-like update."""
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss


def _loop_runner(fn, n, dtype, restart_every=50):
    """A callable doing one optimisation iteration with its own state, as a user loop would.

    The state restarts every `restart_every` iterations: run long enough, this step drives m
    into subnormal floats, whose slow arithmetic (in NumPy and here alike) would swamp the
    per-call cost being measured."""
    rng = np.random.default_rng(0)
    start = [rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype) * 0.1,
             rng.random(n).astype(dtype) * 0.1]
    target = rng.standard_normal(n).astype(dtype)
    state = list(start)
    count = [0]

    def run():
        p, m, v, _ = fn(state[0], state[1], state[2], target, 1e-2)
        count[0] += 1
        state[:] = start if count[0] % restart_every == 0 else [p, m, v]
    return run


def demo(sizes=(16, 65536, 4194304), dtype=np.float32, quick=False):
    replay = compile_fn(step)
    retrace = compile_fn(step, replay=False)
    # correctness first: one step from the same state, against NumPy
    for n in sizes:
        rng = np.random.default_rng(1)
        args = (rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype) * 0.1,
                rng.random(n).astype(dtype) * 0.1, rng.standard_normal(n).astype(dtype), 1e-2)
        want = step(*args)
        for name, f in (("replay", replay), ("re-trace", retrace)):
            got = f(*args)
            for w, g in zip(want, got):
                err = np.max(np.abs(np.asarray(w, np.float64) - g)) / max(np.max(np.abs(w)), 1e-30)
                if err > 1e-5 or np.asarray(w).dtype != np.asarray(g).dtype:
                    raise SystemExit(f"fastlaunch {name} disagrees with NumPy at n={n}: {err:.2e}")
    print(f"fastlaunch {__version__}: the optimisation step of DESIGN.md, {np.dtype(dtype)}, "
          f"per-iteration median (outputs checked against NumPy first)\n")
    rows = []
    batch = 0.005 if quick else 0.03
    for n in sizes:
        floor = floor_call(list(step(*[np.zeros(n, dtype)] * 4, 1e-2)))
        z = np.zeros(n, dtype)
        runners = {
            "numpy": _loop_runner(step, n, dtype),
            "re-trace": _loop_runner(retrace, n, dtype),
            "replay": _loop_runner(replay, n, dtype),
            "floor": lambda: floor(z, z, z, z, 1e-2),
        }
        t = interleaved(runners, min_batch_seconds=batch, batches=5 if quick else 7)
        rows.append([n, fmt_time(t["numpy"]), fmt_time(t["re-trace"]), fmt_time(t["replay"]),
                     fmt_time(t["floor"]), f"{t['numpy'] / t['replay']:.1f}x",
                     f"{t['re-trace'] / t['replay']:.1f}x", f"{t['replay'] / t['floor']:.1f}x"])
    print(format_table(["n", "numpy", "re-trace", "replay", "empty call", "numpy/replay",
                        "re-trace/replay", "replay/floor"], rows))
    bw = copy_bandwidth(64 << 20 if quick else 256 << 20)
    big = sizes[-1]
    print(f"\nnp.copyto bandwidth: {bw / 1e9:.1f} GB/s.  One step at n={big} moves at least "
          f"{7 * big * np.dtype(dtype).itemsize / 1e6:.0f} MB (reads p, m, v, target; writes p, m, v).")
    print(f"Kernels: {replay.lower(*[np.zeros(16, dtype)] * 4, 1e-2).program.launch_count()} "
          f"launches per step at n=16.")
    print("\nbench/ has the full suite (more workloads, sizes and peers): python bench/run.py")


def cache_command(clear: bool):
    from fastlaunch.backends import get_backend
    disk = get_backend("cpu").disk
    if not disk.directory:
        print("the kernel disk cache is disabled (FASTLAUNCH_CACHE_DIR is empty)")
        return
    files = disk.entries()
    size = sum(os.path.getsize(f) for f in files)
    print(f"kernel cache: {disk.directory}\n  {len(files)} kernels, {size / 1e6:.2f} MB")
    if clear:
        print(f"  removed {disk.clear()} files")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m fastlaunch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="demo", choices=["demo", "cache"])
    parser.add_argument("--clear", action="store_true", help="with `cache`: delete every entry")
    parser.add_argument("--quick", action="store_true", help="demo: shorter timing batches")
    args = parser.parse_args(argv)
    if args.command == "cache":
        cache_command(args.clear)
    else:
        demo(quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
