"""Loops in the graph: a body graph run n times over carried values (`Op.LOOP`).

`traced_loop` traces a step function into a body graph of its own, inside the trace of the
function that calls it (fl.iterate on traced values): the carried values are the body's first
leaves, and every value of the enclosing function the step reads (a closure, a loop-invariant
argument) becomes one more leaf of the body and one more operand of the loop node
(`Graph.enclosing`).  The loop's results are `loop_out` nodes.  ir/fuse.py lowers a loop into the
launches of its body between a loop's begin and end steps, which program/record.py turns into a
bytecode loop; nothing here knows about kernels.

Differentiation (`loop_adjoint`, the rule ir/adjoint.py calls for loop_out nodes) runs the body's
backward pass in reverse iteration order, in loops again, with checkpoints: the forward loop
keeps the carried state every K iterations (`checkpoint` outputs), and the backward pass, one
segment of K iterations at a time from the last, recomputes the segment's states from its
checkpoint, then steps back through them.  Memory: about (n / K + K) states instead of n; time:
about one more forward pass, plus the backward steps.  A loop with `until` ran a number of
iterations known only when it runs: its segments are walked with flags computed from that
count, so no bound beyond the loop's own n is needed.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import adjoint, ops
from ..errors import TracingError
from ..ir.graph import Graph, Node, Op

__all__ = ["LoopBody", "trace_body", "make_loop", "carry_out", "collect_out", "inline",
           "loop_adjoint"]


class LoopBody:
    """A traced step: its graph, the number of carried values, the number of collected
    results, whether it ends with an until flag, and the enclosing values it reads (the loop
    node's operands after the carried ones)."""

    def __init__(self, graph: Graph, ncarry: int, ncollect: int, until: bool, imports: list):
        self.graph = graph
        self.ncarry = ncarry
        self.ncollect = ncollect
        self.until = until
        self.imports = imports


def trace_body(outer: Graph, carried: list, step) -> tuple[LoopBody, list, list]:
    """Trace `step(carried tracers) -> (new carried nodes, collected nodes, flag node or None)`
    into a new body graph inside `outer`'s trace.  carried: (dtype, shape) per carried value.
    Returns (the body, the collected nodes' (dtype, shape), the body's import positions)."""
    from .trace import _state, new_tracer
    body = Graph()
    body.consts = outer.consts            # constants are the enclosing program's
    imports: list = []                    # enclosing nodes read by the body, in leaf order
    imported: dict = {}                   # (graph id, node index) -> body leaf

    def enclosing(node: Node, source: Graph) -> Node:
        if source is not outer:
            if outer.enclosing is None:
                raise TracingError("a traced value of another function is used in a loop body")
            node = outer.enclosing(node, source)       # through the loops around this one
        key = node.index
        leaf = imported.get(key)
        if leaf is None:
            pos = len(carried) + len(imports)
            op = Op.PARAM if _scalar_leaf(node) else Op.ARG
            leaf = body.add(op, node.dtype, node.shape, position=pos)
            imports.append(node)
            imported[key] = leaf
        return leaf
    body.enclosing = enclosing
    previous = _state.graph
    _state.graph = body
    try:
        tracers = [new_tracer(body.add(Op.ARG, dt, shape, position=c), scalar=False)
                   for c, (dt, shape) in enumerate(carried)]
        new, collected, flag = step(tracers)
        if body.checks:
            raise TracingError("a loop body (fl.iterate's step) has runtime checks (an `assert` "
                               "on traced values, or a function that tests its arguments' "
                               "values), which a loop does not run yet")
        if body.random_streams:
            raise TracingError("a loop body (fl.iterate's step) draws random numbers, which "
                               "would be the same in every iteration")
        body.outputs = list(new) + list(collected) + ([flag] if flag is not None else [])
        body.strip_marks()
    finally:
        _state.graph = previous
    shapes = [(n.dtype, n.shape) for n in collected]
    return LoopBody(body, len(carried), len(collected), flag is not None, imports), shapes, []


def _scalar_leaf(node: Node) -> bool:
    """Whether the body reads this enclosing value by value (a parameter or an iteration
    number, through differentiation's marks, which are gone by the time it is fused)."""
    while node.op is Op.MARK:
        node = node.inputs[0]
    return node.op in (Op.PARAM, Op.ITER)


def make_loop(g: Graph, body: LoopBody, inits: list, n: int, checkpoints: int | None = None) -> Node:
    """The loop node: `inits` (the carried values' first values) and the body's imports."""
    if len(inits) != body.ncarry:
        raise ValueError(f"{body.ncarry} carried values, {len(inits)} first values")
    for c, (x, leaf) in enumerate(zip(inits, body.graph.outputs[:body.ncarry])):
        if x.dtype != leaf.dtype or x.shape != leaf.shape:
            raise ValueError(f"carried value {c}: {x.dtype}{list(x.shape)} in, "
                             f"{leaf.dtype}{list(leaf.shape)} out")
    return g.add(Op.LOOP, np.bool_, (), list(inits) + list(body.imports), body=body.graph,
                 n=int(n), ncarry=body.ncarry, ncollect=body.ncollect, until=body.until,
                 checkpoints=checkpoints)


def carry_out(g: Graph, loop: Node, c: int) -> Node:
    x = loop.inputs[c]
    return g.add(Op.LOOP_OUT, x.dtype, x.shape, (loop,), what=("carry", c))


def collect_out(g: Graph, loop: Node, r: int, every: int = 1) -> Node:
    body = loop.attrs["body"]
    v = body.outputs[loop.attrs["ncarry"] + r]
    rows = -(-loop.attrs["n"] // every)
    return g.add(Op.LOOP_OUT, v.dtype, (rows,) + v.shape, (loop,), what=("collect", r, every))


def checkpoint_out(g: Graph, loop: Node, c: int, every: int) -> Node:
    x = loop.inputs[c]
    rows = -(-loop.attrs["n"] // every)
    return g.add(Op.LOOP_OUT, x.dtype, (rows,) + x.shape, (loop,),
                 what=("checkpoint", c, every))


def loop_outputs(loop: Node) -> str:
    """For printing: the loop's shape of work."""
    a = loop.attrs
    return f"n={a['n']} ncarry={a['ncarry']}" + (" until" if a["until"] else "")


# ---- graphs into graphs ------------------------------------------------------------------
def inline(g: Graph, body: Graph, args: list) -> list:
    """body's outputs computed in g from `args` (one node of g per leaf position of body):
    the body's nodes added to g with their leaves replaced; the iteration number stays
    ITER (the body is inlined into another loop body)."""
    mapped: dict[int, Node] = {}
    for n in body.live_nodes():
        if n.op in (Op.ARG, Op.PARAM):
            mapped[n.index] = args[n.attrs["position"]]
        else:
            mapped[n.index] = g.add(n.op, n.dtype, n.shape,
                                    [mapped[i.index] for i in n.inputs], **n.attrs)
    return [mapped[o.index] for o in body.outputs]


# ---- the adjoint of a loop -----------------------------------------------------------------
def loop_adjoint(g: Graph, outs: list, cts: list) -> dict:
    """Cotangents of a loop's operands from those of its results: outs are the loop's
    loop_out nodes that received cotangents, cts theirs.  Returns {operand position: ct}."""
    loop = outs[0].inputs[0]
    a = loop.attrs
    body: Graph = a["body"]
    k, nrec = a["ncarry"], a["ncollect"]
    n = a["n"]
    inits = loop.inputs[:k]
    invs = loop.inputs[k:]
    # cotangents of the final carried values and of the collected rows
    ct_final: list = [None] * k
    ct_rows: dict = {}
    for o, ct in zip(outs, cts):
        what = o.attrs["what"]
        if what[0] == "carry":
            c = what[1]
            ct_final[c] = ct if ct_final[c] is None else adjoint._add(g, ct_final[c], ct)
        elif what[0] == "collect":
            r, every = what[1], what[2]
            if every != 1:
                raise TracingError("the gradient of fl.iterate(collect=k) with k > 1 is not "
                                   "supported: collect every iteration (collect=True)")
            ct_rows[r] = ct if r not in ct_rows else adjoint._add(g, ct_rows[r], ct)
        else:
            raise TracingError("a loop's checkpoints have no gradient")
    if any(nd.op is Op.ITER for nd in body.live_nodes()):
        raise TracingError("a gradient of a gradient through fl.iterate is not supported yet "
                           "(the backward loops read their iteration number): differentiate "
                           "the loop once in reverse mode, or take a Hessian-vector product "
                           "in forward mode, fl.jvp(fl.grad(f), ...)")
    diff_c = [c for c in range(k) if adjoint.differentiable(inits[c].dtype)]
    diff_i = [j for j in range(len(invs)) if adjoint.differentiable(invs[j].dtype)]
    for c in diff_c:
        if ct_final[c] is None:
            ct_final[c] = adjoint._zeros(g, inits[c].shape, inits[c].dtype)
    # the segment length and the checkpoints of the forward loop
    seg = _segment(n, a.get("checkpoints"), a["until"])     # K: iterations per segment
    nseg = -(-n // seg)
    ckpts = [checkpoint_out(g, loop, c, seg) for c in range(k)]
    count = None
    if a["until"]:
        # the number of iterations the forward loop ran: its hidden counter (made by
        # traced_loop as the last carried value of an until loop)
        count = carry_out(g, loop, k - 1)
    # the backward pass over segments, last first: an outer loop over segments whose body
    # recomputes the segment's states and steps back through them
    vjp = _vjp_body(body, k, nrec, a["until"], diff_c, diff_i)
    return _backward_segments(g, loop, vjp, ckpts, ct_final, ct_rows, seg, nseg, count, diff_c,
                              diff_i)


def _segment(n: int, budget, until: bool) -> int:
    """Iterations per segment of the checkpointed backward pass: n / budget (budget: the
    number of checkpoints, about sqrt(n) by default).  For a fixed count, a divisor of n
    near it where one is within a factor of two: every segment is then whole and the
    backward loops run fixed counts (no per-iteration stop flags)."""
    want = -(-n // max(1, min(int(budget), n))) if budget else max(1, math.isqrt(max(n - 1, 0)) + 1)
    if until or n % want == 0:
        return want
    for d in range(want, 2 * want + 1):          # the nearest divisor above, then below
        if n % d == 0:
            return d
    for d in range(want - 1, max(want // 2, 1) - 1, -1):
        if n % d == 0:
            return d
    return want


class _VJPBody:
    """The backward step: from (carried x_i, invariants, ct of x_{i+1}, cts of the collected
    values of iteration i) to (ct of x_i, the invariants' cotangent contributions)."""

    def __init__(self, graph, ncarry, ninv, ncollect, diff_c, diff_i):
        self.graph = graph
        self.ncarry, self.ninv, self.ncollect = ncarry, ninv, ncollect
        self.diff_c, self.diff_i = diff_c, diff_i


def _vjp_body(body: Graph, k: int, nrec: int, until: bool, diff_c, diff_i) -> _VJPBody:
    """A graph whose leaves are [x_0..x_{k-1}, inv_0.., ct_x (diff_c), ct_collect (nrec)]
    and outputs [ct_x_in (diff_c), ct_inv (diff_i)]; a cotangent with no path is zero."""
    from .trace import _state
    ninv = len([n for n in body.live_nodes() if n.op in (Op.ARG, Op.PARAM)
                and n.attrs["position"] >= k])
    leaves = {n.attrs["position"]: n for n in body.live_nodes() if n.op in (Op.ARG, Op.PARAM)}
    npos = max(leaves, default=-1) + 1
    g = Graph()
    g.consts = body.consts
    previous = getattr(_state, "graph", None)
    _state.graph = g
    try:
        args = []
        for p in range(npos):
            leaf = leaves.get(p)
            if leaf is None:              # a position the body does not read
                args.append(None)
                continue
            node = g.add(leaf.op, leaf.dtype, leaf.shape, position=p)
            args.append(adjoint.mark(g, node, "var") if adjoint.differentiable(leaf.dtype)
                        else node)
        pos = npos
        ct_x = []
        for c in diff_c:
            x = body.outputs[c]
            ct_x.append(g.add(Op.ARG, x.dtype, x.shape, position=pos))
            pos += 1
        ct_r = []
        for r in range(nrec):
            v = body.outputs[k + r]
            ct_r.append(g.add(Op.ARG, v.dtype, v.shape, position=pos)
                        if adjoint.differentiable(v.dtype) else None)
            pos += 1
        outs = inline(g, body, [a if a is not None else None for a in args])
        seeds = [(outs[c], ct) for c, ct in zip(diff_c, ct_x)]
        seeds += [(outs[k + r], ct) for r, ct in enumerate(ct_r) if ct is not None]
        wrt = [args[c] for c in diff_c] + [args[k + j] for j in diff_i]
        got = adjoint.backward(g, seeds, wrt)
        results = []
        for node, w in zip(got, wrt):
            results.append(node if node is not None else
                           adjoint._zeros(g, w.shape, w.dtype))
        g.outputs = [ops.cast(g, r, w.dtype) for r, w in zip(results, wrt)]
        g.strip_marks()
    finally:
        _state.graph = previous
    return _VJPBody(g, k, ninv, nrec, diff_c, diff_i)


class _Builder:
    """A loop body built node by node (the backward pass's loops): carried leaves first,
    then a leaf for each value of the enclosing graph it reads (`imp`)."""

    def __init__(self, parent: Graph, carried: list):
        self.parent = parent
        self.g = Graph()
        self.g.consts = parent.consts
        self.carried = [self.g.add(Op.ARG, dt, shape, position=c)
                        for c, (dt, shape) in enumerate(carried)]
        self.imports: list = []
        self._leaf: dict = {}

    def imp(self, node: Node) -> Node:
        leaf = self._leaf.get(node.index)
        if leaf is None:
            pos = len(self.carried) + len(self.imports)
            op = Op.PARAM if _scalar_leaf(node) else Op.ARG
            leaf = self._leaf[node.index] = self.g.add(op, node.dtype, node.shape, position=pos)
            self.imports.append(node)
        return leaf

    def iteration(self) -> Node:
        return self.g.add(Op.ITER, np.int64, ())

    def finish(self, new: list, collected: list, flag: Node | None) -> LoopBody:
        self.g.outputs = list(new) + list(collected) + ([flag] if flag is not None else [])
        return LoopBody(self.g, len(self.carried), len(collected), flag is not None,
                        self.imports)


_I64 = np.dtype(np.int64)


def _i(g: Graph, op: Op, *xs) -> Node:
    return ops.elementwise(g, op, np.bool_ if op in (Op.GE, Op.LT) else _I64,
                           [x if isinstance(x, Node) else ops.literal(g, x, _I64) for x in xs])


def _row(g: Graph, stack: Node, index: Node) -> Node:
    return ops.gather(g, stack, [index], 0)


def _stacked(g: Graph, first: Node, rows: Node | None, count: int) -> Node:
    """[first, rows[0], ..., rows[count - 2]] along a new leading axis."""
    shape = first.shape
    base = ops.broadcast_to(g, ops.literal(g, 0, first.dtype), (count,) + shape)
    base = ops.set_region(g, base, (0,) * (len(shape) + 1), (1,) * (len(shape) + 1),
                          (1,) + shape, ops.reshape(g, first, (1,) + shape))
    if count > 1:
        part = ops.slice_view(g, rows, (0,) * (len(shape) + 1), (1,) * (len(shape) + 1),
                              (count - 1,) + shape)
        base = ops.set_region(g, base, (1,) + (0,) * len(shape), (1,) * (len(shape) + 1),
                              (count - 1,) + shape, part)
    return base


def _backward_segments(g, loop, vjp, ckpts, ct_final, ct_rows, seg, nseg, count, diff_c,
                       diff_i) -> dict:
    """The backward pass of `loop` as loops: an outer one over the segments, last first, each
    iteration recomputing the segment's states from its checkpoint (an inner loop that
    collects them) and stepping back through them (a second inner loop running the backward
    step).  Segment lengths and the number of segments come from the count of iterations
    the forward loop ran (`count`, for an until loop) or its n, through flags."""
    a = loop.attrs
    body: Graph = a["body"]
    k = a["ncarry"]
    inits, invs = loop.inputs[:k], loop.inputs[k:]
    # whole segments of a fixed count: fixed loop counts, no stop flags
    whole = count is None and a["n"] % seg == 0
    n_eff = count if count is not None else ops.literal(g, a["n"], _I64)
    nseg_eff = _i(g, Op.FLOORDIV, _i(g, Op.ADD, n_eff, seg - 1), seg)
    starts = [_stacked(g, inits[c], ckpts[c], nseg) for c in range(k)]
    nd = len(diff_c)
    accs = [invs[j] for j in diff_i]

    # the outer loop: carries the cotangent of the state and the invariants' sums
    B = _Builder(g, [(inits[c].dtype, inits[c].shape) for c in diff_c] +
                 [(w.dtype, w.shape) for w in accs])
    bg = B.g
    t = B.iteration()
    s = _i(bg, Op.SUB, ops.literal(bg, nseg - 1, _I64) if whole else
           _i(bg, Op.SUB, B.imp(nseg_eff), 1), t)
    first = _i(bg, Op.MUL, s, seg)
    m = ops.literal(bg, seg, _I64) if whole else ops.elementwise(
        bg, Op.MINIMUM, _I64, [ops.literal(bg, seg, _I64), _i(bg, Op.SUB, B.imp(n_eff), first)])
    x_s = [_row(bg, B.imp(starts[c]), s) for c in range(k)]
    inv_b = [B.imp(v) for v in invs]

    # recompute: the segment's states, each iteration's input collected
    R = _Builder(bg, [(x.dtype, x.shape) for x in inits])
    rg = R.g
    r_iter = R.iteration()
    outs = inline(rg, body, list(R.carried) + [R.imp(v) for v in inv_b])
    stop = None if whole else _i(rg, Op.GE, _i(rg, Op.ADD, r_iter, 1), R.imp(m))
    recompute = make_loop(bg, R.finish(outs[:k], list(R.carried), stop), x_s, seg)
    states = [collect_out(bg, recompute, c) for c in range(k)]

    # step back through them: j = m - 1, ..., 0
    V = _Builder(bg, [(x.dtype, x.shape) for x in B.carried])
    vg = V.g
    u = V.iteration()
    mv = m if whole else V.imp(m)
    j = _i(vg, Op.SUB, seg - 1 if whole else _i(vg, Op.SUB, mv, 1), u)
    xs = [_row(vg, V.imp(st), j) for st in states]
    invs_v = [V.imp(v) for v in inv_b]
    cts_x = V.carried[:nd]
    nrec = a["ncollect"]
    cts_y = []
    for r in range(nrec):
        v = body.outputs[k + r]
        if r in ct_rows:
            at = _i(vg, Op.ADD, V.imp(first), j)
            cts_y.append(_row(vg, V.imp(B.imp(ct_rows[r])), at))
        else:
            cts_y.append(adjoint._zeros(vg, v.shape, v.dtype) if adjoint.differentiable(v.dtype)
                         else None)
    back = inline(vg, vjp.graph, xs + invs_v + list(cts_x) + cts_y)
    new_ct = back[:nd]
    sums = [adjoint._add(vg, acc, ops.cast(vg, w, acc.dtype))
            for acc, w in zip(V.carried[nd:], back[nd:])]
    stop_v = None if whole else _i(vg, Op.GE, _i(vg, Op.ADD, u, 1), mv)
    stepped = make_loop(bg, V.finish(new_ct + sums, [], stop_v), list(B.carried), seg)
    b_new = [carry_out(bg, stepped, i) for i in range(len(B.carried))]
    stop_b = None if whole else _i(bg, Op.GE, _i(bg, Op.ADD, t, 1), B.imp(nseg_eff))
    first_cts = [ops.cast(g, ct_final[c], inits[c].dtype) for c in diff_c] + \
        [adjoint._zeros(g, w.shape, w.dtype) for w in accs]
    outer = make_loop(g, B.finish(b_new, [], stop_b), first_cts, nseg)
    found = {}
    for i, c in enumerate(diff_c):
        found[c] = carry_out(g, outer, i)
    for i, jv in enumerate(diff_i):
        found[k + jv] = carry_out(g, outer, nd + i)
    return found


def loop_tangent(g: Graph, loop: Node, tan: dict) -> dict:
    """Forward mode through a loop: {loop_out index: tangent} for its results, from the
    tangents `tan` of its operands.  The tangent loop carries each value and its tangent; its
    body is the body and the body's own forward-mode tangents (adjoint.forward)."""
    a = loop.attrs
    body: Graph = a["body"]
    k, nrec = a["ncarry"], a["ncollect"]
    inits, invs = loop.inputs[:k], loop.inputs[k:]
    dc = [c for c in range(k) if adjoint.differentiable(inits[c].dtype)]
    B = _Builder(g, [(x.dtype, x.shape) for x in inits] + [(inits[c].dtype, inits[c].shape)
                                                           for c in dc])
    bg = B.g
    inv_leaves = [B.imp(v) for v in invs]
    seeds = {B.carried[c].index: B.carried[k + i] for i, c in enumerate(dc)}
    for j, v in enumerate(invs):
        if v.index in tan:
            seeds[inv_leaves[j].index] = B.imp(tan[v.index])
    outs = inline(bg, body, list(B.carried[:k]) + inv_leaves)
    touts = adjoint.forward(bg, seeds, outs)

    def zero_like(x):
        return adjoint._zeros(bg, x.shape, x.dtype)
    new = list(outs[:k]) + [ops.cast(bg, touts[c], outs[c].dtype) if touts[c] is not None
                            else zero_like(outs[c]) for c in dc]
    dr = [r for r in range(nrec) if adjoint.differentiable(outs[k + r].dtype)]
    collected = list(outs[k:k + nrec]) + [
        ops.cast(bg, touts[k + r], outs[k + r].dtype) if touts[k + r] is not None
        else zero_like(outs[k + r]) for r in dr]
    flag = outs[k + nrec] if a["until"] else None
    firsts = list(inits) + [tan[inits[c].index] if inits[c].index in tan else
                            adjoint._zeros(g, inits[c].shape, inits[c].dtype) for c in dc]
    tl = make_loop(g, B.finish(new, collected, flag), firsts, a["n"], a.get("checkpoints"))
    found = {}
    for n in g.nodes[loop.index + 1:]:
        if n.op is not Op.LOOP_OUT or n.inputs[0] is not loop:
            continue
        what = n.attrs["what"]
        if what[0] == "carry" and what[1] in dc:
            found[n.index] = carry_out(g, tl, k + dc.index(what[1]))
        elif what[0] == "collect" and what[1] in dr:
            found[n.index] = collect_out(g, tl, nrec + dr.index(what[1]), what[2])
        elif what[0] == "checkpoint" and what[1] in dc:
            found[n.index] = checkpoint_out(g, tl, k + dc.index(what[1]), what[2])
    return found


adjoint.LOOP_RULE = loop_adjoint
adjoint.LOOP_TANGENT = loop_tangent
