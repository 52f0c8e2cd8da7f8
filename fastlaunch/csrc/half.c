/* float16 conversions for JIT-compiled kernels: see half.h. */
#include "half.h"

#include <string.h>

/* A finite nonzero value sig * 2^exp (sig != 0) rounded to half, ties to even, in one step.
 * The half's last mantissa bit is worth 2^(etop - 10) for normals (etop: the exponent of the
 * value's leading bit), 2^-24 for subnormals; the bits below it decide the rounding.  With
 * q the rounded count of last-bit units, the half's bits are ((lsb + 24) << 10) + q for
 * normals (q in [1024, 2048]: a carry into 2048 steps the exponent) and subnormals alike
 * (lsb = -24, q <= 1024: a carry into 1024 is the smallest normal). */
static uint16_t round_to_half(uint16_t sign, uint64_t sig, int exp)
{
    int top = 63 - __builtin_clzll(sig);
    int etop = exp + top;
    if (etop >= 16)
        return sign | 0x7c00u;                    /* >= 65536: infinity */
    int lsb = etop - 10 < -24 ? -24 : etop - 10;
    int shift = lsb - exp;                        /* > 0 for every float and double input */
    uint64_t q;
    if (shift <= 0) {
        q = sig << -shift;
    } else if (shift >= 64) {
        q = 0;                                    /* below half the smallest subnormal */
    } else {
        q = sig >> shift;
        uint64_t rest = sig & ((UINT64_C(1) << shift) - 1);
        uint64_t halfway = UINT64_C(1) << (shift - 1);
        if (rest > halfway || (rest == halfway && (q & 1)))
            q++;
    }
    uint64_t bits = ((uint64_t)(lsb + 24) << 10) + q;
    if (bits >= 0x7c00u)
        bits = 0x7c00u;                           /* rounded up past 65504 */
    return (uint16_t)(sign | bits);
}

uint16_t fl_double_bits_to_half(uint64_t d)
{
    uint16_t sign = (uint16_t)((d >> 48) & 0x8000u);
    unsigned e = (unsigned)((d >> 52) & 0x7ffu);
    uint64_t m = d & ((UINT64_C(1) << 52) - 1);
    if (e == 0x7ffu) {
        if (m == 0)
            return sign | 0x7c00u;
        uint16_t payload = (uint16_t)(m >> 42);   /* NaN: its top mantissa bits, never 0 */
        return sign | 0x7c00u | (payload ? payload : 1u);
    }
    if (e == 0) {
        if (m == 0)
            return sign;
        return round_to_half(sign, m, -1074);
    }
    return round_to_half(sign, m | (UINT64_C(1) << 52), (int)e - 1075);
}

uint16_t fl_float_bits_to_half(uint32_t f)
{
    uint16_t sign = (uint16_t)((f >> 16) & 0x8000u);
    unsigned e = (f >> 23) & 0xffu;
    uint32_t m = f & 0x7fffffu;
    if (e == 0xffu) {
        if (m == 0)
            return sign | 0x7c00u;
        uint16_t payload = (uint16_t)(m >> 13);
        return sign | 0x7c00u | (payload ? payload : 1u);
    }
    if (e == 0) {
        if (m == 0)
            return sign;
        return round_to_half(sign, m, -149);
    }
    return round_to_half(sign, m | (UINT32_C(1) << 23), (int)e - 150);
}

uint32_t fl_half_to_float_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    unsigned e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1fu)
        return sign | 0x7f800000u | (m << 13);    /* inf, or NaN with its payload */
    if (e == 0) {
        if (m == 0)
            return sign;
        int top = 31 - __builtin_clz(m);          /* m * 2^-24, normalised */
        return sign | ((uint32_t)(top - 24 + 127) << 23) | ((m << (23 - top)) & 0x7fffffu);
    }
    return sign | ((e - 15 + 127) << 23) | (m << 13);
}

uint64_t fl_half_to_double_bits(uint16_t h)
{
    uint64_t sign = (uint64_t)(h & 0x8000u) << 48;
    unsigned e = (h >> 10) & 0x1fu;
    uint64_t m = h & 0x3ffu;
    if (e == 0x1fu)
        return sign | UINT64_C(0x7ff0000000000000) | (m << 42);
    if (e == 0) {
        if (m == 0)
            return sign;
        int top = 63 - __builtin_clzll(m);
        return sign | ((uint64_t)(top - 24 + 1023) << 52) |
               ((m << (52 - top)) & ((UINT64_C(1) << 52) - 1));
    }
    return sign | ((uint64_t)(e - 15 + 1023) << 52) | (m << 42);
}

/* ---- the libcall entry points: bits in and out of SSE registers through float carriers ---- */
static uint16_t carried_half(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return (uint16_t)bits;
}

static float carry_half(uint16_t h)
{
    uint32_t bits = h;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

float fl_libcall_truncsfhf2(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return carry_half(fl_float_bits_to_half(bits));
}

float fl_libcall_truncdfhf2(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    return carry_half(fl_double_bits_to_half(bits));
}

float fl_libcall_extendhfsf2(float h)
{
    uint32_t bits = fl_half_to_float_bits(carried_half(h));
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

double fl_libcall_extendhfdf2(float h)
{
    uint64_t bits = fl_half_to_double_bits(carried_half(h));
    double x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

const fl_symbol fl_half_libcalls[] = {
    {"__truncsfhf2", (void *)fl_libcall_truncsfhf2},
    {"__truncdfhf2", (void *)fl_libcall_truncdfhf2},
    {"__extendhfsf2", (void *)fl_libcall_extendhfsf2},
    {"__extendhfdf2", (void *)fl_libcall_extendhfdf2},
    {0, 0},
};
