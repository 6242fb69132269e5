/* The official normalizer's backward terms that go through R = Mc^T r (docs/spec.md "Backward":
 * rho), shared by the untiled and the tiled non-causal backward. */
#include "backward/backward.h"

/* The official normalizer's terms through R = Mc^T r (b->rmix): dz_b, the z column of dS, sum_p R q~
 * over the block's tokens (bwd_official_dz_part in parts of a block's tokens, then
 * bwd_official_dz_sum), and dq += scale phi'(q) R z_i in the same pass over q. */
mhla_status mhla__backward_official_dz(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem dq)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const float feps = plan->cfg.feature_eps, scale = plan->cfg.scale;
    const size_t zvec = (size_t)(plan->cfg.dk / b->tiles.bwd_vk), bh = (size_t)plan->shape.bh,
                 m = (size_t)plan->shape.m;
    const cl_int parts = b->dz_parts;
    const size_t pext[3] = {zvec, bh, m * (size_t)parts};
    cl_kernel kr = b->k_official_dz;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(q), MHLA_ARG(b->rmix), MHLA_ARG(plan->summary), MHLA_ARG(dq),
                  MHLA_ARG(b->dz_partial), MHLA_ARG(plan->grid), MHLA_ARG(feps), MHLA_ARG(scale), MHLA_ARG(parts),
                  MHLA_ARG(b->dz_part_len));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, pext, b->lws_zpart, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_official_dz_part)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    const size_t ext[3] = {zvec, (size_t)plan->shape.bh_kv, m}; /* per key/value head */
    kr = b->k_official_dz_sum;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(b->dz_partial), MHLA_ARG(b->dsum), MHLA_ARG(plan->grid), MHLA_ARG(parts));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, b->lws_zsum, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_official_dz_sum)"));
cleanup:
    return st;
}
