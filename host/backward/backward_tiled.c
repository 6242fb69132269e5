/* The non-causal backward of a tiled plan (the GPU rows; docs/tuning-notes.md "On GPUs"): after the
 * forward's summaries and mixtures, dq with G's per-token weights (bwd_dq_tiled), the gradient
 * summaries G (summary_tiled_weighted, its split blocks' segments left for the mixing), dS = Mc^T G
 * with the segments added on the way (mixing_splits, which also writes G whole for dMc), the official
 * normalizer's R = Mc^T r (mixing_splits too) and its terms (as the untiled form), dk and dv
 * (bwd_dkv_tiled, one launch), and dMc as the untiled form has it. Where the blocks are few
 * (bt_fuse) and whole, the read-outs mix S~ and dS themselves: two launches fewer, the forward's
 * mixing and dS's (kernels/backward_tiled.cl). Each read-out is a
 * tiled product through local memory (kernels/backward_tiled.cl) reading S~ and dS as they are
 * stored: no transposed copies, and no CLBlast GEMM. */
#include "backward/backward.h"

/* The read-outs (dq; dk and dv), fitted to what the device builds them for (as forward/tiled.c fits the
 * forward's): each try halves the groups below what a kernel reported. */
static mhla_status readouts_build(mhla_plan *plan, mhla_bwd *b, mhla_fit *fit, int *refit)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_program prog = NULL;
    *refit = 0;
    mhla__tiles_backward_tiled(&plan->cfg, &plan->shape, &plan->tuning, fit, &b->tiles);
    if (b->tiles.bt_tq == 0)
        return MHLA_OK;
    const size_t want = mhla__bwd_tiled_wg(&b->tiles);
    const uint64_t local = mhla__bwd_tiled_local(&b->tiles);
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_TILED, &plan->cfg, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dq_tiled", &b->k_dq_tiled));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dkv_tiled", &b->k_dkv_tiled));
    cl_kernel kernels[2] = {b->k_dq_tiled, b->k_dkv_tiled};
    for (int i = 0; i < 2; ++i) {
        const int r = mhla__fit_check(ctx, kernels[i], want, local, fit);
        MHLA_FAIL_IF(st, r < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo failed for the tiled backward");
        *refit |= r;
    }
    b->wg_bt = want;
cleanup:
    return st;
}

static void readouts_release(mhla_bwd *b)
{
    cl_kernel *kernels[2] = {&b->k_dq_tiled, &b->k_dkv_tiled};
    for (int i = 0; i < 2; ++i) {
        if (*kernels[i])
            clReleaseKernel(*kernels[i]);
        *kernels[i] = NULL;
    }
}

mhla_status mhla__backward_tiled_setup(mhla_plan *plan, mhla_bwd *b)
{
    mhla_status st = MHLA_OK;
    b->tiles.bt_tq = 0;
    if (!plan->tiles.tiled || plan->tuning.bt_tq < 1)
        return MHLA_OK;
    mhla_fit fit;
    mhla__fit_init(plan->ctx, &fit);
    int refit = 1;
    for (int tries = 0; tries < 6 && refit; ++tries) { /* each try at least halves a group: a few suffice */
        readouts_release(b);
        MHLA_FORWARD_IF_ERROR(st, readouts_build(plan, b, &fit, &refit));
        if (b->tiles.bt_tq == 0)
            break;
    }
    if (!refit && b->tiles.bt_tq > 0) /* fitted (else none fits, or still too large after the tries) */
        MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_weighted_kernel(plan, 1, &b->k_gsum));
    if (!b->k_gsum) { /* the untiled backward, whole */
        readouts_release(b);
        b->tiles.bt_tq = 0;
    }
cleanup:
    return st;
}

/* Whether this plan's tiled read-out over `heads` x `blocks` blocks of `block_tokens` mixes `sources`
 * matrices itself (mhla__bwd_readout_mixes: bt_fuse, fuse_mb, whole blocks). */
static int readout_mixes(const mhla_bwd *b, int64_t heads, int64_t blocks, int64_t block_tokens, int64_t sources,
                         int whole)
{
    return b->k_dq_tiled && mhla__bwd_readout_mixes(&b->cfg, b->tiles.bt_fuse, b->tiles.bt_tq, b->tiles.fuse_mb,
                                                    heads, blocks, block_tokens, sources, whole);
}

int mhla__backward_tiled_mixes(const mhla_plan *plan, const mhla_bwd *b)
{
    const mhla_shape *sh = &plan->shape;
    return readout_mixes(b, sh->bh, sh->m, sh->nb, sh->m_kv, plan->tiles.splits == 1);
}

/* One read-out's part of the description where bt_fuse admits its matrices (whole blocks, within
 * bt_fuse, not the official normalizer): whether it mixes them and what that reads again, or that
 * fuse_mb keeps the mixing apart. Returns the characters written. */
static size_t describe_readout(const mhla_bwd *b, const char *what, int64_t heads, int64_t blocks,
                               int64_t block_tokens, int64_t sources, int whole, char *buf, size_t size)
{
    const mhla_tiles *t = &b->tiles;
    if (!b->k_dq_tiled || !mhla__bwd_readout_mixes(&b->cfg, t->bt_fuse, t->bt_tq, MHLA_FUSE_MB_ANY, heads, blocks,
                                                   block_tokens, sources, whole))
        return 0;
    const double mib = mhla__fuse_rereads(&b->cfg, heads, blocks, block_tokens, t->bt_tq, sources) / 1048576.0;
    const int n =
        readout_mixes(b, heads, blocks, block_tokens, sources, whole)
            ? snprintf(buf, size, ", %s mixed inside the read-out (bt_fuse %d: %.1f MiB read again)", what, t->bt_fuse,
                       mib)
            : snprintf(buf, size, ", %s mixed apart (inside the read-out: %.1f MiB read again, over fuse_mb %d)", what,
                       mib, t->fuse_mb);
    return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

void mhla__backward_tiled_describe_mixing(const mhla_plan *plan, const mhla_bwd *b, char *buf, size_t size)
{
    const mhla_shape *sh = &plan->shape;
    const int whole = plan->tiles.splits == 1;
    buf[0] = '\0';
    const size_t n = describe_readout(b, "S~ for dq", sh->bh, sh->m, sh->nb, sh->m_kv, whole, buf, size);
    /* grouped heads' G is added over each key/value head's query heads, segments and all */
    describe_readout(b, "dS for dk and dv", sh->bh_kv, sh->m_kv, sh->nb_kv, sh->m, whole || b->k_group_sum != NULL,
                     buf + n, size - n);
}

/* Column tiles of a `width`-wide output. */
static size_t column_tiles(const mhla_bwd *b, int64_t width)
{
    return ((size_t)width + (size_t)b->tiles.bt_tv - 1) / (size_t)b->tiles.bt_tv;
}

/* A read-out over `g`'s tokens: (BT_WG * column tiles, heads, blocks * token tiles). */
static mhla_status readout_launch(mhla_plan *plan, mhla_bwd *b, cl_kernel kern, const mhla_grid *g, size_t tiles,
                                  const char *what)
{
    const size_t tq = (size_t)b->tiles.bt_tq;
    const size_t extent[3] = {b->wg_bt * tiles, (size_t)g->bh, (size_t)g->m * (((size_t)g->nb + tq - 1) / tq)};
    const size_t local[3] = {b->wg_bt, 1, 1};
    return mhla__launch(plan->ctx, kern, 3, extent, local, 0, NULL, NULL, what);
}

mhla_status mhla__backward_tiled_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                         cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, int mixed)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_config *c = &plan->cfg;
    const float feps = c->feature_eps, scale = c->scale, eps = c->eps;
    const cl_int m = (cl_int)plan->shape.m, m_kv = (cl_int)plan->shape.m_kv;
    const size_t scols = (size_t)plan->shape.bh_kv * (size_t)c->dk * (size_t)plan->shape.summary_cols;
    const size_t dcols = (size_t)plan->shape.bh * (size_t)plan->shape.nb;
    const int official = c->normalizer == MHLA_NORMALIZER_OFFICIAL;
    cl_mem den = official ? plan->den : plan->mixed; /* (read by the official normalizer only) */

    /* S~ as the forward mixed it, or mixed by each group from the (whole) summaries */
    const cl_int q_sources = mixed ? 0 : m_kv;
    cl_mem s_rows = mixed ? plan->mixed : plan->summary;
    MHLA_SET_ARGS(st, ctx, b->k_dq_tiled, 0, MHLA_ARG(q), MHLA_ARG(dout), MHLA_ARG(s_rows),
                  MHLA_ARG(den), MHLA_ARG(dq), MHLA_ARG(b->inv), MHLA_ARG(b->r), MHLA_ARG(plan->grid), MHLA_ARG(feps),
                  MHLA_ARG(scale), MHLA_ARG(eps), MHLA_ARG(mixing), MHLA_ARG(q_sources));
    MHLA_FORWARD_IF_ERROR(st, readout_launch(plan, b, b->k_dq_tiled, &plan->grid, column_tiles(b, c->dk),
                                             "clEnqueueNDRangeKernel(bwd_dq_tiled)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));

    /* G_i = sum_t phi(q_t) [scale dO_t / den_t | scale r_t]^T; its z column is read by the paper
     * normalizer only. Grouped heads add G over each key/value head's query heads first, so their
     * segments are added here; otherwise the mixing adds them. */
    const float zscale = c->normalizer == MHLA_NORMALIZER_PAPER ? scale : 0.0f;
    const int grouped = b->k_group_sum != NULL;
    cl_int segments = 1;
    MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_weighted_enqueue(plan, b->k_gsum, 1, q, dout, b->inv, b->r, zscale,
                                                                   b->grad, grouped ? NULL : &segments));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (grouped) {
        const size_t ext[3] = {scols, (size_t)m, 1};
        MHLA_SET_ARGS(st, ctx, b->k_group_sum, 0, MHLA_ARG(b->grad), MHLA_ARG(b->grad_kv), MHLA_ARG(plan->grid));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_group_sum, 2, ext, b->lws_group, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_group_sum)"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    /* dS = Mc^T G: M_kv x M (Mc read transposed in place) times the M rows of G (their segments
     * added), G whole into grad; or, where G is whole and its M rows within bt_fuse, dS_b mixed by
     * each dk/dv group itself */
    const mhla_shape *sh = &plan->shape;
    const cl_int kv_sources = readout_mixes(b, sh->bh_kv, sh->m_kv, sh->nb_kv, m, segments == 1) ? m : 0;
    if (!kv_sources)
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_splits(plan, mixing, 1, (size_t)m_kv, (size_t)m,
                                                      segments > 1 ? plan->partial : b->grad_kv, segments,
                                                      b->grad_kv, b->dsum, scols));
    if (official) { /* R = Mc^T r (Mc in place), then dS's z column and dq's R z term from it */
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_splits(plan, mixing, 1, (size_t)m, (size_t)m, b->r, 1, b->r, b->rmix,
                                                      dcols));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_official_dz(plan, b, q, dq));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));

    /* dk and dv of the H_kv heads on the key/value grid, in one launch: dk's column tiles, then dv's */
    const cl_int dk_tiles = (cl_int)column_tiles(b, c->dk);
    cl_mem ds_rows = kv_sources ? b->grad_kv : b->dsum;
    MHLA_SET_ARGS(st, ctx, b->k_dkv_tiled, 0, MHLA_ARG(k), MHLA_ARG(v), MHLA_ARG(ds_rows),
                  MHLA_ARG(dk), MHLA_ARG(dv), MHLA_ARG(plan->kv_grid), MHLA_ARG(feps), MHLA_ARG(dk_tiles),
                  MHLA_ARG(mixing), MHLA_ARG(kv_sources));
    MHLA_FORWARD_IF_ERROR(st, readout_launch(plan, b, b->k_dkv_tiled, &plan->kv_grid,
                                             (size_t)dk_tiles + column_tiles(b, c->dv),
                                             "clEnqueueNDRangeKernel(bwd_dkv_tiled)"));
    if (dmixing)
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing_noncausal(plan, b, dmixing));
cleanup:
    return st;
}
