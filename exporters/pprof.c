/* SPDX-License-Identifier: MIT */
/*
 * pprof.c — the pprof exporter: a hand-encoded perftools.profiles.Profile
 * protobuf (gzip-compressed when written to a file).
 *
 * Context: any non-signal thread; no Ruby API.
 *
 * FORMAT (field numbers of profile.proto; written in this order, so the
 * first byte is 0x0a)
 *   1  sample_type   one ValueType {"cpu"|"wall", "nanoseconds"}
 *   2  sample        one per distinct (stack, thread_seq, label set):
 *                    location_id (packed, leaf first), value (packed,
 *                    [weight_ns]), labels: {thread_seq: num} when > 0,
 *                    {ractor: num} when the view knows the thread's Ractor,
 *                    then one {key: str} per user label, except the
                    reserved key "pid" with a decimal integer value,
                    written {key: num} (the rperf command's per-process
                    label, docs/cli.md)
 *   4  location      one per view frame: id = frame index + 1, one Line
 *                    {function_id = id, line = frame line when known}
 *   5  function      one per view frame: id, name, filename, start_line
 *   6  string_table  "" first; each (sanitised) string once
 *   9/10             time_nanos / duration_nanos when the view has them
 *   11/12            period_type (= sample type), period = 1e9 / frequency
 *   13 comment       "rperf <version>", "mode: <m>", "frequency: <f>Hz",
 *                    "ruby: <description>" (when known)
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

static int
merge_samples(pprof_state_t *st, const rperf_profile_view_t *v)
{
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
        int64_t weight = st->stacks.sum[id];

        size_t locs = 0;
        for (uint32_t d = 0; d < depth; d++)
            locs += varint_size((uint64_t)frames[d] + 1);
        size_t body = 0;
        if (depth)
            body += 1 + varint_size(locs) + locs;
        size_t vals = varint_size((uint64_t)weight);
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
        put_varint(b, (uint64_t)weight);
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

static int
pprof_encode_state(pprof_state_t *st, const rperf_profile_view_t *v)
{
    int rc;
    uint32_t s_empty, s_thread_seq, s_ractor, s_type, s_unit;
    if ((rc = rperf__strmap_init(&st->strings, v->frame_count * 2 + 64, 0)) ||
        (rc = intern_cstr(st, "", &s_empty)) ||
        (rc = intern_cstr(st, "thread_seq", &s_thread_seq)) ||
        (rc = intern_cstr(st, "ractor", &s_ractor)) ||
        (rc = intern_cstr(st, v->mode == RPERF_MODE_WALL ? "wall" : "cpu", &s_type)) ||
        (rc = intern_cstr(st, "nanoseconds", &s_unit)))
        return rc;

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
    uint32_t comments[4];
    int ncomments = 0;
    snprintf(line, sizeof line, "rperf %.*s", (int)(v->rperf_version.len > 64 ? 64 : v->rperf_version.len),
             v->rperf_version.len ? v->rperf_version.ptr : "");
    if ((rc = intern_cstr(st, v->rperf_version.len ? line : "rperf", &comments[ncomments++])))
        return rc;
    if ((rc = intern_cstr(st, v->mode == RPERF_MODE_WALL ? "mode: wall" : "mode: cpu",
                          &comments[ncomments++])))
        return rc;
    snprintf(line, sizeof line, "frequency: %dHz", (int)v->frequency);
    if ((rc = intern_cstr(st, line, &comments[ncomments++])))
        return rc;
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
    if ((rc = put_value_type(st, 1, s_type, s_unit)) ||
        (rc = put_samples(st, v, s_thread_seq, s_ractor)) ||
        (rc = put_locations_and_functions(st, v)) || (rc = put_string_table(st)))
        return rc;
    if ((rc = reserve(st, 128)))
        return rc;
    if (v->flags & RPERF_VIEW_HAS_START_TIME)
        put_field_varint(&st->out, 9, (uint64_t)v->start_time_ns);
    if (v->flags & RPERF_VIEW_HAS_DURATION)
        put_field_varint(&st->out, 10, (uint64_t)v->duration_ns);
    if ((rc = put_value_type(st, 11, s_type, s_unit)))
        return rc;
    if ((rc = reserve(st, 128)))
        return rc;
    if (v->frequency > 0)
        put_field_varint(&st->out, 12, (uint64_t)(1000000000 / v->frequency));
    size_t cbody = 0;
    for (int i = 0; i < ncomments; i++)
        cbody += varint_size(comments[i]);
    put_tag(&st->out, 13, 2);
    put_varint(&st->out, cbody);
    for (int i = 0; i < ncomments; i++)
        put_varint(&st->out, comments[i]);
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
};
