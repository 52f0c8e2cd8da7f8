"""The null backend: the whole pipeline and the whole backend interface, but every kernel is a
function that does nothing.

Structure tests use it to check tracing, fusion, scheduling, recording, verification and
linking without compiling anything; the outputs it returns are allocated but never written.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .. import _core
from ..ir.kernel import Kernel, is_kernel
from .._launch import Routine
from .base import HOST_MEMORY, CompiledKernel, derived_schedule


@dataclass(frozen=True)
class NullSchedule:
    """One launch index per point of the kernel's space, no tiling, no splitting."""
    launch_size: int

    @property
    def params(self) -> tuple:
        return (1,)                 # the host executable's work per launch index

    @property
    def saved(self) -> dict:
        return {}

    def describe(self) -> str:
        return f"n={self.launch_size}"


class NullBackend:
    name = "null"
    target_key = "null"
    memory = HOST_MEMORY

    def __init__(self):
        self.compile_count = 0
        self._address = _core.null_kernel_address()

    def schedule(self, plan):
        # library calls stay as they are: the null library routine does nothing
        return plan.with_kernels([self.schedule_kernel(k) if is_kernel(k) else k
                                  for k in plan.kernels])

    def schedule_kernel(self, kernel: Kernel, saved: dict | None = None) -> Kernel:
        """A scheduled copy of one fused kernel (the fused plan is never changed)."""
        derived_schedule(kernel, saved, "null")
        if kernel.schedule is not None:
            raise ValueError(f"kernel {kernel.label!r} is already scheduled")
        return replace(kernel, args=list(kernel.args), stores=list(kernel.stores),
                       checks=list(kernel.checks), schedule=NullSchedule(kernel.size))

    def source(self, kernel: Kernel) -> str:
        return kernel.describe()

    def compile(self, kernel: Kernel) -> CompiledKernel:
        return self.compile_source(self.source(kernel), kernel.label)

    def compile_source(self, text: str, label: str = "") -> CompiledKernel:
        self.compile_count += 1
        return CompiledKernel(f"null_{self.compile_count}", self._address, text, 0.0, "compiled")

    def load_object(self, text: str, obj: bytes, target_key: str) -> CompiledKernel:
        return self.compile_source(text)

    def kernel_text(self, compiled: CompiledKernel) -> str:
        return compiled.source

    def release(self) -> int:
        return 0                    # no code: every kernel is the one null function

    def link(self, layout, kernels):
        from .host import host_executable
        libs = [_core.null_library_address()] * int(Routine.LIB_COUNT) \
            if layout.program.library_routines() else []
        return host_executable(layout, kernels, libs)
