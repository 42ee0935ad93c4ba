/*
 * label_codec.c — the bytes a label set is kept as, in C memory, and the
 * Ruby objects rebuilt from them on request (Rperf.labels, a result's
 * :label_sets).
 *
 * One key or value is a slice: a tag byte, a u64 payload length, then
 *   's' String: the encoding index (int32), then the bytes
 *   'y' Symbol: the encoding index of its name, then the name's bytes
 *   'i' Fixnum (int64), 'b' Bignum (its decimal digits), 'd' Float (double)
 *   't' true, 'f' false, 'n' nil (empty payloads)
 *   'o' any other shareable object: its class name's length (u64), the
 *       class name, then its inspect; the object itself is kept by
 *       label_objects.c, found by this slice
 * Two slices are equal iff they name the same key or value (the same
 * String content and encoding, the same Symbol, number or constant), so
 * a set's bytes — its pairs (key slice, value slice) sorted by key slice
 * (label_table.c keeps them) — are equal iff the sets are.
 *
 * Rebuilt objects are frozen: Strings with their encoding, Symbols found
 * by name (a dynamic Symbol collected meanwhile is made again: the same
 * Symbol to Ruby), numbers and constants as they were, kept objects as
 * they were given.
 *
 * Contexts: GVL held, any Ractor. Functions marked "C only" in
 * label_codec.h call no Ruby API (label_table.c runs them under its
 * mutex); the others are never called with that mutex held
 * (rperf_rb_label_decode takes it for a kept object).
 */
#include "label_codec.h"
#include "label_objects.h"
#include "label_table.h"

#include <ruby/encoding.h>

#include <string.h>

/* ---- buffer ------------------------------------------------------------------ */

void
rperf_rb_lbuf_init(rperf_lbuf_t *b)
{
    b->p = b->inline_;
    b->len = 0;
    b->cap = sizeof(b->inline_);
}

void
rperf_rb_lbuf_put(rperf_lbuf_t *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap * 2 > b->len + n ? b->cap * 2 : b->len + n;
        char *q = ruby_xmalloc(cap);
        memcpy(q, b->p, b->len);
        if (b->p != b->inline_) ruby_xfree(b->p);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

void
rperf_rb_lbuf_free(rperf_lbuf_t *b)
{
    if (b->p != b->inline_) ruby_xfree(b->p);
    rperf_rb_lbuf_init(b);
}

/* ---- encoding ------------------------------------------------------------------ */

static void
put_header(rperf_lbuf_t *b, char tag, size_t payload)
{
    uint64_t len = payload;
    rperf_rb_lbuf_put(b, &tag, 1);
    rperf_rb_lbuf_put(b, &len, sizeof(len));
}

static void
put_bytes_with_encoding(rperf_lbuf_t *b, char tag, int enc, const char *p, size_t n)
{
    int32_t e = enc;
    put_header(b, tag, sizeof(e) + n);
    rperf_rb_lbuf_put(b, &e, sizeof(e));
    rperf_rb_lbuf_put(b, p, n);
}

void
rperf_rb_label_put_string(rperf_lbuf_t *b, int enc, const char *p, size_t n)
{
    put_bytes_with_encoding(b, 's', enc, p, n);
}

void
rperf_rb_label_put_symbol(rperf_lbuf_t *b, VALUE sym)
{
    VALUE name = rb_sym2str(sym);
    put_bytes_with_encoding(b, 'y', rb_enc_get_index(name), RSTRING_PTR(name), (size_t)RSTRING_LEN(name));
    RB_GC_GUARD(name);
}

static void
put_fixed(rperf_lbuf_t *b, char tag, const void *p, size_t n)
{
    put_header(b, tag, n);
    rperf_rb_lbuf_put(b, p, n);
}

/* An object kept as itself: its class name and inspect name it. */
static void
put_object(rperf_lbuf_t *b, VALUE v)
{
    VALUE cls = rb_class_name(rb_obj_class(v));
    VALUE ins = rb_inspect(v);
    uint64_t cn = (uint64_t)RSTRING_LEN(cls);
    put_header(b, RPERF_LABEL_TAG_OBJECT, sizeof(cn) + cn + (size_t)RSTRING_LEN(ins));
    rperf_rb_lbuf_put(b, &cn, sizeof(cn));
    rperf_rb_lbuf_put(b, RSTRING_PTR(cls), (size_t)cn);
    rperf_rb_lbuf_put(b, RSTRING_PTR(ins), (size_t)RSTRING_LEN(ins));
    RB_GC_GUARD(cls);
    RB_GC_GUARD(ins);
}

void
rperf_rb_label_put_value(rperf_lbuf_t *b, VALUE v)
{
    if (RB_TYPE_P(v, T_STRING)) {
        rperf_rb_label_put_string(b, rb_enc_get_index(v), RSTRING_PTR(v), (size_t)RSTRING_LEN(v));
    } else if (RB_SYMBOL_P(v)) {
        rperf_rb_label_put_symbol(b, v);
    } else if (RB_FIXNUM_P(v)) {
        int64_t x = FIX2LONG(v);
        put_fixed(b, 'i', &x, sizeof(x));
    } else if (RB_TYPE_P(v, T_BIGNUM)) {
        VALUE digits = rb_big2str(v, 10);
        put_fixed(b, 'b', RSTRING_PTR(digits), (size_t)RSTRING_LEN(digits));
        RB_GC_GUARD(digits);
    } else if (RB_FLOAT_TYPE_P(v)) {
        double d = RFLOAT_VALUE(v);
        put_fixed(b, 'd', &d, sizeof(d));
    } else if (v == Qtrue || v == Qfalse || NIL_P(v)) {
        put_header(b, v == Qtrue ? 't' : v == Qfalse ? 'f' : 'n', 0);
    } else {
        put_object(b, v);
    }
}

/* ---- walking slices (C only) ---------------------------------------------------- */

static uint64_t
payload_len(const char *p)
{
    uint64_t n;
    memcpy(&n, p + 1, sizeof(n));
    return n;
}

size_t
rperf_rb_label_slice_len(const char *p, size_t avail)
{
    if (avail < RPERF_LABEL_SLICE_HEADER) return 0;
    uint64_t n = payload_len(p);
    if (n > avail - RPERF_LABEL_SLICE_HEADER) return 0;
    return RPERF_LABEL_SLICE_HEADER + (size_t)n;
}

bool
rperf_rb_label_split(const char *bytes, size_t len, uint32_t npairs, rperf_label_pair_t *out)
{
    size_t at = 0;
    for (uint32_t i = 0; i < npairs; i++) {
        size_t kn = rperf_rb_label_slice_len(bytes + at, len - at);
        if (!kn) return false;
        size_t vn = rperf_rb_label_slice_len(bytes + at + kn, len - at - kn);
        if (!vn) return false;
        out[i] = (rperf_label_pair_t){ bytes + at, kn, bytes + at + kn, vn };
        at += kn + vn;
    }
    return at == len;
}

/* ---- comparing keys -------------------------------------------------------------- */

static bool
all_ascii(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] & 0x80) return false;
    return true;
}

static bool
ascii_compatible(int32_t enc)
{
    rb_encoding *e = rb_enc_from_index(enc);
    return e && rb_enc_asciicompat(e);
}

static bool
is_string_slice(const char *p, size_t n)
{
    return n >= RPERF_LABEL_SLICE_HEADER + sizeof(int32_t) && p[0] == 's';
}

bool
rperf_rb_label_same_key(const char *a, size_t an, const char *b, size_t bn)
{
    if (an == bn && memcmp(a, b, an) == 0) return true;
    if (an != bn || !is_string_slice(a, an) || !is_string_slice(b, bn)) return false;
    const size_t head = RPERF_LABEL_SLICE_HEADER + sizeof(int32_t);
    if (memcmp(a + head, b + head, an - head) != 0) return false;
    /* the same bytes in two encodings: String#== when both are ASCII */
    int32_t ea, eb;
    memcpy(&ea, a + RPERF_LABEL_SLICE_HEADER, sizeof(ea));
    memcpy(&eb, b + RPERF_LABEL_SLICE_HEADER, sizeof(eb));
    return an == head || (all_ascii(a + head, an - head) && ascii_compatible(ea) && ascii_compatible(eb));
}

/* ---- decoding -------------------------------------------------------------------- */

static rb_encoding *
encoding_of(int32_t enc)
{
    rb_encoding *e = rb_enc_from_index(enc);
    return e ? e : rb_ascii8bit_encoding();
}

static VALUE
decode_symbol(int32_t enc, const char *p, size_t n)
{
    VALUE sym = rb_check_symbol_cstr(p, (long)n, encoding_of(enc));
    return NIL_P(sym) ? rb_str_intern(rb_enc_str_new(p, (long)n, encoding_of(enc))) : sym;
}

/* A kept object (label_objects.c); its inspect as a String if it is gone
 * (its set was freed meanwhile). */
static VALUE
decode_object(const char *slice, size_t n, const char *payload, size_t pn)
{
    rperf_rb_ltab_lock();
    VALUE obj = rperf_rb_lobj_find_locked(slice, n);
    rperf_rb_ltab_unlock();
    if (obj != Qundef) return obj;
    uint64_t cn;
    memcpy(&cn, payload, sizeof(cn));
    size_t skip = sizeof(cn) + (cn < pn - sizeof(cn) ? (size_t)cn : pn - sizeof(cn));
    return rb_obj_freeze(rb_utf8_str_new(payload + skip, (long)(pn - skip)));
}

VALUE
rperf_rb_label_decode(const char *p, size_t n)
{
    const char *d = p + RPERF_LABEL_SLICE_HEADER;
    size_t dn = n - RPERF_LABEL_SLICE_HEADER;
    int32_t enc = 0;
    if ((p[0] == 's' || p[0] == 'y') && dn >= sizeof(enc)) {
        memcpy(&enc, d, sizeof(enc));
        d += sizeof(enc);
        dn -= sizeof(enc);
    }
    switch (p[0]) {
    case 's': return rb_obj_freeze(rb_enc_str_new(d, (long)dn, encoding_of(enc)));
    case 'y': return decode_symbol(enc, d, dn);
    case 'i': {
        int64_t x = 0;
        memcpy(&x, d, dn < sizeof(x) ? dn : sizeof(x));
        return LL2NUM(x);
    }
    case 'b': return rb_str_to_inum(rb_usascii_str_new(d, (long)dn), 10, 0);
    case 'd': {
        double x = 0;
        memcpy(&x, d, dn < sizeof(x) ? dn : sizeof(x));
        return DBL2NUM(x);
    }
    case 't': return Qtrue;
    case 'f': return Qfalse;
    case RPERF_LABEL_TAG_OBJECT:
        if (dn >= sizeof(uint64_t)) return decode_object(p, n, d, dn);
        return Qnil;
    default: return Qnil;
    }
}

VALUE
rperf_rb_label_set_hash(const char *bytes, size_t len, const uint32_t *order, uint32_t npairs)
{
    VALUE tmp;
    rperf_label_pair_t *pairs = ALLOCV_N(rperf_label_pair_t, tmp, npairs ? npairs : 1);
    VALUE h = rb_hash_new_capa(npairs);
    if (rperf_rb_label_split(bytes, len, npairs, pairs)) {
        for (uint32_t i = 0; i < npairs; i++) {
            uint32_t j = order && order[i] < npairs ? order[i] : i;
            VALUE k = rperf_rb_label_decode(pairs[j].k, pairs[j].kn);
            rb_hash_aset(h, k, rperf_rb_label_decode(pairs[j].v, pairs[j].vn));
            RB_GC_GUARD(k);
        }
    }
    ALLOCV_END(tmp);
    /* every key and value is frozen or shareable: the Hash is shareable
     * once frozen (Ractor.shareable? finds it so on demand) */
    return rb_obj_freeze(h);
}
