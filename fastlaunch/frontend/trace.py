"""Tracing: run the user's NumPy function on Tracer arrays that record a Graph.

A Tracer stands for an array while `fn` runs.  It implements NumPy's protocols
(`__array_ufunc__`, `__array_function__`), the operators and the array methods, and turns each
into graph nodes (see frontend/numpy/).  Views share a `Storage` with their base, so that writes
through a view (`x[1:] = v`, `x += v`) update the base, and every view of it sees the update,
as in NumPy.  Nothing here knows about kernels or backends.

Size: just over 1,000 lines since the sizes Python reads are noted here for symbolic sizes
(`watch_sizes`, program/symbolic.py); the Tracer and its storage and views are one unit.
"""
from __future__ import annotations

import dis
import enum
import gc
import inspect
import linecache
import re
import sys
import threading
import types
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .. import forking, naming
from ..ir import ops
from ..errors import TracingError, caught_where, noting_errors
from ..ir.graph import Graph, Node, Op

_state = threading.local()

# ---- fewer garbage collections while tracing -------------------------------------------------
# A trace allocates a few objects per traced op and frees almost none (the graph keeps its
# nodes), so Python's young-generation collections, every 700 allocations, find nothing to
# free and push ever more survivors to the older generations: a quarter of a long loop's trace
# time.  While any thread traces, the first generation's threshold is raised; the last trace
# to end restores the thresholds, unless something else changed them meanwhile.
TRACE_GC_THRESHOLD = 10_000
_GC_LOCK = forking.lock(forking.TABLE)
_gc_tracing: dict = {}          # thread ident -> traces it has under way
_gc_saved: list = []            # [thresholds before, thresholds set] while any trace runs


@contextmanager
def fewer_collections():
    me = threading.get_ident()
    with _GC_LOCK:
        if not _gc_tracing:
            before = gc.get_threshold()
            if before[0] and before[0] < TRACE_GC_THRESHOLD:
                gc.set_threshold(TRACE_GC_THRESHOLD, *before[1:])
            _gc_saved[:] = [before, gc.get_threshold()]
        _gc_tracing[me] = _gc_tracing.get(me, 0) + 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_tracing[me] -= 1
            if not _gc_tracing[me]:
                del _gc_tracing[me]
            _restore_collections()


def _restore_collections() -> None:
    if not _gc_tracing and _gc_saved:
        before, ours = _gc_saved
        if gc.get_threshold() == ours:
            gc.set_threshold(*before)
        _gc_saved.clear()


def _gc_in_child() -> None:
    # the child has only the forking thread: other threads' traces never end there
    me = threading.get_ident()
    for ident in [t for t in _gc_tracing if t != me]:
        del _gc_tracing[ident]
    _restore_collections()


forking.after_in_child(_gc_in_child)


# Sizes read by Python (program/symbolic.py): while a symbolic build traces, every shape, size or
# length of a traced array that code outside fastlaunch reads is noted, so that a size the
# function uses as a Python value (range(n), `if n > 8`) specialises instead of generalising.
_size_watchers = 0
_size_watchers_lock = forking.lock(forking.TABLE)   # a fork never finds it held


class watch_sizes:
    """Collects, on this thread, the sizes user code reads from tracers (`reads`, a list of
    tuples) and the *guards* of basic indexing (`guards`): for every explicit slice bound or
    integer index b on an extent n, the differences n - b and n - b - 1 (n + b and n + b + 1
    for a negative b) whose signs decide how NumPy clamps or whether the index is in range.
    A symbolic template keeps every guard's sign (program/symbolic.py): x[:100000] traced at n = 10
    clamps, so no instance may serve an n past the bound."""

    def __enter__(self) -> "watch_sizes":
        global _size_watchers
        self.reads: list = []
        self.guards: list = []
        self.outer = (getattr(_state, "size_reads", None), getattr(_state, "size_guards", None))
        _state.size_reads, _state.size_guards = self.reads, self.guards
        with _size_watchers_lock:
            _size_watchers += 1
        return self

    def __exit__(self, *exc):
        global _size_watchers
        with _size_watchers_lock:
            _size_watchers -= 1
        _state.size_reads, _state.size_guards = self.outer


def note_index_guards(size: int, key) -> None:
    """Record the guards of one dim's basic index `key` (a slice or an int) on extent `size`
    (see watch_sizes)."""
    guards = getattr(_state, "size_guards", None)
    if guards is None:
        return
    bounds = (key.start, key.stop) if isinstance(key, slice) else (key,)
    for b in bounds:
        if b is not None:
            b = int(b)
            g = size - b if b >= 0 else size + b
            guards.append(g)
            guards.append(g - 1 if b >= 0 else g + 1)


def note_size_read(what, depth: int = 2) -> None:
    """Record a size read unless the reader is fastlaunch's own code (depth: the reader's
    frame, counted from the caller of this function)."""
    reads = getattr(_state, "size_reads", None)
    if reads is None:
        return
    if depth:
        name = sys._getframe(depth).f_globals.get("__name__", "")
        if name.startswith("fastlaunch.") or name == "fastlaunch":
            return
    reads.append(tuple(what) if isinstance(what, tuple) else (int(what),))


def tracing() -> bool:
    """Whether this thread is tracing a function."""
    return getattr(_state, "graph", None) is not None


def current_graph() -> Graph:
    g = getattr(_state, "graph", None)
    if g is None:
        raise TracingError("no trace is active")
    return g


# ---- views that can be written through ---------------------------------------------------------
@dataclass(frozen=True)
class ViewMap:
    """A basic-indexing view of a base array: every view dim is a strided walk along one base
    dim (or a new axis, base dim -1); base dims no view dim walks are fixed at `start`."""
    base_shape: tuple
    start: tuple
    dims: tuple          # per view dim: (base dim or -1, step, size)

    @staticmethod
    def identity(shape) -> "ViewMap":
        return ViewMap(tuple(shape), (0,) * len(shape), tuple((d, 1, s) for d, s in enumerate(shape)))

    @property
    def shape(self) -> tuple:
        return tuple(size for _, _, size in self.dims)

    @property
    def is_identity(self) -> bool:
        return self == ViewMap.identity(self.base_shape)

    def transpose(self, perm) -> "ViewMap":
        return ViewMap(self.base_shape, self.start, tuple(self.dims[p] for p in perm))

    def index(self, key: tuple) -> "ViewMap":
        """Apply a normalized basic-indexing key (ints, slices, None) covering every dim."""
        start = list(self.start)
        dims = []
        it = iter(self.dims)
        for k in key:
            if k is None:
                dims.append((-1, 1, 1))
                continue
            base, step, size = next(it)
            if _size_watchers:
                note_index_guards(size, k)
            if isinstance(k, slice):
                s0, _, st = k.indices(size)
                n = len(range(*k.indices(size)))
                if base >= 0:
                    start[base] += s0 * step if n else 0
                dims.append((base, step * st, n))
            else:
                if base >= 0:
                    start[base] += int(k) * step
        return ViewMap(self.base_shape, tuple(start), tuple(dims))

    def squeeze_expand(self, new_shape) -> "ViewMap | None":
        """The reshape as a view if it only removes or inserts size-1 dims, else None."""
        kept = [d for d in self.dims if d[2] != 1]
        if [d[2] for d in kept] != [s for s in new_shape if s != 1]:
            return None
        it = iter(kept)
        dims = tuple(next(it) if s != 1 else (-1, 1, 1) for s in new_shape)
        return ViewMap(self.base_shape, self.start, dims)

    # ---- graph building ----
    def read(self, g: Graph, base: Node) -> Node:
        if 0 in self.shape:       # nothing to read (possibly an emptied new axis)
            return ops.broadcast_to(g, ops.literal(g, 0, base.dtype), self.shape)
        walked = {b: (st, sz) for b, st, sz in self.dims if b >= 0}
        steps = [walked.get(d, (1, 1))[0] for d in range(len(self.base_shape))]
        sizes = [walked.get(d, (1, 1))[1] for d in range(len(self.base_shape))]
        n = ops.slice_view(g, base, self.start, steps, sizes)
        order = [b for b, _, _ in self.dims if b >= 0]
        n = ops.reshape(g, n, [sizes[d] for d in sorted(order)])
        rank = {b: i for i, b in enumerate(sorted(order))}
        n = ops.transpose(g, n, [rank[b] for b in order])
        return ops.reshape(g, n, self.shape)

    def write(self, g: Graph, base: Node, value: Node) -> Node:
        """The base with this view's elements replaced by value (broadcast to the view)."""
        value = ops.broadcast_to(g, value, self.shape)
        if 0 in self.shape:
            return base
        walked = [(b, i) for i, (b, _, _) in enumerate(self.dims) if b >= 0]
        value = ops.reshape(g, value, [self.dims[i][2] for _, i in walked])
        value = ops.transpose(g, value, [j for _, j in sorted((b, j) for j, (b, _) in enumerate(walked))])
        info = {b: (st, sz) for b, st, sz in self.dims if b >= 0}
        counts = [info.get(d, (1, 1))[1] for d in range(len(self.base_shape))]
        steps = [info.get(d, (1, 1))[0] for d in range(len(self.base_shape))]
        value = ops.reshape(g, value, counts)
        return ops.set_region(g, base, self.start, steps, counts, value)


class Storage:
    """The current value of one array that views may write into."""
    __slots__ = ("node", "version", "position", "frozen_reason", "through", "graph")

    def __init__(self, node: Node, position: int | None = None, frozen_reason: str | None = None,
                 through=None):
        self.node = node
        # the graph the value belongs to: a loop body traced inside a function (frontend/loops.py)
        # reads the function's values through its own leaves, never its nodes directly
        self.graph = getattr(_state, "graph", None)
        self.version = 0
        self.position = position          # flattened argument position, for inputs
        self.frozen_reason = frozen_reason
        # a copy that NumPy would have made a view (x[i] with a traced int i): through(value)
        # writes its new contents back where it came from after every write into it
        self.through = through


_JUMP_IF = {"POP_JUMP_IF_TRUE": True, "POP_JUMP_FORWARD_IF_TRUE": True,
            "POP_JUMP_BACKWARD_IF_TRUE": True, "POP_JUMP_IF_FALSE": False,
            "POP_JUMP_FORWARD_IF_FALSE": False, "POP_JUMP_BACKWARD_IF_FALSE": False}
_SKIP = ("TO_BOOL", "NOT_TAKEN", "EXTENDED_ARG", "CACHE", "NOP")
_code_instructions = weakref.WeakKeyDictionary()   # code -> (instructions, offset -> k)


def _assert_passing_value(frame):
    """Whether bool(x) is asked by an `assert` statement's own test, read from the caller's
    bytecode: the truth value that lets the assert go on, when the other one certainly raises
    (the jump's fall-through or its target is the assert's LOAD_ASSERTION_ERROR), else None.
    `assert a and b` checks a and b; in `assert a or b` only b's outcome is certain."""
    code = frame.f_code
    found = _code_instructions.get(code)
    if found is None:
        try:
            instrs = list(dis.get_instructions(code))
        except Exception:    # noqa: BLE001  (no readable bytecode: not an assert we know)
            return None
        if not any(i.opname == "LOAD_ASSERTION_ERROR" for i in instrs):
            instrs = []
        found = _code_instructions[code] = (instrs, {i.offset: k for k, i in enumerate(instrs)})
    instrs, at = found
    k = at.get(frame.f_lasti)
    if k is None:
        return None
    while k < len(instrs) and instrs[k].opname in _SKIP:
        k += 1
    if k >= len(instrs) or instrs[k].opname not in _JUMP_IF:
        return None
    jump = instrs[k]
    jumps_on = _JUMP_IF[jump.opname]
    fall = k + 1
    while fall < len(instrs) and instrs[fall].opname in _SKIP:
        fall += 1
    target = at.get(jump.argval)
    while target is not None and target < len(instrs) and instrs[target].opname in _SKIP:
        target += 1

    def raises(j):
        return j is not None and j < len(instrs) and instrs[j].opname == "LOAD_ASSERTION_ERROR"
    if raises(fall) and not raises(target):
        return jumps_on
    if raises(target) and not raises(fall):
        return not jumps_on
    return None


_BUILTIN_MINMAX = re.compile(r"(?<![\w.])(max|min)\(")
# `out[i] = x`, `out[0], out[1] = a, b`, `out[i] += x`: a store into something subscripted
_SUBSCRIPT_STORE = re.compile(r"\]\s*(?:,[^=]*)?(?:[-+*/%@&|^]|//|\*\*|<<|>>)?=(?!=)")

_CHOICE = ("express data-dependent choices with np.where(cond, a, b), or make the deciding "
           "argument static with static_argnames=/static_argnums=")
_STORE = ("storing a traced value into a NumPy array (out[i] = x) converts it to a Python "
          "number: create `out` from a traced value instead, e.g. "
          "np.zeros_like(x), or with np.zeros/np.empty inside fn (np.ndarray(shape) is NumPy's "
          "own class, which fastlaunch cannot intercept: use np.empty(shape))")
_CONVERT = ("return it from the function (a 0-d array) and convert it after the call; "
            "for data-dependent choices use np.where(cond, a, b), or make the deciding argument "
            "static with static_argnames=/static_argnums=")


def _source_line(frame) -> str:
    """The line the user's code is at: `frame`, or the first frame outside fastlaunch above it
    (a TraceBuffer forwards bool()/float() to its tracer)."""
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "fastlaunch":
        frame = frame.f_back
    if frame is None:
        return ""
    try:
        return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    except Exception:   # noqa: BLE001  (no source: no line)
        return ""


def _bool_advice(frame) -> str:
    """What to do instead of bool(tracer), for what the user's line does with it."""
    line = _source_line(frame)
    if line.startswith("assert "):
        return ("an `assert` whose failure fastlaunch cannot tell from one of its parts "
                "(`assert a or b`, or an assert rewritten by a tool such as pytest) cannot be "
                "checked: `assert cond` and `assert a and b` on traced values become checks "
                "made every time the function runs; or check the inputs before the call")
    if _BUILTIN_MINMAX.search(line):
        return ("Python's max()/min() compare values one by one: use np.maximum(a, b) / "
                "np.minimum(a, b), or x.max() / x.min()")
    if line.startswith("while "):
        return ("here it is a `while` condition, so the number of iterations depends on the "
                "data. Loop a fixed number of times (for _ in range(n)) with np.where to "
                "freeze converged values, or make one iteration the compiled function and "
                "run the loop with fastlaunch.iterate(step, n, ..., until=lambda ...: converged)")
    follows = _next_statement(frame)
    if line.startswith("if ") and (follows == "break" or line.endswith(": break")):
        return ("here it decides whether a loop stops (a convergence test): make one iteration "
                "the compiled function and run the loop with fastlaunch.iterate(step, n, ..., "
                "until=lambda ...: converged), or loop a fixed number of times with np.where "
                "to freeze converged values")
    if line.startswith("if ") and follows.startswith("raise "):
        return ("here it decides whether to raise (a check of the inputs): check them before "
                "calling the compiled function, or write `assert cond, message`, which is "
                "checked on every call")
    if naming.enclosing_loop(frame) == "while":
        # `while i < n: if x[i] < c[j]: i += 1 else: j += 1`: the choice steers the loop
        return (_CHOICE + "; here the choice is made inside a `while` loop, where it decides "
                "how the loop goes on (its counters, when it stops): the number of iterations "
                "depends on the data, so make one iteration the compiled function and run the "
                "loop with fastlaunch.iterate(step, n, ..., until=lambda ...: done), or loop a "
                "fixed number of times with np.where")
    return _CHOICE


def _value_advice(frame) -> str:
    """What to do instead of float(tracer) / int(tracer) / x.item() / x.tolist()."""
    if _SUBSCRIPT_STORE.search(_source_line(frame)):
        return _STORE
    return _CONVERT


def _next_statement(frame) -> str:
    """The source line after the user's current one (the body of a one-line `if`)."""
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "fastlaunch":
        frame = frame.f_back
    if frame is None:
        return ""
    try:
        return linecache.getline(frame.f_code.co_filename, frame.f_lineno + 1).strip()
    except Exception:   # noqa: BLE001  (no source)
        return ""


class Tracer:
    """An array inside a traced function.  See frontend/numpy/ for what it supports."""

    __slots__ = ("_storage", "_view", "_reshape", "_post", "_node", "_version", "_graph", "weak",
                 "scalar", "python", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, storage: Storage, view: ViewMap | None = None, reshape: tuple | None = None,
                 weak: type | None = None, scalar: bool = False, post: ViewMap | None = None):
        # the value is post(reshape(view(storage))): a view of the storage, optionally
        # reshaped (C order), and a view of that reshaped value; writes go back the same way
        self._storage = storage
        self._view = view
        self._reshape = reshape
        self._post = post if reshape is not None else None
        self._node = None
        self._version = -1
        self._graph = None
        self.weak = weak          # Python type of a NEP 50 weak scalar, else None
        self.scalar = scalar      # NumPy would hand this back as a scalar, not a 0-d array
        self.python = weak is not None    # a Python scalar: its views are 0-d arrays

    @property
    def node(self) -> Node:
        st = self._storage
        g = getattr(_state, "graph", None)
        # a cached node is per graph (a loop body reads enclosing values through its own
        # leaves); with no trace active (results flattened after it) the last one stands
        if self._version != st.version or self._node is None or \
                (self._graph is not g and g is not None):
            n = st.node
            if st.graph is not g and st.graph is not None and g is not None:
                n = enclosing_value(g, n, st.graph)
            if self._view is not None:
                n = self._view.read(current_graph(), n)
            if self._reshape is not None:
                n = ops.reshape(current_graph(), n, self._reshape)
                if self._post is not None:
                    n = self._post.read(current_graph(), n)
            self._node = n
            self._version = st.version
            self._graph = g
        return self._node

    # ---- array attributes ----
    @property
    def shape(self) -> tuple:
        if _size_watchers:
            note_size_read(self.node.shape)
        return self.node.shape

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return self.node.ndim

    @property
    def size(self) -> int:
        if _size_watchers:
            note_size_read(self.node.shape)
        return self.node.size

    @property
    def itemsize(self) -> int:
        return self.node.dtype.itemsize

    @property
    def nbytes(self) -> int:
        if _size_watchers:
            note_size_read(self.node.shape)
        return self.node.size * self.node.dtype.itemsize

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        if _size_watchers:
            note_size_read(self.node.shape, 0)      # len() itself: always Python's
        return self.node.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        if _size_watchers:
            note_size_read(self.node.shape, 0)
        return (self[i] for i in range(self.node.shape[0]))

    @property
    def __class__(self):
        """What isinstance() sees (type() still says Tracer): a value NumPy hands back as a
        scalar looks like that NumPy scalar (x[2, 0] of a float64 array is an np.float64,
        so `isinstance(x, float)` holds, as real code tests before calling .item()), a weak
        Python number (a Python int or float argument, math.cos(...)) like that Python type
        (`isinstance(pad, int)`); every other tracer like a Tracer."""
        if self.weak is not None:
            return self.weak
        if self.scalar:
            return self.node.dtype.type
        return Tracer

    def __repr__(self):
        return f"Tracer(shape={self.shape}, dtype={self.dtype})"

    __hash__ = None  # like ndarray: == makes arrays, so tracers are unhashable

    # ---- data-dependent Python control flow cannot be traced ----
    def _concrete(self, what: str, advice: str):
        """Raise for a Python-level use of this array's value: `what` names the use, `advice`
        what to do instead (specific to that use: see _bool_advice, _value_advice)."""
        positions = _scalar_argument_positions(self.node)
        if positions:
            # computed from Python scalar arguments only: the trace can use their values
            raise SpecializeRequest(positions, what)
        raise TracingError(
            f"{what} needs the value of a traced array ({self.dtype}{list(self.shape)}), which is "
            f"not known while tracing: {advice}.")

    def __bool__(self):
        frame = sys._getframe(1)
        passing = _assert_passing_value(frame)
        if passing is not None:
            return self._assert(passing, frame)
        self._concrete("bool(x) (an `if`, `while`, `and`/`or` or `not` on an array)",
                       _bool_advice(frame))

    def _assert(self, passing: bool, frame) -> bool:
        """bool(x) as the test of an `assert`: a runtime check.  The trace goes on as if the
        assert passed; every call checks it and raises AssertionError, with nothing written,
        when it does not."""
        if self.size != 1:
            raise ValueError("The truth value of an empty array is ambiguous. Use `array.size > "
                             "0` to check that an array is not empty." if self.size == 0 else
                             "The truth value of an array with more than one element is "
                             "ambiguous. Use a.any() or a.all()")
        g = current_graph()
        cond = ops.cast(g, ops.reshape(g, self.node, ()), np.bool_)
        if not passing:
            cond = ops.elementwise(g, Op.LOGICAL_NOT, np.bool_, [cond])
        code = frame.f_code
        line = linecache.getline(code.co_filename, frame.f_lineno).strip()
        message = (f"fastlaunch: assertion failed at {code.co_filename}:{frame.f_lineno} "
                   f"(in {code.co_name}){': ' + line if line else ''}; checked when the "
                   f"compiled function ran, no argument was modified")
        ops.add_check(g, cond, AssertionError, message)
        return passing

    def __float__(self):
        self._concrete("float(x)", _value_advice(sys._getframe(1)))

    def __int__(self):
        self._concrete("int(x)", _value_advice(sys._getframe(1)))

    def __index__(self):  # noqa: PLE0305  (_concrete raises: there is no index to return)
        self._concrete("using a traced array as a Python index or size (operator.index)",
                       "to index a NumPy array by a traced index use "
                       "fastlaunch.asarray(array)[index] (a list or tuple: make it an array "
                       "first); a size or count (range(n), a shape) must be static: pass it as "
                       "a Python int, or name it in static_argnames=")

    def __complex__(self):
        self._concrete("complex(x)", _value_advice(sys._getframe(1)))

    def tolist(self):
        self._concrete("x.tolist()", _CONVERT)

    def item(self, *args):
        self._concrete("x.item()", _CONVERT)

    def __array__(self, dtype=None, copy=None):
        library, where = naming.converting_function(sys._getframe(1))
        if library:
            # a library function that calls np.asarray on its arguments (scipy.linalg.inv):
            # name it as the user wrote it, not the np.asarray deep inside it
            raise TracingError(
                f"{library} (called at {where}) converts its arguments to NumPy arrays, so it "
                f"cannot be traced: fastlaunch records NumPy functions that dispatch on their "
                f"arguments (ufuncs, __array_function__){naming.instead(library)}")
        raise TracingError(
            f"converting a traced array ({self.dtype}{list(self.shape)}) to a NumPy array "
            f"(np.asarray, indexing a NumPy array with it, or storing it into a NumPy array) is "
            f"not possible while tracing. Create arrays from traced values instead, e.g. "
            f"np.zeros_like(x); arrays made inside fn with np.zeros/np.empty/np.full/... take "
            f"traced values, but not np.ndarray(shape) (use np.empty(shape)) nor an array made "
            f"outside fn; index a NumPy constant by a traced index with "
            f"fastlaunch.asarray(table)[index]; for data-dependent choices use np.where.")

    # The NumPy protocols (__array_ufunc__, __array_function__), __setitem__, the operators
    # and the array methods are installed on this class by frontend/numpy/, which builds on it
    # (so that this module does not import that one).

    def _assign(self, value_node: Node, operation: str):
        """Write `value_node` (already the right dtype) into every element of this array."""
        st = self._storage
        if self.scalar or self.weak is not None:
            raise TracingError(f"{operation}: a scalar cannot be written in place")
        if st.frozen_reason:
            raise TracingError(f"{operation}: {st.frozen_reason}")
        g = current_graph()
        if st.graph is not None and st.graph is not g:
            raise TracingError(f"{operation}: a loop body (fl.iterate's step) writes into an "
                               f"array of the function around it; return the new value as a "
                               f"result of the step instead")
        view = self._view or ViewMap.identity(st.node.shape)
        if self._reshape is not None:
            # into the reshaped value (through the post view), then back through the reshape
            viewed = view.read(g, st.node)
            reshaped = ops.reshape(g, viewed, self._reshape)
            if self._post is not None:
                value_node = self._post.write(g, reshaped, value_node)
            value_node = ops.reshape(g, value_node, viewed.shape)
        st.node = view.write(g, st.node, value_node)
        st.version += 1
        if st.through is not None:
            st.through(Tracer(st))


def enclosing_value(g: Graph, node: Node, source: Graph) -> Node:
    """A value of an enclosing trace (`source`) read inside graph g, a loop body: the body's
    own leaf standing for it (Graph.enclosing, set by frontend/loops.py)."""
    if g.enclosing is None:
        raise TracingError("a traced value of another function is used here; pass it as an "
                           "argument instead")
    return g.enclosing(node, source)


def new_tracer(node: Node, weak: type | None = None, scalar: bool | None = None) -> Tracer:
    """A fresh array value (not a view of anything)."""
    return Tracer(Storage(node), None, None, weak, node.ndim == 0 if scalar is None else scalar)


def frame(t: Tracer) -> ViewMap:
    """The view map a further view of t composes with: over the storage's shape, or over the
    reshaped shape when t is (a view of) a reshape."""
    if t._reshape is not None:
        return t._post or ViewMap.identity(t._reshape)
    return t._view or ViewMap.identity(t._storage.node.shape)


def _c_strides(shape) -> list:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return out[::-1]


def _placed(vm: ViewMap, offset: int, strides) -> tuple:
    """(first element's position, strides) of view `vm` of a base placed at `offset` with
    `strides` (elements); a new axis walks nothing."""
    first = offset + sum(s * b for s, b in zip(vm.start, strides))
    return first, tuple(step * strides[b] if b >= 0 else 0 for b, step, _ in vm.dims)


def memory_layout(t: Tracer) -> tuple | None:
    """Where t's elements lie in its storage, taken as a C-ordered array (the memory a traced
    array has): (the storage's node, the position of t's first element in it, t's strides in
    elements), as NumPy would see a view of a C-contiguous array.  None where t is a reshape
    of a view whose elements are not one contiguous block (NumPy would copy it)."""
    base = t._storage.node
    vm = t._view or ViewMap.identity(base.shape)
    first, strides = _placed(vm, 0, _c_strides(base.shape))
    if t._reshape is None:
        return base, first, strides
    walked = [(st, n) for st, (_, _, n) in zip(strides, vm.dims) if n != 1]
    if [st for st, _ in walked] != _c_strides([n for _, n in walked]):
        return None
    post = t._post or ViewMap.identity(t._reshape)
    return (base,) + _placed(post, first, _c_strides(t._reshape))


def view_of(t: Tracer, view: ViewMap | None = None, reshape: tuple | None = None,
            scalar: bool = False) -> Tracer:
    """A view of t's storage, writable through: `view` (over frame(t)), or a reshape of t."""
    if reshape is not None:
        if t._reshape is None:
            return Tracer(t._storage, frame(t), reshape, None, scalar)
        if t._post is None or t._post.is_identity:
            # a reshape of a reshape (C order) is one reshape of the same view
            return Tracer(t._storage, t._view, reshape, None, scalar)
        # a reshape of a view of a reshape: a copy, read-only so that no write is lost
        src = Tracer(Storage(t.node, frozen_reason="this array is a reshape of a view of a "
                                                   "reshaped array, which fastlaunch cannot "
                                                   "write through; index the original array"))
        return Tracer(src._storage, None, reshape, None, scalar)
    vm = view if view is not None else frame(t)
    if t._reshape is not None:
        return Tracer(t._storage, t._view, t._reshape, None, scalar, post=vm)
    return Tracer(t._storage, vm, None, None, scalar)


from . import pytree as _pytree  # noqa: E402

_pytree.LEAF_TYPES.add(Tracer)


# ---- the trace driver --------------------------------------------------------------------------
class ResultSource(str, enum.Enum):
    """Where a result leaf comes from (Traced.outputs' first item).  A str enum: it compares
    equal to (and prints as) its value."""
    NEW = "new"          # a graph output: (NEW, output index, as_scalar)
    INPUT = "input"      # an argument leaf handed back: (INPUT, leaf)
    VALUE = "value"      # a Python value returned as is: (VALUE, obj)

    def __str__(self) -> str:
        return self.value


@dataclass
class Traced:
    graph: Graph
    outputs: list            # per result leaf: a tuple led by its ResultSource
    mutated_leaves: list
    int_bounds: dict         # leaf -> (lo, hi): weak Python int parameters cast to narrower ints
    # paths (argument position, then keys/indices) of argument lists and dicts the function
    # mutated; when non-empty, the outputs are those of (result, [final contents per path])
    effects: list = None
    # iterations of each Python loop rolled into a loop node (frontend/roll.py)
    rolled: list = None
    # the most loop iterations one frame of the traced code ran while making nodes (see
    # LoopCounter): a Python loop unrolled into the graph
    loop_iterations: int = 0


# modules whose frames are not the user's code: a node made inside np.linalg's Python code or
# fastlaunch's own expansions belongs to the user's line that called them
_LIBRARY_MODULES = ("fastlaunch", "numpy", "scipy")


class LoopCounter:
    """Counts, per frame of the traced code, the new nodes made at a bytecode offset below the
    previous one's in that frame: a jump back, i.e. one more iteration of a loop (or
    comprehension) making nodes.  Nodes that one call makes (np.linalg.inv of an 8x8 matrix
    written out as thousands of nodes) come from one offset and count nothing.  Called for
    every 4th node (Graph.observer): a loop whose body makes fewer nodes counts fewer
    iterations than it ran, which the thresholds (jit.UNROLLED_*) allow for."""

    __slots__ = ("last", "most", "kinds")

    def __init__(self):
        self.last: dict = {}     # id(frame) -> (frame, offset of its last node, jumps back)
        self.most = 0
        self.kinds: dict = {}    # code -> _LIBRARY, _USER or _TOP (trace_function: stop)

    def __call__(self):
        f = sys._getframe(2)         # above Graph.add
        last, kinds = self.last, self.kinds
        while f is not None:
            kind = kinds.get(f.f_code)
            if kind is None:
                kind = kinds[f.f_code] = _frame_kind(f)
            if kind == _USER:
                seen = last.get(id(f))
                if seen is not None and seen[0] is f:
                    count = seen[2]
                    if f.f_lasti < seen[1]:
                        count += 1
                        if count > self.most:
                            self.most = count
                else:
                    count = 0
                last[id(f)] = (f, f.f_lasti, count)
            elif kind == _TOP:
                break
            f = f.f_back


_LIBRARY, _USER, _TOP = 0, 1, 2


def _frame_kind(frame) -> int:
    if frame.f_code is trace_function.__code__:
        return _TOP
    module = frame.f_globals.get("__name__", "")
    return _LIBRARY if module.split(".", 1)[0] in _LIBRARY_MODULES else _USER


_user_code: "weakref.WeakKeyDictionary | dict" = {}


# a generator's (or coroutine's) frame is resumed by whoever iterates it: its callers change
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | \
    inspect.CO_ITERABLE_COROUTINE


class _Sites:
    """Where the traced function's code is as a node is made (a trace's `Graph.site`): the
    frames of user code on the stack below trace_function, outermost first, each with its
    bytecode offset, then the library frame the innermost one called (a new frame object for
    each call).  frontend/roll.py finds the iterations of the code's loops from these: an offset that
    jumps back, or the same instruction calling again.  The frames are held (so that a new
    one is never taken for an old one by its address) until the trace is rolled.

    While a frame runs, the frames above it wait in the calls that led to it, at fixed
    offsets: the part of the chain above the innermost user frame is computed once per such
    frame (a generator's excepted) and kept for the trace, so a node costs a walk over the
    library frames below that frame only."""

    __slots__ = ("above",)

    def __init__(self):
        self.above: dict = {}    # user frame -> the chain above it

    def __call__(self):
        f = sys._getframe(2)
        below = None
        while f is not None:
            code = f.f_code
            if code is _TRACE_CODE:
                return None
            user = _user_code.get(code)
            if user or (user is None and _is_user(f, code)):
                break
            below = f
            f = f.f_back
        if f is None:
            return None
        above = self.above.get(f)
        if above is None:
            above = _user_chain(f.f_back)
            if not code.co_flags & _RESUMABLE:
                self.above[f] = above
        return above + ((f, f.f_lasti), (below, -1))


def _is_user(f, code) -> bool:
    user = _user_code.get(code)
    if user is None:
        module = f.f_globals.get("__name__", "") or ""
        user = _user_code[code] = module.split(".", 1)[0] not in _LIBRARY_MODULES
    return user


def _user_chain(f) -> tuple:
    """The user frames from f up to trace_function, outermost first, with their offsets."""
    chain = []
    while f is not None:
        code = f.f_code
        if code is _TRACE_CODE:
            break
        if _is_user(f, code):
            chain.append((f, f.f_lasti))
        f = f.f_back
    chain.reverse()
    return tuple(chain)


def trace_function(fn, build_args, leaves: list, roll: bool = True) -> tuple[Traced, object]:
    """Run fn on tracers.  `leaves` describes each flattened argument (leaves.LeafSpec: an
    array's dtype and shape, a scalar's dtype and weak Python type).  `build_args(tracers)`
    rebuilds the call's (args, kwargs) around the tracers.  roll: Python loops of many
    identical iterations become loop nodes (frontend/roll.py).  Returns (Traced, result tree)."""
    g = Graph()
    if roll:
        g.sites, g.site = [], _Sites()
    g.observer = loops = LoopCounter()
    previous = getattr(_state, "graph", None)
    _state.graph = g
    try:
        tracers = []
        storages = []
        for pos, leaf in enumerate(leaves):
            if leaf.is_array:
                node = g.add(Op.ARG, leaf.dtype, leaf.shape, position=pos)
                st = Storage(node, position=pos)
                storages.append(st)
                tracers.append(Tracer(st))
            else:
                node = g.add(Op.PARAM, leaf.dtype, (), position=pos)
                weak = leaf.weak if leaf.weak is not bool else None   # see ops.weak_literal
                t = Tracer(Storage(node, position=pos), weak=weak, scalar=True)
                t.python = leaf.weak is not None      # a Python bool too (not weak)
                tracers.append(t)
        args, kwargs = build_args(tracers)
        containers = _containers((args, kwargs))
        bound = _bound_object_state(fn)
        with noting_errors() as noted:
            try:
                result = fn(*args, **kwargs)
            except Exception as err:
                # NumPy may turn our request into its own TypeError (np.zeros(n)): specialise
                request = next((e for e in noted if isinstance(e, SpecializeRequest)), None)
                if request is not None and request is not err:
                    raise request from err
                swallowed = next((e for e in noted if e is not err), None)
                if swallowed is not None and not isinstance(err, TracingError):
                    # the code caught our error and raised its own (a library's bare
                    # `except:` turning it into "matrix not positive definite"): that message
                    # would blame the user's data for what fastlaunch cannot trace
                    raise TracingError(
                        f"the traced function caught a fastlaunch.TracingError at "
                        f"{caught_where(swallowed)} and then raised "
                        f"{type(err).__name__}: {err}; the TracingError was: "
                        f"{swallowed}") from err
                failure = None if isinstance(err, SpecializeRequest) else \
                    naming.library_failure(err)
                if failure:
                    raise TracingError(failure) from err
                raise
            finally:
                rebound = _restore_bound_object(fn, bound)
        if rebound:
            raise TracingError(
                f"{getattr(fn, '__qualname__', fn)} rebinds {', '.join(rebound)} of the object "
                f"it is bound to: fastlaunch.compile(obj.method) compiles it for that one object, "
                f"whose attributes it reads while tracing, and cannot replay the rebinding. "
                f"Decorate the method in its class with @fastlaunch.compile (self is then an "
                f"argument: its array attributes are read, and the attributes it rebinds "
                f"rebound, on every call), or pass the state as arguments and return it")
        request = next((e for e in noted if isinstance(e, SpecializeRequest)), None)
        if request is not None:
            raise request            # caught by the traced code: still specialise
        if noted:
            err = noted[0]
            raise TracingError(
                f"the traced function caught a fastlaunch.TracingError at {caught_where(err)} and "
                f"went on; the trace would record its fallback, not the computation asked for, "
                f"so it is discarded. The error was: {err}")
        effects = _container_effects(containers)
        if effects:
            # the final contents of mutated argument containers become extra results, which
            # the caller's containers receive on every call (Traced.effects says where)
            result_and_effects = (result, [final for _, final in effects])
        else:
            result_and_effects = result
        ops.seal_checks(g)
        traced = _finish(g, result_and_effects, tracers, storages)
        traced.effects = [path for path, _ in effects]
        traced.loop_iterations = loops.most + 1 if loops.most else 0    # jumps back + 1
        return traced, result_and_effects
    except BaseException:
        g.sites = g.site = None          # (they hold the traced code's frames)
        raise
    finally:
        _state.graph = previous
        # drop the frames the counter kept: a finished frame holds its caller's (f_back), so
        # they would make a cycle through this frame's locals and keep the whole trace's
        # objects (kernels, plans) alive until a garbage collection
        g.observer = None
        loops.last.clear()


_TRACE_CODE = trace_function.__code__


def _bound_object_state(fn):
    """The attributes of the object a bound method `fn` belongs to, before the trace."""
    obj = getattr(fn, "__self__", None)
    if obj is None or not hasattr(fn, "__func__") or isinstance(obj, (type, types.ModuleType)):
        return None
    try:
        return dict(vars(obj))
    except TypeError:            # no __dict__ (slots, builtins): nothing to rebind
        return None


def _restore_bound_object(fn, before) -> list:
    """The attributes the trace rebound on that object, each given its old value back (a
    tracer must not stay on the user's object)."""
    if before is None:
        return []
    obj = fn.__self__
    now = vars(obj)
    changed = [k for k in now if k not in before or now[k] is not before[k]] + \
        [k for k in before if k not in now]
    for k in changed:
        if k in before:
            now[k] = before[k]
        else:
            del now[k]
    return [f"self.{k}" for k in changed]


class SpecializeRequest(TracingError):
    """The trace needs the value of something computed from scalar arguments alone (a loop
    count, a shape, an `if` on a flag): the caller traces again with those arguments passed
    as their values, and keys the result by them (jit.py)."""

    def __init__(self, positions, what: str):
        super().__init__(f"{what} needs the value of scalar argument leaves {sorted(positions)}")
        self.positions = frozenset(positions)
        self.what = what


def _scalar_argument_positions(node: Node) -> set:
    """Leaf positions of the scalar arguments (PARAM nodes) a 0-d node is computed from, when
    it depends on nothing else but literals; else an empty set."""
    if node.ndim:
        return set()
    found, seen, stack = set(), set(), [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op is Op.PARAM:
            found.add(n.attrs["position"])
        elif n.op is not Op.LITERAL and (not n.inputs or n.ndim):
            return set()            # an array, a constant, an index space: data, not a value
        stack.extend(n.inputs)
    return found


class Unreturnable:
    """A traced object that may be used inside the function but cannot be its result (a
    boolean-mask selection, whose size depends on the data); `why` says what to do instead."""
    why = "this value cannot be returned from a traced function"


def _finish(g: Graph, result, tracers, storages) -> Traced:
    from .pytree import flatten
    leaves, _ = flatten(result)
    outputs = []
    returned: dict = {}            # id(tracer) -> output index: `return y, y` gives y twice
    for leaf in leaves:
        if isinstance(leaf, Unreturnable):
            raise TracingError(leaf.why)
        hook = getattr(type(leaf), "__fl_tracer__", None)
        if hook is not None:     # an array made inside fn: its tracer, or its constant value
            t = hook(leaf)
            leaf = t if t is not None else leaf.view(np.ndarray)
        if isinstance(leaf, Tracer):
            st = leaf._storage
            if st.position is not None and leaf._view is None and leaf._reshape is None \
                    and (leaf is tracers[st.position] or st.node.op is not Op.PARAM):
                outputs.append((ResultSource.INPUT, st.position))
                continue
            if id(leaf) not in returned:
                g.outputs.append(leaf.node)
                returned[id(leaf)] = len(g.outputs) - 1
            outputs.append((ResultSource.NEW, returned[id(leaf)], bool(leaf.scalar)))
        elif isinstance(leaf, np.ndarray):
            g.outputs.append(g.add_const(leaf))
            outputs.append((ResultSource.NEW, len(g.outputs) - 1, False))
        else:
            outputs.append((ResultSource.VALUE, leaf))
    mutated = []
    for st in storages:
        if st.version:
            g.writebacks.append((st.position, st.node))
            mutated.append(st.position)
    g.strip_marks()        # differentiation's marks (ir/adjoint.py) end with the trace
    g.site = None          # (g.sites stays for frontend/roll.py, which jit.py runs next)
    return Traced(g, outputs, mutated, _param_int_bounds(g))


def _param_int_bounds(g: Graph) -> dict:
    """Weak Python-int parameters must fit every integer dtype they are cast to, as in NumPy."""
    bounds: dict = {}
    for n in g.live_nodes():
        if n.op is Op.CAST and n.inputs[0].op is Op.PARAM and n.inputs[0].dtype == np.int64 \
                and n.dtype.kind in "iu" and not n.attrs.get("wraps"):
            info = np.iinfo(n.dtype)
            pos = n.inputs[0].attrs["position"]
            lo, hi = bounds.get(pos, (-2**63, 2**63 - 1))
            bounds[pos] = (max(lo, int(info.min)), min(hi, int(info.max)))
    return bounds


# ---- side effects on argument containers ---------------------------------------------------
class Attr:
    """A path step into an object's attribute (argument paths are otherwise keys/indices)."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, other):
        return isinstance(other, Attr) and other.name == self.name

    def __hash__(self):
        return hash(("Attr", self.name))

    def __repr__(self):
        return f".{self.name}"


def _containers(tree, path=()) -> list:
    """(path, container, snapshot of its items) for every list, dict and attribute-flattened
    object in the call's argument tree, outermost first.  path: (0, position) into args, or
    (1, name) into kwargs, then keys, indices and Attr steps."""
    from .pytree import object_parts
    out = []
    stack = [(tree, path)]
    while stack:
        x, p = stack.pop()
        t = type(x)
        if t is dict:
            out.append((p, x, list(x.items())))
            stack.extend((v, p + (k,)) for k, v in reversed(list(x.items())))
        elif t is list:
            out.append((p, x, list(x)))
            stack.extend((v, p + (i,)) for i, v in reversed(list(enumerate(x))))
        elif t is tuple or (isinstance(x, tuple) and hasattr(t, "_fields")):
            stack.extend((v, p + (i,)) for i, v in reversed(list(enumerate(x))))
        elif p and not isinstance(x, (np.ndarray, np.generic, Tracer)) and x is not None:
            parts = object_parts(x)
            if parts is not None and parts[0].custom is None:
                out.append((p, x, list(vars(x).items())))
                stack.extend((v, p + (Attr(k),))
                             for k, v in reversed(list(zip(parts[0].names, parts[1]))))
    return out


def _container_effects(containers) -> list:
    """(path, final contents) of each container whose items changed during the trace
    (keys added, removed or reordered, items replaced, appended or popped; for an object, its
    attributes rebound: the final contents are then the attributes that changed).  A container
    inside another changed one is covered by the outer one's final contents."""
    changed = []
    for path, obj, before in containers:
        if type(obj) not in (dict, list):
            now = dict(vars(obj))
            gone = [k for k, _ in before if k not in now]
            if gone:
                raise TracingError(f"the traced function deleted attribute {gone[0]!r} of an "
                                   f"argument object ({_where(path)}); fastlaunch can replay "
                                   f"new values of attributes, not their deletion")
            was = dict(before)
            new = {k: v for k, v in now.items() if k not in was or was[k] is not v}
            if new and not any(path[:len(p)] == p for p, _ in changed):
                for k, v in new.items():
                    if not _replayable_attribute(v):
                        raise TracingError(
                            f"the traced function set attribute {k!r} of an argument object "
                            f"({_where(path)}) to a {type(v).__name__}; only arrays, numbers "
                            f"and containers of them assigned to attributes can be replayed")
                changed.append((path, new))
            continue
        now = list(obj.items()) if type(obj) is dict else list(obj)
        if len(now) != len(before) or any(
                (a[0] != b[0] or a[1] is not b[1]) if type(obj) is dict else a is not b
                for a, b in zip(now, before)):
            if any(path[:len(p)] == p for p, _ in changed):
                continue
            changed.append((path, dict(obj) if type(obj) is dict else list(obj)))
    return changed


def _replayable_attribute(v) -> bool:
    from .pytree import flatten
    try:
        leaves, _ = flatten(v)
    except TypeError:
        return False
    return all(isinstance(x, (Tracer, np.ndarray, np.generic, bool, int, float)) or x is None
               or getattr(type(x), "__fl_tracer__", None) is not None for x in leaves)


def _where(path) -> str:
    head = f"argument {path[1]}" if path[0] == 0 else f"keyword argument {path[1]!r}"
    return head + "".join(repr(k) if isinstance(k, Attr) else f"[{k!r}]" for k in path[2:])
