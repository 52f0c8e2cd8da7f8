"""The null backend: the whole pipeline (trace, fuse, record, verify, interpret) with kernels
that do nothing.  Results have NumPy's shapes and dtypes; their values are never computed."""
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.backends import available_backends, get_backend
from fastlaunch.__main__ import step


def test_null_is_registered():
    assert "null" in available_backends()
    assert get_backend("null") is get_backend("null")
    with pytest.raises(ValueError, match="unknown fastlaunch backend"):
        fl.compile(lambda x: x, backend="no-such-backend")


@pytest.mark.parametrize("fn, args", [
    (lambda x: x * 2 + 1, (np.ones(10, np.float32),)),
    (lambda x: np.sum(x, axis=0), (np.ones((3, 4), np.int32),)),
    (lambda x: x.mean(axis=1, keepdims=True), (np.ones((3, 4), np.int64),)),
    (lambda x, y: (x > y, np.where(x > y, x, y)), (np.ones(6), np.zeros(6))),
    (lambda x: x.T[::2], (np.ones((4, 6), np.float32),)),
    (lambda x: x.astype(np.int8), (np.ones(5),)),
    (step, tuple([np.ones(16, np.float32)] * 4) + (1e-2,)),
], ids=["map", "sum-axis", "mean-keepdims", "tuple", "view", "astype", "step"])
def test_null_pipeline_shapes_and_dtypes(fn, args):
    want = fn(*args)
    got = fl.compile(fn, backend="null")(*args)
    wants = want if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    assert type(got) is type(want)
    assert len(gots) == len(wants)
    for w, g in zip(wants, gots):
        assert np.shape(g) == np.shape(w)
        assert np.asarray(g).dtype == np.asarray(w).dtype
        assert type(g) is type(w)


def test_null_backend_does_not_compute():
    """An in-place update under the null backend leaves the caller's array untouched."""
    def f(x, y):
        x += y
        return x

    x = np.zeros(8)
    r = fl.compile(f, backend="null")(x, np.ones(8))
    assert r is x
    assert np.array_equal(x, np.zeros(8))


def test_null_backend_results_replay():
    calls = []

    def f(x):
        calls.append(1)
        return np.sqrt(x) + 1

    cf = fl.compile(f, backend="null")
    for _ in range(4):
        out = cf(np.ones(32))
        assert out.shape == (32,) and out.dtype == np.float64
    assert len(calls) == 1
    assert cf.stats["traces"] == 1


def test_null_compile_count_grows():
    backend = get_backend("null")
    before = backend.compile_count
    cf = fl.compile(lambda x: x / x.sum(), backend="null")
    x = np.ones(1 << 15)                      # long enough not to be one row-fused kernel
    low = cf.lower(x)
    assert len(low.plan.kernels) >= 2
    after_lower = backend.compile_count
    assert after_lower - before == len(low.plan.kernels)
    cf(x)
    assert backend.compile_count - after_lower == len(low.plan.kernels)
    cf(x)                                     # a replay compiles nothing
    assert backend.compile_count - after_lower == len(low.plan.kernels)
    cf(np.ones(50))                           # a new signature compiles again
    assert backend.compile_count > after_lower + len(low.plan.kernels)


def test_null_does_not_touch_the_cpu_backend():
    cpu = get_backend("cpu")
    before = cpu.compile_count
    fl.compile(lambda x: np.cos(x) * 3.25 - 0.5, backend="null")(np.ones(7, np.float32))
    assert cpu.compile_count == before


def test_null_kernel_sources_are_descriptions():
    low = fl.compile(lambda x: x * 2.0, backend="null").lower(np.ones(4))
    ((label, desc, src),) = low.kernels
    assert label == "map"
    assert src == desc
    assert "space=" in desc
