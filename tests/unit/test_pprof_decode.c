/*
 * test_pprof_decode.c — the pprof reader (exporters/pprof_decode.c): round
 * trips through our own encoder (plain and gzip), profiles built by hand
 * (packed and unpacked fields, inlined lines, numeric labels, unknown
 * fields, ids in any order), and malformed input: every truncation of a
 * real profile, bit flips, bad varints, lengths past the end, out-of-range
 * string indices, missing or duplicate ids, wrong wire types, broken gzip.
 * Each must give 0 or an error with a message, never a crash or a read out
 * of bounds (CI runs this under ASan/UBSan).
 * Context: plain test program, no Ruby.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rperf_test.h"
#include "rperf_pprof_decode.h"
#include "test_exporter_fixture.h"

/* ---- helpers -------------------------------------------------------------- */

static int
str_is(rperf_str_t s, const char *lit)
{
    return s.len == strlen(lit) && (s.len == 0 || memcmp(s.ptr, lit, s.len) == 0);
}

/* Name of frame `k` (location k, innermost line) of sample `i`. */
static rperf_str_t
frame_name(const rperf_pprof_t *p, size_t i, uint32_t k)
{
    const rperf_pprof_location_t *loc = &p->locations[p->samples[i].locations[k]];
    if (!loc->nlines || loc->lines[0].function == RPERF_PPROF_NONE)
        return (rperf_str_t){"", 0};
    return p->functions[loc->lines[0].function].name;
}

static const rperf_pprof_label_t *
label(const rperf_pprof_t *p, size_t i, const char *key)
{
    for (uint32_t l = 0; l < p->samples[i].nlabels; l++)
        if (str_is(p->samples[i].labels[l].key, key))
            return &p->samples[i].labels[l];
    return NULL;
}

static unsigned char *
encode_fixture(int gzip, size_t *len)
{
    rperf_profile_view_t v = fx_view();
    unsigned char *data = NULL;
    char err[256];
    if (rperf_export_to_memory(&rperf_exporter_pprof, &v, NULL, gzip, &data, len, err,
                               sizeof err)) {
        fprintf(stderr, "encode failed: %s\n", err);
        return NULL;
    }
    return data;
}

/* Decode; on failure the message must be set. Returns rc. */
static int
decode(const void *data, size_t len, rperf_pprof_t **p, char *err, size_t errlen)
{
    *p = NULL;
    int rc = rperf_pprof_decode(data, len, p, err, errlen);
    if (rc) {
        RPERF_CHECK(*p == NULL);
        RPERF_CHECK(err[0] != '\0');
    } else {
        RPERF_CHECK(*p != NULL);
    }
    return rc;
}

/* A tiny protobuf builder for hand-made profiles. */
typedef struct {
    unsigned char b[4096];
    size_t n;
} pb_t;

static void
pb_varint(pb_t *pb, uint64_t v)
{
    while (v >= 0x80) {
        pb->b[pb->n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    pb->b[pb->n++] = (unsigned char)v;
}

static void
pb_field(pb_t *pb, uint32_t f, uint64_t v)
{
    pb_varint(pb, (uint64_t)f << 3);
    pb_varint(pb, v);
}

static void
pb_bytes(pb_t *pb, uint32_t f, const void *p, size_t n)
{
    pb_varint(pb, ((uint64_t)f << 3) | 2);
    pb_varint(pb, n);
    memcpy(pb->b + pb->n, p, n);
    pb->n += n;
}

static void
pb_msg(pb_t *pb, uint32_t f, const pb_t *m)
{
    pb_bytes(pb, f, m->b, m->n);
}

static void
pb_strings(pb_t *pb, const char *const *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        pb_bytes(pb, 6, s[i], strlen(s[i]));
}

static const char *const kStrings[] = {"", "cpu", "nanoseconds", "main", "a.rb", "inl", "k", "v"};
#define NSTR (sizeof kStrings / sizeof kStrings[0])

/* The valid base profile: one sample type, one sample (locations 10 then
 * 20, packed), location 10 with two lines (inl inlined into main), location
 * 20 with function 7, labels k=v and a numeric one. `mutate` (may be NULL)
 * gets a chance to change parts. */
typedef struct {
    uint64_t sample_loc2;        /* second location id of the sample */
    uint64_t fn_name;            /* string index of function 7's name */
    uint64_t line_fn;            /* function id of location 20's line */
    uint64_t loc20_id;           /* id of the second location */
    int values;                  /* number of values in the sample */
} base_t;

static const base_t kBase = {20, 3, 7, 20, 1};

static void
build(pb_t *out, const base_t *b)
{
    pb_t vt = {0}, s = {0}, packed = {0}, lab = {0}, loc = {0}, line = {0}, fn = {0};
    memset(out, 0, sizeof *out);
    pb_field(&vt, 1, 1);
    pb_field(&vt, 2, 2);
    pb_msg(out, 1, &vt);
    pb_varint(&packed, 10);
    pb_varint(&packed, b->sample_loc2);
    pb_bytes(&s, 1, packed.b, packed.n);
    for (int i = 0; i < b->values; i++)
        pb_field(&s, 2, 5000); /* unpacked */
    pb_field(&lab, 1, 6);
    pb_field(&lab, 2, 7);
    pb_msg(&s, 3, &lab);
    memset(&lab, 0, sizeof lab);
    pb_field(&lab, 1, 6);
    pb_field(&lab, 3, (uint64_t)-3); /* numeric, negative */
    pb_msg(&s, 3, &lab);
    pb_field(&s, 99, 1); /* unknown field: skipped */
    pb_msg(out, 2, &s);
    /* location 10: lines [inl (fn 8), main (fn 7)] */
    pb_field(&loc, 1, 10);
    pb_field(&line, 1, 8);
    pb_field(&line, 2, 4);
    pb_msg(&loc, 4, &line);
    memset(&line, 0, sizeof line);
    pb_field(&line, 1, 7);
    pb_field(&line, 2, 12);
    pb_msg(&loc, 4, &line);
    pb_msg(out, 4, &loc);
    memset(&loc, 0, sizeof loc);
    pb_field(&loc, 1, b->loc20_id);
    memset(&line, 0, sizeof line);
    pb_field(&line, 1, b->line_fn);
    pb_msg(&loc, 4, &line);
    pb_msg(out, 4, &loc);
    pb_field(&fn, 1, 7);
    pb_field(&fn, 2, b->fn_name);
    pb_field(&fn, 4, 4);
    pb_field(&fn, 5, 11);
    pb_msg(out, 5, &fn);
    memset(&fn, 0, sizeof fn);
    pb_field(&fn, 1, 8);
    pb_field(&fn, 2, 5);
    pb_msg(out, 5, &fn);
    pb_strings(out, kStrings, NSTR);
    pb_field(out, 12, 1000000);
    pb_field(out, 13, 3); /* comment, unpacked */
}

/* ---- round trips ---------------------------------------------------------------- */

static void
check_fixture(const rperf_pprof_t *p)
{
    RPERF_CHECK_EQ(p->nsample_types, 1);
    RPERF_CHECK(str_is(p->sample_types[0].type, "cpu"));
    RPERF_CHECK(str_is(p->sample_types[0].unit, "nanoseconds"));
    RPERF_CHECK(str_is(p->period_type.type, "cpu"));
    RPERF_CHECK_EQ(p->period, 10000000); /* 1e9 / 100 Hz */
    RPERF_CHECK_EQ(p->time_nanos, 1700000000000000000LL);
    RPERF_CHECK_EQ(p->duration_nanos, 50000000);
    RPERF_CHECK_EQ(p->ncomments, 4);
    RPERF_CHECK(str_is(p->comments[0], "rperf 0.7.0"));
    RPERF_CHECK(str_is(p->comments[2], "frequency: 100Hz"));
    RPERF_CHECK(str_is(p->comments[3], "ruby: ruby 3.3.8 (test)"));
    /* s0 and s5 merged: 5 samples in first-seen order. */
    RPERF_CHECK_EQ(p->nsamples, 5);
    RPERF_CHECK_EQ(p->samples[0].values[0], 23000000);
    RPERF_CHECK_EQ(p->samples[0].nlocations, 2);
    RPERF_CHECK(str_is(frame_name(p, 0, 0), "Foo#bar"));
    RPERF_CHECK(str_is(frame_name(p, 0, 1), "Object#main"));
    const rperf_pprof_location_t *leaf = &p->locations[p->samples[0].locations[0]];
    RPERF_CHECK_EQ(leaf->nlines, 1);
    RPERF_CHECK_EQ(leaf->lines[0].line, 10);
    const rperf_pprof_function_t *fn = &p->functions[leaf->lines[0].function];
    RPERF_CHECK(str_is(fn->filename, "app.rb"));
    RPERF_CHECK_EQ(fn->start_line, 10);
    const rperf_pprof_label_t *l = label(p, 0, "thread_seq");
    RPERF_CHECK(l && l->is_num && l->num == 1);
    l = label(p, 0, "ractor");
    RPERF_CHECK(l && l->is_num && l->num == 1);
    l = label(p, 1, "endpoint");
    RPERF_CHECK(l && !l->is_num && str_is(l->str, "GET /users"));
    RPERF_CHECK_EQ(p->samples[1].nlocations, 3);
    RPERF_CHECK(str_is(frame_name(p, 1, 0), "Integer#times"));
    /* invalid UTF-8 was sanitised by the encoder, so it reads back as U+FFFD */
    RPERF_CHECK(str_is(frame_name(p, 3, 0), "bad\xef\xbf\xbd;na me\n"));
    l = label(p, 3, "k\xef\xbf\xbd");
    RPERF_CHECK(l && str_is(l->str, "v\xef\xbf\xbd"));
    RPERF_CHECK(str_is(frame_name(p, 3, 1), "")); /* the empty C-method label */
    RPERF_CHECK_EQ(p->samples[4].values[0], 7000000);
    l = label(p, 4, "ractor");
    RPERF_CHECK(l && l->num == 2);
    RPERF_CHECK_EQ(p->frame_count, 2 + 3 + 3 + 3 + 2);
}

RPERF_TEST(round_trip_plain_and_gzip)
{
    for (int gz = 0; gz <= 1; gz++) {
        size_t len;
        unsigned char *data = encode_fixture(gz, &len);
        RPERF_CHECK(data != NULL);
        if (!data)
            return;
        if (gz)
            RPERF_CHECK(data[0] == 0x1f && data[1] == 0x8b);
        rperf_pprof_t *p;
        char err[256];
        RPERF_CHECK_EQ(decode(data, len, &p, err, sizeof err), 0);
        if (p)
            check_fixture(p);
        rperf_pprof_free(p);
        free(data);
    }
}

RPERF_TEST(round_trip_empty_and_deep)
{
    rperf_profile_view_t v = fx_empty_view();
    unsigned char *data = NULL;
    size_t len;
    char err[256];
    RPERF_CHECK_EQ(rperf_export_to_memory(&rperf_exporter_pprof, &v, NULL, 1, &data, &len, err,
                                          sizeof err), 0);
    rperf_pprof_t *p;
    RPERF_CHECK_EQ(decode(data, len, &p, err, sizeof err), 0);
    if (p) {
        RPERF_CHECK_EQ(p->nsamples, 0);
        RPERF_CHECK(str_is(p->sample_types[0].type, "wall"));
    }
    rperf_pprof_free(p);
    free(data);

    fx_deep_t deep;
    fx_deep_init(&deep, 3000);
    RPERF_CHECK_EQ(rperf_export_to_memory(&rperf_exporter_pprof, &deep.v, NULL, 0, &data, &len,
                                          err, sizeof err), 0);
    RPERF_CHECK_EQ(decode(data, len, &p, err, sizeof err), 0);
    if (p) {
        RPERF_CHECK_EQ(p->samples[0].nlocations, 3000);
        RPERF_CHECK(str_is(frame_name(p, 0, 0), "m2999"));
        RPERF_CHECK(str_is(frame_name(p, 0, 2999), "m0"));
    }
    rperf_pprof_free(p);
    free(data);
    fx_deep_free(&deep);
}

RPERF_TEST(hand_built_profile)
{
    pb_t pb;
    build(&pb, &kBase);
    rperf_pprof_t *p;
    char err[256];
    RPERF_CHECK_EQ(decode(pb.b, pb.n, &p, err, sizeof err), 0);
    if (!p)
        return;
    RPERF_CHECK_EQ(p->nsamples, 1);
    RPERF_CHECK_EQ(p->samples[0].nlocations, 2);
    const rperf_pprof_location_t *l0 = &p->locations[p->samples[0].locations[0]];
    RPERF_CHECK_EQ(l0->id, 10);
    RPERF_CHECK_EQ(l0->nlines, 2);
    RPERF_CHECK(str_is(p->functions[l0->lines[0].function].name, "inl"));
    RPERF_CHECK(str_is(p->functions[l0->lines[1].function].name, "main"));
    RPERF_CHECK_EQ(l0->lines[1].line, 12);
    RPERF_CHECK(str_is(frame_name(p, 0, 1), "main"));
    RPERF_CHECK_EQ(p->samples[0].values[0], 5000);
    const rperf_pprof_label_t *lb = &p->samples[0].labels[1];
    RPERF_CHECK(lb->is_num && lb->num == -3);
    RPERF_CHECK(str_is(p->samples[0].labels[0].str, "v"));
    RPERF_CHECK_EQ(p->period, 1000000);
    RPERF_CHECK(str_is(p->comments[0], "main"));
    RPERF_CHECK_EQ(p->frame_count, 3);
    rperf_pprof_free(p);

    /* A line with function id 0 has no function. */
    base_t b = kBase;
    b.line_fn = 0;
    build(&pb, &b);
    RPERF_CHECK_EQ(decode(pb.b, pb.n, &p, err, sizeof err), 0);
    if (p)
        RPERF_CHECK_EQ(p->locations[p->samples[0].locations[1]].lines[0].function,
                       RPERF_PPROF_NONE);
    rperf_pprof_free(p);
}

/* ---- malformed input ----------------------------------------------------------------- */

static void
expect_error(const void *data, size_t len, int want_rc, const char *want_msg)
{
    rperf_pprof_t *p;
    char err[256];
    int rc = decode(data, len, &p, err, sizeof err);
    RPERF_CHECK_EQ(rc, want_rc);
    if (!strstr(err, want_msg)) {
        fprintf(stderr, "message \"%s\" lacks \"%s\"\n", err, want_msg);
        RPERF_CHECK(strstr(err, want_msg) != NULL);
    }
    rperf_pprof_free(p);
}

RPERF_TEST(bad_references)
{
    pb_t pb;
    base_t b = kBase;
    b.fn_name = 99;
    build(&pb, &b);
    expect_error(pb.b, pb.n, -EINVAL, "Function.name at offset");
    expect_error(pb.b, pb.n, -EINVAL, "string index 99 out of range (8 strings)");

    b = kBase;
    b.sample_loc2 = 21;
    build(&pb, &b);
    expect_error(pb.b, pb.n, -EINVAL, "sample 0 refers to location id 21, which does not exist");

    b = kBase;
    b.line_fn = 9;
    build(&pb, &b);
    expect_error(pb.b, pb.n, -EINVAL, "function id 9, which does not exist");

    b = kBase;
    b.loc20_id = 10;
    build(&pb, &b);
    expect_error(pb.b, pb.n, -EINVAL, "duplicate location id 10");

    b = kBase;
    b.values = 2;
    build(&pb, &b);
    expect_error(pb.b, pb.n, -EINVAL, "sample 0 has 2 values, expected 1");
}

RPERF_TEST(bad_framing)
{
    pb_t pb;
    /* Empty input, text, no string table, a non-empty first string. */
    expect_error("", 0, -EINVAL, "no string table");
    expect_error("hello, world\n", 13, -EINVAL, "");
    memset(&pb, 0, sizeof pb);
    pb_field(&pb, 12, 5);
    expect_error(pb.b, pb.n, -EINVAL, "no string table");
    memset(&pb, 0, sizeof pb);
    pb_bytes(&pb, 6, "x", 1);
    expect_error(pb.b, pb.n, -EINVAL, "string_table[0] is not empty");

    /* A varint of 11 bytes; one of 10 bytes over 64 bits; a truncated one. */
    unsigned char v11[12] = {0x60};
    memset(v11 + 1, 0xff, 10);
    v11[11] = 0x01;
    expect_error(v11, sizeof v11, -EINVAL, "varint over 64 bits at offset 1");
    unsigned char v10[11] = {0x60};
    memset(v10 + 1, 0xff, 9);
    v10[10] = 0x02;
    expect_error(v10, sizeof v10, -EINVAL, "varint over 64 bits");
    unsigned char vt[3] = {0x60, 0x80, 0x80};
    expect_error(vt, sizeof vt, -EINVAL, "truncated varint at offset 1");

    /* A length far past the end (a "huge" allocation must not be tried). */
    unsigned char huge[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00};
    expect_error(huge, sizeof huge, -EINVAL, "exceeds the 1 bytes left");

    /* Groups, a bad wire type, field number 0, a known field with the wrong wire type. */
    unsigned char group[] = {0x13, 0x14};
    expect_error(group, sizeof group, -EINVAL, "unsupported wire type 3");
    unsigned char wt7[] = {0x17};
    expect_error(wt7, sizeof wt7, -EINVAL, "unsupported wire type 7");
    unsigned char f0[] = {0x00, 0x01};
    expect_error(f0, sizeof f0, -EINVAL, "invalid field number 0");
    memset(&pb, 0, sizeof pb);
    pb_strings(&pb, kStrings, NSTR);
    pb_field(&pb, 2, 1); /* sample as a varint */
    expect_error(pb.b, pb.n, -EINVAL, "Profile.sample at offset");
    memset(&pb, 0, sizeof pb);
    pb_strings(&pb, kStrings, NSTR);
    unsigned char fixed[] = {0x61, 1, 2, 3}; /* field 12, fixed64, truncated */
    memcpy(pb.b + pb.n, fixed, sizeof fixed);
    pb.n += sizeof fixed;
    expect_error(pb.b, pb.n, -EINVAL, "truncated fixed64 field 12");
}

RPERF_TEST(every_truncation_and_bit_flip)
{
    size_t len;
    unsigned char *data = encode_fixture(0, &len);
    RPERF_CHECK(data != NULL);
    if (!data)
        return;
    /* Each prefix on its own heap block, so ASan sees any read past it. */
    for (size_t n = 0; n < len; n++) {
        unsigned char *cut = malloc(n ? n : 1);
        memcpy(cut, data, n);
        rperf_pprof_t *p;
        char err[256];
        decode(cut, n, &p, err, sizeof err);
        rperf_pprof_free(p);
        free(cut);
    }
    unsigned char *copy = malloc(len);
    int errors = 0;
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(copy, data, len);
            copy[i] ^= (unsigned char)(1u << bit);
            rperf_pprof_t *p;
            char err[256];
            errors += decode(copy, len, &p, err, sizeof err) != 0;
            rperf_pprof_free(p);
        }
    }
    RPERF_CHECK(errors > 0);
    free(copy);
    free(data);
}

RPERF_TEST(broken_gzip)
{
    size_t len;
    unsigned char *data = encode_fixture(1, &len);
    RPERF_CHECK(data != NULL);
    if (!data)
        return;
    expect_error(data, len / 2, -EINVAL, "truncated gzip data");
    expect_error(data, 2, -EINVAL, "truncated gzip data");
    unsigned char *copy = malloc(len);
    memcpy(copy, data, len);
    memset(copy + 10, 0xff, 8); /* the deflate stream */
    expect_error(copy, len, -EINVAL, "corrupt gzip data");
    free(copy);
    free(data);
}

int
main(void)
{
    return RPERF_RUN(RPERF_CASE(round_trip_plain_and_gzip), RPERF_CASE(round_trip_empty_and_deep),
                     RPERF_CASE(hand_built_profile), RPERF_CASE(bad_references),
                     RPERF_CASE(bad_framing), RPERF_CASE(every_truncation_and_bit_flip),
                     RPERF_CASE(broken_gzip));
}
