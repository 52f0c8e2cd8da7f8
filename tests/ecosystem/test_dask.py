"""Compiled functions in Dask pipelines, on Dask's real schedulers: the threaded scheduler (no
pickling; replay runs with the GIL released) and a dask.distributed LocalCluster of two worker
processes (the functions travel pickled: by reference from fl_pipelines, by value for a
closure)."""
import numpy as np
import pytest

import fastlaunch as fl

da = pytest.importorskip("dask.array")
import fl_pipelines  # noqa: E402  (tests/ecosystem is on sys.path: pytest's rootdir insertion)


def test_map_blocks_with_meta_runs_no_probe_traces():
    """dtype= and meta= tell Dask the result type: no probe call on empty arrays (each probe
    would trace and compile a zero-size signature)."""
    f = fl.compile(fl_pipelines.numpy_pipeline)
    x = np.random.default_rng(0).standard_normal(10_000)
    dx = da.from_array(x, chunks=2_500)
    y = da.map_blocks(f, dx, dtype=np.float64, meta=np.empty((0,), np.float64))
    assert f.stats["traces"] == 0                       # building the graph called nothing
    got = y.compute(scheduler="threads")
    want = np.concatenate([fl_pipelines.numpy_pipeline(c) for c in np.split(x, 4)])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert f.stats["traces"] == 1                       # one chunk shape, one trace
    assert [t.signature for t in f.stats["history"]] == ["(float64[2500])"]


def test_map_blocks_without_meta_probes_with_empty_arrays():
    """Documented: without meta=, Dask calls the function on an empty (and, without dtype=, a
    one-element) array to learn the result type, and each call is a trace."""
    f = fl.compile(fl_pipelines.numpy_pipeline)
    dx = da.from_array(np.ones(100), chunks=50)
    da.map_blocks(f, dx, dtype=np.float64)
    assert [t.signature for t in f.stats["history"]] == ["(float64[0])"]


def test_threaded_scheduler_pipeline_matches_numpy():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, 1000))
    dx = da.from_array(x, chunks=(16, 1000))
    power = 3
    scaled = fl.compile(lambda b: np.tanh(b) * 0.5 + b.mean(axis=1, keepdims=True))
    step1 = da.map_blocks(fl_pipelines.normalise, dx, power, dtype=np.float64,
                          meta=np.empty((0, 0)))
    step2 = da.map_blocks(scaled, step1, dtype=np.float64, meta=np.empty((0, 0)))
    got = step2.compute(scheduler="threads", num_workers=2)
    blocks = []
    for b in np.split(x, 4):
        y = np.abs(b) ** power
        y = y / (y.sum() + 1.0)
        blocks.append(np.tanh(y) * 0.5 + y.mean(axis=1, keepdims=True))
    np.testing.assert_allclose(got, np.concatenate(blocks), rtol=1e-12, atol=1e-15)


def test_distributed_local_cluster_pipeline_matches_numpy():
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(2)
    x = rng.standard_normal(40_000)
    k = 0.75
    closure = fl.compile(lambda b: np.exp(-b * b * k) + b)     # pickled by value (cloudpickle)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None, host="127.0.0.1") as cluster, \
            distributed.Client(cluster) as client:
        dx = da.from_array(x, chunks=5_000)
        meta = np.empty((0,), np.float64)
        y = da.map_blocks(fl_pipelines.smooth, dx, dtype=np.float64, meta=meta)
        z = da.map_blocks(closure, y, dtype=np.float64, meta=meta)
        total = da.map_blocks(fl_pipelines.scaled, z, 2.0, 1, dtype=np.float64, meta=meta).sum()
        got_z, got_total = client.compute([z, total], sync=True)
        # the work ran on both worker processes, not here
        workers = client.run(lambda: __import__("os").getpid())
        assert len(set(workers.values())) == 2
    assert closure.stats["traces"] == 0 and fl_pipelines.smooth.stats["traces"] == 0
    chunks = np.split(x, 8)
    want_z = np.concatenate([np.exp(-y * y * k) + y
                             for y in (fl_pipelines.smooth.__wrapped__(c) for c in chunks)])
    np.testing.assert_allclose(got_z, want_z, rtol=1e-12)
    np.testing.assert_allclose(got_total, fl_pipelines.scale_and_shift(want_z, 2.0, 1).sum(),
                               rtol=1e-10)


def _soft_clip(x, lo):
    return np.where(x > lo, np.tanh(x) * 2.0 + 1.0, lo * np.exp(x - lo))


def test_short_last_chunks_trace_once_per_chunk_shape_class():
    """Issue 29: arrays whose last chunk is shorter (and other chunkings) reach the function at
    many sizes of one size class: the first size is traced, the second traces once more with
    symbolic sizes, and every later size is an instance (no trace, no compile)."""
    f = fl.compile(_soft_clip)
    rng = np.random.default_rng(5)
    sizes = set()
    for n, chunk in ((10_000, 1_500), (7_000, 3_000), (4_321, 1_000), (2_000, 2_000),
                     (999, 250)):
        x = rng.standard_normal(n)
        dx = da.from_array(x, chunks=chunk)
        sizes |= set(dx.chunks[0])
        y = da.map_blocks(f, dx, -0.5, dtype=np.float64, meta=np.empty((0,), np.float64))
        np.testing.assert_allclose(y.compute(scheduler="threads", num_workers=2),
                                   _soft_clip(x, -0.5), rtol=1e-13)
    assert len(sizes) >= 7
    assert f.stats["traces"] == 2, f.stats["history"]
    assert f.stats["symbolic"] and "symbolic sizes" in f.stats["history"][1].reason


def test_short_last_row_chunks_2d():
    """2-D blocks of (rows, 1000) whose last row-chunk is short: the rows are a symbol."""
    f = fl.compile(lambda b: np.tanh(b) * 0.5 + b * b)
    rng = np.random.default_rng(6)
    for rows, chunk in ((70, 16), (45, 20), (35, 8)):
        x = rng.standard_normal((rows, 1000))
        dx = da.from_array(x, chunks=(chunk, 1000))
        y = da.map_blocks(f, dx, dtype=np.float64, meta=np.empty((0, 0)))
        np.testing.assert_allclose(y.compute(scheduler="threads"), np.tanh(x) * 0.5 + x * x,
                                   rtol=1e-13)
    assert f.stats["traces"] == 2, f.stats["history"]


def test_distributed_short_last_chunks_trace_at_most_twice_per_worker():
    """Each worker process keeps its own copy of a module-level compiled function: it traces
    at most twice for the chunk sizes of one class, however many sizes it meets."""
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(7)
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None, host="127.0.0.1") as cluster, \
            distributed.Client(cluster) as client:
        for n, chunk in ((9_000, 2_000), (5_500, 1_200), (3_333, 700)):
            x = rng.standard_normal(n)
            dx = da.from_array(x, chunks=chunk)
            y = da.map_blocks(fl_pipelines.soft_clip, dx, 0.25, dtype=np.float64,
                              meta=np.empty((0,), np.float64))
            np.testing.assert_allclose(client.compute(y, sync=True), _soft_clip(x, 0.25),
                                       rtol=1e-13)
        traces = client.run(fl_pipelines.worker_traces, "soft_clip")
    assert traces and all(1 <= t <= 2 for t in traces.values()), traces
