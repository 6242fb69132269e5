/* libmhla's plain C double-precision reference: docs/spec.md computed directly, for clarity, not speed.
 * Tests, the CLI's --check and the benchmarks compare every kernel against it. */
#ifndef MHLA_REFERENCE_H
#define MHLA_REFERENCE_H

#include "mhla.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! mhla_reference_forward() :
 * Computes the forward pass of `cfg` in double precision on the host.
 * q, k, v, mixing: float arrays as mhla_forward_host() takes them for MHLA_DTYPE_F32 (for f16 or
 * bf16 storage, pass the rounded values widened to float). out: double, same shape as v.
 * @return MHLA_OK, a validation status (explained in mhla_last_message()), or
 *         MHLA_ERR_OUT_OF_HOST_MEMORY. Thread-safe. */
MHLA_API mhla_status mhla_reference_forward(const mhla_config *cfg, const float *q, const float *k,
                                   const float *v, const float *mixing, double *out);

/*! mhla_reference_forward() handles causal configs too (cfg.causal = 1, varlen 0): the chunk form
 * of docs/spec.md "Causal MHLA", each batch element one sequence, mixing mixing_rows x mixing_rows
 * (only Mc[i][j <= i] read). */

/*! mhla_reference_forward_varlen() :
 * The causal reference over a packed batch (cfg.causal = 1, varlen = 1, batch 1, seq_t = total):
 * each sequence cu_seqlens[s] .. cu_seqlens[s+1]-1 chunked from its own start, as
 * mhla_forward_varlen() computes it, with the same cu_seqlens rules and messages.
 * @return MHLA_OK, a validation status (explained in mhla_last_message()), or
 *         MHLA_ERR_OUT_OF_HOST_MEMORY. Thread-safe. */
MHLA_API mhla_status mhla_reference_forward_varlen(const mhla_config *cfg, const float *q, const float *k,
                                          const float *v, const float *mixing,
                                          const int32_t *cu_seqlens, size_t num_seqs, double *out);

/*! mhla_reference_softmax() :
 * Softmax attention (docs/spec.md "Softmax attention") in double precision on the host, what
 * mhla_softmax_plan_create() plans compute: o_t = sum_s softmax_s(scale * q_t . k_s) v_s over all
 * tokens, with the max logit subtracted before exp so that large logits do not overflow.
 * Uses the same fields of `cfg` as mhla_softmax_plan_create() (scale 0 = Dk^-0.5).
 * q, k: float [B,N,H,Dk] (or BHND), v float [B,N,H,Dv], out double shaped like v.
 * O(N) scratch memory per query. A row whose logits are all -inf, or which meets a NaN, gives NaN.
 * @return MHLA_OK, a validation status (explained in mhla_last_message()), or
 *         MHLA_ERR_OUT_OF_HOST_MEMORY. Thread-safe. */
MHLA_API mhla_status mhla_reference_softmax(const mhla_config *cfg, const float *q, const float *k, const float *v,
                                   double *out);

/* ---- Backward (docs/spec.md "Backward") ----------------------------------------------------- */

/*! mhla_reference_backward() :
 * The exact gradients of mhla_reference_forward()'s output against dout = dL/dO, in double
 * precision: dq, dk (shaped like q, k), dv (like v) and, when dmixing is not NULL, dMc summed over
 * batch and heads (M x M; mixing_rows x mixing_rows for causal configs, zero above the diagonal and
 * beyond the chunks the sequences reach). Derived from the token-pair form of the forward (each
 * output a weighted sum over the pairs (t, s) the mode lets t see), not from block summaries, so it
 * checks the kernels without sharing their structure; O(N^2 (Dk + Dv)) per head, for small sizes.
 * Inputs are float arrays as for mhla_reference_forward(). Every element of the outputs is written.
 * @return MHLA_OK, a validation status (explained in mhla_last_message()), or
 *         MHLA_ERR_OUT_OF_HOST_MEMORY. Thread-safe. */
MHLA_API mhla_status mhla_reference_backward(const mhla_config *cfg, const float *q, const float *k,
                                             const float *v, const float *mixing, const float *dout,
                                             double *dq, double *dk, double *dv, double *dmixing);

/*! mhla_reference_backward_varlen() : the same over a packed causal batch (cfg.varlen = 1), each
 * sequence chunked from its own start, with mhla_forward_varlen()'s cu_seqlens rules. */
MHLA_API mhla_status mhla_reference_backward_varlen(const mhla_config *cfg, const float *q, const float *k,
                                                    const float *v, const float *mixing,
                                                    const int32_t *cu_seqlens, size_t num_seqs,
                                                    const float *dout, double *dq, double *dk, double *dv,
                                                    double *dmixing);

/*! mhla_reference_backward_tolerance() : docs/spec.md "Accuracy the tests hold": the largest
 * mhla_max_rel_err() each gradient may have against mhla_reference_backward() (f32 1e-4, f16 5e-3, bf16
 * 3e-2); 0 for an unknown dtype. */
MHLA_API double mhla_reference_backward_tolerance(mhla_dtype dtype);

/*! mhla_max_rel_err() :
 * The accuracy measure of docs/spec.md "Accuracy the tests hold": max |got - ref| / max |ref| over n
 * elements. Elements that are not finite must match in kind (NaN for NaN, +Inf for +Inf, -Inf for -Inf)
 * and are then skipped; a mismatch returns +Inf. A reference that is all zero compares absolute
 * differences. */
MHLA_API double mhla_max_rel_err(const float *got, const double *ref, size_t n);

/*! mhla_reference_tolerance() :
 * docs/spec.md "Accuracy the tests hold": the largest mhla_max_rel_err() allowed for storage type
 * `dtype` on sequences of `n` tokens (f32: 1e-5 up to 4096 tokens, 1e-4 beyond; f16: 2e-3;
 * bf16: 1.6e-2, against the reference run on the same rounded inputs); 0 for an unknown dtype. */
MHLA_API double mhla_reference_tolerance(mhla_dtype dtype, int64_t n);

/* ---- Diagnosis: global context collapse (the paper's Sec. 3, Fig. 3) -------------------------- */

/* The three attention matrices mhla_diagnose() compares, in its result arrays' order. */
typedef enum mhla_attention_kind {
    MHLA_ATTENTION_SOFTMAX = 0, /* softmax(q.k / sqrt(Dk)) over the keys (causal: s <= t) */
    MHLA_ATTENTION_LINEAR = 1,  /* phi: q~.k~ over all keys (causal: s <= t), rows normalised: M = 1 */
    MHLA_ATTENTION_MHLA = 2     /* Mc[b(t), b(s)] q~.k~ (causal: chunks, s <= t), rows normalised */
} mhla_attention_kind;
#define MHLA_ATTENTION_KINDS 3
#define MHLA_DIAGNOSE_MAX_ROWS 1024 /* the default limit on materialised query rows */

typedef struct mhla_diagnose_options {
    int64_t max_rows; /* query rows materialised per head (1..65536): every row when N <= max_rows */
    int sample;       /* N > max_rows: 1 = a uniform random sample of max_rows distinct query rows,
                         0 = refuse (MHLA_ERR_INVALID_SHAPE naming N and the limit) */
    uint32_t seed;    /* the sample's seed */
    double rank_rtol; /* numerical rank: singular values above rank_rtol * the largest (in (0, 1)) */
} mhla_diagnose_options;

/*! mhla_diagnose_options_init() : max_rows MHLA_DIAGNOSE_MAX_ROWS, sample 1, seed 1, rank_rtol 1e-5.
 * (1e-5 and not less: the singular values come from the eigenvalues of A A^T, accurate to about
 * rows * 1e-16 of the largest, i.e. to ~3e-7 of the largest singular value at 1024 rows.) */
MHLA_API void mhla_diagnose_options_init(mhla_diagnose_options *opt);

typedef struct mhla_diagnose_result {
    int64_t heads, n;  /* H and the tokens N */
    int64_t rows;      /* query rows of each matrix: N, or max_rows sampled ones */
    int sampled;       /* 1 when rows < N (a random sample of the queries) */
    double rank_rtol;
    /* Per head h and kind a, averaged over the batch: index h * MHLA_ATTENTION_KINDS + a. */
    double *rank;      /* numerical rank */
    double *entropy;   /* mean row entropy in nats: -sum_s p log p, p = |w| / sum |w| over the row's keys
                          (w the kind's weights; rows whose weights are all zero are left out) */
    double *sigma;     /* [h][a][rows]: the singular values, descending, averaged over the batch */
    /* What rank cannot exceed (non-causal): softmax min(rows, N); linear min(rows, Dk); MHLA
     * min(rows, sum over blocks of min(tokens in the block, Dk)). Causal: rows (the masked diagonal
     * chunks can have full rank). */
    int64_t rank_bound[MHLA_ATTENTION_KINDS];
} mhla_diagnose_result;

/*! mhla_diagnose() :
 * Materialises, in double precision on the host, the effective attention matrix of softmax
 * attention, linear attention and MHLA for q and k under `cfg` (its grid, blocks, feature map,
 * feature_eps, scale, causal and chunk; the normalizer only scales rows, which changes neither the
 * rank nor the normalised rows, so every normalizer gives the same diagnosis), and measures, per
 * head (averaged over the batch), each matrix's singular values, numerical rank and mean row
 * entropy (the paper's sparsity measure: lower is more focused). Softmax uses scale Dk^-0.5.
 * q, k: float [B,N,H,Dk] (or BHND); mixing as mhla_forward() takes it (M x M, or causal R x R).
 * Cost: O(rows^2 * N + rows^3) per head and kind (about a second per matrix at 1024 x 1024).
 * `opt` NULL takes mhla_diagnose_options_init()'s. `out` is filled and owns its arrays (release
 * with mhla_diagnose_result_free()); on failure it is zeroed.
 * @return MHLA_OK; MHLA_ERR_INVALID_ARGUMENT (NULL, bad option, a varlen config); the config's own
 *         validation status; MHLA_ERR_INVALID_SHAPE when N > max_rows and sampling is off;
 *         MHLA_ERR_OUT_OF_HOST_MEMORY. Thread-safe. */
MHLA_API mhla_status mhla_diagnose(const mhla_config *cfg, const float *q, const float *k, const float *mixing,
                                   const mhla_diagnose_options *opt, mhla_diagnose_result *out);

/*! mhla_diagnose_result_free() : releases the result's arrays and zeroes it; NULL is ignored. */
MHLA_API void mhla_diagnose_result_free(mhla_diagnose_result *res);

/* ------------------------------------------------------------------------------------------ */
/* Self-test: qualify a device                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* One path of mhla_selftest(): its name ("forward-2d/paper/relu-eps", "causal/f16",
 * "decoder/step", "softmax/f32", ...), whether it ran (status), its error against the double
 * reference and the tolerance docs/spec.md "Accuracy the tests hold" sets for it. */
typedef struct mhla_selftest_result {
    char path[64];
    mhla_status status;  /* MHLA_OK when the path ran; else why not (message) */
    double max_rel_err;  /* mhla_max_rel_err() against the reference; NaN when it did not run */
    double tolerance;    /* mhla_reference_tolerance() for the path's storage type and length */
    int passed;          /* ran, and max_rel_err <= tolerance */
    char message[256];   /* why it failed (first line of the library's message), or "" */
} mhla_selftest_result;

typedef void (*mhla_selftest_fn)(const mhla_selftest_result *result, void *user);

/*! mhla_selftest() :
 * Runs every path of the library on ctx's device at small shapes and checks each against the
 * double-precision reference: the non-causal forward over 1D, 2D and 3D grids with every
 * normalizer and feature map, both layouts and odd head dimensions, M = 1; the causal chunk form
 * (partial chunks, prefix GEMM blocks), packed varlen batches, the decoder (step by step and after
 * a prefill); f16 and bf16 storage on each; the softmax baseline. `quick` runs the default feature
 * map only on 2D and 3D grids and f32 softmax (about half the paths). Outputs start as NaN, so an
 * element a kernel forgets to write fails. Plans use the context's tuning (mhla_context_set_tuning
 * picks another row, e.g. "row=gpu"). `fn` (may be NULL) is called after each path with its
 * result; *passed and *failed (may be NULL) get the counts. A path that fails does not stop the
 * others. Takes seconds on a CPU; kernels are built as for any plan (the program cache applies).
 * @return MHLA_OK when the run completed (whatever the paths' outcome: read *failed),
 *         MHLA_ERR_INVALID_ARGUMENT for NULL ctx, MHLA_ERR_OUT_OF_HOST_MEMORY.
 * Thread-safety: shares the context (include/mhla.h, "Thread safety"). */
MHLA_API mhla_status mhla_selftest(mhla_context *ctx, int quick, mhla_selftest_fn fn, void *user, size_t *passed,
                                   size_t *failed);

/*! mhla_selftest_config() :
 * One configuration against the double reference, as mhla_selftest() runs its paths: random
 * inputs (deterministic in seed), a NaN-filled output, a plan of `cfg` on ctx (its tuning
 * included; the softmax baseline when `softmax`), and *out filled like a path's result (path
 * "forward", "causal" or "softmax"). What `mhla tune` runs on every candidate before timing it.
 * Keep cfg small: the reference is O(N * Dk * Dv) per head in double precision on the host.
 * @return MHLA_OK when it ran (read out->passed); MHLA_ERR_INVALID_ARGUMENT for NULL arguments,
 *         MHLA_ERR_UNSUPPORTED for varlen configurations, or the configuration's own refusal.
 * Thread-safety: shares the context. */
MHLA_API mhla_status mhla_selftest_config(mhla_context *ctx, const mhla_config *cfg, int softmax, uint32_t seed,
                                          mhla_selftest_result *out);

#ifdef __cplusplus
}
#endif
#endif /* MHLA_REFERENCE_H */
