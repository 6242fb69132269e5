/* What the backward forms share: a workspace buffer counted in the plan's, dMc[i,b] = <A_i, B_b> in a
 * fixed order (kernels/backward_mixing.cl: partial sums per chunk of the rows, by work-items of 4
 * rows each or, on GPU rows, by work-group tiles through local memory; then their sum; the official
 * normalizer's second pair of operands in the same two launches), and Mc^T for the non-causal
 * forms' dS = Mc^T G. */
#include "backward/backward.h"

#include <stdio.h>

mhla_status mhla__backward_buffer(mhla_plan *plan, size_t bytes, const char *what, cl_mem *out)
{
    mhla_status st = MHLA_OK;
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_WRITE, bytes, what, out));
    plan->workspace_bytes += bytes;
cleanup:
    return st;
}

/* mhla__fit_build's steps for dMc's products: the tiled form (dm_t: bwd_dmixing_tiled) in tiles
 * that fit the device and the built kernel, down to bwd_dmixing_part (dm_t 0), which needs no fit. */
typedef struct dmix_try {
    mhla_plan *plan;
    mhla_bwd *b;
    int want;    /* the tuning's dm_t */
    size_t rows; /* of G and S */
    cl_program prog;
} dmix_try;

static mhla_status dmix_attempt(void *arg, mhla_fit *fit, int *refit)
{
    mhla_status st = MHLA_OK;
    dmix_try *dt = arg;
    mhla_context *ctx = dt->plan->ctx;
    mhla_bwd *b = dt->b;
    const int dm = b->tiles.dm_t = dt->want > 0 ? mhla__dmix_tile(fit, dt->want, dt->rows) : 0;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_MIXING, &dt->plan->cfg, &b->tiles, &dt->prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, dt->prog, dm ? "bwd_dmixing_tiled" : "bwd_dmixing_part",
                                                  &b->k_dmixing));
    if (!dm)
        goto cleanup;
    const int r = mhla__fit_check(ctx, b->k_dmixing, (size_t)(dm / 4) * (size_t)(dm / 4), mhla__dmix_tiled_local(dm), fit);
    if (r < 0) /* the kernel's limits cannot be read: the form that needs none */
        fit->wg = 1;
    *refit = r != 0;
cleanup:
    return st;
}

static void dmix_release(void *arg)
{
    dmix_try *dt = arg;
    if (dt->b->k_dmixing)
        clReleaseKernel(dt->b->k_dmixing);
    dt->b->k_dmixing = NULL;
}

static void dmix_why(void *arg, const mhla_fit *fit, char *buf, size_t size)
{
    (void)arg; /* (not reached: dm_t 0 always fits) */
    snprintf(buf, size, "dMc's product tiles do not fit %zu work-items", fit->wg);
}

mhla_status mhla__backward_dmixing_setup(mhla_plan *plan, mhla_bwd *b, size_t rows, size_t xmax, size_t x2max,
                                         cl_program *prog)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    dmix_try dt = {plan, b, b->tiles.dm_t, rows, NULL};
    const mhla_fit_loop loop = {dmix_attempt, dmix_release, dmix_why, &dt, 6}; /* each refit halves the tile */
    MHLA_FORWARD_IF_ERROR(st, mhla__fit_build(ctx, &loop));
    *prog = dt.prog;
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, *prog, "bwd_dmixing_reduce", &b->k_dmix_reduce));
    if (b->tiles.dm_t > 0) {
        /* Tiled: enough groups to fill the device (8 a compute unit) over the tiles of dMc, but 16
         * local tiles (256 x-values) a group at least, each a barrier pair; the partial sums then
         * take chunks x rows^2 floats (N = 16384, C = 64 on an H100: about 65 of 512, 17 MB). */
        const size_t tiles = (rows + (size_t)b->tiles.dm_t - 1) / (size_t)b->tiles.dm_t;
        const size_t want_groups = 8 * (size_t)ctx->limits.compute_units;
        size_t chunks = (want_groups + tiles * tiles - 1) / (tiles * tiles);
        size_t len = (xmax + x2max + chunks - 1) / (chunks ? chunks : 1);
        const size_t floor_len = 16 * MHLA_DM_K;
        b->dmix_len = mhla__round_up(len > floor_len ? len : floor_len, MHLA_DM_K);
    } else {
        /* Chunks of 1024 floats keep 2*rows rows of one in cache; at least `rows` floats each keep
         * the partial sums within `rows` summed rows (chunks * rows^2 <= (xmax / rows + 1) * rows^2).
         * From 128 rows (a causal plan's chunks at long N), 4096 floats: (rows/4)^2 >= 1024
         * work-items per chunk still, and a fourth of the tiles' start-up, lane sums and partial
         * sums (256 rows: the causal backward at N = 16384, C = 64; docs/tuning-notes.md "Causal
         * backward"). */
        const size_t floor_len = rows >= 128 ? 4096 : 1024;
        b->dmix_len = mhla__round_up(rows > floor_len ? rows : floor_len, 16);
    }
    b->dmix_chunks = (xmax + b->dmix_len - 1) / b->dmix_len + (x2max + b->dmix_len - 1) / b->dmix_len;
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, b->dmix_chunks * rows * rows * sizeof(float),
                                                    "the partial sums of dMc", &b->dmix_part));
cleanup:
    return st;
}

/* The partial sums of the products of a and bm (rows of x floats from off), then of a2 and bm2
 * (rows of x2 floats from off; none where x2 is 0), in one launch: [*pieces][m][cols]. */
static mhla_status parts_launch(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t off, size_t x, cl_mem a2,
                                cl_mem bm2, size_t x2, cl_int m, cl_int cols, cl_int lower, cl_int *pieces)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_long xl = (cl_long)x, x2l = (cl_long)x2;
    const cl_long len = (cl_long)b->dmix_len, offl = (cl_long)off;
    const cl_int chunks1 = (cl_int)((x + b->dmix_len - 1) / b->dmix_len);
    const cl_int chunks = chunks1 + (cl_int)((x2 + b->dmix_len - 1) / b->dmix_len);
    size_t extent[3], local[3];
    if (b->tiles.dm_t > 0) { /* a group of (DM_T/4)^2 per DM_T x DM_T tile */
        const size_t dm = (size_t)b->tiles.dm_t, side = dm / 4;
        extent[0] = ((size_t)cols + dm - 1) / dm * side, extent[1] = ((size_t)m + dm - 1) / dm * side;
        extent[2] = (size_t)chunks;
        local[0] = local[1] = side, local[2] = 1;
    } else {
        const size_t tm = (size_t)b->tiles.bwd_tm; /* kernels/backward_mixing.cl's BWD_TM */
        extent[0] = ((size_t)cols + tm - 1) / tm, extent[1] = ((size_t)m + tm - 1) / tm, extent[2] = (size_t)chunks;
        mhla__local_size_3d(ctx, b->k_dmixing, extent, (size_t)plan->tiles.wg, local);
    }
    MHLA_SET_ARGS(st, ctx, b->k_dmixing, 0, MHLA_ARG(a), MHLA_ARG(bm), MHLA_ARG(b->dmix_part), MHLA_ARG(xl),
                  MHLA_ARG(m), MHLA_ARG(cols), MHLA_ARG(len), MHLA_ARG(offl), MHLA_ARG(lower), MHLA_ARG(a2),
                  MHLA_ARG(bm2), MHLA_ARG(x2l), MHLA_ARG(chunks1));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_dmixing, 3, extent, local, 0, NULL, NULL,
                                           b->tiles.dm_t > 0 ? "clEnqueueNDRangeKernel(bwd_dmixing_tiled)"
                                                             : "clEnqueueNDRangeKernel(bwd_dmixing_part)"));
    *pieces = chunks;
cleanup:
    return st;
}

/* out[i*ldo + b] (+)= the sum of `chunks` partial sums, in chunk order. */
static mhla_status reduce_launch(mhla_plan *plan, mhla_bwd *b, cl_mem out, cl_int m, cl_int cols, cl_int ldo,
                                 cl_int accumulate, cl_int chunks)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const size_t rext[3] = {(size_t)cols, (size_t)m, 1};
    size_t rlocal[3];
    mhla__local_size_3d(ctx, b->k_dmix_reduce, rext, (size_t)plan->tiles.wg, rlocal);
    MHLA_SET_ARGS(st, ctx, b->k_dmix_reduce, 0, MHLA_ARG(b->dmix_part), MHLA_ARG(out), MHLA_ARG(m), MHLA_ARG(cols),
                  MHLA_ARG(chunks), MHLA_ARG(ldo), MHLA_ARG(accumulate));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_dmix_reduce, 2, rext, rlocal, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_dmixing_reduce)"));
cleanup:
    return st;
}

mhla_status mhla__backward_dmixing_parts(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t off, size_t x,
                                         cl_int m, cl_int cols, cl_int lower, cl_int *pieces)
{
    return parts_launch(plan, b, a, bm, off, x, a, bm, 0, m, cols, lower, pieces);
}

/* parts_launch's partial sums, then reduce_launch's sum of them: dMc's two launches. */
static mhla_status product(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t off, size_t x, cl_mem a2,
                           cl_mem bm2, size_t x2, cl_mem out, cl_int m, cl_int cols, cl_int ldo, cl_int accumulate,
                           cl_int lower)
{
    mhla_status st = MHLA_OK;
    cl_int chunks = 0;
    MHLA_FORWARD_IF_ERROR(st, parts_launch(plan, b, a, bm, off, x, a2, bm2, x2, m, cols, lower, &chunks));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(plan->ctx));
    MHLA_FORWARD_IF_ERROR(st, reduce_launch(plan, b, out, m, cols, ldo, accumulate, chunks));
cleanup:
    return st;
}

mhla_status mhla__backward_dmixing(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t off, size_t x,
                                   cl_mem out, cl_int m, cl_int cols, cl_int ldo, cl_int accumulate, cl_int lower)
{
    return product(plan, b, a, bm, off, x, a, bm, 0, out, m, cols, ldo, accumulate, lower);
}

mhla_status mhla__backward_mixing_transpose(mhla_plan *plan, mhla_bwd *b, cl_mem mixing)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_int m = (cl_int)plan->shape.m, m_kv = (cl_int)plan->shape.m_kv, lda = m_kv;
    const size_t ext[3] = {(size_t)m, (size_t)m_kv, 1}, local[3] = {1, 1, 1};
    MHLA_SET_ARGS(st, ctx, b->k_transpose, 0, MHLA_ARG(mixing), MHLA_ARG(b->mix_t), MHLA_ARG(m), MHLA_ARG(m_kv),
                  MHLA_ARG(lda));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_transpose, 2, ext, local, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_transpose)"));
cleanup:
    return st;
}

mhla_status mhla__backward_dmixing_noncausal(mhla_plan *plan, mhla_bwd *b, cl_mem dmixing)
{
    const mhla_shape *sh = &plan->shape;
    const size_t scols = (size_t)sh->bh_kv * (size_t)plan->cfg.dk * (size_t)sh->summary_cols;
    const cl_int m = (cl_int)sh->m, m_kv = (cl_int)sh->m_kv;
    /* the official normalizer's r . dots as the second pair (it has no cross-attention: M_kv = M) */
    const int official = plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL;
    return product(plan, b, b->grad_kv, plan->summary, 0, scols, official ? b->r : b->grad_kv,
                   official ? plan->dots : plan->summary, official ? (size_t)sh->bh * (size_t)sh->nb : 0, dmixing, m,
                   m_kv, m_kv, 0, 0);
}
