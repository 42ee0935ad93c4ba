/*
 * label_table.h — the interned label-set table of ruby/label_table.c (ids,
 * tokens, window cap and release, GC marking). Used by labels.c, api.c and
 * result.c only. Context: see label_table.c.
 */
#ifndef RPERF_LABEL_TABLE_H
#define RPERF_LABEL_TABLE_H

#include <ruby/ruby.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RPERF_LABEL_CAP_DEFAULT 65536u

void rperf_rb_ltab_init(void);
void rperf_rb_ltab_lock(void);
void rperf_rb_ltab_unlock(void);
uint64_t rperf_rb_ltab_hash(const char *bytes, size_t len);
/* under the lock */
int64_t rperf_rb_ltab_find_locked(const char *bytes, size_t len, uint64_t hash);
int64_t rperf_rb_ltab_intern_locked(const char *bytes, size_t len, uint64_t hash, VALUE set);
int64_t rperf_rb_ltab_overflow_locked(void);
uint64_t rperf_rb_ltab_token_locked(uint32_t id);
uint32_t rperf_rb_ltab_decode_locked(uint64_t token);
/* The table's epoch: moves at every start and clear, and only then may an
 * id be freed, revived or given to another set. */
uint32_t rperf_rb_ltab_epoch_locked(void);
void rperf_rb_ltab_window_clear_locked(const uint32_t *referenced, size_t n_ref);
/* no lock needed */
VALUE rperf_rb_ltab_set(uint32_t id);
uint32_t rperf_rb_ltab_count(void);
uint64_t rperf_rb_ltab_overflowed(void);
void rperf_rb_ltab_reset(uint32_t window_cap);
VALUE rperf_rb_ltab_sets(VALUE empty);
void rperf_rb_ltab_mark(bool minor);

#endif
