/* Causal stage 2 on GPUs (the GPU rows' cp_ti): the prefix mixtures P_i = sum_{j<i} Mc[i,j] S_j of
 * every chunk as one tiled matrix product, in place of causal_prefix.cl's register tiles over
 * global memory plus CLBlast's GEMMs for the earlier blocks of chunks. A group owns CP_TI
 * consecutive chunks of one sequence (a tile of the host's table) and CP_TW columns of their slots;
 * for each CP_TJ earlier chunks it copies their weights (transposed: one float4 read serves 4 rows)
 * and their summaries' columns into local memory, and each work-item adds a 4-row x 4-column
 * register tile. Only the strictly lower triangle of Mc and only earlier chunks' summaries are
 * used: a later chunk's summary (NaN included) is skipped, never multiplied by a zero weight. The
 * sums run over j in order, so results do not depend on the launch. The causal backward of a GPU
 * row takes its prefix mixtures from here too, and its suffix mixtures from the transposed twin
 * below (causal_suffix_tiled). */
#include "common.h"
#include "tiled.h"

#ifndef CP_TI
#define CP_TI 32 /* rows (chunks) per group, a multiple of 4 */
#endif
#ifndef CP_TW
#define CP_TW 64 /* slot columns per group, a multiple of 4 */
#endif
#ifndef CP_TJ
#define CP_TJ 16 /* earlier chunks per local tile */
#endif
#define CP_RQ (CP_TI / 4)
#define CP_CQ (CP_TW / 4)
#define CP_WG (CP_RQ * CP_CQ)
#define CP_LQ (CP_RQ + 1) /* float4 per transposed weight row, padded (the copy's stores spread) */

/* st[k][column quad] = columns c0.. of row first + k of `rows` (rows of `width` floats), zeros from
 * row `end` on and past the row's end: the group's tile of CP_TJ summaries. */
void cp_stage_rows(local float4 *st, global const float *rows, const int first, const int end, const long c0,
                   const long width, const int aligned, const int lid)
{
    for (int x = lid; x < CP_TJ * CP_CQ; x += CP_WG) {
        const int k = x / CP_CQ, row = first + k;
        const long col = c0 + 4 * (x - k * CP_CQ);
        st[x] = row < end && col < width
                    ? tiled_quad_f32(rows + (long)row * width + col, 0, (int)min((long)4, width - col), aligned)
                    : (float4)(0.0f);
    }
}

/* The work-item's 4 rows x 4 columns into rows row0.. of `dst` (only the first `rows` of the group's). */
void cp_store(const float4 acc[4], global float *dst, const int row0, const int rows, const int rq, const int cq,
              const long c0, const long width, const int aligned)
{
    const long col = c0 + 4 * cq;
    if (col >= width)
        return;
    for (int r = 0; r < 4; ++r)
        if (4 * rq + r < rows)
            tiled_store_f32(acc[r], dst + (long)(row0 + 4 * rq + r) * width + col, (int)min((long)4, width - col),
                            aligned);
}

/* A tile (int4, host/causal/chunk_tables.c): x = first row of P written, y = rows (<= CP_TI), z =
 * chunk index i of the first row, w = summary slot of the sequence's chunk 0. Row x + r is P_{z + r}.
 * global: (CP_WG * ceil(width / CP_TW), tiles), local (CP_WG, 1). Work-item (column quad cq fastest,
 * row quad rq): rows 4 rq.., columns 4 cq.. of the group's. */
__attribute__((reqd_work_group_size(CP_WG, 1, 1)))
kernel void causal_prefix_tiled(global const float *restrict sums, global const float *restrict mixing,
                                global const int4 *restrict tiles, global float *restrict pref, const int rows_mc,
                                const long width)
{
    local float4 mt[CP_TJ * CP_LQ]; /* weights Mc[i][j], transposed: mt[j][row quad] */
    local float4 st[CP_TJ * CP_CQ]; /* the chunks' summary columns: st[j][column quad] */
    const int lid = (int)get_local_id(0), cq = lid % CP_CQ, rq = lid / CP_CQ;
    const int4 tile = tiles[get_group_id(1)];
    const long c0 = (long)get_group_id(0) * CP_TW;
    const int jend = tile.z + tile.y - 1; /* the last row reads chunks j < jend */
    const int i0 = tile.z + 4 * rq;       /* the work-item's first row */
    const int aligned = (width & 3) == 0; /* rows of whole float4 (the library's own buffers) */
    float4 acc[4];
    #pragma unroll
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);

    for (int j0 = 0; j0 < jend; j0 += CP_TJ) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done */
        for (int x = lid; x < CP_TI * CP_TJ; x += CP_WG) {
            const int r = x / CP_TJ, jj = x - r * CP_TJ, i = tile.z + r, j = j0 + jj;
            ((local float *)mt)[jj * 4 * CP_LQ + r] = r < tile.y && j < i ? mixing[(long)i * rows_mc + j] : 0.0f;
        }
        cp_stage_rows(st, sums + (long)tile.w * width, j0, jend, c0, width, aligned, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (j0 + CP_TJ <= i0) { /* every chunk of the tile is before each of the work-item's rows */
            #pragma unroll 8
            for (int jj = 0; jj < CP_TJ; ++jj)
                tiled_mad4x4(acc, mt[jj * CP_LQ + rq], st[jj * CP_CQ + cq]);
        } else {
            for (int jj = 0; jj < CP_TJ && j0 + jj < i0 + 3; ++jj) {
                const int j = j0 + jj;
                const float4 a = mt[jj * CP_LQ + rq], b = st[jj * CP_CQ + cq];
                if (j < i0)
                    acc[0] += a.x * b;
                if (j < i0 + 1)
                    acc[1] += a.y * b;
                if (j < i0 + 2)
                    acc[2] += a.z * b;
                acc[3] += a.w * b; /* j < i0 + 3: the loop's bound */
            }
        }
    }

    cp_store(acc, pref, tile.x, tile.y, rq, cq, c0, width, aligned);
}

/* The backward's suffix mixtures dS_j = sum_{i>j} Mc[i,j] G_i (host/backward/backward_causal.c), the
 * transposed triangle in the same groups: a tile of the backward's table is x = chunks of the
 * tile's sequence, y = rows (<= CP_TI), z = chunk index j0 of the first row, w = the slot of the
 * sequence's chunk 0; row r (chunk j0 + r) reads the chunks i in (j0 + r, x). Weights Mc[i][j] and
 * the later chunks' summaries go through local memory CP_TJ chunks at a time, as above; a chunk not
 * after a row (its i <= j) is skipped, never multiplied by a zero weight. */
__attribute__((reqd_work_group_size(CP_WG, 1, 1)))
kernel void causal_suffix_tiled(global const float *restrict src, global const float *restrict mixing,
                                global const int4 *restrict tiles, global float *restrict dst, const int rows_mc,
                                const long width)
{
    local float4 mt[CP_TJ * CP_LQ]; /* weights Mc[i][j], transposed: mt[i][row quad] */
    local float4 st[CP_TJ * CP_CQ]; /* the later chunks' columns: st[i][column quad] */
    const int lid = (int)get_local_id(0), cq = lid % CP_CQ, rq = lid / CP_CQ;
    const int4 tile = tiles[get_group_id(1)];
    const int m = tile.x, j0 = tile.z;
    const long c0 = (long)get_group_id(0) * CP_TW;
    const int jr = j0 + 4 * rq; /* the work-item's first row */
    const int aligned = (width & 3) == 0;
    float4 acc[4];
    #pragma unroll
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);

    for (int i0 = j0 + 1; i0 < m; i0 += CP_TJ) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done */
        for (int x = lid; x < CP_TI * CP_TJ; x += CP_WG) {
            const int r = x / CP_TJ, ii = x - r * CP_TJ, j = j0 + r, i = i0 + ii;
            ((local float *)mt)[ii * 4 * CP_LQ + r] = r < tile.y && i > j && i < m ? mixing[(long)i * rows_mc + j] : 0.0f;
        }
        cp_stage_rows(st, src + (long)tile.w * width, i0, m, c0, width, aligned, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (i0 > jr + 3) { /* every chunk of the tile is after each of the work-item's rows */
            #pragma unroll 8
            for (int ii = 0; ii < CP_TJ; ++ii)
                tiled_mad4x4(acc, mt[ii * CP_LQ + rq], st[ii * CP_CQ + cq]);
        } else {
            for (int ii = 0; ii < CP_TJ; ++ii) {
                const int i = i0 + ii;
                const float4 a = mt[ii * CP_LQ + rq], b = st[ii * CP_CQ + cq];
                if (i > jr)
                    acc[0] += a.x * b;
                if (i > jr + 1)
                    acc[1] += a.y * b;
                if (i > jr + 2)
                    acc[2] += a.z * b;
                if (i > jr + 3)
                    acc[3] += a.w * b;
            }
        }
    }

    cp_store(acc, dst, tile.w + j0, tile.y, rq, cq, c0, width, aligned);
}
