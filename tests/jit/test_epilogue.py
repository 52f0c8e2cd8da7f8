"""A result computed elementwise from one reduction alone (a mean: the sum divided by the
count) is stored by that reduction's kernel (kernel.Reduction.then): one kernel and one
temporary fewer than a map over the stored sum, and the same bits, since the epilogue runs the
same operations on the sum as its buffer would have held it."""
from __future__ import annotations

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.__main__ import step as _step   # the README's optimisation step
from fastlaunch.ir import fuse

rng = np.random.default_rng(7)


def _x(shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 10).astype(dtype)




# name -> (function, arguments); each has at least one epilogue, over the reductions'
# different code paths
CASES = {
    "step_16": (_step, [_x(16), _x(16), np.abs(_x(16)), _x(16), 1e-2]),
    "step_split": (_step, [_x(40000), _x(40000), np.abs(_x(40000)), _x(40000), 1e-2]),
    "mean_f64": (lambda x: x.mean(), [_x(1000, np.float64)]),
    "mean_int": (lambda x: (x.mean(), x.mean(axis=0)), [_x((50, 7), np.int32)]),
    "mean_f16": (lambda x: x.mean(axis=-1), [_x((9, 33), np.float16)]),
    "row_means": (lambda x: x.mean(axis=-1), [_x((100, 40))]),
    "tiled_column_means": (lambda x: x.mean(axis=0), [_x((1000, 200))]),
    "split_column_means": (lambda x: x.mean(axis=0), [_x((100000, 3))]),
    "centred": (lambda x: x - x.mean(axis=0), [_x((64, 4))]),
    "row_fused_prelude": (lambda x: np.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1) / 2,
                          [_x((30, 50))]),
    "var_std_norm": (lambda x: (np.var(x), np.std(x, axis=0), np.linalg.norm(x, axis=-1)),
                     [_x((20, 30), np.float64)]),
    "max_min_bools": (lambda x: (x.max() * 2 + 1, x.min(axis=0) - 3, ~np.any(x > 25, axis=0)),
                      [_x((40, 6))]),
    "same_result_twice": (lambda x: (x.mean(), x.mean(), x.max() / 3), [_x(500)]),
}


def _without_epilogues(monkeypatch):
    monkeypatch.setattr(fuse._Fuser, "epilogue_of", lambda self, node: None)


def _temp_bytes(lowered) -> int:
    return sum(ops[1] for _, op, ops in lowered.program.instructions() if op.name == "ALLOC")


def _run(fn, args, backend):
    f = fl.compile(lambda *a: fn(*a), backend=backend)
    out = f(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    return out if isinstance(out, tuple) else (out,), f.lower(*args)


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
@pytest.mark.parametrize("name", list(CASES))
def test_same_bits_as_a_map_over_the_stored_reduction(name, backend, monkeypatch):
    fn, args = CASES[name]
    got, low = _run(fn, args, backend)
    folded = [k for k in low.plan.kernels if k.reduction is not None and
              k.reduction.then is not None]
    assert folded, name
    with monkeypatch.context() as m:
        _without_epilogues(m)
        want, plain = _run(fn, args, backend)
    assert not any(k.reduction is not None and k.reduction.then is not None
                   for k in plain.plan.kernels)
    # fewer kernels (the maps over stored results), and fewer bytes of temporaries (a result
    # returned twice: the second is still a copy, but the reduction's temporary is gone)
    kernels = (len(low.program.kernels), len(plain.program.kernels))
    assert kernels[0] <= kernels[1] and _temp_bytes(low) < _temp_bytes(plain)
    if name != "same_result_twice":
        assert kernels[0] < kernels[1]
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes(), name
    # and NumPy's results, closely
    ref = fn(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(r, np.float64),
                                   rtol=2e-3 if np.asarray(r).dtype == np.float16 else 1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(16,), (1000,), (40000,), (30, 20)])
def test_mean_is_numpys_division_of_the_same_sum(dtype, shape):
    """NumPy's mean is its sum divided by the count in the sum's dtype: with sums that are
    exact (small integers) both sums agree, and so do the means, bit for bit; with any
    values the mean is fastlaunch's own sum divided by the count."""
    x = rng.integers(-100, 100, shape).astype(dtype)
    f = fl.compile(lambda x: (x.mean(), x.mean(axis=-1)))
    got = f(x)
    for g, w in zip(got, (np.mean(x), np.mean(x, axis=-1))):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes()
    y = _x(shape, dtype)
    mean, total = fl.compile(lambda y: (y.mean(), y.sum()))(y)
    assert np.asarray(mean).tobytes() == np.asarray(
        np.true_divide(total, dtype(y.size), dtype=dtype)).tobytes()


def test_no_epilogue_where_something_else_reads_the_reduction():
    """The sum read by another result as well, the division read by another value, a product
    over kept axes (a matrix product, for BLAS): no epilogue, results as NumPy's."""
    def shared(x):
        s = x.sum()
        return s / 4, s * x

    def read_again(x):
        m = x.mean()
        return m, x - m

    def matmul_scaled(a, b):
        return (a @ b) / 2

    x = _x(64)
    for fn, args in [(shared, [x]), (read_again, [x]),
                     (matmul_scaled, [_x((32, 32)), _x((32, 32))])]:
        f = fl.compile(fn)
        low = f.lower(*args)
        assert not any(k.reduction is not None and k.reduction.then is not None
                       for k in low.plan.kernels if hasattr(k, "reduction")), fn.__name__
        for g, w in zip(f(*args), fn(*args)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # the product is still BLAS's (a library call), the division a map after it
    assert [type(k).__name__ for k in fl.compile(matmul_scaled).lower(
        _x((32, 32)), _x((32, 32))).plan.kernels] == ["LibraryCall", "Kernel"]
