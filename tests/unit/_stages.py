"""The front of the pipeline one stage at a time, for tests that look between the stages.

`fl.compile(...).lower()` hands back a *scheduled* plan; these helpers stop earlier: the traced
graph (trace.trace_function on the leaf descriptions jit makes) and the fused, unscheduled
plan (fuse.plan), which is the contract between the front end and every backend.
Arguments are flat (arrays and scalars), as in the tests that use them.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path

from fastlaunch.ir import fuse
from fastlaunch.frontend.arguments import describe_leaf as _describe_leaf
from fastlaunch.frontend.trace import trace_function

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE_ENV = "FASTLAUNCH_UPDATE_GOLDEN"


def trace(fn, *args):
    """(Traced, leaf specs, result tree of tracers) of fn on flat arguments."""
    leaves = [_describe_leaf(f"argument {i}", a) for i, a in enumerate(args)]
    traced, result = trace_function(fn, lambda tracers: (list(tracers), {}), leaves)
    return traced, leaves, result


def layouts(leaves) -> dict:
    """What fuse.plan takes: element strides per array argument."""
    return {pos: leaf.strides for pos, leaf in enumerate(leaves) if leaf.is_array}


def fused(fn, *args):
    """(Traced, leaf specs, the fused and unscheduled fuse.Plan)."""
    traced, leaves, _ = trace(fn, *args)
    return traced, leaves, fuse.plan(traced.graph, layouts(leaves))


def buffer_text(b) -> str:
    ref = f" {b.ref}" if b.ref >= 0 else ""
    shape = f"{b.dtype}{list(b.shape)} strides={list(b.strides)}" if b.role != "param" \
        else str(b.dtype)
    return f"b{b.id}: {b.role}{ref} {shape}"


def binding_text(k) -> str:
    """Which plan buffer each kernel argument is, and the element range it may touch (what
    the verifier checks the slots against)."""
    parts = []
    for i, a in enumerate(k.args):
        extent = f"[{a.extent[0]}, {a.extent[1]}]" if a.kind == "buffer" and a.extent else ""
        parts.append(f"arg{i}=b{a.buffer}{extent}")
    return "  binds " + " ".join(parts)


def plan_text(plan) -> str:
    """The plan's buffers, then each kernel's `describe()` and argument bindings."""
    lines = ["buffers:"] + ["  " + buffer_text(b) for b in plan.buffers]
    for i, k in enumerate(plan.kernels):
        lines += ["", f"# kernel {i}", k.describe(), binding_text(k)]
    return "\n".join(lines) + "\n"


def schedule_text(plan) -> str:
    """Per scheduled kernel: its head line and its schedule, nothing of the loop body (so a
    fusion change that keeps the loop nests does not show up here)."""
    lines = []
    for i, k in enumerate(plan.kernels):
        head = k.describe().splitlines()[0]
        sched = k.schedule.describe() if k.schedule is not None else "-"
        lines.append(f"{i}: {head}  ->  {sched}")
    return "\n".join(lines) + "\n"


def check_golden(relpath: str, text: str):
    """Compare `text` with tests/unit/golden/<relpath>; on a mismatch fail with a unified diff
    (golden first).  FASTLAUNCH_UPDATE_GOLDEN=1 rewrites the file instead: review the diff
    in git before committing it."""
    path = GOLDEN_DIR / relpath
    if os.environ.get(UPDATE_ENV):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        raise AssertionError(f"no golden file {path}; run with {UPDATE_ENV}=1 to create it, "
                             f"then review it")
    want = path.read_text()
    if want != text:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True),
                                            f"golden/{relpath}", "produced now"))
        raise AssertionError(f"{relpath} differs from its golden text "
                             f"({UPDATE_ENV}=1 rewrites it if the change is intended):\n{diff}")
