"""Aliased arguments (issue 11): the same array passed twice, or overlapping views of one
array, one of them updated in place, give NumPy's result (a program traced for that overlap, in
which the leaves share one storage); overlaps that cannot be expressed as views of one storage
(mixed dtypes) are refused with an error that says so."""
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


# ---- overlapping views that are not the same view --------------------------------------------
def add_into(a, b):
    a += b
    return a + 0


def store_twice(a, b):
    a[:] = b * 2
    return b + 0


def write_then_read(a, b):
    a *= 3
    c = b + 1          # b seen after the write through a
    a -= 1
    return c, b.sum()


def rows_minus_row(M, r):
    M -= r             # every row, including r's own, minus r's old values (NumPy copies r)
    r += 1             # then r itself, as changed by the line above
    return M.sum(0)


def transpose_add(A, B):
    A += B
    return B - 1


def jacobi(mid, up, down):
    mid[...] = 0.5 * (up + down)
    return mid.sum()


def three(a, b, c):
    a += b
    c *= 2
    b -= c
    return a + b + c


def _np_on(make, fn, data):
    """fn run by NumPy on a copy of data, and the copy afterwards."""
    ref = data.copy()
    out = fn(*make(ref))
    return out, ref


VIEW_CASES = [
    (add_into, lambda x: (x[1:], x[:-1])),
    (add_into, lambda x: (x[:-1], x[1:])),
    (store_twice, lambda x: (x[1:], x[:-1])),
    (store_twice, lambda x: (x[:-2], x[2:])),
    (write_then_read, lambda x: (x[1:], x[:-1])),
    (write_then_read, lambda x: (x[:-3], x[3:])),
    (add_into, lambda x: (x[:6], x[::2])),                  # f(a, a[::2]) of equal lengths
    (store_twice, lambda x: (x[::2], x[:6])),
    (add_into, lambda x: (x[::-1], x)),                      # a negative stride
    (write_then_read, lambda x: (x[5::-1], x[::2])),
    (rows_minus_row, lambda x: (x.reshape(3, 4), x.reshape(3, 4)[0])),
    (rows_minus_row, lambda x: (x.reshape(3, 4), x.reshape(3, 4)[2])),
    (rows_minus_row, lambda x: (x.reshape(3, 4)[:, 1:3], x.reshape(3, 4)[1, 2:])),
    (rows_minus_row, lambda x: (x.reshape(3, 4)[1:, :2], x.reshape(3, 4)[2, :2])),
    (add_into, lambda x: (x.reshape(3, 4)[::-1, 1:3], x.reshape(3, 4)[:, 2:0:-1])),
    (transpose_add, lambda x: (x[:9].reshape(3, 3).T, x[:9].reshape(3, 3))),
    (transpose_add, lambda x: (x[:9].reshape(3, 3), x[:9].reshape(3, 3).T)),
    (three, lambda x: (x[:8], x[2:10], x[4:])),              # a group of three
    (three, lambda x: (x[:8], x[4:], x[2:10])),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("case", range(len(VIEW_CASES)))
def test_overlapping_views_match_numpy(case, dtype):
    fn, make = VIEW_CASES[case]
    g = fl.compile(fn)
    data = np.arange(1, 13).astype(dtype)
    for _ in range(3):                              # traced once, then the same program again
        ours = data.copy()
        got = g(*make(ours))
        want, ref = _np_on(make, fn, data)
        for x, y in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_array_equal(x, y)
            assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(ours, ref)
        data = ref                                  # the next call starts where NumPy ended
    assert sum("aliased" in t.reason for t in g.traces) == 1


def test_the_classic_shift_accumulate():
    """x[1:] += x[:-1] reads the old values of the overlap (NumPy copies the input first),
    whether written inside the function on one array or through two overlapping arguments."""
    def shift(x):
        x[1:] += x[:-1]

    def pair(a, b):
        a += b
    one, two = fl.compile(shift), fl.compile(pair)
    x, y, ref = np.arange(8.0), np.arange(8.0), np.arange(8.0)
    ref[1:] += ref[:-1]
    one(x)
    two(y[1:], y[:-1])
    np.testing.assert_array_equal(x, ref)
    np.testing.assert_array_equal(y, ref)


def test_2d_stencil_updating_the_interior():
    g = fl.compile(jacobi)
    u = np.random.default_rng(0).standard_normal((7, 9))
    ref = u.copy()
    for _ in range(3):
        got = g(u[1:-1, 1:-1], u[:-2, 1:-1], u[2:, 1:-1])
        want = jacobi(ref[1:-1, 1:-1], ref[:-2, 1:-1], ref[2:, 1:-1])
        np.testing.assert_allclose(got, want, rtol=1e-12)
        np.testing.assert_array_equal(u, ref)
    assert sum("aliased" in t.reason for t in g.traces) == 1


def test_a_different_overlap_traces_anew():
    g = fl.compile(add_into)
    x, ref = np.arange(10.0), np.arange(10.0)
    for shift in (1, 2, 1, 3, 2):
        got = g(x[shift:], x[:-shift])
        want = add_into(ref[shift:], ref[:-shift])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, ref)
    assert sum("aliased" in t.reason for t in g.traces) == 3


def test_non_overlapping_views_of_one_array_take_the_fast_path():
    g = fl.compile(add_into)
    x, ref = np.arange(10.0), np.arange(10.0)
    g(x[:5], x[5:])
    add_into(ref[:5], ref[5:])
    misses = []
    slow = g._miss
    g._miss = lambda *a: misses.append(a) or slow(*a)
    for first, second in ((slice(0, 5), slice(5, 10)), (slice(0, 10, 2), slice(1, 10, 2))):
        g(x[first], x[second])
        add_into(ref[first], ref[second])
    np.testing.assert_array_equal(x, ref)
    assert len(misses) == 1                       # the strided pair's new signature, once
    g(x[::2], x[1::2])
    add_into(ref[::2], ref[1::2])
    np.testing.assert_array_equal(x, ref)
    assert len(misses) == 1
    assert not any("aliased" in t.reason for t in g.traces)


def test_overlapping_views_of_different_dtypes_are_refused():
    g = fl.compile(add_into)
    x = np.arange(6.0)
    g(np.ones(5), np.ones(5, np.int64))
    with pytest.raises(ValueError, match=r"argument leaves 0, 1 overlap in memory.*different "
                                         r"dtypes.*pass a copy"):
        g(x[1:], x[:-1].view(np.int64))
    np.testing.assert_array_equal(x, np.arange(6.0))           # nothing written


def test_views_off_whole_elements_are_refused():
    g = fl.compile(add_into)
    raw = np.zeros(12)
    a = raw[:10].view(np.complex128)         # 16-byte elements 8 bytes apart
    b = raw[1:11].view(np.complex128)
    with pytest.raises(ValueError, match="not whole elements"):
        g(a, b)
    assert not raw.any()


def test_overlap_of_arguments_that_are_only_read_needs_no_new_program():
    g = fl.compile(lambda a, b: a * b + 1)
    x = np.arange(6.0)
    np.testing.assert_array_equal(g(x[1:], x[:-1]), x[1:] * x[:-1] + 1)
    assert len(g.traces) == 1


def test_a_window_view_overlapping_an_updated_argument_is_refused():
    def smooth(a, w):
        a += w.sum(axis=1)
    g = fl.compile(smooth)
    x = np.arange(8.0)
    windows = np.lib.stride_tricks.sliding_window_view(x, 3)    # elements overlap each other
    with pytest.raises(ValueError, match="argument leaves 0, 1 overlap.*own elements overlap"):
        g(x[:6], windows)
    np.testing.assert_array_equal(x, np.arange(8.0))


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
def test_overlapping_views_in_a_dict_and_across_a_device_boundary(backend):
    f = fl.compile(in_dict, backend=backend)
    x, ref = np.arange(10.0), np.arange(10.0)
    for _ in range(2):
        got = f({"p": x[1:], "q": x[:-1]}, np.ones(9))
        want = in_dict({"p": ref[1:], "q": ref[:-1]}, np.ones(9))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, ref)
    g = fl.compile(transpose_add, backend=backend)
    M, N = np.arange(12.0).reshape(3, 4), np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(g(M[:, 1:], M[:, :3].T), transpose_add(N[:, 1:], N[:, :3].T))
    np.testing.assert_array_equal(M, N)


def bump_each(a, b, c=None):
    a += 1
    b *= 2
    if c is not None:
        c -= a[: c.shape[0]] if c.ndim == 1 else 0.5
    return a.sum() + b.sum()


INTERLEAVED = [
    lambda x: (x[::2], x[1::2]),                                   # 1-D, every other element
    lambda x: (x[1::3], x[::3], x[2::3]),                          # three, out of order
    lambda x: (x.reshape(6, 10)[:, ::2], x.reshape(6, 10)[:, 1::2]),   # columns
    lambda x: (x.reshape(6, 10)[::2], x.reshape(6, 10)[1::2]),     # rows
    lambda x: (x[::-2], x[-2::-2]),                                # reversed
]


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
@pytest.mark.parametrize("case", range(len(INTERLEAVED)))
def test_interleaved_arguments_updated_in_place_match_numpy(case, backend):
    """Before: on devsim (and CUDA) each argument updated in place was copied back as its
    whole byte span, so the second copy undid the first one's writes between its elements:
    f(x[::2], x[1::2]) lost a's updates.  Such arguments are now aliased on a backend that
    copies spans (one span, copied back once); the CPU writes through the strides directly."""
    f = fl.compile(bump_each, backend=backend)
    x, ref = np.arange(60.0), np.arange(60.0)
    for _ in range(3):
        got = f(*INTERLEAVED[case](x))
        want = bump_each(*INTERLEAVED[case](ref))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(x, ref)
    aliased = sum("aliased" in t.reason for t in f.traces)
    assert aliased == (backend == "devsim" and case != 4)   # reversed: copies, written back
    # distinct arrays of the same signature still take the ordinary program
    args = [np.ascontiguousarray(a) for a in INTERLEAVED[case](np.arange(60.0))]
    want = [a.copy() for a in args]
    np.testing.assert_array_equal(f(*args), bump_each(*want))
    for a, b in zip(args, want):
        np.testing.assert_array_equal(a, b)
    assert sum("aliased" in t.reason for t in f.traces) == aliased


def test_an_interleaved_argument_that_is_only_read_needs_no_new_program():
    f = fl.compile(bump_then_read, backend="devsim")
    x, ref = np.arange(20.0), np.arange(20.0)
    np.testing.assert_array_equal(f(x[::2], x[1::2]), bump_then_read(ref[::2], ref[1::2]))
    np.testing.assert_array_equal(x, ref)
    assert not any("aliased" in t.reason for t in f.traces)
