"""Constructs whose output size depends on the data raise fastlaunch.TracingError naming the
construct (never a silent wrong answer, never another exception)."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl

from .harness import check, cover, make, param

DD = "data-dependent size"

CASES = [
    # (registry name, body, words the message must contain (any of))
    ("x[mask] (boolean-mask selection)", lambda x: x[x > 0], ("mask",)),
    ("x[mask] (boolean-mask selection)", lambda x: x[x > 0] * 2, ("mask",)),
    ("x[mask] (boolean-mask selection)", lambda x: len(x[x > 0]), ("mask",)),
    ("x[mask] (boolean-mask selection)", lambda x: x[x > 0].max(), ("mask",)),
    ("x[mask] (boolean-mask selection)", lambda x: x[:, x[0] > 0], ("mask",)),
    ("np.nonzero", lambda x: np.nonzero(x), ("nonzero",)),
    ("ndarray.nonzero", lambda x: x.nonzero(), ("nonzero",)),
    ("np.where(cond) (one argument)", lambda x: np.where(x > 0), ("where",)),
    ("np.argwhere", lambda x: np.argwhere(x), ("argwhere",)),
    ("np.flatnonzero", lambda x: np.flatnonzero(x), ("flatnonzero", "nonzero")),
    ("np.unique", lambda x: np.unique(x), ("unique",)),
    ("np.extract", lambda x: np.extract(x > 0, x), ("extract",)),
    ("np.compress", lambda x: np.compress(x[0] > 0, x, axis=1), ("compress",)),
    ("np.count_nonzero -> shape", lambda x: np.zeros(np.count_nonzero(x)), ("count_nonzero", "int(",
                                                                            "index", "value")),
    ("np.trim_zeros", lambda x: np.trim_zeros(x[0]), ("trim_zeros",)),
]


@pytest.mark.parametrize(("name", "body", "words"),
                         [param(n, b, w, name=n, id=f"{n}-{i}") for i, (n, b, w) in enumerate(CASES)])
def test_data_dependent_size_raises_tracing_error(name, body, words):
    f = fl.compile(body)
    x = make((4, 5), np.float64)
    try:
        f(x)
    except fl.TracingError as err:
        msg = str(err).lower()
        assert any(w.lower() in msg for w in words), f"message does not name the construct: {err}"
    except Exception as err:   # noqa: BLE001
        pytest.fail(f"raised {type(err).__name__} instead of TracingError: {err}")
    else:
        pytest.fail("no TracingError: a data-dependent size was traced")


for _n, _, _ in CASES:
    cover(_n, DD, test="test_data_dependent.py::test_data_dependent_size_raises_tracing_error",
          note="raises fastlaunch.TracingError naming the construct")


@pytest.mark.parametrize("dtype", [param(d, name="x[mask] = v (boolean-mask assignment)", dtype=d)
                                   for d in (np.float32, np.int64)])
def test_boolean_mask_assignment_with_scalar(dtype):
    """x[mask] = scalar keeps the shape (np.where): no data-dependent size involved."""
    def body(x):
        x[x > 0] = 0
        y = x.copy()
        y[y < -1] += 1
        return x, y
    check(body, make((4, 5), dtype))


cover("x[mask] = v (boolean-mask assignment)", DD, [np.float32, np.int64],
      test="test_data_dependent.py::test_boolean_mask_assignment_with_scalar",
      note="with a scalar value: same shape, expressible as np.where")


@pytest.mark.parametrize("dtype", [param(d, name="x[mask] = v (boolean-mask assignment)", dtype=d)
                                   for d in (np.float32, np.float64, np.int64)])
def test_boolean_mask_assignment_forms(dtype):
    """Assignments through a mask over leading axes, with values broadcast over the rest, and
    every in-place operator: all keep the shape."""
    def body(x, row):
        m = x[:, 0] > 0
        x[m] = row                 # a row broadcast over the unmasked trailing axis
        x[x < -1] -= 2
        x[x > 3] *= 3
        y = x.copy()
        y[np.abs(y) < 1] = y.dtype.type(7)
        return x, y
    check(body, make((6, 5), dtype), make((5,), dtype))


@pytest.mark.parametrize("dtype", [param(d, name="x[mask].sum() (reductions of a selection)",
                                         dtype=d) for d in (np.float32, np.float64, np.int64,
                                                            np.bool_)])
def test_reductions_of_boolean_selection(dtype):
    """A reduction of x[mask] has a fixed shape: a reduction of where(mask, x, identity)."""
    def body(x):
        m = x > 0 if x.dtype != np.bool_ else x
        out = [x[m].sum(), np.sum(x[~m]), x[m].prod(), x[m].any(), np.all(x[m]),
               np.count_nonzero(x[m])]
        if x.dtype != np.bool_:
            out += [x[m].mean(), x[x[:, 0] > 0].sum(axis=0), np.mean(x[x[:, 1] > 0], axis=0)]
        return tuple(out)
    x = make((6, 5), dtype)
    check(body, x, tol="reduce")
    check(body, np.zeros_like(x), tol="reduce")          # empty selections


cover("x[mask].sum() (reductions of a selection)", "reductions", [np.float32, np.float64,
                                                                  np.int64, np.bool_],
      test="test_data_dependent.py::test_reductions_of_boolean_selection",
      note="sum/prod/mean/any/all/count_nonzero of x[mask] (axis None or 0) lower to "
           "where(mask, x, identity); max/min raise (NumPy raises on an empty selection)")
