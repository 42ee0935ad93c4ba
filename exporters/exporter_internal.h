/*
 * exporter_internal.h — helpers shared by the encoders in exporters/: a
 * growable byte buffer, string and uint32-sequence interning tables (open
 * addressing, linear probing, power-of-two capacity), UTF-8 sanitising, and
 * thread lookup by thread_seq. Not part of the plugin contract: plugin
 * authors outside exporters/ should only rely on rperf_exporter.h.
 *
 * Context: any non-signal thread; no Ruby API; not thread-safe (each
 * encoder call owns its tables). Error model: 0 or -ENOMEM.
 * See also util.c (implementation), docs/exporters.md.
 */
#ifndef RPERF_EXPORTERS_EXPORTER_INTERNAL_H
#define RPERF_EXPORTERS_EXPORTER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rperf_exporter.h"

/* ---- growable byte buffer ---- */
typedef struct rperf__buf {
    unsigned char *data;
    size_t len, cap;
} rperf__buf_t;

int rperf__buf_reserve(rperf__buf_t *b, size_t extra);
int rperf__buf_append(rperf__buf_t *b, const void *p, size_t n);
void rperf__buf_free(rperf__buf_t *b);

/* ---- hashing ---- */
uint64_t rperf__hash_bytes(const void *p, size_t n, uint64_t seed);
uint64_t rperf__hash_u32s(const uint32_t *p, size_t n, uint64_t seed);

/* ---- string interning: bytes -> dense id (0, 1, 2, … in insertion order).
 * Strings are copied; rperf__strmap_get() pointers stay valid until the next
 * intern (the byte store may move) or free. */
typedef struct rperf__strmap {
    rperf__buf_t bytes;        /* all strings back to back */
    size_t *off;               /* id -> offset in bytes */
    uint32_t *len;             /* id -> length */
    uint64_t *hash;            /* id -> hash */
    size_t count, ids_cap;
    uint32_t *slots;           /* id + 1; 0 = empty */
    size_t slot_cap;           /* power of two */
} rperf__strmap_t;

int rperf__strmap_init(rperf__strmap_t *m, size_t expected);
/* Stores the id of (p, n) in *id; *is_new (may be NULL) tells if it was added. */
int rperf__strmap_intern(rperf__strmap_t *m, const char *p, size_t n, uint32_t *id, int *is_new);
const char *rperf__strmap_get(const rperf__strmap_t *m, uint32_t id, size_t *n);
void rperf__strmap_free(rperf__strmap_t *m);

/* ---- uint32 sequence interning: sequence -> dense id. Keys are copied. */
typedef struct rperf__seqmap {
    uint32_t *keys;            /* all sequences back to back */
    size_t keys_len, keys_cap;
    size_t *off;               /* id -> offset in keys */
    uint32_t *len;             /* id -> length */
    uint64_t *hash;
    size_t count, ids_cap;
    uint32_t *slots;           /* id + 1; 0 = empty */
    size_t slot_cap;
} rperf__seqmap_t;

int rperf__seqmap_init(rperf__seqmap_t *m, size_t expected);
int rperf__seqmap_intern(rperf__seqmap_t *m, const uint32_t *seq, uint32_t n, uint32_t *id, int *is_new);
const uint32_t *rperf__seqmap_get(const rperf__seqmap_t *m, uint32_t id, uint32_t *n);
void rperf__seqmap_free(rperf__seqmap_t *m);

/* ---- UTF-8 ---- */
/* 1 if (p, n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int rperf__utf8_valid(const char *p, size_t n);
/* If (p, n) is valid UTF-8, returns it unchanged; otherwise writes a copy
 * with every invalid byte replaced by U+FFFD into `scratch` (reset first)
 * and returns that. Returns NULL only on allocation failure. */
const char *rperf__utf8_sanitize(const char *p, size_t n, rperf__buf_t *scratch, size_t *out_len);

/* ---- threads ---- */
/* The view's thread entry for thread_seq, or NULL. Linear-time setup is
 * done by rperf__threads_index(); lookups are O(log n). */
typedef struct rperf__threads {
    const rperf_view_thread_t **sorted;
    size_t count;
} rperf__threads_t;

int rperf__threads_index(rperf__threads_t *t, const rperf_profile_view_t *view);
const rperf_view_thread_t *rperf__threads_find(const rperf__threads_t *t, uint32_t thread_seq);
void rperf__threads_free(rperf__threads_t *t);

/* ---- number formatting ---- */
/* Write v (>= 0) with ',' thousands separators into buf (>= 32 bytes);
 * returns the length. */
size_t rperf__fmt_thousands(char *buf, uint64_t v);

#endif /* RPERF_EXPORTERS_EXPORTER_INTERNAL_H */
