/* Causal stage 3: the output of every token, o_t = q~_t P_i + Mc[i,i] * sum_{s in chunk i, s<=t}
 * (q~_t . k~_s) v_s, with the paper normalizer's denominator fused. A work-group takes
 * CAUSAL_TQ consecutive tokens of one chunk and walks the chunk's earlier keys CAUSAL_KT at a
 * time through local memory, so local memory does not grow with the chunk size. */
#include "causal.h"

#ifndef CAUSAL_TQ
#define CAUSAL_TQ 16 /* query tokens per work-group: each v and P element read serves this many */
#endif
#ifndef CAUSAL_KT
#define CAUSAL_KT 16 /* key tokens staged in local memory at a time */
#endif
#ifndef CAUSAL_LWS
#define CAUSAL_LWS 64 /* work-items per group; the host launches exactly this many */
#endif
#if CAUSAL_TQ > CAUSAL_LWS
#error "CAUSAL_TQ must not exceed CAUSAL_LWS: work-item r < CAUSAL_TQ owns row r's denominator"
#endif
#define EPW ((DV + CAUSAL_LWS - 1) / CAUSAL_LWS) /* output columns per work-item */

/* global: (CAUSAL_LWS, chunks * tiles_per_chunk, B*H); local: (CAUSAL_LWS, 1, 1). Work-item lid
 * owns columns lid, lid + CAUSAL_LWS, ... of the tile's CAUSAL_TQ output rows. */
kernel void causal_output(global const float *restrict q, global const float *restrict k,
                          global const float *restrict v, global const float *restrict pref,
                          global const float *restrict mixing, global const int4 *restrict chunks,
                          global float *restrict out, const mhla_grid g, const int rows_mc,
                          const int tiles_per_chunk, const float feature_eps, const float scale,
                          const float eps)
{
    local float qs[CAUSAL_TQ * DK];
    local float ks[CAUSAL_KT * DK];
    local float sc[CAUSAL_TQ * CAUSAL_KT];
#if NORMALIZER == 0
    local float den[CAUSAL_TQ];
#else
    (void)eps;
#endif
    const int lid = (int)get_local_id(0);
    const int c = (int)get_group_id(1) / tiles_per_chunk;
    const int p0 = ((int)get_group_id(1) - c * tiles_per_chunk) * CAUSAL_TQ;
    const int bh = (int)get_group_id(2);
    const int4 ch = chunks[c];
    if (p0 >= ch.y)
        return; /* the whole group: a tile past the end of a short chunk */
    const int nq = min(CAUSAL_TQ, ch.y - p0);

    for (int x = lid; x < CAUSAL_TQ * DK; x += CAUSAL_LWS) {
        const int r = x / DK;
        const int d = x - r * DK;
        qs[x] = r < nq ? scale * feature(q[row_offset(g, bh, ch.x + p0 + r, DK) + d], feature_eps) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float inter[CAUSAL_TQ * EPW], intra[CAUSAL_TQ * EPW];
    for (int x = 0; x < CAUSAL_TQ * EPW; ++x)
        inter[x] = intra[x] = 0.0f;
#if NORMALIZER == 0
    float den_inter = 0.0f, den_intra = 0.0f; /* of row lid, for lid < CAUSAL_TQ */
#endif

    /* q~ P_i: chunk 0 of a sequence has no prefix, and its P row is not read. */
    if (ch.z > 0) {
        global const float *P = pref + summary_offset(c, bh, g.bh);
        for (int d = 0; d < DK; ++d) {
            for (int u = 0; u < EPW; ++u) {
                const int e = lid + u * CAUSAL_LWS;
                if (e < DV) {
                    const float pv = P[d * CSC + e];
                    for (int r = 0; r < CAUSAL_TQ; ++r)
                        inter[r * EPW + u] += qs[r * DK + d] * pv;
                }
            }
#if NORMALIZER == 0
            if (lid < CAUSAL_TQ)
                den_inter += qs[lid * DK + d] * P[d * CSC + DV];
#endif
        }
    }

    /* The masked intra-chunk part over keys 0 .. p0 + nq - 1 of the chunk. Masked pairs are
     * skipped, never multiplied by zero, so a later token's NaN or Inf cannot reach row r. */
    const int kend = p0 + nq;
    for (int kb = 0; kb < kend; kb += CAUSAL_KT) {
        const int nk = min(CAUSAL_KT, kend - kb);
        for (int x = lid; x < CAUSAL_KT * DK; x += CAUSAL_LWS) {
            const int s = x / DK;
            const int d = x - s * DK;
            ks[x] = s < nk ? feature(k[row_offset(g, bh, ch.x + kb + s, DK) + d], feature_eps) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int x = lid; x < CAUSAL_TQ * CAUSAL_KT; x += CAUSAL_LWS) {
            const int r = x / CAUSAL_KT;
            const int s = x - r * CAUSAL_KT;
            float a = 0.0f;
            if (r < nq && s < nk && kb + s <= p0 + r)
                for (int d = 0; d < DK; ++d)
                    a += qs[r * DK + d] * ks[s * DK + d];
            sc[x] = a;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if NORMALIZER == 0
        if (lid < CAUSAL_TQ)
            for (int s = 0; s < nk; ++s)
                den_intra += sc[lid * CAUSAL_KT + s];
#endif
        for (int s = 0; s < nk; ++s) {
            const long vrow = row_offset(g, bh, ch.x + kb + s, DV);
            for (int u = 0; u < EPW; ++u) {
                const int e = lid + u * CAUSAL_LWS;
                if (e < DV) {
                    const float vv = v[vrow + e];
                    for (int r = 0; r < CAUSAL_TQ; ++r)
                        if (kb + s <= p0 + r)
                            intra[r * EPW + u] += sc[r * CAUSAL_KT + s] * vv;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* ks and sc are overwritten next */
    }

    const float mii = mixing[(long)ch.z * rows_mc + ch.z];
#if NORMALIZER == 0
    if (lid < CAUSAL_TQ)
        den[lid] = den_inter + mii * den_intra + eps;
    barrier(CLK_LOCAL_MEM_FENCE);
#endif
    for (int r = 0; r < nq; ++r) {
        const long orow = row_offset(g, bh, ch.x + p0 + r, DV);
        for (int u = 0; u < EPW; ++u) {
            const int e = lid + u * CAUSAL_LWS;
            if (e < DV) {
                float o = inter[r * EPW + u] + mii * intra[r * EPW + u];
#if NORMALIZER == 0
                o = o / den[r];
#endif
                out[orow + e] = o;
            }
        }
    }
}
