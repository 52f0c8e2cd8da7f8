"""The test-only device-space backend: the CPU's kernels, run on a simulated device memory.

Its memory model puts every kernel buffer in the device space, so the recorder emits the
TO_DEVICE / TO_HOST copies a GPU backend needs, the verifier checks them, and the executable
(_devsim.pyx, a separate extension module that cimports _core's executable interface) runs
them on a separate allocator.  The results are real: this is the CPU backend behind a device
boundary, which is how the device paths of the pipeline are tested without a GPU.
"""
from __future__ import annotations

import dataclasses

from .._launch import Space
from ..ir.kernel import Kernel
from . import cpu_schedule
from .base import CompiledKernel, MemoryModel


class DevSimBackend:
    name = "devsim"
    memory = MemoryModel(kernel_space=Space.SPACE_DEVICE)

    def __init__(self, host):
        self.host = host                 # compiles the kernels (and keeps its caches)
        self.target_key = "devsim|" + host.target_key

    @property
    def compile_count(self) -> int:
        return self.host.compile_count

    def schedule(self, plan):
        return cpu_schedule.schedule(plan)

    def schedule_kernel(self, kernel: Kernel, saved: dict | None = None) -> Kernel:
        return cpu_schedule.schedule_kernel(kernel, saved)

    def source(self, kernel: Kernel) -> str:
        return self.host.source(kernel)

    def compile(self, kernel: Kernel) -> CompiledKernel:
        return self.host.compile(kernel)

    def load_object(self, text: str, obj: bytes, target_key: str) -> CompiledKernel:
        prefix = "devsim|"
        host_key = target_key[len(prefix):] if target_key.startswith(prefix) else ""
        return self.host.load_object(text, obj, host_key)

    def kernel_text(self, compiled: CompiledKernel) -> str:
        return self.host.kernel_text(compiled)

    def release(self) -> int:
        return self.host.release()

    def to_device(self, arr):
        """A DeviceArray with a copy of `arr` in simulated device memory."""
        from .. import _devsim
        return _devsim.to_device(arr)

    def link(self, layout, kernels):
        from .. import _devsim
        program = layout.program
        consts = [_devsim.DeviceBuffer.from_array(arr) for _, arr in program.consts]
        layout = dataclasses.replace(layout, const_ptrs=[c.address for c in consts],
                                     keepalive=(layout.keepalive, consts))
        # the kernels run serially on the simulated device: no work estimate is needed.
        # Library calls run the CPU's routines on the simulated device memory, standing in
        # for a device library (cuBLAS) that works on device buffers: no copy to the host.
        from .library import routine_addresses
        return _devsim.DevSimExecutable(layout, [k.address for k in kernels], consts,
                                        routine_addresses(program))
