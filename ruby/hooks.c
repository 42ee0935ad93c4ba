/*
 * hooks.c — Ruby's internal thread event hook and the GC event hook, which
 * feed the engine's GVL and GC state machines.
 *
 * Contexts: thread_hook runs WITHOUT the GVL guarantee (RESUMED holds it;
 * SUSPENDED/EXITED run on the thread's own native thread; STARTED and READY
 * run on other native threads, even Ruby's timer thread): no Ruby API except
 * rb_internal_thread_specific_get/set, and at RESUMED the Ractor-local
 * storage read of rperf_rb_ractor_peek (safe there, see ractor.c), which
 * tells the engine a thread's Ractor (main = 1) before the backend's
 * thread_resumed runs; a thread of a Ractor with no number yet then
 * triggers the job on itself (rb_postponed_job_trigger, as from a signal
 * handler), so its Ractor is numbered without waiting for a tick. READY of
 * the thread that last suspended on the same native thread only stamps this
 * native thread's state (no enter/leave, see here.suspended; under M:N the
 * thread's slot below gets the time too, as the native thread may run
 * others before it resumes); any other
 * READY stores its time in the readied thread's thread-specific slot
 * (rperf_rb_ready_key), which the thread's RESUMED hands to the engine:
 * READY touches no engine state. (Wall mode splits blocked from waiting
 * time with it; cpu mode learns that the thread slept, so its time off the
 * GVL needs no CPU clock reading.)
 * RESUMED and SUSPENDED of a main-Ractor thread on a native thread of its
 * own skip enter/leave (`held`, see `here`).
 * STARTED runs on the creator's native thread (Ruby 3.3
 * native_thread_create), so a thread made inside a profile block of a
 * deferred run inherits it there (profile.c).
 * gc_hook runs inside GC on the thread
 * that runs the GC step: no allocation, no Ruby calls. install/remove run
 * with the GVL held (never from inside a hook).
 *
 * The GC hook lives in the main Ractor's hook list only, added at the first
 * start and never removed (it does nothing while stopped). In Ruby 3.3 any
 * change to a Ractor's hook list sets the VM-global event flags to *that*
 * Ractor's list (vm_trace.c update_global_event_hook), which silently turns
 * off TracePoints of every other Ractor; so the profiler changes the main
 * Ractor's list only at the first start, at the start and stop of an
 * allocation run (its NEWOBJ hook, ruby/alloc.c), and when the flags were
 * cleared by a collected Ractor (rperf_rb_hooks_heal, from a main-Ractor
 * job: the one list change a job makes, and only when GCs go by that its
 * hooks do not see). GC steps run by threads of other Ractors fire
 * only their own Ractor's hooks and are therefore not seen, except the
 * ends of marking in Ractors that carry rperf's allocation hook
 * (docs/architecture.md, "GC in Ractors", "Allocations").
 */
#include "rperf_ruby.h"

#include <stdatomic.h>

static rb_internal_thread_event_hook_t *thread_hook_handle;
static int gc_hook_installed;         /* the main Ractor's GC hook */
/* This native thread's view of the hook (every event reads it first). */
static _Thread_local struct {
    /* The Ruby thread that last SUSPENDED on this native thread. Its READY
     * on the same native thread (the end of a blocking region: IO, sleep,
     * C calls that release the GVL) needs no state lookup and no
     * enter/leave: the engine keeps the time in this native thread's state
     * (rperf_ev_ready_here). READY on another native thread (a Queue or
     * Mutex waker readying a sleeper) goes on the sleeper's thread-specific
     * slot. */
    VALUE suspended;
    /* The main-Ractor thread this native thread runs as its own (1:1
     * threads: set at its RESUMED, cleared at its EXITED; never under
     * RUBY_MN_THREADS=1, where native threads are shared), its engine state
     * and its token: its RESUMED and SUSPENDED find the state without the
     * token lookup (two more cache lines per event). It counts only for
     * that Ruby thread and in the run of the token (own_state): a 1:1
     * native thread runs one Ruby thread until that thread's EXITED, a
     * state lives until its thread has exited, and the token's run part
     * makes what an earlier run (or a fork's parent) left here stale, an
     * EXITED missed while stopped (the hook removed) included.
     * That thread's RESUMED and SUSPENDED also skip enter/leave (`held`):
     * both fire while it holds the main Ractor's GVL (Ruby 3.3
     * thread_pthread.c: RESUMED once it is the running thread, SUSPENDED
     * before it hands the GVL on), and everything that stops the engine or
     * frees its state runs holding that GVL too (stop, release, start;
     * fork and VM teardown have no other thread), so such a hook never
     * overlaps them. Two locked read-modify-writes and a cache line fewer
     * per event, four per GVL switch. Other Ractors' threads (their own
     * GVLs), READY (no GVL) and STARTED/EXITED keep enter/leave. */
    VALUE own_th;
    uintptr_t own_token;
    rperf_thread_t *own_pt;
} here __attribute__((tls_model("initial-exec")));
static bool mn_main;

static rperf_thread_t *own_state(VALUE th)
{
    return here.own_th == th && rperf_thread_token_this_run(here.own_token) ? here.own_pt : NULL;
}

static void thread_hook(rb_event_flag_t ev, const rb_internal_thread_event_data_t *data,
                        void *arg)
{
    (void)arg;
    VALUE th = data->thread;
    if (ev & RUBY_INTERNAL_THREAD_EVENT_READY) {
        if (th == here.suspended) {
            int64_t now = rperf_ev_ready_here();
            /* Under M:N this native thread may run other Ruby threads
             * before th resumes (a time-slice yield between two spinners
             * sharing it): their events overwrite its stamp, and th's wait
             * would count as blocked. Keep the same time on th too. */
            if (mn_main) rb_internal_thread_specific_set(th, rperf_rb_ready_key, (void *)(intptr_t)now);
        } else {
            /* a waker readies th (Queue, Mutex, join...), inside Ruby's
             * scheduler lock: the time goes on th itself (its
             * thread-specific slots share a line with its token, which its
             * RESUMED reads anyway), with no engine state, lookup or
             * locked instruction here; RESUMED hands it to the engine */
            rb_internal_thread_specific_set(th, rperf_rb_ready_key,
                                            (void *)(intptr_t)rperf_mono_ns());
        }
        return;
    }
    rperf_thread_t *pt = NULL;
    if (ev & (RUBY_INTERNAL_THREAD_EVENT_RESUMED | RUBY_INTERNAL_THREAD_EVENT_SUSPENDED))
        pt = own_state(th);
    bool held = pt != NULL;       /* this native thread's own, this run */
    if (held ? !rperf_engine_running() : !rperf_engine_enter()) return;
    if (!pt) pt = rperf_rb_thread_state(th);
    if (ev & RUBY_INTERNAL_THREAD_EVENT_STARTED) {
        rperf_rb_profile_inherit(th);   /* made inside a profile block */
        if (!pt) {
            pt = rperf_thread_new(RPERF_THREAD_CREATED);
            if (pt) {
                rperf_thread_set_host_ref(pt, (uintptr_t)th);
                rperf_rb_thread_state_set(th, pt);
            }
        }
    } else if (ev & RUBY_INTERNAL_THREAD_EVENT_RESUMED) {
        if (!pt) {
            pt = rperf_thread_new(RPERF_THREAD_EXISTING);
            if (pt) {
                rperf_thread_set_host_ref(pt, (uintptr_t)th);
                rperf_rb_thread_state_set(th, pt);
            }
        }
        if (pt) {
            /* main or not, before the backend hears of the thread (ractor.c) */
            uint32_t id = rperf_thread_ractor(pt);
            if (id == 0) {
                id = rperf_rb_ractor_peek();
                if (id) rperf_thread_set_ractor(pt, id);
            }
            intptr_t ready = (intptr_t)rb_internal_thread_specific_get(th, rperf_rb_ready_key);
            if (ready > 0) rperf_ev_ready_at(pt, (int64_t)ready);
            rperf_ev_resumed(pt);
            /* another Ractor's, not numbered yet, or without the
             * allocation hook an allocation run needs there: ask for the
             * job here, so it is done without waiting for a backend tick
             * (an allocation-only run takes none) */
            if (id == 0 || (id > 1 && rperf_rb_alloc_wants_ractor_job())) {
                rperf_rb_alloc_unhooked_ran();     /* it may sweep unreported */
                /* an allocation run takes no ticks to re-ask with */
                if (rperf_rb_alloc_ractors_active()) rperf_engine_want_job();
                else rperf_engine_register_sigsafe();
            }
            else if (id == 1 && !mn_main && !held) {
                here.own_th = th;
                here.own_token = rperf_thread_token(pt);
                here.own_pt = pt;
            }
        }
    } else if (ev & RUBY_INTERNAL_THREAD_EVENT_SUSPENDED) {
        if (pt) rperf_ev_suspended(pt);
        here.suspended = th;
        /* A READY time kept on th from an earlier suspension stays: it is
         * older than this SUSPENDED, and the engine ignores such a time
         * (RESUMED and a window's close alike), so th's line is not
         * written here. */
    } else if (ev & RUBY_INTERNAL_THREAD_EVENT_EXITED) {
        /* the token stays on the Thread: it says "met in this run"
         * (window.c); the state it names is freed once drained */
        if (pt) {
            /* Every thread that exits during a run took its GVL in it
             * (RESUMED: a main-Ractor thread is numbered there) or ran a
             * job (which numbers its Ractor). Still 0 here: a thread of
             * another Ractor whose job requests were all taken by other
             * threads' runs (the job bitset is one per VM) and whose
             * Ractor nobody numbered; it gets a number of its own, so no
             * thread ends a run with Ractor id 0 (ractor.c). */
            if (rperf_thread_ractor(pt) == 0)
                rperf_thread_set_ractor_at_exit(pt, rperf_rb_ractor_number_unseen());
            rperf_ev_exited(pt);
        }
        here.suspended = 0;
        here.own_th = 0;             /* the native thread may serve another */
    }
    if (!held) rperf_engine_leave();
}

/* The GC count at the last GC event a hook of rperf's saw (rperf_rb_hooks_heal) */
static _Atomic uint64_t gc_seen;

void rperf_rb_hooks_gc_seen(void)
{
    atomic_store_explicit(&gc_seen, (uint64_t)rb_gc_count(), memory_order_relaxed);
}

static void gc_hook(rb_event_flag_t ev, VALUE data, VALUE self, ID mid, VALUE klass)
{
    (void)data;
    (void)self;
    (void)mid;
    (void)klass;
    if (ev & (RUBY_INTERNAL_EVENT_GC_START | RUBY_INTERNAL_EVENT_GC_END_MARK)) rperf_rb_hooks_gc_seen();
    if (!rperf_engine_enter()) return;
    if (ev & RUBY_INTERNAL_EVENT_GC_START) rperf_ev_gc(RPERF_GC_START);
    else if (ev & RUBY_INTERNAL_EVENT_GC_END_MARK) {
        rperf_ev_gc(RPERF_GC_END_MARK);
        rperf_rb_alloc_gc_end_mark();    /* the live heap's dead objects */
        rperf_rb_frame_names_gc();       /* frames to judge at the next job */
    }
    else if (ev & RUBY_INTERNAL_EVENT_GC_END_SWEEP) rperf_ev_gc(RPERF_GC_END_SWEEP);
    else if (ev & RUBY_INTERNAL_EVENT_GC_ENTER) rperf_ev_gc(RPERF_GC_ENTER);
    else if (ev & RUBY_INTERNAL_EVENT_GC_EXIT) rperf_ev_gc(RPERF_GC_EXIT);
    rperf_engine_leave();
}

#define THREAD_EVENTS                                                                    \
    (RUBY_INTERNAL_THREAD_EVENT_STARTED | RUBY_INTERNAL_THREAD_EVENT_READY |             \
     RUBY_INTERNAL_THREAD_EVENT_RESUMED | RUBY_INTERNAL_THREAD_EVENT_SUSPENDED |         \
     RUBY_INTERNAL_THREAD_EVENT_EXITED)

/* GVL held, main Ractor, at start */
void rperf_rb_hooks_install(void)
{
    mn_main = rperf_rb_main_mn();
    if (!thread_hook_handle)
        thread_hook_handle = rb_internal_thread_add_event_hook(thread_hook, THREAD_EVENTS, NULL);
    if (!gc_hook_installed) {
        rb_add_event_hook(gc_hook, RPERF_RB_GC_EVENTS, Qnil);
        gc_hook_installed = 1;
    }
}

/* Ruby 3.3 frees a Ractor's hook list with the Ractor, and cleaning it
 * sets the VM-wide event flags to that (empty) list's events (vm_trace.c
 * rb_hook_list_free → clean_hooks → update_global_event_hook): once a
 * Ractor without hooks is collected, no event hook of any Ractor fires
 * any more — rperf's GC hook included — until some hook list changes. A
 * job of the main Ractor sees it: two GCs or more since a hook of rperf's
 * saw one, with no thread of another Ractor running (whose GCs the main
 * Ractor's hooks would not see), or with every other Ractor meant to have
 * rperf's allocation hook (whose END_MARK counts). It then changes the
 * main Ractor's list (the GC hook out and in again), which sets the flags
 * back to that list's events; at most every 20 ms. GVL held, main
 * Ractor, in a job (allocates). */
void rperf_rb_hooks_heal(void)
{
    static int64_t last;
    if (!gc_hook_installed) return;
    uint64_t n = (uint64_t)rb_gc_count();
    if (n < atomic_load_explicit(&gc_seen, memory_order_relaxed) + 2) return;
    int64_t now = rperf_mono_ns();
    if (last && now - last < 20000000LL) return;
    last = now;
    if (rperf_engine_other_ractor_threads() > 0 && !rperf_rb_alloc_ractors_active()) return;
    rb_remove_event_hook(gc_hook);
    rb_add_event_hook(gc_hook, RPERF_RB_GC_EVENTS, Qnil);
    atomic_store_explicit(&gc_seen, n, memory_order_relaxed);
}

/* Set in a fork child: the thread hook stays installed for good (it does
 * nothing while stopped). Ruby 3.3 does not re-initialise the hooks' rwlock
 * after fork, and a parent thread that was inside a hook callback at fork
 * time (another Ractor's native thread, typically under M:N) leaves it
 * read-locked forever in the child, so removing (write-locking) would hang. */
static int keep_thread_hook;

void rperf_rb_hooks_after_fork_child(void)
{
    keep_thread_hook = 1;
}

/* GVL held, main Ractor, at stop: the thread hook goes, the GC hook stays */
void rperf_rb_hooks_remove(void)
{
    if (thread_hook_handle && !keep_thread_hook) {
        rb_internal_thread_remove_event_hook(thread_hook_handle);
        thread_hook_handle = NULL;
    }
}
