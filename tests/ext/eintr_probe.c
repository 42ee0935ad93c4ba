/*
 * eintr_probe.c — a test-only Ruby extension (tests/ruby/test_eintr.rb):
 * C code that blocks in one system or libc call WHILE HOLDING THE GVL, the
 * way a C extension that never releases the GVL does, and counts how often
 * that call returned EINTR or returned before its timeout. It exists to
 * measure which calls the profiler's tick signal can interrupt.
 *
 * EintrProbe.run(kind, total_ms, each_ms) -> [calls, eintr, early]
 *   repeats call `kind` (each with a timeout of each_ms) until total_ms
 *   have passed on CLOCK_MONOTONIC. eintr: returns with -1/EINTR (or an
 *   EINTR error code); early: returns without error and without the event
 *   before each_ms had passed (on the clock of the call's deadline:
 *   CLOCK_REALTIME for the last three kinds). Kinds: "nanosleep", "poll", "select",
 *   "epoll_wait", "read_rcvtimeo" (a socket with SO_RCVTIMEO, no data),
 *   "read_pipe" (a pipe without timeout that a helper pthread writes one
 *   byte into after each_ms), "sem_timedwait", "cond_timedwait"
 *   (pthread_cond_timedwait, never signalled), "mutex_timedlock" (a mutex
 *   a helper pthread holds for the whole run).
 * EintrProbe.kinds -> the kinds, in table order.
 * EintrProbe.spin_without_gvl -> [signal numbers]
 *   releases the GVL and spins (a runnable task, as C code doing work
 *   outside the GVL is) with the real-time signals blocked on this thread,
 *   until EintrProbe.stop_spin; returns the real-time signals that became
 *   pending on the thread meanwhile (consumed, so none is delivered later).
 *   EintrProbe.spinning? is true while a spin runs (the test's handshake).
 * EintrProbe.helper_start / EintrProbe.helper_stop -> count
 *   a plain pthread (not a Ruby thread) that blocks every signal from birth
 *   and spins, as a library's worker does; helper_start returns once it
 *   spins, helper_stop stops it and returns how many instances of
 *   real-time signals were queued on it (consumed, none delivered).
 * Contexts: every method runs with the GVL held on the calling Ruby thread
 * and uses no Ruby API while it blocks (spin_without_gvl spins without the
 * GVL and uses no Ruby API there); the helper pthreads are plain pthreads
 * that never touch Ruby. No Ruby API beyond defining methods and converting
 * arguments and results.
 */
#include <ruby/ruby.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *const kinds[] = { "nanosleep",     "poll",           "select",
                                     "epoll_wait",    "read_rcvtimeo",  "read_pipe",
                                     "sem_timedwait", "cond_timedwait", "mutex_timedlock" };
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* SO_RCVTIMEO is kept in jiffies and waited for with schedule_timeout, which
 * can return up to one jiffy (at most 10 ms, HZ=100) before the requested
 * wall time with no signal involved (seen once in CI: 1 call in 9, under
 * :nanosleep, which signals no main-Ractor thread). Only a return earlier
 * than that counts as early for read_rcvtimeo. */
#define JIFFY_SLACK_NS 10000000LL

typedef struct probe {
    int kind;
    int64_t each_ns;
    int fds[2];
    int epfd;
    sem_t sem;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t held;       /* mutex_timedlock: locked by the holder */
    pthread_t helper;
    bool helper_on;
    volatile int stop;
    pthread_mutex_t gate_mu;    /* holder: "locked" handshake and release */
    pthread_cond_t gate_cv;
    int holder_state;           /* 0 starting, 1 holding, 2 release */
} probe_t;

typedef struct counts {
    long calls, eintr, early;
} counts_t;

static int64_t clock_ns(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static struct timespec ts_of(int64_t ns)
{
    struct timespec t = { .tv_sec = (time_t)(ns / 1000000000LL), .tv_nsec = (long)(ns % 1000000000LL) };
    return t;
}

static struct timespec realtime_in(int64_t ns)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t t = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec + ns;
    return ts_of(t);
}

/* read_pipe: write one byte after each_ns, for as long as the probe runs */
static void *pipe_writer(void *arg)
{
    probe_t *p = arg;
    while (!p->stop) {
        struct timespec t = ts_of(p->each_ns);
        while (nanosleep(&t, &t) != 0 && errno == EINTR) {
        }
        if (p->stop) break;
        char c = 'x';
        ssize_t w = write(p->fds[1], &c, 1);
        (void)w;
    }
    return NULL;
}

/* mutex_timedlock: hold `held` until told to release it */
static void *mutex_holder(void *arg)
{
    probe_t *p = arg;
    pthread_mutex_lock(&p->held);
    pthread_mutex_lock(&p->gate_mu);
    p->holder_state = 1;
    pthread_cond_broadcast(&p->gate_cv);
    while (p->holder_state != 2) pthread_cond_wait(&p->gate_cv, &p->gate_mu);
    pthread_mutex_unlock(&p->gate_mu);
    pthread_mutex_unlock(&p->held);
    return NULL;
}

static const char *setup(probe_t *p)
{
    p->fds[0] = p->fds[1] = p->epfd = -1;
    switch (p->kind) {
    case 3:
        p->epfd = epoll_create1(EPOLL_CLOEXEC);
        return p->epfd < 0 ? "epoll_create1" : NULL;
    case 4: {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->fds) != 0) return "socketpair";
        struct timeval tv = { .tv_sec = (time_t)(p->each_ns / 1000000000LL),
                              .tv_usec = (suseconds_t)(p->each_ns % 1000000000LL / 1000) };
        return setsockopt(p->fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ? "setsockopt"
                                                                                   : NULL;
    }
    case 5:
        if (pipe2(p->fds, O_CLOEXEC) != 0) return "pipe2";
        if (pthread_create(&p->helper, NULL, pipe_writer, p) != 0) return "pthread_create";
        p->helper_on = true;
        return NULL;
    case 6:
        return sem_init(&p->sem, 0, 0) != 0 ? "sem_init" : NULL;
    case 7:
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        return NULL;
    case 8:
        pthread_mutex_init(&p->held, NULL);
        pthread_mutex_init(&p->gate_mu, NULL);
        pthread_cond_init(&p->gate_cv, NULL);
        if (pthread_create(&p->helper, NULL, mutex_holder, p) != 0) return "pthread_create";
        p->helper_on = true;
        pthread_mutex_lock(&p->gate_mu);
        while (p->holder_state != 1) pthread_cond_wait(&p->gate_cv, &p->gate_mu);
        pthread_mutex_unlock(&p->gate_mu);
        return NULL;
    default:
        return NULL;
    }
}

static void teardown(probe_t *p)
{
    p->stop = 1;
    if (p->kind == 8 && p->helper_on) {
        pthread_mutex_lock(&p->gate_mu);
        p->holder_state = 2;
        pthread_cond_broadcast(&p->gate_cv);
        pthread_mutex_unlock(&p->gate_mu);
    }
    if (p->helper_on) pthread_join(p->helper, NULL);
    if (p->fds[0] >= 0) close(p->fds[0]);
    if (p->fds[1] >= 0) close(p->fds[1]);
    if (p->epfd >= 0) close(p->epfd);
    if (p->kind == 6) sem_destroy(&p->sem);
    if (p->kind == 7) {
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
    }
    if (p->kind == 8) {
        pthread_mutex_destroy(&p->held);
        pthread_cond_destroy(&p->gate_cv);
        pthread_mutex_destroy(&p->gate_mu);
    }
}

/* One call. Returns 0 done/timed out, 1 EINTR, -1 another error (errno). */
static int one_call(probe_t *p)
{
    int64_t each = p->each_ns;
    int rc;
    switch (p->kind) {
    case 0: {
        struct timespec t = ts_of(each);
        rc = nanosleep(&t, NULL);
        break;
    }
    case 1:
        rc = poll(NULL, 0, (int)(each / 1000000));
        break;
    case 2: {
        struct timeval tv = { .tv_sec = (time_t)(each / 1000000000LL),
                              .tv_usec = (suseconds_t)(each % 1000000000LL / 1000) };
        rc = select(0, NULL, NULL, NULL, &tv);
        break;
    }
    case 3: {
        struct epoll_event ev;
        rc = epoll_wait(p->epfd, &ev, 1, (int)(each / 1000000));
        break;
    }
    case 4: {
        char c;
        rc = (int)read(p->fds[0], &c, 1);
        if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) rc = 0;   /* timed out */
        break;
    }
    case 5: {
        char c;
        rc = (int)read(p->fds[0], &c, 1);
        if (rc == 1) rc = 0;
        break;
    }
    case 6: {
        struct timespec t = realtime_in(each);
        rc = sem_timedwait(&p->sem, &t);
        if (rc < 0 && errno == ETIMEDOUT) rc = 0;
        break;
    }
    case 7: {
        struct timespec t = realtime_in(each);
        pthread_mutex_lock(&p->mu);
        int e = pthread_cond_timedwait(&p->cv, &p->mu, &t);
        pthread_mutex_unlock(&p->mu);
        if (e == 0 || e == ETIMEDOUT) return 0;
        errno = e;
        return e == EINTR ? 1 : -1;
    }
    case 8: {
        struct timespec t = realtime_in(each);
        int e = pthread_mutex_timedlock(&p->held, &t);
        if (e == 0) pthread_mutex_unlock(&p->held);
        if (e == 0 || e == ETIMEDOUT) return 0;
        errno = e;
        return e == EINTR ? 1 : -1;
    }
    default:
        errno = EINVAL;
        return -1;
    }
    if (rc >= 0) return 0;
    return errno == EINTR ? 1 : -1;
}

static int kind_index(VALUE kind)
{
    const char *k = StringValueCStr(kind);
    for (size_t i = 0; i < NKINDS; i++)
        if (strcmp(k, kinds[i]) == 0) return (int)i;
    rb_raise(rb_eArgError, "unknown kind %s", k);
}

static VALUE probe_run(VALUE self, VALUE kind, VALUE total_ms, VALUE each_ms)
{
    (void)self;
    probe_t p;
    memset(&p, 0, sizeof(p));
    p.kind = kind_index(kind);
    p.each_ns = NUM2LONG(each_ms) * 1000000LL;
    int64_t total_ns = NUM2LONG(total_ms) * 1000000LL;
    const char *failed = setup(&p);
    if (failed) {
        int e = errno;
        teardown(&p);
        rb_syserr_fail(e, failed);
    }
    counts_t c = { 0, 0, 0 };
    int64_t end = mono_ns() + total_ns;
    int err = 0;
    /* sem_timedwait, pthread_cond_timedwait and pthread_mutex_timedlock
     * wait for a CLOCK_REALTIME deadline: a step of the system clock (seen
     * once in CI, on every backend and in no signal's presence) ends them
     * early on the monotonic clock. Their length is judged on theirs. */
    clockid_t judge = p.kind >= 6 ? CLOCK_REALTIME : CLOCK_MONOTONIC;
    while (mono_ns() < end) {
        int64_t t0 = clock_ns(judge);
        int r = one_call(&p);
        int64_t took = clock_ns(judge) - t0;
        c.calls++;
        if (r == 1) c.eintr++;
        else if (r < 0) {
            err = errno;
            break;
        } else if (p.kind != 5 && took < p.each_ns - (p.kind == 4 ? JIFFY_SLACK_NS : 0)) {
            c.early++;   /* read_pipe returns with data: its time is the writer's */
        }
    }
    teardown(&p);
    if (err) rb_syserr_fail(err, kinds[p.kind]);
    return rb_ary_new_from_args(3, LONG2NUM(c.calls), LONG2NUM(c.eintr), LONG2NUM(c.early));
}

static VALUE probe_kinds(VALUE self)
{
    (void)self;
    VALUE a = rb_ary_new();
    for (size_t i = 0; i < NKINDS; i++) rb_ary_push(a, rb_str_new_cstr(kinds[i]));
    return a;
}

#include <ruby/thread.h>

static atomic_int spin_state;   /* 1 spinning, 2 asked to stop */

static void *spin_body(void *arg)
{
    sigset_t rt, old;
    sigemptyset(&rt);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++) sigaddset(&rt, s);
    pthread_sigmask(SIG_BLOCK, &rt, &old);
    atomic_store(&spin_state, 1);
    while (atomic_load(&spin_state) == 1) {
    }
    sigset_t pend;
    sigpending(&pend);
    uint64_t *found = arg;
    struct timespec zero = { 0, 0 };
    for (int s = SIGRTMIN; s <= SIGRTMAX && s < 64; s++) {
        if (!sigismember(&pend, s)) continue;
        *found |= 1ull << s;
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, s);
        while (sigtimedwait(&one, NULL, &zero) == s) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    atomic_store(&spin_state, 0);
    return NULL;
}

static VALUE probe_spin(VALUE self)
{
    (void)self;
    uint64_t found = 0;
    rb_thread_call_without_gvl(spin_body, &found, NULL, NULL);
    VALUE a = rb_ary_new();
    for (int s = 0; s < 64; s++)
        if (found & (1ull << s)) rb_ary_push(a, INT2NUM(s));
    return a;
}

static VALUE probe_spinning(VALUE self)
{
    (void)self;
    return atomic_load(&spin_state) == 1 ? Qtrue : Qfalse;
}

static VALUE probe_stop_spin(VALUE self)
{
    (void)self;
    int one = 1;
    atomic_compare_exchange_strong(&spin_state, &one, 2);
    return Qnil;
}

static pthread_t helper_thr;
static atomic_int helper_state;   /* 1 spinning, 2 asked to stop, 3 done */
static long helper_count;

static void *helper_body(void *arg)
{
    (void)arg;
    atomic_store(&helper_state, 1);
    while (atomic_load(&helper_state) == 1) {
    }
    sigset_t rt;
    sigemptyset(&rt);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++) sigaddset(&rt, s);
    struct timespec zero = { 0, 0 };
    long n = 0;
    while (sigtimedwait(&rt, NULL, &zero) > 0) n++;
    helper_count = n;
    atomic_store(&helper_state, 3);
    return NULL;
}

static VALUE probe_helper_start(VALUE self)
{
    (void)self;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    atomic_store(&helper_state, 0);
    int rc = pthread_create(&helper_thr, NULL, helper_body, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) rb_syserr_fail(rc, "pthread_create");
    while (atomic_load(&helper_state) != 1) {
    }
    return Qnil;
}

static VALUE probe_helper_stop(VALUE self)
{
    (void)self;
    atomic_store(&helper_state, 2);
    pthread_join(helper_thr, NULL);
    return LONG2NUM(helper_count);
}

void Init_eintr_probe(void);
RUBY_FUNC_EXPORTED void Init_eintr_probe(void)
{
    rb_ext_ractor_safe(true);
    VALUE m = rb_define_module("EintrProbe");
    rb_define_module_function(m, "run", probe_run, 3);
    rb_define_module_function(m, "kinds", probe_kinds, 0);
    rb_define_module_function(m, "spin_without_gvl", probe_spin, 0);
    rb_define_module_function(m, "spinning?", probe_spinning, 0);
    rb_define_module_function(m, "helper_start", probe_helper_start, 0);
    rb_define_module_function(m, "helper_stop", probe_helper_stop, 0);
    rb_define_module_function(m, "stop_spin", probe_stop_spin, 0);
}
