/*
 * rperf_test.h — the tiny C unit-test runner used by tests/unit/test_*.c.
 * Context: plain test programs (no Ruby). Why our own and not cmocka/Check:
 * see docs/testing.md (one header, no dependency, works under every sanitizer).
 *
 *   RPERF_TEST(name) { RPERF_CHECK(cond); RPERF_CHECK_EQ(a, b); }
 *   int main(void) { return RPERF_RUN(name, other_name); }
 *
 * A failed check prints file:line and the expression, marks the test failed
 * and continues; the program exits 1 if any test failed. The last line
 * printed is "N passed, M failed".
 */
#ifndef RPERF_TEST_H
#define RPERF_TEST_H

#include <stdio.h>
#include <string.h>
#include <stdint.h>

static int rperf_test_failed_checks;

#define RPERF_TEST(name) static void name(void)

#define RPERF_CHECK(cond) do { \
    if (!(cond)) { \
        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        rperf_test_failed_checks++; \
    } \
} while (0)

#define RPERF_CHECK_EQ(a, b) do { \
    long long rperf_a_ = (long long)(a), rperf_b_ = (long long)(b); \
    if (rperf_a_ != rperf_b_) { \
        fprintf(stderr, "%s:%d: check failed: %s == %s (%lld vs %lld)\n", \
                __FILE__, __LINE__, #a, #b, rperf_a_, rperf_b_); \
        rperf_test_failed_checks++; \
    } \
} while (0)

#define RPERF_CHECK_STR(a, b) do { \
    const char *rperf_sa_ = (a), *rperf_sb_ = (b); \
    if (strcmp(rperf_sa_, rperf_sb_) != 0) { \
        fprintf(stderr, "%s:%d: check failed: %s == %s (\"%s\" vs \"%s\")\n", \
                __FILE__, __LINE__, #a, #b, rperf_sa_, rperf_sb_); \
        rperf_test_failed_checks++; \
    } \
} while (0)

typedef struct { const char *name; void (*fn)(void); } rperf_test_case_t;

static inline int rperf_test_run(const rperf_test_case_t *cases, size_t n)
{
    int passed = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        int before = rperf_test_failed_checks;
        cases[i].fn();
        if (rperf_test_failed_checks == before) {
            passed++;
            printf("ok   %s\n", cases[i].name);
        } else {
            failed++;
            printf("FAIL %s\n", cases[i].name);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#define RPERF_CASE(fn) { #fn, fn }
#define RPERF_RUN(...) \
    rperf_test_run((const rperf_test_case_t[]){ __VA_ARGS__ }, \
                   sizeof((const rperf_test_case_t[]){ __VA_ARGS__ }) / sizeof(rperf_test_case_t))

#endif
