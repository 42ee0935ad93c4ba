/*
 * wake_latency.c — how long a parked timer thread takes to run after a busy
 * thread wakes it, with the scheduler's default time slice and with the
 * short slice rperf's tick thread asks for (backends/timer_thread.c,
 * ask_short_slice). Side by side in one run: rounds alternate between a
 * sleeper with the default slice and one with a 100 us slice. Each round
 * the main thread (an application thread back from a 20 ms sleep, as a
 * Ruby thread back from I/O) wakes one sleeper through a futex, as a GVL
 * acquisition wakes rperf's parked tick thread, and then computes until
 * that sleeper has run. Between rounds each sleeper naps in 100 us steps,
 * as a tick thread does. Prints the median and the worst wake-up latency
 * of each, and the ratio of the medians.
 *
 * On Linux 6.12 and later a thread with a shorter slice preempts the
 * running one when it wakes; where the scheduler places the woken thread
 * on the waker's CPU (docs/performance.md, "What this machine cannot resolve": this VM often
 * does), a default-slice sleeper waits for the waker's slice to end.
 *
 *   cc -O2 -pthread bench/wake_latency.c -o /tmp/wake_latency && /tmp/wake_latency [rounds]
 *
 * Contexts: a standalone program (no Ruby); main is the waker, sleeper_main
 * the woken thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

struct sched_attr_v0 {   /* the kernel's SCHED_ATTR_SIZE_VER0 layout */
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};

typedef struct {
    _Atomic uint32_t word;        /* 1: the sleeper waits */
    _Atomic int64_t ran_at;       /* when it ran after its wake-up */
    _Atomic int quit;
    uint64_t slice;               /* 0: the default */
    pthread_t thr;
} sleeper_t;

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *sleeper_main(void *arg)
{
    sleeper_t *s = arg;
    if (s->slice) {
        struct sched_attr_v0 a;
        memset(&a, 0, sizeof a);
        a.size = sizeof a;
        a.sched_runtime = s->slice;
        if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) perror("sched_setattr");
    }
    for (;;) {
        while (atomic_load(&s->word) == 1)
            syscall(SYS_futex, &s->word, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
        if (atomic_load(&s->quit)) return NULL;
        atomic_store(&s->ran_at, now_ns());
        while (atomic_load(&s->word) == 0 && !atomic_load(&s->quit)) usleep(100);   /* a timer's naps */
    }
}

/* One wake-up of sleeper s by a busy thread, in ns. */
static int64_t one_round(sleeper_t *s)
{
    atomic_store(&s->ran_at, 0);
    atomic_store(&s->word, 1);
    usleep(20000);                     /* s parks; the waker idles, then wakes */
    int64_t woke = now_ns();
    atomic_store(&s->word, 0);
    syscall(SYS_futex, &s->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    while (atomic_load(&s->ran_at) == 0) {
    }
    return atomic_load(&s->ran_at) - woke;
}

static void finish(sleeper_t *s)
{
    atomic_store(&s->quit, 1);
    atomic_store(&s->word, 0);
    syscall(SYS_futex, &s->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    pthread_join(s->thr, NULL);
}

static int cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 30;
    if (n < 1) n = 1;
    int64_t *def = calloc((size_t)n, sizeof *def), *shrt = calloc((size_t)n, sizeof *shrt);
    if (!def || !shrt) return 1;
    static sleeper_t a = { .word = 1, .slice = 0 }, b = { .word = 1, .slice = 100000 };
    pthread_create(&a.thr, NULL, sleeper_main, &a);
    pthread_create(&b.thr, NULL, sleeper_main, &b);
    for (int i = 0; i < n; i++) {   /* alternated: the same minute of the VM */
        def[i] = one_round(&a);
        shrt[i] = one_round(&b);
    }
    finish(&a);
    finish(&b);
    qsort(def, (size_t)n, sizeof *def, cmp);
    qsort(shrt, (size_t)n, sizeof *shrt, cmp);
    printf("wake-up latency behind a busy waker, %d rounds each (us): median / worst\n", n);
    printf("  default slice   %8.1f / %8.1f\n", def[n / 2] / 1e3, def[n - 1] / 1e3);
    printf("  100 us slice    %8.1f / %8.1f\n", shrt[n / 2] / 1e3, shrt[n - 1] / 1e3);
    printf("  ratio of medians (default / short): %.1f\n", (double)def[n / 2] / (double)(shrt[n / 2] ? shrt[n / 2] : 1));
    free(def);
    free(shrt);
    return 0;
}
