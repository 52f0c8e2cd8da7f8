"""fl.grad, value_and_grad, vjp, jvp, stop_gradient, custom rules: JAX's conventions, checked
against closed forms."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fastlaunch as fl

RNG = np.random.default_rng(0)
X = RNG.standard_normal(5)
Y = RNG.standard_normal(5)


def f_xy(a, b):
    return np.sum(np.sin(a) * b)


def test_argnums_int_gives_one_gradient_tuple_gives_a_tuple():
    g = fl.grad(f_xy)(X, Y)
    np.testing.assert_allclose(g, np.cos(X) * Y, rtol=1e-14)
    ga, gb = fl.grad(f_xy, argnums=(0, 1))(X, Y)
    np.testing.assert_allclose(ga, np.cos(X) * Y, rtol=1e-14)
    np.testing.assert_allclose(gb, np.sin(X), rtol=1e-14)
    (gb2,) = fl.grad(f_xy, argnums=(1,))(X, Y)
    np.testing.assert_allclose(gb2, np.sin(X), rtol=1e-14)
    np.testing.assert_allclose(fl.grad(f_xy, argnums=-1)(X, Y), np.sin(X), rtol=1e-14)


def test_value_and_grad_and_has_aux():
    value, g = fl.value_and_grad(f_xy)(X, Y)
    assert value == pytest.approx(f_xy(X, Y), rel=1e-14)
    (value, aux), g = fl.value_and_grad(lambda a: (np.sum(a ** 2), {"max": a.max()}),
                                        has_aux=True)(X)
    assert aux["max"] == X.max() and value == pytest.approx(np.sum(X ** 2))
    g, aux = fl.grad(lambda a: (np.sum(a ** 2), a * 3), has_aux=True)(X)
    np.testing.assert_allclose(g, 2 * X)
    np.testing.assert_allclose(aux, 3 * X)


@dataclasses.dataclass
class Params:
    w: np.ndarray
    b: float


def test_gradients_follow_the_structure_of_the_arguments():
    g = fl.grad(lambda p: np.sum(p["w"] ** 2) + p["b"] ** 3)({"w": X, "b": 2.0})
    assert set(g) == {"w", "b"}
    np.testing.assert_allclose(g["w"], 2 * X)
    assert g["b"] == pytest.approx(12.0)
    g = fl.grad(lambda p: np.sum(p[0] * p[1]))((X, Y))
    assert isinstance(g, tuple)
    np.testing.assert_allclose(g[0], Y)
    g = fl.grad(lambda p: np.sum(p[0] * p[1]))([X, Y])
    assert isinstance(g, list)
    g = fl.grad(lambda p: np.sum(np.tanh(p.w)) * p.b)(Params(X, np.asarray(2.0)))
    assert isinstance(g, Params)
    np.testing.assert_allclose(g.w, 2 * (1 - np.tanh(X) ** 2))
    assert g.b == pytest.approx(np.sum(np.tanh(X)))
    # a float attribute is static (part of the signature): refused, never a zero gradient
    with pytest.raises(TypeError, match="attribute 'b' of its Params is a float"):
        fl.grad(lambda p: np.sum(np.tanh(p.w)) * p.b)(Params(X, 2.0))


def test_gradient_dtypes_are_the_arguments():
    x32 = X.astype(np.float32)
    assert fl.grad(lambda a: np.sum(a * a))(x32).dtype == np.float32
    # a float64 loss from float32 inputs
    assert fl.grad(lambda a: np.sum(a.astype(np.float64) ** 2))(x32).dtype == np.float32
    g = fl.grad(lambda a, s: np.sum(a * s ** 2), argnums=1)(X, 3.0)
    assert isinstance(g, np.floating) and g == pytest.approx(6 * np.sum(X))


@pytest.mark.parametrize("args, argnums, match", [
    ((X, 3), 1, r"argument 1 \('n'\) is int64"),
    ((np.arange(3), 1), 0, r"argument 0 \('a'\) is int64"),
    ((X, np.ones(2, bool)), 1, r"argument 1 \('n'\) is bool"),
])
def test_integer_and_bool_arguments_have_no_gradient(args, argnums, match):
    with pytest.raises(TypeError, match=match):
        fl.grad(lambda a, n: np.sum(a) * np.sum(n), argnums=argnums)(*args)


def test_bad_uses_name_what_was_expected():
    with pytest.raises(TypeError, match=r"returns a scalar.*shape \(5,\)"):
        fl.grad(lambda a: a * 2)(X)
    with pytest.raises(TypeError, match="floating-point value, got int64"):
        fl.grad(lambda a: np.argmax(a))(X)
    with pytest.raises(TypeError, match="argnums must be an int"):
        fl.grad(f_xy, argnums="a")
    with pytest.raises(ValueError, match="repeats"):
        fl.grad(f_xy, argnums=(0, 0))
    with pytest.raises(ValueError, match="argnums names argument 3"):
        fl.grad(f_xy, argnums=3)(X, Y)
    with pytest.raises(TypeError, match="expected a function"):
        fl.grad(3)
    with pytest.raises(TypeError, match="has_aux=True.*pair"):
        fl.grad(lambda a: np.sum(a), has_aux=True)(X)


def test_vjp_and_jvp():
    y, pullback = fl.vjp(lambda a: np.sin(a) * 2, X)
    np.testing.assert_allclose(y, 2 * np.sin(X))
    (ct,) = pullback(np.ones(5))
    np.testing.assert_allclose(ct, 2 * np.cos(X), rtol=1e-14)
    ct_a, ct_b = fl.vjp(lambda a, b: (a * b, np.sum(a)), X, Y)[1]((np.ones(5), 2.0))
    np.testing.assert_allclose(ct_a, Y + 2)
    np.testing.assert_allclose(ct_b, X)
    y, t = fl.jvp(lambda a: np.sin(a) * 2, (X,), (np.ones(5),))
    np.testing.assert_allclose(t, 2 * np.cos(X), rtol=1e-14)
    y, t = fl.jvp(lambda a, b: np.sum(a * b), (X, Y), (Y, X))
    assert t == pytest.approx(np.sum(Y * Y) + np.sum(X * X))


def test_higher_order_by_composition():
    f = lambda a: np.sin(a) * a       # noqa: E731
    d2 = fl.grad(fl.grad(f))(1.5)
    assert d2 == pytest.approx(2 * np.cos(1.5) - 1.5 * np.sin(1.5), rel=1e-13)
    # Hessian-vector product as jvp of grad
    hv = fl.jvp(fl.grad(lambda a: np.sum(a ** 3)), (X,), (Y,))[1]
    np.testing.assert_allclose(hv, 6 * X * Y, rtol=1e-13)
    d3 = fl.grad(fl.grad(fl.grad(lambda a: a ** 4)))(2.0)
    assert d3 == pytest.approx(48.0)


def test_a_closure_over_a_traced_value_is_a_constant():
    # perturbation confusion: the inner derivative must not see the outer variable's use
    @fl.compile
    def f(x):
        return fl.grad(lambda y: np.sum(x * y))(x)      # d/dy (x y) = x, not 2x
    np.testing.assert_allclose(f(X), X)


def test_stop_gradient():
    g = fl.grad(lambda a: np.sum(a * fl.stop_gradient(a)))(X)
    np.testing.assert_allclose(g, X)
    assert fl.stop_gradient(X) is X


def test_custom_vjp_straight_through_and_clipping():
    @fl.custom_vjp
    def clipgrad(a):
        return a
    clipgrad.defvjp(lambda a: (a, None), lambda res, ct: (np.clip(ct, -1, 1),))
    np.testing.assert_allclose(fl.grad(lambda a: np.sum(clipgrad(a) * 5))(X), np.ones(5))
    np.testing.assert_allclose(clipgrad(X), X)           # called directly: the function

    @fl.custom_vjp
    def round_ste(a):
        return np.round(a)
    round_ste.defvjp(lambda a: (np.round(a), None), lambda res, ct: (ct,))
    np.testing.assert_allclose(fl.grad(lambda a: np.sum(round_ste(a) * Y))(X), Y)


def test_custom_jvp_stable_log_sum_exp():
    @fl.custom_jvp
    def lse(a):
        m = np.max(a)
        return m + np.log(np.sum(np.exp(a - m)))

    @lse.defjvp
    def lse_jvp(primals, tangents):
        (a,), (t,) = primals, tangents
        out = lse(a)
        return out, np.sum(np.exp(a - out) * t)
    big = X * 400          # exp overflows without the shift
    g = fl.grad(lambda a: lse(a) * 2)(big)
    np.testing.assert_allclose(g, 2 * np.exp(big - big.max()) / np.sum(np.exp(big - big.max())),
                               rtol=1e-12)


def test_custom_vjp_implicit_solve():
    # x solves A x = b; the backward rule solves with A^T instead of differentiating a solver
    @fl.custom_vjp
    def solve(a, b):
        return np.linalg.solve(a, b)

    def fwd(a, b):
        x = np.linalg.solve(a, b)
        return x, (a, x)

    def bwd(res, ct):
        a, x = res
        gb = np.linalg.solve(a.T, ct)
        return -np.outer(gb, x), gb
    solve.defvjp(fwd, bwd)
    a = RNG.standard_normal((4, 4)) + 4 * np.eye(4)
    b = RNG.standard_normal(4)
    ga, gb = fl.grad(lambda a_, b_: np.sum(solve(a_, b_) ** 2), argnums=(0, 1))(a, b)
    ea, eb = fl.grad(lambda a_, b_: np.sum(np.linalg.solve(a_, b_) ** 2), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, ea, rtol=1e-10)
    np.testing.assert_allclose(gb, eb, rtol=1e-10)


def test_in_place_writes_to_a_differentiated_argument_reach_the_caller():
    def f(a):
        a *= 2            # NumPy: the caller's array is doubled
        return np.sum(a ** 2)
    x = X.copy()
    g = fl.grad(f)(x)
    np.testing.assert_allclose(x, 2 * X)
    np.testing.assert_allclose(g, 8 * X)     # d/da sum((2a)^2) at the original a


def test_replays_without_tracing_again():
    g = fl.value_and_grad(f_xy)
    for _ in range(3):
        g(RNG.standard_normal(5), RNG.standard_normal(5))
    assert g.stats["traces"] == 1


def test_the_docstring_examples_run():
    import doctest
    import sys
    result = doctest.testmod(sys.modules["fastlaunch.grad"])
    assert result.attempted >= 10 and result.failed == 0
