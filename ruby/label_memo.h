/*
 * label_memo.h — the per-native-thread memo of recent label applications
 * (ruby/label_memo.c), used by labels.c and request_label.c, and the two
 * labels.c functions request_label.c calls. Context: see label_memo.c.
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
/* has this native thread a memo yet (one probe is pointless otherwise) */
bool rperf_rb_memo_present(void);
/* The key rperf_rb_memo_key gives { key => a String of encoding index
 * `enc` and bytes p[0, n] }, made from the bytes (no String needed). */
void rperf_rb_memo_key_string_pair(VALUE key, int enc, const char *p, long n, rperf_memo_key_t *out);
/* under the label table's lock: the token of (cur set + labels) recorded
 * in the table's current epoch, or false */
bool rperf_rb_memo_find_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t *result);
/* under the label table's lock: record that result, found in the table at
 * `epoch` */
void rperf_rb_memo_put_locked(uint32_t epoch, uint64_t cur, const rperf_memo_key_t *k, uint64_t result);

/* labels.c: merge labels into the running thread's set in full (see
 * labels.c) */
uint64_t rperf_rb_label_merge(VALUE labels, const rperf_memo_key_t *mk);
/* labels.c: Rperf::Middleware's request label { key => a String of
 * encoding index enc and bytes p[0, n] } (mk: its memo key), applied
 * without a String or Hash: from the thread's memo, or, for a thread with
 * no labels, the one-pair set from the table by its bytes (then
 * memoised), made there from them when new. True: labelled, *prev the
 * previous set's token; false: nothing changed (a thread inside an outer
 * label without a memo hit: the caller merges in full). */
bool rperf_rb_label_request_fast(const rperf_memo_key_t *mk, VALUE key, int enc, const char *p,
                                 long n, uint64_t *prev);

#endif
