"""Interpreter and runtime properties: vector code, parallel determinism, concurrency, memory."""
import os
import threading

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core
from fastlaunch.ir import fuse
from fastlaunch.__main__ import step
from fastlaunch.backends import get_backend
from fastlaunch.ir.graph import Graph, Op

HOST = get_backend("cpu")


def _map_kernel(dtype):
    g = Graph()
    x = g.add(Op.ARG, dtype, (4096,), position=0)
    y = g.add(Op.ARG, dtype, (4096,), position=1)
    g.outputs.append(g.add(Op.ADD, dtype, (4096,), (g.add(Op.MUL, dtype, (4096,), (x, y)), y)))
    return fuse.plan(g, {0: (1,), 1: (1,)}).kernels[0]


@pytest.mark.skipif("+avx2" not in HOST.features.split(","), reason="host has no AVX2")
def test_float32_elementwise_kernel_uses_vector_registers():
    asm = HOST.assembly(_map_kernel(np.float32))
    assert "ymm" in asm or "zmm" in asm


@pytest.mark.skipif("+avx2" not in HOST.features.split(","), reason="host has no AVX2")
def test_transcendental_kernel_calls_vector_math():
    g = Graph()
    x = g.add(Op.ARG, np.float32, (4096,), position=0)
    g.outputs.append(g.add(Op.EXP, np.float32, (4096,), (x,)))
    kernel = fuse.plan(g, {0: (1,)}).kernels[0]
    # the libm mode (FASTLAUNCH_MATH=libm) calls glibc's libmvec, several lanes per call
    from fastlaunch.backends.cpu import CPUBackend
    libm = CPUBackend(cache_dir=None, math="libm")
    if libm.math.available:
        assert "_ZGV" in libm.assembly(kernel)
    # the default inline mode (codegen/vmath.py) calls nothing for exp
    if HOST.math.inline:
        assert "_ZGV" not in HOST.assembly(kernel) and "expf" not in HOST.assembly(kernel)


class threads:
    """Run with the worker pool at `n` threads and parallel launches forced on."""

    def __init__(self, n, threshold=1024):
        self.n, self.threshold = n, threshold

    def __enter__(self):
        self.saved = _core.get_parallel_threshold()
        _core.stop_threads()
        _core.start_threads(self.n)
        _core.set_parallel_threshold(self.threshold)

    def __exit__(self, *exc):
        _core.set_parallel_threshold(self.saved)
        _core.stop_threads()
        _core.start_threads(0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parallel_reductions_are_deterministic(dtype):
    x = np.random.default_rng(0).standard_normal(3_000_001).astype(dtype)
    y = np.random.default_rng(1).standard_normal((2000, 1501)).astype(dtype)
    f = fl.compile(lambda x, y: (x.sum(), np.sum(x * x), x.max(), y.sum(axis=0), y.mean(axis=1)))
    with threads(1):
        one = f(x, y)
    with threads(4):
        many = [f(x, y) for _ in range(3)]
    for run in many:
        for a, b in zip(one, run):
            assert np.array_equal(a, b), "result depends on the number of threads"
    np.testing.assert_allclose(one[0], x.astype(np.float64).sum(), rtol=1e-6)
    # a column sum accumulates in float64 (float32's too), rounded once to the dtype: within
    # n u64 sum|y| + u |s| of the exact sum, as the float64 reference within n u64 sum|y|
    ref = y.astype(np.float64).sum(axis=0)
    bound = 2 * y.shape[0] * np.finfo(np.float64).eps / 2 * np.abs(y.astype(np.float64)).sum(axis=0) \
        + np.finfo(dtype).eps / 2 * np.abs(ref)
    assert np.all(np.abs(one[3] - ref) <= bound)


def test_parallel_map_matches_serial():
    x = np.random.default_rng(2).standard_normal(1_000_003).astype(np.float32)
    f = fl.compile(lambda x: np.tanh(x) * 2 + np.exp(-x * x))
    with threads(1):
        one = f(x)
    with threads(3):
        three = f(x)
    assert np.array_equal(one, three)


CALLS = 10_000 if os.environ.get("FASTLAUNCH_LONG") else 300


def test_two_threads_on_distinct_inputs_match_one_thread():
    n = 1_000_000 if os.environ.get("FASTLAUNCH_LONG") else 100_000
    f = fl.compile(step)
    rng = np.random.default_rng(3)
    inputs = [[rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
               rng.random(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)]
              for _ in range(2)]
    want = [f(*a, 1e-2) for a in inputs]
    errors = []
    barrier = threading.Barrier(2)

    def worker(k):
        try:
            barrier.wait()
            for _ in range(CALLS):
                got = f(*inputs[k], 1e-2)
                for w, g in zip(want[k], got):
                    if not np.array_equal(w, g):
                        errors.append(f"thread {k}: result differs")
                        return
        except Exception as err:        # pragma: no cover - reported below
            errors.append(repr(err))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in ts), "deadlock"
    assert not errors, errors


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_replays_do_not_grow_memory():
    total = 200_000 if os.environ.get("FASTLAUNCH_LONG") else 20_000
    n = 16
    f = fl.compile(step)
    rng = np.random.default_rng(4)
    a = [rng.standard_normal(n).astype(np.float32) for _ in range(4)]
    for _ in range(1000):
        f(*a, 1e-2)
    before = _rss_bytes()
    for _ in range(total):
        f(*a, 1e-2)
    grown = _rss_bytes() - before
    assert grown < 5 << 20, f"RSS grew by {grown / 1e6:.1f} MB over {total} replays"
    assert _core.memory_stats()["live_bytes"] == 0     # every temporary went back to the pool


def test_temporaries_are_reused_from_the_pool():
    f = fl.compile(lambda x: x / x.sum())
    x = np.random.rand(1 << 18)
    f(x)
    cached = _core.memory_stats()["cached_bytes"]
    for _ in range(50):
        f(x)
    assert _core.memory_stats()["cached_bytes"] == cached
    assert _core.memory_stats()["live_bytes"] == 0


HAMMER = """
import numpy as np, fastlaunch as fl
from fastlaunch import _core
_core.set_parallel_threshold(1024)
f = fl.compile(lambda x: np.sqrt(np.abs(x * 1.5 + 0.5)))
g = fl.compile(lambda x: x / np.sqrt(np.sum(x * x)))
x = np.ones(65536, np.float32)
want_f, want_g = f(x), g(x)
for _ in range(CALLS):
    assert np.array_equal(f(x), want_f) and np.array_equal(g(x), want_g)
print("ok")
"""


def test_back_to_back_parallel_launches_never_hang():
    """Regression: a worker waking late for one launch could run the next, half-written one
    and lose its completion count, hanging the launcher."""
    import subprocess
    import sys
    calls = 200_000 if os.environ.get("FASTLAUNCH_LONG") else 30_000
    done = subprocess.run([sys.executable, "-c", HAMMER.replace("CALLS", str(calls))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_large_outputs_come_from_the_pool_and_go_back_when_dropped():
    f = fl.compile(lambda x: x * 2)
    x = np.ones(1 << 18)                       # 2 MB results: pooled
    a = f(x)
    live = _core.memory_stats()["live_bytes"]
    assert live >= a.nbytes
    b = f(x)
    assert not np.shares_memory(a, b)         # fresh for the caller, never recycled under it
    view = a[::2]
    del a
    assert _core.memory_stats()["live_bytes"] >= 2 * b.nbytes     # the view keeps a's block
    del view
    del b
    assert _core.memory_stats()["live_bytes"] == 0
    np.testing.assert_array_equal(f(x), 2 * x)


@pytest.mark.skipif("+avx2" not in HOST.features.split(","), reason="host has no AVX2")
def test_kernel_entry_aligns_its_frame_for_vector_spills():
    # the step's partial kernel calls libmvec (sin, cos) in the default mode, so vector
    # registers are spilled around the calls; a 16-byte aligned frame would split them across
    # cache lines in most processes (measured: the step 1.4-4x slower there)
    p = np.ones(4096, np.float32)
    kernels = [k for k in fl.compile(step).lower(p, p, p, p, 1e-2).plan.kernels
               if hasattr(k, "stores")]
    assert kernels
    for k in kernels:
        asm = HOST.assembly(k)
        spills = [ln for ln in asm.split("\n") if "(%rsp)" in ln and
                  ("ymm" in ln or "zmm" in ln) and ln.strip().startswith("vmov")]
        assert not [ln for ln in spills if "vmovups" in ln or "vmovupd" in ln or
                    "vmovdqu" in ln], spills[:5]
        if spills:
            assert "andq\t$-64, %rsp" in asm or "andq\t$-32, %rsp" in asm
