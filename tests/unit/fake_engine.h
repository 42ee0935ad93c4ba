/*
 * fake_engine.h — the fake host and fake backend shared by the engine's
 * life-cycle unit tests (test_thread_lifecycle.c, test_fork.c): capture
 * returns `depth` frames of `stack` (and counts the calls), the backend
 * starts nothing and counts identifications. Also: starting a run and
 * letting the monotonic clock move without sleeping.
 * Context: plain C test programs (no Ruby); static definitions, one
 * including file per executable.
 */
#ifndef RPERF_FAKE_ENGINE_H
#define RPERF_FAKE_ENGINE_H

#include "core_internal.h"
#include "rperf_test.h"

#include <string.h>

static rperf_frame_t stack[3];
static int depth;
static int captures;
static int identified;

static int fake_capture(rperf_frame_t *buf, int max)
{
    captures++;
    int d = depth < max ? depth : max;
    memcpy(buf, stack, (size_t)d * sizeof(*buf));
    return d;
}
static void fake_trigger(void) {}
/* another thread's stack (a thread off the GVL at a window's close): the
 * frames of `blocked_stack` when `ref` is 1, none otherwise */
static rperf_frame_t blocked_stack[2] = { 0x3000, 0x3008 };
static int thread_captures;
static int fake_capture_thread(uintptr_t ref, rperf_frame_t *buf, int max)
{
    thread_captures++;
    if (ref != 1 || max < 2) return 0;
    memcpy(buf, blocked_stack, sizeof(blocked_stack));
    return 2;
}
static const rperf_host_t host = { .capture = fake_capture, .trigger = fake_trigger,
                                   .capture_thread = fake_capture_thread };

static int fb_start(const rperf_backend_config_t *c, char *e, size_t n)
{
    (void)c;
    (void)e;
    (void)n;
    return 0;
}
static void fb_stop(void) {}
static void fb_identified(void) { identified++; }
static const rperf_backend_ops_t fake_backend = {
    .version = RPERF_BACKEND_ABI_VERSION, .name = "fake", .description = "test",
    .start = fb_start, .stop = fb_stop, .thread_identified = fb_identified,
};

/* A run in `clock` mode at `frequency` with the fake backend; NULL on
 * failure (recorded as a failed check). */
static inline rperf_thread_t *start_at(int frequency, int clock)
{
    rperf_config_t cfg = { .frequency = frequency, .clock = clock, .aggregate = true,
                           .ring_slots = 1024, .backend = &fake_backend };
    rperf_thread_t *caller = NULL;
    char err[128];
    RPERF_CHECK_EQ(rperf_engine_start(&cfg, &caller, err, sizeof(err)), 0);
    RPERF_CHECK(caller != NULL);
    return caller;
}

static inline rperf_thread_t *start_wall_at(int frequency) { return start_at(frequency, RPERF_CLOCK_WALL); }
static inline rperf_thread_t *start_wall(void) { return start_wall_at(1000); }

#ifdef RPERF_STEP_CLOCK
/* The engine's clocks (core_internal.h), moved by let_ns_pass: the
 * monotonic and realtime clocks are one process-wide count, the thread CPU
 * clocks one count per thread. Time passes on the calling thread's CPU,
 * exactly as long as asked, however busy the machine is; and, as on a
 * real machine, a nanosecond per reading, so two readings are never
 * equal (the engine orders events by them). */
static _Atomic int64_t step_wall_ns = 1000000000;
static _Thread_local int64_t step_cpu_ns = 1000;
int64_t rperf__step_clock_ns(clockid_t id)
{
    if (id == CLOCK_THREAD_CPUTIME_ID) return step_cpu_ns++;
    return atomic_fetch_add_explicit(&step_wall_ns, 1, memory_order_relaxed);
}
static inline void let_ns_pass(int64_t ns)
{
    atomic_fetch_add_explicit(&step_wall_ns, ns, memory_order_relaxed);
    step_cpu_ns += ns;
}
#else
/* Let the monotonic clock move by at least ns (busy work, no sleeping). */
static inline void let_ns_pass(int64_t ns)
{
    int64_t t0 = rperf__mono_ns();
    while (rperf__mono_ns() - t0 < ns) {
    }
}
#endif
static inline void let_time_pass(void) { let_ns_pass(20000); }

#endif
