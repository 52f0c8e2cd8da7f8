"""Lower a scheduled fusion plan and its compiled kernels into a Program.

Assigns slots (call arguments first, in flattened order, then constants, outputs,
temporaries and the status word), records the launch sequence, and frees every temporary
right after its last use, so that the caching pool hands the same memory to the next one.

The backend's memory model decides where each slot lives.  Kernels touch only the kernels'
space: an argument in the other space gets a shadow there (ALLOC + TO_DEVICE before its first
use, and TO_HOST back at the end if it is updated in place); a host result is written by the
kernels into a shadow and copied out with TO_HOST.  Device arrays (arguments already in the
kernels' space) are used in place, and with `device_results` the results are device slots
the kernels write directly.  Kernel errors are CHECKed before the
first write of any argument, so a bad index or an overflow leaves the caller's arrays as they
were; long programs POLL for Ctrl-C between launches, up to that first write.
"""
from __future__ import annotations

import numpy as np

from ._launch import Space
from .backends.base import HOST_MEMORY, MemoryModel
from .bytecode import ArgKind, Assembler, KernelInfo, Program, SlotInfo, SlotRole, routine_of
from .fuse import Plan
from .kernel import is_kernel
from .leaves import LeafSpec, element_range

# A program estimated to do more work than this (operations) polls for signals between its
# launches: a Ctrl-C then stops it within a launch instead of when it returns.
POLL_WORK = 50_000_000

__all__ = ["record", "kernel_info", "element_range", "POLL_WORK"]


def kernel_info(k, name: str) -> KernelInfo:
    """What the verifier and the executable know of a scheduled kernel (with its extents
    set): argument kinds, dtypes, element ranges and writes, launch size and params.  A
    loaded program derives these from its kernel descriptions the same way."""
    return KernelInfo(
        name=name, label=k.label,
        arg_kinds=tuple(ArgKind(a.kind).value for a in k.args),
        arg_ranges=tuple(tuple(a.extent) if a.kind == "buffer" and a.extent else (0, -1)
                         for a in k.args),
        arg_writes=tuple(a.writes for a in k.args),
        arg_dtypes=tuple(a.dtype.str for a in k.args),
        params=tuple(k.schedule.params), bytes_moved=k.bytes_moved(),
        launch_size=k.launch_size)


def record(plan: Plan, kernel_names: list[str], leaves: list[LeafSpec], consts: list,
           mutated_leaves: list[int], memory: MemoryModel = HOST_MEMORY,
           device_results: bool = False) -> Program:
    """plan: scheduled (every kernel has its backend's `schedule`).  device_results: the
    results stay in the kernels' space (a call with device arrays among its arguments): the
    kernels write them directly, nothing is copied out."""
    kspace = int(memory.kernel_space)
    if device_results and kspace == Space.SPACE_HOST:
        raise ValueError("device results need a backend whose kernels use device memory")
    slots: list[SlotInfo] = []
    for i, leaf in enumerate(leaves):
        if leaf.is_array:
            lo, hi = element_range(leaf.shape, leaf.strides)
            slots.append(SlotInfo(SlotRole.INPUT, leaf.dtype.str, lo, hi, label=f"in{i}",
                                  space=leaf.space))
        else:
            slots.append(SlotInfo(SlotRole.PARAM, leaf.dtype.str, label=f"in{i}"))
    slot_of: dict[int, int] = {}          # buffer id -> the slot kernels use
    shadow_in: dict[int, int] = {}        # kernel-space shadow slot -> argument slot
    shadow_out: dict[int, int] = {}       # kernel-space shadow slot -> host output slot
    const_slots, outputs, temps = [], [], set()

    def shadow(of: int, label: str) -> int:
        s = slots[of]
        if s.lo != 0:
            raise ValueError(f"{label}: an argument with negative strides cannot be copied to "
                             f"the device; pass np.ascontiguousarray(x)")
        slots.append(SlotInfo(SlotRole.TEMP, s.dtype, 0, s.hi, max(s.hi + 1, 1) * s.itemsize,
                              label=label, space=kspace))
        temps.add(len(slots) - 1)
        return len(slots) - 1

    for b in plan.buffers:
        if b.role in ("input", "param"):
            slot_of[b.id] = b.ref
            if b.role == "input" and slots[b.ref].space != kspace:
                sh = shadow(b.ref, f"in{b.ref}@dev")
                shadow_in[sh] = b.ref
                slot_of[b.id] = sh
        elif b.role == "const":
            slot_of[b.id] = len(slots)
            slots.append(SlotInfo(SlotRole.CONST, b.dtype.str, 0, b.size - 1,
                                  label=f"const{b.ref}", space=kspace))
            const_slots.append((slot_of[b.id], consts[b.ref]))
        elif b.role == "rng":
            # the call's random key: a scalar word the executable sets on every call
            slot_of[b.id] = len(slots)
            slots.append(SlotInfo(SlotRole.RNG, np.dtype(np.uint64).str, label="rng"))
        elif b.role == "status":
            slot_of[b.id] = len(slots)
            slots.append(SlotInfo(SlotRole.STATUS, np.dtype(np.int64).str, label="status",
                                  space=kspace))
        elif b.role == "output":
            out = len(slots)
            slots.append(SlotInfo(SlotRole.OUTPUT, b.dtype.str, 0, b.size - 1,
                                  label=f"out{b.ref}",
                                  space=kspace if device_results else int(Space.SPACE_HOST)))
            outputs.append((b.ref, out, b.dtype.str, b.shape))
            slot_of[b.id] = out
            if kspace != Space.SPACE_HOST and not device_results:
                sh = shadow(out, f"out{b.ref}@dev")
                shadow_out[sh] = out
                slot_of[b.id] = sh
        else:
            slot_of[b.id] = len(slots)
            nbytes = max(b.size, 1) * b.dtype.itemsize
            slots.append(SlotInfo(SlotRole.TEMP, b.dtype.str, 0, b.size - 1, nbytes,
                                  label=f"tmp{b.id}", space=kspace))
            temps.add(slot_of[b.id])
    outputs.sort()

    first_use: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for k_index, k in enumerate(plan.kernels):
        for a in k.args:
            s = slot_of[a.buffer]
            first_use.setdefault(s, k_index)
            last_use[s] = k_index

    asm = Assembler()
    infos = []
    status = next((slot_of[b.id] for b in plan.buffers if b.role == "status"), None)
    unchecked = False             # a kernel may have raised an error bit since the last CHECK
    work = sum(k.size * max(1, int(np.prod(k.rspace, dtype=np.int64))) * k.cost_per_iteration()
               if is_kernel(k) else k.work() for k in plan.kernels)
    polling = work >= POLL_WORK
    # kernel_names: one per compiled kernel; library calls (LIBCALL) are not in the kernel table
    names = iter(kernel_names)
    for k_index, k in enumerate(plan.kernels):
        writes_input = any(a.writes and a.kind == "buffer" and
                           slots[slot_of[a.buffer]].role == SlotRole.INPUT for a in k.args)
        if writes_input:
            if unchecked:
                asm.check(status)     # no argument is written after a kernel raised an error
                unchecked = False
            polling = False           # from here on the call must run to its end
        if polling:
            asm.poll()
        unchecked |= k.status is not None
        # a library call may take one buffer as two operands (x.T @ x): each slot once
        used = list(dict.fromkeys(slot_of[a.buffer] for a in k.args))
        for s in used:
            if s in temps and first_use[s] == k_index:
                asm.alloc(s, slots[s].nbytes)
                if s in shadow_in:
                    asm.to_device(s, shadow_in[s], slots[shadow_in[s]].span_bytes)
        if is_kernel(k):
            asm.launch(len(infos), k.launch_size, [slot_of[a.buffer] for a in k.args])
            infos.append(kernel_info(k, next(names)))
        else:
            asm.libcall(routine_of(k.name, k.dtype), k.sizes,
                        [(slot_of[a.buffer],) + tuple(lay) for a, lay in zip(k.args, k.layouts)])
        for s in used:
            if s in temps and last_use[s] == k_index and s not in shadow_out and \
                    not (s in shadow_in and shadow_in[s] in mutated_leaves):
                asm.free(s)
    if unchecked:
        asm.check(status)
    # results and in-place updates leave the kernels' space last, after every check
    for sh, out in sorted(shadow_out.items()):
        if sh in first_use:
            asm.to_host(out, sh, slots[sh].nbytes if slots[out].hi >= 0 else 0)
            asm.free(sh)
    for sh, arg in sorted(shadow_in.items()):
        if arg in mutated_leaves:
            asm.to_host(arg, sh, slots[sh].nbytes if slots[arg].hi >= 0 else 0)
            asm.free(sh)
    code, arg_lists = asm.arrays()
    return Program(code=code, arg_lists=arg_lists, slots=slots, kernels=infos,
                   nargwords=asm.nargwords, nleaves=len(leaves), consts=const_slots,
                   outputs=[(slot, dt, tuple(shape)) for _, slot, dt, shape in outputs],
                   mutated_leaves=sorted(mutated_leaves))
