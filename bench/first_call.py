"""First-call time of the README's optimisation step (trace + compile + run), with a cold and
with a warm kernel disk cache, each in a fresh process.  Medians of several processes.

    python bench/first_call.py [--repeats 5] [--n 4096]
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


def run(cache_dir, n):
    env = {**os.environ, "FASTLAUNCH_CACHE_DIR": cache_dir}
    out = subprocess.run([sys.executable, "-c", CHILD, str(n)], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "first_call.json"))
    args = ap.parse_args(argv)
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
