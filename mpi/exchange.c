/* The exchanges of libmhla_mpi: the configuration check every call starts with, and the moves of
 * summary rows (an all-gather, or a chain for causal runs). All staged through host memory. */
#include "mpi_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mhla_status mhla_mpi__fail(mhla_context *ctx, int err, const char *what)
{
    char text[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", err);
    text[len < 0 ? 0 : len > MPI_MAX_ERROR_STRING ? MPI_MAX_ERROR_STRING : len] = '\0';
    return mhla_report(ctx, MHLA_ERR_MPI, "%s failed: %s (MPI error %d)", what, text, err);
}

/* The fields every rank must agree on, as int64 (floats by their bits, so that 1e-6 and a
 * rounded 1e-6 differ), then the rank's status and shard. */
enum { N_FIELDS = 24, D_STATUS = N_FIELDS, D_OFFSET, D_COUNT, D_BLOCKS, D_SIZE };
static const char *const field_names[N_FIELDS] = {
    "batch", "heads", "seq_t", "seq_h", "seq_w", "block_t", "block_h", "block_w", "dk", "dv", "layout",
    "feature_map", "feature_eps", "scale", "normalizer", "eps", "dtype", "causal", "chunk", "mixing_rows", "varlen",
    "num_seqs (varlen)", "cu_seqlens (varlen; shown as their FNV-1a hash)", "kv_heads"};
static int is_float_field(int f) { return f == 12 || f == 13 || f == 15; }
enum { F_CU_HASH = 22 };

/* Varlen shards compare their cu_seqlens by a hash: equal arrays always agree, and two that differ
 * collide with probability 2^-64. */
static int64_t cu_hash(const int32_t *cu, size_t num_seqs)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; cu && i <= num_seqs; ++i)
        for (int b = 0; b < 4; ++b)
            h = (h ^ (((uint32_t)cu[i] >> (8 * b)) & 0xffu)) * 1099511628211ull;
    return (int64_t)h;
}

static int64_t bits_of(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return (int64_t)bits;
}

static void describe(const mhla_shard_info *info, mhla_status local, int64_t *d)
{
    memset(d, 0, D_SIZE * sizeof *d);
    if (info) {
        const mhla_config *c = &info->global;
        const int64_t v[N_FIELDS] = {c->batch, c->heads, c->seq_t, c->seq_h, c->seq_w, c->block_t, c->block_h,
                                     c->block_w, c->dk, c->dv, c->layout, c->feature_map, bits_of(c->feature_eps),
                                     bits_of(c->scale), c->normalizer, bits_of(c->eps), c->dtype, c->causal,
                                     c->chunk, c->mixing_rows, c->varlen, (int64_t)info->num_seqs,
                                     cu_hash(info->cu_seqlens, info->num_seqs), c->kv_heads ? c->kv_heads : c->heads};
        memcpy(d, v, sizeof v);
        d[D_OFFSET] = info->block_offset;
        d[D_COUNT] = info->block_count;
        d[D_BLOCKS] = info->blocks;
    }
    d[D_STATUS] = (int64_t)local;
}

static void show(char *buf, size_t size, int field, int64_t v)
{
    if (field == F_CU_HASH)
        snprintf(buf, size, "%016llx", (unsigned long long)v);
    else if (is_float_field(field)) {
        uint32_t bits = (uint32_t)v;
        float f;
        memcpy(&f, &bits, sizeof f);
        snprintf(buf, size, "%.9g", (double)f);
    } else
        snprintf(buf, size, "%lld", (long long)v);
}

mhla_status mhla_mpi__check(mhla_context *ctx, MPI_Comm comm, const mhla_shard_info *info, mhla_status local_status,
                            int64_t *offsets, int64_t *counts, uint64_t *bytes)
{
    mhla_status st = MHLA_OK;
    int size = 0, rank = 0;
    int64_t mine[D_SIZE], *all = NULL;
    MHLA_MPI_TRY(st, ctx, MPI_Comm_size(comm, &size), "MPI_Comm_size");
    MHLA_MPI_TRY(st, ctx, MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    all = malloc((size_t)size * D_SIZE * sizeof *all);
    /* Without room to compare, this rank still takes part (with a failed status) so that none hangs. */
    describe(info, all ? local_status : MHLA_ERR_OUT_OF_HOST_MEMORY, mine);
    int64_t dummy[D_SIZE];
    MHLA_MPI_TRY(st, ctx,
                 MPI_Allgather(mine, D_SIZE, MPI_INT64_T, all ? all : dummy, all ? D_SIZE : 0, MPI_INT64_T, comm),
                 "MPI_Allgather (configuration check)");
    if (bytes)
        *bytes += (uint64_t)(size - 1) * D_SIZE * sizeof(int64_t);
    if (!all)
        return mhla_report(ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the configuration check");
    if (local_status != MHLA_OK) {
        st = local_status; /* its message is already recorded */
        goto cleanup;
    }
    for (int r = 0; r < size; ++r) {
        const int64_t *d = all + (size_t)r * D_SIZE;
        if (d[D_STATUS] != MHLA_OK) {
            st = mhla_report(ctx, MHLA_ERR_CONFIG_MISMATCH,
                             "mhla_forward_sharded: rank %d failed its own checks before the exchange (%s)", r,
                             mhla_status_name((mhla_status)d[D_STATUS]));
            goto cleanup;
        }
    }
    for (int f = 0; f < N_FIELDS; ++f)
        for (int r = 1; r < size; ++r)
            if (all[(size_t)r * D_SIZE + f] != all[f]) {
                char a0[32], ar[32];
                show(a0, sizeof a0, f, all[f]);
                show(ar, sizeof ar, f, all[(size_t)r * D_SIZE + f]);
                st = mhla_report(ctx, MHLA_ERR_CONFIG_MISMATCH,
                                 "mhla_forward_sharded: the ranks disagree on %s: rank 0 has %s, rank %d has %s",
                                 field_names[f], a0, r, ar);
                goto cleanup;
            }
    {
        int64_t next = 0;
        for (int r = 0; r < size; ++r) {
            const int64_t *d = all + (size_t)r * D_SIZE;
            if (d[D_OFFSET] != next) {
                st = mhla_report(ctx, MHLA_ERR_CONFIG_MISMATCH,
                                 "mhla_forward_sharded: shards out of order: rank %d starts at block %lld, but the "
                                 "ranks before it end at block %lld (shards must be contiguous, in rank order)",
                                 r, (long long)d[D_OFFSET], (long long)next);
                goto cleanup;
            }
            next += d[D_COUNT];
            if (offsets)
                offsets[r] = d[D_OFFSET];
            if (counts)
                counts[r] = d[D_COUNT];
        }
        if (next != all[D_BLOCKS]) {
            st = mhla_report(ctx, MHLA_ERR_CONFIG_MISMATCH,
                             "mhla_forward_sharded: the shards of ranks 0 .. %d cover blocks [0, %lld) of %lld",
                             size - 1, (long long)next, (long long)all[D_BLOCKS]);
            goto cleanup;
        }
    }
cleanup:
    free(all);
    return st;
}

/* Rows move as one derived type per block, so that counts stay blocks (an int) whatever the rows'
 * size. */
static mhla_status row_type(mhla_context *ctx, size_t row_floats, MPI_Datatype *type)
{
    mhla_status st = MHLA_OK;
    if (row_floats > (size_t)INT_MAX)
        return mhla_report(ctx, MHLA_ERR_UNSUPPORTED, "a block's summary row of %zu floats exceeds MPI's int counts",
                           row_floats);
    MHLA_MPI_TRY(st, ctx, MPI_Type_contiguous((int)row_floats, MPI_FLOAT, type), "MPI_Type_contiguous");
    MHLA_MPI_TRY(st, ctx, MPI_Type_commit(type), "MPI_Type_commit");
cleanup:
    return st;
}

mhla_status mhla_mpi__allgather(mhla_context *ctx, MPI_Comm comm, float *rows, size_t row_floats,
                                const int64_t *offsets, const int64_t *counts, int rank, int size,
                                mhla_mpi_stats *stats)
{
    mhla_status st = MHLA_OK;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int *cnt = malloc((size_t)size * sizeof *cnt), *dsp = malloc((size_t)size * sizeof *dsp);
    if (!cnt || !dsp) {
        st = mhla_report(ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the all-gather's counts");
        goto cleanup;
    }
    int64_t total = 0;
    for (int r = 0; r < size; ++r) {
        cnt[r] = (int)counts[r], dsp[r] = (int)offsets[r]; /* blocks: M fits an int (the kernels' grid) */
        total += counts[r];
    }
    MHLA_MPI_FORWARD(st, row_type(ctx, row_floats, &type));
    MHLA_MPI_TRY(st, ctx, MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rows, cnt, dsp, type, comm),
                 "MPI_Allgatherv (block summaries)");
    const uint64_t row_bytes = (uint64_t)row_floats * sizeof(float);
    stats->bytes_received += (uint64_t)(total - counts[rank]) * row_bytes;
    stats->bytes_sent += (uint64_t)counts[rank] * (uint64_t)(size - 1) * row_bytes;
cleanup:
    if (type != MPI_DATATYPE_NULL)
        MPI_Type_free(&type);
    free(cnt);
    free(dsp);
    return st;
}

mhla_status mhla_mpi__chain(mhla_context *ctx, MPI_Comm comm, float *rows, size_t row_floats, const int64_t *offsets,
                            const int64_t *counts, int rank, int size, mhla_mpi_stats *stats)
{
    mhla_status st = MHLA_OK;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    const uint64_t row_bytes = (uint64_t)row_floats * sizeof(float);
    MHLA_MPI_FORWARD(st, row_type(ctx, row_floats, &type));
    /* Rank r needs the rows of the blocks before its own: r - 1 holds them all once it has its
     * own, so they flow down the ranks, each adding its rows. */
    if (rank > 0) {
        MHLA_MPI_TRY(st, ctx, MPI_Recv(rows, (int)offsets[rank], type, rank - 1, 0, comm, MPI_STATUS_IGNORE),
                     "MPI_Recv (earlier chunks' summaries)");
        stats->bytes_received += (uint64_t)offsets[rank] * row_bytes;
    }
    if (rank + 1 < size) {
        const int64_t n = offsets[rank] + counts[rank];
        MHLA_MPI_TRY(st, ctx, MPI_Send(rows, (int)n, type, rank + 1, 0, comm), "MPI_Send (earlier chunks' summaries)");
        stats->bytes_sent += (uint64_t)n * row_bytes;
    }
cleanup:
    if (type != MPI_DATATYPE_NULL)
        MPI_Type_free(&type);
    return st;
}
