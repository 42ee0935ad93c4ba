/*
 * rperf_exporter.h — the exporter plugin contract: the read-only profile view
 * every exporter encodes, the writer it encodes into, the ops table, and the
 * registry. Ruby-free: nothing here includes <ruby.h>.
 *
 * Context: any non-signal thread (the Ruby binding calls the encoders with the
 * GVL released); none is async-signal-safe and none calls the Ruby API.
 * Error model: 0 or a negative errno. See docs/exporters.md.
 */
#ifndef RPERF_EXPORTER_H
#define RPERF_EXPORTER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Profile view ------------------------------------------------------- */

/* What the run sampled: thread CPU time, wall time, or allocations only
 * (a result with `mode: :alloc`, which has no time samples). */
typedef enum { RPERF_MODE_CPU = 0, RPERF_MODE_WALL = 1, RPERF_MODE_ALLOC = 2 } rperf_mode_t;

/* The sample type of a view (pprof calls it a value type): what every
 * samples[i].weight counts.
 *   RPERF_VALUE_TIME           nanoseconds of CPU or wall time (per `mode`)
 *   RPERF_VALUE_ALLOC_OBJECTS  objects allocated (as the result holds it)
 *   RPERF_VALUE_ALLOC_SPACE    bytes allocated
 *   RPERF_VALUE_INUSE_OBJECTS  objects still alive when the result was made
 *   RPERF_VALUE_INUSE_SPACE    bytes still alive when the result was made
 * The four allocation types are Go's heap-profile sample types, in Go's
 * order; RPERF_VIEW_ALLOC_INDEX(t) is type t's index in
 * rperf_view_alloc_sample_t.values. */
typedef enum {
    RPERF_VALUE_TIME = 0,
    RPERF_VALUE_ALLOC_OBJECTS = 1,
    RPERF_VALUE_ALLOC_SPACE = 2,
    RPERF_VALUE_INUSE_OBJECTS = 3,
    RPERF_VALUE_INUSE_SPACE = 4,
} rperf_value_type_t;

#define RPERF_VIEW_ALLOC_VALUES 4
#define RPERF_VIEW_ALLOC_INDEX(t) ((int)(t) - 1)

/* A string that is not necessarily NUL-terminated and not necessarily valid
 * UTF-8 (exporters must sanitise where their format requires it). */
typedef struct rperf_str {
    const char *ptr;
    size_t len;
} rperf_str_t;

/* One resolved frame. `name` is the qualified label ("Object#fib",
 * "[GC marking]"), `file` the path ("<C method>", "<GC>", "<GVL>", or a
 * source path); `line` the first line number, 0 when unknown. */
typedef struct rperf_view_frame {
    rperf_str_t name;
    rperf_str_t file;
    int32_t line;
} rperf_view_frame_t;

/* One (stack, thread, label set) entry. `frames` holds indices into
 * view->frames, LEAF FIRST (frames[0] is the innermost frame). */
typedef struct rperf_view_sample {
    const uint32_t *frames;
    uint32_t depth;
    int64_t weight;          /* > 0, in the unit of view->sample_type: nanoseconds
                              * (time), objects or bytes (allocation types) */
    uint32_t thread_seq;     /* 0 = unknown thread */
    uint32_t label_set_id;   /* index into view->label_sets; 0 = no labels */
} rperf_view_sample_t;

typedef struct rperf_view_label {
    rperf_str_t key;
    rperf_str_t value;
} rperf_view_label_t;

typedef struct rperf_view_label_set {
    const rperf_view_label_t *labels;
    uint32_t count;
} rperf_view_label_set_t;

/* One allocation entry of an allocation view: a (stack, thread, label set)
 * with all four values (indexed by RPERF_VIEW_ALLOC_INDEX()), each >= 0 (in-use
 * values may be < 0 in a view with RPERF_VIEW_INUSE_DELTA) and at least one
 * not 0. Its label set holds the object's class as the label
 * `class` (next to the thread's user labels). */
typedef struct rperf_view_alloc_sample {
    const uint32_t *frames;  /* as in rperf_view_sample_t, leaf first */
    uint32_t depth;
    uint32_t thread_seq;     /* 0 = unknown thread */
    uint32_t label_set_id;   /* index into view->label_sets */
    /* alloc_objects, alloc_space, inuse_objects, inuse_space */
    int64_t values[RPERF_VIEW_ALLOC_VALUES];
} rperf_view_alloc_sample_t;

/* Per-thread information (thread_seq -> Ractor id, name, native tid). */
typedef struct rperf_view_thread {
    uint32_t thread_seq;
    uint32_t ractor_id;      /* Ruby's Ractor id (main Ractor = 1); 0 = unknown */
    rperf_str_t name;        /* len 0 = unnamed */
    int64_t native_tid;      /* 0 = unknown */
} rperf_view_thread_t;

#define RPERF_VIEW_HAS_START_TIME     (1u << 0)
#define RPERF_VIEW_HAS_DURATION       (1u << 1)
#define RPERF_VIEW_HAS_SAMPLING_COUNT (1u << 2)
#define RPERF_VIEW_HAS_LABEL_SETS     (1u << 3)
#define RPERF_VIEW_HAS_ALLOC_INTERVAL (1u << 4) /* alloc_interval */
#define RPERF_VIEW_HAS_ALLOC_COUNTS   (1u << 5) /* alloc_sampled, alloc_live */
/* A window's heap profile (Go's delta profile, heap?seconds=N): its in-use
 * values are the change over the window and may be negative. Only an
 * exporter with RPERF_EXPORTER_F_INUSE_DELTA is given such a view. */
#define RPERF_VIEW_INUSE_DELTA        (1u << 6)

typedef struct rperf_profile_view {
    rperf_mode_t mode;
    int32_t frequency;            /* Hz; 0 = unknown */
    uint32_t flags;               /* RPERF_VIEW_HAS_* */
    int64_t start_time_ns;        /* CLOCK_REALTIME ns since the epoch */
    int64_t duration_ns;
    int64_t sampling_count;

    const rperf_view_frame_t *frames;
    size_t frame_count;
    const rperf_view_sample_t *samples;
    size_t sample_count;
    /* label_sets[0] is the empty set when present. */
    const rperf_view_label_set_t *label_sets;
    size_t label_set_count;
    const rperf_view_thread_t *threads;
    size_t thread_count;

    rperf_str_t rperf_version;    /* e.g. "0.7.0" */
    rperf_str_t ruby_description; /* RUBY_DESCRIPTION; may be empty */
    rperf_str_t backend;          /* timer backend ("signal", "nanosleep"); may be empty */

    /* What samples[].weight counts (see rperf_value_type_t). A time view
     * (RPERF_VALUE_TIME) is what ABI version 1 knew; the fields below are
     * all zero in it. */
    rperf_value_type_t sample_type;
    /* Allocation views only: every allocation entry with all four values,
     * including those whose value for `sample_type` is 0 (which are not in
     * `samples`). samples[] holds the entries whose chosen value is > 0,
     * with that value as weight, in the same order. */
    const rperf_view_alloc_sample_t *alloc_samples;
    size_t alloc_sample_count;
    int64_t alloc_interval;       /* mean allocations per sampled allocation (flag _INTERVAL) */
    int64_t alloc_sampled;        /* allocations sampled in the window (flag _COUNTS) */
    int64_t alloc_live;           /* sampled objects alive when the result was made (_COUNTS) */
} rperf_profile_view_t;

/* "time", "alloc_objects", "alloc_space", "inuse_objects", "inuse_space";
 * NULL for a value outside the enum. */
const char *rperf_value_type_name(rperf_value_type_t t);
/* The unit of a sample type as pprof names it: "nanoseconds", "count",
 * "bytes"; NULL outside the enum. */
const char *rperf_value_type_unit(rperf_value_type_t t);

/* ---- Writer ------------------------------------------------------------- */

/* A writer is a byte sink: a growable memory buffer, a file, or a gzip
 * stream over another writer. Errors are sticky: after the first failure
 * every call returns the same negative errno and rperf_writer_error()
 * describes it. Writers are not thread-safe; one writer, one thread.
 *
 * Lifecycle: open -> write… -> rperf_writer_finish() (commits: gzip writes
 * its trailer into the inner writer, a file writer renames its temporary
 * file over the target) -> rperf_writer_free(). Freeing an unfinished file
 * writer removes its temporary file, so a failed export never leaves a
 * partial file behind. */
typedef struct rperf_writer rperf_writer_t;

/* Write `len` bytes. Returns 0 or a negative errno (sticky). */
int rperf_writer_write(rperf_writer_t *w, const void *buf, size_t len);
/* Write a NUL-terminated string (without the NUL). */
int rperf_writer_puts(rperf_writer_t *w, const char *s);
int rperf_writer_printf(rperf_writer_t *w, const char *fmt, ...)
#if defined(__GNUC__)
    /* GNU attribute (not C11): lets -Wformat check every call site. */
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Write `len` bytes of possibly invalid UTF-8, replacing every invalid
 * byte with U+FFFD, so text formats never carry invalid UTF-8. */
int rperf_writer_write_utf8(rperf_writer_t *w, const char *p, size_t len);
/* Hint that about `n` more bytes will follow (memory writers allocate them
 * at once instead of growing by doubling; other writers ignore it).
 * Returns 0 or the sticky error. */
int rperf_writer_reserve(rperf_writer_t *w, size_t n);
/* Record a failure (e.g. an encoder's own error) with a message; the writer
 * becomes failed. `err` is a negative errno. Returns `err`. */
int rperf_writer_fail(rperf_writer_t *w, int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* 0 or the sticky negative errno. */
int rperf_writer_status(const rperf_writer_t *w);
/* "" while healthy, otherwise a one-line description of the first error. */
const char *rperf_writer_error(const rperf_writer_t *w);
/* Bytes accepted so far (before compression for a gzip writer). */
uint64_t rperf_writer_bytes(const rperf_writer_t *w);

/* Constructors. Each returns 0 and stores a new writer in *out, or a
 * negative errno (*out untouched). */
int rperf_writer_memory_open(rperf_writer_t **out);
/* A memory writer whose buffer belongs to the caller: whenever it needs
 * room for `cap` bytes it calls grow(ctx, buf, len, cap), which returns a
 * buffer of at least `cap` bytes holding the `len` bytes of `buf` (possibly
 * moved), or NULL on failure (the writer then fails with -ENOMEM). The
 * writer never frees the buffer; read it with rperf_writer_memory_data().
 * Called on the writer's thread. */
typedef void *(*rperf_writer_grow_fn)(void *ctx, void *buf, size_t len, size_t cap);
int rperf_writer_buffer_open(rperf_writer_t **out, rperf_writer_grow_fn grow, void *ctx);
/* A file writer never replaces what is at `path` with something else.
 * Symlinks (chains too) are followed to the final target, then:
 * - a regular file, or nothing: writes go to "<target>.tmp.<random>" beside
 *   it; finish() renames that over the target (atomic). A new file gets
 *   mode 0666 & ~umask; an existing one keeps its owner and mode;
 * - one of the process's descriptors (/dev/stdout, /dev/stderr, /dev/fd/N,
 *   /proc/self/fd/N): written at its current offset, never closed;
 * - a character device, FIFO (open blocks until a reader comes), Unix
 *   socket (connected), a regular file with other hard links or one whose
 *   owner cannot be given back: opened and written in place (not atomic;
 *   a regular file is truncated at open);
 * - a directory: -EISDIR.
 * Returns -errno of the failing open (e.g. -ENOENT for a missing
 * directory). */
int rperf_writer_file_open(rperf_writer_t **out, const char *path);
/* The same decision without writing anything, for a check long before the
 * write (Rperf.start): 0, or a negative errno with a one-line reason in
 * msg (may be NULL): a directory, a missing directory, a directory where no
 * file can be created (tried for real with a probe file, removed at once:
 * meaningful for root too), a target not writable, a descriptor not open
 * for writing. A FIFO is not opened (that would block). */
int rperf_writer_check_path(const char *path, char *msg, size_t msglen);
/* Keep one descriptor in reserve (process-wide, idempotent; 0 or -errno):
 * a file writer whose open fails with EMFILE/ENFILE closes it and retries,
 * so a process that ran out of descriptors still gets its profile.
 * rperf_writer_spare_release() closes it if unused. Thread-safe. */
int rperf_writer_spare_reserve(void);
void rperf_writer_spare_release(void);
/* gzip (RFC 1952) stream into `inner`, which must outlive this writer and is
 * neither finished nor freed by it. level: 0-9, or -1 for zlib's default. */
int rperf_writer_gzip_open(rperf_writer_t **out, rperf_writer_t *inner, int level);

/* Commit (see above). Returns 0 or the sticky error. Idempotent. */
int rperf_writer_finish(rperf_writer_t *w);
/* Release; NULL is a no-op. Unfinished file writers remove their temp file. */
void rperf_writer_free(rperf_writer_t *w);

/* Memory writers only: the bytes written so far (valid until the next write
 * or free). rperf_writer_memory_take() transfers the buffer to the caller
 * (release with free()) and leaves the writer empty; it returns NULL for
 * a rperf_writer_buffer_open() writer. */
const unsigned char *rperf_writer_memory_data(const rperf_writer_t *w, size_t *len);
unsigned char *rperf_writer_memory_take(rperf_writer_t *w, size_t *len);

/* ---- Exporter ops ------------------------------------------------------- */

typedef struct rperf_export_options {
    int32_t top_n;     /* text: rows per table (default 50, >= 0) */
    int header;        /* text: print the header (default 1) */
} rperf_export_options_t;

/* Fill `o` with the defaults above. */
void rperf_export_options_init(rperf_export_options_t *o);

/* Version 2 added the sample type and allocation fields at the end of the
 * view (and RPERF_MODE_ALLOC). Version 1 exporters still register; they are
 * only given time views (an allocation view is refused with -ENOTSUP before
 * their encode() runs, since they would print bytes as nanoseconds). */
#define RPERF_EXPORTER_ABI_VERSION 2
#define RPERF_EXPORTER_ABI_MIN_VERSION 1

/* An exporter: a const object, usually one per file in exporters/.
 * Fields valid for versions 1 and 2: all of them. */
typedef struct rperf_exporter_ops {
    uint32_t version;           /* RPERF_EXPORTER_ABI_VERSION (1 still accepted) */
    const char *name;           /* "pprof", "collapsed", ... ([a-z0-9_-]+) */
    const char *suffix;         /* default file suffix, e.g. ".pb.gz" */
    const char *description;    /* one line */
    int gzip;                   /* 1: files are gzip-compressed */
    /* Encode `view` into `w`. Returns 0 on success or a negative errno
     * (describe the failure with rperf_writer_fail() when the writer itself
     * did not fail). Must not retain pointers into `view` after returning.
     * The view has been checked by rperf_view_check() when called through
     * rperf_export_*(). Context: any non-signal thread; no Ruby API. */
    int (*encode)(const rperf_profile_view_t *view,
                  const rperf_export_options_t *opts,
                  rperf_writer_t *w);
    uint32_t flags;             /* RPERF_EXPORTER_F_* */
} rperf_exporter_ops_t;

/* The (uncompressed) output is UTF-8 text; the Ruby binding then returns a
 * UTF-8 String instead of a binary one. */
#define RPERF_EXPORTER_F_TEXT (1u << 0)
/* Accepts views with RPERF_VIEW_INUSE_DELTA (negative in-use values). */
#define RPERF_EXPORTER_F_INUSE_DELTA (1u << 1)

/* ---- Built-in exporters (one file each in exporters/) -------------------- */

extern const rperf_exporter_ops_t rperf_exporter_pprof;     /* pprof.c */
extern const rperf_exporter_ops_t rperf_exporter_collapsed; /* collapsed.c */
extern const rperf_exporter_ops_t rperf_exporter_json;      /* json.c (speedscope) */
extern const rperf_exporter_ops_t rperf_exporter_text;      /* text.c */
extern const rperf_exporter_ops_t rperf_exporter_threads;   /* example_threads.c */

/* ---- Registry -------------------------------------------------------------
 * Built-ins live in a static table in registry.c. Extra C exporters can be
 * added at run time (e.g. by another extension). Lookups are lock-free and
 * may run concurrently with a registration; registrations are serialised
 * by a mutex. Registered ops must stay valid for the life of the process. */

#define RPERF_EXPORTER_MAX_EXTRA 32

/* NULL when unknown. */
const rperf_exporter_ops_t *rperf_exporter_find(const char *name);
/* Number of registered exporters (built-ins first, in registration order). */
size_t rperf_exporter_count(void);
/* The i-th exporter, NULL when i >= rperf_exporter_count(). */
const rperf_exporter_ops_t *rperf_exporter_at(size_t i);
/* 0; -EINVAL (bad version, name or missing encode), -EEXIST (name taken),
 * -ENOSPC (more than RPERF_EXPORTER_MAX_EXTRA extra exporters). */
int rperf_exporter_register(const rperf_exporter_ops_t *ops);

/* ---- Running an exporter --------------------------------------------------- */

/* Check the view's invariants (frame indices in range, weights > 0,
 * label-set ids in range, non-NULL arrays when counts are non-zero, a
 * known mode and sample type, no time sample type in an alloc-mode view,
 * allocation entries only in allocation views, their values >= 0).
 * Returns 0 or -EINVAL with a message in errbuf (may be NULL). */
int rperf_view_check(const rperf_profile_view_t *view, char *errbuf, size_t errlen);

/* Check the view and encode it into a new memory buffer (gzip-compressed
 * when gzip is 1; gzip = -1 follows ops->gzip). On success returns 0 and
 * stores a malloc'd buffer (release with free()); on failure a negative
 * errno and a message in errbuf (-ENOTSUP: an allocation view for an
 * exporter of ABI version 1). */
int rperf_export_to_memory(const rperf_exporter_ops_t *ops, const rperf_profile_view_t *view,
                           const rperf_export_options_t *opts, int gzip,
                           unsigned char **data, size_t *len, char *errbuf, size_t errlen);

/* Same, into `path` through rperf_writer_file_open() (a regular file is
 * replaced atomically: nothing is left at `path` or beside it on failure;
 * devices, FIFOs and descriptors are written in place). */
int rperf_export_to_file(const rperf_exporter_ops_t *ops, const rperf_profile_view_t *view,
                         const rperf_export_options_t *opts, int gzip, const char *path,
                         char *errbuf, size_t errlen);

/* Check the view and encode it into `sink` (through a gzip stream when gzip
 * is 1; -1 follows ops->gzip). `sink` is neither finished nor freed. */
int rperf_export_to_writer(const rperf_exporter_ops_t *ops, const rperf_profile_view_t *view,
                           const rperf_export_options_t *opts, int gzip, rperf_writer_t *sink,
                           char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* RPERF_EXPORTER_H */
