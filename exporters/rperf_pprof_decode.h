/*
 * rperf_pprof_decode.h — reading a pprof profile (perftools.profiles.Profile,
 * gzip-compressed or not) back into memory: the decoder behind
 * `rperf report` / `rperf diff` (ruby/decode.c turns the result into Ruby
 * objects). Ruby-free: nothing here includes <ruby.h>.
 *
 * Context: any non-signal thread; no Ruby API; one decoded profile belongs
 * to one thread at a time. Error model: 0 or a negative errno (-EINVAL for
 * malformed input, -ENOMEM, -EFBIG for input over the size limits), with a
 * one-line message in the caller's buffer. See exporters/pprof_decode.c.
 */
#ifndef RPERF_PPROF_DECODE_H
#define RPERF_PPROF_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "rperf_exporter.h" /* rperf_str_t */

#ifdef __cplusplus
extern "C" {
#endif

/* Limits: decompressed profile bytes, and frames after expanding every
 * sample's locations into their (inlined) lines. Larger input is refused
 * with -EFBIG, never half-read. */
#define RPERF_PPROF_MAX_BYTES  ((size_t)1 << 30)
#define RPERF_PPROF_MAX_FRAMES ((size_t)1 << 26)

/* No function / location: an index field holding this value. */
#define RPERF_PPROF_NONE UINT32_MAX

typedef struct rperf_pprof_value_type {
    rperf_str_t type, unit;
} rperf_pprof_value_type_t;

typedef struct rperf_pprof_function {
    uint64_t id;
    rperf_str_t name, system_name, filename;
    int64_t start_line;
} rperf_pprof_function_t;

/* One Line of a Location: lines[0] is the innermost (inlined) function. */
typedef struct rperf_pprof_line {
    uint32_t function;   /* index into functions, or RPERF_PPROF_NONE */
    int64_t line;
} rperf_pprof_line_t;

typedef struct rperf_pprof_location {
    uint64_t id, address;
    const rperf_pprof_line_t *lines;
    uint32_t nlines;
} rperf_pprof_location_t;

typedef struct rperf_pprof_label {
    rperf_str_t key;
    rperf_str_t str;      /* string label (is_num == 0) */
    int64_t num;          /* numeric label (is_num == 1) */
    rperf_str_t num_unit;
    int is_num;
} rperf_pprof_label_t;

typedef struct rperf_pprof_sample {
    const uint32_t *locations;  /* indices into locations, leaf first */
    uint32_t nlocations;
    const int64_t *values;      /* nsample_types values */
    const rperf_pprof_label_t *labels;
    uint32_t nlabels;
} rperf_pprof_sample_t;

/* A decoded profile. Every index is in range and every string points into
 * memory owned by the profile (valid until rperf_pprof_free()). */
typedef struct rperf_pprof {
    const rperf_pprof_value_type_t *sample_types;
    size_t nsample_types;
    const rperf_pprof_sample_t *samples;
    size_t nsamples;
    const rperf_pprof_location_t *locations;
    size_t nlocations;
    const rperf_pprof_function_t *functions;
    size_t nfunctions;
    const rperf_str_t *comments;
    size_t ncomments;
    rperf_pprof_value_type_t period_type; /* empty strings when absent */
    int64_t period, time_nanos, duration_nanos;
    rperf_str_t default_sample_type;      /* empty when absent */
    size_t frame_count;                   /* sum over samples of their expanded frames */
} rperf_pprof_t;

/* Decode `len` bytes of `data` (gzip when it starts with the gzip magic).
 * On success returns 0 and stores a new profile in *out (release with
 * rperf_pprof_free()); otherwise a negative errno and a message in errbuf
 * ("truncated varint at offset 17", "string index 9 out of range (4
 * strings)", ...), *out untouched. Never reads outside `data`. */
int rperf_pprof_decode(const void *data, size_t len, rperf_pprof_t **out, char *errbuf,
                       size_t errlen);

/* NULL is a no-op. */
void rperf_pprof_free(rperf_pprof_t *p);

#ifdef __cplusplus
}
#endif
#endif /* RPERF_PPROF_DECODE_H */
