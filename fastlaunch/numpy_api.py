"""The traced NumPy surface: ufuncs, array functions, operators, methods and indexing.

Each entry turns a NumPy call on tracers into graph nodes through ops.py, with NumPy's own
dtype rules.  A NumPy function missing from the registry raises TracingError naming it: it is
never silently computed some other way.

Size: over 1,000 lines: the traced NumPy surface, until issue 26 splits it (with
numpy_funcs.py) by family: ufuncs, reductions, indexing, shape and joining, linear algebra,
sorting, random, creation.
"""
from __future__ import annotations

import builtins
import operator
import sys
from typing import Any

import numpy as np

from . import complexops, naming, ops, pytree, small_linalg, trace
from .errors import TracingError
from .ir import Node, Op, check_shape
from .trace import (Storage, Tracer, Unreturnable, current_graph, frame, new_tracer,
                    tracing, view_of)

FUNCTIONS: dict = {}


def implements(*funcs):
    def register(impl):
        for f in funcs:
            FUNCTIONS[f] = impl
        return impl
    return register


def is_tracer(x) -> bool:
    return isinstance(x, Tracer)


# ---- operands ----------------------------------------------------------------------------
def operand(x) -> tuple[Node, type | None]:
    """(node, weak Python type) for anything that may meet a tracer in NumPy code."""
    g = current_graph()
    if isinstance(x, Tracer):
        return x.node, x.weak
    hook = getattr(type(x), "__fl_tracer__", None)
    if hook is not None:         # an array made inside fn (creation.TraceBuffer)
        t = hook(x)
        if t is not None:
            return t.node, t.weak
        x = x.view(np.ndarray)
    if type(x) in (bool, int, float, complex):
        return ops.weak_literal(g, x)
    if isinstance(x, np.generic):
        ops.check_dtype(x.dtype, "a NumPy scalar in the traced function")
        return ops.literal(g, x, x.dtype), None
    if isinstance(x, (list, tuple)) and any(isinstance(v, Tracer) for v in _leaves(x)):
        return array(x).node, None
    if isinstance(x, (np.ndarray, list, tuple)):
        arr = np.asarray(x)
        ops.check_dtype(arr.dtype, "an array captured by the traced function")
        return capture(arr), None
    raise TypeError(f"cannot use a {type(x).__name__} as an array in a traced function")


def node_of(x) -> Node:
    return operand(x)[0]


def capture(arr: np.ndarray) -> Node:
    """A NumPy array from outside the trace: a constant, frozen at trace time.  Uniform arrays
    (np.zeros, np.ones, np.full) become a broadcast literal and cost no memory traffic."""
    g = current_graph()
    if arr.ndim == 0:
        return ops.literal(g, arr[()], arr.dtype)
    flat = arr.reshape(-1)
    if flat.size:
        first = flat[0]
        uniform = bool(np.all(flat == first))   # NaN never compares equal: stays a constant
        if uniform and arr.dtype.kind == "f":
            uniform = bool(np.all(np.signbit(flat) == np.signbit(first)))
        if uniform and arr.dtype.kind == "c":
            uniform = bool(np.all(np.signbit(flat.real) == np.signbit(first.real))
                           and np.all(np.signbit(flat.imag) == np.signbit(first.imag)))
        if uniform:
            return ops.broadcast_to(g, ops.literal(g, first, arr.dtype), arr.shape)
    return g.add_const(arr)


def _leaves(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from _leaves(v)
    else:
        yield x


def wrap(node: Node, weak=None, scalar=None) -> Tracer:
    return new_tracer(node, weak, scalar)


def _python_result_type(ufunc, weak_types) -> type | None:
    """Python's own result type when every operand is a weak Python scalar (e.g. lr * 2)."""
    if ufunc in (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal):
        return bool
    if complex in weak_types:
        return complex
    if ufunc is np.true_divide:
        return float
    if float in weak_types:
        return float
    if ufunc in (np.bitwise_and, np.bitwise_or, np.bitwise_xor) and all(t is bool for t in weak_types):
        return bool
    return int


def array_function(func, args, kwargs):
    impl = FUNCTIONS.get(func)
    if impl is None:
        if (getattr(func, "__module__", None) or "").startswith("numpy.fft"):
            raise TracingError(f"np.fft.{getattr(func, '__name__', func)} is not supported by "
                               f"fastlaunch (complex arithmetic is, but no FFT)")
        raise TracingError(naming.unsupported(func))
    return impl(*args, **kwargs)


# ---- ufuncs ------------------------------------------------------------------------------
# ufunc methods composed in numpy_funcs.py (reduceat), registered there
UFUNC_METHODS: dict = {}
_UNSUPPORTED_UFUNC_KWARGS = ("where", "axes", "axis", "order", "subok", "signature", "extobj")


def array_ufunc(ufunc, method, inputs, kwargs):
    if method == "__call__":
        if ufunc is np.matmul:
            out = kwargs.pop("out", None)
            _no_extra("matmul", **kwargs)
            r = matmul(*inputs)
            return _write_out(out[0] if isinstance(out, tuple) else out, r.node, "matmul") \
                if out is not None else r
        return call_ufunc(ufunc, inputs, **kwargs)
    if method == "reduce":
        return ufunc_reduce(ufunc, *inputs, **kwargs)
    if method == "at":
        return ufunc_at(ufunc, *inputs, **kwargs)
    if method == "accumulate":
        return ufunc_accumulate(ufunc, *inputs, **kwargs)
    if method == "outer":
        return ufunc_outer(ufunc, *inputs, **kwargs)
    if method in UFUNC_METHODS:
        return UFUNC_METHODS[method](ufunc, *inputs, **kwargs)
    raise TracingError(f"{naming.public_name(ufunc)}.{method} is not supported by fastlaunch "
                       f"yet")


_PY_COMPARE = {np.less: operator.lt, np.less_equal: operator.le, np.greater: operator.gt,
               np.greater_equal: operator.ge, np.equal: operator.eq, np.not_equal: operator.ne}


def _beyond_64_bits(x) -> bool:
    return type(x) is int and not -2**63 <= x < 2**64


def _compare_beyond_64_bits(ufunc, inputs):
    """NumPy 2 compares an integer array with any Python int exactly: one beyond 64 bits lies
    above or below every element, so the answer is the same for all of them (a wrapped Tracer
    of it).  With a float array the int converts to a float (OverflowError past float64's
    range, as in NumPy); with bool arrays NumPy raises OverflowError, and so does operand()."""
    (side,) = [i for i, x in enumerate(inputs) if _beyond_64_bits(x)] or [None]
    if side is None:                          # two such ints: operand() raises, as NumPy
        return inputs
    other = inputs[1 - side]
    if not is_tracer(other) and not isinstance(other, (np.ndarray, np.generic)):
        return inputs
    n = node_of(other)
    if n.dtype.kind in "iu":
        pair = [0, 0]                         # any 64-bit integer stands for every element
        pair[side] = inputs[side]
        g = current_graph()
        value = _PY_COMPARE[ufunc](*pair)
        node = ops.broadcast_to(g, ops.literal(g, value, np.bool_), n.shape)
        return wrap(node, scalar=not is_tracer(other) or other.scalar)
    if n.dtype.kind == "f":
        inputs = list(inputs)
        inputs[side] = float(inputs[side])    # OverflowError past float64, as NumPy
        return tuple(inputs)
    return inputs


def call_ufunc(ufunc, inputs, out=None, dtype=None, casting="same_kind", _operator=False,
               where=True, **kwargs):
    for k in kwargs:
        raise TracingError(f"np.{ufunc.__name__}(..., {k}=...) is not supported by fastlaunch")
    if where is not True:
        return _ufunc_where(ufunc, inputs, out, dtype, casting, where)
    if ufunc.nout != 1:
        return _multi_output_ufunc(ufunc, inputs, out)
    if len(inputs) != ufunc.nin:
        raise TypeError(f"{ufunc.__name__}() takes {ufunc.nin} positional arguments, "
                        f"got {len(inputs)}")
    if ufunc in _PY_COMPARE and dtype is None and any(_beyond_64_bits(x) for x in inputs):
        inputs = _compare_beyond_64_bits(ufunc, inputs)
        if is_tracer(inputs):                 # decided for every element
            return _write_out(out[0] if isinstance(out, tuple) else out, inputs.node,
                              ufunc.__name__, casting) if out is not None else inputs
    operands = [operand(x) for x in inputs]
    g = current_graph()
    if dtype is not None:
        dt = ops.check_dtype(dtype, f"np.{ufunc.__name__}(dtype=...)")
        operands = [(ops.cast(g, n, dt, w), None) for n, w in operands]
    # the ** operator (not np.power) takes NumPy's scalar-exponent fast paths
    # (on arrays: a NumPy scalar's ** has no fast paths)
    array_base = is_tracer(inputs[0]) and not inputs[0].scalar
    node = _special_power(ufunc, operands) if ufunc is np.power and _operator and array_base \
        else None
    weak = None
    if _operator and None not in [w for _, w in operands]:
        weak = _python_result_type(ufunc, [w for _, w in operands])
    if node is None:
        node = ops.apply_ufunc(g, ufunc, operands, python_ints=weak is int and dtype is None)
    scalar = node.ndim == 0 and all(not is_tracer(x) or x.scalar or x.ndim == 0 for x in inputs)
    if out is not None:
        target = out[0] if isinstance(out, tuple) else out
        return _write_out(target, node, ufunc.__name__, casting)
    return wrap(node, weak, scalar)


def _ufunc_where(ufunc, inputs, out, dtype, casting, where):
    """ufunc(..., where=m): `out` keeps its values where m is False; without `out`, NumPy
    leaves those elements uninitialised, and they are the computed values here."""
    wn = node_of(where)
    if wn.dtype != np.bool_:
        raise TypeError(f"Cannot cast array data from {wn.dtype!r} to dtype('bool') according "
                        f"to the rule 'safe'")
    result = call_ufunc(ufunc, inputs, dtype=dtype, casting=casting)
    if out is None:
        return result
    if isinstance(result, tuple):
        raise TracingError(f"np.{ufunc.__name__}(..., out=..., where=...) is not supported by "
                           f"fastlaunch")
    holder = target = out[0] if isinstance(out, tuple) else out
    target = _out_tracer(target)
    if not is_tracer(target):
        return _write_out(target, result.node, ufunc.__name__, casting)   # its error
    if not np.can_cast(result.dtype, target.dtype, casting):
        raise TypeError(f"Cannot cast ufunc '{ufunc.__name__}' output from {result.dtype!r} "
                        f"to {target.dtype!r} with casting rule '{casting}'")
    g = current_graph()
    merged = ops.elementwise(g, Op.WHERE, target.dtype,
                             [wn, ops.cast(g, result.node, target.dtype), target.node])
    _write_out(target, merged, ufunc.__name__, casting)
    return holder if holder is not target else target


def _out_tracer(target):
    """An `out=` array made inside fn (creation.TraceBuffer) takes traced values: promoted."""
    promote = getattr(type(target), "_fl_get", None)
    return promote(target, True) if promote is not None else target


def _write_out(target, node: Node, name: str, casting="same_kind") -> Tracer:
    holder, target = target, _out_tracer(target)
    if holder is not target:
        _write_out(target, node, name, casting)
        return holder                  # NumPy returns `out` itself
    if not is_tracer(target):
        raise TracingError(f"np.{name}(..., out=...) needs `out` to be a traced array; "
                           f"a NumPy array cannot receive traced values")
    if not np.can_cast(node.dtype, target.dtype, casting):
        raise TypeError(f"Cannot cast ufunc '{name}' output from {node.dtype!r} to "
                        f"{target.dtype!r} with casting rule '{casting}'")
    g = current_graph()
    if ops.broadcast_shapes(node.shape, target.shape) != target.shape:
        raise ValueError(f"non-broadcastable output operand with shape {target.shape} doesn't "
                         f"match the broadcast shape {node.shape}")
    target._assign(ops.cast(g, node, target.dtype), f"np.{name}(..., out=...)")
    return target


def _special_power(ufunc, operands):
    """NumPy's fast paths for array ** python-scalar: square, sqrt, reciprocal, identity."""
    (base, bw), (exp, ew) = operands
    value = ops.literal_value(exp)
    if base.ndim == 0 and bw is not None:
        return None
    g = current_graph()
    loop = ops.resolve_loop(ufunc, [bw or base.dtype, ew or exp.dtype])
    if value is None:
        if exp.ndim == 0 and ew is float and base.dtype.kind in "fc":
            # a Python float known at run time: NumPy's operator takes sqrt where it is 0.5
            # (the other fast paths give pow's values)
            half = ops.elementwise(g, Op.EQ, np.bool_, [exp, ops.literal(g, 0.5, exp.dtype)])
            return ops.where(g, (half, None), (ops.apply_ufunc(g, np.sqrt, [(base, bw)]), None),
                             (ops.apply_ufunc(g, ufunc, operands), None))
        return None
    if loop[0].kind in "iu" and value < 0 and exp.ndim == 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    if exp.ndim != 0:
        return None
    # NumPy's fast paths for a Python scalar exponent: int 2 -> square (bool ** 2 is int8),
    # and for float and complex arrays int -1 -> reciprocal, float 0.5 -> sqrt
    if ew is int and value == 2:
        return ops.apply_ufunc(g, np.square, [(base, bw)])
    if ew is float and value == 0.5 and base.dtype.kind in "fc":
        return ops.apply_ufunc(g, np.sqrt, [(base, bw)])
    if ew is int and value == -1 and loop[0].kind in "fc":
        return ops.apply_ufunc(g, np.reciprocal, [(base, bw)])
    return None


def _multi_output_ufunc(ufunc, inputs, out):
    if ufunc is np.divmod:
        if out is not None:
            raise TracingError("np.divmod(..., out=...) is not supported by fastlaunch")
        return (call_ufunc(np.floor_divide, inputs), call_ufunc(np.remainder, inputs))
    raise TracingError(naming.unsupported(ufunc))


def ufunc_reduce(ufunc, array_, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
    op = {np.add: Op.SUM, np.multiply: Op.PROD, np.maximum: Op.MAX, np.minimum: Op.MIN,
          np.logical_or: Op.ANY, np.logical_and: Op.ALL}.get(ufunc)
    if op is None or kwargs or out is not None:
        raise TracingError(f"np.{ufunc.__name__}.reduce with these arguments is not supported")
    return _reduce(op, array_, axis, keepdims, dtype)


_AT_MODES = {np.add: "add", np.subtract: "add", np.multiply: "mul", np.maximum: "max",
             np.minimum: "min"}


def ufunc_at(ufunc, a, indices, b=None):
    """np.add.at(a, indices, b) and friends: unbuffered, so repeated indices all apply."""
    mode = _AT_MODES.get(ufunc)
    if mode is None:
        raise TracingError(f"np.{ufunc.__name__}.at is not supported by fastlaunch")
    if not is_tracer(a):
        raise TracingError(f"np.{ufunc.__name__}.at needs its first argument to be a traced "
                           f"array: a NumPy array cannot receive traced values")
    if b is None:
        raise TypeError(f"np.{ufunc.__name__}.at needs values for a binary ufunc")
    g = current_graph()
    vn, vw = operand(b)
    ops.resolve_loop(ufunc, [a.dtype, vw or vn.dtype])   # NumPy's TypeError if it has no loop
    values = ops.cast(g, vn, a.dtype)          # ufunc.at casts the values unsafely, as NumPy
    if ufunc is np.subtract:
        values = ops.elementwise(g, Op.NEG, a.dtype, [values])
    _scatter_into(a, indices, values, mode, f"np.{ufunc.__name__}.at")


def ufunc_accumulate(ufunc, array_, axis=0, dtype=None, out=None):
    op = {np.add: Op.CUMSUM, np.multiply: Op.CUMPROD}.get(ufunc)
    if op is None or out is not None:
        raise TracingError(f"np.{ufunc.__name__}.accumulate is not supported by fastlaunch")
    return wrap(ops.scan(current_graph(), op, node_of(array_), axis, dtype), scalar=False)


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


def norm(x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm for vectors (any ord) and the Frobenius/1/inf norms of matrices."""
    t = _as_tracer(x)
    if t.dtype.kind not in "fc":
        t = astype(t, np.float64)
    nd = t.ndim
    if t.dtype.kind == "c":
        # NumPy: the 2-norm of complex values from re^2 + im^2, the others from |x|
        a = np.abs(t)
        re, im = _real(t), _imag(t)

        def sq(axes_, keep):
            return sum_(re * re + im * im, axes_, None, None, keep)
    else:
        a = None

        def sq(axes_, keep):
            return sum_(t * t, axes_, None, None, keep)
    axes = ops.normalize_axes(axis, nd) if axis is not None else None
    if axes is None and ord is None:
        r = np.sqrt(sq(None, keepdims))
        r.scalar = not keepdims
        return r
    if axes is None:
        axes = tuple(range(nd))
    if len(axes) == 1:
        a = np.abs(t) if a is None else a
        if ord is None or ord == 2:
            return np.sqrt(sq(axes, keepdims))
        if isinstance(ord, str):
            raise ValueError(f"Invalid norm order '{ord}' for vectors")
        if ord == np.inf:
            return _max_from_zero(a, axes, keepdims)
        if ord == -np.inf:
            return min_(a, axes, None, keepdims)
        if ord == 0:
            return sum_(astype(t != 0, a.dtype), axes, None, None, keepdims)
        if ord == 1:
            return sum_(a, axes, None, None, keepdims)
        return sum_(a ** ord, axes, None, None, keepdims) ** (1.0 / ord)
    if len(axes) == 2:
        r0, r1 = axes
        a = np.abs(t) if a is None else a
        if ord in (None, "fro"):
            return np.sqrt(sq(axes, keepdims))
        # the largest-kind norms start from 0 (NumPy's initial=0): 0 for an empty matrix
        largest = lambda v, ax, _, keep: _max_from_zero(v, ax, keep)  # noqa: E731
        if ord in (1, -1):
            col = sum_(a, r0, None, None, True)
            red = largest if ord == 1 else min_
            return red(col, r1, None, True) if keepdims else squeeze(red(col, r1, None, True), axes)
        if ord in (np.inf, -np.inf):
            row = sum_(a, r1, None, None, True)
            red = largest if ord == np.inf else min_
            return red(row, r0, None, True) if keepdims else squeeze(red(row, r0, None, True), axes)
        if ord in (2, -2, "nuc"):
            # NumPy's _multi_svd_norm: the largest / smallest / sum of the singular values
            sv = linalg_svd(moveaxis(t, (r0, r1), (-2, -1)), compute_uv=False)
            red = {2: largest, -2: min_}.get(ord)
            r = red(sv, -1, None, False) if red is not None else sum_(sv, -1)
            if keepdims:
                shape = list(t.shape)
                shape[r0] = shape[r1] = 1
                r = reshape(r, tuple(shape))
            return r
        raise ValueError("Invalid norm order for matrices.")
    raise ValueError("Improper number of dimensions to norm.")


def _norm(x, ord=None, axis=None, keepdims=False):
    r = norm(x, ord, axis, keepdims)
    r.scalar = r.ndim == 0
    return r


FUNCTIONS[np.linalg.norm] = _norm


# ---- small dense linear algebra (np.linalg): LIBRARY nodes ---------------------------------------
_SlogdetResult = type(np.linalg.slogdet(np.eye(1)))
_EighResult = type(np.linalg.eigh(np.eye(1)))
_SVDResult = type(np.linalg.svd(np.eye(1)))


def _linalg_operand(x, name: str, square: bool = True):
    """(operand cast to float64, result dtype) of np.linalg.`name`.  NumPy computes every
    real linalg function in float64 and casts the results to float32 for float32 inputs
    (float64 for any other): so do we, for the same bits."""
    n = node_of(x)
    if n.ndim < 2:
        raise np.linalg.LinAlgError(f"{n.ndim}-dimensional array given. Array must be at "
                                    f"least two-dimensional")
    if square and n.shape[-1] != n.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    _linalg_dtype(n.dtype, name)
    result = np.dtype(np.float32) if n.dtype == np.float32 else np.dtype(np.float64)
    return ops.cast(current_graph(), n, np.float64), result


def _linalg_dtype(dt, name):
    if dt.kind == "f" and dt.itemsize == 2:
        raise TypeError("array type float16 is unsupported in linalg")
    if dt.kind not in "biuf":
        raise TracingError(f"np.linalg.{name} of {dt} is not supported by fastlaunch")


def _linalg(fn, shape, inputs, result_dtype, **attrs):
    """The LIBRARY node (float64) cast to the result dtype."""
    g = current_graph()
    return ops.cast(g, g.add(Op.LINALG, np.float64, shape, inputs, fn=fn, **attrs),
                    result_dtype)


@implements(np.linalg.inv)
def linalg_inv(a):
    n, rt = _linalg_operand(a, "inv")
    if small_linalg.written_out("inv", n.shape[-1]):
        return wrap(small_linalg.inv(current_graph(), n, rt))
    return wrap(_linalg("inv", n.shape, (n,), rt))


@implements(np.linalg.solve)
def linalg_solve(a, b):
    g = current_graph()
    an, rt = _linalg_operand(a, "solve")
    bn = node_of(b)
    if bn.ndim == 0:
        raise ValueError("solve: Input operand 1 does not have enough dimensions (has 0, "
                         "gufunc core with signature (m,m),(m,n)->(m,n) requires 2)")
    _linalg_dtype(bn.dtype, "solve")
    if bn.dtype != np.float32:
        rt = np.dtype(np.float64)
    bn = ops.cast(g, bn, np.float64)
    m = an.shape[-1]
    vector = bn.ndim == 1
    if vector:
        bn = ops.reshape(g, bn, (m, 1))
    if bn.shape[-2] != m:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0, "
                         f"with gufunc signature (m,m),(m,n)->(m,n) (size {bn.shape[-2]} is "
                         f"different from {m})")
    batch = ops.broadcast_shapes(an.shape[:-2], bn.shape[:-2])
    an = ops.broadcast_to(g, an, batch + an.shape[-2:])
    bn = ops.broadcast_to(g, bn, batch + bn.shape[-2:])
    if small_linalg.written_out("solve", m, bn.shape[-1]):
        return wrap(small_linalg.solve(g, an, bn, vector, rt))
    r = _linalg("solve", bn.shape, (an, bn), rt)
    if vector:
        r = ops.reshape(g, r, batch + (m,))
    return wrap(r)


@implements(np.linalg.det)
def linalg_det(a):
    n, rt = _linalg_operand(a, "det")
    if small_linalg.written_out("det", n.shape[-1]):
        r = small_linalg.det(current_graph(), n, rt)
    else:
        r = _linalg("det", n.shape[:-2], (n,), rt)
    return wrap(r, scalar=r.ndim == 0)


@implements(np.linalg.slogdet)
def linalg_slogdet(a):
    g = current_graph()
    n, rt = _linalg_operand(a, "slogdet")
    if small_linalg.written_out("slogdet", n.shape[-1]):
        parts = small_linalg.slogdet(g, n, rt)
        return _SlogdetResult(*(wrap(p, scalar=p.ndim == 0) for p in parts))
    packed = _linalg("slogdet", n.shape[:-2] + (2,), (n,), rt)
    lead = packed.ndim - 1
    parts = [ops.reshape(g, ops.slice_view(g, packed, (0,) * lead + (i,), (1,) * (lead + 1),
                                           packed.shape[:-1] + (1,)), packed.shape[:-1])
             for i in (0, 1)]
    return _SlogdetResult(*(wrap(p, scalar=p.ndim == 0) for p in parts))


@implements(np.linalg.cholesky)
def linalg_cholesky(a, /, *, upper=False):
    g = current_graph()
    n, rt = _linalg_operand(a, "cholesky")
    if small_linalg.written_out("cholesky", n.shape[-1]):
        return wrap(small_linalg.cholesky(g, n, bool(upper), rt))
    if not upper:
        return wrap(_linalg("cholesky", n.shape, (n,), rt))
    # NumPy's upper factor reads the upper triangle (potrf 'U'): the lower factor of the
    # transpose, transposed
    swap = tuple(range(n.ndim - 2)) + (n.ndim - 1, n.ndim - 2)
    r = _linalg("cholesky", n.shape, (ops.transpose(g, n, swap),), rt)
    return wrap(ops.transpose(g, r, swap))


@implements(np.linalg.eigh)
def linalg_eigh(a, UPLO="L"):
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    g = current_graph()
    n, rt = _linalg_operand(a, "eigh")
    if UPLO == "U":           # the upper triangle is the lower one of the transpose
        n = ops.transpose(g, n, tuple(range(n.ndim - 2)) + (n.ndim - 1, n.ndim - 2))
    m = n.shape[-1]
    packed = _linalg("eigh", n.shape[:-2] + (m + 1, m), (n,), rt)
    lead = packed.ndim - 2
    w = ops.reshape(g, ops.slice_view(g, packed, (0,) * packed.ndim, (1,) * packed.ndim,
                                      packed.shape[:-2] + (1, m)), packed.shape[:-2] + (m,))
    v = ops.slice_view(g, packed, (0,) * lead + (1, 0), (1,) * packed.ndim, n.shape)
    return _EighResult(wrap(w), wrap(v))


def _block(g, packed, row, col, rows, cols, shape):
    """packed[..., row:row+rows, col:col+cols] (a view), reshaped to batch + shape."""
    lead = packed.ndim - 2
    v = ops.slice_view(g, packed, (0,) * lead + (row, col), (1,) * packed.ndim,
                       packed.shape[:-2] + (rows, cols))
    return ops.reshape(g, v, packed.shape[:-2] + shape)


@implements(np.linalg.svd)
def linalg_svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    """LAPACK gesdd as NumPy calls it (jobz 'A', 'S' or 'N'), computed in float64 and cast;
    hermitian=True: NumPy's construction from eigh."""
    if hermitian:
        return _svd_hermitian(a, compute_uv)
    g = current_graph()
    n, rt = _linalg_operand(a, "svd", square=False)
    rows, cols = n.shape[-2:]
    r = min(rows, cols)
    job = 0 if not compute_uv else (2 if full_matrices else 1)
    ucols, vrows = (rows, cols) if job == 2 else (r, r)
    packed = _linalg("svd", n.shape[:-2] + ((1, r) if job == 0 else
                                            (1 + rows + vrows, max(ucols, cols))), (n,), rt,
                     job=job)
    s = wrap(_block(g, packed, 0, 0, 1, r, (r,)))
    if not compute_uv:
        return s
    u = _block(g, packed, 1, 0, rows, ucols, (rows, ucols))
    vh = _block(g, packed, 1 + rows, 0, vrows, cols, (vrows, cols))
    return _SVDResult(wrap(u), s, wrap(vh))


def _svd_hermitian(a, compute_uv):
    """np.linalg.svd(a, hermitian=True) as NumPy computes it: eigh, |eigenvalues| sorted
    descending, the signs moved into Vh."""
    t = _as_tracer(a)
    if not compute_uv:
        s = np.abs(linalg_eigh(t)[0])
        return np.sort(s, axis=-1)[..., ::-1]
    s, u = linalg_eigh(t)
    sgn = np.copysign(1.0, s)
    s = np.abs(s)
    sidx = np.argsort(s, axis=-1)[..., ::-1]
    sgn = np.take_along_axis(sgn, sidx, axis=-1)
    s = np.take_along_axis(s, sidx, axis=-1)
    u = np.take_along_axis(u, sidx[..., None, :], axis=-1)
    return _SVDResult(u, s, np.swapaxes(u * sgn[..., None, :], -1, -2))


def _static_or_array(x):
    """A traced value as it is, anything else as np.asarray (NumPy's handling of rcond/tol)."""
    return x if is_tracer(x) else np.asarray(x)


@implements(np.linalg.pinv)
def linalg_pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    """NumPy 2's pinv: the reduced SVD, singular values at most rcond * max(s) dropped, then
    Vh^T (1/s) U^T (elementwise ops fused, a matrix product)."""
    t = _as_tracer(a)
    if rcond is None:
        if rtol is np._NoValue:
            rcond = 1e-15
        elif rtol is None:
            rcond = max(t.shape[-2:]) * np.finfo(t.dtype).eps
        else:
            rcond = rtol
    elif rtol is not np._NoValue:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    rcond = _static_or_array(rcond)
    if t.ndim >= 2 and t.size == 0 and t.shape[-1] * t.shape[-2] == 0:
        return np.zeros(t.shape[:-2] + (t.shape[-1], t.shape[-2]), t.dtype)
    u, s, vt = linalg_svd(t, full_matrices=False, hermitian=hermitian)
    cutoff = rcond[..., None] * np.amax(s, axis=-1, keepdims=True)
    large = s > cutoff
    s = np.where(large, np.divide(1, s), 0)
    return np.matmul(np.swapaxes(vt, -1, -2), s[..., None] * np.swapaxes(u, -1, -2))


@implements(np.linalg.matrix_rank)
def linalg_matrix_rank(A, tol=None, hermitian=False, *, rtol=None):
    """NumPy's rule: the number of singular values above tol (default: max(m, n) * eps *
    max(s)).  A vector: 1 unless all zero, as a traced int64 (NumPy returns a Python int)."""
    if rtol is not None and tol is not None:
        raise ValueError("`tol` and `rtol` can't be both set.")
    t = _as_tracer(A)
    if t.ndim < 2:
        return astype(np.any(t != 0), np.int64)
    S = linalg_svd(t, compute_uv=False, hermitian=hermitian)
    if S.shape[-1] == 0:            # S.max(initial=0) is 0: nothing above it
        return wrap(ops.broadcast_to(current_graph(), ops.literal(current_graph(), 0, np.intp),
                                     S.shape[:-1]), scalar=S.ndim == 1)
    if tol is None:
        if rtol is None:
            rtol = max(t.shape[-2:]) * np.finfo(S.dtype).eps
        else:
            rtol = _static_or_array(rtol)[..., None]
        tol = np.amax(S, axis=-1, keepdims=True) * rtol
    else:
        tol = _static_or_array(tol)[..., None]
    return np.count_nonzero(S > tol, axis=-1)


class LstsqResiduals(Unreturnable):
    """np.linalg.lstsq's residuals when a has more rows than columns: their shape depends on
    the data (empty unless rank == n), so they are refused wherever they are used."""

    why = ("np.linalg.lstsq's residuals have a data-dependent shape (empty unless the rank "
           "equals the number of columns), which fastlaunch cannot trace: use x, rank and s "
           "(np.linalg.lstsq(a, b)[0]), and compute the residuals as "
           "np.sum((a @ x - b) ** 2, axis=0)")

    def _refuse(self, *args, **kwargs):
        raise TracingError(self.why)

    __len__ = __iter__ = __array__ = __getitem__ = __setitem__ = __bool__ = _refuse
    __float__ = __int__ = __index__ = __array_ufunc__ = __array_function__ = _refuse
    __hash__ = object.__hash__

    def __getattr__(self, name):
        if name.startswith("__"):      # protocol probes (NumPy, copy, pickle) just miss
            raise AttributeError(name)
        raise TracingError(self.why)


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and",
              "or", "xor", "lt", "le", "gt", "ge", "eq", "ne", "neg", "pos", "abs", "invert"):
    for _pre in (("", "r") if _name not in ("lt", "le", "gt", "ge", "eq", "ne", "neg", "pos",
                                            "abs", "invert") else ("",)):
        setattr(LstsqResiduals, f"__{_pre}{_name}__", LstsqResiduals._refuse)


@implements(np.linalg.lstsq)
def linalg_lstsq(a, b, rcond=None):
    """LAPACK gelsd as NumPy calls it, on the augmented matrix [a | b] with rcond as a second
    operand; returns (x, residuals, rank, s).  x, rank and s have static shapes; the
    residuals' shape depends on the rank when a has more rows than columns (then they are a
    LstsqResiduals, refused where used), else they are the empty array NumPy returns."""
    g = current_graph()
    an, bn = node_of(a), node_of(b)
    vector = bn.ndim == 1
    if vector:
        bn = ops.reshape(g, bn, bn.shape + (1,))
    for x in (an, bn):
        if x.ndim != 2:
            raise np.linalg.LinAlgError(f"{x.ndim}-dimensional array given. Array must be "
                                        f"two-dimensional")
    m, n = an.shape
    m2, nrhs = bn.shape
    if m != m2:
        raise np.linalg.LinAlgError("Incompatible dimensions")
    for x in (an, bn):
        _linalg_dtype(x.dtype, "lstsq")
    rt = np.dtype(np.float32) if an.dtype == bn.dtype == np.float32 else np.dtype(np.float64)
    if rcond is None:
        rcond = np.finfo(np.float64).eps * max(n, m)
    if is_tracer(rcond):
        rc = node_of(rcond)
        if rc.ndim != 0:
            raise TracingError("np.linalg.lstsq: a traced rcond must be a scalar")
        _linalg_dtype(rc.dtype, "lstsq")
    else:
        value = np.asarray(rcond)
        if value.ndim != 0 or value.dtype.kind not in "biuf":
            raise TracingError(f"np.linalg.lstsq: rcond must be a real scalar, got "
                               f"{rcond!r:.60}")
        rc = ops.literal(g, float(value), np.float64)
    rc = ops.reshape(g, ops.cast(g, rc, np.float64), (1, 1))
    ab = node_of(concatenate([wrap(ops.cast(g, an, np.float64)),
                              wrap(ops.cast(g, bn, np.float64))], axis=1))
    r = min(m, n)
    packed = g.add(Op.LINALG, np.float64, (n + 2, max(nrhs, r, 1)), (ab, rc), fn="lstsq", n=n)
    x = _block(g, packed, 0, 0, n, nrhs, (n,) if vector else (n, nrhs))
    s = _block(g, packed, n, 0, 1, r, (r,))
    rank = _block(g, packed, n + 1, 0, 1, 1, ())
    if m <= n or nrhs == 0:          # NumPy's residuals are then always empty
        resid = np.zeros(0, rt)
    else:
        resid = LstsqResiduals()
    return (wrap(ops.cast(g, x, rt)), resid, wrap(ops.cast(g, rank, np.int32), scalar=True),
            wrap(ops.cast(g, s, rt)))


# ---- matrix products -------------------------------------------------------------------------
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _product_dtype(a: Node, b: Node) -> np.dtype:
    return ops.check_dtype(np.result_type(a.dtype, b.dtype), "matrix product")


@implements(np.matmul)
def matmul(a, b, out=None, **kwargs):
    g = current_graph()
    an, bn = node_of(a), node_of(b)
    if an.ndim == 0 or bn.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    dt = _product_dtype(an, bn)
    a_vec, b_vec = an.ndim == 1, bn.ndim == 1
    if a_vec:
        an = ops.reshape(g, an, (1,) + an.shape)
    if b_vec:
        bn = ops.reshape(g, bn, bn.shape + (1,))
    if an.shape[-1] != bn.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with "
                         f"gufunc signature (n?,k),(k,m?)->(n?,m?) (size {bn.shape[-2]} is "
                         f"different from {an.shape[-1]})")
    batch = ops.broadcast_shapes(an.shape[:-2], bn.shape[:-2])
    an = ops.broadcast_to(g, an, batch + an.shape[-2:])
    bn = ops.broadcast_to(g, bn, batch + bn.shape[-2:])
    lb = _LETTERS[:len(batch)]
    r = ops.contract(g, an, lb + "xz", bn, lb + "zy", lb + "xy", dt)
    shape = batch + (() if a_vec else (r.shape[-2],)) + (() if b_vec else (r.shape[-1],))
    r = ops.reshape(g, r, shape)
    return wrap(r, scalar=r.ndim == 0)


@implements(np.dot)
def dot(a, b, out=None):
    _no_extra("dot", out=out)
    an, bn = node_of(a), node_of(b)
    if an.ndim == 0 or bn.ndim == 0:       # np.dot makes Python scalars arrays: no NEP 50
        return wrap(ops.apply_ufunc(current_graph(), np.multiply, [(an, None), (bn, None)]))
    g = current_graph()
    dt = _product_dtype(an, bn)
    la = _LETTERS[:an.ndim - 1] + "z"
    if bn.ndim == 1:
        lb = "z"
    else:
        rest = _LETTERS[an.ndim - 1:an.ndim - 1 + bn.ndim - 1]
        lb = rest[:-1] + "z" + rest[-1]
    out_labels = la[:-1] + lb.replace("z", "")
    if an.shape[-1] != bn.shape[lb.index("z")]:
        raise ValueError(f"shapes {an.shape} and {bn.shape} not aligned: {an.shape[-1]} "
                         f"(dim {an.ndim - 1}) != {bn.shape[lb.index('z')]} (dim {lb.index('z')})")
    r = ops.contract(g, an, la, bn, lb, out_labels, dt)
    return wrap(r, scalar=r.ndim == 0)


@implements(np.inner)
def inner(a, b):
    an, bn = node_of(a), node_of(b)
    if an.ndim == 0 or bn.ndim == 0:
        return wrap(ops.apply_ufunc(current_graph(), np.multiply, [(an, None), (bn, None)]))
    la = _LETTERS[:an.ndim - 1] + "z"
    lb = _LETTERS[an.ndim - 1:an.ndim - 1 + bn.ndim - 1] + "z"
    if an.shape[-1] != bn.shape[-1]:
        raise ValueError("shapes not aligned for np.inner")
    r = ops.contract(current_graph(), an, la, bn, lb, la[:-1] + lb[:-1], _product_dtype(an, bn))
    return wrap(r, scalar=r.ndim == 0)


@implements(np.outer)
def outer(a, b, out=None):
    _no_extra("outer", out=out)
    return call_ufunc(np.multiply, (reshape(_as_tracer(a), (-1, 1)), reshape(_as_tracer(b), (1, -1))))


@implements(np.vdot)
def vdot(a, b):
    """conj(a) . b over the flattened arrays (NumPy conjugates the first operand)."""
    a = ravel(_as_tracer(a))
    if a.dtype.kind == "c":
        a = call_ufunc(np.conjugate, (a,))
    return dot(a, ravel(_as_tracer(b)))


@implements(np.einsum)
def einsum(subscripts, *operands, out=None, dtype=None, optimize=False, **kwargs):
    _no_extra("einsum", out=out, **kwargs)
    if not isinstance(subscripts, str):
        raise TracingError("np.einsum with interleaved operand/label lists is not supported")
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise TracingError("np.einsum with '...' is not supported by fastlaunch")
    inputs, _, output = spec.partition("->")
    labels = inputs.split(",")
    if len(labels) != len(operands):
        raise ValueError("more operands than subscripts" if len(operands) > len(labels)
                         else "fewer operands provided to einstein sum function than specified")
    if "->" not in spec:
        counts = {c: inputs.count(c) for c in inputs if c != ","}
        output = "".join(sorted(c for c, k in counts.items() if k == 1))
    g = current_graph()
    nodes = [node_of(o) for o in operands]
    dt = ops.check_dtype(dtype if dtype is not None else np.result_type(*(n.dtype for n in nodes)),
                         "np.einsum")
    if len(nodes) == 1:
        (n,), (lab,) = nodes, labels
        if len(set(lab)) != len(lab):
            raise TracingError("np.einsum with a repeated label (a diagonal) is not supported")
        n = ops.cast(g, n, dt)
        summed = tuple(i for i, c in enumerate(lab) if c not in output)
        kept = [c for c in lab if c in output]
        if summed:
            n = ops.reduce(g, Op.SUM, n, summed, dtype=dt) if dt.kind != "b" else \
                ops.reduce(g, Op.ANY, n, summed)
        r = ops.transpose(g, n, [kept.index(c) for c in output])
        return wrap(r, scalar=r.ndim == 0)
    # two operands at a time, left to right, keeping the labels a later operand or the
    # output needs (NumPy sums all products in one loop: the same sum, in another order)
    cur, cur_lab = nodes[0], labels[0]
    for k in range(1, len(nodes)):
        if k == len(nodes) - 1:
            keep = output
        else:
            later = "".join(labels[k + 1:]) + output
            keep = "".join(dict.fromkeys(c for c in cur_lab + labels[k] if c in later))
        cur = ops.contract(g, cur, cur_lab, nodes[k], labels[k], keep, dt)
        cur_lab = keep
    return wrap(cur, scalar=cur.ndim == 0)


# ---- elementwise functions that are not ufuncs -----------------------------------------------
@implements(np.where)
def where(condition, x=None, y=None):
    if x is None and y is None:
        # indices whose count depends on the data: usable only to index with (x[idx] = v,
        # x[idx, d] *= -1, x[idx].sum()), which is indexing with the mask itself
        c = _as_tracer(condition)
        if c.dtype != np.bool_:
            c = c != 0
        if c.ndim == 0:
            raise TracingError("np.where(condition) of a 0-d traced condition gives indices "
                               "that depend on the data; use np.where(cond, a, b)")
        return tuple(WhereIndices(c, d) for d in range(c.ndim))
    n = ops.where(current_graph(), operand(condition), operand(x), operand(y))
    return wrap(n, scalar=False)


@implements(np.clip)
def clip(a, a_min=None, a_max=None, out=None, **kwargs):
    if "min" in kwargs:
        a_min = kwargs.pop("min")
    if "max" in kwargs:
        a_max = kwargs.pop("max")
    _no_extra("clip", **kwargs)
    r = a
    if a_min is not None:
        r = call_ufunc(np.maximum, (r, a_min))
    if a_max is not None:
        r = call_ufunc(np.minimum, (r, a_max))
    if out is not None:
        return _write_out(out, r.node, "clip")
    return r


def _power_of_ten(n: int) -> float:
    """NumPy's power_of_ten (calculation.c): exact up to 1e22, then repeated products, which
    can differ from 10.0 ** n in the last bit; np.round uses this one."""
    if n < 9:
        return 10.0 ** n
    ret = 1e9
    for _ in range(n - 9):
        ret *= 10.0
    return ret


@implements(np.round, np.around)
def round_(a, decimals=0, out=None):
    if is_tracer(decimals) or type(decimals) is bool or not isinstance(decimals, (int, np.integer)):
        raise TracingError(f"np.round: decimals must be a Python int known while tracing, "
                           f"got {type(decimals).__name__}")
    decimals = int(decimals)
    n = node_of(a)
    if decimals != 0:
        return _round_decimals(a, n, decimals, out)
    if n.dtype.kind in "fb":                  # bool rounds like np.rint: to float16
        return call_ufunc(np.rint, (a,), out=out)
    if n.dtype.kind == "c":                   # each part, as NumPy
        g = current_graph()
        p = complexops.part_dtype(n.dtype)
        n = complexops.make(g, ops.elementwise(g, Op.RINT, p, [complexops.real(g, n)]),
                            ops.elementwise(g, Op.RINT, p, [complexops.imag(g, n)]), n.dtype)
    r = wrap(n, scalar=n.ndim == 0)           # integers are already round
    return _write_out(out, n, "round") if out is not None else r


def _round_decimals(a, n: Node, decimals: int, out):
    """NumPy's algorithm (PyArray_Round): a * 10**d, rint, / 10**d (for d < 0: / then *), in
    the array's float dtype, or in float64 for integers, cast back; integers with d > 0 are
    unchanged."""
    dt = n.dtype
    if dt.kind == "b":
        raise TypeError("np.round with decimals != 0 of a bool array: NumPy cannot cast the "
                        "float64 product back to bool (UFuncTypeError)")
    if dt.kind in "iu" and decimals > 0:
        r = wrap(n, scalar=n.ndim == 0)
        return _write_out(out, n, "round") if out is not None else r
    work = np.dtype(np.float64) if dt.kind in "iu" else dt
    f = work.type(_power_of_ten(abs(decimals)))
    x = astype(a, work) if work != dt else a
    scale, unscale = (np.multiply, np.true_divide) if decimals > 0 else (np.true_divide, np.multiply)
    y = call_ufunc(unscale, (call_ufunc(np.rint, (call_ufunc(scale, (x, f)),)), f))
    if work != dt:
        y = astype(y, dt)
    r = wrap(node_of(y), scalar=n.ndim == 0)
    return _write_out(out, r.node, "round") if out is not None else r


@implements(np.nan_to_num)
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    n = node_of(x)
    if n.dtype.kind == "c":                   # each part, as NumPy
        t = _as_tracer(x)
        g = current_graph()
        parts = [nan_to_num(p, copy, nan, posinf, neginf).node for p in (_real(t), _imag(t))]
        return wrap(complexops.make(g, parts[0], parts[1], n.dtype), scalar=n.ndim == 0)
    if n.dtype.kind != "f":
        return wrap(n)
    info = np.finfo(n.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    r = np.where(np.isnan(x), n.dtype.type(nan), x)
    r = np.where(x == np.inf, n.dtype.type(posinf), r)
    r = np.where(x == -np.inf, n.dtype.type(neginf), r)
    r.scalar = r.ndim == 0
    return r


# ---- dtype and copies --------------------------------------------------------------------
def astype(a, dtype, order="K", casting="unsafe", subok=True, copy=True):
    dt = ops.check_dtype(dtype, "astype")
    if node_of(a).dtype.kind == "c" and dt.kind != "c":
        # NumPy warns on every such cast; the program casts on every call, this warns once
        import warnings
        warnings.warn("Casting complex values to real discards the imaginary part",
                      np.exceptions.ComplexWarning, stacklevel=3)
    return wrap(ops.cast(current_graph(), node_of(a), dt), scalar=is_tracer(a) and a.scalar)


@implements(np.astype)
def astype_function(x, dtype, /, *, copy=True, device=None):
    return astype(x, dtype)


@implements(np.count_nonzero)
def count_nonzero(a, axis=None, *, keepdims=False):
    r = sum_(call_ufunc(np.not_equal, (a, 0)), axis, np.intp, None, keepdims)
    r.scalar = r.ndim == 0          # a 0-d count is a NumPy scalar, whatever the axis
    return r


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


# ---- construction from traced arrays ---------------------------------------------------------
def _filled(shape, dtype, value) -> Tracer:
    g = current_graph()
    dt = ops.check_dtype(dtype, "array construction")
    shape = check_shape(shape, dt)      # a new array: NumPy's array checks, not its iterator's
    return wrap(ops.broadcast_to(g, ops.literal(g, value, dt), shape), scalar=False)


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


def _like(a, dtype, shape, value):
    n = node_of(a)
    dt = np.dtype(dtype) if dtype is not None else n.dtype
    if shape is None:
        shape = n.shape
    elif isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    return _filled(tuple(shape), dt, value)


# ---- shapes and views ----------------------------------------------------------------------
def _as_tracer(a) -> Tracer:
    return a if is_tracer(a) else wrap(node_of(a), scalar=False)


@implements(np.reshape)
def reshape(a, *shape, order="C", newshape=None, copy=None):
    if newshape is not None:
        shape = (newshape,)
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = tuple(shape[0])
    if order not in ("C", "A", "F"):
        raise TracingError(f"reshape(order={order!r}) is not supported by fastlaunch")
    t = _as_tracer(a)
    new_shape = ops.normalize_shape(shape, t.size)
    if order == "F" and t.ndim > 1 or order == "F" and len(new_shape) > 1:
        # Fortran order: the reversed axes reshaped in C order, reversed back
        return transpose(reshape(transpose(t), new_shape[::-1]))
    scalar = t.scalar and not new_shape        # views of a NumPy scalar stay scalars
    vm = frame(t).squeeze_expand(new_shape)
    if vm is not None:
        return view_of(t, vm, scalar=scalar)
    return view_of(t, reshape=new_shape, scalar=scalar)


@implements(np.ravel)
def ravel(a, order="C"):
    return reshape(a, (-1,), order=order)


def flatten(a, order="C"):
    return copy(reshape(a, (-1,), order=order))


@implements(np.transpose)
def transpose(a, axes=None):
    t = _as_tracer(a)
    if axes is None:
        axes = tuple(reversed(range(t.ndim)))
    axes = tuple(int(ax) % max(t.ndim, 1) for ax in axes)
    if sorted(axes) != list(range(t.ndim)):
        raise ValueError("axes don't match array")
    return view_of(t, frame(t).transpose(axes), scalar=t.scalar and t.ndim == 0)


@implements(np.swapaxes)
def swapaxes(a, axis1, axis2):
    nd = node_of(a).ndim
    perm = list(range(nd))
    i, j = ops.normalize_axes(axis1, nd)[0], ops.normalize_axes(axis2, nd)[0]
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


@implements(np.moveaxis)
def moveaxis(a, source, destination):
    nd = node_of(a).ndim
    src = [ops.normalize_axes(s, nd)[0] for s in np.atleast_1d(source)]
    dst = [ops.normalize_axes(d, nd)[0] for d in np.atleast_1d(destination)]
    order = [n for n in range(nd) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


@implements(np.expand_dims)
def expand_dims(a, axis):
    shape = list(node_of(a).shape)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = len(shape) + len(axes)
    for ax in sorted(int(x) % nd for x in axes):
        shape.insert(ax, 1)
    return reshape(a, tuple(shape))


@implements(np.squeeze)
def squeeze(a, axis=None):
    shape = node_of(a).shape
    if axis is None:
        drop = {i for i, s in enumerate(shape) if s == 1}
    else:
        drop = set(ops.normalize_axes(axis, len(shape)))
        if any(shape[i] != 1 for i in drop):
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(a, tuple(s for i, s in enumerate(shape) if i not in drop))


@implements(np.broadcast_to)
def broadcast_to(a, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError("all elements of broadcast shape must be non-negative")
    n = ops.broadcast_to(current_graph(), node_of(a), shape)
    return Tracer(Storage(n, frozen_reason="the result of np.broadcast_to is read-only"))


@implements(np.atleast_1d)
def atleast_1d(*arys):
    out = tuple(a if node_of(a).ndim >= 1 else reshape(a, (1,)) for a in arys)
    return out[0] if len(out) == 1 else out


@implements(np.atleast_2d)
def atleast_2d(*arys):
    out = []
    for a in arys:
        nd = node_of(a).ndim
        out.append(a if nd >= 2 else reshape(a, (1,) * (2 - nd) + node_of(a).shape))
    return out[0] if len(out) == 1 else tuple(out)


@implements(np.shape)
def shape_(a):
    if trace._size_watchers:
        trace.note_size_read(node_of(a).shape, 0)
    return node_of(a).shape


@implements(np.ndim)
def ndim_(a):
    return node_of(a).ndim


@implements(np.size)
def size_(a, axis=None):
    n = node_of(a)
    if trace._size_watchers:
        trace.note_size_read(n.shape, 0)
    return n.size if axis is None else n.shape[axis]


@implements(np.result_type)
def result_type(*arrays_and_dtypes):
    return np.result_type(*[a.dtype if is_tracer(a) else a for a in arrays_and_dtypes])


# ---- joining (copies) ------------------------------------------------------------------------
@implements(np.concatenate)
def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _no_extra("concatenate", out=out)
    g = current_graph()
    parts = [operand(a) for a in arrays]
    if not parts:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        parts = [(ops.reshape(g, n, (-1,)), w) for n, w in parts]
        axis = 0
    dt = np.dtype(dtype) if dtype is not None else ops.result_type([(n, None) for n, _ in parts])
    nodes = [ops.cast(g, n, dt) for n, _ in parts]
    nd = nodes[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ax = ops.normalize_axes(axis, nd)[0]
    for n in nodes:
        if n.ndim != nd or any(n.shape[d] != nodes[0].shape[d] for d in range(nd) if d != ax):
            raise ValueError("all the input array dimensions except for the concatenation axis "
                             "must match exactly")
    total = sum(n.shape[ax] for n in nodes)
    shape_out = list(nodes[0].shape)
    shape_out[ax] = total
    base = ops.broadcast_to(g, ops.literal(g, 0, dt), shape_out)
    at = 0
    for n in nodes:
        start = [0] * nd
        start[ax] = at
        base = ops.set_region(g, base, start, [1] * nd, n.shape, n)
        at += n.shape[ax]
    return wrap(base, scalar=False)


@implements(np.stack)
def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    nd = node_of(arrays[0]).ndim + 1
    ax = ops.normalize_axes(axis, nd)[0]
    return concatenate([expand_dims(_as_tracer(a), ax) for a in arrays], axis=ax, out=out,
                       dtype=dtype)


@implements(np.hstack)
def hstack(tup, dtype=None, casting="same_kind"):
    arrs = [atleast_1d(a) for a in tup]
    return concatenate(arrs, axis=0 if node_of(arrs[0]).ndim == 1 else 1, dtype=dtype)


@implements(np.vstack)
def vstack(tup, dtype=None, casting="same_kind"):
    return concatenate([atleast_2d(a) for a in tup], axis=0, dtype=dtype)


# ---- indexing ----------------------------------------------------------------------------
def _is_advanced(k) -> bool:
    return is_tracer(k) or isinstance(k, (np.ndarray, list))


_INTP_OVERFLOW = "Python int too large to convert to C long"


def _fits_intp(k):
    """A traced index as NumPy takes it: a 0-d uint64 is taken as a Python int
    (operator.index), so one of 2**63 or more overflows intp where an index array's values
    wrap.  The gather reads element 0 then, so that the overflow is the error raised."""
    if k.ndim != 0 or k.dtype != np.uint64:
        return k
    g = current_graph()
    fits = ops.elementwise(g, Op.LT, np.bool_, [node_of(k), ops.literal(g, 2**63, np.uint64)])
    ops.add_check(g, fits, OverflowError, _INTP_OVERFLOW)
    return wrap(ops.where(g, (fits, None), (node_of(k), None),
                          (ops.literal(g, 0, np.uint64), None)), scalar=k.scalar)


def _normalize_key(key, ndim: int) -> tuple:
    """Expand a key to one entry per dim (plus Nones): ints, slices, None, and index arrays."""
    if not isinstance(key, tuple):
        key = (key,)
    out = []
    for k in key:
        if isinstance(k, range):         # x[range(n), y]: the index array it stands for
            k = np.arange(k.start, k.stop, k.step)
        elif type(k) is tuple:           # x[:, (0, 1)] is x[:, [0, 1]], as in NumPy
            k = array(list(k)) if any(is_tracer(v) for v in k) else \
                np.array(k, dtype=np.intp if not k else None)
        if k is None or k is Ellipsis or isinstance(k, slice):
            out.append(k)
        elif is_tracer(k):             # before the scalar tests: a traced scalar looks like one
            if k.dtype == np.bool_:
                raise TracingError(
                    "boolean-mask indexing (x[mask]) gives an array whose size depends on the "
                    "data, which cannot be traced; use np.where(mask, x, fill) to keep the shape")
            if k.dtype.kind not in "iu":
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            out.append(_fits_intp(k))
        elif isinstance(k, (bool, np.bool_)):
            raise TracingError("indexing with a boolean scalar is not supported by fastlaunch")
        elif isinstance(k, (int, np.integer)):
            if 2**63 <= int(k) < 2**64:
                raise OverflowError(_INTP_OVERFLOW)
            out.append(int(k))
        elif is_tracer(k) and k.dtype == np.bool_:
            raise TracingError(
                "boolean-mask indexing (x[mask]) gives an array whose size depends on the data, "
                "which cannot be traced; use np.where(mask, x, fill) to keep the shape")
        elif isinstance(k, (np.ndarray, list)) and np.asarray(k).dtype == np.bool_:
            out += [i for i in np.nonzero(np.asarray(k))]   # a constant mask: fixed indices
        elif is_tracer(k) or isinstance(k, (np.ndarray, list)):
            arr = k if is_tracer(k) else np.asarray(k)
            if arr.dtype.kind not in "iu" and not (isinstance(k, list) and len(k) == 0):
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            if not is_tracer(k) and arr.ndim == 0 and arr.dtype == np.uint64 and arr >= 2**63:
                raise OverflowError(_INTP_OVERFLOW)
            out.append(_fits_intp(k) if is_tracer(k) else arr.astype(np.intp))
        else:
            raise TracingError(f"indexing with {type(k).__name__} is not supported by fastlaunch")
    if sum(1 for k in out if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in out if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, "
                         f"but {used} were indexed")
    at = next((i for i, k in enumerate(out) if k is Ellipsis), None)
    if at is not None:
        out[at:at + 1] = [slice(None)] * (ndim - used)
    else:
        out += [slice(None)] * (ndim - used)
    return tuple(out)


def _basic_view(t: Tracer, key: tuple) -> Tracer:
    """t[key] for a normalized key of ints, slices and None: a view sharing t's storage."""
    shape = t.shape
    dims = [k for k in key if k is not None]
    for d, (k, n) in enumerate(zip(dims, shape)):
        if isinstance(k, int) and not -n <= k < n:
            raise IndexError(f"index {k} is out of bounds for axis {d} with size {n}")
    wrapped, d = [], 0
    for k in key:                         # negative ints count from the end of their axis
        if k is not None:
            k = k % shape[d] if isinstance(k, int) else k
            d += 1
        wrapped.append(k)
    key = tuple(wrapped)
    scalar = bool(dims) and all(isinstance(k, int) for k in dims) and None not in key
    return view_of(t, frame(t).index(key), scalar=scalar)


def _advanced(t: Tracer, key: tuple):
    """Split a key with index arrays: (view of t holding every indexed dim, first indexed axis,
    index operands).  Ints join the index arrays, as in NumPy; when the indexed dims are not
    adjacent they move to the front (NumPy's rule for where the broadcast dims go)."""
    if any(k is None for k in key):
        raise TracingError("mixing np.newaxis with array indices is not supported by fastlaunch")
    adv = [d for d, k in enumerate(key) if _is_advanced(k) or isinstance(k, int)]
    view = _basic_view(t, tuple(slice(None) if d in adv else k for d, k in enumerate(key)))
    indices = [key[d] for d in adv]
    if adv == list(range(adv[0], adv[0] + len(adv))):
        return view, adv[0], indices
    rest = [d for d in range(len(key)) if d not in adv]
    return transpose(view, adv + rest), 0, indices


def _mask_key(t: Tracer, key):
    """A key that selects with a traced mask and basic indices after it, x[mask, d] (or the
    indices of np.where(mask)): (x's view by the basic part, the mask), else None."""
    if not isinstance(key, tuple):
        key = (key,)
    parts = list(key)
    if parts and type(parts[0]) is tuple and parts[0] and \
            all(isinstance(k, WhereIndices) for k in parts[0]):
        parts[0:1] = list(parts[0])          # x[np.where(m), d]: np.where's tuple inside
    if not parts or not isinstance(parts[0], WhereIndices) and \
            not (is_tracer(parts[0]) and parts[0].dtype == np.bool_ and len(parts) > 1):
        return None
    if isinstance(parts[0], WhereIndices):
        mask = parts[0].mask
        n = mask.ndim
        if len(parts) < n or any(not isinstance(k, WhereIndices) or k.mask is not mask or
                                 k.axis != d for d, k in enumerate(parts[:n])):
            raise TracingError(WhereIndices.why)
        rest = parts[n:]
    else:
        mask, rest = parts[0], parts[1:]
        n = mask.ndim
    if any(is_tracer(k) or not isinstance(k, (int, np.integer, slice)) for k in rest):
        raise TracingError(_MASK_HINT)
    if not rest:
        return t, mask
    return getitem(t, (slice(None),) * n + tuple(rest)), mask


def getitem(t: Tracer, key):
    found = _mask_key(t, key)
    if found is not None:
        t, key = found
    mask = _traced_mask(t, key)
    if mask is not None:
        return MaskedSelection(t, mask, wrap(node_of(t), scalar=False))
    ellipsis = key is Ellipsis or (isinstance(key, tuple) and any(k is Ellipsis for k in key))
    key = _normalize_key(key, t.ndim)
    if not any(_is_advanced(k) for k in key):
        out = _basic_view(t, key)
        # a 0-d result is a NumPy scalar (x[0], x[()]) unless the key holds an Ellipsis
        out.scalar = out.ndim == 0 and not ellipsis
        return out
    view, axis, indices = _advanced(t, key)
    g = current_graph()
    idx = [node_of(i) for i in indices]
    n = ops.gather(g, view.node, idx, axis)
    if n.ndim and all(isinstance(i, int) or is_tracer(i) and i.ndim == 0 for i in indices):
        # NumPy's x[i] for an integer i is a view: writes into it reach x (`x[i][j] += v`,
        # `row = x[i]; row *= 2`).  Ours is a gather (i is known only when the function
        # runs): each write into it is written back into x[key] (a scatter)
        return Tracer(Storage(n, through=lambda value: setitem(t, key, value)))
    return wrap(n, scalar=n.ndim == 0 and all(i.ndim == 0 for i in idx))


def setitem(t: Tracer, key, value):
    found = _mask_key(t, key)
    if found is not None:
        t, key = found
    mask = _traced_mask(t, key)
    if mask is not None:
        _masked_assign(t, mask, value)
        return
    key = _normalize_key(key, t.ndim)
    if any(_is_advanced(k) for k in key):
        _scatter_into(t, key, node_of(value), "set", "item assignment (x[idx] = value)")
        return
    target = _basic_view(t, key)
    target.scalar = False
    g = current_graph()
    v = node_of(value)
    target._assign(ops.broadcast_to(g, ops.cast(g, v, t.dtype), target.shape),
                   "item assignment (x[...] = value)")


# ---- boolean masks: x[mask] = v, x[mask] += v, x[mask].sum() ---------------------------------
# x[mask] has a data-dependent size, but these uses of it do not: an assignment through the
# mask keeps x's shape (a where), and a reduction of the selection is a reduction of
# where(mask, x, identity).  x[mask] therefore returns a MaskedSelection that supports just
# those uses and names the alternative for everything else.
_MASK_HINT = ("x[mask] has a size that depends on the data, which cannot be traced; what "
              "works: x[mask] = v and x[mask] += v with a scalar (or a value broadcast over the "
              "unmasked trailing axes), z[mask] = f(x[mask]) (elementwise, the same mask), "
              "x[mask].sum()/.mean()/.prod()/.any()/.all(), or np.where(mask, x, fill) to "
              "keep the shape")


def _traced_mask(t: Tracer, key):
    """The traced boolean array of a key that is exactly one (x[mask]), else None."""
    if isinstance(key, tuple):
        if len(key) != 1:
            return None
        key = key[0]
    if not (is_tracer(key) and key.dtype == np.bool_) or isinstance(key, MaskedSelection):
        return None
    if key.ndim == 0 or key.ndim > t.ndim:
        raise IndexError(f"too many indices for array: array is {t.ndim}-dimensional, but "
                         f"{key.ndim} were indexed" if key.ndim else _MASK_HINT)
    for axis, (a, b) in enumerate(zip(t.shape, key.shape)):
        if a != b:
            raise IndexError(f"boolean index did not match indexed array along axis {axis}; "
                             f"size of axis is {a} but size of corresponding boolean axis is {b}")
    return key


def _mask_value(t: Tracer, mask: Tracer, value, what: str):
    """`value` as it broadcasts over the trailing (unmasked) axes of t: NumPy broadcasts it
    against the selection's shape (count,) + trailing, so only a leading length-1 axis (or
    none) keeps that independent of the count."""
    if type(value) in (bool, int, float) or isinstance(value, np.generic):
        return value                   # keeps NEP 50's weak Python scalars weak
    g = current_graph()
    v = node_of(value)
    trailing = t.shape[mask.ndim:]
    if v.ndim == len(trailing) + 1:
        if v.shape[0] != 1:
            raise TracingError(f"{what}: a value of shape {v.shape} must match the number of "
                               f"True elements of the mask, which is data-dependent; "
                               f"{_MASK_HINT}")
        v = ops.reshape(g, v, v.shape[1:])
    if v.ndim > len(trailing):
        raise TracingError(f"{what}: a value of shape {v.shape} for a selection of trailing "
                           f"shape {trailing}; {_MASK_HINT}")
    try:
        np.broadcast_shapes(v.shape, trailing)
    except ValueError:
        raise ValueError(f"shape mismatch: value array of shape {tuple(value_shape(value))} "
                         f"could not be broadcast to indexing result with trailing shape "
                         f"{trailing}") from None
    return wrap(v, scalar=False)


def value_shape(value):
    return np.shape(value) if not is_tracer(value) else value.shape


def _expanded_mask(t: Tracer, mask: Tracer) -> Tracer:
    g = current_graph()
    n = node_of(mask)
    return wrap(ops.reshape(g, n, n.shape + (1,) * (t.ndim - mask.ndim)), scalar=False)


def _masked_assign(t: Tracer, mask: Tracer, value):
    what = "boolean-mask assignment (x[mask] = v)"
    if isinstance(value, MaskedSelection):
        # z[m] = f(x[m]): both sides select the same elements (the same mask node), so
        # this is where(m, f(x), z) whatever the count
        trailing, vt = t.shape[mask.ndim:], value.values.shape[value.mask.ndim:]
        if not _same_mask(value.mask, mask) or len(vt) != len(trailing) or \
                np.broadcast_shapes(vt, trailing) != trailing:
            raise TracingError(f"{what}: assigning a selection by another mask (or of "
                               f"another shape); {_MASK_HINT}")
        new = value.values
    else:
        new = _mask_value(t, mask, value, what)
    g = current_graph()
    merged = where(_expanded_mask(t, mask),
                   wrap(ops.cast(g, node_of(new), t.dtype), scalar=False), t)
    setitem(t, Ellipsis, merged)


def _same_mask(a: Tracer, b: Tracer) -> bool:
    """The same mask: one tracer, or the same node (x > 0 written twice is one node)."""
    return a is b or node_of(a) is node_of(b)


def _selection_elementwise(ufunc, inputs, kwargs):
    """f(x[m], y[m], scalar): the selection of f(x, y, scalar) by the same mask m. Every
    element is computed and the unselected ones are dropped (by a reduction's fill or a
    masked assignment's where), so the count never needs to be known."""
    what = f"{naming.public_name(ufunc)} of x[mask]"
    if kwargs.get("out") is not None or ufunc.nout != 1 or \
            any(k not in ("dtype", "casting") for k in kwargs if k != "out"):
        raise TracingError(f"{what} with out=, where= or several outputs; {_MASK_HINT}")
    kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    first = next(x for x in inputs if isinstance(x, MaskedSelection))
    operands = []
    for x in inputs:
        if isinstance(x, MaskedSelection):
            if not _same_mask(x.mask, first.mask) or x.values.ndim != first.values.ndim:
                raise TracingError(f"{what}: selections by different masks (or of different "
                                   f"ranks) combined; {_MASK_HINT}")
            operands.append(x.values)
        else:
            # a scalar or a value over the trailing axes broadcasts against the whole array
            operands.append(_mask_value(first.values, first.mask, x, what))
    result = call_ufunc(ufunc, tuple(operands), **kwargs)
    return MaskedSelection(result, first.mask, result)


def _selection_operator(ufunc, reflected=False):
    def op(self, other):
        return _selection_elementwise(ufunc, (other, self) if reflected else (self, other), {})
    return op


def _selection_inplace(ufunc):
    def op(self, other):
        v = _mask_value(self.base, self.mask, other, f"x[mask] {ufunc.__name__}= v")
        vals = wrap(node_of(self.values), scalar=False)
        # NumPy's in-place casting rules (same_kind), as for the selection's own copy
        call_ufunc(ufunc, (vals, v), out=vals)
        return MaskedSelection(self.base, self.mask, vals)
    return op


class WhereIndices(Unreturnable):
    """One of the index arrays np.where(mask) returns while tracing: their length depends on
    the data, so they stand for the mask, as an index only."""
    why = ("the indices np.where(cond) returns have a count that depends on the data, which "
           "cannot be traced; they work as an index of an array of cond's shape (x[idx] = v, "
           "x[idx, d] *= -1, x[idx].sum()); otherwise use np.where(cond, a, b) or the boolean "
           "mask itself")

    def __init__(self, mask: Tracer, axis: int):
        self.mask, self.axis = mask, axis

    def __getattr__(self, name):
        raise TracingError(self.why)

    def __len__(self):
        raise TracingError(self.why)

    def __array__(self, dtype=None, copy=None):
        raise TracingError(self.why)

    def _refuse(self, *args, **kwargs):
        raise TracingError(self.why)

    # indexing them (candidates[:, None]) is the same data-dependent count
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __iter__ = _refuse
    __getitem__ = __setitem__ = _refuse
    __array_ufunc__ = None


class MaskedSelection(Unreturnable):
    """x[mask] while tracing: see _MASK_HINT for what it supports."""
    why = _MASK_HINT

    def __init__(self, base: Tracer, mask: Tracer, values: Tracer):
        self.base, self.mask, self.values = base, mask, values
        self.dtype = values.dtype
        self.ndim = 1 + base.ndim - mask.ndim

    def _filled(self, fill) -> Tracer:
        return where(_expanded_mask(self.base, self.mask), self.values,
                     wrap(ops.literal(current_graph(), self.dtype.type(fill), self.dtype)))

    def _axis(self, axis):
        if axis is None:
            return None
        axes = axis if isinstance(axis, tuple) else (axis,)
        if tuple(a % self.ndim for a in axes) != (0,):
            raise TracingError(f"reductions of x[mask] over axis={axis}: only axis=None or 0; "
                               f"{_MASK_HINT}")
        return tuple(range(self.mask.ndim))

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return sum_(self._filled(0), self._axis(axis), dtype)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return _reduce(Op.PROD, self._filled(1), self._axis(axis), False, dtype)

    def any(self, axis=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return any_(self._filled(False), self._axis(axis))

    def all(self, axis=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        return all_(self._filled(True), self._axis(axis))

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        self._plain(out, keepdims)
        axes = self._axis(axis)
        count = count_nonzero(self.mask)
        if axes is None:
            count = count * int(np.prod(self.base.shape[self.mask.ndim:], dtype=np.int64))
        acc, res = _mean_dtype(self.dtype, dtype)
        count = astype(count, acc)
        total = sum_(self._filled(0), axes, acc)
        return astype(call_ufunc(np.true_divide, (total, count)), res)

    def _plain(self, out, keepdims):
        if out is not None or keepdims:
            raise TracingError(f"reductions of x[mask] with out= or keepdims=; {_MASK_HINT}")

    def max(self, *args, **kwargs):
        raise TracingError("x[mask].max()/.min() of a possibly empty selection cannot be "
                           "traced (NumPy raises on an empty one); use "
                           "np.where(mask, x, -np.inf).max() (or +np.inf with .min())")

    min = max

    def __array_function__(self, func, types, args, kwargs):
        method = _MASKED_FUNCTIONS.get(func)
        if method is None or args[0] is not self:
            raise TracingError(f"np.{getattr(func, '__name__', func)} of x[mask]: {_MASK_HINT}")
        if method == "count_nonzero":
            return count_nonzero(self._filled(False))
        return getattr(self, method)(*args[1:], **kwargs)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__":
            return _selection_elementwise(ufunc, inputs, kwargs)
        raise TracingError(f"{naming.public_name(ufunc)}.{method} of x[mask]: {_MASK_HINT}")

    __hash__ = object.__hash__

    def __neg__(self):
        return _selection_elementwise(np.negative, (self,), {})

    def __pos__(self):
        return _selection_elementwise(np.positive, (self,), {})

    def __abs__(self):
        return _selection_elementwise(np.absolute, (self,), {})

    def __invert__(self):
        return _selection_elementwise(np.invert, (self,), {})

    def _refuse(self, *args, **kwargs):
        raise TracingError(_MASK_HINT)

    __len__ = __iter__ = __array__ = __getitem__ = __setitem__ = __bool__ = _refuse
    __float__ = __int__ = __index__ = _refuse

    @property
    def shape(self):
        raise TracingError(_MASK_HINT)

    size = shape

    def __getattr__(self, name):
        if name.startswith("__"):      # protocol probes (NumPy, copy, pickle) just miss
            raise AttributeError(name)
        raise TracingError(f"x[mask].{name}: {_MASK_HINT}")


_MASKED_FUNCTIONS = {np.sum: "sum", np.prod: "prod", np.any: "any", np.all: "all",
                     np.mean: "mean", np.max: "max", np.min: "min", np.amax: "max",
                     np.amin: "min", np.count_nonzero: "count_nonzero"}
for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("and", np.bitwise_and),
                   ("or", np.bitwise_or), ("xor", np.bitwise_xor), ("lshift", np.left_shift),
                   ("rshift", np.right_shift)]:
    setattr(MaskedSelection, f"__i{_name}__", _selection_inplace(_uf))
    setattr(MaskedSelection, f"__{_name}__", _selection_operator(_uf))
    setattr(MaskedSelection, f"__r{_name}__", _selection_operator(_uf, reflected=True))
for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    setattr(MaskedSelection, f"__{_name}__", _selection_operator(_uf))


def _scatter_into(t: Tracer, key, values: Node, mode: str, what: str):
    key = _normalize_key(key, t.ndim)
    if not any(_is_advanced(k) for k in key):
        # a basic key: write through a view, combining with the current values
        target = _basic_view(t, key)
        target.scalar = False
        g = current_graph()
        v = ops.broadcast_to(g, ops.cast(g, values, t.dtype), target.shape)
        if mode != "set":
            v = _combine(g, mode, target.node, v)
        target._assign(v, what)
        return
    view, axis, indices = _advanced(t, key)
    g = current_graph()
    new = ops.scatter(g, view.node, values, [node_of(i) for i in indices], axis, mode)
    view.scalar = False
    view._assign(new, what)


def _combine(g, mode: str, old: Node, new: Node) -> Node:
    op = {"add": Op.ADD, "mul": Op.MUL, "max": Op.MAXIMUM, "min": Op.MINIMUM}[mode]
    return ops.elementwise(g, op, old.dtype, [old, new])


@implements(np.take)
def take(a, indices, axis=None, out=None, mode="raise"):
    _no_extra("take", out=out)
    t = _as_tracer(a)
    if axis is None:
        t, axis = ravel(t), 0
    axis = ops.normalize_axes(axis, t.ndim)[0]
    g = current_graph()
    idx = node_of(indices)
    size = t.shape[axis]
    if mode in ("wrap", "clip") and size:
        idx = ops.cast(g, idx, np.intp)
        if mode == "wrap":
            idx = ops.elementwise(g, Op.MOD, idx.dtype, [idx, ops.literal(g, size, idx.dtype)])
        else:
            lo, hi = ops.literal(g, 0, idx.dtype), ops.literal(g, size - 1, idx.dtype)
            idx = ops.elementwise(g, Op.MINIMUM, idx.dtype,
                                  [ops.elementwise(g, Op.MAXIMUM, idx.dtype, [idx, lo]), hi])
    elif mode != "raise":
        raise ValueError(f"clipmode not understood: {mode!r}")
    n = ops.gather(g, t.node, [idx], axis)
    return wrap(n, scalar=n.ndim == 0)


@implements(np.take_along_axis)
def take_along_axis(arr, indices, axis=-1):
    t = _as_tracer(arr)
    idx = node_of(indices)
    if axis is None:
        t, axis = ravel(t), 0
    if idx.ndim != t.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    axis = ops.normalize_axes(axis, t.ndim)[0]
    g = current_graph()
    picks = []
    for d in range(t.ndim):
        if d == axis:
            picks.append(idx)
        else:
            shape = tuple(t.shape[d] if j == d else 1 for j in range(t.ndim))
            picks.append(ops.iota(g, shape, d, np.intp))
    return wrap(ops.gather(g, t.node, picks, 0), scalar=False)


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


# ---- outer products and matrix helpers ---------------------------------------------------------
def ufunc_outer(ufunc, a, b, **kwargs):
    """ufunc.outer(a, b): a's axes first, then b's, by broadcasting (no copy of either)."""
    if ufunc.nin != 2:
        raise ValueError("method outer is only supported for binary functions")
    if kwargs.get("out") is not None:
        raise TracingError(f"np.{ufunc.__name__}.outer(..., out=...) is not supported")
    kwargs.pop("out", None)
    # outer makes arrays of Python scalars (int64, float64): no weak promotion
    an, bn = (node_of(np.asarray(x) if type(x) in (bool, int, float) else x) for x in (a, b))
    g = current_graph()
    a2 = wrap(ops.reshape(g, an, an.shape + (1,) * bn.ndim))
    b2 = wrap(bn)
    r = call_ufunc(ufunc, (a2, b2), **kwargs)
    r.scalar = False
    return r


def _readonly(node: Node, what: str) -> Tracer:
    return Tracer(Storage(node, frozen_reason=f"{what} returns a read-only view"), scalar=False)


@implements(np.diagonal)
def diagonal(a, offset=0, axis1=0, axis2=1):
    """A view: axis1 and axis2 moved last and merged, then a slice of step m + 1."""
    t = _as_tracer(a)
    if t.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    ax1 = ops.normalize_axes(axis1, t.ndim)[0]
    ax2 = ops.normalize_axes(axis2, t.ndim)[0]
    if ax1 == ax2:
        raise ValueError("axis1 and axis2 cannot be the same")
    g = current_graph()
    offset = int(offset)
    rest = [d for d in range(t.ndim) if d not in (ax1, ax2)]
    moved = ops.transpose(g, t.node, rest + [ax1, ax2])
    n, m = moved.shape[-2:]
    lead = moved.shape[:-2]
    k = max(0, min(n, m - offset)) if offset >= 0 else max(0, min(n + offset, m))
    flat = ops.reshape(g, moved, lead + (n * m,))
    start = (offset if offset >= 0 else -offset * m) if k else 0
    r = ops.slice_view(g, flat, (0,) * len(lead) + (start,), (1,) * len(lead) + (m + 1,),
                       lead + (k,))
    return _readonly(r, "np.diagonal")


@implements(np.diag)
def diag(v, k=0):
    t = _as_tracer(v)
    k = int(k)
    if t.ndim == 2:
        r = diagonal(t, k)
        return wrap(r.node, scalar=False)
    if t.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    g = current_graph()
    n = t.shape[0] + abs(k)
    zeros = ops.broadcast_to(g, ops.literal(g, 0, t.dtype), (n * n,))
    start = k if k >= 0 else -k * n
    r = ops.set_region(g, zeros, (start,), (n + 1,), (t.shape[0],), t.node)
    return wrap(ops.reshape(g, r, (n, n)), scalar=False)


@implements(np.trace)
def trace_(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _no_extra("trace", out=out)
    return sum_(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


def _tri_mask(shape2, k, lower: bool) -> Tracer:
    g = current_graph()
    n = shape2[0]
    m = shape2[1] if len(shape2) > 1 else n
    rows = wrap(ops.iota(g, (n, m), 0, np.intp), scalar=False)
    cols = wrap(ops.iota(g, (n, m), 1, np.intp), scalar=False)
    d = cols - rows
    return call_ufunc(np.less_equal if lower else np.greater_equal, (d, int(k)))


def _tri_select(m, k, lower):
    t = _as_tracer(m)
    if t.ndim == 0:
        raise TypeError("tri() missing 1 required positional argument: 'N'")
    r = where(_tri_mask(t.shape[-2:], k, lower), t, np.zeros(1, t.dtype))
    return r


@implements(np.tril)
def tril(m, k=0):
    return _tri_select(m, k, True)


@implements(np.triu)
def triu(m, k=0):
    return _tri_select(m, k, False)


@implements(np.kron)
def kron(a, b):
    """a[i] * b[j] at i * b.shape + j: a broadcast product of interleaved axes, reshaped."""
    ta, tb = _as_tracer(a), _as_tracer(b)
    nd = max(ta.ndim, tb.ndim)
    sa = (1,) * (nd - ta.ndim) + ta.shape
    sb = (1,) * (nd - tb.ndim) + tb.shape
    ia = tuple(x for s in sa for x in (s, 1))
    ib = tuple(x for s in sb for x in (1, s))
    r = call_ufunc(np.multiply, (reshape(ta, ia), reshape(tb, ib)))
    out = reshape(r, tuple(x * y for x, y in zip(sa, sb)))
    out.scalar = False
    return out


@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """NumPy's own sequence of products and differences (the same roundings)."""
    if axis is not None:
        axisa, axisb, axisc = (axis,) * 3
    ta, tb = _as_tracer(a), _as_tracer(b)
    if ta.ndim < 1 or tb.ndim < 1:
        raise ValueError("At least one array has zero dimension")
    ta = moveaxis(ta, ops.normalize_axes(axisa, ta.ndim)[0], -1)
    tb = moveaxis(tb, ops.normalize_axes(axisb, tb.ndim)[0], -1)
    na, nb = ta.shape[-1], tb.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n"
                         "(dimension must be 2 or 3)")
    if na == 2 or nb == 2:
        import warnings
        warnings.warn("Arrays of 2-dimensional vectors are deprecated. Use arrays of "
                      "3-dimensional vectors instead. (deprecated in NumPy 2.0)",
                      DeprecationWarning, stacklevel=2)
    dt = np.promote_types(ta.dtype, tb.dtype)
    ta, tb = astype(ta, dt), astype(tb, dt)
    a0, a1, b0, b1 = ta[..., 0], ta[..., 1], tb[..., 0], tb[..., 1]
    mul, sub = (lambda x, y: call_ufunc(np.multiply, (x, y))), \
        (lambda x, y: call_ufunc(np.subtract, (x, y)))
    if na == 2 and nb == 2:
        r = sub(mul(a0, b1), mul(a1, b0))
        r.scalar = False
        return r
    if na == 2:
        b2 = tb[..., 2]
        cps = [mul(a1, b2), call_ufunc(np.negative, (mul(a0, b2),)), sub(mul(a0, b1), mul(a1, b0))]
    elif nb == 2:
        a2 = ta[..., 2]
        cps = [call_ufunc(np.negative, (mul(a2, b1),)), mul(a2, b0), sub(mul(a0, b1), mul(a1, b0))]
    else:
        a2, b2 = ta[..., 2], tb[..., 2]
        cps = [sub(mul(a1, b2), mul(a2, b1)), sub(mul(a2, b0), mul(a0, b2)),
               sub(mul(a0, b1), mul(a1, b0))]
    shape = ops.broadcast_shapes(*(c.shape for c in cps))
    cp = stack([broadcast_to(c, shape) for c in cps], axis=-1)
    cp = astype(cp, dt)
    axc = ops.normalize_axes(axisc, cp.ndim)[0]
    return moveaxis(cp, -1, axc)


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


@implements(np.ix_)
def ix_(*args):
    out = []
    nd = len(args)
    for k, new in enumerate(args):
        t = _as_tracer(new)
        if t.ndim != 1:
            raise ValueError("Cross index must be 1 dimensional")
        if t.dtype.kind == "b":
            raise TracingError("np.ix_ of a traced boolean mask has a data-dependent size, "
                               "which cannot be traced")
        out.append(reshape(t, (1,) * k + (t.shape[0],) + (1,) * (nd - k - 1)))
    return tuple(out)


# ---- data-dependent output sizes ---------------------------------------------------------------
def _data_dependent(name):
    def refuse(*args, **kwargs):
        raise TracingError(f"{name} returns an array whose size depends on the data, which "
                           f"cannot be traced; keep the shape with np.where(cond, x, fill)")
    return refuse


for _f in (np.nonzero, np.argwhere, np.flatnonzero, np.unique, np.extract, np.compress):
    FUNCTIONS[_f] = _data_dependent(f"np.{_f.__name__}")


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


def _tracer_array_ufunc(self, ufunc, method, *inputs, **kwargs):
    return array_ufunc(ufunc, method, inputs, kwargs)


def _tracer_array_function(self, func, types, args, kwargs):
    return array_function(func, args, kwargs)


Tracer.__array_ufunc__ = _tracer_array_ufunc
Tracer.__array_function__ = _tracer_array_function
Tracer.__setitem__ = setitem


# ---- methods and operators on Tracer ----------------------------------------------------------
def _method(name, impl):
    setattr(Tracer, name, impl)


def _binary(ufunc):
    def forward(self, other):
        if isinstance(other, MaskedSelection):
            return NotImplemented            # its reflected operator: the masked elements
        return call_ufunc(ufunc, (self, other), _operator=True)

    def reflected(self, other):
        if isinstance(other, MaskedSelection):
            return NotImplemented
        return call_ufunc(ufunc, (other, self), _operator=True)

    def inplace(self, other):
        if self.scalar or self.weak is not None:
            return call_ufunc(ufunc, (self, other), _operator=True)
        return call_ufunc(ufunc, (self, other), out=(self,))
    return forward, reflected, inplace


for _name, _uf in [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("truediv", np.true_divide), ("floordiv", np.floor_divide),
                   ("mod", np.remainder), ("pow", np.power), ("and", np.bitwise_and),
                   ("or", np.bitwise_or), ("xor", np.bitwise_xor), ("lshift", np.left_shift),
                   ("rshift", np.right_shift)]:
    _f, _r, _i = _binary(_uf)
    _method(f"__{_name}__", _f)
    _method(f"__r{_name}__", _r)
    _method(f"__i{_name}__", _i)

for _name, _uf in [("lt", np.less), ("le", np.less_equal), ("gt", np.greater),
                   ("ge", np.greater_equal)]:
    _method(f"__{_name}__", _binary(_uf)[0])


def _equality(ufunc, same: bool):
    compare = _binary(ufunc)[0]

    def method(self, other):
        if isinstance(other, (str, bytes)) or other is None:
            # `pad == "same"`, `x != None`: a Python scalar compares as Python does, an array
            # elementwise as NumPy 2 does (never equal)
            if self.weak is not None or self.scalar:
                return not same
            return wrap(ops.broadcast_to(current_graph(), ops.literal(current_graph(), not same,
                                                                      np.bool_), self.shape),
                        scalar=False)
        return compare(self, other)
    return method


_method("__eq__", _equality(np.equal, True))
_method("__ne__", _equality(np.not_equal, False))


def _divmod(self, other):
    return (self // other, self % other)


def _rdivmod(self, other):
    return (other // self, other % self)


_method("__divmod__", _divmod)
_method("__rdivmod__", _rdivmod)
_method("__neg__", lambda self: call_ufunc(np.negative, (self,), _operator=True)
        if self.weak is None else _weak_unary(np.negative, self))
_method("__pos__", lambda self: self if self.weak is not None else call_ufunc(np.positive, (self,)))
_method("__abs__", lambda self: call_ufunc(np.absolute, (self,)) if self.weak is None
        else _weak_unary(np.absolute, self))
_method("__invert__", lambda self: call_ufunc(np.invert, (self,)))
_method("__matmul__", lambda self, other: matmul(self, other))
_method("__rmatmul__", lambda self, other: matmul(other, self))
_method("__getitem__", getitem)


def _weak_unary(ufunc, t):
    r = call_ufunc(ufunc, (t,), _operator=True)
    r.weak = float if t.weak is complex and ufunc is np.absolute else t.weak
    return r




_method("astype", astype)


builtins_type = builtins.type


def view(self, dtype=None, type=None):
    """ndarray.view: the same values (a plain ndarray type), or their bits as `dtype`."""
    if type is not None and type is not np.ndarray:
        raise TracingError(f"x.view(type={getattr(type, '__name__', type)}) inside a traced "
                           f"function: only plain ndarrays are traced")
    if dtype is None or (isinstance(dtype, builtins_type) and issubclass(dtype, np.ndarray)):
        return self
    dt = ops.check_dtype(dtype, "x.view(dtype)")
    return wrap(ops.bitcast(current_graph(), node_of(self), dt), scalar=self.scalar)


class FlatIter:
    """x.flat while tracing: indexing in C order (ints, slices, index arrays), reading and
    writing."""

    def __init__(self, base: Tracer):
        self.base = base

    def __getitem__(self, key):
        if self.base.ndim == 1:
            return self.base[key]
        return ravel(self.base)[key]

    def __setitem__(self, key, value):
        if is_tracer(key):
            raise TracingError("x.flat[traced index] = v is not supported by fastlaunch; "
                               "use x.reshape(-1) on a copy, or np.put")
        idx = np.arange(self.base.size)[key]
        if np.ndim(idx) == 0:
            self.base[np.unravel_index(int(idx), self.base.shape)] = value
        else:
            self.base[np.unravel_index(idx, self.base.shape)] = value

    def __len__(self):
        return self.base.size

    def __iter__(self):
        flat = ravel(self.base)
        return (flat[i] for i in range(self.base.size))


def _imag(self):
    """The imaginary part: of a real array, zeros, read-only (as NumPy's); of a complex one,
    its values (NumPy's writeable view is read here; `x.imag = v` assigns)."""
    g = current_graph()
    n = node_of(self)
    if n.dtype.kind == "c":
        return _part(self, complexops.imag(g, n), "imag")
    return Tracer(Storage(ops.broadcast_to(g, ops.literal(g, 0, n.dtype), n.shape),
                          frozen_reason="x.imag of a real array is read-only"),
                  scalar=self.scalar)


def _build_complex(cls, re, im) -> Tracer:
    """A complex scalar argument from the tracers of its two parts (pytree.py): weak for a
    Python complex (NEP 50), complex64/complex128 for NumPy's scalars."""
    g = current_graph()
    dt = np.dtype(np.complex64 if cls is np.complex64 else np.complex128)
    return wrap(complexops.make(g, node_of(re), node_of(im), dt),
                weak=complex if cls is complex else None, scalar=True)


pytree.COMPLEX_BUILDERS.append(_build_complex)


def _real(self):
    n = node_of(self)
    if n.dtype.kind == "c":
        return _part(self, complexops.real(current_graph(), n), "real")
    return self


def _part(self, node, name):
    # A copy of the part, refusing writes: writing into it would not reach x (in NumPy it
    # is a view of x's memory), so that is an error rather than a silently lost write
    t = Tracer(Storage(node, frozen_reason=f"x.{name} of a complex array is read by "
                       f"fastlaunch, not written through: assign the whole part "
                       f"(x.{name} = v) or write x[...] = ... instead"),
               scalar=self.scalar)
    if self.weak is complex:          # a Python complex's parts are Python floats
        t.weak = float
    return t


def _set_part(self, value, name):
    g = current_graph()
    n = node_of(self)
    if n.dtype.kind != "c":
        if name == "imag":
            raise TypeError("array does not have imaginary part to set")
        setitem(self, Ellipsis, value)
        return
    v = ops.broadcast_to(g, ops.cast(g, node_of(value), complexops.part_dtype(n.dtype)), n.shape)
    re, im = (v, complexops.imag(g, n)) if name == "real" else (complexops.real(g, n), v)
    setitem(self, Ellipsis, wrap(complexops.make(g, re, im, n.dtype)))


@implements(np.real)
def real_(val):
    return _real(_as_tracer(val))


@implements(np.imag)
def imag_(val):
    return _imag(_as_tracer(val))


@implements(np.angle)
def angle(z, deg=False):
    """np.angle: arctan2(imag, real) (of a real array: arctan2(0, x)), in degrees with deg."""
    t = _as_tracer(z)
    if t.dtype.kind == "c":
        a = np.arctan2(_imag(t), _real(t))
    else:
        a = np.arctan2(0, t)
    if deg:
        a = a * (180 / np.pi)
    a.scalar = a.ndim == 0 and t.scalar
    return a


@implements(np.iscomplexobj)
def iscomplexobj(x):
    return _as_tracer(x).dtype.kind == "c"


@implements(np.isrealobj)
def isrealobj(x):
    return _as_tracer(x).dtype.kind != "c"


@implements(np.iscomplex)
def iscomplex(x):
    t = _as_tracer(x)
    if t.dtype.kind != "c":
        return wrap(ops.broadcast_to(current_graph(), ops.literal(current_graph(), False, np.bool_),
                                     t.shape), scalar=t.scalar)
    return _imag(t) != 0


@implements(np.isreal)
def isreal(x):
    t = _as_tracer(x)
    if t.dtype.kind != "c":
        return wrap(ops.broadcast_to(current_graph(), ops.literal(current_graph(), True, np.bool_),
                                     t.shape), scalar=t.scalar)
    return _imag(t) == 0


Tracer.flat = property(lambda self: FlatIter(self))
Tracer.imag = property(_imag, lambda self, v: _set_part(self, v, "imag"))
_method("view", view)
_method("conj", lambda self: call_ufunc(np.conjugate, (self,)) if self.dtype.kind == "c" else self)
_method("conjugate", lambda self: call_ufunc(np.conjugate, (self,)) if self.dtype.kind == "c"
        else self)


def _tracer_getattr(self, name):
    """An ndarray method without a method of its own here: the NumPy function of that name
    when fastlaunch traces it (x.repeat -> np.repeat); else an AttributeError that says so."""
    if not name.startswith("_") and hasattr(np.ndarray, name):
        func = getattr(np, name, None)
        impl = FUNCTIONS.get(func) if func is not None else None
        if impl is not None:
            return lambda *args, **kwargs: impl(self, *args, **kwargs)
        library, where = naming.converting_function(sys._getframe(1))
        by = f" (read by {library}, called at {where})" if library else ""
        raise AttributeError(f"x.{name} (ndarray.{name}) is not supported by fastlaunch "
                             f"yet{by}")
    raise AttributeError(f"'Tracer' object has no attribute {name!r}")


Tracer.__getattr__ = _tracer_getattr
_method("copy", lambda self, order="C": copy(self))
_method("reshape", lambda self, *shape, order="C", copy=None: reshape(self, *shape, order=order))
_method("ravel", lambda self, order="C": ravel(self, order))
_method("flatten", flatten)
_method("transpose", lambda self, *axes: transpose(
    self, axes[0] if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)) else (axes or None)))
_method("swapaxes", swapaxes)
_method("squeeze", squeeze)
Tracer.T = property(lambda self: transpose(self))
Tracer.mT = property(lambda self: swapaxes(self, -1, -2))
Tracer.real = property(_real, lambda self, v: _set_part(self, v, "real"))
for _name, _impl in [("sum", sum_), ("prod", prod_), ("max", max_), ("min", min_), ("any", any_),
                     ("all", all_), ("argmax", argmax), ("argmin", argmin), ("mean", mean),
                     ("var", var), ("std", std), ("clip", clip)]:
    _method(_name, _impl)
_method("round", lambda self, decimals=0, out=None: round_(self, decimals, out))


def _set_shape(self, value):
    """`x.shape = s`: x itself becomes the reshaped view (NumPy's in-place reshape), where
    NumPy can do that without a copy; otherwise NumPy's AttributeError."""
    view = self._view
    whole = self._reshape is None and (view is None or view.is_identity)
    if whole and self._storage.position is not None:
        raise TracingError(
            "assigning x.shape of an argument array changes the caller's array object, "
            "which fastlaunch cannot replay; use x = x.reshape(shape) inside the function")
    r = reshape(self, value)
    if not whole and r._reshape is not None:
        raise AttributeError("Incompatible shape for in-place modification. Use "
                             "`.reshape()` to make a copy with the desired shape.")
    self._storage, self._view, self._reshape, self._post = \
        r._storage, r._view, r._reshape, r._post
    self._node, self._version = None, -1
    self.scalar = r.scalar


Tracer.shape = property(Tracer.shape.fget, _set_shape, doc="the array's shape (settable)")
_method("fill", lambda self, value: setitem(self, Ellipsis, value))


_PY_SCALAR = {"f": (float, np.float64), "i": (int, np.int64), "u": (int, np.int64),
              "b": (None, np.bool_)}


def _item(self, *args):
    """x.item(): the Python number NumPy returns, as a traced weak scalar (NEP 50: a Python
    float times a float32 array stays float32); an `if` on it still needs its value."""
    if len(args) == 1 and isinstance(args[0], tuple):
        args = args[0]
    if len(args) == 1:
        t = getitem(reshape(self, (-1,)), args[0])
    elif args:
        t = getitem(self, tuple(args))
    else:
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        t = reshape(self, ())
    kind = _PY_SCALAR.get(t.dtype.kind)
    if kind is None or t.ndim:
        return _TRACER_ITEM(t)           # trace.py's error: the value is needed
    weak, dtype = kind
    return wrap(ops.cast(current_graph(), t.node, dtype), weak=weak, scalar=True)


def _tolist(self):
    """x.tolist(): nested lists of traced Python numbers (x.item() of each element)."""
    if self.ndim == 0:
        return _item(self)
    if self.size > _TOLIST_ELEMENTS or self.dtype.kind not in _PY_SCALAR:
        return _TRACER_TOLIST(self)
    return [_tolist(getitem(self, i)) for i in range(self.shape[0])]


_TOLIST_ELEMENTS = 4096
_TRACER_ITEM, _TRACER_TOLIST = Tracer.item, Tracer.tolist
_method("item", _item)
_method("tolist", _tolist)
_method("nonzero", lambda self: _data_dependent("x.nonzero()")())
_method("dot", lambda self, other, out=None: dot(self, other, out))
_method("cumsum", lambda self, axis=None, dtype=None, out=None: cumsum(self, axis, dtype, out))
_method("cumprod", lambda self, axis=None, dtype=None, out=None: cumprod(self, axis, dtype, out))
_method("sort", _sort_inplace)
_method("diagonal", lambda self, offset=0, axis1=0, axis2=1: diagonal(self, offset, axis1, axis2))
_method("trace", lambda self, offset=0, axis1=0, axis2=1, dtype=None, out=None:
        trace_(self, offset, axis1, axis2, dtype, out))
_method("partition", _partition_inplace)
_method("argsort", lambda self, axis=-1, kind=None, order=None, *, stable=None:
        argsort(self, axis, kind, order, stable=stable))
_method("argpartition", lambda self, kth, axis=-1, kind="introselect", order=None:
        argpartition(self, kth, axis, kind, order))
_method("searchsorted", lambda self, v, side="left", sorter=None:
        searchsorted(self, v, side, sorter))
_method("take", lambda self, indices, axis=None, out=None, mode="raise":
        take(self, indices, axis, out, mode))


def _traceable(func) -> bool:
    """Whether a call of `func` on tracers is recorded (error messages suggest only these)."""
    if isinstance(func, np.ufunc):
        return func is np.matmul or func in ops.OP_OF_UFUNC or func in ops._UFUNC_AS
    return func in FUNCTIONS


naming.set_supported(_traceable)
