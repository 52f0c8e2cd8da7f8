"""Device arrays: `to_device` puts a NumPy array into a device backend's memory.

A `DeviceArray` (defined in _core, so that the replay path encodes it without importing any
backend) binds to a function compiled for its backend without a copy; the results of such a
call are DeviceArrays too, and `.numpy()` copies one back.  Arrays of other libraries that
expose `__cuda_array_interface__` (CuPy, PyTorch) are taken as they are by backend="cuda".
"""
from __future__ import annotations

import numpy as np

from . import env
from ._core import DeviceArray
from .backends import get_backend

__all__ = ["DeviceArray", "to_device"]


def to_device(arr, backend: str | None = None) -> DeviceArray:
    """A DeviceArray holding a copy of `arr` in the memory of `backend` ("cuda", or "devsim"
    for tests; None: FASTLAUNCH_BACKEND, else cuda).  A compiled function given one binds it
    without a copy and returns DeviceArrays; `.numpy()` copies one back.

    Example (on the devsim test backend; with a GPU: backend="cuda"):
        >>> import numpy as np, fastlaunch as fl
        >>> x = fl.to_device(np.arange(3.0), "devsim")
        >>> twice = fl.compile(lambda a: a * 2, backend="devsim")
        >>> twice(x).numpy()
        array([0., 2., 4.])
    """
    name = backend or env.backend_name() or "cuda"
    be = get_backend(name)
    if not hasattr(be, "to_device"):      # an optional member (backends/base.py)
        raise ValueError(f"backend {name!r} has no device memory (device arrays need 'cuda', "
                         f"or 'devsim' in tests)")
    a = np.asarray(arr)
    if a.dtype.kind not in "biufc":
        raise TypeError(f"to_device: dtype {a.dtype} is not supported")
    return be.to_device(a)
