/*
 * test_new_marks.c — the re-signal counters of backends/new_marks.h, with
 * which every backend numbers the Ractors whose first job request another
 * thread's job run took: a holder marked `new` is re-signalled by the next
 * job run even when another re-signal went out moments before (the run
 * that took its request may be the last one before it ends), re-signals
 * with nothing marked since keep their gap, and a scan that finds no `new`
 * holder ends them.
 * Context: a plain C test program (no Ruby); the fake engine of
 * fake_engine.h gives the interval (1 Hz: the gap is 2 ms). Elapsed time
 * is never waited on by sleeping; the one check that needs the calls to
 * come within the gap is made only when they did.
 */
#include "fake_engine.h"
#include "new_marks.h"

static int sends;                 /* signal_new calls */
static int still_new;             /* holders a scan finds (what it returns) */

static int fake_signal_new(void)
{
    sends++;
    return still_new;
}

RPERF_TEST(a_holder_marked_within_the_gap_is_signalled_at_once)
{
    (void)start_wall_at(1);
    static rperf_new_marks_t m;
    still_new = 1;

    rperf_new_marks_add(&m);                       /* a first new holder */
    int64_t t0 = rperf_mono_ns();
    rperf_new_marks_resignal(&m, fake_signal_new);
    RPERF_CHECK_EQ(sends, 1);

    rperf_new_marks_add(&m);                       /* a second one, right after */
    rperf_new_marks_resignal(&m, fake_signal_new);
    RPERF_CHECK_EQ(sends, 2);                      /* not held back by the gap */

    rperf_new_marks_resignal(&m, fake_signal_new); /* nothing marked since */
    if (rperf_mono_ns() - t0 < RPERF_NEW_MARKS_GAP_NS) RPERF_CHECK_EQ(sends, 2);

    let_ns_pass(RPERF_NEW_MARKS_GAP_NS + 100000);  /* past the gap: both still new */
    int before = sends;
    rperf_new_marks_resignal(&m, fake_signal_new);
    RPERF_CHECK_EQ(sends, before + 1);

    still_new = 0;                                 /* both numbered */
    let_ns_pass(RPERF_NEW_MARKS_GAP_NS + 100000);
    rperf_new_marks_resignal(&m, fake_signal_new); /* finds none: done */
    RPERF_CHECK_EQ(sends, before + 2);
    let_ns_pass(RPERF_NEW_MARKS_GAP_NS + 100000);
    rperf_new_marks_resignal(&m, fake_signal_new); /* two loads, no scan */
    RPERF_CHECK_EQ(sends, before + 2);
    rperf_engine_stop();
}

int main(void)
{
    rperf_engine_init(&host);
    return RPERF_RUN(RPERF_CASE(a_holder_marked_within_the_gap_is_signalled_at_once));
}
