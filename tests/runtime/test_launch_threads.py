"""How many threads a launch uses: the CPU schedule's cost model (cpu_schedule.launch_threads),
shown in dis; the runtime following it (a launch kept on one thread never starts the pool,
one worth fewer threads than the pool has leaves the others out), per-thread slices of chunks,
and set_parallel_threshold still overriding the schedules."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.backends import cpu_schedule
from fastlaunch.backends.cpu_schedule import NS_PER_WORK, THREAD_NS, launch_threads


def run_child(code: str, **environ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **environ})


def chain(x, y):
    t = 2.0 * x - y
    u = np.clip(t * t + 0.25 * y, -4.0, 4.0)
    return np.maximum(np.sqrt(np.abs(u - x)), y) * 1.5 - 0.125 * t


def test_the_cost_model():
    def work_for(ns):
        return int(ns / NS_PER_WORK)
    assert launch_threads(1 << 20, -1) == 1                      # ordered: one thread
    assert launch_threads(1, work_for(100 * THREAD_NS)) == 1     # one index cannot be split
    assert launch_threads(1000, work_for(1.9 * THREAD_NS) // 1000) == 1
    assert launch_threads(1000, work_for(2.1 * THREAD_NS) // 1000) == 2
    assert launch_threads(1000, work_for(7.5 * THREAD_NS) // 1000) == 7
    assert launch_threads(3, work_for(100 * THREAD_NS)) == 3     # at most one per index
    assert launch_threads(1 << 30, 1000) == cpu_schedule.MAX_THREADS
    sizes = [1 << k for k in range(4, 26)]
    threads = [launch_threads(n, 17) for n in sizes]
    assert threads == sorted(threads) and threads[0] == 1


def test_dis_shows_the_thread_count():
    f = fl.compile(chain)
    for n in (16, 4096, 65536, 1 << 20):
        x = np.ones(n, np.float32)
        (k,) = f.lower(x, x).plan.kernels
        want = launch_threads(n, k.schedule.work_per_item)
        assert k.schedule.threads == want and k.schedule.params[1] == want
        assert f"threads={want}" in f.lower(x, x).text()
    assert f.lower(np.ones(16, np.float32), np.ones(16, np.float32)).plan.kernels[0] \
        .schedule.threads == 1
    big = np.ones(1 << 20, np.float32)
    assert f.lower(big, big).plan.kernels[0].schedule.threads >= 2


def test_results_do_not_depend_on_the_threads():
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(300_001).astype(np.float32) for _ in range(2))
    g = fl.compile(lambda x, y: (chain(x, y), np.sum(x * y), np.cumsum(x)[-1]))
    want = g(x, y)
    saved = _core.get_parallel_threshold()
    try:
        for threshold in (1 << 62, 0, 4096):       # serial, split everything, split most
            _core.set_parallel_threshold(threshold)
            got = g(x, y)
            assert all(np.array_equal(a, b) for a, b in zip(got, want))
    finally:
        _core.set_parallel_threshold(saved)
    assert saved == -1                              # the default: the schedules decide
    np.testing.assert_allclose(want[0], chain(x, y), rtol=1e-6, atol=1e-6)


SERIAL_NEVER_STARTS_THE_POOL = r"""
import numpy as np, fastlaunch as fl
from fastlaunch import _core
from fastlaunch.backends.cpu_schedule import launch_threads
f = fl.compile(lambda x: np.sqrt(np.abs(x * 1.5 + 0.5)) - x)
small = np.ones(2048, np.float32)
assert f.lower(small).plan.kernels[0].schedule.threads == 1
for _ in range(100):
    f(small)
assert _core.thread_count() == 0, "a launch its schedule keeps on one thread started the pool"
big = np.ones(1 << 21, np.float32)
assert f.lower(big).plan.kernels[0].schedule.threads >= 2
assert np.array_equal(f(big), np.sqrt(np.abs(big * 1.5 + 0.5)) - big)
assert _core.thread_count() == 3
print("threads ok")
"""


def test_a_serial_launch_never_starts_the_pool():
    proc = run_child(SERIAL_NEVER_STARTS_THE_POOL, FASTLAUNCH_NUM_THREADS="3")
    assert proc.returncode == 0 and "threads ok" in proc.stdout, proc.stderr[-3000:]


# a pool of 4 running launches worth 2 and 3 threads (workers without a slice stay out) and
# the whole pool, back to back and from two Python threads: every result exact
FEWER_THREADS_THAN_THE_POOL = r"""
import threading
import numpy as np, fastlaunch as fl
from fastlaunch import _core
from fastlaunch.backends.cpu_schedule import NS_PER_WORK, THREAD_NS
f = fl.compile(lambda x: np.sqrt(np.abs(x * 1.5 + 0.5)) - x)
arrays = {}
for t in (2, 3, 6):
    n = 4096
    while f.lower(np.ones(n, np.float32)).plan.kernels[0].schedule.threads < t:
        n += 4096
    arrays[t] = np.random.default_rng(t).standard_normal(n).astype(np.float32)
    assert f.lower(arrays[t]).plan.kernels[0].schedule.threads == t, t
want = {t: np.sqrt(np.abs(x * 1.5 + 0.5)) - x for t, x in arrays.items()}
errors = []
def hammer():
    try:
        for _ in range(300):
            for t, x in arrays.items():
                assert np.array_equal(f(x), want[t])
    except BaseException as e:
        errors.append(e)
ts = [threading.Thread(target=hammer) for _ in range(2)]
for th in ts: th.start()
for th in ts: th.join(120)
assert not any(th.is_alive() for th in ts) and not errors, errors
assert _core.thread_count() == 4
print("slices ok")
"""


def test_launches_worth_fewer_threads_than_the_pool():
    proc = run_child(FEWER_THREADS_THAN_THE_POOL, FASTLAUNCH_NUM_THREADS="4")
    assert proc.returncode == 0 and "slices ok" in proc.stdout, proc.stderr[-3000:]


@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 1000, 100_003, 4_000_037])
def test_chunking_covers_every_index_once(n):
    """Launch sizes around the chunk rounding (whole vectors per chunk, CHUNK_WORK slices):
    every output written once and right, on the schedule's threads and split over all."""
    x = np.arange(n, dtype=np.float64)
    f = fl.compile(lambda x: x * 2.0 + 1.0)
    saved = _core.get_parallel_threshold()
    try:
        for threshold in (-1, 0):
            _core.set_parallel_threshold(threshold)
            assert np.array_equal(f(x), x * 2.0 + 1.0)
    finally:
        _core.set_parallel_threshold(saved)
