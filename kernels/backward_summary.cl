/* Backward of non-causal MHLA, the per-block stage (SPEC.md "Backward"): the z columns of the
 * gradient summaries G_i = sum_{t in i} q~_t [dO_t / den_t | dL/dden_t]^T, whose S part the
 * forward's summary kernel computes in its layout (kernels/common.h) so that the mixing GEMM, the
 * forward's, carries them back to the blocks' dS_b; and summaries transposed for the read-outs.
 * Sums run in token order: results are bit-identical run to run. */
#include "common.h"
#include "backward.h"

/* global: (DV, B*H, M). The S part of a summary row, transposed into rows of B*H*DV*(DK+1)
 * floats, S^T as [B*H][DV][DK], so that the backward's read-outs (kernels/backward_readout.cl)
 * compute S x for a token's Dv-vector x (dq's S~ dO_t, dk's dS v_s) from contiguous rows. Work-item
 * e writes row e; neighbouring work-items read neighbouring floats of each row of S, which CPU
 * runtimes load as one vector across work-items. */
kernel void bwd_transpose_summary(global const float *restrict src, global float *restrict dst, const mhla_grid g_arg)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int e = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (e >= DV || bh >= g.bh || blk >= g.m)
        return;
    global const float *s = src + summary_s_offset(g.bh, blk, bh, 0) + e;
    global float *t = dst + (long)blk * g.bh * DV * (DK + 1) + ((long)bh * DV + e) * DK;
    for (int d = 0; d < DK; ++d)
        t[d] = s[(long)d * DV];
}

/* global: (1, B*H, M). sum_p w_{b,p} q~_{b,p} written over the z column of a summary row: the
 * official normalizer's dz_b with w = R = Mc^T r (the rows of the denominators that read block b's
 * queries) over dS; the paper normalizer's z column of G_i with w = r; 0 where has_w is 0 (the
 * summary kernel leaves sum phi(q) there, which no gradient has without the paper normalizer).
 * One work-item per (block, head) walks the block's q rows in token order, whole rows as vectors. */
kernel void bwd_official_dz(global const STORE_T *restrict q, global const float *restrict rmix,
                            global float *restrict dsum, const mhla_grid g_arg, const float feature_eps,
                            const float scale, const int has_w)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (get_global_id(0) != 0 || bh >= g.bh || blk >= g.m)
        return;
    global const STORE_T *qbase = q + row_base(g, bh, DK);
    const long qs = row_stride(g, DK), at0 = ((long)blk * g.bh + bh) * g.nb;
    VEC(BWD_VK) acc[DK / BWD_VK];
    #pragma unroll
    for (int j = 0; j < DK / BWD_VK; ++j)
        acc[j] = (VEC(BWD_VK))(0.0f);
    token_walk w = walk_begin(g, blk, 0);
    for (int p = 0; p < g.nb && has_w; ++p) {
        const float wt = rmix[at0 + p] * scale;
        global const STORE_T *row = qbase + w.t * qs;
        #pragma unroll
        for (int j = 0; j < DK / BWD_VK; ++j)
            acc[j] += wt * FEATURE_V(BWD_VK, LOADN(BWD_VK, j, row), feature_eps);
        if (p + 1 < g.nb)
            walk_next(g, &w);
    }
    global float *z = dsum + summary_z_offset(g.bh, blk, bh);
    #pragma unroll
    for (int j = 0; j < DK / BWD_VK; ++j)
        VSTOREN(BWD_VK, acc[j], j, z);
}
