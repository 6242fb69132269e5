/* The softmax-attention baseline, host side: kernels/softmax.cl (or softmax_tiled.cl where the tuning's
 * sm_tiled asks: the GPU rows) behind an mhla_plan that
 * mhla_forward() runs like an MHLA plan. Its tile comes from the tuning table (tune/tuning_rows.c, sm_*)
 * and is shrunk until the key/value tiles fit the device's local memory (tune/tiling.c). */
#include "forward/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The kernel for the plan's tile: built, then checked against what the device reports for it
 * (local memory, work-group size); a tile that does not fit is shrunk and the kernel rebuilt. */
static mhla_status attempt(void *arg, mhla_fit *fit, int *refit)
{
    mhla_status st = MHLA_OK;
    mhla_plan *plan = arg;
    mhla_context *ctx = plan->ctx;
    cl_program prog = NULL;
    MHLA_FORWARD_IF_ERROR(st, mhla__tiles_softmax(ctx, &plan->cfg, &plan->tuning, fit, &plan->tiles));
    const mhla_tiles *t = &plan->tiles;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, t->sm_tiled ? MHLA_KF_SOFTMAX_TILED : MHLA_KF_SOFTMAX,
                                                &plan->cfg, t, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, t->sm_tiled ? "softmax_tiled" : "softmax_attention",
                                                  &plan->k_softmax));
    /* the tiled form is built for exactly its group (reqd_work_group_size) */
    const size_t want = t->sm_tiled ? mhla__softmax_tiled_wg(t) : 1;
    *refit = mhla__fit_check(ctx, plan->k_softmax, want, mhla__softmax_local(&plan->cfg, t), fit);
    MHLA_FAIL_IF(st, *refit < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo(softmax_attention) failed on %s",
                 ctx->device_name);
cleanup:
    return st;
}

static void release_try(void *arg)
{
    mhla_plan *plan = arg;
    clReleaseKernel(plan->k_softmax);
    plan->k_softmax = NULL;
}

static void why_not(void *arg, const mhla_fit *fit, char *buf, size_t size)
{
    const mhla_plan *plan = arg;
    (void)fit;
    snprintf(buf, size,
             "the softmax kernel (Dk = %lld, Dv = %lld) does not fit %s's local memory (%llu bytes) even after "
             "shrinking its key tile to %d",
             (long long)plan->cfg.dk, (long long)plan->cfg.dv, plan->ctx->device_name,
             (unsigned long long)plan->ctx->limits.local_mem_bytes, plan->tiles.sm_bk);
}

mhla_status mhla_softmax_plan_create(mhla_context *ctx, const mhla_config *cfg, mhla_plan **out)
{
    mhla_status st = MHLA_OK;
    mhla_plan *plan = NULL;
    char msg[512];

    MHLA_FAIL_IF(st, !out, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_softmax_plan_create: out is NULL");
    *out = NULL;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_softmax_plan_create: context is NULL");
    plan = mhla__calloc(1, sizeof *plan);
    MHLA_FAIL_IF(st, !plan, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a plan");
    plan->ctx = ctx;
    plan->ops = &mhla__variant_softmax;
    st = mhla__softmax_config(cfg, &plan->cfg, &plan->shape, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "%s", msg);
    mhla__plan_fill_grid(plan);
    MHLA_FORWARD_IF_ERROR(st, mhla__tuning_lookup(ctx, &plan->cfg, &plan->tuning));
    const mhla_fit_loop loop = {attempt, release_try, why_not, plan, 4};
    MHLA_FORWARD_IF_ERROR(st, mhla__fit_build(ctx, &loop));
    if (plan->tiles.sm_tiled) { /* its group: sm_bq/4 x sm_bk/4 work-items, sm_bq queries */
        plan->lws_softmax = mhla__softmax_tiled_wg(&plan->tiles);
        *out = plan;
        plan = NULL;
        goto cleanup;
    }
    /* No more query rows per group than the sequence has (rounded to the kernel's preferred multiple):
     * the rows past its end would compute scores for nothing. */
    size_t multiple = 1;
    if (clGetKernelWorkGroupInfo(plan->k_softmax, ctx->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                 sizeof multiple, &multiple, NULL) != CL_SUCCESS ||
        multiple == 0)
        multiple = 1;
    const size_t rows = mhla__round_up((size_t)plan->shape.n, multiple);
    const size_t want = (size_t)plan->tiles.sm_bq < rows ? (size_t)plan->tiles.sm_bq : rows;
    plan->lws_softmax = mhla__local_size(ctx, plan->k_softmax, want);
    *out = plan;
    plan = NULL;
cleanup:
    mhla_plan_destroy(plan);
    return st;
}

mhla_status mhla__softmax_enqueue(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem out, cl_uint num_wait,
                                  const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_kernel kern = plan->k_softmax;
    const float scale = plan->cfg.scale;
    const size_t local[3] = {plan->lws_softmax, 1, 1};
    /* softmax_tiled: a group per sm_bq queries; softmax_attention: a work-item per query */
    const size_t n = (size_t)plan->shape.n, sq = (size_t)plan->tiles.sm_bq;
    const size_t items = plan->tiles.sm_tiled ? plan->lws_softmax * ((n + sq - 1) / sq) : n;
    const size_t global[3] = {mhla__round_up(items, local[0]), (size_t)plan->shape.bh, 1};

    MHLA_SET_ARGS(st, ctx, kern, 0, MHLA_ARG(q), MHLA_ARG(k), MHLA_ARG(v), MHLA_ARG(out), MHLA_ARG(plan->grid),
                  MHLA_ARG(scale), MHLA_ARG(plan->kv_grid));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kern, 2, global, local, num_wait, wait, done,
                                           plan->tiles.sm_tiled ? "clEnqueueNDRangeKernel(softmax_tiled)"
                                                                : "clEnqueueNDRangeKernel(softmax_attention)"));
cleanup:
    return st;
}

/* The softmax variant's table (forward/forward.h, mhla_plan_ops): no setup of its own
 * (mhla_softmax_plan_create makes it), one kernel, no mixing; no backward (backward/backward.c). */
static mhla_status softmax_forward(mhla_plan *plan, const cl_mem b[5], cl_uint num_wait, const cl_event *wait,
                                   cl_event *done)
{
    return mhla__softmax_enqueue(plan, b[MHLA_TENSOR_Q], b[MHLA_TENSOR_K], b[MHLA_TENSOR_V], b[MHLA_TENSOR_OUT],
                                 num_wait, wait, done);
}

static void softmax_describe(const mhla_plan *plan, char *buf, size_t size)
{
    const mhla_tiles *t = &plan->tiles;
    if (t->sm_tiled)
        snprintf(buf, size, "%s; softmax tiled: groups of %d queries x %d keys per tile (%zu work-items)",
                 plan->tuning.origin, t->sm_bq, t->sm_bk, mhla__softmax_tiled_wg(t));
    else
        snprintf(buf, size, "%s; softmax %d-wide, %d keys per tile, %d query rows%s", plan->tuning.origin,
                 t->sm_vw, t->sm_bk, t->sm_bq, t->sm_rows ? ", row copies" : "");
}

const mhla_plan_ops mhla__variant_softmax = {MHLA_VARIANT_SOFTMAX, "softmax", 0, 0, NULL, softmax_forward,
                                             softmax_describe};
