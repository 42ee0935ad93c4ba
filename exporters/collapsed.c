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
 * Names are cleaned (rperf__text_clean) and interned once per view frame,
 * then ranked bytewise by one sort of the distinct names; each view frame
 * maps straight to its name's rank and cleaned bytes. Every sample becomes
 * a line pointing at the view's own frame array (nothing is copied per
 * frame). Sorting the lines compares ranks and brings equal stacks
 * together, so merging them is one pass (no hash table). The sort is a
 * radix sort on the first two ranks, packed in `prefix`, then a comparison
 * sort of each run of equal prefixes. The exact output size is known before
 * writing: a memory writer allocates once.
 * O(F log F + S·d + T log T · d) for F frames, S samples of depth d, and T
 * samples in runs that share their first two frames.
 * See also exporter_internal.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exporter_internal.h"

/* One output line: a sample's frames (leaf first, as in the view). `prefix`
 * packs the ranks of the two outermost frames (+1; 0 = absent), so a
 * shorter stack sorts before its extensions. */
typedef struct line {
    uint64_t prefix;
    const uint32_t *frames;
    int64_t weight;
    uint32_t depth;
    uint32_t bytes;          /* names and separators; then the whole line */
} line_t;

/* Bytes of room after every name and after the staged output. */
#define NAME_SLACK 16

typedef struct {
    const char *ptr;         /* into names' store (final once all are interned) */
    uint32_t len;
    uint32_t rank;           /* of the name among all names, bytewise */
} frame_name_t;

typedef struct {
    rperf__strmap_t names;   /* cleaned names */
    frame_name_t *fname;     /* view frame -> its name; [frame_count] = "(no frames)" */
    uint32_t no_frames;      /* the pseudo frame index of an empty stack */
    line_t *lines, *tmp;
    rperf__buf_t scratch, esc, out;
} collapsed_state_t;

/* qsort_r comparators (a GNU/POSIX-2024 extension, not C11): reentrant
 * context instead of a static pointer. */
static int
cmp_names(const void *a, const void *b, void *ctx)
{
    const rperf__strmap_t *names = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx, ly;
    const char *px = rperf__strmap_get(names, x, &lx);
    const char *py = rperf__strmap_get(names, y, &ly);
    int c = memcmp(px, py, lx < ly ? lx : ly);
    if (c)
        return c;
    return (lx > ly) - (lx < ly);
}

/* Rank of the i-th frame from the root of line l. */
static inline uint32_t
rank_at(const frame_name_t *fname, const line_t *l, uint32_t i)
{
    return fname[l->frames[l->depth - 1 - i]].rank;
}

/* Lines with equal prefixes: compare the ranks after the first two. */
static int
cmp_tails(const void *a, const void *b, void *ctx)
{
    const frame_name_t *fname = ctx;
    const line_t *x = a, *y = b;
    uint32_t n = x->depth < y->depth ? x->depth : y->depth;
    for (uint32_t i = 2; i < n; i++) {
        uint32_t rx = rank_at(fname, x, i), ry = rank_at(fname, y, i);
        if (rx != ry)
            return rx < ry ? -1 : 1;
    }
    return (x->depth > y->depth) - (x->depth < y->depth);
}

static int
same_stack(const collapsed_state_t *st, const line_t *x, const line_t *y)
{
    if (x->prefix != y->prefix || x->depth != y->depth)
        return 0;
    if (x->frames == y->frames ||
        memcmp(x->frames, y->frames, x->depth * sizeof *x->frames) == 0)
        return 1;
    return cmp_tails(x, y, st->fname) == 0; /* other frames, same names */
}

/* Sort st->lines[0..n) by stack: LSD radix sort on `prefix` (8 bits a pass,
 * skipping bytes every line shares), then each run of equal prefixes by the
 * rest of the stack. */
static void
sort_lines(collapsed_state_t *st, size_t n)
{
    line_t *src = st->lines, *dst = st->tmp;
    for (unsigned shift = 0; shift < 64; shift += 8) {
        size_t count[256] = {0};
        for (size_t i = 0; i < n; i++)
            count[(src[i].prefix >> shift) & 255]++;
        if (count[(src[0].prefix >> shift) & 255] == n)
            continue; /* this byte is the same in every line */
        size_t at = 0;
        for (unsigned b = 0; b < 256; b++) {
            size_t c = count[b];
            count[b] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++)
            dst[count[(src[i].prefix >> shift) & 255]++] = src[i];
        line_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != st->lines)
        memcpy(st->lines, src, n * sizeof *src);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && st->lines[j].prefix == st->lines[i].prefix)
            j++;
        if (j - i > 1)
            qsort_r(st->lines + i, j - i, sizeof *st->lines, cmp_tails, st->fname);
        i = j;
    }
}

/* Clean every frame name once and rank the distinct names. */
static int
name_frames(collapsed_state_t *st, const rperf_profile_view_t *v)
{
    int rc;
    size_t nf = v->frame_count;
    uint32_t *ids = malloc((nf + 1) * sizeof *ids), *order = NULL, *rank = NULL;
    st->fname = malloc((nf + 1) * sizeof *st->fname);
    if (!ids || !st->fname) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = rperf__strmap_init(&st->names, nf + 1, 0)))
        goto out;
    for (size_t i = 0; i < nf && rc == 0; i++) {
        if ((rc = rperf__text_clean(&st->esc, &st->scratch, v->frames[i].name,
                                    RPERF__ESC_SEMICOLON | RPERF__ESC_EDGE_SPACE, "(unknown)")))
            break;
        rc = rperf__strmap_intern(&st->names, (const char *)st->esc.data, st->esc.len, &ids[i],
                                  NULL);
    }
    if (rc || (rc = rperf__strmap_intern(&st->names, "(no frames)", 11, &ids[nf], NULL)))
        goto out;
    /* Slack after the last name: the writing loop copies 16-byte blocks. */
    if ((rc = rperf__buf_reserve(&st->names.bytes, NAME_SLACK)))
        goto out;
    size_t nn = st->names.count;
    order = malloc(nn * sizeof *order);
    rank = malloc(nn * sizeof *rank);
    if (!order || !rank) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < nn; i++)
        order[i] = i;
    qsort_r(order, nn, sizeof *order, cmp_names, &st->names);
    for (uint32_t r = 0; r < nn; r++)
        rank[order[r]] = r;
    for (size_t i = 0; i <= nf; i++) {
        size_t len;
        st->fname[i].ptr = rperf__strmap_get(&st->names, ids[i], &len);
        st->fname[i].len = (uint32_t)len;
        st->fname[i].rank = rank[ids[i]];
    }
    st->no_frames = (uint32_t)nf;
out:
    free(ids);
    free(order);
    free(rank);
    return rc;
}

/* One line per sample. */
static int
make_lines(collapsed_state_t *st, const rperf_profile_view_t *v)
{
    size_t n = v->sample_count;
    st->lines = malloc(n * sizeof *st->lines);
    st->tmp = malloc(n * sizeof *st->tmp);
    if (!st->lines || !st->tmp)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const rperf_view_sample_t *s = &v->samples[i];
        line_t *l = &st->lines[i];
        l->frames = s->depth ? s->frames : &st->no_frames;
        l->depth = s->depth ? s->depth : 1;
        l->weight = s->weight;
        size_t bytes = 0;
        for (uint32_t d = 0; d < l->depth; d++)
            bytes += st->fname[l->frames[d]].len + 1; /* name + ';' or ' ' */
        if (bytes > UINT32_MAX - 32)
            return -EOVERFLOW;
        l->bytes = (uint32_t)bytes;
        l->prefix = (uint64_t)(rank_at(st->fname, l, 0) + 1) << 32 |
                    (l->depth > 1 ? rank_at(st->fname, l, 1) + 1 : 0);
    }
    return 0;
}

static int
collapsed_run(collapsed_state_t *st, const rperf_profile_view_t *v, rperf_writer_t *w)
{
    int rc;
    if (v->sample_count == 0)
        return 0;
    if ((rc = name_frames(st, v)) || (rc = make_lines(st, v)))
        return rc;
    sort_lines(st, v->sample_count);

    /* Merge equal stacks; the exact output size is names + separators +
     * "<weight>\n" per line. */
    size_t n = 0, total = 0;
    for (size_t i = 0; i < v->sample_count; i++) {
        if (n && same_stack(st, &st->lines[n - 1], &st->lines[i]))
            st->lines[n - 1].weight += st->lines[i].weight;
        else
            st->lines[n++] = st->lines[i];
    }
    for (size_t i = 0; i < n; i++) {
        char num[24];
        st->lines[i].bytes += (uint32_t)rperf__u64_dec(num, (uint64_t)st->lines[i].weight) + 1;
        total += st->lines[i].bytes;
    }
    if ((rc = rperf_writer_reserve(w, total)))
        return rc;

    for (size_t i = 0; i < n; i++) {
        const line_t *l = &st->lines[i];
        if ((rc = rperf__buf_reserve(&st->out, (size_t)l->bytes + NAME_SLACK)))
            return rc;
        unsigned char *p = st->out.data + st->out.len;
        for (uint32_t d = l->depth; d-- > 0;) { /* root first */
            const frame_name_t *f = &st->fname[l->frames[d]];
            /* Whole 16-byte blocks (inlined, unlike a variable-size
             * memcpy): both sides have NAME_SLACK bytes of room. */
            for (uint32_t k = 0; k < f->len; k += 16)
                memcpy(p + k, f->ptr + k, 16);
            p += f->len;
            *p++ = ';';
        }
        p[-1] = ' ';
        p += rperf__u64_dec((char *)p, (uint64_t)l->weight);
        *p++ = '\n';
        st->out.len = (size_t)(p - st->out.data);
        if ((rc = rperf__buf_flush(&st->out, w, RPERF__FLUSH_AT)))
            return rc;
    }
    return rperf__buf_flush(&st->out, w, 0);
}

static int
collapsed_encode(const rperf_profile_view_t *v, const rperf_export_options_t *opts,
                 rperf_writer_t *w)
{
    (void)opts;
    collapsed_state_t st;
    memset(&st, 0, sizeof st);
    int rc = rperf__encode_result(w, "collapsed", collapsed_run(&st, v, w));
    rperf__strmap_free(&st.names);
    free(st.fname);
    free(st.lines);
    free(st.tmp);
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
