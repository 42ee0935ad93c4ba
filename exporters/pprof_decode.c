/* SPDX-License-Identifier: MIT */
/*
 * pprof_decode.c — the pprof reader: a perftools.profiles.Profile protobuf
 * (gzip-compressed or not, as written by exporters/pprof.c or by Go's
 * profile package) decoded into the checked, index-resolved rperf_pprof_t
 * of rperf_pprof_decode.h. What `rperf report` and `rperf diff` read.
 *
 * Context: any non-signal thread; no Ruby API; no global state.
 *
 * DESIGN — hostile input is an error message, never a crash
 * - The input is copied (or inflated, with zlib, up to RPERF_PPROF_MAX_BYTES)
 *   into one buffer the profile owns; every string of the result points
 *   into it. Every read is bounds-checked against the end of the enclosing
 *   message: a varint longer than 10 bytes or over 64 bits, a length past
 *   the end, a group or unknown wire type, a known field with the wrong
 *   wire type is -EINVAL with the byte offset in the message.
 * - Two passes over the top-level message: the first collects the string
 *   table (field 6, which encoders write last) and checks the framing of
 *   every field; the second decodes the messages, resolving string indices
 *   at once (out of range -> error). Location and function ids are resolved
 *   at the end through sorted id tables (duplicate or missing id -> error),
 *   so their order in the file does not matter.
 * - Repeated scalars are accepted packed and unpacked (proto3 readers must).
 *   Unknown fields are skipped, as protobuf requires.
 * - Every array grows through one overflow-checked helper. The expanded
 *   frame count (what a reader materialises) is capped by
 *   RPERF_PPROF_MAX_FRAMES, so a small file cannot ask for a huge result.
 * - Checks mirror Go's profile package: string_table[0] must be "", each
 *   sample has one value per sample type, line function id 0 = no function.
 * See also exporters/pprof.c (the encoder), tests/unit/test_pprof_decode.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "rperf_pprof_decode.h"

/* ---- growable arrays ---------------------------------------------------- */

typedef struct {
    void *data;
    size_t len, cap;
} vec_t;

/* Room for one more element of `size` bytes (zeroed); NULL on overflow or
 * allocation failure. */
static void *
vec_push(vec_t *v, size_t size)
{
    if (v->len == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 16;
        if (nc < v->cap || nc > SIZE_MAX / size)
            return NULL;
        void *n = realloc(v->data, nc * size);
        if (!n)
            return NULL;
        v->data = n;
        v->cap = nc;
    }
    void *at = (char *)v->data + v->len * size;
    memset(at, 0, size);
    v->len++;
    return at;
}

#define VEC_AT(v, T, i) (((T *)(v).data)[i])

/* ---- decoder state -------------------------------------------------------- */

/* What a sample holds until ids are resolved: offsets into the flat arrays. */
typedef struct {
    size_t loc_off, nloc, val_off, nval, lab_off, nlab;
} raw_sample_t;

typedef struct {
    size_t line_off, nlines;
} raw_location_t;

typedef struct {
    uint64_t id;
    uint32_t index;
} id_entry_t;

typedef struct {
    rperf_pprof_t pub;
    unsigned char *bytes;        /* the (decompressed) protobuf */
    size_t nbytes;
    vec_t strings;               /* rperf_str_t */
    vec_t types;                 /* rperf_pprof_value_type_t */
    vec_t raw_samples;           /* raw_sample_t */
    vec_t loc_ids;               /* uint64_t, all samples back to back */
    vec_t values;                /* int64_t */
    vec_t labels;                /* rperf_pprof_label_t */
    vec_t locations;             /* rperf_pprof_location_t */
    vec_t raw_locations;         /* raw_location_t */
    vec_t lines;                 /* rperf_pprof_line_t */
    vec_t line_fn_ids;           /* uint64_t, parallel to lines */
    vec_t functions;             /* rperf_pprof_function_t */
    vec_t comments;              /* rperf_str_t */
    rperf_pprof_sample_t *samples;
    uint32_t *loc_index;         /* resolved loc_ids */
} owned_t;

typedef struct {
    owned_t *o;
    char *err;
    size_t errlen;
} dec_t;

/* A message being read: [p, end) inside o->bytes. */
typedef struct {
    const unsigned char *p, *end;
} rd_t;

/* A field just read: its number, wire type and value (varint / fixed) or
 * its bytes (length-delimited). */
typedef struct {
    uint32_t num, wt;
    uint64_t v;
    rd_t sub;
    size_t at;       /* offset of the field's tag */
} fld_t;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
fail(dec_t *d, int rc, const char *fmt, ...)
{
    if (d->err && d->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err, d->errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static size_t
off(const dec_t *d, const unsigned char *p)
{
    return (size_t)(p - d->o->bytes);
}

static int
nomem(dec_t *d)
{
    return fail(d, -ENOMEM, "out of memory");
}

/* ---- protobuf primitives ---------------------------------------------------- */

static int
rd_varint(dec_t *d, rd_t *r, uint64_t *out)
{
    const unsigned char *start = r->p;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end)
            return fail(d, -EINVAL, "truncated varint at offset %zu", off(d, start));
        unsigned char b = *r->p++;
        if (i == 9 && b > 1)
            return fail(d, -EINVAL, "varint over 64 bits at offset %zu", off(d, start));
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return fail(d, -EINVAL, "varint over 64 bits at offset %zu", off(d, start)); /* not reached */
}

static int
rd_field(dec_t *d, rd_t *r, fld_t *f)
{
    uint64_t key;
    int rc;
    f->at = off(d, r->p);
    if ((rc = rd_varint(d, r, &key)))
        return rc;
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return fail(d, -EINVAL, "invalid field number %" PRIu64 " at offset %zu", key >> 3, f->at);
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    size_t left;
    switch (f->wt) {
    case 0:
        return rd_varint(d, r, &f->v);
    case 1:
    case 5: {
        size_t n = f->wt == 1 ? 8 : 4;
        if ((size_t)(r->end - r->p) < n)
            return fail(d, -EINVAL, "truncated fixed%zu field %u at offset %zu", n * 8, f->num,
                        f->at);
        f->v = 0;
        for (size_t i = 0; i < n; i++)
            f->v |= (uint64_t)r->p[i] << (8 * i);
        r->p += n;
        return 0;
    }
    case 2:
        if ((rc = rd_varint(d, r, &f->v)))
            return rc;
        left = (size_t)(r->end - r->p);
        if (f->v > left)
            return fail(d, -EINVAL,
                        "field %u at offset %zu: length %" PRIu64 " exceeds the %zu bytes left",
                        f->num, f->at, f->v, left);
        f->sub.p = r->p;
        f->sub.end = r->p + f->v;
        r->p += f->v;
        return 0;
    default:
        return fail(d, -EINVAL, "field %u at offset %zu: unsupported wire type %u", f->num, f->at,
                    f->wt);
    }
}

static int
want(dec_t *d, const fld_t *f, uint32_t wt, const char *what)
{
    if (f->wt == wt)
        return 0;
    return fail(d, -EINVAL, "%s at offset %zu: wire type %u, expected %u", what, f->at, f->wt, wt);
}

/* A repeated varint field, packed (wire type 2) or not (0): each value is
 * appended to `out` (uint64_t). */
static int
rd_repeated(dec_t *d, const fld_t *f, vec_t *out, const char *what)
{
    if (f->wt == 0) {
        uint64_t *slot = vec_push(out, sizeof *slot);
        if (!slot)
            return nomem(d);
        *slot = f->v;
        return 0;
    }
    if (f->wt != 2)
        return want(d, f, 0, what);
    rd_t r = f->sub;
    while (r.p < r.end) {
        uint64_t v;
        int rc = rd_varint(d, &r, &v);
        if (rc)
            return rc;
        uint64_t *slot = vec_push(out, sizeof *slot);
        if (!slot)
            return nomem(d);
        *slot = v;
    }
    return 0;
}

static int
str_at(dec_t *d, const fld_t *f, rperf_str_t *s, const char *what)
{
    int rc = want(d, f, 0, what);
    if (rc)
        return rc;
    if (f->v >= d->o->strings.len)
        return fail(d, -EINVAL, "%s at offset %zu: string index %" PRIu64
                    " out of range (%zu strings)", what, f->at, f->v, d->o->strings.len);
    *s = VEC_AT(d->o->strings, rperf_str_t, f->v);
    return 0;
}

static int
int_at(dec_t *d, const fld_t *f, int64_t *v, const char *what)
{
    int rc = want(d, f, 0, what);
    if (!rc)
        *v = (int64_t)f->v;
    return rc;
}

/* ---- messages ------------------------------------------------------------------ */

static int
rd_value_type(dec_t *d, rd_t r, rperf_pprof_value_type_t *vt)
{
    fld_t f;
    int rc;
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            return rc;
        if (f.num == 1 && (rc = str_at(d, &f, &vt->type, "ValueType.type")))
            return rc;
        if (f.num == 2 && (rc = str_at(d, &f, &vt->unit, "ValueType.unit")))
            return rc;
    }
    return 0;
}

static int
rd_label(dec_t *d, rd_t r)
{
    owned_t *o = d->o;
    rperf_pprof_label_t *l = vec_push(&o->labels, sizeof *l);
    if (!l)
        return nomem(d);
    fld_t f;
    int rc, has_num = 0;
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            return rc;
        switch (f.num) {
        case 1: rc = str_at(d, &f, &l->key, "Label.key"); break;
        case 2: rc = str_at(d, &f, &l->str, "Label.str"); break;
        case 3: rc = int_at(d, &f, &l->num, "Label.num"); has_num = 1; break;
        case 4: rc = str_at(d, &f, &l->num_unit, "Label.num_unit"); break;
        default: break;
        }
        if (rc)
            return rc;
    }
    l->is_num = has_num && l->str.len == 0;
    return 0;
}

static int
rd_sample(dec_t *d, rd_t r)
{
    owned_t *o = d->o;
    raw_sample_t s = {o->loc_ids.len, 0, o->values.len, 0, o->labels.len, 0};
    fld_t f;
    int rc;
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            return rc;
        switch (f.num) {
        case 1: rc = rd_repeated(d, &f, &o->loc_ids, "Sample.location_id"); break;
        case 2: rc = rd_repeated(d, &f, &o->values, "Sample.value"); break;
        case 3: rc = want(d, &f, 2, "Sample.label") ? -EINVAL : rd_label(d, f.sub); break;
        default: break;
        }
        if (rc)
            return rc;
    }
    s.nloc = o->loc_ids.len - s.loc_off;
    s.nval = o->values.len - s.val_off;
    s.nlab = o->labels.len - s.lab_off;
    if (s.nloc > UINT32_MAX || s.nlab > UINT32_MAX)
        return fail(d, -EFBIG, "sample with more than 2^32 locations or labels");
    raw_sample_t *slot = vec_push(&o->raw_samples, sizeof *slot);
    if (!slot)
        return nomem(d);
    *slot = s;
    return 0;
}

static int
rd_line(dec_t *d, rd_t r)
{
    owned_t *o = d->o;
    rperf_pprof_line_t *l = vec_push(&o->lines, sizeof *l);
    uint64_t *fid = vec_push(&o->line_fn_ids, sizeof *fid);
    if (!l || !fid)
        return nomem(d);
    fld_t f;
    int rc;
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            return rc;
        if (f.num == 1 && (rc = want(d, &f, 0, "Line.function_id")))
            return rc;
        if (f.num == 1)
            *fid = f.v;
        if (f.num == 2 && (rc = int_at(d, &f, &l->line, "Line.line")))
            return rc;
    }
    return 0;
}

static int
rd_location(dec_t *d, rd_t r)
{
    owned_t *o = d->o;
    rperf_pprof_location_t *loc = vec_push(&o->locations, sizeof *loc);
    raw_location_t *raw = vec_push(&o->raw_locations, sizeof *raw);
    if (!loc || !raw)
        return nomem(d);
    raw->line_off = o->lines.len;
    fld_t f;
    int rc;
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            return rc;
        switch (f.num) {
        case 1: rc = want(d, &f, 0, "Location.id"); loc->id = f.v; break;
        case 3: rc = want(d, &f, 0, "Location.address"); loc->address = f.v; break;
        case 4: rc = want(d, &f, 2, "Location.line") ? -EINVAL : rd_line(d, f.sub); break;
        default: break;
        }
        if (rc)
            return rc;
    }
    raw->nlines = o->lines.len - raw->line_off;
    if (raw->nlines > UINT32_MAX)
        return fail(d, -EFBIG, "location with more than 2^32 lines");
    return 0;
}

static int
rd_function(dec_t *d, rd_t r)
{
    rperf_pprof_function_t *fn = vec_push(&d->o->functions, sizeof *fn);
    if (!fn)
        return nomem(d);
    fld_t f;
    int rc;
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            return rc;
        switch (f.num) {
        case 1: rc = want(d, &f, 0, "Function.id"); fn->id = f.v; break;
        case 2: rc = str_at(d, &f, &fn->name, "Function.name"); break;
        case 3: rc = str_at(d, &f, &fn->system_name, "Function.system_name"); break;
        case 4: rc = str_at(d, &f, &fn->filename, "Function.filename"); break;
        case 5: rc = int_at(d, &f, &fn->start_line, "Function.start_line"); break;
        default: break;
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- the two passes ------------------------------------------------------------ */

static int
pass_strings(dec_t *d)
{
    owned_t *o = d->o;
    rd_t r = {o->bytes, o->bytes + o->nbytes};
    fld_t f;
    int rc;
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            return rc;
        if (f.num != 6)
            continue;
        if ((rc = want(d, &f, 2, "Profile.string_table")))
            return rc;
        rperf_str_t *s = vec_push(&o->strings, sizeof *s);
        if (!s)
            return nomem(d);
        s->ptr = (const char *)f.sub.p;
        s->len = (size_t)(f.sub.end - f.sub.p);
    }
    if (o->strings.len == 0)
        return fail(d, -EINVAL, "no string table");
    if (VEC_AT(o->strings, rperf_str_t, 0).len != 0)
        return fail(d, -EINVAL, "string_table[0] is not empty");
    return 0;
}

static int
pass_messages(dec_t *d)
{
    owned_t *o = d->o;
    rperf_pprof_t *p = &o->pub;
    rd_t r = {o->bytes, o->bytes + o->nbytes};
    fld_t f;
    int rc;
    vec_t comment_ids = {0};
    while (r.p < r.end) {
        if ((rc = rd_field(d, &r, &f)))
            goto out;
        rc = 0;
        switch (f.num) {
        case 1: {
            rperf_pprof_value_type_t *vt = vec_push(&o->types, sizeof *vt);
            if (!vt)
                rc = nomem(d);
            else if (!(rc = want(d, &f, 2, "Profile.sample_type")))
                rc = rd_value_type(d, f.sub, vt);
            break;
        }
        case 2: rc = want(d, &f, 2, "Profile.sample") ? -EINVAL : rd_sample(d, f.sub); break;
        case 3: rc = want(d, &f, 2, "Profile.mapping"); break;
        case 4: rc = want(d, &f, 2, "Profile.location") ? -EINVAL : rd_location(d, f.sub); break;
        case 5: rc = want(d, &f, 2, "Profile.function") ? -EINVAL : rd_function(d, f.sub); break;
        case 9: rc = int_at(d, &f, &p->time_nanos, "Profile.time_nanos"); break;
        case 10: rc = int_at(d, &f, &p->duration_nanos, "Profile.duration_nanos"); break;
        case 11:
            if (!(rc = want(d, &f, 2, "Profile.period_type")))
                rc = rd_value_type(d, f.sub, &p->period_type);
            break;
        case 12: rc = int_at(d, &f, &p->period, "Profile.period"); break;
        case 13: rc = rd_repeated(d, &f, &comment_ids, "Profile.comment"); break;
        case 14: rc = str_at(d, &f, &p->default_sample_type, "Profile.default_sample_type"); break;
        default: break; /* 6 (read in pass 1), 7, 8 (drop/keep frames) and unknown fields */
        }
        if (rc)
            goto out;
    }
    for (size_t i = 0; i < comment_ids.len; i++) {
        uint64_t id = VEC_AT(comment_ids, uint64_t, i);
        if (id >= o->strings.len) {
            rc = fail(d, -EINVAL, "Profile.comment: string index %" PRIu64
                      " out of range (%zu strings)", id, o->strings.len);
            goto out;
        }
        rperf_str_t *s = vec_push(&o->comments, sizeof *s);
        if (!s) {
            rc = nomem(d);
            goto out;
        }
        *s = VEC_AT(o->strings, rperf_str_t, id);
    }
    rc = 0;
out:
    free(comment_ids.data);
    return rc;
}

/* ---- id resolution ------------------------------------------------------------- */

static int
cmp_id(const void *a, const void *b)
{
    const id_entry_t *x = a, *y = b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* A table sorted by id; duplicate ids -> error naming `what`. */
static int
id_table(dec_t *d, size_t n, const void *base, size_t stride, id_entry_t **out, const char *what)
{
    *out = malloc((n ? n : 1) * sizeof **out);
    if (!*out)
        return nomem(d);
    for (size_t i = 0; i < n; i++) {
        (*out)[i].id = *(const uint64_t *)(const void *)((const char *)base + i * stride);
        (*out)[i].index = (uint32_t)i;
    }
    qsort(*out, n, sizeof **out, cmp_id);
    for (size_t i = 1; i < n; i++)
        if ((*out)[i].id == (*out)[i - 1].id)
            return fail(d, -EINVAL, "duplicate %s id %" PRIu64, what, (*out)[i].id);
    return 0;
}

static uint32_t
id_find(const id_entry_t *t, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && t[lo].id == id ? t[lo].index : RPERF_PPROF_NONE;
}

static int
resolve(dec_t *d)
{
    owned_t *o = d->o;
    rperf_pprof_t *p = &o->pub;
    id_entry_t *fns = NULL, *locs = NULL;
    int rc;
    if (o->functions.len >= RPERF_PPROF_NONE || o->locations.len >= RPERF_PPROF_NONE)
        return fail(d, -EFBIG, "too many functions or locations");
    if ((rc = id_table(d, o->functions.len, o->functions.data, sizeof(rperf_pprof_function_t),
                       &fns, "function")) ||
        (rc = id_table(d, o->locations.len, o->locations.data, sizeof(rperf_pprof_location_t),
                       &locs, "location")))
        goto out;

    rperf_pprof_line_t *lines = o->lines.data;
    for (size_t i = 0; i < o->lines.len; i++) {
        uint64_t fid = VEC_AT(o->line_fn_ids, uint64_t, i);
        lines[i].function = fid ? id_find(fns, o->functions.len, fid) : RPERF_PPROF_NONE;
        if (fid && lines[i].function == RPERF_PPROF_NONE) {
            rc = fail(d, -EINVAL, "a location's line refers to function id %" PRIu64
                      ", which does not exist", fid);
            goto out;
        }
    }
    rperf_pprof_location_t *loc = o->locations.data;
    for (size_t i = 0; i < o->locations.len; i++) {
        raw_location_t *raw = &VEC_AT(o->raw_locations, raw_location_t, i);
        loc[i].lines = raw->nlines ? lines + raw->line_off : NULL;
        loc[i].nlines = (uint32_t)raw->nlines;
    }

    size_t nloc_ids = o->loc_ids.len;
    o->loc_index = malloc((nloc_ids ? nloc_ids : 1) * sizeof *o->loc_index);
    o->samples = calloc(o->raw_samples.len ? o->raw_samples.len : 1, sizeof *o->samples);
    if (!o->loc_index || !o->samples) {
        rc = nomem(d);
        goto out;
    }
    size_t frames = 0;
    for (size_t i = 0; i < o->raw_samples.len; i++) {
        const raw_sample_t *raw = &VEC_AT(o->raw_samples, raw_sample_t, i);
        if (raw->nval != o->types.len) {
            rc = fail(d, -EINVAL, "sample %zu has %zu values, expected %zu (one per sample type)",
                      i, raw->nval, o->types.len);
            goto out;
        }
        for (size_t k = 0; k < raw->nloc; k++) {
            uint64_t id = VEC_AT(o->loc_ids, uint64_t, raw->loc_off + k);
            uint32_t li = id_find(locs, o->locations.len, id);
            if (li == RPERF_PPROF_NONE) {
                rc = fail(d, -EINVAL, "sample %zu refers to location id %" PRIu64
                          ", which does not exist", i, id);
                goto out;
            }
            o->loc_index[raw->loc_off + k] = li;
            frames += loc[li].nlines ? loc[li].nlines : 1;
            if (frames > RPERF_PPROF_MAX_FRAMES) {
                rc = fail(d, -EFBIG, "profile too large: more than %zu frames in its samples",
                          (size_t)RPERF_PPROF_MAX_FRAMES);
                goto out;
            }
        }
        rperf_pprof_sample_t *s = &o->samples[i];
        s->locations = raw->nloc ? o->loc_index + raw->loc_off : NULL;
        s->nlocations = (uint32_t)raw->nloc;
        s->values = raw->nval ? (const int64_t *)o->values.data + raw->val_off : NULL;
        s->labels = raw->nlab ? (const rperf_pprof_label_t *)o->labels.data + raw->lab_off : NULL;
        s->nlabels = (uint32_t)raw->nlab;
    }
    p->sample_types = o->types.data;
    p->nsample_types = o->types.len;
    p->samples = o->samples;
    p->nsamples = o->raw_samples.len;
    p->locations = o->locations.data;
    p->nlocations = o->locations.len;
    p->functions = o->functions.data;
    p->nfunctions = o->functions.len;
    p->comments = o->comments.data;
    p->ncomments = o->comments.len;
    p->frame_count = frames;
    rc = 0;
out:
    free(fns);
    free(locs);
    return rc;
}

/* ---- input ------------------------------------------------------------------------ */

static int
gunzip(dec_t *d, const unsigned char *in, size_t len)
{
    owned_t *o = d->o;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        return nomem(d);
    size_t cap = len < (1u << 20) ? (1u << 20) : len * 4;
    if (cap > RPERF_PPROF_MAX_BYTES)
        cap = RPERF_PPROF_MAX_BYTES;
    unsigned char *out = malloc(cap);
    size_t have = 0, fed = 0;
    int rc = 0;
    if (!out) {
        inflateEnd(&zs);
        return nomem(d);
    }
    for (;;) {
        if (zs.avail_in == 0 && fed < len) {
            size_t n = len - fed > (1u << 30) ? (1u << 30) : len - fed;
            zs.next_in = (unsigned char *)(uintptr_t)(in + fed);
            zs.avail_in = (uInt)n;
            fed += n;
        }
        if (have == cap) {
            if (cap >= RPERF_PPROF_MAX_BYTES) {
                rc = fail(d, -EFBIG, "decompressed profile larger than %zu MiB",
                          (size_t)RPERF_PPROF_MAX_BYTES >> 20);
                break;
            }
            size_t nc = cap * 2 > RPERF_PPROF_MAX_BYTES ? RPERF_PPROF_MAX_BYTES : cap * 2;
            unsigned char *n = realloc(out, nc);
            if (!n) {
                rc = nomem(d);
                break;
            }
            out = n;
            cap = nc;
        }
        size_t room = cap - have > (1u << 30) ? (1u << 30) : cap - have;
        zs.next_out = out + have;
        zs.avail_out = (uInt)room;
        int z = inflate(&zs, Z_NO_FLUSH);
        have += room - zs.avail_out;
        if (z == Z_STREAM_END)
            break;
        if (z == Z_DATA_ERROR || z == Z_NEED_DICT) {
            rc = fail(d, -EINVAL, "corrupt gzip data (%s)", zs.msg ? zs.msg : "invalid stream");
            break;
        }
        if (z == Z_MEM_ERROR) {
            rc = nomem(d);
            break;
        }
        /* Z_OK or Z_BUF_ERROR: no progress possible without more input. */
        if (zs.avail_in == 0 && fed == len && zs.avail_out > 0) {
            rc = fail(d, -EINVAL, "truncated gzip data");
            break;
        }
    }
    inflateEnd(&zs);
    if (rc) {
        free(out);
        return rc;
    }
    o->bytes = out;
    o->nbytes = have;
    return 0;
}

static int
load(dec_t *d, const unsigned char *in, size_t len)
{
    if (len >= 2 && in[0] == 0x1f && in[1] == 0x8b)
        return gunzip(d, in, len);
    if (len > RPERF_PPROF_MAX_BYTES)
        return fail(d, -EFBIG, "profile larger than %zu MiB", (size_t)RPERF_PPROF_MAX_BYTES >> 20);
    d->o->bytes = malloc(len ? len : 1);
    if (!d->o->bytes)
        return nomem(d);
    if (len)
        memcpy(d->o->bytes, in, len);
    d->o->nbytes = len;
    return 0;
}

void
rperf_pprof_free(rperf_pprof_t *p)
{
    if (!p)
        return;
    owned_t *o = (owned_t *)(void *)p; /* pub is the first member */
    free(o->bytes);
    vec_t *vecs[] = {&o->strings, &o->types, &o->raw_samples, &o->loc_ids, &o->values,
                     &o->labels, &o->locations, &o->raw_locations, &o->lines, &o->line_fn_ids,
                     &o->functions, &o->comments};
    for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++)
        free(vecs[i]->data);
    free(o->samples);
    free(o->loc_index);
    free(o);
}

int
rperf_pprof_decode(const void *data, size_t len, rperf_pprof_t **out, char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        errbuf[0] = '\0';
    owned_t *o = calloc(1, sizeof *o);
    dec_t d = {o, errbuf, errlen};
    if (!o)
        return fail(&d, -ENOMEM, "out of memory");
    if (!data && len)
        len = 0;
    int rc;
    if ((rc = load(&d, data, len)) || (rc = pass_strings(&d)) || (rc = pass_messages(&d)) ||
        (rc = resolve(&d))) {
        rperf_pprof_free(&o->pub);
        return rc;
    }
    *out = &o->pub;
    return 0;
}
