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

    target_key = "null"

    def compile(self, kernel: Kernel) -> CompiledKernel:
        return self.compile_source(self.source(kernel), kernel.label)

    def compile_source(self, text: str, label: str = "") -> CompiledKernel:
        self.compile_count += 1
        return CompiledKernel(f"null_{self.compile_count}", self._address, text, 0.0, "compiled")

    def load_object(self, text: str, obj: bytes, target_key: str) -> CompiledKernel:
        return self.compile_source(text)

    def kernel_text(self, compiled: CompiledKernel) -> str:
        return compiled.source
