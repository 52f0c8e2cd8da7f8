"""Reverse-mode differentiation of a traced graph: the backward pass as more graph.

`backward(g, seeds, wrt)` walks the nodes between the variables (`wrt`) and the seeded results
in reverse creation order (a topological order) and applies each op's adjoint rule, which
builds the cotangents of its operands with the ordinary graph builders of ir/ops.py.  The result
is part of the same graph as the forward pass, so fusion, scheduling and recording treat both
as one program: one replay computes the value and every gradient.  Nothing is taped and
nothing is evaluated here.

The variables are `Op.MARK` nodes with role "var" (grad.py makes them), so differentiating a
value that also exists outside the differentiated function (a closure over a traced array, an
inner `fl.grad` inside an outer one) never confuses the two: only paths from the marks count.
Every rule is linear in its cotangent and built only of ops that have rules themselves, so the
backward graph can be differentiated again (`fl.grad(fl.grad(f))`, and forward mode as the
transpose of a backward pass: grad.py).

Conventions at non-differentiable points follow JAX's: abs'(0) = 0, max/min split ties
equally, a step (floor, sign, comparisons) has derivative 0, d(x**y)/dy = 0 at x = 0.
docs/gradients.md lists every rule and what is refused.
"""
from __future__ import annotations

import itertools
import math
import weakref
from typing import Callable

import numpy as np

from .. import forking
from . import ops
from ..errors import TracingError
from .graph import Graph, Node, Op

__all__ = ["backward", "mark", "new_tag", "CustomRule", "register_custom", "NO_GRADIENT",
           "differentiable"]

_tags = itertools.count(1)
_tags_lock = forking.lock(forking.TABLE)     # a fork never finds it held


def new_tag() -> int:
    """A tag no other mark has: keeps distinct variables (and custom calls) apart under CSE."""
    with _tags_lock:
        return next(_tags)


def mark(g: Graph, n: Node, role: str, tag: int | None = None) -> Node:
    """n under an Op.MARK of `role` ("var", "stop" or "custom")."""
    return g.add(Op.MARK, n.dtype, n.shape, (n,), role=role, tag=new_tag() if tag is None else tag)


def differentiable(dtype) -> bool:
    """Whether values of this dtype carry gradients: the real floating types."""
    return np.dtype(dtype).kind == "f"


# ---- user rules (fl.custom_vjp / fl.custom_jvp) -------------------------------------------------
class CustomRule:
    """One call of a function with a user rule: its differentiable inputs (nodes), its marked
    outputs, and `pullback(cotangents of the outputs) -> cotangents of the inputs` (nodes or
    None), which builds graph in the current trace."""

    def __init__(self, inputs: list, outputs: list, pullback: Callable):
        self.inputs = inputs
        self.outputs = outputs
        self.pullback = pullback


_CUSTOM: "weakref.WeakKeyDictionary[Graph, dict]" = weakref.WeakKeyDictionary()


def register_custom(g: Graph, tag: int, rule: CustomRule) -> None:
    _CUSTOM.setdefault(g, {})[tag] = rule


def _custom(g: Graph, n: Node) -> CustomRule:
    return _CUSTOM[g][n.attrs["tag"]]


# ---- the backward pass ---------------------------------------------------------------------------
NO_GRADIENT = object()
# The rule of Op.LOOP: loops.loop_adjoint, set when frontend/loops.py is imported (every graph with a
# loop node was made by it)
LOOP_RULE = None


def backward(g: Graph, seeds: list, wrt: list) -> list:
    """Cotangents of `wrt` (nodes, usually var marks) given `seeds`, a list of (node,
    cotangent node of its shape): sum over seeds of J^T ct.  None where no path leads from a
    variable to a seed (the gradient is zero)."""
    wrt_index = {n.index: k for k, n in enumerate(wrt)}
    if not wrt_index:
        return []
    lo = min(wrt_index)
    hi = max((s.index for s, _ in seeds), default=-1)
    nodes = g.nodes[lo:hi + 1]           # a snapshot: rules append to g.nodes as they run
    relevant = _relevant(g, nodes, set(wrt_index))
    cts: dict[int, Node] = {}

    def accumulate(target: Node, ct: Node):
        if target.index not in relevant:
            return
        ct = _fit(g, ct, target)
        old = cts.get(target.index)
        cts[target.index] = ct if old is None else _add(g, old, ct)

    for s, ct in seeds:
        if s.shape != ct.shape:
            raise ValueError(f"a cotangent of shape {ct.shape} for a value of shape {s.shape}")
        accumulate(s, ct)
    done_custom: set = set()
    loop_cts: dict = {}                # loop node index -> [(loop_out node, its cotangent)]
    for n in reversed(nodes):
        if n.index in wrt_index:
            continue
        if n.op is Op.LOOP:
            # every result of the loop comes after it: their cotangents are complete
            pending = loop_cts.pop(n.index, None)
            if pending:
                found = LOOP_RULE(g, [o for o, _ in pending], [c for _, c in pending])
                for pos, c in found.items():
                    accumulate(n.inputs[pos], c)
            continue
        ct = cts.pop(n.index, None)
        if ct is None:
            continue
        if n.op is Op.LOOP_OUT:
            loop_cts.setdefault(n.inputs[0].index, []).append((n, ct))
            continue
        if n.op is Op.MARK and n.attrs["role"] == "custom":
            tag = n.attrs["tag"]
            if tag in done_custom:
                continue
            done_custom.add(tag)
            rule = _custom(g, n)
            outs = [ct if o is n else cts.pop(o.index, None) for o in rule.outputs]
            for inp, c in zip(rule.inputs, rule.pullback(outs)):
                if c is not None:
                    accumulate(inp, c)
            continue
        if n.dtype.kind == "c":
            raise TracingError(
                f"gradients through complex values are not supported by fastlaunch ({n.op.value} "
                f"of {n.dtype}): differentiate a real function of real arguments")
        rule = RULES.get(n.op)
        if rule is None:
            raise TracingError(f"fastlaunch has no gradient rule for {_op_name(n)}: the value "
                               f"{n.dtype}{list(n.shape)} it computes depends on a "
                               f"differentiated argument; wrap it in fl.stop_gradient if its "
                               f"gradient is not wanted, or give a rule with fl.custom_vjp")
        for inp, c in rule(g, n, ct):
            if c is not None:
                accumulate(inp, c)
    return [cts.get(n.index) for n in wrt]


# ---- forward mode ----------------------------------------------------------------------------
# The rule of a loop in forward mode: loops.loop_tangent, set when frontend/loops.py is imported
LOOP_TANGENT = None


def forward(g: Graph, seeds: dict, outs: list) -> list:
    """Tangents of `outs` given {node index: tangent node} for some earlier nodes (usually
    var marks): J t, node by node in creation order.  Each op's tangent is its adjoint rule
    transposed on the spot (the rule is linear in its cotangent: the tangent is the gradient,
    with respect to a cotangent variable u, of <rule(u), input tangents>); a loop's tangent
    is a loop carrying the values and their tangents (loops.loop_tangent).  None: zero."""
    if not seeds:
        return [None] * len(outs)
    lo = min(seeds)
    hi = max((o.index for o in outs), default=-1)
    tan: dict[int, Node] = dict(seeds)
    done_custom: set = set()
    for n in g.nodes[lo:hi + 1]:
        if n.index in tan or n.op is Op.LOOP_OUT:
            continue
        if n.op is Op.LOOP:
            if any(i.index in tan for i in n.inputs):
                tan.update(LOOP_TANGENT(g, n, tan))
            continue
        if not (differentiable(n.dtype) or n.dtype.kind == "c") or n.op in _NOT_DIFFERENTIABLE:
            continue
        if n.op is Op.MARK and n.attrs["role"] == "custom":
            tag = n.attrs["tag"]
            if tag not in done_custom:
                done_custom.add(tag)
                rule = _custom(g, n)
                tan.update(_custom_tangents(g, rule, tan))
            continue
        if not any(i.index in tan for i in n.inputs):
            continue
        if n.op is Op.MARK:
            if n.attrs["role"] != "stop":
                tan[n.index] = tan[n.inputs[0].index]
            continue
        t = _transposed(g, n, tan)
        if t is not None:
            tan[n.index] = t
    return [tan.get(o.index) for o in outs]


def _transposed(g: Graph, n: Node, tan: dict):
    """n's tangent from its operands': its rule applied to a cotangent variable u, then the
    gradient of <rule(u), operand tangents> with respect to u."""
    if n.dtype.kind == "c":
        raise TracingError(f"forward mode through complex values is not supported "
                           f"({n.op.value} of {n.dtype})")
    rule = RULES.get(n.op)
    if rule is None:
        raise TracingError(f"fastlaunch has no gradient rule for {_op_name(n)}, which forward "
                           f"mode needs (its value depends on a differentiated argument)")
    u = mark(g, _zeros(g, n.shape, _work(n.dtype)), "var")
    seeds = []
    for inp, c in rule(g, n, u):
        t = tan.get(inp.index)
        if c is not None and t is not None:
            seeds.append((_fit(g, c, inp), t))
    if not seeds:
        return None
    t = backward(g, seeds, [u])[0]
    return None if t is None else ops.cast(g, t, n.dtype)


def _custom_tangents(g: Graph, rule: "CustomRule", tan: dict) -> dict:
    """A custom rule's outputs' tangents: its pullback transposed."""
    us = [mark(g, _zeros(g, o.shape, o.dtype), "var") for o in rule.outputs]
    seeds = []
    for inp, c in zip(rule.inputs, rule.pullback(us)):
        t = tan.get(inp.index)
        if c is not None and t is not None:
            seeds.append((_fit(g, c, inp), t))
    found = backward(g, seeds, us) if seeds else [None] * len(us)
    return {o.index: t for o, t in zip(rule.outputs, found) if t is not None}


def _op_name(n: Node) -> str:
    if n.op is Op.LINALG:
        return f"np.linalg.{n.attrs['fn']}"
    if n.op is Op.SCATTER:
        return f"a scatter (mode {n.attrs['mode']!r}: np.{n.attrs['mode']}.at or x[idx] = v)"
    return n.op.value


def _relevant(g: Graph, nodes: list, roots: set) -> set:
    """Indices of the nodes whose value depends differentiably on a root."""
    relevant = set(roots)
    for n in nodes:
        if n.op is Op.LOOP:
            if any(i.index in relevant for i in n.inputs):
                relevant.add(n.index)
            continue
        if n.index in relevant or not (differentiable(n.dtype) or n.dtype.kind == "c"):
            continue
        if n.op is Op.MARK:
            role = n.attrs["role"]
            if role == "stop":
                continue
            if role == "custom":
                if any(i.index in relevant for i in _custom(g, n).inputs):
                    relevant.add(n.index)
                continue
        if n.op in _NOT_DIFFERENTIABLE:
            continue
        if any(i.index in relevant for i in n.inputs):
            relevant.add(n.index)
    return relevant


def _fit(g: Graph, ct: Node, target: Node) -> Node:
    """ct in the target's dtype, summed over what broadcasting added (a 0-d operand of an
    elementwise op meets cotangents of the op's shape)."""
    if ct.shape != target.shape:
        if target.ndim:
            raise AssertionError(f"cotangent {ct.shape} for {target.shape}")
        ct = _sum(g, ct, tuple(range(ct.ndim)))
    return ops.cast(g, ct, target.dtype)


# ---- helpers: graph builders with the algebra a cotangent needs ----------------------------------
def _work(dt) -> np.dtype:
    """The dtype rules compute in: float16 values are differentiated in float32."""
    dt = np.dtype(dt)
    return np.dtype(np.float32) if dt == np.float16 else dt


def _const(n: Node):
    v = ops.literal_value(n)
    return None if v is None else float(v)


def _lit(g: Graph, value, dt) -> Node:
    return ops.literal(g, value, dt)


def _e(g: Graph, op: Op, *xs: Node) -> Node:
    """op over xs (same shape or 0-d) in the first float operand's working dtype."""
    dt = _work(next((x.dtype for x in xs if x.dtype.kind == "f"), np.float64))
    return ops.elementwise(g, op, dt, [ops.cast(g, x, dt) for x in xs])


def _shape_of(*xs: Node) -> tuple:
    return max((x.shape for x in xs), key=len)


def _zeros(g: Graph, shape, dt) -> Node:
    return ops.broadcast_to(g, _lit(g, 0, dt), shape)


def _mul(g: Graph, a: Node, b: Node) -> Node:
    ca, cb = _const(a), _const(b)
    shape = ops.broadcast_shapes(a.shape, b.shape)
    if ca == 1.0 or cb == 0.0:
        return ops.broadcast_to(g, b, shape)
    if cb == 1.0 or ca == 0.0:
        return ops.broadcast_to(g, a, shape)
    return _e(g, Op.MUL, a, b)


def _add(g: Graph, a: Node, b: Node) -> Node:
    if _const(a) == 0.0:
        return b
    if _const(b) == 0.0:
        return a
    return _e(g, Op.ADD, a, b)


def _neg(g: Graph, a: Node) -> Node:
    return _e(g, Op.NEG, a)


def _div(g: Graph, a: Node, b: Node) -> Node:
    return _e(g, Op.DIV, a, b)


def _sq(g: Graph, a: Node) -> Node:
    return _e(g, Op.MUL, a, a)


def _where(g: Graph, cond: Node, a: Node, b: Node) -> Node:
    dt = _work(a.dtype if a.dtype.kind == "f" else b.dtype)
    shape = ops.broadcast_shapes(cond.shape, a.shape, b.shape)
    return ops.elementwise(g, Op.WHERE, dt, [ops.broadcast_to(g, cond, shape),
                                             ops.broadcast_to(g, ops.cast(g, a, dt), shape),
                                             ops.broadcast_to(g, ops.cast(g, b, dt), shape)])


def _cmp(g: Graph, op: Op, a: Node, b: Node) -> Node:
    dt = np.result_type(a.dtype, b.dtype)
    return ops.elementwise(g, op, np.bool_, [ops.cast(g, a, dt), ops.cast(g, b, dt)])


def _sum(g: Graph, n: Node, axes: tuple) -> Node:
    if not axes:
        return n
    # a sum of products of broadcasts is a contraction (the backward of a matrix product):
    # kept as a REDUCE so that the CPU schedule hands it to BLAS
    contraction = n.op is Op.MUL and all(i.op is Op.BROADCAST for i in n.inputs)
    return ops.reduce(g, Op.SUM, n, axes, unroll_small=not contraction)


def _unary(fn):
    """A rule for y = op(x): fn(g, x, y, ct) is x's cotangent (in the working dtype)."""
    def rule(g, n, ct):
        x = n.inputs[0]
        return [(x, fn(g, ops.cast(g, x, _work(x.dtype)), n, ct))]
    return rule


def _binary(fa, fb):
    """A rule for y = op(a, b): fa/fb(g, a, b, y, ct) are the operands' cotangents (None: 0)."""
    def rule(g, n, ct):
        a, b = n.inputs
        wa, wb = ops.cast(g, a, _work(a.dtype)), ops.cast(g, b, _work(b.dtype))
        out = []
        if fa is not None:
            out.append((a, fa(g, wa, wb, n, ct)))
        if fb is not None:
            out.append((b, fb(g, wa, wb, n, ct)))
        return out
    return rule


def _zero_rule(g, n, ct):
    return []


# ---- elementwise rules ---------------------------------------------------------------------------
def _digamma(g: Graph, x: Node) -> Node:
    """psi(x), the derivative of lgamma: the reflection psi(1-x) - pi/tan(pi x) for x < 0.5,
    six steps of the recurrence psi(x) = psi(x+6) - sum 1/(x+k), then the asymptotic series
    at x+6 >= 6.5 (terms to B10: relative error below 1e-15 there)."""
    dt = _work(x.dtype)
    one = _lit(g, 1.0, dt)
    neg = _cmp(g, Op.LT, x, _lit(g, 0.5, dt))
    t = _where(g, neg, _e(g, Op.SUB, one, x), x)             # t >= 0.5
    shift = _zeros(g, (), dt)
    for k in range(6):
        shift = _add(g, shift, _div(g, one, _e(g, Op.ADD, t, _lit(g, float(k), dt))))
    z = _e(g, Op.ADD, t, _lit(g, 6.0, dt))
    iz2 = _div(g, one, _sq(g, z))
    series = _lit(g, 0.0, dt)
    for c in (-1.0 / 132, 1.0 / 240, -1.0 / 252, 1.0 / 120, -1.0 / 12):   # B_2k / (2k)
        series = _add(g, _mul(g, series, iz2), _lit(g, c, dt))
    series = _mul(g, series, iz2)      # minus the sum of B_2k / (2k z^2k)
    psi = _e(g, Op.ADD, _e(g, Op.SUB, _e(g, Op.LOG, z), _div(g, _lit(g, 0.5, dt), z)), series)
    psi = _e(g, Op.SUB, psi, shift)
    pix = _mul(g, x, _lit(g, math.pi, dt))
    reflected = _e(g, Op.SUB, psi, _div(g, _lit(g, math.pi, dt), _e(g, Op.TAN, pix)))
    return _where(g, neg, reflected, psi)


def _pow_a(g, a, b, y, ct):
    # d(a**b)/da = b * a**(b-1); 0 where b == 0 (JAX: no 0 * inf at a = 0)
    dt = _work(y.dtype)
    bm1 = _e(g, Op.SUB, b, _lit(g, 1.0, dt))
    d = _mul(g, b, _e(g, Op.POW, a, bm1))
    d = _where(g, _cmp(g, Op.EQ, b, _lit(g, 0.0, dt)), _lit(g, 0.0, dt), d)
    return _mul(g, ct, d)


def _pow_b(g, a, b, y, ct):
    # d(a**b)/db = log(a) * a**b, with log(0) read as 0 (JAX's convention)
    dt = _work(y.dtype)
    safe = _where(g, _cmp(g, Op.EQ, a, _lit(g, 0.0, dt)), _lit(g, 1.0, dt), a)
    return _mul(g, ct, _mul(g, _e(g, Op.LOG, safe), y))


def _extreme(first: bool):
    """maximum/minimum (and fmax/fmin): the cotangent goes to the operand that is the result,
    halved where both are (JAX's balanced rule)."""
    def f(g, a, b, y, ct):
        mine, other = (a, b) if first else (b, a)
        dt = _work(y.dtype)
        picked = _cmp(g, Op.EQ, mine, y)
        both = _cmp(g, Op.EQ, other, y)
        share = _where(g, both, _lit(g, 0.5, dt), _lit(g, 1.0, dt))
        return _where(g, picked, _mul(g, ct, share), _lit(g, 0.0, dt))
    return f


def _hypot(first: bool):
    def f(g, a, b, y, ct):
        dt = _work(y.dtype)
        mine = a if first else b
        zero = _cmp(g, Op.EQ, y, _lit(g, 0.0, dt))
        ratio = _div(g, mine, _where(g, zero, _lit(g, 1.0, dt), y))
        return _mul(g, ct, _where(g, zero, _lit(g, 0.0, dt), ratio))
    return f


def _copysign_a(g, a, b, y, ct):
    # |a| with b's sign: the cotangent flips where the sign changed
    same = ops.elementwise(g, Op.EQ, np.bool_, [ops.elementwise(g, Op.SIGNBIT, np.bool_, [a]),
                                                ops.elementwise(g, Op.SIGNBIT, np.bool_, [y])])
    return _where(g, same, ct, _neg(g, ct))


def _logaddexp(first: bool, base2: bool):
    def f(g, a, b, y, ct):
        dt = _work(y.dtype)
        mine = a if first else b
        diff = _e(g, Op.SUB, mine, y)
        # both operands -inf: y is -inf and diff NaN; the share is then 1/2 each
        both_inf = _cmp(g, Op.EQ, y, _lit(g, -np.inf, dt))
        w = _e(g, Op.EXP2 if base2 else Op.EXP, diff)
        w = _where(g, both_inf, _lit(g, 0.5, dt), w)
        return _mul(g, ct, w)
    return f


def _mod_b(trunc: bool):
    def f(g, a, b, y, ct):
        q = _e(g, Op.TRUNC if trunc else Op.FLOOR, _div(g, a, b))
        return _neg(g, _mul(g, ct, q))
    return f


def _ln(v: float):
    return math.log(v)


RULES: dict = {}
RULES.update({
    Op.CAST: lambda g, n, ct: [(n.inputs[0], ct)] if differentiable(n.inputs[0].dtype) else [],
    Op.NEG: _unary(lambda g, x, y, ct: _neg(g, ct)),
    Op.ABS: _unary(lambda g, x, y, ct: _mul(g, ct, _e(g, Op.SIGN, x))),
    Op.RECIPROCAL: _unary(lambda g, x, y, ct: _neg(g, _mul(g, ct, _sq(g, y)))),
    Op.SQRT: _unary(lambda g, x, y, ct: _div(g, ct, _mul(g, y, _lit(g, 2.0, _work(y.dtype))))),
    Op.CBRT: _unary(lambda g, x, y, ct: _div(g, ct, _mul(g, _sq(g, y), _lit(g, 3.0, _work(y.dtype))))),
    Op.EXP: _unary(lambda g, x, y, ct: _mul(g, ct, y)),
    Op.EXP2: _unary(lambda g, x, y, ct: _mul(g, ct, _mul(g, y, _lit(g, _ln(2.0), _work(y.dtype))))),
    Op.EXPM1: _unary(lambda g, x, y, ct: _mul(g, ct, _e(g, Op.ADD, y, _lit(g, 1.0, _work(y.dtype))))),
    Op.LOG: _unary(lambda g, x, y, ct: _div(g, ct, x)),
    Op.LOG2: _unary(lambda g, x, y, ct: _div(g, ct, _mul(g, x, _lit(g, _ln(2.0), x.dtype)))),
    Op.LOG10: _unary(lambda g, x, y, ct: _div(g, ct, _mul(g, x, _lit(g, _ln(10.0), x.dtype)))),
    Op.LOG1P: _unary(lambda g, x, y, ct: _div(g, ct, _e(g, Op.ADD, x, _lit(g, 1.0, x.dtype)))),
    Op.SIN: _unary(lambda g, x, y, ct: _mul(g, ct, _e(g, Op.COS, x))),
    Op.COS: _unary(lambda g, x, y, ct: _neg(g, _mul(g, ct, _e(g, Op.SIN, x)))),
    Op.TAN: _unary(lambda g, x, y, ct: _mul(g, ct, _e(g, Op.ADD, _lit(g, 1.0, _work(y.dtype)), _sq(g, y)))),
    Op.ARCSIN: _unary(lambda g, x, y, ct: _div(g, ct, _e(g, Op.SQRT, _e(
        g, Op.SUB, _lit(g, 1.0, x.dtype), _sq(g, x))))),
    Op.ARCCOS: _unary(lambda g, x, y, ct: _neg(g, _div(g, ct, _e(g, Op.SQRT, _e(
        g, Op.SUB, _lit(g, 1.0, x.dtype), _sq(g, x)))))),
    Op.ARCTAN: _unary(lambda g, x, y, ct: _div(g, ct, _e(g, Op.ADD, _lit(g, 1.0, x.dtype), _sq(g, x)))),
    Op.SINH: _unary(lambda g, x, y, ct: _mul(g, ct, _e(g, Op.COSH, x))),
    Op.COSH: _unary(lambda g, x, y, ct: _mul(g, ct, _e(g, Op.SINH, x))),
    Op.TANH: _unary(lambda g, x, y, ct: _mul(g, ct, _e(g, Op.SUB, _lit(g, 1.0, _work(y.dtype)), _sq(g, y)))),
    Op.ARCSINH: _unary(lambda g, x, y, ct: _div(g, ct, _e(g, Op.SQRT, _e(
        g, Op.ADD, _sq(g, x), _lit(g, 1.0, x.dtype))))),
    Op.ARCCOSH: _unary(lambda g, x, y, ct: _div(g, ct, _mul(g, _e(g, Op.SQRT, _e(
        g, Op.SUB, x, _lit(g, 1.0, x.dtype))), _e(g, Op.SQRT, _e(g, Op.ADD, x, _lit(g, 1.0, x.dtype)))))),
    Op.ARCTANH: _unary(lambda g, x, y, ct: _div(g, ct, _e(g, Op.SUB, _lit(g, 1.0, x.dtype), _sq(g, x)))),
    Op.ERF: _unary(lambda g, x, y, ct: _mul(g, ct, _mul(g, _lit(g, 2.0 / math.sqrt(math.pi), x.dtype),
                                                       _e(g, Op.EXP, _neg(g, _sq(g, x)))))),
    Op.ERFC: _unary(lambda g, x, y, ct: _mul(g, ct, _mul(g, _lit(g, -2.0 / math.sqrt(math.pi), x.dtype),
                                                        _e(g, Op.EXP, _neg(g, _sq(g, x)))))),
    Op.LGAMMA: _unary(lambda g, x, y, ct: _mul(g, ct, _digamma(g, x))),
    # steps: derivative 0 wherever it exists
    Op.SIGN: _zero_rule, Op.FLOOR: _zero_rule, Op.CEIL: _zero_rule, Op.TRUNC: _zero_rule,
    Op.RINT: _zero_rule, Op.FLOORDIV: _zero_rule, Op.HEAVISIDE: _zero_rule,
    Op.ADD: _binary(lambda g, a, b, y, ct: ct, lambda g, a, b, y, ct: ct),
    Op.SUB: _binary(lambda g, a, b, y, ct: ct, lambda g, a, b, y, ct: _neg(g, ct)),
    Op.MUL: _binary(lambda g, a, b, y, ct: _mul(g, ct, b), lambda g, a, b, y, ct: _mul(g, ct, a)),
    Op.DIV: _binary(lambda g, a, b, y, ct: _div(g, ct, b),
                    lambda g, a, b, y, ct: _neg(g, _div(g, _mul(g, ct, a), _sq(g, b)))),
    Op.MOD: _binary(lambda g, a, b, y, ct: ct, _mod_b(False)),
    Op.FMOD: _binary(lambda g, a, b, y, ct: ct, _mod_b(True)),
    Op.POW: _binary(_pow_a, _pow_b),
    Op.ARCTAN2: _binary(
        lambda g, a, b, y, ct: _div(g, _mul(g, ct, b), _e(g, Op.ADD, _sq(g, a), _sq(g, b))),
        lambda g, a, b, y, ct: _neg(g, _div(g, _mul(g, ct, a), _e(g, Op.ADD, _sq(g, a), _sq(g, b))))),
    Op.HYPOT: _binary(_hypot(True), _hypot(False)),
    Op.MAXIMUM: _binary(_extreme(True), _extreme(False)),
    Op.MINIMUM: _binary(_extreme(True), _extreme(False)),
    Op.FMAX: _binary(_extreme(True), _extreme(False)),
    Op.FMIN: _binary(_extreme(True), _extreme(False)),
    Op.COPYSIGN: _binary(_copysign_a, None),
    Op.LOGADDEXP: _binary(_logaddexp(True, False), _logaddexp(False, False)),
    Op.LOGADDEXP2: _binary(_logaddexp(True, True), _logaddexp(False, True)),
})


def _where_rule(g, n, ct):
    c, a, b = n.inputs
    dt = _work(n.dtype)
    zero = _lit(g, 0.0, dt)
    return [(a, _where(g, c, ct, zero)), (b, _where(g, c, zero, ct))]


def _mark_rule(g, n, ct):
    if n.attrs["role"] == "stop":
        return []
    return [(n.inputs[0], ct)]            # a variable of another differentiation: identity


RULES[Op.WHERE] = _where_rule
RULES[Op.MARK] = _mark_rule

# ops whose results never carry a gradient, whatever their operands (integer-valued results
# are excluded by dtype already; these are float-valued steps or new values)
_NOT_DIFFERENTIABLE = {Op.SIGN, Op.FLOOR, Op.CEIL, Op.TRUNC, Op.RINT, Op.FLOORDIV,
                       Op.HEAVISIDE, Op.RANDOM, Op.IOTA, Op.ARGSORT, Op.ARGMAX, Op.ARGMIN}


# ---- views ---------------------------------------------------------------------------------------
def _broadcast_rule(g, n, ct):
    x = n.inputs[0]
    lead = n.ndim - x.ndim
    axes = tuple(range(lead)) + tuple(lead + d for d, s in enumerate(x.shape)
                                      if s == 1 and n.shape[lead + d] != 1)
    return [(x, ops.reshape(g, _sum(g, ct, axes), x.shape))]


def _transpose_rule(g, n, ct):
    perm = n.attrs["perm"]
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [(n.inputs[0], ops.transpose(g, ct, inverse))]


def _reshape_rule(g, n, ct):
    return [(n.inputs[0], ops.reshape(g, ct, n.inputs[0].shape))]


def _slice_rule(g, n, ct):
    x = n.inputs[0]
    base = _zeros(g, x.shape, ct.dtype)
    return [(x, ops.set_region(g, base, n.attrs["start"], n.attrs["step"], n.shape, ct))]


def _setslice_rule(g, n, ct):
    base, value = n.inputs
    start, step = n.attrs["start"], n.attrs["step"]
    cleared = ops.set_region(g, ct, start, step, value.shape, _zeros(g, value.shape, ct.dtype))
    return [(base, cleared), (value, ops.slice_view(g, ct, start, step, value.shape))]


def _pack_rule(g, n, ct):
    dims = n.attrs["dims"]
    nb = n.ndim - len(dims)
    batch = n.shape[:nb]
    out = []
    for x, pos in zip(n.inputs, np.ndindex(*dims)):
        part = ops.slice_view(g, ct, (0,) * nb + tuple(pos), (1,) * n.ndim,
                              batch + (1,) * len(dims))
        out.append((x, ops.reshape(g, part, x.shape)))
    return out


RULES.update({Op.BROADCAST: _broadcast_rule, Op.TRANSPOSE: _transpose_rule,
              Op.RESHAPE: _reshape_rule, Op.SLICE: _slice_rule, Op.SETSLICE: _setslice_rule,
              Op.PACK: _pack_rule})


# ---- reductions and scans ------------------------------------------------------------------------
def _kept_shape(n: Node) -> tuple:
    src = n.inputs[0]
    axes = n.attrs["axes"]
    return tuple(1 if d in axes else s for d, s in enumerate(src.shape))


def _spread(g, n: Node, value: Node) -> Node:
    """A value of the reduction's result shape, broadcast back over the reduced axes."""
    return ops.broadcast_to(g, ops.reshape(g, value, _kept_shape(n)), n.inputs[0].shape)


def _sum_rule(g, n, ct):
    return [(n.inputs[0], _spread(g, n, ct))]


def _extreme_rule(g, n, ct):
    # JAX's rule: the cotangent split equally between the elements equal to the result
    x = n.inputs[0]
    dt = _work(x.dtype)
    hit = _cmp(g, Op.EQ, x, _spread(g, n, n))
    count = _sum(g, ops.cast(g, hit, dt), n.attrs["axes"])
    share = _div(g, ct, count)
    return [(x, _where(g, hit, _spread(g, n, share), _lit(g, 0.0, dt)))]


def _flip(g, x: Node, axis: int) -> Node:
    starts = [0] * x.ndim
    steps = [1] * x.ndim
    starts[axis] = x.shape[axis] - 1
    steps[axis] = -1
    return ops.slice_view(g, x, starts, steps, x.shape)


def _shift_in(g, x: Node, axis: int, fill: float) -> Node:
    """[fill, x0, ..., x_{m-2}] along `axis`: the exclusive form of a scan."""
    m = x.shape[axis]
    head = list(x.shape)
    head[axis] = m - 1
    kept = ops.slice_view(g, x, [0] * x.ndim, [1] * x.ndim, head)
    start = [0] * x.ndim
    start[axis] = 1
    base = ops.broadcast_to(g, _lit(g, fill, x.dtype), x.shape)
    return ops.set_region(g, base, start, [1] * x.ndim, head, kept)


def _prod_rule(g, n, ct):
    # exact with zeros: the product of the others is an exclusive prefix product times an
    # exclusive suffix product (no division)
    x = n.inputs[0]
    axes = n.attrs["axes"]
    kept_axes = [d for d in range(x.ndim) if d not in axes]
    kept = tuple(x.shape[d] for d in kept_axes)
    m = ops.count(x, axes)
    dt = _work(x.dtype)
    t = ops.reshape(g, ops.transpose(g, ops.cast(g, x, dt), kept_axes + list(axes)), kept + (m,))
    last = t.ndim - 1
    left = _shift_in(g, ops.scan(g, Op.CUMPROD, t, last), last, 1.0)
    right = _flip(g, _shift_in(g, ops.scan(g, Op.CUMPROD, _flip(g, t, last), last), last, 1.0),
                  last)
    others = _e(g, Op.MUL, left, right)
    c = ops.broadcast_to(g, ops.reshape(g, ops.cast(g, ct, dt), kept + (1,)), kept + (m,))
    d = _e(g, Op.MUL, c, others)
    # back to x's layout: undo the flattening, then the transpose
    d = ops.reshape(g, d, kept + tuple(x.shape[a] for a in axes))
    order = kept_axes + list(axes)
    inverse = [order.index(k) for k in range(x.ndim)]
    return [(x, ops.transpose(g, d, inverse))]


def _cumsum_rule(g, n, ct):
    axis = n.attrs["axis"]
    return [(n.inputs[0], _flip(g, ops.scan(g, Op.CUMSUM, _flip(g, ct, axis), axis), axis))]


def _cumprod_rule(g, n, ct):
    # d y_j / d x_i = y_j / x_i (j >= i): exact except where x_i = 0 (NaN there; documented)
    x = n.inputs[0]
    axis = n.attrs["axis"]
    acc = _flip(g, ops.scan(g, Op.CUMSUM, _flip(g, _mul(g, ct, n), axis), axis), axis)
    return [(x, _div(g, acc, x))]


def _sort_rule(g, n, ct):
    # sort(x) = x[perm]: the cotangent goes back through the permutation (a scatter)
    x = n.inputs[0]
    axis = n.attrs["axis"]
    perm = ops.sort(g, x, axis, positions=True)
    picks = [perm if d == axis else
             ops.iota(g, tuple(x.shape[d] if j == d else 1 for j in range(x.ndim)), d, np.intp)
             for d in range(x.ndim)]
    return [(x, ops.scatter(g, _zeros(g, x.shape, ct.dtype), ct, picks, 0, "add"))]


RULES.update({Op.SUM: _sum_rule, Op.MAX: _extreme_rule, Op.MIN: _extreme_rule,
              Op.PROD: _prod_rule, Op.CUMSUM: _cumsum_rule, Op.CUMPROD: _cumprod_rule,
              Op.SORT: _sort_rule})


# ---- gathers and scatters ------------------------------------------------------------------------
def _rotation(idx: Node, k: int, size: int):
    """o where the index array along the k-th indexed axis is (iota - o), 0 <= o < size, the
    index of a rotation (np.roll: negative indices wrap); None for any other index."""
    while idx.op is Op.BROADCAST:
        idx = idx.inputs[0]
    o = 0
    if idx.op is Op.SUB:
        value = ops.literal_value(idx.inputs[1])
        if value is None or idx.inputs[1].ndim:
            return None
        o, idx = int(value), idx.inputs[0]
    if idx.op is not Op.IOTA or idx.attrs["axis"] != k or idx.shape[k] != size or \
            not 0 <= o < size or any(s != 1 for d, s in enumerate(idx.shape) if d != k):
        return None
    return o


def _gather_rule(g, n, ct):
    src, *idx = n.inputs
    axis = n.attrs["axis"]
    shifts = [_rotation(ix, k, src.shape[axis + k]) for k, ix in enumerate(idx)]
    if n.shape == src.shape and all(o is not None for o in shifts) and \
            all(ix.ndim == len(idx) for ix in idx):
        # a rotation (np.roll): its adjoint is the inverse rotation, a gather again (no
        # zero fill, no serial scatter), which fuses with the rest of the backward pass
        back = []
        for k, (_ix, o) in enumerate(zip(idx, shifts)):
            size = src.shape[axis + k]
            shape = tuple(size if d == k else 1 for d in range(len(idx)))
            it = ops.iota(g, shape, k, np.intp)
            back.append(it if o == 0 else ops.elementwise(
                g, Op.SUB, np.dtype(np.intp), [it, ops.literal(g, size - o, np.intp)]))
        return [(src, ops.gather(g, ct, back, axis))]
    return [(src, ops.scatter(g, _zeros(g, src.shape, ct.dtype), ct, idx, n.attrs["axis"], "add",
                              strict=bool(n.attrs.get("strict"))))]


def _distinct_constant(g, idx: list) -> bool:
    """Whether constant index arrays address distinct positions (no write overwrites another)."""
    values = [ops._constant_values(g, i) for i in idx]
    if any(v is None for v in values):
        return False
    arrays = np.broadcast_arrays(*values)
    flat = list(zip(*(a.reshape(-1) for a in arrays)))
    return len(set(flat)) == len(flat)


def _scatter_rule(g, n, ct):
    base, values, *idx = n.inputs
    axis, mode = n.attrs["axis"], n.attrs["mode"]
    strict = bool(n.attrs.get("strict"))
    dt = _work(n.dtype)
    zero = _lit(g, 0.0, dt)
    at = ops.gather(g, ct, idx, axis, strict)            # the cotangent at each written place
    if mode == "add":
        return [(base, ct), (values, at)]
    if mode == "set":
        cleared = ops.scatter(g, ct, _zeros(g, values.shape, ct.dtype), idx, axis, "set", strict)
        if _distinct_constant(g, idx):
            return [(base, cleared), (values, at)]
        # of repeated positions only the last write stays (NumPy's order): the others get 0.
        # Each value's flat position in `values` is scattered as a label; reading the labels
        # back says which write won.
        labels = _flat_iota(g, values.shape)
        stays = ops.gather(g, ops.scatter(g, ops.broadcast_to(g, _lit(g, -1, np.int64), base.shape),
                                          labels, idx, axis, "set", strict), idx, axis, strict)
        won = ops.elementwise(g, Op.EQ, np.bool_, [stays, labels])
        return [(base, cleared), (values, _where(g, won, at, zero))]
    if mode in ("max", "min"):
        hit_base = _cmp(g, Op.EQ, base, n)
        hit_values = _cmp(g, Op.EQ, values, ops.gather(g, n, idx, axis, strict))
        return [(base, _where(g, hit_base, ct, zero)), (values, _where(g, hit_values, at, zero))]
    raise TracingError(f"fastlaunch has no gradient rule for np.multiply.at (a scatter of mode "
                       f"{mode!r}); write the product with an explicit gather instead")


def _flat_iota(g, shape) -> Node:
    """Each position's C-order number, int64, over `shape`."""
    total = None
    stride = 1
    for d in reversed(range(len(shape))):
        term = ops.iota(g, shape, d, np.int64)
        if stride != 1:
            term = ops.elementwise(g, Op.MUL, np.int64, [term, _lit(g, stride, np.int64)])
        total = term if total is None else ops.elementwise(g, Op.ADD, np.int64, [total, term])
        stride *= shape[d]
    return total if total is not None else _lit(g, 0, np.int64)


RULES.update({Op.GATHER: _gather_rule, Op.SCATTER: _scatter_rule})


# ---- np.linalg (the standard matrix identities) --------------------------------------------------
_F64 = np.dtype(np.float64)


def _mT(g, a: Node) -> Node:
    return ops.transpose(g, a, tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))


def _mm(g, a: Node, b: Node) -> Node:
    """Batched a @ b (same batch dims)."""
    lb = "abcdefgh"[:a.ndim - 2]
    return ops.contract(g, a, lb + "xz", b, lb + "zy", lb + "xy", _F64)


def _lin(g, fn: str, shape, *inputs) -> Node:
    return g.add(Op.LINALG, _F64, shape, inputs, fn=fn)


def _tril_mask(g, shape, diagonal_weight: float, strict_weight: float = 1.0) -> Node:
    """A float64 matrix mask over the last two dims: strict_weight below the diagonal,
    diagonal_weight on it, 0 above."""
    r = ops.iota(g, shape, len(shape) - 2, np.int64)
    c = ops.iota(g, shape, len(shape) - 1, np.int64)
    below = ops.elementwise(g, Op.GT, np.bool_, [r, c])
    diag = ops.elementwise(g, Op.EQ, np.bool_, [r, c])
    return _where(g, below, _lit(g, strict_weight, _F64),
                  _where(g, diag, _lit(g, diagonal_weight, _F64), _lit(g, 0.0, _F64)))


def _lower_read(g, s: Node) -> Node:
    """The cotangent of a matrix of which only the lower triangle is read (cholesky, eigh):
    an entry below the diagonal stands for both symmetric entries."""
    full = _e(g, Op.ADD, s, _mT(g, s))
    return _where(g, ops.elementwise(g, Op.GT, np.bool_, [
        ops.iota(g, s.shape, s.ndim - 2, np.int64), ops.iota(g, s.shape, s.ndim - 1, np.int64)]),
        full, _mul(g, s, _tril_mask(g, s.shape, 1.0, 0.0)))


def _linalg_rule(g, n, ct):
    fn = n.attrs["fn"]
    ct = ops.cast(g, ct, _F64)
    a = n.inputs[0]
    if fn == "inv":
        yt = _mT(g, n)
        return [(a, _neg(g, _mm(g, _mm(g, yt, ct), yt)))]
    if fn == "solve":
        b = n.inputs[1]
        gb = _lin(g, "solve", b.shape, _mT(g, a), ct)
        return [(a, _neg(g, _mm(g, gb, _mT(g, n)))), (b, gb)]
    if fn in ("det", "slogdet"):
        inv_t = _mT(g, _lin(g, "inv", a.shape, a))
        if fn == "det":
            scale = _e(g, Op.MUL, ct, n)
        else:   # packed (sign, log|det|): the sign has no gradient
            lead = n.ndim - 1
            scale = ops.reshape(g, ops.slice_view(g, ct, (0,) * lead + (1,), (1,) * n.ndim,
                                                  n.shape[:-1] + (1,)), n.shape[:-1])
        s = ops.broadcast_to(g, ops.reshape(g, scale, scale.shape + (1, 1)), a.shape)
        return [(a, _e(g, Op.MUL, s, inv_t))]
    if fn == "cholesky":
        # dL = L phi(L^-1 dA L^-T), phi: the lower triangle with the diagonal halved, so
        # Abar = L^-T phi(L^T Lbar) L^-1 over the entries read
        li = _lin(g, "inv", n.shape, n)
        p = _e(g, Op.MUL, _mm(g, _mT(g, n), ct), _tril_mask(g, n.shape, 0.5))
        s = _mm(g, _mm(g, _mT(g, li), p), li)
        return [(a, _lower_read(g, s))]
    if fn == "eigh":
        m = a.shape[-1]
        lead = n.ndim - 2
        w = ops.reshape(g, ops.slice_view(g, n, (0,) * n.ndim, (1,) * n.ndim,
                                          n.shape[:-2] + (1, m)), n.shape[:-2] + (m,))
        v = ops.slice_view(g, n, (0,) * lead + (1, 0), (1,) * n.ndim, a.shape)
        wbar = ops.reshape(g, ops.slice_view(g, ct, (0,) * n.ndim, (1,) * n.ndim,
                                             n.shape[:-2] + (1, m)), n.shape[:-2] + (m,))
        vbar = ops.slice_view(g, ct, (0,) * lead + (1, 0), (1,) * n.ndim, a.shape)
        # F_ij = 1 / (w_j - w_i) off the diagonal, 0 on it
        wi = ops.broadcast_to(g, ops.reshape(g, w, w.shape[:-1] + (m, 1)), a.shape)
        wj = ops.broadcast_to(g, ops.reshape(g, w, w.shape[:-1] + (1, m)), a.shape)
        eye = ops.elementwise(g, Op.EQ, np.bool_, [ops.iota(g, a.shape, a.ndim - 2, np.int64),
                                                   ops.iota(g, a.shape, a.ndim - 1, np.int64)])
        gap = _e(g, Op.SUB, wj, wi)
        f = _where(g, eye, _lit(g, 0.0, _F64), _div(g, _lit(g, 1.0, _F64),
                                                      _where(g, eye, _lit(g, 1.0, _F64), gap)))
        inner = _e(g, Op.MUL, f, _mm(g, _mT(g, v), vbar))
        diag = _where(g, eye, ops.broadcast_to(g, ops.reshape(g, wbar, wbar.shape[:-1] + (1, m)),
                                               a.shape), _lit(g, 0.0, _F64))
        s = _mm(g, _mm(g, v, _e(g, Op.ADD, diag, inner)), _mT(g, v))
        return [(a, _lower_read(g, s))]
    raise TracingError(f"fastlaunch has no gradient rule for np.linalg.{fn} (inv, solve, det, "
                       f"slogdet, cholesky and eigh have one)")


RULES[Op.LINALG] = _linalg_rule

# every op the IR knows is either given a rule above or listed here as never carrying a
# gradient (tests/unit/test_adjoint.py holds the two lists to the Op enum)
# (LOOP and LOOP_OUT are handled by backward itself: loops.loop_adjoint)
NO_RULE_NEEDED = {Op.ARG, Op.PARAM, Op.CONST, Op.RNG_KEY, Op.LITERAL, Op.IOTA, Op.RANDOM,
                  Op.ITER, Op.LOOP, Op.LOOP_OUT,
                  Op.CHECK, Op.BITCAST, Op.ISNAN, Op.ISINF, Op.ISFINITE, Op.SIGNBIT,
                  Op.LOGICAL_NOT, Op.INVERT, Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE,
                  Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_XOR, Op.BITWISE_AND, Op.BITWISE_OR,
                  Op.BITWISE_XOR, Op.LEFT_SHIFT, Op.RIGHT_SHIFT, Op.ANY, Op.ALL, Op.ARGMAX,
                  Op.ARGMIN, Op.ARGSORT}
# refused with a TracingError naming them
REFUSED = {Op.REAL, Op.IMAG, Op.COMPLEX, Op.NEXTAFTER}

