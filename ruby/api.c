/*
 * api.c — the private module functions behind lib/rperf.rb (Rperf._c_*) and
 * the TypedData object whose mark function pins every frame the engine
 * holds. Option validation happens in Ruby before these are called.
 *
 * Context: GVL held (Ruby method calls; _c_set_label, _c_get_label and
 * _c_running? from any Ractor), except profiler_mark, which runs inside GC
 * (GVL held, no allocation, lock-free).
 */
#include "rperf_ruby.h"

#include <string.h>

static VALUE profiler_obj;

static void mark_one(rperf_frame_t v) { rb_gc_mark((VALUE)v); }
static void profiler_mark(void *p)
{
    (void)p;
    rperf_engine_mark(mark_one);
    rperf_rb_labels_mark();
}

/* Not RUBY_TYPED_WB_PROTECTED: the object is re-scanned at the end of every
 * marking, so frames appended without write barriers are always seen. */
static const rb_data_type_t profiler_type = {
    .wrap_struct_name = "rperf_profiler",
    .function = { .dmark = profiler_mark, .dfree = NULL, .dsize = NULL },
    .flags = 0,
};

static void fork_reset_if_needed(void)
{
    if (!rperf_engine_needs_fork_reset()) return;
    rperf_rb_hooks_after_fork_child();
    rperf_engine_fork_reset();
    rb_internal_thread_specific_set(rb_thread_current(), rperf_rb_key, NULL);
}

/* _c_start(frequency, mode(0 cpu/1 wall), aggregate, backend_name, signo, ring_slots) */
static VALUE c_start(VALUE self, VALUE freq, VALUE mode, VALUE aggregate, VALUE backend,
                     VALUE signo, VALUE ring_slots)
{
    (void)self;
    fork_reset_if_needed();
    if (rperf_engine_running()) rb_raise(rb_eRuntimeError, "Rperf is already running");
    rperf_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.frequency = NUM2INT(freq);
    cfg.clock = NUM2INT(mode) == 1 ? RPERF_CLOCK_WALL : RPERF_CLOCK_CPU;
    cfg.aggregate = RTEST(aggregate);
    cfg.signo = NUM2INT(signo);
    cfg.ring_slots = NUM2UINT(ring_slots);
    cfg.backend = rperf_backend_find(StringValueCStr(backend));
    cfg.bootstrap = rperf_rb_other_ractors_p();
    if (!cfg.backend) rb_raise(rb_eArgError, "unknown backend");
    char err[256] = "rperf: failed to start";
    rperf_thread_t *caller = NULL;
    VALUE th = rb_thread_current();
    /* a thread may still carry state from a run that was never released */
    rb_internal_thread_specific_set(th, rperf_rb_key, NULL);
    if (rperf_engine_start(&cfg, (uintptr_t)th, &caller, err, sizeof(err)) < 0)
        rb_raise(rb_eRuntimeError, "%s", err);
    rb_internal_thread_specific_set(th, rperf_rb_key, caller);
    rperf_rb_labels_reset();
    rperf_rb_hooks_install();
    /* start is called from the main Ractor (lib/rperf.rb checks it) */
    rperf_thread_set_ractor(caller, 1);
    char name[RPERF_THREAD_NAME_MAX];
    size_t len = rperf_rb_thread_name(name, sizeof(name));
    rperf_thread_set_name(caller, name, len);
    return Qnil;
}

/* Free a stopped run's engine data. Rperf.stop calls it once the result
 * Hash is built and the output written (C exporters may encode straight
 * from the engine data in between); the next start releases it too. */
static VALUE c_release(VALUE self)
{
    (void)self;
    if (!rperf_engine_running()) rperf_engine_release();
    return Qnil;
}

static VALUE c_stop(VALUE self)
{
    (void)self;
    fork_reset_if_needed();
    if (!rperf_engine_running()) return Qnil;
    rperf_engine_stop();
    rperf_rb_hooks_remove();
    return rperf_rb_build_result(!rperf_engine_config()->aggregate);
}

static VALUE resume_clear(VALUE clear)
{
    rperf_engine_resume(RTEST(clear));
    return Qnil;
}

static VALUE build_snapshot(VALUE unused)
{
    (void)unused;
    return rperf_rb_build_result(false);
}

static VALUE c_snapshot(VALUE self, VALUE clear)
{
    (void)self;
    fork_reset_if_needed();
    if (!rperf_engine_running()) return Qnil;
    if (!rperf_engine_config()->aggregate)
        rb_raise(rb_eRuntimeError, "snapshot requires aggregate mode (aggregate: true)");
    rperf_engine_pause();
    return rb_ensure(build_snapshot, Qnil, resume_clear, clear);
}

static VALUE c_set_label(VALUE self, VALUE id)
{
    (void)self;
    if (!rperf_engine_running()) return Qnil;
    rperf_thread_t *pt = rperf_rb_current_thread(true);
    if (pt) rperf_thread_set_label(pt, NUM2UINT(id));
    return Qnil;
}

static VALUE c_get_label(VALUE self)
{
    (void)self;
    if (!rperf_engine_running()) return INT2FIX(0);
    rperf_thread_t *pt = rperf_rb_current_thread(false);
    return UINT2NUM(pt ? rperf_thread_label(pt) : 0);
}

static VALUE c_running_p(VALUE self)
{
    (void)self;
    fork_reset_if_needed();
    return rperf_engine_running() ? Qtrue : Qfalse;
}

static VALUE c_backends(VALUE self)
{
    (void)self;
    VALUE a = rb_ary_new();
    for (size_t i = 0; i < rperf_backend_count(); i++)
        rb_ary_push(a, ID2SYM(rb_intern(rperf_backend_at(i)->name)));
    return a;
}

static VALUE c_after_fork_child(VALUE self)
{
    (void)self;
    fork_reset_if_needed();
    return Qnil;
}

void rperf_rb_api_init(VALUE m)
{
    /* DATA_PTR must be non-NULL: GC skips dmark for NULL data pointers. */
    static int token;
    profiler_obj = TypedData_Wrap_Struct(rb_cObject, &profiler_type, &token);
    rb_gc_register_mark_object(profiler_obj);
    rb_define_module_function(m, "_c_start", c_start, 6);
    rb_define_module_function(m, "_c_stop", c_stop, 0);
    rb_define_module_function(m, "_c_release", c_release, 0);
    rb_define_module_function(m, "_c_snapshot", c_snapshot, 1);
    rb_define_module_function(m, "_c_set_label", c_set_label, 1);
    rb_define_module_function(m, "_c_get_label", c_get_label, 0);
    rb_define_module_function(m, "_c_running?", c_running_p, 0);
    rb_define_module_function(m, "_c_backends", c_backends, 0);
    rb_define_module_function(m, "_c_after_fork_child", c_after_fork_child, 0);
    rb_define_const(m, "DEFAULT_RING_SLOTS", INT2NUM(RPERF_DEFAULT_RING_SLOTS));
}
