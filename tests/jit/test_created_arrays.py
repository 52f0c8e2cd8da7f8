"""Arrays created inside fn (issue 11): np.zeros & co. are constants until a traced value is
written into them, then traced buffers (fastlaunch/creation.py)."""
import threading

import numpy as np
import pytest

import fastlaunch as fl


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
