/*
 * result.c — turns the engine's results into the Ruby result Hash of
 * Rperf.stop / Rperf.snapshot (Symbol keys, leaf-first [path, label] frames,
 * [frames, weight, thread_seq, label_set_id] tuples (samples with the same
 * frames share one frozen frames Array), label_sets built from the C
 * label table for the sets the samples use (labels.c; {} at other ids),
 * and the per-thread table :threads).
 *
 * Context: GVL held, with the worker parked (snapshot) or joined (stop).
 * Allocates Ruby objects, so GC may run meanwhile; the engine's mark
 * function keeps every frame value pinned until rperf_engine_release().
 */
#include "rperf_ruby.h"

#include <ruby/encoding.h>

#include <stdlib.h>
#include <string.h>

/* Samples with the same frames share one frozen frames Array: a server
 * with a thread per connection has the same few hundred stacks on
 * thousands of threads (the thread is part of the aggregation key), and a
 * copy per sample made the result ~4x the size of Ruby's heap. */
typedef struct stack_slot {
    const uint32_t *ids;      /* the engine's frame ids (stable while building) */
    uint32_t depth;
    VALUE frames;             /* reachable through the samples Array */
} stack_slot_t;

typedef struct build_ctx {
    VALUE pairs;      /* frame id -> frozen [path, label] */
    VALUE samples;
    VALUE used_sets;  /* String as bytes: 1 at each label set id a sample uses */
    bool raw;
    const rperf_rb_since_t *since;   /* a window's baseline, or NULL */
    size_t frames_used;              /* distinct frame ids made into pairs */
    VALUE allocs;       /* :allocations samples */
    VALUE class_names;  /* class id (or -1 - type) -> name */
    stack_slot_t *stacks;     /* open addressing, power-of-two capacity */
    size_t cap, n;
} build_ctx_t;

static VALUE frame_pair(build_ctx_t *c, uint32_t id)
{
    VALUE p = rb_ary_entry(c->pairs, id);
    if (!NIL_P(p)) return p;
    VALUE path, label;
    if (id < RPERF_SYNTHETIC_FRAMES) {
        const char *sp, *sl;
        rperf_synthetic_frame(id, &sp, &sl);
        path = rb_str_new_cstr(sp);
        label = rb_str_new_cstr(sl);
    } else {
        rperf_rb_frame_text_t t;
        VALUE fv = (VALUE)rperf_result_frame(id);
        bool named = !fv && rperf_rb_frame_name(id, &t);
        path = named ? rb_str_new(t.path, (long)t.path_len) : fv ? rb_profile_frame_path(fv) : Qnil;
        label = named ? rb_str_new(t.label, (long)t.label_len) : fv ? rb_profile_frame_full_label(fv) : Qnil;
        if (NIL_P(path)) path = rb_str_new_cstr("<C method>");
        if (NIL_P(label)) label = rb_str_new_cstr("");
    }
    p = rb_ary_new_from_args(2, rb_str_freeze(path), rb_str_freeze(label));
    rb_obj_freeze(p);
    rb_ary_store(c->pairs, id, p);
    c->frames_used++;
    return p;
}

static uint64_t ids_hash(const uint32_t *ids, uint32_t depth)
{
    uint64_t h = 1469598103934665603ULL ^ depth;
    for (uint32_t i = 0; i < depth; i++) h = (h ^ ids[i]) * 1099511628211ULL;
    return h;
}

static stack_slot_t *stack_slot(build_ctx_t *c, const uint32_t *ids, uint32_t depth)
{
    size_t i = (size_t)ids_hash(ids, depth) & (c->cap - 1);
    while (c->stacks[i].ids &&
           !(c->stacks[i].depth == depth && memcmp(c->stacks[i].ids, ids, depth * sizeof(*ids)) == 0))
        i = (i + 1) & (c->cap - 1);
    return &c->stacks[i];
}

/* The shared frames Array for these ids; NULL table (out of memory):
 * a fresh Array per sample, as before. */
static VALUE frames_of(build_ctx_t *c, const rperf_result_sample_t *s)
{
    if (c->stacks && c->n * 2 + 2 > c->cap) {
        size_t cap = c->cap * 2;
        stack_slot_t *old = c->stacks, *grown = calloc(cap, sizeof(*grown));
        if (grown) {
            size_t old_cap = c->cap;
            c->stacks = grown;
            c->cap = cap;
            for (size_t i = 0; i < old_cap; i++)
                if (old[i].ids) *stack_slot(c, old[i].ids, old[i].depth) = old[i];
            free(old);
        }
    }
    stack_slot_t *slot = c->stacks && c->n * 2 + 2 <= c->cap ? stack_slot(c, s->frames, s->depth) : NULL;
    if (slot && slot->ids) return slot->frames;
    VALUE frames = rb_ary_new_capa(s->depth);
    for (uint32_t i = 0; i < s->depth; i++) rb_ary_push(frames, frame_pair(c, s->frames[i]));
    rb_obj_freeze(frames);
    if (slot) {
        *slot = (stack_slot_t){ s->frames, s->depth, frames };
        c->n++;
    }
    return frames;
}

static int add_sample(const rperf_result_sample_t *s, void *arg)
{
    build_ctx_t *c = arg;
    VALUE frames = frames_of(c, s);
    VALUE tuple = c->raw
        ? rb_ary_new_from_args(5, frames, LL2NUM(s->weight), UINT2NUM(s->thread_seq),
                               UINT2NUM(s->label_set_id), LL2NUM(s->time_ns))
        : rb_ary_new_from_args(4, frames, LL2NUM(s->weight), UINT2NUM(s->thread_seq),
                               UINT2NUM(s->label_set_id));
    rb_ary_push(c->samples, tuple);
    if (s->label_set_id < (uint32_t)RSTRING_LEN(c->used_sets)) RSTRING_PTR(c->used_sets)[s->label_set_id] = 1;
    return 0;
}

/* [frames, class_name, alloc_objects, alloc_bytes, inuse_objects,
 * inuse_bytes, thread_seq, label_set_id]; class names once per class */
static int add_alloc(const rperf_result_alloc_t *a, void *arg)
{
    build_ctx_t *c = arg;
    rperf_result_sample_t s = { .frames = a->frames, .depth = a->depth };
    VALUE frames = frames_of(c, &s);
    VALUE key = a->class_id != RPERF_ALLOC_NO_CLASS ? UINT2NUM(a->class_id)
                                                     : INT2NUM(-1 - (int)a->rtype);
    VALUE name = rb_hash_lookup2(c->class_names, key, Qundef);
    if (name == Qundef) {
        name = rb_str_freeze(rperf_rb_alloc_class_name(a->class_id, a->rtype));
        rb_hash_aset(c->class_names, key, name);
    }
    VALUE vals[8] = { frames, name, LL2NUM(a->alloc_objects), LL2NUM(a->alloc_bytes),
                      LL2NUM(a->inuse_objects), LL2NUM(a->inuse_bytes),
                      UINT2NUM(a->thread_seq), UINT2NUM(a->label_set_id) };
    rb_ary_push(c->allocs, rb_ary_new_from_values(8, vals));
    if (a->label_set_id < (uint32_t)RSTRING_LEN(c->used_sets)) RSTRING_PTR(c->used_sets)[a->label_set_id] = 1;
    return 0;
}

static VALUE each_sample(VALUE arg)
{
    build_ctx_t *c = (build_ctx_t *)arg;
    if (c->since) {
        rperf_result_each_aggregated_since(c->since->weights, c->since->n, add_sample, c);
        if (c->since->heap && rperf_heap_enabled())
            rperf_result_each_alloc_since(c->since->alloc, c->since->nalloc, add_alloc, c);
        return Qnil;
    }
    if (c->raw) rperf_result_each_raw(add_sample, c);
    else rperf_result_each_aggregated(add_sample, c);
    if (rperf_heap_enabled()) rperf_result_each_alloc(add_alloc, c);
    return Qnil;
}

static VALUE free_stacks(VALUE arg)
{
    build_ctx_t *c = (build_ctx_t *)arg;
    free(c->stacks);
    c->stacks = NULL;
    return Qnil;
}

static void set(VALUE h, const char *key, VALUE v) { rb_hash_aset(h, ID2SYM(rb_intern(key)), v); }

/* A thread name as a valid String: the kernel's bytes (ractor.c) carry no
 * encoding; they are UTF-8 whenever they are valid UTF-8, and any other
 * bytes are replaced (U+FFFD), so that the result always encodes (JSON,
 * pprof). */
static VALUE thread_name(const char *name)
{
    if (!name[0]) return Qnil;
    VALUE s = rb_utf8_str_new_cstr(name);
    if (rb_enc_str_coderange(s) == ENC_CODERANGE_BROKEN) {
        VALUE fixed = rb_str_scrub(s, Qnil);
        if (!NIL_P(fixed)) s = fixed;
    }
    return rb_str_freeze(s);
}

static int add_thread(const rperf_result_thread_t *t, void *arg)
{
    VALUE th = rb_hash_new();
    set(th, "thread_seq", UINT2NUM(t->thread_seq));
    set(th, "ractor_id", UINT2NUM(t->ractor_id));
    set(th, "name", thread_name(t->name));
    set(th, "native_tid", t->native_tid > 0 ? INT2NUM(t->native_tid) : Qnil);
    rb_ary_push((VALUE)arg, th);
    return 0;
}

/* The samples and label sets are built before the result Hash that holds
 * them, so that the Hash is young when the caller drops it: an old one
 * (aged through the GCs a large build triggers) would keep them alive
 * through minor GCs until a major one. `since`: a window's result (the
 * entries that gained weight over its baseline, its counters' growth, no
 * allocations); NULL: the whole run's. */
static VALUE build(bool raw, const rperf_rb_since_t *since)
{
    const rperf_config_t *cfg = rperf_engine_config();
    rperf_stats_t st;
    rperf_engine_stats(&st);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t mono = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;

    long nsets = (long)rperf_rb_label_set_count();
    build_ctx_t c = { rb_ary_new(), rb_ary_new(), rb_str_new(NULL, nsets), raw, since, 0, rb_ary_new(),
                      rb_hash_new(), NULL, 1024, 0 };
    memset(RSTRING_PTR(c.used_sets), 0, (size_t)nsets);
    c.stacks = calloc(c.cap, sizeof(*c.stacks));
    rb_ensure(each_sample, (VALUE)&c, free_stacks, (VALUE)&c);   /* may raise NoMemoryError */
    VALUE sets = rperf_rb_label_set_count() > 1
        ? rperf_rb_label_sets((const uint8_t *)RSTRING_PTR(c.used_sets), (size_t)RSTRING_LEN(c.used_sets))
        : Qundef;
    VALUE threads = rb_ary_new();
    rperf_result_each_thread(add_thread, (void *)threads);

    VALUE h = rb_hash_new();
    set(h, "mode", ID2SYM(rb_intern(cfg->alloc_only ? "alloc" : cfg->clock == RPERF_CLOCK_WALL ? "wall" : "cpu")));
    set(h, "frequency", INT2NUM(cfg->frequency));
    if (since) {
        st.trigger_count -= since->stats.trigger_count;
        st.sampling_count -= since->stats.sampling_count;
        st.sampling_time_ns -= since->stats.sampling_time_ns;
        st.dropped_samples -= since->stats.dropped_samples;
        st.timer_overruns -= since->stats.timer_overruns;
        st.start_time_ns = since->stats.start_time_ns;
        st.start_mono_ns = since->stats.start_mono_ns;
    }
    set(h, "trigger_count", ULL2NUM(st.trigger_count));
    set(h, "sampling_count", ULL2NUM(st.sampling_count));
    set(h, "sampling_time_ns", ULL2NUM(st.sampling_time_ns));
    set(h, "detected_thread_count", UINT2NUM(st.detected_threads));
    if (since) {
        set(h, "unique_frames", SIZET2NUM(c.frames_used));
        set(h, "unique_stacks", LONG2NUM(RARRAY_LEN(c.samples)));
    } else if (!raw) {
        set(h, "unique_frames", SIZET2NUM(rperf_result_frame_count()));
        set(h, "unique_stacks", SIZET2NUM(rperf_result_aggregated_count()));
    }
    set(h, "start_time_ns", LL2NUM(st.start_time_ns));
    /* a closed window (snapshot, stop) ends where its threads' time was
     * settled, not when its result is built */
    if (st.end_mono_ns > 0) mono = st.end_mono_ns;
    set(h, "duration_ns", LL2NUM(mono - st.start_mono_ns));
    set(h, raw ? "raw_samples" : "aggregated_samples", c.samples);
    if (sets != Qundef) set(h, "label_sets", sets);
    set(h, "label_sets_overflowed", ULL2NUM(rperf_rb_labels_overflowed()));
    set(h, "backend", ID2SYM(rb_intern(cfg->backend->name)));
    set(h, "dropped_samples", ULL2NUM(st.dropped_samples));
    set(h, "timer_overruns", ULL2NUM(st.timer_overruns));
    set(h, "profiler_memory_bytes", SIZET2NUM(rperf_engine_memory_bytes()));
    set(h, "allocator", rb_str_new_cstr(rperf_engine_allocator()));
    set(h, "threads", threads);
    if (rperf_heap_enabled() && (!since || since->heap)) {
        rperf_heap_stats_t hs;
        rperf_heap_stats(&hs);
        if (since) {
            hs.sampled -= since->heap_stats.sampled;
            hs.dropped -= since->heap_stats.dropped;
        }
        VALUE a = rb_hash_new();
        set(a, "interval", UINT2NUM(hs.interval));
        set(a, "sampled", ULL2NUM(hs.sampled));
        set(a, "dropped", ULL2NUM(hs.dropped));
        set(a, "live", ULL2NUM(hs.live));
        set(a, "ractors", rperf_rb_alloc_ractors() ? Qtrue : Qfalse);
        /* a window's: in-use values are the change over it */
        if (since) set(a, "inuse_delta", Qtrue);
        set(a, "samples", c.allocs);
        set(h, "allocations", a);
    }
    RB_GC_GUARD(c.pairs);
    RB_GC_GUARD(c.allocs);
    RB_GC_GUARD(c.class_names);
    RB_GC_GUARD(c.used_sets);
    RB_GC_GUARD(sets);
    RB_GC_GUARD(threads);
    return h;
}

VALUE rperf_rb_build_result(bool raw) { return build(raw, NULL); }

VALUE rperf_rb_build_result_since(const rperf_rb_since_t *since) { return build(false, since); }
