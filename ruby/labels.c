/*
 * labels.c — the run's label-set table, interned in C so that Rperf.label,
 * Rperf.labels and the result's label_sets work from any Ractor.
 *
 * A label set is a frozen, Ractor-shareable Hash (built in lib/rperf.rb:
 * values that are not shareable are copied as frozen Strings) identified by
 * a canonical key string. Ids are assigned 1, 2, 3 … in order of first
 * appearance; id 0 is the empty set. Sets are never freed during a run.
 *
 * Storage is append-only: Hash VALUEs live in fixed chunks that are never
 * moved, and `count` is published with a release store after the entry is
 * written, so the GC mark function reads [0, count) without a lock. The
 * key index (open addressing) is guarded by one mutex, taken only for C
 * work (no Ruby call, allocation of Ruby objects or interrupt check inside),
 * so a thread holding it never waits for a GC barrier.
 *
 * Contexts: the Rperf._c_label_* functions run with the calling Ractor's
 * GVL held (any Ractor); rperf_rb_labels_mark runs inside GC (no lock);
 * rperf_rb_labels_reset runs at start (main Ractor, GVL held).
 */
#include "rperf_ruby.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 4096u                /* 4M label sets per run */

typedef struct label_key {
    char *bytes;
    size_t len;
    uint64_t hash;
} label_key_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static VALUE *_Atomic chunks[MAX_CHUNKS];   /* Hash VALUEs, never moved */
static label_key_t *keys;                    /* under mu, by id */
static size_t keys_cap;
static uint32_t *index_tab;                  /* under mu: id + 1, 0 = empty */
static size_t index_cap;
static _Atomic uint32_t count;               /* published entries */
static VALUE empty_set;

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static VALUE entry_at(uint32_t id)
{
    VALUE *c = atomic_load_explicit(&chunks[id >> CHUNK_BITS], memory_order_acquire);
    return c ? c[id & (CHUNK - 1)] : Qnil;
}

/* under mu */
static int index_grow(void)
{
    size_t cap = index_cap ? index_cap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof(*t));
    if (!t) return -1;
    for (uint32_t id = 1; id < atomic_load_explicit(&count, memory_order_relaxed); id++) {
        size_t i = keys[id].hash & (cap - 1);
        while (t[i]) i = (i + 1) & (cap - 1);
        t[i] = id + 1;
    }
    free(index_tab);
    index_tab = t;
    index_cap = cap;
    return 0;
}

/* under mu: -1 on allocation failure */
static int64_t intern_locked(const char *bytes, size_t len, VALUE set)
{
    uint64_t h = fnv1a(bytes, len);
    uint32_t n = atomic_load_explicit(&count, memory_order_relaxed);
    if (index_cap && index_tab) {
        for (size_t i = h & (index_cap - 1); index_tab[i]; i = (i + 1) & (index_cap - 1)) {
            label_key_t *k = &keys[index_tab[i] - 1];
            if (k->hash == h && k->len == len && memcmp(k->bytes, bytes, len) == 0)
                return index_tab[i] - 1;
        }
    }
    if (n >= MAX_CHUNKS * CHUNK) return -1;
    if ((size_t)(n + 1) * 2 > index_cap && index_grow() < 0) return -1;
    if (n >= keys_cap) {
        size_t cap = keys_cap ? keys_cap * 2 : 256;
        label_key_t *k = realloc(keys, cap * sizeof(*k));
        if (!k) return -1;
        keys = k;
        keys_cap = cap;
    }
    VALUE *c = atomic_load_explicit(&chunks[n >> CHUNK_BITS], memory_order_relaxed);
    if (!c) {
        c = calloc(CHUNK, sizeof(VALUE));
        if (!c) return -1;
        atomic_store_explicit(&chunks[n >> CHUNK_BITS], c, memory_order_release);
    }
    char *copy = malloc(len ? len : 1);
    if (!copy) return -1;
    memcpy(copy, bytes, len);
    keys[n] = (label_key_t){ copy, len, h };
    c[n & (CHUNK - 1)] = set;
    size_t i = h & (index_cap - 1);
    while (index_tab[i]) i = (i + 1) & (index_cap - 1);
    index_tab[i] = n + 1;
    atomic_store_explicit(&count, n + 1, memory_order_release);
    return n;
}

/* _c_label_intern(key String, frozen shareable Hash) -> id */
static VALUE c_label_intern(VALUE self, VALUE key, VALUE set)
{
    (void)self;
    StringValue(key);
    Check_Type(set, T_HASH);
    if (!RB_OBJ_FROZEN(set) || !rb_ractor_shareable_p(set))
        rb_raise(rb_eArgError, "rperf: a label set must be a shareable frozen Hash");
    if (RHASH_SIZE(set) == 0) return INT2FIX(0);
    /* copy the key out of the Ruby string before taking the lock */
    long len = RSTRING_LEN(key);
    char stackbuf[256];
    char *bytes = len <= (long)sizeof(stackbuf) ? stackbuf : ruby_xmalloc((size_t)len);
    memcpy(bytes, RSTRING_PTR(key), (size_t)len);
    pthread_mutex_lock(&mu);
    int64_t id = intern_locked(bytes, (size_t)len, set);
    pthread_mutex_unlock(&mu);
    if (bytes != stackbuf) ruby_xfree(bytes);
    if (id < 0) rb_raise(rb_eNoMemError, "rperf: failed to allocate a label set");
    RB_GC_GUARD(set);
    return UINT2NUM((uint32_t)id);
}

/* _c_label_set(id) -> the interned Hash ({} for 0 or an unknown id) */
static VALUE c_label_set(VALUE self, VALUE vid)
{
    (void)self;
    uint32_t id = NUM2UINT(vid);
    if (id == 0 || id >= atomic_load_explicit(&count, memory_order_acquire)) return empty_set;
    VALUE h = entry_at(id);
    return NIL_P(h) ? empty_set : h;
}

VALUE rperf_rb_label_sets(void)
{
    uint32_t n = atomic_load_explicit(&count, memory_order_acquire);
    VALUE a = rb_ary_new_capa(n);
    rb_ary_push(a, empty_set);
    for (uint32_t id = 1; id < n; id++) rb_ary_push(a, entry_at(id));
    return a;
}

uint32_t rperf_rb_label_set_count(void) { return atomic_load_explicit(&count, memory_order_acquire); }

void rperf_rb_labels_reset(void)
{
    pthread_mutex_lock(&mu);
    uint32_t n = atomic_load_explicit(&count, memory_order_relaxed);
    for (uint32_t id = 1; id < n; id++) free(keys[id].bytes);
    atomic_store_explicit(&count, 1, memory_order_release);   /* id 0 = {} */
    if (index_tab) memset(index_tab, 0, index_cap * sizeof(*index_tab));
    pthread_mutex_unlock(&mu);
}

void rperf_rb_labels_mark(void)
{
    uint32_t n = atomic_load_explicit(&count, memory_order_acquire);
    for (uint32_t id = 1; id < n; id++) {
        VALUE h = entry_at(id);
        if (h && !NIL_P(h)) rb_gc_mark(h);
    }
}

void rperf_rb_labels_init(VALUE m)
{
    empty_set = rb_obj_freeze(rb_hash_new());
    rb_ractor_make_shareable(empty_set);
    rb_gc_register_mark_object(empty_set);
    if (!keys) {
        keys_cap = 256;
        keys = calloc(keys_cap, sizeof(*keys));
    }
    atomic_store(&count, 1);
    rb_define_module_function(m, "_c_label_intern", c_label_intern, 2);
    rb_define_module_function(m, "_c_label_set", c_label_set, 1);
}
