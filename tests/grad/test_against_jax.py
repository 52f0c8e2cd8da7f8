"""Where JAX is installed (`pip install jax`, not a test requirement), gradients compared with
jax.grad on the same functions, and a fixed-step loop with jax.lax.fori_loop."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(5)


def _pair(src):
    """The same source run with np as NumPy (for fl) and as jax.numpy (for JAX)."""
    scope_np, scope_jax = {"np": np}, {"np": jnp}
    exec(src, scope_np)
    exec(src, scope_jax)
    return scope_np["f"], scope_jax["f"]


SOURCES = [
    "def f(x, w):\n    return np.mean((np.tanh(x @ w) - 0.5) ** 2)",
    "def f(x, w):\n    return np.sum(np.maximum(x @ w, 0.0) ** 2) + np.log(np.sum(np.exp(w)))",
    "def f(x, w):\n    return np.sum(np.sort(x, axis=1)[:, 1:] * np.cumsum(x, axis=1)[:, :-1])"
    " + np.prod(w[0])",
    "def f(x, w):\n    return np.linalg.slogdet(x.T @ x + np.eye(3))[1] + np.sum(np.linalg.inv("
    "w[:, :3].T @ w[:, :3] + np.eye(3)))",
]


@pytest.mark.parametrize("src", SOURCES)
def test_gradient_equals_jax_grad(src):
    f_np, f_jax = _pair(src)
    x = RNG.standard_normal((6, 3))
    w = RNG.standard_normal((3, 4))
    ours = fl.grad(f_np, argnums=(0, 1))(x, w)
    theirs = jax.grad(f_jax, argnums=(0, 1))(jnp.asarray(x), jnp.asarray(w))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-10, atol=1e-12)


def test_loop_gradient_equals_jax_fori_loop():
    def step(u, k):
        return u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))

    def ours(u0, k):
        return np.sum(fl.iterate(step, 300, u0, k, carry=("u",), collect=False) ** 2)

    def theirs(u0, k):
        body = lambda i, u: u + k * (jnp.roll(u, 1) - 2 * u + jnp.roll(u, -1))   # noqa: E731
        return jnp.sum(jax.lax.fori_loop(0, 300, body, u0) ** 2)
    u0 = np.cos(np.linspace(0, 3, 32))
    a = fl.grad(ours, argnums=(0, 1))(u0, 0.2)
    b = jax.grad(theirs, argnums=(0, 1))(jnp.asarray(u0), 0.2)
    np.testing.assert_allclose(a[0], np.asarray(b[0]), rtol=1e-10)
    assert a[1] == pytest.approx(float(b[1]), rel=1e-10)
