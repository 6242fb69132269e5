/* Stage 1 of non-causal MHLA on GPUs: each block's summary S_b = sum k~ v^T and key sum z_b as a
 * work-group tiled reduction. The group copies TL_TK tokens of k~ (the feature map applied once,
 * on the copy) and of v into local memory with neighbouring work-items reading neighbouring
 * floats of a row (coalesced), then every work-item adds a 4 x 4 register tile over those tokens.
 * Where the CPU kernel (block_summary.cl) has each work-item walk its own k and v columns through
 * cache, here a token's rows cross the memory bus once per group and are read from local memory by
 * all of its work-items. A long block is split into segments (one group each); their partial
 * summaries are added in a fixed order by the mixing (mixing.cl, mixing_splits): no atomics, the
 * result is the same run to run. */
#include "common.h"

#ifndef TL_TK
#define TL_TK 32 /* tokens per local tile */
#endif
#ifndef TL_TD
#define TL_TD 64 /* key rows of the summary per group (a multiple of 4) */
#endif
#ifndef TL_TV
#define TL_TV 64 /* value columns per group (a multiple of 4) */
#endif
#define TL_WD (TL_TD / 4)
#define TL_WV (TL_TV / 4)
#define TL_WG (TL_WD * TL_WV)
#define TL_NV ((DV + TL_TV - 1) / TL_TV) /* column tiles */

/* global: (TL_WG * ceil(DK/TL_TD) * TL_NV, B*H, M*splits), local (TL_WG, 1, 1). Group (tile, bh,
 * segment) writes rows blk*splits + split of `dst` ([M*splits][row], kernels/common.h's offsets).
 * Work-item (column tile ct fastest, row tile rt): rows 4 rt.. of the group's key rows, columns
 * 4 ct.. of its value columns; in a warp the v tile's float4 reads are contiguous and the k~ reads
 * one address for many work-items (a broadcast). */
__attribute__((reqd_work_group_size(TL_WG, 1, 1)))
kernel void summary_tiled(global const STORE_T *restrict k, global const STORE_T *restrict v,
                          global float *restrict dst, const mhla_grid g_arg, const float feature_eps, const int splits,
                          const int split_len)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float kl[TL_TK * TL_TD], vl[TL_TK * TL_TV], zl[TL_TD];
    const int lid = (int)get_local_id(0);
    const int tile = (int)get_group_id(0);
    const int d_base = (tile / TL_NV) * TL_TD, c_base = (tile % TL_NV) * TL_TV;
    const int ct = lid % TL_WV, rt = lid / TL_WV;
    const int bh = (int)get_global_id(1), bs = (int)get_global_id(2);
    const int blk = bs / splits;
    const int p_begin = (bs - blk * splits) * split_len;
    const int p_end = min(p_begin + split_len, g.nb);
    global const STORE_T *kb = k + row_base(g, bh, DK) + d_base;
    global const STORE_T *vb = v + row_base(g, bh, DV) + c_base;
    const long ks = row_stride(g, DK), vs = row_stride(g, DV);
    /* The key sums, by the groups of the first column tile: row d by work-item d % TL_WG, in zl (a
     * small group has fewer work-items than rows). Each row has one owner: no barrier of its own. */
    const int zsum = c_base == 0;
    for (int d = lid; d < TL_TD; d += TL_WG)
        zl[d] = 0.0f;
    float4 acc[4];
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);

    for (int p0 = p_begin; p0 < p_end; p0 += TL_TK) {
        /* Tokens past the segment and rows or columns past the head's are zeros: they add nothing. */
        for (int i = lid; i < TL_TK * TL_TD; i += TL_WG) {
            const int t = i / TL_TD, d = i - t * TL_TD, p = p0 + t;
            float x = 0.0f;
            if (p < p_end && d_base + d < DK)
                x = feature(LOADN(1, d, kb + token_of(g, blk, p) * ks), feature_eps);
            kl[i] = x;
        }
        for (int i = lid; i < TL_TK * TL_TV; i += TL_WG) {
            const int t = i / TL_TV, c = i - t * TL_TV, p = p0 + t;
            vl[i] = p < p_end && c_base + c < DV ? LOADN(1, c, vb + token_of(g, blk, p) * vs) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (zsum)
            for (int d = lid; d < TL_TD; d += TL_WG) {
                float z = zl[d];
                for (int t = 0; t < TL_TK; ++t)
                    z += kl[t * TL_TD + d];
                zl[d] = z;
            }
        #pragma unroll 8
        for (int t = 0; t < TL_TK; ++t) {
            const float4 a = vload4(rt, kl + t * TL_TD);
            const float4 b = vload4(ct, vl + t * TL_TV);
            acc[0] += a.x * b;
            acc[1] += a.y * b;
            acc[2] += a.z * b;
            acc[3] += a.w * b;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the next tile overwrites kl and vl */
    }
    if (zsum)
        for (int d = lid; d < TL_TD && d_base + d < DK; d += TL_WG)
            dst[summary_z_offset(g.bh, bs, bh) + d_base + d] = zl[d];
    const int c = c_base + 4 * ct;
    for (int r = 0; r < 4; ++r) {
        const int d = d_base + 4 * rt + r;
        if (d >= DK || c >= DV)
            continue;
        global float *row = dst + summary_s_offset(g.bh, bs, bh, d) + c;
        if (c + 4 <= DV) {
            vstore4(acc[r], 0, row);
        } else {
            const float x[4] = {acc[r].x, acc[r].y, acc[r].z, acc[r].w};
            for (int j = 0; j < DV - c; ++j)
                row[j] = x[j];
        }
    }
}
