/*
 * label_objects.c — the label keys and values that stay Ruby objects:
 * shareable objects of classes other than String, Symbol, Integer, Float,
 * true, false and nil (a frozen Struct or Data, a Range, a Rational, a
 * Class). Every other key and value lives in C memory as bytes
 * (label_codec.c) and is rebuilt on request; these cannot be, so the
 * object itself is kept here, found by its slice (class name and
 * inspect), counted by the label sets that hold it (label_table.c refs it
 * when it makes a set and unrefs it when it frees one), dropped with the
 * last of them, and marked at every GC. They are the only label objects
 * the profiler's mark function marks: as many as the distinct such values
 * the live label sets hold, none for the common types.
 *
 * The table: open addressing with linear probing, deletion by backward
 * shift; each slot owns a malloc'd copy of its slice.
 *
 * Locking: everything runs under the label table's mutex (label_table.c:
 * C work only, no Ruby allocation), except rperf_rb_lobj_mark, which runs
 * inside GC without it: no label call is inside C code under the mutex
 * then (see label_table.c).
 */
#include "label_objects.h"
#include "label_table.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct obj_slot {
    char *slice;           /* NULL: empty */
    size_t len;
    uint64_t hash;
    VALUE obj;
    uint32_t refs;
} obj_slot_t;

static obj_slot_t *slots;
static size_t cap, used;   /* cap: 0 or a power of two */

/* The slot holding this slice, or the empty slot where it would go. */
static size_t
probe(const char *slice, size_t n, uint64_t h)
{
    size_t i = h & (cap - 1);
    while (slots[i].slice &&
           !(slots[i].hash == h && slots[i].len == n && memcmp(slots[i].slice, slice, n) == 0))
        i = (i + 1) & (cap - 1);
    return i;
}

static int
grow(void)
{
    size_t ncap = cap ? cap * 2 : 64;
    obj_slot_t *old = slots, *fresh = calloc(ncap, sizeof(*fresh));
    if (!fresh) return -1;
    size_t old_cap = cap;
    slots = fresh;
    cap = ncap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].slice) slots[probe(old[i].slice, old[i].len, old[i].hash)] = old[i];
    free(old);
    return 0;
}

bool
rperf_rb_lobj_ref_locked(const char *slice, size_t n, VALUE obj)
{
    uint64_t h = rperf_rb_ltab_hash(slice, n);
    if (cap) {
        obj_slot_t *s = &slots[probe(slice, n, h)];
        if (s->slice) {
            s->refs++;
            return true;
        }
    }
    if (obj == Qundef) return false;
    if ((used + 1) * 2 > cap && grow() < 0) return false;
    char *copy = malloc(n ? n : 1);
    if (!copy) return false;
    memcpy(copy, slice, n);
    slots[probe(slice, n, h)] = (obj_slot_t){ copy, n, h, obj, 1 };
    used++;
    return true;
}

/* Empties slot i, moving later slots of its probe run back into the gap. */
static void
remove_at(size_t i)
{
    free(slots[i].slice);
    slots[i].slice = NULL;
    for (size_t j = (i + 1) & (cap - 1); slots[j].slice; j = (j + 1) & (cap - 1)) {
        size_t home = slots[j].hash & (cap - 1);
        /* slot j may move to i when its home is not in (i, j] (cyclically) */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        slots[i] = slots[j];
        slots[j].slice = NULL;
        i = j;
    }
    used--;
}

void
rperf_rb_lobj_unref_locked(const char *slice, size_t n)
{
    if (!cap) return;
    size_t i = probe(slice, n, rperf_rb_ltab_hash(slice, n));
    if (slots[i].slice && --slots[i].refs == 0) remove_at(i);
}

VALUE
rperf_rb_lobj_find_locked(const char *slice, size_t n)
{
    if (!cap) return Qundef;
    size_t i = probe(slice, n, rperf_rb_ltab_hash(slice, n));
    return slots[i].slice ? slots[i].obj : Qundef;
}

void
rperf_rb_lobj_mark(void)
{
    for (size_t i = 0; i < cap; i++)
        if (slots[i].slice) rb_gc_mark(slots[i].obj);
}
