/*
 * labels.c — the run's label-set table, interned in C so that Rperf.label,
 * Rperf.labels and the result's label_sets work from any Ractor.
 *
 * A label set is a frozen, Ractor-shareable Hash (values that are not
 * shareable are stored as frozen String copies of their to_s) identified
 * by canonical key bytes: its pairs encoded by type and content, sorted, so
 * equal sets in any order or encoding mix share one id. Ids are assigned
 * 1, 2, 3 … in order of first appearance; id 0 is the empty set. Sets are
 * never freed during a run. Applying labels to a set seen before allocates
 * no Hash (Rperf.label per request is the common case).
 *
 * Storage is append-only: Hash VALUEs live in fixed chunks that are never
 * moved, and `count` is published with a release store after the entry is
 * written, so the GC mark function reads [0, count) without a lock. The
 * key index (open addressing) is guarded by one mutex, taken only for C
 * work (no Ruby call, allocation of Ruby objects or interrupt check inside),
 * so a thread holding it never waits for a GC barrier.
 *
 * Rperf.label and Rperf.labels themselves are C methods, so a tracer sees
 * the public call and the user's block only. Label values are converted
 * without Ruby calls, except for values that are neither shareable nor
 * Strings (their to_s) and shareable objects of other classes (inspect, for
 * the key): those calls are visible to tracers.
 *
 * Contexts: Rperf.label, Rperf.labels and the Rperf._c_label_* functions
 * run with the calling Ractor's GVL held (any Ractor); rperf_rb_labels_mark runs inside GC (no lock);
 * rperf_rb_labels_reset runs at start (main Ractor, GVL held).
 */
#include "rperf_ruby.h"

#include <ruby/encoding.h>

#include <pthread.h>
#include <stdbool.h>
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

/* ---- applying Rperf.label(**labels) to a thread's current set ------------ */

#define INLINE_PAIRS 32

typedef struct pairs {
    VALUE *k, *v;           /* merged pairs, in Hash order (cur, then new keys) */
    long n, cap;
    VALUE keep;             /* large sets: a Ruby Array keeping new values alive */
} pairs_t;

static bool same_key(VALUE a, VALUE b)
{
    if (a == b) return true;
    return RB_TYPE_P(a, T_STRING) && RB_TYPE_P(b, T_STRING) && rb_str_equal(a, b) == Qtrue;
}

static void pairs_put(pairs_t *p, VALUE k, VALUE v)
{
    for (long i = 0; i < p->n; i++) {
        if (!same_key(p->k[i], k)) continue;
        if (NIL_P(v)) {            /* nil deletes the key, keeping the order */
            memmove(p->k + i, p->k + i + 1, (size_t)(p->n - i - 1) * sizeof(VALUE));
            memmove(p->v + i, p->v + i + 1, (size_t)(p->n - i - 1) * sizeof(VALUE));
            p->n--;
        } else {
            p->v[i] = v;
        }
        return;
    }
    if (NIL_P(v) || p->n >= p->cap) return;
    p->k[p->n] = k;
    p->v[p->n] = v;
    p->n++;
}

static int put_i(VALUE k, VALUE v, VALUE arg)
{
    pairs_put((pairs_t *)arg, k, v);
    return ST_CONTINUE;
}

/* A value every Ractor may read: shareable values as they are, anything
 * else as a frozen String copy of its to_s. */
static VALUE shareable_value(VALUE v)
{
    if (rb_ractor_shareable_p(v)) return v;
    VALUE s = RB_TYPE_P(v, T_STRING) ? rb_str_dup(v) : rb_str_dup(rb_obj_as_string(v));
    return rb_str_freeze(s);
}

/* ---- canonical key bytes ---------------------------------------------------- */

typedef struct buf {
    char *p;
    size_t len, cap;
    char inline_[512];
} buf_t;

static void buf_put(buf_t *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap * 2 > b->len + n ? b->cap * 2 : b->len + n;
        char *q = ruby_xmalloc(cap);
        memcpy(q, b->p, b->len);
        if (b->p != b->inline_) ruby_xfree(b->p);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_tagged(buf_t *b, char tag, const void *src, size_t n)
{
    uint64_t len = n;
    buf_put(b, &tag, 1);
    buf_put(b, &len, sizeof(len));
    buf_put(b, src, n);
}

/* One object as bytes: the same bytes iff the same label value. */
static void put_value(buf_t *b, VALUE v)
{
    if (RB_TYPE_P(v, T_STRING)) {
        int enc = rb_enc_get_index(v);
        buf_put(b, "s", 1);
        buf_put(b, &enc, sizeof(enc));
        put_tagged(b, ':', RSTRING_PTR(v), (size_t)RSTRING_LEN(v));
    } else if (RB_SYMBOL_P(v)) {
        VALUE name = rb_sym2str(v);
        put_tagged(b, 'y', RSTRING_PTR(name), (size_t)RSTRING_LEN(name));
    } else if (RB_FIXNUM_P(v)) {
        long x = FIX2LONG(v);
        put_tagged(b, 'i', &x, sizeof(x));
    } else if (RB_FLOAT_TYPE_P(v)) {
        double d = RFLOAT_VALUE(v);
        put_tagged(b, 'd', &d, sizeof(d));
    } else if (NIL_P(v) || v == Qtrue || v == Qfalse) {
        put_tagged(b, 'c', &v, sizeof(v));
    } else {                     /* any other shareable object: class + inspect */
        VALUE cls = rb_class_name(CLASS_OF(v));
        VALUE ins = rb_inspect(v);
        put_tagged(b, 'o', RSTRING_PTR(cls), (size_t)RSTRING_LEN(cls));
        put_tagged(b, ':', RSTRING_PTR(ins), (size_t)RSTRING_LEN(ins));
    }
}

static int cmp_key_bytes(const void *a, const void *b)
{
    const buf_t *x = *(buf_t *const *)a, *y = *(buf_t *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->p, y->p, n);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* The key of a merged set: pairs sorted by their key's bytes, so equal sets
 * in any order give the same bytes. May call Ruby (inspect): no lock held. */
static void canonical_key(const pairs_t *p, buf_t *out)
{
    buf_t kb[INLINE_PAIRS], *kp[INLINE_PAIRS];
    long n = p->n < INLINE_PAIRS ? p->n : INLINE_PAIRS;
    if (p->n > INLINE_PAIRS) {
        /* rare: many keys. Order by key bytes via a Ruby sort of inspect. */
        VALUE ks = rb_ary_new_capa(p->n);
        for (long i = 0; i < p->n; i++) {
            buf_t one = { .p = NULL, .len = 0, .cap = sizeof(one.inline_) };
            one.p = one.inline_;
            put_value(&one, p->k[i]);
            put_value(&one, p->v[i]);
            rb_ary_push(ks, rb_str_new(one.p, (long)one.len));
            if (one.p != one.inline_) ruby_xfree(one.p);
        }
        rb_ary_sort_bang(ks);
        for (long i = 0; i < p->n; i++) {
            VALUE e = RARRAY_AREF(ks, i);
            put_tagged(out, 'p', RSTRING_PTR(e), (size_t)RSTRING_LEN(e));
        }
        RB_GC_GUARD(ks);
        return;
    }
    for (long i = 0; i < n; i++) {
        kb[i].p = kb[i].inline_;
        kb[i].len = 0;
        kb[i].cap = sizeof(kb[i].inline_);
        put_value(&kb[i], p->k[i]);
        put_value(&kb[i], p->v[i]);
        kp[i] = &kb[i];
    }
    qsort(kp, (size_t)n, sizeof(kp[0]), cmp_key_bytes);
    for (long i = 0; i < n; i++) {
        put_tagged(out, 'p', kp[i]->p, kp[i]->len);
        if (kb[i].p != kb[i].inline_) ruby_xfree(kb[i].p);
    }
}

static int64_t lookup_or_intern(const buf_t *key, VALUE set)
{
    pthread_mutex_lock(&mu);
    int64_t id = intern_locked(key->p, key->len, set);
    pthread_mutex_unlock(&mu);
    return id;
}

/* _c_label_apply(current_id, labels Hash) -> the id of current set merged
 * with labels (nil deletes a key). Interned by content; the frozen,
 * shareable Hash is only built for a set not seen before in this run. */
static VALUE c_label_apply(VALUE self, VALUE vcur, VALUE labels)
{
    (void)self;
    Check_Type(labels, T_HASH);
    uint32_t cur_id = NUM2UINT(vcur);
    VALUE cur = cur_id && cur_id < atomic_load_explicit(&count, memory_order_acquire) ? entry_at(cur_id) : Qnil;
    long max = RHASH_SIZE(labels) + (NIL_P(cur) ? 0 : (long)RHASH_SIZE(cur));
    VALUE kin[INLINE_PAIRS], vin[INLINE_PAIRS];
    pairs_t p = { kin, vin, 0, INLINE_PAIRS, Qnil };
    if (max > INLINE_PAIRS) {
        /* Pairs come from cur and labels (alive); values made below are
         * also pushed to p.keep, since heap memory is not scanned by GC. */
        p.keep = rb_ary_new();
        p.k = ruby_xmalloc2((size_t)max, sizeof(VALUE));
        p.v = ruby_xmalloc2((size_t)max, sizeof(VALUE));
        p.cap = max;
    }
    if (!NIL_P(cur)) rb_hash_foreach(cur, put_i, (VALUE)&p);
    rb_hash_foreach(labels, put_i, (VALUE)&p);
    if (p.n == 0) {
        if (p.k != kin) {
            ruby_xfree(p.k);
            ruby_xfree(p.v);
        }
        return INT2FIX(0);
    }
    for (long i = 0; i < p.n; i++) {
        VALUE v = shareable_value(p.v[i]);
        if (v != p.v[i] && !NIL_P(p.keep)) rb_ary_push(p.keep, v);
        p.v[i] = v;
        if (!rb_ractor_shareable_p(p.k[i])) {
            VALUE k = shareable_value(p.k[i]);
            if (!NIL_P(p.keep)) rb_ary_push(p.keep, k);
            p.k[i] = k;
        }
    }
    buf_t key = { .p = NULL, .len = 0, .cap = sizeof(key.inline_) };
    key.p = key.inline_;
    canonical_key(&p, &key);
    /* Seen before: no Hash to build (the common case, e.g. per request). */
    int64_t id = -1;
    pthread_mutex_lock(&mu);
    if (index_cap && index_tab) {
        uint64_t h = fnv1a(key.p, key.len);
        for (size_t i = h & (index_cap - 1); index_tab[i]; i = (i + 1) & (index_cap - 1)) {
            label_key_t *k = &keys[index_tab[i] - 1];
            if (k->hash == h && k->len == key.len && memcmp(k->bytes, key.p, key.len) == 0) {
                id = index_tab[i] - 1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&mu);
    if (id < 0) {
        VALUE set = rb_hash_new_capa(p.n);
        for (long i = 0; i < p.n; i++) rb_hash_aset(set, p.k[i], p.v[i]);
        rb_obj_freeze(set);
        rb_ractor_make_shareable(set);
        id = lookup_or_intern(&key, set);   /* re-checks: another thread may have won */
        RB_GC_GUARD(set);
    }
    if (key.p != key.inline_) ruby_xfree(key.p);
    if (p.k != kin) {
        ruby_xfree(p.k);
        ruby_xfree(p.v);
    }
    RB_GC_GUARD(p.keep);
    RB_GC_GUARD(labels);
    RB_GC_GUARD(cur);
    if (id < 0) rb_raise(rb_eNoMemError, "rperf: failed to allocate a label set");
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

/* ---- Rperf.label / Rperf.labels --------------------------------------------------------- */
/* Defined in C, so that a tracer sees only the public call (and the user's
 * block): no helper method runs on the application's thread. */

static uint32_t current_label(void)
{
    if (!rperf_engine_running()) return 0;
    rperf_thread_t *pt = rperf_rb_current_thread(false);
    return pt ? rperf_thread_label(pt) : 0;
}

static void set_label(uint32_t id)
{
    if (!rperf_engine_running()) return;
    rperf_thread_t *pt = rperf_rb_current_thread(true);
    if (pt) rperf_thread_set_label(pt, id);
}

static VALUE yield_block(VALUE unused)
{
    (void)unused;
    return rb_yield_values(0);
}

static VALUE restore_label(VALUE id)
{
    set_label(NUM2UINT(id));
    return Qnil;
}

/* Rperf.label(**labels) [{ block }]: merge labels into the current thread's
 * set (nil deletes a key); with a block, the previous set is restored
 * afterwards and the block's value returned. Any Ractor. */
static VALUE m_label(int argc, VALUE *argv, VALUE self)
{
    VALUE labels = Qnil;
    rb_scan_args(argc, argv, ":", &labels);
    if (NIL_P(labels)) labels = rb_hash_new();
    uint32_t cur = current_label();
    if (rperf_engine_running()) set_label(NUM2UINT(c_label_apply(self, UINT2NUM(cur), labels)));
    if (!rb_block_given_p()) return Qnil;
    return rb_ensure(yield_block, Qnil, restore_label, UINT2NUM(cur));
}

/* Rperf.labels: the current thread's labels (a frozen Hash; {} when none or
 * not running). Any Ractor. */
static VALUE m_labels(VALUE self)
{
    return c_label_set(self, UINT2NUM(current_label()));
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
    rb_define_module_function(m, "_c_label_apply", c_label_apply, 2);
    rb_define_module_function(m, "_c_label_set", c_label_set, 1);
    rb_define_singleton_method(m, "label", m_label, -1);
    rb_define_singleton_method(m, "labels", m_labels, 0);
}
