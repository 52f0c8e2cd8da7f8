"""fastlaunch.program.bytecode: assembler, disassembler, verifier and (de)serialiser."""
import dataclasses

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.program import bytecode as bc
from fastlaunch._launch import Opcode
from fastlaunch.__main__ import step


# ---- fixtures ------------------------------------------------------------------------------
def hand_program():
    """in0 -> tmp (kernel 0) -> out0 (kernel 1), written with the Assembler."""
    asm = bc.Assembler()
    asm.alloc(2, 32)
    asm.launch(0, 8, [0, 2])
    asm.launch(1, 8, [2, 1])
    asm.free(2)
    code, arg_lists = asm.arrays()
    slots = [bc.SlotInfo("input", "<f4", 0, 7, label="in0"),
             bc.SlotInfo("output", "<f4", 0, 7, label="out0"),
             bc.SlotInfo("temp", "<f4", 0, 7, 32, label="tmp")]
    kinfo = dict(arg_kinds=("buffer", "buffer"), arg_ranges=((0, 7), (0, 7)),
                 arg_writes=(False, True), arg_dtypes=("<f4", "<f4"))
    kernels = [bc.KernelInfo("k0", "map", **kinfo), bc.KernelInfo("k1", "map", **kinfo)]
    return bc.Program(code, arg_lists, slots, kernels, asm.nargwords, 1,
                      outputs=[(1, "<f4", (8,))])


HAND_DISASSEMBLY = """\
; 3 slots, 4 argument words, 2 kernels, peak temporaries 32 bytes
;   slot 0: input float32 in0
;   slot 1: output float32 out0
;   slot 2: temp float32 tmp nbytes=32
0000: ALLOC   slot=2 nbytes=32  ; 2:tmp
0003: BIND    args_at=0 list_at=0 count=2  [0:in0, 2:tmp]
0007: LAUNCH  kernel=0 n=8 args_at=0  ; map (k0)
0011: BIND    args_at=2 list_at=2 count=2  [2:tmp, 1:out0]
0015: LAUNCH  kernel=1 n=8 args_at=2  ; map (k1)
0019: FREE    slot=2  ; 2:tmp"""


def real_program(fn, *args, **kw):
    return fl.compile(fn, backend="null", **kw).lower(*args).program


@pytest.fixture(scope="module")
def step_program():
    return real_program(step, *[np.ones(64, np.float32)] * 4, 1e-2)


def _centre(x):
    return x - x.mean()


@pytest.fixture(scope="module")
def temp_program():
    """A program with a temporary between two kernels (the sum, read by the subtraction; a
    row too long to fold it in the subtraction's kernel)."""
    p = real_program(_centre, np.ones(8192, np.float32))
    assert [s.role for s in p.slots].count("temp") == 1
    return p


def _iadd(x, y):
    x += y


@pytest.fixture(scope="module")
def inplace_program():
    return real_program(_iadd, np.ones(16), np.ones(16))


def clone(p, **changes):
    """A deep-enough copy of p, so corrupting it leaves the fixture alone."""
    fields = dict(code=p.code.copy(), arg_lists=p.arg_lists.copy(),
                  slots=[dataclasses.replace(s) for s in p.slots],
                  kernels=[dataclasses.replace(k) for k in p.kernels],
                  consts=list(p.consts), outputs=list(p.outputs),
                  mutated_leaves=list(p.mutated_leaves))
    fields.update(changes)
    return dataclasses.replace(p, **fields)


def find(p, opcode, nth=0):
    hits = [(pc, ops) for pc, op, ops in p.instructions() if op is opcode]
    return hits[nth]


def delete_instruction(p, pc):
    w = bc.width(int(p.code[pc]))
    return clone(p, code=np.delete(p.code, np.s_[pc:pc + w]))


def assert_rejected(p, *fragments):
    with pytest.raises(bc.VerifyError) as info:
        bc.verify(p)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, msg
    # the message carries the disassembly of the bad program
    assert p.disassemble() in msg
    return msg


# ---- opcodes ---------------------------------------------------------------------------------
def test_opcode_widths_match_operand_names():
    assert set(bc.OPERANDS) == set(Opcode)
    for op in Opcode:
        assert bc.width(op) == 1 + len(bc.OPERANDS[op]), op.name
        assert bc.width(int(op)) == bc.width(op)


def test_opcodes_are_distinct_and_named():
    values = [int(op) for op in Opcode]
    assert len(set(values)) == len(values)
    assert {op.name for op in Opcode} >= {"ALLOC", "FREE", "BIND", "LAUNCH"}


def test_assembler_emits_widths_the_decoder_walks():
    p = hand_program()
    decoded = [(pc, op.name, ops) for pc, op, ops in p.instructions()]
    assert decoded == [(0, "ALLOC", [2, 32]), (3, "BIND", [0, 0, 2]), (7, "LAUNCH", [0, 8, 0]),
                       (11, "BIND", [2, 2, 2]), (15, "LAUNCH", [1, 8, 2]), (19, "FREE", [2])]
    assert len(p.code) == 21
    assert p.code.dtype == np.int64 and p.arg_lists.dtype == np.int64
    assert list(p.arg_lists) == [0, 2, 2, 1]
    assert p.nargwords == 4


# ---- disassembly ---------------------------------------------------------------------------
def test_disassembly_golden():
    p = hand_program()
    assert p.disassemble() == HAND_DISASSEMBLY


def test_hand_program_facts():
    p = hand_program()
    bc.verify(p)
    assert p.peak_temp_bytes() == 32
    assert p.launch_count() == 2


def test_real_disassembly_lists_every_slot_and_instruction(step_program):
    text = step_program.disassemble()
    for i in range(len(step_program.slots)):
        assert f";   slot {i}: " in text
    n_instr = sum(1 for _ in step_program.instructions())
    assert sum(1 for ln in text.splitlines() if not ln.startswith(";")) == n_instr


# ---- the verifier accepts real programs ------------------------------------------------------
def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _setslice(x, v):
    x[1:3] = v
    return x * 2


@pytest.mark.parametrize("fn, args", [
    (lambda x: x * 2 + 1, (np.ones(10, np.float32),)),
    (lambda x: x / x.sum(), (np.ones(1000),)),
    (_softmax, (np.ones((4, 16), np.float32),)),
    (lambda x: np.sum(x * x), (np.ones(1 << 16, np.float32),)),
    (lambda x: x.T[::2] + 1, (np.ones((6, 5)),)),
    (_setslice, (np.ones(8), 3.0)),
    (lambda x: x + np.arange(8.0) * np.pi, (np.ones(8),)),    # a captured constant
], ids=["map", "x/sum", "softmax", "split-sum", "view", "setslice", "const"])
def test_verify_accepts_real_programs(fn, args):
    bc.verify(real_program(fn, *args))


def test_verify_accepts_step_and_inplace(step_program, inplace_program):
    bc.verify(step_program)
    bc.verify(inplace_program)


# ---- the verifier rejects corrupted programs --------------------------------------------------
def test_rejects_bad_opcode(step_program):
    p = clone(step_program)
    p.code[0] = 0x7777
    assert_rejected(p, "unknown opcode", "0x7777")


def test_rejects_unknown_opcode_with_plausible_width():
    bogus = 0x7E02                        # low byte 2: a width the decoder would step over
    assert bogus not in {int(op) for op in Opcode}
    p = hand_program()
    p.code = np.concatenate([[bogus, 0], p.code]).astype(np.int64)
    assert_rejected(p, "unknown opcode")


def test_rejects_truncated_instruction(step_program):
    p = clone(step_program, code=step_program.code[:-1].copy())
    assert_rejected(p, "runs past the end")


def test_rejects_read_of_unallocated_temp(temp_program):
    """Neither ALLOC nor FREE for the temporary: its BIND reads an unset slot."""
    pc, (slot, _) = find(temp_program, Opcode.ALLOC)
    p = delete_instruction(temp_program, pc)
    free_pc = next(pc for pc, op, ops in p.instructions() if op is Opcode.FREE and ops == [slot])
    p = delete_instruction(p, free_pc)
    assert_rejected(p, f"slot {slot} is read before it is allocated")


def test_rejects_missing_alloc(temp_program):
    pc, (slot, _) = find(temp_program, Opcode.ALLOC)
    p = delete_instruction(temp_program, pc)
    assert_rejected(p, f"slot {slot} is read before it is allocated", "is not allocated")


def test_rejects_read_after_free(temp_program):
    pc, _ = find(temp_program, Opcode.FREE)
    # move the FREE to the very start: every later read of the slot is of a dead temporary
    w = bc.width(Opcode.FREE)
    instr = temp_program.code[pc:pc + w]
    rest = np.delete(temp_program.code, np.s_[pc:pc + w])
    alloc_pc, _ = find(temp_program, Opcode.ALLOC)
    end_of_alloc = alloc_pc + bc.width(Opcode.ALLOC)
    code = np.concatenate([rest[:end_of_alloc], instr, rest[end_of_alloc:]])
    assert_rejected(clone(temp_program, code=code), "read before it is allocated")


def test_rejects_kernel_index_out_of_range(step_program):
    pc, _ = find(step_program, Opcode.LAUNCH)
    p = clone(step_program)
    p.code[pc + 1] = len(p.kernels)
    assert_rejected(p, f"kernel {len(p.kernels)} out of range")


def test_rejects_slot_index_out_of_range(step_program):
    p = clone(step_program)
    p.arg_lists[0] = len(p.slots) + 5
    assert_rejected(p, f"slot {len(p.slots) + 5} out of range")


def test_rejects_argument_range_bigger_than_its_slot(step_program):
    p = clone(step_program)
    k = p.kernels[0]
    i = k.arg_kinds.index("buffer")
    lo, hi = k.arg_ranges[i]
    ranges = list(k.arg_ranges)
    ranges[i] = (lo, hi + 1)
    p.kernels[0] = dataclasses.replace(k, arg_ranges=tuple(ranges))
    assert_rejected(p, f"argument {i} of {k.name} touches elements")


def test_rejects_slot_shrunk_below_kernel_range(step_program):
    p = clone(step_program)
    s = next(i for i, s in enumerate(p.slots) if s.role == "input")
    p.slots[s].hi -= 1
    assert_rejected(p, "touches elements", f"outside slot {s}")


def test_rejects_alloc_smaller_than_slot(temp_program):
    pc, (slot, nbytes) = find(temp_program, Opcode.ALLOC)
    p = clone(temp_program)
    p.code[pc + 2] = nbytes - 1
    assert_rejected(p, f"less than slot {slot} needs")


def test_rejects_temp_never_freed(temp_program):
    pc, (slot,) = find(temp_program, Opcode.FREE)
    p = delete_instruction(temp_program, pc)
    assert_rejected(p, f"temporary slot {slot} is never freed")


def test_rejects_double_alloc(temp_program):
    pc, _ = find(temp_program, Opcode.ALLOC)
    w = bc.width(Opcode.ALLOC)
    instr = temp_program.code[pc:pc + w]
    code = np.concatenate([temp_program.code[:pc], instr, temp_program.code[pc:]])
    assert_rejected(clone(temp_program, code=code), "already allocated")


def test_rejects_write_to_input_not_declared_mutated(inplace_program):
    assert inplace_program.mutated_leaves == [0]
    p = clone(inplace_program, mutated_leaves=[])
    assert_rejected(p, "writes input slot 0", "not declare")


def test_rejects_write_to_param_or_const():
    p = hand_program()
    p.slots[0] = bc.SlotInfo("const", "<f4", 0, 7, label="c")
    p.kernels[0] = dataclasses.replace(p.kernels[0], arg_writes=(True, True))
    assert_rejected(p, "writes read-only slot 0")


def test_rejects_dtype_mismatch():
    p = hand_program()
    p.kernels[1] = dataclasses.replace(p.kernels[1], arg_dtypes=("<f8", "<f4"))
    assert_rejected(p, "is float64", "holds float32")


def test_rejects_wrong_argument_count():
    p = hand_program()
    p.kernels[0] = dataclasses.replace(p.kernels[0], arg_kinds=("buffer",) * 3,
                                       arg_ranges=((0, 7),) * 3, arg_writes=(False,) * 3,
                                       arg_dtypes=("<f4",) * 3)
    assert_rejected(p, "takes 3 arguments, 2 are bound")


def test_rejects_launch_without_bind():
    p = hand_program()
    pc, _ = find(p, Opcode.BIND, 1)
    assert_rejected(delete_instruction(p, pc), "no arguments bound")


def test_rejects_output_that_is_not_an_output_slot():
    p = hand_program()
    p.outputs = [(2, "<f4", (8,))]
    assert_rejected(p, "slot 2 is not an output slot")


def test_rejects_free_of_unallocated():
    p = hand_program()
    p.code = np.concatenate([p.code, [int(Opcode.FREE), 2]]).astype(np.int64)
    assert_rejected(p, "slot 2 is not allocated")


def test_verify_error_is_a_value_error():
    assert issubclass(bc.VerifyError, ValueError)


# ---- serialisation -------------------------------------------------------------------------
def assert_same_program(a, b):
    assert np.array_equal(a.code, b.code) and a.code.dtype == b.code.dtype
    assert np.array_equal(a.arg_lists, b.arg_lists)
    assert a.slots == b.slots
    assert a.kernels == b.kernels
    assert a.nargwords == b.nargwords and a.nleaves == b.nleaves
    assert a.outputs == b.outputs
    assert list(a.mutated_leaves) == list(b.mutated_leaves)
    assert [s for s, _ in a.consts] == [s for s, _ in b.consts]
    for (_, x), (_, y) in zip(a.consts, b.consts):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y)


def test_round_trip_hand_program():
    p = hand_program()
    q = bc.Program.from_bytes(p.to_bytes())
    assert_same_program(p, q)
    assert q.disassemble() == p.disassemble()
    assert q.to_bytes() == p.to_bytes()
    assert q.digest() == p.digest()


def test_round_trip_real_programs(step_program, inplace_program):
    for p in (step_program, inplace_program):
        q = bc.Program.from_bytes(p.to_bytes())
        assert_same_program(p, q)
        bc.verify(q)
        assert q.digest() == p.digest()


def test_round_trip_keeps_constants():
    table = np.arange(12, dtype=np.float32).reshape(3, 4) ** 2

    def f(x):
        return x * table

    p = real_program(f, np.ones((3, 4), np.float32))
    assert len(p.consts) == 1
    q = bc.Program.from_bytes(p.to_bytes())
    assert_same_program(p, q)
    assert not q.consts[0][1].flags.writeable


def test_digest_changes_with_the_code(step_program):
    p = clone(step_program)
    pc, _ = find(p, Opcode.LAUNCH)
    p.code[pc + 2] += 1
    assert p.digest() != step_program.digest()


@pytest.mark.parametrize("cut", [0, 4, 9, -1])
def test_truncated_bytes_are_rejected(step_program, cut):
    data = step_program.to_bytes()
    with pytest.raises(ValueError):
        bc.Program.from_bytes(data[:cut] if cut >= 0 else data[:-1])


# ---- loops (fl.iterate's opcodes), by hand ----------------------------------------------------
def hand_loop(move_write_from=2, body_extra=None, count=3, alias_dtype="<f4"):
    """out0 <- kernel k1 applied 3 times to in0, ping-ponging between temporaries A and B
    through three aliases (read, write, spare) and a counter."""
    asm = bc.Assembler()
    asm.alloc(2, 32)
    asm.alloc(3, 32)
    asm.move(4, 0)
    asm.move(5, move_write_from)
    asm.move(6, 3)
    asm.set(7, 0)
    head = asm.here()
    if body_extra:
        body_extra(asm)
    asm.launch(1, 8, [4, 5])
    asm.rotate(4, 5, 6)
    asm.loop(7, count, head)
    asm.copy(1, 4, 32)
    asm.free(2)
    asm.free(3)
    code, arg_lists = asm.arrays()
    slots = [bc.SlotInfo("input", "<f4", 0, 7, label="in0"),
             bc.SlotInfo("output", "<f4", 0, 7, label="out0"),
             bc.SlotInfo("temp", "<f4", 0, 7, 32, label="A"),
             bc.SlotInfo("temp", "<f4", 0, 7, 32, label="B"),
             bc.SlotInfo("alias", "<f4", 0, 7, label="x"),
             bc.SlotInfo("alias", alias_dtype, 0, 7, label="x.new"),
             bc.SlotInfo("alias", "<f4", 0, 7, label="x.spare"),
             bc.SlotInfo("counter", "<i8", label="i")]
    kinfo = dict(arg_kinds=("buffer", "buffer"), arg_ranges=((0, 7), (0, 7)),
                 arg_writes=(False, True), arg_dtypes=("<f4", "<f4"))
    kernels = [bc.KernelInfo("k0", "map", **kinfo), bc.KernelInfo("k1", "map", **kinfo)]
    return bc.Program(code, arg_lists, slots, kernels, asm.nargwords, 1,
                      outputs=[(1, "<f4", (8,))])


def test_hand_loop_verifies_and_disassembles():
    p = hand_loop()
    bc.verify(p)
    text = p.disassemble()
    assert "; ---- loop 0018..0030: again while 7:i < 3" in text
    assert "ROTATE  read=4 write=5 spare=6  ; 4:x <- 5:x.new <-> 6:x.spare" in text
    assert p.loops() == [(18, 30, 7, 3)]


def test_hand_loop_rejections():
    # the written alias on the (read-only) argument
    assert_rejected(hand_loop(move_write_from=0), "writes input slot 0 (through slot 5)")
    # the pool touched inside the body
    assert_rejected(hand_loop(body_extra=lambda a: (a.free(3), a.alloc(3, 32))),
                    "FREE inside the loop", "ALLOC inside the loop")
    # ping-pong slots of different dtypes
    assert_rejected(hand_loop(alias_dtype="<f8"), "cannot point into slot 2")
    # the counter reset inside its own loop: endless
    assert_rejected(hand_loop(body_extra=lambda a: a.set(7, 0)), "the loop might never end")
    # a negative start: a loop must run at most its count
    p = hand_loop()
    pc, _ = find(p, Opcode.SET)
    p.code[pc + 2] = -5
    assert_rejected(p, "value -5 out of range")


def hand_unrolled(count=5, poll_before_next=False, next_slot=1, next_back=False,
                  jump_back=False):
    """in0 (updated in place) <- kernel k applied `count` times in a loop unrolled by two, as
    fl.iterate records it: iteration 1 before the head, then two per round with NEXT between
    them; a long loop POLLs at each iteration boundary (the head, just after NEXT).  The
    argument word is bound once, before everything."""
    asm = bc.Assembler()
    asm.set(1, 0)
    a = asm.words(1)
    asm.bind(a, [0])
    asm.launch_bound(0, 8, a)
    first = asm.next(1, count)
    head = asm.here()
    asm.poll()
    asm.launch_bound(0, 8, a)
    if poll_before_next:
        asm.poll()
    mid = asm.next(next_slot, count)
    asm.poll()
    asm.launch_bound(0, 8, a)
    asm.loop(1, count, head)
    done = asm.jump()
    asm.patch(first, asm.here())
    asm.patch(mid, head if next_back else asm.here())
    asm.set(1, 0)                   # (only after an exit by NEXT)
    asm.patch(done, head if jump_back else asm.here())
    code, lists = asm.arrays()
    slots = [bc.SlotInfo("input", "<f4", 0, 7, label="in0"),
             bc.SlotInfo("counter", "<i8", label="i")]
    kernel = bc.KernelInfo("k", "map", ("buffer",), ((0, 7),), (True,), ("<f4",),
                           launch_size=8)
    return bc.Program(code, lists, slots, [kernel], asm.nargwords, 1, mutated_leaves=[0])


def test_hand_unrolled_loop_verifies_and_disassembles():
    for count in (1, 2, 5, 6):
        p = hand_unrolled(count)
        bc.verify(p, strict=True)
    text = p.disassemble()
    (head, end, ctr, n), = p.loops()
    assert (ctr, n) == (1, 6)
    nexts = [(pc, ops) for pc, op, ops in p.instructions() if op is Opcode.NEXT]
    assert len(nexts) == 2 and nexts[0][0] < head < nexts[1][0] < end
    assert f"NEXT    ctr=1 count=6 target={nexts[0][1][2]}  ; 1:i += 1, out to " \
           f"{nexts[0][1][2]:04d} once >= 6" in text
    assert "JUMP    target=" in text
    # one BIND for every launch: the word keeps its slot through the loop
    assert sum(1 for _, op, _ in p.instructions() if op is Opcode.BIND) == 1


def test_hand_unrolled_loop_rejections():
    # a POLL after an in-place write that is not at an iteration boundary
    assert_rejected(hand_unrolled(poll_before_next=True), "POLL: after an argument was written")
    # NEXT steps a counter
    assert_rejected(hand_unrolled(next_slot=0), "NEXT: slot 0 is not a counter")
    # NEXT and JUMP only jump forward
    assert_rejected(hand_unrolled(next_back=True), "NEXT: jumps back", "only LOOP jumps back")
    assert_rejected(hand_unrolled(jump_back=True), "JUMP: jumps back", "only LOOP jumps back")
    # a NEXT whose counter was never set
    p = hand_unrolled()
    pc, _ = find(p, Opcode.SET)
    p.code[pc:pc + 3] = [Opcode.POLL] * 3
    assert_rejected(p, "NEXT: counter slot 1 is read before it is set")


# ---- library calls (LIBCALL) ---------------------------------------------------------------------
def _gemm_inv(a, b, c):
    return a @ b + 1.0, np.linalg.inv(c)


@pytest.fixture(scope="module")
def libcall_program():
    return fl.compile(_gemm_inv).lower(np.ones((32, 24), np.float32),
                                       np.ones((24, 40), np.float32)[:, ::1],
                                       np.ones((3, 9, 9))).program    # 9 x 9: LAPACK


def find_call(p, name):
    """(pc, operands) of the first LIBCALL of routine `name` (gemm, inv...)."""
    return next((pc, ops) for pc, op, ops in p.instructions()
                if op is Opcode.LIBCALL and bc.ROUTINES[ops[0]].name == name)


def _set_word(p, pc, index, value):
    q = clone(p)
    q.code[pc + 1 + index] = value
    return q


def test_libcall_disassembles_with_routine_and_operands(libcall_program):
    text = libcall_program.disassemble()
    assert "LIBCALL gemm_float32 b=(1,1) m=32 n=40 k=24" in text
    assert "LIBCALL inv_float64 b=(3,1) m=9" in text
    bc.verify(libcall_program)
    assert sorted(libcall_program.library_routines()) == [0, 3]


def test_libcall_verifier_rejects_what_could_escape(libcall_program):
    p = libcall_program
    pc, ops = find_call(p, "gemm")
    names = bc.OPERANDS[Opcode.LIBCALL]
    at = {n: i for i, n in enumerate(names)}
    assert_rejected(_set_word(p, pc, at["m"], ops[at["m"]] + 1), "outside slot")
    assert_rejected(_set_word(p, pc, at["k"], ops[at["k"]] * 2), "outside slot")
    # a batch of 2 with a zero batch stride re-reads one matrix: safe, and accepted
    bc.verify(_set_word(p, pc, at["b1"], 2))
    # but not more matrices than the result has elements (CPU time bounded by memory)
    assert_rejected(_set_word(p, pc, at["b1"], 40 * 32 + 1), "at most one per element")
    assert_rejected(_set_word(_set_word(p, pc, at["b1"], 2), pc, at["z_sb1"], 1), "outside slot")
    assert_rejected(_set_word(p, pc, at["x_s0"], ops[at["x_s0"]] + 1), "outside slot")
    assert_rejected(_set_word(p, pc, at["x_off"], -1), "outside slot")
    assert_rejected(_set_word(p, pc, at["routine"], 1), "is float64, slot")   # dgemm on f32
    assert_rejected(_set_word(p, pc, at["routine"], 99), "unknown library routine 99")
    # what the routine would refuse at run time is refused here: a layout BLAS cannot take
    assert_rejected(_set_word(p, pc, at["z_s1"], 2), "gemm: operand strides BLAS cannot take")
    assert_rejected(_set_word(p, pc, at["z_s0"], 0), "gemm: operand strides BLAS cannot take")
    assert_rejected(_set_word(p, pc, at["m"], -1), "out of range")
    # the product writes its input: arguments are never library outputs
    assert_rejected(_set_word(p, pc, at["z"], ops[at["x"]]), "writes slot")
    pc2, ops2 = find_call(p, "inv")
    assert_rejected(_set_word(p, pc2, at["z"], 5), "unused operand z")
    assert_rejected(_set_word(p, pc2, at["y"], 10 ** 6), "out of range")


def test_libcall_of_a_freed_temporary_is_rejected(libcall_program):
    p = libcall_program
    pc, ops = find_call(p, "gemm")
    temp = ops[bc.OPERANDS[Opcode.LIBCALL].index("z")]
    assert p.slots[temp].role == "temp"
    # move the gemm before the ALLOC of its result
    alloc_pc, _ = next((q, o) for q, op, o in p.instructions()
                       if op is Opcode.ALLOC and o[0] == temp)
    w = bc.width(Opcode.LIBCALL)
    code = list(p.code)
    call = code[pc:pc + w]
    del code[pc:pc + w]
    code[alloc_pc:alloc_pc] = call
    assert_rejected(clone(p, code=np.array(code, np.int64)), "before it is allocated")


def test_libcall_verifier_checks_svd_and_lstsq_operands():
    """svd's job word sizes its packed result; lstsq's k sizes [a | b] and the result; rcond
    is a read-only 1 x 1 operand."""
    p = fl.compile(lambda a, b: (np.linalg.svd(a, full_matrices=False),
                                 np.linalg.lstsq(a, b)[0])).lower(np.ones((6, 4)),
                                                                  np.ones((6, 2))).program
    bc.verify(p)
    text = p.disassemble()
    assert "LIBCALL svd_float64 b=(1,1) m=6 n=4 k=1" in text
    assert "LIBCALL lstsq_float64 b=(1,1) m=6 n=4 k=2" in text
    at = {n: i for i, n in enumerate(bc.OPERANDS[Opcode.LIBCALL])}
    pc, ops = find_call(p, "svd")
    assert_rejected(_set_word(p, pc, at["k"], 2), "outside slot")      # reduced -> full
    assert_rejected(_set_word(p, pc, at["k"], 3), "svd: job k=3 is not 0, 1 or 2")
    assert_rejected(_set_word(p, pc, at["m"], 7), "outside slot")
    assert_rejected(_set_word(p, pc, at["z"], 3), "unused operand z")
    pc, ops = find_call(p, "lstsq")
    assert_rejected(_set_word(p, pc, at["k"], 3), "outside slot")
    assert_rejected(_set_word(p, pc, at["n"], 5), "outside slot")
    assert_rejected(_set_word(p, pc, at["y_off"], 1), "outside slot")    # rcond: 1 x 1
    # rcond is read, never written: pointing the result at it is refused if it is an input
    assert_rejected(_set_word(p, pc, at["z"], 0), "writes slot")


def test_null_backend_runs_library_calls_as_no_ops():
    g = fl.compile(np.linalg.inv, backend="null")
    # (20 x 20: a LAPACK call; smaller matrices are kernels, which do nothing there either)
    assert g(np.ones((20, 20))).shape == (20, 20)   # singular, but the null routine does nothing


def _checked_program():
    # a runtime check, as an `assert` on traced values or np.average's weights test make one
    from fastlaunch.frontend.numpy import common

    def traced(x):
        common.require(x.sum() > 0, AssertionError, "x.sum() > 0 failed")
        return x * 2
    return fl.compile(traced).lower(np.ones(4)).program


def test_runtime_checks_round_trip_and_verify():
    p = _checked_program()
    assert p.checks == [(8, "AssertionError", "x.sum() > 0 failed (fastlaunch: checked when the "
                         "compiled function ran; no argument was modified)")]
    q = bc.Program.from_bytes(p.to_bytes())
    assert q.checks == p.checks
    bc.verify(q)


@pytest.mark.parametrize("bad", [[(4, "AssertionError", "m")],           # a KernelError bit
                                 [(24, "AssertionError", "m")],          # two bits
                                 [(8, "SystemExit", "m")],               # not a check exception
                                 [(8, "ValueError", "m"), (8, "ValueError", "n")]])  # twice
def test_rejects_bad_runtime_check_tables(bad):
    p = dataclasses.replace(_checked_program(), checks=bad)
    with pytest.raises(bc.VerifyError, match="check"):
        bc.verify(p)
    with pytest.raises(bc.VerifyError, match="check"):
        bc.verify(bc.Program.from_bytes(p.to_bytes()))
    with pytest.raises(bc.VerifyError, match="check message"):
        bc.verify(dataclasses.replace(p, checks=[(8, "ValueError", 5)]))
