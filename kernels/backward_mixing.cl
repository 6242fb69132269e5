/* Backward of the mixing (SPEC.md "Backward"): Mc^T, which the forward's mixing GEMM multiplies
 * the gradient summaries by (dS_b = sum_i Mc[i,b] G_i), and dMc[i,b] = sum over batch, heads and
 * summary entries of A_i . B_b (<G_i, S_b>, plus the official normalizer's r_i . dots_b), reduced
 * by one work-group per entry in a fixed order: no atomics, bit-identical run to run. */
#include "common.h"
#include "backward.h"

/* global: (M, M). dst[b][i] = src[i][b], both M x M with leading dimension lda. */
kernel void bwd_transpose(global const float *restrict src, global float *restrict dst, const int m, const int lda)
{
    const int i = (int)get_global_id(0), b = (int)get_global_id(1);
    if (i < m && b < m)
        dst[b * m + i] = src[(long)i * lda + b];
}

/* global: (BWD_WG * cols, rows), local (BWD_WG, 1): group (b, i) writes out[i*ldo + b] (+= when
 * accumulate) = sum_x a[i*x + ..] * bm[b*x + ..] over x floats of row i of a and row b of bm.
 * Each work-item sums every BWD_WG-th product, then the group adds the partial sums as a tree. */
kernel void bwd_dmixing(global const float *restrict a, global const float *restrict bm, global float *restrict out,
                        const long x, const int ldo, const int accumulate)
{
    local float part[BWD_WG];
    const int lid = (int)get_local_id(0);
    const int b = (int)get_group_id(0), i = (int)get_global_id(1);
    global const float *ar = a + (long)i * x;
    global const float *br = bm + (long)b * x;
    float acc = 0.0f;
    for (long j = lid; j < x; j += BWD_WG)
        acc += ar[j] * br[j];
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = BWD_WG / 2; w > 0; w >>= 1) {
        if (lid < w)
            part[lid] += part[lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        out[(long)i * ldo + b] = accumulate ? out[(long)i * ldo + b] + part[0] : part[0];
}
