"""The CUDA backend's schedule: how each fused kernel runs on the GPU.

Every decision depends on the kernel's shapes alone (never on the device's size), so a
program computes the same bits on every run and on every GPU:

  * map: elementwise kernels run a grid-stride loop over their flat space, BLOCK threads per
    block and at most MAX_GRID blocks;
  * atomic: stores at data-dependent indices (scatters) whose result cannot depend on the
    order in which repeated indices apply (`order_free`): integer and bool scatter-add,
    -max and -min (`np.add.at` on ints, `np.bincount`), and a scatter-set of one value the
    same at every point (`x[idx] = 0`).  A grid-stride loop like a map; each combining
    store is one atomic read-modify-write (`atomicrmw`; a wrap-around integer sum is the
    same in any order);
  * serial: every other scatter applies in loop order, as NumPy's do: one thread walks the
    space.  Float scatter-add stays here on purpose: float addition is not associative, so
    concurrent atomics would give bits that change from run to run and differ from NumPy's
    `np.add.at` (which adds in index order); float max/min too (which of -0.0 and 0.0, or
    of two NaNs, survives depends on the order); so do scatter-multiply (no atomic multiply)
    and a scatter-set of values that differ by point (the last write wins, in loop order);
  * thread_reduce: one thread per output folds its reduction in C order: scans, arg-
    reductions, reductions with many outputs (>= THREAD_OUTPUTS: enough threads already)
    and short ones (< BLOCK_REDUCE_MIN elements).  A matrix product is such a reduction
    (one thread per output element; no cuBLAS);
  * block_reduce: a block per output folds it with interleaved (coalesced) loads and a fixed
    shared-memory tree; when the outputs are few and the reduction long, a block per
    (output, split) writes partials of the accumulator dtype to a temporary and a combine
    kernel (itself scheduled by these rules) folds them in split order.

`launch_size` is what LAUNCH n carries (points; blocks for a block reduction); `params` are
the executable's per-kernel words: (grid blocks, threads per block).

The block is checked against what the compiled kernel allows when the backend loads it
(`launch_block`, from `cuFuncGetAttribute`'s numbers): a grid-stride kernel's block is
lowered to fit (its loop covers the same points with fewer threads); a block reduction's is
built into its code (the shared-memory tree), so a kernel that cannot run with it is refused
with a `LaunchLimitError` naming the numbers.  Every kernel's PTX also declares its block
(`.maxntid`), so that ptxas keeps its registers within what that block allows.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.graph import Op
from ..ir.kernel import Compute, Folded, Index, IndexValue, Kernel, KernelArg, Load, Random
from ..ir.kernel import Reduction, Store, address, idents, index_picks, is_kernel, ordered_product
from ..ir.kernel import set_extents, substitute, walk
from ..ir.leaves import contiguous_strides

# In the target key: a saved program's stored code is used only where the schedule that
# runs it is the one it was built for (2: atomic scatters; a serial scatter's code run on
# many threads would race), else its kernels are generated again from their descriptions.
VERSION = 2

BLOCK = 256                 # threads per block
MAX_GRID = 8192             # blocks of a grid-stride launch (the loop covers the rest)
THREAD_OUTPUTS = 8192       # at least this many outputs: one thread per output
BLOCK_REDUCE_MIN = 512      # reductions shorter than this: one thread per output
ITEMS_PER_THREAD = 16       # a split block folds about BLOCK * ITEMS_PER_THREAD elements
MAX_REDUCE_BLOCKS = 2048    # outputs x splits of a split reduction, at most
MAX_PARAMS = 512            # kernel parameters (8 bytes each: CUDA's 4 KiB parameter limit)

WARP = 32                   # a lowered block stays a whole number of warps
MAX_LOCAL_BYTES = 512 * 1024    # CUDA's local memory per thread, at most

_COMBINE = {Op.SUM: Op.SUM, Op.PROD: Op.PROD, Op.MAX: Op.MAX, Op.MIN: Op.MIN,
            Op.ANY: Op.ANY, Op.ALL: Op.ALL}


@dataclass(frozen=True)
class CUDASchedule:
    kind: str                # map | atomic | serial | thread_reduce | block_reduce
    launch_size: int
    grid: int
    block: int
    splits: int = 1

    @property
    def params(self) -> tuple:
        return (self.grid, self.block)

    @property
    def saved(self) -> dict:
        # a split's partial kernel folds every `splits`-th block of its reduction: its
        # description alone reads as a whole reduction per point
        return {"splits": self.splits} if self.splits > 1 else {}

    def describe(self) -> str:
        split = f" splits={self.splits}" if self.splits > 1 else ""
        return f"{self.kind} n={self.launch_size} grid={self.grid} block={self.block}{split}"


def schedule(plan):
    """A new plan with every kernel scheduled for the GPU (split reductions add a partials
    temporary and a combine kernel); the fused plan stays unscheduled."""
    out = plan.with_kernels([])
    for k in plan.kernels:
        if not is_kernel(k):
            # a library call (refused when linked, backends/cuda.py) or a loop's bounds
            out.kernels.append(k)
            continue
        if len(k.args) > MAX_PARAMS:
            raise ValueError(f"kernel {k.label!r} has {len(k.args)} arguments; a CUDA kernel "
                             f"takes at most {MAX_PARAMS}")
        out.kernels += _schedule(out, k)
    return out


def schedule_kernel(k: Kernel, saved: dict | None = None) -> Kernel:
    """A scheduled copy of one kernel that schedule() made (a saved program's): the decision
    _schedule takes for it, but never a split or a fission (its parts are the kernels a
    saved program holds).  saved: its schedule's `saved` dict ({"splits": n} for a split's
    partials), checked against the kernel: any value leaves every access inside the
    kernel's extents, since the split only chooses which block folds which elements."""
    if k.schedule is not None:
        raise ValueError(f"kernel {k.label!r} is already scheduled ({k.schedule.describe()})")
    saved = {} if saved is None else saved
    if type(saved) is not dict or set(saved) - {"splits"}:
        raise ValueError(f"kernel {k.label!r}: not a CUDA schedule: {saved!r}")
    splits = saved.get("splits", 1)
    r = k.reduction
    if splits != 1:
        if type(splits) is not int or not 1 < splits <= MAX_REDUCE_BLOCKS or r is None or \
                r.scan or r.chunk or r.op in (Op.ARGMAX, Op.ARGMIN) or k.stores or \
                k.prelude or k.ordered_stores or ordered_product(r) or not k.space or \
                k.space[-1] != splits:
            raise ValueError(f"kernel {k.label!r} cannot be the partials of a {splits!r}-way "
                             f"split reduction")
        return _scheduled(k, CUDASchedule("block_reduce", k.size, min(k.size, MAX_GRID),
                                          BLOCK, splits))
    if len(k.args) > MAX_PARAMS:
        raise ValueError(f"kernel {k.label!r} has {len(k.args)} arguments; a CUDA kernel "
                         f"takes at most {MAX_PARAMS}")
    if k.ordered_stores:
        return _scheduled(k, _scatter_schedule(k))
    if k.prelude or (r is not None and k.stores):
        raise ValueError(f"kernel {k.label!r}: the CUDA schedule splits it; a saved program "
                         f"holds its parts")
    if r is None:
        return _scheduled(k, CUDASchedule("map", k.size, _grid(k.size), BLOCK))
    return _scheduled(k, _reduce_schedule(k))


def _scatter_schedule(k: Kernel) -> CUDASchedule:
    if order_free(k):
        return CUDASchedule("atomic", k.size, _grid(k.size), BLOCK)
    return CUDASchedule("serial", k.size, 1, 1)


ATOMIC_MODES = ("add", "max", "min")     # an integer/bool atomicrmw for each


def order_free(k: Kernel) -> bool:
    """Whether a scatter kernel's result is the same whatever order its points run in (so
    its points may run concurrently, each combining store one atomic): every store is at a
    data-dependent index and is an integer or bool add/max/min, or a set of a value that is
    the same at every point (no load, loop index or random draw in it); one mode per written
    buffer (and one store for a set); no point reads a buffer the kernel writes (a later
    point would see an earlier one's write).  A plain Python function of the description, so
    tests hold it to its cases."""
    if k.reduction is not None or k.sort is not None or k.prelude or not k.stores:
        return False
    modes: dict = {}
    for st in k.stores:
        if not index_picks(st.index):
            return False
        arg = k.args[st.arg]
        if st.mode == "set":
            if any(isinstance(e, (Load, Random, IndexValue)) for e in walk([st.value])):
                return False
        elif st.mode not in ATOMIC_MODES or arg.dtype.kind not in "iub":
            return False
        modes.setdefault(arg.buffer, []).append(st.mode)
    for ms in modes.values():
        if len(set(ms)) > 1 or (ms[0] == "set" and len(ms) > 1):
            return False
    read = {k.args[e.arg].buffer for e in walk(k._roots()) if isinstance(e, Load)}
    return not read & set(modes)


class LaunchLimitError(ValueError):
    """A kernel that cannot run on this device with the block its code was built for."""


def launch_block(kind: str, block: int, max_threads: int, local_bytes: int = 0) -> int:
    """The block a kernel is launched with on this device, from the attributes of its loaded
    code (`cuFuncGetAttribute`): max_threads (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: what
    its registers and shared memory allow) and local_bytes (LOCAL_SIZE_BYTES, per thread).
    A grid-stride kernel (map, atomic, thread_reduce; serial runs one thread) works with any
    block: it gets the scheduled one, lowered to a whole number of warps that fits.  A block
    reduction's block is its shared-memory tree's size: it fits or the kernel is refused."""
    if max_threads < 1:
        raise LaunchLimitError(f"the device allows {max_threads} threads per block")
    if local_bytes > MAX_LOCAL_BYTES:
        raise LaunchLimitError(f"it needs {local_bytes} bytes of local memory per thread; "
                               f"CUDA allows {MAX_LOCAL_BYTES}")
    if block <= max_threads:
        return block
    if kind == "block_reduce":
        raise LaunchLimitError(f"its block reduction is built for {block} threads per block, "
                               f"but its compiled code allows at most {max_threads} on this "
                               f"device")
    return max_threads // WARP * WARP if max_threads >= WARP else max_threads


def _reduce_schedule(k: Kernel) -> CUDASchedule:
    """A reduction kernel's schedule when it is not split: one thread or one block per
    output."""
    r = k.reduction
    rsize = int(np.prod(k.rspace, dtype=np.int64))
    outputs = k.size
    if (r.scan or r.chunk or r.op in (Op.ARGMAX, Op.ARGMIN) or outputs >= THREAD_OUTPUTS
            or rsize < BLOCK_REDUCE_MIN or outputs == 0 or ordered_product(r)):
        return CUDASchedule("thread_reduce", outputs, _grid(outputs), BLOCK)
    return CUDASchedule("block_reduce", outputs, min(outputs, MAX_GRID), BLOCK)


def _scheduled(k: Kernel, sched: CUDASchedule) -> Kernel:
    return replace(k, args=list(k.args), stores=list(k.stores), checks=list(k.checks),
                   schedule=sched)


def _grid(points: int) -> int:
    return max(1, min(MAX_GRID, -(-points // BLOCK)))


def _schedule(plan, k: Kernel) -> list:
    if k.schedule is not None:
        raise ValueError(f"kernel {k.label!r} is already scheduled ({k.schedule.describe()})")
    if k.ordered_stores:
        return [_scheduled(k, _scatter_schedule(k))]
    if k.prelude:
        return sum((_schedule(plan, part) for part in _unfold(plan, k)), [])
    r = k.reduction
    if r is not None and k.stores:
        return sum((_schedule(plan, part) for part in _fission(k)), [])
    if r is None:
        return [_scheduled(k, CUDASchedule("map", k.size, _grid(k.size), BLOCK))]
    sched = _reduce_schedule(k)
    if sched.kind == "thread_reduce":
        return [_scheduled(k, sched)]
    want = -(-int(np.prod(k.rspace, dtype=np.int64)) // (BLOCK * ITEMS_PER_THREAD))
    splits = max(1, min(want, MAX_REDUCE_BLOCKS // k.size))
    if splits == 1:
        return [_scheduled(k, sched)]
    return _split(plan, k, splits)


def _unfold(plan, k: Kernel) -> list:
    """A row-fused kernel (fuse's prelude phases) as one reduction kernel per phase, each into
    a temporary over the space that later kernels load: the GPU's block reductions fold a row
    with many threads, where a prelude would run each row on one."""
    nspace = len(k.space)
    args = list(k.args)
    temps = []                                   # (argument index, accumulator dtype)
    out = []

    def replace_folded(e):
        memo = {}
        for x in walk([e]):
            if isinstance(x, Folded):
                arg, acc = temps[x.phase]
                load = Load(arg, acc, address(contiguous_strides(k.space), idents(nspace)))
                r = load if acc == x.dtype else Compute(Op.CAST, x.dtype, (load,))
            elif isinstance(x, Compute):
                r = Compute(x.op, x.dtype, tuple(memo[id(o)] for o in x.operands), x.checked)
            else:
                r = x
            memo[id(x)] = r
        return memo[id(e)]

    for i, ph in enumerate(k.prelude):
        temp = plan.add_temp(ph.acc, k.space)
        args.append(KernelArg("buffer", np.dtype(ph.acc), temp.id, 0, True))
        part = Kernel(tuple(k.space), tuple(k.rspace), list(args), [], None,
                      f"{k.label} phase{i}", k.status)
        part.reduction = Reduction(ph.op, replace_folded(ph.value), len(args) - 1,
                                   address(temp.strides, idents(nspace)), 0, ph.acc)
        args[-1] = KernelArg("buffer", np.dtype(ph.acc), temp.id, 0, False)
        temps.append((len(args) - 1, np.dtype(ph.acc)))
        out.append(part)
    body = Kernel(tuple(k.space) if k.reduction is not None else tuple(k.space) + tuple(k.rspace),
                  tuple(k.rspace) if k.reduction is not None else (), list(args),
                  [Store(s.arg, s.index, replace_folded(s.value), s.mode) for s in k.stores],
                  None, k.label, k.status, list(k.checks))
    if k.reduction is not None:
        r = k.reduction
        body.reduction = Reduction(r.op, replace_folded(r.value), r.arg, r.index, r.chunk, r.acc,
                                   r.scan, r.then)
    out.append(body)
    for part in out:
        set_extents(part)
    return out


def _fission(k: Kernel) -> list:
    """A reduction carrying sibling stores (fuse's sibling fusion) as two kernels: a map over
    the whole loop nest with the stores, then the plain reduction.  The block reduction has
    no place for per-element stores; the GPU's bandwidth makes the second read cheap."""
    mapped = Kernel(tuple(k.space) + tuple(k.rspace), (), list(k.args), list(k.stores), None,
                    k.label + " map", k.status, list(k.checks))
    reduced = Kernel(tuple(k.space), tuple(k.rspace), list(k.args), [], k.reduction,
                     k.label + " reduce", k.status)
    for part in (mapped, reduced):
        set_extents(part)
    return [mapped, reduced]


def _split(plan, k: Kernel, splits: int) -> list:
    """Partials over (outputs..., splits), then a combine kernel over the splits."""
    r = k.reduction
    nspace = len(k.space)
    acc = r.acc_dtype
    partial_shape = tuple(k.space) + (splits,)
    partial = plan.add_temp(acc, partial_shape)
    # the split is a new last space dim; the reduction dims shift up by one
    shifted = substitute(k, partial_shape, k.rspace,
                         lambda d: Index.loop(d + 1 if d >= nspace else d))
    args = list(shifted.args)
    args[r.arg] = KernelArg("buffer", acc, partial.id, 0, True)
    first = Kernel(partial_shape, tuple(k.rspace), args, [], None, k.label + " partial",
                   shifted.status, list(shifted.checks))
    first.reduction = Reduction(r.op, shifted.reduction.value, r.arg,
                                address(partial.strides, idents(nspace + 1)), 0, r.acc)
    set_extents(first)
    blocks = k.size * splits
    out = [_scheduled(first, CUDASchedule("block_reduce", blocks, min(blocks, MAX_GRID), BLOCK,
                                          splits))]
    out_arg = k.args[r.arg]
    second = Kernel(tuple(k.space), (splits,),
                    [KernelArg("buffer", acc, partial.id),
                     KernelArg("buffer", out_arg.dtype, out_arg.buffer, 0, True)],
                    label=k.label + " combine")
    loads = Load(0, np.dtype(acc), address(partial.strides, idents(nspace + 1)))
    second.reduction = Reduction(_COMBINE[r.op], loads, 1, r.index, 0, acc, then=r.then)
    set_extents(second)
    return out + _schedule(plan, second)
