# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The CUDA backend's executable: the bytecode run by the CUDA driver.

A separate extension module that cimports _core's executable interface (as _devsim does), so
`import fastlaunch` never loads a driver.  The driver itself is opened lazily with dlopen
(csrc/cuda_driver.c) the first time a CUDA program is linked or the backend asks for the
device, never at import; without a driver, a GPU or with CUDA_VISIBLE_DEVICES="", programs
still link (so `Compiled.lower` works) and raise BackendUnavailableError when called.

Why not cuda-python's cydriver: the driver calls here are a handful, resolved once by the
names cuda.h gives them; cydriver would add a runtime dependency whose missing-driver path
raises Python exceptions from inside the nogil interpreter, and whose declarations change
with its major version.

One program run: make the primary context current (the calling thread's own context is made
current again afterwards, as by every entry point here: `InContext`), then every instruction
in order on one stream inside one `with nogil:` (the caller's): ALLOC/FREE are stream-ordered
(cuMemAllocAsync/cuMemFreeAsync from the device's pool, kept between calls), TO_DEVICE/TO_HOST
are async copies, LAUNCH is cuLaunchKernel with kernelParams pointing at the argument words
BIND packed, CHECK copies the status word back and synchronises, and the run ends with one
stream synchronisation (the results are host arrays).  Every driver call's CUresult is
checked; a failure stops the run with STATUS_BACKEND_ERROR and the CUresult in
RunState.backend_code, and `release` frees whatever temporaries the run held.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint64_t, intptr_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF
from cpython.pycapsule cimport (PyCapsule_Destructor, PyCapsule_GetPointer, PyCapsule_IsValid,
                                PyCapsule_New)

from fastlaunch._core cimport (Bytecode, DeviceArray, Executable, device_array_like,
                               interrupt_pending)
from fastlaunch._launch cimport *

cimport numpy as cnp
import numpy as np

from fastlaunch import env as _env
from fastlaunch.errors import BackendUnavailableError, CUDAError

cnp.import_array()

cdef extern from "csrc/cuda_driver.h" nogil:
    int FL_CU_NO_LIBRARY
    int fl_cu_init(int ordinal, const char *library, char *msg, size_t msglen)
    int fl_cu_ready()
    const char *fl_cu_error_name(int code)
    const char *fl_cu_error_string(int code)
    int fl_cu_device_info(int *major, int *minor, int *multiprocessors, int *driver_version,
                          char *name, int namelen)
    int fl_cu_enter(void **saved)
    int fl_cu_leave(void *saved)
    int fl_cu_device_ordinal()
    int fl_cu_pointer_device(uint64_t dptr, int *ordinal)
    int fl_cu_func_max_threads(void *function, int *max_threads)
    int fl_cu_func_limits(void *function, int *max_threads, int *regs, int *local_bytes,
                          int *shared_bytes)
    int fl_cu_stream_wait(uint64_t waiter, uint64_t signaller)
    int fl_cu_ctx_sync()
    int fl_cu_mem_alloc(uint64_t *dptr, size_t nbytes)
    int fl_cu_mem_free(uint64_t dptr)
    int fl_cu_alloc_async(uint64_t *dptr, size_t nbytes)
    int fl_cu_free_async(uint64_t dptr)
    int fl_cu_htod(uint64_t dst, const void *src, size_t nbytes)
    int fl_cu_dtoh(void *dst, uint64_t src, size_t nbytes)
    int fl_cu_dtod(uint64_t dst, uint64_t src, size_t nbytes)
    int fl_cu_zero(uint64_t dst, size_t nbytes)
    int fl_cu_sync()
    int fl_cu_host_alloc(void **ptr, size_t nbytes)
    int fl_cu_host_free(void *ptr)
    int fl_cu_mem_info(size_t *free_bytes, size_t *total_bytes)
    void fl_cu_count(int64_t nbytes)
    int64_t fl_cu_live_bytes()
    int fl_cu_module_load(const void *image, const char *entry, void **module, void **function,
                          char *log, size_t loglen)
    int fl_cu_launch(void *function, unsigned grid, unsigned block, void **params)

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, const void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)
    int pthread_mutex_destroy(pthread_mutex_t *m)

DEF MAX_PARAMS = 512            # cuda_schedule.MAX_PARAMS
DEF KDL_CUDA = 2                # DLPack's device type of CUDA memory
DEF CUDA_ERROR_OUT_OF_MEMORY = 2
DEF CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
# RunState.backend_code of a program linked without a usable driver (not a CUresult)
DEF UNAVAILABLE = -1000

_driver_message = None


def driver_error(int ordinal=0):
    """None when the CUDA driver is loaded and device `ordinal` is set up, else why not (the
    first call opens libcuda; later calls return the first outcome)."""
    global _driver_message
    cdef char msg[512]
    cdef int status
    cdef bytes library = (_env.libcuda_path() or "").encode()
    cdef const char *path = library
    with nogil:
        status = fl_cu_init(ordinal, path, msg, sizeof(msg))
    if status == 0:
        return None
    if _driver_message is None:
        _driver_message = (<bytes>msg).decode("utf-8", "replace")
    return _driver_message


def require_driver():
    """Raise BackendUnavailableError unless the driver and a device are usable."""
    why = driver_error()
    if why is not None:
        raise BackendUnavailableError(f"fastlaunch: backend 'cuda' cannot run here: {why}")


def error_name(int code):
    return (<bytes>fl_cu_error_name(code)).decode() or f"CUresult {code}"


def check(int code, what):
    if code != 0:
        name = error_name(code)
        desc = (<bytes>fl_cu_error_string(code)).decode()
        raise CUDAError(f"fastlaunch: {what} failed: {name} ({code}): {desc}", code, name)


def device_info():
    """{name, compute_capability (major, minor), multiprocessors, driver_version}."""
    cdef int major = 0, minor = 0, sms = 0, version = 0
    cdef char name[256]
    require_driver()
    check(fl_cu_device_info(&major, &minor, &sms, &version, name, sizeof(name)),
          "reading the device's attributes")
    return {"name": (<bytes>name).decode("utf-8", "replace"), "compute_capability": (major, minor),
            "multiprocessors": sms, "driver_version": version}


def memory_stats():
    """{"live_bytes"}: device bytes fastlaunch's executables and buffers hold now."""
    return {"live_bytes": fl_cu_live_bytes()}


def synchronize():
    cdef int code
    require_driver()
    with InContext():
        with nogil:
            code = fl_cu_sync()
    check(code, "cuStreamSynchronize")


cdef class InContext:
    """`with InContext():` fastlaunch's context is current inside, and the calling thread's
    own (another library's, another device's, or none) again after: no entry point leaves
    the caller's context changed."""
    cdef void *saved
    cdef bint entered

    def __enter__(self):
        check(fl_cu_enter(&self.saved), "cuCtxSetCurrent")
        self.entered = True
        return self

    def __exit__(self, *exc):
        if self.entered:
            self.entered = False
            fl_cu_leave(self.saved)
        return False


cdef class DeviceBuffer:
    """Device memory owned by Python (an executable's constants and status word)."""
    cdef readonly uint64_t address
    cdef readonly Py_ssize_t nbytes

    def __cinit__(self, Py_ssize_t nbytes):
        require_driver()
        with InContext():
            check(fl_cu_mem_alloc(&self.address, max(nbytes, 1)),
                  f"cuMemAlloc of {nbytes} bytes")
        self.nbytes = nbytes
        fl_cu_count(max(nbytes, 1))

    def __dealloc__(self):
        cdef void *saved
        cdef bint entered
        if self.address and fl_cu_ready():
            entered = fl_cu_enter(&saved) == 0
            fl_cu_mem_free(self.address)
            fl_cu_count(-max(self.nbytes, 1))
            if entered:
                fl_cu_leave(saved)

    @staticmethod
    def from_array(arr):
        """A device copy of a host array."""
        cdef cnp.ndarray a = np.ascontiguousarray(arr)
        cdef DeviceBuffer buf = DeviceBuffer(a.nbytes)
        buf.write(a)
        return buf

    def write(self, arr):
        cdef cnp.ndarray a = np.ascontiguousarray(arr)
        cdef int code
        cdef size_t n = a.nbytes
        if n > <size_t>self.nbytes:
            raise ValueError(f"{n} bytes do not fit a device buffer of {self.nbytes}")
        if n:
            with InContext():
                with nogil:
                    code = fl_cu_htod(self.address, cnp.PyArray_DATA(a), n)
                    if code == 0:
                        code = fl_cu_sync()
            check(code, "copying to the device")

    def read(self, dtype, shape):
        """A host array of dtype and shape from the buffer's first bytes."""
        out = np.empty(shape, dtype)
        cdef cnp.ndarray a = out
        cdef int code
        cdef size_t n = a.nbytes
        if n > <size_t>self.nbytes:
            raise ValueError(f"{n} bytes are more than the buffer's {self.nbytes}")
        if n:
            with InContext():
                with nogil:
                    code = fl_cu_dtoh(cnp.PyArray_DATA(a), self.address, n)
                    if code == 0:
                        code = fl_cu_sync()
            check(code, "copying to the host")
        return out


def read(int64_t address, Py_ssize_t nbytes):
    """nbytes of device memory from `address`, as a host uint8 array (synchronous)."""
    cdef cnp.ndarray out = np.empty(nbytes, np.uint8)
    cdef int code = 0
    require_driver()
    if nbytes:
        with InContext():
            with nogil:
                code = fl_cu_dtoh(cnp.PyArray_DATA(out), <uint64_t>address, nbytes)
                if code == 0:
                    code = fl_cu_sync()
    check(code, "copying to the host")
    return out


DEF MAX_CONSUMERS = 8


cdef class DeviceMemory:
    """A stream-ordered device allocation behind DeviceArrays (results, to_device): freed on
    fastlaunch's stream when the last array using it goes, after the work of every stream it
    was exported to with DLPack (`__dlpack__(stream=...)`) enqueued until then."""
    cdef readonly uint64_t address
    cdef readonly Py_ssize_t nbytes
    cdef uint64_t consumers[MAX_CONSUMERS]     # streams the memory was exported to
    cdef int nconsumers                       # MAX_CONSUMERS + 1: more than that

    def __init__(self, Py_ssize_t nbytes):
        require_driver()
        with InContext():
            _allocate(self, nbytes)

    def __dealloc__(self):
        cdef void *saved
        cdef bint entered
        cdef int i
        if self.address and fl_cu_ready():
            entered = fl_cu_enter(&saved) == 0
            if self.nconsumers > MAX_CONSUMERS:
                fl_cu_ctx_sync()
            for i in range(min(self.nconsumers, MAX_CONSUMERS)):
                fl_cu_stream_wait(0, self.consumers[i])
            fl_cu_free_async(self.address)
            fl_cu_count(-max(self.nbytes, 1))
            if entered:
                fl_cu_leave(saved)

    def read(self, int64_t address, Py_ssize_t nbytes):
        return read(address, nbytes)

    def dlpack(self, DeviceArray arr, stream):
        cdef uint64_t s = _consumer_stream(stream)
        cdef int i
        if s:
            for i in range(min(self.nconsumers, MAX_CONSUMERS)):
                if self.consumers[i] == s:
                    break
            else:
                if self.nconsumers < MAX_CONSUMERS:
                    self.consumers[self.nconsumers] = s
                self.nconsumers = min(self.nconsumers + 1, MAX_CONSUMERS + 1)
        return _dlpack_capsule(arr, fl_cu_device_ordinal(), s)

    def dlpack_device(self):
        return (KDL_CUDA, fl_cu_device_ordinal())


cdef uint64_t _consumer_stream(stream) except? 0:
    """The CUDA stream a DLPack consumer names (the array API's rules): None is the legacy
    default stream (1), -1 asks for no synchronisation (0 here), 0 is refused."""
    if stream is None:
        return 1
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"__dlpack__: stream must be an int or None, got {stream!r:.60}")
    if stream == -1:
        return 0
    if stream == 0 or stream < -1 or stream >= 2**64:
        raise ValueError(f"__dlpack__: stream {stream} is not a CUDA stream (0 is ambiguous "
                         f"and refused: 1 is the legacy default stream, 2 the per-thread one)")
    return <uint64_t>stream


cdef int _allocate(DeviceMemory mem, Py_ssize_t nbytes) except -1:
    cdef int code = fl_cu_alloc_async(&mem.address, max(nbytes, 1))
    if code != 0:
        mem.address = 0
        check(code, f"cuMemAllocAsync of {nbytes} bytes")
    mem.nbytes = nbytes
    fl_cu_count(max(nbytes, 1))
    return 0


cdef class ForeignMemory:
    """Another library's CUDA array that a DeviceArray views (kept alive by it), on device
    `device`."""
    cdef readonly object owner
    cdef readonly int device

    def __init__(self, owner, int device=0):
        self.owner = owner
        self.device = device

    def read(self, int64_t address, Py_ssize_t nbytes):
        return read(address, nbytes)

    def dlpack(self, DeviceArray arr, stream):
        # the memory is its owner's to free: only our own work on it is ordered
        return _dlpack_capsule(arr, self.device, _consumer_stream(stream))

    def dlpack_device(self):
        return (KDL_CUDA, self.device)


def to_device(arr):
    """A DeviceArray holding a copy of a host array."""
    cdef cnp.ndarray a = np.ascontiguousarray(arr)
    cdef DeviceMemory mem = DeviceMemory(a.nbytes)
    cdef int code = 0
    cdef size_t n = a.nbytes
    if n:
        with InContext():
            with nogil:
                code = fl_cu_htod(mem.address, cnp.PyArray_DATA(a), n)
                if code == 0:
                    code = fl_cu_sync()
        check(code, "copying to the device")
    return DeviceArray(mem.address, (<object>a).shape, a.dtype, "cuda", mem)


def from_cuda_array(obj):
    """A DeviceArray viewing obj's memory through its __cuda_array_interface__ (no copy).
    Its memory must be on fastlaunch's device (the pointer's attributes say which).  The
    work pending on the stream it names comes first: fastlaunch's stream waits for it by an
    event (v3 of the interface), without waiting on the host."""
    cdef int ordinal = -1, code
    cai = obj.__cuda_array_interface__
    ptr, readonly = cai["data"]
    dtype = np.dtype(cai["typestr"])
    if cai.get("mask") is not None:
        raise ValueError("masked CUDA arrays are not supported")
    stream = cai.get("stream")
    require_driver()
    with InContext():
        if ptr:
            code = fl_cu_pointer_device(<uint64_t>ptr, &ordinal)
            if code != 0:
                raise ValueError(f"the array's pointer {ptr:#x} is not CUDA memory the driver "
                                 f"knows ({error_name(code)})")
            if ordinal != fl_cu_device_ordinal():
                raise ValueError(f"the array is on CUDA device {ordinal}; fastlaunch runs on "
                                 f"device {fl_cu_device_ordinal()}")
        if stream:
            check(fl_cu_stream_wait(0, <uint64_t>stream), "ordering after the array's stream")
    return DeviceArray(ptr or 0, cai["shape"], dtype.newbyteorder("=") if dtype.isnative else dtype,
                       "cuda", ForeignMemory(obj, fl_cu_device_ordinal()), cai.get("strides"),
                       not readonly)


# ---- DLPack export (the unversioned DLManagedTensor ABI) -------------------------------------
cdef extern from *:
    """
    #include <stdint.h>
    typedef struct { int32_t device_type; int32_t device_id; } fl_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } fl_DLDataType;
    typedef struct {
        void *data; fl_DLDevice device; int32_t ndim; fl_DLDataType dtype;
        int64_t *shape; int64_t *strides; uint64_t byte_offset;
    } fl_DLTensor;
    typedef struct fl_DLManagedTensor {
        fl_DLTensor dl_tensor; void *manager_ctx;
        void (*deleter)(struct fl_DLManagedTensor *self);
    } fl_DLManagedTensor;
    """
    ctypedef struct fl_DLDevice:
        int32_t device_type
        int32_t device_id
    ctypedef struct fl_DLDataType:
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct fl_DLTensor:
        void *data
        fl_DLDevice device
        int32_t ndim
        fl_DLDataType dtype
        int64_t *shape
        int64_t *strides
        uint64_t byte_offset
    ctypedef struct fl_DLManagedTensor:
        fl_DLTensor dl_tensor
        void *manager_ctx
        void (*deleter)(fl_DLManagedTensor *) noexcept

cdef dict _DL_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}    # kDLInt ... kDLBool


cdef void _dl_deleter(fl_DLManagedTensor *t) noexcept with gil:
    Py_DECREF(<object>t.manager_ctx)     # the DeviceArray that owns the memory
    free(t)


cdef void _dl_capsule_destructor(PyObject *capsule) noexcept with gil:
    # a capsule never consumed still owns its tensor
    if PyCapsule_IsValid(<object>capsule, b"dltensor"):
        _dl_deleter(<fl_DLManagedTensor *>PyCapsule_GetPointer(<object>capsule, b"dltensor"))


cdef object _dlpack_capsule(DeviceArray arr, int device, uint64_t consumer):
    """The DLPack capsule of arr on `device`; the consumer's stream (0: none) waits, by an
    event, for the work fastlaunch's stream holds (the producer's side of the contract)."""
    cdef Py_ssize_t nd = len(arr.shape), d
    cdef fl_DLManagedTensor *t
    code = _DL_CODES.get(arr.dtype.kind)
    if code is None:
        raise BufferError(f"a {arr.dtype} DeviceArray has no DLPack type")
    if consumer:
        with InContext():
            check(fl_cu_stream_wait(consumer, 0), "ordering the consumer's stream")
    t = <fl_DLManagedTensor *>malloc(
        sizeof(fl_DLManagedTensor) + 2 * max(nd, 1) * sizeof(int64_t))
    if t == NULL:
        raise MemoryError()
    t.dl_tensor.data = <void *><intptr_t>arr.ptr
    t.dl_tensor.device.device_type = KDL_CUDA
    t.dl_tensor.device.device_id = device
    t.dl_tensor.ndim = <int32_t>nd
    t.dl_tensor.dtype.code = <uint8_t>code
    t.dl_tensor.dtype.bits = 8 * arr.dtype.itemsize
    t.dl_tensor.dtype.lanes = 1
    t.dl_tensor.shape = <int64_t *>(<char *>t + sizeof(fl_DLManagedTensor))
    t.dl_tensor.strides = t.dl_tensor.shape + max(nd, 1)
    for d in range(nd):
        t.dl_tensor.shape[d] = arr.shape[d]
        t.dl_tensor.strides[d] = arr.strides[d] // arr.dtype.itemsize
    t.dl_tensor.byte_offset = 0
    Py_INCREF(arr)
    t.manager_ctx = <void *>arr
    t.deleter = _dl_deleter
    return PyCapsule_New(t, b"dltensor", <PyCapsule_Destructor>_dl_capsule_destructor)


# Loaded kernels, by entry name (a hash of the kernel's code): a module is loaded once per
# process and kept while the process runs, whatever entries use it.
_modules: dict = {}


def load_kernel(str name, bytes image):
    """The CUfunction (as an int) of entry `name` in a cubin or NUL-terminated PTX image."""
    cdef void *module = NULL
    cdef void *function = NULL
    cdef char log[4096]
    cdef int code
    cdef bytes entry = name.encode()
    cdef const char *img = image
    cdef const char *ent = entry
    hit = _modules.get(name)
    if hit is not None:
        return hit[1]
    require_driver()
    with InContext():
        with nogil:
            code = fl_cu_module_load(img, ent, &module, &function, log, sizeof(log))
    if code != 0:
        text = (<bytes>log).decode("utf-8", "replace").strip()
        check(code, f"loading kernel {name}" + (f" (JIT log: {text})" if text else ""))
    _modules[name] = (<intptr_t>module, <intptr_t>function)
    return <intptr_t>function


# ---- the interpreter: _interp.pxi's dispatch loop over these hooks -------------------------
# A host-side loop of launches and copies on the stream; only CHECK and BREAK_IF wait for
# the device (a word, a byte read back).  A failed driver call stops the run with
# STATUS_BACKEND_ERROR, its CUresult in state.backend_code.
ctypedef struct Hooks:
    void **functions
    unsigned *grid
    unsigned *block
    int *nargs
    int64_t *slot_bytes
    int64_t *status_host              # pinned: CHECK reads the status word into it
    char *flag_host                   # pinned: BREAK_IF reads a loop's until flag into it


cdef inline int driver_failed(int code, RunState *state) noexcept nogil:
    if code != 0:
        state.backend_code = code
        return STATUS_BACKEND_ERROR
    return STATUS_OK


cdef inline int hook_launch(const Hooks *h, const int64_t *ins, int64_t *argwords,
                            RunState *state) noexcept nogil:
    cdef void *params[MAX_PARAMS]
    cdef int64_t *words
    cdef Py_ssize_t i, k = ins[1]
    if ins[2] <= 0:
        return STATUS_OK
    words = &argwords[ins[3]]
    for i in range(h.nargs[k]):
        params[i] = &words[i]
    return driver_failed(fl_cu_launch(h.functions[k], h.grid[k], h.block[k], params), state)


cdef inline int hook_alloc(const Hooks *h, const int64_t *ins, int64_t *slots,
                           RunState *state) noexcept nogil:
    cdef uint64_t p
    cdef int code = fl_cu_alloc_async(&p, ins[2])
    if code == CUDA_ERROR_OUT_OF_MEMORY:
        return STATUS_NO_MEMORY
    if code == 0:
        slots[ins[1]] = <int64_t>p
        fl_cu_count(h.slot_bytes[ins[1]])
    return driver_failed(code, state)


cdef inline int hook_free(const Hooks *h, const int64_t *ins, int64_t *slots,
                          RunState *state) noexcept nogil:
    cdef int code = fl_cu_free_async(<uint64_t>slots[ins[1]])
    if code == 0:
        slots[ins[1]] = 0
        fl_cu_count(-h.slot_bytes[ins[1]])
    return driver_failed(code, state)


cdef inline int hook_to_device(const Hooks *h, const int64_t *ins, int64_t *slots,
                               RunState *state) noexcept nogil:
    return driver_failed(fl_cu_htod(<uint64_t>slots[ins[1]],
                                    <const void *><intptr_t>slots[ins[2]], ins[3]), state)


cdef inline int hook_to_host(const Hooks *h, const int64_t *ins, int64_t *slots,
                             RunState *state) noexcept nogil:
    return driver_failed(fl_cu_dtoh(<void *><intptr_t>slots[ins[1]],
                                    <uint64_t>slots[ins[2]], ins[3]), state)


cdef inline int hook_copy(const Hooks *h, const int64_t *ins, int64_t *slots,
                          RunState *state) noexcept nogil:
    # the verifier keeps COPY in the kernels' space: device to device
    return driver_failed(fl_cu_dtod(<uint64_t>slots[ins[1]], <uint64_t>slots[ins[2]], ins[3]),
                         state)


cdef inline int hook_check(const Hooks *h, const int64_t *ins, int64_t *slots,
                           RunState *state) noexcept nogil:
    cdef int code = fl_cu_dtoh(h.status_host, <uint64_t>slots[ins[1]], 8)
    if code == 0:
        code = fl_cu_sync()
    if code == 0 and h.status_host[0] != 0:
        state.backend_code = h.status_host[0]     # the error bits, for error()
        return STATUS_KERNEL_ERROR
    return driver_failed(code, state)


cdef inline int hook_flag(const Hooks *h, const int64_t *ins, int64_t *slots, char *flag,
                          RunState *state) noexcept nogil:
    cdef int code = fl_cu_dtoh(h.flag_host, <uint64_t>slots[ins[1]], 1)
    if code == 0:
        code = fl_cu_sync()
    flag[0] = h.flag_host[0] if code == 0 else 0
    return driver_failed(code, state)


cdef inline int hook_libcall(const Hooks *h, const int64_t *ins, int64_t *slots,
                             RunState *state) noexcept nogil:
    # no device library routines: the CUDA backend refuses a program with library calls when
    # it links it (backends/cuda.py), so this never runs
    return STATUS_BAD_OPCODE


cdef inline int hook_poll() noexcept nogil:
    return interrupt_pending()


include "_interp.pxi"


def kernel_limits(intptr_t function):
    """What a loaded kernel's code needs and allows on this device (cuFuncGetAttribute):
    {"max_threads": per block, "regs": per thread, "local_bytes": per thread, "shared_bytes":
    static, per block}; the backend chooses each launch's block from it
    (cuda_schedule.launch_block)."""
    cdef int most = 0, regs = 0, local = 0, shared = 0, code
    require_driver()
    with InContext():
        code = fl_cu_func_limits(<void *>function, &most, &regs, &local, &shared)
    check(code, "reading a kernel's launch limits (cuFuncGetAttribute)")
    return {"max_threads": most, "regs": regs, "local_bytes": local, "shared_bytes": shared}


cdef class CUDAExecutable(Executable):
    """A program on the GPU (see the module docstring).  Built without a driver (lowering on a
    machine without a GPU) it holds `unavailable`, the reason, and every call raises it."""
    cdef void **functions
    cdef unsigned *grid
    cdef unsigned *block
    cdef int *nargs
    cdef int64_t *slot_bytes
    cdef Py_ssize_t nkernels
    cdef uint64_t status_dev
    cdef int64_t *status_host
    cdef char *flag_host              # pinned: BREAK_IF reads a loop's until flag into it
    cdef pthread_mutex_t lock
    cdef bint lock_made
    cdef bint ready
    cdef object unavailable
    cdef object device_objects
    cdef list device_outputs          # (template DeviceArray, nbytes) per result, when results
                                      # stay on the device

    def __cinit__(self, *args, **kwargs):
        self.functions = NULL
        self.grid = NULL
        self.block = NULL
        self.nargs = NULL
        self.slot_bytes = NULL
        self.status_host = NULL
        self.flag_host = NULL
        self.lock_made = False

    def __init__(self, layout, functions, launch, nargs, device_objects, unavailable=None):
        """functions: CUfunction per kernel (ints, 0 when unavailable); launch: (grid, block)
        per kernel; nargs: arguments per kernel; device_objects: what must outlive the
        executable (the constants' DeviceBuffers); unavailable: None, or why calls fail."""
        cdef Py_ssize_t i
        cdef int code
        Executable.__init__(self, layout)
        self.unavailable = unavailable
        self.ready = unavailable is None
        self.device_objects = device_objects
        self.nkernels = len(launch)
        n = max(1, self.nkernels)
        self.functions = <void **>malloc(n * sizeof(void *))
        self.grid = <unsigned *>malloc(n * sizeof(unsigned))
        self.block = <unsigned *>malloc(n * sizeof(unsigned))
        self.nargs = <int *>malloc(n * sizeof(int))
        self.slot_bytes = <int64_t *>malloc(max(1, len(layout.program.slots)) * sizeof(int64_t))
        if (self.functions == NULL or self.grid == NULL or self.block == NULL
                or self.nargs == NULL or self.slot_bytes == NULL):
            raise MemoryError()
        for i in range(self.nkernels):
            grid, block = launch[i]
            if not (1 <= grid < 2**31 and 1 <= block <= 1024):
                raise ValueError(f"kernel {i}: launch of {grid} blocks of {block} threads")
            if not 0 <= nargs[i] <= MAX_PARAMS:
                raise ValueError(f"kernel {i}: {nargs[i]} arguments (at most {MAX_PARAMS})")
            self.grid[i] = grid
            self.block[i] = block
            self.nargs[i] = nargs[i]
            self.functions[i] = <void *><intptr_t>(functions[i] if unavailable is None else 0)
            if unavailable is None and not functions[i]:
                raise ValueError(f"kernel {i} has no function")
        for i, s in enumerate(layout.program.slots):
            self.slot_bytes[i] = s.nbytes
        program = layout.program
        if unavailable is None:
            with InContext():
                self._check_blocks(layout.program)
        self.device_outputs = None
        if any(program.slots[slot].space != SPACE_HOST for slot, _, _ in program.outputs):
            self.device_outputs = [
                (DeviceArray(0, shape, dt, "cuda", None),
                 int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize)
                for _, dt, shape in program.outputs]
        if unavailable is None and self.owned.status >= 0:
            # one status word per executable, zero between calls; calls of one executable
            # take turns (they share one stream anyway)
            with InContext():
                code = fl_cu_mem_alloc(&self.status_dev, 8)
                if code == 0:
                    fl_cu_count(8)
                    code = fl_cu_zero(self.status_dev, 8)
                if code == 0:
                    code = fl_cu_sync()
                if code == 0:
                    code = fl_cu_host_alloc(<void **>&self.status_host, 8)
            check(code, "allocating the status word")
        if unavailable is None and any(op == BREAK_IF for _, op, _ in
                                       program.instructions()):
            with InContext():
                code = fl_cu_host_alloc(<void **>&self.flag_host, 8)
            check(code, "allocating the loop flag")
        pthread_mutex_init(&self.lock, NULL)
        self.lock_made = True

    cdef int _check_blocks(self, program) except -1:
        """Each kernel's block against what its compiled code allows (its registers per
        thread): a launch above it would fail at every call with
        CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; refused here, at load time, naming the kernel."""
        cdef Py_ssize_t i
        cdef int most = 0, code
        for i in range(self.nkernels):
            code = fl_cu_func_max_threads(self.functions[i], &most)
            check(code, f"reading kernel {i}'s launch limit (cuFuncGetAttribute)")
            if self.block[i] > <unsigned>most:
                k = program.kernels[i] if i < len(program.kernels) else None
                name = f"{k.label} ({k.name})" if k is not None else str(i)
                raise CUDAError(
                    f"fastlaunch: kernel {name} is launched with {self.block[i]} threads per "
                    f"block, but its compiled code allows at most {most} on this device (its "
                    f"registers per thread); the CUDA backend cannot run this program here",
                    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
        return 0

    def __dealloc__(self):
        cdef void *saved
        cdef bint entered
        if fl_cu_ready() and (self.status_dev or self.status_host != NULL
                              or self.flag_host != NULL):
            entered = fl_cu_enter(&saved) == 0
            if self.status_dev:
                fl_cu_mem_free(self.status_dev)
                fl_cu_count(-8)
            if self.status_host != NULL:
                fl_cu_host_free(self.status_host)
            if self.flag_host != NULL:
                fl_cu_host_free(self.flag_host)
            if entered:
                fl_cu_leave(saved)
        free(self.functions)
        free(self.grid)
        free(self.block)
        free(self.nargs)
        free(self.slot_bytes)
        if self.lock_made:
            pthread_mutex_destroy(&self.lock)

    @property
    def available(self):
        return self.unavailable is None

    cdef int execute(self, int64_t *slots, int64_t *argwords, RunState *state) except -1 nogil:
        cdef int status, code
        cdef void *saved
        if not self.ready:
            state.backend_code = UNAVAILABLE
            return STATUS_BACKEND_ERROR
        code = fl_cu_enter(&saved)
        if code != 0:
            state.pc = -1
            state.backend_code = code
            return STATUS_BACKEND_ERROR
        pthread_mutex_lock(&self.lock)
        status = self.run(slots, argwords, state)
        if status != STATUS_OK and self.owned.status >= 0:
            # leave the word zero for the next call, whatever stopped this one
            if fl_cu_zero(self.status_dev, 8) == 0:
                fl_cu_sync()
        pthread_mutex_unlock(&self.lock)
        fl_cu_leave(saved)
        return status

    cdef int run(self, int64_t *slots, int64_t *argwords, RunState *state) noexcept nogil:
        # from state.start: a run interrupted at a POLL resumes after it, its slots (loop
        # counters, aliases, live temporaries) as it left them
        cdef int status, code
        cdef Hooks h
        h.functions = self.functions
        h.grid = self.grid
        h.block = self.block
        h.nargs = self.nargs
        h.slot_bytes = self.slot_bytes
        h.status_host = self.status_host
        h.flag_host = self.flag_host
        if self.owned.status >= 0:
            slots[self.owned.status] = <int64_t>self.status_dev
        status = run_loop(&self.bytecode, slots, argwords, &h, state)
        if status != STATUS_OK:
            return status
        # the results are host arrays: the copies (and any fault of a kernel) end here
        code = fl_cu_sync()
        if code != 0:
            state.pc = -1
            state.backend_code = code
            return STATUS_BACKEND_ERROR
        return STATUS_OK

    cdef int bind_outputs(self, PyObject **outs, int64_t *slots) except -1:
        """Results of a call with device arrays: new DeviceArrays (stream-ordered
        allocations, so the kernels that write them come after)."""
        cdef Py_ssize_t i
        if self.device_outputs is None or not self.ready:
            return Executable.bind_outputs(self, outs, slots)
        cdef DeviceMemory mem
        with InContext():
            for i, (like, nbytes) in enumerate(self.device_outputs):
                mem = DeviceMemory.__new__(DeviceMemory)
                _allocate(mem, nbytes)
                arr = device_array_like(like, <int64_t>mem.address, mem)
                slots[self.owned.outputs[i]] = <int64_t>mem.address
                Py_INCREF(arr)
                outs[i] = <PyObject *>arr
        return 0

    cdef int release(self, int64_t *slots) except -1:
        """Free the temporaries a failed run still held (stream-ordered, then synchronised,
        so the memory is back in the pool when the error is raised)."""
        cdef Py_ssize_t i
        cdef int64_t s
        cdef bint freed = False, entered
        cdef void *saved
        if not self.ready:
            return 0
        entered = fl_cu_enter(&saved) == 0
        for i in range(self.owned.ntemps):
            s = self.owned.temps[i]
            if slots[s] != 0:
                if fl_cu_free_async(<uint64_t>slots[s]) == 0:
                    fl_cu_count(-self.slot_bytes[s])
                slots[s] = 0
                freed = True
        if freed:
            with nogil:
                fl_cu_sync()
        if entered:
            fl_cu_leave(saved)
        return 0

    cdef int64_t read_status(self, int64_t *slots) except? -1:
        cdef int64_t word = 0
        cdef void *saved
        if not self.ready or self.owned.status < 0:
            return 0
        with nogil:
            if fl_cu_enter(&saved) == 0:
                if fl_cu_dtoh(self.status_host, self.status_dev, 8) == 0 and fl_cu_sync() == 0:
                    word = self.status_host[0]
                fl_cu_leave(saved)
        return word

    cdef object error(self, int status, RunState *state, int64_t *slots):
        where = f" (at {self.program.line_at(state.pc)})" if state.pc >= 0 else \
            " (synchronising at the end of the program)"
        if status == STATUS_BACKEND_ERROR and state.backend_code == UNAVAILABLE:
            return BackendUnavailableError(f"fastlaunch: backend 'cuda' cannot run here: "
                                           f"{self.unavailable}")
        if status == STATUS_BACKEND_ERROR:
            code = state.backend_code
            name = error_name(code)
            desc = (<bytes>fl_cu_error_string(code)).decode()
            return CUDAError(f"fastlaunch: CUDA error {name} ({code}): {desc}{where}", code, name)
        if status == STATUS_KERNEL_ERROR:
            return self.kernel_error(state.backend_code, where)   # read by CHECK, then reset
        return Executable.error(self, status, state, slots)


# ---- benchmark floors (bench/gpu_bench.py) ---------------------------------------------------
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC


cdef double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


def launch_floor(CUDAExecutable exe, int iters, double scalar=0.0):
    """Seconds per iteration of the program's kernel launches alone, on device-resident data:
    every slot bound once to device memory (arguments and results too), the argument words
    packed once, then `iters` times: one cuLaunchKernel per LAUNCH and one stream
    synchronisation.  The floor a replay of the same kernels cannot beat."""
    with InContext():
        return _launch_floor(exe, iters, scalar)


def _launch_floor(CUDAExecutable exe, int iters, double scalar):
    cdef Py_ssize_t pc = 0, k, i, j, nl = 0
    cdef int64_t op
    cdef int code = 0
    cdef double t0, t1
    cdef int64_t *argwords
    cdef int64_t *slots
    cdef int64_t *launches           # (kernel, args_at) pairs
    cdef void *params[MAX_PARAMS]
    if not exe.ready:
        raise BackendUnavailableError(f"fastlaunch: backend 'cuda' cannot run here: "
                                      f"{exe.unavailable}")
    program = exe.program        # its own tables: the executable's bytecode is run_loop's
    cdef int64_t[::1] code_words = np.ascontiguousarray(program.code, np.int64)
    cdef int64_t[::1] list_words = np.append(np.asarray(program.arg_lists, np.int64), 0)
    cdef const int64_t *c = &code_words[0]
    cdef Py_ssize_t ncode = code_words.shape[0], nslots = len(program.slots)
    buffers = []
    slots = <int64_t *>malloc(max(1, nslots) * sizeof(int64_t))
    argwords = <int64_t *>malloc(max(1, program.nargwords) * sizeof(int64_t))
    launches = <int64_t *>malloc(max(1, ncode) * sizeof(int64_t))
    try:
        memset(slots, 0, max(1, nslots) * sizeof(int64_t))
        for i, s in enumerate(program.slots):
            if s.role == "param":
                memcpy(&slots[i], &scalar, 8)      # the word of a float64 parameter
            elif s.role == "status":
                slots[i] = <int64_t>exe.status_dev
            elif s.role != "const":
                nbytes = s.nbytes if s.role == "temp" else s.span_bytes
                buf = DeviceBuffer(max(nbytes, 8))
                buffers.append(buf)
                slots[i] = <int64_t>buf.address
                check(fl_cu_zero(buf.address, buf.nbytes), "cuMemsetD8Async")
        for (slot, _), buf in zip(program.consts, exe.device_objects):
            slots[slot] = <int64_t>buf.address       # the executable's copies of the constants
        while pc < ncode:
            op = c[pc]
            if op == BIND:
                fl_op_bind(&c[pc], &list_words[0], slots, argwords)
            elif op == LAUNCH and c[pc + 2] > 0:
                launches[2 * nl] = c[pc + 1]
                launches[2 * nl + 1] = c[pc + 3]
                nl += 1
            pc += op & 0xFF
        with nogil:
            code = fl_cu_sync()
            t0 = _now()
            for j in range(iters):
                for i in range(nl):
                    k = launches[2 * i]
                    for pc in range(exe.nargs[k]):
                        params[pc] = &argwords[launches[2 * i + 1] + pc]
                    code = fl_cu_launch(exe.functions[k], exe.grid[k], exe.block[k], params)
                    if code != 0:
                        break
                if code == 0:
                    code = fl_cu_sync()
                if code != 0:
                    break
            t1 = _now()
        check(code, "the launch loop")
        return (t1 - t0) / max(1, iters)
    finally:
        free(slots)
        free(argwords)
        free(launches)
        del buffers


def copy_bandwidth(Py_ssize_t nbytes, int iters):
    """Bytes per second of cuMemcpyDtoDAsync (read + write counted: 2 * nbytes per copy)."""
    with InContext():
        return _copy_bandwidth(nbytes, iters)


def _copy_bandwidth(Py_ssize_t nbytes, int iters):
    cdef DeviceBuffer a = DeviceBuffer(nbytes)
    cdef DeviceBuffer b = DeviceBuffer(nbytes)
    cdef int code = 0, j
    cdef double t0, t1
    with nogil:
        code = fl_cu_dtod(b.address, a.address, nbytes)
        if code == 0:
            code = fl_cu_sync()
        t0 = _now()
        for j in range(iters):
            if code == 0:
                code = fl_cu_dtod(b.address, a.address, nbytes)
        if code == 0:
            code = fl_cu_sync()
        t1 = _now()
    check(code, "cuMemcpyDtoDAsync")
    return 2.0 * nbytes * iters / (t1 - t0)
