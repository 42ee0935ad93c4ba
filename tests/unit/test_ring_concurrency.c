/*
 * test_ring_concurrency.c — one thread's sample ring under concurrency: a
 * producer (the Ruby thread's role) pushes samples fast enough to make the
 * ring grow, a consumer (the worker's role) drains it and polls the epoch,
 * and a marker (the GC's role) marks the live regions continuously inside
 * epoch sections. Every sample arrives once and in order, or is counted as
 * dropped; the marker only ever sees valid frame values. Built and run under
 * TSan (and ASan) by .ci/run. Context: a plain C program with three pthreads;
 * synchronisation by atomics and pthread_join only (no sleeps).
 */
#include "core_internal.h"
#include "rperf_test.h"

#include <pthread.h>
#include <sched.h>

#define N_SAMPLES 200000
#define DEPTH 20

static rperf_thread_t *pt;
static _Atomic int producer_done, consumer_done;
static _Atomic long bad_marks, mark_rounds;
static long received, out_of_order;
static int64_t last_weight;

static rperf_frame_t frame_of(int i) { return (rperf_frame_t)(0x20000000u + 16 * (uintptr_t)i); }

static void check_mark(rperf_frame_t v)
{
    if (v < frame_of(0) || v >= frame_of(DEPTH) || (v - frame_of(0)) % 16 != 0)
        atomic_fetch_add(&bad_marks, 1);
}

static void *marker(void *arg)
{
    (void)arg;
    while (!atomic_load(&consumer_done)) {
        ck_epoch_section_t sec;
        ck_epoch_begin(&rperf__epoch_marker, &sec);
        rperf__ring_mark(pt, check_mark);
        RPERF_EPOCH_SECTION_END();
        ck_epoch_end(&rperf__epoch_marker, &sec);
        atomic_fetch_add(&mark_rounds, 1);
    }
    return NULL;
}

static void sink(rperf_thread_t *t, const rperf_decoded_t *d, const uint32_t *ids, void *ctx)
{
    (void)t;
    (void)ids;
    (void)ctx;
    if (d->weight <= last_weight || d->depth != DEPTH) out_of_order++;
    last_weight = d->weight;
    received++;
}

static void *consumer(void *arg)
{
    (void)arg;
    unsigned spins = 0;
    for (;;) {
        int done = atomic_load(&producer_done);
        rperf__ring_drain(pt, sink, NULL);
        ck_epoch_poll(&rperf__epoch_worker);
        if (done && rperf__ring_idle(pt)) break;
        /* lag behind now and then so the producer fills segments */
        if (++spins % 64 == 0)
            for (int i = 0; i < 2000; i++) sched_yield();
    }
    atomic_store(&consumer_done, 1);
    return NULL;
}

RPERF_TEST(ring_grows_under_a_concurrent_consumer_and_marker)
{
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
    pt = rperf__calloc_lines(sizeof(*pt));   /* as rperf_thread_new */
    RPERF_CHECK_EQ(rperf__ring_init(pt, 1024), 0);
    pthread_t c, m;
    pthread_create(&m, NULL, marker, NULL);
    while (atomic_load(&mark_rounds) == 0) sched_yield();
    pthread_create(&c, NULL, consumer, NULL);
    rperf_frame_t frames[DEPTH];
    for (int i = 0; i < DEPTH; i++) frames[i] = frame_of(i);
    long pushed = 0;
    for (int k = 1; k <= N_SAMPLES; k++)
        if (rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, k, k, frames, DEPTH)) pushed++;
    atomic_store(&producer_done, 1);
    pthread_join(c, NULL);
    pthread_join(m, NULL);
    RPERF_CHECK_EQ(received, pushed);
    RPERF_CHECK_EQ(pushed + (long)atomic_load(&pt->dropped), N_SAMPLES);
    RPERF_CHECK_EQ(out_of_order, 0);
    RPERF_CHECK_EQ(atomic_load(&bad_marks), 0);
    RPERF_CHECK(pt->prod->slots > 1024);          /* it did grow */
    ck_epoch_barrier(&rperf__epoch_worker);
    rperf__thread_destroy(pt);
    rperf__frames_destroy();
}

int main(void)
{
    return RPERF_RUN(RPERF_CASE(ring_grows_under_a_concurrent_consumer_and_marker));
}
