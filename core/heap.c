/*
 * heap.c — allocation sampling and the live heap.
 *
 * Owns: the countdown that picks the sampled allocations (each allocation
 * is sampled with probability 1/interval, independently: geometric gaps of
 * mean `interval`, so a sample stands for exactly `interval` allocations
 * in expectation and every estimate is unbiased); the tracker of sampled
 * objects that may still be alive (slots found by address through an
 * open-addressing index with a bloom filter in front); and the allocation
 * table: (stack, class, thread, label set) -> allocated objects and bytes,
 * with the objects and bytes of its tracked objects still alive, computed
 * when a window closes (rperf_heap_settle).
 *
 * A sampled allocation travels as a ring record of its thread (type
 * RPERF_SAMPLE_ALLOC: the class as the leaf word, then the stack), so its
 * frames and class are kept alive and interned exactly as a time sample's
 * frames; the record carries the tracker slot's token, and the worker links
 * the slot to the table entry it adds the record to.
 *
 * An object's death is learned from the host's free hook
 * (rperf_alloc_freed: Ruby's FREEOBJ event, for every object swept; the
 * bloom filter makes it one bit for an untracked address); a new object
 * at a tracked address also means the tracked one was freed (every
 * allocation passes rperf_alloc_seen); and a window's close asks the host
 * whether each tracked object is still the one that was sampled. Where
 * frees may have gone unreported (a GC whose marking the host did not
 * see, or sweeps in a Ractor without the hook), every object tracked then
 * becomes unverified: nothing reads it (compaction does not follow it)
 * until a settle has the host check its address first.
 *
 * Contexts:
 *  - allocation hook (own: the allocating Ruby thread, holding its GVL;
 *    Ruby serializes the calls: one Ractor's by its GVL, several Ractors'
 *    by its VM lock; other Ractors' hooks also hold `mu`, below):
 *    rperf_alloc_seen, rperf_alloc_record. No Ruby API (the host's capture
 *    only), may malloc.
 *  - free hook (inside GC, sweeping: serialized with the allocation hooks
 *    by the same locks; other Ractors' hooks hold `mu`): rperf_alloc_freed.
 *    No allocation.
 *  - worker, or a GVL thread while the worker is parked: rperf__heap_add.
 *  - the main Ractor's GVL held (so no hook of that Ractor runs), holding
 *    `mu` (so none of another), worker parked or joined: rperf_heap_settle,
 *    rperf__heap_clear_*, rperf__heap_init/destroy; rperf_heap_stats and
 *    rperf_result_each_alloc read what only those and the worker write.
 *  - inside GC (world stopped: no hook runs; no allocation):
 *    rperf_heap_gc_marked at the end of marking, rperf_heap_relocate in
 *    compaction.
 */
#include "core_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BITS 12u
#define CHUNK_SLOTS (1u << CHUNK_BITS)        /* 4096 slots per chunk */
#define MAX_CHUNKS 4096u                      /* 16 Mi tracked objects at most */
#define GEN_MASK 0x3fffffffu                  /* the token fits a tagged ring word */

typedef struct heap_slot {
    uintptr_t obj;              /* 0: free */
    uintptr_t klass;            /* class at allocation, 0 none */
    /* gen << 32 | (entry + 1); entry part 0: not aggregated yet. Written
     * by the hook (allocate, retire) and the worker (link, CAS). */
    _Atomic uint64_t link;
    uint32_t bytes;             /* the object's slot size */
    uint32_t next_free;         /* index + 1 of the next free slot */
    /* H.epoch when it was last known alive: another value means a GC
     * whose frees may have gone unreported ran since, so its page may be
     * gone and nothing reads it until a settle checks it */
    uint32_t epoch;
    /* the marking seen last when it was allocated (H.seen_gc, low 32
     * bits): it is in use only once a later marking has seen it live */
    uint32_t born;
    uint8_t rtype;              /* the host's type code */
    /* allocated in another Ractor: its size is never read from the main
     * Ractor (its Ractor may be changing it) */
    uint8_t foreign;
} heap_slot_t;

typedef struct heap_entry {
    uint64_t hash;
    uint64_t off;               /* into the id pool */
    uint32_t depth;
    uint32_t thread_seq;
    uint32_t label_set_id;
    uint32_t class_id;          /* frame id of the class, RPERF_ALLOC_NO_CLASS */
    uint32_t rtype;
    int64_t alloc_objects, alloc_bytes;
    int64_t inuse_objects, inuse_bytes;
    /* its tracked objects alive at the last settle, those allocated since
     * the last GC included (not in use yet, but kept across a clear) */
    uint32_t tracked;
} heap_entry_t;

static struct {
    bool on;
    int64_t interval;
    /* hook side */
    int64_t countdown;
    uint64_t rng;
    heap_slot_t *_Atomic chunks[MAX_CHUNKS];
    uint32_t nchunks;
    uint32_t top;               /* slots ever handed out */
    uint32_t free_head;         /* index + 1 */
    uint32_t used;              /* slots holding an object */
    uint32_t *index;            /* open addressing: tag and slot index (index_find), 0 empty */
    size_t index_cap;           /* power of two */
    uint64_t *bloom;
    size_t bloom_bits;          /* power of two */
    /* index entries deleted since the filter was last built: their bits
     * stay set (a bloom filter cannot unset one) and send allocations at
     * those addresses to the index for nothing (bloom_refresh) */
    size_t bloom_stale;
    /* bumped by a GC whose frees may have gone unreported: a slot of an
     * older epoch is unverified (heap_slot_t.epoch) */
    uint32_t epoch;
    uint64_t seen_gc;           /* the host's GC count at the last marking seen */
    _Atomic uint64_t sampled;   /* this window */
    _Atomic uint64_t dropped;   /* sampled but not tracked or recorded */
    /* worker side */
    uint32_t *pool;
    size_t pool_len, pool_cap;
    heap_entry_t *entries;
    size_t n, cap;
    uint32_t *eindex;           /* entry + 1 */
    size_t eindex_cap;
    /* clear: the kept entries' frame values between collect and restore */
    rperf_frame_t *kept;
    size_t kept_len;
    uint64_t live;              /* tracked objects alive at the last settle */
} H;

/* The allocation hooks of other Ractors run under Ruby's VM lock,
 * serialized with the main Ractor's, but not with what holds only the main
 * Ractor's GVL (a close, a clear, a release), so those and the other
 * Ractors' hooks take `mu` (rperf_alloc_lock). The main Ractor's hook
 * needs not: the VM lock orders it with theirs, its GVL with the rest.
 * Outside H: a release clears H while a hook may wait on it. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- small helpers --------------------------------------------------------- */

static uint64_t addr_hash(uintptr_t a)
{
    uint64_t h = (uint64_t)(a >> 3) * 0x9e3779b97f4a7c15ULL;
    return h ^ (h >> 29);
}

static uint64_t next_rng(void)
{
    uint64_t x = H.rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    H.rng = x;
    return x;
}

/* allocations until the next sampled one: geometric, mean H.interval */
static int64_t draw_gap(void)
{
    if (H.interval <= 1) return 1;
    double u = (double)(next_rng() >> 11) * 0x1.0p-53;       /* [0, 1) */
    double g = floor(log1p(-u) / log1p(-1.0 / (double)H.interval));
    if (!(g < 1e15)) g = 1e15;
    return 1 + (int64_t)g;
}

static heap_slot_t *slot_at(uint32_t i)
{
    heap_slot_t *c = atomic_load_explicit(&H.chunks[i >> CHUNK_BITS], memory_order_acquire);
    return c ? &c[i & (CHUNK_SLOTS - 1)] : NULL;
}

static bool bloom_test(uintptr_t a)
{
    uint64_t b = addr_hash(a) >> 7;
    b &= H.bloom_bits - 1;
    return (H.bloom[b >> 6] >> (b & 63)) & 1u;
}

static void bloom_set(uintptr_t a)
{
    uint64_t b = (addr_hash(a) >> 7) & (H.bloom_bits - 1);
    H.bloom[b >> 6] |= 1ULL << (b & 63);
}

/* ---- the address index (hook side) ----------------------------------------- */

/* An index entry: the slot's index in the low 24 bits (MAX_CHUNKS *
 * CHUNK_SLOTS = 2^24 slots) and 8 bits of the address's hash above, never
 * 0 (0: an empty entry). A probe compares the tags first and reads a slot
 * (a cache miss in a large tracker) only on a match: 1 in 255 otherwise. */
#define INDEX_SLOT_BITS 24u
_Static_assert(MAX_CHUNKS * CHUNK_SLOTS <= (1u << INDEX_SLOT_BITS), "slot index fits an entry");

static uint32_t index_tag(uint64_t h) { return (uint32_t)((h >> 56) % 255u + 1u); }
static uint32_t entry_slot(uint32_t v) { return v & ((1u << INDEX_SLOT_BITS) - 1u); }

static size_t index_find(uintptr_t a)
{
    size_t mask = H.index_cap - 1;
    uint64_t h = addr_hash(a);
    uint32_t tag = index_tag(h);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t v = H.index[i];
        if (!v || ((v >> INDEX_SLOT_BITS) == tag && slot_at(entry_slot(v))->obj == a)) return i;
    }
}

static void index_put(uint32_t si)
{
    uintptr_t a = slot_at(si)->obj;
    H.index[index_find(a)] = index_tag(addr_hash(a)) << INDEX_SLOT_BITS | si;
    bloom_set(a);
}

/* Rebuild the index and the bloom filter at a capacity fit for `want`
 * entries (load <= 3/4: linear probing stays short, and the index costs
 * 5-11 bytes per tracked object; 8 bloom bits per index slot). No
 * allocation when the sizes stay (a relocation inside GC). */
static bool index_rebuild(size_t want)
{
    size_t cap = 1024;
    while (cap * 3 < want * 4) cap *= 2;
    if (cap < H.index_cap) cap = H.index_cap;     /* never shrinks */
    size_t bits = cap * 8;
    if (cap != H.index_cap) {
        uint32_t *ni = rperf__calloc(cap, sizeof(uint32_t));
        uint64_t *nb = rperf__calloc(bits / 64, sizeof(uint64_t));
        if (!ni || !nb) {
            if (ni) rperf__free(ni, cap * sizeof(uint32_t));
            if (nb) rperf__free(nb, bits / 8);
            return false;
        }
        if (H.index) rperf__free(H.index, H.index_cap * sizeof(uint32_t));
        if (H.bloom) rperf__free(H.bloom, H.bloom_bits / 8);
        H.index = ni;
        H.index_cap = cap;
        H.bloom = nb;
        H.bloom_bits = bits;
    } else {
        memset(H.index, 0, cap * sizeof(uint32_t));
        memset(H.bloom, 0, bits / 8);
    }
    for (uint32_t i = 0; i < H.top; i++)
        if (slot_at(i)->obj) index_put(i);
    H.bloom_stale = 0;
    return true;
}

/* The filter built again from the index alone, once the stale bits
 * outnumber the live ones and a quarter of the index: sampled garbage
 * retired as it is freed would otherwise set bit after bit until every
 * allocation and free probes the index. O(index), amortised over the
 * deletions that made it due; no allocation (it runs inside GC). */
static void bloom_refresh(void)
{
    if (H.bloom_stale < H.index_cap / 4 || H.bloom_stale <= H.used) return;
    memset(H.bloom, 0, H.bloom_bits / 8);
    for (size_t i = 0; i < H.index_cap; i++)
        if (H.index[i]) bloom_set(slot_at(entry_slot(H.index[i]))->obj);
    H.bloom_stale = 0;
}

/* backward-shift deletion keeps linear probing free of tombstones */
static void index_del(size_t i)
{
    size_t mask = H.index_cap - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint32_t v = H.index[j];
        if (!v) break;
        size_t home = addr_hash(slot_at(entry_slot(v))->obj) & mask;
        /* move v back to i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        H.index[i] = v;
        i = j;
    }
    H.index[i] = 0;
    H.bloom_stale++;
}

/* hook side (or GVL held, hooks quiet): the object in slot si is gone */
static void slot_retire(uint32_t si, bool indexed)
{
    heap_slot_t *s = slot_at(si);
    if (indexed) {
        size_t i = index_find(s->obj);
        if (H.index[i]) index_del(i);
    }
    uint64_t l = atomic_load_explicit(&s->link, memory_order_relaxed);
    uint32_t gen = (uint32_t)((l >> 32) + 1) & GEN_MASK;
    atomic_store_explicit(&s->link, (uint64_t)gen << 32, memory_order_release);
    s->obj = 0;
    s->next_free = H.free_head;
    H.free_head = si + 1;
    H.used--;
}

static bool slot_alloc(uint32_t *out)
{
    if (H.free_head) {
        *out = H.free_head - 1;
        H.free_head = slot_at(*out)->next_free;
        return true;
    }
    if (H.top == H.nchunks * CHUNK_SLOTS) {
        if (H.nchunks == MAX_CHUNKS) return false;
        heap_slot_t *c = rperf__calloc(CHUNK_SLOTS, sizeof(heap_slot_t));
        if (!c) return false;
        atomic_store_explicit(&H.chunks[H.nchunks], c, memory_order_release);
        H.nchunks++;
    }
    *out = H.top++;
    return true;
}

/* ---- the allocation hook ----------------------------------------------------- */

bool rperf_alloc_seen(uintptr_t obj)
{
    if (!H.on) return false;
    if (H.used && bloom_test(obj)) {
        size_t i = index_find(obj);
        if (H.index[i]) slot_retire(entry_slot(H.index[i]), true);   /* freed, slot reused */
    }
    if (--H.countdown > 0) return false;
    H.countdown = draw_gap();
    return true;
}

void rperf_alloc_freed(uintptr_t obj)
{
    if (!H.on || !H.used || !bloom_test(obj)) return;
    size_t i = index_find(obj);
    if (!H.index[i]) return;
    slot_retire(entry_slot(H.index[i]), true);
    bloom_refresh();
}

void rperf_alloc_lock(void) { pthread_mutex_lock(&mu); }
void rperf_alloc_unlock(void) { pthread_mutex_unlock(&mu); }
/* in fork()'s child: another Ractor's thread may have held it */
void rperf__heap_fork_child(void) { pthread_mutex_init(&mu, NULL); }

void rperf_alloc_record(uintptr_t obj, uintptr_t klass, uint32_t rtype, uint32_t bytes)
{
    if (!H.on || !atomic_load_explicit(&rperf__engine.running, memory_order_relaxed)) return;
    rperf_thread_t *pt = rperf_current_thread_sigsafe();
    if (!pt) return;
    /* a deferred run: only allocations inside profile blocks */
    if (rperf__engine.cfg.deferred && !rperf_thread_profiled(pt)) return;
    atomic_fetch_add_explicit(&H.sampled, 1, memory_order_relaxed);
    if ((H.used + 1) * 4 > H.index_cap * 3 && !index_rebuild(H.used + 1)) goto drop;
    uint32_t si;
    if (!slot_alloc(&si)) goto drop;
    heap_slot_t *s = slot_at(si);
    s->obj = obj;
    s->klass = klass;
    s->bytes = bytes;
    s->rtype = (uint8_t)rtype;
    s->epoch = H.epoch;
    s->born = (uint32_t)H.seen_gc;
    s->foreign = rperf_thread_ractor(pt) > 1;   /* 0: not known, never another Ractor with a hook */
    H.used++;
    index_put(si);
    uint64_t gen = atomic_load_explicit(&s->link, memory_order_relaxed) >> 32;
    atomic_store_explicit(&s->link, gen << 32, memory_order_relaxed);

    /* the class and the stack together fit a drain's RPERF_MAX_DEPTH ids */
    rperf_frame_t frames[RPERF_MAX_DEPTH];
    int lead = klass ? 1 : 0;
    frames[0] = klass;
    int depth = rperf__engine.host.capture(frames + lead, RPERF_MAX_DEPTH - lead);
    if (depth < 0) depth = 0;
    int64_t token = (int64_t)(gen << 32 | si);
    int64_t weight = (int64_t)bytes | (int64_t)rtype << 32;
    if (rperf__ring_push_alloc(pt, klass ? RPERF_SAMPLE_ALLOC : RPERF_SAMPLE_ALLOC_BARE, weight,
                               token, frames, depth + lead))
        return;
    slot_retire(si, true);
drop:
    atomic_fetch_add_explicit(&H.dropped, 1, memory_order_relaxed);
}

/* ---- the allocation table (worker) -------------------------------------------- */

static uint64_t key_hash(const uint32_t *ids, uint32_t depth, uint32_t seq, uint32_t label,
                         uint32_t class_id, uint32_t rtype)
{
    uint64_t h = 1469598103934665603ULL;
    h = (h ^ depth) * 1099511628211ULL;
    h = (h ^ seq) * 1099511628211ULL;
    h = (h ^ label) * 1099511628211ULL;
    h = (h ^ class_id) * 1099511628211ULL;
    h = (h ^ rtype) * 1099511628211ULL;
    for (uint32_t i = 0; i < depth; i++) h = (h ^ ids[i]) * 1099511628211ULL;
    return h ? h : 1;
}

static int eindex_rebuild(size_t ncap)
{
    return rperf__hash_index_build(&H.eindex, &H.eindex_cap, ncap, H.entries, H.n, sizeof(heap_entry_t));
}

/* the entry of this key, added when new; -1 out of memory */
static long entry_of(const uint32_t *ids, uint32_t depth, uint32_t seq, uint32_t label,
                     uint32_t class_id, uint32_t rtype)
{
    if ((H.n + 1) * 2 > H.eindex_cap && eindex_rebuild(H.eindex_cap ? H.eindex_cap * 2 : 1024) < 0)
        return -1;
    uint64_t h = key_hash(ids, depth, seq, label, class_id, rtype);
    size_t mask = H.eindex_cap - 1;
    size_t j = h & mask;
    for (; H.eindex[j]; j = (j + 1) & mask) {
        heap_entry_t *e = &H.entries[H.eindex[j] - 1];
        if (e->hash == h && e->depth == depth && e->thread_seq == seq && e->label_set_id == label &&
            e->class_id == class_id && e->rtype == rtype &&
            (depth == 0 || memcmp(H.pool + e->off, ids, depth * sizeof(uint32_t)) == 0))
            return (long)(H.eindex[j] - 1);
    }
    if (rperf__grow((void **)&H.entries, &H.cap, sizeof(heap_entry_t), H.n + 1) < 0 ||
        rperf__grow((void **)&H.pool, &H.pool_cap, sizeof(uint32_t), H.pool_len + depth) < 0)
        return -1;
    heap_entry_t *e = &H.entries[H.n];
    memset(e, 0, sizeof(*e));
    e->hash = h;
    e->off = H.pool_len;
    e->depth = depth;
    e->thread_seq = seq;
    e->label_set_id = label;
    e->class_id = class_id;
    e->rtype = rtype;
    if (depth) memcpy(H.pool + H.pool_len, ids, depth * sizeof(uint32_t));
    H.pool_len += depth;
    H.eindex[j] = (uint32_t)H.n + 1;
    return (long)H.n++;
}

int rperf__heap_add(uint32_t thread_seq, const rperf_decoded_t *d, const uint32_t *ids)
{
    bool has_class = d->type == RPERF_SAMPLE_ALLOC && d->depth > 0;
    uint32_t class_id = has_class ? ids[0] : RPERF_ALLOC_NO_CLASS;
    uint32_t bytes = (uint32_t)(d->weight & 0xffffffff);
    uint32_t rtype = has_class ? 0 : (uint32_t)(d->weight >> 32);
    uint64_t token = (uint64_t)d->mono_ns;
    uint32_t si = (uint32_t)(token & 0xffffffff);
    uint64_t gen = token >> 32;
    long e = entry_of(ids + has_class, d->depth - has_class, thread_seq, d->label_set_id,
                      class_id, rtype);
    heap_slot_t *s = si < H.nchunks * CHUNK_SLOTS ? slot_at(si) : NULL;
    if (e < 0) {
        /* out of memory: the sample is lost; its object stays unlinked and
         * is dropped at the next settle */
        return -1;
    }
    H.entries[e].alloc_objects += H.interval;
    H.entries[e].alloc_bytes += H.interval * (int64_t)bytes;
    if (s) {
        uint64_t want = gen << 32;
        /* fails when the object is gone already (the slot retired) */
        atomic_compare_exchange_strong_explicit(&s->link, &want, gen << 32 | (uint64_t)(e + 1),
                                                memory_order_acq_rel, memory_order_relaxed);
    }
    return 0;
}

/* ---- lifecycle and results (GVL held, hooks quiet, worker parked/joined) ------- */

static void free_entries(void)
{
    if (H.pool) rperf__free(H.pool, H.pool_cap * sizeof(uint32_t));
    if (H.entries) rperf__free(H.entries, H.cap * sizeof(heap_entry_t));
    if (H.eindex) rperf__free(H.eindex, H.eindex_cap * sizeof(uint32_t));
    H.pool = NULL;
    H.entries = NULL;
    H.eindex = NULL;
    H.pool_len = H.pool_cap = H.n = H.cap = H.eindex_cap = 0;
}

void rperf__heap_destroy(void)
{
    pthread_mutex_lock(&mu);
    free_entries();
    for (uint32_t i = 0; i < H.nchunks; i++)
        rperf__free(atomic_load_explicit(&H.chunks[i], memory_order_relaxed),
                    CHUNK_SLOTS * sizeof(heap_slot_t));
    if (H.index) rperf__free(H.index, H.index_cap * sizeof(uint32_t));
    if (H.bloom) rperf__free(H.bloom, H.bloom_bits / 8);
    if (H.kept) free(H.kept);
    memset(&H, 0, sizeof(H));
    pthread_mutex_unlock(&mu);
}

int rperf__heap_init(uint32_t interval)
{
    rperf__heap_destroy();
    if (!interval) return 0;
    H.interval = interval;
    H.rng = (uint64_t)rperf__mono_ns() * 0x9e3779b97f4a7c15ULL | 1;
    if (!index_rebuild(0)) return -1;
    H.countdown = draw_gap();
    H.on = true;
    return 0;
}

bool rperf_heap_enabled(void) { return H.on; }

void rperf_heap_settle(bool (*alive)(uintptr_t obj, uintptr_t klass, uint32_t rtype, bool verified),
                       size_t (*memsize)(uintptr_t obj))
{
    if (!H.on) return;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < H.n; i++) {
        H.entries[i].inuse_objects = H.entries[i].inuse_bytes = 0;
        H.entries[i].tracked = 0;
    }
    uint64_t live = 0;
    bool retired = false;
    for (uint32_t i = 0; i < H.top; i++) {
        heap_slot_t *s = slot_at(i);
        if (!s->obj) continue;
        uint64_t e = atomic_load_explicit(&s->link, memory_order_acquire) & 0xffffffff;
        if (e == 0 || e > H.n || !alive(s->obj, s->klass, s->rtype, s->epoch == H.epoch)) {
            slot_retire(i, false);
            retired = true;
            continue;
        }
        s->epoch = H.epoch;
        live++;
        heap_entry_t *en = &H.entries[e - 1];
        en->tracked++;
        /* In use as of the last GC, as Go's heap profiles: an object
         * allocated since the latest marking may already be garbage (the
         * next GC will tell), so it waits for that marking. */
        if (s->born == (uint32_t)H.seen_gc) continue;
        en->inuse_objects += H.interval;
        en->inuse_bytes += H.interval * (int64_t)(s->foreign ? s->bytes : memsize(s->obj));
    }
    H.live = live;
    if (retired) index_rebuild(H.used);
    pthread_mutex_unlock(&mu);
}

void rperf_heap_frees_unreported(void)
{
    if (H.on && H.used) H.epoch++;
}

void rperf_heap_gc_seen(uint64_t gc_count) { H.seen_gc = gc_count; }

/* Inside GC at the end of marking, before sweeping (and compaction). A
 * marking the host did not report before this one (a GC another Ractor
 * ran without the hooks) may have freed tracked objects unreported, and
 * so may sweeps the host cannot report: the objects tracked now become
 * unverified (one step of the epoch, no pass over the slots). */
void rperf_heap_gc_marked(uint64_t gc_count, bool unseen_frees)
{
    if (!H.on) return;
    bool missed = H.seen_gc && gc_count != H.seen_gc + 1;
    H.seen_gc = gc_count;
    if ((missed || unseen_frees) && H.used) H.epoch++;
}

void rperf_heap_relocate(uint64_t gc_count, uintptr_t (*location)(uintptr_t))
{
    /* a compaction whose marking was not seen may have dead objects here */
    if (!H.on || gc_count != H.seen_gc) return;
    bool moved = false;
    for (uint32_t i = 0; i < H.top; i++) {
        heap_slot_t *s = slot_at(i);
        if (!s->obj || s->epoch != H.epoch) continue;
        uintptr_t o = location(s->obj);
        if (o != s->obj) {
            s->obj = o;
            moved = true;
        }
        if (s->klass) s->klass = location(s->klass);
    }
    /* at the same size (it never shrinks): in place, no allocation in GC */
    if (moved) index_rebuild(H.used);
}

void rperf_heap_stats(rperf_heap_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!H.on) return;
    out->interval = (uint32_t)H.interval;
    out->sampled = atomic_load(&H.sampled);
    out->dropped = atomic_load(&H.dropped);
    out->live = H.live;
    out->as_of_gc = H.seen_gc;
    out->tracked = H.used;
}

int rperf_result_each_alloc(rperf_alloc_cb cb, void *ctx)
{
    for (size_t i = 0; i < H.n; i++) {
        const heap_entry_t *e = &H.entries[i];
        if (!e->alloc_objects && !e->inuse_objects) continue;
        rperf_result_alloc_t r = {
            .frames = H.pool + e->off, .depth = e->depth,
            .class_id = e->class_id, .rtype = e->rtype,
            .thread_seq = e->thread_seq, .label_set_id = e->label_set_id,
            .alloc_objects = e->alloc_objects, .alloc_bytes = e->alloc_bytes,
            .inuse_objects = e->inuse_objects, .inuse_bytes = e->inuse_bytes,
        };
        int rc = cb(&r, ctx);
        if (rc) return rc;
    }
    return 0;
}

/* Windows over the allocation table (its entries keep their index until
 * the table's generation changes, as the aggregation's): four values per
 * entry (alloc_objects, alloc_bytes, inuse_objects, inuse_bytes). */
size_t rperf_result_alloc_values(int64_t *out, size_t cap)
{
    for (size_t i = 0; i < H.n && i < cap; i++) {
        const heap_entry_t *e = &H.entries[i];
        out[4 * i] = e->alloc_objects;
        out[4 * i + 1] = e->alloc_bytes;
        out[4 * i + 2] = e->inuse_objects;
        out[4 * i + 3] = e->inuse_bytes;
    }
    return H.n;
}

int rperf_result_each_alloc_since(const int64_t *base, size_t nbase, rperf_alloc_cb cb, void *ctx)
{
    static const int64_t zero[4];
    for (size_t i = 0; i < H.n; i++) {
        const heap_entry_t *e = &H.entries[i];
        const int64_t *b = i < nbase ? base + 4 * i : zero;
        rperf_result_alloc_t r = {
            .frames = H.pool + e->off, .depth = e->depth,
            .class_id = e->class_id, .rtype = e->rtype,
            .thread_seq = e->thread_seq, .label_set_id = e->label_set_id,
            .alloc_objects = e->alloc_objects - b[0], .alloc_bytes = e->alloc_bytes - b[1],
            .inuse_objects = e->inuse_objects - b[2], .inuse_bytes = e->inuse_bytes - b[3],
        };
        if (!r.alloc_objects && !r.inuse_objects && !r.inuse_bytes) continue;
        int rc = cb(&r, ctx);
        if (rc) return rc;
    }
    return 0;
}

static void restore_locked(void);

/* A window's clear: allocation counts start again, the live heap goes on.
 * collect runs before the frame table is cleared and keeps the frame
 * values of the entries with live objects (settled at the window's close);
 * restore, after it, interns them anew into a table holding only those
 * entries (in-use values kept, allocation counts zero) and relinks the
 * slots. Nothing in between allocates a Ruby object, so no GC can run
 * while those values are not pinned. */
void rperf__heap_clear_collect(void)
{
    atomic_store(&H.sampled, 0);
    atomic_store(&H.dropped, 0);
    if (!H.on) return;
    /* held until restore: no other Ractor's hook tracks meanwhile */
    pthread_mutex_lock(&mu);
    size_t words = 0;
    for (size_t i = 0; i < H.n; i++)
        if (H.entries[i].tracked) words += 2 + H.entries[i].depth;
    H.kept = words ? malloc(words * sizeof(rperf_frame_t)) : NULL;
    H.kept_len = 0;
    if (!H.kept) return;
    for (size_t i = 0; i < H.n; i++) {
        const heap_entry_t *e = &H.entries[i];
        if (!e->tracked) continue;
        H.kept[H.kept_len++] = (rperf_frame_t)i;
        H.kept[H.kept_len++] = e->class_id == RPERF_ALLOC_NO_CLASS
                                   ? 0 : rperf__frames_at(e->class_id - RPERF_SYNTHETIC_FRAMES);
        for (uint32_t k = 0; k < e->depth; k++) {
            uint32_t id = H.pool[e->off + k];
            H.kept[H.kept_len++] = id < RPERF_SYNTHETIC_FRAMES ? (rperf_frame_t)id
                                                               : rperf__frames_at(id - RPERF_SYNTHETIC_FRAMES);
        }
    }
}

void rperf__heap_clear_restore(void)
{
    if (!H.on) return;
    restore_locked();
    pthread_mutex_unlock(&mu);
}

static void restore_locked(void)
{
    heap_entry_t *old = H.entries;
    uint32_t *old_pool = H.pool;
    size_t old_n = H.n, old_cap = H.cap, old_pool_cap = H.pool_cap;
    H.entries = NULL;
    H.pool = NULL;
    H.n = H.cap = H.pool_len = H.pool_cap = 0;
    if (H.eindex) rperf__free(H.eindex, H.eindex_cap * sizeof(uint32_t));
    H.eindex = NULL;
    H.eindex_cap = 0;
    /* old entry -> new entry + 1 (0: dropped) */
    uint32_t *map = old_n ? calloc(old_n, sizeof(uint32_t)) : NULL;
    uint32_t ids[RPERF_MAX_DEPTH];
    for (size_t k = 0; map && k < H.kept_len;) {
        size_t oi = (size_t)H.kept[k++];
        const heap_entry_t *oe = &old[oi];
        rperf_frame_t cv = H.kept[k++];
        uint32_t class_id = cv ? rperf__frames_intern(cv) : RPERF_ALLOC_NO_CLASS;
        for (uint32_t j = 0; j < oe->depth; j++, k++)
            ids[j] = H.kept[k] < RPERF_SYNTHETIC_FRAMES ? (uint32_t)H.kept[k]
                                                        : rperf__frames_intern(H.kept[k]);
        long ne = entry_of(ids, oe->depth, oe->thread_seq, oe->label_set_id, class_id, oe->rtype);
        if (ne < 0) continue;
        H.entries[ne].inuse_objects += oe->inuse_objects;
        H.entries[ne].inuse_bytes += oe->inuse_bytes;
        H.entries[ne].tracked += oe->tracked;
        map[oi] = (uint32_t)ne + 1;
    }
    rperf__inflight = 0;
    for (uint32_t i = 0; i < H.top; i++) {
        heap_slot_t *s = slot_at(i);
        if (!s->obj) continue;
        uint64_t l = atomic_load_explicit(&s->link, memory_order_relaxed);
        uint64_t e = l & 0xffffffff;
        uint32_t ne = map && e && e <= old_n ? map[e - 1] : 0;
        if (!ne) {
            slot_retire(i, true);     /* its entry could not be kept */
            continue;
        }
        atomic_store_explicit(&s->link, (l & ~0xffffffffULL) | ne, memory_order_relaxed);
    }
    free(map);
    free(H.kept);
    H.kept = NULL;
    H.kept_len = 0;
    if (old) rperf__free(old, old_cap * sizeof(heap_entry_t));
    if (old_pool) rperf__free(old_pool, old_pool_cap * sizeof(uint32_t));
}

size_t rperf__heap_memory(void)
{
    return H.nchunks * CHUNK_SLOTS * sizeof(heap_slot_t) + H.index_cap * sizeof(uint32_t) +
           H.bloom_bits / 8 + H.cap * sizeof(heap_entry_t) + H.pool_cap * sizeof(uint32_t) +
           H.eindex_cap * sizeof(uint32_t);
}
