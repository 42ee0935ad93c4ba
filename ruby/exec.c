/*
 * exec.c — Kernel#exec, Kernel.exec and Process.exec, defined again so that
 * a run is over before the process image is replaced.
 *
 * Why: a tick sent to the exec'ing thread while it is inside execve stays
 * pending across it (the kernel flushes only POSIX-timer signals there),
 * and the new program has the default action for the tick signal: it
 * dies of it, before its first instruction. Stopping the run first stops
 * every sender and flushes whatever is pending (the backends' stop sets
 * the signal to SIG_IGN before the old action is put back).
 *
 * What the user gets: from the main Ractor, the run is finished as at exit
 * (rperf_rb_finish_for_exec: the output asked for at start is written);
 * from another Ractor, where the profile cannot be built, sampling is
 * halted and the profile is not written (docs/reliability.md). If the exec
 * fails (it raises), profiling stays stopped and a line on stderr says so.
 *
 * The methods keep their names, owners and arity and call Ruby's own
 * rb_f_exec, so a tracer sees the same c_call/c_return of `exec` as
 * without the profiler, and nothing else.
 *
 * Context: GVL held, any Ractor (Ruby method calls); init at require time
 * in the main Ractor.
 */
#include "rperf_ruby.h"

#include <stdio.h>
#include <unistd.h>

static VALUE call_exec(VALUE args)
{
    const VALUE *a = (const VALUE *)args;
    return rb_f_exec((int)a[0], (const VALUE *)a[1]);
}

static VALUE exec_method(int argc, VALUE *argv, VALUE self)
{
    (void)self;
    bool stopped = rperf_rb_stop_for_exec() && rperf_rb_run_messages();
    int state = 0;
    VALUE args[2] = { (VALUE)argc, (VALUE)argv };
    VALUE ret = rb_protect(call_exec, (VALUE)args, &state);
    if (state) {
        /* the program's stderr is the program's: only a run that asked
         * for messages (verbose:, stat:) says why it is no longer going */
        if (stopped)
            fprintf(stderr, "rperf: exec failed in process %ld; profiling stopped before it\n",
                    (long)getpid());
        rb_jump_tag(state);
    }
    return ret;
}

void rperf_rb_exec_init(void)
{
    /* No "method redefined" warning under -w: the definitions replace
     * Ruby's own with the same behaviour. */
    VALUE verbose = rb_gv_get("$VERBOSE");
    rb_gv_set("$VERBOSE", Qnil);
    rb_define_global_function("exec", exec_method, -1);
    rb_define_module_function(rb_mProcess, "exec", exec_method, -1);
    rb_gv_set("$VERBOSE", verbose);
}
