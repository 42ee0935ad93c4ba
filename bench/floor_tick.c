/*
 * floor_tick.c — the in-process floor of the benches: a bare timer thread
 * inside a Ruby process, no profiler. It sleeps to absolute deadlines
 * (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)) at a given frequency and
 * only counts its wake-ups (with no timer slack, as the profiler's tick
 * thread sleeps: backends/timer_thread.c), so a bench can run a workload with it and
 * without it, side by side, and state what the profiler costs above what
 * any timer thread waking at that rate costs this machine (on a nested VM a
 * wake-up among GVL hand-offs costs far more than one in a compute loop:
 * docs/performance.md). bench/floor.c is the same idea as a standalone
 * program around a C loop.
 *
 * It also holds the floor of the per-switch figures: an empty Ruby thread
 * event hook (floor_hooks_on/off). With any such hook installed, Ruby 3.3
 * takes a process-wide rwlock around every thread event it dispatches
 * (thread_pthread.c rb_thread_execute_hooks), three per GVL switch: that
 * cost is the same for every profiler that follows the GVL, and a run with
 * the empty hook shows what rperf's own hook code adds above it. The same
 * for allocations: an empty NEWOBJ hook (floor_newobj_on/off), with which
 * Ruby sends every allocation through its slow path and the hook dispatch.
 *
 * Built as a shared object by bench/floor_tick.rb (cc -O2 -shared -fPIC)
 * and called through Fiddle. Contexts: floor_tick_start_schedule/stop and
 * floor_hooks_on/off from Ruby (GVL held; the hook functions are looked up
 * in the running Ruby, no Ruby header needed); tick_main on its own thread,
 * every signal blocked (process-directed signals must go to Ruby's
 * threads); empty_hook wherever Ruby fires thread events, empty_newobj_hook
 * inside allocations (both do nothing).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <time.h>

#define NSEC 1000000000LL

static pthread_t thr;
static int started;
static _Atomic int running;
static _Atomic long wakes;
static int64_t period;
/* 0: a fixed grid (one wake-up every period, as the profiler's tick on a
 * steady holder); 1: one wake-up at a uniformly drawn moment of each
 * period (as its tick at every change of holder), from a xorshift */
static int drawn;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static int64_t draw(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int64_t)(rng % (uint64_t)period);
}

static int64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * NSEC + t.tv_nsec;
}

static void *tick_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);       /* as the profiler's tick thread */
    int64_t slot = mono_ns() + period;            /* the current period's start */
    int64_t deadline = drawn ? slot + draw() : slot;
    while (atomic_load(&running)) {
        struct timespec t = { .tv_sec = (time_t)(deadline / NSEC), .tv_nsec = (long)(deadline % NSEC) };
        if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0) continue;
        atomic_fetch_add_explicit(&wakes, 1, memory_order_relaxed);
        int64_t now = mono_ns();
        slot += period;
        if (slot < now) slot = now + period;          /* missed: skip, as the profiler does */
        deadline = drawn ? slot + draw() : slot;
    }
    return NULL;
}

/* Starts the thread ticking at hz, on a grid (drawn_moments 0) or at a
 * drawn moment of each period (1). Returns 0, or -1 (bad hz, already
 * started, or pthread_create failed). */
int floor_tick_start_schedule(long hz, int drawn_moments)
{
    if (hz <= 0 || started) return -1;
    period = NSEC / hz;
    drawn = drawn_moments != 0;
    atomic_store(&wakes, 0);
    atomic_store(&running, 1);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thr, NULL, tick_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return -1;
    started = 1;
    return 0;
}

/* Stops and joins the thread (within one period). Returns its wake-ups. */
long floor_tick_stop(void)
{
    if (!started) return 0;
    atomic_store(&running, 0);
    pthread_join(thr, NULL);
    started = 0;
    return atomic_load(&wakes);
}

/* ---- the empty thread event hook ---------------------------------------- */

/* Ruby 3.3 include/ruby/thread.h: STARTED | READY | RESUMED | SUSPENDED |
 * EXITED, the events rperf hooks. */
#define THREAD_EVENTS 0x1fu

typedef void (*hook_cb)(uint32_t event, const void *data, void *user);
typedef void *(*add_hook_fn)(hook_cb cb, uint32_t events, void *user);
typedef _Bool (*remove_hook_fn)(void *hook);

static void *hook;

static void empty_hook(uint32_t event, const void *data, void *user)
{
    (void)event;
    (void)data;
    (void)user;
}

/* Installs the empty hook. Returns 0, or -1 (installed already, or this
 * Ruby has no thread event hooks). */
int floor_hooks_on(void)
{
    add_hook_fn add = (add_hook_fn)dlsym(RTLD_DEFAULT, "rb_internal_thread_add_event_hook");
    if (hook || !add) return -1;
    hook = add(empty_hook, THREAD_EVENTS, NULL);
    return hook ? 0 : -1;
}

/* Removes it. Returns 0, or -1 if it was not installed. */
int floor_hooks_off(void)
{
    remove_hook_fn rm = (remove_hook_fn)dlsym(RTLD_DEFAULT, "rb_internal_thread_remove_event_hook");
    if (!hook || !rm) return -1;
    rm(hook);
    hook = NULL;
    return 0;
}

/* ---- the empty allocation hook ------------------------------------------ */

/* Ruby 3.3 include/ruby/internal/event.h and include/ruby/debug.h */
#define NEWOBJ_EVENT 0x100000u
#define HOOK_FLAG_SAFE 0x01
#define HOOK_FLAG_RAW_ARG 0x04

typedef void (*raw_hook_cb)(uintptr_t data, const void *trace_arg);
typedef void (*add_event_hook2_fn)(raw_hook_cb cb, uint32_t events, uintptr_t data, int flags);
typedef int (*remove_event_hook_fn)(raw_hook_cb cb);

static int newobj_on;

static void empty_newobj_hook(uintptr_t data, const void *trace_arg)
{
    (void)data;
    (void)trace_arg;
}

/* Installs an empty NEWOBJ hook in the calling Ractor's list (GVL held):
 * with it every allocation takes Ruby's slow path and the hook dispatch,
 * the floor of any allocation profiler built on the hook. Returns 0, or
 * -1 (installed already, or not found). */
int floor_newobj_on(void)
{
    add_event_hook2_fn add = (add_event_hook2_fn)dlsym(RTLD_DEFAULT, "rb_add_event_hook2");
    if (newobj_on || !add) return -1;
    add(empty_newobj_hook, NEWOBJ_EVENT, 0 /* Qfalse: nothing to mark */, HOOK_FLAG_SAFE | HOOK_FLAG_RAW_ARG);
    newobj_on = 1;
    return 0;
}

int floor_newobj_off(void)
{
    remove_event_hook_fn rm = (remove_event_hook_fn)dlsym(RTLD_DEFAULT, "rb_remove_event_hook");
    if (!newobj_on || !rm) return -1;
    rm(empty_newobj_hook);
    newobj_on = 0;
    return 0;
}
