"""Dask's threaded scheduler over a large chunked array: 1 thread against 2 threads.

A compiled call replays its bytecode with the GIL released, so Dask's worker threads run blocks
truly in parallel.  fastlaunch's own launch threads are switched off here
(FASTLAUNCH_NUM_THREADS=1) so that all parallelism comes from Dask's threads.

Each configuration is timed in alternation with the others (ABAB...), `--repeats` times; the
table gives medians of the wall time, and the process CPU time over wall time (how many cores
were kept busy: near 2 with 2 threads when nothing else competes for the cores).  The machine's
load average is printed before and after: on a shared machine, other processes take cores and
the 2-thread figure drops with them.

    python bench/dask_threads.py [--n 16777216] [--chunk 1048576] [--repeats 7]
"""
import os

os.environ["FASTLAUNCH_NUM_THREADS"] = "1"    # before any launch starts fastlaunch's own pool

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def black_scholes(S, K, T, r, sigma):
    """European call price (bench/workloads.py's black_scholes): transcendental-heavy, so a block
    is bound by arithmetic rather than by memory bandwidth."""
    def cdf(d):
        return 0.5 * (1.0 + np.tanh(0.7978845608 * (d + 0.044715 * d * d * d)))
    sqrt_t = np.sqrt(T)
    d1 = (np.log(S / K) + (r + 0.5 * sigma * sigma) * T) / (sigma * sqrt_t)
    d2 = d1 - sigma * sqrt_t
    return S * cdf(d1) - K * np.exp(-r * T) * cdf(d2)


def inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    f = np.float32
    return (rng.uniform(10, 100, n).astype(f), rng.uniform(10, 100, n).astype(f),
            rng.uniform(0.1, 2, n).astype(f), rng.uniform(0.0, 0.1, n).astype(f),
            rng.uniform(0.1, 0.5, n).astype(f))


def in_flight_overlap(compiled, blocks, meta, rounds=3) -> float:
    """Run the 2-thread pipeline with each block call's [start, end] recorded: the fraction of
    the time inside calls during which two calls were in flight at once.  A thread cannot
    start a call while another holds the GIL for the whole of its call, so overlap proves the
    GIL is released, on a loaded machine too (time slicing still interleaves the threads)."""
    import threading

    import dask.array as da
    spans, lock = [], threading.Lock()

    def timed(*args):
        t0 = time.perf_counter()
        out = compiled(*args)
        t1 = time.perf_counter()
        with lock:
            spans.append((t0, t1))
        return out

    graph = da.map_blocks(timed, *blocks, dtype=np.float32, meta=meta)
    for _ in range(rounds):
        graph.compute(scheduler="threads", num_workers=2)
    events = sorted([(t0, 1) for t0, _ in spans] + [(t1, -1) for _, t1 in spans])
    inside = both = 0.0
    depth, last = 0, events[0][0]
    for t, step in events:
        if depth >= 1:
            inside += t - last
        if depth >= 2:
            both += t - last
        depth, last = depth + step, t
    return both / inside if inside else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1 << 24, help="elements per input array")
    ap.add_argument("--chunk", type=int, default=1 << 20, help="elements per block")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--numpy", action="store_true", help="also time plain NumPy blocks")
    ap.add_argument("--json", help="write the measurements to this file")
    opts = ap.parse_args()
    import dask.array as da

    import fastlaunch as fl
    from fastlaunch.benchtools import format_table
    load_before = os.getloadavg()
    args = inputs(opts.n)
    blocks = [da.from_array(a, chunks=opts.chunk) for a in args]
    meta = np.empty((0,), np.float32)
    compiled = fl.compile(black_scholes)
    fns = {"fastlaunch": compiled}
    if opts.numpy:
        fns["numpy"] = black_scholes
    graphs = {name: da.map_blocks(f, *blocks, dtype=np.float32, meta=meta)
              for name, f in fns.items()}
    # correctness first, against NumPy on the whole array
    want = black_scholes(*args)
    got = graphs["fastlaunch"].compute(scheduler="threads", num_workers=2)
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    if not err < 1e-4:
        sys.exit(f"fastlaunch disagrees with NumPy: relative error {err:.2e}")
    configs = [(name, t) for name in graphs for t in (1, 2)]
    wall = {c: [] for c in configs}
    cpu = {c: [] for c in configs}
    for c in configs:                               # warm up: traces, pool memory
        graphs[c[0]].compute(scheduler="threads", num_workers=c[1])
    for _ in range(opts.repeats):
        for c in configs:
            t0, c0 = time.perf_counter(), time.process_time()
            graphs[c[0]].compute(scheduler="threads", num_workers=c[1])
            wall[c].append(time.perf_counter() - t0)
            cpu[c].append(time.process_time() - c0)
    overlap = in_flight_overlap(compiled, blocks, meta)
    load_after = os.getloadavg()
    nblocks = -(-opts.n // opts.chunk)
    print(f"black_scholes over {opts.n} float32 elements in {nblocks} blocks of {opts.chunk}, "
          f"Dask threaded scheduler, FASTLAUNCH_NUM_THREADS=1; medians of {opts.repeats}")
    print(f"cores available: {len(os.sched_getaffinity(0))}; load average (1, 5, 15 min) "
          f"before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n")
    rows, result = [], {"n": opts.n, "chunk": opts.chunk, "repeats": opts.repeats,
                        "load_before": load_before, "load_after": load_after, "runs": {}}
    for name in graphs:
        one = statistics.median(wall[(name, 1)])
        for t in (1, 2):
            w = statistics.median(wall[(name, t)])
            busy = statistics.median(c / max(s, 1e-9) for c, s in zip(cpu[(name, t)],
                                                                        wall[(name, t)]))
            rows.append([name, t, f"{w * 1e3:.1f} ms", f"{min(wall[(name, t)]) * 1e3:.1f} ms",
                         f"{one / w:.2f}x", f"{busy:.2f}"])
            result["runs"][f"{name}/{t}"] = {"wall": wall[(name, t)], "cpu": cpu[(name, t)]}
    print(format_table(["blocks by", "threads", "median wall", "best wall", "speedup vs 1",
                        "cpu/wall"], rows))
    print(f"\nwith 2 threads, {100 * overlap:.0f}% of the time spent in compiled calls had both "
          f"threads inside one\n(a call that held the GIL throughout would make this 0%, "
          f"whatever the load)")
    result["overlap_2_threads"] = overlap
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nwrote {opts.json}")


if __name__ == "__main__":
    main()
