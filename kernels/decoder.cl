/* The streaming decoder's step: one token for every batch element and head, in the recurrent
 * form o_t = q~_t (P_i + Mc[i,i] S_cur) with S_cur updated by k~_t v_t^T first. O(DK*DV) per
 * (batch, head) whatever the context. P_i, the chunk's prefix mixture sum_{j<i} Mc[i,j] S_j, comes
 * one of two ways (STEP_NEXT, the host's tiling.dec_next):
 * - STEP_NEXT 0: built when the chunk starts, in a launch before its first step (causal_prefix.cl's
 *   causal_prefix_one, or decoder_prefix below in parts), O(i*DK*DV) once a chunk.
 * - STEP_NEXT 1: summed during chunk i-1 by its steps, the finished chunks spread evenly over the C
 *   steps (about i/C each, step_next_share) and S_{i-1} added by the last step from the values it
 *   has just written; the chunk start only swaps two buffers (host/causal/decoder.c), so every step
 *   is one launch. Each step reads and writes that sum besides: on PoCL's CPU devices the steps
 *   took 2.5x as long, more than the chunk start they save. decoder_resume builds the sum at once
 *   where a decoder resumes (a restored state, after a prefill), in the same order (fma in chunk
 *   order), so the steps after it give the same bits.
 * Three forms of the step, chosen at build time:
 * - STEP_DP 1 (CPUs): a work-item walks all of Dk for its summary columns. One work-group per head,
 *   and for grouped key/value heads one per key/value head that reads out its KV_GROUP query heads
 *   (a loop with barriers in it made PoCL's step 18% slower for every head: the first form keeps
 *   none).
 * - STEP_DP > 1 (GPUs): the key dimensions split into STEP_DP parts, each work-item a column and a
 *   part, the parts' partial dot products added in local memory in a fixed order. One group per
 *   key/value head, a chain of Dk/STEP_DP multiply-adds per work-item instead of Dk: at B = 1, H = 8
 *   a step is 8 groups, whose latency is the step's time. The chunk start's prefix (STEP_NEXT 0)
 *   comes from decoder_prefix, split over the earlier chunks the same way.
 * Every form updates and reads back only the summary elements its work-item owns, and the next
 * prefix's elements are those same ones: no element has two writers. */
#include "causal.h"

#ifndef KV_GROUP
#define KV_GROUP 1 /* the query heads that share a key/value head (the host's -D: H / H_kv) */
#endif
#ifndef STEP_DP
#define STEP_DP 1 /* parts of Dk per step, and of the earlier chunks per chunk start (tiling.dec_dp) */
#endif
#ifndef STEP_NEXT
#define STEP_NEXT 0 /* 1: the steps sum the next chunk's prefix mixture (tiling.dec_next) */
#endif

/* Every form's arguments, as host/causal/decoder.c sets them. */
#define DECODER_STEP_ARGS                                                                                              \
    global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v,              \
        global const float *restrict mixing, global float *restrict sums, global const float *restrict pref,           \
        global STORE_T *restrict out, const mhla_grid g_arg, const int token, const int chunk, const int rows_mc,      \
        const int fresh, const float feature_eps, const float scale, const float eps, global float *restrict nxt,       \
        const int next_row, const int j_lo, const int j_hi, const int last

/* The grouped forms' key/value head (one work-group each, group id 1): its first query head and its
 * token's k and v rows, with k~ mapped into kl by the group's work-items. */
#define STEP_KV_HEAD(kl, lid, lsz)                                                                                     \
    const int kvh = (int)get_group_id(1), kvc = kv_count(g), group = KV_GROUP;                                       \
    const int batch = kvh / g.kv_heads, first = batch * g.heads + (kvh - batch * g.kv_heads) * group;              \
    const long krow = kv_row_base(g, first, DK) + (long)token * kv_row_stride(g, DK);                                \
    const long vrow = kv_row_base(g, first, DV) + (long)token * kv_row_stride(g, DV);                                \
    for (int d = (lid); d < DK; d += (lsz))                                                                          \
        (kl)[d] = feature(LOADN(1, krow + d, k), feature_eps)

/* q~ of the pass's nj query heads (from query head row `first` on) into ql, a row of DK each. */
void step_load_q(local float *ql, global const STORE_T *q, const mhla_grid g, const int first, const int nj,
                 const int token, const int lid, const int lsz, const float scale, const float feature_eps)
{
    for (int j = 0; j < nj; ++j) {
        const long qrow = row_offset(g, first + j, token, DK);
        for (int d = lid; d < DK; d += lsz)
            ql[j * DK + d] = scale * feature(LOADN(1, qrow + d, q), feature_eps);
    }
}

/* Column e of key/value head kvh's summaries: S's (stride DV), or z (stride 1) for e = DV; *at in
 * the running chunk's slot, *pfirst in the prefix mixture's. */
void step_column(const int e, const int chunk, const int kvh, const int kvc, long *at, long *pfirst, int *stride)
{
    *at = e < DV ? slot_s(chunk, kvh, kvc) + e : slot_z(chunk, kvh, kvc);
    *pfirst = e < DV ? slot_s(0, kvh, kvc) + e : slot_z(0, kvh, kvc);
    *stride = e < DV ? DV : 1;
}

/* P_i at element o of the slot: nothing in chunk 0 (whose buffer nobody wrote). */
float step_prefix(global const float *pref, const int chunk, const long o) { return chunk > 0 ? pref[o] : 0.0f; }

/* The step's share of P_{i+1} at element o (floats from a slot's start; slots len floats apart),
 * added to a (0 on the chunk's first token): Mc[i+1,j] S_j for the finished chunks j_lo <= j < j_hi,
 * then, on the chunk's last token, Mc[i+1,i] s, s the running summary's element as just written.
 * next_row is i+1, or -1 where no chunk follows (the host's capacity): nothing is summed then. */
void step_next_share(global float *nxt, global const float *sums, global const float *mixing, const int rows_mc,
                     const long len, const long o, const int fresh, const int next_row, const int j_lo,
                     const int j_hi, const int last, const int chunk, const float s)
{
    if (!STEP_NEXT || next_row < 0)
        return;
    global const float *m = mixing + (long)next_row * rows_mc;
    float a = fresh ? 0.0f : nxt[o];
    for (int j = j_lo; j < j_hi; ++j)
        a = fma(m[j], sums[(long)j * len + o], a);
    nxt[o] = last ? fma(m[chunk], s, a) : a;
}

#if STEP_DP == 1 && KV_GROUP == 1
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
    const long orow = row_offset(g, bh, token, DV), len = slot_len(g.bh);
    for (int e = lid; e < DV + ZCOL; e += lsz) {
        /* column e of S (stride DV), or z (stride 1) */
        const long first = e < DV ? slot_s(chunk, bh, g.bh) + e : slot_z(chunk, bh, g.bh);
        const long pfirst = e < DV ? slot_s(0, bh, g.bh) + e : slot_z(0, bh, g.bh);
        const int stride = e < DV ? DV : 1;
        const float ve = e < DV ? LOADN(1, orow + e, v) : 1.0f;
        float acc = 0.0f;
        for (int d = 0; d < DK; ++d) {
            global float *sd = sums + first + (long)d * stride;
            const long o = pfirst + (long)d * stride;
            const float s = (fresh ? 0.0f : *sd) + kl[d] * ve;
            *sd = s;
            step_next_share(nxt, sums, mixing, rows_mc, len, o, fresh, next_row, j_lo, j_hi, last, chunk, s);
            acc += ql[d] * (step_prefix(pref, chunk, o) + mii * s);
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

#elif STEP_DP == 1 /* grouped key/value heads */

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
    STEP_KV_HEAD(kl, lid, lsz);
    const float mii = mixing[(long)chunk * rows_mc + chunk];
    const long len = slot_len(kvc);

    for (int j0 = 0; j0 < group; j0 += STEP_QG) {
        const int nj = min(STEP_QG, group - j0);
        step_load_q(ql, q, g, first + j0, nj, token, lid, lsz, scale, feature_eps);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < DV + ZCOL; e += lsz) {
            /* column e of S or z; the first pass adds the token to it */
            long at, pfirst;
            int stride;
            step_column(e, chunk, kvh, kvc, &at, &pfirst, &stride);
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
        const long o = pfirst + (long)d * stride;                                                   \
        float s = j0 == 0 && fresh ? 0.0f : *sd; /* (a fresh slot's stale value is not read) */     \
        if (j0 == 0) {                                                                              \
            s += kl[d] * ve;                                                                        \
            *sd = s;                                                                                \
            step_next_share(nxt, sums, mixing, rows_mc, len, o, fresh, next_row, j_lo, j_hi, last,  \
                            chunk, s);                                                              \
        }                                                                                           \
        const float x = step_prefix(pref, chunk, o) + mii * s;                                      \
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

#else /* STEP_DP > 1 */

/* Column lanes a decoder_prefix group has at most: the host's local sizes for it are at most
 * DP_LANES * STEP_DP (host/causal/causal.c; the step's groups have a lane per summary column). */
#define DP_LANES 64
/* Query heads a pass reads out: those that share the key/value head, 4 at most. */
#define DP_QG (KV_GROUP < 4 ? KV_GROUP : 4)
#define DP_COLS (DV + ZCOL) /* summary columns: S's, then z (the paper normalizer) */

/* global: (local size, B*H_kv), the local size a multiple of STEP_DP: one work-group per (batch,
 * key/value head). Work-item lid is column lane lx = lid % lanes and part p = lid / lanes (lanes =
 * local size / STEP_DP): it owns summary columns lx, lx + lanes, ... of DP_COLS and key dimensions
 * p, p + STEP_DP, ... of them, so it updates its own elements of the running summary and reads back
 * only what it wrote. Neighbouring work-items take neighbouring columns of one row: whole lines.
 * Each pass reads out DP_QG query heads; the parts' sums go through local memory, added in the
 * order of p. token: the token's index in q/k/v/out, tensors of g.n tokens. chunk: i, the summary
 * slot of the running chunk. fresh: 1 on the chunk's first token (the slot is overwritten, not
 * read). */
kernel void decoder_step(DECODER_STEP_ARGS)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float ql[DP_QG * DK], kl[DK];
    local float part[STEP_DP * DP_QG * DP_COLS]; /* [part][query head][column] */
    const int lid = (int)get_local_id(0), lsz = (int)get_local_size(0);
    const int lanes = lsz / STEP_DP, p = lid / lanes, lx = lid - p * lanes;
    STEP_KV_HEAD(kl, lid, lsz);
    const float mii = mixing[(long)chunk * rows_mc + chunk];
    const long len = slot_len(kvc);
#if !ZCOL
    (void)eps;
#endif

    for (int j0 = 0; j0 < group; j0 += DP_QG) {
        const int nj = min(DP_QG, group - j0);
        step_load_q(ql, q, g, first + j0, nj, token, lid, lsz, scale, feature_eps);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lx; e < DP_COLS; e += lanes) {
            /* column e of S or z; the first pass adds the token to it */
            long at, pfirst;
            int stride;
            step_column(e, chunk, kvh, kvc, &at, &pfirst, &stride);
            const float ve = e < DV ? LOADN(1, vrow + e, v) : 1.0f;
            float acc[DP_QG];
            #pragma unroll
            for (int j = 0; j < DP_QG; ++j)
                acc[j] = 0.0f;
            for (int d = p; d < DK; d += STEP_DP) {
                global float *sd = sums + at + (long)d * stride;
                const long o = pfirst + (long)d * stride;
                float s = j0 == 0 && fresh ? 0.0f : *sd; /* (a fresh slot's stale value is not read) */
                if (j0 == 0) {
                    s += kl[d] * ve;
                    *sd = s;
                    step_next_share(nxt, sums, mixing, rows_mc, len, o, fresh, next_row, j_lo, j_hi, last, chunk,
                                    s);
                }
                const float x = step_prefix(pref, chunk, o) + mii * s;
                #pragma unroll
                for (int j = 0; j < DP_QG; ++j)
                    acc[j] += ql[j * DK + d] * x; /* (rows past nj: stale, never stored) */
            }
            for (int j = 0; j < nj; ++j)
                part[(p * DP_QG + j) * DP_COLS + e] = acc[j];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* The parts added in order of p, each sum by the work-item that owns it (part 0's row
         * receives it: nobody else reads that element). */
        for (int i = lid; i < nj * DP_COLS; i += lsz) {
            const int j = i / DP_COLS, e = i - j * DP_COLS;
            float sum = part[j * DP_COLS + e];
            for (int r = 1; r < STEP_DP; ++r)
                sum += part[(r * DP_QG + j) * DP_COLS + e];
#if ZCOL
            part[j * DP_COLS + e] = sum;
#else
            STOREN(1, sum, row_offset(g, first + j0 + j, token, DV) + e, out);
#endif
        }
#if ZCOL
        barrier(CLK_LOCAL_MEM_FENCE); /* numerators and denominators are summed */
        for (int i = lid; i < nj * DV; i += lsz) {
            const int j = i / DV, e = i - j * DV;
            STOREN(1, part[j * DP_COLS + e] / (part[j * DP_COLS + DV] + eps),
                   row_offset(g, first + j0 + j, token, DV) + e, out);
        }
#endif
        /* ql's and part's readers are done before the next pass writes them; the condition is the
         * same for the whole group */
        if (j0 + DP_QG < group)
            barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* P_i = sum_{j<i} Mc[i,j] S_j for the chunk a decoder starts, over slots of `width` floats.
 * global: (groups x local size), the local size a multiple of STEP_DP: a group owns `lanes` =
 * local size / STEP_DP consecutive floats of the slot, work-item (lx, p) sums the earlier chunks
 * j = p, p + STEP_DP, ... of float lx; `part` adds the parts in order of p.
 * Only Mc's row up to i - 1 and the finished summaries are read: nothing of the running chunk. */
kernel void decoder_prefix(global const float *restrict sums, global const float *restrict mixing,
                           global float *restrict pref, const int rows_mc, const long width, const int chunk)
{
    local float part[DP_LANES * STEP_DP];
    const int lid = (int)get_local_id(0), lanes = (int)get_local_size(0) / STEP_DP;
    const int p = lid / lanes, lx = lid - p * lanes;
    const long col = (long)get_group_id(0) * lanes + lx;
    global const float *m = mixing + (long)chunk * rows_mc;
    float acc = 0.0f;
    if (col < width)
        for (int j = p; j < chunk; j += STEP_DP)
            acc += m[j] * sums[(long)j * width + col];
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (p == 0 && col < width) {
        float sum = acc;
        for (int r = 1; r < STEP_DP; ++r)
            sum += part[r * lanes + lx];
        pref[col] = sum;
    }
}

#endif /* STEP_DP, KV_GROUP */

/* Where a decoder resumes (a restored state, or steps after a prefill): P = sum_{j<count} Mc[row,j]
 * S_j into pref, over slots of `width` floats, one float of the slot per work-item; global: width
 * rounded up to the local size. Summed as step_next_share sums (fma in chunk order), so the steps
 * after it give the bits the steps before would have. Only the finished summaries are read. */
kernel void decoder_resume(global const float *restrict sums, global const float *restrict mixing,
                           global float *restrict pref, const int rows_mc, const long width, const int row,
                           const int count)
{
    const long col = (long)get_global_id(0);
    if (col >= width)
        return;
    global const float *m = mixing + (long)row * rows_mc;
    float a = 0.0f;
    for (int j = 0; j < count; ++j)
        a = fma(m[j], sums[(long)j * width + col], a);
    pref[col] = a;
}
