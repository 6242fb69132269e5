/* Packed variable-length causal batches: the chunk tables of a packed batch (each sequence chunked
 * from its own start) and mhla_forward_varlen (its rules: config/cu_seqlens.c; the host call:
 * forward/host_call.c). */
#include "forward/forward.h"

#include <stdio.h>
#include <string.h>

mhla_status mhla_forward_varlen(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                const int32_t *cu_seqlens, size_t num_seqs, cl_mem out, cl_uint num_wait,
                                const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    mhla_chunk_tables tables;
    char msg[512];
    memset(&tables, 0, sizeof tables);

    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_forward_varlen: plan is NULL");
    ctx = plan->ctx;
    MHLA_FAIL_IF(st, !plan->cfg.varlen, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_forward_varlen: the plan was not created for packed sequences (set causal = 1 and varlen = 1)");
    MHLA_FAIL_IF(st, plan->shard, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_forward_varlen: the plan is a shard plan: run it with mhla_forward_sharded_varlen() "
                 "(libmhla_mpi), or mhla_shard_summaries() and mhla_shard_output()");
    const cl_mem bufs[] = {q, k, v, out, mixing};
    MHLA_FORWARD_IF_ERROR(st, mhla__forward_check(plan, "mhla_forward_varlen", bufs, num_wait, wait));
    st = mhla__cu_seqlens_check(cu_seqlens, num_seqs, plan->shape.n, plan->cfg.chunk, plan->cfg.mixing_rows, msg,
                                sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "mhla_forward_varlen: %s", msg);

    mhla_causal *kern = plan->causal->kern;
    for (size_t s = 0; s < num_seqs; ++s)
        MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_add(ctx, &tables, cu_seqlens[s],
                                                         (int64_t)cu_seqlens[s + 1] - cu_seqlens[s], 0,
                                                         (int64_t)tables.n_chunks, plan->cfg.chunk, &kern->tiling));
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_plan_reserve(plan, tables.n_chunks));
    const mhla_causal_plan *cp = plan->causal;
    mhla_causal_run run = {q, k, v, mixing, out, plan->shape.n, NULL, NULL, &tables, cp->sums, cp->pref,
                           &plan->marks[1]};
    MHLA_FORWARD_IF_ERROR(st, mhla__forward_mark_start(plan, num_wait, wait));
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue_once(kern, &run, num_wait, wait, done));
cleanup:
    mhla__chunk_tables_free(&tables);
    return st;
}
