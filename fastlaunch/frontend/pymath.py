"""Python's `math` functions on traced scalars: `math.cos(theta)` with theta a traced element.

Robotics and physics code computes on single elements with the math module (`math.cos(x[2])`,
`math.hypot(dx, dy)`).  A math function converts its argument with float(), which a traced
value cannot answer, so while a thread traces the module's functions are replaced (reference
counted, as NumPy's creation functions are in frontend/numpy/trace_buffers.py; names imported
from math into the
traced function's module too).  Given a traced argument, each computes NumPy's equivalent on
the value converted to float64 and returns a 0-d float64 that is a *weak* Python float (NEP
50), as the Python float it stands for: `math.cos(t) * x32` stays float32, as in NumPy.
Predicates return weak bools, floor/ceil/trunc weak ints.

Where Python raises, the compiled function does too, on every call whose values would make it:
`ValueError('math domain error')` (sqrt of a negative, acos(2), log(0), ...) and
`OverflowError('math range error')` (exp(1000)) are runtime checks (common.require).
Otherwise the call goes to the original (other threads, untraced arguments)."""
from __future__ import annotations

import math

import numpy as np

from .numpy import common, registry
from ..ir import ops
from .numpy.trace_buffers import _any_traced
from .interception import Interception
from ..ir.graph import Op
from .trace import current_graph, tracing

_DOMAIN = "math domain error"
_RANGE = "math range error"


def _float(x, name: str):
    """x as Python's math sees it: one float64 value (a traced 0-d array)."""
    if not _any_traced(x):
        return np.float64(x)               # float(x): Python's own conversion and errors
    t = common._as_tracer(x)
    if t.dtype.kind == "c":
        raise TypeError(f"must be real number, not complex (math.{name} of a traced "
                        f"{t.dtype} value)")
    if t.size != 1:
        raise TypeError(f"only length-1 arrays can be converted to Python scalars "
                        f"(math.{name} of a traced array of shape {t.shape})")
    return t.reshape(()).astype(np.float64)


def _weak(t, kind=float):
    """A traced 0-d result standing for a Python float (int, bool)."""
    if not registry.is_tracer(t):
        return kind(t)
    dtype = {float: np.float64, int: np.int64, bool: np.bool_}[kind]
    return registry.wrap(t.astype(dtype).node, weak=kind, scalar=True)


def _domain(ok):
    common.require(ok, ValueError, _DOMAIN)


def _finite_result(result, *args):
    """Python's OverflowError: an infinite result of finite arguments."""
    finite_in = np.isfinite(args[0])
    for a in args[1:]:
        finite_in = finite_in & np.isfinite(a)
    common.require(~(np.isinf(result) & finite_in), OverflowError, _RANGE)
    return result


def _unary(name, fn, domain=None, overflow=False):
    def impl(x):
        v = _float(x, name)
        if domain is not None:
            _domain(~domain(v))             # NaN never fails a domain test, as in Python
        r = fn(v)
        if overflow:
            _finite_result(r, v)
        return _weak(r)
    return impl


def _log(x, base=None):
    v = _float(x, "log")
    _domain(~(v <= 0))
    r = np.log(v)
    if base is None:
        return _weak(r)
    b = _float(base, "log")
    _domain(~(b <= 0))
    common.require(~(b == 1), ZeroDivisionError, "float division by zero")
    return _weak(r / np.log(b))


def _pow(x, y):
    a, b = _float(x, "pow"), _float(y, "pow")
    integral = np.floor(b) == b
    _domain(~((a < 0) & np.isfinite(a) & ~integral & np.isfinite(b)))
    _domain(~((a == 0) & (b < 0)))
    # 1 ** anything and anything ** 0 are 1, NaN included (C99, as Python)
    r = np.where((a == 1) | (b == 0), 1.0, np.power(a, b))
    return _weak(_finite_result(r, a, b))


def _atan2(y, x):
    return _weak(np.arctan2(_float(y, "atan2"), _float(x, "atan2")))


def _hypot(*coordinates):
    if not coordinates:
        return 0.0
    vals = [np.abs(_float(c, "hypot")) for c in coordinates]
    r = vals[0]
    for v in vals[1:]:
        r = np.hypot(r, v)
    if len(vals) == 1:
        return _weak(r)
    # any infinite coordinate makes it infinite, even with a NaN among the others
    inf = np.isinf(vals[0])
    for v in vals[1:]:
        inf = inf | np.isinf(v)
    return _weak(_finite_result(np.where(inf, np.inf, r), *vals))


def _dist(p, q):
    if len(p) != len(q):
        raise ValueError("both points must have the same number of dimensions")
    return _hypot(*[_float(a, "dist") - _float(b, "dist") for a, b in zip(p, q)])


def _copysign(x, y):
    return _weak(np.copysign(_float(x, "copysign"), _float(y, "copysign")))


def _fmod(x, y):
    a, b = _float(x, "fmod"), _float(y, "fmod")
    _domain(~((b == 0) | np.isinf(a)) | np.isnan(a) | np.isnan(b))
    return _weak(np.fmod(a, b))


def _integral(name, fn):
    def impl(x):
        if name == "trunc" and _any_traced(x) and common._as_tracer(x).dtype != np.float64:
            # only np.float64 (a float) has __trunc__ among NumPy's scalars
            raise TypeError(f"type numpy.{common._as_tracer(x).dtype.name} doesn't define "
                            f"__trunc__ method")
        v = _float(x, name)
        common.require(~np.isnan(v), ValueError, "cannot convert float NaN to integer")
        common.require(~np.isinf(v), OverflowError,
                            "cannot convert float infinity to integer")
        common.require(np.abs(v) < 2.0 ** 63, OverflowError,
                            f"math.{name}: a result beyond 64 bits is not supported by "
                            f"fastlaunch (Python would return a big int)")
        # where a check fails the call raises; meanwhile the int is 0, so that arithmetic on it
        # (floor(x) * 2) does not overflow and report that instead of Python's error
        fits = ~np.isnan(v) & (np.abs(v) < 2.0 ** 63)
        return _weak(fn(np.where(fits, v, 0.0)), int)
    return impl


def _predicate(name, fn):
    def impl(x):
        return _weak(fn(_float(x, name)), bool)
    return impl


def _isclose(a, b, *, rel_tol=1e-09, abs_tol=0.0):
    if rel_tol < 0.0 or abs_tol < 0.0:
        raise ValueError("tolerances must be non-negative")
    x, y = _float(a, "isclose"), _float(b, "isclose")
    diff = np.abs(y - x)
    close = (x == y) | (np.isfinite(diff) & ((diff <= np.abs(rel_tol * y)) |
                                             (diff <= np.abs(rel_tol * x)) |
                                             (diff <= abs_tol)))
    return _weak(close, bool)


def _lgamma(x):
    v = _float(x, "lgamma")
    _domain(~((v <= 0) & (np.floor(v) == v)))
    r = registry.wrap(ops.elementwise(current_graph(), Op.LGAMMA, np.float64, [v.node]))
    return _weak(_finite_result(r, v))


def _erf(op):
    def impl(x):
        v = _float(x, op.value[0])
        return _weak(registry.wrap(ops.elementwise(current_graph(), op, np.float64, [v.node])))
    return impl


def _functions() -> dict:
    isinf, isnan = np.isinf, np.isnan
    return {
        "sqrt": _unary("sqrt", np.sqrt, lambda v: v < 0),
        "exp": _unary("exp", np.exp, overflow=True),
        "exp2": _unary("exp2", np.exp2, overflow=True),
        "expm1": _unary("expm1", np.expm1, overflow=True),
        "log": _log,
        "log2": _unary("log2", np.log2, lambda v: v <= 0),
        "log10": _unary("log10", np.log10, lambda v: v <= 0),
        "log1p": _unary("log1p", np.log1p, lambda v: v <= -1),
        "sin": _unary("sin", np.sin, isinf),
        "cos": _unary("cos", np.cos, isinf),
        "tan": _unary("tan", np.tan, isinf),
        "asin": _unary("asin", np.arcsin, lambda v: np.abs(v) > 1),
        "acos": _unary("acos", np.arccos, lambda v: np.abs(v) > 1),
        "atan": _unary("atan", np.arctan),
        "sinh": _unary("sinh", np.sinh, overflow=True),
        "cosh": _unary("cosh", np.cosh, overflow=True),
        "tanh": _unary("tanh", np.tanh),
        "asinh": _unary("asinh", np.arcsinh),
        "acosh": _unary("acosh", np.arccosh, lambda v: v < 1),
        "atanh": _unary("atanh", np.arctanh, lambda v: np.abs(v) >= 1),
        "cbrt": _unary("cbrt", np.cbrt),
        "fabs": _unary("fabs", np.abs),
        "degrees": _unary("degrees", np.degrees),
        "radians": _unary("radians", np.radians),
        "atan2": _atan2,
        "hypot": _hypot,
        "dist": _dist,
        "pow": _pow,
        "copysign": _copysign,
        "fmod": _fmod,
        "floor": _integral("floor", np.floor),
        "ceil": _integral("ceil", np.ceil),
        "trunc": _integral("trunc", np.trunc),
        "isnan": _predicate("isnan", isnan),
        "isinf": _predicate("isinf", isinf),
        "isfinite": _predicate("isfinite", np.isfinite),
        "isclose": _isclose,
        "erf": _erf(Op.ERF),
        "erfc": _erf(Op.ERFC),
        "lgamma": _lgamma,
    }


def _entry(name, original, impl):
    def call(*args, **kwargs):
        if tracing() and (_any_traced(args) or _any_traced(kwargs)):
            return impl(*args, **kwargs)
        return original(*args, **kwargs)
    call.__name__ = name
    call.__qualname__ = name
    call.__doc__ = original.__doc__
    call.__wrapped__ = original
    return call


def _entries():
    for name, impl in _functions().items():
        original = getattr(math, name, None)
        if original is not None:
            yield math, name, _entry(name, original, impl)


# math's functions take traced scalars in tracing threads while in this block; also where the
# traced function's module imported them by name (`from math import cos`)
intercepting = Interception(_entries).active
