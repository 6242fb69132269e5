/* f16 and bf16 storage on every path besides the non-causal forward (test_forward covers that):
 * causal chunk form, packed varlen batches, the decoder (step and prefill) and the softmax
 * baseline. Each runs on inputs rounded to the storage type and is compared with the reference on
 * the same rounded inputs, at the tolerance of docs/spec.md "Accuracy the tests hold" for the type
 * (2e-3 f16, 1.6e-2 bf16). */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Random tensors rounded to `dtype`: the floats the reference sees and the bits the device gets. */
typedef struct rounded {
    float *f;     /* rounded values, as float */
    uint16_t *h;  /* their 16-bit patterns */
    size_t n;
} rounded;

static rounded make_rounded(mhla_dtype dtype, size_t n, uint32_t seed, float lo)
{
    rounded r = {malloc(n * sizeof(float)), malloc(n * sizeof(uint16_t)), n};
    assert_non_null(r.f), assert_non_null(r.h);
    fill_uniform(r.f, n, seed, lo, 1.0f);
    assert_int_equal(mhla_convert(dtype, r.h, MHLA_DTYPE_F32, r.f, n), MHLA_OK);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, r.f, dtype, r.h, n), MHLA_OK);
    return r;
}

static void free_rounded(rounded *r) { free(r->f), free(r->h); }

/* Compares 16-bit device output with the double reference at the type's tolerance; the error must
 * also show that the output really was stored in 16 bits. */
static void expect_half_within(const char *what, mhla_dtype dtype, const uint16_t *got, const double *ref, size_t n,
                          int64_t tokens)
{
    float *f = malloc(n * sizeof *f);
    assert_non_null(f);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, f, dtype, got, n), MHLA_OK);
    const double err = finite_rel_err(f, ref, n, what), tol = mhla_reference_tolerance(dtype, tokens);
    free(f);
    if (!(err <= tol && err > 1e-7))
        fail_msg("%s %s: max_rel_err %.3g (tolerance %.3g)", what, mhla_dtype_name(dtype), err, tol);
    printf("    %-34s %-4s max_rel_err %.3g\n", what, mhla_dtype_name(dtype), err);
}

static mhla_config causal_config(mhla_dtype dtype, int64_t n, int64_t chunk, mhla_normalizer norm)
{
    mhla_config c;
    mhla_config_init_causal(&c);
    c.dtype = dtype, c.batch = 2, c.heads = 2, c.seq_t = n, c.chunk = chunk, c.dk = 16, c.dv = 24;
    c.normalizer = norm;
    return c;
}

static float *causal_mixing(const mhla_config *c, int64_t *rows)
{
    *rows = (c->seq_t + c->chunk - 1) / c->chunk;
    float *m = malloc((size_t)(*rows * *rows) * sizeof *m);
    assert_non_null(m);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_CAUSAL_UNIFORM, NULL, *rows, 1, 1, m, (size_t)(*rows * *rows)),
                     MHLA_OK);
    return m;
}

static void test_causal_chunk_form(void **state)
{
    mhla_context *ctx = *state;
    for (int dt = MHLA_DTYPE_F16; dt <= MHLA_DTYPE_BF16; ++dt)
        for (int norm = 0; norm < 2; ++norm) {
            const mhla_dtype dtype = (mhla_dtype)dt;
            mhla_config c = causal_config(dtype, 150, 32, norm ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE);
            const size_t nq = mhla_config_tensor_elems(&c, MHLA_TENSOR_Q), nv = mhla_config_tensor_elems(&c, MHLA_TENSOR_V);
            rounded q = make_rounded(dtype, nq, 1, -1), k = make_rounded(dtype, nq, 2, -1), v = make_rounded(dtype, nv, 3, -1);
            int64_t rows;
            float *mix = causal_mixing(&c, &rows);
            uint16_t *out = nan16(nv);
            double *ref = malloc(nv * sizeof *ref);
            mhla_plan *plan = NULL;
            assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
            assert_int_equal(mhla_forward_host(plan, q.h, k.h, v.h, mix, out), MHLA_OK);
            assert_int_equal(mhla_reference_forward(&c, q.f, k.f, v.f, mix, ref), MHLA_OK);
            expect_half_within(norm ? "causal chunk form, paper" : "causal chunk form, none", dtype, out, ref, nv, c.seq_t);

            /* the decoder over the same sequence: token by token, and one prefill */
            mhla_decoder *dec = NULL;
            mhla_config dc = c;
            dc.mixing_rows = rows;
            assert_int_equal(mhla_decoder_create(ctx, &dc, c.seq_t, &dec), MHLA_OK);
            memset(out, 0, nv * 2);
            assert_int_equal(mhla_decoder_step_host(dec, q.h, k.h, v.h, mix, out, c.seq_t), MHLA_OK);
            expect_half_within("decoder, token by token", dtype, out, ref, nv, c.seq_t);
            mhla_decoder_reset(dec);
            memset(out, 0, nv * 2);
            assert_int_equal(mhla_decoder_prefill_host(dec, q.h, k.h, v.h, mix, out, c.seq_t), MHLA_OK);
            expect_half_within("decoder, prefill", dtype, out, ref, nv, c.seq_t);
            mhla_decoder_destroy(dec);
            mhla_plan_destroy(plan);
            free_rounded(&q), free_rounded(&k), free_rounded(&v);
            free(mix), free(out), free(ref);
        }
}

static void test_varlen(void **state)
{
    mhla_context *ctx = *state;
    const int32_t cu[] = {0, 1, 64, 65, 130, 200};
    for (int dt = MHLA_DTYPE_F16; dt <= MHLA_DTYPE_BF16; ++dt) {
        const mhla_dtype dtype = (mhla_dtype)dt;
        mhla_config c = causal_config(dtype, 200, 32, MHLA_NORMALIZER_PAPER);
        c.batch = 1, c.varlen = 1, c.mixing_rows = 3;
        const size_t nq = mhla_config_tensor_elems(&c, MHLA_TENSOR_Q), nv = mhla_config_tensor_elems(&c, MHLA_TENSOR_V);
        rounded q = make_rounded(dtype, nq, 4, -1), k = make_rounded(dtype, nq, 5, -1), v = make_rounded(dtype, nv, 6, -1);
        float mix[9];
        assert_int_equal(mhla_mixing_init(MHLA_INIT_CAUSAL_UNIFORM, NULL, 3, 1, 1, mix, 9), MHLA_OK);
        uint16_t *out = nan16(nv);
        double *ref = malloc(nv * sizeof *ref);
        mhla_plan *plan = NULL;
        assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
        assert_int_equal(mhla_forward_varlen_host(plan, q.h, k.h, v.h, mix, cu, 5, out), MHLA_OK);
        assert_int_equal(mhla_reference_forward_varlen(&c, q.f, k.f, v.f, mix, cu, 5, ref), MHLA_OK);
        expect_half_within("varlen {1,63,1,65,70}", dtype, out, ref, nv, 70);
        mhla_plan_destroy(plan);
        free_rounded(&q), free_rounded(&k), free_rounded(&v);
        free(out), free(ref);
    }
}

static void test_softmax(void **state)
{
    mhla_context *ctx = *state;
    for (int dt = MHLA_DTYPE_F16; dt <= MHLA_DTYPE_BF16; ++dt)
        for (int layout = 0; layout < 2; ++layout) {
            const mhla_dtype dtype = (mhla_dtype)dt;
            mhla_config c;
            mhla_config_init(&c);
            c.dtype = dtype, c.batch = 2, c.heads = 3, c.seq_t = 77, c.dk = 24, c.dv = 20;
            c.layout = (mhla_layout)layout;
            const size_t nq = mhla_config_tensor_elems(&c, MHLA_TENSOR_Q), nv = mhla_config_tensor_elems(&c, MHLA_TENSOR_V);
            rounded q = make_rounded(dtype, nq, 7, -1), k = make_rounded(dtype, nq, 8, -1), v = make_rounded(dtype, nv, 9, -1);
            uint16_t *out = nan16(nv);
            double *ref = malloc(nv * sizeof *ref);
            mhla_plan *plan = NULL;
            assert_int_equal(mhla_softmax_plan_create(ctx, &c, &plan), MHLA_OK);
            assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_Q), nq * 2);
            assert_int_equal(mhla_forward_host(plan, q.h, k.h, v.h, NULL, out), MHLA_OK);
            assert_int_equal(mhla_reference_softmax(&c, q.f, k.f, v.f, ref), MHLA_OK);
            expect_half_within(layout ? "softmax, BHND" : "softmax, BNHD", dtype, out, ref, nv, c.seq_t);
            mhla_plan_destroy(plan);
            free_rounded(&q), free_rounded(&k), free_rounded(&v);
            free(out), free(ref);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_chunk_form),
        cmocka_unit_test(test_varlen),
        cmocka_unit_test(test_softmax),
    };
    return run_group("storage", tests, context_setup, context_teardown);
}
