/*
 * window_send.c — a scrape's window ended and sent without waiting for
 * the GVL (Rperf::Server, ruby/lib/rperf/serve.rb): at the window's end a
 * postponed job closes it on whichever main-Ractor thread holds the GVL
 * and prepares its pprof, and a thread of this file's own encodes,
 * compresses and writes the HTTP response to the client's socket. The
 * scrape's Ruby thread, which needs the GVL back after its wait (up to a
 * time slice of every busy thread), only cleans up afterwards.
 *
 * One send per scrape: a pthread sleeps until the window's end (a
 * condition variable on CLOCK_MONOTONIC, so a claim or a cancel wakes it),
 * then asks for the job every SEND_RETRY_NS until the job or the Ruby
 * thread has taken the send. The job takes only sends that are due; it
 * closes the window (not while a start, stop or snapshot is in progress:
 * it then leaves the send for the next try) and, when the window is one
 * part, converts it for the C pprof exporter holding the GVL (no Ruby
 * method, no GVL release: as child_windows.c) and hands it to the thread.
 * A window of several parts (a clearing snapshot or a stop inside it),
 * of a run with forked children (their parts are files the Ruby thread
 * reads), or one that cannot be converted, goes back to the Ruby thread
 * as its parts. The Ruby thread, when it wakes at the end, claims a send nobody
 * has taken (an application that is idle runs no job: then the Ruby
 * thread does it all, as without this file), and a client that leaves or
 * a listener that stops cancels one; a send being written is aborted by
 * shutting the socket down.
 *
 * States (state): WAITING -> DUE (the thread, at the end) -> WRITING
 * (job) -> SENT | FAILED (thread); DUE -> RUBY (job: parts for the Ruby
 * thread); WAITING | DUE -> CLAIMED | CANCELLED (the Ruby thread). The
 * thread writes one byte to the send's done descriptor when it ends,
 * whatever the state.
 *
 * Contexts: the module functions and the job run with the GVL held, the
 * job in the main Ractor only (the job bitset is one per VM: a run of it
 * in another Ractor leaves the send for the next try); send_main runs on
 * the send's own thread (no Ruby API: clock, condition variable,
 * rb_postponed_job_trigger, which is thread-safe, and the detached
 * exporter's finish).
 */
#include "rperf_ruby.h"

#include <ruby/vm.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SEND_RETRY_NS 2000000LL   /* a due send asks for the job again */

enum { S_WAITING, S_DUE, S_CLOSING, S_WRITING, S_SENT, S_FAILED, S_RUBY, S_CLAIMED, S_CANCELLED };

typedef struct send {
    struct send *next;            /* the sends in progress (GVL) */
    _Atomic int state;
    VALUE mark, opts, parts;
    int64_t deadline_ns;
    int64_t write_timeout_ns;
    int sock, done_fd;            /* duplicates, owned */
    char *head;                   /* status line and headers, CRLF each */
    size_t head_len;
    void *export;                 /* WRITING: the prepared pprof */
    char err[256];
    pthread_mutex_t lock;
    pthread_cond_t cond;          /* CLOCK_MONOTONIC */
    pthread_t thread;
    pid_t pid;                    /* the process that made the thread */
    bool threaded;                /* a thread was made (detached) */
    /* the Ruby object's and the thread's: the last one frees the send
     * (the thread may outlive a finish, which never waits for it) */
    _Atomic int refs;
    bool listed;                  /* on `sends` (GVL) */
} send_t;

static rb_postponed_job_handle_t job_handle = POSTPONED_JOB_HANDLE_INVALID;

/* Triggers from rperf's own threads end at VM teardown: the VM they touch
 * is freed then, and these threads may outlive it (a send is detached, a
 * listener may be left running by an exit that did not stop it). A Dekker
 * handshake: a thread counts itself in, then looks at `vm_gone`; the
 * teardown sets `vm_gone`, then waits for the count to drop. */
static _Atomic int vm_gone;
static _Atomic int triggering;

void rperf_rb_trigger_from_thread(rb_postponed_job_handle_t h)
{
    atomic_fetch_add(&triggering, 1);
    if (!atomic_load(&vm_gone)) rb_postponed_job_trigger(h);
    atomic_fetch_sub(&triggering, 1);
}

static void triggers_teardown(ruby_vm_t *vm)
{
    (void)vm;
    atomic_store(&vm_gone, 1);
    while (atomic_load(&triggering) > 0) {
        struct timespec pause = { 0, 100000 };
        nanosleep(&pause, NULL);
    }
}
static send_t *sends;             /* GVL */
static pid_t sends_pid;
static VALUE registry = Qnil;     /* the send objects in progress */
static VALUE sym_state[S_CANCELLED + 1];

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static struct timespec at_ns(int64_t ns)
{
    return (struct timespec){ .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };
}

static void close_fds(send_t *s)
{
    if (s->sock >= 0) close(s->sock);
    if (s->done_fd >= 0) close(s->done_fd);
    s->sock = s->done_fd = -1;
}

/* Any context, no Ruby API: one reference given back; the last frees. */
static void release(send_t *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1) return;
    if (s->export) {              /* prepared, never written */
        unsigned char *b = NULL;
        size_t n = 0;
        rperf_rb_export_detached_finish_memory(s->export, &b, &n, NULL, 0);
        free(b);
    }
    close_fds(s);
    free(s->head);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    free(s);
}

/* ---- the send's thread (no Ruby API) ----------------------------------- */

static bool write_all(send_t *s, const char *p, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t n = send(s->sock, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
        int64_t left = deadline - mono_ns();
        if (left <= 0) return false;
        struct pollfd pfd = { .fd = s->sock, .events = POLLOUT };
        int r = poll(&pfd, 1, (int)(left / 1000000 + 1));
        if (r < 0 && errno != EINTR) return false;
        if (r > 0 && (pfd.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
    }
    return true;
}

/* WRITING: encode and compress without the GVL, then the response. */
static void write_response(send_t *s)
{
    unsigned char *body = NULL;
    size_t len = 0;
    int rc = rperf_rb_export_detached_finish_memory(s->export, &body, &len, s->err, sizeof s->err);
    if (rc) {
        if (!s->err[0]) snprintf(s->err, sizeof s->err, "%s", strerror(-rc));
        s->export = NULL;
        atomic_store(&s->state, S_FAILED);
        return;
    }
    s->export = NULL;
    char tail[96];
    int t = snprintf(tail, sizeof tail, "content-length: %zu\r\nconnection: close\r\n\r\n", len);
    int64_t deadline = mono_ns() + s->write_timeout_ns;
    bool ok = write_all(s, s->head, s->head_len, deadline) && write_all(s, tail, (size_t)t, deadline) &&
              write_all(s, (const char *)body, len, deadline);
    free(body);
    if (ok) shutdown(s->sock, SHUT_WR);
    atomic_store(&s->state, ok ? S_SENT : S_FAILED);
}

static void *send_main(void *arg)
{
    send_t *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        int st = atomic_load(&s->state);
        if (st == S_WAITING) {
            if (mono_ns() >= s->deadline_ns) {
                int w = S_WAITING;
                atomic_compare_exchange_strong(&s->state, &w, S_DUE);
                continue;
            }
            struct timespec until = at_ns(s->deadline_ns);
            pthread_cond_timedwait(&s->cond, &s->lock, &until);
        } else if ((st == S_DUE || st == S_CLOSING) && !atomic_load(&vm_gone)) {
            rperf_rb_trigger_from_thread(job_handle);
            struct timespec until = at_ns(mono_ns() + SEND_RETRY_NS);
            pthread_cond_timedwait(&s->cond, &s->lock, &until);
        } else {
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (atomic_load(&s->state) == S_WRITING) write_response(s);
    char one = 1;   /* the Ruby side may have closed its end: EPIPE, no signal here */
    while (write(s->done_fd, &one, 1) < 0 && errno == EINTR) {
    }
    release(s);
    return NULL;
}

/* Its thread, if this process has it (a fork child does not: the lock may
 * have been held by a thread that is gone). */
static void wake(send_t *s)
{
    if (!s->threaded || s->pid != getpid()) return;
    pthread_mutex_lock(&s->lock);
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

/* ---- the job (GVL, main Ractor) ----------------------------------------- */

static void forget_if_forked(void)
{
    if (sends_pid != getpid()) {
        sends = NULL;             /* the parent's: no thread here */
        sends_pid = getpid();
        if (!NIL_P(registry)) rb_ary_clear(registry);
    }
}

static VALUE sym_aggregated_samples;

typedef struct {
    VALUE data, opts;
} prepare_t;

static VALUE prepare(VALUE arg)
{
    prepare_t *p = (prepare_t *)arg;
    return (VALUE)rperf_rb_export_detached_prepare_memory(rb_str_new_cstr("pprof"), p->data, p->opts);
}

/* A due send: its window closed, and either handed to its thread
 * (WRITING) or its parts to the Ruby thread (RUBY). */
static void take(send_t *s)
{
    VALUE parts = rperf_rb_window_close_try(s->mark);
    if (parts == Qundef) {        /* a lifecycle call in progress: next try */
        atomic_store(&s->state, S_DUE);
        return;
    }
    /* children's parts are files the Ruby thread reads and merges */
    VALUE part = RARRAY_LEN(parts) == 1 && !rperf_rb_run_has_children() ? RARRAY_AREF(parts, 0) : Qnil;
    if (RB_TYPE_P(part, T_HASH) && RB_TYPE_P(rb_hash_lookup2(part, sym_aggregated_samples, Qnil), T_ARRAY)) {
        prepare_t p = { part, s->opts };
        int state = 0;
        void *handle = (void *)rb_protect(prepare, (VALUE)&p, &state);
        if (!state) {
            s->export = handle;
            atomic_store(&s->state, S_WRITING);
            return;
        }
        rb_set_errinfo(Qnil);
    }
    s->parts = parts;
    atomic_store(&s->state, S_RUBY);
}

static void send_job(void *unused)
{
    (void)unused;
    if (rperf_rb_ractor_peek() != 1) return;   /* the threads ask again */
    forget_if_forked();
    for (send_t *s = sends; s; s = s->next) {
        int due = S_DUE;
        if (!atomic_compare_exchange_strong(&s->state, &due, S_CLOSING)) continue;
        take(s);
        wake(s);
    }
}

/* ---- the send object (GVL) ----------------------------------------------- */

static void send_mark(void *p)
{
    send_t *s = p;
    rb_gc_mark_movable(s->mark);
    rb_gc_mark_movable(s->opts);
    rb_gc_mark_movable(s->parts);
}

static void send_compact(void *p)
{
    send_t *s = p;
    s->mark = rb_gc_location(s->mark);
    s->opts = rb_gc_location(s->opts);
    s->parts = rb_gc_location(s->parts);
}

static void unlink_send(send_t *s)
{
    if (!s->listed) return;
    s->listed = false;
    if (sends_pid != getpid()) return;   /* the list is the parent's */
    for (send_t **p = &sends; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    s->next = NULL;
}

/* The object's reference. In a fork child the thread's is never given
 * back (it does not exist there; its lock may be held): that copy stays. */
static void send_free(void *p)
{
    send_t *s = p;
    unlink_send(s);
    s->mark = s->opts = s->parts = Qnil;
    if (s->threaded && s->pid != getpid()) return;
    release(s);
}

static const rb_data_type_t send_type = {
    .wrap_struct_name = "rperf_window_send",
    .function = { .dmark = send_mark, .dfree = send_free, .dsize = NULL, .dcompact = send_compact },
    .flags = RUBY_TYPED_FREE_IMMEDIATELY,
};

static send_t *get(VALUE obj) { return rb_check_typeddata(obj, &send_type); }

static int dup_fd(VALUE fd)
{
    return fcntl(NUM2INT(fd), F_DUPFD_CLOEXEC, 0);
}

/* A thread with every signal blocked: process signals go to Ruby's
 * threads, and a signal a write would raise stays with this one. */
int rperf_rb_quiet_thread(pthread_t *t, void *(*fn)(void *), void *arg, bool detached)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (detached) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Rperf._c_send_window(mark, seconds, sock_fd, done_fd, head, opts,
 * write_timeout) -> a send ending the window `seconds` from now, or nil
 * (no thread could be made: the caller waits and answers as without it). head: the response's status line and
 * headers (CRLF each) but content-length and connection; opts: the pprof
 * exporter's (nil or {sample_type:}). */
static VALUE c_send_window(VALUE self, VALUE mark, VALUE seconds, VALUE sock, VALUE done, VALUE head,
                           VALUE opts, VALUE write_timeout)
{
    (void)self;
    StringValue(head);
    if (!rperf_rb_window_mark_p(mark)) rb_raise(rb_eTypeError, "not a window mark");
    double secs = NUM2DBL(seconds), wt = NUM2DBL(write_timeout);
    if (!(secs >= 0) || !(wt > 0)) rb_raise(rb_eArgError, "seconds and write_timeout must be positive");
    forget_if_forked();
    send_t *s = calloc(1, sizeof *s);
    if (!s) rb_memerror();
    s->mark = mark;
    s->opts = opts;
    s->parts = Qnil;
    s->sock = s->done_fd = -1;
    atomic_store(&s->refs, 1);
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    VALUE obj = TypedData_Wrap_Struct(rb_cObject, &send_type, s);
    s->head = malloc((size_t)RSTRING_LEN(head) + 1);
    if (!s->head) rb_memerror();
    memcpy(s->head, RSTRING_PTR(head), (size_t)RSTRING_LEN(head));
    s->head_len = (size_t)RSTRING_LEN(head);
    s->sock = dup_fd(sock);
    s->done_fd = dup_fd(done);
    if (s->sock < 0 || s->done_fd < 0) return Qnil;
    s->write_timeout_ns = (int64_t)(wt * 1e9);
    s->deadline_ns = mono_ns() + (int64_t)(secs * 1e9);
    atomic_store(&s->state, S_WAITING);
    atomic_store(&s->refs, 2);    /* the thread's */
    if (rperf_rb_quiet_thread(&s->thread, send_main, s, true) != 0) {
        atomic_store(&s->refs, 1);
        return Qnil;
    }
    s->threaded = true;
    s->pid = getpid();
    s->next = sends;
    sends = s;
    s->listed = true;
    rb_ary_push(registry, obj);
    return obj;
}

/* Rperf._c_send_take(send, cancel) -> true when the Ruby thread has the
 * window now (claimed at its end, or cancelled: the send's thread quits
 * and sends nothing), false when the job took it first. */
static VALUE c_send_take(VALUE self, VALUE obj, VALUE cancel)
{
    (void)self;
    send_t *s = get(obj);
    int to = RTEST(cancel) ? S_CANCELLED : S_CLAIMED;
    for (int from = S_WAITING; from <= S_DUE; from++) {
        int expect = from;
        if (atomic_compare_exchange_strong(&s->state, &expect, to)) {
            wake(s);
            return Qtrue;
        }
    }
    return Qfalse;
}

/* Rperf._c_send_abort(send): a response being written stops (the socket
 * is shut down; the client sees it cut). */
static VALUE c_send_abort(VALUE self, VALUE obj)
{
    (void)self;
    send_t *s = get(obj);
    if (s->sock >= 0 && atomic_load(&s->state) == S_WRITING) shutdown(s->sock, SHUT_RDWR);
    return Qnil;
}

/* Rperf._c_send_state(send) -> :waiting, :due, :writing, :sent, :failed,
 * :ruby, :claimed or :cancelled. */
static VALUE c_send_state(VALUE self, VALUE obj)
{
    (void)self;
    int st = atomic_load(&get(obj)->state);
    return sym_state[st == S_CLOSING ? S_DUE : st];
}

/* Rperf._c_send_parts(send) -> the window's parts (state :ruby), or nil. */
static VALUE c_send_parts(VALUE self, VALUE obj)
{
    (void)self;
    return get(obj)->parts;
}

/* Rperf._c_send_finish(send) -> its state: a send neither taken nor
 * written is cancelled (its thread quits), an answer still being written
 * is cut, and it is off the list. Never waits for its thread (that would
 * give up the GVL, and getting it back costs a time slice of every busy
 * thread): the thread frees what it uses when it ends. Idempotent. */
static VALUE c_send_finish(VALUE self, VALUE obj)
{
    (void)self;
    send_t *s = get(obj);
    c_send_take(Qnil, obj, Qtrue);
    c_send_abort(Qnil, obj);
    unlink_send(s);
    rb_ary_delete(registry, obj);
    return c_send_state(Qnil, obj);
}

/* Rperf._c_send_error(send) -> the encoder's message when it failed. */
static VALUE c_send_error(VALUE self, VALUE obj)
{
    (void)self;
    send_t *s = get(obj);
    return s->err[0] ? rb_str_new_cstr(s->err) : Qnil;
}

void rperf_rb_window_send_init(VALUE m)
{
    registry = rb_ary_new();
    rb_gc_register_mark_object(registry);
    sends_pid = getpid();
    sym_aggregated_samples = ID2SYM(rb_intern("aggregated_samples"));
    static const char *const names[] = { "waiting", "due", "due", "writing", "sent",
                                         "failed", "ruby", "claimed", "cancelled" };
    for (int i = 0; i <= S_CANCELLED; i++) sym_state[i] = ID2SYM(rb_intern(names[i]));
    ruby_vm_at_exit(triggers_teardown);
    job_handle = rb_postponed_job_preregister(0, send_job, NULL);
    if (job_handle == POSTPONED_JOB_HANDLE_INVALID) rb_raise(rb_eLoadError, "rperf: no free postponed-job slot");
    rb_define_module_function(m, "_c_send_window", c_send_window, 7);
    rb_define_module_function(m, "_c_send_take", c_send_take, 2);
    rb_define_module_function(m, "_c_send_abort", c_send_abort, 1);
    rb_define_module_function(m, "_c_send_state", c_send_state, 1);
    rb_define_module_function(m, "_c_send_parts", c_send_parts, 1);
    rb_define_module_function(m, "_c_send_finish", c_send_finish, 1);
    rb_define_module_function(m, "_c_send_error", c_send_error, 1);
}
