/* Causal MHLA, chunk form, on the device against the double-precision reference: chunk sizes
 * around N (N < C, N % C != 0), Dk != Dv, both normalizers, every feature map and layout, a larger
 * Mc than the sequence needs, exact causality (NaN/Inf in later tokens), and plan errors. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Device forward vs reference within the f32 tolerance of docs/spec.md "Accuracy the tests hold";
 * returns the error. */
static double check_close(mhla_context *ctx, const mhla_config *cfg, mhla_init_kind init, uint32_t seed,
                          const char *label)
{
    double err = 0.0;
    mhla_status st = run_against_reference(ctx, cfg, init, seed, &err, NULL, NULL);
    if (st != MHLA_OK)
        fail_msg("%s: %s: %s", label, mhla_status_name(st), mhla_context_message(ctx));
    const double tol = mhla_reference_tolerance(cfg->dtype, cfg->seq_t);
    if (!(err <= tol))
        fail_msg("%s: max_rel_err %.3g > %.1g", label, err, tol);
    return err;
}

/* check_close, unless MHLA_TEST_THIN leaves this configuration out (0 then). */
static double expect_close(mhla_context *ctx, const mhla_config *cfg, mhla_init_kind init, uint32_t seed,
                           const char *label)
{
    return test_config_thinned() ? 0.0 : check_close(ctx, cfg, init, seed, label);
}

/* Both normalizers, every feature map and both layouts, each pair of them at least once (8 of the
 * 16 combinations: every combination would compile twice the kernels for nothing more), B = 2,
 * H = 3, Dk != Dv, N = 150 in chunks of 64 (the last one partial), the default scale Dk^-0.5 and an
 * explicit one, eps and feature_eps far from their defaults (expect_eps_visible). */
static void test_modes_matrix(void **state)
{
    mhla_context *ctx = *state;
    const struct {
        mhla_normalizer norm;
        mhla_feature_map fm;
        mhla_layout layout;
    } modes[] = {
        {MHLA_NORMALIZER_NONE, MHLA_FEATURE_RELU, MHLA_LAYOUT_BNHD},
        {MHLA_NORMALIZER_NONE, MHLA_FEATURE_RELU_EPS, MHLA_LAYOUT_BHND},
        {MHLA_NORMALIZER_NONE, MHLA_FEATURE_ELU1, MHLA_LAYOUT_BNHD},
        {MHLA_NORMALIZER_NONE, MHLA_FEATURE_NONE, MHLA_LAYOUT_BHND},
        {MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU, MHLA_LAYOUT_BHND},
        {MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS, MHLA_LAYOUT_BNHD},
        {MHLA_NORMALIZER_PAPER, MHLA_FEATURE_ELU1, MHLA_LAYOUT_BHND},
        {MHLA_NORMALIZER_PAPER, MHLA_FEATURE_NONE, MHLA_LAYOUT_BNHD},
    };
    double worst = 0.0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; ++i) {
        mhla_config cfg = config_causal(2, 3, 150, 64, 24, 40);
        cfg.normalizer = modes[i].norm;
        cfg.feature_map = modes[i].fm;
        cfg.layout = modes[i].layout;
        cfg.scale = i % 3 == 0 ? 0.3f : 0.0f;
        set_test_eps(&cfg);
        expect_eps_visible(&cfg, (uint32_t)i, 10.0);
        char label[128];
        snprintf(label, sizeof label, "%s/%s/%s", mhla_normalizer_name(cfg.normalizer),
                 mhla_feature_map_name(cfg.feature_map), mhla_layout_name(cfg.layout));
        const double err = expect_close(ctx, &cfg, TEST_INIT_RANDOM, (uint32_t)i, label);
        worst = err > worst ? err : worst;
    }
    print_message("causal modes matrix: worst max_rel_err vs reference %.3g\n", worst);
}

/* C in {16, 64, 128} against N < C, N = a multiple of C, and N not a multiple; C = 1 (every token
 * its own chunk) and a chunk far larger than any local-memory tile (C = 1000). */
static void test_chunk_sizes(void **state)
{
    mhla_context *ctx = *state;
    const int64_t chunks[] = {16, 64, 128};
    double worst = 0.0;
    for (size_t c = 0; c < 3; ++c) {
        const int64_t C = chunks[c];
        const int64_t ns[] = {C / 2 + 3, 2 * C, 2 * C + 37, 300};
        for (size_t i = 0; i < 4; ++i)
            for (int paper = 0; paper <= 1; ++paper) {
                mhla_config cfg = config_causal(1, 2, ns[i], C, 24, 40); /* the modes' kernels */
                cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
                char label[96];
                snprintf(label, sizeof label, "C=%lld N=%lld %s", (long long)C, (long long)ns[i],
                         paper ? "paper" : "none");
                const double err = expect_close(ctx, &cfg, c == 1 ? MHLA_INIT_CAUSAL_UNIFORM : TEST_INIT_RANDOM,
                                                (uint32_t)(c * 10 + i * 2 + (size_t)paper), label);
                worst = err > worst ? err : worst;
            }
    }
    mhla_config one = config_causal(1, 1, 20, 1, 8, 8);
    worst = fmax(worst, expect_close(ctx, &one, TEST_INIT_RANDOM, 50, "C=1 N=20"));
    mhla_config big = config_causal(1, 1, 1500, 1000, 16, 16);
    big.normalizer = MHLA_NORMALIZER_PAPER;
    worst = fmax(worst, expect_close(ctx, &big, MHLA_INIT_CAUSAL_UNIFORM, 51, "C=1000 N=1500 paper"));
    print_message("causal chunk sizes: worst max_rel_err vs reference %.3g\n", worst);
}

/* Head dimensions: tiny, unequal both ways, and the largest supported (several output columns
 * per work-item). */
static void test_head_dims(void **state)
{
    mhla_context *ctx = *state;
    const int64_t dims[][2] = {{1, 1}, {5, 3}, {80, 24}, {24, 80}, {128, 128}, {256, 256}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
        mhla_config cfg = config_causal(1, 2, 100, 32, dims[i][0], dims[i][1]);
        cfg.normalizer = i % 2 ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        char label[64];
        snprintf(label, sizeof label, "Dk=%lld Dv=%lld", (long long)dims[i][0], (long long)dims[i][1]);
        expect_close(ctx, &cfg, TEST_INIT_RANDOM, (uint32_t)(60 + i), label);
    }
}

/* 4096 tokens (64 chunks of 64), the released model's default shape per head: 1e-5 (docs/spec.md
 * "Accuracy the tests hold"). */
static void test_long_sequence(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_causal(1, 2, 4096, 64, 64, 64);
    const double err = expect_close(ctx, &cfg, MHLA_INIT_CAUSAL_UNIFORM, 70, "N=4096 C=64");
    print_message("causal N=4096 C=64: max_rel_err vs reference %.3g\n", err);
}

/* A model trained with a larger Mc (here 32 x 32) run on a shorter sequence uses the leading
 * ceil(N/C) block: with everything outside its lower triangle NaN, the output equals (bit for bit)
 * that of the leading block given alone, and matches the reference. */
static void test_larger_mixing(void **state)
{
    mhla_context *ctx = *state;
    const int64_t R = 32, N = 300, C = 64, M = 5;
    mhla_config cfg = config_causal(2, 2, N, C, 24, 40);
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    cfg.mixing_rows = R;
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 80, &in), MHLA_OK);
    assert_int_equal(in.rows, R);
    for (int64_t i = M; i < R; ++i)
        for (int64_t j = 0; j < R; ++j)
            in.mix[i * R + j] = NAN; /* rows the sequence never reaches */
    float lead[25];
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < M; ++j)
            lead[i * M + j] = in.mix[i * R + j];
    float *out = nan_floats(in.nv), *out_lead = nan_floats(in.nv);
    double *ref = malloc(in.nv * sizeof *ref);
    assert_non_null(out), assert_non_null(out_lead), assert_non_null(ref);
    mhla_plan *plan = NULL, *plan_lead = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_MIXING), (size_t)(R * R * 4));
    assert_int_equal(mhla_forward_host(plan, in.q, in.k, in.v, in.mix, out), MHLA_OK);
    mhla_config cfg_lead = cfg;
    cfg_lead.mixing_rows = 0; /* = ceil(N/C) */
    assert_int_equal(mhla_plan_create(ctx, &cfg_lead, &plan_lead), MHLA_OK);
    assert_int_equal(mhla_plan_config(plan_lead)->mixing_rows, M);
    assert_int_equal(mhla_forward_host(plan_lead, in.q, in.k, in.v, lead, out_lead), MHLA_OK);
    assert_memory_equal(out, out_lead, in.nv * sizeof *out);
    assert_int_equal(mhla_reference_forward(&cfg, in.q, in.k, in.v, in.mix, ref), MHLA_OK);
    const double err = finite_rel_err(out, ref, in.nv, __func__);
    if (!(err <= 1e-5))
        fail_msg("larger Mc: max_rel_err %.3g", err);
    mhla_plan_destroy(plan), mhla_plan_destroy(plan_lead);
    test_inputs_free(&in);
    free(out), free(out_lead), free(ref);
}

/* For each cut t: NaN in q and k and NaN or Inf in v from token t on (every head; batch 1) change
 * nothing before it: those outputs are finite and bit-equal to the plan's output for the clean
 * inputs (random, from `seed`), and every later one is NaN. */
static void expect_cuts_exact(mhla_plan *plan, const mhla_config *cfg, uint32_t seed, const int64_t *cuts,
                              size_t ncuts, const char *label)
{
    const int64_t N = cfg->seq_t, width = cfg->heads * cfg->dk, vwidth = cfg->heads * cfg->dv;
    test_inputs in;
    assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, seed, &in), MHLA_OK);
    float *base = nan_floats(in.no), *out = nan_floats(in.no);
    assert_non_null(base), assert_non_null(out);
    assert_int_equal(mhla_forward_host(plan, in.q, in.k, in.v, in.mix, base), MHLA_OK);
    for (size_t c = 0; c < ncuts; ++c) {
        const int64_t cut = cuts[c];
        test_inputs bad;
        assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, seed, &bad), MHLA_OK);
        for (int64_t t = cut; t < N; ++t) {
            for (int64_t x = 0; x < width; ++x)
                bad.q[t * width + x] = bad.k[t * width + x] = NAN;
            for (int64_t x = 0; x < vwidth; ++x)
                bad.v[t * vwidth + x] = x % 3 ? NAN : INFINITY;
        }
        assert_int_equal(mhla_forward_host(plan, bad.q, bad.k, bad.v, bad.mix, out), MHLA_OK);
        const size_t before = (size_t)(cut * vwidth);
        for (size_t x = 0; x < in.no; ++x)
            if (x < before ? !(isfinite(out[x]) && memcmp(&out[x], &base[x], sizeof *out) == 0) : !isnan(out[x]))
                fail_msg("%s, NaN/Inf from token %lld on: output %zu (token %lld) is %g, %s", label, (long long)cut,
                         x, (long long)(x / (size_t)vwidth), out[x], x < before ? "not the clean run's" : "not NaN");
        test_inputs_free(&bad);
    }
    free(base), free(out);
    test_inputs_free(&in);
}

/* Exact causality, without the reference: poisoning every token from t on (NaN in q, k and v,
 * Inf in some v) leaves the outputs of tokens before t bit for bit unchanged, including the
 * tokens of t's own chunk and the prefix mixtures of later chunks never leak backwards. */
static void test_causality_exact(void **state)
{
    mhla_context *ctx = *state;
    const int64_t N = 200, C = 32, H = 2, D = 16;
    const int64_t cuts[] = {70, 96, 1}; /* mid-chunk, a chunk boundary, right after the first token */
    for (int paper = 0; paper <= 1; ++paper) {
        mhla_config cfg = config_causal(1, H, N, C, D, D);
        cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        mhla_plan *plan = NULL;
        assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
        expect_cuts_exact(plan, &cfg, 90, cuts, 3, paper ? "paper" : "none");
        mhla_plan_destroy(plan);
    }
}

/* The GPU rows' tiled chunk summaries, read-out and prefix (causal_summary_tiled.cl, causal_tiled.cl,
 * causal_prefix_tiled.cl) under the limits of the devices they are for (MHLA_LIMITS: groups and
 * arrays are fitted to what the context holds): a phone's 64-wide groups and 16 KiB at head
 * dimensions 64 (the group shrinks; the paper normalizer, and NaN and Inf from mid-chunk on),
 * 128-wide groups and 32 KiB with odd head dimensions and 78 chunks of 9 in
 * [B,H,N,D] (the prefix over several tiles of earlier chunks), 1024-wide groups and 48 KiB with
 * grouped key/value heads, and 16 KiB at head dimensions 256, where even 4 tokens x 4 keys do not
 * fit and the plan takes causal_output.cl (the summaries and the prefix stay tiled). */
static void test_tiled_limits(void **state)
{
    (void)state;
    static const char *const limits[] = {"wg=64,local=16K", "wg=128,local=32K", "wg=1024,local=48K", "wg=256,local=16K"};
    mhla_config cfgs[4];
    cfgs[0] = config_causal(1, 2, 200, 64, 64, 64);
    cfgs[0].normalizer = MHLA_NORMALIZER_PAPER;
    cfgs[1] = config_causal(2, 3, 700, 9, 24, 20); /* 78 chunks: the prefix's tiles of chunks, partial ones too */
    cfgs[1].layout = MHLA_LAYOUT_BHND;
    cfgs[1].feature_map = MHLA_FEATURE_ELU1;
    cfgs[2] = config_causal(1, 4, 300, 64, 32, 32);
    cfgs[2].kv_heads = 2;
    cfgs[2].normalizer = MHLA_NORMALIZER_PAPER;
    cfgs[3] = config_causal(1, 1, 40, 16, 256, 256);
    for (size_t c = 0; c < 4; ++c) {
        if (test_config_thinned()) /* (the portability runs: every plan built here is a compile) */
            continue;
        mhla_context *ctx = limited_context(limits[c], "row=gpu");
        mhla_plan *plan = NULL;
        char text[768], label[160];
        assert_int_equal(mhla_plan_create(ctx, &cfgs[c], &plan), MHLA_OK);
        assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
        const int tiled = strstr(text, "output tiled") != NULL; /* the prefix fits at 4 x 4 always */
        if (tiled != (c < 3) || !strstr(text, "prefix tiled") || !strstr(text, "summary tiled"))
            fail_msg("MHLA_LIMITS=%s, Dk %lld: %s", limits[c], (long long)cfgs[c].dk, text);
        snprintf(label, sizeof label, "MHLA_LIMITS=%s, %s, Dk %lld Dv %lld C %lld", limits[c],
                 tiled ? "tiled" : "untiled", (long long)cfgs[c].dk, (long long)cfgs[c].dv, (long long)cfgs[c].chunk);
        check_close(ctx, &cfgs[c], TEST_INIT_RANDOM, (uint32_t)(140 + c), label);
        if (c == 0) {
            const int64_t cut = 70; /* mid-chunk, mid-group */
            expect_cuts_exact(plan, &cfgs[c], 144, &cut, 1, label);
        }
        mhla_plan_destroy(plan);
        mhla_context_destroy(ctx);
    }
}

/* A NaN in one token's k reaches that token and every later one of the sequence, exactly as in
 * the reference; a NaN in q stays in its row. */
/* The GPU row with its prefix untiled (cp_ti=0, what a device without room for the prefix's tiles
 * takes): CLBlast's GEMM blocks of 32 earlier chunks (gemm_rows) where the library has CLBlast and the
 * device allows CLBlast's 64 work-items a group (else the prefix sums every chunk itself), past the
 * first block (44 chunks of 16, the last partial), beside the row's tiled summaries and read-out. */
static void test_gpu_row_untiled_prefix(void **state)
{
    (void)state;
    mhla_context *ctx = test_context();
    assert_int_equal(mhla_context_set_tuning(ctx, "row=gpu,cp_ti=0"), MHLA_OK);
    mhla_config cfg = config_causal(1, 2, 700, 16, 16, 12);
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    char text[768];
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    mhla_plan_destroy(plan);
    size_t wg = 0;
    assert_int_equal(clGetDeviceInfo(mhla_context_device(ctx), CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL),
                     CL_SUCCESS);
    int blocks = wg >= 64;
#ifndef MHLA_HAVE_CLBLAST
    blocks = 0;
#endif
    const char *want = blocks ? "CLBlast blocks of 32 chunks" : "CLBlast blocks of 0 chunks";
    if (!strstr(text, want) || !strstr(text, "output tiled"))
        fail_msg("row=gpu,cp_ti=0: the plan does not say '%s' beside its tiled read-out: %s", want, text);
    expect_close(ctx, &cfg, TEST_INIT_RANDOM, 77, "row=gpu,cp_ti=0, 44 chunks");
    mhla_context_destroy(ctx);
}

static void test_nan_propagates(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_causal(1, 1, 100, 16, 8, 8);
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 91, &in), MHLA_OK);
    in.q[10 * 8 + 3] = NAN;
    in.k[57 * 8 + 1] = NAN;
    float out[800];
    double ref[800];
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_forward_host(plan, in.q, in.k, in.v, in.mix, out), MHLA_OK);
    assert_int_equal(mhla_reference_forward(&cfg, in.q, in.k, in.v, in.mix, ref), MHLA_OK);
    for (int t = 0; t < 100; ++t)
        assert_int_equal(isnan(out[t * 8]) != 0, t == 10 || t >= 57);
    assert_true(mhla_max_rel_err(out, ref, 800) <= 1e-5);
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
}

/* mhla_plan_stage_times() splits a causal forward into its summaries, prefix mixtures and output. */
static void test_stage_times(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_causal(1, 2, 2100, 32, 16, 16); /* 66 chunks */
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, MHLA_INIT_CAUSAL_UNIFORM, 93, &in), MHLA_OK);
    float *out = nan_floats(in.nv);
    mhla_plan *plan = NULL;
    mhla_stage_times t;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_stage_times(plan, &t), MHLA_ERR_INVALID_ARGUMENT); /* not run yet */
    const double t0 = host_ms();
    assert_int_equal(mhla_forward_host(plan, in.q, in.k, in.v, in.mix, out), MHLA_OK);
    const double wall = host_ms() - t0;
    if (stage_times_or_unusable(plan, &t))
        check_stage_times(&t, wall);
    mhla_plan_destroy(plan);
    free(out);
    test_inputs_free(&in);
}

/* Same inputs, same bits. */
static void test_deterministic(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_causal(2, 2, 333, 64, 24, 40);
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    float *a = NULL, *b = NULL;
    double *ref = NULL, err = 0;
    assert_int_equal(run_against_reference(ctx, &cfg, TEST_INIT_RANDOM, 5, &err, &a, &ref), MHLA_OK);
    free(ref);
    assert_int_equal(run_against_reference(ctx, &cfg, TEST_INIT_RANDOM, 5, &err, &b, &ref), MHLA_OK);
    assert_memory_equal(a, b, mhla_config_tensor_elems(&cfg, MHLA_TENSOR_OUT) * sizeof(float));
    free(a), free(b), free(ref);
}

/* Odd tilings (TEST_ODD_TUNING) against the reference; a malformed override is refused. */
static void test_odd_tiling(void **state)
{
    mhla_context *ctx = *state;
    set_odd_tiling();
    double worst = 0.0;
    for (int paper = 0; paper <= 1; ++paper)
        for (int layout = 0; layout <= 1; ++layout) {
            mhla_config cfg = config_causal(2, 2, 300, 16, 24, 40); /* 19 chunks: 4 GEMM blocks after the first */
            cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
            cfg.layout = (mhla_layout)layout;
            cfg.mixing_rows = 23;
            worst = fmax(worst, expect_close(ctx, &cfg, TEST_INIT_RANDOM, (uint32_t)(95 + paper * 2 + layout), "odd tiling"));
        }
    mhla_config small = config_causal(1, 1, 7, 3, 5, 3);
    worst = fmax(worst, expect_close(ctx, &small, TEST_INIT_RANDOM, 99, "odd tiling, N=7 C=3"));
    setenv("MHLA_TUNING", "16,16,64", 1);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &small, &plan), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "MHLA_TUNING='16,16,64': expected name=value");
    setenv("MHLA_TUNING", "tq=8,chunk=3", 1);
    assert_int_equal(mhla_plan_create(ctx, &small, &plan), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "unknown field 'chunk'");
    restore_test_env(NULL);
    print_message("causal odd tiling: worst max_rel_err vs reference %.3g\n", worst);
}

/* Configurations the causal plan refuses, each naming the values. */
static void test_plan_errors(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = config_causal(1, 1, 300, 64, 8, 8);
    c.mixing_rows = 4;
    expect_plan_error(ctx, &c, MHLA_ERR_SEQUENCE_TOO_LONG,
                      "sequence of 300 tokens is longer than chunk * rows(Mc) = 64 * 4 = 256");
    char msg[256];
    assert_int_equal(mhla_config_check(&c, msg, sizeof msg), MHLA_ERR_SEQUENCE_TOO_LONG);
    c.mixing_rows = 5; /* exactly enough */
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    mhla_plan_destroy(plan);
    c = config_causal(1, 1, 100, 16, 8, 8);
    c.normalizer = MHLA_NORMALIZER_OFFICIAL;
    expect_plan_error(ctx, &c, MHLA_ERR_UNSUPPORTED, "official normalizer");
    c = config_causal(1, 1, 100, 0, 8, 8);
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "chunk must be >= 1, got 0");
    c.chunk = INT64_MAX; /* chunk - 1 added to a token count overflowed (tests/fuzz, fuzz_cu_seqlens) */
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "chunk must be <= 2147483647");
    c = config_causal(1, 1, 100, 16, 8, 8);
    c.seq_h = 2;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "causal mode is 1D");
    c = config_causal(2, 1, 100, 16, 8, 8);
    c.varlen = 1;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "batch must be 1, got 2");
    c = config_1d(1, 1, 16, 4, 8, 8);
    c.varlen = 1;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "varlen = 1 needs causal mode");
    c = config_causal(1, 1, 100, 16, 8, 8);
    c.varlen = 3;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "varlen must be 0 or 1, got 3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_modes_matrix),
        cmocka_unit_test(test_chunk_sizes),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_long_sequence),
        cmocka_unit_test(test_odd_tiling),
        cmocka_unit_test(test_larger_mixing),
        cmocka_unit_test(test_causality_exact),
        cmocka_unit_test(test_tiled_limits),
        cmocka_unit_test(test_gpu_row_untiled_prefix),
        cmocka_unit_test(test_nan_propagates),
        cmocka_unit_test(test_stage_times),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_plan_errors),
    };
    return run_group("causal", tests, context_setup, context_teardown);
}
