"""Lower a fusion plan and its compiled kernels into a Program.

Assigns slots (call arguments first, in flattened order, then constants, outputs and
temporaries), records the launch sequence, and frees every temporary right after its last
use, so that the caching pool hands the same memory to the next temporary.
"""
from __future__ import annotations

import numpy as np

from .bytecode import Assembler, KernelInfo, Program, SlotInfo
from .fuse import Plan


def element_range(shape, strides) -> tuple[int, int]:
    """Smallest and largest element offset an array with these element strides addresses."""
    if any(s == 0 for s in shape):
        return 0, -1
    lo = sum(min(0, (n - 1) * st) for n, st in zip(shape, strides))
    hi = sum(max(0, (n - 1) * st) for n, st in zip(shape, strides))
    return lo, hi


def record(plan: Plan, kernel_names: list[str], leaves: list, consts: list,
           mutated_leaves: list[int]) -> Program:
    """leaves: per flattened argument, ("array", dtype, shape, strides) or ("scalar", dtype)."""
    slots: list[SlotInfo] = []
    for i, leaf in enumerate(leaves):
        if leaf[0] == "array":
            lo, hi = element_range(leaf[2], leaf[3])
            slots.append(SlotInfo("input", np.dtype(leaf[1]).str, lo, hi, label=f"in{i}"))
        else:
            slots.append(SlotInfo("param", np.dtype(leaf[1]).str, label=f"in{i}"))
    slot_of: dict[int, int] = {}
    const_slots = []
    outputs = []
    temps = []
    for b in plan.buffers:
        if b.role in ("input", "param"):
            slot_of[b.id] = b.ref
        elif b.role == "const":
            slot_of[b.id] = len(slots)
            slots.append(SlotInfo("const", b.dtype.str, 0, b.size - 1, label=f"const{b.ref}"))
            const_slots.append((slot_of[b.id], consts[b.ref]))
        elif b.role == "status":
            slot_of[b.id] = len(slots)
            slots.append(SlotInfo("status", np.dtype(np.int64).str, label="status"))
        elif b.role == "output":
            slot_of[b.id] = len(slots)
            slots.append(SlotInfo("output", b.dtype.str, 0, b.size - 1, label=f"out{b.ref}"))
            outputs.append((b.ref, slot_of[b.id], b.dtype.str, b.shape))
        else:
            slot_of[b.id] = len(slots)
            nbytes = max(b.size, 1) * b.dtype.itemsize
            slots.append(SlotInfo("temp", b.dtype.str, 0, b.size - 1, nbytes, label=f"tmp{b.id}"))
            temps.append(b.id)
    outputs.sort()

    last_use: dict[int, int] = {}
    first_use: dict[int, int] = {}
    for k_index, k in enumerate(plan.kernels):
        for a in k.args:
            first_use.setdefault(a.buffer, k_index)
            last_use[a.buffer] = k_index

    asm = Assembler()
    infos = []
    status = next((slot_of[b.id] for b in plan.buffers if b.role == "status"), None)
    unchecked = False             # a kernel has raised the error flag since the last CHECK
    for k_index, (k, name) in enumerate(zip(plan.kernels, kernel_names)):
        writes_input = any(a.writes and a.kind == "buffer" and
                           slots[slot_of[a.buffer]].role == "input" for a in k.args)
        if unchecked and writes_input:
            asm.check(status)     # no input is written after a bad index was seen
            unchecked = False
        unchecked |= k.status is not None
        for a in k.args:
            if a.buffer in temps and first_use[a.buffer] == k_index:
                slot = slot_of[a.buffer]
                asm.alloc(slot, slots[slot].nbytes)
        asm.launch(k_index, k.launch_size, [slot_of[a.buffer] for a in k.args])
        for a in k.args:
            if a.buffer in temps and last_use[a.buffer] == k_index:
                asm.free(slot_of[a.buffer])
        infos.append(KernelInfo(
            name=name, label=k.label,
            arg_kinds=tuple(a.kind for a in k.args),
            arg_ranges=tuple(tuple(a.extent) if a.kind == "buffer" and a.extent else (0, -1)
                             for a in k.args),
            arg_writes=tuple(a.writes for a in k.args),
            arg_dtypes=tuple(a.dtype.str for a in k.args),
            work_per_item=k.work_per_item, bytes_moved=k.bytes_moved()))
    if unchecked:
        asm.check(status)
    code, arg_lists = asm.arrays()
    return Program(code=code, arg_lists=arg_lists, slots=slots, kernels=infos,
                   nargwords=asm.nargwords, nleaves=len(leaves), consts=const_slots,
                   outputs=[(slot, dt, tuple(shape)) for _, slot, dt, shape in outputs],
                   mutated_leaves=sorted(mutated_leaves))
