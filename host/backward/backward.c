/* The non-causal stages of mhla_backward (docs/spec.md "Backward"). The forward's summaries are
 * recomputed with its own stages (nothing per token is kept between the passes); then dq with the
 * per-token normalizer terms and the weights of the gradient summaries
 * G_i = sum_t q~_t [scale dO_t/den_t | scale dL/dden_t]^T in one read-out
 * (kernels/backward_readout.cl), G by the forward's summary kernel weighted (from q and dO in place,
 * its z column too), dS = Mc^T G through the forward's mixing GEMM, dk and dv in one more read-out,
 * and dMc[i,b] = <G_i, S_b> reduced in a fixed order (kernels/backward_mixing.cl). */
#include "backward/backward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mhla__backward_destroy(mhla_bwd *b)
{
    if (!b)
        return;
    cl_kernel kernels[] = {b->k_official_dz, b->k_official_dz_sum, b->k_dq,       b->k_dkv,
                           b->k_transpose,   b->k_dmixing,     b->k_dmix_reduce,     b->k_tsum,     b->k_gsum,
                           b->k_group_sum,   b->k_dq_tiled,    b->k_dkv_tiled};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    cl_mem mems[] = {b->grad, b->dsum,      b->mix_t,      b->inv,      b->r,
                     b->rmix, b->tsum,      b->dmix_part,  b->dz_partial, b->grad_kv != b->grad ? b->grad_kv : NULL};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    for (size_t i = 0; i < sizeof b->stage / sizeof b->stage[0]; ++i)
        if (b->stage[i])
            clReleaseMemObject(b->stage[i]);
    mhla__backward_causal_destroy(b);
    mhla__free(b);
}

/* The per-token read-outs' local size over (token groups, heads, blocks): every head of a few
 * token groups per work-group on CPU rows (bwd_heads), a run of one head's token groups otherwise
 * (a GPU ran linear-bwd slower with every head; docs/tuning-notes.md "Backward"). */
static void local_size(mhla_context *ctx, cl_kernel kernel, const size_t extent[3], size_t wg, int heads,
                       size_t local[3])
{
    if (heads)
        mhla__local_size_heads(ctx, kernel, extent, wg, local);
    else
        mhla__local_size_3d(ctx, kernel, extent, wg, local);
}

/* Kernels and workspace of a non-causal plan's backward: summary-sized buffers (G of the query
 * heads and blocks, G summed per key/value head where heads are grouped, dS of the key/value blocks),
 * a transposed one, Mc^T, dMc's partial sums (one M x M_kv per chunk of a summary row), and two floats
 * per query token, G's weights scale/den_t and dL/dden_t, as the forward's official normalizer keeps
 * its dots (the official normalizer also R = Mc^T r and the parts of dS's z column). */
static mhla_status setup(mhla_plan *plan, mhla_bwd *b)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_program prog = NULL;
    const mhla_config *c = &plan->cfg;
    const mhla_shape *sh = &plan->shape;
    const size_t m = (size_t)sh->m, bh = (size_t)sh->bh, m_kv = (size_t)sh->m_kv, bh_kv = (size_t)sh->bh_kv;
    const size_t head_bytes = (size_t)c->dk * (size_t)sh->summary_cols * sizeof(float);
    const size_t wg = (size_t)plan->tiles.wg;
    const size_t scols = bh_kv * (size_t)c->dk * (size_t)sh->summary_cols, dcols = bh * (size_t)sh->nb;
    const size_t x2max = c->normalizer == MHLA_NORMALIZER_OFFICIAL ? dcols : 0; /* r . dots: a second pair */
    const size_t m_most = m > m_kv ? m : m_kv;

    /* the tiled read-outs and gradient summaries where they fit; else the untiled ones */
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_tiled_setup(plan, b));
    const int tiled = b->tiles.bt_tq > 0;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_SUMMARY, c, &b->tiles, &prog));
    if (!tiled)
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_transpose_summary", &b->k_tsum));
    if (sh->group > 1) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_group_sum", &b->k_group_sum));
        const size_t gext[3] = {scols, m, 1};
        mhla__local_size_3d(ctx, b->k_group_sum, gext, wg, b->lws_group);
    }
    if (c->normalizer == MHLA_NORMALIZER_OFFICIAL) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_official_dz_part", &b->k_official_dz));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_official_dz_sum", &b->k_official_dz_sum));
    }
    if (!tiled) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_READOUT, c, &b->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dq_readout", &b->k_dq));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_dkv_readout", &b->k_dkv));
        MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_weighted_kernel(plan, 0, &b->k_gsum));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing_setup(plan, b, m_most, scols, x2max, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_transpose", &b->k_transpose));
    if (!tiled) {
        b->rows_ext[0] = ((size_t)plan->shape.nb + (size_t)b->tiles.bwd_rt - 1) / (size_t)b->tiles.bwd_rt;
        b->rows_ext[1] = bh, b->rows_ext[2] = m;
        b->kv_rows_ext[0] = ((size_t)sh->nb_kv + (size_t)b->tiles.bwd_rt - 1) / (size_t)b->tiles.bwd_rt;
        b->kv_rows_ext[1] = bh_kv, b->kv_rows_ext[2] = m_kv;
        local_size(ctx, b->k_dq, b->rows_ext, wg, b->tiles.bwd_heads, b->lws_dq);
        local_size(ctx, b->k_dkv, b->kv_rows_ext, wg, b->tiles.bwd_heads, b->lws_dkv);
        const size_t text[3] = {(size_t)(c->dk + 3) / 4, bh_kv, m_most}; /* four rows of S per work-item */
        mhla__local_size_3d(ctx, b->k_tsum, text, wg, b->lws_tsum);
    }
    if (c->normalizer == MHLA_NORMALIZER_OFFICIAL) {
        /* The z columns' parts: 256 tokens each (a work-item's walk), at most 64 per block. */
        const int64_t nb = plan->shape.nb;
        b->dz_part_len = (cl_int)(nb <= 256 * 64 ? 256 : (nb + 63) / 64);
        b->dz_parts = (cl_int)((nb + b->dz_part_len - 1) / b->dz_part_len);
        const size_t zvec = (size_t)(c->dk / b->tiles.bwd_vk);
        const size_t zext[3] = {zvec, bh, m * (size_t)b->dz_parts}, sext[3] = {zvec, bh, m};
        mhla__local_size_3d(ctx, b->k_official_dz, zext, wg, b->lws_zpart);
        mhla__local_size_3d(ctx, b->k_official_dz_sum, sext, wg, b->lws_zsum);
    }

    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, m * bh * head_bytes, "the gradient summaries G", &b->grad));
    b->grad_kv = b->grad;
    if (sh->group > 1)
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, m * bh_kv * head_bytes,
                                                        "the gradient summaries of the key/value heads", &b->grad_kv));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, m_kv * bh_kv * head_bytes, "the mixed gradient summaries dS",
                                                    &b->dsum));
    if (!tiled)
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan,
                                                        m_most * bh_kv * (size_t)c->dv * (size_t)(c->dk + 1) *
                                                            sizeof(float),
                                                        "a transposed summary", &b->tsum));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, m * m_kv * sizeof(float), "Mc transposed", &b->mix_t));
    const size_t per_token = dcols * m * sizeof(float);
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, per_token, "the per-token scale/den", &b->inv));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, per_token, "the per-token dL/dden", &b->r));
    if (c->normalizer == MHLA_NORMALIZER_OFFICIAL) {
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, per_token, "the mixed normalizer gradients", &b->rmix));
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan,
                                                        (size_t)b->dz_parts * m * bh * (size_t)c->dk * sizeof(float),
                                                        "the z column's parts", &b->dz_partial));
    }
cleanup:
    return st;
}

/* tsum = the S part of `src` transposed (bwd_transpose_summary): `rows` rows (the mixed summaries'
 * M, or dS's M_kv) of the summaries' B*H_kv heads. */
static mhla_status transpose_summary(mhla_plan *plan, mhla_bwd *b, cl_mem src, int64_t rows)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    mhla_grid g = plan->kv_grid; /* bh = B*H_kv */
    g.m = (cl_int)rows;
    const size_t ext[3] = {(size_t)(plan->cfg.dk + 3) / 4, (size_t)g.bh, (size_t)rows};
    MHLA_SET_ARGS(st, ctx, b->k_tsum, 0, MHLA_ARG(src), MHLA_ARG(b->tsum), MHLA_ARG(g));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_tsum, 3, ext, b->lws_tsum, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_transpose_summary)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* "; backward: ..." after the plan's own description (mhla_plan_tuning). */
static void describe(const mhla_plan *plan, const mhla_bwd *b, char *buf, size_t size)
{
    const mhla_tiles *t = &b->tiles;
    if (t->bc_sq > 0) {
        snprintf(buf, size, "; backward: tiled causal read-outs of %d tokens x %d-token pair tiles%s", t->bc_sq,
                 t->bc_bk, t->bc_one ? " in one launch" : "");
    } else if (t->bt_tq > 0) {
        char mixing[256];
        mhla__backward_tiled_describe_mixing(plan, b, mixing, sizeof mixing);
        snprintf(buf, size, "; backward: tiled read-outs of %d tokens x %d columns, %d dimensions per tile%s",
                 t->bt_tq, t->bt_tv, t->bt_dc, mixing);
    } else {
        snprintf(buf, size, "; backward: read-outs of %d token(s) x %d/%d-wide vectors", t->bwd_rt, t->bwd_vk,
                 t->bwd_vv);
    }
    const size_t len = strlen(buf);
    if (t->dm_t > 0 && len < size)
        snprintf(buf + len, size - len, ", dMc in %dx%d tiles", t->dm_t, t->dm_t);
}

mhla_status mhla__backward_get(mhla_plan *plan, mhla_bwd **out)
{
    mhla_status st = MHLA_OK;
    mhla_bwd *b = plan->bwd;
    if (b) {
        *out = b;
        return MHLA_OK;
    }
    b = mhla__calloc(1, sizeof *b);
    MHLA_FAIL_IF(st, !b, plan->ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating the backward pass");
    b->cfg = plan->cfg;
    /* the forward's tiles, with the backward's read-outs (tune/tiling.c) */
    b->tiles = plan->causal ? plan->causal->kern->tiling : plan->tiles;
    mhla__tiles_backward(&plan->cfg, plan->causal ? &plan->causal->kern->tuning : &plan->tuning, &b->tiles);
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_ops(plan)->setup(plan, b));
    plan->bwd = b;
    plan->bwd_destroy = mhla__backward_destroy; /* the plan's layer below cannot name it */
    plan->bwd_describe = describe;
    *out = b;
    b = NULL;
cleanup:
    mhla__backward_destroy(b);
    return st;
}

mhla_status mhla__backward_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                   cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                   const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_config *c = &plan->cfg;
    const float feps = c->feature_eps, scale = c->scale, eps = c->eps;
    const int official = c->normalizer == MHLA_NORMALIZER_OFFICIAL;
    const cl_int m = (cl_int)plan->shape.m, m_kv = (cl_int)plan->shape.m_kv;
    const size_t scols = (size_t)plan->shape.bh_kv * (size_t)c->dk * (size_t)plan->shape.summary_cols;
    const size_t dcols = (size_t)plan->shape.bh * (size_t)plan->shape.nb;
    /* A slot no normalizer reads still needs a valid buffer. */
    cl_mem den = official ? plan->den : plan->mixed;

    /* The forward's summaries and their mixtures (and the official normalizer's dots and
     * denominators): kept from the plan's last forward of these buffers when the caller asked for
     * that (mhla_plan_save_for_backward), else recomputed with the forward's own stages. */
    const int reuse = plan->saved && plan->saved_in[0] == q && plan->saved_in[1] == k && plan->saved_in[2] == v &&
                      plan->saved_in[3] == mixing;
    /* The mixtures: kept where the saved forward made them (its read-out did not mix them itself),
     * else mixed by the tiled dq read-out where it can, else by the forward's mixing stage here. */
    const int mixed_kept = reuse && !mhla__output_mixes(plan);
    const int dq_mixes = !mixed_kept && mhla__backward_tiled_mixes(plan, b);
    if (reuse) {
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        if (num_wait)
            MHLA_CL_TRY(st, ctx, clEnqueueBarrierWithWaitList(ctx->queue, num_wait, wait, NULL),
                        "clEnqueueBarrierWithWaitList");
        if (!mixed_kept && !dq_mixes) {
            MHLA_FORWARD_IF_ERROR(st, mhla__mixing_enqueue(plan, mixing, 1));
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        }
    } else {
        plan->saved = 0;
        MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_enqueue(plan, k, v, num_wait, wait));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        if (official) {
            MHLA_FORWARD_IF_ERROR(st, mhla__official_dots_enqueue(plan, q));
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        }
        if (!dq_mixes) {
            MHLA_FORWARD_IF_ERROR(st, mhla__mixing_enqueue(plan, mixing, 1));
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        }
    }

    if (b->k_dq_tiled)
        return mhla__backward_tiled_enqueue(plan, b, q, k, v, mixing, dout, dq, dk, dv, dmixing, !dq_mixes);

    /* dq, r_t and G's weights scale/den_t from u_t = S~_i dO_t, in one read-out */
    MHLA_FORWARD_IF_ERROR(st, transpose_summary(plan, b, plan->mixed, m));
    {
        cl_kernel kr = b->k_dq;
        MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(q), MHLA_ARG(dout), MHLA_ARG(b->tsum), MHLA_ARG(plan->mixed),
                      MHLA_ARG(den), MHLA_ARG(dq), MHLA_ARG(b->inv), MHLA_ARG(b->r), MHLA_ARG(plan->grid),
                      MHLA_ARG(feps), MHLA_ARG(scale), MHLA_ARG(eps));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, b->rows_ext, b->lws_dq, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_dq_readout)"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    /* G_i = sum_t phi(q_t) [scale dO_t / den_t | scale r_t]^T with the forward's summary kernel,
     * weighted; G's z column is read by the paper normalizer only (0 otherwise) */
    const float zscale = c->normalizer == MHLA_NORMALIZER_PAPER ? scale : 0.0f;
    MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_weighted_enqueue(plan, b->k_gsum, 0, q, dout, b->inv, b->r, zscale,
                                                                   b->grad, NULL));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (b->k_group_sum) { /* each key/value head's G: the sum of its query heads', in head order */
        const size_t ext[3] = {scols, (size_t)m, 1};
        MHLA_SET_ARGS(st, ctx, b->k_group_sum, 0, MHLA_ARG(b->grad), MHLA_ARG(b->grad_kv), MHLA_ARG(plan->grid));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_group_sum, 2, ext, b->lws_group, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_group_sum)"));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_mixing_transpose(plan, b, mixing));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    /* dS = Mc^T G: M_kv x M times M x (B*H_kv summaries) */
    MHLA_FORWARD_IF_ERROR(st, mhla__mixing_gemm(plan, b->mix_t, (size_t)m_kv, (size_t)m, b->grad_kv, b->dsum, scols));
    if (official) {
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx)); /* the GEMMs share a temporary buffer */
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_gemm(plan, b->mix_t, (size_t)m, (size_t)m, b->r, b->rmix, dcols));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_official_dz(plan, b, q, dq));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    /* dv = dS^T k~ and dk = phi'(k) (dS v + dz), in one read-out */
    MHLA_FORWARD_IF_ERROR(st, transpose_summary(plan, b, b->dsum, m_kv));
    {
        cl_kernel kr = b->k_dkv; /* on the key/value grid: dk and dv of the H_kv heads */
        MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(k), MHLA_ARG(v), MHLA_ARG(b->dsum), MHLA_ARG(b->tsum), MHLA_ARG(dk),
                      MHLA_ARG(dv), MHLA_ARG(plan->kv_grid), MHLA_ARG(feps));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, b->kv_rows_ext, b->lws_dkv, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(bwd_dkv_readout)"));
    }
    if (dmixing)
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing_noncausal(plan, b, dmixing));
cleanup:
    return st;
}

/* ---- the backward's half of each variant's table (forward/forward.h, mhla_plan_ops) ------------ */

static mhla_status blocks_enqueue(mhla_plan *plan, mhla_bwd *b, const cl_mem x[9], const int32_t *cu_seqlens,
                                  size_t num_seqs, cl_uint num_wait, const cl_event *wait)
{
    (void)cu_seqlens, (void)num_seqs; /* (non-causal plans are not varlen) */
    return mhla__backward_enqueue(plan, b, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], num_wait, wait);
}

static mhla_status chunks_enqueue(mhla_plan *plan, mhla_bwd *b, const cl_mem x[9], const int32_t *cu_seqlens,
                                  size_t num_seqs, cl_uint num_wait, const cl_event *wait)
{
    return mhla__backward_causal_enqueue(plan, b, x[0], x[1], x[2], x[3], cu_seqlens, num_seqs, x[4], x[5], x[6],
                                         x[7], x[8], num_wait, wait);
}

static const mhla_bwd_ops bwd_ops[MHLA_VARIANTS] = {
    [MHLA_VARIANT_BLOCKS] = {setup, blocks_enqueue, NULL},
    [MHLA_VARIANT_CHUNKS] = {mhla__backward_causal_setup, chunks_enqueue, NULL},
    [MHLA_VARIANT_SOFTMAX] = {NULL, NULL, "the plan is a softmax-attention baseline, which has no backward pass"},
};

const mhla_bwd_ops *mhla__backward_ops(const mhla_plan *plan) { return &bwd_ops[plan->ops->id]; }
