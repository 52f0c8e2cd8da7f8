"""The host backends' library table: the LIBCALL routines (csrc/library.c, built as
fastlaunch._library) and the BLAS/LAPACK entry points they call.

The entry points are scipy's: `scipy.linalg.cython_blas` and `scipy.linalg.cython_lapack`
export every routine as a C function pointer (a PyCapsule in `__pyx_capi__`) with the Fortran
LP64 conventions, a documented and stable interface, whatever BLAS scipy was built with.
They are resolved once, when the first program with a library call is linked; a program
without one never imports scipy.

Threading: BLAS runs on the interpreter's thread and its own thread pool (OpenBLAS: its own
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS), separate from fastlaunch's worker pool
(FASTLAUNCH_NUM_THREADS).  The two never run at once within one call: a LIBCALL returns
before the next LAUNCH starts.
"""
from __future__ import annotations

import ctypes
import threading

from .._launch import Routine
from ..bytecode import ROUTINES

# the BLAS/LAPACK entry points the routines call (library.c's entry_names)
_BLAS = ("sgemm", "dgemm")
_LAPACK = ("sgetrf", "dgetrf", "sgesv", "dgesv", "spotrf", "dpotrf",
           "ssyevd", "dsyevd")
_lock = threading.Lock()
_registered = False


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


def _register():
    global _registered
    with _lock:
        if _registered:
            return
        from .. import _library
        try:
            from scipy.linalg import cython_blas, cython_lapack
        except ImportError as err:
            raise LibraryUnavailableError(
                f"fastlaunch: matrix products and np.linalg need SciPy's BLAS/LAPACK "
                f"(pip install scipy): {err}") from None
        for module, names in ((cython_blas, _BLAS), (cython_lapack, _LAPACK)):
            for name in names:
                capsule = module.__pyx_capi__.get(name)
                if capsule is None:
                    raise LibraryUnavailableError(f"fastlaunch: scipy's {module.__name__} has "
                                                  f"no {name}")
                _library.register(name, _capsule_pointer(capsule))
        _registered = True


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
