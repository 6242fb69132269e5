/* Stage 1 host side: kernels/block_summary.cl (S_b and z_b per block). Decides how long blocks
 * are split into segments so that the device has enough work-groups, and owns the segments'
 * partial summaries. */
#include "forward/forward.h"

#include <string.h>

/* Work-items of one block segment: its register tiles. */
static size_t summary_tiles(const mhla_plan *plan)
{
    return mhla__summary_work_items(&plan->tiles, plan->cfg.dk, plan->cfg.dv);
}

/* Groups of one segment of the tiled summary (their size: lws_summary, forward/tiled.c). */
static size_t tiled_groups(const mhla_plan *plan)
{
    const mhla_tiles *t = &plan->tiles;
    return (size_t)((plan->cfg.dk + t->tl_td - 1) / t->tl_td) * (size_t)((plan->cfg.dv + t->tl_tv - 1) / t->tl_tv);
}

mhla_status mhla__block_summary_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    cl_program prog = NULL;
    mhla_context *ctx = plan->ctx;
    const mhla_tiles *t = &plan->tiles;

    if (t->tiled) /* the summary and the read-out kernels, fitted together */
        MHLA_FORWARD_IF_ERROR(st, mhla__tiled_setup(plan));
    if (!t->tiled) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BLOCK_SUMMARY, &plan->cfg, t, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "block_summary", &plan->k_summary));
        const size_t extent[3] = {summary_tiles(plan), 1, 1};
        mhla__local_size_3d(ctx, plan->k_summary, extent, (size_t)t->wg, plan->lws_summary);
        if (t->splits > 1)
            MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "summary_reduce", &plan->k_reduce));
    }
    if (t->splits > 1) {
        /* the key/value side's segments, and the backward's weighted summaries of the query side
         * where its blocks are as long (summary_launch): room for the side with more blocks */
        const mhla_shape *sh = &plan->shape;
        const int64_t q_side = sh->bh * sh->m, kv_side = sh->bh_kv * sh->m_kv;
        const size_t heads = (size_t)(q_side > kv_side ? q_side : kv_side);
        const size_t bytes = heads * (size_t)plan->cfg.dk * (size_t)(plan->cfg.dv + 1) * sizeof(float) * (size_t)t->splits;
        if (plan->k_reduce)
            plan->lws_reduce = mhla__local_size(ctx, plan->k_reduce, (size_t)t->wg);
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, bytes, "the block segments' summaries",
                                                      &plan->partial));
        plan->workspace_bytes += bytes;
    }
cleanup:
    return st;
}

/* Segments per block of the summaries over grid g: the key/value grid's, and the query grid's
 * only where its blocks are as long (a cross-attention plan sums its query blocks whole). */
static cl_int grid_splits(const mhla_plan *plan, const mhla_grid *g)
{
    return g->nb != plan->kv_grid.nb ? 1 : plan->tiles.splits;
}

/* Launches `kern` (block_summary or block_summary_weighted, or their tiled forms: `tiled`; the
 * caller has set their further arguments) into `out`, through the segments' partial summaries
 * where blocks are split: added into `out` (summary_reduce), or, `leave`, left in plan->partial for
 * mixing_splits to add. The forward's summaries are of the key/value grid (`g` plan->kv_grid); the
 * backward's weighted ones of the query grid (plan->grid). */
static mhla_status summary_launch(mhla_plan *plan, const mhla_grid *g, cl_kernel kern, int tiled, int leave, cl_mem k,
                                  cl_mem v, cl_mem out, cl_uint num_wait, const cl_event *wait, const char *what)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const float feature_eps = plan->cfg.feature_eps;
    const cl_int splits = grid_splits(plan, g), split_len = splits > 1 ? plan->tiles.split_len : g->nb;
    cl_mem dst = splits > 1 ? plan->partial : out;
    const size_t extent[3] = {tiled ? plan->lws_summary[0] * tiled_groups(plan) : summary_tiles(plan), (size_t)g->bh,
                              (size_t)g->m * (size_t)splits};

    MHLA_SET_ARGS(st, ctx, kern, 0, MHLA_ARG(k), MHLA_ARG(v), MHLA_ARG(dst), MHLA_ARG(*g),
                  MHLA_ARG(feature_eps), MHLA_ARG(splits), MHLA_ARG(split_len));
    const size_t *local = kern == plan->k_summary || tiled ? plan->lws_summary : plan->lws_weighted;
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kern, 3, extent, local, num_wait, wait, NULL, what));
    if (splits > 1 && !leave) {
        const size_t row = (size_t)g->bh * (size_t)plan->cfg.dk * (size_t)(plan->cfg.dv + 1);
        const size_t rextent[3] = {(row + 3) / 4, (size_t)g->m, 1};
        const size_t rlocal[3] = {plan->lws_reduce, 1, 1};
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_SET_ARGS(st, ctx, plan->k_reduce, 0, MHLA_ARG(plan->partial), MHLA_ARG(out), MHLA_ARG(*g),
                      MHLA_ARG(splits));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, plan->k_reduce, 2, rextent, rlocal, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(summary_reduce)"));
    }
cleanup:
    return st;
}

mhla_status mhla__block_summary_enqueue(mhla_plan *plan, cl_mem k, cl_mem v, cl_uint num_wait,
                                        const cl_event *wait)
{
    /* The tiled summary leaves its segments to the mixing (mixing_splits adds them) */
    const int tiled = plan->tiles.tiled;
    return summary_launch(plan, &plan->kv_grid, plan->k_summary, tiled, tiled, k, v, plan->summary, num_wait, wait,
                          tiled ? "clEnqueueNDRangeKernel(summary_tiled)" : "clEnqueueNDRangeKernel(block_summary)");
}

mhla_status mhla__block_summary_weighted_kernel(mhla_plan *plan, int tiled, cl_kernel *out)
{
    mhla_status st = MHLA_OK;
    cl_program prog = NULL;
    if (tiled) { /* the same program as the plan's summary_tiled, the same group */
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(plan->ctx, MHLA_KF_SUMMARY_TILED, &plan->cfg, &plan->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "summary_tiled_weighted", out));
        size_t wg = 0;
        MHLA_CL_TRY(st, plan->ctx, mhla__kernel_wg_size(plan->ctx, *out, &wg),
                    "clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)");
        if (wg < plan->lws_summary[0]) { /* built for fewer work-items than summary_tiled: not taken */
            clReleaseKernel(*out);
            *out = NULL;
            return MHLA_OK;
        }
    }
    const int reduce = plan->tiles.splits > 1 && !plan->k_reduce; /* a tiled plan's forward needs none */
    if (!tiled || reduce)
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(plan->ctx, MHLA_KF_BLOCK_SUMMARY, &plan->cfg, &plan->tiles, &prog));
    if (!tiled) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "block_summary_weighted", out));
        if (plan->tiles.tiled) { /* the plan's own summary is the tiled one, launched otherwise */
            const size_t extent[3] = {summary_tiles(plan), 1, 1};
            mhla__local_size_3d(plan->ctx, *out, extent, (size_t)plan->tiles.wg, plan->lws_weighted);
        } else {
            memcpy(plan->lws_weighted, plan->lws_summary, sizeof plan->lws_weighted);
        }
    }
    if (reduce) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "summary_reduce", &plan->k_reduce));
        plan->lws_reduce = mhla__local_size(plan->ctx, plan->k_reduce, (size_t)plan->tiles.wg);
    }
cleanup:
    return st;
}

mhla_status mhla__block_summary_weighted_enqueue(mhla_plan *plan, cl_kernel kern, int tiled, cl_mem k, cl_mem v,
                                                 cl_mem w, cl_mem wz, float zscale, cl_mem out, cl_int *segments)
{
    mhla_status st = MHLA_OK;
    MHLA_SET_ARGS(st, plan->ctx, kern, 7, MHLA_ARG(w), MHLA_ARG(wz), MHLA_ARG(zscale));
    const cl_int splits = grid_splits(plan, &plan->grid);
    if (segments)
        *segments = splits;
    MHLA_FORWARD_IF_ERROR(st, summary_launch(plan, &plan->grid, kern, tiled, segments != NULL, k, v, out, 0, NULL,
                                             tiled ? "clEnqueueNDRangeKernel(summary_tiled_weighted)"
                                                   : "clEnqueueNDRangeKernel(block_summary_weighted)"));
cleanup:
    return st;
}
