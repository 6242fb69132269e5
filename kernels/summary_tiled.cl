/* Stage 1 of non-causal MHLA on GPUs: each block's summary S_b = sum k~ v^T and key sum z_b as a
 * work-group tiled reduction. The group copies TL_TK tokens of k~ (the feature map applied once,
 * on the copy) and of v into local memory, neighbouring work-items reading neighbouring 16-byte
 * pieces of a row (coalesced), then every work-item adds a TL_RR x 4 register tile over those tokens
 * (8 rows: two float4 of k~ and one of v feed 32 multiply-adds, where 4 x 4 takes 16 from two).
 * Where the CPU kernel (block_summary.cl) has each work-item walk its own k and v columns through
 * cache, here a token's rows cross the memory bus once per group and are read from local memory by
 * all of its work-items. The next tile's rows are loaded into registers while the group multiplies
 * the current one, so that their latency hides behind the multiply-adds. A long block is split into
 * segments (one group each); their partial summaries are added in a fixed order by the mixing
 * (mixing.cl, mixing_splits): no atomics, the result is the same run to run. */
#include "common.h"
#include "tiled.h"

#ifndef TL_TK
#define TL_TK 32 /* tokens per local tile */
#endif
#ifndef TL_TD
#define TL_TD 64 /* key rows of the summary per group (a multiple of 4) */
#endif
#ifndef TL_TV
#define TL_TV 64 /* value columns per group (a multiple of 4) */
#endif
#ifndef TL_RR
#define TL_RR 4 /* key rows per work-item, 4 or 8 (dividing TL_TD) */
#endif
#define TL_QD (TL_TD / 4) /* float4 pieces of a k~ row of the tile */
#define TL_QV (TL_TV / 4)
#define TL_RQ (TL_RR / 4) /* k~ pieces per work-item row tile */
#define TL_WG ((TL_TD / TL_RR) * TL_QV)
#define TL_NV ((DV + TL_TV - 1) / TL_TV) /* column tiles */
#define TL_KQ ((TL_TK * TL_QD + TL_WG - 1) / TL_WG) /* k~ pieces a work-item copies per tile */
#define TL_VQ ((TL_TK * TL_QV + TL_WG - 1) / TL_WG)

/* global: (TL_WG * ceil(DK/TL_TD) * TL_NV, B*H, M*splits), local (TL_WG, 1, 1). Group (tile, bh,
 * segment) writes rows blk*splits + split of `dst` ([M*splits][row], kernels/common.h's offsets).
 * Work-item (column tile ct fastest, row tile rt): rows TL_RR rt.. of the group's key rows, columns
 * 4 ct.. of its value columns; in a warp the v tile's float4 reads are contiguous and the k~ reads
 * one address for many work-items (a broadcast). `weighted` (a constant at each call, so the other
 * form compiles away): the backward's gradient summaries G = sum q~ [w dO | zscale wz]^T from k = q
 * and v = dO in place, with per-token weights w and wz ([M][B*H][Nb], as block_summary_weighted's):
 * each v piece is scaled by its token's w on its way into registers, and the key sums by wz. */
__attribute__((always_inline)) inline void
summary_tiled_body(global const STORE_T *k, global const STORE_T *v, global float *dst,
                   const mhla_grid g, const float feature_eps, const int splits, const int split_len,
                   const int weighted, global const float *w, global const float *wz, const float zscale,
                   local float4 *kl, local float4 *vl, local float *zl, local float *wzl)
{
    const int lid = (int)get_local_id(0);
    const int tile = (int)get_group_id(0);
    const int d_base = (tile / TL_NV) * TL_TD, c_base = (tile % TL_NV) * TL_TV;
    const int ct = lid % TL_QV, rt = lid / TL_QV;
    const int bh = (int)get_global_id(1), bs = (int)get_global_id(2);
    const int blk = bs / splits;
    const int p_begin = (bs - blk * splits) * split_len;
    const int p_end = min(p_begin + split_len, g.nb);
    const long at = ((long)blk * g.bh + bh) * g.nb; /* the weights' row */
    global const STORE_T *kb = k + row_base(g, bh, DK) + d_base;
    global const STORE_T *vb = v + row_base(g, bh, DV) + c_base;
    const long ks = row_stride(g, DK), vs = row_stride(g, DV);
    /* whole float4 of k and v rows: rows of 4n values from an aligned buffer (kernels/tiled.h) */
    const int ka = (DK % 4 == 0) & TILED_BASE_OK(k), va = (DV % 4 == 0) & TILED_BASE_OK(v);
    /* The key sums, by the groups of the first column tile: row d by work-item d % TL_WG, in zl (a
     * small group has fewer work-items than rows). Each row has one owner: no barrier of its own. */
    const int zsum = c_base == 0;
    for (int d = lid; d < TL_TD; d += TL_WG)
        zl[d] = 0.0f;
    float4 acc[TL_RR], kr[TL_KQ], vr[TL_VQ];
    for (int r = 0; r < TL_RR; ++r)
        acc[r] = (float4)(0.0f);

    /* The tile of tokens p0.. into kr and vr: piece i of the k~ tile is token i / TL_QD, columns
     * 4 (i % TL_QD)..; tokens past the segment and columns past the head's are zeros. */
#define SUMMARY_FETCH(p0_)                                                                          \
    do {                                                                                            \
        _Pragma("unroll") for (int j_ = 0; j_ < TL_KQ; ++j_) {                                      \
            const int i_ = lid + j_ * TL_WG, t_ = i_ / TL_QD, p_ = (p0_) + t_;                      \
            kr[j_] = i_ < TL_TK * TL_QD && p_ < p_end                                               \
                         ? tiled_feature_quad(kb + token_of(g, blk, p_) * ks, 4 * (i_ - t_ * TL_QD), \
                                              DK - d_base, ka, feature_eps)                         \
                         : (float4)(0.0f);                                                          \
        }                                                                                           \
        _Pragma("unroll") for (int j_ = 0; j_ < TL_VQ; ++j_) {                                      \
            const int i_ = lid + j_ * TL_WG, t_ = i_ / TL_QV, p_ = (p0_) + t_;                      \
            vr[j_] = i_ < TL_TK * TL_QV && p_ < p_end                                               \
                         ? tiled_quad(vb + token_of(g, blk, p_) * vs, 4 * (i_ - t_ * TL_QV), DV - c_base, \
                                      va)                                                           \
                         : (float4)(0.0f);                                                          \
            if (weighted && p_ < p_end)                                                             \
                vr[j_] *= w[at + p_];                                                               \
        }                                                                                           \
    } while (0)

    SUMMARY_FETCH(p_begin);
    for (int p0 = p_begin; p0 < p_end; p0 += TL_TK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done with kl and vl */
        #pragma unroll
        for (int j = 0; j < TL_KQ; ++j)
            if (lid + j * TL_WG < TL_TK * TL_QD)
                kl[lid + j * TL_WG] = kr[j];
        #pragma unroll
        for (int j = 0; j < TL_VQ; ++j)
            if (lid + j * TL_WG < TL_TK * TL_QV)
                vl[lid + j * TL_WG] = vr[j];
        if (weighted && zsum)
            for (int t = lid; t < TL_TK; t += TL_WG)
                wzl[t] = p0 + t < p_end ? wz[at + p0 + t] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (p0 + TL_TK < p_end)
            SUMMARY_FETCH(p0 + TL_TK); /* in flight during the multiply-adds below */
        if (zsum)
            for (int d = lid; d < TL_TD; d += TL_WG) {
                float z = zl[d];
                if (weighted)
                    for (int t = 0; t < TL_TK; ++t)
                        z += wzl[t] * ((local const float *)kl)[t * TL_TD + d];
                else
                    for (int t = 0; t < TL_TK; ++t)
                        z += ((local const float *)kl)[t * TL_TD + d];
                zl[d] = z;
            }
        #pragma unroll 8
        for (int t = 0; t < TL_TK; ++t) {
            const float4 b = vl[t * TL_QV + ct];
            #pragma unroll
            for (int q = 0; q < TL_RQ; ++q)
                tiled_mad4x4(acc + 4 * q, kl[t * TL_QD + rt * TL_RQ + q], b);
        }
    }
#undef SUMMARY_FETCH
    if (zsum)
        for (int d = lid; d < TL_TD && d_base + d < DK; d += TL_WG)
            dst[summary_z_offset(g.bh, bs, bh) + d_base + d] = weighted ? zscale * zl[d] : zl[d];
    const int c = c_base + 4 * ct;
    for (int r = 0; r < TL_RR; ++r) {
        const int d = d_base + TL_RR * rt + r;
        if (d < DK && c < DV)
            tiled_store_f32(acc[r], dst + summary_s_offset(g.bh, bs, bh, d) + c, DV - c, TILED_SUMMARY_ALIGNED);
    }
}

/* (The kernels' pointers are restrict; the body's are not: inlined restrict parameters become
 * llvm.experimental.noalias.scope.decl calls, which Oclgrind cannot run.) */
__attribute__((reqd_work_group_size(TL_WG, 1, 1)))
kernel void summary_tiled(global const STORE_T *restrict k, global const STORE_T *restrict v,
                          global float *restrict dst, const mhla_grid g_arg, const float feature_eps, const int splits,
                          const int split_len)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float4 kl[TL_TK * TL_QD], vl[TL_TK * TL_QV];
    local float zl[TL_TD];
    summary_tiled_body(k, v, dst, g, feature_eps, splits, split_len, 0, (global const float *)0,
                       (global const float *)0, 0.0f, kl, vl, zl, zl);
}

/* The gradient summaries (the arguments of block_summary_weighted, in its order). */
__attribute__((reqd_work_group_size(TL_WG, 1, 1)))
kernel void summary_tiled_weighted(global const STORE_T *restrict k, global const STORE_T *restrict v,
                                   global float *restrict dst, const mhla_grid g_arg, const float feature_eps,
                                   const int splits, const int split_len, global const float *restrict w,
                                   global const float *restrict wz, const float zscale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float4 kl[TL_TK * TL_QD], vl[TL_TK * TL_QV];
    local float zl[TL_TD], wzl[TL_TK];
    summary_tiled_body(k, v, dst, g, feature_eps, splits, split_len, 1, w, wz, zscale, kl, vl, zl, wzl);
}
