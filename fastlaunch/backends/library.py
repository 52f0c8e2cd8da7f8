"""The host backends' library table: the LIBCALL routines (csrc/library.c, built as
fastlaunch._library) and the BLAS/LAPACK entry points they call.

Where the entry points come from (FASTLAUNCH_BLAS chooses; by default the first that works):

* "numpy": the OpenBLAS NumPy itself is linked with, when that is NumPy's bundled
  scipy-openblas64 (the PyPI wheels): found among the loaded libraries (/proc/self/maps),
  its ILP64 symbols (`scipy_sgemm_64_`...) called through adapters.  One BLAS, one thread pool
  and the same kernels as np.matmul: a second OpenBLAS's spinning threads would compete with
  NumPy's on the same cores.
* "scipy": `scipy.linalg.cython_blas` / `cython_lapack`, which export every routine as a C
  function pointer (a PyCapsule in `__pyx_capi__`) with the Fortran LP64 conventions: a
  documented, stable interface, whatever BLAS SciPy was built with (a dependency).

They are resolved once, when the first program with a library call is linked; a program
without one never looks for a BLAS.

Threading: BLAS runs on the interpreter's thread and its own thread pool (OpenBLAS:
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS), separate from fastlaunch's worker pool
(FASTLAUNCH_NUM_THREADS, which does not limit BLAS).  The two never run at once within one
call: a LIBCALL returns before the next LAUNCH starts.  To pin both, set both.
"""
from __future__ import annotations

import ctypes
import os

from .. import env, forking

from .._launch import Routine
from ..program.bytecode import ROUTINES

# the BLAS/LAPACK entry points the routines call (library.c's entry_names)
_BLAS = ("sgemm", "dgemm", "sgemv", "dgemv")
_LAPACK = ("sgetrf", "dgetrf", "sgesv", "dgesv", "spotrf", "dpotrf",
           "ssyevd", "dsyevd", "sgesdd", "dgesdd", "sgelsd", "dgelsd")
_lock = forking.lock(forking.TABLE)
_registered = None          # which BLAS the routines were given ("numpy" or "scipy")


class LibraryUnavailableError(RuntimeError):
    """The BLAS/LAPACK a program's library call needs cannot be found."""


def _capsule_pointer(capsule) -> int:
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule)) or 0


def _numpy_openblas():
    """The entry points of NumPy's bundled scipy-openblas64 as {LP64 name: address}, or None
    when NumPy is not linked with it (another BLAS, or not found)."""
    import numpy as np
    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:          # noqa: BLE001 - an older or unusual NumPy: use SciPy's
        return None
    if info.get("name") != "scipy-openblas" or \
            "USE64BITINT" not in str(info.get("openblas configuration", "")):
        return None
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libscipy_openblas64_" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if not os.path.basename(path).startswith("libscipy_openblas64_"):
            continue
        try:
            lib = ctypes.CDLL(path)        # the copy already loaded: the same handle
            return {n: ctypes.cast(getattr(lib, f"scipy_{n}_64_"), ctypes.c_void_p).value
                    for n in _BLAS + _LAPACK}
        except (OSError, AttributeError):
            continue
    return None


def _scipy_entries():
    try:
        from scipy.linalg import cython_blas, cython_lapack
    except ImportError as err:
        raise LibraryUnavailableError(
            f"fastlaunch: matrix products and np.linalg need a BLAS/LAPACK: NumPy's bundled "
            f"OpenBLAS was not found and SciPy's cannot be imported (pip install scipy): "
            f"{err}") from None
    out = {}
    for module, names in ((cython_blas, _BLAS), (cython_lapack, _LAPACK)):
        for name in names:
            capsule = module.__pyx_capi__.get(name)
            if capsule is None:
                raise LibraryUnavailableError(f"fastlaunch: scipy's {module.__name__} has "
                                              f"no {name}")
            out[name] = _capsule_pointer(capsule)
    return out


def _register() -> str:
    global _registered
    with _lock:
        if _registered is not None:
            return _registered
        from .. import _library
        choice = env.blas_choice()
        entries, ilp64, which = None, False, "scipy"
        if choice in (None, "numpy"):
            entries = _numpy_openblas()
            if entries is not None:
                ilp64, which = True, "numpy"
            elif choice == "numpy":
                raise LibraryUnavailableError(
                    "fastlaunch: FASTLAUNCH_BLAS=numpy, but NumPy is not linked with its "
                    "bundled scipy-openblas64 (set FASTLAUNCH_BLAS=scipy)")
        if entries is None:
            entries = _scipy_entries()
        for name, address in entries.items():
            _library.register(name, address, ilp64)
        _registered = which
        return which


def blas_in_use() -> str | None:
    """"numpy" or "scipy": whose BLAS the library routines call (None before the first)."""
    return _registered


def routine_addresses(program) -> list:
    """The executable's library table for `program`: one address per Routine (empty when the
    program makes no library call)."""
    used = program.library_routines()
    if not used:
        return []
    _register()
    from .. import _library
    for r in used:
        missing = _library.missing(r)
        if missing is not None:
            raise LibraryUnavailableError(
                f"fastlaunch: library routine {ROUTINES[Routine(r)].name} needs {missing}, "
                f"which is not available")
    return [_library.routine_address(i) for i in range(int(Routine.LIB_COUNT))]
