# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The test-only "device-space" backend's executable: host kernels run on memory that stands
for a device's.

It lives in its own extension module and cimports _core's executable interface, exactly as a
real device backend does (the CUDA one must, so that `import fastlaunch` never loads a
driver).  Its device memory is a separate allocator (counted, so tests see leaks), values
reach it only through TO_DEVICE / TO_HOST, and the status word lives there too: every path a
device backend needs runs in CI without a GPU, computing real results.
"""
from libc.stdint cimport int64_t, intptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove, memset

from cpython.ref cimport PyObject, Py_INCREF

from fastlaunch._core cimport (Bytecode, DeviceArray, Executable, device_array_like,
                               interrupt_pending, library_table)
from fastlaunch._launch cimport *

cimport numpy as cnp
import numpy as np

cnp.import_array()

cdef extern from "stdlib.h" nogil:
    void *aligned_alloc(size_t alignment, size_t size)

cdef extern from *:
    """
    #include <stdint.h>
    /* device bytes allocated and not freed, and allocations made ever (atomic: calls of
       one executable may run in several threads) */
    static int64_t fl_devsim_live_bytes = 0;
    static int64_t fl_devsim_alloc_count = 0;
    static void fl_devsim_count(int64_t nbytes, int64_t allocs) {
        __atomic_fetch_add(&fl_devsim_live_bytes, nbytes, __ATOMIC_RELAXED);
        __atomic_fetch_add(&fl_devsim_alloc_count, allocs, __ATOMIC_RELAXED);
    }
    static int64_t fl_devsim_live(void) { return __atomic_load_n(&fl_devsim_live_bytes, __ATOMIC_RELAXED); }
    static int64_t fl_devsim_allocs(void) { return __atomic_load_n(&fl_devsim_alloc_count, __ATOMIC_RELAXED); }
    """
    void fl_devsim_count(int64_t nbytes, int64_t allocs) nogil
    int64_t fl_devsim_live() nogil
    int64_t fl_devsim_allocs() nogil


cdef inline void *device_alloc(int64_t nbytes) noexcept nogil:
    # A header word in front of the block remembers its size for the live count.
    cdef int64_t total = ((nbytes + 63) // 64) * 64 + 64
    cdef char *p = <char *>aligned_alloc(64, total)
    if p == NULL:
        return NULL
    (<int64_t *>p)[0] = nbytes
    fl_devsim_count(nbytes, 1)
    return p + 64


cdef inline void device_free(void *ptr) noexcept nogil:
    cdef char *p
    if ptr != NULL:
        p = <char *>ptr - 64
        fl_devsim_count(-(<int64_t *>p)[0], 0)
        free(p)


# ---- the interpreter: _interp.pxi's dispatch loop over these hooks -------------------------
# Kernels are host function pointers run on one thread; every buffer they see is device
# memory, which only TO_DEVICE / TO_HOST copy to and from; the status word and a loop's until
# flag live there too, and are read back as a driver would.
ctypedef struct Hooks:
    fl_kernel_fn *kernels
    fl_library_fn *libs


cdef inline int hook_launch(const Hooks *h, const int64_t *ins, int64_t *argwords,
                            RunState *state) noexcept nogil:
    if ins[2] > 0:
        h.kernels[ins[1]](0, ins[2], &argwords[ins[3]])
    return STATUS_OK


cdef inline int hook_alloc(const Hooks *h, const int64_t *ins, int64_t *slots,
                           RunState *state) noexcept nogil:
    cdef void *p = device_alloc(ins[2])
    if p == NULL:
        return STATUS_NO_MEMORY
    slots[ins[1]] = <int64_t><intptr_t>p
    return STATUS_OK


cdef inline int hook_free(const Hooks *h, const int64_t *ins, int64_t *slots,
                          RunState *state) noexcept nogil:
    device_free(<void *><intptr_t>slots[ins[1]])
    slots[ins[1]] = 0
    return STATUS_OK


cdef inline int hook_to_device(const Hooks *h, const int64_t *ins, int64_t *slots,
                               RunState *state) noexcept nogil:
    memcpy(<void *><intptr_t>slots[ins[1]], <void *><intptr_t>slots[ins[2]], ins[3])
    return STATUS_OK


cdef inline int hook_to_host(const Hooks *h, const int64_t *ins, int64_t *slots,
                             RunState *state) noexcept nogil:
    memcpy(<void *><intptr_t>slots[ins[1]], <void *><intptr_t>slots[ins[2]], ins[3])
    return STATUS_OK


cdef inline int hook_copy(const Hooks *h, const int64_t *ins, int64_t *slots,
                          RunState *state) noexcept nogil:
    # a device-to-device copy
    memmove(<void *><intptr_t>slots[ins[1]], <void *><intptr_t>slots[ins[2]], ins[3])
    return STATUS_OK


cdef inline int hook_check(const Hooks *h, const int64_t *ins, int64_t *slots,
                           RunState *state) noexcept nogil:
    cdef int64_t word
    memcpy(&word, <void *><intptr_t>slots[ins[1]], 8)
    if word != 0:
        return STATUS_KERNEL_ERROR
    return STATUS_OK


cdef inline int hook_flag(const Hooks *h, const int64_t *ins, int64_t *slots, char *flag,
                          RunState *state) noexcept nogil:
    memcpy(flag, <void *><intptr_t>slots[ins[1]], 1)
    return STATUS_OK


cdef inline int hook_libcall(const Hooks *h, const int64_t *ins, int64_t *slots,
                             RunState *state) noexcept nogil:
    # the CPU's routines, run on the simulated device's memory (as a device library runs on
    # device buffers: no copies through the host)
    cdef int rc = h.libs[ins[1]](&ins[2], slots)
    if rc != 0:
        state.backend_code = rc
        return STATUS_LIBRARY_ERROR
    return STATUS_OK


cdef inline int hook_poll() noexcept nogil:
    return interrupt_pending()


include "_interp.pxi"


def device_stats():
    """{"live_bytes", "allocations"} of the simulated device (tests check for leaks)."""
    return {"live_bytes": fl_devsim_live(), "allocations": fl_devsim_allocs()}


cdef class DeviceBuffer:
    """A device allocation owned by Python (an executable's constants, its status word)."""
    cdef void *ptr
    cdef readonly Py_ssize_t nbytes

    def __cinit__(self, Py_ssize_t nbytes):
        self.ptr = device_alloc(max(nbytes, 1))
        if self.ptr == NULL:
            raise MemoryError("devsim: out of device memory")
        self.nbytes = nbytes

    def __dealloc__(self):
        device_free(self.ptr)

    @property
    def address(self):
        return <intptr_t>self.ptr

    @staticmethod
    def from_array(arr):
        """A device copy of a host array (TO_DEVICE at link time)."""
        cdef cnp.ndarray a = np.ascontiguousarray(arr)
        cdef DeviceBuffer buf = DeviceBuffer(a.nbytes)
        if a.nbytes:
            memcpy(buf.ptr, cnp.PyArray_DATA(a), a.nbytes)
        return buf

    def read(self, int64_t address, Py_ssize_t nbytes):
        """nbytes from `address` (inside this buffer) as a host uint8 array."""
        cdef cnp.ndarray out
        cdef intptr_t base = <intptr_t>self.ptr
        if nbytes < 0 or address < base or address + nbytes > base + max(self.nbytes, 1):
            raise ValueError("devsim: read outside the buffer")
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            memcpy(cnp.PyArray_DATA(out), <void *><intptr_t>address, nbytes)
        return out


def to_device(arr):
    """A DeviceArray holding a copy of a host array, in devsim memory."""
    a = np.ascontiguousarray(arr)
    buf = DeviceBuffer.from_array(a)
    return DeviceArray(buf.address, a.shape, a.dtype, "devsim", buf)


cdef class DevSimExecutable(Executable):
    """Runs the bytecode with every kernel buffer in device space.  Kernels are host function
    pointers (the CPU backend compiles them), run on one thread."""
    cdef fl_kernel_fn *kernels
    cdef Py_ssize_t nkernels
    cdef fl_library_fn *libs          # LIBCALL routines: the CPU's, run on the simulated
                                      # device's memory (as a device library would run on
                                      # device buffers: no copies through the host)
    cdef object device_consts
    cdef list device_outputs          # (template DeviceArray, nbytes) per result, when results
                                      # stay on the device

    def __init__(self, layout, kernel_addresses, device_consts, library_addresses=()):
        cdef Py_ssize_t i
        Executable.__init__(self, layout)
        self.libs = library_table(layout.program, library_addresses)
        self.device_consts = device_consts
        program = layout.program
        self.device_outputs = None
        if any(program.slots[slot].space != SPACE_HOST for slot, _, _ in program.outputs):
            self.device_outputs = [
                (DeviceArray(0, shape, dt, "devsim", None),
                 int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize)
                for _, dt, shape in program.outputs]
        self.nkernels = len(kernel_addresses)
        self.kernels = <fl_kernel_fn *>malloc(max(1, self.nkernels) * sizeof(fl_kernel_fn))
        if self.kernels == NULL:
            raise MemoryError()
        for i, addr in enumerate(kernel_addresses):
            if not addr:
                raise ValueError(f"kernel {i} has no address")
            self.kernels[i] = <fl_kernel_fn><intptr_t>addr

    def __dealloc__(self):
        if self.kernels != NULL:
            free(self.kernels)
        if self.libs != NULL:
            free(self.libs)

    cdef int execute(self, int64_t *slots, int64_t *argwords, RunState *state) except -1 nogil:
        cdef int status
        cdef void *p
        cdef Hooks h
        h.kernels = self.kernels
        h.libs = self.libs
        if self.owned.status >= 0 and state.start == 0:    # (a resumed run has its word already)
            # the status word is device memory, one per call (calls may run concurrently);
            # release() frees it when the run fails, the end of the run when it succeeds
            p = device_alloc(8)
            if p == NULL:
                return STATUS_NO_MEMORY
            memset(p, 0, 8)
            slots[self.owned.status] = <int64_t><intptr_t>p
        status = run_loop(&self.bytecode, slots, argwords, &h, state)
        if status != STATUS_OK:
            return status
        if self.owned.status >= 0:
            device_free(<void *><intptr_t>slots[self.owned.status])
            slots[self.owned.status] = 0
        return STATUS_OK

    cdef int bind_outputs(self, PyObject **outs, int64_t *slots) except -1:
        """Results of a call with device arrays: DeviceArrays in simulated device memory."""
        cdef Py_ssize_t i
        if self.device_outputs is None:
            return Executable.bind_outputs(self, outs, slots)
        cdef DeviceBuffer buf
        for i, (like, nbytes) in enumerate(self.device_outputs):
            buf = DeviceBuffer(nbytes)
            arr = device_array_like(like, <int64_t><intptr_t>buf.ptr, buf)
            slots[self.owned.outputs[i]] = <int64_t><intptr_t>buf.ptr
            Py_INCREF(arr)
            outs[i] = <PyObject *>arr
        return 0

    cdef int release(self, int64_t *slots) except -1:
        cdef Py_ssize_t i
        if self.owned.status >= 0 and slots[self.owned.status] != 0:
            device_free(<void *><intptr_t>slots[self.owned.status])
            slots[self.owned.status] = 0
        for i in range(self.owned.ntemps):
            if slots[self.owned.temps[i]] != 0:
                device_free(<void *><intptr_t>slots[self.owned.temps[i]])
                slots[self.owned.temps[i]] = 0
        return 0

    cdef int64_t read_status(self, int64_t *slots) except? -1:
        cdef int64_t word = 0
        if self.owned.status >= 0 and slots[self.owned.status] != 0:
            memcpy(&word, <void *><intptr_t>slots[self.owned.status], 8)   # a device read
        return word
