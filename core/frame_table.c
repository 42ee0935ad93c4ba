/*
 * frame_table.c — interns frame values (Ruby VALUEs, opaque here) into dense
 * ids. A ck_ht (DIRECT mode) maps value -> index; a key array maps
 * index -> value and is what the GC mark function pins.
 *
 * Writer: the aggregation worker only (or a GVL thread while the worker is
 * parked or joined). Readers: the GC mark function, concurrently and without
 * locks, inside an epoch section on rperf__epoch_marker.
 *
 * The key array grows by allocate-copy-publish: the new array is published
 * with a release store *before* the count passes the old capacity, and the
 * old array is retired with ck_epoch_call and freed by ck_epoch_poll after a
 * grace period. ck_ht's own old maps are deferred through the same epoch
 * (alloc.c). The marker loads the count first, then the array (both
 * acquire), so it never indexes past the array it holds.
 *
 * In front of the ck_ht lookup sits a small direct-mapped memo (writer
 * only): consecutive samples repeat most of their frames (a loop's stack,
 * the lower part of a deep one), and a hit is one load and a compare
 * instead of a hash and a probe. It holds only values that are keys now
 * (filled from the table, emptied whenever the table is): keys are marked
 * and pinned, so such a value names the same live object for as long as
 * the memo holds it.
 */
#include "core_internal.h"

#include <string.h>

typedef struct key_array {
    ck_epoch_entry_t entry;
    size_t cap;
    rperf_frame_t keys[];
} key_array_t;

ck_epoch_t rperf__epoch;
ck_epoch_record_t rperf__epoch_worker;
ck_epoch_record_t rperf__epoch_marker;
rperf_frame_t volatile rperf__inflight;

static ck_ht_t table;
static int table_ready;
static key_array_t *_Atomic keys;
static _Atomic size_t count;
/* Marker only: every key below this index was old at a previous marking
 * (old objects are never freed by a minor GC, so a minor marking skips
 * them). Reset with the table. */
static size_t young_from;
#define KEYS_INITIAL 1024

#define MEMO_BITS 11
#define MEMO_SLOTS (1u << MEMO_BITS)    /* 32 KiB */
static struct memo_entry {
    rperf_frame_t v;                    /* 0: empty */
    uint32_t id;
} memo[MEMO_SLOTS];

static struct memo_entry *memo_at(rperf_frame_t v)
{
    uint64_t h = (uint64_t)v * 0x9e3779b97f4a7c15ULL;   /* Fibonacci hashing */
    return &memo[h >> (64 - MEMO_BITS)];
}

static void memo_clear(void) { memset(memo, 0, sizeof(memo)); }

static size_t key_array_bytes(size_t cap)
{
    return sizeof(key_array_t) + cap * sizeof(rperf_frame_t);
}

static void key_array_free_cb(ck_epoch_entry_t *e)
{
    RPERF_EPOCH_RECLAIM();
    key_array_t *a = (key_array_t *)e;   /* entry is the first member */
    rperf__free(a, key_array_bytes(a->cap));
}

void rperf__epoch_reset(void)
{
    /* Fresh epoch state (start, fork child). Records of the previous
     * generation are abandoned with their memory, as ck requires. */
    memset(&rperf__epoch, 0, sizeof(rperf__epoch));
    memset(&rperf__epoch_worker, 0, sizeof(rperf__epoch_worker));
    memset(&rperf__epoch_marker, 0, sizeof(rperf__epoch_marker));
    ck_epoch_init(&rperf__epoch);
    ck_epoch_register(&rperf__epoch, &rperf__epoch_worker, NULL);
    ck_epoch_register(&rperf__epoch, &rperf__epoch_marker, NULL);
}

int rperf__frames_init(void)
{
    if (!ck_ht_init(&table, CK_HT_MODE_DIRECT, NULL, &rperf__ck_allocator, 1024,
                    0x5eed5eedULL))
        return -1;
    table_ready = 1;
    size_t cap = KEYS_INITIAL;
    key_array_t *a = rperf__alloc(key_array_bytes(cap));
    if (!a) {
        ck_ht_destroy(&table);
        table_ready = 0;
        return -1;
    }
    a->cap = cap;
    atomic_store_explicit(&count, 0, memory_order_relaxed);
    atomic_store_explicit(&keys, a, memory_order_release);
    young_from = 0;
    rperf__inflight = 0;
    memo_clear();
    return 0;
}

/* GVL held, worker parked (snapshot clear): forget every frame, so nothing
 * stays pinned from the closed window and the key array shrinks back.
 * Ids restart at RPERF_SYNTHETIC_FRAMES; frames still in rings are interned
 * anew. The old key array and ck_ht map are retired through the worker's
 * epoch record (the worker is parked: this thread stands in for it). Out
 * of memory: nothing changes. */
void rperf__frames_clear(void)
{
    if (!table_ready) return;
    key_array_t *fresh = rperf__calloc(1, key_array_bytes(KEYS_INITIAL));
    if (!fresh) return;
    if (!ck_ht_reset_spmc(&table)) {
        rperf__free(fresh, key_array_bytes(KEYS_INITIAL));
        return;
    }
    fresh->cap = KEYS_INITIAL;
    key_array_t *old = atomic_load_explicit(&keys, memory_order_relaxed);
    atomic_store_explicit(&count, 0, memory_order_release);
    atomic_store_explicit(&keys, fresh, memory_order_release);
    young_from = 0;
    rperf__inflight = 0;
    memo_clear();
    if (old) ck_epoch_call(&rperf__epoch_worker, &old->entry, key_array_free_cb);
}

/* GVL held, worker joined, no marker running concurrently. */
void rperf__frames_destroy(void)
{
    key_array_t *a = atomic_load_explicit(&keys, memory_order_relaxed);
    atomic_store_explicit(&count, 0, memory_order_release);
    atomic_store_explicit(&keys, NULL, memory_order_release);
    rperf__inflight = 0;
    memo_clear();
    if (table_ready) {
        ck_ht_destroy(&table);
        table_ready = 0;
    }
    /* run every deferred free (old key arrays, old ck_ht maps) */
    ck_epoch_barrier(&rperf__epoch_worker);
    if (a) rperf__free(a, key_array_bytes(a->cap));
}

/* worker: the id of v, interned at its first sight */
static uint32_t intern_slow(rperf_frame_t v);

uint32_t rperf__frames_intern(rperf_frame_t v)
{
    struct memo_entry *m = memo_at(v);
    if (m->v == v && v != 0) return m->id;
    uint32_t id = intern_slow(v);
    if (id >= RPERF_SYNTHETIC_FRAMES) {
        m->v = v;
        m->id = id;
    }
    return id;
}

static uint32_t intern_slow(rperf_frame_t v)
{
    ck_ht_hash_t h;
    ck_ht_entry_t e;
    ck_ht_hash_direct(&h, &table, v);
    ck_ht_entry_key_set_direct(&e, v);
    if (ck_ht_get_spmc(&table, h, &e))
        return (uint32_t)ck_ht_entry_value_direct(&e) + RPERF_SYNTHETIC_FRAMES;

    size_t n = atomic_load_explicit(&count, memory_order_relaxed);
    key_array_t *a = atomic_load_explicit(&keys, memory_order_relaxed);
    if (n == a->cap) {
        key_array_t *b = rperf__alloc(key_array_bytes(a->cap * 2));
        if (!b) return RPERF_FRAME_UNKNOWN;    /* out of memory */
        b->cap = a->cap * 2;
        memcpy(b->keys, a->keys, n * sizeof(rperf_frame_t));
        /* publish the new array before the count can exceed the old cap */
        atomic_store_explicit(&keys, b, memory_order_release);
        ck_epoch_call(&rperf__epoch_worker, &a->entry, key_array_free_cb);
        a = b;
    }
    a->keys[n] = v;
    atomic_store_explicit(&count, n + 1, memory_order_release);
    /* Order the count store before the worker's next write to the in-flight
     * slot (the marker reads the slot, then the count). */
    rperf__release_fence();
    ck_ht_entry_set_direct(&e, h, v, (uintptr_t)n);
    if (!ck_ht_put_spmc(&table, h, &e)) {
        /* Allocation failure inside ck_ht: the key stays pinned and the next
         * intern of v appends it again; correct, only wasteful. */
    }
    return (uint32_t)n + RPERF_SYNTHETIC_FRAMES;
}

size_t rperf__frames_count(void)
{
    return atomic_load_explicit(&count, memory_order_acquire);
}

rperf_frame_t rperf__frames_at(uint32_t index)
{
    key_array_t *a = atomic_load_explicit(&keys, memory_order_acquire);
    if (!a || index >= rperf__frames_count()) return 0;
    return a->keys[index];
}

/* marker (GVL held, inside GC). is_old == NULL: mark every key (a major
 * GC). Otherwise (a minor GC) only keys that are not old yet: keys below
 * young_from are known old, and the cursor moves up past old keys. */
void rperf__frames_mark(void (*mark)(rperf_frame_t), bool (*is_old)(rperf_frame_t))
{
    size_t n = atomic_load_explicit(&count, memory_order_acquire);
    key_array_t *a = atomic_load_explicit(&keys, memory_order_acquire);
    if (!a) return;
    if (n > a->cap) n = a->cap;
    if (!is_old) {
        for (size_t i = 0; i < n; i++) mark(a->keys[i]);
        return;
    }
    size_t i = young_from < n ? young_from : n;
    while (i < n && is_old(a->keys[i])) i++;
    young_from = i;
    for (; i < n; i++)
        if (!is_old(a->keys[i])) mark(a->keys[i]);
}
