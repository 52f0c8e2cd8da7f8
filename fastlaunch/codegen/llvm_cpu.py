"""The CPU target of the LLVM code generator (llvm_base.py holds what every target shares).

ABI: `void @name(i64 start, i64 end, ptr args)` runs flat launch indices [start, end) (the
worker pool hands out chunks).  `args` holds one 8-byte word per kernel argument: a buffer
pointer, or a scalar (int64 or float64 bits).  The entry loads the words and calls an
always-inline body whose pointer parameters are `noalias`, so that LLVM knows the buffers are
distinct and vectorises the loops.  Math calls go to `fastlaunch_<fn>` aliases of libm that the
backend registers, with the libmvec vector variants LLVM may call instead; on AVX-512 hosts the
functions ask for 512-bit vectors.  A reduction that the CPU schedule tiles (its one input from
the schedule: `CPUSchedule.tile`) folds a tile of outputs per launch index.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ..ir.kernel import Kernel, Loop
from . import vmath
from .llvm_base import PLACEHOLDER_NAME, LLVMEmitter, llvm_type, memory_type, word_type

MATH_ALIAS_PREFIX = "fastlaunch_"   # the backend maps `fastlaunch_<fn>` to libm's <fn>


@dataclass(frozen=True)
class MathTarget:
    """What code generation needs to know of the target: which vector variants of the math
    functions it can call (glibc libmvec names), and the vector width to prefer.

    `isas` is a tuple of (VFABI ISA letter, vector register bits), e.g. (("d", 256), ("e", 512));
    `available` is the set of vector symbol names present in the loaded library;
    `vector_bits`: 512 on AVX-512 hosts, where LLVM would otherwise stop at 256-bit vectors
    (measured here: about 10% faster on transcendental-heavy kernels, equal on the rest).
    `inline`: the functions vmath.py implements are emitted inline (needs FMA); the others,
    and every function when False, are libm/libmvec calls.  `inline_all`: also those whose
    inline code is slower than libmvec here (vmath.SLOWER_INLINE: sin, cos, tanh, evaluated in
    float64 for accuracy); without it they stay libmvec calls ("auto" mode).
    `streaming_stores`: aligned vector stores may be non-temporal (x86-64: movntps and kin,
    ordered by an sfence): see CPUEmitter.entry_function.
    `scalef`: scaling by a power of two is one instruction (AVX-512's vscalef, selected for
    `llvm.ldexp`), which the inline exp family uses (vmath.InlineMath).
    """
    isas: tuple = ()
    available: frozenset = field(default_factory=frozenset)
    vector_bits: int = 0
    inline: bool = False
    inline_all: bool = False
    streaming_stores: bool = False
    scalef: bool = False

    def lane_counts(self, dtype: np.dtype) -> list:
        """The vector widths (lanes) the vectoriser may choose for dtype on this target."""
        widest = max([self.vector_bits] + [bits for _, bits in self.isas] + [256])
        lanes = widest // (np.dtype(dtype).itemsize * 8)
        return [n for n in (2, 4, 8, 16, 32) if n <= lanes]

    def variants(self, cname: str, dtype: np.dtype, arity: int) -> list:
        out = []
        suffix = "f" if dtype == np.float32 else ""
        for letter, bits in self.isas:
            width = bits // (dtype.itemsize * 8)
            vec = f"_ZGV{letter}N{width}{'v' * arity}_{cname}{suffix}"
            if vec in self.available:
                out.append((width, vec))
        return out


def generate(kernel: Kernel, math: MathTarget = MathTarget(), name: str = PLACEHOLDER_NAME) -> str:
    """The LLVM IR module text of one kernel for the CPU, its entry named `name`."""
    return CPUEmitter(kernel, math, name).module()


STREAM_ALIGN = 64        # bytes: a cache line, and the widest vector a non-temporal store takes
STREAM_MARK = "!fastlaunch.stream = !{}"   # tells the backend to mark the aligned stores


_VECTOR_STORE = re.compile(r"^\s*store <(\d+) x (float|double|half|i\d+)> [^,]+, ptr (%[\w.]+), "
                           r"align (\d+)")
_POINTER_DEF = re.compile(r"^\s*(%[\w.]+) = (?:getelementptr|phi ptr|select)\b(.*)$")
_ELEMENT_BYTES = {"float": 4, "double": 8, "half": 2}
STORED_WORD = "out"      # the entry's name prefix for the words of buffers a kernel stores to


def mark_nontemporal(optimized: str) -> str:
    """A streaming kernel's optimised module text with `!nontemporal` on each vector store
    into a stored buffer (an address computed from an entry word `%out<i>`, never a stack
    buffer: a row kept on the stack is read again at once) whose alignment LLVM proved: at
    least the vector's size, or a whole STREAM_ALIGN block.  Those are the stores of the
    entry's aligned copy of the body (see CPUEmitter.entry_function).

    After O3, because the loop vectoriser refuses a loop whose scalar store is marked
    non-temporal but only element-aligned; the mark is a hint, never a change of what is
    stored or where."""
    if STREAM_MARK not in optimized:
        return optimized
    lines = optimized.split("\n")
    derived = set()
    seeds = re.compile(rf"%{STORED_WORD}\d+\b")
    changed = True
    while changed:               # to a fixed point: phis name values defined further down
        changed = False
        for line in lines:
            m = _POINTER_DEF.match(line)
            if m and m.group(1) not in derived and (
                    seeds.search(m.group(2))
                    or any(op in derived for op in re.findall(r"%[\w.]+", m.group(2)))):
                derived.add(m.group(1))
                changed = True
    ids = [int(m) for m in re.findall(r"^!(\d+) = ", optimized, re.M)]
    md = f"!{max(ids, default=-1) + 1}"
    marked = 0
    for n, line in enumerate(lines):
        m = _VECTOR_STORE.match(line)
        if not m or "!nontemporal" in line:
            continue
        lanes, elem, ptr, align = int(m.group(1)), m.group(2), m.group(3), int(m.group(4))
        if ptr not in derived and not seeds.fullmatch(ptr):
            continue
        size = lanes * (_ELEMENT_BYTES[elem] if elem in _ELEMENT_BYTES
                        else max(1, int(elem[1:]) // 8))
        if size >= 16 and size & (size - 1) == 0 and align >= min(size, STREAM_ALIGN):
            lines[n] = f"{line}, !nontemporal {md}"
            marked += 1
    if not marked:
        return optimized
    lines.append(f"{md} = !{{i32 1}}")
    return "\n".join(lines)


def reduction_tile(kernel: Kernel):
    """The CPU schedule's tile (rows, columns) of a tiled reduction, or None (also for an
    unscheduled kernel): the only schedule decision that changes the CPU's code."""
    return getattr(kernel.schedule, "tile", None)


class CPUEmitter(LLVMEmitter):
    """One kernel's module for the host CPU (see the module docstring)."""

    def __init__(self, kernel: Kernel, math: MathTarget, name: str):
        super().__init__(kernel, name)
        self.math = math
        self.tile = reduction_tile(kernel)
        self.vector_attrs: list = []   # "vector-function-abi-variant" attribute groups
        self.keep: list = []           # vector variants kept alive for the vectoriser
        self.inline_math = vmath.InlineMath(self.fw, self.mod, self.big_call,
                                            scalef=math.scalef)
        self.big_used = False          # big_call defined helpers (attribute groups #3, #4)
        self.grain = self.stream_grain()

    # ---- module / functions ------------------------------------------------------------
    def module(self) -> str:
        body = self.body_function()
        return "\n".join([f"; fastlaunch kernel: {self.k.label}", self.entry_function(), body,
                          self.footer(), ""])

    def stream_grain(self):
        """Launch indices per aligned step of a streaming kernel (CPUSchedule.stream), or None.

        From a launch index that is a multiple of the grain, each store's address moves in
        whole STREAM_ALIGN blocks (for a 1-D map of float32: 16).  A store whose address
        LLVM cannot then prove aligned stays an ordinary store."""
        if not (self.math.streaming_stores and getattr(self.k.schedule, "stream", False)) \
                or self.tile is not None or len(self.k.space) != 1:
            return None
        grain = 1
        for st in self.k.stores:
            step = abs(sum(c for atom, c in st.index.terms if atom == Loop(0)))
            step *= self.k.args[st.arg].dtype.itemsize
            grain = math.lcm(grain, STREAM_ALIGN // math.gcd(STREAM_ALIGN, step) if step else 1)
        return grain

    def entry_function(self) -> str:
        lines = [f"define void @{self.name}(i64 %start, i64 %end, ptr noalias nocapture readonly "
                 f"%args) #2 {{", "entry:"]
        words = []
        stored = sorted({st.arg for st in self.k.stores}) if self.grain is not None else []
        for i, a in enumerate(self.k.args):
            wt = word_type(a)
            w = f"%{STORED_WORD}{i}" if i in stored else f"%w{i}"
            lines.append(f"  %w{i}.p = getelementptr inbounds i64, ptr %args, i64 {i}")
            lines.append(f"  {w} = load {wt}, ptr %w{i}.p, align 8")
            words.append(f"{wt} {w}")
        body = f"@{self.name}.body"
        if self.grain is None:
            lines.append(f"  call void {body}(i64 %start, i64 %end, {', '.join(words)})")
            lines += ["  ret void", "}"]
            return "\n".join(lines)
        # Streaming: launch indices [start, mid) run as usual; [mid, end) run a second copy
        # of the body in which LLVM knows every stored buffer is STREAM_ALIGN-aligned and mid
        # a multiple of the grain, so the vectorised loop's stores carry their full alignment
        # and the backend marks them non-temporal.  mid = end when a buffer is not aligned
        # (a caller's array): then everything runs as usual.  The sfence orders the
        # non-temporal stores before the pool reports the chunk done.
        g = self.grain
        bits = "0"
        for j, i in enumerate(stored):
            lines.append(f"  %a{j} = ptrtoint ptr %{STORED_WORD}{i} to i64")
            lines.append(f"  %o{j} = or i64 {bits}, %a{j}")
            bits = f"%o{j}"
        lines += [f"  %low = and i64 {bits}, {STREAM_ALIGN - 1}",
                  "  %aligned = icmp eq i64 %low, 0",
                  f"  %up = add i64 %start, {g - 1}",
                  f"  %round = and i64 %up, {-g}",
                  "  %cut = call i64 @llvm.smin.i64(i64 %round, i64 %end)",
                  "  %mid = select i1 %aligned, i64 %cut, i64 %end",
                  f"  call void {body}(i64 %start, i64 %mid, {', '.join(words)})",
                  "  %more = icmp slt i64 %mid, %end",
                  "  br i1 %more, label %stream, label %done",
                  "stream:"]
        for i in stored:
            lines.append(f'  call void @llvm.assume(i1 true) '
                         f'["align"(ptr %{STORED_WORD}{i}, i64 {STREAM_ALIGN})]')
        lines += [f"  %midlow = and i64 %mid, {g - 1}",
                  "  %whole = icmp eq i64 %midlow, 0",
                  "  call void @llvm.assume(i1 %whole)",
                  f"  call void {body}(i64 %mid, i64 %end, {', '.join(words)})",
                  "  call void @llvm.x86.sse.sfence()",
                  "  br label %done",
                  "done:", "  ret void", "}", STREAM_MARK]
        self.mod.declare("llvm.smin.i64", "declare i64 @llvm.smin.i64(i64, i64)")
        self.mod.declare("llvm.assume", "declare void @llvm.assume(i1 noundef)")
        self.mod.declare("llvm.x86.sse.sfence", "declare void @llvm.x86.sse.sfence()")
        return "\n".join(lines)

    def body_function(self) -> str:
        params = ["i64 %start", "i64 %end"]
        for i, a in enumerate(self.k.args):
            if word_type(a) == "ptr":
                params.append(f"ptr noalias {self.buffer(i)}")
            else:
                params.append(f"{word_type(a)} {self.scalar_word(i)}")
        return (f"define internal void @{self.name}.body({', '.join(params)}) #0 {{\nentry:\n"
                + self.kernel_code() + "\n}")

    def footer(self) -> str:
        lines = self.mod.lines()
        if self.keep:
            keep = sorted(set(self.keep))
            lines.append(f"@llvm.compiler.used = appending global [{len(keep)} x ptr] ["
                         + ", ".join(f"ptr @{k}" for k in keep) + '], section "llvm.metadata"')
        lines += self.mod.implicit_lines()
        width = (f' "prefer-vector-width"="{self.math.vector_bits}"'
                 if self.math.vector_bits else "")
        lines.append("attributes #0 = { alwaysinline nounwind" + width + " }")
        # stackrealign: the entry aligns its frame to the widest vector, so that vector
        # spills (all registers are lost around a libmvec call) are never split across cache
        # lines.  Without it 64-byte spills are split in 3 of 4 processes or threads (the stack
        # is 16-byte aligned; where it lands is random): the optimisation step ran 1.4-4x
        # slower there (bench/README.md, "Stack alignment").
        lines.append("attributes #2 = { nounwind \"stackrealign\"" + width + " }")
        lines.append("attributes #1 = { nounwind willreturn memory(none) }")
        if self.big_used:
            lines.append("attributes #3 = { noinline nounwind willreturn memory(none) }")
            lines.append("attributes #4 = { alwaysinline nounwind willreturn memory(none)"
                         + width + " }")
        for i, a in enumerate(self.vector_attrs):
            lines.append(f"attributes #{10 + i} = {{ {a} }}")
        return "\n".join(lines)

    # ---- target hooks ------------------------------------------------------------------
    def launch_loop(self, body):
        self.fw.flat_range(list(self.k.space), "%start", "%end", [], body)

    def emit_launch(self):
        if self.tile is None:
            super().emit_launch()
            return
        self.acc_tile = self.fw.op(f"alloca [{self.tile[0] * self.tile[1]} x "
                                   f"{memory_type(self.k.reduction.acc_dtype)}], align 64", "tile")
        self.fw.counted_loop("%start", "%end", [], self.tiled_body)

    def report_error(self, word: str):
        self.fw.emit(f"atomicrmw or ptr {self.buffer(self.k.status)}, i64 {word} monotonic, "
                     f"align 8")

    def math_call(self, cname: str, dt: np.dtype, args: list) -> str:
        """Inline code (vmath.py) where the target allows it, else the library call."""
        if self.math.inline and vmath.supported(cname, dt) and \
                (self.math.inline_all or cname not in vmath.SLOWER_INLINE):
            return self.inline_math.emit(cname, dt, args[0])
        return self.library_call(cname, dt, args)

    def big_call(self, cname: str, dt: np.dtype, x: str, limit: float) -> str:
        """libm's cname(x) for the lanes where not |x| <= limit (vmath's fallback).

        A call of `fastlaunch.big.<fn>`, whose vector variants the vectoriser calls a vector
        at a time: each tests whether any lane is beyond the limit and only then calls libm
        lane by lane.  The scalar one is `noinline` (inlined before vectorisation, its branch
        would stop the vectoriser); the vector ones are inlined after it (CPUBackend runs the
        always-inliner after O3), leaving a compare and a rarely taken branch per vector."""
        self.big_used = True
        ty = llvm_type(dt)
        sfx = "f" if dt == np.float32 else ""
        libm = MATH_ALIAS_PREFIX + cname + sfx
        name = f"fastlaunch.big.{cname}{sfx}"
        bound = vmath._hex(limit, dt)
        self.mod.declare(libm, f"declare {ty} @{libm}({ty}) #1")
        fabs = f"llvm.fabs.{'f32' if dt == np.float32 else 'f64'}"
        self.mod.declare(fabs, f"declare {ty} @{fabs}({ty})")
        self.mod.declare(name, "\n".join([
            f"define internal {ty} @{name}({ty} %x) #3 {{",
            f"  %a = call {ty} @{fabs}({ty} %x)",
            f"  %big = fcmp ugt {ty} %a, {bound}",
            "  br i1 %big, label %slow, label %fast",
            "fast:", f"  ret {ty} 0.0",
            "slow:", f"  %v = call {ty} @{libm}({ty} %x)", f"  ret {ty} %v", "}"]))
        mangled = []
        for n in self.math.lane_counts(dt):
            vty = f"<{n} x {ty}>"
            vec = f"{name}.v{n}"
            vfabs = f"llvm.fabs.v{n}{'f32' if dt == np.float32 else 'f64'}"
            self.mod.declare(vfabs, f"declare {vty} @{vfabs}({vty})")
            lines = [f"define internal {vty} @{vec}({vty} %x) #4 {{",
                     f"  %a = call {vty} @{vfabs}({vty} %x)",
                     f"  %m = fcmp ugt {vty} %a, <{', '.join([f'{ty} {bound}'] * n)}>",
                     f"  %bits = bitcast <{n} x i1> %m to i{n}",
                     f"  %any = icmp ne i{n} %bits, 0",
                     "  br i1 %any, label %slow, label %fast",
                     "fast:", f"  ret {vty} zeroinitializer", "slow:"]
            acc = "poison"
            for lane in range(n):
                lines.append(f"  %x{lane} = extractelement {vty} %x, i32 {lane}")
                lines.append(f"  %y{lane} = call {ty} @{libm}({ty} %x{lane})")
                lines.append(f"  %v{lane} = insertelement {vty} {acc}, {ty} %y{lane}, i32 {lane}")
                acc = f"%v{lane}"
            lines += [f"  ret {vty} {acc}", "}"]
            self.mod.declare(vec, "\n".join(lines))
            self.keep.append(vec)
            mangled.append(f"_ZGV_LLVM_N{n}v_{name}({vec})")
        text = '"vector-function-abi-variant"="' + ",".join(mangled) + '"'
        if text not in self.vector_attrs:
            self.vector_attrs.append(text)
        return self.fw.op(f"call {ty} @{name}({ty} {x}) #{10 + self.vector_attrs.index(text)}")

    def library_call(self, cname: str, dt: np.dtype, args: list) -> str:
        """A call of the scalar alias, with the libmvec variants LLVM may vectorise it into."""
        fw = self.fw
        ty = llvm_type(dt)
        scalar = MATH_ALIAS_PREFIX + cname + ("f" if dt == np.float32 else "")
        params = ", ".join([ty] * len(args))
        self.mod.declare(scalar, f"declare {ty} @{scalar}({params}) #1")
        variants = self.math.variants(cname, dt, len(args))
        attr = ""
        if variants:
            mangled = []
            for width, vec in variants:
                vty = f"<{width} x {ty}>"
                self.mod.declare(vec, f"declare {vty} @{vec}({', '.join([vty] * len(args))}) #1")
                self.keep.append(vec)
                mangled.append(f"_ZGV_LLVM_N{width}{'v' * len(args)}_{scalar}({vec})")
            text = '"vector-function-abi-variant"="' + ",".join(mangled) + '"'
            if text not in self.vector_attrs:
                self.vector_attrs.append(text)
            attr = f" #{10 + self.vector_attrs.index(text)}"
        argtext = ", ".join(f"{ty} {a}" for a in args)
        return fw.op(f"call {ty} @{scalar}({argtext}){attr}")

    # ---- the tiled reduction -----------------------------------------------------------
    def tiled_body(self, idx, vals):
        """One tile of a tiled reduction: rows [m0, m0+rows) x columns [n0, n0+cols) of the
        output, folded over the whole rspace with the accumulators in a stack tile."""
        fw, k, r = self.fw, self.k, self.k.reduction
        rows_per, cols_per = self.tile
        space = list(k.space)
        ncols = space[-1]
        nrows = space[-2] if len(space) >= 2 else 1
        ntiles = -(-ncols // cols_per)
        nblocks = -(-nrows // rows_per)
        acc_dt = r.acc_dtype
        aty = memory_type(acc_dt)      # bool accumulators live in the tile as bytes, not bits
        out_dt = k.args[r.arg].dtype
        tile_i = fw.op(f"urem i64 {idx}, {ntiles}")

        def load_acc(ptr):
            v = fw.op(f"load {aty}, ptr {ptr}, align {acc_dt.itemsize}")
            return fw.op(f"icmp ne i8 {v}, 0") if acc_dt.kind == "b" else v

        def store_acc(v, ptr):
            if acc_dt.kind == "b":
                v = fw.op(f"zext i1 {v} to i8")
            fw.emit(f"store {aty} {v}, ptr {ptr}, align {acc_dt.itemsize}")
        rest = fw.op(f"udiv i64 {idx}, {ntiles}")
        block = fw.op(f"urem i64 {rest}, {nblocks}")
        rest = fw.op(f"udiv i64 {rest}, {nblocks}")
        outer = []
        for size in reversed(space[:-2]):
            outer.append(fw.op(f"urem i64 {rest}, {size}"))
            rest = fw.op(f"udiv i64 {rest}, {size}")
        outer.reverse()
        m0 = fw.op(f"mul nuw nsw i64 {block}, {rows_per}")
        n0 = fw.op(f"mul nuw nsw i64 {tile_i}, {cols_per}")
        rows = fw.op(f"call i64 @llvm.umin.i64(i64 {fw.op(f'sub i64 {nrows}, {m0}')}, i64 {rows_per})")
        cols = fw.op(f"call i64 @llvm.umin.i64(i64 {fw.op(f'sub i64 {ncols}, {n0}')}, i64 {cols_per})")
        init = self.reduce_init(r.op, acc_dt)
        if acc_dt.kind == "b":
            init = "1" if init == "true" else "0"

        def slot(i, c):
            at = fw.op(f"add nuw nsw i64 {fw.op(f'mul nuw nsw i64 {i}, {cols_per}')}, {c}")
            return fw.op(f"getelementptr inbounds {aty}, ptr {self.acc_tile}, i64 {at}", "a")

        def out_loops(i, c):
            row = fw.op(f"add nuw nsw i64 {m0}, {i}")
            col = fw.op(f"add nuw nsw i64 {n0}, {c}")
            return outer + ([row] if len(space) >= 2 else []) + [col]

        def each_cell(body):
            fw.counted_loop("0", rows, [], lambda i, _: fw.counted_loop(
                "0", cols, [], lambda c, __: body(i, c) or []) or [])

        each_cell(lambda i, c: fw.emit(f"store {aty} {init}, ptr {slot(i, c)}, align {acc_dt.itemsize}"))

        def fold(rloops, _):
            def cell(i, c):
                loops = out_loops(i, c) + list(rloops)
                memo: dict = {}
                v = self.convert(self.expr(r.value, loops, memo), r.value.dtype, acc_dt)
                ptr = slot(i, c)
                new = self.combine(r.op, acc_dt, load_acc(ptr), v)
                store_acc(new, ptr)
                if r.scan:
                    self.store_at(r.arg, self.index(r.index, loops, memo), new, acc_dt, out_dt)
            each_cell(cell)
            return []

        fw.nested_loops(list(k.rspace), [], fold)
        if not r.scan:
            def write(i, c):
                memo: dict = {}
                v = load_acc(slot(i, c))
                self.store_result(r, self.index(r.index, out_loops(i, c), memo), v, acc_dt)
            each_cell(write)
        return []

