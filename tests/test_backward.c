/* mhla_backward on the device against the double-precision backward reference (docs/spec.md
 * "Accuracy the tests hold" tolerances: f32 1e-4, f16 5e-3, bf16 3e-2 per gradient), in every mode, with
 * NaN-filled gradient buffers, also with eps and feature_eps large enough to show and with exact zeros
 * where relu's derivative is 0; dMc bit-identical run to run; events; saved summaries. The device-buffer
 * varlen call and the refusals are in test_backward_modes.c. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *const grad_names[4] = {"dq", "dk", "dv", "dmixing"};

/* The inputs of a backward case: test_inputs_make()'s q, k, v and Mc, and dout uniform in [-1, 1).
 * With `zeros`, about a third of the elements of q and of k, at random places (not whole columns: a
 * column of k all 0 makes its gradient 0 whatever the derivative), become exactly 0.0f, where
 * relu's and relu-eps's derivative is 0 (docs/spec.md "Backward") and a kernel testing x >= 0
 * gives 1. */
static float *backward_inputs(const mhla_config *cfg, uint32_t seed, int zeros, test_inputs *in)
{
    assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, seed, in), MHLA_OK);
    if (cfg->causal) /* the reference never reads above the diagonal, nor may the kernels */
        for (int64_t i = 0; i < in->rows; ++i)
            for (int64_t j = i + 1; j < in->rows; ++j)
                assert_true(isnan(in->mix[i * in->rows + j]));
    if (zeros) {
        float *u = malloc(in->nq * sizeof *u);
        assert_non_null(u);
        for (int j = 0; j < 2; ++j) {
            float *x = j ? in->k : in->q;
            fill_uniform(u, in->nq, seed * 5 + 90 + (uint32_t)j, 0.0f, 3.0f);
            for (size_t i = 0; i < in->nq; ++i)
                if (u[i] < 1.0f)
                    x[i] = 0.0f;
        }
        free(u);
    }
    float *dout = malloc(in->nv * sizeof *dout);
    assert_non_null(dout);
    fill_uniform(dout, in->nv, seed + 77, -1.0f, 1.0f);
    return dout;
}

/* The reference's gradients of cfg (varlen when cu is not NULL) into ref[4] (malloc'd). */
static void reference_grads(const mhla_config *cfg, const int32_t *cu, size_t nseq, const test_inputs *in,
                            const float *dout, double *ref[4])
{
    const size_t n[4] = {in->nq, in->nq, in->nv, in->nm};
    for (int j = 0; j < 4; ++j) {
        ref[j] = malloc(n[j] * sizeof(double));
        assert_non_null(ref[j]);
    }
    const mhla_status st = cu ? mhla_reference_backward_varlen(cfg, in->q, in->k, in->v, in->mix, cu, nseq, dout,
                                                               ref[0], ref[1], ref[2], ref[3])
                              : mhla_reference_backward(cfg, in->q, in->k, in->v, in->mix, dout, ref[0], ref[1],
                                                        ref[2], ref[3]);
    if (st != MHLA_OK)
        fail_msg("reference backward: %s: %s", mhla_status_name(st), mhla_last_message());
}

/* docs/spec.md "Backward": relu and relu-eps have derivative 0 at x = 0, so dq (dk) is exactly 0 (+0 or
 * -0) wherever q (k) is exactly 0, in the device's gradients and in the reference's. Returns how many it
 * checked. */
static size_t expect_zero_grads_at_zeros(const mhla_config *cfg, const test_inputs *in, float *const gotf[4],
                                         double *const ref[4], const char *name)
{
    if (cfg->feature_map != MHLA_FEATURE_RELU && cfg->feature_map != MHLA_FEATURE_RELU_EPS)
        return 0;
    size_t checked = 0;
    for (int j = 0; j < 2; ++j) {
        const float *x = j ? in->k : in->q;
        for (size_t i = 0; i < in->nq; ++i) {
            if (x[i] != 0.0f)
                continue;
            ++checked;
            if (!(gotf[j][i] == 0.0f && ref[j][i] == 0.0))
                fail_msg("%s: %s[%zu] = 0 but %s[%zu] is %a on the device, %a in the reference (relu's derivative "
                         "at 0 is 0)", name, j ? "k" : "q", i, grad_names[j], i, (double)gotf[j][i], ref[j][i]);
        }
    }
    return checked;
}

/* One configuration: backward_inputs(), the device's gradients (NaN-filled first) against the
 * reference on the same rounded inputs, and the exact zeros of expect_zero_grads_at_zeros().
 * errs[4] receives each gradient's max relative error. */
/* What the last run_backward()'s plan said it was built with (mhla_plan_tuning, after its backward). */
static char last_tuning[768];

static void run_backward(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu, size_t nseq, uint32_t seed,
                         int zeros, const char *name, double errs[4])
{
    test_inputs in;
    mhla_plan *plan = NULL;
    float *dout = backward_inputs(cfg, seed, zeros, &in);
    const mhla_dtype dt = cfg->dtype;
    void *sq = to_storage(dt, in.q, in.nq), *sk = to_storage(dt, in.k, in.nq), *sv = to_storage(dt, in.v, in.nv);
    void *sd = to_storage(dt, dout, in.nv);
    const size_t es = dt == MHLA_DTYPE_F32 ? 4 : 2, n[4] = {in.nq, in.nq, in.nv, in.nm};
    void *got[4];
    float *gotf[4];
    double *ref[4];
    for (int j = 0; j < 4; ++j) {
        got[j] = malloc(n[j] * (j == 3 ? 4 : es));
        gotf[j] = malloc(n[j] * sizeof(float));
        assert_true(got[j] && gotf[j]);
        memset(got[j], 0xFF, n[j] * (j == 3 ? 4 : es)); /* NaN in every storage type */
    }
    mhla_status st = mhla_plan_create(ctx, cfg, &plan);
    if (st != MHLA_OK)
        fail_msg("plan: %s: %s", mhla_status_name(st), mhla_context_message(ctx));
    st = cu ? mhla_backward_varlen_host(plan, sq, sk, sv, in.mix, cu, nseq, sd, got[0], got[1], got[2], got[3])
            : mhla_backward_host(plan, sq, sk, sv, in.mix, sd, got[0], got[1], got[2], got[3]);
    if (st != MHLA_OK)
        fail_msg("backward: %s: %s", mhla_status_name(st), mhla_context_message(ctx));
    reference_grads(cfg, cu, nseq, &in, dout, ref);
    for (int j = 0; j < 4; ++j) {
        if (j < 3 && dt != MHLA_DTYPE_F32)
            mhla_convert(MHLA_DTYPE_F32, gotf[j], dt, got[j], n[j]);
        else
            memcpy(gotf[j], got[j], n[j] * sizeof(float));
        errs[j] = finite_rel_err(gotf[j], ref[j], n[j], name);
    }
    assert_int_equal(mhla_plan_tuning(plan, last_tuning, sizeof last_tuning), MHLA_OK);
    const size_t checked = expect_zero_grads_at_zeros(cfg, &in, gotf, ref, name);
    if (zeros)
        print_message("%-40s dq, dk exactly 0 at all %zu zeros of q and k\n", name, checked);
    mhla_plan_destroy(plan);
    for (int j = 0; j < 4; ++j)
        free(got[j]), free(gotf[j]), free(ref[j]);
    if (dt != MHLA_DTYPE_F32)
        free(sq), free(sk), free(sv), free(sd);
    free(dout);
    test_inputs_free(&in);
}

/* Runs cfg and holds each gradient to the tolerance of docs/spec.md "Accuracy the tests hold", printing
 * the errors for the record. dmixing is not held where it is 0 up to rounding (M = 1 with a normalizer:
 * o_t does not change when Mc's one entry is scaled, but for eps), so that its relative error is noise
 * over noise. zeros: as backward_inputs(). */
static void expect_backward_mix(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu, size_t nseq,
                                const char *name, uint32_t seed, int zeros, int check_dmixing)
{
    if (test_config_thinned())
        return;
    double errs[4];
    run_backward(ctx, cfg, cu, nseq, seed, zeros, name, errs);
    const double tol = mhla_reference_backward_tolerance(cfg->dtype);
    print_message("%-40s dq %.2e dk %.2e dv %.2e dmixing %.2e (tolerance %.0e)\n", name, errs[0], errs[1], errs[2],
                  errs[3], tol);
    for (int j = 0; j < (check_dmixing ? 4 : 3); ++j)
        if (!(errs[j] <= tol))
            fail_msg("%s: %s max relative error %.3g above %.0e", name, grad_names[j], errs[j], tol);
}

static void expect_backward(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu, size_t nseq,
                            const char *name, uint32_t seed)
{
    expect_backward_mix(ctx, cfg, cu, nseq, name, seed, 0, 1);
}

/* The gradients' counterpart of expect_eps_visible(): on the reference, cfg's gradients against
 * those with eps (a normalizer), then feature_eps (relu-eps), put back to the default 1e-6; each
 * gradient must move by more than `factor` times the backward tolerance, or a kernel that drops
 * the value in that gradient's path could pass the case. Same inputs as run_backward(). */
static void expect_grad_eps_visible(const mhla_config *cfg, const int32_t *cu, size_t nseq, uint32_t seed,
                                    double factor)
{
    test_inputs in;
    float *dout = backward_inputs(cfg, seed, 0, &in);
    const size_t n[4] = {in.nq, in.nq, in.nv, in.nm};
    const double tol = mhla_reference_backward_tolerance(cfg->dtype);
    double *ref[4], *moved[4];
    reference_grads(cfg, cu, nseq, &in, dout, ref);
    for (int which = 0; which < 2; ++which) {
        mhla_config d = *cfg;
        if (which == 0 && cfg->normalizer != MHLA_NORMALIZER_NONE)
            d.eps = 1e-6f;
        else if (which == 1 && cfg->feature_map == MHLA_FEATURE_RELU_EPS)
            d.feature_eps = 1e-6f;
        else
            continue;
        reference_grads(&d, cu, nseq, &in, dout, moved);
        for (int j = 0; j < 4; ++j) {
            float *f = malloc(n[j] * sizeof *f);
            assert_non_null(f);
            for (size_t i = 0; i < n[j]; ++i)
                f[i] = (float)moved[j][i];
            const double shift = finite_rel_err(f, ref[j], n[j], "gradient eps check");
            if (!(shift > factor * tol))
                fail_msg("%s %g moves %s by only %.3g (need > %g x %.0e): the case could not catch a backward "
                         "kernel that drops it", which ? "feature_eps" : "eps",
                         (double)(which ? cfg->feature_eps : cfg->eps), grad_names[j], shift, factor, tol);
            free(f), free(moved[j]);
        }
    }
    for (int j = 0; j < 4; ++j)
        free(ref[j]);
    free(dout);
    test_inputs_free(&in);
}

static mhla_config grid_config(int dims, int64_t dk, int64_t dv, mhla_normalizer norm, mhla_feature_map fm)
{
    mhla_config c;
    mhla_config_init(&c);
    c.batch = 2, c.heads = 3, c.dk = dk, c.dv = dv, c.normalizer = norm, c.feature_map = fm;
    if (dims == 1)
        c.seq_t = 96, c.block_t = 4;
    else if (dims == 2)
        c.seq_h = 12, c.seq_w = 10, c.block_h = 3, c.block_w = 2;
    else
        c.seq_t = 4, c.seq_h = 6, c.seq_w = 4, c.block_t = 2, c.block_h = 3, c.block_w = 2;
    return c;
}

static void test_backward_non_causal(void **state)
{
    mhla_context *ctx = *state;
    static const mhla_normalizer norms[] = {MHLA_NORMALIZER_NONE, MHLA_NORMALIZER_PAPER, MHLA_NORMALIZER_OFFICIAL};
    char name[96];
    for (int dims = 1; dims <= 3; ++dims)
        for (int ni = 0; ni < 3; ++ni) {
            mhla_config c = grid_config(dims, 16, 8, norms[ni], MHLA_FEATURE_RELU_EPS);
            snprintf(name, sizeof name, "%dD %s relu-eps 16x8", dims, mhla_normalizer_name(norms[ni]));
            expect_backward(ctx, &c, NULL, 0, name, (uint32_t)(dims * 10 + ni));
        }
}

static void test_backward_feature_maps_and_shapes(void **state)
{
    mhla_context *ctx = *state;
    static const mhla_feature_map maps[] = {MHLA_FEATURE_NONE, MHLA_FEATURE_RELU, MHLA_FEATURE_ELU1};
    char name[96];
    for (int fi = 0; fi < 3; ++fi) {
        mhla_config c = grid_config(2, 8, 8, MHLA_NORMALIZER_PAPER, maps[fi]);
        snprintf(name, sizeof name, "2D paper %s 8x8", mhla_feature_map_name(maps[fi]));
        expect_backward(ctx, &c, NULL, 0, name, (uint32_t)(40 + fi));
    }
    /* Odd head dimensions, Dk != Dv, the other layout, a scale */
    mhla_config c = grid_config(3, 5, 3, MHLA_NORMALIZER_OFFICIAL, MHLA_FEATURE_ELU1);
    c.layout = MHLA_LAYOUT_BHND;
    c.scale = 0.7f;
    expect_backward(ctx, &c, NULL, 0, "3D official elu1 5x3 bhnd scale 0.7", 50);
    c = grid_config(1, 7, 12, MHLA_NORMALIZER_NONE, MHLA_FEATURE_RELU);
    expect_backward(ctx, &c, NULL, 0, "1D none relu 7x12", 51);
    /* dMc over 25 chunks of summary rows (Dk = Dv = 64, 6 heads): a launch rounded up past the last
     * chunk (8 blocks: 2 x 2 tiles, 16 chunks a group) must not write past the partial sums (Oclgrind) */
    c = grid_config(1, 64, 64, MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS);
    c.block_t = 8;
    expect_backward(ctx, &c, NULL, 0, "1D paper 64x64 M=8 (25 dMc chunks)", 54);
    /* M = 1: plain linear attention */
    c = grid_config(1, 16, 16, MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS);
    c.block_t = 1;
    expect_backward_mix(ctx, &c, NULL, 0, "1D M=1 paper (dmixing ~ 0, not held)", 52, 0, 0);
    c.normalizer = MHLA_NORMALIZER_NONE;
    expect_backward(ctx, &c, NULL, 0, "1D M=1 none", 53);
}

static void test_backward_storage(void **state)
{
    mhla_context *ctx = *state;
    static const mhla_dtype types[] = {MHLA_DTYPE_F16, MHLA_DTYPE_BF16};
    char name[96];
    for (int ti = 0; ti < 2; ++ti)
        for (int ni = 0; ni < 2; ++ni) {
            mhla_config c = grid_config(2, 16, 8, ni ? MHLA_NORMALIZER_OFFICIAL : MHLA_NORMALIZER_PAPER,
                                        MHLA_FEATURE_RELU_EPS);
            c.dtype = types[ti];
            snprintf(name, sizeof name, "2D %s %s", mhla_normalizer_name(c.normalizer), mhla_dtype_name(types[ti]));
            expect_backward(ctx, &c, NULL, 0, name, (uint32_t)(60 + ti * 2 + ni));
        }
}

/* Causal chunk form: none and paper, a partial last chunk, more rows of Mc than chunks (their
 * dMc rows are 0), odd sizes, f16 and bf16 storage; packed sequences with an empty one. A causal
 * configuration compiles the causal forward's and backward's kernels anew (7-30 s cold on a 2-core
 * PoCL machine, most of this program's time): normalizers, feature maps and storage types are
 * paired, each value once, not multiplied (relu-eps with both normalizers: the eps cases below). */
static void test_backward_causal(void **state)
{
    mhla_context *ctx = *state;
    static const mhla_feature_map maps[] = {MHLA_FEATURE_RELU, MHLA_FEATURE_ELU1};
    char name[96];
    for (int ni = 0; ni < 2; ++ni) {
        const int fi = ni; /* none with relu, paper with elu1 */
        mhla_config c = config_causal(2, 3, 77, 16, 8, 12);
        c.normalizer = ni ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        c.feature_map = maps[fi];
        c.mixing_rows = 7;
        snprintf(name, sizeof name, "causal %s %s 8x12 N=77 C=16", mhla_normalizer_name(c.normalizer),
                 mhla_feature_map_name(c.feature_map));
        expect_backward(ctx, &c, NULL, 0, name, (uint32_t)(80 + ni * 2 + fi));
    }
    mhla_config c = config_causal(1, 2, 40, 8, 5, 3);
    c.layout = MHLA_LAYOUT_BHND;
    c.normalizer = MHLA_NORMALIZER_PAPER;
    c.feature_map = MHLA_FEATURE_ELU1; /* k~ of a quad's pad past Dk 5 is 1, not 0 */
    expect_backward(ctx, &c, NULL, 0, "causal paper elu1 5x3 bhnd N=40 C=8", 90);
    for (int ni = 0; ni < 2; ++ni) {
        const int ti = ni; /* none with f16, paper with bf16 */
        c = config_causal(1, 2, 64, 16, 16, 16);
        c.normalizer = ni ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        c.dtype = ti ? MHLA_DTYPE_BF16 : MHLA_DTYPE_F16;
        snprintf(name, sizeof name, "causal %s %s", mhla_normalizer_name(c.normalizer), mhla_dtype_name(c.dtype));
        expect_backward(ctx, &c, NULL, 0, name, (uint32_t)(91 + ti + ni * 7));
    }
    /* The production tiles: D = 64 in chunks of 64 and 128 (the CPU rows' fused read-out with a
     * whole row of columns per work-item), the last chunk partial. */
    for (int ci = 0; ci < 2; ++ci) {
        c = config_causal(1, 2, ci ? 300 : 150, ci ? 128 : 64, 64, 64);
        c.normalizer = ci ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        snprintf(name, sizeof name, "causal %s 64x64 N=%lld C=%lld", mhla_normalizer_name(c.normalizer),
                 (long long)c.seq_t, (long long)c.chunk);
        expect_backward(ctx, &c, NULL, 0, name, (uint32_t)(110 + ci));
    }
    /* 130 chunks: dMc's products over the 2 x 32 x 33 = 2112 floats of a slot in one piece of 4096
     * (host/backward/dmixing.c, from 128 rows on), where pieces of 1024 would be three. Two heads,
     * not more: the M^2 products dominate its time (under Oclgrind, about 50 s). */
    c = config_causal(1, 2, 1037, 8, 32, 32);
    c.normalizer = MHLA_NORMALIZER_PAPER;
    expect_backward(ctx, &c, NULL, 0, "causal paper 32x32 N=1037 C=8 (130 chunks)", 112);
    static const int32_t cu[] = {0, 21, 21, 50, 59};
    for (int ni = 0; ni < 2; ++ni) {
        c = config_causal(1, 2, 59, 8, 8, 8);
        c.varlen = 1;
        c.mixing_rows = 5;
        c.normalizer = ni ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        c.feature_map = MHLA_FEATURE_RELU_EPS; /* the packed kernels of the eps cases, built once */
        expect_backward(ctx, &c, cu, 4, ni ? "varlen paper (21, 0, 29, 9 tokens)" : "varlen none (21, 0, 29, 9)",
                        (uint32_t)(95 + ni));
    }
}

/* A causal config of the eps cases below: two sequences of 77 tokens in chunks of 16 (a partial
 * last chunk), 7 rows of Mc (more than the 5 chunks), Dk = Dv = 8 as the varlen cases. */
static mhla_config causal_eps_config(mhla_normalizer norm)
{
    mhla_config c = config_causal(2, 3, 77, 16, 8, 8);
    c.normalizer = norm;
    c.feature_map = MHLA_FEATURE_RELU_EPS;
    c.mixing_rows = 7;
    set_test_eps(&c);
    return c;
}

/* Each case with eps = TEST_EPS and feature_eps = TEST_FEATURE_EPS, after showing on the reference
 * that they move its output and every gradient by 10x the tolerance: the defaults (1e-6) moved
 * nothing past it, so that a kernel that dropped either passed. */
static void expect_backward_eps(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu, size_t nseq,
                                const char *name, uint32_t seed)
{
    if (!cu) /* the forward reference takes no packed batch: the gradients' check stands for both */
        expect_eps_visible(cfg, seed, 10);
    expect_grad_eps_visible(cfg, cu, nseq, seed, 10);
    expect_backward(ctx, cfg, cu, nseq, name, seed);
}

/* Non-default eps and feature_eps through every non-causal normalizer (relu-eps), on a 1D and a 3D
 * grid: a backward kernel that drops `+ eps` or feature_eps fails here (the shapes of
 * test_backward_non_causal, whose kernels are built already). */
static void test_backward_eps_non_causal(void **state)
{
    mhla_context *ctx = *state;
    static const mhla_normalizer norms[] = {MHLA_NORMALIZER_NONE, MHLA_NORMALIZER_PAPER, MHLA_NORMALIZER_OFFICIAL};
    char name[96];
    for (int dims = 1; dims <= 3; dims += 2)
        for (int ni = 0; ni < 3; ++ni) {
            mhla_config c = grid_config(dims, 16, 8, norms[ni], MHLA_FEATURE_RELU_EPS);
            set_test_eps(&c);
            snprintf(name, sizeof name, "%dD %s relu-eps, test eps", dims, mhla_normalizer_name(norms[ni]));
            expect_backward_eps(ctx, &c, NULL, 0, name, (uint32_t)(100 + dims * 10 + ni));
        }
}

/* Non-default eps and feature_eps through the causal chunk form (none, paper) and packed varlen
 * sequences with an empty one: the causal kernels' own `+ eps` and feature_eps. */
static void test_backward_eps_causal(void **state)
{
    mhla_context *ctx = *state;
    static const int32_t cu[] = {0, 21, 21, 50, 59};
    char name[96];
    for (int ni = 0; ni < 2; ++ni) {
        mhla_config c = causal_eps_config(ni ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE);
        snprintf(name, sizeof name, "causal %s relu-eps, test eps", mhla_normalizer_name(c.normalizer));
        expect_backward_eps(ctx, &c, NULL, 0, name, (uint32_t)(130 + ni));
        c = config_causal(1, 2, 59, 8, 8, 8);
        c.varlen = 1;
        c.mixing_rows = 5;
        c.normalizer = ni ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        c.feature_map = MHLA_FEATURE_RELU_EPS;
        set_test_eps(&c);
        snprintf(name, sizeof name, "varlen %s relu-eps, test eps", mhla_normalizer_name(c.normalizer));
        expect_backward_eps(ctx, &c, cu, 4, name, (uint32_t)(132 + ni));
    }
}

/* q and k with about a third of their elements exactly 0 (others in [-1, 1)): relu's and relu-eps's
 * derivative there is 0 (docs/spec.md "Backward"), so dq and dk must be exactly 0 there, on the device
 * and in the reference; a derivative tested as x >= 0 gives 1 and fails. Non-causal and causal, relu and
 * relu-eps. */
static void test_backward_exact_zeros(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = grid_config(2, 8, 8, MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU);
    expect_backward_mix(ctx, &c, NULL, 0, "2D paper relu, zeros", 140, 1, 1);
    c = grid_config(1, 16, 8, MHLA_NORMALIZER_OFFICIAL, MHLA_FEATURE_RELU_EPS);
    set_test_eps(&c);
    expect_backward_mix(ctx, &c, NULL, 0, "1D official relu-eps, zeros", 141, 1, 1);
    c = config_causal(2, 3, 77, 16, 8, 12);
    c.normalizer = MHLA_NORMALIZER_PAPER;
    c.mixing_rows = 7;
    expect_backward_mix(ctx, &c, NULL, 0, "causal paper relu, zeros", 142, 1, 1);
    c = causal_eps_config(MHLA_NORMALIZER_NONE);
    expect_backward_mix(ctx, &c, NULL, 0, "causal none relu-eps, zeros", 143, 1, 1);
}

/* Device buffers for the determinism, event and saved-summary tests. */
typedef struct bufs {
    cl_mem q, k, v, mix, dout, dq, dk, dv, dmix;
} bufs;

static void bufs_make(mhla_context *ctx, mhla_plan *plan, const test_inputs *in, bufs *b)
{
    cl_context cl = mhla_context_cl_context(ctx);
    cl_int err;
    const size_t bq = in->nq * 4, bv = in->nv * 4, bm = in->nm * 4;
    (void)plan;
    b->q = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bq, in->q, &err);
    b->k = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bq, in->k, &err);
    b->v = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bv, in->v, &err);
    b->dout = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bv, in->v, &err);
    b->mix = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bm, in->mix, &err);
    b->dq = clCreateBuffer(cl, CL_MEM_READ_WRITE, bq, NULL, &err);
    b->dk = clCreateBuffer(cl, CL_MEM_READ_WRITE, bq, NULL, &err);
    b->dv = clCreateBuffer(cl, CL_MEM_READ_WRITE, bv, NULL, &err);
    b->dmix = clCreateBuffer(cl, CL_MEM_READ_WRITE, bm, NULL, &err);
    assert_true(b->q && b->k && b->v && b->dout && b->mix && b->dq && b->dk && b->dv && b->dmix);
}

static void bufs_free(bufs *b)
{
    cl_mem all[] = {b->q, b->k, b->v, b->mix, b->dout, b->dq, b->dk, b->dv, b->dmix};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        clReleaseMemObject(all[i]);
}

/* dMc twice: bit-identical (a fixed-order reduction); a NULL dmixing leaves dq, dk, dv as they were;
 * the workspace is counted once the backward has run. */
static void test_backward_deterministic(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = grid_config(2, 16, 16, MHLA_NORMALIZER_OFFICIAL, MHLA_FEATURE_RELU_EPS);
    test_inputs in;
    mhla_plan *plan = NULL;
    bufs b;
    cl_command_queue queue = mhla_context_queue(ctx);
    assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 5, &in), MHLA_OK);
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    const size_t before = mhla_plan_workspace_size(plan);
    bufs_make(ctx, plan, &in, &b);
    float *m1 = malloc(in.nm * 4), *m2 = malloc(in.nm * 4), *q1 = malloc(in.nq * 4), *q2 = malloc(in.nq * 4);
    assert_true(m1 && m2 && q1 && q2);
    for (int run = 0; run < 2; ++run) {
        cl_event done = NULL;
        assert_int_equal(mhla_backward(plan, b.q, b.k, b.v, b.mix, b.dout, b.dq, b.dk, b.dv, b.dmix, 0, NULL, &done),
                         MHLA_OK);
        assert_non_null(done);
        assert_int_equal(clEnqueueReadBuffer(queue, b.dmix, CL_TRUE, 0, in.nm * 4, run ? m2 : m1, 1, &done, NULL),
                         CL_SUCCESS);
        assert_int_equal(clEnqueueReadBuffer(queue, b.dq, CL_TRUE, 0, in.nq * 4, q1, 0, NULL, NULL), CL_SUCCESS);
        clReleaseEvent(done);
    }
    assert_memory_equal(m1, m2, in.nm * 4);
    assert_true(mhla_plan_workspace_size(plan) > before);
    assert_int_equal(mhla_backward(plan, b.q, b.k, b.v, b.mix, b.dout, b.dq, b.dk, b.dv, NULL, 0, NULL, NULL),
                     MHLA_OK);
    assert_int_equal(clEnqueueReadBuffer(queue, b.dq, CL_TRUE, 0, in.nq * 4, q2, 0, NULL, NULL), CL_SUCCESS);
    assert_memory_equal(q1, q2, in.nq * 4);
    free(m1), free(m2), free(q1), free(q2);
    bufs_free(&b);
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
}

/* Gated on a user event, mhla_backward only enqueues (a blocking call would never return here):
 * non-causal and causal plans, the gradients correct once the gate opens. */
static void test_backward_waits_for_events(void **state)
{
    mhla_context *ctx = *state;
    if (user_event_gates_hang(ctx))
        test_skip();
    for (int causal = 0; causal < 2; ++causal) {
        mhla_config c = causal ? config_causal(1, 2, 40, 16, 8, 8) : grid_config(1, 8, 8, MHLA_NORMALIZER_PAPER,
                                                                                  MHLA_FEATURE_RELU_EPS);
        test_inputs in;
        mhla_plan *plan = NULL;
        bufs b;
        cl_int err;
        assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 11, &in), MHLA_OK);
        assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
        bufs_make(ctx, plan, &in, &b);
        cl_event gate = clCreateUserEvent(mhla_context_cl_context(ctx), &err), done = NULL;
        assert_int_equal(err, CL_SUCCESS);
        assert_int_equal(mhla_backward(plan, b.q, b.k, b.v, b.mix, b.dout, b.dq, b.dk, b.dv, b.dmix, 1, &gate, &done),
                         MHLA_OK);
        assert_int_equal(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
        assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
        float *dq = malloc(in.nq * 4);
        double *ref[4];
        for (int j = 0; j < 4; ++j)
            ref[j] = malloc((j < 2 ? in.nq : j == 2 ? in.nv : in.nm) * sizeof(double));
        assert_int_equal(clEnqueueReadBuffer(mhla_context_queue(ctx), b.dq, CL_TRUE, 0, in.nq * 4, dq, 0, NULL, NULL),
                         CL_SUCCESS);
        assert_int_equal(mhla_reference_backward(&c, in.q, in.k, in.v, in.mix, in.v, ref[0], ref[1], ref[2], ref[3]),
                         MHLA_OK);
        assert_true(finite_rel_err(dq, ref[0], in.nq, __func__) <= mhla_reference_backward_tolerance(MHLA_DTYPE_F32));
        for (int j = 0; j < 4; ++j)
            free(ref[j]);
        free(dq);
        clReleaseEvent(done);
        clReleaseEvent(gate);
        bufs_free(&b);
        mhla_plan_destroy(plan);
        test_inputs_free(&in);
    }
}

/* mhla_plan_save_for_backward: a backward right after the forward of the same buffers reuses the
 * forward's summaries and gets the same bits as one that recomputes them (and the reference's
 * gradients); a forward of other buffers in between makes it recompute; bad arguments are refused. */
static void read_grads(mhla_context *ctx, const bufs *b, const test_inputs *in, float *out[4])
{
    const cl_mem src[4] = {b->dq, b->dk, b->dv, b->dmix};
    const size_t n[4] = {in->nq, in->nq, in->nv, in->nm};
    for (int j = 0; j < 4; ++j) {
        out[j] = malloc(n[j] * 4);
        assert_int_equal(clEnqueueReadBuffer(mhla_context_queue(ctx), src[j], CL_TRUE, 0, n[j] * 4, out[j], 0, NULL,
                                             NULL),
                         CL_SUCCESS);
    }
}

/* What both saved-summary tests share: inputs, another k (in its own buffer), a plan, its
 * buffers, an output, and the double reference of the gradients. */
typedef struct saved_case {
    test_inputs in, other;
    mhla_plan *plan;
    bufs b;
    cl_mem out, k2;
    double *ref[4];
    size_t n[4];
} saved_case;

static void saved_case_make(mhla_context *ctx, const mhla_config *c, uint32_t seed, saved_case *s)
{
    cl_int err;
    assert_int_equal(test_inputs_make(c, TEST_INIT_RANDOM, seed, &s->in), MHLA_OK);
    assert_int_equal(test_inputs_make(c, TEST_INIT_RANDOM, seed + 1, &s->other), MHLA_OK);
    assert_int_equal(mhla_plan_create(ctx, c, &s->plan), MHLA_OK);
    bufs_make(ctx, s->plan, &s->in, &s->b);
    cl_context cl = mhla_context_cl_context(ctx);
    s->out = clCreateBuffer(cl, CL_MEM_READ_WRITE, s->in.nv * 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    s->k2 = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, s->other.nq * 4, s->other.k, &err);
    assert_int_equal(err, CL_SUCCESS);
    const size_t n[4] = {s->in.nq, s->in.nq, s->in.nv, s->in.nm};
    for (int j = 0; j < 4; ++j) {
        s->n[j] = n[j];
        s->ref[j] = malloc(n[j] * sizeof(double));
        assert_non_null(s->ref[j]);
    }
    assert_int_equal(mhla_reference_backward(c, s->in.q, s->in.k, s->in.v, s->in.mix, s->in.v, s->ref[0], s->ref[1],
                                             s->ref[2], s->ref[3]),
                     MHLA_OK);
}

static void saved_forward(saved_case *s, cl_mem k)
{
    assert_int_equal(mhla_forward(s->plan, s->b.q, k, s->b.v, s->b.mix, s->out, 0, NULL, NULL), MHLA_OK);
}

/* The backward of the case's own buffers, its gradients read into g. */
static void saved_backward(mhla_context *ctx, saved_case *s, float *g[4])
{
    const bufs *b = &s->b;
    assert_int_equal(mhla_backward(s->plan, b->q, b->k, b->v, b->mix, b->dout, b->dq, b->dk, b->dv, b->dmix, 0, NULL,
                                   NULL),
                     MHLA_OK);
    read_grads(ctx, b, &s->in, g);
}

/* A backward that recomputes; then, saving, a forward of the same buffers and the backward that
 * reuses its summaries; then a forward of another k and the backward of b.k, which must recompute. */
static void saved_sequence(mhla_context *ctx, saved_case *s, float *recomputed[4], float *reused[4],
                           float *after_other[4])
{
    saved_backward(ctx, s, recomputed);
    assert_int_equal(mhla_plan_save_for_backward(s->plan, 1), MHLA_OK);
    saved_forward(s, s->b.k);
    saved_backward(ctx, s, reused);
    saved_forward(s, s->k2);
    saved_backward(ctx, s, after_other);
}

static void saved_case_free(saved_case *s)
{
    for (int j = 0; j < 4; ++j)
        free(s->ref[j]);
    clReleaseMemObject(s->out);
    clReleaseMemObject(s->k2);
    bufs_free(&s->b);
    mhla_plan_destroy(s->plan);
    test_inputs_free(&s->in);
    test_inputs_free(&s->other);
}

static void test_backward_saved_summaries(void **state)
{
    mhla_context *ctx = *state;
    static const mhla_normalizer norms[3] = {MHLA_NORMALIZER_PAPER, MHLA_NORMALIZER_OFFICIAL, MHLA_NORMALIZER_NONE};
    for (int ni = 0; ni < 3; ++ni) {
        mhla_config c = grid_config(2, 8, 12, norms[ni], MHLA_FEATURE_RELU_EPS);
        saved_case s;
        saved_case_make(ctx, &c, 21, &s);
        const double tol = mhla_reference_backward_tolerance(MHLA_DTYPE_F32);
        float *recomputed[4], *reused[4], *after_other[4];
        saved_sequence(ctx, &s, recomputed, reused, after_other);
        for (int j = 0; j < 4; ++j) {
            const double e = finite_rel_err(reused[j], s.ref[j], s.n[j], __func__);
            if (!(e <= tol))
                fail_msg("saved summaries, normalizer %d, gradient %d: max_rel_err %g > %g", (int)norms[ni], j, e, tol);
            assert_memory_equal(reused[j], recomputed[j], s.n[j] * 4);
            assert_memory_equal(after_other[j], recomputed[j], s.n[j] * 4);
            free(recomputed[j]), free(reused[j]), free(after_other[j]);
        }
        assert_int_equal(mhla_plan_save_for_backward(NULL, 1), MHLA_ERR_INVALID_ARGUMENT);
        assert_int_equal(mhla_plan_save_for_backward(s.plan, 2), MHLA_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(mhla_context_message(ctx), "enable is 2"));
        saved_case_free(&s);
    }
    /* The GPU row, 1D at M = 4, blocks whole: the saved forward's read-out mixes the summaries itself
     * and keeps them unmixed, and the backward's read-outs mix S~ and dS themselves (bt_fuse): no
     * mixing launch in the whole sequence, and the same bits as a recomputation. A device that splits
     * the blocks (many compute units) runs the mixing instead. The plan would run its forward in one
     * launch (tl_one), which writes no summaries: not while it keeps them. */
    if (test_config_thinned())
        return;
    mhla_context *gctx = limited_context("wg=256,local=32K", "row=gpu,tl_one=65536");
    assert_int_equal(mhla_context_profile_kernels(gctx, 1), MHLA_OK);
    mhla_config c = grid_config(1, 16, 8, MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS);
    saved_case s;
    saved_case_make(gctx, &c, 25, &s);
    /* Saving from the plan's first forward: its workspace holds the tests' poison (NaN) until then,
     * so a forward that left the summaries unwritten (the one-launch form) fails here. */
    float *first[4];
    assert_int_equal(mhla_plan_save_for_backward(s.plan, 1), MHLA_OK);
    saved_forward(&s, s.b.k);
    saved_backward(gctx, &s, first);
    assert_int_equal(mhla_plan_save_for_backward(s.plan, 0), MHLA_OK);
    for (int j = 0; j < 4; ++j) {
        const double e = finite_rel_err(first[j], s.ref[j], s.n[j], __func__);
        if (!(e <= mhla_reference_backward_tolerance(MHLA_DTYPE_F32)))
            fail_msg("saved from the first forward, GPU row, tl_one, gradient %d: max_rel_err %g", j, e);
        free(first[j]);
    }
    float *recomputed[4], *reused[4], *after_other[4];
    saved_sequence(gctx, &s, recomputed, reused, after_other);
    for (int j = 0; j < 4; ++j) {
        const double e = finite_rel_err(reused[j], s.ref[j], s.n[j], __func__);
        if (!(e <= mhla_reference_backward_tolerance(MHLA_DTYPE_F32)))
            fail_msg("saved summaries, GPU row, gradient %d: max_rel_err %g", j, e);
        assert_memory_equal(reused[j], recomputed[j], s.n[j] * 4);
        assert_memory_equal(after_other[j], recomputed[j], s.n[j] * 4);
        free(recomputed[j]), free(reused[j]), free(after_other[j]);
    }
    char desc[1024], times[2048];
    assert_int_equal(mhla_plan_tuning(s.plan, desc, sizeof desc), MHLA_OK);
    assert_int_equal(mhla_context_kernel_times(gctx, times, sizeof times), MHLA_OK);
    if (!strstr(desc, "; one launch (tl_one 65536") || !strstr(desc, "(not while the summaries are kept)"))
        fail_msg("saved summaries, GPU row, tl_one: the plan does not say it keeps its stages: %s", desc);
    const int whole = strstr(desc, " 1 segment(s) per block") != NULL;
    if (whole != (strstr(desc, "mixed inside the read-out") && !strstr(times, "mixing_splits ")))
        fail_msg("saved summaries, GPU row, M = 4: the forward's and the backward's read-outs %s mix the summaries "
                 "themselves:\n%s\n%s", whole ? "do not" : "wrongly", desc, times);
    saved_case_free(&s);
    mhla_context_destroy(gctx);
}

/* The causal mode's saved summaries: after a forward with mhla_plan_save_for_backward,
 * the backward of the same buffers copies the forward's chunk summaries and prefix mixtures
 * instead of recomputing them (two batch elements, a partial last chunk, with and without the paper
 * normalizer's key sums); its gradients within the tolerance of docs/spec.md "Accuracy the tests hold"
 * of the reference. Proof that the copy is what ran: k's contents replaced behind the same buffer after
 * the forward, the backward still differs from a recomputation with the new k (its S and P are the old
 * k's); a forward of another k buffer makes the backward recompute (bit-identical to a
 * recomputation). */
static void test_backward_saved_summaries_causal(void **state)
{
    mhla_context *ctx = *state;
    cl_command_queue queue = mhla_context_queue(ctx);
    static const mhla_normalizer norms[2] = {MHLA_NORMALIZER_NONE, MHLA_NORMALIZER_PAPER};
    for (int ni = 0; ni < 2; ++ni) {
        mhla_config c = config_causal(2, 3, 77, 16, 8, 12);
        c.normalizer = norms[ni];
        c.mixing_rows = 5;
        saved_case s;
        saved_case_make(ctx, &c, 31, &s);
        const double tol = mhla_reference_backward_tolerance(MHLA_DTYPE_F32);
        float *recomputed[4], *reused[4], *after_other[4], *stale[4], *fresh[4];
        saved_sequence(ctx, &s, recomputed, reused, after_other);
        /* the saved copy is used: forward of in.k, then b.k holds other.k */
        saved_forward(&s, s.b.k);
        assert_int_equal(clEnqueueWriteBuffer(queue, s.b.k, CL_TRUE, 0, s.in.nq * 4, s.other.k, 0, NULL, NULL),
                         CL_SUCCESS);
        saved_backward(ctx, &s, stale);
        assert_int_equal(mhla_plan_save_for_backward(s.plan, 0), MHLA_OK);
        saved_backward(ctx, &s, fresh);
        for (int j = 0; j < 4; ++j) {
            char what[96];
            snprintf(what, sizeof what, "causal saved summaries, %s, gradient %d", mhla_normalizer_name(c.normalizer),
                     j);
            expect_within(reused[j], s.ref[j], s.n[j], tol, what);
            assert_memory_equal(after_other[j], recomputed[j], s.n[j] * 4);
            free(recomputed[j]), free(reused[j]), free(after_other[j]);
        }
        /* dv = dS^T k~ + ... reads k; dq reads P: from the old k, so it differs from the fresh one */
        if (memcmp(stale[0], fresh[0], s.n[0] * 4) == 0)
            fail_msg("causal saved summaries, %s: the backward after the forward recomputed them (dq the same "
                     "with the old k's prefix mixtures as with the new k's)",
                     mhla_normalizer_name(c.normalizer));
        for (int j = 0; j < 4; ++j)
            free(stale[j]), free(fresh[j]);
        saved_case_free(&s);
    }
}

/* The tiled backward (the GPU rows: backward_tiled.cl's read-outs, summary_tiled_weighted, the
 * segments added in mixing_splits) on this device under the limits of the devices it is for
 * (MHLA_LIMITS: its groups are fitted to what the context holds), as test_forward's
 * test_tiled_limits does the forward. A phone's 64-wide groups and 16 KiB: two long blocks in
 * segments (G's added by the mixing, which also writes G whole for dMc), 4 dimensions per local
 * tile (bt_dc=4: the loop over several tiles at head dimensions 16 x 8); 128-wide groups and 32 KiB: odd head dimensions in
 * [B,H,N,D] (rows of no whole float4, several token tiles a block; the gradient summaries in 8-row
 * register tiles, tl_rr=8, past Dk 7). The sizes are those of other
 * cases and of test_forward's (one build of the forward's kernels serves both). Grouped heads and
 * cross-attention: test_cross's test_tiled_limits; 256 to 1024 work-items and 48 KiB: the GPU
 * row's own fit (backward_gpu_row). And the causal form's prefix and suffix mixtures
 * (causal_prefix_tiled.cl) over 38 chunks at 64-wide groups, and its tiled read-outs
 * (backward_causal_tiled.cl): 4 groups of 16 tokens a chunk in 8-token pair tiles with Dv 18 (rows
 * of no whole float4) and the paper normalizer's r_t terms in [B,H,N,D] at 128 and 32 KiB, dq, dk
 * and dv in one launch there (bct_fuse: bc_dqkv_tiled, its widths at run time, Dk 24 and Dv 18 in
 * the same arrays), and
 * chunks of 128 in 64-token groups at 1024 and 48 KiB, each with a short last chunk. dMc's products
 * in work-group tiles (bwd_dmixing_tiled): the 38 chunks' rows in 32 x 32 tiles at 64 work-items (a
 * partial tile, a zero tile above the diagonal, two pieces of the rows), the non-causal rows of 252
 * floats (a partial tile of x-values). The official normalizer's terms at odd head dimensions, 64
 * work-items and 16 KiB. Each plan must say that it ran tiled. Where a non-causal plan's blocks are
 * whole and few (M within the GPU row's bt_fuse, 4) the read-outs mix S~ and dS themselves: no
 * mixing_splits launch (Dk 7, Dv 5, M = 3); the two long blocks' segments and the official
 * normalizer keep it, and so does that configuration again with no re-reads allowed (fuse_mb 0). */
static void test_backward_tiled_limits(void **state)
{
    (void)state;
    static const char *const limits[] = {"wg=64,local=16K", "wg=128,local=32K", "wg=64,local=16K",
                                         "wg=128,local=32K", "wg=1024,local=48K", "wg=64,local=16K"};
    static const char *const tunings[] = {"row=gpu,bt_dc=4", "row=gpu,tl_rr=8", "row=gpu", "row=gpu,bc_sq=16,bc_bk=8,bct_fuse=1",
                                          "row=gpu", "row=gpu"};
    mhla_config cfgs[6];
    cfgs[0] = config_1d(1, 2, 512, 2, 16, 8);
    cfgs[0].feature_map = MHLA_FEATURE_RELU_EPS;
    cfgs[1] = config_1d(2, 3, 300, 3, 7, 5);
    cfgs[1].layout = MHLA_LAYOUT_BHND;
    /* the causal form's prefix and suffix mixtures as tiled products (causal_prefix_tiled.cl):
     * 38 chunks, two tiles of rows, several of earlier and later chunks */
    cfgs[2] = config_causal(1, 2, 300, 8, 16, 8);
    cfgs[2].normalizer = MHLA_NORMALIZER_PAPER;
    cfgs[3] = config_causal(2, 2, 150, 64, 24, 18);
    cfgs[3].normalizer = MHLA_NORMALIZER_PAPER;
    cfgs[3].layout = MHLA_LAYOUT_BHND;
    cfgs[3].feature_map = MHLA_FEATURE_ELU1;
    cfgs[4] = config_causal(1, 2, 200, 128, 32, 32);
    /* the official normalizer: its denominators read by the tiled dq, R = Mc^T r by mixing_splits,
     * dS's z column and dq's R z term in one pass (bwd_official_dz_part), dMc's dots term */
    cfgs[5] = config_1d(2, 3, 300, 3, 7, 5);
    cfgs[5].normalizer = MHLA_NORMALIZER_OFFICIAL;
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; ++c) {
        mhla_context *ctx = limited_context(limits[c], tunings[c]);
        assert_int_equal(mhla_context_profile_kernels(ctx, 1), MHLA_OK);
        set_test_eps(&cfgs[c]); /* eps and feature_eps that move the gradients */
        char label[160];
        snprintf(label, sizeof label, "MHLA_LIMITS=%s %s, tiled %sbackward, Dk %lld Dv %lld", limits[c], tunings[c],
                 cfgs[c].causal ? "causal " : "", (long long)cfgs[c].dk, (long long)cfgs[c].dv);
        last_tuning[0] = 0;
        expect_backward(ctx, &cfgs[c], NULL, 0, label, (uint32_t)(41 + c));
        const char *tiled = cfgs[c].causal ? "prefix tiled" : "; backward: tiled read-outs";
        if (last_tuning[0] && (!strstr(last_tuning, tiled) || !strstr(last_tuning, ", dMc in ") ||
                               (cfgs[c].causal && !strstr(last_tuning, "; backward: tiled causal read-outs")) ||
                               (strstr(tunings[c], "bct_fuse=1") && !strstr(last_tuning, " in one launch"))))
            fail_msg("%s: the backward is not tiled: %s", label, last_tuning); /* (empty: thinned) */
        char times[2048];
        assert_int_equal(mhla_context_kernel_times(ctx, times, sizeof times), MHLA_OK);
        const int fuses = strstr(last_tuning, " 1 segment(s) per block") && cfgs[c].block_t <= 4 &&
                          cfgs[c].normalizer != MHLA_NORMALIZER_OFFICIAL;
        if (last_tuning[0] && !cfgs[c].causal && fuses != !strstr(times, "mixing_splits "))
            fail_msg("%s: the read-outs %s mix the summaries themselves:\n%s\n%s", label, fuses ? "do not" : "wrongly",
                     last_tuning, times);
        if (last_tuning[0] && !cfgs[c].causal && fuses &&
            (!strstr(last_tuning, ", S~ for dq mixed inside the read-out (bt_fuse 4: ") ||
             !strstr(last_tuning, ", dS for dk and dv mixed inside the read-out (bt_fuse 4: ")))
            fail_msg("%s: the plan does not say that both read-outs mix, and what they read again: %s", label,
                     last_tuning);
        mhla_context_destroy(ctx);
    }
    /* Configuration 1 again with no re-reads allowed (fuse_mb 0): its read-outs, which mixed S~ and
     * dS above, leave the mixing to mixing_splits, and the gradients hold. */
    mhla_context *ctx = limited_context(limits[1], "row=gpu,tl_rr=8,fuse_mb=0");
    assert_int_equal(mhla_context_profile_kernels(ctx, 1), MHLA_OK);
    char label[160];
    snprintf(label, sizeof label, "MHLA_LIMITS=%s row=gpu,tl_rr=8,fuse_mb=0, tiled backward, Dk 7 Dv 5", limits[1]);
    last_tuning[0] = 0;
    expect_backward(ctx, &cfgs[1], NULL, 0, label, 42);
    char times[2048];
    assert_int_equal(mhla_context_kernel_times(ctx, times, sizeof times), MHLA_OK);
    if (last_tuning[0] && (!strstr(last_tuning, " 1 segment(s) per block") || !strstr(times, "mixing_splits ")))
        fail_msg("%s: the read-outs mix the summaries themselves, or the blocks are split:\n%s\n%s", label, last_tuning,
                 times);
    if (last_tuning[0] && (!strstr(last_tuning, ", S~ for dq mixed apart (inside the read-out: ") ||
                           !strstr(last_tuning, " MiB read again, over fuse_mb 0), dS for dk and dv mixed apart")))
        fail_msg("%s: the plan does not say that fuse_mb keeps the mixing apart: %s", label, last_tuning);
    mhla_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_non_causal),
        cmocka_unit_test(test_backward_feature_maps_and_shapes),
        cmocka_unit_test(test_backward_storage),
        cmocka_unit_test(test_backward_causal),
        cmocka_unit_test(test_backward_eps_non_causal),
        cmocka_unit_test(test_backward_eps_causal),
        cmocka_unit_test(test_backward_exact_zeros),
        cmocka_unit_test(test_backward_deterministic),
        cmocka_unit_test(test_backward_waits_for_events),
        cmocka_unit_test(test_backward_saved_summaries),
        cmocka_unit_test(test_backward_saved_summaries_causal),
        cmocka_unit_test(test_backward_tiled_limits),
    };
    return run_group("backward", tests, context_setup, context_teardown);
}
