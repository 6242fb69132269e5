/* libmhla_mpi: sequence-parallel MHLA over MPI (docs/spec.md "Shards and MPI": the forward split over
 * ranks by blocks). Each rank holds a contiguous range of whole blocks (its shard of tokens) for every
 * batch element and head, on its own device; the ranks all-gather the block summaries (M*Dk*(Dv+1)
 * floats per batch and head, whatever N is) through host memory, then each mixes and reads out its own
 * tokens (packed varlen batches: chunks of the packed sequences, mhla_forward_sharded_varlen). The
 * core library (mhla.h) knows nothing of MPI: this library drives its shard plans
 * (mhla_plan_create_shard, _varlen) and does the exchange. It never calls MPI_Abort and never prints.
 * Thread-safety: mhla_mpi_shard_blocks(), mhla_mpi_blocks_of() and mhla_mpi_varlen_chunks() from any
 * thread; the others are MPI collectives on `comm`, called by one thread per rank at a time (as
 * MPI requires of collectives on one communicator), and per plan as mhla.h's shard calls. */
#ifndef MHLA_MPI_H
#define MHLA_MPI_H

#include <mhla.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a causal run moves the earlier chunks' summaries (a non-causal run always all-gathers). */
typedef enum mhla_mpi_exchange {
    MHLA_MPI_ALLGATHER = 0, /* MPI_Allgatherv of every rank's rows: one collective, every rank gets all */
    MHLA_MPI_CHAIN = 1      /* rank r receives rows [0, offset_r) from r - 1 and passes them on with its
                               own: each rank receives only what it needs, in R - 1 steps one after another */
} mhla_mpi_exchange;

/* What one call did on this rank. Bytes are the payload this rank's algorithm moves (rows of the
 * exchange, plus the configuration check), not counting MPI's own headers. */
typedef struct mhla_mpi_stats {
    double check_ms;          /* the configuration check (one small MPI_Allgather) */
    double compute_ms;        /* the rank's device work, summaries and mixing/output, waited for */
    double comm_ms;           /* the exchange of summary rows */
    double total_ms;
    uint64_t bytes_sent;      /* rows this rank sends (to every rank that needs them) */
    uint64_t bytes_received;  /* rows this rank receives */
    int64_t block_offset, block_count, blocks;
    int gpu_aware;            /* 1 when the MPI library reported CUDA-aware support at run time (informative:
                                 the exchange always stages through host memory) */
} mhla_mpi_stats;

/*! mhla_mpi_shard_blocks() :
 * An even split of `blocks` blocks (non-causal: M, in units of `frame` = block_h*block_w blocks so
 * that shards are whole frames; causal: chunks, frame 1) over `size` ranks: the first ranks get one
 * unit more. Ranks past the number of units get 0 blocks (valid).
 * @return MHLA_OK, or MHLA_ERR_INVALID_ARGUMENT naming the bad value. */
MHLA_API mhla_status mhla_mpi_shard_blocks(int64_t blocks, int64_t frame, int size, int rank, int64_t *offset,
                                           int64_t *count);

/*! mhla_mpi_blocks_of() : blocks of the whole sequence and the frame mhla_mpi_shard_blocks()
 * splits by, for a configuration (causal: ceil(N/C) chunks, frame 1).
 * @return MHLA_OK or the configuration's validation status. */
MHLA_API mhla_status mhla_mpi_blocks_of(const mhla_config *cfg, int64_t *blocks, int64_t *frame);

/*! mhla_mpi_device_spec() :
 * The device spec this rank should open (for mhla_context_create()): MHLA_DEVICE when set and not
 * empty; otherwise the node-local rank (MPI_Comm_split_type SHARED, a collective call) modulo the
 * number of GPUs, or of all devices where there is no GPU, as an index "N". With PoCL,
 * POCL_DEVICES="pthread pthread" gives two CPU devices to share out on one machine.
 * @return MHLA_OK, MHLA_ERR_DEVICE_NOT_FOUND (no device), MHLA_ERR_MPI, MHLA_ERR_INVALID_ARGUMENT. */
MHLA_API mhla_status mhla_mpi_device_spec(MPI_Comm comm, char *spec, size_t size);

/*! mhla_forward_sharded() :
 * The forward pass of the whole sequence, this rank computing the tokens of its shard plan.
 * Collective over `comm`: every rank calls it with its own shard plan (mhla_plan_create_shard on
 * the same configuration), whose shards must lie in rank order, each starting where the previous
 * one ends, and cover all blocks (ranks with 0 blocks pass NULL buffers, or any).
 * q, k, v, out: the shard's tokens as mhla_forward() takes them; mixing: the whole Mc.
 * Before any data moves, every rank checks every other's configuration and shard: a difference is
 * MHLA_ERR_CONFIG_MISMATCH on every rank, naming the field, the ranks and their values. A failed MPI
 * call is MHLA_ERR_MPI with MPI's error string (comm's error handler is MPI_ERRORS_RETURN during the
 * call and restored after). Blocks until `out` is written.
 * @exchange: causal runs only (see mhla_mpi_exchange). @stats: may be NULL.
 * @return MHLA_OK or a status whose message is in mhla_last_message(). Every rank takes part in
 *         every collective whatever fails locally: a failure of this rank's own checks or of its
 *         summaries is agreed on by all ranks (the others return it, naming the rank) before the
 *         exchange, so that none waits forever; a failure of the final mixing/output stage is
 *         that rank's alone. */
MHLA_API mhla_status mhla_forward_sharded(mhla_plan *plan, MPI_Comm comm, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                          cl_mem out, mhla_mpi_exchange exchange, mhla_mpi_stats *stats);

/*! mhla_forward_sharded_host() : the same with host arrays (elements as cfg.dtype; mixing float,
 * M x M or mixing_rows^2), copied to device buffers of the plan's context and back. */
MHLA_API mhla_status mhla_forward_sharded_host(mhla_plan *plan, MPI_Comm comm, const void *q, const void *k,
                                               const void *v, const float *mixing, void *out,
                                               mhla_mpi_exchange exchange, mhla_mpi_stats *stats);

/*! mhla_mpi_varlen_chunks() :
 * The chunks of a packed variable-length batch (cfg.varlen = 1): sum over the sequences of
 * ceil(len / C), the chunk list that mhla_plan_create_shard_varlen() shards and
 * mhla_mpi_shard_blocks(chunks, 1, ...) splits evenly.
 * @return MHLA_OK, or the configuration's or cu_seqlens' validation status. */
MHLA_API mhla_status mhla_mpi_varlen_chunks(const mhla_config *cfg, const int32_t *cu_seqlens, size_t num_seqs,
                                            int64_t *chunks);

/*! mhla_forward_sharded_varlen() :
 * mhla_forward_varlen() of a packed batch, sharded: every rank calls it with its shard plan
 * (mhla_plan_create_shard_varlen() with the same configuration and cu_seqlens, shards contiguous
 * in rank order and covering the chunk list) and the whole cu_seqlens, which must be the plan's.
 * q, k, v, out: the shard's tokens (mhla_plan_shard_info()'s token range of the packed tensors);
 * mixing: the whole Mc (mixing_rows^2). The earlier chunks of the sequences a rank holds come from
 * the other ranks as in a causal mhla_forward_sharded() (either exchange). The configuration check
 * compares num_seqs and the cu_seqlens (by a 64-bit hash) with the other fields: ranks that
 * disagree get MHLA_ERR_CONFIG_MISMATCH naming "cu_seqlens" and the ranks before any data moves.
 * @return as mhla_forward_sharded(); MHLA_ERR_INVALID_ARGUMENT when cu_seqlens differ from the
 *         plan's (naming the index) or the plan is not a varlen shard plan. */
MHLA_API mhla_status mhla_forward_sharded_varlen(mhla_plan *plan, MPI_Comm comm, cl_mem q, cl_mem k, cl_mem v,
                                                 cl_mem mixing, const int32_t *cu_seqlens, size_t num_seqs,
                                                 cl_mem out, mhla_mpi_exchange exchange, mhla_mpi_stats *stats);

/*! mhla_forward_sharded_varlen_host() : the same with host arrays, as mhla_forward_sharded_host(). */
MHLA_API mhla_status mhla_forward_sharded_varlen_host(mhla_plan *plan, MPI_Comm comm, const void *q, const void *k,
                                                      const void *v, const float *mixing,
                                                      const int32_t *cu_seqlens, size_t num_seqs, void *out,
                                                      mhla_mpi_exchange exchange, mhla_mpi_stats *stats);

#ifdef __cplusplus
}
#endif
#endif /* MHLA_MPI_H */
