"""GPU overhead and bandwidth of the CUDA backend (bench/gpu_check.sh runs it on a GPU).

The README's optimisation step (`python -m fastlaunch`'s `step`: 5 arguments, a loss
reduction and an Adam-like update) at 16 and 4 194 304 float32 elements, per call:

  numpy path     fl.compile(step, backend="cuda") on NumPy arrays: copies in, kernels,
                 copies out, one synchronisation (what a NumPy user gets)
  device arrays  the same function on fl.DeviceArrays (state kept on the GPU, results
                 DeviceArrays): direct launches, no copies
  raw launches   the floor: the same kernels launched by cuLaunchKernel from a C loop on
                 device-resident buffers, one synchronisation per iteration
                 (_cuda.launch_floor); target: device arrays within 1.2x of this at 16
  cupy eager     the same step written with CuPy (if CuPy imports)

and the effective bandwidth of the device-array step at the large size (bytes its kernels
move / time per call) as a fraction of cuMemcpyDtoD's (target: >= 0.8).  CUDA graph mode is
not implemented: there is no graph column.

    python bench/gpu_bench.py [--sizes 16,4194304] [--seconds 0.3]
    python bench/gpu_bench.py --backend devsim     # a dry run of this script without a GPU
                                                   # (devsim's host kernels; no floor, no DtoD)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import fastlaunch as fl
from fastlaunch.__main__ import step
from fastlaunch._launch import Space


def step_xp(xp, p, m, v, target, lr):
    """`step` written for an array module (CuPy)."""
    y = xp.sin(p) + p * p
    r = y - target
    loss = xp.mean(r * r)
    g = 2 * r * (xp.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (xp.sqrt(v) + 1e-8)
    return p, m, v, loss


def state(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32),
            (rng.standard_normal(n) * 0.1).astype(np.float32),
            (rng.random(n) * 0.1).astype(np.float32), rng.standard_normal(n).astype(np.float32)]


def per_call(fn, seconds: float, batches: int = 5) -> float:
    """Median over batches of the mean seconds per call (each call returns when done)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(seconds / batches / once))
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def fmt(seconds):
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-2 else f"{seconds * 1e3:.2f} ms"


def check(got, want, what):
    for i, (g, w) in enumerate(zip(got, want)):
        g = g.numpy() if isinstance(g, fl.DeviceArray) else np.asarray(g)
        err = float(np.max(np.abs(g.astype(np.float64) - w)) / max(1e-30, np.max(np.abs(w))))
        if not err < 1e-4:
            raise SystemExit(f"{what}: output {i} differs from NumPy (relative error {err:.2e})")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16,4194304")
    ap.add_argument("--seconds", type=float, default=0.3, help="timing per measurement")
    ap.add_argument("--backend", default="cuda", help="cuda; devsim: a dry run without a GPU")
    args = ap.parse_args(argv)
    gpu = args.backend == "cuda"
    _cuda = None
    if gpu:
        from fastlaunch import _cuda
        _cuda.require_driver()
        info = _cuda.device_info()
        print(f"device: {info['name']}, sm_{info['compute_capability'][0]}"
              f"{info['compute_capability'][1]}, {info['multiprocessors']} SMs, driver "
              f"{info['driver_version']}; fastlaunch {fl.__version__}")
    else:
        print(f"dry run on backend {args.backend!r}: no GPU, times are not GPU times")
    cupy = None
    if gpu:
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as err:          # noqa: BLE001 - any failure: no CuPy column
            cupy = None
            print(f"cupy: not available ({type(err).__name__}: {err})")
    f = fl.compile(step, backend=args.backend)
    rows, bandwidth = [], None
    for n in [int(s) for s in args.sizes.split(",")]:
        host = state(n)
        want = [np.asarray(w, np.float64) for w in step(*host, 1e-2)]
        check(f(*host, 1e-2), want, f"numpy path n={n}")
        dev = [fl.to_device(a, args.backend) for a in host]
        check(f(*dev, 1e-2), want, f"device arrays n={n}")
        entry = next(e for e in f._entries_list()       # the device-array signature's
                     if e.info.leaves[0].space == Space.SPACE_DEVICE)
        program = entry.info.lowered.program
        t_numpy = per_call(lambda: f(*host, 1e-2), args.seconds)
        t_dev = per_call(lambda: f(*dev, 1e-2), args.seconds)
        iters = max(10, int(args.seconds / max(t_dev, 1e-6)))
        t_floor = statistics.median(_cuda.launch_floor(entry.executable, iters, 1e-2)
                                    for _ in range(5)) if gpu else None
        t_cupy = None
        if cupy is not None:
            cdev = [cupy.asarray(a) for a in host]

            def run_cupy():
                out = step_xp(cupy, *cdev, 1e-2)
                cupy.cuda.Stream.null.synchronize()
                return out
            check([cupy.asnumpy(o) for o in run_cupy()], want, f"cupy n={n}")
            t_cupy = per_call(run_cupy, args.seconds)
        moved = sum(k.bytes_moved for k in program.kernels)
        rows.append((n, program.launch_count(), t_numpy, t_dev, t_floor, t_cupy, moved))
        bandwidth = (n, moved, t_dev, t_floor)
    print()
    print(f"{'n':>9} {'launches':>8} {'numpy path':>12} {'device arrays':>14} {'raw launches':>13}"
          f" {'dev/raw':>8} {'cupy eager':>11}  graph mode")
    for n, nl, t_numpy, t_dev, t_floor, t_cupy, _ in rows:
        ratio = f"{t_dev / t_floor:>7.2f}x" if t_floor else f"{'-':>8}"
        print(f"{n:>9} {nl:>8} {fmt(t_numpy):>12} {fmt(t_dev):>14} {fmt(t_floor):>13} "
              f"{ratio} {fmt(t_cupy):>11}  not implemented")
    if not gpu:
        return 0
    dtod = _cuda.copy_bandwidth(256 << 20, 20)
    n, moved, t_dev, t_floor = bandwidth
    print()
    print(f"cuMemcpyDtoD: {dtod / 1e9:.0f} GB/s (256 MiB, read + write)")
    print(f"step at n={n}: its kernels move {moved / 1e6:.1f} MB per call: "
          f"device arrays {moved / t_dev / 1e9:.0f} GB/s = {moved / t_dev / dtod:.2f} of DtoD; "
          f"raw launches {moved / t_floor / 1e9:.0f} GB/s = {moved / t_floor / dtod:.2f} of DtoD")
    small = rows[0]
    print(f"targets: device arrays within 1.2x of raw launches at n={small[0]}: "
          f"{small[3] / small[4]:.2f}x; bandwidth >= 0.8 of DtoD at n={n}: "
          f"{moved / t_dev / dtod:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
