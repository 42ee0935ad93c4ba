/*
 * thread_state.c — per-Ruby-thread state and the time-accounting state
 * machine: GVL events (RESUMED/SUSPENDED/READY/EXITED), GC phases and the
 * sampling job body. Every sample weighs the thread's clock delta since the
 * point up to which its time was last attributed, so totals equal real time.
 *
 * Contexts (see rperf_core.h): rperf_ev_resumed/suspended/exited, the job and
 * the GC events run "own" (on the native thread running the Ruby thread, no
 * Ruby API besides the host's capture callback); rperf_ev_ready may run on
 * any native thread and only stores a timestamp; rperf__settle_blocked runs
 * on the thread closing a window (GVL held, worker parked) for threads
 * parked off the GVL, which cannot run meanwhile (see there); rperf_current_thread_sigsafe
 * is async-signal-safe. The registry list is pushed lock-free (CAS) and
 * unlinked only by the worker; freed nodes go through the worker's epoch.
 *
 * Per-native-thread state lives in initial-exec TLS (a GCC/Clang attribute:
 * the default global-dynamic model may allocate lazily inside a signal
 * handler in a dlopen'ed object; initial-exec never does).
 */
#include "core_internal.h"

#include <sys/syscall.h>
#include <unistd.h>
#include <stddef.h>
#include <string.h>

/* what a GVL switch touches stays within the state's first two lines */
_Static_assert(offsetof(struct rperf_thread, last_cpu) <= 128, "switch fields past two lines");
/* and what recording a sample touches, the third */
_Static_assert(offsetof(struct rperf_thread, last_cpu) % 64 == 0 &&
               offsetof(struct rperf_thread, prod_mask) + sizeof(uint32_t) -
                   offsetof(struct rperf_thread, last_cpu) <= 64,
               "sample fields past one line");

static _Thread_local rperf_nt_t nt_tls __attribute__((tls_model("initial-exec")));
rperf_thread_t *_Atomic rperf__threads;

rperf_nt_t *rperf__nt(void) { return &nt_tls; }

rperf_thread_t *rperf_current_thread_sigsafe(void)
{
    rperf_nt_t *nt = &nt_tls;
    return nt->run_id == rperf__engine.run_id ? nt->cur : NULL;
}

static int64_t threshold_ns(void) { return rperf__engine.interval_ns / 4; }

static bool wall_mode(void) { return rperf__engine.cfg.clock == RPERF_CLOCK_WALL; }

/* This native thread's CPU clock, read here (a system call: it is not in
 * the vDSO), remembered as the latest value used (see job_native_cpu). */
static int64_t read_native_cpu(void)
{
    int64_t v = rperf__native_cpu_ns();
    if (v > nt_tls.cpu_hi) nt_tls.cpu_hi = v;
    return v;
}

/* Read only in cpu mode, where weights need it. Wall mode never reads it
 * per switch. */
static int64_t native_cpu_if_needed(void) { return wall_mode() ? 0 : read_native_cpu(); }

/* A thread announced by STARTED has had its first turn (or exited): see
 * rperf_engine_unsettled_threads. */
static void settle_fresh(rperf_thread_t *pt)
{
    if (!pt->fresh) return;
    pt->fresh = 0;
    atomic_fetch_sub_explicit(&rperf__engine.unsettled, 1, memory_order_release);
}

static const rperf_backend_ops_t *backend(void) { return rperf__engine.cfg.backend; }

/* The backend hears that the thread running here holds its GVL without a
 * RESUMED (see rperf_backend_ops_t.thread_attached). */
static void backend_attach(void)
{
    if (backend() && backend()->thread_attached) backend()->thread_attached();
    else if (backend() && backend()->thread_resumed) backend()->thread_resumed();
}

/* ---- creation / destruction ------------------------------------------- */

static rperf_thread_t *thread_new_failed(void)
{
    atomic_store_explicit(&rperf__engine.thread_new_failed, 1, memory_order_relaxed);
    return NULL;
}

rperf_thread_t *rperf_thread_new(rperf_thread_origin_t origin)
{
    rperf_thread_t *pt = rperf__calloc_lines(sizeof(*pt));
    if (!pt) return thread_new_failed();
    if (rperf__ring_init(pt, rperf__engine.cfg.ring_slots) < 0) {
        rperf__free_lines(pt, sizeof(*pt));
        return thread_new_failed();
    }
    pt->seq = atomic_fetch_add(&rperf__engine.thread_seq, 1) + 1;
    pt->run_id = rperf__engine.run_id;
    if (rperf__index_put(pt) < 0) {
        rperf__thread_destroy(pt);   /* this thread goes unprofiled */
        return thread_new_failed();
    }
    pt->cpu_mark = -1;
    /* A thread first met at RESUMED existed before (or was created during)
     * the run and was off the GVL until now: charge [start, now) as blocked.
     * Its unattributed time (mono - last_wall) starts at the run's start
     * too: counted from now, recording that blocked time at RESUMED pushed
     * last_wall past the present, and in wall mode its next samples (the
     * run after the block, as long again) weighed nothing and were lost. */
    bool existing = origin == RPERF_THREAD_EXISTING;
    int64_t window = atomic_load_explicit(&rperf__engine.start_mono_ns, memory_order_relaxed);
    pt->last_wall = existing ? window : rperf__mono_ns();
    pt->susp_wall = existing ? window : 0;
    pt->fresh = origin == RPERF_THREAD_CREATED;
    pt->head = RPERF_HEAD_EXACT;
    pt->muted = rperf__engine.cfg.deferred || rperf__engine.cfg.alloc_only;
    if (pt->fresh) {
        atomic_store_explicit(&rperf__engine.last_start_mono, rperf__mono_ns(), memory_order_relaxed);
        atomic_fetch_add_explicit(&rperf__engine.unsettled, 1, memory_order_release);
    }
    rperf_thread_t *head = atomic_load_explicit(&rperf__threads, memory_order_relaxed);
    do {
        atomic_store_explicit(&pt->next, head, memory_order_relaxed);
    } while (!atomic_compare_exchange_weak_explicit(&rperf__threads, &head, pt,
                                                    memory_order_release,
                                                    memory_order_relaxed));
    if (origin == RPERF_THREAD_CURRENT) rperf_thread_attach_current(pt);
    return pt;
}

void rperf__thread_destroy(rperf_thread_t *pt)
{
    rperf__ring_free(pt);
    rperf__free_lines(pt, sizeof(*pt));
}

static void destroy_cb(ck_epoch_entry_t *e)
{
    RPERF_EPOCH_RECLAIM();
    rperf_thread_t *pt = (rperf_thread_t *)((char *)e - offsetof(rperf_thread_t, epoch_entry));
    rperf__thread_destroy(pt);
}

/* worker: unlink an exited, drained thread and free it after a grace period. */
void rperf__thread_retire(rperf_thread_t *prev, rperf_thread_t *pt)
{
    rperf_thread_t *next = atomic_load_explicit(&pt->next, memory_order_relaxed);
    if (prev) {
        atomic_store_explicit(&prev->next, next, memory_order_release);
    } else {
        rperf_thread_t *expect = pt;
        if (!atomic_compare_exchange_strong(&rperf__threads, &expect, next)) {
            /* new threads were pushed in front: find the predecessor */
            rperf_thread_t *p = expect;
            while (atomic_load(&p->next) != pt) p = atomic_load(&p->next);
            atomic_store_explicit(&p->next, next, memory_order_release);
        }
    }
    atomic_fetch_add(&rperf__engine.dropped_retired, atomic_load(&pt->dropped));
    rperf__index_clear(pt);
    rperf__thread_archive(pt);
    ck_epoch_call(&rperf__epoch_worker, &pt->epoch_entry, destroy_cb);
}

/* GVL held; worker joined (stop) or gone (fork child). Ruby threads keep
 * the tokens stored on them: stale from now on (thread_index.c). */
void rperf__threads_free_all(void)
{
    rperf__index_reset();
    rperf_thread_t *pt = atomic_exchange(&rperf__threads, NULL);
    while (pt) {
        rperf_thread_t *next = atomic_load(&pt->next);
        rperf__thread_destroy(pt);
        pt = next;
    }
}

/* ---- recording helpers (own) ------------------------------------------- */

/* Capture pt's stack (pt runs here) and remember its root-most frame. */
static int capture(rperf_thread_t *pt, rperf_frame_t *buf)
{
    int d = rperf__engine.host.capture ? rperf__engine.host.capture(buf, RPERF_MAX_DEPTH) : 0;
    if (d <= 0) return 0;
    atomic_store_explicit(&pt->last_root, buf[d - 1], memory_order_relaxed);
    return d;
}

/* Current CPU time of the Ruby thread (on-GVL time accumulated across native
 * threads, so it stays right under M:N). Valid only while it runs here. */
static int64_t ruby_cpu_now(rperf_thread_t *pt, int64_t native)
{
    return pt->cpu_acc + (pt->cpu_mark >= 0 ? native - pt->cpu_mark : 0);
}

/* own, inside a backend's thread_resumed: the engine's clock reading of
 * this RESUMED (set by rperf_ev_resumed just before it calls the backend). */
int64_t rperf_resumed_mono(void) { return nt_tls.resumed_mono; }

void rperf_resume_was_slow(void) { nt_tls.resume_slow = true; }

/* Any context (gettid is async-signal-safe): the calling native thread's
 * kernel thread id, read once per native thread. */
int32_t rperf_native_tid(void)
{
    rperf_nt_t *nt = &nt_tls;
    if (!nt->tid) nt->tid = (int32_t)syscall(SYS_gettid);
    return nt->tid;
}

static void set_current(rperf_thread_t *pt)
{
    rperf_nt_t *nt = &nt_tls;
    rperf_native_tid();
    nt->cur = pt;
    nt->run_id = rperf__engine.run_id;
    if (pt->native_tid != nt->tid) pt->native_tid = nt->tid;
}

void rperf_thread_attach_current(rperf_thread_t *pt)
{
    settle_fresh(pt);
    pt->cpu_mark = native_cpu_if_needed();
    pt->mark_mono = rperf__mono_ns();
    pt->mark_idle = 0;
    pt->last_cpu = pt->cpu_acc;
    pt->susp_wall = 0;
    pt->settled_wall = 0;
    set_current(pt);
    if (!pt->muted) backend_attach();
}

/* Wall mode: record `blocked` / `wait` of the [GVL blocked] / [GVL wait]
 * time pending on `frames` (a block's stack, or at a window's close the
 * thread's stack then). What cannot be recorded (ring at its limit) stays
 * pending. Invariant: mono - last_wall is the thread's unattributed time,
 * pend_blocked + pend_wait of it off the GVL. */
static void record_gvl(rperf_thread_t *pt, int64_t mono, const rperf_frame_t *frames, int depth,
                       int64_t blocked, int64_t wait)
{
    if (blocked > 0 && wait > 0) {           /* both in one record (ring.c) */
        if (rperf__ring_push_pair(pt, RPERF_SAMPLE_GVL_BLOCKED, blocked, wait, mono, frames, depth)) {
            pt->last_wall += blocked + wait;
            pt->pend_blocked -= blocked;
            pt->pend_wait -= wait;
        }
        return;
    }
    if (blocked > 0 && rperf__ring_push(pt, RPERF_SAMPLE_GVL_BLOCKED, blocked, mono, frames, depth)) {
        pt->last_wall += blocked;
        pt->pend_blocked -= blocked;
    }
    if (wait > 0 && rperf__ring_push(pt, RPERF_SAMPLE_GVL_WAIT, wait, mono, frames, depth)) {
        pt->last_wall += wait;
        pt->pend_wait -= wait;
    }
}

static void record_pending_gvl(rperf_thread_t *pt, int64_t mono, const rperf_frame_t *frames,
                               int depth)
{
    record_gvl(pt, mono, frames, depth, pt->pend_blocked, pt->pend_wait);
}

/* Time just recorded is no longer unattributed. */
static void attributed(rperf_thread_t *pt, int64_t w)
{
    if (wall_mode()) pt->last_wall += w;
    else pt->last_cpu += w;
}

/* GC steps are timed on the monotonic clock in both modes (a step never
 * blocks, so its wall time is its CPU time but for a preemption; the thread
 * CPU clock would cost two system calls per step, and lazy sweeping makes
 * thousands of steps a second). cpu mode: the pending GC time is cut to
 * `room`, the thread's unattributed CPU time, so the profile never holds
 * more CPU time than the thread used. */
static void clamp_pending_gc(rperf_thread_t *pt, int64_t room)
{
    if (room < 0) room = 0;
    if (pt->pend_gc_mark > room) pt->pend_gc_mark = room;
    if (pt->pend_gc_sweep > room - pt->pend_gc_mark) pt->pend_gc_sweep = room - pt->pend_gc_mark;
}

/* Record the [GC marking] / [GC sweeping] time still pending on `frames`
 * (the stack of the sample it rides on, or of a step that made it worth a
 * capture). What cannot be recorded (ring at its limit) stays pending. */
static void record_pending_gc(rperf_thread_t *pt, int64_t mono, const rperf_frame_t *frames,
                              int depth)
{
    if (pt->pend_gc_mark > 0 && pt->pend_gc_sweep > 0) {   /* one record (ring.c) */
        if (rperf__ring_push_pair(pt, RPERF_SAMPLE_GC_MARKING, pt->pend_gc_mark, pt->pend_gc_sweep,
                                  mono, frames, depth)) {
            attributed(pt, pt->pend_gc_mark + pt->pend_gc_sweep);
            pt->pend_gc_mark = 0;
            pt->pend_gc_sweep = 0;
        }
        return;
    }
    if (pt->pend_gc_mark > 0 &&
        rperf__ring_push(pt, RPERF_SAMPLE_GC_MARKING, pt->pend_gc_mark, mono, frames, depth)) {
        attributed(pt, pt->pend_gc_mark);
        pt->pend_gc_mark = 0;
    }
    if (pt->pend_gc_sweep > 0 &&
        rperf__ring_push(pt, RPERF_SAMPLE_GC_SWEEPING, pt->pend_gc_sweep, mono, frames, depth)) {
        attributed(pt, pt->pend_gc_sweep);
        pt->pend_gc_sweep = 0;
    }
}

/* The late rule. A tick's job runs at the thread's first safepoint after
 * the tick: right after it in Ruby code, but after a C call that keeps the
 * GVL (JSON parsing, a regexp, a sort) or a long GC step only when that
 * returns, possibly intervals later. The stack it finds (the call: the job
 * runs at its method's `leave`) is the one the tick found, and all of
 * [tick, now] is the call's. What is not known is where the call began:
 * the time since the previous sample also holds the end of the code before
 * it, the "head" the call takes, on average the time from a moment back to
 * the tick before it.
 *
 *  - Ending the sample at the tick leaves the call's own tail to the next
 *    code, which balances the head on average: unbiased, but each call's
 *    time is off by the difference of two random spans of up to an
 *    interval or two, back-to-back C calls included (MRE 0.9 % at 1 kHz
 *    on the accuracy harness's `cw` family with periodic ticks).
 *  - Ending it now keeps the tail and the head: biased by the mean head
 *    per call (0.6 ms of Ruby work before each 3 ms call got ~30 % of its
 *    time: tests/ruby/test_modes.rb,
 *    test_work_before_a_long_holding_call_keeps_its_share).
 *  - So it ends now less late_tail_ns, the mean head: what it leaves to
 *    the next code is a constant instead of a random span, and a call that
 *    follows another one gains exactly what that one left, so back-to-back
 *    calls come out exact (MRE 0.03 %). When the thread's time starts at an
 *    exact boundary (RPERF_HEAD_EXACT: the window's or the thread's start,
 *    or the end of a call sampled this way; or the first tick's sample in
 *    the glue right after one, RPERF_HEAD_FIRST_TICK) the call took no
 *    head and keeps everything. A tick's sample of Ruby code anywhere else
 *    leaves RPERF_HEAD_TICK, the usual case, and a thread stays there
 *    until the next window starts (a late sample from there leaves the
 *    mean head again).
 *
 * A job is late when its oldest unanswered tick is late_after_ns old: a
 * quarter interval, at most 50 us, well above the latency from a trigger to
 * its safepoint (median 1.3 us, 99th percentile 8 us here). late_tail_ns is
 * the mean time from a moment back to the tick before it: half an interval
 * for periodic ticks, 7/12 for one at a uniform moment of each interval, a
 * whole interval for Poisson ticks (docs/architecture.md, "Why the weights
 * are exact"). */
void rperf__late_rule_init(void)
{
    int64_t p = rperf__engine.interval_ns;
    double tail;
    const rperf_backend_ops_t *b = backend();
    switch (b ? b->ticks : RPERF_TICKS_PERIODIC) {
    case RPERF_TICKS_JITTERED: tail = 7.0 / 12; break;
    case RPERF_TICKS_POISSON: tail = 1; break;
    default: tail = 0.5; break;
    }
    rperf__engine.late_after_ns = p / 4 < 50000 ? p / 4 : 50000;
    rperf__engine.late_tail_ns = (int64_t)(tail * (double)p);
}

/* In a tick's job (own): whether it runs late (the late rule above): its
 * first tick not yet answered is late_after_ns old or more and found the
 * thread holding its GVL (after its RESUMED on this native thread, and
 * after its previous sample). The first such tick, not the latest: a C
 * call takes every tick of its length, and one that lands in its last
 * microseconds leaves the job close to the latest tick all the same. */
static bool job_is_late(rperf_thread_t *pt, int64_t mono)
{
    int64_t t = atomic_load_explicit(&rperf__engine.tick_first_mono, memory_order_relaxed);
    if (t <= pt->last_wall || t < nt_tls.resumed_mono)
        t = atomic_load_explicit(&rperf__engine.tick_mono, memory_order_relaxed);
    return t > 0 && t < mono && mono - t >= rperf__engine.late_after_ns && t > pt->last_wall &&
           t >= nt_tls.resumed_mono;
}

/* cpu mode, in the job: this native thread's CPU clock. A backend that
 * read it for this tick from its own thread (the holder's timer thread,
 * the signal handler) offers that reading, which spares the application
 * thread the system call (~1.1 us on a VM, at every sample). It is taken
 * when the job ran right after it (less than late_after_ns: the sample
 * then ends at the reading, and the CPU time between it and the job goes
 * to the next sample), and only if no reading made on this thread since
 * is larger (the clock is monotonic per native thread, so a smaller value
 * was taken before one the accounting already used: taking it would count
 * some CPU time twice or not at all). A late job reads the clock itself
 * (sample_now): its sample ends then, less what the late rule leaves. */
static int64_t job_native_cpu(int64_t mono)
{
    const rperf_backend_ops_t *b = backend();
    int64_t cpu, at;
    if (b && b->tick_cpu && b->tick_cpu(&cpu, &at) == 0 && at <= mono && cpu >= nt_tls.cpu_hi &&
        mono - at < rperf__engine.late_after_ns) {
        nt_tls.cpu_hi = cpu;
        return cpu;
    }
    return read_native_cpu();
}

/* Record the normal sample covering [last attributed point, now), less the
 * GC (and in wall mode GVL) time pending since then, and less what the late
 * rule leaves. A tick leaves that pending time for a GC step's or a block's
 * stack (rperf_ev_gc, resume_wall); a window's close (job false) settles it
 * here, on the same stack. A late job captures the stack first and ends
 * its sample after that: it runs inside the call (at its method's leave),
 * so its own time is the call's, and the code after the call starts once
 * it returns. */
static void sample_now(rperf_thread_t *pt, bool job)
{
    /* outside profile blocks (deferred run): nothing to record, and the
     * ticks stay for a thread inside one */
    if (pt->muted) return;
    int64_t mono = rperf__mono_ns(), began = mono;
    bool late = job && job_is_late(pt, mono);
    if (!wall_mode() && pt->cpu_mark < 0) return;
    rperf_frame_t frames[RPERF_MAX_DEPTH];
    int depth = -1;
    int64_t native = 0;
    if (late) {
        depth = capture(pt, frames);
        if (depth == 0) return;              /* keep the time pending */
        mono = rperf__mono_ns();
        if (!wall_mode()) native = read_native_cpu();
    } else if (!wall_mode()) {
        native = job ? job_native_cpu(mono) : read_native_cpu();
    }
    int64_t leave = late && pt->head == RPERF_HEAD_TICK ? rperf__engine.late_tail_ns : 0;
    /* an on-time sample this soon after an exact boundary is in the glue
     * between two calls (the late rule) */
    bool glue = mono - pt->last_wall < rperf__engine.late_after_ns;
    int64_t weight;
    if (!wall_mode()) {
        int64_t room = ruby_cpu_now(pt, native) - pt->last_cpu;
        clamp_pending_gc(pt, room);
        weight = room - pt->pend_gc_mark - pt->pend_gc_sweep;
    } else {
        int64_t pend = pt->pend_blocked + pt->pend_wait + pt->pend_gc_mark + pt->pend_gc_sweep;
        weight = mono - pt->last_wall - pend;
    }
    /* what it leaves is an estimate: a sample that has less keeps a
     * nanosecond, so that its tick still counts as answered */
    if (leave > 0 && weight > 0) weight = weight > leave ? weight - leave : 1;
    bool normal = weight > 0;
    bool settle_gc = !job && pt->pend_gc_mark + pt->pend_gc_sweep > 0;
    bool settle_gvl = wall_mode() && !job && pt->pend_blocked + pt->pend_wait > 0;
    if (!normal && !settle_gc && !settle_gvl) return;
    if (depth < 0) depth = capture(pt, frames);
    if (depth == 0) return;                  /* keep the time pending */
    if (normal) {
        if (!rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, weight, mono, frames, depth)) return;
        attributed(pt, weight);
        /* cpu mode keeps last_wall as the time of its latest sample (job_is_late) */
        if (!wall_mode()) pt->last_wall = mono;
        pt->head = !job || late ? (leave > 0 ? RPERF_HEAD_TICK : RPERF_HEAD_EXACT)
                   : pt->head == RPERF_HEAD_EXACT && glue ? RPERF_HEAD_FIRST_TICK
                   : RPERF_HEAD_TICK;
    }
    if (settle_gc) record_pending_gc(pt, mono, frames, depth);
    if (settle_gvl) record_pending_gvl(pt, mono, frames, depth);
    if (!normal) return;
    /* A job run counts as a timer sample when it consumes triggered ticks
     * (coalesced ticks are consumed together). */
    if (job && atomic_exchange_explicit(&rperf__engine.outstanding, 0, memory_order_relaxed) > 0) {
        nt_tls.answered = (uint32_t)atomic_load_explicit(&rperf__engine.tick_seq,
                                                         memory_order_relaxed) + 1;
        atomic_fetch_add_explicit(&rperf__engine.sampling_count, 1, memory_order_relaxed);
        int64_t spent = rperf__mono_ns() - began;
        if (spent > 0)
            atomic_fetch_add_explicit(&rperf__engine.sampling_time_ns, (uint64_t)spent,
                                      memory_order_relaxed);
    }
}

/* ---- the sampling job (own, GVL held) ----------------------------------- */

/* The job runs at the first safepoint of a thread whose execution context
 * was flagged; a tick can flag a thread that is off its GVL (:nanosleep
 * triggers the main Ractor's last running thread whether or not it holds
 * the GVL; any backend's trigger can be answered by another thread's
 * flush of the VM-global job bitset), and that thread then runs the job
 * right after its RESUMED, on the stack of the call that released the
 * GVL. Sampled there, its on-GVL time before the call (since its previous
 * sample) went to the call: 1.5 ms of work before each 20 ms sleep got
 * 0.73x its time and each sleep +400 us on :nanosleep. When even the
 * latest tick came before this thread's latest RESUMED on this native
 * thread, no tick this job answers found it holding its GVL: it samples
 * nothing and its time stays for the next tick that does. The tick stays
 * unconsumed, as for a job with nothing to sample: :holder reads that as
 * its direct trigger not reaching the holder (it flagged a thread that is
 * waiting for its first turn) and signals the holder instead. */
static bool ticks_before_resumed(void)
{
    int64_t t = atomic_load_explicit(&rperf__engine.tick_mono, memory_order_relaxed);
    return t > 0 && t < nt_tls.resumed_mono;
}

void rperf_sample_job(rperf_thread_t *pt)
{
    if (!pt) pt = rperf_current_thread_sigsafe();
    if (!pt) return;
    if (backend() && backend()->job_ran) backend()->job_ran();
    if (ticks_before_resumed()) return;
    /* A tick that came while the previous run of the job on this native
     * thread was sampling was consumed by it, but flagged the job again:
     * this run, at the next safepoint, answers no tick (sampling here
     * would cut the time at a moment no tick chose). */
    if ((uint32_t)atomic_load_explicit(&rperf__engine.tick_seq, memory_order_relaxed) + 1 ==
        nt_tls.answered)
        return;
    /* The job is timed on the monotonic clock (vDSO, no system call; the
     * job never blocks, so its duration is its CPU time but for a
     * preemption): the thread CPU clock is a system call, needed only in
     * cpu mode, and taken from the backend when it has read it already
     * (job_native_cpu). */
    sample_now(pt, true);
}

/* own, GVL held: settle the caller's last partial interval at stop/snapshot
 * (not a timer-driven sample: not counted in sampling_count). */
void rperf__sample_settle(rperf_thread_t *pt)
{
    sample_now(pt, false);
}

/* ---- GVL events ---------------------------------------------------------- */

void rperf_ev_ready(rperf_thread_t *pt)
{
    atomic_store_explicit(&pt->ready_wall, rperf__mono_ns(), memory_order_relaxed);
}

void rperf_ev_ready_at(rperf_thread_t *pt, int64_t mono_ns)
{
    if (mono_ns > atomic_load_explicit(&pt->ready_wall, memory_order_relaxed))
        atomic_store_explicit(&pt->ready_wall, mono_ns, memory_order_relaxed);
}

int64_t rperf_mono_ns(void) { return rperf__mono_ns(); }

int64_t rperf_ev_ready_here(void)
{
    rperf_nt_t *nt = &nt_tls;
    int64_t now = rperf__mono_ns();
    atomic_store_explicit(&nt->ready_mono, now, memory_order_relaxed);
    atomic_store_explicit(&nt->ready_switches, nt->switches, memory_order_relaxed);
    return now;
}

/* own, at RESUMED: when pt became ready since its SUSPENDED, 0 if unknown.
 * A READY on this native thread counts if no RESUMED came here since pt
 * suspended here (the host saw pt's identity); otherwise the one stored on
 * pt by rperf_ev_ready or rperf_ev_ready_at, if any (cleared at SUSPENDED). */
static int64_t ready_here(const rperf_thread_t *pt, rperf_nt_t *nt)
{
    if (pt->susp_nt != nt) return 0;
    int64_t at = atomic_load_explicit(&nt->ready_mono, memory_order_relaxed);
    uint64_t sw = atomic_load_explicit(&nt->ready_switches, memory_order_relaxed);
    return sw == pt->susp_switches ? at : 0;
}

static int64_t ready_since_suspended(rperf_thread_t *pt, rperf_nt_t *nt, int64_t mono,
                                     bool *slept)
{
    int64_t susp = pt->susp_wall;
    int64_t here = ready_here(pt, nt);
    int64_t ready = here;
    int64_t other = atomic_load_explicit(&pt->ready_wall, memory_order_relaxed);
    if (other > 0) {
        /* READY came before this RESUMED, and the next one comes only after
         * the next SUSPENDED: a plain read and clear suffice (no locked
         * instruction inside the scheduler's lock). */
        atomic_store_explicit(&pt->ready_wall, 0, memory_order_relaxed);
        if (other > ready) ready = other;
    }
    /* Readied from another native thread and not from its own: a waker
     * (Queue, Mutex, ConditionVariable, join) or Ruby's timer thread ended
     * a wait in Ruby's scheduler, where the thread slept from SUSPENDED on
     * (Ruby 3.3 thread_pthread.c: ubf_waiting, timer_thread_wakeup_thread,
     * rb_ractor_sched_wakeup). The end of a blocking region (IO, a C call
     * that released the GVL, a timed sleep on a native thread of its own)
     * is readied on the thread's own native thread. */
    *slept = other >= susp && other <= mono && !(here >= susp && here <= mono && here > 0);
    return ready < susp || ready > mono ? 0 : ready;
}

/* cpu mode, at RESUMED (own): settle the CPU time of the interval that
 * ended at SUSPENDED and of the time off the GVL since, and open the next
 * on-GVL interval. Returns the clock reading now open (cpu_mark).
 *
 * The thread CPU clock is a system call, and both GVL events run inside
 * Ruby's scheduler lock, where every nanosecond costs the process several
 * (docs/performance.md, "A GVL switch"). So a short on-GVL interval is left
 * open at SUSPENDED (no reading), and a short time off the GVL on the same
 * native thread leaves it open here too: that CPU time would only be kept
 * pending for the next sample anyway, which reads the clock itself, so
 * the sums are the same as with a reading at every event. Only a long
 * stretch off the GVL before READY (after it the thread only waits for its
 * turn) needs the split (its CPU time is charged to the stack that
 * released the GVL): then the part of the open interval before SUSPENDED
 * is taken as at most its wall time less its waits for the GVL (mark_idle),
 * so what is charged to the releasing call is never more than its own CPU
 * time, and short by at most the rest of that wall time the thread spent
 * off its CPU (preempted, or blocked briefly): less than a quarter
 * interval, since SUSPENDED reads the clock past that. */
static int64_t resume_cpu(rperf_thread_t *pt, rperf_nt_t *nt, int64_t mono)
{
    bool same_nt = pt->susp_nt == nt && pt->susp_switches + 1 == nt->switches;
    bool open = pt->cpu_mark >= 0;             /* not read at SUSPENDED */
    /* CPU time off the GVL is burned before READY: after it the thread only
     * waits for its turn. Without a READY seen, the whole absence counts. */
    int64_t off_wall = 0, waited = 0;
    bool slept = false;
    if (pt->susp_wall > 0) {
        int64_t ready = ready_since_suspended(pt, nt, mono, &slept);
        off_wall = (ready ? ready : mono) - pt->susp_wall;
        waited = ready ? mono - ready : 0;
    }
    /* A thread that slept in Ruby's scheduler until another thread readied
     * it burned no CPU meanwhile: its whole absence is idle, like a wait
     * for the GVL, and needs no clock reading to split, however long
     * (a pool thread waking from Queue#pop: one system call less). */
    if (slept) {
        waited += off_wall;
        off_wall = 0;
    }
    if (same_nt && off_wall < threshold_ns()) {
        if (open) {                             /* the interval goes on */
            pt->mark_idle += waited;
            return pt->cpu_mark;
        }
        /* closed at SUSPENDED, nothing else ran here since: that reading
         * opens the next interval (the same sums as reading now) */
        pt->mark_mono = pt->susp_wall;
        pt->mark_idle = waited;
        return pt->susp_native_cpu;
    }
    /* wall time of the open interval that may hold CPU time (not waits) */
    int64_t busy = pt->susp_wall - pt->mark_mono - pt->mark_idle;
    int64_t native = read_native_cpu();
    if (!same_nt) {
        /* Another native thread's clock (M:N, or another Ruby thread ran
         * on this one): the CPU time off the GVL is not measurable. An
         * interval left open is counted as its wall time (short, see
         * suspended); from now on this thread reads at every SUSPENDED. */
        if (open && busy > 0) pt->cpu_acc += busy;
        if (pt->susp_nt) pt->migrates = 1;
    } else {
        int64_t off;
        if (open) {
            int64_t total = native - pt->cpu_mark;
            int64_t on = busy;
            if (on > total) on = total;
            if (on < 0) on = 0;
            pt->cpu_acc += on;
            off = total - on;
        } else {
            off = native - pt->susp_native_cpu;
        }
        /* Nothing else ran on this native thread since SUSPENDED: its CPU
         * time meanwhile was burned by this Ruby thread off the GVL (C code
         * that released it). Attribute it to the stack that released it. */
        if (off >= threshold_ns() && off > 0) {
            rperf_frame_t frames[RPERF_MAX_DEPTH];
            int depth = capture(pt, frames);
            if (depth > 0 && rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, off, mono, frames, depth))
                off = 0;
        }
        if (off > 0) pt->cpu_acc += off;    /* pending: goes to the next sample */
    }
    pt->mark_mono = mono;
    pt->mark_idle = 0;
    return native;
}

/* Wall mode: add pt's time off the GVL up to `now` to its pending
 * [GVL blocked] (until `ready`, 0 = no READY seen) and [GVL wait] (after).
 * It counts from SUSPENDED, or from where a window's close recorded it up
 * to (rperf__settle_blocked); a READY before that point means the thread
 * was already waiting then. A block that began before the current window
 * and was not recorded at its close (another Ractor's thread) counts from
 * the window's start: the closed window's part is dropped (its result is
 * out already), so a thread idle for an hour does not put an hour of
 * [GVL blocked] into a one-minute window; last_wall moves past the dropped
 * part, so it does not turn into run time either. */
static void add_off_gvl(rperf_thread_t *pt, int64_t ready, int64_t now)
{
    int64_t from = pt->susp_wall > pt->settled_wall ? pt->susp_wall : pt->settled_wall;
    int64_t window = atomic_load_explicit(&rperf__engine.start_mono_ns, memory_order_relaxed);
    if (from < window) {
        pt->last_wall += window - from;
        from = window;
    }
    if (ready && ready < from) ready = from;
    int64_t blocked = (ready ? ready : now) - from;
    int64_t wait = ready ? now - ready : 0;
    if (blocked > 0) pt->pend_blocked += blocked;
    if (wait > 0) pt->pend_wait += wait;
}

/* The time in short GVL blocks or GC steps until the next one is sampled,
 * uniform in [interval/2, 3 interval/2) (xorshift32 per thread, own
 * context). The mean is an interval; the spread keeps a loop of blocks
 * from locking onto one phase (two alternating calls of half an interval
 * each would otherwise have every sample land on the second). */
static int64_t next_gap(rperf_thread_t *pt)
{
    uint32_t x = pt->gap_rng ? pt->gap_rng : (pt->seq * 2654435761u) | 1u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    pt->gap_rng = x;
    int64_t iv = rperf__engine.interval_ns;
    return iv / 2 + (int64_t)(((uint64_t)x * (uint64_t)iv) >> 32);
}

/* Take `w` of short blocks or steps off `*left` (the gap still to go; 0:
 * none drawn yet in this run). True when it passed: the caller samples
 * this one, and `*left` holds the next gap, less the overshoot. */
static bool gap_passed(rperf_thread_t *pt, int64_t *left, int64_t w)
{
    if (*left == 0) *left = next_gap(pt);
    *left -= w;
    if (*left > 0) return false;
    *left += next_gap(pt);
    if (*left <= 0) *left = next_gap(pt);
    return true;
}

/* Wall mode, at RESUMED (own): the time since SUSPENDED was [GVL blocked]
 * until READY and [GVL wait] since.
 *
 * A block of an interval or more is recorded now, on the stack that
 * released the GVL: the releasing call gets exactly its own time (only
 * this block's; time left pending by shorter ones stays pending). Shorter
 * blocks are sampled, as the ticks sample the time on the GVL: their time
 * accumulates, and when it passes a gap drawn around an interval
 * (next_gap, gap_passed), everything pending is recorded on the stack of the block
 * that passed it. A block is that one with a chance in proportion to its
 * length, so a call site's expected share is its own, and the captures are
 * bounded by the sampling rate, not by the switch rate: a server's threads
 * make tens of thousands of short blocks a second (the `switch` workload
 * captured a stack every ~2 hand-offs with a quarter-interval rule, `io`
 * at every one). The thread's ticks leave this time pending (sample_now),
 * so it never lands on the Ruby code the thread ran between its blocks; a
 * window's close and the thread's exit settle what is left. */
static void resume_wall(rperf_thread_t *pt, int64_t mono)
{
    if (pt->susp_wall <= 0) return;
    if (pt->muted) return;               /* outside profile blocks: nothing to record */
    bool slept;
    int64_t b0 = pt->pend_blocked, w0 = pt->pend_wait;
    add_off_gvl(pt, ready_since_suspended(pt, &nt_tls, mono, &slept), mono);
    int64_t blocked = pt->pend_blocked - b0, wait = pt->pend_wait - w0;
    bool whole = blocked + wait >= rperf__engine.interval_ns;
    if (!whole && !gap_passed(pt, &pt->gvl_left, blocked + wait)) return;
    rperf_frame_t frames[RPERF_MAX_DEPTH];
    int depth = capture(pt, frames);
    if (depth <= 0) return;                       /* stays pending */
    if (whole) record_gvl(pt, mono, frames, depth, blocked, wait);
    else record_pending_gvl(pt, mono, frames, depth);
}

/* Wall mode, GVL held by the caller (main Ractor), worker parked: a window
 * closes (snapshot, stop). Every main-Ractor thread off the GVL gets the
 * time it has spent off it so far recorded now, on its stack (the call that
 * released the GVL), instead of at its RESUMED, which may come in a later
 * window or never (a pool thread parked for the whole run; a call in
 * progress at stop). So each window holds each thread's wall time within
 * it. Such a thread cannot resume, push or exit meanwhile: its RESUMED
 * needs the GVL the caller holds, and a dying thread fires its EXITED
 * under the scheduler lock before handing the GVL over (Ruby 3.3
 * thread_sched_to_dead), so `exited` is final here; its Ruby thread is
 * alive (marked and pinned by its Ractor), so the host may read its stack.
 * Left out: threads of other Ractors (their GVLs are their own), of no
 * known Ractor, not yet run (fresh), or without a host handle.
 * READY on the thread's own native thread (the end of IO, sleep, a C call)
 * is stamped there (rperf_ev_ready_here); that native thread is alive
 * while its Ruby thread is (1:1 threads), so it is read too. Under M:N a
 * native thread may be gone or serve others: such a wait counts as
 * [GVL blocked] up to the close (its RESUMED still splits the rest).
 * The thread's on-GVL time before its suspension stays pending for its
 * next sample, as at RESUMED. */
void rperf__settle_blocked(int64_t now)
{
    if (!wall_mode() || !rperf__engine.host.capture_thread) return;
    rperf_thread_t *self = rperf_current_thread_sigsafe();
    for (rperf_thread_t *pt = atomic_load_explicit(&rperf__threads, memory_order_acquire); pt;
         pt = atomic_load_explicit(&pt->next, memory_order_acquire)) {
        if (pt == self || pt->fresh || pt->susp_wall <= 0 || pt->susp_wall > now ||
            atomic_load_explicit(&pt->exited, memory_order_acquire) ||
            rperf_thread_ractor(pt) != 1)
            continue;
        uintptr_t ref = atomic_load_explicit(&pt->host_ref, memory_order_relaxed);
        if (!ref) continue;
        rperf_frame_t frames[RPERF_MAX_DEPTH];
        int depth = rperf__engine.host.capture_thread(ref, frames, RPERF_MAX_DEPTH);
        if (depth <= 0) continue;                 /* left for its RESUMED */
        int64_t ready = atomic_load_explicit(&pt->ready_wall, memory_order_relaxed);
        if (rperf__engine.host.thread_ready_at) {
            int64_t kept = rperf__engine.host.thread_ready_at(ref);
            if (kept > ready) ready = kept;
        }
        if (!rperf__engine.cfg.main_mn && pt->susp_nt) {
            int64_t here = ready_here(pt, pt->susp_nt);
            if (here > ready) ready = here;
        }
        add_off_gvl(pt, ready < pt->susp_wall || ready > now ? 0 : ready, now);
        pt->settled_wall = now;
        atomic_store_explicit(&pt->last_root, frames[depth - 1], memory_order_relaxed);
        record_pending_gvl(pt, now, frames, depth);
        record_pending_gc(pt, now, frames, depth);
        rperf__worker_drain_thread(pt);
    }
}

/* The backend hears first: what it does here is part of the thread's way
 * back to its Ruby code, so a slow step (a parked timer thread woken,
 * rperf_resume_was_slow) is timed into the wait that ends at RESUMED, the
 * one clock read taken again only then. (Timed before it, the step, ~25 us
 * per wake-up on this VM, went to the thread's next sample, outside the
 * call that released the GVL: sleep(20 ms) after each idle gap lost ~35 us
 * a call; docs/backends.md "An idle process: the tick thread parks".) The backend may mark the
 * thread a holder before the accounting below: a tick it delivers now
 * takes effect in a job, which runs after this hook. */
void rperf_ev_resumed(rperf_thread_t *pt)
{
    rperf_nt_t *nt = &nt_tls;
    nt->switches++;
    int64_t mono = rperf__mono_ns();
    nt->resumed_mono = mono;
    set_current(pt);
    if (!pt->muted && backend() && backend()->thread_resumed) {
        nt->resume_slow = false;
        backend()->thread_resumed();
        if (nt->resume_slow) {
            mono = rperf__mono_ns();
            nt->resumed_mono = mono;
        }
    }
    if (pt->fresh) {
        /* First run of a thread created during the run: the wait for its
         * first turn has no Ruby frame to charge (its block has not started)
         * and is not time the thread spent running; its clock starts now. */
        settle_fresh(pt);
        pt->last_wall = mono;
        pt->cpu_mark = native_cpu_if_needed();
        pt->mark_mono = mono;
        pt->mark_idle = 0;
    } else if (wall_mode()) {
        resume_wall(pt, mono);
    } else {
        pt->cpu_mark = resume_cpu(pt, nt, mono);
    }
    pt->susp_wall = 0;
    pt->settled_wall = 0;
    pt->susp_nt = NULL;
}

/* cpu mode, at SUSPENDED (own): close the on-GVL interval with a clock
 * reading, or leave it open when it is short (resume_cpu). */
static void suspend_cpu(rperf_thread_t *pt, int64_t mono)
{
    if (pt->cpu_mark >= 0 && !pt->migrates &&
        mono - pt->mark_mono - pt->mark_idle < threshold_ns()) {
        pt->susp_native_cpu = -1;
        return;
    }
    int64_t native = read_native_cpu();
    if (pt->cpu_mark >= 0) pt->cpu_acc += native - pt->cpu_mark;
    pt->cpu_mark = -1;
    pt->susp_native_cpu = native;
}

void rperf_ev_suspended(rperf_thread_t *pt)
{
    rperf_nt_t *nt = &nt_tls;
    if (!pt->muted && backend() && backend()->thread_suspended) backend()->thread_suspended();
    int64_t mono = rperf__mono_ns();
    /* The on-GVL time since the last sample stays pending for the thread's
     * next tick, in both modes: the stack at SUSPENDED is always the
     * releasing call's (IO#read, Thread#join, Queue#pop...), so charging it
     * the time since the last sample (spent mostly before the call) would
     * bias every GVL-releasing call upwards; a tick lands at a random
     * on-GVL moment instead. (A sample here in cpu mode gives Thread#join
     * a quarter of a Thread.new/work/join/work loop's weight for no CPU;
     * test_modes.rb test_work_around_thread_new_and_join_gets_its_share.) */
    if (!wall_mode()) suspend_cpu(pt, mono);
    pt->susp_wall = mono;
    pt->susp_nt = nt;
    pt->susp_switches = nt->switches;
    atomic_store_explicit(&pt->ready_wall, 0, memory_order_relaxed);
    if (nt->cur == pt) nt->cur = NULL;
}

void rperf_ev_exited(rperf_thread_t *pt)
{
    rperf_nt_t *nt = &nt_tls;
    /* Settle the time still pending: the thread's frames are gone (its
     * block has returned), so it goes to the root-most frame of its last
     * capture — the thread's block in practice. */
    int64_t mono = rperf__mono_ns();
    /* cpu mode: SUSPENDED (just before) may have left the interval open */
    if (!wall_mode() && pt->cpu_mark >= 0) {
        pt->cpu_acc += read_native_cpu() - pt->cpu_mark;
        pt->cpu_mark = -1;
    }
    if (!wall_mode()) clamp_pending_gc(pt, pt->cpu_acc - pt->last_cpu);
    int64_t gc = pt->pend_gc_mark + pt->pend_gc_sweep;
    int64_t pending = rperf__engine.cfg.clock == RPERF_CLOCK_CPU
        ? pt->cpu_acc - pt->last_cpu - gc
        : (pt->susp_wall > 0 ? pt->susp_wall : mono) - pt->last_wall - pt->pend_blocked -
              pt->pend_wait - gc;
    rperf_frame_t root = atomic_load_explicit(&pt->last_root, memory_order_relaxed);
    if (root) {
        if (pending > 0 && rperf__ring_push(pt, RPERF_SAMPLE_NORMAL, pending, mono, &root, 1))
            attributed(pt, pending);
        record_pending_gc(pt, mono, &root, 1);
        record_pending_gvl(pt, mono, &root, 1);
    }
    settle_fresh(pt);
    if (!pt->muted && rperf__engine.cfg.deferred) {
        pt->muted = 1;
        atomic_fetch_sub_explicit(&rperf__engine.profiled_threads, 1, memory_order_relaxed);
    }
    if (nt->cur == pt) nt->cur = NULL;
    atomic_store_explicit(&pt->exited, 1, memory_order_release);
}

/* ---- GC events (own, inside GC: no allocation, no Ruby calls) ----------- */

static _Atomic int gc_phase;       /* 0 none, 1 marking, 2 sweeping */
static _Atomic int gc_step_phase;  /* phase seen during the current step */

void rperf_ev_gc(int ev)
{
    switch (ev) {
    case RPERF_GC_START:
        atomic_store(&gc_phase, 1);
        atomic_store(&gc_step_phase, 1);
        return;
    case RPERF_GC_END_MARK:
        /* A step that started marking stays a marking step even when it
         * ends with the first bit of (lazy) sweeping. */
        atomic_store(&gc_phase, 2);
        return;
    case RPERF_GC_END_SWEEP:
        atomic_store(&gc_phase, 0);
        return;
    default:
        break;
    }
    rperf_thread_t *pt = rperf_current_thread_sigsafe();
    if (!pt) return;
    if (ev == RPERF_GC_ENTER) {
        atomic_store(&gc_step_phase, atomic_load(&gc_phase));
        pt->gc_enter_wall = rperf__mono_ns();
        return;
    }
    /* GC_EXIT */
    if (pt->gc_enter_wall <= 0) return;
    if (pt->muted) {                     /* outside profile blocks */
        pt->gc_enter_wall = 0;
        return;
    }
    int64_t mono = rperf__mono_ns();
    int64_t w = mono - pt->gc_enter_wall;
    pt->gc_enter_wall = 0;
    if (w <= 0) return;
    if (atomic_load(&gc_step_phase) == 2) pt->pend_gc_sweep += w;
    else pt->pend_gc_mark += w;
    /* GC steps are sampled by their time, as short GVL blocks are
     * (resume_wall): lazy sweeping and incremental marking make thousands
     * of steps a second, most far shorter than an interval. Their time
     * accumulates until it passes a gap drawn around an interval, and then
     * all of it is recorded on the stack of the step that passed it (a
     * step is that one with a chance in proportion to its length; a step
     * of an interval or more always is). The thread's ticks leave it
     * pending (sample_now), so GC time lands only on stacks that ran GC,
     * and GC makes about one capture per interval of GC time (with a
     * quarter-interval rule, a 10 kHz run of the `gc` workload captured 1.4
     * stacks per sample). Window close and exit settle what is left. */
    if (w < rperf__engine.interval_ns && !gap_passed(pt, &pt->gc_left, w)) return;
    if (w >= rperf__engine.interval_ns) pt->gc_left = next_gap(pt);
    if (!wall_mode()) clamp_pending_gc(pt, ruby_cpu_now(pt, read_native_cpu()) - pt->last_cpu);
    rperf_frame_t frames[RPERF_MAX_DEPTH];
    int depth = capture(pt, frames);
    if (depth > 0) record_pending_gc(pt, mono, frames, depth);
}

void rperf__gc_reset(void)
{
    atomic_store(&gc_phase, 0);
    atomic_store(&gc_step_phase, 0);
}

/* ---- labels (own, GVL held) ---------------------------------------------- */

void rperf_thread_set_label(rperf_thread_t *pt, uint32_t id)
{
    atomic_store_explicit(&pt->label_set_id, id, memory_order_relaxed);
}

uint32_t rperf_thread_label(const rperf_thread_t *pt)
{
    return atomic_load_explicit(&((rperf_thread_t *)pt)->label_set_id, memory_order_relaxed);
}

uint32_t rperf_thread_seq(const rperf_thread_t *pt) { return pt->seq; }

/* ---- identity (own, GVL held; readers: results) --------------------------- */

void rperf_thread_set_host_ref(rperf_thread_t *pt, uintptr_t ref)
{
    atomic_store_explicit(&pt->host_ref, ref, memory_order_relaxed);
}

void rperf_thread_set_ractor_at_exit(rperf_thread_t *pt, uint32_t ractor_id)
{
    atomic_store_explicit(&pt->ractor_id, ractor_id, memory_order_relaxed);
}

void rperf_thread_set_ractor(rperf_thread_t *pt, uint32_t ractor_id)
{
    atomic_store_explicit(&pt->ractor_id, ractor_id, memory_order_relaxed);
    if (!pt->muted && rperf_current_thread_sigsafe() == pt && backend() &&
        backend()->thread_identified)
        backend()->thread_identified();
}

/* ---- profile blocks of a deferred run (own, GVL held) ---------------------- */

/* The thread's time counts from now: the accounting is opened exactly
 * here, as for a thread that starts (RPERF_HEAD_EXACT), and what it had
 * pending outside the block (on-GVL time, GC steps, blocks) is dropped. */
static void open_here(rperf_thread_t *pt)
{
    int64_t mono = rperf__mono_ns();
    if (!wall_mode()) {
        if (pt->cpu_mark >= 0) {
            int64_t native = read_native_cpu();
            pt->cpu_acc += native - pt->cpu_mark;
            pt->cpu_mark = native;
        } else {
            pt->cpu_mark = read_native_cpu();
        }
        pt->mark_mono = mono;
        pt->mark_idle = 0;
        pt->last_cpu = pt->cpu_acc;
    }
    pt->last_wall = mono;
    pt->pend_blocked = pt->pend_wait = 0;
    pt->pend_gc_mark = pt->pend_gc_sweep = 0;
    pt->head = RPERF_HEAD_EXACT;
}

void rperf_thread_profile_begin(rperf_thread_t *pt)
{
    if (!pt->muted || !rperf__engine.cfg.deferred ||
        atomic_load_explicit(&pt->exited, memory_order_relaxed))
        return;
    bool here = rperf_current_thread_sigsafe() == pt;
    if (here) open_here(pt);
    pt->muted = 0;
    atomic_fetch_add_explicit(&rperf__engine.profiled_threads, 1, memory_order_relaxed);
    if (here) backend_attach();
}

/* The time since the thread's last sample is not recorded: the stack at
 * the block's end is the caller of the block (Rperf.profile, a
 * middleware), which ran none of it, and charging it there would show the
 * profiler as a hotspot of every request. Dropped, it leaves each method
 * its share of what was sampled; a block's total is short by its last
 * partial interval (docs/architecture.md, "Deferred runs"). */
void rperf_thread_profile_end(rperf_thread_t *pt)
{
    if (pt->muted || !rperf__engine.cfg.deferred) return;
    if (rperf_current_thread_sigsafe() == pt && backend() && backend()->thread_suspended)
        backend()->thread_suspended();
    pt->muted = 1;
    atomic_fetch_sub_explicit(&rperf__engine.profiled_threads, 1, memory_order_relaxed);
}

bool rperf_thread_profiled(const rperf_thread_t *pt) { return !pt->muted; }

int rperf_engine_profiled_threads(void)
{
    return atomic_load_explicit(&rperf__engine.profiled_threads, memory_order_relaxed);
}

uint32_t rperf_thread_ractor(const rperf_thread_t *pt)
{
    return atomic_load_explicit(&((rperf_thread_t *)pt)->ractor_id, memory_order_relaxed);
}

bool rperf_thread_wants_name(rperf_thread_t *pt) { return (pt->name_checks++ & 31u) == 0; }

void rperf_thread_set_name(rperf_thread_t *pt, const char *name, size_t len)
{
    if (len >= RPERF_THREAD_NAME_MAX) len = RPERF_THREAD_NAME_MAX - 1;
    size_t same = 0;
    while (same < len && atomic_load_explicit(&pt->name[same], memory_order_relaxed) == name[same]) same++;
    if (same == len && atomic_load_explicit(&pt->name[len], memory_order_relaxed) == '\0') return;
    uint32_t seq = atomic_load_explicit(&pt->name_seq, memory_order_relaxed);
    atomic_store_explicit(&pt->name_seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (size_t i = 0; i < len; i++) atomic_store_explicit(&pt->name[i], name[i], memory_order_relaxed);
    atomic_store_explicit(&pt->name[len], '\0', memory_order_relaxed);
    atomic_store_explicit(&pt->name_seq, seq + 2, memory_order_release);
}

/* any context: a consistent copy of pt's identity (seqlock read). */
void rperf__thread_info(const rperf_thread_t *cpt, rperf_result_thread_t *out)
{
    rperf_thread_t *pt = (rperf_thread_t *)cpt;
    out->thread_seq = pt->seq;
    out->ractor_id = atomic_load_explicit(&pt->ractor_id, memory_order_relaxed);
    out->native_tid = pt->native_tid;
    for (int tries = 0; tries < 100; tries++) {
        uint32_t a = atomic_load_explicit(&pt->name_seq, memory_order_acquire);
        if (a & 1u) continue;
        for (size_t i = 0; i < RPERF_THREAD_NAME_MAX; i++)
            out->name[i] = atomic_load_explicit(&pt->name[i], memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&pt->name_seq, memory_order_relaxed) == a) break;
    }
    out->name[RPERF_THREAD_NAME_MAX - 1] = '\0';
}
