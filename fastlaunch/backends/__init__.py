"""Backends, found by name.

A backend turns kernel descriptions into callable kernels for the interpreter:
`compile(kernel) -> CompiledKernel` (a function address with the kernel ABI, and its source)
and `source(kernel)` for introspection.  Host backends share the interpreter's memory pool,
so they need no allocation or copy hooks of their own.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

_FACTORIES: dict = {}
_INSTANCES: dict = {}
_LOCK = threading.Lock()


@dataclass
class CompiledKernel:
    name: str
    address: int
    source: str               # the kernel's source (LLVM IR text for the CPU)
    seconds: float = 0.0      # time spent compiling (0 on a cache hit)
    origin: str = "compiled"  # compiled | memory | disk
    key: str = ""             # cache key: hash of the source and the target
    obj: bytes = b""          # machine code, for saved programs


def register_backend(name: str, factory):
    _FACTORIES[name] = factory


def get_backend(name: str):
    with _LOCK:
        backend = _INSTANCES.get(name)
        if backend is None:
            factory = _FACTORIES.get(name)
            if factory is None:
                raise ValueError(f"unknown fastlaunch backend {name!r}; "
                                 f"known: {', '.join(sorted(_FACTORIES))}")
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


register_backend("cpu", _cpu)
register_backend("null", _null)
