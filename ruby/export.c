/* SPDX-License-Identifier: MIT */
/*
 * export.c — the Ruby binding of exporters/: builds an rperf_profile_view_t,
 * either from a result Hash (behaviour doc §4 shape, plus :threads) or —
 * its samples and frames through ruby/export_engine.c — straight from the
 * engine's results between stop and release, and runs a C exporter on it.
 * Owns the conversion (conv_t, export_internal.h) and its frame store.
 * Defines, on module Rperf:
 *   Rperf._encode(name, data, opts)             -> String
 *   Rperf._encode_file(name, data, path, opts)  -> path (gzip per exporter; how a file
 *                                                  is written: exporters/writer.c)
 *   Rperf._c_export_engine(name, path, data, opts = nil)
 *                                               -> path (as _encode_file, from engine data)
 * opts: {top_n:, header:} (text), sample_type: (every exporter: :time, :cpu,
 * :wall, :alloc_objects, :alloc_space, :inuse_objects, :inuse_space; the
 * default is time for a cpu/wall result, inuse_space for an alloc one).
 *   Rperf._c_exporters                          -> [[name, suffix, description, gzip], …]
 *   Rperf.sample_type(data, requested = nil)    -> :time or an allocation type (what
 *                                                  an exporter encodes for data)
 *   Rperf.gzip(string)                          -> gzip-compressed binary String
 *   Rperf._c_output_check(path)                 -> nil or why path cannot be written
 *                                                  (and keeps a spare descriptor)
 *   Rperf._c_output_release                     -> nil (closes the spare descriptor)
 *   Rperf._c_write_file(path, bytes)            -> path (a Ruby exporter's output)
 * (the public Rperf::PProf/Collapsed/JSON/Text.encode, Rperf.save … are in
 * ruby/lib/rperf/exporters.rb).
 *
 * Context: GVL held on entry (Ruby methods). The encoders themselves run
 * with the GVL released (by then the view points only at memory owned
 * here), except a small view encoded to memory, which keeps the GVL: no
 * wait to take it back (ENCODE_WITH_GVL_MAX_SAMPLES).
 *
 * DESIGN — conversion without leaks or dangling pointers
 * - All memory lives in one conv_t (export_internal.h, shared with
 *   export_engine.c), released by rb_ensure() whatever the body raises
 *   (TypeError on a malformed tuple, an exception from a label's #to_s,
 *   NoMemoryError…).
 * - Phase 1 may run Ruby code (#to_s on label keys/values, Hash lookups):
 *   metadata, the sample type (and an allocation view's statistics),
 *   label sets, threads. Every string is COPIED into the arena.
 * - Phase 2, from a Hash, walks :aggregated_samples calling no Ruby method
 *   and allocating no Ruby object (only type checks, which raise on bad
 *   input), so no GC — hence no compaction — can run while it uses VALUE
 *   identities and RSTRING_PTRs. Frames are deduplicated by (path, label):
 *   first by the identity of the pair Array (cheap: engine results share
 *   pairs), then by content (the frame store keeps a copy of the bytes).
 * - Phase 2 of an allocation view walks :allocations[:samples] the same
 *   way: each entry with a value > 0 becomes an allocation entry with its
 *   four values, and one whose chosen value is > 0 also a view sample with
 *   that value as weight; the class becomes a label `class` added to the
 *   entry's label set (view label sets: (result set, class) pairs, built
 *   once each, in the arena).
 * - Phase 2, from the engine (Rperf.stop, before Rperf._c_release), is
 *   export_engine.c's: it runs BEFORE phase 1 and calls no Ruby method (see
 *   its DESIGN), and dedups frames through the same frame store
 *   (rperf_rb_export_frame), so both paths give the same view.
 * - Phase 3 encodes with the GVL released. To memory, the writer grows the
 *   result String itself (rperf_writer_buffer_open; each growth briefly
 *   takes the GVL), so a 100 MB output is never copied; text output is
 *   checked for UTF-8 without the GVL and the String gets its coderange
 *   set, so Ruby does not scan it again.
 * See also exporters/rperf_exporter.h, docs/exporters.md.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ruby.h>
#include <ruby/encoding.h>
#include <ruby/thread.h>

#include "rperf_exporter.h"
#include "exporter_internal.h"
#include "export_internal.h"

void rperf_rb_exporters_init(VALUE mRperf);
VALUE rperf_rb_export_engine_file(VALUE name, VALUE path, VALUE data, VALUE opts);
void *rperf_rb_export_detached_prepare(VALUE name, VALUE data, VALUE path, VALUE opts);
int rperf_rb_export_detached_finish(void *handle, char *err, size_t errlen);
void *rperf_rb_export_detached_prepare_memory(VALUE name, VALUE data, VALUE opts);
int rperf_rb_export_detached_finish_memory(void *handle, unsigned char **out, size_t *len, char *err,
                                           size_t errlen);

/* ---- arena: stable pointers for phase-1 strings ---------------------------- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(max_align_t) char data[];
} chunk_t;

/* ---- identity map (path VALUE, label VALUE) -> frame index ------------------- */

typedef struct ident_slot {
    VALUE pair;     /* the [path, label(, line)] Array object */
    uint32_t idx;   /* frame index + 1; 0 = empty */
} ident_slot_t;

typedef struct frame_meta {
    int32_t line;
    uint32_t path_len;
} frame_meta_t;

static ID id_to_s;
static VALUE sym_mode, sym_frequency, sym_start_time_ns, sym_duration_ns, sym_sampling_count,
    sym_aggregated_samples, sym_label_sets, sym_threads, sym_cpu, sym_wall, sym_thread_seq,
    sym_ractor_id, sym_name, sym_native_tid, sym_top_n, sym_header, sym_backend, sym_alloc,
    sym_allocations, sym_interval, sym_sampled, sym_live, sym_samples, sym_sample_type, sym_inuse_delta;

static void
conv_free(conv_t *c)
{
    chunk_t *ch = c->chunks;
    while (ch) {
        chunk_t *n = ch->next;
        free(ch);
        ch = n;
    }
    rperf__strmap_free(&c->fstore);
    rperf__buf_free(&c->key);
    free(c->fmeta);
    free(c->frames);
    free(c->ident);
    free(c->samples);
    free(c->stacks);
    free(c->remap);
    free(c->seen);
    free(c->sets);
    free(c->threads);
    free(c->asamples);
    free(c->asets);
    rperf__strmap_free(&c->aset_keys);
    memset(c, 0, sizeof *c);
}

static void *
xalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        rb_memerror();
    return p;
}

/* `n` bytes aligned for any object type, valid until conv_free(). */
static void *
arena_alloc(conv_t *c, size_t n)
{
    const size_t align = _Alignof(max_align_t);
    chunk_t *ch = c->chunks;
    size_t at = ch ? (ch->used + align - 1) & ~(align - 1) : 0;
    if (!ch || at > ch->cap || ch->cap - at < n) {
        size_t cap = n > 65536 ? n : 65536;
        chunk_t *nc = xalloc(sizeof *nc + cap);
        nc->next = c->chunks;
        nc->used = 0;
        nc->cap = cap;
        c->chunks = ch = nc;
        at = 0;
    }
    ch->used = at + n;
    return ch->data + at;
}

static char *
arena_copy(conv_t *c, const char *p, size_t n)
{
    char *d = arena_alloc(c, n + 1);
    if (n)
        memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

/* Copy a Ruby String (the caller guarantees the type) into the arena. */
static rperf_str_t
arena_str(conv_t *c, VALUE s)
{
    rperf_str_t r;
    r.len = (size_t)RSTRING_LEN(s);
    r.ptr = arena_copy(c, RSTRING_PTR(s), r.len);
    return r;
}

/* Phase 1 only (may call #to_s): Symbol -> its name, String as is, an
 * Integer in decimal without a method call (the pid label of a merged
 * child, ids: a program's redefined Integer#to_s must not change or break
 * them), else #to_s. */
static VALUE
to_str_value(VALUE v)
{
    if (RB_TYPE_P(v, T_STRING))
        return v;
    if (RB_TYPE_P(v, T_SYMBOL))
        return rb_sym2str(v);
    if (RB_FIXNUM_P(v))
        return rb_fix2str(v, 10);
    if (RB_TYPE_P(v, T_BIGNUM))
        return rb_big2str(v, 10);
    VALUE s = rb_funcall(v, id_to_s, 0);
    if (!RB_TYPE_P(s, T_STRING))
        rb_raise(rb_eTypeError, "rperf: #to_s of a label did not return a String");
    return s;
}

static int64_t
opt_int(VALUE h, VALUE key, const char *what, int *present)
{
    VALUE v = rb_hash_lookup2(h, key, Qnil);
    *present = !NIL_P(v);
    if (NIL_P(v))
        return 0;
    if (!RB_INTEGER_TYPE_P(v))
        rb_raise(rb_eTypeError, "rperf: %s must be an Integer, got %" PRIsVALUE, what,
                 rb_inspect(v));
    return (int64_t)NUM2LL(v);
}

/* ---- phase 1 ------------------------------------------------------------------ */

/* data[:mode]: :cpu (also when absent), :wall or :alloc, or their String. */
static rperf_mode_t
parse_mode(VALUE data)
{
    VALUE mode = rb_hash_lookup2(data, sym_mode, Qnil);
    /* data loaded from JSON carries a String */
    VALUE str = SYMBOL_P(mode) ? rb_sym2str(mode) : mode;
    if (NIL_P(mode))
        return RPERF_MODE_CPU;
    if (RB_TYPE_P(str, T_STRING)) {
        if (strcmp(StringValueCStr(str), "cpu") == 0)
            return RPERF_MODE_CPU;
        if (strcmp(StringValueCStr(str), "wall") == 0)
            return RPERF_MODE_WALL;
        if (strcmp(StringValueCStr(str), "alloc") == 0)
            return RPERF_MODE_ALLOC;
    }
    rb_raise(rb_eArgError, "rperf: :mode must be :cpu, :wall or :alloc, got %" PRIsVALUE,
             rb_inspect(mode));
    return RPERF_MODE_CPU; /* not reached */
}

static void
convert_meta(conv_t *c, VALUE data)
{
    rperf_profile_view_t *v = &c->view;
    v->mode = parse_mode(data);
    int present;
    int64_t f = opt_int(data, sym_frequency, ":frequency", &present);
    if (f < 0 || f > INT32_MAX)
        rb_raise(rb_eArgError, "rperf: :frequency out of range");
    v->frequency = (int32_t)f;
    v->start_time_ns = opt_int(data, sym_start_time_ns, ":start_time_ns", &present);
    if (present)
        v->flags |= RPERF_VIEW_HAS_START_TIME;
    v->duration_ns = opt_int(data, sym_duration_ns, ":duration_ns", &present);
    if (present)
        v->flags |= RPERF_VIEW_HAS_DURATION;
    v->sampling_count = opt_int(data, sym_sampling_count, ":sampling_count", &present);
    if (present)
        v->flags |= RPERF_VIEW_HAS_SAMPLING_COUNT;
    VALUE backend = rb_hash_lookup2(data, sym_backend, Qnil); /* Symbol at stop; String from JSON */
    if (SYMBOL_P(backend))
        backend = rb_sym2str(backend);
    if (RB_TYPE_P(backend, T_STRING))
        v->backend = arena_str(c, backend);
}

typedef struct {
    conv_t *c;
    rperf_view_label_t *labels;
    uint32_t n, cap;
} label_iter_t;

static int
label_i(VALUE key, VALUE val, VALUE arg)
{
    label_iter_t *it = (label_iter_t *)arg;
    if (NIL_P(val))
        return ST_CONTINUE;
    if (it->n >= it->cap) /* a #to_s grew the Hash under us */
        rb_raise(rb_eRuntimeError, "rperf: label set modified during export");
    VALUE ks = to_str_value(key);
    rperf_str_t k = arena_str(it->c, ks);
    VALUE vs = to_str_value(val);
    rperf_str_t v = arena_str(it->c, vs);
    it->labels[it->n].key = k;
    it->labels[it->n].value = v;
    it->n++;
    return ST_CONTINUE;
}

/* data[key]: nil, or an Array (of Hashes, checked by the caller). */
static VALUE
opt_array(VALUE data, VALUE key, const char *what)
{
    VALUE a = rb_hash_lookup2(data, key, Qnil);
    if (!NIL_P(a) && !RB_TYPE_P(a, T_ARRAY))
        rb_raise(rb_eTypeError, "rperf: %s must be an Array of Hash", what);
    return a;
}

static void
convert_label_sets(conv_t *c, VALUE data)
{
    VALUE sets = opt_array(data, sym_label_sets, ":label_sets");
    if (NIL_P(sets))
        return;
    long n = RARRAY_LEN(sets);
    c->sets = rperf_rb_export_calloc(n, sizeof *c->sets);
    c->nsets = (size_t)n;
    for (long i = 0; i < n && i < RARRAY_LEN(sets); i++) {
        VALUE h = RARRAY_AREF(sets, i);
        if (NIL_P(h))
            continue;
        if (!RB_TYPE_P(h, T_HASH))
            rb_raise(rb_eTypeError, "rperf: :label_sets[%ld] must be a Hash", i);
        size_t cnt = RHASH_SIZE(h);
        if (!cnt)
            continue;
        rperf_view_label_t *labels = arena_alloc(c, cnt * sizeof *labels);
        label_iter_t it = {c, labels, 0, (uint32_t)cnt};
        rb_hash_foreach(h, label_i, (VALUE)&it);
        c->sets[i].labels = labels;
        c->sets[i].count = it.n;
    }
    c->view.flags |= RPERF_VIEW_HAS_LABEL_SETS;
}

static void
convert_threads(conv_t *c, VALUE data)
{
    VALUE threads = opt_array(data, sym_threads, ":threads");
    if (NIL_P(threads))
        return;
    long n = RARRAY_LEN(threads);
    c->threads = rperf_rb_export_calloc(n, sizeof *c->threads);
    c->nthreads = 0;
    for (long i = 0; i < n && i < RARRAY_LEN(threads); i++) {
        VALUE h = RARRAY_AREF(threads, i);
        if (!RB_TYPE_P(h, T_HASH))
            rb_raise(rb_eTypeError, "rperf: :threads[%ld] must be a Hash", i);
        int present;
        rperf_view_thread_t *t = &c->threads[c->nthreads];
        int64_t seq = opt_int(h, sym_thread_seq, ":thread_seq", &present);
        int64_t rid = opt_int(h, sym_ractor_id, ":ractor_id", &present);
        if (seq < 0 || seq > UINT32_MAX || rid < 0 || rid > UINT32_MAX)
            rb_raise(rb_eArgError, "rperf: :threads[%ld]: id out of range", i);
        t->thread_seq = (uint32_t)seq;
        t->ractor_id = (uint32_t)rid;
        t->native_tid = opt_int(h, sym_native_tid, ":native_tid", &present);
        VALUE name = rb_hash_lookup2(h, sym_name, Qnil);
        if (!NIL_P(name))
            t->name = arena_str(c, to_str_value(name));
        c->nthreads++;
    }
}

/* ---- the sample type ---------------------------------------------------------- */

/* What opts[:sample_type] asked for: a rperf_value_type_t, or one of these. */
enum { REQ_DEFAULT = -1, REQ_CPU = 10, REQ_WALL = 11 };
static const struct {
    const char *name;
    int req;
} sample_type_names[] = {
    {"time", RPERF_VALUE_TIME},
    {"cpu", REQ_CPU},
    {"wall", REQ_WALL},
    {"alloc_objects", RPERF_VALUE_ALLOC_OBJECTS},
    {"alloc_space", RPERF_VALUE_ALLOC_SPACE},
    {"inuse_objects", RPERF_VALUE_INUSE_OBJECTS},
    {"inuse_space", RPERF_VALUE_INUSE_SPACE},
};
#define SAMPLE_TYPES_ACCEPTED \
    ":time, :cpu, :wall, :alloc_objects, :alloc_space, :inuse_objects or :inuse_space"

static int
parse_sample_type(VALUE v)
{
    if (NIL_P(v))
        return REQ_DEFAULT;
    VALUE str = SYMBOL_P(v) ? rb_sym2str(v) : v;
    if (RB_TYPE_P(str, T_STRING)) {
        for (size_t i = 0; i < sizeof sample_type_names / sizeof sample_type_names[0]; i++) {
            size_t n = strlen(sample_type_names[i].name);
            if ((size_t)RSTRING_LEN(str) == n &&
                memcmp(RSTRING_PTR(str), sample_type_names[i].name, n) == 0)
                return sample_type_names[i].req;
        }
    }
    rb_raise(rb_eArgError, "sample_type: must be one of " SAMPLE_TYPES_ACCEPTED ", got %" PRIsVALUE,
             rb_inspect(v));
    return REQ_DEFAULT; /* not reached */
}

/* data[:allocations]: nil or a Hash. */
static VALUE
allocations_of(VALUE data)
{
    VALUE a = rb_hash_lookup2(data, sym_allocations, Qnil);
    if (!NIL_P(a) && !RB_TYPE_P(a, T_HASH))
        rb_raise(rb_eTypeError, "rperf: :allocations must be a Hash, got %" PRIsVALUE,
                 rb_obj_class(a));
    return a;
}

/* The sample type asked for (`req`) of a result of `mode`, with or without
 * :allocations: by default time when the result has time samples (mode cpu
 * or wall), else inuse_space (Go's heap-profile default). Raises
 * ArgumentError naming sample_type: when the result cannot give it. */
static rperf_value_type_t
choose_sample_type(rperf_mode_t mode, int has_allocs, int req)
{
    const char *asked = NULL;
    for (size_t i = 0; i < sizeof sample_type_names / sizeof sample_type_names[0]; i++)
        if (sample_type_names[i].req == req)
            asked = sample_type_names[i].name;
    if (req == REQ_DEFAULT)
        return mode == RPERF_MODE_ALLOC ? RPERF_VALUE_INUSE_SPACE : RPERF_VALUE_TIME;
    if (req == RPERF_VALUE_TIME || req == REQ_CPU || req == REQ_WALL) {
        if (mode == RPERF_MODE_ALLOC)
            rb_raise(rb_eArgError,
                     "sample_type: :%s: this result has no time samples (mode :alloc); "
                     "accepted: :alloc_objects, :alloc_space, :inuse_objects or :inuse_space",
                     asked);
        if ((req == REQ_CPU && mode != RPERF_MODE_CPU) ||
            (req == REQ_WALL && mode != RPERF_MODE_WALL))
            rb_raise(rb_eArgError,
                     "sample_type: :%s does not match this result's mode :%s (use :time or :%s)",
                     asked, mode == RPERF_MODE_WALL ? "wall" : "cpu",
                     mode == RPERF_MODE_WALL ? "wall" : "cpu");
        return RPERF_VALUE_TIME;
    }
    if (!has_allocs)
        rb_raise(rb_eArgError,
                 "sample_type: :%s needs allocation samples, and this result has none "
                 "(no :allocations: profile with mode: :alloc or allocations: true)",
                 asked);
    return (rperf_value_type_t)req;
}

/* The view's sample type (after convert_meta); an allocation view also
 * takes the allocation statistics. */
static void
resolve_sample_type(conv_t *c, VALUE data, int req)
{
    rperf_profile_view_t *v = &c->view;
    VALUE allocs = allocations_of(data);
    v->sample_type = choose_sample_type(v->mode, !NIL_P(allocs), req);
    if (v->sample_type == RPERF_VALUE_TIME || NIL_P(allocs))
        return;
    int has_interval, has_sampled, has_live;
    v->alloc_interval = opt_int(allocs, sym_interval, ":allocations[:interval]", &has_interval);
    v->alloc_sampled = opt_int(allocs, sym_sampled, ":allocations[:sampled]", &has_sampled);
    v->alloc_live = opt_int(allocs, sym_live, ":allocations[:live]", &has_live);
    if (has_interval)
        v->flags |= RPERF_VIEW_HAS_ALLOC_INTERVAL;
    if (has_sampled && has_live)
        v->flags |= RPERF_VIEW_HAS_ALLOC_COUNTS;
    /* a window's heap profile: in-use values are changes (Rperf::Window) */
    if (RTEST(rb_hash_lookup2(allocs, sym_inuse_delta, Qfalse)))
        v->flags |= RPERF_VIEW_INUSE_DELTA;
}

/* Rperf.sample_type(data, requested = nil) -> Symbol: the sample type an
 * exporter encodes for `data` (:time or an allocation type), or the
 * ArgumentError it would raise. For Ruby exporters and the rperf command. */
static VALUE
rb_rperf_sample_type(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    rb_check_arity(argc, 1, 2);
    Check_Type(argv[0], T_HASH);
    int req = parse_sample_type(argc > 1 ? argv[1] : Qnil);
    rperf_value_type_t t =
        choose_sample_type(parse_mode(argv[0]), !NIL_P(allocations_of(argv[0])), req);
    return ID2SYM(rb_intern(rperf_value_type_name(t)));
}

static int
convert_opts(conv_t *c, VALUE opts)
{
    rperf_export_options_init(&c->opts);
    if (NIL_P(opts))
        return REQ_DEFAULT;
    Check_Type(opts, T_HASH);
    VALUE top = rb_hash_lookup2(opts, sym_top_n, Qnil);
    if (!NIL_P(top)) {
        if (!RB_INTEGER_TYPE_P(top) || NUM2LL(top) < 0 || NUM2LL(top) > INT32_MAX)
            rb_raise(rb_eArgError, "top_n must be a non-negative Integer, got %" PRIsVALUE,
                     rb_inspect(top));
        c->opts.top_n = (int32_t)NUM2LL(top);
    }
    VALUE header = rb_hash_lookup2(opts, sym_header, Qundef);
    if (header != Qundef)
        c->opts.header = RTEST(header);
    return parse_sample_type(rb_hash_lookup2(opts, sym_sample_type, Qnil));
}

/* Everything phase 1 takes from `data` (and the constants). */
static void
convert_phase1(conv_t *c, VALUE data, VALUE opts)
{
    int req = convert_opts(c, opts);
    convert_meta(c, data);
    resolve_sample_type(c, data, req);
    convert_label_sets(c, data);
    convert_threads(c, data);
    VALUE desc = rb_const_get(rb_cObject, rb_intern("RUBY_DESCRIPTION"));
    if (RB_TYPE_P(desc, T_STRING))
        c->view.ruby_description = arena_str(c, desc);
    VALUE mRperf = rb_const_get(rb_cObject, rb_intern("Rperf"));
    VALUE ver = rb_const_defined(mRperf, rb_intern("VERSION"))
                    ? rb_const_get(mRperf, rb_intern("VERSION")) : Qnil;
    if (RB_TYPE_P(ver, T_STRING))
        c->view.rperf_version = arena_str(c, ver);
    else
        c->view.rperf_version = (rperf_str_t){"unknown", 7};
}

/* ---- frames by content (both paths; no Ruby calls) ------------------------------ */

/* The frame index of (path, label), first-seen order; the first known line
 * wins (export_internal.h). Used by export_engine.c too. */
uint32_t
rperf_rb_export_frame(conv_t *c, const char *path, size_t plen, const char *label, size_t llen,
                      int32_t line)
{
    if (plen > UINT32_MAX)
        rb_raise(rb_eArgError, "rperf: frame path too long");
    /* Content: [u32 path_len][path][label]. */
    uint32_t plen32 = (uint32_t)plen;
    c->key.len = 0;
    if (rperf__buf_append(&c->key, &plen32, sizeof plen32) ||
        rperf__buf_append(&c->key, path, plen) || rperf__buf_append(&c->key, label, llen))
        rb_memerror();
    uint32_t id;
    int is_new;
    if (rperf__strmap_intern(&c->fstore, (const char *)c->key.data, c->key.len, &id, &is_new))
        rb_memerror();
    if (is_new) {
        if (id >= c->fmeta_cap) {
            size_t nc = c->fmeta_cap ? c->fmeta_cap * 2 : 1024;
            frame_meta_t *m = realloc(c->fmeta, nc * sizeof *m);
            if (!m)
                rb_memerror();
            c->fmeta = m;
            c->fmeta_cap = nc;
        }
        c->fmeta[id].line = line;
        c->fmeta[id].path_len = plen32;
    } else if (c->fmeta[id].line == 0) {
        c->fmeta[id].line = line;
    }
    return id;
}

/* ---- phase 2 from a Hash: no Ruby calls, no Ruby allocation ------------------------ */

static inline size_t
ident_hash(VALUE v)
{
    uint64_t h = (uint64_t)v * 0x9e3779b97f4a7c15ULL;
    return (size_t)(h ^ (h >> 29));
}

static void
ident_grow(conv_t *c)
{
    size_t ncap = c->ident_cap ? c->ident_cap * 2 : 4096;
    ident_slot_t *n = calloc(ncap, sizeof *n);
    if (!n)
        rb_memerror();
    for (size_t i = 0; i < c->ident_cap; i++) {
        ident_slot_t *s = &c->ident[i];
        if (!s->idx)
            continue;
        size_t h = ident_hash(s->pair) & (ncap - 1);
        while (n[h].idx)
            h = (h + 1) & (ncap - 1);
        n[h] = *s;
    }
    free(c->ident);
    c->ident = n;
    c->ident_cap = ncap;
}

static uint32_t
frame_index(conv_t *c, VALUE pair, long si, long fi)
{
    /* Identity: the pair Array object. A pair seen before was type-checked
     * then, and cannot have changed since (phase 2 runs no Ruby code). */
    if ((c->ident_count + 1) * 2 > c->ident_cap)
        ident_grow(c);
    size_t mask = c->ident_cap - 1;
    size_t h = ident_hash(pair) & mask;
    while (c->ident[h].idx) {
        if (c->ident[h].pair == pair)
            return c->ident[h].idx - 1;
        h = (h + 1) & mask;
    }
    if (!RB_TYPE_P(pair, T_ARRAY) || RARRAY_LEN(pair) < 2)
        rb_raise(rb_eTypeError, "rperf: sample %ld frame %ld must be [path, label]", si, fi);
    VALUE path = RARRAY_AREF(pair, 0), label = RARRAY_AREF(pair, 1);
    if (!RB_TYPE_P(path, T_STRING) || !RB_TYPE_P(label, T_STRING))
        rb_raise(rb_eTypeError, "rperf: sample %ld frame %ld: path and label must be Strings",
                 si, fi);
    int32_t line = 0;
    if (RARRAY_LEN(pair) >= 3 && RB_FIXNUM_P(RARRAY_AREF(pair, 2)))
        line = rperf_rb_export_line(FIX2LONG(RARRAY_AREF(pair, 2)));
    uint32_t id = rperf_rb_export_frame(c, RSTRING_PTR(path), (size_t)RSTRING_LEN(path),
                                   RSTRING_PTR(label), (size_t)RSTRING_LEN(label), line);
    c->ident[h].pair = pair;
    c->ident[h].idx = id + 1;
    c->ident_count++;
    return id;
}

static uint32_t
tuple_u32(VALUE tuple, long i, long si, const char *what)
{
    if (RARRAY_LEN(tuple) <= i)
        return 0;
    VALUE v = RARRAY_AREF(tuple, i);
    if (NIL_P(v))
        return 0;
    if (!RB_FIXNUM_P(v) || FIX2LONG(v) < 0 || FIX2LONG(v) > (long)UINT32_MAX)
        rb_raise(rb_eTypeError, "rperf: sample %ld: %s must be a non-negative Integer", si, what);
    return (uint32_t)FIX2LONG(v);
}

static void
convert_samples(conv_t *c, VALUE data)
{
    VALUE samples = rb_hash_lookup2(data, sym_aggregated_samples, Qnil);
    if (NIL_P(samples))
        return;
    if (!RB_TYPE_P(samples, T_ARRAY))
        rb_raise(rb_eTypeError, "rperf: :aggregated_samples must be an Array");
    long n = RARRAY_LEN(samples);
    /* Pre-pass: sizes. */
    size_t total = 0;
    for (long i = 0; i < n; i++) {
        VALUE t = RARRAY_AREF(samples, i);
        if (!RB_TYPE_P(t, T_ARRAY) || RARRAY_LEN(t) < 2 || !RB_TYPE_P(RARRAY_AREF(t, 0), T_ARRAY))
            rb_raise(rb_eTypeError,
                     "rperf: sample %ld must be [frames, weight, thread_seq, label_set_id]", i);
        total += (size_t)RARRAY_LEN(RARRAY_AREF(t, 0));
    }
    c->samples = xalloc((size_t)(n > 0 ? n : 1) * sizeof *c->samples);
    c->stacks = xalloc((total ? total : 1) * sizeof *c->stacks);
    size_t at = 0;
    for (long i = 0; i < n; i++) {
        VALUE t = RARRAY_AREF(samples, i);
        VALUE frames = RARRAY_AREF(t, 0);
        VALUE wv = RARRAY_AREF(t, 1);
        if (!RB_INTEGER_TYPE_P(wv))
            rb_raise(rb_eTypeError, "rperf: sample %ld: weight must be an Integer", i);
        /* NUM2LL on an Integer calls no Ruby method; it may raise RangeError. */
        int64_t weight = (int64_t)NUM2LL(wv);
        uint32_t seq = tuple_u32(t, 2, i, "thread_seq");
        uint32_t set = tuple_u32(t, 3, i, "label_set_id");
        if (set && set >= c->nsets) {
            if (c->nsets)
                rb_raise(rb_eArgError, "rperf: sample %ld: label_set_id %u out of range", i, set);
            set = 0; /* no :label_sets: no labels (behaviour doc §8) */
        }
        long depth = RARRAY_LEN(frames);
        if (at + (size_t)depth > total) /* the arrays changed since the pre-pass */
            rb_raise(rb_eRuntimeError, "rperf: samples modified during export");
        if (weight <= 0)
            continue;
        uint32_t *stack = c->stacks + at;
        for (long d = 0; d < depth; d++)
            stack[d] = frame_index(c, RARRAY_AREF(frames, d), i, d);
        at += (size_t)depth;
        rperf_view_sample_t *s = &c->samples[c->nsamples++];
        s->frames = stack;
        s->depth = (uint32_t)depth;
        s->weight = weight;
        s->thread_seq = seq;
        s->label_set_id = set;
    }
}

/* The view label set of an allocation entry: the result's label set `set`
 * plus the label class=<klass> when it has a class (a user label named
 * `class` gives way to it), one view set per distinct pair; view set 0 is
 * the empty set. Phase 2: no Ruby calls. */
static uint32_t
alloc_label_set(conv_t *c, uint32_t set, VALUE klass)
{
    int has_class = RB_TYPE_P(klass, T_STRING) && RSTRING_LEN(klass) > 0;
    const char *kp = has_class ? RSTRING_PTR(klass) : "";
    size_t kl = has_class ? (size_t)RSTRING_LEN(klass) : 0;
    unsigned char hc = (unsigned char)has_class;
    c->key.len = 0;
    if (rperf__buf_append(&c->key, &set, sizeof set) || rperf__buf_append(&c->key, &hc, 1) ||
        rperf__buf_append(&c->key, kp, kl))
        rb_memerror();
    uint32_t id;
    int is_new;
    if (rperf__strmap_intern(&c->aset_keys, (const char *)c->key.data, c->key.len, &id, &is_new))
        rb_memerror();
    if (!is_new)
        return id + 1;
    if (c->nasets == c->asets_cap) {
        size_t cap = c->asets_cap * 2;
        rperf_view_label_set_t *n = realloc(c->asets, cap * sizeof *n);
        if (!n)
            rb_memerror();
        c->asets = n;
        c->asets_cap = cap;
    }
    const rperf_view_label_set_t *src = set < c->nsets ? &c->sets[set] : NULL;
    uint32_t n = src ? src->count : 0, k = 0;
    rperf_view_label_t *labels = arena_alloc(c, ((size_t)n + 1) * sizeof *labels);
    for (uint32_t i = 0; i < n; i++) {
        const rperf_view_label_t *l = &src->labels[i];
        if (has_class && l->key.len == 5 && memcmp(l->key.ptr, "class", 5) == 0)
            continue;
        labels[k++] = *l;
    }
    if (has_class) {
        labels[k].key = (rperf_str_t){"class", 5};
        labels[k].value = (rperf_str_t){arena_copy(c, kp, kl), kl};
        k++;
    }
    c->asets[c->nasets].labels = labels;
    c->asets[c->nasets].count = k;
    return (uint32_t)c->nasets++;
}

/* An allocation value: a non-negative Integer (any Integer when
 * `negative`: an in-use change). Phase 2: NUM2LL on an Integer calls no
 * Ruby method (it may raise RangeError). */
static int64_t
alloc_value(VALUE t, long i, long at, const char *what, bool negative)
{
    VALUE v = RARRAY_AREF(t, at);
    if (!RB_INTEGER_TYPE_P(v) ||
        (!negative && (RB_FIXNUM_P(v) ? FIX2LONG(v) < 0 : rb_big_sign(v) == 0)))
        rb_raise(rb_eTypeError, "rperf: allocation sample %ld: %s must be a non-negative Integer",
                 i, what);
    return (int64_t)NUM2LL(v);
}

/* Phase 2 of an allocation view: every entry of data[:allocations][:samples]
 * ([frames, class_name, alloc_objects, alloc_bytes, inuse_objects,
 * inuse_bytes, thread_seq, label_set_id]) with a value > 0 becomes an
 * allocation entry; those whose chosen value is > 0 also a view sample with
 * that value as weight. Same rules as convert_samples: no Ruby calls, no
 * Ruby allocation. */
static void
convert_allocations(conv_t *c, VALUE data)
{
    if (rperf__strmap_init(&c->aset_keys, 64, 0))
        rb_memerror();
    c->asets_cap = 16;
    c->asets = rperf_rb_export_calloc((long)c->asets_cap, sizeof *c->asets);
    c->nasets = 1; /* set 0: no labels */
    VALUE allocs = rb_hash_lookup2(data, sym_allocations, Qnil);
    VALUE samples = RB_TYPE_P(allocs, T_HASH) ? rb_hash_lookup2(allocs, sym_samples, Qnil) : Qnil;
    if (!NIL_P(samples) && !RB_TYPE_P(samples, T_ARRAY))
        rb_raise(rb_eTypeError, "rperf: :allocations[:samples] must be an Array");
    long n = NIL_P(samples) ? 0 : RARRAY_LEN(samples);
    size_t total = 0;
    for (long i = 0; i < n; i++) {
        VALUE t = RARRAY_AREF(samples, i);
        if (!RB_TYPE_P(t, T_ARRAY) || RARRAY_LEN(t) < 6 || !RB_TYPE_P(RARRAY_AREF(t, 0), T_ARRAY))
            rb_raise(rb_eTypeError,
                     "rperf: allocation sample %ld must be [frames, class_name, alloc_objects, "
                     "alloc_bytes, inuse_objects, inuse_bytes, thread_seq, label_set_id]", i);
        total += (size_t)RARRAY_LEN(RARRAY_AREF(t, 0));
    }
    c->samples = xalloc((size_t)(n > 0 ? n : 1) * sizeof *c->samples);
    c->asamples = xalloc((size_t)(n > 0 ? n : 1) * sizeof *c->asamples);
    c->stacks = xalloc((total ? total : 1) * sizeof *c->stacks);
    int chosen = RPERF_VIEW_ALLOC_INDEX(c->view.sample_type);
    static const char *const names[RPERF_VIEW_ALLOC_VALUES] = {"alloc_objects", "alloc_bytes",
                                                               "inuse_objects", "inuse_bytes"};
    size_t at = 0;
    for (long i = 0; i < n; i++) {
        VALUE t = RARRAY_AREF(samples, i);
        VALUE frames = RARRAY_AREF(t, 0);
        VALUE klass = RARRAY_AREF(t, 1);
        if (!NIL_P(klass) && !RB_TYPE_P(klass, T_STRING))
            rb_raise(rb_eTypeError, "rperf: allocation sample %ld: class_name must be a String", i);
        int64_t values[RPERF_VIEW_ALLOC_VALUES];
        int any = 0;
        bool delta = c->view.flags & RPERF_VIEW_INUSE_DELTA;
        for (int k = 0; k < RPERF_VIEW_ALLOC_VALUES; k++) {
            values[k] = alloc_value(t, i, 2 + k, names[k], delta && k >= 2);
            any |= values[k] != 0;
        }
        uint32_t seq = tuple_u32(t, 6, i, "thread_seq");
        uint32_t set = tuple_u32(t, 7, i, "label_set_id");
        if (set && set >= c->nsets) {
            if (c->nsets)
                rb_raise(rb_eArgError, "rperf: allocation sample %ld: label_set_id %u out of range",
                         i, set);
            set = 0;
        }
        long depth = RARRAY_LEN(frames);
        if (at + (size_t)depth > total)
            rb_raise(rb_eRuntimeError, "rperf: samples modified during export");
        if (!any)
            continue;
        uint32_t *stack = c->stacks + at;
        for (long d = 0; d < depth; d++)
            stack[d] = frame_index(c, RARRAY_AREF(frames, d), i, d);
        at += (size_t)depth;
        rperf_view_alloc_sample_t *a = &c->asamples[c->nasamples++];
        a->frames = stack;
        a->depth = (uint32_t)depth;
        a->thread_seq = seq;
        a->label_set_id = alloc_label_set(c, set, klass);
        memcpy(a->values, values, sizeof values);
        if (values[chosen] <= 0)
            continue;
        rperf_view_sample_t *s = &c->samples[c->nsamples++];
        s->frames = stack;
        s->depth = a->depth;
        s->weight = values[chosen];
        s->thread_seq = seq;
        s->label_set_id = a->label_set_id;
    }
}

/* After phase 2: frames point into the (now final) frame store. */
static void
build_frames(conv_t *c)
{
    size_t nf = c->fstore.count;
    c->frames = rperf_rb_export_calloc((long)nf, sizeof *c->frames);
    for (uint32_t i = 0; i < nf; i++) {
        size_t klen;
        const char *k = rperf__strmap_get(&c->fstore, i, &klen);
        uint32_t plen = c->fmeta[i].path_len;
        c->frames[i].file.ptr = k + sizeof(uint32_t);
        c->frames[i].file.len = plen;
        c->frames[i].name.ptr = k + sizeof(uint32_t) + plen;
        c->frames[i].name.len = klen - sizeof(uint32_t) - plen;
        c->frames[i].line = c->fmeta[i].line;
    }
    rperf_profile_view_t *v = &c->view;
    v->frames = c->frames;
    v->frame_count = nf;
    v->samples = c->samples;
    v->sample_count = c->nsamples;
    if (v->sample_type != RPERF_VALUE_TIME) {
        v->label_sets = c->asets;
        v->label_set_count = c->nasets;
        v->flags |= RPERF_VIEW_HAS_LABEL_SETS;
        v->alloc_samples = c->asamples;
        v->alloc_sample_count = c->nasamples;
    } else {
        v->label_sets = c->sets;
        v->label_set_count = c->nsets;
    }
    v->threads = c->threads;
    v->thread_count = c->nthreads;
}

/* ---- phase 3 -------------------------------------------------------------------- */

typedef struct {
    conv_t *c;
    size_t cap;
    void *ptr;
} grow_t;

static VALUE
grow_body(VALUE arg)
{
    grow_t *g = (grow_t *)arg;
    /* len == capacity while writing: rb_str_resize keeps every byte so far. */
    rb_str_resize(g->c->str, (long)g->cap);
    g->ptr = RSTRING_PTR(g->c->str);
    return Qnil;
}

static void *
grow_with_gvl(void *arg)
{
    int state = 0;
    rb_protect(grow_body, (VALUE)arg, &state);
    if (state) {
        /* NoMemoryError: the writer fails with -ENOMEM, raised again later. */
        rb_set_errinfo(Qnil);
        ((grow_t *)arg)->ptr = NULL;
    }
    return NULL;
}

/* rperf_writer_grow_fn: the memory writer writes straight into c->str. */
static void *
grow_string(void *ctx, void *buf, size_t len, size_t cap)
{
    (void)buf;
    (void)len;
    grow_t g = {ctx, cap, NULL};
    if (cap > LONG_MAX)
        return NULL;
    if (g.c->with_gvl)
        grow_with_gvl(&g);
    else
        rb_thread_call_with_gvl(grow_with_gvl, &g);
    return g.ptr;
}

static void *
run_export_nogvl(void *arg)
{
    conv_t *c = arg;
    if (c->path) {
        c->rc = rperf_export_to_file(c->ops, &c->view, &c->opts, c->gzip, c->path, c->err,
                                     sizeof c->err);
        return NULL;
    }
    rperf_writer_t *w;
    if ((c->rc = rperf_writer_buffer_open(&w, grow_string, c)))
        return NULL;
    c->rc = rperf_export_to_writer(c->ops, &c->view, &c->opts, c->gzip, w, c->err, sizeof c->err);
    size_t len;
    const unsigned char *d = rperf_writer_memory_data(w, &len);
    if (c->rc == 0 && (c->ops->flags & RPERF_EXPORTER_F_TEXT))
        c->utf8 = rperf__utf8_class((const char *)d, len);
    c->outlen = len;
    rperf_writer_free(w); /* the bytes stay in c->str */
    return NULL;
}

static void
raise_export_error(conv_t *c)
{
    int e = -c->rc;
    if (e == EINVAL)
        rb_raise(rb_eArgError, "rperf: %s exporter: %s", c->ops->name, c->err);
    if (e == ENOMEM)
        rb_memerror();
    rb_syserr_fail_str(e, rb_sprintf("rperf: %s exporter: %s", c->ops->name, c->err));
}

/* A view of at most this many samples is encoded to memory holding the
 * GVL (a few milliseconds at most): giving the GVL up and taking it back
 * costs a thread that encodes a scrape's window up to a time slice of
 * every busy thread (docs/continuous-profiling.md, "Latency"). */
#define ENCODE_WITH_GVL_MAX_SAMPLES 10000

/* Encode (without the GVL unless the view is small and goes to memory);
 * returns the path, or the String for memory. */
static VALUE
run_phase3(conv_t *c, VALUE path)
{
    if (!c->path)
        c->str = rb_str_new(NULL, 0);
    c->with_gvl = !c->path && c->nsamples + c->nasamples <= ENCODE_WITH_GVL_MAX_SAMPLES;
    if (c->with_gvl)
        run_export_nogvl(c);
    else
        rb_thread_call_without_gvl(run_export_nogvl, c, NULL, NULL);
    if (c->rc)
        raise_export_error(c);
    if (c->path)
        return path;
    VALUE str = c->str;
    rb_str_resize(str, (long)c->outlen);
    if (c->ops->flags & RPERF_EXPORTER_F_TEXT) {
        /* Checked without the GVL: Ruby need not scan 100 MB again. A plugin
         * that broke its promise gets a binary String, not a broken UTF-8 one. */
        if (c->utf8 == RPERF__UTF8_BROKEN)
            rb_enc_associate(str, rb_ascii8bit_encoding());
        else
            RB_ENCODING_CODERANGE_SET(str, rb_utf8_encindex(),
                                      c->utf8 == RPERF__UTF8_ASCII ? RUBY_ENC_CODERANGE_7BIT
                                                                   : RUBY_ENC_CODERANGE_VALID);
    }
    return str;
}

typedef struct {
    conv_t *c;
    VALUE name, data, path, opts;
    int from_engine;
} call_t;

static const rperf_exporter_ops_t *
find_ops(VALUE name)
{
    if (RB_TYPE_P(name, T_SYMBOL))
        name = rb_sym2str(name);
    StringValue(name);
    const rperf_exporter_ops_t *ops = rperf_exporter_find(StringValueCStr(name));
    if (!ops)
        rb_raise(rb_eArgError, "rperf: unknown C exporter %" PRIsVALUE, rb_inspect(name));
    return ops;
}

/* Phases 1 and 2: the view, in memory owned by the conversion. */
static void
export_prepare(call_t *a)
{
    conv_t *c = a->c;
    if (rperf__strmap_init(&c->fstore, 1024, 0))
        rb_memerror();
    if (a->from_engine) {
        /* Checked types only until the engine's data is copied (DESIGN). */
        if (!RB_TYPE_P(a->path, T_STRING) || !RB_TYPE_P(a->data, T_HASH))
            rb_raise(rb_eTypeError, "rperf: _c_export_engine(name, path String, data Hash)");
        if (!rperf_rb_export_engine_matches(a->data))
            a->from_engine = 0;
        else
            rperf_rb_export_engine_samples(c);
    }
    c->ops = find_ops(a->name);
    Check_Type(a->data, T_HASH);
    if (!NIL_P(a->path)) {
        FilePathValue(a->path);
        c->path = arena_copy(c, RSTRING_PTR(a->path), (size_t)RSTRING_LEN(a->path));
        c->gzip = -1; /* the exporter decides (pprof: gzip) */
    } else {
        c->gzip = 0;
    }
    convert_phase1(c, a->data, a->opts);
    if (c->view.sample_type != RPERF_VALUE_TIME) {
        /* The engine path is not taken for a result with :allocations; a
         * mode-alloc result without them has no time samples to drop. */
        free(c->samples);
        free(c->stacks);
        c->samples = NULL;
        c->stacks = NULL;
        c->nsamples = 0;
        convert_allocations(c, a->data);
    } else if (a->from_engine) {
        rperf_rb_export_engine_check_label_sets(c);
    } else {
        convert_samples(c, a->data);
    }
    build_frames(c);
}

static VALUE
export_body(VALUE arg)
{
    call_t *a = (call_t *)arg;
    export_prepare(a);
    return run_phase3(a->c, a->path);
}

static VALUE
export_ensure(VALUE arg)
{
    conv_free(((call_t *)arg)->c);
    return Qnil;
}

static VALUE
run_export(VALUE name, VALUE data, VALUE path, VALUE opts, int from_engine)
{
    conv_t c;
    memset(&c, 0, sizeof c);
    c.str = Qnil;
    call_t a = {&c, name, data, path, opts, from_engine};
    VALUE r = rb_ensure(export_body, (VALUE)&a, export_ensure, (VALUE)&a);
    RB_GC_GUARD(c.str);
    return r;
}

/* A file export split in two, for a postponed job (child_windows.c),
 * which must not release the GVL (that would check interrupts and could
 * deliver another thread's Thread#raise into the job): phases 1 and 2
 * here, holding the GVL (raises on bad data; nothing is left allocated
 * then), and phase 3 (encoding, compression, the atomic write) later on
 * any thread without the GVL, by rperf_rb_export_detached_finish, which
 * frees everything. */
typedef struct detached {
    conv_t c;
    call_t a;
} detached_t;

static VALUE
detached_prepare(VALUE arg)
{
    export_prepare(&((detached_t *)arg)->a);
    return Qnil;
}

static VALUE
detached_fail(VALUE arg)
{
    detached_t *d = (detached_t *)arg;
    conv_free(&d->c);
    free(d);
    return Qnil;
}

void *
rperf_rb_export_detached_prepare(VALUE name, VALUE data, VALUE path, VALUE opts)
{
    detached_t *d = calloc(1, sizeof *d);
    if (!d)
        rb_memerror();
    d->c.str = Qnil;
    d->a = (call_t){&d->c, name, data, path, opts, 0};
    int state = 0;
    rb_protect(detached_prepare, (VALUE)d, &state);
    if (state) {
        detached_fail((VALUE)d);
        rb_jump_tag(state);
    }
    return d;
}

int
rperf_rb_export_detached_finish(void *handle, char *err, size_t errlen)
{
    detached_t *d = handle;
    run_export_nogvl(&d->c);
    int rc = d->c.rc;
    if (rc && err && errlen)
        snprintf(err, errlen, "%s", d->c.err);
    conv_free(&d->c);
    free(d);
    return rc;
}

/* The same to memory (window_send.c): prepared holding the GVL, with the
 * compression the exporter gives its files (pprof: gzip); finished on any
 * thread without the GVL into a malloc'd buffer handed to the caller
 * (*out, to free()). */
void *
rperf_rb_export_detached_prepare_memory(VALUE name, VALUE data, VALUE opts)
{
    detached_t *d = rperf_rb_export_detached_prepare(name, data, Qnil, opts);
    d->c.gzip = -1;
    return d;
}

int
rperf_rb_export_detached_finish_memory(void *handle, unsigned char **out, size_t *len, char *err,
                                       size_t errlen)
{
    detached_t *d = handle;
    conv_t *c = &d->c;
    rperf_writer_t *w = NULL;
    *out = NULL;
    *len = 0;
    int rc = rperf_writer_memory_open(&w);
    if (rc == 0)
        rc = rperf_export_to_writer(c->ops, &c->view, &c->opts, c->gzip, w, c->err, sizeof c->err);
    else
        snprintf(c->err, sizeof c->err, "out of memory");
    if (rc == 0) {
        *out = rperf_writer_memory_take(w, len);
        if (!*out && *len == 0)
            *out = malloc(1); /* an empty output is still an output */
        if (!*out) {
            rc = -ENOMEM;
            snprintf(c->err, sizeof c->err, "out of memory");
        }
    }
    if (rc && err && errlen)
        snprintf(err, errlen, "%s", c->err);
    rperf_writer_free(w);
    conv_free(c);
    free(d);
    return rc;
}

/* Rperf._encode(name, data, opts = nil) -> String. Uncompressed. */
static VALUE
rb_rperf_encode(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    rb_check_arity(argc, 2, 3);
    return run_export(argv[0], argv[1], Qnil, argc > 2 ? argv[2] : Qnil, 0);
}

/* Rperf._encode_file(name, data, path, opts = nil) -> path. Atomic; gzip for
 * exporters that want it. Raises SystemCallError / ArgumentError. */
static VALUE
rb_rperf_encode_file(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    rb_check_arity(argc, 3, 4);
    return run_export(argv[0], argv[1], argv[2], argc > 3 ? argv[3] : Qnil, 0);
}

/* Rperf._c_export_engine(name, path, data, opts = nil) -> path. Rperf.stop's
 * output: like _encode_file, but the view is built from the engine's
 * results when they are still held and are `data`'s (aggregated mode, no
 * :allocations); otherwise from `data`. */
static VALUE
rb_rperf_c_export_engine(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    rb_check_arity(argc, 3, 4);
    return run_export(argv[0], argv[2], argv[1], argc > 3 ? argv[3] : Qnil, 1);
}

/* The output of a run stopped at exit or exec (ruby/api.c): as
 * _c_export_engine, called from C with no method call on the way. */
VALUE
rperf_rb_export_engine_file(VALUE name, VALUE path, VALUE data, VALUE opts)
{
    return run_export(name, data, path, opts, 1);
}

/* Rperf._c_exporters -> [[name, suffix, description, gzip?], …] */
static VALUE
rb_rperf_c_exporters(VALUE self)
{
    (void)self;
    size_t n = rperf_exporter_count();
    VALUE list = rb_ary_new_capa((long)n);
    for (size_t i = 0; i < n; i++) {
        const rperf_exporter_ops_t *ops = rperf_exporter_at(i);
        if (!ops)
            break;
        rb_ary_push(list, rb_ary_new_from_args(4, rb_str_new_cstr(ops->name),
                                               rb_str_new_cstr(ops->suffix),
                                               rb_str_new_cstr(ops->description),
                                               ops->gzip ? Qtrue : Qfalse));
    }
    return list;
}

typedef struct {
    unsigned char *data;
    size_t len;
} owned_buf_t;

static VALUE
owned_to_str(VALUE arg)
{
    owned_buf_t *b = (owned_buf_t *)arg;
    return rb_str_new((const char *)b->data, (long)b->len);
}

static VALUE
owned_free(VALUE arg)
{
    free(((owned_buf_t *)arg)->data);
    return Qnil;
}

/* Rperf.gzip(string) -> binary String (RFC 1952). The input bytes are read
 * with the GVL held and no Ruby call in between, so they cannot move. */
static VALUE
rb_rperf_gzip(VALUE self, VALUE str)
{
    (void)self;
    StringValue(str);
    rperf_writer_t *mem = NULL, *gz = NULL;
    int rc = rperf_writer_memory_open(&mem);
    if (!rc)
        rc = rperf_writer_gzip_open(&gz, mem, -1);
    if (!rc)
        rc = rperf_writer_write(gz, RSTRING_PTR(str), (size_t)RSTRING_LEN(str));
    if (!rc)
        rc = rperf_writer_finish(gz);
    owned_buf_t b = {NULL, 0};
    if (!rc && !(b.data = rperf_writer_memory_take(mem, &b.len)))
        rc = -ENOMEM;
    rperf_writer_free(gz);
    rperf_writer_free(mem);
    if (rc == -ENOMEM)
        rb_memerror();
    if (rc)
        rb_raise(rb_eRuntimeError, "rperf: gzip failed: %s", strerror(-rc));
    /* rb_str_new may raise NoMemoryError: free the buffer in any case. */
    return rb_ensure(owned_to_str, (VALUE)&b, owned_free, (VALUE)&b);
}

/* ---- output files: the check at start, the spare descriptor, raw bytes ---- */

/* Rperf._c_output_check(path) -> nil, or the reason (String) the path cannot
 * be written. When it can, a spare descriptor is kept for the write at stop
 * (rperf_writer_spare_reserve): running out of descriptors later does not
 * lose the profile. */
static VALUE
rb_rperf_c_output_check(VALUE self, VALUE path)
{
    (void)self;
    FilePathValue(path);
    char msg[512];
    int rc = rperf_writer_check_path(StringValueCStr(path), msg, sizeof msg);
    if (rc)
        return rb_str_new_cstr(msg);
    rc = rperf_writer_spare_reserve();
    if (rc)
        return rb_sprintf("no file descriptor to reserve for it: %s", strerror(-rc));
    return Qnil;
}

/* Rperf._c_output_release -> nil: closes the spare descriptor if unused. */
static VALUE
rb_rperf_c_output_release(VALUE self)
{
    (void)self;
    rperf_writer_spare_release();
    return Qnil;
}

typedef struct {
    char *path;       /* malloc'd copies: used without the GVL */
    char *data;
    size_t len;
    int rc;
    char err[512];
} raw_write_t;

static void *
write_file_nogvl(void *arg)
{
    raw_write_t *r = arg;
    rperf_writer_t *w;
    if ((r->rc = rperf_writer_file_open(&w, r->path))) {
        snprintf(r->err, sizeof r->err, "cannot create %s: %s", r->path, strerror(-r->rc));
        return NULL;
    }
    r->rc = rperf_writer_write(w, r->data, r->len);
    if (!r->rc)
        r->rc = rperf_writer_finish(w);
    if (r->rc)
        snprintf(r->err, sizeof r->err, "%s", rperf_writer_error(w));
    rperf_writer_free(w); /* removes the temporary file unless finished */
    return NULL;
}

static VALUE
write_file_body(VALUE arg)
{
    rb_thread_call_without_gvl(write_file_nogvl, (void *)arg, NULL, NULL);
    return Qnil;
}

static VALUE
write_file_ensure(VALUE arg)
{
    raw_write_t *r = (raw_write_t *)arg;
    free(r->data);
    free(r->path);
    return Qnil;
}

/* Rperf._c_write_file(path, bytes) -> path: bytes written as an exporter's
 * file is (rperf_writer_file_open: atomic for regular files, in place for
 * devices and FIFOs, symlinks followed). Raises SystemCallError. */
static VALUE
rb_rperf_c_write_file(VALUE self, VALUE path, VALUE bytes)
{
    (void)self;
    FilePathValue(path);
    StringValue(bytes);
    const char *cpath = StringValueCStr(path);
    /* Private copies, written without the GVL (a FIFO's reader may be a
     * Ruby thread of this process) while GC could move the Strings. */
    raw_write_t r;
    memset(&r, 0, sizeof r);
    r.len = (size_t)RSTRING_LEN(bytes);
    r.data = malloc(r.len ? r.len : 1);
    r.path = strdup(cpath);
    if (!r.data || !r.path) {
        free(r.data);
        free(r.path);
        rb_memerror();
    }
    memcpy(r.data, RSTRING_PTR(bytes), r.len);
    rb_ensure(write_file_body, (VALUE)&r, write_file_ensure, (VALUE)&r);
    if (r.rc == -ENOMEM)
        rb_memerror();
    if (r.rc)
        rb_syserr_fail_str(-r.rc, rb_sprintf("rperf: %s", r.err));
    return path;
}

void
rperf_rb_exporters_init(VALUE mRperf)
{
    id_to_s = rb_intern("to_s");
#define SYM(v, s) (v = ID2SYM(rb_intern(s)))
    SYM(sym_mode, "mode");
    SYM(sym_frequency, "frequency");
    SYM(sym_start_time_ns, "start_time_ns");
    SYM(sym_duration_ns, "duration_ns");
    SYM(sym_sampling_count, "sampling_count");
    SYM(sym_backend, "backend");
    SYM(sym_aggregated_samples, "aggregated_samples");
    SYM(sym_label_sets, "label_sets");
    SYM(sym_threads, "threads");
    SYM(sym_cpu, "cpu");
    SYM(sym_wall, "wall");
    SYM(sym_thread_seq, "thread_seq");
    SYM(sym_ractor_id, "ractor_id");
    SYM(sym_name, "name");
    SYM(sym_native_tid, "native_tid");
    SYM(sym_top_n, "top_n");
    SYM(sym_header, "header");
    SYM(sym_alloc, "alloc");
    SYM(sym_allocations, "allocations");
    SYM(sym_interval, "interval");
    SYM(sym_sampled, "sampled");
    SYM(sym_live, "live");
    SYM(sym_inuse_delta, "inuse_delta");
    SYM(sym_samples, "samples");
    SYM(sym_sample_type, "sample_type");
#undef SYM
    rb_define_module_function(mRperf, "_encode", rb_rperf_encode, -1);
    rb_define_module_function(mRperf, "_encode_file", rb_rperf_encode_file, -1);
    rb_define_module_function(mRperf, "_c_export_engine", rb_rperf_c_export_engine, -1);
    rb_define_module_function(mRperf, "_c_exporters", rb_rperf_c_exporters, 0);
    rb_define_module_function(mRperf, "sample_type", rb_rperf_sample_type, -1);
    rb_define_module_function(mRperf, "gzip", rb_rperf_gzip, 1);
    rb_define_module_function(mRperf, "_c_output_check", rb_rperf_c_output_check, 1);
    rb_define_module_function(mRperf, "_c_output_release", rb_rperf_c_output_release, 0);
    rb_define_module_function(mRperf, "_c_write_file", rb_rperf_c_write_file, 2);
}
