"""Backends, found by name, and the number of each one's memory in signature words.  The
interface every backend implements is in base.py."""
from __future__ import annotations

from .. import _core, env, forking
from .base import CallLayout, CompiledKernel, MemoryModel  # noqa: F401  (re-exported)

_FACTORIES: dict = {}
_INSTANCES: dict = {}
_DEVICE_KINDS: dict = {}
_LOCK = forking.lock(forking.FACTORY)  # a factory may get another backend (devsim: the cpu)


def register_backend(name: str, factory, device_kind: int = 0,
                     cuda_array_interface: bool = False):
    """device_kind: the number of the backend's memory in signature words (a DeviceArray's
    kind, _core.register_device_kind), 0 for host memory (NumPy arrays).  Never renumber a
    backend: saved signatures and shipped programs hold these numbers."""
    if device_kind:
        _core.register_device_kind(name, device_kind, cuda_array_interface)
    _DEVICE_KINDS[name] = device_kind
    _FACTORIES[name] = factory


def device_kind(name: str) -> int:
    """The number of backend `name`'s memory in signature words (0: host memory)."""
    return _DEVICE_KINDS[name]


def get_backend(name: str | None = None):
    """The backend called `name`; None: FASTLAUNCH_BACKEND, else "cpu"."""
    from_env = name is None and env.backend_name() is not None
    if name is None:
        name = env.backend_name() or "cpu"
    if not isinstance(name, str):
        raise TypeError(f"backend must be a backend name (str), got {type(name).__name__}")
    with _LOCK:
        backend = _INSTANCES.get(name)
        if backend is None:
            factory = _FACTORIES.get(name)
            if factory is None:
                known = ", ".join(sorted(_FACTORIES))
                if from_env:
                    raise env.EnvironmentVariableError(
                        f"environment variable FASTLAUNCH_BACKEND={name!r}: expected the name "
                        f"of a fastlaunch backend, one of: {known}")
                raise ValueError(f"unknown fastlaunch backend {name!r}; known: {known}")
            backend = _INSTANCES[name] = factory()
        return backend


def available_backends() -> list:
    return sorted(_FACTORIES)


def _cpu():
    from .cpu import CPUBackend
    return CPUBackend()


def _null():
    from .null import NullBackend
    return NullBackend()


def _devsim():
    from .devsim import DevSimBackend
    return DevSimBackend(get_backend("cpu"))


def _cuda():
    from .cuda import CUDABackend
    return CUDABackend()


# The numbers are fixed for good (tests/unit/test_executable_interface.py holds them).
register_backend("cpu", _cpu, device_kind=0)
register_backend("null", _null, device_kind=0)
register_backend("devsim", _devsim, device_kind=2)
register_backend("cuda", _cuda, device_kind=1, cuda_array_interface=True)
