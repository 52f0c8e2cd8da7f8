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


# What the shared dispatch loop reads (_interp.pxi's run_loop).  A backend passes
# &self.bytecode on to run_loop and reads none of it.
cdef struct Bytecode:
    const int64_t *code
    Py_ssize_t ncode
    const int64_t *lists


# The slots whose memory a backend owns: it puts the call's error word in `status`, frees
# what a failed run left in `temps` (release), and binds its own results to `outputs` when
# they stay in its memory (bind_outputs).
cdef struct BackendSlots:
    Py_ssize_t status              # the error word's slot, or -1
    const int64_t *temps
    Py_ssize_t ntemps
    const int64_t *outputs         # one per program output
    Py_ssize_t noutputs


# The dispatcher's own tables (argument checks, constants, random key, result packing):
# defined and read in _core.pyx alone, an incomplete type to every other module.
cdef struct CallTables


cdef class Executable:
    """A verified program bound to a backend's kernels and memory: one call's work.

    The base class does what is the same on every backend: argument checks, the slot table,
    host result arrays and the packing of results (`call`, _core's own).  A backend sees the
    bytecode (to hand to run_loop), the slots whose memory it owns and the program, and
    implements `execute` (the bytecode run from state.start, without the GIL, returning a
    Status; a run that stopped at a POLL may be resumed just after it with its slots as it
    left them), `release` (memory a failed run left allocated), `read_status` (the
    KernelError bits, wherever the status word lives), and may override `bind_outputs`
    (results in its memory) and `error` (its own error codes; `kernel_error` maps a status
    word's bits to the exception the program defines)."""
    cdef Bytecode bytecode
    cdef BackendSlots owned
    cdef readonly object program       # the bytecode.Program (disassembly for error messages)
    cdef CallTables *call

    cdef int execute(self, int64_t *slots, int64_t *argwords, RunState *state) except -1 nogil
    cdef int release(self, int64_t *slots) except -1
    cdef int64_t read_status(self, int64_t *slots) except? -1
    cdef int bind_outputs(self, PyObject **outs, int64_t *slots) except -1
    cdef object error(self, int status, RunState *state, int64_t *slots)
    cdef object kernel_error(self, int64_t word, str where)


# The host runtime's services other backends' executables share (one process-wide instance:
# the interrupt flag lives in _core, so a backend module must not link its own copy).
cdef int interrupt_pending() noexcept nogil
