/*
 * test_exporter_html.c — the HTML flame graph exporter (exporters/html.c):
 * the page's structure (one data element, the page's own two script
 * elements and nothing else that ends a script), the embedded JSON on the
 * shared fixture as a golden string (metadata, frames, threads, label sets,
 * the merged call tree as parent deltas, samples), the escaping that keeps
 * any frame text inside the data element and valid for JSON.parse
 * (`</script>`, `<!--`, U+2028/U+2029, quotes, backslashes, control bytes,
 * invalid UTF-8), empty and 1,500-frame profiles. The page's behaviour in a
 * browser is tested by tests/ruby/test_interop_html.rb.
 * Context: plain C test program, no Ruby.
 */
#include <ctype.h>

#include "rperf_test.h"
#include "test_exporter_fixture.h"
#include "exporter_internal.h" /* rperf__utf8_valid for checking output */

#define DATA_OPEN "<script type=\"application/json\" id=\"rperf-data\">\n"

/* Occurrences of `needle` in text, ASCII case-insensitively. */
static int
count_ci(const char *text, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    int c = 0;
    for (size_t i = 0; i + n <= len; i++) {
        size_t k = 0;
        while (k < n && tolower((unsigned char)text[i + k]) == tolower((unsigned char)needle[k]))
            k++;
        if (k == n)
            c++;
    }
    return c;
}

/* The data element's text (malloc'd, NUL-terminated), or NULL. */
static char *
data_of(const char *html)
{
    const char *p = strstr(html, DATA_OPEN);
    if (!p)
        return NULL;
    p += strlen(DATA_OPEN);
    const char *e = strstr(p, "\n</script>");
    if (!e)
        return NULL;
    char *s = malloc((size_t)(e - p) + 1);
    memcpy(s, p, (size_t)(e - p));
    s[e - p] = '\0';
    return s;
}

/* What every page must satisfy whatever the profile holds. */
static void
check_page(const char *html, size_t len)
{
    RPERF_CHECK(rperf__utf8_valid(html, len));
    RPERF_CHECK(strncmp(html, "<!DOCTYPE html>\n", 16) == 0);
    RPERF_CHECK(len > 8 && strcmp(html + len - 8, "</html>\n") == 0);
    RPERF_CHECK_EQ(count_ci(html, len, "</script"), 2);   /* data element + the page's script */
    RPERF_CHECK_EQ(count_ci(html, len, "<script"), 2);
    RPERF_CHECK_EQ(count_ci(html, len, "<!--"), 0);
    RPERF_CHECK(strstr(html, "\xe2\x80\xa8") == NULL && strstr(html, "\xe2\x80\xa9") == NULL);
    RPERF_CHECK_EQ(count_ci(html, len, "http://") + count_ci(html, len, "https://"), 0);
    RPERF_CHECK(strstr(html, "Content-Security-Policy\" content=\"default-src 'none';") != NULL);
    char *data = data_of(html);
    RPERF_CHECK(data != NULL);
    if (data) {
        RPERF_CHECK(strchr(data, '<') == NULL && strchr(data, '>') == NULL);
        RPERF_CHECK(data[0] == '{' && data[strlen(data) - 1] == '}');
    }
    free(data);
}

/* Export `v` as html, check the page (check_page) and return its data
 * element's text (malloc'd), or NULL after a failed check. */
static char *
page_data(const rperf_profile_view_t *v)
{
    size_t len;
    char *html = fx_export("html", v, NULL, &len);
    RPERF_CHECK(html != NULL);
    if (!html)
        return NULL;
    check_page(html, len);
    char *data = data_of(html);
    free(html);
    return data;
}

RPERF_TEST(html_golden_data)
{
    rperf_profile_view_t v = fx_view();
    v.backend = (rperf_str_t)S("signal");
    char *data = page_data(&v);
    RPERF_CHECK_STR(data ? data : "",
        "{\"version\":1,\"meta\":{\"mode\":\"cpu\",\"frequency\":100,"
        "\"start_time_ns\":1700000000000000000,\"duration_ns\":50000000,\"sampling_count\":null,"
        "\"backend\":\"signal\",\"rperf\":\"0.7.0\",\"ruby\":\"ruby 3.3.8 (test)\",\"entries\":6,"
        "\"total_ns\":45001000},"
        "\"frames\":[[\"Object#main\",\"app.rb\",1],[\"Foo#bar\",\"app.rb\",10],"
        "[\"Integer#times\",\"\\u003cinternal:numeric\\u003e\",0],"
        "[\"[GC marking]\",\"\\u003cGC\\u003e\",0],"
        "[\"bad\xef\xbf\xbd;na me\\n\",\"we\xef\xbf\xbdird.rb\",7],"
        "[\"(unknown)\",\"\\u003cC method\\u003e\",0]],"
        "\"threads\":[[1,1,\"main\",1234],[2,2,\"wor\\tker\",1235]],"
        "\"label_sets\":[[],[[\"endpoint\",\"GET /users\"]],[[\"k\xef\xbf\xbd\",\"v\xef\xbf\xbd\"]]],"
        /* nodes 1..6: main, bar (under main), times (under bar), GC (under
         * bar), "" (under main), bad (under "") */
        "\"parent\":[1,1,1,2,4,1],\"frame\":[0,1,2,3,5,4],"
        "\"samples\":[2,20000000,1,0,3,10000000,1,1,4,5000000,2,0,6,1000,2,2,"
        "2,7000000,2,0,2,3000000,1,0]}");
    free(data);
}

RPERF_TEST(html_escapes_hostile_text)
{
    static const char evil[] = "a</script><!--<script>\xe2\x80\xa8\xe2\x80\xa9\"\\&>\x01\xff</SCRIPT z";
    rperf_view_frame_t frames[] = {
        { { evil, sizeof evil - 1 }, S("</sCrIpT>.rb"), 3 },
        { S("x"), { "\0nul", 4 }, 0 },
    };
    uint32_t stack[] = { 0, 1 };
    rperf_view_sample_t s = { stack, 2, 5, 7, 0 };
    rperf_view_thread_t t = { 7, 3, { evil, sizeof evil - 1 }, 0 };
    rperf_view_label_t l = { S("<!--"), S("-->") };
    rperf_view_label_set_t sets[] = { { NULL, 0 }, { &l, 1 } };
    rperf_profile_view_t v = fx_empty_view();
    v.frames = frames;
    v.frame_count = 2;
    v.samples = &s;
    v.sample_count = 1;
    v.threads = &t;
    v.thread_count = 1;
    v.label_sets = sets;
    v.label_set_count = 2;
    v.flags |= RPERF_VIEW_HAS_LABEL_SETS;
    char *data = page_data(&v);
    const char *want =
        "\"a\\u003c/script\\u003e\\u003c!--\\u003cscript\\u003e\\u2028\\u2029\\\"\\\\\\u0026"
        "\\u003e\\u0001\xef\xbf\xbd\\u003c/SCRIPT z\"";
    RPERF_CHECK(data && strstr(data, want) != NULL);
    RPERF_CHECK(data && strstr(data, "[\"x\",\"\\u0000nul\",0]") != NULL);
    RPERF_CHECK(data && strstr(data, "\"\\u003c/sCrIpT\\u003e.rb\"") != NULL);
    RPERF_CHECK(data && strstr(data, "[[],[[\"\\u003c!--\",\"--\\u003e\"]]]") != NULL);
    /* the stack is merged root first: x (frame 1), then the evil frame 0 */
    RPERF_CHECK(data && strstr(data, "\"parent\":[1,1],\"frame\":[1,0],\"samples\":[2,5,7,0]}") != NULL);
    free(data);
}

RPERF_TEST(html_empty_profile)
{
    rperf_profile_view_t v = fx_empty_view();
    char *data = page_data(&v);
    RPERF_CHECK_STR(data ? data : "",
        "{\"version\":1,\"meta\":{\"mode\":\"wall\",\"frequency\":1000,\"start_time_ns\":null,"
        "\"duration_ns\":null,\"sampling_count\":null,\"backend\":null,\"rperf\":\"0.7.0\","
        "\"ruby\":\"\",\"entries\":0,\"total_ns\":0},\"frames\":[],\"threads\":[],"
        "\"label_sets\":[],\"parent\":[],\"frame\":[],\"samples\":[]}");
    free(data);
}

RPERF_TEST(html_deep_stack_and_shared_prefixes)
{
    fx_deep_t d;
    fx_deep_init(&d, 1500);
    /* a second sample: the outer 800 frames only (a prefix of the first) */
    rperf_view_sample_t two[2] = { d.sample, { d.stack + 700, 800, 9, 2, 0 } };
    d.v.samples = two;
    d.v.sample_count = 2;
    {
        char *data = page_data(&d.v);
        /* 1,500 nodes, each the child of the previous one */
        RPERF_CHECK(data && strstr(data, "\"parent\":[1,1,") != NULL);
        RPERF_CHECK(data && strstr(data, ",1],\"frame\":[0,1,2,") != NULL);
        RPERF_CHECK(data && strstr(data, ",1498,1499],\"samples\":[1500,42,1,0,800,9,2,0]}") != NULL);
        free(data);
    }
    fx_deep_free(&d);
}

RPERF_TEST(html_registered_with_suffix)
{
    const rperf_exporter_ops_t *ops = rperf_exporter_find("html");
    RPERF_CHECK(ops != NULL);
    if (!ops)
        return;
    RPERF_CHECK_STR(ops->suffix, ".html");
    RPERF_CHECK_EQ(ops->gzip, 0);
    RPERF_CHECK(ops->flags & RPERF_EXPORTER_F_TEXT);
}

int
main(void)
{
    return RPERF_RUN(RPERF_CASE(html_golden_data), RPERF_CASE(html_escapes_hostile_text),
                     RPERF_CASE(html_empty_profile), RPERF_CASE(html_deep_stack_and_shared_prefixes),
                     RPERF_CASE(html_registered_with_suffix));
}
