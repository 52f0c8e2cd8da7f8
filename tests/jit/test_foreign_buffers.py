"""An array made inside fn that a traced value was written into holds its contents in a tracer;
its memory is stale.  Whatever reads that memory (the buffer protocol, __array_interface__,
ctypes, NumPy's or SciPy's C code) must raise a TracingError naming the array and the call,
or see the traced values.  Never a silent stale result (issue 30)."""
import copy

import numpy as np
import pytest

import fastlaunch as fl

X = np.arange(1.0, 7.0)


def filled(x):
    buf = np.zeros(x.shape)
    buf[...] = x
    return buf


def _raises_naming_the_array(fn, *args, what="np.zeros"):
    with pytest.raises(fl.TracingError) as err:
        fl.compile(fn)(*args)
    text = str(err.value)
    assert f"the array made by {what} at {__file__}" in text, text
    assert "stale" in text
    return text


# ---- reading a promoted buffer's memory raises ---------------------------------------------------
@pytest.mark.parametrize("read", [
    lambda b: np.frombuffer(memoryview(b)),
    lambda b: np.frombuffer(b),
    lambda b: bytes(b),
    lambda b: np.ndarray(b.shape, b.dtype, buffer=b),
], ids=["memoryview", "frombuffer", "bytes", "ndarray-buffer"])
def test_buffer_protocol_of_a_promoted_buffer_raises(read):
    def fn(x):
        return read(filled(x))
    text = _raises_naming_the_array(fn, X)
    assert "buffer protocol" in text
    assert "test_foreign_buffers.py" in text.split("reads")[0]     # the call is named


@pytest.mark.parametrize("attr", ["__array_interface__", "__array_struct__", "ctypes", "data",
                                  "tobytes"])
def test_memory_attributes_of_a_promoted_buffer_raise(attr):
    def fn(x):
        getattr(filled(x), attr)
        return x
    assert f"x.{attr}" in _raises_naming_the_array(fn, X)


def test_numpys_own_c_code_copying_a_promoted_buffer_raises():
    def fn(x):
        return np.ndarray.copy(filled(x))       # the unbound C method reads the memory
    assert "NumPy's C code" in _raises_naming_the_array(fn, X)


def test_memory_handed_out_before_the_traced_write_refuses_the_write():
    def through_memoryview(x):
        buf = np.zeros(x.shape)
        mv = memoryview(buf)
        buf[...] = x
        return np.frombuffer(mv)

    def through_frombuffer(x):
        buf = np.zeros(x.shape)
        alias = np.frombuffer(buf)
        buf[...] = x
        return alias

    def through_interface(x):
        buf = np.zeros(x.shape)
        buf.__array_interface__  # noqa: B018  (reading it is what is refused)
        buf[...] = x
        return buf

    for fn in (through_memoryview, through_frombuffer, through_interface):
        with pytest.raises(fl.TracingError, match="whose memory was handed to code"):
            fl.compile(fn)(X)


def test_a_released_buffer_export_does_not_block_the_write():
    def fn(x):
        buf = np.zeros(x.shape)
        raw = bytes(buf)                        # a copy: the export is released at once
        buf[...] = x
        return buf + len(raw)
    cf = fl.compile(fn)
    np.testing.assert_array_equal(cf(X), fn(X))
    np.testing.assert_array_equal(cf(X * 2), fn(X * 2))


# ---- what can see the traced values, does ------------------------------------------------------
def _same_as_numpy(fn, *args):
    cf = fl.compile(fn)
    for scale in (1.0, -3.0):                   # the trace's values, then new ones
        call = [a * scale for a in args]
        want = fn(*call)
        got = cf(*call)
        assert np.asarray(got).dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("view", [
    lambda b: b.reshape(2, 3), lambda b: np.reshape(b, (3, 2)), lambda b: b.reshape(2, 3).T,
    lambda b: b.ravel(), lambda b: b[::2], lambda b: np.split(b, 2)[1],
    lambda b: np.lib.stride_tricks.as_strided(b, (3, 2), (b.itemsize, b.itemsize)),
    lambda b: np.asarray(b), lambda b: np.ascontiguousarray(b),
], ids=["reshape", "np.reshape", "reshape.T", "ravel", "slice", "split", "as_strided",
        "asarray", "ascontiguousarray"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_views_taken_before_the_traced_write_follow_it(view, dtype):
    def fn(x):
        buf = np.zeros(6, dtype)
        v = view(buf)
        buf[...] = x
        return v * 1
    _same_as_numpy(fn, X.astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_writes_through_followed_views_reach_the_base(dtype):
    def fn(x):
        out = np.zeros((2, 3), dtype)
        flat = out.reshape(-1)
        flat[:] = x
        out.T[0] += 1
        return out
    _same_as_numpy(fn, X.astype(dtype))


def test_a_view_fastlaunch_cannot_follow_is_refused_once_stale():
    def fn(x):
        buf = np.zeros(6)
        v = np.ndarray.reshape(buf, (2, 3))     # NumPy's method, not the buffer's
        buf[...] = x
        return v + 0
    with pytest.raises(fl.TracingError, match="take the view after the write"):
        fl.compile(fn)(X)


def test_copies_and_printing_of_a_promoted_buffer_use_the_traced_values():
    def fn(x):
        buf = filled(x)
        str(buf)
        return copy.copy(buf) + copy.deepcopy(buf) + np.asfortranarray(buf)
    _same_as_numpy(fn, X)


def test_fixed_seed_generator_writes_out_into_a_created_array():
    def fn(x):
        buf = filled(x)
        np.random.default_rng(7).random(out=buf)    # NumPy overwrites buf with the draws
        return buf + x
    cf = fl.compile(fn)
    np.testing.assert_array_equal(cf(X), fn(X))
    np.testing.assert_array_equal(cf(X + 1), fn(X + 1))


def test_asarray_of_a_global_is_not_a_buffer_of_the_function():
    table = np.zeros(6)

    def fn(x):
        t = np.asarray(table)                   # NumPy returns `table` itself
        t[...] = x                              # would modify the caller's array
        return t
    with pytest.raises(fl.TracingError, match="converting a traced array"):
        fl.compile(fn)(X)
    assert not table.any()


# ---- SciPy's C routines --------------------------------------------------------------------------
scipy_signal = pytest.importorskip("scipy.signal")


def test_library_code_filling_its_own_buffer_for_c_raises():
    # scipy.signal.wiener calls SciPy's untraced correlate internally, which copies the
    # image into its own np.zeros buffer for C: that buffer stays NumPy's, and writing the
    # traced image into it raises, naming the function the user called
    def fn(x):
        return scipy_signal.wiener(x, 3)
    with pytest.raises(fl.TracingError, match=r"scipy\.signal\.wiener"):
        fl.compile(fn)(np.random.default_rng(0).random((8, 8)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("name", ["correlate", "convolve", "fftconvolve", "correlate2d",
                                  "convolve2d"])
def test_scipy_signal_correlation_is_traced(name, mode, dtype):
    rng = np.random.default_rng(3)
    image = rng.standard_normal((9, 8)).astype(dtype)
    even = rng.standard_normal((2, 4)).astype(dtype)       # even sizes: the 'same' centring

    def constant_kernel(x):
        buf = np.zeros(x.shape, x.dtype)          # the case: a created buffer
        buf[...] = x
        return getattr(scipy_signal, name)(buf, even, mode=mode)

    def traced_kernel(x, k):
        return getattr(scipy_signal, name)(x, k, mode=mode)

    tol = 2e-5 if dtype == np.float32 else 1e-12
    for fn, args in ((constant_kernel, (image,)), (traced_kernel, (image, even))):
        cf = fl.compile(fn)
        for scale in (1, -2):
            call = [a * dtype(scale) for a in args]
            want, got = fn(*call), cf(*call)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("boundary", ["wrap", "symm"])
def test_scipy_signal_2d_boundaries(boundary):
    rng = np.random.default_rng(4)
    a, k = rng.standard_normal((6, 7)), rng.standard_normal((3, 2))
    for name in ("correlate2d", "convolve2d"):
        def fn(a, k):
            return getattr(scipy_signal, name)(a, k, mode="same", boundary=boundary)
        np.testing.assert_allclose(fl.compile(fn)(a, k), fn(a, k), rtol=1e-12)


def test_scipy_signal_integer_and_swapped_operands():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    k = np.arange(30, dtype=np.int32).reshape(5, 6) - 9       # larger: 'valid' swaps
    for name in ("correlate", "convolve", "correlate2d", "convolve2d"):
        def fn(a, k):
            return getattr(scipy_signal, name)(a, k, mode="valid")
        got, want = fl.compile(fn)(a, k), fn(a, k)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_scipy_signal_unsupported_options_say_so():
    def fn(a, k):
        return scipy_signal.fftconvolve(a, k, axes=0)
    with pytest.raises(fl.TracingError, match="axes"):
        fl.compile(fn)(np.ones((4, 4)), np.ones((2, 2)))
