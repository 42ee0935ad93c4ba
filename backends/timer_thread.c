/*
 * timer_thread.c — the tick thread of the timer-thread backends (holder,
 * nanosleep): sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to
 * absolute deadlines; while ticking it wakes at least every 50 ms to notice
 * a stop.
 *
 * The deadlines are jittered within a fixed grid: one tick at a uniformly
 * drawn moment of each period (next_deadline), so the rate is the one
 * asked for and nothing drifts. A plain grid would be biased here: a tick
 * that lands while a thread is off its GVL (blocked in IO, a Queue, a
 * join) does not sample it, and its next sample, exactly one period later,
 * weighs all its on-GVL time since its previous one. When the thread's GVL
 * gaps recur with its work (work, wait, work, ...), where that absorbing
 * sample lands is tied to the gap: the code right after each wait got a
 * third to a half of its share on the grid (tests/ruby/test_modes.rb,
 * test_work_after_each_gvl_wait_keeps_its_share). A draw per period takes
 * the phase away from the wait without the exponential gaps of a Poisson
 * schedule, whose spread made every sample's weight vary: the time from a
 * moment to the tick before it averages 7/12 of a period here, a whole
 * period with Poisson ticks, and the error at each change of stack
 * follows it. Its one known bias: code shorter than a period right after
 * a wait of two periods or more keeps ~0.8 of its share in a simulation,
 * as on a grid (docs/backends.md, "Tick timing"). A period whose tick is
 * more than a period behind when the thread wakes is counted in
 * timer_overruns and the schedule restarts from now.
 *
 * Steady holders: a thread that has held its GVL across a whole period
 * (from before the previous tick to this one: the backend's deliver says
 * so) has no gap to lock a phase onto while it keeps holding it, so its
 * next tick keeps this tick's moment within the period: while a thread
 * holds its GVL without a break its ticks are exactly one period apart (a
 * grid on its own on-GVL time, what :signal's per-thread timers give), and
 * each new draw comes with a change of holder or a gap. A tick that goes
 * to nobody, or to a holder that took its GVL since the previous tick, or
 * a whole period missed, draws again.
 *
 * The thread blocks every signal (process-directed signals must go to
 * Ruby's threads, and its sleep must not be cut short), and asks the
 * scheduler for the shortest time slice, so that on a CPU it shares with
 * a busy application thread it still wakes on time (ask_short_slice), and
 * sleeps with no timer slack, so that it wakes at its deadlines and not up
 * to 50 us after them (drop_timer_slack). Start returns only
 * once the thread runs: a new thread can otherwise wait for a CPU behind
 * the caller, which goes on computing, for a whole time slice (measured:
 * 100 ms under load), and a short run got no tick at all.
 *
 * Parking: a tick that finds nothing to deliver (no thread of any Ractor
 * holds a GVL: an idle server, every thread blocked) costs this VM a timer
 * interrupt and a wake-up all the same, ~10-20 us of CPU each, 1-2 % of a
 * core at 1 kHz for a process that does nothing. After PARK_AFTER such
 * ticks in a row spanning PARK_IDLE_NS (and no bootstrap re-send pending:
 * those come from this thread) the thread waits on a
 * futex instead of a deadline; the backend's next GVL acquisition calls
 * rperf_timer_thread_wake, which releases it (one futex system call, only
 * when the thread is parked: ~25 us on a VM, which the backend reports with
 * rperf_resume_was_slow so that it counts as the waker's GVL wait), and
 * ticking restarts with a fresh period from the wake-up (next_deadline).
 * No sample is lost: a tick with no holder delivers nothing, and blocked
 * time is recorded when a thread resumes. Missed-wake safety (Dekker): the
 * parker stores `parked`, fences, then asks idle(); the waker records its
 * holder, fences, then loads `parked`; one of them sees the other (with
 * membarrier() as the parker's fence and a compiler barrier as the
 * waker's where the kernel offers it, see heavy_barrier). The
 * futex wait also ends after PARK_NAP_S as a watchdog; stop wakes it.
 *
 * It also owns the tick signal for these backends (install at start, the
 * start-up bootstrap, restore at stop and in a fork child): their holders
 * of other Ractors get ticks as that signal. And it is the engine's ticker
 * (rperf_engine_ticker_on while it runs): after each tick it makes the
 * aggregation worker's wake-up that a producer asked for
 * (rperf_engine_ticker_poke), so that futex call is not made on the
 * application's thread inside its sampling job.
 *
 * Contexts: tick_main runs on the tick thread (no Ruby API: the deliver
 * function may only tick the engine and send signals; the poke locks the
 * worker's mutex, which no holder keeps while waiting for this thread);
 * start/stop with the GVL held; after_fork inside fork() in the child.
 */
#include "timer_thread.h"

#include "rperf_core.h"
#include "tick_signal.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#define NSEC 1000000000LL
#define MAX_NAP_NS 50000000LL     /* re-check `running` at least every 50 ms */
#define PARK_AFTER 2              /* idle ticks in a row before parking, */
#define PARK_IDLE_NS 10000000LL   /* spanning 10 ms at least */
#define PARK_NAP_S 1              /* a parked thread's watchdog */

static pthread_t thr;
static int started;
static _Atomic int running;
static int64_t period;
static rperf_deliver_fn deliver_fn;
static rperf_idle_fn idle_fn;
/* futex word: 1 while the tick thread is parked (or about to be). Linux's
 * futex takes the address of a 32-bit int; C11 gives _Atomic uint32_t the
 * same size and representation on every target Linux supports here. */
static _Atomic uint32_t parked;
static sem_t up;                  /* posted once the thread runs */
static int32_t tick_tid;          /* its kernel tid, set before it posts up */

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * NSEC + t.tv_nsec;
}

/* A full barrier between a store and a later load (the Dekker pair of park
 * and wake). GCC's ThreadSanitizer rejects atomic_thread_fence (-Wtsan,
 * an error under -Werror); TSan builds, which are test builds, use a
 * sequentially consistent read-modify-write instead (a locked instruction:
 * a full barrier on x86). */
#if defined(__SANITIZE_THREAD__)
static void full_barrier(void)
{
    static _Atomic int dummy;
    atomic_fetch_add(&dummy, 0);
}
#else
static void full_barrier(void) { atomic_thread_fence(memory_order_seq_cst); }
#endif

/* The Dekker pair is lopsided: the wake side runs at every GVL acquisition
 * (inside Ruby's scheduler lock), the park side a few times a second at
 * most. With the process registered for MEMBARRIER_CMD_PRIVATE_EXPEDITED
 * (Linux 4.14+), the park side's barrier is membarrier(), which makes
 * every running thread of the process execute a full barrier, and the wake
 * side's is a compiler barrier only: its store then drains in the
 * background instead of stalling the fence (the holder slot's line is
 * shared with the tick thread, so that store misses). Registered at each
 * start (GVL held, before the tick thread exists); where it fails (old
 * kernel, a seccomp filter) or under TSan (which does not know membarrier)
 * both sides keep full barriers. */
static _Atomic int asymmetric;

static void register_membarrier(void)
{
#if defined(__SANITIZE_THREAD__)
    atomic_store(&asymmetric, 0);
#else
    long rc = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0);
    atomic_store(&asymmetric, rc == 0);
#endif
}

/* Park side. False: no barrier could be made (the caller must not park). */
static bool heavy_barrier(void)
{
    if (!atomic_load_explicit(&asymmetric, memory_order_relaxed)) {
        full_barrier();
        return true;
    }
    return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

/* Wake side. */
static void light_barrier(void)
{
    if (atomic_load_explicit(&asymmetric, memory_order_relaxed))
        atomic_signal_fence(memory_order_seq_cst);
    else
        full_barrier();
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

/* Tick thread: wait for rperf_timer_thread_wake (or the watchdog, or a
 * stop) unless a holder appeared meanwhile. */
static void park(void)
{
    atomic_store(&parked, 1);
    if (heavy_barrier() && atomic_load(&running) && idle_fn()) {
        struct timespec nap = { .tv_sec = PARK_NAP_S, .tv_nsec = 0 };
        futex(&parked, FUTEX_WAIT_PRIVATE, 1, &nap);   /* EAGAIN, EINTR, timeout: fine */
    }
    atomic_store(&parked, 0);
}

/* Tick thread: the deadline of the period that starts at `slot`, a
 * uniformly drawn moment within it (xorshift64*, 53 bits). The generator
 * is the tick thread's alone, seeded at each start from the clock and the
 * pid (seed_ticks), so forked workers that start profiling together do not
 * tick in step. */
static uint64_t tick_rng;

static void seed_ticks(void)
{
    tick_rng = ((uint64_t)mono_ns() ^ ((uint64_t)getpid() << 32)) | 1;
}

static int64_t tick_offset;       /* the last draw: the deadline's place in its period */

static int64_t next_deadline(int64_t slot)
{
    tick_rng ^= tick_rng >> 12;
    tick_rng ^= tick_rng << 25;
    tick_rng ^= tick_rng >> 27;
    uint64_t x = tick_rng * 0x2545F4914F6CDD1DULL;
    double u = (double)(x >> 11) * (1.0 / 9007199254740992.0);   /* [0, 1) */
    tick_offset = (int64_t)(u * (double)period);
    return slot + tick_offset;
}

bool rperf_timer_thread_wake(void)
{
    light_barrier();
    if (atomic_load_explicit(&parked, memory_order_relaxed) == 0) return false;
    if (atomic_exchange(&parked, 0) != 1) return false;
    futex(&parked, FUTEX_WAKE_PRIVATE, 1, NULL);
    return true;
}

/* The first version of the kernel's struct sched_attr (SCHED_ATTR_SIZE_VER0,
 * 48 bytes; glibc 2.36 declares neither it nor the calls). */
struct sched_attr_v0 {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
};

#define TICK_SLICE_NS 100000ULL   /* the shortest slice Linux grants */

/* Tick thread: ask the scheduler for a short time slice. Since Linux 6.12
 * a SCHED_OTHER thread's sched_runtime is its slice, and a thread with a
 * shorter slice than the running one preempts it when it wakes up. Without
 * it, a tick thread that shares a CPU with a busy application thread (the
 * futex wake-up of a park, from that thread, can place it there) waits for
 * the end of the application's slice, up to the scheduler tick: its ticks
 * landed when that thread blocked, and short bursts of work after an idle
 * gap were never sampled. bench/wake_latency.c measures both (this
 * project's VM: median 166 us, worst 2 ms; with the short slice 8 and
 * 89 us). Policy and nice
 * are kept (read first; a niced process stays niced; a thread of another
 * policy is left alone); older kernels
 * ignore the field; failure leaves the default slice. */
static void ask_short_slice(void)
{
    struct sched_attr_v0 a;
    memset(&a, 0, sizeof a);
    if (syscall(SYS_sched_getattr, 0, &a, (unsigned)sizeof a, 0) != 0) return;
    if (a.sched_policy != SCHED_OTHER) return;   /* batch, idle, real-time: theirs */
    a.size = sizeof a;
    a.sched_flags = 0;
    a.sched_runtime = TICK_SLICE_NS;
    (void)syscall(SYS_sched_setattr, 0, &a, 0);
}

/* Tick thread: sleep to the deadlines themselves. Linux ends a normal
 * thread's timed sleep anywhere up to its timer slack after the deadline
 * (50 us by default, so that wake-ups coalesce); a lone timer fires at the
 * end of that window. On a 100 us period that is half a period: measured
 * on this project's VM, a sleep to an absolute deadline every 100 us woke
 * 69-72 us late at the median with the default slack, 24 us with 1 ns
 * (the VM's own cost of a timer interrupt). With the default, a moment
 * drawn early in its period has often passed before the tick thread
 * sleeps again: at 10 kHz 27 % of :nanosleep's ticks on 64 busy threads
 * come back to back with the one before, often merged into its sample,
 * and the schedule is not the one drawn. 1 ns is the least prctl takes (0 means
 * the default); the slack is per thread: the application's keep theirs. */
static void drop_timer_slack(void) { (void)prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); }

static void *tick_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "rperf-timer", 0, 0, 0);   /* for top -H, ps -L, gdb */
    tick_tid = (int32_t)syscall(SYS_gettid);      /* the bootstrap leaves it out */
    ask_short_slice();
    drop_timer_slack();
    seed_ticks();
    int64_t slot = mono_ns();              /* the current period's start */
    int64_t deadline = next_deadline(slot);
    int idle_ticks = 0;
    int64_t idle_since = 0;
    sem_post(&up);
    while (atomic_load(&running)) {
        int64_t now = mono_ns();
        if (now < deadline) {
            int64_t until = deadline - now > MAX_NAP_NS ? now + MAX_NAP_NS : deadline;
            struct timespec t = { .tv_sec = (time_t)(until / NSEC), .tv_nsec = (long)(until % NSEC) };
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);   /* EINTR: loop */
            continue;
        }
        if (!atomic_load(&running)) break;
        bool steady = deliver_fn(now);
        rperf_engine_ticker_poke();
        rperf_tick_signal_bootstrap_resend();
        /* the schedule goes on period by period (the wake-up's latency
         * does not lengthen it), or from now when a whole period late; a
         * steady holder's next tick is one period after this one */
        slot += period;
        int64_t missed = (now - slot) / period;
        if (missed > 0) {
            rperf_engine_count_overruns((uint64_t)missed);
            slot = now;
            steady = false;
        }
        deadline = steady ? slot + tick_offset : next_deadline(slot);
        if (idle_fn && idle_fn() && !rperf_tick_signal_bootstrap_pending()) {
            if (idle_ticks++ == 0) idle_since = now;
            if (idle_ticks >= PARK_AFTER && now - idle_since >= PARK_IDLE_NS) {
                park();
                idle_ticks = 0;
                slot = mono_ns();
                deadline = next_deadline(slot);
            }
        } else {
            idle_ticks = 0;
        }
    }
    return NULL;
}

int rperf_timer_thread_start(const rperf_backend_config_t *cfg, rperf_deliver_fn deliver,
                             rperf_idle_fn idle, char *err, size_t errlen)
{
    if (rperf_tick_signal_install(cfg->signo, err, errlen) < 0) return -1;
    period = cfg->interval_ns;
    deliver_fn = deliver;
    idle_fn = idle;
    register_membarrier();
    atomic_store(&parked, 0);
    atomic_store(&running, 1);
    sem_init(&up, 0, 0);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thr, NULL, tick_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        atomic_store(&running, 0);
        sem_destroy(&up);
        rperf_tick_signal_restore();
        snprintf(err, errlen, "rperf: failed to create the timer thread: %s", strerror(rc));
        return -1;
    }
    while (sem_wait(&up) != 0 && errno == EINTR) {
    }
    sem_destroy(&up);   /* glibc: safe once sem_wait returned */
    started = 1;
    rperf_engine_ticker_on(true);
    if (cfg->bootstrap) rperf_tick_signal_bootstrap(cfg->bootstrap_skip, cfg->bootstrap_nskip, tick_tid);
    return 0;
}

void rperf_timer_thread_stop(void)
{
    rperf_engine_ticker_on(false);   /* a wake asked meanwhile is made here */
    atomic_store(&running, 0);
    rperf_timer_thread_wake();
    if (started) pthread_join(thr, NULL);
    started = 0;
    rperf_tick_signal_restore();
}

void rperf_timer_thread_after_fork(void)
{
    atomic_store(&running, 0);
    atomic_store(&parked, 0);
    atomic_store(&asymmetric, 0);   /* the next start registers the child */
    started = 0;
    rperf_tick_signal_after_fork();
}

bool rperf_timer_thread_running(void) { return atomic_load_explicit(&running, memory_order_relaxed) != 0; }
