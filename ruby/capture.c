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
rb_internal_thread_specific_key_t rperf_rb_ready_key;

static int capture(rperf_frame_t *buf, int max)
{
    /* start must be 0: the start argument is broken in Ruby 3.3 */
    int n = rb_profile_frames(0, max, (VALUE *)buf, NULL);
    rperf_rb_frame_names_captured((const VALUE *)buf, n);
    return n;
}

static void trigger(void)
{
    rb_postponed_job_trigger(job_handle);
}

/* signal: a bootstrap signal reached a native thread the engine does not
 * know. Trigger the job only if it runs Ruby code: from a non-Ruby thread
 * the trigger would go to the main Ractor for nothing. */
static bool trigger_register(void)
{
    if (!ruby_native_thread_p()) return false;
    rb_postponed_job_trigger(job_handle);
    return true;
}

/* worker: the host's periodic work (no Ruby API besides the trigger): a
 * forked child's windows, and the tick signal to native threads still
 * waiting for a job of their own (an allocation-only run takes no ticks
 * that would) */
static bool worker_poll(void)
{
    rperf_rb_child_windows_poll();
    rperf_rb_alloc_job_any();
    if (!rperf_engine_config()->alloc_only) return false;
    /* an allocation-only run takes no ticks: the main Ractor's job that
     * heals the event flags runs from here (it goes to the main Ractor's
     * running thread); once a Ractor other than the main one has run, its
     * collection may clear the flags at any GC, silencing the allocation
     * hook (so no sample would wake the worker): the worker comes back
     * within its busy period, not its idle one */
    trigger();
    return rperf_rb_ractors_seen();
}

const rperf_host_t rperf_rb_host = {
    .capture = capture,
    .trigger = trigger,
    .trigger_register = trigger_register,
    .capture_thread = rperf_rb_capture_thread,
    .thread_ready_at = rperf_rb_thread_ready_at,
    .worker_poll = worker_poll,
};

/* Any native thread, no Ruby API besides the thread-specific slot: the
 * engine state of Ruby thread `th` in this run (the slot holds a token,
 * stale after the run: see core/thread_index.c), or NULL. */
rperf_thread_t *rperf_rb_thread_state(VALUE th)
{
    return rperf_thread_from_token((uintptr_t)rb_internal_thread_specific_get(th, rperf_rb_key));
}

void rperf_rb_thread_state_set(VALUE th, rperf_thread_t *pt)
{
    rb_internal_thread_specific_set(th, rperf_rb_key, pt ? (void *)rperf_thread_token(pt) : NULL);
    rperf_rb_profile_adopt(th, pt);   /* a deferred run samples it inside a block */
}

/* GVL held, own, inside enter/leave: the state of the running Ruby thread,
 * made current here. */
rperf_thread_t *rperf_rb_current_thread(bool create)
{
    rperf_thread_t *pt = rperf_current_thread_sigsafe();
    if (pt) return pt;
    VALUE th = rb_thread_current();
    pt = rperf_rb_thread_state(th);
    if (pt) {
        rperf_thread_attach_current(pt);
        return pt;
    }
    if (!create) return NULL;
    pt = rperf_thread_new(RPERF_THREAD_CURRENT);
    if (pt) {
        rperf_thread_set_host_ref(pt, (uintptr_t)th);
        rperf_rb_thread_state_set(th, pt);
    }
    return pt;
}

/* The job: runs on whichever thread flushes the VM-global job bitset, inside
 * its own Ractor. It calls no Ruby method (a tracer on this thread would see
 * it): the Ractor id comes from Ractor-local storage, the thread name from
 * the kernel (ractor.c). Both happen outside enter/leave: the first
 * sighting of a Ractor mallocs, and the name read is a syscall. */
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
    if (ractor > 1 || rperf_rb_alloc_ractors_active()) rperf_rb_alloc_ractor_job();
    rperf_rb_alloc_job_any();
    if (ractor == 1) {
        rperf_rb_hooks_heal();
        rperf_rb_frame_names_pass();
    }
    if (!want_name) return;
    char name[RPERF_THREAD_NAME_MAX];
    size_t len = rperf_rb_thread_name(name, sizeof(name));
    if (!rperf_engine_enter()) return;
    pt = rperf_rb_current_thread(false);
    if (pt) rperf_thread_set_name(pt, name, len);
    rperf_engine_leave();
}

int rperf_rb_capture_init(void)
{
    rperf_rb_key = rb_internal_thread_specific_key_create();
    rperf_rb_ready_key = rb_internal_thread_specific_key_create();
    job_handle = rb_postponed_job_preregister(0, sample_job, NULL);
    return job_handle == POSTPONED_JOB_HANDLE_INVALID ? -1 : 0;
}
