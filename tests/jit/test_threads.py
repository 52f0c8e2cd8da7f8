"""Concurrent calls from several Python threads: correct results, no deadlock."""
import threading

import numpy as np
import pytest

import fastlaunch as fl

TIMEOUT = 60.0


def run_threads(target, nthreads):
    """Run target(i) in nthreads daemon threads; fail (never hang) if one does not finish."""
    errors = []
    barrier = threading.Barrier(nthreads)

    def body(i):
        try:
            barrier.wait(timeout=TIMEOUT)
            target(i)
        except BaseException as err:        # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "deadlock: a thread did not finish"
    if errors:
        raise errors[0]


def step(p, m, lr):
    g = np.sin(p) + 0.1 * p
    m = 0.9 * m + 0.1 * g
    return p - lr * m, m, np.mean(g * g)


def make_inputs(n, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n), rng.standard_normal(n) * 0.1


def check(got, p, m, lr):
    want = step(p, m, lr)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("n", [1000, 1_000_000])
@pytest.mark.parametrize("nthreads", [2, 4])
def test_concurrent_replays(n, nthreads):
    cf = fl.compile(step)
    p0, m0 = make_inputs(n, 0)
    check(cf(p0, m0, 0.01), p0, m0, 0.01)            # traced here, replayed in the threads
    inputs = [make_inputs(n, 1 + i) for i in range(nthreads)]
    iterations = 20 if n <= 1000 else 3

    def work(i):
        p, m = inputs[i]
        for k in range(iterations):
            lr = 0.01 * (i + 1) + k * 1e-3
            check(cf(p, m, lr), p, m, lr)

    run_threads(work, nthreads)
    assert cf.stats["traces"] == 1


@pytest.mark.parametrize("nthreads", [2, 4])
def test_concurrent_first_calls(nthreads):
    """Every thread's first call races to trace the same signature."""
    calls = []

    def f(x, y):
        calls.append(1)
        return np.exp(-x * x) + y.sum()

    cf = fl.compile(f)
    rng = np.random.default_rng(7)
    inputs = [(rng.standard_normal(500), rng.standard_normal(500)) for _ in range(nthreads)]
    results = [None] * nthreads

    def work(i):
        results[i] = [cf(*inputs[i]) for _ in range(5)]

    run_threads(work, nthreads)
    for (x, y), outs in zip(inputs, results):
        want = np.exp(-x * x) + y.sum()
        for out in outs:
            np.testing.assert_allclose(out, want, rtol=1e-9)
    assert cf.stats["entries"] == 1
    assert 1 <= len(calls) <= nthreads


def test_concurrent_first_calls_with_different_signatures():
    cf = fl.compile(lambda x: x / x.sum())
    shapes = [(10,), (11,), (3, 4), (12,)]
    dtypes = [np.float32, np.float64, np.float64, np.float32]
    results = [None] * 4

    def work(i):
        x = np.arange(1, int(np.prod(shapes[i])) + 1, dtype=dtypes[i]).reshape(shapes[i])
        results[i] = (x, [cf(x) for _ in range(5)])

    run_threads(work, 4)
    for x, outs in results:
        for out in outs:
            assert out.dtype == x.dtype
            np.testing.assert_allclose(out, x / x.sum(), rtol=1e-6)
    assert cf.stats["entries"] == 4


def test_concurrent_in_place_updates_on_distinct_arrays():
    def f(x, y):
        x += y

    cf = fl.compile(f)
    n = 100_000
    arrays = [np.zeros(n) for _ in range(4)]
    incs = [np.full(n, float(i + 1)) for i in range(4)]
    cf(np.zeros(n), np.ones(n))

    def work(i):
        for _ in range(10):
            cf(arrays[i], incs[i])

    run_threads(work, 4)
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(a, 10.0 * (i + 1))
