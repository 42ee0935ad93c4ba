/* SPDX-License-Identifier: MIT */
/*
 * registry.c — the table of exporters: built-ins in a static array, plus up
 * to RPERF_EXPORTER_MAX_EXTRA exporters registered at run time.
 *
 * Adding a built-in C exporter = one new file in exporters/ defining a
 * `const rperf_exporter_ops_t rperf_exporter_<name>` (CMake picks up every
 * .c file here) and ONE line `X(<name>)` in RPERF_BUILTIN_EXPORTERS below,
 * which both declares and registers it. See docs/exporters.md.
 *
 * Context: any non-signal thread; no Ruby API.
 * CONCURRENCY: lookups are lock-free. rperf_exporter_register() takes
 * `reg_lock`, fills `extra[n]` and then publishes the new count with a
 * release store; readers load the count with acquire, so every slot below
 * the count they see is fully written. Slots are never removed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "rperf_exporter.h"

/* The built-in exporters, in listing order. */
#define RPERF_BUILTIN_EXPORTERS(X) \
    X(pprof)                       \
    X(collapsed)                   \
    X(json)                        \
    X(text)                        \
    X(threads) /* the example exporter (docs/exporters.md) */ \
    X(html)

#define RPERF_DECLARE_EXPORTER(name) extern const rperf_exporter_ops_t rperf_exporter_##name;
RPERF_BUILTIN_EXPORTERS(RPERF_DECLARE_EXPORTER)
#define RPERF_EXPORTER_ENTRY(name) &rperf_exporter_##name,
static const rperf_exporter_ops_t *const builtins[] = { RPERF_BUILTIN_EXPORTERS(RPERF_EXPORTER_ENTRY) };
#define N_BUILTINS (sizeof builtins / sizeof builtins[0])

static const rperf_exporter_ops_t *extra[RPERF_EXPORTER_MAX_EXTRA];
static _Atomic size_t extra_count;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

size_t
rperf_exporter_count(void)
{
    /* Acquire: pairs with the release store in rperf_exporter_register(). */
    return N_BUILTINS + atomic_load_explicit(&extra_count, memory_order_acquire);
}

const rperf_exporter_ops_t *
rperf_exporter_at(size_t i)
{
    if (i < N_BUILTINS)
        return builtins[i];
    i -= N_BUILTINS;
    /* Acquire: pairs with the release store in rperf_exporter_register(). */
    if (i < atomic_load_explicit(&extra_count, memory_order_acquire))
        return extra[i];
    return NULL;
}

const rperf_exporter_ops_t *
rperf_exporter_find(const char *name)
{
    if (!name)
        return NULL;
    size_t n = rperf_exporter_count();
    for (size_t i = 0; i < n; i++) {
        const rperf_exporter_ops_t *ops = rperf_exporter_at(i);
        if (strcmp(ops->name, name) == 0)
            return ops;
    }
    return NULL;
}

static int
valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 64)
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int
rperf_exporter_register(const rperf_exporter_ops_t *ops)
{
    if (!ops || ops->version < RPERF_EXPORTER_ABI_MIN_VERSION ||
        ops->version > RPERF_EXPORTER_ABI_VERSION || !valid_name(ops->name) || !ops->encode ||
        !ops->suffix || !ops->description)
        return -EINVAL;
    pthread_mutex_lock(&reg_lock);
    int rc = 0;
    size_t n = atomic_load_explicit(&extra_count, memory_order_relaxed);
    if (rperf_exporter_find(ops->name)) {
        rc = -EEXIST;
    } else if (n >= RPERF_EXPORTER_MAX_EXTRA) {
        rc = -ENOSPC;
    } else {
        extra[n] = ops;
        /* Release: publishes extra[n]; pairs with the acquire loads above. */
        atomic_store_explicit(&extra_count, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&reg_lock);
    return rc;
}
