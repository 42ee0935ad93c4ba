/*
 * floor.c — the control program of bench/overhead.rb: what one bare timer
 * tick costs on this machine, with no Ruby and no profiler. It runs a fixed
 * integer loop on its main thread while ticks arrive at a given frequency,
 * delivered one of four ways, and prints one line:
 *   "<how> <hz> <process CPU ns> <loop thread CPU ns> <wall ns> <ticks>"
 * (the loop thread's own CPU is what the application's critical path pays).
 *
 *   none    no ticks (the reference);
 *   signal  a POSIX timer (CLOCK_MONOTONIC, SIGEV_THREAD_ID) sends a
 *           real-time signal to the looping thread itself, empty handler:
 *           what :signal does per tick;
 *   thread  a helper thread sleeps to absolute deadlines
 *           (clock_nanosleep TIMER_ABSTIME, no timer slack) and does
 *           nothing else: the
 *           timer-thread wake-up of :holder's direct trigger;
 *   tgkill  the same helper thread also sends the signal to the looping
 *           thread (tgkill): :holder's and :nanosleep's signal path.
 *
 * Context: a standalone program; the handler only counts. Built by the
 * bench (cc -O2 bench/floor.c -o <tmp>/rperf-floor -lpthread).
 * Usage: rperf-floor none|signal|thread|tgkill HZ ITERATIONS
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static atomic_long ticks;
static atomic_int done;
static pid_t loop_tid;
static int64_t period;
static int send_signal;

static void on_tick(int sig)
{
    (void)sig;
    atomic_fetch_add_explicit(&ticks, 1, memory_order_relaxed);
}

static int64_t ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *helper(void *arg)
{
    (void)arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);   /* as the profiler's tick thread */
    int64_t deadline = ns(CLOCK_MONOTONIC) + period;
    while (!atomic_load(&done)) {
        struct timespec t = { .tv_sec = (time_t)(deadline / 1000000000LL),
                              .tv_nsec = (long)(deadline % 1000000000LL) };
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0) continue;
        if (send_signal) syscall(SYS_tgkill, getpid(), loop_tid, SIGRTMIN + 8);
        else atomic_fetch_add_explicit(&ticks, 1, memory_order_relaxed);
        int64_t now = ns(CLOCK_MONOTONIC);
        deadline += period;
        if (deadline < now) deadline = now + period;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s none|signal|thread|tgkill HZ ITERATIONS\n", argv[0]);
        return 2;
    }
    const char *how = argv[1];
    long hz = atol(argv[2]);
    long iterations = atol(argv[3]);
    period = hz > 0 ? 1000000000LL / hz : 0;
    loop_tid = (pid_t)syscall(SYS_gettid);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_tick;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGRTMIN + 8, &sa, NULL);

    pthread_t th;
    int helper_running = 0;
    timer_t timer;
    int timer_armed = 0;
    if (strcmp(how, "signal") == 0 && period > 0) {
        struct sigevent ev;
        memset(&ev, 0, sizeof(ev));
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = SIGRTMIN + 8;
        ev._sigev_un._tid = loop_tid;
        timer_create(CLOCK_MONOTONIC, &ev, &timer);
        struct itimerspec its = { { 0, (long)period }, { 0, (long)period } };
        timer_settime(timer, 0, &its, NULL);
        timer_armed = 1;
    } else if ((strcmp(how, "thread") == 0 || strcmp(how, "tgkill") == 0) && period > 0) {
        send_signal = strcmp(how, "tgkill") == 0;
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_create(&th, NULL, helper, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        helper_running = 1;
    } else if (strcmp(how, "none") != 0) {
        fprintf(stderr, "unknown delivery %s\n", how);
        return 2;
    }

    int64_t c0 = ns(CLOCK_PROCESS_CPUTIME_ID), t0 = ns(CLOCK_THREAD_CPUTIME_ID);
    int64_t w0 = ns(CLOCK_MONOTONIC);
    volatile uint64_t x = 1;
    for (long i = 0; i < iterations; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    int64_t cpu = ns(CLOCK_PROCESS_CPUTIME_ID) - c0, own = ns(CLOCK_THREAD_CPUTIME_ID) - t0;
    int64_t wall = ns(CLOCK_MONOTONIC) - w0;
    long taken = atomic_load(&ticks);

    if (timer_armed) timer_delete(timer);
    atomic_store(&done, 1);
    if (helper_running) pthread_join(th, NULL);
    printf("%s %ld %lld %lld %lld %ld\n", how, hz, (long long)cpu, (long long)own, (long long)wall,
           taken);
    return 0;
}
