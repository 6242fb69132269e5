/* The C reference against an independent O(N^2) token-level form of docs/spec.md (paper Eq. 5:
 * o_t = sum_s Mc[i, b(s)] (q~_t . k~_s) v_s / ..., and its causal, chunked and packed forms), so
 * that the oracle itself is checked. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static double phi(double x, mhla_feature_map fm, double feps)
{
    switch (fm) {
    case MHLA_FEATURE_NONE:
        return x;
    case MHLA_FEATURE_RELU:
        return x > 0 ? x : 0;
    case MHLA_FEATURE_RELU_EPS:
        return (x > 0 ? x : 0) + feps;
    default:
        return x > 0 ? x + 1 : exp(x);
    }
}

/* Block of token n, and its position inside the block, straight from docs/spec.md
 * "Token grid and blocks". */
static void locate(const mhla_config *c, int64_t n, int64_t *blk, int64_t *pos)
{
    const int64_t pt = c->seq_t / c->block_t, ph = c->seq_h / c->block_h, pw = c->seq_w / c->block_w;
    const int64_t x = n % c->seq_w, y = (n / c->seq_w) % c->seq_h, f = n / (c->seq_w * c->seq_h);
    *blk = ((f / pt) * c->block_h + y / ph) * c->block_w + x / pw;
    *pos = ((f % pt) * ph + y % ph) * pw + x % pw;
}

static size_t at(const mhla_config *c, int64_t N, int64_t b, int64_t t, int64_t h, int64_t d, int64_t D)
{
    return c->layout == MHLA_LAYOUT_BHND ? (size_t)(((b * c->heads + h) * N + t) * D + d)
                                         : (size_t)(((b * N + t) * c->heads + h) * D + d);
}

/* The token-level form, O(N^2 * D). */
static void token_level(const mhla_config *c, const float *q, const float *k, const float *v, const float *mc,
                        double *out)
{
    const int64_t N = c->seq_t * c->seq_h * c->seq_w, M = c->block_t * c->block_h * c->block_w;
    const double scale = c->scale == 0.0f ? 1.0 : c->scale;
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t h = 0; h < c->heads; ++h)
            for (int64_t t = 0; t < N; ++t) {
                int64_t i, p;
                locate(c, t, &i, &p);
                double num[16] = {0}, den = c->eps;
                for (int64_t s = 0; s < N; ++s) {
                    int64_t bs, ps;
                    locate(c, s, &bs, &ps);
                    double a = 0;
                    for (int64_t d = 0; d < c->dk; ++d)
                        a += scale * phi(q[at(c, N, b, t, h, d, c->dk)], c->feature_map, c->feature_eps) *
                             phi(k[at(c, N, b, s, h, d, c->dk)], c->feature_map, c->feature_eps);
                    const double w = mc[i * M + bs] * a;
                    for (int64_t e = 0; e < c->dv; ++e)
                        num[e] += w * v[at(c, N, b, s, h, e, c->dv)];
                    if (c->normalizer == MHLA_NORMALIZER_PAPER)
                        den += w;
                    if (c->normalizer == MHLA_NORMALIZER_OFFICIAL) {
                        /* sum_b Mc[i,b] (q~_{b,p} . z_b): token s contributes to z_{bs}, dotted with
                         * the query at position p of block bs */
                        int64_t tq = -1;
                        for (int64_t u = 0; u < N && tq < 0; ++u) {
                            int64_t bu, pu;
                            locate(c, u, &bu, &pu);
                            if (bu == bs && pu == p)
                                tq = u;
                        }
                        double a2 = 0;
                        for (int64_t d = 0; d < c->dk; ++d)
                            a2 += scale * phi(q[at(c, N, b, tq, h, d, c->dk)], c->feature_map, c->feature_eps) *
                                  phi(k[at(c, N, b, s, h, d, c->dk)], c->feature_map, c->feature_eps);
                        den += mc[i * M + bs] * a2;
                    }
                }
                if (c->normalizer == MHLA_NORMALIZER_NONE)
                    den = 1.0;
                for (int64_t e = 0; e < c->dv; ++e)
                    out[at(c, N, b, t, h, e, c->dv)] = num[e] / den;
            }
}

static void compare(mhla_config *c, mhla_init_kind init, uint32_t seed)
{
    const size_t nq = mhla_config_tensor_elems(c, MHLA_TENSOR_Q), nv = mhla_config_tensor_elems(c, MHLA_TENSOR_V);
    const size_t nm = mhla_config_tensor_elems(c, MHLA_TENSOR_MIXING);
    float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nv * 4), *mc = malloc(nm * 4);
    double *ref = malloc(nv * 8), *tok = malloc(nv * 8);
    assert_non_null(q), assert_non_null(k), assert_non_null(v), assert_non_null(mc);
    assert_non_null(ref), assert_non_null(tok);
    const float lo = c->feature_map == MHLA_FEATURE_NONE ? 0.05f : -1.0f;
    fill_uniform(q, nq, seed, lo, 1), fill_uniform(k, nq, seed + 1, lo, 1), fill_uniform(v, nv, seed + 2, -1, 1);
    assert_int_equal(mhla_mixing_init(init, NULL, c->block_t, c->block_h, c->block_w, mc, nm), MHLA_OK);
    assert_int_equal(mhla_reference_forward(c, q, k, v, mc, ref), MHLA_OK);
    token_level(c, q, k, v, mc, tok);
    const double err = finite_rel_err_double(ref, tok, nv, "reference vs token-level form");
    if (!(err <= 1e-12))
        fail_msg("reference vs token-level form: %.3g relative (normalizer %s, feature %s, layout %s)",
                 err, mhla_normalizer_name(c->normalizer), mhla_feature_map_name(c->feature_map),
                 mhla_layout_name(c->layout));
    free(q), free(k), free(v), free(mc), free(ref), free(tok);
}

static void test_reference_matches_token_level(void **state)
{
    (void)state;
    for (int norm = 0; norm <= 2; ++norm)
        for (int fm = 0; fm <= 3; ++fm)
            for (int layout = 0; layout <= 1; ++layout) {
                mhla_config c;
                mhla_config_init(&c);
                c.batch = 2, c.heads = 2;
                c.seq_t = 2, c.seq_h = 4, c.seq_w = 3;
                c.block_t = 2, c.block_h = 2, c.block_w = 1;
                c.dk = 5, c.dv = 3;
                c.scale = 0.7f;
                c.normalizer = (mhla_normalizer)norm;
                c.feature_map = (mhla_feature_map)fm;
                c.layout = (mhla_layout)layout;
                compare(&c, MHLA_INIT_PAPER, (uint32_t)(norm * 8 + fm * 2 + layout));
            }
}

static void test_reference_1d_and_m1(void **state)
{
    (void)state;
    mhla_config c = config_1d(1, 3, 30, 5, 4, 6);
    compare(&c, MHLA_INIT_EXP, 40);
    c = config_1d(2, 1, 17, 1, 3, 2); /* M = 1: global linear attention */
    compare(&c, MHLA_INIT_LINEAR, 41);
}

/* Causal MHLA token by token, O(N^2): o_t = sum_{s <= t in t's sequence} Mc[i(t), i(s)] (q~_t . k~_s)
 * v_s with chunk indices counted from the sequence's start (the paper normalizer divides by the
 * same sum without v_s, plus eps). No chunk summaries, no prefix mixtures. Sequences are given by
 * cu (NULL: each batch element is one sequence of N tokens). */
static void causal_token_level(const mhla_config *c, const float *q, const float *k, const float *v, const float *mc,
                               int64_t R, const int32_t *cu, size_t nseq, double *out)
{
    const int64_t N = c->seq_t, C = c->chunk;
    /* The default scale Dk^-0.5 is a float, like every scale of a config. */
    const double scale = c->scale == 0.0f ? (double)(float)(1.0 / sqrt((double)c->dk)) : c->scale;
    const size_t seqs = cu ? nseq : 1;
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t h = 0; h < c->heads; ++h)
            for (size_t sq = 0; sq < seqs; ++sq) {
                const int64_t t0 = cu ? cu[sq] : 0, t1 = cu ? cu[sq + 1] : N;
                for (int64_t t = t0; t < t1; ++t) {
                    double num[16] = {0}, den = c->eps;
                    for (int64_t s = t0; s <= t; ++s) {
                        double a = 0;
                        for (int64_t d = 0; d < c->dk; ++d)
                            a += scale * phi(q[at(c, N, b, t, h, d, c->dk)], c->feature_map, c->feature_eps) *
                                 phi(k[at(c, N, b, s, h, d, c->dk)], c->feature_map, c->feature_eps);
                        const double w = mc[((t - t0) / C) * R + (s - t0) / C] * a;
                        for (int64_t e = 0; e < c->dv; ++e)
                            num[e] += w * v[at(c, N, b, s, h, e, c->dv)];
                        den += w;
                    }
                    if (c->normalizer == MHLA_NORMALIZER_NONE)
                        den = 1.0;
                    for (int64_t e = 0; e < c->dv; ++e)
                        out[at(c, N, b, t, h, e, c->dv)] = num[e] / den;
                }
            }
}

/* Reference vs token-level form for a causal config (cu != NULL: varlen). */
static void compare_causal(const mhla_config *c, const int32_t *cu, size_t nseq, uint32_t seed)
{
    test_inputs in;
    assert_int_equal(test_inputs_make(c, TEST_INIT_RANDOM, seed, &in), MHLA_OK);
    double *ref = malloc(in.nv * 8), *tok = malloc(in.nv * 8);
    assert_non_null(ref), assert_non_null(tok);
    if (cu)
        assert_int_equal(mhla_reference_forward_varlen(c, in.q, in.k, in.v, in.mix, cu, nseq, ref), MHLA_OK);
    else
        assert_int_equal(mhla_reference_forward(c, in.q, in.k, in.v, in.mix, ref), MHLA_OK);
    causal_token_level(c, in.q, in.k, in.v, in.mix, in.rows, cu, nseq, tok);
    const double err = finite_rel_err_double(ref, tok, in.nv, "causal reference vs token-level form");
    if (!(err <= 1e-12))
        fail_msg("causal reference vs token-level form: %.3g relative (normalizer %s, feature %s, layout %s, C %lld)",
                 err, mhla_normalizer_name(c->normalizer), mhla_feature_map_name(c->feature_map),
                 mhla_layout_name(c->layout), (long long)c->chunk);
    test_inputs_free(&in);
    free(ref), free(tok);
}

static void test_causal_reference_matches_token_level(void **state)
{
    (void)state;
    const mhla_normalizer norms[] = {MHLA_NORMALIZER_NONE, MHLA_NORMALIZER_PAPER};
    for (int n = 0; n < 2; ++n)
        for (int fm = 0; fm <= 3; ++fm)
            for (int layout = 0; layout <= 1; ++layout) {
                mhla_config c = config_causal(2, 2, 23, 5, 5, 3); /* 5 chunks, the last of 3 tokens */
                c.normalizer = norms[n];
                c.feature_map = (mhla_feature_map)fm;
                c.layout = (mhla_layout)layout;
                c.scale = layout ? 0.7f : 0.0f; /* 0: Dk^-0.5 */
                compare_causal(&c, NULL, 0, (uint32_t)(n * 8 + fm * 2 + layout));
            }
    mhla_config c = config_causal(1, 1, 7, 16, 4, 4); /* N < C: one partial chunk */
    compare_causal(&c, NULL, 0, 30);
    c = config_causal(1, 2, 12, 3, 4, 4);
    c.mixing_rows = 9; /* a larger Mc: the leading 4 x 4 block */
    compare_causal(&c, NULL, 0, 31);
}

static void test_causal_reference_varlen(void **state)
{
    (void)state;
    const int32_t cu[] = {0, 1, 8, 8, 13, 30}; /* lengths 1, 7, 0 (empty), 5, 17 */
    for (int layout = 0; layout <= 1; ++layout)
        for (int paper = 0; paper <= 1; ++paper) {
            mhla_config c = config_causal(1, 2, 30, 4, 3, 5);
            c.varlen = 1;
            c.layout = (mhla_layout)layout;
            c.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
            c.mixing_rows = 5; /* ceil(17 / 4): enough for the longest sequence, not for the total */
            compare_causal(&c, cu, 5, (uint32_t)(40 + layout * 2 + paper));
        }
    mhla_config c = config_causal(1, 1, 30, 4, 3, 5);
    c.varlen = 1;
    c.mixing_rows = 4;
    float x[150] = {0};
    double out[150];
    assert_int_equal(mhla_reference_forward_varlen(&c, x, x, x, x, cu, 5, out), MHLA_ERR_SEQUENCE_TOO_LONG);
    assert_non_null(strstr(mhla_last_message(), "sequence 4 (cu_seqlens[4] = 13 .. cu_seqlens[5] = 30) of 17 tokens"));
    assert_int_equal(mhla_reference_forward(&c, x, x, x, x, out), MHLA_ERR_INVALID_ARGUMENT);
}

static void test_reference_rejects_bad_input(void **state)
{
    (void)state;
    mhla_config c = config_1d(1, 1, 10, 3, 4, 4);
    float x[40];
    double out[40];
    assert_int_equal(mhla_reference_forward(&c, x, x, x, x, out), MHLA_ERR_INVALID_SHAPE);
    c.block_t = 2;
    assert_int_equal(mhla_reference_forward(&c, NULL, x, x, x, out), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_reference_forward(NULL, x, x, x, x, out), MHLA_ERR_INVALID_ARGUMENT);
}

static void test_max_rel_err(void **state)
{
    (void)state;
    const float got[] = {1.0f, 2.0f, NAN, INFINITY};
    const double ref[] = {1.0, 2.5, NAN, INFINITY};
    assert_true(fabs(mhla_max_rel_err(got, ref, 4) - 0.2) < 1e-12);
    const double ref_bad[] = {1.0, 2.5, 3.0, INFINITY};
    assert_true(isinf(mhla_max_rel_err(got, ref_bad, 4)));
    const double ref_neg[] = {1.0, 2.5, NAN, -INFINITY};
    assert_true(isinf(mhla_max_rel_err(got, ref_neg, 4)));
}

/* mhla_reference_softmax against cases with a closed form: q = 0 weighs every key alike (the
 * output is the mean of v); two keys give weights e^a / (e^a + e^b); and BHND is BNHD transposed. */
static void test_reference_softmax(void **state)
{
    (void)state;
    mhla_config cfg = config_1d(1, 1, 5, 1, 3, 2);
    float q[15] = {0}, k[15], v[10];
    double out[10];
    fill_uniform(k, 15, 1, -3.0f, 3.0f);
    fill_uniform(v, 10, 2, -1.0f, 1.0f);
    assert_int_equal(mhla_reference_softmax(&cfg, q, k, v, out), MHLA_OK);
    for (int e = 0; e < 2; ++e) {
        double mean = 0.0;
        for (int s = 0; s < 5; ++s)
            mean += v[s * 2 + e] / 5.0;
        for (int t = 0; t < 5; ++t)
            assert_true(fabs(out[t * 2 + e] - mean) < 1e-12);
    }

    /* Two tokens, Dk = 4 (only the first component nonzero, so q.k is a product of two numbers). */
    mhla_config two = config_1d(1, 1, 2, 1, 4, 1);
    two.scale = 0.3f;
    const float q2[8] = {2.0f, 0, 0, 0, -1.0f, 0, 0, 0}, k2[8] = {1.5f, 0, 0, 0, -0.5f, 0, 0, 0};
    const float v2[2] = {3.0f, -2.0f};
    double o2[2];
    assert_int_equal(mhla_reference_softmax(&two, q2, k2, v2, o2), MHLA_OK);
    for (int t = 0; t < 2; ++t) {
        const double a = (double)0.3f * q2[t * 4] * k2[0], b = (double)0.3f * q2[t * 4] * k2[4];
        assert_true(fabs(o2[t] - (exp(a) * 3.0 - exp(b) * 2.0) / (exp(a) + exp(b))) < 1e-12);
    }
    /* The default scale is Dk^-0.5 = 0.5 for Dk = 4, written out: the logits of token 0 are
     * 0.5 * 2 * 1.5 = 1.5 and 0.5 * 2 * -0.5 = -0.5, of token 1 -0.75 and 0.25 (a default of 1,
     * or of Dk^-1, gives other values). */
    two.scale = 0.0f;
    assert_int_equal(mhla_reference_softmax(&two, q2, k2, v2, o2), MHLA_OK);
    assert_true(fabs(o2[0] - (exp(1.5) * 3.0 - exp(-0.5) * 2.0) / (exp(1.5) + exp(-0.5))) < 1e-12);
    assert_true(fabs(o2[1] - (exp(-0.75) * 3.0 - exp(0.25) * 2.0) / (exp(-0.75) + exp(0.25))) < 1e-12);

    /* B = 1, H = 2, N = 4: the BHND copy of the same tensors gives the BHND copy of the output. */
    mhla_config bnhd = config_1d(1, 2, 4, 1, 3, 2), bhnd = bnhd;
    bhnd.layout = MHLA_LAYOUT_BHND;
    float qa[24], ka[24], va[16], qb[24], kb[24], vb[16];
    double oa[16], ob[16];
    fill_uniform(qa, 24, 3, -2.0f, 2.0f);
    fill_uniform(ka, 24, 4, -2.0f, 2.0f);
    fill_uniform(va, 16, 5, -1.0f, 1.0f);
    for (int t = 0; t < 4; ++t)
        for (int h = 0; h < 2; ++h) {
            for (int d = 0; d < 3; ++d)
                qb[(h * 4 + t) * 3 + d] = qa[(t * 2 + h) * 3 + d], kb[(h * 4 + t) * 3 + d] = ka[(t * 2 + h) * 3 + d];
            for (int e = 0; e < 2; ++e)
                vb[(h * 4 + t) * 2 + e] = va[(t * 2 + h) * 2 + e];
        }
    assert_int_equal(mhla_reference_softmax(&bnhd, qa, ka, va, oa), MHLA_OK);
    assert_int_equal(mhla_reference_softmax(&bhnd, qb, kb, vb, ob), MHLA_OK);
    for (int t = 0; t < 4; ++t)
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e)
                assert_true(oa[(t * 2 + h) * 2 + e] == ob[(h * 4 + t) * 2 + e]);

    bnhd.causal = 1;
    assert_int_equal(mhla_reference_softmax(&bnhd, qa, ka, va, oa), MHLA_ERR_UNSUPPORTED);
    assert_int_equal(mhla_reference_softmax(&two, NULL, k2, v2, o2), MHLA_ERR_INVALID_ARGUMENT);
}

static void test_tolerance(void **state)
{
    (void)state;
    assert_true(mhla_reference_tolerance(MHLA_DTYPE_F32, 1) == 1e-5);
    assert_true(mhla_reference_tolerance(MHLA_DTYPE_F32, 4096) == 1e-5);
    assert_true(mhla_reference_tolerance(MHLA_DTYPE_F32, 4097) == 1e-4);
    assert_true(mhla_reference_tolerance(MHLA_DTYPE_F16, 64) == 2e-3);
    assert_true(mhla_reference_tolerance(MHLA_DTYPE_BF16, 1 << 20) == 1.6e-2);
    assert_true(mhla_reference_tolerance((mhla_dtype)7, 64) == 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_matches_token_level),
        cmocka_unit_test(test_reference_1d_and_m1),
        cmocka_unit_test(test_causal_reference_matches_token_level),
        cmocka_unit_test(test_causal_reference_varlen),
        cmocka_unit_test(test_reference_rejects_bad_input),
        cmocka_unit_test(test_max_rel_err),
        cmocka_unit_test(test_reference_softmax),
        cmocka_unit_test(test_tolerance),
    };
    return run_group("reference", tests, NULL, NULL);
}
