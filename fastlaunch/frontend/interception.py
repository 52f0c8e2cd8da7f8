"""Attributes of other libraries (numpy's creation functions, np.random, as_strided, SciPy's
linalg and stats) replaced by trace-aware entry points, for tracing threads only.

While any thread traces, the entry points are in place, and only a thread that traces
(`trace.tracing()`) sees them; every other thread sees the libraries as they are, identity
and pickling included:

- A module's attributes: the module's class becomes, for the time being, a subclass of its
  own class whose `__getattribute__` hands a tracing thread the entry point; other threads
  get the attribute itself (`np.zeros is` the builtin, `pickle.dumps(np.zeros)` works).  The
  module's `__dict__` is never touched.
- A class's methods (scipy.stats's `norm.pdf`, ...): a descriptor on the class that binds the
  entry point in a tracing thread and the original method (found along the MRO) elsewhere.
- Names the traced function's own module imported by name (`from numpy import zeros`) are
  replaced in that module's namespace (globals are read without any hook) by a `StandIn`:
  it calls the original in any thread that does not trace, and pickles and copies as the
  original (by module and name).  This is the one difference other threads can see: such a
  name of that module is not the original object (`is`) while a trace runs.  It is given
  back unless the module rebound it meanwhile.

The replacement is reference counted (made when the first trace starts, undone when the last
ends), the uses counted per thread: a forked child keeps only its forking thread's uses
(forking.py), since the threads that made the others do not exist there.
"""
from __future__ import annotations

import contextlib
import importlib
import threading
import types
from typing import Callable, Iterable

from .. import forking
from .trace import tracing

_ABSENT = object()


class StandIn:
    """An entry point put where every thread can see it (a module's namespace): calls
    `entry`, which calls the original outside a tracing thread; pickles as the original,
    and copy leaves it as it is, as it leaves functions."""

    def __init__(self, entry, original, module_name: str, attr: str):
        self._entry = entry
        self._home = (module_name, attr)
        self.__wrapped__ = original
        for name in ("__name__", "__qualname__", "__module__", "__doc__"):
            value = getattr(original, name, None)
            if value is not None:
                setattr(self, name, value)

    def __call__(self, *args, **kwargs):
        return self._entry(*args, **kwargs)

    def __reduce__(self):
        # getattr(importlib.import_module(module), attr): no reference to fastlaunch, and
        # the original wherever it is unpickled outside a trace
        return getattr, (_Module(self._home[0]), self._home[1])

    def __copy__(self):
        return self          # as copy treats functions

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return repr(self.__wrapped__)


class _Module:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self):
        return importlib.import_module, (self.name,)


class _Method:
    """A class attribute that is `entry` in tracing threads and `original` (a raw class
    attribute: a function, a classmethod, ...) in the others."""

    def __init__(self, entry, original):
        self.entry, self.original, self.__wrapped__ = entry, original, original

    def __get__(self, obj, owner=None):
        found = self.entry if tracing() else self.original
        get = getattr(type(found), "__get__", None)
        return found if get is None else get(found, obj, owner)


# ---- modules: a thread-aware class while entry points are in place ---------------------------
_MODULES_LOCK = forking.lock(forking.TABLE)
_modules: dict = {}      # id(module) -> [module, its own class, our class, {attr: entry}]


def _module_class(base: type, entries: dict) -> type:
    get = base.__getattribute__

    def __getattribute__(self, name):
        if name in entries and tracing():
            return entries[name]
        return get(self, name)
    return type(base.__name__, (base,), {"__getattribute__": __getattribute__,
                                         "__slots__": (), "__module__": base.__module__,
                                         "__qualname__": base.__qualname__})


def _add_module_entry(module, attr: str, entry) -> bool:
    """Show `entry` as module.attr to tracing threads; False where the module's class cannot
    be replaced (then the caller replaces the attribute itself)."""
    with _MODULES_LOCK:
        held = _modules.get(id(module))
        if held is None:
            base = type(module)
            entries: dict = {}
            try:
                cls = _module_class(base, entries)
                module.__class__ = cls
            except TypeError:
                return False
            held = _modules[id(module)] = [module, base, cls, entries]
        held[3][attr] = entry
        return True


def _remove_module_entry(module, attr: str) -> None:
    with _MODULES_LOCK:
        held = _modules.get(id(module))
        if held is None:
            return
        held[3].pop(attr, None)
        if not held[3]:
            del _modules[id(module)]
            if type(module) is held[2]:          # not replaced by someone else since
                module.__class__ = held[1]


class Interception:
    def __init__(self, entries: Callable[[], Iterable[tuple]]):
        """entries(): (target, attribute, entry point) triples, made on each first use (the
        entry points close over the originals they find then).  A target is a module or a
        class; an attribute the target does not have itself (a method it inherits) is
        deleted again afterwards."""
        self._entries = entries
        self._lock = forking.lock(forking.TABLE)
        self._users = 0
        self._uses: dict = {}           # thread ident -> the namespaces of its uses (or None)
        self._swapped: list = []        # (target, attribute, how, original or _ABSENT)
        self._by_original: dict = {}    # id(original module function) -> (original, StandIn)
        self._namespaces: dict = {}     # id(namespace) -> [namespace, users, {name: (orig, s)}]
        forking.after_in_child(self._after_fork_in_child)

    @contextlib.contextmanager
    def active(self, namespace: dict | None = None):
        """While this block runs the entry points are in place; also in `namespace`."""
        with self._lock:
            if self._users == 0:
                self._install()
            try:
                self._patch(namespace)
            except BaseException:
                if self._users == 0:
                    self._uninstall()
                raise
            self._users += 1
            self._uses.setdefault(threading.get_ident(), []).append(namespace)
        try:
            yield
        finally:
            with self._lock:
                uses = self._uses.get(threading.get_ident(), [])
                at = next((i for i, ns in enumerate(uses) if ns is namespace), None)
                if at is not None:
                    del uses[at]
                    if not uses:
                        del self._uses[threading.get_ident()]
                self._release(namespace)

    def _release(self, namespace) -> None:
        self._unpatch(namespace)
        self._users -= 1
        if self._users == 0:
            self._uninstall()

    def _after_fork_in_child(self) -> None:
        # the uses of threads other than the forking one: their threads are gone
        with self._lock:
            me = threading.get_ident()
            gone = [ns for ident, uses in self._uses.items() if ident != me for ns in uses]
            self._uses = {me: self._uses[me]} if me in self._uses else {}
            for namespace in gone:
                self._release(namespace)

    def _install(self):
        try:
            for target, attr, entry in self._entries():
                original = vars(target).get(attr, _ABSENT)
                if isinstance(target, types.ModuleType):
                    if original is _ABSENT:
                        continue
                    stand_in = StandIn(entry, original, target.__name__, attr)
                    self._by_original[id(original)] = (original, stand_in)
                    if _add_module_entry(target, attr, entry):
                        self._swapped.append((target, attr, "module", original))
                    else:
                        setattr(target, attr, stand_in)
                        self._swapped.append((target, attr, "attribute", original))
                else:
                    raw = next((vars(k)[attr] for k in target.__mro__ if attr in vars(k)),
                               _ABSENT)
                    if raw is _ABSENT:
                        continue
                    self._swapped.append((target, attr, "attribute", original))
                    setattr(target, attr, _Method(entry, raw))
        except BaseException:
            self._uninstall()
            raise

    def _uninstall(self):
        while self._swapped:
            target, attr, how, original = self._swapped.pop()
            if how == "module":
                _remove_module_entry(target, attr)
            elif original is _ABSENT:
                delattr(target, attr)
            else:
                setattr(target, attr, original)
        self._by_original.clear()

    def _patch(self, ns):
        # never numpy's or our own modules: they must keep calling the originals
        if ns is None or str(ns.get("__name__", "")).split(".")[0] in ("numpy", "fastlaunch"):
            return
        held = self._namespaces.get(id(ns))
        if held is None:
            found = {key: self._by_original[id(value)] for key, value in list(ns.items())
                     if id(value) in self._by_original
                     and self._by_original[id(value)][0] is value}
            held = [ns, 0, found]
            for key, (_, stand_in) in found.items():
                ns[key] = stand_in
            self._namespaces[id(ns)] = held
        held[1] += 1

    def _unpatch(self, ns):
        held = self._namespaces.get(id(ns)) if ns is not None else None
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del self._namespaces[id(ns)]
            for key, (original, stand_in) in held[2].items():
                if ns.get(key) is stand_in:          # not rebound since
                    ns[key] = original
