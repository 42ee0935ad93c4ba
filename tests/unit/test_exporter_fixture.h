/*
 * test_exporter_fixture.h — a small hand-built profile view shared by the
 * exporter unit tests (tests/unit/test_exporter*.c), plus helpers to run an
 * exporter into memory. Context: plain test programs, no Ruby.
 *
 * Frames (index: name / file / line):
 *   0 Object#main      app.rb              1
 *   1 Foo#bar          app.rb             10
 *   2 Integer#times    <internal:numeric>  0
 *   3 [GC marking]     <GC>                0
 *   4 "bad\xff;na me\n" (invalid UTF-8, ';', space, newline)  "we\xfeird.rb"  7
 *   5 ""               <C method>          0
 * Samples (frames leaf first; weight ns; thread_seq; label set):
 *   s0 [1,0]    20 000 000  t1  0
 *   s1 [2,1,0]  10 000 000  t1  1 {endpoint: "GET /users"}
 *   s2 [3,1,0]   5 000 000  t2  0
 *   s3 [4,5,0]       1 000  t2  2 {"k\xff": "v\xc3"}
 *   s4 [1,0]     7 000 000  t2  0   (same stack as s0, other thread)
 *   s5 [1,0]     3 000 000  t1  0   (duplicate key of s0)
 * Threads: 1 ractor 1 "main"; 2 ractor 2 "wor\tker".
 */
#ifndef RPERF_TEST_EXPORTER_FIXTURE_H
#define RPERF_TEST_EXPORTER_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "rperf_exporter.h"

#define S(lit) { lit, sizeof(lit) - 1 }

static const rperf_view_frame_t fx_frames[] = {
    { S("Object#main"), S("app.rb"), 1 },
    { S("Foo#bar"), S("app.rb"), 10 },
    { S("Integer#times"), S("<internal:numeric>"), 0 },
    { S("[GC marking]"), S("<GC>"), 0 },
    { S("bad\xff;na me\n"), S("we\xfeird.rb"), 7 },
    { S(""), S("<C method>"), 0 },
};
static const uint32_t fx_st0[] = {1, 0};
static const uint32_t fx_st1[] = {2, 1, 0};
static const uint32_t fx_st2[] = {3, 1, 0};
static const uint32_t fx_st3[] = {4, 5, 0};
static const rperf_view_sample_t fx_samples[] = {
    { fx_st0, 2, 20000000, 1, 0 },
    { fx_st1, 3, 10000000, 1, 1 },
    { fx_st2, 3, 5000000, 2, 0 },
    { fx_st3, 3, 1000, 2, 2 },
    { fx_st0, 2, 7000000, 2, 0 },
    { fx_st0, 2, 3000000, 1, 0 },
};
static const rperf_view_label_t fx_l1[] = { { S("endpoint"), S("GET /users") } };
static const rperf_view_label_t fx_l2[] = { { S("k\xff"), S("v\xc3") } };
static const rperf_view_label_set_t fx_sets[] = { { NULL, 0 }, { fx_l1, 1 }, { fx_l2, 1 } };
static const rperf_view_thread_t fx_threads[] = {
    { 1, 1, S("main"), 1234 },
    { 2, 2, S("wor\tker"), 1235 },
};

static inline rperf_profile_view_t
fx_view(void)
{
    rperf_profile_view_t v;
    memset(&v, 0, sizeof v);
    v.mode = RPERF_MODE_CPU;
    v.frequency = 100;
    v.flags = RPERF_VIEW_HAS_START_TIME | RPERF_VIEW_HAS_DURATION | RPERF_VIEW_HAS_LABEL_SETS;
    v.start_time_ns = 1700000000000000000LL;
    v.duration_ns = 50000000;
    v.frames = fx_frames;
    v.frame_count = sizeof fx_frames / sizeof fx_frames[0];
    v.samples = fx_samples;
    v.sample_count = sizeof fx_samples / sizeof fx_samples[0];
    v.label_sets = fx_sets;
    v.label_set_count = 3;
    v.threads = fx_threads;
    v.thread_count = 2;
    v.rperf_version = (rperf_str_t)S("0.7.0");
    v.ruby_description = (rperf_str_t)S("ruby 3.3.8 (test)");
    return v;
}

static inline rperf_profile_view_t
fx_empty_view(void)
{
    rperf_profile_view_t v;
    memset(&v, 0, sizeof v);
    v.mode = RPERF_MODE_WALL;
    v.frequency = 1000;
    v.rperf_version = (rperf_str_t)S("0.7.0");
    return v;
}

/* Run exporter `name` into a NUL-terminated malloc'd buffer (gzip off). */
static inline char *
fx_export(const char *name, const rperf_profile_view_t *v, const rperf_export_options_t *o,
          size_t *len_out)
{
    const rperf_exporter_ops_t *ops = rperf_exporter_find(name);
    if (!ops)
        return NULL;
    unsigned char *data = NULL;
    size_t len = 0;
    char err[256];
    if (rperf_export_to_memory(ops, v, o, 0, &data, &len, err, sizeof err) != 0) {
        fprintf(stderr, "export %s failed: %s\n", name, err);
        return NULL;
    }
    char *s = malloc(len + 1);
    if (s) {
        if (len)
            memcpy(s, data, len);
        s[len] = '\0';
    }
    free(data);
    if (len_out)
        *len_out = len;
    return s;
}

/* A deep, synthetic view: one stack of `depth` distinct frames. The caller
 * frees the returned arrays with fx_deep_free(). */
typedef struct {
    rperf_profile_view_t v;
    rperf_view_frame_t *frames;
    uint32_t *stack;
    rperf_view_sample_t sample;
    char *names;
} fx_deep_t;

static inline void
fx_deep_init(fx_deep_t *d, uint32_t depth)
{
    d->frames = calloc(depth, sizeof *d->frames);
    d->stack = calloc(depth, sizeof *d->stack);
    d->names = calloc(depth, 16);
    for (uint32_t i = 0; i < depth; i++) {
        int n = snprintf(d->names + 16 * i, 16, "m%u", i);
        d->frames[i].name.ptr = d->names + 16 * i;
        d->frames[i].name.len = (size_t)n;
        d->frames[i].file.ptr = "deep.rb";
        d->frames[i].file.len = 7;
        d->frames[i].line = (int32_t)i + 1;
        d->stack[i] = depth - 1 - i; /* leaf first: frame depth-1 is the leaf */
    }
    d->sample = (rperf_view_sample_t){ d->stack, depth, 42, 1, 0 };
    d->v = fx_empty_view();
    d->v.frames = d->frames;
    d->v.frame_count = depth;
    d->v.samples = &d->sample;
    d->v.sample_count = 1;
}

static inline void
fx_deep_free(fx_deep_t *d)
{
    free(d->frames);
    free(d->stack);
    free(d->names);
}

#endif /* RPERF_TEST_EXPORTER_FIXTURE_H */
