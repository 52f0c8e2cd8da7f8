"""np.linalg on small matrices written out as elementwise operations over the batch
(fastlaunch/frontend/small_linalg.py): results against NumPy's (and their backward errors against
NumPy's own), dtypes, batches, broadcasting and layouts; singular and not positive definite
matrices at replay with nothing written; NaN inputs; the fusion with neighbours (no library
call); the size limit beyond which LAPACK is called."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.frontend import small_linalg
from fastlaunch.ir.kernel import is_kernel

from .harness import Tol, check, make

F64_TOL = Tol(0.0, 1e-9, 1e-9)


def _conditioned(shape, cond, key=()):
    """Random matrices with singular values from 1 down to 1/cond (QR factors of Gaussian
    matrices around them), as float64."""
    rng = np.random.default_rng(zlib.crc32(repr(("small", shape, cond) + tuple(key)).encode()))
    n = shape[-1]
    q1, _ = np.linalg.qr(rng.standard_normal(shape))
    q2, _ = np.linalg.qr(rng.standard_normal(shape))
    s = np.logspace(0, -np.log10(cond), n)
    return (q1 * s[..., None, :]) @ q2


def _norms(x):
    return np.linalg.norm(x.reshape(x.shape[:-2] + (-1,)), axis=-1)


def _inv_backward(a, x):
    """||A X - I|| / (||A|| ||X||) per matrix (Frobenius norms)."""
    a, x = a.astype(np.float64), x.astype(np.float64)
    return _norms(a @ x - np.eye(a.shape[-1])) / (_norms(a) * _norms(x))


def _solve_backward(a, x, b):
    a, x, b = a.astype(np.float64), x.astype(np.float64), b.astype(np.float64)
    return _norms(a @ x - b) / (_norms(a) * _norms(x) + _norms(b))


def _bound(numpy_error, dtype):
    """Ours may be a small factor above NumPy's own backward error (another rounding order)
    or at the working precision's floor (float32 results: float64 computed, then rounded)."""
    eps = np.finfo(dtype).eps
    return 8 * np.maximum(numpy_error, eps)


def _compiled(fn):
    """fn compiled, and the disassembly of the program it ran (to see which path it took)."""
    g = fl.compile(fn)

    def run(*args):
        out = g(*args)
        return out, g.lower(*args).program.disassemble()
    return run


# ---- values against NumPy -------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("cond", [1e1, 1e7])
def test_inv_backward_error_like_numpys(n, cond):
    a = _conditioned((6, n, n), cond)
    x, text = _compiled(np.linalg.inv)(a)
    assert "LIBCALL" not in text
    want = np.linalg.inv(a)
    assert x.dtype == want.dtype and x.shape == want.shape
    assert np.all(_inv_backward(a, x) <= _bound(_inv_backward(a, want), np.float64))
    np.testing.assert_allclose(x, want, rtol=0, atol=cond * 1e-13 * np.max(np.abs(want)))


@pytest.mark.parametrize("n,k", [(1, 1), (2, 3), (3, 1), (4, 2), (6, 1), (8, 1)])
@pytest.mark.parametrize("cond", [1e1, 1e7])
def test_solve_backward_error_like_numpys(n, k, cond):
    a = _conditioned((5, n, n), cond)
    b = np.random.default_rng(n).standard_normal((5, n, k))
    x, text = _compiled(np.linalg.solve)(a, b)
    assert "LIBCALL" not in text
    want = np.linalg.solve(a, b)
    assert x.dtype == want.dtype and x.shape == want.shape
    assert np.all(_solve_backward(a, x, b) <= _bound(_solve_backward(a, want, b), np.float64))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("cond", [1e1, 1e7])
def test_det_slogdet_like_numpys(n, cond):
    """The log-determinant within cond * eps (its condition), the sign exactly, det as NumPy
    forms it: sign * exp(log|det|)."""
    a = _conditioned((6, n, n), cond) * 3.0
    a[::2, 0] *= -1                                  # negative determinants too
    f = _compiled(lambda a: (np.linalg.det(a), tuple(np.linalg.slogdet(a))))
    (d, (sign, logdet)), text = f(a)
    assert "LIBCALL" not in text
    esign, elogdet = np.linalg.slogdet(a)
    np.testing.assert_array_equal(sign, esign)
    np.testing.assert_allclose(logdet, elogdet, rtol=0, atol=cond * n * 1e-15)
    np.testing.assert_allclose(d, np.linalg.det(a), rtol=cond * n * 1e-15, atol=0)
    assert d.dtype == sign.dtype == logdet.dtype == np.float64


@pytest.mark.parametrize("n", [1, 2, 4, 9, 16])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_like_numpys(n, upper):
    x = _conditioned((4, n, n), 1e3)
    a = x @ np.swapaxes(x, -1, -2) + 1e-3 * np.eye(n)
    if n > 1:               # the other triangle is not read (upper: potrf 'U'), as in NumPy
        a[(..., -1, 0) if upper else (..., 0, -1)] += 5.0
    low, text = _compiled(lambda a: np.linalg.cholesky(a, upper=upper))(a)
    assert "LIBCALL" not in text
    want = np.linalg.cholesky(a, upper=upper)
    assert low.dtype == want.dtype and low.shape == want.shape
    np.testing.assert_allclose(low, want, rtol=0, atol=1e-12 * np.max(np.abs(want)))
    if upper:
        np.testing.assert_array_equal(np.tril(low, -1), 0)
    else:
        np.testing.assert_array_equal(np.triu(low, 1), 0)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.bool_, np.uint8])
def test_result_dtypes_like_numpys(dtype):
    """float32 in, float32 out (computed in float64 and rounded, as NumPy); integers and bool
    are float64."""
    rng = np.random.default_rng(7)
    a = (rng.integers(-3, 4, (5, 3, 3)) + 8 * np.eye(3, dtype=np.int64)).astype(dtype)
    if dtype == np.bool_:
        a = np.broadcast_to(np.eye(3, dtype=bool) | np.tri(3, dtype=bool), (5, 3, 3)).copy()
    if dtype == np.uint8:
        a = (np.abs(a.astype(np.int64)) + 8 * np.eye(3, dtype=np.int64)).astype(np.uint8)
    spd = (a.astype(np.int64) @ np.swapaxes(a.astype(np.int64), -1, -2)
           + 3 * np.eye(3, dtype=np.int64)).astype(dtype) \
        if dtype != np.bool_ else np.broadcast_to(np.eye(3, dtype=bool), (5, 3, 3)).copy()
    b = np.arange(15, dtype=np.int64).reshape(5, 3).astype(dtype)
    tol = Tol(0.0, 3e-7, 1e-13)
    check(lambda a, b: (np.linalg.inv(a), np.linalg.det(a), tuple(np.linalg.slogdet(a)),
                        np.linalg.solve(a, b[..., None])), a, b, tol=tol, atol=1e-12)
    check(lambda s: np.linalg.cholesky(s), spd, tol=tol, atol=1e-12)


# ---- shapes, batches, broadcasting, layouts --------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (1, 1), (0, 3, 3), (2, 0, 2, 2), (1, 2, 2),
                                   (2, 3, 3, 3), (7, 2, 2)], ids=str)
def test_batch_shapes(shape):
    n = shape[-1]
    a = _conditioned(shape, 10.0) + (2.0 * np.eye(n) if n else 0)
    spd = a @ np.swapaxes(a, -1, -2) + np.eye(n)
    check(lambda a, s: (np.linalg.inv(a), np.linalg.det(a), tuple(np.linalg.slogdet(a)),
                        np.linalg.cholesky(s)), a, spd, tol=F64_TOL, atol=1e-12)


@pytest.mark.parametrize("shapes", [((3, 3), (4, 3, 2)), ((4, 3, 3), (3, 2)),
                                    ((2, 1, 3, 3), (5, 3, 1)), ((4, 3, 3), (3,)),
                                    ((3, 3), (3,)), ((4, 3, 3), (4, 3)), ((4, 3, 3), (4, 3, 0)),
                                    ((3, 3), (2, 3)), ((0, 2, 2), (0, 2, 1))], ids=str)
def test_solve_broadcasting_like_numpy2(shapes):
    """NumPy 2: b is a vector only when 1-D; otherwise a stack of matrices (a (4, 3) b with a
    (4, 3, 3) a is a mismatch, as in NumPy)."""
    sa, sb = shapes
    a = _conditioned(sa, 10.0) + 2.0 * np.eye(sa[-1])
    b = np.random.default_rng(3).standard_normal(sb)
    check(lambda a, b: np.linalg.solve(a, b), a, b, tol=F64_TOL, atol=1e-12)


@pytest.mark.parametrize("layout", ["T", "step", "neg"])
def test_non_contiguous_inputs(layout):
    a = make((4, 5, 5), np.float64, special=False, domain=(-1, 1), key=("small-layout",))
    a = np.ascontiguousarray(a) + 5 * np.eye(5)
    if layout == "T":
        a = np.swapaxes(np.swapaxes(a, -1, -2).copy(), -1, -2)
    elif layout == "step":
        a = np.repeat(a, 2, axis=-1)[..., ::2]
    else:
        a = a[::-1, ::-1]
    spd = np.swapaxes(a, -1, -2) @ a
    b = np.ones((5, 2))
    check(lambda a, s, b: (np.linalg.inv(a), np.linalg.solve(a, b), np.linalg.det(a.T),
                           np.linalg.cholesky(s), np.linalg.solve(a[:, 1:, 1:], b[1:, 0])),
          a, spd, b, tol=F64_TOL, atol=1e-12)


# ---- errors at replay --------------------------------------------------------------------------
def _raises_like_numpy(f, g, *args):
    """g (compiled f) raises where f raises, with NumPy's exception and message."""
    try:
        want = f(*args)
    except np.linalg.LinAlgError as err:
        with pytest.raises(np.linalg.LinAlgError) as info:
            g(*args)
        assert str(info.value).startswith(str(err)), (str(info.value), str(err))
        return None
    return want, g(*args)


EXACTLY_SINGULAR = [
    np.zeros((3, 3)), np.ones((3, 3)), np.array([[1., 2, 3], [2, 4, 6], [1, 0, 1]]),
    np.array([[1., 2, 3], [4, 5, 6], [7, 8, 9]]),       # exact in NumPy's LU and ours
    np.array([[0., 1], [np.nan, 1]]),                   # 0 is the pivot: NaN never wins
    np.array([[1., 0, 0], [0, 0, 0], [0, 0, 1]]), np.diag([1., 2, 0, 4]),
    np.array([[2., 1, 0, 0], [4, 2, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]),
]


@pytest.mark.parametrize("i", range(len(EXACTLY_SINGULAR)))
def test_singular_where_numpy_says_so(i):
    """An exactly zero pivot after partial pivoting (getrf's info > 0): inv and solve raise
    LinAlgError("Singular matrix") at the call, det is 0 and slogdet (0, -inf), as NumPy."""
    a = EXACTLY_SINGULAR[i]
    n = a.shape[-1]
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        np.linalg.inv(a)
    for f in (lambda a: np.linalg.inv(a), lambda a: np.linalg.solve(a, np.ones(n)),
              lambda a: np.linalg.solve(a, np.ones((n, 0)))):
        assert _raises_like_numpy(f, fl.compile(f), a) is None
    check(lambda a: (np.linalg.det(a), tuple(np.linalg.slogdet(a))), a, tol=F64_TOL)


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
def test_singular_at_replay_writes_nothing(backend):
    """A singular matrix anywhere in the batch: LinAlgError at the call; an argument updated
    in place and an out= argument keep their values; the next good call works."""
    def f(a, b, y, out):
        y += 1.0
        np.multiply(np.linalg.solve(a, b), 2.0, out=out)
        return np.linalg.inv(a) + 1.0

    g = fl.compile(f, backend=backend)
    a = _conditioned((4, 3, 3), 10.0)
    b = np.ones((4, 3, 2))
    y, out = np.zeros(3), np.full((4, 3, 2), 7.0)
    got = g(a, b, y, out)
    np.testing.assert_allclose(got, np.linalg.inv(a) + 1.0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out, 2 * np.linalg.solve(a, b), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(y, np.ones(3))
    bad = a.copy()
    bad[2] = np.ones((3, 3))
    y0, out0 = y.copy(), out.copy()
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        g(bad, b, y, out)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_array_equal(out, out0)
    g(a, b, y, out)
    np.testing.assert_array_equal(y, y0 + 1)
    chol = fl.compile(lambda s, y: (y.__iadd__(1.0), np.linalg.cholesky(s))[1], backend=backend)
    spd = a @ np.swapaxes(a, -1, -2) + np.eye(3)
    np.testing.assert_allclose(chol(spd, y), np.linalg.cholesky(spd), rtol=1e-12, atol=1e-12)
    y1 = y.copy()
    spd[1, 2, 2] = -1.0
    for f in (np.linalg.cholesky, lambda s: chol(s, y)):
        with pytest.raises(np.linalg.LinAlgError, match="Matrix is not positive definite"):
            f(spd)
    np.testing.assert_array_equal(y, y1)


def test_nan_and_inf_inputs_give_no_error():
    """NaN in: no error, NaN out where NumPy has NaN (NumPy's OpenBLAS skips some products
    with zero, so inv may have NaN where NumPy has a finite value: documented); det, slogdet
    and cholesky have NumPy's NaN positions."""
    cases = [np.diag([1.0, np.nan, 1.0]), np.full((3, 3), np.nan),
             np.array([[0., np.nan], [1, 1]]), np.array([[np.nan, 1], [0, 1.]]),
             np.array([[np.inf, 1], [1, 1.]])]
    inv = fl.compile(np.linalg.inv)
    dets = fl.compile(lambda a: (np.linalg.det(a), tuple(np.linalg.slogdet(a)),
                                 np.linalg.cholesky(np.abs(a) + np.eye(a.shape[-1]))))
    with np.errstate(all="ignore"):
        for a in cases:
            want, got = np.linalg.inv(a), inv(a)
            assert np.all(np.isnan(got)[np.isnan(want)])
            assert np.all(np.isnan(got) | np.isclose(got, want, equal_nan=True))
            wd, (ws, wl) = np.linalg.det(a), np.linalg.slogdet(a)
            gd, (gs, gl), gc = dets(a)
            wc = np.linalg.cholesky(np.abs(a) + np.eye(a.shape[-1]))
            for g, w in ((gd, wd), (gs, ws), (gl, wl), (gc, wc)):
                np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
                np.testing.assert_allclose(np.nan_to_num(g), np.nan_to_num(w), rtol=1e-12, atol=1e-14)


# ---- how it runs ---------------------------------------------------------------------------------
def test_solve_fuses_with_its_neighbours():
    """np.linalg.solve(A, b) * 2 + 1 on 4 x 4 matrices: one kernel over the batch computes the
    solve and the arithmetic around it and stores the result (no library call); the other
    kernels are the singular-matrix check's (its reduction over the batch and the status)."""
    a = _conditioned((1000, 4, 4), 10.0)
    b = np.ones((1000, 4, 1))
    g = fl.compile(lambda a, b: np.linalg.solve(a, b) * 2 + 1)
    np.testing.assert_allclose(g(a, b), np.linalg.solve(a, b) * 2 + 1, rtol=1e-12, atol=1e-12)
    low = g.lower(a, b)
    assert "LIBCALL" not in low.bytecode
    kernels = [k for k in low.fused.kernels if is_kernel(k)]
    assert len(kernels) == len(low.fused.kernels)
    assert [k.label for k in kernels] == ["map+unrolled", "all", "map"]
    main = kernels[0].describe()
    assert main.splitlines()[0] == "kernel map+unrolled space=[1000]"
    assert "div" in main and "const f64 2.0" in main and "const f64 1.0" in main
    assert len(kernels[0].stores) == 4                      # x[:, i, 0] for i in 0..3
    assert "pack" not in [k.label for k in kernels]


def test_stages_bound_kernel_sizes():
    """inv of 8 x 8 matrices: stages of at most about STAGE_OPS operations, each stored by one
    kernel (entry-major: contiguous over the batch) and read by the next."""
    a = _conditioned((50, 8, 8), 10.0)
    g = fl.compile(np.linalg.inv)
    np.testing.assert_allclose(g(a), np.linalg.inv(a), rtol=0, atol=1e-12)
    plan = g.lower(a).fused
    stages = [k for k in plan.kernels if k.label == "pack"]
    assert len(stages) >= 2
    for k in plan.kernels:
        ops = sum(1 for line in k.describe().splitlines() if " = " in line)
        assert ops < 2 * small_linalg.STAGE_OPS, (k.label, ops)
    stage_buffers = {a.buffer for k in stages for a in k.args if a.writes}
    for b in plan.buffers:
        if b.id in stage_buffers:
            assert b.strides[0] == 1 and b.strides[-1] == 50     # batch-contiguous


def test_sizes_beyond_the_limit_call_lapack():
    """Past small_linalg's limits (MAX_N per function; solve's size estimate with many
    right-hand sides), the LAPACK library call."""
    assert small_linalg.written_out("inv", 8) and not small_linalg.written_out("inv", 9)
    assert small_linalg.written_out("cholesky", 16)
    assert not small_linalg.written_out("cholesky", 17)
    assert small_linalg.written_out("solve", 8, 8) and not small_linalg.written_out("solve", 8, 12)
    a = _conditioned((3, 9, 9), 10.0)
    spd = a @ np.swapaxes(a, -1, -2) + np.eye(9)
    g = fl.compile(lambda a, s: (np.linalg.inv(a), np.linalg.det(a), np.linalg.cholesky(s)))
    got = g(a, spd)
    np.testing.assert_allclose(got[0], np.linalg.inv(a), rtol=0, atol=1e-12)
    np.testing.assert_allclose(got[2], np.linalg.cholesky(spd), rtol=0, atol=1e-12)
    text = g.lower(a, spd).program.disassemble()
    assert "LIBCALL inv" in text and "LIBCALL det" in text and "LIBCALL cholesky" not in text
    s = np.eye(17)
    assert "LIBCALL cholesky" in fl.compile(np.linalg.cholesky).lower(s).program.disassemble()
    b = np.ones((3, 8, 12))
    assert "LIBCALL solve" in fl.compile(np.linalg.solve).lower(a[:, :8, :8], b).program.disassemble()


def test_estimate_counts_the_operations():
    """estimate() is what the writer makes, within 15% (it decides the path)."""
    from fastlaunch.ir.graph import Graph, Op
    for fn, n, k in [("inv", 4, 0), ("inv", 8, 0), ("solve", 6, 2), ("det", 9, 0),
                     ("cholesky", 12, 0)]:
        g = Graph()
        a = g.add(Op.ARG, np.float64, (2, n, n), position=0)
        before = len(g.nodes)
        if fn == "inv":
            small_linalg.inv(g, a, np.float64)
        elif fn == "solve":
            small_linalg.solve(g, a, g.add(Op.ARG, np.float64, (2, n, k), position=1), False,
                               np.float64)
        elif fn == "det":
            small_linalg.det(g, a, np.float64)
        else:
            small_linalg.cholesky(g, a, False, np.float64)
        made = sum(1 for x in g.nodes[before:] if x.op.kind.value == "elementwise"
                   and x.op is not Op.CAST)
        assert abs(made - small_linalg.estimate(fn, n, k)) <= 0.15 * made, (fn, n, made)
