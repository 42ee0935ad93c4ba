/*
 * registry.c — the table of built-in timer backends. Adding a backend is one
 * new file defining `const rperf_backend_ops_t rperf_backend_<name>` plus one
 * line in each list below. Context: any (read-only data).
 */
#include "rperf_backend.h"

#include <string.h>

extern const rperf_backend_ops_t rperf_backend_signal;
extern const rperf_backend_ops_t rperf_backend_nanosleep;

static const rperf_backend_ops_t *const backends[] = {
    &rperf_backend_signal,      /* default on Linux */
    &rperf_backend_nanosleep,
};

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
