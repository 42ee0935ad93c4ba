/*
 * frame_names.c — the names of frames whose code is no longer pinned.
 *
 * The engine pins a sampled frame's code object (an iseq or a method
 * entry) so that results can name it. Code that a program keeps making
 * (eval, templates compiled at run time, define_method with strings) would
 * then live as long as the run. After a GC, a pass here judges every frame
 * that no sample touched since the previous pass (core/frame_table.c): an
 * old object (code that lives on) or anything but a code object stays
 * pinned for the run; a young code object is named now — path, label and
 * first line, as result.c and export_engine.c would name it — and retired,
 * after which Ruby may collect it. Its id keeps naming it from here.
 * Texts are kept once each: an eval loop retires many frames of one text.
 *
 * With allocation sampling on, no frame is retired: the live heap interns
 * its stacks' frame values anew when a window is cleared (core/heap.c).
 *
 * Context: GVL held, main Ractor. The pass runs in the sampling job
 * (allocates: rb_profile_frame_*); lookups while results are built; reset
 * at start, at a window's clear and at release. rperf_rb_frame_names_gc
 * runs inside GC (flags and a wake-up); rperf_rb_frame_names_captured in
 * any Ractor's capture (own context, no allocation).
 */
#include "rperf_ruby.h"

#include <ruby/debug.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct text {
    char *bytes;          /* path, then label */
    size_t plen, llen;
    int line;
    uint64_t hash;
} text_t;

static uint32_t *text_of;          /* frame id -> text index + 1 (0: none) */
static size_t text_of_cap;
static text_t *texts;
static size_t ntexts, texts_cap;
static uint32_t *index_;           /* open addressing: text index + 1 */
static size_t index_cap;           /* power of two */
static _Atomic bool gc_seen;

/* Code objects seen young at a capture (lossy: one value per slot, set by
 * the sampling jobs of every Ractor). A frame waits in a ring, pinned by
 * it, until the worker interns it, and every GC meanwhile ages it: on a
 * busy machine code that was garbage from the start can be promoted before
 * the pass sees it. A value found here was young when sampled, and it has
 * been pinned since (so the slot still holds that object): it is judged
 * young. A stale entry (that object freed, an old one at its address
 * later) only costs that one an extra id. */
#define YOUNG_BITS 12
static _Atomic uintptr_t young_seen[1u << YOUNG_BITS];
static _Atomic bool retiring;      /* a run whose frames may be retired */

static size_t young_slot(VALUE v) { return (size_t)(((uint64_t)v * 0x9e3779b97f4a7c15ULL) >> (64 - YOUNG_BITS)); }

void rperf_rb_frame_names_captured(const VALUE *frames, int n)
{
    if (!atomic_load_explicit(&retiring, memory_order_relaxed)) return;
    for (int i = 0; i < n; i++)
        if (!RB_SPECIAL_CONST_P(frames[i]) && !RB_OBJ_PROMOTED_RAW(frames[i]))
            atomic_store_explicit(&young_seen[young_slot(frames[i])], (uintptr_t)frames[i],
                                  memory_order_relaxed);
}

void rperf_rb_frame_names_gc(void)
{
    atomic_store_explicit(&gc_seen, true, memory_order_relaxed);
    if (!rperf_heap_enabled()) rperf_frames_gc_marked();
}

static uint64_t text_hash(const char *p, size_t pl, const char *l, size_t ll, int line)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(uint32_t)line;
    for (size_t i = 0; i < pl; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    h = (h ^ 0xffu) * 1099511628211ULL;
    for (size_t i = 0; i < ll; i++) h = (h ^ (unsigned char)l[i]) * 1099511628211ULL;
    return h;
}

static bool same_text(const text_t *t, const char *p, size_t pl, const char *l, size_t ll, int line)
{
    return t->plen == pl && t->llen == ll && t->line == line && memcmp(t->bytes, p, pl) == 0 &&
           memcmp(t->bytes + pl, l, ll) == 0;
}

static bool index_grow(void)
{
    size_t cap = index_cap ? index_cap * 2 : 1024;
    uint32_t *fresh = calloc(cap, sizeof(*fresh));
    if (!fresh) return false;
    for (size_t k = 0; k < ntexts; k++) {
        size_t i = (size_t)texts[k].hash & (cap - 1);
        while (fresh[i]) i = (i + 1) & (cap - 1);
        fresh[i] = (uint32_t)k + 1;
    }
    free(index_);
    index_ = fresh;
    index_cap = cap;
    return true;
}

/* The index + 1 of this text, kept once; 0 when out of memory. */
static uint32_t text_intern(const char *p, size_t pl, const char *l, size_t ll, int line)
{
    uint64_t h = text_hash(p, pl, l, ll, line);
    if ((ntexts + 1) * 2 > index_cap && !index_grow()) return 0;
    size_t i = (size_t)h & (index_cap - 1);
    for (; index_[i]; i = (i + 1) & (index_cap - 1)) {
        const text_t *t = &texts[index_[i] - 1];
        if (t->hash == h && same_text(t, p, pl, l, ll, line)) return index_[i];
    }
    if (ntexts == texts_cap) {
        size_t cap = texts_cap ? texts_cap * 2 : 256;
        text_t *grown = realloc(texts, cap * sizeof(*grown));
        if (!grown) return 0;
        texts = grown;
        texts_cap = cap;
    }
    char *bytes = malloc(pl + ll + 1);
    if (!bytes) return 0;
    memcpy(bytes, p, pl);
    memcpy(bytes + pl, l, ll);
    bytes[pl + ll] = '\0';
    texts[ntexts] = (text_t){ .bytes = bytes, .plen = pl, .llen = ll, .line = line, .hash = h };
    index_[i] = (uint32_t)++ntexts;
    return index_[i];
}

static bool text_of_set(uint32_t id, uint32_t t)
{
    if (id >= text_of_cap) {
        size_t cap = text_of_cap ? text_of_cap : 1024;
        while (cap <= id) cap *= 2;
        uint32_t *grown = realloc(text_of, cap * sizeof(*grown));
        if (!grown) return false;
        memset(grown + text_of_cap, 0, (cap - text_of_cap) * sizeof(*grown));
        text_of = grown;
        text_of_cap = cap;
    }
    text_of[id] = t;
    return true;
}

/* Path, label and first line of live frame value fv, as results name it
 * ("<C method>" without a path, "" without a label); keep[] holds the
 * strings the text points into. Allocates. */
static void live_text(VALUE fv, rperf_rb_frame_text_t *out, VALUE keep[2])
{
    VALUE path = fv ? rb_profile_frame_path(fv) : Qnil;
    VALUE label = fv ? rb_profile_frame_full_label(fv) : Qnil;
    VALUE line = fv ? rb_profile_frame_first_lineno(fv) : Qnil;
    keep[0] = path;
    keep[1] = label;
    *out = (rperf_rb_frame_text_t){ .path = "<C method>", .path_len = 10, .label = "", .label_len = 0 };
    if (RB_TYPE_P(path, T_STRING)) {
        out->path = RSTRING_PTR(path);
        out->path_len = (size_t)RSTRING_LEN(path);
    }
    if (RB_TYPE_P(label, T_STRING)) {
        out->label = RSTRING_PTR(label);
        out->label_len = (size_t)RSTRING_LEN(label);
    }
    out->first_line = RB_FIXNUM_P(line) ? (int)FIX2LONG(line) : 0;
}

void rperf_rb_frame_text(uint32_t id, rperf_rb_frame_text_t *out, VALUE keep[2])
{
    keep[0] = keep[1] = Qnil;
    if (rperf_rb_frame_name(id, out)) return;
    live_text((VALUE)rperf_result_frame(id), out, keep);
}

/* The pass's verdict on frame `id` (value v, pinned until a RETIRE). */
static rperf_frame_verdict_t judge(uint32_t id, rperf_frame_t v, void *unused)
{
    (void)unused;
    VALUE obj = (VALUE)v;
    if (!RB_TYPE_P(obj, T_IMEMO)) return RPERF_FRAME_KEEP;
    if (RB_OBJ_PROMOTED(obj) &&
        atomic_load_explicit(&young_seen[young_slot(obj)], memory_order_relaxed) != (uintptr_t)obj)
        return RPERF_FRAME_KEEP;
    rperf_rb_frame_text_t t;
    VALUE keep[2];
    live_text(obj, &t, keep);
    uint32_t k = text_intern(t.path, t.path_len, t.label, t.label_len, t.first_line);
    RB_GC_GUARD(keep[0]);
    RB_GC_GUARD(keep[1]);
    if (!k || !text_of_set(id, k)) return RPERF_FRAME_LATER;
    return RPERF_FRAME_RETIRE;
}

void rperf_rb_frame_names_pass(void)
{
    if (!atomic_load_explicit(&gc_seen, memory_order_relaxed)) return;
    atomic_store_explicit(&gc_seen, false, memory_order_relaxed);
    if (rperf_heap_enabled()) return;
    rperf_frames_retire_pass(judge, NULL);
}

bool rperf_rb_frame_name(uint32_t id, rperf_rb_frame_text_t *out)
{
    if (!rperf_result_frame_retired(id) || id >= text_of_cap || !text_of[id]) return false;
    const text_t *t = &texts[text_of[id] - 1];
    out->path = t->bytes;
    out->path_len = t->plen;
    out->label = t->bytes + t->plen;
    out->label_len = t->llen;
    out->first_line = t->line;
    return true;
}

void rperf_rb_frame_names_reset(void)
{
    atomic_store_explicit(&retiring, rperf_engine_running() && !rperf_heap_enabled(), memory_order_relaxed);
    for (size_t i = 0; i < (1u << YOUNG_BITS); i++) atomic_store_explicit(&young_seen[i], 0, memory_order_relaxed);
    for (size_t k = 0; k < ntexts; k++) free(texts[k].bytes);
    free(texts);
    free(index_);
    free(text_of);
    texts = NULL;
    index_ = NULL;
    text_of = NULL;
    ntexts = texts_cap = index_cap = text_of_cap = 0;
    atomic_store_explicit(&gc_seen, false, memory_order_relaxed);
}
