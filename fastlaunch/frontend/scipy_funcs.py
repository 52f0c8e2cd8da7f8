"""Traced equivalents of a few well-known SciPy functions that convert their arguments.

SciPy's linear algebra and distributions call np.asarray on what they are given, so a traced
array cannot reach them through NumPy's dispatch (__array_function__): they would fail on the
conversion.  For a small, explicit list of them, the traced function gets our composition
instead, built from the traced NumPy surface (np.linalg, scipy.special.ndtr, reductions), with
SciPy's semantics: its defaults (scipy.linalg.cholesky is upper triangular), its value checks
(check_finite, a covariance that is not positive semidefinite) as runtime checks, its results'
dtypes and shapes.

The list (_REGISTRY): scipy.linalg's inv, solve, cholesky, det, solve_triangular, cho_factor,
cho_solve, norm, eigh, pinv, svd, block_diag and expm; scipy.special's logsumexp, softmax and
log_softmax (its ufuncs go through frontend/special.py); scipy.spatial.distance's cdist and pdist;
scipy.signal's correlate, convolve, fftconvolve, oaconvolve, correlate2d and convolve2d (the
direct sum, whatever the method); scipy.stats' norm and multivariate_normal densities.
scipy.linalg.sqrtm of symmetric positive definite matrices (eigh; other matrices raise on the
call); logm (Schur-based) raises a TracingError naming an equivalent.  A SciPy
function not on the list that fails inside its own code on a tracer is reported by
trace_function as a TracingError naming it (naming.library_failure).

How the calls are intercepted: while some thread traces, the listed attributes are replaced
(reference counted, like the creation functions in frontend/numpy/trace_buffers.py): the
module attributes, and
the methods pdf/cdf/logpdf of scipy.stats.norm's
class and pdf/logpdf of scipy.stats.multivariate_normal's class (set on the class itself, so
frozen distributions, which call them, are covered too; deleting them afterwards restores the
inherited methods).  A replacement calls SciPy's own function unless the calling thread is
tracing and an argument is traced: other threads, and calls on plain arrays, get SciPy's
results.  Only modules the program has already imported are touched (fastlaunch never imports
SciPy for this).  Names imported into the traced function's own module (`from scipy.linalg
import inv`) are replaced there too, as frontend/numpy/trace_buffers.py does for NumPy's.
Nothing of this runs
when a compiled function replays: the compositions are ordinary graph nodes.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .numpy import common
from .numpy.trace_buffers import _any_traced
from .interception import Interception
from ..errors import TracingError
from .trace import tracing

_LOG_2PI = math.log(2 * math.pi)
_NOT_FINITE = "array must not contain infs or NaNs"


def _finite(a, check_finite):
    if check_finite:
        common.require(np.all(np.isfinite(a)), ValueError, _NOT_FINITE)


def _matrix(a, name):
    t = common._as_tracer(a)
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ValueError("expected square matrix" if t.ndim == 2 else
                         f"scipy.linalg.{name} of a {t.ndim}-d array is not traced by "
                         f"fastlaunch (a square matrix is)")
    return t if t.dtype.kind == "f" else t.astype(np.float64)


# ---- scipy.linalg --------------------------------------------------------------------------------
def linalg_inv(a, overwrite_a=False, check_finite=True):
    t = _matrix(a, "inv")
    _finite(t, check_finite)
    return np.linalg.inv(t)


def linalg_det(a, overwrite_a=False, check_finite=True):
    t = _matrix(a, "det")
    _finite(t, check_finite)
    return np.linalg.det(t.astype(np.float64))     # SciPy's det is float64 for float32 too


def linalg_cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    t = _matrix(a, "cholesky")
    _finite(t, check_finite)
    c = np.linalg.cholesky(t)
    return c if lower else c.T


def linalg_solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
                 assume_a=None, transposed=False):
    if assume_a not in (None, "gen", "general", "sym", "symmetric", "her", "hermitian", "pos",
                        "positive definite"):
        raise TracingError(f"scipy.linalg.solve(assume_a={assume_a!r}) is not traced by "
                           f"fastlaunch; a general, symmetric or positive definite matrix is")
    t = _matrix(a, "solve")
    bt = common._as_tracer(b)
    if bt.ndim not in (1, 2):
        raise TracingError("scipy.linalg.solve with a right-hand side of more than 2 "
                           "dimensions is not traced by fastlaunch")
    if bt.shape[0] != t.shape[0]:
        raise ValueError("Input b has to have same number of rows as input a")
    _finite(t, check_finite)
    _finite(bt, check_finite)
    if transposed:
        t = t.T
    # a symmetric matrix is given by one triangle (the lower one with lower=True)
    if assume_a not in (None, "gen", "general"):
        tri = np.tril(t) if lower else np.triu(t)
        t = tri + tri.T - np.diag(np.diagonal(t))
    return np.linalg.solve(t, bt.astype(np.result_type(bt.dtype, np.float32)))


def _triangular_solve(t, b, lower):
    """Substitution with the triangle of t (n, n) for b (n,) or (n, k), row by row (LAPACK's
    trtrs order for small n); np.linalg.solve of the triangle for large ones."""
    n = t.shape[0]
    if n > _SUBSTITUTION_ROWS:
        tri = np.tril(t) if lower else np.triu(t)
        return np.linalg.solve(tri, b)
    rows = [None] * n
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        acc = b[i]
        for j in (range(i) if lower else range(i + 1, n)):
            acc = acc - t[i, j] * rows[j]
        rows[i] = acc / t[i, i]
    return np.stack(rows)


_SUBSTITUTION_ROWS = 32


def linalg_solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                            check_finite=True):
    t = _matrix(a, "solve_triangular")
    bt = common._as_tracer(b) if _any_traced(b) else np.asarray(b)
    if bt.ndim not in (1, 2) or bt.shape[0] != t.shape[0]:
        raise ValueError(f"shapes of a {t.shape} and b {bt.shape} are incompatible")
    dt = np.result_type(t.dtype, bt.dtype, np.float32)
    t, bt = t.astype(dt), common._as_tracer(bt).astype(dt) if _any_traced(bt) else \
        bt.astype(dt)
    _finite(t, check_finite)
    _finite(bt, check_finite)
    if trans in (1, 2, "T", "C"):
        t, lower = t.T, not lower
    elif trans not in (0, "N"):
        raise ValueError("Incorrect value for trans")
    n = t.shape[0]
    if unit_diagonal:
        t = t * (1 - np.eye(n, dtype=dt)) + np.eye(n, dtype=dt)
    else:
        diag = np.diagonal(t)
        common.require(np.all(diag != 0), np.linalg.LinAlgError,
                            "singular matrix: resolution failed at a zero diagonal entry")
    return _triangular_solve(t, bt, lower)


def linalg_cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    t = _matrix(a, "cho_factor")
    _finite(t, check_finite)
    c = np.linalg.cholesky(t)
    # LAPACK's potrf leaves the other triangle as it found it
    packed = np.tril(c) + np.triu(t, 1) if lower else np.triu(c.T) + np.tril(t, -1)
    return packed, lower


def linalg_cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    c, lower = c_and_lower
    t = _matrix(c, "cho_solve")
    bt = common._as_tracer(b) if _any_traced(b) else np.asarray(b)
    if bt.shape[0] != t.shape[0]:
        raise ValueError("incompatible dimensions")
    dt = np.result_type(t.dtype, bt.dtype, np.float32)
    t, bt = t.astype(dt), (common._as_tracer(bt) if _any_traced(bt) else bt).astype(dt)
    _finite(t, check_finite)
    _finite(bt, check_finite)
    low = np.tril(t) if lower else np.triu(t).T
    return _triangular_solve(low.T, _triangular_solve(low, bt, True), False)


def linalg_norm(a, ord=None, axis=None, keepdims=False, check_finite=True):
    t = common._as_tracer(a)
    _finite(t, check_finite)
    return np.linalg.norm(t, ord=ord, axis=axis, keepdims=keepdims)


def linalg_eigh(a, b=None, *, lower=True, eigvals_only=False, overwrite_a=False,
                overwrite_b=False, type=1, check_finite=True, subset_by_index=None,
                subset_by_value=None, driver=None):
    if b is not None or subset_by_index is not None or subset_by_value is not None:
        raise TracingError("scipy.linalg.eigh of a generalized problem (b=) or a subset is not "
                           "traced by fastlaunch; the standard problem is")
    t = _matrix(a, "eigh")
    _finite(t, check_finite)
    w, v = np.linalg.eigh(t, UPLO="L" if lower else "U")
    return w if eigvals_only else (w, v)


def linalg_svd(a, full_matrices=True, compute_uv=True, overwrite_a=False, check_finite=True,
               lapack_driver="gesdd"):
    if lapack_driver != "gesdd":
        raise TracingError(f"scipy.linalg.svd(lapack_driver={lapack_driver!r}) is not traced by "
                           f"fastlaunch; the default driver (gesdd, NumPy's) is")
    t = common._as_tracer(a)
    if t.ndim != 2:
        raise ValueError("expected matrix")
    _finite(t, check_finite)
    t = t if t.dtype.kind == "f" else t.astype(np.float64)
    if not compute_uv:
        return np.linalg.svd(t, compute_uv=False)
    u, s, vh = np.linalg.svd(t, full_matrices=full_matrices)
    return u, s, vh                  # SciPy's plain tuple, not NumPy's SVDResult


def linalg_pinv(a, *, atol=None, rtol=None, return_rank=False, check_finite=True):
    if atol is not None or return_rank:
        raise TracingError("scipy.linalg.pinv(atol=..., return_rank=True) is not traced by "
                           "fastlaunch; rtol is")
    t = common._as_tracer(a)
    _finite(t, check_finite)
    return np.linalg.pinv(t, rtol=rtol) if rtol is not None else np.linalg.pinv(t)


def linalg_block_diag(*arrs):
    if not arrs:
        return np.empty((1, 0))
    blocks = []
    for a in arrs:
        v = common._as_tracer(a) if _any_traced(a) else np.asarray(a)
        if v.ndim > 2:
            raise ValueError("arguments in the following positions have dimension greater "
                             "than 2")
        blocks.append(v.reshape((1, -1) if v.ndim < 2 else v.shape) if v.ndim < 2 else v)
    dtype = np.result_type(*[b.dtype for b in blocks])
    width = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        rows.append(np.pad(b.astype(dtype), ((0, 0), (left, width - left - b.shape[1]))))
        left += b.shape[1]
    return np.concatenate(rows, axis=0)


# Higham (2005)'s [13/13] Pade approximant with scaling and squaring (SciPy picks its degree
# by norm estimates; the results agree to rounding)
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
           40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_THETA13 = 5.371920351148152
_MAX_SQUARINGS = 48


def linalg_expm(A):
    t = common._as_tracer(A)
    if t.ndim < 2:
        if t.size == 1:
            return np.exp(t.astype(np.float64)).reshape(1, 1)
        raise np.linalg.LinAlgError("The input array must be at least two-dimensional")
    if t.shape[-1] != t.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    if t.dtype.kind == "c":
        raise TracingError("scipy.linalg.expm of a complex matrix is not traced by fastlaunch")
    out_dtype = t.dtype if t.dtype.kind == "f" and t.dtype != np.float16 else \
        np.dtype(np.float32 if t.dtype == np.float16 else np.float64)
    if t.shape[-1] == 1:
        return np.exp(t.astype(out_dtype))
    a = t.astype(np.float64)
    n = a.shape[-1]
    norm1 = np.max(np.sum(np.abs(a), axis=-2, keepdims=True), axis=-1, keepdims=True)
    s = np.maximum(0.0, np.ceil(np.log2(norm1 / _THETA13)))
    common.require(np.all(s <= _MAX_SQUARINGS), ValueError,
                        f"scipy.linalg.expm: fastlaunch's expm takes matrices of 1-norm up to "
                        f"{_THETA13 * 2.0 ** _MAX_SQUARINGS:.3g}")
    a = a / np.exp2(s)
    b = _PADE13
    ident = np.eye(n)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2
             + b[1] * ident)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 \
        + b[0] * ident
    r = np.linalg.solve(v - u, v + u)
    for k in range(_MAX_SQUARINGS):
        r = np.where(s > k, r @ r, r)
    return r.astype(out_dtype)


def linalg_sqrtm(A, disp=True, blocksize=64):
    """The principal square root of a symmetric positive definite matrix (a covariance:
    what filters take the root of), from np.linalg.eigh: V sqrt(w) V^T, the matrix SciPy's
    Schur method gives, to rounding.  Other matrices are refused on the call that passes
    them: a non-symmetric one (SciPy's Schur method is not traced), or one with a negative
    eigenvalue (its root is complex)."""
    t = common._as_tracer(A)
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise ValueError("Non-matrix input to matrix function.")
    if t.dtype.kind == "c":
        raise TracingError("scipy.linalg.sqrtm of a complex matrix is not traced by fastlaunch")
    out_dtype = t.dtype if t.dtype.kind == "f" and t.dtype != np.float16 else \
        np.dtype(np.float32 if t.dtype == np.float16 else np.float64)
    a = t.astype(np.float64)
    n = a.shape[-1]
    scale = np.max(np.abs(a), axis=(-2, -1), keepdims=True)
    # symmetric to the rounding of the input's dtype (a covariance computed in float32 is
    # not exactly symmetric); its symmetric part is the matrix taken
    rounding = 1e-11 if out_dtype == np.float64 else 1e-5
    common.require(np.all(np.abs(a - np.swapaxes(a, -1, -2)) <= rounding * scale),
                        ValueError, _SQRTM_SYMMETRIC)
    a = (a + np.swapaxes(a, -1, -2)) * 0.5
    w, v = np.linalg.eigh(a)
    # an eigenvalue at zero (to rounding) can come out of SciPy's Schur form negative, and
    # its result complex: only positive definite matrices, with a margin, are taken
    tiny = 1e3 * n * np.finfo(np.float64).eps * np.max(np.abs(w), axis=-1, keepdims=True)
    common.require(np.all(w > tiny), ValueError, _SQRTM_NEGATIVE)
    root = (v * np.sqrt(w)[..., None, :]) @ np.swapaxes(v, -1, -2)
    return root.astype(out_dtype)


_SQRTM_SYMMETRIC = ("scipy.linalg.sqrtm: fastlaunch traces the square root of symmetric "
                    "matrices (from np.linalg.eigh); this matrix is not symmetric (SciPy's "
                    "Schur method is not traced): call sqrtm outside the compiled function")
_SQRTM_NEGATIVE = ("scipy.linalg.sqrtm: the matrix has an eigenvalue that is negative or zero "
                   "(to rounding), where SciPy's square root is (or may be) complex; "
                   "fastlaunch traces sqrtm of positive definite matrices: call sqrtm outside "
                   "the compiled function")


def linalg_logm(A, disp=True):
    raise TracingError("scipy.linalg.logm is not traced by fastlaunch (SciPy computes it from "
                       "a Schur decomposition, which fastlaunch does not trace); for a "
                       "symmetric positive definite matrix use w, v = np.linalg.eigh(a); "
                       "(v * np.log(w)) @ v.T")


# ---- scipy.special -------------------------------------------------------------------------------
def _floating(x):
    t = common._as_tracer(x) if _any_traced(x) else np.asarray(x)
    if t.dtype.kind in "biu":
        t = t.astype(np.float64)
    elif t.dtype.kind == "c":
        raise TracingError("scipy.special's log-sum-exp functions of complex values are not "
                           "traced by fastlaunch")
    return t


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    return tuple(sorted(int(ax) % ndim for ax in axes))


def special_logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """SciPy's: the largest term taken out of the sum (log1p of the rest), weights b, the
    sign, and the infinite cases from the direct sum."""
    a = _floating(a)
    if b is not None:
        b = _floating(b)
        dt = np.result_type(a.dtype, b.dtype)
        a, b = np.broadcast_arrays(a.astype(dt), b.astype(dt))
    a = a if a.ndim else a.reshape(1)
    b = b if b is None or b.ndim else b.reshape(1)
    axes = _axes(axis, a.ndim)
    if a.size == 0:
        raise TracingError("scipy.special.logsumexp of an empty array is not traced by "
                           "fastlaunch")
    dt = a.dtype
    b_exp_a = np.exp(a) if b is None else b * np.exp(a)
    sum_ = np.sum(b_exp_a, axis=axes, keepdims=True)
    sgn_inf = np.sign(sum_)
    out_inf = np.log(np.abs(sum_) if return_sign else sum_)
    if b is not None:
        a = np.where(b == 0, -np.inf, a)
    a_max = np.max(a, axis=axes, keepdims=True)
    is_max = a == a_max
    a = np.where(is_max, -np.inf, a)
    m = np.sum(is_max.astype(dt) if b is None else b * is_max.astype(dt), axis=axes,
               keepdims=True, dtype=dt)
    e = np.exp(a - a_max) if b is None else b * np.exp(a - a_max)
    s = np.sum(e, axis=axes, keepdims=True, dtype=dt)
    s = np.where(s == 0, s, s / m)
    sgn = np.sign(s + 1) * np.sign(m)
    s = np.where(s < -1, -s - 2, s)
    out = np.log1p(s) + np.log(np.abs(m)) + a_max
    if not return_sign:
        out = np.where(sgn < 0, np.nan, out)
    finite = np.isfinite(out)
    out = np.where(finite, out, out_inf)
    sgn = np.where(finite, sgn, sgn_inf)
    if not keepdims:
        out = np.squeeze(out, axis=axes)
        sgn = np.squeeze(sgn, axis=axes)
    if out.ndim == 0:
        out, sgn = out[()], sgn[()]
    return (out, sgn) if return_sign else out


def special_log_softmax(x, axis=None):
    t = _floating(x)
    x_max = np.max(t, axis=axis, keepdims=True)
    x_max = np.where(np.isfinite(x_max), x_max, 0)
    tmp = t - x_max
    return tmp - np.log(np.sum(np.exp(tmp), axis=axis, keepdims=True))


def special_softmax(x, axis=None):
    t = _floating(x)
    e = np.exp(t - np.max(t, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


# ---- scipy.spatial.distance ----------------------------------------------------------------------
def _pairwise(XA, XB, metric, kwargs, name):
    a = common._as_tracer(XA) if _any_traced(XA) else np.asarray(XA)
    b = common._as_tracer(XB) if _any_traced(XB) else np.asarray(XB)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("XA and XB must be 2-dimensional arrays" if name == "cdist" else
                         "A 2-dimensional array must be passed.")
    if a.shape[1] != b.shape[1]:
        raise ValueError("XA and XB must have the same number of columns (i.e. feature "
                         "dimension.)")
    a, b = a.astype(np.float64), b.astype(np.float64)
    if callable(metric) or metric not in _METRICS:
        raise TracingError(f"scipy.spatial.distance.{name}(metric={metric!r}) is not traced by "
                           f"fastlaunch; these metrics are: {', '.join(sorted(_METRICS))}")
    extra = set(kwargs) - ({"p"} if metric == "minkowski" else set())
    if extra:
        raise TracingError(f"scipy.spatial.distance.{name}: keyword(s) {sorted(extra)} are not "
                           f"traced by fastlaunch")
    return _METRICS[metric](a[:, None, :], b[None, :, :], **kwargs)


def _minkowski(u, v, p=2.0):
    if _any_traced(p):
        raise TracingError("scipy.spatial.distance minkowski with a traced p is not traced")
    if p == np.inf:
        return np.max(np.abs(u - v), axis=-1)
    return np.sum(np.abs(u - v) ** p, axis=-1) ** (1.0 / p)


def _cosine(u, v):
    uv = np.sum(u * v, axis=-1)
    return np.clip(1.0 - uv / np.sqrt(np.sum(u * u, axis=-1) * np.sum(v * v, axis=-1)), 0.0, 2.0)


_METRICS = {
    "euclidean": lambda u, v: np.sqrt(np.sum(np.square(u - v), axis=-1)),
    "sqeuclidean": lambda u, v: np.sum(np.square(u - v), axis=-1),
    "cityblock": lambda u, v: np.sum(np.abs(u - v), axis=-1),
    "chebyshev": lambda u, v: np.max(np.abs(u - v), axis=-1),
    "minkowski": _minkowski,
    "cosine": _cosine,
}


def distance_cdist(XA, XB, metric="euclidean", *, out=None, **kwargs):
    if out is not None:
        raise TracingError("scipy.spatial.distance.cdist(out=...) is not traced by fastlaunch")
    return _pairwise(XA, XB, metric, kwargs, "cdist")


def distance_pdist(X, metric="euclidean", *, out=None, **kwargs):
    if out is not None:
        raise TracingError("scipy.spatial.distance.pdist(out=...) is not traced by fastlaunch")
    full = _pairwise(X, X, metric, kwargs, "pdist")
    i, j = np.triu_indices(full.shape[0], 1)
    return full[i, j]


# ---- scipy.stats.norm --------------------------------------------------------------------------
def _standardised(x, loc, scale):
    x = common._as_tracer(x).astype(np.float64) if _any_traced(x) else \
        np.asarray(x, np.float64)
    z = (x - loc) / scale
    return x, z, np.greater(scale, 0)


def _norm_result(out):
    return out[()] if out.ndim == 0 else out


def norm_cdf(self, x, *args, **kwds):
    loc, scale = _loc_scale(args, kwds)
    x, z, ok = _standardised(x, loc, scale)
    import scipy.special
    return _norm_result(np.where(ok, scipy.special.ndtr(z), np.nan))


def norm_pdf(self, x, *args, **kwds):
    loc, scale = _loc_scale(args, kwds)
    x, z, ok = _standardised(x, loc, scale)
    density = np.exp(-z * z / 2.0) / math.sqrt(2 * math.pi)
    return _norm_result(np.where(ok, density / scale, np.nan))


def norm_logpdf(self, x, *args, **kwds):
    loc, scale = _loc_scale(args, kwds)
    x, z, ok = _standardised(x, loc, scale)
    logp = -z * z / 2.0 - 0.5 * _LOG_2PI - np.log(scale)
    return _norm_result(np.where(ok, logp, np.nan))


def _loc_scale(args, kwds):
    """norm's (loc, scale): positional or keywords, defaults 0 and 1 (norm has no shapes)."""
    kwds = dict(kwds)
    names = ["loc", "scale"]
    if len(args) > 2:
        raise TypeError("norm takes loc and scale only")
    values = dict(zip(names, args))
    for k in list(kwds):
        if k not in names or k in values:
            raise TypeError(f"norm got an unexpected or repeated argument {k!r}")
        values[k] = kwds.pop(k)
    loc, scale = values.get("loc", 0.0), values.get("scale", 1.0)
    def cast(v):
        return common._as_tracer(v).astype(np.float64) if _any_traced(v) else \
            np.asarray(v, np.float64)
    return cast(loc), cast(scale)


# ---- scipy.stats.multivariate_normal -------------------------------------------------------------
def _as_float(v):
    return common._as_tracer(v).astype(np.float64) if _any_traced(v) else \
        np.asarray(v, dtype=float)


def _mvn_parameters(mean, cov):
    """SciPy's shapes: dim from mean (or cov), mean a vector, cov a (dim, dim) matrix."""
    if mean is None:
        if cov is None:
            dim = 1
        else:
            c = _as_float(cov)
            dim = 1 if c.ndim < 2 else c.shape[0]
    else:
        mean = _as_float(mean)
        dim = math.prod(mean.shape)
    mean = np.zeros(dim) if mean is None else mean
    cov = _as_float(1.0 if cov is None else cov)
    if dim == 1:
        mean = mean.reshape(1)
        cov = cov.reshape(1, 1)
    if mean.ndim != 1 or mean.shape[0] != dim:
        raise ValueError(f"Array 'mean' must be a vector of length {dim}.")
    if cov.ndim == 0:
        cov = cov * np.eye(dim)
    elif cov.ndim == 1:
        cov = np.diag(cov)
    elif cov.ndim == 2 and cov.shape != (dim, dim):
        rows, cols = cov.shape
        if rows != cols:
            raise ValueError(f"Array 'cov' must be square if it is two dimensional, but "
                             f"cov.shape = {cov.shape!s}.")
        raise ValueError(f"Dimension mismatch: array 'cov' is of shape {cov.shape}, but "
                         f"'mean' is a vector of length {len(mean)}.")
    elif cov.ndim > 2:
        raise ValueError(f"Array 'cov' must be at most two-dimensional, but cov.ndim = "
                         f"{cov.ndim}")
    return dim, mean, cov


def _mvn_quantiles(x, dim):
    x = _as_float(x)
    if x.ndim == 0:
        x = x[np.newaxis]
    elif x.ndim == 1:
        x = x[:, np.newaxis] if dim == 1 else x[np.newaxis, :]
    return x


def _mvn_logpdf(x, mean, cov, allow_singular):
    """SciPy's _PSD: the covariance's eigendecomposition, eigenvalues at most eps (relative
    to the largest) taken as zero: pseudo-inverse, pseudo-determinant, rank; points off the
    support of a singular covariance have density zero."""
    dim, mean, cov = _mvn_parameters(mean, cov)
    x = _mvn_quantiles(x, dim)
    common.require(np.all(np.isfinite(cov)), ValueError, _NOT_FINITE)
    cov = common._as_tracer(cov)
    s, u = np.linalg.eigh(cov)
    eps = 1e6 * np.finfo(np.float64).eps * np.max(np.abs(s))
    common.require(np.min(s) >= -eps, ValueError,
                        "The input matrix must be symmetric positive semidefinite.")
    big = s > eps
    if not allow_singular:
        common.require(np.all(big), np.linalg.LinAlgError,
                            "When `allow_singular is False`, the input matrix must be "
                            "symmetric positive definite.")
    rank = np.sum(big)
    s_pinv = np.where(np.abs(s) <= eps, 0.0, 1.0 / np.where(s == 0, 1.0, s))
    U = u * np.sqrt(s_pinv)
    log_pdet = np.sum(np.where(big, np.log(np.where(big, s, 1.0)), 0.0))
    dev = x - mean
    maha = np.sum(np.square(dev @ U), axis=-1)
    out = -0.5 * (rank * _LOG_2PI + log_pdet + maha)
    # off the support (the null space of a singular covariance): -inf; with full rank the
    # residual is an empty sum, 0, always inside
    residual = np.sqrt(np.sum(np.where(s <= eps, np.square(dev @ u), 0.0), axis=-1))
    return np.where(residual < 1e3 * eps, out, -np.inf)


def _squeeze(out):
    out = out.squeeze()
    return out[()] if out.ndim == 0 else out


def mvn_logpdf(self, x, mean=None, cov=1, allow_singular=False):
    return _squeeze(_mvn_logpdf(x, mean, cov, allow_singular))


def mvn_pdf(self, x, mean=None, cov=1, allow_singular=False):
    return _squeeze(np.exp(_mvn_logpdf(x, mean, cov, allow_singular)))


# ---- scipy.signal: correlation and convolution ------------------------------------------------
_UNROLLED_KERNEL = 64          # a constant kernel up to this size: one shifted read per weight


def _signal_operands(in1, in2, name):
    a = in1 if _any_traced(in1) else np.asarray(in1)
    k = in2 if _any_traced(in2) else np.asarray(in2)
    a = common._as_tracer(a) if _any_traced(a) else a
    k = common._as_tracer(k) if _any_traced(k) else k
    if np.ndim(a) != np.ndim(k):
        raise ValueError("in1 and in2 should have the same dimensionality")
    for v in (a, k):
        if v.dtype.kind not in "biufc":
            raise TracingError(f"scipy.signal.{name} of {v.dtype} arrays is not traced by "
                               f"fastlaunch (numbers are)")
    return a, k


def _valid_correlation(a, k, dtype):
    """out[i] = sum_j a[i + j] * conj(k[j]) where the kernel fits (a.shape >= k.shape)."""
    out = tuple(n - m + 1 for n, m in zip(a.shape, k.shape))
    kc = np.conj(k) if k.dtype.kind == "c" else k
    if not _any_traced(k) and k.size <= _UNROLLED_KERNEL:
        # a constant kernel: a sum of shifted slices, elementwise, one kernel with its users
        acc = None
        for idx in np.ndindex(k.shape):
            term = a[tuple(slice(j, j + n) for j, n in zip(idx, out))].astype(dtype) * \
                kc[idx].astype(dtype)
            acc = term if acc is None else acc + term
        return acc
    windows = np.lib.stride_tricks.sliding_window_view(a.astype(dtype), k.shape)
    return np.sum(windows * kc.astype(dtype), axis=tuple(range(a.ndim, 2 * a.ndim)),
                  dtype=dtype)


def _correlation_nd(a, k, mode, boundary="fill", fillvalue=0, round_up=False):
    """SciPy's direct N-d correlation, any mode; the boundary rules of correlate2d.  'same'
    is the centre of 'full', its start rounded down (correlate), or up (correlate2d, which
    SciPy computes as a convolution with the flipped kernel)."""
    if mode not in ("full", "same", "valid"):
        raise ValueError("Acceptable mode flags are 'valid', 'same', or 'full'.")
    dtype = np.result_type(a.dtype, k.dtype)
    if a.size == 0 or k.size == 0:
        raise TracingError("scipy.signal correlation of an empty array is not traced by "
                           "fastlaunch")
    if mode == "valid":
        if all(n >= m for n, m in zip(a.shape, k.shape)):
            return _valid_correlation(a, k, dtype)
        if all(m >= n for n, m in zip(a.shape, k.shape)):
            # SciPy swaps the operands and reverses (and conjugates) the result
            r = _valid_correlation(k, a, dtype)
            r = r[(slice(None, None, -1),) * r.ndim]
            return np.conj(r) if r.dtype.kind == "c" else r
        raise ValueError("For 'valid' mode, one must be at least as large as the other in "
                         "every dimension")
    widths = [(m - 1, m - 1) for m in k.shape]
    padded = (np.pad(a, widths, mode="constant", constant_values=fillvalue)
              if boundary == "fill" else np.pad(a, widths, mode=boundary))
    full = _valid_correlation(padded, k, dtype)
    if mode == "full":
        return full
    start = [(f - n + round_up) // 2 for f, n in zip(full.shape, a.shape)]
    return full[tuple(slice(s0, s0 + n) for s0, n in zip(start, a.shape))]


def _flipped(k):
    r = k[(slice(None, None, -1),) * np.ndim(k)]
    return np.conj(r) if r.dtype.kind == "c" else r


def signal_correlate(in1, in2, mode="full", method="auto"):
    if method not in ("auto", "direct", "fft"):
        raise ValueError("Acceptable method flags are 'auto', 'direct', or 'fft'.")
    a, k = _signal_operands(in1, in2, "correlate")
    if np.ndim(a) == 0:
        return a * (np.conj(k) if k.dtype.kind == "c" else k)
    return _correlation_nd(a, k, mode)


def signal_convolve(in1, in2, mode="full", method="auto"):
    if method not in ("auto", "direct", "fft"):
        raise ValueError("Acceptable method flags are 'auto', 'direct', or 'fft'.")
    a, k = _signal_operands(in1, in2, "convolve")
    if np.ndim(a) == 0:
        return a * k
    if mode == "valid" and not all(n >= m for n, m in zip(a.shape, k.shape)):
        a, k = k, a                 # commutative; SciPy swaps for 'valid'
    return _correlation_nd(a, _flipped(k), mode)


def signal_fftconvolve(in1, in2, mode="full", axes=None):
    if axes is not None:
        raise TracingError("scipy.signal.fftconvolve(axes=...) is not traced by fastlaunch; "
                           "without axes it is (computed as the direct sum)")
    a, k = _signal_operands(in1, in2, "fftconvolve")
    if np.ndim(a) == 0:
        return a * k
    if mode == "valid" and not all(n >= m for n, m in zip(a.shape, k.shape)):
        a, k = k, a
    if np.result_type(a.dtype, k.dtype).kind not in "fc":
        a, k = a.astype(np.float64), k.astype(np.float64)    # SciPy's FFT is in floats
    return _correlation_nd(a, _flipped(k), mode)


def _boundary(boundary):
    modes = {"fill": "fill", "pad": "fill", "wrap": "wrap", "circular": "wrap",
             "symm": "symmetric", "symmetric": "symmetric"}
    if boundary not in modes:
        raise ValueError("Acceptable boundary flags are 'fill', 'circular' (or 'wrap'), and "
                         "'symmetric' (or 'symm').")
    return modes[boundary]


def _operands_2d(in1, in2, fillvalue, name):
    """correlate2d's and convolve2d's operands, refused as SciPy refuses them, or where the
    fill value is traced."""
    a, k = _signal_operands(in1, in2, name)
    if np.ndim(a) != 2:
        raise ValueError(f"{name} inputs must both be 2-D arrays")
    if _any_traced(fillvalue):
        raise TracingError(f"scipy.signal.{name} with a traced fillvalue is not traced by "
                           f"fastlaunch")
    return a, k


def signal_correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    a, k = _operands_2d(in1, in2, fillvalue, "correlate2d")
    swapped = mode == "valid" and not all(n >= m for n, m in zip(a.shape, k.shape))
    if swapped:
        a, k = k, a
    out = _correlation_nd(a, k, mode, _boundary(boundary), fillvalue, round_up=True)
    return _flipped(out) if swapped else out


def signal_convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    a, k = _operands_2d(in1, in2, fillvalue, "convolve2d")
    if mode == "valid" and not all(n >= m for n, m in zip(a.shape, k.shape)):
        a, k = k, a
    return _correlation_nd(a, _flipped(k), mode, _boundary(boundary), fillvalue)


# ---- interception while tracing ------------------------------------------------------------------
# (module, owner: None for the module itself or a function of the module giving the class,
#  attribute, our equivalent, whether it is a method)
_REGISTRY = [
    ("scipy.linalg", None, "inv", linalg_inv),
    ("scipy.linalg", None, "solve", linalg_solve),
    ("scipy.linalg", None, "cholesky", linalg_cholesky),
    ("scipy.linalg", None, "det", linalg_det),
    ("scipy.stats", "norm", "cdf", norm_cdf),
    ("scipy.stats", "norm", "pdf", norm_pdf),
    ("scipy.stats", "norm", "logpdf", norm_logpdf),
    ("scipy.stats", "multivariate_normal", "logpdf", mvn_logpdf),
    ("scipy.stats", "multivariate_normal", "pdf", mvn_pdf),
    ("scipy.linalg", None, "solve_triangular", linalg_solve_triangular),
    ("scipy.linalg", None, "cho_factor", linalg_cho_factor),
    ("scipy.linalg", None, "cho_solve", linalg_cho_solve),
    ("scipy.linalg", None, "norm", linalg_norm),
    ("scipy.linalg", None, "eigh", linalg_eigh),
    ("scipy.linalg", None, "pinv", linalg_pinv),
    ("scipy.linalg", None, "svd", linalg_svd),
    ("scipy.linalg", None, "block_diag", linalg_block_diag),
    ("scipy.linalg", None, "expm", linalg_expm),
    ("scipy.linalg", None, "sqrtm", linalg_sqrtm),
    ("scipy.linalg", None, "logm", linalg_logm),
    ("scipy.special", None, "logsumexp", special_logsumexp),
    ("scipy.special", None, "log_softmax", special_log_softmax),
    ("scipy.special", None, "softmax", special_softmax),
    ("scipy.spatial.distance", None, "cdist", distance_cdist),
    ("scipy.spatial.distance", None, "pdist", distance_pdist),
    ("scipy.signal", None, "correlate", signal_correlate),
    ("scipy.signal", None, "convolve", signal_convolve),
    ("scipy.signal", None, "fftconvolve", signal_fftconvolve),
    ("scipy.signal", None, "oaconvolve", signal_fftconvolve),
    ("scipy.signal", None, "correlate2d", signal_correlate2d),
    ("scipy.signal", None, "convolve2d", signal_convolve2d),
]
TRACED_NAMES = [f"{m}.{o + '.' if o else ''}{a}" for m, o, a, _ in _REGISTRY]


def _entries():
    for modname, owner, attr, impl in _REGISTRY:
        module = sys.modules.get(modname)     # SciPy is never imported for this
        if module is None:
            continue
        if owner is None:
            original = getattr(module, attr, None)
            if original is not None:
                yield module, attr, _function_entry(original, impl)
        else:
            instance = getattr(module, owner, None)
            if instance is not None:
                cls = type(instance)
                yield cls, attr, _method_entry(cls, attr, impl)


def _function_entry(original, impl):
    def entry(*args, **kwargs):
        if tracing() and (_any_traced(args) or _any_traced(kwargs)):
            return impl(*args, **kwargs)
        return original(*args, **kwargs)
    entry.__name__ = getattr(original, "__name__", impl.__name__)
    entry.__qualname__ = getattr(original, "__qualname__", entry.__name__)
    entry.__doc__ = getattr(original, "__doc__", None)
    entry.__module__ = getattr(original, "__module__", None)
    entry.__wrapped__ = original
    return entry


def _method_entry(cls, name, impl):
    original = getattr(cls, name)          # the inherited function (unbound)

    def entry(self, *args, **kwargs):
        if tracing() and (_any_traced(args) or _any_traced(kwargs)):
            return impl(self, *args, **kwargs)
        return original(self, *args, **kwargs)
    entry.__name__ = name
    entry.__qualname__ = getattr(original, "__qualname__", name)
    entry.__doc__ = getattr(original, "__doc__", None)
    entry.__wrapped__ = original
    return entry


# The listed SciPy functions take traced arrays in tracing threads while in this block; also
# where the traced function's module imported them by name (`from scipy.linalg import inv`).
intercepting = Interception(_entries).active
