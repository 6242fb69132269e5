/* Backward of the mixing (SPEC.md "Backward"): Mc^T, which the forward's mixing GEMM multiplies
 * the gradient summaries by (dS_b = sum_i Mc[i,b] G_i), and dMc[i,b] = sum over batch, heads and
 * summary entries of A_i . B_b (<G_i, S_b>, plus the official normalizer's r_i . dots_b), one
 * work-item per entry summing in a fixed order: no atomics, bit-identical run to run. */
#include "common.h"
#include "backward.h"

/* global: (M, M). dst[b][i] = src[i][b], both M x M with leading dimension lda. */
kernel void bwd_transpose(global const float *restrict src, global float *restrict dst, const int m, const int lda)
{
    const int i = (int)get_global_id(0), b = (int)get_global_id(1);
    if (i < m && b < m)
        dst[b * m + i] = src[(long)i * lda + b];
}

/* global: (cols, rows): work-item (b, i) writes out[i*ldo + b] (+= when accumulate) = sum_x a[i*x + ..]
 * * bm[b*x + ..] over x floats of row i of a and row b of bm, 8 lanes at a time in order, the lanes
 * added last: a fixed order whatever the launch. */
kernel void bwd_dmixing(global const float *restrict a, global const float *restrict bm, global float *restrict out,
                        const long x, const int rows, const int ldo, const int accumulate)
{
    const int b = (int)get_global_id(0), i = (int)get_global_id(1);
    if (b >= rows || i >= rows)
        return;
    global const float *ar = a + (long)i * x;
    global const float *br = bm + (long)b * x;
    float8 acc = (float8)(0.0f);
    const long x8 = x / 8;
    for (long j = 0; j < x8; ++j)
        acc += vload8(j, ar) * vload8(j, br);
    float sum = ((acc.s0 + acc.s1) + (acc.s2 + acc.s3)) + ((acc.s4 + acc.s5) + (acc.s6 + acc.s7));
    for (long j = x8 * 8; j < x; ++j)
        sum += ar[j] * br[j];
    out[(long)i * ldo + b] = accumulate ? out[(long)i * ldo + b] + sum : sum;
}
