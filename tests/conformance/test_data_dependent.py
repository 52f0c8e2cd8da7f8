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
    ("x[mask] (boolean-mask selection)", lambda x: x[np.isfinite(x)].sum(), ("mask",)),
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
