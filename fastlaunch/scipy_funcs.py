"""Traced equivalents of a few well-known SciPy functions that convert their arguments.

SciPy's linear algebra and distributions call np.asarray on what they are given, so a traced
array cannot reach them through NumPy's dispatch (__array_function__): they would fail on the
conversion.  For a small, explicit list of them, the traced function gets our composition
instead, built from the traced NumPy surface (np.linalg, scipy.special.ndtr, reductions), with
SciPy's semantics: its defaults (scipy.linalg.cholesky is upper triangular), its value checks
(check_finite, a covariance that is not positive semidefinite) as runtime checks, its results'
dtypes and shapes.

How the calls are intercepted: while some thread traces, the listed attributes are replaced
(reference counted, like the creation functions in creation.py): the module attributes
scipy.linalg.inv/solve/cholesky/det, and the methods pdf/cdf/logpdf of scipy.stats.norm's
class and pdf/logpdf of scipy.stats.multivariate_normal's class (set on the class itself, so
frozen distributions, which call them, are covered too; deleting them afterwards restores the
inherited methods).  A replacement calls SciPy's own function unless the calling thread is
tracing and an argument is traced: other threads, and calls on plain arrays, get SciPy's
results.  Only modules the program has already imported are touched (fastlaunch never imports
SciPy for this).  Names imported into the traced function's own module (`from scipy.linalg
import inv`) are replaced there too, as creation.py does for NumPy's.  Nothing of this runs
when a compiled function replays: the compositions are ordinary graph nodes.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from . import numpy_api, numpy_funcs
from .creation import _any_traced
from .interception import Interception
from .errors import TracingError
from .trace import tracing

_LOG_2PI = math.log(2 * math.pi)
_NOT_FINITE = "array must not contain infs or NaNs"


def _finite(a, check_finite):
    if check_finite:
        numpy_funcs.require(np.all(np.isfinite(a)), ValueError, _NOT_FINITE)


def _matrix(a, name):
    t = numpy_api._as_tracer(a)
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ValueError(f"expected square matrix" if t.ndim == 2 else
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
    bt = numpy_api._as_tracer(b)
    if bt.ndim not in (1, 2):
        raise TracingError("scipy.linalg.solve with a right-hand side of more than 2 "
                           "dimensions is not traced by fastlaunch")
    if bt.shape[0] != t.shape[0]:
        raise ValueError(f"Input b has to have same number of rows as input a")
    _finite(t, check_finite)
    _finite(bt, check_finite)
    if transposed:
        t = t.T
    # a symmetric matrix is given by one triangle (the lower one with lower=True)
    if assume_a not in (None, "gen", "general"):
        tri = np.tril(t) if lower else np.triu(t)
        t = tri + tri.T - np.diag(np.diagonal(t))
    return np.linalg.solve(t, bt.astype(np.result_type(bt.dtype, np.float32)))


# ---- scipy.stats.norm --------------------------------------------------------------------------
def _standardised(x, loc, scale):
    x = numpy_api._as_tracer(x).astype(np.float64) if _any_traced(x) else \
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
    cast = (lambda v: numpy_api._as_tracer(v).astype(np.float64) if _any_traced(v)
            else np.asarray(v, np.float64))
    return cast(loc), cast(scale)


# ---- scipy.stats.multivariate_normal -------------------------------------------------------------
def _as_float(v):
    return numpy_api._as_tracer(v).astype(np.float64) if _any_traced(v) else \
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
    numpy_funcs.require(np.all(np.isfinite(cov)), ValueError, _NOT_FINITE)
    cov = numpy_api._as_tracer(cov)
    s, u = np.linalg.eigh(cov)
    eps = 1e6 * np.finfo(np.float64).eps * np.max(np.abs(s))
    numpy_funcs.require(np.min(s) >= -eps, ValueError,
                        "The input matrix must be symmetric positive semidefinite.")
    big = s > eps
    if not allow_singular:
        numpy_funcs.require(np.all(big), np.linalg.LinAlgError,
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
    a = numpy_api._as_tracer(a) if _any_traced(a) else a
    k = numpy_api._as_tracer(k) if _any_traced(k) else k
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


def signal_correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    a, k = _signal_operands(in1, in2, "correlate2d")
    if np.ndim(a) != 2:
        raise ValueError("correlate2d inputs must both be 2-D arrays")
    if _any_traced(fillvalue):
        raise TracingError("scipy.signal.correlate2d with a traced fillvalue is not traced "
                           "by fastlaunch")
    swapped = mode == "valid" and not all(n >= m for n, m in zip(a.shape, k.shape))
    if swapped:
        a, k = k, a
    out = _correlation_nd(a, k, mode, _boundary(boundary), fillvalue, round_up=True)
    return _flipped(out) if swapped else out


def signal_convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    a, k = _signal_operands(in1, in2, "convolve2d")
    if np.ndim(a) != 2:
        raise ValueError("convolve2d inputs must both be 2-D arrays")
    if _any_traced(fillvalue):
        raise TracingError("scipy.signal.convolve2d with a traced fillvalue is not traced "
                           "by fastlaunch")
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
