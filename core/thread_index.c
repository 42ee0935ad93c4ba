/*
 * thread_index.c — thread tokens: what the host stores on a Ruby thread to
 * find the thread's engine state again, instead of a raw pointer.
 *
 * A token is (run << 32 | thread_seq). The run part makes every token of an
 * earlier run (or of the parent, in a fork child) stale: it names nothing,
 * is never dereferenced, and is simply overwritten when the thread is met
 * again. So stop, release, start failures and fork never have to reach
 * into Ruby Thread objects to clear what they left there, which would mean
 * writing through Thread objects that may be dead by then.
 *
 * The index (thread_seq -> state) is an array of fixed chunks allocated on
 * first use and never moved during a run: lookups are lock-free loads.
 *
 * Contexts: rperf__index_put runs wherever a thread's state is created
 * (no GVL, inside enter/leave or at start); rperf_thread_from_token in
 * hooks, jobs and label calls (inside enter/leave); rperf__index_clear on
 * the worker when it retires a thread; rperf__index_reset with the GVL
 * held while nothing else runs (start, release, fork reset). Never in a
 * signal handler (a chunk may be allocated).
 */
#include "core_internal.h"

#include <string.h>

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 4096u            /* 4M threads per run */

typedef rperf_thread_t *_Atomic slot_t;
static slot_t *_Atomic chunks[MAX_CHUNKS];
/* chunks[0..hwm) may be allocated: a reset visits only those (a start used
 * to exchange all 4,096 pointers, ~15 us here, for the one or two a
 * process usually has) */
static _Atomic uint32_t hwm;

static uint32_t token_run(void) { return (uint32_t)rperf__engine.run_id; }

uintptr_t rperf_thread_token(const rperf_thread_t *pt)
{
    return ((uintptr_t)(uint32_t)pt->run_id << 32) | pt->seq;
}

static slot_t *slot_of(uint32_t seq, bool create)
{
    uint32_t c = seq >> CHUNK_BITS;
    if (c >= MAX_CHUNKS) return NULL;
    slot_t *chunk = atomic_load_explicit(&chunks[c], memory_order_acquire);
    if (!chunk && create) {
        slot_t *fresh = rperf__calloc(CHUNK, sizeof(slot_t));
        if (!fresh) return NULL;
        if (atomic_compare_exchange_strong(&chunks[c], &chunk, fresh)) {
            chunk = fresh;
            uint32_t h = atomic_load(&hwm);
            while (h < c + 1 && !atomic_compare_exchange_weak(&hwm, &h, c + 1)) {
            }
        } else {
            rperf__free(fresh, CHUNK * sizeof(slot_t));   /* another thread won */
        }
    }
    return chunk ? &chunk[seq & (CHUNK - 1)] : NULL;
}

int rperf__index_put(rperf_thread_t *pt)
{
    slot_t *s = slot_of(pt->seq, true);
    if (!s) return -1;
    atomic_store_explicit(s, pt, memory_order_release);
    return 0;
}

void rperf__index_clear(const rperf_thread_t *pt)
{
    slot_t *s = slot_of(pt->seq, false);
    if (s) atomic_store_explicit(s, NULL, memory_order_release);
}

bool rperf_thread_token_this_run(uintptr_t token)
{
    return token && (uint32_t)(token >> 32) == token_run();
}

rperf_thread_t *rperf_thread_from_token(uintptr_t token)
{
    if (!token || (uint32_t)(token >> 32) != token_run()) return NULL;
    slot_t *s = slot_of((uint32_t)token, false);
    return s ? atomic_load_explicit(s, memory_order_acquire) : NULL;
}

void rperf__index_reset(void)
{
    uint32_t n = atomic_load(&hwm);
    for (uint32_t c = 0; c < n; c++) {
        slot_t *chunk = atomic_exchange(&chunks[c], NULL);
        if (chunk) rperf__free(chunk, CHUNK * sizeof(slot_t));
    }
    atomic_store(&hwm, 0);
}
