/* Causal stage 1: the summary S_j = sum k~ v^T of every chunk of every sequence (and the key sum
 * z_j for the paper normalizer), one launch over all chunks, into the chunks' slots. */
#include "causal.h"
#define TILES_SUMMARY /* tiles.h: this file uses summary_tile_run */
#include "tiles.h"

/* global: (SUM_ND*SUM_NE rounded up, B*H, chunks): heads before chunks, as block_summary.cl.
 * Work-item (row tile, column tile) of a chunk accumulates a SUM_RD x SUM_COLS register tile over
 * the chunk's tokens (consecutive in the tensors); the column-tile-0 work-items also sum the keys.
 * Row tiles vary fastest, as in block_summary.cl (why: there). */
kernel void causal_summary(global const STORE_T *restrict k, global const STORE_T *restrict v,
                           global const int4 *restrict chunks, global float *restrict sums,
                           const mhla_grid g_arg, const float feature_eps)
{
#if SUM_LK
    local float kl[SUM_CHUNK * DK], zl[DK];
#endif
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    /* Padding work-items compute on a valid tile and store nothing: every work-item of the group
     * must reach the same barriers. */
    const int tile_id = (int)get_global_id(0);
    const int active = tile_id < SUM_ND * SUM_NE;
    const int tile = active ? tile_id : 0;
    const int4 ch = chunks[get_global_id(2)];
    const int bh = (int)get_global_id(1);
    const int rt = tile % SUM_ND;
    const int d0 = summary_tile_d0(rt);
    const int et = tile / SUM_ND;

    VEC(SUM_VE) acc[SUM_RD][SUM_NV], part[SUM_RD][SUM_NV];
    SUM_TILE_ZERO(acc);
    const long kstride = row_stride(g, DK), vstride = row_stride(g, DV);
    global const STORE_T *vp = v + row_base(g, bh, DV) + ch.x * vstride + et * SUM_COLS;
#if SUM_LK
    /* As block_summary.cl: the group maps each chunk's k rows once, into kl, then every work-item's
     * tile reads its k~ values there; each slice's key sum (zl) is its work-item's alone. */
    const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
    global const STORE_T *krow = k + row_base(g, bh, DK) + ch.x * kstride;
    for (int sl = lid; sl < SUM_KS; sl += lsize)
        VSTOREN(SUM_KW, (VEC(SUM_KW))(0.0f), 0, zl + sl * SUM_KW);
    for (int p0 = 0; p0 < ch.y; p0 += SUM_CHUNK) {
        const int p1 = min(p0 + SUM_CHUNK, ch.y);
        for (int sl = lid; sl < SUM_KS; sl += lsize) {
            VEC(SUM_KW) zpart = (VEC(SUM_KW))(0.0f);
            summary_kmap(krow + p0 * kstride + sl * SUM_KW, kstride, p1 - p0, feature_eps, kl + sl * SUM_KW, &zpart,
                         0, (global const float *)0, (global const float *)0);
            VSTOREN(SUM_KW, VLOADN(SUM_KW, 0, zl + sl * SUM_KW) + zpart, 0, zl + sl * SUM_KW);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        SUM_TILE_ZERO(part);
        summary_tile_run_lk(kl + d0, vp + p0 * vstride, vstride, p1 - p0, part);
        SUM_TILE_ADD(acc, part);
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE); /* kl is rewritten next chunk */
    }
#if ZCOL
    for (int sl = lid; sl < SUM_KS; sl += lsize)
        VSTOREN(SUM_KW, VLOADN(SUM_KW, 0, zl + sl * SUM_KW), 0, sums + slot_z(ch.w + ch.z, bh, g.bh) + sl * SUM_KW);
#endif
#else
    VEC(SUM_RD) z = (VEC(SUM_RD))(0.0f);
    global const STORE_T *kp = k + row_base(g, bh, DK) + ch.x * kstride + d0;
    for (int p0 = 0; p0 < ch.y; p0 += SUM_CHUNK) {
        const int p1 = min(p0 + SUM_CHUNK, ch.y);
        VEC(SUM_RD) zpart = (VEC(SUM_RD))(0.0f);
        SUM_TILE_ZERO(part);
        summary_tile_run(kp + p0 * kstride, vp + p0 * vstride, kstride, vstride, p1 - p0, feature_eps, part,
                         &zpart, 0, (global const float *)0, (global const float *)0);
        SUM_TILE_ADD(acc, part);
        z += zpart;
        /* The group's work-items share these tokens' k and v rows: meeting here keeps them on the
         * same tokens, read from memory once and from cache by the others (CPU runtimes run a
         * group's work-items one after another between barriers). */
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
#endif
    if (!active)
        return;
    const int slot = ch.w + ch.z;
    global float *s = sums + slot_s(slot, bh, g.bh) + et * SUM_COLS;
    #pragma unroll
    for (int r = 0; r < SUM_RD; ++r)
        if (SUMMARY_ROW_OWN(rt, d0, r))
            #pragma unroll
            for (int j = 0; j < SUM_NV; ++j)
                VSTOREN(SUM_VE, acc[r][j], 0, s + (long)(d0 + r) * DV + j * SUM_VE);
#if ZCOL && !SUM_LK
    if (et == 0)
        VSTOREN(SUM_RD, z, 0, sums + slot_z(slot, bh, g.bh) + d0);
#elif !SUM_LK
    (void)z;
#endif
}
