"""LLVM's optimisation pipelines for the backends that compile LLVM IR (cpu, cuda).

One PassBuilder per backend and speed level, for the life of the process.  llvmlite (<= 0.50)
loses about 1.4 KB of native memory for every PassBuilder made, even when it is closed, so a
builder per kernel grew a long-running process without bound (issue 8: memory after many
shapes).  A ModulePassManager, on the other hand, cannot run twice (llvmlite's run consumes
its passes; a second run aborts the process), so each run builds a fresh one from the shared
builder and frees it.
"""
from __future__ import annotations

import threading

import llvmlite.binding as llvm


class Optimizer:
    """Runs pass pipelines over modules, one module at a time."""

    def __init__(self, target_machine, speed_level: int, vectorize: bool = False):
        self._pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
        if vectorize:
            self._pto.loop_vectorization = True
            self._pto.slp_vectorization = True
        self._pb = llvm.create_pass_builder(target_machine, self._pto)
        self._lock = threading.Lock()     # the builder is not safe to share between threads

    def default(self, mod) -> None:
        """LLVM's default per-module pipeline at this speed level."""
        with self._lock:
            _run(self._pb.getModulePassManager(), mod, self._pb)

    def passes(self, mod, add) -> None:
        """A pipeline of our own: `add(mpm)` adds the passes to a new manager."""
        with self._lock:
            mpm = llvm.create_new_module_pass_manager()
            add(mpm)
            _run(mpm, mod, self._pb)


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
