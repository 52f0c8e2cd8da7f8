"""Outer products and matrix helpers: ufunc.outer, np.diag, np.diagonal, np.trace, np.tril,
np.triu, np.kron, np.cross, np.meshgrid, np.indices, np.ix_ (views and broadcasts in the IR
where NumPy's result is a view or a broadcast; fused elementwise kernels otherwise)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fastlaunch as fl

from .harness import ALL, SOME, check_many, cover, make, param, short

CAT = "matrix helpers"
TEST = "test_matrix_helpers.py::"

OUTER_UFUNCS = [np.add, np.subtract, np.multiply, np.maximum, np.less, np.equal,
                np.true_divide, np.bitwise_and, np.arctan2]
for _u in OUTER_UFUNCS:
    cover(f"np.{_u.__name__}.outer", CAT, SOME, test=TEST + "test_ufunc_outer",
          note="a broadcast of a's axes against b's: no copy of either")


@pytest.mark.parametrize(("ufunc", "dtype"), [
    param(u, d, name=f"np.{u.__name__}.outer", dtype=d, id=f"{u.__name__}-{short(d)}")
    for u in OUTER_UFUNCS for d in SOME])
def test_ufunc_outer(ufunc, dtype):
    dt = np.dtype(dtype)
    a = make((5,), dt)
    b = make((3, 4), dt, "T")
    z = make((), dt)
    e = make((0,), dt)
    tol = "transc" if ufunc in (np.arctan2, np.true_divide) else "exact"
    check_many({
        "1d x 2d": lambda a, b, z, e: ufunc.outer(a, b),
        "2d x 1d": lambda a, b, z, e: ufunc.outer(b, a[::-2]),
        "0d": lambda a, b, z, e: ufunc.outer(z, a),
        "empty": lambda a, b, z, e: ufunc.outer(e, a),
        "python scalar": lambda a, b, z, e: ufunc.outer(a, 2),
    }, a, b, z, e, tol=tol)


for _name in ("np.diagonal", "x.diagonal", "np.trace", "x.trace", "np.diag"):
    cover(_name, CAT, ALL, test=TEST + "test_diagonal_trace_diag",
          note="np.diagonal is a view (axes moved last, merged, sliced with step m + 1)"
          if "diagonal" in _name else None)


@pytest.mark.parametrize("dtype", [param(d, name="np.diagonal", dtype=d, id=short(d)) for d in ALL])
def test_diagonal_trace_diag(dtype):
    dt = np.dtype(dtype)
    m = make((5, 7), dt, "T")
    c = make((3, 4, 6), dt, "negstep")
    v = make((4,), dt)
    e = make((0, 3), dt)
    tol = "reduce" if dt.kind == "f" else "exact"
    variants = {
        "diagonal": lambda m, c, v, e: np.diagonal(m),
        "diagonal +2": lambda m, c, v, e: np.diagonal(m, 2),
        "diagonal -3": lambda m, c, v, e: np.diagonal(m, -3),
        "diagonal past": lambda m, c, v, e: np.diagonal(m, 9),
        "diagonal axes": lambda m, c, v, e: np.diagonal(c, 1, 2, 0),
        "diagonal axes neg": lambda m, c, v, e: np.diagonal(c, -1, axis1=-1, axis2=1),
        "diagonal empty": lambda m, c, v, e: np.diagonal(e),
        "method diagonal": lambda m, c, v, e: m.T.diagonal(1),
        "diagonal expr": lambda m, c, v, e: np.diagonal(m * 2 if dt.kind != "b" else ~m),
        "diag 1d": lambda m, c, v, e: np.diag(v),
        "diag 1d k": lambda m, c, v, e: np.diag(v[::-1], 2),
        "diag 1d -k": lambda m, c, v, e: np.diag(v, -1),
        "diag 2d": lambda m, c, v, e: np.diag(m, 1),
        "diag empty": lambda m, c, v, e: np.diag(v[:0]),
        "trace": lambda m, c, v, e: np.trace(m),
        "trace offset": lambda m, c, v, e: np.trace(m, -1),
        "trace axes": lambda m, c, v, e: np.trace(c, 0, 2, 1),
        "trace dtype": lambda m, c, v, e: np.trace(m, dtype=np.float64),
        "method trace": lambda m, c, v, e: c.trace(axis1=1, axis2=2),
    }
    check_many(variants, m, c, v, e, tol=tol, atol=1e-2 if dt == np.float16 else 0.0)


def test_diagonal_errors():
    check_many({
        "1d": lambda v: np.diagonal(v),
        "same axes": lambda v: np.diagonal(v.reshape(2, 3), 0, 1, 1),
        "bad axis": lambda v: np.diagonal(v.reshape(2, 3), 0, 0, 2),
        "diag 3d": lambda v: np.diag(v.reshape(1, 2, 3)),
    }, make((6,), np.float64))


for _name in ("np.tril", "np.triu"):
    cover(_name, CAT, ALL, test=TEST + "test_tril_triu")


@pytest.mark.parametrize("dtype", [param(d, name="np.tril", dtype=d, id=short(d)) for d in ALL])
def test_tril_triu(dtype):
    dt = np.dtype(dtype)
    m = make((5, 7), dt, "T")
    s = make((2, 3, 4), dt, "step")
    v = make((4,), dt)
    e = make((3, 0), dt)
    check_many({
        "tril": lambda m, s, v, e: np.tril(m),
        "tril k": lambda m, s, v, e: np.tril(m, 2),
        "tril -k": lambda m, s, v, e: np.tril(m, -1),
        "triu": lambda m, s, v, e: np.triu(m),
        "triu -k": lambda m, s, v, e: np.triu(m, -2),
        "triu batched": lambda m, s, v, e: np.triu(s, 1),
        "tril batched": lambda m, s, v, e: np.tril(s),
        "tril 1d": lambda m, s, v, e: np.tril(v),
        "triu empty": lambda m, s, v, e: np.triu(e),
        "0d": lambda m, s, v, e: np.tril(m[0, 0]),
    }, m, s, v, e, signed_zero=True)


cover("np.kron", CAT, SOME, test=TEST + "test_kron")


@pytest.mark.parametrize("dtype", [param(d, name="np.kron", dtype=d, id=short(d)) for d in SOME])
def test_kron(dtype):
    dt = np.dtype(dtype)
    a = make((2, 3), dt, "T")
    b = make((3, 2), dt)
    v = make((4,), dt)
    c = make((2, 1, 2), dt)
    check_many({
        "2d 2d": lambda a, b, v, c: np.kron(a, b),
        "1d 2d": lambda a, b, v, c: np.kron(v, b),
        "2d 1d": lambda a, b, v, c: np.kron(a, v[::-1]),
        "3d 2d": lambda a, b, v, c: np.kron(c, a),
        "scalar": lambda a, b, v, c: np.kron(a, a[0, 0]),
    }, a, b, v, c)


cover("np.cross", CAT, SOME, test=TEST + "test_cross",
      note="3- and 2-vectors (deprecated by NumPy 2.0, warned), axisa/axisb/axisc/axis; "
           "NumPy's own order of products and differences")


@pytest.mark.parametrize("dtype", [param(d, name="np.cross", dtype=d, id=short(d)) for d in SOME])
def test_cross(dtype):
    dt = np.dtype(dtype)
    a = make((4, 3), dt)
    b = make((3,), dt)
    c = make((3, 5), dt, "T")
    d2 = make((4, 2), dt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check_many({
            "3x3": lambda a, b, c, d2: np.cross(a, b),
            "axes": lambda a, b, c, d2: np.cross(c, a, axisa=0),
            "axisc": lambda a, b, c, d2: np.cross(a, c.T, axisc=0),
            "axis": lambda a, b, c, d2: np.cross(c, c[::-1], axis=0),
            "2x2": lambda a, b, c, d2: np.cross(d2, d2[::-1]),
            "2x3": lambda a, b, c, d2: np.cross(d2, b),
            "3x2": lambda a, b, c, d2: np.cross(a, d2[0]),
            "0d error": lambda a, b, c, d2: np.cross(a[0, 0], b),
            "bad size": lambda a, b, c, d2: np.cross(c, b),
        }, a, b, c, d2, tol="arith", signed_zero=False)


for _name in ("np.meshgrid", "np.ix_", "np.indices"):
    cover(_name, CAT, SOME, test=TEST + "test_grids",
          note="np.indices is evaluated while tracing (it takes only a static shape): a "
               "constant" if _name == "np.indices" else "broadcasts of the inputs: no copies")


@pytest.mark.parametrize("dtype", [param(d, name="np.meshgrid", dtype=d, id=short(d))
                                   for d in SOME])
def test_grids(dtype):
    dt = np.dtype(dtype)
    x = make((4,), dt)
    y = make((3,), dt)
    z = make((2, 1), dt)
    m = make((4, 3), dt)
    i = make((2,), np.int64, values=[3, 0])
    j = make((3,), np.int64, values=[-1, 0, 1])
    check_many({
        "xy": lambda x, y, z, m, i, j: np.meshgrid(x, y),
        "ij": lambda x, y, z, m, i, j: np.meshgrid(x, y, indexing="ij"),
        "3 sparse": lambda x, y, z, m, i, j: np.meshgrid(x, y, z, sparse=True),
        "3 xy": lambda x, y, z, m, i, j: np.meshgrid(x, y[::-1], z),
        "one": lambda x, y, z, m, i, j: np.meshgrid(x),
        "bad indexing": lambda x, y, z, m, i, j: np.meshgrid(x, y, indexing="yx"),
        "ix_": lambda x, y, z, m, i, j: np.ix_(i, j),
        "ix_ index": lambda x, y, z, m, i, j: m[np.ix_(i, j)],
        "ix_ 2d error": lambda x, y, z, m, i, j: np.ix_(m),
        "indices": lambda x, y, z, m, i, j: np.indices((2, 3)) + (x[0] > 0),
        "indices sparse": lambda x, y, z, m, i, j: np.indices((4, 3), sparse=True)[0] * m,
    }, x, y, z, m, i, j)


cover("np.fft", CAT, test=TEST + "test_fft_not_implemented")
_FFTS = [np.fft.fft, np.fft.rfft, np.fft.ifft, np.fft.fft2]


@pytest.mark.parametrize("fn", [param(f, name="np.fft", id=f.__name__) for f in _FFTS])
def test_fft_not_implemented(fn):
    fl.compile(lambda x: fn(x))(make((4, 4), np.float64))


@pytest.mark.parametrize("fn", _FFTS)
def test_fft_is_a_clear_error(fn):
    """np.fft stays unsupported (complex results): a TracingError that names it."""
    x = make((4, 4), np.float64)
    with pytest.raises(fl.TracingError, match=rf"np\.fft\.{fn.__name__} .*complex"):
        fl.compile(lambda x: fn(x))(x)
