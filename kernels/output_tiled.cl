/* Stage 3 of non-causal MHLA on GPUs: the read-out out = q~ S~_b / (q~ . z~_b + eps) of a tile of
 * TL_TQ tokens of one block as a tiled product. The group copies TL_DC key dimensions of the
 * tile's q~ (scale and feature map applied once, on the copy; stored transposed so that a work-item
 * reads its 4 tokens as one float4) and the same rows of the block's mixed summary into local
 * memory, and every work-item adds a TL_QR-token x 4-column register tile over them (8 tokens: two
 * float4 of q~ and one of the summary feed 32 multiply-adds, where 4 take 16 from two); the next
 * dimensions' pieces are loaded into registers meanwhile. Each summary row is then read from global
 * memory once per group instead of once per work-item (output.cl, whose work-items each walk the
 * whole summary: the CPU form). The normalizer's dot products q~ . z~ are summed on the copies, one
 * token per work-item; the official normalizer's denominators are read from `den` (the per-token
 * dots mixed by Mc: forward/mixing.c). */
#include "common.h"
#include "tiled.h"

#ifndef TL_TQ
#define TL_TQ 64 /* tokens per group (a multiple of 4) */
#endif
#ifndef TL_TV
#define TL_TV 64 /* output columns per group (a multiple of 4) */
#endif
#ifndef TL_DC
#define TL_DC 32 /* key dimensions per local tile (a multiple of 4) */
#endif
#ifndef TL_QR
#define TL_QR 4 /* tokens per work-item, 4 or 8 (dividing TL_TQ) */
#endif
#define TL_QQ (TL_TQ / 4) /* float4 pieces of a transposed q~ row: 4 tokens each */
#define TL_QV (TL_TV / 4)
#define TL_QC (TL_DC / 4) /* float4 pieces of a q row's TL_DC dimensions */
#define TL_RQ (TL_QR / 4) /* q~ pieces per work-item token tile */
#define TL_WG ((TL_TQ / TL_QR) * TL_QV)
#define TL_LQ (TL_QQ + 1) /* the transposed q~ rows, padded: the copy's stores spread over the banks */
#define TL_NV ((DV + TL_TV - 1) / TL_TV)
#define TL_PQ ((TL_TQ * TL_QC + TL_WG - 1) / TL_WG) /* q pieces a work-item copies per tile */
#define TL_PS ((TL_DC * TL_QV + TL_WG - 1) / TL_WG) /* summary pieces */

/* Row d, columns c..c+3 of block blk's mixed summary (zeros past Dv) for summary head kvh of
 * `heads`: read from `rows` where sources = 0, else mixed here from the sources' segment rows (of
 * the key/value blocks), row j weighted by mc[blk][j / splits], Mc being M x kv_m (mixing.cl's
 * mixing_splits adds them in the same order). */
float4 summary_quad(global const float *rows, global const float *mc, const int sources, const int splits,
                    const mhla_grid g, const int heads, const int blk, const int kvh, const int d, const int c)
{
    if (sources == 0)
        return tiled_quad_f32(rows + summary_s_offset(heads, blk, kvh, d), c, DV, TILED_SUMMARY_ALIGNED);
    float4 x = (float4)(0.0f);
    for (int j = 0; j < sources; ++j)
        x += mc[(long)blk * g.kv_m + j / splits] *
             tiled_quad_f32(rows + summary_s_offset(heads, j, kvh, d), c, DV, TILED_SUMMARY_ALIGNED);
    return x;
}

/* global: (TL_WG * TL_NV, B*H, M * ceil(Nb / TL_TQ)), local (TL_WG, 1, 1). Work-item (column tile ct
 * fastest, token tile rq): neighbouring work-items store neighbouring float4 of one output row.
 * den: [M][B*H][Nb], read with the official normalizer only (any buffer otherwise): the mixed
 * denominators where den_mixed, else the blocks' dots, mixed here by Mc (mc) one token per work-item:
 * the dots' GEMM launch saved (forward/output.c).
 * sources = 0: `mixed` holds the mixed summaries. sources = M_kv * splits > 0 (few of them: N = 1024,
 * where each launch is mostly the gap before it): `mixed` holds the summaries' segment rows and the
 * group mixes its block's rows itself: one launch fewer. */
__attribute__((reqd_work_group_size(TL_WG, 1, 1)))
kernel void output_tiled(global const STORE_T *restrict q, global const float *restrict mixed,
                         global STORE_T *restrict out, const mhla_grid g_arg, const float feature_eps,
                         const float scale, const float eps, global const float *restrict mc, const int sources,
                         const int splits, global const float *restrict den, const int den_mixed)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float4 ql[TL_DC * TL_LQ], sl[TL_DC * TL_QV];
    local float zl[TL_DC], dl[TL_TQ];
    const int lid = (int)get_local_id(0);
    const int c_base = (int)get_group_id(0) * TL_TV;
    const int ct = lid % TL_QV, rq = lid / TL_QV;
    const int bh = (int)get_global_id(1);
    const int groups = (g.nb + TL_TQ - 1) / TL_TQ;
    const int blk = (int)get_global_id(2) / groups;
    const int p0 = ((int)get_global_id(2) - blk * groups) * TL_TQ;
    const int heads = kv_count(g), kvh = kv_of(g, bh); /* the summary head this query head reads */
    global const float *z = mixed + summary_z_offset(heads, blk, kvh);
    global const STORE_T *qb = q + row_base(g, bh, DK);
    const long qs = row_stride(g, DK);
    /* whole float4 of q and output rows: rows of 4n values from an aligned buffer (kernels/tiled.h) */
    const int qa = (DK % 4 == 0) & TILED_BASE_OK(q), oa = (DV % 4 == 0) & TILED_BASE_OK(out);
    float4 acc[TL_QR], qr[TL_PQ], sr[TL_PS];
    for (int r = 0; r < TL_QR; ++r)
        acc[r] = (float4)(0.0f);
    for (int i = lid; i < TL_TQ; i += TL_WG)
        dl[i] = 0.0f;

    /* Dimensions d0.. into qr and sr: q piece i is token i / TL_QC, dimensions 4 (i % TL_QC)..;
     * summary piece i is row i / TL_QV, columns 4 (i % TL_QV)..; zeros past the block, the head's
     * dimensions and its columns. */
#define OUTPUT_FETCH(d0_)                                                                           \
    do {                                                                                            \
        _Pragma("unroll") for (int j_ = 0; j_ < TL_PQ; ++j_) {                                      \
            const int i_ = lid + j_ * TL_WG, t_ = i_ / TL_QC, p_ = p0 + t_;                         \
            qr[j_] = i_ < TL_TQ * TL_QC && p_ < g.nb                                                \
                         ? (scale) * tiled_feature_quad(qb + token_of(g, blk, p_) * qs,             \
                                                        (d0_) + 4 * (i_ - t_ * TL_QC), DK, qa,      \
                                                        feature_eps)                                \
                         : (float4)(0.0f);                                                          \
        }                                                                                           \
        _Pragma("unroll") for (int j_ = 0; j_ < TL_PS; ++j_) {                                      \
            const int i_ = lid + j_ * TL_WG, d_ = i_ / TL_QV;                                       \
            sr[j_] = i_ < TL_DC * TL_QV && (d0_) + d_ < DK                                          \
                         ? summary_quad(mixed, mc, sources, splits, g, heads, blk, kvh, (d0_) + d_, \
                                        c_base + 4 * (i_ - d_ * TL_QV))                             \
                         : (float4)(0.0f);                                                          \
        }                                                                                           \
    } while (0)

    OUTPUT_FETCH(0);
    for (int d0 = 0; d0 < DK; d0 += TL_DC) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done with ql, sl and zl */
        #pragma unroll
        for (int j = 0; j < TL_PQ; ++j) { /* transposed: dimension-major, 4 tokens a float4 */
            const int i = lid + j * TL_WG, t = i / TL_QC;
            if (i < TL_TQ * TL_QC)
                tiled_put_column(ql, TL_LQ, 4 * (i - t * TL_QC), t, qr[j]);
        }
        #pragma unroll
        for (int j = 0; j < TL_PS; ++j)
            if (lid + j * TL_WG < TL_DC * TL_QV)
                sl[lid + j * TL_WG] = sr[j];
        for (int i = lid; i < TL_DC; i += TL_WG) {
            float zi = sources == 0 && d0 + i < DK ? z[d0 + i] : 0.0f;
            for (int j = 0; j < sources && d0 + i < DK; ++j)
                zi += mc[(long)blk * g.kv_m + j / splits] * mixed[summary_z_offset(heads, j, kvh) + d0 + i];
            zl[i] = zi;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (d0 + TL_DC < DK)
            OUTPUT_FETCH(d0 + TL_DC); /* in flight during the multiply-adds below */
#if NORMALIZER == 0
        /* each token's dot product by the one work-item that also zeroed and will read it */
        for (int i = lid; i < TL_TQ; i += TL_WG) {
            float ds = dl[i];
            for (int d = 0; d < TL_DC; ++d)
                ds += ((local const float *)ql)[d * 4 * TL_LQ + i] * zl[d];
            dl[i] = ds;
        }
#endif
        #pragma unroll 8
        for (int d = 0; d < TL_DC; ++d) {
            const float4 b = sl[d * TL_QV + ct];
            #pragma unroll
            for (int u = 0; u < TL_RQ; ++u)
                tiled_mad4x4(acc + 4 * u, ql[d * TL_LQ + rq * TL_RQ + u], b);
        }
    }
#undef OUTPUT_FETCH
#if NORMALIZER == 1
    if (!den_mixed) /* den holds the blocks' dots: each token's denominator mixed here, blocks in order */
        for (int i = lid; i < TL_TQ; i += TL_WG) {
            const int p = p0 + i;
            float ds = 0.0f;
            for (int b = 0; b < g.kv_m && p < g.nb; ++b)
                ds += mc[(long)blk * g.kv_m + b] * den[((long)b * g.bh + bh) * g.nb + p];
            dl[i] = ds;
        }
#endif
    barrier(CLK_LOCAL_MEM_FENCE); /* dl's last sums */
    const int c = c_base + 4 * ct;
    if (c >= DV)
        return;
    global STORE_T *ob = out + row_base(g, bh, DV) + c;
    const long os = row_stride(g, DV);
    for (int r = 0; r < TL_QR; ++r) {
        const int t = TL_QR * rq + r, p = p0 + t;
        if (p >= g.nb)
            break;
#if NORMALIZER == 0
        const float4 y = acc[r] / (dl[t] + eps);
#elif NORMALIZER == 1
        const float4 y = acc[r] / ((den_mixed ? den[((long)blk * g.bh + bh) * g.nb + p] : dl[t]) + eps);
#else
        const float4 y = acc[r];
#endif
        tiled_store(y, ob + token_of(g, blk, p) * os, DV - c, oa);
    }
}
