"""Comparisons and tests: np.isclose, np.allclose, np.array_equal, np.array_equiv, np.isin.

np.allclose and np.array_equal return a Python bool in NumPy; traced, the answer depends on
the data, so the compiled function returns a NumPy bool (np.True_/np.False_) and `if
np.allclose(...)` inside the function stays a clear data-dependent TracingError."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import ALL, check, check_many, cover, make, param, run_numpy, short

CMP = "comparisons"


def _p(name, dtypes):
    return [param(d, name=name, dtype=d, id=short(d)) for d in dtypes]


def _near(x, rng):
    """x nudged by relative amounts around the default tolerance (some in, some out)."""
    if x.dtype.kind != "f":
        return x
    with np.errstate(all="ignore"):
        return (x * (1 + rng.choice([0, 1e-9, 5e-6, 2e-5, 1e-3], x.shape))).astype(x.dtype)


ISCLOSE = {
    "isclose(a, b)": lambda a, b, c, a0: np.isclose(a, b),
    "rtol, atol": lambda a, b, c, a0: np.isclose(a, b, rtol=1e-3, atol=0.5),
    "atol=0": lambda a, b, c, a0: np.isclose(a, b, atol=0),
    "equal_nan": lambda a, b, c, a0: np.isclose(a, b, equal_nan=True),
    "broadcast column": lambda a, b, c, a0: np.isclose(a, c),
    "0-d (scalar result)": lambda a, b, c, a0: np.isclose(a0, a0),
    "python scalar b": lambda a, b, c, a0: np.isclose(a, 1),
    "python float a": lambda a, b, c, a0: np.isclose(0.5, b),
    "with an int64 array": lambda a, b, c, a0: np.isclose(a, np.arange(35).reshape(5, 7)),
    "array atol": lambda a, b, c, a0: np.isclose(a, b, atol=np.linspace(0, 1, 7)),
    "then any": lambda a, b, c, a0: np.isclose(a, b).any(axis=0),
}


@pytest.mark.parametrize("dtype", _p("np.isclose", ALL))
def test_isclose(dtype):
    rng = np.random.default_rng(3)
    a = make((5, 7), dtype, "T")
    b = _near(a.copy(), rng)
    b[::2] = make((3, 7), dtype, key=("b",))
    c = make((5, 1), dtype, key=("c",))
    check_many(ISCLOSE, a, b, c, make((), dtype))


cover("np.isclose", CMP, ALL, test="test_closeness.py::test_isclose")


def _check_traced_bool(body, *args):
    """The compiled body returns NumPy's answer as a NumPy bool (twice: trace and replay)."""
    want, err, _ = run_numpy(body, args)
    assert err is None, err
    f = fl.compile(body)
    for _ in range(2):
        got = f(*args)
        assert type(got) is np.bool_, type(got)
        assert bool(got) == want, (got, want)


BOOL_TESTS = {
    "allclose(a, a)": lambda a, b, n: np.allclose(a, a),
    "allclose(a, b)": lambda a, b, n: np.allclose(a, b),
    "allclose(a, b, atol=10)": lambda a, b, n: np.allclose(a, b, atol=10.0),
    "allclose(n, n)": lambda a, b, n: np.allclose(n, n),
    "allclose(n, n, equal_nan)": lambda a, b, n: np.allclose(n, n, equal_nan=True),
    "array_equal(a, a)": lambda a, b, n: np.array_equal(a, a.copy()),
    "array_equal(a, b)": lambda a, b, n: np.array_equal(a, b),
    "array_equal(n, n)": lambda a, b, n: np.array_equal(n, n.copy()),
    "array_equal(n, n, equal_nan)": lambda a, b, n: np.array_equal(n, n.copy(), equal_nan=True),
    "array_equal(a, a+0, equal_nan)": lambda a, b, n: np.array_equal(a, a + 0, equal_nan=True),
    "array_equiv(a[:1], a)": lambda a, b, n: np.array_equiv(a[:1], a),
    "array_equiv(a[0], a)": lambda a, b, n: np.array_equiv(a[0], np.broadcast_to(a[0], a.shape)),
}


@pytest.mark.parametrize("label", list(BOOL_TESTS))
@pytest.mark.parametrize("dtype", _p("np.allclose", [np.dtype(np.float64), np.dtype(np.int16)]))
def test_allclose_array_equal(label, dtype):
    a = make((4, 6), dtype, "T", special=False)
    b = a.copy()
    b[1, 2] += 1
    n = make((4, 6), np.float64, key=("n",))
    n[0, 0] = np.nan
    _check_traced_bool(BOOL_TESTS[label], a, b, n)


def test_allclose_in_python_control_flow_is_a_clear_error():
    def body(a, b):
        if np.allclose(a, b):
            return a
        return b
    with pytest.raises(fl.TracingError, match="np.where"):
        fl.compile(body)(np.ones(3), np.ones(3))
    # shapes that differ are known while tracing: array_equal is then NumPy's Python False
    check(lambda a, b: np.array_equal(a, b), np.ones(3), np.ones(4))
    check(lambda a, b: np.array_equiv(a, b), np.ones(3), np.ones(4))


for _n in ("np.allclose", "np.array_equal", "np.array_equiv"):
    cover(_n, CMP, ["float64", "int16"], test="test_closeness.py::test_allclose_array_equal",
          note="returns a NumPy bool (np.True_/np.False_) where NumPy returns a Python bool: the "
               "answer depends on the data; `if np.allclose(...)` inside the function raises "
               "the data-dependent TracingError. Shapes that differ give Python False, as NumPy")

ISIN = {
    "isin(x, list)": lambda x, t, x0: np.isin(x, [0, 1, 3, 7]),
    "invert": lambda x, t, x0: np.isin(x, [0, 1, 3, 7], invert=True),
    "isin(x, 2)": lambda x, t, x0: np.isin(x, 2),
    "isin(x, floats)": lambda x, t, x0: np.isin(x, np.array([0.5, -1.0, np.nan, 2.5])),
    "isin(x, 40 values)": lambda x, t, x0: np.isin(x, np.arange(-20, 20)),
    "isin(x, empty)": lambda x, t, x0: np.isin(x, []),
    "isin(x, traced t)": lambda x, t, x0: np.isin(x, t),
    "isin(x, traced t) invert": lambda x, t, x0: np.isin(x, t, invert=True),
    "isin(x0, t)": lambda x, t, x0: np.isin(x0, t),
    "isin(t, x)": lambda x, t, x0: np.isin(t, x),
    "kind='table'": lambda x, t, x0: np.isin(x, [1, 2], kind="sort"),
    "isin then sum": lambda x, t, x0: np.isin(x, [0, 1]).sum(axis=1),
}


@pytest.mark.parametrize("dtype", _p("np.isin", ALL))
def test_isin(dtype):
    x = make((5, 7), dtype, "T")
    t = make((6,), dtype, key=("t",))
    t[:2] = x[0, :2]
    check_many(ISIN, x, t, make((), dtype))


cover("np.isin", CMP, ALL, test="test_closeness.py::test_isin",
      note="any(element == test): an OR of comparisons fused into the consumer for up to 16 "
           "constant test values, a reduction otherwise; traced test_elements work too")

