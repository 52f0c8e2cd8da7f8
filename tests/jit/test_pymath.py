"""Python's math functions on traced scalars (issue 30): NumPy's equivalents in float64, weak
Python floats, Python's ValueError/OverflowError as checks made on every call."""
import math
from math import atan2 as imported_atan2

import numpy as np
import pytest

import fastlaunch as fl

UNARY = {
    "sqrt": [0.0, 2.0, 1e30], "exp": [-3.0, 0.5, 700.0], "exp2": [-3.0, 10.5],
    "expm1": [-1e-9, 0.3], "log": [1e-30, 2.5, 1e30], "log2": [0.25, 3.0],
    "log10": [1e-5, 42.0], "log1p": [-0.5, 1e-12, 9.0], "sin": [-4.0, 0.1, 1e6],
    "cos": [-4.0, 0.1, 1e6], "tan": [-1.2, 0.7], "asin": [-1.0, 0.3], "acos": [1.0, -0.3],
    "atan": [-1e5, 0.2], "sinh": [-2.0, 0.4], "cosh": [-2.0, 0.4], "tanh": [-30.0, 0.4],
    "asinh": [-3.0, 0.5], "acosh": [1.0, 7.0], "atanh": [-0.9, 0.5], "cbrt": [-27.0, 2.0],
    "fabs": [-2.5, 0.0], "degrees": [1.0, -0.2], "radians": [90.0, -3.0],
    "erf": [-1.0, 0.3], "erfc": [-1.0, 3.0], "lgamma": [0.5, 7.25, -1.5],
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_match_python(name, dtype):
    def f(x):
        fn = getattr(math, name)             # looked up when called, as math.cos(...) is
        return fn(x[0]) + fn(x[1])            # two traced elements

    values = np.array(UNARY[name][:2], dtype)
    cf = fl.compile(f)
    for v in (values, np.array(UNARY[name][-2:], dtype)):    # the trace's values, then new
        want = f(v)
        got = cf(v)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=4e-16 * 8, atol=1e-300)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_argument_and_integral_functions(dtype):
    def f(x):
        return (math.atan2(x[0], x[1]), imported_atan2(x[1], x[0]), math.hypot(x[0], x[1]),
                math.hypot(x[0], x[1], x[2]), math.pow(abs(x[0]), x[1]), math.copysign(x[1], x[0]),
                math.fmod(x[2], x[1]), math.log(x[2], 3), math.floor(x[0]), math.ceil(x[0]),
                math.trunc(x[0].astype(np.float64)), math.isnan(x[0]), math.isinf(x[1]), math.isfinite(x[2]),
                math.isclose(x[0], x[0] + 1e-12), math.dist((x[0], x[1]), (x[2], 0.0)))
    cf = fl.compile(f)
    for v in ([-1.5, 2.25, 7.0], [3.75, -0.5, 0.125]):
        x = np.array(v, dtype)
        for got, want in zip(cf(x), f(x)):
            assert float(got) == pytest.approx(float(want), rel=1e-15, abs=1e-300)
            assert isinstance(want, bool) == (np.asarray(got).dtype == np.bool_)


def test_results_are_weak_python_floats():
    def f(x):
        return math.cos(x[0]) * x             # a Python float times float32 stays float32
    x = np.linspace(0, 1, 5, dtype=np.float32)
    got = fl.compile(f)(x)
    assert got.dtype == np.float32 == f(x).dtype
    np.testing.assert_allclose(got, f(x), rtol=1e-6)


@pytest.mark.parametrize("name, value, exc", [
    ("sqrt", -1.0, ValueError), ("log", 0.0, ValueError), ("acos", 1.5, ValueError),
    ("atanh", 1.0, ValueError), ("sin", np.inf, ValueError), ("exp", 1000.0, OverflowError),
    ("cosh", 800.0, OverflowError), ("floor", np.nan, ValueError), ("lgamma", -2.0, ValueError),
])
def test_python_errors_are_raised_on_every_call_that_makes_them(name, value, exc):
    def f(x):
        return getattr(math, name)(x[0]) * 2
    cf = fl.compile(f)
    ok = np.array([0.5])
    assert float(cf(ok)) == pytest.approx(f(ok), rel=1e-15)
    with pytest.raises(exc, match="math domain error|math range error|NaN"):
        f(np.array([value]))
    with pytest.raises(exc, match="math domain error|math range error|NaN"):
        cf(np.array([value]))
    assert float(cf(ok)) == pytest.approx(f(ok), rel=1e-15)


def test_nan_passes_through_as_in_python():
    def f(x):
        return math.sqrt(x[0]) + math.acos(x[0])
    assert np.isnan(fl.compile(f)(np.array([np.nan])))


def test_motion_model_of_a_robotics_filter():
    def motion(x, u, dt):
        yaw = x[2]
        return np.array([x[0] + u[0] * math.cos(yaw) * dt,
                         x[1] + u[0] * math.sin(yaw) * dt,
                         yaw + u[1] * dt,
                         math.hypot(x[0], x[1])])
    cf = fl.compile(motion)
    for x in (np.array([1.0, 2.0, 0.3]), np.array([-4.0, 0.5, 2.9])):
        u = np.array([1.5, 0.1])
        np.testing.assert_allclose(cf(x, u, 0.1), motion(x, u, 0.1), rtol=1e-15)


def test_untraced_and_other_threads_calls_are_pythons():
    def f(x):
        return x * math.cos(0.5)              # a plain float: Python's own
    np.testing.assert_allclose(fl.compile(f)(np.ones(2)), np.ones(2) * math.cos(0.5))
    assert not hasattr(math.cos, "__wrapped__")


def test_arrays_are_refused_as_python_does():
    def f(x):
        return math.cos(x)
    with pytest.raises(TypeError, match="length-1"):
        fl.compile(f)(np.ones(3))
    with pytest.raises(TypeError, match="complex"):
        fl.compile(lambda z: math.cos(z[0]))(np.ones(2, complex))
