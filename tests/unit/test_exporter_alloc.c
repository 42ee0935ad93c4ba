/*
 * test_exporter_alloc.c — every built-in exporter on allocation views
 * (rperf_exporter.h: sample_type, alloc_samples): the view check's rules
 * for them, pprof as a heap profile (read back through the project's own
 * decoder, exporters/pprof_decode.c: four sample types, default type,
 * period, merged values, the `class` label, entries whose chosen value is
 * 0 kept), golden collapsed and text output for objects and bytes, the
 * speedscope unit and name, the HTML page's metadata, the example
 * exporter's column, the byte-unit formatting, and ABI version 1
 * exporters (registered, given time views, refused allocation views).
 * Context: plain C test program, no Ruby.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rperf_test.h"
#include "rperf_pprof_decode.h"
#include "test_exporter_fixture.h"
#include "exporter_internal.h"

/* ---- the fixture ------------------------------------------------------------
 * Frames: fx_frames (0 Object#main, 1 Foo#bar, …).
 * Label sets: 0 {}, 1 {class: String}, 2 {endpoint: GET /users, class: Array},
 *             3 {class: <T_IMEMO>}.
 * Allocation entries (frames leaf first; alloc_objects, alloc_space,
 * inuse_objects, inuse_space; thread; set):
 *   a0 [1,0]  3072 122880 1024   40960  t1 1
 *   a1 [1,0]  1024  81920    0       0  t1 2   (all freed)
 *   a2 [0]       0      0 2048 2000000  t2 3   (allocated before the window)
 *   a3 [1,0]     1    100    1     100  t1 1   (same key as a0: pprof merges)
 */
static const uint32_t ax_st0[] = {1, 0};
static const uint32_t ax_st1[] = {0};
static const rperf_view_alloc_sample_t ax_entries[] = {
    { ax_st0, 2, 1, 1, {3072, 122880, 1024, 40960} },
    { ax_st0, 2, 1, 2, {1024, 81920, 0, 0} },
    { ax_st1, 1, 2, 3, {0, 0, 2048, 2000000} },
    { ax_st0, 2, 1, 1, {1, 100, 1, 100} },
};
static const rperf_view_label_t ax_l1[] = { { S("class"), S("String") } };
static const rperf_view_label_t ax_l2[] = { { S("endpoint"), S("GET /users") }, { S("class"), S("Array") } };
static const rperf_view_label_t ax_l3[] = { { S("class"), S("<T_IMEMO>") } };
static const rperf_view_label_set_t ax_sets[] = { { NULL, 0 }, { ax_l1, 1 }, { ax_l2, 2 }, { ax_l3, 1 } };

typedef struct {
    rperf_profile_view_t v;
    rperf_view_sample_t samples[4];
} ax_t;

/* The view of sample type `t`: samples[] = the entries whose value is > 0. */
static void
ax_view(ax_t *a, rperf_value_type_t t)
{
    a->v = fx_view();
    a->v.mode = RPERF_MODE_ALLOC;
    a->v.frequency = 0;
    a->v.sample_type = t;
    a->v.label_sets = ax_sets;
    a->v.label_set_count = 4;
    a->v.alloc_samples = ax_entries;
    a->v.alloc_sample_count = 4;
    a->v.flags |= RPERF_VIEW_HAS_ALLOC_INTERVAL | RPERF_VIEW_HAS_ALLOC_COUNTS;
    a->v.alloc_interval = 1024;
    a->v.alloc_sampled = 7;
    a->v.alloc_live = 3;
    size_t n = 0;
    for (size_t i = 0; i < 4; i++) {
        const rperf_view_alloc_sample_t *e = &ax_entries[i];
        int64_t w = e->values[RPERF_VIEW_ALLOC_INDEX(t)];
        if (w > 0)
            a->samples[n++] = (rperf_view_sample_t){ e->frames, e->depth, w, e->thread_seq, e->label_set_id };
    }
    a->v.samples = a->samples;
    a->v.sample_count = n;
}

static int
str_is(rperf_str_t s, const char *lit)
{
    return s.len == strlen(lit) && (s.len == 0 || memcmp(s.ptr, lit, s.len) == 0);
}

static int
has_comment(const rperf_pprof_t *p, const char *lit)
{
    for (size_t i = 0; i < p->ncomments; i++)
        if (str_is(p->comments[i], lit))
            return 1;
    return 0;
}

static rperf_pprof_t *
pprof_of(const rperf_profile_view_t *v)
{
    unsigned char *data = NULL;
    size_t len = 0;
    char err[256];
    if (rperf_export_to_memory(&rperf_exporter_pprof, v, NULL, 1, &data, &len, err, sizeof err)) {
        fprintf(stderr, "pprof export failed: %s\n", err);
        return NULL;
    }
    rperf_pprof_t *p = NULL;
    if (rperf_pprof_decode(data, len, &p, err, sizeof err)) {
        fprintf(stderr, "decode failed: %s\n", err);
        p = NULL;
    }
    free(data);
    return p;
}

/* The sample whose `class` label is `klass`, or -1. */
static long
sample_of_class(const rperf_pprof_t *p, const char *klass)
{
    for (size_t i = 0; i < p->nsamples; i++)
        for (uint32_t l = 0; l < p->samples[i].nlabels; l++)
            if (str_is(p->samples[i].labels[l].key, "class") &&
                str_is(p->samples[i].labels[l].str, klass))
                return (long)i;
    return -1;
}

/* ---- tests -------------------------------------------------------------------- */

RPERF_TEST(view_check_rules)
{
    char err[160];
    ax_t a;
    ax_view(&a, RPERF_VALUE_INUSE_SPACE);
    RPERF_CHECK_EQ(rperf_view_check(&a.v, err, sizeof err), 0);

    rperf_profile_view_t v = a.v;
    v.sample_type = RPERF_VALUE_TIME; /* alloc mode has no time samples */
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
    v.mode = RPERF_MODE_CPU;          /* and a time view carries no allocation entries */
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
    RPERF_CHECK(strstr(err, "allocation entries in a time view") != NULL);
    v.alloc_sample_count = 0;
    v.alloc_samples = NULL;
    v.label_sets = fx_sets;
    v.label_set_count = 3;
    v.samples = fx_samples;
    v.sample_count = sizeof fx_samples / sizeof fx_samples[0];
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), 0);

    v = a.v;
    v.sample_type = (rperf_value_type_t)9;
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
    v = a.v;
    v.mode = (rperf_mode_t)7;
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);

    rperf_view_alloc_sample_t bad[1] = { ax_entries[0] };
    v = a.v;
    v.alloc_samples = bad;
    v.alloc_sample_count = 1;
    bad[0].values[2] = -1;
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
    RPERF_CHECK(strstr(err, "negative") != NULL);
    memset(bad[0].values, 0, sizeof bad[0].values);
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
    RPERF_CHECK(strstr(err, "all values are 0") != NULL);
    bad[0] = ax_entries[0];
    bad[0].label_set_id = 4;
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
    static const uint32_t far[] = {99};
    bad[0] = ax_entries[0];
    bad[0].frames = far;
    bad[0].depth = 1;
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
    RPERF_CHECK(strstr(err, "frame 99 out of range") != NULL);
    v.alloc_samples = NULL;
    RPERF_CHECK_EQ(rperf_view_check(&v, err, sizeof err), -EINVAL);
}

RPERF_TEST(type_names)
{
    RPERF_CHECK_STR(rperf_value_type_name(RPERF_VALUE_TIME), "time");
    RPERF_CHECK_STR(rperf_value_type_name(RPERF_VALUE_ALLOC_OBJECTS), "alloc_objects");
    RPERF_CHECK_STR(rperf_value_type_name(RPERF_VALUE_ALLOC_SPACE), "alloc_space");
    RPERF_CHECK_STR(rperf_value_type_name(RPERF_VALUE_INUSE_OBJECTS), "inuse_objects");
    RPERF_CHECK_STR(rperf_value_type_name(RPERF_VALUE_INUSE_SPACE), "inuse_space");
    RPERF_CHECK(rperf_value_type_name((rperf_value_type_t)5) == NULL);
    RPERF_CHECK_STR(rperf_value_type_unit(RPERF_VALUE_TIME), "nanoseconds");
    RPERF_CHECK_STR(rperf_value_type_unit(RPERF_VALUE_INUSE_OBJECTS), "count");
    RPERF_CHECK_STR(rperf_value_type_unit(RPERF_VALUE_ALLOC_SPACE), "bytes");
    RPERF_CHECK(rperf_value_type_unit((rperf_value_type_t)-1) == NULL);
}

/* A heap profile as Go writes it, whatever type is chosen: the chosen type
 * is only the default one. */
RPERF_TEST(pprof_heap_profile)
{
    static const char *const names[] = {"alloc_objects", "alloc_space", "inuse_objects",
                                        "inuse_space"};
    static const char *const units[] = {"count", "bytes", "count", "bytes"};
    for (int t = RPERF_VALUE_ALLOC_OBJECTS; t <= RPERF_VALUE_INUSE_SPACE; t++) {
        ax_t a;
        ax_view(&a, (rperf_value_type_t)t);
        rperf_pprof_t *p = pprof_of(&a.v);
        RPERF_CHECK(p != NULL);
        if (!p)
            continue;
        RPERF_CHECK_EQ(p->nsample_types, 4);
        for (size_t k = 0; k < 4 && k < p->nsample_types; k++) {
            RPERF_CHECK(str_is(p->sample_types[k].type, names[k]));
            RPERF_CHECK(str_is(p->sample_types[k].unit, units[k]));
        }
        RPERF_CHECK(str_is(p->default_sample_type, names[t - 1]));
        RPERF_CHECK(str_is(p->period_type.type, "space"));
        RPERF_CHECK(str_is(p->period_type.unit, "bytes"));
        /* interval x alloc_space / alloc_objects = 1024 x 204900 / 4097 */
        RPERF_CHECK_EQ(p->period, 51212);
        RPERF_CHECK(has_comment(p, "mode: alloc"));
        RPERF_CHECK(has_comment(p, "allocation interval: 1024"));
        for (size_t i = 0; i < p->ncomments; i++)
            RPERF_CHECK(p->comments[i].len < 10 || memcmp(p->comments[i].ptr, "frequency:", 10) != 0);
        /* a0 and a3 merged; a1 (nothing live) and a2 (nothing allocated) kept */
        RPERF_CHECK_EQ(p->nsamples, 3);
        long s = sample_of_class(p, "String"), arr = sample_of_class(p, "Array"),
             imemo = sample_of_class(p, "<T_IMEMO>");
        RPERF_CHECK(s >= 0 && arr >= 0 && imemo >= 0);
        if (s < 0 || arr < 0 || imemo < 0) {
            rperf_pprof_free(p);
            continue;
        }
        const int64_t want_s[] = {3073, 122980, 1025, 41060}, want_a[] = {1024, 81920, 0, 0},
                      want_i[] = {0, 0, 2048, 2000000};
        for (int k = 0; k < 4; k++) {
            RPERF_CHECK_EQ(p->samples[s].values[k], want_s[k]);
            RPERF_CHECK_EQ(p->samples[arr].values[k], want_a[k]);
            RPERF_CHECK_EQ(p->samples[imemo].values[k], want_i[k]);
        }
        RPERF_CHECK_EQ(p->samples[s].nlocations, 2);
        RPERF_CHECK_EQ(p->samples[imemo].nlocations, 1);
        /* labels: thread_seq, ractor (numeric), then the set's, class included */
        int seen = 0;
        for (uint32_t l = 0; l < p->samples[arr].nlabels; l++) {
            const rperf_pprof_label_t *lb = &p->samples[arr].labels[l];
            if (str_is(lb->key, "thread_seq"))
                seen += lb->is_num && lb->num == 1;
            else if (str_is(lb->key, "ractor"))
                seen += lb->is_num && lb->num == 1;
            else if (str_is(lb->key, "endpoint"))
                seen += str_is(lb->str, "GET /users");
        }
        RPERF_CHECK_EQ(seen, 3);
        rperf_pprof_free(p);
    }
}

/* Without an interval: no period, no interval comment; no bytes: the
 * period is the interval. */
RPERF_TEST(pprof_period_fallbacks)
{
    ax_t a;
    ax_view(&a, RPERF_VALUE_ALLOC_OBJECTS);
    a.v.flags &= ~(uint32_t)RPERF_VIEW_HAS_ALLOC_INTERVAL;
    rperf_pprof_t *p = pprof_of(&a.v);
    RPERF_CHECK(p != NULL);
    if (p) {
        RPERF_CHECK_EQ(p->period, 0);
        RPERF_CHECK(!has_comment(p, "allocation interval: 1024"));
        rperf_pprof_free(p);
    }
    static const rperf_view_alloc_sample_t counts_only[] = { { ax_st0, 2, 1, 1, {5, 0, 5, 0} } };
    ax_view(&a, RPERF_VALUE_ALLOC_OBJECTS);
    a.v.alloc_samples = counts_only;
    a.v.alloc_sample_count = 1;
    a.samples[0] = (rperf_view_sample_t){ ax_st0, 2, 5, 1, 1 };
    a.v.sample_count = 1;
    p = pprof_of(&a.v);
    RPERF_CHECK(p != NULL);
    if (p) {
        RPERF_CHECK_EQ(p->period, 1024);
        RPERF_CHECK_EQ(p->nsamples, 1);
        rperf_pprof_free(p);
    }
}

/* A cpu run that also sampled allocations: its allocation view keeps the
 * run's mode and frequency comments. */
RPERF_TEST(pprof_alloc_view_of_a_cpu_run)
{
    ax_t a;
    ax_view(&a, RPERF_VALUE_ALLOC_SPACE);
    a.v.mode = RPERF_MODE_CPU;
    a.v.frequency = 100;
    rperf_pprof_t *p = pprof_of(&a.v);
    RPERF_CHECK(p != NULL);
    if (p) {
        RPERF_CHECK(has_comment(p, "mode: cpu"));
        RPERF_CHECK(has_comment(p, "frequency: 100Hz"));
        RPERF_CHECK(str_is(p->default_sample_type, "alloc_space"));
        RPERF_CHECK_EQ(p->nsample_types, 4);
        rperf_pprof_free(p);
    }
}

RPERF_TEST(collapsed_values)
{
    ax_t a;
    ax_view(&a, RPERF_VALUE_INUSE_SPACE);
    char *s = fx_export("collapsed", &a.v, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "Object#main 2000000\nObject#main;Foo#bar 41060\n");
    free(s);
    ax_view(&a, RPERF_VALUE_ALLOC_OBJECTS);
    s = fx_export("collapsed", &a.v, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "Object#main;Foo#bar 4097\n");
    free(s);
}

RPERF_TEST(text_objects_and_bytes)
{
    ax_t a;
    ax_view(&a, RPERF_VALUE_INUSE_SPACE);
    char *s = fx_export("text", &a.v, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "Total: 1.9 MiB (inuse_space)\n"
                           "Sampled: 7 allocations, 3 live, interval 1024\n"
                           "\n"
                           " Flat:\n"
                           "             1.9 MiB  98.0%  Object#main (app.rb)\n"
                           "            40.1 KiB   2.0%  Foo#bar (app.rb)\n"
                           "\n"
                           " Cumulative:\n"
                           "             1.9 MiB 100.0%  Object#main (app.rb)\n"
                           "            40.1 KiB   2.0%  Foo#bar (app.rb)\n");
    free(s);
    ax_view(&a, RPERF_VALUE_INUSE_OBJECTS);
    a.v.flags &= ~(uint32_t)(RPERF_VIEW_HAS_ALLOC_COUNTS | RPERF_VIEW_HAS_ALLOC_INTERVAL);
    s = fx_export("text", &a.v, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "Total: 3073 objects (inuse_objects)\n"
                           "Samples: 3\n"
                           "\n"
                           " Flat:\n"
                           "           2,048 obj  66.6%  Object#main (app.rb)\n"
                           "           1,025 obj  33.4%  Foo#bar (app.rb)\n"
                           "\n"
                           " Cumulative:\n"
                           "           3,073 obj 100.0%  Object#main (app.rb)\n"
                           "           1,025 obj  33.4%  Foo#bar (app.rb)\n");
    free(s);
    /* small byte counts have no decimals */
    static const rperf_view_alloc_sample_t tiny[] = { { ax_st1, 1, 1, 0, {1, 40, 1, 40} } };
    ax_view(&a, RPERF_VALUE_ALLOC_SPACE);
    a.v.alloc_samples = tiny;
    a.v.alloc_sample_count = 1;
    a.samples[0] = (rperf_view_sample_t){ ax_st1, 1, 40, 1, 0 };
    a.v.sample_count = 1;
    rperf_export_options_t o;
    rperf_export_options_init(&o);
    o.header = 0;
    s = fx_export("text", &a.v, &o, NULL);
    if (s)
        RPERF_CHECK_STR(s, " Flat:\n"
                           "              40 B   100.0%  Object#main (app.rb)\n"
                           "\n"
                           " Cumulative:\n"
                           "              40 B   100.0%  Object#main (app.rb)\n");
    free(s);
}

RPERF_TEST(json_unit_and_name)
{
    ax_t a;
    ax_view(&a, RPERF_VALUE_ALLOC_SPACE);
    char *s = fx_export("json", &a.v, NULL, NULL);
    RPERF_CHECK(s && strstr(s, "\"name\":\"rperf alloc_space profile\""));
    RPERF_CHECK(s && strstr(s, "\"unit\":\"bytes\""));
    RPERF_CHECK(s && !strstr(s, "nanoseconds"));
    RPERF_CHECK(s && strstr(s, "\"weights\":[122880,81920,100]"));
    free(s);
    ax_view(&a, RPERF_VALUE_INUSE_OBJECTS);
    s = fx_export("json", &a.v, NULL, NULL);
    RPERF_CHECK(s && strstr(s, "\"unit\":\"none\""));
    RPERF_CHECK(s && strstr(s, "\"name\":\"rperf inuse_objects profile\""));
    free(s);
    /* empty: still the unit of the type */
    a.v.sample_count = 0;
    a.v.alloc_sample_count = 0;
    s = fx_export("json", &a.v, NULL, NULL);
    RPERF_CHECK(s && strstr(s, "\"name\":\"empty\",\"unit\":\"none\""));
    free(s);
}

RPERF_TEST(html_meta)
{
    ax_t a;
    ax_view(&a, RPERF_VALUE_INUSE_SPACE);
    char *s = fx_export("html", &a.v, NULL, NULL);
    RPERF_CHECK(s && strstr(s, "{\"version\":1,\"meta\":{\"mode\":\"alloc\",\"sample_type\":\"inuse_space\","
                               "\"unit\":\"bytes\",\"alloc_interval\":1024,\"alloc_sampled\":7,"
                               "\"alloc_live\":3,"));
    RPERF_CHECK(s && strstr(s, "\"entries\":3,\"total\":2041060}"));
    /* the class is a label: the page's label filter lists it */
    RPERF_CHECK(s && strstr(s, "[\"class\",\"\\u003cT_IMEMO\\u003e\"]"));
    free(s);
    rperf_profile_view_t t = fx_view();
    s = fx_export("html", &t, NULL, NULL);
    /* a time view's data has none of it */
    RPERF_CHECK(s && strstr(s, "{\"version\":1,\"meta\":{\"mode\":\"cpu\",\"frequency\":100,"));
    RPERF_CHECK(s && strstr(s, "\"total_ns\":45001000}"));
    RPERF_CHECK(s && !strstr(s, "\"sample_type\""));
    free(s);
}

RPERF_TEST(threads_example_column)
{
    ax_t a;
    ax_view(&a, RPERF_VALUE_ALLOC_OBJECTS);
    char *s = fx_export("threads", &a.v, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "thread_seq\tractor\tname\tentries\talloc_objects\tpercent\n"
                           "1\t1\tmain\t3\t4097\t100.00\n");
    free(s);
}

RPERF_TEST(bytes_unit)
{
    struct { uint64_t v; const char *unit; uint64_t tenths; } cases[] = {
        {0, "B", 0}, {1023, "B", 10230}, {1024, "KiB", 10}, {1536, "KiB", 15},
        {1048525, "MiB", 10},      /* 1023.95 KiB rounds up: 1.0 MiB */
        {1048524, "KiB", 10239},   /* 1023.949 KiB */
        {(uint64_t)3 << 30, "GiB", 30}, {UINT64_MAX, "EiB", 160},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t t = 0;
        const char *u = rperf__bytes_unit(cases[i].v, &t);
        RPERF_CHECK_STR(u, cases[i].unit);
        RPERF_CHECK_EQ(t, cases[i].tenths);
    }
}

/* ---- an exporter of ABI version 1 --------------------------------------------- */

static int
v1_encode(const rperf_profile_view_t *v, const rperf_export_options_t *o, rperf_writer_t *w)
{
    (void)o;
    return rperf_writer_printf(w, "%zu\n", v->sample_count);
}

static const rperf_exporter_ops_t v1_ops = {
    1, "alloc-test-v1", ".v1", "test: an exporter built for ABI version 1", 0, v1_encode, 0,
};

RPERF_TEST(abi_v1_exporters)
{
    RPERF_CHECK_EQ(rperf_exporter_register(&v1_ops), 0);
    RPERF_CHECK(rperf_exporter_find("alloc-test-v1") == &v1_ops);
    rperf_exporter_ops_t future = v1_ops;
    future.name = "alloc-test-v3";
    future.version = RPERF_EXPORTER_ABI_VERSION + 1;
    RPERF_CHECK_EQ(rperf_exporter_register(&future), -EINVAL);

    rperf_profile_view_t t = fx_view();
    char *s = fx_export("alloc-test-v1", &t, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "6\n");
    free(s);

    ax_t a;
    ax_view(&a, RPERF_VALUE_INUSE_SPACE);
    unsigned char *data = NULL;
    size_t len = 0;
    char err[256];
    RPERF_CHECK_EQ(rperf_export_to_memory(&v1_ops, &a.v, NULL, 0, &data, &len, err, sizeof err),
                   -ENOTSUP);
    RPERF_CHECK(strstr(err, "ABI version 1") != NULL);
    RPERF_CHECK(strstr(err, "inuse_space") != NULL);
    RPERF_CHECK(data == NULL);
}

int
main(void)
{
    return RPERF_RUN(RPERF_CASE(view_check_rules), RPERF_CASE(type_names),
                     RPERF_CASE(pprof_heap_profile), RPERF_CASE(pprof_period_fallbacks),
                     RPERF_CASE(pprof_alloc_view_of_a_cpu_run), RPERF_CASE(collapsed_values),
                     RPERF_CASE(text_objects_and_bytes), RPERF_CASE(json_unit_and_name),
                     RPERF_CASE(html_meta), RPERF_CASE(threads_example_column),
                     RPERF_CASE(bytes_unit), RPERF_CASE(abi_v1_exporters));
}
