/*
 * signal.c — the "signal" backend: one POSIX timer per native thread
 * (timer_create(CLOCK_MONOTONIC) with SIGEV_THREAD_ID to that thread), armed
 * only while the thread holds its GVL (RESUMED -> SUSPENDED). The tick is a
 * real-time signal delivered to the very thread that runs Ruby code; the
 * handler only triggers the sampling job, which then runs on that thread,
 * inside its own Ractor. No extra thread is woken per sample.
 *
 * SUSPENDED disarms the timer and keeps the time left to the next tick;
 * RESUMED re-arms with that remainder, so ticks follow on-GVL time and a
 * thread that switches often is not starved of ticks.
 *
 * In cpu mode the handler also reads the thread's CPU clock at each tick
 * and its job takes that reading instead of making its own (tick_cpu)
 * when it runs right after the tick.
 *
 * The handler lives in tick_signal.c (shared with the nanosleep backend);
 * at start every other task gets one bootstrap signal so that threads
 * already holding a GVL (e.g. a Ractor spinning alone) register themselves.
 * A GVL holder of a Ractor with no number yet is marked `unnumbered` and
 * gets the tick signal from job runs until it has run the job itself
 * (new_marks.h; docs/backends.md, "Numbered at the first turn").
 *
 * Contexts: start/stop run with the GVL held;
 * thread_resumed/thread_suspended run in thread hooks on the thread itself
 * (no Ruby API); job_ran in the sampling job and thread_identified there
 * or at start (own context, GVL held; the registry lock and tgkill only,
 * and the registry lock is never held while waiting for a GVL); the key
 * destructor runs when a native thread exits;
 * after_fork_child and the atfork handlers run inside fork().
 *
 * Stop: timers are deleted first, then tick_signal.c restores the action
 * (through SIG_IGN, which discards instances still pending on any thread).
 */
#include "new_marks.h"
#include "rperf_backend.h"
#include "rperf_core.h"
#include "tick_signal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct nt_timer {
    timer_t timer;
    uint64_t gen;              /* run generation the timer belongs to */
    struct timespec left;      /* remainder kept across SUSPENDED (this
                                  struct is in static TLS: kept small) */
    struct nt_timer *next;     /* registry of live timers (under lock) */
    int registered;
    int32_t tid;               /* the native thread's kernel tid */
    /* holds its GVL, and its Ractor had no number at its RESUMED: job runs
     * signal it (signal_unnumbered); written by the thread itself */
    _Atomic int unnumbered;
} nt_timer_t;

/* initial-exec TLS: see core/thread_state.c for why. */
static _Thread_local nt_timer_t tls __attribute__((tls_model("initial-exec")));

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static nt_timer_t *timers;         /* under lock */
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Atomic int running;
static _Atomic uint64_t gen;
static int64_t interval_ns;
static rperf_new_marks_t new_marks;   /* holders marked unnumbered */

/* ---- per-native-thread timers (thread hooks; no Ruby API) ---------------- */

static void unregister_locked(nt_timer_t *t)
{
    for (nt_timer_t **p = &timers; *p; p = &(*p)->next) {
        if (*p == t) {
            *p = t->next;
            break;
        }
    }
    t->registered = 0;
}

/* The native thread exits: delete its timer (its TLS dies with it). */
static void on_thread_exit(void *arg)
{
    nt_timer_t *t = arg;
    pthread_mutex_lock(&lock);
    if (t->registered) {
        timer_delete(t->timer);
        unregister_locked(t);
    }
    pthread_mutex_unlock(&lock);
}

static void make_key(void) { pthread_key_create(&exit_key, on_thread_exit); }

static struct itimerspec period(void)
{
    struct itimerspec its;
    its.it_interval.tv_sec = (time_t)(interval_ns / 1000000000LL);
    its.it_interval.tv_nsec = (long)(interval_ns % 1000000000LL);
    its.it_value = its.it_interval;
    return its;
}

static int ensure_timer(nt_timer_t *t)
{
    uint64_t g = atomic_load(&gen);
    if (t->registered && t->gen == g) return 0;
    pthread_once(&key_once, make_key);
    struct sigevent sev;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = rperf_tick_signal_number();
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    pthread_mutex_lock(&lock);
    if (t->registered) {               /* from an earlier run */
        timer_delete(t->timer);
        unregister_locked(t);
    }
    if (!atomic_load(&running) || timer_create(CLOCK_MONOTONIC, &sev, &t->timer) != 0) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    t->gen = g;
    t->tid = (int32_t)sev._sigev_un._tid;
    t->registered = 1;
    t->next = timers;
    timers = t;
    memset(&t->left, 0, sizeof(t->left));
    pthread_mutex_unlock(&lock);
    pthread_setspecific(exit_key, t);
    return 0;
}

static void thread_resumed(void)
{
    nt_timer_t *t = &tls;
    if (!atomic_load_explicit(&running, memory_order_relaxed)) return;
    if (ensure_timer(t) < 0) return;
    struct itimerspec its = period();
    if (t->left.tv_sec || t->left.tv_nsec) its.it_value = t->left;
    timer_settime(t->timer, 0, &its, NULL);
    /* a Ractor not known yet: its RESUMED asked for the job (ruby/hooks.c),
     * which another thread's run may take; marked after the timer is set */
    rperf_thread_t *pt = rperf_current_thread_sigsafe();
    if (pt && rperf_thread_ractor(pt) == 0) {
        atomic_store_explicit(&t->unnumbered, 1, memory_order_release);
        rperf_new_marks_add(&new_marks);
    }
}

static void thread_suspended(void)
{
    nt_timer_t *t = &tls;
    if (atomic_load_explicit(&t->unnumbered, memory_order_relaxed))
        atomic_store_explicit(&t->unnumbered, 0, memory_order_relaxed);
    if (!t->registered || t->gen != atomic_load(&gen)) return;
    struct itimerspec off;
    memset(&off, 0, sizeof(off));
    /* disarm and keep the time left to the next tick, in one call */
    struct itimerspec old;
    if (timer_settime(t->timer, 0, &off, &old) == 0) t->left = old.it_value;
}

/* ---- Ractors with no number yet (own context, GVL held) ------------------- */

/* The tick signal to every other registered thread marked unnumbered (it
 * holds its GVL: the handler asks for the job on that very thread); how
 * many were sent. The registry lock is taken by hooks and thread exits,
 * none of which waits for a GVL while holding it. */
static int signal_unnumbered(void)
{
    int sent = 0;
    uint64_t g = atomic_load(&gen);
    pthread_mutex_lock(&lock);
    for (nt_timer_t *t = timers; t; t = t->next) {
        if (t == &tls || t->gen != g || t->tid <= 0) continue;
        if (!atomic_load_explicit(&t->unnumbered, memory_order_acquire)) continue;
        rperf_tick_signal_send(t->tid);
        sent++;
    }
    pthread_mutex_unlock(&lock);
    return sent;
}

/* A job just numbered this thread: that run emptied the VM-global job
 * bitset, maybe taking another new thread's request. */
static void thread_identified(void)
{
    nt_timer_t *t = &tls;
    if (atomic_load_explicit(&t->unnumbered, memory_order_relaxed))
        atomic_store_explicit(&t->unnumbered, 0, memory_order_relaxed);
    if (atomic_load_explicit(&running, memory_order_relaxed)) (void)signal_unnumbered();
}

/* Every job run: while an unnumbered holder may be left, signal them all
 * (this run may have taken the bit such a thread set, numbering nobody). */
static void job_ran(void)
{
    if (atomic_load_explicit(&running, memory_order_relaxed))
        rperf_new_marks_resignal(&new_marks, signal_unnumbered);
}

/* ---- fork (pthread_atfork) ---------------------------------------------------
 * The registry lock is held across fork(), so the child never inherits it
 * locked by another thread (its first start would deadlock), and made anew
 * in the child. */

static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void) { pthread_mutex_init(&lock, NULL); }
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* ---- lifecycle (GVL held) -------------------------------------------------- */

static int sig_start(const rperf_backend_config_t *cfg, char *err, size_t errlen)
{
    pthread_once(&atfork_once, register_atfork);
    interval_ns = cfg->interval_ns;
    if (rperf_tick_signal_install(cfg->signo, err, errlen) < 0) return -1;
    rperf_tick_signal_read_cpu(cfg->cpu_clock != 0);
    atomic_fetch_add(&gen, 1);
    atomic_store(&running, 1);
    if (cfg->bootstrap) rperf_tick_signal_bootstrap(cfg->bootstrap_skip, cfg->bootstrap_nskip, 0);
    return 0;
}

static void sig_stop(void)
{
    atomic_store(&running, 0);
    pthread_mutex_lock(&lock);
    while (timers) {
        nt_timer_t *t = timers;
        timer_delete(t->timer);
        unregister_locked(t);
    }
    pthread_mutex_unlock(&lock);
    atomic_fetch_add(&gen, 1);
    rperf_tick_signal_restore();
}

static void sig_after_fork_child(void)
{
    /* Timers are not inherited and the child's pending set is empty; the
     * registry's entries point at other threads' TLS: forget them. */
    atomic_store(&running, 0);
    timers = NULL;
    tls.registered = 0;
    atomic_store(&tls.unnumbered, 0);
    atomic_fetch_add(&gen, 1);
    rperf_tick_signal_after_fork();
}

const rperf_backend_ops_t rperf_backend_signal = {
    .version = RPERF_BACKEND_ABI_VERSION,
    .name = "signal",
    .description = "per-thread POSIX timers deliver a real-time signal to the thread holding the GVL",
    .start = sig_start,
    .stop = sig_stop,
    .after_fork_child = sig_after_fork_child,
    .thread_resumed = thread_resumed,
    .thread_suspended = thread_suspended,
    .thread_identified = thread_identified,
    .job_ran = job_ran,
    .tick_cpu = rperf_tick_signal_tick_cpu,   /* cpu mode: read by the handler */
    .ticks = RPERF_TICKS_PERIODIC,            /* each thread's timer runs on its on-GVL time */
};
