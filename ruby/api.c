/*
 * api.c — the module functions behind lib/rperf.rb (Rperf._c_* and
 * Rperf.stop), the exit path, and the TypedData object whose mark function
 * pins every frame the engine holds. Option validation happens in Ruby
 * before _c_start is called.
 *
 * Stop and exit: the engine is stopped first, in C, before any Ruby code
 * runs (exporters, reports): Rperf.stop is a C method, and at exit a C end
 * proc (registered at require time, so it runs after the application's
 * at_exit blocks) stops a run that is still going, and a finalizer that
 * Ruby runs once it has terminated the program's threads writes the
 * output asked for at start. A run started even later (a later at_exit block, a
 * finalizer) is halted when Ruby frees its data objects at exit
 * (profiler_free), with a last guard at VM teardown (ruby_vm_at_exit); no
 * tick ever reaches a VM being destroyed.
 *
 * Context: GVL held (Ruby method calls; running? from any Ractor), except
 * profiler_mark and profiler_free, which run inside GC (GVL held, no
 * allocation; the mark lock-free), and vm_teardown (VM destruction, no
 * Ruby API).
 */
#include "rperf_ruby.h"
#include "rperf_exporter.h"

#include <ruby/thread.h>
#include <ruby/vm.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static VALUE profiler_obj;
static ID id_finish_stop;
static int finish_at_exit;          /* the run asked for output/reports */
/* the run asked for messages (verbose:, stat:): only then does rperf
 * write a line of its own on the program's stderr (exec.c) */
static bool run_messages;
/* [path, exporter name, child run?, opts, heap path] (frozen Strings, a
 * boolean, nil or a frozen Hash, nil or a frozen String) when the run's
 * output goes through a C exporter: then at exit and exec it is written
 * from C, so the path to the file calls no method the application may
 * have redefined (Symbol#to_s, Hash#[], ...). The heap path: a child's
 * part in a run with allocations beside time, whose heap profile is
 * written there too (after the time profile). nil otherwise. */
static VALUE exit_output = Qnil;
/* The run made its directory for forked children (_c_children_dir_made):
 * snapshots merge what they wrote. */
static bool run_has_children;
/* Rperf::Window readers are open (window.rb): a clearing snapshot hands
 * them the window it ends (__finish_snapshot). */
static bool window_readers;
static rb_ractor_local_key_t main_key;   /* set in the main Ractor only */

static void require_main_ractor(const char *what)
{
    if (rb_ractor_local_storage_ptr(main_key) == NULL)
        rb_raise(rb_eRuntimeError,
                 "Rperf.%s must be called from the main Ractor "
                 "(Rperf.label, Rperf.labels and Rperf.running? work in any Ractor)", what);
}

static VALUE sym_major_by;
static void mark_one(rperf_frame_t v) { rb_gc_mark((VALUE)v); }
static bool is_old(rperf_frame_t v) { return RB_OBJ_PROMOTED_RAW((VALUE)v); }

/* Is the GC marking now a major one? Ruby records the running GC's reason
 * at its start (gc_start: profile.latest_gc_info), and every major GC has a
 * major_by reason (a forced one: :force). Reading it allocates nothing once
 * the key is a Symbol; before the extension has made it (a GC while it
 * loads), every GC counts as major: marking everything is always safe,
 * and a wrong key would raise, allocating inside GC. */
bool rperf_rb_major_gc_now(void)
{
    return !sym_major_by || !NIL_P(rb_gc_latest_gc_info(sym_major_by));
}

/* Inside GC. A minor GC never frees old objects, so old frames (almost
 * all of them after a while) are not marked again: a minor GC costs what
 * changed since, not the size of the profile. Label sets are C memory
 * (ruby/label_table.c): only the rare label values kept as objects are
 * marked, however many sets there are. */
static void profiler_mark(void *p)
{
    (void)p;
    bool minor = !rperf_rb_major_gc_now();
    rperf_engine_mark(mark_one, minor ? is_old : NULL);
    rperf_rb_labels_mark();
}

/* Freed only at exit (the object is a registered mark object): Ruby frees
 * data objects after the end procs and every at_exit block, before it
 * tears the VM down (rb_objspace_call_finalizer, inside GC: no Ruby API).
 * A run still going then — started by an at_exit block that ran after the
 * end proc, or by a finalizer — is halted here, while Ruby's postponed-job
 * queue still exists: with RUBY_FREE_AT_EXIT=1 Ruby frees that queue
 * before the VM's at-exit hooks run (vm_teardown would be too late, and a
 * tick's trigger would write through a NULL queue). */
/* Inside GC compaction: the tracked objects of the live heap that moved
 * (ruby/alloc.c). The engine's frames are pinned and never move. */
static void profiler_compact(void *p)
{
    (void)p;
    rperf_rb_alloc_relocate();
}

static void profiler_free(void *p)
{
    (void)p;
    rperf_engine_halt();
}

/* Not RUBY_TYPED_WB_PROTECTED: the object is re-scanned at every marking,
 * so frames appended without write barriers are always seen (and
 * profiler_mark keeps that cheap in minor GCs). */
static const rb_data_type_t profiler_type = {
    .wrap_struct_name = "rperf_profiler",
    .function = { .dmark = profiler_mark, .dfree = profiler_free, .dsize = NULL,
                  .dcompact = profiler_compact },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static void fork_reset_if_needed(void)
{
    if (!rperf_engine_needs_fork_reset()) return;
    rperf_rb_child_windows_off();   /* the parent's: a restart sets its own */
    rperf_rb_window_forget();    /* the parent's other threads are gone here */
    rperf_rb_hooks_after_fork_child();
    rperf_rb_alloc_remove();
    rperf_engine_fork_reset();
}

static bool stop_engine_locked(void);
static VALUE release(VALUE unused);

/* One lifecycle change at a time across Ractors: start, stop, snapshot and
 * exit run in the main Ractor (its GVL orders them), but an exec from
 * another Ractor halts the run from there (rperf_rb_stop_for_exec). Held
 * for short spans; a thread of another Ractor waits for it without its
 * GVL (a GC barrier never waits on it). Released in a fork child: the
 * holder may be a thread the child does not have. */
static _Atomic int lifecycle_busy;

static void lifecycle_lock(void)
{
    int free_now = 0;
    while (!atomic_compare_exchange_weak(&lifecycle_busy, &free_now, 1)) {
        free_now = 0;
        sched_yield();
    }
}

static void *lifecycle_lock_nogvl(void *unused)
{
    (void)unused;
    lifecycle_lock();
    return NULL;
}

static VALUE lifecycle_unlock(VALUE unused)
{
    (void)unused;
    atomic_store(&lifecycle_busy, 0);
    return Qnil;
}

/* A run the end proc stopped, whose output and reports are still to be
 * written: by the exit finalizer (finish_at_exit_now), or first by an exec
 * or a start (an at_exit block registered before rperf was required runs
 * after the end proc). Not in a fork child: the run is its parent's. */
static bool finish_pending;
static void finish_stopped_run(const char *when);

static void lifecycle_after_fork_child(void)
{
    atomic_store(&lifecycle_busy, 0);
    finish_pending = false;
}

/* _c_start(frequency, mode(0 cpu/1 wall), aggregate, backend_name, signo,
 *          ring_slots, finish_at_exit (false, true, or :messages: finish
 *          and the run asked for messages), max_label_sets, defer),
 *          lifecycle lock held */
static VALUE start_locked(VALUE args)
{
    const VALUE *argv = (const VALUE *)args;
    VALUE freq = argv[0], mode = argv[1], aggregate = argv[2], backend = argv[3];
    VALUE signo = argv[4], ring_slots = argv[5], finish = argv[6], label_cap = argv[7];
    exit_output = Qnil;
    run_has_children = false;
    fork_reset_if_needed();
    if (rperf_engine_running()) rb_raise(rb_eRuntimeError, "Rperf is already running");
    rperf_rb_signal_check_free(NUM2INT(signo));   /* never replace someone else's action */
    rperf_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.frequency = NUM2INT(freq);
    cfg.clock = NUM2INT(mode) == 1 ? RPERF_CLOCK_WALL : RPERF_CLOCK_CPU;
    cfg.aggregate = RTEST(aggregate);
    cfg.signo = NUM2INT(signo);
    cfg.ring_slots = NUM2UINT(ring_slots);
    cfg.backend = rperf_backend_find(StringValueCStr(backend));
    cfg.bootstrap = rperf_rb_other_ractors_p();
    cfg.main_mn = rperf_rb_main_mn();
    cfg.direct_trigger = rperf_rb_verified_ruby();
    cfg.deferred = RTEST(argv[8]);
    cfg.alloc_interval = NUM2UINT(argv[9]);
    cfg.alloc_only = !RTEST(argv[10]);
    if (!cfg.backend) rb_raise(rb_eArgError, "unknown backend");
    char err[256] = "rperf: failed to start";
    rperf_thread_t *caller = NULL;
    /* before the engine runs: no label call can intern into the old table */
    rperf_rb_labels_reset(NUM2UINT(label_cap));
    /* Hooks in before the engine runs (they do nothing until then): a
     * thread of another Ractor that is not runnable at the bootstrap scan
     * and resumes right after it must meet the RESUMED hook, which is then
     * its only way in. Installed after the start, such a thread (one woken
     * by the caller's Ractor#take just before start) ran unseen for good. */
    rperf_rb_hooks_install();
    int32_t *skip = NULL;   /* nothing between here and free() raises */
    if (cfg.bootstrap) cfg.bootstrap_nskip = rperf_rb_main_thread_tids(&skip);
    cfg.bootstrap_skip = skip;
    int started = rperf_engine_start(&cfg, &caller, err, sizeof(err));
    free(skip);
    if (started < 0) {
        rperf_rb_hooks_remove();
        rb_raise(rb_eRuntimeError, "%s", err);
    }
    rperf_rb_alloc_install();
    rperf_rb_frame_names_reset();   /* the engine runs: whether frames may retire */
    rperf_thread_set_host_ref(caller, (uintptr_t)rb_thread_current());
    rperf_rb_thread_state_set(rb_thread_current(), caller);
    finish_at_exit = RTEST(finish);
    run_messages = finish == ID2SYM(rb_intern("messages"));
    /* start is called from the main Ractor (lib/rperf.rb checks it) */
    rperf_thread_set_ractor(caller, 1);
    char name[RPERF_THREAD_NAME_MAX];
    size_t len = rperf_rb_thread_name(name, sizeof(name));
    rperf_thread_set_name(caller, name, len);
    if (cfg.clock == RPERF_CLOCK_WALL) {
        /* threads parked since before the start (window.c); taken with the
         * engine running, so none of them can exit unseen afterwards */
        int state = 0;
        rperf_rb_window_start(&state);
        if (state) {                 /* e.g. a tracer raised: nothing started */
            stop_engine_locked();
            release(Qnil);
            rb_jump_tag(state);
        }
    }
    return Qnil;
}

/* _c_start's own checks: lib/rperf.rb validates the options with messages
 * for users, but a call that bypasses it (frequency 0 would divide by
 * zero) must not reach the engine either. */
static void check_start_args(const VALUE *argv)
{
    if (!FIXNUM_P(argv[0]) || FIX2LONG(argv[0]) < 1 || FIX2LONG(argv[0]) > 10000)
        rb_raise(rb_eArgError, "frequency must be an Integer 1..10000");
    if (argv[1] != INT2FIX(0) && argv[1] != INT2FIX(1))
        rb_raise(rb_eArgError, "mode must be 0 (cpu) or 1 (wall)");
    Check_Type(argv[3], T_STRING);
    if (!FIXNUM_P(argv[4]) || FIX2LONG(argv[4]) < 0 || FIX2LONG(argv[4]) > 64)
        rb_raise(rb_eArgError, "signal must be an Integer 0..64 (0: the backend's default)");
    long slots = FIXNUM_P(argv[5]) ? FIX2LONG(argv[5]) : 0;
    if (slots < 1024 || slots > (1L << 24) || (slots & (slots - 1)) != 0)
        rb_raise(rb_eArgError, "ring_size must be a power of two between 1024 and %ld", 1L << 24);
    if (!FIXNUM_P(argv[7]) || FIX2LONG(argv[7]) < 1 || FIX2LONG(argv[7]) > (1L << 23))
        rb_raise(rb_eArgError, "max_label_sets must be an Integer 1..%ld", 1L << 23);
    if (!FIXNUM_P(argv[9]) || FIX2LONG(argv[9]) < 0 || FIX2LONG(argv[9]) > (1L << 30))
        rb_raise(rb_eArgError, "alloc_interval must be an Integer 0..%ld", 1L << 30);
}

static VALUE c_start(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    rb_check_arity(argc, 11, 11);
    require_main_ractor("start");
    check_start_args(argv);
    if (finish_pending) {             /* the previous run, stopped at exit */
        finish_pending = false;
        finish_stopped_run("exit");
    }
    lifecycle_lock();
    return rb_ensure(start_locked, (VALUE)argv, lifecycle_unlock, Qnil);
}

/* Free a stopped run's engine data (never touches Ruby threads: the tokens
 * they carry are stale from now on). */
static VALUE release(VALUE unused)
{
    (void)unused;
    if (!rperf_engine_running() && rperf_engine_has_results()) {
        rperf_rb_windows_fold(true);
        rperf_engine_release();
        rperf_rb_frame_names_reset();
    }
    return Qnil;
}

/* Stop the engine and remove the hooks: C only, no Ruby code runs (the
 * parked threads' stacks are read without calling a method). */
static bool stop_engine_locked(void)
{
    if (!rperf_engine_running()) return false;
    rperf_rb_child_windows_off();
    rperf_rb_window_meet_parked();
    rperf_engine_stop();
    rperf_rb_alloc_remove();
    rperf_rb_alloc_settle();
    rperf_rb_window_forget();
    rperf_rb_hooks_remove();
    return true;
}

static bool stop_engine(void)
{
    fork_reset_if_needed();
    lifecycle_lock();
    bool was = stop_engine_locked();
    lifecycle_unlock(Qnil);
    return was;
}

static VALUE build_stopped_result(VALUE unused)
{
    (void)unused;
    return rperf_rb_build_result(!rperf_engine_config()->aggregate);
}

/* Ruby side of stop (lib/rperf.rb: result post-processing, output, verbose
 * and stat reports); C exporters read the engine's data until release. */
static VALUE finish_stop(VALUE data)
{
    return rb_funcall(rperf_rb_mRperf, id_finish_stop, 1, data);
}

static VALUE build_and_finish(VALUE unused)
{
    return finish_stop(build_stopped_result(unused));
}

/* Rperf.stop -> the result Hash, or nil when not running. */
static VALUE rb_stop(VALUE self)
{
    (void)self;
    require_main_ractor("stop");
    if (!stop_engine()) return Qnil;
    return rb_ensure(build_and_finish, Qnil, release, Qnil);
}

typedef struct {
    VALUE out, data;
} exit_export_t;

static VALUE flush_stream(VALUE io)
{
    if (RB_TYPE_P(io, T_FILE)) rb_io_flush(io);
    return Qnil;
}

static VALUE export_exit_output(VALUE arg)
{
    exit_export_t *a = (exit_export_t *)arg;
    return rperf_rb_export_engine_file(RARRAY_AREF(a->out, 1), RARRAY_AREF(a->out, 0), a->data,
                                       RARRAY_AREF(a->out, 3));
}

static VALUE heap_opts;   /* {sample_type: :inuse_space}, frozen */

static VALUE export_exit_heap(VALUE arg)
{
    exit_export_t *a = (exit_export_t *)arg;
    return rperf_rb_export_engine_file(RARRAY_AREF(a->out, 1), RARRAY_AREF(a->out, 4), a->data, heap_opts);
}

/* The message of the pending error (rb_errinfo), read without calling a
 * method: the failure may come from a tracer that raises on every call, or
 * from a redefined core method. The error is cleared. */
static void report_error(const char *what)
{
    VALUE e = rb_errinfo();
    rb_set_errinfo(Qnil);
    VALUE msg = NIL_P(e) ? Qnil : rb_attr_get(e, rb_intern("mesg"));
    const char *cls = NIL_P(e) ? "?" : rb_class2name(rb_obj_class(e));
    fprintf(stderr, "%s: %.*s (%s)\n", what, RB_TYPE_P(msg, T_STRING) ? (int)RSTRING_LEN(msg) : 7,
            RB_TYPE_P(msg, T_STRING) ? RSTRING_PTR(msg) : "(error)", cls ? cls : "?");
}

/* The output of a run stopped at exit or exec, through its C exporter
 * (exit_output): true when it was handled here (written, or reported). */
static bool write_exit_output(VALUE out, VALUE data)
{
    if (NIL_P(out) || !RB_TYPE_P(data, T_HASH) || !rperf_engine_config()->aggregate) return false;
    VALUE path = RARRAY_AREF(out, 0);
    if (RTEST(RARRAY_AREF(out, 2))) {
        /* the rperf command's run: its directory is gone when this process
         * outlived the command */
        char *dir = strdup(RSTRING_PTR(path));
        char *slash = dir ? strrchr(dir, '/') : NULL;
        if (slash) *slash = '\0';
        bool gone = slash && access(dir, F_OK) != 0;
        free(dir);
        if (gone) {
            fprintf(stderr, "rperf: process %ld ended after the run it was part of; its profile is left out\n",
                    (long)getpid());
            rperf_writer_spare_release();
            return true;
        }
    }
    int state = 0;
    rb_protect(flush_stream, rb_stdout, &state);
    if (!state) rb_protect(flush_stream, rb_stderr, &state);
    if (state) rb_set_errinfo(Qnil);   /* a broken stream: write the profile anyway */
    exit_export_t a = { out, data };
    rb_protect(export_exit_output, (VALUE)&a, &state);
    rperf_writer_spare_release();
    if (!state && !NIL_P(RARRAY_AREF(out, 4))) rb_protect(export_exit_heap, (VALUE)&a, &state);
    if (state) {
        char what[160];
        snprintf(what, sizeof what, "rperf: exporter %s failed", RSTRING_PTR(RARRAY_AREF(out, 1)));
        report_error(what);
    }
    return true;
}

static VALUE build_stopped_result(VALUE unused);

static VALUE finish_stop_written(VALUE data)
{
    return rb_funcall(rperf_rb_mRperf, id_finish_stop, 2, data, Qtrue);
}

/* A run stopped at exit or exec: its output/reports are written if start
 * asked for them (the output from C when a C exporter writes it), then its
 * data is released. An error there is reported on stderr and does not
 * change the exit status. */
static void finish_stopped_run(const char *when)
{
    VALUE out = exit_output;
    exit_output = Qnil;
    int state = 0;
    if (finish_at_exit) {
        VALUE data = rb_protect(build_stopped_result, Qnil, &state);
        if (!state && write_exit_output(out, data))
            rb_protect(finish_stop_written, data, &state);
        else if (!state)
            rb_protect(finish_stop, data, &state);
        RB_GC_GUARD(data);
        RB_GC_GUARD(out);
    }
    release(Qnil);
    if (state) {
        char what[64];
        snprintf(what, sizeof what, "rperf: writing the profile at %s failed", when);
        report_error(what);
    }
}

/* Finalizer at exit (main thread, GVL held): Ruby runs it after every end
 * proc and at_exit block and after it has terminated the program's other
 * threads and Ractors. Writing a profile or a report releases the GVL (the
 * exporters work without it; IO blocks): at the end procs the program's
 * threads would run meanwhile and see the main thread asleep where,
 * unprofiled, it is already on its way out ("false false aborting" to a
 * thread watching it); here none is left to see it. Ruby has also removed
 * every event hook and TracePoint by then, so none of the application's
 * can raise into the writing. */
static VALUE finish_at_exit_now(RB_BLOCK_CALL_FUNC_ARGLIST(yielded, unused))
{
    (void)yielded;
    (void)unused;
    if (!finish_pending) return Qnil;
    finish_pending = false;
    finish_stopped_run("exit");
    return Qnil;
}

/* Holds the finalizer above: kept alive for the process's life, so its
 * finalizer runs only at exit (Ruby runs every remaining finalizer then,
 * before it frees data objects). */
static VALUE exit_token;

/* End proc (main thread, GVL held, at exit): a run still going is stopped
 * here (its samples end where the program's code ends) and finished at
 * the finalizers (finish_at_exit_now). */
static void at_end(VALUE unused)
{
    (void)unused;
    if (rb_ractor_local_storage_ptr(main_key) == NULL || !stop_engine()) return;
    finish_pending = true;
    rb_define_finalizer(exit_token, rb_proc_new(finish_at_exit_now, Qnil));
}

/* Before exec (exec.c), GVL held, any Ractor: the run is over before the
 * image is replaced. In the main Ractor it is finished as at exit; in
 * another one it is halted (no last sample, nothing written: the profile
 * is built in the main Ractor only). Returns whether a run was going. */
bool rperf_rb_stop_for_exec(void)
{
    if (rb_ractor_local_storage_ptr(main_key) != NULL) {
        if (!finish_pending && !stop_engine()) return false;
        finish_pending = false;           /* stopped at exit, or just now */
        finish_stopped_run("exec");
        return true;
    }
    if (!rperf_engine_running()) return false;
    rb_thread_call_without_gvl(lifecycle_lock_nogvl, NULL, NULL, NULL);
    bool was = rperf_engine_running();
    rperf_engine_halt();
    lifecycle_unlock(Qnil);
    return was;
}

bool rperf_rb_run_messages(void) { return run_messages; }

/* VM teardown (ruby_vm_destruct): no Ruby API any more. The last guard
 * (profiler_free normally halts a late run first). */
static void vm_teardown(ruby_vm_t *vm)
{
    (void)vm;
    rperf_engine_halt();
}

static VALUE resume_clear(VALUE clear)
{
    if (RTEST(clear)) {
        /* open Rperf::Window readers keep what they saw of the ending table */
        rperf_rb_windows_fold(false);
        /* a new window: label sets nobody uses any more are released too */
        rperf_rb_labels_window_clear();
        rperf_engine_clear();
        rperf_rb_frame_names_reset();    /* ids restart with the table */
        /* heap windows go on from the objects in use the clear kept */
        rperf_rb_windows_rebase();
    }
    rperf_engine_resume(false);
    rperf_rb_alloc_pause(false);
    lifecycle_unlock(Qnil);
    return Qnil;
}

static VALUE build_snapshot(VALUE unused)
{
    (void)unused;
    return rperf_rb_build_result(false);
}

static VALUE build_snapshot_protected(VALUE unused)
{
    int state = 0;
    VALUE data = rb_protect(build_snapshot, unused, &state);
    if (state) rb_set_errinfo(Qnil);
    return state ? Qnil : data;
}

/* GVL held, main Ractor, from a postponed job (child_windows.c): the run's
 * window so far, cleared as by snapshot(clear: true). Qundef when a
 * start, stop or snapshot is in progress (the job tries again later); nil
 * when not running, not aggregating, or the result could not be built.
 * Calls no Ruby method and raises nothing. */
VALUE rperf_rb_window_take(void)
{
    int free_now = 0;
    if (rperf_engine_needs_fork_reset()) return Qnil;   /* a fork child's job: the parent's window */
    if (!atomic_compare_exchange_strong(&lifecycle_busy, &free_now, 1)) return Qundef;
    if (!rperf_engine_running() || !rperf_engine_config()->aggregate) return lifecycle_unlock(Qnil);
    rperf_rb_window_meet_parked();
    rperf_engine_pause();
    rperf_rb_alloc_close();
    VALUE data = build_snapshot_protected(Qnil);
    resume_clear(Qtrue);   /* unlocks */
    return data;
}

/* The lifecycle lock held: the run paused, or why not (the lock given
 * back then). */
static int window_pause_locked(bool heap)
{
    if (!rperf_engine_running()) {
        lifecycle_unlock(Qnil);
        return RPERF_RB_PAUSE_NOT_RUNNING;
    }
    if (!rperf_engine_config()->aggregate) {
        lifecycle_unlock(Qnil);
        return RPERF_RB_PAUSE_RAW;
    }
    rperf_rb_window_meet_parked();
    rperf_engine_pause();
    if (heap) rperf_rb_alloc_close();
    return RPERF_RB_PAUSE_OK;
}

int rperf_rb_window_pause(bool heap)
{
    fork_reset_if_needed();
    lifecycle_lock();
    return window_pause_locked(heap);
}

/* GVL held, main Ractor, from a postponed job (window_send.c): as
 * rperf_rb_window_pause, but RPERF_RB_PAUSE_BUSY instead of waiting for
 * a start, stop or snapshot in progress, and nothing in a fork child not
 * reset yet (the parent's run). */
int rperf_rb_window_try_pause(bool heap)
{
    int free_now = 0;
    if (rperf_engine_needs_fork_reset()) return RPERF_RB_PAUSE_NOT_RUNNING;
    if (!atomic_compare_exchange_strong(&lifecycle_busy, &free_now, 1)) return RPERF_RB_PAUSE_BUSY;
    return window_pause_locked(heap);
}

void rperf_rb_window_resume(bool heap)
{
    rperf_engine_resume(false);
    if (heap) rperf_rb_alloc_pause(false);
    lifecycle_unlock(Qnil);
}

/* Rperf.snapshot(clear: false) -> the aggregated data so far (nil when not
 * running); profiling goes on. A C method: a tracer sees only this call. */
static VALUE c_snapshot(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    VALUE opts = Qnil, clear = Qfalse;
    rb_scan_args(argc, argv, ":", &opts);
    if (!NIL_P(opts)) {
        static ID kw[1];
        if (!kw[0]) kw[0] = rb_intern("clear");
        VALUE vals[1];
        rb_get_kwargs(opts, kw, 0, 1, vals);
        if (vals[0] != Qundef) clear = RTEST(vals[0]) ? Qtrue : Qfalse;
    }
    require_main_ractor("snapshot");
    fork_reset_if_needed();
    lifecycle_lock();
    if (!rperf_engine_running()) return lifecycle_unlock(Qnil);
    if (!rperf_engine_config()->aggregate) {
        lifecycle_unlock(Qnil);
        rb_raise(rb_eRuntimeError, "snapshot requires aggregate mode (aggregate: true)");
    }
    rperf_rb_window_meet_parked();
    rperf_engine_pause();
    rperf_rb_alloc_close();
    VALUE data = rb_ensure(build_snapshot, Qnil, resume_clear, clear);
    /* forked children's profiles join it (ruby/lib/rperf/inherit.rb); a
     * run without children calls no Ruby method here */
    if (run_has_children || (window_readers && RTEST(clear)))
        return rb_funcall(rperf_rb_mRperf, rb_intern("__finish_snapshot"), 2, data, clear);
    return data;
}

/* _c_exit_output(path, exporter_name, child_run, sample_type = nil,
 * heap_path = nil): the run just started writes its output through this C
 * exporter at exit and exec (sample_type: a Symbol Rperf.start checked, or
 * nil), and with heap_path its heap profile (inuse_space) there after it. */
static VALUE c_exit_output(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    rb_check_arity(argc, 3, 5);
    VALUE path = argv[0], name = argv[1], child = argv[2];
    VALUE type = argc > 3 ? argv[3] : Qnil;
    VALUE heap = argc > 4 ? argv[4] : Qnil;
    require_main_ractor("start");
    FilePathValue(path);
    StringValue(name);
    if (!NIL_P(type)) Check_Type(type, T_SYMBOL);
    if (!NIL_P(heap)) {
        FilePathValue(heap);
        heap = rb_str_new_frozen(heap);
    }
    if (!rperf_engine_running() || !rperf_exporter_find(StringValueCStr(name))) return Qnil;
    VALUE opts = Qnil;
    if (!NIL_P(type)) {
        opts = rb_hash_new();
        rb_hash_aset(opts, ID2SYM(rb_intern("sample_type")), type);
        rb_obj_freeze(opts);
    }
    exit_output = rb_ary_new_from_args(5, rb_str_new_frozen(path), rb_str_new_frozen(name),
                                       RTEST(child) ? Qtrue : Qfalse, opts, heap);
    return Qnil;
}

/* _c_children_dir_made: the run going has a directory for its forked
 * children's profiles (ruby/lib/rperf/inherit.rb). */
static VALUE c_children_dir_made(VALUE self)
{
    (void)self;
    run_has_children = rperf_engine_running();
    /* finished at exit even without an output: the children's directory
     * is removed there (__finish_stop) */
    if (run_has_children) finish_at_exit = 1;
    return Qnil;
}

bool rperf_rb_run_has_children(void) { return run_has_children; }

/* _c_window_readers(bool): Rperf::Window readers are open or not. */
static VALUE c_window_readers(VALUE self, VALUE on)
{
    (void)self;
    window_readers = RTEST(on);
    return Qnil;
}

/* _c_main_mn -> whether rperf runs the main Ractor's threads as M:N
 * (ractor.c: the one answer every part uses); for tests and diagnostics. */
static VALUE c_main_mn(VALUE self)
{
    (void)self;
    return rperf_rb_main_mn() ? Qtrue : Qfalse;
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
    /* The key the mark function reads, made before the object whose mark
     * function reads it: loading under GC.stress runs a GC at every
     * allocation. */
    VALUE major_by = ID2SYM(rb_intern("major_by"));
    (void)rb_gc_latest_gc_info(major_by);   /* let Ruby set up its symbols now */
    sym_major_by = major_by;
    /* DATA_PTR must be non-NULL: GC skips dmark for NULL data pointers. */
    static int token;
    profiler_obj = TypedData_Wrap_Struct(rb_cObject, &profiler_type, &token);
    rb_gc_register_mark_object(profiler_obj);
    static int main_marker;
    main_key = rb_ractor_local_storage_ptr_newkey(NULL);
    rb_ractor_local_storage_ptr_set(main_key, &main_marker);
    id_finish_stop = rb_intern("__finish_stop");
    rb_gc_register_address(&exit_output);
    heap_opts = rb_hash_new();
    rb_hash_aset(heap_opts, ID2SYM(rb_intern("sample_type")), ID2SYM(rb_intern("inuse_space")));
    rb_obj_freeze(heap_opts);
    rb_gc_register_mark_object(heap_opts);
    pthread_atfork(NULL, NULL, lifecycle_after_fork_child);
    exit_token = rb_obj_alloc(rb_cObject);
    rb_gc_register_mark_object(exit_token);
    rb_set_end_proc(at_end, Qnil);
    ruby_vm_at_exit(vm_teardown);
    rb_define_module_function(m, "_c_start", c_start, -1);
    rb_define_module_function(m, "stop", rb_stop, 0);
    rb_define_module_function(m, "snapshot", c_snapshot, -1);
    rb_define_module_function(m, "running?", c_running_p, 0);
    rb_define_module_function(m, "_c_exit_output", c_exit_output, -1);
    rb_define_module_function(m, "_c_main_mn", c_main_mn, 0);
    rb_define_module_function(m, "_c_window_readers", c_window_readers, 1);
    rb_define_module_function(m, "_c_children_dir_made", c_children_dir_made, 0);
    rb_define_module_function(m, "_c_backends", c_backends, 0);
    rb_define_module_function(m, "_c_after_fork_child", c_after_fork_child, 0);
    rb_define_const(m, "DEFAULT_RING_SLOTS", INT2NUM(RPERF_DEFAULT_RING_SLOTS));
}
