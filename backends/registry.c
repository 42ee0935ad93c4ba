/*
 * registry.c — the table of built-in timer backends. Adding a backend is one
 * new file defining `const rperf_backend_ops_t rperf_backend_<name>` (CMake
 * builds every .c file here) plus one line `X(<name>)` in RPERF_BACKENDS
 * below, which both declares and registers it. Context: any (read-only
 * data).
 */
#include "rperf_backend.h"

#include <string.h>

/* The built-in backends; the first is the default. */
#define RPERF_BACKENDS(X) \
    X(holder)             \
    X(signal)             \
    X(nanosleep)

#define RPERF_DECLARE_BACKEND(name) extern const rperf_backend_ops_t rperf_backend_##name;
RPERF_BACKENDS(RPERF_DECLARE_BACKEND)
#define RPERF_BACKEND_ENTRY(name) &rperf_backend_##name,
static const rperf_backend_ops_t *const backends[] = { RPERF_BACKENDS(RPERF_BACKEND_ENTRY) };

size_t rperf_backend_count(void) { return sizeof(backends) / sizeof(backends[0]); }

const rperf_backend_ops_t *rperf_backend_at(size_t i)
{
    return i < rperf_backend_count() ? backends[i] : NULL;
}

const rperf_backend_ops_t *rperf_backend_find(const char *name)
{
    for (size_t i = 0; i < rperf_backend_count(); i++)
        if (strcmp(backends[i]->name, name) == 0) return backends[i];
    return NULL;
}

const rperf_backend_ops_t *rperf_backend_default(void) { return backends[0]; }
