/*
 * label_objects.h — label keys and values kept as Ruby objects
 * (ruby/label_objects.c), found by their slice (label_codec.c). Used by
 * label_table.c and label_codec.c. Context: see label_objects.c.
 */
#ifndef RPERF_LABEL_OBJECTS_H
#define RPERF_LABEL_OBJECTS_H

#include <ruby/ruby.h>
#include <stdbool.h>
#include <stddef.h>

/* under the label table's lock: one more label set holds the object of
 * this slice; obj is it, or Qundef when the object is kept already (a set
 * merged from one that holds it). False: out of memory, or Qundef and not
 * kept (the set then reads the object's inspect). */
bool rperf_rb_lobj_ref_locked(const char *slice, size_t n, VALUE obj);
/* under the label table's lock: a set that held it is freed */
void rperf_rb_lobj_unref_locked(const char *slice, size_t n);
/* under the label table's lock: the object, or Qundef */
VALUE rperf_rb_lobj_find_locked(const char *slice, size_t n);
/* inside GC: mark every kept object */
void rperf_rb_lobj_mark(void);

#endif /* RPERF_LABEL_OBJECTS_H */
