/* The causal chunk form's backward (kernels/backward_causal*.cl): a table of chunks (every batch
 * element's, or every packed sequence's), the chunk summaries recomputed, the prefixes P_i, the
 * gradient summaries G_i and dS_j = sum_{i>j} Mc[i,j] G_i per (chunk, head) slot, the per-token
 * read-outs, and dMc (lower triangle) by a fixed-order reduction. */
#include "backward/backward.h"

#include <stdlib.h>
#include <string.h>

void mhla__backward_causal_destroy(mhla_bwd *b)
{
    cl_kernel kernels[] = {b->k_bc_summary, b->k_bc_prefix, b->k_bc_suffix, b->k_bc_transpose, b->k_bc_scalars,
                           b->k_bc_grad,    b->k_bc_dq,     b->k_bc_dk,     b->k_bc_dv,        b->k_bc_diag,
                           b->k_bc_dmix_finish, b->k_bc_from_forward};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    cl_mem mems[] = {b->slots_s, b->slots_p, b->slots_g, b->slots_ds, b->slots_gt, b->slots_dst, b->diag};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    mhla__free(b->tab_host);
    mhla__free(b->mix_tiles);
}

/* bc_dq, bc_dk, bc_dv (and bc_dmix_finish, bc_diag from the same program): built for tiles that fit
 * the device (tune/tiling.c); a built kernel that reports fewer work-items or more local memory than its tiles need
 * (rusticl on llvmpipe) tightens the fit for another build, as the forward's causal read-out does. */
static mhla_status readout_kernels(mhla_plan *plan, mhla_bwd *b)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_config *c = &plan->cfg;
    cl_program prog = NULL;
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    cl_kernel *ks[3] = {&b->k_bc_dq, &b->k_bc_dk, &b->k_bc_dv};
    static const char *const names[3] = {"bc_dq", "bc_dk", "bc_dv"};
    for (int attempt = 0;; ++attempt) {
        MHLA_FORWARD_IF_ERROR(st, mhla__tiles_backward_causal(ctx, c, &plan->causal->kern->tuning, &fit, &b->tiles));
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_CAUSAL_READOUT, c, &b->tiles, &prog));
        int refit = 0;
        for (int i = 0; i < 3; ++i) {
            MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, names[i], ks[i]));
            const int64_t dw = i == 2 ? c->dv : c->dk, dx = i == 2 ? c->dk : c->dv;
            b->wg_bc_readout[i] = mhla__bc_readout_wg(&b->tiles, dw);
            const int r =
                mhla__fit_check(ctx, *ks[i], b->wg_bc_readout[i], mhla__bc_readout_local(&b->tiles, dx), &fit);
            MHLA_FAIL_IF(st, r < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo(%s) failed on %s", names[i],
                         ctx->device_name);
            refit |= r;
        }
        if (!refit)
            break;
        for (int i = 0; i < 3; ++i) {
            clReleaseKernel(*ks[i]);
            *ks[i] = NULL;
        }
        MHLA_FAIL_IF(st, attempt == 7, ctx, MHLA_ERR_UNSUPPORTED,
                     "the causal backward's read-outs do not fit %s even with %d-token groups", ctx->device_name,
                     b->tiles.bct_tq);
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_dmix_finish", &b->k_bc_dmix_finish));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_diag", &b->k_bc_diag));
    /* bc_diag's parts per (chunk, head): the row's dg_parts, at most a chunk's rows and one work-group */
    {
        const int64_t rows = c->chunk < plan->shape.n ? c->chunk : plan->shape.n;
        int64_t parts = plan->causal->kern->tuning.dg_parts;
        parts = parts < 1 ? 1 : parts > rows ? rows : parts;
        b->tiles.bct_dg = (int)mhla__local_size(ctx, b->k_bc_diag, (size_t)parts);
    }
cleanup:
    return st;
}

mhla_status mhla__backward_causal_setup(mhla_plan *plan, mhla_bwd *b)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    cl_program prog = NULL;
    const mhla_config *c = &plan->cfg;
    const size_t wg = (size_t)b->tiles.wg, heads = (size_t)c->heads;

    /* The read-outs first: their fit sets the tiles every program of the backward is built with. */
    MHLA_FORWARD_IF_ERROR(st, readout_kernels(plan, b));
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_CAUSAL, c, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_summary", &b->k_bc_summary));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_grad", &b->k_bc_grad));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_transpose", &b->k_bc_transpose));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_from_forward", &b->k_bc_from_forward));
    if (c->normalizer == MHLA_NORMALIZER_PAPER)
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_scalars", &b->k_bc_scalars));
    /* P_i and dS_j: the forward's register-tiled prefix kernel and its transposed twin, over rows
     * of a whole chunk entry's slots (every head) */
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_CAUSAL_PREFIX, c, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_prefix", &b->k_bc_prefix));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_suffix", &b->k_bc_suffix));
    b->lws_bc_mix = mhla__local_size(ctx, b->k_bc_prefix, wg);
    if (mhla__local_size(ctx, b->k_bc_suffix, wg) < b->lws_bc_mix)
        b->lws_bc_mix = mhla__local_size(ctx, b->k_bc_suffix, wg);
    /* dMc below the diagonal: each sequence's <G_i, S_j> with the non-causal tiled product */
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing_setup(plan, b, (size_t)c->mixing_rows,
                                                           heads * (size_t)c->dk * (size_t)(c->dv + 1), &prog));
    const size_t tok[3] = {(size_t)(c->chunk < plan->shape.n ? c->chunk : plan->shape.n), heads, 1};
    if (b->k_bc_scalars)
        mhla__local_size_3d(ctx, b->k_bc_scalars, tok, wg, b->lws_bc_token);
    const size_t tile[3] = {(size_t)(c->dk / b->tiles.bct_sr), heads, 1};
    mhla__local_size_3d(ctx, b->k_bc_grad, tile, wg, b->lws_bc_tile);
    if (c->normalizer == MHLA_NORMALIZER_PAPER) {
        const size_t bytes = (size_t)plan->shape.bh * (size_t)plan->shape.n * sizeof(float);
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bytes, "the per-token 1/den", &b->inv));
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bytes, "the per-token dL/dden", &b->r));
    }
cleanup:
    return st;
}

/* The chunk table of one call into b->tab_host, and the mixtures' tiles into b->mix_tiles: runs of
 * up to mix_mr consecutive chunks of one sequence, starting at multiples of mix_mr as the forward's;
 * the prefix tile {first entry, rows, i, entry of chunk 0} and the suffix tile {chunks of the
 * sequence, rows, i, entry of chunk 0}. Returns the entries, *tiles the tiles; `write` 0 counts them
 * only (before the arrays are sized for them: a call with more chunks than the last must not write
 * past them). */
static size_t fill_table(const mhla_plan *plan, mhla_bwd *b, const int32_t *cu, size_t num_seqs, int write,
                         size_t *tiles)
{
    const int64_t C = plan->cfg.chunk, mr = b->tiles.mix_mr;
    size_t k = 0, nt = 0;
    const size_t nseq = cu ? num_seqs : (size_t)plan->cfg.batch;
    for (size_t s = 0; s < nseq; ++s) {
        const int64_t t0 = cu ? cu[s] : 0, len = cu ? (int64_t)cu[s + 1] - cu[s] : plan->shape.n;
        const int64_t m = (len + C - 1) / C;
        const size_t base = k;
        for (int64_t i = 0; i < m; ++i, ++k) {
            if (i % mr == 0) {
                const int64_t rows = m - i < mr ? m - i : mr;
                if (write) {
                    cl_int4 *pt = &b->mix_tiles[nt], *st = pt + b->n_mix_tiles;
                    pt->s[0] = (cl_int)k, st->s[0] = (cl_int)m;
                    pt->s[1] = st->s[1] = (cl_int)rows;
                    pt->s[2] = st->s[2] = (cl_int)i;
                    pt->s[3] = st->s[3] = (cl_int)base;
                }
                ++nt;
            }
            if (!write)
                continue;
            int32_t *e = b->tab_host + k * 8;
            e[0] = (int32_t)(t0 + i * C);
            e[1] = (int32_t)(len - i * C < C ? len - i * C : C);
            e[2] = (int32_t)i;
            e[3] = (int32_t)base;
            e[4] = (int32_t)m;
            e[5] = cu ? 0 : (int32_t)s;
            e[6] = cu ? 1 : (int32_t)plan->cfg.batch; /* batch elements in the forward's slots */
            e[7] = 0;
        }
    }
    *tiles = nt;
    return k;
}

/* Buffers for `entries` chunks (kept, grown when a varlen call needs more), and room for this
 * call's `tiles` (their count places the suffix tiles). */
static mhla_status reserve(mhla_plan *plan, mhla_bwd *b, size_t entries, size_t tiles)
{
    mhla_status st = MHLA_OK;
    if (entries <= b->entries_cap && b->tab_host)
        goto tiles;
    const size_t slot = (size_t)plan->cfg.heads * (size_t)plan->cfg.dk * (size_t)(plan->cfg.dv + 1) * sizeof(float);
    cl_mem *slots[] = {&b->slots_s, &b->slots_p, &b->slots_g, &b->slots_ds, &b->slots_gt, &b->slots_dst};
    static const char *const what[] = {"the chunk summaries S",           "the prefixes P",
                                       "the gradient summaries G",        "the mixed gradient summaries dS",
                                       "the gradient summaries G^T",      "the mixed gradient summaries dS^T"};
    const size_t nslots = sizeof slots / sizeof slots[0];
    /* The old buffers leave the count; the queue keeps them alive for work already enqueued. */
    for (size_t i = 0; i < nslots; ++i)
        if (*slots[i]) {
            plan->workspace_bytes -= b->entries_cap * slot;
            clReleaseMemObject(*slots[i]);
            *slots[i] = NULL;
        }
    if (b->diag) {
        plan->workspace_bytes -= b->entries_cap * (size_t)plan->cfg.heads * (size_t)b->tiles.bct_dg * sizeof(float);
        clReleaseMemObject(b->diag);
        b->diag = NULL;
    }
    mhla__free(b->tab_host);
    b->entries_cap = 0;
    b->tab_host = mhla__malloc(entries * 8 * sizeof(int32_t));
    MHLA_FAIL_IF(st, !b->tab_host, plan->ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the chunk table");
    for (size_t i = 0; i < nslots; ++i)
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, entries * slot, what[i], slots[i]));
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan,
                                                    entries * (size_t)plan->cfg.heads * (size_t)b->tiles.bct_dg *
                                                        sizeof(float),
                                                    "the diagonal terms of dMc", &b->diag));
    b->entries_cap = entries;
tiles:
    if (tiles != b->n_mix_tiles || !b->mix_tiles) {
        mhla__free(b->mix_tiles);
        b->n_mix_tiles = tiles;
        b->mix_tiles = mhla__malloc(2 * tiles * sizeof(cl_int4));
        MHLA_FAIL_IF(st, !b->mix_tiles, plan->ctx, MHLA_ERR_OUT_OF_HOST_MEMORY,
                     "out of host memory for the mixture tiles");
    }
cleanup:
    return st;
}

/* Arguments 0..9 of bc_scalars, bc_dq, bc_dk and bc_dv: q, k, v, dO, Mc and its rows, the chunk
 * table, a slot buffer (P^T, dS^T or dS) and the per-token normalizer terms. */
static mhla_status token_args(mhla_context *ctx, cl_kernel kr, const cl_mem in[4], cl_mem mixing, cl_int lda,
                              cl_mem tab, cl_mem slots, cl_mem inv, cl_mem r)
{
    mhla_status st = MHLA_OK;
    for (cl_uint i = 0; i < 4; ++i)
        MHLA_SET_ARG(st, ctx, kr, i, in[i]);
    MHLA_SET_ARG(st, ctx, kr, 4, mixing);
    MHLA_SET_ARG(st, ctx, kr, 5, lda);
    MHLA_SET_ARG(st, ctx, kr, 6, tab);
    MHLA_SET_ARG(st, ctx, kr, 7, slots);
    MHLA_SET_ARG(st, ctx, kr, 8, inv);
    MHLA_SET_ARG(st, ctx, kr, 9, r);
cleanup:
    return st;
}

mhla_status mhla__backward_causal_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v,
                                          cl_mem mixing, const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout,
                                          cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                          const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_config *c = &plan->cfg;
    char msg[512];
    cl_mem tab = NULL, mix_tab = NULL, mix_tab_suffix = NULL;
    if (cu_seqlens) {
        st = mhla__cu_seqlens_check(cu_seqlens, num_seqs, plan->shape.n, c->chunk, c->mixing_rows, msg, sizeof msg);
        MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "mhla_backward_varlen: %s", msg);
    }
    size_t ntiles = 0;
    const size_t entries = fill_table(plan, b, cu_seqlens, num_seqs, 0, &ntiles);
    if (entries == 0) /* every packed sequence empty: nothing to differentiate */
        goto cleanup;
    MHLA_FORWARD_IF_ERROR(st, reserve(plan, b, entries, ntiles));
    fill_table(plan, b, cu_seqlens, num_seqs, 1, &ntiles);
    /* The table goes to the device as the forward's chunk tables do: a buffer made from the host
     * copy (no queue command, so nothing here waits for the caller's events), released once
     * enqueued (the runtime keeps it until the kernels that use it are done). */
    cl_int err = CL_SUCCESS;
    tab = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, entries * 8 * sizeof(int32_t),
                         b->tab_host, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (the chunk table)");
    const float feps = c->feature_eps, scale = c->scale, eps = c->eps;
    const cl_int lda = (cl_int)c->mixing_rows, heads = (cl_int)c->heads, nent = (cl_int)entries;
    const size_t ch = (size_t)(c->chunk < plan->shape.n ? c->chunk : plan->shape.n);
    const size_t tok[3] = {ch, (size_t)heads, entries};
    /* bc_summary, bc_grad: BCT_SR rows each */
    const size_t tile[3] = {(size_t)(c->dk / b->tiles.bct_sr), (size_t)heads, entries};
    /* the mixtures: MIX_MR chunks x PRE_VE * MIX_NV floats of their entries' slots per work-item, the
     * tiles the fast dimension (kernels/causal_prefix.cl) */
    const cl_long width = (cl_long)heads * c->dk * (c->dv + 1);
    const cl_int n_tiles = (cl_int)ntiles, no_gemm = 0;
    const size_t cols = (size_t)b->tiles.pre_ve * (size_t)b->tiles.mix_nv;
    const size_t mext[3] = {ntiles, ((size_t)width + cols - 1) / cols, 1};
    const size_t mloc[3] = {ntiles < b->lws_bc_mix ? ntiles : b->lws_bc_mix, 1, 1};
    mix_tab = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, ntiles * sizeof(cl_int4),
                                     b->mix_tiles, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (the prefix tiles)");
    mix_tab_suffix = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                            ntiles * sizeof(cl_int4), b->mix_tiles + ntiles, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (the suffix tiles)");
    cl_mem inv = b->inv ? b->inv : b->diag, r = b->r ? b->r : b->diag; /* unread without a normalizer */
    const cl_mem in[4] = {q, k, v, dout};
    cl_kernel kr;

    /* S and P: kept from the plan's last forward of these buffers (mhla_plan_save_for_backward; plain
     * causal plans only), else recomputed */
    const mhla_causal_plan *cp = plan->causal;
    const int reuse = !cu_seqlens && plan->saved && plan->saved_in[0] == q && plan->saved_in[1] == k &&
                      plan->saved_in[2] == v && plan->saved_in[3] == mixing && cp && cp->sums && cp->pref;
    if (reuse) {
        const size_t full[3] = {(size_t)c->dk, (size_t)heads, entries};
        size_t floc[3];
        mhla__local_size_3d(ctx, b->k_bc_from_forward, full, (size_t)b->tiles.wg, floc);
        kr = b->k_bc_from_forward;
        MHLA_SET_ARG(st, ctx, kr, 0, cp->sums);
        MHLA_SET_ARG(st, ctx, kr, 1, cp->pref);
        MHLA_SET_ARG(st, ctx, kr, 2, tab);
        MHLA_SET_ARG(st, ctx, kr, 3, b->slots_s);
        MHLA_SET_ARG(st, ctx, kr, 4, b->slots_p);
        MHLA_SET_ARG(st, ctx, kr, 5, heads);
        MHLA_SET_ARG(st, ctx, kr, 6, nent);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, full, floc, num_wait, wait, NULL, "bc_from_forward"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    } else {
        plan->saved = 0;
        kr = b->k_bc_summary;
        MHLA_SET_ARG(st, ctx, kr, 0, k);
        MHLA_SET_ARG(st, ctx, kr, 1, v);
        MHLA_SET_ARG(st, ctx, kr, 2, tab);
        MHLA_SET_ARG(st, ctx, kr, 3, b->slots_s);
        MHLA_SET_ARG(st, ctx, kr, 4, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 5, feps);
        MHLA_SET_ARG(st, ctx, kr, 6, nent);
        MHLA_FORWARD_IF_ERROR(st,
                              mhla__launch(ctx, kr, 3, tile, b->lws_bc_tile, num_wait, wait, NULL, "bc_summary"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        kr = b->k_bc_prefix; /* P_i = sum_{j<i} Mc[i,j] S_j, every sum in the kernel (no CLBlast blocks) */
        MHLA_SET_ARG(st, ctx, kr, 0, b->slots_s);
        MHLA_SET_ARG(st, ctx, kr, 1, mixing);
        MHLA_SET_ARG(st, ctx, kr, 2, mix_tab);
        MHLA_SET_ARG(st, ctx, kr, 3, b->slots_p);
        MHLA_SET_ARG(st, ctx, kr, 4, lda);
        MHLA_SET_ARG(st, ctx, kr, 5, width);
        MHLA_SET_ARG(st, ctx, kr, 6, no_gemm);
        MHLA_SET_ARG(st, ctx, kr, 7, n_tiles);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 2, mext, mloc, 0, NULL, NULL, "causal_prefix (backward)"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    if (b->k_bc_scalars) {
        kr = b->k_bc_scalars;
        MHLA_FORWARD_IF_ERROR(st, token_args(ctx, kr, in, mixing, lda, tab, b->slots_p, inv, r));
        MHLA_SET_ARG(st, ctx, kr, 10, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 11, feps);
        MHLA_SET_ARG(st, ctx, kr, 12, scale);
        MHLA_SET_ARG(st, ctx, kr, 13, eps);
        MHLA_SET_ARG(st, ctx, kr, 14, nent);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_bc_token, 0, NULL, NULL, "bc_scalars"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    }
    kr = b->k_bc_grad;
    MHLA_SET_ARG(st, ctx, kr, 0, q);
    MHLA_SET_ARG(st, ctx, kr, 1, dout);
    MHLA_SET_ARG(st, ctx, kr, 2, inv);
    MHLA_SET_ARG(st, ctx, kr, 3, r);
    MHLA_SET_ARG(st, ctx, kr, 4, tab);
    MHLA_SET_ARG(st, ctx, kr, 5, b->slots_g);
    MHLA_SET_ARG(st, ctx, kr, 6, b->slots_gt);
    MHLA_SET_ARG(st, ctx, kr, 7, plan->grid);
    MHLA_SET_ARG(st, ctx, kr, 8, feps);
    MHLA_SET_ARG(st, ctx, kr, 9, scale);
    MHLA_SET_ARG(st, ctx, kr, 10, nent);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tile, b->lws_bc_tile, 0, NULL, NULL, "bc_grad"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    kr = b->k_bc_suffix; /* dS_j = sum_{i>j} Mc[i,j] G_i, for dv */
    MHLA_SET_ARG(st, ctx, kr, 0, b->slots_g);
    MHLA_SET_ARG(st, ctx, kr, 1, mixing);
    MHLA_SET_ARG(st, ctx, kr, 2, mix_tab_suffix);
    MHLA_SET_ARG(st, ctx, kr, 3, b->slots_ds);
    MHLA_SET_ARG(st, ctx, kr, 4, lda);
    MHLA_SET_ARG(st, ctx, kr, 5, width);
    MHLA_SET_ARG(st, ctx, kr, 6, n_tiles);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 2, mext, mloc, 0, NULL, NULL, "causal_suffix (backward)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    kr = b->k_bc_transpose; /* dS^T, for dk */
    MHLA_SET_ARG(st, ctx, kr, 0, b->slots_ds);
    MHLA_SET_ARG(st, ctx, kr, 1, b->slots_dst);
    MHLA_SET_ARG(st, ctx, kr, 2, heads);
    MHLA_SET_ARG(st, ctx, kr, 3, nent);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tile, b->lws_bc_tile, 0, NULL, NULL, "bc_transpose"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    { /* the tiled read-outs: dq from P^T, dk from dS^T, dv from dS */
        const cl_int tiles_per_chunk = (cl_int)((ch + (size_t)b->tiles.bct_tq - 1) / (size_t)b->tiles.bct_tq);
        const cl_kernel ks[3] = {b->k_bc_dq, b->k_bc_dk, b->k_bc_dv};
        const cl_mem from[3] = {b->slots_p, b->slots_dst, b->slots_ds}, to[3] = {dq, dk, dv};
        static const char *const names[3] = {"bc_dq", "bc_dk", "bc_dv"};
        for (int i = 0; i < 3; ++i) {
            kr = ks[i];
            MHLA_FORWARD_IF_ERROR(st, token_args(ctx, kr, in, mixing, lda, tab, from[i], inv, r));
            MHLA_SET_ARG(st, ctx, kr, 10, to[i]);
            MHLA_SET_ARG(st, ctx, kr, 11, plan->grid);
            MHLA_SET_ARG(st, ctx, kr, 12, feps);
            MHLA_SET_ARG(st, ctx, kr, 13, scale);
            MHLA_SET_ARG(st, ctx, kr, 14, tiles_per_chunk);
            const size_t ext[3] = {b->wg_bc_readout[i], (size_t)heads, entries * (size_t)tiles_per_chunk};
            const size_t loc[3] = {b->wg_bc_readout[i], 1, 1};
            MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, loc, 0, NULL, NULL, names[i]));
        }
    }
    if (dmixing) {
        const cl_int parts = (cl_int)b->tiles.bct_dg;
        const size_t dext[3] = {(size_t)parts, (size_t)heads, entries}, dloc[3] = {(size_t)parts, 1, 1};
        kr = b->k_bc_diag;
        for (cl_uint i = 0; i < 4; ++i)
            MHLA_SET_ARG(st, ctx, kr, i, in[i]);
        MHLA_SET_ARG(st, ctx, kr, 4, tab);
        MHLA_SET_ARG(st, ctx, kr, 5, inv);
        MHLA_SET_ARG(st, ctx, kr, 6, r);
        MHLA_SET_ARG(st, ctx, kr, 7, b->diag);
        MHLA_SET_ARG(st, ctx, kr, 8, plan->grid);
        MHLA_SET_ARG(st, ctx, kr, 9, feps);
        MHLA_SET_ARG(st, ctx, kr, 10, scale);
        MHLA_SET_ARG(st, ctx, kr, 11, nent);
        MHLA_SET_ARG(st, ctx, kr, 12, parts);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, dext, dloc, 0, NULL, NULL, "bc_diag"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        /* <G_i, S_j> per sequence (its entries are consecutive, from its chunk 0), summed over the
         * sequences in table order after the longest, whose product covers every row written */
        const size_t x = heads * (size_t)c->dk * (size_t)(c->dv + 1);
        size_t longest = 0;
        for (size_t kk = 0; kk < entries; ++kk)
            if (b->tab_host[kk * 8 + 2] == 0 && b->tab_host[kk * 8 + 4] > b->tab_host[longest * 8 + 4])
                longest = kk;
        const cl_int covered = b->tab_host[longest * 8 + 4];
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing(plan, b, b->slots_gt, b->slots_s, longest * x, x, dmixing,
                                                         covered, lda, 0));
        for (size_t kk = 0; kk < entries; ++kk) {
            if (b->tab_host[kk * 8 + 2] != 0 || kk == longest)
                continue;
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx)); /* the calls share the partial sums */
            MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing(plan, b, b->slots_gt, b->slots_s, kk * x, x, dmixing,
                                                             b->tab_host[kk * 8 + 4], lda, 1));
        }
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        const size_t fext[3] = {(size_t)lda, (size_t)lda, 1};
        size_t floc[3];
        mhla__local_size_3d(ctx, b->k_bc_dmix_finish, fext, (size_t)b->tiles.wg, floc);
        kr = b->k_bc_dmix_finish;
        MHLA_SET_ARG(st, ctx, kr, 0, tab);
        MHLA_SET_ARG(st, ctx, kr, 1, b->diag);
        MHLA_SET_ARG(st, ctx, kr, 2, dmixing);
        MHLA_SET_ARG(st, ctx, kr, 3, lda);
        MHLA_SET_ARG(st, ctx, kr, 4, covered);
        MHLA_SET_ARG(st, ctx, kr, 5, heads);
        MHLA_SET_ARG(st, ctx, kr, 6, nent);
        const cl_int dparts = (cl_int)b->tiles.bct_dg;
        MHLA_SET_ARG(st, ctx, kr, 7, dparts);
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 2, fext, floc, 0, NULL, NULL, "bc_dmix_finish"));
    }
cleanup:
    if (tab)
        clReleaseMemObject(tab);
    if (mix_tab)
        clReleaseMemObject(mix_tab);
    if (mix_tab_suffix)
        clReleaseMemObject(mix_tab_suffix);
    return st;
}
