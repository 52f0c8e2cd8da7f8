"""Matrix products: np.dot, np.matmul / @, np.inner, np.outer, np.einsum (two operands)."""
from __future__ import annotations

import numpy as np
import pytest

from .harness import check, check_many, cover, make, param, short

LA = "linear algebra"
DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.uint64, np.bool_]


def _atol(*arrays):
    """Products of k terms: |error| <= ~ k * eps * max|a| * max|b| (accumulation order)."""
    def f(label, expected):
        e = np.asarray(expected)
        if e.dtype.kind != "f":
            return 0.0
        eps = float(np.finfo(e.dtype).eps)
        m = [float(np.max(np.abs(a.astype(np.float64)), initial=0)) for a in arrays]
        return 64 * 64 * eps * max(m) ** 2
    return f


def _args(dt):
    dt = np.dtype(dt)
    dom = (-20, 20) if dt.kind in "iu" and dt.itemsize >= 4 else None
    return (make((5, 6), dt, "T", domain=dom, special=False),            # a  (5, 6)
            make((6, 7), dt, domain=dom, special=False, key=("b",)),     # b  (6, 7)
            make((6,), dt, "neg", domain=dom, special=False, key=("v",)),  # v  (6,)
            make((3, 5, 6), dt, domain=dom, special=False, key=("A",)),  # A  (3, 5, 6)
            make((3, 6, 4), dt, "step", domain=dom, special=False, key=("B",)),  # B (3, 6, 4)
            make((64, 33), dt, domain=dom, special=False, key=("L",)),   # L  (64, 33): longer k
            )


MATMUL = {
    "a @ b": lambda a, b, v, A, B, L: a @ b,
    "np.matmul(a, b)": lambda a, b, v, A, B, L: np.matmul(a, b),
    "v @ b (vector-matrix)": lambda a, b, v, A, B, L: v @ b,
    "a @ v (matrix-vector)": lambda a, b, v, A, B, L: a @ v,
    "v @ v (scalar)": lambda a, b, v, A, B, L: v @ v,
    "A @ B (batched)": lambda a, b, v, A, B, L: A @ B,
    "A @ b (broadcast batch)": lambda a, b, v, A, B, L: A @ b,
    "a[None] @ B": lambda a, b, v, A, B, L: a[None] @ B,
    "A @ v": lambda a, b, v, A, B, L: A @ v,
    "a.T.T @ b[:, ::-1]": lambda a, b, v, A, B, L: a.T.T @ b[:, ::-1],
    "L.T @ L (k=64)": lambda a, b, v, A, B, L: L.T @ L,
    "a[:, :0] @ b[:0] (k=0)": lambda a, b, v, A, B, L: a[:, :0] @ b[:0],
    "a[:0] @ b (m=0)": lambda a, b, v, A, B, L: a[:0] @ b,
    "(a @ b).sum(axis=0) (fused use)": lambda a, b, v, A, B, L: (a @ b).sum(axis=0),
    "a @ b + 1": lambda a, b, v, A, B, L: (a @ b) * 2 + a[:, :1],
}

DOT = {
    "np.dot(a, b)": lambda a, b, v, A, B, L: np.dot(a, b),
    "a.dot(b)": lambda a, b, v, A, B, L: a.dot(b),
    "np.dot(v, v)": lambda a, b, v, A, B, L: np.dot(v, v),
    "np.dot(a, v)": lambda a, b, v, A, B, L: np.dot(a, v),
    "np.dot(v, b)": lambda a, b, v, A, B, L: np.dot(v, b),
    "np.dot(A, b) (N-D)": lambda a, b, v, A, B, L: np.dot(A, b),
    "np.dot(A, B) (N-D . N-D)": lambda a, b, v, A, B, L: np.dot(A, B),
    "np.dot(a[0,0], b) (0-d)": lambda a, b, v, A, B, L: np.dot(a[0, 0], b),
    "np.vdot(a, a)": lambda a, b, v, A, B, L: np.vdot(a, a),
}

INNER_OUTER = {
    "np.inner(v, v)": lambda a, b, v, A, B, L: np.inner(v, v),
    "np.inner(a, a)": lambda a, b, v, A, B, L: np.inner(a, a),
    "np.inner(A, a)": lambda a, b, v, A, B, L: np.inner(A, a),
    "np.inner(a, v)": lambda a, b, v, A, B, L: np.inner(a, v),
    "np.outer(v, v)": lambda a, b, v, A, B, L: np.outer(v, v),
    "np.outer(a, v) (flattens)": lambda a, b, v, A, B, L: np.outer(a, v),
    "np.outer(v[::2], b[0])": lambda a, b, v, A, B, L: np.outer(v[::2], b[0]),
}

EINSUM = {
    "ij,jk->ik": lambda a, b, v, A, B, L: np.einsum("ij,jk->ik", a, b),
    "ij,j->i": lambda a, b, v, A, B, L: np.einsum("ij,j->i", a, v),
    "i,i->": lambda a, b, v, A, B, L: np.einsum("i,i->", v, v),
    "ij,ij->i": lambda a, b, v, A, B, L: np.einsum("ij,ij->i", a, a),
    "bij,bjk->bik": lambda a, b, v, A, B, L: np.einsum("bij,bjk->bik", A, B),
    "ij,kj->ik": lambda a, b, v, A, B, L: np.einsum("ij,kj->ik", a, a),
    "i,j->ij": lambda a, b, v, A, B, L: np.einsum("i,j->ij", v, v),
    "ij,jk (implicit)": lambda a, b, v, A, B, L: np.einsum("ij,jk", a, b),
    "ij->ji": lambda a, b, v, A, B, L: np.einsum("ij->ji", a),
    "ij->": lambda a, b, v, A, B, L: np.einsum("ij->", a),
    "bij->bj": lambda a, b, v, A, B, L: np.einsum("bij->bj", A),
    "ij,ij->": lambda a, b, v, A, B, L: np.einsum("ij,ij->", a, a),
}


def _params(name):
    return [param(d, name=name, dtype=d, id=short(d)) for d in DTYPES]


@pytest.mark.parametrize("dtype", _params("np.matmul / @"))
def test_matmul(dtype):
    args = _args(dtype)
    check_many(MATMUL, *args, tol="reduce", atol=_atol(*args))


@pytest.mark.parametrize("dtype", _params("np.dot"))
def test_dot(dtype):
    args = _args(dtype)
    check_many(DOT, *args, tol="reduce", atol=_atol(*args))


@pytest.mark.parametrize("dtype", _params("np.inner"))
def test_inner_outer(dtype):
    args = _args(dtype)
    check_many(INNER_OUTER, *args, tol="reduce", atol=_atol(*args))


@pytest.mark.parametrize("dtype", _params("np.einsum"))
def test_einsum(dtype):
    args = _args(dtype)
    check_many(EINSUM, *args, tol="reduce", atol=_atol(*args))


@pytest.mark.parametrize("pair", [(np.float32, np.float64), (np.int8, np.uint8),
                                  (np.int64, np.float32), (np.bool_, np.int32)],
                         ids=lambda p: f"{short(p[0])}-{short(p[1])}")
def test_products_mixed_dtypes(pair):
    a = make((5, 6), pair[0], special=False, domain=(-20, 20))
    b = make((6, 3), pair[1], special=False, domain=(-20, 20), key=("b",))
    check_many({"matmul": lambda a, b: a @ b, "dot": lambda a, b: np.dot(a, b),
                "einsum": lambda a, b: np.einsum("ij,jk->ik", a, b),
                "inner": lambda a, b: np.inner(a, b.T), "outer": lambda a, b: np.outer(a, b)},
               a, b, tol="reduce", atol=_atol(a, b))


DOTSCALAR = "np.dot(x, Python scalar)"


@pytest.mark.parametrize("dtype", [param(d, name=DOTSCALAR, dtype=d, id=short(d)) for d in DTYPES])
def test_dot_python_scalar(dtype):
    """np.dot converts a Python scalar with np.asarray (no NEP 50 weak promotion):
    np.dot(float32_array, 2) is float64."""
    a = make((5, 6), dtype, special=False, domain=(-20, 20))
    check(lambda a: (np.dot(a, 2), np.dot(1.5, a)), a, tol="arith")


cover(DOTSCALAR, LA, [short(d) for d in DTYPES], test="test_linalg.py::test_dot_python_scalar")


def test_product_errors_like_numpy():
    a, b = make((5, 6), np.float64), make((5, 6), np.float64, key=("b",))
    for f in (lambda a, b: a @ b, lambda a, b: np.dot(a, b), lambda a, b: np.inner(a, b.T),
              lambda a, b: a @ b[0, 0], lambda a, b: np.einsum("ij,jk->ik", a, b)):
        check(f, a, b)


for _n, _notes in [("np.matmul / @", "2-D, vector-matrix, matrix-vector, vector-vector (scalar), "
                                      "batched and broadcast batches, transposed and reversed "
                                      "operands, k=0 and m=0, mixed dtypes; integer overflow wraps"),
                   ("np.dot", "N-D . N-D (sum over last / second-to-last axes), 0-d operands, "
                              "ndarray.dot, np.vdot"),
                   ("np.inner", None), ("np.outer", "N-D inputs are flattened"),
                   ("np.einsum", "two-operand contractions 'ij,jk->ik' 'ij,j->i' 'i,i->' "
                                 "'ij,ij->i' 'bij,bjk->bik' 'ij,kj->ik' 'i,j->ij', implicit "
                                 "output, one-operand transposes and sums")]:
    cover(_n, LA, [short(d) for d in DTYPES], note=_notes, test="test_linalg.py")
