/* See interrupt.h.
 *
 * Signal-safety: the handler only stores to a lock-free atomic, reads one atomic pointer and
 * calls the handler it stands in front of (itself a signal handler), plus sigaction() for a
 * one-shot predecessor; all async-signal-safe.  It never reads a record that arm() may be
 * rewriting: arm() fills the spare one of two records and then publishes it with one atomic
 * pointer store, while the handler is not even installed (we re-chain only after someone
 * else's sigaction() replaced ours). */
#define _GNU_SOURCE
#include "interrupt.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static atomic_int pending;
static _Thread_local int polling;                  /* this thread's POLLs are armed */
static struct sigaction records[2];
static _Atomic(const struct sigaction *) previous; /* the handler we chain to (Python's) */
static int spare;                                  /* the record arm() may fill next */
static struct sigaction default_action;            /* SIG_DFL, for one-shot predecessors */
static pthread_mutex_t arm_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sigint(int sig, siginfo_t *info, void *ctx) {
    int saved_errno = errno;
    atomic_store(&pending, 1);
    const struct sigaction *prev = atomic_load(&previous);
    if (prev) {
        if (prev->sa_flags & SA_RESETHAND)
            /* a one-shot handler: its delivery resets SIGINT to the default, as the kernel
             * would have done had it been called directly (and takes us out with it) */
            sigaction(sig, &default_action, NULL);
        if (prev->sa_flags & SA_SIGINFO) {
            if (prev->sa_sigaction) prev->sa_sigaction(sig, info, ctx);
        } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
            prev->sa_handler(sig);
        }
    }
    errno = saved_errno;
}

static int is_ours(const struct sigaction *a) {
    return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == on_sigint;
}

/* Nothing to stand in front of: SIGINT is ignored, or its default ends the process anyway. */
static int not_handled(const struct sigaction *a) {
    return !(a->sa_flags & SA_SIGINFO) && (a->sa_handler == SIG_IGN || a->sa_handler == SIG_DFL);
}

static void publish(const struct sigaction *a) {
    records[spare] = *a;
    atomic_store(&previous, &records[spare]);
    spare ^= 1;
}

int fl_interrupt_arm(int this_thread_handles) {
    polling = 0;
    if (!this_thread_handles) return -1;
    struct sigaction now, mine, old;
    int rc = 0;
    pthread_mutex_lock(&arm_lock);
    if (sigaction(SIGINT, NULL, &now) != 0 || not_handled(&now)) {
        rc = -1;
    } else if (!is_ours(&now)) {
        publish(&now);
        memset(&mine, 0, sizeof(mine));
        mine.sa_sigaction = on_sigint;
        mine.sa_mask = now.sa_mask;
        mine.sa_flags = (now.sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
        if (sigaction(SIGINT, &mine, &old) != 0) {
            rc = -1;
        } else if (!is_ours(&old) && memcmp(&old, &now, sizeof(old)) != 0) {
            /* someone else's sigaction() came between our read and our write: stand in
             * front of theirs instead, or give it back if there is nothing to chain to */
            if (not_handled(&old)) {
                sigaction(SIGINT, &old, NULL);
                rc = -1;
            } else {
                publish(&old);
            }
        }
    }
    pthread_mutex_unlock(&arm_lock);
    if (rc == 0) {
        atomic_store(&pending, 0);
        polling = 1;
    }
    return rc;
}

int fl_interrupt_pending(void) {
    return polling && atomic_load_explicit(&pending, memory_order_relaxed);
}
void fl_interrupt_clear(void) { atomic_store(&pending, 0); }

void fl_interrupt_fork_prepare(void) { pthread_mutex_lock(&arm_lock); }
void fl_interrupt_fork_parent(void) { pthread_mutex_unlock(&arm_lock); }
void fl_interrupt_fork_child(void) {
    pthread_mutex_init(&arm_lock, NULL);
    atomic_store(&pending, 0);
}

/* default_action is all zeroes but for its handler: SIG_DFL is 0 on every system we build
 * for, but say so rather than rely on it */
__attribute__((constructor)) static void init_default_action(void) {
    memset(&default_action, 0, sizeof(default_action));
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
}
