"""Every adjoint rule against central finite differences of NumPy's own function, on the
traced values and on new values replayed through the same compiled program."""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest
import scipy.special as sp

import fastlaunch as fl
from fastlaunch.ir import adjoint
from fastlaunch.ir.graph import Op

from .fd import check_gradient


def u(lo, hi, *shape):
    return lambda rng: rng.uniform(lo, hi, shape)


def n(*shape):
    return lambda rng: rng.standard_normal(shape)


def spd(m, batch=()):
    def make(rng):
        a = rng.standard_normal(batch + (m, m))
        return a @ np.swapaxes(a, -1, -2) + m * np.eye(m)
    return make


def spread(m):
    """A symmetric matrix with well separated eigenvalues: eigenvector derivatives (1 / gaps)
    stay well conditioned for finite differences."""
    def make(rng):
        q, _ = np.linalg.qr(rng.standard_normal((m, m)))
        return (q * np.linspace(1.0, 3.0 * m, m)) @ q.T
    return make


W7 = np.arange(1.0, 8.0)
# another draw of every case: FL_GRAD_SEED=k
SEED = int(os.environ.get("FL_GRAD_SEED", 0))
UNARY = ["sin", "cos", "tan", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
         "cbrt", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arctanh",
         "absolute", "reciprocal", "square", "negative", "deg2rad", "rad2deg", "fabs"]
BINARY = ["add", "subtract", "multiply", "divide", "power", "arctan2", "hypot", "maximum",
          "minimum", "fmax", "fmin", "logaddexp", "logaddexp2", "mod", "fmod", "copysign",
          "float_power"]


def _inplace(a, b):
    z = a * 1.0
    z[2:5] *= 3
    z += b
    z[np.array([1, 1, 4])] = b[:3]          # repeated index: the last write stays
    z[::3] = np.cos(z[::3])
    return np.sum(z * z)


def _add_at(a, b):
    z = np.zeros(7)
    np.add.at(z, np.array([1, 1, 4]), b[:3])
    return np.sum((z + a) ** 2)


def _maximum_at(a):
    z = a.copy()
    np.maximum.at(z, np.array([0, 2, 2]), a[:3] * 1.5)
    return z


def _mask_assign(a):
    z = a.copy()
    z[z > 0.5] = 0.0
    return np.sum(z ** 2 * W7)


def _stencil(u_, k):
    for _ in range(3):
        u_ = u_ + k * (np.roll(u_, 1) - 2 * u_ + np.roll(u_, -1))
    return np.sum(u_ ** 2)


def _mlp(x, w1, w2):
    h = np.tanh(x @ w1)
    out = h @ w2
    return np.mean((out - 1.0) ** 2)


def _softmax_xent(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    return -np.sum(np.log(p[:, 0]))


CASES = {
    **{f"u_{f}": (lambda a, f=f: np.sum(getattr(np, f)(a) * W7), [u(0.2, 0.9, 7)])
       for f in UNARY},
    "u_arccosh": (lambda a: np.sum(np.arccosh(a + 1.5) * W7), [u(0.2, 0.9, 7)]),
    **{f"b_{f}": (lambda a, b, f=f: np.sum(getattr(np, f)(a, b) * W7),
                  [u(0.2, 0.9, 7), u(0.2, 0.9, 7)]) for f in BINARY},
    "b_scalar_broadcast": (lambda a, s: np.sum(a * s + s ** 2), [n(7), n()]),
    "where": (lambda a, b: np.sum(np.where(a > 0.5, a * a, b * 3)), [u(0, 1, 7), n(7)]),
    "clip": (lambda a: np.sum(np.clip(a, 0.3, 0.7) ** 2), [u(0, 1, 7)]),
    "broadcast_outer": (lambda a, b: np.sum(a[:, None] * b[None, :] ** 2), [n(5), n(4)]),
    "bias_rows": (lambda x, b: np.sum(np.tanh(x + b)), [n(6, 3), n(3)]),
    "mean_var_std": (lambda a: np.var(a) + np.std(a, axis=0).sum() + np.mean(a ** 3),
                     [n(6, 4)]),
    "sum_axes": (lambda a: np.sum(np.sum(a, axis=(0, 2)) ** 2), [n(3, 4, 5)]),
    "prod": (lambda a: np.prod(a) + np.sum(np.prod(a.reshape(2, 3), axis=1) ** 2),
             [u(0.5, 1.5, 6)]),
    "prod_with_zero": (lambda a: np.prod(a * np.array([1.0, 0.0, 1.0, 1.0])), [u(0.5, 1.5, 4)]),
    "max_min": (lambda a: np.max(a) + np.min(a, axis=1).sum(), [n(4, 5)]),
    "cumsum": (lambda a: np.sum(np.cumsum(a, axis=1) * np.arange(10).reshape(2, 5)), [n(2, 5)]),
    "cumprod": (lambda a: np.sum(np.cumprod(a) * np.arange(7)), [u(0.5, 1.5, 7)]),
    "sort": (lambda a: np.sum(np.sort(a) * W7), [n(7)]),
    "median_percentile": (lambda a: np.median(a) + np.percentile(a, 30), [n(9)]),
    "norm": (lambda a: np.linalg.norm(a) + np.linalg.norm(a.reshape(2, 4), axis=1).sum(),
             [n(8)]),
    "slices": (lambda a: np.sum(a[1:-1] * a[2:] - a[:-2] ** 2) + a[3] * a[::2].sum()
               + np.sum(a[::-2]), [n(9)]),
    "reshape_transpose": (lambda a: np.sum((a.reshape(2, 3).T @ np.ones((2, 2))) ** 2),
                          [n(6)]),
    "concat_stack": (lambda a, b: np.sum(np.concatenate([a, b * 2]) ** 2)
                     + np.sum(np.stack([a, b]) ** 3), [n(4), n(4)]),
    "pad_roll_flip": (lambda a: np.sum(np.pad(a, 2) ** 2 * np.arange(11))
                      + np.sum(np.roll(a, 2) * W7) + np.sum(np.flip(a) * W7), [n(7)]),
    "gather": (lambda a: np.sum(a[np.array([0, 3, 3, 6])] ** 2), [n(7)]),
    "take_along_axis": (lambda a: np.sum(np.take_along_axis(a, np.array([[2, 0], [1, 1]]),
                                                            axis=1) ** 2), [n(2, 3)]),
    "inplace": (_inplace, [n(7), n(7)]),
    "add_at": (_add_at, [n(7), n(7)]),
    "mask_assign": (_mask_assign, [u(0, 1, 7)]),
    "stencil": (_stencil, [n(8), u(0.1, 0.2)]),
    "matmul": (lambda a, b: np.sum(np.tanh(a @ b)), [n(4, 4), n(4, 3)]),
    "matmul_batched": (lambda a, b: np.sum(np.sin(a @ b)), [n(2, 3, 4), n(4, 5)]),
    "matvec_dot": (lambda a, b: np.sum((a @ b) ** 2) + np.dot(b, b), [n(5, 4), n(4)]),
    "matmul_blas": (lambda a, b: np.sum(np.tanh(a @ b)), [n(20, 30), n(30, 10)]),
    "einsum": (lambda a, b: np.einsum("ij,jk->", a, b) ** 2 + np.einsum("ij,ij->i", a, a).sum(),
               [n(4, 4), n(4, 3)]),
    "outer": (lambda a, b: np.sum(np.outer(a, b) ** 2), [n(4), n(3)]),
    "mlp": (_mlp, [n(8, 5), n(5, 6), n(6, 2)]),
    "softmax_xent": (_softmax_xent, [n(4, 5)]),
    "inv": (lambda a: np.sum(np.linalg.inv(a) * np.arange(16).reshape(4, 4)), [spd(4)]),
    "solve": (lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), [spd(4), n(4, 3)]),
    "solve_vector": (lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), [spd(4), n(4)]),
    "det_slogdet": (lambda a: np.linalg.det(a) + np.linalg.slogdet(a)[1], [spd(4)]),
    "cholesky": (lambda a: np.sum(np.linalg.cholesky(a) * np.arange(16).reshape(4, 4)),
                 [spd(4)]),
    "eigh": (lambda a: np.sum(np.linalg.eigh(a)[0] * np.arange(4))
             + np.sum(np.linalg.eigh(a)[1][:, 0] ** 2 * np.arange(4)), [spread(4)]),
    # above the written-out size: LAPACK library calls, whose backward is more of them
    "inv_lapack": (lambda a: np.sum(np.linalg.inv(a) * np.arange(144).reshape(12, 12)),
                   [spd(12)]),
    "solve_lapack": (lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), [spd(12), n(12, 2)]),
    "det_lapack": (lambda a: np.linalg.det(a / 12) + np.linalg.slogdet(a)[1], [spd(12)]),
    "cholesky_lapack": (lambda a: np.sum(np.linalg.cholesky(a) * np.arange(400).reshape(20, 20)),
                        [spd(20)]),
    "eigh_lapack": (lambda a: np.sum(np.linalg.eigh(a)[0] * np.arange(12))
                    + np.sum(np.linalg.eigh(a)[1][:, 3] ** 2 * np.arange(12)), [spread(12)]),
    "special": (lambda a: np.sum(sp.erf(a) + sp.erfc(2 * a) + sp.gammaln(5 * a)
                                 + sp.gammaln(0.5 * a - 2.75) + sp.expit(a)), [u(0.2, 0.9, 7)]),
    "numpy_compositions": (lambda a: np.sum(np.round(a, 1) * a) + np.sum(np.nan_to_num(a) ** 2)
                           + np.sum(np.sinc(a)) + np.sum(np.tile(a, 3) * np.arange(21))
                           + np.sum(np.repeat(a, 2) * np.arange(14)) + np.sum(np.diff(a, 2) ** 2)
                           + np.sum(np.gradient(a) ** 2) + np.average(a, weights=W7)
                           + np.sum(np.convolve(a, np.array([1.0, 2.0, 3.0])) ** 2),
                           [u(0.2, 0.9, 7)]),
    "selection": (lambda a: np.sum(np.partition(a, 3)[:3]) + np.quantile(a, 0.7)
                  + np.std(a, ddof=1), [n(8)]),
    "maximum_at": (lambda a: np.sum(_maximum_at(a) * np.arange(7)), [n(7)]),
    "logsumexp_by_hand": (lambda a: np.log(np.sum(np.exp(a))), [n(7)]),
    "float32_inside": (lambda a: np.sum(np.sin(a.astype(np.float32)).astype(np.float64) * 0
                                        + a ** 2), [n(7)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_against_finite_differences(name):
    f, makers = CASES[name]
    rng = np.random.default_rng([zlib.crc32(name.encode()), SEED])
    argnums = tuple(range(len(makers)))
    g = fl.grad(f, argnums=argnums)
    for _ in range(2):            # the trace's values, then new values replayed
        args = [m(rng) for m in makers]
        grads = g(*args)
        check_gradient(f, grads, args, argnums, rng)
    assert g.stats["traces"] == 1


def test_value_and_grad_value_is_the_functions():
    f, makers = CASES["mlp"]
    rng = np.random.default_rng(0)
    args = [m(rng) for m in makers]
    value, _ = fl.value_and_grad(f, argnums=(0, 1, 2))(*args)
    assert value == pytest.approx(f(*args), rel=1e-12)


def test_float32_gradients_match_float64_to_float32_precision():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(1000)
    f = lambda a: np.mean((np.sin(a) + a * a - 0.5) ** 2)   # noqa: E731
    g64 = fl.grad(f)(x)
    g32 = fl.grad(f)(x.astype(np.float32))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=2e-5, atol=1e-8)


def test_every_op_has_a_rule_or_is_declared_without_one():
    """A new op must be given an adjoint rule (or be declared as carrying no gradient), never
    silently differentiate as zero."""
    ruled = set(adjoint.RULES)
    declared = adjoint.NO_RULE_NEEDED | adjoint.REFUSED
    assert not ruled & adjoint.NO_RULE_NEEDED
    missing = [op for op in Op if op not in ruled and op not in declared]
    assert not missing, f"ops without an adjoint rule or a declaration: {missing}"


@pytest.mark.parametrize("f, what", [
    (lambda a: np.sum(np.nextafter(a, 2.0)), "nextafter"),
    (lambda a: np.sum(np.linalg.svd(a, compute_uv=False)), "np.linalg.svd"),
])
def test_ops_without_a_rule_raise_naming_the_op(f, what):
    with pytest.raises(fl.TracingError, match=what):
        fl.grad(f)(np.ones((3, 3)) + np.eye(3))


def test_complex_intermediates_differentiate_through_their_real_parts():
    # complex arithmetic is composed of real ops while tracing, so a real function of real
    # arguments through complex values has the ordinary gradient
    f = lambda a: np.sum(np.abs(a.astype(np.complex128) * (1 + 2j)) ** 2   # noqa: E731
                         + np.real(np.exp(1j * a)))
    x = np.array([0.3, 0.7, -1.2])
    np.testing.assert_allclose(fl.grad(f)(x), 10 * x - np.sin(x), rtol=1e-13)


def test_complex_arguments_are_refused_with_their_name():
    with pytest.raises(TypeError, match=r"argument 0 \('z'\) is complex128"):
        fl.grad(lambda z: np.sum(np.abs(z)))(np.ones(2, complex))
