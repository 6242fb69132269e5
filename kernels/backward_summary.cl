/* Backward of non-causal MHLA, the per-block stage: the per-token normalizer terms, and the
 * gradient summaries G_i = sum_{t in i} q~_t y_t^T with y_t = [dO_t / den_t | dL/dden_t] (SPEC.md
 * "Backward"), a Dk x (Dv+1) matrix per (batch*head, block) laid out as the forward's block
 * summaries (kernels/common.h), so that the mixing GEMM, the forward's, carries it back to the
 * blocks' dS_b. Sums run in token order: results are bit-identical run to run. */
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

/* global: (Nb, B*H, M). Paper and official normalizers: per token t at position p of block i, from
 * u_t = S~_i dO_t (in `u`, written by the read-out kernel): inv_t = 1 / den_t and
 * r_t = dL/dden_t = -(dO_t . o_t) / den_t = -(q~_t . u_t) / den_t^2 (o_t is not kept by the
 * forward). Stored at ((i*BH + bh)*Nb + p), the official normalizer's dots layout, so that the
 * mixing GEMM can carry r back. */
kernel void bwd_token_scalars(global const STORE_T *restrict q, global const STORE_T *restrict u,
                              global const float *restrict mixed, global const float *restrict den,
                              global float *restrict inv_out, global float *restrict r_out, const mhla_grid g_arg,
                              const float feature_eps, const float scale, const float eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const int t = token_of(g, blk, p);
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
}

/* global: ((DK / BWD_RD) * (DV / BWD_GV), B*H, M). Work-item (row tile, column tile) accumulates
 * rows d0 .. d0+BWD_RD-1, columns c0 .. c0+BWD_GV-1 of G_i over the block's tokens, a vector per
 * row: column e < DV is q~_d dO_e inv (inv = 1 without a normalizer); the column-tile-0 work-items
 * also sum column DV, q~_d r (paper; 0 otherwise: the official normalizer's denominator does not go
 * through z~). */
kernel void bwd_block_grad(global const STORE_T *restrict q, global const STORE_T *restrict dout,
                           global const float *restrict invs, global const float *restrict rs,
                           global float *restrict grad, const mhla_grid g_arg, const float feature_eps,
                           const float scale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int id = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    const int col_tiles = DV / BWD_GV;
    if (id >= (DK / BWD_RD) * col_tiles || bh >= g.bh || blk >= g.m)
        return;
    const int d0 = (id / col_tiles) * BWD_RD, c0 = (id - (id / col_tiles) * col_tiles) * BWD_GV;
    VEC(BWD_GV) acc[BWD_RD];
    float zacc[BWD_RD];
    for (int i = 0; i < BWD_RD; ++i) {
        acc[i] = (VEC(BWD_GV))(0.0f);
        zacc[i] = 0.0f;
    }
    global const STORE_T *qbase = q + row_base(g, bh, DK) + d0;
    global const STORE_T *obase = dout + row_base(g, bh, DV) + c0;
    const long qs = row_stride(g, DK), os = row_stride(g, DV);
    const long at0 = ((long)blk * g.bh + bh) * g.nb;
    token_walk w = walk_begin(g, blk, 0);
    for (int p = 0; p < g.nb; ++p) {
#if NORMALIZER == 2
        const float inv = 1.0f, r = 0.0f;
        (void)invs, (void)rs, (void)at0;
#else
        const float inv = invs[at0 + p];
        const float r = NORMALIZER == 0 ? rs[at0 + p] : 0.0f;
#endif
        const VEC(BWD_GV) y = LOADN(BWD_GV, 0, obase + w.t * os) * inv;
        global const STORE_T *qrow = qbase + w.t * qs;
        for (int i = 0; i < BWD_RD; ++i) {
            const float qd = scale * feature(LOADN(1, i, qrow), feature_eps);
            acc[i] += qd * y;
            zacc[i] += qd * r;
        }
        if (p + 1 < g.nb)
            walk_next(g, &w);
    }
    for (int i = 0; i < BWD_RD; ++i) {
        VSTOREN(BWD_GV, acc[i], 0, grad + summary_s_offset(g.bh, blk, bh, d0 + i) + c0);
        if (c0 == 0)
            grad[summary_z_offset(g.bh, blk, bh) + d0 + i] = zacc[i];
    }
}

/* global: (DK, B*H, M). Official normalizer: dz_b = sum_p R_{b,p} q~_{b,p}, R = Mc^T r (the rows of
 * the denominators that read block b's queries), written over the z column of dS. */
kernel void bwd_official_dz(global const STORE_T *restrict q, global const float *restrict rmix,
                            global float *restrict dsum, const mhla_grid g_arg, const float feature_eps,
                            const float scale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int d = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (d >= DK || bh >= g.bh || blk >= g.m)
        return;
    global const STORE_T *qbase = q + row_base(g, bh, DK) + d;
    const long qs = row_stride(g, DK), at0 = ((long)blk * g.bh + bh) * g.nb;
    float acc = 0.0f;
    token_walk w = walk_begin(g, blk, 0);
    for (int p = 0; p < g.nb; ++p) {
        acc += rmix[at0 + p] * scale * feature(LOADN(1, 0, qbase + w.t * qs), feature_eps);
        if (p + 1 < g.nb)
            walk_next(g, &w);
    }
    dsum[summary_z_offset(g.bh, blk, bh) + d] = acc;
}
