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
