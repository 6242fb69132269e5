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

mhla_status mhla__plan_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    char msg[512];
    mhla__config_resolve(&plan->cfg);
    st = mhla__config_validate(&plan->cfg, &plan->shape, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "%s", msg);
    mhla__plan_fill_grid(plan);
    plan->ops = mhla__plan_variant(&plan->cfg);
    MHLA_FORWARD_IF_ERROR(st, plan->ops->setup(plan)); /* its kernels and workspace (the variant's file) */
cleanup:
    return st;
}

const mhla_plan_ops *mhla__plan_variant(const mhla_config *cfg)
{
    return cfg->causal ? &mhla__variant_chunks : &mhla__variant_blocks;
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
                           plan->k_mix_splits, plan->k_softmax, plan->k_one};
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
    plan->ops->describe(plan, buf, size);
    const size_t used = strlen(buf);
    if (plan->bwd && plan->bwd_describe && used + 1 < size)
        plan->bwd_describe(plan, plan->bwd, buf + used, size - used);
cleanup:
    return st;
}

const mhla_config *mhla_plan_config(const mhla_plan *plan) { return plan ? &plan->cfg : NULL; }

size_t mhla_plan_tensor_bytes(const mhla_plan *plan, mhla_tensor tensor)
{
    if (!plan || (!plan->ops->takes_mixing && tensor == MHLA_TENSOR_MIXING))
        return 0;
    /* From the shapes the plan derived when it was made: a call validates nothing again. */
    if (plan->shard && (tensor == MHLA_TENSOR_MIXING || plan->shard->count == 0)) /* the whole Mc; no tokens */
        return tensor == MHLA_TENSOR_MIXING
                   ? mhla__shape_tensor_elems(&plan->shard->global, &plan->shard->gshape, tensor) * sizeof(float)
                   : 0;
    size_t elems = mhla__shape_tensor_elems(&plan->cfg, &plan->shape, tensor);
    return elems * (tensor == MHLA_TENSOR_MIXING ? sizeof(float) : mhla__dtype_size(plan->cfg.dtype));
}
