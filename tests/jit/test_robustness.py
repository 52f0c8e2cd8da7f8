"""Regression tests for what ordinary code used to break: crashes, lost writes, wrong answers.

Each test failed on the code before its fix; crash cases run in a subprocess.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.frontend.pytree import NestingError


def run_child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


# ---- very long traces ----------------------------------------------------------------------
def test_long_unrolled_loop_compiles_and_matches_numpy():
    """6000 unrolled steps: the fuser and code generator walk iteratively (no RecursionError)
    and cut the chain into kernels LLVM compiles in linear time."""
    def body(x):
        for i in range(6000):
            x = x * 1.0001 + 0.5 if i % 3 else np.sin(x) * 0.5 + x
        return x
    x = np.linspace(-1, 1, 37)
    f = fl.compile(body)
    np.testing.assert_allclose(f(x), body(x), rtol=1e-10)
    np.testing.assert_allclose(f(x), body(x), rtol=1e-10)       # replay


def test_long_chain_of_reductions():
    """Each mean reads the whole chain before it: shared values past RECOMPUTE_OPS are
    materialised, so the work stays linear in the chain length."""
    def body(x):
        for _ in range(600):
            x = x - x.mean() * 0.5
        return x
    x = np.arange(10.0)
    np.testing.assert_allclose(fl.compile(body)(x), body(x), rtol=1e-9)


# ---- arguments the encoder cannot take apart ---------------------------------------------------
def test_self_referencing_argument_is_a_clear_error_not_a_crash():
    r = run_child("""
        import numpy as np, fastlaunch as fl
        from fastlaunch.frontend.pytree import NestingError
        f = fl.compile(lambda a: a[0] + 1)
        f([np.ones(3)])                        # a cached entry: the fast path is armed
        a = [np.ones(3)]
        a.append(a)
        for _ in range(2):
            try:
                f(a)
            except NestingError as e:
                assert "argument 'a'" in str(e), e
                print("ok")
        deep = [np.ones(3)]
        for _ in range(100000):
            deep = [deep]
        try:
            f(deep)
        except NestingError:
            print("ok")
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["ok", "ok", "ok"]


def test_nesting_error_is_a_type_error():
    a: list = []
    a.append(a)
    with pytest.raises(TypeError, match="nested more than"):
        fl.compile(lambda a: 1)(a)
    assert issubclass(NestingError, TypeError)


# ---- static arguments: keyed by type, sign and NaN-ness --------------------------------------
def test_static_values_that_compare_equal_do_not_share_a_trace():
    f = fl.compile(lambda x, s: x * s, static_argnums=1)
    x = np.arange(3, dtype=np.float32)
    for a, b in [(1, 1.0), (0.0, -0.0), (np.float64(2), 2.0), (True, 1)]:
        for s in (a, b):
            want = x * s
            got = f(x, s)
            assert got.dtype == want.dtype, (s, got.dtype, want.dtype)
            np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
            np.testing.assert_array_equal(got, want)


def test_static_negative_zero_keeps_its_sign():
    f = fl.compile(lambda x, s: x + s, static_argnames="s")
    x = np.zeros(2)
    f(x, 0.0)
    assert np.signbit(f(-x, -0.0)).all()      # -0.0 + -0.0 is -0.0; with 0.0's trace it was +0.0


def test_static_nan_traces_once():
    f = fl.compile(lambda x, s: x + s, static_argnums=1)
    x = np.ones(2)
    for _ in range(3):
        assert np.isnan(f(x, float("nan"))).all()
    assert f.stats["traces"] == 1


# ---- ndarray subclasses --------------------------------------------------------------------
def test_matrix_is_refused():
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(TypeError, match="matrix.*redefines"):
        fl.compile(lambda a, b: a * b)(m, m)


def test_masked_array_is_refused():
    a = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    with pytest.raises(TypeError, match="MaskedArray"):
        fl.compile(lambda a: a.sum())(a)


class Tagged(np.ndarray):
    """A subclass that only adds metadata: plain array semantics."""
    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", None)


def test_plain_subclass_is_accepted_and_updated_in_place():
    base = np.arange(4.0)
    t = base.view(Tagged)
    t.tag = "meta"

    def step(a):
        a += 1.0
        return a * 2
    f = fl.compile(step)
    out = f(t)
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, (np.arange(4.0) + 1) * 2)
    np.testing.assert_array_equal(base, np.arange(4.0) + 1)     # the write reached the caller
    f(t)
    np.testing.assert_array_equal(base, np.arange(4.0) + 2)


# ---- non-array results -------------------------------------------------------------------
def test_mutable_non_array_result_is_refused():
    with pytest.raises(fl.TracingError, match="returns a set"):
        fl.compile(lambda x: (x + 1, {1, 2}))(np.ones(2))


def test_immutable_non_array_results_are_returned():
    f = fl.compile(lambda x: (x + 1, "label", 3, None))
    for _ in range(2):
        out = f(np.ones(2))
        assert out[1:] == ("label", 3, None)


# ---- in-place updates of arguments the fast path cannot bind ----------------------------------
def _layouts():
    swapped = np.arange(6, dtype=">f8")
    raw = np.zeros(6 * 8 + 1, np.uint8)
    misaligned = raw[1:].view(np.float64)
    misaligned[:] = np.arange(6)
    packed = np.zeros(6, dtype=np.dtype([("a", "i1"), ("b", "<f8")], align=False))
    packed["b"] = np.arange(6)
    return {"byte-swapped": (swapped, swapped), "misaligned": (misaligned, misaligned),
            "packed field": (packed["b"], packed)}


@pytest.mark.parametrize("layout", ["byte-swapped", "misaligned", "packed field"])
def test_in_place_update_of_a_copied_layout_reaches_the_caller(layout):
    arr, owner = _layouts()[layout]

    def step(x, y):
        x += y
        return x.sum()
    f = fl.compile(step)
    want = np.arange(6.0)
    for _k in range(1, 4):
        total = f(arr, np.ones(6))
        want = want + 1
        np.testing.assert_array_equal(np.asarray(arr, np.float64), want)
        assert float(total) == want.sum()
    if layout == "packed field":
        np.testing.assert_array_equal(owner["a"], 0)          # the neighbours are untouched


def test_read_only_copied_layout_updated_in_place_is_refused():
    arr = np.arange(4, dtype=">f8")
    arr.setflags(write=False)

    def step(x):
        x += 1
        return x
    with pytest.raises(ValueError, match="read-only"):
        fl.compile(step)(arr)


def test_self_overlapping_argument_updated_in_place_is_refused():
    base = np.zeros(4)
    x = np.lib.stride_tricks.as_strided(base, shape=(5,), strides=(0,))

    def step(x):
        x += 1
        return x.sum()
    with pytest.raises(ValueError, match="overlap one another"):
        fl.compile(step)(x)
    # read-only uses of the same view are fine
    assert fl.compile(lambda x: x.sum())(x) == 0


# ---- Python int arithmetic follows Python, or says it cannot -----------------------------------
def test_python_int_arithmetic_overflow_raises_instead_of_wrapping():
    f = fl.compile(lambda x, n: x * (n * 2))
    x = np.ones(3)
    np.testing.assert_array_equal(f(x, 3), x * 6)
    with pytest.raises(OverflowError, match="64-bit range"):
        f(x, 2**62)
    xi = np.ones(3, np.int64)
    np.testing.assert_array_equal(f(xi, 5), xi * 10)
    with pytest.raises(OverflowError):
        f(xi, 2**62)


@pytest.mark.parametrize("n", [5, -7, 3**12, 2**20])
def test_python_int_expressions_are_exact(n):
    def body(x, n):
        return x + (n ** 3) + (-n) + abs(n) + (n << 2) + n // 3 - (n % 5)
    x = np.zeros(2, np.int64)
    np.testing.assert_array_equal(fl.compile(body)(x, n), body(x, n))


@pytest.mark.parametrize("n", [2**21, -2**63])
def test_python_int_expressions_out_of_range_raise(n):
    def body(x, n):
        return x + (n ** 3) + (-n)
    with pytest.raises(OverflowError):
        fl.compile(body)(np.zeros(2, np.int64), n)


def test_python_int_beyond_int64_in_arithmetic_is_refused_clearly():
    with pytest.raises(fl.TracingError, match="static_argnames"):
        fl.compile(lambda x, n: x + (n - 1))(np.ones(2), 2**63 + 5)
