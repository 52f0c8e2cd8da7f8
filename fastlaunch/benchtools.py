"""Timing helpers shared by `python -m fastlaunch` and the scripts in bench/.

Runners are timed side by side: batches of calls of each runner alternate, so that machine
noise hits them alike, and each result is the median over batches of the per-call time.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from . import _bench


# Pause before each timed batch.  Runners in one process share the cores, and some keep their
# worker threads spinning after their own calls return (Dr.Jit's nanothread pool spins ~30 ms;
# OpenMP runtimes spin too): without a pause, the batch after theirs ran with a core taken
# (fastlaunch's step at 4M: 3.5 ms after an idle pause, 4.1-7.4 ms right after a Dr.Jit batch).
SETTLE_SECONDS = 0.1


def interleaved(runners: dict, min_batch_seconds: float = 0.02, batches: int = 7,
                max_calls: int = 200_000, settle_seconds: float = SETTLE_SECONDS) -> dict:
    """{name: callable()} -> {name: median seconds per call}, timed in alternating batches,
    each after `settle_seconds` of idle time (see SETTLE_SECONDS)."""
    samples = interleaved_samples(runners, min_batch_seconds, batches, max_calls, settle_seconds)
    return {name: statistics.median(s) for name, s in samples.items()}


def interleaved_samples(runners: dict, min_batch_seconds: float = 0.02, batches: int = 7,
                        max_calls: int = 200_000,
                        settle_seconds: float = SETTLE_SECONDS) -> dict:
    """As `interleaved`, but {name: [seconds per call of each batch]}: batch i of every runner
    ran back to back, so their ratios batch by batch show how steady the machine was."""
    sizes = {}
    for name, run in runners.items():
        run()                                     # warm up (and trace, for compiled runners)
        n, t = 1, 0.0
        while True:
            t0 = time.perf_counter()
            for _ in range(n):
                run()
            t = time.perf_counter() - t0
            if t >= min_batch_seconds / 4 or n >= max_calls:
                break
            n *= 4
        sizes[name] = max(1, min(max_calls, int(n * min_batch_seconds / max(t, 1e-9))))
    samples: dict = {name: [] for name in runners}
    for _ in range(batches):
        for name, run in runners.items():
            n = sizes[name]
            if settle_seconds > 0:
                time.sleep(settle_seconds)
            t0 = time.perf_counter()
            for _ in range(n):
                run()
            samples[name].append((time.perf_counter() - t0) / n)
    return samples


def swing(samples: dict, a: str, b: str) -> tuple[float, float]:
    """(lowest, highest) batch-by-batch ratio a / b of interleaved_samples' times."""
    ratios = [x / y for x, y in zip(samples[a], samples[b]) if y > 0]
    return (min(ratios), max(ratios)) if ratios else (float("nan"), float("nan"))


def copy_bandwidth(nbytes: int = 256 << 20, repeats: int = 9) -> float:
    """Bytes per second moved by np.copyto on a large array (each byte read once, written once)."""
    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return 2 * src.nbytes / statistics.median(times)


def floor_call(outputs: list):
    """An empty Cython call that takes any arguments and returns fresh arrays shaped like
    `outputs` (a list of arrays or scalars): the overhead floor of a compiled call."""
    return _bench.FloorCall([(np.asarray(o).dtype.str, np.shape(o), np.ndim(o) == 0 and
                             not isinstance(o, np.ndarray)) for o in outputs])


def format_table(headers: list, rows: list) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fmt_time(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def relative_error(want, got) -> float:
    """max |got - want| / max |want|, in float64 (inf where got has a NaN or inf that want has
    not, or where the shapes disagree)."""
    w = np.asarray(want, np.float64)
    g = np.asarray(got, np.float64)
    if g.shape != w.shape:
        if g.size != w.size:
            return float("inf")
        g = g.reshape(w.shape)
    finite = np.isfinite(w)
    if not np.array_equal(finite, np.isfinite(g)):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(float(np.max(np.abs(w[finite]))), 1e-30)
    return float(np.max(np.abs(g[finite] - w[finite]))) / scale


def compare_outputs(want: list, got: list, rtol: float = 1e-4, check_dtype: bool = True):
    """Check a runner's outputs against the reference (NumPy) outputs, output by output.

    Returns (None, worst relative error) when they agree, else (reason, error). A size-1 array
    stands in for a 0-d result (peers return reductions that way); dtypes must match exactly
    when check_dtype is set."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}", float("inf")
    worst = 0.0
    for i, (w, g) in enumerate(zip(want, got)):
        w, g = np.asarray(w), np.asarray(g)
        where = f"output {i}: " if len(want) > 1 else ""
        if g.shape != w.shape and not (g.size == w.size == 1):
            return f"{where}shape {g.shape}, expected {w.shape}", float("inf")
        if check_dtype and g.dtype != w.dtype:
            return f"{where}returns {g.dtype}, expected {w.dtype}", float("inf")
        err = relative_error(w, g)
        worst = max(worst, err)
        if not err <= rtol:
            return f"{where}relative error {err:.2e} > {rtol:.0e}", err
    return None, worst


def plot_times(path, sizes: list, series: dict, title: str) -> str:
    """Save a log-log PNG of per-call seconds against size, one line per series; returns the
    absolute path.  Raises ImportError without matplotlib."""
    import os

    import matplotlib
    matplotlib.use("Agg")                    # no display needed; never opens a window
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"replay": dict(linewidth=2.5), "empty call": dict(linestyle=":", color="grey"),
              "np.copyto, same bytes": dict(linestyle="--", color="black")}
    for name, seconds in series.items():
        ax.plot(sizes, seconds, marker="o", label=name, **styles.get(name, {}))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("n (elements per array)")
    ax.set_ylabel("seconds per call (median)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.abspath(os.fspath(path))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
