"""First-call time of the README's optimisation step (trace + compile + run), with a cold and
with a warm kernel disk cache, each in a fresh process.  Medians of several processes.

    python bench/first_call.py [--repeats 5] [--n 4096]

With --loop: the first call of a Python time loop inside the function (heat1d: 1-D diffusion
with np.roll, 4096 elements) at several step counts, each in a fresh process with a cold
kernel cache (issue 29: 1000 steps cost at most 3x 10 steps).  Wall and CPU time of the call
(the CPU time is the steadier figure on a loaded machine).

    python bench/first_call.py --loop [--steps 10,100,1000,10000] [--repeats 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import fastlaunch as fl
from fastlaunch.__main__ import step
from fastlaunch.backends import get_backend
t_import = time.perf_counter() - t0
n = int(sys.argv[1])
rng = np.random.default_rng(0)
args = [rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
        rng.random(n).astype(np.float32), rng.standard_normal(n).astype(np.float32), 1e-2]
f = fl.compile(step)
get_backend("cpu")                      # LLVM initialisation is not part of the first call
t0 = time.perf_counter()
f(*args)
first = time.perf_counter() - t0
t0 = time.perf_counter()
f(*args)
second = time.perf_counter() - t0
be = get_backend("cpu")
print(json.dumps({"first": first, "second": second, "import": t_import,
                  "compiled": be.compile_count, "from_disk": be.disk_loads}))
"""


LOOP_CHILD = r"""
import json, sys, time
import numpy as np
import fastlaunch as fl
from fastlaunch.backends import get_backend


def heat1d(u, k, steps):
    for _ in range(steps):
        u = u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return u


steps = int(sys.argv[1])
u = np.random.default_rng(0).random(4096)
f = fl.compile(heat1d, static_argnums=2)
get_backend("cpu")                      # LLVM initialisation is not part of the first call
t0, c0 = time.perf_counter(), time.process_time()
f(u, 0.1, steps)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"wall": wall, "cpu": cpu, "compiled": get_backend("cpu").compile_count,
                  "reason": f.stats["history"][0].reason}))
"""


def run_loop(steps, repeats):
    walls, cpus = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            env = {**os.environ, "FASTLAUNCH_CACHE_DIR": d}
            out = subprocess.run([sys.executable, "-c", LOOP_CHILD, str(steps)], env=env,
                                 capture_output=True, text=True, check=True, timeout=600)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["compiled"] > 0, r
        walls.append(r["wall"])
        cpus.append(r["cpu"])
    return statistics.median(walls), statistics.median(cpus), r["reason"]


def main_loop(args):
    steps = [int(s) for s in args.steps.split(",")]
    rows = {}
    print(f"heat1d first call (trace + roll + compile + run), cold kernel cache, median of "
          f"{args.repeats} fresh processes:")
    for n in steps:
        wall, cpu, reason = run_loop(n, args.repeats)
        rows[n] = {"wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3}
        print(f"  {n:6d} steps: wall {wall * 1e3:8.1f} ms   cpu {cpu * 1e3:8.1f} ms   "
              f"({reason.split(':')[0] if 'rolled' in reason else 'not rolled'})", flush=True)
    base = steps[0]
    for n in steps[1:]:
        print(f"  {n} / {base} steps: wall {rows[n]['wall_ms'] / rows[base]['wall_ms']:.2f}x, "
              f"cpu {rows[n]['cpu_ms'] / rows[base]['cpu_ms']:.2f}x")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"loop": rows, "load": os.getloadavg()}, f, indent=1)


def run(cache_dir, n):
    env = {**os.environ, "FASTLAUNCH_CACHE_DIR": cache_dir}
    out = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--json", default=None)
    ap.add_argument("--loop", action="store_true", help="the Python loop's first call instead")
    ap.add_argument("--steps", default="10,100,1000", help="with --loop: step counts")
    args = ap.parse_args(argv)
    if args.json is None:
        args.json = os.path.join(os.path.dirname(__file__), "results",
                                 "first_call_loop.json" if args.loop else "first_call.json")
    if args.loop:
        main_loop(args)
        return
    cold, warm = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as d:
            c = run(d, args.n)
            w = run(d, args.n)
        assert c["compiled"] > 0 and w["compiled"] == 0, (c, w)
        cold.append(c)
        warm.append(w)
    cm = statistics.median(r["first"] for r in cold)
    wm = statistics.median(r["first"] for r in warm)
    print(f"optimisation step, n={args.n}, first call (trace + compile/load + run), median of "
          f"{args.repeats} fresh processes:")
    print(f"  cold disk cache: {cm * 1e3:8.2f} ms  ({cold[0]['compiled']} kernels compiled)")
    print(f"  warm disk cache: {wm * 1e3:8.2f} ms  ({warm[0]['from_disk']} kernels loaded, 0 compiled)")
    print(f"  warm / cold = {wm / cm:.2f}")
    print(f"  (second call, replay: {statistics.median(r['second'] for r in warm) * 1e6:.1f} us)")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"n": args.n, "cold_ms": cm * 1e3, "warm_ms": wm * 1e3, "ratio": wm / cm,
                   "cold": cold, "warm": warm}, f, indent=1)


if __name__ == "__main__":
    main()
