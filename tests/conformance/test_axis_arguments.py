"""Axes given as 0-d integer arrays (np.array(1), np.int64(1)) as NumPy takes them
(operator.index): reductions, shifts and flips, against NumPy on the trace and a replay."""
import numpy as np
import pytest

import fastlaunch as fl

CASES = {
    "roll": lambda x, ax: np.roll(x, 3, axis=ax),
    "sum": lambda x, ax: np.sum(x, axis=ax),
    "mean": lambda x, ax: x.mean(axis=ax),
    "max": lambda x, ax: np.max(x, axis=ax),
    "cumsum": lambda x, ax: np.cumsum(x, axis=ax),
    "flip": lambda x, ax: np.flip(x, axis=ax),
    "argmax": lambda x, ax: np.argmax(x, axis=ax),
    "sort": lambda x, ax: np.sort(x, axis=ax),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("axis", [np.array(0), np.array(1), np.array(-1), np.int64(1)],
                         ids=["a0", "a1", "a-1", "i64"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axis_as_a_0d_array(name, axis, dtype):
    fn = CASES[name]
    f = fl.compile(lambda x: fn(x, axis))
    rng = np.random.default_rng(3)
    for _ in range(2):                       # the trace, then a replay with new values
        x = rng.standard_normal((4, 5)).astype(dtype)
        np.testing.assert_allclose(f(x), fn(x, axis), rtol=1e-6)
