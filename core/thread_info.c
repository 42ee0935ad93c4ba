/*
 * thread_info.c — thread identities for results: the archive of threads
 * whose state was freed during the run (appended by the worker when it
 * retires an exited thread) and rperf_result_each_thread, which merges the
 * archive with the live registry in thread_seq order.
 *
 * Contexts: rperf__thread_archive runs on the worker (single writer);
 * rperf__archive_clear and rperf_result_each_thread run with the GVL held
 * while the worker is parked or joined (no concurrent writer).
 */
#include "core_internal.h"

#include <stdlib.h>
#include <string.h>

static rperf_result_thread_t *archive;
static size_t archive_len, archive_cap;

void rperf__thread_archive(const rperf_thread_t *pt)
{
    if (archive_len == archive_cap) {
        size_t cap = archive_cap ? archive_cap * 2 : 64;
        rperf_result_thread_t *a = rperf__alloc(cap * sizeof(*a));
        if (!a) return;                 /* identity lost, samples are kept */
        if (archive) {
            memcpy(a, archive, archive_len * sizeof(*a));
            rperf__free(archive, archive_cap * sizeof(*a));
        }
        archive = a;
        archive_cap = cap;
    }
    rperf__thread_info(pt, &archive[archive_len++]);
}

void rperf__archive_clear(void)
{
    if (archive) rperf__free(archive, archive_cap * sizeof(*archive));
    archive = NULL;
    archive_len = archive_cap = 0;
}

size_t rperf__archive_count(void) { return archive_len; }
const rperf_result_thread_t *rperf__archive_at(size_t i) { return &archive[i]; }

static int by_seq(const void *a, const void *b)
{
    uint32_t x = ((const rperf_result_thread_t *)a)->thread_seq;
    uint32_t y = ((const rperf_result_thread_t *)b)->thread_seq;
    return x < y ? -1 : x > y;
}

int rperf_result_each_thread(rperf_thread_cb cb, void *ctx)
{
    size_t live = 0;
    for (rperf_thread_t *pt = atomic_load(&rperf__threads); pt; pt = atomic_load(&pt->next)) live++;
    size_t n = archive_len + live;
    if (n == 0) return 0;
    rperf_result_thread_t *all = malloc(n * sizeof(*all));
    if (!all) return -1;
    if (archive_len) memcpy(all, archive, archive_len * sizeof(*all));
    size_t k = archive_len;
    /* threads pushed since counting are skipped; they have no samples yet */
    for (rperf_thread_t *pt = atomic_load(&rperf__threads); pt && k < n; pt = atomic_load(&pt->next))
        rperf__thread_info(pt, &all[k++]);
    qsort(all, k, sizeof(*all), by_seq);
    int rc = 0;
    for (size_t i = 0; i < k && rc == 0; i++) rc = cb(&all[i], ctx);
    free(all);
    return rc;
}
