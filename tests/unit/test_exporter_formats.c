/*
 * test_exporter_formats.c — the collapsed, JSON (speedscope), text and
 * example "threads" exporters on the shared fixture: golden outputs, the
 * strict folded-stack grammar, JSON well-formedness (a small validating
 * parser written here), text layout and the ms rounding fix, empty and deep
 * profiles. Context: plain C test program, no Ruby.
 */
#include "rperf_test.h"
#include "test_exporter_fixture.h"
#include "exporter_internal.h" /* rperf__utf8_valid for checking output */

/* ---- strict folded grammar: ^F(;F)* [1-9][0-9]*$ with
 * F = [^;[:space:]]([^;]*[^;[:space:]])? (validators §2.1, strict variant),
 * plus: valid UTF-8, no control bytes. Returns the number of bad lines. */
static int
is_space(unsigned char c)
{
    return c == ' ' || (c >= 0x09 && c <= 0x0d);
}

static int
folded_bad_lines(const char *text, size_t len)
{
    int bad = 0;
    if (!rperf__utf8_valid(text, len))
        return 1000;
    const char *p = text, *end = text + len;
    if (len && end[-1] != '\n')
        bad++;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            nl = end;
        const char *sp = NULL;
        for (const char *q = nl; q > p; q--)
            if (q[-1] == ' ') {
                sp = q - 1;
                break;
            }
        int ok = sp != NULL && sp + 1 < nl && sp[1] >= '1' && sp[1] <= '9';
        for (const char *q = sp ? sp + 1 : nl; ok && q < nl; q++)
            ok = *q >= '0' && *q <= '9';
        /* frames */
        const char *f = p;
        while (ok && f <= sp) {
            const char *e = f;
            while (e < sp && *e != ';')
                e++;
            ok = e > f && !is_space((unsigned char)f[0]) && !is_space((unsigned char)e[-1]);
            for (const char *q = f; ok && q < e; q++)
                ok = (unsigned char)*q >= 0x20 && *q != 0x7f;
            f = e + 1;
            if (e == sp)
                break;
        }
        if (!ok)
            bad++;
        p = nl + 1;
    }
    return bad;
}

RPERF_TEST(collapsed_golden)
{
    rperf_profile_view_t v = fx_view();
    size_t len;
    char *s = fx_export("collapsed", &v, NULL, &len);
    RPERF_CHECK(s != NULL);
    if (!s)
        return;
    RPERF_CHECK_STR(s, "Object#main;(unknown);bad\xef\xbf\xbd\\x3bna me\\x0a 1000\n"
                       "Object#main;Foo#bar 30000000\n"
                       "Object#main;Foo#bar;Integer#times 10000000\n"
                       "Object#main;Foo#bar;[GC marking] 5000000\n");
    RPERF_CHECK_EQ(folded_bad_lines(s, len), 0);
    free(s);
}

RPERF_TEST(collapsed_escapes_and_merges)
{
    /* Two distinct frames with the same name merge; edge spaces, tabs, CR
     * and ';' are escaped; an empty stack gets a placeholder frame. */
    static const rperf_view_frame_t fr[] = {
        { S(" lead"), S("a.rb"), 0 },
        { S("trail "), S("a.rb"), 0 },
        { S("x\ty\r;"), S("a.rb"), 0 },
        { S("same"), S("a.rb"), 1 },
        { S("same"), S("b.rb"), 2 },
    };
    static const uint32_t s0[] = {0, 1, 2}, s1[] = {3}, s2[] = {4};
    rperf_view_sample_t sm[] = {
        { s0, 3, 5, 1, 0 }, { s1, 1, 2, 1, 0 }, { s2, 1, 3, 2, 0 }, { NULL, 0, 9, 1, 0 },
    };
    rperf_profile_view_t v = fx_empty_view();
    v.frames = fr;
    v.frame_count = 5;
    v.samples = sm;
    v.sample_count = 4;
    size_t len;
    char *s = fx_export("collapsed", &v, NULL, &len);
    if (!s)
        return;
    RPERF_CHECK_STR(s, "(no frames) 9\n"
                       "same 5\n"
                       "x\\x09y\\x0d\\x3b;trail\\x20;\\x20lead 5\n");
    RPERF_CHECK_EQ(folded_bad_lines(s, len), 0);
    free(s);
}

RPERF_TEST(collapsed_empty_and_deep)
{
    rperf_profile_view_t v = fx_empty_view();
    size_t len = 99;
    char *s = fx_export("collapsed", &v, NULL, &len);
    RPERF_CHECK(s && len == 0);
    free(s);
    fx_deep_t d;
    fx_deep_init(&d, 1200);
    s = fx_export("collapsed", &d.v, NULL, &len);
    if (s) {
        RPERF_CHECK_EQ(folded_bad_lines(s, len), 0);
        RPERF_CHECK(strncmp(s, "m0;m1;m2;", 9) == 0); /* root first */
        RPERF_CHECK(strstr(s, ";m1199 42\n") != NULL);
        size_t semis = 0;
        for (size_t i = 0; i < len; i++)
            semis += s[i] == ';';
        RPERF_CHECK_EQ(semis, 1199);
    }
    free(s);
    fx_deep_free(&d);
}

RPERF_TEST(collapsed_deterministic)
{
    /* Same samples in a different order give the same bytes. */
    rperf_profile_view_t v = fx_view();
    rperf_view_sample_t rev[6];
    for (int i = 0; i < 6; i++)
        rev[i] = fx_samples[5 - i];
    char *a = fx_export("collapsed", &v, NULL, NULL);
    v.samples = rev;
    char *b = fx_export("collapsed", &v, NULL, NULL);
    RPERF_CHECK(a && b && strcmp(a, b) == 0);
    free(a);
    free(b);
}

/* Many random stacks against a plain reference: stacks of names compared
 * name by name with strcmp (a stack before its extensions), equal stacks
 * merged. Names repeat across frames, prefix each other, and share first
 * frames, so every path of the encoder's sort (radix on the first two
 * frames, then the rest) and merge is used. */
typedef struct {
    const char *names[8];
    uint32_t depth;
    int64_t weight;
} ref_line_t;

static int
cmp_ref(const void *a, const void *b)
{
    const ref_line_t *x = a, *y = b;
    uint32_t n = x->depth < y->depth ? x->depth : y->depth;
    for (uint32_t i = 0; i < n; i++) {
        int c = strcmp(x->names[i], y->names[i]);
        if (c)
            return c;
    }
    return (x->depth > y->depth) - (x->depth < y->depth);
}

RPERF_TEST(collapsed_many_stacks_match_reference)
{
    static const char *const pool[] = {"a", "ab", "abc", "b", "B", "Z", "z\xc3\xa9", "Foo#bar",
                                       "Foo#ba", "[GC marking]", "m1", "m10", "m2"};
    enum { NPOOL = sizeof pool / sizeof pool[0], NFRAMES = 40, NSAMPLES = 3000 };
    rperf_view_frame_t fr[NFRAMES];
    for (int i = 0; i < NFRAMES; i++) {
        const char *n = pool[(i * 7) % NPOOL];
        fr[i] = (rperf_view_frame_t){ { n, strlen(n) }, S("f.rb"), i };
    }
    static uint32_t stacks[NSAMPLES][6];
    static rperf_view_sample_t sm[NSAMPLES];
    static ref_line_t ref[NSAMPLES];
    uint64_t seed = 12345;
    for (int i = 0; i < NSAMPLES; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t depth = (uint32_t)(seed >> 33) % 7; /* 0..6 */
        for (uint32_t d = 0; d < depth; d++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            /* few distinct frames near the root: long shared prefixes */
            uint32_t range = d + 1 < depth ? 3 + 6 * d : NFRAMES;
            stacks[i][d] = (uint32_t)(seed >> 35) % (range < NFRAMES ? range : NFRAMES);
        }
        sm[i] = (rperf_view_sample_t){ stacks[i], depth, 1 + i % 97, 1 + i % 3, 0 };
        ref[i].depth = depth ? depth : 1;
        ref[i].weight = sm[i].weight;
        ref[i].names[0] = "(no frames)";
        for (uint32_t d = 0; d < depth; d++) /* root first */
            ref[i].names[d] = fr[stacks[i][depth - 1 - d]].name.ptr;
    }
    qsort(ref, NSAMPLES, sizeof *ref, cmp_ref);
    size_t nref = 0;
    for (size_t i = 0; i < NSAMPLES; i++) {
        if (nref && cmp_ref(&ref[nref - 1], &ref[i]) == 0)
            ref[nref - 1].weight += ref[i].weight;
        else
            ref[nref++] = ref[i];
    }
    char *expect = malloc(nref * 128), *e = expect;
    for (size_t i = 0; i < nref; i++) {
        for (uint32_t d = 0; d < ref[i].depth; d++)
            e += sprintf(e, "%s%s", d ? ";" : "", ref[i].names[d]);
        e += sprintf(e, " %lld\n", (long long)ref[i].weight);
    }
    rperf_profile_view_t v = fx_empty_view();
    v.frames = fr;
    v.frame_count = NFRAMES;
    v.samples = sm;
    v.sample_count = NSAMPLES;
    size_t len;
    char *s = fx_export("collapsed", &v, NULL, &len);
    RPERF_CHECK(s != NULL && nref > 100 && nref < NSAMPLES);
    if (s) {
        RPERF_CHECK_EQ(len, (size_t)(e - expect));
        RPERF_CHECK(strcmp(s, expect) == 0);
        RPERF_CHECK_EQ(folded_bad_lines(s, len), 0);
    }
    free(s);
    free(expect);
}

/* ---- JSON: a small validating parser (RFC 8259 grammar, UTF-8 checked). ---- */

typedef struct {
    const char *p, *end;
    int depth;
} jp_t;

static int jp_value(jp_t *j);

static void
jp_ws(jp_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static int
jp_string(jp_t *j)
{
    if (j->p >= j->end || *j->p != '"')
        return 0;
    const char *start = ++j->p;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            j->p++;
            if (j->p >= j->end)
                return 0;
            if (*j->p == 'u') {
                for (int i = 0; i < 4; i++) {
                    j->p++;
                    if (j->p >= j->end || !strchr("0123456789abcdefABCDEF", *j->p))
                        return 0;
                }
            } else if (!strchr("\"\\/bfnrt", *j->p)) {
                return 0;
            }
        }
        j->p++;
    }
    if (j->p >= j->end)
        return 0;
    int ok = rperf__utf8_valid(start, (size_t)(j->p - start));
    j->p++;
    return ok;
}

static int
jp_number(jp_t *j)
{
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return 0;
    if (*j->p == '0')
        j->p++;
    else
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
            j->p++;
    return j->p > s;
}

static int
jp_value(jp_t *j)
{
    if (++j->depth > 64)
        return 0;
    jp_ws(j);
    int ok = 0;
    if (j->p >= j->end) {
        ok = 0;
    } else if (*j->p == '{') {
        j->p++;
        jp_ws(j);
        ok = 1;
        if (j->p < j->end && *j->p == '}') {
            j->p++;
        } else {
            for (;;) {
                jp_ws(j);
                if (!jp_string(j)) { ok = 0; break; }
                jp_ws(j);
                if (j->p >= j->end || *j->p++ != ':') { ok = 0; break; }
                if (!jp_value(j)) { ok = 0; break; }
                jp_ws(j);
                if (j->p < j->end && *j->p == ',') { j->p++; continue; }
                if (j->p < j->end && *j->p == '}') { j->p++; break; }
                ok = 0;
                break;
            }
        }
    } else if (*j->p == '[') {
        j->p++;
        jp_ws(j);
        ok = 1;
        if (j->p < j->end && *j->p == ']') {
            j->p++;
        } else {
            for (;;) {
                if (!jp_value(j)) { ok = 0; break; }
                jp_ws(j);
                if (j->p < j->end && *j->p == ',') { j->p++; continue; }
                if (j->p < j->end && *j->p == ']') { j->p++; break; }
                ok = 0;
                break;
            }
        }
    } else if (*j->p == '"') {
        ok = jp_string(j);
    } else if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) {
        ok = jp_number(j);
    } else {
        static const char *lits[] = {"true", "false", "null"};
        for (int i = 0; i < 3; i++) {
            size_t n = strlen(lits[i]);
            if ((size_t)(j->end - j->p) >= n && memcmp(j->p, lits[i], n) == 0) {
                j->p += n;
                ok = 1;
            }
        }
    }
    j->depth--;
    return ok;
}

static int
json_valid(const char *s, size_t len)
{
    jp_t j = { s, s + len, 0 };
    if (!jp_value(&j))
        return 0;
    jp_ws(&j);
    return j.p == j.end;
}

static size_t
count_substr(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

RPERF_TEST(json_parser_self_test)
{
    RPERF_CHECK(json_valid("{\"a\":[1,-2,\"x\\u0001\"],\"b\":null}", 31));
    RPERF_CHECK(!json_valid("{\"a\":[1,]}", 10));
    RPERF_CHECK(!json_valid("{\"a\":\"\x01\"}", 9));
    RPERF_CHECK(!json_valid("[\"\xff\"]", 5));
}

RPERF_TEST(json_fixture)
{
    rperf_profile_view_t v = fx_view();
    size_t len;
    char *s = fx_export("json", &v, NULL, &len);
    if (!s)
        return;
    RPERF_CHECK(json_valid(s, len));
    RPERF_CHECK(strncmp(s, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\"", 62) == 0);
    RPERF_CHECK_EQ(count_substr(s, "\"type\":\"sampled\""), 2);
    RPERF_CHECK_EQ(count_substr(s, "\"unit\":\"nanoseconds\""), 2);
    RPERF_CHECK(strstr(s, "{\"name\":\"Foo#bar\",\"file\":\"app.rb\",\"line\":10}") != NULL);
    RPERF_CHECK(strstr(s, "{\"name\":\"Integer#times\",\"file\":\"<internal:numeric>\"}") != NULL);
    RPERF_CHECK(strstr(s, "{\"name\":\"bad\xef\xbf\xbd;na me\\n\",\"file\":\"we\xef\xbf\xbdird.rb\",\"line\":7}") != NULL);
    RPERF_CHECK(strstr(s, "{\"name\":\"(unknown)\",\"file\":\"<C method>\"}") != NULL);
    /* thread 1: samples root first, in view order */
    RPERF_CHECK(strstr(s, "\"name\":\"thread 1 \\\"main\\\" ractor 1\",\"unit\":\"nanoseconds\","
                          "\"startValue\":0,\"endValue\":33000000,"
                          "\"samples\":[[0,1],[0,1,2],[0,1]],"
                          "\"weights\":[20000000,10000000,3000000]}") != NULL);
    RPERF_CHECK(strstr(s, "\"name\":\"thread 2 \\\"wor\\tker\\\" ractor 2\"") != NULL);
    RPERF_CHECK(strstr(s, "\"samples\":[[0,1,3],[0,5,4],[0,1]],\"weights\":[5000000,1000,7000000]") != NULL);
    free(s);
}

RPERF_TEST(json_empty_and_deep)
{
    rperf_profile_view_t v = fx_empty_view();
    size_t len;
    char *s = fx_export("json", &v, NULL, &len);
    if (s) {
        RPERF_CHECK(json_valid(s, len));
        RPERF_CHECK(strstr(s, "\"name\":\"rperf wall profile\"") != NULL);
        RPERF_CHECK(strstr(s, "\"frames\":[]") != NULL);
        RPERF_CHECK(strstr(s, "\"samples\":[],\"weights\":[]") != NULL);
    }
    free(s);
    fx_deep_t d;
    fx_deep_init(&d, 1500);
    s = fx_export("json", &d.v, NULL, &len);
    if (s) {
        RPERF_CHECK(json_valid(s, len));
        RPERF_CHECK(strstr(s, "\"samples\":[[0,1,2,3,") != NULL);
        RPERF_CHECK(strstr(s, ",1498,1499]],\"weights\":[42]") != NULL);
    }
    free(s);
    fx_deep_free(&d);
}

/* ---- text ---- */

RPERF_TEST(text_golden)
{
    rperf_profile_view_t v = fx_view();
    char *s = fx_export("text", &v, NULL, NULL);
    if (!s)
        return;
    RPERF_CHECK_STR(s,
        "Total: 45.0ms (cpu)\n"
        "Samples: 6, Frequency: 100Hz\n"
        "\n"
        " Flat:\n"
        "            30.0 ms  66.7%  Foo#bar (app.rb)\n"
        "            10.0 ms  22.2%  Integer#times (<internal:numeric>)\n"
        "             5.0 ms  11.1%  [GC marking] (<GC>)\n"
        "             0.0 ms   0.0%  bad\xef\xbf\xbd;na me\\x0a (we\xef\xbf\xbdird.rb)\n"
        "\n"
        " Cumulative:\n"
        "            45.0 ms 100.0%  Object#main (app.rb)\n" /* 45,001,000 ns */
        "            45.0 ms 100.0%  Foo#bar (app.rb)\n"     /* 45,000,000 ns */
        "            10.0 ms  22.2%  Integer#times (<internal:numeric>)\n"
        "             5.0 ms  11.1%  [GC marking] (<GC>)\n"
        "             0.0 ms   0.0%  (unknown) (<C method>)\n"
        "             0.0 ms   0.0%  bad\xef\xbf\xbd;na me\\x0a (we\xef\xbf\xbdird.rb)\n");
    free(s);
}

RPERF_TEST(text_rounding_top_n_header)
{
    /* 1,990,000 ns is 2.0 ms (rperf 0.6 printed 1.0); 1,234,567,949,999 ns
     * is 1,234,567.9 ms and 50,000 ns rounds half up to 0.1 ms. */
    static const rperf_view_frame_t fr[] = {
        { S("a"), S(""), 0 }, { S("b"), S("b.rb"), 0 }, { S("c"), S("c.rb"), 0 },
    };
    static const uint32_t sa[] = {0}, sb[] = {1}, sc[] = {2};
    rperf_view_sample_t sm[] = {
        { sa, 1, 1990000, 1, 0 }, { sb, 1, 1234567949999LL, 1, 0 }, { sc, 1, 50000, 1, 0 },
    };
    rperf_profile_view_t v = fx_empty_view();
    v.frames = fr;
    v.frame_count = 3;
    v.samples = sm;
    v.sample_count = 3;
    v.flags = RPERF_VIEW_HAS_SAMPLING_COUNT;
    v.sampling_count = 77;
    rperf_export_options_t o;
    rperf_export_options_init(&o);
    RPERF_CHECK_EQ(o.top_n, 50);
    RPERF_CHECK_EQ(o.header, 1);
    char *s = fx_export("text", &v, &o, NULL);
    if (s) {
        RPERF_CHECK(strncmp(s, "Total: 1234570.0ms (wall)\nSamples: 77, Frequency: 1000Hz\n\n", 58) == 0);
        RPERF_CHECK(strstr(s, "\n     1,234,567.9 ms 100.0%  b (b.rb)\n") != NULL);
        RPERF_CHECK(strstr(s, "\n             2.0 ms   0.0%  a\n") != NULL); /* no " ()" */
        RPERF_CHECK(strstr(s, "\n             0.1 ms   0.0%  c (c.rb)\n") != NULL);
    }
    free(s);
    o.top_n = 1;
    o.header = 0;
    s = fx_export("text", &v, &o, NULL);
    if (s)
        RPERF_CHECK_STR(s, " Flat:\n"
                           "     1,234,567.9 ms 100.0%  b (b.rb)\n"
                           "\n"
                           " Cumulative:\n"
                           "     1,234,567.9 ms 100.0%  b (b.rb)\n");
    free(s);
}

RPERF_TEST(text_empty_and_recursion)
{
    rperf_profile_view_t v = fx_empty_view();
    char *s = fx_export("text", &v, NULL, NULL);
    RPERF_CHECK(s && strcmp(s, "No samples recorded.\n") == 0);
    free(s);
    /* Recursion counts once per sample in the cumulative table. */
    static const rperf_view_frame_t fr[] = { { S("fib"), S("f.rb"), 1 } };
    static const uint32_t st[] = {0, 0, 0, 0};
    rperf_view_sample_t sm[] = { { st, 4, 1000000, 1, 0 } };
    v.frames = fr;
    v.frame_count = 1;
    v.samples = sm;
    v.sample_count = 1;
    s = fx_export("text", &v, NULL, NULL);
    if (s)
        RPERF_CHECK(strstr(s, " Cumulative:\n             1.0 ms 100.0%  fib (f.rb)\n") != NULL);
    free(s);
}

RPERF_TEST(threads_example)
{
    rperf_profile_view_t v = fx_view();
    char *s = fx_export("threads", &v, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "thread_seq\tractor\tname\tentries\tweight_ns\tpercent\n"
                           "1\t1\tmain\t3\t33000000\t73.33\n"
                           "2\t2\twor ker\t3\t12001000\t26.67\n");
    free(s);
    v = fx_empty_view();
    s = fx_export("threads", &v, NULL, NULL);
    if (s)
        RPERF_CHECK_STR(s, "thread_seq\tractor\tname\tentries\tweight_ns\tpercent\n");
    free(s);
}

int
main(void)
{
    return RPERF_RUN(RPERF_CASE(collapsed_golden), RPERF_CASE(collapsed_escapes_and_merges),
                     RPERF_CASE(collapsed_empty_and_deep), RPERF_CASE(collapsed_deterministic),
                     RPERF_CASE(collapsed_many_stacks_match_reference),
                     RPERF_CASE(json_parser_self_test), RPERF_CASE(json_fixture),
                     RPERF_CASE(json_empty_and_deep), RPERF_CASE(text_golden),
                     RPERF_CASE(text_rounding_top_n_header), RPERF_CASE(text_empty_and_recursion),
                     RPERF_CASE(threads_example));
}
