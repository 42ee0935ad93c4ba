/*
 * ring.c — the per-thread sample ring: one ck_ring SPSC of machine words per
 * Ruby thread. Producer: the thread itself (own context: its sampling job,
 * its RESUMED/SUSPENDED hooks, its GC hooks — never a signal handler).
 * Consumer: the aggregation worker (or a GVL thread while the worker is
 * parked). The GC mark function reads live regions concurrently (lock-free).
 *
 * Encoding of one sample (3 + depth words):
 *   w0 = label_set_id << 32 | depth << 16 | type << 4 | 1
 *   w1 = weight << 1 | 1           w2 = monotonic ns << 1 | 1
 *   depth frame words (untagged VALUEs), leaf first.
 * A thread's first segment is small (RPERF_RING_FIRST_SLOTS words, from the
 * heap): a thread that records a sample or two (its first turn's blocked
 * time, then parked; a short connection thread) costs no mapping, page
 * fault or unmapping, which on a VM with many threads cost more than the
 * samples (docs/performance.md). The first overflow chains a segment of the
 * configured size (pages).
 * A full ring never blocks. It grows instead: the producer chains a segment
 * 4x larger (up to RPERF_RING_MAX_SLOTS words) and writes there, the
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

/* Segments up to RPERF_RING_FIRST_SLOTS words come from the heap, larger
 * ones are page blocks (alloc.c): the size alone says which. */
static ck_ring_buffer_t *buf_alloc(uint32_t slots)
{
    size_t bytes = (size_t)slots * sizeof(ck_ring_buffer_t);
    return slots <= RPERF_RING_FIRST_SLOTS ? rperf__calloc(1, bytes) : rperf__alloc_pages(bytes);
}

static void buf_free(ck_ring_buffer_t *buf, uint32_t slots)
{
    size_t bytes = (size_t)slots * sizeof(ck_ring_buffer_t);
    if (slots <= RPERF_RING_FIRST_SLOTS) rperf__free(buf, bytes);
    else rperf__free_pages(buf, bytes);
}

static rperf_ring_seg_t *seg_new(uint32_t slots)
{
    rperf_ring_seg_t *seg = rperf__calloc(1, sizeof(*seg));
    if (!seg) return NULL;
    seg->buf = buf_alloc(slots);
    if (!seg->buf) {
        rperf__free(seg, sizeof(*seg));
        return NULL;
    }
    seg->slots = slots;
    ck_ring_init(&seg->ring, slots);
    return seg;
}

static void seg_free(rperf_ring_seg_t *seg)
{
    buf_free(seg->buf, seg->slots);
    rperf__free(seg, sizeof(*seg));
}

static void seg_free_cb(ck_epoch_entry_t *e)
{
    RPERF_EPOCH_RECLAIM();
    seg_free((rperf_ring_seg_t *)((char *)e - offsetof(rperf_ring_seg_t, epoch_entry)));
}

/* No memory yet: the first push allocates the (small) first segment. A
 * thread that never records a sample (a short-lived thread that got no tick
 * and never waited long for the GVL) costs no ring at all. */
int rperf__ring_init(rperf_thread_t *pt, uint32_t slots)
{
    pt->ring_slots0 = slots;
    pt->prod = NULL;
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
    pt->prod = seg;
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
    pt->prod = NULL;
    atomic_store_explicit(&pt->cons, NULL, memory_order_relaxed);
}

/* own: the producer's segment cannot take `need` more words. Chain the
 * configured size after the small first segment, then segments 4x larger
 * (up to RPERF_RING_MAX_SLOTS) so a busy thread whose worker is slow to get
 * a CPU keeps its samples; NULL when at the limit (or out of memory): the
 * caller drops the sample. The last write to the old segment happens before
 * `next` is published (release). */
static rperf_ring_seg_t *ring_grow(rperf_thread_t *pt, unsigned need)
{
    uint32_t slots = pt->prod->slots;
    if (slots >= RPERF_RING_MAX_SLOTS) return NULL;
    if (slots < pt->ring_slots0) slots = pt->ring_slots0;
    else slots = slots * 4 > RPERF_RING_MAX_SLOTS ? RPERF_RING_MAX_SLOTS : slots * 4;
    while (need + 1 > slots && slots < RPERF_RING_MAX_SLOTS)
        slots = slots * 4 > RPERF_RING_MAX_SLOTS ? RPERF_RING_MAX_SLOTS : slots * 4;
    if (need + 1 > slots) return NULL;
    rperf_ring_seg_t *seg = seg_new(slots);
    if (!seg) return NULL;
    atomic_store_explicit(&pt->prod->next, seg, memory_order_release);
    pt->prod = seg;
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
    pt->prod = seg;
    return seg;
}

/* own: the sample's 3 + depth words into `seg`, which has room for them
 * (checked by the caller), published at once: the words are stored as
 * ck_ring_enqueue_spsc stores one (its slot, then a store fence, then the
 * producer tail), but the tail moves once per sample instead of once per
 * word. A 155-frame stack took 158 enqueues, each reloading the consumer
 * head (a line the worker writes while it drains) and storing the tail
 * (one it reads): ~0.5 us of the job's ~1.5 us. The consumer (ck_ring
 * dequeue, ring_drain) and the marker (rperf__ring_mark) read the slots
 * below the tail only, so they see whole samples. */
static void put_words(rperf_ring_seg_t *seg, const uintptr_t hdr[3], const rperf_frame_t *frames,
                      unsigned depth)
{
    ck_ring_t *r = &seg->ring;
    const unsigned mask = r->mask;
    unsigned p = r->p_tail;                  /* the producer's own */
    for (int i = 0; i < 3; i++) ck_pr_store_ptr(&seg->buf[p++ & mask].value, (void *)hdr[i]);
    for (unsigned i = 0; i < depth; i++)
        ck_pr_store_ptr(&seg->buf[p++ & mask].value, (void *)frames[i]);
    ck_pr_fence_store();
    ck_pr_store_uint(&r->p_tail, p);
}

/* own */
bool rperf__ring_push(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                      int64_t mono_ns, const rperf_frame_t *frames, int depth)
{
    rperf_ring_seg_t *seg = pt->prod;
    if (!seg && !(seg = ring_first(pt))) {
        atomic_fetch_add_explicit(&pt->dropped, 1, memory_order_relaxed);
        return false;
    }
    unsigned used = ck_ring_size(&seg->ring);
    unsigned need = 3u + (unsigned)depth;
    uint32_t initial = pt->ring_slots0;
    /* shrink once the consumer works on this segment (older ones drained) */
    if (seg->slots > initial && used + need <= initial / 4 &&
        atomic_load_explicit(&pt->cons, memory_order_relaxed) == seg) {
        seg = ring_shrink(pt);
        used = ck_ring_size(&seg->ring);
    }
    unsigned cap = seg->slots - 1;           /* ck_ring keeps one slot free */
    /* The small first segment is for threads that record a sample or two:
     * one that passes half full there moves on to the configured size at
     * once, instead of waking the worker every few samples. */
    bool first = seg->slots < initial;
    if (used + need > (first ? cap / 2 : cap)) {
        if (!first) rperf__worker_wake_for(pt, true);
        seg = ring_grow(pt, need);
        if (!seg) {
            atomic_fetch_add_explicit(&pt->dropped, 1, memory_order_relaxed);
            return false;
        }
        used = 0;
        cap = seg->slots - 1;
    }
    uint32_t label = atomic_load_explicit(&pt->label_set_id, memory_order_relaxed);
    uintptr_t w0 = ((uintptr_t)label << 32) | ((uintptr_t)depth << 16) |
                   ((uintptr_t)type << 4) | 1u;
    const uintptr_t hdr[3] = { w0, TAG(weight), TAG(mono_ns) };
    put_words(seg, hdr, frames, (unsigned)depth);
    if (used + need > cap / 2) rperf__worker_wake_for(pt, used + need > cap / 4 * 3);
    return true;
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
        d.depth = (uint32_t)((w0 >> 16) & 0xffffu);
        d.type = (rperf_sample_type_t)((w0 >> 4) & 0xfu);
        d.label_set_id = (uint32_t)(w0 >> 32);
        d.weight = UNTAG(pt->c_hdr[1]);
        d.mono_ns = UNTAG(pt->c_hdr[2]);
        if (ck_ring_size(&seg->ring) < d.depth) break;   /* producer mid-write */
        for (uint32_t i = 0; i < d.depth; i++) {
            /* Dequeue straight into the marker-visible in-flight slot: the
             * value is copied there before the consumer head moves past it. */
            ck_ring_dequeue_spsc(&seg->ring, seg->buf, (void *)&rperf__inflight);
            ids[i] = rperf__frames_intern(rperf__inflight);
        }
        pt->c_have_hdr = 0;
        sink(pt, &d, ids, ctx);
        n++;
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
