/* Packed variable-length causal batches on the device: against the reference, equal to running
 * each sequence alone, isolated from each other (NaN included), empty sequences, workspace growth,
 * events, and the cu_seqlens errors. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Lengths around C = 64: one token, one short of a chunk, one chunk, one over, and 300 (a
 * partial last chunk). */
static const int32_t cu_edges[] = {0, 1, 64, 128, 193, 493};

static mhla_config packed(int64_t total, int64_t heads, int64_t chunk, int64_t dk, int64_t dv)
{
    mhla_config c = config_causal(1, heads, total, chunk, dk, dv);
    c.varlen = 1;
    return c;
}

/* Device vs mhla_reference_forward_varlen; returns the error, keeps the output if asked. */
static double varlen_vs_reference(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu, size_t nseq,
                                  uint32_t seed, float **out_keep)
{
    test_inputs in;
    assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, seed, &in), MHLA_OK);
    float *out = nan_floats(in.nv);
    double *ref = malloc(in.nv * sizeof *ref);
    assert_non_null(out), assert_non_null(ref);
    mhla_plan *plan = NULL;
    mhla_status st = mhla_plan_create(ctx, cfg, &plan);
    if (st == MHLA_OK)
        st = mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, cu, nseq, out);
    if (st != MHLA_OK)
        fail_msg("%s: %s", mhla_status_name(st), mhla_context_message(ctx));
    assert_int_equal(mhla_reference_forward_varlen(cfg, in.q, in.k, in.v, in.mix, cu, nseq, ref), MHLA_OK);
    const double err = finite_rel_err(out, ref, in.nv, __func__);
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
    free(ref);
    if (out_keep)
        *out_keep = out;
    else
        free(out);
    return err;
}

/* Both normalizers x layouts, an Mc of 5 rows: enough for the longest sequence (300 tokens), far
 * from enough for the 493 packed tokens. BHND runs relu-eps, both with eps and feature_eps far from
 * their defaults (expect_eps_visible). */
static void test_varlen_vs_reference(void **state)
{
    mhla_context *ctx = *state;
    double worst = 0.0;
    for (int layout = 0; layout <= 1; ++layout)
        for (int paper = 0; paper <= 1; ++paper) {
            mhla_config cfg = packed(493, 2, 64, 16, 24);
            cfg.layout = (mhla_layout)layout;
            cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
            cfg.mixing_rows = 5;
            if (layout)
                cfg.feature_map = MHLA_FEATURE_RELU_EPS;
            set_test_eps(&cfg);
            expect_eps_visible(&cfg, (uint32_t)(layout * 2 + paper), 10.0);
            const double err = varlen_vs_reference(ctx, &cfg, cu_edges, 5, (uint32_t)(layout * 2 + paper), NULL);
            if (!(err <= 1e-5))
                fail_msg("varlen %s %s: max_rel_err %.3g", mhla_layout_name(cfg.layout),
                         mhla_normalizer_name(cfg.normalizer), err);
            worst = fmax(worst, err);
        }
    print_message("varlen {1,63,64,65,300}: worst max_rel_err vs reference %.3g\n", worst);
}

/* Odd tilings and prefix GEMM blocks of 4 chunks, per sequence (the 300-token one has 19 chunks). */
static void test_varlen_odd_tiling(void **state)
{
    mhla_context *ctx = *state;
    set_odd_tiling();
    for (int paper = 0; paper <= 1; ++paper) {
        mhla_config cfg = packed(493, 2, 16, 16, 24);
        cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        cfg.mixing_rows = 20;
        const double err = varlen_vs_reference(ctx, &cfg, cu_edges, 5, (uint32_t)(20 + paper), NULL);
        if (!(err <= 1e-5))
            fail_msg("varlen odd tiling %s: max_rel_err %.3g", mhla_normalizer_name(cfg.normalizer), err);
    }
    restore_test_env(NULL);
}

/* Packing changes nothing: every sequence's output equals, bit for bit, a plain causal plan run on
 * that sequence alone (same Mc). */
static void test_varlen_equals_separate_runs(void **state)
{
    mhla_context *ctx = *state;
    for (int layout = 0; layout <= 1; ++layout) {
        mhla_config cfg = packed(493, 2, 64, 16, 24);
        cfg.layout = (mhla_layout)layout;
        cfg.normalizer = MHLA_NORMALIZER_PAPER;
        cfg.mixing_rows = 5;
        test_inputs in;
        assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 7, &in), MHLA_OK);
        float *out = nan_floats(in.nv);
        assert_non_null(out);
        mhla_plan *plan = NULL;
        assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
        assert_int_equal(mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, cu_edges, 5, out), MHLA_OK);
        for (int s = 0; s < 5; ++s) {
            const int64_t t0 = cu_edges[s], n = cu_edges[s + 1] - cu_edges[s];
            mhla_config one = config_causal(1, 2, n, 64, 16, 24);
            one.layout = cfg.layout, one.normalizer = cfg.normalizer, one.mixing_rows = 5;
            float *q = malloc((size_t)(n * 2 * 16) * 4), *k = malloc((size_t)(n * 2 * 16) * 4);
            float *v = malloc((size_t)(n * 2 * 24) * 4), *o = nan_floats((size_t)(n * 2 * 24));
            float *packed_o = nan_floats((size_t)(n * 2 * 24));
            assert_non_null(q), assert_non_null(k), assert_non_null(v), assert_non_null(o), assert_non_null(packed_o);
            slice_tokens(&cfg, 493, 16, in.q, t0, n, q);
            slice_tokens(&cfg, 493, 16, in.k, t0, n, k);
            slice_tokens(&cfg, 493, 24, in.v, t0, n, v);
            slice_tokens(&cfg, 493, 24, out, t0, n, packed_o);
            mhla_plan *alone = NULL;
            assert_int_equal(mhla_plan_create(ctx, &one, &alone), MHLA_OK);
            assert_int_equal(mhla_forward_host(alone, q, k, v, in.mix, o), MHLA_OK);
            assert_memory_equal(o, packed_o, (size_t)(n * 2 * 24) * 4);
            mhla_plan_destroy(alone);
            free(q), free(k), free(v), free(o), free(packed_o);
        }
        mhla_plan_destroy(plan);
        test_inputs_free(&in);
        free(out);
    }
}

/* No token sees another sequence: NaN and Inf throughout sequence 2 leave the others bit for bit
 * unchanged (a summary of another sequence is never read, not even with a zero weight). */
static void test_varlen_isolation(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = packed(493, 2, 64, 16, 24);
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 8, &in), MHLA_OK);
    float *base = nan_floats(in.nv), *bad = nan_floats(in.nv);
    assert_non_null(base), assert_non_null(bad);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, cu_edges, 5, base), MHLA_OK);
    for (int64_t t = cu_edges[2]; t < cu_edges[3]; ++t)
        for (int64_t x = 0; x < 2 * 16; ++x)
            in.k[t * 32 + x] = NAN;
    for (int64_t t = cu_edges[2]; t < cu_edges[3]; ++t)
        for (int64_t x = 0; x < 2 * 24; ++x)
            in.v[t * 48 + x] = INFINITY;
    assert_int_equal(mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, cu_edges, 5, bad), MHLA_OK);
    const size_t lo = (size_t)cu_edges[2] * 48, hi = (size_t)cu_edges[3] * 48;
    assert_memory_equal(base, bad, lo * sizeof *base);
    assert_memory_equal(base + hi, bad + hi, (in.nv - hi) * sizeof *base);
    for (size_t x = lo; x < hi; ++x)
        assert_true(isnan(bad[x]));
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
    free(base), free(bad);
}

/* Empty sequences are accepted; 120 sequences of 1 to 3 tokens need 120 chunks where the plan
 * was sized for ceil(240 / 64) = 4: the workspace grows, and the result is right. */
static void test_varlen_empty_and_many(void **state)
{
    mhla_context *ctx = *state;
    const int32_t cu_empty[] = {0, 0, 5, 5, 70, 70};
    mhla_config cfg = packed(70, 1, 16, 8, 8);
    double err = varlen_vs_reference(ctx, &cfg, cu_empty, 5, 9, NULL);
    assert_true(err <= 1e-5);

    int32_t cu[121];
    cu[0] = 0;
    for (int s = 0; s < 120; ++s)
        cu[s + 1] = cu[s] + 1 + s % 3;
    assert_int_equal(cu[120], 240);
    cfg = packed(240, 2, 64, 8, 8);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    const size_t before = mhla_plan_workspace_size(plan);
    mhla_plan_destroy(plan);
    float *out = NULL;
    err = varlen_vs_reference(ctx, &cfg, cu, 120, 10, &out);
    if (!(err <= 1e-5))
        fail_msg("120 short sequences: max_rel_err %.3g", err);
    free(out);
    /* the growth itself, on one plan */
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 10, &in), MHLA_OK);
    out = nan_floats(in.nv);
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, cu, 120, out), MHLA_OK);
    assert_true(mhla_plan_workspace_size(plan) > before);
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
    free(out);
}

/* The device call waits for the caller's event and does not block on it. */
static void test_varlen_events(void **state)
{
    mhla_context *ctx = *state;
    if (user_event_gates_hang(ctx))
        test_skip();
    cl_context clctx = mhla_context_cl_context(ctx);
    mhla_config cfg = packed(493, 1, 64, 8, 8);
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 11, &in), MHLA_OK);
    float *out = nan_floats(in.nv);
    double *ref = malloc(in.nv * sizeof *ref);
    cl_int err;
    cl_mem bq = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in.nq * 4, in.q, &err);
    cl_mem bk = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in.nq * 4, in.k, &err);
    cl_mem bv = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in.nv * 4, in.v, &err);
    cl_mem bm = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in.nm * 4, in.mix, &err);
    cl_mem bo = nan_buffer(ctx, in.nv * 4);
    assert_int_equal(err, CL_SUCCESS);
    cl_event gate = clCreateUserEvent(clctx, &err), done = NULL;
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_forward_varlen(plan, bq, bk, bv, bm, cu_edges, 5, bo, 1, &gate, &done), MHLA_OK);
    cl_int status = CL_COMPLETE;
    assert_int_equal(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL),
                     CL_SUCCESS);
    assert_true(status != CL_COMPLETE);
    assert_int_equal(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    assert_int_equal(clEnqueueReadBuffer(mhla_context_queue(ctx), bo, CL_TRUE, 0, in.nv * 4, out, 1, &done, NULL),
                     CL_SUCCESS);
    assert_int_equal(mhla_reference_forward_varlen(&cfg, in.q, in.k, in.v, in.mix, cu_edges, 5, ref), MHLA_OK);
    assert_true(finite_rel_err(out, ref, in.nv, __func__) <= 1e-5);
    mhla_stage_times times;
    if (stage_times_or_unusable(plan, &times))
        assert_true(times.output_ms > 0 && times.total_ms >= times.output_ms);
    clReleaseEvent(gate), clReleaseEvent(done);
    cl_mem mems[] = {bq, bk, bv, bm, bo};
    for (int i = 0; i < 5; ++i)
        clReleaseMemObject(mems[i]);
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
    free(out), free(ref);
}

/* Bad offsets, each named with its index and values, and plan/call mismatches. */
static void test_varlen_errors(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = packed(493, 1, 64, 8, 8);
    cfg.mixing_rows = 4; /* 256 tokens per sequence at most */
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, MHLA_INIT_CAUSAL_UNIFORM, 12, &in), MHLA_OK);
    float *out = nan_floats(in.nv);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    struct {
        int32_t cu[6];
        size_t n;
        mhla_status want;
        const char *text;
    } cases[] = {
        {{1, 64, 128, 193, 493}, 4, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[0] must be 0, got 1"},
        {{0, 64, 60, 193, 493}, 4, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[2] = 60 < cu_seqlens[1] = 64"},
        {{0, 64, 128, 256, 490}, 4, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[4] = 490 must equal the plan's total of 493"},
        {{0, 64, 128, 256, 500}, 4, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[4] = 500 must equal"},
        {{0, 193, 493}, 2, MHLA_ERR_SEQUENCE_TOO_LONG,
         "sequence 1 (cu_seqlens[1] = 193 .. cu_seqlens[2] = 493) of 300 tokens is longer than chunk * rows(Mc) = "
         "64 * 4 = 256"},
        {{0}, 0, MHLA_ERR_INVALID_ARGUMENT, "num_seqs must be >= 1, got 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_status st = mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, cases[i].cu, cases[i].n, out);
        if (st != cases[i].want)
            fail_msg("case %zu: expected %s, got %s: %s", i, mhla_status_name(cases[i].want), mhla_status_name(st),
                     mhla_context_message(ctx));
        assert_message_has(ctx, cases[i].text);
    }
    assert_int_equal(mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, NULL, 4, out), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "cu_seqlens pointer is NULL");
    /* a varlen plan is not for mhla_forward, a plain causal plan not for mhla_forward_varlen */
    assert_int_equal(mhla_forward_host(plan, in.q, in.k, in.v, in.mix, out), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "use mhla_forward_varlen()");
    const int32_t ok[] = {0, 240, 493};
    assert_int_equal(mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, ok, 2, out), MHLA_OK);
    mhla_plan_destroy(plan);
    mhla_config plain = config_causal(1, 1, 493, 64, 8, 8); /* an 8 x 8 Mc */
    float mix8[64] = {0};
    assert_int_equal(mhla_plan_create(ctx, &plain, &plan), MHLA_OK);
    assert_int_equal(mhla_forward_varlen_host(plan, in.q, in.k, in.v, mix8, ok, 2, out), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "not created for packed sequences");
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varlen_vs_reference),
        cmocka_unit_test(test_varlen_odd_tiling),
        cmocka_unit_test(test_varlen_equals_separate_runs),
        cmocka_unit_test(test_varlen_isolation),
        cmocka_unit_test(test_varlen_empty_and_many),
        cmocka_unit_test(test_varlen_events),
        cmocka_unit_test(test_varlen_errors),
    };
    return run_group("varlen", tests, context_setup, context_teardown);
}
