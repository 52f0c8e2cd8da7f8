"""LLVM's optimisation pipelines for the backends that compile LLVM IR (cpu, cuda).

A PassBuilder is shared by RECYCLE_AFTER runs, then replaced.  llvmlite (<= 0.50) loses about
1.4 KB of native memory for every PassBuilder made, even when it is closed, so a builder per
kernel grew a long-running process without bound (issue 8: memory after many shapes).  But a
builder kept for ever makes every run slower (each pipeline built from it leaves state behind:
16 ms a kernel at first, 43 ms after 1500), so it is renewed every RECYCLE_AFTER runs: the
leak is then ~45 bytes a kernel, and a run at most a few percent slower.  A ModulePassManager
cannot run twice (llvmlite's run consumes its passes; a second run aborts the process), so
each run builds a fresh one from the builder and frees it.
"""
from __future__ import annotations

import llvmlite.binding as llvm
from llvmlite.binding import ffi

from .. import forking

RECYCLE_AFTER = 32

# llvmlite holds a lock of its own around every call into LLVM: a fork while another thread
# (ours, or another library's: Numba's) is inside LLVM waits for that call to return
_LLVMLITE_LOCK = getattr(getattr(ffi.lib, "_lock", None), "_lock", None)
if hasattr(_LLVMLITE_LOCK, "acquire") and hasattr(_LLVMLITE_LOCK, "release"):
    forking.hold(_LLVMLITE_LOCK, forking.LLVM)


class Optimizer:
    """Runs pass pipelines over modules, one module at a time."""

    def __init__(self, target_machine, speed_level: int, vectorize: bool = False):
        self._tm = target_machine
        self._pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
        if vectorize:
            self._pto.loop_vectorization = True
            self._pto.slp_vectorization = True
        self._pb = None
        self._runs = 0
        self._lock = forking.lock(forking.INNER)   # the builder is not safe to share between threads

    def _builder(self):
        if self._pb is None or self._runs >= RECYCLE_AFTER:
            if self._pb is not None:
                self._pb.close()
            self._pb = llvm.create_pass_builder(self._tm, self._pto)
            self._runs = 0
        self._runs += 1
        return self._pb

    def default(self, mod) -> None:
        """LLVM's default per-module pipeline at this speed level."""
        with self._lock:
            pb = self._builder()
            _run(pb.getModulePassManager(), mod, pb)

    def passes(self, mod, add) -> None:
        """A pipeline of our own: `add(mpm)` adds the passes to a new manager."""
        with self._lock:
            pb = self._builder()
            mpm = llvm.create_new_module_pass_manager()
            add(mpm)
            _run(mpm, mod, pb)


def _run(mpm, mod, pb) -> None:
    try:
        mpm.run(mod, pb)
    finally:
        close_pass_manager(mpm)


def close_pass_manager(mpm) -> None:
    """Free a module pass manager.  llvmlite <= 0.50's ModulePassManager never frees its
    pipeline (~70 KB a kernel): ObjectRef's no-op _dispose comes first in its MRO, ahead of
    NewPassManager's.  Where that is so, call the right one; a fixed llvmlite closes it."""
    from llvmlite.binding.newpassmanagers import NewPassManager
    if type(mpm)._dispose is NewPassManager._dispose:
        mpm.close()
    else:
        NewPassManager._dispose(mpm)
        mpm.detach()
