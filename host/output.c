/* Stage 3 host side: kernels/output.cl, the per-token read-out with the normalizer fused, and the
 * official normalizer's per-token dot products that the mixing stage mixes. */
#include "internal.h"

mhla_status mhla__output_setup(mhla_plan *plan, const mhla_build_opts *opts)
{
    mhla_status st = MHLA_OK;
    cl_program prog = NULL;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_get(plan->ctx, "output", opts, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "block_output", &plan->k_output));
    plan->lws_output = mhla__local_size(plan->ctx, plan->k_output, 64);
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "official_dots", &plan->k_official_dots));
        plan->lws_dots = mhla__local_size(plan->ctx, plan->k_official_dots, 64);
    }
cleanup:
    return st;
}

mhla_status mhla__official_dots_enqueue(mhla_plan *plan, cl_mem q)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_kernel kern = plan->k_official_dots;
    const float feature_eps = plan->cfg.feature_eps, scale = plan->cfg.scale;
    const size_t local[2] = {plan->lws_dots, 1};
    const size_t global[2] = {mhla__round_up((size_t)plan->shape.n, local[0]), (size_t)plan->shape.bh};

    MHLA_SET_ARG(st, ctx, kern, 0, q);
    MHLA_SET_ARG(st, ctx, kern, 1, plan->summary);
    MHLA_SET_ARG(st, ctx, kern, 2, plan->dots);
    MHLA_SET_ARG(st, ctx, kern, 3, plan->grid);
    MHLA_SET_ARG(st, ctx, kern, 4, feature_eps);
    MHLA_SET_ARG(st, ctx, kern, 5, scale);
    MHLA_CL_TRY(st, ctx, clEnqueueNDRangeKernel(ctx->queue, kern, 2, NULL, global, local, 0, NULL, NULL),
                "clEnqueueNDRangeKernel(official_dots)");
cleanup:
    return st;
}

mhla_status mhla__output_enqueue(mhla_plan *plan, cl_mem q, cl_mem out, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_kernel kern = plan->k_output;
    const float feature_eps = plan->cfg.feature_eps, scale = plan->cfg.scale, eps = plan->cfg.eps;
    /* The kernel reads `den` only for the official normalizer; any valid buffer fills the slot. */
    cl_mem den = plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL ? plan->den : plan->mixed;
    const size_t local[3] = {plan->lws_output, 1, 1};
    const size_t global[3] = {mhla__round_up((size_t)plan->cfg.dv, local[0]), (size_t)plan->shape.n,
                              (size_t)plan->shape.bh};

    MHLA_SET_ARG(st, ctx, kern, 0, q);
    MHLA_SET_ARG(st, ctx, kern, 1, plan->mixed);
    MHLA_SET_ARG(st, ctx, kern, 2, den);
    MHLA_SET_ARG(st, ctx, kern, 3, out);
    MHLA_SET_ARG(st, ctx, kern, 4, plan->grid);
    MHLA_SET_ARG(st, ctx, kern, 5, feature_eps);
    MHLA_SET_ARG(st, ctx, kern, 6, scale);
    MHLA_SET_ARG(st, ctx, kern, 7, eps);
    MHLA_CL_TRY(st, ctx, clEnqueueNDRangeKernel(ctx->queue, kern, 3, NULL, global, local, 0, NULL, done),
                "clEnqueueNDRangeKernel(block_output)");
cleanup:
    return st;
}
