/* Shard plans (mhla.h, "Sharded plans"): one contiguous range of blocks of a sequence, run in two
 * halves around an exchange of summary rows that the caller does (libmhla_mpi with MPI). The plan
 * is an ordinary plan over the shard's tokens with the whole sequence's tiles; what is added here
 * is the copy of its summary rows to the host, and the upload of every block's rows before the
 * mixing (non-causal) or the prefix mixtures (causal). */
#include "shard/shard.h"

#include <stdlib.h>
#include <string.h>

/* Validates the shard against the whole configuration and fills its sizes and the shard's own
 * configuration (seq_t and block_t cut to the shard). */
static mhla_status shard_describe(mhla_context *ctx, const char *fn, mhla_shard *sh, int64_t offset,
                                  int64_t count, mhla_config *local)
{
    mhla_status st = MHLA_OK;
    const mhla_config *g = &sh->global;
    const mhla_shape *s = &sh->gshape;
    sh->blocks = g->varlen ? mhla__shard_varlen_chunks(sh) : g->causal ? (s->n + g->chunk - 1) / g->chunk : s->m;
    MHLA_FAIL_IF(st, offset < 0 || count < 0 || offset > sh->blocks || count > sh->blocks - offset, ctx,
                 MHLA_ERR_INVALID_ARGUMENT,
                 "%s: blocks [%lld, %lld + %lld) are not within the %lld %s", fn, (long long)offset,
                 (long long)offset, (long long)count, (long long)sh->blocks,
                 g->varlen  ? "chunks of the packed sequences"
                 : g->causal ? "chunks of the sequence"
                             : "blocks of the sequence");
    sh->offset = offset, sh->count = count;
    *local = *g;
    /* the shard's own grid for queries and keys (create_shard refuses cross-attention); grouped
     * key/value heads stay, and its rows hold B*H_kv heads' summaries */
    local->kv_seq_t = local->kv_seq_h = local->kv_seq_w = 0;
    local->kv_block_t = local->kv_block_h = local->kv_block_w = 0;
    if (g->varlen) {
        mhla__shard_varlen_tokens(sh, offset, count, &sh->token_offset, &sh->tokens);
        local->seq_t = sh->tokens;
        sh->sum_floats = (size_t)s->bh_kv * (size_t)g->dk * (size_t)(g->dv + (g->normalizer == MHLA_NORMALIZER_PAPER));
    } else if (g->causal) {
        /* An empty shard past the last (partial) chunk starts at N. */
        sh->token_offset = offset * g->chunk < s->n ? offset * g->chunk : s->n;
        const int64_t end = (offset + count) * g->chunk < s->n ? (offset + count) * g->chunk : s->n;
        sh->tokens = end - sh->token_offset;
        local->seq_t = sh->tokens;
        sh->sum_floats = (size_t)s->bh_kv * (size_t)g->dk * (size_t)(g->dv + (g->normalizer == MHLA_NORMALIZER_PAPER));
    } else {
        /* Whole block frames: the shard is then a contiguous token range and a grid of its own. */
        const int64_t frame = g->block_h * g->block_w;
        MHLA_FAIL_IF(st, offset % frame != 0 || count % frame != 0, ctx, MHLA_ERR_INVALID_SHAPE,
                     "%s: block_offset = %lld and block_count = %lld must be multiples of "
                     "block_h * block_w = %lld (whole frames of blocks)",
                     fn, (long long)offset, (long long)count, (long long)frame);
        local->block_t = count / frame;
        local->mixing_rows = 0; /* the shard's own M; the whole Mc is the shard's business */
        local->seq_t = local->block_t * s->pt;
        sh->token_offset = offset / frame * s->pt * g->seq_h * g->seq_w;
        sh->tokens = local->seq_t * g->seq_h * g->seq_w;
        sh->sum_floats = (size_t)s->bh_kv * (size_t)g->dk * (size_t)s->summary_cols;
        sh->dots_floats = g->normalizer == MHLA_NORMALIZER_OFFICIAL ? (size_t)s->bh * (size_t)s->nb : 0;
    }
    sh->row_floats = sh->sum_floats + sh->dots_floats;
cleanup:
    return st;
}

/* Non-causal shards: device room for every block's rows and for the shard's rows of Mc. */
static mhla_status shard_workspace(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_shard *sh = plan->shard;
    const size_t m = (size_t)sh->blocks, f = sizeof(float);
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_ONLY, m * sh->sum_floats * f,
                                                  "the gathered block summaries", &sh->gathered));
    if (sh->dots_floats)
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_ONLY, m * sh->dots_floats * f,
                                                      "the gathered official dot products", &sh->gathered_dots));
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_ONLY, (size_t)sh->count * m * f,
                                                  "the shard's rows of the mixing matrix", &sh->mc_rows));
    plan->workspace_bytes += m * sh->row_floats * f + (size_t)sh->count * m * f;
cleanup:
    return st;
}

/* Both creators; cu (num_seqs + 1 offsets) for varlen configurations only. */
static mhla_status create_shard(mhla_context *ctx, const char *fn, const mhla_config *cfg, const int32_t *cu,
                                size_t num_seqs, int64_t block_offset, int64_t block_count, mhla_plan **out)
{
    mhla_status st = MHLA_OK;
    mhla_plan *plan = NULL;
    char msg[512];

    MHLA_FAIL_IF(st, !out, ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: context is NULL", fn);
    st = mhla__config_validate(cfg, NULL, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "%s", msg);
    MHLA_FAIL_IF(st, cfg->varlen && !cu, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: the configuration packs variable-length sequences (varlen = 1): create its shards with "
                 "mhla_plan_create_shard_varlen() and their cu_seqlens",
                 fn);
    MHLA_FAIL_IF(st, !cfg->varlen && cu, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: the configuration is not for packed sequences (set causal = 1 and varlen = 1)", fn);
    plan = mhla__calloc(1, sizeof *plan);
    MHLA_FAIL_IF(st, !plan, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a plan");
    plan->shard = mhla__calloc(1, sizeof *plan->shard);
    MHLA_FAIL_IF(st, !plan->shard, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a plan");
    plan->ctx = ctx;
    mhla_shard *sh = plan->shard;
    sh->global = *cfg;
    mhla__config_resolve(&sh->global);
    MHLA_FORWARD_IF_ERROR(st, mhla__config_validate(&sh->global, &sh->gshape, NULL, 0));
    MHLA_FAIL_IF(st, sh->gshape.cross, ctx, MHLA_ERR_UNSUPPORTED,
                 "%s: shards of a cross-attention configuration are not implemented yet (%lld key tokens for %lld "
                 "queries)",
                 fn, (long long)sh->gshape.n_kv, (long long)sh->gshape.n);
    if (cu) {
        st = mhla__cu_seqlens_check(cu, num_seqs, sh->gshape.n, sh->global.chunk, sh->global.mixing_rows, msg,
                                    sizeof msg);
        MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "%s: %s", fn, msg);
        sh->cu = mhla__malloc((num_seqs + 1) * sizeof *sh->cu);
        MHLA_FAIL_IF(st, !sh->cu, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for %zu cu_seqlens",
                     num_seqs + 1);
        memcpy(sh->cu, cu, (num_seqs + 1) * sizeof *sh->cu);
        sh->num_seqs = num_seqs;
    }
    MHLA_FORWARD_IF_ERROR(st, shard_describe(ctx, fn, sh, block_offset, block_count, &plan->cfg));
    if (block_count == 0) {
        /* Nothing to run: the plan only answers questions about the sequence. */
        plan->cfg = sh->global;
        plan->shape = sh->gshape;
        plan->ops = mhla__plan_variant(&plan->cfg);
    } else {
        MHLA_FORWARD_IF_ERROR(st, mhla__plan_setup(plan));
        if (cu)
            MHLA_FORWARD_IF_ERROR(st, mhla__shard_varlen_tables(plan));
        else if (!plan->cfg.causal)
            MHLA_FORWARD_IF_ERROR(st, shard_workspace(plan));
    }
    *out = plan;
    plan = NULL;
cleanup:
    mhla_plan_destroy(plan);
    return st;
}

mhla_status mhla_plan_create_shard(mhla_context *ctx, const mhla_config *cfg, int64_t block_offset,
                                   int64_t block_count, mhla_plan **out)
{
    return create_shard(ctx, "mhla_plan_create_shard", cfg, NULL, 0, block_offset, block_count, out);
}

mhla_status mhla_plan_create_shard_varlen(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu_seqlens,
                                          size_t num_seqs, int64_t chunk_offset, int64_t chunk_count,
                                          mhla_plan **out)
{
    mhla_status st = MHLA_OK;
    if (out)
        *out = NULL;
    MHLA_FAIL_IF(st, !cu_seqlens, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_plan_create_shard_varlen: cu_seqlens is NULL");
    MHLA_FAIL_IF(st, cfg && !cfg->varlen, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_plan_create_shard_varlen: the configuration is not for packed sequences (set causal = 1 and "
                 "varlen = 1)");
    st = create_shard(ctx, "mhla_plan_create_shard_varlen", cfg, cu_seqlens, num_seqs, chunk_offset, chunk_count, out);
cleanup:
    return st;
}

mhla_status mhla_plan_shard_info(const mhla_plan *plan, mhla_shard_info *out)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !plan || !out, plan ? plan->ctx : NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_plan_shard_info: %s is NULL", plan ? "out" : "plan");
    MHLA_FAIL_IF(st, !plan->shard, plan->ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_plan_shard_info: the plan is not a shard plan (mhla_plan_create_shard)");
    const mhla_shard *sh = plan->shard;
    out->block_offset = sh->offset;
    out->block_count = sh->count;
    out->blocks = sh->blocks;
    out->token_offset = sh->token_offset;
    out->tokens = sh->tokens;
    out->row_floats = sh->row_floats;
    out->global = sh->global;
    out->cu_seqlens = sh->cu;
    out->num_seqs = sh->num_seqs;
cleanup:
    return st;
}

mhla_context *mhla_plan_context(const mhla_plan *plan) { return plan ? plan->ctx : NULL; }

/* The checks both halves share: a shard plan, and when it has blocks, the host rows and the
 * buffers of `tensors` (bufs indexed by mhla_tensor). *run says whether there is work. */
static mhla_status shard_check(mhla_plan *plan, const char *fn, const cl_mem bufs[5], const mhla_tensor *tensors,
                               size_t n_tensors, const void *host, int *run)
{
    mhla_status st = MHLA_OK;
    *run = 0;
    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
    MHLA_FAIL_IF(st, !plan->shard, plan->ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: the plan is not a shard plan (mhla_plan_create_shard)", fn);
    if (plan->shard->count == 0)
        goto cleanup;
    MHLA_FAIL_IF(st, !host, plan->ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: the host rows pointer is NULL", fn);
    for (size_t i = 0; i < n_tensors; ++i)
        MHLA_FORWARD_IF_ERROR(st, mhla__plan_check_mem(plan, fn, tensors[i], bufs[tensors[i]]));
    *run = 1;
cleanup:
    return st;
}

mhla_status mhla_shard_summaries(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, float *rows)
{
    mhla_status st = MHLA_OK;
    int run = 0;
    const cl_mem bufs[5] = {q, k, v, NULL, NULL};
    const mhla_tensor need[] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V};
    MHLA_FORWARD_IF_ERROR(st, shard_check(plan, "mhla_shard_summaries", bufs, need, 3, rows, &run));
    if (!run)
        goto cleanup;
    mhla_context *ctx = plan->ctx;
    const mhla_shard *sh = plan->shard;
    const size_t f = sizeof(float), pitch = sh->row_floats * f, n = (size_t)sh->count;
    const size_t zero[3] = {0, 0, 0};
    if (plan->cfg.causal) {
        mhla_causal_plan *cp = plan->causal;
        mhla_causal_run r = {q, k, v, NULL, NULL, plan->shape.n, cp->chunks, cp->tiles, &cp->tables,
                             cp->sums, cp->pref, NULL};
        MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue_summaries(cp->kern, &r, 0, NULL));
        /* the exchanged rows are the slots without their padding (host/causal/causal.h) */
        MHLA_CL_TRY(st, ctx, mhla__causal_slots_read(cp->kern, cp->sums, (size_t)sh->offset, n, rows),
                    "clEnqueueReadBufferRect (shard summaries)");
        goto cleanup;
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_enqueue(plan, k, v, 0, NULL));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (sh->dots_floats) {
        MHLA_FORWARD_IF_ERROR(st, mhla__official_dots_enqueue(plan, q));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        const size_t host_at[3] = {sh->sum_floats * f, 0, 0}, region[3] = {sh->dots_floats * f, n, 1};
        MHLA_CL_TRY(st, ctx,
                    clEnqueueReadBufferRect(ctx->queue, plan->dots, CL_FALSE, zero, host_at, region, region[0], 0,
                                            pitch, 0, rows, 0, NULL, NULL),
                    "clEnqueueReadBufferRect (shard dot products)");
    }
    const size_t region[3] = {sh->sum_floats * f, n, 1};
    MHLA_CL_TRY(st, ctx,
                clEnqueueReadBufferRect(ctx->queue, plan->summary, CL_TRUE, zero, zero, region, region[0], 0, pitch,
                                        0, rows, 0, NULL, NULL),
                "clEnqueueReadBufferRect (shard summaries)");
cleanup:
    if (st != MHLA_OK && run)
        clFinish(plan->ctx->queue); /* a non-blocking read may still write the caller's rows */
    return st;
}

/* Non-causal: every block's rows to the device, the shard's rows of Mc beside them, then the
 * mixing and the read-out of an ordinary plan. */
static mhla_status output_blocks(mhla_plan *plan, cl_mem q, cl_mem mixing, const float *all, cl_mem out,
                                 cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_shard *sh = plan->shard;
    const size_t f = sizeof(float), pitch = sh->row_floats * f, m = (size_t)sh->blocks;
    const size_t zero[3] = {0, 0, 0};
    const size_t region[3] = {sh->sum_floats * f, m, 1};
    MHLA_CL_TRY(st, ctx,
                clEnqueueWriteBufferRect(ctx->queue, sh->gathered, CL_FALSE, zero, zero, region, region[0], 0, pitch,
                                         0, all, 0, NULL, NULL),
                "clEnqueueWriteBufferRect (gathered summaries)");
    if (sh->dots_floats) {
        const size_t host_at[3] = {sh->sum_floats * f, 0, 0}, dregion[3] = {sh->dots_floats * f, m, 1};
        MHLA_CL_TRY(st, ctx,
                    clEnqueueWriteBufferRect(ctx->queue, sh->gathered_dots, CL_FALSE, zero, host_at, dregion,
                                             dregion[0], 0, pitch, 0, all, 0, NULL, NULL),
                    "clEnqueueWriteBufferRect (gathered dot products)");
    }
    MHLA_CL_TRY(st, ctx,
                clEnqueueCopyBuffer(ctx->queue, mixing, sh->mc_rows, (size_t)sh->offset * m * f, 0,
                                    (size_t)sh->count * m * f, 0, NULL, NULL),
                "clEnqueueCopyBuffer (the shard's rows of Mc)");
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_FORWARD_IF_ERROR(st, mhla__mixing_enqueue(plan, mixing, 1));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_FORWARD_IF_ERROR(st, mhla__output_enqueue(plan, q, mixing, out, done));
    /* The host rows must not be read after the call returns. */
    MHLA_CL_TRY(st, ctx, clFinish(ctx->queue), "clFinish (gathered rows)");
cleanup:
    return st;
}

mhla_status mhla_shard_output(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, const float *all_rows,
                              cl_mem out, cl_event *done)
{
    mhla_status st = MHLA_OK;
    int run = 0;
    const cl_mem bufs[5] = {q, k, v, out, mixing};
    const mhla_tensor need[] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_OUT, MHLA_TENSOR_MIXING};
    if (done)
        *done = NULL;
    MHLA_FORWARD_IF_ERROR(st, shard_check(plan, "mhla_shard_output", bufs, need, 5, all_rows, &run));
    MHLA_FORWARD_IF_ERROR(st, run ? mhla__check_call(plan->ctx, "mhla_shard_output", bufs, 1, 0, NULL) : MHLA_OK);
    if (!run)
        goto cleanup;
    mhla_context *ctx = plan->ctx;
    const mhla_shard *sh = plan->shard;
    if (!plan->cfg.causal) {
        MHLA_FORWARD_IF_ERROR(st, output_blocks(plan, q, mixing, all_rows, out, done));
        goto cleanup;
    }
    mhla_causal_plan *cp = plan->causal;
    if (sh->offset > 0) {
        MHLA_CL_TRY(st, ctx, mhla__causal_slots_write(cp->kern, cp->sums, 0, (size_t)sh->offset, all_rows),
                    "clEnqueueWriteBufferRect (earlier chunks' summaries)");
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    mhla_causal_run r = {q, k, v, mixing, out, plan->shape.n, cp->chunks, cp->tiles, &cp->tables,
                         cp->sums, cp->pref, NULL};
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue_rest(cp->kern, &r, done));
cleanup:
    return st;
}
