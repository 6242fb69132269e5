/* Cross-attention and grouped key/value heads (docs/spec.md "Cross-attention and grouped key/value
 * heads") on the device against the double-precision reference: the forward and the backward
 * (dq, dk, dv summed over each key/value head's query heads, dMc of M x M_kv), with N_kv below and
 * above N_q, M_kv = 1, H_kv = 1 and H_kv = H / 2, both layouts, f16 and bf16 storage, the device's
 * own tuning row and the GPU row (its tiled kernels), NaN-filled outputs; grouped
 * heads in the causal chunk form, a varlen batch and the decoder (its state H_kv heads' summaries);
 * the tensor sizes a plan asks for; and the refusals, each naming its field. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A configuration: queries on (qt, qh, qw) in (bt, bh, bw) blocks, keys and values on (kt, kh, kw)
 * in (kbt, kbh, kbw) (all 0: the queries' grid), H heads of which H_kv key/value heads. */
typedef struct cross_case {
    const char *name;
    int64_t batch, heads, kv_heads, dk, dv;
    int64_t q[3], qb[3], kv[3], kvb[3];
    mhla_layout layout;
    mhla_normalizer normalizer;
    mhla_feature_map fm;
} cross_case;

/* Dk 16, Dv 8 but for one case (uneven dims): each new pair of head dimensions is a new build of
 * every stage's kernels, the most of this program's time on PoCL. */
static const cross_case cases[] = {
    {"gqa 4/2 1D", 2, 4, 2, 16, 8, {48, 1, 1}, {3, 1, 1}, {0, 0, 0}, {0, 0, 0}, MHLA_LAYOUT_BNHD,
     MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS},
    {"mqa 4/1 2D", 1, 4, 1, 16, 8, {1, 8, 8}, {1, 2, 2}, {0, 0, 0}, {0, 0, 0}, MHLA_LAYOUT_BHND,
     MHLA_NORMALIZER_NONE, MHLA_FEATURE_ELU1},
    {"cross Nkv < Nq", 1, 2, 0, 16, 8, {1, 8, 8}, {1, 2, 2}, {24, 1, 1}, {3, 1, 1}, MHLA_LAYOUT_BNHD,
     MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS},
    {"cross Nkv > Nq", 2, 2, 0, 8, 12, {16, 1, 1}, {2, 1, 1}, {1, 6, 8}, {1, 3, 2}, MHLA_LAYOUT_BHND,
     MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU},
    {"cross Mkv = 1", 1, 2, 0, 16, 8, {2, 4, 4}, {2, 2, 1}, {20, 1, 1}, {1, 1, 1}, MHLA_LAYOUT_BNHD,
     MHLA_NORMALIZER_NONE, MHLA_FEATURE_RELU_EPS},
    {"gqa 4/2 official", 2, 4, 2, 16, 8, {1, 8, 6}, {1, 2, 3}, {0, 0, 0}, {0, 0, 0}, MHLA_LAYOUT_BHND,
     MHLA_NORMALIZER_OFFICIAL, MHLA_FEATURE_RELU_EPS},
    {"cross + gqa 4/2", 1, 4, 2, 16, 8, {32, 1, 1}, {4, 1, 1}, {1, 4, 6}, {1, 2, 3}, MHLA_LAYOUT_BNHD,
     MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static mhla_config case_config(const cross_case *c, mhla_dtype dtype)
{
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.batch = c->batch, cfg.heads = c->heads, cfg.kv_heads = c->kv_heads, cfg.dk = c->dk, cfg.dv = c->dv;
    cfg.seq_t = c->q[0], cfg.seq_h = c->q[1], cfg.seq_w = c->q[2];
    cfg.block_t = c->qb[0], cfg.block_h = c->qb[1], cfg.block_w = c->qb[2];
    cfg.kv_seq_t = c->kv[0], cfg.kv_seq_h = c->kv[1], cfg.kv_seq_w = c->kv[2];
    cfg.kv_block_t = c->kvb[0], cfg.kv_block_h = c->kvb[1], cfg.kv_block_w = c->kvb[2];
    cfg.layout = c->layout, cfg.normalizer = c->normalizer, cfg.feature_map = c->fm, cfg.dtype = dtype;
    set_test_eps(&cfg);
    return cfg;
}

/* One case's inputs in float (rounded to dtype's storage where it is 16-bit) and their bits. */
typedef struct inputs {
    size_t n[5]; /* elements of q, k, v, out, mixing */
    float *x[5]; /* q, k, v, dout (out's shape), mixing */
    void *bits[4];
} inputs;

static void inputs_make(const mhla_config *cfg, uint32_t seed, inputs *in)
{
    const mhla_tensor t[5] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_OUT, MHLA_TENSOR_MIXING};
    const float lo = cfg->feature_map == MHLA_FEATURE_NONE ? 0.05f : -1.0f;
    for (int i = 0; i < 5; ++i) {
        in->n[i] = mhla_config_tensor_elems(cfg, t[i]);
        assert_true(in->n[i] > 0);
        in->x[i] = malloc(in->n[i] * sizeof(float));
        assert_non_null(in->x[i]);
        /* a normalizer's denominator stays away from 0 with positive mixing weights */
        fill_uniform(in->x[i], in->n[i], seed * 7 + (uint32_t)i, i == 4 ? 0.05f : i < 2 ? lo : -1.0f, 1.0f);
    }
    for (int i = 0; i < 4; ++i)
        in->bits[i] = to_storage(cfg->dtype, in->x[i], in->n[i]);
}

static void inputs_free(inputs *in)
{
    for (int i = 0; i < 4; ++i)
        if (in->bits[i] != in->x[i])
            free(in->bits[i]);
    for (int i = 0; i < 5; ++i)
        free(in->x[i]);
}

/* A device array of n elements of dtype filled with NaN, and its values as floats. */
static void *nan_storage(mhla_dtype dtype, size_t n)
{
    return dtype == MHLA_DTYPE_F32 ? (void *)nan_floats(n) : (void *)nan16(n);
}
static float *as_floats(mhla_dtype dtype, void *x, size_t n)
{
    if (dtype == MHLA_DTYPE_F32)
        return x;
    float *f = malloc(n * sizeof *f);
    assert_non_null(f);
    mhla_convert(MHLA_DTYPE_F32, f, dtype, x, n);
    free(x);
    return f;
}

/* The plan's forward (varlen where cu is not NULL) against the reference's, within the tolerance for
 * `tokens` summed over, named `what` in a failure; returns the reference's output (the caller frees it). */
static double *check_forward(mhla_context *ctx, mhla_plan *plan, const mhla_config *cfg, const inputs *in,
                             const int32_t *cu, size_t nseq, int64_t tokens, const char *what)
{
    const size_t n = in->n[3];
    double *ref = malloc(n * sizeof *ref);
    assert_non_null(ref);
    const float *const *x = (const float *const *)in->x;
    const mhla_status rs = cu ? mhla_reference_forward_varlen(cfg, x[0], x[1], x[2], x[4], cu, nseq, ref)
                              : mhla_reference_forward(cfg, x[0], x[1], x[2], x[4], ref);
    assert_int_equal(rs, MHLA_OK);
    void *const *b = in->bits;
    void *out = nan_storage(cfg->dtype, n);
    const mhla_status st = cu ? mhla_forward_varlen_host(plan, b[0], b[1], b[2], x[4], cu, nseq, out)
                              : mhla_forward_host(plan, b[0], b[1], b[2], x[4], out);
    if (st != MHLA_OK)
        fail_msg("%s: forward: %s", what, mhla_context_message(ctx));
    float *outf = as_floats(cfg->dtype, out, n);
    expect_within(outf, ref, n, mhla_reference_tolerance(cfg->dtype, tokens), what);
    free(outf);
    return ref;
}

/* The plan's backward (varlen where cu is not NULL) against the reference's: dq, dk and dv (each key/value
 * head's summed over its query heads) and dMc, each named "<what> dq" etc. in a failure. */
static void check_gradients(mhla_context *ctx, mhla_plan *plan, const mhla_config *cfg, const inputs *in,
                            const int32_t *cu, size_t nseq, const char *what)
{
    const size_t gn[4] = {in->n[0], in->n[1], in->n[2], in->n[4]};
    double *gref[4];
    float *g[4];
    for (int j = 0; j < 4; ++j) {
        gref[j] = malloc(gn[j] * sizeof(double));
        g[j] = nan_floats(gn[j]);
        assert_non_null(gref[j]);
    }
    const float *const *x = (const float *const *)in->x;
    const mhla_status rs = cu ? mhla_reference_backward_varlen(cfg, x[0], x[1], x[2], x[4], cu, nseq, x[3], gref[0],
                                                               gref[1], gref[2], gref[3])
                              : mhla_reference_backward(cfg, x[0], x[1], x[2], x[4], x[3], gref[0], gref[1], gref[2],
                                                        gref[3]);
    assert_int_equal(rs, MHLA_OK);
    const mhla_status st = cu ? mhla_backward_varlen_host(plan, x[0], x[1], x[2], x[4], cu, nseq, x[3], g[0], g[1],
                                                          g[2], g[3])
                              : mhla_backward_host(plan, x[0], x[1], x[2], x[4], x[3], g[0], g[1], g[2], g[3]);
    if (st != MHLA_OK)
        fail_msg("%s: backward: %s", what, mhla_context_message(ctx));
    static const char *const names[4] = {"dq", "dk", "dv", "dmixing"};
    for (int j = 0; j < 4; ++j) {
        char gwhat[192];
        snprintf(gwhat, sizeof gwhat, "%s %s", what, names[j]);
        expect_within(g[j], gref[j], gn[j], mhla_reference_backward_tolerance(cfg->dtype), gwhat);
        free(g[j]);
        free(gref[j]);
    }
}

/* The forward and (f32) the backward of `cfg` on ctx against the reference. */
/* What the last check_case()'s plan said it was built with (mhla_plan_tuning, after its backward). */
static char last_tuning[768];

static void check_case(mhla_context *ctx, const cross_case *c, mhla_dtype dtype, const char *tuning, int backward)
{
    const mhla_config cfg = case_config(c, dtype);
    mhla_plan *plan = NULL;
    inputs in;
    inputs_make(&cfg, 11, &in);
    assert_int_equal(mhla_context_set_tuning(ctx, tuning), MHLA_OK);
    if (mhla_plan_create(ctx, &cfg, &plan) != MHLA_OK)
        fail_msg("%s: mhla_plan_create: %s", c->name, mhla_context_message(ctx));
    /* the plan sizes k and v by the key/value side and Mc as M x M_kv */
    const size_t es = dtype == MHLA_DTYPE_F32 ? 4 : 2;
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_K), in.n[1] * es);
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_V), in.n[2] * es);
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_MIXING), in.n[4] * sizeof(float));

    char what[160];
    snprintf(what, sizeof what, "%s %s %s forward", c->name, mhla_dtype_name(dtype), tuning);
    free(check_forward(ctx, plan, &cfg, &in, NULL, 0, cfg.seq_t * cfg.seq_h * cfg.seq_w, what));

    if (backward) {
        snprintf(what, sizeof what, "%s %s", c->name, tuning);
        check_gradients(ctx, plan, &cfg, &in, NULL, 0, what);
    }
    assert_int_equal(mhla_plan_tuning(plan, last_tuning, sizeof last_tuning), MHLA_OK);
    mhla_plan_destroy(plan);
    inputs_free(&in);
}

/* Every case, forward and backward, with the device's row and with the GPU row. */
static void test_cases(void **state)
{
    mhla_context *ctx = *state;
    static const char *const rows[] = {"", "row=gpu"};
    for (size_t r = 0; r < 2; ++r)
        for (size_t i = 0; i < N_CASES; ++i) {
            if (test_config_thinned())
                continue;
            check_case(ctx, &cases[i], MHLA_DTYPE_F32, rows[r], 1);
        }
}

/* Cross-attention whose two grids have blocks of the same length, more of them on the query side,
 * each split into segments (split_min_len=4: four segments of four tokens): the backward's
 * weighted summaries of the query blocks are then split as the key/value blocks are, into the
 * plan's segment buffer, which must hold the larger side's. */
static void test_split_blocks(void **state)
{
    static const cross_case split = {"cross split, nb = nb_kv", 1, 2, 0, 16, 8, {64, 1, 1}, {4, 1, 1}, {32, 1, 1},
                                     {2, 1, 1}, MHLA_LAYOUT_BNHD, MHLA_NORMALIZER_PAPER, MHLA_FEATURE_RELU_EPS};
    check_case(*state, &split, MHLA_DTYPE_F32, "split_min_len=4", 1);
}

/* The GPU row's tiled backward (its read-outs through local memory, the gradient summaries tiled)
 * of grouped heads in cross-attention under a phone's limits (MHLA_LIMITS: 64-wide groups, 16 KiB;
 * test_backward's test_tiled_limits for the other shapes): G added per key/value head before the
 * mixing, dk and dv on the key/value grid's own blocks. */
static void test_tiled_limits(void **state)
{
    (void)state;
    mhla_context *ctx = limited_context("wg=64,local=16K", NULL);
    last_tuning[0] = 0;
    check_case(ctx, &cases[N_CASES - 1], MHLA_DTYPE_F32, "row=gpu", 1);
    if (!strstr(last_tuning, "; backward: tiled read-outs"))
        fail_msg("%s under 64-wide groups: the backward is not tiled: %s", cases[N_CASES - 1].name, last_tuning);
    mhla_context_destroy(ctx);
}

/* The forward in one launch (tl_one: forward_one.cl, each group mixing its query block's summary
 * from every key itself) on every case but the official normalizer's (its per-token dots keep the
 * stages): a key/value grid of its own blocks and tokens, query heads sharing a key/value head. */
static void test_one_launch(void **state)
{
    mhla_context *ctx = *state;
    for (size_t i = 0; i < N_CASES; ++i) {
        if (test_config_thinned() || cases[i].normalizer == MHLA_NORMALIZER_OFFICIAL)
            continue;
        last_tuning[0] = 0;
        check_case(ctx, &cases[i], MHLA_DTYPE_F32, "row=gpu,tl_one=1000000", 0);
        if (!strstr(last_tuning, "; one launch (tl_one 1000000"))
            fail_msg("%s: the forward is not one launch: %s", cases[i].name, last_tuning);
    }
}

/* 16-bit storage: the forward of a grouped cross-attention case. */
static void test_storage(void **state)
{
    mhla_context *ctx = *state;
    check_case(ctx, &cases[N_CASES - 1], MHLA_DTYPE_F16, "", 0);
    check_case(ctx, &cases[0], MHLA_DTYPE_BF16, "", 0);
}

/* Grouped heads compute what the same heads spelled out do: each key/value head copied to its query
 * heads (a plain H_kv = H plan), for the forward and, summed over the copies, dk and dv. */
static void test_gqa_equals_repeated(void **state)
{
    mhla_context *ctx = *state;
    mhla_config g = case_config(&cases[0], MHLA_DTYPE_F32), f = g;
    f.kv_heads = 0;
    inputs in, full;
    inputs_make(&g, 5, &in);
    inputs_make(&f, 5, &full);
    const int64_t B = g.batch, H = g.heads, Hk = g.kv_heads, N = g.seq_t, group = H / Hk;
    for (int t = 1; t <= 2; ++t) { /* k, v: [B, N, H_kv, D] to [B, N, H, D] */
        const int64_t D = t == 1 ? g.dk : g.dv;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t n = 0; n < N; ++n)
                for (int64_t h = 0; h < H; ++h)
                    memcpy(full.x[t] + ((b * N + n) * H + h) * D, in.x[t] + ((b * N + n) * Hk + h / group) * D,
                           (size_t)D * sizeof(float));
    }
    memcpy(full.x[0], in.x[0], in.n[0] * sizeof(float));
    memcpy(full.x[4], in.x[4], in.n[4] * sizeof(float));
    mhla_plan *pg = NULL, *pf = NULL;
    assert_int_equal(mhla_plan_create(ctx, &g, &pg), MHLA_OK);
    assert_int_equal(mhla_plan_create(ctx, &f, &pf), MHLA_OK);
    float *og = nan_floats(in.n[3]), *of = nan_floats(in.n[3]);
    assert_int_equal(mhla_forward_host(pg, in.x[0], in.x[1], in.x[2], in.x[4], og), MHLA_OK);
    assert_int_equal(mhla_forward_host(pf, full.x[0], full.x[1], full.x[2], full.x[4], of), MHLA_OK);
    /* the same summaries, mixed and read out alike: equal to the last bit */
    assert_memory_equal(og, of, in.n[3] * sizeof(float));
    free(og), free(of);
    mhla_plan_destroy(pg);
    mhla_plan_destroy(pf);
    inputs_free(&in);
    inputs_free(&full);
}

/* Grouped heads in the causal modes: the chunk form (both layouts, paper and none), a packed varlen
 * batch, and the decoder token by token, whose state holds H_kv heads' summaries. */
static mhla_config causal_gqa(mhla_layout layout, mhla_normalizer norm, int64_t heads, int64_t kv_heads)
{
    mhla_config c;
    mhla_config_init_causal(&c);
    c.batch = 2, c.heads = heads, c.kv_heads = kv_heads, c.dk = 16, c.dv = 8, c.seq_t = 40, c.chunk = 16;
    c.layout = layout, c.normalizer = norm;
    set_test_eps(&c);
    return c;
}

static void test_causal_gqa(void **state)
{
    mhla_context *ctx = *state;
    const struct {
        mhla_layout layout;
        mhla_normalizer norm;
        int64_t heads, kv_heads;
        const char *tuning;
    } cases[] = {
        {MHLA_LAYOUT_BNHD, MHLA_NORMALIZER_NONE, 4, 2, ""},
        {MHLA_LAYOUT_BHND, MHLA_NORMALIZER_PAPER, 4, 1, ""},
        {MHLA_LAYOUT_BNHD, MHLA_NORMALIZER_PAPER, 6, 2, "row=gpu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        if (test_config_thinned())
            continue;
        const mhla_config cfg = causal_gqa(cases[i].layout, cases[i].norm, cases[i].heads, cases[i].kv_heads);
        inputs in;
        inputs_make(&cfg, 21, &in);
        assert_int_equal(mhla_context_set_tuning(ctx, cases[i].tuning), MHLA_OK);
        mhla_plan *plan = NULL;
        if (mhla_plan_create(ctx, &cfg, &plan) != MHLA_OK)
            fail_msg("causal gqa %zu: %s", i, mhla_context_message(ctx));
        char what[96];
        snprintf(what, sizeof what, "causal gqa %lld/%lld %s", (long long)cfg.heads, (long long)cfg.kv_heads,
                 cases[i].tuning);
        double *ref = check_forward(ctx, plan, &cfg, &in, NULL, 0, cfg.seq_t, what);
        /* the backward: dk and dv summed over each key/value head's query heads */
        check_gradients(ctx, plan, &cfg, &in, NULL, 0, what);
        mhla_plan_destroy(plan);

        /* the decoder, one token at a time over the same sequence */
        mhla_decoder *dec = NULL;
        assert_int_equal(mhla_decoder_create(ctx, &cfg, cfg.seq_t, &dec), MHLA_OK);
        float *out = nan_floats(in.n[3]);
        if (mhla_decoder_step_host(dec, in.x[0], in.x[1], in.x[2], in.x[4], out, cfg.seq_t) != MHLA_OK)
            fail_msg("decoder: %s", mhla_context_message(ctx));
        snprintf(what, sizeof what, "decoder gqa %lld/%lld %s", (long long)cfg.heads, (long long)cfg.kv_heads,
                 cases[i].tuning);
        expect_within(out, ref, in.n[3], mhla_reference_tolerance(MHLA_DTYPE_F32, cfg.seq_t), what);
        /* its state: ceil(40 / 16) = 3 summaries of B*H_kv*Dk*SC floats after the header */
        const size_t sc = (size_t)cfg.dv + (cfg.normalizer == MHLA_NORMALIZER_PAPER);
        const size_t w = (size_t)(cfg.batch * cfg.kv_heads * cfg.dk) * sc;
        assert_int_equal(mhla_decoder_state_size(dec), 128 + (3 + 1) * w * sizeof(float)); /* + P_i, 40 % 16 != 0 */
        mhla_decoder_destroy(dec);
        free(out);
        free(ref);
        inputs_free(&in);
    }
}

/* A packed varlen batch with grouped heads. */
static void test_varlen_gqa(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = causal_gqa(MHLA_LAYOUT_BNHD, MHLA_NORMALIZER_PAPER, 4, 2);
    cfg.batch = 1, cfg.varlen = 1, cfg.seq_t = 45;
    const int32_t cu[4] = {0, 17, 17, 45};
    cfg.mixing_rows = 2;
    inputs in;
    inputs_make(&cfg, 23, &in);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    free(check_forward(ctx, plan, &cfg, &in, cu, 3, 28, "varlen gqa"));
    /* and its backward, dk and dv summed over each group */
    check_gradients(ctx, plan, &cfg, &in, cu, 3, "varlen gqa");
    mhla_plan_destroy(plan);
    inputs_free(&in);
}

/* The softmax baseline on both: every query against every key of its key/value head. */
static void test_softmax(void **state)
{
    mhla_context *ctx = *state;
    const int cases_used[2] = {N_CASES - 1, 3}; /* cross + gqa 4/2 (BNHD), cross N_kv > N_q (BHND) */
    for (int i = 0; i < 2; ++i) {
        const mhla_config cfg = case_config(&cases[cases_used[i]], MHLA_DTYPE_F32);
        inputs in;
        inputs_make(&cfg, 31, &in);
        double *ref = malloc(in.n[3] * sizeof *ref);
        float *out = nan_floats(in.n[3]);
        assert_non_null(ref);
        assert_int_equal(mhla_reference_softmax(&cfg, in.x[0], in.x[1], in.x[2], ref), MHLA_OK);
        mhla_plan *plan = NULL;
        if (mhla_softmax_plan_create(ctx, &cfg, &plan) != MHLA_OK)
            fail_msg("softmax %s: %s", cases[cases_used[i]].name, mhla_context_message(ctx));
        assert_int_equal(mhla_forward_host(plan, in.x[0], in.x[1], in.x[2], NULL, out), MHLA_OK);
        char what[96];
        snprintf(what, sizeof what, "softmax %s", cases[cases_used[i]].name);
        expect_within(out, ref, in.n[3], mhla_reference_tolerance(MHLA_DTYPE_F32, in.n[1]), what);
        mhla_plan_destroy(plan);
        free(out), free(ref);
        inputs_free(&in);
    }
}

static void expect_refused(const mhla_config *cfg, mhla_status want, const char *needle)
{
    char msg[512] = "";
    const mhla_status st = mhla_config_check(cfg, msg, sizeof msg);
    if (st != want)
        fail_msg("expected %s, got %s: %s", mhla_status_name(want), mhla_status_name(st), msg);
    if (!strstr(msg, needle))
        fail_msg("the message \"%s\" does not name \"%s\"", msg, needle);
}

static void test_refusals(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = case_config(&cases[0], MHLA_DTYPE_F32);
    c.kv_heads = 3;
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "kv_heads = 3 must divide heads = 4");
    c.kv_heads = -1;
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "kv_heads must be >= 1");
    c = case_config(&cases[2], MHLA_DTYPE_F32);
    c.kv_block_t = c.kv_block_h = c.kv_block_w = 0;
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "give its blocks (kv_block_t");
    c = case_config(&cases[2], MHLA_DTYPE_F32);
    c.kv_block_t = 5;
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "not divisible by kv_block_t = 5");
    c.kv_block_t = 3, c.kv_seq_h = 0;
    expect_refused(&c, MHLA_ERR_INVALID_SHAPE, "kv_seq_h must be >= 1");
    c = case_config(&cases[2], MHLA_DTYPE_F32);
    c.normalizer = MHLA_NORMALIZER_OFFICIAL;
    expect_refused(&c, MHLA_ERR_UNSUPPORTED, "no meaning across two grids");
    mhla_config_init_causal(&c);
    c.dk = c.dv = 8, c.seq_t = 64, c.kv_seq_t = 32, c.kv_seq_h = c.kv_seq_w = 1, c.kv_block_t = 1;
    c.kv_block_h = c.kv_block_w = 1;
    expect_refused(&c, MHLA_ERR_UNSUPPORTED, "cross-attention is non-causal");
    /* shards of cross-attention are refused, naming what */
    mhla_plan *p = NULL;
    c = case_config(&cases[2], MHLA_DTYPE_F32);
    assert_int_equal(mhla_plan_create_shard(ctx, &c, 0, 4, &p), MHLA_ERR_UNSUPPORTED);
    assert_message_has(ctx, "cross-attention");
    assert_null(p);
    /* a buffer sized for the queries' tokens where the keys' are fewer is fine; one short of the
     * key/value side's size is refused, naming its shape */
    c = case_config(&cases[3], MHLA_DTYPE_F32); /* N_q 16 < N_kv 48 */
    assert_int_equal(mhla_plan_create(ctx, &c, &p), MHLA_OK);
    inputs in;
    inputs_make(&c, 3, &in);
    cl_int err;
    cl_mem small = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, in.n[0] * sizeof(float), NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(mhla_forward(p, small, small, small, small, small, 0, NULL, NULL), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_message_has(ctx, "[B,H,N,D] = [2,2,48,8]");
    clReleaseMemObject(small);
    inputs_free(&in);
    mhla_plan_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_storage),
        cmocka_unit_test(test_split_blocks),
        cmocka_unit_test(test_tiled_limits),
        cmocka_unit_test(test_one_launch),
        cmocka_unit_test(test_gqa_equals_repeated),
        cmocka_unit_test(test_causal_gqa),
        cmocka_unit_test(test_varlen_gqa),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_refusals),
    };
    return run_group("cross", tests, context_setup, context_teardown);
}
