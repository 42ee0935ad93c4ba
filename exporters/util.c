/* SPDX-License-Identifier: MIT */
/*
 * util.c — the helpers of exporter_internal.h: byte buffer and output
 * staging, number formatting, the string and uint32-sequence interning
 * tables, UTF-8 validation/sanitising, escaping for text formats, thread
 * lookup, and the common end of an encode() call.
 *
 * Context: any non-signal thread; no Ruby API; no shared state.
 *
 * DESIGN
 * The string table keeps its keys in one contiguous store and the per-id
 * metadata in parallel arrays; the hash index holds id+1 per slot
 * (0 = empty), linear probing, load factor <= 1/2, so lookups cost one hash
 * plus usually one key comparison. Ids are dense and in insertion order,
 * which is what the encoders want (pprof string table, frame tables). The
 * sequence table is the same table keyed by the sequences' bytes, plus a
 * weight sum per id (the encoders merge samples by stack).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "exporter_internal.h"

/* ---- buffer ---------------------------------------------------------------- */

int
rperf__buf_reserve(rperf__buf_t *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    size_t need = b->len + extra;
    if (need < b->len)
        return -ENOMEM;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return -ENOMEM;
        cap *= 2;
    }
    unsigned char *p = realloc(b->data, cap);
    if (!p)
        return -ENOMEM;
    b->data = p;
    b->cap = cap;
    return 0;
}

int
rperf__buf_append(rperf__buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    int rc = rperf__buf_reserve(b, n);
    if (rc)
        return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int
rperf__buf_put_cstr(rperf__buf_t *b, const char *s)
{
    return rperf__buf_append(b, s, strlen(s));
}

int
rperf__buf_put_u64(rperf__buf_t *b, uint64_t v)
{
    int rc = rperf__buf_reserve(b, 24);
    if (rc)
        return rc;
    b->len += rperf__u64_dec((char *)b->data + b->len, v);
    return 0;
}

void
rperf__buf_free(rperf__buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

uint32_t *
rperf__buf_u32s(rperf__buf_t *b, size_t n)
{
    b->len = 0;
    if (n > SIZE_MAX / sizeof(uint32_t) || rperf__buf_reserve(b, (n ? n : 1) * sizeof(uint32_t)))
        return NULL;
    /* malloc'd memory is aligned for any type. */
    return (uint32_t *)(void *)b->data;
}

int
rperf__buf_flush(rperf__buf_t *b, rperf_writer_t *w, size_t at)
{
    if (b->len == 0 || b->len < at)
        return 0;
    int rc = rperf_writer_write(w, b->data, b->len);
    b->len = 0;
    return rc;
}

/* ---- numbers ----------------------------------------------------------------- */

size_t
rperf__u64_dec(char *buf, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    return n;
}

const char *
rperf__bytes_unit(uint64_t v, uint64_t *tenths)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    unsigned k = 0;
    while (k + 1 < sizeof units / sizeof units[0] && v >> (10 * (k + 1)))
        k++;
    for (;;) {
        uint64_t unit = (uint64_t)1 << (10 * k);
        uint64_t q = v >> (10 * k), r = v & (unit - 1);
        /* r < 2^60, so r * 10 fits; rounded half up */
        *tenths = q * 10 + (r * 10 + unit / 2) / unit;
        if (*tenths < 10240 || k + 1 == sizeof units / sizeof units[0])
            return units[k];
        k++; /* 1023.95 KiB and up round to 1024.0: show 1.0 MiB instead */
    }
}

size_t
rperf__fmt_thousands(char *buf, uint64_t v)
{
    char digits[24];
    size_t nd = rperf__u64_dec(digits, v), n = 0;
    for (size_t i = 0; i < nd; i++) {
        if (i && (nd - i) % 3 == 0)
            buf[n++] = ',';
        buf[n++] = digits[i];
    }
    buf[n] = '\0';
    return n;
}

/* ---- hashing ----------------------------------------------------------------- */

static inline uint64_t
mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

uint64_t
rperf__hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *s = p;
    uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ mix64(w)) * 0x9e3779b97f4a7c15ULL;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ mix64(w ^ 0x5bd1e995u)) * 0x9e3779b97f4a7c15ULL;
    return mix64(h);
}

/* ---- string map ---------------------------------------------------------------- */

static size_t
pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

static int
rehash(rperf__strmap_t *m, size_t new_cap)
{
    uint32_t *s = calloc(new_cap, sizeof *s);
    if (!s)
        return -ENOMEM;
    size_t mask = new_cap - 1;
    for (size_t id = 0; id < m->count; id++) {
        size_t i = (size_t)m->hash[id] & mask;
        while (s[i])
            i = (i + 1) & mask;
        s[i] = (uint32_t)id + 1;
    }
    free(m->slots);
    m->slots = s;
    m->slot_cap = new_cap;
    return 0;
}

static int
grow_ids(rperf__strmap_t *m)
{
    if (m->count < m->ids_cap)
        return 0;
    /* Up to the expected count at once (the index is sized for it). */
    size_t nc = m->ids_cap ? m->ids_cap * 2 : m->slot_cap / 2 > 64 ? m->slot_cap / 2 : 64;
    size_t *o = realloc(m->off, nc * sizeof *o);
    if (!o)
        return -ENOMEM;
    m->off = o;
    uint32_t *l = realloc(m->len, nc * sizeof *l);
    if (!l)
        return -ENOMEM;
    m->len = l;
    uint64_t *h = realloc(m->hash, nc * sizeof *h);
    if (!h)
        return -ENOMEM;
    m->hash = h;
    m->ids_cap = nc;
    return 0;
}

int
rperf__strmap_init(rperf__strmap_t *m, size_t expected, size_t expected_bytes)
{
    memset(m, 0, sizeof *m);
    int rc = rehash(m, pow2_at_least(expected * 2));
    if (rc == 0 && expected_bytes)
        rc = rperf__buf_reserve(&m->bytes, expected_bytes);
    return rc;
}

int
rperf__strmap_intern(rperf__strmap_t *m, const char *p, size_t n, uint32_t *id, int *is_new)
{
    if (n > UINT32_MAX || m->count >= UINT32_MAX - 1)
        return -EOVERFLOW;
    uint64_t h = rperf__hash_bytes(p, n, 0);
    size_t mask = m->slot_cap - 1;
    size_t i = (size_t)h & mask;
    for (;;) {
        uint32_t s = m->slots[i];
        if (!s)
            break;
        uint32_t cand = s - 1;
        if (m->hash[cand] == h && m->len[cand] == n &&
            (n == 0 || memcmp(m->bytes.data + m->off[cand], p, n) == 0)) {
            *id = cand;
            if (is_new)
                *is_new = 0;
            return 0;
        }
        i = (i + 1) & mask;
    }
    int rc = grow_ids(m);
    if (rc)
        return rc;
    size_t off = m->bytes.len;
    if ((rc = rperf__buf_append(&m->bytes, p, n)))
        return rc;
    uint32_t nid = (uint32_t)m->count++;
    m->off[nid] = off;
    m->len[nid] = (uint32_t)n;
    m->hash[nid] = h;
    m->slots[i] = nid + 1;
    if (m->count * 2 > m->slot_cap && (rc = rehash(m, m->slot_cap * 2)))
        return rc;
    *id = nid;
    if (is_new)
        *is_new = 1;
    return 0;
}

void
rperf__strmap_free(rperf__strmap_t *m)
{
    rperf__buf_free(&m->bytes);
    free(m->off);
    free(m->len);
    free(m->hash);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- sequence map ---------------------------------------------------------------- */

int
rperf__seqmap_init(rperf__seqmap_t *m, size_t expected, size_t expected_items)
{
    memset(m, 0, sizeof *m);
    if (expected_items > SIZE_MAX / sizeof(uint32_t))
        return -ENOMEM;
    return rperf__strmap_init(&m->keys, expected, expected_items * sizeof(uint32_t));
}

int
rperf__seqmap_intern(rperf__seqmap_t *m, const uint32_t *seq, uint32_t n, uint32_t *id,
                     int *is_new)
{
    int fresh;
    int rc = rperf__strmap_intern(&m->keys, (const char *)seq, (size_t)n * sizeof *seq, id, &fresh);
    if (rc)
        return rc;
    if (fresh) {
        if (*id >= m->sum_cap) {
            size_t nc = m->keys.ids_cap; /* > *id, and grows by doubling */
            int64_t *s = realloc(m->sum, nc * sizeof *s);
            if (!s)
                return -ENOMEM;
            m->sum = s;
            m->sum_cap = nc;
        }
        m->sum[*id] = 0;
    }
    if (is_new)
        *is_new = fresh;
    return 0;
}

int
rperf__seqmap_add(rperf__seqmap_t *m, const uint32_t *seq, uint32_t n, int64_t weight,
                  uint32_t *id)
{
    uint32_t sid;
    int rc = rperf__seqmap_intern(m, seq, n, &sid, NULL);
    if (rc)
        return rc;
    m->sum[sid] += weight;
    if (id)
        *id = sid;
    return 0;
}

void
rperf__seqmap_free(rperf__seqmap_t *m)
{
    rperf__strmap_free(&m->keys);
    free(m->sum);
    memset(m, 0, sizeof *m);
}

/* ---- UTF-8 ------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid there. */
static size_t
utf8_seq_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    if (c < 0xc2)
        return 0;
    if (c < 0xe0) {
        return (n >= 2 && (s[1] & 0xc0) == 0x80) ? 2 : 0;
    }
    if (c < 0xf0) {
        if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
            return 0;
        if (c == 0xe0 && s[1] < 0xa0)
            return 0; /* overlong */
        if (c == 0xed && s[1] >= 0xa0)
            return 0; /* surrogate */
        return 3;
    }
    if (c < 0xf5) {
        if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
            return 0;
        if (c == 0xf0 && s[1] < 0x90)
            return 0; /* overlong */
        if (c == 0xf4 && s[1] >= 0x90)
            return 0; /* > U+10FFFF */
        return 4;
    }
    return 0;
}

int
rperf__utf8_valid(const char *p, size_t n)
{
    return rperf__utf8_class(p, n) != RPERF__UTF8_BROKEN;
}

int
rperf__utf8_class(const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    int cls = RPERF__UTF8_ASCII;
    size_t i = 0;
    while (i < n) {
        /* Fast path for ASCII runs, 32 then 8 bytes at a time (outputs
         * reach 100 MB, mostly ASCII). */
        if (n - i >= 32) {
            uint64_t w[4];
            memcpy(w, s + i, 32);
            if (!((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ULL)) {
                i += 32;
                continue;
            }
        }
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ULL)) {
                i += 8;
                continue;
            }
        }
        size_t l = utf8_seq_len(s + i, n - i);
        if (!l)
            return RPERF__UTF8_BROKEN;
        if (l > 1)
            cls = RPERF__UTF8_VALID;
        i += l;
    }
    return cls;
}

const char *
rperf__utf8_sanitize(const char *p, size_t n, rperf__buf_t *scratch, size_t *out_len)
{
    if (rperf__utf8_valid(p, n)) {
        *out_len = n;
        return p;
    }
    static const unsigned char repl[3] = {0xef, 0xbf, 0xbd};
    const unsigned char *s = (const unsigned char *)p;
    scratch->len = 0;
    if (rperf__buf_reserve(scratch, n * 3 + 1))
        return NULL;
    size_t i = 0;
    while (i < n) {
        size_t l = utf8_seq_len(s + i, n - i);
        if (l) {
            memcpy(scratch->data + scratch->len, s + i, l);
            scratch->len += l;
            i += l;
        } else {
            memcpy(scratch->data + scratch->len, repl, 3);
            scratch->len += 3;
            i++;
        }
    }
    *out_len = scratch->len;
    return (const char *)scratch->data;
}

int
rperf__json_str(rperf__buf_t *out, rperf__buf_t *scratch, const char *p, size_t n, unsigned flags)
{
    static const char hex[] = "0123456789abcdef";
    if (n == 0)
        return rperf__buf_append(out, "\"\"", 2);
    size_t len;
    const char *s = rperf__utf8_sanitize(p, n, scratch, &len);
    if (!s)
        return -ENOMEM;
    int rc = rperf__buf_reserve(out, len * 6 + 2);
    if (rc)
        return rc;
    int html = (flags & RPERF__JSON_HTML_SAFE) != 0;
    unsigned char *d = out->data + out->len;
    *d++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        unsigned code;
        if (c == '"' || c == '\\') {
            *d++ = '\\';
            *d++ = c;
            continue;
        }
        if (c == '\n' || c == '\r' || c == '\t') {
            *d++ = '\\';
            *d++ = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            continue;
        }
        if (html && c == 0xe2 && i + 2 < len && (unsigned char)s[i + 1] == 0x80 &&
            ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) {
            code = (unsigned char)s[i + 2] == 0xa8 ? 0x2028 : 0x2029; /* JS line terminators */
            i += 2;
        } else if (c < 0x20 || (html && (c == '<' || c == '>' || c == '&'))) {
            code = c;
        } else {
            *d++ = c;
            continue;
        }
        *d++ = '\\';
        *d++ = 'u';
        *d++ = (unsigned char)hex[(code >> 12) & 15];
        *d++ = (unsigned char)hex[(code >> 8) & 15];
        *d++ = (unsigned char)hex[(code >> 4) & 15];
        *d++ = (unsigned char)hex[code & 15];
    }
    *d++ = '"';
    out->len = (size_t)(d - out->data);
    return 0;
}

int
rperf__text_clean(rperf__buf_t *out, rperf__buf_t *scratch, rperf_str_t s, unsigned flags,
                  const char *if_empty)
{
    static const char hex[] = "0123456789abcdef";
    size_t n;
    const char *p = rperf__utf8_sanitize(s.ptr, s.len, scratch, &n);
    if (!p)
        return -ENOMEM;
    out->len = 0;
    if (n == 0)
        return if_empty ? rperf__buf_append(out, if_empty, strlen(if_empty)) : 0;
    int rc = rperf__buf_reserve(out, n * 4);
    if (rc)
        return rc;
    unsigned char *d = out->data;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f || (c == ';' && (flags & RPERF__ESC_SEMICOLON)) ||
            (c == ' ' && (flags & RPERF__ESC_EDGE_SPACE) && (i == 0 || i == n - 1))) {
            *d++ = '\\';
            *d++ = 'x';
            *d++ = (unsigned char)hex[c >> 4];
            *d++ = (unsigned char)hex[c & 15];
        } else {
            *d++ = c;
        }
    }
    out->len = (size_t)(d - out->data);
    return 0;
}

/* ---- threads --------------------------------------------------------------------------- */

static int
cmp_thread(const void *a, const void *b)
{
    const rperf_view_thread_t *x = *(const rperf_view_thread_t *const *)a;
    const rperf_view_thread_t *y = *(const rperf_view_thread_t *const *)b;
    return (x->thread_seq > y->thread_seq) - (x->thread_seq < y->thread_seq);
}

int
rperf__threads_index(rperf__threads_t *t, const rperf_profile_view_t *view)
{
    t->sorted = NULL;
    t->count = 0;
    if (!view->thread_count)
        return 0;
    t->sorted = malloc(view->thread_count * sizeof *t->sorted);
    if (!t->sorted)
        return -ENOMEM;
    for (size_t i = 0; i < view->thread_count; i++)
        t->sorted[i] = &view->threads[i];
    qsort(t->sorted, view->thread_count, sizeof *t->sorted, cmp_thread);
    t->count = view->thread_count;
    return 0;
}

const rperf_view_thread_t *
rperf__threads_find(const rperf__threads_t *t, uint32_t thread_seq)
{
    size_t lo = 0, hi = t->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t s = t->sorted[mid]->thread_seq;
        if (s == thread_seq)
            return t->sorted[mid];
        if (s < thread_seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void
rperf__threads_free(rperf__threads_t *t)
{
    free(t->sorted);
    t->sorted = NULL;
    t->count = 0;
}

/* ---- the end of an encode() ---------------------------------------------------------- */

int
rperf__encode_result(rperf_writer_t *w, const char *who, int rc)
{
    if (rc && !rperf_writer_status(w))
        rperf_writer_fail(w, rc, "%s: %s", who, strerror(-rc));
    return rc;
}
