/* Internal declarations shared by the host units: handle layouts, error macros, stage entry points.
 * Nothing here is public; include/mhla.h is the API. */
#ifndef MHLA_INTERNAL_H
#define MHLA_INTERNAL_H

#include "mhla.h"

#include "lock.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define MHLA_MESSAGE_MAX 16384 /* room for a kernel build log of a few hundred lines */

/* ---- host allocations and device buffers (host/alloc.c) ------------------------------------ */

/* Every malloc, calloc, realloc and free of host/ goes through these, and every clCreateBuffer
 * through mhla__cl_create_buffer: they count live allocations and carry the tests' fault
 * injection (host/testing.h). mhla__free only frees what these allocated. */
void *mhla__malloc(size_t size);
void *mhla__calloc(size_t count, size_t size);
void *mhla__realloc(void *p, size_t size);
void mhla__free(void *p);
cl_mem mhla__cl_create_buffer(cl_context context, cl_mem_flags flags, size_t size, void *host_ptr, cl_int *err);

/* ---- error recording ------------------------------------------------------------------- */

/* Records a failure on `ctx` (may be NULL) and on this thread; returns `status`. */
mhla_status mhla__fail(mhla_context *ctx, mhla_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Records a failed OpenCL call: the call, its error name and code, and where it was made. */
mhla_status mhla__fail_cl(mhla_context *ctx, cl_int err, const char *what, const char *file, int line);
/* Records a failed CLBlast call the same way (CLBlast reuses OpenCL's codes where they exist). */
mhla_status mhla__fail_blas(mhla_context *ctx, int err, const char *what, const char *file, int line);
/* Records err as ctx's mhla_context_cl_error() (ctx may be NULL). */
void mhla__set_cl_error(mhla_context *ctx, cl_int err);
/* The status an OpenCL error code becomes. */
mhla_status mhla__status_of_cl(cl_int err);
/* "CL_OUT_OF_RESOURCES" for -5; "CL_UNKNOWN_ERROR" for codes without a name. */
const char *mhla__cl_error_name(cl_int err);

/* Checks take the status variable, record the failure and jump to the function's `cleanup:`. */
#define MHLA_FAIL_IF(st, cond, ctx, code, ...)                                                      \
    do {                                                                                            \
        if (cond) {                                                                                 \
            (st) = mhla__fail((ctx), (code), __VA_ARGS__);                                          \
            goto cleanup;                                                                           \
        }                                                                                           \
    } while (0)

#define MHLA_CL_TRY(st, ctx, expr, what)                                                            \
    do {                                                                                            \
        cl_int mhla_cl_err_ = (expr);                                                               \
        if (mhla_cl_err_ != CL_SUCCESS) {                                                           \
            (st) = mhla__fail_cl((ctx), mhla_cl_err_, (what), __FILE__, __LINE__);                  \
            goto cleanup;                                                                           \
        }                                                                                           \
    } while (0)

/* For validators that own nothing and record nothing (config, cu_seqlens): on failure formats the
 * reason into the caller's (msg, msg_size) when given and returns `code` at once. */
#define MHLA_CHECK_MSG(cond, code, ...)                                                             \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            if (msg && msg_size)                                                                    \
                snprintf(msg, msg_size, __VA_ARGS__);                                               \
            return (code);                                                                          \
        }                                                                                           \
    } while (0)

/* Propagates a status already recorded by a callee. */
#define MHLA_FORWARD_IF_ERROR(st, expr)                                                             \
    do {                                                                                            \
        (st) = (expr);                                                                              \
        if ((st) != MHLA_OK)                                                                        \
            goto cleanup;                                                                           \
    } while (0)

/* ---- context ---------------------------------------------------------------------------- */

/* The SIMD registers a CPU device's compiler targets (host/cpu_row.c): `width` floats each (at most
 * the reported float width), `registers` of them, and the target's name ("haswell", or "reported"
 * where the device's name does not say). */
typedef struct mhla_simd {
    int width;
    int registers;
    char target[24];
} mhla_simd;

/* Device limits read once per context; every launch respects them. */
typedef struct mhla_device_limits {
    size_t max_work_group_size;
    size_t max_work_item_sizes[3];
    uint64_t local_mem_bytes;
    uint64_t max_alloc_bytes;
    uint64_t global_mem_bytes;
    int opencl_c_major; /* from CL_DEVICE_OPENCL_C_VERSION */
    int opencl_c_minor;
    int has_fp16;
    unsigned compute_units;
    cl_device_type type;
    /* Floats in one SIMD register as the device reports them (CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT,
     * or PREFERRED_ where that is wider): 16 on AVX-512 CPUs, 8 on AVX2, 4 on SSE/NEON, 1 on
     * most GPUs. Vector tiles never exceed it on CPUs (host/tuning.c). */
    int float_width;
    /* PoCL's CPU device: kernels become native code, so clang's prefetch builtin is an
     * instruction (kernels/output.cl, OUT_PF); elsewhere it may not translate. */
    int native_prefetch;
    /* What the device's compiler targets on CPUs (host/cpu_row.c): see mhla_simd. */
    mhla_simd simd;
} mhla_device_limits;

typedef struct mhla_program_entry {
    struct mhla_program_entry *next;
    char *key; /* kernel file name, NUL, build options: what the program was built from */
    uint64_t source_hash;
    cl_program program;
} mhla_program_entry;

struct mhla_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context cl;
    cl_command_queue queue;
    int out_of_order; /* the wrapped queue runs out of order: stages need barriers */
    int profiling;    /* the queue records profiling information: stage markers are enqueued */
    mhla_device_limits limits;
    char device_name[256];
    char vendor[256];
    char driver_version[256];
    char platform_version[256];
    /* Threads may share a context, each with its own plans and decoders (include/mhla.h): `lock`
     * guards what they share, programs and tuned_db; message_lock guards the failure record. */
    mhla_mutex lock;
    mhla_mutex message_lock;
    mhla_program_entry *programs; /* built programs, shared by the context's plans */
    char *tuning; /* mhla_context_set_tuning()'s overrides (validated), or NULL */
    char *tuned_db;   /* the device's tuning database (host/tuning_db.c), read on first use, or NULL */
    int tuned_loaded; /* tuned_db has been read (it may be NULL: no database) */
    atomic_int used_blas; /* CLBlast has built programs for this context (host/mixing.c) */
    cl_int last_cl_error;
    char message[MHLA_MESSAGE_MAX];
};

/* Fills ctx->limits and the name fields from ctx->device. */
mhla_status mhla__context_read_device(mhla_context *ctx);

/* ---- programs ----------------------------------------------------------------------------- */

/* Options assembled in one place (STYLE): "-D..." flags of a plan, appended to `buf`. */
typedef struct mhla_build_opts {
    char text[1024];
    size_t len;
} mhla_build_opts;
void mhla__opts_init(mhla_build_opts *opts);
void mhla__opts_add(mhla_build_opts *opts, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The source of kernels/<name>.cl: embedded at build time, or read from $MHLA_KERNEL_DIR when
 * that development switch is set. *out is malloc'd and freed by the caller. */
mhla_status mhla__kernel_source(mhla_context *ctx, const char *name, char **out);

/* Builds kernels/<name>.cl with `opts` (or returns the context's cached program). The program
 * stays owned by the context. A failed build returns MHLA_ERR_BUILD_FAILED with the log. */
mhla_status mhla__program_get(mhla_context *ctx, const char *name, const mhla_build_opts *opts,
                              cl_program *out);

/* Creates kernel `kernel_name` from a program; the caller releases it. */
mhla_status mhla__kernel_create(mhla_context *ctx, cl_program program, const char *kernel_name,
                                cl_kernel *out);

/* Embedded sources, generated by scripts/cl2c.py (host/kernel_registry.c). */
typedef struct mhla_embedded_kernel {
    const char *name;
    const char *source;
} mhla_embedded_kernel;
extern const mhla_embedded_kernel mhla__embedded_kernels[];
extern const size_t mhla__embedded_kernel_count;

/* ---- launches ----------------------------------------------------------------------------- */

/* Local size for a 1D-tiled launch: `want` clamped to the kernel's and the device's limits. */
size_t mhla__local_size(mhla_context *ctx, cl_kernel kernel, size_t want);
/* Local size for a 3D launch over `extent`: up to `want` work-items, filling dimension 0 first,
 * within CL_KERNEL_WORK_GROUP_SIZE and the device's per-dimension limits. */
void mhla__local_size_3d(mhla_context *ctx, cl_kernel kernel, const size_t extent[3], size_t want, size_t local[3]);
/* Enqueues `kernel` over `extent` rounded up to `local` (kernels guard the excess work-items). */
mhla_status mhla__launch(mhla_context *ctx, cl_kernel kernel, cl_uint dims, const size_t extent[3],
                         const size_t local[3], cl_uint num_wait, const cl_event *wait, cl_event *done,
                         const char *what);
/* Rounds x up to a multiple of m (m > 0). */
static inline size_t mhla__round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
/* Sets kernel argument `index` and records a failure naming the kernel and argument. */
#define MHLA_SET_ARG(st, ctx, kernel, index, value)                                                 \
    MHLA_CL_TRY(st, ctx, clSetKernelArg((kernel), (index), sizeof(value), &(value)),                \
                "clSetKernelArg(" #kernel ", " #index ")")
/* Orders the next stage after the previous one on an out-of-order queue; a no-op otherwise. */
mhla_status mhla__stage_barrier(mhla_context *ctx);
/* On a profiling queue, replaces *mark with a marker event after everything enqueued so far. */
mhla_status mhla__stage_mark(mhla_context *ctx, cl_event *mark);

typedef struct mhla_shape mhla_shape; /* below */

/* ---- tuning and tiles ------------------------------------------------------------------ */

/* Per-device choices (host/tuning.c): one row of the tuning table after overrides. Vector widths
 * are upper bounds: a plan takes the largest power of two not above them that divides its head
 * dimension, and never more than the device's float width allows (mhla__tuning_lookup). */
typedef struct mhla_tuning {
    int vec;           /* widest vector: 0 = the device's float width (mhla_device_limits) */
    int vec_forced;    /* vec was set by an override: honoured up to 16 even past the device's width */
    int sum_rd;        /* summary: key rows per work-item (one vector) */
    int sum_ve;        /* summary: vector width along the value columns */
    int sum_nv;        /* summary: value vectors per work-item */
    int sum_chunk;     /* summary: tokens summed before folding into the total (SUM_CHUNK) */
    int out_rt;        /* output: tokens per work-item */
    int out_ve;        /* output: vector width along the output columns */
    int out_nv;        /* output: output vectors per token per work-item */
    int out_dc;        /* output: key dimensions loaded per step (vector width) */
    int out_nt;        /* output: 1 = streaming (non-temporal) stores of the output rows (CPUs) */
    int out_pre;       /* read-outs: 1 = the tile's q~ rows mapped into a private array before the
                          multiply-adds (CPUs: frees registers for accumulators), 0 = OUT_DC at a
                          time inside the loop (GPUs: no per-thread array) */
    int out_pf;        /* read-out: prefetch the q rows this many token groups ahead (CPUs), 0 none */
    int wg;            /* work-group size aimed at */
    int groups_per_cu; /* work-groups per compute unit before long blocks are split */
    int split_min_len; /* shortest block segment worth its own work-group */
    int pf;            /* summary: 1 = a group's first work-item loads the next chunk's lines (CPUs) */
    int mix_kernel;    /* mixing: 1 = kernels/mixing.cl, 0 = CLBlast SGEMM */
    int mix_mr;        /* mixing kernel and causal prefix: rows per work-item */
    int mix_ve;        /* mixing kernel and causal prefix: vector width along the columns */
    int mix_nv;        /* mixing kernel and causal prefix: vectors per row per work-item */
    int pre_mr;        /* causal prefix: rows of P per work-item (each S_j vector read serves them) */
    int pre_nv;        /* causal prefix: vectors per row per work-item */
    int tq;            /* causal output: tokens per work-group (score tiles) */
    int kt;            /* causal output: keys per pass through local memory */
    int gemm_rows;     /* causal prefix: earlier blocks of this many chunks go to CLBlast (0: none) */
    int sm_bq;         /* softmax: query rows per work-group */
    int sm_bk;         /* softmax: keys per local-memory tile (shrunk to fit local memory) */
    int sm_vw;         /* softmax: vector width */
    int sm_rows;       /* softmax: 1 = each work-item copies whole tile rows, 0 = coalesced copy */
    int dg_parts;      /* causal backward: bc_diag's work-items per (chunk, head), query rows interleaved
                          (1 on CPUs: one walks the chunk; GPUs want a work-group of lanes) */
    char origin[160];  /* where the values came from: "built-in row 'cpu', MHLA_TUNING" */
} mhla_tuning;

/* The SIMD target of a device named `device_name` reporting `reported_width` floats per register
 * (host/cpu_row.c). */
void mhla__simd_of(const char *device_name, int reported_width, mhla_simd *out);
/* The register tiles and vector widths of the CPU row for the SIMD target s (host/cpu_row.c). */
void mhla__cpu_row_fill(mhla_tuning *t, const mhla_simd *s);
/* The row for ctx's device (vendor, name and type; on CPUs derived from its SIMD target), then the tuned entry for cfg's
 * head dimensions (`mhla tune`'s database; cfg may be NULL: none), then MHLA_TUNING, then the
 * context's own overrides (mhla_context_set_tuning), with the vector widths capped for the
 * device. Fails only on a malformed override, naming it. */
mhla_status mhla__tuning_lookup(mhla_context *ctx, const mhla_config *cfg, mhla_tuning *out);
/* The tuning database's spec for (dk, dv) on ctx's device into spec; 1 when there is one. */
int mhla__tuned_entry(mhla_context *ctx, int64_t dk, int64_t dv, char *spec, size_t size);
/* Applies "name=value,..." (and "row=NAME", which restarts from that built-in row) to *t; `where`
 * names the source in messages ("MHLA_TUNING"). ctx may be NULL (validation only). */
mhla_status mhla__tuning_apply(mhla_context *ctx, const char *where, const char *spec, mhla_tuning *t);
/* Largest power of two <= cap dividing n. */
int mhla__pow2_divisor(int64_t n, int cap);

/* The tiles a plan or decoder builds its kernels with (host/tiling.c): the tuning fitted to the
 * configuration's sizes and the device's limits. Every field is a -D flag of some kernel file,
 * except wg, splits and split_len (launch shape). */
typedef struct mhla_tiles {
    int sum_rd, sum_ve, sum_nv;         /* SUM_RD x (SUM_VE * SUM_NV) per work-item */
    int sum_chunk;                      /* SUM_CHUNK: tokens per partial sum */
    int out_rt, out_ve, out_nv, out_dc; /* OUT_RT tokens x (OUT_VE * OUT_NV) columns */
    int out_nt;                         /* OUT_NT: streaming stores of the output rows */
    int out_pre;                        /* OUT_PRE: q~ mapped up front (kernels/tiles.h) */
    int out_pf;                         /* OUT_PF: q rows prefetched that many token groups ahead */
    int mix_mr, mix_ve, mix_nv;         /* mixing.cl: MIX_MR rows x (MIX_VE * MIX_NV) columns; causal
                                           plans: causal_prefix.cl's rows and vectors (pre_mr, pre_nv) */
    int pre_ve;                         /* causal_prefix.cl: MIX_MR rows x (PRE_VE * MIX_NV) columns */
    int tq, kt;                         /* causal_output.cl: CAUSAL_TQ tokens, CAUSAL_KT keys per pass */
    int gemm_rows;                      /* causal prefix blocks through CLBlast (a multiple of mix_mr) */
    int sm_vw, sm_bk, sm_bq, sm_rows;   /* softmax.cl: VW, BK, COPY_ROWS; query rows per group */
    int wg;                             /* work-group size aimed at */
    int pf;                             /* PREFETCH: software prefetch in the summary */
    int splits, split_len;              /* non-causal: segments per block, tokens per segment */
    int bwd_vw, bwd_vk, bwd_vv, bwd_rt; /* non-causal backward (kernels/backward_readout.cl): vector
                                           width, its divisors of Dk and Dv, tokens per work-item */
    int bct_rt, bct_ve, bct_nv;         /* causal backward read-outs (backward_causal_readout.cl):
                                           BCT_RT tokens x (BCT_VE * BCT_NV) columns per work-item, */
    int bct_tq, bct_kt;                 /* BCT_TQ tokens per group, BCT_KT per pass (host/backward.c) */
    int bct_sr;                         /* BCT_SR rows of S or G per work-item (backward_causal.cl) */
    int bct_dg;                         /* bc_diag's parts per (chunk, head): dg_parts fitted */
} mhla_tiles;

/* The kernel files, for their -D flags (each reads only some of the configuration, so a program
 * is not rebuilt for a value it never sees). */
typedef enum mhla_kernel_file {
    MHLA_KF_BLOCK_SUMMARY,
    MHLA_KF_OUTPUT,
    MHLA_KF_MIXING,
    MHLA_KF_CAUSAL_SUMMARY,
    MHLA_KF_CAUSAL_PREFIX,
    MHLA_KF_CAUSAL_OUTPUT,
    MHLA_KF_DECODER,
    MHLA_KF_SOFTMAX,
    MHLA_KF_BACKWARD_SUMMARY,
    MHLA_KF_BACKWARD_READOUT,
    MHLA_KF_BACKWARD_MIXING,
    MHLA_KF_BACKWARD_CAUSAL,
    MHLA_KF_BACKWARD_CAUSAL_READOUT,
} mhla_kernel_file;

/* "block_summary", ...: the file under kernels/ (without .cl). */
const char *mhla__kernel_file_name(mhla_kernel_file f);
/* The one place specialization flags are assembled (they key the program cache). */
void mhla__build_options(mhla_kernel_file f, const mhla_config *c, const mhla_tiles *t, mhla_build_opts *opts);
/* mhla__program_get for a kernel file with its flags. */
mhla_status mhla__program_for(mhla_context *ctx, mhla_kernel_file f, const mhla_config *c, const mhla_tiles *t,
                              cl_program *out);

/* Device limits a fit must respect: work-items per group and local-memory bytes. They start at
 * the device's (local memory less a reserve for what implementations keep for themselves) and
 * shrink when a built kernel reports less (CL_KERNEL_WORK_GROUP_SIZE, CL_KERNEL_LOCAL_MEM_SIZE). */
typedef struct mhla_fit {
    size_t wg;
    uint64_t local_bytes;
} mhla_fit;
void mhla__fit_init(const mhla_context *ctx, mhla_fit *fit);
/* After building a kernel that needs `want_wg` work-items per group and `want_local` bytes of
 * local memory (predicted from its tiles): tightens *fit to what the kernel reports and returns 1
 * when it does not fit (rebuild with smaller tiles), 0 when it does, -1 on a failed query. */
int mhla__fit_check(mhla_context *ctx, cl_kernel kernel, size_t want_wg, uint64_t want_local, mhla_fit *fit);

/* Non-causal plans: register tiles, mixing tiles and block splits. */
void mhla__tiles_forward(const mhla_context *ctx, const mhla_config *cfg, const mhla_shape *shape,
                         const mhla_tuning *t, mhla_tiles *out);
/* Causal plans and decoders: register tiles, prefix tiles and score tiles within *fit
 * (MHLA_ERR_UNSUPPORTED, naming the sizes, when even the smallest do not fit). */
mhla_status mhla__tiles_causal(mhla_context *ctx, const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit,
                               mhla_tiles *out);
/* Work-items of one causal output group: the kernel is built for exactly this many. */
int mhla__causal_output_wg(const mhla_tiles *t, int64_t dv);
/* Local memory the causal output kernel's arrays take. */
uint64_t mhla__causal_output_local(const mhla_tiles *t, int64_t dk);
/* The softmax baseline: vector width, key tile (within fit->local_bytes) and query rows. */
mhla_status mhla__tiles_softmax(mhla_context *ctx, const mhla_config *cfg, const mhla_tuning *t, const mhla_fit *fit,
                                mhla_tiles *out);
/* Local memory the softmax kernel's arrays take. */
uint64_t mhla__softmax_local(const mhla_config *cfg, const mhla_tiles *t);

/* ---- plan -------------------------------------------------------------------------------- */

/* Derived sizes of a valid configuration. */
struct mhla_shape {
    int64_t n;          /* tokens per sequence */
    int64_t m;          /* blocks (non-causal) */
    int64_t nb;         /* tokens per block */
    int64_t pt, ph, pw; /* block extent in tokens */
    int64_t bh;         /* batch * heads */
    int64_t summary_cols; /* Dv + 1: the value columns and the key-sum column z */
};

/* Validates cfg (msg gets the reason) and fills the derived shape. */
mhla_status mhla__config_validate(const mhla_config *cfg, mhla_shape *shape, char *msg, size_t msg_size);
/* Bytes per stored element of a dtype. */
size_t mhla__dtype_size(mhla_dtype dtype);
/* The config with defaults resolved (scale 0 -> the mode's default, mixing_rows 0 -> M). */
void mhla__config_resolve(mhla_config *cfg);

/* The double reference's elements (host/reference.c), shared with host/diagnose.c: phi(x), and the
 * offset of element (batch b, token t, head h, column d) in a tensor of n tokens and dim columns. */
double mhla__ref_feature(double x, mhla_feature_map fm, double feature_eps);
size_t mhla__ref_offset(const mhla_config *c, int64_t n, int64_t b, int64_t t, int64_t h, int64_t d, int64_t dim);

/* The eigenvalues of the symmetric n x n matrix a (row-major, overwritten), ascending, into w
 * (host/spectrum.c): Householder reduction to tridiagonal form, then bisection with Sturm counts.
 * Returns 0, or -1 when out of host memory. */
int mhla__symmetric_eigenvalues(double *a, int64_t n, double *w);

/* Mirror of kernels/common.h's mhla_grid, passed by value to every kernel. */
typedef struct mhla_grid_args {
    cl_int n, heads, seq_h, seq_w, pt, ph, pw, blk_h, blk_w, nb, m, bh, run;
} mhla_grid_args;

struct mhla_plan {
    mhla_context *ctx;
    int softmax;     /* a softmax-attention baseline plan (mhla_softmax_plan_create) */
    mhla_config cfg; /* resolved */
    mhla_shape shape;
    mhla_grid_args grid;
    mhla_tuning tuning; /* the device's row after overrides (tiles: what this plan made of it) */
    mhla_tiles tiles;
    cl_kernel k_summary;
    cl_kernel k_reduce; /* splits > 1 only */
    cl_kernel k_official_dots; /* official normalizer only */
    cl_kernel k_output;
    cl_kernel k_mixing; /* tuning.mix_kernel only */
    cl_kernel k_softmax; /* softmax plans only */
    size_t lws_summary[3], lws_output[3], lws_mixing[3], lws_reduce, lws_dots, lws_softmax;
    /* workspace: summaries are M rows of B*H*Dk*(Dv+1) floats (kernels/common.h) */
    cl_mem partial; /* splits > 1: M*splits rows of segment summaries */
    cl_mem summary; /* S_b and z_b */
    cl_mem mixed;   /* S~_i and z~_i */
    cl_mem dots;    /* official: [M][B*H][Nb] q~_{b,p} . z_b */
    cl_mem den;     /* official: [M][B*H][Nb] mixed denominators */
    cl_mem gemm_temp;
    size_t gemm_temp_bytes;
    size_t workspace_bytes;
    /* mhla_forward_host staging, allocated on first use */
    cl_mem stage[5];
    /* profiling queues: markers at the start and after each stage of the last forward */
    cl_event marks[4];
    struct mhla_causal_plan *causal; /* causal plans: kernels and workspace (host/causal.c) */
    struct mhla_shard *shard;        /* shard plans: the whole sequence and the exchange (host/shard.c) */
    struct mhla_bwd *bwd;            /* mhla_backward's kernels and workspace, made on first use */
    /* mhla_plan_save_for_backward(): summary, mixed (dots, den) hold what the last mhla_forward()
     * computed from saved_in (q, k, v, mixing) while `saved` is 1; every other writer clears it */
    int save_for_backward, saved;
    cl_mem saved_in[4];
};

/* A shard plan's view of the whole sequence (host/shard.c). The plan's cfg and shape are the
 * shard's own; tiles come from the whole configuration, so that every block is summed, mixed and
 * read out exactly as mhla_forward() on the whole sequence would. */
typedef struct mhla_shard {
    mhla_config global; /* resolved */
    mhla_shape gshape;
    int64_t offset, count, blocks, token_offset, tokens;
    size_t sum_floats, dots_floats, row_floats; /* one block's exchange row: summary, then dots */
    cl_mem gathered, gathered_dots; /* non-causal: every block's rows, as the host gathered them */
    cl_mem mc_rows;                 /* non-causal: the shard's rows of Mc */
    int32_t *cu;                    /* varlen: a copy of the packed batch's cu_seqlens (num_seqs + 1) */
    size_t num_seqs;
} mhla_shard;

/* mhla_plan_create() after plan->ctx, plan->cfg (unresolved) and plan->shard are set. */
mhla_status mhla__plan_setup(mhla_plan *plan);
void mhla__shard_destroy(mhla_shard *shard);
/* Varlen shards (host/shard_varlen.c): the chunks of the packed batch (every sequence chunked from
 * its own start, in sequence order), the tokens of chunks [offset, offset + count), and the chunk
 * tables of a shard plan set up over those tokens. */
int64_t mhla__shard_varlen_chunks(const mhla_shard *sh);
void mhla__shard_varlen_tokens(const mhla_shard *sh, int64_t offset, int64_t count, int64_t *first, int64_t *n);
mhla_status mhla__shard_varlen_tables(mhla_plan *plan);
/* The mixing GEMM: c[rows x x] = a[rows x k] * b[k x x] (a's leading dimension k). */
mhla_status mhla__mix(mhla_plan *plan, cl_mem a, size_t rows, size_t k, cl_mem b, cl_mem c, size_t x);

/* Fills plan->grid from plan->cfg and plan->shape. */
void mhla__plan_fill_grid(mhla_plan *plan);

/* Stages of the non-causal forward, each in the host file named after it. */
mhla_status mhla__block_summary_setup(mhla_plan *plan);
mhla_status mhla__block_summary_enqueue(mhla_plan *plan, cl_mem k, cl_mem v, cl_uint num_wait,
                                        const cl_event *wait);
/* The same into `out` (summary-sized) instead of plan->summary: the backward's gradient summaries. */
mhla_status mhla__block_summary_enqueue_to(mhla_plan *plan, cl_mem k, cl_mem v, cl_mem out, cl_uint num_wait,
                                           const cl_event *wait);
mhla_status mhla__mixing_setup(mhla_plan *plan);
mhla_status mhla__mixing_enqueue(mhla_plan *plan, cl_mem mixing);
/* c[M x x] = a[M x M] * b[M x x] with the plan's mixing GEMM (kernel or CLBlast; x one of the
 * forward's two widths, whose temporary buffer the plan holds). */
mhla_status mhla__mixing_gemm(mhla_plan *plan, cl_mem a, cl_mem b, cl_mem c, size_t x);
/* Releases what mhla_backward() made for a plan (host/backward.c). Accepts NULL. */
void mhla__backward_destroy(struct mhla_bwd *bwd);
mhla_status mhla__output_setup(mhla_plan *plan);
/* Official normalizer only: q~_{b,p} . z_b for every block and position, before the mixing. */
mhla_status mhla__official_dots_enqueue(mhla_plan *plan, cl_mem q);
mhla_status mhla__output_enqueue(mhla_plan *plan, cl_mem q, cl_mem out, cl_event *done);

/* The softmax baseline (host/softmax.c): its configuration (block grid, feature map and normalizer
 * ignored, scale 0 -> Dk^-0.5) and its one kernel. */
mhla_status mhla__softmax_config(const mhla_config *cfg, mhla_config *resolved, mhla_shape *shape, char *msg,
                                 size_t msg_size);
mhla_status mhla__softmax_enqueue(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem out, cl_uint num_wait,
                                  const cl_event *wait, cl_event *done);

/* Creates a device buffer of `bytes`, checked against the device's limits first; `what` names it
 * in the message. */
mhla_status mhla__buffer_create(mhla_context *ctx, cl_mem_flags flags, size_t bytes, const char *what,
                                cl_mem *out);

/* Argument checks shared by every entry point that takes device buffers (host/forward.c); `fn`
 * names the public call in messages. A buffer: not NULL, of ctx's cl_context, >= need bytes.
 * shape(obj, t, ...) describes what needs them; it runs only for the message of a buffer that is
 * too small, so that per-token calls format no strings. */
typedef void (*mhla_shape_fn)(const void *obj, mhla_tensor t, char *buf, size_t size);
mhla_status mhla__check_mem(mhla_context *ctx, const char *fn, mhla_tensor t, cl_mem buf, size_t need,
                            mhla_shape_fn shape, const void *obj);
/* mhla__check_mem for a buffer named `name` whose shape `what` describes (the backward's). */
mhla_status mhla__check_mem_named(mhla_context *ctx, const char *fn, const char *name, cl_mem buf, size_t need,
                                  const char *what);
/* bufs indexed by mhla_tensor: out aliasing no input (mixing only when with_mixing), and a
 * consistent wait list. */
mhla_status mhla__check_call(mhla_context *ctx, const char *fn, const cl_mem bufs[5], int with_mixing,
                             cl_uint num_wait, const cl_event *wait);
/* On a profiling queue, marks[0] of the plan: a marker that waits for the caller's events, the
 * start of mhla_plan_stage_times()' span. */
mhla_status mhla__forward_mark_start(mhla_plan *plan, cl_uint num_wait, const cl_event *wait);
/* mhla__check_mem for one of the plan's tensors. */
mhla_status mhla__plan_check_mem(mhla_plan *plan, const char *fn, mhla_tensor t, cl_mem buf);
/* Both, for the plan's tensors. */
mhla_status mhla__forward_check(mhla_plan *plan, const char *fn, const cl_mem bufs[5], cl_uint num_wait,
                                const cl_event *wait);
/* "[B,N,H,D] = [1,4096,8,64] f32": what plan (an mhla_plan) needs for tensor t, for messages. */
void mhla__plan_tensor_shape(const void *plan, mhla_tensor t, char *buf, size_t size);
/* "q", "k", "v", "out", "mixing". */
const char *mhla__tensor_name(mhla_tensor t);
/* mhla_forward_host() and mhla_forward_varlen_host() (cu_seqlens != NULL): stage, run, read back. */
/* MHLA_POISON_OUTPUTS=1 (tests): fills a host call's staging output with NaN before its run. */
mhla_status mhla__poison_output(mhla_context *ctx, cl_mem buf, size_t bytes);
mhla_status mhla__forward_host(mhla_plan *plan, const char *fn, const void *q, const void *k, const void *v,
                               const float *mixing, void *out, const int32_t *cu_seqlens, size_t num_seqs);

/* Called by mhla_context_destroy(): when ctx was the last live context that used CLBlast,
 * empties CLBlast's program cache (host/mixing.c). */
void mhla__blas_release(mhla_context *ctx);
/* Runs CLBlast's row-major C[m x n] = A[m x k] * B[k x n] on the context's queue. */
mhla_status mhla__sgemm(mhla_context *ctx, size_t m, size_t n, size_t k, cl_mem a, size_t a_off,
                        cl_mem b, size_t b_off, cl_mem c, size_t c_off, cl_mem temp, cl_event *ev);
/* CLBlast's temporary-buffer size for that GEMM. */
mhla_status mhla__sgemm_temp_bytes(mhla_context *ctx, size_t m, size_t n, size_t k, size_t *bytes);
/* The general form: leading dimensions of its own for A, B and C, and C = A * B + beta * C. */
mhla_status mhla__sgemm_ld(mhla_context *ctx, size_t m, size_t n, size_t k, cl_mem a, size_t a_off, size_t lda,
                           cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc,
                           cl_mem temp, cl_event *ev);
mhla_status mhla__sgemm_ld_temp_bytes(mhla_context *ctx, size_t m, size_t n, size_t k, size_t lda, size_t ldb,
                                      size_t ldc, size_t *bytes);

/* Formats into a fixed buffer, never overflowing; returns buf. */
char *mhla__fmt(char *buf, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif /* MHLA_INTERNAL_H */
