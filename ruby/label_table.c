/*
 * label_table.c — the run's interned label sets, kept in C memory: id ->
 * the set's canonical bytes (its pairs, each a key slice and a value
 * slice, sorted: label_codec.c) and the order its pairs were given in,
 * found by those bytes. No Ruby object is made or held for a set: the
 * Hash of Rperf.labels and of a result's :label_sets is rebuilt from the
 * bytes on request (labels.c), so a server labelling every request with
 * its own URL adds no object that Ruby's GC has to mark, sweep or
 * promote. Keys and values that cannot be rebuilt from bytes (shareable
 * objects of other classes) are kept by label_objects.c, referenced from
 * here per set. Bounded for servers that run for days with millions of
 * distinct URLs:
 *
 * - Window cap: at most `cap` new sets per snapshot window (start option
 *   max_label_sets:, default 65,536). Past it, applications fold into one
 *   overflow set {rperf_label_overflow: true}, counted; never an exception.
 * - Release at snapshot(clear: true): sets no live thread is labelled with
 *   are quarantined for one window (samples pushed before the clear and
 *   aggregated after it still find their set; a label applied again finds
 *   and revives the same id); at the next clear the ones still unused are
 *   freed (bytes freed, kept objects unreferenced, id reusable).
 * - Tokens: Ruby code holds (entry epoch << 32 | id). An entry's epoch is
 *   the table's epoch when the id was (re)assigned, and the table's epoch
 *   moves at every start and clear, so a token whose id was freed and given
 *   to another set, or a token of an earlier run, reads as the empty set.
 *
 * Locking: one mutex (`mu`) over everything here (and label_objects.c),
 * taken only around C work (no Ruby call, no Ruby allocation, no interrupt
 * check), so a thread holding it never waits for a GC barrier, and no GC
 * marks while a thread is inside it (marking stops every other Ractor at a
 * safe point, never inside this C code).
 *
 * Contexts: rperf_rb_ltab_* run with the calling Ractor's GVL held (any
 * Ractor) and take `mu` themselves unless named *_locked (caller holds it
 * via rperf_rb_ltab_lock); rperf_rb_ltab_mark inside GC (no lock); the
 * atfork handlers inside fork().
 */
#include "rperf_ruby.h"
#include "label_table.h"
#include "label_codec.h"
#include "label_objects.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS (1u << 24)               /* 16M ids */

enum { ST_FREE = 0, ST_LIVE = 1, ST_QUAR = 2 };

typedef struct entry {
    uint32_t *block;       /* order[npairs], then the canonical bytes */
    size_t len;            /* of the bytes */
    uint64_t hash;
    uint32_t epoch;
    uint32_t npairs;
    uint8_t state;
    bool overflow;         /* the overflow set */
    bool has_objects;      /* holds kept objects (label_objects.c) */
} entry_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry_t *entries;                     /* under mu, by id */
static size_t entries_cap;
static uint32_t *index_tab;                  /* under mu: id + 1, 0 = empty */
static size_t index_cap;
static _Atomic uint32_t count;               /* ids handed out: [1, count) */
static uint32_t *free_ids, *quar_ids;        /* under mu */
static size_t n_free, n_quar, free_cap, quar_cap;
static _Atomic uint32_t epoch;
static uint32_t cap = RPERF_LABEL_CAP_DEFAULT;
static uint32_t window_new;                  /* sets interned this window */
static _Atomic uint64_t overflowed;          /* applications folded */
static uint32_t overflow_id;                 /* 0 = not interned yet */
static size_t live_count;                    /* under mu: entries in the index (LIVE or QUAR) */

static const char overflow_key[] = "\1rperf.overflow";

void rperf_rb_ltab_lock(void) { pthread_mutex_lock(&mu); }
void rperf_rb_ltab_unlock(void) { pthread_mutex_unlock(&mu); }

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

uint64_t rperf_rb_ltab_hash(const char *bytes, size_t len) { return fnv1a(bytes, len); }

static const char *entry_bytes(const entry_t *e) { return (const char *)(e->block + e->npairs); }

/* ---- index (under mu) ---------------------------------------------------- */

static void index_insert(uint32_t id)
{
    size_t i = entries[id].hash & (index_cap - 1);
    while (index_tab[i]) i = (i + 1) & (index_cap - 1);
    index_tab[i] = id + 1;
}

/* Rebuild with room for `live` entries: every LIVE or QUAR entry. */
static int index_rebuild(size_t live)
{
    size_t c = 1024;
    while (c < (live + 1) * 2) c *= 2;
    uint32_t *t = calloc(c, sizeof(*t));
    if (!t) return -1;
    free(index_tab);
    index_tab = t;
    index_cap = c;
    uint32_t n = atomic_load_explicit(&count, memory_order_relaxed);
    for (uint32_t id = 1; id < n; id++)
        if (entries[id].state != ST_FREE) index_insert(id);
    return 0;
}

/* A set about to be used: found by its bytes (a quarantined one is revived,
 * keeping its id), or -1. */
int64_t rperf_rb_ltab_find_locked(const char *bytes, size_t len, uint64_t h)
{
    if (!index_cap) return -1;
    for (size_t i = h & (index_cap - 1); index_tab[i]; i = (i + 1) & (index_cap - 1)) {
        entry_t *e = &entries[index_tab[i] - 1];
        if (e->hash == h && e->len == len && memcmp(entry_bytes(e), bytes, len) == 0) {
            e->state = ST_LIVE;
            return index_tab[i] - 1;
        }
    }
    return -1;
}

static int push_id(uint32_t **arr, size_t *n, size_t *c, uint32_t id)
{
    if (*n == *c) {
        size_t nc = *c ? *c * 2 : 256;
        uint32_t *a = realloc(*arr, nc * sizeof(**arr));
        if (!a) return -1;
        *arr = a;
        *c = nc;
    }
    (*arr)[(*n)++] = id;
    return 0;
}

/* A fresh id: a freed one, or the next one. -1 when out of memory. */
static int64_t take_id(void)
{
    if (n_free) return free_ids[--n_free];
    uint32_t n = atomic_load_explicit(&count, memory_order_relaxed);
    if (n >= MAX_IDS) return -1;
    if (n >= entries_cap) {
        size_t nc = entries_cap ? entries_cap * 2 : 256;
        entry_t *e = realloc(entries, nc * sizeof(*e));
        if (!e) return -1;
        memset(e + entries_cap, 0, (nc - entries_cap) * sizeof(*e));
        entries = e;
        entries_cap = nc;
    }
    atomic_store_explicit(&count, n + 1, memory_order_release);
    return n;
}

/* ---- kept objects of an entry (under mu) ------------------------------------- */

static void ref_objects(const rperf_label_key_t *k)
{
    for (size_t i = 0; i < k->nobjs; i++) {
        /* out of memory, or gone: the set reads that object's inspect */
        (void)rperf_rb_lobj_ref_locked(k->objs[i].slice, k->objs[i].len, k->objs[i].obj);
    }
}

static void unref_objects(const entry_t *e)
{
    const char *p = entry_bytes(e);
    for (size_t at = 0, n; at < e->len; at += n) {
        n = rperf_rb_label_slice_len(p + at, e->len - at);
        if (!n) return;
        if (p[at] == RPERF_LABEL_TAG_OBJECT) rperf_rb_lobj_unref_locked(p + at, n);
    }
}

/* ---- adding entries (under mu) -------------------------------------------------- */

/* A copy of the key's order and bytes in one block, or NULL. */
static uint32_t *new_block(const rperf_label_key_t *k)
{
    size_t order_bytes = (size_t)k->npairs * sizeof(uint32_t);
    uint32_t *b = malloc(order_bytes + k->len + 1);
    if (!b) return NULL;
    if (k->npairs) memcpy(b, k->order, order_bytes);
    memcpy((char *)b + order_bytes, k->bytes, k->len);
    return b;
}

/* A new LIVE entry for `k` (or an existing one with the same bytes).
 * Returns the id, -1 when out of memory. */
static int64_t add_locked(const rperf_label_key_t *k, bool overflow)
{
    int64_t found = rperf_rb_ltab_find_locked(k->bytes, k->len, k->hash);
    if (found >= 0) return found;
    if ((live_count + 1) * 2 > index_cap && index_rebuild(live_count + 1) < 0) return -1;
    uint32_t *block = new_block(k);
    if (!block) return -1;
    int64_t id = take_id();
    if (id < 0) {
        free(block);
        return -1;
    }
    entries[id] = (entry_t){ block, k->len, k->hash, atomic_load(&epoch), k->npairs, ST_LIVE, overflow,
                             k->nobjs > 0 };
    ref_objects(k);
    index_insert((uint32_t)id);
    live_count++;
    return id;
}

int64_t rperf_rb_ltab_intern_locked(const rperf_label_key_t *k)
{
    int64_t found = rperf_rb_ltab_find_locked(k->bytes, k->len, k->hash);
    if (found >= 0) return found;
    if (window_new >= cap) return rperf_rb_ltab_overflow_locked();
    int64_t id = add_locked(k, false);
    if (id >= 0) window_new++;
    return id;
}

/* under mu: the overflow set's id (interned on first use, kept for the
 * run), counting one folded application. */
int64_t rperf_rb_ltab_overflow_locked(void)
{
    atomic_fetch_add_explicit(&overflowed, 1, memory_order_relaxed);
    if (overflow_id && entries[overflow_id].state == ST_LIVE) return overflow_id;
    size_t n = sizeof(overflow_key) - 1;
    rperf_label_key_t k = { overflow_key, n, fnv1a(overflow_key, n), 0, NULL, NULL, 0 };
    int64_t id = add_locked(&k, true);
    if (id > 0) overflow_id = (uint32_t)id;
    return id;
}

/* ---- ids, tokens, content --------------------------------------------------- */

uint64_t rperf_rb_ltab_token_locked(uint32_t id)
{
    if (id == 0 || id >= atomic_load_explicit(&count, memory_order_relaxed) ||
        entries[id].state == ST_FREE)
        return 0;
    return ((uint64_t)entries[id].epoch << 32) | id;
}

uint32_t rperf_rb_ltab_decode_locked(uint64_t token)
{
    uint32_t id = (uint32_t)token;
    if (id == 0 || id >= atomic_load_explicit(&count, memory_order_relaxed)) return 0;
    entry_t *e = &entries[id];
    return e->state != ST_FREE && e->epoch == (uint32_t)(token >> 32) ? id : 0;
}

uint32_t rperf_rb_ltab_epoch_locked(void) { return atomic_load(&epoch); }

void rperf_rb_ltab_copy_init(rperf_label_copy_t *c)
{
    memset(c, 0, sizeof(*c));
    c->block = c->inline_;
    c->block_cap = sizeof(c->inline_);
}

void rperf_rb_ltab_copy_free(rperf_label_copy_t *c)
{
    if (c->block != c->inline_) free(c->block);
    rperf_rb_ltab_copy_init(c);
}

/* Room for n bytes in c's block (malloc, never Ruby's allocator: the
 * caller holds mu). */
static bool copy_reserve(rperf_label_copy_t *c, size_t n)
{
    if (n <= c->block_cap) return true;
    void *b = malloc(n);
    if (!b) return false;
    if (c->block != c->inline_) free(c->block);
    c->block = b;
    c->block_cap = n;
    return true;
}

bool rperf_rb_ltab_copy_locked(uint32_t id, rperf_label_copy_t *c)
{
    if (id == 0 || id >= atomic_load_explicit(&count, memory_order_relaxed)) return false;
    const entry_t *e = &entries[id];
    size_t order_bytes = (size_t)e->npairs * sizeof(uint32_t);
    if (e->state == ST_FREE || !copy_reserve(c, order_bytes + e->len)) return false;
    memcpy(c->block, e->block, order_bytes + e->len);
    c->order = c->block;
    c->bytes = (const char *)c->block + order_bytes;
    c->len = e->len;
    c->npairs = e->npairs;
    c->overflow = e->overflow;
    return true;
}

uint32_t rperf_rb_ltab_count(void) { return atomic_load_explicit(&count, memory_order_acquire); }
uint64_t rperf_rb_ltab_overflowed(void) { return atomic_load_explicit(&overflowed, memory_order_relaxed); }

/* ---- run and window boundaries -------------------------------------------- */

static void free_entry(uint32_t id)
{
    entry_t *e = &entries[id];
    if (e->has_objects) unref_objects(e);
    free(e->block);
    *e = (entry_t){ .state = ST_FREE };
}

/* main Ractor, GVL held, at start: every id free, every token stale. */
void rperf_rb_ltab_reset(uint32_t window_cap)
{
    pthread_mutex_lock(&mu);
    uint32_t n = atomic_load_explicit(&count, memory_order_relaxed);
    for (uint32_t id = 1; id < n; id++)
        if (entries[id].state != ST_FREE) free_entry(id);
    atomic_store_explicit(&count, 1, memory_order_release);   /* id 0 = {} */
    atomic_fetch_add(&epoch, 1);
    n_free = n_quar = 0;
    live_count = 0;
    window_new = 0;
    overflow_id = 0;
    cap = window_cap ? window_cap : RPERF_LABEL_CAP_DEFAULT;
    atomic_store(&overflowed, 0);
    if (index_tab) memset(index_tab, 0, index_cap * sizeof(*index_tab));
    pthread_mutex_unlock(&mu);
}

/* snapshot(clear: true), main Ractor, GVL held, worker parked, caller holds
 * mu (so no label call of another Ractor changes a thread's set meanwhile):
 * `referenced` lists the ids live threads are labelled with now. */
void rperf_rb_ltab_window_clear_locked(const uint32_t *referenced, size_t n_ref)
{
    uint32_t n = atomic_load_explicit(&count, memory_order_relaxed);
    /* last window's quarantine is freed, unless a thread came back to it */
    for (size_t i = 0; i < n_quar; i++) {
        uint32_t id = quar_ids[i];
        if (entries[id].state != ST_QUAR) continue;
        free_entry(id);
        if (push_id(&free_ids, &n_free, &free_cap, id) < 0) {
            /* out of memory: the id is lost until the next start */
        }
    }
    n_quar = 0;
    /* every set goes to quarantine but the referenced ones (and overflow);
     * quarantined sets stay findable, and a label applied again revives them */
    for (uint32_t id = 1; id < n; id++)
        if (entries[id].state == ST_LIVE && id != overflow_id) entries[id].state = ST_QUAR;
    for (size_t i = 0; i < n_ref; i++) {
        uint32_t id = referenced[i];
        if (id && id < n && entries[id].state == ST_QUAR) entries[id].state = ST_LIVE;
    }
    live_count = 0;
    for (uint32_t id = 1; id < n; id++) {
        if (entries[id].state == ST_FREE) continue;
        live_count++;
        if (entries[id].state == ST_QUAR && push_id(&quar_ids, &n_quar, &quar_cap, id) < 0)
            entries[id].state = ST_LIVE;   /* out of memory: keep it */
    }
    index_rebuild(live_count);
    atomic_fetch_add(&epoch, 1);
    window_new = 0;
    atomic_store(&overflowed, 0);
}

/* ---- GC ------------------------------------------------------------------------- */

/* Inside GC: the sets themselves are C memory; only their kept objects
 * (label_objects.c) are Ruby objects. */
void rperf_rb_ltab_mark(void) { rperf_rb_lobj_mark(); }

/* ---- fork: the mutex is held across fork() and made anew in the child --- */

static void fork_prepare(void) { pthread_mutex_lock(&mu); }
static void fork_parent(void) { pthread_mutex_unlock(&mu); }
static void fork_child(void) { pthread_mutex_init(&mu, NULL); }

void rperf_rb_ltab_init(void)
{
    atomic_store(&count, 1);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
