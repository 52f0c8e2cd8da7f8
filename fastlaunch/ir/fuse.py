"""Partition a Graph into Kernels.

Elementwise work, views and gathers are inlined into whichever kernel consumes them: views
become index arithmetic and gathers data-dependent indices, never copies.  A value is
materialised into a buffer only where it must be: a reduction or scan result, the source of a
gather when it is computed, an updated array read as a value, or a result.  Results of one
iteration space share one kernel; a value computed elementwise from one reduction alone (a
mean: the sum divided by the count) is stored by that reduction's kernel, its epilogue; a
kernel storing what reads a pack (small matrices written out entry by entry) unrolls the
packed dims, so each store reads its entry.  In-place updates of inputs are written last,
after every read of the old values, and through a temporary where a kernel would read what it
overwrites; their indices are checked before the first write, so a bad index leaves the
inputs untouched.

Size: over 1,000 lines: the fusion rules share the fuser's state (buffers, users, what is
materialised) and call one another while one kernel is built, so they stay in one module of
the ir/ folder; the rule families (row, sibling, pack) are the parts to move out, as mixins of
the fuser, when a new rule family is added.
"""
from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from . import ops
from .graph import Graph, Kind, Node, Op
from .leaves import contiguous_strides
from .kernel import RANDOM_COST, TRANSCENDENTAL, TRANSCENDENTAL_COST, Compute, Const, DivMod, Folded
from .kernel import Index, IndexValue, LibraryCall, LoopBegin, LoopEnd, Phase, accumulator_dtype
from .kernel import Kernel, KernelArg, Load, Pick, Random, Reduced, Reduction, Scalar, Sort, Store
from .kernel import address, coalesce, expression_operands, idents, index_picks, is_kernel
from .kernel import set_extents, simplify, walk

# LLVM's optimiser takes time quadratic in the size of a loop body (measured here: 0.15 s at
# 1000 operations, 2.4 s at 4000), so a fused expression growing past this many operations
# is cut: the value at the cut is materialised and read by the rest.  Unrolled Python loops
# of many thousand steps then compile in linear time.
MAX_KERNEL_OPS = 1000
# A value with several users is inlined into each of them; past this many operations it is
# materialised once instead (x = x - x.mean() repeated would otherwise recompute the whole
# chain inside every reduction: quadratic work).  Below it, recomputing beats a memory pass.
RECOMPUTE_OPS = 64

# Row fusion (`_Fuser.row_fused`) folds reductions of rows up to this many bytes in a kernel's
# prelude: each phase re-reads the row, which then comes from the L1 cache.
ROW_CACHE_BYTES = 16384
_ROW_OPS = (Op.SUM, Op.PROD, Op.MAX, Op.MIN, Op.ANY, Op.ALL)

# Reductions whose result a kernel epilogue may take over (`_Fuser.epilogues`).
_EPILOGUE_OPS = (Op.SUM, Op.PROD, Op.MAX, Op.MIN, Op.ANY, Op.ALL)

_UPDATES = (Kind.UPDATE, Kind.SCATTER)
_LOOP_IDS = itertools.count()         # loop labels in plans (for reading; record matches by nesting)
_SCALAR_ROLES = ("param", "rng", "iter")      # buffers passed to kernels by value

# A store kernel whose values read a pack (ir.Op.PACK) at its own index unrolls the pack's
# trailing dims, up to this many elements (a 16 x 16 matrix): each store then reads its
# entry's expression directly and the entries' shared computation is done once per batch
# element, fused with the elementwise work around it.
UNROLL_PACKED = 256


class BufferRole(str, enum.Enum):
    """What a plan buffer holds.  A str enum: it compares equal to (and prints as) its
    value."""
    INPUT = "input"      # an array argument
    PARAM = "param"      # a scalar argument
    CONST = "const"      # an array the trace captured
    OUTPUT = "output"    # a result
    TEMP = "temp"        # a materialised intermediate
    STATUS = "status"    # the call's error word
    RNG = "rng"          # the call's random key
    ALIAS = "alias"      # a loop's carried or row view: a slot the loop points at its buffers
    ITER = "iter"        # a loop's iteration number, passed by value

    def __str__(self) -> str:
        return self.value


@dataclass
class Buffer:
    id: int
    role: BufferRole     # given as a BufferRole or its value
    dtype: np.dtype
    size: int            # elements (0 for params)
    ref: int = -1        # input/param position, const index or output index
    strides: tuple = ()  # element strides of the buffer as the kernels address it
    shape: tuple = ()

    def __post_init__(self):
        self.role = BufferRole(self.role)


@dataclass
class Plan:
    buffers: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    outputs: list = field(default_factory=list)    # buffer id per graph output
    checks: list = field(default_factory=list)     # Graph.check_errors: (bit, exception, message)

    def describe(self) -> str:
        return "\n\n".join(f"# kernel {i}\n{k.describe()}" for i, k in enumerate(self.kernels))

    def compiled_kernels(self) -> list:
        """The steps that are kernels (the program's kernel table), without library calls."""
        return [k for k in self.kernels if is_kernel(k)]

    def add_temp(self, dtype, shape) -> Buffer:
        """A new C-ordered temporary (for a backend's schedule: e.g. reduction partials)."""
        buf = Buffer(len(self.buffers), "temp", np.dtype(dtype),
                     int(np.prod(shape, dtype=np.int64)), -1, contiguous_strides(shape),
                     tuple(shape))
        self.buffers.append(buf)
        return buf

    def with_kernels(self, kernels) -> "Plan":
        """A copy with other kernels (and its own list of the same buffers, to which a
        schedule may add temporaries without changing this plan)."""
        return Plan(list(self.buffers), list(kernels), list(self.outputs), list(self.checks))


def plan(graph: Graph, arg_layouts: dict) -> Plan:
    """arg_layouts: input position -> element strides of that argument."""
    return _Fuser(unroll_small_reductions(graph), arg_layouts).run()


# ---- small reductions ----------------------------------------------------------------------
def unroll_small_reductions(graph: Graph) -> Graph:
    """The graph with its small reductions (REDUCE nodes that ops.reduce marked `unroll`: at
    most ops.SMALL_REDUCE elements per result, from np.sum and friends) built from
    elementwise operations over slices in NumPy's order (ops.unrolled_reduce), which fuse into
    their users like any map: squared distances summed over 3 coordinates feeding an argmin
    over the centroids are one kernel, not an (n, k) temporary between two reductions.
    A reduction stays where a kernel over its operand's shape takes it in anyway
    (`_row_fused`); the graph itself is left as it is (a new one is returned)."""
    live = graph.live_nodes()
    marked = [n for n in live if n.op.kind is Kind.REDUCE and n.attrs.get("unroll")]
    if not marked:
        return graph
    users: dict = {}
    for n in live:
        for i in set(n.inputs):
            users.setdefault(i.index, []).append(n)
    result_shapes = {o.shape for o in graph.outputs}
    kept: set = set()                 # marked reductions that stay (decided operands first)
    for n in marked:
        if _row_fused(n, users, result_shapes, kept):
            kept.add(n.index)
    chosen = {n.index for n in marked} - kept
    if not chosen:
        return graph
    g = Graph()
    g.consts = list(graph.consts)
    g.random_streams = graph.random_streams
    g.check_errors = list(graph.check_errors)      # (g.checks: already sealed into g.check)
    new: dict = {}
    for n in graph.nodes:     # all of them: the fuser finds an argument written in place here
        inputs = [new[i.index] for i in n.inputs]
        if n.index in chosen:
            value = ops.unrolled_reduce(g, n.op, inputs[0], n.attrs["axes"])
            new[n.index] = ops.cast(g, value, n.dtype)
        else:
            new[n.index] = g.add(n.op, n.dtype, n.shape, inputs, **n.attrs)
    g.outputs = [new[n.index] for n in graph.outputs]
    g.writebacks = [(pos, new[n.index]) for pos, n in graph.writebacks]
    g.check = new[graph.check.index] if graph.check is not None else None
    return g


def _row_fused(node: Node, users: dict, result_shapes: set, kept: set) -> bool:
    """Whether a reduction over trailing axes (of more than one element per result) shares a
    kernel over its operand's shape with other work, which takes it in as it is:
      - its result is broadcast back over the rows it folds (a row softmax, x - x.mean(-1,
        keepdims=True)): row fusion folds it in that kernel's prelude;
      - it folds rows that another reduction staying a REDUCE folds too, whose result its
        operand reads (the sum of (x - mean)**2): row fusion, into this reduction's kernel;
      - a result has its operand's shape: sibling fusion, one loop.
    Unrolled there, each row's few elements would be a short loop of its own, per-row work
    redone per element or the operand materialised for two readers: 1 kernel became 2, or
    ran 2-4x slower, where measured."""
    src = node.inputs[0]
    axes = tuple(sorted(node.attrs["axes"]))
    if axes != tuple(range(src.ndim - len(axes), src.ndim)) or node.size == src.size:
        return False
    if src.shape in result_shapes:
        return True
    seen, stack = set(), [node]
    while stack:                       # users, through maps and views
        n = stack.pop()
        for u in users.get(n.index, ()):
            if u.index in seen or u.op.kind not in (Kind.VIEW, Kind.ELEMENTWISE):
                continue
            if u.shape == src.shape:
                return True
            seen.add(u.index)
            stack.append(u)
    seen, stack = set(), [src]
    while stack:                       # operands, through maps and views
        n = stack.pop()
        if n.index in seen:
            continue
        seen.add(n.index)
        if n.op.kind is Kind.REDUCE:
            if (n.inputs[0].shape == src.shape and n.size < src.size
                    and (not n.attrs.get("unroll") or n.index in kept)
                    and tuple(sorted(n.attrs["axes"])) == axes):
                return True
        elif n.op.kind in (Kind.VIEW, Kind.ELEMENTWISE):
            stack.extend(n.inputs)
    return False


class _Fuser:
    def __init__(self, graph: Graph, arg_layouts: dict):
        self.graph = graph
        self.arg_layouts = arg_layouts
        self.plan = Plan()
        self.buffer_of: dict[int, Buffer] = {}   # node index -> buffer holding its value
        self._status: Buffer | None = None
        self.cuts = _size_cuts(graph)             # node indices materialised to bound kernels
        self.cuts |= recompute_cuts(graph, self.cuts)   # ... and where recomputing costs more
        self._materializing: set = set()
        self._user_map: dict | None = None       # _users()
        self._epilogue_memo: dict = {}           # node index -> its reduction (epilogue_of)

    def must_materialize(self, n: Node) -> bool:
        """Whether a kernel reading `n` loads it from a buffer rather than computing it."""
        return (_needs_buffer(n) or n.index in self.cuts) and n.index not in self._materializing

    # ---- buffers ---------------------------------------------------------------------------
    def new_buffer(self, role, dtype, shape=(), ref=-1, strides=None) -> Buffer:
        size = int(np.prod(shape, dtype=np.int64)) if role not in _SCALAR_ROLES + ("status",) \
            else 0
        buf = Buffer(len(self.plan.buffers), role, np.dtype(dtype), size, ref,
                     contiguous_strides(shape) if strides is None else tuple(strides), tuple(shape))
        self.plan.buffers.append(buf)
        return buf

    def status_buffer(self) -> Buffer:
        """The per-call error flag that checked gathers and scatters raise."""
        if self._status is None:
            self._status = self.new_buffer("status", np.int64)
        return self._status

    def leaf_buffer(self, node: Node) -> Buffer:
        buf = self.buffer_of.get(node.index)
        if buf is None:
            if node.op is Op.ARG:
                pos = node.attrs["position"]
                buf = self.new_buffer("input", node.dtype, node.shape, pos, self.arg_layouts[pos])
            elif node.op is Op.CONST:
                buf = self.new_buffer("const", node.dtype, node.shape, node.attrs["index"])
            elif node.op is Op.RNG_KEY:
                buf = self.new_buffer("rng", node.dtype, ())
            elif node.op is Op.ITER:
                buf = self.new_buffer("iter", node.dtype, ())
            else:
                buf = self.new_buffer("param", node.dtype, (), node.attrs["position"])
            self.buffer_of[node.index] = buf
        return buf

    def in_memory(self, node: Node) -> bool:
        """Whether `node` reads straight from a buffer (through views): a leaf, a literal or
        something already materialised."""
        while node.op.kind is Kind.VIEW and node.index not in self.buffer_of:
            node = node.inputs[0]
        return node.index in self.buffer_of or node.op.kind is Kind.LEAF

    # ---- driver ----------------------------------------------------------------------------
    def run(self) -> Plan:
        g = self.graph
        # results stored elementwise, by iteration shape: a reduction over the same shape may
        # take a whole group into its own loop nest (sibling fusion, `sibling_group`)
        epilogues = self.epilogues()
        self._pending: dict = {}
        for i, node in enumerate(g.outputs):
            if node.size and not (_needs_buffer(node) or node.index in self.cuts) and \
                    i not in epilogues:
                self._pending.setdefault(node.shape, []).append(i)
        self._out_bufs: dict = {}
        late: list = []            # results already materialised by the time they are reached
        for i, node in enumerate(g.outputs):
            buf = self.output_buffer(i)
            if i in epilogues:
                # the reduction's kernel stores this result instead of the reduction's own
                self.emit_reduce(epilogues[i], buf, then=node)
                self.buffer_of[node.index] = buf
            elif node.size and (_needs_buffer(node) or node.index in self.cuts):
                if node.index not in self.buffer_of:
                    self.materialize(node, into=buf)
                elif self.buffer_of[node.index] is not buf:
                    late.append(i)
        # what the groups read first: a reduction among it may take in another group
        for shape in list(self._pending):
            group = self._pending.get(shape)
            if group:
                roots = [g.outputs[i] for i in group]
                self.materialize_cone(roots, self.row_reductions(roots, shape)[1])
        pending = [i for group in self._pending.values() for i in group] + late
        self._pending = {}
        self.emit_store_groups([(self._out_bufs[i], self._out_bufs[i].strides, g.outputs[i])
                                for i in sorted(pending) if g.outputs[i].size], rows=True)
        if g.check is not None:
            # the runtime checks, before the in-place writes (program/record.py puts a CHECK between)
            self.materialize(g.check)
            self.plan.checks = list(g.check_errors)
        self.emit_writebacks()
        self.plan.kernels = [k for k in self.plan.kernels if not is_kernel(k) or k.size > 0]
        return self.plan

    def epilogues(self) -> dict:
        """{output index: reduction node} of results computed elementwise from one reduction
        alone (and constants) that nothing else reads: the reduction's kernel computes them
        from its result as it stores it (Reduction.then), one kernel and one temporary fewer
        than a map over the stored result, with the same operations on the same values (a
        mean: the sum divided by the count).  (A materialised value of that kind, read by
        other kernels, is the same epilogue: `_emit_into`.)"""
        g = self.graph
        users = self._users()
        out, taken = {}, set()
        for i, node in enumerate(g.outputs):
            if node.index in taken or node.index in self.buffer_of or not node.size or \
                    users.get(node.index) or node.index in self._roots:
                continue
            red = self.epilogue_of(node)
            if red is not None:
                out[i] = red
                taken.add(node.index)
        return out

    def _users(self) -> dict:
        """{node index: indices of the live nodes reading it} (computed once); `_roots` and
        `_results` then hold the writeback and check values, and the results."""
        if self._user_map is None:
            g = self.graph
            self._user_map = {}
            for n in g.live_nodes():
                for o in n.inputs:
                    self._user_map.setdefault(o.index, set()).add(n.index)
            self._roots = {n.index for _, n in g.writebacks} | (
                {g.check.index} if g.check is not None else set())
            self._results = {n.index for n in g.outputs}
        return self._user_map

    def epilogue_of(self, node: Node):
        """The reduction whose kernel can compute `node` as its epilogue, or None: `node` an
        elementwise expression of that one reduction and literals, none of it complex,
        random or checked; nothing but `node`'s own expression reads the reduction or a
        value between them; not a product over kept axes (which may become a BLAS call);
        the reduction not materialised already."""
        if node.op.kind is not Kind.ELEMENTWISE:
            return None
        memo = self._epilogue_memo
        if node.index not in memo:
            memo[node.index] = self._epilogue_of(node)
        red = memo[node.index]
        return None if red is None or red.index in self.buffer_of else red

    def _epilogue_of(self, node: Node):
        users = self._users()
        red, inner, stack = None, set(), [node]
        while stack:
            n = stack.pop()
            if n.index in inner:
                continue
            if n.dtype.kind == "c":
                return None
            if n.op is Op.LITERAL:
                continue
            if n.op.kind is Kind.REDUCE:
                if red is not None and red.index != n.index:
                    return None
                red = n
                inner.add(n.index)
                continue
            if n.op.kind is not Kind.ELEMENTWISE or n.op in (Op.RANDOM, Op.IOTA, Op.CHECK) or \
                    n.attrs.get("checked") or n.shape not in (node.shape, ()) or \
                    (n is not node and (n.index in self.buffer_of or self.must_materialize(n))):
                return None
            inner.add(n.index)
            stack.extend(n.inputs)
        if red is None or red.op not in _EPILOGUE_OPS or red.shape != node.shape or \
                not red.size or red.index in self.buffer_of or \
                (red.ndim and red.op is Op.SUM and red.inputs[0].op is Op.MUL):
            return None
        # nothing but the epilogue reads the reduction or a value between them
        for i in inner - {node.index}:
            if i in self._roots or i in self._results or not users.get(i, set()) <= inner:
                return None
        return red

    def output_buffer(self, i: int) -> Buffer:
        buf = self._out_bufs.get(i)
        if buf is None:
            node = self.graph.outputs[i]
            buf = self._out_bufs[i] = self.new_buffer("output", node.dtype, node.shape, i)
            self.plan.outputs.append(buf.id)
        return buf

    def sibling_group(self, node: Node) -> list:
        """Results that a reduction `node` can store from inside its own loop nest: a pending
        group of elementwise results over the shape the reduction folds, which reads an input
        the reduction reads too and does not depend on it.  Fused, each input is read once and
        each shared subexpression computed once (the optimisation step's loss and update).
        Only reductions over the trailing axes, so both walk memory in the same order."""
        src = node.inputs[0]
        axes = tuple(sorted(node.attrs["axes"]))
        group = getattr(self, "_pending", {}).get(src.shape)
        if not group or axes != tuple(range(src.ndim - len(axes), src.ndim)):
            return []
        values = [self.graph.outputs[i] for i in group]
        if _reaches(values, node) or not (self._reads(values) & self._reads([src])):
            return []
        del self._pending[src.shape]
        return group

    def _reads(self, roots) -> set:
        """The buffers (leaves, materialised values) the fused expressions of roots load."""
        out, seen, stack = set(), set(), list(roots)
        while stack:
            n = stack.pop()
            if n.index in seen:
                continue
            seen.add(n.index)
            if n.op.kind is Kind.LEAF or n.index in self.buffer_of or self.must_materialize(n):
                if n.op not in (Op.LITERAL, Op.PARAM, Op.RNG_KEY):
                    out.add(n.index)
                continue
            stack.extend(n.inputs)
        return out

    def add_kernel(self, kb: "_KernelBuilder"):
        self.plan.kernels.append(kb.finish())

    def emit_store_groups(self, stores, rows=False):
        """One kernel per iteration shape for full-array stores (buffer, strides, node).
        rows: results may fold the row reductions they read per row (`row_fused`)."""
        by_shape: dict = {}
        for buf, strides, node in stores:
            by_shape.setdefault(node.shape, []).append((buf, strides, node))
        for shape, group in by_shape.items():
            ident = idents(len(shape))
            unrolled = self.packed_dims([n for _, _, n in group], shape)
            if unrolled:
                kb = _KernelBuilder(self, shape[:-unrolled], (), "map+unrolled")
                for imap in unrolled_maps(shape, unrolled):
                    for buf, strides, node in group:
                        kb.store(buf, address(strides, imap), kb.build(node, imap))
                self.add_kernel(kb)
                continue

            def body(kb):
                for buf, strides, node in group:
                    kb.store(buf, address(strides, ident), kb.build(node, ident))
            if not (rows and self.row_fused(shape, [n for _, _, n in group], "map", body)):
                kb = _KernelBuilder(self, shape, (), "map")
                body(kb)
                self.add_kernel(kb)

    def packed_dims(self, nodes, shape) -> int:
        """The trailing dims of `shape` a kernel storing `nodes` unrolls: those of a pack
        (not materialised) of that shape which the values read through elementwise ops of
        that shape.  Each unrolled store then reads the pack at constant trailing indices,
        which is its operand itself (`_KernelBuilder._pack_operand`); 0: none."""
        found, seen, stack = 0, set(), list(nodes)
        while stack:
            n = stack.pop()
            if n.index in seen or n.index in self.buffer_of or n.shape != tuple(shape):
                continue
            seen.add(n.index)
            if self.must_materialize(n):
                continue
            if n.op is Op.PACK:
                found = max(found, len(n.attrs["dims"]))
            elif n.op.kind is Kind.ELEMENTWISE:
                stack.extend(n.inputs)
        if not found or math.prod(shape[len(shape) - found:]) > UNROLL_PACKED:
            return 0
        return found

    # ---- row fusion --------------------------------------------------------------------
    def row_reductions(self, roots, shape) -> tuple:
        """(kept dims, reductions): the reductions over the trailing axes of `shape` that the
        expressions of roots read (through elementwise ops and views), whose rows are short
        enough to stay in cache between passes.  A kernel over `shape` can then fold them per
        row in a prelude (row softmax: max, then sum of exp, then the division: one kernel,
        the row read from memory once) instead of materialising each in a pass of its own."""
        found, seen, stack = [], set(), list(roots)
        while stack:
            n = stack.pop()
            if n.index in seen or n.index in self.buffer_of or n.op.kind is Kind.LEAF:
                continue
            seen.add(n.index)
            if n.op.kind is Kind.REDUCE:
                src, axes = n.inputs[0], tuple(sorted(n.attrs["axes"]))
                rsize = int(np.prod([src.shape[d] for d in axes], dtype=np.int64))
                if (src.shape == tuple(shape) and n.op in _ROW_OPS and axes
                        and axes == tuple(range(src.ndim - len(axes), src.ndim))
                        and rsize * src.dtype.itemsize <= ROW_CACHE_BYTES):
                    found.append(n)
                    stack.extend(n.inputs)
                continue
            if self.must_materialize(n):
                continue
            stack.extend(n.inputs)
        if not found:
            return 0, set()
        nkept = found[0].ndim
        return nkept, {n.index for n in found if n.ndim == nkept}

    def row_fused(self, shape, roots, label, body) -> bool:
        """Build a kernel over `shape` (rows x row) whose row reductions are prelude phases;
        body(kb) adds its stores (and reduction).  False (nothing added) when there are none
        or one is read other than at its own row."""
        nkept, inline = self.row_reductions(roots, shape)
        if not inline:
            return False
        kb = _KernelBuilder(self, shape[:nkept], shape[nkept:], label + "+rows", inline)
        try:
            body(kb)
        except _NotRowLocal:
            return False
        self.add_kernel(kb)
        return True

    # ---- materialisation -------------------------------------------------------------------
    def materialize(self, node: Node, into: Buffer | None = None) -> Buffer:
        buf = self.buffer_of.get(node.index)
        if buf is not None:
            return buf
        if node.op.kind is Kind.LOOP:
            self.emit_loop(node if node.op is Op.LOOP else node.inputs[0],
                           {node.index: into} if into is not None else {})
            return self.buffer_of.get(node.index)
        if node.op.kind is Kind.LEAF and node.op is not Op.LITERAL:
            return self.leaf_buffer(node)
        if into is None and node.op is Op.PACK:
            # a pack in a temporary (a stage): entry-major, each operand's values contiguous
            # over the batch, which the kernels loop over (SIMD loads and stores)
            k = len(node.attrs["dims"])
            batch, dims = node.shape[:node.ndim - k], node.shape[node.ndim - k:]
            lead = contiguous_strides(dims + batch)
            into = self.new_buffer("temp", node.dtype, node.shape,
                                   strides=lead[k:] + lead[:k])
        buf = into or self.new_buffer("temp", node.dtype, node.shape)
        self._materializing.add(node.index)
        try:
            self._emit_into(node, buf)
        finally:
            self._materializing.discard(node.index)
        self.buffer_of[node.index] = buf
        return buf

    def _emit_into(self, node: Node, buf: Buffer):
        if node.size == 0:
            pass
        elif node.op.kind is Kind.REDUCE:
            self.emit_reduce(node, buf)
        elif node.op.kind is Kind.SCAN:
            self.emit_scan(node, buf)
        elif node.op.kind is Kind.SORT:
            self.emit_sort(node, buf)
        elif node.op.kind in _UPDATES:
            self.emit_update_chain(node, buf)
        elif node.op.kind is Kind.LIBRARY:
            self.emit_library(node, buf)
        elif self.epilogue_of(node) is not None:
            # computed from one reduction alone: that reduction's kernel stores it
            self.emit_reduce(self.epilogue_of(node), buf, then=node)
        elif node.op is Op.PACK:
            self.emit_pack(node, buf)
        else:
            # an elementwise value or view that must sit in memory (e.g. a computed gather source)
            self.emit_store_groups([(buf, buf.strides, node)])

    def materialize_cone(self, roots, inline=frozenset(), stop=frozenset(), seen=None):
        """Materialise, in creation (topological) order, every value below `roots` that a
        kernel reading them must load from memory: reductions, scans, update chains and
        computed gather sources.  Expressions are then built without recursing into other
        kernels, whatever the depth of the graph.  `stop`: node indices not to look below
        (an update chain's own states).  `seen`: node indices already walked (a set this
        updates: a kernel builder's, so that the many stores of one kernel walk its shared
        expression once)."""
        need: dict = {}                  # node index -> (node, is a gather source)
        seen = set() if seen is None else seen
        seen.update(stop)
        stack = list(roots)
        while stack:
            n = stack.pop()
            if n.index in seen:
                continue
            seen.add(n.index)
            if n.index in self.buffer_of or n.op.kind is Kind.LEAF:
                continue
            if n.op.kind in _UPDATES:
                need.setdefault(n.index, (n, False))
                base = n
                while base.op.kind in _UPDATES and base.index not in self.buffer_of:
                    seen.add(base.index)      # chain members are written into one buffer
                    stack.extend(base.inputs[1:])
                    base = base.inputs[0]
                stack.append(base)
                continue
            if self.must_materialize(n) and n.index not in inline:
                need.setdefault(n.index, (n, False))
                if self.epilogue_of(n) is not None:
                    continue        # its reduction's kernel computes it (_emit_into)
            elif n.op is Op.GATHER:
                need.setdefault(n.inputs[0].index, (n.inputs[0], True))
            stack.extend(n.inputs)
        for index in sorted(need):
            n, gather_source = need[index]
            if n.index in self.buffer_of or (gather_source and self.in_memory(n)):
                continue
            if n not in roots or gather_source:
                self.materialize(n)

    def emit_reduce(self, node: Node, out: Buffer, then: Node | None = None):
        """The kernel of reduction `node` into `out`; with `then` (an epilogue: a result
        computed elementwise from this reduction alone, `epilogues`) that result instead."""
        src = node.inputs[0]
        axes = node.attrs["axes"]
        if node.op is Op.SUM and src.op is Op.MUL:
            self.materialize_contraction_operands(src)
        kept = [d for d in range(src.ndim) if d not in axes]
        space = tuple(src.shape[d] for d in kept)
        rspace = tuple(src.shape[d] for d in axes)
        imap = [None] * src.ndim
        for loop_dim, d in enumerate(kept + list(axes)):
            imap[d] = Index.loop(loop_dim)
        imap = tuple(imap)
        siblings = self.sibling_group(node)
        label = node.op.value + ("+map" if siblings else "")

        def body(kb):
            value = kb.build(src, imap)
            for i in siblings:
                buf = self.output_buffer(i)
                kb.store(buf, address(buf.strides, imap), kb.build(self.graph.outputs[i], imap))
            epilogue = None if then is None else kb.build_epilogue(then, node, out)
            kb.reduce(node.op, value, out, address(out.strides, idents(len(space))),
                      then=epilogue)
        trailing = kept == list(range(len(kept)))
        if trailing and node.op in _ROW_OPS and len(space) == self.row_reductions(
                [src], src.shape)[0] and self.row_fused(src.shape, [src], label, body):
            return
        kb = _KernelBuilder(self, space, rspace, label)
        body(kb)
        self.add_kernel(kb)

    def materialize_contraction_operands(self, prod: Node):
        """A contraction (the sum of a product of broadcast operands: matmul, einsum) reads
        each operand element many times: an operand that is computed (tanh(x @ W + b), a
        cast) is materialised once, never recomputed inside the reduction loop, and the
        product reads two buffers through views (which a backend may hand to BLAS).  Short
        contractions (under CONTRACTION_MATERIALIZE multiply-adds, where no backend calls a
        library) are left to the recomputation cost model: a cheap operand stays fused."""
        if prod.size < CONTRACTION_MATERIALIZE:
            return
        bases = []
        for operand in prod.inputs:
            n, broadcast = operand, False
            while n.op.kind is Kind.VIEW and n.index not in self.buffer_of:
                broadcast |= n.op is Op.BROADCAST
                n = n.inputs[0]
            bases.append((n, broadcast))
        if not all(b for _, b in bases):
            return
        for n, _ in bases:
            if n.index not in self.buffer_of and n.op.kind is not Kind.LEAF and n.size:
                self.materialize(n)

    def emit_pack(self, node: Node, out: Buffer):
        """A pack into `out`: one kernel over the operands' shape, a store per operand."""
        nb = node.ndim - len(node.attrs["dims"])
        kb = _KernelBuilder(self, node.shape[:nb], (), "pack")
        for imap, value in zip(unrolled_maps(node.shape, len(node.attrs["dims"])), node.inputs):
            kb.store(out, address(out.strides, imap), kb.build(value, imap[:nb]))
        self.add_kernel(kb)

    # ---- library calls (np.linalg) ---------------------------------------------------------
    def emit_library(self, node: Node, out: Buffer):
        """A LibraryCall step: operands read in place where they are in memory (arguments,
        constants, materialised values) with at most two batch dims after merging, else
        through a C-ordered copy; the result written into `out` (C-ordered)."""
        fn = node.attrs["fn"]
        a = node.inputs[0]
        batch = a.shape[:-2]
        # the routine's (m, n, k) words (bytecode.ROUTINES): square matrices m x m (solve: n
        # right-hand sides); svd m x n and its job; lstsq [a | b] m x (n + k) (k = b's columns)
        if fn == "svd":
            sizes = (a.shape[-2], a.shape[-1], node.attrs["job"])
        elif fn == "lstsq":
            n = node.attrs["n"]
            sizes = (a.shape[-2], n, a.shape[-1] - n)
        else:
            sizes = (a.shape[-1], node.inputs[1].shape[-1] if fn == "solve" else 0, 0)
        layouts = []
        for operand in node.inputs:
            if not self.in_memory(operand) or operand.op.kind is Kind.VIEW:
                buf = self.materialize_copy(operand)
            else:
                buf = self.leaf_buffer(operand) if operand.op.kind is Kind.LEAF \
                    else self.buffer_of[operand.index]
            layouts.append((buf, buf.strides))
        out_shape = {"det": batch + (1, 1), "slogdet": batch + (1, 2)}.get(fn, node.shape)
        layouts.append((out, contiguous_strides(out_shape)))
        merged = _merge_batch(batch, [st[:len(batch)] for _, st in layouts])
        if merged is None:
            # more than two batch dims that do not merge: C-ordered copies of the operands
            layouts = [(self.materialize_copy(x), None) for x in node.inputs] + [layouts[-1]]
            layouts = [(b, b.strides if st is None else st) for b, st in layouts]
            merged = _merge_batch(batch, [st[:len(batch)] for _, st in layouts])
        bsizes, bstrides = merged
        args, lays = [], []
        for i, (buf, st) in enumerate(layouts):
            writes = buf is out
            args.append(KernelArg("buffer", buf.dtype, buf.id, 0, writes))
            rs, cs = st[len(batch):len(batch) + 2] if len(st) >= len(batch) + 2 else (1, 1)
            lays.append((0, bstrides[i][0], bstrides[i][1], rs, cs))
        self.plan.kernels.append(LibraryCall(fn, node.dtype, (bsizes[0], bsizes[1]) + sizes,
                                             args, lays, fn))

    # ---- loops (Op.LOOP, frontend/loops.py) --------------------------------------------------------
    def emit_loop(self, loop: Node, into: dict):
        """The loop's steps: LoopBegin, its body's steps (the body graph fused on its own,
        its buffers merged into this plan), LoopEnd.  Every result of the loop (its loop_out
        nodes among the live ones; `into`: {node index: buffer} of those that are results)
        gets its buffer; the loop node itself is marked done."""
        if loop.index in self.buffer_of:
            return
        a = loop.attrs
        body: Graph = a["body"]
        k, nrec, n = a["ncarry"], a["ncollect"], a["n"]
        users = self._users().get(loop.index, ())
        outs = [self.graph.nodes[i] for i in sorted(users)
                if self.graph.nodes[i].op is Op.LOOP_OUT]
        results = {node.index: i for i, node in enumerate(self.graph.outputs)}
        for o in outs:
            if o.index in results and o.index not in into:
                into[o.index] = self.output_buffer(results[o.index])
        # the operands: carried values from C-ordered buffers the body's first iteration
        # reads (never written: the loop writes its own buffers), the rest where they are
        inits = []
        for x in loop.inputs[:k]:
            buf = self.materialize(x) if x.op.kind is not Kind.LEAF or x.op is Op.LITERAL \
                else self.leaf_buffer(x)
            if buf is None or buf.strides != contiguous_strides(x.shape) or \
                    buf.role not in ("input", "temp", "const", "output"):
                buf = self.materialize_copy(x)
            inits.append(buf)
        read = {nd.attrs["position"]: nd.op for nd in body.live_nodes()
                if nd.op in (Op.ARG, Op.PARAM)}
        imports = []
        for j, x in enumerate(loop.inputs[k:]):
            if k + j not in read:
                buf = None                # a value the body's trace looked at, never read
            elif (read[k + j] is Op.PARAM) != (x.op in (Op.PARAM, Op.ITER)):
                if read[k + j] is Op.PARAM:
                    raise ValueError(f"loop {loop.index}: leaf {k + j} is read by value but "
                                     f"its value is computed")
                buf = self.materialize_copy(x)     # a parameter read from memory
            elif x.op in (Op.PARAM, Op.ITER, Op.ARG, Op.CONST):
                buf = self.leaf_buffer(x)
            elif x.op is Op.RNG_KEY:
                raise ValueError("a loop body cannot read the random key")
            else:
                buf = self.materialize(x) if _needs_buffer(x) or x.op.kind is not Kind.VIEW \
                    and x.op is not Op.LITERAL else None
                if buf is None or buf.role in ("alias",):
                    buf = self.materialize_copy(x)
            imports.append(buf)
        label = f"L{next(_LOOP_IDS)}"

        def temp(node_or_shape, dtype=None) -> Buffer:
            if isinstance(node_or_shape, Node):
                return self.new_buffer("temp", node_or_shape.dtype, node_or_shape.shape)
            return self.new_buffer("temp", dtype, node_or_shape)
        # carried: two buffers taking turns (the final one a result's, where it is one)
        finals = {o.attrs["what"][1]: o for o in outs if o.attrs["what"][0] == "carry"}
        carried, reads, writes = [], [], []
        for c in range(k):
            x = loop.inputs[c]
            final = into.get(finals[c].index) if c in finals else None
            final = final or temp(x)
            read = self.new_buffer("alias", x.dtype, x.shape)
            write = self.new_buffer("alias", x.dtype, x.shape)
            carried.append((inits[c].id, read.id, write.id, temp(x).id, final.id))
            reads.append(read)
            writes.append(write)
            if c in finals:
                self.buffer_of[finals[c].index] = final
        # collected results: the body writes a row alias moved over the stack every iteration
        rows, row_out = [], {}
        for o in outs:
            what = o.attrs["what"]
            if what[0] == "collect":
                stack = into.get(o.index) or temp(o)
                v = body.outputs[k + what[1]]
                row = self.new_buffer("alias", v.dtype, v.shape)
                rows.append((row.id, stack.id, what[2]))
                row_out[what[1]] = row
                self.buffer_of[o.index] = stack
        checkpoints = []
        for o in outs:
            what = o.attrs["what"]
            if what[0] == "checkpoint":
                stack = into.get(o.index) or temp(o)
                x = loop.inputs[what[1]]
                row = self.new_buffer("alias", x.dtype, x.shape)
                checkpoints.append((what[1], row.id, stack.id, what[2]))
                self.buffer_of[o.index] = stack
        flag = temp((), np.bool_) if a["until"] else None
        # the body, fused on its own: leaves are the read aliases and the imports
        layouts = {c: contiguous_strides(loop.inputs[c].shape) for c in range(k)}
        layouts.update({k + j: b.strides for j, b in enumerate(imports) if b is not None})
        sub = _Fuser(unroll_small_reductions(body), layouts)
        bplan = sub.run()
        own_iter = next((sub.buffer_of[nd.index].id for nd in sub.graph.live_nodes()
                         if nd.op is Op.ITER and nd.index in sub.buffer_of), None)
        iter_buf = self.new_buffer("iter", np.int64, ()) if own_iter is not None else None
        m: dict[int, int] = {}
        for b in bplan.buffers:
            if b.id == own_iter:
                m[b.id] = iter_buf.id
            elif b.role == "input" or b.role == "param":
                m[b.id] = reads[b.ref].id if b.ref < k else imports[b.ref - k].id
            elif b.role == "output":
                if b.ref < k:
                    m[b.id] = writes[b.ref].id
                elif b.ref < k + nrec:
                    r = b.ref - k
                    m[b.id] = row_out[r].id if r in row_out else temp(b.shape, b.dtype).id
                else:
                    m[b.id] = flag.id
            elif b.role == "status":
                m[b.id] = self.status_buffer().id
            elif b.role == "rng":
                raise ValueError("a loop body cannot draw random numbers")
            else:
                nb = self.new_buffer(b.role, b.dtype, b.shape, b.ref, b.strides)
                nb.size = b.size
                m[b.id] = nb.id
        self.plan.kernels.append(LoopBegin(label, n, carried, rows, checkpoints,
                                           None if flag is None else flag.id,
                                           None if iter_buf is None else iter_buf.id))
        for step in bplan.kernels:
            self.plan.kernels.append(_remapped(step, m))
        self.plan.kernels.append(LoopEnd(label))
        self.buffer_of[loop.index] = None

    def materialize_copy(self, node: Node) -> Buffer:
        """A C-ordered temporary holding node's value (a copy when it is a view)."""
        if node.op.kind is not Kind.VIEW and node.op.kind is not Kind.LEAF:
            return self.materialize(node)
        buf = self.new_buffer("temp", node.dtype, node.shape)
        if node.size:
            self.emit_store_groups([(buf, buf.strides, node)])
        return buf

    def emit_scan(self, node: Node, out: Buffer):
        """cumsum/cumprod: the scanned axis is the one reduction loop; every step is stored."""
        src = node.inputs[0]
        axis = node.attrs["axis"]
        others = [d for d in range(src.ndim) if d != axis]
        imap = [None] * src.ndim
        for loop_dim, d in enumerate(others + [axis]):
            imap[d] = Index.loop(loop_dim)
        space = tuple(src.shape[d] for d in others)
        kb = _KernelBuilder(self, space, (src.shape[axis],), node.op.value)
        value = kb.build(src, tuple(imap))
        fold = Op.SUM if node.op is Op.CUMSUM else Op.PROD
        kb.reduce(fold, value, out, address(out.strides, tuple(imap)), scan=True,
                  acc=node.dtype)
        self.add_kernel(kb)

    def emit_sort(self, node: Node, out: Buffer):
        """sort/argsort: one launch index per row (the other axes), the row the one rspace
        loop; the operand is computed into per-row scratch, sorted there, then stored."""
        src = node.inputs[0]
        axis = node.attrs["axis"]
        n = src.shape[axis]
        others = [d for d in range(src.ndim) if d != axis]
        imap = [None] * src.ndim
        for loop_dim, d in enumerate(others + [axis]):
            imap[d] = Index.loop(loop_dim)
        space = tuple(src.shape[d] for d in others)
        rows = int(np.prod(space, dtype=np.int64))
        kb = _KernelBuilder(self, space, (n,), node.op.value)
        value = kb.build(src, tuple(imap))
        key_dt = np.dtype(f"u{max(1, src.dtype.itemsize)}")
        scratch = self.new_buffer("temp", key_dt, (rows * 2 * n,))
        pscratch = (self.new_buffer("temp", np.int64, (rows * 2 * n,))
                    if node.op is Op.ARGSORT else None)
        kb.sort(value, out, address(out.strides, tuple(imap)), scratch, pscratch)
        self.add_kernel(kb)

    def emit_update_chain(self, node: Node, out: Buffer):
        """Materialise a chain of region updates and scatters into `out`: the bottom value
        first (unless the updates cover it all), then each update in order."""
        top = node
        chain = self._update_chain(top)
        # an update may read an earlier state of its own chain (a Jacobi step reads the state
        # it copies): materialise what the updates read first, so that the chain starts from
        # that state's buffer instead of recomputing it
        # (a long chain's own earlier states excepted: `x[i] &= f(x[j])` thousands of times
        # would materialise every state, each by recursing into the chain below it)
        own = {u.index for u in chain} if len(chain) > MATERIALIZED_CHAIN_STATES else set()
        # a state read only where the updates since have not written (ghost cells filled
        # from the interior: `out[:2] = out[-4:-2]`) is read from `out` itself, not copied
        in_place = _states_read_in_place(chain, self.buffer_of)
        self.materialize_cone([x for u in chain for x in u.inputs[1:]],
                              stop=own | {s for states in in_place.values() for s in states})
        chain = self._update_chain(top)
        node = chain[0].inputs[0]
        box = _overwritten_box(chain, node.shape)
        if box is not None:
            self.emit_border(node, out, box)
        elif not _covers(chain, node.shape):
            self.emit_store_groups([(out, out.strides, node)])
        for k, update in enumerate(chain):
            states = [s for s in in_place.get(k, ()) if s not in self.buffer_of]
            for s in states:
                self.buffer_of[s] = out       # holds that state where this update reads it
            try:
                self.emit_update(update, out)
            finally:
                for s in states:
                    del self.buffer_of[s]

    def emit_border(self, node: Node, out: Buffer, box):
        """Store node into out everywhere but `box` (which an update then overwrites): the
        complement as up to 2 ndim disjoint slabs, one small kernel each.  `out = u.copy();
        out[1:-1, 1:-1] = f(u)` then writes each element of out once, not twice."""
        shape = node.shape
        for d, (lo, hi) in enumerate(box):
            for a, b in ((0, lo), (hi, shape[d])):
                if a == b:
                    continue
                # dims before d: inside the box; d: one side of it; dims after d: all
                ranges = (list(box[:d]) + [(a, b)] +
                          [(0, n) for n in shape[d + 1:]])
                kb = _KernelBuilder(self, tuple(y - x for x, y in ranges), (), "map-border")
                region = tuple(Index.loop(i).shift(x) for i, (x, _) in enumerate(ranges))
                kb.store(out, address(out.strides, region), kb.build(node, region))
                self.add_kernel(kb)

    def _update_chain(self, node: Node) -> list:
        """The updates from `node` down to the first value that is not one (or is in memory),
        oldest first."""
        chain = []
        while node.op.kind in _UPDATES and node.index not in self.buffer_of:
            chain.append(node)
            node = node.inputs[0]
        chain.reverse()
        return chain

    def emit_update(self, update: Node, dest: Buffer, check_only: bool = False):
        """Write one SETSLICE or SCATTER's new elements into dest (addressed by its strides).
        check_only: a kernel that only validates the scatter's indices, writing nothing."""
        if update.op is Op.SETSLICE:
            value = update.inputs[1]
            kb = _KernelBuilder(self, value.shape, (), "setslice")
            region = tuple(Index.loop(d).scale(st).shift(s0) for d, (s0, st) in
                           enumerate(zip(update.attrs["start"], update.attrs["step"])))
            kb.store(dest, address(dest.strides, region), kb.build(value, idents(value.ndim)))
            self.add_kernel(kb)
            return
        base, values, *indices = update.inputs
        axis = update.attrs["axis"]
        ident = idents(values.ndim)
        nb = indices[0].ndim
        kb = _KernelBuilder(self, values.shape, (), "check indices" if check_only else
                            f"scatter-{update.attrs['mode']}")
        strict = bool(update.attrs.get("strict"))
        picks = tuple(Index.of(0, [(Pick(kb.build(ix, ident[axis:axis + nb]), base.shape[axis + j],
                                         strict), 1)])
                      for j, ix in enumerate(indices))
        where = ident[:axis] + picks + ident[axis + nb:]
        if check_only:
            kb.check(address(dest.strides, where))
        else:
            kb.store(dest, address(dest.strides, where), kb.build(values, ident),
                     mode=update.attrs["mode"])
        self.add_kernel(kb)

    # ---- in-place updates of inputs --------------------------------------------------------
    def emit_writebacks(self):
        jobs = []   # (dest buffer, full value node or None, [update nodes])
        for pos, node in self.graph.writebacks:
            dest = self.leaf_buffer(self._arg_node(pos))
            chain = []
            while node.op.kind in _UPDATES and node.index not in self.buffer_of:
                chain.append(node)
                node = node.inputs[0]
            chain.reverse()
            full = None if (node.op is Op.ARG and node.attrs["position"] == pos) else node
            jobs.append((dest, full, chain))
        dests = {dest.id for dest, _, _ in jobs}
        # operands that read an overwritten input anywhere but at their own store index go
        # through a temporary computed now, while every input still holds its old value
        full_stores = []
        for dest, full, chain in jobs:
            if full is not None:
                if self._reads_overwritten(full, dests, dest, full_store=True):
                    self._to_temp(full)
                full_stores.append((dest, dest.strides, full))
            for update in chain:
                for operand in update.inputs[1:]:
                    if self._reads_overwritten(operand, dests, dest, full_store=False):
                        self._to_temp(operand)
        # validate scatter indices before anything is written
        for dest, _, chain in jobs:
            for update in chain:
                if update.op is Op.SCATTER:
                    self.emit_update(update, dest, check_only=True)
        self.emit_store_groups([s for s in full_stores if s[2].size])
        for dest, _, chain in jobs:
            for update in chain:
                self.emit_update(update, dest)

    def _arg_node(self, pos: int) -> Node:
        for n in self.graph.nodes:
            if n.op is Op.ARG and n.attrs["position"] == pos:
                return n
        raise KeyError(pos)

    def _to_temp(self, node: Node):
        """Materialise `node` into a temporary that later reads of it load from."""
        if node.index in self.buffer_of or node.op.kind is Kind.LEAF:
            return
        buf = self.new_buffer("temp", node.dtype, node.shape)
        if node.size:
            if _needs_buffer(node):
                self.materialize(node, into=buf)
            else:
                self.emit_store_groups([(buf, buf.strides, node)])
        self.buffer_of[node.index] = buf

    def _reads_overwritten(self, node: Node, dests: set, own: Buffer, full_store: bool) -> bool:
        unrolled = self.packed_dims([node], node.shape) if full_store else 0
        if unrolled:
            return self._unrolled_reads_overwritten(node, unrolled, dests, own)
        kb = _KernelBuilder(self, node.shape, (), "probe")
        ident = idents(node.ndim)
        kb.build(node, ident)
        own_index = address(own.strides, ident)
        for e in kb.memo.values():
            if isinstance(e, Load):
                buf_id = kb.arg_buffers[e.arg]
                if buf_id in dests and not (full_store and buf_id == own.id and e.index == own_index):
                    return True
        return False

    def _unrolled_reads_overwritten(self, node: Node, unrolled: int, dests: set,
                                    own: Buffer) -> bool:
        """_reads_overwritten for a full store that unrolls packed dims: each unrolled store
        may read its own element of `own` and no other element of an overwritten input."""
        kb = _KernelBuilder(self, node.shape[:node.ndim - unrolled], (), "probe")
        roots = [(kb.build(node, imap), address(own.strides, imap))
                 for imap in unrolled_maps(node.shape, unrolled)]
        reads: dict = {}             # expression -> the overwritten elements it loads
        none = frozenset()
        for e in walk([r for r, _ in roots]):
            got = none
            if isinstance(e, Load) and kb.arg_buffers[e.arg] in dests:
                got = frozenset([(kb.arg_buffers[e.arg], e.index)])
            for c in expression_operands(e):
                if reads[id(c)]:
                    got = got | reads[id(c)]
            reads[id(e)] = got
        return any(buf_id != own.id or index != own_index
                   for root, own_index in roots for buf_id, index in reads[id(root)])


# ---- the recomputation cost model ---------------------------------------------------------
# An inlined value is recomputed wherever a kernel reads it: once per element for a map, but
# N times per element when a contraction broadcasts it along N outputs (the previous layer's
# tanh inside the next matrix product's loop) and once per access for a stencil (five shifted
# slices of the previous step).  Materialising it costs one store and one load per element.
# So a value is materialised when (reads per element - 1) * its cost > MATERIALISE_COST,
# in the units of kernel.cost_per_iteration (an add or a load 1, a math-library call
# TRANSCENDENTAL_COST).  Reads per element come from the users' indexing: through a view, the
# view's size over the value's (a broadcast multiplies, a slice counts once per slice);
# through an elementwise user, that user's own reads (users of one index share one value in
# a kernel); a materialised user (reduction, scan, update, result, cut) reads each element once.
MATERIALISE_COST = 4
_SLOW_OPS = {Op.DIV: 4, Op.SQRT: 4}


def op_cost(node: Node) -> int:
    """Estimated cost of computing one element of `node` from its operands."""
    if node.op is Op.RANDOM:
        return RANDOM_COST
    if node.op in TRANSCENDENTAL:
        return TRANSCENDENTAL_COST
    return _SLOW_OPS.get(node.op, 1)


def recompute_cuts(graph: Graph, cuts: set) -> set:
    """Values (beyond `cuts`) that the cost model above materialises.  Costs are computed
    operands first, restarting at values in memory; reads per element users first, deciding
    each value once every user's reads are known."""
    cost: dict = {}
    for n in graph.nodes:
        if n.op in (Op.ARG, Op.CONST):
            cost[n.index] = 1                             # a load
        elif n.op.kind is Kind.LEAF or n.op is Op.IOTA:
            cost[n.index] = 0
        elif _needs_buffer(n) or n.index in cuts:
            cost[n.index] = 1                             # read back from its buffer
        elif n.op.kind is Kind.VIEW:
            cost[n.index] = cost[n.inputs[0].index]
        elif n.op is Op.PACK:             # an element is one operand's
            cost[n.index] = max(cost[i.index] for i in n.inputs)
        else:
            cost[n.index] = op_cost(n) + sum(cost[i.index] for i in set(n.inputs))
    outputs = {n.index for n in graph.outputs} | {n.index for _, n in graph.writebacks}
    same_index: dict = {}      # node -> reads per element through elementwise users (max)
    through_views: dict = {}   # node -> reads per element through views (summed)
    chosen = set()
    for n in reversed(graph.nodes):
        materialised = _needs_buffer(n) or n.index in cuts or n.op.kind is Kind.LEAF
        reads = max(same_index.get(n.index, 0.0), 1.0 if n.index in outputs else 0.0) \
            + through_views.get(n.index, 0.0)
        # (a pack read more than once is materialised whole, by one kernel, rather than
        # each of its operands on its own)
        if (not materialised and (n.op.kind is Kind.ELEMENTWISE or n.op is Op.PACK)
                and n.size > 1 and (reads - 1) * cost[n.index] > MATERIALISE_COST):
            chosen.add(n.index)
            materialised = True
        if materialised:
            reads = 1.0
        for i in set(n.inputs):
            if n.op.kind is Kind.VIEW or n.op is Op.GATHER:
                ratio = n.size / i.size if i.size else 0.0
                if n.op is Op.BROADCAST and _trailing_broadcast(i.shape, n.shape):
                    ratio = 1.0    # constant along the innermost loops: hoisted out of them
                through_views[i.index] = through_views.get(i.index, 0.0) + reads * ratio
            elif i.ndim == 0 and n.ndim:
                same_index[i.index] = max(same_index.get(i.index, 0.0), 1.0)   # hoisted
            else:
                same_index[i.index] = max(same_index.get(i.index, 0.0), reads)
    return chosen


def _trailing_broadcast(src_shape, shape) -> bool:
    """Whether a broadcast only repeats values along trailing dims (a row's value along the
    row), which the kernels' innermost loops walk."""
    lead = len(shape) - len(src_shape)
    expanded = [d < lead or (src_shape[d - lead] == 1 and shape[d] != 1)
                for d in range(len(shape))]
    first = next((d for d, e in enumerate(expanded) if e), len(shape))
    return all(expanded[d] or shape[d] == 1 for d in range(first, len(shape)))


def _size_cuts(graph: Graph) -> set:
    """Nodes where fused expressions are cut to keep kernels under MAX_KERNEL_OPS, and shared
    values too big to recompute per user (RECOMPUTE_OPS).  The size of a node's inlined
    expression is estimated as 1 + the sizes of its operands (a shared operand counts once
    per use, as it may be indexed differently), restarting at values that live in memory.
    Where operands of an elementwise node share operands at the same index (a recurrence
    such as a Chebyshev series, b0 = x * b1 - b2 + c, reads each term twice), that count
    grows exponentially while the kernel computes each term once: there the distinct
    operations are counted instead (_distinct_ops)."""
    users: dict = {}
    other_users: dict = {}      # users that read a value other than at their own index
    for n in graph.nodes:
        for i in set(n.inputs):
            users[i.index] = users.get(i.index, 0) + 1
            # (a pack reads each operand at the operand's own index, as elementwise ops do)
            if (n.op.kind is not Kind.ELEMENTWISE or i.shape != n.shape) and n.op is not Op.PACK:
                other_users[i.index] = other_users.get(i.index, 0) + 1
    size: dict = {}
    cuts = set()
    for n in graph.nodes:
        if n.op.kind is Kind.LEAF or _needs_buffer(n) or n.op is Op.IOTA:
            size[n.index] = 0
            continue
        own = 0 if n.op.kind is Kind.VIEW else 1
        if n.op is Op.PACK:
            # read at constant indices, an element is one operand's expression; the pack's
            # builder (frontend/small_linalg.py) bounds what they compute together with stages
            size[n.index] = max(size[i.index] for i in n.inputs)
            continue
        total = own + sum(size[i.index] for i in n.inputs)
        if (total > RECOMPUTE_OPS and n.op.kind is Kind.ELEMENTWISE
                and sum(1 for i in n.inputs if size[i.index]) > 1):
            total = min(total, _distinct_ops(n, size, MAX_KERNEL_OPS + 1))
        # a value read only by elementwise users at its own index is computed once in the
        # kernel that fuses them; a reduction, scan or view reading it elsewhere would
        # recompute it (x = x - x.mean() repeated: quadratic work)
        shared = users.get(n.index, 0) > 1 and other_users.get(n.index, 0) > 0
        if total > MAX_KERNEL_OPS or (total > RECOMPUTE_OPS and shared):
            cuts.add(n.index)
            total = 0
        size[n.index] = total
    return cuts


def _distinct_ops(node: Node, size: dict, limit: int) -> int:
    """The operations of `node`'s inlined expression, each elementwise one counted once (they
    share one index); views and other operations count their whole estimate (they may be
    read at other indices).  Stops counting past `limit`."""
    seen, total, stack = set(), 0, [node]
    while stack:
        m = stack.pop()
        if m.index in seen or (m is not node and not size[m.index]):
            continue
        seen.add(m.index)
        if m is node or m.op.kind is Kind.ELEMENTWISE:
            total += 1
            stack.extend(m.inputs)
        else:
            total += size[m.index]
        if total > limit:
            break
    return total


def _reaches(roots, target: Node) -> bool:
    """Whether `target` is among the values roots are computed from."""
    seen, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if n.index == target.index:
            return True
        if n.index in seen or n.index < target.index:   # nodes are created operands first
            continue
        seen.add(n.index)
        stack.extend(n.inputs)
    return False


def _remapped(step, m: dict):
    """A body's plan step with its buffer ids mapped into the enclosing plan's."""
    from dataclasses import replace as _replace
    if isinstance(step, LoopBegin):
        return step.remapped(m)
    if isinstance(step, LoopEnd):
        return step
    return _replace(step, args=[_replace(a, buffer=m[a.buffer]) for a in step.args])


def _needs_buffer(node: Node) -> bool:
    return node.op.kind in (Kind.REDUCE, Kind.SCAN, Kind.SCATTER, Kind.UPDATE, Kind.SORT,
                            Kind.LIBRARY, Kind.LOOP) or (node.op is Op.PACK and node.attrs["stage"])


def unrolled_maps(shape, k: int) -> list:
    """Index maps over `shape` with its trailing k dims constant: one per element of them, in
    C order (the leading dims are the kernel's loops)."""
    nb = len(shape) - k
    lead = idents(nb)
    return [lead + tuple(Index(c) for c in combo)
            for combo in itertools.product(*(range(d) for d in shape[nb:]))]


# Update chains longer than this read their own earlier states inline (recomputed) rather
# than materialising each of them (ten stencil steps are materialised; a loop of thousands
# of element updates reading one another is not: that would be quadratic, and deep).
MATERIALIZED_CHAIN_STATES = 64

# Multiply-adds from which a contraction's computed operands are materialised (the CPU
# schedule hands such products to BLAS gemm: backends/cpu_schedule.GEMM_MIN_FLOPS).
CONTRACTION_MATERIALIZE = 8 * 8 * 8


def _merge_batch(batch, strides_list):
    """The batch dims merged where every operand allows (size-1 dims dropped): (sizes,
    strides per operand), each padded to two dims; None when more than two remain."""
    dims = [d for d, s in enumerate(batch) if s != 1]
    groups: list = []
    for d in dims:
        if groups and all(st[groups[-1][-1]] == st[d] * batch[d] for st in strides_list):
            groups[-1].append(d)
        else:
            groups.append([d])
    if len(groups) > 2:
        return None
    sizes = [int(np.prod([batch[d] for d in g], dtype=np.int64)) for g in groups]
    per = [[st[g[-1]] for g in groups] for st in strides_list]
    sizes += [1] * (2 - len(sizes))
    per = [p + [0] * (2 - len(p)) for p in per]
    if any(s == 0 for s in batch):
        sizes = [0, 1]
    return sizes, per


# A lone region update overwriting at least this fraction of a base of at least this many bytes
# has the rest of the base stored around it (emit_border) rather than the whole base stored
# first and then overwritten.  Below the size, one copy kernel costs less than 2 ndim launches.
BORDER_MIN_FRACTION = 0.5
BORDER_MIN_BYTES = 16384


def _overwritten_box(chain: list, shape):
    """[(lo, hi) per dim] of a chain that is one unit-step SETSLICE overwriting at least
    BORDER_MIN_FRACTION (but not all) of a base of `shape` of BORDER_MIN_BYTES, else None."""
    if len(chain) != 1 or chain[0].op is not Op.SETSLICE or not shape or \
            any(s != 1 for s in chain[0].attrs["step"]):
        return None
    start, sizes = chain[0].attrs["start"], chain[0].inputs[1].shape
    box = [(s0, s0 + n) for s0, n in zip(start, sizes)]
    total = int(np.prod(shape, dtype=np.int64))
    inside = int(np.prod(sizes, dtype=np.int64))
    if inside >= total or inside < BORDER_MIN_FRACTION * total or len(box) != len(shape) or \
            total * chain[0].dtype.itemsize < BORDER_MIN_BYTES:
        return None
    return box


def _slice_box(start, step, shape) -> list:
    """[(lo, hi)] per dim: the bounding box of a strided region."""
    box = []
    for s0, st, n in zip(start, step, shape):
        last = s0 + (n - 1) * st
        box.append((min(s0, last), max(s0, last) + 1) if n else (s0, s0))
    return box


def _disjoint(a, b) -> bool:
    return any(hi1 <= lo2 or hi2 <= lo1 for (lo1, hi1), (lo2, hi2) in zip(a, b))


def _states_read_in_place(chain: list, in_memory) -> dict:
    """{update position k: node indices of earlier states of the chain that update k reads
    only through slices of a region that neither it nor the updates between writes}: in the
    chain's buffer, when update k runs, those elements still hold the state's values, so
    the state need not be stored on its own (each such state would be a full copy).  A state
    read any other way (through a reduction, a gather, a region overwritten since) is
    materialised as before, by every reader."""
    position = {u.index: j for j, u in enumerate(chain)}
    boxes = []
    for u in chain:
        if u.op is not Op.SETSLICE:
            return {}            # a scatter's region is data: no claim about what it leaves
        boxes.append(_slice_box(u.attrs["start"], u.attrs["step"], u.inputs[1].shape))
    reads: dict = {}             # state index -> [(reader k, box)], or None: read otherwise
    for k, u in enumerate(chain):
        for i in u.inputs[1:]:
            if i.index in position:                 # the value is a whole state
                reads[i.index] = None
        seen, stack = set(), list(u.inputs[1:])
        while stack:
            n = stack.pop()
            if n.index in seen or n.index in in_memory or n.op.kind is Kind.LEAF:
                continue
            seen.add(n.index)
            for i in n.inputs:
                j = position.get(i.index)
                if j is None:
                    stack.append(i)
                elif j >= k or n.op is not Op.SLICE:
                    reads[i.index] = None
                elif reads.get(i.index, []) is not None:
                    box = _slice_box(n.attrs["start"], n.attrs["step"], n.shape)
                    reads.setdefault(i.index, []).append((k, box))
    out: dict = {}
    for index, uses in reads.items():
        if uses is None:
            continue
        j = position[index]
        if all(_disjoint(box, boxes[m]) for k, box in uses for m in range(j + 1, k + 1)):
            for k, _ in uses:
                out.setdefault(k, set()).add(index)
    return out


def _covers(chain: list, shape) -> bool:
    """Whether unit-step region updates alone overwrite every element (np.concatenate)."""
    boxes = []
    for u in chain:
        if u.op is not Op.SETSLICE or any(s != 1 for s in u.attrs["step"]):
            return False
        start = u.attrs["start"]
        boxes.append([(s0, s0 + n) for s0, n in zip(start, u.inputs[1].shape)])
    volume = sum(int(np.prod([b - a for a, b in box], dtype=np.int64)) for box in boxes)
    if volume != int(np.prod(shape, dtype=np.int64)):
        return False
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b)):
                return False
    return True


class _KernelBuilder:
    """Builds one kernel: arguments, the expression DAG and stores."""

    def __init__(self, fuser: _Fuser, space, rspace, label, inline_rows=frozenset()):
        self.fuser = fuser
        self.kernel = Kernel(tuple(space), tuple(rspace), label=label)
        self.inline_rows = inline_rows        # row reductions folded as prelude phases
        self.arg_of: dict[int, int] = {}      # buffer id -> argument index
        self.arg_buffers: list[int] = []
        self.memo: dict = {}
        self.walked: set = set()              # nodes materialize_cone has looked below
        self.checked = False                  # has data-dependent indices
        self.reduced: int | None = None       # the reduction an epilogue reads (Reduced)

    # ---- arguments -------------------------------------------------------------------------
    def arg(self, buf, kind) -> int:
        i = self.arg_of.get(buf.id)
        if i is None:
            i = len(self.kernel.args)
            self.kernel.args.append(KernelArg(kind, buf.dtype, buf.id))
            self.arg_of[buf.id] = i
            self.arg_buffers.append(buf.id)
        return i

    def _mark_write(self, i):
        a = self.kernel.args[i]
        self.kernel.args[i] = KernelArg(a.kind, a.dtype, a.buffer, a.extent, True)

    def load(self, buf: Buffer, index: Index, dtype=None) -> Load:
        return self._intern(Load(self.arg(buf, "buffer"), np.dtype(dtype or buf.dtype), index))

    def store(self, buf: Buffer, index: Index, value, mode="set"):
        i = self.arg(buf, "buffer")
        self._mark_write(i)
        if value.dtype != buf.dtype:
            value = self._intern(Compute(Op.CAST, buf.dtype, (value,)))
        self.kernel.stores.append(Store(i, index, value, mode))
        self.checked |= bool(index_picks(index))

    def check(self, index: Index):
        """Evaluate an index only to validate its picks (a bounds-check kernel)."""
        self.kernel.checks.append(index)
        self.checked = True

    def reduce(self, op: Op, value, buf: Buffer, index: Index, chunk=0, scan=False, acc=None,
               then=None):
        i = self.arg(buf, "buffer")
        self._mark_write(i)
        self.kernel.reduction = Reduction(op, value, i, index, chunk,
                                          np.dtype(acc) if acc is not None else None, scan, then)

    def sort(self, value, buf: Buffer, index: Index, scratch: Buffer, pscratch):
        i = self.arg(buf, "buffer")
        self._mark_write(i)
        si = self.arg(scratch, "buffer")
        self._mark_write(si)
        pi = None
        if pscratch is not None:
            pi = self.arg(pscratch, "buffer")
            self._mark_write(pi)
        self.kernel.sort = Sort(value, i, index, si, pi, pscratch is not None)

    def _intern(self, e):
        """One object per equal leaf expression (loads, constants, scalars)."""
        if isinstance(e, Compute):
            return e
        return self.memo.setdefault(("e", e), e)

    # ---- expressions -----------------------------------------------------------------------
    def build(self, node: Node, imap: tuple):
        """The kernel expression of `node` at index `imap`.  Iterative (an explicit stack of
        pending (node, imap) pairs): unrolled loops make chains of many thousand operations."""
        key = (node.index, imap)
        e = self.memo.get(key)
        if e is not None:
            return e
        self.fuser.materialize_cone([node], self.inline_rows,
                                    () if self.reduced is None else (self.reduced,),
                                    seen=self.walked)
        stack = [(node, imap)]
        while stack:
            n, m = stack[-1]
            if (n.index, m) in self.memo:
                stack.pop()
                continue
            missing = [d for d in self._deps(n, m) if (d[0].index, d[1]) not in self.memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.memo[(n.index, m)] = self._build(n, m)
        return self.memo[key]

    def build_epilogue(self, node: Node, reduced: Node, out: Buffer):
        """The expression of result `node` with reduction `reduced` read as `Reduced`, as the
        output buffer `out` takes it (the reduction's epilogue)."""
        self.reduced = reduced.index
        try:
            value = self.build(node, idents(node.ndim))
        finally:
            self.reduced = None
        if value.dtype != out.dtype:
            value = self._intern(Compute(Op.CAST, out.dtype, (value,)))
        return value

    def _deps(self, node: Node, imap: tuple) -> list:
        """(node, imap) pairs whose expressions `_build(node, imap)` reads from the memo."""
        if node.index == self.reduced:
            return []
        buf = self.fuser.buffer_of.get(node.index)
        if node.index in self.inline_rows and buf is None:
            return [(node.inputs[0], self._row_map(node, imap))]
        if (buf is not None and buf.role not in _SCALAR_ROLES) or node.op.kind is Kind.LEAF \
                or node.op is Op.IOTA or self.fuser.must_materialize(node):
            return []
        if node.op.kind is Kind.ELEMENTWISE:
            return [(o, () if o.ndim == 0 else imap) for o in node.inputs]
        if node.op.kind is Kind.VIEW:
            return [(node.inputs[0], _view_input_map(node, imap))]
        if node.op is Op.PACK:
            dep = self._pack_operand(node, imap)
            return [dep] if dep is not None else []
        if node.op is Op.GATHER:
            axis, nb = node.attrs["axis"], node.inputs[1].ndim
            index_deps = [(ix, imap[axis:axis + nb]) for ix in node.inputs[1:]]
            if any((ix.index, m) not in self.memo for ix, m in index_deps):
                return index_deps
            return [(node.inputs[0], self._gather_map(node, imap))]
        return []

    def _build(self, node: Node, imap: tuple):
        """One expression whose dependencies (`_deps`) are already in the memo."""
        memo = self.memo
        if node.index == self.reduced:
            return self._intern(Reduced(node.dtype))
        buf = self.fuser.buffer_of.get(node.index)
        if buf is not None and buf.role not in _SCALAR_ROLES:
            return self.load(buf, address(buf.strides, imap))
        op = node.op
        if node.index in self.inline_rows:
            value = memo[(node.inputs[0].index, self._row_map(node, imap))]
            k = self.kernel
            k.prelude.append(Phase(op, value, accumulator_dtype(op, value.dtype)))
            return self._intern(Folded(len(k.prelude) - 1, node.dtype))
        if op is Op.LITERAL:
            return self._intern(Const(node.attrs["value"], node.dtype))
        if op in (Op.PARAM, Op.RNG_KEY, Op.ITER):
            buf = self.fuser.leaf_buffer(node)
            return self._intern(Scalar(self.arg(buf, "scalar"), node.dtype))
        if op is Op.RANDOM:
            # the element's flat index in the draw's own shape: the same value wherever
            # (and however often) it is computed
            return Random(node.attrs["dist"], node.attrs["stream"],
                          memo[(node.inputs[0].index, ())],
                          address(contiguous_strides(node.shape), imap), node.dtype)
        if op in (Op.ARG, Op.CONST):
            buf = self.fuser.leaf_buffer(node)
            return self.load(buf, address(buf.strides, imap))
        if op is Op.IOTA:
            return self._intern(IndexValue(imap[node.attrs["axis"]], node.dtype))
        if self.fuser.must_materialize(node):
            buf = self.fuser.materialize(node)
            return self.load(buf, address(buf.strides, imap))
        if op.kind is Kind.ELEMENTWISE:
            operands = tuple(memo[(o.index, () if o.ndim == 0 else imap)] for o in node.inputs)
            checked = bool(node.attrs.get("checked"))
            self.checked |= checked or op is Op.CHECK
            return self._intern(Compute(op, node.dtype, operands, checked))
        if op.kind is Kind.VIEW:
            return memo[(node.inputs[0].index, _view_input_map(node, imap))]
        if op is Op.PACK:
            dep = self._pack_operand(node, imap)
            if dep is not None:
                return memo[(dep[0].index, dep[1])]
        if op is Op.GATHER:
            self.checked = True
            gmap = self._gather_map(node, imap)
            value = memo[(node.inputs[0].index, gmap)]
            axis, nb = node.attrs["axis"], len(node.inputs) - 1
            unread = _unread_picks(value, gmap[axis:axis + nb])
            if not unread:
                return value
            # the source does not vary along a gathered axis (a broadcast, a size-1 axis
            # reshaped away): no load evaluates that index, yet NumPy checks it.  A map
            # kernel checks it alone; other kernels read the gather from memory, where a
            # map kernel stored it
            if self.kernel.rspace:
                buf = self.fuser.materialize(node)
                return self.load(buf, address(buf.strides, imap))
            self.kernel.checks += unread
            return value
        buf = self.fuser.materialize(node)
        return self.load(buf, address(buf.strides, imap))

    @staticmethod
    def _pack_operand(node: Node, imap: tuple):
        """(operand, its index map) that a pack holds at `imap` when the packed trailing
        indices are constants; None when they depend on the loops (then it is read from
        memory)."""
        dims = node.attrs["dims"]
        nb = node.ndim - len(dims)
        flat = 0
        for ix, d in zip(imap[nb:], dims):
            if ix.terms or not 0 <= ix.const < d:
                return None
            flat = flat * d + ix.const
        return node.inputs[flat], imap[:nb]

    def _row_map(self, node: Node, imap: tuple) -> tuple:
        """The index of a row reduction's source: its row must be the kernel's current one."""
        nkept = node.ndim
        if tuple(imap) != idents(nkept) or len(self.kernel.space) != nkept:
            raise _NotRowLocal(node)
        return idents(nkept + len(self.kernel.rspace))

    def _gather_map(self, node: Node, imap: tuple) -> tuple:
        """The index into a gather's source: the data-dependent picks at the gathered axes
        (their index expressions are in the memo)."""
        src, *indices = node.inputs
        axis, nb = node.attrs["axis"], indices[0].ndim
        strict = bool(node.attrs.get("strict"))
        picks = tuple(Index.of(0, [(Pick(self.memo[(ix.index, imap[axis:axis + nb])],
                                         src.shape[axis + j], strict), 1)])
                      for j, ix in enumerate(indices))
        return imap[:axis] + picks + imap[axis + nb:]

    # ---- finishing -------------------------------------------------------------------------
    def finish(self) -> Kernel:
        if self.checked:
            self.kernel.status = self.arg(self.fuser.status_buffer(), "status")
            self._mark_write(self.kernel.status)
        k = coalesce(self.kernel)
        set_extents(k)
        return k


def _unread_picks(value, picks: tuple) -> list:
    """The gather indices `picks` (one Index of one Pick each) that no load or index value
    of the expression `value` evaluates."""
    at = [getattr(e, "index", None) or getattr(e, "position", None) for e in walk([value])]
    read = {(id(p.expr), p.size, p.strict) for ix in at if isinstance(ix, Index)
            for p in index_picks(ix)}
    return [ix for ix in picks if not all((id(p.expr), p.size, p.strict) in read
                                          for p in index_picks(ix))]


class _NotRowLocal(Exception):
    """A row reduction read at another row than the kernel's (row fusion does not apply)."""


def _view_input_map(node: Node, imap: tuple) -> tuple:
    """Index of the view's operand at the view's index `imap`."""
    src = node.inputs[0]
    if node.op is Op.BROADCAST:
        lead = node.ndim - src.ndim
        return tuple(Index() if src.shape[j] == 1 else imap[j + lead] for j in range(src.ndim))
    if node.op is Op.TRANSPOSE:
        out = [None] * src.ndim
        for k, p in enumerate(node.attrs["perm"]):
            out[p] = imap[k]
        return tuple(out)
    if node.op is Op.SLICE:
        return tuple(ix.scale(st).shift(s0)
                     for ix, s0, st in zip(imap, node.attrs["start"], node.attrs["step"]))
    if node.op is Op.RESHAPE:
        return _reshape_input_map(node.shape, src.shape, imap)
    raise NotImplementedError(node.op)


def _reshape_input_map(out_shape, in_shape, imap) -> tuple:
    result: list = [Index()] * len(in_shape)
    outs = [d for d, s in enumerate(out_shape) if s != 1]
    ins = [d for d, s in enumerate(in_shape) if s != 1]
    i = j = 0
    while i < len(outs) and j < len(ins):
        go, gi = [outs[i]], [ins[j]]
        po, pi = out_shape[outs[i]], in_shape[ins[j]]
        while po != pi:
            if po < pi:
                i += 1
                go.append(outs[i])
                po *= out_shape[outs[i]]
            else:
                j += 1
                gi.append(ins[j])
                pi *= in_shape[ins[j]]
        i += 1
        j += 1
        # flat index within the group, then split it over the operand's dims
        flat = Index()
        radix = 1
        for d in reversed(go):
            flat = flat + imap[d].scale(radix)
            radix *= out_shape[d]
        if len(gi) == 1:
            result[gi[0]] = flat
            continue
        radix = 1
        for d in reversed(gi):
            result[d] = simplify(Index.of(0, [(DivMod(flat, radix, in_shape[d], po), 1)]))
            radix *= in_shape[d]
    return tuple(result)


