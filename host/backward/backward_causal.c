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
                           b->k_bc_dmix_finish, b->k_bc_from_forward, b->k_bc_dqkv, b->k_bc_summary_tiled,
                           b->k_bc_grad_tiled, b->k_bc_dqkv_tiled, b->k_bc_dmix_reduce_finish};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i)
        if (kernels[i])
            clReleaseKernel(kernels[i]);
    if (b->k_kv_expand)
        clReleaseKernel(b->k_kv_expand);
    if (b->k_kv_sum)
        clReleaseKernel(b->k_kv_sum);
    cl_mem mems[] = {b->slots_s,  b->slots_p,  b->slots_g,  b->slots_ds, b->slots_gt, b->slots_dst,
                     b->diag,     b->wide[0],  b->wide[1],  b->wide[2],  b->wide[3]};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    mhla__free(b->table);
    mhla__free(b->mix_tiles);
}

/* mhla__fit_build's steps for the read-outs: the plan, its backward, and the program built. */
typedef struct readout_try {
    mhla_plan *plan;
    mhla_bwd *b;
    cl_program prog; /* backward_causal_readout.cl: the read-outs, bc_diag and bc_dmix_finish */
} readout_try;

static mhla_status readout_attempt(void *arg, mhla_fit *fit, int *refit)
{
    mhla_status st = MHLA_OK;
    readout_try *rt = arg;
    mhla_context *ctx = rt->plan->ctx;
    const mhla_config *c = &rt->plan->cfg;
    mhla_bwd *b = rt->b;
    cl_kernel *ks[3] = {&b->k_bc_dq, &b->k_bc_dk, &b->k_bc_dv};
    static const char *const names[3] = {"bc_dq", "bc_dk", "bc_dv"};
    MHLA_FORWARD_IF_ERROR(st, mhla__tiles_backward_causal(ctx, c, &rt->plan->shape, &rt->plan->causal->kern->tuning, fit,
                                                           &b->tiles));
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_CAUSAL_READOUT, c, &b->tiles, &rt->prog));
    if (b->tiles.bct_fc > 0) { /* one group per chunk; a device that cannot hold it refits to the three */
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, rt->prog, "bc_dqkv", &b->k_bc_dqkv));
        b->wg_bc_fused = mhla__bc_fused_wg(&b->tiles, c->dk, c->dv);
        const int r = mhla__fit_check(ctx, b->k_bc_dqkv, b->wg_bc_fused,
                                      mhla__bc_fused_local(&b->tiles, c->dk, c->dv), fit);
        MHLA_FAIL_IF(st, r < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo(bc_dqkv) failed on %s",
                     ctx->device_name);
        *refit |= r;
        goto cleanup;
    }
    /* GPU rows: backward_causal_tiled.cl's read-outs, built for exactly their group: three kernels,
     * or with bc_one one kernel for the three */
    cl_program tiled = NULL;
    static const char *const tiled_names[3] = {"bc_dq_tiled", "bc_dk_tiled", "bc_dv_tiled"};
    if (b->tiles.bc_sq)
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_CAUSAL_TILED, c, &b->tiles, &tiled));
    if (b->tiles.bc_one) { /* (only where bc_sq: the tiled program is built) */
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, tiled, "bc_dqkv_tiled", &b->k_bc_dqkv_tiled));
        const int r = mhla__fit_check(ctx, b->k_bc_dqkv_tiled, mhla__bc_tiled_wg(&b->tiles),
                                      mhla__bc_tiled_local(c, &b->tiles), fit);
        MHLA_FAIL_IF(st, r < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo(bc_dqkv_tiled) failed on %s",
                     ctx->device_name);
        *refit |= r;
    }
    for (int i = 0; i < 3 && !b->tiles.bc_one; ++i) {
        const int64_t dw = i == 2 ? c->dv : c->dk, dx = i == 2 ? c->dk : c->dv;
        if (tiled) {
            MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, tiled, tiled_names[i], ks[i]));
            b->wg_bc_readout[i] = mhla__bc_tiled_wg(&b->tiles);
        } else {
            MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, rt->prog, names[i], ks[i]));
            b->wg_bc_readout[i] = mhla__bc_readout_wg(&b->tiles, dw);
        }
        const uint64_t local =
            tiled ? mhla__bc_tiled_local(c, &b->tiles) : mhla__bc_readout_local(&b->tiles, dx);
        const int r = mhla__fit_check(ctx, *ks[i], b->wg_bc_readout[i], local, fit);
        MHLA_FAIL_IF(st, r < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo(%s) failed on %s",
                     tiled ? tiled_names[i] : names[i], ctx->device_name);
        *refit |= r;
    }
    /* the paper normalizer's per-token scalars from the same program: the forward's read-out again */
    if (tiled && c->normalizer == MHLA_NORMALIZER_PAPER) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, tiled, "bc_scalars_tiled", &b->k_bc_scalars));
        const int r = mhla__fit_check(ctx, b->k_bc_scalars, mhla__bc_tiled_wg(&b->tiles),
                                      mhla__bc_tiled_local(c, &b->tiles), fit);
        MHLA_FAIL_IF(st, r < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo(bc_scalars_tiled) failed on %s",
                     ctx->device_name);
        *refit |= r;
    }
cleanup:
    return st;
}

static void readout_release(void *arg)
{
    mhla_bwd *b = ((readout_try *)arg)->b;
    cl_kernel *ks[6] = {&b->k_bc_dq, &b->k_bc_dk, &b->k_bc_dv, &b->k_bc_dqkv, &b->k_bc_scalars, &b->k_bc_dqkv_tiled};
    for (int i = 0; i < 6; ++i) {
        if (*ks[i])
            clReleaseKernel(*ks[i]);
        *ks[i] = NULL;
    }
}

static void readout_why(void *arg, const mhla_fit *fit, char *buf, size_t size)
{
    const readout_try *rt = arg;
    (void)fit;
    snprintf(buf, size, "the causal backward's read-outs do not fit %s even with %d-token groups",
             rt->plan->ctx->device_name, rt->b->tiles.bct_tq);
}

/* bc_dq, bc_dk, bc_dv (and bc_dmix_finish, bc_diag from the same program): built for tiles that fit
 * the device (tune/tiling.c); a built kernel that reports fewer work-items or more local memory than its tiles need
 * (rusticl on llvmpipe) tightens the fit for another build, as the forward's causal read-out does. */
static mhla_status readout_kernels(mhla_plan *plan, mhla_bwd *b)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    readout_try rt = {plan, b, NULL};
    const mhla_fit_loop loop = {readout_attempt, readout_release, readout_why, &rt, 8};
    MHLA_FORWARD_IF_ERROR(st, mhla__fit_build(ctx, &loop));
    cl_program prog = rt.prog;
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_dmix_finish", &b->k_bc_dmix_finish));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_dmix_reduce_finish", &b->k_bc_dmix_reduce_finish));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_diag", &b->k_bc_diag));
    /* bc_diag's parts per (chunk, head): the row's dg_parts, at most a chunk's rows and one work-group;
     * one where bc_dqkv writes the diagonal terms, a group's where the tiled dk does (one per tile of
     * bc_sq tokens) */
    if (b->k_bc_dqkv) {
        b->tiles.bct_dg = 1;
    } else if (b->tiles.bc_sq) {
        b->tiles.bct_dg = (int)((plan->shape.nb + b->tiles.bc_sq - 1) / b->tiles.bc_sq);
    } else {
        const int64_t rows = plan->shape.nb; /* a chunk's tokens */
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
    b->tiles.slot_pad = plan->causal->kern->tiling.slot_pad; /* bc_from_forward reads the forward's slots */
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_CAUSAL, c, &b->tiles, &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_summary", &b->k_bc_summary));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_grad", &b->k_bc_grad));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_transpose", &b->k_bc_transpose));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_from_forward", &b->k_bc_from_forward));
    if (c->normalizer == MHLA_NORMALIZER_PAPER && !b->k_bc_scalars) /* (GPU rows: bc_scalars_tiled, above) */
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_scalars", &b->k_bc_scalars));
    /* P_i and dS_j: the forward's prefix kernel and its transposed twin, over rows of a whole chunk
     * entry's slots (every head): the tiled products where the forward's prefix is tiled (GPU
     * rows: cp_ti, its groups already fitted to this device), else the register-tiled ones */
    if (b->tiles.cp_ti) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_CAUSAL_PREFIX_TILED, c, &b->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_prefix_tiled", &b->k_bc_prefix));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_suffix_tiled", &b->k_bc_suffix));
        b->lws_bc_mix = mhla__prefix_tiled_wg(&b->tiles);
        mhla_fit fit;
        mhla__fit_init(ctx, &fit);
        const int r = mhla__fit_check(ctx, b->k_bc_suffix, b->lws_bc_mix, mhla__prefix_tiled_local(&b->tiles), &fit);
        MHLA_FAIL_IF(st, r != 0, ctx, MHLA_ERR_UNSUPPORTED,
                     "the causal backward's suffix kernel (%d chunks x %d columns a group) does not fit %s",
                     b->tiles.cp_ti, b->tiles.cp_tw, ctx->device_name);
    } else {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_CAUSAL_PREFIX, c, &b->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_prefix", &b->k_bc_prefix));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_suffix", &b->k_bc_suffix));
        b->lws_bc_mix = mhla__local_size(ctx, b->k_bc_prefix, wg);
        if (mhla__local_size(ctx, b->k_bc_suffix, wg) < b->lws_bc_mix)
            b->lws_bc_mix = mhla__local_size(ctx, b->k_bc_suffix, wg);
    }
    /* dMc below the diagonal: each sequence's <G_i, S_j> with the non-causal tiled product */
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing_setup(plan, b, (size_t)c->mixing_rows,
                                                           heads * (size_t)c->dk * (size_t)(c->dv + 1), 0, &prog));
    const size_t tok[3] = {(size_t)plan->shape.nb, heads, 1}; /* a chunk's tokens */
    if (b->k_bc_scalars && !b->tiles.bc_sq)
        mhla__local_size_3d(ctx, b->k_bc_scalars, tok, wg, b->lws_bc_token);
    const size_t tile[3] = {(size_t)(c->dk / b->tiles.bct_sr), heads, 1};
    mhla__local_size_3d(ctx, b->k_bc_grad, tile, wg, b->lws_bc_tile);
    /* GPU rows: the chunk and gradient summaries in the forward's tiled summaries' groups (cs_tk,
     * cs_tn: fitted to this device already), where the built kernels take them */
    if (b->tiles.bc_sq && b->tiles.cs_tk) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_CAUSAL_TILED, c, &b->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_summary_tiled", &b->k_bc_summary_tiled));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bc_grad_tiled", &b->k_bc_grad_tiled));
        mhla_fit fit;
        mhla__fit_init(ctx, &fit);
        const size_t swg = mhla__causal_summary_tiled_wg(&b->tiles);
        const uint64_t slocal = 2u * sizeof(float) * (uint64_t)b->tiles.cs_tk * (uint64_t)b->tiles.cs_tn;
        if (mhla__fit_check(ctx, b->k_bc_summary_tiled, swg, slocal, &fit) != 0 ||
            mhla__fit_check(ctx, b->k_bc_grad_tiled, swg, slocal, &fit) != 0) {
            clReleaseKernel(b->k_bc_summary_tiled), clReleaseKernel(b->k_bc_grad_tiled);
            b->k_bc_summary_tiled = b->k_bc_grad_tiled = NULL; /* bc_summary and bc_grad, then */
        }
    }
    if (c->normalizer == MHLA_NORMALIZER_PAPER) {
        const size_t bytes = (size_t)plan->shape.bh * (size_t)plan->shape.n * sizeof(float);
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bytes, "the per-token 1/den", &b->inv));
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bytes, "the per-token dL/dden", &b->r));
    }
    if (plan->shape.group > 1) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_SUMMARY, c, &b->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_kv_expand", &b->k_kv_expand));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "bwd_kv_sum", &b->k_kv_sum));
        static const char *const what[4] = {"k copied to every query head", "v copied to every query head",
                                            "dk of every query head", "dv of every query head"};
        for (int i = 0; i < 4; ++i) {
            const int64_t d = i % 2 ? c->dv : c->dk;
            const size_t bytes = (size_t)plan->shape.bh * (size_t)plan->shape.n * (size_t)d * mhla__dtype_size(c->dtype);
            MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, bytes, what[i], &b->wide[i]));
        }
    }
cleanup:
    return st;
}

/* The chunk table of one call into b->table, and the mixtures' tiles into b->mix_tiles: runs of
 * up to mix_mr (or the tiled kernels' cp_ti) consecutive chunks of one sequence, starting at
 * multiples of it as the forward's;
 * the prefix tile {first entry, rows, i, entry of chunk 0} and the suffix tile {chunks of the
 * sequence, rows, i, entry of chunk 0}. Returns the entries, *tiles the tiles; `write` 0 counts them
 * only (before the arrays are sized for them: a call with more chunks than the last must not write
 * past them). */
static size_t fill_table(const mhla_plan *plan, mhla_bwd *b, const int32_t *cu, size_t num_seqs, int write,
                         size_t *tiles)
{
    const int64_t C = plan->cfg.chunk, mr = mhla__prefix_tile_rows(&b->tiles);
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
            mhla_bc_entry *e = &b->table[k];
            e->first_token = (cl_int)(t0 + i * C);
            e->tokens = (cl_int)(len - i * C < C ? len - i * C : C);
            e->chunk = (cl_int)i;
            e->first_entry = (cl_int)base;
            e->chunks = (cl_int)m;
            e->batch = cu ? 0 : (cl_int)s;
            e->slot_batch = cu ? 1 : (cl_int)plan->cfg.batch;
            e->unused = 0;
        }
    }
    *tiles = nt;
    return k;
}

/* Whether dk reads dS^T (bc_transpose's copy): the CPU forms' read-outs and bc_dqkv; the tiled dk
 * reads dS across instead. */
static int transposed_ds(const mhla_bwd *b) { return !b->tiles.bc_sq || b->k_bc_dqkv; }

/* Buffers for `entries` chunks (kept, grown when a varlen call needs more), and room for this
 * call's `tiles` (their count places the suffix tiles). */
static mhla_status reserve(mhla_plan *plan, mhla_bwd *b, size_t entries, size_t tiles)
{
    mhla_status st = MHLA_OK;
    if (entries <= b->entries_cap && b->table)
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
    mhla__free(b->table);
    b->entries_cap = 0;
    b->table = mhla__malloc(entries * sizeof *b->table);
    MHLA_FAIL_IF(st, !b->table, plan->ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the chunk table");
    for (size_t i = 0; i < nslots; ++i)
        if (slots[i] != &b->slots_dst || transposed_ds(b))
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

/* One call of the causal backward, as every stage below reads it: the plan and its backward, the
 * caller's buffers, the chunk table's size and device copies, and the launch shapes stages share. */
typedef struct bc_call {
    mhla_plan *plan;
    mhla_bwd *b;
    cl_mem in[4]; /* q, k, v, dO */
    cl_mem mixing;
    cl_mem inv, r;                    /* per token 1/den and dL/dden (b->diag where no normalizer reads them) */
    cl_mem tab, pre_tiles, suf_tiles; /* the chunk table, the prefix and the suffix mixtures' tiles */
    size_t entries, ntiles;
    cl_int lda, heads, nent;
    float feps, scale, eps;
    size_t tokens;           /* a chunk's: C, or N when shorter */
    size_t tile[3];          /* bc_summary, bc_grad, bc_transpose: (Dk / BCT_SR, H, entries) */
    cl_long width;           /* floats of an entry's slots, every head */
    size_t mext[3], mloc[3]; /* the mixtures' launch */
} bc_call;

/* The table, counted, then written into buffers grown for it (x->entries 0: every packed sequence
 * empty). It goes to the device as the forward's chunk tables do: buffers made from the host copies
 * (no queue command, so nothing here waits for the caller's events), released once the call is
 * enqueued (the runtime keeps them until the kernels that use them are done). */
static mhla_status table(bc_call *x, const int32_t *cu, size_t num_seqs)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    mhla_bwd *b = x->b;
    x->entries = fill_table(x->plan, b, cu, num_seqs, 0, &x->ntiles);
    if (x->entries == 0)
        goto cleanup;
    MHLA_FORWARD_IF_ERROR(st, reserve(x->plan, b, x->entries, x->ntiles));
    fill_table(x->plan, b, cu, num_seqs, 1, &x->ntiles);
    cl_int err = CL_SUCCESS;
    x->tab = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, x->entries * sizeof *b->table,
                                    b->table, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (the chunk table)");
    x->pre_tiles = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                          x->ntiles * sizeof(cl_int4), b->mix_tiles, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (the prefix tiles)");
    x->suf_tiles = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                          x->ntiles * sizeof(cl_int4), b->mix_tiles + x->ntiles, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (the suffix tiles)");
cleanup:
    return st;
}

/* The launch shapes of a table of x->entries chunks in x->ntiles mixture tiles. */
static void shapes(bc_call *x)
{
    const mhla_config *c = &x->plan->cfg;
    const mhla_bwd *b = x->b;
    x->nent = (cl_int)x->entries;
    x->tokens = (size_t)x->plan->shape.nb; /* a chunk's tokens */
    x->tile[0] = (size_t)(c->dk / b->tiles.bct_sr), x->tile[1] = (size_t)x->heads, x->tile[2] = x->entries;
    /* the mixtures: MIX_MR chunks x PRE_VE * MIX_NV floats of their entries' slots per work-item, the
     * tiles the fast dimension (kernels/causal_prefix.cl); tiled (cp_ti): a group per CP_TW columns
     * of a tile's rows, the tiles second (kernels/causal_prefix_tiled.cl) */
    x->width = (cl_long)x->heads * c->dk * (c->dv + 1);
    if (b->tiles.cp_ti) {
        const size_t tw = (size_t)b->tiles.cp_tw;
        x->mext[0] = b->lws_bc_mix * (((size_t)x->width + tw - 1) / tw), x->mext[1] = x->ntiles, x->mext[2] = 1;
        x->mloc[0] = b->lws_bc_mix, x->mloc[1] = x->mloc[2] = 1;
        return;
    }
    const size_t cols = (size_t)b->tiles.pre_ve * (size_t)b->tiles.mix_nv;
    x->mext[0] = x->ntiles, x->mext[1] = ((size_t)x->width + cols - 1) / cols, x->mext[2] = 1;
    x->mloc[0] = x->ntiles < b->lws_bc_mix ? x->ntiles : b->lws_bc_mix, x->mloc[1] = x->mloc[2] = 1;
}

/* S and P from the plan's last forward of these buffers (mhla_plan_save_for_backward). */
static mhla_status from_forward(const bc_call *x, cl_uint num_wait, const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const mhla_causal_plan *cp = x->plan->causal;
    size_t floc[3]; /* over x->tile, as bc_summary: Dk / BCT_SR rows per (head, chunk) */
    mhla__local_size_3d(ctx, x->b->k_bc_from_forward, x->tile, (size_t)x->b->tiles.wg, floc);
    cl_kernel kr = x->b->k_bc_from_forward;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(cp->sums), MHLA_ARG(cp->pref), MHLA_ARG(x->tab), MHLA_ARG(x->b->slots_s),
                  MHLA_ARG(x->b->slots_p), MHLA_ARG(x->heads), MHLA_ARG(x->nent));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, x->tile, floc, num_wait, wait, NULL, "bc_from_forward"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* bc_summary_tiled or bc_grad_tiled: S^T into `out`, or G into `out` and G^T into `outt`. */
static mhla_status summary_tiled(const bc_call *x, cl_kernel kr, cl_mem out, cl_mem outt, cl_uint num_wait,
                                 const cl_event *wait, const char *what)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const mhla_config *c = &x->plan->cfg;
    const mhla_tiles *t = &x->b->tiles;
    const size_t tn = (size_t)t->cs_tn, wgs = mhla__causal_summary_tiled_wg(t);
    const size_t tiles = (((size_t)c->dk + tn - 1) / tn) * (((size_t)c->dv + 1 + tn - 1) / tn);
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->in[0]), MHLA_ARG(x->in[1]), MHLA_ARG(x->in[2]), MHLA_ARG(x->in[3]),
                  MHLA_ARG(x->inv), MHLA_ARG(x->r), MHLA_ARG(x->tab), MHLA_ARG(out), MHLA_ARG(outt),
                  MHLA_ARG(x->plan->grid), MHLA_ARG(x->feps), MHLA_ARG(x->scale));
    const size_t ext[3] = {wgs, (size_t)x->heads, x->entries * tiles}, loc[3] = {wgs, 1, 1};
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, loc, num_wait, wait, NULL, what));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* The chunk summaries S_j, recomputed (bc_summary). */
static mhla_status summaries(const bc_call *x, cl_uint num_wait, const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    if (x->b->k_bc_summary_tiled)
        return summary_tiled(x, x->b->k_bc_summary_tiled, x->b->slots_s, x->b->slots_s, num_wait, wait,
                             "bc_summary_tiled");
    cl_kernel kr = x->b->k_bc_summary;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->in[1]), MHLA_ARG(x->in[2]), MHLA_ARG(x->tab), MHLA_ARG(x->b->slots_s),
                  MHLA_ARG(x->plan->grid), MHLA_ARG(x->feps), MHLA_ARG(x->nent));
    MHLA_FORWARD_IF_ERROR(st,
                          mhla__launch(ctx, kr, 3, x->tile, x->b->lws_bc_tile, num_wait, wait, NULL, "bc_summary"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* P_i = sum_{j<i} Mc[i,j] S_j, every sum in the kernel (no CLBlast blocks). */
static mhla_status prefix_mixtures(const bc_call *x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const cl_int n_tiles = (cl_int)x->ntiles, no_gemm = 0;
    cl_kernel kr = x->b->k_bc_prefix;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->b->slots_s), MHLA_ARG(x->mixing), MHLA_ARG(x->pre_tiles),
                  MHLA_ARG(x->b->slots_p), MHLA_ARG(x->lda), MHLA_ARG(x->width));
    if (!x->b->tiles.cp_ti) /* (causal_prefix_tiled.cl takes no more) */
        MHLA_SET_ARGS(st, ctx, kr, 6, MHLA_ARG(no_gemm), MHLA_ARG(n_tiles));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 2, x->mext, x->mloc, 0, NULL, NULL,
                                           x->b->tiles.cp_ti ? "clEnqueueNDRangeKernel(causal_prefix_tiled)"
                                                             : "clEnqueueNDRangeKernel(causal_prefix)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* Arguments 0..9 of bc_scalars, bc_dq, bc_dk and bc_dv: q, k, v, dO, Mc and its rows, the chunk
 * table, a slot buffer (P^T, dS^T or dS) and the per-token normalizer terms. */
static mhla_status token_args(const bc_call *x, cl_kernel kr, cl_mem slots)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->in[0]), MHLA_ARG(x->in[1]), MHLA_ARG(x->in[2]), MHLA_ARG(x->in[3]),
                  MHLA_ARG(x->mixing), MHLA_ARG(x->lda), MHLA_ARG(x->tab), MHLA_ARG(slots), MHLA_ARG(x->inv),
                  MHLA_ARG(x->r));
cleanup:
    return st;
}

/* The paper normalizer's per-token 1/den_t and dL/dden_t (bc_scalars, from P; GPU rows:
 * bc_scalars_tiled in the read-outs' groups). */
static mhla_status scalars(const bc_call *x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const mhla_bwd *b = x->b;
    cl_kernel kr = b->k_bc_scalars;
    MHLA_FORWARD_IF_ERROR(st, token_args(x, kr, b->slots_p));
    if (b->tiles.bc_sq) {
        const size_t sq = (size_t)b->tiles.bc_sq, wgt = mhla__bc_tiled_wg(&b->tiles);
        const cl_int tiles_per_chunk = (cl_int)((x->tokens + sq - 1) / sq);
        const size_t ext[3] = {wgt, (size_t)x->heads, x->entries * (size_t)tiles_per_chunk}, loc[3] = {wgt, 1, 1};
        MHLA_SET_ARGS(st, ctx, kr, 10, MHLA_ARG(x->plan->grid), MHLA_ARG(x->feps), MHLA_ARG(x->scale),
                      MHLA_ARG(x->eps), MHLA_ARG(tiles_per_chunk));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, loc, 0, NULL, NULL, "bc_scalars_tiled"));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        goto cleanup;
    }
    const size_t tok[3] = {x->tokens, (size_t)x->heads, x->entries};
    MHLA_SET_ARGS(st, ctx, kr, 10, MHLA_ARG(x->plan->grid), MHLA_ARG(x->feps), MHLA_ARG(x->scale), MHLA_ARG(x->eps),
                  MHLA_ARG(x->nent));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, tok, b->lws_bc_token, 0, NULL, NULL, "bc_scalars"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* The gradient summaries G_i and G_i^T (bc_grad). */
static mhla_status gradient_summaries(const bc_call *x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    if (x->b->k_bc_grad_tiled)
        return summary_tiled(x, x->b->k_bc_grad_tiled, x->b->slots_g, x->b->slots_gt, 0, NULL, "bc_grad_tiled");
    cl_kernel kr = x->b->k_bc_grad;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->in[0]), MHLA_ARG(x->in[3]), MHLA_ARG(x->inv), MHLA_ARG(x->r),
                  MHLA_ARG(x->tab), MHLA_ARG(x->b->slots_g), MHLA_ARG(x->b->slots_gt), MHLA_ARG(x->plan->grid),
                  MHLA_ARG(x->feps), MHLA_ARG(x->scale), MHLA_ARG(x->nent));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, x->tile, x->b->lws_bc_tile, 0, NULL, NULL, "bc_grad"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* dS_j = sum_{i>j} Mc[i,j] G_i for dv (causal_suffix), and dS^T for the CPU form's dk (bc_transpose). */
static mhla_status suffix_mixtures(const bc_call *x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const cl_int n_tiles = (cl_int)x->ntiles;
    cl_kernel kr = x->b->k_bc_suffix;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->b->slots_g), MHLA_ARG(x->mixing), MHLA_ARG(x->suf_tiles),
                  MHLA_ARG(x->b->slots_ds), MHLA_ARG(x->lda), MHLA_ARG(x->width));
    if (!x->b->tiles.cp_ti) /* (causal_suffix_tiled takes no more) */
        MHLA_SET_ARGS(st, ctx, kr, 6, MHLA_ARG(n_tiles));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 2, x->mext, x->mloc, 0, NULL, NULL,
                                           x->b->tiles.cp_ti ? "clEnqueueNDRangeKernel(causal_suffix_tiled)"
                                                             : "clEnqueueNDRangeKernel(causal_suffix)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (!transposed_ds(x->b)) /* the tiled dk reads dS across */
        goto cleanup;
    kr = x->b->k_bc_transpose;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->b->slots_ds), MHLA_ARG(x->b->slots_dst), MHLA_ARG(x->heads),
                  MHLA_ARG(x->nent));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, x->tile, x->b->lws_bc_tile, 0, NULL, NULL, "bc_transpose"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* The fused read-out (bc_dqkv): dq, dk, dv and, when dMc is asked for, its diagonal terms. */
static mhla_status readout_fused(const bc_call *x, cl_mem dq, cl_mem dk, cl_mem dv, cl_int want_diag)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const mhla_bwd *b = x->b;
    cl_kernel kr = b->k_bc_dqkv;
    MHLA_FORWARD_IF_ERROR(st, token_args(x, kr, b->slots_p));
    MHLA_SET_ARGS(st, ctx, kr, 10, MHLA_ARG(b->slots_dst), MHLA_ARG(b->slots_ds), MHLA_ARG(dq), MHLA_ARG(dk),
                  MHLA_ARG(dv), MHLA_ARG(b->diag), MHLA_ARG(x->plan->grid), MHLA_ARG(x->feps), MHLA_ARG(x->scale),
                  MHLA_ARG(want_diag));
    const size_t ext[3] = {b->wg_bc_fused, (size_t)x->heads, x->entries}, loc[3] = {b->wg_bc_fused, 1, 1};
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, loc, 0, NULL, NULL, "bc_dqkv"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* The three read-outs (backward_causal_readout.cl's, or backward_causal_tiled.cl's on GPU rows, with
 * bc_one in one launch): dq from P^T, dk from dS^T, dv from dS; the tiled dk writes dMc's diagonal
 * terms too where want_diag. */
static mhla_status readouts(const bc_call *x, cl_mem dq, cl_mem dk, cl_mem dv, cl_int want_diag)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const mhla_bwd *b = x->b;
    const size_t tq = (size_t)(b->tiles.bc_sq ? b->tiles.bc_sq : b->tiles.bct_tq); /* a group's tokens */
    const cl_int tiles_per_chunk = (cl_int)((x->tokens + tq - 1) / tq);
    if (b->k_bc_dqkv_tiled) { /* a group of dq, dk or dv (dimension 0) a tile */
        cl_kernel kr = b->k_bc_dqkv_tiled;
        const size_t wg = mhla__bc_tiled_wg(&b->tiles);
        MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->in[0]), MHLA_ARG(x->in[1]), MHLA_ARG(x->in[2]), MHLA_ARG(x->in[3]),
                      MHLA_ARG(x->mixing), MHLA_ARG(x->lda), MHLA_ARG(x->tab), MHLA_ARG(b->slots_p),
                      MHLA_ARG(b->slots_ds), MHLA_ARG(x->inv), MHLA_ARG(x->r), MHLA_ARG(dq), MHLA_ARG(dk),
                      MHLA_ARG(dv), MHLA_ARG(x->plan->grid), MHLA_ARG(x->feps), MHLA_ARG(x->scale),
                      MHLA_ARG(tiles_per_chunk), MHLA_ARG(b->diag), MHLA_ARG(want_diag));
        const size_t ext[3] = {3 * wg, (size_t)x->heads, x->entries * (size_t)tiles_per_chunk}, loc[3] = {wg, 1, 1};
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, loc, 0, NULL, NULL, "bc_dqkv_tiled"));
        goto cleanup;
    }
    const cl_kernel ks[3] = {b->k_bc_dq, b->k_bc_dk, b->k_bc_dv};
    const cl_mem from[3] = {b->slots_p, b->tiles.bc_sq ? b->slots_ds : b->slots_dst, b->slots_ds}, to[3] = {dq, dk, dv};
    static const char *const plain[3] = {"bc_dq", "bc_dk", "bc_dv"};
    static const char *const tiled[3] = {"bc_dq_tiled", "bc_dk_tiled", "bc_dv_tiled"};
    const char *const *names = b->tiles.bc_sq ? tiled : plain;
    for (int i = 0; i < 3; ++i) {
        cl_kernel kr = ks[i];
        MHLA_FORWARD_IF_ERROR(st, token_args(x, kr, from[i]));
        MHLA_SET_ARGS(st, ctx, kr, 10, MHLA_ARG(to[i]), MHLA_ARG(x->plan->grid), MHLA_ARG(x->feps), MHLA_ARG(x->scale),
                      MHLA_ARG(tiles_per_chunk));
        if (b->tiles.bc_sq) {
            const cl_int want = i == 1 ? want_diag : 0; /* dk's */
            MHLA_SET_ARGS(st, ctx, kr, 15, MHLA_ARG(b->diag), MHLA_ARG(want));
        }
        const size_t ext[3] = {b->wg_bc_readout[i], (size_t)x->heads, x->entries * (size_t)tiles_per_chunk};
        const size_t loc[3] = {b->wg_bc_readout[i], 1, 1};
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, ext, loc, 0, NULL, NULL, names[i]));
    }
cleanup:
    return st;
}

/* dMc's diagonal terms, in bc_dg parts per (chunk, head) (bc_diag). */
static mhla_status dmc_diagonal(const bc_call *x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const cl_int parts = (cl_int)x->b->tiles.bct_dg;
    const size_t dext[3] = {(size_t)parts, (size_t)x->heads, x->entries}, dloc[3] = {(size_t)parts, 1, 1};
    cl_kernel kr = x->b->k_bc_diag;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->in[0]), MHLA_ARG(x->in[1]), MHLA_ARG(x->in[2]), MHLA_ARG(x->in[3]),
                  MHLA_ARG(x->tab), MHLA_ARG(x->inv), MHLA_ARG(x->r), MHLA_ARG(x->b->diag), MHLA_ARG(x->plan->grid),
                  MHLA_ARG(x->feps), MHLA_ARG(x->scale), MHLA_ARG(x->nent), MHLA_ARG(parts));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 3, dext, dloc, 0, NULL, NULL, "bc_diag"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* dMc below the diagonal: <G_i, S_j> per sequence (its entries are consecutive, from its chunk 0),
 * summed over the sequences in table order after the longest, whose product covers every row
 * written; *covered receives its chunks. */
static mhla_status dmc_products(const bc_call *x, cl_mem dmixing, cl_int *covered)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const mhla_config *c = &x->plan->cfg;
    const mhla_bc_entry *tab = x->b->table;
    const size_t len = (size_t)x->heads * (size_t)c->dk * (size_t)(c->dv + 1);
    size_t longest = 0;
    for (size_t kk = 0; kk < x->entries; ++kk)
        if (tab[kk].chunk == 0 && tab[kk].chunks > tab[longest].chunks)
            longest = kk;
    *covered = tab[longest].chunks;
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing(x->plan, x->b, x->b->slots_gt, x->b->slots_s, longest * len, len,
                                                     dmixing, *covered, *covered, x->lda, 0, 1));
    for (size_t kk = 0; kk < x->entries; ++kk) {
        if (tab[kk].chunk != 0 || kk == longest)
            continue;
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx)); /* the calls share the partial sums */
        MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing(x->plan, x->b, x->b->slots_gt, x->b->slots_s, kk * len, len,
                                                         dmixing, tab[kk].chunks, tab[kk].chunks, x->lda, 1, 1));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* dMc's diagonal added to the rows the products covered (bc_dmix_finish). */
static mhla_status dmc_finish(const bc_call *x, cl_mem dmixing, cl_int covered)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const size_t fext[3] = {(size_t)x->lda, (size_t)x->lda, 1};
    size_t floc[3];
    mhla__local_size_3d(ctx, x->b->k_bc_dmix_finish, fext, (size_t)x->b->tiles.wg, floc);
    const cl_int dparts = (cl_int)x->b->tiles.bct_dg;
    cl_kernel kr = x->b->k_bc_dmix_finish;
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->tab), MHLA_ARG(x->b->diag), MHLA_ARG(dmixing), MHLA_ARG(x->lda),
                  MHLA_ARG(covered), MHLA_ARG(x->heads), MHLA_ARG(x->nent), MHLA_ARG(dparts));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 2, fext, floc, 0, NULL, NULL, "bc_dmix_finish"));
cleanup:
    return st;
}

/* dMc whole. One sequence (no packed batch, B = 1): its products' partial sums are added where the
 * diagonal is finished (bc_dmix_reduce_finish, in the order bwd_dmixing_reduce adds them: the same
 * values), one launch where bwd_dmixing_reduce and bc_dmix_finish take two; else dmc_products, then
 * dmc_finish. */
static mhla_status dmc(const bc_call *x, cl_mem dmixing)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = x->plan->ctx;
    const mhla_bc_entry *tab = x->b->table;
    size_t first = 0, sequences = 0;
    for (size_t kk = 0; kk < x->entries; ++kk)
        if (tab[kk].chunk == 0 && sequences++ == 0)
            first = kk;
    if (sequences != 1) {
        cl_int covered = 0;
        MHLA_FORWARD_IF_ERROR(st, dmc_products(x, dmixing, &covered));
        MHLA_FORWARD_IF_ERROR(st, dmc_finish(x, dmixing, covered));
        goto cleanup;
    }
    const mhla_config *c = &x->plan->cfg;
    const size_t len = (size_t)x->heads * (size_t)c->dk * (size_t)(c->dv + 1);
    const cl_int covered = tab[first].chunks, dparts = (cl_int)x->b->tiles.bct_dg;
    cl_int pieces = 0;
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_dmixing_parts(x->plan, x->b, x->b->slots_gt, x->b->slots_s, first * len,
                                                           len, covered, covered, 1, &pieces));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    cl_kernel kr = x->b->k_bc_dmix_reduce_finish;
    const size_t fext[3] = {(size_t)x->lda, (size_t)x->lda, 1};
    size_t floc[3];
    mhla__local_size_3d(ctx, kr, fext, (size_t)x->b->tiles.wg, floc);
    MHLA_SET_ARGS(st, ctx, kr, 0, MHLA_ARG(x->b->dmix_part), MHLA_ARG(pieces), MHLA_ARG(x->tab), MHLA_ARG(x->b->diag),
                  MHLA_ARG(dmixing), MHLA_ARG(x->lda), MHLA_ARG(covered), MHLA_ARG(x->heads), MHLA_ARG(x->nent),
                  MHLA_ARG(dparts));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kr, 2, fext, floc, 0, NULL, NULL, "bc_dmix_reduce_finish"));
cleanup:
    return st;
}

/* The chunk form's backward on H key/value heads (every mode but grouped heads calls it directly). */
static mhla_status enqueue_heads(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                 const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout, cl_mem dq, cl_mem dk,
                                 cl_mem dv, cl_mem dmixing, cl_uint num_wait, const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const mhla_config *c = &plan->cfg;
    char msg[512];
    bc_call x = {.plan = plan,
                 .b = b,
                 .in = {q, k, v, dout},
                 .mixing = mixing,
                 .lda = (cl_int)c->mixing_rows,
                 .heads = (cl_int)c->heads,
                 .feps = c->feature_eps,
                 .scale = c->scale,
                 .eps = c->eps};
    if (cu_seqlens) {
        st = mhla__cu_seqlens_check(cu_seqlens, num_seqs, plan->shape.n, c->chunk, c->mixing_rows, msg, sizeof msg);
        MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "mhla_backward_varlen: %s", msg);
    }
    MHLA_FORWARD_IF_ERROR(st, table(&x, cu_seqlens, num_seqs));
    if (x.entries == 0) /* every packed sequence empty: nothing to differentiate */
        goto cleanup;
    shapes(&x);
    x.inv = b->inv ? b->inv : b->diag, x.r = b->r ? b->r : b->diag; /* unread without a normalizer */

    /* S and P: kept from the plan's last forward of these buffers (mhla_plan_save_for_backward; plain
     * causal plans only), else recomputed */
    const mhla_causal_plan *cp = plan->causal;
    if (!cu_seqlens && plan->saved && plan->saved_in[0] == q && plan->saved_in[1] == k && plan->saved_in[2] == v &&
        plan->saved_in[3] == mixing && cp && cp->sums && cp->pref) {
        MHLA_FORWARD_IF_ERROR(st, from_forward(&x, num_wait, wait));
    } else {
        plan->saved = 0;
        MHLA_FORWARD_IF_ERROR(st, summaries(&x, num_wait, wait));
        MHLA_FORWARD_IF_ERROR(st, prefix_mixtures(&x));
    }
    if (b->k_bc_scalars)
        MHLA_FORWARD_IF_ERROR(st, scalars(&x));
    MHLA_FORWARD_IF_ERROR(st, gradient_summaries(&x));
    MHLA_FORWARD_IF_ERROR(st, suffix_mixtures(&x));
    if (b->k_bc_dqkv)
        MHLA_FORWARD_IF_ERROR(st, readout_fused(&x, dq, dk, dv, dmixing != NULL));
    else
        MHLA_FORWARD_IF_ERROR(st, readouts(&x, dq, dk, dv, dmixing != NULL));
    if (dmixing) {
        if (!b->k_bc_dqkv && !b->tiles.bc_sq) /* (else the read-outs wrote the diagonal terms) */
            MHLA_FORWARD_IF_ERROR(st, dmc_diagonal(&x));
        MHLA_FORWARD_IF_ERROR(st, dmc(&x, dmixing));
    }
cleanup:
    if (x.tab)
        clReleaseMemObject(x.tab);
    if (x.pre_tiles)
        clReleaseMemObject(x.pre_tiles);
    if (x.suf_tiles)
        clReleaseMemObject(x.suf_tiles);
    return st;
}

/* kern (bwd_kv_expand or bwd_kv_sum) over `dim` columns of every token and `rows` head rows. */
static mhla_status kv_launch(mhla_plan *plan, const mhla_bwd *b, cl_kernel kern, cl_mem src, cl_mem dst, int64_t dim,
                             int64_t rows, cl_uint num_wait, const cl_event *wait, const char *what)
{
    mhla_status st = MHLA_OK;
    const cl_int d = (cl_int)dim;
    const size_t ext[3] = {(size_t)dim, (size_t)plan->shape.n, (size_t)rows};
    size_t local[3];
    mhla__local_size_3d(plan->ctx, kern, ext, (size_t)b->tiles.wg, local);
    MHLA_SET_ARGS(st, plan->ctx, kern, 0, MHLA_ARG(src), MHLA_ARG(dst), MHLA_ARG(plan->grid), MHLA_ARG(d));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(plan->ctx, kern, 3, ext, local, num_wait, wait, NULL, what));
cleanup:
    return st;
}

mhla_status mhla__backward_causal_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v,
                                          cl_mem mixing, const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout,
                                          cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                          const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    if (plan->shape.group == 1)
        return enqueue_heads(plan, b, q, k, v, mixing, cu_seqlens, num_seqs, dout, dq, dk, dv, dmixing, num_wait,
                             wait);
    /* Grouped heads: k and v copied to the H query heads, the backward of those H heads, then dk and
     * dv summed over each key/value head's group in head order (deterministic). The forward's saved
     * slots hold H_kv heads: not the layout the H-head backward reads, so they are recomputed. */
    const mhla_config *c = &plan->cfg;
    const int64_t bh = plan->shape.bh, bh_kv = plan->shape.bh_kv;
    plan->saved = 0;
    MHLA_FORWARD_IF_ERROR(st, kv_launch(plan, b, b->k_kv_expand, k, b->wide[0], c->dk, bh, num_wait, wait,
                                        "clEnqueueNDRangeKernel(bwd_kv_expand)"));
    MHLA_FORWARD_IF_ERROR(st, kv_launch(plan, b, b->k_kv_expand, v, b->wide[1], c->dv, bh, num_wait, wait,
                                        "clEnqueueNDRangeKernel(bwd_kv_expand)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(plan->ctx));
    MHLA_FORWARD_IF_ERROR(st, enqueue_heads(plan, b, q, b->wide[0], b->wide[1], mixing, cu_seqlens, num_seqs, dout,
                                            dq, b->wide[2], b->wide[3], dmixing, 0, NULL));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(plan->ctx));
    MHLA_FORWARD_IF_ERROR(st, kv_launch(plan, b, b->k_kv_sum, b->wide[2], dk, c->dk, bh_kv, 0, NULL,
                                        "clEnqueueNDRangeKernel(bwd_kv_sum)"));
    MHLA_FORWARD_IF_ERROR(st, kv_launch(plan, b, b->k_kv_sum, b->wide[3], dv, c->dv, bh_kv, 0, NULL,
                                        "clEnqueueNDRangeKernel(bwd_kv_sum)"));
cleanup:
    return st;
}
