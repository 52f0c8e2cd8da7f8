/* fastlaunch: the instructions every interpreter (host, devsim, CUDA) runs alike: BIND and
 * the loop instructions that only move words between slots (MOVE, ROTATE, ROW, SET, LOOP,
 * NEXT).
 * The opcodes are defined in _launch.pxd; each interpreter dispatches on them and calls these
 * with its instruction `ins` (operands at ins[1..]).  The verifier has proved every index in
 * range.
 *
 * Each reads its operands into locals before its first store: code, slots and argwords are
 * all int64 arrays, so a store through one would otherwise reload every operand after it. */
#ifndef FASTLAUNCH_SLOTOPS_H
#define FASTLAUNCH_SLOTOPS_H

#include <stdint.h>

/* BIND args_at list_at count: argwords[args_at + k] <- slots[lists[list_at + k]] */
static inline void fl_op_bind(const int64_t *ins, const int64_t *lists, const int64_t *slots,
                              int64_t *argwords) {
    int64_t *restrict dst = argwords + ins[1];
    const int64_t *restrict src = lists + ins[2];
    int64_t n = ins[3], k = 0;
    /* two words a round: a kernel takes a handful of words, and the loop's own counting is
     * half of a one-word round */
    for (; k + 1 < n; k += 2) {
        int64_t a = slots[src[k]], b = slots[src[k + 1]];
        dst[k] = a;
        dst[k + 1] = b;
    }
    if (k < n) dst[k] = slots[src[k]];
}

/* MOVE dst src: slots[dst] <- slots[src] */
static inline void fl_op_move(const int64_t *ins, int64_t *slots) {
    int64_t dst = ins[1], src = ins[2];
    slots[dst] = slots[src];
}

/* ROTATE read write spare: read <- write; write <-> spare (pointers move, buffers stay) */
static inline void fl_op_rotate(const int64_t *ins, int64_t *slots) {
    int64_t read = ins[1], write = ins[2], spare = ins[3];
    int64_t written = slots[write];
    slots[write] = slots[spare];
    slots[spare] = written;
    slots[read] = written;
}

/* ROW dst src ctr every stride: slots[dst] <- slots[src] + (slots[ctr] / every) * stride */
static inline void fl_op_row(const int64_t *ins, int64_t *slots) {
    int64_t dst = ins[1], src = ins[2], every = ins[4], stride = ins[5];
    int64_t row = slots[ins[3]];
    if (every != 1) {
        /* opaque to the optimiser, which would otherwise divide by 1 too (x / 1 == x): a
         * 64-bit division per iteration where nearly every loop collects every row */
        __asm__("" : "+r"(row));
        row /= every;
    }
    slots[dst] = slots[src] + row * stride;
}

/* SET slot value: slots[slot] <- value */
static inline void fl_op_set(const int64_t *ins, int64_t *slots) {
    int64_t slot = ins[1], value = ins[2];
    slots[slot] = value;
}

/* LOOP ctr count target: slots[ctr] += 1; nonzero when the loop goes round again (the
 * interpreter jumps to ins[3]) */
static inline int fl_op_loop(const int64_t *ins, int64_t *slots) {
    int64_t ctr = ins[1], count = ins[2];
    return ++slots[ctr] < count;
}

/* NEXT ctr count target: slots[ctr] += 1; nonzero when the loop is done (the interpreter
 * jumps forward to ins[3]): the iteration boundary inside a body unrolled by two */
static inline int fl_op_next(const int64_t *ins, int64_t *slots) {
    int64_t ctr = ins[1], count = ins[2];
    return ++slots[ctr] >= count;
}

#endif
