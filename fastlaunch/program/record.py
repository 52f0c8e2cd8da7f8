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

from dataclasses import dataclass, field

import numpy as np

from .._launch import Space
from ..backends.base import HOST_MEMORY, MemoryModel
from .bytecode import ArgKind, Assembler, KernelInfo, Program, SlotInfo, SlotRole, routine_of
from ..ir.fuse import Plan
from ..ir.kernel import LoopBegin, LoopEnd, is_kernel
from ..ir.leaves import LeafSpec, element_range

# A program estimated to do more work than this (operations) polls for signals between its
# launches: a Ctrl-C then stops it within a launch instead of when it returns.
POLL_WORK = 50_000_000

__all__ = ["record", "record_loop", "Loop", "LoopPart", "LoopOutputs", "kernel_info",
           "element_range", "POLL_WORK"]


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


def argument_slots(leaves) -> list[SlotInfo]:
    """The first slots of every program, one per argument leaf: an array's input slot with
    the element range its strides reach, a scalar's parameter slot."""
    slots: list[SlotInfo] = []
    for i, leaf in enumerate(leaves):
        if leaf.is_array:
            lo, hi = element_range(leaf.shape, leaf.strides)
            slots.append(SlotInfo(SlotRole.INPUT, leaf.dtype.str, lo, hi, label=f"in{i}",
                                  space=leaf.space))
        else:
            slots.append(SlotInfo(SlotRole.PARAM, leaf.dtype.str, label=f"in{i}"))
    return slots


def record(plan: Plan, kernel_names: list[str], leaves: list[LeafSpec], consts: list,
           mutated_leaves: list[int], memory: MemoryModel = HOST_MEMORY,
           device_results: bool = False) -> Program:
    """plan: scheduled (every kernel has its backend's `schedule`).  device_results: the
    results stay in the kernels' space (a call with device arrays among its arguments): the
    kernels write them directly, nothing is copied out."""
    kspace = int(memory.kernel_space)
    if device_results and kspace == Space.SPACE_HOST:
        raise ValueError("device results need a backend whose kernels use device memory")
    slots = argument_slots(leaves)
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
        elif b.role == "alias":
            # a loop's carried value or row: a pointer its instructions move (LoopBegin)
            slot_of[b.id] = len(slots)
            slots.append(SlotInfo(SlotRole.ALIAS, b.dtype.str, 0, b.size - 1,
                                  label=f"alias{b.id}", space=kspace))
        elif b.role == "iter":
            pass                          # the counter slot of its loop (below)
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

    # loops: a counter slot each; a slot used inside a loop is live from before the
    # outermost loop around the use to after it (no ALLOC or FREE inside a loop)
    # step -> (first, last) step of its region
    region: list[tuple[int, int]] = [(i, i) for i in range(len(plan.kernels))]
    counters: dict[int, int] = {}          # LoopBegin step -> its counter slot
    spare_alias: dict[int, list] = {}      # per loop, per carried value: ROTATE's third alias
    open_loops: list = []
    for k_index, k in enumerate(plan.kernels):
        if isinstance(k, LoopBegin):
            counters[k_index] = len(slots)
            slots.append(SlotInfo(SlotRole.COUNTER, np.dtype(np.int64).str,
                                  label=f"i{len(counters) - 1}"))
            spare_alias[k_index] = []
            for c, (_, read, _, _, _) in enumerate(k.carried):
                r = slots[slot_of[read]]
                spare_alias[k_index].append(len(slots))
                slots.append(SlotInfo(SlotRole.ALIAS, r.dtype, r.lo, r.hi,
                                      label=f"spare{len(counters) - 1}.{c}", space=r.space))
            if k.iter is not None:
                slot_of[k.iter] = counters[k_index]
            open_loops.append(k_index)
        elif isinstance(k, LoopEnd):
            begin = open_loops.pop()
            if not open_loops:
                for i in range(begin, k_index + 1):
                    region[i] = (begin, k_index)
    if open_loops:
        raise ValueError("a plan's loop has no end")

    def step_slots(k) -> list:
        if isinstance(k, LoopBegin):
            return [slot_of[b] for b in k.buffers()]
        if isinstance(k, LoopEnd):
            return []
        return [slot_of[a.buffer] for a in k.args]

    first_use: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for k_index, k in enumerate(plan.kernels):
        lo, hi = region[k_index]
        for s in step_slots(k):
            first_use.setdefault(s, lo)
            last_use[s] = max(last_use.get(s, hi), hi)

    asm = Assembler()
    infos = []
    status = next((slot_of[b.id] for b in plan.buffers if b.role == "status"), None)
    unchecked = False             # a kernel may have raised an error bit since the last CHECK
    work = _work(plan.kernels)
    polling = work >= POLL_WORK
    # kernel_names: one per compiled kernel; library calls (LIBCALL) are not in the kernel table
    names = iter(kernel_names)
    loops: list = []                  # the open loops' (LoopBegin, head pc, patches)
    for k_index, k in enumerate(plan.kernels):
        if isinstance(k, LoopBegin):
            if not loops:
                # every temporary of the loop (and of loops inside it) before its head
                for s in sorted(temps):
                    if first_use.get(s) == k_index:
                        asm.alloc(s, slots[s].nbytes)
                        if s in shadow_in:
                            asm.to_device(s, shadow_in[s], slots[shadow_in[s]].span_bytes)
            loops.append(_begin_loop(asm, k, slot_of, slots, counters[k_index],
                                     spare_alias[k_index], polling and not loops) +
                         (counters[k_index],))
            continue
        if isinstance(k, LoopEnd):
            begin, head, spares, ctr = loops.pop()
            if unchecked:
                asm.check(status)     # an error stops the loop in the iteration that raised it
                unchecked = False
            _end_loop(asm, begin, head, spares, slot_of, slots, ctr)
            lo, hi = region[k_index]
            if hi == k_index:
                for s in list(temps):
                    if last_use.get(s) == k_index and s not in shadow_out and \
                            not (s in shadow_in and shadow_in[s] in mutated_leaves):
                        asm.free(s)
            continue
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
            if s in temps and first_use[s] == k_index and not loops:
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
                    not (s in shadow_in and shadow_in[s] in mutated_leaves) and not loops:
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
                   mutated_leaves=sorted(mutated_leaves),
                   checks=[(bit, exc.__name__, message) for bit, exc, message in plan.checks])


def _work(steps) -> int:
    """Estimated operations of a plan's steps (a loop's body times its count)."""
    total, scale = 0, [1]
    for k in steps:
        if isinstance(k, LoopBegin):
            scale.append(scale[-1] * max(1, k.n))
        elif isinstance(k, LoopEnd):
            scale.pop()
        elif is_kernel(k):
            total += scale[-1] * k.size * max(1, int(np.prod(k.rspace, dtype=np.int64))) * \
                k.cost_per_iteration()
        else:
            total += scale[-1] * k.work()
    return total


def _begin_loop(asm: Assembler, k: LoopBegin, slot_of: dict, slots: list, ctr: int,
                spares: list, poll: bool):
    """The code before a plan loop's body: its carried aliases on their buffers (the first
    iteration reads the first values and writes the final buffer), the counter, the head
    (POLLing there when the program is long), each row moved to this iteration's.  Returns
    (k, head pc, the spare aliases)."""
    for (init, read, write, spare, final), alias in zip(k.carried, spares):
        asm.move(slot_of[read], slot_of[init])
        asm.move(slot_of[write], slot_of[final])
        asm.move(alias, slot_of[spare])
    asm.set(ctr, 0)
    head = asm.here()
    if poll:
        asm.poll()
    for row, stack, every in k.rows:
        asm.row(slot_of[row], slot_of[stack], ctr, every, slots[slot_of[row]].span_bytes)
    for _c, row, stack, every in k.checkpoints:
        asm.row(slot_of[row], slot_of[stack], ctr, every, slots[slot_of[row]].span_bytes)
    return k, head, spares


def _end_loop(asm: Assembler, k: LoopBegin, head: int, spares: list, slot_of: dict,
              slots: list, ctr: int):
    """The code after a plan loop's body: checkpoint copies, the until test, the turn of the
    carried buffers, the jump back; then each carried value's final buffer filled from where
    the last iteration left it (nothing to copy when that is the final buffer itself)."""
    for c, row, _stack, _every in k.checkpoints:
        write = slot_of[k.carried[c][2]]
        asm.copy(slot_of[row], write, slots[slot_of[row]].span_bytes)
    stop = asm.break_if(slot_of[k.flag]) if k.flag is not None else None
    for (_init, read, write, _spare, _final), alias in zip(k.carried, spares):
        asm.rotate(slot_of[read], slot_of[write], alias)
    asm.loop(ctr, k.n, head)
    for _init, read, _write, _spare, final in k.carried:      # after LOOP: `read` holds the last
        asm.copy(slot_of[final], slot_of[read], slots[slot_of[final]].span_bytes)
    if stop is not None:
        done = asm.jump()
        asm.patch(stop, asm.here())
        for _init, _read, write, _spare, final in k.carried:  # stopped before the turn
            asm.copy(slot_of[final], slot_of[write], slots[slot_of[final]].span_bytes)
        asm.patch(done, asm.here())


# ---- loops (fl.iterate) ------------------------------------------------------------------------
# A loop runs the step's launches (and the until predicate's) n times.  Carried arrays take
# turns in two buffers: X is written by the odd iterations (1, 3, ...), Y by the even ones.
# The first iteration reads the caller's arrays, every other one the buffer the one before
# wrote, so the code holds three copies of the body, each bound to fixed buffers:
#     first: arguments -> X    (iteration 1, before the loop)
#     even:  X -> Y            (2, 4, ...: the head of the loop, then NEXT)
#     odd:   Y -> X            (3, 5, ...: then LOOP back to the head)
# No pointer moves between iterations, and the argument words of each launch are bound once
# before the loop; inside it a BIND sets only the words that change (a collected result's row,
# the until flag, both moved by ROW every iteration).  The loop is left after an iteration
# that wrote X (LOOP's end, or NEXT/BREAK_IF after the first or an odd copy) or one that wrote
# Y (NEXT/BREAK_IF after the even copy); each exit copies the final values out of its buffer.
# The values the parts' buffers are bound to:
#     ("leaf", j)    call argument j as it is (loop-invariant, or updated in place by the step)
#     ("carry", c)   the current value of carried array c (the buffer read)
#     ("new", c)     its next value (the buffer written)
#     ("row", r)     collected result r's row of this iteration (or its scratch buffer)
#     ("flag",)      this iteration's until flag
@dataclass
class LoopPart:
    """One traced program's kernels in the loop body: its scheduled plan, the compiled
    kernels' names, the trace's constants, and the value each of its argument and result
    buffers is bound to: ("input", buffer ref) / ("output", buffer ref) -> value."""
    plan: Plan
    names: list
    consts: list
    values: dict


@dataclass
class Loop:
    """What fl.iterate asks the recorder for: `parts` (the step, then the predicate) run `n`
    times (n >= 1).

    carried: per carried array, its leaf: two buffers of its size take turns as the one read
        and the one written; the final value goes to an output (or, with `inplace`, into the
        leaf, once, after the loop);
    new_from: carried index -> a value copied into its next buffer each iteration (a step
        that returns an argument as the carried array's new value);
    rows: per collected result, (dtype, shape) of one row; collected every `every`-th
        iteration into a stacked output (every == 0: into a scratch buffer, kept by nobody);
    collect_from: collected index -> a value copied into its row each iteration;
    until: a predicate writes ("flag",) every iteration (into a stacked bool output); the
        loop stops after the first iteration whose flag is set;
    flag_from: a value copied into the flag (a predicate that returns one of its arguments).
    """
    n: int
    parts: list
    carried: list = field(default_factory=list)
    new_from: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)
    collect_from: dict = field(default_factory=dict)
    every: int = 1
    until: bool = False
    flag_from: tuple | None = None
    inplace: bool = False


@dataclass
class LoopOutputs:
    """Where record_loop put what fl.iterate hands back: per carried array ("output", index)
    or ("leaf", j); per collected result an output index (None when not kept); the flags'
    output index (None without until)."""
    carried: list
    collected: list
    flags: int | None


def record_loop(loop: Loop, leaves: list[LeafSpec], mutated_leaves: list[int],
                memory: MemoryModel = HOST_MEMORY) -> tuple[Program, LoopOutputs]:
    """The parts' kernels in a loop (see Loop and the comment above): temporaries allocated
    before it and freed after it, carried state in two buffers per array, collected results
    written in place into their row of a stacked output, the until flag read by BREAK_IF."""
    kspace = int(memory.kernel_space)
    host = kspace == Space.SPACE_HOST
    n = loop.n
    if n < 1:
        raise ValueError(f"a loop runs at least once, not {n} times")
    slots = argument_slots(leaves)
    temps: list[int] = []
    const_slots, outputs = [], []

    def new_slot(info: SlotInfo) -> int:
        slots.append(info)
        if info.role == SlotRole.TEMP:
            temps.append(len(slots) - 1)
        return len(slots) - 1

    def temp(dtype: str, count: int, label: str) -> int:
        size = np.dtype(dtype).itemsize
        return new_slot(SlotInfo(SlotRole.TEMP, dtype, 0, count - 1, max(count, 1) * size,
                                 label=label, space=kspace))

    def output(dtype: str, shape: tuple, label: str) -> int:
        count = int(np.prod(shape, dtype=np.int64))
        slot = new_slot(SlotInfo(SlotRole.OUTPUT, dtype, 0, count - 1, label=label,
                                 space=int(Space.SPACE_HOST)))
        outputs.append((slot, dtype, tuple(shape)))
        return slot

    def alias(dtype: str, count: int, label: str) -> int:
        return new_slot(SlotInfo(SlotRole.ALIAS, dtype, 0, count - 1, label=label, space=kspace))

    status = None
    if any(b.role == "status" for part in loop.parts for b in part.plan.buffers):
        status = new_slot(SlotInfo(SlotRole.STATUS, np.dtype(np.int64).str, label="status",
                                   space=kspace))
    if any(b.role == "rng" for part in loop.parts for b in part.plan.buffers):
        raise ValueError("a loop cannot draw random numbers yet (every iteration would draw "
                         "the same ones)")
    # the leaves the kernels read: on a crossing backend, a shadow copy in the kernels' space
    shadow_of: dict[int, int] = {}

    def leaf_slot(j: int) -> int:
        if slots[j].role != SlotRole.INPUT or slots[j].space == kspace:
            return j
        if j not in shadow_of:
            s = slots[j]
            if s.lo != 0:
                raise ValueError(f"argument leaf {j}: an argument with negative strides cannot "
                                 f"be copied to the device; pass np.ascontiguousarray(x)")
            shadow_of[j] = temp(s.dtype, s.hi + 1, f"in{j}@dev")
        return shadow_of[j]

    # carried arrays: per copy of the body, the buffer each reads and the one it writes
    FIRST, EVEN, ODD = range(3)
    reads: list[list[int]] = [[], [], []]
    writes: list[list[int]] = [[], [], []]
    x_buf, y_buf, finals = [], [], []
    for c, j in enumerate(loop.carried):
        leaf = slots[j]
        count = leaf.hi + 1
        start = leaf_slot(j)
        if loop.inplace:
            bufs = [temp(leaf.dtype, count, f"carry{c}.a"), temp(leaf.dtype, count, f"carry{c}.b")]
            finals.append(("leaf", j))
        else:
            shape = leaves[j].shape
            out = output(leaf.dtype, shape, f"carry{c}")
            bufs = [out if host else temp(leaf.dtype, count, f"carry{c}.a"),
                    temp(leaf.dtype, count, f"carry{c}.b")]
            finals.append(("output", len(outputs) - 1))
        # iteration n writes bufs[0]: without an early stop, the final value is where it is
        # handed back from (no copy at the end on the host)
        x, y = (bufs[0], bufs[1]) if n % 2 else (bufs[1], bufs[0])
        x_buf.append(x)
        y_buf.append(y)
        for copy, (r, w) in enumerate([(start, x), (x, y), (y, x)]):
            reads[copy].append(r)
            writes[copy].append(w)

    # collected results: a stacked output, a row alias moved by ROW every iteration
    rows = -(-n // loop.every) if loop.every else 0
    row_slot, stacked, collected = [], [], []
    for r, (dtype, shape) in enumerate(loop.rows):
        count = int(np.prod(shape, dtype=np.int64))
        if loop.every:
            out = output(np.dtype(dtype).str, (rows,) + tuple(shape), f"stack{r}")
            collected.append(len(outputs) - 1)
            buf = out if host else temp(np.dtype(dtype).str, rows * count, f"stack{r}@dev")
            stacked.append((out, buf, count * np.dtype(dtype).itemsize))
            row_slot.append(alias(np.dtype(dtype).str, count, f"row{r}"))
        else:
            collected.append(None)
            row_slot.append(temp(np.dtype(dtype).str, count, f"result{r}"))
    flags = flag_buf = flag_row = flags_index = None
    if loop.until:
        flags = output(np.dtype(np.bool_).str, (n,), "flags")
        flags_index = len(outputs) - 1
        flag_buf = flags if host else temp(np.dtype(np.bool_).str, n, "flags@dev")
        flag_row = alias(np.dtype(np.bool_).str, 1, "flag")
    ctr = new_slot(SlotInfo(SlotRole.COUNTER, np.dtype(np.int64).str, label="i"))
    # the slots ROW moves every iteration: argument words bound from them are bound again
    moving = {s for s in row_slot + [flag_row]
              if s is not None and slots[s].role == SlotRole.ALIAS}

    def value_slot(v, copy: int) -> int:
        kind = v[0]
        if kind == "leaf":
            return leaf_slot(v[1])
        if kind == "carry":
            return reads[copy][v[1]]
        if kind == "new":
            return writes[copy][v[1]]
        if kind == "row":
            return row_slot[v[1]]
        if kind == "flag":
            return flag_row
        raise ValueError(f"unknown loop value {v!r}")

    # each part's own slots; the parts' arguments and results stay loop values (bound per copy)
    infos, launches = [], []          # launches: (kernel index, size, args, part kernel)
    for part in loop.parts:
        slot_of: dict = {}
        for b in part.plan.buffers:
            if b.role in ("input", "param"):
                slot_of[b.id] = part.values[("input", b.ref)]
            elif b.role == "output":
                slot_of[b.id] = part.values[("output", b.ref)]
            elif b.role == "const":
                slot_of[b.id] = new_slot(SlotInfo(SlotRole.CONST, b.dtype.str, 0, b.size - 1,
                                                  label=f"const{len(const_slots)}", space=kspace))
                const_slots.append((slot_of[b.id], part.consts[b.ref]))
            elif b.role == "status":
                slot_of[b.id] = status
            else:
                slot_of[b.id] = temp(b.dtype.str, b.size, f"tmp{len(temps)}")
        names = iter(part.names)          # compiled kernels only: library calls have none
        for k in part.plan.kernels:
            args = [slot_of[a.buffer] for a in k.args]
            if is_kernel(k):
                launches.append((len(infos), k.launch_size, args, k))
                infos.append(kernel_info(k, next(names)))
            else:
                launches.append((None, None, args, k))
    work = n * sum(k.size * max(1, int(np.prod(k.rspace, dtype=np.int64))) *
                   k.cost_per_iteration() if is_kernel(k) else k.work()
                   for _, _, _, k in launches)

    def arg_slots(args, copy: int) -> list:
        return [value_slot(a, copy) if isinstance(a, tuple) else a for a in args]

    # every value's slot, before the code: a leaf's device shadow is a temporary like the rest
    for copy in range(3):
        for _, _, args, _ in launches:
            arg_slots(args, copy)
        for v in list(loop.new_from.values()) + list(loop.collect_from.values()) + \
                [loop.flag_from] * (loop.flag_from is not None):
            value_slot(v, copy)

    asm = Assembler()
    for s in temps:
        asm.alloc(s, slots[s].nbytes)
    for j, sh in sorted(shadow_of.items()):
        asm.to_device(sh, j, slots[j].span_bytes)
    asm.set(ctr, 0)
    # every launch of every copy gets its own argument words, bound here but for the moving
    # ones (runs of them are bound again before the launch)
    bound = []                        # per copy, per launch: (args_at, [(offset, slots)])
    for copy in range(3):
        per_launch = []
        for _, _, args, k in launches:
            if not is_kernel(k):          # a LIBCALL names its slots in the code itself
                per_launch.append(None)
                continue
            words = arg_slots(args, copy)
            args_at = asm.words(len(words))
            fixed, again = _runs(words, moving)
            for off, run in fixed:
                asm.bind(args_at + off, run)
            per_launch.append((args_at, again))
        bound.append(per_launch)

    nstep = len(loop.parts[0].plan.kernels)
    # one iteration that is itself long: POLL before each launch too, as record() does, while
    # no launch of the body writes an argument (stopped there, the caller's arrays are as a
    # completed iteration left them)
    polling = work >= POLL_WORK
    inner_polls = work // n >= POLL_WORK and not any(
        a.writes and a.kind == "buffer" and slots[s].role == SlotRole.INPUT
        for copy in range(3) for _, _, args, k in launches
        for a, s in zip(k.args, arg_slots(args, copy)))

    def passed_on(copy: int):
        # values the step passes through unchanged, once its results are all there
        for c, v in sorted(loop.new_from.items()):
            w = writes[copy][c]
            asm.copy(w, value_slot(v, copy), slots[w].span_bytes)
        for r, v in sorted(loop.collect_from.items()):
            asm.copy(row_slot[r], value_slot(v, copy), slots[row_slot[r]].span_bytes)

    def iteration(copy: int) -> int | None:
        """One iteration through the copy's buffers; the BREAK_IF to patch (or None)."""
        if polling:
            asm.poll()        # at an iteration boundary: stopped here, the state is consistent
        for r, (_, buf, nbytes) in enumerate(stacked):
            asm.row(row_slot[r], buf, ctr, loop.every, nbytes)
        if loop.until:
            asm.row(flag_row, flag_buf, ctr, 1, 1)
        unchecked = False
        for i, (index, size, args, k) in enumerate(launches):
            if i == nstep:
                passed_on(copy)
            words = arg_slots(args, copy)
            writes_input = any(a.writes and a.kind == "buffer" and
                               slots[s].role == SlotRole.INPUT for a, s in zip(k.args, words))
            if writes_input and unchecked:
                asm.check(status)       # no argument is written after a kernel raised an error
                unchecked = False
            unchecked |= k.status is not None
            if inner_polls and i > 0:
                asm.poll()
            if not is_kernel(k):
                asm.libcall(routine_of(k.name, k.dtype), k.sizes,
                            [(s,) + tuple(lay) for s, lay in zip(words, k.layouts)])
                continue
            args_at, again = bound[copy][i]
            for off, run in again:
                asm.bind(args_at + off, run)
            asm.launch_bound(index, size, args_at)
        if nstep == len(launches):
            passed_on(copy)
        if loop.flag_from is not None:
            asm.copy(flag_row, value_slot(loop.flag_from, copy), 1)
        if unchecked:
            asm.check(status)           # an error stops the loop in the iteration that raised it
        return asm.break_if(flag_row) if loop.until else None

    to_x, to_y = [], []               # words to patch with the exits' pcs
    stop = iteration(FIRST)
    if stop is not None:
        to_x.append(stop)
    to_x.append(asm.next(ctr, n))
    head = asm.here()
    stop = iteration(EVEN)
    if stop is not None:
        to_y.append(stop)
    to_y.append(asm.next(ctr, n))
    stop = iteration(ODD)
    if stop is not None:
        to_x.append(stop)
    asm.loop(ctr, n, head)

    def hand_back(bufs) -> list:
        # (dst, src) per carried array whose final value is not where it is handed back from
        dsts = [where if kind == "leaf" else outputs[where][0] for kind, where in finals]
        return [(d, b) for d, b in zip(dsts, bufs) if d != b]

    def copy_out(pairs):
        for dst, src in pairs:
            if slots[dst].space == kspace:
                asm.copy(dst, src, slots[src].span_bytes)
            else:
                asm.to_host(dst, src, slots[src].span_bytes)

    for at in to_x:
        asm.patch(at, asm.here())
    copy_out(hand_back(x_buf))
    done = asm.jump() if hand_back(y_buf) else None
    for at in to_y:
        asm.patch(at, asm.here())
    copy_out(hand_back(y_buf))
    if done is not None:
        asm.patch(done, asm.here())
    for out, buf, nbytes in stacked:
        if buf != out:
            asm.to_host(out, buf, rows * nbytes)
    if flags is not None and flag_buf != flags:
        asm.to_host(flags, flag_buf, n)
    for j, sh in sorted(shadow_of.items()):
        if j in mutated_leaves:
            asm.to_host(j, sh, slots[sh].span_bytes)
    for s in temps:
        asm.free(s)
    code, arg_lists = asm.arrays()
    mutated = sorted(set(mutated_leaves) | (set(loop.carried) if loop.inplace else set()))
    program = Program(code=code, arg_lists=arg_lists, slots=slots, kernels=infos,
                      nargwords=asm.nargwords, nleaves=len(leaves), consts=const_slots,
                      outputs=outputs, mutated_leaves=mutated)
    return program, LoopOutputs(finals, collected, flags_index)


def _runs(words: list, moving: set) -> tuple[list, list]:
    """A launch's argument slots split into runs of fixed slots and runs of moving ones:
    ([(offset, slots)], [(offset, slots)])."""
    fixed, again = [], []
    for i, s in enumerate(words):
        runs = again if s in moving else fixed
        if runs and runs[-1][0] + len(runs[-1][1]) == i:
            runs[-1][1].append(s)
        else:
            runs.append((i, [s]))
    return fixed, again
