/* fastlaunch host runtime: a persistent worker pool for kernel launches and a caching
 * memory pool for temporaries.  Plain C so that it runs without the GIL. */
#ifndef FASTLAUNCH_RUNTIME_H
#define FASTLAUNCH_RUNTIME_H

#include <stdint.h>

/* The kernel ABI: visit [start, end) of the launch range; args holds one word per argument. */
typedef void (*fl_kernel_fn)(int64_t start, int64_t end, int64_t *args);

/* A kernel that does nothing: the null backend's every kernel. */
void fl_null_kernel(int64_t start, int64_t end, int64_t *args);

/* ---- process-wide set-up (called when _core is imported) ---- */
/* Registers the fork handlers that keep every runtime lock and the pool usable in a forked
 * child.  Idempotent; returns 0 or pthread_atfork's error. */
int fl_runtime_init(void);
/* nthreads: the pool's size when started with 0 (0: every available CPU), at most
 * fl_max_threads(); pool_limit_bytes: freed blocks kept for reuse.  -1 if out of range. */
int fl_configure(int nthreads, int64_t pool_limit_bytes);
int fl_max_threads(void);
/* This process's salt for random keys: 0 in a process that was not forked; in a forked child,
 * a hash of its parent's salt and the number of forks its parent had made, so a child never
 * draws its parent's or a sibling's numbers, and the same forks give the same salts. */
uint64_t fl_rng_salt(void);

/* ---- worker pool ---- */
int fl_pool_start(int nthreads);          /* idempotent; nthreads counts the caller,
                                           * 0: the configured default */
void fl_pool_stop(void);
int fl_pool_threads(void);
void fl_set_parallel_threshold(int64_t work);
int64_t fl_get_parallel_threshold(void);
void fl_set_spin_us(int64_t us);
void fl_pool_park(void);                  /* spinning workers sleep until the next launch */

/* Run fn over [0, n): serially when n * work_per_item is below the threshold (or the pool is
 * busy with another caller's launch), else split in chunks over the pool and the caller.
 * work_per_item < 0 means the kernel must run on one thread, in order. */
void fl_launch(fl_kernel_fn fn, int64_t n, int64_t work_per_item, int64_t *args);

/* fl_launch with its serial case inlined into the interpreter: a launch below the threshold
 * (every launch of a small program) calls fn on this thread directly; the call into the
 * runtime and its checks cost as much as a 16-element kernel. */
extern int64_t fl_parallel_threshold;
static inline void fl_launch_inline(fl_kernel_fn fn, int64_t n, int64_t work_per_item,
                                    int64_t *args) {
    int64_t work;
    if (n > 1 && work_per_item >= 0 &&
            (__builtin_mul_overflow(n, work_per_item > 0 ? work_per_item : 1, &work) ||
             work >= fl_parallel_threshold)) {
        fl_launch(fn, n, work_per_item, args);
        return;
    }
    if (n > 0) fn(0, n, args);
}

/* ---- memory pool: 64-byte aligned blocks, cached by size class ---- */
void *fl_mem_alloc(int64_t nbytes);
void fl_mem_free(void *ptr);
void fl_mem_trim(void);                   /* release every cached block */
int64_t fl_mem_cached_bytes(void);
int64_t fl_mem_live_bytes(void);

#endif
