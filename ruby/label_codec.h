/*
 * label_codec.h — label keys and values as bytes, and label sets rebuilt
 * from them (ruby/label_codec.c). Used by labels.c (merging, keys,
 * results) and label_table.c (walking a set's bytes under the lock).
 * Context: see label_codec.c; the functions marked "C only" call no Ruby
 * API and may run under the label table's mutex.
 */
#ifndef RPERF_LABEL_CODEC_H
#define RPERF_LABEL_CODEC_H

#include <ruby/ruby.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A growable byte buffer with inline room (ruby_xmalloc beyond it). */
typedef struct rperf_lbuf {
    char *p;
    size_t len, cap;
    char inline_[512];
} rperf_lbuf_t;

void rperf_rb_lbuf_init(rperf_lbuf_t *b);
void rperf_rb_lbuf_put(rperf_lbuf_t *b, const void *src, size_t n);
void rperf_rb_lbuf_free(rperf_lbuf_t *b);

/* Slice tags: one encoded key or value is tag, u64 payload length, payload. */
#define RPERF_LABEL_TAG_OBJECT 'o'
#define RPERF_LABEL_SLICE_HEADER 9

/* One key or value as its slice: the same slice iff the same label key or
 * value. v is a String or a shareable object; an object of another class
 * than String, Symbol, Integer, Float, true, false, nil is named by its
 * class and inspect (Ruby calls). GVL held, no lock. */
void rperf_rb_label_put_value(rperf_lbuf_t *b, VALUE v);
/* The slices of a String (encoding index, bytes) and of a Symbol, as
 * rperf_rb_label_put_value writes them. */
void rperf_rb_label_put_string(rperf_lbuf_t *b, int enc, const char *p, size_t n);
void rperf_rb_label_put_symbol(rperf_lbuf_t *b, VALUE sym);

/* C only: the length of the slice at p (0: malformed or past avail). */
size_t rperf_rb_label_slice_len(const char *p, size_t avail);
/* C only: a set's bytes (its pairs, each a key slice then a value slice)
 * cut into npairs pairs. False when the bytes hold other than npairs
 * well-formed pairs. */
typedef struct rperf_label_pair {
    const char *k;
    size_t kn;
    const char *v;
    size_t vn;
} rperf_label_pair_t;
bool rperf_rb_label_split(const char *bytes, size_t len, uint32_t npairs, rperf_label_pair_t *out);

/* Two key slices name the same Hash key (String keys compare as String#==
 * does: equal bytes, and the same encoding or both ASCII). GVL held. */
bool rperf_rb_label_same_key(const char *a, size_t an, const char *b, size_t bn);

/* A key or value rebuilt from its slice as a frozen object (a kept
 * object from label_objects.c, taking the table lock). GVL held, no lock. */
VALUE rperf_rb_label_decode(const char *p, size_t n);
/* The frozen (so Ractor-shareable) Hash of a set: its bytes, and order[i], the
 * sorted index of the i-th pair as given (the Hash's order). GVL held, no
 * lock. */
VALUE rperf_rb_label_set_hash(const char *bytes, size_t len, const uint32_t *order, uint32_t npairs);

#endif /* RPERF_LABEL_CODEC_H */
