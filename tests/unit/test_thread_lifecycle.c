/*
 * test_thread_lifecycle.c — unit tests of the engine's per-thread life cycle
 * with a fake host and a fake backend: a thread that exits with no Ruby
 * frame left settles its pending time on its last root frame; a thread
 * created during the run is not charged for the wait before its first turn;
 * the thread table keeps identities of threads the worker already freed;
 * the backend hears when a thread's Ractor becomes known; thread tokens of
 * an earlier run, or of a thread already freed, name nothing; in wall mode a
 * GVL switch captures no stack unless its blocked/wait time is worth a
 * sample, short ones stay off the thread's samples and are recorded, time
 * intact, once their sum passes an interval; the
 * engine counts threads announced but not yet run (unsettled); a thread
 * first met at RESUMED is weighed for its run after that; a block across a
 * cleared snapshot window counts only its part in the new window, and a
 * window's close records the blocks in progress of the threads it can read
 * (and only those); cpu mode
 * reads the thread CPU clock only where a split needs it and keeps its
 * sums exact; READY on the suspending native thread splits blocked from
 * wait time.
 * Context: a plain C program (no Ruby); the test thread plays every Ruby
 * thread's "own" context in turn, the engine's worker runs for real. The
 * engine here reads the test's step clock (rperf_core_step_clock): time
 * passes only in let_ns_pass, exactly as much as asked, so a block meant
 * to be short stays short on a busy machine.
 */
#include "fake_engine.h"

#include <pthread.h>

typedef struct found {
    int64_t root_weight;      /* depth-1 samples whose frame is the root */
    int64_t total;
} found_t;
static uint32_t root_id;
static int scan(const rperf_result_sample_t *s, void *ctx)
{
    found_t *f = ctx;
    f->total += s->weight;
    if (s->depth == 1 && s->frames[0] == root_id) f->root_weight += s->weight;
    return 0;
}

RPERF_TEST(exiting_thread_settles_pending_time_on_its_root_frame)
{
    rperf_thread_t *main_pt = start_wall();
    stack[0] = 0x2000; stack[1] = 0x2008; stack[2] = 0x2010;   /* leaf .. root */
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    RPERF_CHECK(pt != NULL);
    rperf_ev_resumed(pt);
    let_time_pass();
    rperf_sample_job(pt);            /* captures the stack: root = 0x2010 */
    let_time_pass();
    depth = 0;                       /* the block returned: no Ruby frame */
    rperf_ev_suspended(pt);          /* nothing to capture: time stays pending */
    rperf_ev_exited(pt);             /* settled on the root frame */
    (void)main_pt;
    rperf_engine_stop();
    root_id = 0;
    for (uint32_t id = RPERF_SYNTHETIC_FRAMES; id < RPERF_SYNTHETIC_FRAMES + rperf_result_frame_count(); id++)
        if (rperf_result_frame(id) == 0x2010) root_id = id;
    RPERF_CHECK(root_id != 0);
    found_t f = { 0, 0 };
    rperf_result_each_aggregated(scan, &f);
    RPERF_CHECK(f.root_weight > 0);
    rperf_engine_release();
}

RPERF_TEST(new_thread_is_not_charged_for_its_first_wait)
{
    start_wall();
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    let_time_pass();                 /* waiting for its first turn */
    int64_t before = rperf__mono_ns();
    rperf_ev_resumed(pt);
    RPERF_CHECK(pt->last_wall >= before);
    /* a thread first met at RESUMED (existing before) is charged from start */
    rperf_thread_t *old = rperf_thread_new(RPERF_THREAD_EXISTING);
    RPERF_CHECK_EQ(old->susp_wall, rperf__engine.start_mono_ns);
    rperf_engine_stop();
    rperf_engine_release();
}

/* Weights of one thread's samples: those on a real leaf frame (run time)
 * and all of them. */
typedef struct of_thread {
    uint32_t seq;
    int64_t run, total;
} of_thread_t;
static int scan_thread(const rperf_result_sample_t *s, void *ctx)
{
    of_thread_t *t = ctx;
    if (s->thread_seq != t->seq) return 0;
    t->total += s->weight;
    if (s->depth > 0 && s->frames[0] >= RPERF_SYNTHETIC_FRAMES) t->run += s->weight;
    return 0;
}

/* A thread first met at RESUMED (blocked since before start: another
 * Ractor's, or a pool thread started before the run) is charged [start,
 * RESUMED) as blocked, and what it runs after that is weighed in full. It
 * used to count its unattributed time from RESUMED, so recording the
 * blocked time pushed that point into the future and, in wall mode, its
 * run for as long again as it had been blocked weighed nothing (a Ractor
 * woken 0.3 s after start then spinning 0.25 s: 1 sample instead of 250). */
RPERF_TEST(existing_thread_is_weighed_for_its_run_after_its_first_block)
{
    start_wall();
    depth = 3;
    let_ns_pass(3000000);            /* off the GVL since start: 3 ms */
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_EXISTING);
    RPERF_CHECK(pt != NULL);
    rperf_ev_resumed(pt);            /* [GVL blocked] recorded here */
    int64_t run_from = rperf__mono_ns();
    let_ns_pass(1000000);            /* runs 1 ms */
    rperf_sample_job(pt);
    int64_t run_to = rperf__mono_ns();
    int64_t since_start = run_to - rperf__engine.start_mono_ns;
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    of_thread_t t = { pt->seq, 0, 0 };
    rperf_engine_stop();
    rperf_result_each_aggregated(scan_thread, &t);
    /* the sample covers the run (and the instants around RESUMED), not less */
    RPERF_CHECK(t.run >= 1000000);
    RPERF_CHECK(t.run <= run_to - run_from + 1000000);
    /* nothing lost, nothing counted twice: start .. the job (and the
     * instants to its exit) */
    RPERF_CHECK(t.total >= since_start - 1000000);
    RPERF_CHECK(t.total <= since_start + 1000000);
    rperf_engine_release();
}

/* A thread blocked across a snapshot(clear: true) gets only the new
 * window's part of that block when it resumes (the closed window's result
 * is out; a pool thread idle for an hour used to put the whole hour into
 * the window it woke in), and the dropped part does not become run time. */
RPERF_TEST(a_block_across_a_cleared_window_counts_only_in_its_window)
{
    start_wall();
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    RPERF_CHECK(pt != NULL);
    rperf_ev_resumed(pt);
    rperf_ev_suspended(pt);          /* blocks ... */
    let_ns_pass(5000000);            /* ... 5 ms in the first window */
    rperf_engine_pause();
    rperf_engine_resume(true);       /* snapshot(clear: true) */
    int64_t window = rperf__engine.start_mono_ns;
    let_ns_pass(2000000);            /* 2 ms in the new one */
    rperf_ev_resumed(pt);
    int64_t resumed = rperf__mono_ns();
    let_ns_pass(1000000);            /* runs 1 ms */
    rperf_sample_job(pt);
    int64_t sampled = rperf__mono_ns();
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    of_thread_t t = { pt->seq, 0, 0 };
    rperf_engine_stop();
    rperf_result_each_aggregated(scan_thread, &t);
    int64_t off_gvl = t.total - t.run;
    RPERF_CHECK(off_gvl >= 2000000);
    RPERF_CHECK(off_gvl <= resumed - window);
    RPERF_CHECK(t.run >= 1000000);
    RPERF_CHECK(t.run <= sampled - window - off_gvl + 1000000);
    rperf_engine_release();
}

/* Weights of one thread's [GVL blocked] / [GVL wait] records on the stack
 * the fake host returns for a thread off the GVL (blocked_stack). */
typedef struct on_blocked_stack {
    uint32_t seq, leaf_id;
    int64_t blocked, wait, total;
} on_blocked_stack_t;
static int scan_blocked(const rperf_result_sample_t *s, void *ctx)
{
    on_blocked_stack_t *b = ctx;
    if (s->thread_seq != b->seq) return 0;
    b->total += s->weight;
    if (s->depth < 2 || s->frames[1] != b->leaf_id) return 0;
    if (s->frames[0] == RPERF_SAMPLE_GVL_BLOCKED - 1) b->blocked += s->weight;
    if (s->frames[0] == RPERF_SAMPLE_GVL_WAIT - 1) b->wait += s->weight;
    return 0;
}
static uint32_t frame_id_of(rperf_frame_t f)
{
    for (uint32_t id = RPERF_SYNTHETIC_FRAMES; id < RPERF_SYNTHETIC_FRAMES + rperf_result_frame_count(); id++)
        if (rperf_result_frame(id) == f) return id;
    return 0;
}

/* A window's close (snapshot, stop) records, for a main-Ractor thread off
 * the GVL, its time off the GVL up to the close, on the stack that
 * released the GVL ([GVL blocked] until READY, [GVL wait] after), read
 * through the host while the thread is parked: the closed window holds
 * the thread's wall time within it. Its RESUMED in the next window
 * records only the rest, and the next window starts where the closed one
 * ended, so nothing is lost or counted twice across the boundary. */
RPERF_TEST(a_windows_close_records_the_blocks_in_progress)
{
    start_wall();
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    RPERF_CHECK(pt != NULL);
    rperf_thread_set_host_ref(pt, 1);
    rperf_thread_set_ractor(pt, 1);
    rperf_ev_resumed(pt);
    let_ns_pass(1000000);
    rperf_sample_job(pt);
    rperf_ev_suspended(pt);          /* blocks ... */
    int64_t blocked_from = rperf__mono_ns();
    let_ns_pass(4000000);            /* ... 4 ms, then it is ready ... */
    rperf_ev_ready(pt);
    int64_t ready_at = rperf__mono_ns();
    let_ns_pass(2000000);            /* ... and waits 2 ms until the close */
    int captures_before = thread_captures;
    rperf_engine_pause();            /* snapshot */
    int64_t closed = rperf__engine.close_mono_ns;
    RPERF_CHECK(thread_captures > captures_before);
    on_blocked_stack_t w1 = { pt->seq, frame_id_of(0x3000), 0, 0, 0 };
    RPERF_CHECK(w1.leaf_id != 0);
    rperf_result_each_aggregated(scan_blocked, &w1);
    RPERF_CHECK(w1.blocked >= 4000000);
    RPERF_CHECK(w1.blocked <= ready_at - blocked_from + 100000);
    RPERF_CHECK(w1.wait >= 2000000);
    RPERF_CHECK(w1.wait <= closed - ready_at + 100000);
    rperf_engine_resume(true);       /* clear: the next window starts at the close */
    RPERF_CHECK_EQ(rperf__engine.start_mono_ns, closed);
    let_ns_pass(2000000);
    rperf_ev_resumed(pt);            /* the rest of its wait: 2 ms and more */
    int64_t resumed = rperf__mono_ns();
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_stop();
    on_blocked_stack_t w2 = { pt->seq, frame_id_of(0x3000), 0, 0, 0 };
    rperf_result_each_aggregated(scan_blocked, &w2);
    of_thread_t t = { pt->seq, 0, 0 };
    rperf_result_each_aggregated(scan_thread, &t);
    int64_t off_gvl = t.total - t.run;
    RPERF_CHECK(off_gvl >= 2000000);                /* the wait after the close */
    RPERF_CHECK(off_gvl <= resumed - closed + 100000);   /* not the closed part again */
    RPERF_CHECK_EQ(w2.blocked, 0);                  /* it was ready before the close */
    rperf_engine_release();
}

/* The host hands a READY time over at RESUMED (rperf_ev_ready_at) from
 * where the waker left it on the Ruby thread, and does not clear it at
 * SUSPENDED (one store fewer per switch, on a line the waker wrote): the
 * next RESUMED may hand over the same, older time again. The engine must
 * ignore a READY older than the suspension: that suspension's whole time
 * is [GVL blocked] (with the old time taken, 2 of its 3 ms would be
 * [GVL wait] and more than its length in all). */
RPERF_TEST(a_ready_time_older_than_the_suspension_is_ignored)
{
    start_wall();
    stack[0] = 0x2000; stack[1] = 0x2008; stack[2] = 0x2010;
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    RPERF_CHECK(pt != NULL);
    rperf_ev_resumed(pt);
    rperf_ev_suspended(pt);          /* a first block: 1 ms, then ready */
    let_ns_pass(1000000);
    int64_t ready = rperf__mono_ns();
    let_ns_pass(1000000);            /* waits 1 ms for its turn */
    rperf_ev_ready_at(pt, ready);
    rperf_ev_resumed(pt);
    rperf_ev_suspended(pt);          /* a second block, 3 ms */
    int64_t second = rperf__mono_ns();
    let_ns_pass(3000000);
    rperf_ev_ready_at(pt, ready);    /* the first block's READY, again */
    rperf_ev_resumed(pt);
    int64_t resumed = rperf__mono_ns();
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_stop();
    on_blocked_stack_t b = { pt->seq, frame_id_of(0x2000), 0, 0, 0 };
    RPERF_CHECK(b.leaf_id != 0);
    rperf_result_each_aggregated(scan_blocked, &b);
    /* the first block: >= 1 ms each; the second: blocked only */
    RPERF_CHECK(b.wait >= 1000000);
    RPERF_CHECK(b.wait < 2000000);
    RPERF_CHECK(b.blocked >= 4000000);
    RPERF_CHECK(b.blocked <= resumed - second + 2000000);
    rperf_engine_release();
}

/* Threads the close leaves alone: one with no host handle, one of another
 * Ractor, one the host has no stack for: their blocks wait for RESUMED. */
RPERF_TEST(a_windows_close_leaves_threads_it_cannot_read)
{
    start_wall();
    depth = 3;
    rperf_thread_t *pts[3];
    uintptr_t refs[3] = { 0, 1, 2 };      /* none; readable; no frames */
    uint32_t ractors[3] = { 1, 2, 1 };
    for (int i = 0; i < 3; i++) {
        pts[i] = rperf_thread_new(RPERF_THREAD_CREATED);
        RPERF_CHECK(pts[i] != NULL);
        rperf_thread_set_host_ref(pts[i], refs[i]);
        rperf_thread_set_ractor(pts[i], ractors[i]);
        rperf_ev_resumed(pts[i]);
        rperf_ev_suspended(pts[i]);
    }
    let_ns_pass(2000000);
    rperf_engine_stop();
    for (int i = 0; i < 3; i++) {
        of_thread_t t = { pts[i]->seq, 0, 0 };
        rperf_result_each_aggregated(scan_thread, &t);
        RPERF_CHECK_EQ(t.total - t.run, 0);
        RPERF_CHECK_EQ(pts[i]->settled_wall, 0);
    }
    rperf_engine_release();
}

typedef struct seen {
    int n;
    rperf_result_thread_t t[4];
} seen_t;
static int collect_thread(const rperf_result_thread_t *t, void *ctx)
{
    seen_t *s = ctx;
    if (s->n < 4) s->t[s->n] = *t;
    s->n++;
    return 0;
}

RPERF_TEST(thread_table_keeps_exited_threads)
{
    rperf_thread_t *main_pt = start_wall();
    rperf_thread_set_ractor(main_pt, 1);
    rperf_thread_set_name(main_pt, "main", 4);
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    identified = 0;
    rperf_thread_set_ractor(pt, 7);
    RPERF_CHECK_EQ(identified, 1);   /* pt runs here: the backend hears it */
    /* a name longer than the buffer is cut, never overflows */
    char longname[200];
    memset(longname, 'x', sizeof(longname));
    rperf_thread_set_name(pt, longname, sizeof(longname));
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_pause();            /* drains: the exited thread is archived */
    rperf_engine_resume(false);
    rperf_engine_stop();
    seen_t s = { 0 };
    rperf_result_each_thread(collect_thread, &s);
    RPERF_CHECK_EQ(s.n, 2);
    RPERF_CHECK_EQ(s.t[0].thread_seq, 1);
    RPERF_CHECK_EQ(s.t[0].ractor_id, 1);
    RPERF_CHECK_STR(s.t[0].name, "main");
    RPERF_CHECK_EQ(s.t[1].thread_seq, 2);
    RPERF_CHECK_EQ(s.t[1].ractor_id, 7);
    RPERF_CHECK_EQ(strlen(s.t[1].name), RPERF_THREAD_NAME_MAX - 1);
    RPERF_CHECK(s.t[1].native_tid > 0);
    rperf_engine_release();
}

/* The thread index grows by chunks of 1,024 threads; a release frees every
 * chunk the run allocated (a reset visits only those up to the highest
 * one used), so a run that met 1,100 threads leaves nothing behind. */
RPERF_TEST(a_release_frees_the_whole_thread_index)
{
    size_t base = rperf_engine_memory_bytes();
    start_wall();
    rperf_thread_t *last = NULL;
    for (int i = 0; i < 1100; i++) last = rperf_thread_new(RPERF_THREAD_CREATED);
    RPERF_CHECK(last != NULL);
    RPERF_CHECK(rperf_thread_seq(last) > 1024);             /* in the second chunk */
    RPERF_CHECK(rperf_thread_from_token(rperf_thread_token(last)) == last);
    rperf_engine_stop();
    rperf_engine_release();
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base);
    start_wall();                                           /* and the next run starts empty */
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    RPERF_CHECK_EQ(rperf_thread_seq(pt), 2);
    rperf_engine_stop();
    rperf_engine_release();
    RPERF_CHECK_EQ(rperf_engine_memory_bytes(), base);
}

RPERF_TEST(tokens_never_name_state_of_another_run)
{
    rperf_thread_t *main_pt = start_wall();
    uintptr_t old_main = rperf_thread_token(main_pt);
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    uintptr_t old_pt = rperf_thread_token(pt);
    RPERF_CHECK(rperf_thread_from_token(old_main) == main_pt);
    RPERF_CHECK(rperf_thread_from_token(old_pt) == pt);
    RPERF_CHECK(rperf_thread_from_token(0) == NULL);
    /* an exited thread, once retired by the worker, is no longer named */
    rperf_ev_resumed(pt);
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_pause();
    rperf_engine_resume(false);
    RPERF_CHECK(rperf_thread_from_token(old_pt) == NULL);
    rperf_engine_stop();
    rperf_engine_release();
    /* the next run hands out the same thread_seq values: old tokens stay
     * stale (they are never dereferenced) */
    rperf_thread_t *main2 = start_wall();
    rperf_thread_t *pt2 = rperf_thread_new(RPERF_THREAD_CREATED);
    RPERF_CHECK_EQ(rperf_thread_seq(main2), 1);
    RPERF_CHECK_EQ(rperf_thread_seq(pt2), 2);
    RPERF_CHECK(rperf_thread_from_token(old_main) == NULL);
    RPERF_CHECK(rperf_thread_from_token(old_pt) == NULL);
    RPERF_CHECK(rperf_thread_from_token(rperf_thread_token(pt2)) == pt2);
    rperf_engine_stop();
    rperf_engine_release();
}

typedef struct gvl_sums {
    int64_t blocked, wait, normal;
} gvl_sums_t;
static int sum_types(const rperf_result_sample_t *s, void *ctx)
{
    gvl_sums_t *g = ctx;
    if (s->frames[0] == RPERF_SAMPLE_GVL_BLOCKED - 1) g->blocked += s->weight;
    else if (s->frames[0] == RPERF_SAMPLE_GVL_WAIT - 1) g->wait += s->weight;
    else g->normal += s->weight;
    return 0;
}

/* The thread leaves the GVL and exits; the run stops and is released.
 * Returns its GVL sums. */
static gvl_sums_t exit_stop_and_sum(rperf_thread_t *pt)
{
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);             /* settled on the root frame */
    rperf_engine_stop();
    gvl_sums_t g = { 0, 0, 0 };
    rperf_result_each_aggregated(sum_types, &g);
    rperf_engine_release();
    return g;
}

/* `n` blocks of at least `ns` each, on the GVL in between. */
static void blocks_of(rperf_thread_t *pt, int n, int64_t ns)
{
    for (int i = 0; i < n; i++) {
        rperf_ev_suspended(pt);
        let_ns_pass(ns);
        rperf_ev_resumed(pt);
    }
}

RPERF_TEST(short_gvl_blocks_capture_nothing_and_stay_off_the_next_sample)
{
    start_wall_at(1);                /* threshold: 250 ms, far above these blocks */
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    let_time_pass();
    int before = captures;
    for (int i = 0; i < 5; i++) {
        rperf_ev_suspended(pt);      /* wall mode: no sample at SUSPENDED */
        let_time_pass();             /* 20 us blocked: not worth a stack */
        rperf_ev_resumed(pt);
        RPERF_CHECK(pt->pend_blocked >= (i + 1) * 20000);
    }
    RPERF_CHECK_EQ(captures, before);   /* five switches, no stack captured */
    int64_t pending = pt->pend_blocked;
    rperf_sample_job(pt);            /* one capture, for the run time only: */
    RPERF_CHECK_EQ(captures, before + 1);
    RPERF_CHECK_EQ(pt->pend_blocked, pending);   /* the blocked time waits for a block's stack */
    gvl_sums_t g = exit_stop_and_sum(pt);
    RPERF_CHECK_EQ(g.blocked, pending);  /* the blocked time, intact */
    RPERF_CHECK_EQ(g.wait, 0);
}

/* Short blocks' time is recorded at the RESUMED whose block brings their sum
 * past a gap drawn in [interval/2, 3 interval/2), on that block's stack.
 * 10 Hz: interval 100 ms, gaps under 150 ms; blocks of 10 ms or more (a
 * block stretched to an interval by a stall of the machine would be
 * recorded alone and leave the others pending: at 100 Hz a 9 ms stall did
 * that once on a loaded VM). */
RPERF_TEST(short_gvl_blocks_are_recorded_once_their_sum_passes_an_interval)
{
    start_wall_at(10);
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    int blocks = 0, before = captures;
    while (captures == before && blocks < 15) {
        blocks_of(pt, 1, 10000000);
        blocks++;
    }
    RPERF_CHECK_EQ(captures, before + 1);   /* by the 15th block: 150 ms */
    RPERF_CHECK_EQ(pt->pend_blocked, 0);
    RPERF_CHECK_EQ(pt->pend_wait, 0);
    gvl_sums_t g = exit_stop_and_sum(pt);
    RPERF_CHECK(g.blocked >= (int64_t)blocks * 10000000);   /* every block's time */
}

/* A block of an interval or more is recorded alone at its RESUMED: the time
 * short blocks left pending before it stays pending for a sampled one, so
 * the long call gets exactly its own time. 100 Hz: interval 10 ms. */
RPERF_TEST(long_gvl_block_is_recorded_alone_and_leaves_short_ones_pending)
{
    start_wall_at(100);
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    blocks_of(pt, 3, 20000);         /* far below the first gap (5 ms+) */
    int64_t residual = pt->pend_blocked;
    int before = captures;
    blocks_of(pt, 1, 11000000);      /* 11 ms: over an interval */
    RPERF_CHECK_EQ(captures, before + 1);
    RPERF_CHECK_EQ(pt->pend_blocked, residual);   /* the long block's alone */
    gvl_sums_t g = exit_stop_and_sum(pt);
    RPERF_CHECK(g.blocked >= 11000000 + residual);   /* all of it, the residual at the exit */
}

/* [GVL blocked] weight of the samples whose leaf real frame is `leaf`. */
typedef struct on_leaf {
    rperf_frame_t leaf;
    int64_t blocked;
} on_leaf_t;
static int scan_leaf(const rperf_result_sample_t *s, void *ctx)
{
    on_leaf_t *o = ctx;
    if (s->depth > 1 && s->frames[0] == RPERF_SAMPLE_GVL_BLOCKED - 1 &&
        rperf_result_frame(s->frames[1]) == o->leaf)
        o->blocked += s->weight;
    return 0;
}

/* Two calls that alternate, half an interval each: with a fixed gap of one
 * interval every sample would land on the second of them (the sum passes
 * the gap there, again and again); drawn gaps give both their share. */
RPERF_TEST(alternating_short_blocks_are_both_sampled)
{
    start_wall_at(1000);             /* interval 1 ms */
    depth = 3;
    stack[1] = 0x2008; stack[2] = 0x2010;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    for (int i = 0; i < 80; i++) {
        rperf_ev_suspended(pt);
        let_ns_pass(500000);
        stack[0] = (i & 1) ? 0xB000 : 0xA000;   /* the call that blocked */
        rperf_ev_resumed(pt);
    }
    stack[0] = 0x2000;
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_stop();
    on_leaf_t a = { 0xA000, 0 }, b = { 0xB000, 0 };
    rperf_result_each_aggregated(scan_leaf, &a);
    rperf_result_each_aggregated(scan_leaf, &b);
    RPERF_CHECK(a.blocked > 0);
    RPERF_CHECK(b.blocked > 0);
    rperf_engine_release();
}

/* Wall mode, interval 50 us: a thread blocks 60 us, becomes READY (through
 * the slow path, or through the same-native-thread fast path when `here`),
 * waits 30 us for the GVL and resumes. Returns the run's GVL sums; the
 * number of stacks captured at that RESUMED goes to *captured_at_resume. */
static int64_t last_ready_bound;   /* from before SUSPENDED to after READY */

static gvl_sums_t block_60us_then_wait_30us(bool here, int *captured_at_resume)
{
    start_wall_at(20000);
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    int64_t t_susp = rperf__mono_ns();
    rperf_ev_suspended(pt);
    let_ns_pass(60000);
    if (here)
        rperf_ev_ready_here();
    else
        rperf_ev_ready(pt);
    last_ready_bound = rperf__mono_ns() - t_susp;   /* blocked can be no longer */
    let_ns_pass(30000);
    int before = captures;
    rperf_ev_resumed(pt);
    *captured_at_resume = captures - before;
    RPERF_CHECK_EQ(pt->pend_blocked, 0);
    RPERF_CHECK_EQ(pt->pend_wait, 0);
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_stop();
    gvl_sums_t g = { 0, 0, 0 };
    rperf_result_each_aggregated(sum_types, &g);
    rperf_engine_release();
    return g;
}

RPERF_TEST(long_gvl_block_is_recorded_at_resumed_on_its_own_stack)
{
    int captured;
    gvl_sums_t g = block_60us_then_wait_30us(false, &captured);
    RPERF_CHECK_EQ(captured, 1);
    RPERF_CHECK(g.blocked >= 60000);
    RPERF_CHECK(g.wait >= 30000);
}

RPERF_TEST(threads_announced_but_not_run_are_unsettled)
{
    start_wall();
    RPERF_CHECK_EQ(rperf_engine_unsettled_threads(), 0);
    rperf_thread_t *a = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_thread_t *b = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_thread_t *old = rperf_thread_new(RPERF_THREAD_EXISTING);
    RPERF_CHECK_EQ(rperf_engine_unsettled_threads(), 2);
    rperf_ev_resumed(a);             /* first turn */
    RPERF_CHECK_EQ(rperf_engine_unsettled_threads(), 1);
    rperf_ev_suspended(a);
    rperf_ev_resumed(a);
    RPERF_CHECK_EQ(rperf_engine_unsettled_threads(), 1);
    rperf_ev_exited(b);              /* exits without ever running */
    RPERF_CHECK_EQ(rperf_engine_unsettled_threads(), 0);
    rperf_ev_resumed(old);
    RPERF_CHECK_EQ(rperf_engine_unsettled_threads(), 0);
    rperf_engine_stop();
    rperf_engine_release();
}

/* cpu mode: the leaf and total weights of a run */
typedef struct cpu_sums {
    uint32_t leaf_id;
    int64_t leaf;
    int64_t total;
} cpu_sums_t;
static int sum_cpu(const rperf_result_sample_t *s, void *ctx)
{
    cpu_sums_t *c = ctx;
    c->total += s->weight;
    if (s->depth > 0 && s->frames[0] == c->leaf_id) c->leaf += s->weight;
    return 0;
}

static void *resume_and_suspend_elsewhere(void *arg)
{
    rperf_thread_t *pt = arg;
    rperf_ev_resumed(pt);
    let_time_pass();
    rperf_ev_suspended(pt);
    return NULL;
}

/* cpu mode reads the thread CPU clock (a system call, inside Ruby's
 * scheduler lock) only where a split is needed: quick switches leave the
 * on-GVL interval open, yet every nanosecond of the thread's CPU time is
 * counted once, and a long stretch of CPU off the GVL still goes to the
 * stack that released it. */
RPERF_TEST(cpu_mode_quick_switches_read_the_clock_rarely_and_keep_the_sums)
{
    start_at(1000, RPERF_CLOCK_CPU);     /* threshold: 250 us */
    rperf_frame_t a[3] = { 0x3000, 0x3008, 0x5000 }, b[3] = { 0x4000, 0x4008, 0x5000 };
    memcpy(stack, a, sizeof(stack));
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    int64_t c0 = rperf__native_cpu_ns();
    rperf_ev_resumed(pt);
    int marks = 0;
    int64_t mark = pt->cpu_mark;
    for (int i = 0; i < 50; i++) {
        let_time_pass();                 /* on the GVL */
        rperf_ev_suspended(pt);
        let_time_pass();                 /* off it, briefly */
        rperf_ev_resumed(pt);
        if (pt->cpu_mark != mark) marks++;
        mark = pt->cpu_mark;
    }
    /* 50 switches in ~2 ms: a reading per quarter interval, not per event */
    RPERF_CHECK(marks <= 15);
    int before = captures;
    memcpy(stack, b, sizeof(stack));     /* a call that releases the GVL ... */
    rperf_ev_suspended(pt);
    int64_t off0 = rperf__native_cpu_ns();
    let_ns_pass(1000000);                /* ... and burns 1 ms of CPU without it */
    int64_t off = rperf__native_cpu_ns() - off0;
    rperf_ev_resumed(pt);
    RPERF_CHECK_EQ(captures, before + 1);
    memcpy(stack, a, sizeof(stack));
    let_time_pass();
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    int64_t spent = rperf__native_cpu_ns() - c0;
    rperf_engine_stop();
    cpu_sums_t s = { frame_id_of(0x4000), 0, 0 };
    RPERF_CHECK(s.leaf_id != 0);
    rperf_result_each_aggregated(sum_cpu, &s);
    /* the releasing stack gets the off-GVL CPU, never more than it burned
     * plus the events' own bookkeeping */
    RPERF_CHECK(s.leaf >= off / 2);
    RPERF_CHECK(s.leaf <= off + 100000);
    /* every nanosecond once: the readings lie between c0 and the end */
    RPERF_CHECK(s.total <= spent);
    RPERF_CHECK(s.total >= spent - 200000);
    rperf_engine_release();
}

/* A thread resumed on another native thread (M:N) cannot combine the two
 * threads' clocks: from then on it reads the clock at every SUSPENDED. */
RPERF_TEST(cpu_mode_thread_that_moves_reads_at_every_suspend)
{
    start_at(1000, RPERF_CLOCK_CPU);
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    let_time_pass();
    rperf_ev_suspended(pt);              /* short: left open */
    RPERF_CHECK(pt->cpu_mark >= 0);
    pthread_t other;
    RPERF_CHECK_EQ(pthread_create(&other, NULL, resume_and_suspend_elsewhere, pt), 0);
    pthread_join(other, NULL);
    RPERF_CHECK_EQ(pt->migrates, 1);
    RPERF_CHECK_EQ(pt->cpu_mark, -1);   /* closed with a reading there */
    rperf_ev_resumed(pt);
    rperf_ev_exited(pt);
    rperf_engine_stop();
    rperf_engine_release();
}

/* READY seen on the native thread where the thread suspended (the end of
 * a blocking region) is kept in that native thread's state: wall mode
 * splits blocked from wait time with it, cpu mode knows the thread only
 * waited for its turn after it (no CPU to split off: no clock read, no
 * capture). */
RPERF_TEST(ready_on_the_same_native_thread_splits_blocked_from_wait)
{
    int captured;
    gvl_sums_t g = block_60us_then_wait_30us(true, &captured);
    RPERF_CHECK_EQ(captured, 1);
    RPERF_CHECK(g.blocked >= 60000);
    /* the wait is not counted as blocked (a bound measured in the run, not
     * a timing threshold: a preempted test only widens it) */
    RPERF_CHECK(g.blocked <= last_ready_bound);
    RPERF_CHECK(g.wait >= 30000);

    start_at(1000, RPERF_CLOCK_CPU);     /* threshold: 250 us */
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    rperf_ev_suspended(pt);
    rperf_ev_ready_here();               /* blocked for no time ... */
    int64_t mark = pt->cpu_mark;
    let_ns_pass(1000000);                /* ... then a long wait for the GVL */
    int before = captures;
    rperf_ev_resumed(pt);
    RPERF_CHECK_EQ(captures, before);    /* nothing charged to the releasing call */
    RPERF_CHECK_EQ(pt->cpu_mark, mark);  /* and no clock read */
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_stop();
    rperf_engine_release();
}

/* cpu mode: a backend that read the holder's CPU clock for the tick (the
 * holder backend's timer thread) hands the reading to the job, which then
 * makes no system call of its own; the engine takes it only when it is
 * recent and not older than a reading it already used on this thread. A
 * reading the test makes up far ahead of the real clock shows which one
 * the job's weight came from. */
static int64_t fake_tick_cpu = -1, fake_tick_mono;
static int fake_tick_cpu_op(int64_t *cpu_ns, int64_t *mono_ns)
{
    if (fake_tick_cpu < 0) return -1;
    *cpu_ns = fake_tick_cpu;
    *mono_ns = fake_tick_mono;
    fake_tick_cpu = -1;                  /* handed out once */
    return 0;
}
static const rperf_backend_ops_t reading_backend = {
    .version = RPERF_BACKEND_ABI_VERSION, .name = "reading", .description = "test",
    .start = fb_start, .stop = fb_stop, .tick_cpu = fake_tick_cpu_op,
};

/* One cpu-mode run at 1 kHz: a thread runs, then its job finds the reading
 * `ahead` ns past (or before, if negative) its clock's value at RESUMED,
 * taken `age` ns ago (before its RESUMED when over 50 us), or with `late`
 * taken 50 us after RESUMED and found 600 us later. Returns the weight of
 * the job's own sample (the thread's leaf frame; its exit settles the
 * rest on its root frame). */
static int64_t job_weight_with_reading(int64_t ahead, int64_t age, bool late)
{
    rperf_config_t cfg = { .frequency = 1000, .clock = RPERF_CLOCK_CPU, .aggregate = true,
                           .ring_slots = 1024, .backend = &reading_backend };
    rperf_thread_t *caller = NULL;
    char err[128];
    RPERF_CHECK_EQ(rperf_engine_start(&cfg, &caller, err, sizeof(err)), 0);
    rperf_frame_t a[3] = { 0x6000, 0x6008, 0x5000 };
    memcpy(stack, a, sizeof(stack));
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);                /* reads the clock: cpu_mark */
    fake_tick_cpu = pt->cpu_mark + ahead;
    let_ns_pass(50000);
    fake_tick_mono = rperf__mono_ns() - age;
    if (late) let_ns_pass(600000);
    rperf_sample_job(pt);
    RPERF_CHECK_EQ(fake_tick_cpu, -1);  /* offered to the job */
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);
    rperf_engine_stop();
    cpu_sums_t s = { frame_id_of(0x6000), 0, 0 };
    RPERF_CHECK(s.leaf_id != 0);
    rperf_result_each_aggregated(sum_cpu, &s);
    rperf_engine_release();
    return s.leaf;
}

RPERF_TEST(cpu_mode_job_takes_a_fresh_reading_from_the_backend)
{
    const int64_t ahead = 500000000;     /* 0.5 s: far past what the run burns */
    /* fresh (just taken): the job's weight is the reading's */
    RPERF_CHECK(job_weight_with_reading(ahead, 0, false) >= ahead);
    /* taken while the thread held its GVL but found 600 us later (the job
     * ran long after its tick, after a C call that kept the GVL): such a
     * job reads its own clock, the call's time is its own up to now */
    int64_t late = job_weight_with_reading(ahead, 0, true);
    RPERF_CHECK(late > 0);
    RPERF_CHECK(late < ahead);
    /* a whole interval old, from before the thread's RESUMED (another
     * thread's turn): the job reads its own clock */
    int64_t stale = job_weight_with_reading(ahead, 1000000, false);
    RPERF_CHECK(stale > 0);
    RPERF_CHECK(stale < ahead);
    /* older than the reading taken at RESUMED: taking it would give a
     * negative weight (no sample at all); the job reads its own clock */
    RPERF_CHECK(job_weight_with_reading(-1, 0, false) > 0);
}

typedef struct gc_sums {
    int64_t mark, sweep, other;
    int mark_n, sweep_n;
} gc_sums_t;
static int sum_gc(const rperf_result_sample_t *s, void *ctx)
{
    gc_sums_t *g = ctx;
    if (s->frames[0] == RPERF_SAMPLE_GC_MARKING - 1) {
        g->mark += s->weight;
        g->mark_n++;
    } else if (s->frames[0] == RPERF_SAMPLE_GC_SWEEPING - 1) {
        g->sweep += s->weight;
        g->sweep_n++;
    } else {
        g->other += s->weight;
    }
    return 0;
}

static void gc_step(int64_t ns)
{
    rperf_ev_gc(RPERF_GC_ENTER);
    let_ns_pass(ns);
    rperf_ev_gc(RPERF_GC_EXIT);
}

/* The thread's GC weights after its exit, stopped and released. */
static gc_sums_t gc_exit_stop_and_sum(rperf_thread_t *pt)
{
    rperf_ev_suspended(pt);
    rperf_ev_exited(pt);             /* settled on the root frame */
    rperf_engine_stop();
    gc_sums_t g = { 0, 0, 0, 0, 0 };
    rperf_result_each_aggregated(sum_gc, &g);
    rperf_engine_release();
    return g;
}

/* Lazy sweeping runs thousands of short GC steps a second: short steps
 * capture no stack, and the thread's ticks leave their time pending (it
 * belongs on a stack that ran GC, not on whatever the tick finds), typed
 * and kept until one of them is sampled or the thread exits. */
RPERF_TEST(short_gc_steps_capture_nothing_and_stay_off_the_next_sample)
{
    for (int clock = RPERF_CLOCK_CPU; clock <= RPERF_CLOCK_WALL; clock++) {
        start_at(10, clock);             /* the first gap: 50 ms or more */
        depth = 3;
        rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
        int64_t t0 = rperf__mono_ns();
        rperf_ev_resumed(pt);
        int before = captures;
        rperf_ev_gc(RPERF_GC_START);
        for (int i = 0; i < 5; i++) gc_step(20000);   /* 100 us of marking */
        rperf_ev_gc(RPERF_GC_END_MARK);
        for (int i = 0; i < 3; i++) gc_step(20000);   /* 60 us of sweeping */
        rperf_ev_gc(RPERF_GC_END_SWEEP);
        RPERF_CHECK_EQ(captures, before);             /* eight steps, no stack */
        int64_t mark = pt->pend_gc_mark, sweep = pt->pend_gc_sweep;
        RPERF_CHECK(mark >= 100000);
        RPERF_CHECK(sweep >= 60000);
        let_time_pass();
        rperf_sample_job(pt);            /* the tick's own sample only */
        RPERF_CHECK_EQ(captures, before + 1);
        RPERF_CHECK_EQ(pt->pend_gc_mark, mark);
        RPERF_CHECK_EQ(pt->pend_gc_sweep, sweep);
        gc_sums_t g = gc_exit_stop_and_sum(pt);
        int64_t elapsed = rperf__mono_ns() - t0;
        RPERF_CHECK_EQ(g.mark_n, 1);     /* settled once, at the exit */
        RPERF_CHECK_EQ(g.sweep_n, 1);
        if (clock == RPERF_CLOCK_WALL) {
            RPERF_CHECK_EQ(g.mark, mark);   /* none lost */
            RPERF_CHECK_EQ(g.sweep, sweep);
        } else {
            /* cpu mode: steps are timed on the monotonic clock and cut to
             * the thread's CPU time (a preempted step counts less) */
            RPERF_CHECK(g.mark > 0 && g.sweep > 0);
        }
        /* nothing counted twice: the busy thread's weights add up to at
         * most its wall time */
        RPERF_CHECK(g.mark + g.sweep + g.other <= elapsed);
    }
}

/* Short steps are sampled by their time: once their sum passes the gap
 * (under 1.5 intervals), the step that passed it captures its stack and
 * everything pending is recorded there; a step of an interval or more is
 * recorded at once. One capture per gap, not per step. 10 Hz (interval
 * 100 ms), steps of 2 ms: a stall of the machine would have to stretch one
 * to 100 ms to make it look long. */
RPERF_TEST(gc_steps_are_recorded_once_their_sum_passes_an_interval)
{
    for (int clock = RPERF_CLOCK_CPU; clock <= RPERF_CLOCK_WALL; clock++) {
        start_at(10, clock);
        depth = 3;
        rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
        rperf_ev_resumed(pt);
        int before = captures, steps = 0;
        rperf_ev_gc(RPERF_GC_START);
        while (captures == before && steps < 80) {
            gc_step(2000000);
            steps++;
        }
        RPERF_CHECK_EQ(captures, before + 1);   /* by 150 ms of steps */
        RPERF_CHECK(steps >= 25);               /* not before 50 ms */
        RPERF_CHECK_EQ(pt->pend_gc_mark, 0);
        gc_step(2000000);                       /* far below the next gap */
        RPERF_CHECK_EQ(captures, before + 1);
        gc_step(110000000);                     /* over an interval: at once */
        RPERF_CHECK_EQ(captures, before + 2);
        RPERF_CHECK_EQ(pt->pend_gc_mark, 0);
        rperf_ev_gc(RPERF_GC_END_SWEEP);
        gc_sums_t g = gc_exit_stop_and_sum(pt);
        if (clock == RPERF_CLOCK_WALL)
            RPERF_CHECK(g.mark >= (int64_t)(steps + 1) * 2000000 + 110000000);   /* every step's */
        else
            RPERF_CHECK(g.mark > 0);
    }
}

/* Wall mode, the late rule: a job that runs long after its tick (the
 * thread was in a C call that keeps the GVL) samples up to the end of its
 * own capture, all of it the call's, less the mean time from a moment back
 * to the tick before it (the head the call took from the code before it),
 * which it leaves to the next sample; unless the thread's time starts at
 * an exact boundary (its start, or the end of a call sampled late): then
 * it keeps everything. 10 Hz, the fake backend's periodic ticks: the tail
 * left is half an interval, 50 ms. */
RPERF_TEST(a_late_job_leaves_the_mean_head_unless_its_start_is_exact)
{
    start_wall_at(10);                   /* late: 50 us after the first tick */
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    RPERF_CHECK_EQ(pt->head, RPERF_HEAD_EXACT);
    int64_t tail = rperf__engine.late_tail_ns;
    RPERF_CHECK_EQ(tail, 50000000);
    /* a call from the thread's start: exact, it keeps all its time */
    rperf_engine_tick_sigsafe();
    let_ns_pass(30000000);               /* the call: no job for 30 ms */
    int before = captures;
    int64_t job = rperf__mono_ns();
    rperf_sample_job(pt);
    RPERF_CHECK_EQ(captures, before + 1);
    RPERF_CHECK(pt->last_wall >= job);
    RPERF_CHECK_EQ(pt->head, RPERF_HEAD_EXACT);
    /* Ruby code with two on-time samples: the first in the glue right
     * after the exact end (under late_after_ns, 50 us, when the machine
     * (or a sanitizer) lets it come that soon), then one 1 ms on */
    for (int i = 0; i < 2; i++) {
        if (i == 1) let_ns_pass(1000000);
        rperf_engine_tick_sigsafe();
        int64_t from = pt->last_wall;
        job = rperf__mono_ns();
        rperf_sample_job(pt);
        RPERF_CHECK(pt->last_wall >= job);
        /* the job read the clock a little after `job`: within 5 us of the
         * threshold either answer is right */
        int64_t since = job - from, after = rperf__engine.late_after_ns;
        if (i == 1 || since >= after) RPERF_CHECK_EQ(pt->head, RPERF_HEAD_TICK);
        else if (since + 5000 < after) RPERF_CHECK_EQ(pt->head, RPERF_HEAD_FIRST_TICK);
    }
    /* a 60 ms call after Ruby code: it leaves the mean head */
    let_ns_pass(1000000);
    rperf_engine_tick_sigsafe();
    let_ns_pass(60000000);
    job = rperf__mono_ns();
    rperf_sample_job(pt);
    int64_t after = rperf__mono_ns();
    RPERF_CHECK(pt->last_wall >= job - tail);
    RPERF_CHECK(pt->last_wall <= after - tail);
    RPERF_CHECK_EQ(pt->head, RPERF_HEAD_TICK);
    /* a second call right after it: the tail left is its head, and it
     * leaves as much again */
    rperf_engine_tick_sigsafe();
    let_ns_pass(60000000);
    job = rperf__mono_ns();
    rperf_sample_job(pt);
    after = rperf__mono_ns();
    RPERF_CHECK(pt->last_wall >= job - tail);
    RPERF_CHECK(pt->last_wall <= after - tail);
    /* a job for a tick that an earlier run of the job consumed (it came
     * while that run sampled) answers nothing */
    let_ns_pass(1000000);
    rperf_engine_tick_sigsafe();
    rperf_sample_job(pt);
    before = captures;
    int64_t last = pt->last_wall;
    rperf_sample_job(pt);                /* flagged again, no new tick */
    RPERF_CHECK_EQ(captures, before);
    RPERF_CHECK_EQ(pt->last_wall, last);
    (void)exit_stop_and_sum(pt);
}

/* A tick that found the thread off its GVL (:nanosleep flags the main
 * Ractor's last running thread whatever it does) has its job run right
 * after the thread's RESUMED, on the stack of the call that released the
 * GVL: that job samples nothing, and the thread's run before the call
 * stays for the next tick that finds it on its GVL. */
RPERF_TEST(a_job_for_ticks_before_the_resumed_samples_nothing)
{
    const int clocks[] = { RPERF_CLOCK_WALL, RPERF_CLOCK_CPU };
    for (int c = 0; c < 2; c++) {
        start_at(10, clocks[c]);
        depth = 3;
        rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
        rperf_ev_resumed(pt);
        int64_t last_wall = pt->last_wall, last_cpu = pt->last_cpu;
        let_ns_pass(3000000);                /* 3 ms of Ruby code, no tick */
        rperf_ev_suspended(pt);              /* the call: off the GVL */
        rperf_engine_tick_sigsafe();         /* a tick meets it there */
        let_ns_pass(1000000);
        rperf_ev_resumed(pt);
        int before = captures;
        rperf_sample_job(pt);                /* right after RESUMED */
        RPERF_CHECK_EQ(captures, before);    /* nothing sampled, */
        RPERF_CHECK_EQ(pt->last_wall, last_wall);   /* nothing attributed */
        RPERF_CHECK_EQ(pt->last_cpu, last_cpu);
        RPERF_CHECK_EQ(rperf_engine_ticks_unconsumed(), 1);   /* not answered */
        let_ns_pass(1000000);
        rperf_engine_tick_sigsafe();         /* a tick while it runs */
        rperf_sample_job(pt);                /* samples both runs */
        RPERF_CHECK_EQ(captures, before + 1);
        RPERF_CHECK_EQ(rperf_engine_ticks_unconsumed(), 0);
        if (clocks[c] == RPERF_CLOCK_WALL) RPERF_CHECK(pt->last_wall >= last_wall + 4000000);
        else RPERF_CHECK(pt->last_cpu > last_cpu);
        (void)exit_stop_and_sum(pt);
    }
}

/* A backend whose thread_resumed did something slow (woke its parked timer
 * thread: a futex wake-up, tens of microseconds on a VM) and said so: that
 * time is part of the thread's way back to its Ruby code, so it is the
 * releasing call's [GVL wait], not the thread's next sample (which lands
 * after the call has returned). Busy time in the fake op stands for the
 * wake-up. */
static int64_t slow_resume_ns;
static void slow_resumed(void)
{
    if (slow_resume_ns <= 0) return;
    let_ns_pass(slow_resume_ns);
    rperf_resume_was_slow();
}
static const rperf_backend_ops_t slow_backend = {
    .version = RPERF_BACKEND_ABI_VERSION, .name = "slow", .description = "test",
    .start = fb_start, .stop = fb_stop, .thread_resumed = slow_resumed,
};

RPERF_TEST(a_slow_resume_is_the_wait_of_the_call_that_released_the_gvl)
{
    rperf_config_t cfg = { .frequency = 1000, .clock = RPERF_CLOCK_WALL, .aggregate = true,
                           .ring_slots = 1024, .backend = &slow_backend };
    rperf_thread_t *caller = NULL;
    char err[128];
    RPERF_CHECK_EQ(rperf_engine_start(&cfg, &caller, err, sizeof(err)), 0);
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    slow_resume_ns = 0;
    rperf_ev_resumed(pt);
    rperf_ev_suspended(pt);
    let_ns_pass(2000000);                /* a block of two intervals ... */
    rperf_ev_ready_here();               /* ... ready on its own native thread */
    slow_resume_ns = 3000000;
    int before = captures;
    rperf_ev_resumed(pt);                /* the backend takes 3 ms */
    slow_resume_ns = 0;
    RPERF_CHECK_EQ(captures - before, 1);   /* recorded at RESUMED, on its stack */
    gvl_sums_t g = exit_stop_and_sum(pt);
    RPERF_CHECK(g.blocked >= 2000000);
    RPERF_CHECK(g.wait >= 3000000);
}

/* A deferred run: no tick is taken while no thread is inside a profile
 * block; a thread's time counts only inside its block (what it did before
 * is dropped at the block's start, the tail after its last sample at its
 * end), and the backend hears only of threads inside blocks. */
static int resumes_heard;
static void counting_resumed(void) { resumes_heard++; }
static const rperf_backend_ops_t counting_backend = {
    .version = RPERF_BACKEND_ABI_VERSION, .name = "counting", .description = "test",
    .start = fb_start, .stop = fb_stop, .thread_resumed = counting_resumed,
};

RPERF_TEST(a_deferred_run_samples_only_inside_profile_blocks)
{
    rperf_config_t cfg = { .frequency = 1000, .clock = RPERF_CLOCK_WALL, .aggregate = true,
                           .ring_slots = 1024, .backend = &counting_backend, .deferred = true };
    rperf_thread_t *caller = NULL;
    char err[128];
    resumes_heard = 0;
    RPERF_CHECK_EQ(rperf_engine_start(&cfg, &caller, err, sizeof(err)), 0);
    RPERF_CHECK_EQ(resumes_heard, 0);          /* the caller is outside a block */
    depth = 3;
    rperf_thread_t *pt = rperf_thread_new(RPERF_THREAD_CREATED);
    rperf_ev_resumed(pt);
    RPERF_CHECK_EQ(resumes_heard, 0);
    rperf_engine_tick_sigsafe();               /* nobody inside: no tick */
    rperf_stats_t st;
    rperf_engine_stats(&st);
    RPERF_CHECK_EQ(st.trigger_count, 0);
    let_ns_pass(3000000);                      /* 3 ms outside */
    rperf_sample_job(pt);
    int64_t began = rperf__mono_ns();
    rperf_thread_profile_begin(pt);
    RPERF_CHECK_EQ(resumes_heard, 1);          /* attached as a holder */
    RPERF_CHECK_EQ(rperf_engine_profiled_threads(), 1);
    let_ns_pass(2000000);                      /* 2 ms inside */
    rperf_engine_tick_sigsafe();
    rperf_sample_job(pt);
    int64_t sampled = rperf__mono_ns();
    let_ns_pass(1000000);                      /* a tail after the last sample */
    rperf_thread_profile_end(pt);
    RPERF_CHECK_EQ(rperf_engine_profiled_threads(), 0);
    rperf_ev_suspended(pt);
    rperf_ev_resumed(pt);
    RPERF_CHECK_EQ(resumes_heard, 1);          /* outside again: not heard */
    let_ns_pass(3000000);
    rperf_engine_stats(&st);
    RPERF_CHECK_EQ(st.trigger_count, 1);
    gvl_sums_t g = exit_stop_and_sum(pt);
    RPERF_CHECK(g.normal >= 2000000);
    RPERF_CHECK(g.normal <= sampled - began);  /* nothing before, no tail */
    RPERF_CHECK_EQ(g.blocked + g.wait, 0);
}

int main(void)
{
    rperf_engine_init(&host);
    return RPERF_RUN(RPERF_CASE(exiting_thread_settles_pending_time_on_its_root_frame),
                     RPERF_CASE(existing_thread_is_weighed_for_its_run_after_its_first_block),
                     RPERF_CASE(a_block_across_a_cleared_window_counts_only_in_its_window),
                     RPERF_CASE(a_windows_close_records_the_blocks_in_progress),
                     RPERF_CASE(a_ready_time_older_than_the_suspension_is_ignored),
                     RPERF_CASE(a_release_frees_the_whole_thread_index),
                     RPERF_CASE(a_windows_close_leaves_threads_it_cannot_read),
                     RPERF_CASE(new_thread_is_not_charged_for_its_first_wait),
                     RPERF_CASE(thread_table_keeps_exited_threads),
                     RPERF_CASE(tokens_never_name_state_of_another_run),
                     RPERF_CASE(short_gvl_blocks_capture_nothing_and_stay_off_the_next_sample),
                     RPERF_CASE(short_gvl_blocks_are_recorded_once_their_sum_passes_an_interval),
                     RPERF_CASE(long_gvl_block_is_recorded_at_resumed_on_its_own_stack),
                     RPERF_CASE(long_gvl_block_is_recorded_alone_and_leaves_short_ones_pending),
                     RPERF_CASE(alternating_short_blocks_are_both_sampled),
                     RPERF_CASE(threads_announced_but_not_run_are_unsettled),
                     RPERF_CASE(cpu_mode_quick_switches_read_the_clock_rarely_and_keep_the_sums),
                     RPERF_CASE(cpu_mode_thread_that_moves_reads_at_every_suspend),
                     RPERF_CASE(ready_on_the_same_native_thread_splits_blocked_from_wait),
                     RPERF_CASE(cpu_mode_job_takes_a_fresh_reading_from_the_backend),
                     RPERF_CASE(short_gc_steps_capture_nothing_and_stay_off_the_next_sample),
                     RPERF_CASE(gc_steps_are_recorded_once_their_sum_passes_an_interval),
                     RPERF_CASE(a_late_job_leaves_the_mean_head_unless_its_start_is_exact),
                     RPERF_CASE(a_job_for_ticks_before_the_resumed_samples_nothing),
                     RPERF_CASE(a_slow_resume_is_the_wait_of_the_call_that_released_the_gvl),
                     RPERF_CASE(a_deferred_run_samples_only_inside_profile_blocks));
}
