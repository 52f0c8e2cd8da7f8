"""The CPU backend: LLVM IR text -> machine code with llvmlite (MCJIT), cached in memory and on disk.

Kernels are optimised with the new pass manager at O3 for the host CPU (its name and feature
string, so AVX2/AVX-512 code comes out) and emitted as object code.  The object code is what
the disk cache stores and what one long-lived MCJIT engine loads.  Math functions are called
through `fastlaunch_<name>` aliases of libm, annotated with their glibc libmvec vector
variants, so that LLVM's loop vectoriser calls e.g. `_ZGVdN8v_expf` eight lanes at a time.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
import time

import llvmlite
import llvmlite.binding as llvm

from .._version import __version__
from ..cache import DiskCache, default_cache_dir, kernel_key
from ..codegen.llvm import (MATH_ALIAS_PREFIX, MATH_FUNCTIONS, PLACEHOLDER_NAME, MathTarget,
                            generate)
from ..kernel import Kernel
from . import cpu_schedule
from .base import HOST_MEMORY, CompiledKernel

log = logging.getLogger("fastlaunch")

OPT_LEVEL = 3


def _host_features() -> str:
    return llvm.get_host_cpu_features().flatten()


def _load_math(features: str) -> MathTarget:
    """Register the scalar aliases and find which libmvec variants this process can call."""
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)
    for cname in set(MATH_FUNCTIONS.values()):
        for suffix in ("", "f"):
            addr = llvm.address_of_symbol(cname + suffix)
            if addr:
                llvm.add_symbol(MATH_ALIAS_PREFIX + cname + suffix, addr)
    flags = set(features.split(","))
    wide = 512 if "+avx512f" in flags else 0
    if os.environ.get("FASTLAUNCH_NO_LIBMVEC"):
        return MathTarget(vector_bits=wide)
    try:
        llvm.load_library_permanently("libmvec.so.1")
    except RuntimeError:
        return MathTarget(vector_bits=wide)
    isas = []
    if "+sse4.1" in flags or "+sse2" in flags:
        isas.append(("b", 128))
    if "+avx2" in flags:
        isas.append(("d", 256))
    if "+avx512f" in flags:
        isas.append(("e", 512))
    available = set()
    for cname in set(MATH_FUNCTIONS.values()):
        for arity in (1, 2):
            for suffix, lane_bits in (("f", 32), ("", 64)):
                for letter, bits in isas:
                    name = f"_ZGV{letter}N{bits // lane_bits}{'v' * arity}_{cname}{suffix}"
                    if llvm.address_of_symbol(name):
                        available.add(name)
    return MathTarget(tuple(isas), frozenset(available), wide)


class CPUBackend:
    name = "cpu"
    memory = HOST_MEMORY         # kernels read and write the caller's arrays directly

    def __init__(self, cache_dir: str | None = ...):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.cpu_name = llvm.get_host_cpu_name()
        self.features = _host_features()
        self.triple = llvm.get_process_triple()
        self._target = llvm.Target.from_triple(self.triple)
        self._tm = self._machine()
        # the engine owns its own target machine and its (empty) first module
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._machine())
        self.math = _load_math(self.features)
        self.target_key = "|".join([
            f"fastlaunch={__version__}", f"llvmlite={llvmlite.__version__}",
            "llvm=" + ".".join(map(str, llvm.llvm_version_info)), self.triple, self.cpu_name,
            self.features, f"O{OPT_LEVEL}"])
        self.disk = DiskCache(default_cache_dir() if cache_dir is ... else cache_dir)
        self._lock = threading.RLock()
        self._loaded: dict[str, CompiledKernel] = {}
        self.compile_count = 0      # kernels compiled by LLVM (not loaded from a cache)
        self.disk_loads = 0

    def _machine(self):
        return self._target.create_target_machine(cpu=self.cpu_name, features=self.features,
                                                  opt=OPT_LEVEL, jit=True)

    # ---- the backend interface ---------------------------------------------------------
    def schedule(self, plan):
        return cpu_schedule.schedule(plan)

    def schedule_kernel(self, kernel: Kernel) -> Kernel:
        return cpu_schedule.schedule_kernel(kernel)

    def link(self, program, kernels, call):
        from ..link import host_executable
        return host_executable(program, kernels, call)

    def source(self, kernel: Kernel) -> str:
        return generate(kernel, self.math)

    def compile(self, kernel: Kernel) -> CompiledKernel:
        return self.compile_source(generate(kernel, self.math), kernel.label)

    def compile_source(self, text: str, label: str = "") -> CompiledKernel:
        """Kernel source with the placeholder entry name -> loaded kernel (memory cache, then
        disk cache, then LLVM)."""
        key = kernel_key(text, self.target_key)
        name = "fl_" + key[:32]
        with self._lock:
            hit = self._loaded.get(key)
            if hit is not None:
                return CompiledKernel(hit.name, hit.address, hit.source, 0.0, "memory", key, hit.obj)
            source = text.replace(PLACEHOLDER_NAME, name)
            t0 = time.perf_counter()
            obj = self.disk.get(key)
            origin = "disk"
            if obj is None:
                obj = self.object_code(source)
                self.disk.put(key, obj)
                origin = "compiled"
                self.compile_count += 1
            else:
                self.disk_loads += 1
            address = self._load(obj, name)
            seconds = time.perf_counter() - t0
            compiled = CompiledKernel(name, address, source, seconds, origin, key, obj)
            self._loaded[key] = compiled
            log.debug("kernel %s (%s): %s in %.2f ms", name, label, origin, seconds * 1e3)
            return compiled

    def load_object(self, text: str, obj: bytes, target_key: str) -> CompiledKernel:
        """A kernel saved with its machine code: loaded as is when it was compiled for this
        very target, else compiled again from its source."""
        if target_key != self.target_key:
            return self.compile_source(text)
        key = kernel_key(text, self.target_key)
        name = "fl_" + key[:32]
        with self._lock:
            hit = self._loaded.get(key)
            if hit is None:
                source = text.replace(PLACEHOLDER_NAME, name)
                hit = CompiledKernel(name, self._load(obj, name), source, 0.0, "saved", key, obj)
                self._loaded[key] = hit
            return hit

    def kernel_text(self, compiled: CompiledKernel) -> str:
        """The placeholder-named source of a compiled kernel (what compile_source takes)."""
        return compiled.source.replace(compiled.name, PLACEHOLDER_NAME)

    # ---- compilation -------------------------------------------------------------------
    def optimized_module(self, source: str):
        mod = llvm.parse_assembly(source)
        mod.triple = self.triple
        mod.data_layout = str(self._tm.target_data)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(self._tm, pto)
        pb.getModulePassManager().run(mod, pb)
        return mod

    def object_code(self, source: str) -> bytes:
        return self._tm.emit_object(self.optimized_module(source))

    def assembly(self, kernel: Kernel) -> str:
        """The optimised machine code of a kernel, as assembly text (for tests and dis)."""
        source = generate(kernel, self.math).replace(PLACEHOLDER_NAME, "fl_kernel")
        return self._tm.emit_assembly(self.optimized_module(source))

    def _load(self, obj: bytes, name: str) -> int:
        self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()
        address = self._engine.get_function_address(name)
        if not address:
            raise RuntimeError(f"fastlaunch: kernel {name} did not load")
        return address
