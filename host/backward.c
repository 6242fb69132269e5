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
    cl_kernel kernels[] = {b->k_scalars, b->k_official_dz, b->k_dq, b->k_dkv,
                           b->k_transpose, b->k_dmixing, b->k_tsum,      b->k_out_t, b->k_out_n};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    cl_mem mems[] = {b->grad, b->dsum, b->mix_t, b->inv, b->r, b->rmix, b->tsum};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    for (size_t i = 0; i < sizeof b->stage / sizeof b->stage[0]; ++i)
        if (b->stage[i])
            clReleaseMemObject(b->stage[i]);
    mhla__backward_causal_destroy(b);
    mhla__free(b);
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

/* The forward's read-out kernel for configuration `rc` (no normalizer), its tiles and local size. */
static mhla_status readout_setup(mhla_plan *plan, const mhla_config *rc, mhla_tiles *tiles, cl_kernel *kernel,
                                 size_t lws[3])
{
    mhla_status st = MHLA_OK;
    cl_program prog = NULL;
    mhla__tiles_forward(plan->ctx, rc, &plan->shape, &plan->tuning, tiles);
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(plan->ctx, MHLA_KF_OUTPUT, rc, tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "block_output", kernel));
    const size_t extent[3] = {(size_t)(rc->dv / (tiles->out_ve * tiles->out_nv)), 1,
                              (size_t)((plan->shape.nb + tiles->out_rt - 1) / tiles->out_rt)};
    mhla__local_size_3d(plan->ctx, *kernel, extent, (size_t)tiles->wg, lws);
cleanup:
    return st;
}

/* out = x^T s per token (s: summaries as `kernel` was built for them), phi applied to x by `kernel`. */
static mhla_status readout(mhla_plan *plan, cl_kernel kernel, const mhla_tiles *t, int64_t out_dim,
                           const size_t lws[3], cl_mem x, cl_mem s, cl_mem out, const char *what)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const float feps = plan->cfg.feature_eps, one = 1.0f, zero = 0.0f;
    const size_t groups = (size_t)((plan->shape.nb + t->out_rt - 1) / t->out_rt);
    const size_t extent[3] = {(size_t)(out_dim / (t->out_ve * t->out_nv)), (size_t)plan->shape.bh,
                              (size_t)plan->shape.m * groups};
    MHLA_SET_ARG(st, ctx, kernel, 0, x);
    MHLA_SET_ARG(st, ctx, kernel, 1, s);
    MHLA_SET_ARG(st, ctx, kernel, 2, s); /* den: not read without a normalizer */
    MHLA_SET_ARG(st, ctx, kernel, 3, out);
    MHLA_SET_ARG(st, ctx, kernel, 4, plan->grid);
    MHLA_SET_ARG(st, ctx, kernel, 5, feps);
    MHLA_SET_ARG(st, ctx, kernel, 6, one);
    MHLA_SET_ARG(st, ctx, kernel, 7, zero);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kernel, 3, extent, lws, 0, NULL, NULL, what));
cleanup:
    return st;
}

/* Kernels and workspace of a non-causal plan's backward: two summary-sized buffers (G and dS), a
 * transposed one, Mc^T, and for the paper and official normalizers two floats per token (1/den_t
 * and dL/dden_t; the official normalizer also R = Mc^T r), as the forward's official normalizer
 * keeps one. */
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
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_transpose_summary", &b->k_tsum));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_token_scalars", &b->k_scalars));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_official_dz", &b->k_official_dz));
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_READOUT, c, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dq_finish", &b->k_dq));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dk_finish", &b->k_dkv));
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_MIXING, c, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dmixing", &b->k_dmixing));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_transpose", &b->k_transpose));
    mhla_config swapped = *c, plain = *c;
    swapped.dk = c->dv, swapped.dv = c->dk;
    swapped.feature_map = MHLA_FEATURE_NONE;
    swapped.normalizer = plain.normalizer = MHLA_NORMALIZER_NONE;
    MHLA_FORWARD_IF_ERROR(st, readout_setup(plan, &swapped, &b->tiles_t, &b->k_out_t, b->lws_out_t));
    MHLA_FORWARD_IF_ERROR(st, readout_setup(plan, &plain, &b->tiles_n, &b->k_out_n, b->lws_out_n));
    const size_t tok[3] = {(size_t)plan->shape.nb, bh, m};
    mhla__local_size_3d(ctx, b->k_dq, tok, wg, b->lws_token);
    const size_t zext[3] = {(size_t)c->dk, bh, m};
    mhla__local_size_3d(ctx, b->k_official_dz, zext, wg, b->lws_zcol);
    const size_t text[3] = {(size_t)(c->dk * c->dv), bh, m};
    mhla__local_size_3d(ctx, b->k_tsum, text, wg, b->lws_tsum);

    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, summary_bytes, "the gradient summaries G", &b->grad));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, summary_bytes, "the mixed gradient summaries dS", &b->dsum));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, m * bh * (size_t)c->dv * (size_t)(c->dk + 1) * sizeof(float),
                                                    "a transposed summary", &b->tsum));
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

/* The z column of a summary-shaped buffer: sum_p w q~ (has_w), else 0 (bwd_official_dz). */
static mhla_status z_column(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem w, cl_mem dst, cl_int has_w)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const float feps = plan->cfg.feature_eps, scale = plan->cfg.scale;
    const size_t ext[3] = {(size_t)plan->cfg.dk, (size_t)plan->shape.bh, (size_t)plan->shape.m};
    cl_kernel kr = b->k_official_dz;
    MHLA_SET_ARG(st, ctx, kr, 0, q);
    MHLA_SET_ARG(st, ctx, kr, 1, w);
    MHLA_SET_ARG(st, ctx, kr, 2, dst);
    MHLA_SET_ARG(st, ctx, kr, 3, plan->grid);
    MHLA_SET_ARG(st, ctx, kr, 4, feps);
    MHLA_SET_ARG(st, ctx, kr, 5, scale);
    MHLA_SET_ARG(st, ctx, kr, 6, has_w);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, b->lws_zcol, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_official_dz)"));
cleanup:
    return st;
}

/* tsum = the S part of `src` transposed (bwd_transpose_summary). */
static mhla_status transpose_summary(mhla_plan *plan, mhla_bwd *b, cl_mem src)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const size_t ext[3] = {(size_t)(plan->cfg.dk * plan->cfg.dv), (size_t)plan->shape.bh, (size_t)plan->shape.m};
    MHLA_SET_ARG(st, ctx, b->k_tsum, 0, src);
    MHLA_SET_ARG(st, ctx, b->k_tsum, 1, b->tsum);
    MHLA_SET_ARG(st, ctx, b->k_tsum, 2, plan->grid);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_tsum, 3, ext, b->lws_tsum, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_transpose_summary)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
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
    b = mhla__calloc(1, sizeof *b);
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
    const size_t extent[3] = {(size_t)m, (size_t)m, 1};
    size_t local[3];
    mhla__local_size_3d(ctx, b->k_dmixing, extent, (size_t)plan->tiles.wg, local);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 0, a);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 1, bm);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 2, out);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 3, xl);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 4, m);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 5, ldo);
    MHLA_SET_ARG(st, ctx, b->k_dmixing, 6, accumulate);
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

    /* u_t = S~_i dO_t into dq (the read-out kernel over S~^T), then the normalizer's per-token
     * terms from it. */
    MHLA_FORWARD_IF_ERROR(st, transpose_summary(plan, b, plan->mixed));
    MHLA_FORWARD_IF_ERROR(st, readout(plan, b->k_out_t, &b->tiles_t, c->dk, b->lws_out_t, dout, b->tsum, dq,
                                      "clEnqueueNDRangeKernel(block_output: S~ dO)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    {
        cl_kernel kr = b->k_scalars; /* 1/den, dL/dden, and y = scale dO / den into dv */
        MHLA_SET_ARG(st, ctx, kr, 0, q);
        MHLA_SET_ARG(st, ctx, kr, 1, dq);
        MHLA_SET_ARG(st, ctx, kr, 2, dout);
        MHLA_SET_ARG(st, ctx, kr, 3, plan->mixed);
        MHLA_SET_ARG(st, ctx, kr, 4, den);
        MHLA_SET_ARG(st, ctx, kr, 5, inv);
        MHLA_SET_ARG(st, ctx, kr, 6, r);
        MHLA_SET_ARG(st, ctx, kr, 7, dv);
        MHLA_SET_ARG(st, ctx, kr, 8, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 9, feps);
        MHLA_SET_ARG(st, ctx, kr, 10, scale);
        MHLA_SET_ARG(st, ctx, kr, 11, eps);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_token, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_token_scalars)"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    /* G_i = sum_t phi(q_t) y_t^T with the forward's summary kernel, then its z column */
    MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_enqueue_to(plan, q, dv, b->grad, 0, NULL));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_FORWARD_IF_ERROR(st, z_column(plan, b, q, r, b->grad, c->normalizer == MHLA_NORMALIZER_PAPER));
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
        MHLA_FORWARD_IF_ERROR(st, z_column(plan, b, q, b->rmix, b->dsum, 1));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    {
        cl_kernel kr = b->k_dq; /* dq from u, with the normalizer's terms and phi' */
        MHLA_SET_ARG(st, ctx, kr, 0, q);
        MHLA_SET_ARG(st, ctx, kr, 1, dq);
        MHLA_SET_ARG(st, ctx, kr, 2, plan->mixed);
        MHLA_SET_ARG(st, ctx, kr, 3, plan->summary);
        MHLA_SET_ARG(st, ctx, kr, 4, inv);
        MHLA_SET_ARG(st, ctx, kr, 5, r);
        MHLA_SET_ARG(st, ctx, kr, 6, rmix);
        MHLA_SET_ARG(st, ctx, kr, 7, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 8, scale);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_token, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_dq_finish)"));
    }
    /* dv = dS^T k~ (the read-out as the forward's), dk = phi'(k) (dS v + dz) */
    MHLA_FORWARD_IF_ERROR(st, readout(plan, b->k_out_n, &b->tiles_n, c->dv, b->lws_out_n, k, b->dsum, dv,
                                      "clEnqueueNDRangeKernel(block_output: dS^T k~)"));
    MHLA_FORWARD_IF_ERROR(st, transpose_summary(plan, b, b->dsum));
    MHLA_FORWARD_IF_ERROR(st, readout(plan, b->k_out_t, &b->tiles_t, c->dk, b->lws_out_t, v, b->tsum, dk,
                                      "clEnqueueNDRangeKernel(block_output: dS v)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    {
        cl_kernel kr = b->k_dkv;
        MHLA_SET_ARG(st, ctx, kr, 0, k);
        MHLA_SET_ARG(st, ctx, kr, 1, dk);
        MHLA_SET_ARG(st, ctx, kr, 2, b->dsum);
        MHLA_SET_ARG(st, ctx, kr, 3, plan->grid);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_token, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_dk_finish)"));
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
