"""The executable of a host backend (cpu, null): kernels are function addresses with the CPU
kernel ABI, run by _core's host interpreter."""
from __future__ import annotations

import numpy as np

from .. import _core
from .base import ExecutableLayout, LinkError


def host_executable(layout: ExecutableLayout, kernels: list,
                    library_addresses=()) -> _core.Executable:
    """params[0] of each kernel is its work per launch index, params[1] the threads its
    schedule gives it (one where absent).  library_addresses: the backend's LIBCALL table
    (one routine address per _launch.Routine)."""
    program = layout.program
    work = [k.params[0] if k.params else 1 for k in program.kernels]
    if any(type(w) is not int or not -1 <= w < (1 << 62) for w in work):
        raise LinkError(f"kernel work estimates {work} out of range")
    threads = [k.params[1] if len(k.params) > 1 else 1 for k in program.kernels]
    if any(type(t) is not int or not 1 <= t <= (1 << 16) for t in threads):
        raise LinkError(f"kernel thread counts {threads} out of range")
    return _core.HostExecutable(layout, [k.address for k in kernels], np.asarray(work, np.int64),
                                np.asarray(threads, np.int64), library_addresses)
