"""Errors: bad arguments, data-dependent control flow, exceptions while tracing, unsupported NumPy."""

import numpy as np
import pytest

import fastlaunch as fl


def add(alpha, beta):
    return alpha + beta


# ---- arguments -----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, position", [
    (np.array([1, "a"], dtype=object), "beta"),
    (np.array(["a", "b"]), "beta"),
    (np.ones(3, np.clongdouble), "beta"),
    (np.ones(3, np.longdouble), "beta"),
    (np.array([b"x", b"y"]), "beta"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "beta"),
], ids=["object", "str", "clongdouble", "longdouble", "bytes", "datetime"])
def test_unsupported_dtype_names_argument_and_dtype(bad, position):
    cf = fl.compile(add)
    with pytest.raises(TypeError) as info:
        cf(np.ones(3), bad)
    msg = str(info.value)
    assert position in msg
    assert str(bad.dtype) in msg
    assert cf.stats["entries"] == 0


def test_unsupported_dtype_in_first_argument():
    cf = fl.compile(add)
    bad = np.ones(2, np.clongdouble)
    with pytest.raises(TypeError, match=rf"alpha.*{bad.dtype}"):
        cf(bad, np.ones(2))


def test_unsupported_dtype_inside_a_container_names_the_argument():
    cf = fl.compile(lambda pair: pair[0] + pair[1])
    with pytest.raises(TypeError) as info:
        cf((np.ones(2), np.ones(2, np.clongdouble)))
    assert "pair" in str(info.value) and str(np.dtype(np.clongdouble)) in str(info.value)


def test_unsupported_dtype_after_a_successful_call():
    """The fast path must not accept an unsupported dtype because an entry exists."""
    cf = fl.compile(add)
    cf(np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match=str(np.dtype(np.clongdouble))):
        cf(np.ones(3), np.ones(3, np.clongdouble))


def test_complex_python_scalar_is_an_argument():
    """Complex numbers are supported (tests/jit/test_complex.py); a long double one is not."""
    got = fl.compile(add)(np.ones(3), 1j)
    np.testing.assert_array_equal(got, np.ones(3) + 1j)
    with pytest.raises(TypeError, match=str(np.dtype(np.clongdouble))):
        fl.compile(add)(np.ones(3), np.clongdouble(1j))


def test_unsupported_python_object_argument():
    with pytest.raises(TypeError, match="beta"):
        fl.compile(add)(np.ones(3), object())


@pytest.mark.parametrize("args, kwargs", [
    ((np.ones(2),), {}),
    ((np.ones(2), np.ones(2), np.ones(2)), {}),
    ((), {}),
    ((np.ones(2),), {"gamma": np.ones(2)}),
    ((np.ones(2), np.ones(2)), {"alpha": np.ones(2)}),
], ids=["too-few", "too-many", "none", "unknown-kw", "duplicate"])
def test_wrong_arguments_raise_like_python(args, kwargs):
    with pytest.raises(TypeError) as python_error:
        add(*args, **kwargs)
    cf = fl.compile(add)
    with pytest.raises(type(python_error.value)):
        cf(*args, **kwargs)
    # also once an entry exists
    cf(np.ones(2), np.ones(2))
    with pytest.raises(type(python_error.value)):
        cf(*args, **kwargs)


def test_python_int_too_big_for_int64():
    cf = fl.compile(lambda x, n: x + n)
    with pytest.raises(OverflowError):
        cf(np.ones(3, np.int64), 2 ** 64)


@pytest.mark.parametrize("dtype, value", [(np.int8, 300), (np.uint8, -1), (np.int16, 40000)])
def test_python_int_parameter_out_of_range_like_numpy(dtype, value):
    x = np.arange(3, dtype=dtype)
    with pytest.raises(OverflowError):
        x + value
    cf = fl.compile(lambda x, n: x + n)
    np.testing.assert_array_equal(cf(x, 1), x + 1)
    with pytest.raises(OverflowError):
        cf(x, value)


# ---- data-dependent control flow ------------------------------------------------------------------
CONTROL_FLOW = [
    (lambda x: bool(x.sum()), "bool"),
    (lambda x: float(x.sum()), "float"),
    (lambda x: int(x[0]), "int"),
    (lambda x: [0] * int(x.sum().item()), "int"),
    (lambda x: x if x.sum().item() > 0 else -x, "bool"),
    (lambda x: x if x.sum() > 0 else -x, "bool"),
    (lambda x: x + 1 if (x > 0).any() else x, "bool"),
    (lambda x: x * 2 if x.max() else x, "bool"),
    (lambda x: [v for v in x if v > 0], "bool"),
]


@pytest.mark.parametrize("fn, what", CONTROL_FLOW,
                         ids=["bool", "float", "int", "item-int", "item-if", "if-sum", "if-any",
                              "if-max", "comprehension"])
def test_data_dependent_control_flow_raises_tracing_error(fn, what):
    cf = fl.compile(fn)
    with pytest.raises(fl.TracingError) as info:
        cf(np.arange(1.0, 5.0))
    msg = str(info.value)
    assert what in msg
    assert "np.where" in msg
    assert "static_argnames" in msg
    assert cf.stats["entries"] == 0


def test_if_on_tracer_names_the_operation():
    def f(x):
        if x > 0:
            return x
        return -x

    with pytest.raises(fl.TracingError, match=r"bool\(x\)"):
        fl.compile(f)(np.ones(3))


def test_tracing_error_is_an_exception_class():
    assert issubclass(fl.TracingError, Exception)


def test_asarray_of_tracer_is_the_tracer_and_tolist_gives_traced_python_numbers():
    np.testing.assert_array_equal(fl.compile(lambda x: np.asarray(x) + 1)(np.ones(3)),
                                  np.full(3, 2.0))

    def fn(x):
        items = x.tolist()                        # Python floats: weak scalars (NEP 50)
        return np.array(items) * 2, items[1] * x.astype(np.float32), x[0].item()
    cf = fl.compile(fn)
    for x in (np.array([1.5, -2.0, 3.0]), np.array([0.25, 7.0, -1.0])):
        for got, want in zip(cf(x), fn(x)):
            assert np.asarray(got).dtype == np.asarray(want).dtype
            np.testing.assert_array_equal(got, want)
    with pytest.raises(fl.TracingError, match="np.where"):
        fl.compile(lambda x: x if x[0].item() > 0 else -x)(np.ones(3))


def test_storing_tracer_into_numpy_array_made_elsewhere_raises_tracing_error():
    out = np.zeros(3)             # made outside fn: a NumPy constant, which cannot take traced values

    def f(x):
        out[:] = x
        return out

    with pytest.raises((fl.TracingError, ValueError)):
        fl.compile(f)(np.ones(3))


# ---- exceptions raised by fn while tracing ------------------------------------------------------
class CustomError(Exception):
    pass


def test_exception_in_fn_propagates_unchanged_and_leaves_no_entry():
    raised = []
    calls = [0]

    def f(x, fail):
        calls[0] += 1
        if calls[0] == 1:
            err = CustomError("boom", 42)
            raised.append(err)
            raise err
        return x * 2

    cf = fl.compile(f)
    x = np.arange(4.0)
    with pytest.raises(CustomError) as info:
        cf(x, 1.0)
    assert info.value is raised[0]
    assert info.value.args == ("boom", 42)
    assert cf.stats["entries"] == 0 and cf.stats["traces"] == 0
    np.testing.assert_array_equal(cf(x, 1.0), x * 2)    # traces again, and works
    assert calls[0] == 2
    cf(x, 1.0)
    assert calls[0] == 2
    assert cf.stats["entries"] == 1


@pytest.mark.parametrize("exc", [ValueError("bad value"), KeyError("k"), ZeroDivisionError("z"),
                                 IndexError("i")])
def test_builtin_exceptions_propagate(exc):
    def f(x):
        x + 1  # noqa: B018  (traced, then the exception)
        raise exc

    cf = fl.compile(f)
    with pytest.raises(type(exc)) as info:
        cf(np.ones(2))
    assert str(info.value) == str(exc)
    assert cf.stats["entries"] == 0


def test_numpy_shape_error_while_tracing_leaves_no_entry():
    cf = fl.compile(lambda x, y: x + y)
    with pytest.raises(ValueError, match="broadcast"):
        cf(np.ones(3), np.ones(4))
    assert cf.stats["entries"] == 0
    np.testing.assert_array_equal(cf(np.ones(3), np.ones(3)), np.full(3, 2.0))


def test_failed_trace_does_not_break_other_functions():
    bad = fl.compile(lambda x: float(x))
    good = fl.compile(lambda x: x + 1)
    with pytest.raises(fl.TracingError):
        bad(np.ones(1))
    np.testing.assert_array_equal(good(np.ones(2)), [2.0, 2.0])
    # and NumPy itself still works on plain arrays afterwards
    assert float(np.ones(1)[0]) == 1.0


# ---- unsupported NumPy -------------------------------------------------------------------------
@pytest.mark.parametrize("fn, name", [
    (lambda x: np.fft.fft(x), "fft"),
    (lambda x: np.lexsort((x,)), "lexsort"),
    (lambda x: np.unique(x), "unique"),
    (lambda x: np.trapezoid(x), "trapezoid"),
    (lambda x: np.subtract.reduceat(x, [0, 2]), "reduceat"),
], ids=["fft", "lexsort", "unique", "trapezoid", "ufunc-method"])
def test_unsupported_numpy_function_names_it(fn, name):
    cf = fl.compile(fn)
    with pytest.raises(fl.TracingError) as info:
        cf(np.arange(4.0))
    assert name in str(info.value)
    assert cf.stats["entries"] == 0


@pytest.mark.parametrize("fn", [lambda x: x[x > 0], lambda x: x[(x > 0) & (x < 2)],
                                lambda x: np.where(x > 0, x, 0)[x < 0]],
                         ids=["mask", "combined-mask", "mask-of-computed"])
def test_boolean_mask_indexing_raises_tracing_error(fn):
    with pytest.raises(fl.TracingError, match="mask"):
        fl.compile(fn)(np.array([1.0, -1.0, 2.0]))


def test_unsupported_ufunc_keyword():
    with pytest.raises(fl.TracingError, match="order"):
        fl.compile(lambda x: np.add(x, 1, order="F"))(np.ones(3))


def test_out_of_bounds_index_array_raises_index_error():
    """Index arrays are checked before anything is written, like NumPy's IndexError."""
    cf = fl.compile(lambda x, i: x[i])
    x = np.arange(5.0)
    np.testing.assert_array_equal(cf(x, np.array([0, 4, -1])), x[np.array([0, 4, -1])])
    with pytest.raises(IndexError):
        x[np.array([0, 5])]
    with pytest.raises(IndexError):
        cf(x, np.array([0, 5]))
    np.testing.assert_array_equal(cf(x, np.array([1, 2])), x[[1, 2]])


def _setitem(x, i):
    x[i] = 1.0
    return x


def _setcols(x, i):
    x[:, i] = 1.0
    return x


def _add_at(x, i):
    np.add.at(x, i, 1.0)
    return x


@pytest.mark.parametrize("fn, x, bad, good", [
    # an empty axis: every index is out of bounds
    (lambda x, i: x[i], np.zeros(0), [0, 3], []),
    (lambda x, i: np.take(x, i), np.zeros(0), [1], []),
    (_setitem, np.zeros(0), [0, 3], []),
    (_add_at, np.zeros(0), [1], []),
    # an empty result from another axis: NumPy checks the indices all the same
    (lambda x, i: x[:, i], np.zeros((0, 3)), [7], [2, -3]),
    (_setcols, np.zeros((0, 3)), [7], [2, -3]),
    # a broadcast axis: the index selects no memory, yet must be in bounds
    (lambda x, i: np.broadcast_to(x, (5, 3))[i], np.ones(3), [7], [4, -5]),
    (lambda x, i: np.broadcast_to(x[:, None], (3, 5))[:, i], np.ones(3), [-6], [4, -5]),
    (lambda x, i: np.broadcast_to(x, (5, 3))[i].sum(axis=1), np.ones(3), [5], [4, -5]),
    (lambda x, i: x.reshape(3, 1)[:, i].max(), np.ones(3), [1], [0, -1]),
])
def test_index_arrays_into_empty_or_broadcast_axes_are_checked(fn, x, bad, good):
    """NumPy raises IndexError for an index out of bounds of an axis however many elements
    the result has, and whether or not the axis has memory behind it; the check is made on
    every call, not only on the traced one."""
    def numpy_(i):
        return fn(x.copy(), np.array(i, dtype=np.intp))
    cf = fl.compile(fn)
    with pytest.raises(IndexError):
        numpy_(bad)
    with pytest.raises(IndexError):
        cf(x.copy(), np.array(bad, dtype=np.intp))
    np.testing.assert_array_equal(cf(x.copy(), np.array(good, dtype=np.intp)), numpy_(good))
    further = [b + 1 if b >= 0 else b - 1 for b in bad]
    with pytest.raises(IndexError):              # a replay with new values
        cf(x.copy(), np.array(further, dtype=np.intp))


def _set_uint(x, i):
    x[i] = -1.0
    return x


@pytest.mark.parametrize("fn", [lambda x, i: x[i], lambda x, i: x[:, i], lambda x, i: x[[0, 1], i],
                                _set_uint])
@pytest.mark.parametrize("wrap", [np.uint64, lambda v: np.array(v, np.uint64)],
                         ids=["scalar", "0-d array"])
def test_uint64_scalar_index_of_2_63_or_more_overflows(fn, wrap):
    """NumPy takes a 0-d index as a Python int: a uint64 of 2**63 or more is an
    OverflowError (an index *array*'s uint64 values wrap to intp instead, as in NumPy)."""
    x = np.arange(25.0).reshape(5, 5)
    cf = fl.compile(fn)
    np.testing.assert_array_equal(cf(x.copy(), wrap(3)), fn(x.copy(), wrap(3)))
    for big in (2**64 - 1, 2**63):
        with pytest.raises(OverflowError):
            fn(x.copy(), wrap(big))
        with pytest.raises(OverflowError):
            cf(x.copy(), wrap(big))
    np.testing.assert_array_equal(cf(x.copy(), wrap(4)), fn(x.copy(), wrap(4)))
    # index arrays wrap, in NumPy and here
    big = np.array([2**64 - 1], np.uint64)
    np.testing.assert_array_equal(cf(x.copy(), big), fn(x.copy(), big))
