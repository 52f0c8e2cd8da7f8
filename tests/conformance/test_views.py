"""Basic slicing (steps, negative steps, None, ...), view functions, joining (copies) and
writes through views (slice assignment on inputs and on arrays made inside the function)."""
from __future__ import annotations

import numpy as np
import pytest

from .harness import SOME, check, check_many, cover, make, param, short

VIEWS, JOIN = "shapes and views", "joining"


def _p(name):
    return [param(d, name=name, dtype=d, id=short(d)) for d in SOME]


SLICES = {
    "x[1:5:2]": lambda x, y: x[1:5:2],
    "x[::-1]": lambda x, y: x[::-1],
    "x[::-3]": lambda x, y: x[::-3],
    "x[5:1:-1]": lambda x, y: x[5:1:-1],
    "x[-3:]": lambda x, y: x[-3:],
    "x[10:20] (empty)": lambda x, y: x[10:20],
    "x[::100]": lambda x, y: x[::100],
    "x[2]": lambda x, y: x[2],
    "x[-1, ::2]": lambda x, y: x[-1, ::2],
    "x[..., 1]": lambda x, y: x[..., 1],
    "x[None]": lambda x, y: x[None],
    "x[:, None, ::-2]": lambda x, y: x[:, None, ::-2],
    "x[..., None]": lambda x, y: x[..., None],
    "x[np.newaxis, ..., 0]": lambda x, y: x[np.newaxis, ..., 0],
    "x[1, 2] (scalar)": lambda x, y: x[1, 2],
    "x[-1, -1, ...]": lambda x, y: x[-1, -1, ...],
    "x[()]": lambda x, y: x[()],
    "x[::2][1:][::-1]": lambda x, y: x[::2][1:][::-1],
    "x.T[::-1, 1:]": lambda x, y: x.T[::-1, 1:],
    "y[:, ::-1, 1]": lambda x, y: y[:, ::-1, 1],
    "y[1:, :, ::3]": lambda x, y: y[1:, :, ::3],
    "y[..., ::-1][0]": lambda x, y: y[..., ::-1][0],
    "slice + arithmetic": lambda x, y: x[1:, ::2] * 2 + x[:-1, 1::2],
    "x[1:2, 3:4] (size 1)": lambda x, y: x[1:2, 3:4],
}


SLICING = "basic slicing (steps, negative steps, None/np.newaxis, ..., ints)"


@pytest.mark.parametrize("dtype", _p(SLICING))
def test_basic_slicing(dtype):
    x = make((6, 7), dtype, "T")
    y = make((3, 4, 5), dtype, "negstep")
    check_many(SLICES, x, y)


cover(SLICING, VIEWS, SOME, test="test_views.py::test_basic_slicing")

SCALARVIEWS = "views of 0-d values (x.T, x[()], reshape(x, ()))"


@pytest.mark.parametrize("dtype", _p(SCALARVIEWS))
def test_views_of_scalars(dtype):
    """A ufunc on a 0-d array gives a NumPy scalar; views of it stay scalars in NumPy; views of
    0-d arrays stay 0-d arrays."""
    x = make((), dtype)
    check_many({
        "(-x).T": lambda x: np.invert(x).T if x.dtype == np.bool_ else (-x).T,
        "np.transpose(x * x)": lambda x: np.transpose(x * x),
        "(x * x)[()]": lambda x: (x * x)[()],
        "np.reshape(x * x, ())": lambda x: np.reshape(x * x, ()),
        "(x * x)[...]": lambda x: (x * x)[...],
        "x.T": lambda x: x.T,
        "x[()]": lambda x: x[()],
        "x[...]": lambda x: x[...],
        "x.reshape(())": lambda x: x.reshape(()),
        "x[None]": lambda x: x[None],
    }, x)


cover(SCALARVIEWS, VIEWS, SOME, test="test_views.py::test_views_of_scalars")


VIEW_FUNCS = {
    "reshape(-1)": lambda x, y: x.reshape(-1),
    "reshape(7, 6)": lambda x, y: x.reshape(7, 6),
    "reshape((2, -1, 3))": lambda x, y: x.reshape((2, -1, 3)),
    "np.reshape(y, (4, 15))": lambda x, y: np.reshape(y, (4, 15)),
    "reshape of slice": lambda x, y: x[::2].reshape(3, 7),
    "reshape(1, 42, 1)": lambda x, y: x.reshape(1, 42, 1),
    "ravel": lambda x, y: x.ravel(),
    "np.ravel(y)": lambda x, y: np.ravel(y),
    "flatten": lambda x, y: y.flatten(),
    "transpose()": lambda x, y: y.transpose(),
    "transpose(1, 0, 2)": lambda x, y: y.transpose(1, 0, 2),
    "np.transpose(y, (2, 0, 1))": lambda x, y: np.transpose(y, (2, 0, 1)),
    "transpose((-1, 0, 1))": lambda x, y: y.transpose((-1, 0, 1)),
    ".T": lambda x, y: x.T,
    ".mT": lambda x, y: y.mT,
    "swapaxes(0, 2)": lambda x, y: np.swapaxes(y, 0, 2),
    "x.swapaxes(-1, 0)": lambda x, y: x.swapaxes(-1, 0),
    "moveaxis(0, -1)": lambda x, y: np.moveaxis(y, 0, -1),
    "moveaxis([0, 1], [-1, -2])": lambda x, y: np.moveaxis(y, [0, 1], [-1, -2]),
    "expand_dims(0)": lambda x, y: np.expand_dims(x, 0),
    "expand_dims(-1)": lambda x, y: np.expand_dims(x, -1),
    "expand_dims((0, 2))": lambda x, y: np.expand_dims(x, (0, 2)),
    "squeeze()": lambda x, y: np.squeeze(x.reshape(1, 6, 1, 7)),
    "squeeze(axis=2)": lambda x, y: np.squeeze(x.reshape(1, 6, 1, 7), axis=2),
    "x.squeeze(0)": lambda x, y: x[None].squeeze(0),
    "broadcast_to((4, 6, 7))": lambda x, y: np.broadcast_to(x, (4, 6, 7)),
    "broadcast_to column": lambda x, y: np.broadcast_to(x[:, :1], (6, 5)),
    "broadcast_to 0-d": lambda x, y: np.broadcast_to(x[0, 0], (2, 3)),
    "atleast_1d(0-d)": lambda x, y: np.atleast_1d(x[0, 0]),
    "atleast_2d(1-d)": lambda x, y: np.atleast_2d(x[0]),
    "reshape(T) then slice": lambda x, y: x.T.reshape(-1)[::5],
    "chain": lambda x, y: np.moveaxis(y[::-1].reshape(3, 20).T[2:, None], 0, -1).squeeze(),
}


@pytest.mark.parametrize("dtype", _p("np.reshape"))
def test_view_functions(dtype):
    x = make((6, 7), dtype, "T")
    y = make((3, 4, 5), dtype, "step")
    check_many(VIEW_FUNCS, x, y)


for _n in ("reshape", "ravel", "ndarray.flatten", "transpose", "ndarray.T", "ndarray.mT", "swapaxes",
           "moveaxis", "expand_dims", "squeeze", "broadcast_to", "atleast_1d", "atleast_2d"):
    cover(_n if _n.startswith("ndarray") else f"np.{_n}", VIEWS, SOME,
          test="test_views.py::test_view_functions")


def test_view_errors():
    x = make((6, 7), np.float32)
    for f in (lambda x: x.reshape(5, 8), lambda x: x[7], lambda x: x[0, 0, 0],
              lambda x: np.squeeze(x, axis=0), lambda x: np.broadcast_to(x, (7, 7)),
              lambda x: x.transpose(0, 0), lambda x: x[..., ...]):
        check(f, x)


JOINS = {
    "concatenate ax0": lambda a, b, c, s: np.concatenate([a, b]),
    "concatenate ax1": lambda a, b, c, s: np.concatenate((a, c), axis=1),
    "concatenate ax-1": lambda a, b, c, s: np.concatenate((a, c, a), axis=-1),
    "concatenate None": lambda a, b, c, s: np.concatenate([a, c], axis=None),
    "concatenate empty part": lambda a, b, c, s: np.concatenate([a, a[:0]]),
    "concatenate dtype": lambda a, b, c, s: np.concatenate([a, b], dtype=np.float64),
    "concatenate mixed dtypes": lambda a, b, c, s: np.concatenate([a, s]),
    "stack": lambda a, b, c, s: np.stack([a, b]),
    "stack ax-1": lambda a, b, c, s: np.stack((a, b, a), axis=-1),
    "stack ax1": lambda a, b, c, s: np.stack([a, b], axis=1),
    "hstack 2-D": lambda a, b, c, s: np.hstack([a, c]),
    "hstack 1-D": lambda a, b, c, s: np.hstack([a[0], b[1], c[2]]),
    "vstack 2-D": lambda a, b, c, s: np.vstack([a, b, a]),
    "vstack 1-D": lambda a, b, c, s: np.vstack([a[0], b[1]]),
    "concatenate of views": lambda a, b, c, s: np.concatenate([a[::-1], b[:, ::-1]]),
    "joined then reduced": lambda a, b, c, s: np.concatenate([a, b]).sum(axis=0),
    "stack of scalars": lambda a, b, c, s: np.stack([a[0, 0], b[1, 1]]),
}


@pytest.mark.parametrize("dtype", _p("np.concatenate"))
def test_joining(dtype):
    a = make((4, 5), dtype, "T")
    b = make((4, 5), dtype, "neg", key=("b",))
    c = make((4, 3), dtype, key=("c",))
    s = make((2, 5), np.int16, key=("s",))
    check_many(JOINS, a, b, c, s, tol="reduce")


for _n in ("concatenate", "stack", "hstack", "vstack"):
    cover(f"np.{_n}", JOIN, SOME, test="test_views.py::test_joining")


def test_joining_errors():
    a = make((4, 5), np.float32)
    for f in (lambda a: np.concatenate([a, a.T]), lambda a: np.stack([a, a[:2]]),
              lambda a: np.concatenate([a[0, 0], a[0, 1]])):
        check(f, a)


# ---- writes through views -----------------------------------------------------------------------
WRITES = {
    "x[1::2] = 0": lambda x, v: _set(x, (slice(1, None, 2),), 0),
    "x[::-1][:3] = v": lambda x, v: _set(x[::-1], (slice(None, 3),), v[:3, :1]),
    "x[..., 0] += 1": lambda x, v: _iadd(x, (Ellipsis, 0), 1),
    "x.T[0] = v[0]": lambda x, v: _set(x.T, (0,), v[:, 0]),
    "x[None, 2] = v[2]": lambda x, v: _set(x, (None, 2), v[2]),
    "x[:] = x[::-1] (overlap)": lambda x, v: _set(x, (slice(None),), x[::-1]),
    "x[1:] = x[:-1] (overlap)": lambda x, v: _set(x, (slice(1, None),), x[:-1]),
    "x[:5, :5] += x[:5, :5].T (overlap)": lambda x, v: _iadd(x, (slice(0, 5), slice(0, 5)), x[:5, :5].T),
    "x.fill(3)": lambda x, v: (x.fill(3), x)[1],
    "np.add(x, v, out=x)": lambda x, v: np.add(x, v, out=x),
    "x += v": lambda x, v: _iadd(x, (Ellipsis,), v),
    "np.multiply(x[::2], 2, out=x[::2])": lambda x, v: np.multiply(x[::2], 2, out=x[::2]),
    "x[...] = v": lambda x, v: _set(x, (Ellipsis,), v),
}


def _set(t, key, value):
    t[key] = value
    return t


def _iadd(t, key, value):
    t[key] += value
    return t


ASSIGN = "slice assignment (x[...] = v, x[a:b:c] += v, through views)"


@pytest.mark.parametrize("dtype", _p(ASSIGN))
@pytest.mark.parametrize("label", list(WRITES))
def test_slice_assignment_on_input(label, dtype):
    """Writes into an argument (through views) replay into the caller's array; the function
    also returns the written view, and a reduction that reads the written argument.  Every
    write is a copy or one IEEE operation and the reduction a max: all exact, so compared
    bit for bit (NaNs included)."""
    f = WRITES[label]
    x = make((6, 7), dtype, "T")
    v = make((6, 7), dtype, key=("v",))
    check(lambda x, v: (f(x, v), x.max(axis=0)), x, v, tol="exact")


@pytest.mark.parametrize("dtype", _p(ASSIGN))
def test_slice_assignment_on_new_array(dtype):
    x = make((6, 7), dtype, "T")

    def body(x):
        z = np.zeros_like(x)
        z[1:] = x[:-1]
        z[0] = x[-1]
        z[:, ::3] = 1
        w = np.empty_like(x[0])
        w[...] = x[2]
        w[::-1] = w
        u = x.copy()
        u[u.shape[0] // 2:, 2] = 5
        return z, w, u
    check(body, x)


cover(ASSIGN, VIEWS, SOME,
      test="test_views.py::test_slice_assignment_on_input",
      note="writes into arguments replay into the caller's array; overlapping reads and writes "
           "(x[1:] = x[:-1]) see the old values, as in NumPy")


EMPTYNEW = "empty slice of an inserted axis (x[None][:0])"


@pytest.mark.parametrize("dtype", _p(EMPTYNEW))
def test_empty_slice_of_inserted_axis(dtype):
    """Slicing a size-1 axis that came from None / expand_dims / reshape down to size 0."""
    x = make((3,), dtype)
    check_many({
        "x[None][:0]": lambda x: x[None][:0],
        "np.expand_dims(x, 0)[1:]": lambda x: np.expand_dims(x, 0)[1:],
        "x.reshape(1, 3)[:0]": lambda x: x.reshape(1, 3)[:0],
        "x[:, None][:, 1:]": lambda x: x[:, None][:, 1:],
        "x[:1].reshape(-1)[:0]": lambda x: x[:1].reshape(-1)[:0],
    }, x)


cover(EMPTYNEW, VIEWS, SOME, test="test_views.py::test_empty_slice_of_inserted_axis")


def _set(x, key, v):
    x[key] = v
    return x


# Writes through reshaped views reach the base (they were silently lost before: the view of a
# reshape was a copy).
WRITE_THROUGH_RESHAPE = {
    "y = x.reshape; y[i, j] = v": lambda x: (_set(x.reshape(2, 6), (0, 1), 5), x),
    "x.reshape(...).T[i, j] = v": lambda x: (_set(x.reshape(2, 6).T, (5, 1), 9), x),
    "x.reshape(...)[:, 1:] = v": lambda x: (_set(x.reshape(3, 4)[:, 1:], Ellipsis, 1), x),
    "y = x.reshape; y += 1": lambda x: (x.reshape(4, 3).__iadd__(1), x),
    "x.reshape(a).reshape(b)[i] = v": lambda x: (_set(x.reshape(2, 6).reshape(3, 4), (2, 0), 7), x),
    "x[::2].reshape(...)[i] = v": lambda x: (_set(x[::2].reshape(3, 2), (1, 0), 4), x),
    "x.reshape(...)[:, ::2].reshape(-1)": lambda x: x.reshape(3, 4)[:, ::2].reshape(-1) * 2,
    "return (x, y) with y a written reshape": lambda x: (x, _set(x.reshape(2, 6), (1, 1), 8)),
    "x.flat[a:b] = v": lambda x: (_set(x.reshape(3, 4).flat, slice(1, 7), 2), x)[1],
    "x.flat[[i, j]] = v": lambda x: (_set(x.reshape(3, 4).flat, [0, 11], 3), x)[1],
}


@pytest.mark.parametrize("dtype", SOME)
def test_writes_through_reshaped_views(dtype):
    for _name, body in WRITE_THROUGH_RESHAPE.items():
        check(body, make((12,), dtype))


cover("x.reshape(...)[...] = v (write through a reshaped view)", "views", SOME,
      test="test_views.py::test_writes_through_reshaped_views")


TRACER_ATTRIBUTES = {
    "x.flat[i]": lambda x: x.reshape(3, 4).flat[5],
    "x.flat[a:b]": lambda x: x.reshape(3, 4).flat[2:9] * 2,
    "iter(x.flat)": lambda x: np.stack(list(x.reshape(3, 4).flat)),
    "x.imag": lambda x: x.imag + x,
    "x.conj()": lambda x: x.conj() * 2,
    "x.view(same-size dtype)": lambda x: x.view({1: np.int8, 2: np.int16, 4: np.int32,
                                                 8: np.int64}[x.itemsize]) if x.dtype.kind
    != "b" else x,
    "x.view(np.ndarray)": lambda x: x.view(np.ndarray) + x,
    "x.nbytes, x.itemsize": lambda x: x * (x.nbytes + x.itemsize) if x.dtype.kind != "b" else x,
}


@pytest.mark.parametrize("dtype", SOME)
def test_tracer_attributes(dtype):
    for _name, body in TRACER_ATTRIBUTES.items():
        check(body, make((12,), dtype))


cover("ndarray.flat / .imag / .conj / .view(dtype)", "views", SOME,
      test="test_views.py::test_tracer_attributes")


def test_unsupported_methods_name_themselves():
    import fastlaunch as fl
    with pytest.raises(AttributeError, match=r"x.tofile \(ndarray.tofile\) is not "
                                             r"supported by fastlaunch"):
        fl.compile(lambda x: x.tofile("f"))(np.arange(3.0))
    with pytest.raises(fl.TracingError, match=r"x.item\(\) needs the value"):
        fl.compile(lambda x: x.item(0))(np.arange(3.0) + 1j)    # no weak complex scalar
