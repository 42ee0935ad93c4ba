/*
 * rperf_ruby.h — declarations shared by the files of ruby/ (the Ruby binding
 * of the engine). Context: see each file's header.
 */
#ifndef RPERF_RUBY_H
#define RPERF_RUBY_H

#include <pthread.h>
#include <ruby/ruby.h>
#include <ruby/debug.h>
#include <ruby/thread.h>
#include <ruby/ractor.h>

#include "rperf_backend.h"
#include "rperf_core.h"

extern rb_internal_thread_specific_key_t rperf_rb_key;
/* CLOCK_MONOTONIC of the thread's READY from another native thread since
 * its SUSPENDED (hooks.c; both modes), 0 none */
extern rb_internal_thread_specific_key_t rperf_rb_ready_key;
extern VALUE rperf_rb_mRperf;

/* capture.c */
int rperf_rb_capture_init(void);
extern const rperf_host_t rperf_rb_host;
rperf_thread_t *rperf_rb_current_thread(bool create);
rperf_thread_t *rperf_rb_thread_state(VALUE th);
void rperf_rb_thread_state_set(VALUE th, rperf_thread_t *pt);

/* hooks.c */
void rperf_rb_hooks_install(void);
void rperf_rb_hooks_remove(void);
void rperf_rb_hooks_after_fork_child(void);
/* a GC event reached a hook of rperf's (other Ractors' allocation hooks) */
void rperf_rb_hooks_gc_seen(void);

/* frame_names.c: names of frames whose code is no longer pinned */
typedef struct rperf_rb_frame_text {
    const char *path, *label;
    size_t path_len, label_len;
    int first_line;
} rperf_rb_frame_text_t;
void rperf_rb_frame_names_gc(void);          /* inside GC: a pass is due */
void rperf_rb_frame_names_captured(const VALUE *frames, int n);   /* own, any Ractor */
void rperf_rb_frame_names_pass(void);        /* GVL, main Ractor, job */
bool rperf_rb_frame_name(uint32_t id, rperf_rb_frame_text_t *out);   /* retired id */
/* GVL held, results not released: any frame id >= RPERF_SYNTHETIC_FRAMES
 * named as results name it; keep[] holds the strings the text points
 * into (allocates for a pinned frame) */
void rperf_rb_frame_text(uint32_t id, rperf_rb_frame_text_t *out, VALUE keep[2]);
void rperf_rb_frame_names_reset(void);       /* GVL: start, clear, release */
/* main Ractor, a job: put the event flags back if a collected Ractor
 * cleared them */
void rperf_rb_hooks_heal(void);

/* alloc.c (allocation sampling: the NEWOBJ hook and the live heap's
 * questions to Ruby) */
void rperf_rb_alloc_install(void);
void rperf_rb_alloc_remove(void);
void rperf_rb_alloc_pause(bool on);
/* this run samples other Ractors' allocations too (GVL held) */
bool rperf_rb_alloc_ractors(void);
void rperf_rb_alloc_settle(void);
/* at a window's close (worker parked): settle, and no samples until the
 * window is resumed (rperf_rb_alloc_pause(false)) */
static inline void rperf_rb_alloc_close(void)
{
    rperf_rb_alloc_settle();
    rperf_rb_alloc_pause(true);
}
void rperf_rb_alloc_relocate(void);
void rperf_rb_alloc_gc_end_mark(void);
/* RESUMED-safe: a job should run in this Ractor to add its allocation hook */
bool rperf_rb_alloc_wants_ractor_job(void);
/* RESUMED-safe: other Ractors get allocation hooks in this run */
bool rperf_rb_alloc_ractors_active(void);
/* RESUMED of a thread of another Ractor without the allocation hook */
void rperf_rb_alloc_unhooked_ran(void);
/* any job: re-signal the native threads still waiting for theirs */
void rperf_rb_alloc_job_any(void);
/* the job, in a Ractor other than the main one, outside enter/leave */
void rperf_rb_alloc_ractor_job(void);

/* the GC events of rperf's GC hook (hooks.c); other Ractors' allocation
 * hooks carry them too (alloc.c) */
#define RPERF_RB_GC_EVENTS                                                                \
    (RUBY_INTERNAL_EVENT_GC_START | RUBY_INTERNAL_EVENT_GC_END_MARK |                     \
     RUBY_INTERNAL_EVENT_GC_END_SWEEP | RUBY_INTERNAL_EVENT_GC_ENTER |                    \
     RUBY_INTERNAL_EVENT_GC_EXIT)
VALUE rperf_rb_alloc_class_name(uint32_t class_id, uint32_t rtype);

/* ruby_version.c: this Ruby is of a series whose internals the suite
 * verified (else rperf runs in its conservative form) */
void rperf_rb_ruby_version_init(VALUE m);
bool rperf_rb_verified_ruby(void);

/* ractor.c */
int rperf_rb_ractors_unhooked(void);
void rperf_rb_ractor_init(void);
uint32_t rperf_rb_ractor_prepare(void);
uint32_t rperf_rb_ractor_peek(void);   /* RESUMED-safe: the id, 0 = other, unnumbered */
uint32_t rperf_rb_ractor_number_unseen(void);   /* any context: a fresh number */
bool rperf_rb_ractors_seen(void);      /* another Ractor was numbered in this process */
bool rperf_rb_ractor_alloc_hook_missing(void);   /* RESUMED-safe */
void rperf_rb_ractor_alloc_hook_added(void);
bool rperf_rb_other_ractors_p(void);
bool rperf_rb_main_mn(void);   /* RUBY_MN_THREADS: main-Ractor threads share native threads */
size_t rperf_rb_main_thread_tids(int32_t **out);   /* at start: sorted, malloc'd */
size_t rperf_rb_thread_name(char *buf, size_t cap);

/* labels.c */
void rperf_rb_labels_init(VALUE mRperf);
void rperf_rb_labels_reset(uint32_t window_cap);
void rperf_rb_labels_window_clear(void);
/* inside GC: the label values kept as objects (label_objects.c) */
void rperf_rb_labels_mark(void);
/* GVL held, main Ractor: the sets' Hashes by id, built now; used[id]:
 * the result's samples use id (ids >= n_used: unknown, listed) */
VALUE rperf_rb_label_sets(const uint8_t *used, size_t n_used);
uint32_t rperf_rb_label_set_count(void);
uint64_t rperf_rb_labels_overflowed(void);
/* GVL held: a labelled block's start (labels: a Hash or nil) and end */
VALUE rperf_rb_label_push(VALUE labels);
void rperf_rb_label_restore(VALUE token);

/* profile.c (Rperf.profile; the profile-block depth of Ruby threads) */
void rperf_rb_profile_init(VALUE mRperf);
/* where thread state is made (hooks too): th inside a block is profiled */
void rperf_rb_profile_adopt(VALUE th, rperf_thread_t *pt);
/* STARTED, on the creator's native thread: th inherits its creator's block */
void rperf_rb_profile_inherit(VALUE th);

/* window.c */
int rperf_rb_capture_thread(uintptr_t ref, rperf_frame_t *buf, int max);
int64_t rperf_rb_thread_ready_at(uintptr_t ref);
void rperf_rb_window_start(int *state);
void rperf_rb_window_meet_parked(void);
void rperf_rb_window_forget(void);

/* result.c */
VALUE rperf_rb_build_result(bool raw);
/* A window's baseline (window_delta.c): entry weights and counters */
typedef struct rperf_rb_since {
    const int64_t *weights;
    size_t n;
    rperf_stats_t stats;     /* start_time_ns/start_mono_ns: the window's start */
    bool heap;               /* the allocations too: */
    const int64_t *alloc;    /* four values per allocation entry */
    size_t nalloc;
    rperf_heap_stats_t heap_stats;
} rperf_rb_since_t;
/* worker parked or joined: the entries that gained weight over `since`,
 * the counters' growth, the window's start and duration; with heap, the
 * allocation entries that moved (:allocations) */
VALUE rperf_rb_build_result_since(const rperf_rb_since_t *since);

/* window_delta.c: Rperf::Window's baselines */
void rperf_rb_window_delta_init(VALUE mRperf);
/* GVL held, worker parked (a clearing resume) or joined (release): every
 * open window keeps its result so far; ended: the run is released */
void rperf_rb_windows_fold(bool ended);
/* after the clear (worker still parked): heap windows' baselines are the
 * objects in use the clear kept */
void rperf_rb_windows_rebase(void);
/* GVL held, main Ractor, from a postponed job: Rperf._c_window_close's
 * parts, or Qundef while a lifecycle call is in progress (the mark stays
 * open); raises nothing for a mark object (window_send.c) */
VALUE rperf_rb_window_close_try(VALUE mark);
bool rperf_rb_window_mark_p(VALUE obj);
/* GVL held, main Ractor, from a postponed job: a time window's mark opened
 * now, or nil (no run, a lifecycle call in progress, ...); never raises */
VALUE rperf_rb_window_mark_try(void);
/* GVL held: a mark nobody will read, closed without a result */
void rperf_rb_window_discard(VALUE mark);
/* serve_accept.c: Rperf::Server's accepting thread */
void rperf_rb_serve_accept_init(VALUE mRperf);
/* window_send.c: a scrape's window closed and sent off the GVL */
void rperf_rb_window_send_init(VALUE mRperf);
/* GVL held: a pthread made with every signal blocked (a helper thread of
 * rperf's: process signals go to Ruby's threads); 0 or an errno */
int rperf_rb_quiet_thread(pthread_t *t, void *(*fn)(void *), void *arg, bool detached);
/* any thread but Ruby's: rb_postponed_job_trigger, until the VM is torn
 * down (then nothing) */
void rperf_rb_trigger_from_thread(rb_postponed_job_handle_t h);

/* api.c */
/* inside GC: the GC running now is a major one */
bool rperf_rb_major_gc_now(void);
void rperf_rb_api_init(VALUE mRperf);
/* Before exec, GVL held, any Ractor: stop the run (exec.c) */
bool rperf_rb_stop_for_exec(void);
/* the current (or last) run asked for messages on stderr */
bool rperf_rb_run_messages(void);

/* window_delta.c's pause: the run paused as a snapshot pauses it (the
 * lifecycle lock held until rperf_rb_window_resume), or why not (nothing
 * held then) */
enum { RPERF_RB_PAUSE_OK, RPERF_RB_PAUSE_NOT_RUNNING, RPERF_RB_PAUSE_RAW, RPERF_RB_PAUSE_BUSY };
/* heap: the live heap settled too, and allocation sampling paused until
 * the resume (as at a snapshot) */
int rperf_rb_window_pause(bool heap);
void rperf_rb_window_resume(bool heap);
/* the same from a postponed job: RPERF_RB_PAUSE_BUSY rather than a wait */
int rperf_rb_window_try_pause(bool heap);
/* GVL held: the run going made a directory for its forked children's
 * profiles (a window then holds their parts too) */
bool rperf_rb_run_has_children(void);

/* GVL held, main Ractor, postponed job: the window so far, cleared (nil:
 * nothing; Qundef: a lifecycle call is in progress). Never raises. */
VALUE rperf_rb_window_take(void);

/* child_windows.c: an inherited child's windows, written periodically */
void rperf_rb_child_windows_init(VALUE mRperf);
void rperf_rb_child_windows_poll(void);   /* worker context */
void rperf_rb_child_windows_off(void);    /* GVL held: the run ends, or fork */
/* GVL held: when `counters_path` (a String) is the counters file of this
 * process's part that wrote windows, its counters grow from *base (set to
 * the reading of its last window written) and carry[] holds the counts
 * of the windows taken since that wrote nothing (stat.c); false
 * otherwise (base and carry left as they are) */
bool rperf_rb_child_windows_since(VALUE counters_path, VALUE *base, long long *carry);

/* exec.c */
void rperf_rb_exec_init(void);

/* signals.c */
void rperf_rb_signals_init(VALUE mRperf);
/* GVL held: ArgumentError when signo (0 = the default tick signal) has an
 * action that is not the default one (someone else uses it). */
void rperf_rb_signal_check_free(int signo);

/* export.c (exporters) */
void rperf_rb_exporters_init(VALUE mRperf);
/* GVL held, engine stopped, results held: write `data`'s profile to path
 * with the C exporter `name`, calling no Ruby method (raises on failure) */
VALUE rperf_rb_export_engine_file(VALUE name, VALUE path, VALUE data, VALUE opts);
/* A file export in two steps (export.c): GVL held, no GVL release: the
 * conversion of `data` for exporter `name` with `opts` (nil, or a Hash as
 * Rperf._encode_file takes; raises on bad data); then on
 * any thread, no GVL: the encoding and the atomic write to path, which
 * frees the handle; 0 or -errno with a message in err. */
void *rperf_rb_export_detached_prepare(VALUE name, VALUE data, VALUE path, VALUE opts);
int rperf_rb_export_detached_finish(void *handle, char *err, size_t errlen);
void *rperf_rb_export_detached_prepare_memory(VALUE name, VALUE data, VALUE opts);
int rperf_rb_export_detached_finish_memory(void *handle, unsigned char **out, size_t *len, char *err,
                                           size_t errlen);

/* decode.c (the pprof reader: Rperf._decode_pprof) */
void rperf_rb_decode_init(VALUE mRperf);

/* stat.c (this process's counters, a part's counters file) */
void rperf_rb_stat_init(VALUE mRperf);
/* the result counts a counters file holds (carry[] of the functions below) */
#define RPERF_RB_STAT_NCOUNTS 10
/* GVL held, no Ruby method called: `data`'s counts that add up over a
 * part's spans, added to carry */
void rperf_rb_stat_carry_add(long long carry[RPERF_RB_STAT_NCOUNTS], VALUE data);
/* GVL held, no Ruby method called: a part's counters file (malloc'd,
 * *len bytes; NULL when out of memory): the process counters less `base`
 * (nil or a Hash), `data`'s counts plus carry; *reading: the base of the
 * next part */
char *rperf_rb_stat_part_json(VALUE data, VALUE base, const long long carry[RPERF_RB_STAT_NCOUNTS], VALUE *reading,
                              size_t *len);
/* any thread, no Ruby API: `len` bytes to path through a temporary file
 * and a rename; 0 or an errno */
int rperf_rb_stat_write_file(const char *path, const void *bytes, size_t len);
/* merge.c (a run's end that merges processes: the run directory, its
 * parts merged, raw samples aggregated) */
void rperf_rb_merge_init(VALUE mRperf);

/* normalize.c (Rperf._c_normalize_path, for Rperf::Middleware) */
void rperf_rb_normalize_init(VALUE mRperf);
/* GVL held: src[0, n] with its ids folded into out (cap bytes); the
 * length, or -1 when it does not fit */
long rperf_rb_normalize_bytes(const char *src, long n, char *out, long cap);

/* request_label.c (Rperf._c_label_request, Rperf::Middleware's fast path) */
void rperf_rb_request_label_init(VALUE mRperf);

#endif
