"""Counting: np.bincount (a scatter-add into a fresh array of static length minlength, with a
run-time ValueError for values outside [0, minlength)), np.histogram with static edges or a
bins count and range, np.count_nonzero along axes."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import ALL, check, check_many, cover, make, param, short

COUNT = "counting"
_BC_TYPES = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                   np.uint32, np.uint64, np.bool_)]


def _labels(dt, n, k, key=()):
    return make((n,), dt, values=np.random.default_rng(n + k).integers(0, k, n), key=key) \
        if np.dtype(dt) != np.bool_ else make((n,), dt, key=key)


@pytest.mark.parametrize("dtype", [param(d, name="np.bincount", dtype=d, id=short(d))
                                   for d in _BC_TYPES])
def test_bincount(dtype):
    x = _labels(dtype, 1000, 7)
    xs = x[::3]                                     # non-contiguous
    w32 = make((1000,), np.float32, key=("w",))
    wi = make((1000,), np.int16, key=("wi",))
    wb = make((1000,), np.bool_, key=("wb",))
    e = np.zeros(0, dtype)
    check_many({
        "bincount(x, minlength=7)": lambda x, xs, w32, wi, wb, e: np.bincount(x, minlength=7),
        "minlength 20 (more bins)": lambda x, xs, w32, wi, wb, e: np.bincount(x, minlength=20),
        "strided x": lambda x, xs, w32, wi, wb, e: np.bincount(xs, minlength=7),
        "float32 weights": lambda x, xs, w32, wi, wb, e:
            np.bincount(x, weights=w32, minlength=7),
        "int weights": lambda x, xs, w32, wi, wb, e: np.bincount(x, wi, 7),
        "float16 weights": lambda x, xs, w32, wi, wb, e:
            np.bincount(x, weights=w32.astype(np.float16), minlength=7),
        "bool weights": lambda x, xs, w32, wi, wb, e: np.bincount(x, weights=wb, minlength=8),
        "strided weights": lambda x, xs, w32, wi, wb, e:
            np.bincount(xs, weights=w32[::3], minlength=7),
        "empty, no minlength": lambda x, xs, w32, wi, wb, e: np.bincount(e),
        "empty, minlength 3": lambda x, xs, w32, wi, wb, e: np.bincount(e, minlength=3),
        "empty weighted": lambda x, xs, w32, wi, wb, e:
            np.bincount(e, weights=w32[:0], minlength=2),
        "then divided (means)": lambda x, xs, w32, wi, wb, e:
            np.bincount(x, w32, 7) / np.maximum(np.bincount(x, minlength=7), 1),
    }, x, xs, w32, wi, wb, e, tol="exact")


def test_bincount_errors():
    x = _labels(np.int64, 50, 5)
    for f in (lambda x: np.bincount(x.astype(np.float64), minlength=5),
              lambda x: np.bincount(x.astype(np.float32), minlength=5),
              lambda x: np.bincount(x.reshape(5, 10), minlength=5),
              lambda x: np.bincount(x[0], minlength=5),
              lambda x: np.bincount(x, minlength=-1),
              lambda x: np.bincount(x, minlength=None),
              lambda x: np.bincount(x, weights=x[:3], minlength=5),
              lambda x: np.bincount(x - 1, minlength=5)):          # a negative value
        check(f, x)
    with pytest.raises(fl.TracingError, match="minlength"):
        fl.compile(lambda x: np.bincount(x))(x)


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.uint32, np.uint64])
def test_bincount_out_of_range_at_replay_writes_nothing(dtype):
    """A value >= minlength (or negative) raises ValueError when the compiled function runs,
    and an argument the function also updates in place keeps its old contents."""
    def body(x, acc):
        acc += 1
        return np.bincount(x, minlength=4)
    f = fl.compile(body)
    acc = np.zeros(3)
    good = np.array([0, 1, 3, 3, 2], dtype)
    np.testing.assert_array_equal(f(good, acc), [1, 1, 1, 2])
    np.testing.assert_array_equal(acc, 1)
    bad_values = [4, 100] + ([-1] if np.dtype(dtype).kind == "i" else []) + \
        ([2**64 - 1] if np.dtype(dtype) == np.uint64 else [])
    for bad in bad_values:
        x = good.copy()
        x[2] = bad
        with pytest.raises(ValueError, match=r"minlength"):
            f(x, acc)
        np.testing.assert_array_equal(acc, 1)          # nothing written
    np.testing.assert_array_equal(f(good, acc), [1, 1, 1, 2])
    assert len(f.traces) == 1


cover("np.bincount", COUNT, _BC_TYPES, test="test_counting.py::test_bincount",
      note="needs a static minlength: compiled for exactly minlength bins (a scatter-add into "
           "a fresh array); a value >= minlength or negative raises ValueError when the "
           "function runs, with no argument modified (NumPy would return a longer array); "
           "without minlength a TracingError says to pass it")

_EDGES = np.array([-3.0, -1.0, 0.0, 0.0, 0.5, 2.5])
HISTOGRAMS = {
    "bins=5, range=(-2, 2)": lambda a, w, ai: np.histogram(a, 5, range=(-2, 2)),
    "bins=7, range=(-2.5, 3)": lambda a, w, ai: np.histogram(a, bins=7, range=(-2.5, 3)),
    "bins=1, range=(0, 1)": lambda a, w, ai: np.histogram(a, 1, range=(0, 1)),
    "range=(1, 1) (widened)": lambda a, w, ai: np.histogram(a, 4, range=(1, 1)),
    "edges (a repeated edge)": lambda a, w, ai: np.histogram(a, _EDGES),
    "edges list": lambda a, w, ai: np.histogram(a, [-1, 1]),
    "edges of another dtype": lambda a, w, ai: np.histogram(a, np.array([-2, 0, 2], np.int16)),
    "weights": lambda a, w, ai: np.histogram(a, 5, range=(-2, 2), weights=w),
    "weights, edges": lambda a, w, ai: np.histogram(a, _EDGES, weights=w),
    "float16 weights": lambda a, w, ai: np.histogram(a, 5, range=(-2, 2),
                                                     weights=w.astype(np.float16)),
    "density": lambda a, w, ai: np.histogram(a, 5, range=(-2, 2), density=True),
    "density, weights, edges": lambda a, w, ai: np.histogram(a, _EDGES, weights=w, density=True),
    "2-D input (ravelled)": lambda a, w, ai: np.histogram(a.reshape(25, 40)[:, ::2], 3, (-1, 1)),
    "int data": lambda a, w, ai: np.histogram(ai, 6, range=(-100, 100)),
    "int data, int edges": lambda a, w, ai: np.histogram(ai, [-128, -5, 0, 5, 127]),
    "empty, no range": lambda a, w, ai: np.histogram(a[:0], 3),
    # without range=: edges from the data's min and max (a[55:] is finite)
    "no range": lambda a, w, ai: np.histogram(a[55:], 8),
    "no range, weights": lambda a, w, ai: np.histogram(a[55:], 5, weights=w[55:]),
    "no range, density": lambda a, w, ai: np.histogram(a[55:], 6, density=True),
    "no range, one value (widened)": lambda a, w, ai: np.histogram(a[60:61], 3),
    "no range, int data": lambda a, w, ai: np.histogram(ai, 6),
    "no range, int data, one value": lambda a, w, ai: np.histogram(ai[:1], 2),
    "no range, not finite (raises)": lambda a, w, ai: np.histogram(a, 4),
}


@pytest.mark.parametrize("dtype", [param(d, name="np.histogram", dtype=d, id=short(d))
                                   for d in (np.float16, np.float32, np.float64)])
def test_histogram(dtype):
    """Values on the edges (NumPy's rule: the last bin includes its right edge), outside the
    range, NaN and +-inf (dropped)."""
    rng = np.random.default_rng(7)
    v = rng.uniform(-3.2, 3.2, 1000)
    v[:40] = np.linspace(-2, 2, 6).repeat(7)[:40]       # exactly on uniform edges
    v[40:52] = np.tile(_EDGES, 2)
    v[52:55] = [np.nan, np.inf, -np.inf]
    a = make((1000,), dtype, values=v)
    # float16 weights with array edges: NumPy sums them with a float16 cumsum (its error grows
    # with the count); fastlaunch sums in float64, as NumPy's uniform-bin path does. So the
    # float16 weights are tested on uniform bins ("float16 weights"), the edges with float32.
    wdt = np.float32 if np.dtype(dtype) == np.float16 else dtype
    w = make((1000,), wdt, domain=(-2, 2), special=False, key=("w",))
    ai = make((200,), np.int8)
    check_many(HISTOGRAMS, a, w, ai, tol="exact", atol=_histogram_bound())


def _histogram_bound():
    """atol callable(label, expected, args): 0 (counts, uniform bins' weights: float64 sums in
    loop order, as the compiled scatter-add's), except for weights on array edges: there
    NumPy sums the sorted weights with one cumsum and subtracts its values at the edges, each
    within N u sum|w| of the exact running sum (N weights, u the unit roundoff of their
    type): a bin within B = 2 N u sum|w|.  A density n_i / (sum(n) width_i) then errs by
    at most B (1 + k |n_i| / |sum(n)|) / (|sum(n)| width_i) (k bins, sum(n) within k B), plus
    its own float64 roundings.  From each call's own arguments (a, w, ai)."""
    def atol(label, expected, args):
        if "weights, edges" not in label:
            return 0.0
        a, w, _ = args
        u = float(np.finfo(w.dtype).eps) / 2
        bound = 2 * w.size * u * float(np.sum(np.abs(w.astype(np.float64))))
        with np.errstate(all="ignore"):
            hist = np.histogram(a.astype(np.float64), _EDGES, weights=w.astype(np.float64))[0]
        total, widths, k = abs(float(hist.sum())), np.diff(_EDGES), len(_EDGES) - 1
        if "density" not in label:
            return (bound, 0.0)
        with np.errstate(all="ignore"):
            density = np.asarray(expected[0], np.float64)
            b = bound * (1 + k * np.abs(hist) / total) / (total * widths) + \
                4 * np.finfo(np.float64).eps * np.abs(density)
        return (np.nan_to_num(b, posinf=0.0), 0.0)
    return atol


def test_histogram_errors_and_refusals():
    a = make((100,), np.float64)
    for f in (lambda a: np.histogram(a, 0, range=(0, 1)), lambda a: np.histogram(a, 3, (1, 0)),
              lambda a: np.histogram(a, 3, (0, np.inf)), lambda a: np.histogram(a, [[0, 1]]),
              lambda a: np.histogram(a, [1, 0]), lambda a: np.histogram(a, 3, (0, 1), weights=a[:5]),
              lambda a: np.histogram(a, 2.5, (0, 1))):
        check(f, a)
    for f, word in ((lambda a: np.histogram(a, "auto"), "bins"),):
        with pytest.raises(fl.TracingError, match=word):
            fl.compile(f)(a)
    # bool data: NumPy warns and counts it as uint8
    with pytest.warns(RuntimeWarning, match="uint8"):
        got = fl.compile(lambda a: np.histogram(a > 0, 2, range=(0, 1)))(a)
    with pytest.warns(RuntimeWarning):
        want = np.histogram(a > 0, 2, range=(0, 1))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


cover("np.histogram", COUNT, ["float16", "float32", "float64", "int8"],
      test="test_counting.py::test_histogram",
      note="float16 weights are summed in float64 (NumPy: so with uniform bins, but with a "
           "float16 cumsum with array edges); static bins: a count with range= (NumPy's "
           "uniform-bin arithmetic and edge "
           "corrections) or an array of edges; then a scatter-add. Without range= the edges "
           "are traced from a.min() and a.max() (a range that is not finite raises ValueError "
           "when the function runs); bins='auto' and friends: TracingError (the number of "
           "bins would depend on the data)")

NONZERO = {
    "count_nonzero(x)": lambda x, x0: np.count_nonzero(x),
    "axis=0": lambda x, x0: np.count_nonzero(x, axis=0),
    "axis=-1": lambda x, x0: np.count_nonzero(x, axis=-1),
    "axis=(0, 2)": lambda x, x0: np.count_nonzero(x, axis=(0, 2)),
    "axis=1, keepdims": lambda x, x0: np.count_nonzero(x, axis=1, keepdims=True),
    "keepdims, no axis": lambda x, x0: np.count_nonzero(x, keepdims=True),
    "0-d": lambda x, x0: np.count_nonzero(x0),
    "of a comparison": lambda x, x0: np.count_nonzero(x > x0, axis=1),
    "any of comparison": lambda x, x0: np.any(x == x0, axis=(1, 2)),
    "all of comparison": lambda x, x0: np.all(x != x0, axis=0),
}


@pytest.mark.parametrize("dtype", [param(d, name="np.count_nonzero", dtype=d, id=short(d))
                                   for d in ALL])
def test_count_nonzero_axes(dtype):
    check_many(NONZERO, make((4, 5, 6), dtype, "negstep"), make((), dtype))


cover("np.count_nonzero", COUNT, ALL, test="test_counting.py::test_count_nonzero_axes",
      note="axis None, int or tuple, keepdims")

