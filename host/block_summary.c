/* Stage 1 host side: builds and launches kernels/block_summary.cl (S_b and z_b per block). */
#include "internal.h"

mhla_status mhla__block_summary_setup(mhla_plan *plan, const mhla_build_opts *opts)
{
    mhla_status st = MHLA_OK;
    cl_program prog = NULL;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_get(plan->ctx, "block_summary", opts, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "block_summary", &plan->k_summary));
    /* 64 work-items: two warps / one wavefront, and a vector-friendly width for CPU devices. */
    plan->lws_summary = mhla__local_size(plan->ctx, plan->k_summary, 64);
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
    const size_t entries = (size_t)plan->cfg.dk * (size_t)plan->shape.summary_cols;
    const size_t local[3] = {plan->lws_summary, 1, 1};
    const size_t global[3] = {mhla__round_up(entries, local[0]), (size_t)plan->shape.m, (size_t)plan->shape.bh};

    MHLA_SET_ARG(st, ctx, kern, 0, k);
    MHLA_SET_ARG(st, ctx, kern, 1, v);
    MHLA_SET_ARG(st, ctx, kern, 2, plan->summary);
    MHLA_SET_ARG(st, ctx, kern, 3, plan->grid);
    MHLA_SET_ARG(st, ctx, kern, 4, feature_eps);
    MHLA_CL_TRY(st, ctx, clEnqueueNDRangeKernel(ctx->queue, kern, 3, NULL, global, local, num_wait, wait, NULL),
                "clEnqueueNDRangeKernel(block_summary)");
cleanup:
    return st;
}
