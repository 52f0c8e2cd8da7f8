# The CPU backend's library routines (csrc/library.c): their addresses for an executable's
# library table, and the registration of the BLAS/LAPACK entry points they call.
from libc.stdint cimport intptr_t, int64_t

cdef extern from "csrc/library.h" nogil:
    ctypedef int (*fl_library_fn)(const int64_t *operands, const int64_t *slots)
    int fl_library_null(const int64_t *operands, const int64_t *slots)
    fl_library_fn fl_library_routine(int routine)
    int fl_library_register(const char *name, void *fn, int ilp64)
    const char *fl_library_missing(int routine)


def routine_address(int routine):
    """The address of library routine `routine` (a _launch.Routine), or 0."""
    return <intptr_t>fl_library_routine(routine)


def register(str name, intptr_t address, bint ilp64=False):
    """Give the routines the BLAS/LAPACK entry point `name` (sgemm, dgetrf...: the LP64 name);
    ilp64: it takes 64-bit integers."""
    if address == 0 or fl_library_register(name.encode(), <void *>address, ilp64) != 0:
        raise ValueError(f"no library entry point {name!r}")


def missing(int routine):
    """The name of an entry point routine `routine` needs that is not registered, or None."""
    cdef const char *name = fl_library_missing(routine)
    return None if name == NULL else name.decode()
