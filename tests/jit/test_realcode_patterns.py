"""Patterns found by compiling other people's NumPy code unchanged (issue 11, "prove it on
code you did not write"). Each test is the pattern in our own words, checked against NumPy."""
import numpy as np
import pytest

import fastlaunch as fl


# ---- a library that catches our TracingError and raises its own error ----------------------
def _checked_covariance(c):
    # a validation helper in the style of many libraries: any failure means "bad input"
    try:
        if c[0, 0] <= 0:               # data-dependent: a TracingError while tracing
            raise ArithmeticError
    except Exception:
        raise ValueError("covariance is not positive definite")
    return c


def test_swallowed_tracing_error_reraised_as_other_error_names_both():
    def density(x, cov):
        return np.sum(x * (_checked_covariance(cov) @ x))

    x = np.arange(3.0)
    cov = np.eye(3) * 2.0
    assert density(x, cov) == 10.0
    f = fl.compile(density)
    with pytest.raises(fl.TracingError) as info:
        f(x, cov)
    text = str(info.value)
    # the user sees that fastlaunch failed, not that their matrix is bad
    assert "caught a fastlaunch.TracingError" in text
    assert "test_realcode_patterns.py" in text and "_checked_covariance" in text
    assert "ValueError: covariance is not positive definite" in text
    assert "bool(x)" in text                   # what was not traceable
    assert isinstance(info.value.__cause__, ValueError)
    assert f.stats["entries"] == 0


def test_own_error_without_swallowing_is_left_alone():
    def strict(x):
        if x.shape[0] != 4:
            raise ValueError("need four values")
        return x

    with pytest.raises(ValueError, match="need four values"):
        fl.compile(strict)(np.zeros(3))
