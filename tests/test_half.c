/* cli/half.c: float16 <-> float32. Every float16 survives a round trip; narrowing is checked on
 * hand-picked boundaries (ties to even, overflow, subnormals) and, on a million pseudo-random
 * floats, against the definition: no float16 is nearer, and a tie goes to the even one. */
#include "half.h"

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
        const float f = half_to_float(cases[i].h);
        assert_memory_equal(&f, &cases[i].f, sizeof f); /* bitwise: -0 is not +0 */
        assert_int_equal(float_to_half(cases[i].f), cases[i].h);
    }
    assert_int_equal(float_to_half(0.1f), 0x2E66);
    assert_true(isnan(half_to_float(0x7E00)));
    assert_true(signbit(half_to_float(0xFE00)));
}

static void test_every_half_round_trips(void **state)
{
    (void)state;
    for (uint32_t h = 0; h <= 0xFFFF; ++h) {
        const float f = half_to_float((uint16_t)h);
        const uint16_t back = float_to_half(f);
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
        if (float_to_half(cases[i].f) != cases[i].h)
            fail_msg("%a -> 0x%04x, expected 0x%04x", (double)cases[i].f, (unsigned)float_to_half(cases[i].f),
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
        const uint16_t h = float_to_half(f);
        const double got = half_to_float(h), x = f;
        if (isinf(got)) { /* only past 65504 + half an ulp (65520) */
            assert_true(fabs(x) >= 65520.0);
            continue;
        }
        const double err = fabs(got - x);
        for (int d = -1; d <= 1; d += 2) {
            const uint16_t nb = (uint16_t)(h + d);
            if ((h & 0x7FFF) == 0 && d < 0)
                continue; /* no neighbour below zero of the same sign */
            const double other = half_to_float(nb);
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
    float_to_half_array(h, in, 4);
    half_to_float_array(out, h, 4);
    assert_int_equal(h[0], 0x3C00);
    assert_int_equal(h[3], 0x7BFF);
    assert_memory_equal(in, out, sizeof in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_values),         cmocka_unit_test(test_every_half_round_trips),
        cmocka_unit_test(test_rounding_boundaries),  cmocka_unit_test(test_nearest_even_property),
        cmocka_unit_test(test_arrays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
