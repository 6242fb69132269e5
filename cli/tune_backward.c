/* `mhla tune`'s backward stages (cmd_tune.c's `backward`, the causal backward, and `tiled-backward`,
 * the non-causal one of tiled plans): the fields only the backward reads (bct_fuse, dg_parts,
 * bwd_acc, dmix_tm, dm_t, ...) never change a forward, so the forward's self-test cannot tell a
 * wrong candidate; each is checked here on the backward itself against the double reference, and
 * timed on a plan that recomputes the forward's summaries, as a plain mhla_backward() does. */
#include "tune_backward.h"

#include "cli.h"

#include <mhla_reference.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

void tune_fill_range(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = lo + (hi - lo) * (float)((s >> 40) & 0xFFFFFF) / 16777216.0f;
    }
}

void tune_fill(float *x, size_t n, uint64_t seed) { tune_fill_range(x, n, seed, 0.05f, 1.0f); }

/* The gradients' order: dq, dk, dv, dMc, and the tensors they are shaped like. */
static const mhla_tensor grad_shape[4] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_MIXING};

mhla_status tune_backward_check(mhla_context *ctx, const mhla_config *small, int *passed)
{
    enum { Q, K, V, MIX, DOUT, IN_COUNT };
    const mhla_tensor in_shape[IN_COUNT] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_MIXING,
                                            MHLA_TENSOR_OUT};
    float *in[IN_COUNT] = {NULL}, *got[4] = {NULL};
    double *ref[4] = {NULL};
    size_t n_in[IN_COUNT], n[4];
    mhla_plan *plan = NULL;
    mhla_status st = MHLA_OK;
    *passed = 0;
    int ok = 1;
    for (int i = 0; i < IN_COUNT; ++i) {
        n_in[i] = mhla_config_tensor_elems(small, in_shape[i]);
        ok = ok && (in[i] = malloc((n_in[i] ? n_in[i] : 1) * sizeof(float))) != NULL;
    }
    for (int j = 0; j < 4; ++j) {
        n[j] = mhla_config_tensor_elems(small, grad_shape[j]);
        ok = ok && (got[j] = malloc((n[j] ? n[j] : 1) * sizeof(float))) != NULL;
        ok = ok && (ref[j] = malloc((n[j] ? n[j] : 1) * sizeof(double))) != NULL;
    }
    if (!ok) {
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    /* The inputs docs/spec.md's tolerance is stated on (the tests' and mhla_selftest's): q and k in
     * [-1, 1) (without a feature map, in [0.05, 1): a denominator near 0 otherwise), v and dO in
     * [-1, 1), Mc in [0.05, 1) ([-0.5, 1) without a normalizer). With v and dO all positive, as the
     * timed problems take them, every output row lies near v's mean and dq is a small difference of
     * two large terms: 1.1e-4 (CPU row) and 1.3e-4 (GPU rows) at Dk = 64, N = 512 on PoCL, where the
     * tolerance is 1e-4. A seed per tensor: q = k would hide a swapped gradient. */
    const float lo = small->feature_map == MHLA_FEATURE_NONE ? 0.05f : -1.0f;
    const float lows[IN_COUNT] = {lo, lo, -1.0f, small->normalizer == MHLA_NORMALIZER_NONE ? -0.5f : 0.05f, -1.0f};
    for (int i = 0; i < IN_COUNT; ++i)
        tune_fill_range(in[i], n_in[i], 0x243F6A8885A308D3ULL + 977ULL * (uint64_t)i, lows[i], 1.0f);
    /* A causal plan's Mc rows are the chunks (mixing_rows 0: ceil(N / C)); only its lower triangle
     * may be read, so NaN above the diagonal makes a kernel that reads there wrong. (A non-causal
     * plan reads all of its M x M.) */
    size_t rows = 1;
    while (small->causal && rows * rows < n_in[MIX])
        ++rows;
    for (size_t i = 0; small->causal && i < rows; ++i)
        for (size_t j = i + 1; j < rows; ++j)
            in[MIX][i * rows + j] = NAN;
    for (int j = 0; j < 4; ++j) /* NaN: an element the backward does not write fails the check */
        memset(got[j], 0xFF, n[j] * sizeof(float));
    if ((st = mhla_plan_create(ctx, small, &plan)) != MHLA_OK)
        goto cleanup;
    if ((st = mhla_backward_host(plan, in[Q], in[K], in[V], in[MIX], in[DOUT], got[0], got[1], got[2], got[3])) !=
        MHLA_OK)
        goto cleanup;
    if ((st = mhla_reference_backward(small, in[Q], in[K], in[V], in[MIX], in[DOUT], ref[0], ref[1], ref[2],
                                      ref[3])) != MHLA_OK)
        goto cleanup;
    const double tol = mhla_reference_backward_tolerance(MHLA_DTYPE_F32);
    *passed = 1;
    for (int j = 0; j < 4; ++j)
        *passed = *passed && mhla_max_rel_err(got[j], ref[j], n[j]) <= tol; /* NaN or +Inf: wrong */
cleanup:
    mhla_plan_destroy(plan);
    for (int i = 0; i < IN_COUNT; ++i)
        free(in[i]);
    for (int j = 0; j < 4; ++j)
        free(got[j]), free(ref[j]);
    return st;
}

struct tune_backward {
    mhla_plan *plan;
    cl_command_queue queue;
    cl_mem in[5];   /* q, k, v, mixing, dout */
    cl_mem grad[4]; /* dq, dk, dv, dMc */
};

mhla_status tune_backward_open(mhla_context *ctx, const mhla_config *cfg, tune_backward **out)
{
    const mhla_tensor in_shape[5] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_MIXING,
                                     MHLA_TENSOR_OUT};
    *out = NULL;
    tune_backward *b = calloc(1, sizeof *b);
    if (!b)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    b->queue = mhla_context_queue(ctx);
    mhla_status st = mhla_plan_create(ctx, cfg, &b->plan);
    size_t elems[5], most = 0;
    for (int i = 0; i < 5; ++i) {
        elems[i] = mhla_config_tensor_elems(cfg, in_shape[i]);
        most = elems[i] > most ? elems[i] : most;
    }
    float *host = st == MHLA_OK ? malloc((most ? most : 1) * sizeof *host) : NULL;
    if (st == MHLA_OK && !host)
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 5 && st == MHLA_OK && err == CL_SUCCESS; ++i) {
        tune_fill(host, elems[i], 0x243F6A8885A308D3ULL + 977ULL * (uint64_t)i);
        b->in[i] = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                  (elems[i] ? elems[i] : 1) * sizeof(float), host, &err);
    }
    for (int j = 0; j < 4 && st == MHLA_OK && err == CL_SUCCESS; ++j) {
        const size_t g = mhla_config_tensor_elems(cfg, grad_shape[j]);
        b->grad[j] = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, (g ? g : 1) * sizeof(float), NULL,
                                    &err);
    }
    free(host);
    if (st == MHLA_OK && err != CL_SUCCESS)
        st = MHLA_ERR_OUT_OF_DEVICE_MEMORY;
    if (st != MHLA_OK) {
        tune_backward_close(b);
        return st;
    }
    *out = b;
    return MHLA_OK;
}

mhla_status tune_backward_run(tune_backward *b, double *ms)
{
    if (clFinish(b->queue) != CL_SUCCESS)
        return MHLA_ERR_OPENCL;
    const double w0 = cli_now_ms();
    mhla_status st = mhla_backward(b->plan, b->in[0], b->in[1], b->in[2], b->in[3], b->in[4], b->grad[0], b->grad[1],
                                   b->grad[2], b->grad[3], 0, NULL, NULL);
    if (st == MHLA_OK && clFinish(b->queue) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    *ms = cli_now_ms() - w0;
    return st;
}

mhla_status tune_backward_tuning(const tune_backward *b, char *buf, size_t size)
{
    return mhla_plan_tuning(b->plan, buf, size);
}

void tune_backward_close(tune_backward *b)
{
    if (!b)
        return;
    for (int i = 0; i < 5; ++i)
        if (b->in[i])
            clReleaseMemObject(b->in[i]);
    for (int j = 0; j < 4; ++j)
        if (b->grad[j])
            clReleaseMemObject(b->grad[j]);
    mhla_plan_destroy(b->plan);
    free(b);
}
