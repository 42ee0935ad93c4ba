/*
 * new_marks.h — the counters with which a backend re-signals GVL holders of
 * a Ractor with no number yet (`new` holders). Header only.
 *
 * Every backend (holder, nanosleep, signal) re-signals such holders from
 * every job run until a scan finds none (docs/backends.md, "Numbered at the
 * first turn"): the job bitset is one per VM, and the run that takes a new
 * thread's request may number another thread. These counters keep
 * that check to two loads when nothing is left: the holders marked `new`
 * so far, the count up to which a job found none, and the count the last
 * re-signal scanned.
 */
#ifndef RPERF_NEW_MARKS_H
#define RPERF_NEW_MARKS_H

#include "rperf_core.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    _Atomic uint64_t marks, done, scanned;
    _Atomic int64_t last_ns;      /* CLOCK_MONOTONIC of the last re-signal */
} rperf_new_marks_t;

/* Re-signals are at least this far apart (or the tick interval, if
 * shorter) while no holder was marked since the last one: a `new` holder
 * that cannot run its job yet (inside a C call that keeps its GVL, or
 * waiting for its turn) would otherwise get a signal at every job run of
 * every other thread, each one an EINTR for its call. A holder marked
 * since then is signalled at once: the job run that took its request may
 * be the last one for a while (no tick reaches a Ractor that lives less
 * than an interval), and waiting out the gap can leave it unnumbered. */
#define RPERF_NEW_MARKS_GAP_NS 2000000LL

/* Own context (a thread hook or the job), async-signal-safe: a holder was
 * just marked `new`, after the mark's own store. */
static inline void rperf_new_marks_add(rperf_new_marks_t *m)
{
    atomic_fetch_add_explicit(&m->marks, 1, memory_order_release);
}

/* In the job (own context, GVL held, no Ruby API): while a `new` holder may
 * be left, call signal_new (the tick signal to every `new` holder but the
 * caller, returning how many it sent): at once when a holder was marked
 * since the last call, otherwise at most once per gap (min(the tick
 * interval, RPERF_NEW_MARKS_GAP_NS)); when it sends none, the marks read
 * before it are done. A mark made after that read keeps the counts apart,
 * so a later job looks again. */
static inline void rperf_new_marks_resignal(rperf_new_marks_t *m, int (*signal_new)(void))
{
    uint64_t marks = atomic_load_explicit(&m->marks, memory_order_acquire);
    if (marks == atomic_load_explicit(&m->done, memory_order_relaxed)) return;
    int frequency = rperf_engine_config()->frequency;
    int64_t interval_ns = 1000000000LL / (frequency > 0 ? frequency : 1);
    int64_t gap = interval_ns < RPERF_NEW_MARKS_GAP_NS ? interval_ns : RPERF_NEW_MARKS_GAP_NS;
    int64_t now = rperf_mono_ns();
    int64_t last = atomic_load_explicit(&m->last_ns, memory_order_relaxed);
    bool fresh = marks != atomic_load_explicit(&m->scanned, memory_order_relaxed);
    if (!fresh && last && now - last < gap) return;
    if (!atomic_compare_exchange_strong(&m->last_ns, &last, now)) return;   /* another job does it */
    atomic_store_explicit(&m->scanned, marks, memory_order_relaxed);
    if (signal_new() == 0) atomic_store_explicit(&m->done, marks, memory_order_relaxed);
}

#endif
