/*
 * tick_signal.h — the tick signal shared by the built-in backends: its
 * handler, installation and restoration, and the start-up bootstrap that
 * reaches threads already running Ruby code (see tick_signal.c).
 */
#ifndef RPERF_TICK_SIGNAL_H
#define RPERF_TICK_SIGNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* GVL held: install the handler for signo (0 = SIGRTMIN+8). 0 or -1 + err. */
int rperf_tick_signal_install(int signo, char *err, size_t errlen);
/* GVL held: ignore, then restore the previous action (drops pending ones). */
void rperf_tick_signal_restore(void);
/* Inside fork() in the child: forget the run and restore the action. */
void rperf_tick_signal_after_fork(void);
/* GVL held, at start (off again at restore): read the ticked thread's CPU
 * clock in the handler at each timer tick, for its job (cpu mode). */
void rperf_tick_signal_read_cpu(bool on);
/* Own context, in the job: the reading the handler made at this native
 * thread's latest timer tick, each once (rperf_backend_ops_t.tick_cpu). */
int rperf_tick_signal_tick_cpu(int64_t *cpu_ns, int64_t *mono_ns);
/* The installed signal number. */
int rperf_tick_signal_number(void);
/* GVL held: send the signal once to every other runnable task of the
 * process, so threads that hold a GVL since before the start (and may never
 * switch) register themselves from their own sampling job. Tasks in `skip`
 * (sorted) and `helper` (the backend's own thread, 0: none) are left out
 * without a /proc read. */
void rperf_tick_signal_bootstrap(const int32_t *skip, size_t nskip, int32_t helper);
/* Any context (async-signal-safe): signal again, at most every 2 ms and
 * for at most 50 rounds, the tasks the bootstrap reached whose own handler
 * has not yet seen them registered (see tick_signal.c). Cheap when none. */
void rperf_tick_signal_bootstrap_resend(void);
/* any context: are bootstrap entries still waiting for their answer? */
bool rperf_tick_signal_bootstrap_pending(void);
/* no GVL: deliver one tick to native thread `tid` of this process. */
int rperf_tick_signal_send(pid_t tid);
/* no GVL, no allocation, not for a signal handler (it formats with
 * snprintf): the kernel's state letter of task `tid` of this process (R, S,
 * D, ... from /proc/self/task/<tid>/stat), 0 if unknown. The file is opened,
 * read and closed in the call: no descriptor is held between calls, so the
 * application never sees one of the profiler's in its descriptor table
 * (fd scans, daemons closing every descriptor, IO.for_fd). */
char rperf_task_state(pid_t tid);
/* Test seam: run by a handler inside its bootstrap re-send section (NULL:
 * nothing; the extension never sets it). */
extern void (*volatile rperf__tick_signal_resend_hook)(void);

#endif
