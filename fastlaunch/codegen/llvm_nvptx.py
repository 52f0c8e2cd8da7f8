"""The NVPTX target of the LLVM code generator: LLVM IR for `nvptx64-nvidia-cuda`.

ABI: `define ptx_kernel void @name(<one 8-byte parameter per kernel argument>)`: a buffer or
the status word is a global-memory pointer, a scalar its int64/float64 word (kernel.Scalar).
The executable passes `kernelParams[k] = &argwords[args_at + k]`, the words BIND packed, so
the parameter list is exactly the CPU's `args` array, one word per argument.  (LLVM 20 made
`ptx_kernel` the calling convention that marks an entry; `!nvvm.annotations` kernel entries
are no longer read.)

What the CUDA schedule decided reaches the code through `gpu_launch(kernel)` alone:

  map / serial     a grid-stride loop over the flat space: the global thread index
                   ctaid.x * ntid.x + tid.x, stepping by nctaid.x * ntid.x.  A serial kernel
                   (stores at data-dependent indices) is launched with one thread, so the
                   same loop visits every point in order, as NumPy does.
  atomic           the same loop, over all threads, for a scatter whose result does not
                   depend on the order (cuda_schedule.order_free): each add/max/min store
                   is one `atomicrmw` (or/and on bools; sub-word ones LLVM expands into a
                   32-bit compare-and-swap loop).
  thread_reduce    the same loop over the outputs; each thread folds its output's whole
                   reduction space in C order (scans and arg-reductions always, and any
                   reduction with many outputs or a short reduction).
  block_reduce     one block per output (and split): thread t folds flat reduction positions
                   s*B + t, s*B + t + splits*B, ... (coalesced), then the block combines its
                   B partial values in shared memory in a fixed tree order; thread 0 stores.
                   With splits > 1 the last space dim numbers the split and the stores go to a
                   partials buffer that a second kernel combines.  Every combine order
                   depends on the shapes alone: the same bits on every run and every GPU.

Math functions call libdevice (`__nv_expf`, `__nv_pow`, ...); the backend links libdevice
and internalises it before optimising.  fmod is `__nv_fmod` (NVPTX lowers `frem` as
a - trunc(a/b)*b, which is not exact).  float16 math goes through float32 (llvm_base).
Kernel errors OR their word into the status word with one `atomicrmw or` per thread.

The entry declares its block (`"nvvm.maxntid"`, PTX `.maxntid`; a block reduction, whose
code is built for exactly its block, `.reqntid`): ptxas then keeps the registers per thread
within what that many threads allow, and the backend reads which blocks are fixed from it.

A long row's radix sort uses 4-bit digits with one 16-counter histogram counted again before
each pass (64 bytes of local memory per thread; the CPU's 8-bit digits with every pass's
histogram counted at once took 8 KB for 64-bit keys): the rows themselves are sorted in the
global scratch the program allocates (kernel.Sort), so nothing else grows with the row.

`HostSimEmitter` is the same code for the host CPU, for tests: the thread and block indices
are parameters, a barrier is a call the test harness implements with real threads, shared
memory an ordinary global, math the C library's.  Running it over every (block, thread) of a
launch checks the GPU's index logic (grid-stride loops, the block reduction's tree, splits)
against NumPy without a GPU (tests/unit/test_cuda_hostsim.py).

Nothing here may reach an LLVM fatal error: `check_lowerable` lists what the NVPTX backend
cannot lower (a libdevice call with no libdevice, an unresolved function), and the backend
raises `NVPTXLoweringError` instead of emitting.
"""
from __future__ import annotations

import numpy as np

from ..ir.kernel import Kernel
from .llvm_base import PLACEHOLDER_NAME, LLVMEmitter, llvm_type, memory_type, word_type

TRIPLE = "nvptx64-nvidia-cuda"
LIBDEVICE_PREFIX = "__nv_"

# LLVM intrinsics (by name prefix) that the NVPTX backend lowers to instructions, with no
# library call.  Anything else left declared after optimisation would make LLVM abort.
LOWERABLE_INTRINSICS = (
    "llvm.nvvm.", "llvm.umin.", "llvm.umax.", "llvm.smin.", "llvm.smax.", "llvm.abs.",
    "llvm.fabs.", "llvm.copysign.", "llvm.floor.", "llvm.ceil.", "llvm.trunc.", "llvm.rint.",
    "llvm.nearbyint.", "llvm.roundeven.", "llvm.round.", "llvm.sqrt.", "llvm.fma.",
    "llvm.fmuladd.", "llvm.minnum.", "llvm.maxnum.", "llvm.minimum.", "llvm.maximum.",
    "llvm.fptosi.sat.", "llvm.fptoui.sat.", "llvm.sadd.with.overflow.",
    "llvm.uadd.with.overflow.", "llvm.ssub.with.overflow.", "llvm.usub.with.overflow.",
    "llvm.smul.with.overflow.", "llvm.umul.with.overflow.", "llvm.lifetime.", "llvm.assume",
    "llvm.memcpy.", "llvm.memset.", "llvm.memmove.", "llvm.ctpop.", "llvm.ctlz.", "llvm.cttz.",
    "llvm.bswap.", "llvm.bitreverse.", "llvm.fshl.", "llvm.fshr.", "llvm.umul.fix",
    "llvm.experimental.noalias.scope.decl", "llvm.is.fpclass.", "llvm.ldexp.", "llvm.frexp.",
    "llvm.usub.sat.", "llvm.uadd.sat.", "llvm.ssub.sat.", "llvm.sadd.sat.", "llvm.ucmp.",
    "llvm.scmp.", "llvm.vector.reduce.",
)


class NVPTXLoweringError(ValueError):
    """A kernel the NVPTX backend cannot lower (raised instead of letting LLVM abort)."""


def generate(kernel: Kernel, name: str = PLACEHOLDER_NAME, llvm_major: int = 20) -> str:
    """The LLVM IR module text of one scheduled kernel for the GPU, its entry named `name`.
    llvm_major: the LLVM that will read it (before 20, entries were marked by
    `!nvvm.annotations` instead of the `ptx_kernel` calling convention)."""
    return NVPTXEmitter(kernel, name, llvm_major).module()


def gpu_launch(kernel: Kernel) -> tuple:
    """(kind, block, splits) of a kernel's CUDA schedule (cuda_schedule.CUDASchedule); an
    unscheduled kernel is a map (or thread_reduce) of 256-thread blocks."""
    s = kernel.schedule
    kind = getattr(s, "kind", None)
    if kind is None:
        kind = "map" if kernel.reduction is None else "thread_reduce"
    return kind, int(getattr(s, "block", 256)), int(getattr(s, "splits", 1))


def check_lowerable(declarations, libdevice_available: bool, linked: bool = False) -> None:
    """Raise NVPTXLoweringError for a function the NVPTX backend cannot lower.
    declarations: names of the functions a module declares but does not define; linked: the
    module has libdevice linked in (a libdevice name still declared is not in libdevice)."""
    bad, needs_libdevice = [], []
    for name in declarations:
        if name.startswith(LIBDEVICE_PREFIX):
            if not libdevice_available:
                needs_libdevice.append(name)
            elif linked:
                bad.append(f"{name} (not in libdevice)")
        elif name.startswith("llvm."):
            if not name.startswith(LOWERABLE_INTRINSICS):
                bad.append(f"{name} (an LLVM intrinsic the NVPTX backend has no instruction for)")
        else:
            bad.append(f"{name} (an external function; GPU kernels can call none)")
    if needs_libdevice:
        raise NVPTXLoweringError(
            f"this kernel calls the math functions {', '.join(sorted(needs_libdevice))}, which "
            f"the GPU gets from NVIDIA's libdevice, and no libdevice.10.bc was found: install "
            f"fastlaunch[cuda] (the nvidia-nvvm wheel), or a CUDA toolkit, or set "
            f"FASTLAUNCH_LIBDEVICE to the file")
    if bad:
        raise NVPTXLoweringError("the NVPTX backend cannot lower: " + "; ".join(sorted(bad)))


class NVPTXEmitter(LLVMEmitter):
    """One kernel's module for nvptx64 (see the module docstring)."""
    SORT_DIGIT_BITS = 4
    SORT_COUNT_PER_PASS = True

    def __init__(self, kernel: Kernel, name: str, llvm_major: int = 20):
        super().__init__(kernel, name)
        self.llvm_major = llvm_major
        self.kind, self.block, self.splits = gpu_launch(kernel)
        self.libdevice: set = set()
        self.globals: list = []

    # ---- module ------------------------------------------------------------------------
    def module(self) -> str:
        params = []
        for i, a in enumerate(self.k.args):
            wt = word_type(a)
            if wt == "ptr":
                # distinct buffers (as on the CPU): read-only ones may use the non-coherent cache
                params.append(f"ptr noalias {self.buffer(i)}")
            else:
                params.append(f"{wt} {self.scalar_word(i)}")
        code = self.kernel_code()
        cc = "ptx_kernel " if self.llvm_major >= 20 else ""
        lines = [f"; fastlaunch kernel: {self.k.label}", f'target triple = "{TRIPLE}"', "",
                 f"define {cc}void @{self.name}({', '.join(params)}) #0 {{", "entry:",
                 code, "}"]
        lines += self.globals
        lines += self.mod.lines() + self.mod.implicit_lines()
        # IEEE denormals (NumPy's semantics): no flush-to-zero, in our code and in libdevice's
        # __nvvm_reflect("__CUDA_FTZ") branches
        # the block (PTX .maxntid; .reqntid where the code is built for exactly that many
        # threads): ptxas keeps the registers within what it allows
        ntid = "reqntid" if self.kind == "block_reduce" else "maxntid"
        attr = f' "nvvm.{ntid}"="{self.block}"' if self.llvm_major >= 21 else ""
        lines.append('attributes #0 = { nounwind "denormal-fp-math"="ieee,ieee" '
                     f'"denormal-fp-math-f32"="ieee,ieee"{attr} }}')
        lines += ["!llvm.module.flags = !{!0}", '!0 = !{i32 4, !"nvvm-reflect-ftz", i32 0}']
        if self.llvm_major < 21:
            marks = [] if cc else [f'!{{ptr @{self.name}, !"kernel", i32 1}}']
            marks.append(f'!{{ptr @{self.name}, !"{ntid}x", i32 {self.block}}}')
            lines.append("!nvvm.annotations = !{" + ", ".join(
                f"!{i + 1}" for i in range(len(marks))) + "}")
            lines += [f"!{i + 1} = {m}" for i, m in enumerate(marks)]
        return "\n".join(lines + [""])

    # ---- thread indices ----------------------------------------------------------------
    space = "addrspace(3) "          # shared memory

    def sreg(self, reg: str) -> str:
        """A PTX special register (tid.x, ntid.x, ctaid.x, nctaid.x) as an i64."""
        v = self.mod.intrinsic(self.fw, f"llvm.nvvm.read.ptx.sreg.{reg}", "i32", [])
        return self.fw.op(f"zext i32 {v} to i64")

    def barrier(self):
        self.mod.declare("llvm.nvvm.barrier0", "declare void @llvm.nvvm.barrier0()")
        self.fw.emit("call void @llvm.nvvm.barrier0()")

    # ---- target hooks ------------------------------------------------------------------
    def launch_loop(self, body):
        """The grid-stride loop over the flat space (map, serial, thread_reduce)."""
        fw = self.fw
        tid, ntid = self.sreg("tid.x"), self.sreg("ntid.x")
        ctaid, nctaid = self.sreg("ctaid.x"), self.sreg("nctaid.x")
        first = fw.op(f"add nuw nsw i64 {fw.op(f'mul nuw nsw i64 {ctaid}, {ntid}')}, {tid}")
        stride = fw.op(f"mul nuw nsw i64 {nctaid}, {ntid}")
        space = list(self.k.space)
        fw.counted_loop(first, str(self.k.size), [],
                        lambda flat, _: body(self.unflatten(flat, space), []) or [],
                        step=stride)

    def emit_launch(self):
        if self.kind == "block_reduce":
            self.block_reduce()
        else:
            super().emit_launch()

    def math_call(self, cname: str, dt: np.dtype, args: list) -> str:
        ty = llvm_type(dt)
        fn = LIBDEVICE_PREFIX + cname + ("f" if dt == np.float32 else "")
        self.libdevice.add(fn)
        return self.mod.intrinsic(self.fw, fn, ty, [(ty, a) for a in args])

    def float_remainder(self, dt: np.dtype, a: str, b: str) -> str:
        return self.call_math("fmod", dt, [a, b])

    def report_error(self, word: str):
        self.fw.emit(f"atomicrmw or ptr {self.buffer(self.k.status)}, i64 {word} monotonic, "
                     f"align 8")

    def store_combined(self, mode: str, arg: int, index: str, value: str, dt: np.dtype):
        """In an atomic scatter (cuda_schedule.order_free: integer or bool add/max/min),
        one atomic read-modify-write; elsewhere (one thread in loop order) the plain one."""
        if self.kind != "atomic":
            return super().store_combined(mode, arg, index, value, dt)
        if dt.kind == "b":
            op = {"add": "or", "max": "or", "min": "and"}[mode]
            value = self.fw.op(f"zext i1 {value} to i8")
        elif dt.kind in "iu":
            signed = dt.kind == "i"
            op = {"add": "add", "max": "max" if signed else "umax",
                  "min": "min" if signed else "umin"}[mode]
        else:
            raise NVPTXLoweringError(f"kernel {self.k.label!r}: no atomic scatter-{mode} on "
                                     f"{dt} (its schedule keeps it serial)")
        ptr = self.address(arg, index, dt)
        self.fw.emit(f"atomicrmw {op} ptr {ptr}, {memory_type(dt)} {value} monotonic, "
                     f"align {dt.itemsize}")

    # ---- the block reduction -----------------------------------------------------------
    def block_reduce(self):
        """Blocks over outputs (x splits); threads interleave over the reduction; a fixed
        shared-memory tree combines a block's values (see the module docstring)."""
        fw, k, r = self.fw, self.k, self.k.reduction
        if r is None or r.scan or r.chunk:
            raise NVPTXLoweringError(f"kernel {k.label!r}: a block reduction needs a plain "
                                     f"reduction")
        B = self.block
        if B & (B - 1) or not 1 <= B <= 1024:
            raise NVPTXLoweringError(f"block size {B} is not a power of two in [1, 1024]")
        acc_dt = r.acc_dtype
        ty, aty = llvm_type(acc_dt), memory_type(acc_dt)
        align = max(acc_dt.itemsize, 4)
        smem = f"@{self.name}.partials"
        init = "undef" if self.space else "zeroinitializer"
        self.globals.append(f"{smem} = internal {self.space}global [{B} x {aty}] {init}, "
                            f"align {align}")
        tid = self.sreg("tid.x")
        ctaid, nctaid = self.sreg("ctaid.x"), self.sreg("nctaid.x")
        space, rsizes = list(k.space), list(k.rspace)
        total = int(np.prod(rsizes, dtype=np.int64))
        splits = self.splits

        def cell(index: str) -> str:
            return fw.op(f"getelementptr inbounds [{B} x {aty}], ptr {self.space}{smem}, "
                         f"i64 0, i64 {index}", "sm")

        def load(ptr):
            v = fw.op(f"load {aty}, ptr {self.space}{ptr}, align {align}")
            return fw.op(f"icmp ne i8 {v}, 0") if acc_dt.kind == "b" else v

        def store(v, ptr):
            if acc_dt.kind == "b":
                v = fw.op(f"zext i1 {v} to i8")
            fw.emit(f"store {aty} {v}, ptr {self.space}{ptr}, align {align}")

        def per_block(blk, _):
            outer = self.unflatten(blk, space)
            s = outer[-1] if splits > 1 else "0"
            start = fw.op(f"add nuw nsw i64 {fw.op(f'mul nuw nsw i64 {s}, {B}')}, {tid}")

            def fold(flat, acc):
                loops = list(outer) + self.unflatten(flat, rsizes)
                memo: dict = {}
                v = self.convert(self.expr(r.value, loops, memo), r.value.dtype, acc_dt)
                return [self.combine(r.op, acc_dt, acc[0], v)]

            acc = fw.counted_loop(start, str(total), [(ty, self.reduce_init(r.op, acc_dt))],
                                  fold, step=str(splits * B))[0]
            mine = cell(tid)
            store(acc, mine)
            self.barrier()
            half = B // 2
            while half >= 1:
                # threads [0, half) fold the upper half onto theirs: a fixed tree
                then, done = fw.label("tree"), fw.label("treed")
                fw.cond_br(fw.op(f"icmp ult i64 {tid}, {half}"), then, done)
                fw.start(then)
                other = cell(fw.op(f"add nuw nsw i64 {tid}, {half}"))
                store(self.combine(r.op, acc_dt, load(mine), load(other)), mine)
                fw.br(done)
                fw.start(done)
                self.barrier()
                half //= 2
            then, done = fw.label("write"), fw.label("written")
            fw.cond_br(fw.op(f"icmp eq i64 {tid}, 0"), then, done)
            fw.start(then)
            memo: dict = {}
            self.store_result(r, self.index(r.index, outer, memo), load(cell("0")), acc_dt)
            fw.br(done)
            fw.start(done)
            self.barrier()          # the next output of this block reuses the partials
            return []

        fw.counted_loop(ctaid, str(k.size), [], per_block, step=nctaid)


class HostSimEmitter(NVPTXEmitter):
    """The NVPTX target's code for the host, for tests (see the module docstring):
    `void @name(i64 tid, i64 ntid, i64 ctaid, i64 nctaid, ptr args)`, `args` one 8-byte word
    per kernel argument; barriers call `fastlaunch_sim_barrier`; math calls the
    `fastlaunch_<fn>` aliases of libm the CPU backend registers."""
    space = ""
    SREGS = {"tid.x": "%sim.tid", "ntid.x": "%sim.ntid", "ctaid.x": "%sim.ctaid",
             "nctaid.x": "%sim.nctaid"}

    def module(self) -> str:
        loads = []
        for i, a in enumerate(self.k.args):
            wt = word_type(a)
            name = self.buffer(i) if wt == "ptr" else self.scalar_word(i)
            loads += [f"  %w{i}.p = getelementptr inbounds i64, ptr %sim.args, i64 {i}",
                      f"  {name} = load {wt}, ptr %w{i}.p, align 8"]
        code = self.kernel_code()
        lines = [f"define void @{self.name}(i64 %sim.tid, i64 %sim.ntid, i64 %sim.ctaid, "
                 f"i64 %sim.nctaid, ptr %sim.args) {{", "entry:"] + loads + [code, "}"]
        return "\n".join(lines + self.globals + self.mod.lines() + self.mod.implicit_lines()
                         + [""])

    def sreg(self, reg: str) -> str:
        return self.SREGS[reg]

    def barrier(self):
        self.mod.declare("fastlaunch_sim_barrier", "declare void @fastlaunch_sim_barrier()")
        self.fw.emit("call void @fastlaunch_sim_barrier()")

    def math_call(self, cname: str, dt: np.dtype, args: list) -> str:
        ty = llvm_type(dt)
        fn = "fastlaunch_" + cname + ("f" if dt == np.float32 else "")
        return self.mod.intrinsic(self.fw, fn, ty, [(ty, a) for a in args])

    def float_remainder(self, dt: np.dtype, a: str, b: str) -> str:
        return LLVMEmitter.float_remainder(self, dt, a, b)       # the host's frem is exact
