/*
 * nanosleep.c — the "nanosleep" backend: one timer pthread sleeping to
 * absolute deadlines (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)), so
 * the period does not drift; deadlines missed by more than one period are
 * counted as overruns and skipped. Each tick triggers the sampling job from
 * this non-Ruby thread, which Ruby delivers to the main Ractor's running
 * thread. No signal is sent to application threads.
 *
 * Cost: every tick wakes this thread (~25 us of CPU on the reference
 * machine), which is why "signal" is the default (docs/backends.md).
 *
 * Contexts: timer_main runs on the backend's own pthread (no Ruby API; the
 * tick's trigger is async-signal-safe and thread-safe); start/stop with the
 * GVL held; after_fork_child inside fork() in the child.
 */
#include "rperf_backend.h"
#include "rperf_core.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define MAX_SLEEP_NS 50000000LL   /* re-check `running` at least every 50 ms */

static pthread_t thr;
static _Atomic int running;
static int started;
static int64_t interval_ns;

static int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec; }
static struct timespec ns_ts(int64_t ns)
{
    struct timespec t = { .tv_sec = (time_t)(ns / 1000000000LL), .tv_nsec = (long)(ns % 1000000000LL) };
    return t;
}

static void *timer_main(void *arg)
{
    (void)arg;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t deadline = ts_ns(&now) + interval_ns;
    while (atomic_load(&running)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t n = ts_ns(&now);
        if (n < deadline) {
            int64_t target = deadline - n > MAX_SLEEP_NS ? n + MAX_SLEEP_NS : deadline;
            struct timespec t = ns_ts(target);
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
            continue;
        }
        if (!atomic_load(&running)) break;
        rperf_engine_tick_sigsafe();
        int64_t late = (n - deadline) / interval_ns;
        if (late > 0) rperf_engine_count_overruns((uint64_t)late);
        deadline += (late + 1) * interval_ns;
    }
    return NULL;
}

static int ns_start(const rperf_backend_config_t *cfg, char *err, size_t errlen)
{
    interval_ns = cfg->interval_ns;
    atomic_store(&running, 1);
    int rc = pthread_create(&thr, NULL, timer_main, NULL);
    if (rc != 0) {
        atomic_store(&running, 0);
        snprintf(err, errlen, "rperf: failed to create the timer thread: %s", strerror(rc));
        return -1;
    }
    started = 1;
    return 0;
}

static void ns_stop(void)
{
    atomic_store(&running, 0);
    if (started) pthread_join(thr, NULL);
    started = 0;
}

static void ns_after_fork_child(void)
{
    atomic_store(&running, 0);     /* the timer thread does not exist here */
    started = 0;
}

const rperf_backend_ops_t rperf_backend_nanosleep = {
    .version = RPERF_BACKEND_ABI_VERSION,
    .name = "nanosleep",
    .description = "a timer thread sleeps to absolute deadlines and triggers the job (no signals)",
    .start = ns_start,
    .stop = ns_stop,
    .after_fork_child = ns_after_fork_child,
    .thread_resumed = NULL,
    .thread_suspended = NULL,
};
