/* Causal stage 2: the prefix mixtures P_i = sum_{j<i} Mc[i,j] S_j, for all chunks in one launch
 * (causal_prefix) or for the one chunk a decoder starts (causal_prefix_one). Only the strictly
 * lower triangle of Mc and only earlier chunks' summaries are read, so nothing from a later chunk
 * (not even a NaN through a zero weight) reaches an earlier one. */
#include "causal.h"

#ifndef PREFIX_ROWS
#define PREFIX_ROWS 8 /* rows of P per work-item: each S_j element read is used for this many rows */
#endif

/* A tile of consecutive chunks of one sequence (int4, laid out by host/causal.c):
 * x = first row of P written, y = rows (<= PREFIX_ROWS), z = chunk index i of the first row,
 * w = summary slot of the sequence's chunk 0. Row x + r is P_{z + r}. */
void prefix_tile(global const float *restrict sums, global const float *restrict mixing,
                 global float *restrict pref, const int4 tile, const int rows_mc, const long width,
                 const long col)
{
    float acc[PREFIX_ROWS];
    for (int r = 0; r < PREFIX_ROWS; ++r)
        acc[r] = 0.0f;
    const int jend = tile.z + tile.y - 1; /* the last row reads chunks j < jend */
    for (int j = 0; j < jend; ++j) {
        const float s = sums[(long)(tile.w + j) * width + col];
        for (int r = 0; r < PREFIX_ROWS; ++r)
            if (r < tile.y && j < tile.z + r)
                acc[r] += mixing[(long)(tile.z + r) * rows_mc + j] * s;
    }
    for (int r = 0; r < PREFIX_ROWS; ++r)
        if (r < tile.y)
            pref[(long)(tile.x + r) * width + col] = acc[r];
}

/* global: (width rounded up, tiles). width = B*H*DK*CSC, the floats of one summary slot. */
kernel void causal_prefix(global const float *restrict sums, global const float *restrict mixing,
                          global const int4 *restrict tiles, global float *restrict pref, const int rows_mc,
                          const long width)
{
    const long col = (long)get_global_id(0);
    if (col >= width)
        return;
    prefix_tile(sums, mixing, pref, tiles[get_global_id(1)], rows_mc, width, col);
}

/* global: (width rounded up). The decoder's P_i for the chunk i it starts, into pref row 0. */
kernel void causal_prefix_one(global const float *restrict sums, global const float *restrict mixing,
                              global float *restrict pref, const int rows_mc, const long width, const int chunk)
{
    const long col = (long)get_global_id(0);
    if (col >= width)
        return;
    prefix_tile(sums, mixing, pref, (int4)(0, 1, chunk, 0), rows_mc, width, col);
}
