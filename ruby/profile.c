/*
 * profile.c — Rperf.profile(**labels) { ... } and the profile-block depth
 * of each Ruby thread, which decides what a deferred run
 * (Rperf.start(defer: true)) samples: only threads inside a profile block.
 *
 * The depth lives on the Ruby thread (a thread-specific slot, like the
 * engine token of capture.c), so it is known whatever the run: a block
 * entered before a deferred start makes its thread profiled from the
 * start, a fork child's restarted run finds the forking thread inside its
 * block, and a thread first met by a hook is marked from the slot
 * (rperf_rb_profile_adopt). A thread created by a thread inside a block
 * is inside one for its whole life (its slot starts at 1): the work a
 * request hands to a thread of its own is the request's work.
 *
 * Without a run, or in a run that is not deferred, a block only applies
 * its labels (as Rperf.label with a block) and counts its depth.
 *
 * Contexts: Rperf.profile and the _c_profile_* functions run with the
 * calling Ractor's GVL held, in any Ractor; rperf_rb_profile_adopt and
 * rperf_rb_profile_inherit run where the engine's thread state is made
 * (thread hooks without the GVL guarantee: only the thread-specific slot
 * and engine calls).
 */
#include "rperf_ruby.h"

#include <stdint.h>

static rb_internal_thread_specific_key_t depth_key;

static intptr_t depth_of(VALUE th) { return (intptr_t)rb_internal_thread_specific_get(th, depth_key); }
static void depth_set(VALUE th, intptr_t d) { rb_internal_thread_specific_set(th, depth_key, (void *)d); }

/* Where the host makes or finds the state of thread `th` (created, first
 * met, or the caller of start): a thread inside a profile block is
 * profiled in a deferred run. */
void rperf_rb_profile_adopt(VALUE th, rperf_thread_t *pt)
{
    if (pt && depth_of(th) > 0) rperf_thread_profile_begin(pt);
}

/* STARTED, on the creator's native thread: the new thread `th` is inside a
 * block for life when its creator, running here, is profiled in a
 * deferred run. */
void rperf_rb_profile_inherit(VALUE th)
{
    if (!rperf_engine_config()->deferred) return;
    rperf_thread_t *parent = rperf_current_thread_sigsafe();
    if (parent && rperf_thread_profiled(parent) && depth_of(th) == 0) depth_set(th, 1);
}

/* The running thread's depth goes up by one; the outermost block of a
 * deferred run makes it profiled. */
static void enter_block(void)
{
    VALUE th = rb_thread_current();
    intptr_t d = depth_of(th) + 1;
    depth_set(th, d);
    if (d != 1 || !rperf_engine_running() || !rperf_engine_config()->deferred) return;
    if (!rperf_engine_enter()) return;
    rperf_thread_t *pt = rperf_rb_current_thread(true);   /* adopts: begins */
    if (pt) rperf_thread_profile_begin(pt);
    rperf_engine_leave();
}

/* Its end: the outermost one records the thread's time up to here (with
 * the block's labels, which are restored after this) and stops sampling
 * it. */
static void leave_block(void)
{
    VALUE th = rb_thread_current();
    intptr_t d = depth_of(th) - 1;
    if (d < 0) d = 0;
    depth_set(th, d);
    if (d != 0 || !rperf_engine_running() || !rperf_engine_config()->deferred) return;
    if (!rperf_engine_enter()) return;
    rperf_thread_t *pt = rperf_rb_current_thread(false);
    if (pt) rperf_thread_profile_end(pt);
    rperf_engine_leave();
}

static VALUE yield_block(VALUE unused)
{
    (void)unused;
    return rb_yield_values(0);
}

static VALUE end_block(VALUE token)
{
    leave_block();
    rperf_rb_label_restore(token);
    return Qnil;
}

/* Rperf.profile(**labels) { ... }: the block runs profiled (in a deferred
 * run; every thread is profiled in others) and labelled as with
 * Rperf.label; its value is returned. No run: the block just runs. */
static VALUE m_profile(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    VALUE labels = Qnil;
    rb_scan_args(argc, argv, ":", &labels);
    if (!rb_block_given_p())
        rb_raise(rb_eArgError, "Rperf.profile requires a block (Rperf.profile(**labels) { ... })");
    VALUE token = rperf_rb_label_push(labels);
    enter_block();
    return rb_ensure(yield_block, Qnil, end_block, token);
}

/* Rperf::Middleware's request: _c_profile_enter before the app, and
 * _c_profile_leave after it, before its labels are restored. */
static VALUE c_profile_enter(VALUE self)
{
    (void)self;
    enter_block();
    return Qnil;
}

static VALUE c_profile_leave(VALUE self)
{
    (void)self;
    leave_block();
    return Qnil;
}

/* _c_profile_depth -> the running thread's depth (tests). */
static VALUE c_profile_depth(VALUE self)
{
    (void)self;
    return LONG2NUM((long)depth_of(rb_thread_current()));
}

/* _c_profiled_threads -> threads inside blocks in a deferred run (tests). */
static VALUE c_profiled_threads(VALUE self)
{
    (void)self;
    return INT2NUM(rperf_engine_running() ? rperf_engine_profiled_threads() : 0);
}

void rperf_rb_profile_init(VALUE m)
{
    depth_key = rb_internal_thread_specific_key_create();
    rb_define_singleton_method(m, "profile", m_profile, -1);
    rb_define_module_function(m, "_c_profile_enter", c_profile_enter, 0);
    rb_define_module_function(m, "_c_profile_leave", c_profile_leave, 0);
    rb_define_module_function(m, "_c_profile_depth", c_profile_depth, 0);
    rb_define_module_function(m, "_c_profiled_threads", c_profiled_threads, 0);
}
