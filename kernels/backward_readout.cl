/* Backward of non-causal MHLA, the per-token read-outs (SPEC.md "Backward"):
 *   dq_t = scale phi'(q_t) * (S~_i g_t + r_t z~_i [+ R_{i,p} z_i, official]),   g_t = dO_t / den_t
 *   dk_s = phi'(k_s) * (dS_b v_s + dz_b),  dv_s = dS_b^T k~_s                      (s in block b)
 * with S~ the forward's mixed summaries and dS = Mc^T G the mixed gradient summaries. */
#include "common.h"
#include "backward.h"

/* global: (Nb, B*H, M), one token per work-item. */
kernel void bwd_dq(global const STORE_T *restrict q, global const STORE_T *restrict dout,
                   global const float *restrict mixed, global const float *restrict summary,
                   global const float *restrict invs, global const float *restrict rs,
                   global const float *restrict rmix,
                   global STORE_T *restrict dq, const mhla_grid g_arg, const float scale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const int t = token_of(g, blk, p);
    global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
    global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
    global STORE_T *dqrow = dq + row_offset(g, bh, t, DK);
    global const float *s = mixed + summary_s_offset(g.bh, blk, bh, 0);
    global const float *zmix = mixed + summary_z_offset(g.bh, blk, bh);
    global const float *zown = summary + summary_z_offset(g.bh, blk, bh);
    const long at = ((long)blk * g.bh + bh) * g.nb + p;
#if NORMALIZER == 2
    const float inv = 1.0f, r = 0.0f, rz = 0.0f;
    (void)invs, (void)rs, (void)rmix, (void)zmix, (void)zown, (void)at;
#elif NORMALIZER == 0
    const float inv = invs[at], r = rs[at], rz = 0.0f;
    (void)rmix, (void)zown;
#else
    const float inv = invs[at], r = 0.0f, rz = rmix[at];
    (void)rs, (void)zmix;
#endif
    float gt[DV];
    for (int e = 0; e < DV; ++e)
        gt[e] = LOADN(1, e, orow) * inv;
    for (int d = 0; d < DK; ++d) {
        float acc = 0.0f;
        for (int e = 0; e < DV; ++e)
            acc += s[d * DV + e] * gt[e];
#if NORMALIZER == 0
        acc += r * zmix[d];
#elif NORMALIZER == 1
        acc += rz * zown[d];
#endif
        STOREN(1, acc * scale * feature_grad(LOADN(1, d, qrow)), d, dqrow);
    }
}

/* global: (Nb, B*H, M), one token per work-item. */
kernel void bwd_dkv(global const STORE_T *restrict k, global const STORE_T *restrict v,
                    global const float *restrict dsum, global STORE_T *restrict dk, global STORE_T *restrict dv,
                    const mhla_grid g_arg, const float feature_eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const int t = token_of(g, blk, p);
    global const STORE_T *krow = k + row_offset(g, bh, t, DK);
    global const STORE_T *vrow = v + row_offset(g, bh, t, DV);
    global const float *s = dsum + summary_s_offset(g.bh, blk, bh, 0);
    global const float *z = dsum + summary_z_offset(g.bh, blk, bh);
    float kt[DK], vt[DV];
    for (int d = 0; d < DK; ++d)
        kt[d] = feature(LOADN(1, d, krow), feature_eps);
    for (int e = 0; e < DV; ++e)
        vt[e] = LOADN(1, e, vrow);
    global STORE_T *dkrow = dk + row_offset(g, bh, t, DK);
    for (int d = 0; d < DK; ++d) {
        float acc = z[d];
        for (int e = 0; e < DV; ++e)
            acc += s[d * DV + e] * vt[e];
        STOREN(1, acc * feature_grad(LOADN(1, d, krow)), d, dkrow);
    }
    global STORE_T *dvrow = dv + row_offset(g, bh, t, DV);
    for (int e = 0; e < DV; ++e) {
        float acc = 0.0f;
        for (int d = 0; d < DK; ++d)
            acc += s[d * DV + e] * kt[d];
        STOREN(1, acc, e, dvrow);
    }
}
