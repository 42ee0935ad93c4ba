/* SPDX-License-Identifier: MIT */
/*
 * run.c — running an exporter: option defaults, sample type names, the view
 * invariant check, and the drivers that wire writer, optional gzip and the exporter's
 * encode() together: rperf_export_to_writer() (any writer), and on top of
 * it rperf_export_to_memory() / rperf_export_to_file().
 *
 * Context: any non-signal thread; no Ruby API.
 * See also writer.c, registry.c, rperf_exporter.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rperf_exporter.h"

void
rperf_export_options_init(rperf_export_options_t *o)
{
    o->top_n = 50;
    o->header = 1;
}

const char *
rperf_value_type_name(rperf_value_type_t t)
{
    switch (t) {
    case RPERF_VALUE_TIME: return "time";
    case RPERF_VALUE_ALLOC_OBJECTS: return "alloc_objects";
    case RPERF_VALUE_ALLOC_SPACE: return "alloc_space";
    case RPERF_VALUE_INUSE_OBJECTS: return "inuse_objects";
    case RPERF_VALUE_INUSE_SPACE: return "inuse_space";
    }
    return NULL;
}

const char *
rperf_value_type_unit(rperf_value_type_t t)
{
    switch (t) {
    case RPERF_VALUE_TIME: return "nanoseconds";
    case RPERF_VALUE_ALLOC_OBJECTS:
    case RPERF_VALUE_INUSE_OBJECTS: return "count";
    case RPERF_VALUE_ALLOC_SPACE:
    case RPERF_VALUE_INUSE_SPACE: return "bytes";
    }
    return NULL;
}

static void
set_err(char *errbuf, size_t errlen, const char *msg)
{
    if (errbuf && errlen) {
        snprintf(errbuf, errlen, "%s", msg);
    }
}

int
rperf_view_check(const rperf_profile_view_t *v, char *errbuf, size_t errlen)
{
    char msg[160];
    if (!v) {
        set_err(errbuf, errlen, "no profile view");
        return -EINVAL;
    }
    if ((v->frame_count && !v->frames) || (v->sample_count && !v->samples) ||
        (v->label_set_count && !v->label_sets) || (v->thread_count && !v->threads)) {
        set_err(errbuf, errlen, "profile view: NULL array with a non-zero count");
        return -EINVAL;
    }
    if (v->mode != RPERF_MODE_CPU && v->mode != RPERF_MODE_WALL && v->mode != RPERF_MODE_ALLOC) {
        set_err(errbuf, errlen, "profile view: bad mode");
        return -EINVAL;
    }
    if (!rperf_value_type_name(v->sample_type)) {
        set_err(errbuf, errlen, "profile view: bad sample type");
        return -EINVAL;
    }
    if (v->sample_type == RPERF_VALUE_TIME && v->mode == RPERF_MODE_ALLOC) {
        set_err(errbuf, errlen, "profile view: an alloc-mode view has no time samples");
        return -EINVAL;
    }
    if (v->sample_type == RPERF_VALUE_TIME ? v->alloc_sample_count != 0
                                            : (v->alloc_sample_count && !v->alloc_samples)) {
        set_err(errbuf, errlen, v->sample_type == RPERF_VALUE_TIME
                                    ? "profile view: allocation entries in a time view"
                                    : "profile view: NULL array with a non-zero count");
        return -EINVAL;
    }
    for (size_t i = 0; i < v->alloc_sample_count; i++) {
        const rperf_view_alloc_sample_t *a = &v->alloc_samples[i];
        int any = 0;
        for (int k = 0; k < RPERF_VIEW_ALLOC_VALUES; k++) {
            int inuse = k == RPERF_VIEW_ALLOC_INDEX(RPERF_VALUE_INUSE_OBJECTS) ||
                         k == RPERF_VIEW_ALLOC_INDEX(RPERF_VALUE_INUSE_SPACE);
            if (a->values[k] < 0 && !(inuse && (v->flags & RPERF_VIEW_INUSE_DELTA))) {
                snprintf(msg, sizeof msg,
                         "profile view: allocation entry %zu has a negative value", i);
                set_err(errbuf, errlen, msg);
                return -EINVAL;
            }
            any |= a->values[k] != 0;
        }
        if (!any || (a->depth && !a->frames) ||
            (a->label_set_id && a->label_set_id >= v->label_set_count)) {
            snprintf(msg, sizeof msg, "profile view: allocation entry %zu: %s", i,
                     !any ? "all values are 0"
                          : (a->depth && !a->frames) ? "no frame array" : "label set out of range");
            set_err(errbuf, errlen, msg);
            return -EINVAL;
        }
        for (uint32_t d = 0; d < a->depth; d++) {
            if (a->frames[d] >= v->frame_count) {
                snprintf(msg, sizeof msg,
                         "profile view: allocation entry %zu: frame %u out of range", i,
                         a->frames[d]);
                set_err(errbuf, errlen, msg);
                return -EINVAL;
            }
        }
    }
    if (v->frequency < 0) {
        set_err(errbuf, errlen, "profile view: negative frequency");
        return -EINVAL;
    }
    for (size_t i = 0; i < v->sample_count; i++) {
        const rperf_view_sample_t *s = &v->samples[i];
        if (s->weight <= 0) {
            snprintf(msg, sizeof msg, "profile view: sample %zu has weight %lld <= 0", i,
                     (long long)s->weight);
            set_err(errbuf, errlen, msg);
            return -EINVAL;
        }
        if (s->depth && !s->frames) {
            snprintf(msg, sizeof msg, "profile view: sample %zu has no frame array", i);
            set_err(errbuf, errlen, msg);
            return -EINVAL;
        }
        if (s->label_set_id && s->label_set_id >= v->label_set_count) {
            snprintf(msg, sizeof msg, "profile view: sample %zu: label set %u out of range", i,
                     s->label_set_id);
            set_err(errbuf, errlen, msg);
            return -EINVAL;
        }
        for (uint32_t d = 0; d < s->depth; d++) {
            if (s->frames[d] >= v->frame_count) {
                snprintf(msg, sizeof msg, "profile view: sample %zu: frame %u out of range", i,
                         s->frames[d]);
                set_err(errbuf, errlen, msg);
                return -EINVAL;
            }
        }
    }
    for (size_t i = 0; i < v->label_set_count; i++) {
        if (v->label_sets[i].count && !v->label_sets[i].labels) {
            set_err(errbuf, errlen, "profile view: label set with NULL labels");
            return -EINVAL;
        }
    }
    return 0;
}

static int
finish_error(int rc, rperf_writer_t *w, const rperf_exporter_ops_t *ops, char *errbuf,
             size_t errlen)
{
    if (errbuf && errlen) {
        const char *m = w ? rperf_writer_error(w) : "";
        if (*m)
            snprintf(errbuf, errlen, "%s", m);
        else
            snprintf(errbuf, errlen, "%s: %s", ops ? ops->name : "export", strerror(-rc));
    }
    return rc;
}

int
rperf_export_to_writer(const rperf_exporter_ops_t *ops, const rperf_profile_view_t *view,
                       const rperf_export_options_t *opts, int gzip, rperf_writer_t *sink,
                       char *errbuf, size_t errlen)
{
    if (!ops || !sink)
        return finish_error(-EINVAL, NULL, ops, errbuf, errlen);
    int rc = rperf_view_check(view, errbuf, errlen);
    if (rc)
        return rc;
    if (view->sample_type != RPERF_VALUE_TIME && ops->version < 2) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen,
                     "%s: exporter built for ABI version %u, which has no allocation sample "
                     "types (%s asked)", ops->name, (unsigned)ops->version,
                     rperf_value_type_name(view->sample_type));
        return -ENOTSUP;
    }
    if ((view->flags & RPERF_VIEW_INUSE_DELTA) && !(ops->flags & RPERF_EXPORTER_F_INUSE_DELTA)) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen,
                     "cannot write a delta heap profile (in-use changes, which may be negative); "
                     "use pprof");
        return -ENOTSUP;
    }
    rperf_export_options_t defaults;
    if (!opts) {
        rperf_export_options_init(&defaults);
        opts = &defaults;
    }
    rperf_writer_t *gz = NULL;
    rperf_writer_t *w = sink;
    if (gzip < 0 ? ops->gzip : gzip) {
        if ((rc = rperf_writer_gzip_open(&gz, sink, -1)))
            return finish_error(rc, NULL, ops, errbuf, errlen);
        w = gz;
    }
    rc = ops->encode(view, opts, w);
    if (rc == 0)
        rc = rperf_writer_status(w);
    if (rc == 0 && gz)
        rc = rperf_writer_finish(gz);
    if (rc)
        finish_error(rc, w, ops, errbuf, errlen);
    rperf_writer_free(gz);
    return rc;
}

int
rperf_export_to_memory(const rperf_exporter_ops_t *ops, const rperf_profile_view_t *view,
                       const rperf_export_options_t *opts, int gzip, unsigned char **data,
                       size_t *len, char *errbuf, size_t errlen)
{
    if (!data || !len)
        return finish_error(-EINVAL, NULL, ops, errbuf, errlen);
    rperf_writer_t *w;
    int rc = rperf_writer_memory_open(&w);
    if (rc)
        return finish_error(rc, NULL, ops, errbuf, errlen);
    rc = rperf_export_to_writer(ops, view, opts, gzip, w, errbuf, errlen);
    if (rc == 0) {
        *data = rperf_writer_memory_take(w, len);
        if (!*data)
            rc = finish_error(-ENOMEM, NULL, ops, errbuf, errlen);
    }
    rperf_writer_free(w);
    return rc;
}

int
rperf_export_to_file(const rperf_exporter_ops_t *ops, const rperf_profile_view_t *view,
                     const rperf_export_options_t *opts, int gzip, const char *path,
                     char *errbuf, size_t errlen)
{
    if (!ops || !path)
        return finish_error(-EINVAL, NULL, ops, errbuf, errlen);
    rperf_writer_t *w;
    int rc = rperf_writer_file_open(&w, path);
    if (rc) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "cannot create %s: %s", path, strerror(-rc));
        return rc;
    }
    rc = rperf_export_to_writer(ops, view, opts, gzip, w, errbuf, errlen);
    if (rc == 0 && (rc = rperf_writer_finish(w)))
        finish_error(rc, w, ops, errbuf, errlen);
    rperf_writer_free(w); /* removes the temporary file unless finished */
    return rc;
}
