"""Functions with `assert` statements for tests/jit/test_realcode_patterns.py.  They live in a
module of their own because pytest rewrites the asserts of test modules into other bytecode;
here they stay the statements Python compiles (LOAD_ASSERTION_ERROR), as in user code."""
import numpy as np


def step_with_assert(x, y):
    norm = np.sqrt(np.sum(x * x))
    assert norm != 0
    y += 1.0                   # an in-place update after the check
    return x / norm


def bounded_total(x):
    total = 0.0
    for i in range(x.shape[0]):
        assert x[i] > -5 and x[i] < 5
        total = total + x[i]
    assert not np.isnan(total)
    return total


def either_positive(x):
    assert x[0] > 0 or x[1] > 0
    return x * 2


def all_positive(x):
    assert x > 0
    return x


def two_asserts(x):
    assert x.min() >= 0
    assert x.sum() < 100
    return x + 1


def halve(x):
    assert x.max() < 1e6
    return x / 2
