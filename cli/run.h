/* `mhla run`'s job and the files that work on it, lowest first: run_causal.c (the rules of the
 * causal options, --cu-seqlens), run_common.c (options, inputs, grids, mixing, context, output:
 * what run, grad and diagnose share), then run_recurrent.c (the decoder) and run_mpi.c (--mpi),
 * which cmd_run.c (the forward pass on the device, --check) calls. */
#ifndef MHLA_CLI_RUN_H
#define MHLA_CLI_RUN_H

#include "args.h"
#include "npy.h"

#include <mhla.h>

#include <stdint.h>

enum {
    O_Q, O_K, O_V, O_OUT, O_LAYOUT, O_GRID, O_BLOCKS, O_KV_GRID, O_KV_BLOCKS, O_MIXING, O_INIT, O_FEATURE_MAP, O_FEATURE_EPS, O_SCALE,
    O_NORMALIZER, O_EPS, O_CAUSAL, O_CHUNK, O_RECURRENT, O_CU_SEQLENS, O_DTYPE, O_DEVICE, O_CHECK, O_REPEAT, O_MPI,
    /* `mhla grad` only (cmd_grad.c); run's table leaves them unnamed, so that run refuses them. */
    O_DOUT, O_DQ, O_DK, O_DV, O_DMIXING,
    /* `mhla diagnose` only (cmd_diagnose.c), unnamed in run's and grad's tables. */
    O_ROWS, O_NO_SAMPLE, O_SEED, O_RTOL, O_JSON, O_SVG, O_COUNT
};

#define RUN_CMD "run" /* the subcommand, for cli_usage() */

/* Everything one run holds; released by run_job_free(). */
typedef struct run_job {
    const char *command;  /* "run", "grad" or "diagnose": what usage messages point at (set by run_parse()) */
    cli_option o[O_COUNT];
    mhla_config cfg;
    npy_array in[3];      /* q, k, v as read; float16 data is widened into `f32` */
    float *f32[3];        /* q, k, v as float: in[i].data, or the widened copy; rounded to cfg.dtype */
    uint16_t *dev16[3];   /* q, k, v in cfg.dtype's bits when it is f16 or bf16 */
    npy_dtype file_dtype; /* of the inputs, hence of the output */
    int64_t out_shape[4]; /* the output's (and dO's): Q's shape with V's head dimension */
    size_t out_count;
    float *mixing;
    int64_t mixing_rows, mixing_cols; /* Mc is rows x cols: M x M_kv (square but for cross-attention) */
    int32_t *cu_seqlens;  /* --cu-seqlens: num_seqs + 1 offsets, validated; else NULL */
    size_t num_seqs;
    int64_t longest;      /* causal: the longest sequence (N, or the longest packed one) */
    int64_t repeat;       /* 0: one run, untimed */
    npy_writer out;
    mhla_context *ctx;
    mhla_plan *plan;
    mhla_decoder *dec;
    cl_mem buf[5]; /* indexed by mhla_tensor */
    float *result;
    double check_err; /* --check: max_rel_err of result against the reference */
    int headers_only; /* --mpi: run_read_inputs() reads the headers; run_mpi.c reads each rank's range */
} run_job;

/* ---- run_common.c, for cmd_run.c, cmd_grad.c, cmd_diagnose.c, run_recurrent.c and run_mpi.c ---- */

/* Everything `run` does before the device: the options (help: the command's help text, printed
 * for --help; the required options follow `command`: RUN_CMD, "grad" or "diagnose"), the inputs,
 * --grid/--blocks, the causal rules, the mixing matrix and the configuration's check; messages
 * name `command`. Returns 0 or the exit code. */
int run_prepare(run_job *job, const char *command, const char *help, int argc, char **argv, int *help_shown);
/* run_prepare()'s first step alone: the options (run checks --mpi before reading any input). */
int run_parse(run_job *job, const char *command, const char *help, int argc, char **argv, int *help_shown);
/* Reads --q/--k/--v (headers only with job->headers_only), validates them, fills the config. */
int run_read_inputs(run_job *job);
/* --grid/--blocks, the causal shape, the mixing matrix and the library's config check. */
int run_shape(run_job *job);
/* job->in[] as read (a rank's range) to float (job->f32) and cfg.dtype's bits (job->dev16). */
int run_convert_inputs(run_job *job);
/* Writes job->result (shaped as job->in[2]) through the temporary job->out. */
int run_write_output(run_job *job);
/* The options `run` and `grad` share (the inputs and the model), the others unnamed. */
void run_model_options(cli_option o[O_COUNT]);
/* Releases what a job holds (an open output is aborted). */
void run_job_free(run_job *job);

/* Creates job->ctx on --device (or the default device). Returns 0 or the exit code. */
int run_open_context(run_job *job);

/* A failed library call on the job's context: its message after `what`; the status's exit code. */
int run_device_fail(const run_job *job, mhla_status st, const char *what);

/* Sorts R run times (ms) and prints "time_ms median <m> min <a> max <b>". */
void run_print_times(double *ms, size_t count);

/* ---- run_causal.c, for run_common.c ---- */

/* The causal options' rules once the configuration holds the parsed options (the normalizer).
 * Returns 0 or CLI_USAGE. */
int causal_check_options(run_job *job);

/* After the inputs and --grid: a causal token grid must be 1D; reads and validates --cu-seqlens
 * against the packed inputs (batch 1, offsets 0 .. N, non-decreasing) and sets cfg.varlen; sets
 * job->longest. Returns 0 or the exit code. */
int causal_shape(run_job *job);

/* --mixing in causal mode: rows must cover the longest sequence; the error names both numbers. */
int causal_mixing_covers(const run_job *job, int64_t rows);

/* ---- run_recurrent.c, for cmd_run.c ---- */

/* --recurrent: the decoder, token by token (per packed sequence, reset in between), into
 * job->result; --repeat times each run's whole token loop. Returns 0 or the exit code. */
int causal_run_recurrent(run_job *job);

/* ---- run_mpi.c (builds with MPI only), for cmd_run.c ---- */

/* `mhla run --mpi`: each rank reads its token range, runs its shard, rank 0 writes the output. */
int run_mpi(run_job *job);

#endif /* MHLA_CLI_RUN_H */
