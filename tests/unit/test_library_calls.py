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
from fastlaunch.kernel import LibraryCall, is_kernel
from fastlaunch.link import LinkError

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
        fl.compile(np.linalg.inv, backend="cuda").lower(np.eye(3))
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
            return np.maximum(x @ w + b, 0), x[0].T @ x[1], w.T @ w, x[:, ::2, ::-1] @ w[::-1], x[:, ::2] @ w[:, 1::2]

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
print(library.blas_in_use())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=ROOT,
                         env=dict(os.environ, FASTLAUNCH_BLAS="scipy", PYTHONPATH=ROOT))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "scipy"
