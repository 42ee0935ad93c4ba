/*
 * test_timer_thread.c — the tick thread of the timer-thread backends
 * (backends/timer_thread.c) as a backend drives it: it calls the deliver
 * function on its own thread, named for tools, and sleeps to its deadlines
 * with no timer slack (Linux's default 50 us would let each 100 us tick
 * land half a period late); a stop joins it, after which no deliver call
 * comes.
 * Context: a plain C test program (no Ruby); the fake engine of
 * fake_engine.h is the running engine the tick thread pokes. The test
 * waits for ticks by spinning on atomics, never by sleeping.
 */
#include "fake_engine.h"
#include "timer_thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>

static _Atomic int delivered;
static _Atomic long slack_seen = -1;
static char name_seen[16];
static _Atomic int on_caller;
static pthread_t caller;

/* Tick thread: what the tick thread looks like from inside. */
static bool probe_deliver(int64_t now)
{
    (void)now;
    if (atomic_load(&delivered) == 0) {
        atomic_store(&slack_seen, (long)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0));
        prctl(PR_GET_NAME, name_seen, 0, 0, 0);
        if (pthread_equal(pthread_self(), caller)) atomic_store(&on_caller, 1);
    }
    atomic_fetch_add(&delivered, 1);
    return false;
}

RPERF_TEST(the_tick_thread_sleeps_to_its_deadlines_with_no_timer_slack)
{
    (void)start_wall_at(10000);
    caller = pthread_self();
    long own_slack = (long)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    rperf_backend_config_t cfg = { .interval_ns = 100000 };
    char err[128];
    RPERF_CHECK_EQ(rperf_timer_thread_start(&cfg, probe_deliver, NULL, err, sizeof(err)), 0);
    RPERF_CHECK(rperf_timer_thread_running());
    while (atomic_load(&delivered) < 3) {
    }
    rperf_timer_thread_stop();
    int after_stop = atomic_load(&delivered);
    rperf_engine_stop();
    RPERF_CHECK_EQ(atomic_load(&slack_seen), 1L);   /* 1 ns: the least prctl takes */
    RPERF_CHECK(strcmp(name_seen, "rperf-timer") == 0);
    RPERF_CHECK_EQ(atomic_load(&on_caller), 0);
    RPERF_CHECK(!rperf_timer_thread_running());
    let_ns_pass(300000);                             /* three periods: no tick comes */
    RPERF_CHECK_EQ(atomic_load(&delivered), after_stop);
    /* the application's threads keep theirs */
    RPERF_CHECK_EQ((long)prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), own_slack);
}

int main(void)
{
    rperf_engine_init(&host);
    return RPERF_RUN(RPERF_CASE(the_tick_thread_sleeps_to_its_deadlines_with_no_timer_slack));
}
