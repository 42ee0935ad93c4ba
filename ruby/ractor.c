/*
 * ractor.c — what the profiler keeps per Ractor: Ruby's id for the Ractor
 * (so samples, thread tables and pprof labels name it), and the Ractor's
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
 * any Ractor, OUTSIDE rperf_engine_enter/leave (it calls Ruby and may
 * allocate, hence trigger GC). The storage's free function runs when the
 * Ractor is freed.
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
static ID id_current, id_inspect, id_name, id_count;
static VALUE cRactor;

static _Atomic uint64_t gc_base;   /* rb_gc_count() - GC starts seen, at sync */

/* "#<Ractor:#12 ...>" -> 12 (Ruby 3.3 exposes the id only this way). */
static uint32_t current_ractor_id(void)
{
    VALUE r = rb_funcall(cRactor, id_current, 0);
    VALUE s = rb_funcall(r, id_inspect, 0);
    const char *p = RSTRING_PTR(s);
    long n = RSTRING_LEN(s);
    const char *prefix = "#<Ractor:#";
    size_t pl = strlen(prefix);
    if (n <= (long)pl || memcmp(p, prefix, pl) != 0) return 0;
    uint32_t id = 0;
    for (long i = (long)pl; i < n && p[i] >= '0' && p[i] <= '9'; i++) id = id * 10 + (uint32_t)(p[i] - '0');
    return id;
}

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

uint32_t rperf_rb_ractor_prepare(void)
{
    ractor_rec_t *rec = rb_ractor_local_storage_ptr(rec_key);
    if (!rec) {
        rec = calloc(1, sizeof(*rec));
        if (!rec) return 0;
        rec->id = current_ractor_id();
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
    atomic_store(&gc_base, (uint64_t)rb_gc_count() - rperf_rb_gc_starts());
}

void rperf_rb_ractor_init(void)
{
    rec_key = rb_ractor_local_storage_ptr_newkey(&rec_type);
    id_current = rb_intern("current");
    id_inspect = rb_intern("inspect");
    id_name = rb_intern("name");
    id_count = rb_intern("count");
    cRactor = rb_const_get(rb_cObject, rb_intern("Ractor"));
    rb_gc_register_mark_object(cRactor);
}
