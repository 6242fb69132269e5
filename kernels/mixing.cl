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
/* A work-item's MIX_MR x MIX_NV accumulator vectors, zeroed. */
#define MIX_ACC_ZERO(acc)                                                                           \
    do {                                                                                            \
        _Pragma("unroll") for (int r_ = 0; r_ < MIX_MR; ++r_)                                       \
            _Pragma("unroll") for (int j_ = 0; j_ < MIX_NV; ++j_)                                   \
                (acc)[r_][j_] = (VEC(MIX_VE))(0.0f);                                                \
    } while (0)

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
        MIX_ACC_ZERO(acc);
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
 * and `sum` is not written. The group's MIX_MR rows of `a` are staged in local memory, MIXS_KB
 * blocks at a time: each work-item then reads them there (one broadcast for the group) instead of
 * MIX_MR loads from global memory per block, which made this launch 45% of the forward on an
 * H100 at M = 64.
 * global: (ceil(x / MIX_COLS) rounded up to the group, ceil(m / MIX_MR)), local (L, 1): the group's
 * work-items share one row tile. a is m x k (query blocks by key/value blocks, leading dimension k),
 * or with a_trans, the transpose of a k x m matrix read in place (the backward's dS = Mc^T G: no
 * transposed copy of Mc, one launch fewer). */
#define MIXS_KB 64 /* blocks of `a` per pass through local memory */
void mixs_load(global const float *p, const long col, const long x, VEC(MIX_VE) *out)
{
    if (col + MIX_VE <= x) {
        *out = VLOADN(MIX_VE, 0, p);
        return;
    }
    float tmp[MIX_VE];
    for (int e = 0; e < MIX_VE; ++e)
        tmp[e] = col + e < x ? p[e] : 0.0f;
    *out = VLOADN(MIX_VE, 0, tmp);
}
void mixs_store(const VEC(MIX_VE) v, global float *p, const long col, const long x)
{
    if (col + MIX_VE <= x) {
        VSTOREN(MIX_VE, v, 0, p);
        return;
    }
    float tmp[MIX_VE];
    VSTOREN(MIX_VE, v, 0, tmp);
    for (int e = 0; e < MIX_VE && col + e < x; ++e)
        p[e] = tmp[e];
}
kernel void mixing_splits(global const float *restrict a, global const float *restrict part,
                          global float *restrict sum, global float *restrict c, const int m, const int k,
                          const int splits, const long x, const int a_trans)
{
    local float al[MIXS_KB * MIX_MR]; /* al[kk * MIX_MR + r] = a[row0 + r][kb0 + kk] */
    const long col0 = (long)get_global_id(0) * MIX_COLS;
    const int row0 = (int)get_group_id(1) * MIX_MR;
    const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
    const int active = col0 < x; /* work-items past the columns load `a` and meet the barriers */
    const int write_sum = splits > 1 && row0 == 0;
    VEC(MIX_VE) acc[MIX_MR][MIX_NV];
    MIX_ACC_ZERO(acc);
    for (int kb0 = 0; kb0 < k; kb0 += MIXS_KB) {
        const int kn = min(MIXS_KB, k - kb0);
        barrier(CLK_LOCAL_MEM_FENCE); /* the last pass's readers are done with al */
        for (int i = lid; i < kn * MIX_MR; i += lsize) {
            const int r = i / kn, kk = i - r * kn; /* neighbouring work-items: neighbouring blocks of a row */
            const int row = min(row0 + r, m - 1);
            al[kk * MIX_MR + r] = a_trans ? a[(long)(kb0 + kk) * m + row] : a[(long)row * k + kb0 + kk];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!active)
            continue;
        for (int kk = 0; kk < kn; ++kk) {
            VEC(MIX_VE) bv[MIX_NV];
            global const float *src = part + (long)(kb0 + kk) * splits * x + col0;
            #pragma unroll
            for (int j = 0; j < MIX_NV; ++j)
                mixs_load(src + j * MIX_VE, col0 + j * MIX_VE, x, &bv[j]);
            for (int sp = 1; sp < splits; ++sp)
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j) {
                    VEC(MIX_VE) y;
                    mixs_load(src + (long)sp * x + j * MIX_VE, col0 + j * MIX_VE, x, &y);
                    bv[j] += y;
                }
            if (write_sum)
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    mixs_store(bv[j], sum + (long)(kb0 + kk) * x + col0 + j * MIX_VE, col0 + j * MIX_VE, x);
            #pragma unroll
            for (int r = 0; r < MIX_MR; ++r) {
                const float av = al[kk * MIX_MR + r];
                #pragma unroll
                for (int j = 0; j < MIX_NV; ++j)
                    acc[r][j] += av * bv[j];
            }
        }
    }
    if (!active)
        return;
    #pragma unroll
    for (int r = 0; r < MIX_MR; ++r)
        if (row0 + r < m)
            #pragma unroll
            for (int j = 0; j < MIX_NV; ++j)
                mixs_store(acc[r][j], c + (long)(row0 + r) * x + col0 + j * MIX_VE, col0 + j * MIX_VE, x);
}
