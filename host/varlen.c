/* Packed variable-length causal batches: the cu_seqlens rules, the chunk tables of a packed batch
 * (each sequence chunked from its own start), and mhla_forward_varlen(_host). */
#include "causal.h"

#include <stdio.h>
#include <string.h>

#define CHECK MHLA_CHECK_MSG

mhla_status mhla__cu_seqlens_check(const int32_t *cu, size_t num_seqs, int64_t total, int64_t chunk, int64_t rows,
                                   char *msg, size_t msg_size)
{
    CHECK(cu != NULL, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens is NULL");
    CHECK(num_seqs >= 1, MHLA_ERR_INVALID_ARGUMENT, "num_seqs must be >= 1, got %zu", num_seqs);
    CHECK(cu[0] == 0, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[0] must be 0, got %d", (int)cu[0]);
    for (size_t s = 0; s < num_seqs; ++s) {
        CHECK(cu[s + 1] >= cu[s], MHLA_ERR_INVALID_ARGUMENT,
              "cu_seqlens must not decrease: cu_seqlens[%zu] = %d < cu_seqlens[%zu] = %d", s + 1, (int)cu[s + 1], s,
              (int)cu[s]);
        const int64_t len = (int64_t)cu[s + 1] - cu[s];
        CHECK((len + chunk - 1) / chunk <= rows, MHLA_ERR_SEQUENCE_TOO_LONG,
              "sequence %zu (cu_seqlens[%zu] = %d .. cu_seqlens[%zu] = %d) of %lld tokens is longer than chunk * "
              "rows(Mc) = %lld * %lld = %lld",
              s, s, (int)cu[s], s + 1, (int)cu[s + 1], (long long)len, (long long)chunk, (long long)rows,
              (long long)(chunk * rows));
    }
    CHECK(cu[num_seqs] == total, MHLA_ERR_INVALID_ARGUMENT,
          "cu_seqlens[%zu] = %d must equal the plan's total of %lld packed tokens (seq_t)", num_seqs,
          (int)cu[num_seqs], (long long)total);
    return MHLA_OK;
}
#undef CHECK

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

mhla_status mhla_forward_varlen_host(mhla_plan *plan, const void *q, const void *k, const void *v,
                                     const float *mixing, const int32_t *cu_seqlens, size_t num_seqs, void *out)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !cu_seqlens, plan ? plan->ctx : NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_forward_varlen_host: cu_seqlens pointer is NULL");
    st = mhla__forward_host(plan, "mhla_forward_varlen_host", q, k, v, mixing, out, cu_seqlens, num_seqs);
cleanup:
    return st;
}
