/* Stage 3 of non-causal MHLA on GPUs: the read-out out = q~ S~_b / (q~ . z~_b + eps) of a tile of
 * TL_TQ tokens of one block as a tiled product. The group copies TL_DC key dimensions of the
 * tile's q~ (scale and feature map applied once, on the copy; stored transposed so that a work-item
 * reads its 4 tokens as one float4) and the same rows of the block's mixed summary into local
 * memory, and every work-item adds a 4-token x 4-column register tile over them. Each summary row is
 * then read from global memory once per group instead of once per work-item (output.cl, whose
 * work-items each walk the whole summary: the CPU form). The normalizer's dot products q~ . z~ are
 * summed on the copies, one token per work-item. */
#include "common.h"

#ifndef TL_TQ
#define TL_TQ 64 /* tokens per group (a multiple of 4) */
#endif
#ifndef TL_TV
#define TL_TV 64 /* output columns per group (a multiple of 4) */
#endif
#ifndef TL_DC
#define TL_DC 32 /* key dimensions per local tile */
#endif
#define TL_WQ (TL_TQ / 4)
#define TL_WV (TL_TV / 4)
#define TL_WG (TL_WQ * TL_WV)
#define TL_LQ (TL_TQ + 4) /* the transposed q~ rows, padded: the copy's stores spread over the banks */
#define TL_NV ((DV + TL_TV - 1) / TL_TV)

/* global: (TL_WG * TL_NV, B*H, M * ceil(Nb / TL_TQ)), local (TL_WG, 1, 1). Work-item (column tile ct
 * fastest, token tile rq): neighbouring work-items store neighbouring float4 of one output row. */
__attribute__((reqd_work_group_size(TL_WG, 1, 1)))
kernel void output_tiled(global const STORE_T *restrict q, global const float *restrict mixed,
                         global STORE_T *restrict out, const mhla_grid g_arg, const float feature_eps,
                         const float scale, const float eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float ql[TL_DC * TL_LQ], sl[TL_DC * TL_TV], zl[TL_DC], dl[TL_TQ];
    const int lid = (int)get_local_id(0);
    const int c_base = (int)get_group_id(0) * TL_TV;
    const int ct = lid % TL_WV, rq = lid / TL_WV;
    const int bh = (int)get_global_id(1);
    const int groups = (g.nb + TL_TQ - 1) / TL_TQ;
    const int blk = (int)get_global_id(2) / groups;
    const int p0 = ((int)get_global_id(2) - blk * groups) * TL_TQ;
    global const float *s = mixed + summary_s_offset(g.bh, blk, bh, 0) + c_base;
    global const float *z = mixed + summary_z_offset(g.bh, blk, bh);
    global const STORE_T *qb = q + row_base(g, bh, DK);
    const long qs = row_stride(g, DK);
    float4 acc[4];
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);
    for (int i = lid; i < TL_TQ; i += TL_WG)
        dl[i] = 0.0f;

    for (int d0 = 0; d0 < DK; d0 += TL_DC) {
        for (int i = lid; i < TL_TQ * TL_DC; i += TL_WG) {
            const int t = i / TL_DC, d = i - t * TL_DC, p = p0 + t;
            float x = 0.0f;
            if (p < g.nb && d0 + d < DK)
                x = scale * feature(LOADN(1, d0 + d, qb + token_of(g, blk, p) * qs), feature_eps);
            ql[d * TL_LQ + t] = x;
        }
        for (int i = lid; i < TL_DC * TL_TV; i += TL_WG) {
            const int d = i / TL_TV, c = i - d * TL_TV;
            sl[i] = d0 + d < DK && c_base + c < DV ? s[(long)(d0 + d) * DV + c] : 0.0f;
        }
        for (int i = lid; i < TL_DC; i += TL_WG)
            zl[i] = d0 + i < DK ? z[d0 + i] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
#if NORMALIZER == 0
        /* each token's dot product by the one work-item that also zeroed and will read it */
        for (int i = lid; i < TL_TQ; i += TL_WG) {
            float ds = dl[i];
            for (int d = 0; d < TL_DC; ++d)
                ds += ql[d * TL_LQ + i] * zl[d];
            dl[i] = ds;
        }
#endif
        #pragma unroll 8
        for (int d = 0; d < TL_DC; ++d) {
            const float4 a = vload4(rq, ql + d * TL_LQ);
            const float4 b = vload4(ct, sl + d * TL_TV);
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next tile overwrites ql, sl and zl (and dl is read below) */
    }
    const int c = c_base + 4 * ct;
    if (c >= DV)
        return;
    global STORE_T *ob = out + row_base(g, bh, DV) + c;
    const long os = row_stride(g, DV);
    for (int r = 0; r < 4; ++r) {
        const int t = 4 * rq + r, p = p0 + t;
        if (p >= g.nb)
            break;
#if NORMALIZER == 0
        const float4 y = acc[r] / (dl[t] + eps);
#else
        const float4 y = acc[r];
#endif
        global STORE_T *row = ob + token_of(g, blk, p) * os;
        if (c + 4 <= DV) {
            STOREN(4, y, 0, row);
        } else {
            const float x[4] = {y.x, y.y, y.z, y.w};
            for (int j = 0; j < DV - c; ++j)
                STOREN(1, x[j], j, row);
        }
    }
}
