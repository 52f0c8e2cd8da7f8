/* Ctrl-C during a long program: a flag that the interpreter reads between launches with the
 * GIL released.  Python's own SIGINT handler only records the signal for the eval loop, which
 * does not run while a program does; so for programs with POLL instructions the interpreter
 * chains a handler of ours in front of Python's (re-armed whenever someone replaced it). */
#ifndef FASTLAUNCH_INTERRUPT_H
#define FASTLAUNCH_INTERRUPT_H

/* Install the chained handler if the current SIGINT handler is not ours; clear the flag.
 * Returns 0, or -1 when SIGINT is ignored or cannot be chained (then POLL never fires). */
int fl_interrupt_arm(void);
int fl_interrupt_pending(void);
void fl_interrupt_clear(void);

#endif
