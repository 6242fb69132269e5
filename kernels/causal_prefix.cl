/* Causal stage 2: the prefix mixtures P_i = sum_{j<i} Mc[i,j] S_j, for all chunks in one launch
 * (causal_prefix) or for the one chunk a decoder starts (causal_prefix_one). Only the strictly
 * lower triangle of Mc and only earlier chunks' summaries are read, so nothing from a later chunk
 * (not even a NaN through a zero weight) reaches an earlier one. With blocks of gemm_rows chunks,
 * causal_prefix sums only the chunks of a row's own block; the host adds the earlier blocks with
 * CLBlast SGEMMs (host/causal/causal.c). Slots are rows of `width` floats; the sums run over j in order,
 * so results do not depend on the launch. */
#include "causal.h"

#ifndef MIX_MR
#define MIX_MR 4 /* rows of P per work-item: each S_j vector read serves this many rows */
#endif
#ifndef MIX_NV
#define MIX_NV 2 /* vectors of PRE_VE columns per row per work-item */
#endif
#ifndef PRE_VE
#define PRE_VE 16 /* vector width along a slot (divides the slot's width, or the tail is scalar) */
#endif
#define PRE_COLS (PRE_VE * MIX_NV)
/* The decoder's single row keeps as many accumulators, all in columns, 16 vectors at most: more
 * spill (docs/tuning-notes.md "Causal forward"). */
#define ONE_NV (MIX_MR * MIX_NV > 16 ? 16 : MIX_MR * MIX_NV)
#define ONE_COLS (PRE_VE * ONE_NV)

/* A tile of consecutive chunks of one sequence (int4, laid out by host/causal/chunk_tables.c):
 * x = first row of P written, y = rows (<= MIX_MR), z = chunk index i of the first row,
 * w = summary slot of the sequence's chunk 0. Row x + r is P_{z + r}. Tiles do not straddle the
 * blocks of gemm_rows chunks (0: one block, everything summed here).
 * global: (tiles rounded up, ceil(width / PRE_COLS)). The tiles are the fast dimension: a group's
 * work-items (and consecutive groups) read the same columns of the summaries, which stay in cache
 * instead of being read again from memory for every tile. */
kernel void causal_prefix(global const float *restrict sums, global const float *restrict mixing,
                          global const int4 *restrict tiles, global float *restrict pref, const int rows_mc,
                          const long width, const int gemm_rows, const int n_tiles)
{
    const long col0 = (long)get_global_id(1) * PRE_COLS;
    if ((int)get_global_id(0) >= n_tiles || col0 >= width)
        return;
    const int4 tile = tiles[get_global_id(0)];
    const int jstart = gemm_rows > 0 ? tile.z / gemm_rows * gemm_rows : 0; /* the rows' block */
    const int jend = tile.z + tile.y - 1; /* the last row reads chunks j < jend */
    global const float *m = mixing + (long)tile.z * rows_mc;
    global const float *s = sums + (long)tile.w * width;
    global float *p = pref + (long)tile.x * width;
    if (col0 + PRE_COLS <= width) {
        VEC(PRE_VE) acc[MIX_MR][MIX_NV];
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            #pragma unroll
            for (int c = 0; c < MIX_NV; ++c)
                acc[r][c] = (VEC(PRE_VE))(0.0f);
        /* Chunks before the tile's first row: every row reads them (rows past the tile repeat its
         * last row and are not stored), so the loop has no tests. A whole tile reads its weights at
         * fixed distances from one pointer per j: written through the clamped row indices, the
         * compiler built the MIX_MR addresses in vector registers and took them out one at a time
         * (a fifth of the loop's instructions on AVX-512); the same for causal_suffix below. */
        int rows[MIX_MR];
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            rows[r] = min(r, tile.y - 1);
        const int full = tile.y == MIX_MR;
        for (int j = jstart; j < tile.z; ++j) {
            VEC(PRE_VE) sv[MIX_NV];
            #pragma unroll
            for (int c = 0; c < MIX_NV; ++c)
                sv[c] = VLOADN(PRE_VE, 0, s + (long)j * width + col0 + c * PRE_VE);
            global const float *mj = m + j; /* Mc[z + r][j] at mj[r * rows_mc] */
            #pragma unroll
            for (int r = 0; r < MIX_MR; ++r) {
                const float w = full ? mj[(long)r * rows_mc] : mj[(long)rows[r] * rows_mc];
                #pragma unroll
                for (int c = 0; c < MIX_NV; ++c)
                    acc[r][c] += w * sv[c];
            }
        }
        /* The triangle inside the tile: row r reads chunks j < tile.z + r only. */
        for (int j = tile.z; j < jend; ++j) {
            VEC(PRE_VE) sv[MIX_NV];
            #pragma unroll
            for (int c = 0; c < MIX_NV; ++c)
                sv[c] = VLOADN(PRE_VE, 0, s + (long)j * width + col0 + c * PRE_VE);
            #pragma unroll
            for (int r = 0; r < MIX_MR; ++r)
                if (r < tile.y && j < tile.z + r) {
                    const float w = m[(long)r * rows_mc + j];
                    #pragma unroll
                    for (int c = 0; c < MIX_NV; ++c)
                        acc[r][c] += w * sv[c];
                }
        }
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            if (r < tile.y)
                #pragma unroll
                for (int c = 0; c < MIX_NV; ++c)
                    VSTOREN(PRE_VE, acc[r][c], 0, p + (long)r * width + col0 + c * PRE_VE);
    } else { /* the last, partial column tile */
        for (long col = col0; col < width; ++col)
            for (int r = 0; r < tile.y; ++r) {
                float acc = 0.0f;
                for (int j = jstart; j < tile.z + r; ++j)
                    acc += m[(long)r * rows_mc + j] * s[(long)j * width + col];
                p[(long)r * width + col] = acc;
            }
    }
}

/* global: (ceil(width / ONE_COLS)). The decoder's P_i for the chunk i it starts, into pref: a
 * GEMV, one pass over S_0 .. S_{i-1} with long runs of each. (CLBlast's SGEMV was slower on PoCL
 * for i not a multiple of its tile, and it reads y even with beta = 0.) */
kernel void causal_prefix_one(global const float *restrict sums, global const float *restrict mixing,
                              global float *restrict pref, const int rows_mc, const long width,
                              const int chunk)
{
    const long col0 = (long)get_global_id(0) * ONE_COLS;
    if (col0 >= width)
        return;
    global const float *m = mixing + (long)chunk * rows_mc;
    if (col0 + ONE_COLS <= width) {
        VEC(PRE_VE) acc[ONE_NV];
        #pragma unroll
        for (int c = 0; c < ONE_NV; ++c)
            acc[c] = (VEC(PRE_VE))(0.0f);
        for (int j = 0; j < chunk; ++j) {
            const float w = m[j];
            global const float *sj = sums + (long)j * width + col0;
            #pragma unroll
            for (int c = 0; c < ONE_NV; ++c)
                acc[c] += w * VLOADN(PRE_VE, 0, sj + c * PRE_VE);
        }
        #pragma unroll
        for (int c = 0; c < ONE_NV; ++c)
            VSTOREN(PRE_VE, acc[c], 0, pref + col0 + c * PRE_VE);
    } else {
        for (long col = col0; col < width; ++col) {
            float acc = 0.0f;
            for (int j = 0; j < chunk; ++j)
                acc += m[j] * sums[(long)j * width + col];
            pref[col] = acc;
        }
    }
}

/* The backward's suffix mixtures dS_j = sum_{i>j} Mc[i,j] G_i (host/backward/backward_causal.c), the
 * transposed triangle of causal_prefix, on rows of `width` floats. Tiles as causal_prefix's, but
 * x = chunks of the tile's sequence: row j reads its sequence's chunks i in (j, x), the triangle
 * inside the tile first, then the chunks after the tile, which every row reads (rows past the tile
 * repeat its last row and are not stored). Sums run over i in order: results do not depend on the
 * launch. */
kernel void causal_suffix(global const float *restrict src, global const float *restrict mixing,
                          global const int4 *restrict tiles, global float *restrict dst, const int rows_mc,
                          const long width, const int n_tiles)
{
    const long col0 = (long)get_global_id(1) * PRE_COLS;
    if ((int)get_global_id(0) >= n_tiles || col0 >= width)
        return;
    const int4 tile = tiles[get_global_id(0)];
    const int m = tile.x, j0 = tile.z, rows_in = tile.y;
    global const float *s = src + (long)tile.w * width;
    global const float *mc = mixing + j0; /* Mc[i][j0 + r] at mc[i * rows_mc + r] */
    global float *p = dst + (long)(tile.w + j0) * width;
    if (col0 + PRE_COLS <= width) {
        VEC(PRE_VE) acc[MIX_MR][MIX_NV];
        int rows[MIX_MR];
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r) {
            rows[r] = min(r, rows_in - 1);
            #pragma unroll
            for (int c = 0; c < MIX_NV; ++c)
                acc[r][c] = (VEC(PRE_VE))(0.0f);
        }
        for (int i = j0 + 1; i < j0 + rows_in; ++i) { /* row r reads chunks i > j0 + r only */
            VEC(PRE_VE) sv[MIX_NV];
            #pragma unroll
            for (int c = 0; c < MIX_NV; ++c)
                sv[c] = VLOADN(PRE_VE, 0, s + (long)i * width + col0 + c * PRE_VE);
            #pragma unroll
            for (int r = 0; r < MIX_MR; ++r)
                if (r < rows_in && i > j0 + r) {
                    const float w = mc[(long)i * rows_mc + r];
                    #pragma unroll
                    for (int c = 0; c < MIX_NV; ++c)
                        acc[r][c] += w * sv[c];
                }
        }
        for (int i = j0 + rows_in; i < m; ++i) {
            VEC(PRE_VE) sv[MIX_NV];
            #pragma unroll
            for (int c = 0; c < MIX_NV; ++c)
                sv[c] = VLOADN(PRE_VE, 0, s + (long)i * width + col0 + c * PRE_VE);
            global const float *wi = mc + (long)i * rows_mc; /* Mc[i][j0 + r] at wi[r] */
            #pragma unroll
            for (int r = 0; r < MIX_MR; ++r) {
                const float w = rows_in == MIX_MR ? wi[r] : wi[rows[r]];
                #pragma unroll
                for (int c = 0; c < MIX_NV; ++c)
                    acc[r][c] += w * sv[c];
            }
        }
        #pragma unroll
        for (int r = 0; r < MIX_MR; ++r)
            if (r < rows_in)
                #pragma unroll
                for (int c = 0; c < MIX_NV; ++c)
                    VSTOREN(PRE_VE, acc[r][c], 0, p + (long)r * width + col0 + c * PRE_VE);
    } else { /* the last, partial column tile */
        for (long col = col0; col < width; ++col)
            for (int r = 0; r < rows_in; ++r) {
                float acc = 0.0f;
                for (int i = j0 + r + 1; i < m; ++i)
                    acc += mc[(long)i * rows_mc + r] * s[(long)i * width + col];
                p[(long)r * width + col] = acc;
            }
    }
}
