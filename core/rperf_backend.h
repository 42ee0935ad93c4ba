/*
 * rperf_backend.h — the timer-backend plugin contract. A backend decides
 * when ticks happen and delivers them by calling rperf_engine_tick_sigsafe()
 * on (ideally) the native thread that runs the Ruby code to be sampled.
 *
 * Adding a backend = one new file in backends/ defining a
 * `const rperf_backend_ops_t rperf_backend_<name>` plus one line in
 * backends/registry.c. See docs/backends.md.
 */
#ifndef RPERF_BACKEND_H
#define RPERF_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RPERF_BACKEND_ABI_VERSION 1

/* How a backend spaces a thread's ticks (rperf_backend_ops_t.ticks). The
 * engine needs the mean time from a random moment back to the tick before
 * it: a sample taken late, at the end of a C call that kept the GVL, leaves
 * that much of its time to the next sample (docs/architecture.md, "Why the
 * weights are exact"). */
typedef enum rperf_tick_spacing {
    RPERF_TICKS_PERIODIC = 0,   /* one per interval of the thread's time */
    RPERF_TICKS_JITTERED = 1,   /* one at a uniform moment of each interval */
    RPERF_TICKS_POISSON = 2,    /* exponential gaps with the interval as mean */
} rperf_tick_spacing_t;

typedef struct rperf_backend_config {
    int64_t interval_ns;   /* 1e9 / frequency */
    int signo;             /* signal number for signal-driven backends (0 = default) */
    int bootstrap;         /* other Ractors run: reach their GVL holders at start */
    /* Sorted native thread ids the bootstrap leaves out (the main Ractor's
     * threads: the caller of start holds their GVL). Valid during start. */
    const int32_t *bootstrap_skip;
    size_t bootstrap_nskip;
    /* 1 in cpu mode (samples weigh thread CPU time): a backend that reads a
     * holder's thread CPU clock at a tick may keep the reading for that
     * thread's job (tick_cpu below), sparing the application thread the
     * system call. */
    int cpu_clock;
} rperf_backend_config_t;

typedef struct rperf_backend_ops {
    uint32_t version;              /* RPERF_BACKEND_ABI_VERSION */
    const char *name;
    const char *description;
    /* GVL held. 0 on success, -1 with a message in err (nothing left running). */
    int (*start)(const rperf_backend_config_t *cfg, char *err, size_t errlen);
    /* GVL held. After it returns no tick is delivered and no signal of the
     * backend can reach any thread; previous handlers are restored. */
    void (*stop)(void);
    /* In the child of fork(), inside the atfork handler (async-signal-safe
     * calls only): forget timers/threads inherited from the parent. */
    void (*after_fork_child)(void);
    /* Optional. Called on the native thread that is about to run / has just
     * stopped running a Ruby thread (RESUMED / SUSPENDED; no Ruby API). */
    void (*thread_resumed)(void);
    void (*thread_suspended)(void);
    /* Optional. Own context, GVL held: the Ruby thread running here now
     * knows its Ractor (rperf_thread_ractor(rperf_current_thread_sigsafe())). */
    void (*thread_identified)(void);
    /* Optional (NULL: thread_resumed is called instead). Own context, GVL
     * held: a Ruby thread that already holds its GVL becomes current here
     * without a RESUMED event (the caller of start, a thread met first in
     * its job or label call): Ruby did not just hand it the GVL. */
    void (*thread_attached)(void);
    /* Optional. Own context, in the sampling job: the CPU clock of the
     * calling native thread (CLOCK_THREAD_CPUTIME_ID's value) as the backend
     * read it for the tick that triggered the job, and when it read it
     * (CLOCK_MONOTONIC). 0 with both set, each reading handed out at most
     * once; -1 if there is none. The engine takes it only if it is recent
     * (an eighth of an interval) or was made while the thread held its GVL
     * (after its latest RESUMED), and is not older than a reading already
     * made on this native thread; otherwise the job reads the clock
     * itself. */
    int (*tick_cpu)(int64_t *cpu_ns, int64_t *mono_ns);
    /* Optional. Own context, GVL held: the sampling job runs on this
     * thread, whoever asked for it (the job bitset is one per VM: this run
     * may have taken the bit another thread's request set). */
    void (*job_ran)(void);
    /* How the ticks are spaced (RPERF_TICKS_*; 0 = periodic). */
    rperf_tick_spacing_t ticks;
} rperf_backend_ops_t;

/* backends/registry.c */
const rperf_backend_ops_t *rperf_backend_find(const char *name);
size_t rperf_backend_count(void);
const rperf_backend_ops_t *rperf_backend_at(size_t i);
const rperf_backend_ops_t *rperf_backend_default(void);

#ifdef __cplusplus
}
#endif
#endif
