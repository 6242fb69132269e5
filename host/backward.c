/* mhla_backward (SPEC.md "Backward"): argument checks, the non-causal stages, and the blocking
 * host-pointer convenience. The forward's summaries are recomputed with its own stages (nothing
 * per token is kept between the passes); then, per block, the gradient summaries
 * G_i = sum_t q~_t [dO_t/den_t | dL/dden_t]^T (kernels/backward_summary.cl), dS = Mc^T G through the
 * forward's mixing GEMM, the per-token read-outs dq, dk, dv (kernels/backward_readout.cl) and
 * dMc[i,b] = <G_i, S_b> reduced in a fixed order (kernels/backward_mixing.cl). */
#include "backward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest power of two <= n (n >= 1). */
static size_t pow2_floor(size_t n)
{
    size_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

void mhla__backward_destroy(mhla_bwd *b)
{
    if (!b)
        return;
    cl_kernel kernels[] = {b->k_scalars, b->k_grad, b->k_official_dz, b->k_dq, b->k_dkv, b->k_transpose,
                           b->k_dmixing};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    cl_mem mems[] = {b->grad, b->dsum, b->mix_t, b->inv, b->r, b->rmix};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    for (size_t i = 0; i < sizeof b->stage / sizeof b->stage[0]; ++i)
        if (b->stage[i])
            clReleaseMemObject(b->stage[i]);
    mhla__backward_causal_destroy(b);
    free(b);
}

/* The reduction kernels' work-group: BWD_WG is built in (their local array), so the program is
 * built for the device's limit and rebuilt once, smaller, if the kernel reports less. */
mhla_status mhla__backward_reduce_kernel(mhla_plan *plan, mhla_bwd *b, mhla_kernel_file file, const char *name,
                                         cl_kernel *kernel, cl_program *prog)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    b->tiles.bwd_wg = (int)pow2_floor(fit.wg < 64 ? fit.wg : 64);
    for (;;) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, file, &b->cfg, &b->tiles, prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, *prog, name, kernel));
        size_t kwg = 0;
        MHLA_CL_TRY(st, ctx,
                    clGetKernelWorkGroupInfo(*kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL),
                    "clGetKernelWorkGroupInfo (a backward reduction)");
        if (kwg >= (size_t)b->tiles.bwd_wg || b->tiles.bwd_wg == 1)
            break;
        clReleaseKernel(*kernel);
        *kernel = NULL;
        b->tiles.bwd_wg = (int)pow2_floor(kwg ? kwg : 1);
    }
cleanup:
    return st;
}

mhla_status mhla__backward_buffer(mhla_plan *plan, size_t bytes, const char *what, cl_mem *out)
{
    mhla_status st = MHLA_OK;
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_WRITE, bytes, what, out));
    plan->workspace_bytes += bytes;
cleanup:
    return st;
}

/* Kernels and workspace of a non-causal plan's backward: two summary-sized buffers (G and dS),
 * Mc^T, and for the paper and official normalizers two floats per token (1/den_t and dL/dden_t;
 * the official normalizer also R = Mc^T r), as the forward's official normalizer keeps one. */
static mhla_status setup(mhla_plan *plan, mhla_bwd *b)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_program prog = NULL;
    const mhla_config *c = &plan->cfg;
    const size_t m = (size_t)plan->shape.m, bh = (size_t)plan->shape.bh, n = (size_t)plan->shape.n;
    const size_t summary_bytes = m * bh * (size_t)c->dk * (size_t)plan->shape.summary_cols * sizeof(float);
    const size_t wg = (size_t)plan->tiles.wg;

    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_SUMMARY, c, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_block_grad", &b->k_grad));
    if (c->normalizer != MHLA_NORMALIZER_NONE)
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_scalars", &b->k_scalars));
    if (c->normalizer == MHLA_NORMALIZER_OFFICIAL)
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_official_dz", &b->k_official_dz));
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_READOUT, c, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dq", &b->k_dq));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dkv", &b->k_dkv));
    MHLA_FORWARD_IF_ERROR(
        st, mhla__backward_reduce_kernel(plan, b, MHLA_KF_BACKWARD_MIXING, "bwd_dmixing", &b->k_dmixing, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_transpose", &b->k_transpose));
    const size_t tok[3] = {(size_t)plan->shape.nb, bh, m};
    mhla__local_size_3d(ctx, b->k_dq, tok, wg, b->lws_token);
    const size_t gext[3] = {(size_t)(c->dk * ((c->dv + 1 + b->tiles.bwd_ve - 1) / b->tiles.bwd_ve)), bh, m};
    mhla__local_size_3d(ctx, b->k_grad, gext, wg, b->lws_grad);

    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, summary_bytes, "the gradient summaries G", &b->grad));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, summary_bytes, "the mixed gradient summaries dS", &b->dsum));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, m * m * sizeof(float), "Mc transposed", &b->mix_t));
    if (c->normalizer != MHLA_NORMALIZER_NONE) {
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bh * n * sizeof(float), "the per-token 1/den", &b->inv));
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bh * n * sizeof(float), "the per-token dL/dden", &b->r));
    }
    if (c->normalizer == MHLA_NORMALIZER_OFFICIAL)
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bh * n * sizeof(float),
                                                        "the mixed normalizer gradients", &b->rmix));
cleanup:
    return st;
}

mhla_status mhla__backward_get(mhla_plan *plan, mhla_bwd **out)
{
    mhla_status st = MHLA_OK;
    mhla_bwd *b = plan->bwd;
    if (b) {
        *out = b;
        return MHLA_OK;
    }
    b = calloc(1, sizeof *b);
    MHLA_FAIL_IF(st, !b, plan->ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating the backward pass");
    b->cfg = plan->cfg;
    b->tiles = plan->causal ? plan->causal->kern->tiling : plan->tiles;
    b->tiles.bwd_ve = 16; /* gradient columns per work-item: one AVX-512 register, 4 float4 on GPUs */
    if (plan->cfg.causal)
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_causal_setup(plan, b));
    else
        MHLA_FORWARD_IF_ERROR(st, setup(plan, b));
    plan->bwd = b;
    *out = b;
    b = NULL;
cleanup:
    mhla__backward_destroy(b);
    return st;
}

mhla_status mhla__backward_dmixing(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t x, cl_mem out,
                                   cl_int m, cl_int ldo, cl_int accumulate)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_long xl = (cl_long)x;
    const size_t extent[3] = {(size_t)b->tiles.bwd_wg * (size_t)m, (size_t)m, 1};
    const size_t local[3] = {(size_t)b->tiles.bwd_wg, 1, 1};
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 0, a);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 1, bm);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 2, out);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 3, xl);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 4, ldo);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 5, accumulate);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_dmixing, 2, extent, local, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_dmixing)"));
cleanup:
    return st;
}

mhla_status mhla__backward_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                   cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                   const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_config *c = &plan->cfg;
    const float feps = c->feature_eps, scale = c->scale, eps = c->eps;
    const int official = c->normalizer == MHLA_NORMALIZER_OFFICIAL;
    const cl_int m = (cl_int)plan->shape.m;
    const size_t scols = (size_t)plan->shape.bh * (size_t)c->dk * (size_t)plan->shape.summary_cols;
    const size_t dcols = (size_t)plan->shape.bh * (size_t)plan->shape.nb;
    const size_t tok[3] = {(size_t)plan->shape.nb, (size_t)plan->shape.bh, (size_t)m};
    /* A slot no normalizer reads still needs a valid buffer. */
    cl_mem inv = b->inv ? b->inv : plan->mixed, r = b->r ? b->r : plan->mixed, rmix = b->rmix ? b->rmix : plan->mixed;
    cl_mem den = official ? plan->den : plan->mixed;

    /* The forward's summaries and their mixtures (and the official normalizer's dots and
     * denominators), recomputed with its own stages. */
    MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_enqueue(plan, k, v, num_wait, wait));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (official) {
        MHLA_FORWARD_IF_ERROR(st, mhla__official_dots_enqueue(plan, q));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__mixing_enqueue(plan, mixing));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));

    if (b->k_scalars) {
        cl_kernel kr = b->k_scalars;
        MHLA_SET_ARG(st, ctx, kr, 0, q);
        MHLA_SET_ARG(st, ctx, kr, 1, dout);
        MHLA_SET_ARG(st, ctx, kr, 2, plan->mixed);
        MHLA_SET_ARG(st, ctx, kr, 3, den);
        MHLA_SET_ARG(st, ctx, kr, 4, inv);
        MHLA_SET_ARG(st, ctx, kr, 5, r);
        MHLA_SET_ARG(st, ctx, kr, 6, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 7, feps);
        MHLA_SET_ARG(st, ctx, kr, 8, scale);
        MHLA_SET_ARG(st, ctx, kr, 9, eps);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_token, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_scalars)"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    {
        cl_kernel kr = b->k_grad;
        const size_t ext[3] = {(size_t)(c->dk * ((c->dv + 1 + b->tiles.bwd_ve - 1) / b->tiles.bwd_ve)),
                               (size_t)plan->shape.bh, (size_t)m};
        MHLA_SET_ARG(st, ctx, kr, 0, q);
        MHLA_SET_ARG(st, ctx, kr, 1, dout);
        MHLA_SET_ARG(st, ctx, kr, 2, inv);
        MHLA_SET_ARG(st, ctx, kr, 3, r);
        MHLA_SET_ARG(st, ctx, kr, 4, b->grad);
        MHLA_SET_ARG(st, ctx, kr, 5, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 6, feps);
        MHLA_SET_ARG(st, ctx, kr, 7, scale);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, b->lws_grad, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_block_grad)"));
    }
    {
        const cl_int lda = m;
        const size_t ext[3] = {(size_t)m, (size_t)m, 1}, local[3] = {1, 1, 1};
        MHLA_SET_ARG(st, ctx, b->k_transpose, 0, mixing);
        MHLA_SET_ARG(st, ctx, b->k_transpose, 1, b->mix_t);
        MHLA_SET_ARG(st, ctx, b->k_transpose, 2, m);
        MHLA_SET_ARG(st, ctx, b->k_transpose, 3, lda);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_transpose, 2, ext, local, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_transpose)"));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_FORWARD_IF_ERROR(st, mhla__mixing_gemm(plan, b->mix_t, b->grad, b->dsum, scols));
    if (official) {
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx)); /* the GEMMs share a temporary buffer */
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_gemm(plan, b->mix_t, b->r, b->rmix, dcols));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        cl_kernel kr = b->k_official_dz;
        const size_t ext[3] = {(size_t)c->dk, (size_t)plan->shape.bh, (size_t)m};
        const size_t local[3] = {1, 1, 1};
        MHLA_SET_ARG(st, ctx, kr, 0, q);
        MHLA_SET_ARG(st, ctx, kr, 1, b->rmix);
        MHLA_SET_ARG(st, ctx, kr, 2, b->dsum);
        MHLA_SET_ARG(st, ctx, kr, 3, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 4, feps);
        MHLA_SET_ARG(st, ctx, kr, 5, scale);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, local, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_official_dz)"));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    {
        cl_kernel kr = b->k_dq;
        MHLA_SET_ARG(st, ctx, kr, 0, q);
        MHLA_SET_ARG(st, ctx, kr, 1, dout);
        MHLA_SET_ARG(st, ctx, kr, 2, plan->mixed);
        MHLA_SET_ARG(st, ctx, kr, 3, plan->summary);
        MHLA_SET_ARG(st, ctx, kr, 4, inv);
        MHLA_SET_ARG(st, ctx, kr, 5, r);
        MHLA_SET_ARG(st, ctx, kr, 6, rmix);
        MHLA_SET_ARG(st, ctx, kr, 7, dq);
        MHLA_SET_ARG(st, ctx, kr, 8, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 9, scale);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_token, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_dq)"));
        kr = b->k_dkv;
        MHLA_SET_ARG(st, ctx, kr, 0, k);
        MHLA_SET_ARG(st, ctx, kr, 1, v);
        MHLA_SET_ARG(st, ctx, kr, 2, b->dsum);
        MHLA_SET_ARG(st, ctx, kr, 3, dk);
        MHLA_SET_ARG(st, ctx, kr, 4, dv);
        MHLA_SET_ARG(st, ctx, kr, 5, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 6, feps);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_token, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_dkv)"));
    }
    if (dmixing) {
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing(plan, b, b->grad, plan->summary, scols, dmixing, m, m, 0));
        if (official) {
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
            MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing(plan, b, b->r, plan->dots, dcols, dmixing, m, m, 1));
        }
    }
cleanup:
    return st;
}
