/* mhla_diagnose() without a device: inputs whose ranks and entropies are known in closed form
 * (uniform rows have entropy log n; a block-diagonal Mc keeps each row in its block), the rank
 * bounds of the paper (linear attention <= Dk, MHLA <= sum over blocks of min(n_b, Dk)) reached on
 * random inputs, sampling, and the refusals. NumPy's own computation of the same matrices is in
 * python/tests/test_diagnose.py. */
#include "helpers.h"

#include <mhla_reference.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

enum { SM = MHLA_ATTENTION_SOFTMAX, LIN = MHLA_ATTENTION_LINEAR, MH = MHLA_ATTENTION_MHLA };

static mhla_config diag_config_1d(int64_t n, int64_t heads, int64_t dk, int64_t blocks)
{
    mhla_config c;
    mhla_config_init(&c);
    c.heads = heads, c.seq_t = n, c.block_t = blocks, c.dk = c.dv = dk;
    return c;
}

static float *filled(size_t count, float value)
{
    float *x = malloc(count * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < count; ++i)
        x[i] = value;
    return x;
}

static float *random_floats(size_t count, uint32_t seed)
{
    float *x = malloc(count * sizeof *x);
    assert_non_null(x);
    uint64_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < count; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
    return x;
}


#define AT(res, h, kind) ((h) * MHLA_ATTENTION_KINDS + (kind))

/* Equal queries and keys: every kind's rows are uniform over what they see, so the entropies are
 * log N (softmax, linear) and log(tokens per block) for MHLA with the identity Mc; the matrices
 * have identical rows (rank 1), or one distinct row per block (rank M). */
static void test_uniform_rows_closed_form(void **state)
{
    (void)state;
    const int64_t n = 96, m = 4;
    mhla_config c = diag_config_1d(n, 2, 6, m);
    c.feature_map = MHLA_FEATURE_NONE;
    float *q = filled((size_t)(n * 2 * 6), 0.5f), *k = filled((size_t)(n * 2 * 6), 0.25f), *mc = identity_mixing(m);
    mhla_diagnose_result r;
    assert_int_equal(mhla_diagnose(&c, q, k, mc, NULL, &r), MHLA_OK);
    assert_int_equal(r.heads, 2), assert_int_equal(r.n, n), assert_int_equal(r.rows, n), assert_false(r.sampled);
    for (int64_t h = 0; h < 2; ++h) {
        assert_true(fabs(r.entropy[AT(r, h, SM)] - log((double)n)) < 1e-12);
        assert_true(fabs(r.entropy[AT(r, h, LIN)] - log((double)n)) < 1e-12);
        assert_true(fabs(r.entropy[AT(r, h, MH)] - log((double)(n / m))) < 1e-12);
        assert_true(r.rank[AT(r, h, SM)] == 1.0 && r.rank[AT(r, h, LIN)] == 1.0);
        assert_true(r.rank[AT(r, h, MH)] == (double)m);
        /* identical uniform rows 1/n: the one singular value is sqrt(n * n * (1/n)^2) = 1 */
        assert_true(fabs(r.sigma[AT(r, h, LIN) * r.rows] - 1.0) < 1e-12);
    }
    mhla_diagnose_result_free(&r);
    assert_null(r.rank);
    free(q), free(k), free(mc);
}

/* The causal masks: with equal queries and keys, row t is uniform over keys 0..t. */
static void test_causal_rows(void **state)
{
    (void)state;
    const int64_t n = 40;
    mhla_config c;
    mhla_config_init_causal(&c);
    c.seq_t = n, c.dk = c.dv = 4, c.chunk = 16, c.feature_map = MHLA_FEATURE_NONE;
    float *q = filled((size_t)(n * 4), 1.0f), *k = filled((size_t)(n * 4), 1.0f), *mc = filled(9, 1.0f);
    mhla_diagnose_result r;
    assert_int_equal(mhla_diagnose(&c, q, k, mc, NULL, &r), MHLA_OK);
    double want = 0.0;
    for (int64_t t = 0; t < n; ++t)
        want += log((double)(t + 1)) / (double)n;
    for (int kind = 0; kind < MHLA_ATTENTION_KINDS; ++kind)
        assert_true(fabs(r.entropy[kind] - want) < 1e-12);
    /* lower-triangular rows 1/(t+1): full rank */
    assert_true(r.rank[LIN] == (double)n && r.rank[SM] == (double)n);
    mhla_diagnose_result_free(&r);
    free(q), free(k), free(mc);
}

/* Random inputs reach the paper's bounds: rank(A_linear) = Dk, and rank(A_MHLA) = M * min(n_b, Dk)
 * (a positive Mc, elu1 features) where that is below N; where the bound is N itself (blocks smaller
 * than Dk) it holds, and poor conditioning may leave the numerical rank a little under it. */
static void test_rank_bounds_on_random_inputs(void **state)
{
    (void)state;
    struct { int64_t grid[3], blocks[3], dk; } cases[] = {
        {{120, 1, 1}, {4, 1, 1}, 5},  /* n_b = 30 > Dk: MHLA <= 4 * 5 */
        {{1, 8, 8}, {1, 4, 4}, 6},    /* n_b = 4 < Dk: MHLA <= 16 * 4 = N */
        {{2, 6, 6}, {2, 2, 3}, 3},    /* video */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_config c;
        mhla_config_init(&c);
        c.seq_t = cases[i].grid[0], c.seq_h = cases[i].grid[1], c.seq_w = cases[i].grid[2];
        c.block_t = cases[i].blocks[0], c.block_h = cases[i].blocks[1], c.block_w = cases[i].blocks[2];
        c.dk = c.dv = cases[i].dk, c.heads = 2, c.batch = 2, c.feature_map = MHLA_FEATURE_ELU1;
        const int64_t n = c.seq_t * c.seq_h * c.seq_w, m = c.block_t * c.block_h * c.block_w, nb = n / m;
        const int64_t bound = m * (nb < c.dk ? nb : c.dk);
        float *q = random_floats((size_t)(2 * n * 2 * c.dk), 3), *k = random_floats((size_t)(2 * n * 2 * c.dk), 4);
        float *mc = malloc((size_t)(m * m) * sizeof *mc);
        assert_non_null(mc);
        assert_int_equal(mhla_mixing_init(MHLA_INIT_PAPER, NULL, c.block_t, c.block_h, c.block_w, mc, (size_t)(m * m)),
                         MHLA_OK);
        for (int64_t j = 0; j < m * m; ++j)
            mc[j] += 0.05f; /* the paper init has zeros (the farthest block): keep every block coupled */
        mhla_diagnose_result r;
        assert_int_equal(mhla_diagnose(&c, q, k, mc, NULL, &r), MHLA_OK);
        assert_int_equal(r.rank_bound[LIN], c.dk), assert_int_equal(r.rank_bound[MH], bound < n ? bound : n);
        for (int64_t h = 0; h < 2; ++h) {
            const double mh = r.rank[AT(r, h, MH)];
            if (r.rank[AT(r, h, LIN)] != (double)c.dk || mh > (double)r.rank_bound[MH] ||
                (bound < n && mh != (double)bound) || mh <= (double)c.dk)
                fail_msg("case %zu head %lld: linear rank %.1f (Dk %lld), MHLA rank %.1f (bound %lld)", i, (long long)h,
                         r.rank[AT(r, h, LIN)], (long long)c.dk, r.rank[AT(r, h, MH)], (long long)r.rank_bound[MH]);
            assert_true(r.rank[AT(r, h, SM)] > r.rank[AT(r, h, LIN)]);
            /* the spectrum is sorted and the rank counts what is above the threshold */
            const double *s = r.sigma + AT(r, h, LIN) * r.rows;
            for (int64_t j = 1; j < r.rows; ++j)
                assert_true(s[j] <= s[j - 1]);
            assert_true(s[c.dk - 1] > r.rank_rtol * s[0] && s[c.dk] <= r.rank_rtol * s[0]);
            assert_true(r.entropy[AT(r, h, LIN)] <= log((double)n) + 1e-12);
        }
        mhla_diagnose_result_free(&r);
        free(q), free(k), free(mc);
    }
}

/* Cross-attention with grouped heads: a 10x10 image (100 query rows) attending to 30 tokens in 3
 * blocks, two query heads on one key head. The matrices are 100 x 30: softmax's rank is the 30 keys,
 * linear attention's Dk, MHLA's M_kv * min(Nb_kv, Dk) = 3 * 4 = 12 (reached on random inputs); the
 * spectrum past the keys is zero. */
static void test_cross_attention(void **state)
{
    (void)state;
    mhla_config c;
    mhla_config_init(&c);
    c.seq_h = 10, c.seq_w = 10, c.block_h = 2, c.block_w = 2, c.dk = c.dv = 4, c.heads = 2, c.kv_heads = 1;
    c.kv_seq_t = 30, c.kv_seq_h = c.kv_seq_w = 1, c.kv_block_t = 3, c.kv_block_h = c.kv_block_w = 1;
    c.feature_map = MHLA_FEATURE_ELU1;
    /* Mc of 4 query blocks x 3 key blocks, every column different along the rows (the initializers'
     * matrix for these two grids has equal rows: every query block is as far from a key block as the
     * others, and MHLA's rank would collapse to linear attention's, docs/spec.md) */
    float *q = random_floats(100 * 2 * 4, 5), *k = random_floats(30 * 1 * 4, 6), mc[12];
    for (int j = 0; j < 12; ++j)
        mc[j] = 0.1f + 0.07f * (float)((j * 7) % 12);
    mhla_diagnose_result r;
    if (mhla_diagnose(&c, q, k, mc, NULL, &r) != MHLA_OK)
        fail_msg("mhla_diagnose: %s", mhla_last_message());
    assert_int_equal(r.n, 100), assert_int_equal(r.rows, 100);
    assert_int_equal(r.rank_bound[SM], 30), assert_int_equal(r.rank_bound[LIN], 4), assert_int_equal(r.rank_bound[MH], 12);
    for (int64_t h = 0; h < 2; ++h) {
        if (r.rank[AT(r, h, SM)] != 30.0 || r.rank[AT(r, h, LIN)] != 4.0 || r.rank[AT(r, h, MH)] != 12.0)
            fail_msg("head %lld: ranks softmax %.1f, linear %.1f, MHLA %.1f; expected 30, 4, 12", (long long)h,
                     r.rank[AT(r, h, SM)], r.rank[AT(r, h, LIN)], r.rank[AT(r, h, MH)]);
        const double *s = r.sigma + AT(r, h, SM) * r.rows;
        assert_true(s[29] > r.rank_rtol * s[0] && s[30] <= 1e-6 * s[0]); /* (eigenvalue rounding: ~1e-8) */
        assert_true(r.entropy[AT(r, h, SM)] <= log(30.0) + 1e-12);
    }
    mhla_diagnose_result_free(&r);
    free(q), free(k);
}

/* Beyond max_rows: a sample of distinct rows, the same for the same seed, other for another; off
 * (sample = 0) it is refused naming N and the limit. */
static void test_sampling_and_limit(void **state)
{
    (void)state;
    const int64_t n = 300;
    mhla_config c = diag_config_1d(n, 1, 4, 3);
    float *q = random_floats((size_t)(n * 4), 7), *k = random_floats((size_t)(n * 4), 8);
    float *mc = identity_mixing(3);
    mhla_diagnose_options o;
    mhla_diagnose_options_init(&o);
    assert_int_equal(o.max_rows, MHLA_DIAGNOSE_MAX_ROWS);
    o.max_rows = 64;
    mhla_diagnose_result a, b, d;
    assert_int_equal(mhla_diagnose(&c, q, k, mc, &o, &a), MHLA_OK);
    assert_int_equal(a.rows, 64), assert_true(a.sampled);
    assert_int_equal(mhla_diagnose(&c, q, k, mc, &o, &b), MHLA_OK);
    assert_memory_equal(a.sigma, b.sigma, (size_t)(3 * 64) * sizeof(double));
    o.seed = 2;
    assert_int_equal(mhla_diagnose(&c, q, k, mc, &o, &d), MHLA_OK);
    assert_true(memcmp(a.sigma, d.sigma, (size_t)(3 * 64) * sizeof(double)) != 0);
    mhla_diagnose_result_free(&a), mhla_diagnose_result_free(&b), mhla_diagnose_result_free(&d);
    o.sample = 0;
    assert_int_equal(mhla_diagnose(&c, q, k, mc, &o, &a), MHLA_ERR_INVALID_SHAPE);
    assert_non_null(strstr(mhla_last_message(), "N = 300 tokens is over the limit of 64"));
    assert_null(a.rank); /* zeroed on failure */
    free(q), free(k), free(mc);
}

static void expect_refused(const mhla_config *c, const float *q, const float *k, const float *mc,
                           const mhla_diagnose_options *o, mhla_status want, const char *text)
{
    mhla_diagnose_result r;
    const mhla_status st = mhla_diagnose(c, q, k, mc, o, &r);
    if (st != want || !strstr(mhla_last_message(), text))
        fail_msg("expected %s '%s', got %s '%s'", mhla_status_name(want), text, mhla_status_name(st),
                 mhla_last_message());
    assert_null(r.rank);
}

static void test_refusals(void **state)
{
    (void)state;
    mhla_config c = diag_config_1d(32, 1, 4, 2);
    float *q = random_floats(128, 1), *k = random_floats(128, 2), *mc = identity_mixing(2);
    mhla_diagnose_options o;
    mhla_diagnose_options_init(&o);
    expect_refused(&c, NULL, k, mc, NULL, MHLA_ERR_INVALID_ARGUMENT, "must not be NULL");
    assert_int_equal(mhla_diagnose(&c, q, k, mc, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    o.rank_rtol = 0.0;
    expect_refused(&c, q, k, mc, &o, MHLA_ERR_INVALID_ARGUMENT, "rank_rtol = 0");
    mhla_diagnose_options_init(&o);
    o.max_rows = 0;
    expect_refused(&c, q, k, mc, &o, MHLA_ERR_INVALID_ARGUMENT, "max_rows = 0");
    q[77] = NAN;
    expect_refused(&c, q, k, mc, NULL, MHLA_ERR_INVALID_ARGUMENT, "q[77] = nan is not finite");
    q[77] = 0.5f;
    mc[3] = INFINITY;
    expect_refused(&c, q, k, mc, NULL, MHLA_ERR_INVALID_ARGUMENT, "mixing[3] = inf");
    mc[3] = 1.0f;
    c.block_t = 3; /* 32 tokens in 3 blocks: the configuration's own message */
    expect_refused(&c, q, k, mc, NULL, MHLA_ERR_INVALID_SHAPE, "is not divisible by block_t = 3");
    mhla_config v;
    mhla_config_init_causal(&v);
    v.seq_t = 32, v.dk = v.dv = 4, v.varlen = 1;
    expect_refused(&v, q, k, mc, NULL, MHLA_ERR_INVALID_ARGUMENT, "varlen");
    mhla_diagnose_result_free(NULL);
    free(q), free(k), free(mc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_rows_closed_form), cmocka_unit_test(test_causal_rows),
        cmocka_unit_test(test_rank_bounds_on_random_inputs), cmocka_unit_test(test_sampling_and_limit),
        cmocka_unit_test(test_refusals), cmocka_unit_test(test_cross_attention),
    };
    return run_group("diagnose", tests, NULL, NULL);
}
