/* Backward of non-causal MHLA, the per-token read-outs (docs/spec.md "Backward"):
 *   u_t  = S~_i dO_t,  den_t = q~_t . z~_i (+ eps),  r_t = dL/dden_t = -(q~_t . u_t) / den_t^2
 *   dq_t = scale phi'(q_t) * (u_t / den_t + r_t z~_i [paper] + R_{i,p} z_i [official])
 *   dk_s = phi'(k_s) * (dS_b v_s + dz_b),  dv_s = dS_b^T k~_s                      (s in block b)
 * with S~ the forward's mixed summaries and dS = Mc^T G the mixed gradient summaries. Each
 * work-item keeps BWD_RT tokens' whole gradient rows in registers (BWD_RT x Dk/BWD_VK vectors), so
 * the per-token terms (den_t, r_t, phi', the z columns) are applied before anything is stored: one
 * pass over the tokens per gradient, no per-token finishing pass. BWD_RT, BWD_VK and BWD_VV are the
 * host's (host/backward/backward.c: at most 16 accumulator vectors). */
#include "common.h"
#include "backward.h"

/* -DBWD_NT=1 (CPU rows, with the forward's streaming stores: the tuning's out_nt): the gradient
 * rows (dq, dk, dv, and y, which the summary kernel reads back much later) are written once, as
 * output.cl's rows are; -DBWD_PF=N (the tuning's out_pf): the input rows of the tokens N groups
 * ahead are prefetched, as output.cl prefetches q (kernels/stream.h). */
#ifndef BWD_NT
#define BWD_NT 0
#endif
#ifndef BWD_PF
#define BWD_PF 0
#endif
#define STREAM_NT BWD_NT
#define STREAM_PF BWD_PF
#include "stream.h"

/* The transposed summary that head row bh reads in block blk: Dv rows of Dk floats
 * (bwd_transpose_summary's layout, over the summaries' B*H_kv heads: kernels/common.h, kv_of). */
global const float *bwd_tsum_rows(global const float *tsum, const mhla_grid g, const int blk, const int bh)
{
    return tsum + (long)blk * kv_count(g) * DV * (DK + 1) + (long)kv_of(g, bh) * DV * DK;
}

/* The tokens at positions p0 .. p0 + BWD_RT - 1 of block blk; past the block's last, its last
 * token again (computed on, never stored). */
void bwd_tokens(const mhla_grid g, const int blk, const int p0, int *tok)
{
    token_walk w = walk_begin(g, blk, p0);
    for (int r = 0; r < BWD_RT; ++r) {
        tok[r] = w.t;
        if (p0 + r + 1 < g.nb)
            walk_next(g, &w);
    }
}

/* acc[r][j] = 0 for the BWD_RT tokens' NVEC vectors of W lanes. */
#define BWD_TILE_ZERO(acc, W, NVEC)                                                                 \
    do {                                                                                            \
        _Pragma("unroll") for (int r_ = 0; r_ < BWD_RT; ++r_)                                       \
            _Pragma("unroll") for (int j_ = 0; j_ < (NVEC); ++j_)                                   \
                (acc)[r_][j_] = (VEC(W))(0.0f);                                                     \
    } while (0)

/* acc[r][j] += X * (row i of s, vector j) over the n rows of s (ld floats apart), for the BWD_RT
 * tokens r: X is an expression of r_ (the token) and i_ (the row), the token's i-th input. A macro,
 * as READOUT_TILE (kernels/tiles.h): PoCL keeps the tile in registers only when the loop is inline. */
#define BWD_ROWS_PRODUCT(acc, s, ld, n, W, NVEC, X)                                                 \
    for (int i_ = 0; i_ < (n); ++i_) {                                                              \
        VEC(W) sv_[NVEC];                                                                           \
        _Pragma("unroll") for (int j_ = 0; j_ < (NVEC); ++j_)                                       \
            sv_[j_] = VLOADN(W, j_, (s) + (long)i_ * (ld));                                          \
        _Pragma("unroll") for (int r_ = 0; r_ < BWD_RT; ++r_) {                                     \
            const float x_ = (X);                                                                   \
            _Pragma("unroll") for (int j_ = 0; j_ < (NVEC); ++j_)                                   \
                (acc)[r_][j_] += x_ * sv_[j_];                                                      \
        }                                                                                           \
    }

/* global: (ceil(Nb / BWD_RT), B*H, M). From dO: u = S~_i dO_t over the transposed mixed summaries,
 * then per token 1/den_t and r_t, dq_t (the official normalizer's R z_i term is added by
 * bwd_official_dz_part once R is known), and the gradient summaries' per-token weights w_t = scale/den_t
 * and r_t, kept at ((i*BH + bh)*Nb + p) (the official normalizer's dots layout, so that the mixing
 * GEMM can carry r back), from which the forward's summary kernel, weighted, makes
 * G_i = sum_t phi(q_t) [w_t dO_t | scale r_t]^T from q and dO in place (block_summary_weighted).
 * Without a normalizer den_t = 1 and r_t = 0. */
kernel void bwd_dq_readout(global const STORE_T *restrict q, global const STORE_T *restrict dout,
                           global const float *restrict tsum, global const float *restrict mixed,
                           global const float *restrict den, global STORE_T *restrict dq, global float *restrict w_out,
                           global float *restrict r_out, const mhla_grid g_arg,
                           const float feature_eps, const float scale, const float eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p0 = (int)get_global_id(0) * BWD_RT, bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p0 >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    global const float *st = bwd_tsum_rows(tsum, g, blk, bh);
    global const float *zt = mixed + summary_z_offset(kv_count(g), blk, kv_of(g, bh));
    const long qb = row_base(g, bh, DK), ob = row_base(g, bh, DV), qs = row_stride(g, DK), os = row_stride(g, DV);
    int tok[BWD_RT];
    VEC(BWD_VK) acc[BWD_RT][BWD_NK];
    bwd_tokens(g, blk, p0, tok);
    PREFETCH_AHEAD(g, p0, BWD_RT, dout + ob + tok[0] * os, os, DV);
    PREFETCH_AHEAD(g, p0, BWD_RT, q + qb + tok[0] * qs, qs, DK);
    BWD_TILE_ZERO(acc, BWD_VK, BWD_NK);
    BWD_ROWS_PRODUCT(acc, st, DK, DV, BWD_VK, BWD_NK, LOADN(1, i_, dout + ob + tok[r_] * os));
    const long at = ((long)blk * g.bh + bh) * g.nb + p0;
    const int nt_q = NT_OK(dq, BWD_VK);
    for (int r = 0; r < BWD_RT && p0 + r < g.nb; ++r) {
        global const STORE_T *qrow = q + qb + tok[r] * qs;
        float inv = 1.0f, rr = 0.0f;
#if NORMALIZER != 2
        VEC(BWD_VK) dnv = (VEC(BWD_VK))(0.0f), odv = (VEC(BWD_VK))(0.0f);
        #pragma unroll
        for (int j = 0; j < BWD_NK; ++j) {
            const VEC(BWD_VK) qt = scale * FEATURE_V(BWD_VK, LOADN(BWD_VK, j, qrow), feature_eps);
            dnv += qt * VLOADN(BWD_VK, j, zt);
            odv += qt * acc[r][j];
        }
        float dn = BWD_HSUM(BWD_VK, dnv);
        const float od = BWD_HSUM(BWD_VK, odv);
#if NORMALIZER == 1
        dn = den[at + r];
#endif
        inv = 1.0f / (dn + eps);
        rr = -od * inv * inv;
#endif
        w_out[at + r] = scale * inv;
        r_out[at + r] = rr;
        global STORE_T *dqrow = dq + qb + tok[r] * qs;
        #pragma unroll
        for (int j = 0; j < BWD_NK; ++j) {
            const VEC(BWD_VK) x = LOADN(BWD_VK, j, qrow);
            VEC(BWD_VK) d = acc[r][j] * inv;
#if NORMALIZER == 0
            d += rr * VLOADN(BWD_VK, j, zt);
#endif
            NT_STOREN(BWD_VK, scale * FEATURE_GRAD_V(BWD_VK, x) * d, j, dqrow, nt_q);
        }
    }
    NT_FENCE();
    (void)den, (void)eps, (void)zt, (void)nt_q;
}

/* global: (ceil(Nb / BWD_RT), B*H, M) of the key/value grid (`g` is the plan's kv_grid: its heads
 * are H_kv, its blocks the keys'). For the tokens s of block b: dv_s = dS_b^T k~_s from dS's
 * rows, then dk_s = phi'(k_s) (dS_b v_s + dz_b) from the transposed dS (tsum) and dS's z column. */
kernel void bwd_dkv_readout(global const STORE_T *restrict k, global const STORE_T *restrict v,
                            global const float *restrict dsum, global const float *restrict tsum,
                            global STORE_T *restrict dk, global STORE_T *restrict dv, const mhla_grid g_arg,
                            const float feature_eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p0 = (int)get_global_id(0) * BWD_RT, bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p0 >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const long kb = row_base(g, bh, DK), vb = row_base(g, bh, DV), ks = row_stride(g, DK), vs = row_stride(g, DV);
    int tok[BWD_RT];
    bwd_tokens(g, blk, p0, tok);
    const int nt_k = NT_OK(dk, BWD_VK), nt_v = NT_OK(dv, BWD_VV);
    (void)nt_k, (void)nt_v;
    PREFETCH_AHEAD(g, p0, BWD_RT, k + kb + tok[0] * ks, ks, DK);
    PREFETCH_AHEAD(g, p0, BWD_RT, v + vb + tok[0] * vs, vs, DV);
    {
        VEC(BWD_VV) acc[BWD_RT][BWD_NV];
        global const float *s = dsum + summary_s_offset(g.bh, blk, bh, 0);
        BWD_TILE_ZERO(acc, BWD_VV, BWD_NV);
        BWD_ROWS_PRODUCT(acc, s, DV, DK, BWD_VV, BWD_NV, feature(LOADN(1, i_, k + kb + tok[r_] * ks), feature_eps));
        for (int r = 0; r < BWD_RT && p0 + r < g.nb; ++r)
            #pragma unroll
            for (int j = 0; j < BWD_NV; ++j)
                NT_STOREN(BWD_VV, acc[r][j], j, dv + vb + tok[r] * vs, nt_v);
    }
    {
        VEC(BWD_VK) acc[BWD_RT][BWD_NK];
        global const float *st = bwd_tsum_rows(tsum, g, blk, bh);
        BWD_TILE_ZERO(acc, BWD_VK, BWD_NK);
        BWD_ROWS_PRODUCT(acc, st, DK, DV, BWD_VK, BWD_NK, LOADN(1, i_, v + vb + tok[r_] * vs));
        global const float *dz = dsum + summary_z_offset(g.bh, blk, bh);
        for (int r = 0; r < BWD_RT && p0 + r < g.nb; ++r) {
            global const STORE_T *krow = k + kb + tok[r] * ks;
            #pragma unroll
            for (int j = 0; j < BWD_NK; ++j) {
                const VEC(BWD_VK) x = LOADN(BWD_VK, j, krow);
                NT_STOREN(BWD_VK, (acc[r][j] + VLOADN(BWD_VK, j, dz)) * FEATURE_GRAD_V(BWD_VK, x), j,
                          dk + kb + tok[r] * ks, nt_k);
            }
        }
    }
    NT_FENCE();
}
