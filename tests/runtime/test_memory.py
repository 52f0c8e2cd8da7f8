"""A long-running process that meets ever new shapes keeps bounded memory, and clear() gives
it back: kernels are unloaded with the last entry that uses them (bench/memory_shapes.py
measures the resident set size in a child process)."""
from __future__ import annotations

import os
import sys

import pytest

from fastlaunch.backends import get_backend

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
from memory_shapes import measure  # noqa: E402

pytestmark = pytest.mark.skipif(get_backend().name != "cpu",
                                reason="the CPU backend's code loading")


def test_200_shapes_cost_bounded_memory_and_clear_returns_it():
    """At most 64 entries: 200 shapes (each with new kernels) cost what 64 do, and clear()
    gives that back."""
    r = measure(200, warmup=50, max_entries=64)
    assert r["entries_at_peak"] == 64
    assert r["peak_mb"] - r["start_mb"] < 15, r
    assert r["after_clear_mb"] - r["start_mb"] < 10, r
    assert r["loaded_kernels_after"] < 100, r


@pytest.mark.slow
def test_clear_returns_the_memory_of_1000_shapes():
    r = measure(1000, warmup=300, base=20000)
    assert r["after_clear_mb"] - r["start_mb"] < 10, r


_COMPILE_MANY = r"""
import ctypes, gc, os, sys
from fastlaunch.backends import get_backend
page = os.sysconf("SC_PAGE_SIZE")
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page / 2**20
be = get_backend("cpu")
src = '''define double @k{i}(double %x) {{
  %y = fmul double %x, {i}.0
  ret double %y
}}'''
for i in range(200):
    be.object_code(src.format(i=i))
gc.collect(); ctypes.CDLL(None).malloc_trim(0)
start = rss_mb()
for i in range(200, 2200):
    be.object_code(src.format(i=i))
gc.collect(); ctypes.CDLL(None).malloc_trim(0)
print(rss_mb() - start)
"""


@pytest.mark.slow          # 9 s; the mechanism: test_the_optimiser_renews_its_pass_builder_...
def test_compiling_many_kernels_keeps_native_memory_flat():
    """LLVM's optimiser runs with one pass builder for the backend's life: llvmlite loses
    ~1.4 KB of native memory per pass builder made (2000 kernels grew the process by
    ~2.8 MB, and clear() cannot give that back)."""
    import subprocess
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    out = subprocess.run([sys.executable, "-c", _COMPILE_MANY], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=os.path.abspath(root)), timeout=300,
                         check=True)
    grown = float(out.stdout.strip().splitlines()[-1])
    assert grown < 1.0, f"2000 kernel compilations grew the process by {grown:.2f} MB"


def test_the_optimiser_renews_its_pass_builder_every_so_many_kernels(monkeypatch):
    """Not one pass builder per kernel (each leaks), nor one for ever (each pipeline built
    from it leaves state behind: compiling got 3x slower over 1500 kernels)."""
    import llvmlite.binding as llvm
    from fastlaunch.backends.llvm_passes import RECYCLE_AFTER
    be = get_backend("cpu")
    made = []
    real = llvm.create_pass_builder
    monkeypatch.setattr(llvm, "create_pass_builder", lambda *a: made.append(a) or real(*a))
    for i in range(3 * RECYCLE_AFTER):
        be.object_code(f"define double @k{i}(double %x) {{\n  %y = fadd double %x, {i}.0\n"
                       f"  ret double %y\n}}")
    assert 2 <= len(made) <= 7       # one or two runs (O3, the always-inliner) a kernel
