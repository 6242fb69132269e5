/* Causal stage 1 on GPUs (the GPU rows' cs_tk): every chunk's summary S_j = sum k~ v^T (and key sum
 * z_j for the paper normalizer) as a work-group tiled reduction, summary_tiled.cl's form over the
 * chunk table: the group copies CS_TK tokens of k~ (the feature map applied once, on the copy) and
 * of v into local memory, neighbouring work-items reading neighbouring 16-byte pieces of a row, and
 * every work-item adds a 4 x 4 register tile over them. causal_summary.cl, the CPU form, has each
 * work-item walk its own columns of every token through cache. */
#include "causal.h"
#include "tiled.h"

#ifndef CS_TK
#define CS_TK 16 /* tokens per local tile */
#endif
#ifndef CS_TN
#define CS_TN 64 /* key rows and value columns per group (a multiple of 4) */
#endif
#define CS_Q (CS_TN / 4)
#define CS_WG (CS_Q * CS_Q)
#define CS_NV ((DV + CS_TN - 1) / CS_TN) /* column tiles */

/* global: (CS_WG * ceil(DK / CS_TN) * CS_NV, B*H_kv, chunks), local (CS_WG, 1, 1); g is the key/value
 * heads' grid (host/causal/causal.c). Group (tile, head, chunk entry c) writes rows d_base.. and
 * columns c_base.. of chunk c's slot; work-item (column quad ct fastest, row quad rt): rows
 * 4 rt.., columns 4 ct.. of those. */
__attribute__((reqd_work_group_size(CS_WG, 1, 1)))
kernel void causal_summary_tiled(global const STORE_T *restrict k, global const STORE_T *restrict v,
                                 global const int4 *restrict chunks, global float *restrict sums,
                                 const mhla_grid g_arg, const float feature_eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float4 kl[CS_TK * CS_Q], vl[CS_TK * CS_Q];
#if ZCOL
    local float zl[CS_TN]; /* key sums: row d by work-item d % CS_WG alone, no barrier of its own */
#endif
    const int lid = (int)get_local_id(0), ct = lid % CS_Q, rt = lid / CS_Q;
    const int tile = (int)get_group_id(0);
    const int d_base = (tile / CS_NV) * CS_TN, c_base = (tile % CS_NV) * CS_TN;
    const int bh = (int)get_group_id(1);
    const int4 ch = chunks[get_group_id(2)];
    const long ks = row_stride(g, DK), vs = row_stride(g, DV);
    global const STORE_T *kb = k + row_base(g, bh, DK) + ch.x * ks + d_base;
    global const STORE_T *vb = v + row_base(g, bh, DV) + ch.x * vs + c_base;
    /* whole float4 of k and v rows: rows of 4n values from an aligned buffer (kernels/tiled.h) */
    const int ka = (DK % 4 == 0) & TILED_BASE_OK(k), va = (DV % 4 == 0) & TILED_BASE_OK(v);
#if ZCOL
    const int zsum = c_base == 0;
    for (int d = lid; d < CS_TN; d += CS_WG)
        zl[d] = 0.0f;
#endif
    float4 acc[4];
    #pragma unroll
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);

    for (int p0 = 0; p0 < ch.y; p0 += CS_TK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done with kl and vl */
        for (int i = lid; i < CS_TK * CS_Q; i += CS_WG) { /* token i / CS_Q, columns 4 (i % CS_Q).. */
            const int t = i / CS_Q, c4 = 4 * (i - t * CS_Q), p = p0 + t;
            kl[i] = p < ch.y ? tiled_feature_quad(kb + p * ks, c4, DK - d_base, ka, feature_eps) : (float4)(0.0f);
            vl[i] = p < ch.y ? tiled_quad(vb + p * vs, c4, DV - c_base, va) : (float4)(0.0f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if ZCOL
        if (zsum)
            for (int d = lid; d < CS_TN; d += CS_WG) {
                float z = zl[d];
                for (int t = 0; t < CS_TK; ++t)
                    z += ((local const float *)kl)[t * CS_TN + d];
                zl[d] = z;
            }
#endif
        #pragma unroll 8
        for (int t = 0; t < CS_TK; ++t)
            tiled_mad4x4(acc, kl[t * CS_Q + rt], vl[t * CS_Q + ct]);
    }

    const int slot = ch.w + ch.z;
#if ZCOL
    if (zsum)
        for (int d = lid; d < CS_TN && d_base + d < DK; d += CS_WG)
            sums[slot_z(slot, bh, g.bh) + d_base + d] = zl[d];
#endif
    const int c = c_base + 4 * ct;
    #pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int d = d_base + 4 * rt + r;
        if (d < DK && c < DV)
            tiled_store_f32(acc[r], sums + slot_s(slot, bh, g.bh) + (long)d * DV + c, DV - c, TILED_SUMMARY_ALIGNED);
    }
}
