"""The PNG of a benchmark run: per-call time versus size, log-log, one subplot per workload,
one line per runner, with the empty-call floor and the copy-bandwidth limit for reference.

    python bench/plot.py bench/results/bench.json     # re-plot a saved run
"""
from __future__ import annotations

import json
import math
import sys

STYLE = {"numpy": dict(color="black", marker="o"),
         "re-trace": dict(color="tab:orange", marker="v"),
         "replay": dict(color="tab:red", marker="s", linewidth=2.5),
         "numba": dict(color="tab:blue", marker="^"),
         "numba-np": dict(color="tab:cyan", marker="^", linestyle=":"),
         "jax": dict(color="tab:green", marker="D"),
         "drjit": dict(color="tab:purple", marker="x", linestyle=":"),
         "drjit-freeze": dict(color="tab:purple", marker="P")}


def plot(results: dict, path: str) -> str | None:
    """Write the PNG; returns None, or why it was skipped (matplotlib missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"matplotlib is not installed ({e}); pip install matplotlib"
    workloads = list(results["workloads"])
    cols = min(3, len(workloads))
    rows = math.ceil(len(workloads) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    bw = results["copy_bandwidth_bytes_per_s"]
    for ax, name in zip(axes.flat, workloads):
        entries = results["workloads"][name]["sizes"]
        ns = [e["n"] for e in entries]
        for runner in results["runner_order"]:
            pts = [(e["n"], e["runners"][runner]["seconds"]) for e in entries
                   if e["runners"].get(runner, {}).get("status") == "ok"]
            if pts:
                ax.plot(*zip(*pts), label=runner, **STYLE.get(runner, {}))
        ax.plot(ns, [e["floor_seconds"] for e in entries], color="gray", linestyle="--",
                label="empty call")
        ax.plot(ns, [e["bytes"] / bw for e in entries], color="gray", linestyle="-.",
                label="bytes / copy bandwidth")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{name}: {results['workloads'][name]['description']}", fontsize=8)
        ax.set_xlabel("elements")
        ax.set_ylabel("seconds per call")
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(workloads):]:
        ax.axis("off")
    handles = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    order = [r for r in results["runner_order"] if r in handles] + [
        lab for lab in handles if lab not in results["runner_order"]]
    fig.legend([handles[lab] for lab in order], order, loc="lower center",
               ncol=min(len(handles), 10), fontsize=8)
    meta = results["meta"]
    fig.suptitle(f"fastlaunch {meta['fastlaunch']}: per-call time, float32, "
                 f"{meta['cpus']} CPUs, copy bandwidth {bw / 1e9:.1f} GB/s", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


if __name__ == "__main__":
    src = sys.argv[1] if len(sys.argv) > 1 else "bench/results/bench.json"
    with open(src) as f:
        data = json.load(f)
    out = src[:-5] + ".png" if src.endswith(".json") else src + ".png"
    why = plot(data, out)
    print(why or f"wrote {out}")
