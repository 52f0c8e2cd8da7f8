"""NumPy functions real code uses that fastlaunch lacked (issue 30), against NumPy: float32 and
float64, the trace's values and new ones."""
import numpy as np
import pytest

import fastlaunch as fl

from .harness import cover

DTYPES = [np.float32, np.float64]
F = ["float32", "float64"]
_T = "test_more_functions.py::"
cover("np.tensordot", "linear algebra", F, test=_T + "test_tensordot",
      note="NumPy's own composition: summed axes moved together, one matrix product")
for _u in ("np.add", "np.multiply", "np.maximum", "np.minimum"):
    cover(f"{_u}.reduceat", "reductions", F + ["int32", "bool"], test=_T + "test_reduceat",
          note="indices known when tracing (a traced index array is a TracingError)")
cover("np.interp", "matrix helpers", F, test=_T + "test_interp", note="no period=")
cover("np.unravel_index", "gather", ["int64"], test=_T + "test_unravel_and_ravel_multi_index",
      note="a runtime ValueError for an index out of bounds")
cover("np.ravel_multi_index", "gather", ["int64"],
      test=_T + "test_unravel_and_ravel_multi_index")
cover("np.fill_diagonal", "scatter", F, test=_T + "test_fill_diagonal")
cover("ufunc(..., where=)", "arithmetic", F, test=_T + "test_ufuncs_with_where",
      note="without out=, the masked-out elements (uninitialised in NumPy) hold the computed "
           "values")
cover("ndarray.reshape(order='F')", "shapes and views", F,
      test=_T + "test_fortran_order_reshape_and_ravel", note="also ravel/flatten('F')")


def check(fn, make_args, rounds=2, rtol=None):
    cf = fl.compile(fn)
    for r in range(rounds):
        args = make_args(np.random.default_rng(r))
        # copies: a function may update an argument in place
        want, got = fn(*[a.copy() for a in args]), cf(*[a.copy() for a in args])
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(want) == len(got)
        for w, g in zip(want, got):
            w, g = np.asarray(w), np.asarray(g)
            assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
            tol = rtol if rtol is not None else (3e-6 if w.dtype == np.float32 else 1e-13)
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def normal(*shape, dtype=np.float64):
    return lambda rng: tuple(rng.standard_normal(s).astype(dtype) for s in shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes, shapes", [
    (2, ((3, 4, 5), (4, 5, 2))), (1, ((3, 4, 5), (5, 2))), (0, ((2, 3), (4,))),
    (([1, 2], [0, 1]), ((3, 4, 5), (4, 5, 2))), (([0], [2]), ((3, 4), (2, 5, 3))),
    (((2, 1), (1, 0)), ((3, 4, 5), (4, 5, 2))), ((1, 0), ((3, 4), (4, 2))),
])
def test_tensordot(axes, shapes, dtype):
    check(lambda a, b: np.tensordot(a, b, axes=axes), normal(*shapes, dtype=dtype),
          rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES + [np.int32, np.bool_])
@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum])
@pytest.mark.parametrize("indices", [[0, 3, 7], [0, 5, 2, 9], [4], list(range(0, 12, 1))])
def test_reduceat(ufunc, indices, dtype):
    def args(rng):
        return ((rng.standard_normal((12, 3)) * 4).astype(dtype),)
    check(lambda x: (ufunc.reduceat(x, indices), ufunc.reduceat(x, indices[:1] + [0], axis=1)
                     if indices[0] < 3 else ufunc.reduceat(x, [0], axis=1)), args)


def test_reduceat_many_segments_and_errors():
    idx = np.sort(np.random.default_rng(5).integers(0, 2000, 600))
    check(lambda x: (np.add.reduceat(x, idx), np.maximum.reduceat(x, idx)),
          lambda rng: (rng.standard_normal(2000),), rtol=1e-12)
    with pytest.raises(IndexError, match="out-of-bounds"):
        fl.compile(lambda x: np.add.reduceat(x, [0, 10]))(np.ones(4))
    with pytest.raises(fl.TracingError, match="traced indices"):
        fl.compile(lambda x, i: np.add.reduceat(x, i))(np.ones(4), np.array([0, 2]))


@pytest.mark.parametrize("dtype", DTYPES)
def test_interp(dtype):
    xp = np.array([-2.0, -1.0, 0.0, 0.5, 3.0])
    fp = np.array([1.0, 0.0, 2.0, 2.0, -1.0])

    def fn(x, yp):
        return (np.interp(x, xp, fp), np.interp(x, xp, yp, left=-9.0, right=9.0),
                np.interp(x[0], xp, fp), np.interp(x, np.sort(x), yp[:1] + x))

    def args(rng):
        x = (rng.standard_normal(11) * 2.5).astype(dtype)
        x[:3] = [-2.0, 3.0, 0.5]         # on the sample points and the ends
        x[3] = np.nan
        return x, rng.standard_normal(5).astype(dtype)
    check(fn, args, rtol=1e-12)


def test_unravel_and_ravel_multi_index():
    def fn(x):
        k = np.argmax(x)
        i, j = np.unravel_index(k, (3, 4))
        rows, cols = np.unravel_index(np.argsort(x)[:5], (3, 4), order="F")
        return (i, j, rows, cols, np.ravel_multi_index((i, j), (3, 4)),
                np.ravel_multi_index((rows, cols + 3), (3, 4), mode="wrap"),
                np.ravel_multi_index((rows, cols + 3), (3, 4), mode="clip", order="F"))
    check(fn, normal(12))
    cf = fl.compile(lambda i: np.unravel_index(i, (2, 3)))
    with pytest.raises(ValueError, match="out of bounds"):
        cf(np.array([1, 6]))


cover("np.einsum", "linear algebra", F, test=_T + "test_einsum_with_three_or_more_operands",
      note="three or more operands: contracted two at a time, left to right (NumPy's loop "
           "sums the same products in another order)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec, shapes", [
    ("ijk,jkl,l->i", [(3, 4, 5), (4, 5, 2), (2,)]),
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),
    ("ij,jk,k->", [(3, 4), (4, 5), (5,)]),
    ("i,i,i->i", [(6,), (6,), (6,)]),
    ("ab,bc,cd,de->ea", [(2, 3), (3, 4), (4, 5), (5, 2)]),
])
def test_einsum_with_three_or_more_operands(spec, shapes, dtype):
    check(lambda *ops: np.einsum(spec, *ops), normal(*shapes, dtype=dtype),
          rtol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ufuncs_with_where(dtype):
    def fn(x, y):
        out = np.zeros_like(x)
        np.add(x, y, out=out, where=x > 0)
        buf = np.full(x.shape, -1.0, dtype)
        np.sqrt(x, out=buf, where=x > 0)
        np.multiply(x, 2, out=x, where=y < 0)          # in place, masked
        return out, buf, x
    check(fn, normal(7, 7, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_fortran_order_reshape_and_ravel(dtype):
    def fn(a):
        return (a.reshape(4, 15, order="F"), np.reshape(a, (-1, 6), order="F"),
                a.ravel(order="F"), a.flatten("F"), np.ravel(a[0], order="F"),
                a[:, 1].reshape(-1, order="F"))
    check(fn, normal((3, 4, 5), dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, wrap", [((4, 4), False), ((3, 5), False), ((7, 3), False),
                                         ((7, 3), True), ((3, 3, 3), False)])
def test_fill_diagonal(shape, wrap, dtype):
    def fn(a, v):
        m = a.copy()
        np.fill_diagonal(m, v[0], wrap=wrap)
        n = np.zeros(shape, dtype)
        np.fill_diagonal(n, v, wrap=wrap)            # values repeat along the diagonal
        np.fill_diagonal(a, 5.0, wrap=wrap)          # an argument, in place
        return m, n, a
    check(fn, normal(shape, 2, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_ufunc_out_into_an_array_created_inside(dtype):
    def fn(x):
        buf = np.zeros(x.shape, dtype)
        r = np.add(x, 1, out=buf)
        assert r is buf                               # NumPy returns `out` itself
        np.multiply(buf, x, out=buf)
        return buf
    check(fn, normal(6, dtype=dtype))


cover("np.insert", "joining", F, test=_T + "test_insert",
      note="insertion indices known when tracing (a traced obj is a TracingError)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_insert(dtype):
    def fn(X):
        return (np.insert(X, np.repeat(np.arange(1, 4), 2), 0, axis=1),   # a dilation
                np.insert(X[0, 0], [1, 1, 3], -1.0, axis=0), np.insert(X[0, 0, 0], 2, [7.0, 8.0]),
                np.insert(X[0], 1, X[0, 0, 0], axis=1), np.insert(X[0, 0], slice(0, 4, 2), 9.0),
                np.insert(X, [-1, 0], X[..., :1] * 2, axis=-1))
    check(fn, normal((2, 4, 5, 3), dtype=dtype))
