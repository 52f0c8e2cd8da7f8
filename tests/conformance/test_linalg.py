"""Matrix products: np.dot, np.matmul / @, np.inner, np.outer, np.einsum (two operands)."""
from __future__ import annotations

import numpy as np
import pytest

from .harness import Tol, check, check_many, cover, make, param, param_marks, short
import fastlaunch as fl

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


# ---- small dense linear algebra (np.linalg): LAPACK library calls --------------------------------
LINALG_DTYPES = [np.float32, np.float64]


def _well_conditioned(shape, dtype, layout="C", key=()):
    """Random matrices with a dominant diagonal (condition numbers near 1), so float32 results
    agree with NumPy's to a few ulps whatever the pivoting."""
    a = make(shape, np.float64, special=False, domain=(-1, 1), key=("wc",) + tuple(key))
    n = shape[-1]
    a = np.ascontiguousarray(a) + 2 * n * np.eye(n)
    a = a.astype(dtype)
    if layout == "T":
        return np.swapaxes(np.swapaxes(a, -1, -2).copy(), -1, -2)     # column-major matrices
    if layout == "step":
        big = np.repeat(a, 2, axis=-1)
        return big[..., ::2]
    return a


def _spd(shape, dtype, key=()):
    a = make(shape, np.float64, special=False, domain=(-1, 1), key=("spd",) + tuple(key))
    return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _tol():
    return Tol(0.0, 2e-5, 1e-12)


SQUARE_FNS = {
    "np.linalg.inv": lambda a: np.linalg.inv(a),
    "np.linalg.det": lambda a: np.linalg.det(a),
    "np.linalg.slogdet": lambda a: tuple(np.linalg.slogdet(a)),
}


@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 3, 4, 4), (0, 3, 3), (1, 1),
                                   (10, 2, 2)], ids=str)
@pytest.mark.parametrize("layout", ["C", "T", "step"])
@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.inv", dtype=d, id=short(d))
                                   for d in LINALG_DTYPES])
def test_linalg_square(dtype, layout, shape):
    a = _well_conditioned(shape, dtype, layout)
    for name, f in SQUARE_FNS.items():
        check(f, a, tol=_tol(), atol=1e-6 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("shapes", [((4, 4), (4,)), ((4, 4), (4, 3)), ((5, 3, 3), (5, 3, 2)),
                                    ((5, 3, 3), (3, 2)), ((2, 5, 3, 3), (5, 3, 1)),
                                    ((0, 2, 2), (0, 2, 1))], ids=str)
@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.solve", dtype=d, id=short(d))
                                   for d in LINALG_DTYPES])
def test_linalg_solve(dtype, shapes):
    a = _well_conditioned(shapes[0], dtype, "T")
    b = make(shapes[1], dtype, special=False, domain=(-2, 2), key=("rhs",))
    check(lambda a, b: np.linalg.solve(a, b), a, b, tol=_tol(),
          atol=1e-6 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("shape", [(4, 4), (6, 3, 3), (2, 2, 5, 5), (0, 4, 4)], ids=str)
@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.cholesky", dtype=d, id=short(d))
                                   for d in LINALG_DTYPES])
def test_linalg_cholesky_eigh(dtype, shape):
    a = _spd(shape, dtype)
    atol = 1e-5 if dtype == np.float32 else 1e-12
    check(lambda a: np.linalg.cholesky(a), a, tol=_tol(), atol=atol)
    check(lambda a: np.linalg.cholesky(a, upper=True), a, tol=_tol(), atol=atol)
    # eigenvalues match; eigenvectors up to each one's sign (as any two LAPACK builds)
    w, v = fl.compile(np.linalg.eigh)(a)
    ew, ev = np.linalg.eigh(a)
    assert w.dtype == ew.dtype and v.dtype == ev.dtype and w.shape == ew.shape
    np.testing.assert_allclose(w, ew, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=atol * 10)
    np.testing.assert_allclose(np.abs(v), np.abs(ev), rtol=1e-3 if dtype == np.float32 else 1e-8,
                               atol=atol * 100)
    if a.size:
        recon = v @ (w[..., :, None] * np.swapaxes(v, -1, -2))
        np.testing.assert_allclose(recon, a, rtol=1e-4 if dtype == np.float32 else 1e-10,
                                   atol=atol * 100)
    wu, _ = fl.compile(lambda a: np.linalg.eigh(a, UPLO="U"))(a)
    np.testing.assert_allclose(wu, np.linalg.eigh(a, UPLO="U")[0],
                               rtol=1e-4 if dtype == np.float32 else 1e-10, atol=atol * 10)


def test_linalg_integer_inputs_are_float64():
    a = (np.eye(3, dtype=np.int32) * 2 + 1)
    check(lambda a: (np.linalg.inv(a), np.linalg.det(a)), a, tol=_tol(), atol=1e-13)


def test_linalg_float16_and_shapes_rejected_like_numpy():
    check(lambda a: np.linalg.inv(a), np.eye(3, dtype=np.float16))
    check(lambda a: np.linalg.inv(a), np.ones((3, 4)))
    check(lambda a: np.linalg.det(a), np.ones(3))


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
def test_singular_raises_linalgerror_and_writes_nothing(backend):
    """A singular matrix raises LinAlgError at replay, as NumPy does; an argument the function
    updates in place is left as it was (the library call stops the run before any write)."""
    def f(a, y):
        y += 1.0
        return np.linalg.inv(a)

    g = fl.compile(f, backend=backend)
    good = np.eye(3) * 2
    y = np.zeros(3)
    np.testing.assert_array_equal(g(good, y), np.linalg.inv(good))
    np.testing.assert_array_equal(y, np.ones(3))
    for singular in (np.ones((3, 3)), np.zeros((3, 3))):
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
            np.linalg.inv(singular)
        with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
            g(singular, y)
        np.testing.assert_array_equal(y, np.ones(3))
    solve = fl.compile(np.linalg.solve, backend=backend)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        solve(np.stack([np.eye(2), np.zeros((2, 2))]), np.ones((2, 2, 1)))
    chol = fl.compile(np.linalg.cholesky, backend=backend)
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        chol(-np.eye(3))
    # det and slogdet of a singular matrix are values, not errors
    check(lambda a: (np.linalg.det(a), tuple(np.linalg.slogdet(a))), np.ones((2, 3, 3)))


def test_linalg_results_are_namedtuples_and_fuse_with_neighbours():
    a = _spd((3, 4, 4), np.float64)
    r = fl.compile(np.linalg.slogdet)(a)
    assert type(r) is type(np.linalg.slogdet(a)) and r.sign.shape == (3,)
    e = fl.compile(np.linalg.eigh)(a)
    assert type(e) is type(np.linalg.eigh(a))
    check(lambda a, b: np.linalg.solve(a * 2.0, b + 1.0).sum(axis=-1) * np.linalg.det(a)[:, None],
          a, a[:, :, :2].copy(), tol=_tol(), atol=1e-10)


for _n, _notes in [
        ("np.linalg.inv", "computed in float64 and cast, as NumPy; LAPACK gesv against the "
                          "identity (as NumPy; matrices up to 16x16: an LU written out); "
                          "batched leading dims; singular matrices raise LinAlgError at replay "
                          "with nothing written"),
        ("np.linalg.solve", "b of shape (m,) or (..., m, k), broadcast batches; LAPACK gesv"),
        ("np.linalg.det", "LAPACK getrf, sign and log-sum as NumPy; singular: 0"),
        ("np.linalg.slogdet", "SlogdetResult; singular: (0, -inf)"),
        ("np.linalg.cholesky", "LAPACK potrf (lower; upper=True); not positive definite "
                               "raises LinAlgError at replay"),
        ("np.linalg.eigh", "LAPACK syevd; UPLO 'L'/'U'; eigenvectors equal NumPy's up to sign")]:
    cover(_n, LA, ["f32", "f64"], note=_notes, test="test_linalg.py")
@param_marks("np.linalg.lstsq")
def test_linalg_lstsq():
    a = _well_conditioned((5, 3, 3), np.float64)
    check(lambda a: np.linalg.lstsq(a[0], a[1])[0], a, tol=_tol(), atol=1e-12)


@param_marks("np.linalg.pinv")
def test_linalg_pinv():
    check(lambda a: np.linalg.pinv(a), _well_conditioned((3, 3), np.float64), tol=_tol(),
          atol=1e-12)


cover("np.linalg.lstsq", LA, [], test="test_linalg.py::test_linalg_lstsq")
cover("np.linalg.pinv", LA, [], test="test_linalg.py::test_linalg_pinv")
