"""`fastlaunch.compile`: the compiled callable, its signature cache and its introspection.

The per-call fast path lives in `_core.Dispatcher.__call__` (Cython).  This file is the slow
path it falls back to: binding keyword arguments, tracing a new signature, fusing, compiling,
recording and verifying a program, and installing it as a cache entry.

Size: over 1,000 lines: the slow path, pickling and the argument-aliasing geometry (about
300 lines) share `Compiled`; issue 26 moves the compile stages into one artifact module and
aliasing into a module of its own.
"""
from __future__ import annotations

import collections
import inspect
import os
import pickle
import sys
import threading
import time
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Concatenate, Generic, ParamSpec, Protocol,
                    Sequence, TextIO, TypeVar, overload)

import numpy as np

# numpy_api, numpy_funcs, creation, rng, scipy_funcs, pymath, stdlib_calls: the tracer's NumPy
# API (registered on import) and the calls intercepted while tracing
from . import (_core, bytecode, creation, env, forking, fuse, numpy_api,  # noqa: F401
               numpy_funcs, ops, pymath, record, rng, scipy_funcs, stdlib_calls)
from .backends import get_backend
from ._launch import ResultKind, Space
from .backends.base import CallLayout
from .errors import TracingError
from .leaves import LeafSpec
from .link import link_entry
from .pytree import NestingError, flatten, register_method_class
from . import roll, symbolic
from .trace import Attr, SpecializeRequest, trace_function, watch_sizes

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


@dataclass
class Lowered:
    """What one signature lowers to: the graph, the kernels and the bytecode."""
    graph: str
    kernels: list            # (label, loop description, source)
    bytecode: str
    plan: object = None      # the backend's scheduled plan
    program: object = None
    fused: object = None     # the fused, unscheduled plan (what every backend consumes)

    def text(self, source: bool = True) -> str:
        """The graph, each kernel's plan (and, with source, its source) and the bytecode."""
        parts = ["== graph ==", self.graph]
        for i, (label, desc, src) in enumerate(self.kernels):
            parts += [f"== kernel {i}: {label} ==", desc]
            if source:
                parts += ["-- source --", src]
        parts += ["== bytecode ==", self.bytecode]
        return "\n".join(parts)

    def __str__(self):
        return self.text(source=True)


@dataclass
class _EntryInfo:
    leaves: list                 # leaf descriptions, for re-trace reasons
    lowered: Lowered
    kernels: list = field(default_factory=list)
    keys: list = field(default_factory=list)        # dict keys / namedtuple classes in the key
    statics: list = field(default_factory=list)     # static arguments' keys (_core.static_key)
    static_values: list = field(default_factory=list)   # ... and their values
    results: list = field(default_factory=list)     # result leaf specs (see result_specs)
    out_tree: object = None                         # the result's pytree structure
    int_bounds: dict = field(default_factory=dict)
    leaf_names: list = field(default_factory=list)  # the argument each leaf belongs to
    specialized: dict = field(default_factory=dict)  # leaf -> value the trace was keyed by
    symbolic: object = None      # the symbolic.Template an instance was made from


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
        positions = _static_positions(name, self._signature is not None, self._param_names,
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
            enc = _with_generators(_core.encode(call, self._static), gens)
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
        its first) becomes a template's base (symbolic.py)."""
        if self.dynamic is False:
            return self._trace(call, enc, has_kwargs, install=True)
        key = symbolic.class_key(enc[1], enc[2], enc[3])
        if key is None:
            return self._trace(call, enc, has_kwargs, install=True)
        key = (key, symbolic.class_signature(self, call, enc[1]))
        templates = self._templates.get(key, [])
        for t in templates:
            entry = symbolic.instantiate(self, t, enc, self.seed)
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
        with watch_sizes() as reads:
            entry = self._trace(call, enc, has_kwargs, install=True)
        try:
            template = symbolic.build(self, call, enc, has_kwargs, entry, reads)
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
        aliases: dict = {}          # leaf -> the leaf whose storage it shares (same view)
        views: dict = {}            # member leaf -> (base leaf, _MemberView)
        substitute: dict = {}       # base leaf -> the 1-D span array passed in its place
        layout = []                 # the groups' layouts: part of the key
        refused = []                # (leaves, why)
        for group in _overlap_groups(leaves, spans=self.backend.memory.crosses):
            first = leaves[group[0]]
            if all(_same_view(first, leaves[k]) for k in group[1:]):
                for k in group[1:]:
                    aliases[k] = group[0]
                continue
            found = _group_layout([leaves[k] for k in group])
            if isinstance(found, str):
                refused.append((group, found))
                continue
            span, members = found
            substitute[group[0]] = span
            for k, m in zip(group, members):
                views[k] = (group[0], m)
            layout.append((tuple(group), span.shape[0], tuple(members)))

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
        unread = {k: _stand_in(leaves[k]) for k in aliases}
        unread.update({k: _stand_in(leaves[k]) for k, (b, _) in views.items() if k != b})
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
        mutated = [i for i in entry.info.lowered.program.mutated_leaves if i in copies]
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
        from .trace import Tracer
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
                if _foreign_device_array(leaf):
                    leaf = self._device_view(self._arg_name(i, call), leaf)
                if isinstance(leaf, np.random.Generator):
                    # this call's random key, drawn from the caller's Generator (advancing it,
                    # as drawing from it in NumPy would)
                    fixed.append(np.uint64(leaf.bit_generator.random_raw()))
                    gens.add(at)
                    at += 1
                    continue
                leaf = _foreign_view(self._arg_name(i, call), leaf)
                new = _normalize_leaf(self._arg_name(i, call), leaf)
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
                leaves.append(_describe_leaf(self._arg_name(i, call), leaf, self.backend))
                names.append(self._arg_name(i, call))

        special: set = set()           # scalar leaves the trace needs the values of

        generators = _generator_leaves(keys)

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
                frozen = _array_attributes(call[i])
                if frozen:
                    warnings.warn(
                        f"{self.__name__}: static {self._arg_name(i, call)} holds arrays "
                        f"({', '.join(frozen)}): their values are frozen into the program when "
                        f"it is traced, and later changes are not seen. Pass it as a regular "
                        f"argument (for a method, drop static_argnums=0) to have them read on "
                        f"every call", StaticArraysWarning, stacklevel=4)
        captured = _captured_generators(self.__wrapped__)
        while True:
            try:
                namespace = getattr(self.__wrapped__, "__globals__", None)
                # a bound method's object holds functions too (self.sqrt = cholesky)
                held = _bound_namespace(self.__wrapped__)
                with creation.intercepting(namespace), rng.intercepting(), \
                        numpy_funcs.intercepting(namespace), scipy_funcs.intercepting(namespace), \
                        stdlib_calls.intercepting(namespace), \
                        pymath.intercepting(namespace), scipy_funcs.intercepting(held), \
                        numpy_funcs.intercepting(held), pymath.intercepting(held):
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
            if not _same_state(_rng_state(gen), before):
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
            if _self_overlapping(leaf_objs[pos]):
                raise ValueError(
                    f"{self.__name__}: {names[pos]} is updated in place, but its elements "
                    f"overlap one another in memory (a stride-0 or overlapping as_strided view "
                    f"of shape {leaf_objs[pos].shape}, strides {leaf_objs[pos].strides}): "
                    f"pass a copy, np.ascontiguousarray(x)")
        backend = self.backend
        layouts = {pos: leaf.strides for pos, leaf in enumerate(leaves) if leaf.is_array}
        fused = fuse.plan(traced.graph, layouts)
        plan = backend.schedule(fused)
        if sample:
            # a symbolic build's probe at other sizes: the program and the kernels' source,
            # nothing compiled or installed (symbolic.py compares them with the base trace)
            sources = [backend.source(k) for k in plan.compiled_kernels()]
            program = record.record(plan, [f"k{i}" for i in range(len(sources))], leaves,
                                    traced.graph.consts, traced.mutated_leaves, backend.memory,
                                    False)
            return symbolic.Sample(program, sources, result_specs(traced.outputs),
                                   flatten(result)[1], dict(traced.int_bounds),
                                   sorted(special), bool(traced.effects))
        kernels = [backend.compile(k) for k in plan.compiled_kernels()]
        # a call with device arrays keeps its results on the device
        device_results = backend.memory.crosses and any(
            leaf.is_array and leaf.space == Space.SPACE_DEVICE for leaf in leaves)
        program = record.record(plan, [k.name for k in kernels], leaves, traced.graph.consts,
                                traced.mutated_leaves, backend.memory, device_results)
        bytecode.verify(program, backend.memory.kernel_space)
        _, out_tree = flatten(result)
        results = result_specs(traced.outputs)
        call_layout = CallLayout(results, out_tree, dict(traced.int_bounds), rng_seed=self.seed)
        entry = link_entry(backend, program, kernels, call_layout, sig_bytes, keys, statics,
                           specialized)
        if traced.effects:
            entry.post = ContainerEffects(traced.effects)
        lowered = Lowered(str(traced.graph),
                          [(k.label, k.describe(), ck.source)
                           for k, ck in zip(plan.compiled_kernels(), kernels)],
                          program.disassemble(), plan, program, fused)
        static_values = [call[i] for i in self._static if i < len(call)]
        entry.info = _EntryInfo(leaves, lowered, kernels, keys, statics, static_values, results,
                                out_tree, traced.int_bounds, names)
        entry.info.specialized = {k: leaf_objs[k] for k in sorted(special)}
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
                _log_trace(self.__name__, reason, lowered, kernels, seconds)
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
        symbolic: the symbolic-size templates (symbolic.py) and how many sizes each served;
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
        return self._entry_for(args, kwargs).info.lowered

    def save(self, path: str | os.PathLike, *args: P.args, **kwargs: P.kwargs) -> None:
        """Write the program traced for these arguments' signature to `path`;
        fastlaunch.load(path) replays it in another process without this function."""
        from .saved import save_entry
        if kwargs:
            raise TypeError("save() takes example arguments positionally")
        entry = self._entry_for(args, {})
        save_entry(path, entry, self.backend, self._static)

    def _entry_for(self, args, kwargs, install=False):
        args, kwargs = self._bind(args, kwargs)
        call = args + ((kwargs,) if kwargs else ())
        enc = _core.encode(call, self._static)
        if enc is None or (self.backend.memory.crosses and self._reversed_leaf(call)):
            call, _, gens = self._normalize(call, contiguous=self.backend.memory.crosses)
            enc = _with_generators(_core.encode(call, self._static), gens)
        if enc is None:
            raise TypeError(f"{self.__name__}: these arguments cannot be passed to a "
                            f"compiled function")
        with self._lock:
            entry = self._find(enc, call) if self.replay else None
            if entry is not None and entry.info.symbolic is not None:
                entry = None          # a symbolic instance: lower/save/iterate trace its sizes
                install = False
            if entry is None:
                entry = self._trace(call, enc, bool(kwargs), install=install and self.replay)
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
        programs = self._program_bytes() if self.pickle_programs else []
        return (_rebuild, (fn, options, programs))

    def _program_bytes(self) -> list:
        """Each cached entry as saved-program bytes; entries a saved program cannot hold
        (namedtuple arguments, static values other than scalars and strings) are left to be
        traced again by the receiving process."""
        from .saved import dumps_entry
        out = []
        for entry in self._entries_list():
            if entry.info.symbolic is not None:
                continue            # a symbolic instance: the receiver derives it again
            try:
                out.append(dumps_entry(entry, self.backend, self._static))
            except TypeError:
                continue
        return out

    def _install_program(self, data: bytes) -> None:
        """Install an entry from saved-program bytes (verified as fastlaunch.load verifies a
        file) with the introspection record the slow path and `dis` read."""
        from . import saved
        from .pytree import TreeDef
        where = f"{self.__qualname__}: shipped program"
        meta, program, kernels, entry, plan = saved.loads_entry(data, self.backend.name, where)
        if tuple(meta["static_positions"]) != self._static:
            raise saved.SavedProgramError(f"{where}: static positions "
                                          f"{meta['static_positions']}, expected {self._static}")
        static_values = [saved._static_value(v) for v in meta["statics"]]
        leaves = saved._signature_specs(bytes.fromhex(meta["signature"]))
        lowered = Lowered(meta["graph"],
                          [(k.label, k.describe(), ck.source)
                           for k, ck in zip(plan.compiled_kernels(), kernels)],
                          program.disassemble(), plan, program)
        entry.info = _EntryInfo(
            leaves, lowered, kernels,
            [k if type(k) is str else tuple(k) for k in meta["keys"]],   # str: a const
            [_core.static_key(v) for v in static_values], static_values,
            [(ResultKind(kind), index, bool(scalar)) for kind, index, scalar in meta["results"]],
            TreeDef.from_json(meta["out_tree"]),
            {leaf: (lo, hi) for leaf, lo, hi in meta["int_bounds"]}, list(meta["leaf_names"]))
        with self._lock:
            self._install(entry)
            self.programs_loaded += 1

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
    dynamic: sizes (symbolic.py). None (default): the first call of a size class is traced for
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
        return Compiled(f, static_argnums=static_argnums, static_argnames=static_argnames,
                        backend=backend, replay=replay, seed=seed, max_entries=max_entries,
                        pickle_programs=pickle_programs, dynamic=dynamic)
    if fn is None:
        return wrap
    return wrap(fn)


# ---- helpers -----------------------------------------------------------------------------
def _static_positions(name, has_signature, param_names, varargs, nums, names) -> tuple:
    """The sorted static positions, with errors naming what is wrong."""
    nums = (nums,) if isinstance(nums, (int, np.integer)) else nums
    names = (names,) if isinstance(names, str) else names
    try:
        nums, names = tuple(nums), tuple(names)
    except TypeError:
        raise TypeError(f"fastlaunch.compile: static_argnums must be an int or a sequence of "
                        f"ints and static_argnames a str or a sequence of str; got "
                        f"{nums!r:.60} and {names!r:.60}") from None
    positions = set()
    for n in nums:
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"fastlaunch.compile: static_argnums holds {n!r:.60}; expected "
                            f"integer positions")
        n = int(n)
        where = (f"{name} has {len(param_names)} positional parameter"
                 f"{'' if len(param_names) == 1 else 's'} ({', '.join(param_names)})")
        if n < 0:
            if not param_names or -n > len(param_names):
                raise ValueError(f"static_argnums={n} does not name a positional parameter: "
                                 f"{where}")
            n += len(param_names)
        elif has_signature and not varargs and n >= len(param_names):
            raise ValueError(f"static_argnums={n} is out of range: {where}")
        positions.add(n)
    for arg in names:
        if not isinstance(arg, str):
            raise TypeError(f"fastlaunch.compile: static_argnames holds {arg!r:.60}; expected "
                            f"parameter names")
        if arg not in param_names:
            raise ValueError(f"static_argnames: {name} has no positional parameter named "
                             f"{arg!r}")
        positions.add(param_names.index(arg))
    return tuple(sorted(positions))


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


def _rebuild(fn, options, programs=()):
    """Unpickle: a compiled function with the same options (and the shipped entries).

    The same pickled bytes unpickled again in this process give the same object, as a
    function pickled by reference would: a worker that receives the function with every task
    (a process pool's map, Dask) traces each signature once, not once per task.  A pool
    drops each task's arguments once it ran, so the KEEP_REBUILT most recently unpickled
    functions are held here (the others while something else holds them)."""
    kind, payload = fn
    key = None
    if kind == "cloudpickle":
        key = (payload, tuple(sorted(options.items())), tuple(programs))
        with _REBUILT_LOCK:
            found = _REBUILT.get(key)
            if found is not None:
                _keep_rebuilt(key, found)
                return found
        payload = pickle.loads(payload)
    compiled = Compiled(payload, **options)
    for data in programs:
        compiled._install_program(data)
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


def _foreign_device_array(leaf) -> bool:
    """Another library's CUDA array.  The instance decides: torch.Tensor has the attribute on
    its class, but a CPU tensor raises when asked for it."""
    if isinstance(leaf, (np.ndarray, _core.DeviceArray)) or \
            not hasattr(type(leaf), "__cuda_array_interface__"):
        return False
    try:
        leaf.__cuda_array_interface__  # noqa: B018  (asked for: a CPU tensor raises)
    except Exception:                 # noqa: BLE001  (AttributeError, RuntimeError, ...)
        return False
    return True


_STATIC_HINT = (". Other objects (a method's `self`, a config object) can be passed as static "
                "arguments: static_argnums= / static_argnames= (hashable; their value is part "
                "of the signature, and what fn reads from them is fixed when it is traced)")


def _describe_leaf(name: str, leaf, backend=None) -> LeafSpec:
    if type(leaf) is _core.DeviceArray:
        ops.check_dtype(leaf.dtype, name)
        if backend is not None and leaf.device != backend.name:
            raise TypeError(f"{name}: a DeviceArray in {leaf.device} memory cannot be passed to "
                            f"a function compiled for backend {backend.name!r}")
        if any(st % leaf.itemsize for st in leaf.strides):
            raise TypeError(f"{name}: DeviceArray strides {leaf.strides} are not multiples of "
                            f"its itemsize")
        return LeafSpec.array(leaf.dtype, leaf.shape,
                              tuple(st // leaf.itemsize for st in leaf.strides),
                              Space.SPACE_DEVICE)
    if isinstance(leaf, np.ndarray):
        ops.check_dtype(leaf.dtype, name)
        return LeafSpec.array(leaf.dtype, leaf.shape, _element_strides(leaf))
    if type(leaf) is bool:
        return LeafSpec.scalar(np.bool_, bool)
    if type(leaf) is int:
        return LeafSpec.scalar(np.int64 if leaf < 2**63 else np.uint64, int)
    if type(leaf) is float:
        return LeafSpec.scalar(np.float64, float)
    if isinstance(leaf, np.generic):
        ops.check_dtype(leaf.dtype, name)
        return LeafSpec.scalar(leaf.dtype)
    raise TypeError(f"{name}: expected a NumPy array, a Python or NumPy scalar, or a "
                    f"tuple/list/dict of them; got {type(leaf).__name__}{_STATIC_HINT}")


# ndarray attributes that a subclass may redefine without changing what operations compute
_HARMLESS = {"__init__", "__new__", "__repr__", "__str__", "__format__", "__array_finalize__",
             "__reduce__", "__reduce_ex__", "__setstate__", "__class_getitem__", "__dir__",
             "__init_subclass__", "__subclasshook__", "__sizeof__", "__doc__", "__module__",
             "__dict__", "__weakref__", "__copy__", "__deepcopy__", "__getstate__", "dump",
             "dumps", "tofile", "tolist", "tobytes", "tostring", "__dlpack__",
             "__dlpack_device__", "__array_interface__", "__array_struct__", "__hash__",
             "__slots__", "__annotations__", "__qualname__", "__array_priority__"}
_SUBCLASS_VERDICT: dict = {}


def _subclass_overrides(cls) -> list:
    """The ndarray methods and operators a subclass redefines (np.matrix's `*`, a masked
    array's reductions and ufunc hooks): computing them as plain arrays would be wrong."""
    found = _SUBCLASS_VERDICT.get(cls)
    if found is None:
        found = [name for name in dir(np.ndarray) if name not in _HARMLESS
                 and getattr(cls, name, None) is not getattr(np.ndarray, name)]
        _SUBCLASS_VERDICT[cls] = found
    return found


_DLPACK_CPU = 1            # DLDeviceType kDLCPU
_NOT_FOREIGN = (np.ndarray, np.generic, _core.DeviceArray, np.random.Generator, bool, int, float,
                complex, str, bytes, type(None))


def _foreign_view(name: str, leaf):
    """A CPU array of another library as a NumPy view of its memory (never a copy), through
    DLPack (PyTorch, JAX, CuPy-style host arrays), the array interface, or the buffer protocol
    (memoryview, array.array, bytearray); anything else unchanged.  bytes and str stay what
    NumPy makes of them, scalars, and are refused later."""
    if isinstance(leaf, _NOT_FOREIGN):
        return leaf
    cls = type(leaf)
    if hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__"):
        try:
            device = leaf.__dlpack_device__()
        except Exception as err:                          # noqa: BLE001  (the producer's own)
            raise TypeError(f"{name}: {cls.__name__}.__dlpack_device__() failed: {err}") from None
        if int(device[0]) != _DLPACK_CPU:
            raise TypeError(f"{name}: a {cls.__name__} on device {tuple(device)}; fastlaunch "
                            f"computes on the CPU: pass a CPU array (for PyTorch, x.cpu())")
        try:
            return np.from_dlpack(leaf)
        except (BufferError, TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"{name}: {cls.__name__} cannot be shared with NumPy through "
                            f"DLPack without a copy ({err}); pass np.asarray(x) for a copy") \
                from None
    if hasattr(leaf, "__array_interface__") or hasattr(leaf, "__array_struct__"):
        view = np.asarray(leaf)
        if isinstance(view, np.ndarray) and view.dtype != object:
            return view
        return leaf
    try:
        memoryview(leaf).release()
    except TypeError:
        return leaf
    return np.asarray(memoryview(leaf))


def _normalize_leaf(name: str, leaf):
    if type(leaf) is _core.DeviceArray:
        return leaf
    if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray:
        overrides = _subclass_overrides(type(leaf))
        if overrides:
            raise TypeError(
                f"{name}: {type(leaf).__module__}.{type(leaf).__name__} is an ndarray subclass "
                f"that redefines {', '.join(overrides[:4])}{', ...' if len(overrides) > 4 else ''}"
                f"; fastlaunch computes with plain NumPy semantics, which would differ. Pass "
                f"np.asarray(x) if plain array semantics are what you want")
        leaf = leaf.view(np.ndarray)          # same memory: in-place updates reach the caller
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.kind in "OSUVMm":
            ops.check_dtype(leaf.dtype, name)
        if not leaf.dtype.isnative or not leaf.flags.aligned or any(
                s % leaf.dtype.itemsize for s in leaf.strides):
            return np.array(leaf, dtype=leaf.dtype.newbyteorder("="), order="C", copy=True)
        return leaf
    if type(leaf) is int and not -2**63 <= leaf < 2**64:
        raise OverflowError(f"{name}: Python integer {leaf} does not fit in int64 or uint64")
    if isinstance(leaf, (bool, int, float, np.generic)) and not isinstance(leaf, complex):
        if isinstance(leaf, np.generic):
            ops.check_dtype(leaf.dtype, name)
        return leaf
    if isinstance(leaf, complex):
        raise TypeError(f"{name}: complex numbers are not supported")
    raise TypeError(f"{name}: expected a NumPy array, a Python or NumPy scalar, or a "
                    f"tuple/list/dict of them; got {type(leaf).__name__}{_STATIC_HINT}")


def _self_overlapping(arr: np.ndarray) -> bool:
    """Whether two elements of `arr` may share memory: false when, taking the axes by
    increasing |stride|, each stride steps past everything the smaller axes reach (the
    layout of every array NumPy allocates, and of its basic-indexing views).  An empty
    array has no elements to share (NumPy gives some, copies of empty ones, zero strides)."""
    if arr.size == 0:
        return False
    reach = 0
    for n, st in sorted(((n, abs(st)) for n, st in zip(arr.shape, arr.strides) if n > 1),
                        key=lambda t: t[1]):
        if st < reach + arr.itemsize:
            return True
        reach += st * (n - 1)
    return False


def _element_strides(arr: np.ndarray) -> tuple:
    return tuple(s // arr.dtype.itemsize for s in arr.strides)


def _leaf_text(leaf: LeafSpec) -> str:
    return leaf.text()


def _signature_text(leaves) -> str:
    return "(" + ", ".join(_leaf_text(d) for d in leaves) + ")"


def result_specs(outputs) -> list:
    """(ResultKind, index or value, as_scalar) per result leaf, as link takes them."""
    kinds = {"new": ResultKind.RESULT_NEW, "input": ResultKind.RESULT_INPUT,
             "value": ResultKind.RESULT_VALUE}
    return [(kinds[o[0]], o[1], bool(o[2]) if o[0] == "new" else False) for o in outputs]


_RNG_TYPES = (np.random.Generator, np.random.RandomState)


def _captured_generators(fn) -> list:
    """(name, generator, state) of each Generator/RandomState fn reads from its globals or its
    closure: drawing from one while tracing would freeze its numbers into the trace."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    found = []
    globs = getattr(fn, "__globals__", {})
    for name in code.co_names:
        value = globs.get(name)
        if isinstance(value, _RNG_TYPES):
            found.append((f"the global {name!r}", value, _rng_state(value)))
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, _RNG_TYPES):
            found.append((f"{name!r} (from the enclosing function)", value, _rng_state(value)))
    return found


def _rng_state(gen):
    return gen.bit_generator.state if isinstance(gen, np.random.Generator) else gen.get_state()


def _same_state(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _with_generators(enc, gens):
    """The encoding of a call whose Generator leaves became uint64 keys: the keys list says
    which, so that such an entry never matches a call passing plain integers there."""
    if enc is None or not gens:
        return enc
    sig, leaves, keys, statics = enc
    return sig, leaves, keys + [("numpy.random.Generator", tuple(sorted(gens)))], statics


def _stand_in(x: np.ndarray) -> np.ndarray:
    """An array with x's dtype, shape and strides over memory of its own (never written)."""
    lo = sum(min(0, (n - 1) * st) for n, st in zip(x.shape, x.strides) if n)
    hi = sum(max(0, (n - 1) * st) for n, st in zip(x.shape, x.strides) if n) + x.itemsize
    if x.size == 0:
        return np.empty_like(x)
    base = np.empty((hi - lo + x.itemsize - 1) // x.itemsize, x.dtype)
    return np.lib.stride_tricks.as_strided(base[(-lo) // x.itemsize:], x.shape, x.strides)



def _overlap_groups(leaves, spans: bool = False) -> list:
    """The array leaves that overlap in memory, in groups (transitively): lists of leaf
    positions, each in order, each of two or more.  spans: leaves whose byte spans meet
    overlap too (x[::2] and x[1::2]): a crossing backend copies each span whole."""
    arrays = [(k, x) for k, x in enumerate(leaves) if isinstance(x, np.ndarray) and x.size]
    parent = {k: k for k, _ in arrays}

    def root(k):
        while parent[k] != k:
            k = parent[k]
        return k
    for a, (k, x) in enumerate(arrays):
        for k2, y in arrays[a + 1:]:
            if root(k) != root(k2) and (np.shares_memory(x, y) or
                                        spans and _spans_meet(x, y)):
                parent[max(root(k), root(k2))] = min(root(k), root(k2))
    groups: dict = {}
    for k, _ in arrays:
        groups.setdefault(root(k), []).append(k)
    return [g for g in groups.values() if len(g) > 1]


def _spans_meet(x: np.ndarray, y: np.ndarray) -> bool:
    bounds = getattr(np.lib, "array_utils", np).byte_bounds
    (a0, a1), (b0, b1) = bounds(x), bounds(y)
    return a0 < b1 and b0 < a1


@dataclass(frozen=True)
class _MemberView:
    """One member of an overlapping group, as a view of the group's 1-D span (`base`):
    `offset`, `shape` and `strides` in elements of base.  `of(t)` builds it from base's
    tracer out of the views the tracer writes through: the member's dims of size > 1, sorted
    by |stride| (s1 > s2 > ... > sk, each a multiple of the next), are a slice of base with
    step sk from `offset - sum(cuts[j] * s[j+1])`, reshaped (C order) to (n1, s1/s2, ...,
    s(k-1)/sk) and cut to [cuts[j], cuts[j] + n(j+1)) along the inner dims; then put back in
    the member's order, reversed where its stride is negative, with its size-1 dims."""
    offset: int
    shape: tuple
    strides: tuple
    cuts: tuple = ()

    def _plan(self):
        dims = [(s, n, d) for d, (n, s) in enumerate(zip(self.shape, self.strides)) if n > 1]
        start = self.offset + sum((n - 1) * s for s, n, _ in dims if s < 0)
        flips = {d for s, _, d in dims if s < 0}
        walk = sorted(((abs(s), n, d) for s, n, d in dims), key=lambda x: -x[0])
        return start, flips, walk

    def chunk(self, room: int):
        """(cuts, first, end): the inner-dim cuts that start the reshaped slice as early as
        `room` elements before base allows (so that it reaches as little past the member's
        last element as it can), and the slice's element range [first, end) in base; None
        when the member is no such view (a stride of 0, or dims that do not nest: elements
        of its own that overlap, or rows that interleave)."""
        start, _, walk = self._plan()
        if not walk:
            return (), start, start + 1
        if any(s == 0 for s, _, _ in walk):
            return None
        for (s1, _, _), (s2, n2, _) in zip(walk, walk[1:]):
            if s1 % s2 or s1 < n2 * s2:
                return None
        cuts, left = [], start + room
        for (s1, _, _), (s2, n2, _) in zip(walk, walk[1:]):
            c = min((s1 - n2 * s2) // s2, left // s2)
            cuts.append(c)
            left -= c * s2
        first = start - sum(c * s2 for c, (s2, _, _) in zip(cuts, walk[1:]))
        return tuple(cuts), first, first + walk[0][1] * walk[0][0] - walk[-1][0] + 1

    def of(self, base):
        start, flips, walk = self._plan()
        if not walk:
            return base[start:start + 1].reshape(self.shape)
        s1, n1, _ = walk[0]
        inner = walk[-1][0]
        first = start - sum(c * s2 for c, (s2, _, _) in zip(self.cuts, walk[1:]))
        v = base[first:first + n1 * s1:inner]
        if len(walk) > 1:
            v = v.reshape((n1,) + tuple(a // b for (a, _, _), (b, _, _) in zip(walk, walk[1:])))
            v = v[(slice(None),) + tuple(slice(c, c + n) for c, (_, n, _) in
                                         zip(self.cuts, walk[1:]))]
            order = [d for _, _, d in walk]
            v = v.transpose(sorted(range(len(order)), key=lambda i: order[i]))
        if flips:
            v = v[tuple(slice(None, None, -1) if d in flips else slice(None)
                        for d in sorted(d for _, _, d in walk))]
        return v.reshape(self.shape)


def _owner_bounds(x: np.ndarray):
    """The byte range of the memory x is a view of, where it is known to be one block (the
    deepest ndarray in its .base chain, if contiguous); else None."""
    while isinstance(x.base, np.ndarray):
        x = x.base
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        return None
    bounds = getattr(np.lib, "array_utils", np).byte_bounds
    return bounds(x)


def _group_layout(xs: list):
    """(span, members) for a group of overlapping arrays: `span` a 1-D view of the memory
    they cover, `members` each one's _MemberView over it; or a string saying why there is
    none.  The span is the range the arrays touch, widened where a member's reshaped slice
    needs memory around it (a block of columns reads whole rows): only inside the memory of
    the array they come from."""
    dt = xs[0].dtype
    if any(x.dtype != dt for x in xs):
        return ("they have different dtypes (" + ", ".join(str(x.dtype) for x in xs) +
                "), so one element of one is not one element of the other")
    isz = dt.itemsize
    bounds = []
    for x in xs:
        ptr = x.__array_interface__["data"][0]
        lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides))
        hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides)) + isz
        bounds.append((ptr, lo, hi))
    low = min(lo for _, lo, _ in bounds)
    high = max(hi for _, _, hi in bounds)
    members = []
    for x, (ptr, _, _) in zip(xs, bounds):
        steps = tuple(s if n > 1 else 0 for n, s in zip(x.shape, x.strides))
        if (ptr - low) % isz or any(s % isz for s in steps):
            return ("their offsets or strides are not whole elements of " + str(dt) +
                    " apart (views made with .view() or as_strided)")
        members.append(_MemberView((ptr - low) // isz, x.shape, tuple(s // isz for s in steps)))
    owner = _owner_bounds(xs[0])
    room = (low - owner[0]) // isz if owner is not None and owner[0] <= low else 0
    chunks = [m.chunk(room) for m in members]
    if None in chunks:
        return ("one of them is a view whose own elements overlap or interleave (a stride of "
                "0 or an as_strided window), which fastlaunch cannot write through")
    first = min(0, min(f for _, f, _ in chunks))             # elements before `low`
    end = max((high - low) // isz, max(e for _, _, e in chunks))
    if low + end * isz > high and (owner is None or low + end * isz > owner[1]):
        return ("the views' rows cannot be reached inside the memory of the array they "
                "come from")
    members = [_MemberView(m.offset - first, m.shape, m.strides, c)
               for m, (c, _, _) in zip(members, chunks)]
    # the span starts where the lowest member starts once its negative strides are reversed
    x = min(zip(xs, bounds), key=lambda t: t[1][1])[0]
    x = x[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in x.strides)]
    if first:
        # earlier memory of the owner: a view of it from the owner's own start
        o = x
        while isinstance(o.base, np.ndarray):
            o = o.base
        o = o.reshape(-1, order="A").view(np.uint8)
        at = low + first * isz - owner[0]
        o = o[at:at + (end - first) * isz]
        span = o.view(dt) if o.flags.writeable == x.flags.writeable else \
            np.lib.stride_tricks.as_strided(o.view(dt), writeable=False)
        return span, members
    span = np.lib.stride_tricks.as_strided(x, (end - first,), (isz,),
                                           writeable=x.flags.writeable)
    return span, members


def _same_view(x: np.ndarray, y: np.ndarray) -> bool:
    return (x.__array_interface__["data"][0] == y.__array_interface__["data"][0]
            and x.shape == y.shape and x.strides == y.strides and x.dtype == y.dtype)


def _array_attributes(value) -> list:
    """Names of the NumPy-array attributes of an object (a static argument's), if any."""
    try:
        attrs = vars(value)
    except TypeError:
        return []
    return [k for k, v in attrs.items() if isinstance(v, np.ndarray)][:5]


def _generator_leaves(keys) -> set:
    for k in keys:
        if type(k) is tuple and k and k[0] == "numpy.random.Generator":
            return set(k[1])
    return set()


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
        return ", ".join(_path_text(p) for p in self.paths)


def _path_text(path) -> str:
    head = f"argument {path[1]}" if path[0] == 0 else f"keyword argument {path[1]!r}"
    return head + "".join(repr(k) if isinstance(k, Attr) else f"[{k!r}]" for k in path[2:])


def _log_trace(name, reason, lowered, kernels, seconds):
    lines = [f"[fastlaunch] traced {name} ({reason}) in {seconds * 1e3:.1f} ms: "
             f"{len(kernels)} kernels"]
    for (label, _, _), k in zip(lowered.kernels, kernels):
        lines.append(f"[fastlaunch]   {k.name} {label}: {k.origin}, {k.seconds * 1e3:.2f} ms")
    print("\n".join(lines), file=sys.stderr)
