"""Evenly spaced numbers with traced ends (np.linspace, np.logspace, np.geomspace) and the
weighted statistics built on reductions and products (np.average, np.cov, np.corrcoef),
including NumPy's value checks that become runtime checks (weights summing to zero, zero
ends of a geometric sequence, negative or fractional frequency weights)."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import check, check_many, cover, make, param, short

STATS = "statistics"
SEQ = "construction"
_FLOATS = [np.dtype(np.float32), np.dtype(np.float64)]


def _ends(dtype):
    lo = make((4,), dtype, domain=(-3, 3), special=False, key=("lo",))
    hi = make((4,), dtype, domain=(-3, 3), special=False, key=("hi",))
    return lo, hi


@pytest.mark.parametrize("dtype", [param(d, name="np.linspace", dtype=d, id=short(d))
                                   for d in _FLOATS + [np.dtype(np.int32)]])
def test_linspace_traced_ends(dtype):
    lo, hi = _ends(dtype)
    check_many({
        "scalar ends": lambda lo, hi: np.linspace(lo[0], hi[0], 9),
        "no endpoint": lambda lo, hi: np.linspace(lo[0], hi[0], 9, endpoint=False),
        "retstep": lambda lo, hi: np.linspace(lo[1], hi[1], 5, retstep=True),
        "one sample": lambda lo, hi: np.linspace(lo[0], hi[0], 1),
        "one sample retstep": lambda lo, hi: np.linspace(lo[0], hi[0], 1, retstep=True)[0],
        "no samples": lambda lo, hi: np.linspace(lo[0], hi[0], 0),
        "array ends": lambda lo, hi: np.linspace(lo, hi, 6),
        "array ends axis 1": lambda lo, hi: np.linspace(lo, hi, 6, axis=1),
        "array ends axis -1 retstep": lambda lo, hi: np.linspace(lo, hi, 3, axis=-1,
                                                                 retstep=True),
        "python float start": lambda lo, hi: np.linspace(0.5, hi[2], 4),
        "integer dtype (floored)": lambda lo, hi: np.linspace(lo[0] * 10, hi[0] * 10, 7,
                                                              dtype=np.int64),
        "float32 dtype": lambda lo, hi: np.linspace(lo, hi[0], 3, dtype=np.float32),
        "equal ends": lambda lo, hi: np.linspace(lo[3], lo[3], 4),
    }, lo, hi, tol="arith", atol=1e-12)


def test_linspace_python_scalar_arguments():
    """Ends passed as Python floats are runtime parameters: one trace serves every value."""
    f = fl.compile(lambda a, b: np.linspace(a, b, 11))
    for a, b in ((0.0, 1.0), (-2.5, 7.25), (3.0, 3.0), (1e-310, 2e-310)):
        np.testing.assert_allclose(f(a, b), np.linspace(a, b, 11), rtol=1e-15, atol=0)
    assert f.stats["traces"] == 1


def test_linspace_errors():
    lo, hi = _ends(np.float64)
    check(lambda lo, hi: np.linspace(lo[0], hi[0], -1), lo, hi)
    check(lambda lo, hi: np.linspace(lo[0], hi[0], 2.5), lo, hi)


@pytest.mark.parametrize("dtype", [param(d, name="np.logspace", dtype=d, id=short(d))
                                   for d in _FLOATS])
def test_logspace_traced_ends(dtype):
    lo, hi = _ends(dtype)
    check_many({
        "base 10": lambda lo, hi: np.logspace(lo[0], hi[0], 6),
        "base 2, no endpoint": lambda lo, hi: np.logspace(lo[1], hi[1], 6, endpoint=False,
                                                          base=2.0),
        "array ends axis 1": lambda lo, hi: np.logspace(lo, hi, 3, axis=1),
        "array base": lambda lo, hi: np.logspace(lo[0], hi[0], 4, base=[2.0, 3.0]),
        "dtype": lambda lo, hi: np.logspace(lo[0], hi[0], 4, dtype=np.float32),
    }, lo, hi, tol="transc", atol=1e-12)


@pytest.mark.parametrize("dtype", [param(d, name="np.geomspace", dtype=d, id=short(d))
                                   for d in _FLOATS])
def test_geomspace_traced_ends(dtype):
    a = make((4,), dtype, values=[0.5, -2.0, 3.0, -0.25])
    b = make((4,), dtype, values=[8.0, -16.0, 0.125, -4.0])
    check_many({
        "positive": lambda a, b: np.geomspace(a[0], b[0], 5),
        "negative": lambda a, b: np.geomspace(a[1], b[1], 5),
        "decreasing, no endpoint": lambda a, b: np.geomspace(a[2], b[2], 4, endpoint=False),
        "array ends": lambda a, b: np.geomspace(a, b, 3),
        "array ends axis 1": lambda a, b: np.geomspace(a, b, 3, axis=1),
        "dtype": lambda a, b: np.geomspace(a[0], b[0], 3, dtype=np.float32),
    }, a, b, tol="transc", atol=1e-12)


def test_geomspace_zero_end_raises_when_the_function_runs():
    f = fl.compile(lambda a, b, acc: (acc.__iadd__(1), np.geomspace(a, b, 4))[1])
    acc = np.zeros(2)
    np.testing.assert_allclose(f(1.0, 8.0, acc), [1, 2, 4, 8])
    for a, b in ((0.0, 8.0), (1.0, 0.0), (-0.0, 1.0)):
        with pytest.raises(ValueError, match="Geometric sequence cannot include zero"):
            f(a, b, acc)
        with pytest.raises(ValueError, match="Geometric sequence cannot include zero"):
            np.geomspace(a, b, 4)
    np.testing.assert_array_equal(acc, 1)        # the failed calls wrote nothing
    assert f.stats["traces"] == 1


# ---- averages and covariances ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [param(d, name="np.average", dtype=d, id=short(d))
                                   for d in _FLOATS + [np.dtype(np.int16), np.dtype(np.bool_)]])
def test_average(dtype):
    a = make((4, 6), dtype, special=False)
    w6 = make((6,), np.float64, domain=(0.5, 2), special=False, key=("w",))
    w46 = make((4, 6), np.float32, domain=(0.5, 2), special=False, key=("w46",))
    check_many({
        "all": lambda a, w6, w46: np.average(a),
        "axis 0": lambda a, w6, w46: np.average(a, axis=0),
        "axis (0, 1) keepdims": lambda a, w6, w46: np.average(a, axis=(0, 1), keepdims=True),
        "returned": lambda a, w6, w46: np.average(a, axis=1, returned=True),
        "weights along axis 1": lambda a, w6, w46: np.average(a, axis=1, weights=w6),
        "weights, returned": lambda a, w6, w46: np.average(a, axis=-1, weights=w6,
                                                           returned=True),
        "full weights": lambda a, w6, w46: np.average(a, weights=w46),
        "full weights axis 0 returned": lambda a, w6, w46: np.average(a, 0, w46, True),
        "constant weights": lambda a, w6, w46: np.average(a, axis=1, weights=[1, 2, 3, 4, 5, 6]),
        "keepdims weights": lambda a, w6, w46: np.average(a, axis=1, weights=w6, keepdims=True),
    }, a, w6, w46, tol="reduce", atol=1e-6)


def test_average_errors():
    a = make((4, 6), np.float64)
    w = make((6,), np.float64, key=("w",))
    check(lambda a, w: np.average(a, weights=w), a, w)              # shapes differ, no axis
    check(lambda a, w: np.average(a, axis=0, weights=w), a, w)      # wrong axis
    check(lambda a: np.average(a, axis=1, weights=np.zeros(6)), a)  # known now: zero sum


def test_average_zero_weight_sum_raises_when_the_function_runs():
    f = fl.compile(lambda a, w: np.average(a, axis=1, weights=w))
    a = np.arange(12.0).reshape(2, 6)
    w = np.linspace(0.5, 1, 6)
    np.testing.assert_allclose(f(a, w), np.average(a, axis=1, weights=w))
    bad = np.array([1.0, -1.0, 2.0, -2.0, 0.5, -0.5])
    with pytest.raises(ZeroDivisionError, match="Weights sum to zero"):
        np.average(a, axis=1, weights=bad)
    with pytest.raises(ZeroDivisionError, match="Weights sum to zero"):
        f(a, bad)
    np.testing.assert_allclose(f(a, w * 2), np.average(a, axis=1, weights=w * 2))


@pytest.mark.parametrize("dtype", [param(d, name="np.cov", dtype=d, id=short(d))
                                   for d in _FLOATS + [np.dtype(np.int32)]])
def test_cov(dtype):
    # moderate values: centring large integers cancels digits, differently in any two sums
    m = make((3, 10), dtype, domain=(-100, 100), special=False)
    y = make((10,), dtype, domain=(-100, 100), special=False, key=("y",))
    fw = make((10,), np.int64, values=np.arange(10) % 3 + 1, key=("fw",))
    aw = make((10,), np.float64, domain=(0.1, 2), special=False, key=("aw",))
    check_many({
        "rows": lambda m, y, fw, aw: np.cov(m),
        "columns": lambda m, y, fw, aw: np.cov(m.T, rowvar=False),
        "columns of a transposed input": lambda m, y, fw, aw: np.cov(m, rowvar=False),
        "one variable": lambda m, y, fw, aw: np.cov(y),
        "with y": lambda m, y, fw, aw: np.cov(m, y),
        "bias": lambda m, y, fw, aw: np.cov(m, bias=True),
        "ddof 3": lambda m, y, fw, aw: np.cov(m, ddof=3),
        "fweights": lambda m, y, fw, aw: np.cov(m, fweights=fw),
        "aweights": lambda m, y, fw, aw: np.cov(m, aweights=aw),
        "both weights": lambda m, y, fw, aw: np.cov(m, fweights=fw, aweights=aw),
        "both weights ddof 0": lambda m, y, fw, aw: np.cov(m, fweights=fw, aweights=aw, ddof=0),
        "constant weights": lambda m, y, fw, aw: np.cov(m, aweights=np.arange(1.0, 11.0)),
        "dtype float32": lambda m, y, fw, aw: np.cov(m, dtype=np.float32),
    }, m, y, fw, aw, tol="reduce", atol=1e-9)


def test_cov_errors():
    m = make((3, 10), np.float64)
    check(lambda m: np.cov(m.reshape(3, 2, 5)), m)
    check(lambda m: np.cov(m, ddof=1.5), m)
    check(lambda m: np.cov(m, fweights=np.ones(4)), m)
    check(lambda m: np.cov(m, fweights=np.full(10, 1.5)), m)       # constants: checked now
    check(lambda m: np.cov(m, aweights=-np.ones(10)), m)


def test_cov_weight_checks_run_with_the_function():
    f = fl.compile(lambda m, fw, aw: np.cov(m, fweights=fw, aweights=aw))
    m = np.arange(20.0).reshape(2, 10) ** 1.5
    fw, aw = np.ones(10), np.linspace(0.5, 1.5, 10)
    np.testing.assert_allclose(f(m, fw, aw), np.cov(m, fweights=fw.copy(), aweights=aw))
    for bad_fw, bad_aw, exc, text in ((fw * 1.5, aw, TypeError, "fweights must be integer"),
                                      (-fw, aw, ValueError, "fweights cannot be negative"),
                                      (fw, -aw, ValueError, "aweights cannot be negative")):
        # (copies: NumPy's cov multiplies a float64 fweights array in place by aweights)
        with pytest.raises(exc, match=text):
            np.cov(m, fweights=bad_fw.copy(), aweights=bad_aw.copy())
        with pytest.raises(exc, match=text):
            f(m, bad_fw.copy(), bad_aw.copy())


@pytest.mark.parametrize("dtype", [param(d, name="np.corrcoef", dtype=d, id=short(d))
                                   for d in _FLOATS])
def test_corrcoef(dtype):
    m = make((3, 10), dtype, special=False)
    y = make((10,), dtype, special=False, key=("y",))
    check_many({
        "rows": lambda m, y: np.corrcoef(m),
        "columns": lambda m, y: np.corrcoef(m.T, rowvar=False),
        "with y": lambda m, y: np.corrcoef(m[0], y),
        "one variable (scalar)": lambda m, y: np.corrcoef(y),
        "constant variable (nan)": lambda m, y: np.corrcoef(np.stack([y, y * 0 + 1])),
    }, m, y, tol="reduce", atol=1e-6)


cover("np.linspace", SEQ, _FLOATS + [np.dtype(np.int32)],
      test="test_statistics.py::test_linspace_traced_ends",
      note="start/stop may be traced (num static: the result's size)")
cover("np.logspace", SEQ, _FLOATS, test="test_statistics.py::test_logspace_traced_ends",
      note="start/stop may be traced (num static)")
cover("np.geomspace", SEQ, _FLOATS, test="test_statistics.py::test_geomspace_traced_ends",
      note="a zero end raises ValueError when the function runs (a runtime check)")
cover("np.average", STATS, _FLOATS + ["int16", "bool"], test="test_statistics.py::test_average",
      note="traced weights that sum to zero raise ZeroDivisionError when the function runs")
cover("np.cov", STATS, _FLOATS + ["int32"], test="test_statistics.py::test_cov",
      note="traced weights are checked when the function runs (integer, non-negative); "
           "NumPy's 'Degrees of freedom <= 0' warning is given at trace time only")
cover("np.corrcoef", STATS, _FLOATS, test="test_statistics.py::test_corrcoef")
