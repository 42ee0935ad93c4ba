/*
 * timer_thread.c — the tick thread of the timer-thread backends (holder,
 * nanosleep): sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to
 * absolute deadlines, so the period does not drift; a deadline missed by
 * more than a period is counted as overruns and skipped; it wakes at least
 * every 50 ms to notice a stop.
 *
 * The thread blocks every signal (process-directed signals must go to
 * Ruby's threads, and its sleep must not be cut short). Start returns only
 * once the thread runs: a new thread can otherwise wait for a CPU behind
 * the caller, which goes on computing, for a whole time slice (measured:
 * 100 ms under load), and a short run got no tick at all.
 *
 * It also owns the tick signal for these backends (install at start, the
 * start-up bootstrap, restore at stop and in a fork child): their holders
 * of other Ractors get ticks as that signal.
 *
 * Contexts: tick_main runs on the tick thread (no Ruby API: the deliver
 * function may only tick the engine and send signals); start/stop with the
 * GVL held; after_fork inside fork() in the child.
 */
#include "timer_thread.h"

#include "rperf_core.h"
#include "tick_signal.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#define NSEC 1000000000LL
#define MAX_NAP_NS 50000000LL     /* re-check `running` at least every 50 ms */

static pthread_t thr;
static int started;
static _Atomic int running;
static int64_t period;
static rperf_deliver_fn deliver_fn;
static sem_t up;                  /* posted once the thread runs */

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * NSEC + t.tv_nsec;
}

static void *tick_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "rperf-timer", 0, 0, 0);   /* for top -H, ps -L, gdb */
    int64_t deadline = mono_ns() + period;
    sem_post(&up);
    while (atomic_load(&running)) {
        int64_t now = mono_ns();
        if (now < deadline) {
            int64_t until = deadline - now > MAX_NAP_NS ? now + MAX_NAP_NS : deadline;
            struct timespec t = { .tv_sec = (time_t)(until / NSEC), .tv_nsec = (long)(until % NSEC) };
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);   /* EINTR: loop */
            continue;
        }
        if (!atomic_load(&running)) break;
        deliver_fn(now);
        rperf_tick_signal_bootstrap_resend();
        int64_t missed = (now - deadline) / period;
        if (missed > 0) rperf_engine_count_overruns((uint64_t)missed);
        deadline += (missed + 1) * period;
    }
    return NULL;
}

int rperf_timer_thread_start(const rperf_backend_config_t *cfg, rperf_deliver_fn deliver,
                             char *err, size_t errlen)
{
    if (rperf_tick_signal_install(cfg->signo, err, errlen) < 0) return -1;
    period = cfg->interval_ns;
    deliver_fn = deliver;
    atomic_store(&running, 1);
    sem_init(&up, 0, 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thr, NULL, tick_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        atomic_store(&running, 0);
        sem_destroy(&up);
        rperf_tick_signal_restore();
        snprintf(err, errlen, "rperf: failed to create the timer thread: %s", strerror(rc));
        return -1;
    }
    while (sem_wait(&up) != 0 && errno == EINTR) {
    }
    sem_destroy(&up);   /* glibc: safe once sem_wait returned */
    started = 1;
    if (cfg->bootstrap) rperf_tick_signal_bootstrap(cfg->bootstrap_skip, cfg->bootstrap_nskip);
    return 0;
}

void rperf_timer_thread_stop(void)
{
    atomic_store(&running, 0);
    if (started) pthread_join(thr, NULL);
    started = 0;
    rperf_tick_signal_restore();
}

void rperf_timer_thread_after_fork(void)
{
    atomic_store(&running, 0);
    started = 0;
    rperf_tick_signal_after_fork();
}

bool rperf_timer_thread_running(void) { return atomic_load_explicit(&running, memory_order_relaxed) != 0; }
