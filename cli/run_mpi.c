/* `mhla run --mpi` under mpirun: every rank validates the same files' headers and options, takes
 * an even share of whole blocks (causal: chunks; --cu-seqlens: chunks of the packed sequences,
 * each chunked from its own start), reads only that token range of --q/--k/--v,
 * runs its shard on its own device (libmhla_mpi), and rank 0 gathers the output and writes it
 * through the temporary-and-rename writer. The ranks agree on every failure, so that none waits
 * for a rank that has already given up; each exits with the largest exit code of all. */
#include "cli.h"
#include "run.h"

#include <mhla_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The largest exit code over the ranks (0 when all succeeded). */
static int agree(int rc)
{
    int all = rc;
    if (MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return rc ? rc : CLI_RUNTIME;
    return all;
}

static int refuse_options(const run_job *job)
{
    static const int refused[] = {O_CHECK, O_REPEAT, O_RECURRENT};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i)
        if (job->o[refused[i]].value)
            return cli_fail(CLI_USAGE, "--mpi does not take %s (run without --mpi for it)", job->o[refused[i]].name);
    return 0;
}

/* This rank's shard plan on its device, and its token range of the inputs. */
static int open_shard(run_job *job, int rank, int size, mhla_shard_info *info)
{
    char spec[256];
    int64_t blocks = 0, frame = 1, off = 0, cnt = 0;
    mhla_status st;
    if (job->o[O_DEVICE].value)
        snprintf(spec, sizeof spec, "%s", job->o[O_DEVICE].value);
    else if ((st = mhla_mpi_device_spec(MPI_COMM_WORLD, spec, sizeof spec)) != MHLA_OK)
        return cli_fail(cli_exit_code(st), "--mpi: %s", mhla_last_message());
    if ((st = mhla_context_create(spec, &job->ctx)) != MHLA_OK)
        return cli_fail(cli_exit_code(st), "--mpi: rank %d, device %s: %s", rank, spec, mhla_last_message());
    const int packed = job->cfg.varlen;
    if ((st = packed ? mhla_mpi_varlen_chunks(&job->cfg, job->cu_seqlens, job->num_seqs, &blocks)
                     : mhla_mpi_blocks_of(&job->cfg, &blocks, &frame)) != MHLA_OK ||
        (st = mhla_mpi_shard_blocks(blocks, frame, size, rank, &off, &cnt)) != MHLA_OK ||
        (st = packed ? mhla_plan_create_shard_varlen(job->ctx, &job->cfg, job->cu_seqlens, job->num_seqs, off, cnt,
                                                     &job->plan)
                     : mhla_plan_create_shard(job->ctx, &job->cfg, off, cnt, &job->plan)) != MHLA_OK ||
        (st = mhla_plan_shard_info(job->plan, info)) != MHLA_OK)
        return run_device_fail(job, st, "run --mpi");
    /* The token axis is 1 in [B,N,H,D], 2 in [B,H,N,D]. */
    const int axis = job->cfg.layout == MHLA_LAYOUT_BHND ? 2 : 1;
    static const int opt_of[3] = {O_Q, O_K, O_V};
    char err[512];
    for (int i = 0; i < 3; ++i) {
        npy_free(&job->in[i]);
        const npy_status ns = npy_read_range(job->o[opt_of[i]].value, axis, info->token_offset, info->tokens,
                                             &job->in[i], err, sizeof err);
        if (ns != NPY_OK)
            return cli_fail(cli_npy_exit_code(ns), "%s %s: %s", job->o[opt_of[i]].name, job->o[opt_of[i]].value, err);
    }
    return info->tokens > 0 ? run_convert_inputs(job) : 0;
}

/* Rank 0 places every rank's [outer][n_r][per] slice of the output at its tokens. */
static int gather_output(run_job *job, const float *mine, size_t mine_count, const mhla_shard_info *info, int rank,
                         int size, const int64_t *full_shape)
{
    const int bhnd = job->cfg.layout == MHLA_LAYOUT_BHND;
    const int64_t outer = bhnd ? job->cfg.batch * job->cfg.heads : job->cfg.batch;
    const int64_t per = bhnd ? job->cfg.dv : job->cfg.heads * job->cfg.dv;
    const int64_t n_all = info->global.seq_t * info->global.seq_h * info->global.seq_w;
    const size_t total = (size_t)(outer * n_all * per);
    long long range[2] = {info->token_offset, info->tokens}, *ranges = NULL;
    int count = (int)mine_count, *counts = NULL, *displs = NULL;
    float *stacked = NULL;
    int rc = 0;
    if (mine_count > (size_t)INT32_MAX || total > (size_t)INT32_MAX)
        rc = cli_fail(CLI_RUNTIME, "--mpi: an output of %zu elements exceeds MPI's int counts", total);
    if (rank == 0 && rc == 0) {
        ranges = malloc((size_t)size * sizeof range), counts = malloc((size_t)size * sizeof *counts);
        displs = malloc((size_t)size * sizeof *displs), stacked = malloc((total + 1) * sizeof *stacked);
        job->result = malloc((total + 1) * sizeof *job->result);
        if (!ranges || !counts || !displs || !stacked || !job->result)
            rc = cli_fail(CLI_RUNTIME, "--mpi: out of host memory for the output");
    }
    if ((rc = agree(rc)) != 0)
        goto done;
    MPI_Gather(range, 2, MPI_LONG_LONG, ranges, 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    MPI_Gather(&count, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int r = 0, at = 0; r < size; at += counts[r], ++r)
            displs[r] = at;
    if (MPI_Gatherv(mine, count, MPI_FLOAT, stacked, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        rc = cli_fail(CLI_RUNTIME, "--mpi: MPI_Gatherv of the output failed");
    if (rank == 0 && rc == 0) {
        for (int r = 0; r < size; ++r) {
            const int64_t t0 = ranges[2 * r], n = ranges[2 * r + 1];
            for (int64_t o = 0; o < outer; ++o)
                memcpy(job->result + (size_t)((o * n_all + t0) * per), stacked + displs[r] + (size_t)(o * n * per),
                       (size_t)(n * per) * sizeof(float));
        }
        memcpy(job->in[2].shape, full_shape, 4 * sizeof *full_shape);
        job->in[2].count = total;
    }
done:
    free(ranges), free(counts), free(displs), free(stacked);
    return rc;
}

int run_mpi(run_job *job)
{
    int rank = 0, size = 1, rc = 0, inited = 0;
    int64_t full_shape[4] = {0, 0, 0, 0};
    mhla_shard_info info;
    mhla_mpi_stats stats;
    float *mine = NULL;
    char err[512];
    memset(&info, 0, sizeof info);
    memset(&stats, 0, sizeof stats);
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS)
        return cli_fail(CLI_RUNTIME, "--mpi: MPI_Init failed");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Every rank checks the options and the headers (each prints its own failure). */
    job->headers_only = 1;
    if ((rc = refuse_options(job)) == 0 && (rc = run_read_inputs(job)) == 0 && (rc = run_shape(job)) == 0) {
        memcpy(full_shape, job->in[2].shape, sizeof full_shape);
        if (rank == 0) { /* the output's temporary first: a bad --out fails before any work */
            sigset_t old_mask;
            cli_guard_hold(&old_mask);
            const npy_status ws = npy_writer_open(&job->out, job->o[O_OUT].value, err, sizeof err);
            if (ws == NPY_OK)
                cli_guard_temp(job->out.tmp);
            cli_guard_release(&old_mask);
            if (ws != NPY_OK)
                rc = cli_fail(cli_npy_exit_code(ws), "--out %s: %s", job->o[O_OUT].value, err);
        }
    }
    if ((rc = agree(rc)) != 0 || (rc = agree(open_shard(job, rank, size, &info))) != 0)
        goto done;

    const int wide = job->cfg.dtype == MHLA_DTYPE_F32;
    const size_t out_count = mhla_plan_tensor_bytes(job->plan, MHLA_TENSOR_OUT) / (wide ? 4 : 2);
    void *out = malloc(out_count * sizeof(float) + 1);
    const void *q = wide ? (void *)job->f32[0] : job->dev16[0], *k = wide ? (void *)job->f32[1] : job->dev16[1];
    const void *v = wide ? (void *)job->f32[2] : job->dev16[2];
    mhla_status st = !out             ? MHLA_ERR_OUT_OF_HOST_MEMORY
                     : job->cfg.varlen ? mhla_forward_sharded_varlen_host(job->plan, MPI_COMM_WORLD, q, k, v,
                                                                          job->mixing, job->cu_seqlens, job->num_seqs,
                                                                          out, MHLA_MPI_ALLGATHER, &stats)
                                       : mhla_forward_sharded_host(job->plan, MPI_COMM_WORLD, q, k, v, job->mixing, out,
                                                                   MHLA_MPI_ALLGATHER, &stats);
    if (st != MHLA_OK)
        rc = run_device_fail(job, st, "run --mpi");
    mine = out;
    if (rc == 0 && !wide) { /* 16-bit bits to float, in place from the top down would alias: copy */
        float *f = malloc(out_count * sizeof *f + 1);
        if (f)
            mhla_convert(MHLA_DTYPE_F32, f, job->cfg.dtype, out, out_count);
        free(out);
        mine = f;
        if (!f)
            rc = cli_fail(CLI_RUNTIME, "out of host memory for the output");
    }
    if ((rc = agree(rc)) != 0)
        goto done;
    printf("rank %d/%d: blocks [%lld, %lld) of %lld, tokens [%lld, %lld), compute_ms %.3f comm_ms %.3f bytes_sent %llu "
           "bytes_received %llu\n",
           rank, size, (long long)info.block_offset, (long long)(info.block_offset + info.block_count),
           (long long)info.blocks, (long long)info.token_offset, (long long)(info.token_offset + info.tokens),
           stats.compute_ms, stats.comm_ms, (unsigned long long)stats.bytes_sent,
           (unsigned long long)stats.bytes_received);
    fflush(stdout);
    if ((rc = gather_output(job, mine, out_count, &info, rank, size, full_shape)) == 0 && rank == 0)
        rc = run_write_output(job);
    rc = agree(rc);
done:
    free(mine);
    if (!inited)
        MPI_Finalize();
    return rc;
}
