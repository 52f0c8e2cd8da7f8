"""Arrays created inside fn (issue 11): np.zeros & co. are constants until a traced value is
written into them, then traced buffers (fastlaunch/frontend/numpy/trace_buffers.py)."""
import copy
import pickle
import sys
import threading
import types

import numpy as np
import pytest
import scipy.linalg
import scipy.stats

import fastlaunch as fl
from fastlaunch.frontend.numpy import trace_buffers as creation, random as rng


def same(a, b):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for p, q in zip(a, b):
        assert type(p) is type(q), (type(p), type(q))
        assert np.asarray(p).dtype == np.asarray(q).dtype
        np.testing.assert_allclose(p, q, rtol=1e-6)


def run_both(fn, *args, calls=2):
    cf = fl.compile(fn)
    for _ in range(calls):
        got = cf(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
        want = fn(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
        same(got, want)
    return cf


def rows(x):
    out = np.zeros((x.shape[0], x.shape[1]), dtype=x.dtype)
    for i in range(x.shape[0]):
        out[i] = x[i] * 2
    out[:, 0] += 1
    return out


def counting(x, idx):
    counts = np.zeros(5, dtype=np.int64)
    np.add.at(counts, idx, 1)
    buf = np.empty_like(x)
    np.add(x, x, out=buf)
    filled = np.full(3, x[0])
    ident = np.eye(3) * x[1]
    return counts, buf, filled, ident


def constants(x):
    w = np.arange(4) ** 2                        # never touches a traced value: a constant
    knots = [float(v) for v in np.linspace(0, 1, 3)]   # iterated at trace time
    out = np.ones(4)
    out[x > 1] = 0
    return x * w + sum(knots), out, w


def view_writes(x):
    out = np.zeros((3, 4))
    row = out[1]                                 # a view taken before the traced write
    row[:] = x[:4]
    out[2, 1:3] = x[0]
    table = np.array([10.0, 20.0, 30.0])
    return out, table[x[:2].astype(np.int64) % 3]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_rows_written_into_zeros(dtype):
    run_both(rows, np.arange(12).reshape(3, 4).astype(dtype))


def test_ufunc_at_out_full_eye():
    run_both(counting, np.arange(4.0), np.array([0, 1, 1, 4]))


def test_untouched_arrays_stay_constants():
    cf = run_both(constants, np.arange(4.0))
    graph = cf.lower(np.arange(4.0)).graph
    assert "linspace" not in graph               # folded: no trace of the iteration


def test_views_follow_their_base_and_constant_tables_take_traced_indices():
    run_both(view_writes, np.arange(6.0))


def test_write_through_reshaped_view_reaches_the_array():
    def body(x):
        out = np.zeros((2, 3))
        flat = out.reshape(-1)
        flat[:] = x
        return out

    run_both(body, np.arange(6.0))


def test_other_threads_are_unaffected_while_tracing():
    started, release = threading.Event(), threading.Event()
    seen = []

    def slow(x):
        started.set()
        release.wait(5)
        return x + 1

    def other():
        started.wait(5)
        a = np.zeros(3)
        seen.append(type(a))
        release.set()

    t = threading.Thread(target=other)
    t.start()
    fl.compile(slow)(np.ones(2))
    t.join()
    assert seen == [np.ndarray]
    assert not hasattr(np.zeros, "__wrapped__")   # restored once no trace runs


BY_NAME = """
from numpy import zeros, linspace
from numpy.random import default_rng
import numpy as np

def body(x, started, release):
    started.set()
    release.wait(10)
    out = zeros(x.shape)
    out[:] = x * 2
    return out + np.arange(x.shape[0]) + 0 * linspace(0, 1, x.shape[0])
"""


def test_other_threads_see_numpy_itself_while_a_thread_traces():
    """While one thread traces, another sees every intercepted name as it is: the same
    object (`is`), pickling to itself, `from numpy import zeros` included; a traced
    function's module that imported names by name holds stand-ins meanwhile, which call and
    pickle as the originals.  Before: np.zeros & co. were fastlaunch's functions for every
    thread, and pickle.dumps(np.zeros) raised PicklingError."""
    intercepted = [(np, name) for name in creation.CREATION]
    intercepted += [(np.random, name) for name in list(rng._legacy()) + list(rng._REFUSED)
                    + ["default_rng"] if hasattr(np.random, name)]
    intercepted += [(np.lib.stride_tricks, "as_strided"), (scipy.linalg, "inv"),
                    (scipy.linalg, "solve")]
    originals = {(m.__name__, n): vars(m)[n] for m, n in intercepted}
    # as NumPy pickles them (np.random.random: a method of the global RandomState, by value)
    pickled = {key: pickle.dumps(obj) for key, obj in originals.items()}
    norm_pdf = vars(type(scipy.stats.norm).__mro__[1]).get("pdf") or type(scipy.stats.norm).pdf
    module = types.ModuleType("fl_test_by_name")
    exec(BY_NAME, vars(module))
    sys.modules[module.__name__] = module
    started, release = threading.Event(), threading.Event()
    found = []

    def check():
        started.wait(10)
        try:
            for m, name in intercepted:
                original = originals[(m.__name__, name)]
                obj = getattr(m, name)
                if obj is not original:
                    found.append(f"{m.__name__}.{name} is not the original")
                    continue
                if pickle.dumps(obj) != pickled[(m.__name__, name)]:
                    found.append(f"{m.__name__}.{name} does not pickle as without a trace")
            from numpy import zeros as imported
            if imported is not np.zeros or type(np.zeros(2)) is not np.ndarray:
                found.append("from numpy import zeros")
            if type(scipy.stats.norm).pdf is not norm_pdf:
                found.append("scipy.stats.norm's pdf")
            for name in ("zeros", "linspace", "default_rng"):
                stand_in = vars(module)[name]
                original = getattr(np.random if name == "default_rng" else np, name)
                if pickle.loads(pickle.dumps(stand_in)) is not original:
                    found.append(f"the module's {name} does not pickle as {original!r}")
                if copy.copy(stand_in) is not stand_in or \
                        copy.deepcopy([stand_in])[0] is not stand_in:
                    found.append(f"copy changes the module's {name} (not a function's way)")
            a = module.zeros(3)
            if type(a) is not np.ndarray or a.any():
                found.append("the module's zeros does not call numpy's")
        finally:
            release.set()

    t = threading.Thread(target=check)
    t.start()
    try:
        f = fl.compile(module.body, static_argnums=(1, 2))
        x = np.arange(4.0)
        np.testing.assert_array_equal(f(x, started, release), x * 2 + np.arange(4))
    finally:
        release.set()
        t.join()
        del sys.modules[module.__name__]
    assert not found, found
    assert type(np) is types.ModuleType and vars(module)["zeros"] is np.zeros
