/*
 * ruby_version.c — whether the Ruby rperf runs on is one of the series on
 * which the suite verified the Ruby internals rperf leans on beyond the
 * documented API (docs/architecture.md, "Ruby versions"): where Ruby 3.3
 * and 3.4 point the main Ractor's running_ec (the holder backend's direct
 * trigger), that RUBY_MN_THREADS alone makes the main Ractor's threads M:N
 * (ractor.c), and that GC and allocation hooks fire only for the Ractor
 * whose list holds them (the live heap's locking). rperf.so is built
 * against one Ruby's headers and loads into that Ruby only, so the check
 * is made at compile time.
 *
 * On another series rperf still starts, in its conservative form: the
 * main Ractor's threads are taken to be M:N (no 1:1 fast path: the safe
 * answer when Ruby may decide M:N otherwise), the holder backend sends
 * every tick by signal, and the allocation hook takes the tracker's lock
 * and the engine's enter/leave on every call, in every Ractor, and is not
 * added to other Ractors' lists. The environment
 * variable RPERF_UNVERIFIED_RUBY=1 selects that form on a verified Ruby
 * too, so the suite tests it (tests/ruby/test_unverified_ruby.rb).
 *
 * Context: GVL held, main Ractor, at require time (init); the predicate
 * reads a value set then (any context).
 */
#include "rperf_ruby.h"

#include <ruby/version.h>
#include <stdlib.h>
#include <string.h>

#define SERIES(major, minor) ((major) * 100 + (minor))
#define THIS_SERIES SERIES(RUBY_API_VERSION_MAJOR, RUBY_API_VERSION_MINOR)

/* the series the suite ran on (.ci/run runs it on each) */
static const int verified_series[] = { SERIES(3, 3), SERIES(3, 4) };

static bool verified;

bool rperf_rb_verified_ruby(void) { return verified; }

static VALUE verified_p(VALUE self)
{
    (void)self;
    return verified ? Qtrue : Qfalse;
}

void rperf_rb_ruby_version_init(VALUE m)
{
    verified = false;
    for (size_t i = 0; i < sizeof(verified_series) / sizeof(verified_series[0]); i++)
        if (verified_series[i] == THIS_SERIES) verified = true;
    const char *force = getenv("RPERF_UNVERIFIED_RUBY");
    if (force && strcmp(force, "1") == 0) verified = false;
    VALUE list = rb_ary_new();
    for (size_t i = 0; i < sizeof(verified_series) / sizeof(verified_series[0]); i++)
        rb_ary_push(list, rb_obj_freeze(rb_sprintf("%d.%d", verified_series[i] / 100,
                                                   verified_series[i] % 100)));
    rb_obj_freeze(list);
    /* Rperf::VERIFIED_RUBIES: the series verified; Rperf.verified_ruby?: this one is */
    rb_define_const(m, "VERIFIED_RUBIES", list);
    rb_define_module_function(m, "verified_ruby?", verified_p, 0);
}
