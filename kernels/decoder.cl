/* The streaming decoder's step: one token for every batch element and head, in the recurrent
 * form o_t = q~_t (P_i + Mc[i,i] S_cur) with S_cur updated by k~_t v_t^T first. O(DK*DV) per
 * (batch, head) whatever the context; P_i is built when the chunk starts (causal_prefix.cl). Two
 * forms, chosen at build time: one work-group per head, and for grouped key/value heads one per
 * key/value head that reads out its KV_GROUP query heads (a loop with barriers in it made PoCL's
 * step 18% slower for every head: the first form keeps none). */
#include "causal.h"

#ifndef KV_GROUP
#define KV_GROUP 1 /* the query heads that share a key/value head (the host's -D: H / H_kv) */
#endif

/* Both forms' arguments, as host/causal/decoder.c sets them. */
#define DECODER_STEP_ARGS                                                                                              \
    global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v,              \
        global const float *restrict mixing, global float *restrict sums, global const float *restrict pref,           \
        global STORE_T *restrict out, const mhla_grid g_arg, const int token, const int chunk, const int rows_mc,      \
        const int fresh, const float feature_eps, const float scale, const float eps

#if KV_GROUP == 1
/* global: (local size, B*H): one work-group per (batch, head); work-item lid owns summary
 * columns lid, lid + local size, ... of DV + ZCOL (column DV is z for the paper normalizer).
 * token: the token's index in q/k/v/out, tensors of g.n tokens. chunk: i, the summary slot of
 * the running chunk. fresh: 1 on the chunk's first token (the slot is overwritten, not read). */
kernel void decoder_step(DECODER_STEP_ARGS)
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

#else /* grouped key/value heads */

/* Query heads a work-group reads out per pass over the running summary (grouped key/value heads:
 * H / H_kv share it); host/causal/causal.c sizes the local memory by it. */
#define STEP_QG 4

/* global: (local size, B*H_kv): one work-group per (batch, key/value head), which updates that
 * head's running summary and reads out the query heads that share it, STEP_QG of them per pass
 * over the summary; work-item lid owns summary columns lid, lid + local size, ... of DV + ZCOL
 * (column DV is z for the paper normalizer), so it reads back only what it wrote itself.
 * token: the token's index in q/k/v/out, tensors of g.n tokens. chunk: i, the summary slot of
 * the running chunk. fresh: 1 on the chunk's first token (the slot is overwritten, not read). */
kernel void decoder_step(DECODER_STEP_ARGS)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float ql[STEP_QG * DK], kl[DK];
#if ZCOL
    local float num[STEP_QG * DV]; /* numerators, divided once the denominator is known: one rounding of out */
    local float den[STEP_QG];
#else
    (void)eps;
#endif
    const int lid = (int)get_local_id(0);
    const int lsz = (int)get_local_size(0);
    const int kvh = (int)get_group_id(1), kvc = kv_count(g), group = KV_GROUP;
    const int batch = kvh / g.kv_heads, first = batch * g.heads + (kvh - batch * g.kv_heads) * group;
    const long krow = kv_row_base(g, first, DK) + (long)token * kv_row_stride(g, DK);
    const long vrow = kv_row_base(g, first, DV) + (long)token * kv_row_stride(g, DV);
    for (int d = lid; d < DK; d += lsz)
        kl[d] = feature(LOADN(1, krow + d, k), feature_eps);
    const float mii = mixing[(long)chunk * rows_mc + chunk];

    for (int j0 = 0; j0 < group; j0 += STEP_QG) {
        const int nj = min(STEP_QG, group - j0);
        for (int j = 0; j < nj; ++j) {
            const long qrow = row_offset(g, first + j0 + j, token, DK);
            for (int d = lid; d < DK; d += lsz)
                ql[j * DK + d] = scale * feature(LOADN(1, qrow + d, q), feature_eps);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < DV + ZCOL; e += lsz) {
            /* column e of S (stride DV), or z (stride 1); the first pass adds the token to it */
            const long at = e < DV ? slot_s(chunk, kvh, kvc) + e : slot_z(chunk, kvh, kvc);
            const long pfirst = e < DV ? slot_s(0, kvh, kvc) + e : slot_z(0, kvh, kvc);
            const int stride = e < DV ? DV : 1;
            const float ve = e < DV ? LOADN(1, vrow + e, v) : 1.0f;
            float acc[STEP_QG];
            #pragma unroll
            for (int j = 0; j < STEP_QG; ++j)
                acc[j] = 0.0f;
            /* S's column updated (first pass) and read out for the pass's query heads: one head
             * (no grouped heads, or the last of a group) without the others' multiply-adds */
#define STEP_COLUMN(NJ)                                                                             \
    for (int d = 0; d < DK; ++d) {                                                                  \
        global float *sd = sums + at + (long)d * stride;                                            \
        float s = j0 == 0 && fresh ? 0.0f : *sd; /* (a fresh slot's stale value is not read) */     \
        if (j0 == 0) {                                                                              \
            s += kl[d] * ve;                                                                        \
            *sd = s;                                                                                \
        }                                                                                           \
        const float x = pref[pfirst + (long)d * stride] + mii * s;                                  \
        _Pragma("unroll") for (int j = 0; j < (NJ); ++j)                                            \
            acc[j] += ql[j * DK + d] * x; /* (rows past nj: stale, never stored) */                 \
    }
            if (nj == 1) {
                STEP_COLUMN(1)
            } else {
                STEP_COLUMN(STEP_QG)
            }
#undef STEP_COLUMN
            for (int j = 0; j < nj; ++j) {
#if ZCOL
                if (e < DV)
                    num[j * DV + e] = acc[j];
                else
                    den[j] = acc[j] + eps;
#else
                STOREN(1, acc[j], row_offset(g, first + j0 + j, token, DV) + e, out);
#endif
            }
        }
#if ZCOL
        barrier(CLK_LOCAL_MEM_FENCE); /* num and den are written */
        for (int j = 0; j < nj; ++j) {
            const long orow = row_offset(g, first + j0 + j, token, DV);
            for (int e = lid; e < DV; e += lsz)
                STOREN(1, num[j * DV + e] / den[j], orow + e, out);
        }
#endif
        /* ql's (and num's) readers are done before the next pass writes them; the condition is the
         * same for the whole group, and one pass (H / H_kv <= STEP_QG) meets no barrier here */
        if (j0 + STEP_QG < group)
            barrier(CLK_LOCAL_MEM_FENCE);
    }
}

#endif /* KV_GROUP */
