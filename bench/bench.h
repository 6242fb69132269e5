/* mhla-bench: the types its units share (options, shapes, rows, device, peak, report) and the
 * functions each unit offers. One unit per concern: shape.c, ops.c (decode.c: the decode op;
 * blas.c: the host ops blas and sgemm), options.c, sweep.c, verify.c, rows.c, timing.c, peak.c,
 * device.c, json.c, report_json.c, report_text.c (table and CSV), plot.c, compare.c. */
#ifndef MHLA_BENCH_H
#define MHLA_BENCH_H

#include <mhla.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BENCH_MAX_LIST 32 /* entries of one list option (--n, --image, ...) */

/* ---- ops ------------------------------------------------------------------------------------ */

typedef enum bench_op_id {
    BENCH_OP_MHLA = 0,
    BENCH_OP_LINEAR,
    BENCH_OP_SOFTMAX,
    BENCH_OP_MHLA_CAUSAL,
    BENCH_OP_DECODE,
    BENCH_OP_BLAS,  /* MHLA on the host with OpenBLAS's SGEMM (blas.c) */
    BENCH_OP_SGEMM, /* OpenBLAS's SGEMM rate on the host: the reference of %sgemm (one row) */
    /* The backward pass (mhla_backward: dq, dk, dv and dMc) of mhla, linear and mhla-causal. */
    BENCH_OP_MHLA_BWD,
    BENCH_OP_LINEAR_BWD,
    BENCH_OP_MHLA_CAUSAL_BWD,
    /* mhla-bwd right after the forward of the same buffers, the forward's summaries kept
     * (mhla_plan_save_for_backward), as a training step runs them */
    BENCH_OP_MHLA_BWD_SAVED,
    /* the same for mhla-causal-bwd: the forward's chunk summaries and prefix mixtures kept */
    BENCH_OP_MHLA_CAUSAL_BWD_SAVED,
    /* Grouped key/value heads (H_kv = H / 4, at least 1): mhla, mhla-bwd and decode on them */
    BENCH_OP_MHLA_GQA,
    BENCH_OP_MHLA_GQA_BWD,
    BENCH_OP_DECODE_GQA,
    /* Cross-attention: an image's blocks (the row's) attending to BENCH_CROSS_TOKENS condition
     * tokens in BENCH_CROSS_BLOCKS blocks (image rows only) */
    BENCH_OP_MHLA_CROSS,
    BENCH_OP_COUNT
} bench_op_id;

/* One benchmarked problem: the token grid, the MHLA block grid and the head sizes. */
typedef struct bench_shape {
    int64_t batch, heads;
    int64_t t, h, w;    /* token grid (T, Hs, Ws): 1D is (N, 1, 1), an image (1, Hs, Ws) */
    int64_t bt, bh, bw; /* block grid; M = bt*bh*bw (1x1x1 for linear, unused by softmax) */
    int64_t dk, dv;
    mhla_layout layout;
    int64_t chunk; /* causal ops: the chunk size C (bt then holds ceil(N/C)); 0 for the others */
    int64_t kv_heads;    /* grouped key/value heads: H_kv; 0 = heads */
    int64_t kv_t, kv_bt; /* cross-attention: the keys' 1D sequence and its blocks; 0 = the row's grid */
    mhla_normalizer normalizer; /* the non-causal self-attention rows' (--normalizer; 0 = paper, the default) */
} bench_shape;

#define BENCH_CROSS_TOKENS 256
#define BENCH_CROSS_BLOCKS 4
#define BENCH_GQA_GROUP 4

/* Whether two shapes have the same batch, heads, head dims and layout (one series over N). */
int bench_shape_same_sizes(const bench_shape *a, const bench_shape *b);
/* ... and also the same token grid: the same q, k, v and out tensors (block grids aside). */
int bench_shape_same_tensors(const bench_shape *a, const bench_shape *b);
int64_t bench_shape_n(const bench_shape *s);
/* Blocks, or chunks ceil(N/C) for the causal ops. */
int64_t bench_shape_m(const bench_shape *s);
int bench_shape_is_2d(const bench_shape *s);
/* The M of the paper's rule for a 1D length or an image (see shape.c): fills the block grid of `s`
 * from its token grid. */
void bench_default_blocks(bench_shape *s);
/* A block grid of M blocks for the token grid of `s` (1D: M divides N; 2D: bh x bw = M, as square
 * as possible, dividing the sides). Returns 0 when there is none. */
int bench_blocks_for_m(bench_shape *s, int64_t m);
/* Gives a causal row's shape its chunk size C and chunk count ceil(N/C) (in bt). */
void bench_set_chunk(bench_shape *s, int64_t chunk);
/* The configuration of the MHLA rows (mhla_config_init(): the library's defaults) for the shape's
 * sizes and block grid. */
mhla_config bench_config(const bench_shape *s);
/* A causal configuration (mhla_config_init_causal()) for the shape's sizes and chunk. */
mhla_config bench_causal_config(const bench_shape *s);
/* A device buffer holding the bt*bh*bw square mixing matrix of `kind` (mhla_mixing_init()). */
mhla_status bench_mixing_create(mhla_context *ctx, mhla_init_kind kind, int64_t bt, int64_t bh, int64_t bw,
                                cl_mem *out);
/* The same for cross-attention's M x kv_bt matrix (a 1D key grid of kv_bt blocks; 0: the above). */
mhla_status bench_mixing_create_cross(mhla_context *ctx, mhla_init_kind kind, int64_t bt, int64_t bh, int64_t bw,
                                      int64_t kv_bt, cl_mem *out);
/* Uniform values in [-1, 1), deterministic in seed (the rows' random inputs). */
void bench_fill_random(float *x, size_t n, uint64_t seed);

/* Device buffers shared by the ops of one shape: q, k, v filled with random data, and out. */
typedef struct bench_inputs {
    cl_mem q, k, v, out;
} bench_inputs;

/* An op made ready for one shape (plan, mixing matrix, ...), run through bench_op.enqueue. */
typedef struct bench_case {
    mhla_context *ctx;
    const bench_inputs *in;
    mhla_plan *plan;
    cl_mem mixing;
    struct bench_decode *decode; /* the decode op's decoder and saved state (decode.c) */
    struct bench_blas *blas;     /* the host ops' arrays and threads (blas.c) */
    cl_mem grads[4];             /* the backward ops' dq, dk, dv and dMc */
    /* Why create() failed, from an op whose failures are not the library's (the host ops); empty
     * otherwise: the context's message explains the library's. */
    char why[256];
} bench_case;

typedef struct bench_op {
    const char *name;
    int one_d_only;   /* causal ops have no 2D form (docs/spec.md "Causal MHLA": 1D only) */
    int grid_free;    /* runs the same kernels for any token grid of N tokens (softmax) */
    /* Whether a row over its time budget may be estimated from a smaller N of the same op, scaled
     * by the op's flops (decode is not: its flatness in N is what the rows are there to show). */
    int estimable;
    /* Runs on the host CPU, not the device: enqueue() does the whole run before it returns (*done
     * stays NULL) and its wall time is the run's time (blas, sgemm). */
    int host;
    /* Makes its own operands: no q, k, v on the device (sgemm). */
    int own_inputs;
    /* Per run (decode: per step), as the op is credited with; see bench/README.md. */
    double (*flops)(const bench_shape *s);
    double (*bytes)(const bench_shape *s);
    /* Creates what a run needs; returns MHLA_OK or a status explained in the context message. */
    mhla_status (*create)(bench_case *c, const bench_shape *s);
    /* Optional: brings the case back to where a run starts, before every run and outside its time
     * (decode: restores the decoder's state at the end of the context). */
    mhla_status (*prepare)(bench_case *c);
    /* Enqueues one run; *done completes with it. */
    mhla_status (*enqueue)(bench_case *c, cl_event *done);
    /* Optional: summary, mixing and output device ms of the last run (mhla_plan_stage_times). */
    mhla_status (*stages)(bench_case *c, double ms[3]);
    /* Optional: a run made of steps (decode: C tokens). step_count() of them, the end of each
     * (CL_PROFILING_COMMAND_END, ns) from step_ends() after the run, and the index of the step
     * reported on its own (decode: the one that starts a chunk), or -1. */
    int (*step_count)(const bench_case *c);
    int (*marked_step)(const bench_case *c);
    mhla_status (*step_ends)(bench_case *c, cl_ulong *end_ns);
    void (*destroy)(bench_case *c);
} bench_op;

/* The initializer of the MHLA rows' mixing matrix (the released code's default), and of the causal
 * rows' (row i: 1/(i+1) on and below the diagonal). */
#define BENCH_MIXING_INIT MHLA_INIT_LINEAR
#define BENCH_CAUSAL_MIXING_INIT MHLA_INIT_CAUSAL_UNIFORM

/* The op table (ops.c), indexed by bench_op_id. */
const bench_op *bench_op_get(bench_op_id id);
/* Whether the op runs mhla_backward (its check compares the four gradients). */
int bench_op_is_backward(bench_op_id id);
/* Whether the op's rows have a block grid of their own (the table's M column). */
int bench_op_has_blocks(bench_op_id id);
/* BENCH_OP_COUNT for an unknown name. */
bench_op_id bench_op_find(const char *name);

/* The decode op (decode.c): its hooks, and the tokens of context it steps from (the row's N). */
mhla_status bench_decode_create(bench_case *c, const bench_shape *s);
mhla_status bench_decode_prepare(bench_case *c);
mhla_status bench_decode_enqueue(bench_case *c, cl_event *done);
int bench_decode_steps(const bench_case *c);
int bench_decode_marked_step(const bench_case *c);
mhla_status bench_decode_step_ends(bench_case *c, cl_ulong *end_ns);
void bench_decode_destroy(bench_case *c);
double bench_decode_flops(const bench_shape *s);
double bench_decode_bytes(const bench_shape *s);

/* The host ops (blas.c). The sgemm row multiplies two BENCH_SGEMM_N x BENCH_SGEMM_N matrices; its
 * shape holds that size in t, dk and dv (one head, batch 1). */
#define BENCH_SGEMM_N 2048
/* The note of the host ops' rows in a build without OpenBLAS. */
#define BENCH_NO_BLAS_NOTE "built without OpenBLAS (Debian: libopenblas-dev)"
/* Whether this build has OpenBLAS (meson option blas); without it the host ops' rows are skipped. */
int bench_blas_available(void);
/* OpenBLAS's build description (openblas_get_config()) and the threads the host ops use (one per
 * online CPU); NULL and 0 without OpenBLAS. */
const char *bench_blas_config(void);
int bench_blas_threads(void);
/* The OpenBLAS core (OPENBLAS_CORETYPE) the host ops should run where OpenBLAS took one without
 * AVX2 kernels (named in *was) on a CPU with AVX2 and FMA, and OPENBLAS_CORETYPE is not set; NULL
 * otherwise. */
const char *bench_blas_core_fix(const char **was);
/* MHLA's non-causal forward of the MHLA rows (bench_config(s): relu-eps, paper normalizer) on
 * the host in the GEMM formulation, as the blas row times it: q, k, v and out in the shape's
 * layout, mixing M x M row-major. Returns MHLA_OK, MHLA_ERR_UNSUPPORTED without OpenBLAS or for
 * a configuration it does not implement, MHLA_ERR_OUT_OF_HOST_MEMORY; the reason in why. */
mhla_status bench_blas_forward(const bench_shape *s, const float *q, const float *k, const float *v,
                               const float *mixing, float *out, char *why, size_t why_size);
mhla_status bench_blas_create(bench_case *c, const bench_shape *s);
mhla_status bench_blas_enqueue(bench_case *c, cl_event *done);
mhla_status bench_sgemm_create(bench_case *c, const bench_shape *s);
mhla_status bench_sgemm_enqueue(bench_case *c, cl_event *done);
void bench_blas_destroy(bench_case *c);
void bench_sgemm_destroy(bench_case *c);
double bench_sgemm_flops(const bench_shape *s);
double bench_sgemm_bytes(const bench_shape *s);

/* ---- options -------------------------------------------------------------------------------- */

typedef struct bench_options {
    int quick;
    double target_ms; /* measured time per row, about (iterations = target / one run) */
    int min_iters, max_iters, warmup;
    double max_row_s; /* a row estimated to need longer (warm-up + min_iters runs) is skipped */
    double max_total_s; /* rows also fit in what is left of this (0: no limit) */
    int64_t n[BENCH_MAX_LIST];
    size_t n_count;
    int64_t image_h[BENCH_MAX_LIST], image_w[BENCH_MAX_LIST];
    size_t image_count;
    int64_t heads[BENCH_MAX_LIST];
    size_t heads_count;
    int64_t dk[BENCH_MAX_LIST], dv[BENCH_MAX_LIST];
    size_t dims_count;
    int64_t m[BENCH_MAX_LIST]; /* empty: the paper's rule */
    size_t m_count;
    int64_t chunk[BENCH_MAX_LIST]; /* causal chunk sizes C (mhla-causal and decode rows) */
    size_t chunk_count;
    int64_t decode_ctx[BENCH_MAX_LIST]; /* decode rows: tokens of context before the timed steps */
    size_t decode_ctx_count;
    int64_t batch;
    mhla_layout layout;
    mhla_normalizer normalizer; /* --normalizer: the non-causal self-attention rows' */
    unsigned ops; /* bit (1 << bench_op_id) per op */
    uint32_t seed;
    int quiet;
    int kernels; /* --kernels: each row's device time per kernel, from one more run */
    int no_stage_marks; /* --no-stage-marks: the forwards without stage markers, no stage split */
    int gate;    /* --gate: BENCH_GATE_AUTO (a kernel on GPUs, an event elsewhere), _EVENT or _KERNEL */
    double gate_us; /* the kernel gate's device time actually set (bench/gate.c); 0: event gate */
    const char *device;
    const char *json_path, *csv_path, *plot_path;
    const char *compare[2]; /* --compare A.json B.json */
} bench_options;

enum { BENCH_GATE_AUTO, BENCH_GATE_EVENT, BENCH_GATE_KERNEL };

/* The gate every device-timed run waits behind (bench/gate.c): a user event (the runtime holds the
 * run's commands until it is set) or, with kernel, a single work-item kernel of about a millisecond
 * that the commands queue up behind on the device. Chooses for auto from the device type, builds
 * and calibrates the kernel, and hands it to bench_time; o->gate_us receives its length (0 for the
 * event). */
mhla_status bench_gate_setup(mhla_context *ctx, bench_options *o, char *err, size_t err_size);
void bench_gate_release(void);

/* Parses argv into `o` (defaults first). Returns 0, 1 for --help (usage printed to `out`), or -1
 * with the reason in err. */
int bench_options_parse(int argc, char **argv, bench_options *o, FILE *out, char *err, size_t err_size);

/* ---- rows and report ------------------------------------------------------------------------ */

typedef enum bench_status {
    BENCH_STATUS_OK = 0,    /* measured */
    BENCH_STATUS_ESTIMATED, /* not run: time estimated from a smaller N of the same series */
    BENCH_STATUS_SKIPPED,   /* not run: does not fit the device, or no estimate possible */
    BENCH_STATUS_NA,        /* the op does not exist in this build or for this shape */
    BENCH_STATUS_FAILED     /* the library returned an error (in the note) */
} bench_status;

const char *bench_status_name(bench_status s);
bench_status bench_status_parse(const char *name); /* BENCH_STATUS_FAILED for unknown names */

typedef struct bench_row {
    bench_op_id op;
    bench_shape shape;
    bench_status status;
    char note[256];
    int iters;
    double ms_median, ms_min, ms_max; /* ms_median holds the estimate of an estimated row; decode:
                                         one step (token), over every step of every run */
    double stage_ms[3];               /* median summary, mixing (causal: prefix), output ms; or NAN */
    int steps;                        /* decode: steps per run (C, one chunk start among them); else 0 */
    double step_mean_ms;              /* decode: median over the runs of the mean step; NAN otherwise */
    double chunk_start_ms;            /* decode: median time of the step that starts a chunk; NAN */
    double gate_ms, span_ms;          /* bench_timing's (span: NAN for decode rows); NAN for host ops */
    double tokens_per_s;              /* decode: batch tokens per second at step_mean_ms; NAN */
    double flops, bytes;              /* per run, as the op counts them */
    double gflops, gbps;              /* from ms_median */
    double pct_peak_flops, pct_peak_bw;
    /* mhla rows: this M's time over linear attention's, and softmax's over this; NAN if unknown. */
    double ratio_mhla_linear, ratio_softmax_mhla;
    int ratio_mhla_linear_estimated, ratio_softmax_mhla_estimated; /* a ratio uses an estimated time */
    /* mhla-causal rows: this chunk form's time over the (first) mhla row's of the same tensors. */
    double ratio_causal_mhla;
    int ratio_causal_mhla_estimated;
    /* decode rows: this per-step median over that of the smallest measured context of the same
     * sizes and chunk (1 there; flat decoding stays near 1 as the context grows). */
    double ratio_context;
    /* mhla rows: the blas row's time (same tensors and block grid) over this one's. */
    double ratio_blas_mhla;
    int ratio_blas_mhla_estimated;
    double pct_sgemm; /* GFLOP/s as a percentage of the sgemm row's in the same run; NAN without one */
    /* backward rows: this time over the forward row's of the same op, tensors and blocks (chunks). */
    double ratio_bwd_fwd;
    int ratio_bwd_fwd_estimated;
    int host_clock;   /* a bench_clock: how the row was timed */
    /* The row's check against the double reference before it was timed (verify.c): its op at
     * verify_n tokens (0: not verified), its max_rel_err (NaN when it could not run) and the
     * tolerance; verify_failed marks the row '!' in the table. */
    int64_t verify_n;
    double verified, verify_tolerance;
    int verify_failed;
    /* --kernels: one run's device time per kernel, mhla_context_kernel_times()'s lines ("NAME
     * CALLS MS"; decode: one whole run of steps); empty otherwise */
    char kernels[2048];
} bench_row;

/* How a row was timed (bench_row.host_clock, "host_clock" in the JSON). */
typedef enum bench_clock {
    BENCH_CLOCK_DEVICE = 0,   /* OpenCL profiling events: device time */
    BENCH_CLOCK_FALLBACK = 1, /* host clock: the device's profiling timestamps are unusable */
    BENCH_CLOCK_HOST_OP = 2   /* the op runs on the host (blas, sgemm): wall time of the run */
} bench_clock;

typedef struct bench_device {
    char name[256], vendor[256], driver[256], platform_name[256], platform_version[256];
    char device_version[256], opencl_c[256];
    unsigned compute_units, clock_mhz;
    uint64_t global_mem, max_alloc, local_mem;
    int float_width; /* floats per SIMD register (mhla_device_info.float_width) */
} bench_device;

typedef struct bench_peak {
    double gflops, gflops_min, gflops_max; /* best vector width's median, min, max */
    int vector_width;
    double gbps, gbps_min, gbps_max; /* copy: bytes read + written per second */
    double copy_bytes;               /* buffer size of the copy probe */
    int runs;
    int host_clock; /* timed with the host clock (the device's profiling timestamps are unusable) */
    int fused;      /* the best chains were fma() (1) or mad() (0): kernels/peak.cl */
} bench_peak;

typedef struct bench_report {
    char library_version[32];
    char started[32]; /* UTC, ISO 8601 */
    char command[1024]; /* the command line that produced it */
    double wall_s;
    bench_device device;
    bench_peak peak;
    bench_options opts; /* the sweep's settings, kept with the numbers (paths not kept) */
    bench_row *rows;
    size_t row_count;
} bench_report;

/* Key of a row for matching across runs: op and every shape parameter. */
int bench_row_same_case(const bench_row *a, const bench_row *b);
/* Whether the row has a time to show or compare: measured or estimated, and positive. */
int bench_row_has_time(const bench_row *r);
/* Fills gflops, gbps and the %peak and %sgemm columns of the measured and estimated rows. */
void bench_fill_rates(bench_row *rows, size_t count, const bench_peak *peak);
/* Fills the ratio columns: mhla rows from the linear, softmax and blas rows of the same tensors,
 * mhla-causal rows from the mhla row, decode rows from the smallest context's decode row. */
void bench_fill_ratios(bench_row *rows, size_t count);
/* Decode throughput: batch tokens per second at a mean step of step_mean_ms; NAN if not positive. */
double bench_tokens_per_s(int64_t batch, double step_mean_ms);
/* The token grid ("1D", "64x64") and the block grid ("16", "4x4"; "-" for ops without blocks). */
void bench_shape_label(const bench_shape *s, char *buf, size_t size);
void bench_blocks_label(const bench_row *r, char *buf, size_t size);

/* ---- sweep, timing, device --------------------------------------------------------------- */

typedef struct bench_timing {
    int iters;
    double ms_median, ms_min, ms_max;
    double stage_ms[3]; /* medians of summary, mixing, output; NAN without a stages hook */
    /* Runs made of steps (job.steps > 0); NAN otherwise. */
    double step_median, step_min, step_max; /* over every step of every timed run */
    double step_mean;                       /* median over the runs of run time / steps */
    double marked_ms;                       /* median over the runs of the marked step */
    /* Medians over the runs of the gate's latency (from the gate's opening, the end of its marker,
     * to the start of a 4-byte fill enqueued right after it: how long the runtime takes to start a
     * run held behind a user event) and of the span (from that fill's end to the run's end: the
     * device time of the run's own commands and the gaps between them); NAN on the host clock. */
    double gate_ms, span_ms;
    int host_clock; /* a bench_clock: FALLBACK when the device's timestamps were unusable */
} bench_timing;

/* What bench_time runs: prepare() (optional, untimed) then enqueue() one run (*done completes with
 * it), and optionally stages(), the per-stage device times of the run that just finished. A run
 * of `steps` steps (0: not split) reports each step's end through step_ends(); a step's time is
 * from the previous step's end (the run's start for the first) to its own. A host job's enqueue()
 * does the whole run on the host and returns when it is done: its wall time is the run's time. */
typedef struct bench_job {
    mhla_status (*prepare)(void *arg);
    mhla_status (*enqueue)(void *arg, cl_event *done);
    mhla_status (*stages)(void *arg, double ms[3]);
    mhla_status (*step_ends)(void *arg, cl_ulong *end_ns);
    int steps, marked_step; /* marked_step: a step index reported alone, or -1 */
    int host;               /* timed with bench_now() around enqueue(); no OpenCL events */
    void *arg;
} bench_job;

/* Runs the job `warmup` times, then as many times as fill about target_ms (within [min_iters,
 * max_iters]; a prepare hook's wall time counts against target_ms with the run's) and reports
 * device time from OpenCL profiling events (a host job: wall time; queue unused, may be NULL).
 * Returns MHLA_OK; the status of a failing hook (err is then "": the hook's own channel explains
 * it); or MHLA_ERR_OPENCL with the reason in err. */
mhla_status bench_time(cl_command_queue queue, const bench_job *job, int warmup, double target_ms, int min_iters,
                       int max_iters, bench_timing *out, char *err, size_t err_size);
/* The kernel gate for every later bench_time run (bench/gate.c): `spin` (bench_spin, its arguments
 * but reps set) over one work-item for `reps` steps; NULL: the user event. */
void bench_time_set_gate(cl_kernel spin, int reps);
/* Median of n values (sorts them). */
double bench_median(double *v, size_t n);
/* Fills the step fields of `out` from step_ms[run * steps + s], `runs` runs of `steps` steps
 * (reorders step_ms); marked: a step index reported alone, or -1. */
void bench_step_stats(double *step_ms, int runs, int steps, int marked, bench_timing *out);
/* Seconds on a monotonic clock. */
double bench_now(void);

mhla_status bench_device_read(mhla_context *ctx, bench_device *out);
/* Measures the device's f32 multiply-add throughput and copy bandwidth (kernels/peak.cl). */
mhla_status bench_peak_measure(mhla_context *ctx, const bench_device *dev, double target_ms, int runs,
                               bench_peak *out, char *err, size_t err_size);

/* Whether row `r` is left unrun because its warm-up and minimum runs would need more than budget_s:
 * then it is marked estimated, its time scaled by the op's flops from the measured row of the same
 * op, sizes and chunk (among done[0..n_done)) with the largest N not above its own (N for MHLA and
 * linear, N^2 for softmax); or, without one, skipped when even the device's peak could not make it
 * in time. A row of an op that is not estimable runs unless no time is left at all (then skipped).
 * Returns 1 when it is not to run. */
int bench_estimate_instead(const bench_options *o, const bench_peak *peak, const bench_row *done, size_t n_done,
                           double budget_s, bench_row *r);
/* Runs every row of the options' sweep; rows are malloc'd into the report. */
int bench_sweep_run(mhla_context *ctx, const bench_options *o, bench_report *rep);

/* ---- self-check (verify.c) ------------------------------------------------------------------ */

/* Whether rows of `op` are verified (every op but sgemm, which computes no attention). */
int bench_verifiable(bench_op_id op);
/* The small version of a row's shape its op is verified at: the same batch, heads, head dims,
 * layout, block grid (smaller blocks, about 512 tokens) or chunk size (mhla-causal: at least two
 * chunks and a partial one; decode: a shorter context at the same offset in its chunk); softmax a
 * 1D sequence of at most 128 tokens. */
bench_shape bench_verify_shape(bench_op_id op, const bench_shape *s);
/* Runs r's op once at bench_verify_shape(), through its own hooks, from a NaN-filled output, and
 * compares it with the double reference (mhla_reference.h); records the outcome in r. */
void bench_verify_row(mhla_context *ctx, const bench_options *o, bench_row *r);
/* The same with the op's hooks given (bench_verify_row: the row's own; tests: a broken one). */
void bench_verify_op(mhla_context *ctx, const bench_options *o, const bench_op *op, bench_row *r);
/* Records a check's outcome in r (verify_n and verify_tolerance set): verified = max_rel_err (NaN:
 * it could not run), verify_failed unless within the tolerance, and then `why` in the note. */
void bench_verify_record(bench_row *r, double max_rel_err, const char *why);
/* The decode op's one-token output buffer ([B,H,Dv], the last step's), and the blas op's host output. */
cl_mem bench_decode_step_output(const bench_case *c);
const float *bench_blas_output(const bench_case *c);

/* ---- outputs ------------------------------------------------------------------------------- */

void bench_write_table(FILE *f, const bench_report *rep);
int bench_write_csv(FILE *f, const bench_report *rep);
int bench_write_json(FILE *f, const bench_report *rep);
/* Reads a report written by bench_write_json; rows malloc'd (bench_report_free). */
int bench_read_json(const char *path, bench_report *out, char *err, size_t err_size);
void bench_report_free(bench_report *rep);

/* Crossover of two time series over the same increasing N: where tb/ta crosses 1, interpolated
 * linearly in log N and log t between the two neighbouring points. Points where either time is not
 * positive are skipped. Returns 1 and *n_cross when the sign of log(tb/ta) changes, else 0. */
int bench_crossover(const double *n, const double *ta, const double *tb, size_t count, double *n_cross);
/* Writes the log-log time-vs-N plot of the report's 1D mhla/linear/softmax rows. */
int bench_write_svg(FILE *f, const bench_report *rep);

/* Prints per-row ratios of B over A; returns 0, or -1 with err. */
int bench_compare(const char *path_a, const char *path_b, FILE *out, char *err, size_t err_size);

#endif /* MHLA_BENCH_H */
