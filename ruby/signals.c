/*
 * signals.c — which signal rperf may take for its tick: the real-time range
 * as this libc reports it at run time (Rperf._c_signal_range, used by the
 * option validation in lib/rperf.rb and the CLI) and the "in use" check
 * that `start` makes before the handler is installed, so that rperf never
 * replaces an action someone else set (Signal.trap, another library, an
 * ignored disposition inherited through exec).
 *
 * rperf's own handler is installed only while a run is going and restored
 * at stop (and in a fork child), so at `start` the only free state is the
 * default action.
 *
 * Context: GVL held, main Ractor (Rperf.start, at require time for the
 * range).
 */
#include "rperf_ruby.h"

#include <signal.h>
#include <string.h>

/* The tick signal used when none is given: the default of
 * backends/tick_signal.c (rperf_tick_signal_install with signo 0). */
static int default_tick_signal(void) { return SIGRTMIN + 8; }

/* Rperf._c_signal_range -> [SIGRTMIN, SIGRTMAX, default tick signal] */
static VALUE c_signal_range(VALUE self)
{
    (void)self;
    return rb_ary_new_from_args(3, INT2FIX(SIGRTMIN), INT2FIX(SIGRTMAX), INT2FIX(default_tick_signal()));
}

void rperf_rb_signal_check_free(int signo)
{
    int sig = signo > 0 ? signo : default_tick_signal();
    struct sigaction cur;
    memset(&cur, 0, sizeof(cur));
    if (sigaction(sig, NULL, &cur) != 0)
        rb_raise(rb_eArgError, "signal: %d is not a valid signal number on this system (accepted: %d..%d)",
                 sig, SIGRTMIN, SIGRTMAX);
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) return;
    rb_raise(rb_eArgError,
             "signal: %d%s is in use (its action is %s, set by someone else: Signal.trap or another "
             "library); rperf never replaces it. Choose a free real-time signal with signal: (%d..%d)",
             sig, signo > 0 ? "" : " (rperf's default tick signal, SIGRTMIN+8)",
             !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN ? "SIG_IGN" : "a handler",
             SIGRTMIN, SIGRTMAX);
}

void rperf_rb_signals_init(VALUE m)
{
    rb_define_module_function(m, "_c_signal_range", c_signal_range, 0);
}
