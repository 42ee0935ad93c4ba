/*
 * label_table.c — the run's interned label sets: id -> frozen, shareable
 * Hash, found by canonical key bytes (built by labels.c). Bounded for
 * servers that run for days with millions of distinct URLs:
 *
 * - Window cap: at most `cap` new sets per snapshot window (start option
 *   max_label_sets:, default 65,536). Past it, applications fold into one
 *   overflow set {rperf_label_overflow: true}, counted; never an exception.
 * - Release at snapshot(clear: true): sets no live thread is labelled with
 *   are quarantined for one window (samples pushed before the clear and
 *   aggregated after it still find their Hash; a label applied again finds
 *   and revives the same id); at the next clear the ones still unused are
 *   freed (Hash unpinned, key bytes freed, id reusable).
 * - Tokens: Ruby code holds (entry epoch << 32 | id). An entry's epoch is
 *   the table's epoch when the id was (re)assigned, and the table's epoch
 *   moves at every start and clear, so a token whose id was freed and given
 *   to another set, or a token of an earlier run, reads as the empty set.
 * - Minor GCs: only sets made since they were last seen old are marked
 *   (a list of young ids), so a minor GC costs what changed.
 *
 * Locking: one mutex (`mu`) over the index, the key bytes, the states and
 * the free lists, taken only around C work (no Ruby call, no Ruby
 * allocation, no interrupt check), so a thread holding it never waits for a
 * GC barrier. Hash VALUEs live in fixed chunks that never move; the mark
 * function reads them without the lock (marking stops every other Ractor
 * at a safe point, never inside this C code).
 *
 * Contexts: rperf_rb_ltab_* run with the calling Ractor's GVL held (any
 * Ractor) and take `mu` themselves unless named *_locked (caller holds it
 * via rperf_rb_ltab_lock); rperf_rb_ltab_mark inside GC (no lock); the
 * atfork handlers inside fork().
 */
#include "rperf_ruby.h"
#include "label_table.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_BITS 10
#define CHUNK (1u << CHUNK_BITS)
#define MAX_CHUNKS 16384u               /* 16M ids */

enum { ST_FREE = 0, ST_LIVE = 1, ST_QUAR = 2 };

typedef struct entry {
    char *bytes;
    size_t len;
    uint64_t hash;
    uint32_t epoch;
    uint8_t state;
} entry_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static VALUE *_Atomic chunks[MAX_CHUNKS];   /* Hash VALUEs (Qnil when free) */
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
static uint32_t *young_ids;                  /* ids whose Hash may be young */
static size_t n_young, young_cap;
static bool young_lost;                      /* out of memory: mark all */
static VALUE overflow_set;

void rperf_rb_ltab_lock(void) { pthread_mutex_lock(&mu); }
void rperf_rb_ltab_unlock(void) { pthread_mutex_unlock(&mu); }

static VALUE *slot(uint32_t id)
{
    VALUE *c = atomic_load_explicit(&chunks[id >> CHUNK_BITS], memory_order_acquire);
    return c ? &c[id & (CHUNK - 1)] : NULL;
}

static VALUE value_at(uint32_t id)
{
    VALUE *s = slot(id);
    return s ? *s : Qnil;
}

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

uint64_t rperf_rb_ltab_hash(const char *bytes, size_t len) { return fnv1a(bytes, len); }

/* ---- index (under mu) ---------------------------------------------------- */

static void index_insert(uint32_t id)
{
    size_t i = entries[id].hash & (index_cap - 1);
    while (index_tab[i]) i = (i + 1) & (index_cap - 1);
    index_tab[i] = id + 1;
}

/* Rebuild with room for `live` entries: every LIVE entry, nothing else. */
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

static size_t live_count;    /* under mu: entries in the index (LIVE or QUAR) */

/* A set about to be used: found by its bytes (a quarantined one is revived,
 * keeping its id), or -1. */
int64_t rperf_rb_ltab_find_locked(const char *bytes, size_t len, uint64_t h)
{
    if (!index_cap) return -1;
    for (size_t i = h & (index_cap - 1); index_tab[i]; i = (i + 1) & (index_cap - 1)) {
        entry_t *e = &entries[index_tab[i] - 1];
        if (e->hash == h && e->len == len && memcmp(e->bytes, bytes, len) == 0) {
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
    if (n >= MAX_CHUNKS * CHUNK) return -1;
    if (n >= entries_cap) {
        size_t nc = entries_cap ? entries_cap * 2 : 256;
        entry_t *e = realloc(entries, nc * sizeof(*e));
        if (!e) return -1;
        memset(e + entries_cap, 0, (nc - entries_cap) * sizeof(*e));
        entries = e;
        entries_cap = nc;
    }
    if (!atomic_load_explicit(&chunks[n >> CHUNK_BITS], memory_order_relaxed)) {
        VALUE *c = malloc(CHUNK * sizeof(VALUE));
        if (!c) return -1;
        for (uint32_t i = 0; i < CHUNK; i++) c[i] = Qnil;
        atomic_store_explicit(&chunks[n >> CHUNK_BITS], c, memory_order_release);
    }
    atomic_store_explicit(&count, n + 1, memory_order_release);
    return n;
}

/* under mu: a new LIVE entry for `set` (or an existing one with the same
 * bytes). Returns the id, the overflow id past the window cap, -1 when out
 * of memory. */
static int64_t add_locked(const char *bytes, size_t len, uint64_t h, VALUE set)
{
    int64_t found = rperf_rb_ltab_find_locked(bytes, len, h);
    if (found >= 0) return found;
    if ((live_count + 1) * 2 > index_cap && index_rebuild(live_count + 1) < 0) return -1;
    char *copy = malloc(len ? len : 1);
    if (!copy) return -1;
    int64_t id = take_id();
    if (id < 0) {
        free(copy);
        return -1;
    }
    memcpy(copy, bytes, len);
    entries[id] = (entry_t){ copy, len, h, atomic_load(&epoch), ST_LIVE };
    *slot((uint32_t)id) = set;
    index_insert((uint32_t)id);
    live_count++;
    if (push_id(&young_ids, &n_young, &young_cap, (uint32_t)id) < 0) young_lost = true;
    return id;
}

int64_t rperf_rb_ltab_intern_locked(const char *bytes, size_t len, uint64_t h, VALUE set)
{
    int64_t found = rperf_rb_ltab_find_locked(bytes, len, h);
    if (found >= 0) return found;
    if (window_new >= cap) return rperf_rb_ltab_overflow_locked();
    int64_t id = add_locked(bytes, len, h, set);
    if (id >= 0) window_new++;
    return id;
}

/* under mu: the overflow set's id (interned on first use, kept for the
 * run), counting one folded application. */
int64_t rperf_rb_ltab_overflow_locked(void)
{
    atomic_fetch_add_explicit(&overflowed, 1, memory_order_relaxed);
    if (overflow_id && entries[overflow_id].state == ST_LIVE) return overflow_id;
    static const char key[] = "\1rperf.overflow";
    int64_t id = add_locked(key, sizeof(key) - 1, fnv1a(key, sizeof(key) - 1), overflow_set);
    if (id > 0) overflow_id = (uint32_t)id;
    return id;
}

/* ---- ids, tokens, sets ---------------------------------------------------- */

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

VALUE rperf_rb_ltab_set(uint32_t id)
{
    return id ? value_at(id) : Qnil;
}

uint32_t rperf_rb_ltab_count(void) { return atomic_load_explicit(&count, memory_order_acquire); }
uint64_t rperf_rb_ltab_overflowed(void) { return atomic_load_explicit(&overflowed, memory_order_relaxed); }

/* ---- run and window boundaries -------------------------------------------- */

static void free_entry(uint32_t id)
{
    free(entries[id].bytes);
    entries[id].bytes = NULL;
    entries[id].state = ST_FREE;
    *slot(id) = Qnil;
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
    n_free = n_quar = n_young = 0;
    young_lost = false;
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

/* ---- results and GC ---------------------------------------------------------- */

/* GVL held: an Array indexed by id (id 0 and freed ids: the empty set). */
VALUE rperf_rb_ltab_sets(VALUE empty)
{
    uint32_t n = rperf_rb_ltab_count();
    VALUE a = rb_ary_new_capa(n);
    rb_ary_push(a, empty);
    for (uint32_t id = 1; id < n; id++) {
        VALUE h = value_at(id);
        rb_ary_push(a, NIL_P(h) ? empty : h);
    }
    return a;
}

/* Inside GC (every other Ractor stopped at a safe point, so no label call
 * is inside the table's C code). A minor GC never frees old objects: only
 * the sets on the young list are marked, and those found old (or freed)
 * leave it. A major GC marks every set. */
void rperf_rb_ltab_mark(bool minor)
{
    if (minor && !young_lost) {
        size_t k = 0;
        for (size_t i = 0; i < n_young; i++) {
            VALUE h = value_at(young_ids[i]);
            if (NIL_P(h) || RB_OBJ_PROMOTED_RAW(h)) continue;
            rb_gc_mark(h);
            young_ids[k++] = young_ids[i];
        }
        n_young = k;
        return;
    }
    uint32_t n = rperf_rb_ltab_count();
    for (uint32_t id = 1; id < n; id++) {
        VALUE h = value_at(id);
        if (!NIL_P(h)) rb_gc_mark(h);
    }
}

/* ---- fork: the mutex is held across fork() and made anew in the child --- */

static void fork_prepare(void) { pthread_mutex_lock(&mu); }
static void fork_parent(void) { pthread_mutex_unlock(&mu); }
static void fork_child(void) { pthread_mutex_init(&mu, NULL); }

void rperf_rb_ltab_init(void)
{
    VALUE h = rb_hash_new();
    rb_hash_aset(h, ID2SYM(rb_intern("rperf_label_overflow")), Qtrue);
    overflow_set = rb_ractor_make_shareable(rb_obj_freeze(h));
    rb_gc_register_mark_object(overflow_set);
    atomic_store(&count, 1);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}
