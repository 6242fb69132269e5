/* Host conversions between float32 and the 16-bit storage types: IEEE binary16 (f16) and bfloat16
 * (bf16), by bit manipulation, so that results depend on neither the compiler's _Float16 support
 * nor the FPU's rounding mode. Narrowing rounds to nearest, ties to even, like the kernels' stores. */
#include "config/config.h"

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

float mhla_f16_to_float(uint16_t h)
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

uint16_t mhla_float_to_f16(float f)
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

float mhla_bf16_to_float(uint16_t b) { return float_of((uint32_t)b << 16); }

uint16_t mhla_float_to_bf16(float f)
{
    const uint32_t u = bits_of(f);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) /* NaN: keep sign and top payload, quiet */
        return (uint16_t)((u >> 16) | 0x0040u);
    /* round to nearest, ties to even; a carry into the exponent (up to infinity) is correct */
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

mhla_status mhla_convert(mhla_dtype dst_type, void *dst, mhla_dtype src_type, const void *src, size_t n)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, (!dst || !src) && n > 0, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_convert: %s is NULL",
                 dst ? "src" : "dst");
    MHLA_FAIL_IF(st, !mhla_dtype_name(dst_type) || !mhla_dtype_name(src_type), NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_convert: unknown dtype %d", (int)(mhla_dtype_name(dst_type) ? src_type : dst_type));
    MHLA_FAIL_IF(st, dst_type != MHLA_DTYPE_F32 && src_type != MHLA_DTYPE_F32 && dst_type != src_type, NULL,
                 MHLA_ERR_INVALID_ARGUMENT, "mhla_convert: %s to %s goes through f32: convert twice",
                 mhla_dtype_name(src_type), mhla_dtype_name(dst_type));
    if (dst_type == src_type) {
        memmove(dst, src, n * mhla__dtype_size(dst_type));
    } else if (dst_type == MHLA_DTYPE_F32) {
        float *d = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < n; ++i)
            d[i] = src_type == MHLA_DTYPE_F16 ? mhla_f16_to_float(s[i]) : mhla_bf16_to_float(s[i]);
    } else {
        uint16_t *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; ++i)
            d[i] = dst_type == MHLA_DTYPE_F16 ? mhla_float_to_f16(s[i]) : mhla_float_to_bf16(s[i]);
    }
cleanup:
    return st;
}
