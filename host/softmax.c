/* The softmax-attention baseline, host side: kernels/softmax.cl behind an mhla_plan that
 * mhla_forward() runs like an MHLA plan. Its tile comes from the tuning table (host/tuning.c, sm_*)
 * and is shrunk until the key/value tiles fit the device's local memory. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Bytes of the kernel's local arrays for a tile: kt[DK*BK], vt[BK*DVP], bias[BK]. */
static size_t tile_local_bytes(const mhla_config *c, const mhla_softmax_tile *t)
{
    const size_t dvp = mhla__round_up((size_t)c->dv, (size_t)t->vw);
    return sizeof(float) * (size_t)t->bk * ((size_t)c->dk + dvp + 1);
}

mhla_status mhla__softmax_config(const mhla_config *cfg, mhla_config *resolved, mhla_shape *shape, char *msg,
                                 size_t msg_size)
{
    if (!cfg) {
        snprintf(msg, msg_size, "config is NULL");
        return MHLA_ERR_INVALID_ARGUMENT;
    }
    if (cfg->causal) {
        snprintf(msg, msg_size, "softmax attention plans are non-causal: causal must be 0, got %d", cfg->causal);
        return cfg->causal == 1 ? MHLA_ERR_UNSUPPORTED : MHLA_ERR_INVALID_ARGUMENT;
    }
    /* What softmax attention does not use is reset to its defaults, so that it cannot fail
     * validation: one block of all tokens, and the MHLA-only fields. */
    mhla_config c, defaults;
    mhla_config_init(&defaults);
    c = *cfg;
    c.block_t = c.block_h = c.block_w = 1;
    c.mixing_rows = 0;
    c.feature_map = defaults.feature_map;
    c.feature_eps = defaults.feature_eps;
    c.normalizer = defaults.normalizer;
    c.eps = defaults.eps;
    mhla_status st = mhla__config_validate(&c, shape, msg, msg_size);
    if (st != MHLA_OK)
        return st;
    if (c.scale == 0.0f)
        c.scale = (float)(1.0 / sqrt((double)c.dk));
    mhla__config_resolve(&c);
    *resolved = c;
    return MHLA_OK;
}

/* The tile for this plan on its device: the tuning's sm_* fields with the vector width made one
 * the kernel has (1, 2, 4, 8, 16; 0 = the device's preferred width), the key tile a multiple of it,
 * then the key tile halved (then the vector width) until the local arrays fit local memory with
 * room to spare for what the implementation reserves itself. */
static mhla_status choose_tile(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_config *c = &plan->cfg;
    mhla_softmax_tile *t = &plan->softmax_tile;
    const uint64_t reserve = 1024, have = ctx->limits.local_mem_bytes;
    const uint64_t limit = have > 2 * reserve ? have - reserve : have / 2;
    MHLA_FORWARD_IF_ERROR(st, mhla__tuning_lookup(ctx, &plan->tuning));
    cl_uint width = (cl_uint)plan->tuning.sm_vw;
    if (width == 0 && clGetDeviceInfo(ctx->device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof width, &width,
                                      NULL) != CL_SUCCESS)
        width = 4;
    t->vw = 1;
    while (t->vw < 16 && (cl_uint)t->vw * 2 <= width)
        t->vw *= 2;
    t->bq = plan->tuning.sm_bq;
    t->bk = plan->tuning.sm_bk < t->vw ? t->vw : plan->tuning.sm_bk / t->vw * t->vw;
    t->copy_rows = plan->tuning.sm_rows != 0;
    while (tile_local_bytes(c, t) > limit && (t->bk > t->vw || t->vw > 1)) {
        if (t->bk > t->vw) /* half the keys, still a multiple of vw */
            t->bk = t->bk / 2 < t->vw ? t->vw : t->bk / 2 / t->vw * t->vw;
        else
            t->vw = t->bk = t->vw / 2;
    }
    MHLA_FAIL_IF(st, tile_local_bytes(c, t) > limit, ctx, MHLA_ERR_UNSUPPORTED,
                 "softmax attention with Dk = %lld, Dv = %lld needs %zu bytes of local memory even with a one-key "
                 "tile; %s has %llu",
                 (long long)c->dk, (long long)c->dv, tile_local_bytes(c, t), ctx->device_name,
                 (unsigned long long)have);
cleanup:
    return st;
}

/* The one place the softmax kernel's specialization flags are assembled (they key the program
 * cache). */
static void softmax_build_options(const mhla_plan *plan, mhla_build_opts *opts)
{
    const mhla_config *c = &plan->cfg;
    mhla__opts_init(opts);
    mhla__opts_add(opts, "-DDK=%lld", (long long)c->dk);
    mhla__opts_add(opts, "-DDV=%lld", (long long)c->dv);
    mhla__opts_add(opts, "-DLAYOUT_BHND=%d", c->layout == MHLA_LAYOUT_BHND);
    mhla__opts_add(opts, "-DDTYPE=%d", (int)c->dtype);
    mhla__opts_add(opts, "-DVW=%d", plan->softmax_tile.vw);
    mhla__opts_add(opts, "-DBK=%d", plan->softmax_tile.bk);
    mhla__opts_add(opts, "-DCOPY_ROWS=%d", plan->softmax_tile.copy_rows);
}

mhla_status mhla_softmax_plan_create(mhla_context *ctx, const mhla_config *cfg, mhla_plan **out)
{
    mhla_status st = MHLA_OK;
    mhla_plan *plan = NULL;
    cl_program prog = NULL;
    mhla_build_opts opts;
    char msg[512];
    cl_ulong kernel_local = 0;

    MHLA_FAIL_IF(st, !out, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_softmax_plan_create: out is NULL");
    *out = NULL;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_softmax_plan_create: context is NULL");
    plan = calloc(1, sizeof *plan);
    MHLA_FAIL_IF(st, !plan, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a plan");
    plan->ctx = ctx;
    plan->softmax = 1;
    st = mhla__softmax_config(cfg, &plan->cfg, &plan->shape, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "%s", msg);
    mhla__plan_fill_grid(plan);
    MHLA_FORWARD_IF_ERROR(st, choose_tile(plan));
    softmax_build_options(plan, &opts);
    MHLA_FORWARD_IF_ERROR(st, mhla__program_get(ctx, "softmax", &opts, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "softmax_attention", &plan->k_softmax));
    MHLA_CL_TRY(st, ctx,
                clGetKernelWorkGroupInfo(plan->k_softmax, ctx->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof kernel_local,
                                         &kernel_local, NULL),
                "clGetKernelWorkGroupInfo(softmax_attention, CL_KERNEL_LOCAL_MEM_SIZE)");
    MHLA_FAIL_IF(st, kernel_local > ctx->limits.local_mem_bytes, ctx, MHLA_ERR_UNSUPPORTED,
                 "the softmax kernel (Dk = %lld, Dv = %lld, %d-key tile) uses %llu bytes of local memory; %s has %llu",
                 (long long)plan->cfg.dk, (long long)plan->cfg.dv, plan->softmax_tile.bk,
                 (unsigned long long)kernel_local, ctx->device_name, (unsigned long long)ctx->limits.local_mem_bytes);
    /* No more query rows per group than the sequence has (rounded to the kernel's preferred multiple):
     * the rows past its end would compute scores for nothing. */
    size_t multiple = 1;
    if (clGetKernelWorkGroupInfo(plan->k_softmax, ctx->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                 sizeof multiple, &multiple, NULL) != CL_SUCCESS ||
        multiple == 0)
        multiple = 1;
    const size_t rows = mhla__round_up((size_t)plan->shape.n, multiple);
    const size_t want = (size_t)plan->softmax_tile.bq < rows ? (size_t)plan->softmax_tile.bq : rows;
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
    const size_t local[2] = {plan->lws_softmax, 1};
    const size_t global[2] = {mhla__round_up((size_t)plan->shape.n, local[0]), (size_t)plan->shape.bh};

    MHLA_SET_ARG(st, ctx, kern, 0, q);
    MHLA_SET_ARG(st, ctx, kern, 1, k);
    MHLA_SET_ARG(st, ctx, kern, 2, v);
    MHLA_SET_ARG(st, ctx, kern, 3, out);
    MHLA_SET_ARG(st, ctx, kern, 4, plan->grid);
    MHLA_SET_ARG(st, ctx, kern, 5, scale);
    MHLA_CL_TRY(st, ctx, clEnqueueNDRangeKernel(ctx->queue, kern, 2, NULL, global, local, num_wait, wait, done),
                "clEnqueueNDRangeKernel(softmax_attention)");
cleanup:
    return st;
}
