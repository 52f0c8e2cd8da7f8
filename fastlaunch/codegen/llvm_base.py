"""Kernel description -> LLVM IR: the target-neutral part.

What a kernel computes is the same on every target: the LLVM types of dtypes, constants,
conversions, each op's lowering (NumPy's semantics, step for step), index and address
arithmetic, data-dependent picks with the error flag, stores and scatter modes, reduction
init/combine, and the loop body run at each point of the kernel's space.  `LLVMEmitter`
holds all of that and consumes only the fused kernel description (ir/kernel.py).

A target is a subclass that says how that code is reached and what it calls:

  module()            the module text: the kernel entry ABI around `kernel_code()`, the
                      declarations (`self.mod`) and the attributes the target wants
  launch_loop(body)   the loop driver: call body(indices, []) at every point of the space
                      this launch covers (the CPU: a [start, end) chunk of flat positions)
  emit_launch()       the launch's whole loop nest; by default launch_loop(point_body).  A
                      target with its own reduction schedule (the CPU's tiles) overrides it
  float_remainder()   fmod (LLVM's frem by default)
  math_call(...)      a float32/float64 math-library call (`MATH_FUNCTIONS` names the C
                      function of each op); float16 is widened before it is asked
  report_error(word)  OR the kernel's nonzero error word (KernelError bits) into the status
                      argument, once per launch
  buffer(i) / scalar_word(i)   the SSA names under which the code reaches argument i

Nothing here reads `kernel.schedule`: a backend's launch decisions reach the code only
through its target's hooks.  Nothing here knows about Python call signatures.

Size: over 1,000 lines: one emitter class (`LLVMEmitter`) whose hooks every target
overrides, with each op's lowering for every dtype; its methods call one another through
`self`, so a split (by op family, as mixins) is deferred until a third target needs it.
"""
from __future__ import annotations

import struct

import numpy as np

from ..ir.graph import Op
from ..ir.kernel import TRANSCENDENTAL, Compute, Const, DivMod, Folded, Index, IndexValue, Kernel
from ..ir.kernel import Load, Loop, Pick, Random, Reduced, Scalar, SMALL_SORT, sort_passes
from ..ir.kernel import KernelError, index_picks, walk
from .llvm_text import FunctionWriter

# The entry name in generated text; backends replace it by the kernel's cache-key name.
PLACEHOLDER_NAME = "__fastlaunch_kernel__"

# C math functions behind transcendental ops (float32 ones add "f": expf).  A target decides
# how they are reached (the CPU: aliases of libm and libmvec).
MATH_FUNCTIONS = {
    Op.CBRT: "cbrt", Op.EXP: "exp", Op.EXP2: "exp2", Op.EXPM1: "expm1", Op.LOG: "log",
    Op.LOG2: "log2", Op.LOG10: "log10", Op.LOG1P: "log1p", Op.SIN: "sin", Op.COS: "cos",
    Op.TAN: "tan", Op.ARCSIN: "asin", Op.ARCCOS: "acos", Op.ARCTAN: "atan", Op.SINH: "sinh",
    Op.COSH: "cosh", Op.TANH: "tanh", Op.ARCSINH: "asinh", Op.ARCCOSH: "acosh",
    Op.ARCTANH: "atanh", Op.POW: "pow", Op.ARCTAN2: "atan2", Op.HYPOT: "hypot",
    Op.NEXTAFTER: "nextafter", Op.ERF: "erf", Op.ERFC: "erfc", Op.LGAMMA: "lgamma",
}



# Philox4x32 multipliers and Weyl key increments (Random123)
_PHILOX_M0, _PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9 - (1 << 32), 0xBB67AE85 - (1 << 32)   # as signed i32


# Bytes of stack a row-fused kernel may use to keep a row of an expensive value between its
# phases (plan_row_cache).
ROW_CACHE_LIMIT = 65536


def llvm_type(dt: np.dtype) -> str:
    dt = np.dtype(dt)
    if dt.kind == "b":
        return "i1"
    if dt.kind in "iu":
        return f"i{dt.itemsize * 8}"
    if dt.kind == "c":       # a pair of floats; only loaded, stored and taken apart (REAL/IMAG)
        part = llvm_type(part_dtype(dt))
        return f"{{ {part}, {part} }}"
    return {2: "half", 4: "float", 8: "double"}[dt.itemsize]


def part_dtype(dt: np.dtype) -> np.dtype:
    """The float dtype of a complex dtype's real and imaginary parts."""
    return np.dtype(np.float32 if np.dtype(dt).itemsize == 8 else np.float64)


def memory_type(dt: np.dtype) -> str:
    return "i8" if np.dtype(dt).kind == "b" else llvm_type(dt)


def const_text(value, dt: np.dtype) -> str:
    dt = np.dtype(dt)
    if dt.kind == "b":
        return "true" if bool(value) else "false"
    if dt.kind in "iu":
        return str(int(np.array(value, dt).astype(np.int64 if dt.kind == "i" else np.uint64)))
    if dt.kind == "c":
        v, part = np.array(value, dt)[()], part_dtype(dt)
        ty = llvm_type(part)
        return f"{{ {ty} {const_text(v.real, part)}, {ty} {const_text(v.imag, part)} }}"
    if dt.itemsize == 2:
        return "0xH%04X" % np.array(value, np.float16).view(np.uint16)
    # LLVM writes float and double constants as the hex bits of the (exact) double value
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(np.array(value, dt))))[0]


def _int_limits(dt):
    info = np.iinfo(dt)
    return int(info.min), int(info.max)



def word_type(arg) -> str:
    """The LLVM type of a kernel argument's word: a pointer (buffers, the status word), or
    a scalar's 8-byte word, which holds it as float64 or int64 (kernel.Scalar)."""
    if arg.kind in ("buffer", "status"):
        return "ptr"
    return "double" if arg.dtype.kind == "f" else "i64"


class Declarations:
    """The module-level declarations and helper definitions that one kernel's code uses,
    each once, keyed by name."""

    def __init__(self):
        self.decls: dict = {}

    def declare(self, name: str, signature: str):
        self.decls.setdefault(name, signature)

    def intrinsic(self, fw: FunctionWriter, name: str, ret: str, args: list) -> str:
        self.declare(name, f"declare {ret} @{name}({', '.join(t for t, _ in args)})")
        return fw.op(f"call {ret} @{name}({', '.join(f'{t} {v}' for t, v in args)})")

    def lines(self) -> list:
        """The declarations, in a fixed order."""
        return sorted(self.decls.values())

    def implicit_lines(self) -> list:
        """Declarations of what llvm_text's loop helpers call without declaring."""
        return [] if "llvm.umin.i64" in self.decls else ["declare i64 @llvm.umin.i64(i64, i64)"]


class LLVMEmitter:
    """One kernel's code for one target (see the module docstring for the hooks)."""

    def __init__(self, kernel: Kernel, name: str = PLACEHOLDER_NAME):
        self.k = kernel
        self.row_cache: list = []        # plan_row_cache()
        self.name = name
        self.mod = Declarations()
        self.fw = FunctionWriter()
        self.sort_hist = None      # a sort's digit histograms (kernel_code allocates them)

    # A long row's radix sort: digits of SORT_DIGIT_BITS bits; with SORT_COUNT_PER_PASS the
    # one histogram is counted again before each pass (a target whose per-thread arrays are
    # costly: 2**bits counters in all), else every pass's histogram is counted in the pass
    # that loads the row (passes * 2**bits counters).
    SORT_DIGIT_BITS = 8
    SORT_COUNT_PER_PASS = False

    def radix_passes(self, dt: np.dtype) -> int:
        return sort_passes(dt) * 8 // self.SORT_DIGIT_BITS

    def sort_hist_size(self, dt: np.dtype) -> int:
        """Counters in a long row's sort histograms (per thread of the launch)."""
        return (1 << self.SORT_DIGIT_BITS) * (1 if self.SORT_COUNT_PER_PASS
                                              else self.radix_passes(dt))

    # ---- target hooks ------------------------------------------------------------------
    def module(self) -> str:
        """The whole module text (the kernel entry ABI around kernel_code())."""
        raise NotImplementedError

    def launch_loop(self, body):
        """Call body(indices, []) at every point of the kernel's space that this launch
        covers; indices are i64 values, one per space dim."""
        raise NotImplementedError

    def math_call(self, cname: str, dt: np.dtype, args: list) -> str:
        """The value of C math function `cname` (+"f" for float32) on args of dtype dt
        (float32 or float64)."""
        raise NotImplementedError

    def report_error(self, word: str):
        """OR the i64 error word (nonzero KernelError bits) into the status argument."""
        raise NotImplementedError

    def float_remainder(self, dt: np.dtype, a: str, b: str) -> str:
        """C's fmod(a, b), exactly (LLVM's frem; a target whose frem is approximate, such as
        NVPTX's a - trunc(a/b)*b, calls its library instead)."""
        return self.fw.op(f"frem {llvm_type(dt)} {a}, {b}")

    def emit_launch(self):
        """The launch's loop nest: the loop driver over the point body."""
        self.launch_loop(self.point_body)

    def buffer(self, arg: int) -> str:
        """The pointer value of buffer (or status) argument `arg` inside the kernel code."""
        return f"%p{arg}"

    def scalar_word(self, arg: int) -> str:
        """The 8-byte word value of scalar argument `arg` inside the kernel code."""
        return f"%s{arg}.w"

    # ---- the kernel's code ---------------------------------------------------------------
    def kernel_code(self) -> str:
        """The instructions of the function that runs one launch (from after its `entry:`
        label to its `ret void`): scalar arguments, the error flag, the loops."""
        fw = self.fw
        self.scalars = {}
        for i, a in enumerate(self.k.args):
            if a.kind == "scalar":
                self.scalars[i] = self.word_to_value(self.scalar_word(i), a.dtype)
        if self.k.status is not None:
            # a local flag: SROA turns it into a register, so checked loops still vectorise
            fw.emit("%errflag = alloca i8, align 1")
            fw.emit("store i8 0, ptr %errflag, align 1")
        self.row_cache = self.plan_row_cache()
        s = self.k.sort
        if s is not None and self.k.rspace[0] > SMALL_SORT:
            # the histograms, allocated once per launch (in the entry block: not per row)
            cty = "i32" if self.k.rspace[0] < 2 ** 31 else "i64"
            self.sort_hist = fw.op(f"alloca [{self.sort_hist_size(s.value.dtype)} x {cty}], "
                                   f"align 16", "hist")
        self.emit_launch()
        if self.k.status is not None:
            flag = fw.op("load i8, ptr %errflag, align 1")
            report, done = fw.label("report"), fw.label("exit")
            fw.cond_br(fw.op(f"icmp ne i8 {flag}, 0"), report, done)
            fw.start(report)
            self.report_error(fw.op(f"zext i8 {flag} to i64"))
            fw.br(done)
            fw.start(done)
        fw.emit("ret void")
        return fw.text()

    def call_math(self, cname: str, dt: np.dtype, args: list) -> str:
        """A C math function; half goes through float, as NumPy's float16 loops do."""
        fw = self.fw
        if dt == np.float16:
            wide = [fw.op(f"fpext half {a} to float") for a in args]
            r = self.call_math(cname, np.dtype(np.float32), wide)
            return fw.op(f"fptrunc float {r} to half")
        return self.math_call(cname, dt, args)

    def emit_op(self, op: Op, out: np.dtype, args: list, dts: list) -> str:
        """The value of elementwise `op` (result dtype out) on args of loop dtypes dts."""
        return lower_op(self, op, out, args, dts)

    def point_body(self, loops, vals):
        """The code at one point of the space: the prelude's phases (each a full loop over
        the rspace), then stores, or one output's reduction; or a row's sort."""
        if self.k.sort is not None:
            return self.sort_body(loops, vals)
        self.folded = []
        for ph in self.k.prelude:
            self.folded.append(self.phase(ph, loops))
        if self.k.reduction is None:
            if self.k.rspace:      # a row-fused map: stores at every point of the row
                self.fw.nested_loops(list(self.k.rspace), [], lambda inner, _: self.map_body(
                    list(loops) + list(inner), []))
                return []
            return self.map_body(loops, vals)
        return self.reduce_body(loops, vals)

    def plan_row_cache(self) -> list:
        """Expensive values (math calls) that a prelude phase computes and a later phase or the
        body needs again at the same point (softmax's exp(x - max)): the phase keeps the row
        of them in a stack array, the later code loads them from it.  [(expr, phase, ptr)]"""
        k = self.k
        if not k.prelude or not k.rspace:
            return []
        rsize = int(np.prod(k.rspace, dtype=np.int64))
        later: dict = {}
        roots = [s.value for s in k.stores] + ([k.reduction.value] if k.reduction else [])
        for i in range(len(k.prelude), -1, -1):          # ids used from phase i on
            if i < len(k.prelude):
                roots = roots + [k.prelude[i].value]
            later[i] = {id(e) for e in walk(roots)}
        out, done, total = [], set(), 0
        for i, ph in enumerate(k.prelude):
            for e in walk([ph.value]):
                if (id(e) in done or id(e) not in later.get(i + 1, set())
                        or not (isinstance(e, Compute) and e.op in TRANSCENDENTAL)
                        or e.dtype.kind != "f" or e.dtype.itemsize < 4):
                    continue
                total += rsize * e.dtype.itemsize
                if total > ROW_CACHE_LIMIT:
                    return out
                done.add(id(e))
                ptr = self.fw.op(f"alloca [{rsize} x {memory_type(e.dtype)}], align 64", "row")
                out.append((e, i, ptr))
        return out

    def cached_row_value(self, entry, loops, memo, value=None):
        """Store (value given) or load one row-cache element at the current rspace point."""
        e, _, ptr = entry
        nspace = len(self.k.space)
        flat = self.flat_position(loops, nspace, list(self.k.rspace), memo)
        ty = memory_type(e.dtype)
        at = self.fw.op(f"getelementptr inbounds {ty}, ptr {ptr}, i64 {flat}", "a")
        if value is not None:
            self.fw.emit(f"store {ty} {value}, ptr {at}, align {e.dtype.itemsize}")
            return value
        return self.fw.op(f"load {ty}, ptr {at}, align {e.dtype.itemsize}")

    def seed(self, loops, memo, before_phase=None):
        """Pre-load the row-cached values computed by earlier phases into an iteration's memo."""
        for entry in self.row_cache:
            if before_phase is None or entry[1] < before_phase:
                memo[id(entry[0])] = self.cached_row_value(entry, loops, memo)

    def phase(self, ph, outer) -> str:
        """One prelude phase's fold over the rspace at this point of the space."""
        index = len(self.folded)

        def step(inner, acc):
            memo: dict = {}
            loops = list(outer) + list(inner)
            self.seed(loops, memo, before_phase=index)
            v = self.convert(self.expr(ph.value, loops, memo), ph.value.dtype, ph.acc)
            for entry in self.row_cache:
                if entry[1] == index:
                    self.cached_row_value(entry, loops, memo, memo[id(entry[0])])
            return [self.combine(ph.op, ph.acc, acc[0], v)]
        return self.fw.nested_loops(list(self.k.rspace),
                                    [(llvm_type(ph.acc), self.reduce_init(ph.op, ph.acc))],
                                    step)[0]

    def unflatten(self, flat: str, sizes) -> list:
        """The C-order indices of flat position `flat` of an N-d space (a loop driver that
        visits one flat point at a time, such as a grid-stride loop)."""
        fw, out = self.fw, []
        for size in reversed(sizes[1:]):
            out.append(fw.op(f"urem i64 {flat}, {size}"))
            flat = fw.op(f"udiv i64 {flat}, {size}")
        return ([flat] if sizes else []) + out[::-1]

    # ---- arguments -----------------------------------------------------------------------
    def word_to_value(self, word: str, dt: np.dtype) -> str:
        fw = self.fw
        if dt.kind == "f":
            return word if dt.itemsize == 8 else fw.op(f"fptrunc double {word} to {llvm_type(dt)}")
        if dt.kind == "b":
            return fw.op(f"icmp ne i64 {word}, 0")
        return word if dt.itemsize == 8 else fw.op(f"trunc i64 {word} to {llvm_type(dt)}")

    # ---- loop bodies -------------------------------------------------------------------
    def map_body(self, loops, vals):
        memo: dict = {}
        self.seed(loops, memo)
        for ix in self.k.checks:
            self.index(ix, loops, memo)
        values = [(s, self.expr(s.value, loops, memo)) for s in self.k.stores]
        # all loads of an iteration come before its stores: an in-place update reads old values
        for s, v in values:
            self.store(s, loops, memo, v)
        return []

    def reduce_body(self, outer, vals):
        r = self.k.reduction
        fw = self.fw
        acc_dt = r.acc_dtype
        nspace = len(self.k.space)
        rsizes = list(self.k.rspace)
        arg_like = r.op in (Op.ARGMAX, Op.ARGMIN)
        out_dt = self.k.args[r.arg].dtype
        carried = [(llvm_type(acc_dt), self.reduce_init(r.op, acc_dt))]
        if arg_like:
            carried.append(("i64", "0"))

        def step(inner, acc):
            loops = list(outer) + list(inner)
            memo: dict = {}
            self.seed(loops, memo)
            v = self.convert(self.expr(r.value, loops, memo), r.value.dtype, acc_dt)
            # sibling outputs (fuse: a map over the reduction's whole loop nest) share the
            # point's loads and subexpressions with the reduced value
            values = [(s, self.expr(s.value, loops, memo)) for s in self.k.stores]
            for s, sv in values:
                self.store(s, loops, memo, sv)
            if arg_like:
                flat = self.flat_position(loops, nspace, rsizes, memo)
                return self.arg_step(r.op, acc_dt, acc, v, flat)
            new = self.combine(r.op, acc_dt, acc[0], v)
            if r.scan:
                self.store_at(r.arg, self.index(r.index, loops, memo), new, acc_dt, out_dt)
            return [new]

        if r.chunk:
            c = outer[nspace - 1]
            total = int(np.prod(rsizes, dtype=np.int64))
            lo = fw.op(f"mul nuw nsw i64 {c}, {r.chunk}")
            hi = fw.op(f"add nuw nsw i64 {lo}, {r.chunk}")
            hi = fw.op(f"call i64 @llvm.umin.i64(i64 {hi}, i64 {total})")
            result = fw.flat_range(rsizes, lo, hi, carried, step)
        else:
            result = fw.nested_loops(rsizes, carried, step)
        if r.scan:
            return []
        memo: dict = {}
        if arg_like:
            value, vdt = result[1], np.dtype(np.int64)
        else:
            value, vdt = result[0], acc_dt
        self.store_result(r, self.index(r.index, outer, memo), value, vdt)
        return []

    def store_result(self, r, index: str, value: str, vdt: np.dtype):
        """Store a reduction's result (value, of dtype vdt) at one output: the result itself,
        or with an epilogue (r.then) the epilogue's value, computed from the result converted
        as its own buffer would have held it (`Reduced`)."""
        out_dt = self.k.args[r.arg].dtype
        if r.then is not None:
            memo = {id(e): self.convert(value, vdt, e.dtype)
                    for e in walk([r.then]) if isinstance(e, Reduced)}
            value, vdt = self.expr(r.then, [], memo), r.then.dtype
        self.store_at(r.arg, index, value, vdt, out_dt)

    # ---- sorting -----------------------------------------------------------------------
    def sort_key(self, x: str, dt: np.dtype, ty: str) -> str:
        """The unsigned integer whose order is NumPy's sort order of the value with bits x:
        ints with the sign bit flipped; floats by sign and magnitude, -0.0 as 0.0, every NaN
        as the largest key (NaNs last, in their original order)."""
        fw = self.fw
        if dt.kind in "ub":
            return x
        bits = int(ty[1:])
        sign = _signed(1 << (bits - 1), bits)
        if dt.kind == "i":
            return fw.op(f"xor {ty} {x}, {sign}")
        inf = {16: 0x7C00, 32: 0x7F800000, 64: 0x7FF0000000000000}[bits]
        mag = fw.op(f"and {ty} {x}, {_signed((1 << (bits - 1)) - 1, bits)}")
        neg = fw.op(f"icmp slt {ty} {x}, 0")
        flipped = fw.op(f"xor {ty} {x}, -1")
        pos = fw.op(f"or {ty} {x}, {sign}")
        k = fw.op(f"select i1 {neg}, {ty} {flipped}, {ty} {pos}")
        zero = fw.op(f"icmp eq {ty} {mag}, 0")
        k = fw.op(f"select i1 {zero}, {ty} {sign}, {ty} {k}")
        nan = fw.op(f"icmp ugt {ty} {mag}, {inf}")
        return fw.op(f"select i1 {nan}, {ty} -1, {ty} {k}")

    def sort_body(self, loops, vals):
        """One row of a Sort: the values into this row's scratch (with their positions and,
        for long rows, the digit histograms), sorted there, then stored."""
        fw, k, s = self.fw, self.k, self.k.sort
        n = k.rspace[0]
        dt = s.value.dtype
        ty = "i8" if dt.kind == "b" else f"i{dt.itemsize * 8}"
        out_dt = k.args[s.arg].dtype
        row = self.flat_position(loops, 0, list(k.space), {}) if k.space else "0"
        base = fw.op(f"mul nsw i64 {row}, {2 * n}")
        k0 = fw.op(f"getelementptr inbounds {ty}, ptr {self.buffer(s.scratch)}, i64 {base}")
        k1 = fw.op(f"getelementptr inbounds {ty}, ptr {k0}, i64 {n}")
        nspace = len(k.space)
        in_place = (not s.positions and s.index.is_affine
                    and s.index.coef(Loop(nspace)) == 1)
        if in_place:
            # the output row is contiguous: sort there (its radix passes ping-pong with the
            # scratch), and copy only when the last pass ended in the scratch
            k0 = self.address(s.arg, self.index(s.index, list(loops) + ["0"], {}), out_dt)
        p0 = p1 = None
        if s.positions:
            p0 = fw.op(f"getelementptr inbounds i64, ptr {self.buffer(s.pscratch)}, i64 {base}")
            p1 = fw.op(f"getelementptr inbounds i64, ptr {p0}, i64 {n}")
        radix = n > SMALL_SORT
        npass = self.radix_passes(dt)
        dbits = self.SORT_DIGIT_BITS
        per_pass = self.SORT_COUNT_PER_PASS
        cty = "i32" if n < 2 ** 31 else "i64"
        hist = self.sort_hist
        if radix and not per_pass:
            self._clear_hist(cty, self.sort_hist_size(dt))

        def digit_ptr(key, p):
            d = fw.op(f"lshr {ty} {key}, {dbits * p}") if p else key
            d = fw.op(f"and {ty} {d}, {(1 << dbits) - 1}")
            d = fw.op(f"zext {ty} {d} to i64") if ty != "i64" else d
            if p and not per_pass:
                d = fw.op(f"add nuw nsw i64 {d}, {(1 << dbits) * p}")
            return fw.op(f"getelementptr inbounds {cty}, ptr {hist}, i64 {d}")

        def load_row(r, _):
            memo: dict = {}
            v = self.expr(s.value, list(loops) + [r], memo)
            if dt.kind == "b":
                bits = fw.op(f"zext i1 {v} to i8")
            elif dt.kind == "f":
                bits = fw.op(f"bitcast {llvm_type(dt)} {v} to {ty}")
            else:
                bits = v
            fw.emit(f"store {ty} {bits}, ptr {fw.op(f'getelementptr inbounds {ty}, ptr {k0}, i64 {r}')}")
            if p0 is not None:
                fw.emit(f"store i64 {r}, ptr {fw.op(f'getelementptr inbounds i64, ptr {p0}, i64 {r}')}")
            if radix and not per_pass:
                key = self.sort_key(bits, dt, ty)
                for p in range(npass):
                    h = digit_ptr(key, p)
                    c = fw.op(f"load {cty}, ptr {h}")
                    fw.emit(f"store {cty} {fw.op(f'add {cty} {c}, 1')}, ptr {h}")
            return []

        fw.counted_loop("0", str(n), [], load_row)
        if radix:
            cur, nxt = (k0, p0), (k1, p1)
            for p in range(npass):
                cur, nxt = self._radix_pass(p, n, dt, ty, cty, hist, cur, nxt, digit_ptr)
        else:
            self._insertion_sort(n, dt, ty, k0, p0)
            cur = (k0, p0)

        def store_row(r, _):
            memo: dict = {}
            if s.positions:
                v = fw.op(f"load i64, ptr {fw.op(f'getelementptr inbounds i64, ptr {cur[1]}, i64 {r}')}")
                vdt = np.dtype(np.int64)
            else:
                bits = fw.op(f"load {ty}, ptr {fw.op(f'getelementptr inbounds {ty}, ptr {cur[0]}, i64 {r}')}")
                if dt.kind == "b":
                    v = fw.op(f"icmp ne i8 {bits}, 0")
                elif dt.kind == "f":
                    v = fw.op(f"bitcast {ty} {bits} to {llvm_type(dt)}")
                else:
                    v = bits
                vdt = dt
            self.store_at(s.arg, self.index(s.index, list(loops) + [r], memo), v, vdt, out_dt)
            return []

        if in_place:
            moved = fw.op(f"icmp ne ptr {cur[0]}, {k0}")
            copy, done = fw.label("copyback"), fw.label("sorted")
            fw.cond_br(moved, copy, done)
            fw.start(copy)
            fw.counted_loop("0", str(n), [], store_row)
            fw.br(done)
            fw.start(done)
            return []
        fw.counted_loop("0", str(n), [], store_row)
        return []

    def _radix_pass(self, p, n, dt, ty, cty, hist, cur, nxt, digit_ptr):
        """One stable counting pass on digit p from cur into nxt (keys, positions), skipped
        when the whole row shares that digit; returns the (cur, nxt) pointers after it."""
        fw = self.fw
        radix = 1 << self.SORT_DIGIT_BITS
        if self.SORT_COUNT_PER_PASS:
            # this pass's histogram, counted from the row as the last pass left it
            self._clear_hist(cty, radix)

            def count_row(r, _):
                x = fw.op(f"load {ty}, ptr {fw.op(f'getelementptr inbounds {ty}, ptr {cur[0]}, i64 {r}')}")
                h = digit_ptr(self.sort_key(x, dt, ty), p)
                c = fw.op(f"load {cty}, ptr {h}")
                fw.emit(f"store {cty} {fw.op(f'add {cty} {c}, 1')}, ptr {h}")
                return []
            fw.counted_loop("0", str(n), [], count_row)
            offset = 0
        else:
            offset = radix * p
        first = fw.op(f"load {ty}, ptr {cur[0]}")
        count = fw.op(f"load {cty}, ptr {digit_ptr(self.sort_key(first, dt, ty), p)}")
        skip = fw.op(f"icmp eq {cty} {count}, {n}")
        pre = fw.block
        run, merge = fw.label("pass"), fw.label("passed")
        fw.cond_br(skip, merge, run)
        fw.start(run)
        bucket0 = fw.op(f"getelementptr inbounds {cty}, ptr {hist}, i64 {offset}")

        def prefix(b, acc):       # exclusive prefix sums: each digit's first output position
            h = fw.op(f"getelementptr inbounds {cty}, ptr {bucket0}, i64 {b}")
            c = fw.op(f"load {cty}, ptr {h}")
            fw.emit(f"store {cty} {acc[0]}, ptr {h}")
            return [fw.op(f"add {cty} {acc[0]}, {c}")]

        fw.counted_loop("0", str(radix), [(cty, "0")], prefix)

        def scatter(r, _):
            x = fw.op(f"load {ty}, ptr {fw.op(f'getelementptr inbounds {ty}, ptr {cur[0]}, i64 {r}')}")
            h = digit_ptr(self.sort_key(x, dt, ty), p)
            o = fw.op(f"load {cty}, ptr {h}")
            fw.emit(f"store {cty} {fw.op(f'add {cty} {o}, 1')}, ptr {h}")
            o64 = fw.op(f"zext {cty} {o} to i64") if cty != "i64" else o
            fw.emit(f"store {ty} {x}, ptr {fw.op(f'getelementptr inbounds {ty}, ptr {nxt[0]}, i64 {o64}')}")
            if cur[1] is not None:
                q = fw.op(f"load i64, ptr {fw.op(f'getelementptr inbounds i64, ptr {cur[1]}, i64 {r}')}")
                fw.emit(f"store i64 {q}, ptr {fw.op(f'getelementptr inbounds i64, ptr {nxt[1]}, i64 {o64}')}")
            return []

        fw.counted_loop("0", str(n), [], scatter)
        done = fw.block
        fw.br(merge)
        fw.start(merge)
        out_cur, out_nxt = [], []
        for a, b in zip(cur, nxt):
            if a is None:
                out_cur.append(None)
                out_nxt.append(None)
                continue
            out_cur.append(fw.op(f"phi ptr [ {a}, %{pre} ], [ {b}, %{done} ]"))
            out_nxt.append(fw.op(f"phi ptr [ {b}, %{pre} ], [ {a}, %{done} ]"))
        return tuple(out_cur), tuple(out_nxt)

    def _clear_hist(self, cty: str, size: int):
        """Zero the first `size` histogram counters by a plain loop (a memset to the CPU's
        optimiser; NVPTX has no memset)."""
        fw, hist = self.fw, self.sort_hist

        def clear(b, _):
            fw.emit(f"store {cty} 0, ptr {fw.op(f'getelementptr inbounds {cty}, ptr {hist}, i64 {b}')}")
            return []
        fw.counted_loop("0", str(size), [], clear)

    def _insertion_sort(self, n, dt, ty, keys, pos):
        """Stable insertion sort of a short row in place (keys, and positions if any)."""
        fw = self.fw

        def at(ptr, t, i):
            return fw.op(f"getelementptr inbounds {t}, ptr {ptr}, i64 {i}")

        def outer(i, _):
            x = fw.op(f"load {ty}, ptr {at(keys, ty, i)}")
            kx = self.sort_key(x, dt, ty)
            px = fw.op(f"load i64, ptr {at(pos, 'i64', i)}") if pos is not None else None
            pre = fw.block
            head, check, shift, done = (fw.label("ins"), fw.label("cmp"), fw.label("shift"),
                                        fw.label("place"))
            fw.br(head)
            fw.start(head)
            j = fw.fresh("j")
            slot = fw.placeholder()
            fw.cond_br(fw.op(f"icmp sgt i64 {j}, 0"), check, done)
            fw.start(check)
            jm1 = fw.op(f"sub nsw i64 {j}, 1")
            y = fw.op(f"load {ty}, ptr {at(keys, ty, jm1)}")
            gt = fw.op(f"icmp ugt {ty} {self.sort_key(y, dt, ty)}, {kx}")
            fw.cond_br(gt, shift, done)
            fw.start(shift)
            fw.emit(f"store {ty} {y}, ptr {at(keys, ty, j)}")
            if pos is not None:
                py = fw.op(f"load i64, ptr {at(pos, 'i64', jm1)}")
                fw.emit(f"store i64 {py}, ptr {at(pos, 'i64', j)}")
            fw.br(head)
            fw.fill(slot, f"{j} = phi i64 [ {i}, %{pre} ], [ {jm1}, %{shift} ]")
            fw.start(done)
            fw.emit(f"store {ty} {x}, ptr {at(keys, ty, j)}")
            if pos is not None:
                fw.emit(f"store i64 {px}, ptr {at(pos, 'i64', j)}")
            return []

        fw.counted_loop("1", str(n), [], outer)

    def flat_position(self, loops, first, sizes, memo) -> str:
        """C-order position within the reduction loops (dims first, first+1, ...)."""
        total = Index()
        radix = 1
        for d in reversed(range(len(sizes))):
            total = total + Index.loop(first + d).scale(radix)
            radix *= sizes[d]
        return self.index(total, loops, memo)

    # ---- reductions --------------------------------------------------------------------
    def reduce_init(self, op: Op, dt: np.dtype) -> str:
        if op is Op.SUM and dt.kind == "f" and all(self.k.rspace):
            return const_text(-0.0, dt)   # x + -0.0 is x: a fold of [-0.0] stays -0.0, as in NumPy
        if op in (Op.SUM, Op.ANY):
            return const_text(0, dt)
        if op in (Op.PROD, Op.ALL):
            return const_text(1, dt)
        big = op in (Op.MIN, Op.ARGMIN)
        if dt.kind == "f":
            return const_text(np.inf if big else -np.inf, dt)
        if dt.kind == "b":
            return const_text(big, dt)
        lo, hi = _int_limits(dt)
        return const_text(hi if big else lo, dt)

    def combine(self, op: Op, dt: np.dtype, acc: str, v: str) -> str:
        fw, ty = self.fw, llvm_type(dt)
        if dt.kind == "b":
            return fw.op(f"{'or' if op in (Op.SUM, Op.MAX, Op.ANY) else 'and'} i1 {acc}, {v}")
        if op in (Op.SUM, Op.PROD):
            if dt.kind == "f" and op is Op.SUM:
                # reassociation lets LLVM keep several partial sums in vectors
                return fw.op(f"fadd reassoc {ty} {acc}, {v}")
            if dt.kind == "f":
                # one product at a time, in order, as NumPy's multiply.reduce: where a
                # partial product overflows or underflows, the order decides between inf, 0
                # and NaN (inf * 0), not only the last bits
                return fw.op(f"fmul {ty} {acc}, {v}")
            return fw.op(f"{'add' if op is Op.SUM else 'mul'} {ty} {acc}, {v}")
        if op in (Op.MAX, Op.MIN):
            if dt.kind == "f":
                name = f"llvm.{'maximum' if op is Op.MAX else 'minimum'}.{_suffix(dt)}"
            else:
                sign = "s" if dt.kind == "i" else "u"
                name = f"llvm.{sign}{'max' if op is Op.MAX else 'min'}.{ty}"
            return self.mod.intrinsic(fw, name, ty, [(ty, acc), (ty, v)])
        raise NotImplementedError(op)

    def arg_step(self, op: Op, dt: np.dtype, acc, v: str, pos: str):
        fw, ty = self.fw, llvm_type(dt)
        best, best_pos = acc
        if dt.kind == "f":
            cmp = "ogt" if op is Op.ARGMAX else "olt"
            better = fw.op(f"fcmp {cmp} {ty} {v}, {best}")
            v_nan = fw.op(f"fcmp uno {ty} {v}, {v}")
            best_ok = fw.op(f"fcmp ord {ty} {best}, {best}")
            first_nan = fw.op(f"and i1 {v_nan}, {best_ok}")
            take = fw.op(f"or i1 {better}, {first_nan}")
        else:
            sign = "s" if dt.kind == "i" else "u"
            take = fw.op(f"icmp {sign}{'gt' if op is Op.ARGMAX else 'lt'} {ty} {v}, {best}")
        return [fw.op(f"select i1 {take}, {ty} {v}, {ty} {best}"),
                fw.op(f"select i1 {take}, i64 {pos}, i64 {best_pos}")]

    # ---- memory ------------------------------------------------------------------------
    def address(self, arg: int, index: str, dt: np.dtype) -> str:
        return self.fw.op(f"getelementptr inbounds {memory_type(dt)}, ptr {self.buffer(arg)}, "
                          f"i64 {index}", "a")

    def store_at(self, arg: int, index: str, value: str, vdt: np.dtype, dt: np.dtype):
        """Store value (of dtype vdt) converted to the argument's dtype dt."""
        value = self.convert(value, vdt, dt)
        ptr = self.address(arg, index, dt)
        if dt.kind == "c":
            self.store_complex(ptr, value, dt)
            return
        if dt.kind == "b":
            value = self.fw.op(f"zext i1 {value} to i8")
        self.fw.emit(f"store {memory_type(dt)} {value}, ptr {ptr}, align {dt.itemsize}")

    # A complex value is a { T, T } SSA value, but memory is reached one part at a time: two
    # scalar loads or stores at stride 2, which the vectoriser treats as interleaved accesses
    # (InstCombine folds the insertvalue/extractvalue pairs away).
    def load_complex(self, ptr: str, dt: np.dtype) -> str:
        fw, part = self.fw, part_dtype(dt)
        ty, al = llvm_type(part), part.itemsize
        re = fw.op(f"load {ty}, ptr {ptr}, align {al}")
        im = fw.op(f"load {ty}, ptr {fw.op(f'getelementptr inbounds {ty}, ptr {ptr}, i64 1')}, align {al}")
        return self.make_complex(re, im, dt)

    def make_complex(self, re: str, im: str, dt: np.dtype) -> str:
        fw, cty, ty = self.fw, llvm_type(dt), llvm_type(part_dtype(dt))
        v = fw.op(f"insertvalue {cty} poison, {ty} {re}, 0")
        return fw.op(f"insertvalue {cty} {v}, {ty} {im}, 1")

    def store_complex(self, ptr: str, value: str, dt: np.dtype):
        fw, part = self.fw, part_dtype(dt)
        ty, al = llvm_type(part), part.itemsize
        re = fw.op(f"extractvalue {llvm_type(dt)} {value}, 0")
        im = fw.op(f"extractvalue {llvm_type(dt)} {value}, 1")
        fw.emit(f"store {ty} {re}, ptr {ptr}, align {al}")
        fw.emit(f"store {ty} {im}, ptr {fw.op(f'getelementptr inbounds {ty}, ptr {ptr}, i64 1')}, align {al}")

    def store(self, s, loops, memo, value: str):
        """A kernel Store: plain, or combining with the old element (scatter modes); a store
        whose data-dependent index is out of range is skipped (the error flag is raised)."""
        fw = self.fw
        dt = self.k.args[s.arg].dtype
        index = self.index(s.index, loops, memo)
        bad = [memo[("bad", id(p.expr), p.size, p.strict)] for p in index_picks(s.index)]
        done = None
        if bad:
            any_bad = bad[0]
            for b in bad[1:]:
                any_bad = fw.op(f"or i1 {any_bad}, {b}")
            write, done = fw.label("write"), fw.label("skip")
            fw.cond_br(any_bad, done, write)
            fw.start(write)
        if s.mode != "set":
            if dt.kind == "c":      # complexops splits scatter-adds of complex into parts
                raise NotImplementedError(f"scatter mode {s.mode} on {dt}")
            self.store_combined(s.mode, s.arg, index, value, dt)
        else:
            self.store_at(s.arg, index, value, dt, dt)
        if done is not None:
            fw.br(done)
            fw.start(done)

    def store_combined(self, mode: str, arg: int, index: str, value: str, dt: np.dtype):
        """arg[index] = arg[index] <mode> value (value of dtype dt): a read, the op and a
        write (a target whose schedule runs a scatter concurrently makes it one atomic)."""
        fw = self.fw
        ptr = self.address(arg, index, dt)
        old = fw.op(f"load {memory_type(dt)}, ptr {ptr}, align {dt.itemsize}")
        if dt.kind == "b":
            old = fw.op(f"icmp ne i8 {old}, 0")
        op = {"add": Op.ADD, "mul": Op.MUL, "max": Op.MAXIMUM, "min": Op.MINIMUM}[mode]
        self.store_at(arg, index, self.emit_op(op, dt, [old, value], [dt, dt]), dt, dt)

    def index(self, ix: Index, loops, memo) -> str:
        key = ("ix", ix)
        if key in memo:
            return memo[key]
        fw = self.fw
        acc = None
        for atom, coef in ix.terms:
            if isinstance(atom, Loop):
                a = loops[atom.dim]
            elif isinstance(atom, DivMod):
                a = self.divmod(atom, loops, memo)
            else:
                a = self.pick(atom, loops, memo)
            term = a if coef == 1 else fw.op(f"mul nsw i64 {a}, {coef}")
            acc = term if acc is None else fw.op(f"add nsw i64 {acc}, {term}")
        if acc is None:
            result = str(ix.const)
        elif ix.const:
            result = fw.op(f"add nsw i64 {acc}, {ix.const}")
        else:
            result = acc
        memo[key] = result
        return result

    def divmod(self, atom: DivMod, loops, memo) -> str:
        f = self.index(atom.f, loops, memo)
        q = f if atom.div == 1 else self.fw.op(f"udiv i64 {f}, {atom.div}")
        if atom.div * atom.mod >= atom.bound:
            return q
        return self.fw.op(f"urem i64 {q}, {atom.mod}")

    def pick(self, atom: Pick, loops, memo) -> str:
        """A data-dependent index: wrapped if negative (unless strict), checked, and element 0
        if out of range."""
        key = ("pick", id(atom.expr), atom.size, atom.strict)
        if key in memo:
            return memo[key]
        fw = self.fw
        v = self.convert(self.expr(atom.expr, loops, memo), atom.expr.dtype, np.dtype(np.int64))
        if atom.strict:      # [0, size) only: one unsigned compare catches negatives too
            wrapped = v
        else:
            neg = fw.op(f"icmp slt i64 {v}, 0")
            wrapped = fw.op(f"select i1 {neg}, i64 {fw.op(f'add i64 {v}, {atom.size}')}, i64 {v}")
        bad = fw.op(f"icmp uge i64 {wrapped}, {atom.size}")
        safe = fw.op(f"select i1 {bad}, i64 0, i64 {wrapped}")
        self.raise_flag(bad, KernelError.RANGE if atom.strict else KernelError.INDEX)
        memo[key] = safe
        memo[("bad", id(atom.expr), atom.size, atom.strict)] = bad
        return safe

    def raise_flag(self, cond: str, bit: int):
        """OR `bit` into the kernel's error flag where cond holds (a select, not a branch:
        checked loops still vectorise)."""
        fw = self.fw
        old = fw.op("load i8, ptr %errflag, align 1")
        flag = fw.op(f"or i8 {old}, {fw.op(f'select i1 {cond}, i8 {int(bit)}, i8 0')}")
        fw.emit(f"store i8 {flag}, ptr %errflag, align 1")

    # ---- expressions -------------------------------------------------------------------
    def expr(self, e, loops, memo) -> str:
        key = id(e)
        if key in memo:
            return memo[key]
        # operands first, in one iterative walk: expression chains can be thousands deep
        for sub in walk([e], memo):
            if id(sub) not in memo:
                memo[id(sub)] = self._expr(sub, loops, memo)
        return memo[key]

    def _expr(self, e, loops, memo) -> str:
        fw = self.fw
        if isinstance(e, Const):
            return const_text(e.value, e.dtype)
        if isinstance(e, Scalar):
            return self.scalars[e.arg]
        if isinstance(e, Load):
            ptr = self.address(e.arg, self.index(e.index, loops, memo), e.dtype)
            if e.dtype.kind == "c":
                return self.load_complex(ptr, e.dtype)
            v = fw.op(f"load {memory_type(e.dtype)}, ptr {ptr}, align {e.dtype.itemsize}")
            return fw.op(f"icmp ne i8 {v}, 0") if e.dtype.kind == "b" else v
        if isinstance(e, IndexValue):
            return self.convert(self.index(e.index, loops, memo), np.dtype(np.int64), e.dtype)
        if isinstance(e, Folded):
            return self.convert(self.folded[e.phase], self.k.prelude[e.phase].acc, e.dtype)
        if isinstance(e, Reduced):
            raise ValueError("a reduced value outside its reduction's epilogue")
        if isinstance(e, Random):
            return self.random(e, loops, memo)
        assert isinstance(e, Compute)
        args = [self.expr(o, loops, memo) for o in e.operands]
        dts = [o.dtype for o in e.operands]
        if e.op is Op.CAST:
            return self.convert(args[0], dts[0], e.dtype)
        if e.op in (Op.REAL, Op.IMAG):
            return fw.op(f"extractvalue {llvm_type(dts[0])} {args[0]}, {int(e.op is Op.IMAG)}")
        if e.op is Op.COMPLEX:
            return self.make_complex(args[0], args[1], e.dtype)
        if e.op is Op.BITCAST:
            return fw.op(f"bitcast {llvm_type(dts[0])} {args[0]} to {llvm_type(e.dtype)}")
        if e.op is Op.WHERE:
            ty = llvm_type(e.dtype)
            return fw.op(f"select i1 {args[0]}, {ty} {args[1]}, {ty} {args[2]}")
        if e.op is Op.CHECK:
            return self.check_word(args[0])
        if e.checked:
            return _checked_int_op(self, e.op, e.dtype, args)
        return self.emit_op(e.op, e.dtype, args, dts)

    def check_word(self, word: str) -> str:
        """A runtime check's failure bits (ir.Op.CHECK): reported straight into the status
        word when non-zero (a branch: a check is one point, never a vector loop)."""
        fw = self.fw
        failed, done = fw.label("check_failed"), fw.label("check_done")
        fw.cond_br(fw.op(f"icmp ne i64 {word}, 0"), failed, done)
        fw.start(failed)
        self.report_error(word)
        fw.br(done)
        fw.start(done)
        return word

    # ---- random numbers ----------------------------------------------------------------
    def random(self, e: Random, loops, memo) -> str:
        """Philox4x32-10 (Salmon et al., SC'11) of counter (position, stream, 0) under the
        64-bit key, converted to the draw's distribution.  Pure integer arithmetic: the same
        bits on every target."""
        fw = self.fw
        pos = self.index(e.position, loops, memo)
        key = self.expr(e.key, loops, memo)
        pos_hi = fw.op(f"lshr i64 {pos}, 32")
        key_hi = fw.op(f"lshr i64 {key}, 32")
        c = [fw.op(f"trunc i64 {pos} to i32"), fw.op(f"trunc i64 {pos_hi} to i32"),
             str(e.stream & 0xFFFFFFFF), "0"]
        k0 = fw.op(f"trunc i64 {key} to i32")
        k1 = fw.op(f"trunc i64 {key_hi} to i32")

        def mulhilo(m, x):
            wide = fw.op(f"zext i32 {x} to i64")
            p = fw.op(f"mul nuw i64 {m}, {wide}")
            hi = fw.op(f"lshr i64 {p}, 32")
            return fw.op(f"trunc i64 {hi} to i32"), fw.op(f"trunc i64 {p} to i32")

        for rnd in range(10):
            if rnd:
                k0 = fw.op(f"add i32 {k0}, {_PHILOX_W0}")
                k1 = fw.op(f"add i32 {k1}, {_PHILOX_W1}")
            hi0, lo0 = mulhilo(_PHILOX_M0, c[0])
            hi1, lo1 = mulhilo(_PHILOX_M1, c[2])
            x0 = fw.op(f"xor i32 {hi1}, {c[1]}")
            x2 = fw.op(f"xor i32 {hi0}, {c[3]}")
            c = [fw.op(f"xor i32 {x0}, {k0}"), lo1, fw.op(f"xor i32 {x2}, {k1}"), lo0]

        def word64(lo, hi):
            high = fw.op(f"zext i32 {hi} to i64")
            low = fw.op(f"zext i32 {lo} to i64")
            return fw.op(f"or i64 {fw.op(f'shl i64 {high}, 32')}, {low}")

        def unit(bits, plus_one=False):
            """53 random bits as a double in [0, 1), or (0, 1] with plus_one."""
            top = fw.op(f"lshr i64 {bits}, 11")
            if plus_one:
                top = fw.op(f"add nuw i64 {top}, 1")
            as_float = fw.op(f"uitofp i64 {top} to double")
            return fw.op(f"fmul double {as_float}, 0x3CA0000000000000")   # 2**-53

        if e.dist == "u64":
            return self.convert(word64(c[0], c[1]), np.dtype(np.uint64), e.dtype)
        if e.dist == "uniform":
            if e.dtype == np.float32:                     # 24 bits: every float32 in [0, 1)
                top = fw.op(f"lshr i32 {c[0]}, 8")
                as_float = fw.op(f"uitofp i32 {top} to float")
                return fw.op(f"fmul float {as_float}, 0x3E70000000000000")   # 2**-24
            return self.convert(unit(word64(c[0], c[1])), np.dtype(np.float64), e.dtype)
        # normal: Box-Muller on two 53-bit uniforms, u1 in (0, 1] so that log never sees 0
        u1 = unit(word64(c[0], c[1]), plus_one=True)
        u2 = unit(word64(c[2], c[3]))
        f64 = np.dtype(np.float64)
        log_u1 = self.call_math("log", f64, [u1])
        radius = self.mod.intrinsic(fw, "llvm.sqrt.f64", "double",
                                    [("double", fw.op(f"fmul double {log_u1}, -2.0"))])
        angle = fw.op(f"fmul double {u2}, 0x401921FB54442D18")   # 2 pi
        cos = self.call_math("cos", f64, [angle])
        z = fw.op(f"fmul double {radius}, {cos}")
        return self.convert(z, f64, e.dtype)

    # ---- conversions -------------------------------------------------------------------
    def convert(self, v: str, src: np.dtype, dst: np.dtype) -> str:
        src, dst = np.dtype(src), np.dtype(dst)
        if src == dst:
            return v
        if "c" in (src.kind, dst.kind):     # complexops casts through the parts
            raise NotImplementedError(f"conversion {src} -> {dst}")
        fw = self.fw
        st, dt_ = llvm_type(src), llvm_type(dst)
        if dst.kind == "b":
            if src.kind == "f":
                return fw.op(f"fcmp une {st} {v}, {const_text(0, src)}")
            return fw.op(f"icmp ne {st} {v}, 0")
        if src.kind == "b":
            if dst.kind == "f":
                return fw.op(f"uitofp i1 {v} to {dt_}")
            return fw.op(f"zext i1 {v} to {dt_}")
        if src.kind == "f" and dst.kind == "f":
            op = "fpext" if dst.itemsize > src.itemsize else "fptrunc"
            return fw.op(f"{op} {st} {v} to {dt_}")
        if src.kind == "f":
            return self.float_to_int(v, src, dst)
        if dst.kind == "f":
            return fw.op(f"{'sitofp' if src.kind == 'i' else 'uitofp'} {st} {v} to {dt_}")
        if dst.itemsize == src.itemsize:
            return v
        if dst.itemsize < src.itemsize:
            return fw.op(f"trunc {st} {v} to {dt_}")
        return fw.op(f"{'sext' if src.kind == 'i' else 'zext'} {st} {v} to {dt_}")


    def float_to_int(self, v: str, src: np.dtype, dst: np.dtype) -> str:
        """A float cast to an integer dtype as NumPy casts on x86-64: C's conversion, which
        is the CPU's truncating cvtt instruction.  Values in range truncate toward zero;
        NaN, infinities and values outside give the instruction's "integer indefinite"
        (INT_MIN of its 32- or 64-bit form); int8/16 and uint8/16 take the low bits of the
        32-bit form, uint32 those of the 64-bit form; uint64 converts values of 2**63 and
        up less 2**63 with the signed form and adds it back, the others with the signed
        form.  (NumPy warns "invalid value encountered in cast"; kernels do not.  NumPy's
        SIMD loop for float32/64 -> uint32 converts as uint64 does, in 32 bits, so outside
        [-2**31, 2**32) NumPy's own values depend on where an element falls in the array:
        fastlaunch gives its scalar loop's.)"""
        fw = self.fw
        if src.itemsize == 2:                         # exactly, then as from float32
            v, src = fw.op(f"fpext half {v} to float"), np.dtype(np.float32)
        st, dt_ = llvm_type(src), llvm_type(dst)

        def cvtt(x: str, bits: int) -> str:
            top = float(2 ** (bits - 1))
            below = -top - 1.0
            # valid where trunc(x) is in [-top, top): x > -top - 1, or x >= -top where
            # -top - 1 rounds to -top in the source type
            exact = float(np.array(below, src)) == below
            lo = fw.op(f"fcmp {'ogt' if exact else 'oge'} {st} {x}, "
                       f"{const_text(below if exact else -top, src)}")
            ok = fw.op(f"and i1 {lo}, {fw.op(f'fcmp olt {st} {x}, {const_text(top, src)}')}")
            # fptosi is poison outside the range: the select never takes it there
            t = fw.op(f"fptosi {st} {x} to i{bits}")
            return fw.op(f"select i1 {ok}, i{bits} {t}, i{bits} {_signed(1 << (bits - 1), bits)}")

        bits = dst.itemsize * 8
        if dst == np.uint64:
            off = float(2 ** (bits - 1))
            big = fw.op(f"fcmp oge {st} {v}, {const_text(off, src)}")
            high = cvtt(fw.op(f"fsub {st} {v}, {const_text(off, src)}"), bits)
            high = fw.op(f"xor i{bits} {high}, {_signed(1 << (bits - 1), bits)}")
            return fw.op(f"select i1 {big}, i{bits} {high}, i{bits} {cvtt(v, bits)}")
        wide = 64 if bits == 64 or dst.kind == "u" and bits == 32 else 32
        r = cvtt(v, wide)
        return r if wide == bits else fw.op(f"trunc i{wide} {r} to {dt_}")


def _signed(value: int, bits: int) -> int:
    """An unsigned bit pattern as the signed integer LLVM's text of an i<bits> constant takes."""
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _suffix(dt: np.dtype) -> str:
    return {2: "f16", 4: "f32", 8: "f64"}[np.dtype(dt).itemsize]


# ---- elementwise operations ----------------------------------------------------------------
def lower_op(em: LLVMEmitter, op: Op, out: np.dtype, args: list, dts: list) -> str:
    """Elementwise `op` as NumPy computes it (the default of LLVMEmitter.emit_op)."""
    fw, mod = em.fw, em.mod
    dt = dts[0] if dts else out
    ty = llvm_type(dt)
    kind = dt.kind
    a = args[0] if args else None
    b = args[1] if len(args) > 1 else None

    def intr(name, *vals, ret=None, t=None):
        t = t or ty
        return mod.intrinsic(fw, name, ret or t, [(t, v) for v in vals])

    def fconst(x):
        return const_text(x, dt)

    def select(c, x, y, t=None):
        return fw.op(f"select i1 {c}, {t or ty} {x}, {t or ty} {y}")

    cname = MATH_FUNCTIONS.get(op)
    if op is Op.NEXTAFTER and dt == np.float16:
        return _half_nextafter(em, a, b)
    if cname is not None and kind == "f":
        if op is Op.POW:
            return _float_pow(em, dt, a, b)
        return em.call_math(cname, dt, args)

    if op is Op.ADD:
        return fw.op(f"{'fadd' if kind == 'f' else ('or' if kind == 'b' else 'add')} {ty} {a}, {b}")
    if op is Op.SUB:
        return fw.op(f"{'fsub' if kind == 'f' else 'sub'} {ty} {a}, {b}")
    if op is Op.MUL:
        return fw.op(f"{'fmul' if kind == 'f' else ('and' if kind == 'b' else 'mul')} {ty} {a}, {b}")
    if op is Op.DIV:
        return fw.op(f"fdiv {ty} {a}, {b}")
    if op is Op.NEG:
        return fw.op(f"fneg {ty} {a}") if kind == "f" else fw.op(f"sub {ty} 0, {a}")
    if op is Op.ABS:
        if kind == "f":
            return intr(f"llvm.fabs.{_suffix(dt)}", a)
        if kind == "i":
            return mod.intrinsic(fw, f"llvm.abs.{ty}", ty, [(ty, a), ("i1", "false")])
        return a
    if op is Op.SQRT:
        return intr(f"llvm.sqrt.{_suffix(dt)}", a)
    if op in (Op.FLOOR, Op.CEIL, Op.TRUNC, Op.RINT):
        if kind != "f":
            return a
        return intr(f"llvm.{op.value}.{_suffix(dt)}", a)
    if op is Op.RECIPROCAL:
        if kind == "f":
            return fw.op(f"fdiv {ty} {fconst(1)}, {a}")
        q = _int_divide(em, dt, "1" if kind != "b" else "true", a, floor=False)
        if kind == "i" and dt.itemsize >= 4:
            # NumPy's integer loop converts 1.0 / x: of 0, inf, which x86-64's conversion
            # makes INT_MIN (float_to_int; the narrower types and unsigned ones get 0)
            low = _signed(1 << (dt.itemsize * 8 - 1), dt.itemsize * 8)
            return select(fw.op(f"icmp eq {ty} {a}, 0"), str(low), q)
        return q
    if op is Op.SIGN:
        if kind == "f":
            pos = fw.op(f"fcmp ogt {ty} {a}, {fconst(0)}")
            neg = fw.op(f"fcmp olt {ty} {a}, {fconst(0)}")
            zero_or_nan = select(fw.op(f"fcmp oeq {ty} {a}, {fconst(0)}"), fconst(0), a)
            return select(pos, fconst(1), select(neg, fconst(-1), zero_or_nan))
        gt = fw.op(f"icmp {_icmp(kind, 'gt')} {ty} {a}, 0")
        pos = fw.op(f"zext i1 {gt} to {ty}")
        if kind == "u":
            return pos
        neg = fw.op(f"zext i1 {fw.op(f'icmp slt {ty} {a}, 0')} to {ty}")
        return fw.op(f"sub {ty} {pos}, {neg}")
    if op in (Op.ISNAN, Op.ISINF, Op.ISFINITE):
        if kind != "f":
            return "true" if op is Op.ISFINITE else "false"
        if op is Op.ISNAN:
            return fw.op(f"fcmp uno {ty} {a}, {a}")
        mag = intr(f"llvm.fabs.{_suffix(dt)}", a)
        return fw.op(f"fcmp {'oeq' if op is Op.ISINF else 'olt'} {ty} {mag}, {fconst(np.inf)}")
    if op is Op.SIGNBIT:
        if kind == "f":
            bits = f"i{dt.itemsize * 8}"
            return fw.op(f"icmp slt {bits} {fw.op(f'bitcast {ty} {a} to {bits}')}, 0")
        return fw.op(f"icmp slt {ty} {a}, 0") if kind == "i" else "false"
    if op in (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE):
        if len(dts) == 2 and dts[0].kind in "iu" and dts[1].kind in "iu" and dts[0] != dts[1]:
            return _mixed_int_compare(em, op, a, b, dts[0], dts[1])
        if kind == "f":
            pred = {Op.EQ: "oeq", Op.NE: "une", Op.LT: "olt", Op.LE: "ole", Op.GT: "ogt",
                    Op.GE: "oge"}[op]
            return fw.op(f"fcmp {pred} {ty} {a}, {b}")
        base = {Op.EQ: "eq", Op.NE: "ne", Op.LT: "lt", Op.LE: "le", Op.GT: "gt", Op.GE: "ge"}[op]
        return fw.op(f"icmp {_icmp(kind, base)} {ty} {a}, {b}")
    if op in (Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_XOR, Op.LOGICAL_NOT):
        truth = [em.convert(v, d, np.dtype(np.bool_)) for v, d in zip(args, dts)]
        if op is Op.LOGICAL_NOT:
            return fw.op(f"xor i1 {truth[0]}, true")
        word = {Op.LOGICAL_AND: "and", Op.LOGICAL_OR: "or", Op.LOGICAL_XOR: "xor"}[op]
        return fw.op(f"{word} i1 {truth[0]}, {truth[1]}")
    if op in (Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR):
        word = {Op.BITWISE_AND: "and", Op.BITWISE_OR: "or", Op.BITWISE_XOR: "xor"}[op]
        return fw.op(f"{word} {ty} {a}, {b}")
    if op is Op.INVERT:
        return fw.op(f"xor {ty} {a}, {'true' if kind == 'b' else '-1'}")
    if op in (Op.MINIMUM, Op.MAXIMUM, Op.FMIN, Op.FMAX):
        return _min_max(em, op, dt, a, b)
    if op in (Op.FLOORDIV, Op.MOD, Op.FMOD):
        if kind == "f":
            return _float_divmod(em, op, dt, a, b)
        if kind == "b":  # NumPy has no bool loop for these; resolve_dtypes picks int8
            raise NotImplementedError(op)
        if op is Op.FLOORDIV:
            return _int_divide(em, dt, a, b, floor=True)
        return _int_remainder(em, dt, a, b, python_sign=op is Op.MOD)
    if op is Op.POW:
        return _int_pow(em, dt, a, b)
    if op is Op.COPYSIGN:
        return intr(f"llvm.copysign.{_suffix(dt)}", a, b)
    if op in (Op.LEFT_SHIFT, Op.RIGHT_SHIFT):
        bits = dt.itemsize * 8
        too_far = fw.op(f"icmp uge {ty} {b}, {bits}")
        safe = select(too_far, "0", b)
        if op is Op.LEFT_SHIFT:
            return select(too_far, "0", fw.op(f"shl {ty} {a}, {safe}"))
        if kind == "u":
            return select(too_far, "0", fw.op(f"lshr {ty} {a}, {safe}"))
        return fw.op(f"ashr {ty} {a}, {select(too_far, str(bits - 1), b)}")
    if op is Op.HEAVISIDE:
        neg = fw.op(f"fcmp olt {ty} {a}, {fconst(0)}")
        pos = fw.op(f"fcmp ogt {ty} {a}, {fconst(0)}")
        zero = fw.op(f"fcmp oeq {ty} {a}, {fconst(0)}")
        return select(neg, fconst(0), select(pos, fconst(1), select(zero, b, a)))
    if op in (Op.LOGADDEXP, Op.LOGADDEXP2):
        return _logaddexp(em, op, dt, a, b)
    raise NotImplementedError(f"code generation for {op.value} on {dt}")


def _checked_int_op(em, op, dt, args) -> str:
    """Python-int arithmetic in int64: the wrapped value, with KernelError.OVERFLOW raised
    wherever the exact result leaves the 64-bit range (or is not an int: a negative power)."""
    fw, mod = em.fw, em.mod
    ty = llvm_type(dt)
    a = args[0]
    b = args[1] if len(args) > 1 else None
    lo, _ = _int_limits(dt)

    def with_overflow(name, x, y):
        pair = mod.intrinsic(fw, f"llvm.{name}.with.overflow.{ty}", f"{{ {ty}, i1 }}",
                             [(ty, x), (ty, y)])
        return fw.op(f"extractvalue {{ {ty}, i1 }} {pair}, 0"), \
            fw.op(f"extractvalue {{ {ty}, i1 }} {pair}, 1")

    if op in (Op.ADD, Op.SUB, Op.MUL):
        value, bad = with_overflow({Op.ADD: "sadd", Op.SUB: "ssub", Op.MUL: "smul"}[op], a, b)
    elif op is Op.NEG:
        value, bad = with_overflow("ssub", "0", a)
    elif op is Op.ABS:
        value = mod.intrinsic(fw, f"llvm.abs.{ty}", ty, [(ty, a), ("i1", "false")])
        bad = fw.op(f"icmp eq {ty} {a}, {lo}")
    elif op is Op.FLOORDIV:
        value = _int_divide(em, dt, a, b, floor=True)
        bad = fw.op(f"and i1 {fw.op(f'icmp eq {ty} {a}, {lo}')}, {fw.op(f'icmp eq {ty} {b}, -1')}")
    elif op is Op.LEFT_SHIFT:
        value = em.emit_op(op, dt, [a, b], [dt, dt])
        far = fw.op(f"icmp uge {ty} {b}, 64")
        back = fw.op(f"ashr {ty} {value}, {fw.op(f'select i1 {far}, {ty} 63, {ty} {b}')}")
        lost = fw.op(f"icmp ne {ty} {back}, {a}")        # bits (or the sign) shifted out
        bad = fw.op(f"or i1 {lost}, {fw.op(f'icmp slt {ty} {b}, 0')}")
    elif op is Op.POW:
        name = f"fastlaunch.ipow.checked.{ty}"
        signature = (f"define internal {{ {ty}, i1 }} @{name}({ty} %b, {ty} %e) alwaysinline "
                     f"nounwind {{")
        mod.declare(name, signature + f"""
entry:
  %neg = icmp slt {ty} %e, 0
  br i1 %neg, label %negative, label %loop0
negative:
  %r0 = insertvalue {{ {ty}, i1 }} undef, {ty} 0, 0
  %r1 = insertvalue {{ {ty}, i1 }} %r0, i1 true, 1
  ret {{ {ty}, i1 }} %r1
loop0:
  br label %loop
loop:
  %acc = phi {ty} [ 1, %loop0 ], [ %acc2, %loop ]
  %base = phi {ty} [ %b, %loop0 ], [ %base2, %loop ]
  %exp = phi {ty} [ %e, %loop0 ], [ %exp2, %loop ]
  %bad = phi i1 [ false, %loop0 ], [ %bad3, %loop ]
  %bit = and {ty} %exp, 1
  %odd = icmp ne {ty} %bit, 0
  %m = call {{ {ty}, i1 }} @llvm.smul.with.overflow.{ty}({ty} %acc, {ty} %base)
  %mv = extractvalue {{ {ty}, i1 }} %m, 0
  %mo = extractvalue {{ {ty}, i1 }} %m, 1
  %acc2 = select i1 %odd, {ty} %mv, {ty} %acc
  %accbad = and i1 %odd, %mo
  %exp2 = lshr {ty} %exp, 1
  %more = icmp ne {ty} %exp2, 0
  %sq = call {{ {ty}, i1 }} @llvm.smul.with.overflow.{ty}({ty} %base, {ty} %base)
  %base2 = extractvalue {{ {ty}, i1 }} %sq, 0
  %sqo = extractvalue {{ {ty}, i1 }} %sq, 1
  %sqbad = and i1 %sqo, %more
  %bad2 = or i1 %bad, %accbad
  %bad3 = or i1 %bad2, %sqbad
  br i1 %more, label %loop, label %out
out:
  %o0 = insertvalue {{ {ty}, i1 }} undef, {ty} %acc2, 0
  %o1 = insertvalue {{ {ty}, i1 }} %o0, i1 %bad3, 1
  ret {{ {ty}, i1 }} %o1
}}""")
        mod.declare(f"llvm.smul.with.overflow.{ty}",
                    f"declare {{ {ty}, i1 }} @llvm.smul.with.overflow.{ty}({ty}, {ty})")
        pair = fw.op(f"call {{ {ty}, i1 }} @{name}({ty} {a}, {ty} {b})")
        value = fw.op(f"extractvalue {{ {ty}, i1 }} {pair}, 0")
        bad = fw.op(f"extractvalue {{ {ty}, i1 }} {pair}, 1")
    else:
        return em.emit_op(op, dt, args, [dt] * len(args))
    em.raise_flag(bad, KernelError.OVERFLOW)
    return value


def _icmp(kind: str, base: str) -> str:
    if base in ("eq", "ne"):
        return base
    return ("s" if kind == "i" else "u") + base


def _mixed_int_compare(em, op, a, b, da, db) -> str:
    """Exact comparison of a signed and an unsigned 64-bit integer (NumPy's mixed loops):
    a negative signed value is below every unsigned one; otherwise compare as unsigned."""
    fw = em.fw
    ta, tb = llvm_type(da), llvm_type(db)
    base = {Op.EQ: "eq", Op.NE: "ne", Op.LT: "lt", Op.LE: "le", Op.GT: "gt", Op.GE: "ge"}[op]
    signed_is_a = da.kind == "i"
    s_val, s_ty = (a, ta) if signed_is_a else (b, tb)
    negative = fw.op(f"icmp slt {s_ty} {s_val}, 0")
    unsigned = fw.op(f"icmp {_icmp('u', base)} {ta} {a}, {b}")
    if base == "eq":
        known = "false"
    elif base == "ne":
        known = "true"
    else:   # a negative signed operand is the smaller one
        known = "true" if (base in ("lt", "le")) == signed_is_a else "false"
    return fw.op(f"select i1 {negative}, i1 {known}, i1 {unsigned}")


def _half_nextafter(em, a, b) -> str:
    """nextafter on float16 bits (float32 steps would round back to the same half)."""
    fw = em.fw
    ia = fw.op(f"bitcast half {a} to i16")
    ib = fw.op(f"bitcast half {b} to i16")
    a_nan = fw.op(f"fcmp uno half {a}, {a}")
    b_nan = fw.op(f"fcmp uno half {b}, {b}")
    nan = fw.op(f"or i1 {a_nan}, {b_nan}")
    same = fw.op(f"fcmp oeq half {a}, {b}")
    zero = fw.op(f"fcmp oeq half {a}, 0xH0000")
    # from zero: the smallest subnormal with b's sign
    tiny = fw.op(f"or i16 {fw.op(f'and i16 {ib}, -32768')}, 1")
    # away from zero when (b > a) matches a's sign being positive
    up = fw.op(f"fcmp ogt half {b}, {a}")
    positive = fw.op(f"icmp sge i16 {ia}, 0")
    grow = fw.op(f"icmp eq i1 {up}, {positive}")
    bigger = fw.op(f"add i16 {ia}, 1")
    smaller = fw.op(f"sub i16 {ia}, 1")
    stepped = fw.op(f"select i1 {grow}, i16 {bigger}, i16 {smaller}")
    r = fw.op(f"select i1 {zero}, i16 {tiny}, i16 {stepped}")
    r = fw.op(f"bitcast i16 {r} to half")
    r = fw.op(f"select i1 {same}, half {a}, half {r}")     # npy_half_nextafter: x == y -> x
    return fw.op(f"select i1 {nan}, half 0xH7E00, half {r}")


def _ordinary_constant(text: str) -> bool:
    """Whether an operand is a float constant (const_text's hex double) other than NaN, +-0."""
    if not (text.startswith("0x") and len(text) == 18):
        return False
    value = struct.unpack("<d", struct.pack("<Q", int(text, 16)))[0]
    return value == value and value != 0.0


def _min_max(em, op, dt, a, b) -> str:
    """NumPy's rules: minimum/maximum propagate NaN; fmin/fmax ignore it; ties return b."""
    fw = em.fw
    ty = llvm_type(dt)
    if dt.kind == "b":
        return fw.op(f"{'and' if op in (Op.MINIMUM, Op.FMIN) else 'or'} i1 {a}, {b}")
    if dt.kind != "f":
        sign = "s" if dt.kind == "i" else "u"
        word = "min" if op in (Op.MINIMUM, Op.FMIN) else "max"
        return em.mod.intrinsic(fw, f"llvm.{sign}{word}.{ty}", ty, [(ty, a), (ty, b)])
    if dt != np.float16 and (_ordinary_constant(a) or _ordinary_constant(b)):
        # against a constant that is neither NaN nor zero, ties are equal values and only the
        # other operand can be NaN: LLVM's NaN-propagating (minimum/maximum) or NaN-ignoring
        # (minnum/maxnum) intrinsics then give NumPy's result, and x86 selects one vminps/
        # vmaxps with the operands ordered to propagate or drop that NaN, where the select
        # below costs four instructions (np.clip in a 14-op chain: 26 -> 20 per vector)
        word = {Op.MINIMUM: "minimum", Op.MAXIMUM: "maximum", Op.FMIN: "minnum",
                Op.FMAX: "maxnum"}[op]
        return em.mod.intrinsic(fw, f"llvm.{word}.{_suffix(dt)}", ty, [(ty, a), (ty, b)])
    pred = "olt" if op in (Op.MINIMUM, Op.FMIN) else "ogt"
    if dt == np.float16:    # float16: NumPy's half loops compare with <= / >=, ties return a
        pred = "ole" if op in (Op.MINIMUM, Op.FMIN) else "oge"
    better = fw.op(f"fcmp {pred} {ty} {a}, {b}")
    if op in (Op.MINIMUM, Op.MAXIMUM):
        special = fw.op(f"fcmp uno {ty} {a}, {a}")      # a is NaN: keep it
    else:
        special = fw.op(f"fcmp uno {ty} {b}, {b}")      # b is NaN: take a
    take_a = fw.op(f"or i1 {better}, {special}")
    return fw.op(f"select i1 {take_a}, {ty} {a}, {ty} {b}")


def _float_pow(em, dt, a, b) -> str:
    return em.call_math("pow", dt, [a, b])


def _float_divmod(em, op, dt, a, b) -> str:
    """NumPy's npy_divmod / npy_fmod for floats, step for step."""
    fw = em.fw
    if dt == np.float16:    # float16: NumPy's half loops compute in float32, round once
        wide = [fw.op(f"fpext half {x} to float") for x in (a, b)]
        r = _float_divmod(em, op, np.dtype(np.float32), *wide)
        return fw.op(f"fptrunc float {r} to half")
    ty = llvm_type(dt)
    c = lambda x: const_text(x, dt)  # noqa: E731
    mod = em.float_remainder(dt, a, b)
    # an invalid fmod (b zero or a infinite, neither a NaN) gives x86-64's default NaN, sign
    # bit set, in NumPy's C loop; LLVM's constant folding (a bool divisor known to be 0 or 1)
    # and NVPTX's fmod give +NaN: select NumPy's bits
    b_zero = fw.op(f"fcmp oeq {ty} {b}, {c(0)}")
    a_inf = fw.op(f"fcmp oeq {ty} {em.mod.intrinsic(fw, f'llvm.fabs.{_suffix(dt)}', ty, [(ty, a)])}"
                  f", {c(np.inf)}")
    invalid = fw.op(f"and i1 {fw.op(f'or i1 {b_zero}, {a_inf}')}, "
                    f"{fw.op(f'fcmp ord {ty} {a}, {b}')}")
    mod = fw.op(f"select i1 {invalid}, {ty} {c(-np.nan)}, {ty} {mod}")
    if op is Op.FMOD:
        return mod
    mod_nonzero = fw.op(f"fcmp une {ty} {mod}, {c(0)}")
    b_neg = fw.op(f"fcmp olt {ty} {b}, {c(0)}")
    mod_neg = fw.op(f"fcmp olt {ty} {mod}, {c(0)}")
    differ = fw.op(f"xor i1 {b_neg}, {mod_neg}")
    fix = fw.op(f"and i1 {mod_nonzero}, {differ}")
    if op is Op.MOD:
        adjusted = fw.op(f"fadd {ty} {mod}, {b}")
        signed_zero = em.mod.intrinsic(fw, f"llvm.copysign.{_suffix(dt)}", ty,
                                       [(ty, c(0)), (ty, b)])
        nonzero = fw.op(f"select i1 {fix}, {ty} {adjusted}, {ty} {mod}")
        r = fw.op(f"select i1 {mod_nonzero}, {ty} {nonzero}, {ty} {signed_zero}")
        return fw.op(f"select i1 {b_zero}, {ty} {mod}, {ty} {r}")
    # floor_divide
    div = fw.op(f"fdiv {ty} {fw.op(f'fsub {ty} {a}, {mod}')}, {b}")
    div = fw.op(f"select i1 {fix}, {ty} {fw.op(f'fsub {ty} {div}, {c(1)}')}, {ty} {div}")
    div_nonzero = fw.op(f"fcmp une {ty} {div}, {c(0)}")
    floor = em.mod.intrinsic(fw, f"llvm.floor.{_suffix(dt)}", ty, [(ty, div)])
    over_half = fw.op(f"fcmp ogt {ty} {fw.op(f'fsub {ty} {div}, {floor}')}, {c(0.5)}")
    floor = fw.op(f"select i1 {over_half}, {ty} {fw.op(f'fadd {ty} {floor}, {c(1)}')}, {ty} {floor}")
    quotient = fw.op(f"fdiv {ty} {a}, {b}")
    # 0 / 0 (and NaN-free invalid divisions) as x86-64 gives it: the default NaN, sign set
    zero_by_zero = fw.op(f"and i1 {b_zero}, {fw.op(f'fcmp oeq {ty} {a}, {c(0)}')}")
    quotient = fw.op(f"select i1 {zero_by_zero}, {ty} {c(-np.nan)}, {ty} {quotient}")
    zero = em.mod.intrinsic(fw, f"llvm.copysign.{_suffix(dt)}", ty, [(ty, c(0)), (ty, quotient)])
    # div is NaN when a is inf or NaN: une is true for NaN, so floor(NaN) = NaN flows through
    r = fw.op(f"select i1 {div_nonzero}, {ty} {floor}, {ty} {zero}")
    return fw.op(f"select i1 {b_zero}, {ty} {quotient}, {ty} {r}")


def _int_divide(em, dt, a, b, floor: bool) -> str:
    """Integer division as NumPy does it: floor rounding; x // 0 == 0; MIN // -1 == MIN."""
    fw = em.fw
    ty = llvm_type(dt)
    b_zero = fw.op(f"icmp eq {ty} {b}, 0")
    if dt.kind == "u":
        q = fw.op(f"udiv {ty} {a}, {fw.op(f'select i1 {b_zero}, {ty} 1, {ty} {b}')}")
        return fw.op(f"select i1 {b_zero}, {ty} 0, {ty} {q}")
    lo, _ = _int_limits(dt)
    overflow = fw.op(f"and i1 {fw.op(f'icmp eq {ty} {a}, {lo}')}, {fw.op(f'icmp eq {ty} {b}, -1')}")
    bad = fw.op(f"or i1 {b_zero}, {overflow}")
    safe_b = fw.op(f"select i1 {bad}, {ty} 1, {ty} {b}")
    q = fw.op(f"sdiv {ty} {a}, {safe_b}")
    if floor:
        adjust = _rounds_toward_zero(fw, ty, fw.op(f"srem {ty} {a}, {safe_b}"), safe_b)
        q = fw.op(f"sub {ty} {q}, {fw.op(f'zext i1 {adjust} to {ty}')}")
    q = fw.op(f"select i1 {overflow}, {ty} {lo}, {ty} {q}")
    return fw.op(f"select i1 {b_zero}, {ty} 0, {ty} {q}")


def _int_remainder(em, dt, a, b, python_sign: bool) -> str:
    """x % 0 == 0 as in NumPy; np.remainder takes the divisor's sign, np.fmod the dividend's."""
    fw = em.fw
    ty = llvm_type(dt)
    b_zero = fw.op(f"icmp eq {ty} {b}, 0")
    if dt.kind == "u":
        r = fw.op(f"urem {ty} {a}, {fw.op(f'select i1 {b_zero}, {ty} 1, {ty} {b}')}")
        return fw.op(f"select i1 {b_zero}, {ty} 0, {ty} {r}")
    minus_one = fw.op(f"icmp eq {ty} {b}, -1")        # MIN % -1 would trap; the answer is 0
    bad = fw.op(f"or i1 {b_zero}, {minus_one}")
    safe_b = fw.op(f"select i1 {bad}, {ty} 1, {ty} {b}")
    r = fw.op(f"srem {ty} {a}, {safe_b}")
    if python_sign:
        adjust = _rounds_toward_zero(fw, ty, r, safe_b)
        r = fw.op(f"select i1 {adjust}, {ty} {fw.op(f'add {ty} {r}, {safe_b}')}, {ty} {r}")
    return r


def _rounds_toward_zero(fw, ty, r, b) -> str:
    """Whether truncating division left a remainder r of the other sign than divisor b, so
    that floor division is one less and the Python-style remainder is r + b."""
    r_nonzero = fw.op(f"icmp ne {ty} {r}, 0")
    signs_differ = fw.op(f"icmp slt {ty} {fw.op(f'xor {ty} {r}, {b}')}, 0")
    return fw.op(f"and i1 {r_nonzero}, {signs_differ}")


def _int_pow(em, dt, a, b) -> str:
    """a ** b by repeated squaring; negative exponents give 0 (NumPy raises for arrays)."""
    fw = em.fw
    ty = llvm_type(dt)
    if dt.kind == "b":
        return fw.op(f"or i1 {a}, {fw.op(f'xor i1 {b}, true')}")
    name = f"fastlaunch.ipow.{'s' if dt.kind == 'i' else 'u'}{ty}"
    neg_check = (f"  %neg = icmp slt {ty} %e, 0\n  br i1 %neg, label %zero, label %loop0\n"
                 if dt.kind == "i" else "  br label %loop0\n")
    em.mod.declare(name, f"""define internal {ty} @{name}({ty} %b, {ty} %e) alwaysinline nounwind {{
entry:
{neg_check}zero:
  ret {ty} 0
loop0:
  br label %loop
loop:
  %acc = phi {ty} [ 1, %loop0 ], [ %acc2, %loop ]
  %base = phi {ty} [ %b, %loop0 ], [ %base2, %loop ]
  %exp = phi {ty} [ %e, %loop0 ], [ %exp2, %loop ]
  %bit = and {ty} %exp, 1
  %odd = icmp ne {ty} %bit, 0
  %mul = mul {ty} %acc, %base
  %acc2 = select i1 %odd, {ty} %mul, {ty} %acc
  %base2 = mul {ty} %base, %base
  %exp2 = lshr {ty} %exp, 1
  %more = icmp ne {ty} %exp2, 0
  br i1 %more, label %loop, label %out
out:
  %r = phi {ty} [ %acc2, %loop ]
  ret {ty} %r
}}""")
    return fw.op(f"call {ty} @{name}({ty} {a}, {ty} {b})")


def _logaddexp(em, op, dt, a, b) -> str:
    """NumPy's npy_logaddexp(2): x + log1p(exp(-|x-y|)) around the larger, x when x == y."""
    fw = em.fw
    if dt == np.float16:    # float16: NumPy's half loop computes in float32, rounds once
        wide = [fw.op(f"fpext half {x} to float") for x in (a, b)]
        r = _logaddexp(em, op, np.dtype(np.float32), *wide)
        return fw.op(f"fptrunc float {r} to half")
    ty = llvm_type(dt)
    c = lambda x: const_text(x, dt)  # noqa: E731
    base2 = op is Op.LOGADDEXP2
    equal = fw.op(f"fcmp oeq {ty} {a}, {b}")
    same = fw.op(f"fadd {ty} {a}, {c(1.0 if base2 else np.log(2.0))}")
    tmp = fw.op(f"fsub {ty} {a}, {b}")
    pos = fw.op(f"fcmp ogt {ty} {tmp}, {c(0)}")
    nonpos = fw.op(f"fcmp ole {ty} {tmp}, {c(0)}")
    neg_abs = fw.op(f"fneg {ty} {em.mod.intrinsic(fw, f'llvm.fabs.{_suffix(dt)}', ty, [(ty, tmp)])}")
    if base2:
        e = em.call_math("exp2", dt, [neg_abs])
        l1p = fw.op(f"fmul {ty} {em.call_math('log1p', dt, [e])}, {c(1 / np.log(2.0))}")
    else:
        l1p = em.call_math("log1p", dt, [em.call_math("exp", dt, [neg_abs])])
    from_a = fw.op(f"fadd {ty} {a}, {l1p}")
    from_b = fw.op(f"fadd {ty} {b}, {l1p}")
    r = fw.op(f"select i1 {nonpos}, {ty} {from_b}, {ty} {tmp}")   # NaN: tmp is NaN
    r = fw.op(f"select i1 {pos}, {ty} {from_a}, {ty} {r}")
    return fw.op(f"select i1 {equal}, {ty} {same}, {ty} {r}")
