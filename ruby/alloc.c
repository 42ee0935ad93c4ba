/*
 * alloc.c — the allocation and free hook of runs that sample allocations,
 * and what the live heap (core/heap.c) asks of Ruby: is a tracked object
 * still the one sampled, its size now, where compaction moved it, and the
 * names of the sampled classes in a result.
 *
 * The hook (RUBY_INTERNAL_EVENT_NEWOBJ and RUBY_INTERNAL_EVENT_FREEOBJ,
 * raw argument) sits in the main Ractor's hook list while such a run
 * goes: added at start, removed at stop (GVL held, main Ractor, never
 * from a hook or a job), so a run without allocation sampling costs
 * allocations and sweeps nothing: with a NEWOBJ hook every allocation
 * takes Ruby's slow path, with a FREEOBJ hook every freed object calls
 * the hook. Ruby runs NEWOBJ inside the allocation, after the object's
 * header is set, and FREEOBJ as the sweep frees an object, before its
 * memory is released, on the thread holding the main Ractor's GVL: so its
 * calls are serialized, as core/heap.c needs. It allocates no Ruby object
 * and calls no method (the stack is read by rb_profile_frames through the
 * engine's host capture). Other Ractors get a hook of their own
 * (ractor_hook below).
 *
 * Contexts: the hooks — allocation hook and free hook, inside GC (see
 * above); alive/memsize — GVL held at a window's close; relocate and
 * gc_end_mark — inside GC (the main Ractor's GC hook at the end of
 * marking); the rest GVL held, main Ractor.
 *
 * Besides the public API, three functions that libruby exports and Ruby's
 * own ext/objspace calls in every version from 3.3 on, but that no
 * installed header declares, are declared here (the public-symbol test,
 * tests/ruby/test_public_symbols.rb, allows exactly these, with these
 * reasons; docs/architecture.md, "Ruby's API"):
 * rb_gc_obj_slot_size (a new object's slot size: its body is not set up
 * yet when NEWOBJ runs, so its memsize cannot be read then; no public
 * function gives it), rb_obj_memsize_of (the C side of
 * ObjectSpace.memsize_of, which needs `require "objspace"` and a method
 * call, neither allowed at a window's close) and rb_objspace_each_objects
 * (the heap's pages: a tracked object's address is checked against them
 * before its slot is read at a close, since the page of an object whose
 * free went unreported may have been given back).
 */
#include "rperf_ruby.h"
#include "tick_signal.h"

#include <stdatomic.h>

size_t rb_gc_obj_slot_size(VALUE obj);
size_t rb_obj_memsize_of(VALUE obj);
void rb_objspace_each_objects(int (*callback)(void *start, void *end, size_t stride, void *data),
                              void *data);

#include <stdlib.h>

static _Atomic bool installed;
/* a window's close is being turned into a result in the main Ractor: no
 * new samples there (the result's own allocations) */
static bool paused;
/* at start: the main Ractor's hook list holds rperf's hooks only, so
 * adding a hook to another Ractor's list (which sets the VM-wide event
 * flags to that list's events) leaves every hook of the main Ractor on */
static _Atomic bool ractors_ok;
/* the installed hook is locked_hook (an unverified Ruby) */
static bool locked;

/* Types whose objects have a class at allocation (other types: internal
 * objects, named by type). */
static bool classed_type(int t)
{
    switch (t) {
    case T_OBJECT: case T_CLASS: case T_MODULE: case T_FLOAT: case T_STRING:
    case T_REGEXP: case T_ARRAY: case T_HASH: case T_STRUCT: case T_BIGNUM:
    case T_FILE: case T_DATA: case T_MATCH: case T_COMPLEX: case T_RATIONAL:
    case T_SYMBOL:
        return true;
    default:
        return false;
    }
}

static void record(VALUE obj)
{
    int t = RB_BUILTIN_TYPE(obj);
    VALUE klass = classed_type(t) ? RBASIC_CLASS(obj) : 0;
    rperf_alloc_record((uintptr_t)obj, (uintptr_t)klass, (uint32_t)t,
                       (uint32_t)rb_gc_obj_slot_size(obj));
}

/* FREEOBJ. A Ractor's object is freed with its hook list (immediately:
 * ractor.c's data type), and in Ruby 3.3 and 3.4 freeing a hook list sets
 * the VM-wide event flags to that list's (empty) events: this very sweep's
 * later frees, and every hook of rperf's, may stop firing (until
 * rperf_rb_hooks_heal), so the tracked objects become unverified before
 * that can happen. */
static void freed(VALUE obj)
{
    if (RB_BUILTIN_TYPE(obj) == T_DATA && RBASIC_CLASS(obj) == rb_cRactor)
        rperf_heap_frees_unreported();
    rperf_alloc_freed((uintptr_t)obj);
}

static void newobj_hook(VALUE data, const rb_trace_arg_t *arg)
{
    (void)data;
    VALUE obj = rb_tracearg_object((rb_trace_arg_t *)arg);
    if (rb_tracearg_event_flag((rb_trace_arg_t *)arg) & RUBY_INTERNAL_EVENT_FREEOBJ) {
        freed(obj);
        return;
    }
    if (rperf_alloc_seen((uintptr_t)obj) && !paused) record(obj);
}

/* The main Ractor's hook on a Ruby whose hooks were not verified to fire
 * only for the Ractor whose list holds them (rperf_rb_verified_ruby): any
 * Ractor's thread may call it, so every call takes the tracker's lock and
 * the engine's enter/leave, as other Ractors' hooks do. */
static void locked_hook(VALUE data, const rb_trace_arg_t *arg)
{
    (void)data;
    VALUE obj = rb_tracearg_object((rb_trace_arg_t *)arg);
    rperf_alloc_lock();
    if (rb_tracearg_event_flag((rb_trace_arg_t *)arg) & RUBY_INTERNAL_EVENT_FREEOBJ) {
        freed(obj);
    } else if (rperf_alloc_seen((uintptr_t)obj) && !paused && rperf_engine_enter()) {
        record(obj);
        rperf_engine_leave();
    }
    rperf_alloc_unlock();
}

/* A raw-argument hook has its own signature; Ruby's API takes it as an
 * rb_event_hook_func_t (the cast goes through void (*)(void), the generic
 * function pointer type, as C11 allows). */
#define HOOK_FUNC ((rb_event_hook_func_t)(void (*)(void))newobj_hook)
#define LOCKED_HOOK_FUNC ((rb_event_hook_func_t)(void (*)(void))locked_hook)
#define ALLOC_EVENTS (RUBY_INTERNAL_EVENT_NEWOBJ | RUBY_INTERNAL_EVENT_FREEOBJ)

/* ---- other Ractors ---------------------------------------------------------
 * A Ractor's allocations run its own hook list, so each other Ractor gets a
 * hook of its own, added by a job running in it (its first RESUMED in an
 * allocation run asks for one: rperf_rb_alloc_wants_ractor_job). In Ruby
 * 3.3 a change to a Ractor's list sets the VM-wide event flags to that
 * list's events (vm_trace.c update_global_event_hook): the hook there
 * carries the events of the main Ractor's list — rperf's GC hook's,
 * NEWOBJ and FREEOBJ — so the flags stay what they were, and it is added only when
 * the main Ractor's list held nothing else at start (a TracePoint or
 * another tool's hook there would be turned off). It is never removed
 * (removing is a change too, and the Ractor may never run again): after
 * the run it is dormant, since the main Ractor's removal of its NEWOBJ
 * hook takes NEWOBJ off the flags, and the next allocation run's start
 * puts it back. Its calls take the tracker's lock (rperf_alloc_lock) and
 * the engine's enter/leave, as a stop or release in the main Ractor does
 * not wait for them otherwise (its FREEOBJ, the lock only: it touches the
 * tracker alone). Ruby sweeps lazily in whichever Ractor allocates next,
 * so the objects of every Ractor are freed here too. Its END_MARK reports
 * the markings of the GCs that Ractor starts; other GC events do
 * nothing. */
static void ractor_hook(VALUE data, const rb_trace_arg_t *arg)
{
    (void)data;
    rb_event_flag_t ev = rb_tracearg_event_flag((rb_trace_arg_t *)arg);
    if (ev & RUBY_INTERNAL_EVENT_FREEOBJ) {
        VALUE obj = rb_tracearg_object((rb_trace_arg_t *)arg);
        rperf_alloc_lock();
        freed(obj);
        rperf_alloc_unlock();
    } else if (ev & RUBY_INTERNAL_EVENT_NEWOBJ) {
        VALUE obj = rb_tracearg_object((rb_trace_arg_t *)arg);
        rperf_alloc_lock();
        /* not paused by a close: the close's own allocations are the
         * main Ractor's, and this Ractor's go on meanwhile */
        if (rperf_alloc_seen((uintptr_t)obj) && rperf_engine_enter()) {
            record(obj);
            rperf_engine_leave();
        }
        rperf_alloc_unlock();
    } else if (ev & RUBY_INTERNAL_EVENT_GC_END_MARK) {
        rperf_rb_hooks_gc_seen();
        if (!rperf_engine_enter()) return;
        rperf_rb_alloc_gc_end_mark();
        rperf_engine_leave();
    }
}

#define RACTOR_HOOK_FUNC ((rb_event_hook_func_t)(void (*)(void))ractor_hook)

bool rperf_rb_alloc_ractors_active(void)
{
    return atomic_load_explicit(&installed, memory_order_relaxed) &&
           atomic_load_explicit(&ractors_ok, memory_order_relaxed);
}

bool rperf_rb_alloc_wants_ractor_job(void)
{
    return rperf_rb_alloc_ractors_active() && rperf_rb_ractor_alloc_hook_missing();
}

void rperf_rb_alloc_ractor_job(void)
{
    if (rperf_engine_running() && rperf_rb_alloc_wants_ractor_job()) {
        rb_add_event_hook2(RACTOR_HOOK_FUNC, ALLOC_EVENTS | RPERF_RB_GC_EVENTS, Qnil,
                           RUBY_EVENT_HOOK_FLAG_SAFE | RUBY_EVENT_HOOK_FLAG_RAW_ARG);
        rperf_rb_ractor_alloc_hook_added();
    }
    /* this native thread's request is answered (its Ruby thread, if of
     * another Ractor that still lacks the hook, asks at its next turn) */
    rperf_engine_job_ran_here();
}

static int send_tick(int32_t tid) { return rperf_tick_signal_send((pid_t)tid); }

/* any job: native threads whose job another thread's flush took get the
 * tick signal, whose handler triggers it there again */
void rperf_rb_alloc_job_any(void) { rperf_engine_resignal_wanted(send_tick); }

static VALUE tracepoint_stat(VALUE unused)
{
    (void)unused;
    return rb_funcall(rb_const_get(rb_cObject, rb_intern("TracePoint")), rb_intern("stat"), 0);
}

static int count_active(VALUE key, VALUE val, VALUE sum)
{
    (void)key;
    if (RB_TYPE_P(val, T_ARRAY) && RARRAY_LEN(val) > 0 && FIXNUM_P(RARRAY_AREF(val, 0)))
        *(long *)sum += FIX2LONG(RARRAY_AREF(val, 0));
    else
        *(long *)sum += 1000;   /* unknown shape: not ours only */
    return ST_CONTINUE;
}

/* The main Ractor's hook list holds just rperf's GC hook (TracePoint.stat
 * counts the active hooks of the calling Ractor's list). */
static bool main_list_ours_only(void)
{
    int state = 0;
    VALUE stat = rb_protect(tracepoint_stat, Qnil, &state);
    if (state) {
        rb_set_errinfo(Qnil);
        return false;
    }
    if (!RB_TYPE_P(stat, T_HASH)) return false;
    long active = 0;
    rb_hash_foreach(stat, count_active, (VALUE)&active);
    return active == 1;
}

/* GVL held, main Ractor, at start (after the engine started) */
void rperf_rb_alloc_install(void)
{
    if (installed || !rperf_heap_enabled()) return;
    paused = false;
    /* before the hook: the check's own allocations are not sampled */
    locked = !rperf_rb_verified_ruby();
    atomic_store(&ractors_ok, !locked && main_list_ours_only());
    rperf_heap_gc_seen((uint64_t)rb_gc_count());
    rb_add_event_hook2(locked ? LOCKED_HOOK_FUNC : HOOK_FUNC, ALLOC_EVENTS, Qnil,
                       RUBY_EVENT_HOOK_FLAG_SAFE | RUBY_EVENT_HOOK_FLAG_RAW_ARG);
    installed = true;
}

/* GVL held, main Ractor: at stop, and in a fork child's reset */
void rperf_rb_alloc_remove(void)
{
    if (!installed) return;
    rb_remove_event_hook(locked ? LOCKED_HOOK_FUNC : HOOK_FUNC);
    installed = false;
}

void rperf_rb_alloc_pause(bool on) { paused = on; }

bool rperf_rb_alloc_ractors(void) { return atomic_load(&ractors_ok); }

/* The heap's pages at a window's close, sorted by start. */
typedef struct page_range {
    uintptr_t start, end;
} page_range_t;
static struct {
    page_range_t *r;
    size_t n, cap;
    bool failed;
} pages;

static int add_page(void *start, void *end, size_t stride, void *data)
{
    (void)stride;
    (void)data;
    if (pages.n == pages.cap) {
        size_t cap = pages.cap ? pages.cap * 2 : 1024;
        page_range_t *r = realloc(pages.r, cap * sizeof(*r));
        if (!r) {
            pages.failed = true;
            return 1;
        }
        pages.r = r;
        pages.cap = cap;
    }
    pages.r[pages.n++] = (page_range_t){ (uintptr_t)start, (uintptr_t)end };
    return 0;
}

static int cmp_page(const void *a, const void *b)
{
    uintptr_t x = ((const page_range_t *)a)->start, y = ((const page_range_t *)b)->start;
    return x < y ? -1 : x > y;
}

static bool in_heap(uintptr_t a)
{
    size_t lo = 0, hi = pages.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pages.r[mid].end <= a) lo = mid + 1;
        else if (pages.r[mid].start > a) hi = mid;
        else return true;
    }
    return false;
}

/* Dead slots hold these types until reused (a freed one: T_NONE). */
static bool dead_type(int t) { return t == T_NONE || t == T_ZOMBIE || t == T_MOVED; }

/* The object at obj is still the one sampled: on a page of the heap, a
 * live object of the same type, and of the same class (singleton classes
 * made since aside). Every address is checked against the pages, verified
 * or not: a free that went unreported before rperf could know (a sweep
 * after a hook list was freed elsewhere, say) must not make a settle read
 * a page given back. If the page list could not be made, the object is
 * kept unread (its size then counts as 0). */
static bool alive(uintptr_t obj, uintptr_t klass, uint32_t rtype, bool verified)
{
    (void)verified;
    VALUE v = (VALUE)obj;
    if (pages.failed) return true;
    if (!in_heap(obj)) return false;
    int t = RB_BUILTIN_TYPE(v);
    if (dead_type(t) || (uint32_t)t != rtype) return false;
    if (!klass) return true;
    VALUE now = RBASIC_CLASS(v);
    return now == (VALUE)klass || (now && rb_class_real(now) == rb_class_real((VALUE)klass));
}

static size_t memsize(uintptr_t obj) { return pages.failed ? 0 : rb_obj_memsize_of((VALUE)obj); }

/* GVL held, no hook running (the caller's thread holds the GVL), worker
 * parked or joined */
void rperf_rb_alloc_settle(void)
{
    if (!rperf_heap_enabled()) return;
    pages.n = 0;
    pages.failed = false;
    /* may run a GC (it finishes one in progress): before the settle, which
     * allocates nothing, so no compaction moves objects under it */
    rb_objspace_each_objects(add_page, NULL);
    qsort(pages.r, pages.n, sizeof(*pages.r), cmp_page);
    rperf_heap_settle(alive, memsize);
    free(pages.r);
    pages.r = NULL;
    pages.n = pages.cap = 0;
    pages.failed = false;
}

static uintptr_t location(uintptr_t v) { return (uintptr_t)rb_gc_location((VALUE)v); }

/* inside GC compaction */
void rperf_rb_alloc_relocate(void) { rperf_heap_relocate((uint64_t)rb_gc_count(), location); }

/* A thread of another Ractor without rperf's allocation hook (or of one
 * not numbered yet) had a turn since the last end of marking: it may have
 * swept, its frees unreported (set at RESUMED, hooks.c). */
static _Atomic bool unhooked_ran;

void rperf_rb_alloc_unhooked_ran(void) { atomic_store_explicit(&unhooked_ran, true, memory_order_relaxed); }

/* Inside GC, a GC hook of rperf's at the end of marking (world stopped).
 * The frees of this GC's sweeps, and of the sweeps since the previous
 * marking, were all reported unless a Ractor without rperf's hook may
 * sweep: one of its threads had a turn since then, or a Ractor alive now
 * lacks the hook (its hook is added by a job that runs after its first
 * turn), or other Ractors get no hook at all in this run. Then the tracked
 * objects become unverified. */
void rperf_rb_alloc_gc_end_mark(void)
{
    if (!rperf_heap_enabled()) return;
    bool ran = atomic_exchange_explicit(&unhooked_ran, false, memory_order_relaxed);
    bool unseen = ran || (rperf_engine_other_ractor_threads() > 0 &&
                          (!rperf_rb_alloc_ractors_active() || rperf_rb_ractors_unhooked() > 0 ||
                           rperf_engine_unnumbered_threads() > 0));
    rperf_heap_gc_marked((uint64_t)rb_gc_count(), unseen);
}

/* GVL held: the name of a sampled class (frame id) or type */
VALUE rperf_rb_alloc_class_name(uint32_t class_id, uint32_t rtype)
{
    if (class_id != RPERF_ALLOC_NO_CLASS) {
        VALUE k = (VALUE)rperf_result_frame(class_id);
        if (k && (RB_TYPE_P(k, T_CLASS) || RB_TYPE_P(k, T_MODULE)))
            return rb_class_path(rb_class_real(k) ? rb_class_real(k) : k);
    }
    static const char *const names[] = {
        [T_NONE] = "NONE", [T_OBJECT] = "OBJECT", [T_CLASS] = "CLASS", [T_MODULE] = "MODULE",
        [T_FLOAT] = "FLOAT", [T_STRING] = "STRING", [T_REGEXP] = "REGEXP", [T_ARRAY] = "ARRAY",
        [T_HASH] = "HASH", [T_STRUCT] = "STRUCT", [T_BIGNUM] = "BIGNUM", [T_FILE] = "FILE",
        [T_DATA] = "DATA", [T_MATCH] = "MATCH", [T_COMPLEX] = "COMPLEX",
        [T_RATIONAL] = "RATIONAL", [T_NIL] = "NIL", [T_TRUE] = "TRUE", [T_FALSE] = "FALSE",
        [T_SYMBOL] = "SYMBOL", [T_FIXNUM] = "FIXNUM", [T_UNDEF] = "UNDEF",
        [T_IMEMO] = "IMEMO", [T_NODE] = "NODE", [T_ICLASS] = "ICLASS", [T_ZOMBIE] = "ZOMBIE",
        [T_MOVED] = "MOVED",
    };
    const char *n = rtype < sizeof(names) / sizeof(names[0]) && names[rtype] ? names[rtype] : "?";
    return rb_sprintf("<T_%s>", n);
}
