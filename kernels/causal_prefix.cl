/* Causal stage 2: the prefix mixtures P_i = sum_{j<i} Mc[i,j] S_j, for all chunks in one launch
 * (causal_prefix) or for the one chunk a decoder starts (causal_prefix_one). Only the strictly
 * lower triangle of Mc and only earlier chunks' summaries are read, so nothing from a later chunk
 * (not even a NaN through a zero weight) reaches an earlier one. With blocks of gemm_rows chunks,
 * causal_prefix sums only the chunks of a row's own block; the host adds the earlier blocks with
 * CLBlast SGEMMs (host/causal.c). */
#include "causal.h"

#ifndef PREFIX_ROWS
#define PREFIX_ROWS 8 /* rows of P per work-item: each S_j element read serves this many rows */
#endif
#ifndef PREFIX_COLS
#define PREFIX_COLS 1 /* columns per work-item, a local size apart: a group reads PREFIX_COLS x local
                         size consecutive floats of each S_j (whole pages on a CPU) */
#endif
/* The decoder's single row keeps as many accumulators, all in columns. */
#define ONE_COLS (PREFIX_ROWS * PREFIX_COLS)

/* A tile of consecutive chunks of one sequence (int4, laid out by host/causal.c):
 * x = first row of P written, y = rows (<= PREFIX_ROWS), z = chunk index i of the first row,
 * w = summary slot of the sequence's chunk 0. Row x + r is P_{z + r}. Tiles do not straddle the
 * blocks of gemm_rows chunks (0: one block, everything summed here).
 * global: (local size * ceil(width / (PREFIX_COLS * local size)), tiles); width = B*H*DK*CSC, the
 * floats of one summary slot. */
kernel void causal_prefix(global const float *restrict sums, global const float *restrict mixing,
                          global const int4 *restrict tiles, global float *restrict pref, const int rows_mc,
                          const long width, const int gemm_rows)
{
    const long lsz = (long)get_local_size(0);
    const long base = (long)get_group_id(0) * lsz * PREFIX_COLS + (long)get_local_id(0);
    const int4 tile = tiles[get_global_id(1)];
    float acc[PREFIX_ROWS][PREFIX_COLS];
    for (int r = 0; r < PREFIX_ROWS; ++r)
        for (int c = 0; c < PREFIX_COLS; ++c)
            acc[r][c] = 0.0f;
    const int jstart = gemm_rows > 0 ? tile.z / gemm_rows * gemm_rows : 0; /* the rows' block */
    const int jend = tile.z + tile.y - 1; /* the last row reads chunks j < jend */
    for (int j = jstart; j < jend; ++j) {
        global const float *sj = sums + (long)(tile.w + j) * width;
        for (int c = 0; c < PREFIX_COLS; ++c) {
            const long col = base + c * lsz;
            if (col < width) {
                const float s = sj[col];
                for (int r = 0; r < PREFIX_ROWS; ++r)
                    if (r < tile.y && j < tile.z + r)
                        acc[r][c] += mixing[(long)(tile.z + r) * rows_mc + j] * s;
            }
        }
    }
    for (int r = 0; r < PREFIX_ROWS; ++r)
        for (int c = 0; c < PREFIX_COLS; ++c) {
            const long col = base + c * lsz;
            if (r < tile.y && col < width)
                pref[(long)(tile.x + r) * width + col] = acc[r][c];
        }
}

/* global: (local size * ceil(width / (ONE_COLS * local size))). The decoder's P_i for the chunk i
 * it starts, into pref: a GEMV, one pass over S_0 .. S_{i-1}, ONE_COLS columns per work-item so
 * that a group streams long runs of each summary. (CLBlast's SGEMV was measured slower on PoCL for
 * i not a multiple of its tile, and it reads y even with beta = 0.) */
kernel void causal_prefix_one(global const float *restrict sums, global const float *restrict mixing,
                              global float *restrict pref, const int rows_mc, const long width, const int chunk)
{
    const long lsz = (long)get_local_size(0);
    const long base = (long)get_group_id(0) * lsz * ONE_COLS + (long)get_local_id(0);
    global const float *m = mixing + (long)chunk * rows_mc;
    float acc[ONE_COLS];
    for (int c = 0; c < ONE_COLS; ++c)
        acc[c] = 0.0f;
    for (int j = 0; j < chunk; ++j) {
        const float w = m[j];
        global const float *sj = sums + (long)j * width;
        for (int c = 0; c < ONE_COLS; ++c)
            if (base + c * lsz < width)
                acc[c] += w * sj[base + c * lsz];
    }
    for (int c = 0; c < ONE_COLS; ++c)
        if (base + c * lsz < width)
            pref[base + c * lsz] = acc[c];
}
