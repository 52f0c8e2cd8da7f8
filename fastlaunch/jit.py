"""`fastlaunch.compile`: the compiled callable, its signature cache and its introspection.

The per-call fast path lives in `_core.Dispatcher.__call__` (Cython).  This file is the slow
path it falls back to: binding keyword arguments, tracing a new signature, making its
artifact (program/artifact.py: fuse, schedule, compile, record, verify), linking it (program/link.py) and
installing it as a cache entry; calls whose arguments overlap (frontend/aliasing.py's geometry);
introspection, saving and pickling.

Size: just over 1,000 lines: `Compiled` is one object with one role (the slow path of one
compiled function) whose parts share its state (entries, lock, options); the compile stages
live in program/artifact.py, the aliasing geometry in frontend/aliasing.py, the description and
normalisation of arguments in frontend/arguments.py.
"""
from __future__ import annotations

import collections
import dis
import inspect
import os
import pickle
import sys
import threading
import time
import types
import warnings
import weakref
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Concatenate, Generic, ParamSpec, Protocol,
                    Sequence, TextIO, TypeVar, overload)

import numpy as np

# frontend/numpy, frontend/numpy, creation, rng, scipy_funcs, pymath, stdlib_calls: the tracer's NumPy
# API (registered on import) and the calls intercepted while tracing
from . import _core, env, forking  # noqa: F401
from .program import bytecode, record  # noqa: F401
from .frontend.numpy import trace_buffers as creation, shaping, random as rng  # noqa: F401
from .ir import fuse, ops  # noqa: F401
from .frontend import numpy as numpy_surface, pymath, scipy_funcs, stdlib_calls  # noqa: F401
from .backends import get_backend
from .errors import TracingError
from .ir.leaves import LeafSpec
from .program.link import link
from .frontend.pytree import NestingError, flatten, register_method_class
from .frontend import aliasing, arguments, roll
from .program import artifact, symbolic
from .program.artifact import Artifact, Lowered, effects_text, result_specs  # noqa: F401 (re-exported)
from .frontend.trace import Attr, SpecializeRequest, fewer_collections, trace_function, watch_sizes

# Typing (PEP 612): a compiled function keeps its function's parameters P and result type R,
# so a type checker checks calls of `@fl.compile def f(x: np.ndarray) -> ...` as calls of f.
# The pattern for every wrapper of a function: a class generic in [P, R] whose __call__ takes
# `*args: P.args, **kwargs: P.kwargs`, and for a decorator usable bare and with options,
# two overloads: (fn: Callable[P, R], *, options) -> Wrapper[P, R], and (fn: None = None, *,
# options) -> a protocol whose generic __call__ maps Callable[P, R] to Wrapper[P, R]
# (`CompileDecorator`).
P = ParamSpec("P")
R = TypeVar("R")
P2 = ParamSpec("P2")
R2 = TypeVar("R2")
T = TypeVar("T")

RETRACE_WARNING_AFTER = 8
TRACE_HISTORY = 1000        # TraceRecords kept per compiled function (.stats['history'])


class StaticArraysWarning(UserWarning):
    """A static argument (a method's `self`, a config object) holds NumPy arrays, whose values
    the program freezes when it is traced."""


class RetraceWarning(UserWarning):
    """A compiled function keeps meeting new signatures: each one is traced and compiled anew."""


class UnrolledLoopWarning(UserWarning):
    """A trace that repeats one pattern of operations many times: a Python loop inside the
    compiled function, unrolled into the program (traced, fused and compiled in full, every
    iteration of it).  fl.iterate runs such a loop over a compiled step instead."""


# A trace of at least UNROLLED_NODES graph nodes made by a Python loop that ran at least
# UNROLLED_ITERATIONS times (trace.LoopCounter) warns: such a loop is traced, fused and
# compiled in full (300 iterations of the README's step: 2,400 nodes, 175 kernels, 47 s)
UNROLLED_NODES = 1000
UNROLLED_ITERATIONS = 64


@dataclass
class TraceRecord:
    reason: str
    signature: str
    seconds: float
    kernels: int
    compiled: int           # kernels that had to be compiled (not found in a cache)


class Compiled(_core.Dispatcher, Generic[P, R]):
    """The callable returned by fastlaunch.compile: call it as the function it compiles.

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> step = fl.compile(lambda x, y: np.sin(x) * y)
        >>> step(np.zeros(3), np.ones(3))          # traced once, replayed after
        array([0., 0., 0.])
        >>> step.stats["traces"]
        1
    """
    if TYPE_CHECKING:
        __wrapped__: Callable[P, R]

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

        @overload
        def __get__(self, obj: None, objtype: type | None = None) -> Compiled[P, R]: ...

        @overload
        def __get__(self: Compiled[Concatenate[T, P2], R2], obj: T,
                    objtype: type | None = None) -> Compiled[P2, R2]: ...

        def __get__(self, obj: Any, objtype: type | None = None) -> Any: ...

    def __init__(self, fn: Callable[P, R], *, static_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = (), backend: str | None = None,
                 replay: bool = True, seed: int | None = None, max_entries: int | None = None,
                 pickle_programs: bool = False, dynamic: bool | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"fastlaunch.compile: expected a function to compile, got "
                            f"{type(fn).__name__} {fn!r:.60}")
        for flag, value in (("replay", replay), ("pickle_programs", pickle_programs)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"fastlaunch.compile: {flag} must be True or False, got "
                                f"{value!r:.60}")
        replay, pickle_programs = bool(replay), bool(pickle_programs)
        if dynamic is not None and not isinstance(dynamic, (bool, np.bool_)):
            raise TypeError(f"fastlaunch.compile: dynamic must be None, True or False, got "
                            f"{dynamic!r:.60}")
        self.dynamic = None if dynamic is None else bool(dynamic)
        self._templates: dict = {}       # size class -> [symbolic.Template]
        # size class -> [why its symbolic builds failed] (empty: met, no failure yet)
        self._classes: dict = {}
        name = getattr(fn, "__name__", type(fn).__name__)
        try:
            self._signature = inspect.signature(fn)
        except (TypeError, ValueError):
            self._signature = None
        params = list(self._signature.parameters.values()) if self._signature else []
        self._param_names = [p.name for p in params
                             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        keyword_names = [p.name if p.kind == p.POSITIONAL_OR_KEYWORD else None
                         for p in params
                         if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
        positions = arguments.static_positions(name, self._signature is not None, self._param_names,
                                      varargs, static_argnums, static_argnames)
        if max_entries is None:
            super().__init__(positions, replay)
        else:
            if isinstance(max_entries, bool) or not isinstance(max_entries, (int, np.integer)):
                raise TypeError(f"fastlaunch.compile: max_entries must be an int, got "
                                f"{max_entries!r:.60}")
            if max_entries < 1:
                raise ValueError(f"fastlaunch.compile: max_entries must be at least 1, got "
                                 f"{max_entries}")
            super().__init__(positions, replay, int(max_entries))
        self._static = positions
        if self._signature is not None:
            self._set_keyword_names(keyword_names)
        self.__wrapped__ = fn
        self.__name__ = name
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__module__ = getattr(fn, "__module__", None)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.backend = get_backend(backend)
        self.replay = replay
        if seed is not None and (type(seed) is not int or not 0 <= seed < 2**64):
            raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
        self.seed = seed
        self.pickle_programs = pickle_programs
        # the most recent traces, why each happened (bounded: a long-running process that
        # meets ever new shapes must not grow; the counts cover every trace)
        self.traces: collections.deque[TraceRecord] = collections.deque(maxlen=TRACE_HISTORY)
        self.trace_count = 0
        self.trace_seconds = 0.0
        self.retraces = 0                  # replay=False: calls traced without caching
        self.programs_loaded = 0           # entries installed from shipped program bytes
        self._lock = forking.trace_lock()
        self._aliased: dict = {}        # (signature, aliases) -> [(keys, statics, Entry)]
        # fl.iterate's loops over this step, by their options (iterate.py keeps them here so
        # that a repeated call finds its loop in one dict lookup)
        self.iterate_cache: dict = {}
        self._warned_at = 0

    # ---- the slow path -----------------------------------------------------------------
    def _miss(self, args, kwargs):
        if self._holds_tracer(args, kwargs):
            # called while another compiled function is being traced: trace straight through
            return self.__wrapped__(*args, **kwargs)
        args, kwargs = self._bind(args, kwargs)
        call = args + ((kwargs,) if kwargs else ())
        enc = _core.encode(call, self._static)
        copies: dict = {}
        caller = call        # side effects go to the caller's containers, not normalised copies
        if enc is None or (self.backend.memory.crosses and self._reversed_leaf(call)):
            # a device backend copies each argument's memory span to the device from its
            # pointer on: an array with a negative stride goes through a contiguous copy
            call, copies, gens = self._normalize(call, contiguous=self.backend.memory.crosses)
            enc = arguments.with_generators(_core.encode(call, self._static), gens)
            if enc is None:
                raise TypeError(f"{self.__name__}: these arguments cannot be passed to a "
                                f"compiled function")
        if not self.replay:
            entry = self._trace(call, enc, bool(kwargs), install=False)
            self.retraces += 1
        else:
            with self._lock:
                entry = self._find(enc, call)
                if entry is None:
                    entry = self._sized(call, enc, bool(kwargs))
        try:
            if not copies:
                result = _core.run_entry(entry, call, self._static)
            else:
                result = self._run_on_copies(entry, call, copies)
        except _core.AliasedArgumentsError as err:
            return self._on_aliased(args, kwargs, err)
        if entry.post is not None:
            return entry.post(caller, result)
        return result

    def _sized(self, call, enc, has_kwargs: bool):
        """A new signature: an instance of a symbolic template of its size class (no trace,
        no compile), else a trace; the trace of a class's second size (or, with dynamic=True,
        its first) becomes a template's base (program/symbolic.py)."""
        if self.dynamic is False:
            return self._trace(call, enc, has_kwargs, install=True)
        key = symbolic.class_key(enc[1], enc[2], enc[3])
        if key is None:
            return self._trace(call, enc, has_kwargs, install=True)
        key = (key, symbolic.class_signature(self, call, enc[1]))
        templates = self._templates.get(key, [])
        for t in templates:
            entry = symbolic.instantiate(self, t, enc)
            if entry is not None:
                self._install(entry)
                return entry
        seen = key in self._classes        # a trace of this class succeeded before
        if len(self._classes.get(key, ())) >= symbolic.MAX_FAILED_BUILDS or \
                len(templates) >= symbolic.MAX_TEMPLATES or \
                not (seen or self.dynamic):
            entry = self._trace(call, enc, has_kwargs, install=True)
            self._classes.setdefault(key, [])
            return entry
        with watch_sizes() as watch:
            entry = self._trace(call, enc, has_kwargs, install=True)
        try:
            template = symbolic.build(self, call, enc, has_kwargs, entry, watch, key)
        except symbolic.Refused as err:
            why = str(err)
        except Exception as err:        # noqa: BLE001 - a failed build leaves sizes static
            why = f"symbolic build failed: {type(err).__name__}: {err}"
        else:
            templates.append(template)
            self._templates[key] = templates
            self.traces[-1].reason += f"; {template.description}"
            self._classes.setdefault(key, [])
            return entry
        self._classes.setdefault(key, []).append(why)
        self.traces[-1].reason += f"; sizes not symbolic: {why}"
        return entry

    def _on_aliased(self, args, kwargs, err):
        """A call in which an argument updated in place overlaps another argument in memory:
        NumPy's result, from a program traced for that overlap.  Overlapping array leaves form
        groups.  A group of one view passed several times (`f(x, x)`) has its leaves share one
        storage.  Any other group (`f(x[1:], x[:-1])`, `f(M.T, M)`) is passed as one leaf, a 1-D
        view `base` of the memory the group spans, in place of its first member, and inside
        the trace each member is a writable view of base's tracer (slices, a reshape,
        transposes), so every write through one member is seen by reads through the others,
        in program order, and ufuncs whose inputs overlap their output read the inputs' old
        values as NumPy does.  The group's layout (offsets, shapes, strides relative to base)
        is part of the key: a different overlap traces anew.  Such programs are kept apart
        from the ordinary entries (which assume distinct arrays) and reached through here,
        the slow path, on every aliased call.  A group that cannot be expressed so (mixed
        dtypes, offsets or strides that are not whole elements) stays an error."""
        args, kwargs = self._bind(args, kwargs)
        call = args + ((kwargs,) if kwargs else ())
        leaves = []
        for pos, arg in enumerate(call):
            if pos not in self._static:
                leaves += flatten(arg)[0]
        found = aliasing.plan(leaves, spans=self.backend.memory.crosses)
        aliases, views, substitute = found.aliases, found.views, found.substitute
        layout, refused = found.layout, found.refused

        def refuse(group, why):
            return ValueError(
                f"{self.__name__}: argument leaves {', '.join(map(str, group))} overlap in "
                f"memory and one of them is updated in place, but {why}; fastlaunch follows "
                f"NumPy there only for overlapping views of one dtype on whole elements: pass "
                f"a copy (x.copy()) of one of them")
        for group, why in refused:
            if err.leaf in group and err.other in group:
                raise refuse(group, why) from None
        if not aliases and not views:
            raise err
        if substitute:
            call = self._replace_leaves(call, substitute)
        enc = _core.encode(call, self._static)
        if enc is None:
            raise err
        key = (enc[0], tuple(sorted(aliases.items())), tuple(layout))
        with self._lock:
            entry = None
            for keys, statics, e in self._aliased.get(key, ()):
                if keys == enc[2] and statics == enc[3]:
                    entry = e
                    break
            if entry is None:
                entry = self._trace(call, enc, bool(kwargs), install=False, aliases=aliases,
                                    views=views)
                self._aliased.setdefault(key, []).append((enc[2], enc[3], entry))
                said = [f"{j} = {i}" for j, i in sorted(aliases.items())]
                said += [f"{', '.join(map(str, g))} on one span of {n} elements"
                         for g, n, _ in layout]
                self._record(TraceRecord(
                    "aliased arguments: leaves " + "; ".join(said) + " (one storage)",
                    _signature_text(entry.info.leaves), 0.0, len(entry.info.kernels),
                    sum(1 for k in entry.info.kernels if k.origin == "compiled")))
        # The program never reads the aliased leaves nor the groups' other members (their uses
        # went to the shared storage), but binds them: bound to stand-ins of the same layout,
        # the in-place overlap check passes and the caller's memory is written exactly once,
        # through the storage's own leaf.
        unread = {k: aliasing.stand_in(leaves[k]) for k in aliases}
        unread.update({k: aliasing.stand_in(leaves[k]) for k, (b, _) in views.items() if k != b})
        try:
            result = _core.run_entry(entry, self._replace_leaves(call, unread), self._static)
        except _core.AliasedArgumentsError as again:
            for group, why in refused:
                if again.leaf in group or again.other in group:
                    raise refuse(group, why) from None
            raise
        if entry.post is not None:
            return entry.post(args + ((kwargs,) if kwargs else ()), result)
        return result

    def _replace_leaves(self, call, replace: dict) -> tuple:
        """call with the flattened leaves named in `replace` (position -> value) replaced."""
        out, at = [], 0
        for pos, arg in enumerate(call):
            if pos in self._static:
                out.append(arg)
                continue
            arg_leaves, tree = flatten(arg)
            if any(at + i in replace for i in range(len(arg_leaves))):
                arg = tree.unflatten([replace.get(at + i, x) for i, x in enumerate(arg_leaves)])
            at += len(arg_leaves)
            out.append(arg)
        return tuple(out)

    def _run_on_copies(self, entry, call, copies: dict):
        """Run on the aligned native copies `_normalize` made, then write the in-place updates
        back into the caller's arrays (copy in, run, copy out): no update is lost."""
        mutated = [i for i in entry.info.program.mutated_leaves if i in copies]
        for i in mutated:
            if not copies[i].flags.writeable:
                raise ValueError(f"{self.__name__}: {entry.info.leaf_names[i]} is updated in "
                                 f"place but is read-only")
        result = _core.run_entry(entry, call, self._static)
        leaves = []
        for pos, arg in enumerate(call):
            if pos not in self._static:
                leaves += flatten(arg)[0]
        for i in mutated:
            np.copyto(copies[i], leaves[i])
        return result

    def _holds_tracer(self, args, kwargs) -> bool:
        """Whether any argument holds a Tracer (a call from inside another trace); also where
        an argument nests too deeply to be taken apart, the error names it."""
        from .frontend.trace import Tracer
        named = [(self._arg_name(i, args), a) for i, a in enumerate(args)]
        named += [(f"argument '{k}'", v) for k, v in kwargs.items()]
        found = False
        for name, value in named:
            try:
                leaves, _ = flatten(value)
            except NestingError as err:
                raise NestingError(f"{self.__name__}: {name}: {err}") from None
            found = found or any(isinstance(x, Tracer) for x in leaves)
        return found

    def _bind(self, args, kwargs):
        """Positional arguments, plus the keyword ones that cannot be positional."""
        if self._signature is None:
            if kwargs:
                raise TypeError(f"{self.__name__} cannot take keyword arguments")
            return tuple(args), {}
        bound = self._signature.bind(*args, **kwargs)   # Python's own TypeError on a mismatch
        if not kwargs:
            return tuple(args), {}
        return tuple(bound.args), dict(bound.kwargs)

    def _find(self, enc, call=None):
        sig, _, keys, statics = enc
        keys, statics = tuple(keys), tuple(statics)     # as an artifact holds them
        words = None
        for entry in self._entries_list():
            if entry.signature == sig and entry.info.keys == keys and entry.info.statics == statics:
                if entry.specialized:
                    if words is None:
                        words = _core.leaf_words(call, self._static) if call is not None else []
                    if not all(k < len(words) and words[k] == w for k, w in entry.specialized):
                        continue
                return entry
        return None

    def _reversed_leaf(self, call) -> bool:
        for i, arg in enumerate(call):
            if i not in self._static and any(
                    isinstance(x, np.ndarray) and any(st < 0 for st in x.strides)
                    for x in flatten(arg)[0]):
                return True
        return False

    def _normalize(self, call, contiguous: bool = False):
        """(call, {leaf index: caller's array}, {leaf index of a Generator}): aligned native
        copies of arrays the fast path cannot bind (byte-swapped, misaligned, odd strides),
        plain ndarray views of harmless subclasses, NumPy views of other libraries' CPU arrays
        (no copy: in-place updates reach them), device views of their CUDA arrays, a fresh
        uint64 key drawn from each numpy.random.Generator; errors that name the argument for
        everything else."""
        out, copies, gens, at = [], {}, set(), 0
        for i, arg in enumerate(call):
            if i in self._static:
                out.append(arg)
                continue
            leaves, tree = flatten(arg)
            fixed = []
            for leaf in leaves:
                if arguments.foreign_device_array(leaf):
                    leaf = self._device_view(self._arg_name(i, call), leaf)
                if isinstance(leaf, np.random.Generator):
                    # this call's random key, drawn from the caller's Generator (advancing it,
                    # as drawing from it in NumPy would)
                    fixed.append(np.uint64(leaf.bit_generator.random_raw()))
                    gens.add(at)
                    at += 1
                    continue
                leaf = arguments.foreign_view(self._arg_name(i, call), leaf)
                new = arguments.normalize_leaf(self._arg_name(i, call), leaf)
                if contiguous and isinstance(new, np.ndarray) and any(st < 0 for st in new.strides):
                    new = np.ascontiguousarray(new)
                if new is not leaf and isinstance(leaf, np.ndarray) and \
                        not np.shares_memory(new, leaf):
                    copies[at] = leaf
                fixed.append(new)
                at += 1
            out.append(tree.unflatten(fixed))
        return tuple(out), copies, gens

    def _device_view(self, name: str, obj):
        """A DeviceArray over another library's CUDA array (CuPy, PyTorch, ...): no copy, so
        in-place updates reach it."""
        view = getattr(self.backend, "from_cuda_array", None)     # optional (backends/base.py)
        if view is None:
            raise TypeError(f"{name}: a CUDA array ({type(obj).__name__}) can only be passed to a "
                            f"function compiled with backend='cuda' (this one: "
                            f"{self.backend.name!r})")
        try:
            return view(obj)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{name}: {err}") from None

    def _arg_name(self, i, call) -> str:
        if i < len(self._param_names):
            return f"argument '{self._param_names[i]}'"
        if i == len(call) - 1 and isinstance(call[i], dict):
            return "keyword arguments"
        return f"argument {i}"

    # ---- tracing -----------------------------------------------------------------------
    def _trace(self, call, enc, has_kwargs: bool, install: bool, aliases=None, views=None,
               sample: bool = False):
        t0 = time.perf_counter()
        sig_bytes, leaf_objs, keys, statics = enc
        leaves, names = [], []
        for i, arg in enumerate(call):
            if i in self._static:
                continue
            arg_leaves, _ = flatten(arg)
            for leaf in arg_leaves:
                leaves.append(arguments.describe_leaf(self._arg_name(i, call), leaf, self.backend))
                names.append(self._arg_name(i, call))

        special: set = set()           # scalar leaves the trace needs the values of

        generators = arguments.generator_leaves(keys)

        def build_args(tracers):
            it = iter([leaf_objs[k] if k in special else
                       rng.TracedGenerator(t.node) if k in generators else
                       tracers[aliases[k]] if aliases and k in aliases else
                       views[k][1].of(tracers[views[k][0]]) if views and k in views else t
                       for k, t in enumerate(tracers)])
            rebuilt = []
            for i, arg in enumerate(call):
                if i in self._static:
                    rebuilt.append(arg)
                    continue
                arg_leaves, tree = flatten(arg)
                rebuilt.append(tree.unflatten([next(it) for _ in arg_leaves]))
            if has_kwargs:
                return rebuilt[:-1], rebuilt[-1]
            return rebuilt, {}

        for i in self._static:
            if i < len(call):
                try:
                    hash(call[i])
                except TypeError:
                    raise TypeError(f"static {self._arg_name(i, call)} must be hashable: its "
                                    f"value is part of the signature (got "
                                    f"{type(call[i]).__name__})") from None
                frozen = arguments.array_attributes(call[i])
                if frozen:
                    warnings.warn(
                        f"{self.__name__}: static {self._arg_name(i, call)} holds arrays "
                        f"({', '.join(frozen)}): their values are frozen into the program when "
                        f"it is traced, and later changes are not seen. Pass it as a regular "
                        f"argument (for a method, drop static_argnums=0) to have them read on "
                        f"every call", StaticArraysWarning, stacklevel=4)
        captured = rng.captured_generators(self.__wrapped__)
        while True:
            try:
                namespace = getattr(self.__wrapped__, "__globals__", None)
                # a bound method's object holds functions too (self.sqrt = cholesky)
                held = _bound_namespace(self.__wrapped__)
                with fewer_collections():
                    with creation.intercepting(namespace), rng.intercepting(), \
                            shaping.intercepting(namespace), \
                            scipy_funcs.intercepting(namespace), \
                            stdlib_calls.intercepting(namespace), \
                            pymath.intercepting(namespace), scipy_funcs.intercepting(held), \
                            shaping.intercepting(held), pymath.intercepting(held):
                        traced, result = trace_function(self.__wrapped__, build_args, leaves)
                    # Python loops of many identical iterations: one loop body each
                    traced.rolled = roll.roll_loops(traced.graph)
                traced.graph.sites = None
                break
            except SpecializeRequest as req:
                new = req.positions - special
                if not new:
                    raise TracingError(f"{req.what} needs a value the trace cannot provide") \
                        from None
                special |= new
                needs = req.what
        if traced.loop_iterations >= UNROLLED_ITERATIONS and \
                len(traced.graph.nodes) >= UNROLLED_NODES:
            text = (f"{self.__name__}: a Python loop inside it ran {traced.loop_iterations} "
                    f"iterations while tracing, making {len(traced.graph.nodes)} operations: "
                    f"the loop is unrolled into the program, every iteration traced, fused and "
                    f"compiled. Make one iteration the compiled function and run the loop with "
                    f"fl.iterate(step, n, ..., carry=...): traced once, looped inside the "
                    f"interpreter")
            if env.log_enabled():
                print(f"[fastlaunch] {text}", file=sys.stderr)
            warnings.warn(text, UnrolledLoopWarning, stacklevel=3)
        for name, gen, before in captured:
            if not rng.same_state(rng.generator_state(gen), before):
                raise TracingError(
                    f"{self.__name__} draws random numbers from {name}, a "
                    f"{type(gen).__name__} it captures: they would be drawn once, while "
                    f"tracing, and every call would return the same numbers. Pass the "
                    f"Generator as an argument (its numbers are then drawn afresh on every "
                    f"call), or use np.random.default_rng() / np.random.* inside the function")
        specialized = []
        if special:
            words = _core.leaf_words(call, self._static)
            specialized = [(k, words[k]) for k in sorted(special)]
        for kind, value, *_ in traced.outputs:
            if kind == "value" and not _immutable(value):
                raise TracingError(
                    f"{self.__name__} returns a {type(value).__name__}: a compiled function "
                    f"hands back the object its trace produced on every call, so a mutable "
                    f"value would be shared between calls. Return arrays, scalars, or "
                    f"tuples/lists/dicts of them")
        for pos in traced.mutated_leaves:
            if aliasing.self_overlapping(leaf_objs[pos]):
                raise ValueError(
                    f"{self.__name__}: {names[pos]} is updated in place, but its elements "
                    f"overlap one another in memory (a stride-0 or overlapping as_strided view "
                    f"of shape {leaf_objs[pos].shape}, strides {leaf_objs[pos].strides}): "
                    f"pass a copy, np.ascontiguousarray(x)")
        if sample:
            # a symbolic build's probe at other sizes: nothing compiled or installed
            # (program/symbolic.py compares it with the base trace)
            return symbolic.Sample(*artifact.probe(traced, result, leaves, self.backend),
                                   sorted(special), bool(traced.effects))
        static_values = [call[i] for i in self._static if i < len(call)]
        art = artifact.from_trace(
            traced, result, leaves, names, self.backend, signature=sig_bytes, keys=keys,
            statics=statics, static_values=static_values, specialized=specialized,
            specialized_values={k: leaf_objs[k] for k in sorted(special)}, rng_seed=self.seed)
        entry = link(art, self.backend)
        if art.effects:
            entry.post = ContainerEffects(art.effects)
        kernels = art.kernels
        seconds = time.perf_counter() - t0
        if install:
            reason = self._reason(leaves)
            if traced.rolled:
                reason += "; " + ", ".join(
                    f"a Python loop of {n} identical iterations rolled into one loop body"
                    for n in traced.rolled)
            if special:
                values = ", ".join(f"{names[k]} = {leaf_objs[k]!r}" for k in sorted(special))
                reason += (f"; specialised on the value of {values} (the trace uses it as a "
                           f"Python value: {needs.split(' (')[0]})")
            self._install(entry)
            self._record(TraceRecord(reason, _signature_text(leaves), seconds, len(kernels),
                                           sum(1 for k in kernels if k.origin == "compiled")))
            self._maybe_warn()
            if env.log_enabled():
                _log_trace(self.__name__, reason, art.lowered, kernels, seconds)
        return entry

    def _reason(self, leaves) -> str:
        entries = self._entries_list()
        if not entries:
            return "first call"
        best = None
        for e in entries:
            old = e.info.leaves
            if len(old) != len(leaves):
                continue
            diffs = [f"leaf {i}: {_leaf_text(a)} -> {_leaf_text(b)}"
                     for i, (a, b) in enumerate(zip(old, leaves)) if a != b]
            if best is None or len(diffs) < len(best):
                best = diffs
        if best is None:
            return "new argument structure"
        if not best:
            return "new value of a static or value-specialised argument, or a new layout"
        return "new signature: " + "; ".join(best)

    def _record(self, rec: TraceRecord) -> None:
        self.traces.append(rec)
        self.trace_count += 1
        self.trace_seconds += rec.seconds

    def _maybe_warn(self):
        n = self.trace_count
        if n >= RETRACE_WARNING_AFTER and n >= 2 * self._warned_at:
            self._warned_at = n
            warnings.warn(f"{self.__name__} has been traced {n} times (last: "
                          f"{self.traces[-1].reason}). Each new shape, dtype or layout is traced "
                          f"and compiled anew; see .stats", RetraceWarning, stacklevel=4)

    # ---- introspection -----------------------------------------------------------------
    @property
    def stats(self) -> dict[str, Any]:
        """traces: signatures traced and cached (with `history`, why each of the last
        TRACE_HISTORY happened);
        uncached_traces: calls traced in replay=False mode, which keeps no history;
        symbolic: the symbolic-size templates (program/symbolic.py) and how many sizes each served;
        static_sizes: why size classes that met several sizes stay static."""
        return {"traces": self.trace_count, "entries": len(self._entries_list()),
                "symbolic": [f"{t.description} ({t.instances} sizes)"
                             for ts in self._templates.values() for t in ts],
                "static_sizes": [why for whys in self._classes.values() for why in whys],
                "trace_seconds": self.trace_seconds,
                "uncached_traces": self.retraces, "programs_loaded": self.programs_loaded,
                "history": list(self.traces)}

    def clear(self) -> None:
        """Forget every traced signature; kernels no other function uses are unloaded (the
        disk cache keeps them cheap to load again)."""
        with self._lock:
            self._forget()
            self._aliased.clear()
            self._templates.clear()
            self._classes.clear()
            self.traces.clear()
            self.trace_count = 0
            self.trace_seconds = 0.0
            self.retraces = 0
            self._warned_at = 0
        self.backend.release()

    def lower(self, *args: P.args, **kwargs: P.kwargs) -> Lowered:
        """Trace for these arguments (without running) and return the IR, kernels and bytecode."""
        return self.artifact_for(*args, **kwargs).lowered

    def artifact_for(self, *args: P.args, **kwargs: P.kwargs) -> Artifact:
        """The artifact of these arguments' signature: the cached entry's, else traced now
        (without running, and without installing it)."""
        return self._entry_for(args, kwargs).info

    # ---- what fl.iterate and other front ends read of a compiled function -------------------
    @property
    def static_positions(self) -> tuple:
        """The positions of the static arguments, sorted."""
        return self._static

    @property
    def param_names(self) -> list:
        """The names of the positional parameters of the compiled function."""
        return list(self._param_names)

    def arg_name(self, pos: int, call) -> str:
        """How error messages name positional argument `pos` of `call`."""
        return self._arg_name(pos, call)

    def prepare(self, call: tuple):
        """(call, {leaf: caller's array}, {leaf of a Generator}, encoding) of a positional call
        as the slow path runs it: arguments the encoder cannot take (or, on a device backend,
        with negative strides) normalised as _normalize says."""
        enc = _core.encode(call, self._static)
        copies: dict = {}
        gens: set = set()
        if enc is None or (self.backend.memory.crosses and self._reversed_leaf(call)):
            call, copies, gens = self._normalize(call, contiguous=self.backend.memory.crosses)
            enc = arguments.with_generators(_core.encode(call, self._static), gens)
        return call, copies, gens, enc

    def save(self, path: str | os.PathLike, *args: P.args, **kwargs: P.kwargs) -> None:
        """Write the program traced for these arguments' signature to `path`;
        fastlaunch.load(path) replays it in another process without this function."""
        from .program.saved import save_artifact
        if kwargs:
            raise TypeError("save() takes example arguments positionally")
        save_artifact(path, self.artifact_for(*args), self.backend, self._static)

    def _entry_for(self, args, kwargs, install=False):
        args, kwargs = self._bind(args, kwargs)
        call = args + ((kwargs,) if kwargs else ())
        enc = _core.encode(call, self._static)
        if enc is None or (self.backend.memory.crosses and self._reversed_leaf(call)):
            call, _, gens = self._normalize(call, contiguous=self.backend.memory.crosses)
            enc = arguments.with_generators(_core.encode(call, self._static), gens)
        if enc is None:
            raise TypeError(f"{self.__name__}: these arguments cannot be passed to a "
                            f"compiled function")
        with self._lock:
            entry = self._find(enc, call) if self.replay else None
            if entry is not None and entry.info.symbolic is not None:
                entry = None          # a symbolic instance: lower/save/iterate trace its sizes
                install = False
            if entry is None and install and self.replay:
                entry = self._sized(call, enc, bool(kwargs))    # with_programs: as a call would
            elif entry is None:
                entry = self._trace(call, enc, bool(kwargs), install=False)
        return entry

    def dis(self, *args: Any, file: TextIO | None = None, source: bool = False,
            **kwargs: Any) -> None:
        """Print the traced graph, the kernel plan and the bytecode for these arguments' signature
        (without arguments: for every cached entry).  source=True adds each kernel's source
        (LLVM IR on the CPU), which is long."""
        out = file or sys.stdout
        if args or kwargs:
            lowered = self.lower(*args, **kwargs)
            print(lowered.text(source=source), file=out)
            forward = getattr(self.__wrapped__, "forward_program", None)
            if forward is not None:      # a gradient (grad.py): what the gradient costs
                print(f"; peak temporaries {lowered.program.peak_temp_bytes()} bytes with the "
                      f"gradient, {forward(self.backend.name, args, kwargs).peak_temp_bytes()} "
                      f"bytes for the function alone", file=out)
            return
        for i, entry in enumerate(self._entries_list()):
            print(f"#### entry {i}: {_signature_text(entry.info.leaves)}", file=out)
            print(entry.info.lowered.text(source=source), file=out)

    def __repr__(self):
        return f"<fastlaunch.Compiled {self.__qualname__} ({len(self._entries_list())} entries)>"

    def __get__(self, obj, objtype=None):  # type: ignore[no-redef]
        """A compiled method: `self` is its first argument.  Unless it is static, its class is
        taken apart by attributes (pytree.register_method_class): array attributes are traced
        leaves read on every call, the others keyed by value."""
        if obj is None:
            return self
        if 0 not in self._static:
            register_method_class(type(obj))
        return types.MethodType(self, obj)

    # ---- pickling and Dask -------------------------------------------------------------
    def with_programs(self, *args: P.args, **kwargs: P.kwargs) -> Compiled[P, R]:
        """Trace (without running) for these example arguments' signature and mark this function
        to ship its programs when pickled: a process that unpickles it installs them and calls
        them without tracing or compiling.  Returns self:
        `step = fl.compile(fn).with_programs(x0, y0)`."""
        if not self.replay:
            raise ValueError(f"{self.__name__}: with_programs needs replay=True (a replay=False "
                             f"function traces every call and keeps no program to ship)")
        self._entry_for(args, kwargs, install=True)
        self.pickle_programs = True
        return self

    def __reduce__(self):
        """By reference where this object is importable under its name (a module-level
        `@fl.compile` function): the receiving process imports it.  Otherwise by value: the
        function (through cloudpickle where installed: lambdas, closures, `__main__`) and the
        options; with pickle_programs, also each cached entry as saved-program bytes.  Never
        raw pointers: the receiving process traces again on first use (kernels come from its
        disk cache) unless programs were shipped."""
        key = id(self)
        if key in _REDUCING.active:
            raise pickle.PicklingError(f"{self.__qualname__}: a compiled function whose own "
                                       f"function refers to it cannot be pickled by value")
        if not self.pickle_programs and _importable(self) and (
                self.__module__ != "__main__" or _cloudpickle() is None):
            return self.__qualname__
        _REDUCING.active.add(key)
        try:
            fn = _function_payload(self.__wrapped__, self.__qualname__)
        finally:
            _REDUCING.active.discard(key)
        options = {"static_argnums": self._static, "backend": self.backend.name,
                   "replay": self.replay, "seed": self.seed, "max_entries": self.max_entries,
                   "pickle_programs": self.pickle_programs, "dynamic": self.dynamic}
        if not self.pickle_programs:
            return (_rebuild, (fn, options, []))
        programs, templates = self._program_bytes()
        return (_rebuild, (fn, options, programs, templates))

    def _program_bytes(self) -> tuple[list, list]:
        """Each cached entry as saved-program bytes, and each symbolic template as
        (the index of its base entry's bytes, symbolic.shipped record); entries a saved program
        cannot hold (namedtuple arguments, static values other than scalars and strings) are
        left to be traced again by the receiving process."""
        from .program.saved import dumps_artifact
        out, at = [], {}
        for entry in self._entries_list():
            if entry.info.symbolic is not None:
                continue            # a symbolic instance: the receiver derives it again
            try:
                out.append(dumps_artifact(entry.info, self.backend, self._static))
            except TypeError:
                continue
            at[id(entry)] = len(out) - 1
        templates = [(at[id(t.base)], symbolic.shipped(t))
                     for ts in self._templates.values() for t in ts if id(t.base) in at]
        return out, templates

    def _install_program(self, data: bytes):
        """Install an entry from saved-program bytes (verified as fastlaunch.load verifies a
        file): the artifact they hold, linked.  Returns the entry."""
        from .program import saved
        where = f"{self.__qualname__}: shipped program"
        meta, art = saved.loads_artifact(data, self.backend.name, where)
        if tuple(meta["static_positions"]) != self._static:
            raise saved.SavedProgramError(f"{where}: static positions "
                                          f"{meta['static_positions']}, expected {self._static}")
        with saved.invalid(where):
            entry = link(art, self.backend)
        with self._lock:
            self._install(entry)
            self.programs_loaded += 1
        return entry

    def _install_template(self, base_entry, shipped: dict) -> None:
        """Install a shipped symbolic template over an installed shipped entry: later sizes
        of its class are instances here too, with no trace."""
        from .program import saved
        try:
            template = symbolic.restore(self, base_entry, shipped)
        except symbolic.Refused as err:
            raise saved.SavedProgramError(f"{self.__qualname__}: shipped symbolic template: "
                                          f"{err}") from None
        with self._lock:
            self._templates.setdefault(template.key, []).append(template)
            self._classes.setdefault(template.key, [])

    def __dask_tokenize__(self):
        """A token that is the same in every process for the same function and options: an
        importable compiled function by its name; any other by its function's pickled bytes
        (closure values included) as Dask tokenizes functions."""
        options = (self._static, self.backend.name, self.replay)
        if _importable(self) and self.__module__ != "__main__":
            return ("fastlaunch.Compiled", self.__module__, self.__qualname__, options)
        try:
            from dask.tokenize import normalize_token
        except ImportError:                        # dask before 2024.2
            from dask.base import normalize_token
        return ("fastlaunch.Compiled", normalize_token(self.__wrapped__), options)


class CompileDecorator(Protocol):
    """What `fl.compile(...)` with options and no function returns: a decorator that keeps the
    decorated function's parameters and result type."""

    def __call__(self, fn: Callable[P, R], /) -> Compiled[P, R]: ...


@overload
def compile(fn: Callable[P, R], *, static_argnums: int | Sequence[int] = (),
            static_argnames: str | Sequence[str] = (), backend: str | None = None,
            replay: bool = True, seed: int | None = None, max_entries: int | None = None,
            pickle_programs: bool = False, dynamic: bool | None = None) -> Compiled[P, R]: ...


@overload
def compile(fn: None = None, *, static_argnums: int | Sequence[int] = (),
            static_argnames: str | Sequence[str] = (), backend: str | None = None,
            replay: bool = True, seed: int | None = None, max_entries: int | None = None,
            pickle_programs: bool = False, dynamic: bool | None = None) -> CompileDecorator: ...


def compile(fn: Callable | None = None, *, static_argnums: int | Sequence[int] = (),
            static_argnames: str | Sequence[str] = (), backend: str | None = None,
            replay: bool = True, seed: int | None = None,
            max_entries: int | None = None,
            pickle_programs: bool = False, dynamic: bool | None = None) -> Any:
    """Compile a NumPy function: traced once per signature, then replayed from bytecode.

    Use it as `@fl.compile`, as `@fl.compile(static_argnames="n", ...)`, or as
    `fl.compile(fn, ...)`; the result is a `Compiled`, called as `fn` is.

    static_argnums / static_argnames: arguments whose *value* is part of the signature.
    backend: "cpu" (LLVM on this machine), "cuda" (NVIDIA GPUs: PTX through LLVM's NVPTX
        target; see the README's CUDA section), "null" (no kernels run: for structure
        tests) or "devsim" (the CPU's kernels behind a simulated device-memory boundary: for
        tests of the device paths); None: the FASTLAUNCH_BACKEND environment variable, else
        "cpu".
    replay=False re-traces on every call (hitting the kernel cache): the "before" baseline.
    seed: random numbers drawn inside fn (np.random.*, default_rng()) come from this seed
        (each traced signature counts its calls from it; a forked child's draws are salted
        with its place among the forks); None: a fresh seed per signature.
    max_entries: signatures kept (least recently used dropped past it); default 512.
    pickle_programs: a pickled copy carries the programs traced so far (see
        Compiled.with_programs), so that the receiving process neither traces nor compiles them.
    dynamic: sizes (program/symbolic.py). None (default): the first call of a size class is traced for
        its sizes; a second size of the class (same dtypes, ranks, layouts; dims 0 and 1 apart)
        traces once more with symbolic sizes, and later sizes replay without tracing or
        compiling. True: symbolic from the first call. False: every new size traces.

    Example:
        >>> import numpy as np, fastlaunch as fl
        >>> @fl.compile
        ... def step(p, target, lr):
        ...     r = np.sin(p) - target
        ...     return p - lr * 2 * r * np.cos(p), np.mean(r * r)
        >>> p, loss = step(np.zeros(4), np.full(4, 0.5), 0.1)   # traced, then replayed
        >>> float(loss)
        0.25
        >>> @fl.compile(static_argnames="n")
        ... def power(x, n):
        ...     for _ in range(n - 1):
        ...         x = x * x
        ...     return x
        >>> power(np.full(2, 3.0), 2)
        array([9., 9.])
    """
    def wrap(f):
        if _rebinds_own_attributes(f):
            # obj.method keeps its state in obj (an optimiser's moments, a layer's cached
            # input): compiled for obj alone, its attributes would be frozen at the trace and
            # its rebinds lost.  So obj becomes the first argument, as for a method compiled
            # in its class: its array attributes are read on every call and the attributes
            # the method rebinds are rebound after each call.
            obj = f.__self__
            register_method_class(type(obj))
            nums = (static_argnums,) if isinstance(static_argnums, int) else static_argnums
            inner = Compiled(f.__func__, static_argnums=tuple(n + 1 if n >= 0 else n
                                                               for n in nums),
                             static_argnames=static_argnames, backend=backend, replay=replay,
                             seed=seed, max_entries=max_entries,
                             pickle_programs=pickle_programs)
            return types.MethodType(inner, obj)
        return Compiled(f, static_argnums=static_argnums, static_argnames=static_argnames,
                        backend=backend, replay=replay, seed=seed, max_entries=max_entries,
                        pickle_programs=pickle_programs, dynamic=dynamic)
    if fn is None:
        return wrap
    return wrap(fn)


# ---- helpers -----------------------------------------------------------------------------
def _rebinds_own_attributes(fn) -> bool:
    """Whether fn is a method bound to an instance (not a class or module) whose own code
    assigns or deletes attributes of its first argument (`self.m = ...`, `self.G += ...`).
    Read from the bytecode, so that it is known before any call; a rebind made by a helper
    method it calls is still found while tracing (frontend/trace.py refuses it, saying what to do)."""
    obj = getattr(fn, "__self__", None)
    func = getattr(fn, "__func__", None)
    if not isinstance(fn, types.MethodType) or not isinstance(func, types.FunctionType) or \
            isinstance(obj, (type, types.ModuleType)) or \
            getattr(type(obj), "__dictoffset__", 0) == 0:
        return False
    code = func.__code__
    if code.co_argcount == 0:
        return False
    me = code.co_varnames[0]
    ins = list(dis.get_instructions(code))
    for i, op in enumerate(ins):
        if op.opname not in ("STORE_ATTR", "DELETE_ATTR") or i == 0:
            continue
        before = ins[i - 1]
        if before.opname == "LOAD_FAST" and before.argval == me:
            return True               # self.x = value  /  del self.x
        if before.opname == "SWAP":
            # self.x op= value: LOAD_FAST self, COPY 1, LOAD_ATTR x, ..., SWAP 2, STORE_ATTR x
            for j in range(i - 1, 1, -1):
                if ins[j].opname == "LOAD_ATTR" and ins[j].argval == op.argval and \
                        ins[j - 1].opname == "COPY" and ins[j - 2].opname == "LOAD_FAST" and \
                        ins[j - 2].argval == me:
                    return True
    return False


class _Reducing(threading.local):
    def __init__(self):
        self.active = set()


_REDUCING = _Reducing()


def _cloudpickle():
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle


def _importable(obj) -> bool:
    """Whether pickle's global lookup (module, then qualified name) finds this very object."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    qualname = getattr(obj, "__qualname__", "")
    if module is None or not qualname or "<" in qualname:
        return False
    found = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return False
    return found is obj


def _function_payload(fn, qualname):
    """The wrapped function as the receiving process will get it: cloudpickle's bytes where
    cloudpickle is installed (by reference when importable, else by value), else the function
    itself for pickle's own global lookup."""
    cp = _cloudpickle()
    if cp is not None:
        return ("cloudpickle", cp.dumps(fn))
    try:
        pickle.dumps(fn)
    except (pickle.PicklingError, AttributeError, TypeError) as err:
        raise pickle.PicklingError(
            f"{qualname}: a compiled function is pickled with its function, and this one is "
            f"not importable by name (a lambda, a closure, or one defined in __main__ under "
            f"its compiled name); install cloudpickle to pickle it by value ({err})") from None
    return ("object", fn)


_REBUILT: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_REBUILT_RECENT: collections.OrderedDict = collections.OrderedDict()   # key -> Compiled
_REBUILT_LOCK = forking.lock(forking.TABLE)
KEEP_REBUILT = 32


def _rebuild(fn, options, programs=(), templates=()):
    """Unpickle: a compiled function with the same options (and the shipped entries).

    The same pickled bytes unpickled again in this process give the same object, as a
    function pickled by reference would: a worker that receives the function with every task
    (a process pool's map, Dask) traces each signature once, not once per task.  A pool
    drops each task's arguments once it ran, so the KEEP_REBUILT most recently unpickled
    functions are held here (the others while something else holds them)."""
    kind, payload = fn
    key = None
    if kind == "cloudpickle":
        key = (payload, tuple(sorted(options.items())), tuple(programs),
               pickle.dumps(templates))
        with _REBUILT_LOCK:
            found = _REBUILT.get(key)
            if found is not None:
                _keep_rebuilt(key, found)
                return found
        payload = pickle.loads(payload)
    compiled = Compiled(payload, **options)
    entries = [compiled._install_program(data) for data in programs]
    for at, shipped in templates:
        if type(at) is not int or not 0 <= at < len(entries):
            from .program.saved import SavedProgramError
            raise SavedProgramError(f"{compiled.__qualname__}: a shipped symbolic template "
                                    f"names program {at!r} of {len(entries)}")
        compiled._install_template(entries[at], shipped)
    if key is not None:
        with _REBUILT_LOCK:
            compiled = _REBUILT.setdefault(key, compiled)
            _keep_rebuilt(key, compiled)
    return compiled


def _keep_rebuilt(key, compiled) -> None:
    _REBUILT_RECENT[key] = compiled
    _REBUILT_RECENT.move_to_end(key)
    while len(_REBUILT_RECENT) > KEEP_REBUILT:
        _REBUILT_RECENT.popitem(last=False)


_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, np.generic, np.dtype, type,
              range, slice, type(Ellipsis), frozenset)


def _immutable(value) -> bool:
    """Whether a non-array result can be returned as the same object on every call."""
    if isinstance(value, frozenset):
        return all(_immutable(v) for v in value)
    return isinstance(value, _IMMUTABLE)


def _leaf_text(leaf: LeafSpec) -> str:
    return leaf.text()


def _signature_text(leaves) -> str:
    return "(" + ", ".join(_leaf_text(d) for d in leaves) + ")"


def _bound_namespace(fn):
    """The attribute dict of the object a bound method belongs to, else None: the functions
    it holds (filterpy's sigma points keep `self.sqrt = scipy.linalg.cholesky`) are swapped
    for their tracing entry points like the names of the function's module."""
    obj = getattr(fn, "__self__", None)
    if obj is None or not hasattr(fn, "__func__") or isinstance(obj, (type, types.ModuleType)):
        return None
    held = getattr(obj, "__dict__", None)
    return held if type(held) is dict else None


class ContainerEffects:
    """Replays a trace's side effects on argument containers: the program returns (result,
    [final contents per mutated list/dict]); each final content is written into the caller's
    container at its path (so `config['m'] = ...` inside fn reaches the caller's dict on
    every call, as it would in NumPy), and the result alone is returned."""

    def __init__(self, paths):
        self.paths = [tuple(p) for p in paths]

    def __call__(self, call, out):
        result, finals = out
        for path, final in zip(self.paths, finals):
            target = call[path[1]] if path[0] == 0 else call[-1][path[1]]
            for key in path[2:]:
                target = getattr(target, key.name) if isinstance(key, Attr) else target[key]
            if type(target) is dict:
                target.clear()
                target.update(final)
            elif type(target) is list:
                target[:] = final
            else:                     # an object: the attributes the function rebound
                for name, value in final.items():
                    setattr(target, name, value)
        return result

    def describe(self) -> str:
        return effects_text(self.paths)


def _log_trace(name, reason, lowered, kernels, seconds):
    lines = [f"[fastlaunch] traced {name} ({reason}) in {seconds * 1e3:.1f} ms: "
             f"{len(kernels)} kernels"]
    for (label, _, _), k in zip(lowered.kernels, kernels):
        lines.append(f"[fastlaunch]   {k.name} {label}: {k.origin}, {k.seconds * 1e3:.2f} ms")
    print("\n".join(lines), file=sys.stderr)
