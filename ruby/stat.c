/*
 * stat.c — this process's counters for the stats block (`rperf stat`,
 * Rperf.start(stat: true)) and the counters file of a part of a run whose
 * processes are merged (<dir>/<part>.stat.json: the rperf command's run, a
 * run's forked children; docs/cli.md). Done in C, calling no Ruby method:
 * the file is written at exit and exec, after the program's code, which
 * may have redefined any core method (GC.stat, Hash#[], Integer#-,
 * File.write, JSON).
 *
 *   Rperf._c_stat_counters(kind = nil) -> Hash (String keys)
 *     nil: every counter; :fork: those a fork child inherits from its
 *     parent (GC and allocation counts: the child reports what it adds);
 *     :exec: those a process keeps across exec (context switches).
 *   Rperf._c_write_part_counters(path, data, base) -> true, or false after
 *     reporting the failure on stderr.
 *   rperf_rb_stat_part_json (child_windows.c): a window's counters file,
 *     built in a postponed job and written by the window's writer thread
 *     (rperf_rb_stat_write_file, no Ruby API).
 *
 * The counters: gc_time_ms, gc_count, minor_gc_count, major_gc_count,
 * allocated, freed (GC.stat's, read with rb_gc_stat), maxrss_kb (VmHWM),
 * voluntary and involuntary context switches of every thread of the
 * process, exited ones included (getrusage(RUSAGE_SELF); the profiler's own
 * timer and worker threads count too). The file adds the result's: threads
 * (detected_thread_count), samples, triggers, sampling_time_ns, dropped,
 * overruns, label_sets_overflowed, alloc_sampled, alloc_dropped, alloc_live
 * (with allocations), and thread_table: [[thread_seq, ractor_id, name or
 * null], ...] (thread names do not travel in pprof). Counters in `base`
 * (a Hash from _c_stat_counters) are written as the growth since it.
 *
 * Every part's file holds its own span, so that a process's parts add up:
 * a window's file (<base>.w<n>.stat.json) the counts of the window and
 * the process counters' growth since the previous part's file; the last
 * part's file what came after its last window (child_windows.c keeps the
 * base and the counts of windows that wrote nothing,
 * rperf_rb_child_windows_since). threads and alloc_live are levels (the
 * threads seen so far, the objects in use), maxrss_kb a peak: a part's
 * newest value, never a sum. ruby/merge.c reads the file back with the
 * part, Rperf::Children folds it.
 *
 * Context: GVL held (Ruby methods of Rperf, and child_windows.c's
 * postponed job), main Ractor; rperf_rb_stat_write_file on any thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "rperf_ruby.h"
#include "exporter_internal.h"

static VALUE sym_fork, sym_exec;

/* One counter of the stats block: its key, and which kinds hold it. */
enum { K_ALL = 0, K_FORK = 1, K_EXEC = 2 };
typedef struct {
    const char *key;
    int kind;
} counter_t;

static const counter_t COUNTERS[] = {
    {"gc_time_ms", K_FORK},  {"gc_count", K_FORK}, {"minor_gc_count", K_FORK},
    {"major_gc_count", K_FORK}, {"allocated", K_FORK}, {"freed", K_FORK},
    {"maxrss_kb", K_ALL},    {"voluntary", K_EXEC}, {"involuntary", K_EXEC},
};
#define NCOUNTERS (sizeof COUNTERS / sizeof COUNTERS[0])

/* VmHWM of /proc/self/status in KiB, or -1. */
static long long peak_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kb = strtoll(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

static long long gc_stat(const char *key)
{
    return (long long)rb_gc_stat(ID2SYM(rb_intern(key)));
}

/* values[i]: COUNTERS[i]'s value now, -1 when it cannot be read. */
static void read_counters(long long values[NCOUNTERS])
{
    values[0] = gc_stat("time");
    values[1] = gc_stat("count");
    values[2] = gc_stat("minor_gc_count");
    values[3] = gc_stat("major_gc_count");
    values[4] = gc_stat("total_allocated_objects");
    values[5] = gc_stat("total_freed_objects");
    values[6] = peak_rss_kb();
    struct rusage ru;
    bool ok = getrusage(RUSAGE_SELF, &ru) == 0;
    values[7] = ok ? (long long)ru.ru_nvcsw : -1;
    values[8] = ok ? (long long)ru.ru_nivcsw : -1;
}

static VALUE c_stat_counters(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    rb_check_arity(argc, 0, 1);
    VALUE kind = argc ? argv[0] : Qnil;
    int want = kind == sym_fork ? K_FORK : kind == sym_exec ? K_EXEC : K_ALL;
    long long v[NCOUNTERS];
    read_counters(v);
    VALUE h = rb_hash_new();
    for (size_t i = 0; i < NCOUNTERS; i++) {
        if (want != K_ALL && COUNTERS[i].kind != want) continue;
        rb_hash_aset(h, rb_str_new_cstr(COUNTERS[i].key), v[i] < 0 ? Qnil : LL2NUM(v[i]));
    }
    return h;
}

/* data[key] as an integer (present: it is one). */
static long long int_at(VALUE h, const char *key, bool *present)
{
    VALUE v = RB_TYPE_P(h, T_HASH) ? rb_hash_lookup2(h, ID2SYM(rb_intern(key)), Qnil) : Qnil;
    *present = RB_INTEGER_TYPE_P(v);
    return *present ? NUM2LL(v) : 0;
}

static int put_kv(rperf__buf_t *b, bool *first, const char *key, long long v, bool known)
{
    char line[96];
    snprintf(line, sizeof line, "%s\"%s\":", *first ? "" : ",", key);
    *first = false;
    int rc = rperf__buf_put_cstr(b, line);
    if (rc) return rc;
    if (!known) return rperf__buf_put_cstr(b, "null");
    snprintf(line, sizeof line, "%lld", v);
    return rperf__buf_put_cstr(b, line);
}

/* The result's counts in the counters file: its key, the result's key
 * (under :allocations for alloc), and whether it adds up over a part's
 * spans (the others are levels). Indexed as carry[]. */
static const struct {
    const char *file, *result;
    bool alloc, sums;
} RESULT_KEYS[] = {
    {"threads", "detected_thread_count", false, false},
    {"samples", "sampling_count", false, true},
    {"triggers", "trigger_count", false, true},
    {"sampling_time_ns", "sampling_time_ns", false, true},
    {"dropped", "dropped_samples", false, true},
    {"overruns", "timer_overruns", false, true},
    {"label_sets_overflowed", "label_sets_overflowed", false, true},
    {"alloc_sampled", "sampled", true, true},
    {"alloc_dropped", "dropped", true, true},
    {"alloc_live", "live", true, false},
};
_Static_assert(sizeof RESULT_KEYS / sizeof RESULT_KEYS[0] == RPERF_RB_STAT_NCOUNTS,
               "carry[] has one slot per result count");

/* RESULT_KEYS[i]'s value in `data` (present: it has one). */
static long long result_count(VALUE data, size_t i, bool *present)
{
    VALUE h = data;
    if (RESULT_KEYS[i].alloc)
        h = RB_TYPE_P(data, T_HASH) ? rb_hash_lookup2(data, ID2SYM(rb_intern("allocations")), Qnil) : Qnil;
    return int_at(h, RESULT_KEYS[i].result, present);
}

void rperf_rb_stat_carry_add(long long carry[RPERF_RB_STAT_NCOUNTS], VALUE data)
{
    for (size_t i = 0; i < RPERF_RB_STAT_NCOUNTS; i++) {
        bool present;
        long long v = result_count(data, i, &present);
        if (present && RESULT_KEYS[i].sums) carry[i] += v;
    }
}

/* The result's counters (a Hash from a stop or window), plus `carry`
 * (NULL: nothing) for those that add up. */
static int put_result(rperf__buf_t *b, bool *first, VALUE data, const long long *carry)
{
    int rc = 0;
    for (size_t i = 0; i < RPERF_RB_STAT_NCOUNTS && !rc; i++) {
        bool present;
        long long v = result_count(data, i, &present);
        long long add = carry && RESULT_KEYS[i].sums ? carry[i] : 0;
        if (present || add) rc = put_kv(b, first, RESULT_KEYS[i].file, v + add, true);
    }
    if (rc) return rc;
    /* the thread table: names do not travel in pprof */
    VALUE threads = rb_hash_lookup2(data, ID2SYM(rb_intern("threads")), Qnil);
    if (!RB_TYPE_P(threads, T_ARRAY)) return 0;
    if ((rc = rperf__buf_put_cstr(b, *first ? "\"thread_table\":[" : ",\"thread_table\":[")))
        return rc;
    *first = false;
    rperf__buf_t scratch = {0};
    bool any = false;
    for (long i = 0; i < RARRAY_LEN(threads) && !rc; i++) {
        VALUE t = RARRAY_AREF(threads, i);
        bool has_seq, has_ractor;
        long long seq = int_at(t, "thread_seq", &has_seq);
        long long ractor = int_at(t, "ractor_id", &has_ractor);
        if (!has_seq) continue;
        VALUE name = rb_hash_lookup2(t, ID2SYM(rb_intern("name")), Qnil);
        char head[64];
        snprintf(head, sizeof head, "%s[%lld,%lld,", any ? "," : "", seq, has_ractor ? ractor : 0);
        any = true;
        if ((rc = rperf__buf_put_cstr(b, head))) break;
        if (RB_TYPE_P(name, T_STRING))
            rc = rperf__json_str(b, &scratch, RSTRING_PTR(name), (size_t)RSTRING_LEN(name), 0);
        else
            rc = rperf__buf_put_cstr(b, "null");
        if (!rc) rc = rperf__buf_put_cstr(b, "]");
    }
    rperf__buf_free(&scratch);
    return rc ? rc : rperf__buf_put_cstr(b, "]");
}

/* `len` bytes to path through a temporary file and a rename (the reader
 * never meets half a file); 0 or an errno. No Ruby API: any thread. */
int rperf_rb_stat_write_file(const char *path, const void *bytes, size_t len)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= sizeof tmp)
        return ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    const char *p = bytes;
    int err = 0;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            err = n < 0 ? errno : EIO;
            break;
        }
        p += n;
        len -= (size_t)n;
    }
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) unlink(tmp);
    return err;
}

/* A counters file into b: the process counters `v` (less `base`), then
 * `data`'s counts plus `carry` (NULL: nothing). 0 or an error. */
static int put_file(rperf__buf_t *b, const long long v[NCOUNTERS], VALUE data, VALUE base,
                    const long long *carry)
{
    bool first = true;
    int rc = rperf__buf_put_cstr(b, "{");
    for (size_t i = 0; i < NCOUNTERS && !rc; i++) {
        bool known = v[i] >= 0;
        long long x = v[i];
        VALUE was = RB_TYPE_P(base, T_HASH) ? rb_hash_lookup2(base, rb_str_new_cstr(COUNTERS[i].key), Qundef)
                                            : Qundef;
        if (was != Qundef) {
            /* a counter the base could not read has no growth to tell */
            if (RB_INTEGER_TYPE_P(was) && known) x -= NUM2LL(was);
            else known = false;
        }
        rc = put_kv(b, &first, COUNTERS[i].key, x, known);
    }
    if (!rc && RB_TYPE_P(data, T_HASH)) rc = put_result(b, &first, data, carry);
    if (!rc) rc = rperf__buf_put_cstr(b, "}\n");
    return rc;
}

/* The base the next part's counters grow from: every counter of `v` but
 * the peak (maxrss_kb, never subtracted), nil where it could not be
 * read. */
static VALUE next_base(const long long v[NCOUNTERS])
{
    VALUE h = rb_hash_new();
    for (size_t i = 0; i < NCOUNTERS; i++)
        if (COUNTERS[i].kind != K_ALL)
            rb_hash_aset(h, rb_str_new_cstr(COUNTERS[i].key), v[i] < 0 ? Qnil : LL2NUM(v[i]));
    return h;
}

char *rperf_rb_stat_part_json(VALUE data, VALUE base, const long long carry[RPERF_RB_STAT_NCOUNTS], VALUE *reading,
                              size_t *len)
{
    long long v[NCOUNTERS];
    read_counters(v);
    rperf__buf_t b = {0};
    if (put_file(&b, v, data, base, carry)) {
        rperf__buf_free(&b);
        return NULL;
    }
    *reading = next_base(v);
    *len = b.len;
    return (char *)b.data;
}

/* _c_write_part_counters(path, data, base): see the header. A part that
 * wrote windows counts from its last one (child_windows.c). */
static VALUE c_write_part_counters(VALUE self, VALUE path, VALUE data, VALUE base)
{
    (void)self;
    FilePathValue(path);
    const char *p = StringValueCStr(path);
    long long carry[RPERF_RB_STAT_NCOUNTS] = {0};
    bool windows = rperf_rb_child_windows_since(path, &base, carry);
    long long v[NCOUNTERS];
    read_counters(v);
    rperf__buf_t b = {0};
    int rc = put_file(&b, v, data, base, windows ? carry : NULL);
    int err = rc ? ENOMEM : rperf_rb_stat_write_file(p, b.data, b.len);
    rperf__buf_free(&b);
    if (err) {
        fprintf(stderr, "rperf: writing %s failed: %s\n", p, strerror(err));
        return Qfalse;
    }
    return Qtrue;
}

void rperf_rb_stat_init(VALUE m)
{
    sym_fork = ID2SYM(rb_intern("fork"));
    sym_exec = ID2SYM(rb_intern("exec"));
    /* the keys rb_gc_stat is asked for, made now (not at exit) */
    (void)rb_gc_stat(ID2SYM(rb_intern("time")));
    rb_define_module_function(m, "_c_stat_counters", c_stat_counters, -1);
    rb_define_module_function(m, "_c_write_part_counters", c_write_part_counters, 3);
}
