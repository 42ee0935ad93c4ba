/*
 * timer_thread.h — the tick thread shared by the timer-thread backends
 * (holder, nanosleep): one pthread sleeping to absolute deadlines, calling
 * the backend's deliver function once per period (see timer_thread.c).
 */
#ifndef RPERF_TIMER_THREAD_H
#define RPERF_TIMER_THREAD_H

#include "rperf_backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Called on the tick thread once per period (no Ruby API; the engine's
 * tick and tgkill only). `now` is CLOCK_MONOTONIC ns. Returns true when
 * the tick went to a thread that has held its GVL since before the previous
 * tick (a steady holder): the next tick then keeps this one's moment within
 * its period, exactly one period later, instead of a new draw
 * (timer_thread.c, "steady holders"). */
typedef bool (*rperf_deliver_fn)(int64_t now);

/* Called on the tick thread after a tick (same rules as deliver): true when
 * no thread can take a tick now (none holds a GVL) and the backend will call
 * rperf_timer_thread_wake() as soon as one does. After ~10 ms of such ticks
 * in a row the tick thread parks until that wake (timer_thread.c). */
typedef bool (*rperf_idle_fn)(void);

/* GVL held: install the tick signal, start the tick thread (all signals
 * blocked on it), return once it runs, then send the start-up bootstrap
 * when cfg asks for it. idle may be NULL (never park). 0, or -1 with a
 * message in err (nothing left running, the signal's action restored). */
int rperf_timer_thread_start(const rperf_backend_config_t *cfg, rperf_deliver_fn deliver,
                             rperf_idle_fn idle, char *err, size_t errlen);
/* Any context, async-signal-safe: a thread has just taken a GVL (after the
 * backend recorded it where idle() reads). Unparks the tick thread if it is
 * parked; otherwise a fence and one load. True when it made the futex
 * wake-up (the slow case: tens of microseconds on a VM). */
bool rperf_timer_thread_wake(void);
/* GVL held: stop and join the thread (no deliver call after this returns),
 * then restore the tick signal's action. */
void rperf_timer_thread_stop(void);
/* Inside fork() in the child: the thread does not exist there; the tick
 * signal's action is restored. */
void rperf_timer_thread_after_fork(void);
/* any context: is a run's tick thread going? */
bool rperf_timer_thread_running(void);

#endif
