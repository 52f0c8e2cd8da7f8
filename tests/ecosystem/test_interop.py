"""CPU arrays of other libraries are arguments without copies: a compiled function sees their
memory through DLPack, the array interface or the buffer protocol, so in-place updates reach
the caller's object; results are NumPy arrays."""
import array
import ctypes

import numpy as np
import pytest

import fastlaunch as fl


@fl.compile
def bump(x, by):
    """Updates x in place and returns a new array."""
    x += by
    return x * 2


class DLPackOnly:
    """A producer that speaks DLPack only (as a PyTorch or JAX CPU array does), over the
    memory of a NumPy array it keeps."""

    def __init__(self, arr, device=(1, 0)):
        self._arr, self._device = arr, device

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._device


class InterfaceOnly:
    """A producer that speaks the array interface only (as CuPy-style host arrays do)."""

    def __init__(self, arr):
        self._arr = arr
        self.__array_interface__ = arr.__array_interface__


def test_memoryview_is_updated_in_place():
    buf = bytearray(8 * 6)
    view = memoryview(buf).cast("d")
    out = bump(view, 1.5)
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    np.testing.assert_array_equal(out, np.full(6, 3.0))
    assert view.tolist() == [1.5] * 6                    # the caller's memory changed
    assert np.frombuffer(buf).tolist() == [1.5] * 6
    bump(view, 1.0)                                      # and again, replayed
    assert view.tolist() == [2.5] * 6
    assert bump.stats["traces"] == 1


def test_strided_memoryview_of_a_2d_buffer():
    base = np.arange(24.0).reshape(4, 6)
    view = memoryview(base[:, ::2])                      # a non-contiguous buffer
    assert not view.contiguous
    want = base[:, ::2] + 1
    bump(view, 1.0)
    np.testing.assert_array_equal(base[:, ::2], want)
    np.testing.assert_array_equal(base[:, 1::2], np.arange(24.0).reshape(4, 6)[:, 1::2])


def test_array_array_is_updated_in_place():
    a = array.array("f", [1, 2, 3, 4])
    out = bump(a, 2)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [6, 8, 10, 12])
    assert a.tolist() == [3, 4, 5, 6]


def test_ctypes_array_through_the_buffer_protocol():
    c = (ctypes.c_int32 * 5)(*range(5))
    out = fl.compile(lambda x: x * x)(c)
    np.testing.assert_array_equal(out, np.arange(5) ** 2)
    assert out.dtype == np.int32


def test_read_only_buffers_are_read_but_not_written():
    ro = memoryview(np.arange(4.0).tobytes()).cast("d")
    np.testing.assert_array_equal(fl.compile(lambda x: x + 1)(ro), np.arange(4.0) + 1)
    with pytest.raises(ValueError, match="read-only"):
        bump(ro, 1.0)


def test_dlpack_producer_is_shared_not_copied():
    base = np.arange(5, dtype=np.float32)
    out = bump(DLPackOnly(base), 1)
    np.testing.assert_array_equal(base, np.arange(5) + 1)
    np.testing.assert_array_equal(out, (np.arange(5) + 1) * 2)


def test_dlpack_producer_on_another_device_is_refused():
    with pytest.raises(TypeError, match=r"argument 'x': a DLPackOnly on device \(2, 0\).*CPU"):
        bump(DLPackOnly(np.zeros(3), device=(2, 0)), 1.0)


def test_array_interface_producer_is_updated_in_place():
    base = np.zeros((2, 3), np.int64)
    bump(InterfaceOnly(base), 7)
    np.testing.assert_array_equal(base, np.full((2, 3), 7))


def test_foreign_arrays_inside_containers():
    a = array.array("d", [1.0, 2.0])
    m = memoryview(bytearray(16)).cast("d")

    @fl.compile
    def f(d):
        d["a"] *= 3
        return d["a"] + d["m"]

    np.testing.assert_array_equal(f({"a": a, "m": m}), [3.0, 6.0])
    assert a.tolist() == [3.0, 6.0]


def test_bytes_and_strings_are_still_refused():
    for value in (b"abcd", "abcd"):
        with pytest.raises(TypeError, match="argument 'x'"):
            bump(value, 1)


def test_torch_cpu_tensor_is_updated_in_place():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32)
    out = bump(t, 0.5)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, (np.arange(6) + 0.5) * 2)
    np.testing.assert_allclose(t.numpy(), np.arange(6) + 0.5)
    g = torch.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match="argument 'x'.*DLPack"):
        bump(g, 1.0)


def test_scipy_minimize_with_a_compiled_objective_and_gradient():
    """SciPy calls the objective and gradient hundreds of times: traced once each, the scalar
    comes back as np.float64 (a Python float subclass), the gradient as a fresh array."""
    optimize = pytest.importorskip("scipy.optimize")

    @fl.compile
    def rosen(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    @fl.compile
    def rosen_der(x):
        mid, left, right = x[1:-1], x[:-2], x[2:]
        der = np.zeros_like(x)
        der[1:-1] = 200 * (mid - left ** 2) - 400 * (right - mid ** 2) * mid - 2 * (1 - mid)
        der[0] = -400 * x[0] * (x[1] - x[0] ** 2) - 2 * (1 - x[0])
        der[-1] = 200 * (x[-1] - x[-2] ** 2)
        return der

    x0 = np.array([1.3, 0.7, 0.8, 1.9, 1.2])
    assert isinstance(rosen(x0), float)
    for method in ("BFGS", "L-BFGS-B"):
        got = optimize.minimize(rosen, x0, jac=rosen_der, method=method)
        want = optimize.minimize(optimize.rosen, x0, jac=optimize.rosen_der, method=method)
        assert got.success and abs(got.nit - want.nit) <= 2
        np.testing.assert_allclose(got.x, want.x, rtol=1e-6)
        np.testing.assert_allclose(got.x, np.ones(5), atol=1e-4)
    assert rosen.stats["traces"] == 1 and rosen_der.stats["traces"] == 1
