# The one dispatch loop of every interpreter (host: _core.pyx; devsim: _devsim.pyx; CUDA:
# _cuda.pyx), included textually by each (`include "_interp.pxi"`), so that each module gets
# its own copy compiled against its own hooks, inlined: no call through a table per
# instruction, and the host loop compiles to the code it had when it was written by hand.
#
# The instructions that only move words between slots (BIND, MOVE, ROTATE, ROW, SET, LOOP,
# NEXT, JUMP) are the same everywhere (csrc/slotops.h).  What differs is a backend's own, in
# hooks the including module defines before the include, together with `ctypedef struct
# Hooks` (the state they read: kernel tables, pinned host words...); the module cimports
# `Bytecode` from _core (an executable hands `&self.bytecode` to run_loop):
#
#   hook_launch(h, ins, argwords, state)   LAUNCH: run kernel ins[1] over [0, ins[2])
#   hook_alloc(h, ins, slots, state)       ALLOC: slots[ins[1]] <- ins[2] bytes of the space
#   hook_free(h, ins, slots, state)        FREE
#   hook_to_device(h, ins, slots, state)   TO_DEVICE (ins[3] > 0 bytes)
#   hook_to_host(h, ins, slots, state)     TO_HOST (ins[3] > 0 bytes)
#   hook_copy(h, ins, slots, state)        COPY within the kernels' space (ins[3] > 0, two
#                                          different addresses)
#   hook_check(h, ins, slots, state)       CHECK: STATUS_KERNEL_ERROR when the word is nonzero
#   hook_flag(h, ins, slots, flag, state)  BREAK_IF: *flag <- the byte at slots[ins[1]]
#   hook_libcall(h, ins, slots, state)     LIBCALL
#   hook_poll()                            POLL: nonzero when a signal is pending
#
# Each returns a Status (0: go on; anything else stops the run at this instruction, the hook
# having set state.backend_code where it has one).  A backend without an instruction says so
# in its hook (returns STATUS_BAD_OPCODE): tests/runtime/test_dispatch_loop.py checks that
# this switch names every opcode of _launch.Opcode and that every interpreter defines every
# hook.  The verifier has proved every index in range.
#
# HOOKS: launch alloc free to_device to_host copy check flag libcall poll

cdef int run_loop(const Bytecode *bc, int64_t *slots, int64_t *argwords, const Hooks *h,
                  RunState *state) noexcept nogil:
    """Execute the bytecode (an executable's, _core.pxd) from state.start.  Returns a Status
    (state.pc: where it stopped); never touches Python objects."""
    cdef const int64_t *code = bc.code
    cdef const int64_t *lists = bc.lists
    cdef const int64_t *ins = code + state.start    # the instruction (pc: ins - code)
    cdef const int64_t *stop = code + bc.ncode
    cdef int64_t op
    cdef int rc
    cdef char flag
    while ins < stop:
        op = ins[0]
        if op == LAUNCH:
            rc = hook_launch(h, ins, argwords, state)
            if rc != 0:
                state.pc = ins - code
                return rc
        elif op == BIND:
            fl_op_bind(ins, lists, slots, argwords)
        elif op == ALLOC:
            rc = hook_alloc(h, ins, slots, state)
            if rc != 0:
                state.pc = ins - code
                return rc
        elif op == FREE:
            rc = hook_free(h, ins, slots, state)
            if rc != 0:
                state.pc = ins - code
                return rc
        elif op == CHECK:
            rc = hook_check(h, ins, slots, state)
            if rc != 0:
                state.pc = ins - code
                return rc
        elif op == POLL:
            if hook_poll():
                state.pc = ins - code
                return STATUS_INTERRUPTED
        elif op == LIBCALL:
            rc = hook_libcall(h, ins, slots, state)
            if rc != 0:
                state.pc = ins - code
                return rc
        elif op == LOOP:
            # loops (fl.iterate)
            if fl_op_loop(ins, slots):
                ins = code + ins[3]
                continue
        elif op == ROTATE:
            fl_op_rotate(ins, slots)
        elif op == ROW:
            fl_op_row(ins, slots)
        elif op == MOVE:
            fl_op_move(ins, slots)
        elif op == BREAK_IF:
            rc = hook_flag(h, ins, slots, &flag, state)
            if rc != 0:
                state.pc = ins - code
                return rc
            if flag != 0:
                ins = code + ins[2]
                continue
        elif op == COPY:
            if ins[3] > 0 and slots[ins[1]] != slots[ins[2]]:
                rc = hook_copy(h, ins, slots, state)
                if rc != 0:
                    state.pc = ins - code
                    return rc
        elif op == SET:
            fl_op_set(ins, slots)
        # the unrolled loop's NEXT and JUMP, and the copies between spaces (device backends
        # only), outside the switch above: more cases in it cost every instruction of a
        # plain host call a compare (a deeper decision tree)
        else:
            if op == NEXT:
                if fl_op_next(ins, slots):
                    ins = code + ins[3]
                    continue
            elif op == JUMP:
                ins = code + ins[1]
                continue
            elif op == TO_DEVICE:
                if ins[3] > 0:
                    rc = hook_to_device(h, ins, slots, state)
                    if rc != 0:
                        state.pc = ins - code
                        return rc
            elif op == TO_HOST:
                if ins[3] > 0:
                    rc = hook_to_host(h, ins, slots, state)
                    if rc != 0:
                        state.pc = ins - code
                        return rc
            else:
                state.pc = ins - code
                return STATUS_BAD_OPCODE
        ins += op & 0xFF
    return STATUS_OK
