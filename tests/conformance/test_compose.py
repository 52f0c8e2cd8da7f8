"""The rest of the reshaping surface: np.select, np.piecewise, np.choose, np.put, np.place,
np.copyto(where=), np.split / array_split / hsplit / vsplit / dsplit, np.column_stack,
np.dstack, np.atleast_1d / 2d / 3d and np.broadcast_arrays, over dtypes, 0-d / empty / odd /
non-contiguous inputs and axes; in-place writes compared on the arguments after the call."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import check, check_many, cover, make, param, short

COMPOSE = "selection, in-place writes, splitting and stacking"
DTYPES = [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.uint16,
                                 np.int64, np.bool_)]


def _p(name, dtypes=DTYPES):
    return [param(d, name=name, dtype=d, id=short(d)) for d in dtypes]


# ---- select, piecewise, choose -------------------------------------------------------------
SELECTS = {
    "select 2 conds": lambda x, y, s, i3: np.select([x > 0, y > 0], [x, y]),
    "select default": lambda x, y, s, i3: np.select([x > 0, x < 0], [x, y], default=7),
    "select broadcast": lambda x, y, s, i3: np.select([x[:, :1] > 0], [s], default=x),
    "select scalar choices": lambda x, y, s, i3: np.select([x > 0, y > 0], [1, 2]),
    "select 0-d": lambda x, y, s, i3: np.select([s > 0], [s]),
    "piecewise 2 conds, 3 funcs": lambda x, y, s, i3: np.piecewise(
        x, [x < 0, x > 1], [lambda v: v * 2, lambda v: v + 1, 5]),
    "piecewise consts": lambda x, y, s, i3: np.piecewise(x, [x > 0], [1, 0]),
    "piecewise one cond": lambda x, y, s, i3: np.piecewise(x, x > 0, [lambda v: -v]),
    "piecewise 0-d": lambda x, y, s, i3: np.piecewise(s, [s > 0], [3, lambda v: v]),
    "choose": lambda x, y, s, i3: np.choose(i3, [x, y, x * 2]),
    "choose broadcast": lambda x, y, s, i3: np.choose(i3[:1], [x, y[:, :1], s]),
    "choose scalar choices": lambda x, y, s, i3: np.choose(i3, [0, 1, 2]),
    "choose wrap": lambda x, y, s, i3: np.choose(i3 + 2, [x, y], mode="wrap"),
    "choose clip": lambda x, y, s, i3: np.choose(i3 * 2 - 1, [x, y], mode="clip"),
    "method choose": lambda x, y, s, i3: i3.choose([x, y, x]),
}


@pytest.mark.parametrize("dtype", _p("np.select"))
def test_select_piecewise_choose(dtype):
    dt = np.dtype(dtype)
    x = make((5, 7), dt, "T", special=False)
    y = make((5, 7), dt, "negstep", special=False, key=("y",))
    s = make((), dt, special=False)
    i3 = make((5, 7), np.int64, values=np.arange(35) % 3)
    check_many(SELECTS, x, y, s, i3)


def test_select_choose_errors():
    x = make((4,), np.float64)
    i = make((4,), np.int64, values=[0, 1, 2, 1])
    for f in (lambda x, i: np.select([x > 0], [x, x]), lambda x, i: np.select([], []),
              lambda x, i: np.select([x], [x]), lambda x, i: np.choose(i, []),
              lambda x, i: np.choose(x, [x, x]), lambda x, i: np.choose(i, [x, x], mode="nope"),
              lambda x, i: np.piecewise(x, [x > 0, x < 0], [1])):
        check(f, x, i)
    # a choice index outside [0, n) raises ValueError when the compiled function runs
    f = fl.compile(lambda i, x: np.choose(i, [x, x * 2]))
    np.testing.assert_array_equal(f(np.array([0, 1, 1, 0]), x), np.choose([0, 1, 1, 0], [x, x * 2]))
    with pytest.raises(ValueError, match=r"np.choose"):
        f(np.array([0, 1, 2, 0]), x)
    with pytest.raises(ValueError):
        np.choose(np.array([0, 1, 2, 0]), [x, x * 2])


for _n in ("np.select", "np.piecewise", "np.choose"):
    cover(_n, COMPOSE, DTYPES, test="test_compose.py::test_select_piecewise_choose",
          note={"np.piecewise": "each function is called on all of x (not x[cond]) and the "
                                "results selected: the same for the elementwise functions "
                                "piecewise is used with; the number of conditions is static",
                "np.choose": "mode='raise' checks 0 <= a < n in the kernel and raises ValueError "
                             "when the function runs (no argument modified)",
                }.get(_n, "a chain of np.where"))


# ---- put, place, copyto ----------------------------------------------------------------------
def _put_cases():
    return {
        "put": lambda a, ind, v: np.put(a, ind, v),
        "put wrap": lambda a, ind, v: np.put(a, ind * 3 + 50, v, mode="wrap"),
        "put clip": lambda a, ind, v: np.put(a, ind * 3 - 5, v, mode="clip"),
        "put scalar v": lambda a, ind, v: np.put(a, ind, 3),
        "put v repeats": lambda a, ind, v: np.put(a, ind, v[:2]),
        "put negative": lambda a, ind, v: np.put(a, -ind - 1, v),
        "method put": lambda a, ind, v: a.put(ind, v),
    }


@pytest.mark.parametrize("dtype", _p("np.put"))
@pytest.mark.parametrize("case", list(_put_cases()))
def test_put(case, dtype):
    """Into a C array, a transposed one (flat indices in C order of the view) and a 0-d one;
    repeated indices: the last write wins, as in NumPy."""
    dt = np.dtype(dtype)
    f = _put_cases()[case]
    v = make((5,), dt, special=False, key=("v",))
    ind = make((5,), np.int64, values=[0, 7, 3, 7, 11])
    check(lambda a, ind, v: (f(a, ind, v), a)[1], make((3, 4), dt, special=False), ind, v)
    check(lambda a, ind, v: (f(a, ind, v), a)[1], make((4, 3), dt, "T", special=False), ind, v)
    if case in ("put wrap", "put clip", "put scalar v"):
        check(lambda a, ind, v: (f(a, ind, v), a)[1], make((), dt, special=False), ind, v)


def test_put_errors():
    a = make((3, 4), np.float64)
    for f in (lambda a: np.put(a, [12], 1.0), lambda a: np.put(a, [-13], 1.0),
              lambda a: np.put(a, [1], 1.0, mode="nope"), lambda a: np.put(a, [1.5], 1.0),
              lambda a: np.put(a[:0], [0], 1.0)):
        check(f, a)
    # a traced index out of range: IndexError at run time, the argument untouched
    g = fl.compile(lambda a, i: np.put(a, i, 5.0))
    b = a.copy()
    with pytest.raises(IndexError):
        g(b, np.array([1, 12]))
    np.testing.assert_array_equal(b, a)


PLACES = {
    "place": lambda a, m, v, w: (np.place(a, m, v), a)[1],
    "place vals repeat": lambda a, m, v, w: (np.place(a, m, v[:2]), a)[1],
    "place scalar": lambda a, m, v, w: (np.place(a, m, 9), a)[1],
    "copyto where": lambda a, m, v, w: (np.copyto(a, w, where=m), a)[1],
    "copyto broadcast": lambda a, m, v, w: (np.copyto(a, w[:1], where=m[:1]), a)[1],
    "copyto all": lambda a, m, v, w: (np.copyto(a, w), a)[1],
    "copyto scalar": lambda a, m, v, w: (np.copyto(a, 2, where=m), a)[1],
}


@pytest.mark.parametrize("dtype", _p("np.place"))
def test_place_and_copyto(dtype):
    dt = np.dtype(dtype)
    m = make((4, 6), np.bool_, key=("m",))
    for layout in ("C", "T"):
        a = make((4, 6), dt, layout, special=False)
        check_many(PLACES, a, m, make((5,), dt, special=False, key=("v",)),
                   make((4, 6), dt, "negstep", special=False, key=("w",)))
    check(lambda a, m: (np.copyto(a, a * 2, where=m), a)[1], make((), dt), make((), np.bool_))


def test_place_copyto_errors():
    a = make((4, 6), np.float64)
    m = make((4, 6), np.bool_)
    i = make((4, 6), np.int32)
    for f in (lambda a, m, i: np.place(a, m[:2], [1.0]),
              lambda a, m, i: np.copyto(i, a),                       # same_kind refuses
              lambda a, m, i: np.copyto(a, a[:2, :2]),
              lambda a, m, i: np.copyto(a, a, where=i),
              lambda a, m, i: np.copyto(i, 1.5, where=m),
              lambda a, m, i: np.copyto(m, 2), lambda a, m, i: np.copyto(m, 1.0, where=m)):
        check(f, a, m, i)
    check(lambda a, m, i: (np.copyto(i, a, casting="unsafe", where=m), i)[1],
          make((4, 6), np.float64, domain=(-100, 100)), m, i)


for _n in ("np.put", "np.place", "np.copyto"):
    cover(_n, COMPOSE, DTYPES, test={"np.put": "test_compose.py::test_put"}.get(
        _n, "test_compose.py::test_place_and_copyto"),
        note={"np.put": "an in-place scatter; a traced index out of range raises IndexError "
                        "when the function runs, with nothing written",
              "np.place": "the k-th True element takes vals[k % len(vals)]: a cumulative sum "
                          "and a gather, written in place",
              "np.copyto": "where= is a np.where written in place"}[_n])


# ---- splitting and stacking -----------------------------------------------------------------
SPLITS = {
    "split 3": lambda x1, x2, x3, x0, e: np.split(x1, 3),
    "split at indices": lambda x1, x2, x3, x0, e: np.split(x1, [2, 5, 20]),
    "split axis 1": lambda x1, x2, x3, x0, e: np.split(x2, [1, 3], axis=1),
    "array_split 4 (uneven)": lambda x1, x2, x3, x0, e: np.array_split(x1, 4),
    "array_split axis -1": lambda x1, x2, x3, x0, e: np.array_split(x3, 3, axis=-1),
    "array_split of empty": lambda x1, x2, x3, x0, e: np.array_split(e, 2),
    "hsplit": lambda x1, x2, x3, x0, e: np.hsplit(x2, [2]),
    "vsplit": lambda x1, x2, x3, x0, e: np.vsplit(x3, 2),
    "dsplit": lambda x1, x2, x3, x0, e: np.dsplit(x3, [1, 4]),
    "hsplit 1-D": lambda x1, x2, x3, x0, e: np.hsplit(x1, 3),
    "column_stack 1-D": lambda x1, x2, x3, x0, e: np.column_stack([x1[:5], x1[4:]]),
    "column_stack mixed": lambda x1, x2, x3, x0, e: np.column_stack((x2.T[:, :2], x1[:7])),
    "dstack": lambda x1, x2, x3, x0, e: np.dstack([x2, x2 * 2]),
    "dstack 1-D and 0-d": lambda x1, x2, x3, x0, e: np.dstack((x1[:3], x1[3:6])),
    "atleast_1d": lambda x1, x2, x3, x0, e: np.atleast_1d(x0),
    "atleast_1d many": lambda x1, x2, x3, x0, e: np.atleast_1d(x0, x1, e),
    "atleast_2d": lambda x1, x2, x3, x0, e: np.atleast_2d(x0, x1, x2),
    "atleast_3d": lambda x1, x2, x3, x0, e: np.atleast_3d(x0, x1, x2, x3),
    "atleast_3d one": lambda x1, x2, x3, x0, e: np.atleast_3d(x1),
    "broadcast_arrays": lambda x1, x2, x3, x0, e: np.broadcast_arrays(x2, x2[:1], x0),
    "broadcast_arrays then sum": lambda x1, x2, x3, x0, e:
        sum(np.broadcast_arrays(x2[:, :1], x2[:1], x0)),
}


@pytest.mark.parametrize("dtype", _p("np.split"))
def test_split_and_stack(dtype):
    dt = np.dtype(dtype)
    check_many(SPLITS, make((15,), dt, "step"), make((7, 4), dt, "T"),
               make((4, 3, 6), dt, "negstep"), make((), dt), make((0,), dt))


def test_split_stack_errors():
    x = make((10,), np.float64)
    for f in (lambda x: np.split(x, 3), lambda x: np.split(x, 2, axis=1),
              lambda x: np.array_split(x, 0), lambda x: np.vsplit(x, 2),
              lambda x: np.dsplit(x.reshape(2, 5), 1), lambda x: np.column_stack([x, x[:3]]),
              lambda x: np.broadcast_arrays(x, x[:3])):
        check(f, x)
    # a broadcast array is read-only (NumPy's warns, then is read-only): a clear error
    with pytest.raises(fl.TracingError, match="read-only"):
        fl.compile(lambda x: np.broadcast_arrays(x, x[:, None])[0].__setitem__(0, 1))(x)


for _n in ("np.split", "np.array_split", "np.hsplit", "np.vsplit", "np.dsplit",
           "np.column_stack", "np.dstack", "np.atleast_1d", "np.atleast_2d", "np.atleast_3d",
           "np.broadcast_arrays"):
    cover(_n, COMPOSE, DTYPES, test="test_compose.py::test_split_and_stack",
          note={"np.split": "static sections or indices: views, no copies",
                "np.array_split": "static sections or indices: views, no copies",
                "np.broadcast_arrays": "read-only stride-0 views"}.get(_n))
