/* The softmax-attention baseline on the device against mhla_reference_softmax(): both layouts,
 * Dk != Dv, odd N, head dimensions, tiles forced small and odd, large logits, NaN, the API. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Device output and reference for q, k, v (filled by the caller); returns the error measure, +Inf
 * for any NaN or Inf unless `nan_expected` (then NaN must meet NaN, as mhla_max_rel_err counts). */
static double device_vs_reference(mhla_context *ctx, const mhla_config *cfg, const float *q, const float *k,
                                  const float *v, float *out, double *ref, const char *label, int nan_expected)
{
    mhla_plan *plan = NULL;
    mhla_status st = mhla_softmax_plan_create(ctx, cfg, &plan);
    if (st != MHLA_OK)
        fail_msg("%s: plan: %s: %s", label, mhla_status_name(st), mhla_context_message(ctx));
    st = mhla_forward_host(plan, q, k, v, NULL, out);
    if (st != MHLA_OK)
        fail_msg("%s: forward: %s: %s", label, mhla_status_name(st), mhla_context_message(ctx));
    mhla_plan_destroy(plan);
    st = mhla_reference_softmax(cfg, q, k, v, ref);
    if (st != MHLA_OK)
        fail_msg("%s: reference: %s: %s", label, mhla_status_name(st), mhla_last_message());
    const size_t n = mhla_config_tensor_elems(cfg, MHLA_TENSOR_V);
    return nan_expected ? mhla_max_rel_err(out, ref, n) : finite_rel_err(out, ref, n, label);
}

/* Random inputs uniform in [lo, hi), checked at the f32 tolerance of docs/spec.md
 * "Accuracy the tests hold". */
static void expect_close(mhla_context *ctx, const mhla_config *cfg, uint32_t seed, float lo, float hi,
                         const char *label)
{
    const size_t nq = mhla_config_tensor_elems(cfg, MHLA_TENSOR_Q), nv = mhla_config_tensor_elems(cfg, MHLA_TENSOR_V);
    float *q = malloc(nq * sizeof *q), *k = malloc(nq * sizeof *k), *v = malloc(nv * sizeof *v);
    float *out = nan_floats(nv);
    double *ref = malloc(nv * sizeof *ref);
    assert_true(q && k && v && out && ref);
    fill_uniform(q, nq, seed * 3 + 1, lo, hi);
    fill_uniform(k, nq, seed * 3 + 2, lo, hi);
    fill_uniform(v, nv, seed * 3 + 3, -1.0f, 1.0f);
    const double err = device_vs_reference(ctx, cfg, q, k, v, out, ref, label, 0);
    const double tol = mhla_reference_tolerance(MHLA_DTYPE_F32, cfg->seq_t * cfg->seq_h * cfg->seq_w);
    if (!(err <= tol))
        fail_msg("%s: max_rel_err %.3g > %.1g", label, err, tol);
    free(q), free(k), free(v), free(out), free(ref);
}

/* Head dimensions (Dk != Dv both ways, and sizes no vector width divides), each with one layout
 * (they alternate: each pair of dimensions and layout compiles a kernel of its own), x odd N (a
 * single token, less than one tile, several tiles with a partial last one), B = 2, H = 3. */
static void test_dims_layouts_lengths(void **state)
{
    mhla_context *ctx = *state;
    const int64_t dims[][2] = {{24, 24}, {64, 64}, {80, 80}, {128, 128}, {24, 80}, {80, 24}, {5, 3}};
    const int64_t lengths[] = {1, 37, 200};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
        for (size_t n = 0; n < sizeof lengths / sizeof lengths[0]; ++n) {
            mhla_config cfg = config_1d(2, 3, lengths[n], 1, dims[i][0], dims[i][1]);
            cfg.layout = (mhla_layout)(i % 2); /* the layouts alternate */
            char label[96];
            snprintf(label, sizeof label, "Dk=%lld Dv=%lld %s N=%lld", (long long)dims[i][0],
                     (long long)dims[i][1], mhla_layout_name(cfg.layout), (long long)lengths[n]);
            expect_close(ctx, &cfg, (uint32_t)(i * 16 + (i % 2) * 4 + n), -1.0f, 1.0f, label);
        }
}

/* The largest head dimensions, a 2D grid (only N matters), and a long sequence of many tiles. */
static void test_large_dims_and_long_sequence(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_1d(1, 2, 70, 1, 256, 256);
    expect_close(ctx, &cfg, 1, -1.0f, 1.0f, "Dk=Dv=256");
    cfg = config_1d(1, 1, 1, 1, 32, 48);
    cfg.seq_t = 1, cfg.seq_h = 12, cfg.seq_w = 11; /* 132 tokens */
    cfg.block_h = 4, cfg.block_w = 11;            /* ignored: softmax attends over all tokens */
    expect_close(ctx, &cfg, 2, -1.0f, 1.0f, "2D grid 12x11, block grid ignored");
    cfg = config_1d(1, 1, 2047, 1, 64, 64);
    expect_close(ctx, &cfg, 3, -2.0f, 2.0f, "N=2047");
}

/* Tiles the tuning table never picks: a work-group of 7 rows (not a power of two, N not a multiple
 * of it), each vector width with its smallest key tile, a width the kernel lacks (3 -> 2), and both
 * ways of copying a tile (with fewer work-items than tile rows, and more). */
static void test_forced_tiles(void **state)
{
    mhla_context *ctx = *state;
    const char *tiles[] = {"sm_bq=7,sm_bk=4,sm_vw=4,sm_rows=0",    "sm_bq=16,sm_bk=8,sm_vw=1,sm_rows=1",
                           "sm_bq=5,sm_bk=2,sm_vw=2,sm_rows=0",    "sm_bq=9,sm_bk=8,sm_vw=8,sm_rows=1",
                           "sm_bq=3,sm_bk=16,sm_vw=16,sm_rows=1",  "sm_bq=64,sm_bk=32,sm_vw=4,sm_rows=0",
                           "sm_bq=64,sm_bk=16,sm_vw=16,sm_rows=1", "sm_bq=8,sm_bk=12,sm_vw=3,sm_rows=0",
                           /* softmax_tiled.cl: groups of 2 x 1 work-items (one key quad of a partial
                            * last tile), 3 x 2 (queries not a multiple of the group), the GPU row's */
                           "sm_tiled=1,sm_bq=8,sm_bk=4", "sm_tiled=1,sm_bq=12,sm_bk=8", "sm_tiled=1,sm_bq=64,sm_bk=16"};
    for (size_t i = 0; i < sizeof tiles / sizeof tiles[0]; ++i) {
        assert_int_equal(setenv("MHLA_TUNING", tiles[i], 1), 0);
        mhla_config cfg = config_1d(2, 2, 45, 1, 20, 13);
        cfg.layout = (mhla_layout)(i % 2); /* the layouts alternate */
        char label[64];
        snprintf(label, sizeof label, "tile %s %s", tiles[i], mhla_layout_name(cfg.layout));
        expect_close(ctx, &cfg, (uint32_t)(100 + i * 2 + (i % 2)), -1.0f, 1.0f, label);
    }
    /* A key tile beyond local memory (1 MiB on PoCL, 32-64 KiB on GPUs) is shrunk to fit, staying
     * a multiple of the vector width (1000 -> 500 keys with PoCL's 1 MiB). (The tiled form's
     * shrinking: test_tiled_limits.) */
    assert_int_equal(setenv("MHLA_TUNING", "sm_bq=16,sm_bk=1000,sm_vw=4,sm_rows=0", 1), 0);
    mhla_config big = config_1d(1, 1, 45, 1, 256, 256);
    expect_close(ctx, &big, 120, -1.0f, 1.0f, "1000-key tile shrunk to local memory");
    restore_test_env(NULL);
}

/* Logits far beyond what exp() holds in float (exp(89) overflows): q, k in [1, 9) on a grid of
 * 1/4 so that float dot products are exact and only the softmax itself is under test. A naive
 * exp(logit) / sum would give Inf/Inf = NaN. (Logits are ~190 +- 20.) */
/* The GPU row's tiled softmax (softmax_tiled.cl) under the limits of the devices it is for
 * (MHLA_LIMITS: its group and arrays are fitted to what the context holds): a phone's 64-wide groups
 * and 16 KiB at head dimensions 64 (the group shrinks), 128-wide groups and 32 KiB with odd ones in
 * [B,H,N,D], and 16 KiB at head dimensions 256, where even 4 queries x 4 keys do not fit and the
 * plan takes softmax.cl. */
static void test_tiled_limits(void **state)
{
    (void)state;
    static const char *const limits[] = {"wg=64,local=16K", "wg=128,local=32K", "wg=256,local=16K"};
    mhla_config cfgs[3];
    cfgs[0] = config_1d(1, 2, 200, 1, 64, 64);
    cfgs[1] = config_1d(2, 3, 77, 1, 24, 20);
    cfgs[1].layout = MHLA_LAYOUT_BHND;
    cfgs[2] = config_1d(1, 1, 40, 1, 256, 256);
    for (size_t c = 0; c < 3; ++c) {
        mhla_context *ctx = limited_context(limits[c], "row=gpu");
        mhla_plan *plan = NULL;
        char text[512], label[128];
        assert_int_equal(mhla_softmax_plan_create(ctx, &cfgs[c], &plan), MHLA_OK);
        assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
        mhla_plan_destroy(plan);
        const int tiled = strstr(text, "softmax tiled") != NULL;
        if (tiled != (c < 2))
            fail_msg("MHLA_LIMITS=%s, Dk %lld: %s", limits[c], (long long)cfgs[c].dk, text);
        snprintf(label, sizeof label, "MHLA_LIMITS=%s, %s, Dk %lld Dv %lld", limits[c], tiled ? "tiled" : "untiled",
                 (long long)cfgs[c].dk, (long long)cfgs[c].dv);
        expect_close(ctx, &cfgs[c], (uint32_t)(130 + c), -1.0f, 1.0f, label);
        mhla_context_destroy(ctx);
    }
}

static void test_large_logits(void **state)
{
    mhla_context *ctx = *state;
    const int64_t N = 300, D = 64; /* scale = 1/8 exactly */
    mhla_config cfg = config_1d(1, 2, N, 1, D, D);
    const size_t n = (size_t)(2 * N * D);
    float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
    float *out = nan_floats(n);
    double *ref = malloc(n * sizeof *ref);
    assert_true(q && k && v && out && ref);
    fill_uniform(q, n, 41, 1.0f, 9.0f);
    fill_uniform(k, n, 42, 1.0f, 9.0f);
    fill_uniform(v, n, 43, -1.0f, 1.0f);
    for (size_t i = 0; i < n; ++i)
        q[i] = floorf(q[i] * 4.0f) / 4.0f, k[i] = floorf(k[i] * 4.0f) / 4.0f;
    double min_logit = INFINITY; /* BNHD, head 0: the smallest of query 0's logits */
    for (int64_t s = 0; s < N; ++s) {
        double dot = 0.0;
        for (int64_t d = 0; d < D; ++d)
            dot += (double)q[d] * k[s * 2 * D + d];
        min_logit = fmin(min_logit, dot / 8.0);
    }
    assert_true(min_logit > 89.0); /* every exp(logit) of that row overflows float */
    const double err = device_vs_reference(ctx, &cfg, q, k, v, out, ref, "large logits", 0);
    for (size_t i = 0; i < n; ++i)
        assert_true(isfinite(out[i]));
    if (!(err <= 1e-5))
        fail_msg("large logits: max_rel_err %.3g > 1e-5", err);
    free(q), free(k), free(v), free(out), free(ref);
}

/* A NaN in one query poisons that row only; a NaN key poisons every row (it takes part in every
 * softmax), both as the reference computes. */
static void test_nan(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_1d(1, 1, 40, 1, 8, 8);
    float q[320], k[320], v[320], out[320];
    double ref[320];
    fill_uniform(q, 320, 7, -1.0f, 1.0f);
    fill_uniform(k, 320, 8, -1.0f, 1.0f);
    fill_uniform(v, 320, 9, -1.0f, 1.0f);
    q[5 * 8 + 3] = NAN;
    double err = device_vs_reference(ctx, &cfg, q, k, v, out, ref, "NaN query", 1);
    for (int t = 0; t < 40; ++t)
        for (int e = 0; e < 8; ++e)
            assert_true(t == 5 ? isnan(out[t * 8 + e]) : isfinite(out[t * 8 + e]));
    assert_true(err <= 1e-5);
    q[5 * 8 + 3] = 0.5f;
    k[33 * 8 + 1] = NAN;
    err = device_vs_reference(ctx, &cfg, q, k, v, out, ref, "NaN key", 1);
    for (int i = 0; i < 320; ++i)
        assert_true(isnan(out[i]));
    assert_true(err <= 1e-5);
}

/* The API contract: the scale default, what the plan reports, the ignored mixing argument, and the
 * configurations it refuses. */
static void test_api(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_1d(1, 2, 16, 4, 64, 32);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_softmax_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_true(mhla_plan_config(plan)->scale == 0.125f);
    assert_int_equal(mhla_plan_config(plan)->block_t, 1);
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_MIXING), 0);
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_OUT), 16 * 2 * 32 * sizeof(float));
    assert_int_equal(mhla_plan_workspace_size(plan), 0);
    mhla_plan_destroy(plan);

    cfg.scale = 0.3f; /* an explicit scale is used as given */
    expect_close(ctx, &cfg, 5, -2.0f, 2.0f, "scale 0.3");

    /* The device path with no mixing buffer; the other buffers are still checked. */
    cl_int err = CL_SUCCESS;
    const size_t bytes = 16 * 2 * 64 * sizeof(float);
    cl_mem b[4];
    for (int i = 0; i < 4; ++i) {
        b[i] = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
        assert_int_equal(err, CL_SUCCESS);
    }
    cfg.scale = 0.0f;
    assert_int_equal(mhla_softmax_plan_create(ctx, &cfg, &plan), MHLA_OK);
    cl_event done = NULL;
    assert_int_equal(mhla_forward(plan, b[0], b[1], b[2], NULL, b[3], 0, NULL, &done), MHLA_OK);
    assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    mhla_stage_times times;
    assert_int_equal(mhla_plan_stage_times(plan, &times), MHLA_ERR_UNSUPPORTED);
    assert_int_equal(mhla_forward(plan, b[0], NULL, b[2], NULL, b[3], 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_forward(plan, b[0], b[1], b[2], NULL, b[0], 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    mhla_plan_destroy(plan);
    plan = NULL;
    for (int i = 0; i < 4; ++i)
        clReleaseMemObject(b[i]);

    cfg.causal = 1;
    assert_int_equal(mhla_softmax_plan_create(ctx, &cfg, &plan), MHLA_ERR_UNSUPPORTED);
    assert_null(plan);
    cfg.causal = 0;
    cfg.dk = 257;
    assert_int_equal(mhla_softmax_plan_create(ctx, &cfg, &plan), MHLA_ERR_UNSUPPORTED);
    cfg.dk = 64;
    cfg.heads = 0;
    assert_int_equal(mhla_softmax_plan_create(ctx, &cfg, &plan), MHLA_ERR_INVALID_SHAPE);
    assert_non_null(strstr(mhla_context_message(ctx), "heads"));
    assert_int_equal(mhla_softmax_plan_create(ctx, NULL, &plan), MHLA_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dims_layouts_lengths),
        cmocka_unit_test(test_large_dims_and_long_sequence),
        cmocka_unit_test(test_forced_tiles),
        cmocka_unit_test(test_tiled_limits),
        cmocka_unit_test(test_large_logits),
        cmocka_unit_test(test_nan),
        cmocka_unit_test(test_api),
    };
    return run_group("softmax", tests, context_setup, context_teardown);
}
