/*
 * nanosleep.c — the "nanosleep" backend: one timer pthread sleeping to
 * absolute deadlines (timer_thread.c, shared with the holder backend:
 * one tick at a uniformly drawn moment of each period, no drift, a period missed by
 * more than a period counted as an overrun).
 *
 * Delivery per tick:
 *  - the main Ractor: the tick triggers the sampling job straight from this
 *    non-Ruby thread; Ruby 3.3 delivers such a trigger to the main Ractor's
 *    running thread. No signal is sent to main-Ractor threads.
 *  - other Ractors: a trigger from a non-Ruby thread never reaches them, so
 *    the tick is sent as the tick signal (tgkill) to every native thread
 *    that currently runs a Ruby thread of another Ractor. Those are tracked
 *    in `slots`: a native thread claims a slot at its first RESUMED, marks
 *    it holding (main / other / new) at RESUMED and idle at SUSPENDED, and
 *    frees it when it exits.
 *  - new: a thread of another Ractor with no number yet (ractor id 0) asked
 *    for the job at RESUMED (ruby/hooks.c), but the job bitset is one per
 *    VM and another thread's flush may have run it. Each job that numbers a
 *    thread (thread_identified) therefore sends the tick signal to every
 *    `new` holder, so none waits for the timer thread to be numbered (on a
 *    loaded machine this thread can be off the CPU for 50-300 ms). So does
 *    every other job run while a thread marked `new` may be left (job_ran):
 *    the run that took a re-signalled thread's bit can be one of a thread
 *    numbered already, which numbers nobody, and the `new` thread's own
 *    flush then finds the bitset empty (a Ractor kept id 0 about once in
 *    40 runs of test_short_ractors).
 * Main or other: the host identifies every main-Ractor thread before its
 * thread_resumed (ruby/hooks.c, at RESUMED), so a thread whose Ractor is
 * still unknown (0) there is another Ractor's, not numbered yet (`new`). The one
 * main-Ractor thread that reaches thread_resumed unidentified is the caller
 * of start, attached by the engine right after ns_start and identified by
 * the host just after that: ns_start marks its native thread (`tls.starting`),
 * which counts as main until the caller is identified or suspends.
 * At start every runnable task except the main Ractor's threads (with
 * RUBY_MN_THREADS=1: except the caller) gets one bootstrap signal
 * (tick_signal.c; cfg->bootstrap), which makes threads of other Ractors
 * already running before the start register themselves; it never reaches
 * a thread holding the main Ractor's GVL (that is the caller).
 *
 * cpu mode: the same pass over the slots reads the main Ractor holder's
 * thread CPU clock (by its tid) before the tick is triggered, and the
 * holder's job takes that reading (tick_cpu, cpu_reading.h) instead of
 * making its own when it runs right after the tick: no clock system call
 * on the application thread.
 *
 * Cost: every tick wakes this thread (~10-25 us of CPU here), whether or
 * not a thread runs. While no thread of any Ractor holds a GVL the tick
 * thread parks (timer_thread.c; nobody_holds below), and the next RESUMED
 * wakes it. "holder" is the default (docs/backends.md).
 *
 * Contexts: deliver runs on the timer thread (timer_thread.c) (no Ruby API: the
 * trigger and tgkill are async-signal-safe and thread-safe); start/stop
 * with the GVL held, on the caller's native thread; thread_resumed/suspended/identified in thread hooks
 * or the job on the thread itself (no Ruby API), tick_cpu and job_ran in the job; the key destructor when a
 * native thread exits; after_fork_child inside fork() in the child.
 */
#include "cpu_reading.h"
#include "new_marks.h"
#include "rperf_backend.h"
#include "rperf_core.h"
#include "tick_signal.h"
#include "timer_thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_SLOTS 4096            /* native threads tracked at once */

enum { SLOT_IDLE = 0, SLOT_MAIN = 1, SLOT_OTHER = 2, SLOT_NEW = 3 };   /* NEW: other, not numbered yet */

typedef struct slot {
    _Atomic int32_t tid;          /* 0 = free */
    _Atomic int state;
} slot_t;

/* This native thread's TLS (one struct: glibc's static TLS area is small
 * and shared, see test_static_tls_block_stays_small). */
typedef struct nt_slot {
    int idx;                      /* -1: none */
    uint32_t cpu_taken;           /* main_cpu's reading last taken (its seq) */
    uint64_t gen;
    uint64_t starting;            /* == gen: this native thread runs start's caller */
} nt_slot_t;

static slot_t slots[MAX_SLOTS];
static _Atomic int slot_hwm;      /* slots[0..hwm) may be in use */
static _Thread_local nt_slot_t tls __attribute__((tls_model("initial-exec")));
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t gen = 1;

static _Atomic int running;
/* cpu mode: the main Ractor holder's CPU clock, read by the timer thread
 * at each tick, for its job (cpu_reading.h): the application thread makes
 * no clock system call per sample */
static bool cpu_clock;
static rperf_cpu_reading_t main_cpu;

/* ---- GVL-holder slots (own context) --------------------------------------- */

static void release_slot(void *arg)
{
    (void)arg;
    if (tls.idx >= 0 && tls.gen == atomic_load(&gen)) {
        atomic_store(&slots[tls.idx].state, SLOT_IDLE);
        atomic_store(&slots[tls.idx].tid, 0);
    }
    tls.idx = -1;
}

static void make_key(void) { pthread_key_create(&exit_key, release_slot); }

static slot_t *my_slot(void)
{
    uint64_t g = atomic_load_explicit(&gen, memory_order_acquire);
    if (tls.gen == g && tls.idx >= 0) return &slots[tls.idx];
    pthread_once(&key_once, make_key);
    int32_t tid = (int32_t)syscall(SYS_gettid);
    for (int i = 0; i < MAX_SLOTS; i++) {
        int32_t zero = 0;
        if (atomic_compare_exchange_strong(&slots[i].tid, &zero, tid)) {
            int hwm = atomic_load(&slot_hwm);
            while (hwm < i + 1 && !atomic_compare_exchange_weak(&slot_hwm, &hwm, i + 1)) {
            }
            tls.idx = i;
            tls.gen = g;
            pthread_setspecific(exit_key, &tls);
            return &slots[i];
        }
    }
    return NULL;                  /* table full: this thread gets main-Ractor delivery only */
}

static int holder_state(void)
{
    rperf_thread_t *pt = rperf_current_thread_sigsafe();
    if (!pt) return SLOT_IDLE;
    uint32_t ractor = rperf_thread_ractor(pt);
    if (ractor == 1) return SLOT_MAIN;
    if (ractor == 0) return tls.starting == atomic_load(&gen) ? SLOT_MAIN : SLOT_NEW;  /* MAIN: start's caller */
    return SLOT_OTHER;
}

static rperf_new_marks_t new_marks;  /* slots marked `new` (new_marks.h) */

static void ns_thread_resumed(void)
{
    if (!atomic_load_explicit(&running, memory_order_relaxed)) return;
    slot_t *s = my_slot();
    int st = holder_state();
    if (s) atomic_store_explicit(&s->state, st, memory_order_release);
    if (s && st == SLOT_NEW) rperf_new_marks_add(&new_marks);
    /* a parked tick thread has a holder again (the wake-up's time: see
     * rperf_resume_was_slow) */
    if (rperf_timer_thread_wake()) rperf_resume_was_slow();
}

/* Send the tick signal to every holder whose state is `want` (with
 * want == SLOT_OTHER also SLOT_NEW: both get the timer's ticks). With
 * `read_main` (the timer thread's tick, cpu mode) the same pass reads the
 * main Ractor holder's CPU clock for its job, at `now`. Timer thread or
 * thread hook; no Ruby API. */
static int signal_holders(int want, bool read_main, int64_t now)
{
    int sent = 0;
    int hwm = atomic_load_explicit(&slot_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++) {
        int st = atomic_load_explicit(&slots[i].state, memory_order_acquire);
        if (read_main && st == SLOT_MAIN) {
            int32_t tid = atomic_load_explicit(&slots[i].tid, memory_order_relaxed);
            int64_t cpu;
            if (rperf_cpu_of_tid(tid, &cpu)) rperf_cpu_reading_publish(&main_cpu, tid, cpu, now, 0);
            read_main = false;                 /* one holder at a time */
            continue;
        }
        if (!(st == want || (want == SLOT_OTHER && st == SLOT_NEW))) continue;
        int32_t tid = atomic_load_explicit(&slots[i].tid, memory_order_relaxed);
        if (tid > 0) {
            rperf_tick_signal_send(tid);
            sent++;
        }
    }
    return sent;
}

/* Own context (job): the tick signal to every `new` holder; how many. */
static int signal_new_holders(void) { return signal_holders(SLOT_NEW, false, 0); }

/* In the job (own): the main holder's reading, if it was made for this
 * native thread and not taken yet; the engine decides whether it is
 * recent enough. */
static int ns_tick_cpu(int64_t *cpu_ns, int64_t *mono_ns)
{
    return rperf_cpu_reading_take(&main_cpu, &tls.cpu_taken, 0, cpu_ns, mono_ns);
}

/* A job just numbered this thread (or the host did): that job emptied the
 * VM-global bitset, maybe taking the one a new thread of another Ractor
 * asked for at RESUMED (ruby/hooks.c). Every `new` holder gets the tick
 * signal now (this thread is no longer one), so none waits for the timer
 * thread to be numbered: it can be off the CPU for longer than a short
 * Ractor lives. */
static void ns_thread_identified(void)
{
    tls.starting = 0;
    ns_thread_resumed();
    if (atomic_load_explicit(&running, memory_order_relaxed)) (void)signal_new_holders();
}

/* In every job (own, GVL held): while a thread marked `new` may be left,
 * signal every `new` holder, as thread_identified does: this run may have
 * taken the bit such a thread's signal set, and numbered nobody. */
static void ns_job_ran(void)
{
    if (atomic_load_explicit(&running, memory_order_relaxed))
        rperf_new_marks_resignal(&new_marks, signal_new_holders);
}

static void ns_thread_suspended(void)
{
    tls.starting = 0;
    if (tls.idx < 0 || tls.gen != atomic_load(&gen)) return;
    atomic_store_explicit(&slots[tls.idx].state, SLOT_IDLE, memory_order_release);
}

static void reset_slots(void)
{
    atomic_fetch_add(&gen, 1);
    for (int i = 0; i < MAX_SLOTS; i++) {
        atomic_store(&slots[i].state, SLOT_IDLE);
        atomic_store(&slots[i].tid, 0);
    }
    atomic_store(&slot_hwm, 0);
}

/* ---- the tick (timer thread, timer_thread.c) ------------------------------ */

/* Timer thread only: whether a job consumed the previous tick's trigger. */
static bool consumed;

/* Never steady (timer_thread.h): this backend does not know which main
 * Ractor thread the tick reaches, so every period draws its moment anew. */
static bool deliver(int64_t now)
{
    consumed = rperf_engine_ticks_unconsumed() == 0;
    /* other Ractors (numbered or new), and in cpu mode the main holder's
     * clock, read before its job is triggered */
    signal_holders(SLOT_OTHER, cpu_clock, now);
    rperf_engine_tick_sigsafe();     /* main Ractor */
    return false;
}

/* Timer thread: no thread of any Ractor holds its GVL, so ticks go
 * nowhere (the tick thread may park; ns_thread_resumed wakes it); or a
 * deferred run has no thread inside a profile block (the engine takes no
 * tick; a block's start attaches its thread, which wakes it). A
 * trigger consumed between the last two ticks means a main-Ractor thread
 * ran Ruby code: not idle, and no scan. Otherwise every slot is read: a
 * thread in a long C call or GC with its GVL held is still marked as
 * holding (it has not suspended), and so is start's caller (identified at
 * start). A thread the full table left without a slot is not seen here
 * (4,096 native threads at once); it gets ticks again after the watchdog. */
static bool nobody_holds(void)
{
    if (!rperf_engine_ticks_wanted()) return true;   /* deferred, no profile block */
    if (consumed) return false;
    int hwm = atomic_load_explicit(&slot_hwm, memory_order_acquire);
    for (int i = 0; i < hwm; i++)
        if (atomic_load_explicit(&slots[i].state, memory_order_acquire) != SLOT_IDLE) return false;
    return true;
}

/* ---- lifecycle (GVL held) --------------------------------------------------- */

static int ns_start(const rperf_backend_config_t *cfg, char *err, size_t errlen)
{
    reset_slots();
    consumed = false;
    cpu_clock = cfg->cpu_clock != 0;
    rperf_cpu_reading_reset(&main_cpu);
    tls.starting = atomic_load(&gen);   /* this native thread runs the caller (main Ractor) */
    atomic_store(&running, 1);
    if (rperf_timer_thread_start(cfg, deliver, nobody_holds, err, errlen) == 0) return 0;
    atomic_store(&running, 0);
    return -1;
}

static void ns_stop(void)
{
    atomic_store(&running, 0);
    rperf_timer_thread_stop();
    reset_slots();
}

static void ns_after_fork_child(void)
{
    atomic_store(&running, 0);
    rperf_timer_thread_after_fork();   /* the timer thread does not exist here */
    reset_slots();
    tls.idx = -1;
}

const rperf_backend_ops_t rperf_backend_nanosleep = {
    .version = RPERF_BACKEND_ABI_VERSION,
    .name = "nanosleep",
    .description = "a timer thread sleeps to absolute deadlines and triggers the job; "
                   "threads of other Ractors get the tick as a signal",
    .start = ns_start,
    .stop = ns_stop,
    .after_fork_child = ns_after_fork_child,
    .thread_resumed = ns_thread_resumed,
    .thread_suspended = ns_thread_suspended,
    .thread_identified = ns_thread_identified,
    .job_ran = ns_job_ran,
    .tick_cpu = ns_tick_cpu,
    .ticks = RPERF_TICKS_JITTERED,
};
