/* Determinism: every path run twice on the same device gives bit-identical outputs (memcmp), on
 * the same plan and on a second plan of the same configuration; each first run is also checked
 * against the double reference, so that two equally wrong runs do not pass. Paths: the forward on
 * 1D, 2D and 3D grids with every normalizer, long blocks split into segments (their summaries are
 * reduced in a fixed order), CLBlast's mixing, f16 and bf16 storage, softmax, causal (with and
 * without CLBlast's prefix blocks), varlen, the decoder (steps, prefill, and its state), and the
 * backward's four gradients (dq, dk, dv, dmixing) on the non-causal, causal and varlen paths. */
#include "helpers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void assert_same(const void *a, const void *b, size_t bytes, const char *label, const char *what)
{
    if (memcmp(a, b, bytes) == 0)
        return;
    size_t i = 0;
    while (((const unsigned char *)a)[i] == ((const unsigned char *)b)[i])
        ++i;
    fail_msg("%s: %s differ at byte %zu of %zu", label, what, i, bytes);
}

static size_t elem_bytes(const mhla_config *cfg) { return cfg->dtype == MHLA_DTYPE_F32 ? 4 : 2; }

/* The inputs in cfg's storage type (float, or 16-bit patterns rounded from them). */
static void *stored(const mhla_config *cfg, const float *x, size_t n)
{
    void *s = malloc(n * elem_bytes(cfg));
    assert_non_null(s);
    assert_int_equal(mhla_convert(cfg->dtype, s, MHLA_DTYPE_F32, x, n), MHLA_OK);
    return s;
}

/* One configuration through mhla_forward_host (or the varlen call when cu != NULL): a plan run
 * twice, then a second plan; the first output against the reference on the same rounded inputs. */
static void check_forward(mhla_context *ctx, const mhla_config *cfg, int softmax, const int32_t *cu, size_t num_seqs,
                          const char *label)
{
    test_inputs in;
    assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, 23, &in), MHLA_OK);
    void *q = stored(cfg, in.q, in.nq), *k = stored(cfg, in.k, in.nq), *v = stored(cfg, in.v, in.nv);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, in.q, cfg->dtype, q, in.nq), MHLA_OK); /* what the device sees */
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, in.k, cfg->dtype, k, in.nq), MHLA_OK);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, in.v, cfg->dtype, v, in.nv), MHLA_OK);
    const size_t bytes = in.nv * elem_bytes(cfg);
    unsigned char *out[3];
    for (int r = 0; r < 3; ++r) {
        out[r] = malloc(bytes);
        assert_non_null(out[r]);
        memset(out[r], 0xFF, bytes); /* NaN in every storage type: an unwritten element shows */
    }
    mhla_plan *plan = NULL;
    for (int r = 0; r < 3; ++r) {
        if (r != 1) { /* runs 0 and 1 share a plan; run 2 has its own */
            mhla_plan_destroy(plan);
            plan = NULL;
            const mhla_status st =
                softmax ? mhla_softmax_plan_create(ctx, cfg, &plan) : mhla_plan_create(ctx, cfg, &plan);
            if (st != MHLA_OK)
                fail_msg("%s: plan: %s: %s", label, mhla_status_name(st), mhla_context_message(ctx));
        }
        const mhla_status st = cu ? mhla_forward_varlen_host(plan, q, k, v, in.mix, cu, num_seqs, out[r])
                                  : mhla_forward_host(plan, q, k, v, in.mix, out[r]);
        if (st != MHLA_OK)
            fail_msg("%s: run %d: %s: %s", label, r, mhla_status_name(st), mhla_context_message(ctx));
    }
    mhla_plan_destroy(plan);
    assert_same(out[0], out[1], bytes, label, "two runs of one plan");
    assert_same(out[0], out[2], bytes, label, "runs of two plans");

    double *ref = malloc(in.nv * sizeof *ref);
    float *got = malloc(in.nv * sizeof *got);
    assert_non_null(ref), assert_non_null(got);
    if (softmax)
        assert_int_equal(mhla_reference_softmax(cfg, in.q, in.k, in.v, ref), MHLA_OK);
    else if (cu)
        assert_int_equal(mhla_reference_forward_varlen(cfg, in.q, in.k, in.v, in.mix, cu, num_seqs, ref), MHLA_OK);
    else
        assert_int_equal(mhla_reference_forward(cfg, in.q, in.k, in.v, in.mix, ref), MHLA_OK);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, got, cfg->dtype, out[0], in.nv), MHLA_OK);
    const double err = finite_rel_err(got, ref, in.nv, __func__);
    const double tol = mhla_reference_tolerance(cfg->dtype, cfg->seq_t * cfg->seq_h * cfg->seq_w);
    if (!(err <= tol))
        fail_msg("%s: max_rel_err %.3g > %.3g", label, err, tol);
    printf("deterministic: %s (max_rel_err %.2g)\n", label, err);
    free(ref), free(got), free(q), free(k), free(v);
    for (int r = 0; r < 3; ++r)
        free(out[r]);
    test_inputs_free(&in);
}

static void test_forward_grids(void **state)
{
    mhla_context *ctx = *state;
    const mhla_normalizer norms[] = {MHLA_NORMALIZER_PAPER, MHLA_NORMALIZER_OFFICIAL, MHLA_NORMALIZER_NONE};
    for (size_t n = 0; n < 3; ++n) {
        char label[96];
        mhla_config c = config_1d(2, 2, 96, 4, 8, 12);
        c.normalizer = norms[n];
        snprintf(label, sizeof label, "1D N=96 M=4, %s", mhla_normalizer_name(c.normalizer));
        check_forward(ctx, &c, 0, NULL, 0, label);
        mhla_config_init(&c);
        c.heads = 2, c.seq_h = 12, c.seq_w = 10, c.block_h = 2, c.block_w = 2, c.dk = 8, c.dv = 8;
        c.normalizer = norms[n];
        snprintf(label, sizeof label, "2D 12x10 in 2x2 blocks, %s", mhla_normalizer_name(c.normalizer));
        check_forward(ctx, &c, 0, NULL, 0, label);
        mhla_config_init(&c);
        c.seq_t = 4, c.seq_h = 6, c.seq_w = 6, c.block_t = 2, c.block_h = 3, c.block_w = 2, c.dk = 4, c.dv = 8;
        c.normalizer = norms[n];
        c.layout = MHLA_LAYOUT_BHND;
        snprintf(label, sizeof label, "3D 4x6x6 in 2x3x2 blocks, BHND, %s", mhla_normalizer_name(c.normalizer));
        check_forward(ctx, &c, 0, NULL, 0, label);
    }
}

static void test_forward_split_blas_storage(void **state)
{
    mhla_context *ctx = *state;
    /* Two blocks of 1024 tokens: split into segments whose partial summaries are reduced. */
    assert_int_equal(mhla_context_set_tuning(ctx, "split_min_len=64,groups_per_cu=32"), MHLA_OK);
    char tuning[512];
    mhla_config c = config_1d(1, 1, 2048, 2, 8, 8);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tuning(plan, tuning, sizeof tuning), MHLA_OK);
    mhla_plan_destroy(plan);
    if (strstr(tuning, " 1 segment(s)"))
        fail_msg("the split case does not split: %s", tuning);
    for (int n = 0; n < 2; ++n) {
        c.normalizer = n ? MHLA_NORMALIZER_OFFICIAL : MHLA_NORMALIZER_PAPER;
        check_forward(ctx, &c, 0, NULL, 0, n ? "N=2048 M=2 split, official" : "N=2048 M=2 split, paper");
    }
    /* The mixing through CLBlast's SGEMM (the GPU rows' choice where their forward runs untiled). */
    assert_int_equal(mhla_context_set_tuning(ctx, "mix_kernel=0"), MHLA_OK);
    c = config_1d(2, 2, 128, 8, 8, 8);
    check_forward(ctx, &c, 0, NULL, 0, "mixing by CLBlast, paper");
    c.normalizer = MHLA_NORMALIZER_OFFICIAL;
    check_forward(ctx, &c, 0, NULL, 0, "mixing by CLBlast, official");
    assert_int_equal(mhla_context_set_tuning(ctx, NULL), MHLA_OK);
    /* Storage types and the softmax baseline. */
    c = config_1d(2, 2, 96, 4, 8, 8);
    c.dtype = MHLA_DTYPE_F16;
    check_forward(ctx, &c, 0, NULL, 0, "f16 storage");
    c.dtype = MHLA_DTYPE_BF16;
    check_forward(ctx, &c, 0, NULL, 0, "bf16 storage");
    c.dtype = MHLA_DTYPE_F32;
    check_forward(ctx, &c, 1, NULL, 0, "softmax");
    c.dtype = MHLA_DTYPE_BF16;
    check_forward(ctx, &c, 1, NULL, 0, "softmax, bf16 storage");
}

static void test_causal_varlen(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = config_causal(2, 2, 70, 8, 8, 8);
    check_forward(ctx, &c, 0, NULL, 0, "causal N=70 C=8");
    c.dtype = MHLA_DTYPE_F16;
    check_forward(ctx, &c, 0, NULL, 0, "causal, f16 storage");
    assert_int_equal(mhla_context_set_tuning(ctx, "gemm_rows=4"), MHLA_OK);
    c = config_causal(1, 2, 160, 4, 8, 8);
    check_forward(ctx, &c, 0, NULL, 0, "causal, CLBlast prefix blocks");
    assert_int_equal(mhla_context_set_tuning(ctx, NULL), MHLA_OK);
    c = config_causal(1, 2, 75, 8, 8, 8);
    c.varlen = 1;
    const int32_t cu[] = {0, 17, 17, 60, 75};
    check_forward(ctx, &c, 0, cu, 4, "varlen 17+0+43+15");
}

/* The decoder: a schedule of prefill and steps on a fresh decoder, twice; outputs and the saved
 * state must match byte for byte. */
static void test_decoder(void **state)
{
    mhla_context *ctx = *state;
    const mhla_config c = config_causal(1, 2, 40, 8, 8, 8);
    test_inputs in;
    assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 29, &in), MHLA_OK);
    const size_t row = (size_t)(c.heads * c.dv), qrow = (size_t)(c.heads * c.dk);
    float *out[2];
    unsigned char *st[2];
    size_t st_bytes[2];
    for (int r = 0; r < 2; ++r) {
        mhla_decoder *dec = NULL;
        assert_int_equal(mhla_decoder_create(ctx, &c, c.seq_t, &dec), MHLA_OK);
        out[r] = malloc(in.nv * sizeof(float));
        assert_non_null(out[r]);
        memset(out[r], 0xFF, in.nv * sizeof(float));
        /* 13 tokens of prompt, 9 steps (crossing two chunk starts), 18 more by prefill */
        const int64_t seg[][2] = {{0, 13}, {13, 9}, {22, 18}};
        for (int s = 0; s < 3; ++s) {
            const int64_t t0 = seg[s][0], n = seg[s][1];
            const mhla_status status =
                s == 1 ? mhla_decoder_step_host(dec, in.q + t0 * qrow, in.k + t0 * qrow, in.v + t0 * row, in.mix,
                                                out[r] + t0 * row, n)
                       : mhla_decoder_prefill_host(dec, in.q + t0 * qrow, in.k + t0 * qrow, in.v + t0 * row, in.mix,
                                                   out[r] + t0 * row, n);
            if (status != MHLA_OK)
                fail_msg("decoder segment %d: %s: %s", s, mhla_status_name(status), mhla_context_message(ctx));
        }
        st_bytes[r] = mhla_decoder_state_size(dec);
        st[r] = malloc(st_bytes[r]);
        assert_non_null(st[r]);
        assert_int_equal(mhla_decoder_state_read(dec, st[r], st_bytes[r]), MHLA_OK);
        mhla_decoder_destroy(dec);
    }
    assert_same(out[0], out[1], in.nv * sizeof(float), "decoder", "outputs of two decoders");
    assert_int_equal(st_bytes[0], st_bytes[1]);
    assert_same(st[0], st[1], st_bytes[0], "decoder", "saved states of two decoders");
    double *ref = malloc(in.nv * sizeof *ref);
    assert_non_null(ref);
    assert_int_equal(mhla_reference_forward(&c, in.q, in.k, in.v, in.mix, ref), MHLA_OK);
    const double err = finite_rel_err(out[0], ref, in.nv, __func__);
    if (!(err <= mhla_reference_tolerance(c.dtype, c.seq_t)))
        fail_msg("decoder: max_rel_err %.3g", err);
    printf("deterministic: decoder prefill 13, step 9, prefill 18, and its state (max_rel_err %.2g)\n", err);
    free(ref);
    for (int r = 0; r < 2; ++r)
        free(out[r]), free(st[r]);
    test_inputs_free(&in);
}

/* The backward (mhla_backward_host / _varlen_host): dq, dk, dv and dmixing, whose sums over
 * blocks, chunks, batch and heads are the likeliest to depend on an order of accumulation, from
 * three runs as check_forward() makes them (two on one plan, one on a second plan), byte for byte;
 * the first run's gradients against the double reference (mhla_reference_backward). */
static void check_backward(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu, size_t num_seqs,
                           const char *label)
{
    test_inputs in;
    assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, 29, &in), MHLA_OK);
    float *dout = malloc(in.nv * sizeof *dout);
    assert_non_null(dout);
    fill_uniform(dout, in.nv, 31, -1.0f, 1.0f);
    void *q = stored(cfg, in.q, in.nq), *k = stored(cfg, in.k, in.nq), *v = stored(cfg, in.v, in.nv);
    void *d = stored(cfg, dout, in.nv);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, in.q, cfg->dtype, q, in.nq), MHLA_OK); /* what the device sees */
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, in.k, cfg->dtype, k, in.nq), MHLA_OK);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, in.v, cfg->dtype, v, in.nv), MHLA_OK);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, dout, cfg->dtype, d, in.nv), MHLA_OK);
    const size_t n[4] = {in.nq, in.nq, in.nv, in.nm};
    const size_t bytes[4] = {n[0] * elem_bytes(cfg), n[1] * elem_bytes(cfg), n[2] * elem_bytes(cfg), n[3] * 4};
    static const char *const names[4] = {"dq", "dk", "dv", "dmixing"};
    unsigned char *g[3][4];
    for (int r = 0; r < 3; ++r)
        for (int j = 0; j < 4; ++j) {
            g[r][j] = malloc(bytes[j]);
            assert_non_null(g[r][j]);
            memset(g[r][j], 0xFF, bytes[j]); /* NaN in every storage type */
        }
    mhla_plan *plan = NULL;
    for (int r = 0; r < 3; ++r) {
        if (r != 1) { /* runs 0 and 1 share a plan; run 2 has its own */
            mhla_plan_destroy(plan);
            plan = NULL;
            const mhla_status st = mhla_plan_create(ctx, cfg, &plan);
            if (st != MHLA_OK)
                fail_msg("%s: plan: %s: %s", label, mhla_status_name(st), mhla_context_message(ctx));
        }
        const mhla_status st =
            cu ? mhla_backward_varlen_host(plan, q, k, v, in.mix, cu, num_seqs, d, g[r][0], g[r][1], g[r][2],
                                           (float *)g[r][3])
               : mhla_backward_host(plan, q, k, v, in.mix, d, g[r][0], g[r][1], g[r][2], (float *)g[r][3]);
        if (st != MHLA_OK)
            fail_msg("%s: backward run %d: %s: %s", label, r, mhla_status_name(st), mhla_context_message(ctx));
    }
    mhla_plan_destroy(plan);
    char what[64];
    for (int j = 0; j < 4; ++j) {
        snprintf(what, sizeof what, "%s of two runs of one plan", names[j]);
        assert_same(g[0][j], g[1][j], bytes[j], label, what);
        snprintf(what, sizeof what, "%s of runs of two plans", names[j]);
        assert_same(g[0][j], g[2][j], bytes[j], label, what);
    }
    double *ref[4];
    for (int j = 0; j < 4; ++j)
        assert_non_null(ref[j] = malloc(n[j] * sizeof *ref[j]));
    const mhla_status st =
        cu ? mhla_reference_backward_varlen(cfg, in.q, in.k, in.v, in.mix, cu, num_seqs, dout, ref[0], ref[1], ref[2],
                                            ref[3])
           : mhla_reference_backward(cfg, in.q, in.k, in.v, in.mix, dout, ref[0], ref[1], ref[2], ref[3]);
    assert_int_equal(st, MHLA_OK);
    const double tol = mhla_reference_backward_tolerance(cfg->dtype);
    double worst = 0.0;
    size_t most = 0;
    for (int j = 0; j < 4; ++j)
        most = n[j] > most ? n[j] : most;
    float *got = malloc(most * sizeof *got);
    assert_non_null(got);
    for (int j = 0; j < 4; ++j) {
        const mhla_dtype dt = j == 3 ? MHLA_DTYPE_F32 : cfg->dtype;
        assert_int_equal(mhla_convert(MHLA_DTYPE_F32, got, dt, g[0][j], n[j]), MHLA_OK);
        const double err = finite_rel_err(got, ref[j], n[j], __func__);
        if (!(err <= tol))
            fail_msg("%s: %s max_rel_err %.3g > %.0e", label, names[j], err, tol);
        worst = err > worst ? err : worst;
    }
    printf("deterministic: backward, %s (max_rel_err %.2g)\n", label, worst);
    for (int j = 0; j < 4; ++j) {
        free(ref[j]);
        for (int r = 0; r < 3; ++r)
            free(g[r][j]);
    }
    free(got), free(q), free(k), free(v), free(d), free(dout);
    test_inputs_free(&in);
}

static void test_backward(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = config_1d(2, 2, 96, 4, 8, 12);
    check_backward(ctx, &c, NULL, 0, "1D N=96 M=4, paper");
    c.normalizer = MHLA_NORMALIZER_OFFICIAL;
    check_backward(ctx, &c, NULL, 0, "1D N=96 M=4, official");
    c.normalizer = MHLA_NORMALIZER_NONE;
    c.dtype = MHLA_DTYPE_BF16;
    check_backward(ctx, &c, NULL, 0, "1D N=96 M=4, none, bf16 storage");
    mhla_config_init(&c);
    c.heads = 2, c.seq_h = 12, c.seq_w = 10, c.block_h = 2, c.block_w = 2, c.dk = 8, c.dv = 8;
    check_backward(ctx, &c, NULL, 0, "2D 12x10 in 2x2 blocks, paper");
    /* Long blocks: the forward's summaries recomputed from split segments. */
    assert_int_equal(mhla_context_set_tuning(ctx, "split_min_len=64,groups_per_cu=32"), MHLA_OK);
    c = config_1d(1, 1, 1024, 2, 8, 8);
    check_backward(ctx, &c, NULL, 0, "N=1024 M=2 split, paper");
    assert_int_equal(mhla_context_set_tuning(ctx, NULL), MHLA_OK);
    c = config_causal(2, 2, 70, 8, 8, 8);
    check_backward(ctx, &c, NULL, 0, "causal N=70 C=8, none");
    c.normalizer = MHLA_NORMALIZER_PAPER;
    check_backward(ctx, &c, NULL, 0, "causal N=70 C=8, paper");
    c = config_causal(1, 2, 75, 8, 8, 8);
    c.varlen = 1;
    const int32_t cu[] = {0, 17, 17, 60, 75};
    check_backward(ctx, &c, cu, 4, "varlen 17+0+43+15");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_grids),
        cmocka_unit_test(test_forward_split_blas_storage),
        cmocka_unit_test(test_causal_varlen),
        cmocka_unit_test(test_decoder),
        cmocka_unit_test(test_backward),
    };
    return run_group("determinism", tests, context_setup, context_teardown);
}
