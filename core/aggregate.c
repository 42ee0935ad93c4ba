/*
 * aggregate.c — the aggregation table: (stack of frame ids, thread_seq,
 * label_set_id) -> summed weight, and in raw mode the ordered list of every
 * sample. Stacks are stored once in a shared id pool.
 *
 * Context: the worker thread, or a GVL thread while the worker is parked
 * (snapshot) or joined (stop). Single-threaded by that protocol: no locks.
 */
#include "core_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct agg_entry {
    uint64_t hash;
    uint64_t off;         /* into pool (64-bit: raw mode grows past 4G ids) */
    uint32_t depth;
    uint32_t thread_seq;
    uint32_t label_set_id;
    int64_t weight;
    int64_t mono_ns;      /* raw mode: sample time */
} agg_entry_t;

static struct {
    bool aggregate;
    uint32_t *pool;
    size_t pool_len, pool_cap;
    agg_entry_t *entries;           /* aggregate: dense array, insertion order */
    size_t n, cap;
    uint32_t *index;                /* aggregate: open addressing, entry+1 */
    size_t index_cap;               /* power of two */
} G;

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

int rperf__grow(void **p, size_t *cap, size_t elem, size_t need)
{
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 1024;
    while (ncap < need) ncap *= 2;
    void *n = rperf__alloc(ncap * elem);
    if (!n) return -1;
    if (*p) {
        memcpy(n, *p, *cap * elem);
        rperf__free(*p, *cap * elem);
    }
    *p = n;
    *cap = ncap;
    return 0;
}

static void free_all(void)
{
    if (G.pool) rperf__free(G.pool, G.pool_cap * sizeof(uint32_t));
    if (G.entries) rperf__free(G.entries, G.cap * sizeof(agg_entry_t));
    if (G.index) rperf__free(G.index, G.index_cap * sizeof(uint32_t));
    bool agg = G.aggregate;
    memset(&G, 0, sizeof(G));
    G.aggregate = agg;
}

int rperf__agg_init(bool aggregate)
{
    free_all();
    G.aggregate = aggregate;
    return 0;
}

void rperf__agg_destroy(void) { free_all(); }
void rperf__agg_clear(void) { free_all(); }

int rperf__hash_index_build(uint32_t **index, size_t *cap, size_t ncap, const void *entries,
                            size_t n, size_t stride)
{
    uint32_t *idx = rperf__calloc(ncap, sizeof(uint32_t));
    if (!idx) return -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t h;
        memcpy(&h, (const char *)entries + i * stride, sizeof(h));
        size_t j = h & (ncap - 1);
        while (idx[j]) j = (j + 1) & (ncap - 1);
        idx[j] = (uint32_t)i + 1;
    }
    if (*index) rperf__free(*index, *cap * sizeof(uint32_t));
    *index = idx;
    *cap = ncap;
    return 0;
}

static int rehash(size_t ncap)
{
    return rperf__hash_index_build(&G.index, &G.index_cap, ncap, G.entries, G.n, sizeof(agg_entry_t));
}

static int append(const uint32_t *ids, uint32_t depth, int64_t weight, uint32_t ts,
                  uint32_t ls, int64_t mono_ns, uint64_t h)
{
    if (rperf__grow((void **)&G.pool, &G.pool_cap, sizeof(uint32_t), G.pool_len + depth) < 0 ||
        rperf__grow((void **)&G.entries, &G.cap, sizeof(agg_entry_t), G.n + 1) < 0)
        return -1;
    agg_entry_t *e = &G.entries[G.n];
    e->hash = h;
    e->off = G.pool_len;
    e->depth = depth;
    e->thread_seq = ts;
    e->label_set_id = ls;
    e->weight = weight;
    e->mono_ns = mono_ns;
    memcpy(G.pool + G.pool_len, ids, depth * sizeof(uint32_t));
    G.pool_len += depth;
    G.n++;
    return 0;
}

int rperf__agg_add(const uint32_t *ids, uint32_t depth, int64_t weight,
                   uint32_t thread_seq, uint32_t label_set_id, int64_t mono_ns)
{
    if (!G.aggregate) return append(ids, depth, weight, thread_seq, label_set_id, mono_ns, 0);

    uint64_t h = mix(mix(0x243f6a8885a308d3ULL, thread_seq), label_set_id);
    for (uint32_t i = 0; i < depth; i++) h = mix(h, ids[i]);
    h ^= depth;
    if (G.n >= UINT32_MAX - 1) return -1;   /* index entries are 32-bit */
    if ((G.n + 1) * 2 > G.index_cap && rehash(G.index_cap ? G.index_cap * 2 : 1024) < 0)
        return -1;
    size_t j = h & (G.index_cap - 1);
    while (G.index[j]) {
        agg_entry_t *e = &G.entries[G.index[j] - 1];
        if (e->hash == h && e->depth == depth && e->thread_seq == thread_seq &&
            e->label_set_id == label_set_id &&
            memcmp(G.pool + e->off, ids, depth * sizeof(uint32_t)) == 0) {
            e->weight += weight;
            return 0;
        }
        j = (j + 1) & (G.index_cap - 1);
    }
    if (append(ids, depth, weight, thread_seq, label_set_id, 0, h) < 0) return -1;
    G.index[j] = (uint32_t)G.n;
    return 0;
}

size_t rperf__agg_count(void) { return G.aggregate ? G.n : 0; }
size_t rperf__raw_count(void) { return G.aggregate ? 0 : G.n; }

size_t rperf__agg_memory(void)
{
    return G.pool_cap * sizeof(uint32_t) + G.cap * sizeof(agg_entry_t) +
           G.index_cap * sizeof(uint32_t);
}

static int each(rperf_sample_cb cb, void *ctx, int64_t mono_to_real)
{
    for (size_t i = 0; i < G.n; i++) {
        agg_entry_t *e = &G.entries[i];
        rperf_result_sample_t s = {
            .frames = G.pool + e->off,
            .depth = e->depth,
            .weight = e->weight,
            .thread_seq = e->thread_seq,
            .label_set_id = e->label_set_id,
            .time_ns = G.aggregate ? 0 : e->mono_ns + mono_to_real,
        };
        int r = cb(&s, ctx);
        if (r) return r;
    }
    return 0;
}

int rperf__agg_each(rperf_sample_cb cb, void *ctx)
{
    return G.aggregate ? each(cb, ctx, 0) : 0;
}

/* The weight of each aggregated entry, in entry order (entries only ever
 * grow between clears, so an index names the same entry until the next
 * clear); returns how many entries there are. */
size_t rperf__agg_weights(int64_t *out, size_t cap)
{
    if (!G.aggregate) return 0;
    for (size_t i = 0; i < G.n && i < cap; i++) out[i] = G.entries[i].weight;
    return G.n;
}

/* The entries whose weight grew past base (base[i] for i < nbase, 0
 * after), each with the growth as its weight. */
int rperf__agg_each_since(const int64_t *base, size_t nbase, rperf_sample_cb cb, void *ctx)
{
    if (!G.aggregate) return 0;
    for (size_t i = 0; i < G.n; i++) {
        agg_entry_t *e = &G.entries[i];
        int64_t w = e->weight - (i < nbase ? base[i] : 0);
        if (w <= 0) continue;
        rperf_result_sample_t s = {
            .frames = G.pool + e->off, .depth = e->depth, .weight = w,
            .thread_seq = e->thread_seq, .label_set_id = e->label_set_id,
        };
        int r = cb(&s, ctx);
        if (r) return r;
    }
    return 0;
}

static int by_time(const void *a, const void *b)
{
    const agg_entry_t *x = &G.entries[*(const uint32_t *)a];
    const agg_entry_t *y = &G.entries[*(const uint32_t *)b];
    if (x->mono_ns != y->mono_ns) return x->mono_ns < y->mono_ns ? -1 : 1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Raw samples in time order (rings are drained per thread). */
int rperf__raw_each(rperf_sample_cb cb, void *ctx, int64_t mono_to_real)
{
    if (G.aggregate || G.n == 0) return 0;
    uint32_t *order = G.n < UINT32_MAX ? rperf__alloc(G.n * sizeof(uint32_t)) : NULL;
    if (!order) return each(cb, ctx, mono_to_real);
    for (size_t i = 0; i < G.n; i++) order[i] = (uint32_t)i;
    qsort(order, G.n, sizeof(uint32_t), by_time);
    int r = 0;
    for (size_t i = 0; i < G.n && !r; i++) {
        agg_entry_t *e = &G.entries[order[i]];
        rperf_result_sample_t s = {
            .frames = G.pool + e->off, .depth = e->depth, .weight = e->weight,
            .thread_seq = e->thread_seq, .label_set_id = e->label_set_id,
            .time_ns = e->mono_ns + mono_to_real,
        };
        r = cb(&s, ctx);
    }
    rperf__free(order, G.n * sizeof(uint32_t));
    return r;
}
