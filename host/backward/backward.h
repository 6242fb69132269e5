/* host/backward: mhla_backward's kernels and workspace, made on a plan's first call and kept with
 * the plan (backward/backward.c non-causal, backward_causal.c the chunk form, dmixing.c what both
 * share, backward_call.c the public calls). Depends on forward/ and what is below it. */
#ifndef MHLA_BACKWARD_H
#define MHLA_BACKWARD_H

#include "forward/forward.h"


/* Staging buffers of mhla_backward_host(), beside the forward's q, k, v and mixing ones. */
enum { MHLA_BWD_DOUT, MHLA_BWD_DQ, MHLA_BWD_DK, MHLA_BWD_DV, MHLA_BWD_DMIX, MHLA_BWD_STAGES };

/* One entry of the causal backward's chunk table, one chunk of a batch element or packed sequence:
 * kernels/backward_causal*.cl read the table as rows of 8 ints in this order (ENT(k, f)). */
typedef struct mhla_bc_entry {
    cl_int first_token;  /* the chunk's first token in the tensors' rows */
    cl_int tokens;       /* its tokens: C, fewer for a sequence's last */
    cl_int chunk;        /* its index i in its sequence */
    cl_int first_entry;  /* the entry of its sequence's chunk 0 */
    cl_int chunks;       /* chunks of its sequence */
    cl_int batch;        /* its batch element (0 for packed sequences) */
    cl_int slot_batch;   /* batch elements in the forward's slots (1 for packed sequences) */
    cl_int unused;       /* rows of 8 */
} mhla_bc_entry;
_Static_assert(sizeof(mhla_bc_entry) == 8 * sizeof(cl_int), "the kernels read rows of 8 ints");

typedef struct mhla_bwd {
    mhla_config cfg;   /* the plan's, resolved */
    mhla_tiles tiles;  /* the plan's, with the backward's bwd_* */
    /* non-causal plans (backward/backward.c): kernels/backward_readout.cl's read-outs, the z columns
     * and transposed summaries, dMc in two steps (partial sums per chunk, then their sum) */
    cl_kernel k_dq, k_dkv, k_official_dz, k_official_dz_sum, k_tsum, k_transpose, k_dmixing,
        k_dmix_reduce, k_gsum; /* k_gsum: block_summary_weighted, the gradient summaries G */
    cl_kernel k_group_sum; /* grouped key/value heads: G summed over each kv head's query heads */
    /* tiled plans whose read-outs fit (tiles.bt_tq > 0; backward/backward_tiled.c): kernels/backward_tiled.cl's
     * read-outs in groups of wg_bt work-items; k_gsum is then summary_tiled_weighted */
    cl_kernel k_dq_tiled, k_dkv_tiled;
    size_t wg_bt;
    size_t lws_dq[3], lws_dkv[3], lws_zpart[3], lws_zsum[3], lws_tsum[3], lws_group[3];
    cl_mem dz_partial;       /* official: dS's z column's parts, dz_parts x M x B*H x Dk floats */
    cl_int dz_parts, dz_part_len; /* parts of at most dz_part_len tokens per block */
    size_t rows_ext[3];    /* dq's read-out: (ceil(Nb / BWD_RT), B*H, M) of the query grid */
    size_t kv_rows_ext[3]; /* dk and dv's: the same of the key/value grid (B*H_kv heads) */
    cl_mem tsum; /* a transposed summary (S~^T, then dS^T), rows of B*H*Dv*(Dk+1) floats */
    cl_mem dmix_part; /* dMc's partial sums: dmix_chunks x M x M floats */
    size_t dmix_chunks, dmix_len; /* chunks of at most dmix_len floats of the summed rows */
    cl_mem grad;  /* G_i, laid out as the block summaries (of the B*H query heads) */
    cl_mem grad_kv; /* grouped heads: G_i summed per key/value head (else grad itself) */
    cl_mem dsum;  /* dS_b = sum_i Mc[i,b] G_i */
    cl_mem mix_t; /* Mc^T */
    cl_mem inv, r; /* per token: 1/den_t (causal plans; non-causal plans: scale/den_t, G's weights) and
                      dL/dden_t (causal: paper/official; non-causal plans keep both as [M][B*H][Nb]) */
    cl_mem rmix;  /* official: R = Mc^T r */
    cl_mem stage[MHLA_BWD_STAGES];
    /* causal plans (backward/backward_causal.c): the chunk table and per-(chunk, head) slots of
     * Dk x (Dv+1) floats (S, P, G, dS), grown to the largest table a call has needed */
    cl_kernel k_bc_summary, k_bc_scalars, k_bc_grad, k_bc_dq, k_bc_dk, k_bc_dv, k_bc_diag, k_bc_dmix_finish;
    cl_kernel k_bc_dmix_reduce_finish; /* one sequence: dMc's partial sums added and finished in one launch */
    cl_kernel k_bc_prefix, k_bc_suffix; /* causal_prefix.cl's causal_prefix and causal_suffix */
    cl_kernel k_bc_transpose, k_bc_from_forward;
    size_t lws_bc_token[3], lws_bc_tile[3], lws_bc_mix;
    size_t wg_bc_readout[3]; /* work-items of bc_dq, bc_dk and bc_dv's groups (their tiles) */
    cl_kernel k_bc_dqkv;     /* the fused read-out (tiles.bct_fc > 0), in place of the three and bc_diag */
    cl_kernel k_bc_dqkv_tiled; /* GPU rows with tiles.bc_one: the tiled dq, dk and dv in one launch */
    cl_kernel k_bc_summary_tiled, k_bc_grad_tiled; /* GPU rows (bc_sq and cs_tk): in place of bc_summary, bc_grad */
    size_t wg_bc_fused;      /* its group's work-items */
    cl_mem slots_s, slots_p, slots_g, slots_ds, slots_gt, slots_dst, diag; /* S^T, P^T, G, dS, G^T, dS^T */
    /* grouped key/value heads: the chunk form's backward runs on k and v copied to the H query heads
     * (wide[0], wide[1]) and writes dk and dv of H heads (wide[2], wide[3]), summed per key/value
     * head afterwards (bwd_kv_expand, bwd_kv_sum) */
    cl_kernel k_kv_expand, k_kv_sum;
    cl_mem wide[4];
    size_t entries_cap; /* chunk-table entries the buffers hold */
    mhla_bc_entry *table; /* the chunk table of the last call, copied into a buffer per call */
    cl_int4 *mix_tiles;  /* its prefix tiles, then as many suffix tiles (causal_prefix.cl) */
    size_t n_mix_tiles;
} mhla_bwd;

/* The backward's half of a plan variant's table (forward/forward.h, mhla_plan_ops): its kernels and
 * workspace, made on the first call, and one backward pass on the buffers b (backward_call.c's
 * order: q, k, v, mixing, dout, dq, dk, dv, dmixing); `refusal` where the variant has none. */
typedef struct mhla_bwd_ops {
    mhla_status (*setup)(mhla_plan *plan, mhla_bwd *b);
    mhla_status (*enqueue)(mhla_plan *plan, mhla_bwd *b, const cl_mem bufs[9], const int32_t *cu_seqlens,
                           size_t num_seqs, cl_uint num_wait, const cl_event *wait);
    const char *refusal;
} mhla_bwd_ops;
const mhla_bwd_ops *mhla__backward_ops(const mhla_plan *plan);

/* The plan's backward, made on first use (kernels built, workspace counted in the plan's). */
mhla_status mhla__backward_get(mhla_plan *plan, mhla_bwd **out);
/* A workspace buffer of the backward, counted in mhla_plan_workspace_size(). */
mhla_status mhla__backward_buffer(mhla_plan *plan, size_t bytes, const char *what, cl_mem *out);
/* dMc's kernels and partial sums (kernels/backward_mixing.cl) for products of up to `rows` rows of
 * up to xmax floats, plus a second pair's of up to x2max floats (0: none); *prog receives the
 * program. */
mhla_status mhla__backward_dmixing_setup(mhla_plan *plan, mhla_bwd *b, size_t rows, size_t xmax, size_t x2max,
                                         cl_program *prog);
/* out[i*ldo + b] (+)= sum_x a[off + i*x + ..] bm[off + b*x + ..] for i < m, b < cols: dMc's
 * fixed-order reduction (m and cols at most the setup's rows); `lower`: only the pairs b < i are
 * needed (others may read as 0). */
mhla_status mhla__backward_dmixing(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t off, size_t x,
                                   cl_mem out, cl_int m, cl_int cols, cl_int ldo, cl_int accumulate, cl_int lower);
/* Its first launch alone: the partial sums in b->dmix_part, [*pieces][m][cols], for the caller to add
 * in piece order (the causal backward's bc_dmix_reduce_finish). */
mhla_status mhla__backward_dmixing_parts(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t off, size_t x,
                                         cl_int m, cl_int cols, cl_int lower, cl_int *pieces);
/* The non-causal forms' dMc[i,j] = <G_i, S_j> over the key/value heads (b->grad_kv, plan->summary),
 * with the official normalizer's sum_p r_{i,p} dots_{j,p} (b->r, plan->dots) in the same two
 * launches: the products' partial sums over both pairs, then one reduction. */
mhla_status mhla__backward_dmixing_noncausal(mhla_plan *plan, mhla_bwd *b, cl_mem dmixing);
/* Non-causal: the forward's summaries recomputed, then every stage of the backward. */
mhla_status mhla__backward_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                   cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                   const cl_event *wait);
/* b->mix_t = Mc^T (M_kv x M), for dS = Mc^T G (bwd_transpose; backward/dmixing.c). */
mhla_status mhla__backward_mixing_transpose(mhla_plan *plan, mhla_bwd *b, cl_mem mixing);
/* Tiled plans (backward/backward_tiled.c): the tiled read-outs and gradient summaries where the
 * tuning asks for them and they fit (else tiles.bt_tq is 0 and nothing is made), and the stages
 * after the forward's summaries and mixtures with them. */
mhla_status mhla__backward_tiled_setup(mhla_plan *plan, mhla_bwd *b);
/* The official normalizer's dS z column and dq's R z term, from b->rmix (official.c). */
mhla_status mhla__backward_official_dz(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem dq);
/* Whether a tiled plan's dq read-out mixes the forward's summaries itself (their M_kv rows within
 * bt_fuse, blocks whole, the paper normalizer or none), so that the forward's mixing is not run. */
int mhla__backward_tiled_mixes(const mhla_plan *plan, const mhla_bwd *b);
/* ", S~ for dq mixed inside the read-out (bt_fuse 4: 8.1 MiB read again)" and the like for each
 * tiled read-out whose matrices bt_fuse admits, or "" (mhla_plan_tuning's backward part). */
void mhla__backward_tiled_describe_mixing(const mhla_plan *plan, const mhla_bwd *b, char *buf, size_t size);
/* mixed: whether plan->mixed holds the forward's mixtures (kept from a forward), else the dq
 * read-out mixes the summaries (mhla__backward_tiled_mixes). */
mhla_status mhla__backward_tiled_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                         cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, int mixed);
/* Causal plans (backward/backward_causal.c): setup, teardown, and the chunk form's backward over
 * every batch element (cu_seqlens NULL) or over packed sequences. */
mhla_status mhla__backward_causal_setup(mhla_plan *plan, mhla_bwd *b);
void mhla__backward_causal_destroy(mhla_bwd *b);
mhla_status mhla__backward_causal_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v,
                                          cl_mem mixing, const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout,
                                          cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                          const cl_event *wait);

#endif /* MHLA_BACKWARD_H */
