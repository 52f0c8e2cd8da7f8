"""Attributes of other libraries (numpy's creation functions, np.random, as_strided, SciPy's
linalg and stats) swapped for trace-aware entry points while any thread traces.

An entry point calls its original except in a tracing thread (each decides when it takes
over), so other threads see no difference while the swap lasts.  The swap is reference
counted: made when the first trace starts, undone when the last one ends.  Names a traced
function's module imported by name (`from numpy import zeros`) are swapped too, per module,
and given back unless the module rebound them meanwhile."""
from __future__ import annotations

import contextlib
import types
from typing import Callable, Iterable

from . import forking

_ABSENT = object()


class Interception:
    def __init__(self, entries: Callable[[], Iterable[tuple]]):
        """entries(): (target, attribute, entry point) triples, made on each first use (the
        entry points close over the originals they find then).  A target is a module or a
        class; an attribute the target does not have itself (a method it inherits) is
        deleted again afterwards."""
        self._entries = entries
        self._lock = forking.lock(forking.TABLE)
        self._users = 0
        self._swapped: list = []        # (target, attribute, original or _ABSENT)
        self._by_original: dict = {}    # id(original module function) -> (original, entry)
        self._namespaces: dict = {}     # id(namespace) -> [namespace, users, {name: original}]

    @contextlib.contextmanager
    def active(self, namespace: dict | None = None):
        """While this block runs the entry points are in place; also in `namespace`."""
        with self._lock:
            if self._users == 0:
                self._install()
            self._users += 1
            self._patch(namespace)
        try:
            yield
        finally:
            with self._lock:
                self._unpatch(namespace)
                self._users -= 1
                if self._users == 0:
                    self._uninstall()

    def _install(self):
        for target, attr, entry in self._entries():
            original = vars(target).get(attr, _ABSENT)
            self._swapped.append((target, attr, original))
            setattr(target, attr, entry)
            if isinstance(target, types.ModuleType) and original is not _ABSENT:
                self._by_original[id(original)] = (original, entry)

    def _uninstall(self):
        for target, attr, original in reversed(self._swapped):
            if original is _ABSENT:
                delattr(target, attr)
            else:
                setattr(target, attr, original)
        self._swapped.clear()
        self._by_original.clear()

    def _patch(self, ns):
        # never numpy's or our own modules: they must keep calling the originals
        if ns is None or str(ns.get("__name__", "")).split(".")[0] in ("numpy", "fastlaunch"):
            return
        held = self._namespaces.get(id(ns))
        if held is None:
            found = {key: value for key, value in list(ns.items())
                     if id(value) in self._by_original and self._by_original[id(value)][0] is value}
            for key, value in found.items():
                ns[key] = self._by_original[id(value)][1]
            held = self._namespaces[id(ns)] = [ns, 0, found]
        held[1] += 1

    def _unpatch(self, ns):
        held = self._namespaces.get(id(ns)) if ns is not None else None
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del self._namespaces[id(ns)]
            for key, original in held[2].items():
                if getattr(ns.get(key), "__wrapped__", None) is original:   # not rebound since
                    ns[key] = original
