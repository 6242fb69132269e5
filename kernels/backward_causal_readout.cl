/* Backward of causal MHLA, chunk form: the per-token read-outs dq, dk, dv, the diagonal terms of
 * dMc, and dMc finished in a fixed order (the formulas: kernels/backward_causal.cl). */
#include "common.h"
#include "backward.h"

/* 1/den_t and dL/dden_t of token t (1 and 0 without a normalizer). */
void bc_norm(global const float *invs, global const float *rs, const long at, float *inv, float *r)
{
#if NORMALIZER == 0
    *inv = invs[at];
    *r = rs[at];
#else
    (void)invs, (void)rs, (void)at;
    *inv = 1.0f;
    *r = 0.0f;
#endif
}

/* global: (C, H, entries), one token t per work-item; rows as vectors of BWD_VK / BWD_VV. */
kernel void bc_dq(global const STORE_T *restrict q, global const STORE_T *restrict k,
                  global const STORE_T *restrict v, global const STORE_T *restrict dout,
                  global const float *restrict mix, const int lda, global const int *restrict tab,
                  global const float *restrict P, global const float *restrict invs, global const float *restrict rs,
                  global STORE_T *restrict dq, const mhla_grid g_arg, const float feature_eps, const float scale,
                  const int entries)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int s = (int)get_global_id(0), h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (h >= g.heads || kk >= entries || s >= ENT(kk, 1))
        return;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), t = t0 + s, i = ENT(kk, 2);
    const float mii = mix[(long)i * lda + i];
    float inv, r, a0[DK];
    bc_norm(invs, rs, (long)bh * g.n + t, &inv, &r);
    global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
    VEC(BWD_VV) gt[BWD_NV];
    for (int j = 0; j < BWD_NV; ++j)
        gt[j] = LOADN(BWD_VV, j, orow) * inv;
    global const float *p = P + bc_slot(kk, h, g.heads);
    for (int d = 0; d < DK; ++d) { /* P_i g_t + r_t zP_i */
        VEC(BWD_VV) a = (VEC(BWD_VV))(0.0f);
        for (int j = 0; j < BWD_NV; ++j)
            a += VLOADN(BWD_VV, j, p + d * SC) * gt[j];
        a0[d] = r * p[d * SC + DV] + BWD_HSUM(BWD_VV, a);
    }
    VEC(BWD_VK) acc[BWD_NK];
    for (int j = 0; j < BWD_NK; ++j)
        acc[j] = VLOADN(BWD_VK, j, a0);
    for (int u = t0; u <= t; ++u) {
        global const STORE_T *vrow = v + row_offset(g, bh, u, DV);
        global const STORE_T *krow = k + row_offset(g, bh, u, DK);
        VEC(BWD_VV) gv = (VEC(BWD_VV))(0.0f);
        for (int j = 0; j < BWD_NV; ++j)
            gv += LOADN(BWD_VV, j, vrow) * gt[j];
        const float w = mii * (BWD_HSUM(BWD_VV, gv) + r);
        for (int j = 0; j < BWD_NK; ++j)
            acc[j] += w * FEATURE_V(BWD_VK, LOADN(BWD_VK, j, krow), feature_eps);
    }
    global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
    global STORE_T *dqrow = dq + row_offset(g, bh, t, DK);
    for (int j = 0; j < BWD_NK; ++j)
        STOREN(BWD_VK, acc[j] * scale * FEATURE_GRAD_V(BWD_VK, LOADN(BWD_VK, j, qrow)), j, dqrow);
}

/* global: (C, H, entries), one token s per work-item; rows as vectors of BWD_VK / BWD_VV. */
kernel void bc_dkv(global const STORE_T *restrict q, global const STORE_T *restrict k,
                   global const STORE_T *restrict v, global const STORE_T *restrict dout,
                   global const float *restrict mix, const int lda, global const int *restrict tab,
                   global const float *restrict dS, global const float *restrict invs, global const float *restrict rs,
                   global STORE_T *restrict dk, global STORE_T *restrict dv, const mhla_grid g_arg,
                   const float feature_eps, const float scale, const int entries)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int s = (int)get_global_id(0), h = (int)get_global_id(1), kk = (int)get_global_id(2);
    if (h >= g.heads || kk >= entries || s >= ENT(kk, 1))
        return;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1), j0 = ENT(kk, 2), ts = t0 + s;
    const float mjj = mix[(long)j0 * lda + j0];
    float kt[DK], a0[DK];
    VEC(BWD_VK) kv[BWD_NK], adk[BWD_NK];
    VEC(BWD_VV) vt[BWD_NV], adv[BWD_NV];
    global const STORE_T *krow = k + row_offset(g, bh, ts, DK);
    global const STORE_T *vrow = v + row_offset(g, bh, ts, DV);
    for (int j = 0; j < BWD_NK; ++j) {
        kv[j] = FEATURE_V(BWD_VK, LOADN(BWD_VK, j, krow), feature_eps);
        VSTOREN(BWD_VK, kv[j], j, kt);
    }
    for (int j = 0; j < BWD_NV; ++j) {
        vt[j] = LOADN(BWD_VV, j, vrow);
        adv[j] = (VEC(BWD_VV))(0.0f);
    }
    global const float *p = dS + bc_slot(kk, h, g.heads);
    for (int d = 0; d < DK; ++d) { /* dS_j v_s + dz_j, and dS_j^T k~_s */
        VEC(BWD_VV) a = (VEC(BWD_VV))(0.0f);
        for (int j = 0; j < BWD_NV; ++j) {
            const VEC(BWD_VV) row = VLOADN(BWD_VV, j, p + d * SC);
            a += row * vt[j];
            adv[j] += kt[d] * row;
        }
        a0[d] = p[d * SC + DV] + BWD_HSUM(BWD_VV, a);
    }
    for (int j = 0; j < BWD_NK; ++j)
        adk[j] = VLOADN(BWD_VK, j, a0);
    for (int u = ts; u < t0 + len; ++u) {
        float inv, r;
        bc_norm(invs, rs, (long)bh * g.n + u, &inv, &r);
        global const STORE_T *orow = dout + row_offset(g, bh, u, DV);
        global const STORE_T *qrow = q + row_offset(g, bh, u, DK);
        VEC(BWD_VK) qv[BWD_NK], av = (VEC(BWD_VK))(0.0f);
        VEC(BWD_VV) ov[BWD_NV], gv = (VEC(BWD_VV))(0.0f);
        for (int j = 0; j < BWD_NV; ++j) {
            ov[j] = LOADN(BWD_VV, j, orow);
            gv += ov[j] * vt[j];
        }
        for (int j = 0; j < BWD_NK; ++j) {
            qv[j] = scale * FEATURE_V(BWD_VK, LOADN(BWD_VK, j, qrow), feature_eps);
            av += qv[j] * kv[j];
        }
        const float w = mjj * (BWD_HSUM(BWD_VV, gv) * inv + r), wa = mjj * BWD_HSUM(BWD_VK, av) * inv;
        for (int j = 0; j < BWD_NK; ++j)
            adk[j] += w * qv[j];
        for (int j = 0; j < BWD_NV; ++j)
            adv[j] += wa * ov[j];
    }
    global STORE_T *dkrow = dk + row_offset(g, bh, ts, DK);
    global STORE_T *dvrow = dv + row_offset(g, bh, ts, DV);
    for (int j = 0; j < BWD_NK; ++j)
        STOREN(BWD_VK, adk[j] * FEATURE_GRAD_V(BWD_VK, LOADN(BWD_VK, j, krow)), j, dkrow);
    for (int j = 0; j < BWD_NV; ++j)
        STOREN(BWD_VV, adv[j], j, dvrow);
}

/* global: (H, entries). diag[kk][h] = sum_{t in chunk, s <= t} (q~_t . k~_s)(g_t . v_s + r_t). */
kernel void bc_diag(global const STORE_T *restrict q, global const STORE_T *restrict k,
                    global const STORE_T *restrict v, global const STORE_T *restrict dout,
                    global const int *restrict tab, global const float *restrict invs,
                    global const float *restrict rs, global float *restrict diag, const mhla_grid g_arg,
                    const float feature_eps, const float scale, const int entries)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int h = (int)get_global_id(0), kk = (int)get_global_id(1);
    if (h >= g.heads || kk >= entries)
        return;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1);
    float acc = 0.0f;
    for (int t = t0; t < t0 + len; ++t) {
        float inv, r;
        bc_norm(invs, rs, (long)bh * g.n + t, &inv, &r);
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
    diag[(long)kk * g.heads + h] = acc;
}

/* global: (R, R). dMc of a causal plan, finished: below the diagonal, where the sequences' tiled
 * products <G_i, S_j> (bwd_dmixing_part/_reduce, rows < covered) were written, kept; rows past the
 * longest sequence's chunks 0; the diagonal the sum, in table order, of the entries of chunk index
 * i of their heads' diagonal terms (bc_diag); 0 above it. */
kernel void bc_dmix_finish(global const int *restrict tab, global const float *restrict diag,
                           global float *restrict dmix, const int R, const int covered, const int heads,
                           const int entries)
{
    const int j = (int)get_global_id(0), i = (int)get_global_id(1);
    if (j >= R || i >= R)
        return;
    float acc = 0.0f;
    if (j < i) {
        acc = i < covered ? dmix[(long)i * R + j] : 0.0f;
    } else if (j == i) {
        for (int kk = 0; kk < entries; ++kk)
            if (ENT(kk, 2) == i)
                for (int h = 0; h < heads; ++h)
                    acc += diag[(long)kk * heads + h];
    }
    dmix[(long)i * R + j] = acc;
}
