/* SPDX-License-Identifier: MIT */
/*
 * decode.c — the Ruby binding of the pprof reader (exporters/pprof_decode.c):
 *   Rperf._decode_pprof(bytes, name) -> Hash
 * what `rperf report` / `rperf diff` (ruby/lib/rperf/report.rb) read pprof
 * files with. `name` (the file name) only appears in error messages.
 *
 * The Hash:
 *   { sample_types: [[type, unit], …], default_sample_type: String|nil,
 *     period_type: [type, unit]|nil, period: Integer, time_nanos: Integer,
 *     duration_nanos: Integer, comments: [String, …],
 *     samples: [[frames, values, labels], …] }
 * - frames: leaf first, each a frozen [path, label, line] Array as in a
 *   result Hash's :aggregated_samples (line = the function's start line,
 *   0 when unknown); an inlined location gives one frame per Line,
 *   innermost first; a location without lines gives ["", "0x<address>", 0].
 *   Frames of one function are the same object (cheap to aggregate).
 * - values: one Integer per sample type. labels: nil, or a Hash of
 *   String key => String (string label) or Integer (numeric label; our
 *   encoder writes thread_seq and ractor so); the first value of a key wins.
 * - Strings are UTF-8; invalid bytes are replaced by U+FFFD.
 *
 * Context: GVL held (a Ruby method). The decode itself calls no Ruby API;
 * the decoded profile is freed by rb_ensure() whatever building raises.
 * Errors: ArgumentError "<name>: not a readable pprof profile: <why>",
 * NoMemoryError.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include <ruby.h>
#include <ruby/encoding.h>

#include "rperf_ruby.h"
#include "rperf_pprof_decode.h"
#include "exporter_internal.h"

static VALUE
utf8_str(rperf_str_t s)
{
    VALUE str = rb_utf8_str_new(s.len ? s.ptr : "", (long)s.len);
    if (rperf__utf8_class(s.ptr, s.len) == RPERF__UTF8_BROKEN) {
        VALUE fixed = rb_str_scrub(str, Qnil);
        if (!NIL_P(fixed))
            str = fixed;
    }
    return str;
}

static VALUE
fstr(rperf_str_t s)
{
    return rb_str_to_interned_str(utf8_str(s));
}

static VALUE
value_type(const rperf_pprof_value_type_t *vt)
{
    return rb_ary_new_from_args(2, utf8_str(vt->type), utf8_str(vt->unit));
}

static VALUE
frame_of_function(const rperf_pprof_t *p, VALUE cache, uint32_t fi)
{
    VALUE f = rb_ary_entry(cache, fi);
    if (NIL_P(f)) {
        const rperf_pprof_function_t *fn = &p->functions[fi];
        f = rb_ary_new_from_args(3, fstr(fn->filename), fstr(fn->name),
                                 LL2NUM(fn->start_line > 0 ? fn->start_line : 0));
        rb_obj_freeze(f);
        rb_ary_store(cache, fi, f);
    }
    return f;
}

static VALUE
frame_of_address(const rperf_pprof_t *p, VALUE cache, uint32_t li)
{
    long at = (long)p->nfunctions + (long)li;
    VALUE f = rb_ary_entry(cache, at);
    if (NIL_P(f)) {
        char buf[32];
        snprintf(buf, sizeof buf, "0x%" PRIx64, p->locations[li].address);
        f = rb_ary_new_from_args(3, rb_str_to_interned_str(rb_utf8_str_new_cstr(buf)),
                                 rb_str_to_interned_str(rb_utf8_str_new_cstr("")), INT2FIX(0));
        rb_obj_freeze(f);
        rb_ary_store(cache, at, f);
    }
    return f;
}

static VALUE
labels_of(const rperf_pprof_sample_t *s)
{
    if (!s->nlabels)
        return Qnil;
    VALUE h = rb_hash_new();
    for (uint32_t l = 0; l < s->nlabels; l++) {
        const rperf_pprof_label_t *lb = &s->labels[l];
        if (!lb->key.len)
            continue;
        VALUE k = fstr(lb->key);
        if (rb_hash_lookup2(h, k, Qundef) != Qundef)
            continue;
        rb_hash_aset(h, k, lb->is_num ? LL2NUM(lb->num) : utf8_str(lb->str));
    }
    return h;
}

static VALUE
build(VALUE arg)
{
    const rperf_pprof_t *p = (const rperf_pprof_t *)arg;
    VALUE h = rb_hash_new();
    VALUE types = rb_ary_new_capa((long)p->nsample_types);
    for (size_t i = 0; i < p->nsample_types; i++)
        rb_ary_push(types, value_type(&p->sample_types[i]));
    rb_hash_aset(h, ID2SYM(rb_intern("sample_types")), types);
    rb_hash_aset(h, ID2SYM(rb_intern("default_sample_type")),
                 p->default_sample_type.len ? utf8_str(p->default_sample_type) : Qnil);
    rb_hash_aset(h, ID2SYM(rb_intern("period_type")),
                 p->period_type.type.len || p->period_type.unit.len ? value_type(&p->period_type)
                                                                    : Qnil);
    rb_hash_aset(h, ID2SYM(rb_intern("period")), LL2NUM(p->period));
    rb_hash_aset(h, ID2SYM(rb_intern("time_nanos")), LL2NUM(p->time_nanos));
    rb_hash_aset(h, ID2SYM(rb_intern("duration_nanos")), LL2NUM(p->duration_nanos));
    VALUE comments = rb_ary_new_capa((long)p->ncomments);
    for (size_t i = 0; i < p->ncomments; i++)
        rb_ary_push(comments, utf8_str(p->comments[i]));
    rb_hash_aset(h, ID2SYM(rb_intern("comments")), comments);

    VALUE cache = rb_ary_new_capa((long)(p->nfunctions + p->nlocations));
    VALUE samples = rb_ary_new_capa((long)p->nsamples);
    for (size_t i = 0; i < p->nsamples; i++) {
        const rperf_pprof_sample_t *s = &p->samples[i];
        VALUE frames = rb_ary_new_capa((long)s->nlocations);
        for (uint32_t k = 0; k < s->nlocations; k++) {
            uint32_t li = s->locations[k];
            const rperf_pprof_location_t *loc = &p->locations[li];
            if (!loc->nlines) {
                rb_ary_push(frames, frame_of_address(p, cache, li));
                continue;
            }
            for (uint32_t n = 0; n < loc->nlines; n++) {
                uint32_t fi = loc->lines[n].function;
                rb_ary_push(frames, fi == RPERF_PPROF_NONE ? frame_of_address(p, cache, li)
                                                           : frame_of_function(p, cache, fi));
            }
        }
        VALUE values = rb_ary_new_capa((long)p->nsample_types);
        for (size_t v = 0; v < p->nsample_types; v++)
            rb_ary_push(values, LL2NUM(s->values[v]));
        rb_ary_push(samples, rb_ary_new_from_args(3, frames, values, labels_of(s)));
    }
    rb_hash_aset(h, ID2SYM(rb_intern("samples")), samples);
    RB_GC_GUARD(cache);
    return h;
}

static VALUE
release(VALUE arg)
{
    rperf_pprof_free((rperf_pprof_t *)arg);
    return Qnil;
}

static VALUE
rb_decode_pprof(VALUE self, VALUE bytes, VALUE name)
{
    (void)self;
    StringValue(bytes);
    name = rb_obj_as_string(name);
    rperf_pprof_t *p = NULL;
    char err[256];
    /* No Ruby code runs during the decode: RSTRING_PTR stays valid. */
    int rc = rperf_pprof_decode(RSTRING_PTR(bytes), (size_t)RSTRING_LEN(bytes), &p, err,
                                sizeof err);
    if (rc == -ENOMEM)
        rb_memerror();
    if (rc)
        rb_raise(rb_eArgError, "%" PRIsVALUE ": not a readable pprof profile: %s", name, err);
    return rb_ensure(build, (VALUE)p, release, (VALUE)p);
}

void
rperf_rb_decode_init(VALUE mRperf)
{
    rb_define_singleton_method(mRperf, "_decode_pprof", rb_decode_pprof, 2);
}
