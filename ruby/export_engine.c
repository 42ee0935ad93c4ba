/* SPDX-License-Identifier: MIT */
/*
 * export_engine.c — the exporters' profile view straight from the engine's
 * results (Rperf._c_export_engine, i.e. Rperf.stop's output, between stop
 * and Rperf._c_release): whether the engine still holds a given result's
 * data, the copy of its aggregated samples, and the resolution of its frame
 * ids into the frame store of export_internal.h. The rest of the conversion
 * (metadata, label sets, threads, encoding) is ruby/export.c's.
 *
 * Context: GVL held (called from ruby/export.c's Ruby methods), with the
 * engine stopped and its results not yet released.
 *
 * DESIGN — the same view as from the Hash, without running Ruby code
 * - This phase 2 runs BEFORE export.c's phase 1 and calls no Ruby method,
 *   so no other thread can run and release the engine's data meanwhile.
 * - It copies every sample (frame ids renumbered in first-seen order), then
 *   resolves each distinct frame id once with rb_profile_frame_* (which
 *   allocate; the engine keeps its frames marked until release) and dedups
 *   frames by content exactly as the Hash path does (rperf_rb_export_frame),
 *   so both paths give the same view, plus first line numbers, which the
 *   Hash lacks. Paths and labels are named as ruby/result.c names them in
 *   the Hash (rperf_synthetic_frame() for synthetic ids).
 * - Label set ids are checked after phase 1, which knows how many sets the
 *   result has.
 * - A result that has :allocations is not built from here: its view (time
 *   or allocation) comes from the Hash (rperf_rb_export_engine_matches() is
 *   false for it), so its frames carry no first line numbers.
 * See also docs/exporters.md §1.
 */
#include <stddef.h>
#include <string.h>

#include <ruby.h>
#include <ruby/debug.h>

#include "rperf_core.h"
#include "rperf_ruby.h"
#include "export_internal.h"

int
rperf_rb_export_engine_matches(VALUE data)
{
    if (!rperf_engine_has_results() || rperf_engine_running() ||
        !rperf_engine_config()->aggregate)
        return 0;
    /* A result with allocation samples is converted from the Hash (export.c),
     * whatever sample type is chosen: one path for every allocation view. */
    if (!NIL_P(rb_hash_lookup2(data, ID2SYM(rb_intern("allocations")), Qnil)))
        return 0;
    rperf_stats_t st;
    rperf_engine_stats(&st);
    VALUE start = rb_hash_lookup2(data, ID2SYM(rb_intern("start_time_ns")), Qnil);
    VALUE samples = rb_hash_lookup2(data, ID2SYM(rb_intern("aggregated_samples")), Qnil);
    return RB_INTEGER_TYPE_P(start) && NUM2LL(start) == st.start_time_ns &&
           RB_TYPE_P(samples, T_ARRAY) &&
           (size_t)RARRAY_LEN(samples) == rperf_result_aggregated_count();
}

static int
count_engine_sample(const rperf_result_sample_t *s, void *arg)
{
    conv_t *c = arg;
    c->stacks_cap += s->depth;
    c->samples_cap++;
    return 0;
}

/* Copy one engine sample; its frames become first-seen indices (c->seen). */
static int
copy_engine_sample(const rperf_result_sample_t *s, void *arg)
{
    conv_t *c = arg;
    /* (The engine cannot change between the two passes: no Ruby code runs.) */
    if (s->weight <= 0 || c->nsamples >= c->samples_cap || s->depth > c->stacks_cap - c->at)
        return 0;
    uint32_t *stack = c->stacks + c->at;
    for (uint32_t d = 0; d < s->depth; d++) {
        uint32_t id = s->frames[d] < c->nids ? s->frames[d] : RPERF_FRAME_UNKNOWN;
        if (!c->remap[id]) {
            c->seen[c->nseen++] = id;
            c->remap[id] = (uint32_t)c->nseen;
        }
        stack[d] = c->remap[id] - 1;
    }
    rperf_view_sample_t *v = &c->samples[c->nsamples++];
    v->frames = stack;
    v->depth = s->depth;
    v->weight = s->weight;
    v->thread_seq = s->thread_seq;
    v->label_set_id = s->label_set_id;
    c->at += s->depth;
    return 0;
}

/* path, label and first line of engine frame `id`, as ruby/result.c has
 * them in the Hash ("<C method>" without a path, "" without a label). */
static uint32_t
resolve_engine_frame(conv_t *c, uint32_t id)
{
    if (id < RPERF_SYNTHETIC_FRAMES) {
        const char *p, *l;
        rperf_synthetic_frame(id, &p, &l);
        return rperf_rb_export_frame(c, p, strlen(p), l, strlen(l), 0);
    }
    rperf_rb_frame_text_t t;
    VALUE keep[2];
    rperf_rb_frame_text(id, &t, keep);
    int32_t first = t.first_line ? rperf_rb_export_line(t.first_line) : 0;
    uint32_t idx = rperf_rb_export_frame(c, t.path, t.path_len, t.label, t.label_len, first);
    RB_GC_GUARD(keep[0]);
    RB_GC_GUARD(keep[1]);
    return idx;
}

void
rperf_rb_export_engine_samples(conv_t *c)
{
    c->nids = rperf_result_frame_count() + RPERF_SYNTHETIC_FRAMES;
    rperf_result_each_aggregated(count_engine_sample, c);
    c->samples = rperf_rb_export_calloc((long)c->samples_cap, sizeof *c->samples);
    c->stacks = rperf_rb_export_calloc((long)c->stacks_cap, sizeof *c->stacks);
    c->remap = rperf_rb_export_calloc((long)c->nids, sizeof *c->remap);
    c->seen = rperf_rb_export_calloc((long)c->nids, sizeof *c->seen);
    rperf_result_each_aggregated(copy_engine_sample, c);
    /* seen[k] (an engine id) -> its frame index, then renumber the stacks. */
    for (size_t k = 0; k < c->nseen; k++)
        c->seen[k] = resolve_engine_frame(c, c->seen[k]);
    for (size_t i = 0; i < c->at; i++)
        c->stacks[i] = c->seen[c->stacks[i]];
}

/* Phase 1 cannot know a sample's label set beforehand: out-of-range ids
 * (none are expected) mean "no labels". */
void
rperf_rb_export_engine_check_label_sets(conv_t *c)
{
    for (size_t i = 0; i < c->nsamples; i++)
        if (c->samples[i].label_set_id >= c->nsets)
            c->samples[i].label_set_id = 0;
}
