"""Nothing falls back to NumPy at replay time: a profiler counts every call into NumPy (its
Python functions, its C functions and ufuncs) while a compiled function replays, and finds
none.  The trace (first call) may use NumPy freely (static shapes, constants); the replayed
calls run bytecode and compiled kernels only."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fastlaunch as fl

NUMPY_DIR = os.path.dirname(np.__file__)


def _numpy_calls(fn, *args, calls=3) -> list:
    seen = []

    def profile(frame, event, arg):
        if event == "call":
            if frame.f_code.co_filename.startswith(NUMPY_DIR):
                seen.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        elif event == "c_call":
            mod = getattr(arg, "__module__", None) or ""
            owner = getattr(arg, "__self__", None)
            if mod.startswith("numpy") or isinstance(arg, np.ufunc) or \
                    isinstance(owner, (np.ndarray, np.generic, np.ufunc)) or \
                    (isinstance(owner, type(np)) and owner.__name__.startswith("numpy")):
                seen.append(repr(arg))

    sys.setprofile(profile)
    try:
        for _ in range(calls):
            fn(*args)
    finally:
        sys.setprofile(None)
    return seen


_rng = np.random.default_rng(0)
_x = _rng.standard_normal((6, 40)).astype(np.float32)
_v = _rng.standard_normal(9)
_sorted = np.sort(_rng.standard_normal(50))
_i = _rng.integers(-50, 50, (5, 33)).astype(np.int16)

CASES = {
    "sort": (lambda x: np.sort(x), [_x]),
    "sort axis0": (lambda x: np.sort(x, axis=0), [_x]),
    "argsort": (lambda x: np.argsort(x, kind="stable"), [_i]),
    "argsort default": (lambda x: np.argsort(x, axis=None), [_x]),
    "partition": (lambda x: (np.partition(x, 3), np.argpartition(x, 2, axis=0)), [_i]),
    "searchsorted": (lambda a, v: (np.searchsorted(a, v), np.searchsorted(a, v, "right")),
                     [_sorted, _v]),
    "median": (lambda x: (np.median(x), np.median(x, axis=1)), [_x]),
    "quantile": (lambda x: (np.quantile(x, [0.1, 0.9], axis=0), np.percentile(x, 30)), [_x]),
    "method sort": (lambda x: (x.sort(), x.argsort())[1], [_x.copy()]),
    "outer": (lambda a, v: (np.subtract.outer(a, v), np.less.outer(v, a[:3])), [_sorted, _v]),
    "diagonal trace diag": (lambda x, v: (np.diagonal(x, 2), np.trace(x), np.diag(v, -1)),
                            [_x, _v]),
    "tril triu kron": (lambda x, i: (np.tril(x, -2), np.triu(i), np.kron(i[:2, :3], x[:2])),
                       [_x, _i]),
    "cross meshgrid ix_": (lambda x, v: (np.cross(x[:, :3], v[:3]), np.meshgrid(v, x[0]),
                                         x[np.ix_(np.array([0, 2]), np.array([1, 3]))]),
                           [_x, _v]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_no_numpy_call_at_replay(name):
    fn, args = CASES[name]
    compiled = fl.compile(fn)
    compiled(*[a.copy() for a in args])           # the trace: NumPy allowed here
    calls = _numpy_calls(compiled, *[a.copy() for a in args])
    assert calls == [], f"{name}: NumPy called at replay: {calls[:10]}"
    assert len(compiled.traces) == 1


def test_the_counter_sees_numpy():
    """The profiler does catch NumPy calls (so an empty count means something)."""
    calls = _numpy_calls(lambda x: np.sort(x) + np.median(x), _x, calls=1)
    assert any("sort" in c for c in calls) and any("median" in c for c in calls), calls
