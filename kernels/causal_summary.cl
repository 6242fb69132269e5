/* Causal stage 1: the summary S_j = sum k~ v^T of every chunk of every sequence (with the key sum
 * z_j as an extra column for the paper normalizer), one launch over all chunks. */
#include "causal.h"

#ifndef SUM_CHUNK
#define SUM_CHUNK 32 /* tokens summed before folding into the total: keeps float error ~ sqrt(C) */
#endif
#ifndef SUM_ROWS
#define SUM_ROWS 8 /* summary rows (key dimensions) per work-item: each v element read serves them all */
#endif
#define ROW_BLOCKS ((DK + SUM_ROWS - 1) / SUM_ROWS)

/* global: (CSC rounded up, chunks * ROW_BLOCKS, B*H). Work-item (e, block of SUM_ROWS rows d)
 * owns those entries of column e; consecutive work-items read consecutive v columns of a token and
 * share its k~ values. */
kernel void causal_summary(global const float *restrict k, global const float *restrict v,
                           global const int4 *restrict chunks, global float *restrict sums,
                           const mhla_grid g, const float feature_eps)
{
    const int e = (int)get_global_id(0);
    const int cb = (int)get_global_id(1);
    const int bh = (int)get_global_id(2);
    if (e >= CSC)
        return;
    const int c = cb / ROW_BLOCKS;
    const int d0 = (cb - c * ROW_BLOCKS) * SUM_ROWS;
    const int4 ch = chunks[c];
    float total[SUM_ROWS];
    for (int r = 0; r < SUM_ROWS; ++r)
        total[r] = 0.0f;
    for (int p0 = 0; p0 < ch.y; p0 += SUM_CHUNK) {
        const int p1 = min(p0 + SUM_CHUNK, ch.y);
        float part[SUM_ROWS];
        for (int r = 0; r < SUM_ROWS; ++r)
            part[r] = 0.0f;
        for (int p = p0; p < p1; ++p) {
            const int t = ch.x + p;
            const float vv = e < DV ? v[row_offset(g, bh, t, DV) + e] : 1.0f;
            global const float *krow = k + row_offset(g, bh, t, DK) + d0;
            for (int r = 0; r < SUM_ROWS; ++r)
                if (d0 + r < DK)
                    part[r] += feature(krow[r], feature_eps) * vv;
        }
        for (int r = 0; r < SUM_ROWS; ++r)
            total[r] += part[r];
    }
    global float *s = sums + summary_offset(ch.w + ch.z, bh, g.bh);
    for (int r = 0; r < SUM_ROWS; ++r)
        if (d0 + r < DK)
            s[(d0 + r) * CSC + e] = total[r];
}
