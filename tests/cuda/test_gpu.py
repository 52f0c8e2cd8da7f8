"""The CUDA backend on a GPU (skipped, with the reason, where none is usable): the NumPy path
(NumPy in, NumPy out) and the device-array path (DeviceArrays, CuPy and PyTorch arrays in,
DeviceArrays out), against NumPy; deterministic reductions; errors that leak nothing.
bench/gpu_check.sh runs these, then the conformance and jit suites with --backend cuda."""
import numpy as np
import pytest

import fastlaunch as fl

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def cuda():
    from fastlaunch import _cuda
    return _cuda


def step(p, m, v, target, lr):
    y = np.sin(p) + p * p
    r = y - target
    loss = np.mean(r * r)
    g = 2 * r * (np.cos(p) + 2 * p) / p.size
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    p = p - lr * m / (np.sqrt(v) + 1e-8)
    return p, m, v, loss


def state(n, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype) * 0.1,
            rng.random(n).astype(dtype) * 0.1, rng.standard_normal(n).astype(dtype)]


def close(got, want, rtol):
    got = got.numpy() if isinstance(got, fl.DeviceArray) else got
    assert np.shape(got) == np.shape(want) and np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * 1e-3)


# ---- NumPy in, NumPy out ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [16, 1 << 20])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_step_numpy_path(n, dtype):
    args = state(n, dtype) + [1e-2]
    f = fl.compile(step, backend="cuda")
    want = step(*args)
    for _ in range(2):                      # the trace, then the replay
        got = f(*args)
        assert all(isinstance(g, (np.ndarray, np.generic)) for g in got)
        for g, w in zip(got, want):
            close(g, w, 1e-4 if dtype == np.float32 else 1e-10)


def test_reductions_are_deterministic_and_right():
    x = np.random.default_rng(1).standard_normal(1 << 22).astype(np.float32)
    f = fl.compile(lambda a: (a.sum(), a.max(), np.argmax(a), a.reshape(64, -1).sum(axis=1),
                              a.reshape(-1, 64).sum(axis=0), np.cumsum(a[:1000]),
                              np.any(a > 4), (a[:100].astype(np.float64) + 1.5).prod()),
                   backend="cuda")
    first = f(x)
    again = f(x)
    for a, b in zip(first, again):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()     # the same bits
    want = (x.sum(dtype=np.float64).astype(np.float32), x.max(), np.argmax(x),
            x.reshape(64, -1).sum(axis=1), x.reshape(-1, 64).sum(axis=0), np.cumsum(x[:1000]),
            np.any(x > 4), (x[:100].astype(np.float64) + 1.5).prod())
    for g, w in zip(first, want):
        np.testing.assert_allclose(g, w, rtol=1e-4)


def test_scatter_add_applies_repeated_indices_in_order():
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 50, 5000)
    vals = rng.standard_normal(5000)
    f = fl.compile(lambda a, i, v: np.add.at(a, i, v), backend="cuda")
    a = np.zeros(50)
    f(a, idx, vals)
    want = np.zeros(50)
    np.add.at(want, idx, vals)
    assert a.tobytes() == want.tobytes()          # loop order: NumPy's bits exactly


def _add_at(a, i, v):
    np.add.at(a, i, v)


def _max_at(a, i, v):
    np.maximum.at(a, i, v)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.int64, np.uint64])
def test_integer_scatters_run_with_atomics_and_give_numpys_result(dtype):
    """Integer scatter-add and -max run on every thread (atomics; cuda_schedule.order_free):
    wrap-around included, the same result as NumPy's loop order."""
    rng = np.random.default_rng(3)
    n, m = 37, 1 << 20                       # a million updates onto 37 elements
    idx = rng.integers(-n, n, m)
    info = np.iinfo(dtype)
    vals = rng.integers(max(info.min, -2**40), min(info.max, 2**40), m).astype(dtype)
    for fn in (_add_at, _max_at):
        f = fl.compile(fn, backend="cuda")
        assert "atomic" in [k.schedule.kind for k in f.lower(np.zeros(n, dtype), idx,
                                                             vals).plan.kernels]
        a, want = np.zeros(n, dtype), np.zeros(n, dtype)
        f(a, idx, vals)
        fn(want, idx, vals)
        np.testing.assert_array_equal(a, want)
    x = rng.integers(0, 1000, m)
    np.testing.assert_array_equal(fl.compile(lambda x: np.bincount(x, minlength=1000),
                                             backend="cuda")(x), np.bincount(x, minlength=1000))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int16])
def test_long_rows_sort_on_the_gpu(dtype):
    """Radix sort with 4-bit digits and a per-pass histogram (bounded local memory)."""
    a = (np.random.default_rng(4).standard_normal((300, 3000)) * 1000).astype(dtype)
    np.testing.assert_array_equal(fl.compile(lambda a: np.sort(a, axis=-1), backend="cuda")(a),
                                  np.sort(a, axis=-1))
    got = fl.compile(lambda a: np.argsort(a, axis=0, kind="stable"), backend="cuda")(a)
    np.testing.assert_array_equal(got, np.argsort(a, axis=0, kind="stable"))


def test_every_kernel_runs_with_a_block_its_code_allows(cuda):
    """The blocks chosen at load time (cuda_schedule.launch_block) against each loaded
    kernel's cuFuncGetAttribute numbers."""
    f = fl.compile(lambda a: (np.sort(a, axis=-1), a.sum(), np.cumsum(a, axis=1)),
                   backend="cuda")
    a = np.random.default_rng(5).standard_normal((64, 4000))
    f(a)
    info = f._entries_list()[0].info
    for ck, k in zip(info.kernels, info.lowered.plan.kernels):
        limits = cuda.kernel_limits(cuda.load_kernel(ck.name, bytes(ck.obj)))
        assert k.schedule.block <= limits["max_threads"]
        assert limits["local_bytes"] <= 256, (k.label, limits)


def test_math_matmul_float16_and_fmod():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((70, 90)), rng.standard_normal((90, 30))
    close(fl.compile(lambda x, y: x @ y, backend="cuda")(a, b), a @ b, 1e-12)
    x = rng.uniform(-30, 30, 1000)
    got = fl.compile(lambda x: (np.fmod(x, 2.5), np.exp(x / 10), np.arctan2(x, 3.0)),
                     backend="cuda")(x)
    np.testing.assert_array_equal(got[0], np.fmod(x, 2.5))      # fmod is exact
    close(got[1], np.exp(x / 10), 1e-14)
    close(got[2], np.arctan2(x, 3.0), 1e-14)
    h = rng.random(100).astype(np.float16)
    close(fl.compile(lambda x: x * x + np.float16(1), backend="cuda")(h), h * h + np.float16(1),
          1e-3)


def test_kernel_errors_leave_arguments_and_device_memory_as_they_were(cuda):
    def gather_and_update(x, i):
        x += 1
        return x[i]
    f = fl.compile(gather_and_update, backend="cuda")
    x = np.arange(5.0)
    f(x.copy(), np.array([0]))
    live = cuda.memory_stats()["live_bytes"]
    with pytest.raises(IndexError, match="no argument was modified"):
        f(x, np.array([0, 9]))
    np.testing.assert_array_equal(x, np.arange(5.0))
    assert cuda.memory_stats()["live_bytes"] == live
    np.testing.assert_array_equal(f(x, np.array([0, 4])), [1.0, 5.0])


def test_cuda_errors_are_named(cuda):
    with pytest.raises(fl.CUDAError, match=r"CUDA_ERROR_OUT_OF_MEMORY \(2\)") as err:
        cuda.check(2, "a test")
    assert err.value.name == "CUDA_ERROR_OUT_OF_MEMORY" and err.value.code == 2


# ---- device arrays ---------------------------------------------------------------------------
def test_step_on_device_arrays():
    host = state(1 << 16)
    f = fl.compile(step, backend="cuda")
    p, m, v, target = [fl.to_device(a) for a in host]
    hp, hm, hv = host[:3]
    for _ in range(5):
        p, m, v, loss = f(p, m, v, target, 1e-2)
        hp, hm, hv, hloss = step(hp, hm, hv, host[3], 1e-2)
    assert type(p) is fl.DeviceArray and type(loss) is fl.DeviceArray and loss.shape == ()
    close(p, hp, 1e-4)
    close(loss, hloss, 1e-4)
    assert len(f.traces) == 1
    ops = {op.name for _, op, _ in f.lower(p, m, v, target, 1e-2).program.instructions()}
    assert "TO_DEVICE" not in ops and "TO_HOST" not in ops


def test_in_place_update_of_a_device_array():
    def update(p, g):
        p -= 0.5 * g
    f = fl.compile(update, backend="cuda")
    p, g = fl.to_device(np.arange(8.0)), fl.to_device(np.ones(8))
    f(p, g)
    f(p, g)
    np.testing.assert_array_equal(p.numpy(), np.arange(8.0) - 1.0)


def test_cupy_and_torch_arrays_bind_without_copies():
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(10, dtype=cupy.float32)

    def update(a):
        a *= 2
        return a.sum()
    total = fl.compile(update, backend="cuda")(x)
    assert float(total.numpy()) == 90.0
    np.testing.assert_array_equal(cupy.asnumpy(x), np.arange(10, dtype=np.float32) * 2)
    # our results are CUDA arrays for CuPy (the interface) and PyTorch (DLPack)
    y = fl.compile(lambda a: a + 1, backend="cuda")(fl.to_device(np.arange(4.0)))
    np.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(y)), np.arange(4.0) + 1)
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(y)
    assert t.is_cuda and t.cpu().numpy().tolist() == [1.0, 2.0, 3.0, 4.0]
    tt = torch.arange(6, dtype=torch.float64, device="cuda")
    out = fl.compile(lambda a: a * 3, backend="cuda")(tt)
    np.testing.assert_array_equal(out.numpy(), np.arange(6.0) * 3)


def test_benchmark_floors_run(cuda):
    f = fl.compile(step, backend="cuda")
    args = state(16) + [1e-2]
    f(*args)
    exe = f._entries_list()[0].executable
    assert 0 < cuda.launch_floor(exe, 10) < 1.0
    assert cuda.copy_bandwidth(1 << 20, 10) > 1e9


def test_iterate_equals_the_python_loop():
    """fl.iterate on the GPU (a host-side loop of launches; until= reads one flag byte back
    per iteration) against the Python loop over the same compiled step, bit for bit."""
    p, m, v, t = state(1000)
    f = fl.compile(step, backend="cuda")
    threshold = float(f(p, m, v, t, 1e-2)[3]) * 0.9
    until = lambda loss: loss < threshold          # noqa: E731
    got = fl.iterate(f, 300, p, m, v, t, 1e-2, carry=("p", "m", "v"), collect=2, until=until)
    rows = []
    for i in range(300):
        p, m, v, loss = f(p, m, v, t, 1e-2)
        stop = until(loss)
        if (i + 1) % 2 == 0 or stop or i == 299:
            rows.append(loss)
        if stop:
            break
    for g, w in zip(got, (p, m, v, np.array(rows, np.float32))):
        assert np.array_equal(g, w)
