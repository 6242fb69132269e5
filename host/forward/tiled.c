/* The tiled forward's kernels (GPU rows: kernels/summary_tiled.cl and output_tiled.cl; the mixing is
 * mixing.cl's mixing_splits, forward/mixing.c). Both are built for exact work-group sizes
 * (reqd_work_group_size), and a device may build a kernel for fewer work-items than it allows a
 * group (llvmpipe: 32 for output_tiled's 48 at Dv 40, its registers): the tiles are then fitted again
 * below what it reported, and where nothing fits, the plan takes the untiled stages. */
#include "forward/forward.h"

/* Work-items of the groups (TL_RR x 4 and 4 x 4 tiles each). */
static size_t summary_group(const mhla_tiles *t) { return (size_t)(t->tl_td / t->tl_rr) * (size_t)(t->tl_tv / 4); }
static size_t output_group(const mhla_tiles *t) { return (size_t)(t->tl_tq / t->tl_qr) * (size_t)(t->tl_tv / 4); }

static mhla_status kernel_of(mhla_plan *plan, mhla_kernel_file f, const char *name, cl_kernel *out, size_t *wg)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_program prog = NULL;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, f, &plan->cfg, &plan->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, name, out));
    MHLA_CL_TRY(st, ctx, mhla__kernel_wg_size(ctx, *out, wg), "clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)");
cleanup:
    return st;
}

mhla_status mhla__tiled_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_fit fit;
    mhla__fit_init(plan->ctx, &fit);
    /* each try at least halves a group: a few suffice */
    for (int tries = 0; tries < 6 && plan->tiles.tiled; ++tries) {
        size_t swg = 0, owg = 0;
        MHLA_FORWARD_IF_ERROR(st, kernel_of(plan, MHLA_KF_SUMMARY_TILED, "summary_tiled", &plan->k_summary, &swg));
        MHLA_FORWARD_IF_ERROR(st, kernel_of(plan, MHLA_KF_OUTPUT_TILED, "output_tiled", &plan->k_output, &owg));
        const size_t sw = summary_group(&plan->tiles), ow = output_group(&plan->tiles);
        if (swg >= sw && owg >= ow) {
            plan->lws_summary[0] = sw, plan->lws_output[0] = ow;
            plan->lws_summary[1] = plan->lws_summary[2] = plan->lws_output[1] = plan->lws_output[2] = 1;
            goto cleanup;
        }
        clReleaseKernel(plan->k_summary), clReleaseKernel(plan->k_output);
        plan->k_summary = plan->k_output = NULL;
        const size_t below = swg < sw ? swg : owg;
        if (below < 1 || (sw <= 1 && ow <= 1))
            break;
        fit.wg = below < fit.wg ? below : fit.wg - 1;
        mhla__tiles_tiled(&plan->cfg, &plan->shape, &plan->tuning, &fit, &plan->tiles);
    }
    plan->tiles.tiled = 0; /* the untiled stages (block_summary.cl, output.cl) */
cleanup:
    return st;
}
