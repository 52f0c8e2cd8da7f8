/* IEEE binary16 <-> binary32/binary64 conversions, bit for bit as NumPy's float16 casts:
 * round to nearest, ties to even, straight from the wide value (no double rounding through
 * float); overflow to a signed infinity; subnormals kept; NaN keeps its sign and the top
 * mantissa bits (at least one set), half -> wide NaNs keep their payload (signalling ones
 * stay signalling).
 *
 * LLVM lowers `fptrunc`/`fpext` involving `half` (wherever the CPU lacks the instruction:
 * double -> half everywhere but AVX512-FP16, float <-> half without F16C) to calls of
 * compiler-rt's __truncdfhf2, __truncsfhf2, __extendhfsf2, __extendhfdf2.  A JIT-loaded kernel
 * has no compiler-rt to link against, so the backend registers the fl_libcall_* entry points
 * below under those names. */
#ifndef FASTLAUNCH_HALF_H
#define FASTLAUNCH_HALF_H

#include <stdint.h>

uint16_t fl_float_bits_to_half(uint32_t f);
uint16_t fl_double_bits_to_half(uint64_t d);
uint32_t fl_half_to_float_bits(uint16_t h);
uint64_t fl_half_to_double_bits(uint16_t h);

/* The libcall ABI (x86-64 System V, LLVM >= 15): a `half` travels in the low 16 bits of an
 * SSE register, exactly where a `float` would; these take and return a float whose low 16
 * bits are the half's bits (upper bits of an incoming half are unspecified, and ignored). */
float fl_libcall_truncsfhf2(float x);
float fl_libcall_truncdfhf2(double x);
float fl_libcall_extendhfsf2(float h);
double fl_libcall_extendhfdf2(float h);

/* name -> address of each libcall, for the JIT's symbol table; NULL-terminated. */
typedef struct { const char *name; void *address; } fl_symbol;
extern const fl_symbol fl_half_libcalls[];

#endif
