"""Dispatch does not scan the cache: the most recent entry is tried first, then one hash
table probe (bench/dispatch_entries.py measures the cost with 1 and 1000 entries)."""
from __future__ import annotations

import numpy as np

import fastlaunch as fl
from fastlaunch import _core


def _filled(n_entries: int):
    """A compiled function with one traced entry (16 float64 elements) and n_entries - 1
    entries for other shapes that share its executable (installed without tracing)."""
    f = fl.compile(lambda a, b: a * b + 1.0)
    f.max_entries = n_entries + 8
    a, b = np.ones(16), np.full(16, 2.0)
    f(a, b)
    traced = f._entries_list()[0]
    for k in range(n_entries - 1):
        x = np.ones(100 + k)
        f._install(_core.Entry(_core.encode((x, x), ())[0], [], [], traced.executable,
                               traced.info))
    return f, traced, a, b


def test_a_thousand_shapes_hash_to_a_thousand_buckets():
    f, _, _, _ = _filled(1000)
    entries = f._entries_list()
    assert len(entries) == 1000
    assert len({e.key for e in entries}) == 1000       # one entry per bucket: one compare


def test_lookup_finds_any_entry_without_tracing():
    f, traced, a, b = _filled(1000)
    x = np.ones(600)                       # an older entry: the MRU slot misses, the table hits
    found = {}
    f._miss = lambda args, kwargs: found.setdefault("miss", args)    # would trace
    out = f(a, b)                          # the traced entry (no longer the most recent)
    np.testing.assert_array_equal(out, a * b + 1.0)
    out = f(a, b)                          # now through the most-recent slot
    np.testing.assert_array_equal(out, a * b + 1.0)
    assert "miss" not in found
    f(x, x)        # an installed entry with a 16-element program: found in the table
    assert "miss" not in found
    f(np.ones(5), np.ones(5))              # a shape never seen: the slow path
    assert found["miss"][0].shape == (5,)
