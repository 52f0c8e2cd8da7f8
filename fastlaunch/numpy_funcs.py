"""NumPy's library functions built from the core ops: shifts and differences, padding, tiling
and windows, counting, closeness tests, selection, splitting and the rest of the surface.

Each one is a composition of what ops.py builds (views, elementwise ops, reductions, scans,
gathers with index arithmetic, scatters, region updates): no kernel kind of its own, so each
fuses with its neighbours as its parts do.  They follow NumPy's own definitions, argument
checks and error messages; where fastlaunch must differ (a data-dependent result size, a
traced value needed as a Python value) the function raises TracingError saying what to pass
instead.  Registered in numpy_api.FUNCTIONS like the rest of the traced surface.

Size: over 1,000 lines: part of the traced NumPy surface, until issue 26 splits it (with
numpy_api.py) by family: ufuncs, reductions, indexing, shape and joining, linear algebra,
sorting, random, creation.
"""
from __future__ import annotations

import math
import operator
import warnings

import numpy as np

from . import numpy_api, ops, special
from .errors import TracingError
from .ir import Node, Op
from .creation import TraceBuffer, _any_traced
from .interception import Interception
from .numpy_api import (FUNCTIONS, _as_tracer, all_, any_, array, call_ufunc, concatenate,
                        copy, getitem, implements, is_tracer, node_of, operand, ravel, reshape,
                        setitem, sum_, transpose, where, wrap)
from .trace import Storage, Tracer, current_graph, memory_layout, tracing

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
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = tuple(_axis(a, ndim) for a in axes)
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


def _reindex(src: Node, index_of: dict) -> Node:
    """src re-indexed along some axes in one gather: out[..., i, ...] = src[..., f(i), ...].
    index_of: axis -> (output length, f), f(iota) the source index (intp node) for an iota of
    the output positions shaped to broadcast along that axis.  The other axes keep theirs."""
    if not index_of:
        return src
    g = current_graph()
    lo, hi = min(index_of), max(index_of)
    lens = [index_of[d][0] if d in index_of else src.shape[d] for d in range(lo, hi + 1)]
    nodes = []
    for k, d in enumerate(range(lo, hi + 1)):
        shape = tuple(n if j == k else 1 for j, n in enumerate(lens))
        it = _iota(shape, k)
        nodes.append(index_of[d][1](it) if d in index_of else it)
    return ops.gather(g, src, nodes, lo)


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
            from .trace import _scalar_argument_positions
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


# ==== shifts and differences ======================================================================
@implements(np.roll)
def roll(a, shift, axis=None):
    t = _as_tracer(a)
    if t.ndim == 1 and type(shift) is int and (axis is None or type(axis) is int and
                                                 axis in (0, -1)):
        # a 1-D stencil's shift, made every step of a time loop: the nodes the general path
        # below makes (iota - offset, gathered; ravel and reshape are no-ops), directly
        return wrap(_roll_1d(t.node, shift), scalar=False)
    if axis is None:
        return reshape(roll(ravel(t), shift, 0), t.shape)
    total = dict.fromkeys(range(t.ndim), 0)
    if type(shift) is int and type(axis) is int:
        # the common call (a loop's stencil makes it every step): no arrays to broadcast
        total[_axis(axis, t.ndim)] = shift
    else:
        axes = _axes(axis, t.ndim, allow_duplicate=True)
        shift_arr = np.asarray(_static_values(shift, "np.roll's shift"))
        if shift_arr.dtype.kind not in "iub":
            raise TypeError(f"np.roll's shift must be integers, not {shift_arr.dtype}")
        pairs = np.broadcast(shift_arr, np.asarray(axes))
        if pairs.ndim > 1:
            raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
        for sh, ax in pairs:
            total[int(ax)] += int(sh)
    index_of = {}
    for ax, offset in total.items():
        n = t.shape[ax]
        offset %= n or 1
        if offset:
            # source index i - offset in [-offset, n - offset): the gather wraps negatives
            index_of[ax] = (n, lambda it, o=offset: _ew(Op.SUB, _INTP, it, _lit(o, _INTP)))
    return wrap(_reindex(t.node, index_of), scalar=False)


def _roll_1d(src: Node, shift: int) -> Node:
    n = src.shape[0]
    offset = shift % (n or 1)
    if not offset:
        return src
    g = current_graph()
    it = ops.iota(g, (n,), 0, _INTP)
    index = g.add(Op.SUB, _INTP, (n,), (it, ops.literal(g, offset, _INTP)))
    # every index lies in [-offset, n - offset): within the gather's bounds, nothing to check
    return g.add(Op.GATHER, src.dtype, (n,), (src, index), axis=0)


def _shifted_pair(t: Tracer, axis: int):
    hi = [slice(None)] * t.ndim
    lo = [slice(None)] * t.ndim
    hi[axis] = slice(1, None)
    lo[axis] = slice(None, -1)
    return getitem(t, tuple(hi)), getitem(t, tuple(lo))


@implements(np.diff)
def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    n = _static_int(n, "np.diff's n")
    if n == 0:
        return a
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    t = _as_tracer(a)
    if t.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    axis = _axis(axis, t.ndim)
    combined = []
    for extra, at_end in ((prepend, False), (append, True)):
        if extra is np._NoValue:
            continue
        e = _as_tracer(extra)
        if e.ndim == 0:
            shape = list(t.shape)
            shape[axis] = 1
            e = wrap(ops.broadcast_to(current_graph(), e.node, tuple(shape)), scalar=False)
        combined.append((at_end, e))
    if combined:
        parts = [e for end, e in combined if not end] + [t] + [e for end, e in combined if end]
        t = concatenate(parts, axis)
    op = np.not_equal if t.dtype == np.bool_ else np.subtract
    for _ in range(n):
        t = call_ufunc(op, _shifted_pair(t, axis))
    return t


@implements(np.ediff1d)
def ediff1d(ary, to_end=None, to_begin=None):
    t = ravel(_as_tracer(ary))
    dtype_req = t.dtype
    if to_begin is None and to_end is None:
        return call_ufunc(np.subtract, (getitem(t, slice(1, None)), getitem(t, slice(None, -1))))
    parts = []
    for extra, name in ((to_begin, "to_begin"), (to_end, "to_end")):
        if extra is None:
            parts.append(None)
            continue
        e = _as_tracer(extra)
        if not np.can_cast(e.dtype, dtype_req, casting="same_kind"):
            raise TypeError(f"dtype of `{name}` must be compatible with input `ary` under the "
                            f"`same_kind` rule.")
        parts.append(ravel(e))
    middle = call_ufunc(np.subtract, (getitem(t, slice(1, None)), getitem(t, slice(None, -1))))
    pieces = [p for p in (parts[0], middle, parts[1]) if p is not None]
    g = current_graph()
    # the result has ary's dtype; to_begin/to_end are assigned into it (an unsafe cast)
    return concatenate([wrap(ops.cast(g, p.node, dtype_req, wraps=True), scalar=False)
                        for p in pieces])


@implements(np.gradient)
def gradient(f, *varargs, axis=None, edge_order=1):
    f = _as_tracer(f)
    nd = f.ndim
    axes = tuple(range(nd)) if axis is None else _axes(axis, nd)
    n = len(varargs)
    if n == 0:
        dx = [1.0] * len(axes)
    elif n == 1 and np.ndim(varargs[0]) == 0:
        dx = list(varargs) * len(axes)
    elif n == len(axes):
        dx = list(varargs)
        for i, distances in enumerate(dx):
            if np.ndim(distances) == 0:
                continue
            if np.ndim(distances) != 1:
                raise ValueError("distances must be either scalars or 1d")
            if len(distances) != f.shape[axes[i]]:
                raise ValueError("when 1d, distances must match the length of the "
                                 "corresponding dimension")
            if is_tracer(distances):
                d = distances if distances.dtype.kind == "f" else \
                    wrap(ops.cast(current_graph(), distances.node, np.float64), scalar=False)
                # NumPy uses the uniform formula when the distances turn out equally spaced;
                # traced distances always take the general one (equal up to rounding)
                dx[i] = diff(d)
                continue
            d = np.asarray(distances)
            if np.issubdtype(d.dtype, np.integer):
                d = d.astype(np.float64)
            diffx = np.diff(d)
            dx[i] = diffx[0] if (diffx == diffx[0]).all() else diffx
    else:
        raise TypeError("invalid number of arguments")
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    otype = f.dtype
    if otype.kind not in "fc":
        if otype.kind in "iu":
            f = wrap(ops.cast(current_graph(), f.node, np.float64), scalar=False)
        otype = np.dtype(np.float64)
    outvals = []
    for ax, ax_dx in zip(axes, dx):
        outvals.append(_gradient_axis(f, ax, ax_dx, edge_order, otype))
    return outvals[0] if len(axes) == 1 else tuple(outvals)


def _gradient_axis(f: Tracer, axis: int, ax_dx, edge_order: int, otype) -> Tracer:
    if f.shape[axis] < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required.")
    nd = f.ndim
    g = current_graph()
    out = wrap(ops.broadcast_to(g, ops.literal(g, 0, otype), f.shape), scalar=False)

    def at(k):
        key = [slice(None)] * nd
        key[axis] = k
        return tuple(key)

    def piece(k):
        return getitem(f, at(k))

    uniform = np.ndim(ax_dx) == 0
    if not uniform:
        shape = [1] * nd
        shape[axis] = -1
        ax_dx = ax_dx if is_tracer(ax_dx) else np.asarray(ax_dx)
    if uniform:
        setitem(out, at(slice(1, -1)), (piece(slice(2, None)) - piece(slice(None, -2)))
                / (2. * ax_dx))
    else:
        dx1, dx2 = ax_dx[0:-1], ax_dx[1:]
        a = -(dx2) / (dx1 * (dx1 + dx2))
        b = (dx2 - dx1) / (dx1 * dx2)
        c = dx1 / (dx2 * (dx1 + dx2))
        a, b, c = (reshape(_as_tracer(v), tuple(shape)) for v in (a, b, c))
        setitem(out, at(slice(1, -1)), a * piece(slice(None, -2)) + b * piece(slice(1, -1))
                + c * piece(slice(2, None)))
    if edge_order == 1:
        dx_0 = ax_dx if uniform else ax_dx[0]
        setitem(out, at(0), (piece(1) - piece(0)) / dx_0)
        dx_n = ax_dx if uniform else ax_dx[-1]
        setitem(out, at(-1), (piece(-1) - piece(-2)) / dx_n)
    else:
        if uniform:
            a, b, c = -1.5 / ax_dx, 2. / ax_dx, -0.5 / ax_dx
        else:
            dx1, dx2 = ax_dx[0], ax_dx[1]
            a = -(2. * dx1 + dx2) / (dx1 * (dx1 + dx2))
            b = (dx1 + dx2) / (dx1 * dx2)
            c = - dx1 / (dx2 * (dx1 + dx2))
        setitem(out, at(0), a * piece(0) + b * piece(1) + c * piece(2))
        if uniform:
            a, b, c = 0.5 / ax_dx, -2. / ax_dx, 1.5 / ax_dx
        else:
            dx1, dx2 = ax_dx[-2], ax_dx[-1]
            a = (dx2) / (dx1 * (dx1 + dx2))
            b = - (dx2 + dx1) / (dx1 * dx2)
            c = (2. * dx2 + dx1) / (dx2 * (dx1 + dx2))
        setitem(out, at(-1), a * piece(-3) + b * piece(-2) + c * piece(-1))
    return out


_CORRELATE_MODES = {"valid": 0, "same": 1, "full": 2, 0: 0, 1: 1, 2: 2}


def _correlation(a, v, mode, convolve: bool) -> Tracer:
    """np.correlate / np.convolve as one reduction: out[i] = sum_j A[i + j + shift] * V[j]
    over the overlapping elements, for a static kernel length."""
    g = current_graph()
    an, vn = node_of(a), node_of(v)
    if not convolve and (an.ndim == 0 or vn.ndim == 0):     # np.convolve makes them 1-d
        raise ValueError("object of too small depth for desired array")
    an = ops.reshape(g, an, (1,)) if an.ndim == 0 else an
    vn = ops.reshape(g, vn, (1,)) if vn.ndim == 0 else vn
    if an.ndim > 1 or vn.ndim > 1:
        raise ValueError("object too deep for desired array")
    if mode not in _CORRELATE_MODES:
        raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")
    mode = _CORRELATE_MODES[mode]
    N, M = an.shape[0], vn.shape[0]
    if convolve:
        if N == 0:
            raise ValueError("a cannot be empty")
        if M == 0:
            raise ValueError("v cannot be empty")
        if M > N:
            an, vn, N, M = vn, an, M, N
        vn = ops.slice_view(g, vn, (M - 1,), (-1,), (M,))     # convolution: v reversed
    elif N == 0 or M == 0:
        raise ValueError(f"{'a' if N == 0 else 'v'} cannot be empty")
    dt = ops.check_dtype(np.result_type(an.dtype, vn.dtype), "np.correlate")
    small = min(N, M)
    full = N + M - 1
    if mode == 2:
        length, start = full, 0
    elif mode == 1:
        length, off = max(N, M), (small - 1) - small // 2
        # NumPy swaps the operands of a correlation whose second is longer and reverses the
        # result: the 'same' window then sits at the mirrored offset
        start = off if convolve or N >= M else full - off - length
    else:
        length, start = max(N, M) - small + 1, small - 1
    i = _iota((length, M), 0)
    j = _iota((length, M), 1)
    idx = _ew(Op.ADD, _INTP, _ew(Op.ADD, _INTP, i, j), _lit(start - (M - 1), _INTP))
    inside = _ew(Op.LOGICAL_AND, np.bool_, _ew(Op.GE, np.bool_, idx, _lit(0, _INTP)),
                 _ew(Op.LT, np.bool_, idx, _lit(N, _INTP)))
    safe = _ew(Op.WHERE, _INTP, inside, idx, _lit(0, _INTP))
    av = ops.cast(g, ops.gather(g, an, [safe], 0), dt)
    vv = ops.broadcast_to(g, ops.reshape(g, ops.cast(g, vn, dt), (1, M)), (length, M))
    if dt.kind == "b":
        prod = _ew(Op.LOGICAL_AND, dt, inside, _ew(Op.LOGICAL_AND, dt, av, vv))
        return wrap(ops.reduce(g, Op.ANY, prod, 1), scalar=False)
    prod = _ew(Op.WHERE, dt, inside, _ew(Op.MUL, dt, av, vv), _lit(0, dt))
    return wrap(ops.reduce(g, Op.SUM, prod, 1, dtype=dt), scalar=False)


@implements(np.correlate)
def correlate(a, v, mode="valid"):
    return _correlation(a, v, mode, convolve=False)


@implements(np.convolve)
def convolve(a, v, mode="full"):
    return _correlation(a, v, mode, convolve=True)


# ==== padding, tiling, windows ======================================================================
def _as_pairs(x, ndim: int, as_index=False):
    """NumPy's pad-width broadcasting: a scalar, (before, after), or one pair per axis."""
    x = np.array(x)
    if as_index:
        x = np.round(x).astype(np.intp, copy=False)
    if x.ndim < 3:
        if x.size == 1:
            x = x.ravel()
            if as_index and x[0] < 0:
                raise ValueError("index can't contain negative values")
            return ((x[0].item(), x[0].item()),) * ndim
        if x.size == 2 and x.shape != (2, 1):
            x = x.ravel()
            if as_index and (x[0] < 0 or x[1] < 0):
                raise ValueError("index can't contain negative values")
            return ((x[0].item(), x[1].item()),) * ndim
    if as_index and x.size and x.min() < 0:
        raise ValueError("index can't contain negative values")
    return [tuple(p) for p in np.broadcast_to(x, (ndim, 2)).tolist()]


_PAD_KWARGS = {"constant": {"constant_values"}, "edge": set(), "wrap": set(),
               "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}
_PAD_NUMPY_ONLY = ("linear_ramp", "maximum", "mean", "median", "minimum", "empty")


def _pad_index(mode: str, n: int, before: int):
    """The source index of output position `it` along one padded axis of length n."""
    def rel(it):
        return _ew(Op.SUB, _INTP, it, _lit(before, _INTP))

    def mod(x, m):
        return _ew(Op.MOD, _INTP, x, _lit(m, _INTP))

    if mode == "edge" or (mode == "reflect" and n == 1):
        return lambda it: _ew(Op.MINIMUM, _INTP, _ew(Op.MAXIMUM, _INTP, rel(it), _lit(0, _INTP)),
                              _lit(n - 1, _INTP))
    if mode == "wrap":
        return lambda it: mod(rel(it), n)
    if mode == "symmetric":        # period 2n: n elements, then the same mirrored
        def sym(it):
            m = mod(rel(it), 2 * n)
            return _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, m, _lit(n, _INTP)), m,
                       _ew(Op.SUB, _INTP, _lit(2 * n - 1, _INTP), m))
        return sym

    def reflect(it):                # period 2n - 2: the edges are not repeated
        m = mod(rel(it), 2 * n - 2)
        return _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, m, _lit(n, _INTP)), m,
                   _ew(Op.SUB, _INTP, _lit(2 * n - 2, _INTP), m))
    return reflect


@implements(np.pad)
def pad(array, pad_width, mode="constant", **kwargs):
    t = _as_tracer(array)
    nd = t.ndim
    if callable(mode):
        raise TracingError("np.pad with a function as mode is not supported by fastlaunch")
    if mode in _PAD_NUMPY_ONLY:
        raise TracingError(f"np.pad(mode={mode!r}) is not supported by fastlaunch yet; "
                           f"supported: {', '.join(_PAD_KWARGS)}")
    if mode not in _PAD_KWARGS:
        raise ValueError(f"mode '{mode}' is not supported")
    unsupported = set(kwargs) - _PAD_KWARGS[mode]
    if unsupported:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {unsupported}")
    widths = _as_pairs(_static_array(pad_width, "np.pad's pad_width"), nd, as_index=True)
    if mode in ("reflect", "symmetric") and kwargs.get("reflect_type") == "odd":
        # (NumPy takes any other reflect_type as 'even')
        raise TracingError("np.pad(reflect_type='odd') is not supported by fastlaunch yet")
    g = current_graph()
    shape = tuple(b + s + a for s, (b, a) in zip(t.shape, widths))
    if not any(b or a for b, a in widths):
        return copy(t)
    if mode != "constant":
        for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)):
            if s == 0 and (b or a):
                raise ValueError(f"can't extend empty axis {ax} using modes other than "
                                 f"'constant' or 'empty'")
        if t.size == 0:
            return wrap(ops.broadcast_to(g, ops.literal(g, 0, t.dtype), shape), scalar=False)
        index_of = {ax: (shape[ax], _pad_index(mode, s, b))
                    for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)) if b or a}
        return wrap(_reindex(t.node, index_of), scalar=False)
    return _pad_constant(t, widths, shape, kwargs.get("constant_values", 0))


def _pad_constant(t: Tracer, widths, shape, values) -> Tracer:
    g = current_graph()
    nd = t.ndim
    if is_tracer(values) and values.ndim == 0:
        pairs = [(values, values)] * nd
    else:
        arr = _static_array(values, "np.pad's constant_values")
        pairs = _as_pairs(arr, nd)

    def value_node(v):
        if is_tracer(v):
            return ops.cast(g, v.node, t.dtype, v.weak, wraps=v.weak is None)
        return scalar_assigned(g, v, t.dtype)

    if t.size == 0:
        result = ops.broadcast_to(g, ops.literal(g, 0, t.dtype), shape)
    else:
        index_of = {ax: (shape[ax], _pad_index("edge", s, b))
                    for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)) if b or a}
        result = _reindex(t.node, index_of)
    # axis by axis, as NumPy fills them: a corner takes the value of the last axis padding it
    for ax, (s, (b, a)) in enumerate(zip(t.shape, widths)):
        if not (b or a):
            continue
        it = _iota(tuple(shape[ax] if d == ax else 1 for d in range(nd)), ax)
        inside = _ew(Op.LOGICAL_AND, np.bool_, _ew(Op.GE, np.bool_, it, _lit(b, _INTP)),
                     _ew(Op.LT, np.bool_, it, _lit(b + s, _INTP)))
        vb, va = (value_node(v) for v in pairs[ax])
        fill = _ew(Op.WHERE, t.dtype, _ew(Op.LT, np.bool_, it, _lit(b, _INTP)), vb, va)
        result = _ew(Op.WHERE, t.dtype, inside, result, fill)
    return wrap(ops.broadcast_to(g, result, shape), scalar=False)


@implements(np.tile)
def tile(A, reps):
    t = _as_tracer(A)
    try:
        tup = tuple(reps)
    except TypeError:
        tup = (reps,)
    tup = tuple(_static_int(r, "np.tile's reps") for r in tup)
    d = len(tup)
    if t.ndim < d:
        t = reshape(t, (1,) * (d - t.ndim) + t.shape)
    if d < t.ndim:
        tup = (1,) * (t.ndim - d) + tup
    shape_out = tuple(s * r for s, r in zip(t.shape, tup))
    if any(s < 0 for s in shape_out):
        raise ValueError("negative dimensions are not allowed")
    g = current_graph()
    if all(r == 1 for r in tup):
        return copy(t)
    # (s0, s1) -> (1, s0, 1, s1) -> broadcast (r0, s0, r1, s1) -> (r0*s0, r1*s1): views only
    n = ops.reshape(g, t.node, tuple(x for s in t.shape for x in (1, s)))
    n = ops.broadcast_to(g, n, tuple(x for s, r in zip(t.shape, tup) for x in (r, s)))
    return wrap(ops.reshape(g, n, shape_out), scalar=False)


@implements(np.repeat)
def repeat(a, repeats, axis=None):
    t = _as_tracer(a)
    if axis is None:
        t, axis = ravel(t), 0
    else:
        axis = _axis(axis, t.ndim)
    if is_tracer(repeats) and repeats.ndim:
        raise TracingError("np.repeat with traced repeats gives an array whose size depends on "
                           "the data; pass the repeats as a constant (a NumPy array or list)")
    r = np.asarray(_static_int(repeats, "np.repeat's repeats") if is_tracer(repeats) else repeats)
    # NumPy converts Python numbers and lists like int() does, arrays only by a safe cast
    if isinstance(repeats, np.ndarray) and not np.can_cast(r.dtype, np.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {r.dtype!r} to {np.dtype(np.intp)!r} "
                        f"according to the rule 'safe'")
    r = r.astype(np.intp)
    if (r < 0).any():
        raise ValueError("repeats may not contain negative values.")
    n = t.shape[axis]
    g = current_graph()
    if r.size == 1:
        k = int(r.ravel()[0])
        shape = t.shape[:axis + 1] + (1,) + t.shape[axis + 1:]
        view = ops.broadcast_to(g, ops.reshape(g, t.node, shape),
                                t.shape[:axis + 1] + (k,) + t.shape[axis + 1:])
        return wrap(ops.reshape(g, view, t.shape[:axis] + (n * k,) + t.shape[axis + 1:]),
                    scalar=False)
    if r.ndim != 1 or r.size != n:
        raise ValueError(f"operands could not be broadcast together with shape ({n},) "
                         f"({r.size},)")
    src = np.repeat(np.arange(n, dtype=np.intp), r)
    return wrap(ops.gather(g, t.node, [g.add_const(src)], axis), scalar=False)


@implements(np.flip)
def flip(m, axis=None):
    t = _as_tracer(m)
    if axis is None:
        key = (slice(None, None, -1),) * t.ndim
    else:
        key = [slice(None)] * t.ndim
        for ax in _axes(axis, t.ndim):
            key[ax] = slice(None, None, -1)
        key = tuple(key)
    return getitem(t, key)


@implements(np.fliplr)
def fliplr(m):
    t = _as_tracer(m)
    if t.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return getitem(t, (slice(None), slice(None, None, -1)))


@implements(np.flipud)
def flipud(m):
    t = _as_tracer(m)
    if t.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return getitem(t, (slice(None, None, -1), Ellipsis))


@implements(np.rot90)
def rot90(m, k=1, axes=(0, 1)):
    axes = tuple(axes)
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    t = _as_tracer(m)
    if axes[0] == axes[1] or abs(axes[0] - axes[1]) == t.ndim:
        raise ValueError("Axes must be different.")
    if axes[0] >= t.ndim or axes[0] < -t.ndim or axes[1] >= t.ndim or axes[1] < -t.ndim:
        raise ValueError(f"Axes={axes} out of range for array of ndim={t.ndim}.")
    k = _static_int(k, "np.rot90's k") % 4
    if k == 0:
        return getitem(t, slice(None))
    if k == 2:
        return flip(flip(t, axes[0]), axes[1])
    perm = list(range(t.ndim))
    perm[axes[0]], perm[axes[1]] = perm[axes[1]], perm[axes[0]]
    if k == 1:
        return transpose(flip(t, axes[1]), perm)
    return flip(transpose(t, perm), axes[1])


_WINDOW_READ_ONLY = ("a view made by sliding_window_view or as_strided is read-only in "
                     "fastlaunch (its elements overlap); copy it first (w.copy()) to write")


def sliding_window_view(x, window_shape, axis=None, *, subok=False, writeable=False):
    t = _as_tracer(x)
    window = tuple(window_shape) if np.iterable(window_shape) else (window_shape,)
    window = tuple(_static_int(w, "window_shape") for w in window)
    if writeable:
        raise TracingError("sliding_window_view(writeable=True): writing through overlapping "
                           "windows is not supported by fastlaunch")
    if any(w < 0 for w in window):
        raise ValueError("`window_shape` cannot contain negative values")
    if axis is None:
        axis = tuple(range(t.ndim))
        if len(window) != len(axis):
            raise ValueError(f"Since axis is `None`, must provide window_shape for all "
                             f"dimensions of `x`; got {len(window)} window_shape elements and "
                             f"`x.ndim` is {t.ndim}.")
    else:
        axis = _axes(axis, t.ndim, allow_duplicate=True)
        if len(window) != len(axis):
            raise ValueError(f"Must provide matching length window_shape and axis; got "
                             f"{len(window)} window_shape elements and {len(axis)} axes "
                             f"elements.")
    trimmed = list(t.shape)
    for ax, w in zip(axis, window):
        if trimmed[ax] < w:
            raise ValueError("window shape cannot be larger than input array shape")
        trimmed[ax] -= w - 1
    out_shape = tuple(trimmed) + window
    if t.ndim == 0:
        return _read_only(t.node, _WINDOW_READ_ONLY)
    g = current_graph()
    # x[i_d + sum of the window offsets along d] for every axis d: one gather
    index = []
    for d in range(t.ndim):
        ix = _iota(out_shape, d)
        for k, ax in enumerate(axis):
            if ax == d:
                ix = _ew(Op.ADD, _INTP, ix, _iota(out_shape, t.ndim + k))
        index.append(ix)
    return _read_only(ops.gather(g, t.node, index, 0), _WINDOW_READ_ONLY)


FUNCTIONS[np.lib.stride_tricks.sliding_window_view] = sliding_window_view


def _c_strides(shape, itemsize) -> tuple:
    out, acc = [], itemsize
    for s in reversed(shape):
        out.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(out))


def _strides(t) -> tuple:
    """A traced array's strides in bytes: its place in its storage taken as a C-ordered
    array (memory_layout), as NumPy's view of a C-contiguous array reports them; C-contiguous
    for a reshape NumPy would copy."""
    layout = memory_layout(t)
    if layout is None:
        return _c_strides(t.shape, t.dtype.itemsize)
    return tuple(s * t.dtype.itemsize for s in layout[2])


def as_strided(x, shape=None, strides=None, subok=False, writeable=True):
    """np.lib.stride_tricks.as_strided for a traced x: strides in bytes over the memory of
    x's storage taken as a C-ordered array, from x's first element (what a traced array's
    .strides reports): any elements of that storage, as a gather."""
    t = _as_tracer(x)
    item = t.dtype.itemsize
    shape = t.shape if shape is None else tuple(_static_int(s, "as_strided's shape")
                                                for s in shape)
    strides = _strides(t) if strides is None else \
        tuple(_static_int(s, "as_strided's strides") for s in strides)
    if len(shape) != len(strides):
        raise ValueError("mismatch in length of strides and shape")
    if any(s % item for s in strides):
        raise TracingError(f"as_strided: strides {strides} are not multiples of the item size "
                           f"{item}; fastlaunch addresses whole elements")
    steps = [s // item for s in strides]
    g = current_graph()
    if math.prod(shape) == 0:
        return _read_only(ops.broadcast_to(g, ops.literal(g, 0, t.dtype), shape),
                          _WINDOW_READ_ONLY)
    layout = memory_layout(t)
    base, first = (layout[0], layout[1]) if layout is not None else (t.node, 0)
    lo = first + sum(min(0, e * (n - 1)) for e, n in zip(steps, shape))
    hi = first + sum(max(0, e * (n - 1)) for e, n in zip(steps, shape))
    if lo < 0 or hi >= base.size:
        raise ValueError(f"as_strided: shape {shape} with strides {strides} reads elements "
                         f"[{lo}, {hi}] of the {base.size} elements of the array's memory "
                         f"(NumPy would read memory outside it)")
    index = _lit(first, _INTP)
    for d, e in enumerate(steps):
        if e:
            index = _ew(Op.ADD, _INTP, index, _ew(Op.MUL, _INTP, _iota(shape, d), _lit(e, _INTP)))
    index = ops.broadcast_to(g, index, shape)
    return _read_only(ops.gather(g, ops.reshape(g, base, (-1,)), [index], 0),
                      _WINDOW_READ_ONLY)


Tracer.strides = property(_strides, doc="The strides of the value in its storage's memory, "
                                        "taken as a C-ordered array (a view of an argument "
                                        "reports NumPy's strides for a C-contiguous one).")


def _as_strided_entries():
    original = np.lib.stride_tricks.as_strided

    def entry(x, shape=None, strides=None, subok=False, writeable=True):
        if tracing() and _any_traced(x):
            return as_strided(x, shape, strides, subok, writeable)
        if tracing() and isinstance(x, TraceBuffer):
            # a view of a constant buffer made inside fn: NumPy's view while it stays one,
            # the traced (read-only) view of its tracer once a traced value is written into it
            view = original(x.view(np.ndarray), shape, strides, subok, writeable).view(TraceBuffer)
            view._fl_follow(x, lambda base: as_strided(base, shape, strides, subok, writeable),
                            "np.lib.stride_tricks.as_strided")
            return view
        return original(x, shape, strides, subok, writeable)
    entry.__wrapped__ = original
    return [(np.lib.stride_tricks, "as_strided", entry)]


# NumPy functions real code calls with Python lists or tuples of traced values
# (np.sum([a, b]), np.linalg.norm([dx, dy]), np.diag([sx, sy])): NumPy dispatches on the
# sequence, not on what it holds, and converts it in C, which a tracer cannot answer.  Their
# entries make such a sequence an array first (np.array of tracers is traced), then call
# NumPy's function, which dispatches to ours.  Name -> how many leading arguments are arrays.
SEQUENCE_ARGUMENTS = {
    "sum": 1, "prod": 1, "mean": 1, "max": 1, "min": 1, "amax": 1, "amin": 1, "average": 1,
    "std": 1, "var": 1, "median": 1, "ptp": 1, "cumsum": 1, "cumprod": 1, "argmax": 1,
    "argmin": 1, "all": 1, "any": 1, "clip": 1, "round": 1, "around": 1, "diag": 1,
    "trace": 1, "sort": 1, "flip": 1, "diff": 1, "atleast_1d": 1, "atleast_2d": 1,
    "transpose": 1, "dot": 2, "cross": 2, "outer": 2, "inner": 2, "polyval": 2,
    "linalg.norm": 1, "linalg.inv": 1, "linalg.det": 1, "linalg.solve": 2,
}


def _traced_sequence(x) -> bool:
    return isinstance(x, (list, tuple)) and _any_traced(x)


def _sequence_entry(original, arrays: int):
    def entry(*args, **kwargs):
        if tracing() and any(_traced_sequence(a) for a in args[:arrays]):
            args = tuple(array(a) if k < arrays and _traced_sequence(a) else a
                         for k, a in enumerate(args))
        return original(*args, **kwargs)
    entry.__name__ = getattr(original, "__name__", "entry")
    entry.__qualname__ = getattr(original, "__qualname__", entry.__name__)
    entry.__doc__ = getattr(original, "__doc__", None)
    entry.__wrapped__ = original
    entry._fl_entry = True               # naming.py looks through it
    return entry


def _entries():
    out = list(_as_strided_entries())
    for name, arrays in SEQUENCE_ARGUMENTS.items():
        owner = np
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, attr, None)
        if original is not None:
            out.append((owner, attr, _sequence_entry(original, arrays)))
    return out


# While this block runs: np.lib.stride_tricks.as_strided takes traced arrays (it is no
# NumPy-dispatched function: it reads the array's memory interface), and the functions of
# SEQUENCE_ARGUMENTS take lists of traced values.  As for the creation functions: calls
# through the module attribute, and the names imported into the traced function's module
# (`from numpy.lib.stride_tricks import as_strided`).
intercepting = Interception(_entries).active


# ==== counting ========================================================================================
_BINCOUNT_HINT = ("np.bincount(x) returns max(x) + 1 bins, a size that depends on the data, "
                  "which cannot be traced; pass minlength=k (the number of bins) to compile for "
                  "k bins: a value outside [0, k) then raises ValueError when the function runs. "
                  "(Values with a known bound, x % k, np.clip(x, 0, k - 1) or an argmin over k, "
                  "are counted in k bins without minlength)")


@implements(np.bincount)
def bincount(x, weights=None, minlength=0):
    g = current_graph()
    xn = node_of(x)
    if xn.ndim != 1:
        raise ValueError("object too deep for desired array" if xn.ndim > 1
                         else "object of too small depth for desired array")
    if not np.can_cast(xn.dtype, np.intp, "same_kind"):     # (uint64 is accepted)
        raise TypeError(f"Cannot cast array data from {xn.dtype!r} to {np.dtype(np.intp)!r} "
                        f"according to the rule 'safe'")
    if minlength is None:
        raise TypeError("use 0 instead of None for minlength")
    minlength = _static_int(minlength, "np.bincount's minlength")
    if minlength < 0:
        raise ValueError("'minlength' must not be negative")
    dt = np.dtype(np.intp)
    values = ops.literal(g, 1, dt)
    if weights is not None:
        wn = node_of(weights)
        if wn.shape != xn.shape:
            raise ValueError("The weights and list don't have the same length.")
        dt = np.dtype(np.float64)
        values = ops.cast(g, wn, dt)
    if xn.size == 0:        # (NumPy returns intp zeros then, weights or not)
        return wrap(ops.broadcast_to(g, ops.literal(g, 0, np.intp), (minlength,)), scalar=False)
    if minlength == 0:
        lo, hi = value_bounds(xn)
        if not (lo >= 0 and math.isfinite(hi)):
            raise TracingError(_BINCOUNT_HINT)
        # the values' bound (x % k, np.clip(x, 0, k - 1), argmin over k): k bins, which is
        # NumPy's max(x) + 1 exactly when the largest value reaches the bound; a call where
        # it does not raises rather than return more bins than NumPy would
        bins = int(hi) + 1
        top = ops.reduce(g, Op.MAX, ops.cast(g, xn, np.intp), (0,))
        require(wrap(ops.elementwise(g, Op.EQ, np.bool_, [top, ops.literal(g, bins - 1,
                                                                            np.intp)])),
                ValueError, f"np.bincount(x) without minlength: fastlaunch compiled it for "
                            f"{bins} bins, the bound of x's values, but this call's largest "
                            f"value is below {bins - 1}, where NumPy returns fewer bins; pass "
                            f"minlength={bins} for {bins} bins on every call")
        minlength = bins
    base = ops.broadcast_to(g, ops.literal(g, 0, dt), (minlength,))
    return wrap(ops.scatter(g, base, values, [xn], 0, "add", strict=True), scalar=False)


def value_bounds(n: Node) -> tuple:
    """(lo, hi), bounds every element of the integer node n is known to lie in from how it
    was computed (literals, x % k, minimum/maximum with literals (np.clip), argmin/argmax over
    a fixed axis, casts of bools, views and gathers of those); infinite where unknown."""
    inf = math.inf
    if n.dtype.kind == "b":
        return 0, 1
    if n.dtype.kind not in "iu":
        return -inf, inf
    op = n.op
    if op is Op.LITERAL:
        v = int(n.attrs["value"])
        return v, v
    if op in (Op.BROADCAST, Op.TRANSPOSE, Op.SLICE, Op.RESHAPE):
        return value_bounds(n.inputs[0])
    if op is Op.GATHER:                       # values of its source
        return value_bounds(n.inputs[0])
    if op is Op.CAST:
        lo, hi = value_bounds(n.inputs[0]) if n.inputs[0].dtype.kind in "biu" else (-inf, inf)
        info = np.iinfo(n.dtype)
        return (lo, hi) if info.min <= lo and hi <= info.max else (info.min, info.max)
    if op in (Op.ARGMIN, Op.ARGMAX):
        src = n.inputs[0]
        return 0, math.prod(src.shape[a] for a in n.attrs["axes"]) - 1
    if op is Op.MOD:
        k = ops.literal_value(n.inputs[1])
        if k is not None and int(k) > 0:
            return 0, int(k) - 1
    if op in (Op.MINIMUM, Op.MAXIMUM):
        (alo, ahi), (blo, bhi) = value_bounds(n.inputs[0]), value_bounds(n.inputs[1])
        if op is Op.MINIMUM:
            return min(alo, blo), min(ahi, bhi)
        return max(alo, blo), max(ahi, bhi)
    if op is Op.WHERE:
        (alo, ahi), (blo, bhi) = value_bounds(n.inputs[1]), value_bounds(n.inputs[2])
        return min(alo, blo), max(ahi, bhi)
    if op in (Op.ADD, Op.SUB):
        (alo, ahi), (blo, bhi) = value_bounds(n.inputs[0]), value_bounds(n.inputs[1])
        if op is Op.ADD:
            return alo + blo, ahi + bhi
        return alo - bhi, ahi - blo
    return -inf, inf


def _histogram_indices(a: Node, edges: np.ndarray, uniform) -> tuple[Node, Node]:
    """(bin index, kept) per value of a: NumPy's rules (the last bin includes its right edge,
    values outside [first, last] and NaN are dropped)."""
    g = current_graph()
    nb = len(edges) - 1
    first, last = edges[0], edges[-1]
    if uniform is not None:
        first_edge, last_edge, n = uniform
        x = ops.cast(g, a, edges.dtype)
        keep = _ew(Op.LOGICAL_AND, np.bool_,
                   ops.apply_ufunc(g, np.greater_equal, [(x, None), operand(first_edge)]),
                   ops.apply_ufunc(g, np.less_equal, [(x, None), operand(last_edge)]))
        # NumPy: ((x - first) / (last - first)) * n, truncated, then corrected against the
        # edges themselves (the arithmetic can be one ULP off at a boundary)
        denom = last_edge - first_edge
        f = ops.apply_ufunc(g, np.subtract, [(x, None), operand(first_edge)])
        f = ops.apply_ufunc(g, np.true_divide, [(f, None), operand(denom)])
        f = ops.apply_ufunc(g, np.multiply, [(f, None), operand(n)])
        idx = _ew(Op.WHERE, _INTP, keep, ops.cast(g, f, _INTP, wraps=True), _lit(0, _INTP))
        idx = _ew(Op.SUB, _INTP, idx, ops.cast(g, _ew(Op.EQ, np.bool_, idx, _lit(n, _INTP)),
                                                _INTP))
        # the edges: a constant, or traced (edges from the data's range)
        table = g.add_const(edges) if isinstance(edges, np.ndarray) else node_of(edges)
        lower = ops.gather(g, table, [idx], 0)
        idx = _ew(Op.SUB, _INTP, idx, ops.cast(g, _ew(Op.LT, np.bool_, x, lower), _INTP))
        upper = ops.gather(g, table, [_ew(Op.ADD, _INTP, idx, _lit(1, _INTP))], 0)
        inc = _ew(Op.LOGICAL_AND, np.bool_, _ew(Op.GE, np.bool_, x, upper),
                  _ew(Op.NE, np.bool_, idx, _lit(n - 1, _INTP)))
        idx = _ew(Op.ADD, _INTP, idx, ops.cast(g, inc, _INTP))
        return idx, keep
    # arbitrary edges: the number of edges at or below x, minus one; x == last edge goes to
    # the last bin (searchsorted 'left' for the inner edges, 'right' for the last, as NumPy)
    k = len(edges)
    col = ops.reshape(g, a, a.shape + (1,))
    cmp = ops.apply_ufunc(g, np.greater_equal, [(col, None),
                                                (g.add_const(edges.reshape(1, k)), None)])
    count = ops.reduce(g, Op.SUM, ops.cast(g, cmp, _INTP), 1, dtype=_INTP)
    at_last = ops.apply_ufunc(g, np.equal, [(a, None), (ops.literal(g, last, edges.dtype), None)])
    below = ops.apply_ufunc(g, np.less, [(a, None), (ops.literal(g, first, edges.dtype), None)])
    above = ops.apply_ufunc(g, np.greater, [(a, None), (ops.literal(g, last, edges.dtype), None)])
    nan = _ew(Op.LOGICAL_NOT, np.bool_, _ew(Op.EQ, np.bool_, a, a)) if a.dtype.kind == "f" \
        else ops.broadcast_to(g, ops.literal(g, False, np.bool_), a.shape)
    keep = _ew(Op.LOGICAL_NOT, np.bool_, _ew(Op.LOGICAL_OR, np.bool_,
                                             _ew(Op.LOGICAL_OR, np.bool_, below, above), nan))
    idx = _ew(Op.WHERE, _INTP, at_last, _lit(nb - 1, _INTP),
              _ew(Op.SUB, _INTP, count, _lit(1, _INTP)))
    return idx, keep


@implements(np.histogram)
def histogram(a, bins=10, range=None, density=None, weights=None):
    g = current_graph()
    an = ops.reshape(g, node_of(a), (-1,))
    if an.dtype == np.bool_:
        warnings.warn(f"Converting input from {an.dtype} to {np.uint8} for compatibility.",
                      RuntimeWarning, stacklevel=3)
        an = ops.cast(g, an, np.uint8)
    wn = None
    if weights is not None:
        wn = node_of(weights)
        if wn.shape != node_of(a).shape:
            raise ValueError("weights should have the same shape as a.")
        wn = ops.reshape(g, wn, (-1,))
    if isinstance(bins, str):
        raise TracingError(f"np.histogram(bins={bins!r}) chooses the number of bins from the "
                           f"data, which cannot be traced; pass a number of bins and range=")
    if is_tracer(bins) and bins.ndim:
        raise TracingError("np.histogram with traced bin edges is not supported by fastlaunch; "
                           "pass the edges as a constant array")
    uniform = None
    if np.ndim(bins) == 0:
        try:
            n = operator.index(bins)
        except TypeError as e:
            raise TypeError("`bins` must be an integer, a string, or an array") from e
        if n < 1:
            raise ValueError("`bins` must be positive, when an integer")
        if range is not None:
            first_edge, last_edge = (_static_scalar(r, "np.histogram's range") for r in range)
            if first_edge > last_edge:
                raise ValueError("max must be larger than min in range parameter.")
            if not (np.isfinite(first_edge) and np.isfinite(last_edge)):
                raise ValueError(f"supplied range of [{first_edge}, {last_edge}] is not finite")
        elif an.size == 0:
            first_edge, last_edge = 0, 1
        else:
            return _histogram_autorange(an, wn, n, density)
        if first_edge == last_edge:
            first_edge, last_edge = first_edge - 0.5, last_edge + 0.5
        bin_type = np.result_type(first_edge, last_edge, np.empty(0, an.dtype))
        if np.issubdtype(bin_type, np.integer):
            bin_type = np.result_type(bin_type, float)
        edges = np.linspace(first_edge, last_edge, n + 1, endpoint=True, dtype=bin_type)
        if np.any(edges[:-1] >= edges[1:]):
            raise ValueError(f"Too many bins for data range. Cannot create {n} finite-sized "
                             f"bins.")
        uniform = (first_edge, last_edge, n)
    elif np.ndim(bins) == 1:
        edges = np.asarray(bins)
        if np.any(edges[:-1] > edges[1:]):
            raise ValueError("`bins` must increase monotonically, when an array")
        ops.check_dtype(edges.dtype, "np.histogram's bins")
    else:
        raise ValueError("`bins` must be 1d, when an array")
    nb = len(edges) - 1
    ntype = np.dtype(np.intp) if wn is None else wn.dtype
    if nb < 1 or an.size == 0:
        hist = ops.broadcast_to(g, ops.literal(g, 0, ntype), (max(nb, 0),))
    else:
        idx, keep = _histogram_indices(an, edges, uniform)
        # dropped values go to an extra bin past the end, which the result leaves out
        idx = _ew(Op.WHERE, _INTP, keep, idx, _lit(nb, _INTP))
        acc = np.dtype(np.intp) if wn is None else np.dtype(np.float64)
        vals = ops.literal(g, 1, acc) if wn is None else ops.cast(g, wn, acc)
        counts = ops.scatter(g, ops.broadcast_to(g, ops.literal(g, 0, acc), (nb + 1,)), vals,
                             [idx], 0, "add")
        hist = ops.cast(g, ops.slice_view(g, counts, (0,), (1,), (nb,)), ntype)
    hist = wrap(hist, scalar=False)
    if density:
        db = np.array(np.diff(edges), float)
        hist = hist / db / sum_(hist)
    return hist, edges


def _histogram_autorange(an: Node, wn, n: int, density):
    """np.histogram(a, bins=n) without range=: n equal bins from a.min() to a.max(), traced
    (NumPy's rules: a range of one value widened by 0.5 each way, a range that is not finite
    or too narrow for n distinct edges a ValueError, now checked when the function runs)."""
    g = current_graph()
    lo = wrap(ops.reduce(g, Op.MIN, an, None, False), scalar=True)
    hi = wrap(ops.reduce(g, Op.MAX, an, None, False), scalar=True)
    require(call_ufunc(np.logical_and, (call_ufunc(np.isfinite, (lo,)),
                                        call_ufunc(np.isfinite, (hi,)))), ValueError,
            "np.histogram: autodetected range of [a.min(), a.max()] is not finite")
    bin_type = an.dtype if an.dtype.kind == "f" else np.dtype(np.float64)
    lo, hi = lo.astype(bin_type), hi.astype(bin_type)
    same = call_ufunc(np.equal, (lo, hi))
    first = where(same, lo - 0.5, lo).astype(bin_type)
    last = where(same, hi + 0.5, hi).astype(bin_type)
    edges = linspace(first, last, n + 1, endpoint=True, dtype=bin_type)
    require(_none(call_ufunc(np.greater_equal, (edges[:-1], edges[1:]))), ValueError,
            f"Too many bins for data range. Cannot create {n} finite-sized bins.")
    idx, keep = _histogram_indices(an, edges, (first, last, n))
    idx = _ew(Op.WHERE, _INTP, keep, idx, _lit(n, _INTP))
    acc = np.dtype(np.intp) if wn is None else np.dtype(np.float64)
    vals = ops.literal(g, 1, acc) if wn is None else ops.cast(g, wn, acc)
    counts = ops.scatter(g, ops.broadcast_to(g, ops.literal(g, 0, acc), (n + 1,)), vals,
                         [idx], 0, "add")
    ntype = np.dtype(np.intp) if wn is None else wn.dtype
    hist = wrap(ops.cast(g, ops.slice_view(g, counts, (0,), (1,), (n,)), ntype), scalar=False)
    if density:
        db = (edges[1:] - edges[:-1]).astype(float)
        hist = hist / db / sum_(hist)
    return hist, edges


def _static_scalar(v, what):
    if is_tracer(v):
        raise TracingError(f"{what} must be known while tracing (not a traced value)")
    return v


# ==== comparisons and tests =====================================================================
@implements(np.isclose)
def isclose(a, b, rtol=1.e-5, atol=1.e-8, equal_nan=False):
    x, y, atol, rtol = (_weak_or_array(v) for v in (a, b, atol, rtol))
    if is_tracer(y) and y.weak is None:
        dt = np.result_type(y.dtype, 1.)
        y = wrap(ops.cast(current_graph(), y.node, dt), scalar=y.scalar)
    elif type(y) is int:
        y = float(y)
    elif is_tracer(y) and y.weak is int:
        y = call_ufunc(np.multiply, (y, 1.0), _operator=True)     # a Python float, still weak
    static = [v for v in (atol, rtol) if not is_tracer(v)]
    if static and not all(np.all(np.isfinite(np.asarray(v))) for v in static):
        err_s = np.geterr()["invalid"]
        err_msg = f"One of rtol or atol is not valid, atol: {atol}, rtol: {rtol}"
        if err_s == "warn":
            warnings.warn(err_msg, RuntimeWarning, stacklevel=2)
        elif err_s == "raise":
            raise FloatingPointError(err_msg)
        elif err_s == "print":
            print(err_msg)
    result = (np.less_equal(abs(x - y), atol + rtol * abs(y)) & np.isfinite(y)) | (x == y)
    if equal_nan:
        result = result | (np.isnan(x) & np.isnan(y))
    return getitem(_as_tracer(result), ())


@implements(np.allclose)
def allclose(a, b, rtol=1.e-5, atol=1.e-8, equal_nan=False):
    """A traced bool (a NumPy bool when returned): NumPy's Python bool needs the data."""
    r = np.all(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))
    r.scalar = True
    return r


def _shape_of(x):
    return x.shape if is_tracer(x) else np.shape(x)


@implements(np.array_equal)
def array_equal(a1, a2, equal_nan=False):
    """A traced bool, or the Python bool False when the shapes differ (known while tracing)."""
    if _shape_of(a1) != _shape_of(a2):
        return False
    t1, t2 = _as_tracer(a1), _as_tracer(a2)
    if not equal_nan:
        r = np.all(t1 == t2)
    elif a1 is a2:
        return True
    elif t1.dtype.kind not in "fc" and t2.dtype.kind not in "fc":
        r = np.all(t1 == t2)
    else:
        n1, n2 = np.isnan(t1), np.isnan(t2)
        r = np.all((n1 == n2) & ((t1 == t2) | n1))
    r.scalar = True
    return r


@implements(np.array_equiv)
def array_equiv(a1, a2):
    try:
        np.broadcast_shapes(_shape_of(a1), _shape_of(a2))
    except ValueError:
        return False
    r = np.all(_as_tracer(a1) == _as_tracer(a2))
    r.scalar = True
    return r


# up to this many test values, np.isin is an OR of comparisons fused into its consumers
_ISIN_UNROLL = 16


@implements(np.isin)
def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    if kind not in (None, "sort", "table"):
        raise ValueError(f"Invalid kind: '{kind}'. Please use None, 'sort' or 'table'.")
    el = _as_tracer(element)
    g = current_graph()
    if is_tracer(test_elements):
        test = ravel(test_elements)
        if test.size == 0:
            r = ops.broadcast_to(g, ops.literal(g, False, np.bool_), el.shape)
        else:
            col = reshape(el, el.shape + (1,))
            r = any_(col == reshape(test, (1,) * el.ndim + (-1,)), axis=-1).node
    else:
        test = np.asarray(test_elements).ravel()
        ops.check_dtype(test.dtype, "np.isin's test_elements")
        if test.size == 0:
            r = ops.broadcast_to(g, ops.literal(g, False, np.bool_), el.shape)
        elif test.size <= _ISIN_UNROLL:
            r = None
            for v in test:
                eq = (el == v).node
                r = eq if r is None else _ew(Op.LOGICAL_OR, np.bool_, r, eq)
            r = ops.broadcast_to(g, r, el.shape)
        else:
            col = reshape(el, el.shape + (1,))
            r = any_(col == test.reshape((1,) * el.ndim + (-1,)), axis=-1).node
    if invert:
        r = _ew(Op.LOGICAL_NOT, np.bool_, r)
    return wrap(r, scalar=False)


# ==== special functions =========================================================================
@implements(np.sinc)
def sinc(x):
    t = _as_tracer(x)
    y = call_ufunc(np.multiply, (np.pi, t))
    eps = np.finfo(y.dtype).eps if y.dtype.kind == "f" else 1e-20
    y = where(y, y, eps)
    return call_ufunc(np.sin, (y,)) / y       # a 0-d input gives a NumPy scalar, as NumPy's


def _exp_limit(dt) -> float:
    """The largest x of dtype dt whose exp(x) is finite in dt."""
    dt = np.dtype(dt)
    x = np.log(np.finfo(dt).max).astype(dt)
    with np.errstate(over="ignore"):
        while np.isfinite(np.exp(np.nextafter(x, dt.type(np.inf)))):
            x = np.nextafter(x, dt.type(np.inf))
        while not np.isfinite(np.exp(x)):
            x = np.nextafter(x, dt.type(0))
    return float(x)


@implements(np.i0)
def i0(x):
    """Computed in float64 (more accurate than NumPy's float32 series), but infinite where
    NumPy's exp(|x|) overflows the input's float type, as NumPy's is."""
    g = current_graph()
    n = node_of(x)
    if n.dtype.kind == "c":
        raise TypeError("i0 not supported for complex values")
    dt = n.dtype if n.dtype.kind == "f" else np.dtype(np.float64)
    r = special.i0(g, n, dt)
    if dt != np.float64:
        ax = _ew(Op.ABS, dt, ops.cast(g, n, dt))
        # NumPy's exp(x) * ... / sqrt(x) is inf past the limit but inf / inf = nan at +-inf
        big = _ew(Op.LOGICAL_AND, np.bool_, _ew(Op.GT, np.bool_, ax, _lit(_exp_limit(dt), dt)),
                  _ew(Op.LT, np.bool_, ax, _lit(np.inf, dt)))
        r = _ew(Op.WHERE, dt, big, _lit(np.inf, dt), r)
    return wrap(r, scalar=False)


# ==== selection ==================================================================================
@implements(np.select)
def select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    choices = [_weak_or_array(c) for c in choicelist] + [_weak_or_array(default)]
    try:
        dtype = np.result_type(*(_dtype_of(c) for c in choices))
    except TypeError as e:
        raise TypeError(f"Choicelist and default value do not have a common dtype: {e}") \
            from None
    ops.check_dtype(dtype, "np.select")
    conds = [_as_tracer(c) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    g = current_graph()
    nodes = [operand(c) for c in choices]
    shape = ops.broadcast_shapes(*(n.shape for n, _ in nodes), *(c.shape for c in conds))
    result = ops.cast(g, nodes[-1][0], dtype, nodes[-1][1])
    for (n, w), c in zip(reversed(nodes[:-1]), reversed(conds)):
        result = _ew(Op.WHERE, dtype, c.node, ops.cast(g, n, dtype, w), result)
    return wrap(ops.broadcast_to(g, result, shape), scalar=False)


def _is_array_item(c) -> bool:
    if is_tracer(c):
        return not c.scalar
    return isinstance(c, (list, np.ndarray))


@implements(np.piecewise)
def piecewise(x, condlist, funclist, *args, **kw):
    """NumPy calls each function on x[cond]; fastlaunch calls it on all of x and selects with
    np.where (the same for elementwise functions, which is what piecewise is for)."""
    t = _as_tracer(x)
    n2 = len(funclist)
    if np.isscalar(condlist) or is_tracer(condlist) and condlist.scalar or (
            not _is_array_item(condlist[0]) and t.ndim != 0):
        condlist = [condlist]
    conds = array(condlist, dtype=bool)
    n = conds.shape[0]
    if n == n2 - 1:
        condelse = np.logical_not(np.any(conds, axis=0, keepdims=True))
        conds = concatenate([conds, condelse], axis=0)
        n += 1
    elif n != n2:
        raise ValueError(f"with {n} condition(s), either {n} or {n + 1} functions are expected")
    g = current_graph()
    cshape = conds.shape[1:]
    if cshape != t.shape[:len(cshape)]:
        raise IndexError(f"boolean index did not match indexed array: {cshape} for {t.shape}")
    y = ops.broadcast_to(g, ops.literal(g, 0, t.dtype), t.shape)
    for k, func in enumerate(funclist):
        cond = ops.reshape(g, getitem(conds, k).node, cshape + (1,) * (t.ndim - len(cshape)))
        if callable(func):
            vn, vw = operand(func(t, *args, **kw))
            val = ops.cast(g, vn, t.dtype, vw, wraps=vw is None)
        else:
            val = scalar_assigned(g, func, t.dtype) if np.ndim(func) == 0 else \
                ops.cast(g, node_of(func), t.dtype, wraps=True)
        y = _ew(Op.WHERE, t.dtype, cond, val, y)
    return wrap(ops.broadcast_to(g, y, t.shape), scalar=False)


@implements(np.choose)
def choose(a, choices, out=None, mode="raise"):
    g = current_graph()
    an = node_of(a)
    if not np.can_cast(an.dtype, np.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {an.dtype!r} to {np.dtype(np.intp)!r} "
                        f"according to the rule 'safe'")
    if is_tracer(choices) or isinstance(choices, np.ndarray):
        items = [getitem(_as_tracer(choices), i) for i in range(len(choices))]
    else:
        items = list(choices)
    n = len(items)
    if n == 0:
        raise ValueError("0-length sequence.")
    parts = [operand(c) if type(c) in (int, float, bool) or is_tracer(c)
             else operand(np.asarray(c)) for c in items]
    dtype = ops.check_dtype(np.result_type(*(w(0) if w is not None else nd.dtype
                                             for nd, w in parts)), "np.choose")
    shape = ops.broadcast_shapes(an.shape, *(nd.shape for nd, _ in parts))
    idx = ops.cast(g, an, _INTP)
    if mode == "raise":
        # the index itself, validated: a value outside [0, n) raises ValueError at run time
        idx = ops.gather(g, g.add_const(np.arange(n, dtype=np.intp)), [idx], 0, strict=True)
    elif mode == "wrap":
        idx = _ew(Op.MOD, _INTP, idx, _lit(n, _INTP))
    elif mode == "clip":
        idx = _ew(Op.MINIMUM, _INTP, _ew(Op.MAXIMUM, _INTP, idx, _lit(0, _INTP)),
                  _lit(n - 1, _INTP))
    else:
        raise ValueError(f"clipmode not understood: {mode!r}")
    # NumPy's choose converts the choices to their common type unsafely (300 in int8 wraps)
    result = ops.cast(g, parts[-1][0], dtype, wraps=True)
    for k in range(n - 2, -1, -1):
        c = ops.cast(g, parts[k][0], dtype, wraps=True)
        result = _ew(Op.WHERE, dtype, _ew(Op.EQ, np.bool_, idx, _lit(k, _INTP)), c, result)
    r = wrap(ops.broadcast_to(g, result, shape), scalar=False)
    if out is not None:
        setitem(out, Ellipsis, r)
        return out
    return r


# ==== in-place writes: put, place, copyto ==============================================================
def _target(a, name: str) -> Tracer:
    if not is_tracer(a):
        if isinstance(a, np.ndarray):
            raise TracingError(f"{name} needs its first argument to be a traced array; a NumPy "
                               f"array cannot receive traced values")
        raise TypeError(f"argument 1 must be numpy.ndarray, not {type(a).__name__}")
    return a


def put(a, ind, v, mode="raise"):
    t = _target(a, "np.put")
    g = current_graph()
    if not is_tracer(ind) and not isinstance(ind, np.ndarray):
        ind = np.array(ind, dtype=np.intp)     # NumPy converts sequences unsafely ([1.5] -> 1)
    ind_n = ops.reshape(g, node_of(ind), (-1,))
    if not np.can_cast(ind_n.dtype, np.intp, "safe"):
        raise TypeError(f"Cannot cast array data from {ind_n.dtype!r} to "
                        f"{np.dtype(np.intp)!r} according to the rule 'safe'")
    vn = ops.reshape(g, ops.cast(g, node_of(v), t.dtype, wraps=True), (-1,))
    ni, nv, size = ind_n.size, vn.size, t.size
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode not understood: {mode!r}")
    if ni == 0 or nv == 0:
        return None
    if size == 0:
        raise IndexError("cannot replace elements of an empty array")
    idx = ops.cast(g, ind_n, _INTP)
    if mode == "wrap":
        idx = _ew(Op.MOD, _INTP, idx, _lit(size, _INTP))
    elif mode == "clip":
        idx = _ew(Op.MINIMUM, _INTP, _ew(Op.MAXIMUM, _INTP, idx, _lit(0, _INTP)),
                  _lit(size - 1, _INTP))
    else:
        # negative indices count from the end; anything still outside [0, size) is sent past
        # the end, where the checked scatter raises IndexError
        idx = _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, idx, _lit(0, _INTP)),
                  _ew(Op.ADD, _INTP, idx, _lit(size, _INTP)), idx)
        idx = _ew(Op.WHERE, _INTP, _ew(Op.LT, np.bool_, idx, _lit(0, _INTP)),
                  _lit(size, _INTP), idx)
    if nv != ni:       # v repeats as needed (or is cut)
        vn = ops.gather(g, vn, [_ew(Op.MOD, _INTP, _iota((ni,), 0), _lit(nv, _INTP))], 0)
    if t.ndim == 0:
        flat = ops.scatter(g, ops.reshape(g, t.node, (1,)), vn, [idx], 0, "set")
        t._assign(ops.reshape(g, flat, ()), "np.put")
        return None
    # the flat index split over the axes, so that the write stays an in-place scatter
    strides = _c_strides(t.shape, 1)
    per_axis = []
    for d, (s, n) in enumerate(zip(strides, t.shape)):
        q = _ew(Op.FLOORDIV, _INTP, idx, _lit(s, _INTP)) if s != 1 else idx
        per_axis.append(q if d == 0 else _ew(Op.MOD, _INTP, q, _lit(n, _INTP)))
    t._assign(ops.scatter(g, t.node, vn, per_axis, 0, "set"), "np.put")
    return None


FUNCTIONS[np.put] = put
Tracer.put = put


@implements(np.place)
def place(arr, mask, vals):
    t = _target(arr, "np.place")
    g = current_graph()
    m = ops.reshape(g, ops.cast(g, node_of(mask), np.bool_), (-1,))
    if m.size != t.size:
        raise ValueError("place: mask and data must be the same size")
    vn = ops.reshape(g, ops.cast(g, node_of(vals), t.dtype, wraps=True), (-1,))
    if vn.size == 0:
        values = ops._constant_values(g, m)
        if values is not None and not np.asarray(values).any():
            return None
        if values is not None:
            raise ValueError("Cannot insert from an empty array!")
        raise TracingError("np.place with an empty vals raises when the traced mask has any "
                           "True element, which is not known while tracing")
    # the k-th True element (in C order) takes vals[k % len(vals)]
    k = ops.scan(g, Op.CUMSUM, ops.cast(g, m, _INTP), 0)
    k = _ew(Op.MOD, _INTP, _ew(Op.SUB, _INTP, k, _lit(1, _INTP)), _lit(vn.size, _INTP))
    new = _ew(Op.WHERE, t.dtype, m, ops.gather(g, vn, [k], 0), ops.reshape(g, t.node, (-1,)))
    setitem(t, Ellipsis, wrap(ops.reshape(g, new, t.shape), scalar=False))
    return None


@implements(np.copyto)
def copyto(dst, src, casting="same_kind", where=True):
    t = _target(dst, "np.copyto")
    g = current_graph()
    sn, sw = operand(src)
    if sw is None and not np.can_cast(sn.dtype, t.dtype, casting):
        what = "scalar" if sn.ndim == 0 and not is_tracer(src) else "array data"
        raise TypeError(f"Cannot cast {what} from {sn.dtype!r} to {t.dtype!r} according to "
                        f"the rule {casting!r}")
    # a Python scalar casts by kind (bool < int < float < complex), not by value
    rank = {bool: 0, int: 1, float: 2, complex: 3}
    if sw in rank and casting != "unsafe" and \
            rank[sw] > {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}.get(t.dtype.kind, 3):
        src_dt = np.dtype({int: np.int64, float: np.float64, complex: np.complex128}[sw])
        raise TypeError(f"Cannot cast scalar from {src_dt!r} to {t.dtype!r} according "
                        f"to the rule {casting!r}")
    if ops.broadcast_shapes(sn.shape, t.shape) != t.shape:
        raise ValueError(f"could not broadcast input array from shape {sn.shape} into shape "
                         f"{t.shape}")
    value = ops.cast(g, sn, t.dtype, sw)
    if where is not True:
        wn = node_of(where)
        if wn.dtype != np.bool_:
            raise TypeError(f"Cannot cast array data from {wn.dtype!r} to dtype('bool') "
                            f"according to the rule 'safe'")
        if ops.broadcast_shapes(wn.shape, t.shape) != t.shape:
            raise ValueError(f"could not broadcast where mask from shape {wn.shape} into shape "
                             f"{t.shape}")
        value = _ew(Op.WHERE, t.dtype, wn, value, t.node)
    setitem(t, Ellipsis, wrap(value, scalar=False))
    return None


# ==== splitting and stacking ======================================================================
@implements(np.array_split)
def array_split(ary, indices_or_sections, axis=0):
    t = _as_tracer(ary)
    total = t.shape[axis] if t.ndim else len(t)
    try:
        sections = len(indices_or_sections)
    except TypeError:
        sections = None
    if sections is not None:
        points = [0] + [_static_int(i, "a split index") for i in indices_or_sections] + [total]
        count = sections + 1
    else:
        count = _static_int(indices_or_sections, "the number of sections")
        if count <= 0:
            raise ValueError("number sections must be larger than 0.")
        each, extras = divmod(total, count)
        points = np.array([0] + extras * [each + 1] + (count - extras) * [each],
                          dtype=np.intp).cumsum().tolist()
    ax = _axis(axis, t.ndim)
    out = []
    for i in range(count):
        key = [slice(None)] * t.ndim
        key[ax] = slice(points[i], points[i + 1])
        out.append(getitem(t, tuple(key)))
    return out


@implements(np.split)
def split(ary, indices_or_sections, axis=0):
    try:
        len(indices_or_sections)
    except TypeError:
        sections = _static_int(indices_or_sections, "the number of sections")
        n = _as_tracer(ary).shape[axis]
        if sections and n % sections:
            raise ValueError("array split does not result in an equal division") from None
    return array_split(ary, indices_or_sections, axis)


@implements(np.hsplit)
def hsplit(ary, indices_or_sections):
    t = _as_tracer(ary)
    if t.ndim == 0:
        raise ValueError("hsplit only works on arrays of 1 or more dimensions")
    return split(t, indices_or_sections, 1 if t.ndim > 1 else 0)


@implements(np.vsplit)
def vsplit(ary, indices_or_sections):
    t = _as_tracer(ary)
    if t.ndim < 2:
        raise ValueError("vsplit only works on arrays of 2 or more dimensions")
    return split(t, indices_or_sections, 0)


@implements(np.dsplit)
def dsplit(ary, indices_or_sections):
    t = _as_tracer(ary)
    if t.ndim < 3:
        raise ValueError("dsplit only works on arrays of 3 or more dimensions")
    return split(t, indices_or_sections, 2)


@implements(np.atleast_3d)
def atleast_3d(*arys):
    out = []
    for a in arys:
        t = _as_tracer(a)
        if t.ndim == 0:
            out.append(reshape(t, (1, 1, 1)))
        elif t.ndim == 1:
            out.append(getitem(t, (None, slice(None), None)))
        elif t.ndim == 2:
            out.append(getitem(t, (slice(None), slice(None), None)))
        else:
            out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.column_stack)
def column_stack(tup):
    arrays = []
    for v in tup:
        t = _as_tracer(v)
        if t.ndim < 2:
            t = transpose(reshape(t, (1,) * (2 - t.ndim) + t.shape))
        arrays.append(t)
    return concatenate(arrays, 1)


@implements(np.dstack)
def dstack(tup):
    arrs = atleast_3d(*tup)
    if not isinstance(arrs, tuple):
        arrs = (arrs,)
    return concatenate(arrs, 2)


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


def _moveaxis(t, source, destination):
    from .numpy_api import moveaxis
    return moveaxis(t, source, destination)


@implements(np.logspace)
def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    if not isinstance(base, (float, int)) and np.ndim(base):
        # an array base broadcasts with start and stop, which may move the axis
        ndmax = len(np.broadcast_shapes(*(np.shape(x) if not is_tracer(x) else x.shape
                                          for x in (start, stop, base))))
        start, stop, base = (array(x, ndmin=ndmax) for x in (start, stop, base))
        from .numpy_api import expand_dims
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


# ==== averages and covariances =======================================================================
@implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=np._NoValue):
    from .numpy_api import mean
    t = _as_tracer(a)
    if axis is not None:
        axis = _axes(axis, t.ndim)
    keep = False if keepdims is np._NoValue else keepdims
    if weights is None:
        avg = mean(t, axis, keepdims=keep)
        scl = np.dtype(avg.dtype).type(t.size / max(math.prod(avg.shape), 1)) \
            if math.prod(avg.shape) else np.dtype(avg.dtype).type(np.nan)
    else:
        w = _as_tracer(weights)
        if t.shape != w.shape:
            if axis is None:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            if w.shape != tuple(t.shape[ax] for ax in axis):
                raise ValueError("Shape of weights must be consistent with shape of a along "
                                 "specified axis.")
            w = transpose(w, tuple(int(i) for i in np.argsort(axis)))
            w = reshape(w, tuple(s if ax in axis else 1 for ax, s in enumerate(t.shape)))
        if t.dtype.kind in "biu":
            rt = np.result_type(t.dtype, w.dtype, "f8")
        else:
            rt = np.result_type(t.dtype, w.dtype)
        scl = sum_(w, axis=axis, dtype=rt, keepdims=keep)
        if _any_traced(weights):
            nonzero = _none(call_ufunc(np.equal, (scl, 0.0)))
        else:      # constant weights: NumPy's test now
            same = t.shape == np.shape(weights)
            nonzero = not np.any(np.sum(np.asarray(weights), axis=axis if same else None,
                                        dtype=rt) == 0.0)
        require(nonzero, ZeroDivisionError, "Weights sum to zero, can't be normalized")
        avg = sum_(call_ufunc(np.multiply, (t, w), dtype=rt), axis=axis, keepdims=keep) / scl
    if returned:
        shape = avg.shape
        if np.shape(scl) != shape:
            scl = broadcast_to_copy(scl, shape)
        return avg, scl
    return avg


def _none(cond) -> Tracer:
    """not any(cond), traced."""
    return call_ufunc(np.logical_not, (any_(cond),))


def broadcast_to_copy(x, shape):
    if is_tracer(x):
        return wrap(ops.broadcast_to(current_graph(), x.node, shape), scalar=False).copy()
    return np.broadcast_to(x, shape).copy()


@implements(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
    from .numpy_api import dot
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    mt = _as_tracer(m)
    if mt.ndim > 2:
        raise ValueError("m has more than 2 dimensions")
    yt = None
    if y is not None:
        yt = _as_tracer(y)
        if yt.ndim > 2:
            raise ValueError("y has more than 2 dimensions")
    if dtype is None:
        dtype = np.result_type(mt.dtype, np.float64) if yt is None else \
            np.result_type(mt.dtype, yt.dtype, np.float64)
    X = array(mt, ndmin=2, dtype=dtype)
    if not rowvar and mt.ndim != 1:
        X = transpose(X)
    if X.shape[0] == 0:
        return np.array([]).reshape(0, 0)
    if yt is not None:
        Y = array(yt, ndmin=2, dtype=dtype)
        if not rowvar and Y.shape[0] != 1:
            Y = transpose(Y)
        X = concatenate((X, Y), axis=0)
    if ddof is None:
        ddof = 1 if bias == 0 else 0
    w = None
    aw = None
    if fweights is not None:
        fw = _float_weights(fweights)
        require(all_(call_ufunc(np.equal, (fw, np.round(fw)))) if is_tracer(fw) else
                np.all(fw == np.around(fw)), TypeError, "fweights must be integer")
        if fw.ndim > 1:
            raise RuntimeError("cannot handle multidimensional fweights")
        if fw.shape[0] != X.shape[1]:
            raise RuntimeError("incompatible numbers of samples and fweights")
        require(_none(call_ufunc(np.less, (fw, 0))) if is_tracer(fw) else not np.any(fw < 0),
                ValueError, "fweights cannot be negative")
        w = fw
    if aweights is not None:
        aw = _float_weights(aweights)
        if aw.ndim > 1:
            raise RuntimeError("cannot handle multidimensional aweights")
        if aw.shape[0] != X.shape[1]:
            raise RuntimeError("incompatible numbers of samples and aweights")
        require(_none(call_ufunc(np.less, (aw, 0))) if is_tracer(aw) else not np.any(aw < 0),
                ValueError, "aweights cannot be negative")
        w = aw if w is None else w * aw
    avg, w_sum = average(X, axis=1, weights=w, returned=True)
    w_sum = w_sum[0]
    if w is None:
        fact = X.shape[1] - ddof
        if fact <= 0:
            warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=3)
            fact = 0.0
    else:
        if ddof == 0:
            fact = w_sum
        elif aw is None:
            fact = w_sum - ddof
        else:
            fact = w_sum - ddof * sum_(w * aw) / w_sum
        # NumPy warns and divides by zero when the degrees of freedom are not positive
        fact = where(call_ufunc(np.less_equal, (fact, 0)), 0.0, fact)
    X = X - getitem(avg, (slice(None), None))
    X_T = transpose(X) if w is None else transpose(X * w)
    c = dot(X, X_T)
    c = (c * call_ufunc(np.true_divide, (1, fact))).astype(c.dtype)   # c *= 1 / fact
    from .numpy_api import squeeze
    return squeeze(c)


def _float_weights(w):
    """Weights as float64: traced, or a constant checked with NumPy now."""
    if _any_traced(w):
        return array(w, dtype=float)
    return np.asarray(w, dtype=float)


@implements(np.corrcoef)
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    from .numpy_api import clip, diag
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c        # nan for a zero, nan or inf variance, else 1 (NumPy's rule)
    d = diag(c)
    stddev = call_ufunc(np.sqrt, (d,))
    c = c / getitem(stddev, (slice(None), None))
    c = c / getitem(stddev, (None, slice(None)))
    return clip(c, -1, 1)


# ---- methods ---------------------------------------------------------------------------------
Tracer.repeat = lambda self, repeats, axis=None: repeat(self, repeats, axis)
Tracer.choose = lambda self, choices, out=None, mode="raise": choose(self, choices, out, mode)


# ==== contractions, segments, interpolation, index arithmetic (issue 30) ============================
@implements(np.tensordot)
def tensordot(a, b, axes=2):
    """NumPy's own: the summed axes moved together, both operands reshaped to matrices, one
    product (so the same BLAS call, the same rounding), the result reshaped back."""
    ta, tb = _as_tracer(a), _as_tracer(b)
    try:
        iter(axes)
    except TypeError:
        n = operator.index(axes)
        axes_a, axes_b = list(range(-n, 0)), list(range(n))
    else:
        axes_a, axes_b = axes
    axes_a = [axes_a] if np.ndim(axes_a) == 0 else list(axes_a)
    axes_b = [axes_b] if np.ndim(axes_b) == 0 else list(axes_b)
    if len(axes_a) != len(axes_b):
        raise ValueError("shape-mismatch for sum")
    na, nb = ta.ndim, tb.ndim
    axes_a = [ax % na if na else ax for ax in axes_a]
    axes_b = [ax % nb if nb else ax for ax in axes_b]
    for x, y in zip(axes_a, axes_b):
        if ta.shape[x] != tb.shape[y]:
            raise ValueError("shape-mismatch for sum")
    keep_a = [k for k in range(na) if k not in axes_a]
    keep_b = [k for k in range(nb) if k not in axes_b]
    inner = math.prod(ta.shape[ax] for ax in axes_a)
    at = reshape(transpose(ta, keep_a + axes_a),
                 (math.prod(ta.shape[k] for k in keep_a), inner))
    bt = reshape(transpose(tb, axes_b + keep_b),
                 (inner, math.prod(tb.shape[k] for k in keep_b)))
    from .numpy_api import dot
    return reshape(dot(at, bt), tuple(ta.shape[k] for k in keep_a) +
                   tuple(tb.shape[k] for k in keep_b))


_REDUCEAT_SLICES = 256      # segments reduced one by one up to this many; beyond, one scatter


def ufunc_reduceat(ufunc, array_, indices, axis=0, dtype=None, out=None):
    """ufunc.reduceat with indices known when tracing: segment i reduces
    a[indices[i]:indices[i+1]] (to the end for the last), or is a[indices[i]] alone where
    indices[i] >= indices[i+1]."""
    name = f"np.{ufunc.__name__}.reduceat"
    if out is not None:
        raise TracingError(f"{name}(..., out=...) is not supported by fastlaunch")
    if _any_traced(indices):
        raise TracingError(f"{name} with traced indices is not supported by fastlaunch: the "
                           f"segment sizes would depend on the data; pass them as a NumPy "
                           f"array or list")
    reducer = {np.add: sum_, np.multiply: None, np.maximum: None, np.minimum: None,
               np.logical_or: None, np.logical_and: None}
    if ufunc not in reducer:
        raise TracingError(f"{name} is not supported by fastlaunch (add, multiply, maximum, "
                           f"minimum, logical_or and logical_and are)")
    t = _as_tracer(array_)
    if t.ndim == 0:
        raise TypeError("Cannot use reduceat with a zero-dimensional array")
    ax = _axis(axis, t.ndim)
    idx = np.asarray(indices)
    if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
        raise TypeError("index must be a 1-d array of integers")
    n = t.shape[ax]
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise IndexError(f"index {int(bad[0])} out-of-bounds in {ufunc.__name__}.reduceat "
                         f"[0, {n})")
    # the dtype ufunc.reduce gives (small integers and bools summed as int64, ...)
    rdt = np.dtype(dtype) if dtype is not None else ufunc.reduce(np.zeros(1, t.dtype)).dtype
    t = t.astype(rdt)
    if idx.size > _REDUCEAT_SLICES and ufunc in (np.add, np.multiply, np.maximum, np.minimum):
        return _reduceat_scatter(ufunc, t, idx, ax)
    pieces = []
    for i, start in enumerate(idx.tolist()):
        stop = idx[i + 1] if i + 1 < len(idx) else n
        sl = [slice(None)] * t.ndim
        if stop > start:
            sl[ax] = slice(start, stop)
            pieces.append(ufunc.reduce(getitem(t, tuple(sl)), axis=ax, keepdims=True))
        else:
            sl[ax] = slice(start, start + 1)
            pieces.append(getitem(t, tuple(sl)))
    return concatenate(pieces, axis=ax)


def _reduceat_scatter(ufunc, t, idx, ax):
    """Many segments: every element scattered into its segment (np.add.at & co.)."""
    n = t.shape[ax]
    seg = np.full(n, -1, np.intp)           # the segment each position feeds, -1: none
    single = np.zeros(len(idx), bool)
    for i, start in enumerate(idx.tolist()):
        stop = idx[i + 1] if i + 1 < len(idx) else n
        if stop > start:
            seg[start:stop] = i
        else:
            single[i] = True
    moved = _moveaxis(t, ax, 0)
    identity = {np.add: 0, np.multiply: 1, np.maximum: -np.inf, np.minimum: np.inf}[ufunc]
    if t.dtype.kind in "iub" and ufunc in (np.maximum, np.minimum):
        info = np.iinfo(t.dtype) if t.dtype.kind != "b" else None
        identity = (info.min if ufunc is np.maximum else info.max) if info else \
            (ufunc is np.minimum)
    from .numpy_api import full_like
    acc = full_like(moved[:len(idx)], identity)
    used = seg >= 0
    ufunc.at(acc, seg[used], moved[np.flatnonzero(used)])
    if single.any():
        acc = where(reshape(np.asarray(single), (-1,) + (1,) * (t.ndim - 1)),
                    moved[idx], acc)
    return _moveaxis(acc, 0, ax)


@implements(np.interp)
def interp(x, xp, fp, left=None, right=None, period=None):
    """NumPy's C loop: j with xp[j] <= x < xp[j+1], slope * (x - xp[j]) + fp[j] (from the
    other end where that is NaN); fp's ends (or left/right) outside; fp[j] where x == xp[j]."""
    if period is not None:
        raise TracingError("np.interp(period=...) is not supported by fastlaunch")
    tx, txp, tfp = (_as_tracer(v).astype(np.float64) if is_tracer(v) or _any_traced(v)
                    else np.asarray(v, np.float64) for v in (x, xp, fp))
    if np.iscomplexobj(fp) or (is_tracer(fp) and fp.dtype.kind == "c"):
        raise TracingError("np.interp of complex values is not supported by fastlaunch")
    if txp.ndim != 1 or tfp.ndim != 1:
        raise ValueError("object too deep for desired array" if txp.ndim > 1 or tfp.ndim > 1
                         else "object of too small depth for desired array")
    if txp.shape[0] != tfp.shape[0]:
        raise ValueError("fp and xp are not of the same length.")
    if txp.shape[0] == 0:
        raise ValueError("array of sample points is empty")
    n = txp.shape[0]
    tx = _as_tracer(tx)
    lval = tfp[0] if left is None else left
    rval = tfp[-1] if right is None else right
    j = np.clip(searchsorted_(txp, tx, side="right") - 1, 0, max(n - 2, 0))
    x0, x1 = take_(txp, j), take_(txp, np.minimum(j + 1, n - 1))
    y0, y1 = take_(tfp, j), take_(tfp, np.minimum(j + 1, n - 1))
    slope = (y1 - y0) / (x1 - x0)
    inner = slope * (tx - x0) + y0
    inner = np.where(np.isnan(inner), slope * (tx - x1) + y1, inner)
    inner = np.where(np.isnan(inner) & (y0 == y1), y0, inner)
    inner = np.where(tx == x0, y0, inner)
    out = np.where(tx == txp[-1], tfp[-1], inner)
    out = np.where(tx > txp[-1], rval, out)
    out = np.where(tx < txp[0], lval, out)
    out = np.where(np.isnan(tx), np.nan, out)
    return out[()] if out.ndim == 0 else out


def searchsorted_(a, v, side):
    from .numpy_api import searchsorted
    return searchsorted(a if is_tracer(a) else wrap(node_of(a), scalar=False), v, side)


def take_(a, idx):
    from .numpy_api import take
    return take(a if is_tracer(a) else wrap(node_of(a), scalar=False), idx)


@implements(np.unravel_index)
def unravel_index(indices, shape, order="C"):
    if _any_traced(shape):
        raise TracingError("np.unravel_index with a traced shape is not supported by "
                           "fastlaunch; the shape must be known when tracing")
    dims = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    if order not in ("C", "F"):
        raise ValueError("only 'C' or 'F' order is permitted")
    t = _as_tracer(indices)
    if t.dtype.kind not in "iub":
        raise TypeError("only int indices permitted")
    size = math.prod(dims)
    idx = t.astype(np.intp)
    require(all_((idx >= 0) & (idx < size)), ValueError,
            f"index out of bounds in np.unravel_index for array with size {size}")
    out = []
    rest = idx
    for d in (reversed(dims) if order == "C" else dims):
        out.append(rest % d if d else rest)
        rest = rest // d if d else rest
    out = out[::-1] if order == "C" else out
    return tuple(o[()] if o.ndim == 0 else o for o in out)


@implements(np.ravel_multi_index)
def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    if _any_traced(dims):
        raise TracingError("np.ravel_multi_index with traced dims is not supported by "
                           "fastlaunch")
    dims = tuple(int(s) for s in dims)
    if len(multi_index) != len(dims):
        raise ValueError(f"parameter multi_index must be a sequence of length {len(dims)}")
    modes = (mode,) * len(dims) if isinstance(mode, str) else tuple(mode)
    idx = [_as_tracer(m) if _any_traced(m) else wrap(node_of(np.asarray(m)), scalar=False)
           for m in multi_index]
    strides, acc = [], 1
    for d in (reversed(dims) if order == "C" else dims):
        strides.append(acc)
        acc *= d
    strides = strides[::-1] if order == "C" else strides
    total = None
    for m, d, s, md in zip(idx, dims, strides, modes):
        if m.dtype.kind not in "iub":
            raise TypeError("only int indices permitted")
        m = m.astype(np.intp)
        if md == "wrap":
            m = m % d
        elif md == "clip":
            m = np.clip(m, 0, d - 1)
        elif md == "raise":
            require(all_((m >= 0) & (m < d)), ValueError, "invalid entry in coordinates array")
        else:
            raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {md!r})")
        total = m * s if total is None else total + m * s
    return total[()] if total.ndim == 0 else total


@implements(np.fill_diagonal)
def fill_diagonal(a, val, wrap=False):
    t = _target(a, "np.fill_diagonal")
    if t.ndim < 2:
        raise ValueError("array must be at least 2-d")
    if t.ndim == 2:
        step = t.shape[1] + 1
        end = t.size if wrap else min(t.shape[1] * t.shape[1], t.size)
    else:
        if len(set(t.shape)) != 1:
            raise ValueError("All dimensions of input must be of equal length")
        step = 1 + int(np.cumprod(t.shape[:-1]).sum())
        end = t.size
    flat = np.arange(0, end, step)
    if not flat.size:
        return None
    where_ = np.unravel_index(flat, t.shape)
    g = current_graph()
    vn = ops.reshape(g, ops.cast(g, node_of(val), t.dtype, wraps=True), (-1,))
    if vn.size == 0:
        return None
    if vn.size != flat.size:           # val repeats (or is cut), as a.flat[...] = val does
        vn = ops.gather(g, vn, [_ew(Op.MOD, _INTP, _iota((flat.size,), 0),
                                    _lit(vn.size, _INTP))], 0)
    setitem(t, where_, _as_value(vn))
    return None


def _as_value(node):
    return wrap(node, scalar=False)


numpy_api.UFUNC_METHODS["reduceat"] = ufunc_reduceat


@implements(np.insert)
def insert(arr, obj, values, axis=None):
    """NumPy's algorithm, for insertion indices known while tracing: a new array of the grown
    shape, the values written at their (shifted) positions, the old elements at the rest."""
    from .numpy_api import _filled
    if _any_traced(obj):
        raise TracingError("np.insert with traced insertion indices is not supported by "
                           "fastlaunch: the result's layout would depend on the data; pass "
                           "them as a NumPy array or list")
    t = _as_tracer(arr)
    if axis is None:
        t = reshape(t, (-1,))
        axis = 0
    axis = _axis(axis, t.ndim)
    n = t.shape[axis]
    values = _as_tracer(values).astype(t.dtype) if _any_traced(values) else \
        np.asarray(values).astype(t.dtype)
    slobj = [slice(None)] * t.ndim
    if isinstance(obj, slice):
        indices = np.arange(*obj.indices(n), dtype=np.intp)
    else:
        indices = np.array(obj)
        if indices.dtype == bool:
            raise TracingError("np.insert with a boolean obj is not supported by fastlaunch")
        if indices.ndim > 1:
            raise ValueError("index array argument obj to insert must be one dimensional or "
                             "scalar")
    if indices.ndim == 0:
        index = int(indices)
        if index < -n or index > n:
            raise IndexError(f"index {index} is out of bounds for axis {axis} with size {n}")
        index = index + n if index < 0 else index
        v = values if is_tracer(values) else array(values)
        if v.ndim < t.ndim:
            v = reshape(v, (1,) * (t.ndim - v.ndim) + tuple(v.shape))
        v = _moveaxis(v, 0, axis)        # NumPy: values[:, ...] go along the axis
        numnew = v.shape[axis]
        shape = list(t.shape)
        shape[axis] += numnew
        new = _filled(tuple(shape), t.dtype, 0)
        slobj[axis] = slice(None, index)
        setitem(new, tuple(slobj), getitem(t, tuple(slobj)))
        slobj[axis] = slice(index, index + numnew)
        setitem(new, tuple(slobj), v)
        slobj[axis] = slice(index + numnew, None)
        rest = [slice(None)] * t.ndim
        rest[axis] = slice(index, None)
        setitem(new, tuple(slobj), getitem(t, tuple(rest)))
        return new
    indices = indices.astype(np.intp)
    if ((indices < -n) | (indices > n)).any():
        bad = int(indices[(indices < -n) | (indices > n)][0])
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")
    indices[indices < 0] += n
    numnew = len(indices)
    order = indices.argsort(kind="mergesort")
    indices[order] += np.arange(numnew)
    shape = list(t.shape)
    shape[axis] += numnew
    old = np.ones(shape[axis], dtype=bool)
    old[indices] = False
    new = _filled(tuple(shape), t.dtype, 0)
    slobj[axis] = indices
    setitem(new, tuple(slobj), values if is_tracer(values) else array(values))
    slobj[axis] = np.flatnonzero(old)
    setitem(new, tuple(slobj), t)
    return new
