/* Ctrl-C during a long program: a flag that the interpreter reads between launches with the
 * GIL released.  Python's own SIGINT handler only records the signal for the eval loop, which
 * does not run while a program does; so for programs with POLL instructions the interpreter
 * chains a handler of ours in front of Python's (re-armed whenever someone replaced it).
 *
 * Only the thread that handles Python's signals (the main thread) stops at a POLL: in any
 * other thread Python would never raise the KeyboardInterrupt, so its program runs on. */
#ifndef FASTLAUNCH_INTERRUPT_H
#define FASTLAUNCH_INTERRUPT_H

/* Arm this thread's POLLs for one call: this_thread_handles is whether the calling thread is
 * the one Python runs signal handlers in.  Clears the flag and chains our handler in front of
 * the current SIGINT handler if it is not there yet.  Returns 0 when this thread's POLLs will
 * fire, -1 when they never do (another thread; SIGINT ignored or left to its default, which
 * ends the process; or the handler cannot be replaced). */
int fl_interrupt_arm(int this_thread_handles);
/* A signal arrived since the last arm or clear and this thread's POLLs are armed: cheap, safe
 * without the GIL. */
int fl_interrupt_pending(void);
void fl_interrupt_clear(void);

/* Called from runtime.c's fork handlers, in its fixed lock order (see runtime.c). */
void fl_interrupt_fork_prepare(void);
void fl_interrupt_fork_parent(void);
void fl_interrupt_fork_child(void);

#endif
