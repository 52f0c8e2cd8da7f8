"""Graph building with NumPy's semantics: dtype resolution, broadcasting, views, reductions.

Every function takes nodes and returns a node.  Dtypes are NumPy's own: ufunc loops come from
`ufunc.resolve_dtypes`, where a Python scalar type marks a NEP 50 weak operand.  Operations on
literals only are folded by running NumPy on them.
"""
from __future__ import annotations

import math
import operator
from functools import reduce as _fold

import numpy as np

from .. import naming
from ..errors import TracingError
from .graph import FIRST_CHECK_BIT, LAST_CHECK_BIT, MAX_INTP, SUPPORTED_DTYPES, Graph, Kind, Node
from .graph import Op

# The NumPy ufunc each elementwise op means.  Ops absent here are built from these.
UFUNC_OF_OP = {
    Op.NEG: np.negative, Op.ABS: np.absolute, Op.SIGN: np.sign, Op.RECIPROCAL: np.reciprocal,
    Op.SQRT: np.sqrt, Op.CBRT: np.cbrt, Op.EXP: np.exp, Op.EXP2: np.exp2, Op.EXPM1: np.expm1,
    Op.LOG: np.log, Op.LOG2: np.log2, Op.LOG10: np.log10, Op.LOG1P: np.log1p,
    Op.SIN: np.sin, Op.COS: np.cos, Op.TAN: np.tan, Op.ARCSIN: np.arcsin, Op.ARCCOS: np.arccos,
    Op.ARCTAN: np.arctan, Op.SINH: np.sinh, Op.COSH: np.cosh, Op.TANH: np.tanh,
    Op.ARCSINH: np.arcsinh, Op.ARCCOSH: np.arccosh, Op.ARCTANH: np.arctanh,
    Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.TRUNC: np.trunc, Op.RINT: np.rint,
    Op.ISNAN: np.isnan, Op.ISINF: np.isinf, Op.ISFINITE: np.isfinite, Op.SIGNBIT: np.signbit,
    Op.LOGICAL_NOT: np.logical_not, Op.INVERT: np.invert,
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.true_divide,
    Op.FLOORDIV: np.floor_divide, Op.MOD: np.remainder, Op.FMOD: np.fmod, Op.POW: np.power,
    Op.ARCTAN2: np.arctan2, Op.HYPOT: np.hypot, Op.MINIMUM: np.minimum, Op.MAXIMUM: np.maximum,
    Op.FMIN: np.fmin, Op.FMAX: np.fmax, Op.COPYSIGN: np.copysign, Op.NEXTAFTER: np.nextafter,
    Op.HEAVISIDE: np.heaviside, Op.LOGADDEXP: np.logaddexp, Op.LOGADDEXP2: np.logaddexp2,
    Op.EQ: np.equal, Op.NE: np.not_equal, Op.LT: np.less, Op.LE: np.less_equal,
    Op.GT: np.greater, Op.GE: np.greater_equal,
    Op.LOGICAL_AND: np.logical_and, Op.LOGICAL_OR: np.logical_or, Op.LOGICAL_XOR: np.logical_xor,
    Op.BITWISE_AND: np.bitwise_and, Op.BITWISE_OR: np.bitwise_or, Op.BITWISE_XOR: np.bitwise_xor,
    Op.LEFT_SHIFT: np.left_shift, Op.RIGHT_SHIFT: np.right_shift,
}
OP_OF_UFUNC = {u: op for op, u in UFUNC_OF_OP.items()}

_WEAK_TYPES = (bool, int, float, complex)

# Complex values are pairs of real ones: ir/complexops.py (imported with the traced NumPy
# surface) registers here how casts, elementwise ops, reductions, scans, contractions and
# scatters of complex dtypes are composed of real ops.  Keys: "cast", "elementwise",
# "reduce", "scan", "contract", "scatter".
COMPLEX: dict = {}


def check_dtype(dtype, what: str) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in SUPPORTED_DTYPES:
        raise TypeError(f"{what}: dtype {dt} is not supported "
                        f"(supported: {', '.join(str(d) for d in SUPPORTED_DTYPES)})")
    return dt


# ---- leaves ------------------------------------------------------------------------------
# NumPy's own functions, bound once: while a thread traces, np's attributes are looked up
# through frontend/interception.py (a call each) and np.array is frontend/numpy/trace_buffers.py's entry point
_array = np.array
_dtype = np.dtype
_can_cast = np.can_cast


def literal(g: Graph, value, dtype) -> Node:
    dt = dtype if isinstance(dtype, _dtype) else _dtype(dtype)
    return g.add(Op.LITERAL, dt, (), value=_array(value, dtype=dt)[()])


def literal_value(n: Node):
    """The value of a literal, also through broadcasts of one; None when `n` is not constant."""
    while n.op is Op.BROADCAST:
        n = n.inputs[0]
    return n.attrs["value"] if n.op is Op.LITERAL else None


def weak_literal(g: Graph, value) -> tuple[Node, type]:
    """A Python scalar written in the traced code: a NEP 50 weak literal.  (A Python bool is
    NumPy's bool: the lowest kind, so it never needs to be weak.)"""
    kind = type(value) if type(value) in _WEAK_TYPES else None
    if kind is None:
        raise TypeError(f"unsupported Python scalar {value!r} of type {type(value).__name__}")
    if kind is bool:
        return literal(g, value, np.bool_), None
    dtype = {bool: np.bool_, int: np.int64, float: np.float64, complex: np.complex128}[kind]
    if kind is int and not (-2**63 <= value < 2**64):
        raise OverflowError(f"Python integer {value} out of bounds for int64 and uint64")
    if kind is int and value >= 2**63:
        dtype = np.uint64
    return literal(g, value, dtype), kind


# ---- casts and broadcasting --------------------------------------------------------------
def bitcast(g: Graph, n: Node, dtype) -> Node:
    """n's bits as `dtype`, of the same itemsize (bool excluded: its bits are not a number)."""
    dt = np.dtype(dtype)
    if dt == n.dtype:
        return n
    if dt.itemsize != n.dtype.itemsize or "b" in (dt.kind, n.dtype.kind):
        raise ValueError(f"x.view({dt}) of a {n.dtype} array: fastlaunch reinterprets only "
                         f"between number dtypes of the same size")
    return g.add(Op.BITCAST, dt, n.shape, [n])


def cast(g: Graph, n: Node, dtype, weak: type | None = None, wraps: bool = False) -> Node:
    """n as dtype.  A weak Python int must fit the dtype (NumPy raises OverflowError: literals
    are checked here, parameters at every call), unless `wraps` (np.where casts unsafely)."""
    dt = dtype if isinstance(dtype, _dtype) else _dtype(dtype)
    if n.dtype == dt:
        return n
    if "c" in (dt.kind, n.dtype.kind):
        return COMPLEX["cast"](g, n, dt)
    if weak is int and n.op is Op.PARAM and n.dtype == np.uint64 and dt.kind in "iu" \
            and not wraps:
        # a Python int argument of at least 2**63 meets a narrower integer array
        raise OverflowError(f"Python integer argument out of bounds for {dt}")
    value = literal_value(n)
    if value is not None:
        if weak is int and dt.kind in "iu":
            info = np.iinfo(dt)
            if not info.min <= int(value) <= info.max:
                raise OverflowError(f"Python integer {int(value)} out of bounds for {dt}")
        if _can_cast(value.dtype, dt):      # (no floating-point error to silence)
            folded = literal(g, value.astype(dt), dt)
        else:
            with np.errstate(all="ignore"):
                folded = literal(g, value.astype(dt), dt)
        return broadcast_to(g, folded, n.shape)
    if n.op is Op.BROADCAST:  # cast the 0-d or small source, not the broadcast view
        return broadcast_to(g, cast(g, n.inputs[0], dt, weak, wraps), n.shape)
    if wraps and n.op is Op.PARAM and dt.kind in "iu":
        return g.add(Op.CAST, dt, n.shape, (n,), wraps=True)
    return g.add(Op.CAST, dt, n.shape, (n,))


def broadcast_shapes(*shapes) -> tuple:
    """NumPy's broadcasting of shapes, in exact integers; a result of more elements than NumPy
    can iterate is NumPy's "iterator is too large" (what a ufunc or np.broadcast_to raises)."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(s, ndim - len(s)):
            if d != 1 and out[i] not in (1, d):
                raise ValueError("operands could not be broadcast together with shapes "
                                 + " ".join(str(t) for t in shapes))
            if d != 1:
                out[i] = d
    if any(d > MAX_INTP for d in out):
        raise ValueError("Maximum allowed dimension exceeded")
    if math.prod(out) > MAX_INTP:
        raise ValueError("iterator is too large")
    return tuple(out)


def broadcast_to(g: Graph, n: Node, shape) -> Node:
    if n.shape == shape:        # a node's own shape (a tuple of ints): nothing to do
        return n
    shape = tuple(int(s) for s in shape)
    if n.shape == shape:
        return n
    if broadcast_shapes(n.shape, shape) != shape:
        raise ValueError(f"cannot broadcast a value of shape {n.shape} to {shape}")
    if n.op is Op.BROADCAST and n.inputs[0].ndim == 0:
        n = n.inputs[0]
    return g.add(Op.BROADCAST, n.dtype, shape, (n,))


# ---- elementwise -------------------------------------------------------------------------
def resolve_loop(ufunc, types) -> tuple:
    """NumPy's loop for `ufunc` on operand `types` (dtypes, or Python types for weak scalars)."""
    try:
        return ufunc.resolve_dtypes(tuple(types) + (None,) * ufunc.nout)
    except Exception as err:  # NumPy raises private _UFuncNoLoopError (a TypeError) and friends
        shown = ", ".join(t.__name__ if isinstance(t, type) else str(t) for t in types)
        raise TypeError(f"ufunc '{ufunc.__name__}' not supported for the input types ({shown}): "
                        f"{err}") from None


# integer ops that can leave the 64-bit range when they stand for Python-int arithmetic
CHECKABLE = {Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.ABS, Op.FLOORDIV, Op.POW, Op.LEFT_SHIFT}


def elementwise(g: Graph, op: Op, loop_out, operands: list[Node], checked: bool = False) -> Node:
    """`op` over operands already cast to the loop dtypes; broadcasting made explicit.
    checked: Python-int arithmetic, exact or an OverflowError (never a wrapped value)."""
    shapes = {o.shape for o in operands if o.shape}
    if len(shapes) == 1:
        # one shape besides scalars' (the common case): nodes' shapes are checked already
        shape = shapes.pop()
    else:
        shape = broadcast_shapes(*(o.shape for o in operands))
    operands = [o if not o.shape else broadcast_to(g, o, shape) for o in operands]
    values = [literal_value(o) for o in operands]
    if operands and None not in values:
        if checked:
            exact = _python_int_op(op, [int(v) for v in values])
            if not -2**63 <= exact < 2**63:
                raise OverflowError(f"Python integer {exact} does not fit in 64 bits")
        return broadcast_to(g, literal(g, _fold_elementwise(op, values, loop_out), loop_out), shape)
    if _dtype(loop_out).kind == "c" or "c" in [o.dtype.kind for o in operands]:
        return COMPLEX["elementwise"](g, op, np.dtype(loop_out), operands)
    if checked and op in CHECKABLE:
        return g.add(op, loop_out, shape, operands, checked=True)
    return g.add(op, loop_out, shape, operands)


def _python_int_op(op: Op, v: list) -> int:
    return {Op.ADD: lambda: v[0] + v[1], Op.SUB: lambda: v[0] - v[1],
            Op.MUL: lambda: v[0] * v[1], Op.NEG: lambda: -v[0], Op.ABS: lambda: abs(v[0]),
            Op.FLOORDIV: lambda: v[0] // v[1] if v[1] else 0,
            Op.POW: lambda: v[0] ** v[1] if v[1] >= 0 else 0,
            Op.LEFT_SHIFT: lambda: v[0] << v[1] if 0 <= v[1] < 64 else 0,
            }.get(op, lambda: 0)()


def _lgamma(x: float) -> float:
    try:
        return math.lgamma(x)
    except ValueError:            # a pole (0, -1, -2, ...): C's lgamma gives +inf
        return math.inf


# ops without a NumPy ufunc (special functions): folded with Python's math module
_SCALAR_FOLD = {Op.ERF: math.erf, Op.ERFC: math.erfc, Op.LGAMMA: _lgamma}


def _fold_elementwise(op: Op, values, out_dtype):
    with np.errstate(all="ignore"):
        if op is Op.WHERE:
            return values[1] if values[0] else values[2]
        if op in _SCALAR_FOLD:
            x = float(values[0])
            return np.asarray(x if math.isnan(x) else _SCALAR_FOLD[op](x)).astype(out_dtype)[()]
        return np.asarray(UFUNC_OF_OP[op](*values)).astype(out_dtype)[()]


def _scaled(factor):
    def scaled(g, dt, x):
        if dt == np.float16:    # NumPy's half loop scales in float32 and rounds once
            f32 = np.dtype(np.float32)
            wide = elementwise(g, Op.MUL, f32, [cast(g, x, f32), literal(g, factor, f32)])
            return cast(g, wide, dt)
        return elementwise(g, Op.MUL, dt, [x, literal(g, factor, dt)])
    return scaled


# ufuncs that are another op on their loop dtypes (NumPy computes them the same way)
_UFUNC_AS = {
    np.square: lambda g, dt, x: elementwise(g, Op.MUL, dt, [x, x]),
    np.positive: lambda g, dt, x: x,
    np.conjugate: lambda g, dt, x: COMPLEX["conj"](g, x) if dt.kind == "c" else x,
    np.fabs: lambda g, dt, x: elementwise(g, Op.ABS, dt, [x]),
    np.float_power: lambda g, dt, x, y: elementwise(g, Op.POW, dt, [x, y]),
    np.deg2rad: _scaled(np.pi / 180.0),
    np.radians: _scaled(np.pi / 180.0),
    np.rad2deg: _scaled(180.0 / np.pi),
    np.degrees: _scaled(180.0 / np.pi),
}


# Finders for ufuncs of other libraries (scipy.special: frontend/special.py): each takes a ufunc and
# returns (op, None), (None, rewrite) or None; registered at import, consulted on a miss.
UFUNC_FINDERS: list = []


def _found_ufunc(ufunc) -> tuple:
    for find in UFUNC_FINDERS:
        found = find(ufunc)
        if found is not None:
            return found
    return None, None


_COMPARISONS = {Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE}


def _compare_out_of_range(g: Graph, op: Op, operands, loop):
    """NumPy 2 compares an integer array with a Python int outside its dtype exactly: the
    answer is then the same for every element."""
    for side, (n, w) in enumerate(operands):
        value = literal_value(n)
        other = operands[1 - side][0]
        if w is not int or value is None or loop[side].kind not in "iu":
            continue
        info = np.iinfo(loop[side])
        v = int(value)
        if info.min <= v <= info.max:
            continue
        above = v > info.max              # the literal is above (or below) every element
        literal_is_left = side == 0
        result = {Op.EQ: False, Op.NE: True,
                  Op.LT: above != literal_is_left, Op.LE: above != literal_is_left,
                  Op.GT: above == literal_is_left, Op.GE: above == literal_is_left}[op]
        return broadcast_to(g, literal(g, result, np.bool_), other.shape)
    return None


def _wide_compare_loop(operands, loop):
    """A Python int argument compared with a narrower integer array: compare in 64 bits, so
    that any value compares exactly (NumPy 2), instead of casting it down per call."""
    if loop[0].kind not in "iu" or not any(w is int and n.op is Op.PARAM for n, w in operands):
        return loop
    wide = [np.dtype(np.uint64) if n.dtype == np.uint64 else np.dtype(np.int64)
            for n, _ in operands]
    return tuple(wide) + tuple(loop[len(operands):])


# (ufunc, operand types) -> its loop's dtypes, resolved and found supported before
_LOOPS: dict = {}


def apply_ufunc(g: Graph, ufunc, operands: list[tuple[Node, type | None]],
                python_ints: bool = False) -> Node:
    """`ufunc(*operands)` with NumPy's dtype resolution; operands are (node, weak python type).
    python_ints: the operands are all Python ints combined by a Python operator, whose result
    is an exact Python int: computed in int64, an OverflowError at run time where it leaves
    that range (NumPy would keep the exact value; a kernel cannot)."""
    if python_ints and any(n.dtype == np.uint64 for n, _ in operands):
        raise TracingError(
            f"exact Python integer arithmetic ({ufunc.__name__}) on a value of at least 2**63 "
            f"(an int argument or literal): fastlaunch computes Python ints in 64 bits. Make "
            f"the argument static (static_argnames=) so that it is computed while tracing")
    op = OP_OF_UFUNC.get(ufunc)
    rewrite = _UFUNC_AS.get(ufunc)
    if op is None and rewrite is None:
        op, rewrite = _found_ufunc(ufunc)
    if op is None and rewrite is None:
        raise TracingError(naming.unsupported(ufunc))
    if None not in [w for _, w in operands]:
        # only Python scalars: NumPy makes them int64/float64 arrays first
        types = [n.dtype for n, _ in operands]
    else:
        types = [w if w is not None else n.dtype for n, w in operands]
    loop = _LOOPS.get((ufunc, tuple(types)))
    if loop is None:
        loop = resolve_loop(ufunc, types)
        for dt in loop:
            check_dtype(dt, f"np.{ufunc.__name__}")
        if len(_LOOPS) < 4096:
            _LOOPS[(ufunc, tuple(types))] = loop
    nin = len(operands)
    if op in _COMPARISONS:
        exact = _compare_out_of_range(g, op, operands, loop)
        if exact is not None:
            return exact
        loop = _wide_compare_loop(operands, loop)
    cast_in = [cast(g, n, dt, w) for (n, w), dt in zip(operands, loop[:nin])]
    if op is Op.POW and loop[nin].kind == "i" and not python_ints:
        # NumPy's integer power loops refuse a negative exponent (the result is no integer)
        add_check(g, elementwise(g, Op.GE, np.bool_, [cast_in[1], literal(g, 0, loop[1])]),
                  ValueError, "Integers to negative integer powers are not allowed.")
    if op is Op.POW and loop[nin] in (np.float32, np.float64) and cast_in[1].size == 1:
        # NumPy's float32/64 power loop computes a scalar (stride-0) exponent of -1, 0, 0.5,
        # 1 or 2 as 1/x, 1, sqrt(x), x and x*x, not with pow: faster, and not always pow's
        # bits (pow(x, 2) and x*x differ in the last place for some x; sqrt differs from pow
        # at -inf and -0.0); an exponent array of several elements is pow's throughout
        x, e = cast_in
        return _scalar_power(g, x, e, loop[nin])
    if rewrite is not None:
        shape = broadcast_shapes(*(o.shape for o in cast_in))
        cast_in = [o if o.ndim == 0 else broadcast_to(g, o, shape) for o in cast_in]
        return broadcast_to(g, cast(g, rewrite(g, loop[nin], *cast_in), loop[nin]), shape)
    return elementwise(g, op, loop[nin], cast_in, checked=python_ints)


def _scalar_power(g: Graph, x: Node, e: Node, dt) -> Node:
    """x ** e for a one-element float exponent, as NumPy's float power loop computes it."""
    shape = broadcast_shapes(x.shape, e.shape)
    x = broadcast_to(g, x, shape)
    fast = {-1.0: lambda: elementwise(g, Op.DIV, dt, [literal(g, 1.0, dt), x]),
            0.0: lambda: broadcast_to(g, literal(g, 1.0, dt), shape),
            0.5: lambda: elementwise(g, Op.SQRT, dt, [x]),
            1.0: lambda: x,
            2.0: lambda: elementwise(g, Op.MUL, dt, [x, x])}
    value = literal_value(e)
    if value is not None:
        make = fast.get(float(value))
        return make() if make is not None else elementwise(g, Op.POW, dt, [x, e])
    out = elementwise(g, Op.POW, dt, [x, e])      # a traced exponent: NumPy's choice, made
    for v, make in fast.items():                  # when the function runs
        hit = elementwise(g, Op.EQ, np.bool_, [e, literal(g, v, e.dtype)])
        out = elementwise(g, Op.WHERE, dt, [hit, make(), out])
    return out


def result_type(operands: list[tuple[Node, type | None]]) -> np.dtype:
    """np.result_type with weak Python scalars represented by a zero of their type."""
    return np.result_type(*(w(0) if w is not None else n.dtype for n, w in operands))


def where(g: Graph, cond: tuple, a: tuple, b: tuple) -> Node:
    dt = check_dtype(result_type([a, b]), "np.where")
    c = cast(g, cond[0], np.bool_)
    an, bn = cast(g, a[0], dt, wraps=True), cast(g, b[0], dt, wraps=True)   # unsafe, as NumPy
    return elementwise(g, Op.WHERE, dt, [c, an, bn])


# ---- runtime checks ----------------------------------------------------------------------------
def add_check(g: Graph, cond: Node, exc: type, message: str) -> None:
    """Record that every element of `cond` must be true when the function runs; if one is
    not, the call raises exc(message) and writes no argument.  A condition already known true
    costs nothing; one known false raises now, as NumPy would."""
    c = cast(g, cond, np.bool_)
    if c.size == 0:
        return
    value = literal_value(c) if c.ndim == 0 else None
    if c.ndim and c.op is Op.BROADCAST:
        value = literal_value(c.inputs[0]) if c.inputs[0].ndim == 0 else None
    if value is not None:
        if not bool(value):
            raise exc(message)
        return
    g.checks.append((c, exc, message))


def seal_checks(g: Graph) -> None:
    """The graph's checks as one CHECK node (Graph.check): per distinct (exception, message),
    one status bit, set when any of its conditions fails.  Checks beyond the bits available
    share the last one, with a message naming all of them."""
    if not g.checks or g.check is not None:
        return
    groups: dict = {}
    for c, exc, message in g.checks:
        groups.setdefault((exc, message), []).append(c)
    nbits = LAST_CHECK_BIT.bit_length() - FIRST_CHECK_BIT.bit_length() + 1
    keys = list(groups)
    if len(keys) > nbits:
        rest = keys[nbits - 1:]
        shared = (rest[0][0] if len({k[0] for k in rest}) == 1 else RuntimeError,
                  "one of these checks failed: " + "; ".join(m for _, m in rest))
        merged = [c for k in rest for c in groups.pop(k)]
        keys = keys[:nbits - 1] + [shared]
        groups[shared] = merged
    i64 = np.dtype(np.int64)
    terms = []
    errors = []
    for i, key in enumerate(keys):
        bit = FIRST_CHECK_BIT << i
        oks = [reduce(g, Op.ALL, c, None, False) if c.ndim else c for c in groups[key]]
        ok = _balanced(g, Op.LOGICAL_AND, np.dtype(np.bool_), oks)
        terms.append(g.add(Op.WHERE, i64, (), [ok, literal(g, 0, i64), literal(g, bit, i64)]))
        errors.append((bit, key[0], key[1]))
    word = _balanced(g, Op.BITWISE_OR, i64, terms)
    g.check = g.add(Op.CHECK, i64, (), [word])
    g.check_errors = errors


def _balanced(g: Graph, op: Op, dtype, nodes: list) -> Node:
    """op over nodes as a balanced tree: thousands of checks (an assert in a long Python
    loop) stay a shallow expression."""
    while len(nodes) > 1:
        nodes = [g.add(op, dtype, (), [nodes[i], nodes[i + 1]]) if i + 1 < len(nodes)
                 else nodes[i] for i in range(0, len(nodes), 2)]
    return nodes[0]


RANDOM_DISTS = {"u64": np.uint64, "uniform": None, "normal": None}


def random(g: Graph, key: Node, dist: str, shape, dtype) -> Node:
    """A fresh draw of `dist` numbers of `shape` from the random `key` (0-d uint64): every
    call of this function is a new stream (a distinct node, never merged by CSE)."""
    if dist not in RANDOM_DISTS:
        raise ValueError(f"unknown random distribution {dist!r}")
    g.random_streams += 1
    return g.add(Op.RANDOM, dtype, tuple(int(d) for d in shape), [key], dist=dist,
                 stream=g.random_streams)


def rng_key(g: Graph) -> Node:
    """The call's random key: one per trace, set by the executable on every call."""
    return g.add(Op.RNG_KEY, np.uint64, ())


def iota(g: Graph, shape, axis: int, dtype) -> Node:
    """index along `axis` at every position of `shape`: the building block of arange and eye."""
    return g.add(Op.IOTA, dtype, shape, axis=axis)


# ---- views -------------------------------------------------------------------------------
def _scalar_source(n: Node):
    """The 0-d node that `n` merely broadcasts, if any: views of it stay broadcasts."""
    if n.ndim == 0:
        return n
    if n.op is Op.BROADCAST and n.inputs[0].ndim == 0:
        return n.inputs[0]
    return None


def transpose(g: Graph, n: Node, perm) -> Node:
    perm = tuple(int(p) % max(n.ndim, 1) for p in perm)
    if sorted(perm) != list(range(n.ndim)):
        raise ValueError(f"axes {perm} don't match array of {n.ndim} dimensions")
    if perm == tuple(range(n.ndim)):
        return n
    shape = tuple(n.shape[p] for p in perm)
    src = _scalar_source(n)
    if src is not None:
        return broadcast_to(g, src, shape)
    if n.op is Op.TRANSPOSE:  # compose
        inner = n.attrs["perm"]
        return transpose(g, n.inputs[0], tuple(inner[p] for p in perm))
    if n.op is Op.SETSLICE and n.inputs[0].op is Op.TRANSPOSE:
        # a region update of a transposed array, transposed (`sweep(sweep(q).T).T`): the
        # update of the array itself, over the transposed region.  The transposes cancel, so
        # the kernel stores and loads in memory order instead of writing a transposed
        # temporary and copying it back through a strided transpose.
        base, value = n.inputs
        start, step = n.attrs["start"], n.attrs["step"]
        return g.add(Op.SETSLICE, n.dtype, shape,
                     (transpose(g, base, perm), _transposed_expression(g, value, perm, {})),
                     start=tuple(start[p] for p in perm), step=tuple(step[p] for p in perm))
    return g.add(Op.TRANSPOSE, n.dtype, shape, (n,), perm=perm)


def _transposed_expression(g: Graph, n: Node, perm, memo: dict) -> Node:
    """transpose(n, perm) with the transpose moved through n's elementwise operations to the
    values they read, so that it meets (and cancels) the transposes taken of those: a value
    computed elementwise is then read in its consumer's order, not materialised in its own
    order first and copied through a transpose."""
    if n.ndim == 0:
        return n
    done = memo.get(n.index)
    if done is None:
        if n.op.kind is Kind.ELEMENTWISE and all(i.ndim in (0, n.ndim) for i in n.inputs):
            done = g.add(n.op, n.dtype, tuple(n.shape[p] for p in perm),
                         tuple(_transposed_expression(g, i, perm, memo) for i in n.inputs),
                         **n.attrs)
        else:
            done = transpose(g, n, perm)
        memo[n.index] = done
    return done


def reshape(g: Graph, n: Node, shape) -> Node:
    shape = normalize_shape(shape, n.size)
    if shape == n.shape:
        return n
    src = _scalar_source(n)
    if src is not None:
        return broadcast_to(g, src, shape)
    if n.op is Op.RESHAPE:
        n = n.inputs[0]
        if shape == n.shape:
            return n
    return g.add(Op.RESHAPE, n.dtype, shape, (n,))


def normalize_shape(shape, size: int) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = [int(s) for s in shape]
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    # exact integers: an int64 product could wrap around and match a wrong shape
    known = math.prod(s for s in shape if s != -1)
    if unknown:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape "
                             f"{_shape_text(shape)}")
        shape[unknown[0]] = size // known
    if any(s < 0 for s in shape) or math.prod(shape) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {_shape_text(shape)}")
    return tuple(shape)


def _shape_text(shape) -> str:
    """A shape as NumPy's messages print it: (2,3), (5,)."""
    return "(" + ",".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def slice_view(g: Graph, n: Node, starts, steps, shape) -> Node:
    """Elements n[starts[d] + steps[d] * i] for i < shape[d]: basic slicing, any step sign."""
    starts, steps, shape = tuple(map(int, starts)), tuple(map(int, steps)), tuple(map(int, shape))
    if shape == n.shape and all(s == 0 for s in starts) and all(s == 1 for s in steps):
        return n
    src = _scalar_source(n)
    if src is not None:
        return broadcast_to(g, src, shape)
    if n.op is Op.SLICE:  # compose: start' = s0 + t0*s1, step' = t0*t1
        s0, t0 = n.attrs["start"], n.attrs["step"]
        starts = tuple(a + b * c for a, b, c in zip(s0, t0, starts))
        steps = tuple(a * b for a, b in zip(t0, steps))
        n = n.inputs[0]
    if any(sz == 0 for sz in shape):  # nothing is read: keep indices in range for the verifier
        starts = (0,) * len(shape)
    return g.add(Op.SLICE, n.dtype, shape, (n,), start=starts, step=steps)


# ---- reductions --------------------------------------------------------------------------
_REDUCE_UFUNC = {Op.SUM: np.add, Op.PROD: np.multiply, Op.MAX: np.maximum, Op.MIN: np.minimum,
                 Op.ANY: np.logical_or, Op.ALL: np.logical_and}


def axis_items(axis) -> tuple:
    """An axis argument as the tuple of its items: one int (a 0-d integer array too, as
    NumPy's operator.index takes it) or a sequence."""
    if isinstance(axis, np.ndarray) and axis.ndim == 0:
        axis = axis.item()
    return (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)


def normalize_axes(axis, ndim: int) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    axes = axis_items(axis)
    out = []
    for a in axes:
        a = int(a)
        if ndim == 0 and a in (0, -1):     # NumPy lets a 0-d array be reduced along 0 or -1
            continue
        if not -ndim <= a < ndim:
            raise np.exceptions.AxisError(a, ndim)
        a %= ndim
        if a in out:
            raise ValueError("duplicate value in 'axis'")
        out.append(a)
    return tuple(sorted(out))


def reduce_dtype(op: Op, dtype: np.dtype) -> np.dtype:
    if op in (Op.ANY, Op.ALL):
        return np.dtype(np.bool_)
    if op in (Op.ARGMAX, Op.ARGMIN):
        return np.dtype(np.intp)
    with np.errstate(all="ignore"):
        return _REDUCE_UFUNC[op].reduce(np.zeros(1, dtype)).dtype


def reduce(g: Graph, op: Op, n: Node, axis=None, keepdims=False, dtype=None,
           unroll_small: bool = False) -> Node:
    """op (SUM, PROD, MAX, MIN, ANY, ALL, ARGMAX, ARGMIN) over `axis`, as NumPy's reduction.
    unroll_small: the NumPy reductions themselves (np.sum and friends) mark a reduction of at
    most SMALL_REDUCE elements per result `unroll=True`: the fuser may then build it from
    elementwise operations (`unrolled_reduce`).  Contractions, complex sums and the library's
    internal folds leave it unmarked: their REDUCE nodes stay (BLAS gemm, row fusion)."""
    axes = normalize_axes(axis, n.ndim)
    if dtype is not None:
        n = cast(g, n, check_dtype(dtype, f"np.{op.value}(dtype=...)"))
    elif op in (Op.ANY, Op.ALL):
        n = cast(g, n, np.bool_)
    elif op not in (Op.ARGMAX, Op.ARGMIN):
        n = cast(g, n, reduce_dtype(op, n.dtype))
    out_dtype = n.dtype if dtype is not None and op in (Op.SUM, Op.PROD) else reduce_dtype(op, n.dtype)
    if op in (Op.MAX, Op.MIN, Op.ARGMAX, Op.ARGMIN) and any(n.shape[a] == 0 for a in axes):
        raise ValueError(f"zero-size array to reduction operation {op.value} which has no identity")
    kept = tuple(s for i, s in enumerate(n.shape) if i not in axes)
    if op in (Op.ARGMAX, Op.ARGMIN) and len(axes) > 1:
        # NumPy's flat index: argmax over the C-order flattening of the reduced axes
        n = reshape(g, transpose(g, n, [i for i in range(n.ndim) if i not in axes] + list(axes)),
                    kept + (-1,))
        axes = (n.ndim - 1,)
    if n.dtype.kind == "c" and op not in (Op.ANY, Op.ALL):
        out = COMPLEX["reduce"](g, op, n, axes, out_dtype)
    elif not axes and op not in (Op.ARGMAX, Op.ARGMIN):
        out = cast(g, n, out_dtype)
    elif unroll_small and _unrollable(op, n, axes):
        out = g.add(op, out_dtype, kept, (n,), axes=axes, unroll=True)
    elif op is Op.PROD and n.dtype == np.float16 and _inner_run(n, axes) == count(n, axes):
        # NumPy's half loop multiplies a run of its reduce loop in float32 and rounds the
        # run's product once: here every reduced element is in one run (C order)
        out = cast(g, g.add(op, np.dtype(np.float32), kept, (cast(g, n, np.float32),),
                            axes=axes), out_dtype)
    else:
        out = g.add(op, out_dtype, kept, (n,), axes=axes)
    if keepdims:
        out = reshape(g, out, tuple(1 if i in axes else s for i, s in enumerate(n.shape)))
    return out


# Reductions of at most this many elements per result may be written as elementwise
# operations over slices (`unrolled_reduce`), which fuse into their users like any map, where
# a REDUCE node is always materialised: squared distances summed over 3 coordinates feeding
# an argmin over the centroids are one pass, not an (n, k) temporary between two reductions.
SMALL_REDUCE = 8
_ELEMENTWISE_OF = {Op.SUM: Op.ADD, Op.PROD: Op.MUL, Op.MAX: Op.MAXIMUM, Op.MIN: Op.MINIMUM,
                   Op.ANY: Op.LOGICAL_OR, Op.ALL: Op.LOGICAL_AND}


def _unrollable(op: Op, n: Node, axes) -> bool:
    """Whether `unrolled_reduce` applies: a reduction with 1 to SMALL_REDUCE elements per
    result (an empty one keeps its REDUCE node, which gives the identity).  A float16 sum or
    product only where its reduced axes are one run ending at the last axis: NumPy's inner
    loop then accumulates in float32, as the REDUCE kernel's sums do; over an outer axis NumPy
    rounds every step to float16 for a C-ordered operand but accumulates in float32 for a
    Fortran-ordered one (the inner loop follows memory), where a step's overflow to inf
    would be a difference far beyond rounding: the REDUCE keeps float32 there."""
    if op not in _ELEMENTWISE_OF or not axes or n.size == 0:
        return False
    m = count(n, axes)
    if m > SMALL_REDUCE:
        return False
    return not (n.dtype == np.float16 and op in (Op.SUM, Op.PROD) and _inner_run(n, axes) != m)


def _inner_run(n: Node, axes) -> int:
    """Elements of the run of reduced axes NumPy's reduce loop walks innermost for a C-ordered
    operand: those after the last kept axis of size > 1 (1: none, whole rows added in turn)."""
    run = 1
    for d in reversed(range(n.ndim)):
        if n.shape[d] > 1 and d not in axes:
            break
        run *= n.shape[d]
    return run


def unrolled_reduce(g: Graph, op: Op, n: Node, axes) -> Node:
    """op over `axes` (at most SMALL_REDUCE elements per result) as elementwise operations in
    NumPy's order for a C-ordered operand: the same bits as NumPy's reduction of it (and of
    any operand where the order cannot matter: integers, booleans, max/min, one reduced axis
    of fewer than 8 float elements, not float16; NumPy's own result depends on the memory
    layout elsewhere).

    NumPy's iterator walks the reduced elements in C order (size-1 axes do not count).  The
    trailing run of reduced axes, where the last axis is reduced, is the inner loop of the
    ufunc's reduce loop, called once per combination of the outer reduced axes, each call
    adding its result to the output:
      - a float sum adds a run of fewer than 8 elements one by one, exactly 8 pairwise as
        ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)); the output starts at +0.0 (a sum
        of -0.0s is +0.0, as NumPy's);
      - float16 sums and products accumulate a run in float32, rounded to float16 as each
        call stores it (`_unrollable` leaves float16 here only one run).
    Without such a run NumPy adds (multiplies) whole rows in turn, each step rounded to the
    dtype.  max/min fold np.maximum/np.minimum from the first element (the first NaN
    propagates; ties between signed zeros as NumPy's)."""
    kept_axes = [i for i in range(n.ndim) if i not in axes]
    kept = tuple(n.shape[i] for i in kept_axes)
    m = count(n, axes)
    t = reshape(g, transpose(g, n, kept_axes + list(axes)), kept + (m,))
    parts = [reshape(g, slice_view(g, t, (0,) * len(kept) + (j,), (1,) * (len(kept) + 1),
                                   kept + (1,)), kept) for j in range(m)]
    dt = n.dtype
    eop = _ELEMENTWISE_OF[op]

    def fold(acc, values, dtype):
        for p in values:
            acc = elementwise(g, eop, dtype, [acc, p]) if acc is not None else p
        return acc
    if op not in (Op.SUM, Op.PROD) or dt.kind != "f":
        return fold(None, parts, dt)
    run = _inner_run(n, axes)
    if run == 1:                       # rows in turn
        return fold(literal(g, 0.0, dt) if op is Op.SUM else None, parts, dt)
    acc_dt = np.dtype(np.float32) if dt == np.float16 else dt
    acc = literal(g, 0.0, dt) if op is Op.SUM else None
    for b in range(0, m, run):
        block = [cast(g, p, acc_dt) for p in parts[b:b + run]]
        if op is Op.SUM and run == 8:
            pairs = [elementwise(g, eop, acc_dt, block[i:i + 2]) for i in range(0, 8, 2)]
            block = [elementwise(g, eop, acc_dt, [elementwise(g, eop, acc_dt, pairs[0:2]),
                                                  elementwise(g, eop, acc_dt, pairs[2:4])])]
        if op is Op.SUM:     # the run's sum (from +0.0 in NumPy: the same value) to the output
            block = [fold(None, block, acc_dt)]
        acc = cast(g, fold(None if acc is None else cast(g, acc, acc_dt), block, acc_dt), dt)
    return acc


def count(n: Node, axes) -> int:
    return _fold(operator.mul, (n.shape[a] for a in axes), 1)


# ---- running folds -----------------------------------------------------------------------
def scan(g: Graph, op: Op, n: Node, axis, dtype=None) -> Node:
    """cumsum / cumprod along `axis` (None: over the flattened array)."""
    if axis is None:
        n = reshape(g, n, (-1,))
        axis = 0
    ax = normalize_axes(axis, n.ndim)[0] if n.ndim else 0
    if n.ndim == 0:
        n = reshape(g, n, (1,))
    fold = Op.SUM if op is Op.CUMSUM else Op.PROD
    dt = check_dtype(dtype, f"np.{op.value}(dtype=...)") if dtype is not None else \
        reduce_dtype(fold, n.dtype)
    n = cast(g, n, dt)
    if n.size == 0:
        return n
    if dt.kind == "c":
        return COMPLEX["scan"](g, op, n, ax)
    return g.add(op, dt, n.shape, (n,), axis=ax)


# ---- data-dependent indexing ---------------------------------------------------------------
def _index_nodes(g: Graph, src_shape, indices, axis: int,
                 strict: bool = False) -> tuple[list, tuple]:
    """Indices cast to intp and broadcast together; constant ones are bounds-checked now."""
    nodes = [cast(g, i, np.intp) for i in indices]
    shape = broadcast_shapes(*(i.shape for i in nodes))
    nodes = [broadcast_to(g, i, shape) for i in nodes]
    for j, i in enumerate(nodes):
        size = src_shape[axis + j]
        values = _constant_values(g, i)
        if values is not None and values.size:
            bad = values[((values < 0) if strict else (values < -size)) | (values >= size)]
            if bad.size and strict:
                raise ValueError(f"value {int(bad[0])} is outside the range [0, {size})")
            if bad.size:
                raise IndexError(f"index {int(bad[0])} is out of bounds for axis {axis + j} "
                                 f"with size {size}")
    return nodes, shape


def _constant_values(g: Graph, n: Node):
    v = literal_value(n)
    if v is not None:
        return np.asarray(v)
    while n.op in (Op.BROADCAST, Op.RESHAPE, Op.TRANSPOSE, Op.SLICE, Op.CAST):
        n = n.inputs[0]
    if n.op is Op.CONST:
        return g.consts[n.attrs["index"]]
    return None


def _check_unread_indices(g: Graph, nodes: list, src_shape, axis: int, strict: bool,
                          elements: int) -> None:
    """NumPy checks every index however many elements it selects.  A gather or scatter
    kernel checks the indices it reads at the points it runs over: where it has none
    (`elements` == 0: an empty result, region or base) the indices are a runtime check of
    their own; so are those into an empty axis, which the kernel reads from no memory."""
    empty_axis = any(src_shape[axis + j] == 0 for j in range(len(nodes)))
    if (elements and not empty_axis) or not nodes or nodes[0].size == 0:
        return
    for j, i in enumerate(nodes):
        size = src_shape[axis + j]
        low = literal(g, 0 if strict else -size, np.intp)
        ok = elementwise(g, Op.LOGICAL_AND, np.bool_, [
            elementwise(g, Op.GE, np.bool_, [i, low]),
            elementwise(g, Op.LT, np.bool_, [i, literal(g, size, np.intp)])])
        if strict:
            add_check(g, ok, ValueError, f"a value is outside the range [0, {size})")
        else:
            add_check(g, ok, IndexError, f"an index array holds a value out of bounds for "
                                         f"axis {axis + j} with size {size}")


def gather(g: Graph, src: Node, indices: list, axis: int, strict: bool = False) -> Node:
    """src[..., idx0, ..., idxk-1, ...] with the index arrays at axes [axis, axis+k).
    strict: the indices are values that must lie in [0, size) (no negative indices); any other
    raises ValueError at run time (KernelError.RANGE) instead of IndexError."""
    nodes, bshape = _index_nodes(g, src.shape, indices, axis, strict)
    shape = src.shape[:axis] + bshape + src.shape[axis + len(nodes):]
    _check_unread_indices(g, nodes, src.shape, axis, strict, math.prod(shape))
    if strict:
        return g.add(Op.GATHER, src.dtype, shape, (src, *nodes), axis=axis, strict=True)
    return g.add(Op.GATHER, src.dtype, shape, (src, *nodes), axis=axis)


def scatter(g: Graph, base: Node, values: Node, indices: list, axis: int, mode: str,
            strict: bool = False) -> Node:
    """base with `values` written (mode "set") or combined ("add", "max", "min") at
    base[..., idx0, ..., idxk-1, ...]; repeated indices apply in C order, as NumPy does.
    strict: as for gather (np.bincount's values)."""
    nodes, bshape = _index_nodes(g, base.shape, indices, axis, strict)
    region = base.shape[:axis] + bshape + base.shape[axis + len(nodes):]
    values = broadcast_to(g, cast(g, values, base.dtype), region)
    _check_unread_indices(g, nodes, base.shape, axis, strict, math.prod(region) * base.size)
    if any(s == 0 for s in region) or base.size == 0:
        return base
    if base.dtype.kind == "c" and mode != "set":
        return COMPLEX["scatter"](g, base, values, nodes, axis, mode, strict)
    if strict:
        return g.add(Op.SCATTER, base.dtype, base.shape, (base, values, *nodes), axis=axis,
                     mode=mode, strict=True)
    return g.add(Op.SCATTER, base.dtype, base.shape, (base, values, *nodes), axis=axis, mode=mode)


# ---- contractions (einsum, matmul, dot) ------------------------------------------------------
def contract(g: Graph, a: Node, a_labels: str, b: Node, b_labels: str, out_labels: str,
             dtype) -> Node:
    """einsum(f"{a_labels},{b_labels}->{out_labels}", a, b) as sum(broadcast(a) * broadcast(b)):
    one reduction kernel whose product is computed inline."""
    if len(set(a_labels)) != len(a_labels) or len(set(b_labels)) != len(b_labels):
        raise TracingError("einsum with a label repeated within one operand (a diagonal) is "
                           "not supported by fastlaunch")
    sizes: dict = {}
    for labels, n in ((a_labels, a), (b_labels, b)):
        if len(labels) != n.ndim:
            raise ValueError(f"einstein sum subscripts string {labels!r} does not match an "
                             f"operand of {n.ndim} dimensions")
        for lab, s in zip(labels, n.shape):
            # a dimension of size 1 broadcasts against the label's size elsewhere, as in
            # NumPy's einsum (a batch of one input against a batch of weights)
            have = sizes.setdefault(lab, s)
            if have != s and 1 not in (have, s):
                raise ValueError(f"operands could not be broadcast together: dimension {lab!r} "
                                 f"is {have} and {s}")
            sizes[lab] = max(have, s)
    summed = [lab for lab in sizes if lab not in out_labels]
    order = list(out_labels) + summed
    full = tuple(sizes[lab] for lab in order)
    dt = check_dtype(dtype, "matrix product")
    if dt.kind == "c":
        return COMPLEX["contract"](g, a, a_labels, b, b_labels, out_labels, dt)

    def spread(n, labels):
        n = cast(g, n, dt)
        own = dict(zip(labels, n.shape))
        mine = [lab for lab in order if lab in labels]
        n = transpose(g, n, [labels.index(lab) for lab in mine])
        n = reshape(g, n, tuple(own.get(lab, 1) for lab in order))
        return broadcast_to(g, n, full)

    prod = elementwise(g, Op.MUL if dt.kind != "b" else Op.LOGICAL_AND, dt,
                       [spread(a, a_labels), spread(b, b_labels)])
    if not summed:
        return prod
    if dt.kind == "b":
        return reduce(g, Op.ANY, prod, tuple(range(len(out_labels), len(order))))
    return reduce(g, Op.SUM, prod, tuple(range(len(out_labels), len(order))), dtype=dt)


# ---- in-place region update --------------------------------------------------------------
def set_region(g: Graph, base: Node, starts, steps, counts, value: Node) -> Node:
    """base with base[start + step*i] (i < count, per axis) replaced by `value` (cast, broadcast)."""
    counts = tuple(int(c) for c in counts)
    value = broadcast_to(g, cast(g, value, base.dtype), counts)
    if counts == base.shape and all(s == 0 for s in starts) and all(s == 1 for s in steps):
        return value  # the whole array is overwritten
    if any(c == 0 for c in counts):
        return base
    return g.add(Op.SETSLICE, base.dtype, base.shape, (base, value),
                 start=tuple(map(int, starts)), step=tuple(map(int, steps)))


# ---- sorting -------------------------------------------------------------------------------
def pack(g: Graph, values: list, dims, stage: bool = False) -> Node:
    """ir.Op.PACK: `values` (one shape, one dtype; a 0-d value is broadcast to the others'
    shape) side by side along new trailing dims `dims`, in C order."""
    dims = tuple(int(d) for d in dims)
    if len(values) != math.prod(dims) or not values:
        raise ValueError(f"pack: {len(values)} values for dims {dims}")
    shape = max((v.shape for v in values), key=len)
    dtype = values[0].dtype
    if any(v.dtype != dtype for v in values):
        raise ValueError("pack: the values must share one dtype")
    values = [broadcast_to(g, v, shape) for v in values]
    return g.add(Op.PACK, dtype, shape + dims, values, dims=dims, stage=bool(stage))


def sort(g: Graph, n: Node, axis, positions: bool = False) -> Node:
    """n sorted along `axis` (None: the flattened array), ascending, NaNs last, stably; with
    `positions` the int64 positions that sort it (argsort)."""
    if axis is None:
        n = reshape(g, n, (-1,))
        axis = 0
    if n.ndim == 0:
        raise np.exceptions.AxisError(int(axis), 0)
    ax = normalize_axes(int(axis), n.ndim)[0]
    if n.dtype.kind == "c":
        raise TracingError(f"np.{'argsort' if positions else 'sort'} of {n.dtype} values is "
                           f"not supported by fastlaunch (NumPy orders complex numbers "
                           f"lexicographically; sort np.real/np.imag parts instead)")
    if positions:
        if n.shape[ax] <= 1 or n.size == 0:
            return broadcast_to(g, literal(g, 0, np.intp), n.shape)
        return g.add(Op.ARGSORT, np.intp, n.shape, (n,), axis=ax)
    if n.shape[ax] <= 1 or n.size == 0:
        return n
    return g.add(Op.SORT, n.dtype, n.shape, (n,), axis=ax)
