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
 * A full ring never blocks: the sample is dropped and counted, and the
 * caller keeps its weight pending (it does not advance its clocks).
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

int rperf__ring_init(rperf_thread_t *pt, uint32_t slots)
{
    pt->buf = rperf__calloc(slots, sizeof(ck_ring_buffer_t));
    if (!pt->buf) return -1;
    pt->slots = slots;
    ck_ring_init(&pt->ring, slots);
    return 0;
}

void rperf__ring_free(rperf_thread_t *pt)
{
    if (pt->buf) rperf__free(pt->buf, (size_t)pt->slots * sizeof(ck_ring_buffer_t));
    pt->buf = NULL;
}

/* own */
bool rperf__ring_push(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                      int64_t mono_ns, const rperf_frame_t *frames, int depth)
{
    unsigned used = ck_ring_size(&pt->ring);
    unsigned need = 3u + (unsigned)depth;
    unsigned cap = pt->slots - 1;            /* ck_ring keeps one slot free */
    if (used + need > cap) {
        atomic_fetch_add_explicit(&pt->dropped, 1, memory_order_relaxed);
        rperf__worker_wake();
        return false;
    }
    uint32_t label = atomic_load_explicit(&pt->label_set_id, memory_order_relaxed);
    uintptr_t w0 = ((uintptr_t)label << 32) | ((uintptr_t)depth << 16) |
                   ((uintptr_t)type << 4) | 1u;
    /* Each enqueue publishes its slot with a store fence; the consumer only
     * takes a sample once all of its words are visible (ring_drain). */
    ck_ring_enqueue_spsc(&pt->ring, pt->buf, (void *)w0);
    ck_ring_enqueue_spsc(&pt->ring, pt->buf, (void *)TAG(weight));
    ck_ring_enqueue_spsc(&pt->ring, pt->buf, (void *)TAG(mono_ns));
    for (int i = 0; i < depth; i++)
        ck_ring_enqueue_spsc(&pt->ring, pt->buf, (void *)frames[i]);
    if (used + need > cap / 2) rperf__worker_wake();
    return true;
}

/* worker */
size_t rperf__ring_drain(rperf_thread_t *pt, rperf_drain_sink sink, void *ctx)
{
    uint32_t ids[RPERF_MAX_DEPTH];
    size_t n = 0;
    for (;;) {
        if (!pt->c_have_hdr) {
            if (ck_ring_size(&pt->ring) < 3) break;
            for (int i = 0; i < 3; i++) {
                void *w = NULL;
                ck_ring_dequeue_spsc(&pt->ring, pt->buf, &w);
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
        if (ck_ring_size(&pt->ring) < d.depth) break;   /* producer mid-write */
        for (uint32_t i = 0; i < d.depth; i++) {
            /* Dequeue straight into the marker-visible in-flight slot: the
             * value is copied there before the consumer head moves past it. */
            ck_ring_dequeue_spsc(&pt->ring, pt->buf, (void *)&rperf__inflight);
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
    return !pt->c_have_hdr && ck_ring_size(&pt->ring) == 0;
}

/* GVL held inside GC (marker). Lock-free: reads the consumer head and the
 * producer tail with acquire loads; slots in between are fully written. */
void rperf__ring_mark(rperf_thread_t *pt, void (*mark)(rperf_frame_t))
{
    if (!pt->buf) return;
    unsigned c = ck_pr_load_uint(&pt->ring.c_head);
    ck_pr_fence_load();
    unsigned p = ck_pr_load_uint(&pt->ring.p_tail);
    ck_pr_fence_load();
    unsigned mask = pt->ring.mask;
    for (unsigned i = c; i != p; i++) {
        uintptr_t w = (uintptr_t)ck_pr_load_ptr(&pt->buf[i & mask].value);
        if (w != 0 && (w & 7u) == 0) mark(w);
    }
}
