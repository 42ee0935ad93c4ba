/*
 * result.c — turns the engine's results into the Ruby result Hash of
 * Rperf.stop / Rperf.snapshot (Symbol keys, leaf-first [path, label] frames,
 * [frames, weight, thread_seq, label_set_id] tuples, label_sets from the C
 * label table, and the per-thread table :threads).
 *
 * Context: GVL held, with the worker parked (snapshot) or joined (stop).
 * Allocates Ruby objects, so GC may run meanwhile; the engine's mark
 * function keeps every frame value pinned until rperf_engine_release().
 */
#include "rperf_ruby.h"

#include <ruby/encoding.h>

typedef struct build_ctx {
    VALUE pairs;      /* frame id -> frozen [path, label] */
    VALUE samples;
    bool raw;
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
        VALUE fv = (VALUE)rperf_result_frame(id);
        path = fv ? rb_profile_frame_path(fv) : Qnil;
        label = fv ? rb_profile_frame_full_label(fv) : Qnil;
        if (NIL_P(path)) path = rb_str_new_cstr("<C method>");
        if (NIL_P(label)) label = rb_str_new_cstr("");
    }
    p = rb_ary_new_from_args(2, rb_str_freeze(path), rb_str_freeze(label));
    rb_obj_freeze(p);
    rb_ary_store(c->pairs, id, p);
    return p;
}

static int add_sample(const rperf_result_sample_t *s, void *arg)
{
    build_ctx_t *c = arg;
    VALUE frames = rb_ary_new_capa(s->depth);
    for (uint32_t i = 0; i < s->depth; i++) rb_ary_push(frames, frame_pair(c, s->frames[i]));
    VALUE tuple = c->raw
        ? rb_ary_new_from_args(5, frames, LL2NUM(s->weight), UINT2NUM(s->thread_seq),
                               UINT2NUM(s->label_set_id), LL2NUM(s->time_ns))
        : rb_ary_new_from_args(4, frames, LL2NUM(s->weight), UINT2NUM(s->thread_seq),
                               UINT2NUM(s->label_set_id));
    rb_ary_push(c->samples, tuple);
    return 0;
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

VALUE rperf_rb_build_result(bool raw)
{
    const rperf_config_t *cfg = rperf_engine_config();
    rperf_stats_t st;
    rperf_engine_stats(&st);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t mono = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;

    VALUE h = rb_hash_new();
    set(h, "mode", ID2SYM(rb_intern(cfg->clock == RPERF_CLOCK_WALL ? "wall" : "cpu")));
    set(h, "frequency", INT2NUM(cfg->frequency));
    set(h, "trigger_count", ULL2NUM(st.trigger_count));
    set(h, "sampling_count", ULL2NUM(st.sampling_count));
    set(h, "sampling_time_ns", ULL2NUM(st.sampling_time_ns));
    set(h, "detected_thread_count", UINT2NUM(st.detected_threads));

    build_ctx_t c = { rb_ary_new(), rb_ary_new(), raw };
    if (!raw) {
        set(h, "unique_frames", SIZET2NUM(rperf_result_frame_count()));
        set(h, "unique_stacks", SIZET2NUM(rperf_result_aggregated_count()));
    }
    set(h, "start_time_ns", LL2NUM(st.start_time_ns));
    set(h, "duration_ns", LL2NUM(mono - st.start_mono_ns));
    if (raw) {
        rperf_result_each_raw(add_sample, &c);
        set(h, "raw_samples", c.samples);
    } else {
        rperf_result_each_aggregated(add_sample, &c);
        set(h, "aggregated_samples", c.samples);
    }
    if (rperf_rb_label_set_count() > 1) set(h, "label_sets", rperf_rb_label_sets());
    set(h, "label_sets_overflowed", ULL2NUM(rperf_rb_labels_overflowed()));
    set(h, "backend", ID2SYM(rb_intern(cfg->backend->name)));
    set(h, "dropped_samples", ULL2NUM(st.dropped_samples));
    set(h, "timer_overruns", ULL2NUM(st.timer_overruns));
    set(h, "profiler_memory_bytes", SIZET2NUM(rperf_engine_memory_bytes()));
    set(h, "allocator", rb_str_new_cstr(rperf_engine_allocator()));
    VALUE threads = rb_ary_new();
    rperf_result_each_thread(add_thread, (void *)threads);
    set(h, "threads", threads);
    RB_GC_GUARD(c.pairs);
    return h;
}
