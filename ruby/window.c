/*
 * window.c — the main Ractor's threads that no GVL event has shown the
 * profiler yet, for wall mode's window close (snapshot, stop): a thread
 * parked since before the start (a pool thread on a Queue, a call in
 * progress) gets the time it has spent off the GVL within the window, like
 * every thread the engine knows (core/thread_state.c,
 * rperf__settle_blocked), instead of nothing.
 *
 * At start, with the engine running, Thread.list is kept. A listed thread
 * whose Thread carries no token of this run at a close was never met: it
 * has not held the GVL since the list was taken (every RESUMED meets its
 * thread), so it has not exited either (dying takes the GVL) — unless the
 * engine failed to make some thread's state (out of memory), and then
 * nothing is done here. Its stack is read (rb_profile_thread_frames): one
 * with Ruby frames has run (a thread not started yet has none, and its
 * STARTED, which runs without the GVL, could race with making its state
 * here), so its state is made now, as first met off the GVL since the
 * window's start. Met threads leave the list, so it holds Thread objects
 * only of threads still parked since the start.
 *
 * Context: GVL held, main Ractor (start, snapshot, stop, exit); capture_thread
 * (the host callback) as rperf_host_t says.
 */
#include "rperf_ruby.h"

static VALUE listed = Qnil;          /* Array of Thread, or nil */

/* GVL held: the frames of `ref`'s Ruby thread, which is off the GVL and
 * alive (see rperf_host_t.capture_thread). */
int rperf_rb_capture_thread(uintptr_t ref, rperf_frame_t *buf, int max)
{
    return rb_profile_thread_frames((VALUE)ref, 0, max, (VALUE *)buf, NULL);
}

/* GVL held: the READY time kept on `ref`'s Ruby thread (hooks.c), or 0. */
int64_t rperf_rb_thread_ready_at(uintptr_t ref)
{
    intptr_t at = (intptr_t)rb_internal_thread_specific_get((VALUE)ref, rperf_rb_ready_key);
    return at > 0 ? (int64_t)at : 0;
}

static VALUE thread_list(VALUE unused)
{
    (void)unused;
    return rb_funcall(rb_cThread, rb_intern("list"), 0);
}

/* At start (wall mode), with the engine running and the caller's state
 * made. Thread.list is a Ruby method call, which a tracer sees like the
 * rest of start's Ruby code; what it raises is returned in *state. */
void rperf_rb_window_start(int *state)
{
    static bool registered;
    if (!registered) {
        rb_gc_register_address(&listed);
        registered = true;
    }
    listed = Qnil;
    *state = 0;
    VALUE list = rb_protect(thread_list, Qnil, state);
    if (*state == 0 && RB_TYPE_P(list, T_ARRAY)) listed = list;
}

/* At a window's close, before the engine's (rperf_engine_pause/stop). */
void rperf_rb_window_meet_parked(void)
{
    if (NIL_P(listed) || !rperf_engine_running()) return;
    if (!rperf_engine_threads_complete()) {
        listed = Qnil;
        return;
    }
    VALUE self = rb_thread_current();
    long kept = 0;
    for (long i = 0; i < RARRAY_LEN(listed); i++) {
        VALUE th = RARRAY_AREF(listed, i);
        if (th == self) continue;
        uintptr_t token = (uintptr_t)rb_internal_thread_specific_get(th, rperf_rb_key);
        if (rperf_thread_token_this_run(token)) continue;     /* met: the engine has it */
        rperf_frame_t frames[RPERF_MAX_DEPTH];
        if (rperf_rb_capture_thread((uintptr_t)th, frames, RPERF_MAX_DEPTH) > 0 &&
            rperf_engine_enter()) {
            rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_EXISTING);
            rperf_engine_leave();
            if (pt) {
                rperf_thread_set_host_ref(pt, (uintptr_t)th);
                rperf_thread_set_ractor(pt, 1);
                rperf_rb_thread_state_set(th, pt);
                continue;
            }
        }
        RARRAY_ASET(listed, kept, th);   /* not started yet, or no memory */
        kept++;
    }
    rb_ary_resize(listed, kept);
}

/* The run ended (stop, exit, release) or the process forked. */
void rperf_rb_window_forget(void) { listed = Qnil; }
