/*
 * tick_signal.c — the real-time "tick" signal both built-in backends use:
 * the handler, its installation/restoration and the bootstrap of threads
 * that were already running when profiling started.
 *
 * The handler runs on the native thread the signal was aimed at:
 *  - that thread runs a Ruby thread the engine knows (the engine's
 *    per-native-thread `cur`): it is a tick, and the sampling job is
 *    triggered on this very thread, inside its own Ractor;
 *  - otherwise, if the signal was sent with tgkill (si_code SI_TKILL: the
 *    bootstrap, or the nanosleep backend reaching another Ractor), the host
 *    is asked to trigger a job that registers the thread, but only if this
 *    native thread runs Ruby code at all; the bootstrap's signal is re-sent
 *    until the thread answers (see "bootstrap re-sends" below);
 *  - a timer signal (SI_TIMER) that arrives after the thread gave up its
 *    GVL is dropped: it must not be charged to whatever runs here next.
 *
 * Contexts: on_signal is a signal handler (async-signal-safe only: TLS
 * reads and writes, atomics, clock_gettime, the engine's tick/register,
 * errno saved); install, restore, read_cpu and bootstrap run with the GVL
 * held; tick_cpu in the sampling job (own); send and rperf_task_state
 * run on a backend thread (or in bootstrap); bootstrap_resend in any
 * context, the handler included (atomics, tgkill, the monotonic clock);
 * after_fork inside fork() in the child.
 *
 * Restore: the action is first set to SIG_IGN, which discards instances
 * still pending on any thread (POSIX sigaction()), and only then is the
 * previous action put back, so no late tick meets the default (fatal)
 * action.
 */
#include "tick_signal.h"

#include "cpu_reading.h"
#include "rperf_core.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic int active;
static _Atomic bool read_cpu;      /* cpu mode on :signal: read the clock at each tick */
static int signo;
static struct sigaction old_action;
static int installed;

/* ---- bootstrap re-sends --------------------------------------------------
 * The job a bootstrap signal triggers is one bit in Ruby's VM-global job
 * bitset: any thread that flushes first runs it (in its own Ractor), and
 * the signalled thread then finds nothing to run. A thread that holds its
 * GVL since before the start and never switches has no other way in (no
 * RESUMED), so it would stay unsampled for the whole run. Every task the
 * bootstrap signalled is therefore signalled again, at most every
 * BOOT_GAP_NS, until its own handler sees it known to the engine (or not
 * running Ruby code at all), for at most BOOT_ROUNDS rounds. The re-sends
 * come from whatever drives the backend (the timer thread; under the
 * signal backend the tick handler of any thread), with atomics, tgkill and
 * the monotonic clock only. */
#define BOOT_MAX 64
#define BOOT_ROUNDS 50
#define BOOT_GAP_NS 2000000LL

static _Atomic int32_t boot_tid[BOOT_MAX];   /* 0: free or done */
static _Atomic int boot_left;                /* entries still waiting */
static _Atomic int boot_rounds;
static _Atomic int64_t boot_next_ns;
static _Atomic int resending;                /* handlers inside a re-send */

/* Test seam (tests/unit/test_tick_signal.c): called by a handler inside its
 * re-send section, to hold it there while the test forks. NULL otherwise. */
void (*volatile rperf__tick_signal_resend_hook)(void);

static int64_t mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void boot_clear(void)
{
    atomic_store(&boot_left, 0);
    for (int i = 0; i < BOOT_MAX; i++) atomic_store_explicit(&boot_tid[i], 0, memory_order_relaxed);
}

/* signal: this native thread answered; its entry, if any, is done. */
static void boot_done_here(void)
{
    int32_t me = rperf_native_tid();
    for (int i = 0; i < BOOT_MAX; i++) {
        int32_t t = me;
        if (atomic_load_explicit(&boot_tid[i], memory_order_relaxed) != me) continue;
        if (atomic_compare_exchange_strong(&boot_tid[i], &t, 0)) {
            atomic_fetch_sub(&boot_left, 1);
            return;
        }
    }
}

void rperf_tick_signal_bootstrap_resend(void)
{
    if (atomic_load_explicit(&boot_left, memory_order_relaxed) <= 0) return;
    int64_t now = mono_now(), next = atomic_load(&boot_next_ns);
    if (now < next || !atomic_compare_exchange_strong(&boot_next_ns, &next, now + BOOT_GAP_NS))
        return;   /* not yet, or another thread sends this round */
    if (atomic_fetch_add(&boot_rounds, 1) >= BOOT_ROUNDS) {
        boot_clear();
        return;
    }
    for (int i = 0; i < BOOT_MAX; i++) {
        int32_t t = atomic_load_explicit(&boot_tid[i], memory_order_relaxed);
        if (t) rperf_tick_signal_send((pid_t)t);
    }
}

bool rperf_tick_signal_bootstrap_pending(void)
{
    return atomic_load_explicit(&boot_left, memory_order_relaxed) > 0;
}

/* ---- the CPU clock at the tick (cpu mode, timer ticks) ---------------------
 * A cpu-mode job needs the thread's CPU clock. With read_cpu set the
 * handler reads it at each timer tick, and a job that runs right after
 * its tick takes that reading instead of making its own
 * (core/thread_state.c, job_native_cpu): one system call per sample either
 * way, made in the handler. It keeps the latest in this native thread's
 * slot (cpu_reading.h; writer: the handler, reader: the job on the same
 * native thread, which a handler may interrupt: the sequence number makes
 * it give up then). A reading belongs to the run it was made in (its tag):
 * one left from an earlier run, or from the parent in a fork child (where
 * the thread CPU clock starts again from zero, so the engine's
 * monotonicity check cannot tell), is never handed out. */
static _Thread_local rperf_cpu_reading_t reading __attribute__((tls_model("initial-exec")));
static _Thread_local uint32_t reading_taken __attribute__((tls_model("initial-exec")));
static _Atomic uint32_t reading_run;   /* bumped at each start and in a fork child */

static void keep_reading(void)
{
    struct timespec c, m;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c) != 0) return;
    clock_gettime(CLOCK_MONOTONIC, &m);
    rperf_cpu_reading_publish(&reading, rperf_native_tid(),
                              (int64_t)c.tv_sec * 1000000000LL + c.tv_nsec,
                              (int64_t)m.tv_sec * 1000000000LL + m.tv_nsec,
                              atomic_load_explicit(&reading_run, memory_order_relaxed));
}

void rperf_tick_signal_read_cpu(bool on)
{
    atomic_fetch_add(&reading_run, 1);
    atomic_store(&read_cpu, on);
}

int rperf_tick_signal_tick_cpu(int64_t *cpu_ns, int64_t *mono_ns)
{
    return rperf_cpu_reading_take(&reading, &reading_taken,
                                  atomic_load_explicit(&reading_run, memory_order_relaxed), cpu_ns,
                                  mono_ns);
}

static void on_signal(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    int saved = errno;
    if (atomic_load_explicit(&active, memory_order_relaxed)) {
        bool tkill = info && info->si_code == SI_TKILL;
        bool waiting = atomic_load_explicit(&boot_left, memory_order_relaxed) > 0;
        if (rperf_current_thread_sigsafe() != NULL) {
            if (!tkill && atomic_load_explicit(&read_cpu, memory_order_relaxed)) keep_reading();
            rperf_engine_tick_sigsafe();
            if (waiting && tkill) boot_done_here();
        } else if (tkill && !rperf_engine_register_sigsafe() && waiting) {
            boot_done_here();   /* no Ruby thread here now: a later one meets RESUMED */
        }
    }
    if (atomic_load_explicit(&boot_left, memory_order_relaxed) > 0) {
        /* counted, so that restore never puts the old action back while a
         * handler may still send (a late send would meet SIG_DFL: fatal) */
        atomic_fetch_add(&resending, 1);
        if (rperf__tick_signal_resend_hook) rperf__tick_signal_resend_hook();
        if (atomic_load(&active)) rperf_tick_signal_bootstrap_resend();
        atomic_fetch_sub(&resending, 1);
    }
    errno = saved;
}

int rperf_tick_signal_install(int sig, char *err, size_t errlen)
{
    signo = sig > 0 ? sig : SIGRTMIN + 8;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_signal;
    /* SA_ONSTACK: on a thread that has an alternate signal stack (Ruby's
     * threads do), the handler runs there; the bootstrap signals every
     * runnable task, also threads of other runtimes with small stacks */
    sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signo, &sa, &old_action) != 0) {
        snprintf(err, errlen, "rperf: failed to install the handler for signal %d: %s", signo,
                 strerror(errno));
        return -1;
    }
    installed = 1;
    atomic_store(&active, 1);
    return 0;
}

static void restore_action(void)
{
    if (!installed) return;
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(signo, &ign, NULL);
    sigaction(signo, &old_action, NULL);
    installed = 0;
}

void rperf_tick_signal_restore(void)
{
    atomic_store(&active, 0);
    atomic_store(&read_cpu, false);
    boot_clear();
    while (atomic_load(&resending) > 0) sched_yield();   /* a few tgkills at most */
    restore_action();
}

/* The child has none of the parent's other threads: a handler that was
 * inside its re-send section on one of them at the fork never leaves it
 * here, so its count is dropped (restore would wait for it for ever). */
void rperf_tick_signal_after_fork(void)
{
    atomic_store(&active, 0);
    atomic_store(&resending, 0);
    atomic_store(&read_cpu, false);
    atomic_fetch_add(&reading_run, 1);
    boot_clear();
    restore_action();
}

int rperf_tick_signal_number(void) { return signo; }

int rperf_tick_signal_send(pid_t tid)
{
    return (int)syscall(SYS_tgkill, (pid_t)getpid(), tid, signo);
}

char rperf_task_state(pid_t tid) { return rperf_proc_state(0, (long)tid, NULL, NULL); }

/* Is task `tid` runnable (state R)? A thread that holds a GVL and runs Ruby
 * code is; a sleeping one (Ruby's timer thread in epoll_wait, idle M:N
 * native threads, threads blocked outside the GVL) is not and will see
 * RESUMED before it runs Ruby code again. The profiler's worker, just
 * created and often still runnable at the scan, is not a Ruby thread:
 * named by its creator before the scan (core/worker.c), it is left out
 * (no status read, no signal; its handler would find no Ruby thread). */
static bool task_runnable(long tid)
{
    bool worker = false;
    return rperf_proc_state(0, tid, RPERF_WORKER_THREAD_NAME, &worker) == 'R' && !worker;
}

/* Does task `tid` block the tick signal (SigBlk in /proc/self/task/<tid>/
 * status)? Ruby threads never do; a helper thread that blocks every signal
 * (the backend's own timer thread, many libraries' workers) never answers,
 * so re-sending would only queue up to BOOT_ROUNDS pending instances there:
 * it gets the one bootstrap signal, as before re-sends existed. Unknown:
 * false. GVL held, at start. */
static bool task_blocks_signal(long tid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char *line = strstr(buf, "\nSigBlk:");
    if (!line) return false;
    unsigned long long mask = strtoull(line + 8, NULL, 16);
    return signo >= 1 && signo <= 64 && (mask >> (signo - 1) & 1ULL);
}

static int cmp_tid(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Tasks in `skip` (sorted) are left out without reading their state: the
 * main Ractor's threads, none of which can hold a GVL now (the caller of
 * start holds theirs), so a process with many parked threads pays no /proc
 * read per thread (~12 us each on a VM). */
void rperf_tick_signal_bootstrap(const int32_t *skip, size_t nskip, int32_t helper)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    boot_clear();
    atomic_store(&boot_rounds, 0);
    atomic_store(&boot_next_ns, mono_now() + BOOT_GAP_NS);
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || tid <= 0 || (pid_t)tid == self || tid == helper) continue;
        int32_t key = (int32_t)tid;
        if (nskip && bsearch(&key, skip, nskip, sizeof(*skip), cmp_tid)) continue;
        if (!task_runnable(tid)) continue;
        if (n < BOOT_MAX && !task_blocks_signal(tid)) {   /* recorded before the send: its handler may answer at once */
            atomic_store(&boot_tid[n++], key);
            atomic_fetch_add(&boot_left, 1);
        }
        rperf_tick_signal_send((pid_t)tid);   /* a task that exited meanwhile: ESRCH */
    }
    closedir(d);
}
