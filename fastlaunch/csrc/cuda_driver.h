/* The CUDA driver as the CUDA executable (_cuda.pyx) calls it: libcuda is opened with dlopen
   on first use (never at import), its entry points are resolved once into a table, and each
   call below is one driver call returning its CUresult (0: success).  Handles cross as
   void *, device pointers as uint64_t, so the Cython side needs no driver types.

   One process-wide context (the device's primary context) and one non-blocking stream:
   every program runs in order on it.  Every entry point of _cuda.pyx makes the context
   current with fl_cu_enter and gives the calling thread its own context back with
   fl_cu_leave, so a caller's context (another library's, another device's) is as it was. */
#ifndef FASTLAUNCH_CUDA_DRIVER_H
#define FASTLAUNCH_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* Returned by fl_cu_init when it did not get as far as a driver call (no libcuda, a
   missing entry point); not a CUresult. */
#define FL_CU_NO_LIBRARY (-1)
#define FL_CU_NO_SYMBOL (-2)

/* Open the driver library `library` (NULL or "": libcuda.so.1; the Python side passes
   FASTLAUNCH_LIBCUDA, read by env.py), resolve the entry points, cuInit, take device
   `ordinal`'s primary context and create the stream.  Idempotent: later calls return the
   first outcome.  On failure msg holds why. */
int fl_cu_init(int ordinal, const char *library, char *msg, size_t msglen);
int fl_cu_ready(void);
/* The CUresult's enum name ("CUDA_ERROR_OUT_OF_MEMORY") and description; "" if unknown or
   the driver is not loaded. */
const char *fl_cu_error_name(int code);
const char *fl_cu_error_string(int code);

int fl_cu_device_info(int *major, int *minor, int *multiprocessors, int *driver_version,
                      char *name, int namelen);
/* fastlaunch's context current, the caller's (possibly none) in *saved; fl_cu_leave(saved)
   makes that current again */
int fl_cu_enter(void **saved);
int fl_cu_leave(void *saved);
int fl_cu_device_ordinal(void);                /* the device fastlaunch's context is on */
/* the ordinal of the device whose memory dptr is (cuPointerGetAttribute); an error for
   memory the driver does not know */
int fl_cu_pointer_device(uint64_t dptr, int *ordinal);
/* the most threads per block the loaded kernel can be launched with (its registers) */
int fl_cu_func_max_threads(void *function, int *max_threads);
/* what the loaded kernel's code needs and allows (cuFuncGetAttribute): the most threads per
   block, registers per thread, local memory per thread, static shared memory per block */
int fl_cu_func_limits(void *function, int *max_threads, int *regs, int *local_bytes,
                      int *shared_bytes);
/* Stream order by an event, without waiting on the host: work enqueued on `waiter` from now
   on waits for the work enqueued on `signaller` so far (0 for either: fastlaunch's stream;
   1 and 2: the legacy and per-thread default streams, as CUDA defines those handles). */
int fl_cu_stream_wait(uint64_t waiter, uint64_t signaller);
int fl_cu_ctx_sync(void);                      /* the whole device: a last resort */

/* memory: synchronous (link time) and stream-ordered (the interpreter) */
int fl_cu_mem_alloc(uint64_t *dptr, size_t nbytes);
int fl_cu_mem_free(uint64_t dptr);
int fl_cu_alloc_async(uint64_t *dptr, size_t nbytes);
int fl_cu_free_async(uint64_t dptr);
int fl_cu_htod(uint64_t dst, const void *src, size_t nbytes);
int fl_cu_dtoh(void *dst, uint64_t src, size_t nbytes);
int fl_cu_dtod(uint64_t dst, uint64_t src, size_t nbytes);
int fl_cu_zero(uint64_t dst, size_t nbytes);
int fl_cu_sync(void);
int fl_cu_stream_sync(uint64_t stream);          /* another library's stream (a CUstream) */
int fl_cu_host_alloc(void **ptr, size_t nbytes);  /* pinned host memory */
int fl_cu_host_free(void *ptr);
int fl_cu_mem_info(size_t *free_bytes, size_t *total_bytes);
/* a count of the device bytes fastlaunch holds (its callers add and subtract), so tests
   can check that failed runs leak nothing */
void fl_cu_count(int64_t nbytes);
int64_t fl_cu_live_bytes(void);

/* modules */
int fl_cu_module_load(const void *image, const char *entry, void **module, void **function,
                      char *log, size_t loglen);
int fl_cu_module_unload(void *module);
int fl_cu_launch(void *function, unsigned grid, unsigned block, void **params);

#endif
