"""A Dask pipeline of compiled NumPy functions over a chunked array.

    python examples/dask_pipeline.py                  # Dask's threaded scheduler
    python examples/dask_pipeline.py --distributed    # a LocalCluster of 2 worker processes

Needs `pip install 'fastlaunch[dask]'`.  What to copy:
- `fl.compile` the per-block NumPy function and hand it to `da.map_blocks`;
- pass `dtype=` and `meta=` (an empty array of the result's dtype and ndim): without them Dask
  probes the function with empty and one-element arrays, and each probe is a trace;
- threads: compiled calls replay with the GIL released, so blocks run in parallel;
- processes / dask.distributed: a compiled function pickles (by reference when importable, else
  by value with cloudpickle, as here from `__main__`); each worker traces once per block shape,
  loading kernels from its disk cache.  `fl.compile(fn).with_programs(*example_block)` ships
  the traced program instead, so workers neither trace nor compile.
"""
import argparse
import time

import numpy as np

import fastlaunch as fl


def block_step(x, y, alpha):
    """One block: a damped radial wave and its block-normalised energy (plain NumPy)."""
    r = np.sqrt(x * x + y * y)
    w = np.exp(-alpha * r) * np.cos(4.0 * r)
    return w * w / (np.mean(w * w) + 1e-12)


step = fl.compile(block_step)


def example_inputs(n=4_000_000, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
            0.5)


def pipeline(x, y, alpha, chunk, fn=step):
    """The lazy Dask result: fn on every block, then a global sum per block and overall."""
    import dask.array as da
    dx, dy = da.from_array(x, chunks=chunk), da.from_array(y, chunks=chunk)
    out = da.map_blocks(fn, dx, dy, alpha, dtype=x.dtype, meta=np.empty((0,), x.dtype))
    return out, out.sum()


def numpy_reference(x, y, alpha, chunk):
    blocks = [block_step(x[i:i + chunk], y[i:i + chunk], alpha) for i in range(0, len(x), chunk)]
    return np.concatenate(blocks)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--distributed", action="store_true",
                    help="run on a dask.distributed LocalCluster of 2 worker processes")
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--chunk", type=int, default=250_000)
    opts = ap.parse_args()
    x, y, alpha = example_inputs(opts.n)
    out, total = pipeline(x, y, alpha, opts.chunk)
    want = numpy_reference(x, y, alpha, opts.chunk)
    if opts.distributed:
        from dask.distributed import Client, LocalCluster
        with LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            t0 = time.perf_counter()
            got, got_total = client.compute([out, total], sync=True)
            seconds = time.perf_counter() - t0
        where = "LocalCluster (2 worker processes)"
    else:
        out.compute(scheduler="threads")                  # first run: traces once per shape
        t0 = time.perf_counter()
        got, got_total = (v.compute(scheduler="threads") for v in (out, total))
        seconds = time.perf_counter() - t0
        where = "threaded scheduler"
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got_total, want.sum(dtype=np.float64), rtol=1e-4)
    print(f"{where}: {opts.n} elements in blocks of {opts.chunk}: results equal to NumPy's; "
          f"{seconds * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
