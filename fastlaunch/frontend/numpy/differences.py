"""Shifts and differences: `diff`, `ediff1d`, `gradient`, `correlate`/`convolve`."""
from __future__ import annotations

import numpy as np

from ...ir import ops
from ...ir.graph import Op
from ..trace import Tracer, current_graph
from .registry import implements


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


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import _INTP, _as_tracer, _axes, _axis, _ew, _iota, _lit, _static_int  # noqa: E402
from .indexing import getitem, setitem  # noqa: E402
from .registry import is_tracer, node_of, wrap  # noqa: E402
from .shaping import _shifted_pair, concatenate, ravel, reshape  # noqa: E402
from .ufuncs import call_ufunc  # noqa: E402
