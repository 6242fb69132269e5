/* Stage 1 of non-causal MHLA: per (batch*head, block) the summary S_b = sum k~ v^T with the key
 * sum z_b = sum k~ as an extra column, read in place from q/k/v (no rearranged copy). */
#include "common.h"

#ifndef SUM_CHUNK
#define SUM_CHUNK 32 /* tokens summed before folding into the total: keeps float error ~ sqrt(Nb) */
#endif

/* global: (DK*SCOLS rounded up, M, B*H). Work-item (d, e) owns one summary entry; consecutive
 * work-items read consecutive v columns. */
kernel void block_summary(global const float *restrict k, global const float *restrict v,
                          global float *restrict summary, const mhla_grid g, const float feature_eps)
{
    const int de = (int)get_global_id(0);
    const int blk = (int)get_global_id(1);
    const int bh = (int)get_global_id(2);
    if (de >= DK * SCOLS)
        return;
    const int d = de / SCOLS;
    const int e = de - d * SCOLS;
    float total = 0.0f;
    for (int p0 = 0; p0 < g.nb; p0 += SUM_CHUNK) {
        const int p1 = min(p0 + SUM_CHUNK, g.nb);
        float part = 0.0f;
        for (int p = p0; p < p1; ++p) {
            const int t = token_of(g, blk, p);
            const float kk = feature(k[row_offset(g, bh, t, DK) + d], feature_eps);
            const float vv = e < DV ? v[row_offset(g, bh, t, DV) + e] : 1.0f;
            part += kk * vv;
        }
        total += part;
    }
    summary[(((long)blk * g.bh + bh) * DK + d) * SCOLS + e] = total;
}
