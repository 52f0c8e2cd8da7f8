"""Backends, found by name.  The interface every backend implements is in base.py."""
from __future__ import annotations

from .. import env, forking
from .base import CallLayout, CompiledKernel, MemoryModel  # noqa: F401  (re-exported)

_FACTORIES: dict = {}
_INSTANCES: dict = {}
_LOCK = forking.lock(forking.FACTORY)  # a factory may get another backend (devsim: the cpu)


def register_backend(name: str, factory):
    _FACTORIES[name] = factory


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


register_backend("cpu", _cpu)
register_backend("null", _null)
register_backend("devsim", _devsim)
register_backend("cuda", _cuda)
