/*
 * new_marks.h — the counters with which a backend re-signals GVL holders of
 * a Ractor with no number yet (`new` holders). Header only.
 *
 * Every backend (holder, nanosleep, signal) re-signals such holders from
 * every job run until a scan finds none (docs/backends.md, "Numbered at the
 * first turn"): the job bitset is one per VM, and the run that takes a new
 * thread's request may number another thread. These two counters keep
 * that check to two loads when nothing is left: the holders marked `new`
 * so far, and the count up to which a job found none.
 */
#ifndef RPERF_NEW_MARKS_H
#define RPERF_NEW_MARKS_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    _Atomic uint64_t marks, done;
} rperf_new_marks_t;

/* Own context (a thread hook or the job), async-signal-safe: a holder was
 * just marked `new`, after the mark's own store. */
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
