/* fastlaunch host runtime: worker pool and caching memory pool.  See runtime.h. */
#define _GNU_SOURCE
#include "runtime.h"
#include "interrupt.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

void fl_null_kernel(int64_t start, int64_t end, int64_t *args) {
    (void)start; (void)end; (void)args;
}

/* ======================================================================================
 * Worker pool.  One launch at a time owns the pool (launch_lock); a second concurrent
 * caller runs its launch on its own thread instead of waiting.  Workers spin for a while
 * after each job, then sleep on a condition variable, so that back-to-back launches of a
 * program pay no wake-up cost while an idle process burns no CPU.
 *
 * `generation` works as a seqlock: odd while the launcher rewrites `job`, even once the job
 * is published.  A worker announces itself in `active`, then re-checks that the generation
 * it saw is still current before touching the job; the launcher makes the generation odd
 * first and then waits for `active` to drain, so no worker can run a half-written job.
 * ====================================================================================== */
#define MAX_WORKERS 256

typedef struct {
    fl_kernel_fn fn;
    int64_t *args;
    int64_t n;
    int64_t chunk;
    int64_t nchunks;
    _Atomic int64_t next;
    _Atomic int64_t done;
} job_t;

static job_t job;
static _Atomic uint64_t generation;
static _Atomic int active;          /* workers inside a job */
static _Atomic int sleeping;
static _Atomic int stopping;
static _Atomic int parked;          /* fl_pool_park: sleep now instead of spinning */
static _Atomic int64_t parked_at;   /* when */
#define PARKED_FACTOR 16
#define PARKED_NS 100000000
static int nworkers;                /* threads besides the caller */
static int started;
static pthread_t workers[MAX_WORKERS];
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t sleep_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleep_cv = PTHREAD_COND_INITIALIZER;
/* measured here: a 4-operation map breaks even at 32-64K elements, exp() at 8-16K */
int64_t fl_parallel_threshold = 131072;   /* read by fl_launch_inline (runtime.h) */
static int64_t spin_ns = 200000;
static int default_threads;         /* fl_configure; 0: every available CPU */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_chunks(void) {
    int64_t c;
    while ((c = atomic_fetch_add(&job.next, 1)) < job.nchunks) {
        int64_t s = c * job.chunk;
        int64_t e = s + job.chunk < job.n ? s + job.chunk : job.n;
        job.fn(s, e, job.args);
        atomic_fetch_add(&job.done, 1);
    }
}

static int no_new_job(uint64_t seen) {
    uint64_t g = atomic_load(&generation);
    return (g == seen || (g & 1)) && !atomic_load(&stopping);
}

static void *worker_main(void *unused) {
    (void)unused;
    uint64_t seen = atomic_load(&generation) & ~(uint64_t)1;
    for (;;) {
        int64_t deadline = now_ns() + spin_ns;
        int spins = 0;
        while (no_new_job(seen)) {
            cpu_relax();
            if (atomic_load_explicit(&parked, memory_order_relaxed) ||
                    (++spins % 1024 == 0 && now_ns() > deadline)) {
                pthread_mutex_lock(&sleep_mu);
                atomic_fetch_add(&sleeping, 1);
                while (no_new_job(seen))
                    pthread_cond_wait(&sleep_cv, &sleep_mu);
                atomic_fetch_sub(&sleeping, 1);
                pthread_mutex_unlock(&sleep_mu);
            }
        }
        if (atomic_load(&stopping)) return NULL;
        uint64_t g = atomic_load(&generation);
        if (g & 1) continue;                  /* the launcher is rewriting the job */
        /* announce, then re-check: see the seqlock comment above */
        atomic_fetch_add(&active, 1);
        if (atomic_load(&generation) == g) run_chunks();
        atomic_fetch_sub(&active, 1);
        seen = g;
    }
}

static int available_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
    return 1;
}

int fl_pool_start(int nthreads) {
    pthread_mutex_lock(&start_lock);
    if (!started) {
        if (nthreads <= 0) nthreads = default_threads > 0 ? default_threads : available_cpus();
        if (nthreads < 1) nthreads = 1;
        if (nthreads > MAX_WORKERS) nthreads = MAX_WORKERS;
        atomic_store(&stopping, 0);
        int made = 0;
        for (int i = 0; i < nthreads - 1; i++) {
            if (pthread_create(&workers[i], NULL, worker_main, NULL) != 0) break;
            made++;
        }
        nworkers = made;
        started = 1;
    }
    int total = nworkers + 1;
    pthread_mutex_unlock(&start_lock);
    return total;
}

void fl_pool_stop(void) {
    pthread_mutex_lock(&start_lock);
    if (started) {
        pthread_mutex_lock(&launch_lock);
        atomic_store(&stopping, 1);
        pthread_mutex_lock(&sleep_mu);
        pthread_cond_broadcast(&sleep_cv);
        pthread_mutex_unlock(&sleep_mu);
        for (int i = 0; i < nworkers; i++) pthread_join(workers[i], NULL);
        nworkers = 0;
        started = 0;
        pthread_mutex_unlock(&launch_lock);
    }
    pthread_mutex_unlock(&start_lock);
}

int fl_pool_threads(void) { return started ? nworkers + 1 : 0; }
void fl_set_parallel_threshold(int64_t work) { fl_parallel_threshold = work; }
int64_t fl_get_parallel_threshold(void) { return fl_parallel_threshold; }
void fl_set_spin_us(int64_t us) { spin_ns = us * 1000; }

/* A library routine (BLAS) runs its own threads: spinning workers would take cores from
 * them (measured: a 512x256x256 float32 gemm right after a fused kernel ran 1.6x longer on
 * 2 cores), so they go to sleep now; the next launch wakes them. */
void fl_pool_park(void) {
    if (!started) return;
    atomic_store_explicit(&parked_at, now_ns(), memory_order_relaxed);
    if (!atomic_load_explicit(&parked, memory_order_relaxed)) atomic_store(&parked, 1);
}

void fl_launch(fl_kernel_fn fn, int64_t n, int64_t work_per_item, int64_t *args) {
    if (n <= 0) return;
    if (work_per_item < 0) {          /* must run on one thread, in order (scatters) */
        fn(0, n, args);
        return;
    }
    int64_t work;
    if (__builtin_mul_overflow(n, work_per_item > 0 ? work_per_item : 1, &work))
        work = INT64_MAX;
    if (work < fl_parallel_threshold || n < 2) {
        fn(0, n, args);
        return;
    }
    /* Right after a library routine (fl_pool_park) its own threads spin on (OpenBLAS: about
     * 0.1 s): a launch of moderate work runs faster on the caller alone than split with a
     * worker that must share a core with them (measured: tanh(x @ W + b), 512x256x256
     * float32, 0.70 ms -> 0.47 ms on 2 cores; NumPy 0.48). */
    if (atomic_load_explicit(&parked, memory_order_relaxed) &&
            work / PARKED_FACTOR < fl_parallel_threshold &&
            now_ns() - atomic_load_explicit(&parked_at, memory_order_relaxed) < PARKED_NS) {
        fn(0, n, args);
        return;
    }
    if (!started) fl_pool_start(0);
    if (nworkers == 0 || pthread_mutex_trylock(&launch_lock) != 0) {
        fn(0, n, args);
        return;
    }
    atomic_fetch_add(&generation, 1);         /* odd: workers keep off the job */
    while (atomic_load(&active) != 0) cpu_relax();
    int threads = nworkers + 1;
    /* a few chunks per thread balance uneven progress; none smaller than the threshold/4 */
    int64_t nchunks = (int64_t)threads * 4;
    int64_t min_items = (fl_parallel_threshold / 4) / (work_per_item > 0 ? work_per_item : 1);
    if (min_items < 1) min_items = 1;
    if (n / nchunks < min_items) nchunks = n / min_items > 0 ? n / min_items : 1;
    int64_t chunk = (n + nchunks - 1) / nchunks;
    if (chunk >= 64) chunk = (chunk + 63) & ~(int64_t)63;  /* whole vectors per chunk */
    job.fn = fn;
    job.args = args;
    job.n = n;
    job.chunk = chunk;
    job.nchunks = (n + chunk - 1) / chunk;
    atomic_store(&job.done, 0);
    atomic_store(&job.next, 0);
    atomic_store(&parked, 0);
    atomic_fetch_add(&generation, 1);         /* even: published */
    if (atomic_load(&sleeping) > 0) {
        pthread_mutex_lock(&sleep_mu);
        pthread_cond_broadcast(&sleep_cv);
        pthread_mutex_unlock(&sleep_mu);
    }
    run_chunks();
    while (atomic_load(&job.done) < job.nchunks) cpu_relax();
    pthread_mutex_unlock(&launch_lock);
}

/* ======================================================================================
 * Memory pool.  Size classes: powers of two up to 4 KiB, then four classes per power of
 * two.  A 64-byte header in front of each block records its class, so that free needs no
 * size.  Freed blocks are kept (up to a byte budget) and handed out again: a repeated
 * program reuses the same warm pages instead of faulting in fresh ones every call.
 * ====================================================================================== */
#define HEADER 64
#define NCLASSES 256
/* Blocks of at least HUGE_BYTES start on a 2 MiB boundary and are advised onto transparent
 * huge pages, as NumPy does for its large arrays (THP's default "madvise" mode gives huge
 * pages to advised regions only): 512x fewer page faults when a block is first touched, and
 * far fewer TLB misses when a kernel streams through it. */
#define HUGE_BYTES ((int64_t)4 << 20)
#define HUGE_ALIGN ((int64_t)2 << 20)
/* A huge block's data starts 3136 bytes into a 4 KiB page, not at its start: NumPy's large
 * arrays start 16 bytes into a page, and a kernel storing at the same page offset as it loads
 * stalls on 4K aliasing (measured: the chain at 4M elements, 2.9 ms vs 0.76 ms). */
#ifndef HUGE_DATA
#define HUGE_DATA ((int64_t)3072 + 64)
#endif

typedef struct block {
    int64_t cls;
    struct block *next;
    void *base;                  /* what aligned_alloc returned (free's argument) */
} block_t;

static block_t *free_lists[NCLASSES];
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t cached_bytes;
static _Atomic int64_t live_bytes;
static int64_t cache_limit = (int64_t)4096 << 20;    /* fl_configure */

static int64_t class_of(int64_t nbytes, int64_t *size) {
    if (nbytes <= 64) { *size = 64; return 0; }
    int p = 64 - __builtin_clzll((uint64_t)(nbytes - 1));   /* 2^p >= nbytes */
    if (p <= 12) { *size = (int64_t)1 << p; return p - 6; }
    int64_t quarter = (int64_t)1 << (p - 3);                  /* 2^(p-1) / 4 */
    int64_t base = (int64_t)1 << (p - 1);
    int64_t k = (nbytes - base + quarter - 1) / quarter;      /* 1..4 */
    *size = base + k * quarter;
    return 7 + (int64_t)(p - 13) * 4 + k;
}

static int64_t class_size(int64_t cls) {
    if (cls <= 6) return (int64_t)64 << cls;
    int64_t c = cls - 7;
    int p = 13 + (int)((c - 1) / 4);
    int64_t k = (c - 1) % 4 + 1;
    return ((int64_t)1 << (p - 1)) + k * ((int64_t)1 << (p - 3));
}

void *fl_mem_alloc(int64_t nbytes) {
    int64_t size;
    if (nbytes > ((int64_t)1 << 62)) return NULL;   /* no such memory; the classes overflow */
    int64_t cls = class_of(nbytes > 0 ? nbytes : 1, &size);
    if (cls < 0 || cls >= NCLASSES) return NULL;
    block_t *b = NULL;
    pthread_mutex_lock(&mem_lock);
    if (free_lists[cls]) {
        b = free_lists[cls];
        free_lists[cls] = b->next;
        cached_bytes -= size;
    }
    pthread_mutex_unlock(&mem_lock);
    if (!b) {
        char *base;
        if (size >= HUGE_BYTES) {
            int64_t total = (HUGE_DATA + size + HUGE_ALIGN - 1) & ~(HUGE_ALIGN - 1);
            base = aligned_alloc((size_t)HUGE_ALIGN, (size_t)total);
#ifdef MADV_HUGEPAGE
            if (base) madvise(base, (size_t)total, MADV_HUGEPAGE);  /* advice: may fail */
#endif
            b = base ? (block_t *)(base + HUGE_DATA - HEADER) : NULL;
        } else {
            base = aligned_alloc(64, (size_t)(HEADER + size));
            b = (block_t *)base;
        }
        if (!b) return NULL;
        b->cls = cls;
        b->base = base;
    }
    atomic_fetch_add(&live_bytes, size);
    return (char *)b + HEADER;
}

void fl_mem_free(void *ptr) {
    if (!ptr) return;
    block_t *b = (block_t *)((char *)ptr - HEADER);
    int64_t size = class_size(b->cls);
    atomic_fetch_sub(&live_bytes, size);
    pthread_mutex_lock(&mem_lock);
    if (cached_bytes + size <= cache_limit) {
        b->next = free_lists[b->cls];
        free_lists[b->cls] = b;
        cached_bytes += size;
        b = NULL;
    }
    pthread_mutex_unlock(&mem_lock);
    if (b) free(b->base);
}

void fl_mem_trim(void) {
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < NCLASSES; i++) {
        block_t *b = free_lists[i];
        while (b) {
            block_t *next = b->next;
            free(b->base);
            b = next;
        }
        free_lists[i] = NULL;
    }
    cached_bytes = 0;
    pthread_mutex_unlock(&mem_lock);
}

int64_t fl_mem_cached_bytes(void) {
    pthread_mutex_lock(&mem_lock);
    int64_t v = cached_bytes;
    pthread_mutex_unlock(&mem_lock);
    return v;
}

int64_t fl_mem_live_bytes(void) { return atomic_load(&live_bytes); }

/* ======================================================================================
 * Configuration and fork.
 *
 * fork() copies only the calling thread.  A lock another thread held at that moment stays
 * held in the child forever, and the workers the pool counts do not exist there.  So the
 * prepare handler (registered when _core is imported, whether or not a pool ever starts)
 * takes every runtime lock in one fixed order, the order the runtime itself nests them
 * (start, launch, sleep, memory, then interrupt.c's); that also waits out a launch or a pool
 * start in progress, none of which needs the GIL the forking thread holds.  The parent
 * releases them; the child re-initialises them (it holds them, and the condition variable
 * may count waiters that are gone) and forgets the pool, which it starts afresh on its first
 * large launch.  Blocks other threads held at the fork stay counted in the child's live
 * bytes: their owners do not exist there to free them.
 *
 * Random numbers: executables key each call's draws on their seed and call count, both of
 * which a child inherits, so the child mixes a salt of its own into every key (runtime.h).
 * The forks are counted under the locks above: two threads forking at once get two indices.
 * ====================================================================================== */
static uint64_t rng_salt;        /* fl_rng_salt */
static uint64_t forks_made;      /* by this process */

static void fork_prepare(void) {
    pthread_mutex_lock(&start_lock);
    pthread_mutex_lock(&launch_lock);
    pthread_mutex_lock(&sleep_mu);
    pthread_mutex_lock(&mem_lock);
    fl_interrupt_fork_prepare();
    forks_made++;
}

static void fork_parent(void) {
    fl_interrupt_fork_parent();
    pthread_mutex_unlock(&mem_lock);
    pthread_mutex_unlock(&sleep_mu);
    pthread_mutex_unlock(&launch_lock);
    pthread_mutex_unlock(&start_lock);
}

static void fork_child(void) {
    fl_interrupt_fork_child();
    /* splitmix64 of the parent's salt and this fork's index: a bijection, so the first
     * process's children (salt 0, index >= 1) never get salt 0 */
    uint64_t z = rng_salt + forks_made * 0xD1B54A32D192ED03ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    rng_salt = z ^ (z >> 31);
    forks_made = 0;
    started = 0;
    nworkers = 0;
    atomic_store(&active, 0);
    atomic_store(&sleeping, 0);
    atomic_store(&stopping, 0);
    /* launch_lock was held: no job is half-published, but keep the seqlock even regardless */
    atomic_store(&generation, atomic_load(&generation) & ~(uint64_t)1);
    pthread_mutex_init(&mem_lock, NULL);
    pthread_cond_init(&sleep_cv, NULL);
    pthread_mutex_init(&sleep_mu, NULL);
    pthread_mutex_init(&launch_lock, NULL);
    pthread_mutex_init(&start_lock, NULL);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_status;

static void init_runtime(void) {
    init_status = pthread_atfork(fork_prepare, fork_parent, fork_child);
}

uint64_t fl_rng_salt(void) { return rng_salt; }

int fl_runtime_init(void) {
    pthread_once(&init_once, init_runtime);
    return init_status;
}

int fl_configure(int nthreads, int64_t pool_limit_bytes) {
    if (nthreads < 0 || nthreads > MAX_WORKERS || pool_limit_bytes < 0) return -1;
    pthread_mutex_lock(&start_lock);
    default_threads = nthreads;
    pthread_mutex_unlock(&start_lock);
    pthread_mutex_lock(&mem_lock);
    cache_limit = pool_limit_bytes;
    pthread_mutex_unlock(&mem_lock);
    return 0;
}

int fl_max_threads(void) { return MAX_WORKERS; }

/* The null backend's library routine (LIBCALL): writes nothing, like fl_null_kernel. */
#include "library.h"
int fl_library_null(const int64_t *operands, const int64_t *slots) {
    (void)operands;
    (void)slots;
    return 0;
}
