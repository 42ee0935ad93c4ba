/*
 * rperf_core.h — the public API of the Ruby-free sampling engine (core/).
 *
 * The engine owns per-thread state and sample rings, the frame table, the
 * aggregation worker, counters, snapshot and fork handling. It never calls
 * the Ruby API: the host (ruby/) supplies callbacks to capture a stack, to
 * trigger the sampling job and to detach per-thread state from a Ruby thread.
 * Frames are opaque uintptr_t values (Ruby VALUEs in the extension; any
 * non-zero, 8-byte-aligned value in unit tests).
 *
 * Execution contexts used in the comments below:
 *   signal   — inside a signal handler: async-signal-safe only
 *   own      — on the native thread currently running the described Ruby
 *              thread (thread hooks RESUMED/SUSPENDED, the job, GC hooks)
 *   no GVL   — any native thread, no Ruby API, may block briefly
 *   GVL held — an application thread holding its Ractor's GVL
 *   worker   — the aggregation worker pthread
 */
#ifndef RPERF_CORE_H
#define RPERF_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RPERF_VERSION_STRING "0.7.0"
#define RPERF_MAX_DEPTH 512          /* Ruby frames kept per sample */
#define RPERF_DEFAULT_RING_SLOTS 4096 /* words per thread ring (32 KiB) */
#define RPERF_THREAD_NAME_MAX 64      /* bytes kept of a thread's name (NUL incl.) */

typedef uintptr_t rperf_frame_t;

enum { RPERF_CLOCK_CPU = 0, RPERF_CLOCK_WALL = 1 };

/* Sample kinds. Synthetic kinds become frame ids 0..3 (type - 1) placed at
 * the leaf position. */
typedef enum {
    RPERF_SAMPLE_NORMAL = 0,
    RPERF_SAMPLE_GVL_BLOCKED = 1,
    RPERF_SAMPLE_GVL_WAIT = 2,
    RPERF_SAMPLE_GC_MARKING = 3,
    RPERF_SAMPLE_GC_SWEEPING = 4,
    /* a sampled allocation (core/heap.c): the class is the leaf word */
    RPERF_SAMPLE_ALLOC = 5,
    /* a sampled allocation of an object without a class (internal) */
    RPERF_SAMPLE_ALLOC_BARE = 6
} rperf_sample_type_t;

#define RPERF_FRAME_UNKNOWN 4u      /* a frame the engine could not intern */
#define RPERF_SYNTHETIC_FRAMES 5u   /* frame ids below this are synthetic */

/* any context: [path, label] of synthetic frame id < RPERF_SYNTHETIC_FRAMES
 * ("<GVL>" "[GVL blocked]", "<GVL>" "[GVL wait]", "<GC>" "[GC marking]",
 * "<GC>" "[GC sweeping]", "<unknown>" "[unknown frame]"). */
void rperf_synthetic_frame(uint32_t id, const char **path, const char **label);

typedef struct rperf_thread rperf_thread_t;
struct rperf_backend_ops;

/* Callbacks the host provides once, at init. */
typedef struct rperf_host {
    /* own: capture the current Ruby stack, leaf first; returns the depth
     * (0 when there is no Ruby frame). Must not allocate Ruby objects. */
    int (*capture)(rperf_frame_t *buf, int max);
    /* signal: request the sampling job (rb_postponed_job_trigger). */
    void (*trigger)(void);
    /* signal: a bootstrap signal reached a native thread the engine does
     * not know yet; request the job if this native thread runs Ruby code
     * (the job then registers the thread it runs on). True if requested. */
    bool (*trigger_register)(void);
    /* GVL held, main Ractor: capture the stack of the Ruby thread `ref`
     * (rperf_thread_set_host_ref), which is off the GVL and has not exited,
     * leaf first; returns the depth (0: none). Must not allocate Ruby
     * objects. Optional: without it, a window's close records nothing for
     * threads off the GVL (their block is recorded when they resume). */
    int (*capture_thread)(uintptr_t ref, rperf_frame_t *buf, int max);
    /* GVL held, main Ractor: the READY time the host keeps on the Ruby
     * thread `ref` (rperf_ev_ready_at), 0 if none. Optional. */
    int64_t (*thread_ready_at)(uintptr_t ref);
    /* worker: called at every wake of the aggregation worker while a run
     * goes (at least every 1.6 s), for the host's periodic work; no Ruby
     * API besides thread-safe triggers. Returns true to have the worker
     * back within its busy period (50 ms) even while no sample comes.
     * Optional. */
    bool (*worker_poll)(void);
} rperf_host_t;

typedef struct rperf_config {
    /* read at every GVL event: first (the engine keeps them on one line) */
    int frequency;            /* Hz, 1..10000 */
    int clock;                /* RPERF_CLOCK_CPU / RPERF_CLOCK_WALL */
    const struct rperf_backend_ops *backend;
    bool main_mn;             /* the main Ractor runs M:N threads (several Ruby
                                 threads share a native thread) */
    /* a trigger from a thread outside Ruby reaches the main Ractor's GVL
     * holder exactly when that holder took its GVL after every other
     * thread's start-up (the host verified how its Ruby sets running_ec);
     * false: the holder backend sends every tick by signal */
    bool direct_trigger;
    bool aggregate;           /* false: keep raw samples */
    uint32_t ring_slots;      /* power of two, >= 1024 */
    int signo;                /* signal for the signal backend (0 = default) */
    bool bootstrap;           /* other Ractors exist: signal every task once at
                                 start so their running threads register */
    const int32_t *bootstrap_skip; /* sorted tids the bootstrap leaves out */
    size_t bootstrap_nskip;
    /* Deferred run: only threads inside profile blocks are sampled
     * (rperf_thread_profile_begin/end); a thread starts outside one. While
     * no thread is inside, no tick is taken and the backends' tick threads
     * park. */
    bool deferred;
    /* An allocation-only run: threads are never sampled for time (as
     * outside profile blocks), and no tick is taken. */
    bool alloc_only;
    /* 0: no allocation sampling; else the mean number of allocations per
     * sampled allocation (core/heap.c) */
    uint32_t alloc_interval;
} rperf_config_t;

typedef struct rperf_stats {
    uint64_t trigger_count;     /* ticks that requested a sample */
    uint64_t sampling_count;    /* job runs that recorded a sample */
    uint64_t sampling_time_ns;  /* duration of those job runs (monotonic; a job never blocks) */
    uint64_t dropped_samples;   /* samples lost to full rings */
    uint64_t timer_overruns;    /* ticks the backend could not deliver in time */
    uint32_t detected_threads;  /* thread_seq values handed out */
    int64_t start_time_ns;      /* CLOCK_REALTIME at start / last clear */
    int64_t start_mono_ns;      /* CLOCK_MONOTONIC at the same moment */
    int64_t end_mono_ns;        /* CLOCK_MONOTONIC when the window was closed
                                   (snapshot, stop); 0 while open */
} rperf_stats_t;

/* ---- lifecycle (GVL held) ----------------------------------------------- */

/* Once, from Init_: allocator choice, fork handlers. Returns 0 or -1. */
int rperf_engine_init(const rperf_host_t *host);
/* Start a run. On failure returns -1 with a message in err; nothing runs. */
int rperf_engine_start(const rperf_config_t *cfg, rperf_thread_t **caller,
                       char *err, size_t errlen);
/* Stop sampling: take the caller's last sample, stop the backend, drain and
 * join the worker. Results stay readable until rperf_engine_release(). */
int rperf_engine_stop(void);
/* VM teardown (no Ruby API may be called any more): stop ticks, jobs, hooks
 * and the worker without taking a last sample. Idempotent. */
void rperf_engine_halt(void);
/* Free a stopped run's data (frames, aggregates, threads). */
void rperf_engine_release(void);
/* Pause the worker with every ring drained (snapshot). Sampling goes on. */
void rperf_engine_pause(void);
/* Resume after rperf_engine_pause(); clear=true empties the aggregates and
 * resets counters and the start time (rperf_engine_clear first). */
void rperf_engine_resume(bool clear);
/* Paused: empty the aggregates (the live heap's entries are made anew),
 * reset counters and the start time; the worker stays parked. */
void rperf_engine_clear(void);

bool rperf_engine_running(void);          /* any context */
bool rperf_engine_has_results(void);      /* stopped run not yet released */
const rperf_config_t *rperf_engine_config(void);
void rperf_engine_stats(rperf_stats_t *out);
size_t rperf_engine_memory_bytes(void);
const char *rperf_engine_allocator(void);
/* The aggregation worker's thread name (top -H, ps -L, gdb), set by its
 * creator before start returns (a backend's start-up scan knows it by it). */
#define RPERF_WORKER_THREAD_NAME "rperf-worker"
/* A fork child whose parent was profiling: reset everything (GVL held). */
bool rperf_engine_needs_fork_reset(void);
void rperf_engine_fork_reset(void);

/* ---- GC marking (GVL held, inside GC; lock-free) -------------------------- */

/* Call mark(v) for every frame value the engine still references: the frame
 * table's keys, every frame in every ring, and the worker's in-flight value.
 * In a minor GC pass is_old (true for an object a minor GC never frees): the
 * table's keys known old are skipped, so a minor GC costs what changed, not
 * the table's size. NULL = mark everything (a major GC). */
void rperf_engine_mark(void (*mark)(rperf_frame_t v), bool (*is_old)(rperf_frame_t v));

/* ---- per-thread state and events ------------------------------------------ */

/* inside enter/leave, or holding the main Ractor's GVL while running (the
 * caller at start, a main-Ractor thread's own RESUMED, a window's close:
 * whatever stops the engine holds that GVL too): create state for a Ruby
 * thread. The host stores rperf_thread_token(pt) on the Ruby thread and
 * finds the state again with rperf_thread_from_token (same contexts). */
typedef enum {
    RPERF_THREAD_CREATED,   /* STARTED: born during the run */
    RPERF_THREAD_EXISTING,  /* first met at RESUMED: off the GVL since start */
    RPERF_THREAD_CURRENT    /* the caller, running now on this native thread */
} rperf_thread_origin_t;
rperf_thread_t *rperf_thread_new(rperf_thread_origin_t origin);
/* Tokens (core/thread_index.c): a token of an earlier run, or of the parent
 * in a fork child, names nothing (NULL) and is never dereferenced, so the
 * host never has to clear what it stored on Ruby threads. from_token runs
 * where rperf_thread_new may (never in a signal handler). */
uintptr_t rperf_thread_token(const rperf_thread_t *pt);
rperf_thread_t *rperf_thread_from_token(uintptr_t token);
/* GVL held: the token was stored in this run (the thread was met: it may
 * have exited since, and its state be gone). */
bool rperf_thread_token_this_run(uintptr_t token);
/* own: the thread `pt` is the caller and runs now (start, label, job). */
void rperf_thread_attach_current(rperf_thread_t *pt);
void rperf_ev_resumed(rperf_thread_t *pt);   /* own, GVL held by pt */
void rperf_ev_suspended(rperf_thread_t *pt); /* own, before the hand-off */
/* any native thread: READY of pt from another native thread, timed now. A
 * host that can keep the time on its own thread object uses
 * rperf_ev_ready_at instead (the Ruby host does), so the waker touches no
 * engine state. In cpu mode a READY from another native thread also says
 * the thread slept in the host's scheduler: no CPU clock reading follows. */
void rperf_ev_ready(rperf_thread_t *pt);
/* own, at RESUMED before rperf_ev_resumed: a READY the host timed itself
 * (rperf_mono_ns) and kept on the Ruby thread, so that the waking thread
 * touched no engine state (0: none). */
void rperf_ev_ready_at(rperf_thread_t *pt, int64_t mono_ns);
/* any context: the engine's clock (CLOCK_MONOTONIC, ns) */
int64_t rperf_mono_ns(void);
/* own native thread, no enter/leave needed (it touches only this native
 * thread's state): READY of the Ruby thread that last SUSPENDED here, which
 * the host knows by its own identity check (a blocking region's end).
 * Returns the time it stamped (rperf_mono_ns's clock). */
int64_t rperf_ev_ready_here(void);
void rperf_ev_exited(rperf_thread_t *pt);    /* own, after SUSPENDED */
void rperf_ev_gc(int phase_event);           /* own, inside GC */
enum { RPERF_GC_START, RPERF_GC_END_MARK, RPERF_GC_END_SWEEP,
       RPERF_GC_ENTER, RPERF_GC_EXIT };

/* own: the sampling job body: sample the Ruby thread running here. */
void rperf_sample_job(rperf_thread_t *pt_or_null);

/* Jobs and hooks of any Ractor bracket their work with enter/leave so that
 * stop can wait until none is in flight. enter returns false when not
 * running (then do nothing and do not call leave). */
bool rperf_engine_enter(void);
void rperf_engine_leave(void);

/* The per-native-thread current Ruby thread (set RESUMED, cleared SUSPENDED). */
rperf_thread_t *rperf_current_thread_sigsafe(void);
/* The calling native thread's kernel tid, read once per native thread (any
 * context: gettid is async-signal-safe). */
int32_t rperf_native_tid(void);
/* own, inside a backend's thread_resumed: the CLOCK_MONOTONIC time the
 * engine took for this RESUMED (one clock read per event, not two). */
int64_t rperf_resumed_mono(void);
/* own, inside a backend's thread_resumed: it did something slow (woke its
 * parked timer thread: a futex wake, tens of microseconds on a VM). The
 * engine times the thread's resumption again after the backend returns, so
 * that time counts as the thread's wait for its turn (wall mode: the
 * [GVL wait] of the call that released the GVL, which the caller sees
 * last) instead of going to the thread's next sample. */
void rperf_resume_was_slow(void);

/* own, GVL held: the thread's identity, set by the host from the thread
 * itself. set_ractor tells the backend (thread_identified). wants_name is
 * true for the thread's first job and then every 32nd: the host then reads
 * Thread#name (outside enter/leave, it calls Ruby) and stores it. */
void rperf_thread_set_ractor(rperf_thread_t *pt, uint32_t ractor_id);
/* The thread's own EXITED (it no longer holds a GVL): its Ractor id, set
 * without telling the backend, which must not take an exiting thread for
 * a GVL holder. */
void rperf_thread_set_ractor_at_exit(rperf_thread_t *pt, uint32_t ractor_id);
/* Any context where pt was just created or is the caller's own thread:
 * the host's handle on pt's Ruby thread (host.capture_thread). */
void rperf_thread_set_host_ref(rperf_thread_t *pt, uintptr_t ref);
uint32_t rperf_thread_ractor(const rperf_thread_t *pt);   /* any context */
bool rperf_thread_wants_name(rperf_thread_t *pt);
void rperf_thread_set_name(rperf_thread_t *pt, const char *name, size_t len);

/* Deferred runs (rperf_config_t.deferred; no effect otherwise). GVL held,
 * own: the thread `pt`, running here, enters its outermost profile block:
 * its time counts from now (what it had pending outside is dropped) and
 * the backend hears of it as a GVL holder. A thread that is not running
 * here (created or first met by the host, before its first turn) is only
 * marked inside: its time counts as for any new thread. */
void rperf_thread_profile_begin(rperf_thread_t *pt);
/* GVL held, own: pt leaves its outermost profile block: from now on
 * nothing it does is recorded and the backend forgets it. Its time since
 * its last sample is dropped (the stack here is the block's caller). */
void rperf_thread_profile_end(rperf_thread_t *pt);
/* any context: pt is inside a profile block of a deferred run, or the run
 * is not deferred (its samples are recorded). */
bool rperf_thread_profiled(const rperf_thread_t *pt);
/* any context: threads inside profile blocks in a deferred run. */
int rperf_engine_profiled_threads(void);
/* any context: ticks are taken (not a deferred run with no thread inside a
 * profile block). A backend's tick thread may park while it is false. */
bool rperf_engine_ticks_wanted(void);

/* GVL held: live threads of the run known to be of another Ractor than
 * the main one, or of a Ractor not known yet. */
int rperf_engine_other_ractor_threads(void);
/* GVL held or inside GC: live threads of the run whose Ractor is not known
 * yet. */
int rperf_engine_unnumbered_threads(void);

/* GVL held, worker parked (snapshot): cb(label set id) for every live
 * thread of the run. */
void rperf_engine_each_thread_label(void (*cb)(uint32_t id, void *ctx), void *ctx);

/* GVL held, own: label set id of the thread. */
void rperf_thread_set_label(rperf_thread_t *pt, uint32_t label_set_id);
uint32_t rperf_thread_label(const rperf_thread_t *pt);
uint32_t rperf_thread_seq(const rperf_thread_t *pt);

/* signal: a backend tick on this native thread. */
void rperf_engine_tick_sigsafe(void);
/* Own (a thread hook, GVL held; async-signal-safe): the job must run on
 * this native thread, for the Ruby thread running here (the host's own
 * work there, e.g. in another Ractor). Triggers it now; since the job
 * bitset is one per VM and Ruby 3.3 may flag another thread's context at
 * a thread event, until rperf_engine_job_ran_here the tick signal's
 * handler here triggers it again, and rperf_engine_resignal_wanted sends
 * that signal. At most 64 native threads wait at once (others are asked
 * again at their next thread event). */
void rperf_engine_want_job(void);
/* own, in the job: what this native thread wanted is done */
void rperf_engine_job_ran_here(void);
/* In the job, any thread: at most every 2 ms, send(tid) to every native
 * thread still waiting for its job (not the caller's). */
void rperf_engine_resignal_wanted(int (*send)(int32_t tid));
/* signal: a bootstrap signal on a native thread with no current Ruby thread
 * known to the engine (see rperf_host_t.trigger_register). */
bool rperf_engine_register_sigsafe(void);
/* no GVL: the backend could not deliver `n` ticks in time. */
void rperf_engine_count_overruns(uint64_t n);
/* A backend thread that wakes at every tick (timer_thread.c) offers to wake
 * the aggregation worker for the producers: between ticker_on(true) and
 * ticker_on(false) a ring passing half full only asks (an atomic store),
 * and the ticker's rperf_engine_ticker_poke, called after each tick, makes
 * the wake-up, a futex call off the application's thread. A ring passing
 * three quarters full still wakes the worker itself. No GVL, no Ruby API;
 * poke is a relaxed load when nothing was asked. */
void rperf_engine_ticker_on(bool on);
void rperf_engine_ticker_poke(void);
/* any context: threads announced by STARTED during the run that have not
 * had their first turn (RESUMED) yet nor exited. While one exists, Ruby
 * 3.3's main-Ractor running_ec may name it instead of the GVL holder. */
int rperf_engine_unsettled_threads(void);
/* any context: CLOCK_MONOTONIC of the run's latest STARTED (0: none). Only
 * the holder of a Ractor's GVL creates its threads, so a holder that took
 * its GVL well after this saw every earlier new native thread set
 * running_ec before its own acquisition set it back (read after
 * rperf_engine_unsettled_threads). */
int64_t rperf_engine_last_thread_start(void);
/* GVL held: no thread of this run failed to get state (out of memory). A
 * Ruby thread with no token of this run was then never met: it has not
 * held its GVL since the start, so it has not exited either. */
bool rperf_engine_threads_complete(void);
/* any context: ticks delivered that no sampling job has consumed yet (a
 * job consumes every tick outstanding when it records a sample). */
uint64_t rperf_engine_ticks_unconsumed(void);

/* ---- results (GVL held, worker paused or joined) -------------------------- */

size_t rperf_result_frame_count(void);          /* ids RPERF_SYNTHETIC_FRAMES.. */
/* id >= RPERF_SYNTHETIC_FRAMES; 0 for a retired id (its object is not
 * pinned any more: the host named it when it retired it) */
rperf_frame_t rperf_result_frame(uint32_t id);
bool rperf_result_frame_retired(uint32_t id);

/* ---- frame retirement (GVL held, during a run) -----------------------------
 * A frame's object is pinned only while the profile may need it. After a
 * GC the host runs a pass: every frame id no sample touched since the
 * previous pass is judged once: KEEP pins it for the run (code that lives
 * on: an old object, a class), RETIRE unpins it (the host has kept the
 * frame's names and lines, its id stays valid in the results), LATER asks
 * again at a later pass. A retired frame's object may be collected; a
 * later sample of it, or of new code at its address, gets a new id. */
typedef enum { RPERF_FRAME_LATER, RPERF_FRAME_KEEP, RPERF_FRAME_RETIRE } rperf_frame_verdict_t;
size_t rperf_frames_retire_pass(rperf_frame_verdict_t (*judge)(uint32_t id, rperf_frame_t v, void *arg),
                                void *arg);
/* inside GC, at the end of marking: while new code is being sampled, the
 * worker drains every ring now, so the next pass judges those frames
 * before more GCs (whose marking ages them: the rings pin them) pass. */
void rperf_frames_gc_marked(void);

typedef struct rperf_result_sample {
    const uint32_t *frames;   /* frame ids, leaf first */
    uint32_t depth;
    int64_t weight;
    uint32_t thread_seq;
    uint32_t label_set_id;
    int64_t time_ns;          /* raw samples: CLOCK_REALTIME ns; else 0 */
} rperf_result_sample_t;

typedef int (*rperf_sample_cb)(const rperf_result_sample_t *s, void *ctx);
size_t rperf_result_aggregated_count(void);
int rperf_result_each_aggregated(rperf_sample_cb cb, void *ctx);
/* Windows over the aggregation (Rperf::Window): entries keep their index
 * and only gain weight until the generation changes (a start, a clearing
 * resume, a release). rperf_result_weights copies each entry's weight
 * (up to cap) and returns the entry count; _since visits the entries that
 * gained weight over base, with the gain as weight. */
uint64_t rperf_result_generation(void);
size_t rperf_result_weights(int64_t *out, size_t cap);
int rperf_result_each_aggregated_since(const int64_t *base, size_t nbase, rperf_sample_cb cb, void *ctx);
size_t rperf_result_raw_count(void);
int rperf_result_each_raw(rperf_sample_cb cb, void *ctx);

/* Every thread that got a thread_seq in this run (live or exited), in
 * thread_seq order. */
typedef struct rperf_result_thread {
    uint32_t thread_seq;
    uint32_t ractor_id;       /* 0 = unknown */
    int32_t native_tid;       /* last native thread seen; 0 = unknown */
    char name[RPERF_THREAD_NAME_MAX];   /* "" = unnamed */
} rperf_result_thread_t;
typedef int (*rperf_thread_cb)(const rperf_result_thread_t *t, void *ctx);
int rperf_result_each_thread(rperf_thread_cb cb, void *ctx);


/* ---- allocation sampling and the live heap (core/heap.c) ------------------- */

#define RPERF_ALLOC_NO_CLASS UINT32_MAX

/* Allocation hook (own, GVL held; the host serializes the calls, as Ruby
 * does: one Ractor's under its GVL, several Ractors' under the VM lock):
 * every allocation while the run samples allocations. Forgets a tracked object
 * whose address the new one took; true when this allocation is to be
 * sampled (then call rperf_alloc_record). */
bool rperf_alloc_seen(uintptr_t obj);
/* Allocation hook of a Ractor other than the main one: around its calls
 * (the main Ractor's hook, serialized with the closes by its GVL, needs
 * not). */
void rperf_alloc_lock(void);
void rperf_alloc_unlock(void);
/* Allocation hook: record the sampled allocation of `obj` (its class, 0
 * for none; the host's type code; its slot size): the stack of the
 * current thread with the class at its leaf, and the object tracked. */
void rperf_alloc_record(uintptr_t obj, uintptr_t klass, uint32_t rtype, uint32_t bytes);
/* any context: this run samples allocations */
bool rperf_heap_enabled(void);
/* Free hook (the host's notice that an object is being freed: Ruby's
 * FREEOBJ event, inside GC, serialized as the allocation hook is; another
 * Ractor's calls inside rperf_alloc_lock): a tracked object at `obj` is
 * gone. Reads nothing at that address. */
void rperf_alloc_freed(uintptr_t obj);
/* GVL held, no allocation hook running, worker parked or joined (a
 * window's close): forget the tracked objects that are gone (alive says
 * whether `obj` is still the object sampled, of class `klass` and type
 * `rtype`; `verified` false: a GC ran whose frees may not have been
 * reported (rperf_heap_gc_marked), so the object's page may be gone and
 * the host must check the address before reading it; a host may check
 * every address) and compute each entry's in-use objects and bytes
 * (memsize: the object's size now): as of the last GC whose marking was
 * seen, as Go's heap profiles are (an object allocated since may be
 * garbage already; it counts once a later marking has seen it live). An
 * object found alive is verified again. */
void rperf_heap_settle(bool (*alive)(uintptr_t obj, uintptr_t klass, uint32_t rtype, bool verified),
                       size_t (*memsize)(uintptr_t obj));
/* Free hook: frees from now on may go unreported (the host saw an
 * object freed whose freeing can turn its hooks off): every object
 * tracked now becomes unverified. */
void rperf_heap_frees_unreported(void);
/* GVL held, at start: the host's GC count (its GCs are numbered 1, 2, …). */
void rperf_heap_gc_seen(uint64_t gc_count);
/* Inside GC, at the end of marking GC number gc_count (before sweeping).
 * The host reports every free through rperf_alloc_freed; a GC numbered
 * past the one seen before (its marking was not reported), or
 * unseen_frees (some of this GC's frees may run where the host cannot
 * report them), makes every object tracked now unverified: nothing reads
 * it until a settle has the host check it. */
void rperf_heap_gc_marked(uint64_t gc_count, bool unseen_frees);
/* Inside GC compaction of GC number gc_count (world stopped): follow the
 * tracked objects that moved (location: where the object at an address is
 * now). Only verified objects are read, and only when that GC's marking
 * was reported. */
void rperf_heap_relocate(uint64_t gc_count, uintptr_t (*location)(uintptr_t));

typedef struct rperf_heap_stats {
    uint32_t interval;        /* 0: the run samples no allocations */
    uint64_t sampled;         /* allocations sampled in this window */
    uint64_t dropped;         /* of those, lost (no memory, full ring) */
    uint64_t live;            /* tracked objects alive at the last settle */
    uint64_t tracked;         /* tracked objects now */
    uint64_t as_of_gc;        /* the last marking seen: in-use values are as
                                 of this GC (objects allocated since wait
                                 for the next one) */
} rperf_heap_stats_t;
void rperf_heap_stats(rperf_heap_stats_t *out);   /* GVL held */

/* One (stack, class, thread, label set) entry; results context. Each
 * sample stands for `interval` allocations: the counts are estimates. */
typedef struct rperf_result_alloc {
    const uint32_t *frames;   /* frame ids, leaf first */
    uint32_t depth;
    uint32_t class_id;        /* frame id of the class (rperf_result_frame), or
                                 RPERF_ALLOC_NO_CLASS: then rtype names it */
    uint32_t rtype;
    uint32_t thread_seq;
    uint32_t label_set_id;
    int64_t alloc_objects, alloc_bytes;
    int64_t inuse_objects, inuse_bytes;
} rperf_result_alloc_t;
typedef int (*rperf_alloc_cb)(const rperf_result_alloc_t *a, void *ctx);
int rperf_result_each_alloc(rperf_alloc_cb cb, void *ctx);
/* Windows (as rperf_result_weights/_since): four values per entry
 * (alloc_objects, alloc_bytes, inuse_objects, inuse_bytes), up to cap
 * entries; returns the entry count. _since visits the entries whose values
 * moved, with the change (in-use changes may be negative). */
size_t rperf_result_alloc_values(int64_t *out, size_t cap);
int rperf_result_each_alloc_since(const int64_t *base, size_t nbase, rperf_alloc_cb cb, void *ctx);

/* ---- the kernel's view of a task (core/proc_stat.c; any thread, no GVL,
 * no allocation, not in a signal handler) ----------------------------------- */

/* The state letter (R, S, D, Z, ...; 0 if unknown) of process `pid`
 * (/proc/<pid>/stat) or, when tid > 0, of this process's task `tid`
 * (/proc/self/task/<tid>/stat); when name is not NULL, *named tells whether
 * its comm is exactly `name`. No descriptor is kept. */
char rperf_proc_state(long pid, long tid, const char *name, bool *named);
/* The same from a stat line already read (line[len] is overwritten with
 * the terminating NUL: line needs len + 1 bytes). */
char rperf_stat_line_state(char *line, size_t len, const char *name, bool *named);

#ifdef __cplusplus
}
#endif
#endif
