"""The artifact boundary (program/artifact.py): every way to make an artifact, on every backend, and
the rule that the front ends read artifacts, not `Compiled`'s private members.

Ways: a trace (fl.compile), a loop (fl.iterate), saved bytes (fl.save / fl.load and
saved.loads_artifact), a function pickled with its programs (with_programs), a gradient
(fl.grad).  Backends: cpu, null, devsim, and cuda as far as lowering and loading go without a
GPU (linking works without a driver; a call says why it cannot run).
"""
import ast
import dataclasses
import os
import pickle

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core, jit
from fastlaunch.program import bytecode, saved
from fastlaunch.program.artifact import Artifact, Lowered
from fastlaunch.backends import available_backends, get_backend
from fastlaunch.errors import BackendUnavailableError
from fastlaunch.program.link import link

PACKAGE = os.path.dirname(fl.__file__)
BACKENDS = available_backends()


def step(p, target, lr):
    r = np.sin(p) - target
    return p - lr * 2 * r * np.cos(p), np.mean(r * r)


def loss(p, target):
    return np.mean((np.sin(p) + p * p - target) ** 2)


def args():
    return np.linspace(0.0, 1.0, 16), np.full(16, 0.5), 0.1


def _gpu_usable() -> bool:
    try:
        from fastlaunch import _cuda
    except ImportError:
        return False
    return _cuda.driver_error() is None


@pytest.fixture(params=BACKENDS)
def name(request):
    if request.param == "cuda":
        try:
            from fastlaunch import _cuda  # noqa: F401
        except ImportError:
            pytest.skip("the CUDA extension is not built")
    return request.param


def check_artifact(art, name, origin):
    """What every artifact holds, whatever made it: one kernel per program kernel, a plan
    whose kernels are those, a program that verifies, a view for lower(), and a link to an
    executable over that very program."""
    backend = get_backend(name)
    assert isinstance(art, Artifact) and art.origin == origin
    with pytest.raises(dataclasses.FrozenInstanceError):
        art.program = None
    assert len(art.kernels) == len(art.program.kernels) == len(art.plan.compiled_kernels())
    assert len(art.leaves) == len(art.leaf_names) == art.program.nleaves
    assert art.out_tree.num_leaves == len(art.results)
    bytecode.verify(art.program, backend.memory.kernel_space, leaves=list(art.leaves))
    lowered = art.lowered
    assert isinstance(lowered, Lowered) and lowered.artifact is art
    assert lowered.program is art.program and lowered.plan is art.plan
    assert "== bytecode ==" in lowered.text(source=False)
    assert [label for label, _, _ in lowered.kernels] == \
        [k.label for k in art.plan.compiled_kernels()]
    entry = link(art, backend)
    assert entry.info is art and entry.executable.program is art.program
    return entry


def check_call(call, want, name):
    """Run `call()` and compare with NumPy's `want` (null: shapes and dtypes only; cuda
    without a GPU: the call says why it cannot run)."""
    if name == "cuda" and not _gpu_usable():
        with pytest.raises(BackendUnavailableError, match="cannot run here"):
            call()
        return
    got = call()
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == np.asarray(w).dtype
        if name != "null":
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)


def python_loop(n, p, target, lr):
    losses = []
    for _ in range(n):
        p, value = step(p, target, lr)
        losses.append(value)
    return p, np.stack(losses)


# ---- every way to make one, on every backend ---------------------------------------------
def test_from_a_trace(name):
    f = fl.compile(step, backend=name)
    art = f.artifact_for(*args())
    entry = check_artifact(art, name, "trace")
    assert art.fused is not None and all(k.schedule is None for k in art.fused.kernels)
    assert f.stats["traces"] == 0                    # artifact_for traces without installing
    check_call(lambda: f(*args()), step(*args()), name)
    check_call(lambda: _core.run_entry(entry, args()), step(*args()), name)
    assert f.stats["traces"] == 1
    installed = f.artifact_for(*args())              # the cached entry's record
    assert f.artifact_for(*args()) is installed and f.lower(*args()).artifact is installed
    assert np.array_equal(installed.program.code, art.program.code)


def test_from_a_loop(name):
    f = fl.compile(step, backend=name)
    loop = fl.iterated(f, 5, carry="p")
    art = loop.lower(*args()).artifact
    check_artifact(art, name, "loop")
    assert art.finish is not None and art.finish["n"] == 5
    assert len(art.program.loops()) == 1
    step_art = f.artifact_for(*args())
    assert [k.source for k in art.kernels] == [k.source for k in step_art.kernels]
    assert art.leaves == step_art.leaves
    check_call(lambda: loop(*args()), python_loop(5, *args()), name)


def test_from_saved_bytes(name, tmp_path):
    backend = get_backend(name)
    f = fl.compile(step, backend=name)
    art = f.artifact_for(*args())
    data = saved.dumps_artifact(art, backend, f.static_positions)
    for machine_code in (True, False):
        _, again = saved.loads_artifact(data, name, machine_code=machine_code)
        check_artifact(again, name, "saved")
        # the plan is rebuilt from the kernel descriptions the bytes hold, and records the
        # same program
        assert [k.describe() for k in again.plan.compiled_kernels()] == \
            [k.describe() for k in art.plan.compiled_kernels()]
        assert np.array_equal(again.program.code, art.program.code)
        assert again.graph == art.graph and again.results == art.results
    path = tmp_path / "step.flp"
    f.save(path, *args())
    loaded = fl.load(path)
    check_artifact(loaded._entries_list()[0].info, name, "saved")
    check_call(lambda: loaded(*args()), step(*args()), name)


def test_from_a_saved_loop(name, tmp_path):
    loop = fl.iterated(fl.compile(step, backend=name), 4, carry="p")
    path = tmp_path / "loop.flp"
    loop.save(path, *args())
    loaded = fl.load(path)
    art = loaded._entries_list()[0].info
    check_artifact(art, name, "saved")
    assert dict(art.finish) == dict(loop.lower(*args()).artifact.finish)
    check_call(lambda: loaded(*args()), python_loop(4, *args()), name)


def test_from_a_function_pickled_with_its_programs(name):
    f = fl.compile(step, backend=name).with_programs(*args())
    g = pickle.loads(pickle.dumps(f))
    assert g.stats["programs_loaded"] == 1
    art = g.artifact_for(*args())                    # the shipped entry's: nothing traced
    check_artifact(art, name, "saved")
    assert g.stats["traces"] == 0
    check_call(lambda: g(*args()), step(*args()), name)
    # a shipped entry is complete: it can be looped, saved and pickled again
    loop = fl.iterated(g, 3, carry="p")
    check_artifact(loop.lower(*args()).artifact, name, "loop")
    h = pickle.loads(pickle.dumps(g))
    assert h.stats["programs_loaded"] == 1
    assert g.stats["traces"] == 0


def test_from_a_gradient(name, monkeypatch):
    monkeypatch.setenv("FASTLAUNCH_BACKEND", name)
    g = fl.grad(loss)
    assert g.backend.name == name
    p, target = np.linspace(0.0, 1.0, 16), np.full(16, 0.5)
    art = g.artifact_for(p, target)
    check_artifact(art, name, "trace")
    want = 2 * (np.sin(p) + p * p - target) * (np.cos(p) + 2 * p) / p.size
    check_call(lambda: g(p, target), want, name)


# ---- the front ends read artifacts, never Compiled's private members ------------------------
def _private_members() -> set:
    """Names of Compiled's private members: its own and its base Dispatcher's (`_x`, not
    dunders)."""
    names = set()
    for cls in jit.Compiled.__mro__:
        names |= {n for n in vars(cls) if n.startswith("_") and not n.startswith("__")}
    tree = ast.parse(open(jit.__file__).read())
    for node in ast.walk(tree):                      # attributes set in Compiled's methods
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id == "self" and node.attr.startswith("_") and \
                not node.attr.startswith("__"):
            names.add(node.attr)
    return names


@pytest.mark.parametrize("module", ["iterate.py", "program/saved.py", "grad.py", "program/artifact.py",
                                    "program/link.py"])
def test_front_ends_touch_no_private_member_of_compiled(module):
    """Before: iterate.py read step._static, _entry_for, _normalize, _reversed_leaf,
    _param_names, _arg_name and entry.info's _EntryInfo; pickling installed entries through
    the introspection record.  Now they read artifacts and Compiled's public members.  An
    object's own private members (`self._x`) are its own business; `x._y` on anything else
    that names a private member of Compiled is not."""
    private = _private_members()
    bad = []
    for node in ast.walk(ast.parse(open(os.path.join(PACKAGE, module)).read())):
        if isinstance(node, ast.Attribute) and node.attr in private and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            bad.append(f"{module}:{node.lineno}: .{node.attr}")
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in \
                ("getattr", "setattr", "hasattr") and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value in private:
            bad.append(f"{module}:{node.lineno}: {node.func.id} {node.args[1].value}")
    assert not bad, bad


def test_the_rule_sees_a_private_access():
    """Positive control for the scan above."""
    assert {"_static", "_entry_for", "_normalize", "_install"} <= _private_members()
