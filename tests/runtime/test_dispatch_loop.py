"""One dispatch loop serves every interpreter (issue 26): _interp.pxi's switch names every
opcode of the table, every interpreter that includes it defines every hook it calls, no
module keeps a loop of its own, and programs that together use every opcode give NumPy's
results on cpu, null and devsim (cuda: as far as it builds without a GPU)."""
from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch._launch import Opcode

PKG = pathlib.Path(fl.__file__).parent
LOOP = (PKG / "_interp.pxi").read_text()
INTERPRETERS = ["_core.pyx", "_devsim.pyx", "_cuda.pyx"]   # host (cpu, null), devsim, cuda


def _hooks() -> list[str]:
    (line,) = re.findall(r"^# HOOKS: (.*)$", LOOP, re.M)
    return line.split()


def test_switch_names_every_opcode():
    handled = set(re.findall(r"\bop == ([A-Z_]+)\b", LOOP))
    assert handled == {op.name for op in Opcode}


def test_every_hook_the_loop_calls_is_listed():
    called = set(re.findall(r"\bhook_([a-z_]+)\(", LOOP))
    assert called == set(_hooks())


@pytest.mark.parametrize("module", INTERPRETERS)
def test_every_interpreter_defines_every_hook(module):
    text = (PKG / module).read_text()
    assert re.search(r'^include "_interp\.pxi"$', text, re.M), module
    assert re.search(r"^ctypedef struct Hooks:", text, re.M), module
    for hook in _hooks():
        assert re.search(rf"^cdef inline int hook_{hook}\(", text, re.M), (module, hook)
    # ...and keeps no interpreter of its own (_cuda's launch_floor only scans for launches)
    assert not re.search(r"\bop == (ALLOC|FREE|CHECK|POLL)\b", text), module


def test_no_other_module_dispatches():
    for path in PKG.glob("*.pyx"):
        assert not re.search(r"\bop == (ALLOC|FREE|CHECK)\b", path.read_text()), path.name


def test_null_backend_runs_the_host_interpreter():
    # null links a HostExecutable (backends/host.host_executable) whose kernels do nothing:
    # the host loop runs its programs, loops and library calls included
    from fastlaunch.backends import host, null
    assert "host_executable" in pathlib.Path(null.__file__).read_text()
    assert "HostExecutable(" in pathlib.Path(host.__file__).read_text()
    x = np.linspace(0, 1, 16)
    it = fl.iterated(fl.compile(_step, backend="null"), 9, carry="x")
    assert {"LOOP", "LAUNCH", "ROW"} <= _ops(it.lower(x, x).program)
    got = it(x, x)
    assert got[0].shape == x.shape and got[1].shape == (9,)
    a = np.eye(8)[None].repeat(2, 0)
    lin = fl.compile(_linalg, backend="null")
    assert {"CHECK", "ALLOC", "FREE"} <= _ops(lin.lower(a, a).program)
    assert lin(a, a).shape == (8, 8)


# ---- programs that use every opcode ------------------------------------------------------

def _ops(program) -> set[str]:
    return {op.name for _, op, _ in program.instructions()}


def _step(x, y):
    return np.sqrt(x * x + 1e-3) * 0.999 + y, (x * x).sum()


def _step_until(x, y):
    return x * 0.5 + y, (x * x).sum()


def _traced_loop(x, y):
    # a loop inside a compiled function: alias slots MOVEd, buffers ROTATEd, a final COPY
    def body(x, y):
        return np.sin(x) * 0.9 + y, (x * x).sum()
    return fl.iterate(body, 7, x, y, carry="x")


def _linalg(a, b):
    # a LIBCALL (gemm, inv) and a CHECK (singular matrices)
    return np.linalg.inv(a @ b).sum(axis=0)


def _numpy_loop(step, n, x, y, until=None):
    losses = []
    for _ in range(n):
        x, loss = step(x, y)
        losses.append(loss)
        if until is not None and until(loss):
            break
    return x, np.array(losses)


@pytest.mark.parametrize("backend", ["cpu", "devsim"])
def test_programs_using_every_opcode_match_numpy(backend):
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    for n in (5, 64):
        x, y = rng.random(n), np.full(n, 1e-3)

        it = fl.iterated(fl.compile(_step, backend=backend), 9, carry="x")
        seen |= _ops(it.lower(x, y).program)
        got, want = it(x, y), _numpy_loop(_step, 9, x, y)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)

        until = fl.iterated(fl.compile(_step_until, backend=backend), 50, carry="x",
                            until=lambda s: s < 1e-3)
        seen |= _ops(until.lower(x, y).program)
        got = until(x, y)
        want = _numpy_loop(_step_until, 50, x, y, until=lambda s: s < 1e-3)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)

        traced = fl.compile(_traced_loop, backend=backend)
        seen |= _ops(traced.lower(x, y).program)
        got = traced(x, y)
        want = _numpy_loop(lambda x, y: (np.sin(x) * 0.9 + y, (x * x).sum()), 7, x, y)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)

    for dtype in (np.float32, np.float64):
        a = rng.random((3, 8, 8)).astype(dtype) + 8 * np.eye(8, dtype=dtype)
        lin = fl.compile(_linalg, backend=backend)
        seen |= _ops(lin.lower(a, a).program)
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(lin(a, a), _linalg(a, a), rtol=tol, atol=tol)
        with pytest.raises(np.linalg.LinAlgError):
            lin(np.zeros_like(a), a)

    # POLL: only long programs have one (lowered, not run: the interrupt tests run it)
    big = np.linspace(0, 1, 200_000)
    long = fl.iterated(fl.compile(_step, backend=backend), 100_000_000, carry="x",
                       collect=False)
    seen |= _ops(long.lower(big, big).program)

    every = {op.name for op in Opcode}
    # host programs have one memory space: no copies between spaces
    expected = every if backend == "devsim" else every - {"TO_DEVICE", "TO_HOST"}
    assert seen == expected


def test_cuda_interpreter_builds():
    cuda = pytest.importorskip("fastlaunch._cuda")
    assert hasattr(cuda, "CUDAExecutable")
