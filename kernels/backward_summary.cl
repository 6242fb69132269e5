/* Backward of non-causal MHLA, the per-block stage: the per-token normalizer terms, the inputs of
 * the gradient summaries G_i = sum_{t in i} q~_t [dO_t / den_t | dL/dden_t]^T (SPEC.md "Backward"),
 * which the forward's summary kernel computes in its layout (kernels/common.h), so that the mixing
 * GEMM, the forward's, carries them back to the blocks' dS_b, and their z columns. Sums run in
 * token order: results are bit-identical run to run. */
#include "common.h"
#include "backward.h"

/* global: (DK * DV rounded up, B*H, M). The S part of a summary row, transposed into the layout
 * of summaries specialized with DK and DV swapped (rows of B*H*DV*(DK+1) floats, S^T as
 * [B*H][DV][DK]), so that the forward's read-out kernel, built that way, computes S x for a token's
 * Dv-vector x (dq's S~ dO_t, dk's dS v_s) with its register tiles. */
kernel void bwd_transpose_summary(global const float *restrict src, global float *restrict dst, const mhla_grid g_arg)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int id = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (id >= DK * DV || bh >= g.bh || blk >= g.m)
        return;
    const int d = id / DV, e = id - d * DV;
    dst[(long)blk * g.bh * DV * (DK + 1) + ((long)bh * DV + e) * DK + d] = src[summary_s_offset(g.bh, blk, bh, d) + e];
}

/* global: (Nb, B*H, M). Per token t at position p of block i: y_t = scale dO_t / den_t into `y` (a
 * tensor shaped like dO: the caller's dv, written over later), so that the forward's summary kernel
 * makes the gradient summaries G_i = sum_t phi(q_t) y_t^T = sum_t q~_t (dO_t / den_t)^T. With the
 * paper and official normalizers, from u_t = S~_i dO_t (in `u`, written by the read-out kernel):
 * inv_t = 1 / den_t and r_t = dL/dden_t = -(dO_t . o_t) / den_t = -(q~_t . u_t) / den_t^2 (o_t is
 * not kept by the forward), stored at ((i*BH + bh)*Nb + p), the official normalizer's dots layout,
 * so that the mixing GEMM can carry r back. Without a normalizer den_t = 1. */
kernel void bwd_token_scalars(global const STORE_T *restrict q, global const STORE_T *restrict u,
                              global const STORE_T *restrict dout, global const float *restrict mixed,
                              global const float *restrict den, global float *restrict inv_out,
                              global float *restrict r_out, global STORE_T *restrict y, const mhla_grid g_arg,
                              const float feature_eps, const float scale, const float eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const int t = token_of(g, blk, p);
#if NORMALIZER == 2
    const float inv = 1.0f;
    (void)q, (void)u, (void)mixed, (void)den, (void)inv_out, (void)r_out, (void)feature_eps, (void)eps;
#else
    global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
    global const STORE_T *urow = u + row_offset(g, bh, t, DK);
    global const float *z = mixed + summary_z_offset(g.bh, blk, bh);
    const long at = ((long)blk * g.bh + bh) * g.nb + p;
    float dn = 0.0f, od = 0.0f;
    for (int d = 0; d < DK; ++d) {
        const float qd = scale * feature(LOADN(1, d, qrow), feature_eps);
        dn += qd * z[d];
        od += qd * LOADN(1, d, urow);
    }
#if NORMALIZER == 1
    dn = den[at];
#else
    (void)den;
#endif
    const float inv = 1.0f / (dn + eps);
    inv_out[at] = inv;
    r_out[at] = -od * inv * inv;
#endif
    global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
    global STORE_T *yrow = y + row_offset(g, bh, t, DV);
    const float w = scale * inv;
    for (int e = 0; e < DV; ++e)
        STOREN(1, LOADN(1, e, orow) * w, e, yrow);
}

/* global: (DK, B*H, M). sum_p w_{b,p} q~_{b,p} written over the z column of a summary row: the
 * official normalizer's dz_b with w = R = Mc^T r (the rows of the denominators that read block b's
 * queries) over dS; the paper normalizer's z column of G_i with w = r; 0 where has_w is 0 (the
 * summary kernel leaves sum phi(q) there, which no gradient has without the paper normalizer). */
kernel void bwd_official_dz(global const STORE_T *restrict q, global const float *restrict rmix,
                            global float *restrict dsum, const mhla_grid g_arg, const float feature_eps,
                            const float scale, const int has_w)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int d = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (d >= DK || bh >= g.bh || blk >= g.m)
        return;
    global const STORE_T *qbase = q + row_base(g, bh, DK) + d;
    const long qs = row_stride(g, DK), at0 = ((long)blk * g.bh + bh) * g.nb;
    float acc = 0.0f;
    token_walk w = walk_begin(g, blk, 0);
    for (int p = 0; p < g.nb && has_w; ++p) {
        acc += rmix[at0 + p] * scale * feature(LOADN(1, 0, qbase + w.t * qs), feature_eps);
        if (p + 1 < g.nb)
            walk_next(g, &w);
    }
    dsum[summary_z_offset(g.bh, blk, bh) + d] = acc;
}
