"""Nothing falls back to NumPy at replay time (issue 12, acceptance 5): for each function the
tracer implements in frontend/numpy/ / frontend/special.py, a replayed call makes no call into NumPy or
SciPy (their functions and ufuncs are swapped for counting wrappers, and a profiler sees every
Python-level and builtin call), never runs the traced body again and never enters
fastlaunch's Python code (the Cython dispatcher runs the recorded bytecode)."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import fastlaunch as fl

sp = pytest.importorskip("scipy.special")
swv = np.lib.stride_tricks.sliding_window_view

_rng = np.random.default_rng(3)
X = _rng.normal(size=(6, 8))
Y = X + _rng.normal(scale=1e-7, size=(6, 8))
V = _rng.normal(size=17)
L = _rng.integers(0, 5, 40)
M = X > 0


def _put(a, i):
    np.put(a, i, -1.0)
    return a


def _place(a, m):
    np.place(a, m, [1.0, 2.0])
    return a


def _copyto(a, b, m):
    np.copyto(a, b, where=m)
    return a


CASES = {
    "bincount": (lambda q, v: (np.bincount(q, minlength=5), np.bincount(q, v[:1].repeat(40), 5)),
                 (L, V)),
    "histogram": (lambda v: np.histogram(v, 4, range=(-1, 1)), (V,)),
    "histogram edges": (lambda v: np.histogram(v, [-2.0, 0.0, 0.5, 2.0]), (V,)),
    "roll": (lambda x: np.roll(x, 3, axis=1), (X,)),
    "diff": (lambda x: np.diff(x, n=2, prepend=0.0, append=x[:, -1:]), (X,)),
    "ediff1d": (lambda v: np.ediff1d(v, to_begin=[1.0]), (V,)),
    "gradient": (lambda x: np.gradient(x, 0.5, axis=1), (X,)),
    "convolve": (lambda v: np.convolve(v, v[:3], "same"), (V,)),
    "correlate": (lambda v: np.correlate(v, v[:4]), (V,)),
    "sliding_window_view": (lambda v: swv(v, 4).sum(axis=-1), (V,)),
    "as_strided": (lambda v: np.lib.stride_tricks.as_strided(v, (5, 3), (v.strides[0], v.strides[0]),
                                                             writeable=False) * 2, (V,)),
    "pad": (lambda x: [np.pad(x, 2, mode=m) for m in ("constant", "edge", "reflect", "wrap")],
            (X,)),
    "tile": (lambda x: np.tile(x, (2, 1, 2)), (X,)),
    "repeat": (lambda x: np.repeat(x, 3, axis=0), (X,)),
    "flips": (lambda x: (np.flip(x), np.fliplr(x), np.flipud(x), np.rot90(x, 3)), (X,)),
    "isclose": (lambda x, y: np.isclose(x, y), (X, Y)),
    "allclose": (lambda x, y: (np.allclose(x, y), np.array_equal(x, y)), (X, Y)),
    "isin": (lambda q: np.isin(q, [1, 3]), (L,)),
    "count_nonzero": (lambda m: np.count_nonzero(m, axis=0), (M,)),
    "any/all": (lambda x, y: (np.any(x > y, axis=1), np.all(x < 3)), (X, Y)),
    "special": (lambda x: (sp.erf(x), sp.erfc(x), sp.expit(x), sp.logit(sp.expit(x)),
                           sp.gammaln(np.abs(x) + 1), sp.xlogy(x, np.abs(x))), (X,)),
    "sinc, i0, logaddexp": (lambda x, y: (np.sinc(x), np.i0(x), np.logaddexp(x, y),
                                          np.logaddexp2(x, y)), (X, Y)),
    "split": (lambda x: (np.split(x, 2, axis=1), np.array_split(x, 4)), (X,)),
    "stacks": (lambda x, v: (np.column_stack([x[:, 0], x[:, 1]]), np.dstack([x, x]),
                             np.atleast_1d(v[0]), np.atleast_2d(v), np.atleast_3d(x),
                             np.broadcast_arrays(x, v[:8])), (X, V)),
    "select": (lambda x, y: (np.select([x > 0, y > 1], [x, y], 5.0),
                             np.piecewise(x, [x < 0], [lambda t: -t, lambda t: t * 2])), (X, Y)),
    "choose": (lambda q, v: np.choose(q % 2, [v[0], v[1] * 2]), (L, V)),
    "put": (_put, (X, np.array([0, 5, 47]))),
    "place": (_place, (X, M)),
    "copyto": (_copyto, (X, Y, M)),
}


def _numpy_namespaces():
    return [np, np.linalg, np.lib.stride_tricks, sp]


class _Counting:
    """Every callable of NumPy's and SciPy's namespaces replaced by a counting wrapper."""

    def __init__(self):
        self.calls = []
        self.saved = []

    def __enter__(self):
        for mod in _numpy_namespaces():
            for name in dir(mod):
                obj = getattr(mod, name, None)
                if name.startswith("__") or not callable(obj) or isinstance(obj, type):
                    continue
                self.saved.append((mod, name, obj))
                setattr(mod, name, self._wrap(mod, name, obj))
        return self

    def _wrap(self, mod, name, obj):
        def counted(*args, **kwargs):
            self.calls.append(f"{mod.__name__}.{name}")
            return obj(*args, **kwargs)
        return counted

    def __exit__(self, *exc):
        for mod, name, obj in reversed(self.saved):
            setattr(mod, name, obj)


# fastlaunch's frontend/pytree.py is allowed: it builds nested result containers (lists of arrays)
_WATCHED = tuple(os.path.dirname(m.__file__) for m in (np, sp, fl))
_ALLOWED = os.path.join(os.path.dirname(fl.__file__), "frontend/pytree.py")


def _replay_observed(c, args):
    """(result, profiler events into NumPy/SciPy/fastlaunch, counted namespace calls)."""
    events = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(_WATCHED) and \
                frame.f_code.co_filename != _ALLOWED:
            events.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        elif event == "c_call":
            mod = getattr(arg, "__module__", None) or ""
            owner = type(getattr(arg, "__self__", None)).__module__ or ""
            if mod.split(".")[0] in ("numpy", "scipy", "fastlaunch") or \
                    owner.split(".")[0] in ("numpy", "scipy"):
                events.append(f"builtin {mod}.{getattr(arg, '__name__', arg)}")

    with _Counting() as counting:
        sys.setprofile(profile)
        try:
            got = c(*args)
        finally:
            sys.setprofile(None)
    return got, events, counting.calls


def _same(a, b):
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
        return
    np.testing.assert_allclose(np.asarray(b, dtype=np.float64),
                               np.asarray(a, dtype=np.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_no_numpy_call_at_replay(name):
    fn, args = CASES[name]
    runs = []

    def body(*xs):
        runs.append(1)
        return fn(*xs)

    c = fl.compile(body)
    want = fn(*(a.copy() for a in args))
    traced = c(*(a.copy() for a in args))      # traces and compiles (NumPy used freely here)
    _same(want, traced)
    n = len(runs)
    got, events, calls = _replay_observed(c, [a.copy() for a in args])
    assert calls == [], f"{name}: NumPy/SciPy called during replay: {calls[:10]}"
    assert events == [], f"{name}: Python-level calls during replay: {events[:10]}"
    assert len(runs) == n, f"{name}: the traced body ran again at replay"
    _same(want, got)


def test_the_watch_sees_a_numpy_call():
    """The harness itself: a plain Python function calling NumPy is seen by both watches."""
    got, events, calls = _replay_observed(lambda x: np.roll(x, 1), [V])
    np.testing.assert_array_equal(got, np.roll(V, 1))
    assert calls == ["numpy.roll"] and events
