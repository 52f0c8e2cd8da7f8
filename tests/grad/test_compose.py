"""Gradients composed with the rest of fastlaunch: inside fl.compile, inside fl.iterate,
saved and loaded, pickled with shipped programs, in Dask, on every backend."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import fastlaunch as fl

RNG = np.random.default_rng(7)


def loss(p, target):
    return np.mean((np.sin(p) + p * p - target) ** 2)


def grad_by_hand(p, target):
    r = np.sin(p) + p * p - target
    return 2 * r * (np.cos(p) + 2 * p) / p.size


@fl.compile
def adam(p, m, v, target, lr):
    value, g = fl.value_and_grad(loss)(p, target)
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    return p - lr * m / (np.sqrt(v) + 1e-8), m, v, value


def _adam_numpy(p, m, v, target, lr):
    g = grad_by_hand(p, target)
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    return p - lr * m / (np.sqrt(v) + 1e-8), m, v


def test_a_whole_adam_step_is_one_compiled_function():
    p, t = RNG.standard_normal(64), RNG.standard_normal(64)
    m, v = np.zeros(64), np.zeros(64)
    ep, em, ev = p, m, v
    for _ in range(5):
        p, m, v, value = adam(p, m, v, t, 1e-2)
        ep, em, ev = _adam_numpy(ep, em, ev, t, 1e-2)
    np.testing.assert_allclose(p, ep, rtol=1e-12, atol=1e-14)
    assert adam.stats["traces"] == 1
    # forward and backward fused: the loss and its gradient from one pass over p
    assert len(adam.lower(p, m, v, t, 1e-2).plan.kernels) <= 2


def test_iterate_over_a_gradient_step_is_bit_identical_to_the_python_loop():
    p0, t = RNG.standard_normal(16).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
    z = np.zeros(16, np.float32)
    p, m, v = fl.iterate(adam, 50, p0, z, z, t, np.float32(1e-2), carry=("p", "m", "v"),
                         collect=False)
    q, mq, vq = p0, z, z
    for _ in range(50):
        q, mq, vq, _ = adam(q, mq, vq, t, np.float32(1e-2))
    assert np.array_equal(p, q) and np.array_equal(m, mq) and np.array_equal(v, vq)


def test_save_and_load_a_gradient_program(tmp_path):
    vg = fl.value_and_grad(loss)
    p, t = RNG.standard_normal(32), RNG.standard_normal(32)
    path = tmp_path / "vg.flp"
    vg.save(path, p, t)
    loaded = fl.load(path)
    q = RNG.standard_normal(32)
    value, g = loaded(q, t)
    np.testing.assert_allclose(g, grad_by_hand(q, t), rtol=1e-12)
    assert value == pytest.approx(loss(q, t), rel=1e-13)
    safe = fl.load(path, machine_code=False)
    np.testing.assert_allclose(safe(q, t)[1], g, rtol=0, atol=0)


def test_pickled_with_shipped_programs_replays_without_tracing():
    vg = fl.value_and_grad(loss)
    p, t = RNG.standard_normal(32), RNG.standard_normal(32)
    vg.with_programs(p, t)
    back = pickle.loads(pickle.dumps(vg))
    value, g = back(p, t)
    assert back.stats["traces"] == 0 and back.stats["programs_loaded"] == 1
    np.testing.assert_allclose(g, grad_by_hand(p, t), rtol=1e-12)
    # and by value without programs: traced again on first use
    plain = pickle.loads(pickle.dumps(fl.grad(lambda a: np.sum(a ** 3))))
    np.testing.assert_allclose(plain(p), 3 * p * p)


def test_dask_map_blocks_of_a_gradient():
    da = pytest.importorskip("dask.array")
    g = fl.grad(lambda a: np.sum(np.sin(a) * a))
    x = RNG.standard_normal(4000)
    dx = da.from_array(x, chunks=1000)
    got = da.map_blocks(g, dx, dtype=np.float64, meta=np.empty((0,), np.float64)).compute(
        scheduler="threads")
    np.testing.assert_allclose(got, np.cos(x) * x + np.sin(x), rtol=1e-13)
    assert g.stats["traces"] == 1


@pytest.mark.parametrize("backend", ["devsim", "null"])
def test_gradients_on_other_backends(backend):
    f = fl.compile(fl.value_and_grad(loss), backend=backend)
    p, t = RNG.standard_normal(40), RNG.standard_normal(40)
    value, g = f(p, t)
    if backend == "null":            # kernels that do nothing: structure only
        assert g.shape == p.shape and g.dtype == p.dtype
    else:
        np.testing.assert_allclose(g, grad_by_hand(p, t), rtol=1e-12)


def test_gradient_lowers_for_cuda_and_ptxas_assembles_it():
    from fastlaunch.backends.cuda import CUDABackend, find_libdevice, find_ptxas
    if find_ptxas() is None or find_libdevice() is None:
        pytest.skip("no ptxas or libdevice")
    p, t = RNG.standard_normal(1000).astype(np.float32), np.zeros(1000, np.float32)
    f = fl.compile(fl.value_and_grad(loss), backend="cuda")
    plan = f.lower(p, t).plan
    backend = CUDABackend(arch="sm_90")
    for k in plan.kernels:
        ck = backend.compile(k)
        assert ck.obj[:4] == b"\x7fELF"


def test_gradient_of_a_function_with_a_library_call_on_devsim():
    a = RNG.standard_normal((20, 30))
    b = RNG.standard_normal((30, 10))
    f = lambda x, y: np.sum(np.tanh(x @ y))        # noqa: E731
    ga, gb = fl.compile(fl.grad(f, argnums=(0, 1)), backend="devsim")(a, b)
    t = 1 - np.tanh(a @ b) ** 2
    np.testing.assert_allclose(ga, t @ b.T, rtol=1e-12)
    np.testing.assert_allclose(gb, a.T @ t, rtol=1e-12)


def test_dis_shows_peak_temporaries_with_and_without_the_gradient():
    import io
    f = fl.grad(lambda x, w: np.sum(np.tanh(np.tanh(x @ w) @ w.T)), argnums=1)
    out = io.StringIO()
    f.dis(np.ones((100, 20)), np.ones((20, 20)), file=out)
    line = [s for s in out.getvalue().splitlines() if "with the gradient" in s]
    assert len(line) == 1
    with_grad, alone = (int(w) for w in line[0].split() if w.isdigit())
    assert with_grad >= alone > 0
