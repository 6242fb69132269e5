/* host/forward: plans (non-causal, causal, softmax baseline) and mhla_forward through their stages:
 * block summaries, mixing, output; varlen batches; the host-memory calls. Depends on core/,
 * config/, tune/ and causal/. The backward and the shards build on it (backward/, shard/) and
 * hand it their teardown where the plan must run it. */
#ifndef MHLA_FORWARD_H
#define MHLA_FORWARD_H

#include "causal/causal.h"

/* The kinds of plan. Each has one table of operations, defined in its own file (blocks.c,
 * causal_plan.c, softmax.c), that the plan picks when it is made; the backward's half of each table
 * is backward/backward.c's (docs/architecture.md "How to add a variant"). */
typedef enum mhla_variant {
    MHLA_VARIANT_BLOCKS,  /* non-causal MHLA over a block grid (cross-attention, grouped heads) */
    MHLA_VARIANT_CHUNKS,  /* causal MHLA, the chunk form (varlen packed batches too) */
    MHLA_VARIANT_SOFTMAX, /* the softmax-attention baseline */
    MHLA_VARIANTS
} mhla_variant;

typedef struct mhla_plan_ops {
    mhla_variant id;
    const char *name;
    int takes_mixing; /* mhla_forward's mixing argument is read (not by softmax) */
    int stages;       /* stage markers (mhla_plan_stage_times) and summaries kept for a backward */
    /* kernels and workspace of a validated, resolved configuration (NULL: made by its own creator) */
    mhla_status (*setup)(mhla_plan *plan);
    /* mhla_forward after its checks; b in mhla_tensor order (q, k, v, out, mixing) */
    mhla_status (*forward)(mhla_plan *plan, const cl_mem b[5], cl_uint num_wait, const cl_event *wait,
                           cl_event *done);
    /* mhla_plan_tuning()'s text after the tuning's origin */
    void (*describe)(const mhla_plan *plan, char *buf, size_t size);
} mhla_plan_ops;

extern const mhla_plan_ops mhla__variant_blocks, mhla__variant_chunks, mhla__variant_softmax;
/* The variant of an MHLA configuration (blocks or chunks). */
const mhla_plan_ops *mhla__plan_variant(const mhla_config *cfg);

struct mhla_plan {
    mhla_context *ctx;
    const mhla_plan_ops *ops; /* the variant */
    mhla_config cfg; /* resolved */
    mhla_shape shape;
    mhla_grid grid;    /* the queries' side: the read-outs */
    mhla_grid kv_grid; /* the keys' and values' side: the summaries (= grid for self-attention with H_kv = H) */
    mhla_tuning tuning; /* the device's row after overrides (tiles: what this plan made of it) */
    mhla_tiles tiles;
    cl_kernel k_summary;
    cl_kernel k_reduce; /* splits > 1 only */
    cl_kernel k_official_dots; /* official normalizer only */
    cl_kernel k_output;
    cl_kernel k_mixing; /* tuning.mix_kernel only */
    cl_kernel k_mix_splits; /* tiles.tiled: the segments added and mixed (mixing.cl) */
    cl_kernel k_softmax; /* softmax plans only */
    cl_kernel k_one; /* the forward in one launch (forward/forward_one.c), where the shape and tuning ask */
    size_t lws_summary[3], lws_output[3], lws_mixing[3], lws_mix_splits[3], lws_weighted[3], lws_reduce, lws_dots, lws_softmax, lws_one;
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
    struct mhla_causal_plan *causal; /* causal plans: kernels and workspace (forward/causal_plan.c) */
    struct mhla_shard *shard;        /* shard plans: the whole sequence and the exchange (shard/) */
    struct mhla_bwd *bwd;            /* mhla_backward's kernels and workspace, made on first use */
    void (*bwd_destroy)(struct mhla_bwd *bwd); /* set with bwd by backward/ (a layer above this one) */
    /* likewise: its tiles, and where its read-outs mix (the plan's shape) */
    void (*bwd_describe)(const struct mhla_plan *plan, const struct mhla_bwd *bwd, char *buf, size_t size);
    /* mhla_plan_save_for_backward(): summary, mixed (dots, den) hold what the last mhla_forward()
     * computed from saved_in (q, k, v, mixing) while `saved` is 1; every other writer clears it */
    int save_for_backward, saved;
    cl_mem saved_in[4];
};

/* A shard plan's view of the whole sequence (shard/shard.c). The plan's cfg and shape are the
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

/* Fills plan->grid and plan->kv_grid from plan->cfg and plan->shape. */
void mhla__plan_fill_grid(mhla_plan *plan);

/* The non-causal forward in one launch (forward/forward_one.c): its kernel, fitted, where the plan's
 * shape and tuning ask for it (k_one stays NULL otherwise); whether a forward takes it now (not
 * while the plan keeps its summaries for a backward); its launch, b in mhla_tensor order. */
mhla_status mhla__forward_one_setup(mhla_plan *plan);
int mhla__forward_one_runs(const mhla_plan *plan);
mhla_status mhla__forward_one_enqueue(mhla_plan *plan, const cl_mem b[5], cl_uint num_wait, const cl_event *wait,
                                      cl_event *done);

/* Stages of the non-causal forward, each in the file of forward/ named after it. */
/* The tiled forward's summary and read-out kernels (forward/tiled.c), fitted to what the device
 * builds them for; clears tiles.tiled where they do not fit (the untiled stages then). */
mhla_status mhla__tiled_setup(mhla_plan *plan);
mhla_status mhla__block_summary_setup(mhla_plan *plan);
mhla_status mhla__block_summary_enqueue(mhla_plan *plan, cl_mem k, cl_mem v, cl_uint num_wait,
                                        const cl_event *wait);
/* The backward's gradient summaries: block_summary_weighted (made from the plan's summary program),
 * or `tiled` summary_tiled_weighted (a tiled plan's summary program; *out NULL where the device
 * builds it for fewer work-items than the plan's summary_tiled), into `out` (summary-sized), S part
 * sum (w_p k~) v^T and z column sum (zscale wz_p) k~ with w and wz per token as [M][B*H][Nb].
 * `segments` NULL: split blocks' segments are added into `out`; else *segments receives the
 * segments per block, left in plan->partial where more than 1 (for mhla__mixing_splits). */
mhla_status mhla__block_summary_weighted_kernel(mhla_plan *plan, int tiled, cl_kernel *out);
mhla_status mhla__block_summary_weighted_enqueue(mhla_plan *plan, cl_kernel kern, int tiled, cl_mem k, cl_mem v,
                                                 cl_mem w, cl_mem wz, float zscale, cl_mem out, cl_int *segments);
mhla_status mhla__mixing_setup(mhla_plan *plan);
/* with_dots: the official normalizer's dots mixed too (plan->den), unless the tiled read-out mixes
 * them itself (mhla__output_mixes_dots). */
mhla_status mhla__mixing_enqueue(mhla_plan *plan, cl_mem mixing, int with_dots);
/* Tiled plans: c = a * (the segments of `part` added), with a rows x k (a_trans: a is k x rows, its
 * transpose taken) and `part` k*splits rows of x floats (mixing.cl's mixing_splits); where splits > 1
 * the added rows also into `sum`. */
mhla_status mhla__mixing_splits(mhla_plan *plan, cl_mem a, cl_int a_trans, size_t rows, size_t k, cl_mem part,
                                cl_int splits, cl_mem sum, cl_mem c, size_t x);
/* c[rows x x] = a[rows x k] * b[k x x] with the plan's mixing GEMM (kernel or CLBlast; rows and k
 * among M and M_kv, x at most the forward's widths, whose temporary buffer the plan holds). */
mhla_status mhla__mixing_gemm(mhla_plan *plan, cl_mem a, size_t rows, size_t k, cl_mem b, cl_mem c, size_t x);
mhla_status mhla__output_setup(mhla_plan *plan);
/* Official normalizer only: q~_{b,p} . z_b for every block and position, before the mixing. */
mhla_status mhla__official_dots_enqueue(mhla_plan *plan, cl_mem q);
/* The read-out; a tiled plan's mixes the summaries itself where mhla__output_mixes() says so (then
 * no mixing stage runs before it, and `mixing` is Mc). */
mhla_status mhla__output_enqueue(mhla_plan *plan, cl_mem q, cl_mem mixing, cl_mem out, cl_event *done);
/* Whether the tiled read-out mixes the summaries itself: few blocks x segments (tl_fuse) whose
 * re-reads stay within fuse_mb, and where the plan is kept for a backward
 * (mhla_plan_save_for_backward()), whole blocks few enough for the backward's read-outs to mix them
 * too (bt_fuse): its summaries are then kept unmixed. */
int mhla__output_mixes(const mhla_plan *plan);
/* The same with the re-reads bounded by fuse_mb instead of the plan's (MHLA_FUSE_MB_ANY: whether
 * it would mix were there no bound; the plan's description says which of the two keeps it apart). */
int mhla__output_mixes_within(const mhla_plan *plan, int fuse_mb);
/* Whether the tiled read-out mixes the official normalizer's dots itself (no dots GEMM before it):
 * tiled official plans that keep nothing for a backward. */
int mhla__output_mixes_dots(const mhla_plan *plan);
/* The softmax baseline's one kernel (forward/softmax.c). */
mhla_status mhla__softmax_enqueue(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem out, cl_uint num_wait,
                                  const cl_event *wait, cl_event *done);
/* On a profiling queue, marks[0] of the plan: a marker that waits for the caller's events, the
 * start of mhla_plan_stage_times()' span (forward/call_checks.c, with the checks below). */
mhla_status mhla__forward_mark_start(mhla_plan *plan, cl_uint num_wait, const cl_event *wait);
/* mhla__check_mem for one of the plan's tensors. */
mhla_status mhla__plan_check_mem(mhla_plan *plan, const char *fn, mhla_tensor t, cl_mem buf);
/* Both, for the plan's tensors. */
mhla_status mhla__forward_check(mhla_plan *plan, const char *fn, const cl_mem bufs[5], cl_uint num_wait,
                                const cl_event *wait);
/* "[B,N,H,D] = [1,4096,8,64] f32": what plan (an mhla_plan) needs for tensor t, for messages. */
void mhla__plan_tensor_shape(const void *plan, mhla_tensor t, char *buf, size_t size);
/* mhla_forward_host() and mhla_forward_varlen_host() (cu_seqlens != NULL): stage, run, read back
 * (forward/host_call.c). */
mhla_status mhla__forward_host(mhla_plan *plan, const char *fn, const void *q, const void *k, const void *v,
                               const float *mixing, void *out, const int32_t *cu_seqlens, size_t num_seqs);

/* A causal plan's part: kernels, workspace (grown on demand by varlen calls) and, for a plan of
 * fixed-length sequences, the chunk tables built once. */
typedef struct mhla_causal_plan {
    mhla_causal *kern;
    cl_mem sums, pref;
    size_t slots; /* chunks the workspace holds */
    mhla_chunk_tables tables;
    cl_mem chunks, tiles;
} mhla_causal_plan;

mhla_status mhla__causal_plan_setup(mhla_plan *plan);
void mhla__causal_plan_destroy(mhla_causal_plan *cp);
/* Grows the workspace to hold `slots` chunks (varlen calls). */
mhla_status mhla__causal_plan_reserve(mhla_plan *plan, size_t slots);
/* mhla_forward() of a causal (not varlen) plan, after the buffer checks. */
mhla_status mhla__causal_forward(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem out,
                                 cl_uint num_wait, const cl_event *wait, cl_event *done);

#endif /* MHLA_FORWARD_H */
