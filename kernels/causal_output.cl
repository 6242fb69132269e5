/* Causal stage 3: the output of every token, o_t = q~_t P_i + Mc[i,i] * sum_{s in chunk i, s<=t}
 * (q~_t . k~_s) v_s, with the paper normalizer's denominator fused. A work-group takes CAUSAL_TQ
 * consecutive tokens of one chunk; the chunk's earlier keys pass through local memory CAUSAL_KT
 * at a time (transposed, so that scores are vectors along the keys), so local memory does not grow
 * with the chunk size. Each work-item keeps an OUT_RT x OUT_COLS register tile of vectors
 * (explicit vectors: CPU runtimes compile them straight to SIMD registers). */
#include "causal.h"
#include "tiles.h"

#ifndef CAUSAL_TQ
#define CAUSAL_TQ 32 /* tokens per work-group; a multiple of OUT_RT */
#endif
#ifndef CAUSAL_KT
#define CAUSAL_KT 32 /* keys per pass through local memory */
#endif
#if CAUSAL_KT % OUT_VE != 0
#error "CAUSAL_KT must be a multiple of OUT_VE (scores are computed OUT_VE keys at a time)"
#endif
#define OUT_TG (CAUSAL_TQ / OUT_RT)       /* token groups */
#define OUT_WG (OUT_NE * OUT_TG)          /* work-items per group: the host launches exactly this */
/* The q~ and k~ rows are staged into local memory in vectors of the output's width where it
 * divides Dk (the read-out's OUT_DC can be narrower: 4 on CPU rows), else OUT_DC. */
#if DK % OUT_VE == 0 && OUT_VE > OUT_DC
#define ST_W OUT_VE
#else
#define ST_W OUT_DC
#endif
#define DKV (DK / ST_W)                   /* vectors per q or k row */
#define KTV (CAUSAL_KT / OUT_VE)          /* score vectors per row of a key pass */
#if CAUSAL_TQ % OUT_RT != 0
#error "CAUSAL_TQ must be a multiple of OUT_RT"
#endif
/* A work-item's step of scores: CAUSAL_SRT rows x CAUSAL_SKV vectors of keys, SRT * SKV
 * independent multiply-add chains along d (each key vector loaded serves SRT rows, each q~
 * broadcast SKV vectors). One row of one vector (the GPU rows: every work-item of the group busy)
 * is one chain, which on a CPU waits out the multiply-add's latency at every d; CPU rows take 8 rows,
 * enough chains for two FMA pipes (docs/tuning-notes.md "Causal forward"). */
#ifndef CAUSAL_SRT
#define CAUSAL_SRT 1
#endif
#ifndef CAUSAL_SKV
#define CAUSAL_SKV 1
#endif
#if CAUSAL_TQ % CAUSAL_SRT != 0 || KTV % CAUSAL_SKV != 0
#error "CAUSAL_SRT must divide CAUSAL_TQ, and CAUSAL_SKV the score vectors of a key pass"
#endif

/* kt[d][s] = k~ of keys s = 0 .. CAUSAL_KT - 1 at kp (rows kstride apart; 0 from nk on), by the
 * group's OUT_WG work-items. Four keys per work-item where CAUSAL_KT allows: each of its ST_W
 * dimensions goes out as one float4 of neighbouring keys; one key per work-item wrote every lane to
 * its own row of kt, which the compiler emitted as ST_W extracts and scalar stores
 * (docs/tuning-notes.md "Causal forward"). */
void stage_keys(global const STORE_T *kp, const long kstride, const int nk, const float feature_eps, const int lid,
                local float *kt)
{
#if CAUSAL_KT % 4 == 0
    for (int x = lid; x < (CAUSAL_KT / 4) * DKV; x += OUT_WG) {
        const int s0 = (x / DKV) * 4, d0 = (x - (x / DKV) * DKV) * ST_W;
        float kd[4][ST_W];
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
            VEC(ST_W) val = (VEC(ST_W))(0.0f);
            if (s0 + j < nk) {
                const VEC(ST_W) raw = LOADN(ST_W, 0, kp + (s0 + j) * kstride + d0);
                val = FEATURE_V(ST_W, raw, feature_eps);
            }
            VSTOREN(ST_W, val, 0, kd[j]);
        }
        #pragma unroll
        for (int i = 0; i < ST_W; ++i)
            vstore4((float4)(kd[0][i], kd[1][i], kd[2][i], kd[3][i]), 0, kt + (d0 + i) * CAUSAL_KT + s0);
    }
#else
    for (int x = lid; x < CAUSAL_KT * DKV; x += OUT_WG) {
        const int s = x / DKV, d0 = (x - s * DKV) * ST_W;
        float kd[ST_W];
        VEC(ST_W) val = (VEC(ST_W))(0.0f);
        if (s < nk) {
            const VEC(ST_W) raw = LOADN(ST_W, 0, kp + s * kstride + d0);
            val = FEATURE_V(ST_W, raw, feature_eps);
        }
        VSTOREN(ST_W, val, 0, kd);
        #pragma unroll
        for (int i = 0; i < ST_W; ++i)
            kt[(d0 + i) * CAUSAL_KT + s] = kd[i];
    }
#endif
}

/* global: (OUT_WG, B*H, chunks * tiles_per_chunk) (heads first, as output.cl); local: (OUT_WG, 1,
 * 1). Work-item (column tile et, token group tg) owns rows tg*OUT_RT .. +OUT_RT-1 of the group's
 * tokens, columns et*OUT_COLS .. +OUT_COLS-1. pref row c is chunk entry c's P (its S part, then z). */
kernel void causal_output(CAUSAL_OUTPUT_ARGS)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float qs[CAUSAL_TQ * DK]; /* q~ of the group's tokens */
    local float kt[DK * CAUSAL_KT]; /* k~ of the current keys, transposed: [d][s] */
    local float sc[CAUSAL_TQ * CAUSAL_KT]; /* q~_r . k~_s (masked pairs are never read) */
    const int lid = (int)get_local_id(0);
    const int et = lid % OUT_NE;
    const int r0 = (lid / OUT_NE) * OUT_RT;
    const int c = (int)get_group_id(2) / tiles_per_chunk;
    const int p0 = ((int)get_group_id(2) - c * tiles_per_chunk) * CAUSAL_TQ;
    const int bh = (int)get_group_id(1);
    const int4 ch = chunks[c];
    if (p0 >= ch.y)
        return; /* the whole group: a tile past the end of a short chunk */
    const int nq = min(CAUSAL_TQ, ch.y - p0);
    const float mii = mixing[(long)ch.z * rows_mc + ch.z];
    /* q and out of query head row bh; k, v and the prefix of its key/value head (kernels/common.h,
     * kv_of: the same head but for grouped key/value heads) */
    const long qstride = row_stride(g, DK), ostride = row_stride(g, DV);
    const long kstride = kv_row_stride(g, DK), vstride = kv_row_stride(g, DV);
    const int kvh = kv_of(g, bh), kvc = kv_count(g);
    global const STORE_T *qb = q + row_base(g, bh, DK) + (ch.x + p0) * qstride;
    global const STORE_T *kb0 = k + kv_row_base(g, bh, DK) + ch.x * kstride;
    global const STORE_T *vb = v + kv_row_base(g, bh, DV) + ch.x * vstride + et * OUT_COLS;
#if ZCOL
    float den_inter[OUT_RT], den_intra[OUT_RT];
#else
    (void)eps;
#endif

    /* One register tile (two would spill on CPUs): q~ P_i first, before any barrier, as the
     * non-causal output computes q~ S~; then the intra-chunk terms with Mc[i,i] folded into each
     * score. */
    VEC(OUT_VE) acc[OUT_RT][OUT_NV];
    #pragma unroll
    for (int r = 0; r < OUT_RT; ++r) {
        #pragma unroll
        for (int j = 0; j < OUT_NV; ++j)
            acc[r][j] = (VEC(OUT_VE))(0.0f);
#if ZCOL
        den_inter[r] = den_intra[r] = 0.0f;
#endif
    }

    /* q~ P_i: chunk 0 of a sequence has no prefix, and its P row is not read. */
    if (ch.z > 0) {
        global const STORE_T *qrow[OUT_RT];
        float dz[OUT_RT]; /* q~ . zP */
        #pragma unroll
        for (int r = 0; r < OUT_RT; ++r) {
            qrow[r] = qb + min(r0 + r, nq - 1) * qstride; /* rows past the last token repeat it */
        }
        global const float *P = pref + slot_s(c, kvh, kvc) + et * OUT_COLS;
        global const float *zp = ZCOL ? pref + slot_z(c, kvh, kvc) : pref; /* none: read, not used */
        READOUT_TILE(qrow, P, zp, scale, feature_eps, acc, dz);
#if ZCOL
        #pragma unroll
        for (int r = 0; r < OUT_RT; ++r)
            den_inter[r] = dz[r];
#endif
    }

    /* q~ of the group's tokens, for the scores. */
    for (int x = lid; x < CAUSAL_TQ * DKV; x += OUT_WG) {
        const int r = x / DKV, d0 = (x - r * DKV) * ST_W;
        VEC(ST_W) val = (VEC(ST_W))(0.0f);
        if (r < nq) {
            const VEC(ST_W) raw = LOADN(ST_W, 0, qb + r * qstride + d0);
            val = scale * FEATURE_V(ST_W, raw, feature_eps);
        }
        VSTOREN(ST_W, val, 0, qs + r * DK + d0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* The masked intra-chunk part over keys 0 .. p0 + nq - 1 of the chunk. Masked pairs are
     * skipped, never multiplied by zero, so a later token's NaN or Inf cannot reach row r. */
    const int kend = p0 + nq;
    for (int kb = 0; kb < kend; kb += CAUSAL_KT) {
        const int nk = min(CAUSAL_KT, kend - kb);
        stage_keys(kb0 + kb * kstride, kstride, nk, feature_eps, lid, kt);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* Score tiles wholly masked (or past the group's last token) are never read, so not
         * computed; a partly masked tile is, and its masked pairs are not read either. */
        for (int x = lid; x < (CAUSAL_TQ / CAUSAL_SRT) * (KTV / CAUSAL_SKV); x += OUT_WG) {
            const int rr = (x / (KTV / CAUSAL_SKV)) * CAUSAL_SRT;
            const int s0 = (x % (KTV / CAUSAL_SKV)) * CAUSAL_SKV * OUT_VE;
            if (rr >= nq || kb + s0 > p0 + rr + CAUSAL_SRT - 1)
                continue;
            VEC(OUT_VE) st[CAUSAL_SRT][CAUSAL_SKV];
            #pragma unroll
            for (int r = 0; r < CAUSAL_SRT; ++r)
                #pragma unroll
                for (int c = 0; c < CAUSAL_SKV; ++c)
                    st[r][c] = (VEC(OUT_VE))(0.0f);
            SCORE_STEPS(OUT_VE, CAUSAL_SRT, CAUSAL_SKV, st, DK, qs + rr * DK, DK, kt + s0, CAUSAL_KT);
            #pragma unroll
            for (int r = 0; r < CAUSAL_SRT; ++r)
                #pragma unroll
                for (int c = 0; c < CAUSAL_SKV; ++c)
                    VSTOREN(OUT_VE, st[r][c], 0, sc + (rr + r) * CAUSAL_KT + s0 + c * OUT_VE);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kb + nk - 1 <= p0 + r0) { /* every key of the pass is visible to every row */
            for (int s = 0; s < nk; ++s) {
                VEC(OUT_VE) vv[OUT_NV];
                #pragma unroll
                for (int j = 0; j < OUT_NV; ++j)
                    vv[j] = LOADN(OUT_VE, 0, vb + (kb + s) * vstride + j * OUT_VE);
                #pragma unroll
                for (int r = 0; r < OUT_RT; ++r) {
                    const float a = mii * sc[(r0 + r) * CAUSAL_KT + s];
#if ZCOL
                    den_intra[r] += a;
#endif
                    #pragma unroll
                    for (int j = 0; j < OUT_NV; ++j)
                        acc[r][j] += a * vv[j];
                }
            }
        } else {
            for (int s = 0; s < nk; ++s) {
                VEC(OUT_VE) vv[OUT_NV];
                #pragma unroll
                for (int j = 0; j < OUT_NV; ++j)
                    vv[j] = LOADN(OUT_VE, 0, vb + (kb + s) * vstride + j * OUT_VE);
                #pragma unroll
                for (int r = 0; r < OUT_RT; ++r)
                    if (kb + s <= p0 + r0 + r) {
                        const float a = mii * sc[(r0 + r) * CAUSAL_KT + s];
#if ZCOL
                        den_intra[r] += a;
#endif
                        #pragma unroll
                        for (int j = 0; j < OUT_NV; ++j)
                            acc[r][j] += a * vv[j];
                    }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* kt and sc are overwritten next */
    }

    global STORE_T *ob = out + row_base(g, bh, DV) + (ch.x + p0) * ostride + et * OUT_COLS;
    #pragma unroll
    for (int r = 0; r < OUT_RT; ++r)
        if (r0 + r < nq) {
#if ZCOL
            const float den = den_inter[r] + den_intra[r] + eps; /* den_intra has Mc[i,i] in it */
#endif
            #pragma unroll
            for (int j = 0; j < OUT_NV; ++j) {
#if ZCOL
                STOREN(OUT_VE, acc[r][j] / den, 0, ob + (r0 + r) * ostride + j * OUT_VE);
#else
                STOREN(OUT_VE, acc[r][j], 0, ob + (r0 + r) * ostride + j * OUT_VE);
#endif
            }
        }
}
