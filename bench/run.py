"""The fastlaunch benchmark suite: per-call time versus size for every workload and runner.

    python bench/run.py                      # full run (~5 minutes on 2 cores)
    python bench/run.py --quick              # fewer sizes, short batches (< 1 minute)
    python bench/run.py --workload step --sizes 16,4096 --runners numpy,replay,jax
    python bench/run.py --workload step,black_scholes,chain,softmax,normalise --sizes 4194304

"replay/best peer" is fastlaunch's time over the fastest peer's (Numba serial and parallel, JAX,
torch.compile, Dr.Jit with and without freeze) at the same size in the same run: below 1 is
ahead.

Each runner's output is checked against NumPy (float32, relative tolerance --rtol of the
largest magnitude) before it is timed; a runner that fails is reported FAILED, one that does
not apply n/a, and neither is timed. Times are medians over interleaved batches
(fastlaunch.benchtools.interleaved), measured beside the empty-call floor (benchtools.floor_call
with the same arguments and outputs) and np.copyto bandwidth. Writes a table to stdout,
bench/results/<name>.json and bench/results/<name>.png.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import re
import resource
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import (compare_outputs, copy_bandwidth, floor_call,  # noqa: E402
                                   fmt_time, format_table, interleaved)
from plot import plot  # noqa: E402
from runners import NotApplicable, all_runners  # noqa: E402
from workloads import WORKLOADS, as_list, bytes_moved  # noqa: E402

FULL_SIZES = (16, 256, 4096, 65536, 1048576, 4194304)
QUICK_SIZES = (16, 4096, 1048576)
LARGE = 1 << 20          # sizes from here on are also reported against copy bandwidth
RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"sizes {','.join(map(str, QUICK_SIZES))}, 3 short batches")
    p.add_argument("--workload", action="append", default=[], metavar="NAME",
                   help=f"run only these (repeat or comma-separate): {', '.join(WORKLOADS)}")
    p.add_argument("--sizes", help="comma-separated element counts")
    p.add_argument("--runners", help="comma-separated runner names (default: all available)")
    p.add_argument("--batches", type=int, help="interleaved batches per size (9; quick 3)")
    p.add_argument("--batch-seconds", type=float,
                   help="minimum seconds per batch (0.05; quick 0.005)")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="max |got - numpy| / max |numpy| per output (default 1e-4)")
    p.add_argument("--name", help="results file stem (default: bench, or quick with --quick)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--hang-timeout", type=float, default=120,
                   help="abort when one workload and size takes longer than this (seconds)")
    a = p.parse_args(argv)
    a.workloads = [w for arg in a.workload for w in arg.split(",") if w] or list(WORKLOADS)
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    a.sizes = ([int(s) for s in a.sizes.split(",")] if a.sizes else
               list(QUICK_SIZES if a.quick else FULL_SIZES))
    a.batches = a.batches or (3 if a.quick else 9)
    a.batch_seconds = a.batch_seconds or (0.005 if a.quick else 0.05)
    a.name = a.name or ("quick" if a.quick else "bench")
    return a


def cpu_seconds():
    """(busy CPU seconds of the whole machine, CPU seconds of this process and its children),
    from /proc/stat; None where that is not available (not Linux)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    busy = (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")     # all but idle and iowait
    own = sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
    return busy, own


def other_load(before, after, wall: float):
    """CPUs kept busy by other processes (and the hypervisor's steal) between two samples."""
    if before is None or after is None or wall <= 0:
        return None
    return max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall


def source_version() -> str:
    """The fastlaunch checkout's commit, marked dirty when its fastlaunch/ has local edits."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "fastlaunch"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit or "unknown") + ("+dirty" if dirty else "")


class Watchdog(threading.Thread):
    """Aborts the run, saying where, when one workload and size makes no progress for `limit`
    seconds (a runner that hangs in native code with the GIL released would otherwise block
    the suite forever). On a hang: names the runner, dumps every thread's Python stack, saves
    the results so far with "aborted" set, and exits with status 3."""

    def __init__(self, limit: float, save):
        super().__init__(daemon=True)
        self.limit, self.save = limit, save
        self.what, self.since = None, 0.0
        self.main = threading.main_thread().ident

    def arm(self, what: str):
        self.what, self.since = what, time.monotonic()

    def disarm(self):
        self.what = None

    def _runner(self) -> str:
        """The runner the main thread is in: interleaved()'s `name`, or measure()'s `r`."""
        frame = sys._current_frames().get(self.main)
        while frame is not None:
            loc = frame.f_locals
            if frame.f_code.co_name == "interleaved" and "name" in loc:
                return str(loc["name"])
            if frame.f_code.co_name == "measure" and "r" in loc:
                return getattr(loc["r"], "name", "?") + " (its check)"
            frame = frame.f_back
        return "?"

    def run(self):
        import faulthandler
        while True:
            time.sleep(1.0)
            what = self.what
            if what is None or time.monotonic() - self.since < self.limit:
                continue
            msg = (f"HUNG: {what}, runner {self._runner()}: no progress for {self.limit:.0f} s; "
                   "aborting the run (stacks below)")
            print("\n" + msg, file=sys.stderr, flush=True)
            print(msg, flush=True)
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            try:
                self.save(msg)
            finally:
                os._exit(3)


def _short(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = re.sub(r"\x1b\[[0-9;]*m| at 0x[0-9a-f]+", "", " ".join(lines[:3]))
    return f"{type(e).__name__}: {text[:160]}"


def measure(workload, n, runners, opts, log) -> dict:
    """Check then time every runner on one workload and size."""
    args = workload.args(n)
    want = as_list(workload.fn(*args))
    entry = {"n": n, "shapes": [list(np.shape(a)) for a in args if isinstance(a, np.ndarray)],
             "bytes": bytes_moved(args, want), "runners": {}}
    timed = {}
    for r in runners:
        res = entry["runners"][r.name] = {}
        try:
            prep = r.prepare(workload, args)
            why, err = compare_outputs(want, prep.fetch(prep.run()), opts.rtol)
            res["rel_error"] = err
            if why:
                res.update(status="FAILED", reason=why)
            else:
                res["status"] = "ok"
                timed[r.name] = prep.run
                res.update(r.details(workload, args))
        except NotApplicable as e:
            res.update(status="n/a", reason=str(e))
        except Exception as e:                # noqa: BLE001
            res.update(status="FAILED", reason=_short(e))
            if os.environ.get("BENCH_TRACEBACK"):
                traceback.print_exc()
        if res["status"] != "ok":
            log(f"    {r.name}: {res['status']}: {res['reason']}")
    floor = floor_call(want)
    timed["floor"] = lambda: floor(*args)
    gc.collect()
    times = interleaved(timed, min_batch_seconds=opts.batch_seconds, batches=opts.batches)
    entry["floor_seconds"] = times.pop("floor")
    for name, t in times.items():
        entry["runners"][name]["seconds"] = t
    if n >= LARGE:       # the same traffic through np.copyto: what the caches give at this size
        entry["copy_same_bytes_bytes_per_s"] = copy_bandwidth(entry["bytes"] // 2)
    return entry


def add_fractions(results: dict, copy_bw: float):
    """Each large-size time as a fraction of the copy bandwidth (bytes / seconds / copy_bw)."""
    for wl in results["workloads"].values():
        for e in wl["sizes"]:
            for res in e["runners"].values():
                if "seconds" in res:
                    res["copy_bandwidth_fraction"] = (e["bytes"] / res["seconds"] / copy_bw
                                                      if e["n"] >= LARGE else None)


def _cell(res: dict) -> str:
    if res.get("status") == "ok":
        return fmt_time(res["seconds"])
    return res.get("status", "-")


def _ratio(a, b) -> str:
    return f"{a / b:.1f}x" if a and b else "-"


def report(name: str, wl: dict, runner_names: list, copy_bw: float) -> str:
    """The tables and summary lines of one workload."""
    entries = wl["sizes"]
    out = [f"== {name}: {wl['description']} =="]
    if (wl.get("other_processes_cpus") or 0) > 0.1:
        out.append(f"   (other processes kept {wl['other_processes_cpus']:.2f} CPUs busy while "
                   "this workload was timed: expect noise)")
    has_replay = "replay" in runner_names
    launches = [(e["n"], e["runners"]["replay"]["launches"]) for e in entries
                if "launches" in e["runners"].get("replay", {})]
    if launches:
        counts = sorted({k for _, k in launches})
        out.append("   fastlaunch replay: kernel launches per call: " + (
            str(counts[0]) if len(counts) == 1 else
            ", ".join(f"{k} at n={n}" for n, k in launches)))
    headers = ["n"] + runner_names + ["empty call"]
    if has_replay:
        headers += ["numpy/replay", "replay/empty", "best peer", "replay/best peer"]
    rows = []
    for e in entries:
        rs = e["runners"]
        row = [e["n"]] + [_cell(rs[r]) for r in runner_names] + [fmt_time(e["floor_seconds"])]
        if has_replay:
            rep = rs["replay"].get("seconds")
            best = best_peer(rs)
            row += [_ratio(rs.get("numpy", {}).get("seconds"), rep),
                    _ratio(rep, e["floor_seconds"]),
                    best or "-", f"{rep / rs[best]['seconds']:.2f}x" if best and rep else "-"]
        rows.append(row)
    out.append(format_table(headers, rows))
    # why runners failed / did not apply (grouped over sizes)
    reasons = {}
    for e in entries:
        for r in runner_names:
            res = e["runners"][r]
            if res["status"] != "ok":
                reasons.setdefault((r, res["status"], res["reason"]), []).append(e["n"])
    for (r, status, why), ns in reasons.items():
        where = "all sizes" if len(ns) == len(entries) else "n=" + ",".join(map(str, ns))
        out.append(f"  {r}: {status} ({where}): {why}")
    large = [e for e in entries if e["n"] >= LARGE]
    if large:
        out.append("\n  x% of copy bandwidth: bytes / time / np.copyto bandwidth on a 256 MB "
                   f"array ({copy_bw / 1e9:.1f} GB/s); bytes = each input read once + each output "
                   "written once.\n  (\"copyto, same bytes\": np.copyto moving the same bytes, "
                   "i.e. what the caches allow at this size.)")
        rows = []
        for e in large:
            row = [e["n"], f"{e['bytes'] / 1e6:.1f} MB",
                   f"{e['copy_same_bytes_bytes_per_s'] / 1e9:.1f} GB/s"]
            for r in runner_names:
                frac = e["runners"][r].get("copy_bandwidth_fraction")
                row.append(f"{100 * frac:.0f}%" if frac is not None else e["runners"][r]["status"])
            rows.append(row)
        out.append(format_table(["n", "moved", "copyto, same bytes"] + runner_names, rows))
    if has_replay:
        out.append("")
        out += _summary(entries)
    return "\n".join(out)


PEERS = ("numba", "numba-par", "numba-np", "jax", "torch.compile", "drjit", "drjit-freeze")


def best_peer(rs: dict):
    """The fastest peer (not NumPy, not fastlaunch) timed in this run at one size, or None."""
    timed = [(rs[r]["seconds"], r) for r in PEERS if rs.get(r, {}).get("seconds")]
    return min(timed)[1] if timed else None


def _summary(entries: list) -> list:
    lines = []
    small, big = entries[0], entries[-1]
    for e in (small, big) if small is not big else (small,):
        rs = e["runners"]
        rep = rs["replay"].get("seconds")
        if rep is None:
            lines.append(f"  n={e['n']}: replay {rs['replay']['status']}")
            continue
        text = (f"  n={e['n']}: replay {fmt_time(rep)} per call = {rep / e['floor_seconds']:.1f}x "
                f"the empty call ({fmt_time(e['floor_seconds'])}); "
                f"{rs['numpy']['seconds'] / rep:.1f}x faster than NumPy" if "numpy" in rs and
                rs["numpy"].get("seconds") else f"  n={e['n']}: replay {fmt_time(rep)}")
        if rs["replay"].get("copy_bandwidth_fraction") is not None:
            text += f"; {100 * rs['replay']['copy_bandwidth_fraction']:.0f}% of copy bandwidth"
        peers = [f"{r} {rs[r]['seconds'] / rep:.2g}x" for r in rs
                 if r not in ("numpy", "replay") and rs[r].get("seconds")]
        lines.append(text)
        if peers:
            lines.append("      others' time / replay's: " + ", ".join(peers))
    return lines


def main(argv=None):
    opts = parse_args(argv)
    t_start, cpu_start = time.perf_counter(), cpu_seconds()

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    runners, unavailable = [], {}
    wanted = opts.runners.split(",") if opts.runners else None
    for r in all_runners():
        if wanted and r.name not in wanted:
            continue
        why = r.unavailable()
        if why:
            unavailable[r.name] = why
        else:
            runners.append(r)
    names = [r.name for r in runners]
    copy_samples = [copy_bandwidth(256 << 20)]       # measured again before each workload
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "fastlaunch": fl.__version__, "fastlaunch_source": source_version(),
        "numpy": np.__version__,
        "python": platform.python_version(), "machine": platform.processor() or
        platform.machine(), "cpus": len(os.sched_getaffinity(0)) if hasattr(
            os, "sched_getaffinity") else os.cpu_count(),
        "FASTLAUNCH_NUM_THREADS": os.environ.get("FASTLAUNCH_NUM_THREADS"),
        "dtype": "float32", "batches": opts.batches, "batch_seconds": opts.batch_seconds,
        "rtol": opts.rtol, "large_from": LARGE,
    }
    print(f"fastlaunch {fl.__version__} ({meta['fastlaunch_source']}) benchmark: float32, "
          f"median per-call time over {opts.batches} interleaved batches, outputs checked "
          f"against NumPy (rtol {opts.rtol:g}) before timing; {meta['cpus']} CPUs")
    for r in runners:
        print(f"  {r.name:13s} {r.description}" + (f"  [{r.version()}]" if r.version() else ""))
    for name, why in unavailable.items():
        print(f"  {name:13s} {why}")
    print(f"  {'empty call':13s} benchtools.floor_call: same arguments, fresh outputs like NumPy's")
    print("np.copyto bandwidth (256 MB array): measured before each workload and at the end; "
          "the best of those is the reference\n", flush=True)

    results = {"meta": meta, "runner_order": names,
               "runners": {r.name: {"description": r.description, "version": r.version()}
                           for r in runners},
               "unavailable": unavailable, "workloads": {}}
    os.makedirs(RESULTS_DIR, exist_ok=True)
    stem = os.path.join(RESULTS_DIR, opts.name)

    def save_partial(reason):
        results["aborted"] = reason
        with open(stem + ".json", "w") as f:
            json.dump(results, f, indent=1)
        print(f"saved the results so far to {os.path.relpath(stem + '.json')}", flush=True)
    watchdog = Watchdog(opts.hang_timeout, save_partial)
    watchdog.start()
    for wname in opts.workloads:
        wl = WORKLOADS[wname]
        entries = []
        if wname != opts.workloads[0]:
            copy_samples.append(copy_bandwidth(256 << 20))
        w0, c0 = time.perf_counter(), cpu_seconds()
        results["workloads"][wname] = {"description": wl.description, "sizes": entries}
        for n in opts.sizes:
            t0 = time.perf_counter()
            log(f"  {wname} n={n} ...")
            watchdog.arm(f"{wname} n={n}")
            entries.append(measure(wl, n, runners, opts, log))
            watchdog.disarm()
            log(f"  {wname} n={n} done in {time.perf_counter() - t0:.1f}s")
        results["workloads"][wname]["other_processes_cpus"] = other_load(
            c0, cpu_seconds(), time.perf_counter() - w0)

    copy_samples.append(copy_bandwidth(256 << 20))
    copy_bw = max(copy_samples)
    results["copy_bandwidth_bytes_per_s"] = copy_bw
    results["copy_bandwidth_samples"] = copy_samples
    add_fractions(results, copy_bw)
    for wname, wl in results["workloads"].items():
        print(report(wname, wl, names, copy_bw) + "\n")
    meta["wall_seconds"] = time.perf_counter() - t_start
    meta["other_processes_cpus"] = other_load(cpu_start, cpu_seconds(), meta["wall_seconds"])
    print(f"np.copyto bandwidth, 256 MB array: {copy_bw / 1e9:.1f} GB/s (best of "
          f"{', '.join(f'{b / 1e9:.1f}' for b in copy_samples)} GB/s, measured through the run)")
    busy = meta["other_processes_cpus"]
    print(f"total {meta['wall_seconds']:.0f} s" + (
        "" if busy is None else f"; other processes kept {busy:.2f} of {meta['cpus']} CPUs busy"
        " meanwhile" + (" -- the times above are disturbed by them" if busy > 0.1 else "")))
    with open(stem + ".json", "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {os.path.relpath(stem + '.json')}")
    if not opts.no_plot:
        why = plot(results, stem + ".png")
        print(f"skipped the plot: {why}" if why else f"wrote {os.path.relpath(stem + '.png')}")


if __name__ == "__main__":
    main()
