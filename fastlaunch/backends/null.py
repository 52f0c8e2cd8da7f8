"""The null backend: the whole pipeline, but every kernel is a function that does nothing.

Structure tests use it to check tracing, fusion and bytecode without compiling anything;
the outputs it returns are allocated but never written.
"""
from __future__ import annotations

from .. import _core
from ..kernel import Kernel
from . import CompiledKernel


class NullBackend:
    name = "null"

    def __init__(self):
        self.compile_count = 0
        self._address = _core.null_kernel_address()

    def source(self, kernel: Kernel) -> str:
        return kernel.describe()

    def compile(self, kernel: Kernel) -> CompiledKernel:
        self.compile_count += 1
        return CompiledKernel(f"null_{self.compile_count}", self._address, self.source(kernel),
                              0.0, "compiled")
