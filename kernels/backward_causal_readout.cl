/* Backward of causal MHLA, chunk form: the per-token read-outs dq, dk, dv, the diagonal terms of
 * dMc, and dMc finished in a fixed order (the formulas: kernels/backward_causal.cl). */
#include "common.h"
#include "backward.h"

/* ---- the tiled read-outs: dq, dk and dv of a tile of BCT_TQ tokens of one chunk ----------------
 * Each is the forward's causal read-out (causal_output.cl) with other operands: a prefix product
 * of the tile's rows x_r with a slot, then the intra-chunk pairs through local memory BCT_KT tokens
 * at a time: scores x_r . y_c (+ a bias), and each score times a vector w_c into the row's
 * register tile of BCT_RT rows x BCT_VE * BCT_NV columns:
 *   dq~_t: x = g_t,   slot P_i^T (+ r_t zP_i), y = v_s,  bias r_t, w = k~_s, pairs s <= t
 *   dk~_s: x = v_s,   slot dS_j^T (+ dz_j),    y = g_t,  bias r_t, w = q~_t, pairs t >= s
 *   dv_s:  x = k~_s,  slot dS_j,               y = q~_t,           w = g_t,  pairs t >= s
 * with Mc[i,i] folded into each score. Masked pairs are skipped, never multiplied by zero. */
#ifndef BCT_TQ
#define BCT_TQ 32
#endif
#ifndef BCT_KT
#define BCT_KT 32
#endif
#ifndef BCT_RT
#define BCT_RT 4
#endif
#ifndef BCT_VE
#define BCT_VE 4
#endif
#ifndef BCT_NV
#define BCT_NV 1
#endif
#define BCT_COLS (BCT_VE * BCT_NV)
#define BCT_KTV (BCT_KT / BCT_VE)
#if BCT_KT % BCT_VE != 0 || BCT_TQ % BCT_RT != 0 || DK % BCT_COLS != 0 || DV % BCT_COLS != 0
#error "BCT_KT must be a multiple of BCT_VE, BCT_TQ of BCT_RT, and Dk and Dv of BCT_VE * BCT_NV"
#endif
#define KIND_DQ 0
#define KIND_DK 1
#define KIND_DV 2

/* g_t = dO_t / den_t: W lanes at column o of token t's row. */
#define BCT_G(W, o, t)                                                                              \
    (LOADN(W, 0, dout + row_offset(g, bh, (t), DV) + (o)) * bct_inv(invs, (long)bh * g.n + (t)))

/* acc = x_r times the slot (`slot`: P^T or dS^T as rows of Dk floats, SC of them, or dS as rows
 * of SC floats, DK of them) for rows r0 .. r0 + BCT_RT - 1 of the nq tokens from t1, columns col0 ..
 * col0 + BCT_COLS - 1, from the rows in global memory; plus the z row's term (dq: r_t zP_i, dk:
 * dz_j). Rows past the end repeat the last token and are not stored. */
__attribute__((always_inline)) inline void
bct_prefix(const int kind, global const STORE_T *k, global const STORE_T *v, global const STORE_T *dout,
           global const float *slot, global const float *invs, global const float *rs, const mhla_grid g,
           const int bh, const int t1, const int nq, const int r0, const int col0, const float feature_eps,
           VEC(BCT_VE) (*acc)[BCT_NV])
{
    const int DX = kind == KIND_DV ? DK : DV;
    const int mstride = kind == KIND_DV ? SC : DK;
    #pragma unroll
    for (int r = 0; r < BCT_RT; ++r)
        #pragma unroll
        for (int j = 0; j < BCT_NV; ++j)
            acc[r][j] = (VEC(BCT_VE))(0.0f);
    for (int p0v = 0; p0v < DX; p0v += BCT_VE) {
        float xr[BCT_RT][BCT_VE];
        #pragma unroll
        for (int r = 0; r < BCT_RT; ++r) {
            const int t = t1 + min(r0 + r, nq - 1);
            VEC(BCT_VE) val;
            if (kind == KIND_DQ)
                val = BCT_G(BCT_VE, p0v, t);
            else if (kind == KIND_DK)
                val = LOADN(BCT_VE, 0, v + row_offset(g, bh, t, DV) + p0v);
            else
                val = FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, k + row_offset(g, bh, t, DK) + p0v), feature_eps);
            VSTOREN(BCT_VE, val, 0, xr[r]);
        }
        #pragma unroll
        for (int pp = 0; pp < BCT_VE; ++pp) {
            VEC(BCT_VE) mv[BCT_NV];
            #pragma unroll
            for (int j = 0; j < BCT_NV; ++j)
                mv[j] = VLOADN(BCT_VE, 0, slot + (long)(p0v + pp) * mstride + col0 + j * BCT_VE);
            #pragma unroll
            for (int r = 0; r < BCT_RT; ++r)
                #pragma unroll
                for (int j = 0; j < BCT_NV; ++j)
                    acc[r][j] += xr[r][pp] * mv[j];
        }
    }
#if NORMALIZER == 0
    if (kind != KIND_DV) { /* dq: r_t zP_i; dk: dz_j (the z row of P^T or dS^T) */
        #pragma unroll
        for (int r = 0; r < BCT_RT; ++r) {
            const float w = kind == KIND_DQ ? bct_r(rs, (long)bh * g.n + t1 + min(r0 + r, nq - 1)) : 1.0f;
            #pragma unroll
            for (int j = 0; j < BCT_NV; ++j)
                acc[r][j] += w * VLOADN(BCT_VE, 0, slot + (long)DV * DK + col0 + j * BCT_VE);
        }
    }
#endif
}

/* Rows r0 .. of the nq tokens from t1 out of acc: dq = scale phi'(q) dq~, dk = phi'(k) dk~, dv as
 * it is. */
__attribute__((always_inline)) inline void bct_store(const int kind, global const STORE_T *q, global const STORE_T *k,
                       global STORE_T *out, const mhla_grid g, const int bh, const int t1, const int nq,
                       const int r0, const int col0, const float scale, VEC(BCT_VE) (*acc)[BCT_NV])
{
    const int DW = kind == KIND_DV ? DV : DK;
    #pragma unroll
    for (int r = 0; r < BCT_RT; ++r)
        if (r0 + r < nq) {
            const long row = row_offset(g, bh, t1 + r0 + r, DW);
            #pragma unroll
            for (int j = 0; j < BCT_NV; ++j) {
                const int o = col0 + j * BCT_VE;
                VEC(BCT_VE) y = acc[r][j];
                if (kind == KIND_DQ)
                    y *= scale * FEATURE_GRAD_V(BCT_VE, LOADN(BCT_VE, 0, q + row + o));
                else if (kind == KIND_DK)
                    y *= FEATURE_GRAD_V(BCT_VE, LOADN(BCT_VE, 0, k + row + o));
                STOREN(BCT_VE, y, 0, out + row + o);
            }
        }
}

/* The read-out of `kind` (a constant: each kernel below is this function specialized; its pointers
 * are not restrict-qualified: inlining restrict parameters leaves llvm.experimental.noalias.scope.decl
 * calls that Oclgrind cannot run). `slot`: P^T
 * or dS^T as rows of Dk floats (SC of them), or dS as rows of SC floats (DK of them). Local arrays:
 * xs[BCT_TQ * DX], ys[DX * BCT_KT] (transposed), sc[BCT_TQ * BCT_KT], cb[BCT_KT]. */
__attribute__((always_inline)) inline void bct_readout(const int kind, global const STORE_T *q, global const STORE_T *k,
                        global const STORE_T *v, global const STORE_T *dout,
                        global const float *mix, const int lda, global const int *tab,
                        global const float *slots, global const float *invs,
                        global const float *rs, global STORE_T *out, const mhla_grid g,
                        const float feature_eps, const float scale, const int tiles_per_chunk, local float *xs,
                        local float *ys, local float *sc, local float *cb)
{
    const int DX = kind == KIND_DV ? DK : DV, DW = kind == KIND_DV ? DV : DK;
    const int NE = DW / BCT_COLS, WG = NE * (BCT_TQ / BCT_RT);
    const int lid = (int)get_local_id(0), et = lid % NE, r0 = (lid / NE) * BCT_RT;
    const int kk = (int)get_group_id(2) / tiles_per_chunk, h = (int)get_group_id(1);
    const int p0 = ((int)get_group_id(2) - kk * tiles_per_chunk) * BCT_TQ;
    const int len = ENT(kk, 1);
    if (p0 >= len)
        return; /* the whole group: a tile past the end of a short chunk */
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), i = ENT(kk, 2), nq = min(BCT_TQ, len - p0);
    const float mii = mix[(long)i * lda + i];
    const int col0 = et * BCT_COLS;
    global const float *slot = slots + bc_slot(kk, h, g.heads);

    /* The prefix product first, before any barrier (as causal_output.cl: a register tile that stays
     * in registers). */
    VEC(BCT_VE) acc[BCT_RT][BCT_NV];
    bct_prefix(kind, k, v, dout, slot, invs, rs, g, bh, t0 + p0, nq, r0, col0, feature_eps, acc);

    /* The tile's rows x_r for the scores, zero past the chunk's end. */
    for (int x = lid; x < BCT_TQ * (DX / BCT_VE); x += WG) {
        const int r = x / (DX / BCT_VE), d0 = (x - r * (DX / BCT_VE)) * BCT_VE, t = t0 + p0 + r;
        VEC(BCT_VE) val = (VEC(BCT_VE))(0.0f);
        if (r < nq) {
            if (kind == KIND_DQ)
                val = BCT_G(BCT_VE, d0, t);
            else if (kind == KIND_DK)
                val = LOADN(BCT_VE, 0, v + row_offset(g, bh, t, DV) + d0);
            else
                val = FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, k + row_offset(g, bh, t, DK) + d0), feature_eps);
        }
        VSTOREN(BCT_VE, val, 0, xs + r * DX + d0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* The pairs inside the chunk: dq over tokens 0 .. p0 + nq - 1, dk and dv over p0 .. len - 1. */
    const int cstart = kind == KIND_DQ ? 0 : p0, cend = kind == KIND_DQ ? p0 + nq : len;
    for (int kb = cstart; kb < cend; kb += BCT_KT) {
        const int nk = min(BCT_KT, cend - kb);
        for (int x = lid; x < BCT_KT * (DX / BCT_VE); x += WG) {
            const int c = x / (DX / BCT_VE), d0 = (x - c * (DX / BCT_VE)) * BCT_VE, t = t0 + kb + c;
            float yd[BCT_VE];
            VEC(BCT_VE) val = (VEC(BCT_VE))(0.0f);
            if (c < nk) {
                if (kind == KIND_DQ)
                    val = LOADN(BCT_VE, 0, v + row_offset(g, bh, t, DV) + d0);
                else if (kind == KIND_DK)
                    val = BCT_G(BCT_VE, d0, t);
                else
                    val = scale * FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, q + row_offset(g, bh, t, DK) + d0), feature_eps);
            }
            VSTOREN(BCT_VE, val, 0, yd);
            #pragma unroll
            for (int e = 0; e < BCT_VE; ++e)
                ys[(d0 + e) * BCT_KT + c] = yd[e];
        }
        if (kind == KIND_DK)
            for (int c = lid; c < BCT_KT; c += WG)
                cb[c] = c < nk ? bct_r(rs, (long)bh * g.n + t0 + kb + c) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        /* BCT_VE scores of a row at a time; vectors wholly masked (or past the tile) are not computed. */
        for (int x = lid; x < BCT_TQ * BCT_KTV; x += WG) {
            const int r = x / BCT_KTV, c0 = (x - r * BCT_KTV) * BCT_VE;
            if (r >= nq || (kind == KIND_DQ ? kb + c0 > p0 + r : kb + c0 + BCT_VE - 1 < p0 + r))
                continue;
            VEC(BCT_VE) a = (VEC(BCT_VE))(0.0f);
            for (int d = 0; d < DX; ++d)
                a += xs[r * DX + d] * VLOADN(BCT_VE, 0, ys + d * BCT_KT + c0);
#if NORMALIZER == 0
            if (kind == KIND_DQ)
                a += bct_r(rs, (long)bh * g.n + t0 + p0 + r);
            else if (kind == KIND_DK)
                a += VLOADN(BCT_VE, 0, cb + c0);
#endif
            VSTOREN(BCT_VE, mii * a, 0, sc + r * BCT_KT + c0);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* Every pair of the pass visible to every row of the work-item: no tests in the loop (rows
         * past the tile's end take scores never written, and are not stored). */
        const int all = kind == KIND_DQ ? kb + nk - 1 <= p0 + r0 : kb >= p0 + r0 + BCT_RT - 1;
        for (int c = 0; c < nk; ++c) {
            const int t = t0 + kb + c;
            VEC(BCT_VE) wv[BCT_NV];
            #pragma unroll
            for (int j = 0; j < BCT_NV; ++j) {
                const int o = col0 + j * BCT_VE;
                if (kind == KIND_DQ)
                    wv[j] = FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, k + row_offset(g, bh, t, DK) + o), feature_eps);
                else if (kind == KIND_DK)
                    wv[j] = scale * FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, q + row_offset(g, bh, t, DK) + o), feature_eps);
                else
                    wv[j] = BCT_G(BCT_VE, o, t);
            }
            if (all) {
                #pragma unroll
                for (int r = 0; r < BCT_RT; ++r) {
                    const float a = sc[(r0 + r) * BCT_KT + c];
                    #pragma unroll
                    for (int j = 0; j < BCT_NV; ++j)
                        acc[r][j] += a * wv[j];
                }
            } else {
                #pragma unroll
                for (int r = 0; r < BCT_RT; ++r) {
                    const int row = p0 + r0 + r;
                    if (r0 + r < nq && (kind == KIND_DQ ? kb + c <= row : kb + c >= row)) {
                        const float a = sc[(r0 + r) * BCT_KT + c];
                        #pragma unroll
                        for (int j = 0; j < BCT_NV; ++j)
                            acc[r][j] += a * wv[j];
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* ys, cb and sc are overwritten next */
    }

    bct_store(kind, q, k, out, g, bh, t0 + p0, nq, r0, col0, scale, acc);
}

#define BCT_ARGS                                                                                    \
    global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v, \
        global const STORE_T *restrict dout, global const float *restrict mix, const int lda,       \
        global const int *restrict tab, global const float *restrict slots, global const float *restrict invs, \
        global const float *restrict rs, global STORE_T *restrict out, const mhla_grid g_arg,       \
        const float feature_eps, const float scale, const int tiles_per_chunk

/* global: (work-items of a group, H, entries * tiles_per_chunk); local: (the group's work-items:
 * Dw / (BCT_VE * BCT_NV) column tiles x BCT_TQ / BCT_RT token groups, host/backward/backward_causal.c). */
kernel void bc_dq(BCT_ARGS)
{
    local float xs[BCT_TQ * DV], ys[DV * BCT_KT], sc[BCT_TQ * BCT_KT], cb[BCT_KT];
    bct_readout(KIND_DQ, q, k, v, dout, mix, lda, tab, slots, invs, rs, out, g_arg, feature_eps, scale,
                tiles_per_chunk, xs, ys, sc, cb);
}

kernel void bc_dk(BCT_ARGS)
{
    local float xs[BCT_TQ * DV], ys[DV * BCT_KT], sc[BCT_TQ * BCT_KT], cb[BCT_KT];
    bct_readout(KIND_DK, q, k, v, dout, mix, lda, tab, slots, invs, rs, out, g_arg, feature_eps, scale,
                tiles_per_chunk, xs, ys, sc, cb);
}

kernel void bc_dv(BCT_ARGS)
{
    local float xs[BCT_TQ * DK], ys[DK * BCT_KT], sc[BCT_TQ * BCT_KT], cb[BCT_KT];
    bct_readout(KIND_DV, q, k, v, dout, mix, lda, tab, slots, invs, rs, out, g_arg, feature_eps, scale,
                tiles_per_chunk, xs, ys, sc, cb);
}

/* ---- the fused read-out: dq, dk, dv and dMc's diagonal term of a whole chunk in one group -------
 * The three read-outs above each compute a score matrix of their own, and bc_diag both again: for
 * a chunk of len <= BCT_FC tokens the group here computes A'[t][s] = g_t . v_s + r_t and
 * B[t][s] = q~_t . k~_s once each (s <= t), into local memory, and reads them out three ways:
 *   dq~_t = g_t P^T + r_t zP + Mc[i,i] sum_{s<=t} A'[t][s] k~_s   (rows of A')
 *   dk~_s = v_s dS^T + dz    + Mc[i,i] sum_{t>=s} A'[t][s] q~_t   (columns of A')
 *   dv_s  = k~_s dS          + Mc[i,i] sum_{t>=s} B[t][s] g_t     (columns of B)
 * and diag = sum_{s<=t} B[t][s] A'[t][s], the chunk's share of dMc[i,i] (bc_diag's, with one
 * part). Each work-item owns BCT_RT rows x BCT_COLS columns of every output in turn; the scores in
 * BCF_SRT rows x BCF_SKV vectors of BCT_VE per step. BCT_FC: the chunk rounded up to BCT_VE and
 * BCT_RT (host/tune/tiling.c: 0 when the group does not fit the device, and the three kernels
 * above run instead). */
#if defined(BCT_FC) && BCT_FC > 0
#define BCF_DX (DK > DV ? DK : DV)
#define BCF_NE (BCF_DX / BCT_COLS)
#define BCF_WG (BCF_NE * (BCT_FC / BCT_RT))
#define BCF_CV (BCT_FC / BCT_VE)
#ifndef BCF_SRT
#define BCF_SRT BCT_RT
#endif
#ifndef BCF_SKV
#define BCF_SKV 1
#endif
#if BCT_FC % BCT_VE != 0 || BCT_FC % BCT_RT != 0 || BCT_FC % BCF_SRT != 0 || BCF_CV % BCF_SKV != 0
#error "BCT_FC must be a multiple of BCT_VE, BCT_RT and BCF_SRT, and BCF_SKV divide its vectors"
#endif

/* xs = the rows x_t (DX floats each) and yt = the rows y_s transposed (DX x BCT_FC), zero past
 * len: kind KIND_DQ stages g and v (for A'), any other q~ and k~ (for B). Four rows per work-item
 * where BCT_FC allows, so that yt's columns go out as float4s of neighbouring rows (one row per
 * work-item wrote every lane to its own row of yt: extracts and scalar stores, as the causal
 * output's key staging did, kernels/causal_output.cl). */
__attribute__((always_inline)) inline void bcf_stage(const int kind, global const STORE_T *q, global const STORE_T *k,
                       global const STORE_T *v, global const STORE_T *dout, global const float *invs,
                       const mhla_grid g, const int bh, const int t0, const int len, const float feature_eps,
                       const float scale, local float *xs, local float *yt)
{
    const int DX = kind == KIND_DQ ? DV : DK, lid = (int)get_local_id(0);
#if BCT_FC % 4 == 0
#define BCF_SR 4
#else
#define BCF_SR 1
#endif
    for (int x = lid; x < (BCT_FC / BCF_SR) * (DX / BCT_VE); x += BCF_WG) {
        const int r0 = (x / (DX / BCT_VE)) * BCF_SR, d0 = (x - (x / (DX / BCT_VE)) * (DX / BCT_VE)) * BCT_VE;
        float yd[BCF_SR][BCT_VE];
        #pragma unroll
        for (int j = 0; j < BCF_SR; ++j) {
            const int r = r0 + j, t = t0 + r;
            VEC(BCT_VE) xv = (VEC(BCT_VE))(0.0f), yv = (VEC(BCT_VE))(0.0f);
            if (r < len) {
                if (kind == KIND_DQ) {
                    xv = BCT_G(BCT_VE, d0, t);
                    yv = LOADN(BCT_VE, 0, v + row_offset(g, bh, t, DV) + d0);
                } else {
                    xv = scale * FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, q + row_offset(g, bh, t, DK) + d0), feature_eps);
                    yv = FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, k + row_offset(g, bh, t, DK) + d0), feature_eps);
                }
            }
            VSTOREN(BCT_VE, xv, 0, xs + r * DX + d0);
            VSTOREN(BCT_VE, yv, 0, yd[j]);
        }
        #pragma unroll
        for (int e = 0; e < BCT_VE; ++e) {
#if BCF_SR == 4
            vstore4((float4)(yd[0][e], yd[1][e], yd[2][e], yd[3][e]), 0, yt + (d0 + e) * BCT_FC + r0);
#else
            yt[(d0 + e) * BCT_FC + r0] = yd[0][e];
#endif
        }
    }
#undef BCF_SR
}

/* The scores of the staged rows into sc (BCF_SRT rows x BCF_SKV vectors of BCT_VE columns per step:
 * independent multiply-add chains, as the causal output's scores; tiles wholly above the diagonal
 * or past len are not computed, a partly masked one is and its masked pairs are not read). kind
 * KIND_DQ: A' (+ r_t from cb); any other: B, and returns this work-item's share of sum B A' over
 * the pairs s <= t < len, read from sc before B overwrites it (each step reads and writes its own
 * tile only, and both kinds step through the same tiles). */
__attribute__((always_inline)) inline float bcf_scores(const int kind, const int len, local const float *xs,
                                                       local const float *yt, local const float *cb, local float *sc)
{
    const int DX = kind == KIND_DQ ? DV : DK;
    float part = 0.0f;
    for (int x = (int)get_local_id(0); x < (BCT_FC / BCF_SRT) * (BCF_CV / BCF_SKV); x += BCF_WG) {
        const int rr = (x / (BCF_CV / BCF_SKV)) * BCF_SRT, c0 = (x % (BCF_CV / BCF_SKV)) * BCF_SKV * BCT_VE;
        if (rr >= len || c0 >= len || c0 > rr + BCF_SRT - 1)
            continue;
        VEC(BCT_VE) a[BCF_SRT][BCF_SKV];
        #pragma unroll
        for (int r = 0; r < BCF_SRT; ++r)
            #pragma unroll
            for (int c = 0; c < BCF_SKV; ++c)
                a[r][c] = (VEC(BCT_VE))(0.0f);
        SCORE_STEPS(BCT_VE, BCF_SRT, BCF_SKV, a, DX, xs + rr * DX, DX, yt + c0, BCT_FC);
        #pragma unroll
        for (int r = 0; r < BCF_SRT; ++r)
            #pragma unroll
            for (int c = 0; c < BCF_SKV; ++c) {
                local float *row = sc + (rr + r) * BCT_FC + c0 + c * BCT_VE;
                if (kind == KIND_DQ) {
#if NORMALIZER == 0
                    a[r][c] += cb[rr + r];
#endif
                } else {
                    float b[BCT_VE], ap[BCT_VE];
                    VSTOREN(BCT_VE, a[r][c], 0, b);
                    VSTOREN(BCT_VE, VLOADN(BCT_VE, 0, row), 0, ap);
                    #pragma unroll
                    for (int e = 0; e < BCT_VE; ++e)
                        if (c0 + c * BCT_VE + e <= rr + r && rr + r < len)
                            part += b[e] * ap[e];
                }
                VSTOREN(BCT_VE, a[r][c], 0, row);
            }
    }
    (void)cb;
    return part;
}

/* acc += Mc[i,i] sum over the pairs of the work-item's rows r0 .. of the scores in sc times w (a
 * row of BCT_COLS columns from col0): rows of sc for dq (s <= t), columns for dk and dv (t >= s). */
__attribute__((always_inline)) inline void
bcf_products(const int kind, global const STORE_T *q, global const STORE_T *k, global const STORE_T *dout,
             global const float *invs, const mhla_grid g, const int bh, const int t0, const int len, const int r0,
             const int col0, const float mii, const float feature_eps, const float scale, local const float *sc,
             VEC(BCT_VE) (*acc)[BCT_NV])
{
    const int first = kind == KIND_DQ ? 0 : r0, last = kind == KIND_DQ ? min(r0 + BCT_RT, len) : len;
    for (int c = first; c < last; ++c) {
        const int t = t0 + c;
        VEC(BCT_VE) wv[BCT_NV];
        #pragma unroll
        for (int j = 0; j < BCT_NV; ++j) {
            const int o = col0 + j * BCT_VE;
            if (kind == KIND_DQ)
                wv[j] = mii * FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, k + row_offset(g, bh, t, DK) + o), feature_eps);
            else if (kind == KIND_DK)
                wv[j] = (mii * scale) *
                        FEATURE_V(BCT_VE, LOADN(BCT_VE, 0, q + row_offset(g, bh, t, DK) + o), feature_eps);
            else
                wv[j] = mii * BCT_G(BCT_VE, o, t);
        }
        /* every row of the work-item on the visible side of c: no tests in the loop */
        const int all = kind == KIND_DQ ? c <= r0 : c >= r0 + BCT_RT - 1;
        #pragma unroll
        for (int r = 0; r < BCT_RT; ++r) {
            if (!all && (kind == KIND_DQ ? c > r0 + r : c < r0 + r))
                continue;
            const float a = kind == KIND_DQ ? sc[(r0 + r) * BCT_FC + c] : sc[c * BCT_FC + r0 + r];
            #pragma unroll
            for (int j = 0; j < BCT_NV; ++j)
                acc[r][j] += a * wv[j];
        }
    }
}

/* global: (BCF_WG, H, entries); local: (BCF_WG, 1, 1). Arguments 0..9 as the three read-outs'
 * (slots_p: P^T), then dS^T, dS and the outputs; diag: one float per (entry, head), written when
 * want_diag. */
kernel void bc_dqkv(global const STORE_T *restrict q, global const STORE_T *restrict k,
                    global const STORE_T *restrict v, global const STORE_T *restrict dout,
                    global const float *restrict mix, const int lda, global const int *restrict tab,
                    global const float *restrict slots_p, global const float *restrict invs,
                    global const float *restrict rs, global const float *restrict slots_dst,
                    global const float *restrict slots_ds, global STORE_T *restrict dq, global STORE_T *restrict dk,
                    global STORE_T *restrict dv, global float *restrict diag, const mhla_grid g_arg,
                    const float feature_eps, const float scale, const int want_diag)
{
    local float xs[BCT_FC * BCF_DX], yt[BCF_DX * BCT_FC], sc[BCT_FC * BCT_FC], cb[BCT_FC], dg[BCF_WG];
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int lid = (int)get_local_id(0), col0 = (lid % BCF_NE) * BCT_COLS, r0 = (lid / BCF_NE) * BCT_RT;
    const int kk = (int)get_group_id(2), h = (int)get_group_id(1);
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1), i = ENT(kk, 2);
    const float mii = mix[(long)i * lda + i];
    const long so = bc_slot(kk, h, g.heads);
    const int rows = r0 < len; /* this work-item has rows of the chunk */
    VEC(BCT_VE) acc[BCT_RT][BCT_NV];

    /* A' = g v^T + r */
    bcf_stage(KIND_DQ, q, k, v, dout, invs, g, bh, t0, len, feature_eps, scale, xs, yt);
    for (int c = lid; c < BCT_FC; c += BCF_WG)
        cb[c] = c < len ? bct_r(rs, (long)bh * g.n + t0 + c) : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    bcf_scores(KIND_DQ, len, xs, yt, cb, sc);
    barrier(CLK_LOCAL_MEM_FENCE);

    /* dq from the rows of A', dk from its columns */
    if (rows && col0 < DK) {
        bct_prefix(KIND_DQ, k, v, dout, slots_p + so, invs, rs, g, bh, t0, len, r0, col0, feature_eps, acc);
        bcf_products(KIND_DQ, q, k, dout, invs, g, bh, t0, len, r0, col0, mii, feature_eps, scale, sc, acc);
        bct_store(KIND_DQ, q, k, dq, g, bh, t0, len, r0, col0, scale, acc);
        bct_prefix(KIND_DK, k, v, dout, slots_dst + so, invs, rs, g, bh, t0, len, r0, col0, feature_eps, acc);
        bcf_products(KIND_DK, q, k, dout, invs, g, bh, t0, len, r0, col0, mii, feature_eps, scale, sc, acc);
        bct_store(KIND_DK, q, k, dk, g, bh, t0, len, r0, col0, scale, acc);
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    /* B = q~ k~^T over A', and the diagonal term */
    bcf_stage(KIND_DK, q, k, v, dout, invs, g, bh, t0, len, feature_eps, scale, xs, yt);
    barrier(CLK_LOCAL_MEM_FENCE);
    dg[lid] = bcf_scores(KIND_DK, len, xs, yt, cb, sc);
    barrier(CLK_LOCAL_MEM_FENCE);

    /* dv from the columns of B */
    if (rows && col0 < DV) {
        bct_prefix(KIND_DV, k, v, dout, slots_ds + so, invs, rs, g, bh, t0, len, r0, col0, feature_eps, acc);
        bcf_products(KIND_DV, q, k, dout, invs, g, bh, t0, len, r0, col0, mii, feature_eps, scale, sc, acc);
        bct_store(KIND_DV, q, k, dv, g, bh, t0, len, r0, col0, scale, acc);
    }
    if (want_diag && lid == 0) { /* the work-items' shares in order: the same sum on every run */
        float sum = 0.0f;
        for (int w = 0; w < BCF_WG; ++w)
            sum += dg[w];
        diag[(long)kk * g.heads + h] = sum;
    }
}
#endif

/* global: (parts, H, entries); local: (parts, 1, 1). diag[kk][h][part] = the part's share of
 * sum_{t in chunk, s <= t} (q~_t . k~_s)(g_t . v_s + r_t): query rows t0 + part, + parts, ...
 * (interleaved, so that the parts' triangles are about equal). parts = 1 on CPUs (one work-item
 * walks the chunk: the row's dg_parts); a GPU runs a work-group of parts lanes per (chunk, head)
 * instead of a work-group of one. bc_dmix_finish adds the parts in order. */
kernel void bc_diag(global const STORE_T *restrict q, global const STORE_T *restrict k,
                    global const STORE_T *restrict v, global const STORE_T *restrict dout,
                    global const int *restrict tab, global const float *restrict invs,
                    global const float *restrict rs, global float *restrict diag, const mhla_grid g_arg,
                    const float feature_eps, const float scale, const int entries, const int parts)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int part = (int)get_global_id(0), h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (part >= parts || h >= g.heads || kk >= entries)
        return;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1);
    float acc = 0.0f;
    for (int t = t0 + part; t < t0 + len; t += parts) {
        const float inv = bct_inv(invs, (long)bh * g.n + t), r = bct_r(rs, (long)bh * g.n + t);
        global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
        global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
        VEC(BWD_VK) qv[BWD_NK];
        VEC(BWD_VV) gt[BWD_NV];
        for (int j = 0; j < BWD_NK; ++j)
            qv[j] = scale * FEATURE_V(BWD_VK, LOADN(BWD_VK, j, qrow), feature_eps);
        for (int j = 0; j < BWD_NV; ++j)
            gt[j] = LOADN(BWD_VV, j, orow) * inv;
        for (int u = t0; u <= t; ++u) {
            global const STORE_T *krow = k + row_offset(g, bh, u, DK);
            global const STORE_T *vrow = v + row_offset(g, bh, u, DV);
            VEC(BWD_VK) a = (VEC(BWD_VK))(0.0f);
            VEC(BWD_VV) b = (VEC(BWD_VV))(0.0f);
            for (int j = 0; j < BWD_NK; ++j)
                a += qv[j] * FEATURE_V(BWD_VK, LOADN(BWD_VK, j, krow), feature_eps);
            for (int j = 0; j < BWD_NV; ++j)
                b += gt[j] * LOADN(BWD_VV, j, vrow);
            acc += BWD_HSUM(BWD_VK, a) * (BWD_HSUM(BWD_VV, b) + r);
        }
    }
    diag[((long)kk * g.heads + h) * parts + part] = acc;
}

/* dMc's diagonal entry i: the sum, in table order, of the entries of chunk index i of their heads'
 * diagonal terms (bc_diag's parts, or the tiled dk's). (No restrict on an inlined function's
 * pointers: Oclgrind's LLVM cannot run the scope declarations inlining them leaves.) */
__attribute__((always_inline)) inline float bc_dmix_diagonal(global const int *tab, global const float *diag,
                                                             const int i, const int heads, const int entries,
                                                             const int parts)
{
    float acc = 0.0f;
    for (int kk = 0; kk < entries; ++kk)
        if (ENT(kk, 2) == i)
            for (int h = 0; h < heads; ++h)
                for (int part = 0; part < parts; ++part)
                    acc += diag[((long)kk * heads + h) * parts + part];
    return acc;
}

/* global: (R, R). dMc of a causal plan, finished: below the diagonal, where the sequences' tiled
 * products <G_i, S_j> (bwd_dmixing_part/_reduce, rows < covered) were written, kept; rows past the
 * longest sequence's chunks 0; the diagonal the sum, in table order, of the entries of chunk index
 * i of their heads' diagonal terms (bc_diag); 0 above it. */
kernel void bc_dmix_finish(global const int *restrict tab, global const float *restrict diag,
                           global float *restrict dmix, const int R, const int covered, const int heads,
                           const int entries, const int parts)
{
    const int j = (int)get_global_id(0), i = (int)get_global_id(1);
    if (j >= R || i >= R)
        return;
    float acc = 0.0f;
    if (j < i)
        acc = i < covered ? dmix[(long)i * R + j] : 0.0f;
    else if (j == i)
        acc = bc_dmix_diagonal(tab, diag, i, heads, entries, parts);
    dmix[(long)i * R + j] = acc;
}

/* The same for one sequence, with the products' pieces (bwd_dmixing_part or _tiled's partial sums,
 * [pieces][covered][covered]) added here in piece order, as bwd_dmixing_reduce adds them: one launch
 * where the two kernels take two, and the same values. */
kernel void bc_dmix_reduce_finish(global const float *restrict part, const int pieces, global const int *restrict tab,
                                  global const float *restrict diag, global float *restrict dmix, const int R,
                                  const int covered, const int heads, const int entries, const int parts)
{
    const int j = (int)get_global_id(0), i = (int)get_global_id(1);
    if (j >= R || i >= R)
        return;
    float acc = 0.0f;
    if (j < i && i < covered) {
        for (int c = 0; c < pieces; ++c)
            acc += part[((long)c * covered + i) * covered + j];
    } else if (j == i) {
        acc = bc_dmix_diagonal(tab, diag, i, heads, entries, parts);
    }
    dmix[(long)i * R + j] = acc;
}
