/* mhla_forward_sharded(): the configuration check, the shard's summaries, their exchange, and the
 * shard's mixing and output. Every rank takes part in every collective whatever fails locally, so
 * that a failure on one rank is a status on all of them, never a hang. */
#include "mpi_internal.h"

#include <stdlib.h>
#include <string.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

/* CUDA-aware Open MPI says so at run time; the exchange stages through host memory either way. */
static int gpu_aware_mpi(void)
{
#if defined(MPIX_CUDA_AWARE_SUPPORT)
    return MPIX_Query_cuda_support();
#else
    return 0;
#endif
}

/* The ranks agree on the first failure of a local stage (the largest status, then the lowest rank
 * with it), so that all skip the exchange together. */
static mhla_status agree(mhla_context *ctx, MPI_Comm comm, mhla_status local, const char *stage)
{
    mhla_status st = MHLA_OK;
    int in[2] = {(int)local, 0}, out[2] = {0, 0};
    MHLA_MPI_TRY(st, ctx, MPI_Comm_rank(comm, &in[1]), "MPI_Comm_rank");
    MHLA_MPI_TRY(st, ctx, MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MAXLOC, comm), "MPI_Allreduce (stage status)");
    if (local != MHLA_OK)
        st = local; /* its own message stays */
    else if (out[0] != MHLA_OK)
        st = mhla_report(ctx, (mhla_status)out[0], "mhla_forward_sharded: rank %d failed %s (%s); see its message",
                         out[1], stage, mhla_status_name((mhla_status)out[0]));
cleanup:
    return st;
}

static mhla_status finish(mhla_context *ctx)
{
    cl_int err = clFinish(mhla_context_queue(ctx));
    return err == CL_SUCCESS ? MHLA_OK
                             : mhla_report(ctx, MHLA_ERR_OPENCL, "clFinish after the shard's output failed (%d)", err);
}

/* A varlen shard plan runs only through the varlen calls, with the cu_seqlens it was made with
 * (the ranks then compare theirs in the configuration check). */
static mhla_status varlen_check(mhla_context *ctx, const mhla_shard_info *info, const int32_t *cu, size_t num_seqs,
                                int varlen_call)
{
    if (!varlen_call && info->global.varlen)
        return mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT,
                           "mhla_forward_sharded: the plan shards packed variable-length sequences: use "
                           "mhla_forward_sharded_varlen() with their cu_seqlens");
    if (!varlen_call)
        return MHLA_OK;
    if (!info->global.varlen)
        return mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT,
                           "mhla_forward_sharded_varlen: the plan is not a varlen shard plan "
                           "(mhla_plan_create_shard_varlen)");
    if (!cu)
        return mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_forward_sharded_varlen: cu_seqlens is NULL");
    if (num_seqs != info->num_seqs)
        return mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT,
                           "mhla_forward_sharded_varlen: num_seqs = %zu, but the shard plan was created with %zu",
                           num_seqs, info->num_seqs);
    for (size_t i = 0; i <= num_seqs; ++i)
        if (cu[i] != info->cu_seqlens[i])
            return mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT,
                               "mhla_forward_sharded_varlen: cu_seqlens[%zu] = %d, but the shard plan was created "
                               "with %d",
                               i, (int)cu[i], (int)info->cu_seqlens[i]);
    return MHLA_OK;
}

/* What distinguishes the varlen calls: their cu_seqlens. */
typedef struct packed_seqs {
    const int32_t *cu;
    size_t num_seqs;
    int varlen_call;
} packed_seqs;

/* The body of the public calls; `local` is what the host call's own preparation returned. */
static mhla_status run_sharded(mhla_plan *plan, MPI_Comm comm, const cl_mem bufs[5], mhla_mpi_exchange exchange,
                               mhla_mpi_stats *stats, mhla_status local, const packed_seqs *seqs)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = mhla_plan_context(plan);
    MPI_Errhandler old = MPI_ERRHANDLER_NULL;
    mhla_shard_info info;
    int size = 0, rank = 0;
    int64_t *offsets = NULL, *counts = NULL;
    float *rows = NULL;
    const double t0 = mhla_mpi__ms();

    memset(stats, 0, sizeof *stats);
    memset(&info, 0, sizeof info);
    if (comm == MPI_COMM_NULL)
        return mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_forward_sharded: comm is MPI_COMM_NULL");
    MHLA_MPI_TRY(st, ctx, MPI_Comm_get_errhandler(comm, &old), "MPI_Comm_get_errhandler");
    MHLA_MPI_TRY(st, ctx, MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MHLA_MPI_TRY(st, ctx, MPI_Comm_size(comm, &size), "MPI_Comm_size");
    MHLA_MPI_TRY(st, ctx, MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    stats->gpu_aware = gpu_aware_mpi();

    /* This rank's own checks: a rank that fails them still joins the configuration check. */
    if (local == MHLA_OK && !plan)
        local = mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_forward_sharded: plan is NULL");
    if (local == MHLA_OK)
        local = mhla_plan_shard_info(plan, &info);
    if (local == MHLA_OK)
        local = varlen_check(ctx, &info, seqs->cu, seqs->num_seqs, seqs->varlen_call);
    if (local == MHLA_OK && exchange != MHLA_MPI_ALLGATHER && exchange != MHLA_MPI_CHAIN)
        local = mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_forward_sharded: unknown exchange %d",
                            (int)exchange);
    offsets = calloc((size_t)size, sizeof *offsets);
    counts = calloc((size_t)size, sizeof *counts);
    if (local == MHLA_OK && (!offsets || !counts))
        local = mhla_report(ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for %d ranks' shards", size);
    if (local == MHLA_OK) {
        rows = calloc((size_t)info.blocks * info.row_floats + 1, sizeof *rows);
        if (!rows)
            local = mhla_report(ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for %lld blocks' summary rows",
                                (long long)info.blocks);
    }
    uint64_t check_bytes = 0;
    MHLA_MPI_FORWARD(st, mhla_mpi__check(ctx, comm, local == MHLA_OK ? &info : NULL, local, offsets, counts,
                                         &check_bytes));
    stats->block_offset = info.block_offset, stats->block_count = info.block_count, stats->blocks = info.blocks;
    const double t1 = mhla_mpi__ms();
    stats->check_ms = t1 - t0;

    /* 1. The shard's rows, at their place among every block's. */
    local = mhla_shard_summaries(plan, bufs[MHLA_TENSOR_Q], bufs[MHLA_TENSOR_K], bufs[MHLA_TENSOR_V],
                                 rows + (size_t)info.block_offset * info.row_floats);
    const double t2 = mhla_mpi__ms();
    MHLA_MPI_FORWARD(st, agree(ctx, comm, local, "computing its summaries"));
    const double t3 = mhla_mpi__ms();
    /* 2. The exchange. */
    if (info.global.causal && exchange == MHLA_MPI_CHAIN)
        MHLA_MPI_FORWARD(st, mhla_mpi__chain(ctx, comm, rows, info.row_floats, offsets, counts, rank, size, stats));
    else
        MHLA_MPI_FORWARD(st,
                         mhla_mpi__allgather(ctx, comm, rows, info.row_floats, offsets, counts, rank, size, stats));
    const double t4 = mhla_mpi__ms();
    /* 3. Mixing and output of the shard's tokens. */
    MHLA_MPI_FORWARD(st, mhla_shard_output(plan, bufs[MHLA_TENSOR_Q], bufs[MHLA_TENSOR_K], bufs[MHLA_TENSOR_V],
                                           bufs[MHLA_TENSOR_MIXING], rows, bufs[MHLA_TENSOR_OUT], NULL));
    if (info.block_count > 0)
        MHLA_MPI_FORWARD(st, finish(ctx));
    const double t5 = mhla_mpi__ms();
    stats->compute_ms = (t2 - t1) + (t5 - t4);
    stats->comm_ms = (t4 - t3) + (t3 - t2); /* the exchange and the status agreement before it */
    stats->total_ms = t5 - t0;
    stats->bytes_sent += check_bytes;
    stats->bytes_received += check_bytes;
cleanup:
    if (old != MPI_ERRHANDLER_NULL) {
        MPI_Comm_set_errhandler(comm, old);
        MPI_Errhandler_free(&old);
    }
    free(rows);
    free(offsets);
    free(counts);
    return st;
}

mhla_status mhla_forward_sharded(mhla_plan *plan, MPI_Comm comm, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                 cl_mem out, mhla_mpi_exchange exchange, mhla_mpi_stats *stats)
{
    mhla_mpi_stats mine;
    const cl_mem bufs[5] = {q, k, v, out, mixing};
    const packed_seqs none = {NULL, 0, 0};
    return run_sharded(plan, comm, bufs, exchange, stats ? stats : &mine, MHLA_OK, &none);
}

mhla_status mhla_forward_sharded_varlen(mhla_plan *plan, MPI_Comm comm, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                        const int32_t *cu_seqlens, size_t num_seqs, cl_mem out,
                                        mhla_mpi_exchange exchange, mhla_mpi_stats *stats)
{
    mhla_mpi_stats mine;
    const cl_mem bufs[5] = {q, k, v, out, mixing};
    const packed_seqs seqs = {cu_seqlens, num_seqs, 1};
    return run_sharded(plan, comm, bufs, exchange, stats ? stats : &mine, MHLA_OK, &seqs);
}

/* A device buffer of the plan's context holding `host` (or only sized, host NULL); none for 0 bytes. */
static mhla_status upload(mhla_context *ctx, const char *fn, size_t bytes, const void *host, cl_mem *out,
                          const char *what)
{
    cl_int err = CL_SUCCESS;
    *out = NULL;
    if (bytes == 0)
        return MHLA_OK;
    *out = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                          (void *)host, &err);
    if (err != CL_SUCCESS)
        return mhla_report(ctx, err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES
                                    ? MHLA_ERR_OUT_OF_DEVICE_MEMORY
                                    : MHLA_ERR_OPENCL,
                           "%s: clCreateBuffer for %s (%zu bytes) failed (%d)", fn, what, bytes, err);
    return MHLA_OK;
}

static mhla_status run_host(const char *fn, mhla_plan *plan, MPI_Comm comm, const void *q, const void *k,
                            const void *v, const float *mixing, void *out, mhla_mpi_exchange exchange,
                            mhla_mpi_stats *stats, const packed_seqs *seqs)
{
    mhla_status st = MHLA_OK, local = MHLA_OK;
    mhla_mpi_stats mine;
    cl_mem bufs[5] = {NULL, NULL, NULL, NULL, NULL};
    const void *host[5] = {q, k, v, NULL, mixing};
    static const char *const names[5] = {"q", "k", "v", "out", "mixing"};
    mhla_context *ctx = mhla_plan_context(plan);
    const size_t out_bytes = mhla_plan_tensor_bytes(plan, MHLA_TENSOR_OUT);

    /* Shards of no blocks have no tokens: their q, k, v and out may be NULL. */
    for (int t = 0; plan && t < 5 && local == MHLA_OK; ++t) {
        const size_t bytes = mhla_plan_tensor_bytes(plan, (mhla_tensor)t);
        if (bytes && (t == MHLA_TENSOR_OUT ? !out : !host[t]))
            local = mhla_report(ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: %s pointer is NULL", fn, names[t]);
        else
            local = upload(ctx, fn, bytes, host[t], &bufs[t], names[t]);
    }
    st = run_sharded(plan, comm, bufs, exchange, stats ? stats : &mine, local, seqs);
    if (st == MHLA_OK && out_bytes) {
        cl_int err = clEnqueueReadBuffer(mhla_context_queue(ctx), bufs[MHLA_TENSOR_OUT], CL_TRUE, 0, out_bytes, out, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS)
            st = mhla_report(ctx, MHLA_ERR_OPENCL, "%s: clEnqueueReadBuffer (out) failed (%d)", fn, err);
    }
    for (int t = 0; t < 5; ++t)
        if (bufs[t])
            clReleaseMemObject(bufs[t]);
    return st;
}

mhla_status mhla_forward_sharded_host(mhla_plan *plan, MPI_Comm comm, const void *q, const void *k, const void *v,
                                      const float *mixing, void *out, mhla_mpi_exchange exchange,
                                      mhla_mpi_stats *stats)
{
    const packed_seqs none = {NULL, 0, 0};
    return run_host("mhla_forward_sharded_host", plan, comm, q, k, v, mixing, out, exchange, stats, &none);
}

mhla_status mhla_forward_sharded_varlen_host(mhla_plan *plan, MPI_Comm comm, const void *q, const void *k,
                                             const void *v, const float *mixing, const int32_t *cu_seqlens,
                                             size_t num_seqs, void *out, mhla_mpi_exchange exchange,
                                             mhla_mpi_stats *stats)
{
    const packed_seqs seqs = {cu_seqlens, num_seqs, 1};
    return run_host("mhla_forward_sharded_varlen_host", plan, comm, q, k, v, mixing, out, exchange, stats, &seqs);
}
