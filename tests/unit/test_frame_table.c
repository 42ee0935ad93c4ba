/*
 * test_frame_table.c — the frame table under concurrency: one writer (the
 * worker's role) interns values and grows the key array while another thread
 * (the GC marker's role) marks continuously inside epoch sections; retired
 * key arrays are reclaimed through the epoch; ids stay stable until a clear
 * (memo included). Built and run under TSan by
 * .ci/run. Context: a plain C program with two pthreads; synchronisation is
 * by atomics and pthread_join only (no sleeps).
 */
#include "core_internal.h"
#include "rperf_test.h"

#include <pthread.h>

#define N_VALUES 100000

static _Atomic int writer_done;
static _Atomic long bad_marks;
static _Atomic long mark_rounds;

static rperf_frame_t value_of(size_t i) { return (rperf_frame_t)(0x10000000u + 16 * i); }

static void check_mark(rperf_frame_t v)
{
    if (v < value_of(0) || v >= value_of(N_VALUES) || (v - value_of(0)) % 16 != 0)
        atomic_fetch_add(&bad_marks, 1);
}

static void *marker(void *arg)
{
    (void)arg;
    while (!atomic_load(&writer_done)) {
        ck_epoch_section_t sec;
        ck_epoch_begin(&rperf__epoch_marker, &sec);
        rperf__frames_mark(check_mark, NULL);
        RPERF_EPOCH_SECTION_END();
        ck_epoch_end(&rperf__epoch_marker, &sec);
        atomic_fetch_add(&mark_rounds, 1);
    }
    return NULL;
}

RPERF_TEST(growth_while_a_concurrent_reader_marks)
{
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
    pthread_t t;
    pthread_create(&t, NULL, marker, NULL);
    /* wait until the marker is running, without sleeping */
    while (atomic_load(&mark_rounds) == 0) sched_yield();
    for (size_t i = 0; i < N_VALUES; i++) {
        uint32_t id = rperf__frames_intern(value_of(i));
        if (id != RPERF_SYNTHETIC_FRAMES + i) {
            RPERF_CHECK_EQ(id, RPERF_SYNTHETIC_FRAMES + i);
            break;
        }
        if (i % 1024 == 0) ck_epoch_poll(&rperf__epoch_worker);
    }
    atomic_store(&writer_done, 1);
    pthread_join(t, NULL);
    RPERF_CHECK_EQ(atomic_load(&bad_marks), 0);
    RPERF_CHECK(atomic_load(&mark_rounds) > 0);
    /* lookups of existing values return their ids */
    for (size_t i = 0; i < N_VALUES; i += 997)
        RPERF_CHECK_EQ(rperf__frames_intern(value_of(i)), RPERF_SYNTHETIC_FRAMES + i);
    RPERF_CHECK_EQ(rperf__frames_count(), N_VALUES);
    rperf__frames_destroy();
}

RPERF_TEST(epoch_reclamation_frees_retired_arrays)
{
    size_t base = rperf_engine_memory_bytes();
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
    for (size_t i = 0; i < 50000; i++) rperf__frames_intern(value_of(i));
    size_t grown = rperf_engine_memory_bytes();
    /* with no reader active, polling reclaims every retired array */
    for (int i = 0; i < 8; i++) ck_epoch_poll(&rperf__epoch_worker);
    size_t polled = rperf_engine_memory_bytes();
    RPERF_CHECK(polled < grown);
    rperf__frames_destroy();
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base);
}

/* A value keeps its id for as long as the table holds it, whether the
 * lookup hits the memo in front of the table or not (many other values in
 * between evict it), and a clear forgets every id, the memo's too: ids
 * restart, in the order of the next interning. */
RPERF_TEST(an_interned_value_keeps_its_id_until_the_table_is_cleared)
{
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
    uint32_t a = rperf__frames_intern(value_of(1));
    uint32_t b = rperf__frames_intern(value_of(2));
    RPERF_CHECK(a != b);
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(1)), a);
    for (size_t i = 10; i < 10010; i++) rperf__frames_intern(value_of(i));
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(1)), a);
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(2)), b);
    RPERF_CHECK_EQ(rperf__frames_at(a - RPERF_SYNTHETIC_FRAMES), value_of(1));
    RPERF_CHECK_EQ(rperf__frames_count(), 10002);
    rperf__frames_clear();
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(2)), RPERF_SYNTHETIC_FRAMES);
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(1)), RPERF_SYNTHETIC_FRAMES + 1);
    RPERF_CHECK_EQ(rperf__frames_count(), 2);
    rperf__frames_destroy();
}

int main(void)
{
    return RPERF_RUN(RPERF_CASE(growth_while_a_concurrent_reader_marks),
                     RPERF_CASE(epoch_reclamation_frees_retired_arrays),
                     RPERF_CASE(an_interned_value_keeps_its_id_until_the_table_is_cleared));
}
