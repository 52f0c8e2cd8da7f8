"""Loaded kernels live as long as something may call them, and no longer.

Each kernel's machine code sits in an MCJIT engine of its own (backends/cpu.py KernelCode),
held by the CompiledKernels of the executables that call it.  Dropping cache entries (the
dispatcher's LRU, `clear()`) unloads the kernels nothing else uses; kernels shared with other
compiled functions stay loaded.  The tests that call kernels after such drops run in a child
process: an engine freed too early would be a crash.
"""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch.backends import cpu, get_backend

pytestmark = pytest.mark.skipif(get_backend().name != "cpu",
                                reason="the CPU backend's code loading")


def run_child(code: str, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"child exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "OK" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


def _code_refs(f) -> list:
    return [weakref.ref(k.owner) for e in f._entries_list() for k in e.info.kernels]


@pytest.fixture
def no_recent(monkeypatch):
    """The memory cache keeps no extra kernels loaded: only their users keep them."""
    monkeypatch.setattr(cpu, "KEEP_RECENT", 0)
    get_backend("cpu").release()


def test_clear_unloads_the_kernels(no_recent):
    be = get_backend("cpu")
    f = fl.compile(lambda x: (np.sin(x) * 3.25).sum(axis=0) + 0.125)   # a kernel per shape
    for n in range(3, 13):
        f(np.ones((n, 2)))
    refs = _code_refs(f)
    engines = len({id(r()) for r in refs})
    assert engines >= 10
    disposed = be.engines_disposed
    f.clear()
    assert all(r() is None for r in refs)              # no cycle holds them: freed at once
    assert be.engines_disposed - disposed >= engines
    x = np.ones((4, 2))
    np.testing.assert_allclose(f(x), (np.sin(x) * 3.25).sum(axis=0) + 0.125)


def test_lru_drops_entries_and_their_kernels(no_recent):
    f = fl.compile(lambda x: (np.cos(x) * 1.75).sum(axis=0) - 0.5)    # a kernel per shape
    f.max_entries = 4
    f(np.ones((3, 2)))
    first = _code_refs(f)
    for n in range(4, 12):
        f(np.ones((n, 2)))
    assert len(f._entries_list()) == 4
    used = {id(k.owner) for e in f._entries_list() for k in e.info.kernels}
    alive = {id(r()) for r in first if r() is not None}
    assert alive <= used and len(alive) < len(first)   # only the kernels still in use stay
    assert f.stats["traces"] == 9
    for n in range(8, 12):                              # the 4 most recent: no re-trace
        x = np.ones((n, 2))
        np.testing.assert_allclose(f(x), (np.cos(x) * 1.75).sum(axis=0) - 0.5)
    assert f.stats["traces"] == 9


def test_trace_history_is_bounded(monkeypatch):
    """A process that meets ever new shapes keeps the reasons of the last TRACE_HISTORY
    traces only; the counts still cover every trace."""
    from fastlaunch import jit
    monkeypatch.setattr(jit, "TRACE_HISTORY", 3)
    f = fl.compile(lambda x: x + 1.0, dynamic=False)      # every new size traces
    for n in range(1, 7):
        f(np.ones(n))
    assert [t.signature for t in f.stats["history"]] == \
        [f"(float64[{n}])" for n in (4, 5, 6)]
    assert f.stats["traces"] == 6 and f.stats["trace_seconds"] > 0
    f.clear()
    assert f.stats["traces"] == 0 and not f.traces


def test_max_entries_is_checked():
    from fastlaunch import _core
    with pytest.raises(ValueError, match="max_entries"):
        _core.Dispatcher((), True, 0)


def test_memory_cache_reuses_live_kernels_and_forgets_dead_ones(no_recent):
    be = get_backend("cpu")
    body = lambda x: np.tanh(x) * 0.3125 + 2.5     # noqa: E731
    f, g = fl.compile(body), fl.compile(body)
    x = np.ones(21)
    f(x)
    g(x)
    kf = f._entries_list()[0].info.kernels
    kg = g._entries_list()[0].info.kernels
    assert [k.origin for k in kg] == ["memory"] * len(kg)
    assert all(a.owner is b.owner for a, b in zip(kf, kg))       # one engine, two users
    n_kernels = len(kg)
    del kf, kg
    refs = _code_refs(f)
    f.clear()
    assert all(r() is not None for r in refs)                   # g still uses them
    g.clear()
    gc.collect()
    assert all(r() is None for r in refs)
    h = fl.compile(body)
    h(x)
    assert [k.origin for k in h._entries_list()[0].info.kernels] == ["disk"] * n_kernels
    assert be.loaded_kernels >= n_kernels


def test_dropped_and_cleared_functions_never_free_shared_code():
    """f and g share kernels; f drops (LRU) and clears its entries, the backend disposes of
    every engine no one uses, then g calls every shape it traced: the code it calls must
    still be loaded (a use-after-free would crash the child)."""
    run_child("""
        import gc, threading
        import numpy as np
        import fastlaunch as fl
        from fastlaunch.backends import cpu, get_backend
        cpu.KEEP_RECENT = 0
        be = get_backend("cpu")
        body = lambda x, y: (np.exp(x) * y + 0.75, (x - y).sum())
        f, g = fl.compile(body), fl.compile(body)
        f.max_entries = 3
        shapes = [(n,) for n in range(5, 25)] + [(4, n) for n in range(3, 9)]
        args = [(np.linspace(0, 1, int(np.prod(s))).reshape(s), np.full(s, 0.5)) for s in shapes]
        for x, y in args:
            g(x, y)
        for x, y in args:
            f(x, y)                        # shares g's kernels; drops its own older entries
        assert len(f._entries_list()) == 3
        f.clear()
        del f
        gc.collect()
        be.release()
        stop, done = [], [0]
        def hammer():                      # compile and drop other kernels meanwhile
            h = fl.compile(lambda x: (np.sin(x) * 1.5).sum())
            h.max_entries = 2
            n = 3
            while not stop:
                h(np.ones(n)); n += 1; done[0] += 1
                if n > 40:
                    h.clear(); n = 3
        t = threading.Thread(target=hammer)
        t.start()
        try:
            rounds = 0
            # at least 3 rounds, and until the hammer has dropped kernels (a slow compile
            # under load must not leave nothing disposed by the end)
            while rounds < 3 or (done[0] < 8 and rounds < 100000):
                rounds += 1
                for x, y in args:
                    r, s = g(x, y)
                    np.testing.assert_allclose(r, np.exp(x) * y + 0.75, rtol=1e-12)
                    np.testing.assert_allclose(s, (x - y).sum(), rtol=1e-12, atol=1e-12)
                be.release()
        finally:
            stop.append(1)
            t.join()
        assert be.engines_disposed > 0
        print("OK")
    """)
