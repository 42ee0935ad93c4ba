/*
 * holder.c — the "holder" backend (the default): one timer pthread sleeping
 * to absolute deadlines (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME),
 * one at a uniformly drawn moment of each period, kept from period to
 * period while one thread holds its GVL without a break: timer_thread.c
 * says why, is_steady below decides)
 * delivers every tick to the thread that holds the GVL, in every Ractor.
 * The timer interrupt and the thread wake-up land on this thread, not on
 * the application's; a GVL switch stores to its own slot (one
 * cache line) and, for a main-Ractor holder, to main_holder, and loads
 * neither (what it last wrote is in its TLS).
 *
 * Who holds a GVL: a table of slots, one per native thread that ran Ruby
 * code during the run (claimed at its first RESUMED, freed when the native
 * thread exits). RESUMED marks the slot as the holder of the main Ractor or
 * of another Ractor (or of a Ractor not known yet: the thread's first job
 * tells, thread_identified), SUSPENDED clears it. No system call per switch.
 *
 * In cpu mode the timer thread reads the holder's thread CPU clock at each
 * tick it delivers (by its tid, a system call on the timer thread) and
 * leaves the reading in the holder's slot for the job it triggers
 * (tick_cpu): the job then makes no system call on the application's
 * thread. The slot's reading is a seqlock written by the timer thread
 * alone; the job takes a reading once (a per-native-thread sequence
 * number), and only its own (tid).
 *
 * Delivery per tick:
 *  - the main Ractor's holder, when the trigger is exact: the job is
 *    triggered straight from this thread (no signal). Ruby 3.3 flags the
 *    main Ractor's running_ec, which every GVL acquisition of a 1:1 thread
 *    sets to the acquirer (thread_pthread.c thread_sched_wait_running_turn,
 *    thread.c blocking_region_end/THREAD_BLOCKING_END/yield), except that a
 *    new thread's native thread sets it to itself on start-up, before it
 *    waits for the GVL (ruby_thread_set_native). So the trigger is exact
 *    unless (a) a thread announced by STARTED has not had its first turn yet
 *    (rperf_engine_unsettled_threads) and the holder took its GVL less
 *    than SETTLE_NS after the latest STARTED (only a holder creates
 *    threads, so a later acquisition came after the new native threads'
 *    start-ups and set running_ec back: direct_trigger_exact), (b) the holder resumed less than
 *    GUARD_NS ago (Ruby may set running_ec just after RESUMED), or (c) the
 *    main Ractor runs M:N threads (RUBY_MN_THREADS=1: running_ec is cleared
 *    while a thread switches away, which can race with the next holder),
 *    or (d) the host has not verified its Ruby's running_ec behaviour
 *    (rperf_config_t direct_trigger: a Ruby series newer than those the
 *    suite ran on).
 *    A holder attached without a RESUMED in this run (the caller of start,
 *    or a thread first met in its job) is tried directly too: a thread
 *    started before the run may have left running_ec pointing at itself,
 *    and the self-check in deliver catches that. A direct trigger still
 *    unconsumed at the next tick went astray (or the holder is in a long C
 *    call or GC, which takes no job either way): that holder's next 2
 *    ticks go by signal, 4 after a second miss in a row, doubling up to
 *    1024; a direct trigger that works resets it, a new holder (RESUMED)
 *    starts afresh.
 *    Otherwise, and for a holder whose Ractor is not known yet:
 *  - the tick signal (tgkill) to the holder; the handler (tick_signal.c)
 *    triggers the job on that very thread, inside its own Ractor. Holders
 *    of other Ractors always get it that way (Ruby 3.3 has no trigger for
 *    another Ractor).
 * When no thread of the main Ractor holds its GVL (all blocked), nothing is
 * sent there: blocked time is recorded at RESUMED. When no thread of any
 * Ractor holds one for a while, the tick thread parks (nobody_holds;
 * timer_thread.c) and the next mark_holder wakes it.
 * At start, every runnable task outside the main Ractor (with
 * RUBY_MN_THREADS=1: every one but the caller) gets one bootstrap signal
 * (tick_signal.c), so threads holding a GVL since before the start
 * register themselves.
 *
 * Contexts: deliver runs on the timer thread (timer_thread.c) (all signals
 * blocked; no Ruby API: the trigger and tgkill are async-signal-safe and
 * thread-safe); start/stop with the GVL held; thread_resumed/suspended in
 * the thread hooks on the thread itself, thread_identified, job_ran and
 * tick_cpu in the job (no Ruby API); the key destructor when a native thread
 * exits (inside the engine's enter/leave);
 * after_fork_child inside fork() in the child.
 */
#include "cpu_reading.h"
#include "new_marks.h"
#include "rperf_backend.h"
#include "rperf_core.h"
#include "tick_signal.h"
#include "timer_thread.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GUARD_NS 5000LL           /* a holder this fresh gets the signal */
#define SETTLE_NS 2000000LL       /* a new native thread's start-up, at most */
#define MAX_SLOTS 4096            /* native threads tracked at once */

/* HOLDS_NEW: another Ractor's thread whose Ractor has no number yet; the
 * ticks treat it as HOLDS_OTHER */
enum { HOLDS_NOTHING = 0, HOLDS_MAIN = 1, HOLDS_OTHER = 2, HOLDS_NEW = 3 };

static bool holds_other(int holds) { return holds == HOLDS_OTHER || holds == HOLDS_NEW; }

/* One cache line per slot: a switch writes only its own slot's line (and
 * main_holder's). */
typedef struct holder_slot {
    _Alignas(64) _Atomic int32_t tid;   /* native thread; 0 = free slot */
    _Atomic int holds;            /* HOLDS_* */
    _Atomic int64_t since;        /* CLOCK_MONOTONIC at its last RESUMED */
    /* cpu mode: the timer thread's last reading of this slot's thread CPU
     * clock, for its job (cpu_reading.h) */
    rperf_cpu_reading_t cpu;
} holder_slot_t;

static holder_slot_t table[MAX_SLOTS];
static _Atomic int used;          /* table[0..used) may be claimed */
/* Where a claim starts looking: no slot below it was free when it was last
 * moved, roughly (a hint only: the CAS on a slot's tid decides). It keeps a
 * run's claims O(1) each: 1,000 threads each scanning the taken slots from
 * the first one with a locked instruction per slot cost ~7 us per thread
 * per run here. Freed slots pull it back down, so the table stays compact
 * under thread churn. */
static _Atomic int free_hint;
static _Atomic int other_holders;      /* slots in HOLDS_OTHER or HOLDS_NEW */
static rperf_new_marks_t new_marks;  /* slots marked HOLDS_NEW (new_marks.h) */
/* The slot that last became the main Ractor's holder (-1: none); it holds
 * the GVL while its slot says HOLDS_MAIN. SUSPENDED leaves it alone. On a
 * line of its own, away from what every switch reads. */
static struct {
    _Alignas(64) _Atomic int slot;
} main_holder = { -1 };

typedef struct my_slot {
    int index;                    /* -1: none */
    int holds;                    /* what this thread last stored in the slot's holds */
    uint64_t epoch;
    uint32_t cpu_taken;           /* the slot's reading last taken (its seq) */
} my_slot_t;
static _Thread_local my_slot_t mine __attribute__((tls_model("initial-exec")));
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* What every switch reads (mark_holder, have_slot), written only at start,
 * stop and fork: on a line of its own, away from the counters a claim or a
 * tick writes. */
static struct {
    _Alignas(64) _Atomic int running;
    _Atomic uint64_t epoch;       /* bumped per run: stale TLS indices */
} live = { 0, 1 };
static bool mn_main;              /* RUBY_MN_THREADS: main Ractor is M:N */
/* the host verified where its Ruby points running_ec (rperf_config_t
 * direct_trigger): else every tick goes by signal */
static bool direct_ok;
static bool cpu_clock;            /* cpu mode: hand the tick's reading to the job */

/* ---- the holder table (own context: thread hooks and the job) ---------------- */

/* Set this native thread's slot (mine.index) to a HOLDS_* state, keeping
 * main_holder / other_holders right. Only the slot's own native thread
 * writes its state while a run is live (clear_table runs with nothing
 * inside enter/leave), so what it last wrote is kept in its TLS
 * (mine.holds) and the slot and main_holder get plain release stores:
 * no locked instruction inside Ruby's scheduler lock, and no load of a
 * line another CPU wrote (the previous holder wrote main_holder; a store
 * to it goes through the store buffer, a load would wait for the line). */
static void set_holds(int holds)
{
    int i = mine.index;
    int was = mine.holds;
    mine.holds = holds;
    if (was != holds) atomic_store_explicit(&table[i].holds, holds, memory_order_release);
    if (holds_other(was) && !holds_other(holds))
        atomic_fetch_sub_explicit(&other_holders, 1, memory_order_relaxed);
    else if (!holds_other(was) && holds_other(holds))
        atomic_fetch_add_explicit(&other_holders, 1, memory_order_relaxed);
    if (holds == HOLDS_NEW && was != HOLDS_NEW) rperf_new_marks_add(&new_marks);
    if (holds == HOLDS_MAIN) atomic_store_explicit(&main_holder.slot, i, memory_order_release);
}

static bool have_slot(void)
{
    return mine.index >= 0 && mine.epoch == atomic_load_explicit(&live.epoch, memory_order_acquire);
}

/* Inside the engine's enter/leave: a stop (and the start after it, which
 * clears the table and hands the slot to another thread) cannot pass
 * between the slot check and the writes. When no run is going, the table
 * was or will be cleared by the stop: nothing to give back. */
static void on_native_thread_exit(void *arg)
{
    (void)arg;
    if (rperf_engine_enter()) {
        if (have_slot()) {
            int i = mine.index;
            set_holds(HOLDS_NOTHING);
            atomic_store(&table[i].tid, 0);
            int h = atomic_load(&free_hint);
            while (i < h && !atomic_compare_exchange_weak(&free_hint, &h, i)) {
            }
        }
        rperf_engine_leave();
    }
    mine.index = -1;
}

/* Without the key (out of keys) no slot is claimed: a slot whose thread
 * exits unseen would keep a dead tid for the rest of the run. */
static bool key_made;
static void make_key(void) { key_made = pthread_key_create(&exit_key, on_native_thread_exit) == 0; }

/* This native thread's slot (claimed on first use in a run), or -1. */
static int claim_slot(void)
{
    if (have_slot()) return mine.index;
    pthread_once(&key_once, make_key);
    if (!key_made) return -1;     /* this thread gets no tick */
    int32_t tid = rperf_native_tid();
    int start = atomic_load_explicit(&free_hint, memory_order_relaxed);
    if (start < 0 || start >= MAX_SLOTS) start = 0;
    for (int k = 0; k < MAX_SLOTS; k++) {
        int i = start + k < MAX_SLOTS ? start + k : start + k - MAX_SLOTS;
        int32_t free_tid = 0;
        if (atomic_load_explicit(&table[i].tid, memory_order_relaxed) != 0) continue;
        if (!atomic_compare_exchange_strong(&table[i].tid, &free_tid, tid)) continue;
        int h = start;   /* moved on only if no one moved it meanwhile */
        atomic_compare_exchange_strong(&free_hint, &h, i + 1);
        int n = atomic_load(&used);
        while (n < i + 1 && !atomic_compare_exchange_weak(&used, &n, i + 1)) {
        }
        if (pthread_setspecific(exit_key, &mine) != 0) {
            atomic_store(&table[i].tid, 0);   /* its exit would go unseen */
            return -1;
        }
        mine.index = i;
        mine.holds = HOLDS_NOTHING;   /* clear_table left it so */
        mine.epoch = atomic_load(&live.epoch);
        return i;
    }
    return -1;                    /* table full: this thread gets no tick */
}

/* since: when Ruby handed this thread the GVL (a RESUMED event), 0 when it
 * holds the GVL without one in this run (attached): then running_ec may
 * still name another thread, and the direct trigger is not exact. */
static void mark_holder(int64_t since, bool keep_since)
{
    if (!atomic_load_explicit(&live.running, memory_order_relaxed)) return;
    rperf_thread_t *pt = rperf_current_thread_sigsafe();
    int i = claim_slot();
    if (i < 0 || !pt) return;
    /* A Ractor not known yet counts as another Ractor: it gets the signal,
     * whose job identifies it (thread_identified); until then it is
     * HOLDS_NEW (see signal_new_holders). */
    uint32_t ractor = rperf_thread_ractor(pt);
    int holds = ractor == 1 ? HOLDS_MAIN : ractor == 0 ? HOLDS_NEW : HOLDS_OTHER;
    if (!keep_since) atomic_store_explicit(&table[i].since, since, memory_order_relaxed);
    set_holds(holds);
    /* a parked tick thread has a holder again; at RESUMED the wake-up's
     * time is the thread's wait, not its next sample's (elsewhere the
     * engine ignores the flag: it is reset before each RESUMED's call) */
    if (rperf_timer_thread_wake()) rperf_resume_was_slow();
}

/* Own context, in the job: the tick signal to every HOLDS_NEW holder; how
 * many were sent. A thread of a Ractor with no number yet asks for the job
 * at its RESUMED (ruby/hooks.c), but the job bitset is one per VM: another
 * thread's run may take that bit, and the new thread's own flush then finds
 * the bitset empty. Without a retry such a thread waits for a tick to be
 * numbered, and a Ractor that lives less than an interval kept id 0
 * (test_short_ractors: 2 in 40 per run at 1 Hz). The signal's handler asks
 * for the job again on that very thread. */
static int signal_new_holders(void)
{
    int sent = 0;
    int n = atomic_load_explicit(&used, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (atomic_load_explicit(&table[i].holds, memory_order_acquire) != HOLDS_NEW) continue;
        int32_t tid = atomic_load_explicit(&table[i].tid, memory_order_relaxed);
        if (tid <= 0 || tid == rperf_native_tid()) continue;
        rperf_tick_signal_send(tid);
        sent++;
    }
    return sent;
}

static void holder_resumed(void) { mark_holder(rperf_resumed_mono(), false); }
static void holder_attached(void) { mark_holder(0, false); }

/* In the job that numbered this thread: that run emptied the job bitset,
 * maybe of another new thread's request. */
static void holder_identified(void)
{
    mark_holder(0, true);
    if (atomic_load_explicit(&live.running, memory_order_relaxed)) (void)signal_new_holders();
}

/* In every job: while a HOLDS_NEW holder may be left, signal them all (this
 * run may have taken the bit such a thread set, numbering nobody). */
static void holder_job_ran(void)
{
    if (atomic_load_explicit(&live.running, memory_order_relaxed))
        rperf_new_marks_resignal(&new_marks, signal_new_holders);
}

static void holder_suspended(void)
{
    if (have_slot()) set_holds(HOLDS_NOTHING);
}

/* In the job (own): the reading of this native thread's CPU clock the timer
 * thread left in its slot, if it has not been taken yet (see
 * holder_ran). The engine decides whether it is recent enough. */
static int holder_tick_cpu(int64_t *cpu_ns, int64_t *mono_ns)
{
    if (!have_slot()) return -1;
    return rperf_cpu_reading_take(&table[mine.index].cpu, &mine.cpu_taken, 0, cpu_ns, mono_ns);
}

/* Slots at or past `used` were never claimed since the last clear (all
 * zero): only the used prefix is cleared, so the table's untouched pages
 * (64 bytes a slot) stay unmapped. */
static void clear_table(void)
{
    atomic_fetch_add(&live.epoch, 1);
    int n = atomic_load(&used);
    for (int i = 0; i < n; i++) {
        atomic_store(&table[i].holds, HOLDS_NOTHING);
        atomic_store(&table[i].tid, 0);
        rperf_cpu_reading_reset(&table[i].cpu);
    }
    atomic_store(&used, 0);
    atomic_store(&free_hint, 0);
    atomic_store(&main_holder.slot, -1);
    atomic_store(&other_holders, 0);
}

/* ---- delivery (timer thread) ------------------------------------------------ */

/* Timer thread: whether a direct trigger reaches main holder `since`
 * (its RESUMED time, 0: attached). While threads announced by STARTED have
 * not had their first turn, one of them may still set running_ec to itself
 * on start-up; a holder that took its GVL SETTLE_NS after the latest
 * STARTED is taken to have come after every such start-up (its
 * acquisition then set running_ec back to itself), the self-check in
 * deliver catching a start-up slower than that. */
static bool direct_trigger_exact(int64_t since, int64_t now)
{
    if (!direct_ok || mn_main || (since != 0 && now - since < GUARD_NS)) return false;
    if (rperf_engine_unsettled_threads() == 0) return true;
    return since != 0 && since - rperf_engine_last_thread_start() >= SETTLE_NS;
}

/* Timer thread only: each slot's thread CPU time at the previous check,
 * the tick of that check (ticks counts deliver's calls) and its answer. */
static int64_t slot_cpu[MAX_SLOTS];
static uint64_t slot_tick[MAX_SLOTS];
static bool slot_ran[MAX_SLOTS];
static uint64_t ticks;
static int64_t tick_now;          /* CLOCK_MONOTONIC of the current tick */
static int64_t interval_ns;

/* Timer thread: whether the holder in slot i has run (used a quarter of an
 * interval of CPU time or more) since its previous check. A holder that has
 * not is blocked: inside a call made while it holds its GVL (sleeping,
 * waiting for I/O, a lock), or just resumed. It runs no job before it runs
 * again, and a signal would only interrupt its call (EINTR): it gets none.
 * Reads the thread's CPU clock by its tid (Linux's thread CPU clock id,
 * as glibc's pthread_getcpuclockid builds it); unknown counts as running.
 * At most one read per slot and tick: a second call in the same tick gets
 * the first one's answer (a second read microseconds later would see no
 * CPU time and call a running holder blocked). In cpu mode the reading is
 * left for the holder's job too (cpu_reading.h), before the tick is
 * delivered. */
static bool holder_ran(int i)
{
    if (slot_tick[i] == ticks) return slot_ran[i];
    int32_t tid = atomic_load_explicit(&table[i].tid, memory_order_relaxed);
    if (tid <= 0) return false;
    int64_t cpu;
    if (!rperf_cpu_of_tid(tid, &cpu)) return true;
    if (cpu_clock) rperf_cpu_reading_publish(&table[i].cpu, tid, cpu, tick_now, 0);
    int64_t prev = slot_cpu[i];
    slot_cpu[i] = cpu;
    slot_tick[i] = ticks;
    slot_ran[i] = cpu - prev >= interval_ns / 4;
    return slot_ran[i];
}

/* Timer thread: holder_ran for the penalty check, which only asks about a
 * holder that took the previous tick's direct trigger and has not run its
 * job. The CPU clock read is a system call (~1.6 us here), so the ticks
 * that need no answer (the trigger was consumed: the common case) read
 * nothing. Without a check at the previous tick there is no baseline:
 * this tick takes one and answers "did not run" (no penalty, the trigger
 * stays direct, no signal: never a signal on a guess), so a trigger gone
 * astray is found one tick later. */
static bool holder_ran_since_last_tick(int i)
{
    bool fresh = slot_tick[i] + 1 == ticks;
    bool ran = holder_ran(i);
    return fresh && ran;
}

/* Timer thread: whether native thread `tid` is in the kernel's sleep states
 * right now (S or D in /proc: inside a blocking call). holder_ran says
 * whether it ran during the last interval; this says whether it still
 * does, so a holder that just entered a blocking call gets no signal
 * either. Unknown (the file cannot be read): false. */
static bool blocked_now(int32_t tid)
{
    char st = rperf_task_state((pid_t)tid);
    return st == 'S' || st == 'D';
}

/* Timer thread: the tick signal to a holder that ran during the last
 * interval and is not blocked now. Returns whether it was sent. */
static bool signal_running_holder(int i, bool ran)
{
    int32_t tid = atomic_load_explicit(&table[i].tid, memory_order_relaxed);
    if (!ran || tid <= 0 || blocked_now(tid)) return false;
    rperf_tick_signal_send(tid);
    return true;
}

/* Timer thread only. The previous direct trigger (to which holder: slot and
 * RESUMED time), and the penalty of a holder a direct trigger missed: its
 * next `pen_left` ticks go by signal; consecutive misses double it (2, 4,
 * ... 1024 ticks), a direct trigger that works resets it. */
static bool last_direct;
static int last_slot = -1, pen_slot = -1, proven_slot = -1;
static int64_t last_since, pen_since, proven_since;
static int pen_streak, pen_left;

/* Timer thread only: the main Ractor's holder at the last tick that found
 * one (slot, RESUMED time, tick number), for is_steady. */
static int steady_slot = -1;
static int64_t steady_since;
static uint64_t steady_tick;

/* Timer thread: whether main holder m (RESUMED at `since`) has held its
 * GVL since before the previous tick, with no other Ractor's holder to
 * tick (those keep a fresh draw per period): the timer thread then keeps
 * the tick's moment within the period (timer_thread.c, "Steady holders").
 * A holder that released its GVL and took it back has a new RESUMED time. */
static bool is_steady(int m, int64_t since)
{
    bool steady = steady_slot == m && steady_since == since && steady_tick + 1 == ticks &&
                  atomic_load_explicit(&other_holders, memory_order_relaxed) <= 0;
    steady_slot = m;
    steady_since = since;
    steady_tick = ticks;
    return steady;
}

static bool deliver(int64_t now)
{
    ticks++;
    tick_now = now;
    bool steady = false;
    int m = atomic_load_explicit(&main_holder.slot, memory_order_acquire);
    if (m >= 0 && atomic_load_explicit(&table[m].holds, memory_order_acquire) == HOLDS_MAIN) {
        /* Self-check: a direct trigger that no job has consumed by the next
         * tick, while the holder kept running, went to a thread that does
         * not run (running_ec naming another thread: a holder attached
         * without a RESUMED in this run, or a case the conditions above do
         * not foresee). That holder gets the penalty below (signals for 2,
         * 4, ... 1024 ticks); a new holder starts afresh. */
        int64_t since = atomic_load_explicit(&table[m].since, memory_order_relaxed);
        if (last_direct) {
            bool again = pen_slot == last_slot && pen_since == last_since;
            bool missed = rperf_engine_ticks_unconsumed() > 0;
            if (missed && last_slot == m && holder_ran_since_last_tick(m)) {
                /* astray, or only late (a holder running a long C call or
                 * GC takes no job either way; one that did not run is
                 * simply blocked): signals, doubling on repeated misses */
                pen_streak = !again ? 1 : pen_streak < 10 ? pen_streak + 1 : 10;
                pen_slot = last_slot;
                pen_since = last_since;
                pen_left = 1 << pen_streak;
            } else if (again) {
                pen_streak = 0;
            }
            /* this holder's direct trigger was taken: it is exact for as
             * long as the holder keeps its GVL (running_ec changes only at
             * an acquisition) */
            if (!missed && last_slot == m && last_since == since) {
                proven_slot = m;
                proven_since = since;
            }
        }
        bool penalised = pen_left > 0 && pen_slot == m && pen_since == since;
        if (penalised) pen_left--;
        last_direct = !penalised && direct_trigger_exact(since, now);
        last_slot = m;
        last_since = since;
        /* A holder that is blocked gets the direct trigger instead of a
         * signal: its job runs when its call returns either way. */
        if (!last_direct && !signal_running_holder(m, holder_ran(m))) last_direct = true;
        /* A holder not yet seen taking a direct trigger (attached at start,
         * just resumed, or back from a penalty) gets its CPU clock read at
         * each direct tick, so the check at the next tick has a baseline
         * and a miss is found there; a proven one is read only on a miss,
         * but in cpu mode, where its job takes the reading (holder_ran). */
        if (last_direct && (cpu_clock || !(proven_slot == m && proven_since == since)))
            (void)holder_ran(m);
        if (last_direct) rperf_engine_tick_sigsafe();
        steady = is_steady(m, since);
    }
    if (atomic_load_explicit(&other_holders, memory_order_relaxed) <= 0) return steady;
    int n = atomic_load_explicit(&used, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (!holds_other(atomic_load_explicit(&table[i].holds, memory_order_acquire))) continue;
        signal_running_holder(i, holder_ran(i));   /* blocked holding its GVL: none */
    }
    return false;
}

/* Timer thread: no thread of any Ractor holds its GVL, so a tick has no one
 * to go to (mark_holder wakes the parked tick thread when one does). */
static bool nobody_holds(void)
{
    if (atomic_load_explicit(&other_holders, memory_order_relaxed) > 0) return false;
    int m = atomic_load_explicit(&main_holder.slot, memory_order_acquire);
    return m < 0 || atomic_load_explicit(&table[m].holds, memory_order_acquire) != HOLDS_MAIN;
}

/* ---- lifecycle (GVL held) ------------------------------------------------------ */

static int holder_start(const rperf_backend_config_t *cfg, char *err, size_t errlen)
{
    mn_main = rperf_engine_config()->main_mn;   /* the host's one answer */
    direct_ok = rperf_engine_config()->direct_trigger;
    cpu_clock = cfg->cpu_clock != 0;
    clear_table();
    last_direct = false;
    interval_ns = cfg->interval_ns;
    memset(slot_cpu, 0, sizeof slot_cpu);
    memset(slot_tick, 0, sizeof slot_tick);
    memset(slot_ran, 0, sizeof slot_ran);
    ticks = 1;   /* the first tick is 2: no slot looks checked at a tick before it */
    last_slot = pen_slot = proven_slot = steady_slot = -1;
    pen_streak = pen_left = 0;
    atomic_store(&live.running, 1);
    if (rperf_timer_thread_start(cfg, deliver, nobody_holds, err, errlen) == 0) return 0;
    atomic_store(&live.running, 0);
    return -1;
}

static void holder_stop(void)
{
    atomic_store(&live.running, 0);
    rperf_timer_thread_stop();
    clear_table();
}

static void holder_after_fork_child(void)
{
    atomic_store(&live.running, 0);
    rperf_timer_thread_after_fork();   /* the timer thread does not exist here */
    clear_table();
    mine.index = -1;
}

const rperf_backend_ops_t rperf_backend_holder = {
    .version = RPERF_BACKEND_ABI_VERSION,
    .name = "holder",
    .description = "a timer thread delivers each tick to every Ractor's GVL holder: the main "
                   "Ractor's by a direct trigger where that is exact, others by a signal",
    .start = holder_start,
    .stop = holder_stop,
    .after_fork_child = holder_after_fork_child,
    .thread_resumed = holder_resumed,
    .thread_suspended = holder_suspended,
    .thread_identified = holder_identified,
    .thread_attached = holder_attached,
    .tick_cpu = holder_tick_cpu,
    .job_ran = holder_job_ran,
    /* a C call that keeps the GVL (the late rule's case) is inside a
     * steady stretch, where the ticks are one period apart */
    .ticks = RPERF_TICKS_PERIODIC,
};
