/* The causal backward's read-outs on GPUs (the GPU rows' bc_sq): dq, dk and dv of a tile of BC_SQ
 * tokens of one chunk, as causal_tiled.cl arranges the forward's read-out, each the product of the
 * tile's rows x_r with a slot plus the masked intra-chunk pairs (the formulas:
 * kernels/backward_causal.cl; the operands: backward_causal_readout.cl, the CPU form):
 *   dq~_t: x = g_t,   slot P_i^T (+ r_t zP_i), y = v_s,  bias r_t (the row's), w = k~_s, pairs s <= t
 *   dk~_s: x = v_s,   slot dS_j^T (+ dz_j),    y = g_t,  bias r_t (the pair's), w = q~_t, pairs t >= s
 *          (dS_j^T read across dS_j's rows: no transposed copy, bc_transpose, on these rows)
 *   dv_s:  x = k~_s,  slot dS_j,               y = q~_t,                      w = g_t,  pairs t >= s
 * with Mc[i,i] folded into each score (dk: into the pairs' sum, once dMc[i,i]'s share of the
 * group, sum_s k~_s . sum_{t >= s} A'[t][s] q~_t, is taken from it: bc_diag's term without its
 * second score matrix, in tiles_per_chunk parts per (chunk, head)); and, for the paper normalizer,
 * the per-token scalars the others read (backward_causal.cl's bc_scalars): the forward's numerator
 * and denominator again,
 *   [num_t | den_t]: x = q~_t, slot [P_i | zP_i] (P^T read across), y = k~_s, w = [v_s | 1], pairs s <= t,
 * then 1/(den_t + eps) and dL/dden_t = -(dO_t . num_t) / (den_t + eps)^2. The tile's x rows sit in
 * local memory transposed (one float4 read serves 4 rows); the slot's rows go through local memory
 * BC_BK at a time; the pairs take
 * BC_BK tokens at a time (y transposed, w as stored): each work-item computes a 4-row x 4-token
 * tile of scores, the masked ones replaced by zero, the tile goes to local memory transposed, and
 * each work-item adds it times W into 4 rows x 4 columns per column tile it owns. Masked pairs on
 * the diagonal tile are skipped, never added as zero times their w. */
#include "common.h"
#include "backward.h"
#include "tiled.h"

#ifndef BC_SQ
#define BC_SQ 32 /* rows (tokens) per group, a multiple of 4 */
#endif
#ifndef BC_BK
#define BC_BK 16 /* tokens of the pairs, and rows of the slot, per local tile (a multiple of 4) */
#endif
#ifndef BC_ONE
#define BC_ONE 0 /* 1: dq, dk and dv in one kernel, bc_dqkv_tiled (bct_fuse) */
#endif
#define BC_RQ (BC_SQ / 4) /* row quads: work-items along the rows */
#define BC_CQ (BC_BK / 4) /* token quads of a pair tile: work-items along a row */
#define BC_WG (BC_RQ * BC_CQ)
#define BC_LQ (BC_RQ + 1) /* float4 per transposed x row, padded (the copy's stores spread) */
#define BC_LK (BC_CQ + 1) /* float4 per transposed y row, padded */
#define KIND_DQ 0
#define KIND_DK 1
#define KIND_DV 2
#define KIND_SC 3 /* the scalars */
/* The widths of a kind: x and y rows (the scores' dimensions), w rows and the output (DW, padded
 * to whole float4: the pad is zero), and the stride of the slot's rows. */
#define BC_DX(kind) ((kind) == KIND_DV || (kind) == KIND_SC ? DK : DV)
#define BC_DW(kind) ((kind) == KIND_DV ? DV : (kind) == KIND_SC ? DV + 1 : DK)
#define BC_WQ(kind) ((BC_DW(kind) + 3) / 4)
#define BC_NV(kind) ((BC_WQ(kind) + BC_CQ - 1) / BC_CQ) /* column quads per work-item */
/* Quads of a row of wt: every work-item's, those past DW zero, so that every work-item updates all
 * of its accumulators. With only some work-items of the group owning a last column quad, PoCL 3.1
 * (pthread) gave that quad wrong values once the slot took two tiles of rows (dv at Dk 16, Dv 12 in
 * groups of 8 x 8); rusticl and Oclgrind did not. */
#define BC_WQP(kind) (BC_NV(kind) * BC_CQ)
#define BC_NV_MAX ((((DK > DV + 1 ? DK : DV + 1) + 3) / 4 + BC_CQ - 1) / BC_CQ)

/* Element p of token t's row of each operand: g_t = dO_t / den_t, v, k~ and q~ (scale folded in). */
__attribute__((always_inline)) inline float bcc_g(global const STORE_T *dout, global const float *invs,
                                                  const mhla_grid g, const int bh, const int t, const int p)
{
    return LOADN(1, row_offset(g, bh, t, DV) + p, dout) * bct_inv(invs, (long)bh * g.n + t);
}

/* x (which 0), y (1) or w (2) of `kind` at element p of token t. */
__attribute__((always_inline)) inline float bcc_operand(const int kind, const int which, global const STORE_T *q,
                                                        global const STORE_T *k, global const STORE_T *v,
                                                        global const STORE_T *dout, global const float *invs,
                                                        const mhla_grid g, const int bh, const int t, const int p,
                                                        const float feature_eps, const float scale)
{
    /* 0 g, 1 v, 2 k~, 3 q~: the table above, row by row (the scalars' w: v, its last column 1 by
     * the caller) */
    const int op = kind == KIND_DQ ? (which == 0 ? 0 : which == 1 ? 1 : 2)
                   : kind == KIND_DK ? (which == 0 ? 1 : which == 1 ? 0 : 3)
                   : kind == KIND_DV ? (which == 0 ? 2 : which == 1 ? 3 : 0)
                                     : (which == 0 ? 3 : which == 1 ? 2 : 1);
    if (op == 0)
        return bcc_g(dout, invs, g, bh, t, p);
    if (op == 1)
        return LOADN(1, row_offset(g, bh, t, DV) + p, v);
    if (op == 2)
        return feature(LOADN(1, row_offset(g, bh, t, DK) + p, k), feature_eps);
    return scale * feature(LOADN(1, row_offset(g, bh, t, DK) + p, q), feature_eps);
}

/* acc[j] += a b_j over the work-item's column quads cq + BC_CQ j, j < nv (the same for every
 * work-item), of a row of wt. */
__attribute__((always_inline)) inline void bcc_mad_row(float4 acc[BC_NV_MAX][4], const float4 a, local const float4 *row,
                                                       const int cq, const int nv)
{
    #pragma unroll
    for (int j = 0; j < BC_NV_MAX; ++j)
        if (j < nv)
            tiled_mad4x4(acc[j], a, row[cq + BC_CQ * j]);
}

/* acc += the tile's x rows times the slot, BC_BK of its rows at a time through wt (the scalars':
 * P^T's columns, z its row DV), and the paper normalizer's z terms (dq: r_t zP_i; dk: dz_j). */
__attribute__((always_inline)) inline void bcc_slot(const int kind, global const float *slot, const int lid,
                                                    const int rq, const int cq, local float4 *xt, local float4 *wt,
                                                    local float *xb, float4 acc[BC_NV_MAX][4])
{
    const int DX = BC_DX(kind), DW = BC_DW(kind), WQP = BC_WQP(kind), NV = BC_NV(kind);
    const int mstride = kind == KIND_DV ? SC : DK; /* floats between the slot's rows */
    for (int pb = 0; pb < DX; pb += BC_BK) {
        if (kind == KIND_SC || kind == KIND_DK) {
            /* the scalars: row d of P, read across P^T's rows of Dk; dk: row d of dS^T, read across
             * dS's rows of SC (no transposed copy) */
            const int across = kind == KIND_SC ? DK : SC;
            for (int e = lid; e < BC_BK * WQP; e += BC_WG) {
                const int rr = e / WQP, cc = 4 * (e - rr * WQP), d = pb + rr;
                global const float *col = slot + d;
                wt[e] = d < DX ? (float4)(cc < DW ? col[(long)cc * across] : 0.0f,
                                          cc + 1 < DW ? col[(long)(cc + 1) * across] : 0.0f,
                                          cc + 2 < DW ? col[(long)(cc + 2) * across] : 0.0f,
                                          cc + 3 < DW ? col[(long)(cc + 3) * across] : 0.0f)
                               : (float4)(0.0f);
            }
        } else {
            for (int e = lid; e < BC_BK * WQP; e += BC_WG) {
                const int rr = e / WQP, cc = 4 * (e - rr * WQP);
                wt[e] = pb + rr < DX ? tiled_quad_f32(slot + (long)(pb + rr) * mstride, cc, DW, 0) : (float4)(0.0f);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int rr = 0; rr < BC_BK && pb + rr < DX; ++rr)
            bcc_mad_row(acc, xt[(pb + rr) * BC_LQ + rq], wt + rr * WQP, cq, NV);
        barrier(CLK_LOCAL_MEM_FENCE); /* wt is overwritten next */
    }
#if NORMALIZER == 0
    if (kind == KIND_DQ || kind == KIND_DK) { /* dq: r_t zP_i (P^T's z row); dk: dz_j (dS's z column) */
        const float4 w = kind == KIND_DQ ? vload4(rq, xb) : (float4)(1.0f);
        #pragma unroll
        for (int j = 0; j < BC_NV_MAX; ++j) {
            const int cc = 4 * (cq + BC_CQ * j);
            global const float *z = slot + DV; /* dk: element DV of dS's rows cc.. */
            if (j < NV) /* (zeros past Dk) */
                tiled_mad4x4(acc[j], w,
                             kind == KIND_DQ ? tiled_quad_f32(slot + (long)DV * DK, cc, DK, 0)
                                             : (float4)(cc < DK ? z[(long)cc * SC] : 0.0f,
                                                        cc + 1 < DK ? z[(long)(cc + 1) * SC] : 0.0f,
                                                        cc + 2 < DK ? z[(long)(cc + 2) * SC] : 0.0f,
                                                        cc + 3 < DK ? z[(long)(cc + 3) * SC] : 0.0f));
        }
    }
#endif
}

/* The read-out of `kind` (a constant: each kernel below is this function specialized; its pointers
 * are not restrict-qualified, as backward_causal_readout.cl's, for Oclgrind). Local arrays:
 * xt[DX][BC_LQ] and yt[DX][BC_LK] float4 (transposed rows), wt[BC_BK][WQP] float4 (w rows, or the
 * slot's rows), pt[BC_BK][BC_LQ] float4 (the scores, transposed), xb[BC_SQ] (dq: each row's r_t),
 * cb[BC_BK] (dk: each pair token's r_t). global: (BC_WG, H, entries * tiles_per_chunk), local
 * (BC_WG, 1, 1); work-item (token quad cq fastest, row quad rq): rows 4 rq.. of the group's, pair
 * tokens 4 cq.. of each tile, column quads cq + BC_CQ j. Rows past the chunk compute on zeros and
 * store nothing. */
__attribute__((always_inline)) inline void
bcc_readout(const int kind, global const STORE_T *q, global const STORE_T *k, global const STORE_T *v,
            global const STORE_T *dout, global const float *mix, const int lda, global const int *tab,
            global const float *slots, global const float *invs, global const float *rs, global STORE_T *out,
            global float *inv_out, global float *r_out, const mhla_grid g, const float feature_eps, const float scale,
            const float eps, const int tiles_per_chunk, global float *diag, const int want_diag, local float4 *xt,
            local float4 *yt, local float4 *wt, local float4 *pt, local float *xb, local float *cb, local float *red)
{
    const int DX = BC_DX(kind), DW = BC_DW(kind), WQ = BC_WQ(kind), WQP = BC_WQP(kind), NV = BC_NV(kind);
    const int lid = (int)get_local_id(0), cq = lid % BC_CQ, rq = lid / BC_CQ;
    const int kk = (int)get_group_id(2) / tiles_per_chunk, h = (int)get_group_id(1);
    const int tile = (int)get_group_id(2) - kk * tiles_per_chunk, p0 = tile * BC_SQ;
    const int len = ENT(kk, 1);
    global float *diag_at = kind == KIND_DK ? diag + ((long)kk * g.heads + h) * tiles_per_chunk + tile : diag;
    if (p0 >= len) { /* the whole group: a tile past the end of a short chunk */
        if (kind == KIND_DK && want_diag && lid == 0)
            *diag_at = 0.0f;
        return;
    }
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), i = ENT(kk, 2), nq = min(BC_SQ, len - p0);
    const float mii = mix[(long)i * lda + i];
    global const float *slot = slots + bc_slot(kk, h, g.heads);

    /* The tile's x rows, transposed; neighbouring work-items, neighbouring elements of a row. */
    for (int e = lid; e < BC_SQ * DX; e += BC_WG) {
        const int r = e / DX, p = e - r * DX;
        ((local float *)xt)[p * 4 * BC_LQ + r] =
            r < nq ? bcc_operand(kind, 0, q, k, v, dout, invs, g, bh, t0 + p0 + r, p, feature_eps, scale) : 0.0f;
    }
    if (kind == KIND_DQ)
        for (int r = lid; r < BC_SQ; r += BC_WG)
            xb[r] = r < nq ? bct_r(rs, (long)bh * g.n + t0 + p0 + r) : 0.0f;
    float4 acc[BC_NV_MAX][4];
    #pragma unroll
    for (int j = 0; j < BC_NV_MAX; ++j)
        #pragma unroll
        for (int r = 0; r < 4; ++r)
            acc[j][r] = (float4)(0.0f);
    barrier(CLK_LOCAL_MEM_FENCE);

    if (kind != KIND_DK)
        bcc_slot(kind, slot, lid, rq, cq, xt, wt, xb, acc);

    /* The pairs inside the chunk: dq over tokens 0 .. p0 + nq - 1, dk and dv over p0 .. len - 1. */
    const int x0 = p0 + 4 * rq; /* the work-item's first row, in the chunk */
    const int before = kind == KIND_DQ || kind == KIND_SC; /* pairs s <= t (else t >= s) */
    const int cstart = before ? 0 : p0, cend = before ? p0 + nq : len;
    for (int kb = cstart; kb < cend; kb += BC_BK) {
        const int nk = min(BC_BK, cend - kb);
        for (int e = lid; e < BC_BK * DX; e += BC_WG) {
            const int c = e / DX, p = e - c * DX;
            ((local float *)yt)[p * 4 * BC_LK + c] =
                c < nk ? bcc_operand(kind, 1, q, k, v, dout, invs, g, bh, t0 + kb + c, p, feature_eps, scale) : 0.0f;
        }
        for (int e = lid; e < BC_BK * 4 * WQP; e += BC_WG) {
            const int c = e / (4 * WQP), o = e - c * 4 * WQP;
            ((local float *)wt)[e] = c >= nk || o >= DW ? 0.0f
                                     : kind == KIND_SC && o == DV
                                         ? 1.0f
                                         : bcc_operand(kind, 2, q, k, v, dout, invs, g, bh, t0 + kb + c, o, feature_eps,
                                                       scale);
        }
        if (kind == KIND_DK)
            for (int c = lid; c < BC_BK; c += BC_WG)
                cb[c] = c < nk ? bct_r(rs, (long)bh * g.n + t0 + kb + c) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);

        float4 sc[4];
        #pragma unroll
        for (int r = 0; r < 4; ++r)
            sc[r] = (float4)(0.0f);
        #pragma unroll 8
        for (int p = 0; p < DX; ++p)
            tiled_mad4x4(sc, xt[p * BC_LQ + rq], yt[p * BC_LK + cq]);
        /* Row x and pair token c: dq sees c <= x, dk and dv c >= x. A masked score is replaced (not
         * multiplied) by zero. */
        const int key = kb + 4 * cq;
        const float pm = kind == KIND_DK ? 1.0f : mii; /* dk: Mc[i,i] once, after dMc's diagonal term */
        const float4 bias = kind == KIND_DQ ? vload4(rq, xb) : (float4)(0.0f);
        const float4 cbias = kind == KIND_DK ? vload4(cq, cb) : (float4)(0.0f);
        const float sb[4] = {bias.x, bias.y, bias.z, bias.w};
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int x = x0 + r;
            const float4 s = sc[r] + sb[r] + cbias;
            float4 pv;
            if (before)
                pv = (float4)(key <= x ? pm * s.s0 : 0.0f, key + 1 <= x ? pm * s.s1 : 0.0f,
                              key + 2 <= x ? pm * s.s2 : 0.0f, key + 3 <= x ? pm * s.s3 : 0.0f);
            else
                pv = (float4)(key >= x ? pm * s.s0 : 0.0f, key + 1 >= x ? pm * s.s1 : 0.0f,
                              key + 2 >= x ? pm * s.s2 : 0.0f, key + 3 >= x ? pm * s.s3 : 0.0f);
            tiled_put_column(pt, BC_LQ, 4 * cq, 4 * rq + r, pv);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* P W. A masked pair is skipped for its row, not added as zero times its w: only on the
         * diagonal tile. */
        const int all = before ? kb + BC_BK - 1 <= x0 : kb >= x0 + 3;
        if (all) {
            #pragma unroll 4
            for (int s = 0; s < BC_BK; ++s)
                bcc_mad_row(acc, pt[s * BC_LQ + rq], wt + s * WQP, cq, NV);
        } else {
            /* the tokens visible to at least one of the four rows */
            const int s0 = before ? 0 : max(0, x0 - kb), s1 = before ? min(BC_BK, x0 + 4 - kb) : BC_BK;
            for (int s = s0; s < s1; ++s) {
                const int ks = kb + s;
                const float4 a = pt[s * BC_LQ + rq];
                #pragma unroll
                for (int j = 0; j < BC_NV_MAX; ++j)
                    if (j < NV) {
                        const float4 b = wt[s * WQP + cq + BC_CQ * j];
                        if (before ? ks <= x0 : ks >= x0)
                            acc[j][0] += a.x * b;
                        if (before ? ks <= x0 + 1 : ks >= x0 + 1)
                            acc[j][1] += a.y * b;
                        if (before ? ks <= x0 + 2 : ks >= x0 + 2)
                            acc[j][2] += a.z * b;
                        if (before ? ks <= x0 + 3 : ks >= x0 + 3)
                            acc[j][3] += a.w * b;
                    }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* yt, wt, pt and cb are overwritten next */
    }

    if (kind == KIND_DK) {
        /* acc holds the pairs' sum_{t >= s} A'[t][s] q~_t alone: dMc[i,i]'s share of the group,
         * sum_s k~_s . acc_s = sum_{s <= t} A'[t][s] (q~_t . k~_s) (bc_diag's sum, without a second
         * score matrix), each work-item's rows and columns, then the work-items' in order */
        if (want_diag) {
            float part = 0.0f;
            for (int r = 0; r < 4; ++r) {
                const int row = 4 * rq + r;
                if (row >= nq)
                    break;
                global const STORE_T *krow = k + row_offset(g, bh, t0 + p0 + row, DK);
                #pragma unroll
                for (int j = 0; j < BC_NV_MAX; ++j) {
                    const int cc = 4 * (cq + BC_CQ * j);
                    if (j < NV && cc < DK) /* (acc is 0 past Dk: w's pad; k~ of the pad is finite) */
                        part += dot(acc[j][r], FEATURE_V(4, tiled_quad(krow, cc, DK, 0), feature_eps));
                }
            }
            local float *parts = (local float *)pt; /* free after the pairs */
            parts[lid] = part;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid == 0) {
                float sum = 0.0f;
                for (int w = 0; w < BC_WG; ++w)
                    sum += parts[w];
                *diag_at = sum;
            }
        }
        #pragma unroll
        for (int j = 0; j < BC_NV_MAX; ++j)
            #pragma unroll
            for (int r = 0; r < 4; ++r)
                acc[j][r] *= mii;
        bcc_slot(kind, slot, lid, rq, cq, xt, wt, xb, acc);
    }

    if (kind == KIND_SC) {
        /* dO_t . num_t: each work-item's columns, then its row's parts in order; den_t from the
         * work-item that owns column DV */
        for (int r = 0; r < 4; ++r) {
            const int row = 4 * rq + r;
            global const STORE_T *orow = dout + row_offset(g, bh, t0 + p0 + min(row, nq - 1), DV);
            float od = 0.0f;
            #pragma unroll
            for (int j = 0; j < BC_NV_MAX; ++j) {
                const int cc = 4 * (cq + BC_CQ * j);
                if (j < NV) {
                    const float4 a = acc[j][r], o = tiled_quad(orow, cc, DV, 0); /* 0 past Dv */
                    od += (a.x * o.x + a.y * o.y) + (a.z * o.z + a.w * o.w);
                }
            }
            red[row * BC_CQ + cq] = od;
            if (cq == (DV / 4) % BC_CQ) { /* the work-item that owns column DV */
                const float4 a = acc[(DV / 4) / BC_CQ][r];
                xb[row] = DV % 4 == 0 ? a.x : DV % 4 == 1 ? a.y : DV % 4 == 2 ? a.z : a.w;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int row = lid; row < nq; row += BC_WG) {
            float od = 0.0f;
            for (int c = 0; c < BC_CQ; ++c)
                od += red[row * BC_CQ + c];
            const float inv = 1.0f / (xb[row] + eps);
            const long at = (long)bh * g.n + t0 + p0 + row;
            inv_out[at] = inv;
            r_out[at] = -od * inv * inv;
        }
        return;
    }
    (void)eps, (void)inv_out, (void)r_out, (void)red;
    /* dq = scale phi'(q) dq~, dk = phi'(k) dk~, dv as it is */
    for (int r = 0; r < 4; ++r) {
        const int row = 4 * rq + r;
        if (row >= nq)
            break;
        const long at = row_offset(g, bh, t0 + p0 + row, DW);
        #pragma unroll
        for (int j = 0; j < BC_NV_MAX; ++j) {
            const int cc = 4 * (cq + BC_CQ * j);
            if (cq + BC_CQ * j < WQ) {
                float4 y = acc[j][r];
                if (kind == KIND_DQ)
                    y *= scale * FEATURE_GRAD_V(4, tiled_quad(q + at, cc, DK, 0));
                else if (kind == KIND_DK)
                    y *= FEATURE_GRAD_V(4, tiled_quad(k + at, cc, DK, 0));
                tiled_store(y, out + at + cc, DW - cc, 0);
            }
        }
    }
}

#define BCC_ARGS                                                                                                       \
    global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v,              \
        global const STORE_T *restrict dout, global const float *restrict mix, const int lda,                          \
        global const int *restrict tab, global const float *restrict slots, global const float *restrict invs,         \
        global const float *restrict rs, global STORE_T *restrict out, const mhla_grid g_arg, const float feature_eps, \
        const float scale, const int tiles_per_chunk, global float *restrict diag, const int want_diag

/* The arrays of one kind, at kernel scope (OpenCL C 1.2), and the call. */
#define BCC_KERNEL(name, kind)                                                                                         \
    __attribute__((reqd_work_group_size(BC_WG, 1, 1))) kernel void name(BCC_ARGS)                                      \
    {                                                                                                                  \
        local float4 xt[BC_DX(kind) * BC_LQ], yt[BC_DX(kind) * BC_LK], wt[BC_BK * BC_WQP(kind)], pt[BC_BK * BC_LQ];   \
        local float xb[BC_SQ], cb[BC_BK];                                                                              \
        bcc_readout(kind, q, k, v, dout, mix, lda, tab, slots, invs, rs, out, (global float *)0, (global float *)0,    \
                    g_arg, feature_eps, scale, 0.0f, tiles_per_chunk, diag, want_diag, xt, yt, wt, pt, xb, cb, cb);    \
    }

#if BC_ONE
/* dq, dk and dv in one launch (bct_fuse with bc_sq): global (3 BC_WG, H, entries * tiles_per_chunk),
 * local (BC_WG, 1, 1); group 0 of dimension 0 computes dq (from P^T, slots_p), 1 dk (across dS,
 * slots_ds; dMc's diagonal parts where want_diag), 2 dv (from dS). Why: three kernels in an in-order
 * queue run one after another, so at a few chunks (N = 1024, C = 64: 16 x 8 groups a kind) the
 * device holds a third of the groups it could, and each adds a launch gap. The kind is a run-time
 * value, uniform over the group (its barriers too), so the body is built once: three copies, one
 * per constant kind, took PoCL's work-group compiler past ten minutes without optimizations. Its
 * widths are then run-time values, and the local arrays are the largest kind's. */
#define BC_MAX(a, b) ((a) > (b) ? (a) : (b))
__attribute__((reqd_work_group_size(BC_WG, 1, 1))) kernel void
bc_dqkv_tiled(global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v,
              global const STORE_T *restrict dout, global const float *restrict mix, const int lda,
              global const int *restrict tab, global const float *restrict slots_p,
              global const float *restrict slots_ds, global const float *restrict invs,
              global const float *restrict rs, global STORE_T *restrict dq, global STORE_T *restrict dk,
              global STORE_T *restrict dv, const mhla_grid g_arg, const float feature_eps, const float scale,
              const int tiles_per_chunk, global float *restrict diag, const int want_diag)
{
    local float4 xt[BC_MAX(DK, DV) * BC_LQ], yt[BC_MAX(DK, DV) * BC_LK];
    local float4 wt[BC_BK * BC_MAX(BC_WQP(KIND_DQ), BC_WQP(KIND_DV))], pt[BC_BK * BC_LQ];
    local float xb[BC_SQ], cb[BC_BK];
    const int kind = (int)get_group_id(0);
    bcc_readout(kind, q, k, v, dout, mix, lda, tab, kind == KIND_DQ ? slots_p : slots_ds, invs, rs,
                kind == KIND_DQ ? dq : kind == KIND_DK ? dk : dv, (global float *)0, (global float *)0, g_arg,
                feature_eps, scale, 0.0f, tiles_per_chunk, diag, kind == KIND_DK ? want_diag : 0, xt, yt, wt, pt, xb,
                cb, cb);
}
#else
BCC_KERNEL(bc_dq_tiled, KIND_DQ)
BCC_KERNEL(bc_dk_tiled, KIND_DK)
BCC_KERNEL(bc_dv_tiled, KIND_DV)
#endif

#if NORMALIZER == 0
/* The paper normalizer's per-token 1/den_t and dL/dden_t at [bh][t], the read-outs' first
 * arguments as bc_scalars takes them. global, local: as the read-outs'. */
__attribute__((reqd_work_group_size(BC_WG, 1, 1))) kernel void
bc_scalars_tiled(global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v,
                 global const STORE_T *restrict dout, global const float *restrict mix, const int lda,
                 global const int *restrict tab, global const float *restrict slots, global float *restrict invs,
                 global float *restrict rs, const mhla_grid g_arg, const float feature_eps, const float scale,
                 const float eps, const int tiles_per_chunk)
{
    local float4 xt[DK * BC_LQ], yt[DK * BC_LK], wt[BC_BK * BC_WQP(KIND_SC)], pt[BC_BK * BC_LQ];
    local float xb[BC_SQ], cb[BC_BK], red[BC_SQ * BC_CQ];
    bcc_readout(KIND_SC, q, k, v, dout, mix, lda, tab, slots, invs, rs, (global STORE_T *)0, invs, rs, g_arg,
                feature_eps, scale, eps, tiles_per_chunk, (global float *)0, 0, xt, yt, wt, pt, xb, cb, red);
}
#endif

/* ---- the chunk summaries S_j and gradient summaries G_i (GPU rows with cs_tk) -------------------
 * Each (chunk, head) slot is a sum over the chunk's tokens of a row times a row: S = k~ [v | 1]^T,
 * stored transposed (S^T: rows of Dk, z the last), and G = q~ [g | r]^T, stored as rows of SC and
 * transposed (G^T, for dMc). As causal_summary_tiled.cl does the forward's: the group copies CS_TK
 * tokens of both rows into local memory, the feature map and 1/den applied once on the copy, and
 * each work-item adds a 4 x 4 register tile over them; backward_causal.cl's bc_summary and bc_grad,
 * the CPU form, have each work-item walk its own row of the slot through every token. */
#if CS_TK > 0
#define BCS_Q (CS_TN / 4)
#define BCS_WG (BCS_Q * BCS_Q)
#define BCS_RT ((DK + CS_TN - 1) / CS_TN) /* row tiles of the slot */
#define BCS_CT ((SC + CS_TN - 1) / CS_TN) /* column tiles */

/* global: (BCS_WG, H, entries * BCS_RT * BCS_CT), local (BCS_WG, 1, 1). grad 0: S^T into out; 1: G
 * into out and G^T into outt. Work-item (column quad ct fastest, row quad rt): rows 4 rt.. and
 * columns 4 ct.. of the group's tile. */
__attribute__((always_inline)) inline void
bcs_summary(const int grad, global const STORE_T *q, global const STORE_T *k, global const STORE_T *v,
            global const STORE_T *dout, global const float *invs, global const float *rs, global const int *tab,
            global float *out, global float *outt, const mhla_grid g, const float feature_eps, const float scale,
            local float4 *al, local float4 *bl)
{
    const int lid = (int)get_local_id(0), ct = lid % BCS_Q, rt = lid / BCS_Q;
    const int h = (int)get_group_id(1), kk = (int)get_group_id(2) / (BCS_RT * BCS_CT);
    const int tile = (int)get_group_id(2) - kk * (BCS_RT * BCS_CT);
    const int d_base = (tile / BCS_CT) * CS_TN, c_base = (tile % BCS_CT) * CS_TN;
    const int bh = ENT(kk, 5) * g.heads + h, t0 = ENT(kk, 0), len = ENT(kk, 1);
    float4 acc[4];
    #pragma unroll
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);
    for (int s0 = 0; s0 < len; s0 += CS_TK) {
        /* the rows of CS_TK tokens (zeros past the chunk or the slot): a = k~ or q~, b = [v | 1] or
         * [dO / den | r]; neighbouring work-items, neighbouring elements of a row */
        for (int e = lid; e < CS_TK * CS_TN; e += BCS_WG) {
            const int s = e / CS_TN, d = e - s * CS_TN, t = t0 + s0 + s, row = d_base + d, col = c_base + d;
            float a = 0.0f, b = 0.0f;
            if (s0 + s < len) {
                if (row < DK)
                    a = grad ? scale * feature(LOADN(1, row_offset(g, bh, t, DK) + row, q), feature_eps)
                             : feature(LOADN(1, row_offset(g, bh, t, DK) + row, k), feature_eps);
                if (col < DV)
                    b = grad ? LOADN(1, row_offset(g, bh, t, DV) + col, dout) * bct_inv(invs, (long)bh * g.n + t)
                             : LOADN(1, row_offset(g, bh, t, DV) + col, v);
                else if (col == DV)
                    b = grad ? bct_r(rs, (long)bh * g.n + t) : 1.0f;
            }
            ((local float *)al)[e] = a;
            ((local float *)bl)[e] = b;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int n = min(CS_TK, len - s0);
        for (int s = 0; s < n; ++s)
            tiled_mad4x4(acc, al[s * BCS_Q + rt], bl[s * BCS_Q + ct]);
        barrier(CLK_LOCAL_MEM_FENCE); /* al and bl are overwritten next */
    }
    /* S^T[e][d] (and z as row DV); G[d][e] and G^T[e][d] */
    global float *slot = out + bc_slot(kk, h, g.heads), *slott = outt + bc_slot(kk, h, g.heads);
    #pragma unroll
    for (int r = 0; r < 4; ++r) {
        const int d = d_base + 4 * rt + r;
        const float y[4] = {acc[r].x, acc[r].y, acc[r].z, acc[r].w};
        #pragma unroll
        for (int c = 0; c < 4; ++c) {
            const int e = c_base + 4 * ct + c;
            if (d < DK && e < SC) {
                if (grad) {
                    slot[(long)d * SC + e] = y[c];
                    slott[(long)e * DK + d] = y[c];
                } else {
                    slot[(long)e * DK + d] = y[c];
                }
            }
        }
    }
}

#define BCS_ARGS                                                                                                       \
    global const STORE_T *restrict q, global const STORE_T *restrict k, global const STORE_T *restrict v,              \
        global const STORE_T *restrict dout, global const float *restrict invs, global const float *restrict rs,       \
        global const int *restrict tab, global float *restrict out, global float *restrict outt,                       \
        const mhla_grid g_arg, const float feature_eps, const float scale

__attribute__((reqd_work_group_size(BCS_WG, 1, 1))) kernel void bc_summary_tiled(BCS_ARGS)
{
    local float4 al[CS_TK * BCS_Q], bl[CS_TK * BCS_Q];
    bcs_summary(0, q, k, v, dout, invs, rs, tab, out, outt, g_arg, feature_eps, scale, al, bl);
}

__attribute__((reqd_work_group_size(BCS_WG, 1, 1))) kernel void bc_grad_tiled(BCS_ARGS)
{
    local float4 al[CS_TK * BCS_Q], bl[CS_TK * BCS_Q];
    bcs_summary(1, q, k, v, dout, invs, rs, tab, out, outt, g_arg, feature_eps, scale, al, bl);
}
#endif /* CS_TK */
