"""Arrays constructed inside the function with static shapes, alone and combined with traced
inputs: zeros ones full empty *_like arange linspace eye."""
from __future__ import annotations

import numpy as np
import pytest

from .harness import SOME, check, check_many, cover, make, param, short

CON = "construction"

CONSTRUCT = {
    "zeros + x": lambda x, s: np.zeros(x.shape, x.dtype) + x,
    "zeros (returned)": lambda x, s: np.zeros((2, 3)),
    "zeros int shape": lambda x, s: np.zeros(4, dtype=np.int8),
    "ones * x": lambda x, s: np.ones((5, 7), dtype=np.float32) * x,
    "ones (returned)": lambda x, s: np.ones((3,), bool),
    "full(2.5) * x": lambda x, s: np.full(x.shape, 2.5) * x,
    "full int": lambda x, s: np.full((2, 2), 7, dtype=np.uint16),
    "empty shape/dtype": lambda x, s: np.empty((4, 2), np.int32).shape,
    "zeros_like": lambda x, s: np.zeros_like(x),
    "ones_like": lambda x, s: np.ones_like(x),
    "ones_like dtype": lambda x, s: np.ones_like(x, dtype=np.float64),
    "zeros_like shape": lambda x, s: np.zeros_like(x, shape=(2, 3)),
    "full_like 3": lambda x, s: np.full_like(x, 3),
    "full_like traced fill": lambda x, s: np.full_like(x, s),
    "full_like traced fill dtype": lambda x, s: np.full_like(x, s, dtype=np.float64),
    "full_like x[0,0]": lambda x, s: np.full_like(x, x[0, 0]),
    "arange + x[0]": lambda x, s: np.arange(x.shape[1]) + x[0],
    "arange dtype": lambda x, s: np.arange(2, 20, 3, dtype=x.dtype),
    "arange float": lambda x, s: np.arange(0.0, 1.0, 0.125) * x[0, 0],
    "linspace * x[:, 0]": lambda x, s: np.linspace(0, 1, x.shape[0]) * x[:, 0],
    "linspace endpoint": lambda x, s: np.linspace(-1, 1, 7, endpoint=False, dtype=np.float32),
    "eye @ x": lambda x, s: np.eye(5, 7, dtype=x.dtype) * x,
    "eye k": lambda x, s: np.eye(4, k=1),
    "identity": lambda x, s: np.identity(3, dtype=np.int16) + x[:3, :3],
}


@pytest.mark.parametrize("dtype", [param(d, name="np.zeros", dtype=d, id=short(d)) for d in SOME])
def test_construction(dtype):
    x = make((5, 7), dtype, "T")
    s = make((1,), dtype, key=("s",))[0]          # a NumPy scalar: a runtime parameter
    check_many(CONSTRUCT, x, s, tol="arith")


def test_empty_like_dtype_and_shape():
    """np.empty / empty_like: contents are undefined, only dtype and shape are compared."""
    x = make((5, 7), np.float32, "T")
    check(lambda x: (np.empty_like(x), np.empty_like(x, dtype=np.int8), np.empty((3, 0)),
                     np.empty_like(x[0]), np.empty_like(x, shape=(2, 2))), x, values=False)


for _n in ("zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
           "empty_like", "arange", "linspace", "eye", "identity"):
    cover(f"np.{_n}", CON, SOME, test="test_construction.py::test_construction",
          note="static shapes; np.empty/np.empty_like contents not compared" if "empty" in _n
          else None)


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_full_with_traced_fill_value(dtype):
    """np.full(shape, traced_value) inside fn (frontend/numpy/trace_buffers.py intercepts it while
    tracing), and
    np.full_like(x, value, shape=...)."""
    check(lambda x, s: np.full((2, 3), s) + x[0, 0], make((5, 7), dtype), make((1,), dtype)[0])
    check(lambda x, s: np.full((2, 3), s, dtype=np.float64) * x[0, 0], make((5, 7), dtype),
          make((1,), dtype)[0])
    check(lambda x, s: np.full_like(x, s, shape=(2, 3)) + x[0, 0], make((5, 7), dtype),
          make((1,), dtype)[0])


cover("np.full", CON, test="test_construction.py::test_full_with_traced_fill_value",
      note="also with a traced fill value")


def test_zeros_returned_is_fresh():
    """A constant result must be a fresh array on every call (the caller owns it)."""
    import fastlaunch as fl
    f = fl.compile(lambda x: (np.zeros(3), x + 1))
    a, _ = f(np.ones(2))
    a[0] = 5
    b, _ = f(np.ones(2))
    assert b[0] == 0 and a is not b
