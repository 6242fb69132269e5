/* The backward reference (host/verify/reference_backward.c) against central finite differences of the
 * double forward (host/verify/reference.c) in every mode, and at M = 1 against plain linear-attention
 * gradients written here in matrix form. No device. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Finite differences agree with the analytic gradient to this (relative to the gradient's largest
 * element): h = 1e-4 leaves an O(h^2) truncation below 1e-7 on these inputs, and
 * the rounding of L (about 1e-15 relative) stays far below it. */
#define FD_TOL 1e-5
#define FD_STEP 1e-4

typedef struct problem {
    mhla_config cfg;
    float *q, *k, *v, *mix, *dout;
    size_t nq, nv, nm;
    int64_t rows;
    const int32_t *cu;
    size_t nseq;
} problem;

/* Inputs away from relu's kink (|x| >= 0.05, as finite differences need), positive where the map
 * is `none` (a caller's own map), so that no paper or official denominator comes near 0. */
static void make(problem *p, uint32_t seed)
{
    mhla_config *c = &p->cfg;
    const int64_t n = c->seq_t * c->seq_h * c->seq_w;
    p->nq = (size_t)(c->batch * n * c->heads * c->dk);
    p->nv = (size_t)(c->batch * n * c->heads * c->dv);
    p->rows = c->causal ? (c->mixing_rows ? c->mixing_rows : (n + c->chunk - 1) / c->chunk)
                        : c->block_t * c->block_h * c->block_w;
    p->nm = (size_t)(p->rows * p->rows);
    p->q = malloc(p->nq * sizeof(float));
    p->k = malloc(p->nq * sizeof(float));
    p->v = malloc(p->nv * sizeof(float));
    p->dout = malloc(p->nv * sizeof(float));
    p->mix = malloc(p->nm * sizeof(float));
    assert_true(p->q && p->k && p->v && p->dout && p->mix);
    const float lo = c->feature_map == MHLA_FEATURE_NONE ? 0.1f : -0.4f;
    fill_uniform(p->q, p->nq, seed, lo, 1.0f);
    fill_uniform(p->k, p->nq, seed + 1, lo, 1.0f);
    for (size_t i = 0; i < p->nq; ++i) {
        if (fabsf(p->q[i]) < 0.05f)
            p->q[i] += p->q[i] < 0 ? -0.05f : 0.05f;
        if (fabsf(p->k[i]) < 0.05f)
            p->k[i] += p->k[i] < 0 ? -0.05f : 0.05f;
    }
    fill_uniform(p->v, p->nv, seed + 2, -1.0f, 1.0f);
    fill_uniform(p->dout, p->nv, seed + 3, -1.0f, 1.0f);
    fill_uniform(p->mix, p->nm, seed + 4, 0.1f, 1.0f);
    if (c->causal) /* never read: NaN proves it */
        for (int64_t i = 0; i < p->rows; ++i)
            for (int64_t j = i + 1; j < p->rows; ++j)
                p->mix[i * p->rows + j] = NAN;
}

static void release(problem *p)
{
    free(p->q), free(p->k), free(p->v), free(p->mix), free(p->dout);
}

/* L = sum dout . O with the double forward. */
static double loss(const problem *p, double *out)
{
    mhla_status st = p->cu ? mhla_reference_forward_varlen(&p->cfg, p->q, p->k, p->v, p->mix, p->cu, p->nseq, out)
                           : mhla_reference_forward(&p->cfg, p->q, p->k, p->v, p->mix, out);
    if (st != MHLA_OK)
        fail_msg("forward: %s: %s", mhla_status_name(st), mhla_last_message());
    double l = 0.0;
    for (size_t i = 0; i < p->nv; ++i)
        l += (double)p->dout[i] * out[i];
    return l;
}

/* Central difference of L along x[i], with the step the float inputs really took. */
static double fd(const problem *p, float *x, size_t i, double *out)
{
    const float x0 = x[i];
    const float xp = (float)(x0 + FD_STEP), xm = (float)(x0 - FD_STEP);
    x[i] = xp;
    const double lp = loss(p, out);
    x[i] = xm;
    const double lm = loss(p, out);
    x[i] = x0;
    return (lp - lm) / ((double)xp - (double)xm);
}

/* Relative error of a against b; +Inf for any NaN or Inf in either (a gradient must be finite). */
static double rel_err(const double *a, const double *b, size_t n) { return finite_rel_err_double(a, b, n, "gradient"); }

/* Checks all four gradients of problem p against finite differences; returns the worst error. */
static double check_fd(problem *p, const char *name)
{
    double *out = malloc(p->nv * sizeof(double));
    double *g[4], *f[4];
    float *x[4] = {p->q, p->k, p->v, p->mix};
    const size_t n[4] = {p->nq, p->nq, p->nv, p->nm};
    for (int j = 0; j < 4; ++j) {
        g[j] = malloc(n[j] * sizeof(double));
        f[j] = calloc(n[j], sizeof(double));
        assert_true(g[j] && f[j]);
    }
    mhla_status st = p->cu ? mhla_reference_backward_varlen(&p->cfg, p->q, p->k, p->v, p->mix, p->cu, p->nseq,
                                                            p->dout, g[0], g[1], g[2], g[3])
                           : mhla_reference_backward(&p->cfg, p->q, p->k, p->v, p->mix, p->dout, g[0], g[1], g[2],
                                                     g[3]);
    if (st != MHLA_OK)
        fail_msg("%s: backward: %s: %s", name, mhla_status_name(st), mhla_last_message());
    for (int j = 0; j < 4; ++j)
        for (size_t i = 0; i < n[j]; ++i) {
            if (j == 3 && isnan(p->mix[i])) { /* above a causal diagonal: never read, no gradient */
                assert_true(g[3][i] == 0.0);
                continue;
            }
            f[j][i] = fd(p, x[j], i, out);
        }
    double worst = 0.0;
    static const char *names[4] = {"dq", "dk", "dv", "dmixing"};
    char line[256];
    int len = snprintf(line, sizeof line, "%-34s", name);
    for (int j = 0; j < 4; ++j) {
        const double e = rel_err(g[j], f[j], n[j]);
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1e", names[j], e);
        worst = fmax(worst, e);
        if (!(e <= FD_TOL)) {
            for (size_t i = 0; i < n[j]; ++i)
                if (fabs(g[j][i] - f[j][i]) > FD_TOL * 0.1)
                    print_message("  %s[%zu]: analytic %.9g, differences %.9g, x %.9g\n", names[j], i, g[j][i], f[j][i], x[j][i]);
            fail_msg("%s: %s differs from finite differences by %.3g (max relative)", name, names[j], e);
        }
    }
    print_message("fd %s\n", line);
    for (int j = 0; j < 4; ++j)
        free(g[j]), free(f[j]);
    free(out);
    return worst;
}

static const mhla_feature_map maps[] = {MHLA_FEATURE_NONE, MHLA_FEATURE_RELU, MHLA_FEATURE_RELU_EPS,
                                        MHLA_FEATURE_ELU1};
static const mhla_normalizer norms[] = {MHLA_NORMALIZER_NONE, MHLA_NORMALIZER_PAPER, MHLA_NORMALIZER_OFFICIAL};

/* Non-causal 1D, 2D and 3D grids, every normalizer and feature map, both layouts. */
static void test_fd_non_causal(void **state)
{
    (void)state;
    /* grid (T, Hs, Ws) and blocks (bt, bh, bw) */
    static const int64_t grids[][6] = {{6, 1, 1, 3, 1, 1}, {1, 4, 3, 1, 2, 3}, {2, 2, 4, 2, 1, 2}};
    for (size_t gi = 0; gi < 3; ++gi)
        for (size_t ni = 0; ni < 3; ++ni)
            for (size_t fi = 0; fi < 4; ++fi) {
                problem p = {0};
                mhla_config_init(&p.cfg);
                mhla_config *c = &p.cfg;
                c->batch = 1 + (gi == 1);
                c->heads = 2;
                c->seq_t = grids[gi][0], c->seq_h = grids[gi][1], c->seq_w = grids[gi][2];
                c->block_t = grids[gi][3], c->block_h = grids[gi][4], c->block_w = grids[gi][5];
                c->dk = 3, c->dv = 2;
                c->scale = 0.8f;
                c->normalizer = norms[ni];
                c->feature_map = maps[fi];
                c->feature_eps = 0.01f;
                c->layout = fi % 2 ? MHLA_LAYOUT_BHND : MHLA_LAYOUT_BNHD;
                make(&p, (uint32_t)(gi * 100 + ni * 10 + fi));
                char name[96];
                snprintf(name, sizeof name, "%zuD %s %s", gi + 1, mhla_normalizer_name(c->normalizer),
                         mhla_feature_map_name(c->feature_map));
                check_fd(&p, name);
                release(&p);
            }
}

/* Causal chunk form (none and paper, every feature map): a partial last chunk, and more rows of Mc
 * than the sequence reaches (their gradient is 0); then packed varlen sequences with an empty one. */
static void test_fd_causal(void **state)
{
    (void)state;
    for (size_t ni = 0; ni < 2; ++ni)
        for (size_t fi = 0; fi < 4; ++fi) {
            problem p = {0};
            p.cfg = config_causal(2, 2, 8, 3, 3, 2);
            p.cfg.mixing_rows = 4;
            p.cfg.normalizer = ni ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
            p.cfg.feature_map = maps[fi];
            p.cfg.feature_eps = 0.01f;
            make(&p, (uint32_t)(500 + ni * 10 + fi));
            char name[96];
            snprintf(name, sizeof name, "causal %s %s", mhla_normalizer_name(p.cfg.normalizer),
                     mhla_feature_map_name(p.cfg.feature_map));
            check_fd(&p, name);
            release(&p);
        }
    static const int32_t cu[] = {0, 4, 4, 11};
    for (size_t ni = 0; ni < 2; ++ni) {
        problem p = {0};
        p.cfg = config_causal(1, 2, 11, 3, 3, 4);
        p.cfg.varlen = 1;
        p.cfg.mixing_rows = 3;
        p.cfg.normalizer = ni ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        p.cu = cu;
        p.nseq = 3;
        make(&p, (uint32_t)(600 + ni));
        check_fd(&p, ni ? "varlen paper relu" : "varlen none relu");
        release(&p);
    }
}

/* M = 1: plain linear attention, o_t = c q~_t^T S / (c q~_t . z + eps) with S = sum k~ v^T and
 * z = sum k~ (the denominator 1 for `none`), its gradients in matrix form. */
static void linear_attention_grads(const problem *p, double *dq, double *dk, double *dv, double *dc)
{
    const mhla_config *c = &p->cfg;
    const int64_t N = c->seq_t, Dk = c->dk, Dv = c->dv;
    const double cm = p->mix[0], eps = c->eps, sc = c->scale;
    const int norm = c->normalizer != MHLA_NORMALIZER_NONE;
    assert_true(c->batch == 1 && c->heads == 1 && c->feature_map == MHLA_FEATURE_RELU && Dk <= 8 && Dv <= 8);
    double S[8][8] = {{0}}, z[8] = {0}, dS[8][8] = {{0}}, dz[8] = {0};
    double Q[64][8], K[64][8];
    assert_true(N <= 64);
    for (int64_t t = 0; t < N; ++t)
        for (int64_t d = 0; d < Dk; ++d) {
            Q[t][d] = sc * fmax(p->q[t * Dk + d], 0.0);
            K[t][d] = fmax(p->k[t * Dk + d], 0.0);
            z[d] += K[t][d];
            for (int64_t e = 0; e < Dv; ++e)
                S[d][e] += K[t][d] * p->v[t * Dv + e];
        }
    *dc = 0.0;
    for (int64_t t = 0; t < N; ++t) {
        double num[8] = {0}, den = norm ? eps : 1.0, od = 0.0, gq[8];
        for (int64_t d = 0; d < Dk; ++d) {
            if (norm)
                den += cm * Q[t][d] * z[d];
            for (int64_t e = 0; e < Dv; ++e)
                num[e] += cm * Q[t][d] * S[d][e];
        }
        for (int64_t e = 0; e < Dv; ++e) {
            gq[e] = p->dout[t * Dv + e] / den;
            od += p->dout[t * Dv + e] * num[e] / den;
        }
        const double r = norm ? -od / den : 0.0;
        for (int64_t d = 0; d < Dk; ++d) {
            double acc = r * cm * z[d];
            for (int64_t e = 0; e < Dv; ++e) {
                acc += cm * S[d][e] * gq[e];
                dS[d][e] += Q[t][d] * gq[e];
            }
            dz[d] += r * Q[t][d];
            dq[t * Dk + d] = acc * sc * (p->q[t * Dk + d] > 0);
        }
    }
    for (int64_t d = 0; d < Dk; ++d) {
        *dc += dz[d] * z[d];
        for (int64_t e = 0; e < Dv; ++e)
            *dc += dS[d][e] * S[d][e];
    }
    for (int64_t s = 0; s < N; ++s) {
        for (int64_t d = 0; d < Dk; ++d) {
            double acc = cm * dz[d];
            for (int64_t e = 0; e < Dv; ++e)
                acc += cm * dS[d][e] * p->v[s * Dv + e];
            dk[s * Dk + d] = acc * (p->k[s * Dk + d] > 0);
        }
        for (int64_t e = 0; e < Dv; ++e) {
            double acc = 0.0;
            for (int64_t d = 0; d < Dk; ++d)
                acc += cm * dS[d][e] * K[s][d];
            dv[s * Dv + e] = acc;
        }
    }
}

static void test_m1_is_linear_attention(void **state)
{
    (void)state;
    for (size_t ni = 0; ni < 3; ++ni) {
        problem p = {0};
        p.cfg = config_1d(1, 1, 13, 1, 5, 3);
        p.cfg.feature_map = MHLA_FEATURE_RELU;
        p.cfg.scale = 0.7f;
        p.cfg.normalizer = norms[ni];
        make(&p, (uint32_t)(700 + ni));
        p.mix[0] = 0.6f;
        double *g[3], *w[3], gm, wm;
        const size_t n[3] = {p.nq, p.nq, p.nv};
        for (int j = 0; j < 3; ++j) {
            g[j] = malloc(n[j] * sizeof(double));
            w[j] = malloc(n[j] * sizeof(double));
        }
        assert_int_equal(mhla_reference_backward(&p.cfg, p.q, p.k, p.v, p.mix, p.dout, g[0], g[1], g[2], &gm),
                         MHLA_OK);
        linear_attention_grads(&p, w[0], w[1], w[2], &wm);
        for (int j = 0; j < 3; ++j) {
            const double e = rel_err(g[j], w[j], n[j]);
            if (!(e <= 1e-12))
                fail_msg("M = 1 %s: gradient %d differs from linear attention's by %.3g", mhla_normalizer_name(
                         p.cfg.normalizer), j, e);
            free(g[j]), free(w[j]);
        }
        if (!(fabs(gm - wm) <= 1e-12 * fmax(fabs(wm), 1.0))) /* paper: dMc is near 0 (scale-free) */
            fail_msg("M = 1 %s: dmixing %.17g, linear attention %.17g", mhla_normalizer_name(p.cfg.normalizer), gm, wm);
        release(&p);
    }
}

/* docs/spec.md "Backward": relu and relu-eps have derivative 0 at x = 0, so the reference's dq (dk) is
 * exactly 0 wherever q (k) is exactly 0: about a third of their elements, at random places (a whole
 * column of k at 0 would zero its gradient whatever the derivative); non-causal and causal, the none and
 * paper normalizers. A derivative tested as x >= 0 gives 1 there and fails. */
static void test_zero_derivative_at_zero(void **state)
{
    (void)state;
    for (size_t causal = 0; causal < 2; ++causal)
        for (size_t fi = 1; fi <= 2; ++fi)
            for (size_t ni = 0; ni < 2; ++ni) {
                problem p = {0};
                if (causal) {
                    p.cfg = config_causal(2, 2, 8, 3, 3, 2);
                    p.cfg.mixing_rows = 3;
                } else {
                    p.cfg = config_1d(2, 2, 6, 3, 3, 2);
                }
                p.cfg.feature_map = maps[fi];
                p.cfg.normalizer = norms[ni];
                p.cfg.feature_eps = 0.01f;
                make(&p, (uint32_t)(800 + causal * 10 + fi * 2 + ni));
                float *u = malloc(p.nq * sizeof *u);
                double *g[3];
                const size_t n[3] = {p.nq, p.nq, p.nv};
                for (int j = 0; j < 3; ++j)
                    g[j] = malloc(n[j] * sizeof(double));
                assert_true(u && g[0] && g[1] && g[2]);
                for (int j = 0; j < 2; ++j) {
                    fill_uniform(u, p.nq, (uint32_t)(900 + causal * 10 + fi * 2 + ni + (size_t)j * 100), 0.0f, 3.0f);
                    for (size_t i = 0; i < p.nq; ++i)
                        if (u[i] < 1.0f)
                            (j ? p.k : p.q)[i] = 0.0f;
                }
                assert_int_equal(mhla_reference_backward(&p.cfg, p.q, p.k, p.v, p.mix, p.dout, g[0], g[1], g[2], NULL),
                                 MHLA_OK);
                size_t zeros = 0, nonzero = 0;
                for (int j = 0; j < 2; ++j)
                    for (size_t i = 0; i < p.nq; ++i) {
                        if ((j ? p.k : p.q)[i] != 0.0f) {
                            nonzero += g[j][i] != 0.0;
                            continue;
                        }
                        ++zeros;
                        if (g[j][i] != 0.0)
                            fail_msg("%s %s %s: %s[%zu] = 0 but its gradient is %a", causal ? "causal" : "1D",
                                     mhla_normalizer_name(p.cfg.normalizer), mhla_feature_map_name(p.cfg.feature_map),
                                     j ? "k" : "q", i, g[j][i]);
                    }
                assert_true(zeros > 0 && nonzero > 0); /* both kinds were there to tell apart */
                for (int j = 0; j < 3; ++j)
                    free(g[j]);
                free(u);
                release(&p);
            }
}

static void test_backward_reference_rejects(void **state)
{
    (void)state;
    problem p = {0};
    p.cfg = config_1d(1, 1, 4, 2, 2, 2);
    make(&p, 9);
    double out[16];
    assert_int_equal(mhla_reference_backward(&p.cfg, p.q, p.k, p.v, p.mix, NULL, out, out, out, NULL),
                     MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "NULL"));
    p.cfg.block_t = 3;
    assert_int_equal(mhla_reference_backward(&p.cfg, p.q, p.k, p.v, p.mix, p.dout, out, out, out, NULL),
                     MHLA_ERR_INVALID_SHAPE);
    assert_true(mhla_reference_backward_tolerance(MHLA_DTYPE_F32) == 1e-4);
    assert_true(mhla_reference_backward_tolerance(MHLA_DTYPE_F16) == 5e-3);
    assert_true(mhla_reference_backward_tolerance(MHLA_DTYPE_BF16) == 3e-2);
    release(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fd_non_causal),
        cmocka_unit_test(test_fd_causal),
        cmocka_unit_test(test_m1_is_linear_attention),
        cmocka_unit_test(test_zero_derivative_at_zero),
        cmocka_unit_test(test_backward_reference_rejects),
    };
    return run_group("reference_backward", tests, NULL, NULL);
}
