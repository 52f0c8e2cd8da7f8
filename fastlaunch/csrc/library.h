/* Library routines the LIBCALL instruction runs (BLAS/LAPACK behind a uniform ABI).
 *
 * A routine receives the instruction's operand words after the routine number
 *   b1 b2 m n k, then 3 arrays x (slot off sb1 sb2 s0 s1)
 * and the slot table: array a of batch item (i1, i2) starts at element
 * off + i1*sb1 + i2*sb2 of slots[slot]; its element (r, c) is at r*s0 + c*s1 from there.
 * The verifier has proved every element a routine touches inside its slot.  A routine
 * returns 0, a positive LAPACK info (singular matrix...), or a negative code: -1 a layout
 * BLAS cannot take, -2 out of memory.  It never touches Python objects. */
#ifndef FL_LIBRARY_H
#define FL_LIBRARY_H
#include <stdint.h>

typedef int (*fl_library_fn)(const int64_t *operands, const int64_t *slots);

/* the null backend's routine: does nothing (runtime.c) */
int fl_library_null(const int64_t *operands, const int64_t *slots);

/* library.c: the routines, indexed by _launch.Routine, and the BLAS/LAPACK entry points they
 * call (scipy.linalg.cython_blas / cython_lapack, registered by name before first use) */
fl_library_fn fl_library_routine(int routine);
int fl_library_register(const char *name, void *fn, int ilp64);
const char *fl_library_missing(int routine);

#endif
