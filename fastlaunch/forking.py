"""What a fork does to fastlaunch's Python-side locks (the C runtime's own: csrc/runtime.c).

fork() copies only the forking thread: a lock another thread held at that moment stays held
in the child for ever, and the child hangs on its first use.  Locks are made here, in one of
two kinds:

- `lock(level)`: taken by the forking thread before the fork, level by level (the order in
  which the code nests them: a backend's lock, then the pass builder's or the disk cache's,
  then short critical sections over shared tables, then llvmlite's own lock, which it holds
  around every call into LLVM), and released in the parent and in the child.  For the locks
  around work whose state the child must see whole: LLVM's (a module half optimised, an
  engine half made), the kernel caches'.  A fork waits for one kernel's compile at most.
- `trace_lock()`: a compiled function's, held for a whole trace and compile (seconds).  A
  fork does not wait for those: the child makes them new, except one the forking thread
  holds itself.  A trace another thread had under way simply never happened in the child:
  nothing of it was installed.

`after_in_child(fn)` runs fn in the child once the locks are usable (Interception forgets
the uses of threads that do not exist there).
"""
from __future__ import annotations

# logging first: its own fork handler, registered at its import, then runs after ours, so a
# thread that logs while holding a backend lock is not waiting for logging's lock while the
# forking thread waits for the backend's
import logging  # noqa: F401
import os
import threading
import weakref

BACKEND, INNER, TABLE, FACTORY, LLVM = range(5)    # levels, outermost first

_registry = threading.Lock()                 # guards the sets below, never held while waiting
_held: list = [weakref.WeakSet() for _ in range(LLVM + 1)]
_trace: "weakref.WeakSet" = weakref.WeakSet()
_child_calls: list = []
_taken: list = []                            # locks the forking thread holds for the fork


def lock(level: int) -> threading.RLock:
    """A lock the forking thread takes before a fork (see the module docstring)."""
    made = threading.RLock()
    hold(made, level)
    return made


def hold(existing, level: int) -> None:
    """Take `existing` (a lock made elsewhere: llvmlite's) before a fork, at `level`."""
    with _registry:
        _held[level].add(existing)


def trace_lock() -> threading.RLock:
    """A lock a child makes new unless its forking thread held it (see the docstring)."""
    made = threading.RLock()
    with _registry:
        _trace.add(made)
    return made


def after_in_child(fn) -> None:
    with _registry:
        _child_calls.append(fn)


def _before() -> None:
    with _registry:
        levels = [list(locks) for locks in _held]
    for locks in levels:
        for held in locks:
            held.acquire()               # releases the GIL while it waits
            _taken.append(held)


def _release_taken() -> None:
    while _taken:
        _taken.pop().release()


def _in_child() -> None:
    _registry._at_fork_reinit()
    _release_taken()
    for made in list(_trace):
        if not made._is_owned():
            made._at_fork_reinit()
    for fn in list(_child_calls):
        fn()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_release_taken,
                        after_in_child=_in_child)
