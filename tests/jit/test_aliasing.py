"""Aliased arguments (issue 11): the same array passed twice, one of the two updated in place,
gives NumPy's result (a program traced with both leaves on one storage); arguments that overlap
without being the same view are refused with an error that says so."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import fastlaunch as fl


def bump_then_read(a, b):
    a += 1
    return b * 2


def read_then_bump(a, b):
    s = a.sum()
    b *= 3
    return a + s


def both(a, b):
    a += b
    b += a
    return a - b


def in_dict(state, g):
    state["p"] -= 2 * g
    return state["q"] + g


CASES = [
    (bump_then_read, lambda x: (x, x)),
    (read_then_bump, lambda x: (x, x)),
    (both, lambda x: (x, x)),
    (in_dict, lambda x: ({"p": x, "q": x}, np.ones_like(x))),
    (bump_then_read, lambda x: (x[::2], x[::2])),          # the same strided view twice
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_same_array_twice_matches_numpy(case, dtype):
    fn, make = CASES[case]
    g = fl.compile(fn)
    base = np.arange(1, 10).astype(dtype)
    ours, ref = base.copy(), base.copy()
    g(*make(np.arange(1, 10).astype(dtype)))       # a distinct-arrays entry exists first
    for _ in range(3):                             # traced once, then the same program again
        args, want_args = make(ours), make(ref)
        got = g(*args)
        want = fn(*copy.copy(want_args))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(ours, ref)
    assert sum("aliased" in t.reason for t in g.traces) == 1


def test_aliased_first_call_and_distinct_calls_afterwards():
    g = fl.compile(bump_then_read)
    x = np.arange(4.0)
    np.testing.assert_array_equal(g(x, x), [2, 4, 6, 8])
    np.testing.assert_array_equal(x, [1, 2, 3, 4])
    y, z = np.arange(4.0), np.arange(4.0)
    np.testing.assert_array_equal(g(y, z), [0, 2, 4, 6])     # distinct again: not aliased
    np.testing.assert_array_equal(y, [1, 2, 3, 4])


def test_overlapping_views_that_differ_are_refused():
    g = fl.compile(bump_then_read)
    x = np.arange(5.0)
    g(np.ones(4), np.ones(4))
    with pytest.raises(ValueError, match="overlap in memory without being the same view"):
        g(x[1:], x[:-1])
    np.testing.assert_array_equal(x, np.arange(5.0))           # nothing written


def test_reading_the_same_array_twice_needs_no_new_program():
    g = fl.compile(lambda a, b: a * b + 1)
    x = np.arange(3.0)
    np.testing.assert_array_equal(g(x, x), x * x + 1)
    assert len(g.traces) == 1


def test_clear_forgets_aliased_programs():
    g = fl.compile(bump_then_read)
    x = np.arange(3.0)
    g(x, x)
    g.clear()
    assert not g.traces
    np.testing.assert_array_equal(g(x, x), (np.arange(3.0) + 2) * 2)
