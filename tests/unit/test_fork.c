/*
 * test_fork.c — fork() while the engine runs, with a real worker thread and
 * a real child process: the worker is parked with every ring drained when
 * fork() happens (so the child never inherits a half-replaced aggregation
 * table or archive), the parent keeps profiling, and the child resets and
 * runs a profile of its own. Also: a fork child's thread tokens are stale,
 * and its thread's cached native tid is its own (a single-threaded child's
 * tid is its pid). A fork landing inside a stop, after sampling went off
 * but before the backend stopped, still undoes the backend in the child.
 * Context: a plain C program (no Ruby); the test thread plays the Ruby
 * threads' "own" context, the engine's worker runs for real. Not run under
 * TSan (fork with live threads is outside what TSan models).
 */
#include "fake_engine.h"

#include <sys/wait.h>
#include <unistd.h>

static int count_samples(const rperf_result_sample_t *s, void *ctx)
{
    (void)s;
    (*(int *)ctx)++;
    return 0;
}

/* In the child: what it inherited, then a profile of its own. 0 = all ok. */
static int child_checks(rperf_thread_t *pt, uintptr_t token)
{
    int bad = 0;
    if (!rperf__ring_idle(pt)) bad |= 1;            /* drained before fork() */
    if (rperf_engine_running()) bad |= 2;           /* the child starts stopped */
    if (!rperf_engine_needs_fork_reset()) bad |= 4;
    if (rperf_thread_from_token(token) != NULL) bad |= 8;   /* stale in the child */
    if (rperf_native_tid() != (int32_t)getpid()) bad |= 64; /* the child's own tid */
    rperf_engine_fork_reset();
    rperf_thread_t *me = start_wall();
    if (!me) return bad | 16;
    let_time_pass();
    rperf_sample_job(me);
    rperf_engine_stop();
    int n = 0;
    rperf_result_each_aggregated(count_samples, &n);
    if (n == 0) bad |= 32;
    rperf_engine_release();
    return bad;
}

RPERF_TEST(fork_parks_the_worker_and_the_child_profiles_itself)
{
    stack[0] = 0x5000;
    stack[1] = 0x5008;
    depth = 2;
    for (int round = 0; round < 20; round++) {
        rperf_thread_t *main_pt = start_wall();
        RPERF_CHECK(main_pt != NULL);
        if (!main_pt) return;
        rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
        RPERF_CHECK(pt != NULL);
        rperf_ev_resumed(pt);
        for (int i = 0; i < 50; i++) {     /* samples waiting in pt's ring */
            let_time_pass();
            rperf_sample_job(pt);
        }
        uintptr_t token = rperf_thread_token(pt);
        pid_t pid = fork();
        if (pid == 0) _exit(child_checks(pt, token));
        RPERF_CHECK(pid > 0);
        int st = 0;
        RPERF_CHECK_EQ(waitpid(pid, &st, 0), pid);
        RPERF_CHECK(WIFEXITED(st));
        RPERF_CHECK_EQ(WEXITSTATUS(st), 0);
        /* the parent goes on profiling */
        RPERF_CHECK(rperf_engine_running());
        let_time_pass();
        rperf_sample_job(pt);
        rperf_ev_suspended(pt);
        rperf_engine_stop();
        int n = 0;
        rperf_result_each_aggregated(count_samples, &n);
        RPERF_CHECK(n > 0);
        rperf_engine_release();
    }
}

/* ---- a fork inside the stop ----------------------------------------------
 * A backend whose stop forks before it stops anything: the fork lands after
 * the engine turned sampling off (so `running` is already 0), while the
 * backend's state (a signal action, a timer) is still live. */
static int child_undone;          /* in the child: after_fork_child ran */
static void forking_stop(void)
{
    pid_t pid = fork();
    if (pid == 0) _exit(child_undone ? 0 : 1);
    RPERF_CHECK(pid > 0);
    int st = 0;
    RPERF_CHECK_EQ(waitpid(pid, &st, 0), pid);
    RPERF_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
static void forking_after_fork_child(void) { child_undone = 1; }
static const rperf_backend_ops_t forking_backend = {
    .version = RPERF_BACKEND_ABI_VERSION, .name = "forking", .description = "test",
    .start = fb_start, .stop = forking_stop, .after_fork_child = forking_after_fork_child,
};

RPERF_TEST(a_fork_inside_the_stop_undoes_the_backend_in_the_child)
{
    rperf_config_t cfg = { .frequency = 1000, .clock = RPERF_CLOCK_WALL, .aggregate = true,
                           .ring_slots = 1024, .backend = &forking_backend };
    rperf_thread_t *caller = NULL;
    char err[128];
    RPERF_CHECK_EQ(rperf_engine_start(&cfg, &caller, err, sizeof(err)), 0);
    rperf_engine_stop();
    RPERF_CHECK_EQ(child_undone, 0);   /* the parent's backend stays as its stop left it */
    rperf_engine_release();
}

int main(void)
{
    rperf_engine_init(&host);
    return RPERF_RUN(RPERF_CASE(fork_parks_the_worker_and_the_child_profiles_itself),
                     RPERF_CASE(a_fork_inside_the_stop_undoes_the_backend_in_the_child));
}
