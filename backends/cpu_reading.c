/*
 * cpu_reading.c — the timer thread's reading of a GVL holder's thread CPU
 * clock, handed to the holder's job (cpu_reading.h): a seqlock with one
 * writer.
 *
 * Contexts: rperf_cpu_of_tid and publish run on a backend's timer thread
 * or in the tick signal's handler (async-signal-safe: clock_gettime and
 * lock-free atomics only); take runs in the sampling job on the holder's
 * own native thread (own context); reset where no writer runs (a
 * backend's start and stop, a fork child).
 */
#include "cpu_reading.h"

#include "rperf_core.h"

#include <time.h>

bool rperf_cpu_of_tid(int32_t tid, int64_t *cpu_ns)
{
    if (tid <= 0) return false;
    /* Linux's per-thread CPU clock id, as glibc's pthread_getcpuclockid
     * builds it: (~tid << 3) | CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK */
    clockid_t cid = (clockid_t)((~(uint32_t)tid << 3) | 6u);
    struct timespec t;
    if (clock_gettime(cid, &t) != 0) return false;
    *cpu_ns = (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
    return true;
}

void rperf_cpu_reading_reset(rperf_cpu_reading_t *r)
{
    atomic_store(&r->tid, 0);
    atomic_store(&r->seq, 0);
}

/* The odd mark is a sequentially consistent read-modify-write, so no store
 * below is seen before it; the even one is a release store after them. */
void rperf_cpu_reading_publish(rperf_cpu_reading_t *r, int32_t tid, int64_t cpu_ns,
                               int64_t mono_ns, uint32_t run)
{
    uint32_t seq = atomic_fetch_add(&r->seq, 1u);
    atomic_store_explicit(&r->tid, tid, memory_order_release);
    atomic_store_explicit(&r->run, run, memory_order_release);
    atomic_store_explicit(&r->cpu_ns, cpu_ns, memory_order_release);
    atomic_store_explicit(&r->mono_ns, mono_ns, memory_order_release);
    atomic_store_explicit(&r->seq, seq + 2u, memory_order_release);
}

int rperf_cpu_reading_take(rperf_cpu_reading_t *r, uint32_t *taken, uint32_t run,
                           int64_t *cpu_ns, int64_t *mono_ns)
{
    uint32_t seq = atomic_load_explicit(&r->seq, memory_order_acquire);
    if ((seq & 1u) || seq == *taken) return -1;
    int32_t tid = atomic_load_explicit(&r->tid, memory_order_acquire);
    uint32_t tag = atomic_load_explicit(&r->run, memory_order_acquire);
    int64_t cpu = atomic_load_explicit(&r->cpu_ns, memory_order_acquire);
    int64_t at = atomic_load_explicit(&r->mono_ns, memory_order_acquire);
    /* a value written after the odd mark (acquire: it synchronizes with
     * its release store, which follows the mark) makes this load see the
     * mark or later */
    if (atomic_load_explicit(&r->seq, memory_order_relaxed) != seq) return -1;
    if (tid != rperf_native_tid() || tag != run) return -1;
    *taken = seq;
    *cpu_ns = cpu;
    *mono_ns = at;
    return 0;
}
