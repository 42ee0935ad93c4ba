/*
 * timer_thread.h — the tick thread shared by the timer-thread backends
 * (holder, nanosleep): one pthread sleeping to absolute deadlines, calling
 * the backend's deliver function once per period (see timer_thread.c).
 */
#ifndef RPERF_TIMER_THREAD_H
#define RPERF_TIMER_THREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Called on the tick thread once per period (no Ruby API; the engine's
 * tick and tgkill only). `now` is CLOCK_MONOTONIC ns. */
typedef void (*rperf_deliver_fn)(int64_t now);

/* GVL held: start the tick thread (all signals blocked on it) and return
 * once it runs. 0, or -1 with a message in err (nothing left running). */
int rperf_timer_thread_start(int64_t period_ns, rperf_deliver_fn deliver, char *err,
                             size_t errlen);
/* GVL held: stop and join it; no deliver call happens after this returns. */
void rperf_timer_thread_stop(void);
/* Inside fork() in the child: the thread does not exist there. */
void rperf_timer_thread_after_fork(void);
/* any context: is a run's tick thread going? */
bool rperf_timer_thread_running(void);

#endif
