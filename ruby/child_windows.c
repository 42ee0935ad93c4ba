/*
 * child_windows.c — the windows of a process that is a part of a run
 * merging processes: a forked child's inherited run (Rperf.start(inherit:
 * :fork or true)), and every Ruby process under the rperf command
 * (RPERF_CHILD_WINDOWS=1). Every few seconds the process takes its window
 * so far (as snapshot(clear: true)) and writes it into the run's
 * directory as <base>.w<n>.pb.gz, so that the root's snapshots hold the
 * children that are still running (up to one interval late), and a
 * process killed with SIGKILL loses only its current window. The part
 * since the last window is written at the process's stop or exit as
 * <base>.pb.gz (ruby/lib/rperf.rb, __start_child_run; ruby/api.c at exit);
 * the root (or the rperf command) merges every part of a pid as one
 * process (ruby/lib/rperf/inherit.rb, children.rb, cli.rb).
 * A run with allocations beside time writes each part as two files of one
 * name: the time profile <name>.pb.gz and the heap profile
 * <name>.heap.pb.gz (inuse_space; Rperf::RunDir), a window each only when
 * it has samples; an allocation run's heap profile is its part's only
 * file (.pb.gz). The root reads a part's two files as one, and either
 * alone. Each window also writes its counters file <base>.w<n>.stat.json
 * (ruby/stat.c) before its profiles: the window's counts (samples,
 * triggers, dropped samples, ...) and the growth of the process counters
 * (GC, allocations, context switches) since the previous part's file, so
 * that the windows and the last part of a process add up to the whole of
 * it, a process killed after its windows included. The counts of a
 * window that writes nothing go into the next file written (the carry;
 * the last part's too: rperf_rb_child_windows_since). A child whose run's
 * directory is gone (the root stopped) writes no more windows.
 *
 * The aggregation worker's wake-ups (at least every 1.6 s) time it
 * (rperf_rb_child_windows_poll) and request a postponed job. The job takes
 * the window and converts it for the C pprof exporter holding the GVL
 * (releasing it there would check interrupts and could deliver another
 * thread's Thread#raise into the job), calling no Ruby method (a label
 * value that is neither a String nor a Symbol is converted with its to_s,
 * as for any export); the encoding, compression and write, most of the
 * cost, run on a writer thread of their own without the GVL (a window's
 * files one after the other on the same thread, the time profile first).
 * A window that is due while a start, stop or snapshot is in progress, or
 * while the previous window is still being written, is taken at the next
 * wake-up. A window with no sample (time or allocation) writes nothing.
 * The run's stop (and exit) waits for the writer, so the last window is on
 * disk before the final part. A failure to write is reported once on
 * stderr; that file's samples are lost, the run goes on.
 *
 * The root's side (ruby/lib/rperf/children.rb): it folds the files into
 * one aggregate per process and deletes them whenever it reads them (a
 * snapshot, a window's close, the stop). A root that nobody reads folds
 * with a thread of its own: while it has none, its worker's wake-ups count
 * the part files in the directory (fold_poll, at most once a window
 * interval), and once there are FOLD_AT a postponed job makes the thread
 * (Rperf.__fold_children), which looks from then on. The job only makes a
 * Thread (rb_thread_create: no method call on the thread it runs on).
 *
 * Contexts: poll runs on the worker thread (no Ruby API: atomics,
 * opendir/readdir and rb_postponed_job_trigger, which is thread-safe); the
 * jobs run at a safepoint of whatever thread flushes the VM's job bitset,
 * with its Ractor's GVL held, and do their work only in the main Ractor;
 * write_main on the writer thread (no Ruby API); the module functions and
 * off() with the GVL held.
 */
#include "rperf_ruby.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* the heap profile beside a window's time profile (RunDir::HEAP_SUFFIX) */
#define HEAP_SUFFIX ".heap.pb.gz"

static rb_postponed_job_handle_t job_handle = POSTPONED_JOB_HANDLE_INVALID;
static VALUE base = Qnil;             /* "<dir>/<pid>" (frozen), nil: off */
static _Atomic int on;
static _Atomic int pending;           /* a job was requested, not run yet */
static _Atomic int64_t interval_ns;
static _Atomic int64_t last_ns;       /* when the last window was taken */
static long seq;                      /* windows written (GVL) */
static _Atomic int warned;
/* the writer thread of the last window (joined before the next one and at
 * off()); made by process writer_pid: a fork child has no such thread */
static pthread_t writer;
static pid_t writer_pid;
static _Atomic int writing;
/* The counting of the part that writes windows (GVL): its counters file
 * "<base>.stat.json", the process counters its next file grows from (a
 * Hash, or the run's base: nil or a Hash), the counts of the windows
 * taken since the last file that wrote nothing, and the process. */
static VALUE since_path = Qnil, since_base = Qnil;
static long long carry[RPERF_RB_STAT_NCOUNTS];
static pid_t since_pid;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the root: a thread to fold its children's files when nobody reads
 * them (ruby/lib/rperf/children.rb) */
static rb_postponed_job_handle_t fold_handle = POSTPONED_JOB_HANDLE_INVALID;
static char fold_path[PATH_MAX];      /* written only while not watching */
static _Atomic int fold_watching;     /* the worker counts the files */
static _Atomic int fold_asked;        /* the job was requested */
static _Atomic int64_t fold_every_ns, fold_looked_ns;
static _Atomic long fold_at;
static _Atomic pid_t fold_pid;        /* a fork child watches nothing */

/* Part files in `path` (Rperf::RunDir::PART: a name starting with a digit
 * and ending in .pb.gz; a file being written is "<name>.tmp.<random>"),
 * counted up to `enough`. */
static long count_parts(const char *path, long enough)
{
    DIR *d = opendir(path);
    if (!d) return 0;
    long n = 0;
    struct dirent *e;
    while (n < enough && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 6 && e->d_name[0] >= '0' && e->d_name[0] <= '9' &&
            memcmp(e->d_name + len - 6, ".pb.gz", 6) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static void fold_poll(void)
{
    if (!atomic_load_explicit(&fold_watching, memory_order_acquire) || atomic_load(&fold_pid) != getpid())
        return;
    int64_t now = mono_ns();
    if (now - atomic_load(&fold_looked_ns) < atomic_load(&fold_every_ns)) return;
    atomic_store(&fold_looked_ns, now);
    long at = atomic_load(&fold_at);
    if (atomic_load(&fold_asked) || count_parts(fold_path, at) < at) return;
    if (!atomic_exchange(&fold_asked, 1)) rb_postponed_job_trigger(fold_handle);
}

static VALUE fold_thread_main(void *unused)
{
    (void)unused;
    return rb_funcall(rperf_rb_mRperf, rb_intern("__fold_children"), 0);
}

static VALUE make_fold_thread(VALUE unused)
{
    (void)unused;
    return rb_thread_create(fold_thread_main, NULL);
}

static void fold_job(void *unused)
{
    (void)unused;
    if (rperf_rb_ractor_peek() != 1) {    /* another Ractor's flush: the next poll asks again */
        atomic_store(&fold_asked, 0);
        return;
    }
    if (!atomic_load(&fold_watching) || atomic_load(&fold_pid) != getpid()) return;
    atomic_store(&fold_watching, 0);      /* the thread looks from now on */
    int state = 0;
    rb_protect(make_fold_thread, Qnil, &state);
    if (state) {
        rb_set_errinfo(Qnil);
        fprintf(stderr, "rperf: process %ld could not start the thread that folds its children's profiles; "
                        "they are folded when read\n", (long)getpid());
    }
}

/* _c_children_watch(dir, seconds, fold_at): the root's run made `dir` for
 * its forked children, which write windows every `seconds`; a thread
 * folds them once `fold_at` part files are there. */
static VALUE c_children_watch(VALUE self, VALUE dir, VALUE seconds, VALUE at)
{
    (void)self;
    FilePathValue(dir);
    double s = NUM2DBL(seconds);
    long n = NUM2LONG(at);
    if (!(s > 0) || n < 1) rb_raise(rb_eArgError, "the window interval and the file count must be positive");
    if (RSTRING_LEN(dir) >= (long)sizeof fold_path) return Qnil;   /* nobody folds before reading */
    atomic_store(&fold_watching, 0);
    memcpy(fold_path, RSTRING_PTR(dir), (size_t)RSTRING_LEN(dir));
    fold_path[RSTRING_LEN(dir)] = '\0';
    atomic_store(&fold_every_ns, (int64_t)(s * 1e9));
    atomic_store(&fold_looked_ns, mono_ns());
    atomic_store(&fold_at, n);
    atomic_store(&fold_asked, 0);
    atomic_store(&fold_pid, getpid());
    atomic_store_explicit(&fold_watching, 1, memory_order_release);
    return Qnil;
}

void rperf_rb_child_windows_poll(void)
{
    fold_poll();
    if (!atomic_load_explicit(&on, memory_order_acquire)) return;
    int64_t now = mono_ns();
    if (now - atomic_load_explicit(&last_ns, memory_order_relaxed) <
        atomic_load_explicit(&interval_ns, memory_order_relaxed))
        return;
    if (atomic_exchange(&pending, 1)) return;
    rb_postponed_job_trigger(job_handle);
}

static VALUE sym_aggregated_samples, sym_allocations, sym_samples, sym_mode, sym_alloc;
static VALUE heap_opts;               /* {sample_type: :inuse_space}, frozen */

static bool nonempty(VALUE h, VALUE key)
{
    VALUE a = RB_TYPE_P(h, T_HASH) ? rb_hash_lookup2(h, key, Qnil) : Qnil;
    return RB_TYPE_P(a, T_ARRAY) && RARRAY_LEN(a) > 0;
}

/* A window's files: the time profile, and a run with allocations beside
 * time writes its heap profile beside it; an allocation run's heap
 * profile is its only file. Written in this order by one writer thread. */
enum { MAX_FILES = 2 };
typedef struct {
    void *handle[MAX_FILES];
    int count;
    char *counters, *counters_path;   /* the counters file, written first */
    size_t counters_len;
} window_files_t;

typedef struct {
    VALUE data, opts;
    const char *suffix;
} prepare_args_t;

static VALUE prepare_file(VALUE arg)
{
    prepare_args_t *a = (prepare_args_t *)arg;
    VALUE path = rb_str_plus(base, rb_str_new_cstr(a->suffix));
    void *handle = rperf_rb_export_detached_prepare(rb_str_new_cstr("pprof"), a->data, path, a->opts);
    RB_GC_GUARD(path);
    return (VALUE)handle;
}

static void warn_once(const char *err)
{
    if (!atomic_exchange(&warned, 1))
        fprintf(stderr, "rperf: process %ld could not write its profile window%s%s\n", (long)getpid(),
                err ? ": " : "", err ? err : "");
}

/* Converts `data` for the file base + suffix (GVL held) into w; a failure
 * is reported once and that file is left out. */
static void prepare(window_files_t *w, VALUE data, const char *suffix, VALUE opts)
{
    prepare_args_t args = { data, opts, suffix };
    int state = 0;
    void *handle = (void *)rb_protect(prepare_file, (VALUE)&args, &state);
    if (state) {
        rb_set_errinfo(Qnil);
        warn_once(NULL);
    } else {
        w->handle[w->count++] = handle;
    }
}

static void *write_main(void *arg)
{
    window_files_t *w = arg;
    if (w->counters) {
        int err = rperf_rb_stat_write_file(w->counters_path, w->counters, w->counters_len);
        if (err) warn_once(strerror(err));
        free(w->counters);
        free(w->counters_path);
    }
    for (int i = 0; i < w->count; i++) {
        char err[256] = "";
        if (rperf_rb_export_detached_finish(w->handle[i], err, sizeof err)) warn_once(err[0] ? err : "error");
    }
    free(w);
    atomic_store(&writing, 0);
    return NULL;
}

/* GVL held: the last window's writer is done (joined), if this process
 * made it. With `wait` false, only if it has finished already. */
static bool writer_done(bool wait)
{
    if (writer_pid != getpid()) return true;
    if (!wait && atomic_load(&writing)) return false;
    pthread_join(writer, NULL);
    writer_pid = 0;
    return true;
}

/* The directory of "<dir>/<pid>" is still there (the run goes on). */
static bool dir_there(VALUE path)
{
    const char *p = RSTRING_PTR(path);
    const char *slash = NULL;
    for (long i = RSTRING_LEN(path); i > 0 && !slash; i--)
        if (p[i - 1] == '/') slash = p + i - 1;
    if (!slash || slash == p) return true;
    char dir[PATH_MAX];
    size_t n = (size_t)(slash - p);
    if (n >= sizeof dir) return true;
    memcpy(dir, p, n);
    dir[n] = '\0';
    struct stat st;
    return !(stat(dir, &st) != 0 && (errno == ENOENT || errno == ENOTDIR));
}

/* The window's counters file beside its profiles (GVL held): its counts
 * and the carry, the process counters' growth since the previous file;
 * that reading is the next file's base. */
static void prepare_counters(window_files_t *w, VALUE data, const char *name)
{
    size_t n = (size_t)RSTRING_LEN(base) + strlen(name) + 1;
    char *path = malloc(n);
    VALUE reading = Qnil;
    size_t len = 0;
    char *json = path ? rperf_rb_stat_part_json(data, since_base, carry, &reading, &len) : NULL;
    if (!json) {                          /* the window's profile tells its sampling count alone */
        free(path);
        warn_once("out of memory");
        return;
    }
    memcpy(path, RSTRING_PTR(base), (size_t)RSTRING_LEN(base));
    memcpy(path + RSTRING_LEN(base), name, strlen(name) + 1);
    w->counters = json;
    w->counters_len = len;
    w->counters_path = path;
    since_base = reading;
    memset(carry, 0, sizeof carry);
}

static void window_job(void *unused)
{
    (void)unused;
    /* The postponed-job bitset is one per VM: a thread of another Ractor
     * that flushes it for its own tick runs this job too. The window is the
     * main Ractor's business (its objects, the lifecycle state): leave it
     * for the next wake-up, which triggers the job again. */
    if (!atomic_load(&on) || NIL_P(base) || rperf_rb_ractor_peek() != 1 || !writer_done(false)) {
        atomic_store(&pending, 0);
        return;
    }
    if (!dir_there(base)) {               /* the run ended: the part says so at its end */
        atomic_store(&on, 0);
        atomic_store(&pending, 0);
        return;
    }
    VALUE data = rperf_rb_window_take();
    if (data == Qundef) {                 /* busy: the next wake-up asks again */
        atomic_store(&pending, 0);
        return;
    }
    atomic_store(&last_ns, mono_ns());
    atomic_store(&pending, 0);
    if (!RB_TYPE_P(data, T_HASH)) return;
    VALUE allocs = rb_hash_lookup2(data, sym_allocations, Qnil);
    bool time = nonempty(data, sym_aggregated_samples);
    bool heap = nonempty(allocs, sym_samples);
    bool beside = RB_TYPE_P(allocs, T_HASH) && rb_hash_lookup2(data, sym_mode, Qnil) != sym_alloc;
    if (!time && !heap) {                 /* no sample: nothing written */
        rperf_rb_stat_carry_add(carry, data);
        return;
    }
    window_files_t *w = calloc(1, sizeof *w);
    if (!w) {
        rperf_rb_stat_carry_add(carry, data);
        warn_once("out of memory");
        return;
    }
    char name[48];
    seq++;
    if (!beside) {                        /* a time run's, or an allocation run's */
        snprintf(name, sizeof name, ".w%ld.pb.gz", seq);
        prepare(w, data, name, Qnil);
    } else {
        if (time) {
            snprintf(name, sizeof name, ".w%ld.pb.gz", seq);
            prepare(w, data, name, Qnil);
        }
        if (heap) {
            snprintf(name, sizeof name, ".w%ld" HEAP_SUFFIX, seq);
            prepare(w, data, name, heap_opts);
        }
    }
    if (w->count == 0) {
        rperf_rb_stat_carry_add(carry, data);
        free(w);
    } else {
        snprintf(name, sizeof name, ".w%ld.stat.json", seq);
        prepare_counters(w, data, name);
        atomic_store(&writing, 1);
        if (pthread_create(&writer, NULL, write_main, w) == 0) {
            writer_pid = getpid();
        } else {
            write_main(w);               /* no thread: written here */
        }
    }
    RB_GC_GUARD(data);
}

/* _c_child_windows(base, seconds, stat_base): the run going is a part
 * of a run that merges processes (an inherited child's, or one under the
 * rperf command); write its windows as base + ".w<n>.pb.gz" (and
 * ".w<n>.heap.pb.gz", ".w<n>.stat.json") every `seconds`, its process
 * counters growing from `stat_base` (nil, or a Hash of _c_stat_counters)
 * up to the first window written. */
static VALUE c_child_windows(VALUE self, VALUE path, VALUE seconds, VALUE stat_base)
{
    (void)self;
    FilePathValue(path);
    double s = NUM2DBL(seconds);
    if (!(s > 0)) rb_raise(rb_eArgError, "the window interval must be positive");
    if (!NIL_P(stat_base)) Check_Type(stat_base, T_HASH);
    since_path = Qnil;
    if (!rperf_engine_running()) return Qnil;
    base = rb_str_new_frozen(path);
    VALUE counters = rb_str_dup(base);
    rb_str_cat_cstr(counters, ".stat.json");
    since_path = rb_str_new_frozen(counters);
    since_base = stat_base;
    since_pid = getpid();
    memset(carry, 0, sizeof carry);
    seq = 0;
    atomic_store(&warned, 0);
    atomic_store(&interval_ns, (int64_t)(s * 1e9));
    atomic_store(&last_ns, mono_ns());
    atomic_store(&pending, 0);
    atomic_store_explicit(&on, 1, memory_order_release);
    return Qnil;
}

bool rperf_rb_child_windows_since(VALUE counters_path, VALUE *out_base, long long *out_carry)
{
    if (NIL_P(since_path) || since_pid != getpid() || !RB_TYPE_P(counters_path, T_STRING) ||
        RSTRING_LEN(counters_path) != RSTRING_LEN(since_path) ||
        memcmp(RSTRING_PTR(counters_path), RSTRING_PTR(since_path), (size_t)RSTRING_LEN(since_path)) != 0)
        return false;
    *out_base = since_base;
    memcpy(out_carry, carry, sizeof carry);
    return true;
}

void rperf_rb_child_windows_off(void)
{
    atomic_store(&fold_watching, 0);
    atomic_store(&on, 0);
    atomic_store(&pending, 0);
    base = Qnil;
    writer_done(true);   /* the last window is on disk before the final part */
}

void rperf_rb_child_windows_init(VALUE m)
{
    rb_gc_register_address(&base);
    rb_gc_register_address(&since_path);
    rb_gc_register_address(&since_base);
    sym_aggregated_samples = ID2SYM(rb_intern("aggregated_samples"));
    sym_allocations = ID2SYM(rb_intern("allocations"));
    sym_samples = ID2SYM(rb_intern("samples"));
    sym_mode = ID2SYM(rb_intern("mode"));
    sym_alloc = ID2SYM(rb_intern("alloc"));
    heap_opts = rb_hash_new();
    rb_hash_aset(heap_opts, ID2SYM(rb_intern("sample_type")), ID2SYM(rb_intern("inuse_space")));
    rb_obj_freeze(heap_opts);
    rb_gc_register_mark_object(heap_opts);
    job_handle = rb_postponed_job_preregister(0, window_job, NULL);
    fold_handle = rb_postponed_job_preregister(0, fold_job, NULL);
    if (job_handle == POSTPONED_JOB_HANDLE_INVALID || fold_handle == POSTPONED_JOB_HANDLE_INVALID)
        rb_raise(rb_eLoadError, "rperf: no free postponed-job slot");
    rb_define_module_function(m, "_c_child_windows", c_child_windows, 3);
    rb_define_module_function(m, "_c_children_watch", c_children_watch, 3);
}
