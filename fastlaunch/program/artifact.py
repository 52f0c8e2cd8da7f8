"""One compiled signature as one immutable record (`Artifact`), and every way to make one.

An artifact holds what the pipeline produced for one signature: the argument leaves and their
names, the graph, the fused and the scheduled plans, the verified program, its compiled
kernels and the typed results (result specs, result tree, Python-int bounds).  It is made

* `from_trace`: a traced graph through fuse -> backend.schedule -> backend.compile ->
  record -> verify (what `fl.compile` does on a miss; also for gradients, whose trace is a
  graph like any other);
* `from_loop`: a loop over a step's artifact (and an `until=` predicate's), recorded by
  record.record_loop (what `fl.iterate` builds);
* `from_saved`: a saved program's (or shipped program's) decoded tables: its kernels
  scheduled again from the descriptions the file holds, compiled or loaded, the program
  verified against them, and the scheduled plan rebuilt from the program and those
  descriptions (`scheduled_plan`);

and made callable by `link.link(artifact, backend)`.  Nothing here knows of `Compiled`:
jit.py, iterate.py, program/saved.py and pickling read artifacts, never each other's internals.
`Lowered` (what `Compiled.lower` returns) is a view of one.
"""
from __future__ import annotations

import dataclasses
import math
import re
import types
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

import numpy as np

from . import bytecode, record
from ..ir import fuse
from .._launch import Opcode, ResultKind, Routine, Space
from ..backends.base import CallLayout
from .bytecode import LIBCALL_ARRAYS, ROUTINES, Program, SlotRole, check_exception
from ..errors import SavedProgramError
from ..ir.fuse import Buffer, Plan
from ..ir.kernel import KernelArg, LibraryCall, set_extents
from ..ir.leaves import contiguous_strides
from ..frontend.pytree import TreeDef, flatten
from ..frontend.trace import Attr


@dataclass(frozen=True, eq=False, repr=False)
class Artifact:
    """A complete, immutable record of one compiled signature (see the module docstring).
    `program` and the plans are not changed once an artifact holds them."""
    signature: bytes            # the dispatcher's signature words (_core.encode)
    keys: tuple                 # dict keys / namedtuple classes / strs in the argument tree
    statics: tuple              # static arguments' keys (_core.static_key)
    static_values: tuple        # ... and their values
    leaves: tuple               # LeafSpec per argument leaf
    leaf_names: tuple           # the argument each leaf belongs to
    graph: str                  # the traced graph as text (a loop: its parts' graphs)
    fused: Plan | None          # the fused, unscheduled plan (None where not traced here)
    plan: Plan                  # the scheduled plan the program was recorded from
    program: Program            # verified
    kernels: tuple              # CompiledKernel per program kernel, in order
    results: tuple              # (ResultKind, index or value, as_scalar) per result leaf
    out_tree: TreeDef           # the result's pytree structure
    int_bounds: Mapping = field(default_factory=dict)   # leaf -> (lo, hi) of a weak Python int
    specialized: tuple = ()     # (leaf, word): scalar leaves whose value keys the program
    specialized_values: Mapping = field(default_factory=dict)   # leaf -> the value the trace was keyed by
    effects: tuple = ()         # paths of argument containers the function changes
    rng_seed: int | None = None  # the random numbers' seed (None: fresh at link)
    finish: Mapping | None = None   # fl.iterate's finishing description (a loop), else None
    origin: str = "trace"       # trace | loop | saved | symbolic
    symbolic: object = None     # an instance's symbolic.Template (symbolic sizes), else None

    @cached_property
    def lowered(self) -> Lowered:
        return Lowered(self)

    def __repr__(self):
        return (f"<fastlaunch.Artifact ({self.origin}): {len(self.leaves)} leaves, "
                f"{len(self.kernels)} kernels, {len(self.results)} results>")

    def call_layout(self) -> CallLayout:
        """What link checks besides the program: results, result tree, int bounds, seed."""
        return CallLayout(list(self.results), self.out_tree, dict(self.int_bounds),
                          rng_seed=self.rng_seed)


class Lowered:
    """What one signature lowers to: the graph, the kernels and the bytecode (a view of its
    `Artifact`)."""

    def __init__(self, artifact: Artifact) -> None:
        self.artifact = artifact

    @property
    def graph(self) -> str:
        return self.artifact.graph

    @property
    def plan(self) -> Plan:
        """The backend's scheduled plan."""
        return self.artifact.plan

    @property
    def program(self) -> Program:
        return self.artifact.program

    @property
    def fused(self) -> Plan | None:
        """The fused, unscheduled plan (what every backend consumes)."""
        return self.artifact.fused

    @cached_property
    def kernels(self) -> list:
        """(label, loop description, source) per kernel."""
        return [(k.label, k.describe(), ck.source)
                for k, ck in zip(self.plan.compiled_kernels(), self.artifact.kernels)]

    @cached_property
    def bytecode(self) -> str:
        return self.program.disassemble()

    def text(self, source: bool = True) -> str:
        """The graph, each kernel's plan (and, with source, its source) and the bytecode."""
        parts = ["== graph ==", self.graph]
        for i, (label, desc, src) in enumerate(self.kernels):
            parts += [f"== kernel {i}: {label} ==", desc]
            if source:
                parts += ["-- source --", src]
        parts += ["== bytecode ==", self.bytecode]
        return "\n".join(parts)

    def __str__(self):
        return self.text(source=True)

    def __repr__(self):
        return f"<fastlaunch.Lowered: {len(self.artifact.kernels)} kernels>"


def result_specs(outputs) -> list:
    """(ResultKind, index or value, as_scalar) per result leaf of a trace, as link takes them."""
    kinds = {"new": ResultKind.RESULT_NEW, "input": ResultKind.RESULT_INPUT,
             "value": ResultKind.RESULT_VALUE}
    return [(kinds[o[0]], o[1], bool(o[2]) if o[0] == "new" else False) for o in outputs]


# ---- from a trace ------------------------------------------------------------------------
def from_trace(traced, result, leaves, leaf_names, backend, *, signature: bytes, keys,
               statics, static_values=(), specialized=(), specialized_values=None,
               rng_seed=None) -> Artifact:
    """A trace (trace.Traced and the traced function's result) through the pipeline: fuse,
    the backend's schedule and compile, record, verify."""
    layouts = {pos: leaf.strides for pos, leaf in enumerate(leaves) if leaf.is_array}
    fused = fuse.plan(traced.graph, layouts)
    plan = backend.schedule(fused)
    kernels = [backend.compile(k) for k in plan.compiled_kernels()]
    # a call with device arrays keeps its results on the device
    device_results = backend.memory.crosses and any(
        leaf.is_array and leaf.space == Space.SPACE_DEVICE for leaf in leaves)
    program = record.record(plan, [k.name for k in kernels], leaves, traced.graph.consts,
                            traced.mutated_leaves, backend.memory, device_results)
    bytecode.verify(program, backend.memory.kernel_space)
    _, out_tree = flatten(result)
    return Artifact(
        signature=signature, keys=tuple(keys), statics=tuple(statics),
        static_values=tuple(static_values), leaves=tuple(leaves),
        leaf_names=tuple(leaf_names), graph=str(traced.graph), fused=fused, plan=plan,
        program=program, kernels=tuple(kernels), results=tuple(result_specs(traced.outputs)),
        out_tree=out_tree, int_bounds=types.MappingProxyType(dict(traced.int_bounds)),
        specialized=tuple(specialized),
        specialized_values=types.MappingProxyType(dict(specialized_values or {})),
        effects=tuple(tuple(p) for p in traced.effects), rng_seed=rng_seed)


def probe(traced, result, leaves, backend) -> tuple:
    """A symbolic build's probe trace at other sizes (program/symbolic.py) through fuse, the backend's
    schedule and record, nothing compiled or verified: (program, the kernels' source, result
    specs, result tree, int bounds), what the build compares with its base artifact."""
    layouts = {pos: leaf.strides for pos, leaf in enumerate(leaves) if leaf.is_array}
    plan = backend.schedule(fuse.plan(traced.graph, layouts))
    sources = [backend.source(k) for k in plan.compiled_kernels()]
    program = record.record(plan, [f"k{i}" for i in range(len(sources))], leaves,
                            traced.graph.consts, traced.mutated_leaves, backend.memory, False)
    return (program, sources, result_specs(traced.outputs), flatten(result)[1],
            dict(traced.int_bounds))


def from_instance(base: Artifact, program: Program, results, int_bounds, template, *,
                  signature: bytes, keys, statics) -> Artifact:
    """A symbolic template's instance at a call's sizes: the base artifact's kernels (their
    code reads no symbolic extent) with the program evaluated at those sizes.  The caller
    verifies the program (symbolic.instantiate); the plans stay the base's, which fl.iterate,
    save and lower never use: they trace an instance's sizes afresh."""
    return dataclasses.replace(
        base, signature=signature, keys=tuple(keys), statics=tuple(statics),
        program=program, results=tuple(results),
        int_bounds=types.MappingProxyType(dict(int_bounds)), symbolic=template,
        origin="symbolic")


# ---- from a loop -------------------------------------------------------------------------
def from_loop(step: Artifact, loop: record.Loop, backend, results, until: Artifact | None = None,
              label: str = "") -> Artifact:
    """The loop program over `step` (and the `until` predicate) that fl.iterate built the
    `loop` description of, recorded (record.record_loop) and verified.  results(where) ->
    (result specs, result tree, finishing description): the loop's results, from where the
    recording put the carried values, the collected rows and the flags."""
    program, where = record.record_loop(loop, list(step.leaves),
                                        step.program.mutated_leaves, backend.memory)
    bytecode.verify(program, backend.memory.kernel_space)
    raw, out_tree, finish = results(where)
    parts = [step] if until is None else [step, until]
    graphs = [f"# step {label}\n{step.graph}"]
    if until is not None:
        graphs.append(f"# until\n{until.graph}")
    return Artifact(
        signature=step.signature, keys=step.keys, statics=step.statics,
        static_values=step.static_values, leaves=step.leaves, leaf_names=step.leaf_names,
        graph="\n\n".join(graphs), fused=None,
        plan=Plan(kernels=[k for p in parts for k in p.plan.kernels]), program=program,
        kernels=tuple(k for p in parts for k in p.kernels), results=tuple(raw),
        out_tree=out_tree, int_bounds=step.int_bounds, specialized=step.specialized,
        specialized_values=step.specialized_values, finish=types.MappingProxyType(finish),
        origin="loop")


def effects_text(paths) -> str:
    """The argument containers a trace changes, as an error message names them."""
    out = []
    for path in paths:
        head = f"argument {path[1]}" if path[0] == 0 else f"keyword argument {path[1]!r}"
        out.append(head + "".join(repr(k) if isinstance(k, Attr) else f"[{k!r}]"
                                  for k in path[2:]))
    return ", ".join(out)


def consts_by_ref(art: Artifact) -> dict:
    """The trace's constant arrays by their buffer ref: record() gave the plan's constant
    buffers their slots in order, so the i-th of them is program.consts[i]."""
    refs = [b.ref for b in art.plan.buffers if b.role == "const"]
    return {ref: arr for ref, (_, arr) in zip(refs, art.program.consts)}


# ---- from saved or shipped bytes ---------------------------------------------------------
def from_saved(where: str, program: Program, described: list, backend, *, target: str,
               texts: list, objects: list, machine_code: bool, signature: bytes, leaves,
               leaf_names, keys, statics, static_values, results, out_tree, int_bounds,
               specialized, graph: str, finish=None) -> Artifact:
    """A saved program's decoded tables (program/saved.py reads and checks the file): described,
    per program kernel (its unscheduled description, what the file stored of its schedule);
    texts and objects, per kernel, its source and machine code, used as is when
    `machine_code` and `target` is this backend's, else the kernels are generated again.
    The kernels' tables come from their descriptions, scheduled by this backend, never from
    the file's own claims (a tampered file could claim small ranges for a big kernel), and
    the program is verified against them and the signature's leaves."""
    scheduled = []
    for i, (desc, saved) in enumerate(described):
        k = backend.schedule_kernel(desc, saved)
        set_extents(k)
        program.kernels[i] = record.kernel_info(k, program.kernels[i].name)
        scheduled.append(k)
    bytecode.verify(program, backend.memory.kernel_space, leaves=leaves, strict=True)
    if machine_code and target == backend.target_key:
        compiled = [backend.load_object(text, obj, target) for text, obj in zip(texts, objects)]
    else:
        compiled = []
        for i, k in enumerate(scheduled):
            try:
                compiled.append(backend.compile(k))
            except MemoryError:
                raise
            except Exception as err:      # code generation or LLVM refused the kernel
                raise SavedProgramError(f"{where}: kernel {i} ({k.label}) does not compile: "
                                        f"{type(err).__name__}: {str(err)[:300]}") from None
    for info, ck in zip(program.kernels, compiled):
        info.name = ck.name
    # a loop program's plan is its kernels (fl.iterate's loops are not rebuilt as a plan)
    plan = Plan(kernels=scheduled) if program.loops() else \
        scheduled_plan(program, scheduled, list(leaves), backend.memory)
    return Artifact(
        signature=signature, keys=tuple(keys), statics=tuple(statics),
        static_values=tuple(static_values), leaves=tuple(leaves),
        leaf_names=tuple(leaf_names), graph=graph, fused=None, plan=plan, program=program,
        kernels=tuple(compiled), results=tuple(results), out_tree=out_tree,
        int_bounds=types.MappingProxyType(dict(int_bounds)), specialized=tuple(specialized),
        finish=None if finish is None else types.MappingProxyType(finish), origin="saved")


_SHADOW = re.compile(r"(in|out)(\d+)@dev")


def scheduled_plan(program: Program, described: list, leaves: list, memory) -> Plan:
    """The scheduled plan `program` was recorded from (record.record), rebuilt from its code
    and its kernels' scheduled descriptions (one per program kernel, in order): buffers from
    the slots (a device shadow, named `in{leaf}@dev` / `out{ref}@dev` by record, belongs to
    its argument's or output's buffer), each kernel's arguments bound to the buffers of the
    slots its LAUNCH binds, library calls from their LIBCALLs.  Checked: recording the plan
    again gives the program back (slot labels aside), else SavedProgramError."""
    slots, nleaves = program.slots, program.nleaves
    buffers: list = []
    of_slot: dict = {}                 # slot -> buffer id

    def add(slot, role, dtype, shape, ref=-1, strides=None) -> int:
        buf = Buffer(len(buffers), role, np.dtype(dtype),
                     0 if role in ("param", "status", "rng") else math.prod(shape), ref,
                     contiguous_strides(shape) if strides is None else tuple(strides),
                     tuple(shape))
        buffers.append(buf)
        if slot is not None:
            of_slot[slot] = buf.id
        return buf.id

    def leaf_buffer(j: int) -> int:
        if j not in of_slot:
            leaf = leaves[j]
            if leaf.is_array:
                add(j, "input", leaf.dtype, leaf.shape, j, leaf.strides)
            else:
                add(j, "param", leaf.dtype, (), j)
        return of_slot[j]

    consts = {slot: i for i, (slot, _) in enumerate(program.consts)}
    outputs = {slot: i for i, (slot, _, _) in enumerate(program.outputs)}
    output_of: dict = {}               # output ref -> its buffer
    for s in range(nleaves, len(slots)):
        slot = slots[s]
        shadow = _SHADOW.fullmatch(slot.label) if slot.role == SlotRole.TEMP else None
        if shadow and shadow.group(1) == "in" and int(shadow.group(2)) < nleaves:
            j = int(shadow.group(2))
            add(s, "input", leaves[j].dtype, leaves[j].shape, j, leaves[j].strides)
        elif shadow and shadow.group(1) == "out" and int(shadow.group(2)) in output_of:
            of_slot[s] = output_of[int(shadow.group(2))]
        elif slot.role == SlotRole.TEMP:
            add(s, "temp", slot.dtype, (slot.hi + 1,))
        elif slot.role == SlotRole.CONST and s in consts:
            add(s, "const", slot.dtype, (slot.hi + 1,), consts[s])
        elif slot.role == SlotRole.OUTPUT and s in outputs:
            ref = int(slot.label[3:]) if re.fullmatch(r"out\d+", slot.label) else outputs[s]
            output_of[ref] = add(s, "output", slot.dtype, program.outputs[outputs[s]][2], ref)
        elif slot.role == SlotRole.STATUS:
            add(s, "status", slot.dtype, ())
        elif slot.role == SlotRole.RNG:
            add(s, "rng", slot.dtype, ())
        else:
            raise SavedProgramError(f"slot {s} ({slot.role}): not a slot of a plain program")

    def buffer_of(s: int) -> int:
        if 0 <= s < nleaves:
            return leaf_buffer(s)
        if s not in of_slot:
            raise SavedProgramError(f"slot {s}: no buffer of the plan is recorded there")
        return of_slot[s]

    steps: list[Any] = []
    words: dict = {}
    for _, op, ops in program.instructions():
        if op is Opcode.BIND:
            args_at, list_at, count = ops
            for i in range(count):
                words[args_at + i] = int(program.arg_lists[list_at + i])
        elif op is Opcode.LAUNCH:
            k = described[ops[0]]
            bound = [buffer_of(words[ops[2] + p]) for p in range(len(k.args))]
            steps.append(dataclasses.replace(k, args=[dataclasses.replace(a, buffer=b)
                                                      for a, b in zip(k.args, bound)]))
        elif op is Opcode.LIBCALL:
            info = ROUTINES[Routine(ops[0])]
            args, layouts = [], []
            for a in range(LIBCALL_ARRAYS):
                slot, *layout = ops[6 + 6 * a:12 + 6 * a]
                if slot < 0:
                    break
                args.append(KernelArg("buffer", np.dtype(slots[slot].dtype), buffer_of(slot),
                                      0, bool(info.arrays[a] and info.arrays[a][1])))
                layouts.append(tuple(layout))
            steps.append(LibraryCall(info.name, np.dtype(info.dtype), tuple(ops[1:6]), args,
                                     layouts, info.name))
    plan = Plan(buffers, steps, [output_of[r] for r in sorted(output_of)],
                [(bit, check_exception(name), message) for bit, name, message in program.checks])
    again = record.record(plan, [k.name for k in program.kernels], leaves,
                          [arr for _, arr in program.consts], program.mutated_leaves, memory)

    def same(p: Program) -> tuple:
        return (p.code.tolist(), p.arg_lists.tolist(), p.nargwords, p.kernels, p.outputs,
                p.mutated_leaves, p.checks, [s for s, _ in p.consts],
                [dataclasses.replace(s, label="") for s in p.slots])
    if same(again) != same(program):
        raise SavedProgramError("the program is not one its kernels' plan records")
    return plan
