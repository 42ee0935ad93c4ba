/* SPDX-License-Identifier: MIT */
/*
 * json.c — the JSON exporter: speedscope's file format
 * (https://www.speedscope.app/file-format-schema.json), which speedscope
 * opens directly and validates with its own importer.
 *
 * Context: any non-signal thread; no Ruby API.
 *
 * FORMAT
 *   {"$schema": "https://www.speedscope.app/file-format-schema.json",
 *    "exporter": "rperf@<version>", "name": "rperf <mode> profile",
 *    "activeProfileIndex": 0,
 *    "shared": {"frames": [{"name", "file", "line"?}, …]},   one per view frame
 *    "profiles": [{"type": "sampled", "name": "thread <seq> …",
 *                  "unit": "nanoseconds", "startValue": 0,
 *                  "endValue": <sum of weights>,
 *                  "samples": [[root … leaf frame indices], …],
 *                  "weights": [<ns>, …]}, …]}
 * - One sampled profile per thread_seq, in increasing thread_seq order;
 *   samples keep the view's order. A profile name carries the thread's
 *   name and Ractor when the view knows them ("thread 2 \"worker\" ractor 1").
 * - speedscope's format has no per-sample metadata, so user labels are not
 *   represented (use pprof for labels).
 * - No samples: one empty profile named "empty" (speedscope rejects files
 *   without profiles).
 * - Allocation views: the same shape, with the chosen sample type's values
 *   as weights, unit "bytes" (alloc_space, inuse_space) or "none"
 *   (alloc_objects, inuse_objects: counts), and the name
 *   "rperf <sample type> profile" ("rperf inuse_space profile").
 * - Strings: invalid UTF-8 -> U+FFFD; '"', '\\' and control characters
 *   escaped; an empty frame name becomes "(unknown)".
 * See also exporter_internal.h, docs/exporters.md.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter_internal.h"

typedef struct {
    rperf_writer_t *w;
    rperf__buf_t out, scratch;
    uint32_t *order;
    rperf__threads_t threads;
} json_state_t;

static int
flush_out(json_state_t *st, int force)
{
    return rperf__buf_flush(&st->out, st->w, force ? 0 : RPERF__FLUSH_AT);
}

/* A JSON string literal with quotes. */
static int
put_str(json_state_t *st, const char *p, size_t n)
{
    return rperf__json_str(&st->out, &st->scratch, p, n, 0);
}

static int
cmp_by_thread(const void *a, const void *b, void *ctx)
{
    const rperf_view_sample_t *s = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (s[x].thread_seq != s[y].thread_seq)
        return s[x].thread_seq < s[y].thread_seq ? -1 : 1;
    return (x > y) - (x < y);
}

static int
put_profile_name(json_state_t *st, uint32_t thread_seq)
{
    char head[64];
    const rperf_view_thread_t *t = rperf__threads_find(&st->threads, thread_seq);
    rperf__buf_t name = {0};
    int rc;
    snprintf(head, sizeof head, "thread %u", thread_seq);
    if ((rc = rperf__buf_append(&name, head, strlen(head))))
        goto out;
    if (thread_seq == 0 && (rc = rperf__buf_append(&name, " (unknown)", 10)))
        goto out;
    if (t && t->name.len) {
        if ((rc = rperf__buf_append(&name, " \"", 2)) ||
            (rc = rperf__buf_append(&name, t->name.ptr, t->name.len)) ||
            (rc = rperf__buf_append(&name, "\"", 1)))
            goto out;
    }
    if (t && t->ractor_id) {
        snprintf(head, sizeof head, " ractor %u", t->ractor_id);
        if ((rc = rperf__buf_append(&name, head, strlen(head))))
            goto out;
    }
    rc = put_str(st, (const char *)name.data, name.len);
out:
    rperf__buf_free(&name);
    return rc;
}

static int
json_run(json_state_t *st, const rperf_profile_view_t *v)
{
    int rc;
    const char *unit = v->sample_type == RPERF_VALUE_TIME ? "\"nanoseconds\""
                       : v->sample_type == RPERF_VALUE_ALLOC_SPACE ||
                               v->sample_type == RPERF_VALUE_INUSE_SPACE
                           ? "\"bytes\""
                           : "\"none\"";
    if ((rc = rperf__buf_put_cstr(&st->out, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
                          "\"exporter\":")))
        return rc;
    {
        rperf__buf_t ex = {0};
        if ((rc = rperf__buf_append(&ex, "rperf@", 6)) ||
            (rc = rperf__buf_append(&ex, v->rperf_version.ptr, v->rperf_version.len)) ||
            (rc = put_str(st, (const char *)ex.data, ex.len))) {
            rperf__buf_free(&ex);
            return rc;
        }
        rperf__buf_free(&ex);
    }
    if ((rc = rperf__buf_put_cstr(&st->out, ",\"name\":\"rperf ")) ||
        (rc = rperf__buf_put_cstr(&st->out, v->sample_type != RPERF_VALUE_TIME
                                                ? rperf_value_type_name(v->sample_type)
                                            : v->mode == RPERF_MODE_WALL ? "wall" : "cpu")) ||
        (rc = rperf__buf_put_cstr(&st->out, " profile\"")) ||
        (rc = rperf__buf_put_cstr(&st->out, ",\"activeProfileIndex\":0,\"shared\":{\"frames\":[")))
        return rc;
    for (size_t i = 0; i < v->frame_count; i++) {
        const rperf_view_frame_t *f = &v->frames[i];
        if ((rc = rperf__buf_put_cstr(&st->out, i ? ",{\"name\":" : "{\"name\":")))
            return rc;
        rc = f->name.len ? put_str(st, f->name.ptr, f->name.len) : rperf__buf_put_cstr(&st->out, "\"(unknown)\"");
        if (rc || (rc = rperf__buf_put_cstr(&st->out, ",\"file\":")) || (rc = put_str(st, f->file.ptr, f->file.len)))
            return rc;
        if (f->line > 0 &&
            ((rc = rperf__buf_put_cstr(&st->out, ",\"line\":")) || (rc = rperf__buf_put_u64(&st->out, (uint64_t)f->line))))
            return rc;
        if ((rc = rperf__buf_put_cstr(&st->out, "}")) || (rc = flush_out(st, 0)))
            return rc;
    }
    if ((rc = rperf__buf_put_cstr(&st->out, "]},\"profiles\":[")))
        return rc;

    if (v->sample_count == 0) {
        if ((rc = rperf__buf_put_cstr(&st->out,
                                      "{\"type\":\"sampled\",\"name\":\"empty\",\"unit\":")) ||
            (rc = rperf__buf_put_cstr(&st->out, unit)) ||
            (rc = rperf__buf_put_cstr(&st->out, ",\"startValue\":0,\"endValue\":0,"
                                                "\"samples\":[],\"weights\":[]}")))
            return rc;
    } else {
        st->order = malloc(v->sample_count * sizeof *st->order);
        if (!st->order)
            return -ENOMEM;
        for (size_t i = 0; i < v->sample_count; i++)
            st->order[i] = (uint32_t)i;
        /* qsort_r: GNU extension (not C11), reentrant comparator context. */
        qsort_r(st->order, v->sample_count, sizeof *st->order, cmp_by_thread,
                (void *)(uintptr_t)v->samples);
        size_t i = 0;
        int first_profile = 1;
        while (i < v->sample_count) {
            uint32_t seq = v->samples[st->order[i]].thread_seq;
            size_t j = i;
            int64_t total = 0;
            while (j < v->sample_count && v->samples[st->order[j]].thread_seq == seq)
                total += v->samples[st->order[j++]].weight;
            if ((rc = rperf__buf_put_cstr(&st->out, first_profile ? "{\"type\":\"sampled\",\"name\":"
                                                : ",{\"type\":\"sampled\",\"name\":")) ||
                (rc = put_profile_name(st, seq)) ||
                (rc = rperf__buf_put_cstr(&st->out, ",\"unit\":")) ||
                (rc = rperf__buf_put_cstr(&st->out, unit)) ||
                (rc = rperf__buf_put_cstr(&st->out, ",\"startValue\":0,\"endValue\":")) ||
                (rc = rperf__buf_put_u64(&st->out, (uint64_t)total)) || (rc = rperf__buf_put_cstr(&st->out, ",\"samples\":[")))
                return rc;
            first_profile = 0;
            for (size_t k = i; k < j; k++) {
                const rperf_view_sample_t *s = &v->samples[st->order[k]];
                if ((rc = rperf__buf_put_cstr(&st->out, k > i ? ",[" : "[")))
                    return rc;
                for (uint32_t d = s->depth; d-- > 0;) {
                    if ((d + 1 < s->depth && (rc = rperf__buf_append(&st->out, ",", 1))) ||
                        (rc = rperf__buf_put_u64(&st->out, s->frames[d])))
                        return rc;
                }
                if ((rc = rperf__buf_append(&st->out, "]", 1)) || (rc = flush_out(st, 0)))
                    return rc;
            }
            if ((rc = rperf__buf_put_cstr(&st->out, "],\"weights\":[")))
                return rc;
            for (size_t k = i; k < j; k++) {
                if ((k > i && (rc = rperf__buf_append(&st->out, ",", 1))) ||
                    (rc = rperf__buf_put_u64(&st->out, (uint64_t)v->samples[st->order[k]].weight)) ||
                    (rc = flush_out(st, 0)))
                    return rc;
            }
            if ((rc = rperf__buf_put_cstr(&st->out, "]}")))
                return rc;
            i = j;
        }
    }
    if ((rc = rperf__buf_put_cstr(&st->out, "]}\n")))
        return rc;
    return flush_out(st, 1);
}

static int
json_encode(const rperf_profile_view_t *v, const rperf_export_options_t *opts, rperf_writer_t *w)
{
    (void)opts;
    json_state_t st;
    memset(&st, 0, sizeof st);
    st.w = w;
    int rc = rperf__threads_index(&st.threads, v);
    if (rc == 0)
        rc = json_run(&st, v);
    rperf__encode_result(w, "json", rc);
    rperf__buf_free(&st.out);
    rperf__buf_free(&st.scratch);
    rperf__threads_free(&st.threads);
    free(st.order);
    return rc;
}

const rperf_exporter_ops_t rperf_exporter_json = {
    .version = RPERF_EXPORTER_ABI_VERSION,
    .name = "json",
    .suffix = ".json",
    .description = "speedscope JSON (one sampled profile per thread)",
    .gzip = 0,
    .encode = json_encode,
    .flags = RPERF_EXPORTER_F_TEXT,
};
