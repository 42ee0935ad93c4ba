/*
 * core_internal.h — structures shared by the files of core/ only. Nothing
 * outside core/ includes this header (see docs/architecture.md).
 */
#ifndef RPERF_CORE_INTERNAL_H
#define RPERF_CORE_INTERNAL_H

#include "rperf_core.h"
#include "rperf_backend.h"

#include <ck_epoch.h>
#include <ck_ht.h>
#include <ck_pr.h>
#include <ck_ring.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* ---- ThreadSanitizer annotations ----------------------------------------
 * ck_epoch orders a reader's section before the grace-period callbacks with
 * ck_pr fences (inline asm), which TSan cannot see. These annotations state
 * that happens-before to TSan; they compile to nothing otherwise. */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define RPERF_EPOCH_SECTION_END() __tsan_release(&rperf__epoch)
#define RPERF_EPOCH_RECLAIM() __tsan_acquire(&rperf__epoch)
#else
#define RPERF_EPOCH_SECTION_END() ((void)0)
#define RPERF_EPOCH_RECLAIM() ((void)0)
#endif

/* A release fence. GCC's ThreadSanitizer rejects atomic_thread_fence
 * (-Wtsan, an error under -Werror) where it instruments it; TSan builds,
 * which are test builds, use a sequentially consistent read-modify-write
 * instead (a locked instruction: a full barrier on x86). */
#if defined(__SANITIZE_THREAD__)
static inline void rperf__release_fence(void)
{
    static _Atomic int dummy;
    atomic_fetch_add(&dummy, 0);
}
#else
static inline void rperf__release_fence(void) { atomic_thread_fence(memory_order_release); }
#endif

/* ---- clocks (any context; clock_gettime is async-signal-safe) ---------- */

#ifdef RPERF_STEP_CLOCK
/* Unit tests of the engine's timing rules only (core/CMakeLists.txt,
 * rperf_core_step_clock): every clock the engine reads is the test
 * program's, which moves it by hand (tests/unit/fake_engine.h,
 * let_ns_pass), so a preempted test cannot stretch a block it means to be
 * short. */
int64_t rperf__step_clock_ns(clockid_t id);
static inline int64_t rperf__ns(clockid_t id) { return rperf__step_clock_ns(id); }
#else
static inline int64_t rperf__ns(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return -1;
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
#endif
static inline int64_t rperf__mono_ns(void) { return rperf__ns(CLOCK_MONOTONIC); }
static inline int64_t rperf__native_cpu_ns(void) { return rperf__ns(CLOCK_THREAD_CPUTIME_ID); }

/* ---- allocator (alloc.c; never in a signal handler) --------------------- */

int rperf__alloc_init(void);
void *rperf__alloc(size_t size);
void *rperf__calloc(size_t n, size_t size);
void rperf__free(void *p, size_t size);
void *rperf__calloc_lines(size_t size);           /* zeroed, 64-byte aligned */
void rperf__free_lines(void *p, size_t size);
void *rperf__alloc_pages(size_t size);            /* contents undefined */
void rperf__free_pages(void *p, size_t size);
void rperf__pages_release_cache(void);
void rperf__pages_fork_child(void);
extern struct ck_malloc rperf__ck_allocator;   /* for ck_ht (frees deferred) */

/* ---- per-native-thread state (initial-exec TLS, see thread_state.c) ----- */

/* Where a thread's unattributed time starts, for the late rule
 * (thread_state.c): at a tick's sample (the code there went on, and the
 * next sample may take some of it), at an exact boundary of the thread's
 * code (the window's or the thread's start, the end of a C call sampled
 * late), or at the first tick's sample after such a boundary. */
enum { RPERF_HEAD_TICK = 0, RPERF_HEAD_EXACT = 1, RPERF_HEAD_FIRST_TICK = 2 };

typedef struct rperf_nt {
    rperf_thread_t *cur;     /* Ruby thread running here, or NULL */
    uint64_t run_id;         /* run in which cur was set (stale otherwise) */
    uint64_t switches;       /* RESUMED count on this native thread */
    int64_t resumed_mono;    /* CLOCK_MONOTONIC at its last RESUMED */
    /* at the last READY seen here (rperf_ev_ready_here), and `switches`
     * then (it names the suspension that READY ends). Atomic (relaxed)
     * because a window's close reads them from another thread for a
     * suspended thread (rperf__settle_blocked); a torn pair reads as "not
     * ready", never as a wrong time. */
    _Atomic int64_t ready_mono;
    _Atomic uint64_t ready_switches;
    int32_t tid;
    bool resume_slow;        /* set by the backend during this RESUMED */
    /* the largest value of this native thread's CPU clock the engine has
     * used (its own readings and a backend's, cpu mode): a reading smaller
     * than it was taken before one already used, and is not taken */
    int64_t cpu_hi;
    uint32_t stripe;         /* 1 + its quiescence stripe (engine.c); 0: none yet */
    /* 1 + tick_seq (low bits) when a job here last consumed the ticks (0:
     * none yet): a job run for a tick that an earlier run consumed samples
     * nothing */
    uint32_t answered;
    /* the host wants the job to run on this native thread (a Ruby thread
     * here needs something only its own job can do): the tick signal's
     * handler triggers it whether or not ticks are taken
     * (rperf_engine_want_job) */
    _Atomic uint8_t want_job;
} rperf_nt_t;

rperf_nt_t *rperf__nt(void);

/* ---- per-Ruby-thread state ---------------------------------------------- */

struct rperf_thread {
    /* Touched by the thread's own GVL events (RESUMED/SUSPENDED, with the
     * READY time its RESUMED brings along): kept together in the first 124
     * bytes, which are two cache lines (the allocation is 64-byte aligned:
     * jemalloc's 384-byte class), so a switch touches two lines of it.
     * What only samples, GC steps and the worker use comes after. */
    int64_t cpu_acc;               /* on-GVL CPU ns of this Ruby thread */
    int64_t cpu_mark;              /* native CPU clock reading that opens the current
                                      on-GVL interval, -1 when closed (cpu mode) */
    int64_t mark_mono;             /* monotonic time of that reading */
    int64_t mark_idle;             /* of the wall time since, how much was spent
                                      waiting for the GVL after READY (no CPU) */
    int64_t susp_wall;             /* SUSPENDED time (0: none pending) */
    int64_t susp_native_cpu;       /* native CPU clock at SUSPENDED, -1 not read
                                      (the interval stayed open, cpu mode) */
    uint64_t susp_switches;        /* nt->switches at SUSPENDED */
    rperf_nt_t *susp_nt;           /* native thread at SUSPENDED */
    _Atomic int64_t ready_wall;    /* READY (any thread) */
    /* wall mode: the off-GVL time of the current suspension is recorded up
     * to here (a window closed meanwhile: rperf__settle_blocked); 0 none.
     * Written only while the thread is off the GVL, with the GVL held. */
    int64_t settled_wall;
    /* wall mode: [GVL blocked] / [GVL wait] time not yet recorded (blocks
     * shorter than an interval are sampled, see resume_wall) */
    int64_t pend_blocked;
    int64_t pend_wait;
    /* time in short GVL blocks (wall mode) still to go before the next one
     * is sampled (0: none drawn yet in this run), and the state of the
     * generator of such gaps (next_gap). Own context only. */
    int64_t gvl_left;
    uint32_t gap_rng;
    _Atomic uint32_t ractor_id;    /* Ruby's Ractor id, 0 = not known yet */
    uint8_t fresh;                 /* created, not yet run (own, then cleared) */
    uint8_t migrates;              /* cpu mode: resumed on another native thread
                                      once; SUSPENDED then always reads the clock */
    int32_t native_tid;            /* where it last resumed */
    /* Where the unattributed time starts (RPERF_HEAD_*: the late rule,
     * thread_state.c). Own context only. */
    uint8_t head;
    /* A deferred run (rperf_config_t.deferred): 1 while the thread is
     * outside profile blocks. Its time is then dropped, not recorded, and
     * the backend does not hear of it, so it gets no ticks. Written by the
     * thread itself (rperf_thread_profile_begin/end) or, before its first
     * turn, by its creator. */
    uint8_t muted;

    /* The third line: what recording a sample reads and writes (a
     * thread's state is cold when it records: it last ran on the other
     * CPU, or long ago), so a sample's accounting and its ring push cost
     * one load miss on the thread's state, not one per structure. */
    int64_t last_cpu;              /* cpu_acc-based time at the last sample */
    int64_t last_wall;             /* monotonic time at the last sample */
    /* both modes: [GC marking] / [GC sweeping] time not yet recorded (GC
     * steps are sampled by their time, see rperf_ev_gc) */
    int64_t pend_gc_mark;
    int64_t pend_gc_sweep;
    /* ring: producer = the thread itself, consumer = the worker. A chain of
     * segments (ring.c): the producer writes the last, the consumer drains
     * the first; a full segment is followed by one 4x larger. The producer
     * keeps its segment's buffer, mask and tail here and only stores to the
     * segment (ring.c, push). */
    struct rperf_ring_seg *prod;            /* NULL until the first push */
    ck_ring_buffer_t *prod_buf;             /* prod's buffer */
    _Atomic uint32_t label_set_id;
    uint32_t prod_tail;                     /* prod's producer tail */
    uint32_t prod_seen;                     /* a lower bound of prod's consumer head
                                               (ring.c, ring_used) */
    uint32_t prod_mask;                     /* prod's slots - 1 */
    /* segments of the largest size chained after one of that size since
     * the producer last went back to the initial size (ring.c, ring_grow) */
    uint32_t prod_maxed;

    /* identity */
    uint32_t seq;
    uint32_t ring_slots0;                   /* size of the first segment, in words */
    uint64_t run_id;
    int64_t gc_enter_wall;
    /* time in GC steps still to go before the next one is sampled (as
     * gvl_left, both modes) */
    int64_t gc_left;

    /* ring, consumer side: the worker writes these, the marker reads cons */
    struct rperf_ring_seg *_Atomic cons;
    _Atomic uint64_t dropped;
    uintptr_t c_hdr[3];            /* partial state (worker only) */
    int c_have_hdr;

    /* identity: written by the thread itself (host, GVL held), read by
     * results; the name is a seqlock (odd name_seq = being written) */
    _Atomic uint32_t name_seq;
    _Atomic char name[RPERF_THREAD_NAME_MAX];
    uint32_t name_checks;
    /* root-most frame of the last capture: the stack a thread's last
     * pending time is charged to when it exits with no Ruby frame left
     * (marked by rperf_engine_mark) */
    _Atomic rperf_frame_t last_root;

    /* the host's handle on the Ruby thread (its Thread VALUE), for reading
     * its stack while it is off the GVL (rperf__settle_blocked); 0 none.
     * Meaningful only while `exited` is 0. */
    _Atomic uintptr_t host_ref;

    /* lifecycle */
    _Atomic int exited;
    /* on the worker's urgent list (worker.c): set by the producer when its
     * ring passes high water, cleared by the worker before it drains */
    _Atomic int urgent;
    rperf_thread_t *urgent_next;
    rperf_thread_t *_Atomic next;  /* registry list (push: CAS; unlink: worker) */
    ck_epoch_entry_t epoch_entry;
};

/* ---- ring encoding (ring.c) --------------------------------------------- */

#define RPERF_RING_MAX_SLOTS (1u << 16)   /* a segment grows up to 512 KiB (prod_mask: 16 bits) */
/* a full segment of the largest size is followed by another, up to this
 * many more in a row (a thread's burst while the worker gets no CPU: at
 * most 9 x 512 KiB waiting) */
#define RPERF_RING_MAX_CHAIN 8u
/* A thread's first segment: small, from the heap. Most threads of a
 * thread-per-connection server, and threads parked for the whole run,
 * record a few samples (the blocked time of their first turn) and never
 * need more; the first overflow chains a segment of the configured size
 * (ring.c). */
#define RPERF_RING_FIRST_SLOTS 256u       /* 2 KiB */

typedef struct rperf_ring_seg {
    ck_ring_t ring;
    ck_ring_buffer_t *buf;
    uint32_t slots;
    struct rperf_ring_seg *_Atomic next;   /* published by the producer */
    ck_epoch_entry_t epoch_entry;
} rperf_ring_seg_t;

/* A sample occupies 3 tagged header words (a pair: 4) followed by `depth`
 * frame words. Tagged words have bit 0 set, frames never do (heap VALUEs are aligned),
 * so the GC mark function can mark every untagged word of a live ring
 * region without parsing it. */
bool rperf__ring_push(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                      int64_t mono_ns, const rperf_frame_t *frames, int depth);
/* Two samples on one stack in one record: `weight` of `type` and `weight2`
 * of `type + 1` (GVL blocked + wait, GC marking + sweeping); drained as two
 * samples. All or nothing, as one push. */
bool rperf__ring_push_pair(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                           int64_t weight2, int64_t mono_ns, const rperf_frame_t *frames,
                           int depth);
/* own: an allocation record (core/heap.c), recorded outside profile
 * blocks' muting (the caller decides). */
bool rperf__ring_push_alloc(rperf_thread_t *pt, rperf_sample_type_t type, int64_t weight,
                            int64_t token, const rperf_frame_t *frames, int depth);
typedef struct rperf_decoded {
    rperf_sample_type_t type;
    uint32_t label_set_id;
    uint32_t depth;
    int64_t weight;
    int64_t mono_ns;
} rperf_decoded_t;
/* worker: drain complete samples from pt's ring; calls sink for each. */
typedef void (*rperf_drain_sink)(rperf_thread_t *pt, const rperf_decoded_t *d,
                                 const uint32_t *ids, void *ctx);
size_t rperf__ring_drain(rperf_thread_t *pt, rperf_drain_sink sink, void *ctx);
bool rperf__ring_idle(rperf_thread_t *pt);
void rperf__ring_mark(rperf_thread_t *pt, void (*mark)(rperf_frame_t));
int rperf__ring_init(rperf_thread_t *pt, uint32_t slots);
void rperf__ring_free(rperf_thread_t *pt);

/* ---- frame table (frame_table.c; writer: worker, readers: mark) --------- */

int rperf__frames_init(void);
void rperf__frames_destroy(void);
/* worker: intern the value stored in *inflight (see ring.c), return its id. */
uint32_t rperf__frames_intern(rperf_frame_t v);
size_t rperf__frames_count(void);
rperf_frame_t rperf__frames_at(uint32_t index);
void rperf__frames_mark(void (*mark)(rperf_frame_t), bool (*is_old)(rperf_frame_t));
void rperf__frames_clear(void);
/* marker, GVL thread: index retired (its value is no object of ours) */
bool rperf__frames_retired(uint32_t index);
/* GVL held: the host's retirement pass (rperf_frames_retire_pass) */
size_t rperf__frames_retire_pass(rperf_frame_verdict_t (*judge)(uint32_t id, rperf_frame_t v, void *arg),
                                 void *arg);
/* worker: carry out requested retirements; returns how many */
size_t rperf__frames_retire_due(void);
/* GVL thread (inside GC too): new frames were judged at the last pass */
bool rperf__frames_churning(void);
/* any context but a signal handler: drain every ring at the next wake */
void rperf__worker_drain_soon(void);
extern rperf_frame_t volatile rperf__inflight;  /* worker's frame in transit */
/* epoch: the worker's record (defer frees), the marker's record, the
 * host's retirement pass's record */
extern ck_epoch_t rperf__epoch;
extern ck_epoch_record_t rperf__epoch_worker;
extern ck_epoch_record_t rperf__epoch_marker;
extern ck_epoch_record_t rperf__epoch_namer;
void rperf__epoch_reset(void);

/* ---- aggregation (aggregate.c; worker, or GVL thread when paused) ------- */

/* Grow *p (*cap elements of elem bytes) to hold need elements, doubling
 * from 1024; 0, or -1 out of memory (nothing changed). */
int rperf__grow(void **p, size_t *cap, size_t elem, size_t need);
/* (Re)build an open-addressing index (entry + 1 per slot, 0 empty) of
 * ncap slots, a power of two, over n entries of `stride` bytes whose first
 * field is their uint64_t hash; 0, or -1 out of memory (nothing changed). */
int rperf__hash_index_build(uint32_t **index, size_t *cap, size_t ncap, const void *entries,
                            size_t n, size_t stride);
int rperf__agg_init(bool aggregate);
void rperf__agg_destroy(void);
void rperf__agg_clear(void);
int rperf__agg_add(const uint32_t *ids, uint32_t depth, int64_t weight,
                   uint32_t thread_seq, uint32_t label_set_id, int64_t mono_ns);
size_t rperf__agg_count(void);
int rperf__agg_each(rperf_sample_cb cb, void *ctx);
size_t rperf__agg_weights(int64_t *out, size_t cap);
int rperf__agg_each_since(const int64_t *base, size_t nbase, rperf_sample_cb cb, void *ctx);
size_t rperf__raw_count(void);
int rperf__raw_each(rperf_sample_cb cb, void *ctx, int64_t mono_to_real);
size_t rperf__agg_memory(void);

/* ---- allocations (heap.c) ------------------------------------------------- */

int rperf__heap_init(uint32_t interval);     /* GVL held, at start */
void rperf__heap_destroy(void);
/* worker: aggregate an allocation record of thread `thread_seq` */
int rperf__heap_add(uint32_t thread_seq, const rperf_decoded_t *d, const uint32_t *ids);
/* GVL held, worker parked: around rperf__frames_clear at a window's clear */
void rperf__heap_clear_collect(void);
void rperf__heap_clear_restore(void);
size_t rperf__heap_memory(void);
void rperf__heap_fork_child(void);       /* inside fork() in the child */

/* ---- threads registry (thread_state.c) ---------------------------------- */

extern rperf_thread_t *_Atomic rperf__threads;  /* lock-free pushed list */
/* thread identities kept after their state is freed (worker appends) */
void rperf__thread_archive(const rperf_thread_t *pt);
void rperf__thread_info(const rperf_thread_t *pt, rperf_result_thread_t *out);
void rperf__archive_clear(void);
size_t rperf__archive_count(void);
const rperf_result_thread_t *rperf__archive_at(size_t i);
void rperf__threads_free_all(void);
/* thread_seq -> state of the current run (thread_index.c) */
int rperf__index_put(rperf_thread_t *pt);
void rperf__index_clear(const rperf_thread_t *pt);
void rperf__index_reset(void);
void rperf__gc_reset(void);
void rperf__sample_settle(rperf_thread_t *pt);
/* GVL held, at start: late_after_ns and late_tail_ns for the run's
 * interval and backend (thread_state.c). */
void rperf__late_rule_init(void);
/* GVL held (main Ractor), worker parked: record what the main Ractor's
 * threads off the GVL spent off it up to `now` (thread_state.c). */
void rperf__settle_blocked(int64_t now);
void rperf__thread_retire(rperf_thread_t *prev, rperf_thread_t *pt);
void rperf__thread_destroy(rperf_thread_t *pt);

/* ---- worker (worker.c) -------------------------------------------------- */

int rperf__worker_start(void);
void rperf__worker_stop(void);          /* final drain + join */
void rperf__worker_pause(void);
void rperf__worker_resume(void);
/* own: pt's ring passed high water. now: wake the worker from here even if
 * a ticker is on (rperf_engine_ticker_on) or pt was queued already. */
void rperf__worker_wake_for(rperf_thread_t *pt, bool now);
/* any context: wake-ups of the worker asked so far (producers and ticker;
 * for tests) */
uint64_t rperf__worker_wakes_asked(void);
/* Both return the records drained plus the threads retired (0: nothing
 * happened since the last look). */
size_t rperf__worker_drain_all(void);     /* worker, or with worker parked */
size_t rperf__worker_drain_urgent(void);  /* worker: the threads that asked only */
size_t rperf__worker_drain_thread(rperf_thread_t *pt); /* worker parked: one ring */
void rperf__worker_fork_prepare(void);
void rperf__worker_fork_parent(void);
void rperf__worker_fork_child(void);

/* ---- engine globals (engine.c) ------------------------------------------ */

/* The first line is what every GVL event reads (running, run_id, the
 * interval, the window's start, and the config's clock, backend and
 * main_mn, which rperf_config_t puts first), written only at start, stop,
 * a window's clear and fork: one line per event, which no switch or tick
 * writes. The counters written per tick and per thread start a line of
 * their own (the _Alignas member below). Jobs and hooks in flight are
 * counted per stripe (engine.c). */
typedef struct rperf_engine {
    _Atomic int running;
    _Atomic int has_results;
    _Atomic int fork_reset_needed;
    uint64_t run_id;
    int64_t interval_ns;
    /* A job that runs late_after_ns or more after its oldest unanswered
     * tick ran late (after a C call that kept the GVL); unless its time
     * starts at an exact boundary it leaves late_tail_ns to the next
     * sample (thread_state.c, the late rule). Set at start. */
    int64_t late_after_ns;
    int64_t late_tail_ns;
    /* when the run or the current snapshot window (clear: true) began;
     * written with the GVL held, read by threads' hooks (RESUMED) */
    _Atomic int64_t start_mono_ns;
    rperf_config_t cfg;
    rperf_host_t host;

    _Alignas(64) _Atomic uint64_t trigger_count;
    _Atomic uint64_t outstanding;      /* ticks not yet consumed by a job */
    /* CLOCK_MONOTONIC of the latest tick (0: none this run): a job whose
     * ticks all came before its thread's RESUMED samples nothing
     * (rperf_sample_job) */
    _Atomic int64_t tick_mono;
    /* CLOCK_MONOTONIC of the first tick not yet consumed by a job: a job
     * that answers a tick this old or older ran late (job_is_late) */
    _Atomic int64_t tick_first_mono;
    /* ticks ever delivered (never reset: rperf_nt_t.answered holds it) */
    _Atomic uint64_t tick_seq;
    _Atomic uint64_t sampling_count;
    _Atomic uint64_t sampling_time_ns;
    _Atomic uint64_t dropped_retired;   /* drops of threads already freed */
    _Atomic uint64_t timer_overruns;
    _Atomic uint32_t thread_seq;
    _Atomic int unsettled;              /* created (STARTED), not yet run or exited */
    /* CLOCK_MONOTONIC of the run's latest STARTED (0: none): stored before
     * `unsettled` is raised, read after it (rperf_engine_last_thread_start) */
    _Atomic int64_t last_start_mono;
    _Atomic int thread_new_failed;      /* a thread of this run went unprofiled */
    /* deferred run: threads inside profile blocks (not muted); while it
     * is 0 no tick is taken (rperf_engine_tick_sigsafe) */
    _Atomic int profiled_threads;
    int64_t start_real_ns;
    /* when the current window was closed (pause for a snapshot, stop): the
     * end of its duration and the start of the next window; 0 while open */
    int64_t close_mono_ns;
    /* bumped whenever the aggregation table's entries stop being the ones
     * a reader saw: a start, a clearing resume, a release (GVL held) */
    uint64_t table_generation;
} rperf_engine_t;

extern rperf_engine_t rperf__engine;


#endif
