"""The backend boundary: the interface every backend implements (backends/base.py), the
pipeline run through it one stage at a time, and the typed records that cross it.

The stage-by-stage runs call what artifact.from_trace and link.link call, in order, and assert
what each stage hands the next: trace -> fuse -> backend.schedule -> backend.compile -> record
-> verify -> backend.link -> a dispatcher entry that is called.  Every way to make a whole
artifact, on every backend, is in test_artifact.py.
"""
import ast
import inspect
import os

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core, _launch
from fastlaunch.program import bytecode, record
from fastlaunch.ir import fuse
from fastlaunch.__main__ import step
from fastlaunch.backends import available_backends, base, get_backend
from fastlaunch.backends.base import (Backend, CallLayout, CompiledKernel, DeviceBackend,
                                     MemoryModel)
from fastlaunch.backends.null import NullSchedule
from fastlaunch.errors import BackendUnavailableError
from fastlaunch.ir.graph import Op
from fastlaunch.program.artifact import result_specs
from fastlaunch.program.link import executable_layout
from fastlaunch.frontend.pytree import flatten

from _stages import fused, layouts, plan_text, trace

INTERFACE_ATTRIBUTES = [n for n in Backend.__annotations__]
INTERFACE_METHODS = [n for n, v in vars(Backend).items()
                     if inspect.isfunction(v) and not n.startswith("_")]
# optional, each on its own: what a backend whose kernels use device memory may provide
OPTIONAL_METHODS = [n for n, v in vars(DeviceBackend).items()
                    if inspect.isfunction(v) and not n.startswith("_")]
PACKAGE = os.path.dirname(fl.__file__)


def test_interface_members():
    """The interface, no more and no less (a new member must be added to every backend and to
    docs/architecture.md, and then here)."""
    assert sorted(INTERFACE_ATTRIBUTES + INTERFACE_METHODS) == sorted(
        ["name", "target_key", "memory", "schedule", "schedule_kernel", "compile",
         "load_object", "source", "kernel_text", "link", "release"])
    assert sorted(OPTIONAL_METHODS) == ["from_cuda_array", "to_device"]


def _backend_expr(node) -> bool:
    """An expression the pipeline holds a backend in: `backend`, `be`, `<x>.backend`,
    `get_backend(...)`."""
    if isinstance(node, ast.Name):
        return node.id in ("backend", "be")
    if isinstance(node, ast.Attribute):
        return node.attr == "backend"
    return isinstance(node, ast.Call) and getattr(node.func, "id", None) == "get_backend"


def pipeline_uses() -> dict:
    """member -> where the pipeline (every module outside backends/) uses it on a backend:
    `backend.member`, or getattr/hasattr(backend, "member")."""
    uses: dict = {}
    for dirpath, _, files in os.walk(PACKAGE):
        if os.path.relpath(dirpath, PACKAGE).split(os.sep)[0] == "backends":
            continue
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            for node in ast.walk(ast.parse(open(path).read())):
                name = None
                if isinstance(node, ast.Attribute) and _backend_expr(node.value):
                    name = node.attr
                elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in \
                        ("getattr", "hasattr") and len(node.args) >= 2 and \
                        _backend_expr(node.args[0]) and isinstance(node.args[1], ast.Constant):
                    name = node.args[1].value
                if name is not None:
                    uses.setdefault(name, []).append(f"{os.path.relpath(path, PACKAGE)}:"
                                                     f"{node.lineno}")
    return uses


def test_the_interface_declares_every_member_the_pipeline_uses():
    """Before: the pipeline called schedule_kernel, release, to_device and from_cuda_array,
    which base.py did not declare (a saved CUDA program could not load: cuda.py had no
    schedule_kernel)."""
    uses = pipeline_uses()
    declared = set(INTERFACE_ATTRIBUTES + INTERFACE_METHODS + OPTIONAL_METHODS)
    undeclared = {m: where for m, where in uses.items() if m not in declared}
    assert not undeclared, f"backend members used but not declared in base.py: {undeclared}"
    # source(kernel) (a kernel's text without compiling it) is also what a symbolic build
    # compares between its probe traces (program/symbolic.py)
    assert declared - set(uses) == set(), sorted(declared - set(uses))


def test_backends_do_not_call_back_into_link():
    """One link step: program/link.py builds the executable's layout and hands it to backend.link;
    no backend imports program/link.py (or anything above it in the pipeline)."""
    above = {"link", "jit", "artifact", "saved", "iterate", "record", "fuse", "grad"}
    bad = []
    folder = os.path.join(PACKAGE, "backends")
    for f in sorted(os.listdir(folder)):
        if not f.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(open(os.path.join(folder, f)).read())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                names = [node.module] if node.module else [a.name for a in node.names]
                bad += [f"{f}: {n}" for n in names if n and n.split(".")[0] in above]
    assert not bad, bad


def test_interface_is_documented_in_base():
    for member in INTERFACE_ATTRIBUTES + INTERFACE_METHODS + OPTIONAL_METHODS:
        assert member in base.__doc__, member


@pytest.mark.parametrize("name", available_backends())
def test_backend_conforms_to_the_interface(name):
    backend = get_backend(name)
    assert isinstance(backend, Backend)
    assert backend.name == name
    assert isinstance(backend.target_key, str) and backend.target_key
    assert isinstance(backend.memory, MemoryModel)
    assert backend.memory.kernel_space in set(_launch.Space)
    for method in INTERFACE_METHODS:
        impl = getattr(backend, method)
        assert callable(impl), method
        want = list(inspect.signature(getattr(Backend, method)).parameters)[1:]   # less self
        got = list(inspect.signature(impl).parameters)
        assert got[:len(want)] == want, f"{name}.{method}{tuple(got)}: the interface takes {want}"
        extra = inspect.signature(impl).parameters
        assert all(extra[p].default is not inspect.Parameter.empty for p in got[len(want):]), \
            f"{name}.{method}: extra parameters need defaults"
    for method in OPTIONAL_METHODS:
        impl = getattr(backend, method, None)
        if impl is not None:
            want = list(inspect.signature(getattr(DeviceBackend, method)).parameters)[1:]
            assert list(inspect.signature(impl).parameters)[:len(want)] == want, method


def _cuda_extension_built() -> bool:
    try:
        from fastlaunch import _cuda  # noqa: F401
    except ImportError:
        return False
    return True


def _gpu_usable() -> bool:
    try:
        from fastlaunch import _cuda
    except ImportError:
        return False
    return _cuda.driver_error() is None


# ---- the whole pipeline, stage by stage, on every backend ------------------------------------
def small(x, idx):
    return x[idx] * 2.0 + x.sum(), np.sqrt(x)


@pytest.mark.parametrize("name", available_backends())
def test_pipeline_stage_by_stage_on_every_backend(name):
    backend = get_backend(name)
    x = np.linspace(0.5, 4.0, 12)
    idx = np.array([3, 0, 11, -1], np.int64)
    args = (x, idx)
    traced, leaves, result = trace(small, *args)
    plan = fuse.plan(traced.graph, layouts(leaves))
    unscheduled = plan_text(plan)

    scheduled = backend.schedule(plan)
    assert plan_text(plan) == unscheduled, "schedule changed the plan it was given"
    assert all(k.schedule is None for k in plan.kernels)
    for k in scheduled.kernels:
        assert k.launch_size >= 0 and isinstance(k.schedule.params, tuple)
        assert k.schedule.describe() in k.describe()

    kernels = [backend.compile(k) for k in scheduled.kernels]
    for k, ck in zip(scheduled.kernels, kernels):
        assert isinstance(ck, CompiledKernel) and ck.name
        assert isinstance(backend.source(k), str) and backend.source(k)
        # what a saved program stores comes back as a kernel of the same source
        text = backend.kernel_text(ck)
        again = backend.load_object(text, ck.obj, backend.target_key)
        assert backend.kernel_text(again) == text

    program = record.record(scheduled, [k.name for k in kernels], leaves, traced.graph.consts,
                            traced.mutated_leaves, backend.memory)
    bytecode.verify(program, backend.memory.kernel_space)
    assert program.launch_count() == len(scheduled.kernels)
    spaces = {s.space for s in program.slots}
    assert (int(_launch.Space.SPACE_DEVICE) in spaces) == backend.memory.crosses

    _, out_tree = flatten(result)
    call = CallLayout(result_specs(traced.outputs), out_tree, dict(traced.int_bounds))
    if name == "cuda" and not _cuda_extension_built():
        with pytest.raises(BackendUnavailableError, match="without its CUDA extension"):
            backend.link(executable_layout(program, call, kernels), kernels)
        return
    executable = backend.link(executable_layout(program, call, kernels), kernels)
    assert isinstance(executable, _core.Executable)
    assert executable.program is program

    sig, _, keys, statics = _core.encode(args)
    entry = _core.Entry(sig, keys, statics, executable)
    assert entry.executable.program is program
    if name == "cuda" and not _gpu_usable():
        # everything up to the call works without a GPU; the call says why it cannot run
        with pytest.raises(BackendUnavailableError, match="backend 'cuda' cannot run here"):
            _core.run_entry(entry, args)
        return
    got = _core.run_entry(entry, args)
    want = small(*args)
    assert type(got) is tuple and len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if name != "null":                # the null backend's kernels compute nothing
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_null_backend_runs_the_optimisation_step_stage_by_stage():
    backend = get_backend("null")
    rng = np.random.default_rng(0)
    p, m, target = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
    v = rng.random(64).astype(np.float32)
    args = (p, m, v, target, 1e-2)

    # trace: four results, nothing updated in place, lr a runtime parameter
    traced, leaves, result = trace(step, *args)
    assert len(traced.graph.outputs) == 4 and traced.mutated_leaves == []
    assert [leaf.kind for leaf in leaves] == ["array"] * 4 + ["scalar"]
    assert "param 4" in str(traced.graph)

    # fuse: unscheduled kernels (the loss sum with the update's stores in its loop: one
    # pass over the inputs; the mean's division its epilogue, applied to the stored sum)
    plan = fuse.plan(traced.graph, layouts(leaves))
    assert [k.label for k in plan.kernels] == ["sum+map"]
    assert all(k.schedule is None for k in plan.kernels)
    then = plan.kernels[0].reduction.then
    assert then is not None and then.op is Op.DIV and \
        [type(o).__name__ for o in then.operands] == ["Reduced", "Const"]

    # schedule: one launch index per point, on a new plan
    scheduled = backend.schedule(plan)
    assert all(isinstance(k.schedule, NullSchedule) for k in scheduled.kernels)
    assert [k.launch_size for k in scheduled.kernels] == [1]
    assert all(k.schedule is None for k in plan.kernels)

    # compile: every kernel is the do-nothing function; its source is its description
    kernels = [backend.compile(k) for k in scheduled.kernels]
    assert {k.address for k in kernels} == {_core.null_kernel_address()}
    assert [ck.source for ck in kernels] == [k.describe() for k in scheduled.kernels]

    # record: slots for the 5 argument leaves, 4 outputs (no temporary); host memory
    program = record.record(scheduled, [k.name for k in kernels], leaves, traced.graph.consts,
                            traced.mutated_leaves, backend.memory)
    roles = [s.role for s in program.slots]
    assert roles[:5] == ["input"] * 4 + ["param"]
    assert roles.count("output") == 4 and roles.count("temp") == 0
    assert [(dt, shape) for _, dt, shape in program.outputs] == [("<f4", (64,))] * 3 + [("<f4", ())]
    assert all(s.space == _launch.Space.SPACE_HOST for s in program.slots)
    ops = [op.name for _, op, _ in program.instructions()]
    assert ops.count("LAUNCH") == 1 and ops.count("ALLOC") == ops.count("FREE") == 0
    assert "TO_DEVICE" not in ops and "TO_HOST" not in ops

    # verify: passes as recorded, and against the call signature
    bytecode.verify(program, backend.memory.kernel_space)
    bytecode.verify(program, backend.memory.kernel_space, leaves=leaves)

    # link: a _core.Executable (the host one) bound to the verified program
    _, out_tree = flatten(result)
    call = CallLayout(result_specs(traced.outputs), out_tree, dict(traced.int_bounds))
    executable = backend.link(executable_layout(program, call, kernels), kernels)
    assert isinstance(executable, _core.HostExecutable)
    assert isinstance(executable, _core.Executable)

    # the dispatcher entry: results of NumPy's shapes and dtypes (values are not computed)
    sig, _, keys, statics = _core.encode(args)
    entry = _core.Entry(sig, keys, statics, executable)
    out = _core.run_entry(entry, args)
    want = step(*args)
    assert type(out) is tuple and len(out) == 4
    for o, w in zip(out, want):
        assert type(o) is type(w) and np.shape(o) == np.shape(w)
        assert np.asarray(o).dtype == np.asarray(w).dtype
    assert isinstance(out[3], np.float32)          # the loss: a NumPy scalar, as in NumPy

    # the same pipeline as fl.compile runs it
    lowered = fl.compile(step, backend="null").lower(*args)
    assert np.array_equal(lowered.program.code, program.code)
    assert np.array_equal(lowered.program.arg_lists, program.arg_lists)
    assert lowered.program.slots == program.slots


def test_a_host_program_does_not_verify_for_device_kernels():
    """The verifier checks a program against the memory model it will run under."""
    _, leaves, plan = fused(lambda x: x * 2.0, np.ones(8))
    backend = get_backend("null")
    scheduled = backend.schedule(plan)
    program = record.record(scheduled, ["k0"], leaves, [], [], backend.memory)
    bytecode.verify(program, _launch.Space.SPACE_HOST)
    with pytest.raises(bytecode.VerifyError, match="reads slot 0 in host space; the kernels "
                                                   "run in device space"):
        bytecode.verify(program, _launch.Space.SPACE_DEVICE)


# ---- typed records: one definition, two spellings that cannot drift ---------------------------
@pytest.mark.parametrize("c_enum, py_enum, prefix", [
    (_launch.SlotRole, bytecode.SlotRole, "ROLE_"),
    (_launch.ArgKind, bytecode.ArgKind, "ARG_"),
], ids=["SlotRole", "ArgKind"])
def test_launch_enums_and_bytecode_names_agree(c_enum, py_enum, prefix):
    c_names = [m.name for m in c_enum]
    assert all(n.startswith(prefix) for n in c_names)
    short = [n[len(prefix):] for n in c_names]
    assert short == [m.name for m in py_enum], "same members, same order"
    for n in short:
        assert py_enum[n].value == n.lower()


def test_space_names_cover_the_spaces():
    assert set(bytecode.SPACE_NAMES) == set(_launch.Space)


def test_operand_names_match_opcode_widths():
    assert set(bytecode.OPERANDS) == set(_launch.Opcode)
    for op, names in bytecode.OPERANDS.items():
        assert bytecode.width(op) == 1 + len(names), op.name
