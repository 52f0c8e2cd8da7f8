"""Gradients through fl.iterate: fixed-step loops, until loops, collected results in the
loss, steps that differentiate themselves (meta-gradients), several carried values, saved
programs and devsim; every gradient against central differences of the NumPy loop."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .fd import check_gradient

RNG = np.random.default_rng(11)


def heat_step(u, k):
    return u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))


def heat_numpy(u0, k, n, target):
    u = u0
    for _ in range(n):
        u = heat_step(u, k)
    return np.sum((u - target) ** 2)


def heat_fl(n, target, checkpoints=None):
    def loss(u0, k):
        u = fl.iterate(heat_step, n, u0, k, carry=("u",), collect=False,
                       checkpoints=checkpoints)
        return np.sum((u - target) ** 2)
    return loss


@pytest.mark.parametrize("n, checkpoints", [(1, None), (2, None), (7, None), (36, None),
                                            (37, None), (50, 5), (50, 1), (50, 50), (101, 3)])
def test_fixed_step_loop(n, checkpoints):
    target = np.sin(np.linspace(0, 3, 12))
    u0 = np.cos(np.linspace(0, 2, 12))
    g = fl.value_and_grad(heat_fl(n, target, checkpoints), argnums=(0, 1))
    ref = lambda a, b: heat_numpy(a, b, n, target)      # noqa: E731
    for k in (0.1, 0.23):
        value, grads = g(u0, k)
        assert value == pytest.approx(ref(u0, k), rel=1e-12)
        check_gradient(ref, grads, [u0, k], (0, 1), RNG)
        u0 = u0 + 0.1                                   # new values, replayed
    assert g.stats["traces"] == 1


def _fp_step(x, a, b):
    nx = np.cos(a * x) + b
    return nx, np.max(np.abs(nx - x))


def test_until_loop_runs_its_backward_pass_for_the_iterations_it_ran():
    def loss(a, b):
        x = fl.iterate(_fp_step, 500, np.zeros(3), a, b, carry=("x",), collect=False,
                       until=lambda r: r < 1e-9)
        return np.sum(x ** 2)

    def ref(a, b):
        x = np.zeros(3)
        for _ in range(500):
            x, r = _fp_step(x, a, b)
            if r < 1e-9:
                break
        return np.sum(x ** 2)
    g = fl.grad(loss, argnums=(0, 1))
    for a in (np.array([0.5, 0.7, 0.9]), np.array([0.2, 0.4, 0.6])):
        b = np.array([0.1, 0.2, 0.3])
        check_gradient(ref, g(a, b), [a, b], (0, 1), RNG, rtol=1e-5)


def _collect_step(u, k):
    nu = u * (1 - k) + 0.1 * np.sin(u)
    return nu, np.sum(nu ** 2)


def test_collected_results_in_the_loss():
    def loss(u0, k):
        u, e = fl.iterate(_collect_step, 13, u0, k, carry=("u",))
        return np.sum(u) + np.sum(e * np.arange(13))

    def ref(u0, k):
        u, total = u0, 0.0
        for i in range(13):
            u, e = _collect_step(u, k)
            total += e * i
        return np.sum(u) + total
    args = [np.linspace(0, 1, 5), 0.2]
    check_gradient(ref, fl.grad(loss, argnums=(0, 1))(*args), args, (0, 1), RNG)


X = RNG.standard_normal((20, 3))
Y = RNG.standard_normal(20)


def _inner_loss(w, x, y):
    return np.mean((x @ w - y) ** 2)


def _gd_step(w, lr):
    _, g = fl.value_and_grad(_inner_loss)(w, X, Y)
    return w - lr * g


def test_meta_gradient_through_gradient_descent():
    def meta(w0, lr):
        w = fl.iterate(_gd_step, 30, w0, lr, carry=("w",), collect=False)
        return _inner_loss(w, X, Y)

    def ref(w0, lr):
        w = w0
        for _ in range(30):
            w = w - lr * 2 * X.T @ (X @ w - Y) / 20
        return _inner_loss(w, X, Y)
    args = [np.zeros(3), 0.05]
    check_gradient(ref, fl.grad(meta, argnums=(0, 1))(*args), args, (0, 1), RNG)


def _oscillator(x, v, n, dt):
    return x + dt * v, v - dt * x, n + 1


def test_several_carried_values_one_of_them_an_integer():
    def loss(x0, v0, dt):
        x, v, n = fl.iterate(_oscillator, 50, x0, v0, np.int64(0), dt, carry=(0, 1, 2),
                             collect=False)
        return np.sum(x ** 2) + np.sum(v) + n * 0.0

    def ref(x0, v0, dt):
        x, v = x0, v0
        for _ in range(50):
            x, v = x + dt * v, v - dt * x
        return np.sum(x ** 2) + np.sum(v)
    args = [np.ones(4), np.zeros(4), 0.05]
    check_gradient(ref, fl.grad(loss, argnums=(0, 1, 2))(*args), args, (0, 1, 2), RNG)


def test_forward_values_of_a_loop_inside_a_compiled_function():
    target = np.zeros(12)
    f = fl.compile(heat_fl(25, target))
    u0 = np.cos(np.linspace(0, 2, 12))
    assert f(u0, 0.2) == pytest.approx(heat_numpy(u0, 0.2, 25, target), rel=1e-13)
    collected = fl.compile(lambda u, k: fl.iterate(_collect_step, 6, u, k, carry=("u",)))
    u, e = collected(u0, 0.1)
    want_u, want_e = u0, []
    for _ in range(6):
        want_u, ei = _collect_step(want_u, 0.1)
        want_e.append(ei)
    np.testing.assert_allclose(u, want_u, rtol=1e-14)
    np.testing.assert_allclose(e, want_e, rtol=1e-14)


def test_a_differentiated_loop_saves_and_loads(tmp_path):
    target = np.zeros(12)
    g = fl.value_and_grad(heat_fl(20, target), argnums=(0, 1))
    u0 = np.cos(np.linspace(0, 2, 12))
    g.save(tmp_path / "heat.flp", u0, 0.2)
    loaded = fl.load(tmp_path / "heat.flp")
    want = g(u0 + 1, 0.1)
    got = loaded(u0 + 1, 0.1)
    assert got[0] == want[0]
    np.testing.assert_array_equal(got[1][0], want[1][0])
    assert got[1][1] == want[1][1]


def test_a_differentiated_loop_on_devsim():
    target = np.zeros(12)
    u0 = np.cos(np.linspace(0, 2, 12))
    dev = fl.compile(fl.grad(heat_fl(20, target), argnums=(0, 1)), backend="devsim")
    cpu = fl.grad(heat_fl(20, target), argnums=(0, 1))
    for a, b in zip(dev(u0, 0.2), cpu(u0, 0.2)):
        np.testing.assert_allclose(a, b, rtol=1e-13)


def test_jvp_through_a_loop():
    target = np.zeros(12)
    u0 = np.cos(np.linspace(0, 2, 12))
    t = RNG.standard_normal(12)
    value, tangent = fl.jvp(heat_fl(15, target), (u0, 0.2), (t, 0.5))
    ref = heat_numpy
    eps = 1e-6
    fd = (ref(u0 + eps * t, 0.2 + eps * 0.5, 15, target) -
          ref(u0 - eps * t, 0.2 - eps * 0.5, 15, target)) / (2 * eps)
    assert value == pytest.approx(ref(u0, 0.2, 15, target), rel=1e-13)
    assert tangent == pytest.approx(fd, rel=1e-6)


def test_hessian_vector_product_through_a_loop():
    # forward mode over the gradient: through the checkpointed backward loops
    target = np.zeros(12)
    u0 = np.cos(np.linspace(0, 2, 12))
    v = RNG.standard_normal(12)
    loss = heat_fl(30, target)
    hv = fl.jvp(fl.grad(loss), (u0, 0.2), (v, 0.0))[1]
    g = fl.grad(loss)
    eps = 1e-5
    fd = (g(u0 + eps * v, 0.2) - g(u0 - eps * v, 0.2)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-9)


def test_a_gradient_of_a_gradient_through_a_loop_is_refused_clearly():
    target = np.zeros(12)
    u0 = np.cos(np.linspace(0, 2, 12))
    with pytest.raises(fl.TracingError, match="gradient of a gradient through fl.iterate"):
        fl.grad(lambda a: np.sum(fl.grad(heat_fl(5, target))(a, 0.2)))(u0)
