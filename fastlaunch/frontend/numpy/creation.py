"""Creation from traced values: `array`/`asarray`/`copy`, `*_like`,
`linspace`/`logspace`/`geomspace`, `meshgrid`, `broadcast_arrays`."""
from __future__ import annotations

from typing import Any
import math

import numpy as np

from ...ir import ops
from ...ir.graph import Op, check_shape
from ..trace import current_graph, tracing
from .registry import implements


@implements(np.copy)
def copy(a, order="K", subok=False):
    return wrap(node_of(a), scalar=False)


@implements(np.asarray, np.array, np.asanyarray, np.ascontiguousarray)
def array(obj, dtype=None, copy=None, order=None, *, ndmin=0, **kwargs):
    if isinstance(obj, (list, tuple)):
        items = [array(o) if isinstance(o, (list, tuple)) else o for o in obj]
        if any(is_tracer(o) for o in items):
            out = stack(items)
            out = astype(out, dtype) if dtype is not None else out
            return reshape(out, (1,) * (ndmin - out.ndim) + out.shape) if ndmin > out.ndim \
                else out
    n = node_of(obj)
    if dtype is not None:
        n = ops.cast(current_graph(), n, ops.check_dtype(dtype, "np.array(dtype=...)"))
    if ndmin > n.ndim:
        n = ops.reshape(current_graph(), n, (1,) * (ndmin - n.ndim) + n.shape)
    return wrap(n, scalar=False)


@implements(np.zeros_like)
def zeros_like(a, dtype=None, order="K", subok=True, shape=None, **kw):
    return _like(a, dtype, shape, 0)


@implements(np.ones_like)
def ones_like(a, dtype=None, order="K", subok=True, shape=None, **kw):
    return _like(a, dtype, shape, 1)


@implements(np.empty_like)
def empty_like(a, dtype=None, order="K", subok=True, shape=None, **kw):
    return _like(a, dtype, shape, 0)


@implements(np.full_like)
def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):
    if is_tracer(fill_value):
        n = node_of(a)
        dt = np.dtype(dtype) if dtype is not None else n.dtype
        g = current_graph()
        shp = n.shape if shape is None else check_shape(
            (shape,) if isinstance(shape, (int, np.integer)) else shape, dt)
        return wrap(ops.broadcast_to(g, ops.cast(g, fill_value.node, dt), shp), scalar=False)
    return _like(a, dtype, shape, fill_value)


@implements(np.meshgrid)
def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    nd = len(xi)
    outs = []
    for i, x in enumerate(xi):
        shape = [1] * nd
        shape[i] = -1
        outs.append(reshape(ravel(_as_tracer(x)), tuple(shape)))
    if indexing == "xy" and nd > 1:
        for i in range(nd):
            s = list(outs[i].shape)
            s[0], s[1] = s[1], s[0]
            outs[i] = reshape(outs[i], tuple(s))
    if not sparse:
        full = ops.broadcast_shapes(*(o.shape for o in outs))
        outs = [wrap(ops.broadcast_to(current_graph(), o.node, full), scalar=False)
                for o in outs]
    return tuple(outs)


def asarray(obj: Any) -> Any:
    """Inside a traced function: `obj` (a NumPy array or nested list) as a traced constant, so
    that NumPy-level indexing by traced values works (`fl.asarray(table)[idx]`).  Outside a
    trace this is np.asarray.

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> table = np.array([10.0, 20.0, 30.0])
        >>> lookup = fl.compile(lambda i: fl.asarray(table)[i])   # table[i] would not trace
        >>> lookup(np.array([2, 0]))
        array([30., 10.])
    """
    if not tracing():
        return np.asarray(obj)
    return array(obj)


@implements(np.broadcast_arrays)
def broadcast_arrays(*args, subok=False):
    shape = ops.broadcast_shapes(*(_shape_of(a) for a in args))
    g = current_graph()
    out = []
    for a in args:
        if _shape_of(a) == shape:
            out.append(a)
        elif is_tracer(a):
            out.append(_read_only(ops.broadcast_to(g, a.node, shape),
                                  "an array made by np.broadcast_arrays is read-only in "
                                  "fastlaunch (its elements repeat); copy it first to write"))
        else:
            out.append(np.broadcast_to(np.asarray(a), shape))
    return tuple(out)


# ==== evenly spaced numbers ==========================================================================
@implements(np.linspace)
def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
             device=None):
    """NumPy's linspace with start/stop traced (num is static: it is the result's size)."""
    if device not in (None, "cpu"):
        raise ValueError(f"Device not understood. Only \"cpu\" is allowed, but received: "
                         f"{device}")
    num = _static_int(num, "np.linspace's num")
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    div = (num - 1) if endpoint else num
    g = current_graph()
    sn, en = node_of(start), node_of(stop)
    dt = np.result_type(_dtype_of(start), _dtype_of(stop), 0.0)   # inexact, as NumPy's
    ops.check_dtype(dt, "np.linspace")
    if dtype is None:
        dtype, integer = dt, False
    else:
        dtype = ops.check_dtype(dtype, "np.linspace(dtype=...)")
        integer = np.issubdtype(dtype, np.integer)
    delta = _ew(Op.SUB, dt, ops.cast(g, en, dt), ops.cast(g, sn, dt))
    y = ops.iota(g, (num,) + (1,) * delta.ndim, 0, dt)
    if div > 0:
        step = _ew(Op.DIV, dt, delta, _lit(div, dt))
        # NumPy divides first where a step underflows to zero (denormal ranges): if any does
        zero = ops.reduce(g, Op.ANY, _ew(Op.EQ, np.bool_, step, _lit(0, dt)), None, False)
        y = _ew(Op.WHERE, dt, zero, _ew(Op.MUL, dt, _ew(Op.DIV, dt, y, _lit(div, dt)), delta),
                _ew(Op.MUL, dt, y, step))
    else:
        step = None
        y = _ew(Op.MUL, dt, y, delta)
    y = _ew(Op.ADD, dt, y, ops.cast(g, sn, dt))
    if endpoint and num > 1:
        last = ops.broadcast_to(g, ops.cast(g, en, dt), y.shape[1:])
        y = ops.set_region(g, y, (num - 1,) + (0,) * (y.ndim - 1), (1,) * y.ndim,
                           (1,) + y.shape[1:], ops.reshape(g, last, (1,) + y.shape[1:]))
    out = wrap(y, scalar=False)
    if axis != 0:
        out = _moveaxis(out, 0, axis)
    if integer:
        out = call_ufunc(np.floor, (out,))
    out = out.astype(dtype) if out.dtype != dtype else out
    if retstep:
        return out, (wrap(step, scalar=step.ndim == 0) if step is not None else math.nan)
    return out


@implements(np.logspace)
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    if not isinstance(base, (float, int)) and np.ndim(base):
        # an array base broadcasts with start and stop, which may move the axis
        ndmax = len(np.broadcast_shapes(*(np.shape(x) if not is_tracer(x) else x.shape
                                          for x in (start, stop, base))))
        start, stop, base = (array(x, ndmin=ndmax) for x in (start, stop, base))
        base = expand_dims(base, axis)
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    out = call_ufunc(np.power, (base, y))
    return out if dtype is None else out.astype(dtype)


@implements(np.geomspace)
def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    start, stop = _as_tracer(start), _as_tracer(stop)
    for end in (start, stop):
        require(_none(call_ufunc(np.equal, (end, 0))), ValueError,
                "Geometric sequence cannot include zero")
    num = _static_int(num, "np.geomspace's num")
    dt = np.result_type(start.dtype, stop.dtype, float(num),
                        np.zeros((), dtype if dtype is not None else np.float64))
    ops.check_dtype(dt, "np.geomspace")
    dtype = dt if dtype is None else np.dtype(dtype)
    start, stop = start.astype(dt), stop.astype(dt)
    # negative ranges: computed on positive values, the sign put back at the end
    sign = call_ufunc(np.sign, (start,))
    start = start / sign
    stop = stop / sign
    result = logspace(call_ufunc(np.log10, (start,)), call_ufunc(np.log10, (stop,)), num=num,
                      endpoint=endpoint, base=10.0, dtype=dt)
    # the ends exactly, as NumPy (10 ** log10(x) need not be x)
    if num > 0:
        result[0] = start
        if num > 1 and endpoint:
            result[-1] = stop
    result = result * sign
    if axis != 0:
        result = _moveaxis(result, 0, axis)
    return result.astype(dtype) if result.dtype != dtype else result


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import (  # noqa: E402
    _as_tracer, _dtype_of, _ew, _lit, _moveaxis, _none, _read_only, _shape_of, _static_int, require)
from .registry import is_tracer, node_of, wrap  # noqa: E402
from .shaping import _like, expand_dims, ravel, reshape, stack  # noqa: E402
from .ufuncs import astype, call_ufunc  # noqa: E402
