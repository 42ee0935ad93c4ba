/*
 * capture.c — the host side of sampling: the preregistered postponed job,
 * the stack-capture callback (rb_profile_frames) and the trigger.
 *
 * Contexts: trigger() runs in a signal handler or on a backend thread
 * (async-signal-safe: rb_postponed_job_trigger only); sample_job runs on a
 * Ruby thread holding its Ractor's GVL, at a safepoint, possibly not the
 * thread that was signalled (the job bitset is VM-global: it samples the
 * thread it runs on and leaves other threads' time pending); capture() runs
 * in own context (job, thread hooks on the thread itself, GC hooks) and
 * allocates nothing. trigger_register runs in a signal handler (a TLS read
 * and the trigger).
 */
#include "rperf_ruby.h"

static rb_postponed_job_handle_t job_handle = POSTPONED_JOB_HANDLE_INVALID;
rb_internal_thread_specific_key_t rperf_rb_key;

static int capture(rperf_frame_t *buf, int max)
{
    /* start must be 0: the start argument is broken in Ruby 3.3 */
    return rb_profile_frames(0, max, (VALUE *)buf, NULL);
}

static void trigger(void)
{
    rb_postponed_job_trigger(job_handle);
}

/* signal: a bootstrap signal reached a native thread the engine does not
 * know. Trigger the job only if it runs Ruby code: from a non-Ruby thread
 * the trigger would go to the main Ractor for nothing. */
static void trigger_register(void)
{
    if (ruby_native_thread_p()) rb_postponed_job_trigger(job_handle);
}

static void detach(uintptr_t handle)
{
    rb_internal_thread_specific_set((VALUE)handle, rperf_rb_key, NULL);
}

const rperf_host_t rperf_rb_host = {
    .capture = capture,
    .trigger = trigger,
    .trigger_register = trigger_register,
    .detach = detach,
};

/* GVL held, own: the state of the running Ruby thread, made current here. */
rperf_thread_t *rperf_rb_current_thread(bool create)
{
    rperf_thread_t *pt = rperf_current_thread_sigsafe();
    if (pt) return pt;
    VALUE th = rb_thread_current();
    pt = rb_internal_thread_specific_get(th, rperf_rb_key);
    if (pt) {
        rperf_thread_attach_current(pt);
        return pt;
    }
    if (!create) return NULL;
    pt = rperf_thread_new((uintptr_t)th, RPERF_THREAD_CURRENT);
    if (pt) rb_internal_thread_specific_set(th, rperf_rb_key, pt);
    return pt;
}

/* The job: runs on whichever thread flushes the VM-global job bitset, inside
 * its own Ractor. Ruby calls (Ractor id, GC hook registration, thread name)
 * happen outside enter/leave: they may allocate and so join a GC barrier,
 * which must never wait for a thread spinning in rperf_engine_stop. */
static void sample_job(void *data)
{
    (void)data;
    if (!rperf_engine_running()) return;
    uint32_t ractor = rperf_rb_ractor_prepare();
    if (!rperf_engine_enter()) return;
    bool want_name = false;
    rperf_thread_t *pt = rperf_rb_current_thread(true);
    if (pt) {
        if (rperf_thread_ractor(pt) != ractor) rperf_thread_set_ractor(pt, ractor);
        want_name = rperf_thread_wants_name(pt);
        rperf_sample_job(pt);
    }
    rperf_engine_leave();
    if (!want_name) return;
    char name[RPERF_THREAD_NAME_MAX];
    size_t len = rperf_rb_thread_name(name, sizeof(name));
    if (len == RPERF_RB_NAME_LATER) return;
    if (!rperf_engine_enter()) return;
    pt = rperf_rb_current_thread(false);
    if (pt) rperf_thread_set_name(pt, name, len);
    rperf_engine_leave();
}

int rperf_rb_capture_init(void)
{
    rperf_rb_key = rb_internal_thread_specific_key_create();
    job_handle = rb_postponed_job_preregister(0, sample_job, NULL);
    return job_handle == POSTPONED_JOB_HANDLE_INVALID ? -1 : 0;
}
