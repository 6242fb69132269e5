/* A causal plan's part: the chunk form's kernels (causal/), its workspace, and mhla_forward() of a
 * causal plan through them. */
#include "forward/forward.h"

#include <stdio.h>

#include <string.h>

void mhla__causal_plan_destroy(mhla_causal_plan *cp)
{
    if (!cp)
        return;
    cl_mem mems[] = {cp->sums, cp->pref, cp->chunks, cp->tiles};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    mhla__causal_destroy(cp->kern);
    mhla__chunk_tables_free(&cp->tables);
    mhla__free(cp);
}

mhla_status mhla__causal_plan_reserve(mhla_plan *plan, size_t slots)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    mhla_causal_plan *cp = plan->causal;
    cl_mem sums = NULL, pref = NULL;
    if (slots <= cp->slots)
        goto cleanup;
    const size_t bytes = slots * cp->kern->slot_floats * sizeof(float);
    MHLA_FAIL_IF(st, 2 * bytes > ctx->limits.global_mem_bytes, ctx, MHLA_ERR_OUT_OF_DEVICE_MEMORY,
                 "%zu chunks of causal summaries and prefix mixtures need %zu bytes, more than the device's %llu "
                 "bytes of global memory (%s)",
                 slots, 2 * bytes, (unsigned long long)ctx->limits.global_mem_bytes, ctx->device_name);
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, bytes, "the chunk summaries", &sums));
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, bytes, "the prefix mixtures", &pref));
    /* Work already enqueued keeps the old buffers alive until it has run (OpenCL reference counts). */
    if (cp->sums)
        clReleaseMemObject(cp->sums);
    if (cp->pref)
        clReleaseMemObject(cp->pref);
    cp->sums = sums, cp->pref = pref;
    sums = pref = NULL;
    plan->workspace_bytes += 2 * (slots - cp->slots) * cp->kern->slot_floats * sizeof(float);
    cp->slots = slots;
cleanup:
    if (sums)
        clReleaseMemObject(sums);
    if (pref)
        clReleaseMemObject(pref);
    return st;
}

mhla_status mhla__causal_plan_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;

    plan->causal = mhla__calloc(1, sizeof *plan->causal);
    MHLA_FAIL_IF(st, !plan->causal, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a causal plan");
    mhla_causal_plan *cp = plan->causal;
    /* A shard's kernels are those of the whole sequence; its chunks continue the sequence at its
     * first chunk, whose summary slot is that chunk's index: the earlier chunks' slots receive the
     * gathered summaries (shard/shard.c). */
    const mhla_shard *sh = plan->shard;
    const int64_t first = sh ? sh->offset : 0;
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_create(ctx, sh ? &sh->global : &plan->cfg, 0, &cp->kern));
    /* One chunk per C tokens; a varlen call with more (short sequences) grows it. */
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_plan_reserve(plan, (size_t)(first + plan->shape.m)));
    if (!plan->cfg.varlen) {
        /* Every batch element is one sequence of N tokens: the same chunks for all of them. */
        MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_add(ctx, &cp->tables, 0, plan->shape.n, first, 0,
                                                         plan->cfg.chunk, &cp->kern->tiling));
        MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_upload(ctx, &cp->tables, &cp->chunks, &cp->tiles));
        plan->workspace_bytes += (cp->tables.n_chunks + cp->tables.n_tiles) * sizeof(cl_int4);
    }
cleanup:
    return st;
}

mhla_status mhla__causal_forward(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem out,
                                 cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_causal_plan *cp = plan->causal;
    mhla_causal_run run = {q,           k,        v,        mixing,          out, plan->shape.n, cp->chunks,
                           cp->tiles,   &cp->tables, cp->sums, cp->pref, &plan->marks[1]};
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue(cp->kern, &run, num_wait, wait, done));
cleanup:
    return st;
}

/* The chunks variant's table (forward/forward.h, mhla_plan_ops): the forward and description of a
 * causal plan; the backward's half is backward/backward.c's. */
static mhla_status chunks_forward(mhla_plan *plan, const cl_mem b[5], cl_uint num_wait, const cl_event *wait,
                                  cl_event *done)
{
    /* its chunk summaries and prefix mixtures stay in the plan's slots for the next backward
     * (backward/backward_causal.c copies them into its own layout) */
    return mhla__causal_forward(plan, b[MHLA_TENSOR_Q], b[MHLA_TENSOR_K], b[MHLA_TENSOR_V], b[MHLA_TENSOR_MIXING],
                                b[MHLA_TENSOR_OUT], num_wait, wait, done);
}

static void chunks_describe(const mhla_plan *plan, char *buf, size_t size)
{
    if (!plan->causal) { /* a shard of no chunks: nothing was built */
        snprintf(buf, size, "no chunks (an empty shard): no kernels");
        return;
    }
    const mhla_tiles *t = &plan->causal->kern->tiling;
    const mhla_tuning *tu = &plan->causal->kern->tuning;
    char output[128];
    if (t->ct_sq)
        snprintf(output, sizeof output, "output tiled (causal_tiled.cl): groups of %d tokens, %d keys a tile, 4x4 "
                 "per work-item", t->ct_sq, t->ct_bk);
    else
        snprintf(output, sizeof output, "output %dx(%dx%d) dc %d in groups of %d tokens, %d keys per pass", t->out_rt,
                 t->out_ve, t->out_nv, t->out_dc, t->tq, t->kt);
    char prefix[128];
    if (t->cp_ti)
        snprintf(prefix, sizeof prefix, "prefix tiled (causal_prefix_tiled.cl): %d chunks x %d columns a group, %d "
                 "chunks a tile", t->cp_ti, t->cp_tw, t->cp_tj);
    else
        snprintf(prefix, sizeof prefix, "prefix %dx(%dx%d), CLBlast blocks of %d chunks", t->mix_mr, t->pre_ve,
                 t->mix_nv, t->gemm_rows);
    char summary[128];
    if (t->cs_tk)
        snprintf(summary, sizeof summary, "summary tiled (causal_summary_tiled.cl): %dx%d a group, %d tokens a tile",
                 t->cs_tn, t->cs_tn, t->cs_tk);
    else
        snprintf(summary, sizeof summary, "summary %dx(%dx%d) in sums of %d tokens%s", t->sum_rd, t->sum_ve,
                 t->sum_nv, t->sum_chunk, t->sum_lk ? " (k~ in local memory)" : "");
    snprintf(buf, size, "%s; %s, %s; %s", tu->origin, summary, output, prefix);
}

const mhla_plan_ops mhla__variant_chunks = {MHLA_VARIANT_CHUNKS, "chunks", 1, 1, mhla__causal_plan_setup,
                                            chunks_forward, chunks_describe};
