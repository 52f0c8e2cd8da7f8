"""`fastlaunch.iterate`: a whole loop over a compiled step in one call.

    p, m, v, losses = fl.iterate(step, 1000, p, m, v, target, lr, carry=("p", "m", "v"))

is the Python loop

    losses = []
    for _ in range(1000):
        p, m, v, loss = step(p, m, v, target, lr)
        losses.append(loss)
    losses = np.stack(losses)

run inside the interpreter: the step is traced once (as `step(...)` would trace it), and its
launches are recorded once more, as the body of a bytecode loop (record.record_loop): the
carried arrays take turns in two buffers by moving pointers, collected results are written
straight into their row of the stacked output, `until=` is a traced predicate whose kernel
writes a flag the interpreter reads.  The GIL is released for the whole loop.  The kernels
are the step's own, run in the same order on the same values, so the results are the Python
loop's, bit for bit.

This module is the front end only: what the arguments mean, tracing (through jit.Compiled),
and putting the results together; the loop itself is program/record.py's and the interpreters'.
"""
from __future__ import annotations

import functools
import math
import os
import weakref
from typing import TYPE_CHECKING, Any, Callable, Generic, Sequence


import numpy as np

from . import _core, forking
from .program import bytecode
from ._launch import ResultKind
from .program.artifact import Artifact, consts_by_ref, effects_text, from_loop
from .jit import Compiled, Lowered, P
from .program.link import link
from .frontend.pytree import TreeDef, flatten
from .program.record import Loop, LoopPart
from .program.saved import finish_results, save_artifact
from .frontend import loops
from .ir import ops
from .ir.graph import Op
from .frontend.numpy.registry import node_of
from .frontend.trace import Tracer, current_graph, new_tracer, tracing

__all__ = ["iterate", "iterated", "Iterated"]


def iterate(step: Callable[..., Any], n: int, *args: Any,
            carry: str | int | Sequence[str | int] = (), collect: bool | int = True,
            until: Callable[..., Any] | None = None, inplace: bool = False,
            checkpoints: int | None = None) -> Any:
    """Run `step` n times in one call, feeding the carried arguments their new values.

    step: a compiled function (fl.compile) or a plain one (compiled on first use).
    n: the number of iterations (an int >= 0).
    args: the step's arguments (positional), as for one call.
    carry: names or positions of the carried arguments (arrays).  The first len(carry)
        results of the step are their new values, in that order, with the same dtype and
        shape; the other arguments are the same in every iteration.
    collect: True: every other result is collected per iteration and comes back stacked
        along a new leading axis (shape (n, ...)); an int k: the results of iterations k, 2k,
        ... and of the last one (ceil(n / k) rows); False: only the carried arrays come back.
    until: a predicate on the step's other results (one argument each), e.g.
        `lambda loss: loss < 1e-6`, traced like the step and evaluated inside the loop: the
        loop stops after the first iteration for which it is true (that iteration included,
        as `if until(loss): break` after the call would), and only the rows collected until
        then come back.
    inplace: write the final carried values into the caller's arrays (once, after the last
        iteration) and return those arrays.
    checkpoints: when the loop is differentiated (fl.grad of a function that calls
        fl.iterate), how many states the backward pass keeps (default about sqrt(n)); see
        docs/gradients.md.

    Called on traced values (inside fl.compile or a differentiated function), the loop
    becomes part of the enclosing program (a loop node of its graph), so it can be
    differentiated; with until= it then returns only the carried values.

    >>> import numpy as np, fastlaunch as fl
    >>> fl.iterate(lambda x: x * 0.5, 3, np.ones(2), carry=(0,), collect=False).tolist()
    [0.125, 0.125]

    Returns the step's results with the carried ones final and the others stacked: a tuple
    (or a single value, where the step returns one), or only the carried values with
    collect=False (the array itself when one argument is carried).  Ctrl-C stops the loop at
    an iteration boundary (KeyboardInterrupt); the caller's arrays are then as they were,
    except any the step itself updates in place, which hold the state of the last completed
    iteration (as after a Python loop interrupted between two calls).

    A repeated call with the same step and options (the same `until` function object, not a
    new lambda each time) finds its loop program in a table, as a compiled function does:
    it costs about a replay.

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> @fl.compile
        ... def step(p, target, lr):
        ...     r = np.sin(p) - target
        ...     return p - lr * 2 * r * np.cos(p), np.mean(r * r)
        >>> p, losses = fl.iterate(step, 100, np.zeros(3), np.full(3, 0.5), 0.1, carry="p")
        >>> losses.shape, bool(losses[-1] < 1e-6)
        ((100,), True)
        >>> p, losses = fl.iterate(step, 100, np.zeros(3), np.full(3, 0.5), 0.1, carry="p",
        ...                        until=lambda loss: loss < 1e-3)
        >>> len(losses), bool(losses[-1] < 1e-3 <= losses[-2])   # stopped at the first
        (16, True)
    """
    key = (n, carry, collect, until, inplace, checkpoints, type(n), type(collect))
    try:
        # a repeated call with the same options: the Iterated by those options as given (the
        # types are part of the key: collect=0 is refused where collect=False is not)
        loop = step.iterate_cache[key]
    except (AttributeError, KeyError, TypeError):     # a plain function, new, unhashable
        loop = iterated(step, n, carry=carry, collect=collect, until=until, inplace=inplace,
                        checkpoints=checkpoints)
        if isinstance(step, Compiled):
            try:
                fast = step.iterate_cache
                if len(fast) >= MAX_CACHED:
                    fast.clear()
                fast[key] = loop
            except TypeError:                      # unhashable options (carry as a list)
                pass
    return loop(*args)


# Iterated objects of each step, by their options (a fresh lambda as `until` each call finds
# the one made for an equal lambda: same code, same captured values)
_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_PLAIN: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # plain function -> Compiled
_CACHE_LOCK = forking.lock(forking.TABLE)
MAX_CACHED = 64


def iterated(step: Callable[P, Any], n: int, *, carry: str | int | Sequence[str | int] = (),
             collect: bool | int = True, until: Callable[..., Any] | None = None,
             inplace: bool = False,
             checkpoints: int | None = None) -> Iterated[P]:
    """The loop `iterate` runs, as an object: call it with the step's arguments; `.lower()`,
    `.dis()` show its bytecode and `.save(path, *args)` writes it for `fl.load`.  The same
    step and options give the same object (and its loop programs).

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> step = fl.compile(lambda p, t: (p - 0.5 * (p - t), np.mean((p - t) ** 2)))
        >>> loop = fl.iterated(step, 3, carry="p")
        >>> p, losses = loop(np.zeros(2), np.ones(2))
        >>> p, losses
        (array([0.875, 0.875]), array([1.    , 0.25  , 0.0625]))
        >>> loop.save("loop.flp", np.zeros(2), np.ones(2))    # fl.load("loop.flp") replays it
    """
    compiled = _compiled(step)
    key = (_int_count(n), _carry_key(carry), _collect_key(collect), _fn_key(until),
           bool(inplace), _checkpoints(checkpoints))
    with _CACHE_LOCK:
        table = _CACHE.setdefault(compiled, {})
        found = table.get(key)
        if found is None:
            if len(table) >= MAX_CACHED:
                table.pop(next(iter(table)))
            found = table[key] = Iterated(compiled, n, carry=carry, collect=collect,
                                          until=until, inplace=inplace,
                                          checkpoints=checkpoints)
    return found


def _compiled(step) -> Compiled:
    if isinstance(step, Compiled):
        return step
    if not callable(step):
        raise TypeError(f"fl.iterate: step must be a function, got {type(step).__name__}")
    with _CACHE_LOCK:
        c = _PLAIN.get(step)
        if c is None:
            c = _PLAIN[step] = Compiled(step)
    return c


def _int_count(n) -> int:
    if type(n) is bool or not isinstance(n, (int, np.integer)):
        raise TypeError(f"fl.iterate: n (the number of iterations) must be an int, got "
                        f"{type(n).__name__}")
    n = int(n)
    if not 0 <= n <= bytecode.MAX_COUNT:
        raise ValueError(f"fl.iterate: n must be from 0 to {bytecode.MAX_COUNT}, got {n}")
    return n


def _checkpoints(value):
    """The checkpoint budget of a differentiated loop: None (about sqrt(n)) or an int >= 1."""
    if value is None:
        return None
    if type(value) is bool or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"fl.iterate: checkpoints must be an int >= 1 (how many states the "
                         f"gradient keeps), got {value!r}")
    return int(value)


def _carry_key(carry) -> tuple:
    if isinstance(carry, (str, int)):
        carry = (carry,)
    try:
        carry = tuple(carry)
    except TypeError:
        raise TypeError(f"fl.iterate: carry must name arguments (names or positions), got "
                        f"{type(carry).__name__}") from None
    for c in carry:
        if type(c) is not str and (type(c) is bool or not isinstance(c, (int, np.integer))):
            raise TypeError(f"fl.iterate: carry names arguments by name (str) or position "
                            f"(int), got {c!r}")
    return tuple(c if type(c) is str else int(c) for c in carry)


def _collect_key(collect) -> int:
    """collect=True -> 1, an int k -> k, False -> 0."""
    if collect is True:
        return 1
    if collect is False:
        return 0
    if isinstance(collect, (int, np.integer)) and int(collect) >= 1:
        return int(collect)
    raise ValueError(f"fl.iterate: collect must be True, False or an int k >= 1 (every k-th "
                     f"iteration), got {collect!r}")


def _fn_key(fn):
    if fn is None:
        return None
    if not callable(fn):
        raise TypeError(f"fl.iterate: until must be a function of the step's results, got "
                        f"{type(fn).__name__}")
    code = getattr(fn, "__code__", None)
    if code is None:
        return ("object", id(fn))
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
            hash(value)
            cells.append((type(value), value))
        except (ValueError, TypeError):
            return ("object", id(fn))
    try:
        hash(fn.__defaults__)
    except TypeError:
        return ("object", id(fn))
    return ("code", code, tuple(cells), fn.__defaults__)


class Iterated(_core.Dispatcher, Generic[P]):
    """A compiled step run n times in one call (see `iterate`); one loop program per argument
    signature, built on first use.

    A call is the dispatcher's fast path (`_core.Dispatcher.__call__`), as for a compiled
    function: arguments whose signature has a loop program run it at once, the entry's `post`
    putting the results together where the program's own are not already what `iterate`
    returns (an `until`, collect=k, constant results).  Anything else (a new signature,
    arguments to prepare: scalars or non-contiguous carried arrays, n == 0) takes `_miss`.

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> halve = fl.iterated(fl.compile(lambda x: (x / 2, x.sum())), 3, carry="x")
        >>> halve(np.ones(2))
        (array([0.125, 0.125]), array([2. , 1. , 0.5]))
        >>> print(halve.lower(np.ones(2)).bytecode.splitlines()[0])  # doctest: +ELLIPSIS
        ; ... slots, ... argument words, 1 kernels, ...
    """

    if TYPE_CHECKING:
        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any: ...

    def __init__(self, step: Callable[P, Any], n: int, *,
                 carry: str | int | Sequence[str | int] = (), collect: bool | int = True,
                 until: Callable[..., Any] | None = None, inplace: bool = False,
                 checkpoints: int | None = None) -> None:
        step = _compiled(step)
        super().__init__(step.static_positions, True)
        self.step = step
        self.checkpoints = _checkpoints(checkpoints)
        self.n = _int_count(n)
        self.carry = _carry_key(carry)
        self.every = _collect_key(collect)
        if len(set(self.carry)) != len(self.carry):
            raise ValueError(f"fl.iterate: carry names an argument twice: {self.carry}")
        _fn_key(until)
        self.until = until
        self.inplace = bool(inplace)
        self._loops: dict = {}           # signature bytes -> [_LoopEntry]
        self._lock = forking.trace_lock()
        self.__name__ = f"iterate({self.step.__name__}, {self.n})"

    def __repr__(self):
        return f"<fastlaunch.Iterated {self.__name__}, carry={self.carry}>"

    # ---- a call ------------------------------------------------------------------------
    def _miss(self, args, kwargs):
        if kwargs:
            raise TypeError("fl.iterate passes the step's arguments positionally")
        if tracing():
            return self._traced(tuple(args))
        call, originals, scalars = self._prepare(tuple(args))
        if self.n == 0:
            return self._no_iterations(tuple(args), call)
        loop, call, copies = self._entry(call)
        try:
            raw = _core.run_entry(loop.entry, call, self.step.static_positions)
        except MemoryError as err:
            if not loop.stacked_bytes:
                raise
            raise MemoryError(f"{err} (fl.iterate: {self._collecting()}, "
                              f"{loop.stacked_bytes:.3g} bytes in all)") from None
        for i, arr in copies.items():
            np.copyto(arr, _leaves(call, self.step.static_positions)[i])
        out = finish_results(raw, loop.finish, _leaves(call, self.step.static_positions))
        if originals:
            # inplace=True on arrays the loop ran on contiguous copies of
            positions = self._positions(call)
            items = [out] if loop.finish["structure"] == "leaf" else list(out)
            for pos, arr in originals.items():
                c = positions.index(pos)
                np.copyto(arr, items[c])
                items[c] = arr
            out = items[0] if loop.finish["structure"] == "leaf" else type(out)(items)
        if scalars:
            # a scalar state passed as a Python or NumPy scalar comes back as a NumPy scalar,
            # as the Python loop over the compiled step gives it
            positions = self._positions(call)
            single = not isinstance(out, (tuple, list))
            items = [out] if single else list(out)
            for pos in scalars:
                c = positions.index(pos)
                items[c] = items[c][()]
            out = items[0] if single else type(out)(items)
        return out

    # ---- inside a traced function: a loop node of the caller's graph ---------------------
    def _traced(self, args):
        """The loop as part of the enclosing trace (a function that calls fl.iterate, or its
        gradient): the step traced once into a loop body (frontend/loops.py), its results the loop's
        outputs.  The carried values stay as the caller had them (inplace writes back)."""
        g = current_graph()
        positions = self._positions(args)
        k = len(positions)
        inits = []
        for pos in positions:
            node = node_of(args[pos])
            if node.ndim == 0 and type(args[pos]) in (int, bool):
                raise TypeError(f"fl.iterate: carried {self._name(pos, args)} is a Python "
                                f"{type(args[pos]).__name__}; carry arrays or floats")
            inits.append(node)
        shapes = [(x.dtype, x.shape) for x in inits]
        # read before the body is traced: a value of this trace read inside the body
        # becomes one of the body's leaves
        scalar = [bool(args[p].scalar) if isinstance(args[p], Tracer) else
                  not isinstance(args[p], np.ndarray) and np.ndim(args[p]) == 0
                  for p in positions]
        if self.until is not None:
            # the number of iterations run: a hidden carried counter (its gradient needs it)
            shapes.append((np.dtype(np.int64), ()))
            inits.append(ops.literal(g, 0, np.int64))
        structure = {}

        def step(tracers):
            call = list(args)
            for pos, t, sc in zip(positions, tracers, scalar):
                t.scalar = sc
                call[pos] = t
            out = self.step(*call)
            single = not isinstance(out, tuple)
            results = [out] if single else list(out)
            structure["single"] = single
            if len(results) < k:
                raise TypeError(f"fl.iterate: {self.step.__name__} returns {len(results)} "
                                f"results for {k} carried arguments")
            new = []
            for c, (pos, r) in enumerate(zip(positions, results)):
                node = node_of(r)
                dt, shape = shapes[c]
                if node.shape != shape or node.dtype != dt:
                    raise TypeError(f"fl.iterate: {self.step.__name__}'s result {c} (the new "
                                    f"{self._name(pos, args)}) is {node.dtype}{list(node.shape)}, "
                                    f"the carried value is {dt}{list(shape)}")
                new.append(node)
            rest = results[k:]
            structure["rest"] = [isinstance(r, Tracer) and r.scalar or np.ndim(r) == 0
                                 for r in rest]
            collected = [node_of(r) for r in rest] if self.every else []
            flag = None
            if self.until is not None:
                f = node_of(self.until(*rest))
                if f.size != 1:
                    raise TypeError("fl.iterate: until must return one truth value")
                flag = ops.cast(current_graph(), ops.reshape(current_graph(), f, ()), np.bool_)
                new.append(ops.elementwise(current_graph(), Op.ADD, np.dtype(np.int64),
                                           [tracers[k].node,
                                            ops.literal(current_graph(), 1, np.int64)]))
            return new, collected, flag
        body, _, _ = loops.trace_body(g, shapes, step)
        if self.until is not None and self.every:
            raise TypeError("fl.iterate with until= inside a traced function returns only the "
                            "carried values (the number of collected rows would depend on the "
                            "data): pass collect=False")
        if self.n == 0:
            finals = inits[:k]
            stacks = [ops.broadcast_to(g, ops.literal(g, 0, v.dtype), (0,) + v.shape)
                      for v in body.graph.outputs[body.ncarry:body.ncarry + body.ncollect]]
        else:
            loop = loops.make_loop(g, body, inits, self.n, self.checkpoints)
            finals = [loops.carry_out(g, loop, c) for c in range(k)]
            stacks = [loops.collect_out(g, loop, r, self.every) for r in range(body.ncollect)]
        carried = [new_tracer(f, scalar=sc) for f, sc in zip(finals, scalar)]
        if self.inplace:
            for pos, t in zip(positions, carried):
                target = args[pos]
                if not isinstance(target, Tracer):
                    raise TypeError(f"fl.iterate(inplace=True): carried "
                                    f"{self._name(pos, args)} is not a traced array")
                target._assign(t.node, "fl.iterate(inplace=True)")
                t = target
            carried = [args[p] for p in positions]
        if not self.every:
            return carried[0] if k == 1 else tuple(carried)
        items = carried + [new_tracer(s_) for s_ in stacks]
        return items[0] if structure.get("single") else tuple(items)

    def _on_aliased(self, args, kwargs, err):
        # the fast path met arguments that overlap one the loop writes: the slow path says so
        return self._miss(args, kwargs)

    def _positions(self, call) -> list:
        names = self.step.param_names
        out = []
        for c in self.carry:
            if type(c) is str:
                if c not in names:
                    raise TypeError(f"fl.iterate: carry names {c!r}, which is not a positional "
                                    f"parameter of {self.step.__name__} ({', '.join(names)})")
                pos = names.index(c)
            else:
                pos = c + len(call) if c < 0 else c
            if not 0 <= pos < len(call):
                raise TypeError(f"fl.iterate: carry names argument {c!r}, but {len(call)} "
                                f"arguments are passed")
            if pos in self.step.static_positions:
                raise TypeError(f"fl.iterate: {self._name(pos, call)} is static; a carried "
                                f"argument is an array")
            out.append(pos)
        if len(set(out)) != len(out):
            raise ValueError(f"fl.iterate: carry names one argument twice: {self.carry}")
        return out

    def _name(self, pos, call) -> str:
        return self.step.arg_name(pos, call)

    def _prepare(self, call):
        """The call with every carried argument a C-contiguous array (the loop's own buffers
        are; the step's kernels are compiled for one layout), and {position: caller's array}
        of those copied where their final values must be written back, and the positions of
        scalars carried as 0-d arrays."""
        originals, scalars = {}, []
        call = list(call)
        for pos in self._positions(call):
            x = call[pos]
            if isinstance(x, _core.DeviceArray):
                raise TypeError(f"fl.iterate: carried {self._name(pos, call)} is a DeviceArray; "
                                f"a loop carries NumPy arrays (pass x.numpy()); device arrays "
                                f"may be loop-invariant arguments")
            if isinstance(x, (bool, int, float, complex, np.generic)):
                # a scalar state (a Python float, a NumPy scalar) is carried as a 0-d array,
                # of the dtype NumPy gives it (float64 for a Python float)
                if self.inplace:
                    raise ValueError(f"fl.iterate(inplace=True): carried {self._name(pos, call)} "
                                     f"is a {type(x).__name__}, which cannot be written in "
                                     f"place; pass a NumPy array")
                call[pos] = x = np.asarray(x)
                scalars.append(pos)
            if not isinstance(x, np.ndarray):
                raise TypeError(f"fl.iterate: carried {self._name(pos, call)} must be a NumPy "
                                f"array or a scalar, got {type(x).__name__} (pass "
                                f"np.asarray(x))")
            if self.inplace and not x.flags.writeable:
                raise ValueError(f"fl.iterate(inplace=True): carried {self._name(pos, call)} is "
                                 f"read-only")
            if type(x) is not np.ndarray or not x.flags.c_contiguous or not x.flags.aligned \
                    or not x.dtype.isnative:
                call[pos] = np.ascontiguousarray(x.view(np.ndarray),
                                                 dtype=x.dtype.newbyteorder("="))
                if self.inplace:
                    originals[pos] = x
        if self.inplace:
            carried = [call[p] for p in self._positions(call)]
            for i, a in enumerate(carried):
                for b in carried[:i]:
                    if np.shares_memory(a, b):
                        raise ValueError("fl.iterate(inplace=True): two carried arguments "
                                         "share memory")
        return tuple(call), originals, scalars

    def _entry(self, call):
        """The loop entry for this call's signature (built on a miss), the call as it runs
        (normalised where the encoder cannot take it) and {leaf: caller's array} to write
        back after the run."""
        call, copies, gens, enc = self.step.prepare(call)
        if gens:
            raise TypeError("fl.iterate: a numpy.random.Generator argument is not "
                            "supported (the loop would draw the same numbers in every "
                            "iteration)")
        if enc is None:
            raise TypeError(f"fl.iterate: these arguments cannot be passed to "
                            f"{self.step.__name__}")
        sig, _, keys, statics = enc
        with self._lock:
            found = self._find(enc, call)
            if found is None:
                found = self._build(call)
                self._loops.setdefault(sig, []).append(found)
                self._install(found.fast)
        mutated = set(found.entry.executable.program.mutated_leaves)
        return found, call, {i: a for i, a in copies.items() if i in mutated}

    def _find(self, enc, call):
        sig, _, keys, statics = enc
        words = None
        for loop in self._loops.get(sig, ()):
            if loop.keys != keys or loop.statics != statics:
                continue
            if loop.entry.specialized:
                if words is None:
                    words = _core.leaf_words(call, self.step.static_positions)
                if not all(words[k] == w for k, w in loop.entry.specialized):
                    continue
            return loop
        return None

    # ---- building the loop -----------------------------------------------------------------
    def _build(self, call) -> "_LoopEntry":
        step = self.step
        static = step.static_positions
        info: Artifact = step.artifact_for(*call)
        program = info.program
        name = step.__name__
        if info.effects:
            raise TypeError(f"fl.iterate: {name} changes argument containers "
                            f"({effects_text(info.effects)}); return the new values instead")
        if program.checks:
            raise TypeError(f"fl.iterate: {name} has runtime checks (an `assert` on traced "
                            f"values, or a function that tests its arguments' values), which "
                            f"a loop program does not run yet; call the compiled step in a "
                            f"Python loop instead")
        if program.rng_slot >= 0:
            raise NotImplementedError(
                f"fl.iterate: {name} draws random numbers; a loop would draw the same ones in "
                f"every iteration, so fl.iterate refuses it (call the step in a Python loop)")
        tree = info.out_tree
        if tree.kind == "leaf":
            structure = "leaf"
        elif tree.kind in ("tuple", "list") and all(c.kind == "leaf" for c in tree.children):
            structure = tree.kind
        else:
            raise TypeError(f"fl.iterate: {name} must return a tuple (or list) of arrays and "
                            f"scalars, or one of them; it returns a nested {tree.kind}")
        results = info.results
        leaves = info.leaves
        positions = self._positions(call)
        if len(positions) > len(results):
            raise TypeError(f"fl.iterate: carry names {len(positions)} arguments but "
                            f"{name} returns {len(results)} results")
        # the leaf of each positional argument
        leaf_at, at = {}, 0
        for pos, arg in enumerate(call):
            if pos in static:
                continue
            leaf_at[pos] = at
            at += len(flatten(arg)[0])
        carried_leaf = [leaf_at[p] for p in positions]

        def result_spec(r):
            kind, index, _ = results[r]
            if kind == ResultKind.RESULT_NEW:
                _, dt, shape = program.outputs[index]
                return np.dtype(dt), tuple(shape)
            if kind == ResultKind.RESULT_INPUT:
                leaf = leaves[index]
                return leaf.dtype, (tuple(leaf.shape) if leaf.is_array else None)
            return None, None

        def contiguous(j) -> bool:
            leaf = leaves[j]
            return leaf.is_array and tuple(leaf.strides) == _c_strides(leaf.shape)

        # carried arrays: which ping-pong, which stay the argument itself
        pingpong, new_from, finals = [], {}, []
        owner: dict = {}                      # step output index -> its loop value
        for c, (pos, j) in enumerate(zip(positions, carried_leaf)):
            kind, index, _ = results[c]
            dt, shape = result_spec(c)
            want = leaves[j]
            if kind == ResultKind.RESULT_VALUE or (dt, shape) != (want.dtype, tuple(want.shape)):
                got = (f"a constant {results[c][1]!r}" if kind == ResultKind.RESULT_VALUE else
                       f"{dt}{list(shape) if shape is not None else ' scalar'}")
                raise TypeError(f"fl.iterate: result {c} of {name} is the new value of carried "
                                f"{self._name(pos, call)}, {want.dtype}{list(want.shape)}, but "
                                f"it is {got}")
            if kind == ResultKind.RESULT_INPUT and index == j:
                finals.append(("leaf", j))        # the argument itself (or updated in place)
                continue
            if j in program.mutated_leaves:
                raise TypeError(f"fl.iterate: {name} updates carried {self._name(pos, call)} in "
                                f"place and returns another array as its new value; return "
                                f"the updated argument itself, or update a copy")
            cp = len(pingpong)
            pingpong.append(j)
            finals.append(("pingpong", cp))
            if kind == ResultKind.RESULT_NEW and index not in owner:
                owner[index] = ("new", cp)
            else:
                new_from[cp] = ("out", index) if kind == ResultKind.RESULT_NEW else ("in", index)
        pp_of = {j: cp for cp, j in enumerate(pingpong)}

        def leaf_value(j):
            return ("carry", pp_of[j]) if j in pp_of else ("leaf", j)

        # the other results: stacked rows, or values put together in Python
        others = list(range(len(positions), len(results)))
        rows, collect_from, spec_of = [], {}, {}
        for r in others:
            kind, index, _ = results[r]
            if kind == ResultKind.RESULT_NEW:
                dt, shape = result_spec(r)
                row = len(rows)
                rows.append((dt.str, shape))
                if index in owner:
                    collect_from[row] = owner[index]
                else:
                    owner[index] = ("row", row)
                spec_of[r] = ("row", row)
            elif kind == ResultKind.RESULT_INPUT and leaves[index].is_array:
                if not contiguous(index):
                    raise TypeError(f"fl.iterate: result {r} of {name} is argument leaf "
                                    f"{index} unchanged, which is not C-contiguous; collect a "
                                    f"copy (x.copy()) instead")
                row = len(rows)
                rows.append((leaves[index].dtype.str, tuple(leaves[index].shape)))
                collect_from[row] = leaf_value(index)
                spec_of[r] = ("row", row)
            elif kind == ResultKind.RESULT_INPUT:
                spec_of[r] = ("param", index)
            else:
                spec_of[r] = ("value", index)
        for cp, src in new_from.items():
            kind, index = src
            if kind == "out":
                new_from[cp] = owner[index]
            else:
                if not contiguous(index):
                    raise TypeError(f"fl.iterate: the new value of a carried argument is "
                                    f"argument leaf {index}, which is not C-contiguous")
                new_from[cp] = leaf_value(index)
        missing = [o for o in range(len(program.outputs)) if o not in owner]
        if missing:
            raise TypeError(f"fl.iterate: {name}'s outputs {missing} are not among its "
                            f"results")
        step_values = {("input", j): leaf_value(j) for j in range(len(leaves))}
        step_values.update({("output", o): v for o, v in owner.items()})
        parts = [LoopPart(info.plan, [k.name for k in info.kernels], consts_by_ref(info),
                          step_values)]
        flag_from = None
        pred = None
        if self.until is not None:
            pred, pred_values, flag_from = self._trace_until(
                call, results, leaves, others, spec_of, rows, owner, leaf_value)
            parts.append(LoopPart(pred.plan, [k.name for k in pred.kernels], consts_by_ref(pred),
                                  pred_values))
        # rows read by nobody need no copy
        if not self.every and self.until is None:
            collect_from = {}
        self._check_stacked(rows)
        loop = Loop(n=self.n, parts=parts, carried=pingpong, new_from=new_from, rows=rows,
                    collect_from=collect_from, every=self.every, until=self.until is not None,
                    flag_from=flag_from, inplace=self.inplace)

        def loop_results(where):
            """The program's results (carried values, stacked rows, flags), its result tree
            and how they are put together."""
            raw, finish_results_spec = [], []
            for final in finals:
                if final[0] == "leaf":
                    raw.append((ResultKind.RESULT_INPUT, final[1], False))
                else:
                    kind, at = where.carried[final[1]]
                    raw.append((ResultKind.RESULT_INPUT, at, False) if kind == "leaf" else
                               (ResultKind.RESULT_NEW, at, False))
                finish_results_spec.append(["raw", len(raw) - 1])
            if self.every:
                for r in others:
                    kind, x = spec_of[r]
                    if kind == "row":
                        raw.append((ResultKind.RESULT_NEW, where.collected[x], False))
                        finish_results_spec.append(["stack", len(raw) - 1])
                    elif kind == "param":
                        finish_results_spec.append(["param", x])
                    else:
                        finish_results_spec.append(["value", results[r][1]])
            flags = None
            if where.flags is not None:
                raw.append((ResultKind.RESULT_NEW, where.flags, False))
                flags = len(raw) - 1
            shape = structure
            if not self.every and len(finals) == 1:
                shape = "leaf"          # collect=False with one carried array: that array
            finish = {"n": self.n, "every": self.every, "structure": shape, "flags": flags,
                      "results": finish_results_spec}
            return raw, TreeDef("tuple", [TreeDef("leaf")] * len(raw)), finish

        art = from_loop(info, loop, step.backend, loop_results, until=pred, label=name)
        finish = dict(art.finish)
        loop_entry = link(art, step.backend)
        # the dispatcher's entry: the same executable, with what puts the results together
        # unless the program's results already are what iterate returns
        fast = _core.Entry(art.signature, list(art.keys), list(art.statics),
                           loop_entry.executable, art, list(art.specialized))
        if not _direct(finish, art.program, list(art.results)):
            params = any(kind == "param" for kind, _ in finish["results"])
            fast.post = functools.partial(_finish_call, finish,
                                          self.step.static_positions if params else None)
        return _LoopEntry(loop_entry, finish, list(art.keys), list(art.statics), fast,
                          sum(nbytes for _, _, nbytes in self._stacked(rows)))


    def _stacked(self, rows) -> list:
        """(shape, dtype, bytes) of each stacked result."""
        if not self.every:
            return []
        n_rows = -(-self.n // self.every)
        return [((n_rows,) + tuple(shape), np.dtype(dt),
                 n_rows * math.prod(shape) * np.dtype(dt).itemsize) for dt, shape in rows]

    def _collecting(self) -> str:
        every = "per iteration" if self.every == 1 else f"every {self.every} iterations"
        return f"n={self.n} iterations collect a row of each result {every}"

    def _check_stacked(self, rows) -> None:
        """A stacked result no array can hold is refused here (as NumPy refuses such an
        array), not by the verifier."""
        for shape, dt, nbytes in self._stacked(rows):
            if nbytes > bytecode.MAX_BYTES:
                raise ValueError(
                    f"fl.iterate: {self._collecting()}: a {shape} {dt} result, "
                    f"{nbytes:.3g} bytes, is larger than the most an array can hold "
                    f"({bytecode.MAX_BYTES} bytes); collect fewer rows (collect=k keeps every "
                    f"k-th, collect=False none) or run fewer iterations")

    def _trace_until(self, call, results, leaves, others, spec_of, rows, owner, leaf_value):
        """Trace the predicate on the step's other results; returns its artifact, the loop value
        of each of its buffers, and the value to copy into the flag when it returns one of
        its arguments unchanged."""
        if not others:
            raise TypeError("fl.iterate: until takes the step's results after the carried "
                            "ones, and the step returns none")
        examples, statics, sources = [], [], []
        step_leaves = _leaves(call, self.step.static_positions)
        for i, r in enumerate(others):
            kind, index, _ = results[r]
            if kind == ResultKind.RESULT_NEW:
                dt, shape = rows[spec_of[r][1]]
                examples.append(np.zeros(shape, np.dtype(dt)))
                sources.append(owner[index])
            elif kind == ResultKind.RESULT_INPUT:
                examples.append(step_leaves[index])
                sources.append(leaf_value(index))
            else:
                examples.append(index)
                statics.append(i)
                sources.append(None)
        until = self.until

        def until_(*xs):
            return until(*xs)

        until_.__name__ = getattr(until, "__name__", "until")
        pred = Compiled(until_, static_argnums=statics, backend=self.step.backend.name)
        pinfo = pred.artifact_for(*examples)
        if pinfo.effects or pinfo.specialized or pinfo.program.rng_slot >= 0 \
                or pinfo.program.checks:
            raise TypeError("fl.iterate: until must compute its answer from the results with "
                            "NumPy operations (no random numbers, no Python control flow on "
                            "their values, no runtime checks)")
        if len(pinfo.results) != 1 or pinfo.out_tree.kind != "leaf":
            raise TypeError("fl.iterate: until must return one boolean")
        kind, index, _ = pinfo.results[0]
        pprog = pinfo.program
        if kind == ResultKind.RESULT_NEW:
            _, dt, shape = pprog.outputs[index]
        elif kind == ResultKind.RESULT_INPUT:
            dt, shape = pinfo.leaves[index].dtype, tuple(pinfo.leaves[index].shape)
        else:
            raise TypeError(f"fl.iterate: until returned the constant {index!r}; it must "
                            f"compute its answer from the step's results")
        if np.dtype(dt) != np.bool_ or tuple(shape) != ():
            raise TypeError(f"fl.iterate: until must return one boolean (e.g. loss < 1e-6, or "
                            f"np.all(...) of an array), got {np.dtype(dt)}{list(shape)}")
        # the predicate's leaves, in order, are the non-static examples
        src_of_leaf = [sources[i] for i in range(len(others)) if i not in statics]
        values = {("input", j): v for j, v in enumerate(src_of_leaf)}
        flag_from = None
        if kind == ResultKind.RESULT_NEW:
            values[("output", index)] = ("flag",)
        else:
            flag_from = src_of_leaf[index]
        return pinfo, values, flag_from

    def _no_iterations(self, args, call):
        """n == 0: the Python loop runs no step: the carried arguments come back as they are,
        the collections empty (their dtypes and shapes from the step's trace)."""
        info = self.step.artifact_for(*call)
        program = info.program
        positions = self._positions(call)
        out = [args[p] for p in positions]
        if self.every:
            step_leaves = _leaves(call, self.step.static_positions)
            for kind, index, _ in info.results[len(positions):]:
                if kind == ResultKind.RESULT_NEW:
                    _, dt, shape = program.outputs[index]
                    out.append(np.empty((0,) + tuple(shape), np.dtype(dt)))
                elif kind == ResultKind.RESULT_INPUT:
                    v = np.asarray(step_leaves[index])
                    out.append(np.empty((0,) + v.shape, v.dtype))
                else:
                    out.append(np.array([index] * 0))
        if len(out) == 1 and (info.out_tree.kind == "leaf" or not self.every):
            return out[0]
        return list(out) if info.out_tree.kind == "list" else tuple(out)

    # ---- introspection and saving ---------------------------------------------------------
    def lower(self, *args: P.args, **kwargs: P.kwargs) -> Lowered:
        """The loop's graph(s), kernels and bytecode for these arguments (built if needed)."""
        if kwargs:
            raise TypeError("fl.iterate passes the step's arguments positionally")
        call, _, _ = self._prepare(tuple(args))
        if self.n == 0:
            raise ValueError("fl.iterate: a loop of 0 iterations has no program")
        return self._entry(call)[0].entry.info.lowered

    def dis(self, *args: Any, file: Any = None) -> None:
        """Print the loop's bytecode for these arguments."""
        import sys
        print(self.lower(*args).bytecode, file=file or sys.stdout)

    def save(self, path: str | os.PathLike, *args: P.args, **kwargs: P.kwargs) -> None:
        """Write the loop program for these arguments' signature to `path`; fl.load(path)
        replays it in another process (returning what this call returns)."""
        if kwargs:
            raise TypeError("fl.iterate passes the step's arguments positionally")
        call, _, _ = self._prepare(tuple(args))
        if self.n == 0:
            raise ValueError("fl.iterate: a loop of 0 iterations has no program to save")
        loop = self._entry(call)[0]
        save_artifact(path, loop.entry.info, self.step.backend, self.step.static_positions)


class _LoopEntry:
    """A loop program: `entry` (saved, lowered), `fast` (the same executable in the
    dispatcher's table, with the finishing step as its post where one is needed)."""
    __slots__ = ("entry", "finish", "keys", "statics", "fast", "stacked_bytes")

    def __init__(self, entry, finish, keys, statics, fast, stacked_bytes=0):
        self.entry, self.finish, self.keys, self.statics = entry, finish, keys, statics
        self.fast = fast
        self.stacked_bytes = stacked_bytes


def _direct(finish: dict, program, raw: list) -> bool:
    """Whether the loop program's raw results are what iterate returns, as they are: each
    result raw or a full stack of rows, in order, in the returned structure."""
    if finish["flags"] is not None or len(finish["results"]) != len(raw):
        return False
    n, every = finish["n"], finish["every"]
    rows = -(-n // every) if every else 0
    for i, (kind, x) in enumerate(finish["results"]):
        if kind not in ("raw", "stack") or x != i:
            return False
        if kind == "stack":
            rkind, index, _ = raw[x]
            if rkind != ResultKind.RESULT_NEW or program.outputs[index][2][0] != rows:
                return False
    # the program returns a tuple (its out_tree): a single array is taken out of it by post
    return finish["structure"] == "tuple"


def _finish_call(finish, static, args, raw):
    """Entry.post of a loop program whose results need putting together (static: None where
    no result is an argument's value, so the arguments need no flattening)."""
    return finish_results(raw, finish, () if static is None else _leaves(args, static))


def _c_strides(shape) -> tuple:
    from .ir.leaves import contiguous_strides
    return tuple(contiguous_strides(shape))


def _leaves(call, static) -> list:
    out = []
    for pos, arg in enumerate(call):
        if pos not in static:
            out += flatten(arg)[0]
    return out
