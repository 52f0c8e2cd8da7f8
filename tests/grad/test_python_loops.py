"""Python loops inside a differentiated function, rolled before the backward pass is built
(roll.roll_traced, grad.py): the backward pass is a checkpointed loop (loops.loop_adjoint),
values and gradients equal those of the unrolled program, gradients agree with central
differences of the NumPy function, and the first call's work does not grow with the step
count."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.frontend import roll

from .fd import check_gradient

RNG = np.random.default_rng(29)


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


def inplace_argument(u, k, steps):
    for _ in range(steps):               # updates the differentiated argument itself
        u[1:-1] = 0.5 * (u[:-2] + u[2:]) * k
        u *= 0.99
    return u


def inplace_copy(u, k, steps):
    v = u.copy()
    for _ in range(steps):
        v[1:-1] += k * (v[:-2] - 2 * v[1:-1] + v[2:])
        v[0] = v[1] * k
    return v


def periodic_body(u, k, steps):
    for i in range(steps):
        u = np.sin(u) * k if i % 3 == 0 else u * 1.01      # repeats every 3 iterations
    return u


def changing_body(u, k, steps):
    for i in range(steps):
        u = u * (1 + i / 100) * k                           # a new constant every iteration
    return u


def prefix_then_repeat(u, k, steps):
    for i in range(steps):
        if i < 4:                        # rolled only in the repeating part
            u = np.tanh(u)
        u = u + k * np.cos(u)
    return u


def two_carried(u, k, steps):
    a, b = u, u * 0.5
    for _ in range(steps):
        a, b = b, k * a + np.tanh(b)
    return a + b


def nested_loops(u, k, steps):
    for _ in range(steps):
        for _ in range(3):
            u = u * k + 0.1
        u = np.sqrt(u * u + 1.0)
    return u


# (function, initial state, diffusivity-like scalar, steps, rolled, the state's gradient
# bit-identical): a loop
# whose body calls a transcendental function may differ from the unrolled program in the
# last bits, where the unrolled program's fused kernels vectorise it differently (libmvec
# against libm for a short array's tail, as for fl.compile's rolled loops)
CASES = [
    (heat1d, lambda: RNG.random(16), 0.1, 40, True, True),
    (heat2d, lambda: RNG.random((6, 7)), 0.05, 40, True, True),
    (inplace_argument, lambda: RNG.random(10), 0.9, 40, True, True),
    (inplace_copy, lambda: RNG.random(9), 0.2, 40, True, True),
    (periodic_body, lambda: RNG.random(5), 0.9, 60, True, False),
    (changing_body, lambda: RNG.random(5), 0.9, 40, False, True),
    (prefix_then_repeat, lambda: RNG.random(5), 0.3, 40, True, False),
    (two_carried, lambda: RNG.random(6), 0.4, 40, True, False),
    (nested_loops, lambda: RNG.random(6), 0.9, 24, True, True),
]


def _loss(fn, steps, target):
    def loss(u, k):
        return np.sum((fn(u, k, steps) - target) ** 2)
    loss.__name__ = f"loss_{fn.__name__}"
    return loss


def _unrolled(make, *args):
    """The reference: the transformed function traced with rolling switched off."""
    old = roll.MIN_ITERATIONS
    roll.MIN_ITERATIONS = 10 ** 9
    try:
        f = make()
        return f, f(*args)
    finally:
        roll.MIN_ITERATIONS = old


def _loop_count(f, *args) -> int:
    return len(f.lower(*args).program.loops())


@pytest.mark.parametrize("fn, make, k, steps, rolls, exact", CASES,
                         ids=[c[0].__name__ for c in CASES])
def test_gradient_of_a_rolled_loop_equals_the_unrolled_programs(fn, make, k, steps, rolls,
                                                                 exact):
    u0 = make()
    target = np.linspace(0, 1, u0.size).reshape(u0.shape)
    loss = _loss(fn, steps, target)
    f = fl.value_and_grad(loss, argnums=(0, 1))
    ref, (v_ref, (du_ref, dk_ref)) = _unrolled(
        lambda: fl.value_and_grad(loss, argnums=(0, 1)), u0.copy(), k)
    for trial in range(2):               # the traced values, then new ones replayed
        u = u0 + 0.05 * trial
        v, (du, dk) = f(u.copy(), k)
        if trial:
            v_ref, (du_ref, dk_ref) = ref(u.copy(), k)
        # the loss sums the final state: a reduction the unrolled program fuses with its
        # last steps, the rolled one after the loop (the state itself is bit-identical)
        assert v == pytest.approx(v_ref, rel=1e-14)
        if exact:
            np.testing.assert_array_equal(du, du_ref)
        else:
            np.testing.assert_allclose(du, du_ref, rtol=1e-13, atol=1e-300)
        # the scalar's gradient sums a reduction per step, whose kernels the unrolled
        # program fuses with their neighbours and the loop body does not: last bits
        assert dk == pytest.approx(dk_ref, rel=1e-13)
        assert v == pytest.approx(loss(u.copy(), k), rel=1e-12)
        check_gradient(lambda a, b: loss(np.array(a, copy=True), b), (du, dk), [u, k],
                       (0, 1), RNG)
    assert f.stats["traces"] == 1
    # rolled: the forward loop and the backward pass's three (segments, recompute, step)
    assert (_loop_count(f, u0, k) >= 4) == rolls
    assert ("identical iterations rolled" in f.stats["history"][0].reason) == rolls
    assert _loop_count(ref, u0, k) == 0


def test_a_long_loop_under_grad_is_fast_and_does_not_warn():
    """100 steps of the 1-D heat equation: unrolled, a backward pass of 100 copies (tens of
    seconds to compile, and an UnrolledLoopWarning); rolled, one loop of each kind."""
    target = np.linspace(0, 1, 16)
    loss = _loss(heat1d, 100, target)
    u = RNG.random(16)
    f = fl.grad(loss, argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", fl.UnrolledLoopWarning)
        g = f(u, 0.1)
    check_gradient(loss, g, [u, 0.1], (0, 1), RNG)
    assert "a Python loop of 98 identical iterations rolled" in f.stats["history"][0].reason
    assert f.stats["history"][0].kernels <= 30


def test_first_call_work_does_not_grow_with_the_step_count():
    """Kernels, bytecode instructions and graph nodes of the first call's program are the
    same (up to the segment arithmetic of a step count without a divisor near its square
    root) for 20 and 2000 steps; the temporaries grow like sqrt(steps), not like steps."""
    target = np.linspace(0, 1, 64)
    u = RNG.random(64)
    work = {}
    for steps in (20, 200, 2000):
        f = fl.value_and_grad(_loss(heat1d, steps, target), argnums=(0, 1))
        low = f.lower(u, 0.1)
        work[steps] = (len(low.plan.compiled_kernels()), len(list(low.program.instructions())),
                       low.graph.count("\n"), low.program.peak_temp_bytes())
    k20, i20, n20, p20 = work[20]
    for steps in (200, 2000):
        k, i, n, p = work[steps]
        assert k <= k20 + 8 and i <= i20 + 60 and n <= n20 + 30, (steps, work)
    state = 64 * 8
    # a checkpoint every K ~ sqrt(n) steps and one segment's states: far below n states
    assert work[2000][3] - p20 < 2 * int(2 * np.sqrt(2000) + 4) * state, work
    assert work[2000][3] < 2000 * state / 5, work


def test_vjp_of_a_rolled_loop():
    u = RNG.random(12)
    ct = RNG.standard_normal(12)

    def f(u):
        return heat1d(u, 0.2, 50)
    out, pullback = fl.vjp(f, u)
    (got,) = pullback(ct)
    ref, _ = _unrolled(lambda: fl.compile(lambda u, ct: fl.vjp(f, u)[1](ct)), u, ct)
    np.testing.assert_array_equal(got, ref(u, ct)[0])
    np.testing.assert_allclose(out, f(u), rtol=1e-12)
    check_gradient(lambda a: np.sum(f(a) * ct), (got,), [u], (0,), RNG)


def test_aux_values_after_the_loop_and_in_its_middle():
    """An aux result of the last state is the rolled loop's; one holding every state (a
    middle iteration's value read after the loop) leaves the loop unrolled, same values."""
    u = RNG.random(8)
    target = np.linspace(0, 1, 8)

    def last(u, k):
        v = heat1d(u, k, 30)
        return np.sum((v - target) ** 2), v

    def every(u, k):
        hist = []
        for _ in range(30):
            u = u + k * (np.roll(u, 1) - 2 * u + np.roll(u, -1))
            hist.append(u)
        return np.sum((u - target) ** 2), np.stack(hist)
    f = fl.value_and_grad(last, has_aux=True)
    (v, aux), g = f(u, 0.1)
    np.testing.assert_allclose(aux, heat1d(u, 0.1, 30), rtol=1e-13)
    assert _loop_count(f, u, 0.1) >= 4
    h = fl.value_and_grad(every, has_aux=True)
    (v2, hist), g2 = h(u, 0.1)
    assert v2 == pytest.approx(v, rel=1e-14) and hist.shape == (30, 8)
    np.testing.assert_array_equal(hist[-1], aux)
    np.testing.assert_allclose(g2, g, rtol=1e-13)
    assert _loop_count(h, u, 0.1) == 0
    check_gradient(lambda a, b: last(a, b)[0], (g,), [u, 0.1], (0,), RNG)


def test_in_place_updates_of_the_argument_reach_the_caller():
    u = RNG.random(10)
    a, b = u.copy(), u.copy()

    def loss(u, k):
        return np.sum(inplace_argument(u, k, 30) ** 2)
    g = fl.grad(loss)(a, 0.9)
    want = loss(b, 0.9)                  # NumPy updates b in place
    np.testing.assert_array_equal(a, b)
    assert np.sum(a ** 2) == pytest.approx(want, rel=1e-12)
    check_gradient(lambda x, k: loss(np.array(x, copy=True), k), (g,), [u, 0.9], (0,), RNG)


def test_grad_inside_a_compiled_step_rolls_the_loss_loop():
    target = np.linspace(0, 1, 12)
    loss = _loss(heat1d, 40, target)

    def step(u, k):
        value, g = fl.value_and_grad(loss)(u, k)
        return u - 0.1 * g, value
    f = fl.compile(step)
    u = RNG.random(12)
    new, value = f(u, 0.1)
    ref, (want_new, want_value) = _unrolled(lambda: fl.compile(step), u, 0.1)
    assert value == pytest.approx(want_value, rel=1e-14)
    np.testing.assert_allclose(new, want_new, rtol=1e-14)
    assert _loop_count(f, u, 0.1) >= 4


def test_second_derivatives_through_a_python_loop():
    """grad of grad: the inner differentiation leaves its loop unrolled (backward loops are
    not differentiated again in reverse mode); jvp of grad (a Hessian-vector product) goes
    through the rolled loop in forward mode.  Both against central differences."""
    def f(x):
        for _ in range(20):
            x = np.sin(x) * 0.9 + 0.1 * x
        return np.sum(x ** 2)
    x = RNG.random(4)
    d = RNG.standard_normal(4)
    eps = 1e-5
    g = fl.grad(f)
    fd = (g(x + eps * d) - g(x - eps * d)) / (2 * eps)
    _, hvp = fl.jvp(g, (x,), (d,))
    np.testing.assert_allclose(hvp, fd, rtol=1e-6, atol=1e-8)
    assert _loop_count(fl.grad(f), x) >= 4

    def h(x):
        return np.sum(fl.grad(f)(x) ** 2)
    gg = fl.grad(h)(x)
    eps = 1e-6
    num = (h(x + eps * d) - h(x - eps * d)) / (2 * eps)
    assert np.sum(gg * d) == pytest.approx(num, rel=1e-6, abs=1e-9)


def test_an_argument_updated_in_place_and_not_differentiated():
    """buf is written in every iteration: its final value (written back to the caller's
    array) is the rolled loop's, and no unrolled iteration is left in the program."""
    def loss(u, buf, k):
        for _ in range(30):
            buf[1:-1] = buf[1:-1] * 0.5 + k * u[1:-1]
            u = u * 0.9 + 0.01 * buf
        return np.sum(u ** 2)
    u, buf = RNG.random(8), RNG.random(8)
    mine, theirs = buf.copy(), buf.copy()
    f = fl.grad(loss)
    g = f(u, mine, 0.3)
    want = loss(u, theirs, 0.3)
    np.testing.assert_allclose(mine, theirs, rtol=1e-13)
    assert want > 0
    check_gradient(lambda a: loss(a, buf.copy(), 0.3), (g,), [u], (0,), RNG)
    low = f.lower(u, buf, 0.3)
    assert len(low.program.loops()) >= 4
    assert low.graph.count("\n") < 150, low.graph      # 30 unrolled steps would be ~300
