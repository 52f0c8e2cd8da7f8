"""The first call of a pickled compiled function in a fresh spawned worker process, three ways:

  re-trace, cold cache   the worker traces and compiles every kernel (empty kernel disk cache)
  re-trace, warm cache   the worker traces, its kernels come from the disk cache
  shipped programs       `fl.compile(fn).with_programs(*example)`: the worker installs the
                         program from the pickle (verified, machine code loaded), no tracing

Each is measured in its own fresh `multiprocessing` spawn worker (imports done before timing);
the table gives medians over --repeats workers.

    python bench/worker_first_call.py [--repeats 5] [--n 4096]
"""
import argparse
import concurrent.futures
import multiprocessing
import os
import pathlib
import pickle
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))


def worker(payload, args):
    import time

    from fastlaunch.backends import get_backend
    get_backend("cpu")                         # LLVM initialisation is not part of the call
    t0 = time.perf_counter()
    compiled = pickle.loads(payload)
    t1 = time.perf_counter()
    compiled(*args)
    t2 = time.perf_counter()
    be = get_backend("cpu")
    return {"unpickle": t1 - t0, "call": t2 - t1, "total": t2 - t0,
            "traces": compiled.stats["traces"], "compiled": be.compile_count}


def _warm_up():
    import fastlaunch  # noqa: F401  (imports before timing)


def measure(payload, args, cache_dir):
    os.environ["FASTLAUNCH_CACHE_DIR"] = cache_dir          # inherited by the spawned worker
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as ex:
        ex.submit(_warm_up).result()
        return ex.submit(worker, payload, args).result()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=4096)
    opts = ap.parse_args()
    import fastlaunch as fl
    from fastlaunch.__main__ import step
    from fastlaunch.benchtools import fmt_time, format_table
    rng = np.random.default_rng(0)
    n = opts.n
    args = (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
            rng.random(n).astype(np.float32), rng.standard_normal(n).astype(np.float32), 1e-2)
    warm = tempfile.mkdtemp(prefix="fl-warm-")
    os.environ["FASTLAUNCH_CACHE_DIR"] = warm
    plain = pickle.dumps(fl.compile(step))
    shipped = pickle.dumps(fl.compile(step).with_programs(*args))
    measure(plain, args, warm)                               # fills the warm cache
    ways = {"re-trace, cold cache": (plain, lambda: tempfile.mkdtemp(prefix="fl-cold-")),
            "re-trace, warm cache": (plain, lambda: warm),
            "shipped programs": (shipped, lambda: tempfile.mkdtemp(prefix="fl-cold-"))}
    samples = {name: [] for name in ways}
    for _ in range(opts.repeats):
        for name, (payload, cache) in ways.items():
            samples[name].append(measure(payload, args, cache()))
    rows = []
    for name, runs in samples.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("unpickle", "call", "total")}
        rows.append([name, f"{len(ways[name][0])} B", fmt_time(med["unpickle"]),
                     fmt_time(med["call"]), fmt_time(med["total"]),
                     max(r["traces"] for r in runs), max(r["compiled"] for r in runs)])
    print(f"first call of the README's step (n={n}, float32) in a fresh spawned worker; "
          f"medians of {opts.repeats} workers\n")
    print(format_table(["way", "pickle", "unpickle", "first call", "total", "traces",
                        "kernels compiled"], rows))


if __name__ == "__main__":
    main()
