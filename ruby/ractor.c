/*
 * ractor.c — what the profiler knows per Ractor and per thread without
 * calling Ruby methods: an id for the running Ractor (rperf's own number,
 * kept in Ractor-local storage) and the running thread's name (the kernel's
 * name of its native thread). Nothing here dispatches a Ruby method, so no
 * TracePoint, set_trace_func or Thread#add_trace_func sees the profiler's
 * work: the profiler stays invisible to tracers.
 *
 * Why not Ruby's own Ractor id and Thread#name: Ruby 3.3 exports no C
 * function that returns either; the only ways are Ruby method calls
 * (Ractor#inspect, Thread#name), which a tracer on the sampled thread sees.
 *
 * Ractor ids: the main Ractor is 1 (its record is made at require time, in
 * the main Ractor); every other Ractor gets the next number (2, 3, ...) at
 * its first sample, in the order Ractors are first sampled. They are unique
 * for the process's life and are not the numbers of Ractor#inspect.
 * A thread of another Ractor can end before any job ran in its Ractor:
 * jobs share one VM-wide bitset, and the run that flushes a thread's
 * request may be another thread's (docs/backends.md, "Numbered at the
 * first turn"; re-signals make this rare, not impossible). Its EXITED
 * (no GVL, so no Ractor-local storage) then gives the thread the next
 * number itself (rperf_rb_ractor_number_unseen): unique, though a Ractor
 * with several such threads would show one number per thread.
 *
 * Thread names: read with prctl(PR_GET_NAME) on the thread's own native
 * thread, which Ruby sets with pthread_setname_np for threads that own a
 * native thread (1:1): to Thread#name (cut by Ruby at 15 bytes, possibly
 * inside a character; the cut character is dropped here) or, for an
 * unnamed thread, to "file.rb:LINE" of its block. The main thread is
 * "main" unless its kernel name changed since require. Threads that share
 * native threads (M:N: every non-main Ractor in 3.3, and the main Ractor's
 * other threads under RUBY_MN_THREADS=1) report no name: their native
 * thread's name belongs to whichever thread Ruby started on it last.
 *
 * Main or not, at RESUMED: rperf_rb_ractor_peek reads the running
 * Ractor's record without allocating, and is called from the thread hook's
 * RESUMED (hooks.c), so every main-Ractor thread is known as such before
 * the backend hears of it (the :nanosleep backend signals only threads of
 * other Ractors). Why that is safe there, from Ruby 3.3.8's source: RESUMED
 * fires on the thread's own native thread, holding its Ractor's GVL
 * (thread_pthread.c thread_sched_wait_running_turn; thread_pthread_mn.c
 * co_start), after ruby_thread_set_native() set the native thread's current
 * execution context to that thread (nt_start for dedicated native threads,
 * thread_sched_switch0 for shared ones; a dedicated thread's is never
 * cleared). rb_ractor_local_storage_ptr then only reads: the key's
 * main-Ractor cache, or st_lookup in the running Ractor's own table, which
 * only that Ractor's GVL holder writes. It takes no lock and allocates
 * nothing (setting a record does allocate, so ids are still handed out by
 * the job).
 *
 * Has another Ractor run? (rperf_rb_other_ractors_p, which decides the
 * start-up bootstrap signal.) Always "maybe": Ruby 3.3 has no C API for
 * the Ractor count (Ractor.count is a method call a tracer sees). A thread
 * hook watching for the first non-main RESUMED since require would know
 * (rperf cannot be required once a second Ractor has existed); skipping
 * the bootstrap on that answer was tried and made Ractors created later
 * lose all their samples now and then under :nanosleep with M:N threads
 * (test_stress_ractors, 5 runs in 27; never with the bootstrap), for a
 * reason not understood yet, so the bootstrap stays (docs/backends.md).
 *
 * Context: rperf_rb_ractor_prepare and rperf_rb_thread_name run in the
 * sampling job (GVL held, any Ractor) or in start (main Ractor); they
 * allocate with malloc only. rperf_rb_ractor_peek runs in
 * the thread hook's RESUMED (own native thread, GVL held, no allocation).
 * rperf_rb_main_thread_tids runs in start (main Ractor, GVL held): it calls
 * Thread.list and Thread#native_thread_id (Ruby methods, which a tracer
 * enabled around Rperf.start sees, like the rest of start's Ruby code).
 * The storage's free function runs when the Ractor is freed.
 */
#include "rperf_ruby.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

typedef struct ractor_rec {
    uint32_t id;
    /* rperf's allocation hook is in this Ractor's hook list (ruby/alloc.c;
     * set by a job in the Ractor, read by RESUMED) */
    _Atomic bool alloc_hook;
} ractor_rec_t;

/* live numbered Ractors (other than the main one) without rperf's
 * allocation hook in their list */
static _Atomic int unhooked;
static ractor_rec_t main_rec = { 1, false };  /* the main Ractor's, set at require */
static void rec_free(void *p)
{
    if (p == &main_rec) return;
    if (!atomic_load_explicit(&((ractor_rec_t *)p)->alloc_hook, memory_order_relaxed))
        atomic_fetch_sub_explicit(&unhooked, 1, memory_order_relaxed);
    free(p);
}
static const struct rb_ractor_local_storage_type rec_type = { NULL, rec_free };
static rb_ractor_local_key_t rec_key;
static _Atomic uint32_t next_id = 2;    /* 1 = the main Ractor */
uint32_t rperf_rb_ractor_peek(void)
{
    const ractor_rec_t *rec = rb_ractor_local_storage_ptr(rec_key);
    return rec ? rec->id : 0;
}

static char main_comm[16];              /* the main thread's kernel name at require */
static bool mn_main;                    /* RUBY_MN_THREADS: main-Ractor threads share */

uint32_t rperf_rb_ractor_prepare(void)
{
    ractor_rec_t *rec = rb_ractor_local_storage_ptr(rec_key);
    if (rec) return rec->id;
    /* only non-main Ractors get here: the main one's record is made at init */
    rec = malloc(sizeof(*rec));
    if (!rec) return 0;
    rec->id = atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
    atomic_init(&rec->alloc_hook, false);
    atomic_fetch_add_explicit(&unhooked, 1, memory_order_relaxed);
    rb_ractor_local_storage_ptr_set(rec_key, rec);
    return rec->id;
}

/* Any context (async-signal-safe): the next number, for a thread of a
 * Ractor that ends without a record (see above). */
uint32_t rperf_rb_ractor_number_unseen(void)
{
    return atomic_fetch_add_explicit(&next_id, 1, memory_order_relaxed);
}

/* Any thread: a Ractor other than the main one has been numbered in this
 * process (it ran Ruby code during a run). */
bool rperf_rb_ractors_seen(void) { return atomic_load_explicit(&next_id, memory_order_relaxed) > 2; }

/* RESUMED-safe, as peek: this Ractor is another one, numbered, and has no
 * allocation hook of rperf's yet. */
bool rperf_rb_ractor_alloc_hook_missing(void)
{
    const ractor_rec_t *rec = rb_ractor_local_storage_ptr(rec_key);
    return rec && rec->id > 1 && !atomic_load_explicit(&rec->alloc_hook, memory_order_relaxed);
}

/* In the Ractor (a job): its allocation hook was added. */
void rperf_rb_ractor_alloc_hook_added(void)
{
    ractor_rec_t *rec = rb_ractor_local_storage_ptr(rec_key);
    if (rec && !atomic_exchange_explicit(&rec->alloc_hook, true, memory_order_relaxed))
        atomic_fetch_sub_explicit(&unhooked, 1, memory_order_relaxed);
}

/* Any context: live numbered Ractors other than the main one without the
 * allocation hook. */
int rperf_rb_ractors_unhooked(void) { return atomic_load_explicit(&unhooked, memory_order_relaxed); }

/* Drop an incomplete UTF-8 sequence at the end (Ruby cuts names at a byte
 * count); a name that is not UTF-8 at all is kept as it is. */
static size_t utf8_cut(const char *s, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) return n;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (need == 1) return n;                 /* ends in ASCII, or not UTF-8 */
    return back + 1 < need ? i - 1 : n;      /* a lead byte short of continuations */
}

/* The name of the running Ruby thread, copied into buf ("" if unknown). */
size_t rperf_rb_thread_name(char *buf, size_t cap)
{
    if (cap == 0) return 0;
    buf[0] = '\0';
    bool main_ractor = rperf_rb_ractor_prepare() == 1;
    bool main_thread = main_ractor && rb_thread_current() == rb_thread_main();
    if (!main_ractor || (mn_main && !main_thread)) return 0;
    char comm[16] = { 0 };
    if (prctl(PR_GET_NAME, comm, 0, 0, 0) != 0) return 0;
    comm[sizeof(comm) - 1] = '\0';
    const char *name = main_thread && strcmp(comm, main_comm) == 0 ? "main" : comm;
    size_t n = utf8_cut(name, strlen(name));
    if (n >= cap) n = utf8_cut(name, cap - 1);
    memcpy(buf, name, n);
    buf[n] = '\0';
    return n;
}

/* GVL held, at start: may threads of other Ractors hold their GVL without
 * ever switching (so that only the bootstrap signal reaches them)? Always
 * "maybe" (see above); the bootstrap signals only runnable tasks, which in a
 * program without Ractors is at most a thread running C code outside the
 * GVL, or a helper thread, at that instant. */
bool rperf_rb_other_ractors_p(void)
{
    return true;
}

static int cmp_tid(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* GVL held, main Ractor, at start: the native thread ids of the main
 * Ractor's threads (Thread.list, Thread#native_thread_id), sorted, in a
 * malloc'd array (*out; NULL and 0 when there are none). They need no
 * start-up bootstrap signal: while the caller holds the main Ractor's GVL
 * none of them runs Ruby code, and each takes the GVL back through RESUMED,
 * which the hooks see. Under RUBY_MN_THREADS=1 the main Ractor's threads
 * run on shared native threads that may run another Ractor's thread by the
 * time of the scan, so nothing is left out there. Nothing in between runs
 * Ruby code (start is C from here on), so the list stays true for the scan. */
size_t rperf_rb_main_thread_tids(int32_t **out)
{
    *out = NULL;
    if (mn_main) return 0;
    /* every call that may raise comes before the malloc */
    VALUE list = rb_funcall(rb_cThread, rb_intern("list"), 0);
    long n = RARRAY_LEN(list);
    VALUE ids = rb_ary_new_capa(n);
    ID native_id = rb_intern("native_thread_id");
    for (long i = 0; i < n; i++) {
        VALUE tid = rb_funcall(rb_ary_entry(list, i), native_id, 0);
        if (FIXNUM_P(tid) && FIX2LONG(tid) > 0 && FIX2LONG(tid) <= INT32_MAX) rb_ary_push(ids, tid);
    }
    long k = RARRAY_LEN(ids);
    if (k == 0) return 0;
    int32_t *tids = malloc((size_t)k * sizeof(*tids));
    if (!tids) return 0;
    for (long i = 0; i < k; i++) tids[i] = (int32_t)FIX2LONG(rb_ary_entry(ids, i));
    RB_GC_GUARD(list);
    RB_GC_GUARD(ids);
    qsort(tids, (size_t)k, sizeof(*tids), cmp_tid);
    *out = tids;
    return (size_t)k;
}

bool rperf_rb_main_mn(void) { return mn_main; }

/* Does the process's initial environment (/proc/self/environ) set
 * RUBY_MN_THREADS to a positive number? */
static bool initial_env_mn(void)
{
    int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    static char buf[1 << 16];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof(buf) - 1 && (r = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
        len += (size_t)r;
    close(fd);
    buf[len] = '\0';
    static const char key[] = "RUBY_MN_THREADS=";
    bool mn = false;
    for (size_t at = 0; at < len; at += strlen(buf + at) + 1)
        if (strncmp(buf + at, key, sizeof(key) - 1) == 0) mn = atoi(buf + at + sizeof(key) - 1) > 0;
    return mn;
}

/* main Ractor, GVL held, at require time */
void rperf_rb_ractor_init(void)
{
    rec_key = rb_ractor_local_storage_ptr_newkey(&rec_type);
    rb_ractor_local_storage_ptr_set(rec_key, &main_rec);
    if (prctl(PR_GET_NAME, main_comm, 0, 0, 0) != 0) main_comm[0] = '\0';
    main_comm[sizeof(main_comm) - 1] = '\0';
    /* M:N for the main Ractor, the one answer the hooks, the engine and
     * the backends all use. Ruby decides at boot from its environment then,
     * which an application may have changed in ENV before requiring rperf
     * (getenv) and `$0=` may have overwritten since (/proc/self/environ,
     * read here, early): M:N if either says so. Taking 1:1 threads for M:N
     * only costs speed (no 1:1 fast path, no direct trigger); the reverse
     * could hand a freed thread state to a new thread at the same address. */
    const char *mn = getenv("RUBY_MN_THREADS");
    mn_main = (mn && atoi(mn) > 0) || initial_env_mn();
    /* a Ruby series the suite has not verified may decide M:N otherwise:
     * take the safe answer (ruby_version.c) */
    if (!rperf_rb_verified_ruby()) mn_main = true;
}
