"""Self-tests of the comparison harness: it must catch every kind of mismatch it claims to."""
from __future__ import annotations

import numpy as np
import pytest

from .harness import Mismatch, _copy_layout, assert_same, check, conformance, make, specials


@pytest.mark.parametrize(("expected", "got", "kw"), [
    (np.array([1.0, 2.0]), np.array([1.0, 2.1]), {"tol": "arith"}),
    (np.array([1.0, np.nan]), np.array([1.0, 0.0]), {"tol": "transc"}),
    (np.array([1.0, 0.0]), np.array([1.0, np.nan]), {"tol": "transc"}),
    (np.array([np.inf]), np.array([-np.inf]), {"tol": "transc"}),
    (np.array([np.inf]), np.array([1e308]), {"tol": "transc"}),
    (np.array([-0.0]), np.array([0.0]), {"signed_zero": True}),
    (np.array([1, 2], np.int64), np.array([1, 3], np.int64), {}),
    (np.array([1, 2], np.int64), np.array([1, 2], np.int32), {}),
    (np.array([1, 2]), np.array([[1, 2]]), {}),
    (np.float32(1), np.array(1, np.float32), {}),
    (np.array(1, np.float32), np.float32(1), {}),
    ((np.array([1]),), [np.array([1])], {}),
    ({"a": np.array([1])}, {"b": np.array([1])}, {}),
    (3, np.int64(3), {}),
    (np.array([1.0], np.float32), np.array([1.0 + 1e-5], np.float32), {"tol": "arith"}),
])
def test_assert_same_catches(expected, got, kw):
    with pytest.raises(Mismatch):
        assert_same(expected, got, **kw)


@pytest.mark.parametrize(("expected", "got", "kw"), [
    (np.array([1.0, np.nan, np.inf, -0.0]), np.array([1.0, np.nan, np.inf, -0.0]),
     {"signed_zero": True}),
    (np.array([-0.0]), np.array([0.0]), {}),
    (np.array([1.0], np.float32), np.array([1.000001], np.float32), {"tol": "arith"}),
    (np.array([1.0, 5.0]), np.array([1.0, 9.0]), {"mask": np.array([True, False])}),
    (np.array([1, 2]), np.array([3, 4]), {"values": False}),
])
def test_assert_same_accepts(expected, got, kw):
    assert_same(expected, got, **kw)


def test_check_compares_against_numpy():
    """check() runs the body with NumPy and compiled: a body whose compiled result differs
    (here through a different branch on a traced attribute) is reported."""
    import fastlaunch as fl

    assert fl.compile   # the body below branches on the Python type: 1 with NumPy, 2 traced

    def body(x):
        return x + 1 if type(x) is np.ndarray else x + 2
    with pytest.raises(Mismatch):
        check(body, np.arange(3.0))


def test_check_requires_same_error():
    with pytest.raises(BaseException):  # noqa: B017  (whatever the compiled body raises)
        # NumPy succeeds; the compiled body raises: check must not swallow it
        check(lambda x: x + 1 if type(x) is np.ndarray else x.nonexistent, np.arange(3.0))


def test_layouts_keep_values_and_strides():
    for layout in ("C", "T", "step", "neg", "negstep", "bcast"):
        a = make((4, 5), np.float64, layout)
        b = _copy_layout(a)
        assert np.array_equal(a, b, equal_nan=True)
        if layout != "bcast":
            assert a.strides == b.strides and not np.shares_memory(a, b)
    assert make((), np.float32).shape == ()
    assert make((4, 5), np.int8, "neg").strides[0] < 0
    assert np.isnan(specials(np.float32)).any() and (specials(np.int8) == -128).any()


def test_registry_consistency():
    """Every name tests are marked by, and every status.py entry, is a registry entry (so that
    docs/numpy-coverage.md shows it)."""
    from . import gen_coverage, harness, status
    gen_coverage._load_all()
    names = set(harness.REGISTRY)
    assert harness.PARAM_NAMES <= names, sorted(harness.PARAM_NAMES - names)
    assert set(status.NOT_IMPLEMENTED) <= names, sorted(set(status.NOT_IMPLEMENTED) - names)
    assert {n for n, _ in status.BUGS} <= names, sorted({n for n, _ in status.BUGS} - names)
    assert set(status.BUG_RAISES) <= set(status.BUGS.values())


@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.uint8])
@conformance(lambda dtype: (make((5, 7), dtype, "T"), make((7,), dtype, key=("b",))),
             tol="reduce", atol=1e-3)
def test_conformance_decorator(a, b):
    """The decorator form: the body runs with NumPy and compiled; parameters come from the
    argument factory's signature."""
    return a * 2 + b, np.maximum(a, b).sum(axis=0)
