/* Stage 3 of non-causal MHLA: each token reads the mixed summary of its block and applies the
 * normalizer (paper, official or none), fused. Also the per-token dot products the official
 * normalizer mixes (q~ at position p of block b with z_b). */
#include "common.h"

/* global: (DV rounded up, M*Nb, B*H). Work-item (e, token) writes one output element; the
 * work-items of a group share the token's q row and read consecutive summary columns. */
kernel void block_output(global const float *restrict q, global const float *restrict mixed,
                         global const float *restrict den, global float *restrict out, const mhla_grid g,
                         const float feature_eps, const float scale, const float eps)
{
    const int e = (int)get_global_id(0);
    const int ip = (int)get_global_id(1);
    const int bh = (int)get_global_id(2);
    if (e >= DV)
        return;
    const int blk = ip / g.nb;
    const int p = ip - blk * g.nb;
    const int t = token_of(g, blk, p);
    global const float *qrow = q + row_offset(g, bh, t, DK);
    global const float *s = mixed + ((long)blk * g.bh + bh) * DK * SCOLS;
    float num = 0.0f;
#if NORMALIZER == 0
    float dsum = 0.0f;
#endif
    for (int d = 0; d < DK; ++d) {
        const float qd = scale * feature(qrow[d], feature_eps);
        num += qd * s[d * SCOLS + e];
#if NORMALIZER == 0
        dsum += qd * s[d * SCOLS + DV];
#endif
    }
#if NORMALIZER == 0
    num = num / (dsum + eps);
#elif NORMALIZER == 1
    num = num / (den[((long)blk * g.bh + bh) * g.nb + p] + eps);
#endif
    out[row_offset(g, bh, t, DV) + e] = num;
}

/* global: (M*Nb rounded up, B*H). dots[b][bh][p] = q~_{b,p} . z_b, mixed afterwards by the
 * same GEMM as the summaries into the official denominators. */
kernel void official_dots(global const float *restrict q, global const float *restrict summary,
                          global float *restrict dots, const mhla_grid g, const float feature_eps,
                          const float scale)
{
    const int ip = (int)get_global_id(0);
    const int bh = (int)get_global_id(1);
    if (ip >= g.m * g.nb)
        return;
    const int blk = ip / g.nb;
    const int p = ip - blk * g.nb;
    const int t = token_of(g, blk, p);
    global const float *qrow = q + row_offset(g, bh, t, DK);
    global const float *s = summary + ((long)blk * g.bh + bh) * DK * SCOLS;
    float acc = 0.0f;
    for (int d = 0; d < DK; ++d)
        acc += scale * feature(qrow[d], feature_eps) * s[d * SCOLS + DV];
    dots[((long)blk * g.bh + bh) * g.nb + p] = acc;
}
