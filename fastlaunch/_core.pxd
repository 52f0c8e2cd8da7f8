# The executable interface: what the dispatcher (Dispatcher, Entry) calls, and what every
# backend's executable implements.  Declarations only; the host implementation is in
# _core.pyx, other backends' executables live in their own extension modules and cimport
# this file (so that `import fastlaunch` never loads a device driver).
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint64_t

cimport numpy as cnp

from fastlaunch._launch cimport RunState, fl_library_fn


cdef class OutputLayout:
    """Dtypes and shapes of a call's fresh host result arrays; allocates them."""
    cdef Py_ssize_t n
    cdef int *types
    cdef int *ndims
    cdef Py_ssize_t *nbytes
    cdef cnp.npy_intp *dims
    cdef int allocate(self, PyObject **outs, int64_t *slots, const int64_t *out_slots) except -1


cdef class DeviceArray:
    """An array in a device backend's memory (fastlaunch.DeviceArray).  Binds to a compiled
    function without copies; results of a call with one stay on the device."""
    cdef readonly int64_t ptr          # device address of element 0
    cdef readonly tuple shape
    cdef readonly tuple strides        # in bytes
    cdef readonly object dtype
    cdef readonly str device           # the backend whose memory it is ("cuda", "devsim")
    cdef readonly bint writeable
    cdef readonly object memory        # keeps the memory alive; .read(address, nbytes)
    cdef int64_t *sig                  # its signature words (tag, dims, strides)
    cdef Py_ssize_t nsig


# A DeviceArray shaped like `like` at another address (results: made per call, so without
# the Python-level constructor's checks).
cdef DeviceArray device_array_like(DeviceArray like, int64_t ptr, object memory)

# The LIBCALL table of an executable (malloc'd, LIB_COUNT entries; the caller frees it): one
# routine address per _launch.Routine, resolved by the backend at link time.
cdef fl_library_fn *library_table(object program, object library_addresses) except NULL


cdef class Executable:
    """A verified program bound to a backend's kernels and memory: one call's work.

    The base class does what is the same on every backend: argument checks, the slot table,
    host result arrays and the packing of results.  A backend implements `execute` (the
    bytecode run from state.start, without the GIL, returning a Status; a run that stopped at
    a POLL may be resumed just after it with its slots as it left them), `release` (memory a
    failed run left allocated) and `read_status` (the KernelError bits, wherever the status
    word lives)."""
    cdef int64_t *code
    cdef Py_ssize_t ncode
    cdef int64_t *lists
    cdef Py_ssize_t nslots, nargwords, nleaves
    cdef int64_t *const_slots
    cdef int64_t *const_ptrs
    cdef Py_ssize_t nconsts
    cdef int64_t *temp_slots
    cdef Py_ssize_t ntemps
    cdef int64_t *out_slots
    cdef OutputLayout outputs
    cdef int64_t *int_checks           # (leaf, lo, hi) triples: weak Python ints cast narrower
    cdef Py_ssize_t nint_checks
    cdef int64_t *mutated              # leaves written in place
    cdef Py_ssize_t nmutated
    cdef int64_t *leaf_lo              # per leaf: byte range [lo, hi) it addresses relative
    cdef int64_t *leaf_hi              # to its pointer (hi <= lo: not an array)
    cdef Py_ssize_t status_slot        # slot pointing at the call's error word, or -1
    cdef Py_ssize_t rng_slot           # slot of the call's random key, or -1
    cdef uint64_t rng_seed             # the executable's random seed...
    cdef uint64_t rng_calls            # ...and the calls made: each call's key hashes both
    cdef Py_ssize_t nresults
    cdef int *res_kind                 # ResultKind per result leaf
    cdef int64_t *res_index            # output index, argument leaf, or index in res_values
    cdef bint *res_scalar              # hand a 0-d output back as a NumPy scalar
    cdef list res_values
    cdef int structure                 # ResultStructure
    cdef object unflatten
    cdef readonly object program       # the bytecode.Program (disassembly for error messages)
    cdef object kernel_errors          # [(KernelError bit, exception class, message)]
    cdef object keepalive
    cdef bint polls                    # the code has POLL instructions
    cdef bint copies_back              # arguments updated in place are copied back whole

    cdef object invoke(self, int64_t *leaf_words, PyObject **leaf_objs)
    cdef int execute(self, int64_t *slots, int64_t *argwords, RunState *state) except -1 nogil
    cdef int release(self, int64_t *slots) except -1
    cdef int64_t read_status(self, int64_t *slots) except? -1
    cdef int bind_outputs(self, PyObject **outs, int64_t *slots) except -1
    cdef object error(self, int status, RunState *state, int64_t *slots)
    cdef int _check_ints(self, int64_t *leaf_words) except -1
    cdef int _check_mutated(self, int64_t *leaf_words, PyObject **leaf_objs) except -1
    cdef object _pack(self, PyObject **outs, PyObject **leaf_objs)
    cdef object _take(self, Py_ssize_t i, PyObject **outs, PyObject **leaf_objs)


# The host runtime's services other backends' executables share (one process-wide instance:
# the interrupt flag lives in _core, so a backend module must not link its own copy).
cdef int interrupt_pending() noexcept nogil
