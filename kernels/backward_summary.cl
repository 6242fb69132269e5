/* Backward of non-causal MHLA, the per-block stage: the per-token normalizer terms, and the
 * gradient summaries G_i = sum_{t in i} q~_t y_t^T with y_t = [dO_t / den_t | dL/dden_t] (SPEC.md
 * "Backward"), a Dk x (Dv+1) matrix per (batch*head, block) laid out as the forward's block
 * summaries (kernels/common.h), so that the mixing GEMM, the forward's, carries it back to the
 * blocks' dS_b. Sums run in token order: results are bit-identical run to run. */
#include "common.h"
#include "backward.h"

/* global: (Nb, B*H, M). Paper and official normalizers: per token t at position p of block i,
 * inv_t = 1 / den_t and r_t = dL/dden_t = -(dO_t . o_t) / den_t, where o_t is recomputed from the
 * mixed summary (nothing per token is kept by the forward). Stored at ((i*BH + bh)*Nb + p), the
 * official normalizer's dots layout, so that the mixing GEMM can carry r back. */
kernel void bwd_scalars(global const STORE_T *restrict q, global const STORE_T *restrict dout,
                        global const float *restrict mixed, global const float *restrict den,
                        global float *restrict inv_out, global float *restrict r_out, const mhla_grid g_arg,
                        const float feature_eps,
                        const float scale, const float eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const int t = token_of(g, blk, p);
    global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
    global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
    global const float *s = mixed + summary_s_offset(g.bh, blk, bh, 0);
    global const float *z = mixed + summary_z_offset(g.bh, blk, bh);
    const long at = ((long)blk * g.bh + bh) * g.nb + p;
    float qt[DK];
    float dn = 0.0f;
    for (int d = 0; d < DK; ++d) {
        qt[d] = scale * feature(LOADN(1, d, qrow), feature_eps);
        dn += qt[d] * z[d];
    }
#if NORMALIZER == 1
    dn = den[at];
#else
    (void)den;
#endif
    const float inv = 1.0f / (dn + eps);
    float od = 0.0f; /* dO_t . num_t */
    for (int e = 0; e < DV; ++e) {
        float num = 0.0f;
        for (int d = 0; d < DK; ++d)
            num += qt[d] * s[d * DV + e];
        od += LOADN(1, e, orow) * num;
    }
    inv_out[at] = inv;
    r_out[at] = -od * inv * inv;
}

/* global: (DK * BWD_CT, B*H, M), BWD_CT = ceil((DV+1) / BWD_VE) column tiles. Work-item (d, tile)
 * accumulates row d, columns [tile*BWD_VE, +BWD_VE) of G_i over the block's tokens: column e < DV
 * is q~_d dO_e inv (inv = 1 without a normalizer), column DV is q~_d r (paper; 0 otherwise: the
 * official normalizer's denominator does not go through z~). */
kernel void bwd_block_grad(global const STORE_T *restrict q, global const STORE_T *restrict dout,
                           global const float *restrict invs, global const float *restrict rs,
                           global float *restrict grad, const mhla_grid g_arg,
                           const float feature_eps, const float scale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int id = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (id >= DK * BWD_CT || bh >= g.bh || blk >= g.m)
        return;
    const int d = id / BWD_CT, c0 = (id - d * BWD_CT) * BWD_VE;
    float acc[BWD_VE];
    for (int c = 0; c < BWD_VE; ++c)
        acc[c] = 0.0f;
    global const STORE_T *qbase = q + row_base(g, bh, DK) + d;
    global const STORE_T *obase = dout + row_base(g, bh, DV);
    const long qs = row_stride(g, DK), os = row_stride(g, DV);
    const long at0 = ((long)blk * g.bh + bh) * g.nb;
    token_walk w = walk_begin(g, blk, 0);
    for (int p = 0; p < g.nb; ++p) {
        const float qd = scale * feature(LOADN(1, 0, qbase + w.t * qs), feature_eps);
#if NORMALIZER == 2
        const float inv = 1.0f, r = 0.0f;
        (void)invs, (void)rs;
#else
        const float inv = invs[at0 + p];
        const float r = NORMALIZER == 0 ? rs[at0 + p] : 0.0f;
#endif
        global const STORE_T *orow = obase + w.t * os;
        for (int c = 0; c < BWD_VE; ++c) {
            const int e = c0 + c;
            const float y = e < DV ? LOADN(1, e, orow) * inv : r;
            acc[c] += qd * y;
        }
        if (p + 1 < g.nb)
            walk_next(g, &w);
    }
    for (int c = 0; c < BWD_VE; ++c) {
        const int e = c0 + c;
        if (e < DV)
            grad[summary_s_offset(g.bh, blk, bh, d) + e] = acc[c];
        else if (e == DV)
            grad[summary_z_offset(g.bh, blk, bh) + d] = acc[c];
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
