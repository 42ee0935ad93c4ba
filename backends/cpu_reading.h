/*
 * cpu_reading.h — a thread CPU clock reading that a backend's timer thread
 * makes for a GVL holder at a tick and hands to that holder's sampling job
 * (rperf_backend_ops_t.tick_cpu), sparing the application thread the
 * system call (core/thread_state.c, job_native_cpu). Used by :holder (one per slot),
 * :nanosleep (one for the main Ractor's holder) and the tick signal's
 * handler (one per native thread, written by the handler on its own
 * thread: tick_signal.c); see cpu_reading.c.
 */
#ifndef RPERF_CPU_READING_H
#define RPERF_CPU_READING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct rperf_cpu_reading {
    _Atomic uint32_t seq;       /* odd while the writer writes */
    _Atomic int32_t tid;        /* the native thread whose clock was read */
    _Atomic int64_t cpu_ns;     /* its CLOCK_THREAD_CPUTIME_ID value */
    _Atomic int64_t mono_ns;    /* CLOCK_MONOTONIC of the reading */
    _Atomic uint32_t run;       /* the writer's tag (a run number), checked by take */
} rperf_cpu_reading_t;

/* Any thread: native thread tid's CPU clock (by Linux's per-thread clock
 * id). False if it cannot be read (the thread exited). */
bool rperf_cpu_of_tid(int32_t tid, int64_t *cpu_ns);
/* While no writer runs (a start, with the previous timer thread joined):
 * no reading, and the sequence even again (a fork can leave it odd: the
 * parent's timer thread may have been writing). */
void rperf_cpu_reading_reset(rperf_cpu_reading_t *r);
/* The reading's only writer (a timer thread, or a signal handler on the
 * reading's own native thread: async-signal-safe). */
void rperf_cpu_reading_publish(rperf_cpu_reading_t *r, int32_t tid, int64_t cpu_ns,
                               int64_t mono_ns, uint32_t run);
/* Own context, in the job: 0 with the reading if it was made for this
 * native thread with tag `run` and not taken yet (*taken: the caller's
 * per-native-thread record of the last one it took), -1 otherwise (also
 * when a writer is at work, or interrupted this call: a handler). */
int rperf_cpu_reading_take(rperf_cpu_reading_t *r, uint32_t *taken, uint32_t run,
                           int64_t *cpu_ns, int64_t *mono_ns);

#endif
