"""Library calls (LIBCALL): which backend makes them, what fusion materialises for them, and
where their BLAS comes from."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import env
from fastlaunch.backends import cpu_schedule, get_backend
from fastlaunch.ir.kernel import LibraryCall, is_kernel
from fastlaunch.program.link import LinkError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _stages import fused as _fused          # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _plan(fn, *args, backend="cpu"):
    _, _, fused = _fused(fn, *args)
    return fused, get_backend(backend).schedule(fused)


def _mlp(x, w1, b1, w2, b2):
    return np.tanh(np.tanh(x @ w1 + b1) @ w2 + b2)


def test_a_computed_operand_is_materialised_once_not_recomputed():
    """tanh(x @ W1 + b1) feeds the next product: it is written once by a map kernel and read
    by the gemm from memory (the compiled kernel used to recompute it per output column)."""
    f32 = np.float32
    args = (np.ones((64, 128), f32), np.ones((128, 128), f32), np.ones(128, f32),
            np.ones((128, 128), f32), np.ones(128, f32))
    fused, plan = _plan(_mlp, *args)
    calls = [k for k in plan.kernels if not is_kernel(k)]
    assert [c.name for c in calls] == ["gemm", "gemm"]
    first, second = calls
    # the second product reads the buffer the map kernel after the first one wrote
    writers = {a.buffer: k for k in plan.kernels if is_kernel(k) for a in k.args if a.writes}
    assert second.args[0].buffer in writers and writers[second.args[0].buffer].label == "map"
    # and no kernel of the fused plan computes tanh inside a reduction
    for k in fused.kernels:
        if is_kernel(k) and k.reduction is not None:
            assert "tanh" not in k.describe()


def test_integer_and_tiny_products_stay_compiled_kernels():
    _, plan = _plan(lambda a, b: a @ b, np.ones((32, 32), np.int32), np.ones((32, 32), np.int32))
    assert all(is_kernel(k) for k in plan.kernels)
    _, plan = _plan(lambda a, b: a @ b, np.ones((4, 4)), np.ones((4, 4)))
    assert all(is_kernel(k) for k in plan.kernels)           # below GEMM_MIN_FLOPS
    _, plan = _plan(lambda a, b: a @ b, np.ones((8, 8)), np.ones((8, 8)))
    assert [type(k) for k in plan.kernels] == [LibraryCall]


def test_the_fused_plan_knows_no_blas():
    """fuse leaves a product as a reduction kernel; only the CPU schedule makes it a call."""
    fused, plan = _plan(lambda a, b: a @ b, np.ones((64, 64)), np.ones((64, 64)))
    assert all(is_kernel(k) for k in fused.kernels)
    assert [k.name for k in plan.kernels] == ["gemm"]
    assert cpu_schedule.gemm_call(fused.kernels[0]) is not None


def test_cuda_refuses_library_calls_by_name_and_keeps_compiled_products():
    with pytest.raises(LinkError, match=r"inv via cuBLAS/cuSOLVER not implemented"):
        fl.compile(np.linalg.inv, backend="cuda").lower(np.eye(20))
    # small matrices are elementwise kernels (frontend/small_linalg.py), which the GPU runs too
    text = fl.compile(np.linalg.inv, backend="cuda").lower(np.eye(3)).program.disassemble()
    assert "LIBCALL" not in text and "LAUNCH" in text
    with pytest.raises(LinkError, match=r"lstsq, svd via cuBLAS/cuSOLVER not implemented"):
        fl.compile(lambda a: (np.linalg.pinv(a), np.linalg.lstsq(a, a)[0]),
                   backend="cuda").lower(np.ones((4, 3)))
    text = fl.compile(lambda a, b: a @ b, backend="cuda").lower(
        np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)).program.disassemble()
    assert "LIBCALL" not in text and "LAUNCH" in text


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
def test_products_and_epilogues_match_numpy(backend):
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        x = rng.standard_normal((3, 40, 50)).astype(dt)
        w = rng.standard_normal((50, 30)).astype(dt)
        b = rng.standard_normal(30).astype(dt)
        def fn(x, w, b):
            return (np.maximum(x @ w + b, 0), x[0].T @ x[1], w.T @ w, x[:, ::2, ::-1] @ w[::-1],
                    x[:, ::2] @ w[:, 1::2])

        g = fl.compile(fn, backend=backend)
        got, want = g(x, w, b), fn(x, w, b)
        for gv, wv in zip(got, want):
            np.testing.assert_allclose(gv, wv, rtol=1e-5 if dt == np.float32 else 1e-12,
                                       atol=1e-4 if dt == np.float32 else 1e-11)
        assert "LIBCALL gemm" in g.lower(x, w, b).program.disassemble()


def test_blas_choice_is_validated(monkeypatch):
    monkeypatch.setenv("FASTLAUNCH_BLAS", "mkl")
    with pytest.raises(env.EnvironmentVariableError, match="FASTLAUNCH_BLAS"):
        env.blas_choice()
    monkeypatch.setenv("FASTLAUNCH_BLAS", "SciPy")
    assert env.blas_choice() == "scipy"


def test_scipy_blas_gives_numpys_results():
    """FASTLAUNCH_BLAS=scipy (scipy.linalg.cython_blas/lapack, LP64): the same results."""
    code = """
import numpy as np, fastlaunch as fl
from fastlaunch.backends import library
rng = np.random.default_rng(0)
a = rng.standard_normal((5, 20, 20)) + 20 * np.eye(20)
x = rng.standard_normal((70, 60)).astype(np.float32)
r = fl.compile(lambda a, x: (np.linalg.inv(a), np.linalg.solve(a, a[..., :3]),
                             np.linalg.det(a), x @ x.T))(a, x)
np.testing.assert_allclose(r[0], np.linalg.inv(a), rtol=1e-12)
np.testing.assert_allclose(r[1], np.linalg.solve(a, a[..., :3]), rtol=1e-12, atol=1e-14)
np.testing.assert_allclose(r[2], np.linalg.det(a), rtol=1e-12)
np.testing.assert_allclose(r[3], x @ x.T, rtol=1e-5, atol=1e-4)
# gesdd / gelsd through the LP64 entry points
m = rng.standard_normal((2, 7, 5))
u, s, vh = fl.compile(lambda m: np.linalg.svd(m, full_matrices=False))(m)
np.testing.assert_allclose(s, np.linalg.svd(m, compute_uv=False), rtol=1e-12)
np.testing.assert_allclose((u * s[..., None, :]) @ vh, m, atol=1e-13)
x, rank, sv = fl.compile(lambda a, b: np.linalg.lstsq(a, b)[::2] + (np.linalg.lstsq(a, b)[3],))(
    m[0], m[1])
e = np.linalg.lstsq(m[0], m[1])
np.testing.assert_allclose(x, e[0], rtol=1e-11, atol=1e-13)
np.testing.assert_allclose(sv, e[3], rtol=1e-12)
assert rank == e[2] == 5
print(library.blas_in_use())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT,
                         env=dict(os.environ, FASTLAUNCH_BLAS="scipy", PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "scipy"


def _routine(name):
    """A library routine as a ctypes function: (operand words, slot table) -> status."""
    import ctypes

    from fastlaunch import _library
    from fastlaunch._launch import Routine
    from fastlaunch.backends import library
    library._register()
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                          ctypes.POINTER(ctypes.c_int64))(
        _library.routine_address(int(Routine[name])))

    def call(words, arrays):
        ops = np.array(words, np.int64)
        slots = np.array([a.ctypes.data for a in arrays], np.int64)
        return fn(ops.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                  slots.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
    return call


def test_svd_lstsq_routines_refuse_words_they_do_not_know_and_write_nothing():
    """The routines themselves (as the interpreter calls them): an svd job other than 0/1/2 is
    refused (-1) before anything is written; a routine writes exactly its packed result."""
    a = np.random.default_rng(2).standard_normal((5, 3))
    svd = _routine("LIB_SVD_F64")
    unused = [-1, 0, 0, 0, 0, 0]
    numpy_s = [np.linalg.svd(a, compute_uv=False), np.linalg.svd(a, full_matrices=False)[1],
               np.linalg.svd(a)[1]]        # (jobz 'N' and 'S'/'A' round differently)
    for job, shape in ((0, (1, 3)), (1, (1 + 5 + 3, 3)), (2, (1 + 5 + 3, 5))):
        x = np.full((shape[0] + 1, shape[1] + 1), 7.0)     # a border that must stay as it is
        words = [1, 1, 5, 3, job, 0, 0, 0, 0, 3, 1, 1, 0, 0, 0, x.shape[1], 1] + unused
        assert svd(words, [a, x]) == 0
        assert np.all(x[-1] == 7) and np.all(x[:, -1] == 7)
        np.testing.assert_allclose(x[0, :3], numpy_s[job], rtol=1e-14)
    x = np.full((10, 6), 7.0)
    assert svd([1, 1, 5, 3, 3, 0, 0, 0, 0, 3, 1, 1, 0, 0, 0, 6, 1] + unused, [a, x]) == -1
    assert np.all(x == 7)
    lstsq = _routine("LIB_LSTSQ_F64")
    ab = np.hstack([a, np.ones((5, 1))])
    rc = np.array([[1e-12]])
    x = np.full((3 + 2 + 1, 3 + 1), 7.0)
    assert lstsq([1, 1, 5, 3, 1, 0, 0, 0, 0, 4, 1, 1, 0, 0, 0, 1, 1, 2, 0, 0, 0, 4, 1],
                 [ab, rc, x]) == 0
    want = np.linalg.lstsq(a, np.ones(5), rcond=1e-12)
    np.testing.assert_allclose(x[:3, 0], want[0], rtol=1e-12)
    np.testing.assert_allclose(x[3, :3], want[3], rtol=1e-14)
    assert x[4, 0] == want[2] == 3
    assert np.all(x[-1] == 7) and np.all(x[:, -1] == 7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matrix_vector_products_take_gemv_on_every_layout(dtype):
    """A product with one row or one column is BLAS gemv (csrc/library.c), on the operands
    as they are: transposed, strided, reversed, batched (issue 30: X.T @ e)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 40)).astype(dtype)
    e, v = rng.standard_normal(300).astype(dtype), rng.standard_normal(40).astype(dtype)
    B = rng.standard_normal((3, 300, 40)).astype(dtype)
    cases = [lambda X, e, v, B: X.T @ e, lambda X, e, v, B: X @ v, lambda X, e, v, B: e @ X,
             lambda X, e, v, B: v @ X.T, lambda X, e, v, B: X[::2].T @ e[::2],
             lambda X, e, v, B: X[:, ::3] @ v[::3], lambda X, e, v, B: X.T[::-1] @ e,
             lambda X, e, v, B: X.T.dot(e[:, None]), lambda X, e, v, B: e[None, :] @ X,
             lambda X, e, v, B: (X @ v) @ (X @ v), lambda X, e, v, B: B @ v,
             lambda X, e, v, B: np.einsum("bij,i->bj", B, e)]
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for fn in cases:
        cf = fl.compile(fn)
        for scale in (1, -2):
            args = (X * dtype(scale), e, v, B)
            want, got = fn(*args), cf(*args)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    assert "gemm" in str(fl.compile(cases[0]).lower(X, e, v, B).plan.kernels[0].describe())
