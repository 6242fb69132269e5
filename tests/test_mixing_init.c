/* Mixing-matrix initializers against values computed by hand from docs/spec.md
 * "Mixing-matrix initializers", plus their normalization properties on a 3D grid and their errors. No
 * device needed. */
#include <mhla.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#define TOL 1e-6

static void expect_matrix(mhla_init_kind kind, const double *param, int64_t bt, int64_t bh, int64_t bw,
                          const double *want, int64_t m)
{
    float got[64];
    assert_true(m * m <= 64);
    assert_int_equal(mhla_mixing_init(kind, param, bt, bh, bw, got, (size_t)(m * m)), MHLA_OK);
    for (int64_t i = 0; i < m * m; ++i)
        if (fabs(got[i] - want[i]) > TOL)
            fail_msg("%s: entry (%lld,%lld) = %.9f, want %.9f", mhla_init_kind_name(kind), (long long)(i / m),
                     (long long)(i % m), (double)got[i], want[i]);
}

/* 1D, M = 3: d = |i-j| in {0,1,2}, dmax = 2. */
static void test_linear_1d(void **state)
{
    (void)state;
    /* 1 - d/2 = [[1,.5,0],[.5,1,.5],[0,.5,1]]; column sums 1.5, 2, 1.5 */
    const double want[] = {2.0 / 3, 0.25, 0, 1.0 / 3, 0.5, 1.0 / 3, 0, 0.25, 2.0 / 3};
    expect_matrix(MHLA_INIT_LINEAR, NULL, 3, 1, 1, want, 3);
}

/* 2D 2x2 grid: d in {0, 1, sqrt 2}, dmax = sqrt 2; 3D 2x1x2 is the same geometry. */
static void test_linear_2d_3d(void **state)
{
    (void)state;
    const double a = 0.630601937481871, b = 0.184699031259067; /* 1/(1+2(1-1/sqrt2)), (1-1/sqrt2)/... */
    const double want[] = {a, b, b, 0, b, a, 0, b, b, 0, a, b, 0, b, b, a};
    expect_matrix(MHLA_INIT_LINEAR, NULL, 1, 2, 2, want, 4);
    expect_matrix(MHLA_INIT_LINEAR, NULL, 2, 1, 2, want, 4);
}

static void test_cos_1d(void **state)
{
    (void)state;
    /* cos(d/2 * pi/4): 1, cos(pi/8), cos(pi/4); columns normalized */
    const double want[] = {0.380085596, 0.324423349, 0.268761102, 0.351153302, 0.351153302,
                           0.351153302, 0.268761102, 0.324423349, 0.380085596};
    expect_matrix(MHLA_INIT_COS, NULL, 3, 1, 1, want, 3);
}

static void test_exp_sigma(void **state)
{
    (void)state;
    const double def[] = {0.582570206, 0.417429794, 0.417429794, 0.582570206}; /* sigma 3: exp(-1/3) */
    expect_matrix(MHLA_INIT_EXP, NULL, 2, 1, 1, def, 2);
    const double one = 1.0;
    const double s1[] = {0.731058579, 0.268941421, 0.268941421, 0.731058579}; /* sigma 1: exp(-1) */
    expect_matrix(MHLA_INIT_EXP, &one, 1, 1, 2, s1, 2);
}

/* gaussian is not normalized: the diagonal stays exactly 1. */
static void test_gaussian_not_normalized(void **state)
{
    (void)state;
    const double n1 = 0.105399225, n2 = 0.011108997; /* exp(-1/(2 (sqrt2/3)^2)), exp(-2/(...)) */
    const double want[] = {1, n1, n1, n2, n1, 1, n2, n1, n1, n2, 1, n1, n2, n1, n1, 1};
    expect_matrix(MHLA_INIT_GAUSSIAN, NULL, 1, 2, 2, want, 4);
}

static void test_local(void **state)
{
    (void)state;
    /* 1D M = 4, thres 1.5: neighbours within 1; column counts 2, 3, 3, 2 */
    const double h = 0.5, t = 1.0 / 3;
    const double want[] = {h, t, 0, 0, h, t, t, 0, 0, t, t, h, 0, 0, t, h};
    expect_matrix(MHLA_INIT_LOCAL, NULL, 4, 1, 1, want, 4);
    /* 2x2 grid, thres 1: the diagonal neighbour (sqrt 2) is out; three per column */
    const double one = 1.0;
    const double w2[] = {t, t, t, 0, t, t, 0, t, t, 0, t, t, 0, t, t, t};
    expect_matrix(MHLA_INIT_LOCAL, &one, 1, 2, 2, w2, 4);
}

/* paper: 1 - d(i,j)/max_k d(i,k), rows normalized. */
static void test_paper_rows(void **state)
{
    (void)state;
    /* row 0: 1, .5, 0 -> /1.5; row 1: max distance 1 -> 0, 1, 0; row 2 mirrors row 0 */
    const double want[] = {2.0 / 3, 1.0 / 3, 0, 0, 1, 0, 0, 1.0 / 3, 2.0 / 3};
    expect_matrix(MHLA_INIT_PAPER, NULL, 3, 1, 1, want, 3);
}

static void test_causal_uniform(void **state)
{
    (void)state;
    const double t = 1.0 / 3;
    const double want[] = {1, 0, 0, 0.5, 0.5, 0, t, t, t};
    expect_matrix(MHLA_INIT_CAUSAL_UNIFORM, NULL, 3, 1, 1, want, 3);
}

/* M = 1 gives [[1]] for every kind (the released code divides by zero). */
static void test_single_block(void **state)
{
    (void)state;
    const double one[] = {1.0};
    for (int kind = MHLA_INIT_LINEAR; kind <= MHLA_INIT_CAUSAL_UNIFORM; ++kind)
        expect_matrix((mhla_init_kind)kind, NULL, 1, 1, 1, one, 1);
}

/* On a 3D grid, the column-normalized kinds have unit column sums, paper unit row sums, and all
 * entries are in [0, 1]. */
static void test_normalization_3d(void **state)
{
    (void)state;
    enum { M = 2 * 3 * 4 };
    static float w[M * M];
    for (int kind = MHLA_INIT_LINEAR; kind <= MHLA_INIT_CAUSAL_UNIFORM; ++kind) {
        assert_int_equal(mhla_mixing_init((mhla_init_kind)kind, NULL, 2, 3, 4, w, M * M), MHLA_OK);
        for (int i = 0; i < M; ++i) {
            double row = 0, col = 0;
            for (int j = 0; j < M; ++j) {
                assert_true(w[i * M + j] >= 0.0f && w[i * M + j] <= 1.0f);
                row += w[i * M + j];
                col += w[j * M + i];
            }
            if (kind == MHLA_INIT_PAPER || kind == MHLA_INIT_CAUSAL_UNIFORM)
                assert_true(fabs(row - 1.0) < 1e-5);
            else if (kind != MHLA_INIT_GAUSSIAN)
                assert_true(fabs(col - 1.0) < 1e-5);
            else
                assert_true(w[i * M + i] == 1.0f);
        }
    }
}

static void test_errors(void **state)
{
    (void)state;
    float w[16];
    const double bad = -1.0, nan_param = NAN, zero = 0.0;
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LINEAR, NULL, 2, 2, 1, NULL, 16), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_mixing_init((mhla_init_kind)42, NULL, 2, 2, 1, w, 16), MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "42"));
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LINEAR, NULL, 0, 2, 1, w, 16), MHLA_ERR_INVALID_SHAPE);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LINEAR, NULL, 2, -3, 1, w, 16), MHLA_ERR_INVALID_SHAPE);
    assert_non_null(strstr(mhla_last_message(), "-3"));
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LINEAR, NULL, 3, 2, 1, w, 16), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_non_null(strstr(mhla_last_message(), "36"));
    assert_int_equal(mhla_mixing_init(MHLA_INIT_EXP, &bad, 2, 1, 1, w, 16), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_EXP, &zero, 2, 1, 1, w, 16), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LOCAL, &nan_param, 2, 1, 1, w, 16), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LOCAL, &bad, 2, 1, 1, w, 16), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LOCAL, &zero, 2, 1, 1, w, 16), MHLA_OK); /* identity */
    assert_true(w[0] == 1.0f && w[1] == 0.0f);
}

static void test_kind_names(void **state)
{
    (void)state;
    const char *names[] = {"linear", "cos", "exp", "gaussian", "local", "paper", "causal-uniform"};
    for (int i = 0; i < 7; ++i) {
        mhla_init_kind k;
        assert_int_equal(mhla_init_kind_parse(names[i], &k), MHLA_OK);
        assert_int_equal(k, i);
        assert_string_equal(mhla_init_kind_name(k), names[i]);
    }
    mhla_init_kind k;
    assert_int_equal(mhla_init_kind_parse("gauss", &k), MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "'gauss'"));
    assert_null(mhla_init_kind_name((mhla_init_kind)99));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_1d),          cmocka_unit_test(test_linear_2d_3d),
        cmocka_unit_test(test_cos_1d),             cmocka_unit_test(test_exp_sigma),
        cmocka_unit_test(test_gaussian_not_normalized), cmocka_unit_test(test_local),
        cmocka_unit_test(test_paper_rows),         cmocka_unit_test(test_causal_uniform),
        cmocka_unit_test(test_single_block),       cmocka_unit_test(test_normalization_3d),
        cmocka_unit_test(test_errors),             cmocka_unit_test(test_kind_names),
    };
    return cmocka_run_group_tests_name("mixing_init", tests, NULL, NULL);
}
