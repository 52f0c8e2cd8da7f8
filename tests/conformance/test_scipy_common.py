"""The SciPy functions real code calls most, traced against SciPy itself (issue 30): float32
and float64, the trace's values and new ones; the untraced ones raise a TracingError that
names them."""
import numpy as np
import pytest

import fastlaunch as fl

pytest.importorskip("scipy")
import scipy  # noqa: E402
import scipy.interpolate  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.spatial.distance  # noqa: E402
import scipy.special  # noqa: E402

from .harness import cover  # noqa: E402

sl, sc, dist = scipy.linalg, scipy.special, scipy.spatial.distance
DTYPES = [np.float32, np.float64]
_SCI, _F, _T = "scipy equivalents", ["float32", "float64"], "test_scipy_common.py::"
for _name, _test in [("scipy.special.logsumexp", "test_logsumexp"),
                     ("scipy.special.softmax", "test_softmax_log_softmax_expit_xlogy_entr"),
                     ("scipy.special.log_softmax", "test_softmax_log_softmax_expit_xlogy_entr"),
                     ("scipy.special.entr", "test_softmax_log_softmax_expit_xlogy_entr"),
                     ("scipy.linalg.solve_triangular", "test_solve_triangular"),
                     ("scipy.linalg.cho_factor", "test_cho_factor_and_cho_solve"),
                     ("scipy.linalg.cho_solve", "test_cho_factor_and_cho_solve"),
                     ("scipy.linalg.norm", "test_norm_eigh_pinv_block_diag"),
                     ("scipy.linalg.eigh", "test_norm_eigh_pinv_block_diag"),
                     ("scipy.linalg.pinv", "test_norm_eigh_pinv_block_diag"),
                     ("scipy.linalg.block_diag", "test_norm_eigh_pinv_block_diag"),
                     ("scipy.linalg.expm", "test_expm"),
                     ("scipy.linalg.sqrtm", "test_sqrtm_of_covariances"),
                     ("scipy.spatial.distance.cdist", "test_cdist_and_pdist"),
                     ("scipy.spatial.distance.pdist", "test_cdist_and_pdist")]:
    cover(_name, _SCI, _F, test=_T + _test)
for _name in ("correlate", "convolve", "fftconvolve", "oaconvolve", "correlate2d", "convolve2d"):
    cover(f"scipy.signal.{_name}", _SCI, _F + ["int32"],
          test="tests/jit/test_foreign_buffers.py::test_scipy_signal_correlation_is_traced",
          note="the direct sum, whatever `method` (the FFT's rounding differs); "
               "fftconvolve/oaconvolve without axes=")


def tol(dtype):
    return dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)


def check(fn, make_args, dtype, rounds=2, **close):
    cf = fl.compile(fn)
    for r in range(rounds):
        args = make_args(np.random.default_rng(r))
        want, got = fn(*args), cf(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        for w, g in zip(want, got):
            assert np.asarray(g).dtype == np.asarray(w).dtype, (g.dtype, w.dtype)
            assert np.shape(g) == np.shape(w)
            np.testing.assert_allclose(g, w, **(close or tol(dtype)))


def spd(rng, n, dtype):
    a = rng.standard_normal((n, n))
    return (a @ a.T + n * np.eye(n)).astype(dtype)


# ---- scipy.special ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kwargs", [{}, {"axis": 1}, {"axis": (0, 1)}, {"axis": 0, "keepdims": True},
                                    {"axis": 1, "return_sign": True}])
def test_logsumexp(kwargs, dtype):
    check(lambda x: sc.logsumexp(x, **kwargs),
          lambda rng: (rng.standard_normal((4, 6)).astype(dtype) * 30,), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_logsumexp_weights_and_infinities(dtype):
    def fn(x, b):
        return sc.logsumexp(x, axis=1, b=b), sc.logsumexp(x, axis=1, b=b, return_sign=True)

    def args(rng):
        x = rng.standard_normal((5, 4)).astype(dtype)
        x[0] = -np.inf                   # every term zero
        x[1, 2] = np.inf
        b = rng.standard_normal((5, 4)).astype(dtype)
        b[2, 0] = 0                      # a zero weight hides its term
        return x, b
    check(fn, args, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_log_softmax_expit_xlogy_entr(dtype):
    def fn(x):
        return (sc.softmax(x, axis=1), sc.log_softmax(x, axis=1), sc.log_softmax(x),
                sc.expit(x), sc.xlogy(x, np.abs(x)), sc.entr(np.abs(x)))
    check(fn, lambda rng: (rng.standard_normal((3, 5)).astype(dtype) * 4,), dtype)


# ---- scipy.linalg ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower, trans, unit", [(True, 0, False), (False, 0, False),
                                                (True, "T", False), (False, 1, True)])
@pytest.mark.parametrize("rhs", [(5,), (5, 3)])
def test_solve_triangular(lower, trans, unit, rhs, dtype):
    def fn(a, b):
        return sl.solve_triangular(a, b, lower=lower, trans=trans, unit_diagonal=unit)
    check(fn, lambda rng: (spd(rng, 5, dtype), rng.standard_normal(rhs).astype(dtype)), dtype,
          rtol=1e-4 if dtype == np.float32 else 1e-11, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_solve_triangular_singular_raises_on_the_call():
    cf = fl.compile(lambda a, b: sl.solve_triangular(a, b, lower=True))
    a = np.tril(np.ones((3, 3)))
    np.testing.assert_allclose(cf(a, np.ones(3)), sl.solve_triangular(a, np.ones(3), lower=True))
    a[1, 1] = 0
    with pytest.raises(np.linalg.LinAlgError):
        cf(a, np.ones(3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [False, True])
def test_cho_factor_and_cho_solve(lower, dtype):
    def fn(a, b):
        c = sl.cho_factor(a, lower=lower)
        return c[0], sl.cho_solve(c, b)
    check(fn, lambda rng: (spd(rng, 4, dtype), rng.standard_normal((4, 2)).astype(dtype)), dtype,
          rtol=1e-4 if dtype == np.float32 else 1e-11, atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_eigh_pinv_block_diag(dtype):
    def fn(a):
        w, v = sl.eigh(a)
        return (sl.norm(a), sl.norm(a, axis=0), w, np.abs(v), sl.eigh(a, eigvals_only=True),
                sl.pinv(a), sl.block_diag(a, a[:2, :3], np.ones(2, dtype)))
    check(fn, lambda rng: (spd(rng, 4, dtype),), dtype,
          rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-5 if dtype == np.float32 else 1e-11)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [0.1, 3.0, 60.0])          # 0, a few and many squarings
def test_expm(scale, dtype):
    def args(rng):
        return (rng.standard_normal((2, 4, 4)).astype(dtype) * scale / 4,)
    check(lambda a: sl.expm(a), args, dtype,
          rtol=1e-4 if dtype == np.float32 else 1e-11, atol=0)


def test_expm_diagonal_and_one_by_one():
    check(lambda a: (sl.expm(np.diag(np.diag(a))), sl.expm(a[:1, :1])),
          lambda rng: (rng.standard_normal((3, 3)),), np.float64)


def test_logm_raises_naming_itself():
    with pytest.raises(fl.TracingError, match=r"scipy\.linalg\.logm is not traced.*eigh"):
        fl.compile(lambda a: sl.logm(a))(np.eye(3) * 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sqrtm_of_covariances(dtype):
    def args(rng):
        q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
        # condition number 1e8 (1e3 in float32, where SciPy's own rounding is larger)
        ill = (q * np.logspace(-6 if dtype == np.float64 else 0, 2, 5)) @ q.T
        return spd(rng, 4, dtype), ill.astype(dtype)
    check(lambda a, c: (sl.sqrtm(a), sl.sqrtm(c)), args, dtype,
          rtol=1e-4 if dtype == np.float32 else 1e-10,
          atol=1e-5 if dtype == np.float32 else 1e-10)


def test_sqrtm_refuses_what_it_does_not_trace_on_the_call():
    cf = fl.compile(lambda a: sl.sqrtm(a))
    np.testing.assert_allclose(cf(np.eye(2) * 4), np.eye(2) * 2)
    with pytest.raises(ValueError, match="not symmetric"):
        cf(np.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="negative or zero"):
        cf(np.array([[1.0, 2.0], [2.0, 1.0]]))          # SciPy: a complex root
    with pytest.raises(ValueError, match="negative or zero"):
        cf(np.ones((2, 2)))                             # singular: SciPy's may be complex
    np.testing.assert_allclose(cf(np.eye(2) * 9), np.eye(2) * 3)


# ---- scipy.spatial.distance --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("metric, kw", [("euclidean", {}), ("sqeuclidean", {}), ("cityblock", {}),
                                        ("chebyshev", {}), ("minkowski", {"p": 3}),
                                        ("cosine", {})])
def test_cdist_and_pdist(metric, kw, dtype):
    def fn(a, b):
        return dist.cdist(a, b, metric, **kw), dist.pdist(a, metric, **kw)
    check(fn, lambda rng: (rng.standard_normal((5, 3)).astype(dtype),
                           rng.standard_normal((4, 3)).astype(dtype)), np.float64,
          rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-12)


# ---- SciPy functions that are not traced ---------------------------------------------------------
def test_scipy_failing_inside_its_own_code_raises_naming_it():
    def spline(y):
        return scipy.interpolate.CubicSpline(np.arange(4.0), y)(1.5)
    with pytest.raises(fl.TracingError,
                       match=r"^scipy\.interpolate\.CubicSpline \(called at .*test_scipy_common"):
        fl.compile(spline)(np.arange(4.0))

    def lu(a):
        return sl.lu_factor(a)[0]
    with pytest.raises(fl.TracingError, match=r"^scipy\.linalg\.lu_factor \(called at"):
        fl.compile(lu)(np.eye(3))


def test_scipy_reading_an_attribute_a_tracer_lacks_raises_a_tracing_error():
    """scipy.ndimage.convolve reads x.flags, which a tracer does not have: a TracingError naming
    the attribute and the SciPy function (it was the tracer's AttributeError); user code that
    reads the attribute itself still gets the AttributeError (hasattr keeps working)."""
    ndimage = pytest.importorskip("scipy.ndimage")

    def blur(pdf, k):
        return ndimage.convolve(np.roll(pdf, 2), k, mode="wrap")
    with pytest.raises(fl.TracingError, match=r"x\.flags .*scipy\.ndimage\.convolve"):
        fl.compile(blur)(np.random.default_rng(0).random(10), np.array([0.1, 0.8, 0.1]))
    with pytest.raises(AttributeError, match="flags"):
        fl.compile(lambda x: x.flags)(np.ones(3))
