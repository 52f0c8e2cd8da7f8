"""Padding, tiling and windows: np.pad, np.tile, np.repeat, np.flip / fliplr / flipud,
np.rot90, sliding_window_view and as_strided (read-only views expressed as gathers)."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import check, check_many, cover, make, param, short

WINDOWS = "padding, tiling and windows"
DTYPES = [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.uint64, np.bool_)]
swv = np.lib.stride_tricks.sliding_window_view


def _p(name, dtypes=DTYPES):
    return [param(d, name=name, dtype=d, id=short(d)) for d in dtypes]


def _inputs(dt):
    return (make((7,), dt, "step"), make((4, 5), dt, "T"), make((2, 3, 4), dt, "negstep"),
            make((), dt), make((0,), dt), make((3, 0), dt), make((1,), dt))


def _pads():
    out = {}
    for mode in ("constant", "edge", "wrap", "reflect", "symmetric"):
        out[f"{mode} 2"] = (lambda m: lambda x1, x2, x3, x0, e, e2, s1: np.pad(x1, 2, mode=m))(mode)
        out[f"{mode} (3, 9) (past the length)"] = (
            lambda m: lambda x1, x2, x3, x0, e, e2, s1: np.pad(x1, (3, 9), mode=m))(mode)
        out[f"{mode} per axis"] = (lambda m: lambda x1, x2, x3, x0, e, e2, s1:
                                   np.pad(x2, ((1, 2), (0, 3)), mode=m))(mode)
        out[f"{mode} 3-D"] = (lambda m: lambda x1, x2, x3, x0, e, e2, s1:
                              np.pad(x3, ((0, 1), (2, 0), (1, 1)), mode=m))(mode)
        out[f"{mode} size 1"] = (lambda m: lambda x1, x2, x3, x0, e, e2, s1:
                                 np.pad(s1, (2, 3), mode=m))(mode)
        out[f"{mode} 0-d"] = (lambda m: lambda x1, x2, x3, x0, e, e2, s1: np.pad(x0, 2, mode=m))(mode)
        out[f"{mode} zero widths"] = (lambda m: lambda x1, x2, x3, x0, e, e2, s1:
                                      np.pad(x2, 0, mode=m))(mode)
        out[f"{mode} (3,0) pad axis 0"] = (lambda m: lambda x1, x2, x3, x0, e, e2, s1:
                                           np.pad(e2, ((1, 1), (0, 0)), mode=m))(mode)
    out["constant values per axis"] = lambda x1, x2, x3, x0, e, e2, s1: np.pad(
        x2, ((1, 2), (2, 1)), constant_values=((1, 0), (0, 1)))
    out["constant value (2,)"] = lambda x1, x2, x3, x0, e, e2, s1: np.pad(
        x2, 1, constant_values=(0, 1))
    out["constant empty"] = lambda x1, x2, x3, x0, e, e2, s1: np.pad(e, 3, constant_values=1)
    out["constant (3,0) both axes"] = lambda x1, x2, x3, x0, e, e2, s1: np.pad(e2, 1)
    out["symmetric reflect_type even"] = lambda x1, x2, x3, x0, e, e2, s1: np.pad(
        x1, 3, mode="symmetric", reflect_type="even")
    out["pad fused"] = lambda x1, x2, x3, x0, e, e2, s1: np.pad(x1, 1, mode="edge")[1:] != x1[0]
    return out


PADS = _pads()


@pytest.mark.parametrize("dtype", _p("np.pad"))
def test_pad(dtype):
    check_many(PADS, *_inputs(dtype))


@pytest.mark.parametrize("befores", [
    pytest.param((0, 2, 7, 11), id="sample"),
    pytest.param(tuple(range(12)), id="exhaustive", marks=pytest.mark.slow)])   # 11 s
def test_pad_widths_against_numpy(befores):
    """(before, after) for before in `befores` (exhaustively: all of [0, 11]), after in 0, 5,
    10, on lengths 1..5: periodic index formulas for the modes that NumPy builds by repeated
    reflection / wrapping."""
    xs = [make((n,), np.int64, key=(n,)) for n in range(1, 6)]

    def body(*xs):        # one result per mode and length (at most 64 results per call)
        return {f"{m} {len(x)}": np.concatenate([np.pad(x, (b, a), mode=m)
                                                 for b in befores for a in range(0, 12, 5)])
                for m in ("wrap", "reflect", "symmetric", "edge") for x in xs}
    check(body, *xs)


def test_pad_errors():
    x = make((4, 5), np.int8)
    for f in (lambda x: np.pad(x, -1), lambda x: np.pad(x, 1, mode="edge", constant_values=1),
              lambda x: np.pad(x, 1, mode="nope"), lambda x: np.pad(x, ((1, 2), (1, 2), (1, 2))),
              lambda x: np.pad(x[:0], 1, mode="edge"), lambda x: np.pad(x, 1, constant_values=300),
              lambda x: np.pad(x, 1, constant_values=np.int64(300)),
              lambda x: np.pad(x, 1, mode="reflect", reflect_type="sideways")):
        check(f, x)
    for mode in ("mean", "linear_ramp"):
        with pytest.raises(fl.TracingError, match=mode):
            fl.compile(lambda x: np.pad(x, 1, mode=mode))(x)
    check(lambda x: np.pad(x, 1, constant_values=1.7), x)


cover("np.pad", WINDOWS, DTYPES, test="test_windows.py::test_pad",
      note="modes constant, edge, wrap, reflect, symmetric: one gather with index arithmetic "
           "per padded axis (fused); reflect_type='odd', linear_ramp, maximum, mean, median, "
           "minimum, empty and function modes raise TracingError")

TILES = {
    "tile(x1, 3)": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x1, 3),
    "tile(x1, (2, 2))": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x1, (2, 2)),
    "tile(x2, (2, 1, 3))": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x2, (2, 1, 3)),
    "tile(x3, 2)": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x3, 2),
    "tile(x2, 1)": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x2, 1),
    "tile(x0, 4)": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x0, 4),
    "tile(x0, ())": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x0, ()),
    "tile(x1, 0)": lambda x1, x2, x3, x0, e, e2, s1: np.tile(x1, 0),
    "tile(e2, 3)": lambda x1, x2, x3, x0, e, e2, s1: np.tile(e2, 3),
    "repeat(x1, 3)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x1, 3),
    "repeat(x2, 2) (flat)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x2, 2),
    "repeat(x2, 2, axis=0)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x2, 2, axis=0),
    "repeat(x3, 3, axis=-1)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x3, 3, axis=-1),
    "repeat(x2, [1, 0, 2, 1], axis=0)": lambda x1, x2, x3, x0, e, e2, s1:
        np.repeat(x2, [1, 0, 2, 1], axis=0),
    "repeat(x1, [2]) (broadcast)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x1, [2]),
    "repeat(x1, 0)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x1, 0),
    "repeat(x0, 2)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x0, 2),
    "x2.repeat(2, 1)": lambda x1, x2, x3, x0, e, e2, s1: x2.repeat(2, 1),
    "repeat(e2, 2, axis=1)": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(e2, 2, axis=1),
    "repeat fused": lambda x1, x2, x3, x0, e, e2, s1: np.repeat(x1, 2)[::2] == x1,
}


@pytest.mark.parametrize("dtype", _p("np.tile"))
def test_tile_and_repeat(dtype):
    check_many(TILES, *_inputs(dtype))


def test_tile_repeat_errors():
    x = make((4, 5), np.float32)
    for f in (lambda x: np.tile(x, -1), lambda x: np.repeat(x, -1),
              lambda x: np.repeat(x, 2.5), lambda x: np.repeat(x, np.array([1., 1, 1, 1]), 0),
              lambda x: np.repeat(x, [1.5, 2, 0, 1], axis=0), lambda x: np.repeat(x, [1, 2], 0),
              lambda x: np.repeat(x, [1, -1, 1, 1], axis=0), lambda x: np.repeat(x, 2, axis=2)):
        check(f, x)
    with pytest.raises(fl.TracingError, match="repeats"):
        fl.compile(lambda x, r: np.repeat(x, r, axis=0))(x, np.arange(4))
    check(lambda x, r: np.repeat(x, r, axis=1), x, 3)       # a Python int: specialised


cover("np.tile", WINDOWS, DTYPES, test="test_windows.py::test_tile_and_repeat",
      note="broadcast and reshape views, no copy before the consumer")
cover("np.repeat", WINDOWS, DTYPES, test="test_windows.py::test_tile_and_repeat",
      note="static repeats: a scalar (views) or a constant array (a gather); traced repeats "
           "give a data-dependent size (TracingError)")

FLIPS = {
    "flip(x1)": lambda x1, x2, x3, x0, e, e2, s1: np.flip(x1),
    "flip(x2)": lambda x1, x2, x3, x0, e, e2, s1: np.flip(x2),
    "flip(x3, 1)": lambda x1, x2, x3, x0, e, e2, s1: np.flip(x3, 1),
    "flip(x3, (0, -1))": lambda x1, x2, x3, x0, e, e2, s1: np.flip(x3, (0, -1)),
    "flip(x0) (scalar)": lambda x1, x2, x3, x0, e, e2, s1: np.flip(x0),
    "flip(e2)": lambda x1, x2, x3, x0, e, e2, s1: np.flip(e2),
    "fliplr(x2)": lambda x1, x2, x3, x0, e, e2, s1: np.fliplr(x2),
    "fliplr(x3)": lambda x1, x2, x3, x0, e, e2, s1: np.fliplr(x3),
    "flipud(x1)": lambda x1, x2, x3, x0, e, e2, s1: np.flipud(x1),
    "flipud(x3)": lambda x1, x2, x3, x0, e, e2, s1: np.flipud(x3),
    "rot90(x2)": lambda x1, x2, x3, x0, e, e2, s1: np.rot90(x2),
    "rot90(x2, 2)": lambda x1, x2, x3, x0, e, e2, s1: np.rot90(x2, 2),
    "rot90(x2, -1)": lambda x1, x2, x3, x0, e, e2, s1: np.rot90(x2, -1),
    "rot90(x2, 4)": lambda x1, x2, x3, x0, e, e2, s1: np.rot90(x2, 4),
    "rot90(x3, 1, (2, 0))": lambda x1, x2, x3, x0, e, e2, s1: np.rot90(x3, 1, (2, 0)),
    "rot90(x3, 3, (1, 2))": lambda x1, x2, x3, x0, e, e2, s1: np.rot90(x3, 3, (1, 2)),
    "rot90(e2)": lambda x1, x2, x3, x0, e, e2, s1: np.rot90(e2),
}


@pytest.mark.parametrize("dtype", _p("np.flip"))
def test_flips(dtype):
    check_many(FLIPS, *_inputs(dtype))


def test_flip_errors_and_views():
    x = make((4, 5), np.float64)
    for f in (lambda x: np.fliplr(x[0]), lambda x: np.flipud(x[0, 0]), lambda x: np.flip(x, 2),
              lambda x: np.rot90(x, 1, (0, 0)), lambda x: np.rot90(x, 1, (0,)),
              lambda x: np.rot90(x, 1, (0, 2))):
        check(f, x)

    def write_through(x):         # flips are views, as in NumPy: writes reach the base
        np.flip(x, 0)[0] = 1.0
        np.rot90(x)[0, 0] = 2.0
        return x
    check(write_through, x)


for _n in ("np.flip", "np.fliplr", "np.flipud", "np.rot90"):
    cover(_n, WINDOWS, DTYPES, test="test_windows.py::test_flips",
          note="views: writes through them reach the base, as in NumPy")

WINDOW_VIEWS = {
    "swv(x1, 3)": lambda x1, x2, x3, x0, e, e2, s1: swv(x1, 3),
    "swv(x1, 7)": lambda x1, x2, x3, x0, e, e2, s1: swv(x1, 7),
    "swv(x1, 0)": lambda x1, x2, x3, x0, e, e2, s1: swv(x1, 0),
    "swv(x2, (2, 3))": lambda x1, x2, x3, x0, e, e2, s1: swv(x2, (2, 3)),
    "swv(x2, 2, axis=0)": lambda x1, x2, x3, x0, e, e2, s1: swv(x2, 2, axis=0),
    "swv(x3, (2, 2), axis=(2, 2))": lambda x1, x2, x3, x0, e, e2, s1: swv(x3, (2, 2), axis=(2, 2)),
    "swv(x3, (2, 3), axis=(-1, 1))": lambda x1, x2, x3, x0, e, e2, s1:
        swv(x3, (2, 3), axis=(-1, 1)),
    "swv(x0, ())": lambda x1, x2, x3, x0, e, e2, s1: swv(x0, ()),
    "swv(e, 0)": lambda x1, x2, x3, x0, e, e2, s1: swv(e, 0),
    "swv(e2, 2, axis=0)": lambda x1, x2, x3, x0, e, e2, s1: swv(e2, 2, axis=0),
    "moving max": lambda x1, x2, x3, x0, e, e2, s1: swv(x1, 3).max(axis=-1),
    "window sums": lambda x1, x2, x3, x0, e, e2, s1: swv(x2, (2, 2)).sum(axis=(-1, -2)),
    "as_strided windows": lambda x1, x2, x3, x0, e, e2, s1: np.lib.stride_tricks.as_strided(
        x1, (5, 3), (x1.strides[0], x1.strides[0])),
    "as_strided transpose": lambda x1, x2, x3, x0, e, e2, s1: np.lib.stride_tricks.as_strided(
        np.ascontiguousarray(x2), (5, 4), (x2.itemsize, 5 * x2.itemsize)),
    "as_strided repeat rows": lambda x1, x2, x3, x0, e, e2, s1: np.lib.stride_tricks.as_strided(
        np.ascontiguousarray(x1), (3, 7), (0, x1.itemsize)),
    "as_strided default": lambda x1, x2, x3, x0, e, e2, s1: np.lib.stride_tricks.as_strided(
        np.ascontiguousarray(x3)),
}


@pytest.mark.parametrize("dtype", _p("np.lib.stride_tricks.sliding_window_view"))
def test_window_views(dtype):
    """as_strided cases on C-contiguous arrays (a traced array's memory is C-ordered), so
    that NumPy reads the same elements."""
    dt = np.dtype(dtype)
    args = [np.ascontiguousarray(a) if a.ndim else a for a in _inputs(dt)]
    check_many(WINDOW_VIEWS, *args, tol="reduce")


def test_window_views_are_read_only():
    x = make((8,), np.float64)

    def write_window(x):
        w = swv(x, 3)
        w[0, 0] = 1.0
        return w
    with pytest.raises(fl.TracingError, match="read-only"):
        fl.compile(write_window)(x)

    def write_strided(x):
        w = np.lib.stride_tricks.as_strided(x, (6, 3), (8, 8))
        w += 1
        return w
    with pytest.raises(fl.TracingError, match="read-only"):
        fl.compile(write_strided)(x)
    with pytest.raises(fl.TracingError, match="writeable"):
        fl.compile(lambda x: swv(x, 3, writeable=True))(x)
    for f in (lambda x: swv(x, 9), lambda x: swv(x, -1), lambda x: swv(x, (2, 2)),
              lambda x: swv(x, (2, 2), axis=0)):
        check(f, x)
    with pytest.raises(ValueError, match="outside"):
        fl.compile(lambda x: np.lib.stride_tricks.as_strided(x, (8, 2), (8, 8)))(x)
    with pytest.raises(fl.TracingError, match="multiples"):
        fl.compile(lambda x: np.lib.stride_tricks.as_strided(x, (2,), (4,)))(x)
    # copies of windows are ordinary arrays
    check(lambda x: swv(x, 3).copy() * 2, x)


def _ast(x, shape, strides):
    # through the module attribute, which fastlaunch intercepts while it traces
    return np.lib.stride_tricks.as_strided(x, shape, strides)


def test_as_strided_of_views_reads_the_memory_they_view():
    """A view's .strides and as_strided over it are those of NumPy's view of a C-contiguous
    array: as_strided may read any element of the viewed array's memory from the view's
    first element (backwards from v[9], a column view's rows), and only outside that
    memory is it refused."""
    v, x = make((20,), np.float64), make((5, 6), np.float64)
    check(lambda v: _ast(v[9:], (10,), (-8,)), v)
    check(lambda v: (_ast(v[::-1], (5,), v[::-1].strides), _ast(v[::2], (3, 2), (16, 8)),
                     _ast(v.reshape(4, 5)[1:], (3, 2), (40, 8)), v[3:][::-2].strides), v)
    check(lambda x: (_ast(x[:, 1:], x[:, 1:].shape, x[:, 1:].strides), _ast(x[2], (2, 6), (48, 8)),
                     _ast(x.T, (6, 5), x.T.strides), x[1:, ::2].strides, x[None, 1].strides), x)
    with pytest.raises(ValueError, match="outside"):
        fl.compile(lambda v: _ast(v[9:], (11,), (-8,)))(v)
    with pytest.raises(ValueError, match="outside"):
        fl.compile(lambda v: _ast(v[9:], (12,), (8,)))(v)


cover("np.lib.stride_tricks.sliding_window_view", WINDOWS, DTYPES,
      test="test_windows.py::test_window_views",
      note="read-only, as in NumPy: one gather with index arithmetic, never a copy; "
           "writeable=True raises TracingError")
cover("np.lib.stride_tricks.as_strided", WINDOWS, DTYPES,
      test="test_windows.py::test_window_views",
      note="read-only (a write raises TracingError); strides are taken over the memory of "
           "the array a value views, as a C-contiguous array (what a traced array's .strides "
           "reports: NumPy's strides for a view of a C-contiguous argument; an argument of "
           "another layout is taken as C-contiguous); strides that reach outside that memory "
           "raise ValueError (NumPy would read other memory); "
           "only calls through np.lib.stride_tricks.as_strided are intercepted (not a name "
           "imported with `from numpy.lib.stride_tricks import as_strided`)")
