"""Device arrays (fastlaunch.DeviceArray) on the devsim backend: the path a GPU takes, run
without one.  Device arguments bind without copies (no TO_DEVICE/TO_HOST in the program),
results stay on the device, in-place updates happen on the device, the replay fast path takes
them, errors leave device memory as it was.  tests/cuda/ runs the same on a GPU."""
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _devsim
from fastlaunch._launch import Space


def step(p, g, m, v, lr):
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(np.abs(v)) + 1e-8)
    return p, m, v, np.sum((p - 1.0) ** 2)


def host_state(n=100, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(np.float32) for _ in range(4)]


def dev(a):
    return fl.to_device(a, "devsim")


def test_device_arguments_bind_without_copies_and_results_stay_on_the_device():
    host = host_state()
    f = fl.compile(step, backend="devsim")
    args = [dev(a) for a in host]
    lowered = f.lower(*args, 0.01)
    ops = {op.name for _, op, _ in lowered.program.instructions()}
    assert "TO_DEVICE" not in ops and "TO_HOST" not in ops and "ALLOC" not in ops
    assert all(s.space == Space.SPACE_DEVICE for s in lowered.program.slots
               if s.role in ("input", "output"))
    out = f(*args, 0.01)
    assert all(type(o) is fl.DeviceArray and o.device == "devsim" for o in out)
    assert out[3].shape == () and out[0].shape == (100,) and out[0].dtype == np.float32
    for got, want in zip(out, step(*host, 0.01)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    # a loop keeps its state on the device; the same signature replays (one trace)
    p, m, v = out[:3]
    hp, hm, hv = [o.numpy() for o in out[:3]]
    for _ in range(3):
        p, m, v, loss = f(p, args[1], m, v, 0.01)
        hp, hm, hv, hloss = step(hp, host[1], hm, hv, 0.01)
    np.testing.assert_allclose(p.numpy(), hp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss.numpy(), hloss, rtol=1e-5)
    assert len(f.traces) == 1


def test_in_place_updates_of_device_arguments():
    def update(p, g, idx):
        p -= 0.5 * g
        p[idx] = 7.0
    f = fl.compile(update, backend="devsim")
    p0, g0 = np.arange(6, dtype=np.float32), np.ones(6, np.float32)
    p, g = dev(p0), dev(g0)
    assert f(p, g, np.array([1, -1])) is None
    want = p0 - 0.5 * g0
    want[[1, -1]] = 7.0
    np.testing.assert_array_equal(p.numpy(), want)
    np.testing.assert_array_equal(g.numpy(), g0)
    f(p, g, np.array([1, -1]))          # replayed: updated again, in place
    want -= 0.5
    want[[1, -1]] = 7.0
    np.testing.assert_array_equal(p.numpy(), want)


def test_a_read_only_device_argument_is_not_updated():
    def update(p):
        p += 1
    buf = _devsim.DeviceBuffer.from_array(np.zeros(4))
    ro = fl.DeviceArray(buf.address, (4,), np.float64, "devsim", buf, writeable=False)
    with pytest.raises(ValueError, match="read-only"):
        fl.compile(update, backend="devsim")(ro)


def test_host_and_device_arguments_mix():
    f = fl.compile(lambda a, b: a * b + 1, backend="devsim")
    a, b = np.arange(5.0), np.arange(5.0) + 2
    out = f(dev(a), b)
    assert type(out) is fl.DeviceArray
    np.testing.assert_array_equal(out.numpy(), a * b + 1)
    ops = [op.name for _, op, _ in f.lower(dev(a), b).program.instructions()]
    assert ops.count("TO_DEVICE") == 1 and "TO_HOST" not in ops
    # NumPy in, NumPy out: the same function with host arguments is another signature
    np.testing.assert_array_equal(f(a, b), a * b + 1)
    assert len(f.traces) == 2


def test_strided_device_arrays():
    base = np.arange(24.0).reshape(4, 6)
    buf = _devsim.DeviceBuffer.from_array(base)
    view = base[:, ::2]
    d = fl.DeviceArray(buf.address, view.shape, view.dtype, "devsim", buf, strides=view.strides)
    np.testing.assert_array_equal(d.numpy(), view)
    out = fl.compile(lambda x: x.sum(axis=0) * 2, backend="devsim")(d)
    np.testing.assert_array_equal(out.numpy(), view.sum(axis=0) * 2)


def test_errors_leave_device_memory_as_it_was():
    def gather_and_update(x, i):
        x += 1
        return x[i]
    f = fl.compile(gather_and_update, backend="devsim")
    x0 = np.arange(5.0)
    x = dev(x0)
    live = _devsim.device_stats()["live_bytes"]
    with pytest.raises(IndexError, match="no argument was modified"):
        f(x, np.array([0, 9]))
    np.testing.assert_array_equal(x.numpy(), x0)
    assert _devsim.device_stats()["live_bytes"] == live
    np.testing.assert_array_equal(f(x, np.array([0, 4])).numpy(), [1.0, 5.0])


def test_device_arrays_of_another_backend_are_refused():
    x = dev(np.ones(3))
    with pytest.raises(TypeError, match="argument 'a': a DeviceArray in devsim memory cannot be "
                                        "passed to a function compiled for backend 'cpu'"):
        fl.compile(lambda a: a + 1, backend="cpu")(x)


def test_device_array_basics():
    a = np.arange(12, dtype=np.int16).reshape(3, 4)
    d = dev(a)
    assert (d.shape, d.dtype, d.ndim, d.size, d.nbytes, len(d)) == ((3, 4), a.dtype, 2, 12, 24, 3)
    assert repr(d) == "DeviceArray(devsim, int16[3, 4])"
    np.testing.assert_array_equal(d.numpy(), a)
    with pytest.raises(AttributeError, match="not CUDA memory"):
        d.__cuda_array_interface__  # noqa: B018  (asking raises)
    with pytest.raises(BufferError):
        d.__dlpack__()
    with pytest.raises(ValueError, match="no device memory"):
        fl.to_device(a, "cpu")
    with pytest.raises(TypeError, match="not a native number type"):
        fl.DeviceArray(0, (2,), np.clongdouble, "devsim", None)
    with pytest.raises(TypeError, match="not a native number type"):
        fl.DeviceArray(0, (2,), np.dtype(">c16"), "devsim", None)


def test_a_program_with_device_arguments_cannot_be_saved(tmp_path):
    f = fl.compile(lambda a: a + 1, backend="devsim")
    with pytest.raises(TypeError, match="save it with NumPy example arguments"):
        f.save(tmp_path / "p.flp", dev(np.ones(3)))


class FakeCudaArray:
    """Something that says it is CUDA memory (as CuPy and PyTorch arrays do)."""
    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f8", "data": (1 << 40, False),
                                "version": 3}


def test_a_cuda_array_is_refused_by_other_backends():
    with pytest.raises(TypeError, match="argument 'a': a CUDA array \\(FakeCudaArray\\) can only "
                                        "be passed to a function compiled with backend='cuda'"):
        fl.compile(lambda a: a + 1, backend="devsim")(FakeCudaArray())


def test_a_cuda_array_without_a_gpu_says_why():
    try:
        from fastlaunch import _cuda
    except ImportError:
        pytest.skip("no CUDA extension")
    if _cuda.driver_error() is None:
        pytest.skip("a GPU is usable here (tests/cuda binds CuPy arrays)")
    with pytest.raises(fl.BackendUnavailableError, match="backend 'cuda' cannot run here"):
        fl.compile(lambda a: a + 1, backend="cuda")(FakeCudaArray())
