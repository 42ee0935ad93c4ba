/*
 * request_label.c — Rperf._c_label_request(key, env, normalized), the fast
 * path of Rperf::Middleware#call: the request's endpoint label
 * ("METHOD PATH", PATH with its ids folded when `normalized`) applied
 * straight from the Rack env's bytes, with no String, Hash or Ruby call
 * (labels.c, rperf_rb_label_request_fast): a thread with no labels (the
 * usual request, and every request of a fresh thread under a
 * thread-per-connection server) takes the one-pair set from the label
 * table by its canonical bytes, or makes it there from them when it is
 * new (a raw URL); a thread inside an outer label takes the merged set
 * from its label memo (label_memo.c). It pays one Hash lookup per header,
 * a byte scan, a hash of ~40 bytes and one lock. A thread inside an outer
 * label whose merge is not memoised yet makes the value String and the
 * labels Hash and merges them in full, as Rperf.label would (and memoises
 * the merge).
 *
 * Returns the token of the thread's previous set (the middleware restores
 * it after the request), 0 when the profiler is not running (nothing to
 * label, as Rperf.label then), or nil for an env outside the cases below,
 * which the middleware labels in Ruby.
 *
 * Applies only where its result is certainly the Ruby path's: env a plain
 * Hash holding REQUEST_METHOD and PATH_INFO as plain Strings, both 7-bit,
 * in UTF-8, US-ASCII or ASCII-8BIT, the label value short enough for the
 * memo. The value's encoding is then that of the middleware's
 * "#{method} #{path}" (its literal is UTF-8): ASCII-8BIT when the method is,
 * UTF-8 otherwise. tests/ruby/test_middleware.rb checks both paths give the
 * same label set for every combination.
 *
 * Context: GVL held, any Ractor.
 */
#include "rperf_ruby.h"
#include "label_memo.h"

#include <ruby/encoding.h>

#include <string.h>

static VALUE s_method, s_path;

/* A String the fast path reads as the Ruby path would: of class String
 * itself (no subclass, no singleton methods such as its own to_s), 7-bit
 * bytes in one of the three encodings Rack servers use. */
static bool plain_ascii(VALUE s)
{
    if (s == Qundef || !RB_TYPE_P(s, T_STRING) || RBASIC_CLASS(s) != rb_cString) return false;
    int enc = rb_enc_get_index(s);
    if (enc != rb_utf8_encindex() && enc != rb_usascii_encindex() && enc != rb_ascii8bit_encindex())
        return false;
    return rb_enc_str_coderange(s) == ENC_CODERANGE_7BIT;
}

static VALUE label_request(VALUE self, VALUE key, VALUE env, VALUE normalized)
{
    (void)self;
    if (!rperf_engine_running()) return INT2FIX(0);
    /* a Hash itself: no subclass or singleton method may redefine [] */
    if (!RB_TYPE_P(env, T_HASH) || RBASIC_CLASS(env) != rb_cHash) return Qnil;
    VALUE m = rb_hash_lookup2(env, s_method, Qundef);
    VALUE p = rb_hash_lookup2(env, s_path, Qundef);
    if (!plain_ascii(m) || !plain_ascii(p)) return Qnil;

    char v[RPERF_MEMO_KEY_BYTES];
    long mn = RSTRING_LEN(m), pn = RSTRING_LEN(p), cap = (long)sizeof(v);
    if (mn + 1 > cap) return Qnil;
    memcpy(v, RSTRING_PTR(m), (size_t)mn);
    v[mn] = ' ';
    long n = mn + 1;
    if (RTEST(normalized)) {
        long got = rperf_rb_normalize_bytes(RSTRING_PTR(p), pn, v + n, cap - n);
        if (got < 0) return Qnil;
        n += got;
    } else {
        if (pn > cap - n) return Qnil;
        memcpy(v + n, RSTRING_PTR(p), (size_t)pn);
        n += pn;
    }
    int enc = rb_enc_get_index(m) == rb_ascii8bit_encindex() ? rb_ascii8bit_encindex() : rb_utf8_encindex();
    rperf_memo_key_t mk;
    rperf_rb_memo_key_string_pair(key, enc, v, n, &mk);
    uint64_t prev = 0;
    if (!rperf_rb_label_request_fast(&mk, key, enc, v, n, &prev)) {
        /* a miss: the value and the labels Hash the Ruby path would make */
        VALUE value = rb_str_freeze(rb_enc_str_new(v, n, rb_enc_from_index(enc)));
        VALUE labels = rb_hash_new_capa(1);
        rb_hash_aset(labels, key, value);
        prev = rperf_rb_label_merge(labels, &mk);
        RB_GC_GUARD(labels);
    }
    RB_GC_GUARD(m);
    RB_GC_GUARD(p);
    return ULL2NUM(prev);
}

void rperf_rb_request_label_init(VALUE m)
{
    s_method = rb_obj_freeze(rb_str_new_cstr("REQUEST_METHOD"));
    s_path = rb_obj_freeze(rb_str_new_cstr("PATH_INFO"));
    rb_gc_register_mark_object(s_method);
    rb_gc_register_mark_object(s_path);
    rb_define_module_function(m, "_c_label_request", label_request, 3);
}
