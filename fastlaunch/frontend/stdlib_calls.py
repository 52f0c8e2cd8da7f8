"""Python's `random` and `time` functions called while a thread traces: their result is
computed once, then, and frozen into the program, so every call of the compiled function
sees that one value.  While any thread traces, the module functions (and names a traced
function's module imported from them) are swapped for entry points that call the original
and, in a tracing thread, warn once per trace and module (`FrozenValueWarning`) naming the
call.  Calls from fastlaunch's own code (its timers) are not the user's and pass."""
from __future__ import annotations

import random
import sys
import time
import warnings

from ..errors import FrozenValueWarning
from .interception import Interception
from .trace import current_graph, tracing

RANDOM = ("random", "uniform", "randint", "randrange", "choice", "choices", "shuffle",
          "sample", "gauss", "normalvariate", "lognormvariate", "expovariate",
          "vonmisesvariate", "gammavariate", "betavariate", "paretovariate", "weibullvariate",
          "triangular", "getrandbits", "randbytes", "binomialvariate")
TIME = ("time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
        "process_time", "process_time_ns", "thread_time", "thread_time_ns", "localtime",
        "gmtime", "ctime")

_ADVICE = {
    "random": "draw random numbers with np.random.* or np.random.default_rng() inside the "
              "function (fresh on every call), or pass the value as an argument",
    "time": "pass the time as an argument, or read it outside the compiled function",
}


def _entry(module: str, name: str, original):
    def call(*args, **kwargs):
        if tracing():
            caller = sys._getframe(1)
            if caller.f_globals.get("__name__", "").split(".", 1)[0] != "fastlaunch":
                _warn(f"{module}.{name}", module, caller)
        return original(*args, **kwargs)
    call.__name__ = name
    call.__qualname__ = getattr(original, "__qualname__", name)
    call.__doc__ = original.__doc__
    call.__wrapped__ = original
    return call


def _warn(what: str, module: str, frame):
    warned = current_graph().warned
    if module in warned:
        return
    warned.add(module)
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    warnings.warn(f"{what}() was called while tracing (at {where}): its result is computed "
                  f"once, now, and frozen into the program, so every call of the compiled "
                  f"function uses this same value; {_ADVICE[module]}", FrozenValueWarning,
                  stacklevel=3)


def _entries():
    out = []
    for module, names in ((random, RANDOM), (time, TIME)):
        for name in names:
            original = getattr(module, name, None)
            if original is not None:
                out.append((module, name, _entry(module.__name__, name, original)))
    return out


# while a thread traces: the entry points in `random` and `time`, and in `namespace` (the
# traced function's globals) for names imported from them
intercepting = Interception(_entries).active
