/*
 * test_tick_signal.c — the tick signal's CPU reading (backends/tick_signal.c)
 * as the :signal backend uses it in cpu mode: the handler reads the thread's
 * CPU clock at a timer tick, the job takes it once, and a reading from an
 * earlier run is never handed out (in a fork child the thread CPU clock
 * starts again from zero, so the engine's own monotonicity check could not
 * tell it apart); a fork child whose parent had a handler inside its
 * bootstrap re-send section on another thread never waits for it at stop;
 * :holder's kept stat file reads a task's state and never closes a
 * descriptor the application reused.
 * Context: a plain C test program (no Ruby); the fake engine of
 * fake_engine.h makes this thread a running Ruby thread for the handler
 * (a wall-mode run: the handler reads whenever the backend asks).
 * Not built under ThreadSanitizer (it defers signal handlers to points
 * this test's busy wait may not reach).
 */
#include "fake_engine.h"
#include "tick_signal.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A POSIX timer signal (si_code SI_TIMER, as :signal's timers send) to this
 * very thread; returns once the handler has ticked the engine. */
static void timer_tick_here(void)
{
    struct sigevent sev;
    memset(&sev, 0, sizeof(sev));
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = rperf_tick_signal_number();
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t t;
    RPERF_CHECK_EQ(timer_create(CLOCK_MONOTONIC, &sev, &t), 0);
    uint64_t before = atomic_load(&rperf__engine.trigger_count);
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    its.it_value.tv_nsec = 1000;
    RPERF_CHECK_EQ(timer_settime(t, 0, &its, NULL), 0);
    while (atomic_load(&rperf__engine.trigger_count) == before) {
    }
    timer_delete(t);
}

RPERF_TEST(a_timer_tick_leaves_one_cpu_reading_for_its_own_run)
{
    (void)start_wall();                      /* this thread is current */
    char err[128];
    RPERF_CHECK_EQ(rperf_tick_signal_install(0, err, sizeof(err)), 0);
    rperf_tick_signal_read_cpu(true);
    int64_t cpu = 0, at = 0;
    RPERF_CHECK_EQ(rperf_tick_signal_tick_cpu(&cpu, &at), -1);   /* no tick yet */
    timer_tick_here();
    RPERF_CHECK_EQ(rperf_tick_signal_tick_cpu(&cpu, &at), 0);
    RPERF_CHECK(cpu > 0);
    RPERF_CHECK(at > 0 && at <= rperf__mono_ns());
    RPERF_CHECK_EQ(rperf_tick_signal_tick_cpu(&cpu, &at), -1);   /* handed out once */
    let_time_pass();
    timer_tick_here();                       /* a reading nobody took... */
    rperf_tick_signal_read_cpu(true);        /* ...when a new run starts */
    RPERF_CHECK_EQ(rperf_tick_signal_tick_cpu(&cpu, &at), -1);
    timer_tick_here();                       /* the new run's own tick */
    RPERF_CHECK_EQ(rperf_tick_signal_tick_cpu(&cpu, &at), 0);
    timer_tick_here();
    rperf_tick_signal_after_fork();          /* as in a fork child */
    RPERF_CHECK_EQ(rperf_tick_signal_tick_cpu(&cpu, &at), -1);
    rperf_engine_stop();
    rperf_engine_release();
}

/* ---- a fork while another thread's handler re-sends ---------------------- */

static _Atomic int held, let_go, spinners_stop;

/* The first handler to enter the re-send section stays there until let go
 * (a spin on an atomic: async-signal-safe). */
static void hold_first(void)
{
    int none = 0;
    if (!atomic_compare_exchange_strong(&held, &none, 1)) return;
    while (!atomic_load(&let_go)) {
    }
}

/* A runnable task the bootstrap signals (not a Ruby thread: its handler
 * answers "nothing here"). */
static void *spin(void *arg)
{
    (void)arg;
    while (!atomic_load(&spinners_stop)) {
    }
    return NULL;
}

RPERF_TEST(a_fork_child_never_waits_for_the_parents_resending_handlers)
{
    char err[128];
    RPERF_CHECK_EQ(rperf_tick_signal_install(0, err, sizeof(err)), 0);
    rperf__tick_signal_resend_hook = hold_first;
    pthread_t t[2];
    for (int i = 0; i < 2; i++) RPERF_CHECK_EQ(pthread_create(&t[i], NULL, spin, NULL), 0);
    /* both spinners runnable: the bootstrap records them; the first to
     * answer still sees the other waiting, enters the re-send section, and
     * is held there */
    while (!atomic_load(&held)) {
        if (!rperf_tick_signal_bootstrap_pending()) rperf_tick_signal_bootstrap(NULL, 0, 0);
        sched_yield();
    }
    pid_t pid = fork();
    if (pid == 0) {
        alarm(20);   /* a watchdog, not a timing check: a hang dies of SIGALRM */
        rperf_tick_signal_after_fork();
        rperf_tick_signal_install(0, err, sizeof(err));   /* the child profiles itself... */
        rperf_tick_signal_restore();                      /* ...and stops */
        _exit(0);
    }
    RPERF_CHECK(pid > 0);
    atomic_store(&let_go, 1);
    int status = 0;
    RPERF_CHECK_EQ(waitpid(pid, &status, 0), pid);
    RPERF_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    atomic_store(&spinners_stop, 1);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    rperf_tick_signal_restore();
    rperf__tick_signal_resend_hook = NULL;
}

/* A thread that waits to be let go, then exits. */
static pthread_barrier_t started, finish;
static _Atomic pid_t waiter_tid;

static void *wait_then_exit(void *arg)
{
    (void)arg;
    atomic_store(&waiter_tid, (pid_t)syscall(SYS_gettid));
    pthread_barrier_wait(&started);
    pthread_barrier_wait(&finish);
    return NULL;
}

/* The lowest descriptor number free now: what the application's next
 * open would get. */
static int next_free_fd(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) close(fd);
    return fd;
}

/* The task state :holder's timer thread reads before signalling a holder:
 * it reads states, of this task and of another one that then exits, and
 * holds no descriptor afterwards (the application's next open gets the
 * number it would have got without the profiler, and a descriptor the
 * application holds is left as it was). */
RPERF_TEST(reading_a_task_state_holds_no_descriptor)
{
    pid_t self = (pid_t)syscall(SYS_gettid);
    int app = open("/dev/null", O_RDONLY | O_CLOEXEC);
    RPERF_CHECK(app >= 0);
    int free_before = next_free_fd();
    RPERF_CHECK_EQ(rperf_task_state(self), 'R');   /* running: asking */
    RPERF_CHECK_EQ(next_free_fd(), free_before);

    pthread_barrier_init(&started, NULL, 2);
    pthread_barrier_init(&finish, NULL, 2);
    pthread_t t;
    RPERF_CHECK_EQ(pthread_create(&t, NULL, wait_then_exit, NULL), 0);
    pthread_barrier_wait(&started);
    pid_t other = atomic_load(&waiter_tid);
    char st = rperf_task_state(other);
    RPERF_CHECK(st == 'S' || st == 'R');           /* in the barrier, or just leaving it */
    RPERF_CHECK_EQ(next_free_fd(), free_before);
    pthread_barrier_wait(&finish);
    pthread_join(t, NULL);
    /* gone (a thread joined may still be on its way out of the kernel:
     * then it reads as a zombie, never as runnable or sleeping) */
    st = rperf_task_state(other);
    RPERF_CHECK(st == 0 || st == 'Z' || st == 'X');
    RPERF_CHECK_EQ(next_free_fd(), free_before);
    RPERF_CHECK(fcntl(app, F_GETFD) >= 0);         /* still the application's */
    close(app);
    pthread_barrier_destroy(&started);
    pthread_barrier_destroy(&finish);
}

/* A task's name may hold spaces and parentheses (Ruby names threads
 * "file.rb:LINE", a program may call itself anything): the state is the
 * letter after the last ')', and the name is all between the first '('
 * and that one. */
RPERF_TEST(a_stat_line_is_read_past_any_name)
{
    char line[128];
    bool named = false;
    strcpy(line, "42 (a) S (b)) R 1 2 3");
    RPERF_CHECK_EQ(rperf_stat_line_state(line, strlen(line), "a) S (b)", &named), 'R');
    RPERF_CHECK(named);
    strcpy(line, "42 (rperf-worker) S 1");
    RPERF_CHECK_EQ(rperf_stat_line_state(line, strlen(line), "rperf", &named), 'S');
    RPERF_CHECK(!named);                       /* a prefix is not the name */
    strcpy(line, "42 (cut");
    RPERF_CHECK_EQ(rperf_stat_line_state(line, strlen(line), NULL, NULL), 0);
}

/* A child that exited and was not reaped yet is a zombie ('Z'): the
 * merge of a run's parts takes such a process for ended. Reaped, it has
 * no state at all. */
RPERF_TEST(an_unreaped_child_reads_as_a_zombie)
{
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    RPERF_CHECK(pid > 0);
    /* waitid with WNOWAIT returns once the child is a zombie, and leaves
     * it one */
    siginfo_t info;
    RPERF_CHECK_EQ(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0);
    RPERF_CHECK_EQ(rperf_proc_state((long)pid, 0, NULL, NULL), 'Z');
    RPERF_CHECK_EQ(waitpid(pid, NULL, 0), pid);
    RPERF_CHECK_EQ(rperf_proc_state((long)pid, 0, NULL, NULL), 0);
}

int main(void)
{
    rperf_engine_init(&host);
    return RPERF_RUN(RPERF_CASE(a_timer_tick_leaves_one_cpu_reading_for_its_own_run),
                     RPERF_CASE(a_fork_child_never_waits_for_the_parents_resending_handlers),
                     RPERF_CASE(reading_a_task_state_holds_no_descriptor),
                     RPERF_CASE(a_stat_line_is_read_past_any_name),
                     RPERF_CASE(an_unreaped_child_reads_as_a_zombie));
}
