/* SPDX-License-Identifier: MIT */
/*
 * export_internal.h — what the two sources of the exporters' profile view
 * share: ruby/export.c (the binding; the view from a result Hash) and
 * ruby/export_engine.c (the view from the engine's data at stop). Owns the
 * conversion state conv_t and declares the frame store both sources fill,
 * so that both give the same frames for the same profile.
 *
 * Context: GVL held (every function declared here; see each file's header).
 */
#ifndef RPERF_EXPORT_INTERNAL_H
#define RPERF_EXPORT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <ruby.h>

#include "rperf_exporter.h"
#include "exporter_internal.h"

/* One conversion: everything it allocates, freed by export.c's conv_free()
 * (run by rb_ensure() whatever the conversion raises). */
typedef struct conv {
    struct chunk *chunks;           /* export.c: the arena of phase-1 strings */
    /* frames: key bytes in `fstore` = [u32 path_len][path][label] */
    rperf__strmap_t fstore;
    struct frame_meta *fmeta;
    size_t fmeta_cap;
    rperf_view_frame_t *frames;
    struct ident_slot *ident;       /* export.c: (path, label) Array -> frame */
    size_t ident_cap, ident_count;
    rperf__buf_t key;
    /* samples */
    rperf_view_sample_t *samples;
    size_t nsamples;
    uint32_t *stacks;
    /* export_engine.c: engine frame id -> first-seen order + 1, and back */
    uint32_t *remap, *seen;
    size_t nids, nseen, samples_cap, stacks_cap, at;
    /* allocation views (export.c): every entry with its four values, and the
     * label sets they use: (result label set, class) pairs, deduplicated
     * through `aset_keys` ([u32 set][u8 has class][class bytes] -> id - 1) */
    rperf_view_alloc_sample_t *asamples;
    size_t nasamples;
    rperf_view_label_set_t *asets;
    size_t nasets, asets_cap;
    rperf__strmap_t aset_keys;
    /* labels, threads */
    rperf_view_label_set_t *sets;
    size_t nsets;
    rperf_view_thread_t *threads;
    size_t nthreads;
    rperf_profile_view_t view;
    rperf_export_options_t opts;
    /* what to run */
    const rperf_exporter_ops_t *ops;
    int gzip;
    const char *path;       /* arena copy; NULL = to memory */
    VALUE str;              /* to memory: the result String (on this stack: marked) */
    size_t outlen;          /* its final length */
    int utf8;               /* RPERF__UTF8_* class of a text output */
    bool with_gvl;          /* phase 3 runs holding the GVL (a small view to memory) */
    int rc;
    char err[512];
} conv_t;

/* Zeroed room for n (>= 0) elements, raising NoMemoryError; the caller
 * stores it in `c` so that conv_free() frees it. */
static inline void *
rperf_rb_export_calloc(long n, size_t size)
{
    void *p = calloc((size_t)(n > 0 ? n : 1), size);
    if (!p)
        rb_memerror();
    return p;
}

/* A line number as the view has it: 0 when unknown or out of range. */
static inline int32_t
rperf_rb_export_line(long l)
{
    return l > 0 && l <= INT32_MAX ? (int32_t)l : 0;
}

/* ---- export.c ----------------------------------------------------------------- */

/* The frame index of (path, label): frames with equal bytes are one frame,
 * numbered in first-seen order; the first known line wins. Copies the
 * bytes; calls no Ruby method (raises only ArgumentError / NoMemoryError). */
uint32_t rperf_rb_export_frame(conv_t *c, const char *path, size_t plen, const char *label,
                               size_t llen, int32_t line);

/* ---- export_engine.c ------------------------------------------------------------ */

/* True when `data` is the result of the stopped run whose data the engine
 * still holds (aggregated mode) and has no :allocations (allocation views
 * are built from the Hash): then the view may be built from it. */
int rperf_rb_export_engine_matches(VALUE data);

/* Phase 2 from the engine: c->samples, c->stacks and the frames. Runs before
 * anything that could call Ruby code (see export_engine.c). */
void rperf_rb_export_engine_samples(conv_t *c);

/* After phase 1 (c->nsets known): out-of-range label set ids -> 0. */
void rperf_rb_export_engine_check_label_sets(conv_t *c);

#endif
