"""The CUDA backend: the same kernels, compiled to PTX by LLVM's NVPTX target and replayed by
the CUDA driver.

Compilation (no GPU or driver needed): a scheduled kernel (cuda_schedule.py) becomes LLVM IR
for nvptx64 (codegen/llvm_nvptx.py); libdevice is linked in and every function but the kernel
made internal before the O3 pipeline runs (so only the math the kernel calls survives: a few
KB of PTX instead of all of libdevice); the optimised module is checked for anything the
NVPTX backend cannot lower (a Python error, never an LLVM abort) and emitted as PTX; ptxas
assembles the PTX into a cubin for the target arch when it is found, else the PTX itself is
the image (the driver compiles it when the program is linked).  PTX is cached on disk under
hash(IR, target_key), cubins under hash(PTX, arch, ptxas version).

The target arch: FASTLAUNCH_CUDA_ARCH (e.g. sm_80), else the device's compute capability when
a driver and a GPU are found, else sm_90.  Tools: FASTLAUNCH_LIBDEVICE / FASTLAUNCH_PTXAS, else
the nvidia-nvvm / nvidia-cuda-nvcc wheels (`pip install 'fastlaunch[cuda]'`), CUDA_HOME, the
PATH (ptxas) and /usr/local/cuda.

Memory: every kernel buffer lives on the device (MemoryModel(SPACE_DEVICE)): NumPy arguments
are copied in, results copied out (program/record.py emits the TO_DEVICE/TO_HOST shadows).  The
executable is _cuda.CUDAExecutable; without a usable driver it still links (lowering works
on any machine) and raises BackendUnavailableError when called.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time

import llvmlite
import llvmlite.binding as llvm

from .._launch import Space
from .._version import __version__
from .. import env, forking
from .cache import DiskCache, default_cache_dir, kernel_key
from ..codegen.llvm_base import PLACEHOLDER_NAME
from ..codegen.llvm_nvptx import (LIBDEVICE_PREFIX, TRIPLE, NVPTXLoweringError,
                                  check_lowerable, generate)
from ..errors import BackendUnavailableError, CUDAError
from ..ir.kernel import Kernel
from . import cuda_schedule
from .base import CompiledKernel, MemoryModel
from .llvm_passes import Optimizer

log = logging.getLogger("fastlaunch")
_LAUNCH_OUT_OF_RESOURCES = 701        # CUresult CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES

OPT_LEVEL = 3
DEFAULT_ARCH = "sm_90"
# The PTX ISA version each arch needs at least (what we ask LLVM for: the oldest one keeps the
# PTX loadable by the oldest driver that knows the arch).  CUDA 13's ptxas starts at sm_75.
PTX_ISA = {"sm_75": 63, "sm_80": 70, "sm_86": 71, "sm_87": 74, "sm_89": 78, "sm_90": 78,
           "sm_90a": 80, "sm_100": 86, "sm_100a": 86, "sm_101": 86, "sm_103": 88,
           "sm_120": 87, "sm_120a": 87}
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(")
_TARGET = re.compile(r"^\.target\s+(sm_\d+a?)", re.M)


def _arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch))


# code built for exactly its block: declared so (.reqntid), or (PTX saved before that was
# declared) its threads meet at barriers
_FIXED_BLOCK = re.compile(r"^\s*\.reqntid\s|\bbar(rier)?\.sync\b", re.M)


def _device_block(info, compiled: CompiledKernel, block: int, limits: dict) -> int:
    """The block kernel `info` (bytecode.KernelInfo) is launched with on this device:
    cuda_schedule.launch_block from its loaded code's limits.  Its PTX says whether the code
    is built for exactly its block (`.reqntid`: a block reduction's tree)."""
    fixed = _FIXED_BLOCK.search(compiled.source) is not None
    try:
        return cuda_schedule.launch_block("block_reduce" if fixed else "map", block,
                                          limits["max_threads"], limits["local_bytes"])
    except cuda_schedule.LaunchLimitError as e:
        raise CUDAError(f"fastlaunch: kernel {info.label} ({info.name}) cannot run on this "
                        f"device: {e} (its code uses {limits['regs']} registers per thread); the CUDA "
                        f"backend cannot run this program here",
                        _LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES") from None


# ---- tools ------------------------------------------------------------------------------------
def _nvidia_roots() -> list:
    """Install directories of the nvidia-* wheels (the `nvidia` namespace package)."""
    spec = importlib.util.find_spec("nvidia")
    return list(spec.submodule_search_locations or []) if spec else []


def _toolkit_roots() -> list:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    roots += ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"), reverse=True)
    return [r for r in roots if r]


def find_libdevice() -> str | None:
    """The path of libdevice.10.bc, or None."""
    path = env.libdevice_path()
    if path is not None:
        return path or None
    candidates = []
    for root in _nvidia_roots():      # nvidia/cu13/nvvm/..., nvidia/cuda_nvcc/nvvm/... (CUDA 12)
        candidates += sorted(glob.glob(os.path.join(root, "*", "nvvm", "libdevice",
                                                    "libdevice.10.bc")), reverse=True)
    for root in _toolkit_roots():
        candidates.append(os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc"))
    return next((c for c in candidates if os.path.isfile(c)), None)


def find_ptxas() -> str | None:
    """The path of ptxas, or None (then the driver compiles the PTX)."""
    path = env.ptxas_path()
    if path is not None:
        return path or None
    candidates = []
    for root in _nvidia_roots():
        candidates += sorted(glob.glob(os.path.join(root, "*", "bin", "ptxas")), reverse=True)
    found = shutil.which("ptxas")
    if found:
        candidates.append(found)
    candidates += [os.path.join(r, "bin", "ptxas") for r in _toolkit_roots()]
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def ptxas_version(path: str | None) -> str:
    """"13.0.88" from `ptxas --version`, or "none"."""
    if not path:
        return "none"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return "none"
    m = re.search(r"V(\d+\.\d+\.\d+)", out.stdout)
    return m.group(1) if m else "unknown"


def assemble(ptxas: str, ptx: str, arch: str) -> bytes:
    """PTX text -> cubin bytes (NVPTXLoweringError with ptxas's message if it refuses)."""
    with tempfile.TemporaryDirectory(prefix="fastlaunch-ptxas-") as d:
        src, dst = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            out = subprocess.run([ptxas, f"-arch={arch}", "-O3", src, "-o", dst],
                                 capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as err:
            raise NVPTXLoweringError(f"ptxas ({ptxas}) could not run: {err}") from None
        if out.returncode != 0:
            raise NVPTXLoweringError(f"ptxas -arch={arch} rejected the PTX: "
                                     f"{(out.stderr or out.stdout).strip()[:2000]}")
        with open(dst, "rb") as f:
            return f.read()


def _default_arch() -> str:
    arch = env.cuda_arch()
    if arch is not None:
        if arch not in PTX_ISA:
            raise env.EnvironmentVariableError(
                f"environment variable FASTLAUNCH_CUDA_ARCH={arch!r}: not an arch this "
                f"fastlaunch knows ({', '.join(PTX_ISA)})")
        return arch
    try:
        from .. import _cuda
    except ImportError:
        return DEFAULT_ARCH
    if _cuda.driver_error() is not None:
        return DEFAULT_ARCH
    major, minor = _cuda.device_info()["compute_capability"]
    arch = f"sm_{major}{minor}"
    return arch if arch in PTX_ISA else DEFAULT_ARCH


def cuda_extension():
    """The _cuda extension module, or raise BackendUnavailableError saying why it is missing."""
    try:
        from .. import _cuda
    except ImportError as err:
        raise BackendUnavailableError(
            f"fastlaunch: backend 'cuda' cannot run here: fastlaunch was built without its CUDA "
            f"extension (cuda.h was not found when it was built; install fastlaunch[cuda] or a "
            f"CUDA toolkit and rebuild): {err}") from None
    return _cuda


# ---- the backend ---------------------------------------------------------------------------
class CUDABackend:
    name = "cuda"
    memory = MemoryModel(kernel_space=Space.SPACE_DEVICE)

    def __init__(self, arch: str | None = None, cache_dir: str | None = ...):
        arch = arch or _default_arch()
        if arch not in PTX_ISA:
            raise ValueError(f"unknown CUDA arch {arch!r} (FASTLAUNCH_CUDA_ARCH); known: "
                             f"{', '.join(PTX_ISA)}")
        self.arch = arch
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        target = llvm.Target.from_triple(TRIPLE)
        self._tm = target.create_target_machine(cpu=arch, features=f"+ptx{PTX_ISA[arch]}",
                                                opt=OPT_LEVEL)
        self.libdevice_path = find_libdevice()
        self._libdevice = None          # the parsed module (see _libdevice_function)
        self._subsets: dict = {}        # libdevice function -> its bitcode with what it calls
        libdevice_id = "none"
        if self.libdevice_path:
            with open(self.libdevice_path, "rb") as f:
                self._libdevice_bytes = f.read()
            libdevice_id = hashlib.sha256(self._libdevice_bytes).hexdigest()[:16]
        self.ptxas = find_ptxas()
        self.ptxas_version = ptxas_version(self.ptxas)
        self.target_key = "|".join([
            "cuda", f"fastlaunch={__version__}", f"llvmlite={llvmlite.__version__}",
            "llvm=" + ".".join(map(str, llvm.llvm_version_info)), TRIPLE, arch,
            f"ptx{PTX_ISA[arch]}", f"libdevice={libdevice_id}", f"ptxas={self.ptxas_version}",
            f"O{OPT_LEVEL}", f"schedule={cuda_schedule.VERSION}"])
        self.disk = DiskCache(default_cache_dir() if cache_dir is ... else cache_dir)
        self._lock = forking.lock(forking.BACKEND)
        self._optimizer = Optimizer(self._tm, OPT_LEVEL)
        self._compiled: dict = {}
        self.compile_count = 0           # kernels LLVM compiled (not found in a cache)
        self.assemble_count = 0          # PTX assembled by ptxas (not found in a cache)

    # ---- the backend interface ---------------------------------------------------------
    def schedule(self, plan):
        return cuda_schedule.schedule(plan)

    def schedule_kernel(self, kernel: Kernel, saved: dict | None = None) -> Kernel:
        return cuda_schedule.schedule_kernel(kernel, saved)

    def source(self, kernel: Kernel) -> str:
        """The kernel's LLVM IR for nvptx64 (before libdevice and optimisation)."""
        return generate(kernel, llvm_major=llvm.llvm_version_info[0])

    def compile(self, kernel: Kernel) -> CompiledKernel:
        text = generate(kernel, llvm_major=llvm.llvm_version_info[0])
        key = kernel_key(text, self.target_key)
        name = "fl_" + key[:32]
        with self._lock:
            hit = self._compiled.get(key)
            if hit is not None:
                return CompiledKernel(hit.name, 0, hit.source, 0.0, "memory", key, hit.obj)
            t0 = time.perf_counter()
            cached = self.disk.get(key)
            origin = "disk"
            if cached is None:
                ptx = self.ptx(text.replace(PLACEHOLDER_NAME, name), name)
                self.disk.put(key, ptx.encode())
                origin = "compiled"
                self.compile_count += 1
            else:
                ptx = cached.decode()
            image = self.image(ptx)
            compiled = CompiledKernel(name, 0, ptx, time.perf_counter() - t0, origin, key, image)
            self._compiled[key] = compiled
            log.debug("kernel %s (%s): %s", name, kernel.label, origin)
            return compiled

    def kernel_text(self, compiled: CompiledKernel) -> str:
        """The PTX (a saved program stores it: it is re-assembled for another arch)."""
        return compiled.source

    def load_object(self, text: str, obj: bytes, target_key: str) -> CompiledKernel:
        m = _ENTRY.search(text)
        if m is None:
            raise ValueError("saved CUDA kernel: no .entry in its PTX")
        if target_key != self.target_key:
            # PTX runs on its .target and newer archs: assembled again for this one
            t = _TARGET.search(text)
            if t is None or _arch_number(t.group(1)) > _arch_number(self.arch):
                raise ValueError(f"saved CUDA kernel for {t.group(1) if t else 'an unknown arch'}"
                                 f" cannot run on {self.arch}: save the program with "
                                 f"FASTLAUNCH_CUDA_ARCH={self.arch} (or older)")
            image = self.image(text)
        else:
            image = obj
        return CompiledKernel(m.group(1), 0, text, 0.0, "saved",
                              kernel_key(text, self.target_key), image)

    def to_device(self, arr):
        """A DeviceArray with a copy of `arr` in GPU memory."""
        return cuda_extension().to_device(arr)

    def from_cuda_array(self, obj):
        """A DeviceArray viewing another library's CUDA array (no copy)."""
        return cuda_extension().from_cuda_array(obj)

    def release(self) -> int:
        """Nothing to free: each executable owns the CUDA modules it loaded."""
        return 0

    def link(self, layout, kernels):
        from .base import LinkError
        program = layout.program
        routines = program.library_routines()
        if routines:
            from .._launch import Routine
            from ..program.bytecode import ROUTINES
            names = ", ".join(sorted({ROUTINES[Routine(r)].name for r in routines}))
            raise LinkError(f"fastlaunch: the CUDA backend has no library calls: {names} via "
                            f"cuBLAS/cuSOLVER not implemented (matrix products run as compiled "
                            f"kernels on CUDA; np.linalg is CPU-only)")
        _cuda = cuda_extension()
        launch = [tuple(k.params) for k in program.kernels]
        nargs = [len(k.arg_kinds) for k in program.kernels]
        why = _cuda.driver_error()
        if why is not None:
            # lowering works without a GPU: the executable exists, and says why when called
            layout = dataclasses.replace(layout, const_ptrs=[0] * len(program.consts))
            return _cuda.CUDAExecutable(layout, [0] * len(kernels), launch, nargs, (), why)
        consts = [_cuda.DeviceBuffer.from_array(arr) for _, arr in program.consts]
        functions = [_cuda.load_kernel(k.name, bytes(k.obj)) for k in kernels]
        launch = [(grid, _device_block(info, ck, block, _cuda.kernel_limits(fn)))
                  for info, ck, (grid, block), fn in zip(program.kernels, kernels, launch,
                                                         functions)]
        layout = dataclasses.replace(layout, const_ptrs=[c.address for c in consts])
        return _cuda.CUDAExecutable(layout, functions, launch, nargs, consts)

    # ---- compilation -------------------------------------------------------------------
    def optimized_module(self, text: str, entry: str):
        """Parse, link libdevice (internalised), check, optimise.  Raises
        NVPTXLoweringError for anything the NVPTX backend cannot lower."""
        mod = llvm.parse_assembly(text)
        mod.triple = TRIPLE
        mod.data_layout = str(self._tm.target_data)
        mod.verify()
        declared = [f.name for f in mod.functions if f.is_declaration]
        check_lowerable(declared, self.libdevice_path is not None)
        needed = sorted(n for n in declared if n.startswith(LIBDEVICE_PREFIX))
        if needed:
            for name in needed:
                mod.link_in(llvm.parse_bitcode(self._libdevice_function(name)))
            # internal linkage: what the kernel does not call goes before the optimiser
            # spends time on it, and the PTX holds only the kernel
            for f in mod.functions:
                if not f.is_declaration and f.name != entry:
                    f.linkage = "internal"
            for g in mod.global_variables:
                if not g.is_declaration:
                    g.linkage = "internal"
        self._optimizer.default(mod)
        check_lowerable([f.name for f in mod.functions if f.is_declaration],
                        self.libdevice_path is not None, linked=True)
        return mod

    def ptx(self, text: str, entry: str) -> str:
        """LLVM IR text (entry named `entry`) -> PTX text."""
        return self._tm.emit_assembly(self.optimized_module(text, entry))

    def image(self, ptx: str) -> bytes:
        """What the driver loads: a cubin from ptxas (cached by PTX, arch and ptxas version),
        else the PTX itself, NUL-terminated, for the driver's JIT."""
        if not self.ptxas:
            return ptx.encode() + b"\0"
        key = kernel_key(ptx, f"cubin|{self.arch}|ptxas={self.ptxas_version}")
        cubin = self.disk.get(key)
        if cubin is None:
            cubin = assemble(self.ptxas, ptx, self.arch)
            self.disk.put(key, cubin)
            self.assemble_count += 1
        return cubin

    def _libdevice_function(self, name: str) -> bytes:
        """Bitcode of libdevice's `name` with what it calls, internalised: linking all of
        libdevice (a 460 KB module, about 130 ms to copy) into every kernel would cost more
        than compiling the kernel.  Made once per function and kept in memory and on disk."""
        hit = self._subsets.get(name)
        if hit is not None:
            return hit
        key = kernel_key(f"libdevice function {name}", self.target_key)
        bitcode = self.disk.get(key)
        if bitcode is None:
            mod = self._parsed_libdevice().clone()
            fn = next((f for f in mod.functions if f.name == name and not f.is_declaration), None)
            if fn is None:
                raise NVPTXLoweringError(f"{name} is not in libdevice ({self.libdevice_path})")
            for f in mod.functions:
                if not f.is_declaration and f.name != name:
                    f.linkage = "internal"
            for g in mod.global_variables:
                if not g.is_declaration:
                    g.linkage = "internal"
            self._optimizer.passes(mod, lambda mpm: mpm.add_global_dead_code_eliminate_pass())
            bitcode = mod.as_bitcode()
            self.disk.put(key, bitcode)
        self._subsets[name] = bitcode
        return bitcode

    def _parsed_libdevice(self):
        if self._libdevice is None:
            self._libdevice = llvm.parse_bitcode(self._libdevice_bytes)
            self._libdevice.triple = TRIPLE
            self._libdevice.data_layout = str(self._tm.target_data)
        return self._libdevice
