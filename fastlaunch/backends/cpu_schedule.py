"""The CPU backend's schedule: how each fused kernel runs on the host's worker pool.

Decides, per kernel of a fuse.Plan:
  * reduction splitting: a full reduction of at least 2*REDUCE_CHUNK elements into fewer than
    SPLIT_MAX_OUTPUTS results folds fixed chunks first (a "partial" kernel, parallel over
    chunks) and combines them in a second kernel, so that the combine order, and hence the
    result, depends on the shapes alone, never on the number of threads;
  * tiling: a reduction whose inner loop would walk memory with a stride while the outputs'
    innermost dim walks it contiguously (column sums, matrix products) folds tiles of
    TILE_ROWS x TILE_COLUMNS outputs around the reduction loop;
  * serial kernels: stores at data-dependent indices apply in loop order on one thread;
  * the launch size (LAUNCH n: flat points, or tiles), the work per launch index, and the
    threads a launch is split over, from a measured cost model (`launch_threads`).
"""
from __future__ import annotations

import os

from dataclasses import dataclass, replace

import numpy as np

from ..program.bytecode import blas_layout
from ..ir.graph import Op
from ..ir.kernel import Compute, Index, Kernel, KernelArg, LibraryCall, Load, Loop, Reduction
from ..ir.kernel import accumulator_dtype, address, coalesce, idents, is_kernel, is_loop_step
from ..ir.kernel import ordered_product, set_extents, substitute, walk
from .base import derived_schedule

# Full reductions of at least 2*REDUCE_CHUNK elements into fewer than SPLIT_MAX_OUTPUTS
# results are split (see the module docstring).
REDUCE_CHUNK = 16384
SPLIT_MAX_OUTPUTS = 16
# tiled reductions: outputs per tile along the innermost dim, and rows per block when an
# operand is shared by the rows (a matrix product's right-hand side)
TILE_COLUMNS = 64
TILE_ROWS = 4


def last_level_cache_bytes(default: int = 32 << 20,
                           root: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The size of this machine's largest data cache (Linux sysfs), else `default`."""
    best = 0
    try:
        for entry in os.listdir(root):
            try:
                with open(os.path.join(root, entry, "type")) as fh:
                    if fh.read().strip() == "Instruction":
                        continue
                with open(os.path.join(root, entry, "size")) as fh:
                    text = fh.read().strip().upper()
            except OSError:
                continue
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            digits = text[:-1] if text[-1:] in "KMG" else text
            if digits.isdigit():
                best = max(best, int(digits) * scale)
    except OSError:
        pass
    return best or default


# A kernel that moves more than STREAM_BYTES (its buffers' extents, read and written) stores
# its outputs with non-temporal stores (CPUSchedule.stream; codegen/llvm_cpu.py): what it
# writes would leave the last-level cache before anyone read it back, and a plain store
# first reads each line it writes (write-allocate), a third of a copy's traffic.  A quarter
# above the last-level cache (measured on a 32 MiB one: a 32 MiB kernel whose input the
# kernel before left in the cache, a normalisation, is faster with plain stores; at 48 MiB
# and up, the non-temporal ones win, up to 2x on an elementwise chain at 8M elements).
STREAM_BYTES = last_level_cache_bytes() * 5 // 4

_COMBINE = {Op.SUM: Op.SUM, Op.PROD: Op.PROD, Op.MAX: Op.MAX, Op.MIN: Op.MIN,
            Op.ANY: Op.ANY, Op.ALL: Op.ALL}


@dataclass(frozen=True)
class CPUSchedule:
    """tile: (rows, columns) of a tiled reduction, or None.  work_per_item: estimated cost of
    one launch index (-1: one thread, in order).  threads: how many threads the launch is
    split over at most (1: on the caller alone; the pool may have fewer)."""
    launch_size: int
    work_per_item: int
    tile: tuple | None = None
    stream: bool = False
    threads: int = 1

    @property
    def params(self) -> tuple:
        return (self.work_per_item, self.threads)

    @property
    def saved(self) -> dict:
        return {}        # everything follows from the kernel's description (schedule_kernel)

    def describe(self) -> str:
        tile = f" tile={list(self.tile)}" if self.tile else ""
        stream = " stream" if self.stream else ""
        return (f"n={self.launch_size} work={self.work_per_item} threads={self.threads}"
                f"{tile}{stream}")


def schedule(plan, reduce_chunk: int = REDUCE_CHUNK):
    """A new plan with every kernel scheduled for the CPU (partial/combine pairs replacing
    large full reductions, their partials added to the new plan's buffers).  The fused plan
    is left unscheduled: it is the contract every backend starts from."""
    out = plan.with_kernels([])
    for k in plan.kernels:
        if is_loop_step(k):
            out.kernels.append(k)         # a loop's bounds: program/record.py's business
            continue
        if not is_kernel(k):
            # a library call the fused plan asked for (np.linalg): the host runs it as is
            if k.schedule is not None:
                raise ValueError(f"library call {k.label!r} is already scheduled")
            out.kernels.append(replace(k, args=list(k.args), schedule=LibrarySchedule()))
            continue
        call = gemm_call(k) if k.schedule is None else None
        if call is not None:
            out.kernels.append(call)
            continue
        for part in _split(out, k, reduce_chunk):
            out.kernels.append(schedule_kernel(part))
    return out


# ---- matrix products through BLAS ------------------------------------------------------------
# A float32/float64 contraction of at least this many multiply-adds per matrix runs as a BLAS
# gemm call (LIBCALL); smaller ones stay compiled kernels, whose launch costs less than a
# BLAS call's setup.  Measured with bench/matmul.py (see docs/architecture.md, section 10).
GEMM_MIN_FLOPS = 8 * 8 * 8
_INT32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class LibrarySchedule:
    """A step the CPU runs as a library call (LIBCALL): BLAS/LAPACK on the interpreter's
    thread, with BLAS's own threads."""

    @property
    def saved(self) -> dict:
        return {}

    def describe(self) -> str:
        return "library call"


def gemm_call(k: Kernel):
    """The BLAS gemm call computing kernel `k`, if it is a float32/float64 matrix product
    (batched over at most two dims) with operands BLAS can address in place; else None."""
    r = k.reduction
    if r is None or r.op is not Op.SUM or r.scan or r.chunk or r.then is not None or \
            k.stores or k.checks or k.status is not None or len(k.rspace) != 1 or \
            not 1 <= len(k.space) <= 4:
        return None
    v = r.value
    dt = v.dtype if isinstance(v, Compute) else None
    if dt is None or v.op is not Op.MUL or dt not in (np.float32, np.float64) or v.checked or \
            len(v.operands) != 2 or not all(isinstance(o, Load) and o.dtype == dt and
                                            o.index.is_affine for o in v.operands):
        return None
    out = k.args[r.arg]
    if out.dtype != dt or not r.index.is_affine:
        return None
    nspace = len(k.space)
    kd = nspace                                          # the reduction loop
    x, y = v.operands
    if nspace == 1:
        # matrix @ vector or vector @ matrix: the vector operand does not follow the space
        if x.index.coef(Loop(0)) == 0:
            x, y = y, x
        if y.index.coef(Loop(0)) != 0:
            return None
        batch, md, nd = [], 0, None
    else:
        md, nd = nspace - 2, nspace - 1
        if x.index.coef(Loop(nd)) != 0:
            x, y = y, x
        if x.index.coef(Loop(nd)) != 0 or y.index.coef(Loop(md)) != 0:
            return None
        batch = list(range(nspace - 2))
    if len(batch) > 2 or r.index.coef(Loop(kd)) != 0:
        return None
    sizes = list(k.space) + list(k.rspace)
    m = sizes[md]
    n = sizes[nd] if nd is not None else 1
    kk = sizes[kd]
    if m * n * kk < GEMM_MIN_FLOPS or max(m, n, kk) > _INT32_MAX:
        return None
    bsizes = [sizes[d] for d in batch] + [1] * (2 - len(batch))

    def strides(ix, first, second):
        c = lambda d: ix.coef(Loop(d)) if d is not None else 0     # noqa: E731
        bs = [c(d) for d in batch] + [0] * (2 - len(batch))
        return (ix.const, bs[0], bs[1], c(first), c(second))

    lx, ly, lc = strides(x.index, md, kd), strides(y.index, kd, nd), strides(r.index, md, nd)
    if blas_layout(m, kk, lx[3], lx[4]) is None or blas_layout(kk, n, ly[3], ly[4]) is None \
            or blas_layout(m, n, lc[3], lc[4]) != "N":
        return None
    args = [replace(k.args[x.arg], writes=False), replace(k.args[y.arg], writes=False),
            replace(out, writes=True)]
    return LibraryCall("gemm", dt, (bsizes[0], bsizes[1], m, n, kk), args, [lx, ly, lc],
                       k.label, LibrarySchedule())


def schedule_kernel(k: Kernel, saved: dict | None = None) -> Kernel:
    """A copy of an unscheduled kernel with its tile, launch size and work (not split);
    `saved` (a saved program's record of the schedule) must be empty."""
    derived_schedule(k, saved, "CPU")
    if k.schedule is not None:
        raise ValueError(f"kernel {k.label!r} is already scheduled ({k.schedule.describe()})")
    tile = _tiling(k)
    size = _tiled_launch_size(k.space, tile) if tile else k.size
    work = _work_per_item(k, tile)
    return replace(k, args=list(k.args), stores=list(k.stores), checks=list(k.checks),
                   schedule=CPUSchedule(size, work, tile, _streams(k, tile, work),
                                        launch_threads(size, work)))


def _streams(k: Kernel, tile, work: int) -> bool:
    """Whether the kernel's stores bypass the caches (see STREAM_BYTES): a parallel 1-D
    launch storing at regular indices that moves more than the last-level cache holds."""
    if tile is not None or work < 0 or len(k.space) != 1 or not k.stores or k.sort:
        return False
    moved = sum((a.extent[1] - a.extent[0] + 1) * a.dtype.itemsize for a in k.args
                if a.kind == "buffer" and isinstance(a.extent, tuple))
    return moved > STREAM_BYTES


# ---- reduction splitting -------------------------------------------------------------------
def _split(plan, k: Kernel, chunk: int) -> list:
    r = k.reduction
    if r is None or r.scan or r.chunk or r.op in (Op.ARGMAX, Op.ARGMIN) or k.prelude or \
            ordered_product(r):
        return [k]
    nspace = len(k.space)
    rsize = int(np.prod(k.rspace, dtype=np.int64))
    # a reduction carrying sibling stores (fuse) does a map's work per element: split it as
    # soon as there are two chunks, so that work runs on every thread as the map's did
    if k.size >= SPLIT_MAX_OUTPUTS or rsize < (1 if k.stores else 2) * chunk + 1:
        return [k]
    nchunks = -(-rsize // chunk)
    acc = accumulator_dtype(r.op, r.value.dtype)
    partial_shape = tuple(k.space) + (nchunks,)
    partial = plan.add_temp(acc, partial_shape)
    # partial kernel: loop dims kept..., chunk, then the reduced dims (shifted up by one)
    shifted = substitute(k, partial_shape, k.rspace,
                         lambda d: Index.loop(d + 1 if d >= nspace else d))
    args = list(shifted.args)
    args[r.arg] = KernelArg("buffer", acc, partial.id, 0, True)
    first = Kernel(partial_shape, tuple(k.rspace), args, list(shifted.stores), None,
                   k.label + " partial", shifted.status, list(shifted.checks))
    first.reduction = Reduction(r.op, shifted.reduction.value, r.arg,
                                address(partial.strides, idents(nspace + 1)), chunk, r.acc)
    first = coalesce(first)
    set_extents(first)
    # combine kernel: fold the partials of every output in chunk order (and apply the
    # epilogue, if any, to the combined result)
    out_arg = k.args[r.arg]
    second = Kernel(tuple(k.space), (nchunks,),
                    [KernelArg("buffer", acc, partial.id), KernelArg("buffer", out_arg.dtype,
                                                                  out_arg.buffer, 0, True)],
                    label=k.label + " combine")
    loads = Load(0, np.dtype(acc), address(partial.strides, idents(nspace + 1)))
    second.reduction = Reduction(_COMBINE[r.op], loads, 1, r.index, 0, acc, then=r.then)
    second = coalesce(second)
    set_extents(second)
    return [first, second]


# ---- tiling ---------------------------------------------------------------------------------
def _tiling(k: Kernel):
    r = k.reduction
    if (r is None or r.chunk or not k.rspace or not k.space or r.op in (Op.ARGMAX, Op.ARGMIN)
            or k.stores or k.prelude):
        return None
    if r.acc_dtype.kind == "b":
        # any/all keep the inner loop order: LLVM 22 miscompiles the vectorised tile of byte
        # flags (np.any(x / x, axis=0) on (7, 12) lost its last column)
        return None
    j = len(k.space) - 1                      # innermost output dim
    inner_r = len(k.sizes()) - 1              # innermost reduction dim
    loads = [e for e in walk([r.value]) if isinstance(e, Load)]
    if not loads or r.index.coef(Loop(j)) != 1:
        return None
    strided_inner = any(abs(e.index.coef(Loop(inner_r))) > 1 for e in loads)
    tile_ok = all(abs(e.index.coef(Loop(j))) <= 1 and e.index.is_affine for e in loads)
    if not (strided_inner and tile_ok):
        return None
    rows = 1
    if len(k.space) >= 2:
        m = len(k.space) - 2
        shared = any(e.index.coef(Loop(m)) == 0 and e.index.coef(Loop(j)) != 0 for e in loads)
        rows = TILE_ROWS if shared else 1
    return (rows, TILE_COLUMNS)


def _tiled_launch_size(space, tile) -> int:
    """Launch indices of a tiled reduction: outer dims x row blocks x column tiles."""
    space = tuple(space)
    rows = space[-2] if len(space) >= 2 else 1
    outer = int(np.prod(space[:-2], dtype=np.int64)) if len(space) >= 2 else 1
    return outer * -(-rows // tile[0]) * -(-space[-1] // tile[1])


# ---- threading ------------------------------------------------------------------------------
# The cost model, measured with bench/pool_cost.py on a quiet 2-core AMD EPYC (AVX-512):
# a launch's serial time is about launch size x work per index x NS_PER_WORK (0.019-0.023 ns
# for vectorised arithmetic, 0.025-0.05 where math functions dominate: the lower figure, so a
# launch is split only when even the cheapest reading of its work pays for it), and splitting
# it over the pool costs about SPLIT_NS (0.2-0.9 us measured from 2048 to 65536 elements:
# the job handed to a spinning worker, the chunks claimed, the join).  A launch is split over
# t threads when each gets at least THREAD_NS of the estimate, so that the split saves at
# least three times what it costs (and still pays when a loaded machine makes it dearer);
# below 2 * THREAD_NS (~4.8 us: the 14-op chain at ~14000 elements) it runs on the caller.
NS_PER_WORK = 0.02
SPLIT_NS = 600
THREAD_NS = 4 * SPLIT_NS
MAX_THREADS = 256            # the runtime's pool limit (csrc/runtime.c MAX_WORKERS)


def launch_threads(size: int, work_per_item: int) -> int:
    """The threads a launch of `size` indices of `work_per_item` each is worth (1: serial)."""
    if work_per_item < 0 or size < 2:
        return 1
    estimate = size * max(work_per_item, 1) * NS_PER_WORK
    return int(max(1, min(MAX_THREADS, size, estimate // THREAD_NS)))


def _work_per_item(k: Kernel, tile) -> int:
    """Estimated cost of one launch index (inner iterations x operations per iteration):
    the interpreter splits a launch over threads above a threshold of total work."""
    if k.ordered_stores:
        return -1
    r = max(1, int(np.prod(k.rspace, dtype=np.int64)))
    if tile is not None:
        r *= tile[0] * tile[1]
    elif k.reduction is not None and k.reduction.chunk:
        r = k.reduction.chunk
    return r * k.cost_per_iteration()

