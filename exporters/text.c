/* SPDX-License-Identifier: MIT */
/*
 * text.c — the human-readable report: flat and cumulative tables.
 *
 * Context: any non-signal thread; no Ruby API.
 *
 * FORMAT (rperf 0.6 behaviour §8.3, with its ms rounding defect fixed)
 *   Total: 3.5ms (cpu)                       <- header, unless opts->header == 0
 *   Samples: 3, Frequency: 100Hz
 *   <empty line>
 *    Flat:
 *     <ms, 14 wide> ms <pct, 5 wide>%  <label> (<path>)
 *   <empty line>
 *    Cumulative:
 *     …
 * - A row is a distinct (label, path) pair. Flat = weight of samples whose
 *   leaf is that frame; cumulative = weight of samples containing it (once
 *   per sample, however often it recurses). Sorted by weight descending,
 *   ties by label then path (bytewise); at most opts->top_n rows.
 * - Milliseconds: rounded half-up to one decimal as ONE number (1,990,000 ns
 *   -> "2.0", not rperf 0.6's "1.0"), with ',' thousands separators in rows
 *   and none in the header. Percentages: one decimal, half-up.
 * - Samples: the view's sampling_count when present, else the number of
 *   sample entries. No samples: "No samples recorded.\n".
 * - Labels and paths: invalid UTF-8 -> U+FFFD, control bytes -> \xNN, an
 *   empty label -> "(unknown)"; " (path)" is omitted when the path is empty.
 * ALLOCATION VIEWS (view->sample_type other than time) count objects or
 * bytes instead of time:
 *   Total: 1.5 MiB (inuse_space)             <- or "Total: 1234 objects (alloc_objects)"
 *   Sampled: 123 allocations, 45 live, interval 1024   <- "Samples: <entries>"
 *                                               when the counts are unknown; no
 *                                               interval when it is unknown
 *   <empty line>
 *    Flat:
 *     <value, 14 wide> <unit, 3 wide> <pct, 5 wide>%  <label> (<path>)
 * - objects: the count with ',' thousands separators, unit "obj";
 *   bytes: in the binary unit that fits each value (B, KiB, MiB, GiB, …),
 *   one decimal (none for B), rounded half up.
 * See also exporter_internal.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter_internal.h"

typedef struct {
    rperf__strmap_t strs;      /* escaped labels and paths */
    rperf__seqmap_t rows;      /* [label id, path id] -> row */
    uint32_t *frame_row;       /* view frame -> row */
    int64_t *flat, *cum;
    size_t *stamp;             /* row -> last sample index + 1 that counted it */
    uint32_t *order;
    rperf__buf_t scratch, esc;
} text_state_t;

static int
intern_text(text_state_t *st, rperf_str_t s, const char *if_empty, uint32_t *id)
{
    int rc = rperf__text_clean(&st->esc, &st->scratch, s, 0, if_empty);
    if (rc)
        return rc;
    return rperf__strmap_intern(&st->strs, st->esc.len ? (const char *)st->esc.data : "",
                                st->esc.len, id, NULL);
}

/* ns -> tenths of a millisecond, rounded half up. */
static uint64_t
ms_tenths(int64_t ns)
{
    uint64_t u = ns > 0 ? (uint64_t)ns : 0;
    return u / 100000 + (u % 100000 >= 50000);
}

static void
fmt_ms(char *buf, size_t len, int64_t ns, int thousands)
{
    uint64_t t = ms_tenths(ns);
    char ip[32];
    if (thousands)
        rperf__fmt_thousands(ip, t / 10);
    else
        snprintf(ip, sizeof ip, "%" PRIu64, t / 10);
    snprintf(buf, len, "%s.%u", ip, (unsigned)(t % 10));
}

static void
fmt_pct(char *buf, size_t len, int64_t w, int64_t total)
{
    uint64_t t;
    if (total <= 0) {
        t = 0;
    } else if ((uint64_t)w <= UINT64_MAX / 2000) {
        /* round(w * 1000 / total), half up, in integers */
        t = ((uint64_t)w * 2000 + (uint64_t)total) / (2 * (uint64_t)total);
    } else {
        t = (uint64_t)((double)w * 1000.0 / (double)total + 0.5);
    }
    snprintf(buf, len, "%" PRIu64 ".%u", t / 10, (unsigned)(t % 10));
}

/* An allocation value as "<number>" and "<unit>" (see ALLOCATION VIEWS). */
static void
fmt_alloc(char *num, size_t numlen, const char **unit, rperf_value_type_t type, int64_t v,
          int thousands)
{
    uint64_t u = v > 0 ? (uint64_t)v : 0;
    if (type == RPERF_VALUE_ALLOC_OBJECTS || type == RPERF_VALUE_INUSE_OBJECTS) {
        *unit = "obj";
        if (thousands)
            rperf__fmt_thousands(num, u);
        else
            snprintf(num, numlen, "%" PRIu64, u);
        return;
    }
    uint64_t t;
    *unit = rperf__bytes_unit(u, &t);
    if (strcmp(*unit, "B") == 0)
        snprintf(num, numlen, "%" PRIu64, t / 10);
    else
        snprintf(num, numlen, "%" PRIu64 ".%u", t / 10, (unsigned)(t % 10));
}

typedef struct {
    const text_state_t *st;
    const int64_t *weight;
} sort_ctx_t;

/* qsort_r comparator (GNU extension, not C11; reentrant context). */
static int
cmp_rows(const void *a, const void *b, void *ctx)
{
    const sort_ctx_t *c = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (c->weight[x] != c->weight[y])
        return c->weight[x] > c->weight[y] ? -1 : 1;
    uint32_t lx, ly;
    const uint32_t *kx = rperf__seqmap_get(&c->st->rows, x, &lx);
    const uint32_t *ky = rperf__seqmap_get(&c->st->rows, y, &ly);
    for (int i = 0; i < 2; i++) {
        size_t nx, ny;
        const char *px = rperf__strmap_get(&c->st->strs, kx[i], &nx);
        const char *py = rperf__strmap_get(&c->st->strs, ky[i], &ny);
        int r = memcmp(px, py, nx < ny ? nx : ny);
        if (r)
            return r;
        if (nx != ny)
            return nx < ny ? -1 : 1;
    }
    return (x > y) - (x < y);
}

static int
put_table(text_state_t *st, const rperf_profile_view_t *v, rperf_writer_t *w, const char *title,
          const int64_t *weight, int64_t total, int32_t top_n)
{
    int rc = rperf_writer_puts(w, title);
    if (rc)
        return rc;
    size_t n = 0;
    for (uint32_t r = 0; r < rperf__seqmap_count(&st->rows); r++)
        if (weight[r] > 0)
            st->order[n++] = r;
    sort_ctx_t ctx = {st, weight};
    qsort_r(st->order, n, sizeof *st->order, cmp_rows, &ctx);
    if (top_n >= 0 && n > (size_t)top_n)
        n = (size_t)top_n;
    for (size_t i = 0; i < n; i++) {
        uint32_t r = st->order[i], klen;
        const uint32_t *k = rperf__seqmap_get(&st->rows, r, &klen);
        size_t ln, pn;
        const char *label = rperf__strmap_get(&st->strs, k[0], &ln);
        const char *path = rperf__strmap_get(&st->strs, k[1], &pn);
        char val[48], pct[32];
        const char *unit = "ms";
        if (v->sample_type == RPERF_VALUE_TIME)
            fmt_ms(val, sizeof val, weight[r], 1);
        else
            fmt_alloc(val, sizeof val, &unit, v->sample_type, weight[r], 1);
        fmt_pct(pct, sizeof pct, weight[r], total);
        if (v->sample_type == RPERF_VALUE_TIME && pn)
            rc = rperf_writer_printf(w, "  %14s ms %5s%%  %.*s (%.*s)\n", val, pct, (int)ln, label,
                                     (int)pn, path);
        else if (v->sample_type == RPERF_VALUE_TIME)
            rc = rperf_writer_printf(w, "  %14s ms %5s%%  %.*s\n", val, pct, (int)ln, label);
        else if (pn)
            rc = rperf_writer_printf(w, "  %14s %-3s %5s%%  %.*s (%.*s)\n", val, unit, pct, (int)ln,
                                     label, (int)pn, path);
        else
            rc = rperf_writer_printf(w, "  %14s %-3s %5s%%  %.*s\n", val, unit, pct, (int)ln,
                                     label);
        if (rc)
            return rc;
    }
    return 0;
}

static int
text_run(text_state_t *st, const rperf_profile_view_t *v, const rperf_export_options_t *o,
         rperf_writer_t *w)
{
    int rc;
    if (v->sample_count == 0)
        return rperf_writer_puts(w, "No samples recorded.\n");
    if ((rc = rperf__strmap_init(&st->strs, v->frame_count * 2, 0)) ||
        (rc = rperf__seqmap_init(&st->rows, v->frame_count, v->frame_count * 2)))
        return rc;
    st->frame_row = malloc((v->frame_count + 1) * sizeof *st->frame_row);
    if (!st->frame_row)
        return -ENOMEM;
    for (size_t i = 0; i < v->frame_count; i++) {
        uint32_t key[2];
        if ((rc = intern_text(st, v->frames[i].name, "(unknown)", &key[0])) ||
            (rc = intern_text(st, v->frames[i].file, NULL, &key[1])) ||
            (rc = rperf__seqmap_intern(&st->rows, key, 2, &st->frame_row[i], NULL)))
            return rc;
    }
    size_t nrows = rperf__seqmap_count(&st->rows) + 1;
    st->flat = calloc(nrows, sizeof *st->flat);
    st->cum = calloc(nrows, sizeof *st->cum);
    st->stamp = calloc(nrows, sizeof *st->stamp);
    st->order = malloc(nrows * sizeof *st->order);
    if (!st->flat || !st->cum || !st->stamp || !st->order)
        return -ENOMEM;
    int64_t total = 0;
    for (size_t i = 0; i < v->sample_count; i++) {
        const rperf_view_sample_t *s = &v->samples[i];
        total += s->weight;
        if (s->depth == 0)
            continue;
        st->flat[st->frame_row[s->frames[0]]] += s->weight;
        for (uint32_t d = 0; d < s->depth; d++) {
            uint32_t r = st->frame_row[s->frames[d]];
            if (st->stamp[r] != i + 1) {
                st->stamp[r] = i + 1;
                st->cum[r] += s->weight;
            }
        }
    }
    if (o->header && v->sample_type != RPERF_VALUE_TIME) {
        char val[48];
        const char *unit;
        fmt_alloc(val, sizeof val, &unit, v->sample_type, total, 0);
        if ((rc = rperf_writer_printf(w, "Total: %s %s (%s)\n", val,
                                      strcmp(unit, "obj") == 0 ? "objects" : unit,
                                      rperf_value_type_name(v->sample_type))))
            return rc;
        if (v->flags & RPERF_VIEW_HAS_ALLOC_COUNTS)
            rc = rperf_writer_printf(w, "Sampled: %" PRId64 " allocations, %" PRId64 " live",
                                     v->alloc_sampled, v->alloc_live);
        else
            rc = rperf_writer_printf(w, "Samples: %zu", v->sample_count);
        if (!rc && (v->flags & RPERF_VIEW_HAS_ALLOC_INTERVAL))
            rc = rperf_writer_printf(w, ", interval %" PRId64, v->alloc_interval);
        if (rc || (rc = rperf_writer_puts(w, "\n\n")))
            return rc;
    } else if (o->header) {
        char ms[48];
        fmt_ms(ms, sizeof ms, total, 0);
        int64_t nsamples = (v->flags & RPERF_VIEW_HAS_SAMPLING_COUNT) ? v->sampling_count
                                                                      : (int64_t)v->sample_count;
        if ((rc = rperf_writer_printf(w, "Total: %sms (%s)\nSamples: %" PRId64 ", Frequency: %dHz\n\n",
                                      ms, v->mode == RPERF_MODE_WALL ? "wall" : "cpu", nsamples,
                                      (int)v->frequency)))
            return rc;
    }
    if ((rc = put_table(st, v, w, " Flat:\n", st->flat, total, o->top_n)) ||
        (rc = rperf_writer_puts(w, "\n")) ||
        (rc = put_table(st, v, w, " Cumulative:\n", st->cum, total, o->top_n)))
        return rc;
    return 0;
}

static int
text_encode(const rperf_profile_view_t *v, const rperf_export_options_t *opts, rperf_writer_t *w)
{
    text_state_t st;
    memset(&st, 0, sizeof st);
    rperf_export_options_t defaults;
    if (!opts) {
        rperf_export_options_init(&defaults);
        opts = &defaults;
    }
    int rc = rperf__encode_result(w, "text", text_run(&st, v, opts, w));
    rperf__strmap_free(&st.strs);
    rperf__seqmap_free(&st.rows);
    free(st.frame_row);
    free(st.flat);
    free(st.cum);
    free(st.stamp);
    free(st.order);
    rperf__buf_free(&st.scratch);
    rperf__buf_free(&st.esc);
    return rc;
}

const rperf_exporter_ops_t rperf_exporter_text = {
    .version = RPERF_EXPORTER_ABI_VERSION,
    .name = "text",
    .suffix = ".txt",
    .description = "flat and cumulative tables (human-readable)",
    .gzip = 0,
    .encode = text_encode,
    .flags = RPERF_EXPORTER_F_TEXT,
};
