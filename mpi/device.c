/* Which blocks and which device each rank takes. */
#include "mpi_internal.h"

#include <stdio.h>
#include <stdlib.h>

mhla_status mhla_mpi_shard_blocks(int64_t blocks, int64_t frame, int size, int rank, int64_t *offset, int64_t *count)
{
    if (!offset || !count)
        return mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_mpi_shard_blocks: %s is NULL",
                           offset ? "count" : "offset");
    if (blocks < 0 || frame < 1 || blocks % frame != 0)
        return mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT,
                           "mhla_mpi_shard_blocks: %lld blocks do not split into frames of %lld",
                           (long long)blocks, (long long)frame);
    if (size < 1 || rank < 0 || rank >= size)
        return mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_mpi_shard_blocks: rank %d of %d ranks", rank, size);
    const int64_t units = blocks / frame, base = units / size, extra = units % size;
    const int64_t first = rank * base + (rank < extra ? rank : extra);
    *offset = first * frame;
    *count = (base + (rank < extra ? 1 : 0)) * frame;
    return MHLA_OK;
}

/* The pointer and configuration checks of the two counters below. */
static mhla_status count_check(const char *fn, const mhla_config *cfg, int pointers_ok)
{
    char msg[512];
    if (!cfg || !pointers_ok)
        return mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: a pointer is NULL", fn);
    mhla_status st = mhla_config_check(cfg, msg, sizeof msg);
    return st == MHLA_OK ? MHLA_OK : mhla_report(NULL, st, "%s", msg);
}

mhla_status mhla_mpi_blocks_of(const mhla_config *cfg, int64_t *blocks, int64_t *frame)
{
    mhla_status st = count_check("mhla_mpi_blocks_of", cfg, blocks && frame);
    if (st != MHLA_OK)
        return st;
    if (cfg->causal) {
        const int64_t n = cfg->seq_t * cfg->seq_h * cfg->seq_w, c = cfg->chunk > 0 ? cfg->chunk : MHLA_DEFAULT_CHUNK;
        *blocks = (n + c - 1) / c;
        *frame = 1;
    } else {
        *blocks = cfg->block_t * cfg->block_h * cfg->block_w;
        *frame = cfg->block_h * cfg->block_w;
    }
    return MHLA_OK;
}

mhla_status mhla_mpi_varlen_chunks(const mhla_config *cfg, const int32_t *cu_seqlens, size_t num_seqs,
                                   int64_t *chunks)
{
    mhla_status st = count_check("mhla_mpi_varlen_chunks", cfg, cu_seqlens && chunks);
    if (st != MHLA_OK)
        return st;
    if (!cfg->varlen)
        return mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT,
                           "mhla_mpi_varlen_chunks: the configuration is not for packed sequences (varlen = 0)");
    const int64_t c = cfg->chunk > 0 ? cfg->chunk : MHLA_DEFAULT_CHUNK;
    *chunks = 0;
    for (size_t s = 0; s < num_seqs; ++s) {
        if (cu_seqlens[s + 1] < cu_seqlens[s])
            return mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT,
                               "mhla_mpi_varlen_chunks: cu_seqlens[%zu] = %d < cu_seqlens[%zu] = %d", s + 1,
                               (int)cu_seqlens[s + 1], s, (int)cu_seqlens[s]);
        *chunks += ((int64_t)cu_seqlens[s + 1] - cu_seqlens[s] + c - 1) / c;
    }
    return MHLA_OK;
}

mhla_status mhla_mpi_device_spec(MPI_Comm comm, char *spec, size_t size)
{
    mhla_status st = MHLA_OK;
    MPI_Comm node = MPI_COMM_NULL;
    mhla_device_info *infos = NULL;
    size_t n = 0;
    int local_rank = 0;
    if (!spec || size == 0)
        return mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_mpi_device_spec: spec is NULL or size 0");
    const char *env = getenv("MHLA_DEVICE");
    /* The node-local rank first: a collective call, made by every rank whatever it then picks. */
    MHLA_MPI_TRY(st, NULL, MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
                 "MPI_Comm_split_type (node-local ranks)");
    MHLA_MPI_TRY(st, NULL, MPI_Comm_rank(node, &local_rank), "MPI_Comm_rank (node-local)");
    if (env && *env) {
        snprintf(spec, size, "%s", env);
        goto cleanup;
    }
    MHLA_MPI_FORWARD(st, mhla_device_list(NULL, 0, &n));
    if (n == 0) {
        st = mhla_report(NULL, MHLA_ERR_DEVICE_NOT_FOUND, "mhla_mpi_device_spec: no OpenCL device");
        goto cleanup;
    }
    infos = calloc(n, sizeof *infos);
    if (!infos) {
        st = mhla_report(NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory listing devices");
        goto cleanup;
    }
    MHLA_MPI_FORWARD(st, mhla_device_list(infos, n, &n));
    size_t gpus = 0;
    for (size_t i = 0; i < n; ++i)
        gpus += infos[i].is_gpu ? 1 : 0;
    /* The local_rank-th GPU (cyclically), or the local_rank-th device where there is no GPU. */
    size_t want = (size_t)local_rank % (gpus ? gpus : n), pick = 0;
    for (size_t i = 0; i < n; ++i)
        if (!gpus || infos[i].is_gpu) {
            if (want == 0) {
                pick = i;
                break;
            }
            --want;
        }
    snprintf(spec, size, "%d", infos[pick].index);
cleanup:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    free(infos);
    return st;
}
