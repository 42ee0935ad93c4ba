/*
 * test_heap.c — unit tests of allocation sampling and the live heap
 * (core/heap.c) with a fake host: the countdown samples one allocation in
 * `interval` on average; a sampled object is aggregated by stack and class
 * with `interval` objects and that many slots' bytes; a new object at a
 * tracked address retires the tracked one (its in-use part goes, its
 * allocation stays); a window's close keeps only the objects the host
 * says are alive, with their size now; a freed object leaves at once (the
 * free hook), and after a GC whose frees may have gone unreported no
 * tracked object is read until a settle has the host check its address;
 * the address index stays exact through frees one by one, and so does
 * the bloom filter built again after many deaths; compaction moves
 * tracked objects (only verified ones, in a GC whose marking was seen);
 * a clearing window keeps the live heap's entries (in use, with zero
 * allocations) and their frames; a run without allocation sampling
 * records none.
 * Context: a plain C program (no Ruby); the test thread plays the
 * allocating Ruby thread, the engine's worker runs for real.
 */
#include "fake_engine.h"

static rperf_thread_t *start_alloc(uint32_t interval)
{
    rperf_config_t cfg = { .frequency = 1000, .clock = RPERF_CLOCK_CPU, .aggregate = true,
                           .ring_slots = 1024, .backend = &fake_backend, .alloc_only = true,
                           .alloc_interval = interval };
    rperf_thread_t *caller = NULL;
    char err[128];
    RPERF_CHECK_EQ(rperf_engine_start(&cfg, &caller, err, sizeof(err)), 0);
    return caller;
}

#define CLASS_A 0x9000u
#define CLASS_B 0x9040u

/* what the fake host says at a close: objects below `dead_from` live */
static uintptr_t dead_from = UINTPTR_MAX;
static int alive_calls, alive_unverified;
static bool fake_alive(uintptr_t obj, uintptr_t klass, uint32_t rtype, bool verified)
{
    (void)klass;
    (void)rtype;
    alive_calls++;
    if (!verified) alive_unverified++;
    return obj < dead_from;
}
static size_t fake_memsize(uintptr_t obj) { return obj >= 0x100000 ? 400 : 40; }

typedef struct totals {
    int64_t alloc_objects, alloc_bytes, inuse_objects, inuse_bytes;
    int entries;
} totals_t;
static uint32_t want_class;   /* frame id to sum, RPERF_ALLOC_NO_CLASS: all */
static int sum(const rperf_result_alloc_t *a, void *ctx)
{
    totals_t *t = ctx;
    if (want_class != RPERF_ALLOC_NO_CLASS && a->class_id != want_class) return 0;
    t->alloc_objects += a->alloc_objects;
    t->alloc_bytes += a->alloc_bytes;
    t->inuse_objects += a->inuse_objects;
    t->inuse_bytes += a->inuse_bytes;
    t->entries++;
    return 0;
}
static totals_t totals_of(uintptr_t klass)
{
    want_class = RPERF_ALLOC_NO_CLASS;
    if (klass) {
        want_class = UINT32_MAX - 1;
        for (uint32_t id = RPERF_SYNTHETIC_FRAMES;
             id < RPERF_SYNTHETIC_FRAMES + rperf_result_frame_count(); id++)
            if (rperf_result_frame(id) == klass) want_class = id;
    }
    totals_t t = { 0, 0, 0, 0, 0 };
    rperf_result_each_alloc(sum, &t);
    return t;
}

/* every allocation sampled (interval 1): allocate `n` objects of `klass`
 * at consecutive addresses from `base` */
static void allocate(uintptr_t base, int n, uintptr_t klass)
{
    for (int i = 0; i < n; i++) {
        uintptr_t obj = base + (uintptr_t)i * 40;
        if (rperf_alloc_seen(obj)) rperf_alloc_record(obj, klass, 5, 40);
    }
}

/* a window's close with no GC since the last one */
static void settle_window(void)
{
    rperf_engine_pause();
    rperf_heap_settle(fake_alive, fake_memsize);
}

/* a GC's marking (the next number), then a window's close: the in-use
 * values are as of that GC */
static void gc_mark(void)
{
    rperf_heap_stats_t st;
    rperf_heap_stats(&st);
    rperf_heap_gc_marked(st.as_of_gc + 1, false);
}
static void close_window(void)
{
    gc_mark();
    settle_window();
}

RPERF_TEST(the_countdown_samples_one_allocation_in_interval)
{
    start_alloc(100);
    int sampled = 0;
    for (int i = 0; i < 1000000; i++)
        if (rperf_alloc_seen(0x100)) sampled++;
    /* Bernoulli(1/100) over 1e6 trials: mean 10000, sd ~99.5 (5 sd) */
    RPERF_CHECK(sampled > 9500 && sampled < 10500);
    rperf_engine_stop();
    rperf_engine_release();
}

RPERF_TEST(sampled_objects_are_aggregated_by_stack_and_class)
{
    start_alloc(1);
    stack[0] = 0x2000; stack[1] = 0x2008;
    depth = 2;
    allocate(0x10000, 30, CLASS_A);
    stack[0] = 0x2010;
    allocate(0x20000, 10, CLASS_B);
    close_window();
    totals_t a = totals_of(CLASS_A), b = totals_of(CLASS_B);
    RPERF_CHECK_EQ(a.entries, 1);
    RPERF_CHECK_EQ(a.alloc_objects, 30);
    RPERF_CHECK_EQ(a.alloc_bytes, 30 * 40);
    RPERF_CHECK_EQ(a.inuse_objects, 30);
    RPERF_CHECK_EQ(b.alloc_objects, 10);
    RPERF_CHECK_EQ(b.inuse_bytes, 10 * 40);
    rperf_heap_stats_t st;
    rperf_heap_stats(&st);
    RPERF_CHECK_EQ(st.sampled, 40);
    RPERF_CHECK_EQ(st.live, 40);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

RPERF_TEST(a_new_object_at_a_tracked_address_retires_the_tracked_one)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    allocate(0x10000, 20, CLASS_A);
    /* 5 of those slots are taken by new objects of class B */
    allocate(0x10000, 5, CLASS_B);
    close_window();
    totals_t a = totals_of(CLASS_A), b = totals_of(CLASS_B);
    RPERF_CHECK_EQ(a.alloc_objects, 20);
    RPERF_CHECK_EQ(a.inuse_objects, 15);
    RPERF_CHECK_EQ(b.inuse_objects, 5);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

RPERF_TEST(a_close_keeps_only_live_objects_with_their_size_now)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    allocate(0x100000, 10, CLASS_A);      /* memsize now: 400 each */
    allocate(0x200000, 10, CLASS_B);
    dead_from = 0x200000;                 /* class B's objects are gone */
    close_window();
    dead_from = UINTPTR_MAX;
    totals_t a = totals_of(CLASS_A), b = totals_of(CLASS_B);
    RPERF_CHECK_EQ(a.inuse_bytes, 10 * 400);
    RPERF_CHECK_EQ(a.alloc_bytes, 10 * 40);
    RPERF_CHECK_EQ(b.alloc_objects, 10);
    RPERF_CHECK_EQ(b.inuse_objects, 0);
    rperf_heap_stats_t st;
    rperf_heap_stats(&st);
    RPERF_CHECK_EQ(st.tracked, 10);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

/* every allocation sampled: free `n` objects at consecutive addresses */
static void free_objects(uintptr_t base, int n)
{
    for (int i = 0; i < n; i++) rperf_alloc_freed(base + (uintptr_t)i * 40);
}

RPERF_TEST(a_freed_object_leaves_at_once_and_its_address_retires_nobody_later)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    allocate(0x10000, 10, CLASS_A);
    allocate(0x20000, 10, CLASS_B);
    free_objects(0x20000, 5);             /* 5 of B's swept */
    rperf_alloc_freed(0x30000);           /* an untracked object: nothing */
    rperf_heap_stats_t st;
    rperf_heap_stats(&st);
    RPERF_CHECK_EQ(st.tracked, 15);
    /* new objects at the freed addresses are new: nobody retired */
    allocate(0x20000, 5, CLASS_A);
    close_window();
    RPERF_CHECK_EQ(totals_of(CLASS_A).inuse_objects, 15);
    RPERF_CHECK_EQ(totals_of(CLASS_B).inuse_objects, 5);
    RPERF_CHECK_EQ(totals_of(CLASS_B).alloc_objects, 10);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

static uintptr_t shift_by;
static int relocations;
static uintptr_t moved(uintptr_t v)
{
    relocations++;
    return v >= 0x10000 && v < 0x30000 ? v + shift_by : v;
}

/* A GC whose marking was not reported (its number skips one), or whose
 * frees the host may not report, or a free the host says may turn its
 * hooks off, leaves every object tracked then unverified: compaction does
 * not read it, and the next close asks the host to check its address
 * first; once checked it is read again. Objects sampled after are
 * verified. */
RPERF_TEST(after_a_gc_with_unreported_frees_nothing_is_read_until_a_settle)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    rperf_heap_gc_seen(10);
    allocate(0x10000, 10, CLASS_A);
    rperf_heap_gc_marked(11, false);        /* every free reported */
    shift_by = 0;
    relocations = 0;
    rperf_heap_relocate(11, moved);
    RPERF_CHECK_EQ(relocations, 10 * 2);    /* each object and its class */
    rperf_heap_gc_marked(13, false);        /* GC 12 unseen */
    allocate(0x20000, 4, CLASS_B);          /* sampled after: verified */
    relocations = 0;
    rperf_heap_relocate(13, moved);
    RPERF_CHECK_EQ(relocations, 4 * 2);
    alive_calls = alive_unverified = 0;
    settle_window();
    RPERF_CHECK_EQ(alive_calls, 14);
    RPERF_CHECK_EQ(alive_unverified, 10);
    rperf_engine_resume(false);
    relocations = 0;
    rperf_heap_gc_marked(14, false);
    rperf_heap_relocate(14, moved);
    RPERF_CHECK_EQ(relocations, 14 * 2);
    /* frees another Ractor may sweep unreported: the same */
    rperf_heap_gc_marked(15, true);
    relocations = 0;
    rperf_heap_relocate(15, moved);
    RPERF_CHECK_EQ(relocations, 0);
    alive_calls = alive_unverified = 0;
    settle_window();
    RPERF_CHECK_EQ(alive_unverified, 14);
    /* the host saw a free that may turn its hooks off: the same */
    rperf_engine_resume(false);
    rperf_heap_gc_marked(16, false);
    rperf_heap_frees_unreported();
    allocate(0x28000, 2, CLASS_B);          /* sampled after: verified */
    relocations = 0;
    rperf_heap_relocate(16, moved);
    RPERF_CHECK_EQ(relocations, 2 * 2);
    alive_calls = alive_unverified = 0;
    settle_window();
    RPERF_CHECK_EQ(alive_calls, 16);
    RPERF_CHECK_EQ(alive_unverified, 14);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

/* Frees drop tracked objects from the address index one by one; the
 * survivors stay findable by address (a new object there retires them)
 * and the freed ones leave nothing behind (new objects at their addresses
 * retire nobody), in a large index as in a small one. */
RPERF_TEST(frees_one_by_one_keep_the_index_exact)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    dead_from = UINTPTR_MAX;
    const uintptr_t a = 0x100000, b = 0x400000;
    allocate(a, 2000, CLASS_A);
    free_objects(a + 100 * 40, 1900);       /* 100 survive */
    rperf_heap_stats_t st;
    rperf_heap_stats(&st);
    RPERF_CHECK_EQ(st.tracked, 100);
    allocate(a + 50 * 40, 1, CLASS_B);      /* a survivor's address: it was freed */
    allocate(a + 1000 * 40, 10, CLASS_B);   /* freed addresses: nobody to retire */
    allocate(b, 40, CLASS_A);
    free_objects(b + 4 * 40, 36);
    allocate(a + 60 * 40, 1, CLASS_B);      /* another survivor freed */
    allocate(b + 2 * 40, 1, CLASS_B);       /* one of b's survivors freed */
    allocate(b + 20 * 40, 5, CLASS_B);      /* freed addresses */
    close_window();
    RPERF_CHECK_EQ(totals_of(CLASS_A).alloc_objects, 2040);
    RPERF_CHECK_EQ(totals_of(CLASS_A).inuse_objects, 99 - 1 + 4 - 1);
    RPERF_CHECK_EQ(totals_of(CLASS_B).inuse_objects, 18);
    rperf_heap_stats(&st);
    RPERF_CHECK_EQ(st.tracked, 101 + 18);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

/* Deaths dropped one by one leave their bloom bits set; once those
 * outnumber the live ones the filter is built again from the index, and a
 * survivor is still found by address. */
RPERF_TEST(a_filter_rebuilt_after_many_deaths_still_finds_the_survivors)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    dead_from = UINTPTR_MAX;
    const uintptr_t a = 0x200000;
    allocate(a, 600, CLASS_A);
    free_objects(a + 100 * 40, 500);        /* 500 of 600 freed */
    allocate(a + 40 * 40, 1, CLASS_B);      /* a survivor's address: it was freed */
    allocate(a + 300 * 40, 3, CLASS_B);     /* freed addresses: nobody to retire */
    close_window();
    RPERF_CHECK_EQ(totals_of(CLASS_A).inuse_objects, 99);
    RPERF_CHECK_EQ(totals_of(CLASS_B).inuse_objects, 4);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

RPERF_TEST(compaction_moves_tracked_objects)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    allocate(0x10000, 10, CLASS_A);
    shift_by = 0x400000;
    rperf_heap_gc_seen(7);
    relocations = 0;
    rperf_heap_relocate(8, moved);          /* GC 8's marking unseen: nothing read */
    RPERF_CHECK_EQ(relocations, 0);
    rperf_heap_relocate(7, moved);
    /* the old addresses are free: new objects there retire nothing */
    allocate(0x10000, 10, CLASS_B);
    /* and only the new addresses count as the moved objects */
    dead_from = 0x400000 + 0x10000 + 5 * 40;
    close_window();
    dead_from = UINTPTR_MAX;
    totals_t a = totals_of(CLASS_A);
    RPERF_CHECK_EQ(a.inuse_objects, 5);
    /* a new object at a moved object's new address retires it */
    rperf_engine_resume(false);
    allocate(0x410000, 2, CLASS_B);
    close_window();
    RPERF_CHECK_EQ(totals_of(CLASS_A).inuse_objects, 3);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

RPERF_TEST(a_clearing_window_keeps_the_live_heap)
{
    start_alloc(1);
    stack[0] = 0x2000; stack[1] = 0x2008;
    depth = 2;
    allocate(0x10000, 8, CLASS_A);
    allocate(0x20000, 4, CLASS_B);
    dead_from = 0x20000;                  /* B's are gone before the close */
    close_window();
    dead_from = UINTPTR_MAX;
    rperf_engine_resume(true);            /* a new window */
    close_window();
    totals_t a = totals_of(CLASS_A), b = totals_of(CLASS_B);
    RPERF_CHECK_EQ(a.alloc_objects, 0);
    RPERF_CHECK_EQ(a.inuse_objects, 8);
    RPERF_CHECK_EQ(b.entries, 0);
    /* the kept entry's frames were interned again: its stack resolves */
    bool found = false;
    for (uint32_t id = RPERF_SYNTHETIC_FRAMES; id < RPERF_SYNTHETIC_FRAMES + rperf_result_frame_count(); id++)
        if (rperf_result_frame(id) == 0x2008) found = true;
    RPERF_CHECK(found);
    /* the objects stay tracked: freeing them after the clear counts */
    rperf_engine_resume(false);
    allocate(0x10000, 3, CLASS_B);
    close_window();
    RPERF_CHECK_EQ(totals_of(CLASS_A).inuse_objects, 5);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

/* A heap window's baseline (Rperf::Window): taken before a clear it names
 * the old entries; after the clear (rperf_engine_clear, worker still
 * parked) the values the clear kept are the new baseline, so each object
 * freed after the clear is a change of -1 and nothing kept is new. */
static int64_t since_inuse, since_alloc;
static int since_entries;
static int sum_since(const rperf_result_alloc_t *a, void *ctx)
{
    (void)ctx;
    since_inuse += a->inuse_objects;
    since_alloc += a->alloc_objects;
    since_entries++;
    return 0;
}

RPERF_TEST(a_heap_window_baseline_sees_changes_across_a_clear)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    allocate(0x10000, 8, CLASS_A);
    close_window();
    int64_t base[8 * 4];
    RPERF_CHECK_EQ(rperf_result_alloc_values(base, 8), 1);
    RPERF_CHECK_EQ(base[0], 8);              /* alloc_objects */
    RPERF_CHECK_EQ(base[2], 8);              /* inuse_objects */
    rperf_engine_resume(false);
    allocate(0x20000, 2, CLASS_A);
    close_window();
    since_inuse = since_alloc = since_entries = 0;
    rperf_result_each_alloc_since(base, 1, sum_since, NULL);
    RPERF_CHECK_EQ(since_alloc, 2);
    RPERF_CHECK_EQ(since_inuse, 2);
    /* the clear: counts restart, the live heap is kept */
    rperf_engine_clear();
    RPERF_CHECK_EQ(rperf_result_alloc_values(base, 8), 1);
    RPERF_CHECK_EQ(base[0], 0);
    RPERF_CHECK_EQ(base[2], 10);
    rperf_engine_resume(false);
    dead_from = 0x20000;                     /* the last two die */
    close_window();
    dead_from = UINTPTR_MAX;
    since_inuse = since_alloc = since_entries = 0;
    rperf_result_each_alloc_since(base, 1, sum_since, NULL);
    RPERF_CHECK_EQ(since_entries, 1);
    RPERF_CHECK_EQ(since_alloc, 0);
    RPERF_CHECK_EQ(since_inuse, -2);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

/* In use as of the last GC (Go's heap profiles): an object allocated
 * since the latest marking may be garbage already, so it is not in use
 * until a marking has seen it live; one that dies before that never
 * shows in use. */
RPERF_TEST(in_use_is_as_of_the_last_gc)
{
    start_alloc(1);
    stack[0] = 0x2000;
    depth = 1;
    allocate(0x10000, 6, CLASS_A);        /* kept */
    gc_mark();
    allocate(0x20000, 4, CLASS_B);        /* garbage, not collected yet */
    allocate(0x30000, 3, CLASS_A);        /* kept, no GC since */
    settle_window();
    RPERF_CHECK_EQ(totals_of(CLASS_A).inuse_objects, 6);
    RPERF_CHECK_EQ(totals_of(CLASS_A).alloc_objects, 9);
    RPERF_CHECK_EQ(totals_of(CLASS_B).inuse_objects, 0);
    rperf_heap_stats_t st;
    rperf_heap_stats(&st);
    RPERF_CHECK_EQ(st.live, 13);          /* tracked alive: all of them */
    rperf_engine_resume(false);
    gc_mark();                            /* B's objects found dead ... */
    free_objects(0x20000, 4);             /* ... and swept */
    settle_window();
    RPERF_CHECK_EQ(totals_of(CLASS_A).inuse_objects, 9);
    RPERF_CHECK_EQ(totals_of(CLASS_B).inuse_objects, 0);
    RPERF_CHECK_EQ(totals_of(CLASS_B).alloc_objects, 4);
    /* a clear keeps tracking objects not in use yet: a GC after it finds
     * them live */
    rperf_engine_resume(false);
    allocate(0x40000, 5, CLASS_B);
    settle_window();
    RPERF_CHECK_EQ(totals_of(CLASS_B).inuse_objects, 0);
    rperf_engine_clear();
    rperf_engine_resume(false);
    close_window();
    RPERF_CHECK_EQ(totals_of(CLASS_B).inuse_objects, 5);
    RPERF_CHECK_EQ(totals_of(CLASS_B).alloc_objects, 0);
    rperf_engine_resume(false);
    rperf_engine_stop();
    rperf_engine_release();
}

RPERF_TEST(a_run_without_allocation_sampling_records_none)
{
    start_alloc(0);
    RPERF_CHECK(!rperf_heap_enabled());
    RPERF_CHECK(!rperf_alloc_seen(0x10000));
    rperf_alloc_record(0x10000, CLASS_A, 5, 40);
    rperf_engine_stop();
    RPERF_CHECK_EQ(totals_of(0).entries, 0);
    rperf_engine_release();
}

int main(void)
{
    if (rperf_engine_init(&host) != 0) return 1;
    return RPERF_RUN(RPERF_CASE(the_countdown_samples_one_allocation_in_interval),
                     RPERF_CASE(sampled_objects_are_aggregated_by_stack_and_class),
                     RPERF_CASE(a_new_object_at_a_tracked_address_retires_the_tracked_one),
                     RPERF_CASE(a_close_keeps_only_live_objects_with_their_size_now),
                     RPERF_CASE(a_heap_window_baseline_sees_changes_across_a_clear),
                     RPERF_CASE(a_freed_object_leaves_at_once_and_its_address_retires_nobody_later),
                     RPERF_CASE(after_a_gc_with_unreported_frees_nothing_is_read_until_a_settle),
                     RPERF_CASE(frees_one_by_one_keep_the_index_exact),
                     RPERF_CASE(a_filter_rebuilt_after_many_deaths_still_finds_the_survivors),
                     RPERF_CASE(compaction_moves_tracked_objects),
                     RPERF_CASE(a_clearing_window_keeps_the_live_heap),
                     RPERF_CASE(in_use_is_as_of_the_last_gc),
                     RPERF_CASE(a_run_without_allocation_sampling_records_none));
}
