"""Value and gradient of the README's loss, fastlaunch against the peers' automatic
differentiation, side by side in one run (issue 27's targets).

    python bench/grad.py                                # 16, 65536, 4194304 float32
    python bench/grad.py --sizes 16 --runners fl,jax,drjit-freeze
    python bench/grad.py --adam                         # the Adam loop in fl.iterate

The loss is `mean((sin(p) + p*p - target)**2)`; every runner returns its value and its
gradient with respect to p, checked against the closed form before timing:

- `fl`: `fl.value_and_grad(loss)` (one compiled program, replayed);
- `fl-forward`: `fl.compile(loss)`, the forward pass alone (the cheap-gradient ratio);
- `numpy-by-hand`: NumPy computing the value and the hand-derived gradient;
- `jax`: `jax.jit(jax.value_and_grad(loss))`, CPU;
- `torch`: eager autograd (`loss.backward()`), CPU; `torch.compile`: the loss compiled by
  inductor, `backward()` through AOTAutograd's compiled backward;
- `drjit`: Dr.Jit's AD on the LLVM backend (`dr.enable_grad`, `dr.backward`), evaluated per
  call; `drjit-freeze`: the same function under `@dr.freeze`;
- `autograd`: HIPS autograd's `value_and_grad` (eager, a tape).

A peer that is not installed is reported "not available".  Times are medians of interleaved
batches (benchtools.interleaved), with each runner's time over fastlaunch's in the same run.

`--adam`: the README's Adam step calling `fl.value_and_grad`, 10 000 iterations at 16
elements inside `fl.iterate`, per iteration, against the Python loop over the same compiled
step (checked bit for bit first).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fastlaunch as fl  # noqa: E402
from fastlaunch.benchtools import fmt_time, format_table, interleaved  # noqa: E402


def loss(p, target):
    return np.mean((np.sin(p) + p * p - target) ** 2)


def by_hand(p, target):
    r = np.sin(p) + p * p - target
    return np.mean(r * r), 2 * r * (np.cos(p) + 2 * p) / p.size


# ---- runners: each returns (prepare(p, t) -> callable() -> (value, grad as NumPy)) --------------
def r_fl():
    f = fl.value_and_grad(loss)
    return lambda p, t: (lambda: f(p, t))


def r_fl_forward():
    f = fl.compile(loss)
    return lambda p, t: (lambda: (f(p, t), None))


def r_numpy():
    return lambda p, t: (lambda: by_hand(p, t))


def r_jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_platforms", "cpu")
    f = jax.jit(jax.value_and_grad(lambda p, t: jnp.mean((jnp.sin(p) + p * p - t) ** 2)))

    def prepare(p, t):
        jp, jt = jnp.asarray(p), jnp.asarray(t)

        def run():
            v, g = f(jp, jt)
            g.block_until_ready()
            return v, g
        return run
    return prepare


def r_torch(compiled: bool):
    import torch
    torch.set_num_threads(os.cpu_count() or 1)

    def lf(p, t):
        return torch.mean((torch.sin(p) + p * p - t) ** 2)
    fn = torch.compile(lf) if compiled else lf

    def prepare(p, t):
        tp = torch.from_numpy(p.copy()).requires_grad_(True)
        tt = torch.from_numpy(t)

        def run():
            tp.grad = None
            v = fn(tp, tt)
            v.backward()
            return v.detach(), tp.grad
        return run
    return prepare


def r_drjit(freeze: bool):
    import drjit as dr
    from drjit.llvm.ad import Float

    def vg(p, t):
        dr.enable_grad(p)
        r = dr.sin(p) + p * p - t
        value = dr.sum(r * r) / dr.width(p)
        dr.backward(value)
        g = dr.grad(p)
        value = dr.detach(value)
        dr.eval(value, g)
        return value, g
    fn = dr.freeze(vg) if freeze else vg

    def prepare(p, t):
        fp, ft = Float(p), Float(t)

        def run():
            q = Float(fp)                       # a fresh leaf per call (its grad starts at 0)
            v, g = fn(q, ft)
            dr.sync_thread()                    # dr.eval launches asynchronously: wait for it
            return v, g
        return run
    return prepare


def r_autograd():
    import autograd
    import autograd.numpy as anp
    f = autograd.value_and_grad(lambda p, t: anp.mean((anp.sin(p) + p * p - t) ** 2))
    return lambda p, t: (lambda: f(p, t))


RUNNERS = {
    "fl": r_fl, "fl-forward": r_fl_forward, "numpy-by-hand": r_numpy, "jax": r_jax,
    "torch": lambda: r_torch(False), "torch.compile": lambda: r_torch(True),
    "drjit": lambda: r_drjit(False), "drjit-freeze": lambda: r_drjit(True),
    "autograd": r_autograd,
}


def _numpy(x):
    if x is None:
        return None
    for attr in ("numpy",):
        if hasattr(x, "detach"):
            x = x.detach()
        if hasattr(x, attr) and not isinstance(x, np.ndarray):
            try:
                return np.asarray(getattr(x, attr)())
            except TypeError:
                pass
    return np.asarray(x)


def bench_sizes(sizes, names, batches, min_batch):
    rows = []
    for n in sizes:
        rng = np.random.default_rng(0)
        p = rng.standard_normal(n).astype(np.float32)
        t = rng.standard_normal(n).astype(np.float32)
        want_v, want_g = by_hand(p.astype(np.float64), t.astype(np.float64))
        runners, notes = {}, {}
        for name in names:
            try:
                run = RUNNERS[name]()(p, t)
                v, g = run()
                v = float(np.asarray(_numpy(v)).reshape(-1)[0])
                if abs(v - want_v) > 1e-4 * abs(want_v) + 1e-6:
                    notes[name] = f"FAILED (value {v} vs {want_v})"
                    continue
                if g is not None:
                    err = np.max(np.abs(_numpy(g).astype(np.float64) - want_g)) / \
                        max(np.max(np.abs(want_g)), 1e-30)
                    if err > 1e-4:
                        notes[name] = f"FAILED (gradient error {err:.1e})"
                        continue
                runners[name] = run
            except Exception as e:          # noqa: BLE001  (a peer missing or broken)
                notes[name] = f"not available: {type(e).__name__}: {str(e)[:80]}"
        times = interleaved(runners, min_batch_seconds=min_batch, batches=batches)
        base = times.get("fl")
        for name in names:
            if name in times:
                ratio = f"{times[name] / base:.2f}" if base else "-"
                rows.append([n, name, fmt_time(times[name]), ratio])
            else:
                rows.append([n, name, notes.get(name, "-"), ""])
        if "fl" in times and "fl-forward" in times:
            rows.append([n, "(fl / fl-forward)", "", f"{times['fl'] / times['fl-forward']:.2f}"])
    return rows


def bench_adam(iters, batches):
    @fl.compile
    def adam(p, m, v, target, lr):
        value, g = fl.value_and_grad(loss)(p, target)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return p - lr * m / (np.sqrt(v) + 1e-8), m, v, value
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(16).astype(np.float32)
    t = rng.standard_normal(16).astype(np.float32)
    z = np.zeros(16, np.float32)
    lr = np.float32(1e-2)
    loop = fl.iterated(adam, iters, carry=("p", "m", "v"), collect=False)

    def python_loop():
        p, m, v = p0, z, z
        for _ in range(iters):
            p, m, v, _ = adam(p, m, v, t, lr)
        return p, m, v
    a, b = loop(p0, z, z, t, lr), python_loop()
    if not all(np.array_equal(x, y) for x, y in zip(a, b)):
        raise SystemExit("fl.iterate differs from the Python loop over the compiled step")
    times = interleaved({"iterate": lambda: loop(p0, z, z, t, lr), "python-loop": python_loop},
                        min_batch_seconds=0.05, batches=batches)
    return [["iterate", fmt_time(times["iterate"] / iters), "1.00"],
            ["python-loop", fmt_time(times["python-loop"] / iters),
             f"{times['python-loop'] / times['iterate']:.2f}"]]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="16,65536,4194304")
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--batches", type=int, default=7)
    ap.add_argument("--min-batch", type=float, default=0.05)
    ap.add_argument("--adam", action="store_true", help="the Adam loop in fl.iterate")
    ap.add_argument("--iters", type=int, default=10_000)
    args = ap.parse_args(argv)
    load = os.getloadavg()
    print(f"fastlaunch {fl.__version__}, {platform.machine()}, {os.cpu_count()} cores, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    if args.adam:
        print(f"Adam step with fl.value_and_grad, 16 float32, {args.iters} iterations, per "
              f"iteration (median of interleaved batches):\n")
        print(format_table(["runner", "per iteration", "ratio"], bench_adam(args.iters,
                                                                            args.batches)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    names = [r for r in args.runners.split(",") if r]
    unknown = [r for r in names if r not in RUNNERS]
    if unknown:
        raise SystemExit(f"unknown runners {unknown}; known: {', '.join(RUNNERS)}")
    print("value and gradient of mean((sin(p) + p*p - target)**2), float32, per call "
          "(median of interleaved batches); ratio: time / fl's\n")
    print(format_table(["n", "runner", "time", "ratio"], bench_sizes(sizes, names, args.batches,
                                                                    args.min_batch)))


if __name__ == "__main__":
    main()
