"""Helpers several families share: axes, literals, static values, dtypes of operands."""
from __future__ import annotations

import operator

import numpy as np

from ...errors import TracingError
from ...ir import ops
from ...ir.graph import Node, Op
from ..trace import Storage, Tracer, current_graph


# ---- shapes and views ----------------------------------------------------------------------
def _as_tracer(a) -> Tracer:
    return a if is_tracer(a) else wrap(node_of(a), scalar=False)


def _readonly(node: Node, what: str) -> Tracer:
    return Tracer(Storage(node, frozen_reason=f"{what} returns a read-only view"), scalar=False)


_INTP = np.dtype(np.intp)


# ---- helpers ---------------------------------------------------------------------------------
def _axis(axis, ndim: int) -> int:
    """NumPy's normalize_axis_index: one axis of an array of `ndim` dims (AxisError if not)."""
    a = operator.index(axis)
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(a, ndim)
    return a % ndim


def _axes(axis, ndim: int, allow_duplicate=False) -> tuple:
    """NumPy's normalize_axis_tuple."""
    out = tuple(_axis(a, ndim) for a in ops.axis_items(axis))
    if not allow_duplicate and len(set(out)) != len(out):
        raise ValueError("repeated axis")
    return out


def _lit(value, dtype) -> Node:
    return ops.literal(current_graph(), value, dtype)


def _ew(op: Op, dtype, *nodes) -> Node:
    return ops.elementwise(current_graph(), op, dtype, list(nodes))


def _iota(shape, axis: int) -> Node:
    return ops.iota(current_graph(), tuple(shape), axis, _INTP)


def _static_int(value, what: str) -> int:
    """A Python int from a static value (a traced scalar argument asks to be specialised)."""
    try:
        return operator.index(value)
    except TypeError:
        if is_tracer(value):
            return int(value)
        raise TypeError(f"{what} must be an integer, not {type(value).__name__}") from None


def _static_values(x, what: str):
    """x with every traced scalar replaced by its Python int (nested lists kept)."""
    if isinstance(x, (list, tuple)):
        return [_static_values(v, what) for v in x]
    if is_tracer(x):
        return _static_int(x, what)
    return x


def _read_only(node: Node, reason: str) -> Tracer:
    """A traced value that refuses writes (a window or broadcast view in NumPy)."""
    return Tracer(Storage(node, frozen_reason=reason))


def scalar_assigned(g, value, dtype) -> Node:
    """A static scalar as NumPy assigns it into an array of `dtype` (a[...] = v): into an
    integer array through a Python int, which must fit (OverflowError, also for NumPy
    scalars and floats); otherwise an unsafe cast."""
    if is_tracer(value):
        return ops.cast(g, value.node, dtype, value.weak, wraps=value.weak is None)
    dtype = np.dtype(dtype)
    v = np.asarray(value)
    if dtype.kind in "iu" and v.dtype.kind in "biuf":
        i = int(v)
        info = np.iinfo(dtype)
        if not info.min <= i <= info.max:
            raise OverflowError(f"Python integer {i} out of bounds for {dtype}")
        return ops.literal(g, i, dtype)
    with np.errstate(all="ignore"):
        return ops.literal(g, v.astype(dtype)[()], dtype)


def _static_array(x, what: str) -> np.ndarray:
    """x as a NumPy array of values known while tracing.  A traced scalar computed from
    Python scalar arguments alone (np.pad(a, n) with n an int argument) specialises the trace
    on them (SpecializeRequest, from int()); any other traced value is an error naming `what`."""
    if isinstance(x, (list, tuple)) and any(_any_traced(v) for v in x):
        return np.asarray([_static_array(v, what) for v in x])
    if getattr(type(x), "__fl_tracer__", None) is not None:
        x = type(x).__fl_tracer__(x) if type(x).__fl_tracer__(x) is not None else x
    if is_tracer(x):
        if x.ndim == 0 and x.dtype.kind in "iub":
            from ..trace import _scalar_argument_positions
            if _scalar_argument_positions(x.node):
                return np.asarray(int(x))          # raises SpecializeRequest
        raise TracingError(f"{what} must be known while tracing (a constant, not a traced "
                           f"array); a Python int argument is specialised on automatically")
    return np.asarray(x)


def _weak_or_array(x):
    """NumPy's `x if type(x) in (int, float, complex) else np.asarray(x)` for traced code."""
    if type(x) in (int, float, bool) or is_tracer(x):
        return x
    if isinstance(x, complex):
        raise TypeError("complex numbers are not supported by fastlaunch")
    return _as_tracer(x)


def _dtype_of(x):
    """The argument np.result_type takes for x: a weak Python scalar stays a Python scalar."""
    if is_tracer(x):
        return x.weak(0) if x.weak is not None else x.dtype
    if type(x) in (int, float, bool):
        return x
    return np.asarray(x).dtype


def _static_scalar(v, what):
    if is_tracer(v):
        raise TracingError(f"{what} must be known while tracing (not a traced value)")
    return v


def _shape_of(x):
    return x.shape if is_tracer(x) else np.shape(x)


# ==== runtime checks ===================================================================================
def require(cond, exc: type, what: str) -> None:
    """NumPy's `if not cond: raise exc(what)` on values: now for a constant condition, when
    the function runs for a traced one (ops.add_check: the call raises, nothing written)."""
    if is_tracer(cond):
        ops.add_check(current_graph(), cond.node, exc,
                      f"{what} (fastlaunch: checked when the compiled function ran; no argument "
                      f"was modified)")
    elif not np.all(cond):
        raise exc(what)


def _moveaxis(t, source, destination):
    return moveaxis(t, source, destination)


def _none(cond) -> Tracer:
    """not any(cond), traced."""
    return call_ufunc(np.logical_not, (any_(cond),))


def _as_value(node):
    return wrap(node, scalar=False)


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .reductions import any_  # noqa: E402
from .registry import is_tracer, node_of, wrap  # noqa: E402
from .shaping import moveaxis  # noqa: E402
from .ufuncs import call_ufunc  # noqa: E402
from .trace_buffers import _any_traced  # noqa: E402
