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
 *
 * Retirement: a frame's code object is pinned only while the profile may
 * need it. Each id has a state byte (fixed chunks that never move, so the
 * worker, the marker and the host's pass share them without a lock). The
 * worker touches an id at every sample that interns it. The host's pass
 * (GVL held, after a GC: rperf_frames_retire_pass) takes each id that no
 * sample touched since its previous pass, asks the host about it — keep
 * it for good (an old object: code that lives on), or retire it (the host
 * has kept its names and lines) — and requests retirement; the worker
 * then removes the value from the ck_ht and the memo and only then marks
 * the id retired, which the marker honours by no longer marking it. So
 * once the object can be collected, no lookup can return its id any more:
 * a later sample at the same address (the same code, or new code in the
 * freed slot) is interned as a new id. A sample touching an id whose
 * retirement is requested cancels it.
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
ck_epoch_record_t rperf__epoch_namer;
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

/* Per-id retirement states (see the comment at the top). */
enum {
    FS_FRESH = 0,      /* no sample since the last pass */
    FS_TOUCHED = 1,    /* sampled since the last pass */
    FS_KEPT = 2,       /* pinned for the run (the host said so) */
    FS_RETIRING = 3,   /* the pass asked; the worker has not removed it yet */
    FS_RETIRED = 4,    /* out of the lookup, no longer marked */
};
#define STATE_CHUNK_BITS 14
#define STATE_CHUNK (1u << STATE_CHUNK_BITS)             /* 16 KiB of states */
#define STATE_CHUNKS (1u << 14)                          /* 268 M ids */
static _Atomic uint8_t *_Atomic state_chunks[STATE_CHUNKS];
static _Atomic bool retire_due;         /* the pass requested some */
static _Atomic bool churning;           /* the last pass judged frames (read inside GC, any Ractor) */
static size_t pass_from;                /* pass only: ids below are kept or retired */
static size_t worker_retire_from;       /* worker only: lowest id a request may name */
static _Atomic size_t retire_low;       /* pass -> worker: lowest id requested */

/* Any context: the state byte of index i, NULL past the chunks made. */
static _Atomic uint8_t *state_at(size_t i)
{
    if ((i >> STATE_CHUNK_BITS) >= STATE_CHUNKS) return NULL;
    _Atomic uint8_t *c = atomic_load_explicit(&state_chunks[i >> STATE_CHUNK_BITS], memory_order_acquire);
    return c ? &c[i & (STATE_CHUNK - 1)] : NULL;
}

/* worker (or GVL thread, worker parked): make sure index i has a state
 * byte; false when out of memory or past the last chunk. */
static bool state_ensure(size_t i)
{
    size_t ci = i >> STATE_CHUNK_BITS;
    if (ci >= STATE_CHUNKS) return false;
    if (atomic_load_explicit(&state_chunks[ci], memory_order_relaxed)) return true;
    _Atomic uint8_t *c = rperf__calloc(STATE_CHUNK, 1);
    if (!c) return false;
    atomic_store_explicit(&state_chunks[ci], c, memory_order_release);
    return true;
}

/* GVL held, worker parked or joined, no pass or marker running: every
 * state back to FRESH (kept chunks reused), or freed. */
static void states_reset(bool free_them)
{
    for (size_t ci = 0; ci < STATE_CHUNKS; ci++) {
        _Atomic uint8_t *c = atomic_load_explicit(&state_chunks[ci], memory_order_relaxed);
        if (!c) break;
        if (free_them) {
            atomic_store_explicit(&state_chunks[ci], NULL, memory_order_relaxed);
            rperf__free((void *)c, STATE_CHUNK);
        } else {
            for (size_t k = 0; k < STATE_CHUNK; k++) atomic_store_explicit(&c[k], FS_FRESH, memory_order_relaxed);
        }
    }
    pass_from = 0;
    atomic_store_explicit(&churning, false, memory_order_relaxed);
    worker_retire_from = 0;
    atomic_store(&retire_low, SIZE_MAX);
    atomic_store(&retire_due, false);
}

/* worker: a sample interned index i: it stays pinned past the next pass
 * (and a requested retirement is cancelled). */
static void touch(size_t i)
{
    _Atomic uint8_t *st = state_at(i);
    if (!st) return;
    uint8_t cur = atomic_load_explicit(st, memory_order_relaxed);
    if (cur == FS_FRESH || cur == FS_RETIRING)
        atomic_compare_exchange_strong_explicit(st, &cur, FS_TOUCHED, memory_order_relaxed,
                                                memory_order_relaxed);
}

/* marker or GVL thread: is index i retired (its object not ours)? */
static bool retired(size_t i)
{
    _Atomic uint8_t *st = state_at(i);
    return st && atomic_load_explicit(st, memory_order_acquire) == FS_RETIRED;
}

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
    memset(&rperf__epoch_namer, 0, sizeof(rperf__epoch_namer));
    ck_epoch_init(&rperf__epoch);
    ck_epoch_register(&rperf__epoch, &rperf__epoch_worker, NULL);
    ck_epoch_register(&rperf__epoch, &rperf__epoch_marker, NULL);
    ck_epoch_register(&rperf__epoch, &rperf__epoch_namer, NULL);
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
    states_reset(false);
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
    states_reset(false);
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
    states_reset(true);
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
    if (m->v == v && v != 0) {
        touch(m->id - RPERF_SYNTHETIC_FRAMES);
        return m->id;
    }
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
    if (ck_ht_get_spmc(&table, h, &e)) {
        size_t i = (size_t)ck_ht_entry_value_direct(&e);
        touch(i);
        return (uint32_t)i + RPERF_SYNTHETIC_FRAMES;
    }

    size_t n = atomic_load_explicit(&count, memory_order_relaxed);
    if (!state_ensure(n)) return RPERF_FRAME_UNKNOWN;     /* out of memory */
    atomic_store_explicit(state_at(n), FS_TOUCHED, memory_order_relaxed);
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
        for (size_t i = 0; i < n; i++)
            if (!retired(i)) mark(a->keys[i]);
        return;
    }
    /* a retired key's object may be gone: never read, and never needed
     * again, so the cursor passes it as it passes old ones */
    size_t i = young_from < n ? young_from : n;
    while (i < n && (retired(i) || is_old(a->keys[i]))) i++;
    young_from = i;
    for (; i < n; i++)
        if (!retired(i) && !is_old(a->keys[i])) mark(a->keys[i]);
}

bool rperf__frames_retired(uint32_t index)
{
    return index < rperf__frames_count() && retired(index);
}

bool rperf__frames_churning(void) { return atomic_load_explicit(&churning, memory_order_relaxed); }

/* GVL held (the host's pass, inside no GC), worker running or parked. */
size_t rperf__frames_retire_pass(rperf_frame_verdict_t (*judge)(uint32_t id, rperf_frame_t v, void *arg),
                                 void *arg)
{
    if (!table_ready) return 0;
    size_t asked = 0, judged = 0, low = SIZE_MAX;
    ck_epoch_section_t sec;
    ck_epoch_begin(&rperf__epoch_namer, &sec);
    size_t n = atomic_load_explicit(&count, memory_order_acquire);
    key_array_t *a = atomic_load_explicit(&keys, memory_order_acquire);
    if (a && n > a->cap) n = a->cap;
    bool settled = true;                 /* every id below i is kept or retired */
    for (size_t i = pass_from; a && i < n; i++) {
        _Atomic uint8_t *st = state_at(i);
        if (!st) break;
        uint8_t cur = atomic_load_explicit(st, memory_order_relaxed);
        if (cur == FS_FRESH || cur == FS_TOUCHED) {
            judged++;
            rperf_frame_verdict_t v = judge((uint32_t)i + RPERF_SYNTHETIC_FRAMES, a->keys[i], arg);
            uint8_t to = v == RPERF_FRAME_KEEP ? FS_KEPT : v == RPERF_FRAME_RETIRE ? FS_RETIRING : FS_FRESH;
            if (to != FS_FRESH && atomic_compare_exchange_strong_explicit(
                                      st, &cur, to, memory_order_relaxed, memory_order_relaxed) &&
                to == FS_RETIRING) {
                asked++;
                if (i < low) low = i;
            }
        }
        cur = atomic_load_explicit(st, memory_order_relaxed);
        if (settled && (cur == FS_KEPT || cur == FS_RETIRED)) pass_from = i + 1;
        else settled = false;
    }
    RPERF_EPOCH_SECTION_END();
    ck_epoch_end(&rperf__epoch_namer, &sec);
    atomic_store_explicit(&churning, judged > 0, memory_order_relaxed);
    if (asked) {
        size_t prev = atomic_load(&retire_low);
        while (low < prev && !atomic_compare_exchange_weak(&retire_low, &prev, low)) {
        }
        atomic_store_explicit(&retire_due, true, memory_order_release);
        rperf__worker_drain_soon();
    }
    return asked;
}

/* worker: carry out the retirements the pass requested. */
size_t rperf__frames_retire_due(void)
{
    if (!table_ready || !atomic_exchange_explicit(&retire_due, false, memory_order_acquire)) return 0;
    size_t low = atomic_exchange(&retire_low, SIZE_MAX);
    if (low < worker_retire_from) worker_retire_from = low;
    size_t n = atomic_load_explicit(&count, memory_order_relaxed);
    key_array_t *a = atomic_load_explicit(&keys, memory_order_relaxed);
    size_t done = 0;
    for (size_t i = worker_retire_from; i < n; i++) {
        _Atomic uint8_t *st = state_at(i);
        if (!st) break;
        uint8_t cur = FS_RETIRING;
        if (atomic_load_explicit(st, memory_order_relaxed) != FS_RETIRING) continue;
        rperf_frame_t v = a->keys[i];
        ck_ht_hash_t h;
        ck_ht_entry_t e;
        ck_ht_hash_direct(&h, &table, v);
        ck_ht_entry_key_set_direct(&e, v);
        ck_ht_remove_spmc(&table, h, &e);
        struct memo_entry *m = memo_at(v);
        if (m->v == v) m->v = 0;
        /* out of the lookup before the marker may let the object go */
        if (atomic_compare_exchange_strong_explicit(st, &cur, FS_RETIRED, memory_order_release,
                                                    memory_order_relaxed))
            done++;
    }
    worker_retire_from = n;
    return done;
}
