/* Stage 2 without CLBlast, for devices where the tuning table says it is faster (CPUs: CLBlast's
 * local-memory tiles become plain memory and barriers there). The mixing is a GEMM with a small
 * inner dimension: C[m x x] = A[m x k] * B[k x x], k = M blocks, x = B*H*Dk*(Dv+1) or B*H*Nb
 * columns. Each work-item keeps MIX_MR rows x MIX_NV vectors of C in registers. */
#include "common.h"

#ifndef MIX_MR
#define MIX_MR 4 /* rows of C per work-item */
#endif
#ifndef MIX_VE
#define MIX_VE 16 /* vector width along the columns */
#endif
#ifndef MIX_NV
#define MIX_NV 2 /* vectors per row per work-item */
#endif
#define MIX_COLS (MIX_VE * MIX_NV)

/* global: (ceil(x / MIX_COLS), ceil(m / MIX_MR)). Row-major A (leading dimension lda), B and C
 * (leading dimension x). Sums run over k in order, so results do not depend on the launch. */
kernel void mixing_gemm(global const float *restrict a, const int lda, global const float *restrict b,
                        global float *restrict c, const int m, const int k, const long x)
{
    const long col0 = (long)get_global_id(0) * MIX_COLS;
    const int row0 = (int)get_global_id(1) * MIX_MR;
    if (col0 >= x || row0 >= m)
        return;
    int rows[MIX_MR]; /* rows past m repeat the last one and are not stored */
    #pragma unroll
    for (int r = 0; r < MIX_MR; ++r)
        rows[r] = min(row0 + r, m - 1);
    if (col0 + MIX_COLS <= x) {
        VEC(MIX_VE) acc[MIX_MR][MIX_NV];
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            #pragma unroll
            for (int j = 0; j < MIX_NV; ++j)
                acc[r][j] = (VEC(MIX_VE))(0.0f);
        for (int kk = 0; kk < k; ++kk) {
            VEC(MIX_VE) bv[MIX_NV];
            #pragma unroll
            for (int j = 0; j < MIX_NV; ++j)
                bv[j] = VLOADN(MIX_VE, 0, b + (long)kk * x + col0 + j * MIX_VE);
            #pragma unroll
            for (int r = 0; r < MIX_MR; ++r) {
                const float av = a[(long)rows[r] * lda + kk];
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    acc[r][j] += av * bv[j];
            }
        }
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            if (row0 + r < m)
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    VSTOREN(MIX_VE, acc[r][j], 0, c + (long)(row0 + r) * x + col0 + j * MIX_VE);
    } else { /* the last, partial column tile */
        for (long col = col0; col < x; ++col)
            for (int r = 0; r < MIX_MR && row0 + r < m; ++r) {
                float acc = 0.0f;
                for (int kk = 0; kk < k; ++kk)
                    acc += a[(long)(row0 + r) * lda + kk] * b[(long)kk * x + col];
                c[(long)(row0 + r) * x + col] = acc;
            }
    }
}

/* The tiled forward's mixing (summary_tiled.cl's partial summaries): where blocks are split into
 * `splits` segments, each block's summary is first the sum of its segments' rows, added in segment
 * order (written to `sum` by the first row tile, for the backward), then mixed: c = a * S. One launch
 * where the untiled forward takes a reduction and a GEMM. With splits = 1, `part` is the summaries
 * and `sum` is not written.
 * global: (ceil(x / MIX_COLS), ceil(m / MIX_MR)); a is m x m (leading dimension m). */
kernel void mixing_splits(global const float *restrict a, global const float *restrict part,
                          global float *restrict sum, global float *restrict c, const int m, const int splits,
                          const long x)
{
    const long col0 = (long)get_global_id(0) * MIX_COLS;
    const int row0 = (int)get_global_id(1) * MIX_MR;
    if (col0 >= x || row0 >= m)
        return;
    const int write_sum = splits > 1 && row0 == 0;
    int rows[MIX_MR]; /* rows past m repeat the last one and are not stored */
    #pragma unroll
    for (int r = 0; r < MIX_MR; ++r)
        rows[r] = min(row0 + r, m - 1);
    if (col0 + MIX_COLS <= x) {
        VEC(MIX_VE) acc[MIX_MR][MIX_NV];
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            #pragma unroll
            for (int j = 0; j < MIX_NV; ++j)
                acc[r][j] = (VEC(MIX_VE))(0.0f);
        /* unrolled: a GPU work-item then has several blocks' loads in flight (few work-items here) */
        #pragma unroll 4
        for (int kk = 0; kk < m; ++kk) {
            VEC(MIX_VE) bv[MIX_NV];
            global const float *src = part + (long)kk * splits * x + col0;
            #pragma unroll
            for (int j = 0; j < MIX_NV; ++j)
                bv[j] = VLOADN(MIX_VE, 0, src + j * MIX_VE);
            for (int s = 1; s < splits; ++s)
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    bv[j] += VLOADN(MIX_VE, 0, src + (long)s * x + j * MIX_VE);
            if (write_sum)
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    VSTOREN(MIX_VE, bv[j], 0, sum + (long)kk * x + col0 + j * MIX_VE);
            #pragma unroll
            for (int r = 0; r < MIX_MR; ++r) {
                const float av = a[(long)rows[r] * m + kk];
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    acc[r][j] += av * bv[j];
            }
        }
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            if (row0 + r < m)
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    VSTOREN(MIX_VE, acc[r][j], 0, c + (long)(row0 + r) * x + col0 + j * MIX_VE);
    } else { /* the last, partial column tile */
        for (long col = col0; col < x; ++col) {
            float acc[MIX_MR];
            for (int r = 0; r < MIX_MR; ++r)
                acc[r] = 0.0f;
            for (int kk = 0; kk < m; ++kk) {
                float b = part[(long)kk * splits * x + col];
                for (int s = 1; s < splits; ++s)
                    b += part[((long)kk * splits + s) * x + col];
                if (write_sum)
                    sum[(long)kk * x + col] = b;
                for (int r = 0; r < MIX_MR; ++r)
                    acc[r] += a[(long)rows[r] * m + kk] * b;
            }
            for (int r = 0; r < MIX_MR && row0 + r < m; ++r)
                c[(long)(row0 + r) * x + col] = acc[r];
        }
    }
}
