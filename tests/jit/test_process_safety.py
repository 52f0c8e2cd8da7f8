"""Process-level safety: fork, Ctrl-C, environment variables, impossible shapes.

Each test failed (or hung) on the code before its fix; hang and signal cases run in a
subprocess with a timeout.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import fastlaunch as fl
from fastlaunch import _core, env

POSIX = pytest.mark.skipif(sys.platform != "linux", reason="fork and POSIX signals (Linux)")


def run_child(code: str, timeout: float = 180, **environ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **environ})


def check_child(proc: subprocess.CompletedProcess, marker: str):
    assert proc.returncode == 0 and marker in proc.stdout, \
        f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"


# ---- fork ----------------------------------------------------------------------------------
FORK_WHILE_REPLAYING = r"""
import os, sys, time, threading, signal
import multiprocessing as mp
import numpy as np
import fastlaunch as fl
from fastlaunch import _core

@fl.compile
def churn(x):                   # many small temporaries: the memory pool's lock, constantly
    for _ in range(40):
        x = x * 1.01 + x.sum()
    return x

@fl.compile(backend="cpu")      # the host worker pool is the CPU backend's
def wide(x):                    # launches large enough for the worker pool
    return np.sqrt(x * x + 1.0).sum() + np.sin(x)

small = np.linspace(0, 1, 8)
big = np.linspace(0, 1, 1 << 18)
expect_churn = churn(small)
wide(big)
stop = threading.Event()

def replay(f, x):
    while not stop.is_set():
        f(x)

def in_child():
    # a compiled call (pool memory), then a launch on the child's own, fresh worker pool
    y = np.linspace(0, 2, 1 << 18)
    return (np.array_equal(churn(small), expect_churn)
            and np.allclose(wide(y), np.sqrt(y * y + 1.0).sum() + np.sin(y))
            and _core.thread_count() == 4)

def mp_target():
    sys.exit(0 if in_child() else 3)

def wait(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"

threads = [threading.Thread(target=replay, args=(churn, small)) for _ in range(2)]
threads.append(threading.Thread(target=replay, args=(wide, big)))
for t in threads:
    t.start()
failure = None
ctx = mp.get_context("fork")
try:
    for i in range(FORKS):
        pid = os.fork()
        if pid == 0:
            os._exit(0 if in_child() else 3)
        r = wait(pid, 30)
        if r != 0:
            failure = f"os.fork child {i}: {r}"
            break
        if i % 8 == 0:
            p = ctx.Process(target=mp_target)
            p.start()
            p.join(30)
            if p.exitcode != 0:
                failure = f"multiprocessing child {i}: " + (
                    "hung" if p.exitcode is None else str(p.exitcode))
                p.kill()
                p.join()
                break
finally:
    stop.set()
    for t in threads:
        t.join()
print(failure or "forks ok")
"""


@POSIX
def test_fork_while_other_threads_replay():
    """Threads replay (one holding the memory pool's lock again and again, one running the
    worker pool) while the main thread forks, with os.fork and multiprocessing's fork
    context: every child runs compiled functions, starts its own worker pool, and exits.
    Before: the pool's lock stayed held in a child forked while another thread held it, and
    the child hung on its first allocation (about one fork in twenty)."""
    proc = run_child(FORK_WHILE_REPLAYING.replace("FORKS", "40"), timeout=400,
                     FASTLAUNCH_NUM_THREADS="4")
    check_child(proc, "forks ok")


@POSIX
def test_child_uses_its_own_pool_after_fork():
    """A fork after the pool started (and before it ever did): the child's large launches
    run on a fresh pool of the configured size, its pool memory works, and results match."""
    proc = run_child(r"""
        import os, numpy as np, fastlaunch as fl
        from fastlaunch import _core
        f = fl.compile(lambda x: np.exp(-x * x).sum() + np.cos(x), backend="cpu")
        x = np.linspace(-3, 3, 1 << 19)
        expect = np.exp(-x * x).sum() + np.cos(x)

        def fork_and_check(label):
            pid = os.fork()
            if pid == 0:
                ok = np.allclose(f(x), expect) and _core.thread_count() == 3
                ok = ok and _core.memory_stats()["live_bytes"] >= 0
                os._exit(0 if ok else 3)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, label

        _core.set_parallel_threshold(1 << 40)   # no pool yet: the first calls run serially
        f(x)
        assert _core.thread_count() == 0
        _core.set_parallel_threshold(131072)
        fork_and_check("before the parent's pool started")
        f(x)
        assert _core.thread_count() == 3
        fork_and_check("after the parent's pool started")
        print("pool ok")
    """, timeout=120, FASTLAUNCH_NUM_THREADS="3")
    check_child(proc, "pool ok")


FORK_WHILE_A_LOCK_IS_HELD = r"""
import os, pickle, signal, sys, threading, time
import numpy as np
import fastlaunch as fl
from fastlaunch.ir import adjoint
from fastlaunch import backends, jit
from fastlaunch.frontend.numpy import trace_buffers as creation
from fastlaunch.frontend import pytree, trace
from fastlaunch.backends import get_backend, library
import llvmlite.binding
iterate = sys.modules["fastlaunch.iterate"]         # (fl.iterate is the function)

cpu = get_backend("cpu")
warm = fl.compile(lambda x: x + 1)
warm(np.ones(3))                     # the backend, its disk cache and pass builder exist
LOCKS = {
    "backend": lambda: cpu._lock,
    "pass builder": lambda: cpu._optimizer._lock,
    "disk cache": lambda: cpu.disk._lock,
    "llvmlite": lambda: llvmlite.binding.ffi.lib._lock._lock,    # around every LLVM call
    "backend registry": lambda: backends._LOCK,
    "rebuilt functions": lambda: jit._REBUILT_LOCK,
    "iterate's cache": lambda: iterate._CACHE_LOCK,
    "class registry": lambda: pytree._REGISTRY_LOCK,
    "library routines": lambda: library._lock,
    "interception": lambda: creation.intercepting.__self__._lock,
    "a function's trace": lambda: warm._lock,
    "size watchers": lambda: trace._size_watchers_lock,     # symbolic sizes' probe traces
    "gradient tags": lambda: adjoint._tags_lock,
}

def in_child(k):
    # a first call that traces, compiles (LLVM, disk cache) and links; the same function
    # that was held; a pickle round trip, a loop, a library call, a registered class
    g = fl.compile(lambda x: np.sin(x) * (3.0 + k) + np.zeros(x.shape))
    ok = np.allclose(g(np.ones(5)), np.sin(np.ones(5)) * (3.0 + k))
    ok = ok and np.array_equal(warm(np.ones(4)), np.full(4, 2.0))
    h = pickle.loads(pickle.dumps(fl.compile(lambda x: x * 2)))
    ok = ok and np.array_equal(h(np.ones(2)), np.full(2, 2.0))
    ok = ok and np.array_equal(fl.iterate(lambda x: x + 1, 3, np.zeros(2), carry=0,
                                          collect=False), np.full(2, 3.0))
    m = np.eye(3) + 1.0
    ok = ok and np.allclose(fl.compile(lambda a: a @ a)(m), m @ m)     # a BLAS library call
    pytree.register_class(type("Box", (), {}))
    # a second size: a symbolic build (probe traces watch the sizes Python reads)
    ok = ok and np.allclose(g(np.ones(9)), np.sin(np.ones(9)) * (3.0 + k))
    ok = ok and np.allclose(fl.grad(lambda x: np.sum(np.sin(x)))(np.zeros(3)), np.ones(3))
    return ok

def wait(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"

results = {}
for k, name in enumerate(LOCKS):
    lock = LOCKS[name]()
    holding, release = threading.Event(), threading.Event()
    def hold():
        with lock:
            holding.set()
            release.wait(0.3)        # a fork of ours may wait for this lock: let it go soon
    t = threading.Thread(target=hold)
    t.start()
    holding.wait()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if in_child(k) else 3)
    results[name] = wait(pid, 30)
    release.set()
    t.join()
bad = {name: r for name, r in results.items() if r != 0}
print("locks ok" if not bad else f"children failed: {bad}")
"""


@POSIX
def test_fork_while_another_thread_holds_each_lock():
    """Each of fastlaunch's Python-side locks held by another thread while the main thread
    forks: the child traces, compiles, pickles, iterates and registers a class.  Before: a
    child forked while another thread held the backend's lock (compiling) hung for ever on its
    first new trace, and so for the other locks."""
    proc = run_child(FORK_WHILE_A_LOCK_IS_HELD, timeout=400)
    check_child(proc, "locks ok")


FORK_WHILE_COMPILING = r"""
import os, signal, sys, threading, time, types
import multiprocessing as mp
import numpy as np
import fastlaunch as fl

zeros = np.zeros
stop = threading.Event()
inside = threading.Event()

def slow_body(x):
    inside.set()
    time.sleep(0.2)                  # the trace is under way while the main thread forks
    return np.cos(x) + np.zeros(x.shape)

slow = fl.compile(slow_body)

def compile_forever():
    i = 0
    while not stop.is_set():
        i += 1
        c = i + 0.5                  # new kernels every time: LLVM is busy
        f = fl.compile(lambda a, b: np.tanh(np.linalg.inv(a) @ b) * c + np.exp(b * c))
        f(np.eye(4) + 0.1, np.ones((4, 4)))
        if i % 4 == 0:
            slow.clear()
            slow(np.ones(3))

def in_child(k):
    g = fl.compile(lambda x: np.sin(x) * (3.0 + k))
    ok = np.allclose(g(np.ones(3)), np.sin(np.ones(3)) * (3.0 + k))
    ok = ok and np.allclose(slow(np.ones(2)), np.cos(np.ones(2)))
    # the other thread's trace (its interception of np.zeros & co.) is gone with it
    return ok and type(np) is types.ModuleType and np.zeros is zeros

def mp_target(k):
    sys.exit(0 if in_child(k) else 3)

def wait(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"

t = threading.Thread(target=compile_forever)
t.start()
failure = None
try:
    for k in range(FORKS):
        time.sleep(0.03)
        if k % 3 == 0:
            inside.clear()
            inside.wait(5)               # now and then: fork in the middle of slow's trace
        if k % 4 == 3:
            p = mp.get_context("fork").Process(target=mp_target, args=(k,))
            p.start()
            p.join(60)
            r = p.exitcode if p.exitcode is not None else "hung"
            if p.exitcode is None:
                p.kill()
                p.join()
        else:
            pid = os.fork()
            if pid == 0:
                os._exit(0 if in_child(k) else 3)
            r = wait(pid, 60)
        if r != 0:
            failure = f"child {k}: {r}"
            break
finally:
    stop.set()
    t.join()
print(failure or "forks ok")
"""


@POSIX
def test_fork_while_another_thread_compiles():
    """A thread traces and compiles new functions without a pause (and now and then one whose
    trace sleeps) while the main thread forks, with os.fork and multiprocessing's fork context:
    every child traces and compiles a new function and the one whose trace was under way, and
    sees NumPy itself once its own traces end.
    Before: children hung for ever on the backend's lock (3 forks of 6)."""
    proc = run_child(FORK_WHILE_COMPILING.replace("FORKS", "12"), timeout=500)
    check_child(proc, "forks ok")


# ---- Ctrl-C during a long call ---------------------------------------------------------------
INTERRUPT_PRELUDE = r"""
import gc, os, signal, sys, threading, time
import numpy as np
import fastlaunch as fl
from fastlaunch import _core

# A parent that ignores SIGINT (a shell's background job: `pytest ... &`) hands it down
# ignored, and Python then installs no handler of its own: give the child Python's default.
signal.signal(signal.SIGINT, signal.default_int_handler)

def chain(x, out):
    for _ in range(40):
        x = np.sin(x) + x.mean()     # many launches, each a fraction of the whole
    out[:] = x                       # in place: after the last POLL
    return x

f = fl.compile(chain)
# The call must outlast the signal's delay on any machine (CI machines may have many more
# cores than this one): grow the array until a warm call takes over a second.
n = 1 << 19
while True:
    x = np.linspace(0, 1, n)
    out = np.zeros_like(x)
    f(x, out)
    t0 = time.monotonic()
    expect = f(x, out).copy()
    full = time.monotonic() - t0
    if full > 1.0 or n >= 1 << 25:
        break
    n *= 2
assert np.array_equal(out, expect)
assert "POLL" in f.lower(x, out).bytecode
print("uninterrupted call", full, "s", file=sys.stderr)

def sigint_after(delay):
    sent = []
    def fire():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    timer = threading.Timer(delay, fire)
    timer.start()
    return timer, sent

class Repeating:
    # SIGINT every `every` seconds until stopped (or `limit` seconds passed)
    def __init__(self, every=0.1, limit=90):
        self.stop = threading.Event()
        self.gave_up = False
        self.count = 0
        def run():
            deadline = time.monotonic() + limit
            while not self.stop.wait(every):
                if time.monotonic() > deadline:
                    self.gave_up = True
                    return
                self.count += 1
                os.kill(os.getpid(), signal.SIGINT)
        self.thread = threading.Thread(target=run)
        self.thread.start()
    def finish(self):
        self.stop.set()
        self.thread.join()
"""


@POSIX
def test_sigint_stops_a_long_call_promptly():
    """Ctrl-C ~0.3 s into a call of several seconds: KeyboardInterrupt within a launch, the
    argument written in place untouched (POLLs come only before the first in-place write),
    no pool memory left live; three times over, then the next call completes normally."""
    proc = run_child(INTERRUPT_PRELUDE + r"""
        for rep in range(3):
            out[:] = -1.0
            gc.collect()
            live = _core.memory_stats()["live_bytes"]
            timer, sent = sigint_after(0.3)
            t0 = time.monotonic()
            try:
                f(x, out)
            except KeyboardInterrupt:
                latency = time.monotonic() - sent[0]
            else:
                raise SystemExit("the call was not interrupted")
            timer.join()
            gc.collect()
            assert latency < 0.5, latency
            assert (out == -1.0).all(), "an argument was written before the interrupt"
            assert _core.memory_stats()["live_bytes"] == live, (_core.memory_stats(), live)
            print("interrupted after", time.monotonic() - t0, "latency", latency)
        assert np.array_equal(f(x, out), expect) and np.array_equal(out, expect)
        print("interrupt ok")
    """.replace("\n        ", "\n"))
    check_child(proc, "interrupt ok")


@POSIX
@pytest.mark.slow          # 9-15 s; the default run keeps test_sigint_stops_a_long_call_promptly
def test_sigint_handlers_that_return_let_the_call_finish():
    """A handler installed with signal.signal that does not raise: the call resumes where it
    stopped and returns the right result, even under a stream of signals; with SIGINT
    ignored, POLLs do nothing.  Before: every signal restarted the program from its start,
    so a steady stream of them kept it from ever finishing."""
    proc = run_child(INTERRUPT_PRELUDE + r"""
        calls = []
        signal.signal(signal.SIGINT, lambda s, frame: calls.append(s))
        sender = Repeating(every=0.1, limit=max(30, 15 * full))
        r = f(x, out)
        sender.finish()
        assert not sender.gave_up, "the call never finished under repeated signals"
        assert np.array_equal(r, expect) and np.array_equal(out, expect)
        assert calls and set(calls) == {signal.SIGINT}, calls

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        timer, sent = sigint_after(0.3)
        assert np.array_equal(f(x, out), expect)
        timer.join()

        # Python's own handler is still what Python reports and runs
        signal.signal(signal.SIGINT, signal.default_int_handler)
        f(x, out)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        timer, sent = sigint_after(0.2)
        try:
            time.sleep(30)
            raise SystemExit("Python's handler did not raise")
        except KeyboardInterrupt:
            assert time.monotonic() - sent[0] < 5
        timer.join()
        print("handlers ok")
    """.replace("\n        ", "\n"))
    check_child(proc, "handlers ok")


@POSIX
@pytest.mark.slow          # 9-15 s; the default run keeps test_sigint_stops_a_long_call_promptly
def test_sigint_does_not_stop_a_call_in_another_thread():
    """Only the main thread turns Ctrl-C into KeyboardInterrupt; a long call in another
    thread runs on to its result while the main thread is interrupted, again and again.
    Before: each signal restarted the other thread's program, which never finished."""
    proc = run_child(INTERRUPT_PRELUDE + r"""
        res = {}
        def work():
            try:
                res["r"] = f(x, out)
            except BaseException as e:
                res["e"] = repr(e)
        worker = threading.Thread(target=work)
        worker.start()
        interrupts = 0
        deadline = time.monotonic() + max(30, 15 * full)
        while worker.is_alive() and time.monotonic() < deadline:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.1)
            except KeyboardInterrupt:
                interrupts += 1
        assert not worker.is_alive(), "the call in the other thread never finished"
        worker.join()
        assert "e" not in res, res
        assert np.array_equal(res["r"], expect) and np.array_equal(out, expect)
        assert interrupts > 0
        print("thread ok")
    """.replace("\n        ", "\n"))
    check_child(proc, "thread ok")


@POSIX
@pytest.mark.slow          # 9 s
@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"),
                    reason="struct sigaction layout of glibc on x86_64/aarch64")
def test_one_shot_sigint_handler_stays_one_shot():
    """A C handler installed with SA_RESETHAND runs once; the next SIGINT gets the default
    action (the process ends), exactly as without fastlaunch.  Before: the chained handler
    dropped SA_RESETHAND and called the one-shot handler on every signal."""
    proc = run_child(INTERRUPT_PRELUDE + r"""
        import ctypes
        SA_RESETHAND = 0x80000000
        class Sigaction(ctypes.Structure):
            _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                        ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]
        libc = ctypes.CDLL(None, use_errno=True)
        act = Sigaction()
        act.handler = ctypes.cast(libc.abs, ctypes.c_void_p).value   # a harmless int -> int
        act.flags = SA_RESETHAND
        assert libc.sigaction(signal.SIGINT, ctypes.byref(act), None) == 0
        timer, sent = sigint_after(0.3)
        r = f(x, out)                    # survives the first signal (the one-shot handler)
        timer.join()
        assert np.array_equal(r, expect)
        print("first survived", flush=True)
        os.kill(os.getpid(), signal.SIGINT)      # the default action now: the process ends
        time.sleep(5)
        print("second survived", flush=True)
    """.replace("\n        ", "\n"))
    assert "first survived" in proc.stdout, proc.stderr[-3000:]
    assert "second survived" not in proc.stdout
    assert proc.returncode == -signal.SIGINT, (proc.returncode, proc.stderr[-3000:])


# ---- environment variables --------------------------------------------------------------------
@pytest.mark.parametrize("name, value, expected", [
    ("FASTLAUNCH_NUM_THREADS", "0", "a whole number of threads from 1 to"),
    ("FASTLAUNCH_NUM_THREADS", "four", "a whole number of threads from 1 to"),
    ("FASTLAUNCH_NUM_THREADS", "-2", "a whole number of threads from 1 to"),
    ("FASTLAUNCH_NUM_THREADS", "2.5", "a whole number of threads from 1 to"),
    ("FASTLAUNCH_NUM_THREADS", "100000", "a whole number of threads from 1 to"),
    ("FASTLAUNCH_POOL_LIMIT_MB", "-1", "a whole number of megabytes from 0"),
    ("FASTLAUNCH_POOL_LIMIT_MB", "lots", "a whole number of megabytes from 0"),
    ("FASTLAUNCH_POOL_LIMIT_MB", str(2**63), "a whole number of megabytes from 0"),
    ("FASTLAUNCH_POOL_LIMIT_MB", str(env.MAX_POOL_LIMIT_MB + 1),
     "a whole number of megabytes from 0"),
])
def test_bad_runtime_setting_fails_the_import(name, value, expected):
    """The runtime's settings are checked when fastlaunch is imported (the C runtime reads
    them later, without the GIL, where nothing can be raised).  Before: 0 or a non-number
    silently meant one thread; a huge pool limit overflowed and silently turned caching off."""
    proc = run_child("import fastlaunch", timeout=60, **{name: value})
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("fastlaunch.env.EnvironmentVariableError: ")
    assert f"{name}={value!r}" in last and expected in last


def test_runtime_settings_take_effect():
    proc = run_child(r"""
        import numpy as np, fastlaunch as fl
        from fastlaunch import _core
        f = fl.compile(lambda x: np.sin(x).sum() + x)
        x = np.linspace(0, 1, 1 << 18)
        f(x)
        print(_core.start_threads(), _core.memory_stats()["cached_bytes"] > 0)
    """, timeout=120, FASTLAUNCH_NUM_THREADS=" 3 ",
                     FASTLAUNCH_POOL_LIMIT_MB=str(env.MAX_POOL_LIMIT_MB))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3", "True"]     # the largest limit keeps caching on
    proc = run_child(r"""
        import numpy as np, fastlaunch as fl
        from fastlaunch import _core
        f = fl.compile(lambda x: np.sin(x).sum() + x)
        x = np.linspace(0, 1, 1 << 18)
        f(x)
        print(_core.memory_stats())
    """, timeout=120, FASTLAUNCH_POOL_LIMIT_MB="0")
    assert proc.returncode == 0, proc.stderr
    assert "'cached_bytes': 0," in proc.stdout


@pytest.mark.parametrize("value, threads", [(None, 0), ("", 0), ("  ", 0), ("1", 1),
                                            ("+8", 8), (" 256 ", 256)])
def test_num_threads_values(monkeypatch, value, threads):
    if value is None:
        monkeypatch.delenv("FASTLAUNCH_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("FASTLAUNCH_NUM_THREADS", value)
    assert env.num_threads(256) == threads


def test_pool_limit_values(monkeypatch):
    monkeypatch.delenv("FASTLAUNCH_POOL_LIMIT_MB", raising=False)
    assert env.pool_limit_bytes() == env.DEFAULT_POOL_LIMIT_MB << 20
    monkeypatch.setenv("FASTLAUNCH_POOL_LIMIT_MB", "0")
    assert env.pool_limit_bytes() == 0
    monkeypatch.setenv("FASTLAUNCH_POOL_LIMIT_MB", str(env.MAX_POOL_LIMIT_MB))
    assert env.pool_limit_bytes() <= 2**63 - 1


def test_start_threads_checks_its_argument():
    with pytest.raises(ValueError, match="start_threads: n must be from 0 to"):
        _core.start_threads(-1)
    with pytest.raises(ValueError, match="start_threads: n must be from 0 to"):
        _core.start_threads(100000)


def test_unknown_backend_in_environment(monkeypatch):
    """The backend is looked up when a function is compiled (backends can be registered after
    import); the error names the variable, its value and the backends there are."""
    monkeypatch.setenv("FASTLAUNCH_BACKEND", "gpu9000")
    with pytest.raises(env.EnvironmentVariableError,
                       match=r"FASTLAUNCH_BACKEND='gpu9000': expected the name of a fastlaunch "
                             r"backend, one of: cpu, cuda, devsim, null"):
        fl.compile(lambda x: x + 1)(np.ones(3))
    # an explicit backend= argument is not the environment's fault
    with pytest.raises(ValueError, match="unknown fastlaunch backend 'gpu9000'; known: cpu"):
        fl.compile(lambda x: x + 1, backend="gpu9000")


@pytest.mark.parametrize("value, logs", [("0", False), ("false", False), ("OFF", False),
                                         ("", False), ("1", True), ("yes", True)])
def test_log_switch(monkeypatch, capfd, value, logs):
    """FASTLAUNCH_LOG=0 means off (before: any non-empty value, "0" included, logged)."""
    monkeypatch.setenv("FASTLAUNCH_LOG", value)
    f = fl.compile(lambda x: x * 3.0 + 1.0)
    np.testing.assert_array_equal(f(np.arange(4.0)), np.arange(4.0) * 3.0 + 1.0)
    err = capfd.readouterr().err
    assert (len(err) > 0) == logs, err


def test_log_switch_unknown_value_warns_and_logs(monkeypatch, capfd):
    """A logging switch must not stop a computation: an unknown value warns, names the
    variable and the accepted values, and logs."""
    monkeypatch.setenv("FASTLAUNCH_LOG", "verbose")
    f = fl.compile(lambda x: x - 2.0)
    with pytest.warns(RuntimeWarning, match=r"FASTLAUNCH_LOG='verbose': expected one of 1, "
                                            r"true, yes, on \(on\) or 0, false, no, off"):
        np.testing.assert_array_equal(f(np.arange(3.0)), np.arange(3.0) - 2.0)
    assert capfd.readouterr().err


# ---- impossible shapes -------------------------------------------------------------------------
# Each raises in NumPy without allocating anything; fastlaunch must raise NumPy's own error
# while tracing (before: misleading "could not be broadcast" errors, or an OverflowError when
# the program was linked, after the whole trace and compile).
IMPOSSIBLE = {
    "broadcast_to 2**62 float64": lambda x: np.broadcast_to(x[0], (2**62,)),
    "broadcast_to 2**40 x 2**40": lambda x: np.broadcast_to(x[0], (2**40, 2**40)),
    "broadcast_to 2**63": lambda x: np.broadcast_to(x[0], (2**63,)),
    "broadcast_to zero-size but huge": lambda x: np.broadcast_to(x[0], (0, 2**62, 2**62)),
    "broadcast_to negative": lambda x: np.broadcast_to(x[0], (-1,)),
    "arithmetic on a huge view": lambda x: np.broadcast_to(x[0], (2**62,)) + 1.0,
    "outer product of huge views":
        lambda x: np.broadcast_to(x[0], (2**31,))[:, None] * np.broadcast_to(x[0], (2**31,)),
    "outer product past the iterator":
        lambda x: np.broadcast_to(x[:1], (2**40, 1)) * np.broadcast_to(x[:1], (1, 2**40)),
    "einsum outer of huge views":
        lambda x: np.einsum("i,j->ij", np.broadcast_to(x[0], (2**31,)),
                            np.broadcast_to(x[0], (2**31,))),
    "zeros_like of a huge broadcast":
        lambda x: np.zeros_like(np.broadcast_to(x.astype(np.int8)[0], (2**62,)),
                                dtype=np.float64),
    "zeros_like shape=": lambda x: np.zeros_like(x, shape=(2**62, 4)),
    "full_like traced value shape=": lambda x: np.full_like(x, x[0], shape=(2**62, 4)),
    "empty_like negative shape": lambda x: np.empty_like(x, shape=(-2,)),
    "astype of a huge int8 view":
        lambda x: np.broadcast_to(x.astype(np.int8)[0], (2**62,)).astype(np.float64),
    "reshape of a huge view": lambda x: np.broadcast_to(x[0], (2**62,)).reshape(2**31, 2**31),
    "reshape whose int64 product wraps to 0": lambda x: x[:0].reshape(2**62, 4),
    "reshape of a huge product": lambda x: x[:0].reshape(2**31, 2**31, 4),
}


@pytest.mark.parametrize("name", list(IMPOSSIBLE))
def test_impossible_shapes_raise_numpys_error(name):
    fn = IMPOSSIBLE[name]
    x = np.linspace(1.0, 2.0, 3)
    with pytest.raises(Exception) as np_err:
        fn(x)
    with pytest.raises(Exception) as fl_err:
        fl.compile(fn)(x)
    assert type(fl_err.value) is type(np_err.value)
    assert str(fl_err.value) == str(np_err.value)


def test_huge_but_possible_views_still_work():
    """The checks refuse only what NumPy refuses: an int8 view of 2**62 elements is an array
    NumPy makes (stride 0), and a small slice of it computes."""
    def body(x):
        v = np.broadcast_to(x.astype(np.int8)[0], (2**62,)).reshape(2**31, 2**31)
        return v[:2, :3] * 2
    x = np.array([3.0, 1.0])
    np.testing.assert_array_equal(fl.compile(body)(x), body(x))
