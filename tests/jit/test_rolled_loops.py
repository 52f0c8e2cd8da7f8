"""Python loops inside a traced function rolled into one loop body (frontend/roll.py): results
bit-identical to the unrolled program, the first call's work independent of the step count,
and every loop that is not a repetition left unrolled."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.frontend import roll


@pytest.fixture
def unrolled(monkeypatch):
    """A compile that never rolls (the reference)."""
    def make(fn, **kw):
        f = fl.compile(fn, **kw)
        orig = f._trace

        def no_roll(*a, **k):
            monkeypatch.setattr(roll, "MIN_ITERATIONS", 10**9)
            try:
                return orig(*a, **k)
            finally:
                monkeypatch.undo()
        f._trace = no_roll
        return f
    return make


def _loops(f, *args) -> int:
    return f.lower(*args).graph.count(" = loop ")


def heat1d(u, k, steps):
    for _ in range(steps):
        u = u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
    return u


def heat2d(u, k, steps):
    for _ in range(steps):
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        u = u.copy()
        u[1:-1, 1:-1] += k * lap
    return u


def inplace_update(u, steps):
    for _ in range(steps):
        u[1:-1] = 0.5 * (u[:-2] + u[2:])
        u *= 0.99
    return np.sum(u)


def periodic_body(u, steps):
    for i in range(steps):
        u = np.sin(u) if i % 3 == 0 else u * 1.01      # repeats every 3 iterations
    return u


def changing_body(u, steps):
    for i in range(steps):
        u = u * (1 + i / 100)                          # a new constant every iteration
    return u


def nested_loops(u, steps):
    for _ in range(steps):
        for _ in range(3):
            u = u * 0.9 + 0.1
        u = np.sqrt(u)
    return u


def helper_calls(u, steps):
    for _ in range(steps):
        u = _helper(u)
    return u


def _helper(u):
    return u * 0.75 + np.roll(u, 1) * 0.25


def history(u, steps):
    hist = []
    for _ in range(steps):
        u = np.cos(u)
        hist.append(u)
    return np.stack(hist).sum(axis=0)


def two_carried(a, b, steps):
    for _ in range(steps):
        a, b = b, 0.5 * a + np.tanh(b)
    return a + b


CASES = [
    (heat1d, lambda rng: (rng.random(64), 0.1), 200, True),
    (heat2d, lambda rng: (rng.random((12, 10)), 0.05), 100, True),
    (inplace_update, lambda rng: (rng.random(40),), 150, True),
    (periodic_body, lambda rng: (rng.random(8),), 90, True),
    # a value read two iterations later (a, b = b, f(a, b)): rolled two iterations a body
    (two_carried, lambda rng: (rng.random(8), rng.random(8)), 120, True),
    (changing_body, lambda rng: (rng.random(8),), 90, False),
    (nested_loops, lambda rng: (rng.random(8),), 40, True),
    (helper_calls, lambda rng: (rng.random(8),), 40, True),
    (history, lambda rng: (rng.random(8),), 60, False),
]


@pytest.mark.parametrize("fn, make, steps, rolls", CASES, ids=[c[0].__name__ for c in CASES])
def test_rolled_equals_unrolled_bit_for_bit(fn, make, steps, rolls, unrolled):
    rng = np.random.default_rng(3)
    f = fl.compile(fn, static_argnames="steps")
    ref = unrolled(fn, static_argnames="steps")
    for _ in range(2):                       # the traced values, then new ones replayed
        args = make(rng)
        got = f(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args], steps=steps)
        want = ref(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args],
                   steps=steps)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got, fn(*[np.copy(a) if isinstance(a, np.ndarray) else a
                                            for a in args], steps), rtol=1e-12)
    assert (_loops(f, *args, steps) >= 1) == rolls


def test_first_call_work_does_not_grow_with_the_step_count():
    u = np.random.default_rng(0).random(64)
    kernels = {}
    for steps in (20, 200, 2000):
        f = fl.compile(heat1d, static_argnums=2)
        kernels[steps] = len(f.lower(u, 0.1, steps).plan.compiled_kernels())
    assert kernels[20] == kernels[200] == kernels[2000]
    f = fl.compile(heat1d, static_argnums=2)
    f(u, 0.1, 500)
    assert "a Python loop of 499 identical iterations rolled" in f.stats["history"][0].reason


def test_a_training_loop_with_a_gradient_per_step_rolls():
    def loss(w, x, y):
        return np.mean((np.tanh(x @ w) - y) ** 2)

    def train(w, x, y, steps):
        for _ in range(steps):
            _, g = fl.value_and_grad(loss)(w, x, y)
            w = w - 0.1 * g
        return w
    rng = np.random.default_rng(1)
    x, y, w = rng.standard_normal((20, 3)), rng.standard_normal(20), rng.standard_normal(3)
    f = fl.compile(train, static_argnums=3)
    got = f(w, x, y, 100)
    want = w
    for _ in range(100):
        t = np.tanh(x @ want)
        want = want - 0.1 * (x.T @ (2 * (t - y) * (1 - t * t)) / 20)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert _loops(f, w, x, y, 100) == 1


def test_a_rolled_loop_differentiates():
    target = np.linspace(0, 1, 16)

    def loss(u, k):
        return np.sum((heat1d(u, k, 100) - target) ** 2)
    u = np.random.default_rng(2).random(16)
    f = fl.grad(loss, argnums=(0, 1))
    with warnings.catch_warnings():
        # rolled before differentiation: no unrolled backward pass of 100 steps
        warnings.simplefilter("error", fl.UnrolledLoopWarning)
        g = f(u, 0.1)
    eps = 1e-6
    d = np.random.default_rng(3).standard_normal(16)
    fd = (loss(u + eps * d, 0.1) - loss(u - eps * d, 0.1)) / (2 * eps)
    assert np.sum(g[0] * d) == pytest.approx(fd, rel=1e-6)
    fdk = (loss(u, 0.1 + eps) - loss(u, 0.1 - eps)) / (2 * eps)
    assert g[1] == pytest.approx(fdk, rel=1e-6)
    assert "a Python loop of 98 identical iterations rolled" in f.stats["history"][0].reason
    assert _loops(f, u, 0.1) >= 4           # the forward loop and the backward pass's loops
