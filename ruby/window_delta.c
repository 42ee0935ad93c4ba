/*
 * window_delta.c — the C side of Rperf::Window (ruby/lib/rperf/window.rb):
 * a window's baseline, taken when it opens, and its result, built when it
 * closes from only what changed since.
 *
 * A baseline is the weight of every aggregated entry (an index names the
 * same entry until the table's generation changes: core/aggregate.c) and
 * the run's counters, taken with the run paused as a snapshot pauses it
 * (rings drained, blocked threads settled); a heap window's also holds the
 * four values of every allocation entry (core/heap.c), the live heap
 * settled first. The window's result holds the entries that gained weight
 * since, with the gain as weight (and the allocation entries that moved,
 * the objects in use as a change, which may be negative), so a scrape
 * costs a copy of the weights at its start and a result of what it saw,
 * however many stacks the run holds. When the table is about to lose its
 * entries (a clearing snapshot, a child's window, the release of a stopped
 * run) every open baseline's result so far is built and kept with it
 * (fold), and the baseline starts again from nothing.
 *
 * Contexts: the module functions run with the GVL held in the main
 * Ractor; rperf_rb_windows_fold runs there too, with the worker parked (a
 * clearing resume) or joined (release), from a snapshot, a postponed job
 * (child_windows.c) or a stop: it calls no Ruby method and raises nothing.
 */
#include "rperf_ruby.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct window_mark {
    struct window_mark *next;    /* the open marks (GVL) */
    bool open;
    pid_t pid;
    uint64_t generation;
    int64_t opened_mono;         /* CLOCK_MONOTONIC of the window's start */
    rperf_rb_since_t since;      /* weights owned (malloc) */
    VALUE parts;                 /* Array of results folded so far */
} window_mark_t;

static window_mark_t *open_marks;
static pid_t marks_pid;          /* the process open_marks belong to */
/* the Ruby objects of the open marks: an open mark is never freed (a
 * fold walks the list while it allocates) */
static VALUE registry = Qnil;

/* In a fork child the parent's windows are not this process's: their
 * marks stay with their Ruby objects (closing one gives []), off the list. */
static void forget_if_forked(void)
{
    pid_t pid = getpid();
    if (marks_pid != pid) {
        open_marks = NULL;
        marks_pid = pid;
        rb_ary_clear(registry);
    }
}

static void drop_baseline(window_mark_t *m)
{
    free((void *)m->since.weights);
    free((void *)m->since.alloc);
    m->since.weights = m->since.alloc = NULL;
    m->since.n = m->since.nalloc = 0;
}

static void unlink_mark(window_mark_t *m)
{
    for (window_mark_t **p = &open_marks; *p; p = &(*p)->next)
        if (*p == m) {
            *p = m->next;
            break;
        }
    m->next = NULL;
    m->open = false;
    drop_baseline(m);
}

static void mark_mark(void *p)
{
    rb_gc_mark_movable(((window_mark_t *)p)->parts);
}

static void mark_compact(void *p)
{
    window_mark_t *m = p;
    m->parts = rb_gc_location(m->parts);
}

/* An open mark is in the registry until it closes, or belongs to the
 * parent of this fork child (off the list). */
static void mark_free(void *p)
{
    window_mark_t *m = p;
    drop_baseline(m);
    xfree(m);
}

static const rb_data_type_t mark_type = {
    .wrap_struct_name = "rperf_window_mark",
    .function = { .dmark = mark_mark, .dfree = mark_free, .dsize = NULL, .dcompact = mark_compact },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

/* The baseline of `m` now (run paused, or stopped with its results): the
 * weights of every entry and the counters; the window's time starts at
 * the pause. false: out of memory. */
static bool take_baseline(window_mark_t *m)
{
    size_t n = rperf_result_weights(NULL, 0);
    size_t na = m->since.heap ? rperf_result_alloc_values(NULL, 0) : 0;
    int64_t *w = n ? malloc(n * sizeof(int64_t)) : NULL;
    int64_t *a = na ? malloc(na * 4 * sizeof(int64_t)) : NULL;
    if ((n && !w) || (na && !a)) {
        free(w);
        free(a);
        return false;
    }
    rperf_result_weights(w, n);
    rperf_result_alloc_values(a, na);
    drop_baseline(m);
    m->since.weights = w;
    m->since.n = n;
    m->since.alloc = a;
    m->since.nalloc = na;
    if (m->since.heap) rperf_heap_stats(&m->since.heap_stats);
    rperf_engine_stats(&m->since.stats);
    int64_t at = m->since.stats.end_mono_ns;
    if (at > 0) {
        m->since.stats.start_time_ns += at - m->since.stats.start_mono_ns;
        m->since.stats.start_mono_ns = at;
    }
    m->generation = rperf_result_generation();
    return true;
}

/* A baseline of nothing, starting where the table's current window ended
 * (after a fold): counters zero, time from that close. */
static void restart_baseline(window_mark_t *m)
{
    rperf_stats_t st;
    rperf_engine_stats(&st);
    drop_baseline(m);
    memset(&m->since.heap_stats, 0, sizeof m->since.heap_stats);
    int64_t at = st.end_mono_ns > 0 ? st.end_mono_ns : st.start_mono_ns;
    memset(&m->since.stats, 0, sizeof m->since.stats);
    m->since.stats.start_time_ns = st.start_time_ns + (at - st.start_mono_ns);
    m->since.stats.start_mono_ns = at;
}

static VALUE build_since(VALUE arg)
{
    return rperf_rb_build_result_since(&((window_mark_t *)arg)->since);
}

void rperf_rb_windows_fold(bool ended)
{
    forget_if_forked();
    uint64_t gen = rperf_result_generation();
    for (window_mark_t *m = open_marks; m; m = m->next) {
        if (m->generation == gen) {
            int state = 0;
            VALUE part = rb_protect(build_since, (VALUE)m, &state);
            if (state) rb_set_errinfo(Qnil);   /* out of memory: this part is lost */
            else rb_ary_push(m->parts, part);
        }
        restart_baseline(m);
        /* the new generation's entries start from nothing; a released run
         * has no next generation this baseline belongs to */
        m->generation = ended ? 0 : gen + 1;
    }
}

void rperf_rb_windows_rebase(void)
{
    forget_if_forked();
    uint64_t gen = rperf_result_generation();
    for (window_mark_t *m = open_marks; m; m = m->next) {
        if (!m->since.heap || m->generation != gen) continue;
        size_t na = rperf_result_alloc_values(NULL, 0);
        int64_t *a = na ? malloc(na * 4 * sizeof(int64_t)) : NULL;
        if (na && !a) continue;   /* out of memory: the kept objects count as new */
        rperf_result_alloc_values(a, na);
        free((void *)m->since.alloc);
        m->since.alloc = a;
        m->since.nalloc = na;
    }
}

/* Rperf._c_window_mark(heap) -> a baseline (opaque), nil when no run
 * goes, false when heap is asked of a run that samples no allocations.
 * heap: the window's result has the allocations made and the change of
 * the objects in use (:allocations). RuntimeError when the run keeps raw
 * samples. */
/* A new mark object (not open yet). */
static VALUE new_mark(bool heap, window_mark_t **out)
{
    window_mark_t *m;
    VALUE obj = TypedData_Make_Struct(rb_cObject, window_mark_t, &mark_type, m);
    m->parts = rb_ary_new();
    m->pid = getpid();
    m->since.heap = heap;
    *out = m;
    return obj;
}

/* With the run paused: the baseline taken and the mark opened, the run
 * resumed. false: out of memory (nothing opened). */
static bool open_paused(VALUE obj, window_mark_t *m)
{
    bool ok = take_baseline(m);
    rperf_rb_window_resume(m->since.heap);
    if (!ok) return false;
    forget_if_forked();
    m->opened_mono = m->since.stats.start_mono_ns;
    m->open = true;
    m->next = open_marks;
    open_marks = m;
    rb_ary_push(registry, obj);
    return true;
}

static VALUE c_window_mark(VALUE self, VALUE heap)
{
    (void)self;
    window_mark_t *m;
    VALUE obj = new_mark(RTEST(heap), &m);
    switch (rperf_rb_window_pause(m->since.heap)) {
    case RPERF_RB_PAUSE_NOT_RUNNING: return Qnil;
    case RPERF_RB_PAUSE_RAW:
        rb_raise(rb_eRuntimeError, "a window requires aggregate mode (aggregate: true)");
    default: break;
    }
    if (m->since.heap && !rperf_heap_enabled()) {
        rperf_rb_window_resume(true);
        return Qfalse;
    }
    if (!open_paused(obj, m)) rb_memerror();
    return obj;
}

/* GVL held, main Ractor, from a postponed job (serve_accept.c): a time
 * window's mark opened now, or nil (no run, raw samples, a lifecycle call
 * in progress, out of memory). Raises nothing. */
VALUE rperf_rb_window_mark_try(void)
{
    window_mark_t *m;
    VALUE obj = new_mark(false, &m);
    if (rperf_rb_window_try_pause(false) != RPERF_RB_PAUSE_OK) return Qnil;
    return open_paused(obj, m) ? obj : Qnil;
}

/* A mark nobody will read: closed without a result (nothing paused). */
void rperf_rb_window_discard(VALUE obj)
{
    window_mark_t *m = rb_check_typeddata(obj, &mark_type);
    if (!m->open || m->pid != getpid()) return;
    unlink_mark(m);
    rb_ary_delete(registry, obj);
    m->parts = rb_ary_new();
}

static VALUE c_window_discard(VALUE self, VALUE obj)
{
    (void)self;
    rperf_rb_window_discard(obj);
    return Qnil;
}

/* Rperf._c_window_marks_open -> how many marks are open in this process
 * (windows being read, and those the listener opened for requests it has
 * not handed to Ruby yet). */
static VALUE c_window_marks_open(VALUE self)
{
    (void)self;
    forget_if_forked();
    long n = 0;
    for (window_mark_t *m = open_marks; m; m = m->next) n++;
    return LONG2NUM(n);
}

/* Rperf._c_window_age(mark) -> seconds since the window's start. */
static VALUE c_window_age(VALUE self, VALUE obj)
{
    (void)self;
    window_mark_t *m = rb_check_typeddata(obj, &mark_type);
    return DBL2NUM((double)(rperf_mono_ns() - m->opened_mono) / 1e9);
}

static VALUE build_paused(VALUE arg)
{
    return build_since((VALUE)arg);
}

static VALUE resume_paused(VALUE arg)
{
    rperf_rb_window_resume(((window_mark_t *)arg)->since.heap);
    return Qnil;
}

/* The mark's parts once it is closed (its last part built with the run
 * paused), unlinked from the open ones. try: from a postponed job, where
 * nothing may wait or raise: Qundef (left open) while a start, stop or
 * snapshot is in progress, and a part that cannot be built (out of
 * memory) is left out. */
static VALUE close_mark(VALUE obj, window_mark_t *m, bool try)
{
    if (!m->open || m->pid != getpid()) return rb_ary_new();
    VALUE parts = m->parts;
    if (m->generation == rperf_result_generation()) {
        int how = try ? rperf_rb_window_try_pause(m->since.heap) : rperf_rb_window_pause(m->since.heap);
        if (how == RPERF_RB_PAUSE_BUSY) return Qundef;
        if (how == RPERF_RB_PAUSE_OK && try) {
            int state = 0;
            VALUE part = rb_protect(build_since, (VALUE)m, &state);
            rperf_rb_window_resume(m->since.heap);
            if (state) rb_set_errinfo(Qnil);
            else rb_ary_push(parts, part);
        } else if (how == RPERF_RB_PAUSE_OK) {
            rb_ary_push(parts, rb_ensure(build_paused, (VALUE)m, resume_paused, (VALUE)m));
        } else if (how == RPERF_RB_PAUSE_NOT_RUNNING && rperf_engine_has_results() &&
                   rperf_engine_config()->aggregate) {
            /* stopped, not released yet: its results are still there */
            int state = 0;
            VALUE part = try ? rb_protect(build_since, (VALUE)m, &state) : build_since((VALUE)m);
            if (state) rb_set_errinfo(Qnil);
            else rb_ary_push(parts, part);
        }
    }
    unlink_mark(m);
    rb_ary_delete(registry, obj);
    m->parts = rb_ary_new();
    return parts;
}

/* Rperf._c_window_close(mark) -> [result, ...]: what the window saw, in
 * parts (one per table generation it spanned: a clear or a stop ends a
 * part). A mark closes once; a closed one, or one made in the parent of
 * this fork child, gives []. */
static VALUE c_window_close(VALUE self, VALUE obj)
{
    (void)self;
    return close_mark(obj, rb_check_typeddata(obj, &mark_type), false);
}

bool rperf_rb_window_mark_p(VALUE obj)
{
    return rb_typeddata_is_kind_of(obj, &mark_type);
}

VALUE rperf_rb_window_close_try(VALUE obj)
{
    return close_mark(obj, rb_check_typeddata(obj, &mark_type), true);
}

void rperf_rb_window_delta_init(VALUE mRperf)
{
    registry = rb_ary_new();
    rb_gc_register_mark_object(registry);
    marks_pid = getpid();
    rb_define_module_function(mRperf, "_c_window_mark", c_window_mark, 1);
    rb_define_module_function(mRperf, "_c_window_close", c_window_close, 1);
    rb_define_module_function(mRperf, "_c_window_age", c_window_age, 1);
    rb_define_module_function(mRperf, "_c_window_discard", c_window_discard, 1);
    rb_define_module_function(mRperf, "_c_window_marks_open", c_window_marks_open, 0);
}
