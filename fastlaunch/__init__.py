"""fastlaunch: trace a NumPy function once per signature, replay its fused kernels from bytecode."""
from ._version import __version__  # noqa: E402

from .errors import (BackendUnavailableError, CUDAError, FrozenValueWarning,  # noqa: E402
                     TracingError)
from .device import DeviceArray, to_device  # noqa: E402
from .jit import (Compiled, Lowered, RetraceWarning, StaticArraysWarning,  # noqa: E402
                  UnrolledLoopWarning, compile)
from .program.saved import LoadedIteration, LoadedProgram, SavedProgramError, load  # noqa: E402
from .frontend.numpy.creation import asarray  # noqa: E402
from .frontend.pytree import register_class  # noqa: E402
from .iterate import Iterated, iterate, iterated  # noqa: E402
from .grad import (custom_jvp, custom_vjp, grad, jvp, stop_gradient, value_and_grad,  # noqa: E402
                   vjp)

__all__ = ["compile", "load", "asarray", "register_class", "iterate", "iterated", "grad",
           "value_and_grad", "vjp", "jvp", "stop_gradient", "custom_vjp", "custom_jvp", "Compiled",
           "Iterated", "Lowered", "LoadedProgram", "LoadedIteration", "TracingError",
           "RetraceWarning", "StaticArraysWarning", "UnrolledLoopWarning", "FrozenValueWarning",
           "SavedProgramError", "DeviceArray",
           "to_device", "BackendUnavailableError", "CUDAError", "__version__"]
