"""Matrix products: np.dot, np.matmul / @, np.inner, np.outer, np.einsum (two operands)."""
from __future__ import annotations

import numpy as np
import pytest

from .harness import Tol, check, check_many, cover, make, param, short
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
    for _name, f in SQUARE_FNS.items():
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


_SMALL = ("matrices up to 8x8 (cholesky: 16x16; solve: while its right-hand sides keep the "
          "written-out size within small_linalg.MAX_OPS) are elementwise kernels over the "
          "batch that fuse with their neighbours, no library call (also on CUDA); larger ones "
          "a LAPACK call")
for _n, _notes in [
        ("np.linalg.inv", "computed in float64 and cast, as NumPy; gesv against the identity "
                          "(as NumPy); " + _SMALL + "; batched leading dims; singular matrices "
                          "(an exactly zero pivot) raise LinAlgError at replay with nothing "
                          "written; NaN/inf in: no error, NaN out (small matrices: possibly "
                          "more NaN entries than OpenBLAS gives); a matrix singular only "
                          "through rounding may be judged otherwise than by NumPy's OpenBLAS"),
        ("np.linalg.solve", "b of shape (m,) or (..., m, k) (NumPy 2: only a 1-D b is a "
                            "vector), broadcast batches; getrf + getrs as gesv; " + _SMALL),
        ("np.linalg.det", "getrf, sign and log-sum as NumPy (det = sign * exp(logdet)); "
                          "singular: 0; " + _SMALL),
        ("np.linalg.slogdet", "SlogdetResult; singular: (0, -inf); " + _SMALL),
        ("np.linalg.cholesky", "potrf (lower; upper=True reads the upper triangle, as NumPy); "
                               "not positive definite raises LinAlgError at replay; " + _SMALL),
        ("np.linalg.eigh", "LAPACK syevd at every size (no elementwise version yet: a cyclic "
                           "Jacobi would be one); UPLO 'L'/'U'; eigenvectors equal NumPy's up "
                           "to sign")]:
    cover(_n, LA, ["f32", "f64"], note=_notes, test="test_linalg.py")
# ---- SVD, pinv, lstsq, matrix_rank: LAPACK gesdd / gelsd -------------------------------------
def _random(shape, dtype, layout="C", key=()):
    return make(shape, np.float64, layout, special=False, domain=(-1, 1),
                key=("svd",) + tuple(key)).astype(dtype)


def _deficient(shape, rank, dtype, key=()):
    """A random matrix (stack) of exactly `rank` in float64 arithmetic: a product of factors."""
    left = make(shape[:-1] + (rank,), np.float64, special=False, domain=(-1, 1),
                key=("low", rank) + tuple(key))
    right = make(shape[:-2] + (rank, shape[-1]), np.float64, special=False, domain=(-1, 1),
                 key=("high", rank) + tuple(key))
    return (left @ right).astype(dtype)


def _svd_tols(dtype):
    # results go through float64 and are rounded once to the result dtype, as NumPy's
    return (2e-6, 1e-6) if dtype == np.float32 else (1e-12, 1e-13)


def _same_lapack():
    """fastlaunch calls the LAPACK NumPy itself is linked with: then the same bits."""
    from fastlaunch.backends.library import blas_in_use
    return blas_in_use() == "numpy"


def _compare_svd(a, got, want, full):
    """S to a few ulps; U and Vh column by column up to the sign of each singular pair (any
    two LAPACK builds may flip one), the full U/Vh's extra columns by the subspace they span;
    the reconstruction U S Vh; exactly NumPy's bits when the LAPACK is NumPy's."""
    rtol, atol = _svd_tols(a.dtype)
    assert type(got) is type(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
    u, s, vh = got
    eu, es, evh = want
    r = s.shape[-1]
    if a.size == 0:
        np.testing.assert_array_equal(u, eu)
        np.testing.assert_array_equal(vh, evh)
        return
    scale = np.max(es, axis=-1, keepdims=True, initial=0)
    np.testing.assert_allclose(s, es, rtol=rtol, atol=atol)
    assert np.all(s[..., :-1] >= s[..., 1:]) and np.all(s >= 0)
    sign = np.sign(np.sum(u[..., :r] * eu[..., :r], axis=-2, keepdims=True))
    np.testing.assert_allclose(u[..., :r] * sign, eu[..., :r], rtol=0, atol=atol * 1e4 + rtol * 10)
    np.testing.assert_allclose(vh[..., :r, :] * np.swapaxes(sign, -1, -2), evh[..., :r, :],
                               rtol=0, atol=atol * 1e4 + rtol * 10)
    recon = (u[..., :r] * s[..., None, :]) @ vh[..., :r, :]
    np.testing.assert_allclose(recon, a, rtol=0, atol=float(np.max(scale)) * rtol * 20)
    if full:
        for q, eq, axis in ((u, eu, -1), (vh, evh, -2)):
            extra = q[..., :, r:] if axis == -1 else np.swapaxes(q[..., r:, :], -1, -2)
            eextra = eq[..., :, r:] if axis == -1 else np.swapaxes(eq[..., r:, :], -1, -2)
            proj = extra @ np.swapaxes(extra, -1, -2)
            np.testing.assert_allclose(proj, eextra @ np.swapaxes(eextra, -1, -2), rtol=0,
                                       atol=atol * 1e4 + rtol * 10)
    if _same_lapack() and a.dtype == np.float64:
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


SVD_SHAPES = [(4, 4), (6, 3), (3, 6), (2, 5, 3), (2, 3, 3, 5), (1, 1), (7, 1), (20, 17)]


@pytest.mark.parametrize("shape", SVD_SHAPES, ids=str)
@pytest.mark.parametrize("layout", ["C", "T", "step"])
@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.svd", dtype=d, id=short(d))
                                   for d in LINALG_DTYPES])
def test_linalg_svd(dtype, layout, shape):
    a = _random(shape, dtype, layout)
    g = fl.compile(lambda a: (np.linalg.svd(a), np.linalg.svd(a, full_matrices=False),
                              np.linalg.svd(a, compute_uv=False)))
    for got in (g(a), g(a)):                            # the traced call and a replay
        _compare_svd(a, got[0], np.linalg.svd(a), True)
        _compare_svd(a, got[1], np.linalg.svd(a, full_matrices=False), False)
        es = np.linalg.svd(a, compute_uv=False)
        assert got[2].dtype == es.dtype and got[2].shape == es.shape
        np.testing.assert_allclose(got[2], es, rtol=_svd_tols(dtype)[0], atol=_svd_tols(dtype)[1])
    assert len(g.traces) == 1


@pytest.mark.parametrize("shape,rank", [((6, 4), 2), ((4, 6), 1), ((3, 5, 5), 3)], ids=str)
@pytest.mark.parametrize("dtype", LINALG_DTYPES, ids=short)
def test_linalg_svd_rank_deficient(dtype, shape, rank):
    a = _deficient(shape, rank, dtype)
    got = fl.compile(lambda a: np.linalg.svd(a, full_matrices=False))(a)
    want = np.linalg.svd(a, full_matrices=False)
    u, s, vh = got
    # the zero singular values' vectors are arbitrary: compare the rank's leading part
    _compare_svd(a, type(got)(u[..., :rank], s[..., :rank], vh[..., :rank, :]),
                 type(want)(want[0][..., :rank], want[1][..., :rank], want[2][..., :rank, :]),
                 False)
    np.testing.assert_allclose(s[..., rank:], want[1][..., rank:], rtol=0,
                               atol=1e-5 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 3), (0, 3, 3), (0, 2, 5)],
                         ids=str)
def test_linalg_svd_pinv_rank_of_empty_matrices(shape):
    """gesdd is not called: U and Vh of the full SVD are identities, as NumPy makes them."""
    a = np.ones(shape)
    check(lambda a: (tuple(np.linalg.svd(a)), tuple(np.linalg.svd(a, full_matrices=False)),
                     np.linalg.svd(a, compute_uv=False), np.linalg.pinv(a),
                     np.linalg.matrix_rank(a)), a)


def test_linalg_svd_hermitian():
    """hermitian=True: NumPy's construction from eigh (|eigenvalues| sorted descending, their
    signs moved into Vh)."""
    x = _random((3, 5, 5), np.float64)
    h = x + np.swapaxes(x, -1, -2)
    check(lambda a: (tuple(np.linalg.svd(a, hermitian=True)),
                     np.linalg.svd(a, hermitian=True, compute_uv=False),
                     np.linalg.pinv(a, hermitian=True),
                     np.linalg.matrix_rank(a, hermitian=True)), h, tol=Tol(0, 1e-5, 1e-10),
          atol=1e-12)


def test_linalg_svd_errors_like_numpy():
    check(lambda a: np.linalg.svd(a), np.ones(3))
    check(lambda a: np.linalg.svd(a), np.ones((3, 3), np.float16))
    check(lambda a: np.linalg.pinv(a, rcond=0.1, rtol=0.1), np.ones((3, 3)))
    check(lambda a: np.linalg.matrix_rank(a, tol=0.1, rtol=0.1), np.ones((3, 3)))
    # integer matrices are computed in float64, as NumPy
    check(lambda a: np.linalg.svd(a, compute_uv=False), np.arange(12).reshape(4, 3),
          tol=_tol(), atol=1e-12)


def _pinv_atol(a):
    e = np.linalg.pinv(a)
    return float(np.max(np.abs(e), initial=0)) * (2e-6 if a.dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 5, 3), (20, 17)], ids=str)
@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.pinv", dtype=d, id=short(d))
                                   for d in LINALG_DTYPES])
def test_linalg_pinv(dtype, shape):
    a = _random(shape, dtype, "T")
    check(lambda a: np.linalg.pinv(a), a, tol=_tol(), atol=_pinv_atol(a))
    # rtol=None: max(m, n) * eps of the input dtype; a static rcond per matrix of the batch
    check(lambda a: np.linalg.pinv(a, rtol=None), a, tol=_tol(), atol=_pinv_atol(a))
    rc = np.linspace(0.1, 0.9, int(np.prod(shape[:-2], dtype=int))).reshape(shape[:-2])
    check(lambda a: np.linalg.pinv(a, rcond=rc), a, tol=_tol(), atol=_pinv_atol(a))


@pytest.mark.parametrize("shape,rank", [((6, 4), 2), ((4, 6), 1), ((3, 5, 5), 3)], ids=str)
@pytest.mark.parametrize("dtype", LINALG_DTYPES, ids=short)
def test_linalg_pinv_rank_deficient(dtype, shape, rank):
    """The singular values below the cutoff are dropped (float32: with rtol=None, since float32
    rounding leaves them near 1e-8, above the default 1e-15)."""
    a = _deficient(shape, rank, dtype)
    kw = {"rtol": None} if dtype == np.float32 else {}
    assert np.all(np.linalg.matrix_rank(a) == rank)
    check(lambda a: np.linalg.pinv(a, **kw), a, tol=_tol(),
          atol=float(np.max(np.abs(np.linalg.pinv(a, **kw)))) *
          (2e-6 if dtype == np.float32 else 1e-12))


@pytest.mark.parametrize("shapes", [((6, 3), (6,)), ((6, 3), (6, 2)), ((3, 6), (3, 2)),
                                    ((4, 4), (4,)), ((20, 17), (20, 3)), ((1, 1), (1,))],
                         ids=str)
@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.lstsq", dtype=d, id=short(d))
                                   for d in LINALG_DTYPES])
def test_linalg_lstsq(dtype, shapes):
    """x, rank and s; gelsd as NumPy calls it (exactly NumPy's bits with NumPy's LAPACK)."""
    a = _random(shapes[0], dtype, "T")
    b = make(shapes[1], dtype, special=False, domain=(-2, 2), key=("rhs",))
    tol = Tol(0.0, 2e-6, 1e-12)
    atol = 1e-6 if dtype == np.float32 else 1e-12
    check(lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], a, b, tol=tol, atol=atol)
    got = check(lambda a, b: np.linalg.lstsq(a, b)[2:], a, b, tol=tol, atol=atol)
    if _same_lapack():
        want = np.linalg.lstsq(a, b)
        for g, w in zip(fl.compile(lambda a, b: np.linalg.lstsq(a, b)[::2])(a, b), want[::2]):
            np.testing.assert_array_equal(g, w)
    assert type(got[0]) is np.int32


@pytest.mark.parametrize("shapes,rank", [(((6, 4), (6, 2)), 2), (((4, 6), (4,)), 1),
                                         (((5, 5), (5, 3)), 3)], ids=str)
@pytest.mark.parametrize("rcond", [None, 1e-10, -1], ids=str)
def test_linalg_lstsq_rank_deficient(shapes, rank, rcond):
    """The minimum-norm solution; the rank from rcond (rcond=-1: machine precision, the old
    default: the tiny singular values then count, as in NumPy)."""
    a = _deficient(shapes[0], rank, np.float64)
    b = make(shapes[1], np.float64, special=False, domain=(-2, 2), key=("rhs",))
    want = np.linalg.lstsq(a, b, rcond=rcond)
    got = check(lambda a, b: tuple(np.linalg.lstsq(a, b, rcond=rcond)[i] for i in (0, 2, 3)),
                a, b, tol=Tol(0.0, 1e-6, 1e-9), atol=1e-9 * max(1.0, float(np.max(np.abs(want[0])))))
    if rcond != -1:
        assert got[1] == rank


def test_linalg_lstsq_shapes_and_residuals():
    """Empty operands (x = 0, rank 0, as NumPy); the residuals when they are static (a with
    no more rows than columns, or no right-hand side: NumPy's empty array); a traced rcond."""
    rng = np.random.default_rng(5)
    for sa, sb in [((0, 3), (0,)), ((0, 3), (0, 2)), ((3, 0), (3,)), ((3, 0), (3, 2)),
                   ((4, 2), (4, 0)), ((2, 4), (2, 0)), ((3, 5), (3,)), ((3, 5), (3, 2)),
                   ((5, 5), (5, 2))]:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        if sa[0] <= sa[1] or sb[-1:] == (0,):
            check(lambda a, b: np.linalg.lstsq(a, b), a, b, tol=_tol(), atol=1e-12)
        else:
            check(lambda a, b: np.linalg.lstsq(a, b)[::2], a, b, tol=_tol(), atol=1e-12)
    a, b = rng.standard_normal((6, 3)), rng.standard_normal(6)
    check(lambda a, b, r: np.linalg.lstsq(a, b, rcond=r)[0], a, b, 0.5, tol=_tol(), atol=1e-12)
    # float32 with float64 is float64; integers are float64
    check(lambda a, b: np.linalg.lstsq(a, b)[0], a.astype(np.float32), b, tol=_tol(),
          atol=1e-12)
    check(lambda a, b: np.linalg.lstsq(a, b)[0], np.arange(12).reshape(6, 2),
          np.arange(6, dtype=np.int32), tol=_tol(), atol=1e-12)


def test_linalg_lstsq_data_dependent_residuals_are_refused():
    a, b = np.random.default_rng(6).standard_normal((6, 3)), np.ones(6)
    for f in (lambda a, b: np.linalg.lstsq(a, b),
              lambda a, b: np.linalg.lstsq(a, b)[1].sum(),
              lambda a, b: np.linalg.lstsq(a, b)[1] * 2,
              lambda a, b: np.sqrt(np.linalg.lstsq(a, b)[1]),
              lambda a, b: len(np.linalg.lstsq(a, b)[1])):
        with pytest.raises(fl.TracingError, match="residuals have a data-dependent shape"):
            fl.compile(f)(a, b)
    # the hint works: the residuals computed from x
    check(lambda a, b: np.sum((a @ np.linalg.lstsq(a, b)[0] - b) ** 2, axis=0), a, b,
          tol=_tol(), atol=1e-12)


def test_linalg_lstsq_errors_like_numpy():
    check(lambda a, b: np.linalg.lstsq(a, b), np.ones((3, 2)), np.ones(4))
    check(lambda a, b: np.linalg.lstsq(a, b), np.ones((2, 3, 2)), np.ones((2, 3)))
    check(lambda a, b: np.linalg.lstsq(a, b), np.ones(3), np.ones(3))
    check(lambda a, b: np.linalg.lstsq(a, b), np.ones((3, 2), np.float16), np.ones(3))
    with pytest.raises(fl.TracingError, match="rcond"):
        fl.compile(lambda a, b: np.linalg.lstsq(a, b, rcond=np.ones(2)))(np.ones((3, 2)),
                                                                       np.ones(3))


@pytest.mark.parametrize("dtype", [param(d, name="np.linalg.matrix_rank", dtype=d, id=short(d))
                                   for d in LINALG_DTYPES])
def test_linalg_matrix_rank(dtype):
    full = _random((3, 5, 4), dtype)
    low = _deficient((2, 6, 5), 2, dtype)
    for a in (full, low, full[0], low[0]):
        check(lambda a: np.linalg.matrix_rank(a), a)
        check(lambda a: np.linalg.matrix_rank(a, tol=0.5), a)
        check(lambda a: np.linalg.matrix_rank(a, rtol=0.3), a)
    check(lambda a: np.linalg.matrix_rank(a, rtol=np.array([0.05, 0.5, 0.95])), full)
    # a vector: 1 unless all zero (as a NumPy int64, where NumPy returns a Python int)
    g = fl.compile(np.linalg.matrix_rank)
    assert g(np.ones(3, dtype)) == 1 and g(np.zeros(3, dtype)) == 0


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
def test_svd_lstsq_failures_raise_linalgerror_and_write_nothing(backend):
    """gesdd and gelsd refuse a NaN (NumPy: "SVD did not converge"): LinAlgError at replay,
    an argument updated in place left as it was."""
    def f(a, y):
        y += 1.0
        return np.linalg.svd(a), np.linalg.pinv(a), np.linalg.lstsq(a, a[:, 0])[0]

    g = fl.compile(f, backend=backend)
    a = _random((5, 3), np.float64)
    y = np.zeros(3)
    g(a, y)
    np.testing.assert_array_equal(y, np.ones(3))
    bad = a.copy()
    bad[1, 1] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
        np.linalg.svd(bad)
    with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
        g(bad, y)
    np.testing.assert_array_equal(y, np.ones(3))
    ls = fl.compile(lambda a, b: np.linalg.lstsq(a, b)[0], backend=backend)
    with pytest.raises(np.linalg.LinAlgError, match="in Linear Least Squares"):
        ls(bad, np.ones(5))
    np.testing.assert_array_equal(ls(a, np.ones(5)), np.linalg.lstsq(a, np.ones(5))[0])


for _n, _notes in [
        ("np.linalg.svd", "LAPACK gesdd at every size, as NumPy calls it (jobz 'A'/'S'/'N', "
                          "NumPy's workspace "
                          "query): NumPy's bits with NumPy's LAPACK; SVDResult; batched; "
                          "empty matrices (identity U/Vh); hermitian=True from eigh as NumPy; "
                          "non-convergence (a NaN) raises LinAlgError at replay"),
        ("np.linalg.pinv", "NumPy 2's rule (rcond default 1e-15, rtol=None: max(m, n) * eps, "
                           "rcond arrays per matrix): the reduced SVD, the cutoff and 1/s fused, "
                           "a matrix product; hermitian=True"),
        ("np.linalg.lstsq", "LAPACK gelsd at every size, on [a | b] with rcond, as NumPy (same bits with "
                            "NumPy's LAPACK); x, rank (int32), s; b 1-D or 2-D; the residuals "
                            "are NumPy's empty array when a has no more rows than columns, else "
                            "data-dependent: a TracingError where they are used or returned "
                            "(np.linalg.lstsq(a, b)[0] works)"),
        ("np.linalg.matrix_rank", "NumPy's tol/rtol rule from the singular values; a 1-D input "
                                  "gives a NumPy int64 where NumPy returns a Python int")]:
    cover(_n, LA, ["f32", "f64"], note=_notes, test="test_linalg.py")
