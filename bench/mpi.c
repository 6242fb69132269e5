/* mhla-bench --mpi (under mpirun -np R): the sharded forward of libmhla_mpi on 1, 2, ..., R ranks
 * (sub-communicators of the first r ranks), at a fixed N (strong scaling) and at a fixed N per
 * rank (weak scaling). Per rank and run: the device compute time, the communication time and the
 * bytes exchanged; per r: the slowest rank's median total time and the scaling efficiency
 * (strong: T1 / (r * Tr), weak: T1 / Tr). Rank 0 prints. The bytes measured here feed
 * bench/README.md's model of 8 to 1024 devices. */
#include "bench_mpi.h"

#include <mhla_mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct mpi_opts {
    int64_t n, heads, batch, dk, dv, m, chunk, repeat;
    int causal;
    mhla_mpi_exchange exchange;
} mpi_opts;

static const char usage[] =
    "usage: mpirun -np R mhla-bench --mpi [--n N] [--batch B] [--heads H] [--dk D] [--dv D]\n"
    "                                 [--blocks M | --causal [--chunk C] [--exchange allgather|chain]]\n"
    "                                 [--repeat K]\n"
    "Runs the sharded forward on the first r = 1..R ranks: strong scaling at N tokens, weak scaling\n"
    "at N tokens per rank (M and the chunk count grow with r). Defaults: N 4096, B 1, H 4, Dk Dv 64,\n"
    "M 64 blocks per 4096 tokens (non-causal), chunk " MHLA_STRINGIFY(MHLA_DEFAULT_CHUNK) " (the library's),\n"
    "K 5 timed runs after one warm-up.\n";

static int parse(int argc, char **argv, mpi_opts *o)
{
    *o = (mpi_opts){4096, 4, 1, 64, 64, 0, MHLA_DEFAULT_CHUNK, 5, 0, MHLA_MPI_ALLGATHER};
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *dst = !strcmp(a, "--n") ? &o->n : !strcmp(a, "--heads") ? &o->heads : !strcmp(a, "--batch") ? &o->batch
                     : !strcmp(a, "--dk") ? &o->dk : !strcmp(a, "--dv") ? &o->dv : !strcmp(a, "--blocks") ? &o->m
                     : !strcmp(a, "--chunk") ? &o->chunk : !strcmp(a, "--repeat") ? &o->repeat : NULL;
        if (!strcmp(a, "--mpi"))
            continue;
        if (!strcmp(a, "--causal")) {
            o->causal = 1;
            continue;
        }
        if (!strcmp(a, "--exchange") && v) {
            if (strcmp(v, "allgather") && strcmp(v, "chain")) {
                fprintf(stderr, "mhla-bench: --exchange %s: expected allgather or chain\n", v);
                return 2;
            }
            o->exchange = !strcmp(v, "chain") ? MHLA_MPI_CHAIN : MHLA_MPI_ALLGATHER;
            ++i;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 1;
        }
        char *end = NULL;
        if (!dst || !v || (*dst = strtoll(v, &end, 10), *end != '\0') || *dst < 1) {
            fprintf(stderr, "mhla-bench --mpi: bad or unknown option %s%s%s\n%s", a, v ? " " : "", v ? v : "", usage);
            return 2;
        }
        ++i;
    }
    return 0;
}

/* The configuration of n tokens: M blocks in proportion to n (64 per 4096 tokens unless --blocks). */
static mhla_config config_of(const mpi_opts *o, int64_t n, int64_t m)
{
    mhla_config c;
    if (o->causal)
        mhla_config_init_causal(&c);
    else
        mhla_config_init(&c);
    c.batch = o->batch, c.heads = o->heads, c.seq_t = n, c.dk = o->dk, c.dv = o->dv;
    if (o->causal)
        c.chunk = o->chunk;
    else
        c.block_t = m;
    return c;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One configuration on `comm` (the first r ranks): median over the runs of each rank's times, the
 * slowest rank's total reported. Returns 0, or 1 after printing the failure. */
static int measure(mhla_context *ctx, MPI_Comm comm, const mpi_opts *o, const mhla_config *cfg, double *total,
                   mhla_mpi_stats *med)
{
    int rank = 0, size = 1, rc = 0;
    int64_t blocks = 0, frame = 1, off = 0, cnt = 0;
    mhla_plan *plan = NULL;
    mhla_shard_info info;
    float *buf[4] = {NULL, NULL, NULL, NULL};
    double *t = calloc((size_t)o->repeat * 4, sizeof *t);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    mhla_status st = mhla_mpi_blocks_of(cfg, &blocks, &frame);
    if (st == MHLA_OK)
        st = mhla_mpi_shard_blocks(blocks, frame, size, rank, &off, &cnt);
    if (st == MHLA_OK)
        st = mhla_plan_create_shard(ctx, cfg, off, cnt, &plan);
    if (st == MHLA_OK)
        st = mhla_plan_shard_info(plan, &info);
    for (int i = 0; i < 4 && st == MHLA_OK; ++i) {
        const mhla_tensor ts[4] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_MIXING};
        const size_t n = mhla_plan_tensor_bytes(plan, ts[i]) / sizeof(float);
        buf[i] = malloc((n + 1) * sizeof(float));
        if (!buf[i] || !t)
            st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        for (size_t j = 0; buf[i] && j < n; ++j) /* anything finite: the time does not depend on it */
            buf[i][j] = (float)((j * 2654435761u + (size_t)rank * 97u + (size_t)i) % 1000u) * 1e-3f;
    }
    float *out = st == MHLA_OK ? malloc(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_OUT) + 4) : NULL;
    for (int64_t r = -1; r < o->repeat && st == MHLA_OK; ++r) { /* run -1: the warm-up */
        mhla_mpi_stats s;
        MPI_Barrier(comm);
        st = out ? mhla_forward_sharded_host(plan, comm, buf[0], buf[1], buf[2], buf[3], out, o->exchange, &s)
                 : MHLA_ERR_OUT_OF_HOST_MEMORY;
        if (r >= 0 && st == MHLA_OK) {
            t[r] = s.total_ms, t[o->repeat + r] = s.compute_ms, t[2 * o->repeat + r] = s.comm_ms;
            *med = s;
        }
    }
    if (st != MHLA_OK) {
        fprintf(stderr, "mhla-bench --mpi: rank %d: %s: %s\n", rank, mhla_status_name(st), mhla_last_message());
        rc = 1;
    } else {
        for (int k = 0; k < 3; ++k)
            qsort(t + k * o->repeat, (size_t)o->repeat, sizeof *t, cmp_double);
        med->total_ms = t[o->repeat / 2];
        med->compute_ms = t[o->repeat + o->repeat / 2];
        med->comm_ms = t[2 * o->repeat + o->repeat / 2];
        MPI_Allreduce(&med->total_ms, total, 1, MPI_DOUBLE, MPI_MAX, comm);
    }
    int all = rc;
    MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, comm);
    mhla_plan_destroy(plan);
    for (int i = 0; i < 4; ++i)
        free(buf[i]);
    free(out);
    free(t);
    return all;
}

/* Rank 0 prints one line per rank of the sub-communicator, then the summary. */
static void report(MPI_Comm comm, const char *kind, int64_t n, double total, double t1, int r,
                   const mhla_mpi_stats *s)
{
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    double mine[7] = {(double)s->block_offset, (double)s->block_count, s->compute_ms, s->comm_ms, s->total_ms,
                      (double)s->bytes_sent, (double)s->bytes_received};
    double *all = rank == 0 ? malloc((size_t)size * sizeof mine) : NULL;
    MPI_Gather(mine, 7, MPI_DOUBLE, all, 7, MPI_DOUBLE, 0, comm);
    if (rank == 0 && all) {
        const double eff = !strcmp(kind, "strong") ? t1 / (r * total) : t1 / total;
        printf("%-6s R=%d N=%lld: slowest rank %.3f ms (median), efficiency %.2f\n", kind, r, (long long)n, total,
               eff);
        for (int i = 0; i < size; ++i) {
            const double *a = all + 7 * i;
            printf("  rank %d: blocks [%.0f,+%.0f) compute %.3f ms, comm %.3f ms, total %.3f ms, sent %.0f B, "
                   "received %.0f B\n",
                   i, a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
        }
        fflush(stdout);
    }
    free(all);
}

int bench_mpi_main(int argc, char **argv)
{
    mpi_opts o;
    int rank = 0, size = 1, rc = parse(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char spec[256];
    mhla_context *ctx = NULL;
    mhla_status st = mhla_mpi_device_spec(MPI_COMM_WORLD, spec, sizeof spec);
    if (st == MHLA_OK)
        st = mhla_context_create(spec, &ctx);
    int ok = st == MHLA_OK, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (!ok)
            fprintf(stderr, "mhla-bench --mpi: rank %d: %s\n", rank, mhla_last_message());
        mhla_context_destroy(ctx);
        MPI_Finalize();
        return 1;
    }
    if (rank == 0)
        printf("mhla-bench --mpi: %d rank(s), %s, B=%lld H=%lld Dk=%lld Dv=%lld, %s, %lld timed runs (median)\n",
               size, o.causal ? "causal" : "non-causal", (long long)o.batch, (long long)o.heads, (long long)o.dk,
               (long long)o.dv,
               o.causal ? (o.exchange == MHLA_MPI_CHAIN ? "chain exchange" : "all-gather exchange") : "all-gather",
               (long long)o.repeat);
    printf("rank %d: device %s (%s)\n", rank, spec, mhla_context_device_name(ctx));
    fflush(stdout);
    const int64_t m_per = o.m ? o.m : (o.n >= 64 ? o.n / 64 : 1); /* blocks at N tokens */
    for (int weak = 0; weak < 2 && rc == 0; ++weak) {
        double t1 = 0;
        for (int r = 1; r <= size && rc == 0; ++r) {
            MPI_Comm sub = MPI_COMM_NULL;
            MPI_Comm_split(MPI_COMM_WORLD, rank < r ? 0 : MPI_UNDEFINED, rank, &sub);
            int sub_rc = 0;
            if (sub != MPI_COMM_NULL) {
                const int64_t n = weak ? o.n * r : o.n, m = weak ? m_per * r : m_per;
                const mhla_config cfg = config_of(&o, n, m);
                double total = 0;
                mhla_mpi_stats s;
                memset(&s, 0, sizeof s);
                sub_rc = measure(ctx, sub, &o, &cfg, &total, &s);
                if (sub_rc == 0) {
                    if (r == 1)
                        t1 = total;
                    report(sub, weak ? "weak" : "strong", n, total, t1, r, &s);
                }
                MPI_Comm_free(&sub);
            }
            MPI_Allreduce(&sub_rc, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        }
    }
    mhla_context_destroy(ctx);
    MPI_Finalize();
    return rc;
}
