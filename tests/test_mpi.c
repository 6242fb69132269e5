/* The sharded forward (libmhla_mpi) under mpirun -np R: every case runs on all ranks, each rank on
 * its own device (mhla_mpi_device_spec), and its shard of the output is compared with the double
 * reference of the whole sequence and with mhla_forward_host() of the whole sequence on one device
 * (bit for bit where the device mixes with kernels/mixing.cl, else within 1e-6 relative).
 * Shards: even, uneven, and with a rank of no blocks; causal runs with both exchanges; packed
 * varlen batches (against mhla_reference_forward_varlen and mhla_forward_varlen_host) whose shards
 * begin inside and between sequences, around an empty sequence and partial chunks. Then the
 * faults: ranks that disagree on dk or on cu_seqlens, shards out of order. Rank 0 prints one line per case and the
 * program exits 1 when any rank failed a check, 77 when there is no device. */
#include "helpers.h"

#include <mhla_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

#define CHECK(cond, ...)                                                                            \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", rank, __FILE__, __LINE__);                     \
            fprintf(stderr, __VA_ARGS__);                                                           \
            fprintf(stderr, "\n");                                                                  \
            ++failures;                                                                             \
        }                                                                                           \
    } while (0)

/* Tokens [t0, t0 + n) of a [B, N, H, D] (or [B, H, N, D]) array of `elem` bytes into dst. */
static void slice(void *dst, const void *src, const mhla_config *c, int64_t n_all, int64_t t0, int64_t n, int64_t d,
                  size_t elem)
{
    const int64_t outer = c->layout == MHLA_LAYOUT_BNHD ? c->batch : c->batch * c->heads;
    const int64_t per = c->layout == MHLA_LAYOUT_BNHD ? c->heads * d : d; /* one token's elements */
    for (int64_t o = 0; o < outer; ++o)
        memcpy((char *)dst + (size_t)(o * n * per) * elem, (const char *)src + (size_t)((o * n_all + t0) * per) * elem,
               (size_t)(n * per) * elem);
}

/* The shard every rank takes: `uneven` gives rank r a share growing with r and the last rank none
 * (with R > 1); otherwise mhla_mpi_shard_blocks' even split. */
static void shard_of(int64_t blocks, int64_t frame, int uneven, int r, int64_t *off, int64_t *cnt)
{
    if (!uneven || size == 1) {
        mhla_mpi_shard_blocks(blocks, frame, size, r, off, cnt);
        return;
    }
    /* Units of frames: rank r < R-1 gets weight r + 1, rank R-1 gets 0. */
    const int64_t units = blocks / frame;
    int64_t wsum = 0, acc = 0;
    for (int i = 0; i < size - 1; ++i)
        wsum += i + 1;
    for (int i = 0; i < r && i < size - 1; ++i)
        acc += units * (i + 1) / wsum;
    int64_t mine = r < size - 1 ? units * (r + 1) / wsum : 0;
    if (r == size - 2) /* rounding's leftovers */
        mine = units - acc;
    *off = (r == size - 1 ? units : acc) * frame;
    *cnt = mine * frame;
}

/* This rank's shard of the output against the reference and the single-device run of the whole
 * sequence (errors reduced over the ranks); rank 0 prints the case's line. */
static void judge(const char *name, const mhla_config *cfg, const mhla_shard_info *info, int64_t n_all,
                  const double *ref, const float *single, size_t nv_all, const float *mine, size_t nv_mine,
                  const mhla_mpi_stats *stats, int64_t blocks)
{
    /* Errors over the whole output: this rank's max |diff| against both, reduced over the ranks. */
    double *ref_mine = malloc((nv_mine + 1) * sizeof *ref_mine);
    float *single_mine = malloc((nv_mine + 1) * sizeof *single_mine);
    double local[3] = {0, 0, 0}, global[3], ref_max = 0, single_max = 0;
    slice(ref_mine, ref, &info->global, n_all, info->token_offset, info->tokens, cfg->dv, sizeof(double));
    slice(single_mine, single, &info->global, n_all, info->token_offset, info->tokens, cfg->dv, sizeof(float));
    for (size_t i = 0; i < nv_all; ++i) {
        ref_max = fmax(ref_max, fabs(ref[i]));
        single_max = fmax(single_max, fabs((double)single[i]));
    }
    for (size_t i = 0; i < nv_mine; ++i) {
        const double d_ref = fabs((double)mine[i] - ref_mine[i]), d_one = fabs((double)mine[i] - single_mine[i]);
        local[0] = isnan(d_ref) || d_ref > local[0] ? (isnan(d_ref) ? INFINITY : d_ref) : local[0];
        local[1] = isnan(d_one) || d_one > local[1] ? (isnan(d_one) ? INFINITY : d_one) : local[1];
        local[2] += memcmp(&mine[i], &single_mine[i], sizeof(float)) != 0;
    }
    free(ref_mine);
    free(single_mine);
    MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&local[2], &global[2], 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    const double err_ref = global[0] / ref_max, err_one = global[1] / single_max;
    const double tol = mhla_reference_tolerance(cfg->dtype, n_all);
    CHECK(err_ref <= tol, "%s: error %.3g against the reference exceeds %.3g", name, err_ref, tol);
    CHECK(err_one <= 1e-6, "%s: error %.3g against the single-device run exceeds 1e-6", name, err_one);
    unsigned long long sent = stats->bytes_sent, recv = stats->bytes_received, all_sent[64] = {0}, all_recv[64] = {0};
    long long offs[64] = {0}, cnts[64] = {0}, o = info->block_offset, c = info->block_count;
    if (size <= 64) {
        MPI_Gather(&sent, 1, MPI_UNSIGNED_LONG_LONG, all_sent, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
        MPI_Gather(&recv, 1, MPI_UNSIGNED_LONG_LONG, all_recv, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
        MPI_Gather(&o, 1, MPI_LONG_LONG, offs, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
        MPI_Gather(&c, 1, MPI_LONG_LONG, cnts, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    }
    if (rank == 0) {
        printf("%-26s R=%d shards", name, size);
        for (int r = 0; r < size && r < 64; ++r)
            printf(" [%lld,+%lld)", offs[r], cnts[r]);
        printf(" of %lld | err vs reference %.2e (tol %.0e) | vs single device: %s (max rel %.2e, %.0f of %zu "
               "differ) | bytes sent/recv per rank:",
               (long long)blocks, err_ref, tol, global[2] == 0 ? "bit-identical" : "within rounding", err_one,
               global[2], nv_all);
        for (int r = 0; r < size && r < 64; ++r)
            printf(" %llu/%llu", all_sent[r], all_recv[r]);
        printf("\n");
        fflush(stdout);
    }
}

/* A case's host arrays: the whole reference and single-device outputs, this rank's slices of
 * q, k, v (as a real run reads only its tokens) and its output, pre-filled with NaN. */
typedef struct case_data {
    double *ref;
    float *single, *sq, *sk, *sv, *mine;
    size_t nv_mine;
} case_data;

static void case_free(case_data *d)
{
    free(d->ref), free(d->single), free(d->sq), free(d->sk), free(d->sv), free(d->mine);
    memset(d, 0, sizeof *d);
}

/* Returns 0 when out of memory (a failed check). */
static int case_alloc(const char *name, mhla_plan *plan, const mhla_shard_info *info, const test_inputs *in,
                      case_data *d)
{
    const mhla_config *g = &info->global;
    const int64_t n_all = g->seq_t * g->seq_h * g->seq_w;
    const size_t nq_mine = mhla_plan_tensor_bytes(plan, MHLA_TENSOR_Q) / sizeof(float);
    d->nv_mine = mhla_plan_tensor_bytes(plan, MHLA_TENSOR_V) / sizeof(float);
    d->ref = malloc(in->nv * sizeof *d->ref), d->single = malloc(in->nv * sizeof *d->single);
    d->sq = malloc(nq_mine * sizeof(float) + 1), d->sk = malloc(nq_mine * sizeof(float) + 1);
    d->sv = malloc(d->nv_mine * sizeof(float) + 1), d->mine = malloc(d->nv_mine * sizeof(float) + 1);
    const int ok = d->ref && d->single && d->sq && d->sk && d->sv && d->mine;
    CHECK(ok, "%s: out of memory", name);
    if (!ok)
        return 0;
    for (size_t i = 0; i < d->nv_mine; ++i)
        d->mine[i] = NAN;
    for (size_t i = 0; i < in->nv; ++i)
        d->single[i] = NAN;
    slice(d->sq, in->q, g, n_all, info->token_offset, info->tokens, g->dk, sizeof(float));
    slice(d->sk, in->k, g, n_all, info->token_offset, info->tokens, g->dk, sizeof(float));
    slice(d->sv, in->v, g, n_all, info->token_offset, info->tokens, g->dv, sizeof(float));
    return 1;
}

/* One case on every rank; returns this rank's failures. */
/* After a local failure, a rank still takes part in the case's collective, with no plan: the other
 * ranks then fail this case by name (MHLA_ERR_CONFIG_MISMATCH) instead of waiting for this rank, and
 * every rank moves on to the next case in step. */
static void join_without_plan(const float *mix, mhla_mpi_exchange exchange)
{
    (void)mhla_forward_sharded_host(NULL, MPI_COMM_WORLD, NULL, NULL, NULL, mix, NULL, exchange, NULL);
}

static void run_case(mhla_context *ctx, const char *name, const mhla_config *cfg, int uneven,
                     mhla_mpi_exchange exchange)
{
    test_inputs in;
    case_data d;
    mhla_plan *plan = NULL, *whole = NULL;
    int64_t blocks = 0, frame = 1, off = 0, cnt = 0;
    mhla_shard_info info;
    mhla_mpi_stats stats;
    const int before = failures;
    const char *only = getenv("TEST_MPI_ONLY"); /* a substring of the case names to run */
    memset(&d, 0, sizeof d);
    if (only && *only && !strstr(name, only))
        return;

    CHECK(test_inputs_make(cfg, TEST_INIT_RANDOM, 7, &in) == MHLA_OK, "%s: inputs", name);
    CHECK(mhla_mpi_blocks_of(cfg, &blocks, &frame) == MHLA_OK, "%s: %s", name, mhla_last_message());
    shard_of(blocks, frame, uneven, rank, &off, &cnt);
    CHECK(mhla_plan_create_shard(ctx, cfg, off, cnt, &plan) == MHLA_OK, "%s: shard plan: %s", name,
          mhla_last_message());
    CHECK(mhla_plan_create(ctx, cfg, &whole) == MHLA_OK, "%s: plan: %s", name, mhla_last_message());
    if (failures != before) {
        join_without_plan(in.mix, exchange);
        goto cleanup;
    }
    mhla_plan_shard_info(plan, &info);
    const int64_t n_all = info.global.seq_t * info.global.seq_h * info.global.seq_w;
    if (!case_alloc(name, plan, &info, &in, &d))
        goto cleanup;
    CHECK(mhla_reference_forward(cfg, in.q, in.k, in.v, in.mix, d.ref) == MHLA_OK, "%s: reference", name);
    CHECK(mhla_forward_host(whole, in.q, in.k, in.v, in.mix, d.single) == MHLA_OK, "%s: single device: %s", name,
          mhla_last_message());
    mhla_status st = mhla_forward_sharded_host(plan, MPI_COMM_WORLD, d.sq, d.sk, d.sv, in.mix, d.mine, exchange,
                                               &stats);
    CHECK(st == MHLA_OK, "%s: mhla_forward_sharded_host: %s: %s", name, mhla_status_name(st), mhla_last_message());

    judge(name, cfg, &info, n_all, d.ref, d.single, in.nv, d.mine, d.nv_mine, &stats, blocks);
cleanup:
    mhla_plan_destroy(plan);
    mhla_plan_destroy(whole);
    test_inputs_free(&in);
    case_free(&d);
}

/* Chunk boundaries of the varlen cases' shards, per number of ranks (shard r is chunks
 * [b[r], b[r + 1])); NULL: mhla_mpi_shard_blocks' even split. */
typedef struct varlen_shards {
    const int64_t *by_size[4];
} varlen_shards;

/* Tokens of a packed batch's chunks [0, g), counted here from cu_seqlens on their own (not the
 * library's shard info), so that a wrong token range cannot pass unseen. */
static int64_t tokens_before(const int32_t *cu, size_t nseq, int64_t chunk, int64_t g)
{
    for (size_t s = 0; s < nseq; ++s) {
        const int64_t len = (int64_t)cu[s + 1] - cu[s], n = (len + chunk - 1) / chunk;
        if (g <= n)
            return g == n ? cu[s + 1] : cu[s] + g * chunk;
        g -= n;
    }
    return cu[nseq];
}

/* A packed varlen batch, sharded by chunks of the packed list, on every rank: against the varlen
 * reference and mhla_forward_varlen_host() of the whole batch on one device. */
static void run_varlen_case(mhla_context *ctx, const char *name, const mhla_config *cfg, const int32_t *cu,
                            size_t nseq, const varlen_shards *shards, mhla_mpi_exchange exchange)
{
    test_inputs in;
    case_data d;
    mhla_plan *plan = NULL, *whole = NULL;
    int64_t blocks = 0, off = 0, cnt = 0;
    mhla_shard_info info;
    mhla_mpi_stats stats;
    const int before = failures;
    const char *only = getenv("TEST_MPI_ONLY");
    memset(&d, 0, sizeof d);
    if (only && *only && !strstr(name, only))
        return;

    CHECK(test_inputs_make(cfg, TEST_INIT_RANDOM, 11, &in) == MHLA_OK, "%s: inputs", name);
    CHECK(mhla_mpi_varlen_chunks(cfg, cu, nseq, &blocks) == MHLA_OK, "%s: %s", name, mhla_last_message());
    const int64_t *b = size < 4 && shards ? shards->by_size[size] : NULL;
    if (b)
        off = b[rank], cnt = b[rank + 1] - b[rank];
    else
        mhla_mpi_shard_blocks(blocks, 1, size, rank, &off, &cnt);
    CHECK(mhla_plan_create_shard_varlen(ctx, cfg, cu, nseq, off, cnt, &plan) == MHLA_OK, "%s: shard plan: %s", name,
          mhla_last_message());
    CHECK(mhla_plan_create(ctx, cfg, &whole) == MHLA_OK, "%s: plan: %s", name, mhla_last_message());
    if (failures != before) {
        join_without_plan(in.mix, exchange);
        goto cleanup;
    }
    mhla_plan_shard_info(plan, &info);
    const int64_t t0 = tokens_before(cu, nseq, cfg->chunk, off);
    CHECK(info.blocks == blocks && info.token_offset == t0 &&
              info.tokens == tokens_before(cu, nseq, cfg->chunk, off + cnt) - t0,
          "%s: shard info: %lld chunks, tokens [%lld, +%lld); expected %lld chunks from token %lld", name,
          (long long)info.blocks, (long long)info.token_offset, (long long)info.tokens, (long long)blocks,
          (long long)t0);
    if (!case_alloc(name, plan, &info, &in, &d))
        goto cleanup;
    CHECK(d.nv_mine == (size_t)(info.tokens * cfg->heads * cfg->dv), "%s: %zu output floats for %lld tokens", name,
          d.nv_mine, (long long)info.tokens);
    CHECK(mhla_reference_forward_varlen(cfg, in.q, in.k, in.v, in.mix, cu, nseq, d.ref) == MHLA_OK, "%s: reference",
          name);
    CHECK(mhla_forward_varlen_host(whole, in.q, in.k, in.v, in.mix, cu, nseq, d.single) == MHLA_OK,
          "%s: single device: %s", name, mhla_last_message());
    mhla_status st = mhla_forward_sharded_varlen_host(plan, MPI_COMM_WORLD, d.sq, d.sk, d.sv, in.mix, cu, nseq,
                                                      d.mine, exchange, &stats);
    CHECK(st == MHLA_OK, "%s: mhla_forward_sharded_varlen_host: %s: %s", name, mhla_status_name(st),
          mhla_last_message());
    judge(name, cfg, &info, cfg->seq_t, d.ref, d.single, in.nv, d.mine, d.nv_mine, &stats, blocks);
cleanup:
    mhla_plan_destroy(plan);
    mhla_plan_destroy(whole);
    test_inputs_free(&in);
    case_free(&d);
}

/* Packed batches: C = 16; sequences of 40 (chunks 16, 16, 8), 0, 37 (16, 16, 5), 3 and 43 tokens:
 * 10 chunks. Shards begin inside sequences (chunks 1, 2, 4, 5 are a sequence's chunk 1, 2, 1, 2),
 * between them (3, 7), and ranks hold no chunks (the last at R = 2 and 3, a middle one at R = 3).
 * Then a long batch, split inside its long sequences, whose later chunks sum earlier chunks past
 * the prefix's first tile of them (the GPU row's tiled prefix, 32 chunks a tile: mpi_np2_gpu_row). */
static void run_varlen_cases(mhla_context *ctx)
{
    static const int32_t cu[] = {0, 40, 40, 77, 80, 123};
    static const int64_t two_a[] = {0, 2, 10}, three_a[] = {0, 1, 1, 10};
    static const int64_t two_b[] = {0, 10, 10}, three_b[] = {0, 3, 10, 10};
    const varlen_shards uneven_a = {{NULL, NULL, two_a, three_a}}, uneven_b = {{NULL, NULL, two_b, three_b}};
    mhla_config c = config_causal(1, 2, 123, 16, 16, 8);
    c.varlen = 1;
    run_varlen_case(ctx, "varlen none even", &c, cu, 5, NULL, MHLA_MPI_ALLGATHER);
    run_varlen_case(ctx, "varlen none uneven+empty", &c, cu, 5, &uneven_a, MHLA_MPI_ALLGATHER);
    c.normalizer = MHLA_NORMALIZER_PAPER;
    run_varlen_case(ctx, "varlen paper chain+empty", &c, cu, 5, &uneven_b, MHLA_MPI_CHAIN);
    run_varlen_case(ctx, "varlen paper even chain", &c, cu, 5, NULL, MHLA_MPI_CHAIN);
    c.layout = MHLA_LAYOUT_BHND;
    run_varlen_case(ctx, "varlen paper bhnd uneven", &c, cu, 5, &uneven_a, MHLA_MPI_ALLGATHER);
    /* 1100 tokens: 700 (88 chunks of 8 with a partial last), 0, 3 and 397 (50 chunks). */
    static const int32_t cu_long[] = {0, 700, 700, 703, 1100};
    mhla_config cl = config_causal(1, 2, 1100, 8, 16, 8);
    cl.varlen = 1;
    run_varlen_case(ctx, "varlen long even", &cl, cu_long, 4, NULL, MHLA_MPI_ALLGATHER);
}

/* A varlen shard's faults: ranks whose cu_seqlens differ (rank 1 moves one boundary) fail on every
 * rank with MHLA_ERR_CONFIG_MISMATCH naming cu_seqlens, before any data moves; cu_seqlens that
 * differ from the plan's, and a varlen plan given to mhla_forward_sharded(), are argument errors. */
static void run_varlen_faults(mhla_context *ctx)
{
    int32_t cu[] = {0, 40, 40, 77, 80, 123};
    mhla_config c = config_causal(1, 2, 123, 16, 16, 8);
    c.varlen = 1;
    mhla_plan *plan = NULL;
    int64_t off = 0, cnt = 0;
    if (rank == 1 && size > 1)
        cu[3] = 78; /* the same chunk count: only the offsets tell */
    mhla_mpi_shard_blocks(10, 1, size, rank, &off, &cnt);
    CHECK(mhla_plan_create_shard_varlen(ctx, &c, cu, 5, off, cnt, &plan) == MHLA_OK, "varlen faults: %s",
          mhla_last_message());
    mhla_status st = mhla_forward_sharded_varlen(plan, MPI_COMM_WORLD, NULL, NULL, NULL, NULL, cu, 5, NULL,
                                                 MHLA_MPI_ALLGATHER, NULL);
    if (size > 1) {
        CHECK(st == MHLA_ERR_CONFIG_MISMATCH && strstr(mhla_last_message(), "cu_seqlens") &&
                  strstr(mhla_last_message(), "rank 1"),
              "cu_seqlens mismatch gave %s: %s", mhla_status_name(st), mhla_last_message());
        if (rank == 0)
            printf("varlen mismatch (rank 1 cu)  -> %s: %s\n", mhla_status_name(st), mhla_last_message());
    }
    /* Another cu_seqlens than the plan's on rank 0: its own argument error, named on the others. */
    int32_t other[] = {0, 40, 40, 77, 80, 123};
    if (rank == 0)
        other[2] = 41;
    st = mhla_forward_sharded_varlen(plan, MPI_COMM_WORLD, NULL, NULL, NULL, NULL, rank == 0 ? other : cu, 5, NULL,
                                     MHLA_MPI_ALLGATHER, NULL);
    CHECK(rank == 0 ? st == MHLA_ERR_INVALID_ARGUMENT && strstr(mhla_last_message(), "cu_seqlens[2] = 41")
                    : st == MHLA_ERR_CONFIG_MISMATCH,
          "cu_seqlens unlike the plan's gave %s: %s", mhla_status_name(st), mhla_last_message());
    if (rank == 0)
        printf("varlen cu unlike the plan's  -> %s: %s\n", mhla_status_name(st), mhla_last_message());
    st = mhla_forward_sharded(plan, MPI_COMM_WORLD, NULL, NULL, NULL, NULL, NULL, MHLA_MPI_ALLGATHER, NULL);
    CHECK(st == MHLA_ERR_INVALID_ARGUMENT || (rank != 0 && st == MHLA_ERR_CONFIG_MISMATCH),
          "varlen plan in mhla_forward_sharded gave %s: %s", mhla_status_name(st), mhla_last_message());
    if (rank == 0)
        printf("varlen plan, non-varlen call -> %s: %s\n", mhla_status_name(st), mhla_last_message());
    mhla_plan_destroy(plan);
    plan = NULL;
    /* Chunks past the packed list's 10. */
    st = mhla_plan_create_shard_varlen(ctx, &c, cu, 5, 9, 2, &plan);
    CHECK(st == MHLA_ERR_INVALID_ARGUMENT && !plan && strstr(mhla_last_message(), "10 chunks"),
          "a shard past the chunks gave %s: %s", mhla_status_name(st), mhla_last_message());
    /* A non-varlen creator refuses the varlen configuration. */
    st = mhla_plan_create_shard(ctx, &c, 0, 1, &plan);
    CHECK(st == MHLA_ERR_INVALID_ARGUMENT && !plan && strstr(mhla_last_message(), "mhla_plan_create_shard_varlen"),
          "mhla_plan_create_shard on varlen gave %s: %s", mhla_status_name(st), mhla_last_message());
    mhla_plan_destroy(plan);
}

/* Ranks that disagree (rank 1 has another dk), or whose shards are out of order, fail on every
 * rank with MHLA_ERR_CONFIG_MISMATCH naming the field or the ranks, before any data moves. */
static void run_faults(mhla_context *ctx)
{
    mhla_config cfg = config_1d(1, 2, 64, 4, 8, 8);
    mhla_plan *plan = NULL;
    int64_t off = 0, cnt = 0;
    if (size < 2)
        return;
    if (rank == 1)
        cfg.dk = 16;
    mhla_mpi_shard_blocks(4, 1, size, rank, &off, &cnt);
    CHECK(mhla_plan_create_shard(ctx, &cfg, off, cnt, &plan) == MHLA_OK, "faults: %s", mhla_last_message());
    mhla_status st = mhla_forward_sharded(plan, MPI_COMM_WORLD, NULL, NULL, NULL, NULL, NULL, MHLA_MPI_ALLGATHER, NULL);
    CHECK(st == MHLA_ERR_CONFIG_MISMATCH && strstr(mhla_last_message(), "dk") && strstr(mhla_last_message(), "rank 1"),
          "dk mismatch gave %s: %s", mhla_status_name(st), mhla_last_message());
    if (rank == 0)
        printf("mismatch (rank 1 dk=16)      -> %s: %s\n", mhla_status_name(st), mhla_last_message());
    mhla_plan_destroy(plan);
    plan = NULL;
    /* Every rank claims the first blocks. */
    cfg.dk = 8;
    CHECK(mhla_plan_create_shard(ctx, &cfg, 0, 1, &plan) == MHLA_OK, "faults: %s", mhla_last_message());
    st = mhla_forward_sharded(plan, MPI_COMM_WORLD, NULL, NULL, NULL, NULL, NULL, MHLA_MPI_ALLGATHER, NULL);
    CHECK(st == MHLA_ERR_CONFIG_MISMATCH && strstr(mhla_last_message(), "rank 1"), "overlap gave %s: %s",
          mhla_status_name(st), mhla_last_message());
    if (rank == 0)
        printf("overlapping shards           -> %s: %s\n", mhla_status_name(st), mhla_last_message());
    /* A NULL plan on one rank is that rank's argument error, a named failure on the others. */
    st = mhla_forward_sharded(rank == 1 ? NULL : plan, MPI_COMM_WORLD, NULL, NULL, NULL, NULL, NULL,
                              MHLA_MPI_ALLGATHER, NULL);
    CHECK(rank == 1 ? st == MHLA_ERR_INVALID_ARGUMENT : st == MHLA_ERR_CONFIG_MISMATCH, "NULL plan gave %s: %s",
          mhla_status_name(st), mhla_last_message());
    if (rank == 0)
        printf("NULL plan on rank 1          -> %s: %s\n", mhla_status_name(st), mhla_last_message());
    mhla_plan_destroy(plan);
}

int main(int argc, char **argv)
{
    char spec[256] = "";
    mhla_context *ctx = NULL;
    MPI_Init(&argc, &argv);
    poison_outputs(); /* and the library's own buffers NaN, as test_context() has them (tests/helpers.h) */
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int have = mhla_mpi_device_spec(MPI_COMM_WORLD, spec, sizeof spec) == MHLA_OK &&
               mhla_context_create(spec, &ctx) == MHLA_OK;
    int all_have = 0;
    MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_have) {
        if (rank == 0)
            printf("SKIP: a rank has no OpenCL device (%s)\n", mhla_last_message());
        mhla_context_destroy(ctx);
        MPI_Finalize();
        return 77;
    }
    printf("rank %d of %d: device %s (%s)\n", rank, size, spec, mhla_context_device_name(ctx));
    fflush(stdout);
    /* Shard plans take the untiled stages (their mixing reads the gathered summaries): the
     * single-device runs they are held to within rounding take the same kernels (a GPU row's tiled
     * forward sums its tokens in another order: 2.2e-6 apart at split blocks). */
    if (mhla_context_set_tuning(ctx, "tiled=0") != MHLA_OK) {
        printf("FAIL: mhla_context_set_tuning(tiled=0): %s\n", mhla_context_message(ctx));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* 1D, 6 blocks; a 2x2-block video (frames of 4 blocks, 3 frames); the official normalizer. */
    mhla_config c1 = config_1d(2, 2, 96, 6, 16, 8);
    run_case(ctx, "1d paper even", &c1, 0, MHLA_MPI_ALLGATHER);
    run_case(ctx, "1d paper uneven+empty", &c1, 1, MHLA_MPI_ALLGATHER);
    /* Two long blocks, which the summary splits into segments (the whole sequence's split). */
    mhla_config cs = config_1d(1, 2, 4096, 2, 32, 32);
    run_case(ctx, "1d split blocks", &cs, 0, MHLA_MPI_ALLGATHER);
    mhla_config cv = c1;
    cv.batch = 1, cv.seq_t = 6, cv.seq_h = 4, cv.seq_w = 4, cv.block_t = 3, cv.block_h = 2, cv.block_w = 2;
    cv.layout = MHLA_LAYOUT_BHND;
    run_case(ctx, "video bhnd uneven+empty", &cv, 1, MHLA_MPI_ALLGATHER);
    mhla_config co = c1;
    co.normalizer = MHLA_NORMALIZER_OFFICIAL;
    run_case(ctx, "1d official uneven+empty", &co, 1, MHLA_MPI_ALLGATHER);
    /* Causal: 7 chunks of 16 with a partial last one (100 tokens), both exchanges. */
    mhla_config cc;
    mhla_config_init_causal(&cc);
    cc.batch = 2, cc.heads = 2, cc.seq_t = 100, cc.dk = 16, cc.dv = 8, cc.chunk = 16;
    run_case(ctx, "causal none allgather", &cc, 0, MHLA_MPI_ALLGATHER);
    run_case(ctx, "causal none chain+empty", &cc, 1, MHLA_MPI_CHAIN);
    cc.normalizer = MHLA_NORMALIZER_PAPER;
    run_case(ctx, "causal paper allgather+empty", &cc, 1, MHLA_MPI_ALLGATHER);
    run_varlen_cases(ctx);
    run_faults(ctx);
    run_varlen_faults(ctx);

    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %d failed check(s) over %d rank(s)\n", total ? "FAIL" : "OK", total, size);
    mhla_context_destroy(ctx);
    MPI_Finalize();
    return total ? 1 : 0;
}
