/* Backward of causal MHLA, chunk form: the per-token read-outs dq, dk, dv, the diagonal terms of
 * dMc, and dMc reduced in a fixed order (the formulas: kernels/backward_causal.cl). */
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

/* global: (C, H, entries), one token t per work-item. */
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
    float inv, r, gt[DV], acc[DK];
    bc_norm(invs, rs, (long)bh * g.n + t, &inv, &r);
    global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
    for (int e = 0; e < DV; ++e)
        gt[e] = LOADN(1, e, orow) * inv;
    global const float *p = P + bc_slot(kk, h, g.heads);
    for (int d = 0; d < DK; ++d) {
        float a = r * p[d * SC + DV];
        for (int e = 0; e < DV; ++e)
            a += p[d * SC + e] * gt[e];
        acc[d] = a;
    }
    for (int u = t0; u <= t; ++u) {
        const float w = mii * (bc_dot_v(v, g, bh, u, gt) + r);
        global const STORE_T *krow = k + row_offset(g, bh, u, DK);
        for (int d = 0; d < DK; ++d)
            acc[d] += w * feature(LOADN(1, d, krow), feature_eps);
    }
    global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
    global STORE_T *dqrow = dq + row_offset(g, bh, t, DK);
    for (int d = 0; d < DK; ++d)
        STOREN(1, acc[d] * scale * feature_grad(LOADN(1, d, qrow)), d, dqrow);
}

/* global: (C, H, entries), one token s per work-item. */
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
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1), j = ENT(kk, 2), ts = t0 + s;
    const float mjj = mix[(long)j * lda + j];
    float kt[DK], vt[DV], adk[DK], adv[DV], qt[DK];
    global const STORE_T *krow = k + row_offset(g, bh, ts, DK);
    global const STORE_T *vrow = v + row_offset(g, bh, ts, DV);
    for (int d = 0; d < DK; ++d)
        kt[d] = feature(LOADN(1, d, krow), feature_eps);
    for (int e = 0; e < DV; ++e)
        vt[e] = LOADN(1, e, vrow);
    global const float *p = dS + bc_slot(kk, h, g.heads);
    for (int d = 0; d < DK; ++d) {
        float a = p[d * SC + DV];
        for (int e = 0; e < DV; ++e)
            a += p[d * SC + e] * vt[e];
        adk[d] = a;
    }
    for (int e = 0; e < DV; ++e) {
        float a = 0.0f;
        for (int d = 0; d < DK; ++d)
            a += p[d * SC + e] * kt[d];
        adv[e] = a;
    }
    for (int u = ts; u < t0 + len; ++u) {
        float inv, r;
        bc_norm(invs, rs, (long)bh * g.n + u, &inv, &r);
        bc_qt(q, g, bh, u, feature_eps, scale, qt);
        global const STORE_T *orow = dout + row_offset(g, bh, u, DV);
        float gv = 0.0f, a = 0.0f;
        for (int e = 0; e < DV; ++e)
            gv += LOADN(1, e, orow) * vt[e];
        for (int d = 0; d < DK; ++d)
            a += qt[d] * kt[d];
        const float w = mjj * (gv * inv + r), wa = mjj * a * inv;
        for (int d = 0; d < DK; ++d)
            adk[d] += w * qt[d];
        for (int e = 0; e < DV; ++e)
            adv[e] += wa * LOADN(1, e, orow);
    }
    global STORE_T *dkrow = dk + row_offset(g, bh, ts, DK);
    global STORE_T *dvrow = dv + row_offset(g, bh, ts, DV);
    for (int d = 0; d < DK; ++d)
        STOREN(1, adk[d] * feature_grad(LOADN(1, d, krow)), d, dkrow);
    for (int e = 0; e < DV; ++e)
        STOREN(1, adv[e], e, dvrow);
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
    float qt[DK], gt[DV], acc = 0.0f;
    for (int t = t0; t < t0 + len; ++t) {
        float inv, r;
        bc_norm(invs, rs, (long)bh * g.n + t, &inv, &r);
        bc_qt(q, g, bh, t, feature_eps, scale, qt);
        global const STORE_T *orow = dout + row_offset(g, bh, t, DV);
        for (int e = 0; e < DV; ++e)
            gt[e] = LOADN(1, e, orow) * inv;
        for (int u = t0; u <= t; ++u)
            acc += bc_dot_k(k, g, bh, u, feature_eps, qt) * (bc_dot_v(v, g, bh, u, gt) + r);
    }
    diag[(long)kk * g.heads + h] = acc;
}

/* global: (BWD_WG * R, R), local (BWD_WG, 1): group (j, i) writes dmix[i*R + j]: for j < i the sum
 * over the entries of chunk index i of <G_k, S_{k's chunk j}> (all heads), for j == i the sum of
 * their diagonal terms, else 0. The entries are visited in table order, each slot's floats split
 * over the group and added as a tree: no atomics. */
kernel void bc_dmixing(global const int *restrict tab, global const float *restrict G, global const float *restrict S,
                       global const float *restrict diag, global float *restrict dmix, const int R, const int heads,
                       const int entries)
{
    local float part[BWD_WG];
    const int lid = (int)get_local_id(0), j = (int)get_group_id(0), i = (int)get_global_id(1);
    const int x = heads * DK * SC;
    float acc = 0.0f;
    for (int kk = 0; kk < entries && j <= i; ++kk) {
        if (ENT(kk, 2) != i)
            continue;
        if (j == i) {
            for (int h = lid; h < heads; h += BWD_WG)
                acc += diag[(long)kk * heads + h];
        } else {
            global const float *a = G + bc_slot(kk, 0, heads), *b = S + bc_slot(ENT(kk, 3) + j, 0, heads);
            for (int y = lid; y < x; y += BWD_WG)
                acc += a[y] * b[y];
        }
    }
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = BWD_WG / 2; w > 0; w >>= 1) {
        if (lid < w)
            part[lid] += part[lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        dmix[(long)i * R + j] = part[0];
}
