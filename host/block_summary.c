/* Stage 1 host side: kernels/block_summary.cl (S_b and z_b per block). Decides how long blocks
 * are split into segments so that the device has enough work-groups, and owns the segments'
 * partial summaries. */
#include "internal.h"

/* Segments per block: enough work-groups for every compute unit several times over, but no
 * segment shorter than the tuning's minimum (a short segment costs more to reduce than it saves). */
static void choose_splits(mhla_plan *plan)
{
    const mhla_tuning *t = &plan->tuning;
    const int64_t nb = plan->shape.nb;
    const int64_t groups = plan->shape.m * plan->shape.bh;
    const int64_t want = (int64_t)t->groups_per_cu * plan->ctx->limits.compute_units;
    int64_t splits = 1;
    if (groups < want) {
        splits = (want + groups - 1) / groups;
        const int64_t most = nb / t->split_min_len;
        if (splits > most)
            splits = most > 1 ? most : 1;
    }
    plan->split_len = (int)((nb + splits - 1) / splits);
    plan->splits = (int)((nb + plan->split_len - 1) / plan->split_len);
}

mhla_status mhla__block_summary_setup(mhla_plan *plan, const mhla_build_opts *opts)
{
    mhla_status st = MHLA_OK;
    cl_program prog = NULL;
    mhla_context *ctx = plan->ctx;

    choose_splits(plan);
    MHLA_FORWARD_IF_ERROR(st, mhla__program_get(ctx, "block_summary", opts, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "block_summary", &plan->k_summary));
    const size_t extent[3] = {(size_t)((plan->cfg.dk / plan->sum_rd) * (plan->cfg.dv / (plan->sum_ve * plan->sum_nv))), 1, 1};
    mhla__local_size_3d(ctx, plan->k_summary, extent, (size_t)plan->tuning.wg, plan->lws_summary);
    if (plan->splits > 1) {
        const size_t row = (size_t)plan->shape.bh * (size_t)plan->cfg.dk * (size_t)(plan->cfg.dv + 1) * sizeof(float);
        const size_t bytes = row * (size_t)plan->shape.m * (size_t)plan->splits;
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "summary_reduce", &plan->k_reduce));
        plan->lws_reduce = mhla__local_size(ctx, plan->k_reduce, (size_t)plan->tuning.wg);
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, bytes, "the block segments' summaries",
                                                      &plan->partial));
        plan->workspace_bytes += bytes;
    }
cleanup:
    return st;
}

mhla_status mhla__block_summary_enqueue(mhla_plan *plan, cl_mem k, cl_mem v, cl_uint num_wait,
                                        const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_kernel kern = plan->k_summary;
    const float feature_eps = plan->cfg.feature_eps;
    const cl_int splits = plan->splits, split_len = plan->split_len;
    cl_mem dst = splits > 1 ? plan->partial : plan->summary;
    const size_t extent[3] = {(size_t)((plan->cfg.dk / plan->sum_rd) * (plan->cfg.dv / (plan->sum_ve * plan->sum_nv))),
                              (size_t)(plan->shape.m * splits), (size_t)plan->shape.bh};

    MHLA_SET_ARG(st, ctx, kern, 0, k);
    MHLA_SET_ARG(st, ctx, kern, 1, v);
    MHLA_SET_ARG(st, ctx, kern, 2, dst);
    MHLA_SET_ARG(st, ctx, kern, 3, plan->grid);
    MHLA_SET_ARG(st, ctx, kern, 4, feature_eps);
    MHLA_SET_ARG(st, ctx, kern, 5, splits);
    MHLA_SET_ARG(st, ctx, kern, 6, split_len);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kern, 3, extent, plan->lws_summary, num_wait, wait, NULL,
                                           "clEnqueueNDRangeKernel(block_summary)"));
    if (splits > 1) {
        const size_t row = (size_t)plan->shape.bh * (size_t)plan->cfg.dk * (size_t)(plan->cfg.dv + 1);
        const size_t rextent[3] = {(row + 3) / 4, (size_t)plan->shape.m, 1};
        const size_t rlocal[3] = {plan->lws_reduce, 1, 1};
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_SET_ARG(st, ctx, plan->k_reduce, 0, plan->partial);
        MHLA_SET_ARG(st, ctx, plan->k_reduce, 1, plan->summary);
        MHLA_SET_ARG(st, ctx, plan->k_reduce, 2, plan->grid);
        MHLA_SET_ARG(st, ctx, plan->k_reduce, 3, splits);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, plan->k_reduce, 2, rextent, rlocal, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(summary_reduce)"));
    }
cleanup:
    return st;
}
