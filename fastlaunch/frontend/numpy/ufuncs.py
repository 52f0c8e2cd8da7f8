"""Ufuncs and their methods (`reduce`, `accumulate`, `at`, `outer`, `reduceat`), `out=`/`where=`,
and the elementwise functions composed of them: `where`, `clip`, rounding, `nan_to_num`, casts,
complex parts, closeness tests, `isin`, `select`/`piecewise`, `sinc`/`i0`."""
from __future__ import annotations

import operator
import warnings

import numpy as np

from .. import pytree, special
from ... import naming
from ...errors import TracingError
from ...ir import complexops, ops
from ...ir.graph import Node, Op
from ..trace import Storage, Tracer, current_graph
from .registry import UFUNC_METHODS, implements


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
    """A complex scalar argument from the tracers of its two parts (frontend/pytree.py): weak for a
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
    acc = full_like(moved[:len(idx)], identity)
    used = seg >= 0
    ufunc.at(acc, seg[used], moved[np.flatnonzero(used)])
    if single.any():
        acc = where(reshape(np.asarray(single), (-1,) + (1,) * (t.ndim - 1)),
                    moved[idx], acc)
    return _moveaxis(acc, 0, ax)


UFUNC_METHODS["reduceat"] = ufunc_reduceat


# called, not used while this module is imported: imported after its own definitions,
# since the families call each other (see the package's __init__)
from .common import (  # noqa: E402
    _as_tracer, _axis, _dtype_of, _ew, _lit, _moveaxis, _shape_of, _weak_or_array, scalar_assigned)
from .creation import array, full_like  # noqa: E402
from .indexing import WhereIndices, _scatter_into, getitem, setitem  # noqa: E402
from .reductions import _no_extra, _reduce, any_, sum_  # noqa: E402
from .registry import _python_result_type, is_tracer, node_of, operand, wrap  # noqa: E402
from .shaping import concatenate, ravel, reshape  # noqa: E402
from .trace_buffers import _any_traced  # noqa: E402
