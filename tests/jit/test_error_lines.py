"""A run-time failure names the instruction it stopped at: the message carries the failing
instruction's disassembly line, exactly as `Program.line_at(pc)` and `disassemble()` print it,
on the host backend and on the device-space one (whose status word is device memory)."""
import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch._launch import Opcode

BACKENDS = ["cpu", "devsim"]


def gather(x, idx):
    return x[idx] * 2.0


def scatter(x, idx, v):
    np.add.at(x, idx, v)
    return x


def int_overflow(x, n):
    return x + n * n          # Python ints: exact in NumPy, checked in the kernels


CASES = {
    "gather": (gather, (np.arange(10.0), np.array([1, 2])), (np.arange(10.0), np.array([1, 10])),
               IndexError),
    "scatter-add": (scatter, (np.zeros(5), np.array([0, 4]), np.ones(2)),
                    (np.zeros(5), np.array([0, 5]), np.ones(2)), IndexError),
    "python-int-overflow": (int_overflow, (np.arange(3), 3), (np.arange(3), 2**40),
                            OverflowError),
}


def check_lines(program):
    return {pc: program.line_at(pc) for pc, op, _ in program.instructions() if op is Opcode.CHECK}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_failure_message_has_the_failing_instruction(backend, case):
    fn, good, bad, exc = CASES[case]
    cf = fl.compile(fn, backend=backend)
    cf(*good)
    program = cf.lower(*good).program
    # the first CHECK follows the kernel that validates the indices (or the arithmetic);
    # a scatter on the host checks again after the kernel that applies it
    pc = min(check_lines(program))
    line = program.line_at(pc)
    assert line in program.disassemble().splitlines()
    assert line.startswith(f"{pc:04d}: CHECK   slot={program.status_slot}")
    with pytest.raises(exc) as err:
        cf(*bad)
    assert str(err.value).endswith(f"(at {line})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_with_several_checks_the_message_names_one(backend):
    """A program that checks before an argument is first written and again at the end: the
    message names exactly one of its CHECK lines, and no argument is modified."""
    def f(x, idx, table, idx2):
        x += table[idx]
        return table[idx2] * x

    cf = fl.compile(f, backend=backend)
    table, ok = np.arange(6.0), np.array([0, 1, 2])
    cf(np.ones(3), ok, table, ok)
    lines = check_lines(cf.lower(np.ones(3), ok, table, ok).program)
    assert lines
    for idx, idx2 in [(np.array([0, 9, 1]), ok), (ok, np.array([0, 9, 1]))]:
        x = np.ones(3)
        with pytest.raises(IndexError) as err:
            cf(x, idx, table, idx2)
        assert np.array_equal(x, np.ones(3)), "an argument was modified"
        named = [ln for ln in lines.values() if str(err.value).endswith(f"(at {ln})")]
        assert len(named) == 1, (str(err.value), lines)
