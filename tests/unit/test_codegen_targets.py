"""The code generator's target seam (codegen/llvm_base.py): a second target, defined here,
reuses every op's lowering, the addressing, picks and reductions with its own entry ABI, loop
driver, math calls and error reporting; its modules verify in LLVM and, run on the host,
agree with NumPy.  The CPU target's text is unchanged by the split (golden hashes)."""
import ctypes
import ctypes.util
import hashlib

import llvmlite.binding as llvm
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.backends.cpu_schedule import CPUSchedule, schedule
from fastlaunch.codegen.llvm import MathTarget, generate
from fastlaunch.codegen.llvm_base import LLVMEmitter, llvm_type, word_type
from fastlaunch.ir.graph import Op
from fastlaunch.ir.kernel import (Compute, Const, Index, Kernel, KernelArg, KernelError, Load, Loop,
                               Pick, Reduction, Scalar, Store)

F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)


class GridTarget(LLVMEmitter):
    """A GPU-shaped target run on the host: `void @name(i64 tid, i64 nthreads, <one parameter
    per argument>)`, a grid-stride loop over the flat space, plain libm calls, a plain
    read-or-write of the status word."""

    def module(self) -> str:
        params = ["i64 %tid", "i64 %nthreads"]
        for i, a in enumerate(self.k.args):
            wt = word_type(a)
            params.append(f"{wt} {self.buffer(i) if wt == 'ptr' else self.scalar_word(i)}")
        code = self.kernel_code()
        return "\n".join([f"define void @{self.name}({', '.join(params)}) {{", "entry:", code,
                          "}"] + self.mod.lines() + self.mod.implicit_lines() + [""])

    def launch_loop(self, body):
        space = list(self.k.space)
        self.fw.counted_loop("%tid", str(self.k.size), [],
                             lambda flat, _: body(self.unflatten(flat, space), []),
                             step="%nthreads")

    def math_call(self, cname, dt, args):
        ty = llvm_type(dt)
        fn = cname + ("f" if dt == F32 else "")
        self.mod.declare(fn, f"declare {ty} @{fn}({', '.join([ty] * len(args))})")
        return self.fw.op(f"call {ty} @{fn}({', '.join(f'{ty} {a}' for a in args)})")

    def report_error(self, word):
        ptr = self.buffer(self.k.status)
        old = self.fw.op(f"load i64, ptr {ptr}, align 8")
        self.fw.emit(f"store i64 {self.fw.op(f'or i64 {old}, {word}')}, ptr {ptr}, align 8")


def grid_source(kernel, name="grid_kernel") -> str:
    return GridTarget(kernel, name).module()


def verified(text: str):
    mod = llvm.parse_assembly(text)
    mod.verify()
    return mod


@pytest.fixture(scope="module")
def host_jit():
    """run(kernel, args, nthreads): every 'thread' of a grid-stride launch, one after the
    other, in an MCJIT engine of its own."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)
    tm = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    count = [0]

    def run(kernel, args, nthreads):
        count[0] += 1
        name = f"grid_kernel_{count[0]}"
        engine.add_module(verified(grid_source(kernel, name)))
        engine.finalize_object()
        ctypes_of = {"ptr": ctypes.c_void_p, "double": ctypes.c_double, "i64": ctypes.c_int64}
        fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64,
                              *[ctypes_of[word_type(a)] for a in kernel.args])(
            engine.get_function_address(name))
        words = [a.ctypes.data if isinstance(a, np.ndarray) else a for a in args]
        for tid in range(nthreads):
            fn(tid, nthreads, *words)

    return run


def c_order(*sizes) -> Index:
    """The flat C-order offset of loop dims 0..len(sizes)-1."""
    strides = np.cumprod((sizes[1:] + (1,))[::-1])[::-1]
    return Index.of(0, [(Loop(d), int(s)) for d, s in enumerate(strides)])


# ---- hand-written kernel descriptions ------------------------------------------------------
def chain_kernel(shape=(3, 5)):
    """out = exp(x * s) / (y + 1), float32, s a scalar argument."""
    ix = c_order(*shape)
    x, y, s = Load(0, F32, ix), Load(1, F32, ix), Scalar(2, F32)
    one = Const(np.float32(1), F32)
    value = Compute(Op.DIV, F32, (Compute(Op.EXP, F32, (Compute(Op.MUL, F32, (x, s)),)),
                                  Compute(Op.ADD, F32, (y, one))))
    n = int(np.prod(shape))
    args = [KernelArg("buffer", F32, 0, n), KernelArg("buffer", F32, 1, n),
            KernelArg("scalar", F32, 2), KernelArg("buffer", F32, 3, n, writes=True)]
    return Kernel(space=shape, args=args, stores=[Store(3, ix, value)], label="map")


def reduce_kernel(op, rows=4, cols=7):
    """out[i] = op over j of x[i, j] (float64 in; float64, or int64 for argmax, out)."""
    out_dt = I64 if op in (Op.ARGMAX, Op.ARGMIN) else F64
    args = [KernelArg("buffer", F64, 0, rows * cols),
            KernelArg("buffer", out_dt, 1, rows, writes=True)]
    red = Reduction(op, Load(0, F64, c_order(rows, cols)), 1, Index.loop(0))
    return Kernel(space=(rows,), rspace=(cols,), args=args, reduction=red, label=op.value)


def gather_kernel(n, size):
    """out[i] = table[idx[i]]: a data-dependent index, checked against the error flag."""
    pick = Pick(Load(1, I64, Index.loop(0)), size)
    args = [KernelArg("buffer", F64, 0, size), KernelArg("buffer", I64, 1, n),
            KernelArg("buffer", F64, 2, n, writes=True), KernelArg("status", I64, 3)]
    value = Load(0, F64, Index.of(0, [(pick, 1)]))
    return Kernel(space=(n,), args=args, stores=[Store(2, Index.loop(0), value)],
                  label="gather", status=3)


# ---- a second target reuses the shared semantics ---------------------------------------------
@pytest.mark.parametrize("kernel", [chain_kernel(), reduce_kernel(Op.SUM),
                                    reduce_kernel(Op.ARGMAX), gather_kernel(9, 6)],
                         ids=["chain", "sum", "argmax", "gather"])
def test_second_target_verifies(kernel):
    text = grid_source(kernel)
    verified(text)
    assert "%nthreads" in text and "@grid_kernel(i64 %tid" in text
    # nothing of the CPU target leaks into it
    assert "%start" not in text and "fastlaunch_" not in text and "attributes #" not in text


def test_second_target_elementwise_chain(host_jit):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(F32)
    y = rng.uniform(0, 2, (3, 5)).astype(F32)
    out = np.zeros((3, 5), F32)
    host_jit(chain_kernel(), [x, y, 0.5, out], nthreads=4)
    want = np.exp(x * np.float32(0.5)) / (y + np.float32(1))
    np.testing.assert_allclose(out, want, rtol=2e-6)
    assert "call float @expf(" in grid_source(chain_kernel())


@pytest.mark.parametrize("op, numpy_fn", [(Op.SUM, np.sum), (Op.MAX, np.max),
                                          (Op.ARGMAX, np.argmax)])
def test_second_target_reduction(host_jit, op, numpy_fn):
    x = np.random.default_rng(1).standard_normal((4, 7))
    out = np.zeros(4, I64 if op is Op.ARGMAX else F64)
    host_jit(reduce_kernel(op), [x, out], nthreads=3)
    want = numpy_fn(x, axis=1)
    if op is Op.ARGMAX:
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out, want, rtol=1e-12)


def test_second_target_gather_and_error_flag(host_jit):
    table = np.arange(6, dtype=F64) * 10
    idx = np.array([0, 5, -1, 3, -6, 2, 1, 4, 0], I64)
    out, status = np.zeros(9), np.zeros(1, I64)
    host_jit(gather_kernel(9, 6), [table, idx, out, status], nthreads=2)
    np.testing.assert_array_equal(out, table[idx])
    assert status[0] == 0
    bad = idx.copy()
    bad[4] = 6                    # out of range: element 0 is read and the INDEX bit is raised
    out[:] = -1
    host_jit(gather_kernel(9, 6), [table, bad, out, status], nthreads=2)
    assert status[0] == int(KernelError.INDEX)
    np.testing.assert_array_equal(np.delete(out, 4), np.delete(table[bad % 6], 4))


@pytest.mark.parametrize("fn, args", [
    (lambda x, y: np.logaddexp(np.sin(x) * y, x // y) % 3, (np.ones(50, np.float32),) * 2),
    (lambda x: np.tanh(x) + np.nextafter(x, x * 2), (np.ones((4, 8), np.float16),)),
    (lambda a, b: a @ b, (np.ones((8, 6)), np.ones((6, 5)))),
    (lambda x: (np.cumsum(x), np.argmin(x, axis=0)), (np.ones((5, 6), np.int32),)),
    (lambda x: np.exp(x).sum(), (np.ones(40000, np.float32),)),
    (lambda x, i: x[i] ** 2, (np.ones(10), np.arange(5))),
    (lambda x, y: (x // y, x % y, x ** y, x < y), (np.ones(7, np.int64), np.ones(7, np.uint64))),
], ids=["float-math", "half", "matmul", "scan-argmin", "split-sum", "gather", "int-ops"])
def test_second_target_takes_fused_kernels(fn, args):
    """Every kernel the fuser emits (also as the CPU schedule splits and tiles them) lowers
    through the second target to verified LLVM IR: it reads nothing of the CPU schedule."""
    plan = schedule(fl.compile(fn, backend="null").lower(*args).fused)
    assert plan.kernels
    for k in plan.kernels:
        verified(grid_source(k))


class Untouchable:
    def __getattr__(self, name):
        raise AssertionError(f"the target-neutral code generator read schedule.{name}")


def test_shared_code_reads_no_schedule():
    for k in (chain_kernel(), reduce_kernel(Op.SUM), gather_kernel(4, 3)):
        k.schedule = Untouchable()
        verified(grid_source(k))


# ---- the CPU target's text is what it was before the split -----------------------------------
def test_cpu_text_of_a_small_kernel():
    text = generate(chain_kernel((8,)), MathTarget(), name="k")
    assert text == CHAIN_GOLDEN
    verified(text)


def cpu_kernels():
    tiled = reduce_kernel(Op.SUM, rows=6, cols=10)
    tiled.schedule = CPUSchedule(launch_size=1, work_per_item=60, tile=(4, 64))
    math = MathTarget(isas=(("d", 256),), available=frozenset({"_ZGVdN8v_expf"}), vector_bits=512)
    return {"chain": (chain_kernel(), MathTarget()), "chain-libmvec": (chain_kernel(), math),
            "argmax": (reduce_kernel(Op.ARGMAX), MathTarget()),
            "tiled-sum": (tiled, MathTarget()), "gather": (gather_kernel(9, 6), MathTarget())}


# sha256 of each kernel's CPU text, generated by the code before the split (commit b669be0);
# since then only the entry's attributes changed ("stackrealign") and the row loop driver
# takes the outermost index as it is, without a urem by the outermost extent (symbolic sizes)
CPU_GOLDEN = {
    "argmax": "1f6fb82475b0546eee9828d3fb75a017db00ae64f9e323b6c6252b106373b684",
    "chain": "43647db7b57dbf2f797d6046f03ba835cb7d349f6f3eebd05a33e049513f86cf",
    "chain-libmvec": "3520b20df6a427d6b05e024299137ce3d0049d8155fc3f54f2553a02606c1136",
    "gather": "7478401fe477cd1b00aca9c6b81f367d281b3608de6487144e134a385261f943",
    "tiled-sum": "90aa183c33f8fa62c725f38ba8c48ff1463a5c0ef4fed772f965789cd128951a",
}


@pytest.mark.parametrize("label", sorted(CPU_GOLDEN))
def test_cpu_text_unchanged(label):
    kernel, math = cpu_kernels()[label]
    text = generate(kernel, math)
    verified(text)
    assert hashlib.sha256(text.encode()).hexdigest() == CPU_GOLDEN[label]


CHAIN_GOLDEN = '''\
; fastlaunch kernel: map
define void @k(i64 %start, i64 %end, ptr noalias nocapture readonly %args) #2 {
entry:
  %w0.p = getelementptr inbounds i64, ptr %args, i64 0
  %w0 = load ptr, ptr %w0.p, align 8
  %w1.p = getelementptr inbounds i64, ptr %args, i64 1
  %w1 = load ptr, ptr %w1.p, align 8
  %w2.p = getelementptr inbounds i64, ptr %args, i64 2
  %w2 = load double, ptr %w2.p, align 8
  %w3.p = getelementptr inbounds i64, ptr %args, i64 3
  %w3 = load ptr, ptr %w3.p, align 8
  call void @k.body(i64 %start, i64 %end, ptr %w0, ptr %w1, double %w2, ptr %w3)
  ret void
}
define internal void @k.body(i64 %start, i64 %end, ptr noalias %p0, ptr noalias %p1, double %s2.w, ptr noalias %p3) #0 {
entry:
  %t1 = fptrunc double %s2.w to float
  %t4 = icmp slt i64 %start, %end
  br i1 %t4, label %loop2, label %done3
loop2:
  %i5 = phi i64 [ %start, %entry ], [ %t15, %loop2 ]
  %a6 = getelementptr inbounds float, ptr %p0, i64 %i5
  %t7 = load float, ptr %a6, align 4
  %t8 = fmul float %t7, %t1
  %t9 = call float @fastlaunch_expf(float %t8)
  %a10 = getelementptr inbounds float, ptr %p1, i64 %i5
  %t11 = load float, ptr %a10, align 4
  %t12 = fadd float %t11, 0x3FF0000000000000
  %t13 = fdiv float %t9, %t12
  %a14 = getelementptr inbounds float, ptr %p3, i64 %i5
  store float %t13, ptr %a14, align 4
  %t15 = add nuw nsw i64 %i5, 1
  %t16 = icmp slt i64 %t15, %end
  br i1 %t16, label %loop2, label %done3
done3:
  ret void
}
declare float @fastlaunch_expf(float) #1
declare i64 @llvm.umin.i64(i64, i64)
attributes #0 = { alwaysinline nounwind }
attributes #2 = { nounwind "stackrealign" }
attributes #1 = { nounwind willreturn memory(none) }
'''
