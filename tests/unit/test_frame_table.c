/*
 * test_frame_table.c — the frame table under concurrency: one writer (the
 * worker's role) interns values and grows the key array while another thread
 * (the GC marker's role) marks continuously inside epoch sections; retired
 * key arrays are reclaimed through the epoch; ids stay stable until a clear
 * (memo included); frames the host's pass retires leave the lookup and the
 * marking, also while the table grows and a marker marks. Built and run
 * under TSan by .ci/run. Context: a plain C program with two pthreads; synchronisation is
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


/* The host's pass: retire values whose index is a multiple of `retire_every`
 * (0: none), keep the others for good; count the calls. */
static _Atomic long judged;
static size_t retire_every;

static rperf_frame_verdict_t judge_by_index(uint32_t id, rperf_frame_t v, void *arg)
{
    (void)id;
    (void)arg;
    atomic_fetch_add(&judged, 1);
    size_t i = (size_t)(v - value_of(0)) / 16;
    return retire_every && i % retire_every == 0 ? RPERF_FRAME_RETIRE : RPERF_FRAME_KEEP;
}

static rperf_frame_t only_marked;
static _Atomic long marks_of_it;
static void count_mark(rperf_frame_t v)
{
    if (v == only_marked) atomic_fetch_add(&marks_of_it, 1);
}

/* A retired frame: the pass judges each id once (a kept one never again);
 * until the worker carries the retirement out the value is still found and
 * marked; after it, the marker leaves it alone (its object may go) and the
 * same address is a new frame with a new id, while the old id stays
 * retired. */
RPERF_TEST(a_retired_frame_leaves_the_lookup_before_the_marking)
{
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
    uint32_t a = rperf__frames_intern(value_of(0));
    uint32_t b = rperf__frames_intern(value_of(1));
    retire_every = 2;
    atomic_store(&judged, 0);
    RPERF_CHECK_EQ(rperf__frames_retire_pass(judge_by_index, NULL), 1);
    RPERF_CHECK_EQ(atomic_load(&judged), 2);
    only_marked = value_of(0);
    atomic_store(&marks_of_it, 0);
    rperf__frames_mark(count_mark, NULL);
    RPERF_CHECK_EQ(atomic_load(&marks_of_it), 1);       /* requested, not carried out */
    RPERF_CHECK(!rperf__frames_retired(a - RPERF_SYNTHETIC_FRAMES));
    RPERF_CHECK_EQ(rperf__frames_retire_due(), 1);
    RPERF_CHECK(rperf__frames_retired(a - RPERF_SYNTHETIC_FRAMES));
    rperf__frames_mark(count_mark, NULL);
    RPERF_CHECK_EQ(atomic_load(&marks_of_it), 1);       /* no longer marked */
    uint32_t again = rperf__frames_intern(value_of(0));
    RPERF_CHECK(again != a && again != b);
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(1)), b);
    RPERF_CHECK(rperf__frames_retired(a - RPERF_SYNTHETIC_FRAMES));
    rperf__frames_mark(count_mark, NULL);
    RPERF_CHECK_EQ(atomic_load(&marks_of_it), 2);       /* the new id's */
    atomic_store(&judged, 0);
    retire_every = 0;
    rperf__frames_retire_pass(judge_by_index, NULL);
    RPERF_CHECK_EQ(atomic_load(&judged), 1);            /* only the new id */
    rperf__frames_destroy();
}

/* A sample of a frame whose retirement is requested but not carried out
 * cancels it: the frame is sampled, so it stays pinned and keeps its id. */
RPERF_TEST(a_sample_before_the_worker_retires_cancels_the_retirement)
{
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
    uint32_t a = rperf__frames_intern(value_of(0));
    retire_every = 1;
    RPERF_CHECK_EQ(rperf__frames_retire_pass(judge_by_index, NULL), 1);
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(0)), a);
    RPERF_CHECK_EQ(rperf__frames_retire_due(), 0);
    RPERF_CHECK(!rperf__frames_retired(a - RPERF_SYNTHETIC_FRAMES));
    RPERF_CHECK_EQ(rperf__frames_intern(value_of(0)), a);
    rperf__frames_destroy();
}

static void *pass_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&writer_done)) rperf__frames_retire_pass(judge_by_index, NULL);
    return NULL;
}

/* The writer grows the table and carries out retirements while a pass
 * judges and a marker marks, each on its own thread: every mark names a
 * value interned, and at the end every value the pass retired has left the
 * lookup (a new id) while every kept one keeps its id. */
RPERF_TEST(retirement_while_the_table_grows_and_a_marker_marks)
{
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
    retire_every = 3;
    atomic_store(&writer_done, 0);
    atomic_store(&mark_rounds, 0);
    atomic_store(&bad_marks, 0);
    pthread_t m, p;
    pthread_create(&m, NULL, marker, NULL);
    pthread_create(&p, NULL, pass_thread, NULL);
    while (atomic_load(&mark_rounds) == 0) sched_yield();
    enum { N = 30000 };
    for (size_t i = 0; i < N; i++) {
        rperf__frames_intern(value_of(i));
        if (i % 256 == 0) {
            rperf__frames_retire_due();
            ck_epoch_poll(&rperf__epoch_worker);
        }
    }
    atomic_store(&writer_done, 1);
    pthread_join(p, NULL);
    pthread_join(m, NULL);
    RPERF_CHECK_EQ(atomic_load(&bad_marks), 0);
    rperf__frames_retire_pass(judge_by_index, NULL);   /* the last ones */
    rperf__frames_retire_due();
    size_t kept_same = 0, retired_new = 0;
    for (size_t i = 0; i < N; i++) {
        uint32_t id = rperf__frames_intern(value_of(i));
        if (i % 3 == 0) retired_new += id >= RPERF_SYNTHETIC_FRAMES + N;
        else kept_same += id == RPERF_SYNTHETIC_FRAMES + i;
    }
    RPERF_CHECK_EQ(retired_new, (size_t)(N + 2) / 3);
    RPERF_CHECK_EQ(kept_same, (size_t)N - (N + 2) / 3);
    rperf__frames_destroy();
}

int main(void)
{
    return RPERF_RUN(RPERF_CASE(growth_while_a_concurrent_reader_marks),
                     RPERF_CASE(epoch_reclamation_frees_retired_arrays),
                     RPERF_CASE(an_interned_value_keeps_its_id_until_the_table_is_cleared),
                     RPERF_CASE(a_retired_frame_leaves_the_lookup_before_the_marking),
                     RPERF_CASE(a_sample_before_the_worker_retires_cancels_the_retirement),
                     RPERF_CASE(retirement_while_the_table_grows_and_a_marker_marks));
}
