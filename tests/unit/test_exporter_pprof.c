/*
 * test_exporter_pprof.c — the pprof exporter, checked by decoding its
 * output with a tiny protobuf reader written here (independent of the
 * encoder): field order, string table rules, ids and references, sample
 * merging, labels, lines, metadata, gzip, invalid UTF-8, empty and deep
 * profiles. Context: plain C test program, no Ruby.
 */
#include <errno.h>
#include <zlib.h>

#include "rperf_test.h"
#include "test_exporter_fixture.h"
#include "exporter_internal.h" /* rperf__utf8_valid for checking output */

/* ---- minimal protobuf reader ---- */

typedef struct {
    const unsigned char *p, *end;
    int bad;
} pb_t;

static uint64_t
pb_varint(pb_t *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) {
            r->bad = 1;
            return 0;
        }
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = 1;
    return 0;
}

/* Next field: returns 0 at end. For wire type 2, sub and sublen hold the bytes. */
static int
pb_next(pb_t *r, uint32_t *field, uint64_t *v, const unsigned char **sub, size_t *sublen)
{
    if (r->p >= r->end || r->bad)
        return 0;
    uint64_t tag = pb_varint(r);
    *field = (uint32_t)(tag >> 3);
    switch (tag & 7) {
    case 0:
        *v = pb_varint(r);
        *sub = NULL;
        break;
    case 2: {
        uint64_t n = pb_varint(r);
        if ((uint64_t)(r->end - r->p) < n) {
            r->bad = 1;
            return 0;
        }
        *sub = r->p;
        *sublen = (size_t)n;
        r->p += n;
        break;
    }
    default:
        r->bad = 1;
        return 0;
    }
    return !r->bad;
}

#define MAXN 4096

typedef struct {
    uint64_t loc[2048];
    size_t nloc;
    uint64_t values[4];
    size_t nvalues;
    uint64_t lab_key[8], lab_str[8], lab_num[8];
    size_t nlab;
} psample_t;

typedef struct {
    const unsigned char *str[MAXN];
    size_t strlen_[MAXN];
    size_t nstr;
    uint64_t sample_type[8][2];
    size_t n_sample_type;
    psample_t sample[64];
    size_t nsample;
    uint64_t loc_id[MAXN], loc_fn[MAXN], loc_line[MAXN];
    size_t nloc;
    uint64_t fn_id[MAXN], fn_name[MAXN], fn_file[MAXN], fn_start[MAXN];
    size_t nfn;
    uint64_t time_nanos, duration_nanos, period;
    int has_time, has_duration;
    uint64_t period_type[2];
    uint64_t comment[16];
    size_t ncomment;
    uint32_t field_order[64];
    size_t nfields;
    int bad;
} prof_t;

static void
packed_or_single(const unsigned char *sub, size_t sublen, uint64_t v, uint64_t *out, size_t *n,
                 size_t cap, int *bad)
{
    if (!sub) {
        if (*n < cap)
            out[(*n)++] = v;
        return;
    }
    pb_t r = { sub, sub + sublen, 0 };
    while (r.p < r.end) {
        uint64_t x = pb_varint(&r);
        if (*n < cap)
            out[(*n)++] = x;
    }
    if (r.bad)
        *bad = 1;
}

/* The varint fields 1..n-1 of the message (s, l) into f[1..n-1] (0 when
 * absent; later occurrences win). */
static void
varint_fields(const unsigned char *s, size_t l, uint64_t *f, uint32_t n)
{
    pb_t m = { s, s ? s + l : NULL, 0 };
    uint32_t g;
    uint64_t x = 0;
    const unsigned char *s2;
    size_t l2;
    memset(f, 0, n * sizeof *f);
    while (pb_next(&m, &g, &x, &s2, &l2))
        if (g < n && !s2)
            f[g] = x;
}

static void
decode(prof_t *pr, const unsigned char *data, size_t len)
{
    memset(pr, 0, sizeof *pr);
    pb_t r = { data, data + len, 0 };
    uint32_t f;
    uint64_t v = 0;
    const unsigned char *sub;
    size_t sublen = 0;
    while (pb_next(&r, &f, &v, &sub, &sublen)) {
        if (pr->nfields == 0 || pr->field_order[pr->nfields - 1] != f) {
            if (pr->nfields < 64)
                pr->field_order[pr->nfields++] = f;
        }
        pb_t m = { sub, sub ? sub + sublen : NULL, 0 };
        uint32_t g;
        uint64_t w = 0;
        const unsigned char *s2;
        size_t l2 = 0;
        switch (f) {
        case 1:
        case 11: {
            uint64_t vt[3];
            varint_fields(sub, sublen, vt, 3);
            uint64_t t = vt[1], u = vt[2];
            if (f == 1 && pr->n_sample_type < 8) {
                pr->sample_type[pr->n_sample_type][0] = t;
                pr->sample_type[pr->n_sample_type++][1] = u;
            } else if (f == 11) {
                pr->period_type[0] = t;
                pr->period_type[1] = u;
            }
            break;
        }
        case 2: {
            if (pr->nsample >= 64) { pr->bad = 1; break; }
            psample_t *sm = &pr->sample[pr->nsample++];
            while (pb_next(&m, &g, &w, &s2, &l2)) {
                if (g == 1)
                    packed_or_single(s2, l2, w, sm->loc, &sm->nloc, 2048, &pr->bad);
                else if (g == 2)
                    packed_or_single(s2, l2, w, sm->values, &sm->nvalues, 4, &pr->bad);
                else if (g == 3 && sm->nlab < 8) {
                    uint64_t lf[4]; /* Label {1 key, 2 str, 3 num} */
                    varint_fields(s2, l2, lf, 4);
                    size_t k = sm->nlab++;
                    sm->lab_key[k] = lf[1];
                    sm->lab_str[k] = lf[2];
                    sm->lab_num[k] = lf[3];
                }
            }
            break;
        }
        case 4: {
            size_t k = pr->nloc++;
            while (pb_next(&m, &g, &w, &s2, &l2)) {
                if (g == 1) pr->loc_id[k] = w;
                if (g == 4) {
                    uint64_t lf[3]; /* Line {1 function_id, 2 line} */
                    varint_fields(s2, l2, lf, 3);
                    pr->loc_fn[k] = lf[1];
                    pr->loc_line[k] = lf[2];
                }
            }
            break;
        }
        case 5: {
            uint64_t ff[6]; /* Function {1 id, 2 name, 4 filename, 5 start_line} */
            varint_fields(sub, sublen, ff, 6);
            size_t k = pr->nfn++;
            pr->fn_id[k] = ff[1];
            pr->fn_name[k] = ff[2];
            pr->fn_file[k] = ff[4];
            pr->fn_start[k] = ff[5];
            break;
        }
        case 6:
            if (pr->nstr < MAXN) {
                pr->str[pr->nstr] = sub;
                pr->strlen_[pr->nstr++] = sublen;
            }
            break;
        case 9: pr->time_nanos = v; pr->has_time = 1; break;
        case 10: pr->duration_nanos = v; pr->has_duration = 1; break;
        case 12: pr->period = v; break;
        case 13: packed_or_single(sub, sublen, v, pr->comment, &pr->ncomment, 16, &pr->bad); break;
        default: break;
        }
        if (m.bad)
            pr->bad = 1;
    }
    if (r.bad)
        pr->bad = 1;
}

static int
str_is(const prof_t *pr, uint64_t id, const char *s)
{
    return id < pr->nstr && pr->strlen_[id] == strlen(s) &&
           memcmp(pr->str[id], s, pr->strlen_[id]) == 0;
}

static int
has_fn(const prof_t *pr, uint64_t id)
{
    for (size_t i = 0; i < pr->nfn; i++)
        if (pr->fn_id[i] == id)
            return 1;
    return 0;
}

/* Structural rules every pprof output must satisfy (validators §1.8). */
static void
check_structure(const prof_t *pr)
{
    RPERF_CHECK(!pr->bad);
    RPERF_CHECK(pr->nstr >= 1);
    RPERF_CHECK(pr->nstr >= 1 && pr->strlen_[0] == 0);
    for (size_t i = 0; i < pr->nstr; i++) {
        RPERF_CHECK(rperf__utf8_valid((const char *)pr->str[i], pr->strlen_[i]));
        for (size_t j = i + 1; j < pr->nstr && j < i + 200; j++)
            RPERF_CHECK(!(pr->strlen_[i] == pr->strlen_[j] &&
                          memcmp(pr->str[i], pr->str[j], pr->strlen_[i]) == 0));
    }
    RPERF_CHECK_EQ(pr->n_sample_type, 1);
    for (size_t i = 0; i < pr->nfn; i++) {
        RPERF_CHECK(pr->fn_id[i] != 0);
        RPERF_CHECK(pr->fn_name[i] < pr->nstr);
        RPERF_CHECK(pr->fn_file[i] < pr->nstr);
    }
    for (size_t i = 0; i < pr->nloc; i++) {
        RPERF_CHECK(pr->loc_id[i] != 0);
        RPERF_CHECK(has_fn(pr, pr->loc_fn[i]));
        for (size_t j = 0; j < i; j++)
            RPERF_CHECK(pr->loc_id[j] != pr->loc_id[i]);
    }
    for (size_t s = 0; s < pr->nsample; s++) {
        RPERF_CHECK_EQ(pr->sample[s].nvalues, pr->n_sample_type);
        for (size_t l = 0; l < pr->sample[s].nloc; l++) {
            int found = 0;
            for (size_t i = 0; i < pr->nloc; i++)
                found |= pr->loc_id[i] == pr->sample[s].loc[l];
            RPERF_CHECK(found);
        }
        for (size_t l = 0; l < pr->sample[s].nlab; l++) {
            RPERF_CHECK(pr->sample[s].lab_key[l] != 0 && pr->sample[s].lab_key[l] < pr->nstr);
            RPERF_CHECK(pr->sample[s].lab_str[l] < pr->nstr);
        }
    }
}

static unsigned char *
export_pprof(const rperf_profile_view_t *v, int gzip, size_t *len)
{
    unsigned char *data = NULL;
    char err[256];
    int rc = rperf_export_to_memory(&rperf_exporter_pprof, v, NULL, gzip, &data, len, err,
                                    sizeof err);
    RPERF_CHECK_EQ(rc, 0);
    return data;
}

/* Find the sample with these leaf-first location ids and this thread_seq. */
static int
find_sample(const prof_t *pr, const uint64_t *locs, size_t n, uint64_t thread_seq)
{
    for (size_t s = 0; s < pr->nsample; s++) {
        if (pr->sample[s].nloc != n || memcmp(pr->sample[s].loc, locs, n * sizeof *locs))
            continue;
        uint64_t ts = 0;
        for (size_t l = 0; l < pr->sample[s].nlab; l++)
            if (str_is(pr, pr->sample[s].lab_key[l], "thread_seq"))
                ts = pr->sample[s].lab_num[l];
        if (ts == thread_seq)
            return (int)s;
    }
    return -1;
}

static prof_t pr; /* large: keep off the stack */

RPERF_TEST(pprof_fixture_structure)
{
    rperf_profile_view_t v = fx_view();
    size_t len = 0;
    unsigned char *data = export_pprof(&v, 0, &len);
    RPERF_CHECK(data && len > 0);
    if (!data)
        return;
    RPERF_CHECK_EQ(data[0], 0x0a);
    decode(&pr, data, len);
    check_structure(&pr);
    /* field order: 1, 2, 4, 5, 6, 9, 10, 11, 12, 13 */
    static const uint32_t want[] = {1, 2, 4, 5, 6, 9, 10, 11, 12, 13};
    RPERF_CHECK_EQ(pr.nfields, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < pr.nfields && i < sizeof want / sizeof want[0]; i++)
        RPERF_CHECK_EQ(pr.field_order[i], want[i]);
    RPERF_CHECK(str_is(&pr, pr.sample_type[0][0], "cpu"));
    RPERF_CHECK(str_is(&pr, pr.sample_type[0][1], "nanoseconds"));
    RPERF_CHECK(str_is(&pr, pr.period_type[0], "cpu"));
    RPERF_CHECK_EQ(pr.period, 10000000);
    RPERF_CHECK(pr.has_time && pr.time_nanos == 1700000000000000000ULL);
    RPERF_CHECK(pr.has_duration && pr.duration_nanos == 50000000);
    RPERF_CHECK_EQ(pr.nloc, 6);
    RPERF_CHECK_EQ(pr.nfn, 6);
    /* s0 and s5 merge: 5 samples */
    RPERF_CHECK_EQ(pr.nsample, 5);
    free(data);
}

/* Encode the shared fixture and decode it into `pr`; NULL on failure. */
static unsigned char *fixture_decoded(void)
{
    rperf_profile_view_t v = fx_view();
    size_t len = 0;
    unsigned char *data = export_pprof(&v, 0, &len);
    if (data)
        decode(&pr, data, len);
    return data;
}

RPERF_TEST(pprof_functions_lines_comments)
{
    unsigned char *data = fixture_decoded();
    if (!data)
        return;
    /* function 2 = Foo#bar app.rb start_line 10; location 2 line 10 */
    int seen = 0;
    for (size_t i = 0; i < pr.nfn; i++) {
        if (pr.fn_id[i] == 2) {
            seen = 1;
            RPERF_CHECK(str_is(&pr, pr.fn_name[i], "Foo#bar"));
            RPERF_CHECK(str_is(&pr, pr.fn_file[i], "app.rb"));
            RPERF_CHECK_EQ(pr.fn_start[i], 10);
        }
        if (pr.fn_id[i] == 3)
            RPERF_CHECK_EQ(pr.fn_start[i], 0); /* unknown line: not written */
        if (pr.fn_id[i] == 5) /* invalid UTF-8 sanitised */
            RPERF_CHECK(str_is(&pr, pr.fn_name[i], "bad\xef\xbf\xbd;na me\n"));
    }
    RPERF_CHECK(seen);
    for (size_t i = 0; i < pr.nloc; i++) {
        if (pr.loc_id[i] == 2) {
            RPERF_CHECK_EQ(pr.loc_fn[i], 2);
            RPERF_CHECK_EQ(pr.loc_line[i], 10);
        }
    }
    RPERF_CHECK_EQ(pr.ncomment, 4);
    RPERF_CHECK(str_is(&pr, pr.comment[0], "rperf 0.7.0"));
    RPERF_CHECK(str_is(&pr, pr.comment[1], "mode: cpu"));
    RPERF_CHECK(str_is(&pr, pr.comment[2], "frequency: 100Hz"));
    RPERF_CHECK(str_is(&pr, pr.comment[3], "ruby: ruby 3.3.8 (test)"));
    free(data);
}

RPERF_TEST(pprof_samples_labels_merge)
{
    unsigned char *data = fixture_decoded();
    if (!data)
        return;
    static const uint64_t st0[] = {2, 1}, st1[] = {3, 2, 1}, st3[] = {5, 6, 1};
    int a = find_sample(&pr, st0, 2, 1);
    RPERF_CHECK(a >= 0);
    if (a >= 0) {
        RPERF_CHECK_EQ(pr.sample[a].values[0], 23000000); /* s0 + s5 */
        /* thread_seq then ractor, both numeric */
        RPERF_CHECK_EQ(pr.sample[a].nlab, 2);
        RPERF_CHECK(str_is(&pr, pr.sample[a].lab_key[0], "thread_seq"));
        RPERF_CHECK(str_is(&pr, pr.sample[a].lab_key[1], "ractor"));
        RPERF_CHECK_EQ(pr.sample[a].lab_num[1], 1);
        RPERF_CHECK_EQ(pr.sample[a].lab_str[0], 0);
    }
    int b = find_sample(&pr, st0, 2, 2);
    RPERF_CHECK(b >= 0 && pr.sample[b].values[0] == 7000000);
    int c = find_sample(&pr, st1, 3, 1);
    RPERF_CHECK(c >= 0);
    if (c >= 0) {
        RPERF_CHECK_EQ(pr.sample[c].nlab, 3);
        RPERF_CHECK(str_is(&pr, pr.sample[c].lab_key[2], "endpoint"));
        RPERF_CHECK(str_is(&pr, pr.sample[c].lab_str[2], "GET /users"));
    }
    int d = find_sample(&pr, st3, 3, 2);
    RPERF_CHECK(d >= 0);
    if (d >= 0) {
        RPERF_CHECK_EQ(pr.sample[d].nlab, 3);
        RPERF_CHECK(str_is(&pr, pr.sample[d].lab_key[2], "k\xef\xbf\xbd"));
        RPERF_CHECK(str_is(&pr, pr.sample[d].lab_str[2], "v\xef\xbf\xbd"));
        RPERF_CHECK_EQ(pr.sample[d].values[0], 1000);
    }
    free(data);
}

RPERF_TEST(pprof_wall_and_gzip_roundtrip)
{
    rperf_profile_view_t v = fx_view();
    v.mode = RPERF_MODE_WALL;
    v.flags = 0; /* no time, no duration */
    v.threads = NULL;
    v.thread_count = 0; /* no ractor labels */
    size_t len = 0, zlen = 0;
    unsigned char *raw = export_pprof(&v, 0, &len);
    unsigned char *gz = export_pprof(&v, 1, &zlen);
    if (!raw || !gz)
        return;
    RPERF_CHECK(zlen > 18 && gz[0] == 0x1f && gz[1] == 0x8b);
    unsigned char *back = malloc(len + 16);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    RPERF_CHECK_EQ(inflateInit2(&zs, 15 + 16), Z_OK);
    zs.next_in = gz;
    zs.avail_in = (uInt)zlen;
    zs.next_out = back;
    zs.avail_out = (uInt)(len + 16);
    RPERF_CHECK_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
    RPERF_CHECK_EQ(zs.total_out, len);
    RPERF_CHECK(memcmp(back, raw, len) == 0);
    inflateEnd(&zs);
    decode(&pr, raw, len);
    check_structure(&pr);
    RPERF_CHECK(str_is(&pr, pr.sample_type[0][0], "wall"));
    RPERF_CHECK(!pr.has_time && !pr.has_duration);
    for (size_t s = 0; s < pr.nsample; s++)
        for (size_t l = 0; l < pr.sample[s].nlab; l++)
            RPERF_CHECK(!str_is(&pr, pr.sample[s].lab_key[l], "ractor"));
    free(back);
    free(raw);
    free(gz);
}

RPERF_TEST(pprof_empty_profile)
{
    rperf_profile_view_t v = fx_empty_view();
    size_t len = 0;
    unsigned char *data = export_pprof(&v, 0, &len);
    if (!data)
        return;
    decode(&pr, data, len);
    check_structure(&pr);
    RPERF_CHECK_EQ(pr.nsample, 0);
    RPERF_CHECK_EQ(pr.period, 1000000);
    RPERF_CHECK(str_is(&pr, pr.sample_type[0][0], "wall"));
    free(data);
}

RPERF_TEST(pprof_deep_stack)
{
    fx_deep_t d;
    fx_deep_init(&d, 1500);
    size_t len = 0;
    unsigned char *data = export_pprof(&d.v, 0, &len);
    if (data) {
        decode(&pr, data, len);
        check_structure(&pr);
        RPERF_CHECK_EQ(pr.nsample, 1);
        RPERF_CHECK_EQ(pr.sample[0].nloc, 1500);
        RPERF_CHECK_EQ(pr.sample[0].loc[0], 1500); /* leaf = frame 1499 */
        RPERF_CHECK_EQ(pr.sample[0].loc[1499], 1);
    }
    free(data);
    fx_deep_free(&d);
}

/* The reserved key "pid" with a canonical decimal integer value is a
 * numeric label (Label.num, no string); any other key or form stays a
 * string label. */
RPERF_TEST(pprof_pid_label_is_numeric)
{
    static const rperf_view_label_t l_pid[] = { { S("pid"), S("4711") }, { S("endpoint"), S("GET /") } };
    static const rperf_view_label_t l_neg[] = { { S("pid"), S("-3") } };
    static const rperf_view_label_t l_zero[] = { { S("pid"), S("007") } };
    static const rperf_view_label_t l_text[] = { { S("pid"), S("12a") } };
    static const rperf_view_label_t l_other[] = { { S("port"), S("12") } };
    static const rperf_view_label_t l_big[] = { { S("pid"), S("9223372036854775808") } };
    static const rperf_view_label_set_t sets[] = {
        { NULL, 0 }, { l_pid, 2 }, { l_neg, 1 }, { l_zero, 1 }, { l_text, 1 }, { l_other, 1 }, { l_big, 1 },
    };
    static const uint32_t stk[] = {0};
    rperf_view_sample_t samples[6];
    for (uint32_t i = 0; i < 6; i++)
        samples[i] = (rperf_view_sample_t){ stk, 1, 1000 + i, 0, i + 1 };
    rperf_profile_view_t v = fx_view();
    v.samples = samples;
    v.sample_count = 6;
    v.label_sets = sets;
    v.label_set_count = 7;
    size_t len = 0;
    unsigned char *data = export_pprof(&v, 0, &len);
    if (!data)
        return;
    decode(&pr, data, len);
    check_structure(&pr);
    RPERF_CHECK_EQ(pr.nsample, 6);
    /* samples keep their first-seen order: value 1000 + i has label set i + 1 */
    static const struct { int num; int64_t n; const char *str; } want[] = {
        { 1, 4711, NULL }, { 1, -3, NULL }, { 0, 0, "007" }, { 0, 0, "12a" }, { 0, 0, "12" },
        { 0, 0, "9223372036854775808" },
    };
    for (size_t s = 0; s < pr.nsample && s < 6; s++) {
        RPERF_CHECK_EQ(pr.sample[s].values[0], 1000 + s);
        RPERF_CHECK(pr.sample[s].nlab >= 1);
        if (want[s].num) {
            RPERF_CHECK(str_is(&pr, pr.sample[s].lab_key[0], "pid"));
            RPERF_CHECK_EQ(pr.sample[s].lab_str[0], 0);
            RPERF_CHECK_EQ((int64_t)pr.sample[s].lab_num[0], want[s].n);
        } else {
            RPERF_CHECK(str_is(&pr, pr.sample[s].lab_str[0], want[s].str));
            RPERF_CHECK_EQ(pr.sample[s].lab_num[0], 0);
        }
    }
    RPERF_CHECK_EQ(pr.sample[0].nlab, 2);
    RPERF_CHECK(str_is(&pr, pr.sample[0].lab_str[1], "GET /"));
    for (size_t i = 0; i < pr.nstr; i++) /* a numeric value is not in the string table */
        RPERF_CHECK(!str_is(&pr, i, "4711") && !str_is(&pr, i, "-3"));
    free(data);
}

RPERF_TEST(pprof_rejects_bad_view)
{
    rperf_profile_view_t v = fx_view();
    static const uint32_t bad_stack[] = {99};
    rperf_view_sample_t bad = { bad_stack, 1, 5, 1, 0 };
    v.samples = &bad;
    v.sample_count = 1;
    unsigned char *data = NULL;
    size_t len = 0;
    char err[256] = "";
    RPERF_CHECK_EQ(rperf_export_to_memory(&rperf_exporter_pprof, &v, NULL, 0, &data, &len, err,
                                          sizeof err), -EINVAL);
    RPERF_CHECK(strstr(err, "out of range") != NULL);
    RPERF_CHECK(data == NULL);
}

int
main(void)
{
    return RPERF_RUN(RPERF_CASE(pprof_fixture_structure), RPERF_CASE(pprof_functions_lines_comments),
                     RPERF_CASE(pprof_samples_labels_merge), RPERF_CASE(pprof_wall_and_gzip_roundtrip),
                     RPERF_CASE(pprof_empty_profile), RPERF_CASE(pprof_deep_stack),
                     RPERF_CASE(pprof_pid_label_is_numeric), RPERF_CASE(pprof_rejects_bad_view));
}
