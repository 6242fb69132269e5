/* Backward of non-causal MHLA, the per-token read-outs (SPEC.md "Backward"):
 *   dq_t = scale phi'(q_t) * (S~_i g_t + r_t z~_i [+ R_{i,p} z_i, official]),   g_t = dO_t / den_t
 *   dk_s = phi'(k_s) * (dS_b v_s + dz_b),  dv_s = dS_b^T k~_s                      (s in block b)
 * with S~ the forward's mixed summaries and dS = Mc^T G the mixed gradient summaries. The products
 * with the summaries are the forward's read-out kernel's (kernels/output.cl, built with the head
 * dimensions swapped for S x): these kernels finish them per token. */
#include "common.h"
#include "backward.h"

/* global: (Nb, B*H, M), one token per work-item. dq holds u_t = S~_i dO_t (the read-out kernel's);
 * it becomes scale phi'(q) (u inv + r z~_i [paper] + R z_i [official]). */
kernel void bwd_dq_finish(global const STORE_T *restrict q, global STORE_T *restrict dq,
                          global const float *restrict mixed, global const float *restrict summary,
                          global const float *restrict invs, global const float *restrict rs,
                          global const float *restrict rmix, const mhla_grid g_arg, const float scale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const int t = token_of(g, blk, p);
    global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
    global STORE_T *dqrow = dq + row_offset(g, bh, t, DK);
    const long at = ((long)blk * g.bh + bh) * g.nb + p;
#if NORMALIZER == 2
    const float inv = 1.0f, rz = 0.0f;
    global const float *z = mixed;
    (void)invs, (void)rs, (void)rmix, (void)summary, (void)at;
#elif NORMALIZER == 0
    const float inv = invs[at], rz = rs[at];
    global const float *z = mixed + summary_z_offset(g.bh, blk, bh);
    (void)rmix, (void)summary;
#else
    const float inv = invs[at], rz = rmix[at];
    global const float *z = summary + summary_z_offset(g.bh, blk, bh);
    (void)rs, (void)mixed;
#endif
    for (int d = 0; d < DK; ++d) {
        const float acc = LOADN(1, d, dqrow) * inv + (NORMALIZER == 2 ? 0.0f : rz * z[min(d, DK - 1)]);
        STOREN(1, acc * scale * feature_grad(LOADN(1, d, qrow)), d, dqrow);
    }
}

/* global: (Nb, B*H, M), one token per work-item. dk holds dS_b v_s (the read-out kernel's); it
 * becomes phi'(k) (dS_b v_s + dz_b). */
kernel void bwd_dk_finish(global const STORE_T *restrict k, global STORE_T *restrict dk,
                          global const float *restrict dsum, const mhla_grid g_arg)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int p = (int)get_global_id(0), bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (p >= g.nb || bh >= g.bh || blk >= g.m) /* the launch is rounded up to whole groups */
        return;
    const int t = token_of(g, blk, p);
    global const STORE_T *krow = k + row_offset(g, bh, t, DK);
    global STORE_T *dkrow = dk + row_offset(g, bh, t, DK);
    global const float *z = dsum + summary_z_offset(g.bh, blk, bh);
    for (int d = 0; d < DK; ++d)
        STOREN(1, (LOADN(1, d, dkrow) + z[d]) * feature_grad(LOADN(1, d, krow)), d, dkrow);
}
