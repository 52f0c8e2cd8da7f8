"""Exceptions raised by fastlaunch."""
from __future__ import annotations

import contextlib
import threading

_seen = threading.local()


class TracingError(Exception):
    """The traced function did something that cannot be recorded as a static array program.

    Every TracingError created while a trace runs is noted (see `noting_errors`): if the traced
    code catches one and goes on, the trace would record whatever fallback it took instead of
    what the user asked for, so that trace is refused (jit.py)."""

    def __init__(self, *args):
        super().__init__(*args)
        noted = getattr(_seen, "errors", None)
        if noted is not None:
            noted.append(self)


@contextlib.contextmanager
def noting_errors():
    """Collect the TracingErrors created in this thread inside the block (nested blocks each
    see their own)."""
    previous = getattr(_seen, "errors", None)
    _seen.errors = noted = []
    try:
        yield noted
    finally:
        _seen.errors = previous
        if previous is not None:
            # an error of a nested trace that escapes it reaches the enclosing traced code,
            # which may catch it in turn
            previous.extend(noted)


def caught_where(err: BaseException) -> str:
    """file:line of the frame that caught `err`: the outermost entry of its traceback, which
    is the frame the exception stopped in."""
    tb = err.__traceback__
    if tb is None:
        return "an unknown place"
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno} (in {tb.tb_frame.f_code.co_name})"


class FrozenValueWarning(UserWarning):
    """A Python function whose result changes from call to call (`random.random()`,
    `time.time()`) was called while tracing: its value is frozen into the program."""


class BackendUnavailableError(RuntimeError):
    """A backend that this process cannot run on: backend="cuda" without an NVIDIA driver, a
    GPU, or fastlaunch's CUDA extension.  Lowering (`Compiled.lower`) still works."""


class CUDAError(RuntimeError):
    """A CUDA driver call failed while a program ran: `code` is the CUresult, `name` its enum
    name (CUDA_ERROR_...).  The message ends with the failing bytecode instruction."""

    def __init__(self, message: str, code: int = 0, name: str = ""):
        super().__init__(message)
        self.code = code
        self.name = name


class SavedProgramError(ValueError):
    """A saved program file that cannot be used: wrong format version, corrupted, truncated,
    or tables, kernels or bytecode that do not pass the checks."""
