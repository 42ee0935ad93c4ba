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
 *    native thread runs Ruby code at all;
 *  - a timer signal (SI_TIMER) that arrives after the thread gave up its
 *    GVL is dropped: it must not be charged to whatever runs here next.
 *
 * Contexts: on_signal is a signal handler (async-signal-safe only: TLS
 * reads, atomics, the engine's tick/register, errno saved); install,
 * restore and bootstrap run with the GVL held; send and rperf_task_state
 * run on a backend thread (or in bootstrap); after_fork inside fork() in
 * the child.
 *
 * Restore: the action is first set to SIG_IGN, which discards instances
 * still pending on any thread (POSIX sigaction()), and only then is the
 * previous action put back, so no late tick meets the default (fatal)
 * action.
 */
#include "tick_signal.h"

#include "rperf_core.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Atomic int active;
static int signo;
static struct sigaction old_action;
static int installed;

static void on_signal(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    int saved = errno;
    if (atomic_load_explicit(&active, memory_order_relaxed)) {
        if (rperf_current_thread_sigsafe() != NULL)
            rperf_engine_tick_sigsafe();
        else if (info && info->si_code == SI_TKILL)
            rperf_engine_register_sigsafe();
    }
    errno = saved;
}

int rperf_tick_signal_install(int sig, char *err, size_t errlen)
{
    signo = sig > 0 ? sig : SIGRTMIN + 8;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
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
    restore_action();
}

void rperf_tick_signal_after_fork(void)
{
    atomic_store(&active, 0);
    restore_action();
}

int rperf_tick_signal_number(void) { return signo; }

int rperf_tick_signal_send(pid_t tid)
{
    return (int)syscall(SYS_tgkill, (pid_t)getpid(), tid, signo);
}

char rperf_task_state(pid_t tid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');   /* "tid (comm) S ...": comm may hold spaces */
    return paren && paren[1] == ' ' ? paren[2] : 0;
}

/* Is task `tid` runnable (state R)? A thread that holds a GVL and runs Ruby
 * code is; a sleeping one (Ruby's timer thread in epoll_wait, idle M:N
 * native threads, threads blocked outside the GVL) is not and will see
 * RESUMED before it runs Ruby code again. */
static bool task_runnable(long tid) { return rperf_task_state((pid_t)tid) == 'R'; }

static int cmp_tid(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Tasks in `skip` (sorted) are left out without reading their state: the
 * main Ractor's threads, none of which can hold a GVL now (the caller of
 * start holds theirs), so a process with many parked threads pays no /proc
 * read per thread (~12 us each on a VM). */
void rperf_tick_signal_bootstrap(const int32_t *skip, size_t nskip)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    DIR *d = opendir("/proc/self/task");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end != '\0' || tid <= 0 || (pid_t)tid == self) continue;
        int32_t key = (int32_t)tid;
        if (nskip && bsearch(&key, skip, nskip, sizeof(*skip), cmp_tid)) continue;
        if (!task_runnable(tid)) continue;
        rperf_tick_signal_send((pid_t)tid);   /* a task that exited meanwhile: ESRCH */
    }
    closedir(d);
}
