"""Small dense linear algebra, batched: fastlaunch (small matrices: elementwise kernels,
fastlaunch/frontend/small_linalg.py; larger: LAPACK library calls, LIBCALL) against NumPy's batched
np.linalg in the same run.

    python bench/linalg_small.py            # 4x4 x 10 000 inv / solve / det (+ 8x8, 16x16,
                                            # 64x64)
    python bench/linalg_small.py --compile  # first-call time of the written-out versions

Medians of interleaved batches; ratio = fastlaunch / NumPy (below 1: faster).  Results are
checked against NumPy first.  --compile: per function and n (4, 8, 12, 16), the first call's
trace + fuse + compile time with the elementwise version forced (whatever small_linalg's
limit says; the "path" column says what the limit picks), in a fresh process each, the disk
cache off: CPU seconds of the process (steadier than wall time on a loaded machine) and wall
seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import fastlaunch as fl                                        # noqa: E402
from fastlaunch.benchtools import format_table, interleaved    # noqa: E402

FUNCS = {
    "inv": (lambda a, b: np.linalg.inv(a)),
    "solve": (lambda a, b: np.linalg.solve(a, b)),
    "det": (lambda a, b: np.linalg.det(a)),
    "slogdet": (lambda a, b: tuple(np.linalg.slogdet(a))),
    "cholesky": (lambda a, b: np.linalg.cholesky(a)),
    "eigh": (lambda a, b: tuple(np.linalg.eigh(a))),
}


def main(batches: int, quick: bool):
    rng = np.random.default_rng(0)
    shapes = [(10000, 4)] if quick else [(10000, 4), (1000, 8), (1000, 16), (100, 64)]
    rows, out = [], []
    for batch, n in shapes:
        for dt in (np.float32, np.float64):
            x = rng.standard_normal((batch, n, n))
            a = (x @ np.swapaxes(x, -1, -2) + n * np.eye(n)).astype(dt)    # SPD: every fn works
            b = rng.standard_normal((batch, n, 1)).astype(dt)
            for name, fn in FUNCS.items():
                if quick and name not in ("inv", "solve"):
                    continue
                g = fl.compile(fn)
                want, got = fn(a, b), g(a, b)
                for w, v in zip(want if isinstance(want, tuple) else (want,),
                                got if isinstance(got, tuple) else (got,)):
                    if name == "eigh":
                        w, v = np.abs(w), np.abs(v)
                    np.testing.assert_allclose(v, w, rtol=2e-3 if dt == np.float32 else 1e-8,
                                               atol=1e-4 if dt == np.float32 else 1e-10)
                t = interleaved({"numpy": lambda: fn(a, b), "fastlaunch": lambda: g(a, b)},
                                batches=batches)
                ratio = t["fastlaunch"] / t["numpy"]
                row = [f"{name} {n}x{n} x {batch}", np.dtype(dt).name,
                       f"{t['numpy'] * 1e3:.3f}", f"{t['fastlaunch'] * 1e3:.3f}", f"{ratio:.2f}"]
                rows.append(row)
                print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"], [row]),
                      flush=True)
                out.append(dict(case=row[0], dtype=row[1], numpy_ms=t["numpy"] * 1e3,
                                fastlaunch_ms=t["fastlaunch"] * 1e3, ratio=ratio))
    print(format_table(["case", "dtype", "NumPy ms", "fastlaunch ms", "ratio"], rows))
    print(json.dumps(out))


_FIRST_CALL = """
import os, sys, time
os.environ["FASTLAUNCH_CACHE_DIR"] = ""
sys.path.insert(0, {root!r})
import numpy as np
import fastlaunch as fl
from fastlaunch import small_linalg
n, name = {n}, {name!r}
path = "kernels" if small_linalg.written_out(name, n, 1) else "LAPACK"
small_linalg.MAX_OPS = 10 ** 9
small_linalg.MAX_N = dict.fromkeys(small_linalg.MAX_N, 10 ** 9)
fns = {{"inv": lambda a, b: np.linalg.inv(a), "solve": lambda a, b: np.linalg.solve(a, b),
       "det": lambda a, b: np.linalg.det(a), "slogdet": lambda a, b: tuple(np.linalg.slogdet(a)),
       "cholesky": lambda a, b: np.linalg.cholesky(a)}}
rng = np.random.default_rng(n)
x = rng.standard_normal((100, n, n))
a = x @ np.swapaxes(x, -1, -2) + n * np.eye(n)
b = rng.standard_normal((100, n, 1))
fl.compile(lambda x: x + 1)(a)                   # the backend's own start-up, not counted
g = fl.compile(fns[name])
wall, cpu = time.perf_counter(), time.process_time()
g(a, b)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
low = g.lower(a, b)
print(cpu, wall, sum(1 for k in low.fused.kernels), small_linalg.estimate(name, n, 1), path)
"""


def compile_times(sizes):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    for n in sizes:
        for name in ("inv", "solve", "det", "slogdet", "cholesky"):
            out = subprocess.run([sys.executable, "-c", _FIRST_CALL.format(root=root, n=n,
                                                                           name=name)],
                                 capture_output=True, text=True, timeout=1200)
            if out.returncode:
                raise RuntimeError(out.stderr[-2000:])
            cpu, wall, kernels, ops, path = out.stdout.split()
            row = [f"{name} {n}x{n}", f"{float(cpu):.2f}", f"{float(wall):.2f}", kernels, ops,
                   path]
            rows.append(row)
            print(format_table(["case", "CPU s", "wall s", "kernels", "operations",
                                "path (limit)"], [row]), flush=True)
    print(format_table(["case", "CPU s", "wall s", "kernels", "operations", "path (limit)"],
                       rows))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="only 4x4 x 10000 inv and solve")
    ap.add_argument("--compile", nargs="*", type=int, metavar="N",
                    help="first-call times of the written-out versions (default n: 4 8 12 16)")
    opts = ap.parse_args()
    if opts.compile is not None:
        compile_times(opts.compile or [4, 8, 12, 16])
    else:
        main(opts.batches, opts.quick)
