"""Reductions and statistics: sum/prod/max/min/any/all, arg-reductions, mean/var/std, cumulative
and nan- reductions, `norm`'s helpers, `count_nonzero`, `average`/`cov`/`corrcoef`, `bincount`,
`histogram`."""
from __future__ import annotations

import math
import operator
import warnings

import numpy as np

from ...errors import TracingError
from ...ir import complexops, ops
from ...ir.graph import Node, Op
from ..trace import Tracer, current_graph
from .registry import implements


# ---- reductions --------------------------------------------------------------------------
def _no_extra(name, **kwargs):
    for k, v in kwargs.items():
        if v is not None and v is not np._NoValue and not (k == "where" and v is True):
            raise TracingError(f"np.{name}(..., {k}=...) is not supported by fastlaunch")


def _reduce(op: Op, a, axis=None, keepdims=False, dtype=None) -> Tracer:
    """np.sum/prod/max/min/any/all (functions, methods, ufunc.reduce): small ones may be
    unrolled into elementwise operations by the fuser (ops.SMALL_REDUCE)."""
    n = ops.reduce(current_graph(), op, node_of(a), axis, bool(keepdims), dtype,
                   unroll_small=True)
    return wrap(n, scalar=n.ndim == 0)


@implements(np.sum)
def sum_(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_extra("sum", out=out, initial=initial, where=where)
    return _reduce(Op.SUM, a, axis, keepdims, dtype)


@implements(np.prod)
def prod_(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_extra("prod", out=out, initial=initial, where=where)
    return _reduce(Op.PROD, a, axis, keepdims, dtype)


@implements(np.max, np.amax)
def max_(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_extra("max", out=out, initial=initial, where=where)
    return _reduce(Op.MAX, a, axis, keepdims)


@implements(np.min, np.amin)
def min_(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_extra("min", out=out, initial=initial, where=where)
    return _reduce(Op.MIN, a, axis, keepdims)


@implements(np.any)
def any_(a, axis=None, out=None, keepdims=False, where=None):
    _no_extra("any", out=out, where=where)
    return _reduce(Op.ANY, a, axis, keepdims)


@implements(np.all)
def all_(a, axis=None, out=None, keepdims=False, where=None):
    _no_extra("all", out=out, where=where)
    return _reduce(Op.ALL, a, axis, keepdims)


@implements(np.argmax)
def argmax(a, axis=None, out=None, keepdims=False):
    return _arg_reduce(Op.ARGMAX, a, axis, out, keepdims)


@implements(np.argmin)
def argmin(a, axis=None, out=None, keepdims=False):
    return _arg_reduce(Op.ARGMIN, a, axis, out, keepdims)


def _arg_reduce(op, a, axis, out, keepdims):
    _no_extra(op.value, out=out)
    g = current_graph()
    n = node_of(a)
    if axis is None:
        n = ops.reshape(g, n, (-1,))
        r = ops.reduce(g, op, n, 0, False)
        if keepdims:
            r = ops.reshape(g, r, (1,) * node_of(a).ndim)
        return wrap(r, scalar=r.ndim == 0)
    r = ops.reduce(g, op, n, int(axis), bool(keepdims))
    return wrap(r, scalar=r.ndim == 0)


def _mean_dtype(dt: np.dtype, dtype) -> tuple[np.dtype, np.dtype]:
    """(accumulation dtype, result dtype) of np.mean/np.var: ints to float64, float16 via float32."""
    if dtype is not None:
        d = ops.check_dtype(dtype, "np.mean(dtype=...)")
        return d, d
    if dt.kind in "biu":
        return np.dtype(np.float64), np.dtype(np.float64)
    if dt == np.float16:
        return np.dtype(np.float32), dt
    return dt, dt


@implements(np.mean)
def mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    _no_extra("mean", out=out, where=where)
    g = current_graph()
    n = node_of(a)
    acc, res = _mean_dtype(n.dtype, dtype)
    total = ops.reduce(g, Op.SUM, ops.cast(g, n, acc), axis, bool(keepdims), acc,
                       unroll_small=True)
    count = ops.count(n, ops.normalize_axes(axis, n.ndim))
    r = ops.elementwise(g, Op.DIV, acc, [total, ops.literal(g, count, acc)])
    return wrap(ops.cast(g, r, res), scalar=r.ndim == 0)


@implements(np.var)
def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
        correction=None):
    _no_extra("var", out=out, where=where, mean=mean)
    if correction is not None:
        ddof = correction
    g = current_graph()
    n = node_of(a)
    acc, res = _mean_dtype(n.dtype, dtype)
    axes = ops.normalize_axes(axis, n.ndim)
    count = ops.count(n, axes)
    x = ops.cast(g, n, acc)
    mu = ops.elementwise(g, Op.DIV, acc, [ops.reduce(g, Op.SUM, x, axes, True, acc,
                                                     unroll_small=True),
                                          ops.literal(g, count, acc)])
    d = ops.elementwise(g, Op.SUB, acc, [x, mu])
    if acc.kind == "c":
        # NumPy: |d|^2 as re^2 + im^2, in the parts' dtype; the variance is real
        acc, res = complexops.part_dtype(acc), complexops.part_dtype(res)
        dr, di = complexops.real(g, d), complexops.imag(g, d)
        sq = ops.elementwise(g, Op.ADD, acc, [ops.elementwise(g, Op.MUL, acc, [dr, dr]),
                                              ops.elementwise(g, Op.MUL, acc, [di, di])])
    else:
        sq = ops.elementwise(g, Op.MUL, acc, [d, d])
    ss = ops.reduce(g, Op.SUM, sq, axes, bool(keepdims), acc, unroll_small=True)
    r = ops.elementwise(g, Op.DIV, acc, [ss, ops.literal(g, max(count - ddof, 0), acc)])
    return wrap(ops.cast(g, r, res), scalar=r.ndim == 0)


@implements(np.std)
def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None, mean=None,
        correction=None):
    v = var(a, axis, dtype, out, ddof, keepdims, where, mean, correction)
    return wrap(ops.elementwise(current_graph(), Op.SQRT, v.dtype, [v.node]), scalar=v.scalar)


@implements(np.cumsum)
def cumsum(a, axis=None, dtype=None, out=None):
    _no_extra("cumsum", out=out)
    return wrap(ops.scan(current_graph(), Op.CUMSUM, node_of(a), axis, dtype), scalar=False)


@implements(np.cumprod)
def cumprod(a, axis=None, dtype=None, out=None):
    _no_extra("cumprod", out=out)
    return wrap(ops.scan(current_graph(), Op.CUMPROD, node_of(a), axis, dtype), scalar=False)


@implements(np.nansum)
def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _no_extra("nansum", out=out, initial=initial, where=where)
    n = node_of(a)
    if n.dtype.kind in "fc":
        a = np.where(_isnan_t(a), n.dtype.type(0), a)
    return sum_(a, axis, dtype, None, keepdims)


def _isnan_t(a) -> Tracer:
    return call_ufunc(np.isnan, (a,))


def _nan_extreme(op, a, axis, keepdims):
    n = node_of(a)
    if n.dtype.kind != "f":
        return _reduce(op, a, axis, keepdims)
    fill = -np.inf if op is Op.MAX else np.inf
    nan = _isnan_t(a)
    r = _reduce(op, np.where(nan, n.dtype.type(fill), a), axis, keepdims)
    all_nan = _reduce(Op.ALL, nan, axis, keepdims)
    out = np.where(all_nan, n.dtype.type(np.nan), r)
    out.scalar = r.scalar
    return out


@implements(np.nanmax)
def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_extra("nanmax", out=out, initial=initial, where=where)
    return _nan_extreme(Op.MAX, a, axis, keepdims)


@implements(np.nanmin)
def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _no_extra("nanmin", out=out, initial=initial, where=where)
    return _nan_extreme(Op.MIN, a, axis, keepdims)


@implements(np.nanmean)
def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    _no_extra("nanmean", out=out, where=where)
    n = node_of(a)
    if n.dtype.kind not in "fc":
        return mean(a, axis, dtype, None, keepdims)
    nan = _isnan_t(a)
    total = nansum(a, axis, dtype, None, keepdims)
    count = sum_(np.logical_not(nan), axis, np.intp, None, keepdims)
    g = current_graph()
    r = ops.elementwise(g, Op.DIV, total.dtype, [total.node, ops.cast(g, count.node, total.dtype)])
    return wrap(r, scalar=total.scalar)


def _max_from_zero(a, axis, keepdims):
    """max(a, axis, initial=0) of values >= 0 (NumPy's norms of the largest kind): 0 for an
    empty reduction, where max alone raises."""
    axes = ops.normalize_axes(axis, a.ndim)
    if all(a.shape[d] for d in axes):
        return max_(a, axis, None, keepdims)
    shape = tuple(1 if d in axes else n for d, n in enumerate(a.shape) if keepdims or d not in axes)
    g = current_graph()
    return wrap(ops.broadcast_to(g, ops.literal(g, 0, a.dtype), shape), scalar=not shape)


@implements(np.count_nonzero)
def count_nonzero(a, axis=None, *, keepdims=False):
    r = sum_(call_ufunc(np.not_equal, (a, 0)), axis, np.intp, None, keepdims)
    r.scalar = r.ndim == 0          # a 0-d count is a NumPy scalar, whatever the axis
    return r


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


# ==== averages and covariances =======================================================================
@implements(np.average)
def average(a, axis=None, weights=None, returned=False, *, keepdims=np._NoValue):
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


def broadcast_to_copy(x, shape):
    if is_tracer(x):
        return wrap(ops.broadcast_to(current_graph(), x.node, shape), scalar=False).copy()
    return np.broadcast_to(x, shape).copy()


@implements(np.cov)
def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
        dtype=None):
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
    return squeeze(c)


def _float_weights(w):
    """Weights as float64: traced, or a constant checked with NumPy now."""
    if _any_traced(w):
        return array(w, dtype=float)
    return np.asarray(w, dtype=float)


@implements(np.corrcoef)
def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c        # nan for a zero, nan or inf variance, else 1 (NumPy's rule)
    d = diag(c)
    stddev = call_ufunc(np.sqrt, (d,))
    c = c / getitem(stddev, (slice(None), None))
    c = c / getitem(stddev, (None, slice(None)))
    return clip(c, -1, 1)


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import (  # noqa: E402
    _INTP, _as_tracer, _axes, _ew, _lit, _none, _static_int, _static_scalar, require)
from .creation import array, linspace  # noqa: E402
from .indexing import diag, getitem  # noqa: E402
from .linalg import dot  # noqa: E402
from .registry import is_tracer, node_of, operand, wrap  # noqa: E402
from .shaping import concatenate, reshape, squeeze, transpose  # noqa: E402
from .ufuncs import call_ufunc, clip, where  # noqa: E402
from .trace_buffers import _any_traced  # noqa: E402
