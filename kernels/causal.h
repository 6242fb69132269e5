/* Shared by the causal kernels: the layout of a chunk's summaries (one "slot"), the chunk table
 * entries the host lays out, and a horizontal sum. */
#ifndef MHLA_KERNELS_CAUSAL_H
#define MHLA_KERNELS_CAUSAL_H

#include "common.h"

/* Key sums z are kept only where a denominator needs them (the paper normalizer). */
#if NORMALIZER == 0
#define ZCOL 1
#else
#define ZCOL 0
#endif

/* A slot holds one chunk's summaries for every (batch*head): S as [B*H][DK][DV] (rows of DV
 * contiguous floats, for vector loads), then z as [B*H][DK]. Slots follow each other; offsets are
 * 64-bit: slots * B*H * DK * DV exceeds 2^31 for long contexts. With SLOT_PAD (the host's
 * tiling.slot_pad: where the prefix is all causal_prefix's; with CLBlast's GEMM blocks padding
 * slowed the prefix on a GPU, likely a copy into its temporary) a slot is padded to a whole odd
 * number of 64-byte lines (host/causal/causal.c, mhla__causal_slot_stride, the same arithmetic):
 * the prefix mixtures (causal_prefix.cl) read one column of every slot, and with H = 8, D = 64 a
 * slot was 2048 bytes past a multiple of 4096, so the column's lines of all the chunks fell into
 * two sets of a CPU's L1 (docs/tuning-notes.md "Causal forward"). The pad holds nothing: the
 * prefix mixes it along with the rest (P's pad from S's, never read), and a decoder state leaves
 * it out (host/causal/decoder_state.c). */
#ifndef SLOT_PAD
#define SLOT_PAD 0
#endif
long slot_len(const int bhs)
{
#if SLOT_PAD
    const long lines = ((long)bhs * DK * (DV + ZCOL) + 15) / 16;
    return (lines | 1) * 16;
#else
    return (long)bhs * DK * (DV + ZCOL);
#endif
}
long slot_s(const int slot, const int bh, const int bhs)
{
    return (long)slot * slot_len(bhs) + (long)bh * DK * DV;
}
long slot_z(const int slot, const int bh, const int bhs)
{
    return (long)slot * slot_len(bhs) + (long)bhs * DK * DV + (long)bh * DK;
}

/* The read-out's arguments (causal_output.cl, and causal_tiled.cl for GPU rows), as
 * host/causal/causal.c sets them. */
#define CAUSAL_OUTPUT_ARGS                                                                                             \
    global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v,              \
        global const float *restrict pref, global const float *restrict mixing, global const int4 *restrict chunks,    \
        global STORE_T *restrict out, const mhla_grid g_arg, const int rows_mc, const int tiles_per_chunk,             \
        const float feature_eps, const float scale, const float eps

/* A chunk, as host/causal/chunk_tables.c lays it out (int4): x = first token in the q/k/v/out tensors,
 * y = tokens in the chunk, z = chunk index i inside its sequence (the row of Mc),
 * w = summary slot of the sequence's chunk 0 (the chunk's own slot is w + z). */

#endif /* MHLA_KERNELS_CAUSAL_H */
