/*
 * exporter_internal.h — helpers shared by the encoders in exporters/: a
 * growable byte buffer (also the encoders' output staging buffer), decimal
 * formatting, an interning table for byte strings and one for uint32
 * sequences with a weight sum per entry, UTF-8 sanitising and escaping,
 * thread lookup by thread_seq, and the common end of an encode() call.
 * Not part of the plugin contract: plugin authors outside exporters/ should
 * only rely on rperf_exporter.h.
 *
 * Context: any non-signal thread; no Ruby API; not thread-safe (each
 * encoder call owns its tables). Error model: 0 or a negative errno
 * (-ENOMEM, -EOVERFLOW, or the writer's sticky error).
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
int rperf__buf_put_cstr(rperf__buf_t *b, const char *s);   /* a C string, no NUL */
int rperf__buf_put_u64(rperf__buf_t *b, uint64_t v);       /* in decimal */
void rperf__buf_free(rperf__buf_t *b);
/* Room for `n` uint32 values at the start of `b` (contents not kept):
 * a scratch array for sequence keys. NULL on allocation failure. */
uint32_t *rperf__buf_u32s(rperf__buf_t *b, size_t n);

/* Encoders stage output in a buffer and hand it to the writer in large
 * chunks: when it holds at least `at` bytes (0: whenever it is not empty),
 * write it to `w` and empty it. Returns 0 or the writer's error. */
#define RPERF__FLUSH_AT (256u * 1024u)
int rperf__buf_flush(rperf__buf_t *b, rperf_writer_t *w, size_t at);

/* ---- numbers ---- */
/* Decimal digits of v into buf (>= 20 bytes, no NUL); returns the count. */
size_t rperf__u64_dec(char *buf, uint64_t v);
/* v with ',' thousands separators into buf (>= 32 bytes, NUL-terminated);
 * returns the length. */
size_t rperf__fmt_thousands(char *buf, uint64_t v);
/* v bytes in the binary unit that fits it ("B", "KiB", "MiB", … "EiB"):
 * returns the unit and stores the value x 10, rounded half up, in *tenths
 * (for "B" the exact v x 10). 1023.95 KiB and up count as MiB, and so on. */
const char *rperf__bytes_unit(uint64_t v, uint64_t *tenths);

/* ---- hashing ---- */
uint64_t rperf__hash_bytes(const void *p, size_t n, uint64_t seed);

/* ---- string interning: bytes -> dense id (0, 1, 2, … in insertion order).
 * Strings are copied back to back into one store; rperf__strmap_get()
 * pointers stay valid until the next intern (the store may move) or free. */
typedef struct rperf__strmap {
    rperf__buf_t bytes;        /* all strings back to back */
    size_t *off;               /* id -> offset in bytes */
    uint32_t *len;             /* id -> length */
    uint64_t *hash;            /* id -> hash */
    size_t count, ids_cap;
    uint32_t *slots;           /* id + 1; 0 = empty */
    size_t slot_cap;           /* power of two */
} rperf__strmap_t;

/* Sized for `expected` strings of `expected_bytes` bytes in total (hints). */
int rperf__strmap_init(rperf__strmap_t *m, size_t expected, size_t expected_bytes);
/* Stores the id of (p, n) in *id; *is_new (may be NULL) tells if it was added. */
int rperf__strmap_intern(rperf__strmap_t *m, const char *p, size_t n, uint32_t *id, int *is_new);
static inline const char *
rperf__strmap_get(const rperf__strmap_t *m, uint32_t id, size_t *n)
{
    *n = m->len[id];
    /* An empty store has data == NULL; hand out "" instead. */
    return m->bytes.data ? (const char *)m->bytes.data + m->off[id] : "";
}
void rperf__strmap_free(rperf__strmap_t *m);

/* ---- uint32 sequence interning: a strmap keyed by the sequences' bytes
 * (every key is a multiple of 4 bytes long, so keys stay 4-byte aligned in
 * the store), plus a running weight sum per id. */
typedef struct rperf__seqmap {
    rperf__strmap_t keys;
    int64_t *sum;              /* id -> sum of the weights added */
    size_t sum_cap;
} rperf__seqmap_t;

/* Sized for `expected` sequences of `expected_items` values in total. */
int rperf__seqmap_init(rperf__seqmap_t *m, size_t expected, size_t expected_items);
int rperf__seqmap_intern(rperf__seqmap_t *m, const uint32_t *seq, uint32_t n, uint32_t *id,
                         int *is_new);
/* Intern `seq` and add `weight` to its sum; *id (may be NULL) gets its id. */
int rperf__seqmap_add(rperf__seqmap_t *m, const uint32_t *seq, uint32_t n, int64_t weight,
                      uint32_t *id);
static inline size_t
rperf__seqmap_count(const rperf__seqmap_t *m)
{
    return m->keys.count;
}
static inline const uint32_t *
rperf__seqmap_get(const rperf__seqmap_t *m, uint32_t id, uint32_t *n)
{
    static const uint32_t empty[1] = {0};
    *n = m->keys.len[id] / (uint32_t)sizeof(uint32_t);
    if (!*n)
        return empty;
    /* 4-byte aligned: see above. */
    return (const uint32_t *)(const void *)(m->keys.bytes.data + m->keys.off[id]);
}
void rperf__seqmap_free(rperf__seqmap_t *m);

/* ---- UTF-8 and escaping ---- */
/* 1 if (p, n) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int rperf__utf8_valid(const char *p, size_t n);
/* The same check, telling ASCII-only text apart (Ruby's 7bit coderange). */
enum { RPERF__UTF8_BROKEN = 0, RPERF__UTF8_ASCII = 1, RPERF__UTF8_VALID = 2 };
int rperf__utf8_class(const char *p, size_t n);
/* If (p, n) is valid UTF-8, returns it unchanged; otherwise writes a copy
 * with every invalid byte replaced by U+FFFD into `scratch` (reset first)
 * and returns that. Returns NULL only on allocation failure. */
const char *rperf__utf8_sanitize(const char *p, size_t n, rperf__buf_t *scratch, size_t *out_len);

/* Escaping for the line-based text formats (collapsed, text). Control
 * bytes (< 0x20, 0x7f) always become \xNN (two lowercase hex digits). */
#define RPERF__ESC_SEMICOLON  (1u << 0) /* ';' -> \x3b */
#define RPERF__ESC_EDGE_SPACE (1u << 1) /* leading / trailing ' ' -> \x20 */
/* Into `out` (reset first): `s` with invalid UTF-8 replaced by U+FFFD (via
 * `scratch`), then escaped per `flags`; `if_empty` (may be NULL) stands for
 * an empty string. Returns 0 or -ENOMEM. */
int rperf__text_clean(rperf__buf_t *out, rperf__buf_t *scratch, rperf_str_t s, unsigned flags,
                      const char *if_empty);

/* A JSON string literal with its quotes, appended to `out`: invalid UTF-8
 * -> U+FFFD (via `scratch`), '"' and '\\' escaped, control characters as
 * \n \r \t or \u00XX. RPERF__JSON_HTML_SAFE also writes '<', '>', '&',
 * U+2028 and U+2029 as \uXXXX, so the literal can sit inside an HTML
 * <script> element (html.c). `p` may be NULL when n == 0. 0 or -ENOMEM. */
#define RPERF__JSON_HTML_SAFE (1u << 0)
int rperf__json_str(rperf__buf_t *out, rperf__buf_t *scratch, const char *p, size_t n,
                    unsigned flags);

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

/* ---- the end of an encode() ---- */
/* An encoder's own failure `rc` (0 = success) is recorded on the writer as
 * "<who>: <strerror>" unless the writer already failed. Returns rc. */
int rperf__encode_result(rperf_writer_t *w, const char *who, int rc);

#endif /* RPERF_EXPORTERS_EXPORTER_INTERNAL_H */
