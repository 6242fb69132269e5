/* Internal to the backward pass (host/backward*.c): its kernels and workspace, made on a plan's
 * first mhla_backward() call and kept with the plan. */
#ifndef MHLA_BACKWARD_H
#define MHLA_BACKWARD_H

#include "causal.h"

/* Staging buffers of mhla_backward_host(), beside the forward's q, k, v and mixing ones. */
enum { MHLA_BWD_DOUT, MHLA_BWD_DQ, MHLA_BWD_DK, MHLA_BWD_DV, MHLA_BWD_DMIX, MHLA_BWD_STAGES };

typedef struct mhla_bwd {
    mhla_config cfg;   /* the plan's, resolved */
    mhla_tiles tiles;  /* the plan's, with the backward's bwd_ve and bwd_wg */
    cl_kernel k_scalars, k_official_dz, k_dq, k_dkv, k_transpose, k_dmixing, k_tsum;
    /* the forward's read-out kernel (kernels/output.cl, no normalizer) for the products with the
     * summaries: `_t` built with Dk and Dv swapped (S x over transposed summaries: dq's S~ dO, dk's
     * dS v), `_n` with the plan's (dv = dS^T k~) */
    cl_kernel k_out_t, k_out_n;
    mhla_tiles tiles_t, tiles_n;
    size_t lws_token[3], lws_zcol[3], lws_out_t[3], lws_out_n[3], lws_tsum[3];
    cl_mem tsum; /* a transposed summary (S~^T, then dS^T), rows of B*H*Dv*(Dk+1) floats */
    cl_mem grad;  /* G_i, laid out as the block summaries */
    cl_mem dsum;  /* dS_b = sum_i Mc[i,b] G_i */
    cl_mem mix_t; /* Mc^T */
    cl_mem inv, r; /* paper/official: 1/den_t and dL/dden_t per token ([M][B*H][Nb]) */
    cl_mem rmix;  /* official: R = Mc^T r */
    cl_mem stage[MHLA_BWD_STAGES];
    /* causal plans (host/backward_causal.c): the chunk table and per-(chunk, head) slots of
     * Dk x (Dv+1) floats (S, P, G, dS), grown to the largest table a call has needed */
    cl_kernel k_bc_summary, k_bc_mix, k_bc_scalars, k_bc_grad, k_bc_dq, k_bc_dkv, k_bc_diag, k_bc_dmixing;
    size_t lws_bc_token[3], lws_bc_tile[3];
    cl_mem slots_s, slots_p, slots_g, slots_ds, diag;
    size_t entries_cap; /* chunk-table entries the buffers hold */
    int32_t *tab_host; /* the chunk table of the last call, copied into a buffer per call */
} mhla_bwd;

/* The plan's backward, made on first use (kernels built, workspace counted in the plan's). */
mhla_status mhla__backward_get(mhla_plan *plan, mhla_bwd **out);
/* A workspace buffer of the backward, counted in mhla_plan_workspace_size(). */
mhla_status mhla__backward_buffer(mhla_plan *plan, size_t bytes, const char *what, cl_mem *out);
/* Builds `file` with a BWD_WG (b->tiles.bwd_wg) its reduction kernel `name` runs with, rebuilding
 * once smaller if the kernel reports less; *kernel and *prog receive it and its program. */
mhla_status mhla__backward_reduce_kernel(mhla_plan *plan, mhla_bwd *b, mhla_kernel_file file, const char *name,
                                         cl_kernel *kernel, cl_program *prog);
/* out[i*ldo + b] (+)= sum_x a[i][x] bm[b][x] for i, b < m: dMc's fixed-order reduction. */
mhla_status mhla__backward_dmixing(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t x, cl_mem out,
                                   cl_int m, cl_int ldo, cl_int accumulate);
/* Non-causal: the forward's summaries recomputed, then every stage of the backward. */
mhla_status mhla__backward_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                   cl_mem dout, cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                   const cl_event *wait);
/* Causal plans (host/backward_causal.c): setup, teardown, and the chunk form's backward over
 * every batch element (cu_seqlens NULL) or over packed sequences. */
mhla_status mhla__backward_causal_setup(mhla_plan *plan, mhla_bwd *b);
void mhla__backward_causal_destroy(mhla_bwd *b);
mhla_status mhla__backward_causal_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v,
                                          cl_mem mixing, const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout,
                                          cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                          const cl_event *wait);

#endif /* MHLA_BACKWARD_H */
