"""Shifts and differences: np.roll, np.diff, np.ediff1d, np.gradient, np.convolve,
np.correlate, over dtypes, 0-d / empty / odd / non-contiguous inputs and axes."""
from __future__ import annotations

import numpy as np
import pytest

from .harness import FLOATS, SOME, check, check_many, cover, make, param, short, slow_except

SHIFTS = "shifts and differences"
DTYPES = [np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.uint8, np.int64, np.bool_)]


def _p(name, dtypes=DTYPES):
    return [param(d, name=name, dtype=d, id=short(d)) for d in dtypes]


def _inputs(dt, special=True):
    return (make((33,), dt, "step", special=special), make((5, 7), dt, "T", special=special),
            make((3, 4, 5), dt, "negstep", special=special), make((), dt, special=special),
            make((0,), dt), make((3, 0), dt))


ROLLS = {
    "roll(x1, 3)": lambda x1, x2, x3, x0, e, e2: np.roll(x1, 3),
    "roll(x1, -40)": lambda x1, x2, x3, x0, e, e2: np.roll(x1, -40),
    "roll(x1, 33)": lambda x1, x2, x3, x0, e, e2: np.roll(x1, 33),
    "roll(x2, 5) (flat)": lambda x1, x2, x3, x0, e, e2: np.roll(x2, 5),
    "roll(x2, 2, axis=0)": lambda x1, x2, x3, x0, e, e2: np.roll(x2, 2, axis=0),
    "roll(x2, (1, -2), (0, 1))": lambda x1, x2, x3, x0, e, e2: np.roll(x2, (1, -2), axis=(0, 1)),
    "roll(x3, 3, axis=(0, 2))": lambda x1, x2, x3, x0, e, e2: np.roll(x3, 3, axis=(0, 2)),
    "roll(x3, [1, 1], [2, 2])": lambda x1, x2, x3, x0, e, e2: np.roll(x3, [1, 1], axis=[2, 2]),
    "roll(x3, -1, axis=-2)": lambda x1, x2, x3, x0, e, e2: np.roll(x3, -1, axis=-2),
    "roll(x0, 1)": lambda x1, x2, x3, x0, e, e2: np.roll(x0, 1),
    "roll(e, 2)": lambda x1, x2, x3, x0, e, e2: np.roll(e, 2),
    "roll(e2, 1, axis=1)": lambda x1, x2, x3, x0, e, e2: np.roll(e2, 1, axis=1),
    "roll(e2, 1, axis=0)": lambda x1, x2, x3, x0, e, e2: np.roll(e2, 1, axis=0),
    "roll fused": lambda x1, x2, x3, x0, e, e2: np.roll(x1, 1) == x1,
}


@pytest.mark.parametrize("dtype", _p("np.roll"))
def test_roll(dtype):
    check_many(ROLLS, *_inputs(dtype))


def test_roll_errors_and_traced_shift():
    x = make((5, 7), np.float64)
    for f in (lambda x: np.roll(x, 1, axis=2), lambda x: np.roll(x, (1, 2, 3), axis=(0, 1)),
              lambda x: np.roll(x, [[1]], axis=0)):
        check(f, x)
    # a Python int shift argument: the trace specialises on its value
    check(lambda x, s: np.roll(x, s, axis=1), x, 3)


cover("np.roll", SHIFTS, DTYPES, test="test_shifts.py::test_roll",
      note="a gather with index arithmetic: fuses into its consumer; shifts must be static (a "
           "Python int argument is specialised on)")

DIFFS = {
    "diff(x1)": lambda x1, x2, x3, x0, e, e2: np.diff(x1),
    "diff(x1, 3)": lambda x1, x2, x3, x0, e, e2: np.diff(x1, 3),
    "diff(x1, 40) (empty)": lambda x1, x2, x3, x0, e, e2: np.diff(x1, 40),
    "diff(x2, axis=0)": lambda x1, x2, x3, x0, e, e2: np.diff(x2, axis=0),
    "diff(x2, 2, axis=-1)": lambda x1, x2, x3, x0, e, e2: np.diff(x2, 2, axis=-1),
    "diff(x3, axis=1, prepend=0)": lambda x1, x2, x3, x0, e, e2: np.diff(x3, axis=1, prepend=0),
    "diff(x3, append=x3[..., :1])": lambda x1, x2, x3, x0, e, e2:
        np.diff(x3, append=x3[..., :1]),
    "diff(x2, prepend=1.5, append=x2[:, :2])": lambda x1, x2, x3, x0, e, e2:
        np.diff(x2, prepend=1.5, append=x2[:, :2]),
    "diff(e)": lambda x1, x2, x3, x0, e, e2: np.diff(e),
    "diff(e2, axis=0)": lambda x1, x2, x3, x0, e, e2: np.diff(e2, axis=0),
    "diff(x1, 0)": lambda x1, x2, x3, x0, e, e2: np.diff(x1, 0),
    "ediff1d(x2)": lambda x1, x2, x3, x0, e, e2: np.ediff1d(x2),
    "ediff1d(x0)": lambda x1, x2, x3, x0, e, e2: np.ediff1d(x0),
    "ediff1d(x1, to_begin=[1, 2], to_end=3)": lambda x1, x2, x3, x0, e, e2:
        np.ediff1d(x1, to_begin=np.array([1, 2], x1.dtype), to_end=np.array(3, x1.dtype)),
    "ediff1d(e, to_end=x1[:2])": lambda x1, x2, x3, x0, e, e2: np.ediff1d(e, to_end=x1[:2]),
}


@pytest.mark.parametrize("dtype", _p("np.diff"))
def test_diff_and_ediff1d(dtype):
    check_many(DIFFS, *_inputs(dtype))


def test_diff_errors():
    x = make((5, 7), np.int8)
    for f in (lambda x: np.diff(x[0, 0]), lambda x: np.diff(x, -1), lambda x: np.diff(x, axis=2),
              lambda x: np.ediff1d(x, to_begin=1.5), lambda x: np.ediff1d(x > 0, to_end=[True]),
              lambda x: np.diff(x, prepend=x[:2, :2])):
        check(f, x)


cover("np.diff", SHIFTS, DTYPES, test="test_shifts.py::test_diff_and_ediff1d")
cover("np.ediff1d", SHIFTS, DTYPES, test="test_shifts.py::test_diff_and_ediff1d")

_COORDS = np.cumsum([0.5, 1.0, 0.25, 2.0, 0.75, 1.5, 1.0])       # 7 non-uniform points
GRADIENTS = {
    "gradient(x1)": lambda x1, x2, x3: np.gradient(x1),
    "gradient(x1, 0.5)": lambda x1, x2, x3: np.gradient(x1, 0.5),
    "gradient(x1, edge_order=2)": lambda x1, x2, x3: np.gradient(x1, edge_order=2),
    "gradient(x2) (tuple)": lambda x1, x2, x3: np.gradient(x2),
    "gradient(x2, axis=1)": lambda x1, x2, x3: np.gradient(x2, axis=1),
    "gradient(x2, 2.0, 3.0)": lambda x1, x2, x3: np.gradient(x2, 2.0, 3.0),
    "gradient(x2, axis=-1, edge_order=2)": lambda x1, x2, x3:
        np.gradient(x2, 0.25, axis=-1, edge_order=2),
    "gradient(x3, axis=(0, 2))": lambda x1, x2, x3: np.gradient(x3, axis=(0, 2)),
    "gradient(x2, 1.0, coords)": lambda x1, x2, x3: np.gradient(x2, 1.0, _COORDS),
    "gradient(x2, 1.0, coords, edge_order=2)": lambda x1, x2, x3:
        np.gradient(x2, 1.0, _COORDS, edge_order=2),
    "gradient(x2, [0, 2, 4, 6, 8], 1)": lambda x1, x2, x3:
        np.gradient(x2, np.arange(0, 10, 2), 1),
    "gradient fused": lambda x1, x2, x3: np.gradient(x1) * 2 + 1,
}


@pytest.mark.parametrize("dtype", _p("np.gradient", [d for d in DTYPES if d.kind != "b"]))
def test_gradient(dtype):
    x1 = make((33,), dtype, "step")
    x2 = make((5, 7), dtype, "T")
    x3 = make((3, 4, 5), dtype, "negstep")
    check_many(GRADIENTS, x1, x2, x3, tol="arith")


def test_gradient_traced_spacing_and_errors():
    x = make((6, 5), np.float64)
    check(lambda x, h: np.gradient(x, h, axis=0), x, np.float64(0.3), tol="arith")
    check(lambda x, h: np.gradient(x, h, edge_order=2), x, 0.7, tol="arith")
    # traced coordinates take NumPy's non-uniform formula (equal up to rounding)
    check(lambda x, c: np.gradient(x, c, axis=0), x, np.cumsum(make((6,), np.float64,
                                                                     domain=(0.5, 2))),
          tol="arith", atol=1e-12)
    for f in (lambda x: np.gradient(x > 0), lambda x: np.gradient(x[:1], axis=0),
              lambda x: np.gradient(x[:2], axis=0, edge_order=2),
              lambda x: np.gradient(x, edge_order=3), lambda x: np.gradient(x, 1.0, 2.0, 3.0),
              lambda x: np.gradient(x, np.ones(3), axis=0)):
        check(f, x)


cover("np.gradient", SHIFTS, [d for d in DTYPES if d.kind != "b"],
      test="test_shifts.py::test_gradient",
      note="uniform or scalar spacing, constant coordinate arrays, edge_order 1 and 2; traced "
           "coordinate arrays always use the non-uniform formula (NumPy switches to the uniform "
           "one when they are equally spaced: equal up to rounding)")

_NAMES = "avwus"
CORRELATIONS = {}
for _mode in ("full", "same", "valid"):
    for _an, _vn in (("a", "v"), ("v", "a"), ("a", "w"), ("w", "a"), ("v", "u"), ("u", "u"),
                     ("s", "v")):
        _i, _j = _NAMES.index(_an), _NAMES.index(_vn)
        for _fn in (np.convolve, np.correlate):
            CORRELATIONS[f"{_fn.__name__}({_an}, {_vn}, {_mode})"] = \
                (lambda fn, i, j, m: lambda *xs: fn(xs[i], xs[j], m))(_fn, _i, _j, _mode)
CORRELATIONS["convolve default"] = lambda a, v, w, u, s: np.convolve(a, v)
CORRELATIONS["correlate default"] = lambda a, v, w, u, s: np.correlate(a, w)
CORRELATIONS["moving average"] = lambda a, v, w, u, s: np.convolve(a, np.ones(3) / 3, "valid")


# int8, uint8, bool and float16 took 6-30 s each (every mode and operand order compiled
# anew, the 8-bit ones longest): slow
@pytest.mark.parametrize("dtype", slow_except(_p("np.convolve", SOME), np.float32, np.float64,
                                              np.int64, np.uint64))
def test_convolve_and_correlate(dtype):
    """Lengths 17, 4, 6 (even), 1 and a 0-d operand, each as first and second operand, every
    mode: NumPy swaps the operands when the second is longer (and reverses a correlation)."""
    dt = np.dtype(dtype)
    a = make((17,), dt, "step", special=False)
    v = make((4,), dt, special=False, key=("v",))
    w = make((6,), dt, "neg", special=False, key=("w",))
    u = make((1,), dt, special=False, key=("u",))
    s = make((), dt, special=False, key=("s",))
    with np.errstate(all="ignore"):
        scale = max(float(np.max(np.abs(x.astype(np.float64)), initial=0)) for x in (a, v, w))
    eps = float(np.finfo(dt).eps) if dt.kind == "f" else 0.0
    check_many(CORRELATIONS, a, v, w, u, s, tol="reduce", atol=32 * eps * scale * scale)


def test_convolve_errors():
    a = make((5,), np.float64)
    for f in (lambda a: np.convolve(a, a[:0]), lambda a: np.convolve(a[:0], a),
              lambda a: np.correlate(a, a[:0]), lambda a: np.convolve(a, a, "middle"),
              lambda a: np.convolve(a.reshape(5, 1), a)):
        check(f, a)


for _n in ("np.convolve", "np.correlate"):
    cover(_n, SHIFTS, SOME, test="test_shifts.py::test_convolve_and_correlate",
          note="one reduction over the (static) shorter length: sum of shifted products "
               "(floats summed in another order than NumPy's dot)")
cover("np.convolve", SHIFTS, FLOATS)
