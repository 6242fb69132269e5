/* Backward of causal MHLA, chunk form (docs/spec.md "Backward", "Causal MHLA"), over a table of chunks:
 * entry k = {first token, tokens, chunk index i in its sequence, entry of the sequence's chunk 0,
 * chunks of the sequence, batch element, -, -} (8 ints). Per (entry, head) a slot of Dk x (Dv+1)
 * floats holds S (with z as column Dv; stored transposed, as rows of Dk floats, as are P, dS^T and
 * G^T; G and dS as rows of Dv+1), the prefix P_i = sum_{j<i} Mc[i,j] S_j, the gradient
 * summary G_i = sum_t q~_t [g_t | r_t]^T and dS_j = sum_{i>j} Mc[i,j] G_i (P and dS: causal_prefix.cl's
 * causal_prefix and causal_suffix over the slots of an entry, every head). With g_t = dO_t/den_t
 * and r_t = dL/dden_t (paper; 1 and 0 without a normalizer):
 *   dq~_t = P_i g_t + r_t zP_i + Mc[i,i] sum_{s<=t in i} (g_t.v_s + r_t) k~_s
 *   dk~_s = dS_j v_s + dz_j + Mc[j,j] sum_{t>=s in j} (g_t.v_s + r_t) q~_t
 *   dv_s  = dS_j^T k~_s + Mc[j,j] sum_{t>=s in j} (q~_t.k~_s) g_t
 *   dMc[i,j<i] = sum <G_i, S_j>,  dMc[i,i] = sum_{t in i, s<=t} (q~_t.k~_s)(g_t.v_s + r_t).
 * Every sum runs in a fixed order: results are bit-identical run to run. */
#include "common.h"
#include "backward.h"
#include "causal.h"

#ifndef BCT_SR
#define BCT_SR 1
#endif
#if DK % BCT_SR != 0
#error "BCT_SR must divide DK"
#endif

/* Rows d0 .. d0 + BCT_SR - 1 of a slot's summary (acc: its Dv columns, z: its last column) as
 * columns of the transposed slot at dst (its row e at dst + e * DK): for each e the BCT_SR floats
 * are neighbours, so they go out together; storing row by row (each lane e to its own row) made
 * the compiler scatter every vector (AVX-512's scatter is microcoded: docs/tuning-notes.md
 * "Causal backward"). */
void bc_store_columns(global float *dst, VEC(BWD_VV) acc[BCT_SR][BWD_NV], const float z[BCT_SR])
{
    for (int j = 0; j < BWD_NV; ++j) {
        float l[BCT_SR][BWD_VV];
        #pragma unroll
        for (int i = 0; i < BCT_SR; ++i)
            VSTOREN(BWD_VV, acc[i][j], 0, l[i]);
        for (int e = 0; e < BWD_VV; ++e) {
            float col[BCT_SR];
            #pragma unroll
            for (int i = 0; i < BCT_SR; ++i)
                col[i] = l[i][e];
            VSTOREN(BCT_SR, VLOADN(BCT_SR, 0, col), 0, dst + (long)(j * BWD_VV + e) * DK);
        }
    }
    VSTOREN(BCT_SR, VLOADN(BCT_SR, 0, z), 0, dst + (long)DV * DK);
}

/* The same for rows already in memory: columns 0 .. n - 1 of the BCT_SR rows at src (ld floats
 * apart) into rows 0 .. n - 1 of the transposed slot at dst. */
void bc_rows_to_columns(global float *dst, global const float *src, const int ld, const int n)
{
    for (int e = 0; e < n; ++e) {
        float col[BCT_SR];
        #pragma unroll
        for (int i = 0; i < BCT_SR; ++i)
            col[i] = src[i * ld + e];
        VSTOREN(BCT_SR, VLOADN(BCT_SR, 0, col), 0, dst + (long)e * DK);
    }
}

/* global: (DK / BCT_SR, H, entries). Rows d0 .. d0 + BCT_SR - 1 of the chunk's S: k~_d [v | 1]^T
 * summed over its tokens (each v row loaded once for BCT_SR rows), the Dv columns as vectors of
 * BWD_VV; stored as columns of S^T. */
kernel void bc_summary(global const STORE_T *restrict k, global const STORE_T *restrict v,
                       global const int *restrict tab, global float *restrict S, const mhla_grid g_arg,
                       const float feature_eps, const int entries)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int d0 = (int)get_global_id(0) * BCT_SR, h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (d0 >= DK || h >= g.heads || kk >= entries)
        return;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1);
    VEC(BWD_VV) acc[BCT_SR][BWD_NV];
    float z[BCT_SR];
    #pragma unroll
    for (int i = 0; i < BCT_SR; ++i) {
        z[i] = 0.0f;
        #pragma unroll
        for (int j = 0; j < BWD_NV; ++j)
            acc[i][j] = (VEC(BWD_VV))(0.0f);
    }
    for (int s = 0; s < len; ++s) {
        global const STORE_T *krow = k + row_offset(g, bh, t0 + s, DK) + d0;
        global const STORE_T *vrow = v + row_offset(g, bh, t0 + s, DV);
        VEC(BWD_VV) vv[BWD_NV];
        #pragma unroll
        for (int j = 0; j < BWD_NV; ++j)
            vv[j] = LOADN(BWD_VV, j, vrow);
        #pragma unroll
        for (int i = 0; i < BCT_SR; ++i) {
            const float kd = feature(LOADN(1, i, krow), feature_eps);
            #pragma unroll
            for (int j = 0; j < BWD_NV; ++j)
                acc[i][j] += kd * vv[j];
            z[i] += kd;
        }
    }
    /* transposed (row e holds column e of S, row DV z): the layout the read-outs and dMc read */
    bc_store_columns(S + bc_slot(kk, h, g.heads) + d0, acc, z);
}

/* global: (C, H, entries), one token per work-item (paper normalizer): 1/den_t and
 * r_t = -(dO_t . num_t) / den_t^2 at [bh][t]. */
kernel void bc_scalars(global const STORE_T *restrict q, global const STORE_T *restrict k,
                       global const STORE_T *restrict v, global const STORE_T *restrict dout,
                       global const float *restrict mix, const int lda, global const int *restrict tab,
                       global const float *restrict P, global float *restrict invs, global float *restrict rs,
                       const mhla_grid g_arg, const float feature_eps, const float scale, const float eps,
                       const int entries)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int s = (int)get_global_id(0), h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (h >= g.heads || kk >= entries || s >= ENT(kk, 1))
        return;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), t = t0 + s, i = ENT(kk, 2);
    const float mii = mix[(long)i * lda + i];
    float qt[DK], go[DV];
    bc_qt(q, g, bh, t, feature_eps, scale, qt);
    global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
    for (int e = 0; e < DV; ++e)
        go[e] = LOADN(1, e, orow);
    global const float *p = P + bc_slot(kk, h, g.heads); /* P^T: row e over d, row DV zP */
    float den = 0.0f, od = 0.0f;
    for (int e = 0; e <= DV; ++e) {
        float pq = 0.0f;
        for (int d = 0; d < DK; ++d)
            pq += p[e * DK + d] * qt[d];
        if (e < DV)
            od += go[e] * pq;
        else
            den += pq;
    }
    for (int u = t0; u <= t; ++u) {
        const float a = bc_dot_k(k, g, bh, u, feature_eps, qt);
        den += mii * a;
        od += mii * a * bc_dot_v(v, g, bh, u, go);
    }
    const float inv = 1.0f / (den + eps);
    invs[(long)bh * g.n + t] = inv;
    rs[(long)bh * g.n + t] = -od * inv * inv;
}

/* global: (DK / BCT_SR, H, entries). Rows d0 .. d0 + BCT_SR - 1 of the chunk's G: q~_d [g | r]^T
 * summed over its tokens, into G and as columns of G^T (dS feeds dv, dS^T dk; dMc reads G^T with
 * S^T). */
kernel void bc_grad(global const STORE_T *restrict q, global const STORE_T *restrict dout,
                    global const float *restrict invs, global const float *restrict rs,
                    global const int *restrict tab, global float *restrict G, global float *restrict GT,
                    const mhla_grid g_arg, const float feature_eps, const float scale, const int entries)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int d0 = (int)get_global_id(0) * BCT_SR, h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (d0 >= DK || h >= g.heads || kk >= entries)
        return;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1);
    VEC(BWD_VV) acc[BCT_SR][BWD_NV];
    float z[BCT_SR];
    #pragma unroll
    for (int i = 0; i < BCT_SR; ++i) {
        z[i] = 0.0f;
        #pragma unroll
        for (int j = 0; j < BWD_NV; ++j)
            acc[i][j] = (VEC(BWD_VV))(0.0f);
    }
    for (int s = 0; s < len; ++s) {
        const int t = t0 + s;
#if NORMALIZER == 0
        const float inv = invs[(long)bh * g.n + t], r = rs[(long)bh * g.n + t];
#else
        const float inv = 1.0f, r = 0.0f;
        (void)invs, (void)rs;
#endif
        global const STORE_T *qrow = q + row_offset(g, bh, t, DK) + d0;
        global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
        VEC(BWD_VV) ov[BWD_NV];
        #pragma unroll
        for (int j = 0; j < BWD_NV; ++j)
            ov[j] = LOADN(BWD_VV, j, orow);
        #pragma unroll
        for (int i = 0; i < BCT_SR; ++i) {
            const float qd = scale * feature(LOADN(1, i, qrow), feature_eps), w = qd * inv;
            #pragma unroll
            for (int j = 0; j < BWD_NV; ++j)
                acc[i][j] += w * ov[j];
            z[i] += qd * r;
        }
    }
    #pragma unroll
    for (int i = 0; i < BCT_SR; ++i) {
        global float *dst = G + bc_slot(kk, h, g.heads) + (d0 + i) * SC;
        for (int j = 0; j < BWD_NV; ++j)
            VSTOREN(BWD_VV, acc[i][j], j, dst);
        dst[DV] = z[i];
    }
    bc_store_columns(GT + bc_slot(kk, h, g.heads) + d0, acc, z);
}

/* global: (DK / BCT_SR, H, entries). dS^T from dS, slot by slot: a copy, where a second suffix
 * mixture of G^T would redo the quadratic sum over chunks. */
kernel void bc_transpose(global const float *restrict src, global float *restrict dst, const int heads,
                         const int entries)
{
    const int d0 = (int)get_global_id(0) * BCT_SR, h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (d0 >= DK || h >= heads || kk >= entries)
        return;
    /* a column of BCT_SR neighbours at a time (bc_store_columns says why) */
    bc_rows_to_columns(dst + bc_slot(kk, h, heads) + d0, src + bc_slot(kk, h, heads) + d0 * SC, SC, SC);
}

/* global: (DK / BCT_SR, H, entries). The forward's chunk summaries and prefix mixtures of a plain
 * causal plan (mhla_plan_save_for_backward: kernels/causal.h's slots, chunk i's slot holding every
 * batch element's and head's S as rows of Dv and, with the paper normalizer, z) into S^T and P^T,
 * rows d0 .. d0 + BCT_SR - 1 of each per work-item, written a column of neighbours at a time
 * (bc_store_columns says why); without a normalizer the z rows are 0 (the forward keeps no z; only
 * the paper normalizer's terms read them). */
kernel void bc_from_forward(global const float *restrict sums, global const float *restrict pref,
                            global const int *restrict tab, global float *restrict S, global float *restrict P,
                            const int heads, const int entries)
{
    const int d0 = (int)get_global_id(0) * BCT_SR, h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (d0 >= DK || h >= heads || kk >= entries)
        return;
    const int i = ENT(kk, 2), bhs = ENT(kk, 6) * heads, bh = ENT(kk, 5) * heads + h;
    global const float *src[2] = {sums, pref};
    global float *dst[2] = {S + bc_slot(kk, h, heads) + d0, P + bc_slot(kk, h, heads) + d0};
    for (int x = 0; x < 2; ++x) {
        bc_rows_to_columns(dst[x], src[x] + slot_s(i, bh, bhs) + (long)d0 * DV, DV, DV);
        float z[BCT_SR];
        #pragma unroll
        for (int r = 0; r < BCT_SR; ++r) {
#if ZCOL
            z[r] = src[x][slot_z(i, bh, bhs) + d0 + r];
#else
            z[r] = 0.0f;
#endif
        }
        VSTOREN(BCT_SR, VLOADN(BCT_SR, 0, z), 0, dst[x] + (long)DV * DK);
    }
}
