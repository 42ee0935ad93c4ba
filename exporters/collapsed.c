/* SPDX-License-Identifier: MIT */
/*
 * collapsed.c — the collapsed ("folded") stacks exporter:
 *     root;caller;…;leaf <weight_ns>\n
 *
 * Context: any non-signal thread; no Ruby API.
 *
 * FORMAT
 * - One line per distinct stack of frame NAMES (paths are dropped), root
 *   first. Samples of different threads or label sets, and different frames
 *   with the same name, merge into one line whose weight is the sum.
 * - Frame names are made safe for the strict folded grammar
 *   ^[^;]+(;[^;]+)* [0-9]+$ (validators reference §2.1):
 *     invalid UTF-8 byte            -> U+FFFD
 *     ';', control bytes (\n, \r, \t, …, 0x7f)  -> \xNN (two hex digits)
 *     leading / trailing space      -> \x20
 *     empty name                    -> (unknown)
 *   A stack with no frames is written as the single frame "(no frames)".
 * - Lines are sorted by stack, root first, comparing frame names bytewise
 *   frame by frame (a stack sorts before its extensions). The output is a
 *   pure function of the view's contents.
 * - No samples: empty output.
 *
 * DESIGN
 * Names are escaped and interned once per view frame (strmap), stacks are
 * interned as sequences of name ids (seqmap), names are ranked by one sort,
 * and stacks are sorted comparing rank sequences: O(F log F + S log S · d).
 * See also exporter_internal.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporter_internal.h"

typedef struct {
    rperf__strmap_t names;
    rperf__seqmap_t stacks;
    uint32_t *frame_name;   /* view frame -> name id */
    uint32_t *rank;         /* name id -> sort rank */
    int64_t *weights;       /* stack id -> weight */
    size_t weights_cap;
    uint32_t *key;
    size_t key_cap;
    rperf__buf_t scratch, esc, out;
} collapsed_state_t;

/* Escape one (already sanitised) name into st->esc. */
static int
escape_name(rperf__buf_t *esc, const char *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    esc->len = 0;
    if (n == 0)
        return rperf__buf_append(esc, "(unknown)", 9);
    int rc = rperf__buf_reserve(esc, n * 4);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        int bad = c == ';' || c < 0x20 || c == 0x7f || (c == ' ' && (i == 0 || i == n - 1));
        if (bad) {
            unsigned char *d = esc->data + esc->len;
            d[0] = '\\';
            d[1] = 'x';
            d[2] = (unsigned char)hex[c >> 4];
            d[3] = (unsigned char)hex[c & 15];
            esc->len += 4;
        } else {
            esc->data[esc->len++] = c;
        }
    }
    return 0;
}

/* Comparators for qsort_r(): a GNU/POSIX-2024 extension (not C11), used
 * instead of a static context pointer so encoders stay reentrant; _GNU_SOURCE
 * is defined for the whole build. */
static int
cmp_name_ids(const void *a, const void *b, void *ctx)
{
    const rperf__strmap_t *sort_names = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx, ly;
    const char *px = rperf__strmap_get(sort_names, x, &lx);
    const char *py = rperf__strmap_get(sort_names, y, &ly);
    int c = memcmp(px, py, lx < ly ? lx : ly);
    if (c)
        return c;
    return (lx > ly) - (lx < ly);
}

static int
cmp_stacks(const void *a, const void *b, void *ctx)
{
    const collapsed_state_t *sort_state = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint32_t lx, ly;
    const uint32_t *kx = rperf__seqmap_get(&sort_state->stacks, x, &lx);
    const uint32_t *ky = rperf__seqmap_get(&sort_state->stacks, y, &ly);
    uint32_t n = lx < ly ? lx : ly;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t rx = sort_state->rank[kx[i]], ry = sort_state->rank[ky[i]];
        if (rx != ry)
            return rx < ry ? -1 : 1;
    }
    return (lx > ly) - (lx < ly);
}

/* Decimal digits of v into buf (no NUL); returns the count. */
static int
u64_digits(char *buf, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

static int
collapsed_run(collapsed_state_t *st, const rperf_profile_view_t *v, rperf_writer_t *w)
{
    int rc;
    if (v->sample_count == 0)
        return 0;
    if ((rc = rperf__strmap_init(&st->names, v->frame_count + 1)))
        return rc;
    st->frame_name = malloc((v->frame_count + 1) * sizeof *st->frame_name);
    if (!st->frame_name)
        return -ENOMEM;
    for (size_t i = 0; i < v->frame_count; i++) {
        size_t n;
        const char *s = rperf__utf8_sanitize(v->frames[i].name.ptr, v->frames[i].name.len,
                                             &st->scratch, &n);
        if (!s)
            return -ENOMEM;
        if ((rc = escape_name(&st->esc, s, n)) ||
            (rc = rperf__strmap_intern(&st->names, (const char *)st->esc.data, st->esc.len,
                                       &st->frame_name[i], NULL)))
            return rc;
    }
    uint32_t no_frames;
    if ((rc = rperf__strmap_intern(&st->names, "(no frames)", 11, &no_frames, NULL)))
        return rc;

    /* Intern stacks (root first) and sum weights. */
    if ((rc = rperf__seqmap_init(&st->stacks, v->sample_count)))
        return rc;
    for (size_t i = 0; i < v->sample_count; i++) {
        const rperf_view_sample_t *s = &v->samples[i];
        uint32_t depth = s->depth ? s->depth : 1;
        if (depth > st->key_cap) {
            size_t nc = (size_t)depth * 2;
            uint32_t *k = realloc(st->key, nc * sizeof *k);
            if (!k)
                return -ENOMEM;
            st->key = k;
            st->key_cap = nc;
        }
        if (s->depth == 0)
            st->key[0] = no_frames;
        for (uint32_t d = 0; d < s->depth; d++)
            st->key[d] = st->frame_name[s->frames[s->depth - 1 - d]];
        uint32_t id;
        int is_new;
        if ((rc = rperf__seqmap_intern(&st->stacks, st->key, depth, &id, &is_new)))
            return rc;
        if (is_new) {
            if (id >= st->weights_cap) {
                size_t nc = st->weights_cap ? st->weights_cap * 2 : 1024;
                int64_t *wv = realloc(st->weights, nc * sizeof *wv);
                if (!wv)
                    return -ENOMEM;
                st->weights = wv;
                st->weights_cap = nc;
            }
            st->weights[id] = 0;
        }
        st->weights[id] += s->weight;
    }

    /* Rank names bytewise, then sort stacks by rank sequence. */
    size_t nn = st->names.count, ns = st->stacks.count;
    uint32_t *order = malloc((nn > ns ? nn : ns) * sizeof *order);
    st->rank = malloc(nn * sizeof *st->rank);
    if (!order || !st->rank) {
        free(order);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < nn; i++)
        order[i] = i;
    qsort_r(order, nn, sizeof *order, cmp_name_ids, &st->names);
    for (uint32_t i = 0; i < nn; i++)
        st->rank[order[i]] = i;
    for (uint32_t i = 0; i < ns; i++)
        order[i] = i;
    qsort_r(order, ns, sizeof *order, cmp_stacks, st);

    /* Exact output size: names + separators + " <weight>\n" per line, so a
     * memory writer allocates once (outputs reach ~100 MB). */
    size_t total = 0;
    for (size_t i = 0; i < ns; i++) {
        uint32_t len;
        const uint32_t *k = rperf__seqmap_get(&st->stacks, (uint32_t)i, &len);
        for (uint32_t d = 0; d < len; d++)
            total += st->names.len[k[d]] + 1; /* name + ';' (or ' ' for the last) */
        char num[24];
        total += (size_t)u64_digits(num, (uint64_t)st->weights[i]) + 1;
    }
    if ((rc = rperf_writer_reserve(w, total))) {
        free(order);
        return rc;
    }
    for (size_t i = 0; i < ns && rc == 0; i++) {
        uint32_t len;
        const uint32_t *k = rperf__seqmap_get(&st->stacks, order[i], &len);
        char num[24];
        size_t nd = (size_t)u64_digits(num, (uint64_t)st->weights[order[i]]);
        size_t line = nd + 1;
        for (uint32_t d = 0; d < len; d++)
            line += st->names.len[k[d]] + 1;
        if ((rc = rperf__buf_reserve(&st->out, line)))
            break;
        unsigned char *p = st->out.data + st->out.len;
        for (uint32_t d = 0; d < len; d++) {
            size_t n;
            const char *name = rperf__strmap_get(&st->names, k[d], &n);
            memcpy(p, name, n);
            p += n;
            *p++ = d + 1 < len ? ';' : ' ';
        }
        memcpy(p, num, nd);
        p += nd;
        *p++ = '\n';
        st->out.len = (size_t)(p - st->out.data);
        if (st->out.len >= 256 * 1024) {
            rc = rperf_writer_write(w, st->out.data, st->out.len);
            st->out.len = 0;
        }
    }
    free(order);
    if (rc == 0 && st->out.len)
        rc = rperf_writer_write(w, st->out.data, st->out.len);
    return rc;
}

static int
collapsed_encode(const rperf_profile_view_t *v, const rperf_export_options_t *opts,
                 rperf_writer_t *w)
{
    (void)opts;
    collapsed_state_t st;
    memset(&st, 0, sizeof st);
    int rc = collapsed_run(&st, v, w);
    if (rc && !rperf_writer_status(w))
        rperf_writer_fail(w, rc, "collapsed: %s", strerror(-rc));
    rperf__strmap_free(&st.names);
    rperf__seqmap_free(&st.stacks);
    free(st.frame_name);
    free(st.rank);
    free(st.weights);
    free(st.key);
    rperf__buf_free(&st.scratch);
    rperf__buf_free(&st.esc);
    rperf__buf_free(&st.out);
    return rc;
}

const rperf_exporter_ops_t rperf_exporter_collapsed = {
    .version = RPERF_EXPORTER_ABI_VERSION,
    .name = "collapsed",
    .suffix = ".collapsed",
    .description = "folded stacks, root first (flamegraph.pl, speedscope, inferno)",
    .gzip = 0,
    .encode = collapsed_encode,
    .flags = RPERF_EXPORTER_F_TEXT,
};
