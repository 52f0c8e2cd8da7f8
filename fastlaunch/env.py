"""The FASTLAUNCH_* environment variables, read and checked in one place.

A bad value raises EnvironmentVariableError (a ValueError) naming the variable, its value and
what is expected; unset or empty means the default.  When each is read, and why then:

FASTLAUNCH_NUM_THREADS, FASTLAUNCH_POOL_LIMIT_MB
    when fastlaunch._core is imported (so `import fastlaunch` raises).  They configure the C
    runtime, which reads them without the GIL, at the first large launch or the first freed
    block, deep inside some later call: nothing can be raised there, and a typo would
    otherwise pass silently or fail far from its cause.  Changing them after the import has
    no effect.
FASTLAUNCH_BACKEND
    when a compiled function without an explicit backend is first traced (backends.
    get_backend), not at import: backends may be registered after fastlaunch is imported.
FASTLAUNCH_LOG
    at each trace (it may be switched on and off while a program runs).  An unrecognised
    value warns and logs, rather than raising: a logging switch must not stop a computation.
FASTLAUNCH_CACHE_DIR
    when a backend opens its kernel disk cache (cache.default_cache_dir): any folder; ""
    disables the disk cache (the one variable whose empty value is not its default).
FASTLAUNCH_CACHE_TRUST
    when the cache folder is checked (backends/cache.py): "shared" trusts a folder other users can
    write; "private" (the default) refuses one (docs/security.md).
FASTLAUNCH_MATH
    when the CPU backend is created (the first CPU compile): "auto" (the default: the exp and
    log families as inlined polynomials, codegen/vmath.py, sin/cos/tanh from glibc's
    libmvec), "inline" (all of them inlined) or "libm" (glibc's libm and libmvec, bit for
    bit).  It is part of the backend's target key, so cached kernels of the modes never mix.
FASTLAUNCH_NO_LIBMVEC
    when the CPU backend is created: on (1/true/yes/on) keeps libmvec out (vector math calls
    become scalar libm calls or inline code); for testing those paths.
FASTLAUNCH_BLAS
    when the first program with a library call (matrix product, np.linalg) is linked
    (backends/library.py): "numpy" (the OpenBLAS NumPy itself is linked with, when it is
    NumPy's bundled scipy-openblas64), "scipy" (scipy.linalg.cython_blas/cython_lapack), or
    unset: NumPy's where available, else SciPy's.
FASTLAUNCH_CUDA_ARCH
    when the CUDA backend is created: the GPU arch kernels are compiled for ("sm_80", ...;
    the backend checks it is one it knows); unset: the device's, else sm_90.
FASTLAUNCH_LIBDEVICE, FASTLAUNCH_PTXAS
    when the CUDA backend is created: the path of libdevice.10.bc (a file) and of ptxas (an
    executable); "" says there is none (kernels that call math functions do not lower;
    the driver compiles the PTX); unset: looked for in the nvidia wheels and the toolkit.
FASTLAUNCH_LIBCUDA
    when the CUDA driver is first opened (_cuda.driver_error): the driver library to dlopen;
    unset: libcuda.so.1.

Nothing here imports the rest of fastlaunch (_core imports this module while it loads).
"""
from __future__ import annotations

import os
import re
import warnings

__all__ = ["EnvironmentVariableError", "num_threads", "pool_limit_bytes", "log_enabled",
           "backend_name", "math_mode", "MATH_MODES", "blas_choice", "DEFAULT_POOL_LIMIT_MB",
           "MAX_POOL_LIMIT_MB", "cache_dir", "cache_trust", "no_libmvec", "cuda_arch",
           "libdevice_path", "ptxas_path", "libcuda_path"]

DEFAULT_POOL_LIMIT_MB = 4096
MAX_POOL_LIMIT_MB = (2**63 - 1) >> 20          # the limit in bytes must fit an int64

_WHOLE = re.compile(r"\+?[0-9]+")
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


class EnvironmentVariableError(ValueError):
    """A FASTLAUNCH_* environment variable has a value fastlaunch cannot use."""


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value


def _whole(name: str, lo: int, hi: int, expected: str) -> int | None:
    value = _raw(name)
    if value is None:
        return None
    if not _WHOLE.fullmatch(value.strip()) or not lo <= int(value) <= hi:
        raise EnvironmentVariableError(f"environment variable {name}={value!r}: expected "
                                       f"{expected}")
    return int(value)


def num_threads(max_threads: int) -> int:
    """FASTLAUNCH_NUM_THREADS: the worker pool's size, counting the calling thread; 0 when
    unset (every available CPU)."""
    n = _whole("FASTLAUNCH_NUM_THREADS", 1, max_threads,
               f"a whole number of threads from 1 to {max_threads} (unset: every available "
               f"CPU)")
    return 0 if n is None else n


def pool_limit_bytes() -> int:
    """FASTLAUNCH_POOL_LIMIT_MB: how many bytes of freed temporaries and results the memory
    pool keeps for reuse (0: none)."""
    mb = _whole("FASTLAUNCH_POOL_LIMIT_MB", 0, MAX_POOL_LIMIT_MB,
                f"a whole number of megabytes from 0 (keep nothing) to {MAX_POOL_LIMIT_MB} "
                f"(unset: {DEFAULT_POOL_LIMIT_MB})")
    return (DEFAULT_POOL_LIMIT_MB if mb is None else mb) << 20


_warned_log: set = set()


def log_enabled() -> bool:
    """FASTLAUNCH_LOG: whether each trace's kernels and compile times go to stderr."""
    value = _raw("FASTLAUNCH_LOG")
    if value is None:
        return False
    word = value.strip().lower()
    if word in _OFF:
        return False
    if word not in _ON and value not in _warned_log:
        _warned_log.add(value)
        warnings.warn(f"environment variable FASTLAUNCH_LOG={value!r}: expected one of "
                      f"{', '.join(_ON)} (on) or {', '.join(_OFF)} (off); logging is on",
                      RuntimeWarning, stacklevel=2)
    return True


def backend_name() -> str | None:
    """FASTLAUNCH_BACKEND, or None when unset (backends.get_backend checks the name)."""
    value = _raw("FASTLAUNCH_BACKEND")
    return None if value is None else value.strip()


MATH_MODES = ("auto", "inline", "libm")


def math_mode() -> str:
    """FASTLAUNCH_MATH: how the CPU backend computes transcendental functions."""
    value = _raw("FASTLAUNCH_MATH")
    if value is None:
        return "auto"
    word = value.strip().lower()
    if word not in MATH_MODES:
        raise EnvironmentVariableError(f"environment variable FASTLAUNCH_MATH={value!r}: "
                                       f"expected one of {', '.join(MATH_MODES)} (unset: "
                                       f"auto)")
    return word


def blas_choice() -> str | None:
    """FASTLAUNCH_BLAS: "numpy", "scipy", or None when unset (the default order)."""
    value = _raw("FASTLAUNCH_BLAS")
    if value is None:
        return None
    if value.strip().lower() not in ("numpy", "scipy"):
        raise EnvironmentVariableError(f"environment variable FASTLAUNCH_BLAS={value!r}: "
                                       f"expected 'numpy' or 'scipy'")
    return value.strip().lower()


def _switch(name: str) -> bool:
    """An on/off variable: unset or off words are False, on words True, anything else an
    error."""
    value = _raw(name)
    if value is None or value.strip().lower() in _OFF:
        return False
    if value.strip().lower() not in _ON:
        raise EnvironmentVariableError(f"environment variable {name}={value!r}: expected one "
                                       f"of {', '.join(_ON)} (on) or {', '.join(_OFF)} (off)")
    return True


def cache_dir() -> str | None:
    """FASTLAUNCH_CACHE_DIR as set: None when unset, "" when set empty (no disk cache)."""
    value = os.environ.get("FASTLAUNCH_CACHE_DIR")
    if value is None or not value.strip():
        return value if value is None else ""
    return value


def cache_trust() -> str:
    """FASTLAUNCH_CACHE_TRUST: "private" (the default) or "shared"."""
    value = _raw("FASTLAUNCH_CACHE_TRUST")
    if value is None:
        return "private"
    word = value.strip().lower()
    if word not in ("private", "shared"):
        raise EnvironmentVariableError(f"environment variable FASTLAUNCH_CACHE_TRUST="
                                       f"{value!r}: expected 'shared' or 'private' (unset: "
                                       f"private)")
    return word


def no_libmvec() -> bool:
    """FASTLAUNCH_NO_LIBMVEC: whether the CPU backend leaves libmvec out."""
    return _switch("FASTLAUNCH_NO_LIBMVEC")


_ARCH = re.compile(r"sm_[0-9]+a?")


def cuda_arch() -> str | None:
    """FASTLAUNCH_CUDA_ARCH ("sm_80", ...), or None when unset (the CUDA backend checks that
    it knows the arch)."""
    value = _raw("FASTLAUNCH_CUDA_ARCH")
    if value is None:
        return None
    if not _ARCH.fullmatch(value.strip()):
        raise EnvironmentVariableError(f"environment variable FASTLAUNCH_CUDA_ARCH={value!r}: "
                                       f"expected a GPU arch such as sm_80 or sm_90a")
    return value.strip()


def _tool(name: str, what: str, usable) -> str | None:
    """A tool's path: None when unset, "" when set empty (there is none), else a path that
    `usable` accepts."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return value if value is None else ""
    if not usable(value):
        raise EnvironmentVariableError(f"environment variable {name}={value!r}: expected the "
                                       f"path of {what} (\"\": none)")
    return value


def libdevice_path() -> str | None:
    """FASTLAUNCH_LIBDEVICE: None when unset, "" for none, else the path of a file."""
    return _tool("FASTLAUNCH_LIBDEVICE", "libdevice.10.bc", os.path.isfile)


def ptxas_path() -> str | None:
    """FASTLAUNCH_PTXAS: None when unset, "" for none, else the path of an executable."""
    return _tool("FASTLAUNCH_PTXAS", "ptxas (an executable file)",
                 lambda p: os.path.isfile(p) and os.access(p, os.X_OK))


def libcuda_path() -> str | None:
    """FASTLAUNCH_LIBCUDA: the driver library to open, or None (libcuda.so.1).  Not checked
    here: dlopen's own message says why a path does not load."""
    return _raw("FASTLAUNCH_LIBCUDA")
