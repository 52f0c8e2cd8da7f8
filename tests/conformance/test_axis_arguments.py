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


VIEWS = {"transpose": lambda v: np.transpose(v), "transpose_empty": lambda v: np.transpose(v, ()),
         "reshape": lambda v: np.reshape(v, ()), "squeeze": lambda v: np.squeeze(v),
         "ravel": lambda v: np.ravel(v), "expand_dims": lambda v: np.expand_dims(v, 0)}


@pytest.mark.parametrize("name", sorted(VIEWS))
@pytest.mark.parametrize("value", [2.5, 3, True, np.float64(2.5), np.int32(3), np.bool_(True),
                                   np.array(2.5)], ids=repr)
def test_views_of_scalars_are_what_numpy_returns(name, value):
    """A Python scalar's views are 0-d arrays (NumPy takes np.asarray first); a NumPy
    scalar's stay NumPy scalars (found by the slow random-DAG test: np.transpose(2.5, ()))."""
    fn = VIEWS[name]
    want, got = fn(value), fl.compile(fn)(value)
    assert type(got) is type(want), (type(got), type(want))
    assert np.asarray(got).dtype == np.asarray(want).dtype
    assert np.shape(got) == np.shape(want) and np.array_equal(got, want)
