"""The CPU backend: LLVM IR text -> machine code with llvmlite (MCJIT), cached in memory and on disk.

Kernels are optimised with the new pass manager at O3 for the host CPU (its name and feature
string, so AVX2/AVX-512 code comes out) and emitted as object code.  The object code is what
the disk cache stores.  Math functions are called through `fastlaunch_<name>` aliases of libm,
annotated with their glibc libmvec vector variants, so that LLVM's loop vectoriser calls e.g.
`_ZGVdN8v_expf` eight lanes at a time.

Loading.  MCJIT cannot unload code, so each kernel gets an engine of its own (KernelCode),
which is the `owner` of every CompiledKernel handed out for it: executables keep their
kernels' CompiledKernels, so an engine lives exactly as long as some executable may call into
it.  The in-memory kernel cache holds engines weakly, plus the most recently used few
strongly (so that replay=False, or a function compiled anew in a loop, does not reload every
call); dropped kernels come back from the disk cache.  An engine whose last user went is not
destroyed on the spot (that may happen in any thread, during garbage collection, while this
thread parses IR in the same LLVM context) but queued and disposed of under the backend's
lock, at the next compile or at `release()`.

Before an object is loaded, its undefined symbols (elf.py) are checked against what the JIT
resolves: an unresolved one would be called at address 0.  LLVM's float16 lowering calls
compiler-rt's conversion routines, which the process does not have: _core provides them.
"""
from __future__ import annotations

import collections
import ctypes
import ctypes.util
import dataclasses
import hashlib
import logging
import time
import weakref

import llvmlite
import llvmlite.binding as llvm

from .._version import __version__
from .cache import DiskCache, default_cache_dir, kernel_key
from ..codegen.llvm import (MATH_ALIAS_PREFIX, MATH_FUNCTIONS, PLACEHOLDER_NAME, STREAM_MARK,
                            MathTarget, generate, mark_nontemporal)
from .. import _core, env, forking
from ..ir.kernel import Kernel
from . import cpu_schedule, elf
from .base import HOST_MEMORY, CompiledKernel
from .llvm_passes import Optimizer

log = logging.getLogger("fastlaunch")

OPT_LEVEL = 3
KEEP_RECENT = 64        # kernels the memory cache keeps loaded after their last user went


# symbols the JIT's linker defines itself (the object's GOT), not the process
_LINKER_DEFINED = frozenset({"_GLOBAL_OFFSET_TABLE_"})


class UnresolvedSymbolError(RuntimeError):
    """A kernel's object code needs a symbol that the JIT cannot resolve in this process."""


def _register_runtime_symbols() -> None:
    """The float16 conversions LLVM's half lowering calls (see csrc/half.h), unless the
    process already has them (a libgcc or compiler-rt that exports them)."""
    for name, address in _core.half_libcalls().items():
        if not llvm.address_of_symbol(name):
            llvm.add_symbol(name, address)


def _host_features() -> str:
    return llvm.get_host_cpu_features().flatten()


def _load_math(features: str, mode: str) -> MathTarget:
    """Register the scalar aliases and find which libmvec variants this process can call;
    `mode` (env.MATH_MODES): whether vmath.py's inline code is wanted (it is used only with
    FMA), for the functions where it is faster ("auto") or all it has ("inline")."""
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
    inline = mode != "libm" and "+fma" in flags
    inline_all = inline and mode == "inline"
    scalef = "+avx512f" in flags
    if env.no_libmvec():
        return MathTarget(vector_bits=wide, inline=inline, inline_all=inline_all, scalef=scalef)
    try:
        llvm.load_library_permanently("libmvec.so.1")
    except RuntimeError:
        return MathTarget(vector_bits=wide, inline=inline, inline_all=inline_all, scalef=scalef)
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
    return MathTarget(tuple(isas), frozenset(available), wide, inline, inline_all,
                      scalef=scalef)


class KernelCode:
    """One kernel's machine code in an MCJIT engine of its own (CompiledKernel.owner).  When
    the last reference goes, the engine is queued for disposal (see the module docstring)."""
    __slots__ = ("engine", "key", "name", "address", "source", "obj", "_graveyard",
                 "__weakref__")

    def __init__(self, engine, key, name, address, source, obj, graveyard):
        self.engine, self.key, self.name, self.address = engine, key, name, address
        self.source, self.obj, self._graveyard = source, obj, graveyard

    def __del__(self):
        self._graveyard.append(self.engine)


class CPUBackend:
    name = "cpu"
    memory = HOST_MEMORY         # kernels read and write the caller's arrays directly

    def __init__(self, cache_dir: str | None = ..., math: str | None = None):
        """`math`: "auto" (vmath.py's code where the CPU has FMA and it is faster than
        libmvec: the exp and log families), "inline" (all of vmath.py's code) or "libm"
        (glibc's libm/libmvec, bit for bit); None: FASTLAUNCH_MATH, else "auto"."""
        mode = env.math_mode() if math is None else math
        if mode not in env.MATH_MODES:
            raise ValueError(f"math must be one of {', '.join(env.MATH_MODES)}, got {mode!r}")
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.cpu_name = llvm.get_host_cpu_name()
        self.features = _host_features()
        self.triple = llvm.get_process_triple()
        self._target = llvm.Target.from_triple(self.triple)
        self._tm = self._machine()
        self._optimizer = Optimizer(self._tm, OPT_LEVEL, vectorize=True)
        # the context of the engines' (empty) modules: engines are disposed of under our
        # lock, never racing another user of llvmlite's global context
        self._context = llvm.create_context()
        _register_runtime_symbols()
        self.math = _load_math(self.features, mode)
        if self.triple.startswith("x86_64"):
            self.math = dataclasses.replace(self.math, streaming_stores=True)
        self.math_mode = mode if self.math.inline else "libm"
        self.target_key = "|".join([f"math={self.math_mode}",
            f"fastlaunch={__version__}", f"llvmlite={llvmlite.__version__}",
            "llvm=" + ".".join(map(str, llvm.llvm_version_info)), self.triple, self.cpu_name,
            self.features, f"O{OPT_LEVEL}"])
        self.disk = DiskCache(default_cache_dir() if cache_dir is ... else cache_dir)
        self._lock = forking.lock(forking.BACKEND)
        self._loaded = weakref.WeakValueDictionary()       # key -> KernelCode still in use
        self._recent: collections.OrderedDict = collections.OrderedDict()  # ... and kept
        self._graveyard: list = []                         # engines no kernel uses any more
        self._resolved: set = set()                        # symbols known to resolve
        self.compile_count = 0      # kernels compiled by LLVM (not loaded from a cache)
        self.disk_loads = 0
        self.engines_disposed = 0

    def _machine(self):
        return self._target.create_target_machine(cpu=self.cpu_name, features=self.features,
                                                  opt=OPT_LEVEL, jit=True)

    # ---- the backend interface ---------------------------------------------------------
    def schedule(self, plan):
        return cpu_schedule.schedule(plan)

    def schedule_kernel(self, kernel: Kernel, saved: dict | None = None) -> Kernel:
        return cpu_schedule.schedule_kernel(kernel, saved)

    def link(self, layout, kernels):
        from .host import host_executable
        from .library import routine_addresses
        return host_executable(layout, kernels, routine_addresses(layout.program))

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
            self._bury()
            code = self._cached(key)
            if code is not None:
                return CompiledKernel(name, code.address, code.source, 0.0, "memory", key,
                                      code.obj, code)
            source = text.replace(PLACEHOLDER_NAME, name)
            t0 = time.perf_counter()
            code, origin = None, "disk"
            obj = self.disk.get(key)
            if obj is not None:
                try:
                    code = self._load(obj, key, name, source)
                    self.disk_loads += 1
                except (elf.ElfError, UnresolvedSymbolError) as err:
                    log.warning("fastlaunch: cached kernel %s cannot be loaded (%s); "
                                "compiling it again", name, err)
            if code is None:
                obj = self.object_code(source)
                code = self._load(obj, key, name, source)
                self.disk.put(key, obj)
                origin = "compiled"
                self.compile_count += 1
            seconds = time.perf_counter() - t0
            self._remember(code)
            log.debug("kernel %s (%s): %s in %.2f ms", name, label, origin, seconds * 1e3)
            return CompiledKernel(name, code.address, source, seconds, origin, key, obj, code)

    def load_object(self, text: str, obj: bytes, target_key: str) -> CompiledKernel:
        """A kernel saved with its machine code: loaded as is when it was compiled for this
        very target, else compiled again from its source."""
        if target_key != self.target_key:
            return self.compile_source(text)
        key = kernel_key(text, self.target_key)
        name = "fl_" + key[:32]
        with self._lock:
            self._bury()
            code = self._cached(key)        # compiled here from the same source: our own code
            origin = "memory"
            if code is None:
                # A file's machine code is remembered under a key of its own bytes, never
                # under its source's: a later compile of that source must not run code that
                # came from a file (which need not be what the source compiles to).
                saved_key = "saved-" + hashlib.sha256(key.encode() + b"\0" + obj).hexdigest()
                code = self._cached(saved_key)
                if code is None:
                    code = self._load(obj, saved_key, name, text.replace(PLACEHOLDER_NAME, name))
                    self._remember(code)
                    origin = "saved"
            return CompiledKernel(name, code.address, code.source, 0.0, origin, key, code.obj,
                                  code)

    def release(self) -> int:
        """Dispose of the engines no executable uses any more, forget the recently used
        ones that nothing else holds, and give freed memory back to the system.  Returns
        the number of engines disposed of."""
        with self._lock:
            self._recent.clear()
            n = self._bury()
        _trim_heap()
        return n

    @property
    def loaded_kernels(self) -> int:
        """Kernels whose machine code is loaded now."""
        with self._lock:
            return len(self._loaded)

    # ---- the memory cache --------------------------------------------------------------
    def _cached(self, key: str):
        code = self._loaded.get(key)
        if code is not None:
            self._recent[key] = code
            self._recent.move_to_end(key)
        return code

    def _remember(self, code: KernelCode) -> None:
        self._loaded[code.key] = code
        self._recent[code.key] = code
        self._recent.move_to_end(code.key)
        while len(self._recent) > KEEP_RECENT:
            self._recent.popitem(last=False)

    def _bury(self) -> int:
        """Dispose of queued engines (under the lock: no parse in our context meanwhile)."""
        n = 0
        while self._graveyard:
            self._graveyard.pop().close()
            n += 1
        self.engines_disposed += n
        return n

    def kernel_text(self, compiled: CompiledKernel) -> str:
        """The placeholder-named source of a compiled kernel (what compile_source takes)."""
        return compiled.source.replace(compiled.name, PLACEHOLDER_NAME)

    # ---- compilation -------------------------------------------------------------------
    def optimized_module(self, source: str, context):
        """The parsed, checked and optimised module of `source`, in `context`.  If anything
        raises (a KeyboardInterrupt in the optimiser included), the module is closed before
        the exception leaves: the caller closes `context` next, and a module that outlived
        its context in a traceback's frame would be freed twice when the traceback goes."""
        mod = llvm.parse_assembly(source, context=context)
        try:
            mod.triple = self.triple
            mod.data_layout = str(self._tm.target_data)
            mod.verify()
            self._optimizer.default(mod)
            if self.math.inline:
                # the vector variants of vmath's fallbacks are called by the vectorised loops
                # only after O3's inliner has run: inline them now (see CPUEmitter.big_call)
                self._optimizer.passes(mod, lambda mpm: mpm.add_always_inliner_pass())
            if self.math.streaming_stores and STREAM_MARK in source:
                # only a streaming kernel's module is printed and re-parsed: every other one
                # skips the text round trip
                text = str(mod)
                marked = mark_nontemporal(text)
                if marked is not text:
                    mod.close()
                    mod = llvm.parse_assembly(marked, context=context)
                    mod.verify()
            return mod
        except BaseException:
            mod.close()             # closing twice is harmless
            raise

    def _emit(self, source: str, emit):
        # A context per compilation: LLVM never frees what a context uniques (constants,
        # types, metadata), so one long-lived context would grow with every new kernel.
        context = llvm.create_context()
        mod = None
        try:
            with self._lock:
                mod = self.optimized_module(source, context)
                return emit(mod)
        except BaseException as err:
            # An interrupt can also land inside llvmlite's own wrappers, after a module
            # object exists and before optimized_module holds it: close every module of
            # this context that the traceback's frames hold, before the context goes.
            _close_modules_of(context, err.__traceback__)
            raise
        finally:
            if mod is not None:
                mod.close()
            context.close()

    def object_code(self, source: str) -> bytes:
        return self._emit(source, self._tm.emit_object)

    def assembly(self, kernel: Kernel) -> str:
        """The optimised machine code of a kernel, as assembly text (for tests and dis)."""
        source = generate(kernel, self.math).replace(PLACEHOLDER_NAME, "fl_kernel")
        return self._emit(source, self._tm.emit_assembly)

    def check_symbols(self, obj: bytes, name: str = "") -> None:
        """Raise UnresolvedSymbolError naming the first symbol the object needs that the JIT
        cannot resolve (ElfError where the bytes are not an ELF64 object)."""
        for sym in elf.undefined_symbols(obj):
            if sym.weak or sym.name in self._resolved or sym.name in _LINKER_DEFINED:
                continue          # an absent weak symbol is a null address the code tests
            if not llvm.address_of_symbol(sym.name):
                raise UnresolvedSymbolError(
                    f"fastlaunch: kernel {name or '(object)'} calls {sym.name!r}, which is "
                    f"not defined in this process; its machine code cannot be loaded")
            self._resolved.add(sym.name)

    def _load(self, obj: bytes, key: str, name: str, source: str) -> KernelCode:
        """Object code -> a KernelCode in a new engine, with its symbols checked first."""
        self.check_symbols(obj, name)
        # The engine only links objects: it never generates code, so a generic target
        # machine does (cheaper to make), and finalize_object(), which would compile the
        # empty module, is skipped: get_function_address applies the relocations and makes
        # the code executable.
        engine = llvm.create_mcjit_compiler(
            llvm.parse_assembly("", context=self._context),
            self._target.create_target_machine(cpu="", features="", opt=0, jit=True))
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        address = engine.get_function_address(name)
        if not address:
            engine.close()
            raise RuntimeError(f"fastlaunch: kernel {name} did not load")
        return KernelCode(engine, key, name, address, source, obj, self._graveyard)


def _close_modules_of(context, tb) -> None:
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            if isinstance(value, llvm.ModuleRef) and getattr(value, "_context", None) is context:
                value.close()
        tb = tb.tb_next


def _trim_heap() -> None:
    """Hand freed heap memory back to the system (glibc keeps it otherwise)."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None
