"""The cost of tracing a Python loop (issue 29: the first call of a 1000-step loop costs at
most 3x that of a 10-step one).  Counted in Python function calls and graph insertions per
traced step, not in wall time: the numbers do not depend on the machine or its load
(bench/first_call.py --loop measures the time)."""
from __future__ import annotations

import cProfile
import gc
import pstats

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.frontend import trace


def heat1d(u, k, steps):
    for _ in range(steps):
        u = u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return u


def _first_call_counts(steps: int, u) -> tuple[int, int]:
    """(Python function calls, Graph.add calls) of a new compiled function's first call."""
    f = fl.compile(heat1d, static_argnums=2)
    prof = cProfile.Profile()
    prof.enable()
    try:
        f(u, 0.1, steps)
    finally:
        prof.disable()
    stats = pstats.Stats(prof)
    adds = sum(v[1] for k, v in stats.stats.items()
               if k[0].endswith("ir/graph.py") and k[2] == "add")
    return stats.total_calls, adds


def test_tracing_work_per_loop_step_is_small_and_constant():
    u = np.random.default_rng(0).random(256)
    fl.compile(heat1d, static_argnums=2)(u, 0.1, 50)    # the rolled loop's kernels, compiled
    counts = {n: _first_call_counts(n, u) for n in (200, 1200, 3200)}
    calls = [(counts[1200][0] - counts[200][0]) / 1000,
             (counts[3200][0] - counts[1200][0]) / 2000]
    adds = [(counts[1200][1] - counts[200][1]) / 1000,
            (counts[3200][1] - counts[1200][1]) / 2000]
    # a step of 7 ops (two np.roll, five arithmetic): about 700 Python calls when this test
    # was written, 2,760 before the tracer was made cheaper; Graph.add 15 times (7 new nodes)
    assert calls[0] <= 1000, calls
    assert adds[0] <= 16, adds
    # no work per op that grows with the graph: the later steps cost what the earlier did
    assert calls[1] <= calls[0] * 1.02 + 5, calls
    assert adds[1] == adds[0], adds


@pytest.mark.parametrize("n", [0, 1, 5, 16])
def test_roll_of_a_vector_builds_the_general_paths_nodes(n):
    """np.roll(x, int) of a 1-D x takes a short path (shaping._roll_1d): the same graph
    as the general one (taken for a NumPy integer shift or a tuple of axes)."""
    x = np.arange(n, dtype=np.float32) * 1.5
    for shift in (-40, -5, -1, 0, 1, 3, 16, 17, 40):
        for axis in (None, 0, -1):
            fast = fl.compile(lambda a: np.roll(a, shift, axis=axis))
            general = fl.compile(lambda a: np.roll(a, np.int64(shift), axis=(0,)))
            assert fast.lower(x).graph == general.lower(x).graph, (shift, axis)
            np.testing.assert_array_equal(fast(x), np.roll(x, shift, axis=axis))
    b = np.arange(n) % 3 == 0
    np.testing.assert_array_equal(fl.compile(lambda a: np.roll(a, 2))(b), np.roll(b, 2))
    # axes the short path leaves to the general one: repeated, as an array
    for axis in ([0, 0], np.array([0, -1])):
        f = fl.compile(lambda a: np.roll(a, 3, axis=axis))
        np.testing.assert_array_equal(f(x), np.roll(x, 3, axis=axis))


def test_fewer_collections_while_tracing_and_restored_after():
    before = gc.get_threshold()
    seen = []

    def fn(x):
        seen.append(gc.get_threshold())
        return x + 1
    fl.compile(fn)(np.ones(3))
    assert seen[0][0] == max(before[0], trace.TRACE_GC_THRESHOLD) or before[0] == 0
    assert gc.get_threshold() == before

    def bad(x):
        seen.append(gc.get_threshold())
        raise ValueError("raised inside the trace")
    with pytest.raises(ValueError):
        fl.compile(bad)(np.ones(3))
    assert gc.get_threshold() == before
    # a threshold the traced code sets itself is left as it set it
    try:
        def sets(x):
            gc.set_threshold(1234)
            return x * 2
        fl.compile(sets)(np.ones(3))
        assert gc.get_threshold()[0] == 1234
    finally:
        gc.set_threshold(*before)
