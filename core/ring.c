/*
 * ring.c — the per-thread sample ring: one ck_ring SPSC of machine words per
 * Ruby thread. Producer: the thread itself (own context: its sampling job,
 * its RESUMED/SUSPENDED hooks, its GC hooks — never a signal handler).
 * Consumer: the aggregation worker (or a GVL thread while the worker is
 * parked). The GC mark function reads live regions concurrently (lock-free).
 *
 * Encoding of one sample (3 + depth words; a pair 4 + depth):
 *   w0 = label_set_id << 32 | depth << 16 | type << 4 | pair << 1 | 1
 *   w1 = weight << 1 | 1           w2 = monotonic ns << 1 | 1
 *   [w3 = second weight << 1 | 1, when pair is set]
 *   depth frame words (untagged VALUEs), leaf first.
 * A pair is two samples on one stack, of `type` and `type + 1` (GVL
 * blocked and wait, GC marking and sweeping): a block recorded at RESUMED
 * has both parts, and one record of 4 + depth words instead of two of
 * 3 + depth nearly halves what the thread writes into its ring (the lines
 * the worker read last, on the other CPU) at every long block: on the
 * `io` workload a thread records one every ~3 GVL switches.
 * A thread's first segment is small (RPERF_RING_FIRST_SLOTS words, from the
 * heap): a thread that records a sample or two (its first turn's blocked
 * time, then parked; a short connection thread) costs no mapping, page
 * fault or unmapping, which on a VM with many threads cost more than the
 * samples (docs/performance.md). The first overflow chains a segment of the
 * configured size (pages).
 * A full ring never blocks. It grows instead: the producer chains a segment
 * 4x larger (up to RPERF_RING_MAX_SLOTS words; then more of that size, up to
 * RPERF_RING_MAX_CHAIN of them in a row) and writes there, the
 * consumer moves on once the old one is drained and frees it through the
 * epoch. So idle threads keep the small default while a busy thread whose
 * worker is slow to get a CPU keeps its samples. At the limit the sample is
 * dropped and counted, and the caller keeps its weight pending (it does not
 * advance its clocks). After a burst the ring shrinks back: once the
 * consumer has caught up (it drains the producer's large segment, which
 * holds less than a quarter of the initial size), the producer chains a segment of the
 * initial size and the large one is freed when drained, so a thread keeps
 * the initial 32 KiB at rest.
 *
 * The memory-ordering contract with the mark function is in
 * docs/architecture.md ("GC safety"): a frame value is always in at least one
 * of {live ring region, rperf__inflight, frame table keys}, and the marker
 * reads them in that order.
 */
#include "core_internal.h"

#include <string.h>

#define TAG(x) (((uintptr_t)(x) << 1) | 1u)
#define UNTAG(x) ((int64_t)((x) >> 1))

/* Segments up to RPERF_RING_FIRST_SLOTS words come from the heap (whole
 * cache lines), larger ones are page blocks (alloc.c): the size alone says
 * which. */
static ck_ring_buffer_t *buf_alloc(uint32_t slots)
{
    size_t bytes = (size_t)slots * sizeof(ck_ring_buffer_t);
    return slots <= RPERF_RING_FIRST_SLOTS ? rperf__calloc_lines(bytes) : rperf__alloc_pages(bytes);
}

static void buf_free(ck_ring_buffer_t *buf, uint32_t slots)
{
    size_t bytes = (size_t)slots * sizeof(ck_ring_buffer_t);
    if (slots <= RPERF_RING_FIRST_SLOTS) rperf__free_lines(buf, bytes);
    else rperf__free_pages(buf, bytes);
}

/* The segment is line-aligned: its consumer head, producer tail and
 * read-only fields each keep a cache line of their own (ck_ring pads them
 * apart), not one shared with a neighbouring allocation another thread
 * writes. */
static rperf_ring_seg_t *seg_new(uint32_t slots)
{
    rperf_ring_seg_t *seg = rperf__calloc_lines(sizeof(*seg));
    if (!seg) return NULL;
    seg->buf = buf_alloc(slots);
    if (!seg->buf) {
        rperf__free_lines(seg, sizeof(*seg));
        return NULL;
    }
    seg->slots = slots;
    ck_ring_init(&seg->ring, slots);
    return seg;
}

static void seg_free(rperf_ring_seg_t *seg)
{
    buf_free(seg->buf, seg->slots);
    rperf__free_lines(seg, sizeof(*seg));
}

static void seg_free_cb(ck_epoch_entry_t *e)
{
    RPERF_EPOCH_RECLAIM();
    seg_free((rperf_ring_seg_t *)((char *)e - offsetof(rperf_ring_seg_t, epoch_entry)));
}

/* own: `seg` (empty, or NULL) becomes the producer's segment; the producer
 * keeps what it needs of it in the thread's sample line (core_internal.h)
 * and only stores to the segment itself. */
static void prod_set(rperf_thread_t *pt, rperf_ring_seg_t *seg)
{
    if (!seg) pt->prod_maxed = 0;
    pt->prod = seg;
    pt->prod_buf = seg ? seg->buf : NULL;
    pt->prod_tail = 0;                       /* ck_ring_init: both ends at 0 */
    pt->prod_mask = seg ? seg->slots - 1 : 0;
    /* an enlarged segment: see push */
    pt->prod_seen = seg && seg->slots > pt->ring_slots0 ? 0u - pt->prod_mask : 0;
}

/* No memory yet: the first push allocates the (small) first segment. A
 * thread that never records a sample (a short-lived thread that got no tick
 * and never waited long for the GVL) costs no ring at all. */
int rperf__ring_init(rperf_thread_t *pt, uint32_t slots)
{
    pt->ring_slots0 = slots;
    prod_set(pt, NULL);
    atomic_store_explicit(&pt->cons, NULL, memory_order_relaxed);
    return 0;
}

/* own: the first segment, published to the consumer and the marker
 * (release: its initialised ring before the pointer). NULL: out of memory. */
static rperf_ring_seg_t *ring_first(rperf_thread_t *pt)
{
    uint32_t slots = pt->ring_slots0 < RPERF_RING_FIRST_SLOTS ? pt->ring_slots0 : RPERF_RING_FIRST_SLOTS;
    rperf_ring_seg_t *seg = seg_new(slots);
    if (!seg) return NULL;
    prod_set(pt, seg);
    atomic_store_explicit(&pt->cons, seg, memory_order_release);
    return seg;
}

/* The thread is unreachable (no producer, consumer or marker left). */
void rperf__ring_free(rperf_thread_t *pt)
{
    rperf_ring_seg_t *seg = atomic_load_explicit(&pt->cons, memory_order_relaxed);
    while (seg) {
        rperf_ring_seg_t *next = atomic_load_explicit(&seg->next, memory_order_relaxed);
        seg_free(seg);
        seg = next;
    }
    prod_set(pt, NULL);
    atomic_store_explicit(&pt->cons, NULL, memory_order_relaxed);
}

/* own: the producer's segment cannot take `need` more words. Chain the
 * configured size after the small first segment, then segments 4x larger
 * (up to RPERF_RING_MAX_SLOTS), then more of that size (up to
 * RPERF_RING_MAX_CHAIN in a row, until the producer shrinks back) so a
 * busy thread whose worker is slow to get a CPU keeps its samples; NULL
 * when at the limit (or out of memory): the caller drops the sample. The last write to the old segment happens before
 * `next` is published (release). */
static rperf_ring_seg_t *ring_grow(rperf_thread_t *pt, unsigned need)
{
    uint32_t slots = pt->prod->slots;
    bool again = slots >= RPERF_RING_MAX_SLOTS;   /* another of the largest */
    if (again && pt->prod_maxed >= RPERF_RING_MAX_CHAIN) return NULL;
    if (again) slots = RPERF_RING_MAX_SLOTS;
    else if (slots < pt->ring_slots0) slots = pt->ring_slots0;
    else slots = slots * 4 > RPERF_RING_MAX_SLOTS ? RPERF_RING_MAX_SLOTS : slots * 4;
    while (need + 1 > slots && slots < RPERF_RING_MAX_SLOTS)
        slots = slots * 4 > RPERF_RING_MAX_SLOTS ? RPERF_RING_MAX_SLOTS : slots * 4;
    if (need + 1 > slots) return NULL;
    rperf_ring_seg_t *seg = seg_new(slots);
    if (!seg) return NULL;
    atomic_store_explicit(&pt->prod->next, seg, memory_order_release);
    prod_set(pt, seg);
    if (again) pt->prod_maxed++;
    return seg;
}

/* own: the producer's large segment is nearly empty: go back to a segment
 * of the initial size (the large one is drained and freed by the consumer).
 * Out of memory: keep writing to the large one. */
static rperf_ring_seg_t *ring_shrink(rperf_thread_t *pt)
{
    rperf_ring_seg_t *seg = seg_new(pt->ring_slots0);
    if (!seg) return pt->prod;
    atomic_store_explicit(&pt->prod->next, seg, memory_order_release);
    prod_set(pt, seg);
    pt->prod_maxed = 0;
    return seg;
}

/* own: the sample's header words and `depth` frame words into the
 * producer's segment, which has room for them (checked by the caller),
 * published at once: the words are stored as ck_ring_enqueue_spsc stores
 * one (its slot, then a store fence, then the producer tail), but the tail
 * moves once per sample instead of once per word. A 155-frame stack took
 * 158 enqueues, each reloading the consumer head (a line the worker writes
 * while it drains) and storing the tail (one it reads): ~0.5 us of the
 * job's ~1.5 us. The consumer (ck_ring dequeue, ring_drain) and the marker
 * (rperf__ring_mark) read the slots below the tail only, so they see whole
 * samples. Only stores reach the segment (a store that misses the cache
 * waits in the store buffer; a load would stall the thread). */
static void put_words(rperf_thread_t *pt, const uintptr_t *hdr, unsigned nhdr,
                      const rperf_frame_t *frames, unsigned depth)
{
    ck_ring_buffer_t *buf = pt->prod_buf;
    const unsigned mask = pt->prod_mask;
    unsigned p = pt->prod_tail;
    for (unsigned i = 0; i < nhdr; i++) ck_pr_store_ptr(&buf[p++ & mask].value, (void *)hdr[i]);
    for (unsigned i = 0; i < depth; i++) ck_pr_store_ptr(&buf[p++ & mask].value, (void *)frames[i]);
    ck_pr_fence_store();
    pt->prod_tail = p;
    ck_pr_store_uint(&pt->prod->ring.p_tail, p);
}

#define RING_PAIR 2u                         /* w0: a second weight follows */

/* own: one record of `weight` (and, when `pair`, `weight2` as type + 1).
 *
 * How full the segment is comes from an estimate first: the consumer's head
 * as last read (prod_seen; the head only moves on, so the estimate is an
 * upper bound). Only when the estimate would take the segment past half
 * full, where push decides anything (grow, ask for a drain), is the head
 * read; below that every decision is the same. So the head's line, which
 * the worker writes when it drains, is left alone, and so are the
 * segment's own fields: loading them at every push was half of a push's
 * time on the `io` workload (cache misses: a thread records long blocks at
 * every few switches, each time after running on the other CPU). In an
 * enlarged segment the estimate is kept at its most (tail - mask: never
 * below the head, the segment holds at most mask words), so every push
 * there reads the head (whether to shrink back). */
static bool push(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight, int64_t weight2,
                 bool pair, int64_t mono_ns, const rperf_frame_t *frames, int depth)
{
    if (!pt->prod && !ring_first(pt)) {
        atomic_fetch_add_explicit(&pt->dropped, 1, memory_order_relaxed);
        return false;
    }
    unsigned nhdr = pair ? 4u : 3u;
    unsigned need = nhdr + (unsigned)depth;
    unsigned used = pt->prod_tail - pt->prod_seen;
    bool checked = used + need > pt->prod_mask / 2;
    if (checked) {
        pt->prod_seen = ck_pr_load_uint(&pt->prod->ring.c_head);
        used = pt->prod_tail - pt->prod_seen;
        uint32_t initial = pt->ring_slots0;
        rperf_ring_seg_t *seg = pt->prod;
        /* shrink once the consumer works on this segment (older ones drained) */
        if (seg->slots > initial && used + need <= initial / 4 &&
            atomic_load_explicit(&pt->cons, memory_order_relaxed) == seg) {
            seg = ring_shrink(pt);
            used = pt->prod_tail - pt->prod_seen;
        }
        unsigned cap = pt->prod_mask;        /* ck_ring keeps one slot free */
        /* The small first segment is for threads that record a sample or
         * two: one that passes half full there moves on to the configured
         * size at once, instead of waking the worker every few samples. */
        bool first = seg->slots < initial;
        if (used + need > (first ? cap / 2 : cap)) {
            if (!first) rperf__worker_wake_for(pt, true);
            if (!ring_grow(pt, need)) {
                atomic_fetch_add_explicit(&pt->dropped, 1, memory_order_relaxed);
                return false;
            }
            used = 0;
        }
    }
    uint32_t label = atomic_load_explicit(&pt->label_set_id, memory_order_relaxed);
    uintptr_t w0 = ((uintptr_t)label << 32) | ((uintptr_t)depth << 16) |
                   ((uintptr_t)type << 4) | (pair ? RING_PAIR : 0u) | 1u;
    const uintptr_t hdr[4] = { w0, TAG(weight), TAG(mono_ns), TAG(weight2) };
    put_words(pt, hdr, nhdr, frames, (unsigned)depth);
    if (checked) {
        unsigned cap = pt->prod_mask;
        if (used + need > cap / 2) rperf__worker_wake_for(pt, used + need > cap / 4 * 3);
        if (pt->prod->slots > pt->ring_slots0) pt->prod_seen = pt->prod_tail - cap;
    }
    return true;
}

/* own */
bool rperf__ring_push(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                      int64_t mono_ns, const rperf_frame_t *frames, int depth)
{
    if (pt->muted) return true;   /* outside profile blocks: dropped as recorded */
    return push(pt, type, weight, 0, false, mono_ns, frames, depth);
}

/* own */
bool rperf__ring_push_alloc(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                            int64_t token, const rperf_frame_t *frames, int depth)
{
    return push(pt, type, weight, 0, false, token, frames, depth);
}

/* own */
bool rperf__ring_push_pair(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                           int64_t weight2, int64_t mono_ns, const rperf_frame_t *frames, int depth)
{
    if (pt->muted) return true;
    return push(pt, type, weight, weight2, true, mono_ns, frames, depth);
}

/* worker */
/* worker: move to the next segment once the current one is drained. The
 * producer wrote its last sample into `seg` before publishing `next`, so
 * with `next` seen (acquire), an empty `seg` stays empty. The drained
 * segment is freed after a grace period (the marker may be reading it). */
static rperf_ring_seg_t *next_segment(rperf_thread_t *pt, rperf_ring_seg_t *seg)
{
    if (pt->c_have_hdr) return NULL;
    rperf_ring_seg_t *next = atomic_load_explicit(&seg->next, memory_order_acquire);
    if (!next || ck_ring_size(&seg->ring) != 0) return NULL;
    atomic_store_explicit(&pt->cons, next, memory_order_release);
    ck_epoch_call(&rperf__epoch_worker, &seg->epoch_entry, seg_free_cb);
    return next;
}

size_t rperf__ring_drain(rperf_thread_t *pt, rperf_drain_sink sink, void *ctx)
{
    uint32_t ids[RPERF_MAX_DEPTH];
    size_t n = 0;
    /* acquire: the producer publishes its first segment here */
    rperf_ring_seg_t *seg = atomic_load_explicit(&pt->cons, memory_order_acquire);
    if (!seg) return 0;
    for (;;) {
        if (!pt->c_have_hdr) {
            if (ck_ring_size(&seg->ring) < 3) {
                rperf_ring_seg_t *next = next_segment(pt, seg);
                if (!next) break;
                seg = next;
                continue;
            }
            for (int i = 0; i < 3; i++) {
                void *w = NULL;
                ck_ring_dequeue_spsc(&seg->ring, seg->buf, &w);
                pt->c_hdr[i] = (uintptr_t)w;
            }
            pt->c_have_hdr = 1;
        }
        rperf_decoded_t d;
        uintptr_t w0 = pt->c_hdr[0];
        bool pair = (w0 & RING_PAIR) != 0;
        d.depth = (uint32_t)((w0 >> 16) & 0xffffu);
        d.type = (rperf_sample_type_t)((w0 >> 4) & 0xfu);
        d.label_set_id = (uint32_t)(w0 >> 32);
        d.weight = UNTAG(pt->c_hdr[1]);
        d.mono_ns = UNTAG(pt->c_hdr[2]);
        if (ck_ring_size(&seg->ring) < d.depth + (pair ? 1u : 0u)) break;   /* producer mid-write */
        int64_t weight2 = 0;
        if (pair) {
            void *w = NULL;
            ck_ring_dequeue_spsc(&seg->ring, seg->buf, &w);
            weight2 = UNTAG((uintptr_t)w);
        }
        for (uint32_t i = 0; i < d.depth; i++) {
            /* Dequeue straight into the marker-visible in-flight slot: the
             * value is copied there before the consumer head moves past it. */
            ck_ring_dequeue_spsc(&seg->ring, seg->buf, (void *)&rperf__inflight);
            ids[i] = rperf__frames_intern(rperf__inflight);
        }
        pt->c_have_hdr = 0;
        sink(pt, &d, ids, ctx);
        n++;
        if (pair) {
            d.type = (rperf_sample_type_t)(d.type + 1);
            d.weight = weight2;
            sink(pt, &d, ids, ctx);
            n++;
        }
    }
    return n;
}

bool rperf__ring_idle(rperf_thread_t *pt)
{
    rperf_ring_seg_t *seg = atomic_load_explicit(&pt->cons, memory_order_acquire);
    if (!seg) return true;                   /* never recorded anything */
    return !pt->c_have_hdr && ck_ring_size(&seg->ring) == 0 &&
           atomic_load_explicit(&seg->next, memory_order_acquire) == NULL;
}

/* GVL held inside GC (marker). Lock-free: reads the consumer head and the
 * producer tail with acquire loads; slots in between are fully written. */
void rperf__ring_mark(rperf_thread_t *pt, void (*mark)(rperf_frame_t))
{
    for (rperf_ring_seg_t *seg = atomic_load_explicit(&pt->cons, memory_order_acquire); seg;
         seg = atomic_load_explicit(&seg->next, memory_order_acquire)) {
        unsigned c = ck_pr_load_uint(&seg->ring.c_head);
        ck_pr_fence_load();
        unsigned p = ck_pr_load_uint(&seg->ring.p_tail);
        ck_pr_fence_load();
        unsigned mask = seg->ring.mask;
        for (unsigned i = c; i != p; i++) {
            uintptr_t w = (uintptr_t)ck_pr_load_ptr(&seg->buf[i & mask].value);
            if (w != 0 && (w & 7u) == 0) mark(w);
        }
    }
}
