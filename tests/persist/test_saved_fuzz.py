"""Mutated saved programs (checksum recomputed, as an attacker would) are refused with a clear
error or run within their bounds; never a crash (savedfuzz.py does the mutating).

Workers run in subprocesses under glibc's malloc checks (PYTHONMALLOC=malloc, MALLOC_CHECK_=3,
MALLOC_PERTURB_), so a crash or a heap corruption fails the test and names its case; a small
sample of cases that load runs under valgrind memcheck (slow suite).
"""
import collections
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "savedfuzz.py")
ROOT = os.path.dirname(os.path.dirname(HERE))
MALLOC_DEBUG = "/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0"

# Valgrind's own false positives in the dynamic loader (strncmp reading past a string end
# in word-sized loads while it parses RPATHs).
SUPPRESSIONS = """
{
   ld-so-word-sized-string-reads
   Memcheck:Addr8
   fun:strncmp
   fun:is_dst
   ...
}
{
   ld-so-word-sized-string-reads-2
   Memcheck:Addr8
   fun:strncmp
   ...
   fun:_dl_map_object
   ...
}
"""


def _env(tmp, checked=True):
    """checked: glibc's malloc checks; "valgrind": plain malloc for valgrind to watch."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "FUZZ_TMP": str(tmp), "FASTLAUNCH_CACHE_DIR": str(tmp / "kcache"),
           "FASTLAUNCH_NUM_THREADS": "2"}
    if checked == "valgrind":
        env["PYTHONMALLOC"] = "malloc"
    elif checked:
        env.update(PYTHONMALLOC="malloc", MALLOC_CHECK_="3", MALLOC_PERTURB_="165")
        if os.path.exists(MALLOC_DEBUG):        # glibc >= 2.34 reads MALLOC_CHECK_ only here
            env["LD_PRELOAD"] = MALLOC_DEBUG
    return env


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    (d / "programs").mkdir()
    done = subprocess.run([sys.executable, SCRIPT, "build", str(d / "programs")],
                          env=_env(d, checked=False), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return d


def _fuzz(base, mode, seeds, timeout=900, prefix=(), checked=True):
    """Run a worker over `seeds` (a (first, count) range or a list); the outcome counts."""
    if isinstance(seeds, tuple):
        spec = [str(seeds[0]), str(seeds[1])]
    else:
        spec = ["seeds=" + ",".join(map(str, seeds))]
    cmd = list(prefix) + [sys.executable, SCRIPT, "run", str(base / "programs"), mode] + spec
    done = subprocess.run(cmd, env=_env(base, checked), capture_output=True, text=True,
                          timeout=timeout)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    started = {x["case"]: x for x in lines if "case" in x}
    finished = {x["done"]: x for x in lines if "done" in x}
    crashed = [started[c] for c in started if c not in finished]
    assert done.returncode == 0 and not crashed, (
        f"worker died (rc {done.returncode}) during {crashed}\n{done.stderr[-3000:]}")
    failures = [dict(started[c], **finished[c]) for c in finished
                if finished[c]["outcome"] == "FAIL"]
    assert not failures, json.dumps(failures[:5], indent=1)
    return collections.Counter(x["outcome"] for x in finished.values()), finished


def _check_mix(counts):
    # the mutations reach both sides: most files are refused, some still load and run
    assert counts["load-refused"] > counts.total() // 3, counts
    assert counts["called"] + counts["call-error"] > counts.total() // 20, counts


def test_fuzz_source_mode(base):
    """machine_code=False: every field may be mutated, kernel descriptions included."""
    counts, _ = _fuzz(base, "source", (0, 300))
    _check_mix(counts)


def test_fuzz_machine_code_mode(base):
    """The default mode trusts the machine code (and the descriptions it was compiled from);
    everything else is mutated: bytecode, tables, signature, metadata."""
    counts, _ = _fuzz(base, "machine", (100000, 200))
    _check_mix(counts)


def test_fuzz_loop_programs(base):
    """fl.iterate's loop programs only, half their code mutations on the loop instructions'
    operands (counts, jump targets, row strides, alias and counter slots): refused, or run
    within their buffers."""
    sys.path.insert(0, HERE)
    try:
        import savedfuzz
    finally:
        sys.path.remove(HERE)
    names = sorted(savedfuzz.PROGRAMS)
    loops = {i for i, n in enumerate(names) if n in savedfuzz.LOOPS}
    assert len(loops) == 4
    seeds = [s for s in range(300000, 300500) if s % len(names) in loops]
    counts, finished = _fuzz(base, "machine", seeds)
    _check_mix(counts)


def test_fuzz_library_call_programs(base):
    """The programs with library calls (BLAS gemm, LAPACK inv/solve/det/svd/lstsq; cpu and
    devsim), half their code mutations on the LIBCALL operands (routine, batch and matrix
    sizes, operand slots, offsets, strides): refused, or run within their buffers."""
    sys.path.insert(0, HERE)
    try:
        import savedfuzz
    finally:
        sys.path.remove(HERE)
    names = sorted(savedfuzz.PROGRAMS)
    libs = {i for i, n in enumerate(names) if n.startswith("linalg")}
    assert len(libs) == 2
    seeds = [s for s in range(400000, 400600) if s % len(names) in libs]
    counts, _ = _fuzz(base, "machine", seeds)
    _check_mix(counts)


@pytest.mark.slow
@pytest.mark.parametrize("mode,first,count", [("source", 1000, 2000), ("source", 3000, 2000),
                                              ("source", 5000, 2000), ("machine", 200000, 2000),
                                              ("machine", 202000, 2000)])
def test_fuzz_many(base, mode, first, count):
    """10 000 mutated files in all (five workers of 2 000)."""
    counts, _ = _fuzz(base, mode, (first, count), timeout=3000)
    _check_mix(counts)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_fuzz_sample_under_valgrind(base, tmp_path):
    """Cases that load and run, again under valgrind memcheck (invalid reads and writes,
    invalid frees; JIT-compiled kernels included).  Temporaries come from fastlaunch's pool,
    whose blocks are rounded up to size classes: an overrun inside that slack is not seen."""
    picked = []
    for mode, first in (("source", 70000), ("machine", 80000)):
        _, finished = _fuzz(base, mode, (first, 300))
        ran = [c for c, x in finished.items() if x["outcome"] != "load-refused"]
        refused = [c for c, x in finished.items() if x["outcome"] == "load-refused"]
        picked.append((mode, ran[:12] + refused[:3]))
    supp = tmp_path / "ld.supp"
    supp.write_text(SUPPRESSIONS)
    for mode, seeds in picked:
        log = tmp_path / f"valgrind-{mode}.log"
        prefix = ["valgrind", "--tool=memcheck", "--undef-value-errors=no", "--leak-check=no",
                  "--error-exitcode=99", f"--suppressions={supp}", f"--log-file={log}"]
        try:
            _fuzz(base, mode, seeds, timeout=2400, prefix=prefix, checked="valgrind")
        except AssertionError:
            raise AssertionError(log.read_text()[-6000:]) from None


CONTROL = """
import sys
import numpy as np
import fastlaunch as fl
import savedfuzz
from fastlaunch import _launch
from fastlaunch.program import bytecode
bytecode.verify = lambda *a, **k: None   # the verifier switched off: the attack gets through
path = sys.argv[1]
fl.compile(lambda x: x + 1.0).save(path, np.zeros(1000))
f = savedfuzz.unpack(open(path, "rb").read())
f["meta"]["kernels"][0]["desc"]["space"] = [1100]
pc, code = 0, f["code"]
while pc < len(code):
    if code[pc] == _launch.Opcode.LAUNCH:
        code[pc + 2] = 1100
    pc += int(code[pc]) & 0xFF
open(path, "wb").write(savedfuzz.pack(f))
fl.load(path, machine_code=False)(np.zeros(1000))
print("no error seen")
"""


def test_the_checkers_see_an_escape(base, tmp_path):
    """Positive control: a kernel that writes 800 bytes past its result (possible only with the
    verifier switched off) is caught by the workers' malloc checks."""
    env = _env(base)
    env["PYTHONPATH"] = HERE + os.pathsep + env["PYTHONPATH"]
    done = subprocess.run([sys.executable, "-c", CONTROL, str(tmp_path / "p.flp")], env=env,
                          capture_output=True, text=True, timeout=300)
    # killed by a signal (glibc aborts on the corrupted heap), not a Python error
    assert done.returncode < 0 and "no error seen" not in done.stdout, \
        (done.returncode, done.stdout, done.stderr[-2000:])
