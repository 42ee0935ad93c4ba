/*
 * ractor.c — what the profiler keeps per Ractor: an id for the Ractor (so
 * samples, thread tables and pprof labels name it; main = 1, others
 * numbered at their first sampling job, not Ruby's ids), and the Ractor's
 * GC event hook. GC hooks are per Ractor in Ruby 3.3 (a GC step fires only
 * the hooks of the Ractor running it), so the hook is registered lazily in
 * every Ractor from a sampling job running inside it, and remembered in
 * Ractor-local storage. The main Ractor's hook is managed by hooks.c at
 * start/stop instead.
 *
 * Defence against a TracePoint in some Ractor overwriting the VM-global GC
 * event flags (last writer wins in 3.3): every job compares rb_gc_count()
 * with the GC starts our hooks saw; a GC we did not see makes the Ractor
 * running the job register its hook again, which re-publishes the flags.
 *
 * Context: rperf_rb_ractor_prepare runs in the sampling job, GVL held, in
 * any Ractor, OUTSIDE rperf_engine_enter/leave (it may allocate, hence
 * trigger GC); it calls no Ruby method (issue 14, see may_call_ruby).
 * The storage's free function runs when the Ractor is freed.
 */
#include "rperf_ruby.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct ractor_rec {
    uint32_t id;
    int gc_hooked;             /* non-main Ractors: hook registered here */
} ractor_rec_t;

static void rec_free(void *p) { free(p); }
static const struct rb_ractor_local_storage_type rec_type = { NULL, rec_free };
static rb_ractor_local_key_t rec_key;
static ID id_name, id_count;
static VALUE cRactor;

static _Atomic uint64_t gc_base;   /* rb_gc_count() - GC starts seen, at sync */

/* Ids: the main Ractor is 1 (its record is made at start); every other
 * Ractor takes the next number at its first sampling job. Ruby's own id is
 * reachable only through Ractor#inspect, a method call the job must not make
 * (see may_call_ruby). */
static _Atomic uint32_t next_id = 2;

static void check_gc_hooks(ractor_rec_t *rec)
{
    uint64_t count = (uint64_t)rb_gc_count();
    uint64_t seen = rperf_rb_gc_starts();
    uint64_t base = atomic_load_explicit(&gc_base, memory_order_relaxed);
    if (count <= base + seen) return;
    /* A GC ran without our hooks: a Ractor without one (first GC before its
     * first job) or flags overwritten by another Ractor's TracePoint. */
    atomic_store_explicit(&gc_base, count - seen, memory_order_relaxed);
    if (rec->id == 1) rperf_rb_gc_hook_reregister();
    else rperf_rb_gc_hook_register_here();
}

/* Issue 14: a Ruby method call made from the sampling job returns through
 * an interrupt check (vm_call0_body), where a thread switch can let another
 * thread of this Ractor post Thread#kill (e.g. the Ractor's end killing its
 * threads) or Thread#raise; the kill is then taken inside the job and its
 * throw swallowed by rb_postponed_job_flush: the thread runs on with to_kill
 * set and the Ractor waits for it forever. So the job reads a thread's name
 * (Thread#name) only when no other thread of its Ractor exists (none can
 * run in between) and nothing is pending -- except in the main Ractor,
 * where names are still read with the call until they are read without one
 * (docs/backends.md, "The sampling job calls no Ruby method"). */
static bool may_call_ruby(const ractor_rec_t *rec)
{
    if (rec && rec->id == 1) return true;
    return rb_thread_alone() && !rb_thread_interrupted(rb_thread_current());
}

uint32_t rperf_rb_ractor_prepare(void)
{
    ractor_rec_t *rec = rb_ractor_local_storage_ptr(rec_key);
    if (!rec) {
        rec = calloc(1, sizeof(*rec));
        if (!rec) return 0;
        rec->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
        rb_ractor_local_storage_ptr_set(rec_key, rec);
    }
    if (rec->id != 1 && !rec->gc_hooked) {
        rperf_rb_gc_hook_register_here();
        rec->gc_hooked = 1;
    }
    check_gc_hooks(rec);
    return rec->id;
}

/* The name of the running Ruby thread, copied into buf ("" if unnamed). */
size_t rperf_rb_thread_name(char *buf, size_t cap)
{
    if (!may_call_ruby(rb_ractor_local_storage_ptr(rec_key))) return RPERF_RB_NAME_LATER;
    VALUE name = rb_funcall(rb_thread_current(), id_name, 0);
    if (!RB_TYPE_P(name, T_STRING) || cap == 0) {
        if (cap) buf[0] = '\0';
        return 0;
    }
    size_t n = (size_t)RSTRING_LEN(name);
    if (n >= cap) n = cap - 1;
    memcpy(buf, RSTRING_PTR(name), n);
    buf[n] = '\0';
    return n;
}

/* GVL held: do Ractors other than the main one exist? Only their threads
 * can hold a GVL at start without ever switching (the main Ractor's GVL is
 * held by the caller of start), so only then is the bootstrap needed. It is
 * skipped otherwise because its signal also interrupts Ruby's timer thread,
 * whose timeslice timer then starts over. */
bool rperf_rb_other_ractors_p(void)
{
    return NUM2LONG(rb_funcall(cRactor, id_count, 0)) > 1;
}

/* main Ractor, GVL held, at start */
void rperf_rb_ractor_run_start(void)
{
    if (!rb_ractor_local_storage_ptr(rec_key)) {   /* the main Ractor is 1 */
        ractor_rec_t *rec = calloc(1, sizeof(*rec));
        if (rec) {
            rec->id = 1;
            rb_ractor_local_storage_ptr_set(rec_key, rec);
        }
    }
    atomic_store(&gc_base, (uint64_t)rb_gc_count() - rperf_rb_gc_starts());
}

void rperf_rb_ractor_init(void)
{
    rec_key = rb_ractor_local_storage_ptr_newkey(&rec_type);
    id_name = rb_intern("name");
    id_count = rb_intern("count");
    cRactor = rb_const_get(rb_cObject, rb_intern("Ractor"));
    rb_gc_register_mark_object(cRactor);
}
