/*
 * timer_thread.h — the tick thread shared by the timer-thread backends
 * (holder, nanosleep): one pthread sleeping to absolute deadlines, calling
 * the backend's deliver function once per period (see timer_thread.c);
 * and the counters both use to re-signal holders of unnumbered Ractors.
 */
#ifndef RPERF_TIMER_THREAD_H
#define RPERF_TIMER_THREAD_H

#include "rperf_backend.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Called on the tick thread once per period (no Ruby API; the engine's
 * tick and tgkill only). `now` is CLOCK_MONOTONIC ns. */
typedef void (*rperf_deliver_fn)(int64_t now);

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

/* ---- holders of a Ractor with no number yet ------------------------------
 * Both timer-thread backends re-signal such `new` holders from every job
 * run until a scan finds none (docs/backends.md, "Numbered at the first
 * turn"): the job bitset is one per VM, and the run that takes a new
 * thread's request may number another thread. These two counters keep
 * that check to two loads when nothing is left: the slots marked `new` so
 * far, and the count up to which a job found none. */
typedef struct {
    _Atomic uint64_t marks, done;
} rperf_new_marks_t;

/* Own context (a thread hook or the job), async-signal-safe: a slot was
 * just marked `new`, after the slot's own store. */
static inline void rperf_new_marks_add(rperf_new_marks_t *m)
{
    atomic_fetch_add_explicit(&m->marks, 1, memory_order_release);
}

/* In the job (own context, GVL held, no Ruby API): while a `new` holder may
 * be left, call signal_new (the tick signal to every `new` holder but the
 * caller, returning how many it sent); when it sends none, the marks read
 * before it are done. A mark made after that read keeps the counts apart,
 * so the next job looks again. */
static inline void rperf_new_marks_resignal(rperf_new_marks_t *m, int (*signal_new)(void))
{
    uint64_t marks = atomic_load_explicit(&m->marks, memory_order_acquire);
    if (marks == atomic_load_explicit(&m->done, memory_order_relaxed)) return;
    if (signal_new() == 0) atomic_store_explicit(&m->done, marks, memory_order_relaxed);
}

#endif
