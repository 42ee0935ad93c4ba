/* SPDX-License-Identifier: MIT */
/*
 * pprof.c — the pprof exporter: a hand-encoded perftools.profiles.Profile
 * protobuf (gzip-compressed when written to a file).
 *
 * Context: any non-signal thread; no Ruby API.
 *
 * FORMAT (field numbers of profile.proto; written in this order, so the
 * first byte is 0x0a)
 *   1  sample_type   time view: one ValueType {"cpu"|"wall", "nanoseconds"};
 *                    allocation view (a heap profile as Go writes it):
 *                    alloc_objects/count, alloc_space/bytes,
 *                    inuse_objects/count, inuse_space/bytes
 *   2  sample        one per distinct (stack, thread_seq, label set):
 *                    location_id (packed, leaf first), value (packed:
 *                    [weight_ns], or the four allocation values, from
 *                    view->alloc_samples, so entries whose chosen value is
 *                    0 are kept), labels: {thread_seq: num} when > 0,
 *                    {ractor: num} when the view knows the thread's Ractor,
 *                    then one {key: str} per label of the sample's label
 *                    set (in an allocation view it holds the object's
 *                    `class`), except the reserved key "pid" with a decimal
 *                    integer value, written {key: num} (the rperf command's
 *                    per-process label, docs/cli.md)
 *   4  location      one per view frame: id = frame index + 1, one Line
 *                    {function_id = id, line = frame line when known}
 *   5  function      one per view frame: id, name, filename, start_line
 *   6  string_table  "" first; each (sanitised) string once
 *   9/10             time_nanos / duration_nanos when the view has them
 *   11/12            time: period_type (= sample type), period = 1e9 /
 *                    frequency; allocation: period_type space/bytes,
 *                    period = the mean bytes between two sampled
 *                    allocations, estimated as alloc_interval x
 *                    (alloc_space / alloc_objects) (Go's MemProfileRate is
 *                    the same quantity); alloc_interval when no bytes are
 *                    known; absent when the interval is unknown
 *   13 comment       "rperf <version>", "mode: <m>", "frequency: <f>Hz"
 *                    (cpu and wall runs), "sampling count: <n>" (cpu and
 *                    wall runs, when the view has it: the samples taken,
 *                    which the distinct stacks written do not tell;
 *                    Rperf::Report and ruby/merge.c read it back),
 *                    "allocation interval: <n>" (when known), "ruby:
 *                    <description>" (when known)
 *   14 default_sample_type  allocation views: the chosen type's name
 *
 * INVARIANTS
 * - Every string goes through rperf__utf8_sanitize() before interning, so
 *   the table never holds invalid UTF-8 and never holds duplicates.
 * - Ids are never 0; every referenced id exists (one location and one
 *   function per view frame, the view is checked before encode()).
 * - Samples with equal (frames, thread_seq, label_set_id) are merged, in
 *   first-seen order, so the output is deterministic for a given view.
 * See also exporter_internal.h (tables), docs/exporters.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter_internal.h"

typedef struct {
    rperf__buf_t out;            /* staging buffer, flushed to the writer */
    rperf_writer_t *w;
    rperf__buf_t scratch;        /* UTF-8 sanitising */
    rperf__strmap_t strings;
    uint32_t *fn_name, *fn_file; /* per view frame */
    uint32_t *label_kv;          /* per label: key id, value id (unused when numeric) */
    int64_t *label_num;          /* per label: the value of a numeric label */
    unsigned char *label_is_num; /* per label: written as Label.num */
    size_t *set_first;           /* per label set: first index in label_kv / 2 */
    rperf__seqmap_t stacks;      /* key: thread_seq, label_set_id, frames…; sum: weight */
    const int64_t *vals;         /* per stack id: nvals values (time: stacks.sum) */
    int64_t *alloc_vals;         /* allocation views: the four sums per stack id */
    size_t alloc_cap;            /* stack ids alloc_vals has room for */
    int nvals;
    rperf__buf_t key;            /* scratch key */
    rperf__threads_t threads;
} pprof_state_t;

/* ---- protobuf primitives (into the staging buffer; capacity reserved by callers) ---- */

static inline size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline void
put_varint(rperf__buf_t *b, uint64_t v)
{
    unsigned char *p = b->data + b->len;
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    b->len = (size_t)(p - b->data);
}

/* Tag for field `f` with wire type `wt` (0 varint, 2 length-delimited). */
static inline void
put_tag(rperf__buf_t *b, uint32_t f, uint32_t wt)
{
    put_varint(b, ((uint64_t)f << 3) | wt);
}

static inline size_t
field_varint_size(uint32_t f, uint64_t v)
{
    return varint_size((uint64_t)f << 3) + varint_size(v);
}

static inline void
put_field_varint(rperf__buf_t *b, uint32_t f, uint64_t v)
{
    put_tag(b, f, 0);
    put_varint(b, v);
}

/* Reserve room for one message of `n` bytes plus its tag and length. */
static int
reserve(pprof_state_t *st, size_t n)
{
    int rc = rperf__buf_flush(&st->out, st->w, RPERF__FLUSH_AT);
    if (rc)
        return rc;
    return rperf__buf_reserve(&st->out, n + 32);
}

/* ---- strings ---- */

static int
intern(pprof_state_t *st, const char *p, size_t n, uint32_t *id)
{
    size_t len;
    const char *s = rperf__utf8_sanitize(p, n, &st->scratch, &len);
    if (!s)
        return -ENOMEM;
    return rperf__strmap_intern(&st->strings, s, len, id, NULL);
}

static int
intern_cstr(pprof_state_t *st, const char *s, uint32_t *id)
{
    return intern(st, s, strlen(s), id);
}

/* The one label key whose value, when it is a decimal integer, is written
 * as a numeric label (Label.num) instead of a string: the process id the
 * rperf command gives every sample when it merges a run's processes. */
#define NUM_LABEL_KEY "pid"

/* Is (key, value) a numeric label? Only the canonical decimal form of an
 * int64 qualifies ("-12", "0", "4711"; not "007", "+1", "1e3", ""), so
 * the value reads back as the same string. */
static int
num_label(rperf_str_t key, rperf_str_t value, int64_t *num)
{
    if (key.len != sizeof NUM_LABEL_KEY - 1 || memcmp(key.ptr, NUM_LABEL_KEY, key.len) != 0)
        return 0;
    const char *p = value.ptr, *end = value.ptr + value.len;
    int neg = p < end && *p == '-';
    p += neg;
    if (p == end || (*p == '0' && (end - p > 1 || neg)))
        return 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (limit - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *num = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* Body size of label `at`: {1: key, 2: str} or {1: key, 3: num}. */
static size_t
label_size(const pprof_state_t *st, size_t at)
{
    return field_varint_size(1, st->label_kv[2 * at]) +
           (st->label_is_num[at] ? field_varint_size(3, (uint64_t)st->label_num[at])
                                 : field_varint_size(2, st->label_kv[2 * at + 1]));
}

/* ---- encoding steps ---- */

/* ValueType message body {1: type, 2: unit}. */
static int
put_value_type(pprof_state_t *st, uint32_t field, uint32_t type, uint32_t unit)
{
    size_t body = field_varint_size(1, type) + field_varint_size(2, unit);
    int rc = reserve(st, body);
    if (rc)
        return rc;
    put_tag(&st->out, field, 2);
    put_varint(&st->out, body);
    put_field_varint(&st->out, 1, type);
    put_field_varint(&st->out, 2, unit);
    return 0;
}

/* Allocation view: one stack per distinct (thread, label set, frames) of
 * view->alloc_samples, with the four values summed. */
static int
merge_alloc_samples(pprof_state_t *st, const rperf_profile_view_t *v)
{
    size_t items = 0;
    for (size_t i = 0; i < v->alloc_sample_count; i++)
        items += (size_t)v->alloc_samples[i].depth + 2;
    int rc = rperf__seqmap_init(&st->stacks, v->alloc_sample_count, items);
    if (rc)
        return rc;
    for (size_t i = 0; i < v->alloc_sample_count; i++) {
        const rperf_view_alloc_sample_t *a = &v->alloc_samples[i];
        uint32_t *key = rperf__buf_u32s(&st->key, (size_t)a->depth + 2);
        if (!key)
            return -ENOMEM;
        key[0] = a->thread_seq;
        key[1] = a->label_set_id;
        if (a->depth)
            memcpy(key + 2, a->frames, (size_t)a->depth * sizeof *a->frames);
        uint32_t id;
        int is_new;
        if ((rc = rperf__seqmap_intern(&st->stacks, key, a->depth + 2, &id, &is_new)))
            return rc;
        if (id >= st->alloc_cap) {
            size_t cap = st->alloc_cap ? st->alloc_cap * 2 : 64;
            while (cap <= id)
                cap *= 2;
            int64_t *nv = realloc(st->alloc_vals, cap * RPERF_VIEW_ALLOC_VALUES * sizeof *nv);
            if (!nv)
                return -ENOMEM;
            st->alloc_vals = nv;
            st->alloc_cap = cap;
        }
        int64_t *sum = st->alloc_vals + (size_t)id * RPERF_VIEW_ALLOC_VALUES;
        for (int k = 0; k < RPERF_VIEW_ALLOC_VALUES; k++)
            sum[k] = (is_new ? 0 : sum[k]) + a->values[k];
    }
    st->vals = st->alloc_vals;
    st->nvals = RPERF_VIEW_ALLOC_VALUES;
    return 0;
}

static int
merge_samples(pprof_state_t *st, const rperf_profile_view_t *v)
{
    if (v->sample_type != RPERF_VALUE_TIME)
        return merge_alloc_samples(st, v);
    size_t items = 0;
    for (size_t i = 0; i < v->sample_count; i++)
        items += (size_t)v->samples[i].depth + 2;
    int rc = rperf__seqmap_init(&st->stacks, v->sample_count, items);
    if (rc)
        return rc;
    for (size_t i = 0; i < v->sample_count; i++) {
        const rperf_view_sample_t *s = &v->samples[i];
        uint32_t *key = rperf__buf_u32s(&st->key, (size_t)s->depth + 2);
        if (!key)
            return -ENOMEM;
        key[0] = s->thread_seq;
        key[1] = s->label_set_id;
        if (s->depth)
            memcpy(key + 2, s->frames, (size_t)s->depth * sizeof *s->frames);
        if ((rc = rperf__seqmap_add(&st->stacks, key, s->depth + 2, s->weight, NULL)))
            return rc;
    }
    st->vals = st->stacks.sum;
    st->nvals = 1;
    return 0;
}

static int
put_samples(pprof_state_t *st, const rperf_profile_view_t *v, uint32_t s_thread_seq,
            uint32_t s_ractor)
{
    for (uint32_t id = 0; id < rperf__seqmap_count(&st->stacks); id++) {
        uint32_t klen;
        const uint32_t *key = rperf__seqmap_get(&st->stacks, id, &klen);
        uint32_t thread_seq = key[0], set = key[1];
        const uint32_t *frames = key + 2;
        uint32_t depth = klen - 2;
        const int64_t *values = st->vals + (size_t)id * (size_t)st->nvals;

        size_t locs = 0;
        for (uint32_t d = 0; d < depth; d++)
            locs += varint_size((uint64_t)frames[d] + 1);
        size_t body = 0;
        if (depth)
            body += 1 + varint_size(locs) + locs;
        size_t vals = 0;
        for (int k = 0; k < st->nvals; k++)
            vals += varint_size((uint64_t)values[k]);
        body += 1 + varint_size(vals) + vals;

        size_t lab_thread = 0, lab_ractor = 0;
        uint32_t ractor = 0;
        if (thread_seq) {
            lab_thread = field_varint_size(1, s_thread_seq) + field_varint_size(3, thread_seq);
            body += 1 + varint_size(lab_thread) + lab_thread;
            const rperf_view_thread_t *t = rperf__threads_find(&st->threads, thread_seq);
            if (t && t->ractor_id) {
                ractor = t->ractor_id;
                lab_ractor = field_varint_size(1, s_ractor) + field_varint_size(3, ractor);
                body += 1 + varint_size(lab_ractor) + lab_ractor;
            }
        }
        uint32_t nlabels = 0;
        size_t first = 0;
        if (set && set < v->label_set_count) {
            nlabels = v->label_sets[set].count;
            first = st->set_first[set];
            for (uint32_t l = 0; l < nlabels; l++) {
                size_t lb = label_size(st, first + l);
                body += 1 + varint_size(lb) + lb;
            }
        }

        int rc = reserve(st, body);
        if (rc)
            return rc;
        rperf__buf_t *b = &st->out;
        put_tag(b, 2, 2);
        put_varint(b, body);
        if (depth) {
            put_tag(b, 1, 2);
            put_varint(b, locs);
            for (uint32_t d = 0; d < depth; d++)
                put_varint(b, (uint64_t)frames[d] + 1);
        }
        put_tag(b, 2, 2);
        put_varint(b, vals);
        for (int k = 0; k < st->nvals; k++)
            put_varint(b, (uint64_t)values[k]);
        if (thread_seq) {
            put_tag(b, 3, 2);
            put_varint(b, lab_thread);
            put_field_varint(b, 1, s_thread_seq);
            put_field_varint(b, 3, thread_seq);
            if (ractor) {
                put_tag(b, 3, 2);
                put_varint(b, lab_ractor);
                put_field_varint(b, 1, s_ractor);
                put_field_varint(b, 3, ractor);
            }
        }
        for (size_t at = first; at < first + nlabels; at++) {
            put_tag(b, 3, 2);
            put_varint(b, label_size(st, at));
            put_field_varint(b, 1, st->label_kv[2 * at]);
            if (st->label_is_num[at])
                put_field_varint(b, 3, (uint64_t)st->label_num[at]);
            else
                put_field_varint(b, 2, st->label_kv[2 * at + 1]);
        }
    }
    return 0;
}

static int
put_locations_and_functions(pprof_state_t *st, const rperf_profile_view_t *v)
{
    int rc;
    for (size_t i = 0; i < v->frame_count; i++) {
        uint64_t id = (uint64_t)i + 1;
        int32_t line = v->frames[i].line;
        size_t ln = field_varint_size(1, id) + (line > 0 ? field_varint_size(2, (uint64_t)line) : 0);
        size_t body = field_varint_size(1, id) + 1 + varint_size(ln) + ln;
        if ((rc = reserve(st, body)))
            return rc;
        put_tag(&st->out, 4, 2);
        put_varint(&st->out, body);
        put_field_varint(&st->out, 1, id);
        put_tag(&st->out, 4, 2);
        put_varint(&st->out, ln);
        put_field_varint(&st->out, 1, id);
        if (line > 0)
            put_field_varint(&st->out, 2, (uint64_t)line);
    }
    for (size_t i = 0; i < v->frame_count; i++) {
        uint64_t id = (uint64_t)i + 1;
        int32_t line = v->frames[i].line;
        size_t body = field_varint_size(1, id) + field_varint_size(2, st->fn_name[i]) +
                      field_varint_size(4, st->fn_file[i]) +
                      (line > 0 ? field_varint_size(5, (uint64_t)line) : 0);
        if ((rc = reserve(st, body)))
            return rc;
        put_tag(&st->out, 5, 2);
        put_varint(&st->out, body);
        put_field_varint(&st->out, 1, id);
        put_field_varint(&st->out, 2, st->fn_name[i]);
        put_field_varint(&st->out, 4, st->fn_file[i]);
        if (line > 0)
            put_field_varint(&st->out, 5, (uint64_t)line);
    }
    return 0;
}

static int
put_string_table(pprof_state_t *st)
{
    for (uint32_t id = 0; id < st->strings.count; id++) {
        size_t n;
        const char *s = rperf__strmap_get(&st->strings, id, &n);
        int rc = reserve(st, n);
        if (rc)
            return rc;
        put_tag(&st->out, 6, 2);
        put_varint(&st->out, n);
        if (n)
            memcpy(st->out.data + st->out.len, s, n);
        st->out.len += n;
    }
    return 0;
}

/* An allocation profile's period: the mean bytes allocated between two
 * sampled allocations, interval x (alloc_space / alloc_objects) over the
 * whole view (Go's heap profiles give MemProfileRate, the same quantity),
 * or the interval itself when no bytes are known. */
static int64_t
alloc_period(const rperf_profile_view_t *v, int64_t interval)
{
    const int io = RPERF_VIEW_ALLOC_INDEX(RPERF_VALUE_ALLOC_OBJECTS),
              ib = RPERF_VIEW_ALLOC_INDEX(RPERF_VALUE_ALLOC_SPACE);
    double objects = 0, bytes = 0;
    for (size_t i = 0; i < v->alloc_sample_count; i++) {
        objects += (double)v->alloc_samples[i].values[io];
        bytes += (double)v->alloc_samples[i].values[ib];
    }
    if (objects <= 0 || bytes <= 0)
        return interval;
    double p = (double)interval * bytes / objects + 0.5;
    return p >= 9.2e18 ? INT64_MAX : (int64_t)p;
}

static int
pprof_encode_state(pprof_state_t *st, const rperf_profile_view_t *v)
{
    int rc;
    int alloc = v->sample_type != RPERF_VALUE_TIME;
    /* Sample types: [type, unit] string ids; the period type is the last pair. */
    uint32_t s_empty, s_thread_seq, s_ractor, types[RPERF_VIEW_ALLOC_VALUES + 1][2], s_default = 0;
    int ntypes = alloc ? RPERF_VIEW_ALLOC_VALUES : 1;
    if ((rc = rperf__strmap_init(&st->strings, v->frame_count * 2 + 64, 0)) ||
        (rc = intern_cstr(st, "", &s_empty)) ||
        (rc = intern_cstr(st, "thread_seq", &s_thread_seq)) ||
        (rc = intern_cstr(st, "ractor", &s_ractor)))
        return rc;
    if (alloc) {
        for (int k = 0; k < RPERF_VIEW_ALLOC_VALUES; k++) {
            rperf_value_type_t t = (rperf_value_type_t)(k + 1);
            if ((rc = intern_cstr(st, rperf_value_type_name(t), &types[k][0])) ||
                (rc = intern_cstr(st, rperf_value_type_unit(t), &types[k][1])))
                return rc;
        }
        s_default = types[RPERF_VIEW_ALLOC_INDEX(v->sample_type)][0];
        if ((rc = intern_cstr(st, "space", &types[ntypes][0])) ||
            (rc = intern_cstr(st, "bytes", &types[ntypes][1])))
            return rc;
    } else {
        if ((rc = intern_cstr(st, v->mode == RPERF_MODE_WALL ? "wall" : "cpu", &types[0][0])) ||
            (rc = intern_cstr(st, "nanoseconds", &types[0][1])))
            return rc;
        types[1][0] = types[0][0];
        types[1][1] = types[0][1];
    }

    /* Functions: one per view frame. */
    if (v->frame_count) {
        st->fn_name = malloc(v->frame_count * sizeof *st->fn_name);
        st->fn_file = malloc(v->frame_count * sizeof *st->fn_file);
        if (!st->fn_name || !st->fn_file)
            return -ENOMEM;
    }
    for (size_t i = 0; i < v->frame_count; i++) {
        const rperf_view_frame_t *f = &v->frames[i];
        if ((rc = intern(st, f->name.ptr, f->name.len, &st->fn_name[i])) ||
            (rc = intern(st, f->file.ptr, f->file.len, &st->fn_file[i])))
            return rc;
    }

    /* Label sets: key/value string ids, flattened. */
    size_t nlabels = 0;
    for (size_t i = 0; i < v->label_set_count; i++)
        nlabels += v->label_sets[i].count;
    if (v->label_set_count) {
        st->set_first = malloc(v->label_set_count * sizeof *st->set_first);
        st->label_kv = malloc((nlabels ? nlabels : 1) * 2 * sizeof *st->label_kv);
        st->label_num = malloc((nlabels ? nlabels : 1) * sizeof *st->label_num);
        st->label_is_num = malloc(nlabels ? nlabels : 1);
        if (!st->set_first || !st->label_kv || !st->label_num || !st->label_is_num)
            return -ENOMEM;
    }
    size_t at = 0;
    for (size_t i = 0; i < v->label_set_count; i++) {
        st->set_first[i] = at;
        for (uint32_t l = 0; l < v->label_sets[i].count; l++, at++) {
            const rperf_view_label_t *lb = &v->label_sets[i].labels[l];
            st->label_is_num[at] = (unsigned char)num_label(lb->key, lb->value, &st->label_num[at]);
            st->label_kv[2 * at + 1] = 0;
            if ((rc = intern(st, lb->key.ptr, lb->key.len, &st->label_kv[2 * at])) ||
                (!st->label_is_num[at] &&
                 (rc = intern(st, lb->value.ptr, lb->value.len, &st->label_kv[2 * at + 1]))))
                return rc;
        }
    }

    /* Comments. */
    char line[512];
    uint32_t comments[6];
    int ncomments = 0;
    snprintf(line, sizeof line, "rperf %.*s", (int)(v->rperf_version.len > 64 ? 64 : v->rperf_version.len),
             v->rperf_version.len ? v->rperf_version.ptr : "");
    if ((rc = intern_cstr(st, v->rperf_version.len ? line : "rperf", &comments[ncomments++])))
        return rc;
    if ((rc = intern_cstr(st, v->mode == RPERF_MODE_WALL    ? "mode: wall"
                              : v->mode == RPERF_MODE_ALLOC ? "mode: alloc"
                                                            : "mode: cpu",
                          &comments[ncomments++])))
        return rc;
    if (v->mode != RPERF_MODE_ALLOC) {
        snprintf(line, sizeof line, "frequency: %dHz", (int)v->frequency);
        if ((rc = intern_cstr(st, line, &comments[ncomments++])))
            return rc;
        if (v->flags & RPERF_VIEW_HAS_SAMPLING_COUNT) {
            snprintf(line, sizeof line, "sampling count: %lld", (long long)v->sampling_count);
            if ((rc = intern_cstr(st, line, &comments[ncomments++])))
                return rc;
        }
    }
    int64_t interval = (v->flags & RPERF_VIEW_HAS_ALLOC_INTERVAL) ? v->alloc_interval : 0;
    if (alloc && interval > 0) {
        snprintf(line, sizeof line, "allocation interval: %lld", (long long)interval);
        if ((rc = intern_cstr(st, line, &comments[ncomments++])))
            return rc;
    }
    if (v->ruby_description.len) {
        rperf__buf_t tmp = {0};
        if ((rc = rperf__buf_append(&tmp, "ruby: ", 6)) ||
            (rc = rperf__buf_append(&tmp, v->ruby_description.ptr, v->ruby_description.len)) ||
            (rc = intern(st, (const char *)tmp.data, tmp.len, &comments[ncomments++]))) {
            rperf__buf_free(&tmp);
            return rc;
        }
        rperf__buf_free(&tmp);
    }

    if ((rc = rperf__threads_index(&st->threads, v)) || (rc = merge_samples(st, v)))
        return rc;

    /* Emit, in field order. */
    for (int k = 0; k < ntypes; k++)
        if ((rc = put_value_type(st, 1, types[k][0], types[k][1])))
            return rc;
    if ((rc = put_samples(st, v, s_thread_seq, s_ractor)) ||
        (rc = put_locations_and_functions(st, v)) || (rc = put_string_table(st)))
        return rc;
    if ((rc = reserve(st, 128)))
        return rc;
    if (v->flags & RPERF_VIEW_HAS_START_TIME)
        put_field_varint(&st->out, 9, (uint64_t)v->start_time_ns);
    if (v->flags & RPERF_VIEW_HAS_DURATION)
        put_field_varint(&st->out, 10, (uint64_t)v->duration_ns);
    if ((rc = put_value_type(st, 11, types[ntypes][0], types[ntypes][1])))
        return rc;
    if ((rc = reserve(st, 128)))
        return rc;
    if (!alloc && v->frequency > 0)
        put_field_varint(&st->out, 12, (uint64_t)(1000000000 / v->frequency));
    if (alloc && interval > 0)
        put_field_varint(&st->out, 12, (uint64_t)alloc_period(v, interval));
    size_t cbody = 0;
    for (int i = 0; i < ncomments; i++)
        cbody += varint_size(comments[i]);
    put_tag(&st->out, 13, 2);
    put_varint(&st->out, cbody);
    for (int i = 0; i < ncomments; i++)
        put_varint(&st->out, comments[i]);
    if (alloc)
        put_field_varint(&st->out, 14, s_default);
    return rperf__buf_flush(&st->out, st->w, 0);
}

static int
pprof_encode(const rperf_profile_view_t *v, const rperf_export_options_t *opts, rperf_writer_t *w)
{
    (void)opts;
    pprof_state_t st;
    memset(&st, 0, sizeof st);
    st.w = w;
    int rc = rperf__encode_result(w, "pprof", pprof_encode_state(&st, v));
    rperf__buf_free(&st.out);
    rperf__buf_free(&st.scratch);
    rperf__strmap_free(&st.strings);
    rperf__seqmap_free(&st.stacks);
    free(st.alloc_vals);
    rperf__threads_free(&st.threads);
    free(st.fn_name);
    free(st.fn_file);
    free(st.label_kv);
    free(st.label_num);
    free(st.label_is_num);
    free(st.set_first);
    rperf__buf_free(&st.key);
    return rc;
}

const rperf_exporter_ops_t rperf_exporter_pprof = {
    .version = RPERF_EXPORTER_ABI_VERSION,
    .name = "pprof",
    .suffix = ".pb.gz",
    .description = "pprof protobuf (gzip-compressed in files); go tool pprof, speedscope",
    .gzip = 1,
    .encode = pprof_encode,
    .flags = RPERF_EXPORTER_F_INUSE_DELTA,
};
