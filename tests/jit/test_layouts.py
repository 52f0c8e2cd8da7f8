"""Memory layouts and odd shapes: non-contiguous, negative strides, transposed, broadcast (zero
strides), 0-d, empty and size-1 inputs give NumPy's values, dtypes, shapes and result types."""
import warnings

import numpy as np
import pytest

import fastlaunch as fl

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]

FUNCS = {
    "affine": lambda x: x * 2 + 1,
    "sin": lambda x: np.sin(x),
    "square-sub": lambda x: x * x - x,
    "gt": lambda x: x > 0,
    "where": lambda x: np.where(x > 1, x, 0),
    "sum": lambda x: np.sum(x),
    "mean": lambda x: np.mean(x),
    "max": lambda x: np.max(x),
    "min": lambda x: x.min(),
    "sum-axis0": lambda x: x.sum(axis=0),
    "sum-last-keepdims": lambda x: x.sum(axis=-1, keepdims=True),
    "mean-axis0": lambda x: x.mean(axis=0),
    "max-last-keepdims": lambda x: x.max(axis=-1, keepdims=True),
    "min-axis0": lambda x: np.min(x, axis=0),
    "any": lambda x: np.any(x),
    "all-axis0": lambda x: np.all(x, axis=0),
}


def base(dtype, shape=(6, 10), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 5).astype(dtype)


def make_inputs(dtype):
    b = base(dtype)
    return {
        "contiguous": b,
        "step": b[::2, ::3],
        "negative-step": b[::-1, ::-2],
        "transposed": b.T,
        "fortran": np.asfortranarray(b),
        "broadcast": np.broadcast_to(b[0], (4, 10)),
        "broadcast-col": np.broadcast_to(b[:, :1], (6, 5)),
        "column": b[:, 3],
        "0d": np.array(b[0, 0]),
        "empty": np.zeros((0,), dtype),
        "empty-3x0": np.zeros((3, 0), dtype),
        "size1": b[:1, :1],
        "size1-1d": b[0, :1],
        "1d": b[1],
    }


def numpy_result(fn, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with np.errstate(all="ignore"):
            return fn(x)


def assert_like_numpy(got, want):
    assert type(got) is type(want), (type(got), type(want))
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    if np.asarray(want).dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


CASES = []
for _dt in DTYPES:
    for _iname in make_inputs(_dt):
        CASES.append(pytest.param(_dt, _iname, id=f"{np.dtype(_dt)}-{_iname}"))


@pytest.mark.parametrize("dtype, input_name", CASES)
def test_layouts_match_numpy(dtype, input_name):
    x = make_inputs(dtype)[input_name]
    before = x.copy()
    checked = 0
    for fname, fn in FUNCS.items():
        if x.ndim == 0 and ("axis" in fname or "keepdims" in fname):
            continue                      # see the test_zero_d_reduction_* tests below
        try:
            want = numpy_result(fn, x)
        except Exception as err:          # NumPy refuses: fastlaunch must refuse too
            with pytest.raises(type(err)):
                fl.compile(fn)(x)
            continue
        cf = fl.compile(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            got = cf(x)
            again = cf(x)                 # the replay path
        try:
            assert_like_numpy(got, want)
            assert_like_numpy(again, want)
        except AssertionError as err:
            raise AssertionError(f"{fname}: {err}") from None
        checked += 1
    assert checked >= 6
    np.testing.assert_array_equal(x, before)      # inputs are never written


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_two_noncontiguous_operands(dtype):
    b = base(dtype, (8, 12))
    a1, a2 = b[::2, 1::2], b[1::2, ::-2]
    for fn in (lambda x, y: x + y, lambda x, y: np.maximum(x, y) - x * y,
               lambda x, y: (x * y).sum(axis=1)):
        assert_like_numpy(fl.compile(fn)(a1, a2), fn(a1, a2))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_broadcasting_between_layouts(dtype):
    b = base(dtype, (5, 7))
    row = base(dtype, (7,), seed=1)[::-1]
    col = np.broadcast_to(base(dtype, (5, 1), seed=2), (5, 7))
    fn = lambda x, r, c: (x.T[:, ::-1] + c.T[:, ::-1]).T * r   # noqa: E731
    assert_like_numpy(fl.compile(fn)(b, row, col), fn(b, row, col))


def test_same_shape_different_layout_is_a_new_signature():
    calls = [0]

    def f(x):
        calls[0] += 1
        return x * 2.0 + x[0]

    cf = fl.compile(f)
    c = np.arange(12.0).reshape(3, 4)
    t = np.arange(12.0).reshape(4, 3).T            # same shape (3, 4), transposed (F) layout
    assert c.shape == t.shape and c.flags.c_contiguous and t.flags.f_contiguous
    want_c, want_t = f(c), f(t)
    calls[0] = 0
    assert_like_numpy(cf(c), want_c)
    assert_like_numpy(cf(t), want_t)
    assert calls[0] == 2
    assert cf.stats["traces"] == 2 and cf.stats["entries"] == 2
    for _ in range(2):
        assert_like_numpy(cf(c), want_c)
        assert_like_numpy(cf(t), want_t)
    assert calls[0] == 2


def test_same_shape_different_strides_each_correct():
    """Views of one shape with different strides or offsets: each is bound and read correctly."""
    fn = lambda x: x.sum(axis=0) - x[-1]            # noqa: E731
    cf = fl.compile(fn)
    b = np.arange(48.0).reshape(6, 8)
    views = [b[::2, ::2], b[1::2, 1::2], b[::-2, ::2], b[:3, :4], np.asfortranarray(b[:3, :4]),
             b[:3, :4].copy(), b[3:, 4:]]
    for v in views:
        assert v.shape == (3, 4)
        np.testing.assert_array_equal(cf(v), fn(v))
        np.testing.assert_array_equal(cf(v), fn(v))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_zero_d_inputs_and_scalars(dtype):
    x = np.array(3, dtype)
    y = np.array(4, dtype)
    for fn in (lambda a, b: a + b, lambda a, b: a * 2 - b, lambda a, b: np.maximum(a, b)):
        assert_like_numpy(fl.compile(fn)(x, y), fn(x, y))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4), (2, 0, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_empty_inputs(shape, dtype):
    x = np.zeros(shape, dtype)
    for fn in (lambda a: a + 1, lambda a: a.sum(axis=0), lambda a: np.sum(a),
               lambda a: a.sum(axis=-1, keepdims=True), lambda a: (a * 2, a > 0)):
        want = fn(x)
        got = fl.compile(fn)(x)
        if isinstance(want, tuple):
            for g, w in zip(got, want):
                assert_like_numpy(g, w)
        else:
            assert_like_numpy(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_empty_reduction_without_identity_raises_like_numpy(dtype):
    x = np.zeros((0, 3), dtype)
    with pytest.raises(ValueError):
        np.max(x, axis=0)
    with pytest.raises(ValueError):
        fl.compile(lambda a: np.max(a, axis=0))(x)


def test_outputs_are_c_contiguous_and_fresh_for_noncontiguous_inputs():
    b = np.arange(24.0).reshape(4, 6)
    for x in (b.T, b[::2, ::-1], np.broadcast_to(b[0], (3, 6))):
        out = fl.compile(lambda a: a + 0.5)(x)
        assert out.flags.c_contiguous and out.flags.writeable
        assert not np.shares_memory(out, b)
        np.testing.assert_array_equal(out, x + 0.5)


@pytest.mark.parametrize("dtype", [">f8", ">i4", "<f4"])
def test_non_native_byte_order_inputs(dtype):
    x = np.arange(10, dtype=dtype)
    for fn in (lambda a: a * 2, lambda a: a.sum()):
        assert_like_numpy(fl.compile(fn)(x), fn(x))


def _misaligned(n):
    raw = np.zeros(8 * n + 1, np.uint8)[1:].view(np.float64)
    raw[:] = np.arange(n)
    assert not raw.flags.aligned
    return raw


def test_misaligned_input():
    x = _misaligned(10)
    np.testing.assert_array_equal(fl.compile(lambda a: a + 1)(x), x + 1)


@pytest.mark.parametrize("fn", [lambda x: x.sum(axis=-1), lambda x: x.max(axis=-1, keepdims=True),
                                lambda x: np.min(x, axis=-1)], ids=["sum", "max-keepdims", "min"])
def test_zero_d_reduction_over_axis_minus_one(fn):
    x = np.array(3.0)
    assert_like_numpy(fl.compile(fn)(x), fn(x))


@pytest.mark.parametrize("fn", [lambda x: x.sum(axis=0), lambda x: np.max(x, axis=0)],
                         ids=["sum", "max"])
def test_zero_d_reduction_over_axis_zero(fn):
    x = np.array(3.0)
    assert_like_numpy(fl.compile(fn)(x), fn(x))


@pytest.mark.parametrize("fn", [lambda x: np.sum(x, keepdims=True),
                                lambda x: x.max(keepdims=True),
                                lambda x: np.mean(x, keepdims=True)], ids=["sum", "max", "mean"])
def test_zero_d_reduction_keepdims_result_type(fn):
    x = np.array(3.0)
    assert_like_numpy(fl.compile(fn)(x), fn(x))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64,
                                   np.float16])
def test_other_supported_dtypes(dtype):
    x = (np.arange(12) % 7).astype(dtype).reshape(3, 4)
    for fn in (lambda a: a + a, lambda a: a.sum(axis=1), lambda a: a.max(), lambda a: a.T * 3):
        want = fn(x)
        got = fl.compile(fn)(x)
        assert_like_numpy(got, want)
