/*
 * label_memo.h — the per-native-thread memo of recent label applications
 * (ruby/label_memo.c), used by labels.c and request_label.c. Context: see label_memo.c.
 */
#ifndef RPERF_LABEL_MEMO_H
#define RPERF_LABEL_MEMO_H

#include <ruby/ruby.h>
#include <stdbool.h>
#include <stdint.h>

#define RPERF_MEMO_KEY_BYTES 160

/* The labels Hash of one Rperf.label call as memo key bytes. */
typedef struct rperf_memo_key {
    bool ok;                 /* false: not memoisable (kinds, size) */
    uint32_t len;
    char bytes[RPERF_MEMO_KEY_BYTES];
} rperf_memo_key_t;

/* at load time, GVL held */
void rperf_rb_memo_init(void);
void rperf_rb_memo_key(VALUE labels, rperf_memo_key_t *out);
/* The key rperf_rb_memo_key gives { key => a String of encoding index
 * `enc` and bytes p[0, n] }, made from the bytes (no String needed). */
void rperf_rb_memo_key_string_pair(VALUE key, int enc, const char *p, long n, rperf_memo_key_t *out);
/* under the label table's lock: the token of (cur set + labels) recorded
 * in the table's current epoch, or false */
bool rperf_rb_memo_find_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t *result);
/* under the label table's lock: record that result, found in the table at
 * `epoch` */
void rperf_rb_memo_put_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t result);

/* labels.c: label the running thread from the memo, or in full (see
 * labels.c) */
bool rperf_rb_label_memo_relabel(const rperf_memo_key_t *mk, uint64_t *prev);
uint64_t rperf_rb_label_merge(VALUE labels, const rperf_memo_key_t *mk);
/* labels.c: the running thread has no labels and { key => a String of
 * encoding index enc and bytes p[0, n] } is a set the table holds: label
 * the thread with it and return true (its previous token is 0); else
 * false, nothing changed. No String or Hash is made. */
bool rperf_rb_label_known_single(VALUE key, int enc, const char *p, long n);

#endif
