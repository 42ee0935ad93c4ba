/*
 * label_table.h — the interned label-set table of ruby/label_table.c (ids,
 * tokens, the bytes each set is kept as, window cap and release). Used by
 * labels.c, label_codec.c, label_objects.c and api.c (via labels.c).
 * Context: see label_table.c.
 */
#ifndef RPERF_LABEL_TABLE_H
#define RPERF_LABEL_TABLE_H

#include <ruby/ruby.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RPERF_LABEL_CAP_DEFAULT 65536u

/* A kept object of a set being made (label_objects.c): its slice inside
 * the set's bytes, and the object (Qundef: kept already by another set). */
typedef struct rperf_label_obj {
    const char *slice;
    size_t len;
    VALUE obj;
} rperf_label_obj_t;

/* A set to intern: its canonical bytes (pairs sorted, label_codec.c),
 * hash, the order its pairs were given in (order[i]: the sorted index of
 * the i-th given pair) and its kept objects. */
typedef struct rperf_label_key {
    const char *bytes;
    size_t len;
    uint64_t hash;
    uint32_t npairs;
    const uint32_t *order;
    const rperf_label_obj_t *objs;
    size_t nobjs;
} rperf_label_key_t;

/* A set's content copied out of the table (rperf_rb_ltab_copy_locked):
 * reusable; `block` is malloc'd beyond `inline_`, freed by
 * rperf_rb_ltab_copy_free. */
typedef struct rperf_label_copy {
    const uint32_t *order;
    const char *bytes;
    size_t len;
    uint32_t npairs;
    bool overflow;            /* the overflow set (no pairs of its own) */
    void *block;
    size_t block_cap;
    uint32_t inline_[64];
} rperf_label_copy_t;

void rperf_rb_ltab_init(void);
void rperf_rb_ltab_lock(void);
void rperf_rb_ltab_unlock(void);
uint64_t rperf_rb_ltab_hash(const char *bytes, size_t len);
/* under the lock */
int64_t rperf_rb_ltab_find_locked(const char *bytes, size_t len, uint64_t hash);
int64_t rperf_rb_ltab_intern_locked(const rperf_label_key_t *key);
int64_t rperf_rb_ltab_overflow_locked(void);
uint64_t rperf_rb_ltab_token_locked(uint32_t id);
uint32_t rperf_rb_ltab_decode_locked(uint64_t token);
/* The table's epoch: moves at every start and clear, and only then may an
 * id be freed, revived or given to another set. */
uint32_t rperf_rb_ltab_epoch_locked(void);
void rperf_rb_ltab_window_clear_locked(const uint32_t *referenced, size_t n_ref);
/* id's content into *out (false: a free id, or out of memory) */
bool rperf_rb_ltab_copy_locked(uint32_t id, rperf_label_copy_t *out);
/* no lock needed */
void rperf_rb_ltab_copy_init(rperf_label_copy_t *c);
void rperf_rb_ltab_copy_free(rperf_label_copy_t *c);
uint32_t rperf_rb_ltab_count(void);
uint64_t rperf_rb_ltab_overflowed(void);
void rperf_rb_ltab_reset(uint32_t window_cap);
/* inside GC */
void rperf_rb_ltab_mark(void);

#endif /* RPERF_LABEL_TABLE_H */
