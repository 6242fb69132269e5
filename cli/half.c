/* float16 <-> float32 by bit manipulation, so that the result does not depend on the compiler's
 * _Float16 support or the FPU's rounding mode. */
#include "half.h"

#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F) /* infinity or NaN: keep the payload */
        return float_of(sign | 0x7F800000u | (mant << 13));
    if (exp != 0)
        return float_of(sign | ((exp + 112u) << 23) | (mant << 13)); /* rebias 15 -> 127 */
    if (mant == 0)
        return float_of(sign);
    /* subnormal: mant * 2^-24, normalized for float32 */
    int e = -1;
    do {
        ++e;
        mant <<= 1;
    } while (!(mant & 0x400u));
    return float_of(sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3FFu) << 13));
}

uint16_t float_to_half(float f)
{
    const uint32_t u = bits_of(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t exp = (u >> 23) & 0xFFu;
    uint32_t mant = u & 0x7FFFFFu;
    if (exp == 0xFF) { /* infinity, or NaN kept quiet (a payload that shifts to 0 must not become Inf) */
        if (mant == 0)
            return (uint16_t)(sign | 0x7C00u);
        return (uint16_t)(sign | 0x7E00u | (mant >> 13));
    }
    const int e = (int)exp - 127 + 15; /* the half's biased exponent */
    if (e >= 0x1F)
        return (uint16_t)(sign | 0x7C00u); /* beyond 65504 + half an ulp: overflow */
    if (e <= 0) {
        /* subnormal half (or zero): shift the full significand right, then round */
        if (e < -10)
            return sign; /* below half the smallest subnormal: rounds to zero */
        mant |= 0x800000u;
        const int shift = 14 - e; /* 14..24 */
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u)))
            ++h; /* may carry into the smallest normal, which is the right answer */
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        ++h; /* a carry into the exponent is correct, up to and including infinity */
    return (uint16_t)(sign | h);
}

void half_to_float_array(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        dst[i] = half_to_float(src[i]);
}

void float_to_half_array(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        dst[i] = float_to_half(src[i]);
}
