/* Stage 3 host side: kernels/output.cl (or output_tiled.cl), the per-token read-out with the
 * normalizer fused, and the official normalizer's per-token dot products that the mixing stage
 * mixes. */
#include "forward/forward.h"

mhla_status mhla__output_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    cl_program prog = NULL;
    const mhla_tiles *t = &plan->tiles;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(plan->ctx, MHLA_KF_OUTPUT, &plan->cfg, t, &prog));
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL) { /* the tiled read-out's too */
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "official_dots", &plan->k_official_dots));
        plan->lws_dots = mhla__local_size(plan->ctx, plan->k_official_dots, (size_t)t->wg);
    }
    if (t->tiled) /* output_tiled.cl: built with the summary's kernel (forward/tiled.c) */
        goto cleanup;
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "block_output", &plan->k_output));
    const size_t extent[3] = {(size_t)(plan->cfg.dv / (t->out_ve * t->out_nv)), 1,
                              (size_t)((plan->shape.nb + t->out_rt - 1) / t->out_rt)};
    mhla__local_size_3d(plan->ctx, plan->k_output, extent, (size_t)t->wg, plan->lws_output);
cleanup:
    return st;
}

mhla_status mhla__official_dots_enqueue(mhla_plan *plan, cl_mem q)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_kernel kern = plan->k_official_dots;
    const float feature_eps = plan->cfg.feature_eps, scale = plan->cfg.scale;
    const size_t local[3] = {plan->lws_dots, 1, 1};
    const size_t extent[3] = {(size_t)plan->shape.n, (size_t)plan->shape.bh, 1};

    MHLA_SET_ARGS(st, ctx, kern, 0, MHLA_ARG(q), MHLA_ARG(plan->summary), MHLA_ARG(plan->dots), MHLA_ARG(plan->grid),
                  MHLA_ARG(feature_eps), MHLA_ARG(scale));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kern, 2, extent, local, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(official_dots)"));
cleanup:
    return st;
}

int mhla__output_mixes_dots(const mhla_plan *plan)
{
    /* (a plan kept for a backward keeps the mixed denominators the backward reads: plan->den) */
    return plan->tiles.tiled && plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL && !plan->save_for_backward;
}

int mhla__output_mixes(const mhla_plan *plan) { return mhla__output_mixes_within(plan, plan->tiles.fuse_mb); }

int mhla__output_mixes_within(const mhla_plan *plan, int fuse_mb)
{
    const mhla_tiles *t = &plan->tiles;
    const mhla_shape *sh = &plan->shape;
    const int64_t sources = sh->m_kv * (int64_t)t->splits;
    /* (the official normalizer's denominators come from the dots' mixing; a plan kept for a backward
     * leaves its summaries unmixed only where the backward's dq read-out will mix them, judged at the
     * tuning's bt_tq: where the backward fits other groups and decides otherwise, it runs the mixing
     * itself) */
    return t->tiled && plan->cfg.normalizer != MHLA_NORMALIZER_OFFICIAL && (int64_t)t->tl_fuse >= sources &&
           mhla__fuse_fits(&plan->cfg, sh->bh, sh->m, sh->nb, t->tl_tq, sources, fuse_mb) &&
           (!plan->save_for_backward ||
            mhla__bwd_readout_mixes(&plan->cfg, plan->tuning.bt_fuse, plan->tuning.bt_tq, fuse_mb, sh->bh, sh->m,
                                    sh->nb, sh->m_kv, t->splits == 1));
}

mhla_status mhla__output_enqueue(mhla_plan *plan, cl_mem q, cl_mem mixing, cl_mem out, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_kernel kern = plan->k_output;
    const float feature_eps = plan->cfg.feature_eps, scale = plan->cfg.scale, eps = plan->cfg.eps;
    /* The kernel reads `den` only for the official normalizer; any valid buffer fills the slot. */
    cl_mem den = plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL ? plan->den : plan->mixed;
    const mhla_tiles *t = &plan->tiles;
    if (t->tiled) {
        const size_t tq_groups = (size_t)((plan->shape.nb + t->tl_tq - 1) / t->tl_tq);
        const size_t col_groups = (size_t)((plan->cfg.dv + t->tl_tv - 1) / t->tl_tv);
        const size_t extent[3] = {plan->lws_output[0] * col_groups, (size_t)plan->shape.bh,
                                  (size_t)plan->shape.m * tq_groups};
        /* mixed here: the segments' rows (the summaries' where blocks are whole) and Mc */
        const int mixes = mhla__output_mixes(plan), mixes_dots = mhla__output_mixes_dots(plan);
        const cl_int splits = t->splits, sources = mixes ? (cl_int)(plan->shape.m_kv * t->splits) : 0;
        const cl_int den_mixed = !mixes_dots;
        cl_mem rows = !mixes ? plan->mixed : t->splits > 1 ? plan->partial : plan->summary;
        cl_mem mc = mixes || mixes_dots ? mixing : plan->mixed; /* any valid buffer where it is not read */
        cl_mem dots_or_den = mixes_dots ? plan->dots : den;
        MHLA_SET_ARGS(st, ctx, kern, 0, MHLA_ARG(q), MHLA_ARG(rows), MHLA_ARG(out), MHLA_ARG(plan->grid),
                      MHLA_ARG(feature_eps), MHLA_ARG(scale), MHLA_ARG(eps), MHLA_ARG(mc), MHLA_ARG(sources),
                      MHLA_ARG(splits), MHLA_ARG(dots_or_den), MHLA_ARG(den_mixed));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kern, 3, extent, plan->lws_output, 0, NULL, done,
                                               "clEnqueueNDRangeKernel(output_tiled)"));
        goto cleanup;
    }
    const size_t groups = (size_t)((plan->shape.nb + t->out_rt - 1) / t->out_rt);
    const size_t extent[3] = {(size_t)(plan->cfg.dv / (t->out_ve * t->out_nv)), (size_t)plan->shape.bh,
                              (size_t)plan->shape.m * groups};

    MHLA_SET_ARGS(st, ctx, kern, 0, MHLA_ARG(q), MHLA_ARG(plan->mixed), MHLA_ARG(den), MHLA_ARG(out),
                  MHLA_ARG(plan->grid), MHLA_ARG(feature_eps), MHLA_ARG(scale), MHLA_ARG(eps));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kern, 3, extent, plan->lws_output, 0, NULL, done,
                                           "clEnqueueNDRangeKernel(block_output)"));
cleanup:
    return st;
}
