/*
 * engine.c — the engine's lifecycle: init, start, stop, snapshot
 * pause/resume, release, fork handling, counters, the GC mark entry point
 * and result iteration.
 *
 * Context: GVL held (the Ruby API layer calls these), except
 * rperf_engine_tick_sigsafe (signal handler), rperf_engine_running and
 * enter/leave (any thread), rperf_engine_count_overruns (timer thread) and
 * the atfork handlers (inside fork()).
 */
#include "core_internal.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

rperf_engine_t rperf__engine;

/* Jobs, hooks and label calls inside enter/leave, counted per stripe: a
 * native thread keeps to one stripe (its first enter picks the next in
 * turn), so a GVL switch does its two read-modify-writes on a cache line
 * of its own instead of one that every CPU writes (on 2 vCPUs the
 * difference is within the noise; the point is Ractors on many cores).
 * enter and leave of one section run on the same native thread: nothing
 * between them switches the GVL. halt waits until every stripe is zero. */
#define STRIPES 64
typedef struct stripe {
    _Alignas(64) _Atomic int n;
} stripe_t;
static stripe_t stripes[STRIPES];
static _Atomic uint32_t next_stripe;

static _Atomic int *my_stripe(void)
{
    rperf_nt_t *nt = rperf__nt();
    if (!nt->stripe)
        nt->stripe = atomic_fetch_add_explicit(&next_stripe, 1, memory_order_relaxed) % STRIPES + 1;
    return &stripes[nt->stripe - 1].n;
}

static void wait_quiescent(void)
{
    for (int i = 0; i < STRIPES; i++)
        while (atomic_load(&stripes[i].n) > 0) sched_yield();
}

/* From just before the backend's start to just after its stop: what a
 * fork child must undo of it (fork_child). */
static _Atomic int backend_live;

static void fork_prepare(void) { rperf__worker_fork_prepare(); }
static void fork_parent(void) { rperf__worker_fork_parent(); }

/* Inside fork() in the child: only this thread exists. Stop everything
 * cheaply; memory is released later by rperf_engine_fork_reset (GVL). */
static void wanted_reset(void);

static void fork_child(void)
{
    rperf__worker_fork_child();
    rperf__pages_fork_child();
    rperf__heap_fork_child();
    wanted_reset();
    rperf__nt()->want_job = 0;
    rperf__nt()->tid = 0;            /* this thread's tid in the child is new */
    rperf__nt()->cpu_hi = 0;         /* and its CPU clock starts again */
    int was = atomic_exchange(&rperf__engine.running, 0);
    for (int i = 0; i < STRIPES; i++) atomic_store(&stripes[i].n, 0);
    /* backend_live, not running: a fork landing inside a stop, after
     * sampling went off but before the backend stopped, leaves the child
     * the backend's signal action and state too */
    if (atomic_exchange(&backend_live, 0) && rperf__engine.cfg.backend &&
        rperf__engine.cfg.backend->after_fork_child)
        rperf__engine.cfg.backend->after_fork_child();
    if (was || atomic_load(&rperf__engine.has_results))
        atomic_store(&rperf__engine.fork_reset_needed, 1);
    rperf__engine.run_id++;          /* every nt->cur inherited is now stale */
}

int rperf_engine_init(const rperf_host_t *host)
{
    rperf__engine.host = *host;
    rperf__alloc_init();
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0) return -1;
    return 0;
}

bool rperf_engine_running(void) { return atomic_load(&rperf__engine.running) != 0; }
bool rperf_engine_has_results(void) { return atomic_load(&rperf__engine.has_results) != 0; }
const rperf_config_t *rperf_engine_config(void) { return &rperf__engine.cfg; }
bool rperf_engine_needs_fork_reset(void) { return atomic_load(&rperf__engine.fork_reset_needed) != 0; }

/* Sequentially consistent on both sides (halt stores running, then reads
 * the stripes): either enter sees running off, or halt sees its count. */
bool rperf_engine_enter(void)
{
    _Atomic int *n = my_stripe();
    atomic_fetch_add(n, 1);
    if (!atomic_load(&rperf__engine.running)) {
        atomic_fetch_sub(n, 1);
        return false;
    }
    return true;
}

void rperf_engine_leave(void) { atomic_fetch_sub(my_stripe(), 1); }

bool rperf_engine_ticks_wanted(void)
{
    return !rperf__engine.cfg.alloc_only &&
           (!rperf__engine.cfg.deferred ||
            atomic_load_explicit(&rperf__engine.profiled_threads, memory_order_relaxed) > 0);
}

/* native threads waiting for their own job (rperf_engine_want_job): tid,
 * 0 = free slot */
#define WANTED_SLOTS 64
static _Atomic int32_t wanted[WANTED_SLOTS];
static _Atomic int wanted_count;
static _Atomic int64_t wanted_sent_ns;

/* at start and in a fork child: no native thread waits (one that did and
 * is still waiting asks again at its next thread event) */
static void wanted_reset(void)
{
    for (int i = 0; i < WANTED_SLOTS; i++) atomic_store(&wanted[i], 0);
    atomic_store(&wanted_count, 0);
    atomic_store(&wanted_sent_ns, 0);
}

void rperf_engine_want_job(void)
{
    rperf_nt_t *nt = rperf__nt();
    int32_t tid = rperf_native_tid();
    if (!atomic_exchange_explicit(&nt->want_job, 1, memory_order_relaxed)) {
        for (int i = 0; i < WANTED_SLOTS; i++) {
            int32_t free_slot = 0;
            if (atomic_compare_exchange_strong(&wanted[i], &free_slot, tid)) {
                atomic_fetch_add(&wanted_count, 1);
                break;
            }
        }
    }
    rperf__engine.host.trigger();
}

void rperf_engine_job_ran_here(void)
{
    rperf_nt_t *nt = rperf__nt();
    /* a load first: every job of another Ractor comes here, almost always
     * with nothing wanted (no locked instruction then) */
    if (!atomic_load_explicit(&nt->want_job, memory_order_relaxed) ||
        !atomic_exchange_explicit(&nt->want_job, 0, memory_order_relaxed))
        return;
    int32_t tid = rperf_native_tid();
    for (int i = 0; i < WANTED_SLOTS; i++) {
        int32_t t = tid;
        if (atomic_compare_exchange_strong(&wanted[i], &t, 0)) {
            atomic_fetch_sub(&wanted_count, 1);
            break;
        }
    }
}

void rperf_engine_resignal_wanted(int (*send)(int32_t tid))
{
    if (atomic_load_explicit(&wanted_count, memory_order_relaxed) <= 0) return;
    int64_t now = rperf__mono_ns();
    int64_t last = atomic_load_explicit(&wanted_sent_ns, memory_order_relaxed);
    if (last && now - last < 2000000) return;
    if (!atomic_compare_exchange_strong(&wanted_sent_ns, &last, now)) return;
    int32_t self = rperf_native_tid();
    for (int i = 0; i < WANTED_SLOTS; i++) {
        int32_t t = atomic_load_explicit(&wanted[i], memory_order_relaxed);
        if (t && t != self) send(t);
    }
}

void rperf_engine_tick_sigsafe(void)
{
    /* a job this native thread waits for: asked again, ticks or not */
    if (atomic_load_explicit(&rperf__nt()->want_job, memory_order_relaxed))
        rperf__engine.host.trigger();
    /* a deferred run with no thread inside a profile block: no tick (the
     * backends' tick threads then find no holder and park) */
    if (!rperf_engine_ticks_wanted()) return;
    /* clock_gettime: async-signal-safe */
    int64_t now = rperf__mono_ns();
    atomic_store_explicit(&rperf__engine.tick_mono, now, memory_order_relaxed);
    atomic_fetch_add_explicit(&rperf__engine.trigger_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&rperf__engine.tick_seq, 1, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&rperf__engine.outstanding, 1, memory_order_relaxed) == 0)
        atomic_store_explicit(&rperf__engine.tick_first_mono, now, memory_order_relaxed);
    rperf__engine.host.trigger();
}

bool rperf_engine_register_sigsafe(void)
{
    return rperf__engine.host.trigger_register && rperf__engine.host.trigger_register();
}

bool rperf_engine_threads_complete(void)
{
    return !atomic_load_explicit(&rperf__engine.thread_new_failed, memory_order_relaxed);
}

int rperf_engine_unsettled_threads(void)
{
    return atomic_load_explicit(&rperf__engine.unsettled, memory_order_acquire);
}

int64_t rperf_engine_last_thread_start(void)
{
    return atomic_load_explicit(&rperf__engine.last_start_mono, memory_order_relaxed);
}

uint64_t rperf_engine_ticks_unconsumed(void)
{
    return atomic_load_explicit(&rperf__engine.outstanding, memory_order_relaxed);
}

void rperf_engine_count_overruns(uint64_t n)
{
    atomic_fetch_add_explicit(&rperf__engine.timer_overruns, n, memory_order_relaxed);
}

/* At a clear, ticks already triggered but not yet consumed by a job stay
 * counted, so sampling_count <= trigger_count holds across the boundary. */
static void reset_counters(void)
{
    atomic_store(&rperf__engine.trigger_count, atomic_load(&rperf__engine.outstanding));
    atomic_store(&rperf__engine.sampling_count, 0);
    atomic_store(&rperf__engine.sampling_time_ns, 0);
    atomic_store(&rperf__engine.timer_overruns, 0);
    rperf__engine.start_real_ns = rperf__ns(CLOCK_REALTIME);
    rperf__engine.start_mono_ns = rperf__mono_ns();
}

static void free_run(void)
{
    rperf__frames_destroy();
    rperf__agg_destroy();
    rperf__heap_destroy();
    rperf__threads_free_all();
    rperf__archive_clear();
    rperf__pages_release_cache();
    rperf__engine.table_generation++;
    atomic_store(&rperf__engine.has_results, 0);
}

int rperf_engine_start(const rperf_config_t *cfg, rperf_thread_t **caller,
                       char *err, size_t errlen)
{
    if (rperf_engine_needs_fork_reset()) rperf_engine_fork_reset();
    if (atomic_load(&rperf__engine.running)) {
        snprintf(err, errlen, "Rperf is already running");
        return -1;
    }
    if (atomic_load(&rperf__engine.has_results)) rperf_engine_release();

    rperf__engine.cfg = *cfg;
    if (rperf__engine.cfg.ring_slots == 0) rperf__engine.cfg.ring_slots = RPERF_DEFAULT_RING_SLOTS;
    rperf__engine.interval_ns = 1000000000LL / cfg->frequency;
    rperf__late_rule_init();
    rperf__engine.run_id++;
    rperf__engine.table_generation++;
    atomic_store(&rperf__engine.outstanding, 0);
    atomic_store(&rperf__engine.tick_mono, 0);
    atomic_store(&rperf__engine.tick_first_mono, 0);
    atomic_store(&rperf__engine.thread_seq, 0);
    atomic_store(&rperf__engine.unsettled, 0);
    atomic_store(&rperf__engine.last_start_mono, 0);
    atomic_store(&rperf__engine.thread_new_failed, 0);
    atomic_store(&rperf__engine.profiled_threads, 0);
    atomic_store(&rperf__engine.dropped_retired, 0);
    wanted_reset();
    rperf__gc_reset();
    reset_counters();
    rperf__engine.close_mono_ns = 0;

    rperf__epoch_reset();
    if (rperf__frames_init() < 0 || rperf__agg_init(cfg->aggregate) < 0 ||
        rperf__heap_init(cfg->alloc_interval) < 0) {
        snprintf(err, errlen, "rperf: failed to allocate the frame table");
        rperf__agg_destroy();
        rperf__heap_destroy();
        return -1;
    }
    if (rperf__worker_start() < 0) {
        snprintf(err, errlen, "rperf: failed to start the aggregation worker");
        rperf__frames_destroy();
        rperf__agg_destroy();
        rperf__heap_destroy();
        return -1;
    }
    /* Running before the backend starts: jobs triggered by its bootstrap
     * signals may run at once in other Ractors and must find it on. */
    atomic_store(&rperf__engine.running, 1);
    rperf_backend_config_t bc = { .interval_ns = rperf__engine.interval_ns, .signo = cfg->signo,
                                  .bootstrap = cfg->bootstrap,
                                  .bootstrap_skip = cfg->bootstrap_skip,
                                  .bootstrap_nskip = cfg->bootstrap_nskip,
                                  .cpu_clock = cfg->clock == RPERF_CLOCK_CPU };
    atomic_store(&backend_live, 1);
    if (cfg->backend->start(&bc, err, errlen) < 0) {
        atomic_store(&backend_live, 0);
        atomic_store(&rperf__engine.running, 0);
        wait_quiescent();
        rperf__worker_stop();
        free_run();
        return -1;
    }
    /* The window starts now that sampling is live: the set-up above can
     * take a while (a process's first start registers membarrier: 5-15 ms
     * here), and the caller, which held the GVL all along, would otherwise
     * miss that time from its total or hand it to its first sample. */
    rperf__engine.start_real_ns = rperf__ns(CLOCK_REALTIME);
    atomic_store(&rperf__engine.start_mono_ns, rperf__mono_ns());
    *caller = rperf_thread_new(RPERF_THREAD_CURRENT);
    if (!*caller) {
        rperf_engine_stop();
        free_run();
        snprintf(err, errlen, "rperf: failed to allocate thread state");
        return -1;
    }
    return 0;
}

/* Sampling off, then wait for jobs, hooks and label calls of every Ractor
 * that entered before, then the backend and the worker. */
static void halt(void)
{
    atomic_store(&rperf__engine.running, 0);
    wait_quiescent();
    rperf__engine.cfg.backend->stop();
    atomic_store(&backend_live, 0);
    rperf__worker_stop();
    atomic_store(&rperf__engine.has_results, 1);
}

/* GVL held: close the current window at one instant — the caller's last
 * partial interval, then (worker parked, so no thread is unlinked under
 * the walk) the blocks of threads off the GVL up to the same instant. */
static void close_window(void)
{
    rperf_thread_t *self = rperf_current_thread_sigsafe();
    if (self) rperf__sample_settle(self);
    int64_t now = rperf__mono_ns();   /* after it: no thread's total passes the window */
    rperf__worker_pause();
    rperf__settle_blocked(now);
    rperf__engine.close_mono_ns = now;
}

int rperf_engine_stop(void)
{
    if (!atomic_load(&rperf__engine.running)) return -1;
    close_window();     /* while sampling is on; the worker stays parked */
    halt();
    return 0;
}

void rperf_engine_halt(void)
{
    if (atomic_load(&rperf__engine.running)) halt();
}

void rperf_engine_release(void)
{
    if (!atomic_load(&rperf__engine.has_results)) return;
    free_run();
}

void rperf_engine_pause(void) { close_window(); }

void rperf_engine_resume(bool clear)
{
    if (clear) rperf_engine_clear();
    rperf__engine.close_mono_ns = 0;
    rperf__worker_resume();
}

void rperf_engine_clear(void)
{
    /* a new window: nothing of the closed one stays pinned or kept */
    rperf__agg_clear();
    rperf__engine.table_generation++;
    /* the live heap outlasts the window: its stacks are interned anew */
    rperf__heap_clear_collect();
    rperf__frames_clear();
    rperf__heap_clear_restore();
    rperf__archive_clear();
    reset_counters();
    /* the new window starts where the closed one ended: the blocks
     * recorded up to the close go on from there (resume_wall) */
    int64_t shift = rperf__mono_ns() - rperf__engine.close_mono_ns;
    if (shift > 0) {
        rperf__engine.start_real_ns -= shift;
        rperf__engine.start_mono_ns = rperf__engine.close_mono_ns;
    }
    atomic_store(&rperf__engine.dropped_retired, 0);
    for (rperf_thread_t *pt = atomic_load(&rperf__threads); pt; pt = atomic_load(&pt->next))
        atomic_store(&pt->dropped, 0);
}

int rperf_engine_other_ractor_threads(void)
{
    int n = 0;
    for (rperf_thread_t *pt = atomic_load(&rperf__threads); pt; pt = atomic_load(&pt->next))
        if (!atomic_load(&pt->exited) && rperf_thread_ractor(pt) != 1) n++;
    return n;
}

int rperf_engine_unnumbered_threads(void)
{
    int n = 0;
    for (rperf_thread_t *pt = atomic_load(&rperf__threads); pt; pt = atomic_load(&pt->next))
        if (!atomic_load(&pt->exited) && rperf_thread_ractor(pt) == 0) n++;
    return n;
}

void rperf_engine_each_thread_label(void (*cb)(uint32_t id, void *ctx), void *ctx)
{
    for (rperf_thread_t *pt = atomic_load(&rperf__threads); pt; pt = atomic_load(&pt->next))
        if (!atomic_load(&pt->exited)) cb(rperf_thread_label(pt), ctx);
}

void rperf_engine_fork_reset(void)
{
    if (!atomic_exchange(&rperf__engine.fork_reset_needed, 0)) return;
    /* Nothing here touches Ruby objects: the tokens threads carry are stale
     * since fork_child bumped the run id. */
    rperf__epoch_reset();
    free_run();
}

void rperf_engine_stats(rperf_stats_t *out)
{
    uint64_t dropped = atomic_load(&rperf__engine.dropped_retired);
    for (rperf_thread_t *pt = atomic_load(&rperf__threads); pt; pt = atomic_load(&pt->next))
        dropped += atomic_load(&pt->dropped);
    out->trigger_count = atomic_load(&rperf__engine.trigger_count);
    out->sampling_count = atomic_load(&rperf__engine.sampling_count);
    out->sampling_time_ns = atomic_load(&rperf__engine.sampling_time_ns);
    out->dropped_samples = dropped;
    out->timer_overruns = atomic_load(&rperf__engine.timer_overruns);
    out->detected_threads = atomic_load(&rperf__engine.thread_seq);
    out->start_time_ns = rperf__engine.start_real_ns;
    out->start_mono_ns = rperf__engine.start_mono_ns;
    out->end_mono_ns = rperf__engine.close_mono_ns;
}

/* GC marking: lock-free. Order matters (see ring.c): rings, then the
 * worker's in-flight value, then the frame table (whose old keys a minor
 * marking skips: is_old != NULL). */
void rperf_engine_mark(void (*mark)(rperf_frame_t v), bool (*is_old)(rperf_frame_t v))
{
    if (!atomic_load(&rperf__engine.running) && !atomic_load(&rperf__engine.has_results))
        return;
    ck_epoch_section_t sec;
    ck_epoch_begin(&rperf__epoch_marker, &sec);
    for (rperf_thread_t *pt = atomic_load_explicit(&rperf__threads, memory_order_acquire); pt;
         pt = atomic_load_explicit(&pt->next, memory_order_acquire)) {
        rperf__ring_mark(pt, mark);
        rperf_frame_t root = atomic_load_explicit(&pt->last_root, memory_order_relaxed);
        if (root) mark(root);
    }
    rperf_frame_t v = rperf__inflight;
    if (v && (v & 7u) == 0) mark(v);
    atomic_thread_fence(memory_order_acquire);
    rperf__frames_mark(mark, is_old);
    RPERF_EPOCH_SECTION_END();
    ck_epoch_end(&rperf__epoch_marker, &sec);
}

/* ---- results ------------------------------------------------------------- */

void rperf_synthetic_frame(uint32_t id, const char **path, const char **label)
{
    static const char *const names[RPERF_SYNTHETIC_FRAMES][2] = {
        { "<GVL>", "[GVL blocked]" },
        { "<GVL>", "[GVL wait]" },
        { "<GC>", "[GC marking]" },
        { "<GC>", "[GC sweeping]" },
        { "<unknown>", "[unknown frame]" },
    };
    if (id >= RPERF_SYNTHETIC_FRAMES) id = RPERF_FRAME_UNKNOWN;
    *path = names[id][0];
    *label = names[id][1];
}

size_t rperf_result_frame_count(void) { return rperf__frames_count(); }

rperf_frame_t rperf_result_frame(uint32_t id)
{
    if (id < RPERF_SYNTHETIC_FRAMES || rperf__frames_retired(id - RPERF_SYNTHETIC_FRAMES)) return 0;
    return rperf__frames_at(id - RPERF_SYNTHETIC_FRAMES);
}

bool rperf_result_frame_retired(uint32_t id)
{
    return id >= RPERF_SYNTHETIC_FRAMES && rperf__frames_retired(id - RPERF_SYNTHETIC_FRAMES);
}

void rperf_frames_gc_marked(void)
{
    if (atomic_load(&rperf__engine.running) && rperf__frames_churning()) rperf__worker_drain_soon();
}

size_t rperf_frames_retire_pass(rperf_frame_verdict_t (*judge)(uint32_t id, rperf_frame_t v, void *arg),
                                void *arg)
{
    if (!atomic_load(&rperf__engine.running)) return 0;
    return rperf__frames_retire_pass(judge, arg);
}

size_t rperf_result_aggregated_count(void) { return rperf__agg_count(); }
int rperf_result_each_aggregated(rperf_sample_cb cb, void *ctx) { return rperf__agg_each(cb, ctx); }
uint64_t rperf_result_generation(void) { return rperf__engine.table_generation; }
size_t rperf_result_weights(int64_t *out, size_t cap) { return rperf__agg_weights(out, cap); }
int rperf_result_each_aggregated_since(const int64_t *base, size_t nbase, rperf_sample_cb cb, void *ctx)
{
    return rperf__agg_each_since(base, nbase, cb, ctx);
}
size_t rperf_result_raw_count(void) { return rperf__raw_count(); }

int rperf_result_each_raw(rperf_sample_cb cb, void *ctx)
{
    return rperf__raw_each(cb, ctx, rperf__engine.start_real_ns - rperf__engine.start_mono_ns);
}
