/*
 * test_core.c — unit tests of the engine's ring and aggregation: wrap-around,
 * full ring drops, sample encoding, synthetic frames, aggregation keys and
 * raw-mode ordering, pair records, a ring shrinking back after a burst, ring blocks reused
 * through the page cache, minor-GC marking
 * that skips old frames, and a snapshot clear that unpins every frame.
 * Context: a plain C program (no Ruby); the test plays
 * both the producer and the worker on one thread.
 */
#include "core_internal.h"
#include "rperf_test.h"

#include <stdlib.h>
#include <string.h>

typedef struct collected {
    int n;
    rperf_decoded_t last;
    uint32_t ids[RPERF_MAX_DEPTH];
} collected_t;

static void collect(rperf_thread_t *pt, const rperf_decoded_t *d, const uint32_t *ids, void *ctx)
{
    (void)pt;
    collected_t *c = ctx;
    c->n++;
    c->last = *d;
    memcpy(c->ids, ids, d->depth * sizeof(uint32_t));
}

static rperf_frame_t fake_frame(int i) { return (rperf_frame_t)(0x100000 + 8 * (uintptr_t)i); }

static rperf_thread_t *make_thread(uint32_t slots)
{
    rperf_thread_t *pt = rperf__calloc_lines(sizeof(*pt));   /* as rperf_thread_new */
    RPERF_CHECK(pt != NULL);
    RPERF_CHECK_EQ(rperf__ring_init(pt, slots), 0);
    return pt;
}

static void setup(void)
{
    rperf__epoch_reset();
    RPERF_CHECK_EQ(rperf__frames_init(), 0);
}

/* setup, and a thread registered in a running engine (what the marker
 * visits) */
static rperf_thread_t *running_thread(void)
{
    setup();
    rperf_thread_t *pt = make_thread(1024);
    atomic_store(&rperf__threads, pt);
    atomic_store(&rperf__engine.running, 1);
    return pt;
}

RPERF_TEST(ring_wraps_and_preserves_samples)
{
    setup();
    rperf_thread_t *pt = make_thread(1024);
    rperf_frame_t frames[20];
    for (int i = 0; i < 20; i++) frames[i] = fake_frame(i);
    collected_t c = { 0 };
    /* 5,000 samples of 23 words through the 256-word first segment: it
     * wraps ~450 times and never grows */
    for (int k = 0; k < 5000; k++) {
        atomic_store(&pt->label_set_id, (uint32_t)(k % 7));
        RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1000 + k, 5000000 + k, frames, 20));
        RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
        RPERF_CHECK_EQ(c.last.weight, 1000 + k);
        RPERF_CHECK_EQ(c.last.mono_ns, 5000000 + k);
        RPERF_CHECK_EQ(c.last.label_set_id, k % 7);
        RPERF_CHECK_EQ(c.last.depth, 20);
    }
    RPERF_CHECK_EQ(c.n, 5000);
    RPERF_CHECK_EQ(pt->prod->slots, RPERF_RING_FIRST_SLOTS);
    /* the same 20 frames were interned once each, ids in first-seen order */
    RPERF_CHECK_EQ(rperf__frames_count(), 20);
    for (int i = 0; i < 20; i++) {
        RPERF_CHECK_EQ(c.ids[i], RPERF_SYNTHETIC_FRAMES + (uint32_t)i);
        RPERF_CHECK_EQ(rperf__frames_at((uint32_t)i), fake_frame(i));
    }
    RPERF_CHECK(rperf__ring_idle(pt));
    rperf__thread_destroy(pt);
    rperf__frames_destroy();
}

RPERF_TEST(full_ring_grows_then_drops_and_counts)
{
    setup();
    rperf_thread_t *pt = make_thread(1024);
    rperf_frame_t frames[97];
    for (int i = 0; i < 97; i++) frames[i] = fake_frame(i);
    int pushed = 0;
    while (rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1 + pushed, 1, frames, 97)) pushed++;
    /* 100 words per sample; the small first segment (256 words: a thread
     * moves on once it is half full), then the configured 1024, 4096, 16384
     * and 65536 words, then 8 more of 65536 (one slot of each kept free by
     * ck_ring) before the first drop */
    RPERF_CHECK_EQ(pushed, 1 + 10 + 40 + 163 + 655 * (1 + RPERF_RING_MAX_CHAIN));
    RPERF_CHECK_EQ(pt->prod->slots, RPERF_RING_MAX_SLOTS);
    RPERF_CHECK_EQ(atomic_load(&pt->dropped), 1);
    RPERF_CHECK(!rperf__ring_push(pt, RPERF_SAMPLE_GC_MARKING, 1, 1, frames, 97));
    RPERF_CHECK_EQ(atomic_load(&pt->dropped), 2);
    /* the consumer drains every segment in order and lands on the last */
    collected_t c = { 0 };
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), pushed);
    RPERF_CHECK_EQ(c.last.weight, pushed);
    RPERF_CHECK(atomic_load(&pt->cons) == pt->prod);
    RPERF_CHECK(rperf__ring_idle(pt));
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_GC_SWEEPING, 7, 9, frames, 3));
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
    RPERF_CHECK_EQ(c.last.type, RPERF_SAMPLE_GC_SWEEPING);
    RPERF_CHECK_EQ(c.last.weight, 7);
    ck_epoch_barrier(&rperf__epoch_worker);   /* frees the drained segments */
    rperf__thread_destroy(pt);
    rperf__frames_destroy();
}

static int marked_count;
static rperf_frame_t marked[2048];
static void mark_fn(rperf_frame_t v)
{
    if (marked_count < 2048) marked[marked_count] = v;
    marked_count++;
}

static bool was_marked(rperf_frame_t v)
{
    for (int i = 0; i < marked_count && i < 2048; i++)
        if (marked[i] == v) return true;
    return false;
}

RPERF_TEST(mark_sees_frames_in_rings_and_table_but_no_header_words)
{
    rperf_thread_t *pt = running_thread();
    rperf_frame_t frames[3] = { fake_frame(1), fake_frame(2), fake_frame(3) };
    /* weights/timestamps that would look like aligned pointers if untagged */
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 0x200000, 0x300000, frames, 3));
    marked_count = 0;
    rperf_engine_mark(mark_fn, NULL);
    RPERF_CHECK_EQ(marked_count, 3);
    RPERF_CHECK(was_marked(fake_frame(1)) && was_marked(fake_frame(3)));
    /* once drained, the frames are marked from the frame table instead */
    collected_t c = { 0 };
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
    marked_count = 0;
    rperf_engine_mark(mark_fn, NULL);
    RPERF_CHECK(was_marked(fake_frame(1)) && was_marked(fake_frame(2)) && was_marked(fake_frame(3)));
    RPERF_CHECK(!was_marked(0x200000) && !was_marked(0x300000));
    atomic_store(&rperf__engine.running, 0);
    atomic_store(&rperf__threads, NULL);
    rperf__thread_destroy(pt);
    rperf__frames_destroy();
}

RPERF_TEST(mark_sees_frames_in_every_segment)
{
    rperf_thread_t *pt = running_thread();
    rperf_frame_t a[97], b[97];
    for (int i = 0; i < 97; i++) a[i] = fake_frame(i);
    for (int i = 0; i < 97; i++) b[i] = fake_frame(500 + i);
    for (int k = 0; k < 10; k++) RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, a, 97));
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, b, 97));   /* second segment */
    RPERF_CHECK(atomic_load(&pt->cons) != pt->prod);
    marked_count = 0;
    rperf_engine_mark(mark_fn, NULL);
    RPERF_CHECK(was_marked(fake_frame(0)) && was_marked(fake_frame(500)));
    RPERF_CHECK_EQ(marked_count, 11 * 97);
    atomic_store(&rperf__engine.running, 0);
    atomic_store(&rperf__threads, NULL);
    rperf__thread_destroy(pt);
    rperf__frames_destroy();
}

static int sample_count;
static int64_t sample_weights[8];
static uint32_t sample_depths[8];
static uint32_t sample_first[8];
static int record(const rperf_result_sample_t *s, void *ctx)
{
    (void)ctx;
    if (sample_count < 8) {
        sample_weights[sample_count] = s->weight;
        sample_depths[sample_count] = s->depth;
        sample_first[sample_count] = s->depth ? s->frames[0] : 0;
    }
    sample_count++;
    return 0;
}

RPERF_TEST(aggregation_merges_equal_keys_only)
{
    uint32_t a[3] = { 7, 8, 9 }, b[3] = { 7, 8, 10 };
    RPERF_CHECK_EQ(rperf__agg_init(true), 0);
    rperf__agg_add(a, 3, 10, 1, 0, 0);
    rperf__agg_add(a, 3, 5, 1, 0, 0);      /* same key: merged */
    rperf__agg_add(a, 3, 1, 2, 0, 0);      /* other thread */
    rperf__agg_add(a, 3, 1, 1, 3, 0);      /* other label set */
    rperf__agg_add(b, 3, 2, 1, 0, 0);      /* other stack */
    rperf__agg_add(a, 2, 4, 1, 0, 0);      /* prefix is another stack */
    RPERF_CHECK_EQ(rperf__agg_count(), 5);
    sample_count = 0;
    rperf__agg_each(record, NULL);
    RPERF_CHECK_EQ(sample_count, 5);
    RPERF_CHECK_EQ(sample_weights[0], 15);
    /* many distinct stacks force rehashing without losing any */
    for (uint32_t i = 0; i < 50000; i++) {
        uint32_t s[2] = { i, i * 3 };
        rperf__agg_add(s, 2, 1, 1, 0, 0);
        rperf__agg_add(s, 2, 1, 1, 0, 0);
    }
    RPERF_CHECK_EQ(rperf__agg_count(), 50005);
    rperf__agg_clear();
    RPERF_CHECK_EQ(rperf__agg_count(), 0);
    rperf__agg_destroy();
}

/* A window's baseline (Rperf::Window): the weights copied at its open
 * name the same entries later, and the result since holds only the
 * entries that gained weight, with the gain. */
RPERF_TEST(a_window_sees_only_what_grew_since_its_baseline)
{
    uint32_t a[2] = { 1, 2 }, b[2] = { 1, 3 }, c[2] = { 4, 5 };
    RPERF_CHECK_EQ(rperf__agg_init(true), 0);
    rperf__agg_add(a, 2, 10, 1, 0, 0);
    rperf__agg_add(b, 2, 20, 1, 0, 0);
    int64_t base[4] = { -1, -1, -1, -1 };
    RPERF_CHECK_EQ(rperf__agg_weights(base, 4), 2);
    RPERF_CHECK_EQ(base[0], 10);
    RPERF_CHECK_EQ(base[1], 20);
    RPERF_CHECK_EQ(base[2], -1);           /* only the entries there are */
    RPERF_CHECK_EQ(rperf__agg_weights(NULL, 0), 2);
    rperf__agg_add(b, 2, 7, 1, 0, 0);      /* grew */
    rperf__agg_add(c, 2, 3, 1, 0, 0);      /* new since */
    sample_count = 0;
    rperf__agg_each_since(base, 2, record, NULL);
    RPERF_CHECK_EQ(sample_count, 2);       /* a did not move: left out */
    RPERF_CHECK_EQ(sample_weights[0], 7);
    RPERF_CHECK_EQ(sample_first[0], 1);
    RPERF_CHECK_EQ(sample_weights[1], 3);
    RPERF_CHECK_EQ(sample_first[1], 4);
    /* no baseline: everything */
    sample_count = 0;
    rperf__agg_each_since(NULL, 0, record, NULL);
    RPERF_CHECK_EQ(sample_count, 3);
    rperf__agg_destroy();
}

RPERF_TEST(raw_mode_keeps_every_sample_in_time_order)
{
    uint32_t a[2] = { 5, 6 };
    RPERF_CHECK_EQ(rperf__agg_init(false), 0);
    rperf__agg_add(a, 2, 30, 1, 0, 300);
    rperf__agg_add(a, 2, 10, 2, 0, 100);
    rperf__agg_add(a, 2, 20, 1, 0, 200);
    RPERF_CHECK_EQ(rperf__raw_count(), 3);
    RPERF_CHECK_EQ(rperf__agg_count(), 0);
    sample_count = 0;
    rperf__raw_each(record, NULL, 0);
    RPERF_CHECK_EQ(sample_count, 3);
    RPERF_CHECK_EQ(sample_weights[0], 10);
    RPERF_CHECK_EQ(sample_weights[1], 20);
    RPERF_CHECK_EQ(sample_weights[2], 30);
    rperf__agg_destroy();
}

RPERF_TEST(synthetic_frames_go_to_the_leaf)
{
    setup();
    rperf_thread_t *pt = make_thread(1024);
    atomic_store(&rperf__threads, pt);
    RPERF_CHECK_EQ(rperf__agg_init(true), 0);
    rperf_frame_t frames[2] = { fake_frame(1), fake_frame(2) };
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_GVL_WAIT, 50, 1, frames, 2));
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 60, 2, frames, 2));
    rperf__worker_drain_all();
    sample_count = 0;
    rperf__agg_each(record, NULL);
    RPERF_CHECK_EQ(sample_count, 2);
    RPERF_CHECK_EQ(sample_depths[0], 3);
    RPERF_CHECK_EQ(sample_first[0], RPERF_SAMPLE_GVL_WAIT - 1);
    RPERF_CHECK_EQ(sample_depths[1], 2);
    RPERF_CHECK_EQ(sample_first[1], RPERF_SYNTHETIC_FRAMES);
    atomic_store(&rperf__threads, NULL);
    rperf__thread_destroy(pt);
    rperf__agg_destroy();
    rperf__frames_destroy();
}

/* A pair (GVL blocked + wait, GC marking + sweeping on one stack) is one
 * record of 4 + depth words, drained as two samples of consecutive types on
 * the same frames, in a ring that wraps; its header words are never marked. */
RPERF_TEST(a_pair_record_drains_as_two_samples_on_one_stack)
{
    rperf_thread_t *pt = running_thread();
    rperf_frame_t frames[5];
    for (int i = 0; i < 5; i++) frames[i] = fake_frame(i);
    /* weights that would look like aligned pointers if untagged */
    RPERF_CHECK(rperf__ring_push_pair(pt, RPERF_SAMPLE_GVL_BLOCKED, 0x400000, 0x500000, 7, frames, 5));
    marked_count = 0;
    rperf_engine_mark(mark_fn, NULL);
    RPERF_CHECK_EQ(marked_count, 5);
    RPERF_CHECK(!was_marked(0x400000) && !was_marked(0x500000));
    collected_t c = { 0 };
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 2);
    RPERF_CHECK_EQ(c.n, 2);
    RPERF_CHECK_EQ(c.last.type, RPERF_SAMPLE_GVL_WAIT);
    RPERF_CHECK_EQ(c.last.weight, 0x500000);
    RPERF_CHECK_EQ(c.last.mono_ns, 7);
    RPERF_CHECK_EQ(c.last.depth, 5);
    /* 9 words a record through the 256-word first segment, mixed with
     * single records: it wraps and the decoding stays in step */
    for (int k = 0; k < 300; k++) {
        atomic_store(&pt->label_set_id, (uint32_t)(k % 5));
        RPERF_CHECK(rperf__ring_push_pair(pt, RPERF_SAMPLE_GC_MARKING, 10 + k, 20 + k, k, frames, 5));
        RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 30 + k, k, frames + 1, 3));
        c.n = 0;
        RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 3);
        RPERF_CHECK_EQ(c.n, 3);
        RPERF_CHECK_EQ(c.last.type, RPERF_SAMPLE_NORMAL);
        RPERF_CHECK_EQ(c.last.weight, 30 + k);
        RPERF_CHECK_EQ(c.last.depth, 3);
        RPERF_CHECK_EQ(c.last.label_set_id, k % 5);
    }
    RPERF_CHECK_EQ(pt->prod->slots, RPERF_RING_FIRST_SLOTS);
    /* through the worker's sink: two aggregated stacks, each with its own
     * synthetic leaf on the same frames */
    RPERF_CHECK_EQ(rperf__agg_init(true), 0);
    RPERF_CHECK(rperf__ring_push_pair(pt, RPERF_SAMPLE_GVL_BLOCKED, 11, 22, 1, frames, 2));
    rperf__worker_drain_all();
    sample_count = 0;
    rperf__agg_each(record, NULL);
    RPERF_CHECK_EQ(sample_count, 2);
    int64_t blocked = 0, wait = 0;
    for (int i = 0; i < 2; i++) {
        RPERF_CHECK_EQ(sample_depths[i], 3);
        if (sample_first[i] == RPERF_SAMPLE_GVL_BLOCKED - 1) blocked = sample_weights[i];
        if (sample_first[i] == RPERF_SAMPLE_GVL_WAIT - 1) wait = sample_weights[i];
    }
    RPERF_CHECK_EQ(blocked, 11);
    RPERF_CHECK_EQ(wait, 22);
    atomic_store(&rperf__engine.running, 0);
    atomic_store(&rperf__threads, NULL);
    rperf__thread_destroy(pt);
    rperf__agg_destroy();
    rperf__frames_destroy();
}

RPERF_TEST(ring_shrinks_back_after_a_burst)
{
    setup();
    rperf__engine.cfg.ring_slots = 1024;
    rperf_thread_t *pt = make_thread(1024);
    rperf_frame_t frames[97];
    for (int i = 0; i < 97; i++) frames[i] = fake_frame(i);
    for (int k = 0; k < 100; k++) RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, frames, 97));
    RPERF_CHECK(pt->prod->slots > 1024);               /* the burst grew it */
    collected_t c = { 0 };
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 100);
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 5, 1, frames, 3));
    RPERF_CHECK_EQ(pt->prod->slots, 1024);             /* back to the initial size */
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
    RPERF_CHECK_EQ(c.last.weight, 5);
    RPERF_CHECK(atomic_load(&pt->cons) == pt->prod);   /* large segments left */
    ck_epoch_barrier(&rperf__epoch_worker);
    rperf__engine.cfg.ring_slots = 0;
    rperf__thread_destroy(pt);
    rperf__frames_destroy();
}

/* A thread per connection must not cost an mmap/munmap and fresh page
 * faults per thread: freed ring blocks of the initial size are reused,
 * counted as profiler memory while cached, and given back at release. */
RPERF_TEST(freed_ring_blocks_are_reused_and_released)
{
    rperf__pages_release_cache();
    size_t base = rperf_engine_memory_bytes();
    size_t sz = 1024 * sizeof(ck_ring_buffer_t);
    void *a = rperf__alloc_pages(sz);
    void *b = rperf__alloc_pages(sz);
    RPERF_CHECK(a && b && a != b);
    memset(a, 0xab, sz);                                /* the pages are usable */
    rperf__free_pages(a, sz);
    rperf__free_pages(b, sz);
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base + 2 * sz); /* cached blocks still count */
    void *c = rperf__alloc_pages(sz);
    RPERF_CHECK(c == a || c == b);                      /* reused, not mapped anew */
    size_t big = (size_t)RPERF_RING_MAX_SLOTS * sizeof(ck_ring_buffer_t);
    void *g = rperf__alloc_pages(big);
    RPERF_CHECK(g != NULL);
    rperf__free_pages(g, big);                          /* grown segments are not kept */
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base + 2 * sz);
    rperf__pages_fork_child();                          /* resetting the lock keeps the blocks */
    rperf__free_pages(c, sz);
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base + 2 * sz);
    rperf__pages_release_cache();
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base);
}

/* A thread that never records a sample (thread churn: most threads of a
 * thread-per-connection server live shorter than a tick) costs no ring
 * memory; its first sample takes the small first segment from the heap (no
 * page block: a parked thread that records its first turn's blocked time
 * maps nothing), and a sample that does not fit there moves on to the size
 * given, even a sample of the deepest stack. */
RPERF_TEST(ring_memory_comes_with_the_first_sample)
{
    setup();
    rperf__frames_intern(fake_frame(1));   /* the frame table's own memory before the base */
    rperf__pages_release_cache();
    size_t base = rperf_engine_memory_bytes();
    rperf_thread_t *pt = rperf__calloc_lines(sizeof(*pt));   /* as rperf_thread_new */
    RPERF_CHECK(pt != NULL);
    size_t with_thread = rperf_engine_memory_bytes();
    RPERF_CHECK_EQ(rperf__ring_init(pt, 1024), 0);
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), with_thread);   /* nothing mapped */
    collected_t c = { 0 };
    RPERF_CHECK(rperf__ring_idle(pt));
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 0);
    rperf_frame_t frames[3] = { fake_frame(1), fake_frame(2), fake_frame(3) };
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 42, 1, frames, 3));
    size_t first = rperf_engine_memory_bytes();
    RPERF_CHECK(first >= with_thread + RPERF_RING_FIRST_SLOTS * sizeof(ck_ring_buffer_t));
    RPERF_CHECK(first < with_thread + 1024 * sizeof(ck_ring_buffer_t));
    RPERF_CHECK_EQ(pt->prod->slots, RPERF_RING_FIRST_SLOTS);
    RPERF_CHECK(!rperf__ring_idle(pt));
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
    RPERF_CHECK_EQ(c.last.weight, 42);
    RPERF_CHECK(rperf__ring_idle(pt));
    static rperf_frame_t deep[RPERF_MAX_DEPTH];
    for (int i = 0; i < RPERF_MAX_DEPTH; i++) deep[i] = fake_frame(i);
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 43, 1, deep, RPERF_MAX_DEPTH));
    RPERF_CHECK_EQ(pt->prod->slots, 1024);
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
    RPERF_CHECK_EQ(c.last.weight, 43);
    RPERF_CHECK_EQ(c.last.depth, RPERF_MAX_DEPTH);
    ck_epoch_barrier(&rperf__epoch_worker);   /* frees the drained first segment */
    rperf__thread_destroy(pt);
    rperf__pages_release_cache();
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base);
    rperf__frames_destroy();
}

static bool low_frames_are_old(rperf_frame_t v) { return v < fake_frame(5); }

RPERF_TEST(minor_marking_skips_old_frames_and_clear_unpins_all)
{
    rperf_thread_t *pt = running_thread();
    rperf_frame_t frames[10];
    for (int i = 0; i < 10; i++) frames[i] = fake_frame(i);
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, frames, 10));
    collected_t c = { 0 };
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
    rperf__inflight = 0;                              /* worker idle */
    marked_count = 0;
    rperf_engine_mark(mark_fn, low_frames_are_old);   /* minor GC */
    RPERF_CHECK_EQ(marked_count, 5);
    RPERF_CHECK(!was_marked(fake_frame(0)) && was_marked(fake_frame(9)));
    marked_count = 0;
    rperf_engine_mark(mark_fn, NULL);                 /* major GC: all */
    RPERF_CHECK_EQ(marked_count, 10);
    rperf__frames_clear();                            /* snapshot(clear: true) */
    RPERF_CHECK_EQ(rperf__frames_count(), 0);
    marked_count = 0;
    rperf_engine_mark(mark_fn, NULL);
    RPERF_CHECK_EQ(marked_count, 0);
    /* the table works on after a clear: ids restart */
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, frames + 7, 2));
    RPERF_CHECK_EQ(rperf__ring_drain(pt, collect, &c), 1);
    RPERF_CHECK_EQ(c.ids[0], RPERF_SYNTHETIC_FRAMES);
    RPERF_CHECK_EQ(rperf__frames_at(1), fake_frame(8));
    ck_epoch_barrier(&rperf__epoch_worker);
    atomic_store(&rperf__engine.running, 0);
    atomic_store(&rperf__threads, NULL);
    rperf__thread_destroy(pt);
    rperf__frames_destroy();
}

/* A ring passing high water queues its thread for the worker, which then
 * drains only the queued threads (not every thread of the process: with
 * 1,000 parked threads, visiting all of them at each of a busy thread's
 * ~150 wakes a second cost more than its samples); the periodic visit
 * drains the rest. */
RPERF_TEST(a_wake_drains_only_the_rings_that_asked)
{
    setup();
    RPERF_CHECK_EQ(rperf__agg_init(true), 0);
    rperf_thread_t *busy = make_thread(1024), *quiet = make_thread(1024);
    atomic_store(&busy->next, quiet);
    atomic_store(&rperf__threads, busy);
    /* a real worker, parked: it owns the urgent list, and the drains below
     * run here, as they may while it is parked */
    RPERF_CHECK_EQ(rperf__worker_start(), 0);
    rperf__worker_pause();
    rperf_frame_t frames[20];
    for (int i = 0; i < 20; i++) frames[i] = fake_frame(i);
    RPERF_CHECK(rperf__ring_push(quiet, RPERF_SAMPLE_NORMAL, 1, 1, frames, 20));
    int pushed = 0;
    while (!atomic_load(&busy->urgent)) {
        RPERF_CHECK(rperf__ring_push(busy, RPERF_SAMPLE_NORMAL, 1, 1, frames, 20));
        pushed++;
    }
    RPERF_CHECK_EQ(busy->prod->slots, 1024);          /* it left the small segment first */
    RPERF_CHECK_EQ(atomic_load(&quiet->urgent), 0);
    rperf__worker_drain_urgent();
    RPERF_CHECK(rperf__ring_idle(busy));
    RPERF_CHECK_EQ(atomic_load(&busy->urgent), 0);    /* it can ask again */
    RPERF_CHECK(!rperf__ring_idle(quiet));
    RPERF_CHECK_EQ(rperf__agg_count(), 1);
    rperf__worker_drain_all();
    RPERF_CHECK(rperf__ring_idle(quiet));
    sample_count = 0;
    rperf__agg_each(record, NULL);
    RPERF_CHECK_EQ(sample_count, 1);
    RPERF_CHECK_EQ(sample_weights[0], pushed + 1);
    rperf__worker_resume();
    rperf__worker_stop();
    ck_epoch_barrier(&rperf__epoch_worker);
    atomic_store(&rperf__threads, NULL);
    rperf__thread_destroy(busy);
    rperf__thread_destroy(quiet);
    rperf__agg_destroy();
    rperf__frames_destroy();
}

/* While a ticker runs (a backend's timer thread), a ring passing half full
 * queues its thread but leaves the worker's wake-up to the ticker's next
 * poke, so the application thread makes no system call for it; at three
 * quarters full the producer wakes the worker itself. Without a ticker the
 * producer wakes it at half full, as before. */
RPERF_TEST(a_ticker_wakes_the_worker_for_the_producers)
{
    setup();
    RPERF_CHECK_EQ(rperf__agg_init(true), 0);
    rperf_thread_t *pt = make_thread(1024);
    atomic_store(&rperf__threads, pt);
    RPERF_CHECK_EQ(rperf__worker_start(), 0);
    rperf__worker_pause();               /* parked: the rings stay as pushed */
    rperf_frame_t frames[20];
    for (int i = 0; i < 20; i++) frames[i] = fake_frame(i);
    rperf_engine_ticker_on(true);
    uint64_t w0 = rperf__worker_wakes_asked();
    while (!atomic_load(&pt->urgent))
        RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, frames, 20));
    RPERF_CHECK_EQ(rperf__worker_wakes_asked(), w0);  /* half full: queued, no wake-up */
    rperf_engine_ticker_poke();
    RPERF_CHECK_EQ(rperf__worker_wakes_asked(), w0 + 1);  /* the ticker made it */
    rperf_engine_ticker_poke();
    RPERF_CHECK_EQ(rperf__worker_wakes_asked(), w0 + 1);  /* once */
    while (ck_ring_size(&pt->prod->ring) + 23 <= (pt->prod->slots - 1) / 4 * 3)
        RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, frames, 20));
    RPERF_CHECK_EQ(rperf__worker_wakes_asked(), w0 + 1);
    RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, frames, 20));
    RPERF_CHECK_EQ(rperf__worker_wakes_asked(), w0 + 2);  /* three quarters: the producer */
    rperf__worker_drain_urgent();
    rperf_engine_ticker_on(false);
    uint64_t w1 = rperf__worker_wakes_asked();
    while (!atomic_load(&pt->urgent))
        RPERF_CHECK(rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, 1, 1, frames, 20));
    RPERF_CHECK_EQ(rperf__worker_wakes_asked(), w1 + 1);  /* no ticker: at half full */
    rperf__worker_resume();
    rperf__worker_stop();
    ck_epoch_barrier(&rperf__epoch_worker);
    atomic_store(&rperf__threads, NULL);
    rperf__thread_destroy(pt);
    rperf__agg_destroy();
    rperf__frames_destroy();
}

int main(void)
{
    return RPERF_RUN(RPERF_CASE(ring_wraps_and_preserves_samples),
                     RPERF_CASE(a_window_sees_only_what_grew_since_its_baseline),
                     RPERF_CASE(full_ring_grows_then_drops_and_counts),
                     RPERF_CASE(mark_sees_frames_in_every_segment),
                     RPERF_CASE(mark_sees_frames_in_rings_and_table_but_no_header_words),
                     RPERF_CASE(aggregation_merges_equal_keys_only),
                     RPERF_CASE(raw_mode_keeps_every_sample_in_time_order),
                     RPERF_CASE(synthetic_frames_go_to_the_leaf),
                     RPERF_CASE(a_pair_record_drains_as_two_samples_on_one_stack),
                     RPERF_CASE(ring_shrinks_back_after_a_burst),
                     RPERF_CASE(freed_ring_blocks_are_reused_and_released),
                     RPERF_CASE(ring_memory_comes_with_the_first_sample),
                     RPERF_CASE(a_wake_drains_only_the_rings_that_asked),
                     RPERF_CASE(a_ticker_wakes_the_worker_for_the_producers),
                     RPERF_CASE(minor_marking_skips_old_frames_and_clear_unpins_all));
}
