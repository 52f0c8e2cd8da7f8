"""The runners: one adapter per way of executing a workload.

A runner's `prepare(workload, args)` converts the inputs once (outside any timed loop) and
returns a `Prepared`: `run()` does one call whose results are complete when it returns (JAX:
block_until_ready; Dr.Jit: dr.eval + dr.sync_thread), `fetch(out)` turns what `run()` returned
into a list of NumPy values for the check against NumPy. Compiled functions are cached per
workload, as a user would keep them across calls.

`unavailable()` says why a runner cannot run at all here (peer not installed or broken); an
exception from `prepare`/`run` reports the runner FAILED for that workload and size, and
`NotApplicable` reports it n/a.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, NamedTuple

import numpy as np

import fastlaunch as fl
from ports import (DRJIT_PORTS, DRJIT_UNSUPPORTED, JAX_PORTS, NUMBA_LOOPS,
                   NUMBA_PARALLEL_UNSUPPORTED, TORCH_PORTS, drjit_namespace, numba_parallel,
                   rebind, torch_namespace)
from workloads import Workload, as_list

os.environ.setdefault("JAX_PLATFORMS", "cpu")


class NotApplicable(Exception):
    """The runner does not apply to this workload."""


class Prepared(NamedTuple):
    run: Callable[[], object]
    fetch: Callable[[object], list]


def _numpy_fetch(out) -> list:
    return as_list(out)


class Runner:
    name = "?"
    description = ""

    def __init__(self):
        self._cache = {}

    def unavailable(self) -> str | None:
        return None

    def version(self) -> str:
        return ""

    def compiled(self, workload: Workload):
        if workload.name not in self._cache:
            self._cache[workload.name] = self.compile(workload)
        return self._cache[workload.name]

    def compile(self, workload: Workload):
        raise NotImplementedError

    def details(self, workload: Workload, args: tuple) -> dict:
        """Facts worth recording beside the time (e.g. kernel launches per call)."""
        return {}

    def prepare(self, workload: Workload, args: tuple) -> Prepared:
        f = self.compiled(workload)
        return Prepared(lambda: f(*args), _numpy_fetch)


class NumpyRunner(Runner):
    name = "numpy"
    description = "plain NumPy"

    def version(self):
        return np.__version__

    def compile(self, workload):
        return workload.fn


class FastlaunchRunner(Runner):
    def __init__(self, replay: bool):
        super().__init__()
        self.replay = replay
        self.name = "replay" if replay else "re-trace"
        self.description = ("fastlaunch.compile(fn): traced once, replayed" if replay else
                            "fastlaunch.compile(fn, replay=False): re-traced every call")

    def version(self):
        return fl.__version__

    def compile(self, workload):
        return fl.compile(workload.fn, replay=self.replay)

    def details(self, workload, args):
        return {"launches": self.compiled(workload).lower(*args).program.launch_count()}


class NumbaRunner(Runner):
    """`numba.njit` of an explicit float32 loop (ports.NUMBA_LOOPS), or with `same_code` of
    the NumPy function itself."""

    def __init__(self, same_code: bool, parallel: bool = False):
        super().__init__()
        self.same_code = same_code
        self.parallel = parallel
        self.name = "numba-np" if same_code else ("numba-par" if parallel else "numba")
        self.description = ("numba.njit(the NumPy code)" if same_code else
                            "numba.njit(parallel=True) of the explicit loop, range -> prange"
                            if parallel else
                            "numba.njit(explicit float32 loop, ports.py), single thread")

    def unavailable(self):
        try:
            import numba
            numba.njit(lambda x: x + 1)(1.0)
        except Exception as e:            # noqa: BLE001
            return f"not available: {type(e).__name__}: {e}"
        return None

    def version(self):
        import numba
        return numba.__version__

    def compile(self, workload):
        import numba
        if self.same_code:
            return numba.njit(workload.fn)
        if workload.name not in NUMBA_LOOPS:
            raise NotApplicable("no explicit-loop port")
        if self.parallel:
            if workload.name in NUMBA_PARALLEL_UNSUPPORTED:
                raise NotApplicable(NUMBA_PARALLEL_UNSUPPORTED[workload.name])
            return numba.njit(parallel=True)(numba_parallel(workload.name))
        return numba.njit(NUMBA_LOOPS[workload.name])


class JaxRunner(Runner):
    name = "jax"
    description = "jax.jit(the same code with np -> jax.numpy), CPU, block_until_ready"

    def unavailable(self):
        try:
            import jax
            import jax.numpy as jnp
            jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.ones(4, jnp.float32)))
        except Exception as e:            # noqa: BLE001
            return f"not available: {type(e).__name__}: {e}"
        return None

    def version(self):
        import jax
        import jaxlib
        return f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, {jax.devices()[0].platform}"

    def compile(self, workload):
        import jax
        import jax.numpy as jnp
        return jax.jit(JAX_PORTS.get(workload.name) or rebind(workload.fn, jnp))

    def prepare(self, workload, args):
        import jax
        f = self.compiled(workload)
        jargs = [jax.device_put(a) if isinstance(a, np.ndarray) else a for a in args]
        jax.block_until_ready(jargs)
        return Prepared(lambda: jax.block_until_ready(f(*jargs)),
                        lambda out: [np.asarray(o) for o in as_list(out)])


class DrJitRunner(Runner):
    """Dr.Jit's LLVM backend: drjit.llvm.Float for 1-D inputs, TensorXf for 2-D ones; the
    same code with np -> a Dr.Jit namespace (ports.drjit_namespace), or ports.DRJIT_PORTS."""

    def __init__(self, freeze: bool):
        super().__init__()
        self.freeze = freeze
        self.name = "drjit-freeze" if freeze else "drjit"
        self.description = ("@dr.freeze of the Dr.Jit function" if freeze else
                            "Dr.Jit LLVM backend, traced every call (kernel cache hit)")
        self._why = None

    def unavailable(self):
        if self._why is None:
            self._why = _drjit_probe()
        return self._why or None

    def version(self):
        import drjit as dr
        return f"drjit {dr.__version__} (LLVM backend)"

    def compile(self, workload):
        if workload.name in DRJIT_UNSUPPORTED:
            raise NotApplicable(DRJIT_UNSUPPORTED[workload.name])
        return DRJIT_PORTS.get(workload.name) or rebind(workload.fn, drjit_namespace())

    def frozen(self, workload, args):
        """One dr.freeze per workload and input shape: a frozen function replayed at another
        width keeps the Python ints of its recording (dr.width(p) in the step), so that reusing
        one across sizes computes wrong results."""
        import drjit as dr
        key = (workload.name,) + tuple(np.shape(a) for a in args)
        if key not in self._cache:
            self._cache[key] = dr.freeze(self.compiled(workload))
        return self._cache[key]

    def prepare(self, workload, args):
        import drjit as dr
        from drjit.llvm import Float, TensorXf
        f = self.frozen(workload, args) if self.freeze else self.compiled(workload)
        dargs = []
        for a in args:
            if isinstance(a, np.ndarray):
                a = Float(a) if a.ndim == 1 else TensorXf(a)
            dargs.append(a)
        dr.eval(*[a for a in dargs if isinstance(a, dr.ArrayBase)])
        dr.sync_thread()

        def run():
            out = f(*dargs)
            dr.eval(out)
            dr.sync_thread()
            return out
        return Prepared(run, lambda out: [o.numpy() for o in as_list(out)])


class TorchRunner(Runner):
    """torch.compile (inductor, CPU) of the same code with np -> torch (ports.torch_namespace),
    or ports.TORCH_PORTS; one compiled function per workload (inductor specialises on shapes,
    recompiling for each new one)."""
    name = "torch.compile"
    description = "torch.compile(backend='inductor'), CPU, same code with np -> torch"

    def unavailable(self):
        try:
            import torch
            f = torch.compile(lambda x: torch.sin(x) + 1, backend="inductor", dynamic=False)
            if not torch.allclose(f(torch.zeros(8)), torch.ones(8)):
                return "not available: torch.compile computed a wrong result"
        except Exception as e:            # noqa: BLE001  (inductor needs a C++ compiler)
            return f"not available: {type(e).__name__}: {str(e)[:200]}"
        return None

    def version(self):
        import torch
        return f"torch {torch.__version__}, {torch.get_num_threads()} threads"

    def compile(self, workload):
        import torch
        fn = TORCH_PORTS.get(workload.name) or rebind(workload.fn, torch_namespace())
        return torch.compile(fn, backend="inductor", dynamic=False)

    def prepare(self, workload, args):
        import torch
        f = self.compiled(workload)
        targs = [torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]

        def run():
            with torch.no_grad():
                return f(*targs)
        return Prepared(run, lambda out: [np.asarray(o.numpy() if hasattr(o, "numpy") else o)
                                          for o in as_list(out)])


_DRJIT_PROBE = None


def _drjit_probe() -> str:
    """'' when Dr.Jit's LLVM backend runs every workload here, else 'not available: why'.

    Runs in a subprocess: an LLVM that cannot select an instruction (e.g. the x86 `fmaximum`
    that dr.maximum emits, with libLLVM 15) aborts the whole process."""
    global _DRJIT_PROBE
    if _DRJIT_PROBE is None:
        code = ("import sys; sys.path.insert(0, %r)\n"
                "from runners import _drjit_probe_child; _drjit_probe_child()"
                % os.path.dirname(os.path.abspath(__file__)))
        try:
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               timeout=300)
            lines = [ln.strip() for ln in (p.stderr + p.stdout).splitlines() if ln.strip()]
            if p.returncode == 0 and lines and lines[-1] == "drjit ok":
                _DRJIT_PROBE = ""
            else:
                errors = [ln for ln in lines if "ERROR" in ln or "rror" in ln] or lines[-1:]
                started = [ln for ln in lines if ln.startswith("probing ")]
                where = f" ({started[-1]})" if started else ""
                _DRJIT_PROBE = (f"not available: drjit exited with status {p.returncode}"
                                f"{where}: {errors[0][:200] if errors else 'no output'}")
        except Exception as e:                # noqa: BLE001
            _DRJIT_PROBE = f"not available: {type(e).__name__}: {e}"
    return _DRJIT_PROBE


def _drjit_probe_child():
    """Run every workload once through Dr.Jit at a small size (called in a subprocess)."""
    import drjit as dr
    from drjit.llvm import Float

    from workloads import WORKLOADS
    x = dr.sqrt(Float([1.0, 4.0])) + 1
    dr.eval(x)
    if not np.allclose(x.numpy(), [2.0, 3.0]):
        raise SystemExit(f"wrong result {x}")
    if not hasattr(dr, "freeze"):
        raise SystemExit(f"drjit {dr.__version__} has no dr.freeze")
    for name, wl in WORKLOADS.items():
        print(f"probing {name}", file=sys.stderr, flush=True)
        for runner in (DrJitRunner(False), DrJitRunner(True)):
            try:
                prep = runner.prepare(wl, wl.args(300))
                prep.fetch(prep.run())
            except Exception:                 # noqa: BLE001  (a Python error is a per-run FAILED)
                pass
    print("drjit ok", flush=True)


def all_runners() -> list:
    """Every runner, in table order (unavailable ones included: they report why)."""
    return [NumpyRunner(), FastlaunchRunner(replay=False), FastlaunchRunner(replay=True),
            NumbaRunner(same_code=False), NumbaRunner(same_code=False, parallel=True),
            NumbaRunner(same_code=True), JaxRunner(),
            TorchRunner(), DrJitRunner(freeze=False), DrJitRunner(freeze=True)]
