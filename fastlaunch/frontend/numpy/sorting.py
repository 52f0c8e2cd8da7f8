"""Sorting and searching: `sort`/`argsort`/`partition`, `searchsorted`, `interp`,
`median`/`quantile`/`percentile`."""
from __future__ import annotations

import numpy as np

from ...errors import TracingError
from ...ir import ops
from ..trace import Tracer, current_graph
from .registry import implements


# ---- sorting and selection -------------------------------------------------------------------
_SORT_KINDS = (None, "quicksort", "quick", "mergesort", "merge", "heapsort", "heap", "stable")


def _sort_args(name, kind, order, stable=None):
    if order is not None:
        raise TracingError(f"np.{name}(..., order=...) sorts structured arrays, which fastlaunch "
                           f"does not trace")
    if kind not in _SORT_KINDS:
        raise ValueError(f"sort kind must be one of 'quick', 'heap', or 'stable' (got {kind!r})")
    if stable is not None and kind is not None:
        raise ValueError("`kind` and `stable` parameters can't both be specified.")


@implements(np.sort)
def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    """Every kind sorts stably (a valid answer for the unstable kinds too)."""
    _sort_args("sort", kind, order, stable)
    return wrap(ops.sort(current_graph(), node_of(a), axis), scalar=False)


@implements(np.argsort)
def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """Stable for every kind: ties keep their order (NumPy's default quicksort leaves their
    order unspecified; mergesort/stable give exactly this)."""
    _sort_args("argsort", kind, order, stable)
    n = node_of(a)
    if n.ndim == 0:                      # NumPy sorts a 0-d array as one element
        n = ops.reshape(current_graph(), n, (1,))
        axis = -1 if axis is not None else None
    return wrap(ops.sort(current_graph(), n, axis, positions=True), scalar=False)


def _kth(kth, size: int) -> None:
    if is_tracer(kth):
        raise TracingError("np.partition with a traced kth is not supported; kth must be static")
    for k in np.atleast_1d(np.asarray(kth)).ravel():
        if not np.issubdtype(np.asarray(k).dtype, np.integer):
            raise TypeError("Partition index must be integer")
        if not -size <= int(k) < size:
            raise ValueError(f"kth(={int(k) + size if int(k) < 0 else int(k)}) out of bounds "
                             f"({size})")


@implements(np.partition)
def partition(a, kth, axis=-1, kind="introselect", order=None):
    """A full sort: a valid partition for every kth (NumPy's order within the two sides is
    unspecified)."""
    if kind != "introselect":
        raise ValueError(f"partition kind must be 'introselect' (got {kind!r})")
    _sort_args("partition", None, order)
    n = node_of(a)
    if axis is None:
        n, axis = ops.reshape(current_graph(), n, (-1,)), 0
    if n.ndim == 0:
        raise np.exceptions.AxisError(int(axis), 0)
    ax = ops.normalize_axes(int(axis), n.ndim)[0]
    _kth(kth, n.shape[ax])
    return wrap(ops.sort(current_graph(), n, ax), scalar=False)


@implements(np.argpartition)
def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    if kind != "introselect":
        raise ValueError(f"partition kind must be 'introselect' (got {kind!r})")
    _sort_args("argpartition", None, order)
    n = node_of(a)
    g = current_graph()
    if n.ndim == 0:
        n = ops.reshape(g, n, (1,))
        axis = -1 if axis is not None else None
    if axis is None:
        n, axis = ops.reshape(g, n, (-1,)), 0
    ax = ops.normalize_axes(int(axis), n.ndim)[0]
    _kth(kth, n.shape[ax])
    return wrap(ops.sort(g, n, ax, positions=True), scalar=False)


def _nan_last_less(x: Tracer, y: Tracer) -> Tracer:
    """x < y in sort order (NaN after everything), as NumPy's searchsorted compares."""
    if x.dtype.kind != "f" and y.dtype.kind != "f":
        return call_ufunc(np.less, (x, y))
    return call_ufunc(np.logical_or, (call_ufunc(np.less, (x, y)), call_ufunc(
        np.logical_and, (call_ufunc(np.isnan, (y,)), call_ufunc(np.logical_not, (
            call_ufunc(np.isnan, (x,)),))))))


@implements(np.searchsorted)
def searchsorted(a, v, side="left", sorter=None):
    """A binary search per value, unrolled to ceil(log2(n + 1)) gather steps in one fused
    kernel: lo/hi bracket the insertion point; NaN-aware comparisons as NumPy's."""
    if side not in ("left", "right"):
        raise ValueError(f"search side must be 'left' or 'right' (got {side!r})")
    t = _as_tracer(a)
    if t.ndim != 1:
        raise ValueError("object too deep for desired array" if t.ndim > 1 else
                         "object of too small depth for desired array")
    g = current_graph()
    vn, vw = operand(v)
    common = ops.check_dtype(ops.result_type([(t.node, None), (vn, vw)]), "np.searchsorted")
    keys = wrap(ops.cast(g, t.node, common), scalar=False)
    vals = wrap(ops.cast(g, vn, common), scalar=False)
    if sorter is not None:
        sn = node_of(sorter)
        if sn.ndim != 1 or sn.shape[0] != t.shape[0]:
            raise ValueError("sorter.size must equal a.size")
        if sn.dtype.kind not in "iu":
            raise TypeError("sorter must only contain integers")
        srt = wrap(sn, scalar=False)
    size = t.shape[0]
    shape = vals.shape
    lo = wrap(ops.broadcast_to(g, ops.literal(g, 0, np.intp), shape), scalar=False)
    hi = wrap(ops.broadcast_to(g, ops.literal(g, size, np.intp), shape), scalar=False)
    steps = max(1, int(size).bit_length()) if size else 0
    for _ in range(steps):
        mid = call_ufunc(np.right_shift, (lo + hi, 1))
        safe = call_ufunc(np.minimum, (mid, max(size - 1, 0)))
        if sorter is not None:
            safe = take(srt, safe)
        probe = take(keys, safe)
        # left: go right while a[mid] < v; right: while not v < a[mid]
        right = _nan_last_less(probe, vals) if side == "left" else \
            call_ufunc(np.logical_not, (_nan_last_less(vals, probe),))
        active = call_ufunc(np.less, (lo, hi))
        lo = where(call_ufunc(np.logical_and, (active, right)), mid + 1, lo)
        hi = where(call_ufunc(np.logical_and, (active, call_ufunc(np.logical_not, (right,)))),
                   mid, hi)
    lo = astype(lo, np.intp)
    lo.scalar = vn.ndim == 0
    return lo


def _ureduce(a, func, axis, keepdims):
    """NumPy's _ureduce: several axes merged into a last one, keepdims restored after."""
    t = _as_tracer(a)
    nd = t.ndim
    if axis is None:
        r = func(ravel(t), 0)
        if keepdims:
            r = reshape(r, r.shape + (1,) * nd) if r.ndim else reshape(r, (1,) * nd)
        return r
    axes = ops.normalize_axes(axis, nd)
    if len(axes) == 1:
        r = func(t, axes[0])
    else:
        keep = [d for d in range(nd) if d not in axes]
        moved = moveaxis(t, keep, list(range(len(keep))))
        r = func(reshape(moved, moved.shape[:len(keep)] + (-1,)), len(keep))
    if keepdims:
        lead = r.ndim - (nd - len(axes))
        shape = r.shape[:lead] + tuple(1 if d in axes else t.shape[d] for d in range(nd))
        r = reshape(r, shape)
    return r


def _scalar_result(r: Tracer) -> Tracer:
    r.scalar = r.ndim == 0
    return r


@implements(np.median)
def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _no_extra("median", out=out)

    def one(t, ax):
        part = sort(t, ax)
        n = part.shape[ax]
        index = n // 2
        key = [slice(None)] * part.ndim
        key[ax] = slice(index, index + 1) if n % 2 else slice(index - 1, index + 1)
        rout = mean(part[tuple(key)], axis=ax)
        if part.dtype.kind == "f" and n > 0:
            last = take(part, -1, axis=ax)
            rout = where(call_ufunc(np.isnan, (last,)), last, rout)
        return _scalar_result(rout)
    return _scalar_result(_ureduce(a, one, axis, keepdims))


def _static_q(q, name):
    if is_tracer(q) or (isinstance(q, (list, tuple)) and any(is_tracer(x) for x in _leaves(q))):
        raise TracingError(f"np.{name} with traced quantiles is not supported; q must be static "
                           f"(a number, list or NumPy array)")


def _quantile(a, q, axis, method, keepdims, weak_q, name):
    if method != "linear":
        raise TracingError(f"np.{name}(method={method!r}) is not supported by fastlaunch; only "
                           f"NumPy's default method='linear'")
    if q.ndim > 2:
        raise ValueError("q must be a scalar or 1d")

    def one(t, ax):
        arr = moveaxis(sort(t, ax), ax, 0)
        count = arr.shape[0]
        virtual = np.asanyarray((count - 1) * q)        # the linear method's virtual index
        nans = arr.dtype.kind == "f"
        if np.issubdtype(virtual.dtype, np.integer):
            result = take(arr, virtual, axis=0)
        else:
            prev = np.array(np.floor(virtual))
            nxt = np.array(prev + 1)
            above = virtual >= count - 1
            prev[above] = -1
            nxt[above] = -1
            below = virtual < 0
            prev[below] = 0
            nxt[below] = 0
            prev, nxt = prev.astype(np.intp), nxt.astype(np.intp)
            lower, upper = take(arr, prev, axis=0), take(arr, nxt, axis=0)
            gamma = np.asanyarray(virtual - prev, dtype=virtual.dtype)
            gamma = float(gamma) if weak_q else gamma.reshape(virtual.shape + (1,) * (arr.ndim - 1))
            diff = upper - lower
            lerp = call_ufunc(np.add, (lower, diff * gamma))
            high = call_ufunc(np.subtract, (upper, diff * (1 - gamma)), dtype=lerp.dtype,
                              casting="unsafe")
            result = where(np.asarray(gamma) >= 0.5, high, lerp)
            result = astype(result, lerp.dtype)
        if nans and count:
            last = take(arr, -1, axis=0)
            result = where(call_ufunc(np.isnan, (last,)), last, result)
            result = astype(result, np.result_type(result.dtype, last.dtype))
        return _scalar_result(result)
    return _scalar_result(_ureduce(a, one, axis, keepdims))


@implements(np.quantile)
def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None):
    _no_extra("quantile", out=out, weights=weights, interpolation=interpolation)
    _static_q(q, "quantile")
    weak_q = type(q) in (int, float)
    q = np.asanyarray(q)
    if not (q.size == 0 or (q.min() >= 0 and q.max() <= 1)):
        raise ValueError("Quantiles must be in the range [0, 1]")
    return _quantile(a, q, axis, method, keepdims, weak_q, "quantile")


@implements(np.percentile)
def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None):
    _no_extra("percentile", out=out, weights=weights, interpolation=interpolation)
    _static_q(q, "percentile")
    weak_q = type(q) in (int, float)
    q = np.true_divide(q, 100)
    q = np.asanyarray(q)
    if not (q.size == 0 or (q.min() >= 0 and q.max() <= 1)):
        raise ValueError("Percentiles must be in the range [0, 100]")
    return _quantile(a, q, axis, method, keepdims, weak_q, "percentile")


def _sort_inplace(self, axis=-1, kind=None, order=None, *, stable=None):
    """x.sort(): sorts x in place (its storage and every view of it see the new order)."""
    setitem(self, Ellipsis, sort(self, axis, kind, order, stable=stable))


def _partition_inplace(self, kth, axis=-1, kind="introselect", order=None):
    setitem(self, Ellipsis, partition(self, kth, axis, kind, order))


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
    return searchsorted(a if is_tracer(a) else wrap(node_of(a), scalar=False), v, side)


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import _as_tracer  # noqa: E402
from .indexing import setitem, take, take_  # noqa: E402
from .reductions import _no_extra, mean  # noqa: E402
from .registry import _leaves, is_tracer, node_of, operand, wrap  # noqa: E402
from .shaping import moveaxis, ravel, reshape  # noqa: E402
from .ufuncs import astype, call_ufunc, where  # noqa: E402
from .trace_buffers import _any_traced  # noqa: E402
