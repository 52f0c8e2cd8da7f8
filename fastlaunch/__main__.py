"""python -m fastlaunch            the demo: an optimisation step, NumPy vs re-trace vs replay,
                                table on stdout, progress on stderr, plot in fastlaunch-demo.png;
                                then the step with its gradient from fl.value_and_grad
python -m fastlaunch --quick    the same in a few seconds (fewer sizes, shorter batches)
python -m fastlaunch cache      where the kernel disk cache is, and how big
python -m fastlaunch cache --clear
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

from fastlaunch._version import __version__
from fastlaunch.benchtools import (floor_call, fmt_time, format_table, interleaved_samples,
                                   plot_times, swing)
from fastlaunch.jit import compile as compile_fn


def step(p, m, v, target, lr):
    """The README's optimisation step: a loss reduction and an Adam-like update."""
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss


def loss(p, target):
    """The step's loss, for the gradient section: the step above derives its gradient by hand."""
    r = np.sin(p) + p * p - target
    return np.mean(r * r)


def auto_step(p, m, v, target, lr):
    """The same step with the gradient of `loss` from fl.value_and_grad, fused into one program
    with the update."""
    from fastlaunch.grad import value_and_grad
    value, g = value_and_grad(loss)(p, target)
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, value


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


DEMO_SIZES = (16, 1024, 65536, 1048576, 4194304)
QUICK_SIZES = (16, 65536, 1048576)
# a size whose numpy/replay ratio, batch by batch, spans more than this factor is flagged: the
# machine was busy (other processes take the cores or the memory bus for parts of the run)
SWING = 1.5


def _progress(text: str, end: str = "\n"):
    print(text, end=end, file=sys.stderr, flush=True)


def demo(sizes=DEMO_SIZES, dtype=np.float32, quick=False, plot: str | None = "fastlaunch-demo.png"):
    """Check against NumPy, time every size (progress on stderr), print the table on stdout,
    save the plot.  Returns {"rows": ..., "plot": path or None}."""
    import time
    replay = compile_fn(step)
    retrace = compile_fn(step, replay=False)
    itemsize = np.dtype(dtype).itemsize
    _progress(f"fastlaunch {__version__}: checking replay and re-trace against NumPy at "
              f"{len(sizes)} sizes...", end="")
    t0 = time.perf_counter()
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
    _progress(f" equal ({time.perf_counter() - t0:.1f} s)")
    load = _load()
    if load is not None and load[0] > 0.5 * load[1]:
        _progress(f"note: the load average is {load[0]:.1f} on {load[1]} CPUs: other work is "
                  f"running, and the timings will vary with it")
    swings = []
    rows, series = [], {name: [] for name in ("numpy", "re-trace", "replay", "empty call",
                                              "np.copyto, same bytes")}
    batch = 0.005 if quick else 0.03
    for i, n in enumerate(sizes):
        _progress(f"[{i + 1}/{len(sizes)}] n={n}: timing numpy, re-trace, replay, the empty call "
                  f"and np.copyto...", end="")
        t0 = time.perf_counter()
        floor = floor_call(list(step(*[np.zeros(n, dtype)] * 4, 1e-2)))
        z = np.zeros(n, dtype)
        moved = 7 * n * itemsize            # reads p, m, v, target; writes p, m, v
        src = np.ones(-(-moved // (2 * itemsize)), dtype)      # copyto reads and writes each
        dst = np.empty_like(src)
        runners = {
            "numpy": _loop_runner(step, n, dtype),
            "re-trace": _loop_runner(retrace, n, dtype),
            "replay": _loop_runner(replay, n, dtype),
            "empty call": lambda: floor(z, z, z, z, 1e-2),
            "np.copyto, same bytes": lambda: np.copyto(dst, src),
        }
        # no foreign thread pools here (the pause is for peers' spinning workers); ours
        # spin 0.2 ms after a job
        samples = interleaved_samples(runners, min_batch_seconds=batch,
                                      batches=5 if quick else 7, settle_seconds=0.002)
        t = {name: statistics.median(s) for name, s in samples.items()}
        lo, hi = swing(samples, "numpy", "replay")
        _progress(f" {time.perf_counter() - t0:.1f} s")
        if hi > SWING * lo:
            swings.append((n, lo, hi))
        for name in series:
            series[name].append(t[name])
        # the replay's lower bound: the empty call (per-call overhead) or moving its bytes once
        # (memory traffic), whichever is larger
        if t["empty call"] >= t["np.copyto, same bytes"]:
            bound = f"{t['replay'] / t['empty call']:.1f}x empty call"
        else:
            bound = f"{t['replay'] / t['np.copyto, same bytes']:.1f}x copy"
        mark = "*" if swings and swings[-1][0] == n else ""
        rows.append([n, fmt_time(t["numpy"]), fmt_time(t["re-trace"]), fmt_time(t["replay"]),
                     fmt_time(t["empty call"]), fmt_time(t["np.copyto, same bytes"]),
                     f"{t['numpy'] / t['replay']:.1f}x{mark}",
                     f"{t['re-trace'] / t['replay']:.1f}x", bound])
    print(f"fastlaunch {__version__}: the README's optimisation step, {np.dtype(dtype)}, "
          f"per-iteration median (outputs checked against NumPy first)\n")
    print(format_table(["n", "numpy", "re-trace", "replay", "empty call", "copy same bytes",
                        "numpy/replay", "re-trace/replay", "replay vs bound"], rows))
    print("\nreplay vs bound: the replay's time over its lower bound, the larger of the empty "
          "call (a compiled call's\nfixed cost: same arguments, fresh outputs, no work) and "
          "np.copyto moving the step's bytes once\n(7 arrays of n: reads p, m, v, target; "
          "writes p, m, v).")
    below = [row for row in rows if float(row[-1].split("x")[0]) < 1.0]
    if any(row[-1].endswith("copy") for row in below):
        print("Below 1x against the copy: the replay's kernels write large results with "
              "streaming stores, which\nskip the read of each cache line that np.copyto's "
              "ordinary stores make first (a third of a\ncopy's memory traffic), so the step "
              "moves its bytes in less time than the copy does.")
    if any(row[-1].endswith("empty call") for row in below):
        print("Below 1x against the empty call: the two differ by less than the timing noise "
              "(both are medians of\nshort batches).")
    if swings:
        where = ", ".join(f"n={n}: {lo:.1f}x to {hi:.1f}x" for n, lo, hi in swings)
        load = _load()
        busy = f" (load average {load[0]:.1f} on {load[1]} CPUs)" if load else ""
        print(f"* numpy/replay swung between timing batches ({where}): the machine was busy"
              f"{busy};\n  these speed-ups are uncertain: run the demo again on an idle "
              f"machine.")
    print(f"Kernels: {replay.lower(*[np.zeros(16, dtype)] * 4, 1e-2).program.launch_count()} "
          f"launches per step at n=16.")
    written = None
    if plot:
        try:
            written = plot_times(plot, list(sizes), series,
                                 f"fastlaunch {__version__}: optimisation step, "
                                 f"{np.dtype(dtype)}, per-call median")
        except ImportError:
            print("\nmatplotlib is not installed: no plot (pip install matplotlib, or "
                  "pip install 'fastlaunch[plot]')")
        else:
            print(f"\nplot: {written}")
    grad_rows = _gradient_section(sizes[::max(1, len(sizes) - 1)], dtype, batch, quick)
    print("\nbench/ has the full suite (more workloads, sizes and peers): python bench/run.py")
    return {"rows": rows, "plot": written, "swings": swings, "gradient_rows": grad_rows}


def _gradient_section(sizes, dtype, batch, quick):
    """The step with its gradient from fl.value_and_grad against the hand-derived one: the same
    results (checked), and what the automatic gradient costs per call."""
    hand, auto = compile_fn(step), compile_fn(auto_step)
    _progress("gradients: checking fl.value_and_grad's step against the hand-derived one...",
              end="")
    for n in sizes:
        rng = np.random.default_rng(2)
        args = (rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype) * 0.1,
                rng.random(n).astype(dtype) * 0.1, rng.standard_normal(n).astype(dtype), 1e-2)
        for w, g in zip(step(*args), auto(*args)):
            err = np.max(np.abs(np.asarray(w, np.float64) - g)) / max(np.max(np.abs(w)), 1e-30)
            if err > 1e-4:
                raise SystemExit(f"fl.value_and_grad's step disagrees with the hand-derived "
                                 f"gradient at n={n}: {err:.2e}")
    _progress(" equal")
    rows = []
    for n in sizes:
        samples = interleaved_samples(
            {"hand": _loop_runner(hand, n, dtype), "auto": _loop_runner(auto, n, dtype)},
            min_batch_seconds=batch, batches=5 if quick else 7, settle_seconds=0.002)
        t = {name: statistics.median(s) for name, s in samples.items()}
        rows.append([n, fmt_time(t["hand"]), fmt_time(t["auto"]), f"{t['auto'] / t['hand']:.2f}x"])
    print("\nGradients: the same step with its gradient from fl.value_and_grad(loss) instead of "
          "derived by hand\n(one program: forward, backward and update fused; results checked "
          "equal above)\n")
    print(format_table(["n", "hand-derived", "fl.value_and_grad", "auto/hand"], rows))
    return rows


def _load():
    """(1-minute load average, CPUs this process may use), or None where unknown."""
    try:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            os.cpu_count()
        return os.getloadavg()[0], cpus or 1
    except OSError:
        return None


def cache_command(clear: bool):
    from fastlaunch.backends.cache import DiskCache, default_cache_dir
    disk = DiskCache(default_cache_dir())          # the folder every backend caches kernels in
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
    parser.add_argument("--quick", action="store_true",
                        help=f"demo: sizes {', '.join(map(str, QUICK_SIZES))} and short timing "
                             f"batches (a few seconds)")
    parser.add_argument("--plot", default="fastlaunch-demo.png", metavar="PATH",
                        help="demo: where to save the PNG of per-call time against size "
                             "(default: %(default)s in the current folder; needs matplotlib)")
    parser.add_argument("--no-plot", action="store_true", help="demo: save no plot")
    args = parser.parse_args(argv)
    if args.command == "cache":
        cache_command(args.clear)
    else:
        demo(sizes=QUICK_SIZES if args.quick else DEMO_SIZES, quick=args.quick,
             plot=None if args.no_plot else args.plot)


if __name__ == "__main__":
    sys.exit(main())
