"""The devsim backend: the CPU's kernels behind a simulated device boundary.

What a device backend needs from the pipeline, checked without a GPU: host<->device copies in
the bytecode, a verifier that rejects programs whose kernels touch the wrong space or whose
device results never come back, real results, kernel errors raised through a status word in
device memory (no argument modified, no device memory leaked), and an executable that lives
in an extension module of its own, implementing _core's executable interface.
"""
import dataclasses
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core, _devsim
from fastlaunch.program import bytecode
from fastlaunch.__main__ import step
from fastlaunch._launch import Opcode, Space
from fastlaunch.program.bytecode import VerifyError

DEVICE = int(Space.SPACE_DEVICE)
HOST = int(Space.SPACE_HOST)


def devsim(fn):
    return fl.compile(fn, backend="devsim")


def step_args(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32),
            (rng.standard_normal(n) * 0.1).astype(np.float32),
            (rng.random(n) * 0.1).astype(np.float32),
            rng.standard_normal(n).astype(np.float32), 1e-2)


def live_bytes() -> int:
    return _devsim.device_stats()["live_bytes"]


def ops_at(program):
    return [(pc, op, operands) for pc, op, operands in program.instructions()]


def without_instruction(program, pc):
    """The program with the instruction at pc cut out (the bytecode has no jumps, so nothing
    else moves but the pcs after it)."""
    w = bytecode.width(program.code[pc])
    code = np.concatenate([program.code[:pc], program.code[pc + w:]])
    return dataclasses.replace(program, code=code)


def with_slots(program, **changes_by_slot):
    slots = [dataclasses.replace(s) for s in program.slots]
    for slot, changes in changes_by_slot.items():
        slots[int(slot[1:])] = dataclasses.replace(slots[int(slot[1:])], **changes)
    return dataclasses.replace(program, slots=slots)


# ---- (a) the crossings, as the disassembly shows them -------------------------------------------
def test_step_program_copies_arguments_in_and_results_out():
    args = step_args()
    program = devsim(step).lower(*args).program
    bytecode.verify(program, DEVICE)
    lines = program.disassemble().splitlines()
    slot_of = {s.label: i for i, s in enumerate(program.slots)}

    # one TO_DEVICE per array argument (the Python float lr is a parameter word: no copy)
    want_in = {f"TO_DEVICE dst={slot_of[f'in{i}@dev']} src={i} nbytes=256  ; "
               f"{slot_of[f'in{i}@dev']}:in{i}@dev <- {i}:in{i}" for i in range(4)}
    got_in = {ln.split(": ", 1)[1] for ln in lines if "TO_DEVICE" in ln}
    assert got_in == want_in
    # one TO_HOST per result: three float32[64] and the 0-d loss
    want_out = {f"TO_HOST dst={slot_of[f'out{k}']} src={slot_of[f'out{k}@dev']} nbytes={n}  ; "
                f"{slot_of[f'out{k}']}:out{k} <- {slot_of[f'out{k}@dev']}:out{k}@dev"
                for k, n in enumerate([256, 256, 256, 4])}
    got_out = {ln.split(": ", 1)[1] for ln in lines if "TO_HOST" in ln}
    assert got_out == want_out
    # each disassembly line is what line_at (used in error messages) prints for its pc
    for pc, _, _ in ops_at(program):
        assert program.line_at(pc) in lines

    # order: a copy in follows its ALLOC and precedes every BIND of the shadow; the copies
    # out follow the last launch; every shadow is freed
    instrs = ops_at(program)
    last_launch = max(pc for pc, op, _ in instrs if op is Opcode.LAUNCH)
    for pc, op, (dst, _src, _) in [(pc, op, o) for pc, op, o in instrs
                                  if op in (Opcode.TO_DEVICE, Opcode.TO_HOST)]:
        if op is Opcode.TO_DEVICE:
            alloc = next(p for p, o, a in instrs if o is Opcode.ALLOC and a[0] == dst)
            binds = [p for p, o, a in instrs if o is Opcode.BIND and
                     dst in program.arg_lists[a[1]:a[1] + a[2]]]
            assert alloc < pc < min(binds)
        else:
            assert pc > last_launch
    allocs = sorted(a[0] for _, o, a in instrs if o is Opcode.ALLOC)
    frees = sorted(a[0] for _, o, a in instrs if o is Opcode.FREE)
    assert allocs == frees
    for _i, s in enumerate(program.slots):
        if s.role in ("temp", "const", "status"):
            assert s.space == DEVICE, s
        else:
            assert s.space == HOST, s


def test_in_place_update_copies_back():
    def f(x, y):
        x += y

    program = devsim(f).lower(np.ones(8), np.ones(8)).program
    text = program.disassemble()
    sh = next(i for i, s in enumerate(program.slots) if s.label == "in0@dev")
    assert re.search(rf"^\d{{4}}: TO_HOST dst=0 src={sh} nbytes=64  ; 0:in0 <- {sh}:in0@dev$",
                     text, re.M), text
    # y is only read: copied in, never back
    assert "dst=1 " not in "\n".join(ln for ln in text.splitlines() if "TO_HOST" in ln)


# ---- (b) a kernel reading the wrong space ---------------------------------------------------
def _program_and_shadow():
    program = devsim(lambda x, y: np.sin(x) * y).lower(np.ones(8), np.ones(8)).program
    bytecode.verify(program, DEVICE)
    shadow = next(i for i, s in enumerate(program.slots) if s.label == "in0@dev")
    return program, shadow


def test_verifier_rejects_a_kernel_bound_to_a_host_slot():
    program, shadow = _program_and_shadow()
    lists = program.arg_lists.copy()
    lists[list(lists).index(shadow)] = 0          # bind the host argument itself
    bad = dataclasses.replace(program, arg_lists=lists)
    with pytest.raises(VerifyError, match=r"reads slot 0 in host space; the kernels run in "
                                          r"device space") as err:
        bytecode.verify(bad, DEVICE)
    assert err.value.args[0].rstrip().endswith(bad.disassemble().splitlines()[-1])


def test_verifier_rejects_a_shadow_in_the_wrong_space():
    program, shadow = _program_and_shadow()
    bad = with_slots(program, **{f"s{shadow}": {"space": HOST}})
    with pytest.raises(VerifyError) as err:
        bytecode.verify(bad, DEVICE)
    message = str(err.value)
    assert f"TO_DEVICE: copies host slot 0 to host slot {shadow}" in message
    assert f"reads slot {shadow} in host space" in message


def test_verifier_rejects_device_slots_on_a_host_backend():
    program, shadow = _program_and_shadow()
    with pytest.raises(VerifyError, match=f"slot {shadow}: device space on a host-only backend"):
        bytecode.verify(program, HOST)


def test_verifier_rejects_a_status_word_outside_the_kernels_space():
    program = devsim(lambda x, i: x[i]).lower(np.ones(4), np.array([1, 2])).program
    status = program.status_slot
    assert status >= 0 and program.slots[status].space == DEVICE
    with pytest.raises(VerifyError, match=f"slot {status}: status slot outside the kernels' "
                                          f"space"):
        bytecode.verify(with_slots(program, **{f"s{status}": {"space": HOST}}), DEVICE)


# ---- (c) device results that never come back ----------------------------------------------
def test_verifier_rejects_a_result_left_on_the_device():
    program = devsim(step).lower(*step_args()).program
    to_host = [(pc, ops) for pc, op, ops in ops_at(program) if op is Opcode.TO_HOST]
    pc, (dst, src, _) = to_host[0]
    with pytest.raises(VerifyError, match=rf"end: output slot {dst} is never written \(a device "
                                          rf"result must be copied out with TO_HOST\)"):
        bytecode.verify(without_instruction(program, pc), DEVICE)


def test_verifier_rejects_an_in_place_update_left_on_the_device():
    def f(x, y):
        x += y

    program = devsim(f).lower(np.ones(8), np.ones(8)).program
    instrs = ops_at(program)
    (to_host_pc, (dst, shadow, _)), = [(pc, ops) for pc, op, ops in instrs
                                       if op is Opcode.TO_HOST]
    assert dst == 0
    free_pc = next(pc for pc, op, ops in instrs if op is Opcode.FREE and ops == [shadow])
    assert free_pc == to_host_pc + 4
    # no copy back: the update is lost where its device copy is freed...
    lost = without_instruction(program, to_host_pc)
    with pytest.raises(VerifyError, match=rf"FREE: frees slot {shadow}, the copy of argument "
                                          rf"slot 0 written at \d{{4}}: LAUNCH, before a TO_HOST "
                                          rf"brings the in-place update back"):
        bytecode.verify(lost, DEVICE)
    # ...or at the end, when the copy is not freed either
    kept = without_instruction(lost, to_host_pc)
    with pytest.raises(VerifyError) as err:
        bytecode.verify(kept, DEVICE)
    assert re.search(r"end: argument slot 0 is updated in place through a copy written at "
                     r"\d{4}: LAUNCH, which is never copied back with TO_HOST", str(err.value))
    # swapped (FREE, then TO_HOST from freed memory): both wrongs are named
    code = program.code.copy()
    code[to_host_pc:to_host_pc + 2] = [Opcode.FREE, shadow]
    code[to_host_pc + 2:to_host_pc + 6] = program.code[to_host_pc:to_host_pc + 4]
    with pytest.raises(VerifyError) as err:
        bytecode.verify(dataclasses.replace(program, code=code), DEVICE)
    assert f"frees slot {shadow}, the copy of argument slot 0" in str(err.value)
    assert f"slot {shadow} is used before it is allocated" in str(err.value)


# ---- (d) real results ----------------------------------------------------------------------
@pytest.mark.parametrize("n", [16, 1000, 40000])
def test_step_matches_numpy_and_the_cpu_backend(n):
    args = step_args(n)
    want = step(*args)
    got = devsim(step)(*args)
    on_cpu = fl.compile(step, backend="cpu")(*args)
    for g, c, w in zip(got, on_cpu, want):
        assert type(g) is type(w) and np.shape(g) == np.shape(w) and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
        # the same kernels run on the same values: bit for bit what the CPU backend gives
        assert np.array_equal(g, c)


@pytest.mark.parametrize("update", ["iadd", "slice", "out", "scatter"])
def test_in_place_updates_replay_into_the_callers_array(update):
    def f(x, y):
        if update == "iadd":
            x += y
        elif update == "slice":
            x[1:] = y[:-1] * 2.0
        elif update == "out":
            np.multiply(x, y, out=x)
        else:
            np.add.at(x, np.array([0, 2, 2, 5]), y[:4])
        return x.sum()

    cf = devsim(f)
    rng = np.random.default_rng(1)
    for _call in range(3):                    # traced once, then replayed
        x, y = rng.standard_normal(6), rng.standard_normal(6)
        want_x = x.copy()
        want = f(want_x, y)
        got = cf(x, y)
        np.testing.assert_allclose(x, want_x, rtol=1e-13)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert cf.stats["traces"] == 1


def test_constants_live_on_the_device():
    table = np.arange(5.0) * 1.5

    def f(x):
        return x * table

    cf = devsim(f)
    program = cf.lower(np.ones(5)).program
    (const_slot, _), = program.consts
    assert program.slots[const_slot].space == DEVICE
    np.testing.assert_array_equal(cf(np.full(5, 2.0)), np.full(5, 2.0) * table)


def test_strided_and_reversed_arguments():
    def f(x, y):
        return x * 2.0 + y

    base = np.arange(24.0).reshape(4, 6)
    cf = devsim(f)
    for x, y in [(base[:, ::2], base[::2, 1::2].repeat(2, 0)), (base[::-1], base.T.T),
                 (base.T, base.T[::-1])]:
        np.testing.assert_array_equal(cf(x, y), x * 2.0 + y)


# ---- (e) errors through the status word on the device ---------------------------------------
def test_out_of_range_gather_raises_and_leaks_nothing():
    def f(x, idx, table):
        x += table[idx]
        return x * 2.0

    cf = devsim(f)
    table = np.arange(10.0)
    x = np.ones(4)
    good = np.array([0, 9, -1, 3])
    np.testing.assert_array_equal(cf(x.copy(), good, table), (1.0 + table[good]) * 2.0)
    start = live_bytes()
    for bad in ([0, 10, 1, 2], [-11, 0, 0, 0]):
        x = np.ones(4)
        idx = np.array(bad)
        with pytest.raises(IndexError, match="out of bounds") as err:
            cf(x, idx, table)
        assert np.array_equal(x, np.ones(4)), "an argument was modified"
        assert np.array_equal(idx, bad) and np.array_equal(table, np.arange(10.0))
        assert live_bytes() == start, "device memory leaked"
        program = cf.lower(x, idx, table).program
        (check_pc,) = [pc for pc, op, _ in ops_at(program) if op is Opcode.CHECK]
        assert f"(at {program.line_at(check_pc)})" in str(err.value)
    # the executable is still good
    x = np.ones(4)
    cf(x, good, table)
    np.testing.assert_array_equal(x, 1.0 + table[good])
    assert live_bytes() == start


def test_out_of_range_scatter_raises_and_leaks_nothing():
    def f(x, idx, v):
        np.add.at(x, idx, v)

    cf = devsim(f)
    x = np.zeros(5)
    cf(x, np.array([1, 1]), np.ones(2))
    assert np.array_equal(x, [0, 2, 0, 0, 0])
    start = live_bytes()
    with pytest.raises(IndexError):
        cf(x, np.array([1, 5]), np.ones(2))
    assert np.array_equal(x, [0, 2, 0, 0, 0])
    assert live_bytes() == start


def test_successful_calls_leak_nothing():
    cf = devsim(step)
    args = step_args(3000)
    cf(*args)
    start = live_bytes()
    allocations = _devsim.device_stats()["allocations"]
    for _ in range(3):
        cf(*args)
    assert live_bytes() == start
    assert _devsim.device_stats()["allocations"] > allocations      # it did use the device


# ---- (f) a separate extension module implementing _core's interface -----------------------
def test_devsim_is_its_own_extension_module():
    assert _devsim.__name__ == "fastlaunch._devsim"
    assert _devsim.__file__ != _core.__file__
    assert os.path.splitext(_devsim.__file__)[1] in (".so", ".pyd")
    assert issubclass(_devsim.DevSimExecutable, _core.Executable)
    assert not issubclass(_devsim.DevSimExecutable, _core.HostExecutable)
    cf = devsim(lambda x: x + 1.0)
    cf(np.ones(3))
    (entry,) = cf._entries_list()
    assert type(entry.executable) is _devsim.DevSimExecutable


def test_importing_fastlaunch_does_not_load_devsim():
    code = ("import sys, numpy as np, fastlaunch as fl\n"
            "fl.compile(lambda x: x * 2.0, backend='cpu')(np.ones(3))\n"
            "assert 'fastlaunch._devsim' not in sys.modules, 'loaded'\n"
            "fl.compile(lambda x: x * 2.0, backend='devsim')(np.ones(3))\n"
            "assert 'fastlaunch._devsim' in sys.modules\n")
    env = dict(os.environ, FASTLAUNCH_BACKEND="")
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr


# ---- saved programs ---------------------------------------------------------------------------
def test_saved_devsim_program_loads_and_runs(tmp_path):
    """A saved program is verified against the memory model of the backend that loads it."""
    args = step_args(32)
    path = tmp_path / "step.flp"
    devsim(step).save(path, *args)
    loaded = fl.load(path)
    for g, w in zip(loaded(*args), devsim(step)(*args)):
        assert np.array_equal(g, w)
    with pytest.raises(fl.SavedProgramError, match="device space on a host-only backend"):
        fl.load(path, backend="cpu")
