/* Configuration checks without a device (mhla_config_check, mhla_config_tensor_elems): sizes whose
 * products overflow the kernels' 32-bit token and block indices or 64-bit element counts are
 * refused with a message naming the values, and the largest accepted ones are counted exactly (in
 * 64 bits, past 2^31 elements). The other validation messages are in test_errors.c. */
#include "helpers.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

/* cfg must be refused with `want`, its message containing `text`, in both the caller's buffer and
 * mhla_last_message(); mhla_config_tensor_elems() then counts nothing. */
static void expect_refused(const mhla_config *cfg, mhla_status want, const char *text)
{
    char msg[512] = "";
    const mhla_status st = mhla_config_check(cfg, msg, sizeof msg);
    if (st != want)
        fail_msg("expected %s ('%s'), got %s: '%s'", mhla_status_name(want), text, mhla_status_name(st), msg);
    if (!strstr(msg, text))
        fail_msg("message '%s' does not say '%s'", msg, text);
    assert_string_equal(mhla_last_message(), msg);
    for (int t = MHLA_TENSOR_Q; t <= MHLA_TENSOR_MIXING; ++t)
        assert_int_equal(mhla_config_tensor_elems(cfg, (mhla_tensor)t), 0);
}

static void expect_accepted(const mhla_config *cfg)
{
    char msg[512] = "";
    const mhla_status st = mhla_config_check(cfg, msg, sizeof msg);
    if (st != MHLA_OK)
        fail_msg("refused: %s: %s", mhla_status_name(st), msg);
}

/* Token indices are 32-bit in the kernels: a grid of more than INT_MAX tokens is refused, whichever
 * of its extents makes it so; INT_MAX tokens exactly are not. */
static void test_token_count_limit(void **state)
{
    (void)state;
    mhla_config c = config_1d(1, 1, (int64_t)INT_MAX + 1, 1, 1, 1);
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "token grid 2147483648x1x1 has more than 2147483647 tokens");
    mhla_config_init(&c);
    c.seq_h = 65536, c.seq_w = 65536, c.dk = c.dv = 1;
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "token grid 1x65536x65536 has more than 2147483647 tokens");
    c.seq_h = 65536, c.seq_w = 1, c.seq_t = 32768; /* 2^31 through the third extent */
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "token grid 32768x65536x1 has more than 2147483647 tokens");
    mhla_config causal = config_causal(1, 1, (int64_t)INT_MAX + 1, 64, 8, 8);
    expect_refused(&causal, MHLA_ERR_INVALID_SHAPE, "has more than 2147483647 tokens");
    c = config_1d(1, 1, INT_MAX, 1, 1, 1);
    expect_accepted(&c);
    assert_int_equal(mhla_config_tensor_elems(&c, MHLA_TENSOR_V), (size_t)INT_MAX);
}

/* batch * heads indexes work-groups: more than INT_MAX is refused naming both. */
static void test_batch_heads_limit(void **state)
{
    (void)state;
    mhla_config c = config_1d(65536, 32768, 1, 1, 1, 1);
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "batch * heads = 65536 * 32768 exceeds 2147483647");
    c = config_1d(INT_MAX, 1, 1, 1, 1, 1);
    expect_accepted(&c);
    c = config_1d((int64_t)1 << 40, 1, 1, 1, 1, 1);
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "batch * heads = 1099511627776 * 1 exceeds 2147483647");
}

/* Element counts are 64-bit: B*H*N*max(Dk, Dv) beyond INT64_MAX / 8 (a byte count of 8-byte
 * doubles would wrap) is refused, in either product. */
static void test_element_count_limit(void **state)
{
    (void)state;
    mhla_config c = config_1d(32768, 32768, 1 << 30, 1, 256, 1); /* 2^30 * 2^30 rows */
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "tensor of 1073741824 x 1073741824 x 256 elements overflows 64-bit sizes");
    c = config_1d(32768, 32768, 1 << 28, 1, 1, 4); /* 2^58 rows fit; times Dv = 4 (2^60) does not */
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "tensor of 1073741824 x 268435456 x 4 elements overflows 64-bit sizes");
    c = config_1d(32768, 32768, 1 << 28, 1, 2, 2); /* 2^59 elements: accepted */
    expect_accepted(&c);
    if (sizeof(size_t) >= 8)
        assert_true(mhla_config_tensor_elems(&c, MHLA_TENSOR_Q) == (size_t)1 << 59);
}

/* Tensors past 2^31 elements are sized in 64 bits (the 64-bit offset path), not truncated. */
static void test_sizes_past_int_max(void **state)
{
    (void)state;
    mhla_config c = config_1d(1, 8, 1 << 20, 16, 8, 256); /* v: 2^31 elements */
    expect_accepted(&c);
    assert_true(mhla_config_tensor_elems(&c, MHLA_TENSOR_V) == (size_t)1 << 31);
    assert_true(mhla_config_tensor_elems(&c, MHLA_TENSOR_OUT) == (size_t)1 << 31);
    assert_true(mhla_config_tensor_elems(&c, MHLA_TENSOR_Q) == (size_t)1 << 26);
    c.batch = 3;
    assert_true(mhla_config_tensor_elems(&c, MHLA_TENSOR_V) == (size_t)3 << 31);
}

/* The causal limits: chunk within int32 (every ceil(n / chunk) adds chunk - 1 to a count), and a
 * mixing matrix of at most 2^20 rows. */
static void test_causal_limits(void **state)
{
    (void)state;
    mhla_config c = config_causal(1, 1, 100, (int64_t)INT32_MAX + 1, 8, 8);
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "chunk must be <= 2147483647, got 2147483648");
    c.chunk = INT32_MAX;
    expect_accepted(&c);
    c.chunk = 64, c.mixing_rows = (1 << 20) + 1;
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "mixing_rows = 1048577 is implausibly large");
    c.mixing_rows = 1 << 20;
    expect_accepted(&c);
    assert_true(mhla_config_tensor_elems(&c, MHLA_TENSOR_MIXING) == (size_t)1 << 40);
}

/* One default chunk: 64 from both initializers. The CLI and the Python package read it from here, and
 * the chunk is part of the model (Mc's rows are chunks), so a change would change every model. */
static void test_default_chunk(void **state)
{
    (void)state;
    mhla_config c;
    mhla_config_init(&c);
    assert_int_equal(c.chunk, 64);
    mhla_config_init_causal(&c);
    assert_int_equal(c.chunk, 64);
    assert_int_equal(MHLA_DEFAULT_CHUNK, 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_count_limit),  cmocka_unit_test(test_batch_heads_limit),
        cmocka_unit_test(test_element_count_limit), cmocka_unit_test(test_sizes_past_int_max),
        cmocka_unit_test(test_causal_limits),      cmocka_unit_test(test_default_chunk),
    };
    return run_group("config", tests, NULL, NULL);
}
