/* See interrupt.h. */
#define _GNU_SOURCE
#include "interrupt.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>

static volatile sig_atomic_t pending;
static struct sigaction previous;        /* the handler we chain to (Python's, usually) */
static pthread_mutex_t arm_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sigint(int sig, siginfo_t *info, void *ctx) {
    pending = 1;
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) previous.sa_sigaction(sig, info, ctx);
    } else if (previous.sa_handler == SIG_DFL) {
        /* nobody handles it: do what the default would, terminate */
        signal(sig, SIG_DFL);
        raise(sig);
    } else if (previous.sa_handler != SIG_IGN && previous.sa_handler) {
        previous.sa_handler(sig);
    }
}

int fl_interrupt_arm(void) {
    struct sigaction now;
    int rc = 0;
    pthread_mutex_lock(&arm_lock);
    pending = 0;
    if (sigaction(SIGINT, NULL, &now) != 0) {
        rc = -1;
    } else if (!((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigint)) {
        if (!(now.sa_flags & SA_SIGINFO) && now.sa_handler == SIG_IGN) {
            rc = -1;
        } else {
            struct sigaction mine;
            memset(&mine, 0, sizeof(mine));
            mine.sa_sigaction = on_sigint;
            mine.sa_mask = now.sa_mask;
            mine.sa_flags = (now.sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
            previous = now;
            if (sigaction(SIGINT, &mine, NULL) != 0) rc = -1;
        }
    }
    pthread_mutex_unlock(&arm_lock);
    return rc;
}

int fl_interrupt_pending(void) { return pending != 0; }
void fl_interrupt_clear(void) { pending = 0; }
