"""How CUDA kernels are launched, checked without a GPU (issue 25, "Launches"):

  * the block each kernel runs with is chosen at load time from the loaded code's limits
    (`cuda_schedule.launch_block`, fed by `cuFuncGetAttribute` through `_cuda.kernel_limits`):
    the decision function, the backend's link step with the driver calls stood in for, and
    the PTX's block declarations (.maxntid, .reqntid for a block reduction);
  * scatters whose result cannot depend on the order run on every thread with atomics
    (`cuda_schedule.order_free`), the rest on one thread: the decisions, the PTX's atomics,
    ptxas accepting them; results against NumPy on devsim (and, with the GPU's own code, in
    tests/unit/test_cuda_hostsim.py);
  * a long row's radix sort keeps its local memory per thread bounded: `ptxas -v`'s stack
    frame of the sort kernels.
"""
import dataclasses
import re
import subprocess

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.backends import cuda as cuda_backend
from fastlaunch.backends import cuda_schedule
from fastlaunch.backends.cuda_schedule import LaunchLimitError, launch_block, order_free
from fastlaunch.errors import CUDAError
from fastlaunch.ir.kernel import Index, Kernel, KernelArg, Load, Pick, Store

from test_cuda_offline import _arch_backend, needs_libdevice, needs_ptxas


def _plan(fn, *args):
    return fl.compile(fn, backend="cuda").lower(*args).plan


def _add_at(a, i, v):
    np.add.at(a, i, v)


def _max_at(a, i, v):
    np.maximum.at(a, i, v)


def _iadd(x, idx, v):
    x[idx] += v


def _set_rows(x, idx, v):
    x[idx] = v


def _set_const(x, idx):
    x[idx] = -1


I3 = np.array([1, 1, 2])


# ---- the block -------------------------------------------------------------------------------
def test_launch_block_keeps_the_scheduled_block_where_it_fits():
    for kind in ("map", "atomic", "thread_reduce", "block_reduce"):
        assert launch_block(kind, 256, 1024) == 256
        assert launch_block(kind, 256, 256) == 256
    assert launch_block("serial", 1, 1) == 1


def test_launch_block_lowers_a_grid_stride_block_to_whole_warps():
    assert launch_block("map", 256, 200) == 192
    assert launch_block("thread_reduce", 256, 255) == 224
    assert launch_block("atomic", 256, 32) == 32
    assert launch_block("map", 256, 20) == 20          # under a warp: what the code allows


def test_launch_block_refuses_what_cannot_run():
    with pytest.raises(LaunchLimitError, match="built for 256 threads.*at most 128"):
        launch_block("block_reduce", 256, 128)
    with pytest.raises(LaunchLimitError, match="0 threads per block"):
        launch_block("map", 256, 0)
    with pytest.raises(LaunchLimitError, match="local memory"):
        launch_block("map", 256, 1024, local_bytes=cuda_schedule.MAX_LOCAL_BYTES + 1)


@needs_ptxas
@needs_libdevice
def test_ptx_declares_each_kernels_block():
    backend = _arch_backend("sm_80")
    plan = _plan(lambda a: (a + 1, a.sum()), np.ones(1 << 20, np.float32))
    texts = {k.schedule.kind: backend.compile(k).source for k in plan.kernels}
    assert re.search(r"\.maxntid 256\b", texts["map"])
    assert re.search(r"\.reqntid 256\b", texts["block_reduce"])      # the tree's exact size
    serial = _plan(_add_at, np.zeros(10), I3, np.ones(3)).kernels[-1]
    assert re.search(r"\.maxntid 1\b", backend.compile(serial).source)


@needs_ptxas
@needs_libdevice
def test_link_chooses_each_block_from_the_loaded_kernels_limits(monkeypatch):
    """The backend's link step with the driver stood in for: a grid-stride kernel whose code
    allows 160 threads gets 160; a block reduction allowing fewer than its tree is refused
    with a CUDAError naming the kernel and the numbers."""
    _cuda = pytest.importorskip("fastlaunch._cuda")
    backend = _arch_backend("sm_80")
    made = {}

    class Executable:
        def __init__(self, layout, functions, launch, nargs, consts, why=None):
            made["launch"] = launch

    lowered = {name: fl.compile(fn, backend="cuda").lower(*args) for name, fn, args in [
        ("map", lambda a: a * 2, [np.ones(10_000)]),
        ("sum", lambda a: a.sum(), [np.ones(1 << 16, np.float32)])]}
    compiled = {name: [backend.compile(k) for k in lo.plan.kernels]
                for name, lo in lowered.items()}
    monkeypatch.setattr(_cuda, "driver_error", lambda *a: None)
    monkeypatch.setattr(_cuda, "load_kernel", lambda name, image: 1)
    monkeypatch.setattr(_cuda, "CUDAExecutable", Executable)

    @dataclasses.dataclass
    class Layout:                 # what backend.link reads of an ExecutableLayout
        program: object
        const_ptrs: list = dataclasses.field(default_factory=list)

    def run(name, max_threads):
        monkeypatch.setattr(_cuda, "kernel_limits", lambda f: {
            "max_threads": max_threads, "regs": 99, "local_bytes": 0, "shared_bytes": 0})
        backend.link(Layout(lowered[name].program), compiled[name])
        return ([b for _, b in made["launch"]],
                [k.schedule.kind for k in lowered[name].plan.kernels])

    blocks, kinds = run("map", 160)
    assert kinds == ["map"] and blocks == [160]
    blocks, _ = run("map", 1024)
    assert blocks == [256]
    with pytest.raises(CUDAError, match=r"kernel sum partial \(fl_\w+\) cannot run on this device: "
                                        r"its block reduction is built for 256.*at most 128"
                                        r".*99 registers") as e:
        run("sum", 128)
    assert e.value.name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"


# ---- scatters --------------------------------------------------------------------------------
@pytest.mark.parametrize("fn,args,free", [
    (_add_at, [np.zeros(10, np.int32), I3, np.ones(3, np.int32)], True),
    (_add_at, [np.zeros(10, np.uint8), I3, np.ones(3, np.uint8)], True),
    (_add_at, [np.zeros(10, bool), I3, np.ones(3, bool)], True),
    (_max_at, [np.zeros(10, np.int64), I3, np.ones(3, np.int64)], True),
    (lambda x: np.bincount(x, minlength=5), [I3], True),
    (_set_const, [np.zeros(10, np.int16), I3], True),
    # float scatter-add: NumPy adds in index order; atomics would not (nor the same twice)
    (_add_at, [np.zeros(10), I3, np.ones(3)], False),
    (_add_at, [np.zeros(10, np.float32), I3, np.ones(3, np.float32)], False),
    (_max_at, [np.zeros(10), I3, np.ones(3)], False),         # -0.0 against 0.0, NaNs
    (_iadd, [np.zeros(10, np.int64), I3, np.ones(3, np.int64)], False),   # last write wins
    (_set_rows, [np.zeros(10, np.int64), I3, np.arange(3)], False),
])
def test_order_free_scatters(fn, args, free):
    ks = [k for k in _plan(fn, *args).kernels if k.ordered_stores]
    assert ks and all(order_free(k) == free for k in ks)
    assert {k.schedule.kind for k in ks} == {"atomic" if free else "serial"}


def test_a_scatter_that_reads_what_it_writes_is_not_order_free():
    i64 = np.dtype(np.int64)
    pick = Pick(Load(0, i64, Index.loop(0)), 10, False)
    k = Kernel((3,), (), [KernelArg("buffer", i64, 7, 2), KernelArg("buffer", i64, 8, 9, True)],
               [Store(1, Index(0, ((pick, 1),)), Load(1, i64, Index(0)), "add")],
               label="scatter-add")
    assert not order_free(k)
    k.stores = [Store(1, k.stores[0].index, Load(0, i64, Index.loop(0)), "add")]
    assert order_free(k)
    k.stores.append(Store(1, k.stores[0].index, Load(0, i64, Index.loop(0)), "max"))
    assert not order_free(k)                        # two modes on one buffer


@needs_ptxas
@needs_libdevice
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_of_scatters_has_atomics_where_order_free_and_assembles(arch):
    backend = _arch_backend(arch)

    def ptx(fn, *args):
        k = [k for k in _plan(fn, *args).kernels if k.ordered_stores][-1]
        ck = backend.compile(k)
        assert ck.obj[:4] == b"\x7fELF", "ptxas made no cubin"
        return ck.source

    assert re.search(r"atom\.global\.add\.u32", ptx(_add_at, np.zeros(10, np.int32), I3,
                                                    np.ones(3, np.int32)))
    assert re.search(r"atom\.global\.add\.u64", ptx(lambda x: np.bincount(x, minlength=5), I3))
    assert re.search(r"atom\.global\.max\.s64", ptx(_max_at, np.zeros(10, np.int64), I3,
                                                    np.ones(3, np.int64)))
    # a byte-sized add: a compare-and-swap loop on its 32-bit word
    assert re.search(r"atom\.\w*\.?\w*\.?global\.cas\.b32",
                     ptx(_add_at, np.zeros(10, np.int8), I3, np.ones(3, np.int8)))
    # float scatter-add: one thread, a plain load-add-store (only the status word's atomic or)
    text = ptx(_add_at, np.zeros(10), I3, np.ones(3))
    assert re.findall(r"atom\.[\w.]+", text) == ["atom.global.or.b64"]


_DEVSIM_CASES = {
    "add_at_int32": (_add_at, lambda r: [r.integers(-50, 50, 30).astype(np.int32),
                                         r.integers(-30, 30, 500),
                                         r.integers(-9, 9, 500).astype(np.int32)]),
    "add_at_uint8_wraps": (_add_at, lambda r: [r.integers(0, 255, 30).astype(np.uint8),
                                               r.integers(0, 30, 500),
                                               r.integers(0, 255, 500).astype(np.uint8)]),
    "iadd_repeated": (_iadd, lambda r: [r.integers(0, 9, 30), r.integers(0, 30, 200),
                                        r.integers(0, 9, 200)]),
    "max_at_int16": (_max_at, lambda r: [r.integers(-99, 99, 30).astype(np.int16),
                                         r.integers(0, 30, 200),
                                         r.integers(-999, 999, 200).astype(np.int16)]),
    "bincount": (lambda x: np.bincount(x, minlength=40), lambda r: [r.integers(0, 40, 1000)]),
    "set_const": (_set_const, lambda r: [r.integers(0, 9, 30), r.integers(0, 30, 50)]),
    "sort_long_rows": (lambda a: np.sort(a, axis=-1),
                       lambda r: [r.standard_normal((4, 300))]),
    "argsort_stable": (lambda a: np.argsort(a, axis=-1, kind="stable"),
                       lambda r: [r.integers(0, 9, (3, 100)).astype(np.float32)]),
}


@pytest.mark.parametrize("name", list(_DEVSIM_CASES))
def test_scatters_and_sorts_on_devsim_give_numpys_results(name):
    fn, make = _DEVSIM_CASES[name]
    f = fl.compile(fn, backend="devsim")
    for seed in (1, 2, 3):                      # the replays too, on fresh values
        args = make(np.random.default_rng(seed))
        mine = [a.copy() for a in args]
        want, got = fn(*args), f(*mine)
        if want is not None:
            np.testing.assert_array_equal(got, want)
        for a, b in zip(args, mine):
            np.testing.assert_array_equal(b, a)


# ---- sort's local memory ---------------------------------------------------------------------
@needs_ptxas
@needs_libdevice
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float32, np.uint16])
def test_sort_local_memory_per_thread_is_bounded(arch, dtype, tmp_path):
    """ptxas -v's stack frame (local memory per thread) of long rows' radix sorts: bounded by
    one 16-counter histogram and a few spills (it was 8 KB for 64-bit keys: every pass's
    256-counter histogram)."""
    backend = _arch_backend(arch)
    for fn in (lambda a: np.sort(a, axis=-1),
               lambda a: np.argsort(a, axis=-1, kind="stable")):
        for k in _plan(fn, np.ones((3, 5000), dtype)).kernels:
            if k.sort is None:
                continue
            path = tmp_path / "k.ptx"
            path.write_text(backend.compile(k).source)
            r = subprocess.run([cuda_backend.find_ptxas(), f"-arch={arch}", "-v", str(path),
                                "-o", str(tmp_path / "k.cubin")], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            frame = [int(m) for m in re.findall(r"(\d+) bytes stack frame", r.stderr)]
            assert frame and max(frame) <= 256, r.stderr
