/*
 * labels.c — Rperf.label, Rperf.labels and the Rperf._c_label_* helpers:
 * merging labels into a thread's current set and building the set's
 * canonical key, so that equal sets in any order or encoding mix share one
 * id in the table of label_table.c (which bounds, releases and marks them).
 *
 * A label set is a frozen, Ractor-shareable Hash (values that are not
 * shareable are stored as frozen String copies of their to_s). Applying
 * labels to a set seen before allocates no Hash (Rperf.label per request is
 * the common case), and applying what this thread applied recently to the
 * same current set is a memo lookup (label_memo.c) under one lock. Ruby
 * code holds label *tokens* (label_table.c), never raw ids: a token kept
 * across stop/start or a window whose set was freed reads as the empty set.
 *
 * Rperf.label and Rperf.labels themselves are C methods, so a tracer sees
 * the public call and the user's block only. Label values are converted
 * without Ruby calls, except for values that are neither shareable nor
 * Strings (their to_s) and shareable objects of other classes (inspect, for
 * the key): those calls are visible to tracers.
 *
 * A thread's label changes inside the engine's enter/leave bracket (stop,
 * release and start never meet one halfway) and under the table's lock (a
 * snapshot clear sees every thread's set as it is).
 *
 * Contexts: every function runs with the calling Ractor's GVL held, in any
 * Ractor; the table lock is only held around C work.
 */
#include "rperf_ruby.h"
#include "label_table.h"
#include "label_memo.h"

#include <ruby/encoding.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static VALUE empty_set;

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

/* A String value's bytes: encoding index and content. */
static void put_string_bytes(buf_t *b, int enc, const char *p, long n)
{
    buf_put(b, "s", 1);
    buf_put(b, &enc, sizeof(enc));
    put_tagged(b, ':', p, (size_t)n);
}

/* One object as bytes: the same bytes iff the same label value. */
static void put_value(buf_t *b, VALUE v)
{
    if (RB_TYPE_P(v, T_STRING)) {
        put_string_bytes(b, rb_enc_get_index(v), RSTRING_PTR(v), RSTRING_LEN(v));
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

/* Order of two byte strings: memcmp, then the shorter first. */
static int cmp_bytes(const char *x, size_t xn, const char *y, size_t yn)
{
    int c = memcmp(x, y, xn < yn ? xn : yn);
    return c ? c : (xn > yn) - (xn < yn);
}

/* The key of a merged set: pairs sorted by their bytes (a set's keys are
 * distinct, so this is the order of the keys' bytes), so equal sets in any
 * order give the same bytes. May call Ruby (inspect): no lock held.
 *
 * All pairs' bytes go into one buffer, sorted through offsets: the frame
 * stays about 1 KiB. (One 512-byte buffer per pair made it 17 KiB, and a
 * thread's first label then touched stack pages no other code reaches:
 * a page fault, and a TLB shootdown when the thread exited and glibc
 * released its unused stack, ~10 us per fresh thread of a
 * thread-per-connection server.) */
static void canonical_key(const pairs_t *p, buf_t *out)
{
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
    long n = p->n;
    buf_t all = { .p = NULL, .len = 0, .cap = sizeof(all.inline_) };
    all.p = all.inline_;
    size_t off[INLINE_PAIRS + 1];
    int ord[INLINE_PAIRS];
    for (long i = 0; i < n; i++) {
        off[i] = all.len;
        put_value(&all, p->k[i]);
        put_value(&all, p->v[i]);
        ord[i] = (int)i;
    }
    off[n] = all.len;
    /* insertion sort of at most INLINE_PAIRS offsets (all.p is final now) */
    for (long i = 1; i < n; i++) {
        int e = ord[i];
        long j = i;
        while (j > 0 && cmp_bytes(all.p + off[ord[j - 1]], off[ord[j - 1] + 1] - off[ord[j - 1]],
                                  all.p + off[e], off[e + 1] - off[e]) > 0) {
            ord[j] = ord[j - 1];
            j--;
        }
        ord[j] = e;
    }
    for (long i = 0; i < n; i++)
        put_tagged(out, 'p', all.p + off[ord[i]], off[ord[i] + 1] - off[ord[i]]);
    if (all.p != all.inline_) ruby_xfree(all.p);
}

/* ---- a thread's current set ------------------------------------------------ */

/* The token of the running thread's current set (0: none, or not running). */
static uint64_t current_token(void)
{
    if (!rperf_engine_enter()) return 0;
    rperf_thread_t *pt = rperf_rb_current_thread(false);
    uint32_t id = pt ? rperf_thread_label(pt) : 0;
    rperf_engine_leave();
    if (!id) return 0;
    rperf_rb_ltab_lock();
    uint64_t t = rperf_rb_ltab_token_locked(id);
    rperf_rb_ltab_unlock();
    return t;
}

/* Label the running thread with the set a token names (a stale token: the
 * empty set). Not running: nothing to label (as if stopped just before). */
static void set_token(uint64_t token)
{
    if (!rperf_engine_running()) return;
    rperf_rb_ltab_lock();
    uint32_t id = rperf_rb_ltab_decode_locked(token);
    if (rperf_engine_enter()) {
        rperf_thread_t *pt = rperf_rb_current_thread(true);
        if (pt) rperf_thread_set_label(pt, id);
        rperf_engine_leave();
    }
    rperf_rb_ltab_unlock();
}

static VALUE token_value(uint64_t t) { return ULL2NUM(t); }
static uint64_t token_of(VALUE v) { return NIL_P(v) ? 0 : NUM2ULL(v); }

/* The current set's Hash for a token ({} when none or stale). The Hash is
 * read under the lock; on this thread's stack it stays alive. */
static VALUE set_of(uint64_t token)
{
    if (!token) return empty_set;
    rperf_rb_ltab_lock();
    uint32_t id = rperf_rb_ltab_decode_locked(token);
    VALUE h = id ? rperf_rb_ltab_set(id) : Qnil;
    rperf_rb_ltab_unlock();
    return NIL_P(h) ? empty_set : h;
}

/* The token of the set `cur` merged with `labels` (nil deletes a key). A
 * set found in the table is recorded in the memo under `memo` (NULL: not). */
static uint64_t apply(uint64_t cur_token, VALUE labels, const rperf_memo_key_t *memo)
{
    Check_Type(labels, T_HASH);
    VALUE cur = cur_token ? set_of(cur_token) : Qnil;
    if (cur == empty_set) cur = Qnil;
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
        return 0;
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
    uint64_t h = rperf_rb_ltab_hash(key.p, key.len);
    /* Seen before: no Hash to build (the common case, e.g. per request). */
    rperf_rb_ltab_lock();
    int64_t id = rperf_rb_ltab_find_locked(key.p, key.len, h);
    uint64_t token = id >= 0 ? rperf_rb_ltab_token_locked((uint32_t)id) : 0;
    if (id >= 0 && memo) rperf_rb_memo_put_locked(rperf_rb_ltab_epoch_locked(), cur_token, memo, token);
    rperf_rb_ltab_unlock();
    if (id < 0) {
        VALUE set = rb_hash_new_capa(p.n);
        for (long i = 0; i < p.n; i++) rb_hash_aset(set, p.k[i], p.v[i]);
        rb_obj_freeze(set);
        rb_ractor_make_shareable(set);
        rperf_rb_ltab_lock();      /* re-checks: another thread may have won */
        id = rperf_rb_ltab_intern_locked(key.p, key.len, h, set);
        if (id < 0) id = rperf_rb_ltab_overflow_locked();   /* out of memory */
        token = id > 0 ? rperf_rb_ltab_token_locked((uint32_t)id) : 0;
        rperf_rb_ltab_unlock();
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
    return token;
}

/* Relabels the running thread under the table's lock and enter/leave:
 * `pick` sees the thread and its current set's token and labels it or not
 * (returns whether it did); *prev is then that token. Not running, or no
 * thread state: false. */
typedef bool (*relabel_pick_fn)(rperf_thread_t *pt, uint64_t cur, const void *ctx);

static bool relabel_locked(relabel_pick_fn pick, const void *ctx, uint64_t *prev)
{
    bool hit = false;
    uint64_t cur = 0;
    rperf_rb_ltab_lock();
    if (rperf_engine_enter()) {
        rperf_thread_t *pt = rperf_rb_current_thread(true);
        if (pt) {
            uint32_t id = rperf_thread_label(pt);
            cur = id ? rperf_rb_ltab_token_locked(id) : 0;
            hit = pick(pt, cur, ctx);
        }
        rperf_engine_leave();
    }
    rperf_rb_ltab_unlock();
    if (hit) *prev = cur;
    return hit;
}

/* The memo's hit: the result of applying mk to the current set. */
static bool pick_from_memo(rperf_thread_t *pt, uint64_t cur, const void *ctx)
{
    uint64_t next;
    if (!rperf_rb_memo_find_locked(rperf_rb_ltab_epoch_locked(), cur, ctx, &next)) return false;
    rperf_thread_set_label(pt, (uint32_t)next);
    return true;
}

static bool memo_relabel(const rperf_memo_key_t *mk, uint64_t *prev)
{
    return mk->ok && relabel_locked(pick_from_memo, mk, prev);
}

typedef struct single {
    const buf_t *ck;          /* the one-pair set's canonical bytes */
    uint64_t h;
    const rperf_memo_key_t *mk;
} single_t;

/* A thread with no labels: the one-pair set from the table, memoised. */
static bool pick_single(rperf_thread_t *pt, uint64_t cur, const void *ctx)
{
    const single_t *s = ctx;
    int64_t found = cur == 0 ? rperf_rb_ltab_find_locked(s->ck->p, s->ck->len, s->h) : -1;
    if (found <= 0) return false;
    rperf_thread_set_label(pt, (uint32_t)found);
    rperf_rb_memo_put_locked(rperf_rb_ltab_epoch_locked(), 0, s->mk,
                             rperf_rb_ltab_token_locked((uint32_t)found));
    return true;
}

bool rperf_rb_label_request_fast(const rperf_memo_key_t *mk, VALUE key, int enc, const char *p,
                                 long n, uint64_t *prev)
{
    if (rperf_rb_memo_present() && memo_relabel(mk, prev)) return true;
    if (!RB_SYMBOL_P(key)) return false;
    /* canonical_key of the one pair, as put_value writes it */
    buf_t pair = { .p = NULL, .len = 0, .cap = sizeof(pair.inline_) };
    pair.p = pair.inline_;
    VALUE name = rb_sym2str(key);
    put_tagged(&pair, 'y', RSTRING_PTR(name), (size_t)RSTRING_LEN(name));
    put_string_bytes(&pair, enc, p, n);
    buf_t ck = { .p = NULL, .len = 0, .cap = sizeof(ck.inline_) };
    ck.p = ck.inline_;
    put_tagged(&ck, 'p', pair.p, pair.len);
    single_t s = { &ck, rperf_rb_ltab_hash(ck.p, ck.len), mk };
    bool hit = relabel_locked(pick_single, &s, prev);
    if (pair.p != pair.inline_) ruby_xfree(pair.p);
    if (ck.p != ck.inline_) ruby_xfree(ck.p);
    RB_GC_GUARD(name);
    return hit;
}

/* Running: merge labels (a Hash; mk its memo key) into the running
 * thread's set in full, recording the result in the memo when the set was
 * known already; returns the token of the set it had. */
uint64_t rperf_rb_label_merge(VALUE labels, const rperf_memo_key_t *mk)
{
    uint64_t cur = current_token();
    set_token(apply(cur, labels, mk->ok ? mk : NULL));
    return cur;
}

/* Running: merge labels into the running thread's set; returns the token
 * of the set it had. A memo hit, else the merge in full. */
static uint64_t relabel(VALUE labels)
{
    rperf_memo_key_t mk;
    rperf_rb_memo_key(labels, &mk);
    uint64_t cur;
    if (rperf_rb_memo_present() && memo_relabel(&mk, &cur)) return cur;
    return rperf_rb_label_merge(labels, &mk);
}

/* ---- Rperf.label / Rperf.labels ------------------------------------------------ */

static VALUE yield_block(VALUE unused)
{
    (void)unused;
    return rb_yield_values(0);
}

static VALUE restore_token(VALUE token)
{
    set_token(token_of(token));
    return Qnil;
}

/* A labelled block's start: merge labels (a Hash or nil) into the running
 * thread's set; returns what rperf_rb_label_restore takes at its end (the
 * set it had). */
VALUE rperf_rb_label_push(VALUE labels)
{
    return token_value(!NIL_P(labels) && rperf_engine_running() ? relabel(labels) : current_token());
}

void rperf_rb_label_restore(VALUE token) { set_token(token_of(token)); }

/* Rperf.label(**labels) [{ block }]: merge labels into the current thread's
 * set (nil deletes a key); with a block, the previous set is restored
 * afterwards and the block's value returned. Any Ractor. */
static VALUE m_label(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    VALUE labels = Qnil;
    rb_scan_args(argc, argv, ":", &labels);
    VALUE cur = rperf_rb_label_push(labels);
    if (!rb_block_given_p()) return Qnil;
    return rb_ensure(yield_block, Qnil, restore_token, cur);
}

/* Rperf.labels: the current thread's labels (a frozen Hash; {} when none or
 * not running). Any Ractor. */
static VALUE m_labels(VALUE self)
{
    (void)self;
    return set_of(current_token());
}

/* _c_get_label -> the current thread's token; _c_set_label(token);
 * _c_label_apply(token, labels) -> token; _c_label_set(token) -> Hash. */
static VALUE c_get_label(VALUE self)
{
    (void)self;
    return token_value(current_token());
}

static VALUE c_set_label(VALUE self, VALUE token)
{
    (void)self;
    set_token(token_of(token));
    return Qnil;
}

static VALUE c_label_apply(VALUE self, VALUE cur, VALUE labels)
{
    (void)self;
    return token_value(apply(token_of(cur), labels, NULL));
}

static VALUE c_label_set(VALUE self, VALUE token)
{
    (void)self;
    return set_of(token_of(token));
}

/* ---- run and window boundaries, results ----------------------------------------- */

void rperf_rb_labels_reset(uint32_t window_cap) { rperf_rb_ltab_reset(window_cap); }

typedef struct refs {
    uint32_t *ids;
    size_t n, cap;
} refs_t;

static void collect_ref(uint32_t id, void *ctx)
{
    refs_t *r = ctx;
    if (!id) return;
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 64;
        uint32_t *a = realloc(r->ids, nc * sizeof(*a));
        if (!a) return;    /* out of memory: that set is quarantined anyway */
        r->ids = a;
        r->cap = nc;
    }
    r->ids[r->n++] = id;
}

/* snapshot(clear: true), worker parked: release the closed window's sets
 * that no thread is labelled with now. */
void rperf_rb_labels_window_clear(void)
{
    refs_t r = { NULL, 0, 0 };
    rperf_rb_ltab_lock();
    rperf_engine_each_thread_label(collect_ref, &r);
    rperf_rb_ltab_window_clear_locked(r.ids, r.n);
    rperf_rb_ltab_unlock();
    free(r.ids);
}

VALUE rperf_rb_label_sets(void) { return rperf_rb_ltab_sets(empty_set); }
uint32_t rperf_rb_label_set_count(void) { return rperf_rb_ltab_count(); }
uint64_t rperf_rb_labels_overflowed(void) { return rperf_rb_ltab_overflowed(); }
void rperf_rb_labels_mark(bool minor) { rperf_rb_ltab_mark(minor); }

void rperf_rb_labels_init(VALUE m)
{
    empty_set = rb_obj_freeze(rb_hash_new());
    rb_ractor_make_shareable(empty_set);
    rb_gc_register_mark_object(empty_set);
    rperf_rb_ltab_init();
    rperf_rb_memo_init();
    rb_define_module_function(m, "_c_get_label", c_get_label, 0);
    rb_define_module_function(m, "_c_set_label", c_set_label, 1);
    rb_define_module_function(m, "_c_label_apply", c_label_apply, 2);
    rb_define_module_function(m, "_c_label_set", c_label_set, 1);
    rb_define_singleton_method(m, "label", m_label, -1);
    rb_define_singleton_method(m, "labels", m_labels, 0);
}
