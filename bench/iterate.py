"""A whole optimisation loop per call: fl.iterate against the Python loop over the compiled
step, Numba and NumPy, side by side in one run (issue 14's acceptance benchmark).

    python bench/iterate.py                         # 10 000 iterations at 16 elements
    python bench/iterate.py --iters 10000 --sizes 16,1000 --batches 9

Every runner runs the same loop: the README's optimisation step (the one in
bench/workloads.py and bench/replay_ab.py) `iters` times, the parameters carried from one
iteration to the next and the loss of every iteration kept:

- `iterate`: `fl.iterated(fl.compile(step), iters, carry=("p", "m", "v"))(...)`: the loop
  runs inside the interpreter, the GIL released;
- `python-loop`: `for _ in range(iters): p, m, v, loss = f(p, m, v, t, lr)` over the same
  compiled step (one replay call per iteration), losses appended to a list;
- `numba`: one `@njit` function looping over the explicit float32 step of bench/ports.py
  (`step_loop`, itself `@njit`), losses written into an array; single thread;
- `numpy`: the Python loop over the NumPy step itself (the reference results);
- `iterate-null`: the `iterate` loop on the null backend, whose kernels do nothing: the
  interpreter's own cost per iteration (ROW, 2 LAUNCH, a one-word BIND of the loss's row,
  and NEXT or LOOP: the loop is unrolled by two, its other argument words bound before it).

The fixed cost of a call (issue 24) is timed apart, at 16 elements on the cpu and the null
backend: a repeated `fl.iterate(f, 1, ...)` call (one iteration, the same options: its loop
found in the step's table) and `fl.iterated(f, 1, ...)(...)`, against one replay of the step
`f(...)`: the difference is what fl.iterate adds per call.

`--instructions` also counts the instructions one iteration executes (callgrind), on the cpu
and the null backend: repeatable on a loaded machine, where the timings are not.

Before timing, `iterate` is checked bit for bit against `python-loop`, and every runner
against NumPy (float tolerance).  Times are medians over interleaved batches
(benchtools.interleaved: batches of each runner alternate, so machine noise hits them
alike), reported per iteration, with each runner's ratio to `iterate` measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import fmt_time, format_table, interleaved  # noqa: E402


def step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss


def inputs(n):
    rng = np.random.default_rng(0)
    p, m, t = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype(np.float32)
    return p, m, v, t


def python_loop(f, iters):
    def run(p, m, v, t, lr):
        losses = []
        for _ in range(iters):
            p, m, v, loss = f(p, m, v, t, lr)
            losses.append(loss)
        return p, m, v, np.array(losses, np.float32)
    return run


def numba_loop(iters):
    """None when Numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    from ports import step_loop
    inner = numba.njit(step_loop)

    @numba.njit
    def run(p, m, v, t, lr):
        losses = np.empty(iters, np.float32)
        for i in range(iters):
            p, m, v, loss = inner(p, m, v, t, lr)
            losses[i] = loss[0]
        return p, m, v, losses
    return run


def same(a, b) -> bool:
    return all(np.array_equal(x, y) and np.asarray(x).dtype == np.asarray(y).dtype
               for x, y in zip(a, b))


def close(a, b) -> bool:
    # absolute tolerance too: the momentum decays towards 0 as the loss converges
    return all(np.allclose(x, y, rtol=1e-3, atol=1e-5) for x, y in zip(a, b))


def measure(n: int, iters: int, batches: int) -> dict:
    p, m, v, t = inputs(n)
    lr = 1e-2
    f = fl.compile(step)
    loop = fl.iterated(f, iters, carry=("p", "m", "v"))
    null = fl.iterated(fl.compile(step, backend="null"), iters, carry=("p", "m", "v"))
    runners = {"iterate": loop, "python-loop": python_loop(f, iters),
               "numba": numba_loop(iters), "numpy": python_loop(step, iters),
               "iterate-null": null}
    runners = {k: r for k, r in runners.items() if r is not None}
    got = {k: r(p, m, v, t, lr) for k, r in runners.items()}
    checks = {"iterate == python-loop (bit for bit)": same(got["iterate"], got["python-loop"])}
    for k in ("iterate", "python-loop", "numba"):
        if k in got:
            checks[f"{k} ~ numpy"] = close(got[k], got["numpy"])
    if not all(checks.values()):
        raise SystemExit(f"results differ: {checks}")
    times = interleaved({k: (lambda r=r: r(p, m, v, t, lr)) for k, r in runners.items()},
                        min_batch_seconds=0.05, batches=batches, max_calls=1000)
    per_iter = {k: s / iters for k, s in times.items()}
    return {"n": n, "iters": iters, "per_iteration_s": per_iter, "checks": checks,
            # each kernel of the loop's table runs once per iteration (the code holds the
            # step's launches three times: iteration 1, then two per round)
            "launches_per_iteration": len(loop.lower(p, m, v, t, lr).program.kernels)}


def fixed_cost(batches: int) -> dict:
    """Per backend: seconds per call of one replay of the step, of a repeated fl.iterate call
    running one iteration, of the Iterated object called directly, and of fl.iterate with a
    new `until` lambda each call (its options looked up through their normalised key)."""
    out = {}
    p, m, v, t = inputs(16)
    carry = ("p", "m", "v")
    for backend in ("null", "cpu"):
        f = fl.compile(step, backend=backend)
        loop = fl.iterated(f, 1, carry=carry)
        runners = {
            "replay f(...)": lambda: f(p, m, v, t, 1e-2),
            "fl.iterate(f, 1, ...)": lambda: fl.iterate(f, 1, p, m, v, t, 1e-2, carry=carry),
            "fl.iterated(f, 1)(...)": lambda: loop(p, m, v, t, 1e-2),
            "fl.iterate(..., until=new lambda)": lambda: fl.iterate(
                f, 1, p, m, v, t, 1e-2, carry=carry, until=lambda loss: loss < 0),
        }
        out[backend] = interleaved(runners, min_batch_seconds=0.05, batches=batches)
    return out


COUNT_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[3])
import fastlaunch as fl
from iterate import inputs, step
n, iters, backend = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4]
p, m, v, t = inputs(n)
loop = fl.iterated(fl.compile(step, backend=backend), iters, carry=("p", "m", "v"))
loop.lower(p, m, v, t, 1e-2)
loop(p, m, v, t, 1e-2)
"""


def instructions_per_iteration(n: int, backend: str) -> float:
    """Instructions one iteration executes inside the executable (interpreter, launches,
    kernels), under valgrind's callgrind: the difference between loops of 3000 and 1000
    iterations, so the call's own cost cancels out.  Repeatable where timings are not."""
    import re
    import subprocess
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    counts = []
    for iters in (1000, 3000):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "cg.out")
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                            "--collect-atstart=no", "--toggle-collect=*Executable_execute*",
                            sys.executable, "-c", COUNT_CHILD, str(n), str(iters), here,
                            backend],
                           env=dict(os.environ, FASTLAUNCH_NUM_THREADS="1"),
                           capture_output=True, text=True, check=True)
            counts.append(int(re.search(r"^summary:\s+(\d+)", open(out).read(), re.M)[1]))
    return (counts[1] - counts[0]) / 2000


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=10_000)
    ap.add_argument("--sizes", default="16")
    ap.add_argument("--batches", type=int, default=9)
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per iteration (callgrind; cpu and null)")
    a = ap.parse_args(argv)
    print(f"fastlaunch {fl.__version__}, numpy {np.__version__}, python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs; {a.iters} iterations per call, "
          f"median of {a.batches} interleaved batches")
    load = os.getloadavg()[0]
    costs = fixed_cost(a.batches)
    print(f"\nfixed cost of a call at n=16 (1-minute load average {load:.1f} on "
          f"{os.cpu_count()} CPUs)")
    rows = []
    for backend, times in costs.items():
        base = times["replay f(...)"]
        rows += [[backend, k, fmt_time(s), "" if k.startswith("replay") else fmt_time(s - base)]
                 for k, s in times.items()]
    print(format_table(["backend", "call", "per call", "over the replay"], rows))
    results = [{"fixed_cost_s": costs, "load_average": load}]
    for n in (int(s) for s in a.sizes.split(",")):
        r = measure(n, a.iters, a.batches)
        results.append(r)
        base = r["per_iteration_s"]["iterate"]
        rows = [[k, fmt_time(s), f"{s / base:.2f}x"] for k, s in r["per_iteration_s"].items()]
        print(f"\nstep at n={n}, float32 ({r['launches_per_iteration']} launches per iteration); "
              f"checks: {', '.join(k for k, ok in r['checks'].items() if ok)}")
        print(format_table(["runner", "per iteration", "vs iterate"], rows))
        if a.instructions:
            r["instructions_per_iteration"] = {
                b: instructions_per_iteration(n, b) for b in ("cpu", "null")}
            print("instructions per iteration (callgrind, one thread): " + ", ".join(
                f"{b} {c:.0f}" for b, c in r["instructions_per_iteration"].items()) +
                "  (null: the interpreter and launches alone)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
