/* The non-causal forward in one launch (kernels/forward_one.cl) for short sequences on tiled
 * plans: where M x N_kv is at most the tuning's tl_one, each query block's groups mix their
 * summary from every key themselves and read it out, so that the forward is one launch where the
 * tiled stages are two or three (at N = 1024 on a GPU each of them mostly the gap before it:
 * docs/tuning-notes.md "The forward in one launch"). Not where the summaries are wanted after it
 * (a plan kept for a backward, shards) or the official normalizer's per-token dots are. */
#include "forward/forward.h"

/* The plan's shape and tuning ask for it (whether it runs: mhla__forward_one_runs). */
static int wanted(const mhla_plan *plan)
{
    const mhla_tiles *t = &plan->tiles;
    return t->tiled && t->on_tv > 0 && !plan->shard && plan->cfg.normalizer != MHLA_NORMALIZER_OFFICIAL &&
           (int64_t)plan->shape.m * plan->shape.n_kv <= (int64_t)t->tl_one;
}

int mhla__forward_one_runs(const mhla_plan *plan) { return plan->k_one != NULL && !plan->save_for_backward; }

mhla_status mhla__forward_one_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_program prog = NULL;
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    /* each refit at least halves a group or its pool: a few tries suffice */
    for (int tries = 0; tries < 8 && wanted(plan); ++tries) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_FORWARD_ONE, &plan->cfg, &plan->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "forward_one", &plan->k_one));
        const size_t wg = mhla__forward_one_wg(&plan->cfg, &plan->tiles);
        const int refit = mhla__fit_check(ctx, plan->k_one, wg,
                                          mhla__forward_one_local(&plan->cfg, &plan->tiles), &fit);
        MHLA_FAIL_IF(st, refit < 0, ctx, MHLA_ERR_OPENCL,
                     "clGetKernelWorkGroupInfo failed for forward_one on %s", ctx->device_name);
        if (!refit) {
            plan->lws_one = wg;
            goto cleanup;
        }
        clReleaseKernel(plan->k_one);
        plan->k_one = NULL;
        mhla__tiles_one(&plan->cfg, &plan->tuning, &fit, &plan->tiles);
    }
    plan->tiles.on_tv = 0; /* nothing fits: the tiled stages */
cleanup:
    return st;
}

mhla_status mhla__forward_one_enqueue(mhla_plan *plan, const cl_mem b[5], cl_uint num_wait, const cl_event *wait,
                                      cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_kernel kern = plan->k_one;
    const float feature_eps = plan->cfg.feature_eps, scale = plan->cfg.scale, eps = plan->cfg.eps;
    const size_t col_groups = (size_t)((plan->cfg.dv + plan->tiles.on_tv - 1) / plan->tiles.on_tv);
    const size_t extent[3] = {plan->lws_one * col_groups, (size_t)plan->shape.bh, (size_t)plan->shape.m};
    const size_t local[3] = {plan->lws_one, 1, 1};
    MHLA_SET_ARGS(st, ctx, kern, 0, MHLA_ARG(b[MHLA_TENSOR_Q]), MHLA_ARG(b[MHLA_TENSOR_K]),
                  MHLA_ARG(b[MHLA_TENSOR_V]), MHLA_ARG(b[MHLA_TENSOR_MIXING]), MHLA_ARG(b[MHLA_TENSOR_OUT]),
                  MHLA_ARG(plan->grid), MHLA_ARG(plan->kv_grid), MHLA_ARG(feature_eps), MHLA_ARG(scale),
                  MHLA_ARG(eps));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kern, 3, extent, local, num_wait, wait, done,
                                           "clEnqueueNDRangeKernel(forward_one)"));
cleanup:
    return st;
}
