/*
 * normalize.c — Rperf._c_normalize_path(str), the id folding of
 * Rperf::Middleware.normalize (ruby/lib/rperf/middleware.rb, whose file
 * comment states the rules) in one byte scan: each segment part (after a
 * "/", up to the next "/", "." or the end) that is a UUID, digits only, or
 * 16+ hex digits with a digit becomes ":uuid", ":id" or ":hex".
 *
 * Same results as the Ruby regular expression it replaces: the argument
 * itself when it has no digit and no "-", otherwise a new unfrozen String
 * (equal to the argument when nothing changes), in the argument's
 * encoding. Scanned bytewise only where a "/", "." or ASCII digit byte is
 * always that character: UTF-8, US-ASCII, ASCII-8BIT and single-byte
 * ASCII-compatible encodings, valid strings. For anything else (other
 * multibyte or non-ASCII-compatible encodings, invalid byte sequences) it
 * returns nil and the Ruby version runs (and raises as it always did).
 *
 * rperf_rb_normalize_bytes folds a byte string into a caller's buffer (the
 * request label's fast path, request_label.c), for strings the scan reads
 * as above.
 *
 * Context: GVL held, any Ractor. Calls no Ruby method; allocates the
 * result String only (rperf_rb_normalize_bytes: nothing).
 */
#include "rperf_ruby.h"

#include <ruby/encoding.h>

#include <stdbool.h>
#include <string.h>

static inline bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static inline bool is_hex(unsigned char c)
{
    return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

static bool all_hex(const unsigned char *p, long n)
{
    for (long i = 0; i < n; i++)
        if (!is_hex(p[i])) return false;
    return true;
}

/* 8-4-4-4-12 hex digits */
static bool is_uuid(const unsigned char *p, long n)
{
    if (n != 36 || p[8] != '-' || p[13] != '-' || p[18] != '-' || p[23] != '-') return false;
    return all_hex(p, 8) && all_hex(p + 9, 4) && all_hex(p + 14, 4) && all_hex(p + 19, 4) &&
           all_hex(p + 24, 12);
}

/* The replacement of one segment part, or NULL to keep it. */
static const char *replacement(const unsigned char *p, long n)
{
    if (n == 36 && is_uuid(p, n)) return ":uuid";
    bool digits = n > 0, hex = true, some_digit = false;
    for (long i = 0; i < n && (digits || hex); i++) {
        bool d = is_digit(p[i]);
        digits = digits && d;
        some_digit = some_digit || d;
        hex = hex && is_hex(p[i]);
    }
    if (digits) return ":id";
    if (hex && some_digit && n >= 16) return ":hex";
    return NULL;
}

/* Where the folded path goes: a Ruby String (made at the first
 * replacement) or a caller's fixed buffer (sink.buf; overflow sets
 * sink.full). */
typedef struct sink {
    VALUE str;
    char *buf;
    long len, cap;
    bool full;
} sink_t;

static void sink_put(sink_t *o, const char *p, long n)
{
    if (o->buf) {
        if (o->full || n > o->cap - o->len) {
            o->full = true;
            return;
        }
        memcpy(o->buf + o->len, p, (size_t)n);
        o->len += n;
    } else {
        rb_str_buf_cat(o->str, p, n);
    }
}

/* Folds p into o up to its last replacement and returns where the rest of
 * p starts (the caller copies it), or -1 when nothing is replaced (o is
 * untouched). `start` runs at the first replacement (a String sink makes
 * its String then). */
static long fold(const unsigned char *p, long n, sink_t *o, void (*start)(sink_t *, void *), void *arg)
{
    bool started = false;
    long copied = 0;            /* bytes of p already in o */
    for (long s = 0; s < n; s++) {
        if (p[s] != '/') continue;
        long b = s + 1, e = b;
        while (e < n && p[e] != '/' && p[e] != '.') e++;
        const char *rep = replacement(p + b, e - b);
        if (rep) {
            if (!started && start) start(o, arg);
            started = true;
            sink_put(o, (const char *)p + copied, b - copied);
            sink_put(o, rep, (long)strlen(rep));
            copied = e;
        }
        s = e - 1;              /* the next "/" (or "."), if any */
    }
    return started ? copied : -1;
}

static bool candidate(const unsigned char *p, long n)
{
    for (long i = 0; i < n; i++)
        if (is_digit(p[i]) || p[i] == '-') return true;
    return false;
}

long rperf_rb_normalize_bytes(const char *src, long n, char *out, long cap)
{
    const unsigned char *p = (const unsigned char *)src;
    sink_t o = { Qnil, out, 0, cap, false };
    long copied = candidate(p, n) ? fold(p, n, &o, NULL, NULL) : -1;
    if (copied < 0) copied = 0;
    sink_put(&o, src + copied, n - copied);
    return o.full ? -1 : o.len;
}

static bool scannable(VALUE str)
{
    rb_encoding *enc = rb_enc_get(str);
    if (!rb_enc_asciicompat(enc)) return false;
    if (rb_enc_mbmaxlen(enc) > 1 && enc != rb_utf8_encoding()) return false;
    return enc == rb_ascii8bit_encoding() || rb_enc_str_coderange(str) != ENC_CODERANGE_BROKEN;
}

static void start_string(sink_t *o, void *arg)
{
    VALUE str = *(const VALUE *)arg;
    o->str = rb_str_buf_new(RSTRING_LEN(str));
    rb_enc_copy(o->str, str);
}

static VALUE normalize_path(VALUE self, VALUE str)
{
    (void)self;
    Check_Type(str, T_STRING);
    if (!scannable(str)) return Qnil;
    const unsigned char *p = (const unsigned char *)RSTRING_PTR(str);
    long n = RSTRING_LEN(str);
    if (!candidate(p, n)) return str;
    sink_t o = { Qnil, NULL, 0, 0, false };
    long copied = fold(p, n, &o, start_string, &str);
    if (copied < 0) return rb_str_dup(str);
    sink_put(&o, (const char *)p + copied, n - copied);
    RB_GC_GUARD(str);
    return o.str;
}

void rperf_rb_normalize_init(VALUE m)
{
    rb_define_module_function(m, "_c_normalize_path", normalize_path, 1);
}
