/* SPDX-License-Identifier: MIT */
/*
 * example_threads.c — the example exporter of docs/exporters.md: per-thread
 * totals as tab-separated values. Deliberately small and written against
 * the public contract only (rperf_exporter.h), as an out-of-tree plugin
 * would be.
 *
 * Context: any non-signal thread; no Ruby API.
 *
 * FORMAT
 *   thread_seq<TAB>ractor<TAB>name<TAB>entries<TAB>weight_ns<TAB>percent\n   (header)
 *   (in an allocation view the weight column is named after the sample
 *   type, e.g. "inuse_space", since weights are then objects or bytes)
 *   one line per thread_seq that has samples, in increasing thread_seq order;
 *   ractor and name are empty when the view does not know them; tabs and
 *   control characters in names are written as spaces, invalid UTF-8 as
 *   U+FFFD; percent has two decimals.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "rperf_exporter.h"

typedef struct {
    uint32_t thread_seq;
    int64_t weight;
} pair_t;

static int
cmp_pair(const void *a, const void *b)
{
    const pair_t *x = a, *y = b;
    return (x->thread_seq > y->thread_seq) - (x->thread_seq < y->thread_seq);
}

/* Linear search is fine here: views carry few threads, and it runs once
 * per output line. */
static const rperf_view_thread_t *
find_thread(const rperf_profile_view_t *v, uint32_t seq)
{
    for (size_t i = 0; i < v->thread_count; i++)
        if (v->threads[i].thread_seq == seq)
            return &v->threads[i];
    return NULL;
}

/* Names may hold anything: control characters would break the TSV layout
 * and invalid UTF-8 would make the file unreadable as text. Write the runs
 * between control characters through the UTF-8-sanitising writer call, and
 * each control character as a space. Errors are sticky: checked once at
 * the end of encode(). */
static void
put_name(rperf_writer_t *w, rperf_str_t name)
{
    size_t start = 0;
    for (size_t i = 0; i <= name.len; i++) {
        unsigned char c = i < name.len ? (unsigned char)name.ptr[i] : 0;
        if (i == name.len || c < 0x20 || c == 0x7f) {
            rperf_writer_write_utf8(w, name.ptr + start, i - start);
            if (i < name.len)
                rperf_writer_puts(w, " ");
            start = i + 1;
        }
    }
}

static int
threads_encode(const rperf_profile_view_t *v, const rperf_export_options_t *opts,
               rperf_writer_t *w)
{
    (void)opts; /* this exporter has no options */
    /* The weights' unit: nanoseconds in a time view, else what the chosen
     * sample type counts (objects or bytes). */
    rperf_writer_printf(w, "thread_seq\tractor\tname\tentries\t%s\tpercent\n",
                        v->sample_type == RPERF_VALUE_TIME ? "weight_ns"
                                                           : rperf_value_type_name(v->sample_type));
    if (v->sample_count == 0)
        return rperf_writer_status(w);

    /* 1. Copy (thread_seq, weight) out of the view and sort by thread. */
    pair_t *pairs = malloc(v->sample_count * sizeof *pairs);
    if (!pairs)
        return rperf_writer_fail(w, -ENOMEM, "threads: out of memory");
    int64_t total = 0;
    for (size_t i = 0; i < v->sample_count; i++) {
        pairs[i].thread_seq = v->samples[i].thread_seq;
        pairs[i].weight = v->samples[i].weight;
        total += v->samples[i].weight;
    }
    qsort(pairs, v->sample_count, sizeof *pairs, cmp_pair);

    /* 2. One line per run of equal thread_seq. */
    for (size_t i = 0; i < v->sample_count;) {
        uint32_t seq = pairs[i].thread_seq;
        int64_t weight = 0;
        size_t entries = 0;
        for (; i < v->sample_count && pairs[i].thread_seq == seq; i++, entries++)
            weight += pairs[i].weight;
        const rperf_view_thread_t *t = find_thread(v, seq);
        rperf_writer_printf(w, "%" PRIu32 "\t", seq);
        if (t && t->ractor_id)
            rperf_writer_printf(w, "%" PRIu32, t->ractor_id);
        rperf_writer_puts(w, "\t");
        if (t)
            put_name(w, t->name);
        /* percent with two decimals, rounded half up, in integer arithmetic
         * (20000 * weight fits easily in 64 bits for any realistic profile,
         * and total > 0 here). */
        int64_t hundredths = (weight * 20000 + total) / (2 * total);
        rperf_writer_printf(w, "\t%zu\t%" PRId64 "\t%" PRId64 ".%02" PRId64 "\n", entries, weight,
                            hundredths / 100, hundredths % 100);
    }
    free(pairs);
    /* 3. Report the first write error, if any (the writer remembers it). */
    return rperf_writer_status(w);
}

const rperf_exporter_ops_t rperf_exporter_threads = {
    .version = RPERF_EXPORTER_ABI_VERSION,
    .name = "threads",
    .suffix = ".threads.tsv",
    .description = "example: per-thread totals as tab-separated values",
    .gzip = 0,
    .encode = threads_encode,
    .flags = RPERF_EXPORTER_F_TEXT,
};
