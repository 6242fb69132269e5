/* Stage 2: the mixing S~_i = sum_b Mc[i,b] S_b as one SGEMM over [M, B*H*Dk*(Dv+1)] (S and z
 * together: a summary row holds both), plus the official normalizer's denominators as a second
 * SGEMM over [M, B*H*Nb]. CLBlast runs them, or kernels/mixing.cl where the device's tuning says
 * so (tune/tuning_rows.c). */
#include "forward/forward.h"


/* Columns of the two GEMMs' right-hand sides. */
static size_t summary_cols(const mhla_plan *plan)
{
    return (size_t)plan->shape.bh_kv * (size_t)plan->cfg.dk * (size_t)plan->shape.summary_cols;
}
static size_t dots_cols(const mhla_plan *plan) { return (size_t)plan->shape.bh * (size_t)plan->shape.nb; }

/* Rows of the mixed result and of the summaries it mixes: M and M_kv (Mc is M x M_kv), or a shard's
 * blocks and M. */
static size_t mixed_rows(const mhla_plan *plan) { return (size_t)plan->shape.m; }
static size_t source_rows(const mhla_plan *plan)
{
    return (size_t)(plan->shard ? plan->shard->gshape.m : plan->shape.m_kv);
}

mhla_status mhla__mixing_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    size_t m = mixed_rows(plan), k = source_rows(plan), t1 = 0, t2 = 0;
    cl_program prog = NULL;
    if (plan->tiles.tiled) { /* the forward's: mixing_splits; the backward's mixings below as usual */
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(plan->ctx, MHLA_KF_MIXING, &plan->cfg, &plan->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "mixing_splits", &plan->k_mix_splits));
        /* one row tile per group (its rows of Mc in local memory): work-items along the columns only */
        plan->lws_mix_splits[0] = mhla__local_size(plan->ctx, plan->k_mix_splits, (size_t)plan->tiles.wg);
        plan->lws_mix_splits[1] = plan->lws_mix_splits[2] = 1;
    }
    if (plan->tuning.mix_kernel) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(plan->ctx, MHLA_KF_MIXING, &plan->cfg, &plan->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "mixing_gemm", &plan->k_mixing));
        /* A work-group is one column tile and every row tile: its work-items read the same
         * k x cols tile of B, which then comes from cache for all but the first. */
        const size_t rows = (size_t)plan->tiles.mix_mr;
        const size_t extent[3] = {1, (m + rows - 1) / rows, 1};
        mhla__local_size_3d(plan->ctx, plan->k_mixing, extent, (size_t)plan->tiles.wg, plan->lws_mixing);
        goto cleanup;
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_ld_temp_bytes(plan->ctx, m, summary_cols(plan), k, k, summary_cols(plan),
                                                        summary_cols(plan), &t1));
    if (m != k) { /* cross-attention: the backward's dS = Mc^T G is M_kv x M times M rows */
        size_t t3 = 0;
        MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_ld_temp_bytes(plan->ctx, k, summary_cols(plan), m, m,
                                                            summary_cols(plan), summary_cols(plan), &t3));
        t1 = t1 > t3 ? t1 : t3;
    }
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL)
        MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_ld_temp_bytes(plan->ctx, m, dots_cols(plan), k, k, dots_cols(plan),
                                                            dots_cols(plan), &t2));
    plan->gemm_temp_bytes = t1 > t2 ? t1 : t2;
    if (plan->gemm_temp_bytes > 0)
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_WRITE, plan->gemm_temp_bytes,
                                                      "the mixing GEMM's temporary buffer", &plan->gemm_temp));
cleanup:
    return st;
}

mhla_status mhla__mixing_gemm(mhla_plan *plan, cl_mem a, size_t rows, size_t k, cl_mem b, cl_mem c, size_t x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_int m = (cl_int)rows, kk = (cl_int)k;
    const cl_long xl = (cl_long)x;
    if (!plan->k_mixing)
        return mhla__sgemm_ld(ctx, rows, x, k, a, 0, k, b, 0, x, 0.0f, c, 0, x, plan->gemm_temp, NULL);
    const size_t cols = (size_t)plan->tiles.mix_nv * (size_t)plan->tiles.mix_ve, mr = (size_t)plan->tiles.mix_mr;
    const size_t extent[3] = {(x + cols - 1) / cols, (rows + mr - 1) / mr, 1};
    MHLA_SET_ARGS(st, ctx, plan->k_mixing, 0, MHLA_ARG(a), MHLA_ARG(kk), MHLA_ARG(b), MHLA_ARG(c), MHLA_ARG(m),
                  MHLA_ARG(kk), MHLA_ARG(xl));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, plan->k_mixing, 2, extent, plan->lws_mixing, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(mixing_gemm)"));
cleanup:
    return st;
}

mhla_status mhla__mixing_splits(mhla_plan *plan, cl_mem a, cl_int a_trans, size_t rows, size_t k, cl_mem part,
                                cl_int splits, cl_mem sum, cl_mem c, size_t x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_int mi = (cl_int)rows, ki = (cl_int)k;
    const cl_long xl = (cl_long)x;
    const size_t cols = (size_t)plan->tiles.mix_nv * (size_t)plan->tiles.mix_ve, mr = (size_t)plan->tiles.mix_mr;
    const size_t extent[3] = {(x + cols - 1) / cols, (rows + mr - 1) / mr, 1};
    MHLA_SET_ARGS(st, ctx, plan->k_mix_splits, 0, MHLA_ARG(a), MHLA_ARG(part), MHLA_ARG(sum), MHLA_ARG(c),
                  MHLA_ARG(mi), MHLA_ARG(ki), MHLA_ARG(splits), MHLA_ARG(xl), MHLA_ARG(a_trans));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, plan->k_mix_splits, 2, extent, plan->lws_mix_splits, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(mixing_splits)"));
cleanup:
    return st;
}

mhla_status mhla__mixing_enqueue(mhla_plan *plan, cl_mem mixing, int with_dots)
{
    mhla_status st = MHLA_OK;
    /* A shard mixes the gathered summaries of every block with its own rows of Mc. */
    const mhla_shard *sh = plan->shard;
    cl_mem a = sh ? sh->mc_rows : mixing, s = sh ? sh->gathered : plan->summary;
    const size_t m = mixed_rows(plan), k = source_rows(plan);
    if (plan->k_mix_splits) /* the tiled summary's segments, added here in order, then mixed */
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_splits(plan, a, 0, m, k,
                                                      plan->tiles.splits > 1 ? plan->partial : plan->summary,
                                                      plan->tiles.splits, plan->summary, plan->mixed,
                                                      summary_cols(plan)));
    else
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_gemm(plan, a, m, k, s, plan->mixed, summary_cols(plan)));
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL && with_dots) {
        /* Both GEMMs share the temporary buffer; an out-of-order queue must not overlap them. */
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(plan->ctx));
        if (plan->k_mix_splits) /* (the tiled plans': no GEMM library launch) */
            MHLA_FORWARD_IF_ERROR(st, mhla__mixing_splits(plan, a, 0, m, k, plan->dots, 1, plan->dots, plan->den,
                                                          dots_cols(plan)));
        else
            MHLA_FORWARD_IF_ERROR(st, mhla__mixing_gemm(plan, a, m, k, sh ? sh->gathered_dots : plan->dots,
                                                        plan->den, dots_cols(plan)));
    }
cleanup:
    return st;
}
