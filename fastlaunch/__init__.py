"""fastlaunch: trace a NumPy function once per signature, replay its fused kernels from bytecode."""
from ._version import __version__  # noqa: E402

from .errors import BackendUnavailableError, CUDAError, TracingError  # noqa: E402
from .device import DeviceArray, to_device  # noqa: E402
from .jit import Compiled, Lowered, RetraceWarning, StaticArraysWarning, compile  # noqa: E402
from .saved import LoadedProgram, SavedProgramError, load  # noqa: E402
from .numpy_api import asarray  # noqa: E402
from .pytree import register_class  # noqa: E402

__all__ = ["compile", "load", "asarray", "register_class", "Compiled", "Lowered", "LoadedProgram",
           "TracingError", "RetraceWarning", "StaticArraysWarning", "SavedProgramError", "DeviceArray", "to_device",
           "BackendUnavailableError", "CUDAError", "__version__"]
