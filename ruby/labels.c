/*
 * labels.c — Rperf.label, Rperf.labels and the Rperf._c_label_* helpers:
 * merging labels into a thread's current set and building the set's
 * canonical bytes (label_codec.c), so that equal sets in any order or
 * encoding mix share one id in the table of label_table.c (which bounds
 * and releases them); and the Ruby objects of sets, made only on request.
 *
 * A label set lives in C memory as bytes: its keys and values (Strings
 * with their encoding, Symbols, Integers, Floats, true, false; values
 * that are not shareable as the bytes of their to_s) and the order they
 * were given in. Shareable values of other classes are kept as objects
 * (label_objects.c). No Hash is made when labels are applied: the merge
 * works on the bytes, a set seen before is found by them, and a new one
 * is stored as them. Rperf.labels builds the current set's frozen Hash
 * when called, and a result builds the Hashes of the sets it lists
 * (rperf_rb_label_sets); the profiler keeps none of them.
 *
 * Applying what this thread applied recently to the same current set is
 * a memo lookup (label_memo.c) under one lock. Ruby code holds label
 * *tokens* (label_table.c), never raw ids: a token kept across stop/start
 * or a window whose set was freed reads as the empty set.
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
 * Ractor; the table lock is only held around C work (no Ruby allocation).
 */
#include "rperf_ruby.h"
#include "label_codec.h"
#include "label_table.h"
#include "label_memo.h"

#include <ruby/encoding.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static VALUE empty_set;      /* {} */
static VALUE overflow_set;   /* {rperf_label_overflow: true} */
static VALUE sym_overflow;

/* ---- a set's Hash, built on request ------------------------------------------ */

static VALUE hash_of_copy(const rperf_label_copy_t *c)
{
    if (c->overflow) return overflow_set;
    if (c->npairs == 0) return empty_set;
    return rperf_rb_label_set_hash(c->bytes, c->len, c->order, c->npairs);
}

static VALUE hash_of_copy_v(VALUE c) { return hash_of_copy((const rperf_label_copy_t *)c); }

static VALUE free_copy_v(VALUE c)
{
    rperf_rb_ltab_copy_free((rperf_label_copy_t *)c);
    return Qnil;
}

/* The Hash of a copied set; a copy on the heap is freed whatever happens. */
static VALUE hash_of_copy_freeing(rperf_label_copy_t *c)
{
    if (c->block == c->inline_) return hash_of_copy(c);
    return rb_ensure(hash_of_copy_v, (VALUE)c, free_copy_v, (VALUE)c);
}

/* The Hash of the set a token names ({} when none or stale). */
static VALUE hash_of_token(uint64_t token)
{
    if (!token) return empty_set;
    rperf_label_copy_t c;
    rperf_rb_ltab_copy_init(&c);
    rperf_rb_ltab_lock();
    uint32_t id = rperf_rb_ltab_decode_locked(token);
    bool ok = id && rperf_rb_ltab_copy_locked(id, &c);
    rperf_rb_ltab_unlock();
    return ok ? hash_of_copy_freeing(&c) : empty_set;
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

/* ---- merging labels into a set, as bytes ------------------------------------- */

/* One pair of the merged set: its key and value slices in the merge
 * buffer, and the objects given now that the set keeps as objects
 * (Qundef: none, or a pair of the current set, which keeps them already). */
typedef struct mpair {
    size_t k, kn, v, vn;
    VALUE kobj, vobj;
} mpair_t;

typedef struct merge {
    uint64_t cur_token;
    VALUE labels;
    const rperf_memo_key_t *memo;
    rperf_lbuf_t enc;            /* every slice of the merged pairs */
    rperf_lbuf_t key;            /* the merged set's canonical bytes */
    rperf_label_copy_t cur;      /* the current set, copied out of the table */
    mpair_t *pairs;              /* in the order given (cur's, then new keys) */
    long n;
    VALUE *given;                /* labels' keys and values */
    long ngiven;
    uint64_t token;              /* the result */
} merge_t;

static void add_pair(merge_t *m, size_t k, size_t kn, size_t v, size_t vn)
{
    m->pairs[m->n++] = (mpair_t){ k, kn, v, vn, Qundef, Qundef };
}

/* Append a slice to the merge buffer; its offset. */
static size_t put_slice(merge_t *m, const char *p, size_t n)
{
    size_t at = m->enc.len;
    rperf_rb_lbuf_put(&m->enc, p, n);
    return at;
}

/* The current set's pairs, in the order they were given. The overflow set
 * merges as the pair it reads as. */
static void add_current_pairs(merge_t *m, rperf_label_pair_t *tmp)
{
    const rperf_label_copy_t *c = &m->cur;
    if (c->overflow) {
        size_t k = m->enc.len;
        rperf_rb_label_put_symbol(&m->enc, sym_overflow);
        size_t v = m->enc.len;
        rperf_rb_label_put_value(&m->enc, Qtrue);
        add_pair(m, k, v - k, v, m->enc.len - v);
        return;
    }
    if (!rperf_rb_label_split(c->bytes, c->len, c->npairs, tmp)) return;
    for (uint32_t i = 0; i < c->npairs; i++) {
        const rperf_label_pair_t *p = &tmp[c->order[i] < c->npairs ? c->order[i] : i];
        size_t k = put_slice(m, p->k, p->kn);
        size_t v = put_slice(m, p->v, p->vn);
        add_pair(m, k, p->kn, v, p->vn);
    }
}

static long find_pair(const merge_t *m, size_t k, size_t kn)
{
    for (long i = 0; i < m->n; i++)
        if (rperf_rb_label_same_key(m->enc.p + m->pairs[i].k, m->pairs[i].kn, m->enc.p + k, kn)) return i;
    return -1;
}

/* A value every Ractor may read: Strings and shareable values as they
 * are (a String is read as bytes), anything else as its to_s. */
static VALUE plain_value(VALUE v)
{
    if (RB_TYPE_P(v, T_STRING) || rb_ractor_shareable_p(v)) return v;
    return rb_obj_as_string(v);
}

/* Appends v's slice; v itself when the set keeps it as an object. */
static VALUE put_given(merge_t *m, VALUE v, size_t *at, size_t *n)
{
    *at = m->enc.len;
    rperf_rb_label_put_value(&m->enc, v);
    *n = m->enc.len - *at;
    return m->enc.p[*at] == RPERF_LABEL_TAG_OBJECT ? v : Qundef;
}

/* Merge one given pair: nil deletes the key, another value replaces the
 * key's value (the key keeps its place) or adds the pair at the end. */
static void merge_given(merge_t *m, VALUE key, VALUE val)
{
    VALUE k = plain_value(key);
    size_t ka, kn;
    VALUE kobj = put_given(m, k, &ka, &kn);
    long i = find_pair(m, ka, kn);
    if (i >= 0 || NIL_P(val)) m->enc.len = ka;      /* the key's slice is not needed */
    if (NIL_P(val)) {
        if (i < 0) return;
        memmove(m->pairs + i, m->pairs + i + 1, (size_t)(m->n - i - 1) * sizeof(*m->pairs));
        m->n--;
        return;
    }
    if (i < 0) {
        add_pair(m, ka, kn, 0, 0);
        m->pairs[m->n - 1].kobj = kobj;
        i = m->n - 1;
    }
    VALUE v = plain_value(val);
    m->pairs[i].vobj = put_given(m, v, &m->pairs[i].v, &m->pairs[i].vn);
    RB_GC_GUARD(k);
    RB_GC_GUARD(v);
}

static int collect_i(VALUE k, VALUE v, VALUE arg)
{
    merge_t *m = (merge_t *)arg;
    m->given[m->ngiven++] = k;
    m->given[m->ngiven++] = v;
    return ST_CONTINUE;
}

/* ---- the canonical bytes of the merged set -------------------------------------- */

static int cmp_bytes(const char *x, size_t xn, const char *y, size_t yn)
{
    int c = memcmp(x, y, xn < yn ? xn : yn);
    return c ? c : (xn > yn) - (xn < yn);
}

static bool key_before(const merge_t *m, uint32_t a, uint32_t b)
{
    const mpair_t *x = &m->pairs[a], *y = &m->pairs[b];
    return cmp_bytes(m->enc.p + x->k, x->kn, m->enc.p + y->k, y->kn) < 0;
}

/* ord[0, n) sorted by the key slices of the pairs they name (a set's keys
 * are distinct, so this orders the pairs); bottom-up merge sort. */
static void sort_by_key(const merge_t *m, uint32_t *ord, uint32_t *tmp, long n)
{
    for (long w = 1; w < n; w *= 2) {
        for (long lo = 0; lo < n; lo += 2 * w) {
            long mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            long a = lo, b = mid, o = lo;
            while (a < mid && b < hi) tmp[o++] = key_before(m, ord[b], ord[a]) ? ord[b++] : ord[a++];
            while (a < mid) tmp[o++] = ord[a++];
            while (b < hi) tmp[o++] = ord[b++];
        }
        memcpy(ord, tmp, (size_t)n * sizeof(*ord));
    }
}

static void add_obj(rperf_label_obj_t *objs, size_t *n, const merge_t *m, size_t at, size_t len, VALUE obj)
{
    if (m->enc.p[at] == RPERF_LABEL_TAG_OBJECT) objs[(*n)++] = (rperf_label_obj_t){ m->enc.p + at, len, obj };
}

/* The merged set as the table keeps it: pairs sorted by key (m->key),
 * order[i] the sorted index of the i-th given pair, and its kept objects. */
static void canonical_key(merge_t *m, uint32_t *order, rperf_label_obj_t *objs, size_t *nobjs)
{
    VALUE tmpv;
    uint32_t *ord = ALLOCV_N(uint32_t, tmpv, 2 * (size_t)m->n);
    for (long i = 0; i < m->n; i++) ord[i] = (uint32_t)i;
    sort_by_key(m, ord, ord + m->n, m->n);
    *nobjs = 0;
    for (long j = 0; j < m->n; j++) {
        const mpair_t *p = &m->pairs[ord[j]];
        rperf_rb_lbuf_put(&m->key, m->enc.p + p->k, p->kn);
        rperf_rb_lbuf_put(&m->key, m->enc.p + p->v, p->vn);
        order[ord[j]] = (uint32_t)j;
        add_obj(objs, nobjs, m, p->k, p->kn, p->kobj);
        add_obj(objs, nobjs, m, p->v, p->vn, p->vobj);
    }
    ALLOCV_END(tmpv);
}

/* The token of the merged set: found in the table (and memoised), or
 * interned now (the overflow set past the window cap). */
static uint64_t intern_merged(merge_t *m)
{
    VALUE tmpo, tmpj;
    uint32_t *order = ALLOCV_N(uint32_t, tmpo, (size_t)m->n);
    rperf_label_obj_t *objs = ALLOCV_N(rperf_label_obj_t, tmpj, 2 * (size_t)m->n);
    rperf_label_key_t k = { 0 };
    canonical_key(m, order, objs, &k.nobjs);
    k.bytes = m->key.p;
    k.len = m->key.len;
    k.hash = rperf_rb_ltab_hash(k.bytes, k.len);
    k.npairs = (uint32_t)m->n;
    k.order = order;
    k.objs = objs;
    rperf_rb_ltab_lock();
    int64_t id = rperf_rb_ltab_find_locked(k.bytes, k.len, k.hash);
    uint64_t token = id >= 0 ? rperf_rb_ltab_token_locked((uint32_t)id) : 0;
    if (id >= 0 && m->memo)
        rperf_rb_memo_put_locked(rperf_rb_ltab_epoch_locked(), m->cur_token, m->memo, token);
    if (id < 0) {
        id = rperf_rb_ltab_intern_locked(&k);
        if (id < 0) id = rperf_rb_ltab_overflow_locked();   /* out of memory */
        token = id > 0 ? rperf_rb_ltab_token_locked((uint32_t)id) : 0;
    }
    rperf_rb_ltab_unlock();
    ALLOCV_END(tmpo);
    ALLOCV_END(tmpj);
    return token;
}

static VALUE merge_body(VALUE arg)
{
    merge_t *m = (merge_t *)arg;
    if (m->cur_token) {
        rperf_rb_ltab_lock();
        uint32_t id = rperf_rb_ltab_decode_locked(m->cur_token);
        bool ok = id && rperf_rb_ltab_copy_locked(id, &m->cur);
        rperf_rb_ltab_unlock();
        if (!ok) m->cur.npairs = 0, m->cur.overflow = false;
    }
    long max = RHASH_SIZE(m->labels) + (long)m->cur.npairs + 1;
    VALUE tmpp, tmpc, tmpg;
    m->pairs = ALLOCV_N(mpair_t, tmpp, (size_t)max);
    m->given = ALLOCV_N(VALUE, tmpg, 2 * (size_t)RHASH_SIZE(m->labels) + 1);
    rperf_label_pair_t *cur = ALLOCV_N(rperf_label_pair_t, tmpc, (size_t)m->cur.npairs + 1);
    add_current_pairs(m, cur);
    rb_hash_foreach(m->labels, collect_i, (VALUE)m);
    for (long i = 0; i + 1 < m->ngiven; i += 2) merge_given(m, m->given[i], m->given[i + 1]);
    m->token = m->n ? intern_merged(m) : 0;
    ALLOCV_END(tmpp);
    ALLOCV_END(tmpc);
    ALLOCV_END(tmpg);
    return Qnil;
}

static VALUE merge_cleanup(VALUE arg)
{
    merge_t *m = (merge_t *)arg;
    rperf_rb_lbuf_free(&m->enc);
    rperf_rb_lbuf_free(&m->key);
    rperf_rb_ltab_copy_free(&m->cur);
    return Qnil;
}

/* The token of the set `cur_token` names merged with `labels` (nil
 * deletes a key; 0: the empty set). A set found in the table is recorded
 * in the memo under `memo` (NULL: not). */
static uint64_t apply(uint64_t cur_token, VALUE labels, const rperf_memo_key_t *memo)
{
    Check_Type(labels, T_HASH);
    merge_t m = { .cur_token = cur_token, .labels = labels, .memo = memo };
    rperf_rb_lbuf_init(&m.enc);
    rperf_rb_lbuf_init(&m.key);
    rperf_rb_ltab_copy_init(&m.cur);
    rb_ensure(merge_body, (VALUE)&m, merge_cleanup, (VALUE)&m);
    RB_GC_GUARD(labels);
    return m.token;
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
    const rperf_lbuf_t *ck;   /* the one-pair set's canonical bytes */
    uint64_t h;
    const rperf_memo_key_t *mk;
} single_t;

/* A thread with no labels: the one-pair set from the table (memoised), or
 * a new one made from the bytes (not memoised: a new set, or the overflow
 * set past the window cap, counts every application). */
static bool pick_single(rperf_thread_t *pt, uint64_t cur, const void *ctx)
{
    const single_t *s = ctx;
    if (cur != 0) return false;
    int64_t found = rperf_rb_ltab_find_locked(s->ck->p, s->ck->len, s->h);
    if (found > 0) {
        rperf_thread_set_label(pt, (uint32_t)found);
        rperf_rb_memo_put_locked(rperf_rb_ltab_epoch_locked(), 0, s->mk,
                                 rperf_rb_ltab_token_locked((uint32_t)found));
        return true;
    }
    static const uint32_t order[1] = { 0 };
    rperf_label_key_t k = { s->ck->p, s->ck->len, s->h, 1, order, NULL, 0 };
    int64_t id = rperf_rb_ltab_intern_locked(&k);
    if (id < 0) id = rperf_rb_ltab_overflow_locked();   /* out of memory */
    rperf_thread_set_label(pt, id > 0 ? (uint32_t)id : 0);
    return true;
}

bool rperf_rb_label_request_fast(const rperf_memo_key_t *mk, VALUE key, int enc, const char *p,
                                 long n, uint64_t *prev)
{
    if (rperf_rb_memo_present() && memo_relabel(mk, prev)) return true;
    if (!RB_SYMBOL_P(key)) return false;
    /* the one pair's canonical bytes, as a merge writes them */
    rperf_lbuf_t ck;
    rperf_rb_lbuf_init(&ck);
    rperf_rb_label_put_symbol(&ck, key);
    rperf_rb_label_put_string(&ck, enc, p, (size_t)n);
    single_t s = { &ck, rperf_rb_ltab_hash(ck.p, ck.len), mk };
    bool hit = relabel_locked(pick_single, &s, prev);
    rperf_rb_lbuf_free(&ck);
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
    return hash_of_token(current_token());
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
    return hash_of_token(token_of(token));
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

typedef struct sets_build {
    rperf_label_copy_t c;
    VALUE *hashes;            /* by id, in a temporary buffer (tmp) */
    VALUE tmp;
    uint32_t n;
    const uint8_t *used;
    size_t n_used;
} sets_build_t;

/* A result lists the sets its samples use, and no other: a server
 * labelling each request with its id applies tens of thousands of sets a
 * window, of which the samples use a few hundred, and a Hash for each of
 * the others would be garbage for the application's GC to age and sweep
 * at every snapshot. Ids keep their places (the Array is indexed by id);
 * the sets not listed read as the empty set. */
static bool listed(const sets_build_t *b, uint32_t id)
{
    return id < b->n_used && b->used[id];
}

/* The Hashes are held in a temporary buffer and the Array is made last:
 * an Array made first could age through the GCs of the build, and once
 * old (and garbage after the result is dropped) it would keep every
 * set's Hash alive through minor GCs until they were old too. */
static VALUE build_sets(VALUE arg)
{
    sets_build_t *b = (sets_build_t *)arg;
    b->hashes = ALLOCV_N(VALUE, b->tmp, b->n);
    b->hashes[0] = empty_set;
    for (uint32_t id = 1; id < b->n; id++) {
        b->hashes[id] = empty_set;
        if (!listed(b, id)) continue;
        rperf_rb_ltab_lock();
        bool ok = rperf_rb_ltab_copy_locked(id, &b->c);
        rperf_rb_ltab_unlock();
        if (ok) b->hashes[id] = hash_of_copy(&b->c);
    }
    return rb_ary_new_from_values(b->n, b->hashes);
}

static VALUE end_build(VALUE arg)
{
    sets_build_t *b = (sets_build_t *)arg;
    rperf_rb_ltab_copy_free(&b->c);
    if (b->tmp) ALLOCV_END(b->tmp);
    return Qnil;
}

/* GVL held, main Ractor (a result being made): the sets' Hashes, built
 * now, in an Array indexed by id. used[id] (ids below n_used) tells the
 * ids the result's samples use; every other id reads as the empty set. */
VALUE rperf_rb_label_sets(const uint8_t *used, size_t n_used)
{
    sets_build_t b = { .n = rperf_rb_ltab_count(), .used = used, .n_used = n_used };
    rperf_rb_ltab_copy_init(&b.c);
    return rb_ensure(build_sets, (VALUE)&b, end_build, (VALUE)&b);
}

uint32_t rperf_rb_label_set_count(void) { return rperf_rb_ltab_count(); }
uint64_t rperf_rb_labels_overflowed(void) { return rperf_rb_ltab_overflowed(); }
void rperf_rb_labels_mark(void) { rperf_rb_ltab_mark(); }

static VALUE frozen_shareable(VALUE h)
{
    rb_obj_freeze(h);
    rb_ractor_make_shareable(h);
    rb_gc_register_mark_object(h);
    return h;
}

void rperf_rb_labels_init(VALUE m)
{
    sym_overflow = ID2SYM(rb_intern("rperf_label_overflow"));
    empty_set = frozen_shareable(rb_hash_new());
    overflow_set = rb_hash_new();
    rb_hash_aset(overflow_set, sym_overflow, Qtrue);
    overflow_set = frozen_shareable(overflow_set);
    rperf_rb_ltab_init();
    rperf_rb_memo_init();
    rb_define_module_function(m, "_c_get_label", c_get_label, 0);
    rb_define_module_function(m, "_c_set_label", c_set_label, 1);
    rb_define_module_function(m, "_c_label_apply", c_label_apply, 2);
    rb_define_module_function(m, "_c_label_set", c_label_set, 1);
    rb_define_singleton_method(m, "label", m_label, -1);
    rb_define_singleton_method(m, "labels", m_labels, 0);
}
