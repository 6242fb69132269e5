/* Causal stage 1: the summary S_j = sum k~ v^T of every chunk of every sequence (with the key sum
 * z_j as an extra column for the paper normalizer), one launch over all chunks. */
#include "causal.h"

#ifndef SUM_CHUNK
#define SUM_CHUNK 32 /* tokens summed before folding into the total: keeps float error ~ sqrt(C) */
#endif

/* global: (DK*CSC rounded up, chunks, B*H). Work-item (d, e) owns one summary entry; consecutive
 * work-items read consecutive v columns of the same token. */
kernel void causal_summary(global const float *restrict k, global const float *restrict v,
                           global const int4 *restrict chunks, global float *restrict sums,
                           const mhla_grid g, const float feature_eps)
{
    const int de = (int)get_global_id(0);
    const int c = (int)get_global_id(1);
    const int bh = (int)get_global_id(2);
    if (de >= DK * CSC)
        return;
    const int d = de / CSC;
    const int e = de - d * CSC;
    const int4 ch = chunks[c];
    float total = 0.0f;
    for (int p0 = 0; p0 < ch.y; p0 += SUM_CHUNK) {
        const int p1 = min(p0 + SUM_CHUNK, ch.y);
        float part = 0.0f;
        for (int p = p0; p < p1; ++p) {
            const int t = ch.x + p;
            const float kk = feature(k[row_offset(g, bh, t, DK) + d], feature_eps);
            const float vv = e < DV ? v[row_offset(g, bh, t, DV) + e] : 1.0f;
            part += kk * vv;
        }
        total += part;
    }
    sums[summary_offset(ch.w + ch.z, bh, g.bh) + de] = total;
}
