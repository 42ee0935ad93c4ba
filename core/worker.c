/*
 * worker.c — the aggregation worker: one pthread that drains every thread's
 * ring in batches, interns frames, aggregates, unlinks exited threads and
 * advances the epoch. It never calls the Ruby API and never blocks readers.
 *
 * Wake-ups cost ~25 us of CPU here, so it sleeps up to RPERF_WORKER_PERIOD_MS
 * and is woken sooner only when a ring passes half full (rperf__worker_wake_for,
 * called by producers; while a backend's timer thread runs, that thread
 * makes the wake-up at its next tick, and a producer only at three quarters
 * full). Such a wake drains only the rings that asked (the urgent list); every thread is visited (drained, exited ones unlinked) once
 * per period. A busy thread at 10 kHz wakes the worker ~150 times a second,
 * and visiting 1,000 parked threads each time cost more than the samples.
 * A visit that finds nothing to drain or retire (an idle process: no
 * samples are taken while no thread holds a GVL) doubles the period, up to
 * RPERF_WORKER_IDLE_MS; anything found brings it back. Records waiting
 * meanwhile are drained by the next visit, a producer's wake-up, or a
 * snapshot/stop (which drain everything first).
 *
 * Contexts: worker_main, rperf__worker_drain_all and rperf__worker_drain_urgent
 * run on the worker thread (or wherever the parked worker's drains are run);
 * start/stop/pause/resume on a GVL thread; rperf__worker_wake_for in own
 * context (never in a signal handler); rperf_engine_ticker_on/poke on a
 * backend's timer thread or a GVL thread (no Ruby API); the fork functions
 * in pthread_atfork handlers.
 */
#include "core_internal.h"

#include <errno.h>
#include <string.h>

#define RPERF_WORKER_PERIOD_MS 50
#define RPERF_WORKER_IDLE_MS 1600    /* the longest wait of an idle worker */

static pthread_t thr;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;          /* worker waits here (CLOCK_MONOTONIC) */
static pthread_cond_t cv_ack;      /* pause acknowledgements */
static int started;
static int stop_req, pause_req, paused;   /* guarded by mu */
static _Atomic int wake_flag;
/* A ticker (a backend thread that wakes at every tick) wakes the worker for
 * the producers: `poke_asked` is set by a producer, taken by the ticker. */
static _Atomic bool ticker;
static _Atomic bool poke_asked;
/* Threads whose ring passed high water since the worker last looked: a
 * stack pushed by producers (CAS), taken whole by the worker (exchange), so
 * there is no ABA. A thread is on it at most once (its `urgent` flag), and
 * is not unlinked while the flag is set: only the worker clears the flag
 * and unlinks threads. */
static rperf_thread_t *_Atomic urgent_head;

static void sink(rperf_thread_t *pt, const rperf_decoded_t *d, const uint32_t *ids, void *ctx)
{
    (void)ctx;
    if (d->type >= RPERF_SAMPLE_ALLOC) {
        if (rperf__heap_add(pt->seq, d, ids) < 0)
            atomic_fetch_add_explicit(&pt->dropped, 1, memory_order_relaxed);
        return;
    }
    uint32_t buf[RPERF_MAX_DEPTH + 1];
    const uint32_t *stack = ids;
    uint32_t depth = d->depth;
    if (d->type != RPERF_SAMPLE_NORMAL) {
        buf[0] = (uint32_t)d->type - 1;     /* synthetic frame at the leaf */
        memcpy(buf + 1, ids, depth * sizeof(uint32_t));
        stack = buf;
        depth++;
    }
    /* out of memory: the sample is lost, and counted as dropped */
    if (rperf__agg_add(stack, depth, d->weight, pt->seq, d->label_set_id, d->mono_ns) < 0)
        atomic_fetch_add_explicit(&pt->dropped, 1, memory_order_relaxed);
}

size_t rperf__worker_drain_urgent(void)
{
    size_t n = 0;
    rperf_thread_t *pt = atomic_exchange_explicit(&urgent_head, NULL, memory_order_acquire);
    while (pt) {
        rperf_thread_t *next = pt->urgent_next;
        /* cleared before the drain: a producer passing high water again
         * after this point queues the thread anew */
        atomic_store(&pt->urgent, 0);
        n += rperf__ring_drain(pt, sink, NULL);
        pt = next;
    }
    return n;
}

size_t rperf__worker_drain_thread(rperf_thread_t *pt) { return rperf__ring_drain(pt, sink, NULL); }

size_t rperf__worker_drain_all(void)
{
    size_t n = rperf__worker_drain_urgent();
    rperf_thread_t *prev = NULL;
    rperf_thread_t *pt = atomic_load_explicit(&rperf__threads, memory_order_acquire);
    while (pt) {
        rperf_thread_t *next = atomic_load_explicit(&pt->next, memory_order_acquire);
        int exited = atomic_load_explicit(&pt->exited, memory_order_acquire);
        n += rperf__ring_drain(pt, sink, NULL);
        if (exited && rperf__ring_idle(pt) && !atomic_load(&pt->urgent)) {
            rperf__thread_retire(prev, pt);
            n++;
        } else {
            prev = pt;
        }
        pt = next;
    }
    return n;
}

static void deadline_in(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_nsec += ms * 1000000L;
    while (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static _Atomic bool drain_asked;   /* rperf__worker_drain_soon */

static void *worker_main(void *arg)
{
    (void)arg;
    struct timespec full_at;   /* when every thread is visited next */
    long wait_ms = RPERF_WORKER_PERIOD_MS;
    deadline_in(&full_at, 0);
    pthread_mutex_lock(&mu);
    while (!stop_req) {
        if (pause_req) {
            pthread_mutex_unlock(&mu);
            rperf__worker_drain_all();
            pthread_mutex_lock(&mu);
            paused = 1;
            pthread_cond_broadcast(&cv_ack);
            while (pause_req && !stop_req) pthread_cond_wait(&cv, &mu);
            paused = 0;
            pthread_cond_broadcast(&cv_ack);
            continue;
        }
        pthread_mutex_unlock(&mu);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (atomic_exchange_explicit(&drain_asked, false, memory_order_relaxed) ||
            now.tv_sec > full_at.tv_sec ||
            (now.tv_sec == full_at.tv_sec && now.tv_nsec >= full_at.tv_nsec)) {
            bool found = rperf__worker_drain_all() > 0;
            wait_ms = found ? RPERF_WORKER_PERIOD_MS
                            : wait_ms * 2 < RPERF_WORKER_IDLE_MS ? wait_ms * 2 : RPERF_WORKER_IDLE_MS;
            deadline_in(&full_at, wait_ms);
        } else if (rperf__worker_drain_urgent() > 0 && wait_ms > RPERF_WORKER_PERIOD_MS) {
            wait_ms = RPERF_WORKER_PERIOD_MS;   /* samples again: visit all soon */
            deadline_in(&full_at, wait_ms);
        }
        rperf__frames_retire_due();
        ck_epoch_poll(&rperf__epoch_worker);
        if (rperf__engine.host.worker_poll && rperf__engine.host.worker_poll() &&
            wait_ms > RPERF_WORKER_PERIOD_MS) {
            wait_ms = RPERF_WORKER_PERIOD_MS;   /* the host's work is due soon */
            deadline_in(&full_at, wait_ms);
        }
        pthread_mutex_lock(&mu);
        if (stop_req || pause_req) continue;
        if (!atomic_exchange(&wake_flag, 0)) {
            pthread_cond_timedwait(&cv, &mu, &full_at);
            atomic_store(&wake_flag, 0);
        }
    }
    pthread_mutex_unlock(&mu);
    rperf__worker_drain_all();           /* final drain at stop */
    return NULL;
}

int rperf__worker_start(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&cv_ack, NULL);
    stop_req = pause_req = paused = 0;
    atomic_store(&wake_flag, 0);
    atomic_store(&poke_asked, false);
    atomic_store(&urgent_head, NULL);
    if (pthread_create(&thr, NULL, worker_main, NULL) != 0) return -1;
    /* Named for top -H, ps -L and gdb, so the profiler's own CPU shows apart
     * from the application's. Named here, by the creator, so the name is in
     * place when start returns (the thread naming itself raced with readers
     * of /proc right after start). */
    pthread_setname_np(thr, RPERF_WORKER_THREAD_NAME);
    started = 1;
    return 0;
}

void rperf__worker_stop(void)
{
    if (!started) return;
    pthread_mutex_lock(&mu);
    stop_req = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(thr, NULL);
    started = 0;
    pthread_cond_destroy(&cv);
    pthread_cond_destroy(&cv_ack);
}

void rperf__worker_pause(void)
{
    if (!started) return;
    pthread_mutex_lock(&mu);
    pause_req = 1;
    pthread_cond_broadcast(&cv);
    while (!paused) pthread_cond_wait(&cv_ack, &mu);
    pthread_mutex_unlock(&mu);
}

void rperf__worker_resume(void)
{
    if (!started) return;
    pthread_mutex_lock(&mu);
    pause_req = 0;
    pthread_cond_broadcast(&cv);
    while (paused) pthread_cond_wait(&cv_ack, &mu);
    pthread_mutex_unlock(&mu);
}

/* The worker checks wake_flag under mu before it waits, and the signal is
 * sent under mu, so no wake-up is lost. */
static _Atomic uint64_t wakes_asked;

uint64_t rperf__worker_wakes_asked(void) { return atomic_load(&wakes_asked); }

static void wake_worker(void)
{
    atomic_fetch_add_explicit(&wakes_asked, 1, memory_order_relaxed);
    if (!atomic_exchange(&wake_flag, 1)) {
        pthread_mutex_lock(&mu);
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
}

/* Any context but a signal handler (inside GC too: no Ruby API): every
 * ring drained and requested frame retirements carried out at the
 * worker's next wake, which this asks for now. */

void rperf__worker_drain_soon(void)
{
    if (!started) return;
    atomic_store_explicit(&drain_asked, true, memory_order_relaxed);
    wake_worker();
}

void rperf_engine_ticker_on(bool on)
{
    atomic_store(&ticker, on);
    if (!on && atomic_exchange(&poke_asked, false) && started) wake_worker();
}

void rperf_engine_ticker_poke(void)
{
    if (!atomic_load_explicit(&poke_asked, memory_order_relaxed)) return;
    if (atomic_exchange(&poke_asked, false) && started) wake_worker();
}

/* own context (never a signal handler). A thread already on the urgent list
 * wakes nobody (the worker has not drained it yet) unless `now`. While a
 * ticker runs, a wake that is not `now` is left to it: the worker is woken
 * within a tick (at 1 kHz, a ring that reached half full has room for
 * another 13 or more samples of 155 frames), and the producer makes no
 * system call (the futex wake-up cost ~0.8 us per sample of a 155-frame
 * stack at 10 kHz, one wake-up every 13 samples; docs/performance.md,
 * "A sample"). Without a worker nothing is queued (the list belongs to
 * a running worker, whose final drain at stop empties it). */
void rperf__worker_wake_for(rperf_thread_t *pt, bool now)
{
    if (!started) return;
    if (!atomic_exchange(&pt->urgent, 1)) {
        rperf_thread_t *head = atomic_load_explicit(&urgent_head, memory_order_relaxed);
        do {
            pt->urgent_next = head;
        } while (!atomic_compare_exchange_weak_explicit(&urgent_head, &head, pt,
                                                        memory_order_release,
                                                        memory_order_relaxed));
    } else if (!now) {
        return;
    }
    if (!now && atomic_load_explicit(&ticker, memory_order_relaxed)) {
        atomic_store_explicit(&poke_asked, true, memory_order_release);
        return;
    }
    wake_worker();
}

/* pthread_atfork: park the worker at its pause point (rings drained, no
 * table or archive half-replaced) and hold mu across fork, so the child
 * inherits consistent aggregation state and an unlocked mutex. The parent
 * then resumes it (or leaves it paused for a snapshot in progress). */
static int pause_before_fork;

void rperf__worker_fork_prepare(void)
{
    pthread_mutex_lock(&mu);
    pause_before_fork = pause_req;
    if (!started) return;
    pause_req = 1;
    pthread_cond_broadcast(&cv);
    while (!paused && !stop_req) pthread_cond_wait(&cv_ack, &mu);
}

void rperf__worker_fork_parent(void)
{
    if (started) {
        pause_req = pause_before_fork;
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
}

/* Child: the worker thread does not exist here; its mutex and condition
 * variables are made anew (a condition variable a thread of the parent
 * waited on must not be reused). */
void rperf__worker_fork_child(void)
{
    pthread_mutex_init(&mu, NULL);
    started = 0;
    stop_req = pause_req = paused = 0;
    atomic_store(&urgent_head, NULL);   /* the run's threads are reset too */
    atomic_store(&ticker, false);       /* no timer thread in the child */
    atomic_store(&poke_asked, false);
}
