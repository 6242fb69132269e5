/* Internal to libmhla_mpi: MPI failures as statuses, the configuration check, the exchanges. */
#ifndef MHLA_MPI_INTERNAL_H
#define MHLA_MPI_INTERNAL_H

#include "mhla_mpi.h"

/* A failed MPI call: MHLA_ERR_MPI on ctx with `what` and MPI's error string. */
mhla_status mhla_mpi__fail(mhla_context *ctx, int err, const char *what);

#define MHLA_MPI_TRY(st, ctx, expr, what)                                                           \
    do {                                                                                            \
        int mhla_mpi_err_ = (expr);                                                                 \
        if (mhla_mpi_err_ != MPI_SUCCESS) {                                                         \
            (st) = mhla_mpi__fail((ctx), mhla_mpi_err_, (what));                                    \
            goto cleanup;                                                                           \
        }                                                                                           \
    } while (0)

/* Propagates a status already recorded by a callee. */
#define MHLA_MPI_FORWARD(st, expr)                                                                  \
    do {                                                                                            \
        (st) = (expr);                                                                              \
        if ((st) != MHLA_OK)                                                                        \
            goto cleanup;                                                                           \
    } while (0)

/* Every rank's configuration and shard, compared on every rank before any data moves.
 * local_status: this rank's own argument checks (a rank that failed them still takes part).
 * Returns MHLA_OK, MHLA_ERR_CONFIG_MISMATCH naming the field, ranks and values, or MHLA_ERR_MPI.
 * offsets/counts (size entries, may be NULL) receive every rank's shard. */
mhla_status mhla_mpi__check(mhla_context *ctx, MPI_Comm comm, const mhla_shard_info *info, mhla_status local_status,
                            int64_t *offsets, int64_t *counts, uint64_t *bytes);

/* The exchange of rows ([blocks][row_floats] floats, this rank's already at its offset). */
mhla_status mhla_mpi__allgather(mhla_context *ctx, MPI_Comm comm, float *rows, size_t row_floats,
                                const int64_t *offsets, const int64_t *counts, int rank, int size,
                                mhla_mpi_stats *stats);
mhla_status mhla_mpi__chain(mhla_context *ctx, MPI_Comm comm, float *rows, size_t row_floats, const int64_t *offsets,
                            const int64_t *counts, int rank, int size, mhla_mpi_stats *stats);

/* Wall clock in milliseconds (MPI_Wtime). */
static inline double mhla_mpi__ms(void) { return MPI_Wtime() * 1e3; }

#endif
