"""`pytest --cuda-ptx`: the offline CUDA check of every function the suite compiles.

Each time a test traces a function for another backend (the CPU, normally), the same call is
lowered again with the CUDA backend for sm_90: traced, fused, scheduled for the GPU, compiled
to PTX (libdevice linked, the NVPTX checks), recorded with device memory, verified and linked
(an executable that would raise without a GPU; it is not called).  Its kernels are compiled
to PTX for sm_80 as well.  A lowering failure fails the test that traced the function.

Every distinct PTX module is then assembled by ptxas for its arch.  ptxas starts slowly
(about 0.1 s) and takes many modules per run, so modules are queued and assembled BATCH at
a time; a batch that fails is assembled module by module to name the kernels, and each
failure is reported at the end with the test that traced it (the session then fails).

`--cuda-ptx-every N` checks one traced function in N (a sample; default 1: all).
"""
from __future__ import annotations

import os
import subprocess
import tempfile
import threading

ARCHS = ("sm_90", "sm_80")
BATCH = 200

STATS = {"functions": 0, "skipped": 0, "ptxas_runs": 0}
FAILURES: list = []
_kernels = {a: set() for a in ARCHS}       # distinct kernels (keys) compiled per arch
_assembled = {a: 0 for a in ARCHS}
_pending = {a: [] for a in ARCHS}          # (key, ptx, where) waiting for ptxas
_local = threading.local()
_backends: dict = {}


def backend(arch):
    if arch not in _backends:
        from fastlaunch.backends.cuda import CUDABackend
        b = CUDABackend(arch=arch)
        b.ptxas = None          # its images stay PTX: assembled here, in batches
        _backends[arch] = b
    return _backends[arch]


def install(every: int = 1, only: str | None = None):
    """Wrap jit.Compiled._trace (once) so that every trace is also lowered for CUDA.  `only`:
    a test path prefix (the CI sample checks the conformance suite's pure functions only:
    lowering traces the function once more, which tests counting its calls would see)."""
    from fastlaunch import jit
    from fastlaunch.backends.cuda import find_libdevice, find_ptxas

    if find_ptxas() is None or find_libdevice() is None:
        raise RuntimeError("--cuda-ptx needs ptxas and libdevice (a CUDA toolkit or the "
                           "nvidia-cuda-nvcc and nvidia-nvvm wheels)")
    original = jit.Compiled._trace
    counter = [0]

    def _trace(self, call, enc, has_kwargs, install, **options):
        entry = original(self, call, enc, has_kwargs, install, **options)
        if only is not None and not os.environ.get("PYTEST_CURRENT_TEST", "").startswith(only):
            return entry
        if self.backend.name != "cuda" and not getattr(_local, "busy", False) and not options:
            counter[0] += 1
            if (counter[0] - 1) % every == 0:
                _lower_for_cuda(self, call, has_kwargs)
            else:
                STATS["skipped"] += 1
        return entry

    jit.Compiled._trace = _trace


def _lower_for_cuda(compiled, call, has_kwargs):
    from fastlaunch import jit
    from fastlaunch.program.link import LinkError
    where = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    _local.busy = True
    try:
        twin = jit.Compiled(compiled.__wrapped__, static_argnums=compiled._static,
                            backend="cpu", replay=False)
        twin.backend = backend(ARCHS[0])
        try:
            args, kwargs = (call[:-1], call[-1]) if has_kwargs else (call, {})
            entry = twin._entry_for(args, kwargs)     # with the device backend's copies
            for k, ck in zip(entry.info.lowered.plan.compiled_kernels(), entry.info.kernels):
                _queue(ARCHS[0], ck, where)
                for arch in ARCHS[1:]:
                    _queue(arch, backend(arch).compile(k), where)
        except LinkError as err:
            if "has no library calls" not in str(err):
                raise AssertionError(f"--cuda-ptx: linking {compiled.__name__} for CUDA "
                                     f"failed: {err}") from err
            STATS["skipped"] += 1     # np.linalg: CPU-only, refused by the CUDA backend's link
            return
        except Exception as err:
            raise AssertionError(f"--cuda-ptx: lowering {compiled.__name__} for CUDA failed: "
                                 f"{type(err).__name__}: {err}") from err
        STATS["functions"] += 1
    finally:
        _local.busy = False


def _queue(arch, ck, where):
    if ck.key in _kernels[arch]:
        return
    _kernels[arch].add(ck.key)
    _pending[arch].append((ck.key, ck.source, where))
    if len(_pending[arch]) >= BATCH:
        flush(arch)


def flush(arch=None):
    """Assemble what is queued (for one arch, or all)."""
    from fastlaunch.backends.cuda import find_ptxas
    ptxas = find_ptxas()
    for a in ([arch] if arch else ARCHS):
        batch, _pending[a] = _pending[a], []
        if not batch:
            continue
        with tempfile.TemporaryDirectory(prefix="fastlaunch-ptx-check-") as d:
            paths = []
            for i, (_, ptx, _) in enumerate(batch):
                paths.append(os.path.join(d, f"k{i}.ptx"))
                with open(paths[-1], "w") as f:
                    f.write(ptx)
            ok = _ptxas(ptxas, a, paths, os.path.join(d, "all.cubin"))
            if ok is not None:            # name the modules that fail on their own
                for path, (key, _, where) in zip(paths, batch):
                    err = _ptxas(ptxas, a, [path], path + ".cubin")
                    if err is not None:
                        FAILURES.append(f"{where}: kernel {key[:16]} for {a}: {err}")
        _assembled[a] += len(batch)


def _ptxas(ptxas, arch, paths, out):
    STATS["ptxas_runs"] += 1
    r = subprocess.run([ptxas, f"-arch={arch}", "-O3", *paths, "-o", out], capture_output=True,
                       text=True, timeout=1800)
    return None if r.returncode == 0 else (r.stderr or r.stdout).strip()[:1000]


def summary() -> str:
    flush()
    counts = ", ".join(f"{a}: {len(_kernels[a])}" for a in ARCHS)
    assembled = ", ".join(f"{a}: {_assembled[a]}" for a in ARCHS)
    skipped = f" ({STATS['skipped']} skipped by --cuda-ptx-every)" if STATS["skipped"] else ""
    lines = [f"cuda-ptx: {STATS['functions']} traced functions lowered for CUDA{skipped}; "
             f"distinct kernels compiled to PTX: {counts}; assembled by ptxas: {assembled} "
             f"({STATS['ptxas_runs']} ptxas runs); failures: {len(FAILURES)}"]
    lines += [f"cuda-ptx FAILED {f}" for f in FAILURES]
    return "\n".join(lines)
