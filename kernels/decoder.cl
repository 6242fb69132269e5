/* The streaming decoder's step: one token for every batch element and head, in the recurrent
 * form o_t = q~_t (P_i + Mc[i,i] S_cur) with S_cur updated by k~_t v_t^T first. O(DK*DV) per
 * (batch, head) whatever the context; P_i is built when the chunk starts (causal_prefix.cl). */
#include "causal.h"

/* global: (local size, B*H_kv): one work-group per (batch, key/value head), which updates that
 * head's running summary once and reads out every query head that shares it (H / H_kv of them, one
 * after the other); work-item lid owns summary columns lid, lid + local size, ... of DV + ZCOL
 * (column DV is z for the paper normalizer), so it reads back only what it wrote itself.
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
    const int kvh = (int)get_group_id(1), kvc = kv_count(g), group = g.heads / g.kv_heads;
    const int batch = kvh / g.kv_heads, first = batch * g.heads + (kvh - batch * g.kv_heads) * group;
    const long krow = kv_row_base(g, first, DK) + (long)token * kv_row_stride(g, DK);
    const long vrow = kv_row_base(g, first, DV) + (long)token * kv_row_stride(g, DV);
    for (int d = lid; d < DK; d += lsz)
        kl[d] = feature(LOADN(1, krow + d, k), feature_eps);
    const float mii = mixing[(long)chunk * rows_mc + chunk];

    for (int j = 0; j < group; ++j) {
        const int bh = first + j;
        const long qrow = row_offset(g, bh, token, DK);
        for (int d = lid; d < DK; d += lsz)
            ql[d] = scale * feature(LOADN(1, qrow + d, q), feature_eps);
        barrier(CLK_LOCAL_MEM_FENCE);
        const long orow = row_offset(g, bh, token, DV);
        for (int e = lid; e < DV + ZCOL; e += lsz) {
            /* column e of S (stride DV), or z (stride 1); the first query head adds the token to it */
            const long at = e < DV ? slot_s(chunk, kvh, kvc) + e : slot_z(chunk, kvh, kvc);
            const long pfirst = e < DV ? slot_s(0, kvh, kvc) + e : slot_z(0, kvh, kvc);
            const int stride = e < DV ? DV : 1;
            const float ve = e < DV ? LOADN(1, vrow + e, v) : 1.0f;
            float acc = 0.0f;
            for (int d = 0; d < DK; ++d) {
                global float *sd = sums + at + (long)d * stride;
                float s = j == 0 && fresh ? 0.0f : *sd; /* (a fresh slot's stale value is not read) */
                if (j == 0) {
                    s += kl[d] * ve;
                    *sd = s;
                }
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
        barrier(CLK_LOCAL_MEM_FENCE); /* ql's readers (and num, den's writers) are done */
#if ZCOL
        for (int e = lid; e < DV; e += lsz)
            STOREN(1, num[e] / den, orow + e, out);
        barrier(CLK_LOCAL_MEM_FENCE); /* num's readers are done before the next head writes it */
#endif
    }
}
