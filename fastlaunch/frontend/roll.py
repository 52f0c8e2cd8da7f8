"""Python loops rolled into loop nodes: a traced graph's repeated iterations become one body.

A `for` loop inside a traced function is traced by running it: each iteration adds the same
operations again, on the values the previous iteration made.  `roll_loops` finds such runs
after the trace and replaces them by one `Op.LOOP` whose body is one iteration (frontend/loops.py), so
fusion, code generation and recording see one iteration, not thousands.

Where iterations start comes from the tracer: every node made while tracing carries its
*site*, the frame of the traced function's code that made it and the bytecode offset it was
at (`Graph.sites`, set by frontend/trace.py).  An offset below the previous node's, in the same frame,
is a jump back: a new iteration.  Consecutive iterations are then compared node by node; a
run is rolled only where they are identical: the same operations with the same attributes,
dtypes and shapes, each operand either a node of the same iteration at the same place, the
node at that place in the iteration before (a carried value), or one node outside the run
that every iteration reads (a loop-invariant value).  Anything else (a body that changes, a
value read two iterations later, random numbers, runtime checks, a value of a middle
iteration read after the loop) leaves the iterations as they were: the result is the same
either way.  The first iteration is never rolled: it is where values computed once (loop
invariants that hash-consing hoists) are made.

`roll_loops` runs after the trace and rebuilds the graph.  `roll_traced` runs in the middle of
one (before a differentiation builds its backward pass, grad.py), where tracers still hold
nodes: it appends the loop and the nodes that read it, and leaves the old ones in place.
"""
from __future__ import annotations

from . import loops
from ..ir import ops
from ..ir.graph import Graph, Node, Op

__all__ = ["roll_loops", "roll_traced", "MIN_ITERATIONS"]

# Runs shorter than this stay unrolled: a short unrolled loop may fuse across iterations.
MIN_ITERATIONS = 16
# An iteration may span up to this many pieces between jumps back (a short inner loop).
GROUPS = 4


def _new_iteration(a, b) -> bool:
    """Whether the node made at site b starts a new iteration after the one made at site a:
    at the outermost frame where they differ, the offset jumped back, or the frames differ
    under the same caller at the same instruction (that instruction called again)."""
    for (fa, la), (fb, lb) in zip(a, b):
        if fa is not fb:
            return True          # the level above is the same frame at the same offset
        if la != lb:
            return lb < la
    return False


def _segments(g: Graph, start: int = 0) -> list:
    """[start, end) node index ranges from `start` on, one per iteration of a loop of the
    traced code."""
    sites = g.sites
    cuts = [start]
    for t in range(start + 1, len(sites)):
        a, b = sites[t - 1], sites[t]
        if a is not None and b is not None and _new_iteration(a, b):
            cuts.append(t)
    cuts.append(len(sites))
    return [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1) if cuts[i + 1] > cuts[i]]


def _keys(g: Graph) -> list:
    """Per node, what two iterations' nodes at the same place must share (op, dtype, shape,
    attributes, operand count) and its operands' indices: from Graph.add's hash-consing key
    (attributes keyed by value, NumPy scalars by their bytes), read once per search."""
    return [((k[0], k[1], k[2], k[4], len(k[3])), k[3]) for k in [n.key for n in g.nodes]]


def _same(g: Graph, a: tuple, b: tuple, strict: bool, keys: list):
    """Whether iteration b repeats iteration a; returns the carried local positions (a's
    nodes that b reads at b's own place), or None.  strict: a's reads of the iteration
    before it must be at the same places too (a is not the run's first iteration).
    keys: `_keys(g)`."""
    (a0, a1), (b0, b1) = a, b
    if a1 - a0 != b1 - b0:
        return None
    width = a1 - a0
    carried = set()
    for j in range(width):
        (kx, xin), (ky, yin) = keys[a0 + j], keys[b0 + j]
        if kx != ky:
            return None
        for u, v in zip(xin, yin):
            if b0 <= v < b1:                             # b reads its own: so must a
                if u != a0 + (v - b0):
                    return None
            elif a0 <= v < a1:                           # b reads a: a reads the one before
                p = v - a0
                if u >= a0 or (strict and u != a0 - width + p):
                    return None
                if keys[u][0][1:3] != keys[a0 + p][0][1:3]:
                    return None
                carried.add(p)
            elif u != v:                                 # an invariant: the same node
                return None
    return carried


def _find_runs(g: Graph, start: int, min_iterations: int) -> list:
    """The runs of at least `min_iterations` identical iterations among nodes start.. of g:
    (iteration ranges, first rolled, last rolled, carried positions) each, in node order."""
    pieces = [(a, b) for a, b in _segments(g, start)]
    keys = _keys(g) if len(pieces) > 2 else []
    runs = []
    i = 1
    while i < len(pieces) - 1:
        # an iteration is one piece, or several (a loop inside the loop, a body that repeats
        # every few pieces): the grouping that rolls the most pieces
        best = None
        for k in range(1, GROUPS + 1):
            segs = [(pieces[s][0], pieces[s + k - 1][1])
                    for s in range(i - k if i >= k else i, len(pieces) - k + 1, k)]
            first = 1 if i >= k else 0
            if first >= len(segs):
                continue
            j = first
            carried: set = set()
            while j + 1 < len(segs):
                c = _same(g, segs[j], segs[j + 1], j > first, keys)
                if c is None:
                    break
                carried |= c
                j += 1
            count = j - first + 1
            if first == 1 and count >= min_iterations and \
                    (best is None or count * k > best[0]):
                best = (count * k, segs, first, j, carried, k)
                if k == 1 and j + 1 == len(segs):
                    break       # every piece to the end: no grouping rolls more
        if best is not None:
            _, segs, first, last, carried, k = best
            runs.append((segs, first, last, sorted(carried)))
            i += (last - first + 1) * k
        else:
            i += 1
    return runs


def roll_loops(g: Graph, min_iterations: int | None = None) -> list:
    """Roll every run of at least `min_iterations` identical iterations (see the module's
    docstring) into a loop node, rebuilding g in place.  Returns the rolled runs' iteration
    counts, those rolled while tracing (`roll_traced`) first."""
    before = list(g.rolled_while_tracing)
    if min_iterations is None:
        min_iterations = MIN_ITERATIONS
    if g.sites is None or len(g.sites) != len(g.nodes):
        return before
    runs = _find_runs(g, 0, min_iterations)
    rolled = []
    for segs, first, last, carried in reversed(runs):   # later runs first: indices stay valid
        if _roll(g, segs, first, last, carried):
            rolled.append(last - first + 1)
    return before + rolled[::-1]


def roll_traced(g: Graph, start: int, roots: list,
                min_iterations: int | None = None) -> dict:
    """Roll the runs of identical iterations among g's nodes start.. in the middle of a trace
    (before a differentiation builds its backward pass on them, grad.py): nothing is
    rebuilt, because the trace's tracers still hold nodes.  Each rolled run becomes a loop
    node appended to g, and the nodes after the run that `roots` need are made again after
    it, reading the loop's results.  The old nodes stay valid: a value nobody named in
    `roots` still reads the unrolled iterations (correct, only not rolled).  A run is rolled
    only where every value read after it, by a node `roots` need or by a root itself, is one
    of its last iteration's.  Returns {old node index: new node} for every node made again
    (the roots among them are what the caller rebinds); the iteration counts rolled are
    added to `g.rolled_while_tracing`, which `roll_loops` reports."""
    if min_iterations is None:
        min_iterations = MIN_ITERATIONS
    if g.sites is None or len(g.sites) != len(g.nodes):
        return {}
    runs = _find_runs(g, start, min_iterations)
    if not runs:
        return {}
    nodes = g.nodes
    end = len(nodes)
    live = _ancestors(roots, start)
    plans = []
    for segs, first, last, carried in runs:
        plan = _plan(g, segs, first, last, carried, live, [r for r in roots])
        if plan is not None:
            plans.append(plan)
    if not plans:
        return {}
    # a node made again must not be one whose meaning is tied to its identity: a custom
    # rule's mark (its rule names the old nodes) or a loop's checkpoints read elsewhere
    mapped: dict[int, Node] = {}
    affected = set()
    for plan in plans:
        affected.update(range(plan.lo, plan.hi))
    for n in nodes[plans[0].lo:end]:
        if n.index in live and n.index not in affected and \
                any(u.index in affected for u in n.inputs):
            affected.add(n.index)
            if n.op is Op.MARK and n.attrs["role"] == "custom":
                return {}

    def m(u: Node) -> Node:
        return mapped.get(u.index, u)

    def again(upto: int, frm: int) -> None:
        for n in nodes[frm:upto]:
            if n.index in live and any(u.index in mapped for u in n.inputs):
                mapped[n.index] = g.add(n.op, n.dtype, n.shape, [m(u) for u in n.inputs],
                                        **n.attrs)
    at = plans[0].lo
    counts = []
    for plan in plans:
        again(plan.lo, at)
        inits = [m(x) if x is not None else _zeros(g, like)
                 for x, like in zip(plan.inits, plan.likes)]
        lb = loops.LoopBody(plan.body, len(plan.outs), 0, False, [m(u) for u in plan.imports])
        loop = loops.make_loop(g, lb, inits, plan.count)
        for k, p in enumerate(plan.outs):
            mapped[plan.l0 + p] = loops.carry_out(g, loop, k)
        counts.append(plan.count)
        at = plan.hi
    again(end, at)
    # the replaced nodes are no longer iterations of anything (the final roll skips them)
    sites = g.sites
    for i in affected:
        sites[i] = None
    g.rolled_while_tracing = g.rolled_while_tracing + counts
    return mapped


def _ancestors(roots: list, start: int) -> set:
    """Indices of the nodes from `start` on that the roots read, themselves included."""
    seen: set = set()
    stack = [r for r in roots if r.index >= start]
    while stack:
        n = stack.pop()
        if n.index in seen:
            continue
        seen.add(n.index)
        stack.extend(u for u in n.inputs if u.index >= start)
    return seen


class _Plan:
    """One run to roll: its node range [lo, hi), its last iteration's start l0, the body
    and the loop's operands (old nodes: the first values, None for a zero, and imports)."""

    def __init__(self, lo, hi, l0, body, outs, inits, likes, imports, count):
        self.lo, self.hi, self.l0 = lo, hi, l0
        self.body, self.outs, self.inits, self.likes = body, outs, inits, likes
        self.imports, self.count = imports, count


def _plan(g: Graph, segs: list, first: int, last: int, carried: list, live: set,
          roots: list) -> _Plan | None:
    """The loop replacing iterations segs[first..last] (their nodes stay), or None where
    the run cannot be rolled.  live: the nodes that count as read (indices); roots: the
    values read after everything (results, writebacks, checks)."""
    nodes = g.nodes
    lo, hi = segs[first][0], segs[last][1]
    a0, a1 = segs[first]
    width = a1 - a0
    # values read after the run (later nodes, results, writebacks, the check): only nodes of
    # the last iteration, each of which the loop hands out as a carried value
    read_after: dict = {}
    for n in nodes[hi:]:
        if n.index in live:
            for u in n.inputs:
                if lo <= u.index < hi:
                    read_after[u.index] = u
    for n in roots:
        if lo <= n.index < hi:
            read_after[n.index] = n
    l0 = segs[last][0]
    if any(not l0 <= i < hi for i in read_after):
        return None
    outs = sorted(set(carried) | {i - l0 for i in read_after})
    # the first rolled iteration's operands: carried ones from the iteration before
    first_in: dict = {}
    for j in range(width):
        y = nodes[a0 + j]
        nxt = nodes[a1 + j] if first < last else None
        for q, u in enumerate(y.inputs):
            if nxt is not None and a0 <= nxt.inputs[q].index < a1 and not a0 <= u.index < a1:
                p = nxt.inputs[q].index - a0
                if first_in.setdefault(p, u) is not u:
                    return None
    # the body: one iteration, its carried values as leaves
    body = Graph()
    body.consts = g.consts
    leaf_of = {}
    pos_of = {p: k for k, p in enumerate(outs)}
    for p in outs:
        x = nodes[a0 + p]
        leaf_of[p] = body.add(Op.ARG, x.dtype, x.shape, position=pos_of[p])
    imports: list = []
    imported: dict = {}
    copied: dict = {}

    class _Inside(Exception):
        pass

    def outside(u: Node) -> Node:
        if u.index in copied:
            return copied[u.index]
        if u.index >= lo:
            raise _Inside        # an iteration reads one two or more before it: not a loop
        if _constant(u):
            made = body.add(u.op, u.dtype, u.shape, [outside(i) for i in u.inputs], **u.attrs)
        else:
            made = imported.get(u.index)
            if made is None:
                # a parameter (through differentiation's marks) is read by value
                op = Op.PARAM if loops._scalar_leaf(u) else Op.ARG
                made = body.add(op, u.dtype, u.shape, position=len(outs) + len(imports))
                imports.append(u)
                imported[u.index] = made
        copied[u.index] = made
        return made
    mine: dict = {}
    try:
        _body_nodes(body, nodes, a0, a1, first < last, mine, leaf_of, outside)
    except _Inside:
        return None
    if any(y.op in (Op.RANDOM, Op.RNG_KEY, Op.MARK) for y in nodes[a0:a1]):
        return None
    for p in first_in:
        x, u = nodes[a0 + p], first_in[p]
        if (u.dtype, u.shape) != (x.dtype, x.shape):
            return None
    body.outputs = [mine[p] for p in outs]
    return _Plan(lo, hi, l0, body, outs, [first_in.get(p) for p in outs],
                 [nodes[a0 + p] for p in outs], imports, last - first + 1)


def _roll(g: Graph, segs: list, first: int, last: int, carried: list) -> bool:
    """Replace iterations segs[first..last] by a loop over segs[first]'s nodes, rebuilding
    g (after the trace: only its results, writebacks and checks hold nodes)."""
    live = {n.index for n in g.live_nodes()}
    roots = list(g.outputs) + [n for _, n in g.writebacks] + \
        ([g.check] if g.check is not None else []) + [c for c, _, _ in g.checks]
    plan = _plan(g, segs, first, last, carried, live, roots)
    if plan is None:
        return False
    lo, hi, l0 = plan.lo, plan.hi, plan.l0
    # rebuild g: the nodes before the run, the loop, the nodes after it (reading the loop's
    # results where they read the last iteration)
    old = g.nodes
    outputs, writebacks, check, checks = g.outputs, g.writebacks, g.check, g.checks
    g.nodes, g._interned, g.sites = [], {}, None
    mapped: dict[int, Node] = {}

    def readd(n: Node) -> Node:
        return g.add(n.op, n.dtype, n.shape, [mapped[i.index] for i in n.inputs], **n.attrs)
    for n in old[:lo]:
        mapped[n.index] = readd(n)
    init_nodes = [mapped[x.index] if x is not None else _zeros(g, like)
                  for x, like in zip(plan.inits, plan.likes)]
    lb = loops.LoopBody(plan.body, len(plan.outs), 0, False,
                        [mapped[u.index] for u in plan.imports])
    loop = loops.make_loop(g, lb, init_nodes, plan.count)
    for k, p in enumerate(plan.outs):
        mapped[l0 + p] = loops.carry_out(g, loop, k)
    for n in old[hi:]:
        if n.index in live:
            mapped[n.index] = readd(n)
    g.outputs = [mapped[n.index] for n in outputs]
    g.writebacks = [(pos, mapped[n.index]) for pos, n in writebacks]
    g.check = mapped[check.index] if check is not None else None
    g.checks = [(mapped[c.index], e, m) for c, e, m in checks]
    return True


def _body_nodes(body, nodes, a0, a1, has_next, mine, leaf_of, outside):
    """The first rolled iteration's nodes into the body: own operands as body nodes, the
    carried ones (read from the iteration before, where the next iteration reads this one)
    as leaves, the rest through `outside`."""
    width = a1 - a0
    for j in range(width):
        y = nodes[a0 + j]
        ins = []
        for q, u in enumerate(y.inputs):
            if a0 <= u.index < a1:
                ins.append(mine[u.index - a0])
            elif has_next and a0 <= nodes[a1 + j].inputs[q].index < a1:
                ins.append(leaf_of[nodes[a1 + j].inputs[q].index - a0])
            else:
                ins.append(outside(u))
        mine[j] = body.add(y.op, y.dtype, y.shape, ins, **y.attrs)


def _constant(n: Node) -> bool:
    """A value that depends on no argument: rebuilt inside the body rather than read."""
    stack, seen = [n], set()
    while stack:
        x = stack.pop()
        if x.index in seen:
            continue
        seen.add(x.index)
        if x.op in (Op.ARG, Op.PARAM, Op.RNG_KEY, Op.RANDOM, Op.ITER, Op.LOOP, Op.LOOP_OUT,
                    Op.MARK) or x.op.kind.value == "library":
            return False
        stack.extend(x.inputs)
    return True


def _zeros(g: Graph, like: Node) -> Node:
    return ops.broadcast_to(g, ops.literal(g, 0, like.dtype), like.shape)
