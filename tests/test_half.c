/* host/config/convert.c: float16 and bfloat16 <-> float32. Every float16 survives a round trip; narrowing is checked on
 * hand-picked boundaries (ties to even, overflow, subnormals) and, on a million pseudo-random
 * floats, against the definition: no float16 is nearer, and a tie goes to the even one. */
#include <mhla.h>

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_known_values(void **state)
{
    (void)state;
    const struct {
        uint16_t h;
        float f;
    } cases[] = {
        {0x0000, 0.0f},           {0x8000, -0.0f},          {0x3C00, 1.0f},         {0xC000, -2.0f},
        {0x7BFF, 65504.0f},       {0x0400, 0x1p-14f},       {0x0001, 0x1p-24f},     {0x03FF, 0x3FFp-24f},
        {0x3555, 0x1.554p-2f},    {0x7C00, INFINITY},       {0xFC00, -INFINITY},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const float f = mhla_f16_to_float(cases[i].h);
        assert_memory_equal(&f, &cases[i].f, sizeof f); /* bitwise: -0 is not +0 */
        assert_int_equal(mhla_float_to_f16(cases[i].f), cases[i].h);
    }
    assert_int_equal(mhla_float_to_f16(0.1f), 0x2E66);
    assert_true(isnan(mhla_f16_to_float(0x7E00)));
    assert_true(signbit(mhla_f16_to_float(0xFE00)));
}

static void test_every_half_round_trips(void **state)
{
    (void)state;
    for (uint32_t h = 0; h <= 0xFFFF; ++h) {
        const float f = mhla_f16_to_float((uint16_t)h);
        const uint16_t back = mhla_float_to_f16(f);
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) { /* NaN: sign and payload kept, made quiet */
            assert_true(isnan(f));
            assert_int_equal(back, h | 0x200);
        } else if (back != h) {
            fail_msg("0x%04x -> %a -> 0x%04x", (unsigned)h, (double)f, (unsigned)back);
        }
    }
}

static void test_rounding_boundaries(void **state)
{
    (void)state;
    const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f + 0x1p-11f, 0x3C00},                  /* tie between 1 and 1+2^-10: to even */
        {1.0f + 3 * 0x1p-11f, 0x3C02},              /* tie between odd and even: up to even */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01},       /* just past the tie */
        {65519.0f, 0x7BFF},                         /* below 65504 + half an ulp */
        {65520.0f, 0x7C00},                         /* the tie above 65504 rounds to infinity */
        {1e10f, 0x7C00},           {-1e10f, 0xFC00}, {FLT_MAX, 0x7C00},
        {0x1p-25f, 0x0000},                         /* half the smallest subnormal: tie to 0 */
        {0x1.8p-25f, 0x0001},      {0x3p-25f, 0x0002}, /* 1.5 units up; a tie between 1 and 2 */
        {0x1p-26f, 0x0000},        {-0x1p-26f, 0x8000},
        {0x1p-14f - 0x1p-25f, 0x0400},              /* the tie below the smallest normal */
        {1e-40f, 0x0000},                           /* a float32 subnormal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        if (mhla_float_to_f16(cases[i].f) != cases[i].h)
            fail_msg("%a -> 0x%04x, expected 0x%04x", (double)cases[i].f, (unsigned)mhla_float_to_f16(cases[i].f),
                     (unsigned)cases[i].h);
}

static void test_nearest_even_property(void **state)
{
    (void)state;
    uint64_t s = 12345;
    for (int i = 0; i < 1 << 20; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        /* exponents around the float16 range, so that normals, subnormals and overflow all occur */
        const uint32_t exp = 127 - 28 + (uint32_t)((s >> 33) % 46), mant = (uint32_t)(s >> 8) & 0x7FFFFF;
        const float f = from_bits((uint32_t)(s >> 63) << 31 | exp << 23 | mant);
        const uint16_t h = mhla_float_to_f16(f);
        const double got = mhla_f16_to_float(h), x = f;
        if (isinf(got)) { /* only past 65504 + half an ulp (65520) */
            assert_true(fabs(x) >= 65520.0);
            continue;
        }
        const double err = fabs(got - x);
        for (int d = -1; d <= 1; d += 2) {
            const uint16_t nb = (uint16_t)(h + d);
            if ((h & 0x7FFF) == 0 && d < 0)
                continue; /* no neighbour below zero of the same sign */
            const double other = mhla_f16_to_float(nb);
            if (isinf(other) || isnan(other))
                continue;
            const double oerr = fabs(other - x);
            if (oerr < err || (oerr == err && (h & 1)))
                fail_msg("%a -> 0x%04x (error %g) but 0x%04x is %s (error %g)", x, (unsigned)h, err, (unsigned)nb,
                         oerr < err ? "nearer" : "as near and even", oerr);
        }
    }
}

static void test_arrays(void **state)
{
    (void)state;
    const float in[4] = {1.0f, -2.0f, 0.5f, 65504.0f};
    uint16_t h[4];
    float out[4];
    assert_int_equal(mhla_convert(MHLA_DTYPE_F16, h, MHLA_DTYPE_F32, in, 4), MHLA_OK);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, out, MHLA_DTYPE_F16, h, 4), MHLA_OK);
    assert_int_equal(h[0], 0x3C00);
    assert_int_equal(h[3], 0x7BFF);
    assert_memory_equal(in, out, sizeof in);
}

/* bfloat16: the top half of a float32. Every bf16 survives a round trip; narrowing against the
 * definition (nearest, ties to even) on a million pseudo-random floats; NaN stays NaN. */
static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(mhla_float_to_bf16(1.0f), 0x3F80);
    assert_int_equal(mhla_float_to_bf16(-2.0f), 0xC000);
    assert_int_equal(mhla_float_to_bf16(from_bits(0x3F808000u)), 0x3F80); /* tie, even stays */
    assert_int_equal(mhla_float_to_bf16(from_bits(0x3F818000u)), 0x3F82); /* tie, odd rounds up */
    assert_int_equal(mhla_float_to_bf16(from_bits(0x3F808001u)), 0x3F81); /* above the tie */
    assert_int_equal(mhla_float_to_bf16(from_bits(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX rounds to +Inf */
    assert_int_equal(mhla_float_to_bf16(INFINITY), 0x7F80);
    assert_true(isnan(mhla_bf16_to_float(mhla_float_to_bf16(NAN))));
    assert_true(isnan(mhla_bf16_to_float(mhla_float_to_bf16(from_bits(0x7F800001u))))); /* payload below 16 bits */
    for (uint32_t b = 0; b < 65536; ++b) {
        const float f = mhla_bf16_to_float((uint16_t)b);
        if (isnan(f))
            continue;
        assert_int_equal(mhla_float_to_bf16(f), b);
    }
    uint64_t seed = 7;
    for (int i = 0; i < 1 << 20; ++i) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const float f = from_bits((uint32_t)(seed >> 32));
        if (!isfinite(f))
            continue;
        const uint16_t b = mhla_float_to_bf16(f);
        const double got = mhla_bf16_to_float(b), x = f;
        if (isinf(got))
            continue; /* only within half an ulp of FLT_MAX's bf16 neighbourhood */
        for (int d = -1; d <= 1; d += 2) {
            const uint16_t nb = (uint16_t)(b + d);
            const double other = mhla_bf16_to_float(nb);
            if (isnan(other) || isinf(other) || (signbit(other) != signbit(got) && other != 0.0))
                continue;
            const double err = fabs(got - x), oerr = fabs(other - x);
            if (oerr < err || (oerr == err && (b & 1)))
                fail_msg("%a -> 0x%04x, but 0x%04x is %s", (double)f, (unsigned)b, (unsigned)nb,
                         oerr < err ? "nearer" : "as near and even");
        }
    }
}

static void test_convert_errors(void **state)
{
    (void)state;
    uint16_t h[2] = {0x3C00, 0x4000}, b[2];
    float f[2];
    assert_int_equal(mhla_convert(MHLA_DTYPE_BF16, b, MHLA_DTYPE_F16, h, 2), MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "f16 to bf16"));
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, NULL, MHLA_DTYPE_F16, h, 2), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_convert((mhla_dtype)9, f, MHLA_DTYPE_F16, h, 2), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, NULL, MHLA_DTYPE_F16, NULL, 0), MHLA_OK);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F16, b, MHLA_DTYPE_F16, h, 2), MHLA_OK); /* a copy */
    assert_memory_equal(b, h, sizeof h);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, f, MHLA_DTYPE_BF16, (uint16_t[]){0x3F80, 0xC000}, 2), MHLA_OK);
    assert_true(f[0] == 1.0f && f[1] == -2.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_values),         cmocka_unit_test(test_every_half_round_trips),
        cmocka_unit_test(test_rounding_boundaries),  cmocka_unit_test(test_nearest_even_property),
        cmocka_unit_test(test_arrays),               cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_convert_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
