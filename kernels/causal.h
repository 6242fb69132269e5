/* Shared by the causal kernels: the summary width (the paper normalizer keeps the key sum z as
 * an extra column), the chunk table entries the host lays out, and summary slot addressing. */
#ifndef MHLA_KERNELS_CAUSAL_H
#define MHLA_KERNELS_CAUSAL_H

#include "common.h"

/* Columns of a causal summary row: Dv values, plus z only where a denominator needs it. */
#if NORMALIZER == 0
#define CSC (DV + 1)
#else
#define CSC DV
#endif

/* A chunk, as host/causal.c lays it out (int4): x = first token in the q/k/v/out tensors,
 * y = tokens in the chunk, z = chunk index i inside its sequence (the row of Mc),
 * w = summary slot of the sequence's chunk 0 (the chunk's own slot is w + z). */

/* Offset of the summary (slot, bh): slots are [slot][B*H][DK][CSC]. 64-bit: slots * B*H * DK *
 * CSC exceeds 2^31 for long contexts. */
long summary_offset(const int slot, const int bh, const int bhs)
{
    return ((long)slot * bhs + bh) * (DK * CSC);
}

#endif /* MHLA_KERNELS_CAUSAL_H */
