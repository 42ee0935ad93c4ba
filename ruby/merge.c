/*
 * merge.c — the end of a run that merges processes, done in C so that the
 * program's redefinitions of core methods (Hash#[], Array#each,
 * Integer#+, String#%, Kernel#format, File.write, JSON, ...) cannot
 * reach it: the stop runs at exit and exec, after the program's code. It
 * owns the run directory of a run whose forked children inherit it
 * (ruby/lib/rperf/inherit.rb: made, its parts read and merged into the
 * root's result, removed), a raw run's samples aggregated, and the few
 * operations the stop's Ruby side (Rperf.__finish_stop) needs around them.
 *
 *   _c_run_dir_make -> "<tmp>/rperf-run-<pid>-<16 hex digits>" (mode 0700;
 *     tmp as Dir.tmpdir finds it; the name Rperf::RunDir gives, so the
 *     rperf command removes one whose process is gone)
 *   _c_run_dir_parts(dir, names, read) -> [[pid, part], ...] or nil (none):
 *     every part in dir (only those whose file names are in `names` when
 *     it is an Array), oldest first (start time, then pid), each a result
 *     Hash read from its pprof files (time, and heap beside it: one part;
 *     sampling_count from the time profile's "sampling count" comment)
 *     and its counters file (ruby/stat.c; a window's too, each part
 *     counting its own span): the counts, the thread names, and the
 *     process's counters as :part_counters. A file that cannot be
 *     read is reported on stderr and left out. The paths read are pushed
 *     onto `read` (an Array, or nil).
 *   _c_merge_parts(data, parts, stats) -> a new result: `data` (this
 *     process's) with the parts' samples, allocation entries, label sets
 *     and threads added, process_count, and every count summed
 *     (sampling_count, trigger_count, sampling_time_ns, dropped_samples,
 *     timer_overruns, label_sets_overflowed, detected_thread_count, the
 *     allocations' sampled, dropped, live; unique_stacks and unique_frames
 *     counted again); a part's samples get the label pid => its pid, its
 *     threads numbers after those of the processes before it (a pid's
 *     parts share them). `stats` (a Hash or nil) gets the parts'
 *     processes' counters added (peak memory: the largest).
 *   _c_run_dir_ended(dir): at the stop, the processes gone without their
 *     last part are named on stderr (their windows are merged)
 *   _c_run_dir_remove(dir)
 *   _c_aggregate_raw(data) -> data with :aggregated_samples made from its
 *     :raw_samples (equal frames, thread and label set added up)
 *   _c_child_base(dir) -> ["<dir>/<pid>" or "<dir>/<pid>.<n>", exec'd] or
 *     nil when dir is gone: the name of this process's part (n: the n-th
 *     program the process exec'd into)
 *   _c_dir_p(path), _c_dir_of_p(path), _c_fork_child_p(pid), _c_flush_std,
 *   _c_report_error(prefix, error), _c_process_text(text), _c_warn(line),
 *   _c_joined_p(data), _c_left_out_at_exit
 *
 * Context: GVL held (Ruby methods of Rperf), main Ractor. No Ruby method is
 * called: objects are made and read with the C API, and Hashes are keyed
 * by Symbols, Strings and Integers only, whose hashing calls no method
 * either. Ruby objects live on the C stack or in Ruby containers held
 * there; malloc'd memory holds a VALUE only during a sort, which
 * allocates nothing, of objects a Ruby Array holds too. Work that owns C
 * memory runs under rb_ensure.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ruby/encoding.h>

#include "rperf_ruby.h"
#include "exporter_internal.h"
#include "rperf_pprof_decode.h"

#define SYM(s) ID2SYM(rb_intern(s))
static VALUE sym_mode, sym_frequency, sym_aggregated_samples, sym_label_sets, sym_threads,
    sym_allocations, sym_samples, sym_interval, sym_start_time_ns, sym_duration_ns, sym_thread_seq,
    sym_ractor_id, sym_name, sym_native_tid, sym_pid, sym_process_count, sym_part_counters,
    sym_raw_samples, sym_detected_thread_count, sym_unique_stacks, sym_unique_frames, sym_sampled,
    sym_dropped, sym_live, sym_wall, sym_cpu, sym_alloc;

/* The result's counts and the counters file's keys (ruby/stat.c). */
static const char *const COUNTS[][2] = {
    {"sampling_count", "samples"},   {"trigger_count", "triggers"},
    {"sampling_time_ns", "sampling_time_ns"}, {"dropped_samples", "dropped"},
    {"timer_overruns", "overruns"},  {"label_sets_overflowed", "label_sets_overflowed"},
};
#define NCOUNTS (sizeof COUNTS / sizeof COUNTS[0])
static const char *const ALLOC_COUNTS[][2] = {
    {"sampled", "alloc_sampled"}, {"dropped", "alloc_dropped"}, {"live", "alloc_live"}};
/* a process's counters (ruby/stat.c) summed over processes; maxrss_kb is
 * the largest */
static const char *const PROCESS_COUNTERS[] = {"gc_time_ms", "gc_count", "minor_gc_count",
                                               "major_gc_count", "allocated", "freed",
                                               "voluntary", "involuntary"};

static VALUE hget(VALUE h, VALUE key) { return RB_TYPE_P(h, T_HASH) ? rb_hash_lookup2(h, key, Qnil) : Qnil; }

static long long int_or(VALUE v, long long dflt) { return RB_INTEGER_TYPE_P(v) ? NUM2LL(v) : dflt; }

/* ---- small helpers of the stop's Ruby side ------------------------------- */

static VALUE c_fork_child_p(VALUE self, VALUE pid)
{
    (void)self;
    return pid == INT2FIX(0) ? Qtrue : Qfalse;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static VALUE c_dir_p(VALUE self, VALUE path)
{
    (void)self;
    FilePathValue(path);
    return is_dir(StringValueCStr(path)) ? Qtrue : Qfalse;
}

/* the directory holding `path` exists */
static VALUE c_dir_of_p(VALUE self, VALUE path)
{
    (void)self;
    FilePathValue(path);
    const char *p = StringValueCStr(path);
    const char *slash = strrchr(p, '/');
    if (!slash) return is_dir(".") ? Qtrue : Qfalse;
    size_t n = slash == p ? 1 : (size_t)(slash - p);
    char *dir = ruby_xmalloc(n + 1);
    memcpy(dir, p, n);
    dir[n] = '\0';
    bool ok = is_dir(dir);
    ruby_xfree(dir);
    return ok ? Qtrue : Qfalse;
}

static VALUE flush_io(VALUE io)
{
    if (RB_TYPE_P(io, T_FILE)) rb_io_flush(io);
    return Qnil;
}

/* Our buffered output first, then a profile that may go to the same
 * descriptor (output: "/dev/stdout"); a broken stream is passed over. */
static VALUE c_flush_std(VALUE self)
{
    (void)self;
    int state = 0;
    rb_protect(flush_io, rb_stdout, &state);
    if (!state) rb_protect(flush_io, rb_stderr, &state);
    if (state) rb_set_errinfo(Qnil);
    return Qnil;
}

/* "<prefix>: <message> (<class>)" on stderr, the message read without a
 * method call (the error may come from a redefined core method). */
static VALUE c_report_error(VALUE self, VALUE prefix, VALUE e)
{
    (void)self;
    VALUE msg = rb_obj_is_kind_of(e, rb_eException) ? rb_attr_get(e, rb_intern("mesg")) : Qnil;
    const char *cls = rb_class2name(rb_obj_class(e));
    fprintf(stderr, "%.*s: %.*s (%s)\n", RB_TYPE_P(prefix, T_STRING) ? (int)RSTRING_LEN(prefix) : 5,
            RB_TYPE_P(prefix, T_STRING) ? RSTRING_PTR(prefix) : "rperf",
            RB_TYPE_P(msg, T_STRING) ? (int)RSTRING_LEN(msg) : 7,
            RB_TYPE_P(msg, T_STRING) ? RSTRING_PTR(msg) : "(error)", cls ? cls : "?");
    return Qnil;
}

/* "rperf: process <pid> <text>" (the pid without Integer#to_s) */
static VALUE c_process_text(VALUE self, VALUE text)
{
    (void)self;
    StringValue(text);
    char head[64];
    snprintf(head, sizeof head, "rperf: process %ld ", (long)getpid());
    VALUE s = rb_str_new_cstr(head);
    rb_str_cat(s, RSTRING_PTR(text), RSTRING_LEN(text));
    return s;
}

/* a line on stderr, written from C (Kernel#warn may be redefined) */
static VALUE c_warn(VALUE self, VALUE line)
{
    (void)self;
    StringValue(line);
    fprintf(stderr, "%.*s\n", (int)RSTRING_LEN(line), RSTRING_PTR(line));
    return Qnil;
}

/* a merged result holds other processes than this one */
static VALUE c_joined_p(VALUE self, VALUE data)
{
    (void)self;
    return int_or(hget(data, sym_process_count), 1) > 1 ? Qtrue : Qfalse;
}

static pid_t left_out_pid;

static void left_out_end(VALUE unused)
{
    (void)unused;
    if (getpid() == left_out_pid)
        fprintf(stderr, "rperf: process %ld ended after the run it was part of; its profile is left out\n",
                (long)left_out_pid);
}

/* A forked child whose run ended before it could start again says so at
 * its end, as a child that outlives the run does (Rperf.__finish_stop). */
static VALUE c_left_out_at_exit(VALUE self)
{
    (void)self;
    if (left_out_pid != getpid()) {
        left_out_pid = getpid();
        rb_set_end_proc(left_out_end, Qnil);
    }
    return Qnil;
}

/* ---- the run directory ---------------------------------------------------- */

/* Dir.tmpdir's choice: TMPDIR, TMP, TEMP, /tmp, the first that is a
 * writable directory and not world-writable unless sticky; else ".". */
static VALUE tmpdir(void)
{
    const char *cands[] = {getenv("TMPDIR"), getenv("TMP"), getenv("TEMP"), "/tmp"};
    const char *dir = ".";
    for (size_t i = 0; i < 4; i++) {
        struct stat st;
        const char *c = cands[i];
        if (!c || !*c || stat(c, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (faccessat(AT_FDCWD, c, W_OK, AT_EACCESS) != 0) continue;
        if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) continue;
        dir = c;
        break;
    }
    if (dir[0] == '/') return rb_str_new_cstr(dir);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) rb_sys_fail("getcwd");
    VALUE s = rb_str_new_cstr(cwd);
    if (strcmp(dir, ".") != 0) {
        rb_str_cat_cstr(s, "/");
        rb_str_cat_cstr(s, dir);
    }
    return s;
}

static VALUE c_run_dir_make(VALUE self)
{
    (void)self;
    VALUE tmp = tmpdir();
    for (;;) {
        unsigned char r[8];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
            int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
            if (fd < 0 || read(fd, r, sizeof r) != (ssize_t)sizeof r) {
                if (fd >= 0) close(fd);
                rb_sys_fail("/dev/urandom");
            }
            close(fd);
        }
        char name[64];
        snprintf(name, sizeof name, "/rperf-run-%ld-%02x%02x%02x%02x%02x%02x%02x%02x", (long)getpid(), r[0],
                 r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
        VALUE path = rb_str_dup(tmp);
        rb_str_cat_cstr(path, name);
        const char *p = StringValueCStr(path);
        if (mkdir(p, 0700) != 0) {
            if (errno == EEXIST) continue;
            rb_syserr_fail_str(errno, path);
        }
        if (chmod(p, 0700) != 0) rb_syserr_fail_str(errno, path);
        return path;
    }
}

/* A child still starting or ending may add or remove a file while the
 * directory goes (its start's writability probe, its last part): a
 * removal that meets one tries again, a few times. Only a directory of
 * this user's is emptied, through its descriptor (no symlink followed). */
static VALUE c_run_dir_remove(VALUE self, VALUE dir)
{
    (void)self;
    FilePathValue(dir);
    const char *p = StringValueCStr(dir);
    for (int tries = 0; tries < 5; tries++) {
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT) return Qnil;
            fprintf(stderr, "rperf: could not remove %s: %s\n", p, strerror(errno));
            return Qnil;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
            close(fd);
            fprintf(stderr, "rperf: could not remove %s: not this user's directory\n", p);
            return Qnil;
        }
        int lfd = dup(fd);
        DIR *d = lfd >= 0 ? fdopendir(lfd) : NULL;
        if (!d) {
            if (lfd >= 0) close(lfd);
            close(fd);
            fprintf(stderr, "rperf: could not remove %s: %s\n", p, strerror(errno));
            return Qnil;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            if (unlinkat(fd, e->d_name, 0) != 0 && (errno == EISDIR || errno == EPERM))
                unlinkat(fd, e->d_name, AT_REMOVEDIR);
        }
        closedir(d);
        close(fd);
        if (rmdir(p) == 0 || errno == ENOENT) return Qnil;
        if (errno != ENOTEMPTY && errno != EEXIST) {
            fprintf(stderr, "rperf: could not remove %s: %s\n", p, strerror(errno));
            return Qnil;
        }
    }
    fprintf(stderr, "rperf: could not remove %s: files kept appearing\n", p);
    return Qnil;
}

static VALUE c_child_base(VALUE self, VALUE dir)
{
    (void)self;
    FilePathValue(dir);
    if (!is_dir(StringValueCStr(dir))) return Qnil;
    long n = 0;
    for (;;) {
        char tail[64];
        if (n) snprintf(tail, sizeof tail, "/%ld.%ld", (long)getpid(), n);
        else snprintf(tail, sizeof tail, "/%ld", (long)getpid());
        VALUE base = rb_str_dup(dir);
        rb_str_cat_cstr(base, tail);
        VALUE probe = rb_str_dup(base);
        rb_str_cat_cstr(probe, ".pb.gz");
        struct stat st;
        if (stat(StringValueCStr(probe), &st) != 0) return rb_assoc_new(base, n ? Qtrue : Qfalse);
        n++;
    }
}

/* <pid>[.<n>][.w<k>][.heap].pb.gz (Rperf::RunDir::PART): the part's name
 * is the part before .heap/.pb.gz. */
static bool parse_part(const char *f, size_t *name_len, long long *pid, bool *heap, long long *program,
                       bool *window)
{
    const char *p = f;
    long long v = 0;
    int digits = 0;
    while (isdigit((unsigned char)*p)) {
        if (++digits > 18) return false;
        v = v * 10 + (*p++ - '0');
    }
    if (!digits) return false;
    *program = 0;
    if (p[0] == '.' && isdigit((unsigned char)p[1]))
        for (p++; isdigit((unsigned char)*p); p++)
            if (*program < (1LL << 40)) *program = *program * 10 + (*p - '0');
    *window = p[0] == '.' && p[1] == 'w' && isdigit((unsigned char)p[2]);
    if (*window)
        for (p += 2; isdigit((unsigned char)*p); p++) {}
    *name_len = (size_t)(p - f);
    *heap = strncmp(p, ".heap", 5) == 0;
    if (*heap) p += 5;
    if (strcmp(p, ".pb.gz") != 0) return false;
    *pid = v;
    return true;
}

/* ---- reading a part ----------------------------------------------------------- */

/* One part's result, built from its files. Ruby objects only on this
 * struct (on the C stack) and in the containers it holds. */
typedef struct {
    VALUE samples;          /* [[frames, weight, seq, set]] */
    VALUE allocs;           /* [[frames, class, ao, ab, io, ib, seq, set]] or nil */
    VALUE sets;             /* [Hash]; 0: {} */
    VALUE threads;          /* Hash seq => ractor, first seen wins */
    VALUE cache;            /* per pprof: frames by function / location */
    VALUE mode, frequency, interval, start, duration;
    VALUE sampling_count;   /* the time profile's "sampling count: N" comment, or nil */
    rperf__strmap_t set_keys;   /* canonical labels -> set id */
    rperf__buf_t key;
    bool have_time;
} part_t;

static const struct {
    const char *unit;
    long long scale;
} TIME_UNITS[] = {{"nanoseconds", 1}, {"ns", 1}, {"microseconds", 1000}, {"us", 1000},
                  {"milliseconds", 1000000}, {"ms", 1000000}, {"seconds", 1000000000LL},
                  {"s", 1000000000LL}};

static bool str_eq(rperf_str_t s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

static long long time_scale(rperf_str_t unit)
{
    for (size_t i = 0; i < sizeof TIME_UNITS / sizeof TIME_UNITS[0]; i++)
        if (str_eq(unit, TIME_UNITS[i].unit)) return TIME_UNITS[i].scale;
    return 0;
}

static VALUE utf8_str(rperf_str_t s)
{
    VALUE str = rb_utf8_str_new(s.len ? s.ptr : "", (long)s.len);
    if (rperf__utf8_class(s.ptr, s.len) == RPERF__UTF8_BROKEN) {
        VALUE fixed = rb_str_scrub(str, Qnil);
        if (!NIL_P(fixed)) str = fixed;
    }
    return str;
}

static VALUE fstr(rperf_str_t s) { return rb_str_to_interned_str(utf8_str(s)); }

static VALUE frame_pair(VALUE path, VALUE label)
{
    VALUE f = rb_assoc_new(path, label);
    rb_obj_freeze(f);
    return f;
}

/* The frames of a sample, leaf first: [path, label] pairs, one object per
 * function (a location without lines: ["", "0x<address>"]). */
static VALUE sample_frames(part_t *pt, const rperf_pprof_t *p, const rperf_pprof_sample_t *s)
{
    VALUE frames = rb_ary_new_capa((long)s->nlocations);
    for (uint32_t k = 0; k < s->nlocations; k++) {
        uint32_t li = s->locations[k];
        const rperf_pprof_location_t *loc = &p->locations[li];
        for (uint32_t n = 0; n < (loc->nlines ? loc->nlines : 1); n++) {
            uint32_t fi = loc->nlines ? loc->lines[n].function : RPERF_PPROF_NONE;
            long at = fi == RPERF_PPROF_NONE ? (long)p->nfunctions + (long)li : (long)fi;
            VALUE f = rb_ary_entry(pt->cache, at);
            if (NIL_P(f)) {
                if (fi == RPERF_PPROF_NONE) {
                    char buf[32];
                    snprintf(buf, sizeof buf, "0x%" PRIx64, loc->address);
                    f = frame_pair(rb_str_to_interned_str(rb_utf8_str_new_cstr("")),
                                   rb_str_to_interned_str(rb_utf8_str_new_cstr(buf)));
                } else {
                    f = frame_pair(fstr(p->functions[fi].filename), fstr(p->functions[fi].name));
                }
                rb_ary_store(pt->cache, at, f);
            }
            rb_ary_push(frames, f);
        }
    }
    return frames;
}

typedef struct {
    const rperf_pprof_label_t *l;
} label_ref_t;

static int label_cmp(const void *a, const void *b)
{
    const rperf_pprof_label_t *x = ((const label_ref_t *)a)->l, *y = ((const label_ref_t *)b)->l;
    size_t n = x->key.len < y->key.len ? x->key.len : y->key.len;
    int c = n ? memcmp(x->key.ptr, y->key.ptr, n) : 0;
    return c ? c : (x->key.len > y->key.len) - (x->key.len < y->key.len);
}

static int put_bytes(rperf__buf_t *b, const char *p, size_t n)
{
    uint32_t len = (uint32_t)n;
    int rc = rperf__buf_append(b, &len, sizeof len);
    return rc ? rc : rperf__buf_append(b, p, n);
}

/* [thread_seq, label set id] of a sample's labels, as Rperf::Report's
 * Builder takes them: thread_seq and ractor (numeric) give the thread,
 * `class` (heap profiles) the allocation's class, every other label goes
 * into the sample's label set (Symbol keys; the first value of a key). */
static void sample_labels(part_t *pt, const rperf_pprof_sample_t *s, bool heap, uint32_t *seq_out,
                          long *set_out, VALUE *klass)
{
    long long seq = 0, ractor = -1;
    label_ref_t refs[64];
    uint32_t nuser = 0;
    *klass = Qnil;
    for (uint32_t i = 0; i < s->nlabels; i++) {
        const rperf_pprof_label_t *l = &s->labels[i];
        if (!l->key.len) continue;
        bool dup = false;
        for (uint32_t j = 0; j < i && !dup; j++)
            dup = s->labels[j].key.len == l->key.len && memcmp(s->labels[j].key.ptr, l->key.ptr, l->key.len) == 0;
        if (dup) continue;   /* the first value of a key wins */
        if (str_eq(l->key, "thread_seq")) {
            if (l->is_num && l->num >= 0 && l->num <= 0xffffffffLL) seq = l->num;
        } else if (str_eq(l->key, "ractor")) {
            if (l->is_num && l->num >= 0 && l->num <= 0xffffffffLL) ractor = l->num;
        } else if (heap && str_eq(l->key, "class")) {
            if (!l->is_num) *klass = utf8_str(l->str);
        } else if (nuser < sizeof refs / sizeof refs[0]) {
            refs[nuser++].l = l;
        }
    }
    if (seq > 0) {
        VALUE k = LL2NUM(seq);
        if (NIL_P(rb_hash_lookup2(pt->threads, k, Qnil)))
            rb_hash_aset(pt->threads, k, LL2NUM(ractor < 0 ? 0 : ractor));
    }
    *seq_out = (uint32_t)seq;
    *set_out = 0;
    if (!nuser) return;
    /* the set's canonical bytes: its labels sorted by key */
    qsort(refs, nuser, sizeof refs[0], label_cmp);
    pt->key.len = 0;
    int rc = 0;
    for (uint32_t i = 0; i < nuser && !rc; i++) {
        const rperf_pprof_label_t *l = refs[i].l;
        char num[32];
        snprintf(num, sizeof num, "%" PRId64, l->num);
        if (!(rc = put_bytes(&pt->key, l->key.ptr, l->key.len)) &&
            !(rc = rperf__buf_append(&pt->key, l->is_num ? "i" : "s", 1)))
            rc = l->is_num ? put_bytes(&pt->key, num, strlen(num)) : put_bytes(&pt->key, l->str.ptr, l->str.len);
    }
    uint32_t id;
    int fresh;
    if (rc || rperf__strmap_intern(&pt->set_keys, (const char *)pt->key.data, pt->key.len, &id, &fresh))
        rb_memerror();
    if (fresh) {
        VALUE h = rb_hash_new();
        for (uint32_t i = 0; i < s->nlabels; i++) {   /* in the sample's order */
            const rperf_pprof_label_t *l = &s->labels[i];
            for (uint32_t j = 0; j < nuser; j++)
                if (refs[j].l == l)
                    rb_hash_aset(h, rb_str_intern(utf8_str(l->key)), l->is_num ? LL2NUM(l->num) : utf8_str(l->str));
        }
        rb_ary_push(pt->sets, h);
    }
    *set_out = (long)id + 1;   /* set 0 is {} */
}

static const char *const ALLOC_TYPES[] = {"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"};

/* A comment "<prefix><digits><suffix>": the number, or -1. */
static long long comment_number(const rperf_pprof_t *p, const char *prefix, const char *suffix)
{
    size_t pl = strlen(prefix), sl = strlen(suffix);
    for (size_t i = 0; i < p->ncomments; i++) {
        rperf_str_t c = p->comments[i];
        if (c.len <= pl + sl || memcmp(c.ptr, prefix, pl) != 0 || memcmp(c.ptr + c.len - sl, suffix, sl) != 0)
            continue;
        long long v = 0;
        size_t k = pl;
        for (; k < c.len - sl && isdigit((unsigned char)c.ptr[k]) && v < (1LL << 55); k++) v = v * 10 + (c.ptr[k] - '0');
        if (k == c.len - sl) return v;
    }
    return -1;
}

static long long pprof_frequency(const rperf_pprof_t *p)
{
    long long f = comment_number(p, "frequency: ", "Hz");
    if (f >= 0) return f;
    long long scale = time_scale(p->period_type.unit);
    if (!scale || p->period <= 0) return 0;
    return (long long)(1e9 / ((double)p->period * (double)scale) + 0.5);
}

/* One decoded file into the part: a time profile's samples, or a heap
 * profile's allocation entries (`want_heap`: the file is the part's heap
 * file, which must be one). Returns an error message or NULL. */
static const char *add_profile(part_t *pt, const rperf_pprof_t *p, bool want_heap)
{
    if (!p->nsample_types) return "not a readable pprof profile: no sample types";
    size_t index = p->nsample_types - 1;
    if (p->default_sample_type.len)
        for (size_t i = 0; i < p->nsample_types; i++)
            if (p->sample_types[i].type.len == p->default_sample_type.len &&
                memcmp(p->sample_types[i].type.ptr, p->default_sample_type.ptr, p->default_sample_type.len) == 0) {
                index = i;
                break;
            }
    long cols[4];
    bool all = true, alloc_type = false;
    for (int k = 0; k < 4; k++) {
        cols[k] = -1;
        for (size_t i = 0; i < p->nsample_types; i++)
            if (str_eq(p->sample_types[i].type, ALLOC_TYPES[k])) cols[k] = (long)i;
        all = all && cols[k] >= 0;
        alloc_type = alloc_type || str_eq(p->sample_types[index].type, ALLOC_TYPES[k]);
    }
    bool heap = alloc_type && all;
    if (want_heap && !heap) return "not a heap profile";
    pt->cache = rb_ary_new_capa((long)(p->nfunctions + p->nlocations));
    if (heap) {
        if (NIL_P(pt->allocs)) pt->allocs = rb_ary_new();
        long long interval = comment_number(p, "allocation interval: ", "");
        if (interval >= 0 && NIL_P(pt->interval)) pt->interval = LL2NUM(interval);
    } else {
        long long scale = time_scale(p->sample_types[index].unit);
        pt->have_time = true;
        pt->mode = str_eq(p->sample_types[index].type, "wall") ? sym_wall : sym_cpu;
        pt->frequency = LL2NUM(pprof_frequency(p));
        long long count = comment_number(p, "sampling count: ", "");
        pt->sampling_count = count >= 0 ? LL2NUM(count) : Qnil;
        for (size_t i = 0; i < p->nsamples; i++) {
            const rperf_pprof_sample_t *s = &p->samples[i];
            int64_t w = s->values[index];
            if (w <= 0) continue;
            uint32_t seq;
            long set;
            VALUE klass;
            sample_labels(pt, s, false, &seq, &set, &klass);
            VALUE row[4] = {sample_frames(pt, p, s), LL2NUM(scale ? w * scale : w), UINT2NUM(seq), LONG2NUM(set)};
            rb_ary_push(pt->samples, rb_ary_new_from_values(4, row));
        }
    }
    if (heap) {
        for (size_t i = 0; i < p->nsamples; i++) {
            const rperf_pprof_sample_t *s = &p->samples[i];
            int64_t four[4];
            bool any = false;
            for (int k = 0; k < 4; k++) {
                four[k] = s->values[cols[k]] < 0 ? 0 : s->values[cols[k]];
                any = any || four[k];
            }
            if (!any) continue;
            uint32_t seq;
            long set;
            VALUE klass;
            sample_labels(pt, s, true, &seq, &set, &klass);
            VALUE row[8] = {sample_frames(pt, p, s), klass, LL2NUM(four[0]), LL2NUM(four[1]), LL2NUM(four[2]),
                            LL2NUM(four[3]), UINT2NUM(seq), LONG2NUM(set)};
            rb_ary_push(pt->allocs, rb_ary_new_from_values(8, row));
        }
    }
    /* a part's start and duration are its time profile's (the heap one's
     * when it has none) */
    if (!heap || !pt->have_time) {
        pt->start = p->time_nanos > 0 ? LL2NUM(p->time_nanos) : Qnil;
        pt->duration = p->duration_nanos > 0 ? LL2NUM(p->duration_nanos) : Qnil;
    }
    if (!pt->have_time) {
        pt->mode = sym_alloc;
        pt->frequency = LL2NUM(pprof_frequency(p));
    }
    return NULL;
}

/* The whole file at `path` (malloc'd, *len) or NULL with *err set. */
static char *slurp(const char *path, size_t *len, int *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
        *err = fstat(fd, &st) != 0 ? errno : EISDIR;
        close(fd);
        return NULL;
    }
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            *err = errno;
            free(buf);
            close(fd);
            return NULL;
        }
        if (r == 0) {
            close(fd);
            *len = n;
            return buf;
        }
        n += (size_t)r;
    }
    free(buf);
    close(fd);
    *err = ENOMEM;
    return NULL;
}

/* ---- the counters file (written by ruby/stat.c): a small JSON reader for
 * what it writes (objects, arrays, strings, numbers, null, true, false) */

typedef struct {
    const char *p, *end;
    int depth;
} json_t;

static void jws(json_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t')) j->p++;
}

static void put_utf8(VALUE s, unsigned long c)
{
    char b[4];
    int n;
    if (c < 0x80) b[0] = (char)c, n = 1;
    else if (c < 0x800) b[0] = (char)(0xc0 | (c >> 6)), b[1] = (char)(0x80 | (c & 0x3f)), n = 2;
    else if (c < 0x10000)
        b[0] = (char)(0xe0 | (c >> 12)), b[1] = (char)(0x80 | ((c >> 6) & 0x3f)), b[2] = (char)(0x80 | (c & 0x3f)), n = 3;
    else
        b[0] = (char)(0xf0 | (c >> 18)), b[1] = (char)(0x80 | ((c >> 12) & 0x3f)),
        b[2] = (char)(0x80 | ((c >> 6) & 0x3f)), b[3] = (char)(0x80 | (c & 0x3f)), n = 4;
    rb_str_cat(s, b, n);
}

static bool jhex4(json_t *j, unsigned long *out)
{
    if (j->end - j->p < 4) return false;
    unsigned long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned long)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned long)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned long)(c - 'A' + 10);
        else return false;
    }
    *out = v;
    return true;
}

static VALUE jstring(json_t *j)
{
    j->p++; /* " */
    VALUE s = rb_utf8_str_new("", 0);
    while (j->p < j->end && *j->p != '"') {
        const char *run = j->p;
        while (j->p < j->end && *j->p != '"' && *j->p != '\\') j->p++;
        rb_str_cat(s, run, j->p - run);
        if (j->p >= j->end || *j->p == '"') break;
        j->p++;
        if (j->p >= j->end) return Qundef;
        char c = *j->p++;
        unsigned long u;
        switch (c) {
        case 'n': rb_str_cat(s, "\n", 1); break;
        case 'r': rb_str_cat(s, "\r", 1); break;
        case 't': rb_str_cat(s, "\t", 1); break;
        case 'b': rb_str_cat(s, "\b", 1); break;
        case 'f': rb_str_cat(s, "\f", 1); break;
        case 'u':
            if (!jhex4(j, &u)) return Qundef;
            if (u >= 0xd800 && u < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
                unsigned long lo;
                j->p += 2;
                if (!jhex4(j, &lo)) return Qundef;
                u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            }
            put_utf8(s, u);
            break;
        default: rb_str_cat(s, &c, 1); break;
        }
    }
    if (j->p >= j->end) return Qundef;
    j->p++;
    if (rb_enc_str_coderange(s) == ENC_CODERANGE_BROKEN) {
        VALUE fixed = rb_str_scrub(s, Qnil);
        if (!NIL_P(fixed)) s = fixed;
    }
    return s;
}

static VALUE jvalue(json_t *j)
{
    jws(j);
    if (j->p >= j->end || ++j->depth > 16) return Qundef;
    VALUE v = Qundef;
    char c = *j->p;
    if (c == '"') {
        v = jstring(j);
    } else if (c == '{' || c == '[') {
        bool obj = c == '{';
        v = obj ? rb_hash_new() : rb_ary_new();
        j->p++;
        jws(j);
        if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
            j->p++;
        } else {
            for (;;) {
                VALUE k = Qnil;
                if (obj) {
                    jws(j);
                    if (j->p >= j->end || *j->p != '"' || (k = jstring(j)) == Qundef) return Qundef;
                    jws(j);
                    if (j->p >= j->end || *j->p++ != ':') return Qundef;
                }
                VALUE e = jvalue(j);
                if (e == Qundef) return Qundef;
                if (obj) rb_hash_aset(v, k, e);
                else rb_ary_push(v, e);
                jws(j);
                if (j->p < j->end && *j->p == ',') {
                    j->p++;
                    continue;
                }
                if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
                    j->p++;
                    break;
                }
                return Qundef;
            }
        }
    } else if (c == 'n' && j->end - j->p >= 4 && memcmp(j->p, "null", 4) == 0) {
        j->p += 4, v = Qnil;
    } else if (c == 't' && j->end - j->p >= 4 && memcmp(j->p, "true", 4) == 0) {
        j->p += 4, v = Qtrue;
    } else if (c == 'f' && j->end - j->p >= 5 && memcmp(j->p, "false", 5) == 0) {
        j->p += 5, v = Qfalse;
    } else if (c == '-' || isdigit((unsigned char)c)) {
        char num[64];
        size_t n = 0;
        bool flt = false;
        while (j->p < j->end && n < sizeof num - 1 &&
               (isdigit((unsigned char)*j->p) || strchr("+-.eE", *j->p))) {
            flt = flt || strchr(".eE", *j->p);
            num[n++] = *j->p++;
        }
        num[n] = '\0';
        v = flt ? DBL2NUM(strtod(num, NULL)) : LL2NUM(strtoll(num, NULL, 10));
    }
    j->depth--;
    return v;
}

static VALUE jvalue_protected(VALUE j) { return jvalue((json_t *)j); }

/* The counters file at path as a Hash (String keys), or nil. */
static VALUE read_counters_file(const char *path)
{
    size_t len;
    int err;
    char *buf = slurp(path, &len, &err);
    if (!buf) return Qnil;
    json_t j = {buf, buf + len, 0};
    int state = 0;
    VALUE v = rb_protect(jvalue_protected, (VALUE)&j, &state);
    free(buf);
    if (state) rb_jump_tag(state);
    return RB_TYPE_P(v, T_HASH) ? v : Qnil;
}

/* ---- a part's result Hash ---------------------------------------------------- */

static int thread_row(VALUE seq, VALUE ractor, VALUE list)
{
    VALUE t = rb_hash_new();
    rb_hash_aset(t, sym_thread_seq, seq);
    rb_hash_aset(t, sym_ractor_id, ractor);
    rb_hash_aset(t, sym_name, Qnil);
    rb_hash_aset(t, sym_native_tid, Qnil);
    rb_ary_push(list, t);
    return ST_CONTINUE;
}

static int by_seq(const void *a, const void *b)
{
    long long x = int_or(rb_hash_lookup2(*(const VALUE *)a, sym_thread_seq, Qnil), 0);
    long long y = int_or(rb_hash_lookup2(*(const VALUE *)b, sym_thread_seq, Qnil), 0);
    return (x > y) - (x < y);
}

/* Threads by thread_seq, in place (nothing allocates meanwhile: the
 * entries stay held by the Array). */
static void sort_threads(VALUE threads)
{
    long n = RARRAY_LEN(threads);
    if (n < 2) return;
    VALUE *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) rb_memerror();
    for (long i = 0; i < n; i++) tmp[i] = RARRAY_AREF(threads, i);
    qsort(tmp, (size_t)n, sizeof tmp[0], by_seq);
    for (long i = 0; i < n; i++) RARRAY_ASET(threads, i, tmp[i]);
    free(tmp);
}

/* The counters file's counts, thread names and the threads it knows. */
static void apply_counters(VALUE data, VALUE counters, VALUE threads)
{
    for (size_t i = 0; i < NCOUNTS; i++) {
        VALUE v = hget(counters, rb_str_new_cstr(COUNTS[i][1]));
        if (RB_INTEGER_TYPE_P(v)) rb_hash_aset(data, SYM(COUNTS[i][0]), v);
    }
    VALUE v = hget(counters, rb_str_new_cstr("threads"));
    if (RB_INTEGER_TYPE_P(v)) rb_hash_aset(data, sym_detected_thread_count, v);
    VALUE a = hget(data, sym_allocations);
    for (size_t i = 0; RB_TYPE_P(a, T_HASH) && i < 3; i++) {
        VALUE c = hget(counters, rb_str_new_cstr(ALLOC_COUNTS[i][1]));
        if (RB_INTEGER_TYPE_P(c)) rb_hash_aset(a, SYM(ALLOC_COUNTS[i][0]), c);
    }
    VALUE table = hget(counters, rb_str_new_cstr("thread_table"));
    if (!RB_TYPE_P(table, T_ARRAY)) return;
    for (long i = 0; i < RARRAY_LEN(table); i++) {
        VALUE row = RARRAY_AREF(table, i);
        if (!RB_TYPE_P(row, T_ARRAY) || RARRAY_LEN(row) < 3 || !RB_INTEGER_TYPE_P(RARRAY_AREF(row, 0))) continue;
        VALUE seq = RARRAY_AREF(row, 0), name = RARRAY_AREF(row, 2);
        VALUE t = Qnil;
        for (long k = 0; k < RARRAY_LEN(threads) && NIL_P(t); k++)
            if (rb_hash_lookup2(RARRAY_AREF(threads, k), sym_thread_seq, Qnil) == seq ||
                int_or(rb_hash_lookup2(RARRAY_AREF(threads, k), sym_thread_seq, Qnil), -1) == NUM2LL(seq))
                t = RARRAY_AREF(threads, k);
        if (NIL_P(t)) {
            VALUE ractor = RB_INTEGER_TYPE_P(RARRAY_AREF(row, 1)) ? RARRAY_AREF(row, 1) : INT2FIX(0);
            thread_row(seq, ractor, threads);
            t = RARRAY_AREF(threads, RARRAY_LEN(threads) - 1);
        }
        if (RB_TYPE_P(name, T_STRING)) rb_hash_aset(t, sym_name, rb_str_freeze(name));
    }
}

static VALUE part_data(part_t *pt, VALUE counters)
{
    VALUE threads = rb_ary_new();
    rb_hash_foreach(pt->threads, thread_row, threads);
    VALUE d = rb_hash_new();
    rb_hash_aset(d, sym_mode, pt->mode);
    rb_hash_aset(d, sym_frequency, NIL_P(pt->frequency) ? INT2FIX(0) : pt->frequency);
    rb_hash_aset(d, sym_aggregated_samples, pt->samples);
    rb_hash_aset(d, sym_label_sets, pt->sets);
    rb_hash_aset(d, sym_threads, threads);
    if (!NIL_P(pt->allocs)) {
        VALUE a = rb_hash_new();
        rb_hash_aset(a, sym_samples, pt->allocs);
        if (!NIL_P(pt->interval)) rb_hash_aset(a, sym_interval, pt->interval);
        rb_hash_aset(d, sym_allocations, a);
    }
    if (!NIL_P(pt->start)) rb_hash_aset(d, sym_start_time_ns, pt->start);
    if (!NIL_P(pt->duration)) rb_hash_aset(d, sym_duration_ns, pt->duration);
    /* the counters file, when there, has every count and overrides it */
    if (!NIL_P(pt->sampling_count)) rb_hash_aset(d, SYM("sampling_count"), pt->sampling_count);
    if (!NIL_P(counters)) {
        apply_counters(d, counters, threads);
        rb_hash_aset(d, sym_part_counters, counters);
    }
    /* thread_seq order, as a result lists them */
    sort_threads(threads);
    return d;
}


/* ---- _c_run_dir_parts ------------------------------------------------------------ */

typedef struct {
    part_t *pt;
    const rperf_pprof_t *p;
    bool heap;
    const char *err;
} add_t;

static VALUE add_body(VALUE arg)
{
    add_t *a = (add_t *)arg;
    a->err = add_profile(a->pt, a->p, a->heap);
    return Qnil;
}

typedef struct {
    char *buf;
    rperf_pprof_t *p;
} owned_t;

static VALUE owned_free(VALUE arg)
{
    owned_t *o = (owned_t *)arg;
    free(o->buf);
    rperf_pprof_free(o->p);
    return Qnil;
}

static void left_out(const char *path, const char *why)
{
    fprintf(stderr, "rperf: a process's profile is left out: %s: %s\n", path, why);
}

/* One file into the part; false when it could not be read (reported). */
static bool load_file(part_t *pt, const char *path, bool heap)
{
    size_t len;
    int err;
    char *buf = slurp(path, &len, &err);
    if (!buf) {
        char why[160];
        if (err == ENOENT) snprintf(why, sizeof why, "no such file");
        else if (err == EISDIR) snprintf(why, sizeof why, "is a directory, not a profile");
        else snprintf(why, sizeof why, "cannot read: %s", strerror(err));
        left_out(path, why);
        return false;
    }
    owned_t o = {buf, NULL};
    char msg[256];
    int rc = rperf_pprof_decode(buf, len, &o.p, msg, sizeof msg);
    if (rc) {
        free(buf);
        if (rc == -ENOMEM) rb_memerror();
        char why[300];
        snprintf(why, sizeof why, "not a readable pprof profile: %s", msg);
        left_out(path, why);
        return false;
    }
    add_t a = {pt, o.p, heap, NULL};
    rb_ensure(add_body, (VALUE)&a, owned_free, (VALUE)&o);
    if (a.err) left_out(path, a.err);
    return !a.err;
}

typedef struct {
    long long pid;
    long long start;
    char *name;          /* the part's name (file name without .heap/.pb.gz) */
    char *time, *heap;   /* paths, or NULL */
} entry_t;

typedef struct {
    VALUE dir, names, read;   /* names: Hash of file names wanted, or nil */
    DIR *d;
    entry_t *e;
    size_t n, cap;
    rperf__strmap_t by_name;
    part_t pt;                /* the part being read */
    VALUE out;                /* [[start, pid, name, part Hash]] */
} list_t;

static char *path_join(const char *dir, const char *file)
{
    size_t a = strlen(dir), b = strlen(file);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, file, b + 1);
    return p;
}

static void part_reset(part_t *pt)
{
    rperf__strmap_free(&pt->set_keys);
    pt->key.len = 0;
    if (rperf__strmap_init(&pt->set_keys, 16, 256)) rb_memerror();
    pt->samples = rb_ary_new();
    pt->allocs = Qnil;
    pt->sets = rb_ary_new_from_args(1, rb_hash_new());
    pt->threads = rb_hash_new();
    pt->cache = Qnil;
    pt->mode = sym_cpu;
    pt->frequency = pt->interval = pt->start = pt->duration = pt->sampling_count = Qnil;
    pt->have_time = false;
}

static VALUE list_body(VALUE arg)
{
    list_t *L = (list_t *)arg;
    const char *dir = StringValueCStr(L->dir);
    if (!(L->d = opendir(dir))) return Qnil;
    struct dirent *de;
    while ((de = readdir(L->d))) {
        size_t nl;
        long long pid, program;
        bool heap, window;
        if (!parse_part(de->d_name, &nl, &pid, &heap, &program, &window)) continue;
        if (!NIL_P(L->names) &&
            NIL_P(rb_hash_lookup2(L->names, rb_str_new_cstr(de->d_name), Qnil)))
            continue;
        uint32_t id;
        int fresh;
        if (rperf__strmap_intern(&L->by_name, de->d_name, nl, &id, &fresh)) break;
        if (fresh) {
            if (L->n == L->cap) {
                size_t nc = L->cap ? L->cap * 2 : 16;
                entry_t *ne = realloc(L->e, nc * sizeof *ne);
                if (!ne) break;
                L->e = ne;
                L->cap = nc;
            }
            entry_t *e = &L->e[L->n++];
            memset(e, 0, sizeof *e);
            e->pid = pid;
            e->name = strndup(de->d_name, nl);
        }
        entry_t *e = &L->e[id];
        char *path = path_join(dir, de->d_name);
        if (heap) {
            free(e->heap);
            e->heap = path;
        } else {
            free(e->time);
            e->time = path;
        }
    }
    closedir(L->d);
    L->d = NULL;
    for (size_t i = 0; i < L->n; i++) {
        entry_t *e = &L->e[i];
        if (!e->name) continue;
        part_reset(&L->pt);
        bool any = false;
        if (e->time && load_file(&L->pt, e->time, false)) {
            any = true;
            if (!NIL_P(L->read)) rb_ary_push(L->read, rb_str_new_cstr(e->time));
        }
        if (e->heap && load_file(&L->pt, e->heap, true)) {
            any = true;
            if (!NIL_P(L->read)) rb_ary_push(L->read, rb_str_new_cstr(e->heap));
        }
        if (!any) continue;
        char *counters = path_join(dir, e->name);
        VALUE cpath = rb_str_new_cstr(counters ? counters : "");
        free(counters);
        rb_str_cat_cstr(cpath, ".stat.json");
        VALUE data = part_data(&L->pt, read_counters_file(StringValueCStr(cpath)));
        VALUE row[4] = {LL2NUM(int_or(rb_hash_lookup2(data, sym_start_time_ns, Qnil), 0)), LL2NUM(e->pid),
                        rb_str_new_cstr(e->name), data};
        rb_ary_push(L->out, rb_ary_new_from_values(4, row));
    }
    return Qnil;
}

static VALUE list_free(VALUE arg)
{
    list_t *L = (list_t *)arg;
    if (L->d) closedir(L->d);
    for (size_t i = 0; i < L->n; i++) {
        free(L->e[i].name);
        free(L->e[i].time);
        free(L->e[i].heap);
    }
    free(L->e);
    rperf__strmap_free(&L->by_name);
    rperf__strmap_free(&L->pt.set_keys);
    rperf__buf_free(&L->pt.key);
    return Qnil;
}

/* A process that no longer runs (a zombie not reaped yet included); one
 * of another user's, or without /proc, is taken as running. */
static bool process_gone(long long pid)
{
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
    return rperf_proc_state((long)pid, 0, NULL, NULL) == 'Z';
}

typedef struct {
    long long pid, program;
    bool last;   /* its newest program wrote its last part */
} ended_t;

static int by_pid(const void *a, const void *b)
{
    long long x = ((const ended_t *)a)->pid, y = ((const ended_t *)b)->pid;
    return (x > y) - (x < y);
}

/* _c_run_dir_ended(dir): at the run's stop, the processes whose newest
 * program wrote windows but no last part and that are gone (SIGKILLed,
 * ended by exit!) are named on stderr; their windows are in the result. */
static VALUE c_run_dir_ended(VALUE self, VALUE dir)
{
    (void)self;
    FilePathValue(dir);
    DIR *d = opendir(StringValueCStr(dir));
    if (!d) return Qnil;
    ended_t *e = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t nl;
        long long pid, program;
        bool heap, window;
        if (!parse_part(de->d_name, &nl, &pid, &heap, &program, &window)) continue;
        size_t i = 0;
        while (i < n && e[i].pid != pid) i++;
        if (i == n) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                ended_t *ne = realloc(e, nc * sizeof *ne);
                if (!ne) break;
                e = ne;
                cap = nc;
            }
            e[n++] = (ended_t){pid, program, !window};
        } else if (program > e[i].program) {
            e[i].program = program;
            e[i].last = !window;
        } else if (program == e[i].program && !window) {
            e[i].last = true;
        }
    }
    closedir(d);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!e[i].last && process_gone(e[i].pid)) e[k++] = e[i];
    if (k) {
        qsort(e, k, sizeof *e, by_pid);
        bool one = k == 1;
        fprintf(stderr, "rperf: %zu %s ended without %s last part: ", k, one ? "process" : "processes",
                one ? "its" : "their");
        for (size_t i = 0; i < k; i++) fprintf(stderr, "%spid %lld", i ? ", " : "", e[i].pid);
        fprintf(stderr, " (%s samples up to %s last window are included)\n", one ? "its" : "their",
                one ? "its" : "their");
    }
    free(e);
    return Qnil;
}

/* oldest first: start time, then pid, then name */
static int by_start(const void *a, const void *b)
{
    VALUE x = *(const VALUE *)a, y = *(const VALUE *)b;
    long long xs = NUM2LL(RARRAY_AREF(x, 0)), ys = NUM2LL(RARRAY_AREF(y, 0));
    if (xs != ys) return xs < ys ? -1 : 1;
    long long xp = NUM2LL(RARRAY_AREF(x, 1)), yp = NUM2LL(RARRAY_AREF(y, 1));
    if (xp != yp) return xp < yp ? -1 : 1;
    VALUE xn = RARRAY_AREF(x, 2), yn = RARRAY_AREF(y, 2);
    return strcmp(RSTRING_PTR(xn), RSTRING_PTR(yn));
}

static VALUE c_run_dir_parts(VALUE self, VALUE dir, VALUE names, VALUE read)
{
    (void)self;
    FilePathValue(dir);
    list_t L;
    memset(&L, 0, sizeof L);
    L.dir = dir;
    L.read = RB_TYPE_P(read, T_ARRAY) ? read : Qnil;
    L.names = Qnil;
    L.pt.samples = L.pt.allocs = L.pt.sets = L.pt.threads = L.pt.cache = Qnil;
    L.pt.mode = L.pt.frequency = L.pt.interval = L.pt.start = L.pt.duration = L.pt.sampling_count = Qnil;
    L.out = rb_ary_new();
    if (RB_TYPE_P(names, T_ARRAY)) {
        L.names = rb_hash_new();
        for (long i = 0; i < RARRAY_LEN(names); i++)
            if (RB_TYPE_P(RARRAY_AREF(names, i), T_STRING)) rb_hash_aset(L.names, RARRAY_AREF(names, i), Qtrue);
    }
    if (rperf__strmap_init(&L.by_name, 64, 1024) || rperf__strmap_init(&L.pt.set_keys, 16, 256)) {
        list_free((VALUE)&L);
        rb_memerror();
    }
    rb_ensure(list_body, (VALUE)&L, list_free, (VALUE)&L);
    long n = RARRAY_LEN(L.out);
    if (!n) return Qnil;
    VALUE *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) rb_memerror();
    for (long i = 0; i < n; i++) tmp[i] = RARRAY_AREF(L.out, i);
    qsort(tmp, (size_t)n, sizeof tmp[0], by_start);   /* allocates nothing: the rows stay held */
    VALUE parts = rb_ary_new_capa(n);
    for (long i = 0; i < n; i++) rb_ary_push(parts, rb_assoc_new(RARRAY_AREF(tmp[i], 1), RARRAY_AREF(tmp[i], 3)));
    free(tmp);
    RB_GC_GUARD(L.out);
    RB_GC_GUARD(L.names);
    return parts;
}

/* ---- _c_merge_parts ---------------------------------------------------------------- */

typedef struct {
    rperf__buf_t *b;
    int rc;
    VALUE skip;   /* a key left out (:pid) */
} canon_t;

/* one label as bytes of the set's key: key, type, value (a String's
 * bytes, an Integer in decimal, another object by identity), in the
 * Hash's order (equal sets built in another order stay two sets, which
 * changes nothing but the list's length) */
static int canon_pair(VALUE k, VALUE v, VALUE arg)
{
    canon_t *c = (canon_t *)arg;
    if (c->rc || k == c->skip) return ST_CONTINUE;
    VALUE ks = SYMBOL_P(k) ? rb_sym2str(k) : RB_TYPE_P(k, T_STRING) ? k : Qnil;
    if (NIL_P(ks)) {
        c->rc = put_bytes(c->b, (const char *)&k, sizeof k);
    } else {
        c->rc = put_bytes(c->b, RSTRING_PTR(ks), (size_t)RSTRING_LEN(ks));
    }
    if (c->rc) return ST_STOP;
    if (RB_TYPE_P(v, T_STRING)) {
        if (!(c->rc = rperf__buf_append(c->b, "s", 1)))
            c->rc = put_bytes(c->b, RSTRING_PTR(v), (size_t)RSTRING_LEN(v));
    } else if (RB_FIXNUM_P(v)) {
        char num[32];
        snprintf(num, sizeof num, "%ld", FIX2LONG(v));
        if (!(c->rc = rperf__buf_append(c->b, "i", 1))) c->rc = put_bytes(c->b, num, strlen(num));
    } else if (RB_TYPE_P(v, T_BIGNUM)) {
        VALUE s = rb_big2str(v, 10);
        if (!(c->rc = rperf__buf_append(c->b, "i", 1)))
            c->rc = put_bytes(c->b, RSTRING_PTR(s), (size_t)RSTRING_LEN(s));
    } else {
        if (!(c->rc = rperf__buf_append(c->b, "o", 1))) c->rc = put_bytes(c->b, (const char *)&v, sizeof v);
    }
    return c->rc ? ST_STOP : ST_CONTINUE;
}

static int copy_pair(VALUE k, VALUE v, VALUE h)
{
    if (k != sym_pid) rb_hash_aset(h, k, v);
    return ST_CONTINUE;
}

typedef struct {
    long long pid;
    long long top;        /* its largest thread_seq */
    long long offset;
    long newest;          /* its newest part with allocations, -1 */
    long long threads;    /* detected threads: the largest of its parts' */
    long long live;       /* its newest part's objects in use, -1 unknown */
} proc_t;

typedef struct {
    VALUE data, parts, stats, out;
    proc_t *procs;
    size_t nprocs;
    rperf__strmap_t set_keys;
    rperf__strmap_t frame_keys;
    rperf__buf_t key;
} merge_t;

static proc_t *proc_of(merge_t *m, long long pid)
{
    for (size_t i = 0; i < m->nprocs; i++)
        if (m->procs[i].pid == pid) return &m->procs[i];
    return NULL;
}

static long long seq_of(VALUE v) { return int_or(v, 0); }

static long long max_seq(VALUE d)
{
    long long top = 0;
    VALUE s = hget(d, sym_aggregated_samples);
    for (long i = 0; RB_TYPE_P(s, T_ARRAY) && i < RARRAY_LEN(s); i++) {
        VALUE r = RARRAY_AREF(s, i);
        if (RB_TYPE_P(r, T_ARRAY) && RARRAY_LEN(r) > 2 && seq_of(RARRAY_AREF(r, 2)) > top) top = seq_of(RARRAY_AREF(r, 2));
    }
    VALUE t = hget(d, sym_threads);
    for (long i = 0; RB_TYPE_P(t, T_ARRAY) && i < RARRAY_LEN(t); i++) {
        long long q = seq_of(hget(RARRAY_AREF(t, i), sym_thread_seq));
        if (q > top) top = q;
    }
    VALUE a = hget(hget(d, sym_allocations), sym_samples);
    for (long i = 0; RB_TYPE_P(a, T_ARRAY) && i < RARRAY_LEN(a); i++) {
        VALUE r = RARRAY_AREF(a, i);
        if (RB_TYPE_P(r, T_ARRAY) && RARRAY_LEN(r) > 6 && seq_of(RARRAY_AREF(r, 6)) > top) top = seq_of(RARRAY_AREF(r, 6));
    }
    return top;
}

static VALUE new_seq(VALUE seq, long long offset)
{
    long long q = seq_of(seq);
    return q > 0 ? LL2NUM(q + offset) : INT2FIX(0);
}

/* the frames of a sample, counted once each by content (unique_frames) */
static void count_frames(merge_t *m, VALUE frames)
{
    for (long i = 0; RB_TYPE_P(frames, T_ARRAY) && i < RARRAY_LEN(frames); i++) {
        VALUE f = RARRAY_AREF(frames, i);
        if (!RB_TYPE_P(f, T_ARRAY) || RARRAY_LEN(f) < 2) continue;
        VALUE path = RARRAY_AREF(f, 0), label = RARRAY_AREF(f, 1);
        m->key.len = 0;
        int rc = 0;
        if (RB_TYPE_P(path, T_STRING)) rc = put_bytes(&m->key, RSTRING_PTR(path), (size_t)RSTRING_LEN(path));
        if (!rc && RB_TYPE_P(label, T_STRING)) rc = put_bytes(&m->key, RSTRING_PTR(label), (size_t)RSTRING_LEN(label));
        uint32_t id;
        if (rc || rperf__strmap_intern(&m->frame_keys, (const char *)m->key.data, m->key.len, &id, NULL))
            rb_memerror();
    }
}

static void add_count(VALUE h, VALUE key, VALUE add)
{
    if (!RB_INTEGER_TYPE_P(add)) return;
    VALUE was = rb_hash_lookup2(h, key, Qnil);
    rb_hash_aset(h, key, RB_INTEGER_TYPE_P(was) ? LL2NUM(NUM2LL(was) + NUM2LL(add)) : add);
}

/* the processes' counters (ruby/stat.c) into `stats` */
static void add_process_counters(VALUE stats, VALUE c)
{
    if (!RB_TYPE_P(stats, T_HASH) || !RB_TYPE_P(c, T_HASH)) return;
    for (size_t i = 0; i < sizeof PROCESS_COUNTERS / sizeof PROCESS_COUNTERS[0]; i++) {
        VALUE k = rb_str_new_cstr(PROCESS_COUNTERS[i]);
        VALUE v = rb_hash_lookup2(c, k, Qnil);
        VALUE was = rb_hash_lookup2(stats, k, Qundef);
        if (!RB_INTEGER_TYPE_P(v) || was == Qnil) {
            rb_hash_aset(stats, k, Qnil);   /* unknown for one process: unknown */
            continue;
        }
        rb_hash_aset(stats, k, was == Qundef ? v : LL2NUM(NUM2LL(was) + NUM2LL(v)));
    }
    VALUE k = rb_str_new_cstr("maxrss_kb");
    VALUE v = rb_hash_lookup2(c, k, Qnil), was = rb_hash_lookup2(stats, k, Qnil);
    if (RB_INTEGER_TYPE_P(v) && (!RB_INTEGER_TYPE_P(was) || NUM2LL(v) > NUM2LL(was))) rb_hash_aset(stats, k, v);
}

static VALUE merge_body(VALUE arg)
{
    merge_t *m = (merge_t *)arg;
    VALUE data = m->data, parts = m->parts;
    VALUE out = m->out = rb_hash_dup(data);
    long nparts = RARRAY_LEN(parts);
    VALUE list = hget(data, sym_label_sets);
    list = RB_TYPE_P(list, T_ARRAY) ? rb_ary_dup(list) : rb_ary_new_from_args(1, rb_hash_new());
    VALUE samples = hget(data, sym_aggregated_samples);
    samples = RB_TYPE_P(samples, T_ARRAY) ? rb_ary_dup(samples) : rb_ary_new();
    VALUE root_allocs = hget(data, sym_allocations);
    VALUE allocs = RB_TYPE_P(root_allocs, T_HASH) ? hget(root_allocs, sym_samples) : Qnil;
    allocs = RB_TYPE_P(allocs, T_ARRAY) ? rb_ary_dup(allocs) : RB_TYPE_P(root_allocs, T_HASH) ? rb_ary_new() : Qnil;
    VALUE threads = hget(data, sym_threads);
    threads = RB_TYPE_P(threads, T_ARRAY) ? rb_ary_dup(threads) : rb_ary_new();

    /* each process's threads numbered after those of the processes before
     * it (and this one's): one offset per pid, in the order pids appear */
    long long base = 0;
    for (long i = 0; i < RARRAY_LEN(threads); i++) {
        long long q = seq_of(hget(RARRAY_AREF(threads, i), sym_thread_seq));
        if (q > base) base = q;
    }
    m->procs = calloc((size_t)nparts, sizeof *m->procs);
    if (!m->procs) rb_memerror();
    for (long i = 0; i < nparts; i++) {
        VALUE pr = RARRAY_AREF(parts, i);
        long long pid = int_or(RARRAY_AREF(pr, 0), 0);
        VALUE d = RARRAY_AREF(pr, 1);
        proc_t *p = proc_of(m, pid);
        if (!p) {
            p = &m->procs[m->nprocs++];
            p->pid = pid;
            p->newest = -1;
            p->live = -1;
        }
        long long top = max_seq(d);
        if (top > p->top) p->top = top;
        if (RB_TYPE_P(hget(d, sym_allocations), T_HASH)) p->newest = i;
        VALUE dt = hget(d, sym_detected_thread_count);
        long long nt = RB_INTEGER_TYPE_P(dt) ? NUM2LL(dt) : RARRAY_LEN(hget(d, sym_threads));
        if (nt > p->threads) p->threads = nt;
    }
    for (size_t k = 0; k < m->nprocs; k++) {
        m->procs[k].offset = base;
        base += m->procs[k].top;
    }

    VALUE seen = rb_hash_new();   /* new thread_seq => index in threads */
    VALUE set_at = rb_ary_new();  /* a children's set id (set_keys) => index in list */
    for (long i = 0; i < RARRAY_LEN(threads); i++)
        rb_hash_aset(seen, LL2NUM(seq_of(hget(RARRAY_AREF(threads, i), sym_thread_seq))), LONG2NUM(i));
    VALUE counts = rb_hash_new();   /* result key => the parts' sum */
    for (long i = 0; i < nparts; i++) {
        VALUE pr = RARRAY_AREF(parts, i);
        VALUE pidv = RARRAY_AREF(pr, 0);
        VALUE d = RARRAY_AREF(pr, 1);
        if (!RB_TYPE_P(d, T_HASH)) continue;
        proc_t *p = proc_of(m, int_or(pidv, 0));
        /* label sets: the part's, each with the pid first */
        VALUE sets = hget(d, sym_label_sets);
        if (!RB_TYPE_P(sets, T_ARRAY) || !RARRAY_LEN(sets)) sets = rb_ary_new_from_args(1, rb_hash_new());
        VALUE ids = rb_ary_new_capa(RARRAY_LEN(sets));
        for (long s = 0; s < RARRAY_LEN(sets); s++) {
            VALUE h = RARRAY_AREF(sets, s);
            m->key.len = 0;
            canon_t c = {&m->key, 0, sym_pid};
            char pidbuf[32];
            snprintf(pidbuf, sizeof pidbuf, "%lld", p->pid);
            c.rc = put_bytes(&m->key, pidbuf, strlen(pidbuf));
            if (!c.rc && RB_TYPE_P(h, T_HASH)) rb_hash_foreach(h, canon_pair, (VALUE)&c);
            uint32_t id;
            int fresh;
            if (c.rc || rperf__strmap_intern(&m->set_keys, (const char *)m->key.data, m->key.len, &id, &fresh))
                rb_memerror();
            if (fresh) {
                VALUE set = rb_hash_new();
                rb_hash_aset(set, sym_pid, pidv);
                if (RB_TYPE_P(h, T_HASH)) rb_hash_foreach(h, copy_pair, set);
                rb_ary_push(set_at, LONG2NUM(RARRAY_LEN(list)));
                rb_ary_push(list, set);
            }
            rb_ary_push(ids, rb_ary_entry(set_at, (long)id));
        }
        VALUE ds = hget(d, sym_aggregated_samples);
        for (long k = 0; RB_TYPE_P(ds, T_ARRAY) && k < RARRAY_LEN(ds); k++) {
            VALUE r = RARRAY_AREF(ds, k);
            if (!RB_TYPE_P(r, T_ARRAY) || RARRAY_LEN(r) < 2) continue;
            long set = RARRAY_LEN(r) > 3 ? (long)int_or(RARRAY_AREF(r, 3), 0) : 0;
            VALUE row[4] = {RARRAY_AREF(r, 0), RARRAY_AREF(r, 1),
                            new_seq(RARRAY_LEN(r) > 2 ? RARRAY_AREF(r, 2) : Qnil, p->offset),
                            set >= 0 && set < RARRAY_LEN(ids) ? RARRAY_AREF(ids, set) : INT2FIX(0)};
            rb_ary_push(samples, rb_ary_new_from_values(4, row));
        }
        VALUE da = hget(d, sym_allocations);
        if (!NIL_P(allocs) && RB_TYPE_P(da, T_HASH)) {
            bool current = p->newest == i;
            VALUE entries = hget(da, sym_samples);
            for (long k = 0; RB_TYPE_P(entries, T_ARRAY) && k < RARRAY_LEN(entries); k++) {
                VALUE e = RARRAY_AREF(entries, k);
                if (!RB_TYPE_P(e, T_ARRAY) || RARRAY_LEN(e) < 6) continue;
                if (!current && int_or(RARRAY_AREF(e, 2), 0) <= 0) continue;
                long set = RARRAY_LEN(e) > 7 ? (long)int_or(RARRAY_AREF(e, 7), 0) : 0;
                VALUE row[8] = {RARRAY_AREF(e, 0), RARRAY_AREF(e, 1), RARRAY_AREF(e, 2), RARRAY_AREF(e, 3),
                                current ? RARRAY_AREF(e, 4) : INT2FIX(0), current ? RARRAY_AREF(e, 5) : INT2FIX(0),
                                new_seq(RARRAY_LEN(e) > 6 ? RARRAY_AREF(e, 6) : Qnil, p->offset),
                                set >= 0 && set < RARRAY_LEN(ids) ? RARRAY_AREF(ids, set) : INT2FIX(0)};
                rb_ary_push(allocs, rb_ary_new_from_values(8, row));
            }
            add_count(counts, sym_sampled, hget(da, sym_sampled));
            add_count(counts, sym_dropped, hget(da, sym_dropped));
            if (current) p->live = int_or(hget(da, sym_live), -1);
        }
        /* threads: a pid's parts share its numbers, listed once (the
         * newest part's entry) */
        VALUE dt = hget(d, sym_threads);
        for (long k = 0; RB_TYPE_P(dt, T_ARRAY) && k < RARRAY_LEN(dt); k++) {
            VALUE t = RARRAY_AREF(dt, k);
            if (!RB_TYPE_P(t, T_HASH)) continue;
            VALUE seq = LL2NUM(seq_of(hget(t, sym_thread_seq)) + p->offset);
            VALUE nt = rb_hash_dup(t);
            rb_hash_aset(nt, sym_thread_seq, seq);
            VALUE at = rb_hash_lookup2(seen, seq, Qnil);
            if (NIL_P(at)) {
                rb_hash_aset(seen, seq, LONG2NUM(RARRAY_LEN(threads)));
                rb_ary_push(threads, nt);
            } else {
                rb_ary_store(threads, NUM2LONG(at), nt);
            }
        }
        for (size_t c = 0; c < NCOUNTS; c++) {
            VALUE key = SYM(COUNTS[c][0]);
            add_count(counts, key, hget(d, key));
        }
        add_process_counters(m->stats, hget(d, sym_part_counters));
    }

    rb_hash_aset(out, sym_process_count, LONG2NUM(1 + (long)m->nprocs));
    rb_hash_aset(out, sym_aggregated_samples, samples);
    rb_hash_aset(out, sym_label_sets, list);
    rb_hash_aset(out, sym_threads, threads);
    /* every count: this process's and the parts' */
    for (size_t c = 0; c < NCOUNTS; c++) {
        VALUE key = SYM(COUNTS[c][0]), add = rb_hash_lookup2(counts, key, Qnil);
        if (!NIL_P(add)) {
            VALUE was = hget(data, key);
            rb_hash_aset(out, key, RB_INTEGER_TYPE_P(was) ? LL2NUM(NUM2LL(was) + NUM2LL(add)) : add);
        }
    }
    long long nthreads = int_or(hget(data, sym_detected_thread_count), 0);
    for (size_t k = 0; k < m->nprocs; k++) nthreads += m->procs[k].threads;
    rb_hash_aset(out, sym_detected_thread_count, LL2NUM(nthreads));
    if (!NIL_P(allocs)) {
        VALUE a = rb_hash_dup(root_allocs);
        rb_hash_aset(a, sym_samples, allocs);
        add_count(a, sym_sampled, rb_hash_lookup2(counts, sym_sampled, Qnil));
        add_count(a, sym_dropped, rb_hash_lookup2(counts, sym_dropped, Qnil));
        for (size_t k = 0; k < m->nprocs; k++)
            if (m->procs[k].live >= 0) add_count(a, sym_live, LL2NUM(m->procs[k].live));
        rb_hash_aset(out, sym_allocations, a);
    }
    rb_hash_aset(out, sym_unique_stacks, LONG2NUM(RARRAY_LEN(samples)));
    for (long i = 0; i < RARRAY_LEN(samples); i++) count_frames(m, RARRAY_AREF(RARRAY_AREF(samples, i), 0));
    rb_hash_aset(out, sym_unique_frames, SIZET2NUM(m->frame_keys.count));
    RB_GC_GUARD(seen);
    RB_GC_GUARD(set_at);
    RB_GC_GUARD(counts);
    return out;
}

static VALUE merge_free(VALUE arg)
{
    merge_t *m = (merge_t *)arg;
    free(m->procs);
    rperf__strmap_free(&m->set_keys);
    rperf__strmap_free(&m->frame_keys);
    rperf__buf_free(&m->key);
    return Qnil;
}

static VALUE c_merge_parts(VALUE self, VALUE data, VALUE parts, VALUE stats)
{
    (void)self;
    Check_Type(data, T_HASH);
    if (!RB_TYPE_P(parts, T_ARRAY) || !RARRAY_LEN(parts)) {
        VALUE out = rb_hash_dup(data);
        rb_hash_aset(out, sym_process_count, INT2FIX(1));
        return out;
    }
    for (long i = 0; i < RARRAY_LEN(parts); i++) {
        VALUE pr = RARRAY_AREF(parts, i);
        if (!RB_TYPE_P(pr, T_ARRAY) || RARRAY_LEN(pr) < 2 || !RB_INTEGER_TYPE_P(RARRAY_AREF(pr, 0)) ||
            !RB_TYPE_P(RARRAY_AREF(pr, 1), T_HASH))
            rb_raise(rb_eTypeError, "rperf: parts must be [[pid, result Hash], ...]");
    }
    merge_t m;
    memset(&m, 0, sizeof m);
    m.data = data;
    m.parts = parts;
    m.stats = RB_TYPE_P(stats, T_HASH) ? stats : Qnil;
    m.out = Qnil;
    if (rperf__strmap_init(&m.set_keys, 64, 1024) || rperf__strmap_init(&m.frame_keys, 1024, 65536)) {
        merge_free((VALUE)&m);
        rb_memerror();
    }
    return rb_ensure(merge_body, (VALUE)&m, merge_free, (VALUE)&m);
}

/* ---- _c_aggregate_raw -------------------------------------------------------------- */

typedef struct {
    VALUE data;
    rperf__strmap_t keys;
    rperf__buf_t key;
    int64_t *sums;
    size_t cap;
} raw_t;

static VALUE raw_body(VALUE arg)
{
    raw_t *r = (raw_t *)arg;
    VALUE raw = hget(r->data, sym_raw_samples);
    VALUE firsts = rb_ary_new();   /* per id: [frames, seq, set] */
    for (long i = 0; RB_TYPE_P(raw, T_ARRAY) && i < RARRAY_LEN(raw); i++) {
        VALUE s = RARRAY_AREF(raw, i);
        if (!RB_TYPE_P(s, T_ARRAY) || RARRAY_LEN(s) < 4) continue;
        VALUE frames = RARRAY_AREF(s, 0), seq = RARRAY_AREF(s, 2), set = RARRAY_AREF(s, 3);
        r->key.len = 0;
        int64_t q[2] = {int_or(seq, 0), int_or(set, 0)};
        int rc = rperf__buf_append(&r->key, q, sizeof q);
        for (long k = 0; !rc && RB_TYPE_P(frames, T_ARRAY) && k < RARRAY_LEN(frames); k++) {
            VALUE f = RARRAY_AREF(frames, k);
            for (long e = 0; !rc && e < 2; e++) {
                VALUE v = RB_TYPE_P(f, T_ARRAY) && RARRAY_LEN(f) > e ? RARRAY_AREF(f, e) : Qnil;
                rc = RB_TYPE_P(v, T_STRING) ? put_bytes(&r->key, RSTRING_PTR(v), (size_t)RSTRING_LEN(v))
                                            : put_bytes(&r->key, (const char *)&v, sizeof v);
            }
        }
        uint32_t id;
        int fresh;
        if (rc || rperf__strmap_intern(&r->keys, (const char *)r->key.data, r->key.len, &id, &fresh))
            rb_memerror();
        if (fresh) {
            if (id >= r->cap) {
                size_t nc = r->cap ? r->cap * 2 : 1024;
                int64_t *ns = realloc(r->sums, nc * sizeof *ns);
                if (!ns) rb_memerror();
                r->sums = ns;
                r->cap = nc;
            }
            r->sums[id] = 0;
            rb_ary_push(firsts, rb_ary_new_from_args(3, frames, seq, set));
        }
        r->sums[id] += int_or(RARRAY_AREF(s, 1), 0);
    }
    VALUE agg = rb_ary_new_capa(RARRAY_LEN(firsts));
    for (long i = 0; i < RARRAY_LEN(firsts); i++) {
        VALUE f = RARRAY_AREF(firsts, i);
        VALUE row[4] = {RARRAY_AREF(f, 0), LL2NUM(r->sums[i]), RARRAY_AREF(f, 1), RARRAY_AREF(f, 2)};
        rb_ary_push(agg, rb_ary_new_from_values(4, row));
    }
    rb_hash_aset(r->data, sym_aggregated_samples, agg);
    return r->data;
}

static VALUE raw_free(VALUE arg)
{
    raw_t *r = (raw_t *)arg;
    rperf__strmap_free(&r->keys);
    rperf__buf_free(&r->key);
    free(r->sums);
    return Qnil;
}

static VALUE c_aggregate_raw(VALUE self, VALUE data)
{
    (void)self;
    Check_Type(data, T_HASH);
    if (NIL_P(hget(data, sym_raw_samples))) return data;
    raw_t r;
    memset(&r, 0, sizeof r);
    r.data = data;
    if (rperf__strmap_init(&r.keys, 1024, 65536)) rb_memerror();
    return rb_ensure(raw_body, (VALUE)&r, raw_free, (VALUE)&r);
}

void rperf_rb_merge_init(VALUE m)
{
#define S(var, name) var = ID2SYM(rb_intern(name))
    S(sym_mode, "mode");
    S(sym_frequency, "frequency");
    S(sym_aggregated_samples, "aggregated_samples");
    S(sym_label_sets, "label_sets");
    S(sym_threads, "threads");
    S(sym_allocations, "allocations");
    S(sym_samples, "samples");
    S(sym_interval, "interval");
    S(sym_start_time_ns, "start_time_ns");
    S(sym_duration_ns, "duration_ns");
    S(sym_thread_seq, "thread_seq");
    S(sym_ractor_id, "ractor_id");
    S(sym_name, "name");
    S(sym_native_tid, "native_tid");
    S(sym_pid, "pid");
    S(sym_process_count, "process_count");
    S(sym_part_counters, "part_counters");
    S(sym_raw_samples, "raw_samples");
    S(sym_detected_thread_count, "detected_thread_count");
    S(sym_unique_stacks, "unique_stacks");
    S(sym_unique_frames, "unique_frames");
    S(sym_sampled, "sampled");
    S(sym_dropped, "dropped");
    S(sym_live, "live");
    S(sym_wall, "wall");
    S(sym_cpu, "cpu");
    S(sym_alloc, "alloc");
#undef S
    for (size_t i = 0; i < NCOUNTS; i++) (void)SYM(COUNTS[i][0]);
    for (size_t i = 0; i < 3; i++) (void)SYM(ALLOC_COUNTS[i][0]);
    rb_define_module_function(m, "_c_fork_child_p", c_fork_child_p, 1);
    rb_define_module_function(m, "_c_dir_p", c_dir_p, 1);
    rb_define_module_function(m, "_c_dir_of_p", c_dir_of_p, 1);
    rb_define_module_function(m, "_c_flush_std", c_flush_std, 0);
    rb_define_module_function(m, "_c_report_error", c_report_error, 2);
    rb_define_module_function(m, "_c_process_text", c_process_text, 1);
    rb_define_module_function(m, "_c_warn", c_warn, 1);
    rb_define_module_function(m, "_c_joined_p", c_joined_p, 1);
    rb_define_module_function(m, "_c_left_out_at_exit", c_left_out_at_exit, 0);
    rb_define_module_function(m, "_c_run_dir_make", c_run_dir_make, 0);
    rb_define_module_function(m, "_c_run_dir_remove", c_run_dir_remove, 1);
    rb_define_module_function(m, "_c_child_base", c_child_base, 1);
    rb_define_module_function(m, "_c_run_dir_parts", c_run_dir_parts, 3);
    rb_define_module_function(m, "_c_run_dir_ended", c_run_dir_ended, 1);
    rb_define_module_function(m, "_c_merge_parts", c_merge_parts, 3);
    rb_define_module_function(m, "_c_aggregate_raw", c_aggregate_raw, 1);
}
