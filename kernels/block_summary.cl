/* Stage 1 of non-causal MHLA: per (batch*head, block) the summary S_b = sum k~ v^T and the key
 * sum z_b = sum k~, read in place from k/v (no rearranged copy). A long block may be split into
 * segments whose partial summaries summary_reduce adds in a fixed order (no atomics: the result
 * is bit-identical run to run). */
#include "common.h"
#define TILES_SUMMARY /* tiles.h: this file uses summary_tile_run */
#include "tiles.h"

/* global: (SUM_ND*SUM_NE rounded up, B*H, M*splits): heads vary before blocks, so that the groups
 * a core runs one after another read neighbouring parts of the same token rows ([B,N,H,D]).
 * Work-item (row tile, column tile) of segment
 * `split` of block `blk` accumulates a SUM_RD x SUM_COLS register tile over the segment's tokens;
 * the column-tile-0 work-items also sum the keys. Writes row blk*splits + split of `dst`.
 * Row tiles vary fastest: CPU runtimes run a group's work-items one after another, and then the
 * SUM_ND that follow each other read the same value columns of the chunk (SUM_COLS floats of each
 * v row, from L1) and walk the key rows a line at a time; with column tiles fastest, every work-item
 * read other value columns than the last, and a chunk's k and v lines (64 KB at 128 tokens) did not
 * stay in L1 (docs/tuning-notes.md "Block summary"). On GPUs
 * the two orders coalesce alike (a warp reads a whole k row or a whole v row). */
void block_summary_body(global const STORE_T *restrict k, global const STORE_T *restrict v,
                        global float *restrict dst, const mhla_grid g, const float feature_eps, const int splits,
                        const int split_len,
                        const int weighted, global const float *w, global const float *wz, const float zscale,
                        local float *kl, local float *zl)
{
    /* Padding work-items (tile past the last) compute on a valid tile and store nothing: every
     * work-item of the group must reach the same barriers. */
    const int tile_id = (int)get_global_id(0);
    const int active = tile_id < SUM_ND * SUM_NE;
    const int tile = active ? tile_id : 0;
    const int bs = (int)get_global_id(2);
    const int bh = (int)get_global_id(1);
    const int rt = tile % SUM_ND;
    const int d0 = summary_tile_d0(rt);
    const int et = tile / SUM_ND;
    const int blk = bs / splits;
    const int p_begin = (bs - blk * splits) * split_len;
    const int p_end = min(p_begin + split_len, g.nb);
    const long at = ((long)blk * g.bh + bh) * g.nb; /* the weights' row: [M][B*H][Nb] */

    VEC(SUM_VE) acc[SUM_RD][SUM_NV], part[SUM_RD][SUM_NV];
    SUM_TILE_ZERO(acc);
    global const STORE_T *vrow = v + row_base(g, bh, DV), *vbase = vrow + et * SUM_COLS;
    const long kstride = row_stride(g, DK), vstride = row_stride(g, DV);
#if SUM_LK
    /* Two phases a chunk: the group's k~ rows into kl (each slice of dimensions by one work-item,
     * which also sums it into zl), then every work-item's tile from them. Each slice's key sum is its
     * work-item's alone, so zl needs no barrier of its own. */
    const int lid = (int)get_local_id(0), lsize = (int)get_local_size(0);
    global const STORE_T *krow = k + row_base(g, bh, DK);
    for (int sl = lid; sl < SUM_KS; sl += lsize)
        VSTOREN(SUM_KW, (VEC(SUM_KW))(0.0f), 0, zl + sl * SUM_KW);
    for (int p0 = p_begin; p0 < p_end;) {
        const int p1 = min(p0 + SUM_CHUNK, p_end);
        for (int sl = lid; sl < SUM_KS; sl += lsize) {
            VEC(SUM_KW) zpart = (VEC(SUM_KW))(0.0f);
            for (int pp = p0; pp < p1;) {
                const int len = min(g.run - pp % g.run, p1 - pp);
                summary_kmap(krow + token_of(g, blk, pp) * kstride + sl * SUM_KW, kstride, len, feature_eps,
                             kl + (pp - p0) * DK + sl * SUM_KW, &zpart, weighted, weighted ? w + at + pp : w,
                             weighted ? wz + at + pp : wz);
                pp += len;
            }
            VSTOREN(SUM_KW, VLOADN(SUM_KW, 0, zl + sl * SUM_KW) + zpart, 0, zl + sl * SUM_KW);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if PREFETCH
        /* The next chunk's k and v rows, asked for while the group multiplies this one (before the
         * first phase, they queued ahead of that phase's own k loads); with PREFETCH 2 as prefetch
         * instructions, which retire without waiting for their lines. Every work-item asks for its
         * share, a token every lsize, just before its own multiply-adds: one work-item asking for
         * the whole chunk (512 lines at 64 tokens) stalled on the few lines a core can have in
         * flight (docs/tuning-notes.md "Block summary"). */
        for (int pp = p1 + lid, q1 = min(p1 + SUM_CHUNK, p_end); pp < q1; pp += lsize) {
            const long t0 = token_of(g, blk, pp);
            prefetch_rows(vrow + t0 * vstride, vstride, 1, DV);
            prefetch_rows(krow + t0 * kstride, kstride, 1, DK);
        }
#endif
        SUM_TILE_ZERO(part);
        for (int pp = p0; pp < p1;) {
            const int len = min(g.run - pp % g.run, p1 - pp);
            summary_tile_run_lk(kl + (pp - p0) * DK + d0, vbase + token_of(g, blk, pp) * vstride, vstride, len,
                                part);
            pp += len;
        }
        SUM_TILE_ADD(acc, part);
        p0 = p1;
        /* kl is rewritten next chunk; and as below, the group stays on one chunk at a time */
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    }
    for (int sl = lid; sl < SUM_KS; sl += lsize) { /* weighted: zscale once here, not per token */
        const VEC(SUM_KW) z = VLOADN(SUM_KW, 0, zl + sl * SUM_KW);
        VSTOREN(SUM_KW, weighted ? zscale * z : z, 0, dst + summary_z_offset(g.bh, bs, bh) + sl * SUM_KW);
    }
#else
    (void)kl, (void)zl;
    VEC(SUM_RD) z = (VEC(SUM_RD))(0.0f);
    global const STORE_T *kbase = k + row_base(g, bh, DK) + d0;
    for (int p0 = p_begin; p0 < p_end;) {
        /* One chunk of at most SUM_CHUNK positions, taken as pieces of contiguous token runs so
         * that the innermost loop is a plain counted loop over consecutive tokens. */
        const int p1 = min(p0 + SUM_CHUNK, p_end);
#if PREFETCH
        if (tile_id == 0) /* the next chunk's k and v rows, while the group works on this one */
            for (int pp = p1, q1 = min(p1 + SUM_CHUNK, p_end); pp < q1;) {
                const int len = min(g.run - pp % g.run, q1 - pp);
                const long t0 = token_of(g, blk, pp);
                touch_rows(kbase - d0 + t0 * kstride, kstride, len, DK);
                touch_rows(vrow + t0 * vstride, vstride, len, DV);
                pp += len;
            }
#endif
        VEC(SUM_RD) zpart = (VEC(SUM_RD))(0.0f);
        SUM_TILE_ZERO(part);
        while (p0 < p1) {
            const int len = min(g.run - p0 % g.run, p1 - p0);
            const int t0 = token_of(g, blk, p0);
            summary_tile_run(kbase + t0 * kstride, vbase + t0 * vstride, kstride, vstride, len, feature_eps, part,
                             &zpart, weighted, weighted ? w + at + p0 : w,
                             weighted ? wz + at + p0 : wz);
            p0 += len;
        }
        SUM_TILE_ADD(acc, part);
        z += zpart;
        /* The group's work-items share this chunk's k and v rows: meeting here keeps them on one
         * chunk at a time, so it is read from memory once and from cache by the others (CPU
         * runtimes run a group's work-items one after another between barriers). */
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
    if (active && et == 0) /* weighted: zscale once here, not per token */
        VSTOREN(SUM_RD, weighted ? zscale * z : z, 0, dst + summary_z_offset(g.bh, bs, bh) + d0);
#endif
    if (!active)
        return;
    #pragma unroll
    for (int r = 0; r < SUM_RD; ++r)
        if (SUMMARY_ROW_OWN(rt, d0, r))
            #pragma unroll
            for (int j = 0; j < SUM_NV; ++j)
                VSTOREN(SUM_VE, acc[r][j], 0,
                        dst + summary_s_offset(g.bh, bs, bh, d0 + r) + et * SUM_COLS + j * SUM_VE);
}

kernel void block_summary(global const STORE_T *restrict k, global const STORE_T *restrict v,
                          global float *restrict dst, const mhla_grid g_arg, const float feature_eps, const int splits,
                          const int split_len)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float kl[SUM_LK ? SUM_CHUNK * DK : 1], zl[SUM_LK ? DK : 1];
    block_summary_body(k, v, dst, g, feature_eps, splits, split_len, 0, (global const float *)0,
                       (global const float *)0, 0.0f, kl, zl);
}

/* The same with per-token weights (summary_tile_run's `weighted` form, [M][B*H][Nb] as the
 * backward's per-token r): the backward's gradient summaries G_i = sum q~ [w dO | zscale wz]^T with
 * k = q, v = dO, w = scale/den and wz = r (zscale = 0 where no normalizer reads G's z column). */
kernel void block_summary_weighted(global const STORE_T *restrict k, global const STORE_T *restrict v,
                                   global float *restrict dst, const mhla_grid g_arg, const float feature_eps,
                                   const int splits, const int split_len, global const float *restrict w,
                                   global const float *restrict wz, const float zscale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float kl[SUM_LK ? SUM_CHUNK * DK : 1], zl[SUM_LK ? DK : 1];
    block_summary_body(k, v, dst, g, feature_eps, splits, split_len, 1, w, wz, zscale, kl, zl);
}

/* global: (ceil(row_len/4), M). summary[blk] = sum over s of partial[blk*splits + s], in order. */
kernel void summary_reduce(global const float *restrict partial, global float *restrict summary, const mhla_grid g_arg,
                           const int splits)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const long row_len = summary_row_len(g.bh);
    const long i = (long)get_global_id(0) * 4;
    const int blk = (int)get_global_id(1);
    if (i >= row_len)
        return;
    global const float *src = partial + (long)blk * splits * row_len + i;
    if (i + 4 <= row_len) {
        float4 acc = vload4(0, src);
        for (int s = 1; s < splits; ++s)
            acc += vload4(0, src + (long)s * row_len);
        vstore4(acc, 0, summary + (long)blk * row_len + i);
    } else {
        for (long j = i; j < row_len; ++j) {
            float acc = src[j - i];
            for (int s = 1; s < splits; ++s)
                acc += src[j - i + (long)s * row_len];
            summary[(long)blk * row_len + j] = acc;
        }
    }
}
