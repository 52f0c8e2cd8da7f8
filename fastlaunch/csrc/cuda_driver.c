/* The CUDA driver, opened lazily (see cuda_driver.h).

   Entry points are resolved by the names cuda.h maps each function to (cuMemAlloc is
   cuMemAlloc_v2, ...): STR(cuMemAlloc) expands the header's macro before quoting, and the
   pointer's type is the header's own prototype, so the ABI we call is the one we compiled
   against.  Nothing here holds the GIL or touches Python. */
#include "cuda_driver.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)
#define FN(name) __typeof__(&name) name##_p

static struct {
    FN(cuInit);
    FN(cuDriverGetVersion);
    FN(cuDeviceGetCount);
    FN(cuDeviceGet);
    FN(cuDeviceGetAttribute);
    FN(cuDeviceGetName);
    FN(cuDevicePrimaryCtxRetain);
    FN(cuCtxSetCurrent);
    FN(cuCtxGetCurrent);
    FN(cuPointerGetAttribute);
    FN(cuFuncGetAttribute);
    FN(cuEventCreate);
    FN(cuEventRecord);
    FN(cuEventDestroy);
    FN(cuStreamWaitEvent);
    FN(cuCtxSynchronize);
    FN(cuStreamCreate);
    FN(cuStreamSynchronize);
    FN(cuGetErrorName);
    FN(cuGetErrorString);
    FN(cuMemAlloc);
    FN(cuMemFree);
    FN(cuMemAllocAsync);
    FN(cuMemFreeAsync);
    FN(cuMemcpyHtoDAsync);
    FN(cuMemcpyDtoHAsync);
    FN(cuMemcpyDtoDAsync);
    FN(cuMemsetD8Async);
    FN(cuMemHostAlloc);
    FN(cuMemFreeHost);
    FN(cuMemGetInfo);
    FN(cuDeviceGetDefaultMemPool);
    FN(cuMemPoolSetAttribute);
    FN(cuModuleLoadDataEx);
    FN(cuModuleGetFunction);
    FN(cuModuleUnload);
    FN(cuLaunchKernel);
} api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_status = FL_CU_NO_LIBRARY;
static char init_msg[512] = "the CUDA driver was not initialised";
static int init_ordinal = 0;
static char init_library[4096] = "";   /* the library to open ("": libcuda.so.1) */
static CUdevice device;
static CUcontext context;
static CUstream stream;
static int64_t live_bytes = 0;

#define say(...) snprintf(init_msg, sizeof init_msg, __VA_ARGS__)

static void load(void) {
    void *lib = dlopen(*init_library ? init_library : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        say("no NVIDIA driver: libcuda could not be loaded (%s)", why ? why : "?");
        init_status = FL_CU_NO_LIBRARY;
        return;
    }
#define LOAD(name)                                                              \
    if (!(api.name##_p = (__typeof__(api.name##_p))dlsym(lib, STR(name)))) {    \
        say("the NVIDIA driver is too old: libcuda has no %s", STR(name));           \
        init_status = FL_CU_NO_SYMBOL;                                          \
        return;                                                                 \
    }
    LOAD(cuInit) LOAD(cuDriverGetVersion) LOAD(cuDeviceGetCount) LOAD(cuDeviceGet)
    LOAD(cuDeviceGetAttribute) LOAD(cuDeviceGetName) LOAD(cuDevicePrimaryCtxRetain)
    LOAD(cuCtxSetCurrent) LOAD(cuStreamCreate) LOAD(cuStreamSynchronize) LOAD(cuGetErrorName)
    LOAD(cuGetErrorString) LOAD(cuMemAlloc) LOAD(cuMemFree) LOAD(cuMemAllocAsync)
    LOAD(cuMemFreeAsync) LOAD(cuMemcpyHtoDAsync) LOAD(cuMemcpyDtoHAsync)
    LOAD(cuMemcpyDtoDAsync) LOAD(cuMemsetD8Async) LOAD(cuMemHostAlloc) LOAD(cuMemFreeHost)
    LOAD(cuMemGetInfo) LOAD(cuDeviceGetDefaultMemPool) LOAD(cuMemPoolSetAttribute)
    LOAD(cuModuleLoadDataEx) LOAD(cuModuleGetFunction) LOAD(cuModuleUnload)
    LOAD(cuLaunchKernel) LOAD(cuCtxGetCurrent) LOAD(cuPointerGetAttribute)
    LOAD(cuFuncGetAttribute) LOAD(cuEventCreate) LOAD(cuEventRecord) LOAD(cuEventDestroy)
    LOAD(cuStreamWaitEvent) LOAD(cuCtxSynchronize)
#undef LOAD
    CUresult r = api.cuInit_p(0);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        api.cuGetErrorName_p(r, &name);
        if (r == CUDA_ERROR_NO_DEVICE)
            say("no CUDA device: cuInit failed with %s (%d); is CUDA_VISIBLE_DEVICES empty?",
                name, r);
        else
            say("the CUDA driver did not initialise: cuInit failed with %s (%d)", name, r);
        init_status = r;
        return;
    }
    int count = 0;
    if ((r = api.cuDeviceGetCount_p(&count)) == CUDA_SUCCESS && count <= init_ordinal) {
        say("no CUDA device %d: the driver sees %d device(s)", init_ordinal, count);
        init_status = CUDA_ERROR_INVALID_DEVICE;
        return;
    }
    CUmemoryPool pool;
    cuuint64_t keep = ~(cuuint64_t)0;
    if (r == CUDA_SUCCESS) r = api.cuDeviceGet_p(&device, init_ordinal);
    if (r == CUDA_SUCCESS) r = api.cuDevicePrimaryCtxRetain_p(&context, device);
    if (r == CUDA_SUCCESS) r = api.cuCtxSetCurrent_p(context);
    if (r == CUDA_SUCCESS) r = api.cuStreamCreate_p(&stream, CU_STREAM_NON_BLOCKING);
    /* stream-ordered allocations stay in the device's pool between calls instead of
       going back to the driver at every synchronisation */
    if (r == CUDA_SUCCESS) r = api.cuDeviceGetDefaultMemPool_p(&pool, device);
    if (r == CUDA_SUCCESS)
        r = api.cuMemPoolSetAttribute_p(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        api.cuGetErrorName_p(r, &name);
        say("the CUDA device could not be set up: %s (%d)", name, r);
        init_status = r;
        return;
    }
    init_status = CUDA_SUCCESS;
    init_msg[0] = 0;
}

int fl_cu_init(int ordinal, const char *library, char *msg, size_t msglen) {
    init_ordinal = ordinal;
    /* read by the first call's load() only; later calls return the first outcome */
    if (library && !*init_library) snprintf(init_library, sizeof init_library, "%s", library);
    pthread_once(&once, load);
    if (msg && msglen) snprintf(msg, msglen, "%s", init_msg);
    return init_status;
}

int fl_cu_ready(void) { return init_status == CUDA_SUCCESS; }

const char *fl_cu_error_name(int code) {
    const char *s = NULL;
    if (api.cuGetErrorName_p == NULL || api.cuGetErrorName_p((CUresult)code, &s) != CUDA_SUCCESS)
        return "";
    return s ? s : "";
}

const char *fl_cu_error_string(int code) {
    const char *s = NULL;
    if (api.cuGetErrorString_p == NULL ||
        api.cuGetErrorString_p((CUresult)code, &s) != CUDA_SUCCESS)
        return "";
    return s ? s : "";
}

int fl_cu_device_info(int *major, int *minor, int *multiprocessors, int *driver_version,
                      char *name, int namelen) {
    CUresult r = api.cuDeviceGetAttribute_p(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                            device);
    if (r == CUDA_SUCCESS)
        r = api.cuDeviceGetAttribute_p(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                       device);
    if (r == CUDA_SUCCESS)
        r = api.cuDeviceGetAttribute_p(multiprocessors,
                                       CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    if (r == CUDA_SUCCESS) r = api.cuDriverGetVersion_p(driver_version);
    if (r == CUDA_SUCCESS) r = api.cuDeviceGetName_p(name, namelen, device);
    return r;
}

int fl_cu_enter(void **saved) {
    CUcontext mine = NULL;
    *saved = NULL;
    if (init_status != CUDA_SUCCESS) return init_status;
    CUresult r = api.cuCtxGetCurrent_p(&mine);
    *saved = mine;
    if (r != CUDA_SUCCESS || mine == context) return r;
    return api.cuCtxSetCurrent_p(context);
}

int fl_cu_leave(void *saved) {
    if (init_status != CUDA_SUCCESS || (CUcontext)saved == context) return CUDA_SUCCESS;
    return api.cuCtxSetCurrent_p((CUcontext)saved);
}

int fl_cu_device_ordinal(void) { return init_ordinal; }

int fl_cu_ctx_sync(void) { return api.cuCtxSynchronize_p(); }

int fl_cu_pointer_device(uint64_t dptr, int *ordinal) {
    *ordinal = -1;
    return api.cuPointerGetAttribute_p(ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       (CUdeviceptr)dptr);
}

int fl_cu_func_max_threads(void *function, int *max_threads) {
    return api.cuFuncGetAttribute_p(max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                    (CUfunction)function);
}

int fl_cu_func_limits(void *function, int *max_threads, int *regs, int *local_bytes,
                      int *shared_bytes) {
    CUfunction f = (CUfunction)function;
    CUresult r = api.cuFuncGetAttribute_p(max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
    if (r == CUDA_SUCCESS) r = api.cuFuncGetAttribute_p(regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
    if (r == CUDA_SUCCESS)
        r = api.cuFuncGetAttribute_p(local_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f);
    if (r == CUDA_SUCCESS)
        r = api.cuFuncGetAttribute_p(shared_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
    return r;
}

int fl_cu_stream_wait(uint64_t waiter, uint64_t signaller) {
    CUstream w = waiter ? (CUstream)(uintptr_t)waiter : stream;
    CUstream s = signaller ? (CUstream)(uintptr_t)signaller : stream;
    CUevent ev;
    if (w == s) return CUDA_SUCCESS;
    CUresult r = api.cuEventCreate_p(&ev, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) return r;
    r = api.cuEventRecord_p(ev, s);
    if (r == CUDA_SUCCESS) r = api.cuStreamWaitEvent_p(w, ev, 0);
    /* released by the driver once the wait is over */
    CUresult d = api.cuEventDestroy_p(ev);
    return r != CUDA_SUCCESS ? r : d;
}

int fl_cu_mem_alloc(uint64_t *dptr, size_t nbytes) {
    CUdeviceptr p = 0;
    CUresult r = api.cuMemAlloc_p(&p, nbytes ? nbytes : 1);
    *dptr = (uint64_t)p;
    return r;
}

int fl_cu_mem_free(uint64_t dptr) { return api.cuMemFree_p((CUdeviceptr)dptr); }

int fl_cu_alloc_async(uint64_t *dptr, size_t nbytes) {
    CUdeviceptr p = 0;
    CUresult r = api.cuMemAllocAsync_p(&p, nbytes ? nbytes : 1, stream);
    *dptr = (uint64_t)p;
    return r;
}

int fl_cu_free_async(uint64_t dptr) { return api.cuMemFreeAsync_p((CUdeviceptr)dptr, stream); }

void fl_cu_count(int64_t nbytes) { __atomic_fetch_add(&live_bytes, nbytes, __ATOMIC_RELAXED); }

int64_t fl_cu_live_bytes(void) { return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED); }

int fl_cu_htod(uint64_t dst, const void *src, size_t nbytes) {
    return api.cuMemcpyHtoDAsync_p((CUdeviceptr)dst, src, nbytes, stream);
}

int fl_cu_dtoh(void *dst, uint64_t src, size_t nbytes) {
    return api.cuMemcpyDtoHAsync_p(dst, (CUdeviceptr)src, nbytes, stream);
}

int fl_cu_dtod(uint64_t dst, uint64_t src, size_t nbytes) {
    return api.cuMemcpyDtoDAsync_p((CUdeviceptr)dst, (CUdeviceptr)src, nbytes, stream);
}

int fl_cu_zero(uint64_t dst, size_t nbytes) {
    return api.cuMemsetD8Async_p((CUdeviceptr)dst, 0, nbytes, stream);
}

int fl_cu_sync(void) { return api.cuStreamSynchronize_p(stream); }

int fl_cu_stream_sync(uint64_t other) {
    return api.cuStreamSynchronize_p((CUstream)(uintptr_t)other);
}

int fl_cu_host_alloc(void **ptr, size_t nbytes) { return api.cuMemHostAlloc_p(ptr, nbytes, 0); }

int fl_cu_host_free(void *ptr) { return api.cuMemFreeHost_p(ptr); }

int fl_cu_mem_info(size_t *free_bytes, size_t *total_bytes) {
    return api.cuMemGetInfo_p(free_bytes, total_bytes);
}

int fl_cu_module_load(const void *image, const char *entry, void **module, void **function,
                      char *log, size_t loglen) {
    /* the JIT's error log says why PTX did not compile (when the image is PTX) */
    CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)loglen};
    CUmodule m = NULL;
    CUfunction f = NULL;
    if (log && loglen) log[0] = 0;
    CUresult r = api.cuModuleLoadDataEx_p(&m, image, log && loglen ? 2 : 0, opts, vals);
    if (r != CUDA_SUCCESS) return r;
    r = api.cuModuleGetFunction_p(&f, m, entry);
    if (r != CUDA_SUCCESS) {
        api.cuModuleUnload_p(m);
        return r;
    }
    *module = m;
    *function = f;
    return CUDA_SUCCESS;
}

int fl_cu_module_unload(void *module) { return api.cuModuleUnload_p((CUmodule)module); }

int fl_cu_launch(void *function, unsigned grid, unsigned block, void **params) {
    return api.cuLaunchKernel_p((CUfunction)function, grid, 1, 1, block, 1, 1, 0, stream,
                                params, NULL);
}
