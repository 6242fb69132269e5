/* A training loop in miniature: SGD on the mixing matrix Mc and on a small value projection Wv, on
 * synthetic data, with mhla_forward_host() and mhla_backward_host(). A "teacher" (another Mc and
 * Wv) makes the targets; the "student" starts elsewhere and its loss goes down step by step.
 * Exit status 0 when the last loss is below the first. */
#include <mhla.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N 256   /* tokens of one 1D sequence */
#define M 4     /* blocks of 64 tokens */
#define D 16    /* head dimension (Dk = Dv) and input width */
#define STEPS 8
#define LR 50.0f /* the loss is a mean over N*D outputs: its gradients are small */

static void fill(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; ++i) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = lo + (hi - lo) * (float)((seed >> 40) & 0xFFFFFF) / 16777216.0f;
    }
}

/* y[N x D] = x[N x D] * w[D x D] */
static void project(const float *x, const float *w, float *y)
{
    for (int t = 0; t < N; ++t)
        for (int j = 0; j < D; ++j) {
            float a = 0.0f;
            for (int i = 0; i < D; ++i)
                a += x[t * D + i] * w[i * D + j];
            y[t * D + j] = a;
        }
}

int main(void)
{
    mhla_context *ctx = NULL;
    mhla_plan *plan = NULL;
    mhla_config cfg;
    mhla_config_init(&cfg); /* non-causal, relu-eps, paper normalizer */
    cfg.seq_t = N, cfg.block_t = M, cfg.dk = D, cfg.dv = D;
    static float x[N * D], q[N * D], k[N * D], v[N * D], o[N * D], target[N * D], dout[N * D];
    static float dq[N * D], dk[N * D], dv[N * D];
    float wv[D * D], wv_teacher[D * D], mc[M * M], mc_teacher[M * M], dmc[M * M], dwv[D * D];
    int rc = 1;
    mhla_status st;

    fill(x, N * D, 1, -1.0f, 1.0f);
    fill(q, N * D, 2, -1.0f, 1.0f); /* q and k stay fixed: their gradients are computed, not used */
    fill(k, N * D, 3, -1.0f, 1.0f);
    fill(wv_teacher, D * D, 4, -0.5f, 0.5f);
    fill(wv, D * D, 5, -0.5f, 0.5f);
    if ((st = mhla_mixing_init(MHLA_INIT_LOCAL, NULL, M, 1, 1, mc_teacher, M * M)) != MHLA_OK ||
        (st = mhla_mixing_init(MHLA_INIT_LINEAR, NULL, M, 1, 1, mc, M * M)) != MHLA_OK)
        goto fail;
    if ((st = mhla_context_create(NULL, &ctx)) != MHLA_OK || (st = mhla_plan_create(ctx, &cfg, &plan)) != MHLA_OK)
        goto fail;
    project(x, wv_teacher, v);
    if ((st = mhla_forward_host(plan, q, k, v, mc_teacher, target)) != MHLA_OK)
        goto fail;

    double first = 0.0, loss = 0.0;
    for (int step = 0; step < STEPS; ++step) {
        /* forward: v = x Wv, O = MHLA(q, k, v; Mc); loss = mean (O - target)^2 / 2 */
        project(x, wv, v);
        if ((st = mhla_forward_host(plan, q, k, v, mc, o)) != MHLA_OK)
            goto fail;
        loss = 0.0;
        for (int i = 0; i < N * D; ++i) {
            const float diff = o[i] - target[i];
            loss += 0.5 * (double)diff * diff / (N * D);
            dout[i] = diff / (N * D); /* dL/dO */
        }
        if (step == 0)
            first = loss;
        printf("step %d  loss %.6e\n", step, loss);
        /* backward: dq, dk, dv and dMc; then dWv = x^T dv through the projection */
        if ((st = mhla_backward_host(plan, q, k, v, mc, dout, dq, dk, dv, dmc)) != MHLA_OK)
            goto fail;
        for (int i = 0; i < D; ++i)
            for (int j = 0; j < D; ++j) {
                float a = 0.0f;
                for (int t = 0; t < N; ++t)
                    a += x[t * D + i] * dv[t * D + j];
                dwv[i * D + j] = a;
            }
        /* SGD */
        for (int i = 0; i < M * M; ++i)
            mc[i] -= LR * dmc[i];
        for (int i = 0; i < D * D; ++i)
            wv[i] -= LR * dwv[i];
    }
    printf("loss %.6e -> %.6e over %d steps: %s\n", first, loss, STEPS, loss < first ? "down" : "NOT down");
    rc = loss < first ? 0 : 1;
    goto done;
fail:
    fprintf(stderr, "train_step: %s: %s\n", mhla_status_name(st),
            ctx && *mhla_context_message(ctx) ? mhla_context_message(ctx) : mhla_last_message());
done:
    mhla_plan_destroy(plan);
    mhla_context_destroy(ctx);
    return rc;
}
