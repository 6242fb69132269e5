/* Softmax attention, the baseline MHLA is measured against (docs/spec.md "Softmax attention"):
 * o_t = sum_s softmax_s(scale q_t . k_s) v_s, flash-style. A work-group owns a tile of queries
 * (one work-item per query row, its q row and output accumulator private), streams keys and values
 * through local memory BK rows at a time and keeps a running max and sum per row (online softmax),
 * so memory stays O(N): no N x N buffer exists anywhere. */
#include "common.h"

#ifndef VW
#define VW 4 /* vector width of the inner loops (1, 2, 4, 8 or 16): the device's preferred width */
#endif
#ifndef BK
#define BK 32 /* keys per local-memory tile; a multiple of VW, chosen by the host to fit local memory */
#endif
#ifndef COPY_ROWS
#define COPY_ROWS 0 /* tile copy: 0 consecutive work-items read consecutive elements (coalesced, GPUs); \
                       1 each work-item copies whole key/value rows (contiguous, vectorized: CPUs) */
#endif

#if BK % VW != 0
#error "BK must be a multiple of VW"
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VW == 1
#define floatv float
#define vloadv(i, p) ((p)[i])
#define vstorev(x, i, p) ((p)[i] = (x))
#else
#define floatv CAT(float, VW)
#define vloadv CAT(vload, VW)
#define vstorev CAT(vstore, VW)
#endif

#define DVP ((DV + VW - 1) / VW * VW) /* value columns padded to whole vectors (the pad is zero) */
#define NS (BK / VW)                  /* score vectors per tile */
#define NO (DVP / VW)                 /* accumulator vectors per row */

/* Horizontal reductions by halving, without indexing a vector by a variable (not OpenCL C). */
float hsum(const floatv x)
{
#if VW == 16
    const float8 x8 = x.lo + x.hi;
#elif VW == 8
    const float8 x8 = x;
#endif
#if VW >= 8
    const float4 x4 = x8.lo + x8.hi;
#elif VW == 4
    const float4 x4 = x;
#endif
#if VW >= 4
    const float2 x2 = x4.lo + x4.hi;
#elif VW == 2
    const float2 x2 = x;
#endif
#if VW >= 2
    return x2.x + x2.y;
#else
    return x;
#endif
}

float hmax(const floatv x)
{
#if VW == 16
    const float8 x8 = fmax(x.lo, x.hi);
#elif VW == 8
    const float8 x8 = x;
#endif
#if VW >= 8
    const float4 x4 = fmax(x8.lo, x8.hi);
#elif VW == 4
    const float4 x4 = x;
#endif
#if VW >= 4
    const float2 x2 = fmax(x4.lo, x4.hi);
#elif VW == 2
    const float2 x2 = x;
#endif
#if VW >= 2
    return fmax(x2.x, x2.y);
#else
    return x;
#endif
}

/* global: (N rounded up to the local size, B*H); local: (query rows per tile, 1). Work-items past
 * the last token still help load the tiles (every work-item must reach the barriers) but write
 * nothing. `g` is the queries' grid, `kg` the keys' and values' (their N_kv tokens and H_kv heads:
 * the same grid but for cross-attention and grouped key/value heads). */
kernel void softmax_attention(global const STORE_T *restrict q, global const STORE_T *restrict k,
                              global const STORE_T *restrict v, global STORE_T *restrict out, const mhla_grid g_arg,
                              const float scale, const mhla_grid kg_arg)
{
    const mhla_grid g = g_arg, kg = kg_arg; /* kernels/common.h: read the struct arguments once, up front */
    local float kt[DK * BK]; /* key tile, transposed: kt[d*BK + j], so scores form whole vectors */
    local float vt[BK * DVP]; /* value tile: vt[j*DVP + e] */
    local float bias[BK];     /* 0 for a key inside the sequence, -inf past its end */
    const int lid = (int)get_local_id(0);
    const int lsize = (int)get_local_size(0);
    const int t = (int)get_global_id(0);
    const int bh = (int)get_global_id(1);
    const int active = t < g.n;
    const long qbase = row_base(g, bh, DK), qstride = row_stride(g, DK);
    const long obase = row_base(g, bh, DV), ostride = row_stride(g, DV);
    const int kvh = kv_of(g, bh); /* the key/value head of this query head */
    const long kbase = row_base(kg, kvh, DK), kstride = row_stride(kg, DK);
    const long vbase = row_base(kg, kvh, DV), vstride = row_stride(kg, DV);

    float qs[DK];
    global const STORE_T *qrow = q + qbase + (long)(active ? t : 0) * qstride;
    for (int d = 0; d < DK; ++d)
        qs[d] = active ? scale * LOADN(1, d, qrow) : 0.0f;
    floatv acc[NO];
    for (int c = 0; c < NO; ++c)
        acc[c] = (floatv)(0.0f);
    float m = -INFINITY; /* running max of the scores seen so far */
    float l = 0.0f;      /* running sum of exp(score - m) */

    for (int s0 = 0; s0 < kg.n; s0 += BK) {
        const int valid = min(BK, kg.n - s0);
        barrier(CLK_LOCAL_MEM_FENCE); /* every row is done with the previous tile */
#if COPY_ROWS
        for (int j = lid; j < BK; j += lsize) {
            const int inside = j < valid;
            global const STORE_T *krow = k + kbase + (long)(s0 + (inside ? j : 0)) * kstride;
            global const STORE_T *vrow = v + vbase + (long)(s0 + (inside ? j : 0)) * vstride;
            for (int d = 0; d < DK; ++d)
                kt[d * BK + j] = inside ? LOADN(1, d, krow) : 0.0f;
            for (int e = 0; e < DVP; ++e)
                vt[j * DVP + e] = inside && e < DV ? LOADN(1, e, vrow) : 0.0f;
        }
#else
        for (int i = lid; i < BK * DK; i += lsize) {
            const int j = i / DK, d = i - j * DK;
            kt[d * BK + j] = j < valid ? LOADN(1, kbase + (long)(s0 + j) * kstride + d, k) : 0.0f;
        }
        for (int i = lid; i < BK * DVP; i += lsize) {
            const int j = i / DVP, e = i - j * DVP;
            vt[i] = j < valid && e < DV ? LOADN(1, vbase + (long)(s0 + j) * vstride + e, v) : 0.0f;
        }
#endif
        for (int j = lid; j < BK; j += lsize)
            bias[j] = j < valid ? 0.0f : -INFINITY;
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Scores of this row against the BK keys: outer products over d, no horizontal sums. */
        floatv s[NS];
        for (int c = 0; c < NS; ++c)
            s[c] = vloadv(c, bias);
        for (int d = 0; d < DK; ++d) {
            const floatv qd = (floatv)(qs[d]);
            /* Unrolled so that the score vectors stay in registers: without it PoCL keeps them in
             * memory (a load and a store around every multiply-add, half the speed). The clang-based
             * compilers (PoCL, AMD, Intel) and NVIDIA's honour the pragma; others ignore it (C99
             * 6.10.6), which costs speed, not correctness. */
#pragma unroll
            for (int c = 0; c < NS; ++c)
                s[c] += qd * vloadv(c, kt + d * BK);
        }
        floatv smax = s[0];
        for (int c = 1; c < NS; ++c)
            smax = fmax(smax, s[c]);
        const float m_new = fmax(m, hmax(smax));
        /* While every score so far is -inf (only infinite inputs do that) the shift stays finite,
         * so exp(-inf - shift) = 0 instead of exp(-inf + inf) = NaN. */
        const float shift = m_new == -INFINITY ? 0.0f : m_new;
        const float alpha = exp(m - shift); /* rescales what was summed against the old max; 0 at first */
        float p[BK];
        floatv psum = (floatv)(0.0f);
        for (int c = 0; c < NS; ++c) {
            const floatv pc = exp(s[c] - shift);
            psum += pc;
            vstorev(pc, c, p);
        }
        l = l * alpha + hsum(psum);
        for (int c = 0; c < NO; ++c)
            acc[c] *= alpha;
        for (int j = 0; j < BK; ++j) { /* keys past the end have p = 0 and zero values */
            const floatv pj = (floatv)(p[j]);
#pragma unroll
            for (int c = 0; c < NO; ++c)
                acc[c] += pj * vloadv(c, vt + j * DVP);
        }
        m = m_new;
    }

    if (!active)
        return;
    global STORE_T *orow = out + obase + (long)t * ostride;
    for (int c = 0; c < DV / VW; ++c)
        STOREN(VW, acc[c] / l, c, orow);
#if DV % VW != 0
    float tail[VW];
    vstorev(acc[NO - 1] / l, 0, tail);
    for (int e = 0; e < DV % VW; ++e)
        STOREN(1, tail[e], (DV / VW) * VW + e, orow);
#endif
}
