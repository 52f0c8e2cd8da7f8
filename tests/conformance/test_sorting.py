"""Sorting and selection: np.sort, np.argsort, np.partition, np.argpartition, np.searchsorted,
np.median, np.percentile, np.quantile, and the methods x.sort() (in place), x.argsort(),
x.partition(), x.argpartition(), x.searchsorted().

Rows of up to 32 elements take the kernels' insertion sort, longer ones the radix sort, so the
shapes below cover both.  Results are compared exactly where NumPy's answer is unique: sorted
values (NaNs last; -0.0 and 0.0 compare equal, so signed zeros are not compared), stable
argsort, medians and quantiles.  NumPy's default (quicksort) argsort leaves the order of ties
unspecified: it is checked as a property (the positions are a permutation that sorts the row),
as are partitions (every element left of kth is <= a[kth] <= every element right of it).
"""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import ALL, FLOATS, check, check_many, cover, make, param, short, slow_except

SORT = "sorting and selection"
TEST = "test_sorting.py::"


def _inputs(dt):
    dt = np.dtype(dt)
    return (make((4, 5, 40), dt, "negstep"),     # radix rows along -1, insertion along 0/1
            make((257,), dt),                    # one long odd row
            make((7, 33), dt, "T"),              # non-contiguous rows just past insertion
            make((3, 0), dt), make((1,), dt), make((), dt),
            make((9, 6), dt, "step"))


def _variants(f, axis_none=True):
    v = {
        "3d": lambda x3, x1, xt, e, one, z, xs: f(x3),
        "3d ax0": lambda x3, x1, xt, e, one, z, xs: f(x3, axis=0),
        "3d ax1": lambda x3, x1, xt, e, one, z, xs: f(x3, axis=1),
        "1d": lambda x3, x1, xt, e, one, z, xs: f(x1),
        "T": lambda x3, x1, xt, e, one, z, xs: f(xt),
        "T ax0": lambda x3, x1, xt, e, one, z, xs: f(xt, axis=0),
        "empty": lambda x3, x1, xt, e, one, z, xs: f(e),
        "empty ax0": lambda x3, x1, xt, e, one, z, xs: f(e, axis=0),
        "one": lambda x3, x1, xt, e, one, z, xs: f(one),
        "step": lambda x3, x1, xt, e, one, z, xs: f(xs, axis=-2),
        "slice": lambda x3, x1, xt, e, one, z, xs: f(x1[::-3]),
        "expr": lambda x3, x1, xt, e, one, z, xs: f(x1 * 2 if x1.dtype.kind != "b" else ~x1),
        "0d ax-1": lambda x3, x1, xt, e, one, z, xs: f(z),
    }
    if axis_none:
        v["None"] = lambda x3, x1, xt, e, one, z, xs: f(x3, axis=None)
        v["0d None"] = lambda x3, x1, xt, e, one, z, xs: f(z, axis=None)
    return v


for _name in ("np.sort", "np.argsort", "x.sort", "x.argsort"):
    cover(_name, SORT, ALL, test=TEST + "test_sort",
          note="stable for every kind (NaNs last, -0.0 == 0.0); the default argsort's order of "
               "ties is NumPy's own choice, ours is the stable one" if "argsort" in _name
          else "stable for every kind, NaNs last")


# every byte width, signed and unsigned, by default (1-3 s each); the other integers: slow
@pytest.mark.parametrize("dtype", slow_except(
    [param(d, name="np.sort", dtype=d, id=short(d)) for d in ALL],
    np.bool_, np.uint8, np.float16, np.float32, np.float64, np.int64))
def test_sort(dtype):
    """Sorted values (every kind) and stable argsort (kind='stable' / 'mergesort') exactly."""
    args = _inputs(dtype)
    v = _variants(np.sort)
    v.update({f"argsort {k}": f for k, f in _variants(
        lambda x, axis=-1: np.argsort(x, axis=axis, kind="stable")).items()})
    v["argsort mergesort"] = lambda x3, x1, *_: np.argsort(x1, kind="mergesort")
    v["argsort stable="] = lambda x3, x1, *_: np.argsort(x3, axis=1, stable=True)
    v["sort quicksort"] = lambda x3, x1, *_: np.sort(x3, kind="quicksort")
    v["sort heapsort"] = lambda x3, x1, *_: np.sort(x1, kind="heapsort")
    v["method argsort"] = lambda x3, x1, *_: x3.argsort(axis=0, kind="stable")
    check_many(v, *args)


@pytest.mark.parametrize("dtype", [param(d, name="np.sort", dtype=f"{short(d)} (special values)",
                                         id=short(d)) for d in FLOATS])
def test_sort_special_values(dtype):
    """NaNs last (also negative NaNs), infinities, -0.0 and 0.0 tied: stable argsort keeps
    them in order; short rows (insertion) and long rows (radix)."""
    dt = np.dtype(dtype)
    row = np.array([np.nan, 1.0, -np.inf, -0.0, 0.0, np.inf, -np.nan, -1.0, 0.0, -0.0, 2.0,
                    np.nan, -2.0], dt)
    long_row = np.tile(row, 9)
    check(lambda a, b: (np.sort(a), np.argsort(a, kind="stable"), np.sort(b),
                        np.argsort(b, kind="stable"), np.sort(np.stack([a, a[::-1]]), axis=0)),
          row, long_row)


def test_sort_in_place_method():
    """x.sort() sorts the argument in place (the caller sees it), and a view of it too."""
    x = make((6, 50), np.float32)

    def body(x):
        x.sort()
        x[:, :3].sort(axis=0)
        return x.sum(axis=1)
    check(body, x, tol="reduce", atol=1e-3)
    y = make((40,), np.int16)

    def body2(y):
        z = y * 3
        z.sort()
        return z, y.argsort(kind="stable")
    check(body2, y)


@pytest.mark.parametrize("n", [1, 2, 3, 17, 32, 33, 64, 300])
def test_sort_row_lengths(n):
    """Lengths around the insertion/radix threshold, with many ties (radix passes skipped)."""
    a = make((3, n), np.int64, values=np.arange(3 * n) % 5 - 2)
    b = make((2, n), np.float64)
    check(lambda a, b: (np.sort(a), np.argsort(a, kind="stable"), np.sort(b, axis=-1),
                        np.argsort(b, axis=0, kind="stable")), a, b)


def _permutation_sorts(x, idx, axis):
    """idx is a permutation along `axis` that sorts x (NaNs last)."""
    assert idx.dtype == np.intp
    assert np.array_equal(np.sort(idx, axis=axis),
                          np.broadcast_to(np.expand_dims(np.arange(x.shape[axis]),
                                                         tuple(d for d in range(x.ndim)
                                                               if d != axis % x.ndim)), x.shape))
    assert np.array_equal(np.take_along_axis(x, idx, axis), np.sort(x, axis=axis),
                          equal_nan=x.dtype.kind == "f")


@pytest.mark.parametrize("dtype", [param(d, name="np.argsort", dtype=d, id=short(d))
                                   for d in (np.float32, np.int8, np.bool_)])
def test_default_argsort_property(dtype):
    """The default (quicksort) argsort: any permutation that sorts is right."""
    x = make((5, 70), dtype)
    f = fl.compile(lambda x: (np.argsort(x), x.argsort(axis=0), np.argsort(x, axis=None)))
    for _ in range(2):
        a, b, c = f(x)
        _permutation_sorts(x, a, -1)
        _permutation_sorts(x, b, 0)
        _permutation_sorts(x.ravel(), c, 0)


cover("np.partition", SORT, ALL, test=TEST + "test_partition",
      note="a full sort: a valid partition for every kth")
cover("np.argpartition", SORT, ALL, test=TEST + "test_partition",
      note="a full stable argsort: a valid partition for every kth")
cover("x.partition", SORT, ALL, test=TEST + "test_partition")


def _is_partition(x, part, kth, axis):
    s = np.sort(x, axis=axis)
    eq = np.array_equal if x.dtype.kind != "f" else (lambda a, b: np.array_equal(a, b, equal_nan=True))
    for k in np.atleast_1d(kth):
        k = int(k) % x.shape[axis]
        pk = np.take(part, [k], axis=axis)
        assert eq(pk, np.take(s, [k], axis=axis))
        left = np.take(part, np.arange(k), axis=axis)
        right = np.take(part, np.arange(k + 1, x.shape[axis]), axis=axis)
        with np.errstate(invalid="ignore"):
            if x.dtype.kind == "f":
                assert np.all((left <= pk) | np.isnan(pk))
                assert np.all((right >= pk) | np.isnan(right))
            else:
                assert np.all(left <= pk) and np.all(right >= pk)


@pytest.mark.parametrize("dtype", [param(d, name="np.partition", dtype=d, id=short(d))
                                   for d in ALL])
def test_partition(dtype):
    x = make((6, 45), dtype)
    f = fl.compile(lambda x: (np.partition(x, 7), np.partition(x, [0, -1, 20], axis=1),
                              np.partition(x, 3, axis=0), np.argpartition(x, 5),
                              x.argpartition(-2, axis=0)))
    for _ in range(2):
        p1, p2, p3, a1, a2 = f(x)
        _is_partition(x, p1, 7, -1)
        _is_partition(x, p2, [0, -1, 20], 1)
        _is_partition(x, p3, 3, 0)
        _is_partition(x, np.take_along_axis(x, a1, -1), 5, -1)
        _is_partition(x, np.take_along_axis(x, a2, 0), -2, 0)

    def body(x):
        x.partition(4)
        return x
    got = fl.compile(body)(x.copy())
    _is_partition(x, got, 4, -1)


def test_sort_errors():
    """NumPy's errors: bad kind, kth out of range, 0-d sort along an axis, bad axis."""
    x = make((4, 5), np.float64)
    z = make((), np.float64)
    check_many({
        "kind": lambda x, z: np.sort(x, kind="bogus"),
        "axis": lambda x, z: np.sort(x, axis=2),
        "0d": lambda x, z: np.sort(z),
        "0d partition": lambda x, z: np.partition(z, 0),
        "kth": lambda x, z: np.partition(x, 5),
        "kth neg": lambda x, z: np.partition(x, -6, axis=0),
        "0d argsort": lambda x, z: np.argsort(z),
        "0d argpartition": lambda x, z: np.argpartition(z, 0),
        "kind and stable": lambda x, z: np.sort(x, kind="stable", stable=True),
    }, x, z)


cover("np.searchsorted", SORT, ALL, test=TEST + "test_searchsorted",
      note="a binary search unrolled into ceil(log2(n+1)) fused gather steps; side, sorter")
cover("x.searchsorted", SORT, ALL, test=TEST + "test_searchsorted")


@pytest.mark.parametrize("dtype", [param(d, name="np.searchsorted", dtype=d, id=short(d))
                                   for d in ALL])
def test_searchsorted(dtype):
    dt = np.dtype(dtype)
    a = np.sort(make((37,), dt))
    perm = make((37,), np.int64, values=np.random.default_rng(1).permutation(37))
    shuffled = np.empty_like(a)
    shuffled[perm] = a                      # shuffled[perm[i]] = a[i]: perm sorts shuffled
    v = make((5, 11), dt)
    one = np.sort(make((1,), dt))
    empty = np.zeros(0, dt)

    def new_args(args):
        # the new-values call keeps `perm` the sorter of the shuffled array
        a2, _, p, *rest = args
        s2 = np.empty_like(a2)
        s2[p] = a2
        return [a2, s2, p, *rest]
    check_many({
        "left": lambda a, s, p, v, o, e: np.searchsorted(a, v),
        "right": lambda a, s, p, v, o, e: np.searchsorted(a, v, side="right"),
        "scalar": lambda a, s, p, v, o, e: np.searchsorted(a, v[0, 0]),
        "self": lambda a, s, p, v, o, e: np.searchsorted(a, a, side="right"),
        "sorter": lambda a, s, p, v, o, e: np.searchsorted(s, v, sorter=p),
        "sorter right": lambda a, s, p, v, o, e: np.searchsorted(s, a, "right", p),
        "one": lambda a, s, p, v, o, e: np.searchsorted(o, v),
        "empty": lambda a, s, p, v, o, e: np.searchsorted(e, v),
        "method": lambda a, s, p, v, o, e: a.searchsorted(v[1], side="right"),
        "python scalar": lambda a, s, p, v, o, e: np.searchsorted(a, 1),
    }, a, shuffled, perm, v, one, empty, new_args=new_args)


def test_searchsorted_errors():
    a = make((5,), np.float64)
    check_many({
        "side": lambda a: np.searchsorted(a, 1.0, side="middle"),
        "2d": lambda a: np.searchsorted(a.reshape(1, 5), 1.0),
        "sorter size": lambda a: np.searchsorted(a, 1.0, sorter=np.arange(4)),
    }, a)


cover("np.median", SORT, ALL, test=TEST + "test_median_quantile",
      note="a sort, then NumPy's mean of the middle one or two; a NaN propagates per slice")
for _name in ("np.percentile", "np.quantile"):
    cover(_name, SORT, ALL, test=TEST + "test_median_quantile",
          note="method='linear' (NumPy's default) only; q static (a number, list or array); a "
               "NaN propagates per slice. Difference: for a 0-d result with a non-weak q "
               "(np.float64(0.5), a 0-d array) over data with a NaN, NumPy returns the NaN in "
               "the input's dtype (a data-dependent dtype); fastlaunch keeps the result dtype")


@pytest.mark.parametrize("dtype", [param(d, name="np.median", dtype=d, id=short(d)) for d in ALL])
def test_median_quantile(dtype):
    """np.median / percentile / quantile over axes, keepdims, scalar and array q, with
    NaNs (floats) propagated per slice."""
    dt = np.dtype(dtype)
    x3 = make((4, 5, 6), dt, "negstep")
    x1 = make((101,), dt)
    x2 = make((6, 8), dt, "T")
    one = make((1,), dt)
    v = {
        "median": lambda x3, x1, x2, o: np.median(x1),
        "median ax": lambda x3, x1, x2, o: np.median(x3, axis=1),
        "median even": lambda x3, x1, x2, o: np.median(x2, axis=1),
        "median ax tuple keep": lambda x3, x1, x2, o: np.median(x3, axis=(0, 2), keepdims=True),
        "median None keep": lambda x3, x1, x2, o: np.median(x2, keepdims=True),
        "median one": lambda x3, x1, x2, o: np.median(o),
        "quantile": lambda x3, x1, x2, o: np.quantile(x1, 0.3),
        "quantile q=1": lambda x3, x1, x2, o: np.quantile(x1, 1),
        "quantile list": lambda x3, x1, x2, o: np.quantile(x3, [0.0, 0.25, 0.5, 1.0], axis=2),
        "quantile array f32 q": lambda x3, x1, x2, o: np.quantile(x2, np.float32(0.7), axis=0),
        "quantile keep": lambda x3, x1, x2, o: np.quantile(x3, 0.9, axis=(1, 2), keepdims=True),
        "percentile": lambda x3, x1, x2, o: np.percentile(x2, 37.5, axis=0),
        "percentile list": lambda x3, x1, x2, o: np.percentile(x1, [5, 50, 95]),
        "percentile 2d q": lambda x3, x1, x2, o: np.percentile(x2, [[10, 90], [20, 80]], axis=1),
    }
    tol = "exact" if dt.kind in "iub" else "arith"
    check_many(v, x3, x1, x2, one, tol=tol)


@pytest.mark.parametrize("dtype", [param(d, name="np.median", dtype=f"{short(d)} (special values)",
                                         id=short(d)) for d in FLOATS])
def test_median_nan(dtype):
    dt = np.dtype(dtype)
    rows = np.array([[1.0, np.nan, 3.0, -1.0], [np.inf, -np.inf, 0.0, 1.0], [2.0, 1.0, 4.0, 3.0],
                     [np.nan, np.nan, 1.0, 2.0], [np.inf, 1.0, np.inf, 2.0]], dt)
    check(lambda r: (np.median(r, axis=1), np.median(r, axis=0), np.median(r[2]),
                     np.quantile(r, [0.1, 0.5], axis=1), np.percentile(r[2:4], 50, axis=1)),
          rows, tol="arith")


def test_median_quantile_errors():
    x = make((5, 4), np.float64)
    check_many({
        "q range": lambda x: np.quantile(x, 1.5),
        "p range": lambda x: np.percentile(x, -1),
        "axis": lambda x: np.median(x, axis=3),
        "q 3d": lambda x: np.quantile(x, np.full((1, 1, 1), 0.5)),
    }, x)
    with pytest.raises(fl.TracingError, match="method"):
        fl.compile(lambda x: np.quantile(x, 0.5, method="nearest"))(x)
    with pytest.raises(fl.TracingError, match="static"):
        fl.compile(lambda x, q: np.quantile(x, q))(x, np.float64(0.5))
