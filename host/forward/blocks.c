/* The blocks variant (forward/forward.h, mhla_plan_ops): non-causal MHLA over a block grid,
 * cross-attention and grouped key/value heads included. Its setup (workspace, then each stage's
 * kernels), its forward (the three stages in their files: block_summary.c, mixing.c, output.c)
 * and its description; the backward's half is backward/backward.c's. */
#include "forward/forward.h"

#include <stdio.h>

/* Summaries of the key/value blocks and their mixtures per query block, B*H_kv heads each; the
 * official normalizer's dots and denominators. */
static mhla_status workspace(mhla_plan *plan)
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

static mhla_status blocks_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    /* A shard takes the whole sequence's tiles (block splits included): its blocks are then
     * summed in the same order as on one device. */
    const mhla_config *tcfg = plan->shard ? &plan->shard->global : &plan->cfg;
    const mhla_shape *tshape = plan->shard ? &plan->shard->gshape : &plan->shape;
    MHLA_FORWARD_IF_ERROR(st, mhla__tuning_lookup(ctx, tcfg, &plan->tuning));
    mhla__tiles_forward(ctx, tcfg, tshape, &plan->tuning, &plan->tiles);
    if (plan->shard) /* its mixing reads the gathered summaries: the untiled stages */
        plan->tiles.tiled = 0;
    MHLA_FORWARD_IF_ERROR(st, workspace(plan));
    MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_setup(plan));
    MHLA_FORWARD_IF_ERROR(st, mhla__output_setup(plan));
    MHLA_FORWARD_IF_ERROR(st, mhla__mixing_setup(plan));
    MHLA_FORWARD_IF_ERROR(st, mhla__forward_one_setup(plan));
    plan->workspace_bytes += plan->gemm_temp_bytes;
cleanup:
    return st;
}

/* The three stages back to back, a stage barrier and a marker between them. */
static mhla_status blocks_forward(mhla_plan *plan, const cl_mem b[5], cl_uint num_wait, const cl_event *wait,
                                  cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_mem q = b[MHLA_TENSOR_Q], mixing = b[MHLA_TENSOR_MIXING];
    if (mhla__forward_one_runs(plan)) { /* one launch: its time is the read-out's stage */
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[1]));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[2]));
        MHLA_FORWARD_IF_ERROR(st, mhla__forward_one_enqueue(plan, b, num_wait, wait, done));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[3]));
        goto cleanup;
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_enqueue(plan, b[MHLA_TENSOR_K], b[MHLA_TENSOR_V], num_wait, wait));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[1]));
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL) {
        MHLA_FORWARD_IF_ERROR(st, mhla__official_dots_enqueue(plan, q));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    if (!mhla__output_mixes(plan)) { /* else the tiled read-out mixes (few blocks and segments) */
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_enqueue(plan, mixing, !mhla__output_mixes_dots(plan)));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[2]));
    MHLA_FORWARD_IF_ERROR(st, mhla__output_enqueue(plan, q, mixing, b[MHLA_TENSOR_OUT], done));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[3]));
cleanup:
    return st;
}

static void blocks_describe(const mhla_plan *plan, char *buf, size_t size)
{
    const mhla_tiles *t = &plan->tiles;
    const mhla_tuning *tu = &plan->tuning;
    if (t->tiled) {
        /* Where tl_fuse admits the blocks, what mixing inside the read-out reads again (fuse_mb's
         * measure): said whether it mixes there or the bound keeps the mixing apart. */
        const mhla_shape *sh = &plan->shape;
        const int64_t sources = sh->m_kv * (int64_t)t->splits;
        const double mib = mhla__fuse_rereads(&plan->cfg, sh->bh, sh->m, sh->nb, t->tl_tq, sources) / 1048576.0;
        char tail[160];
        if (mhla__output_mixes(plan))
            snprintf(tail, sizeof tail, "mixed inside the read-out (tl_fuse %d: %.1f MiB read again)", t->tl_fuse, mib);
        else if (mhla__output_mixes_within(plan, MHLA_FUSE_MB_ANY))
            snprintf(tail, sizeof tail,
                     "segments added and mixed in rows of %d (inside the read-out: %.1f MiB read again, over "
                     "fuse_mb %d)",
                     t->mix_mr, mib, t->fuse_mb);
        else
            snprintf(tail, sizeof tail, "segments added and mixed in rows of %d", t->mix_mr);
        char one[256] = "";
        if (plan->k_one)
            snprintf(one, sizeof one,
                     "; one launch (tl_one %d, M x N_kv %lld): groups of %zu work-items, %d columns x %d token "
                     "slice(s), tiles of %d tokens, %d dimensions a read-out tile%s",
                     t->tl_one, (long long)(sh->m * sh->n_kv), plan->lws_one, t->on_tv, t->on_ks, t->on_tk, t->on_dc,
                     plan->save_for_backward ? " (not while the summaries are kept)" : "");
        snprintf(buf, size,
                 "%s; tiled: summary groups of %dx%d (%dx4 a work-item) in tiles of %d tokens, %d segment(s) per "
                 "block; output groups of %d tokens x %d columns (%dx4 a work-item), %d key dimensions per tile; %s%s",
                 tu->origin, t->tl_td, t->tl_tv, t->tl_rr, t->tl_tk, t->splits, t->tl_tq, t->tl_tv, t->tl_qr, t->tl_dc,
                 tail, one);
    } else {
        snprintf(buf, size,
                 "%s; summary %dx(%dx%d) in sums of %d tokens%s%s, %d segment(s) per block; output %dx(%dx%d) dc "
                 "%d%s; %s",
                 tu->origin, t->sum_rd, t->sum_ve, t->sum_nv, t->sum_chunk, t->sum_lk ? " (k~ in local memory)" : "",
                 t->pf ? " prefetched" : "", t->splits, t->out_rt, t->out_ve, t->out_nv, t->out_dc,
                 t->out_nt ? ", streaming stores" : "", tu->mix_kernel ? "mixing kernel" : "mixing by CLBlast");
    }
}

const mhla_plan_ops mhla__variant_blocks = {MHLA_VARIANT_BLOCKS, "blocks", 1, 1, blocks_setup, blocks_forward,
                                            blocks_describe};
