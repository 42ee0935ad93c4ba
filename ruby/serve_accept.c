/*
 * serve_accept.c — Rperf::Server's accepting thread, in C: it accepts
 * connections without the GVL, and opens the window of a profile request
 * the moment the request arrives, so a scrape's N seconds start then and
 * not when the listener's Ruby thread gets the GVL back (up to a time
 * slice of every busy thread; ruby/lib/rperf/serve.rb).
 *
 * One thread per listener waits (poll) on the listening socket and a stop
 * pipe, accepts (non-blocking, close-on-exec), and looks at the request
 * without taking it off the socket (MSG_PEEK, for at most PEEK_WAIT_NS):
 * a `GET /debug/pprof/profile?...` whose head has arrived, with the
 * listener's bearer token when it has one, is marked for a window, and a
 * postponed job opens that window's mark (a try of the lifecycle lock:
 * the job runs on whichever main-Ractor thread holds the GVL). Every
 * accepted connection is queued and the Ruby accepting thread woken
 * through a pipe; it takes the queue (connections with their marks, nil
 * where none was opened) and serves each as before, the request's
 * profile adopting the mark. A mark nobody adopts is closed by the Ruby
 * side. Anything the thread cannot decide (a head still on its way, a
 * request line it does not know) just has no mark: Ruby opens the window
 * itself, as for every other route.
 *
 * Contexts: accept_main runs on the listener's own thread (no Ruby API:
 * poll, accept4, recv, the queue's mutex, rperf_rb_trigger_from_thread);
 * the job with the GVL in the main Ractor; the module functions with the
 * GVL held.
 */
#include "rperf_ruby.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PEEK_WAIT_NS 20000000LL   /* how long a request's head is waited for */
#define HEAD_MAX 8192             /* Rperf::Server::MAX_HEAD_BYTES */
#define ACCEPT_RETRY_MS 100       /* after EMFILE and the like */

typedef struct conn {
    struct conn *next;
    int fd;
    bool want_mark;               /* the job opens a mark for it */
    VALUE mark;                   /* Qnil until then (GVL) */
} conn_t;

typedef struct acceptor {
    struct acceptor *next;        /* the acceptors whose queue a job looks at */
    int listen_fd, notify_fd;     /* duplicates, owned */
    int stop_pipe[2];
    bool windows;                 /* profile requests get a mark */
    char *token;                  /* NULL: none */
    size_t token_len;
    pthread_mutex_t lock;         /* the queue */
    conn_t *head, **tail;
    _Atomic int wanted;           /* conns waiting for a mark */
    pthread_t thread;
    pid_t pid;
    bool running;
    char peek[HEAD_MAX];          /* the listener's thread's: a request's head */
} acceptor_t;

static rb_postponed_job_handle_t job_handle = POSTPONED_JOB_HANDLE_INVALID;
static acceptor_t *acceptors;     /* GVL */
static pid_t acceptors_pid;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The queue's lock, in the process whose thread uses it: a fork child has
 * no such thread, and its copy of the lock may be held by one that is
 * gone. */
static void qlock(acceptor_t *a)
{
    if (a->pid == getpid()) pthread_mutex_lock(&a->lock);
}

static void qunlock(acceptor_t *a)
{
    if (a->pid == getpid()) pthread_mutex_unlock(&a->lock);
}

/* ---- the request's head, peeked (the listener's thread) ------------------ */

/* The value of header `name` in head [p, end) (case-insensitive name), or
 * NULL; *len its length without surrounding blanks. */
static const char *header(const char *p, const char *end, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    const char *line = memchr(p, '\n', (size_t)(end - p));
    while (line && line + 1 < end) {
        line++;
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol) return NULL;
        const char *stop = eol > line && eol[-1] == '\r' ? eol - 1 : eol;
        if ((size_t)(stop - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            while (v < stop && (*v == ' ' || *v == '\t')) v++;
            const char *ve = stop;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
            *len = (size_t)(ve - v);
            return v;
        }
        line = eol;
    }
    return NULL;
}

/* Constant time in the token's length: the answer says nothing of where a
 * guess went wrong. */
static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char diff = alen != blen;
    for (size_t i = 0; i < blen; i++) diff |= (unsigned char)(i < alen ? a[i] : 0) ^ (unsigned char)b[i];
    return diff == 0;
}

/* Whether the request waiting on `fd` is a profile window the listener
 * would serve (its head complete within PEEK_WAIT_NS). */
static bool wants_window(acceptor_t *a, int fd)
{
    static const char line[] = "GET /debug/pprof/profile";   /* then '?' or ' ' */
    char *buf = a->peek;
    const size_t cap = sizeof a->peek;
    int64_t until = mono_ns() + PEEK_WAIT_NS;
    for (;;) {
        ssize_t n = recv(fd, buf, cap, MSG_PEEK);
        if (n == 0) return false;
        if (n > 0) {
            size_t k = sizeof line - 1;
            if ((size_t)n >= k && memcmp(buf, line, k) != 0) return false;
            if ((size_t)n > k && buf[k] != '?' && buf[k] != ' ') return false;
            const char *end = NULL;
            for (ssize_t i = 3; i < n; i++)
                if (buf[i] == '\n' && (buf[i - 1] == '\n' || (buf[i - 1] == '\r' && buf[i - 2] == '\n'))) {
                    end = buf + i + 1;
                    break;
                }
            if (end) {
                if ((size_t)(end - buf) <= sizeof line - 1) return false;
                if (!a->token) return true;
                size_t vlen = 0;
                const char *v = header(buf, end, "authorization", &vlen);
                if (!v || vlen < 7 || strncasecmp(v, "bearer ", 7) != 0) return false;
                v += 7;
                vlen -= 7;
                while (vlen && *v == ' ') v++, vlen--;
                return same(v, vlen, a->token, a->token_len);
            }
            if ((size_t)n == cap) return false;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            return false;
        }
        int64_t left = until - mono_ns();
        if (left <= 0) return false;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        /* a partial head: wait for more (poll says readable at once) */
        if (n > 0) {
            struct timespec pause = { 0, 1000000 };
            nanosleep(&pause, NULL);
        } else if (poll(&p, 1, (int)(left / 1000000) + 1) < 0 && errno != EINTR) {
            return false;
        }
    }
}

/* ---- the listener's thread --------------------------------------------------- */

static void enqueue(acceptor_t *a, int fd, bool want)
{
    conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->fd = fd;
    c->want_mark = want;
    c->mark = Qnil;
    pthread_mutex_lock(&a->lock);
    *a->tail = c;
    a->tail = &c->next;
    if (want) atomic_fetch_add(&a->wanted, 1);
    pthread_mutex_unlock(&a->lock);
    if (want) rperf_rb_trigger_from_thread(job_handle);
    char one = 1;
    while (write(a->notify_fd, &one, 1) < 0 && errno == EINTR) {
    }
}

static void *accept_main(void *arg)
{
    acceptor_t *a = arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = a->listen_fd, .events = POLLIN }, { .fd = a->stop_pipe[0], .events = POLLIN } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        if (!(p[0].revents & POLLIN)) {
            if (p[0].revents & (POLLERR | POLLNVAL)) break;
            continue;
        }
        int fd = accept4(a->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
            /* out of descriptors and the like: a moment, or the stop */
            struct pollfd s = { .fd = a->stop_pipe[0], .events = POLLIN };
            if (poll(&s, 1, ACCEPT_RETRY_MS) > 0) break;
            continue;
        }
        enqueue(a, fd, a->windows && wants_window(a, fd));
    }
    return NULL;
}

/* ---- the job (GVL, main Ractor) ---------------------------------------------- */

static void forget_if_forked(void)
{
    if (acceptors_pid != getpid()) {
        acceptors = NULL;         /* the parent's: no thread here */
        acceptors_pid = getpid();
    }
}

/* One connection that wants a mark, no longer wanting it, or NULL. */
static conn_t *next_wanted(acceptor_t *a)
{
    conn_t *found = NULL;
    qlock(a);
    for (conn_t *c = a->head; c && !found; c = c->next)
        if (c->want_mark) {
            c->want_mark = false;
            atomic_fetch_sub(&a->wanted, 1);
            found = c;
        }
    qunlock(a);
    return found;
}

/* The mark is made without the queue's lock (it allocates: a GC then
 * marks the queue under that lock); the connection stays queued
 * meanwhile: only the Ruby side takes connections, with the GVL, which
 * this job holds. */
static void mark_job(void *unused)
{
    (void)unused;
    if (rperf_rb_ractor_peek() != 1) return;   /* taken at the Ruby side instead */
    forget_if_forked();
    for (acceptor_t *a = acceptors; a; a = a->next) {
        conn_t *c;
        while (atomic_load(&a->wanted) > 0 && (c = next_wanted(a))) {
            /* a busy lifecycle lock or no run: no mark; Ruby opens one */
            VALUE mark = rperf_rb_window_mark_try();
            qlock(a);
            c->mark = mark;
            qunlock(a);
            RB_GC_GUARD(mark);
        }
    }
}

/* ---- the acceptor object (GVL) ------------------------------------------------- */

static void acceptor_mark(void *p)
{
    acceptor_t *a = p;
    qlock(a);
    for (conn_t *c = a->head; c; c = c->next) rb_gc_mark(c->mark);   /* pinned: the list holds them */
    qunlock(a);
}

static void close_pipe(int p[2])
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0) close(p[i]);
    p[0] = p[1] = -1;
}

/* The queue's connections closed; their marks discarded when `discard`
 * (GVL held; never during GC, where the marks are left to the collector). */
static void drop_queue(acceptor_t *a, bool discard)
{
    qlock(a);
    conn_t *c = a->head;
    a->head = NULL;
    a->tail = &a->head;
    atomic_store(&a->wanted, 0);
    qunlock(a);
    while (c) {
        conn_t *n = c->next;
        close(c->fd);
        if (discard && !NIL_P(c->mark)) rperf_rb_window_discard(c->mark);
        free(c);
        c = n;
    }
}

static void *join_acceptor(void *arg)
{
    pthread_join(((acceptor_t *)arg)->thread, NULL);
    return NULL;
}

static void stop_thread(acceptor_t *a)
{
    if (!a->running) return;
    a->running = false;
    if (a->pid != getpid()) return;
    char one = 1;
    while (write(a->stop_pipe[1], &one, 1) < 0 && errno == EINTR) {
    }
    join_acceptor(a);
}

static void acceptor_free(void *p)
{
    acceptor_t *a = p;
    bool own = a->pid == getpid();
    stop_thread(a);
    drop_queue(a, false);
    close_pipe(a->stop_pipe);
    if (a->listen_fd >= 0) close(a->listen_fd);
    if (a->notify_fd >= 0) close(a->notify_fd);
    free(a->token);
    if (own) pthread_mutex_destroy(&a->lock);
    xfree(a);
}

static const rb_data_type_t acceptor_type = {
    .wrap_struct_name = "rperf_acceptor",
    .function = { .dmark = acceptor_mark, .dfree = acceptor_free, .dsize = NULL },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static void unlink_acceptor(acceptor_t *a)
{
    forget_if_forked();
    for (acceptor_t **p = &acceptors; *p; p = &(*p)->next)
        if (*p == a) {
            *p = a->next;
            break;
        }
    a->next = NULL;
}

/* Rperf._c_acceptor(listen_fd, notify_fd, windows, token) -> an acceptor
 * (its thread accepting from now on), or nil (no thread: the caller
 * accepts in Ruby). windows: profile requests get a mark (the app is
 * Rperf::PprofApp); token: the bearer token such a request must present,
 * or nil. */
static VALUE c_acceptor(VALUE self, VALUE listen_fd, VALUE notify_fd, VALUE windows, VALUE token)
{
    (void)self;
    if (!NIL_P(token)) StringValue(token);
    forget_if_forked();
    acceptor_t *a;
    VALUE obj = TypedData_Make_Struct(rb_cObject, acceptor_t, &acceptor_type, a);
    a->listen_fd = a->notify_fd = -1;
    a->stop_pipe[0] = a->stop_pipe[1] = -1;
    a->tail = &a->head;
    pthread_mutex_init(&a->lock, NULL);
    a->pid = getpid();
    a->windows = RTEST(windows);
    if (!NIL_P(token)) {
        a->token_len = (size_t)RSTRING_LEN(token);
        a->token = malloc(a->token_len + 1);
        if (!a->token) rb_memerror();
        memcpy(a->token, RSTRING_PTR(token), a->token_len);
    }
    a->listen_fd = fcntl(NUM2INT(listen_fd), F_DUPFD_CLOEXEC, 0);
    a->notify_fd = fcntl(NUM2INT(notify_fd), F_DUPFD_CLOEXEC, 0);
    if (a->listen_fd < 0 || a->notify_fd < 0 || pipe2(a->stop_pipe, O_CLOEXEC) != 0) return Qnil;
    fcntl(a->stop_pipe[1], F_SETFL, O_NONBLOCK);
    if (rperf_rb_quiet_thread(&a->thread, accept_main, a, false) != 0) return Qnil;
    a->running = true;
    a->next = acceptors;
    acceptors = a;
    return obj;
}

/* Rperf._c_acceptor_take(acceptor) -> [[fd, mark or nil], ...]: the
 * connections accepted since the last take, in order; each fd is the
 * caller's now. A connection still waiting for its mark gets none. */
static VALUE c_acceptor_take(VALUE self, VALUE obj)
{
    (void)self;
    acceptor_t *a = rb_check_typeddata(obj, &acceptor_type);
    VALUE out = rb_ary_new();
    for (;;) {
        qlock(a);
        conn_t *c = a->head;
        if (c) {
            a->head = c->next;
            if (!a->head) a->tail = &a->head;
            if (c->want_mark) atomic_fetch_sub(&a->wanted, 1);
        }
        qunlock(a);
        if (!c) break;
        VALUE mark = c->mark;     /* on this stack until it is in `out` */
        int fd = c->fd;
        free(c);
        rb_ary_push(out, rb_assoc_new(INT2NUM(fd), mark));
        RB_GC_GUARD(mark);
    }
    return out;
}

/* Rperf._c_acceptor_stop(acceptor): its thread stopped and joined, the
 * connections it queued closed. Idempotent. */
static VALUE c_acceptor_stop(VALUE self, VALUE obj)
{
    (void)self;
    acceptor_t *a = rb_check_typeddata(obj, &acceptor_type);
    unlink_acceptor(a);
    if (a->running && a->pid == getpid()) {
        char one = 1;
        while (write(a->stop_pipe[1], &one, 1) < 0 && errno == EINTR) {
        }
        rb_thread_call_without_gvl(join_acceptor, a, NULL, NULL);
    }
    a->running = false;
    drop_queue(a, true);
    /* its copies of the sockets: the port is free once Ruby closes its own
     * (a fork child keeps none) */
    close_pipe(a->stop_pipe);
    if (a->listen_fd >= 0) close(a->listen_fd);
    if (a->notify_fd >= 0) close(a->notify_fd);
    a->listen_fd = a->notify_fd = -1;
    return Qnil;
}

void rperf_rb_serve_accept_init(VALUE m)
{
    acceptors_pid = getpid();
    job_handle = rb_postponed_job_preregister(0, mark_job, NULL);
    if (job_handle == POSTPONED_JOB_HANDLE_INVALID) rb_raise(rb_eLoadError, "rperf: no free postponed-job slot");
    rb_define_module_function(m, "_c_acceptor", c_acceptor, 4);
    rb_define_module_function(m, "_c_acceptor_take", c_acceptor_take, 1);
    rb_define_module_function(m, "_c_acceptor_stop", c_acceptor_stop, 1);
}
