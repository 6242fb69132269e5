/* Plans: a validated configuration, its kernels specialized once with -D, and its workspace. */
#include "forward/forward.h"

#include <stdlib.h>
#include <string.h>

/* One side's grid from its sizes: n tokens on a (seq_h, seq_w) plane, blocks of (pt, ph, pw) tokens
 * in (blk_h, blk_w) per frame, m of nb tokens, `heads` heads (the caller sets bh). */
static void fill_side(mhla_grid *g, const mhla_shape *s, int64_t heads, int64_t n, int64_t seq_h, int64_t seq_w,
                      int64_t pt, int64_t ph, int64_t pw, int64_t blk_h, int64_t blk_w, int64_t m, int64_t nb)
{
    g->n = (cl_int)n;
    g->heads = (cl_int)heads;
    g->seq_h = (cl_int)seq_h;
    g->seq_w = (cl_int)seq_w;
    g->pt = (cl_int)pt;
    g->ph = (cl_int)ph;
    g->pw = (cl_int)pw;
    g->blk_h = (cl_int)blk_h;
    g->blk_w = (cl_int)blk_w;
    g->nb = (cl_int)nb;
    g->m = (cl_int)m;
    g->kv_heads = (cl_int)s->heads_kv;
    g->kv_m = (cl_int)s->m_kv;
    /* A block's positions are consecutive tokens along w; along whole rows when the block spans
     * the image's width; along whole frames when it also spans the height (all of a 1D block). */
    g->run = (cl_int)pw;
    if (pw == seq_w) {
        g->run *= (cl_int)ph;
        if (ph == seq_h)
            g->run *= (cl_int)pt;
    }
}

void mhla__plan_fill_grid(mhla_plan *plan)
{
    const mhla_config *c = &plan->cfg;
    const mhla_shape *s = &plan->shape;
    fill_side(&plan->grid, s, c->heads, s->n, c->seq_h, c->seq_w, s->pt, s->ph, s->pw, c->block_h, c->block_w, s->m,
              s->nb);
    plan->grid.bh = (cl_int)s->bh;
    if (!s->cross && s->group == 1) {
        plan->kv_grid = plan->grid;
        return;
    }
    fill_side(&plan->kv_grid, s, s->heads_kv, s->n_kv, c->kv_seq_h, c->kv_seq_w, s->pt_kv, s->ph_kv, s->pw_kv,
              c->kv_block_h, c->kv_block_w, s->m_kv, s->nb_kv);
    plan->kv_grid.bh = (cl_int)s->bh_kv;
}

static mhla_status create_workspace(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    /* one row per block of the key/value grid, and one mixed row per query block, each of B*H_kv heads */
    const size_t head_bytes = (size_t)plan->shape.bh_kv * (size_t)plan->cfg.dk * (size_t)plan->shape.summary_cols *
                              sizeof(float);
    const size_t summary_bytes = (size_t)plan->shape.m_kv * head_bytes, mixed_bytes = (size_t)plan->shape.m * head_bytes;
    const size_t dots_bytes = plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL
                                  ? (size_t)plan->shape.bh * (size_t)plan->shape.n * sizeof(float)
                                  : 0;
    size_t total = summary_bytes + mixed_bytes + 2 * dots_bytes;
    MHLA_FAIL_IF(st, total > ctx->limits.global_mem_bytes, ctx, MHLA_ERR_OUT_OF_DEVICE_MEMORY,
                 "the plan's workspace needs %zu bytes, more than the device's %llu bytes of global memory (%s)",
                 total, (unsigned long long)ctx->limits.global_mem_bytes, ctx->device_name);
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, summary_bytes, "the block summaries",
                                                  &plan->summary));
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, mixed_bytes, "the mixed summaries",
                                                  &plan->mixed));
    if (dots_bytes) {
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, dots_bytes,
                                                      "the official normalizer's dot products", &plan->dots));
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, dots_bytes,
                                                      "the official normalizer's denominators", &plan->den));
    }
    plan->workspace_bytes += total;
cleanup:
    return st;
}

mhla_status mhla__plan_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    char msg[512];
    mhla__config_resolve(&plan->cfg);
    st = mhla__config_validate(&plan->cfg, &plan->shape, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "%s", msg);
    mhla__plan_fill_grid(plan);
    if (plan->cfg.causal) {
        MHLA_FORWARD_IF_ERROR(st, mhla__causal_plan_setup(plan)); /* its own kernels and workspace */
    } else {
        /* A shard takes the whole sequence's tiles (block splits included): its blocks are then
         * summed in the same order as on one device. */
        const mhla_config *tcfg = plan->shard ? &plan->shard->global : &plan->cfg;
        const mhla_shape *tshape = plan->shard ? &plan->shard->gshape : &plan->shape;
        MHLA_FORWARD_IF_ERROR(st, mhla__tuning_lookup(ctx, tcfg, &plan->tuning));
        mhla__tiles_forward(ctx, tcfg, tshape, &plan->tuning, &plan->tiles);
        if (plan->shard) /* its mixing reads the gathered summaries: the untiled stages */
            plan->tiles.tiled = 0;
        MHLA_FORWARD_IF_ERROR(st, create_workspace(plan));
        MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_setup(plan));
        MHLA_FORWARD_IF_ERROR(st, mhla__output_setup(plan));
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_setup(plan));
        plan->workspace_bytes += plan->gemm_temp_bytes;
    }
cleanup:
    return st;
}

mhla_status mhla_plan_create(mhla_context *ctx, const mhla_config *cfg, mhla_plan **out)
{
    mhla_status st = MHLA_OK;
    mhla_plan *plan = NULL;
    char msg[512];

    MHLA_FAIL_IF(st, !out, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_plan_create: out is NULL");
    *out = NULL;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_plan_create: context is NULL");
    st = mhla__config_validate(cfg, NULL, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "%s", msg);
    plan = mhla__calloc(1, sizeof *plan);
    MHLA_FAIL_IF(st, !plan, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a plan");
    plan->ctx = ctx;
    plan->cfg = *cfg;
    MHLA_FORWARD_IF_ERROR(st, mhla__plan_setup(plan));
    *out = plan;
    plan = NULL;
cleanup:
    mhla_plan_destroy(plan);
    return st;
}

/* A shard plan's view of the whole sequence: the plan owns it. */
static void shard_free(mhla_shard *shard)
{
    if (!shard)
        return;
    cl_mem mems[] = {shard->gathered, shard->gathered_dots, shard->mc_rows};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    mhla__free(shard->cu);
    mhla__free(shard);
}

void mhla_plan_destroy(mhla_plan *plan)
{
    if (!plan)
        return;
    cl_kernel kernels[] = {plan->k_summary, plan->k_reduce, plan->k_official_dots, plan->k_output, plan->k_mixing,
                           plan->k_mix_splits, plan->k_softmax};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    cl_mem mems[] = {plan->partial, plan->summary, plan->mixed, plan->dots, plan->den, plan->gemm_temp};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    for (size_t i = 0; i < sizeof plan->stage / sizeof plan->stage[0]; ++i)
        if (plan->stage[i])
            clReleaseMemObject(plan->stage[i]);
    for (size_t i = 0; i < sizeof plan->marks / sizeof plan->marks[0]; ++i)
        if (plan->marks[i])
            clReleaseEvent(plan->marks[i]);
    mhla__causal_plan_destroy(plan->causal);
    shard_free(plan->shard);
    if (plan->bwd)
        plan->bwd_destroy(plan->bwd);
    mhla__free(plan);
}

size_t mhla_plan_workspace_size(const mhla_plan *plan) { return plan ? plan->workspace_bytes : 0; }

mhla_status mhla_plan_tuning(const mhla_plan *plan, char *buf, size_t size)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_plan_tuning: plan is NULL");
    MHLA_FAIL_IF(st, !buf || size == 0, plan->ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_plan_tuning: buf is NULL or size 0");
    const mhla_tiles *t = plan->causal ? &plan->causal->kern->tiling : &plan->tiles;
    const mhla_tuning *tu = plan->causal ? &plan->causal->kern->tuning : &plan->tuning;
    if (plan->softmax)
        snprintf(buf, size, "%s; softmax %d-wide, %d keys per tile, %d query rows%s", tu->origin, t->sm_vw, t->sm_bk,
                 t->sm_bq, t->sm_rows ? ", row copies" : "");
    else if (plan->causal)
        snprintf(buf, size,
                 "%s; summary %dx(%dx%d) in sums of %d tokens%s, output %dx(%dx%d) dc %d in groups of %d tokens, %d "
                 "keys per pass; prefix %dx(%dx%d), CLBlast blocks of %d chunks",
                 tu->origin, t->sum_rd, t->sum_ve, t->sum_nv, t->sum_chunk, t->sum_lk ? " (k~ in local memory)" : "",
                 t->out_rt, t->out_ve, t->out_nv, t->out_dc, t->tq, t->kt, t->mix_mr, t->pre_ve, t->mix_nv,
                 t->gemm_rows);
    else if (t->tiled)
        snprintf(buf, size,
                 "%s; tiled: summary groups of %dx%d in tiles of %d tokens, %d segment(s) per block; output groups "
                 "of %d tokens x %d columns, %d key dimensions per tile; %s %d",
                 tu->origin, t->tl_td, t->tl_tv, t->tl_tk, t->splits, t->tl_tq, t->tl_tv, t->tl_dc,
                 mhla__output_mixes(plan) ? "mixed inside the read-out (tl_fuse)" : "segments added and mixed in rows of",
                 mhla__output_mixes(plan) ? t->tl_fuse : t->mix_mr);
    else
        snprintf(buf, size,
                 "%s; summary %dx(%dx%d) in sums of %d tokens%s%s, %d segment(s) per block; output %dx(%dx%d) dc "
                 "%d%s; %s",
                 tu->origin, t->sum_rd, t->sum_ve, t->sum_nv, t->sum_chunk, t->sum_lk ? " (k~ in local memory)" : "",
                 t->pf ? " prefetched" : "", t->splits,
                 t->out_rt, t->out_ve, t->out_nv, t->out_dc, t->out_nt ? ", streaming stores" : "",
                 tu->mix_kernel ? "mixing kernel" : "mixing by CLBlast");
cleanup:
    return st;
}

const mhla_config *mhla_plan_config(const mhla_plan *plan) { return plan ? &plan->cfg : NULL; }

size_t mhla_plan_tensor_bytes(const mhla_plan *plan, mhla_tensor tensor)
{
    if (!plan || (plan->softmax && tensor == MHLA_TENSOR_MIXING))
        return 0;
    /* From the shapes the plan derived when it was made: a call validates nothing again. */
    if (plan->shard && (tensor == MHLA_TENSOR_MIXING || plan->shard->count == 0)) /* the whole Mc; no tokens */
        return tensor == MHLA_TENSOR_MIXING
                   ? mhla__shape_tensor_elems(&plan->shard->global, &plan->shard->gshape, tensor) * sizeof(float)
                   : 0;
    size_t elems = mhla__shape_tensor_elems(&plan->cfg, &plan->shape, tensor);
    return elems * (tensor == MHLA_TENSOR_MIXING ? sizeof(float) : mhla__dtype_size(plan->cfg.dtype));
}
