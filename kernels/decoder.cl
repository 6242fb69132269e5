/* The streaming decoder's step: one token for every batch element and head, in the recurrent
 * form o_t = q~_t (P_i + Mc[i,i] S_cur) with S_cur updated by k~_t v_t^T first. O(DK*DV) per
 * (batch, head) whatever the context; P_i is built when the chunk starts (causal_prefix.cl). */
#include "causal.h"

/* global: (local size, B*H): one work-group per (batch, head); work-item lid owns summary
 * columns lid, lid + local size, ... of DV + ZCOL (column DV is z for the paper normalizer).
 * token: the token's index in q/k/v/out, tensors of g.n tokens. chunk: i, the summary slot of
 * the running chunk. fresh: 1 on the chunk's first token (the slot is overwritten, not read). */
kernel void decoder_step(global const STORE_T *restrict q, global const STORE_T *restrict k,
                         global const STORE_T *restrict v, global const float *restrict mixing,
                         global float *restrict sums, global const float *restrict pref,
                         global STORE_T *restrict out, const mhla_grid g_arg, const int token, const int chunk,
                         const int rows_mc, const int fresh, const float feature_eps, const float scale,
                         const float eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float ql[DK], kl[DK];
#if ZCOL
    local float num[DV]; /* numerators, divided once the denominator is known: one rounding of out */
    local float den;
#else
    (void)eps;
#endif
    const int lid = (int)get_local_id(0);
    const int lsz = (int)get_local_size(0);
    const int bh = (int)get_group_id(1);
    const long qrow = row_offset(g, bh, token, DK);
    for (int d = lid; d < DK; d += lsz) {
        ql[d] = scale * feature(LOADN(1, qrow + d, q), feature_eps);
        kl[d] = feature(LOADN(1, qrow + d, k), feature_eps);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const float mii = mixing[(long)chunk * rows_mc + chunk];
    const long orow = row_offset(g, bh, token, DV);
    for (int e = lid; e < DV + ZCOL; e += lsz) {
        /* column e of S (stride DV), or z (stride 1) */
        const long first = e < DV ? slot_s(chunk, bh, g.bh) + e : slot_z(chunk, bh, g.bh);
        const long pfirst = e < DV ? slot_s(0, bh, g.bh) + e : slot_z(0, bh, g.bh);
        const int stride = e < DV ? DV : 1;
        const float ve = e < DV ? LOADN(1, orow + e, v) : 1.0f;
        float acc = 0.0f;
        for (int d = 0; d < DK; ++d) {
            global float *sd = sums + first + (long)d * stride;
            const float s = (fresh ? 0.0f : *sd) + kl[d] * ve;
            *sd = s;
            acc += ql[d] * (pref[pfirst + (long)d * stride] + mii * s);
        }
#if ZCOL
        if (e < DV)
            num[e] = acc;
        else
            den = acc + eps;
#else
        STOREN(1, acc, orow + e, out);
#endif
    }
#if ZCOL
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < DV; e += lsz)
        STOREN(1, num[e] / den, orow + e, out);
#endif
}
