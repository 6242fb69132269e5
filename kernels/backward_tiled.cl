/* The non-causal backward's per-token read-outs on GPUs (the tiled plans of the GPU rows): the
 * products of backward_readout.cl, each as a tiled product of a tile of BT_TQ tokens of one block
 * with a matrix of that block held in local memory, as output_tiled.cl reads out the forward:
 *   bwd_dq_tiled: u_t = S~_i dO_t       x = dO_t (Dv wide),  w = S~_i^T (Dv x Dk)
 *                 then den_t, r_t, dq_t and the gradient summaries' weights (backward_readout.cl)
 *   bwd_dkv_tiled, dk: dk_s = phi'(k_s) (dS_b v_s + dz_b)    x = v_s,   w = dS_b^T (Dv x Dk)
 *   bwd_dkv_tiled, dv: dv_s = dS_b^T k~_s                     x = k~_s,  w = dS_b   (Dk x Dv)
 * The group copies BT_DC dimensions of its tokens' x rows (transposed: a work-item reads its 4
 * tokens as one float4) and the same rows of w into local memory, and every work-item adds a
 * 4-token x 4-column register tile over them; the next pieces are loaded into registers meanwhile.
 * w^T is read as the summary's rows are stored (neighbouring work-items, neighbouring 16 bytes of a
 * row) and transposed on its way into local memory: no transposed copy of S~ or dS is made (the
 * CPU form's bwd_transpose_summary). Where the blocks are few and whole (bt_fuse: N = 1024 at the
 * paper's M on a device of few compute units, which does not split the blocks), each group mixes its
 * block's matrix itself from the unmixed ones (S~_i = sum_j Mc[i,j] S_j for dq, dS_b = sum_i Mc[i,b]
 * G_i for dk and dv): the mixing's launch, mostly the gap before it, saved for M reads of each
 * piece, from cache (backward/backward_tiled.c). */
#include "common.h"
#include "tiled.h"
#include "backward.h"

#ifndef BT_TQ
#define BT_TQ 64 /* tokens per group (a multiple of 4) */
#endif
#ifndef BT_TV
#define BT_TV 64 /* output columns per group (a multiple of 4; bwd_dq_tiled needs all of Dk) */
#endif
#ifndef BT_DC
#define BT_DC 16 /* dimensions of x per local tile (a multiple of 4) */
#endif
#define BT_QQ (BT_TQ / 4) /* float4 of a transposed x row: 4 tokens each */
#define BT_QV (BT_TV / 4)
#define BT_QC (BT_DC / 4) /* float4 of an x row's BT_DC dimensions */
#define BT_WG (BT_QQ * BT_QV)
#define BT_LQ (BT_QQ + 1) /* rows of the local tiles, padded: the transposing stores spread over the banks */
#define BT_LW (BT_QV + 1)
#define BT_PX ((BT_TQ * BT_QC + BT_WG - 1) / BT_WG) /* x pieces a work-item copies per tile */
#define BT_PW ((BT_DC * BT_QV + BT_WG - 1) / BT_WG) /* w pieces */

#define BT_DQ 0
#define BT_DK 1
#define BT_DV 2

/* A block's matrix as a read-out reads it: block blk's rows at w + blk * step where sources = 0;
 * else the sum over the sources' blocks j (each `step` apart from w) weighted by mc[mc0 + j * mcs],
 * in block order (as mixing.cl's mixing_splits adds them). */
typedef struct bt_matrix {
    global const float *w;
    global const float *mc;
    long step, mc0;
    int mcs, sources, blk;
} bt_matrix;

/* Elements off + c..c+3 (zeros past `left`) of the matrix's block: a summary's row, or its z column. */
float4 bt_quad(const bt_matrix m, const long off, const int c, const int left)
{
    if (m.sources == 0)
        return tiled_quad_f32(m.w + m.blk * m.step + off, c, left, TILED_SUMMARY_ALIGNED);
    float4 x = (float4)(0.0f);
    for (int j = 0; j < m.sources; ++j)
        x += m.mc[m.mc0 + (long)j * m.mcs] * tiled_quad_f32(m.w + j * m.step + off, c, left, TILED_SUMMARY_ALIGNED);
    return x;
}

/* x_t . w for the group's BT_TQ tokens from p0 of block blk and its BT_TV columns from c_base, into
 * the work-item's acc (tokens 4 rq.., columns c_base + 4 ct..). `kind` is a constant at every call
 * (the other forms compile away). x rows (head base xb, stride xs, din wide): dO or v as stored, k
 * through the feature map. w: the block's matrix, Dk rows of Dv floats from offset 0 of `w` (a
 * summary's S part); read as it is (the dv side: din = Dk, the output Dv wide) or transposed (the
 * others: din = Dv, the output Dk wide). */
__attribute__((always_inline)) inline void bt_product(const int kind, global const STORE_T *xb, const long xs,
                                                      const int xa, const bt_matrix w, const mhla_grid g,
                                                      const int blk, const int p0, const int c_base,
                                                      const float feature_eps, local float4 *xl, local float4 *wl,
                                                      float4 acc[4])
{
    const int din = kind == BT_DV ? DK : DV, dout = kind == BT_DV ? DV : DK;
    const int lid = (int)get_local_id(0), ct = lid % BT_QV, rq = lid / BT_QV;
    float4 xr[BT_PX], wr[BT_PW];
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);

    /* Dimensions d0.. into xr and wr. x piece i: token i / BT_QC, dimensions 4 (i % BT_QC)..; w piece
     * i read as stored: row d0 + i / BT_QV, columns 4 (i % BT_QV)..; transposed: column i / BT_QC of
     * the output (a row of the summary), rows 4 (i % BT_QC)..; zeros past the block and the rows. */
#define BT_FETCH(d0_)                                                                                \
    do {                                                                                             \
        _Pragma("unroll") for (int j_ = 0; j_ < BT_PX; ++j_) {                                       \
            const int i_ = lid + j_ * BT_WG, t_ = i_ / BT_QC, p_ = p0 + t_;                          \
            const int d_ = (d0_) + 4 * (i_ - t_ * BT_QC);                                            \
            global const STORE_T *row_ = xb + token_of(g, blk, min(p_, g.nb - 1)) * xs;              \
            xr[j_] = i_ >= BT_TQ * BT_QC || p_ >= g.nb ? (float4)(0.0f)                              \
                     : kind == BT_DV                  ? tiled_feature_quad(row_, d_, din, xa, feature_eps) \
                                                      : tiled_quad(row_, d_, din, xa);               \
        }                                                                                            \
        _Pragma("unroll") for (int j_ = 0; j_ < BT_PW; ++j_) {                                       \
            const int i_ = lid + j_ * BT_WG;                                                         \
            if (kind == BT_DV) {                                                                     \
                const int d_ = i_ / BT_QV;                                                           \
                wr[j_] = i_ < BT_DC * BT_QV && (d0_) + d_ < din                                      \
                             ? bt_quad(w, (long)((d0_) + d_) * DV, c_base + 4 * (i_ - d_ * BT_QV), dout) \
                             : (float4)(0.0f);                                                       \
            } else {                                                                                 \
                const int c_ = i_ / BT_QC;                                                           \
                wr[j_] = i_ < BT_DC * BT_QV && c_base + c_ < dout                                    \
                             ? bt_quad(w, (long)(c_base + c_) * DV, (d0_) + 4 * (i_ - c_ * BT_QC), din) \
                             : (float4)(0.0f);                                                       \
            }                                                                                        \
        }                                                                                            \
    } while (0)

    BT_FETCH(0);
    for (int d0 = 0; d0 < din; d0 += BT_DC) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done with xl and wl */
        #pragma unroll
        for (int j = 0; j < BT_PX; ++j) { /* transposed: dimension-major, 4 tokens a float4 */
            const int i = lid + j * BT_WG, t = i / BT_QC;
            if (i < BT_TQ * BT_QC)
                tiled_put_column(xl, BT_LQ, 4 * (i - t * BT_QC), t, xr[j]);
        }
        #pragma unroll
        for (int j = 0; j < BT_PW; ++j) {
            const int i = lid + j * BT_WG;
            if (i >= BT_DC * BT_QV)
                continue;
            if (kind == BT_DV) {
                const int d = i / BT_QV;
                wl[d * BT_LW + (i - d * BT_QV)] = wr[j];
            } else { /* a summary row's 4 values: one column of 4 rows of w */
                const int c = i / BT_QC;
                tiled_put_column(wl, BT_LW, 4 * (i - c * BT_QC), c, wr[j]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (d0 + BT_DC < din)
            BT_FETCH(d0 + BT_DC); /* in flight during the multiply-adds below */
        #pragma unroll 8
        for (int d = 0; d < BT_DC; ++d)
            tiled_mad4x4(acc, xl[d * BT_LQ + rq], wl[d * BT_LW + ct]);
    }
#undef BT_FETCH
}

/* The tile's group: global (BT_WG * column tiles, heads, M * ceil(Nb / BT_TQ)), local (BT_WG, 1, 1). */
#define BT_GROUP(g)                                                                                 \
    const int lid = (int)get_local_id(0), ct = lid % BT_QV, rq = lid / BT_QV;                       \
    const int c_base = (int)get_group_id(0) * BT_TV, c = c_base + 4 * ct;                           \
    const int bh = (int)get_global_id(1);                                                           \
    const int groups = ((g).nb + BT_TQ - 1) / BT_TQ;                                                \
    const int blk = (int)get_global_id(2) / groups;                                                 \
    const int p0 = ((int)get_global_id(2) - blk * groups) * BT_TQ;                                  \
    local float4 xl[BT_DC * BT_LQ], wl[BT_DC * BT_LW];                                              \
    float4 acc[4]

#if BT_TV >= DK /* (the host builds it only so: a token's whole Dk-wide row in one group) */
/* From dO: u_t = S~_i dO_t, then per token den_t = q~_t . z~_i, 1/den_t, r_t = -(q~_t . u_t)/den_t^2,
 * dq_t = scale phi'(q_t) (u_t/den_t + r_t z~_i) and the gradient summaries' weights scale/den_t and
 * r_t at ((i*BH + bh)*Nb + p), as bwd_dq_readout (without a normalizer den_t = 1, r_t = 0; the
 * official normalizer reads den_t from `den`, [M][B*H][Nb], and leaves the R z_i term of dq to
 * bwd_official_dz_part). A token's dots are summed over its row's work-items through local memory,
 * in a fixed order. sources = 0: `mixed` holds the mixed summaries; sources = M_kv: the summaries,
 * which each group mixes by its block's row of Mc (mc, M x M_kv). */
__attribute__((reqd_work_group_size(BT_WG, 1, 1)))
kernel void bwd_dq_tiled(global const STORE_T *restrict q, global const STORE_T *restrict dout,
                         global const float *restrict mixed, global const float *restrict den,
                         global STORE_T *restrict dq, global float *restrict w_out,
                         global float *restrict r_out, const mhla_grid g_arg, const float feature_eps,
                         const float scale, const float eps, global const float *restrict mc, const int sources)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    BT_GROUP(g);
    const int heads = kv_count(g), kvh = kv_of(g, bh); /* the summary head this query head reads */
    const int oa = (DV % 4 == 0) & TILED_BASE_OK(dout), qa = (DK % 4 == 0) & TILED_BASE_OK(q),
              da = (DK % 4 == 0) & TILED_BASE_OK(dq);
    const long step = summary_row_len(heads), mc0 = (long)blk * g.kv_m;
    const bt_matrix sm = {mixed + summary_s_offset(heads, 0, kvh, 0), mc, step, mc0, 1, sources, blk};
    const bt_matrix zm = {mixed + summary_z_offset(heads, 0, kvh), mc, step, mc0, 1, sources, blk};
    bt_product(BT_DQ, dout + row_base(g, bh, DV), row_stride(g, DV), oa, sm, g, blk, p0, c_base, feature_eps, xl, wl,
               acc);
    global const STORE_T *qb = q + row_base(g, bh, DK);
    global STORE_T *dqb = dq + row_base(g, bh, DK);
    const long qs = row_stride(g, DK);
    const float4 z = bt_quad(zm, 0, c, DK);
    float4 qx[4];
    for (int r = 0; r < 4; ++r) {
        const int p = p0 + 4 * rq + r;
        qx[r] = p < g.nb ? tiled_quad(qb + token_of(g, blk, p) * qs, c, DK, qa) : (float4)(0.0f);
    }
    local float inv_l[BT_TQ], r_l[BT_TQ];
    const long at = ((long)blk * g.bh + bh) * g.nb + p0;
#if NORMALIZER != 2
    local float opart[BT_TQ * BT_QV];
#if NORMALIZER == 0
    local float dpart[BT_TQ * BT_QV];
#endif
    for (int r = 0; r < 4; ++r) {
        float4 qt = scale * FEATURE_V(4, qx[r], feature_eps);
        if (c + 4 > DK) /* the feature map of a zero past the row is not zero (relu-eps) */
            qt = (float4)(c < DK ? qt.s0 : 0.0f, c + 1 < DK ? qt.s1 : 0.0f, c + 2 < DK ? qt.s2 : 0.0f, 0.0f);
#if NORMALIZER == 0
        dpart[(4 * rq + r) * BT_QV + ct] = dot(qt, z);
#endif
        opart[(4 * rq + r) * BT_QV + ct] = dot(qt, acc[r]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < BT_TQ; t += BT_WG) {
        float od = 0.0f;
        for (int j = 0; j < BT_QV; ++j)
            od += opart[t * BT_QV + j];
#if NORMALIZER == 0
        float dn = 0.0f;
        for (int j = 0; j < BT_QV; ++j)
            dn += dpart[t * BT_QV + j];
#else /* the official denominators, mixed by the forward */
        const float dn = p0 + t < g.nb ? den[at + t] : 1.0f;
#endif
        const float inv = 1.0f / (dn + eps);
        inv_l[t] = inv, r_l[t] = -od * inv * inv;
    }
#else
    for (int t = lid; t < BT_TQ; t += BT_WG)
        inv_l[t] = 1.0f, r_l[t] = 0.0f;
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = lid; t < BT_TQ && p0 + t < g.nb; t += BT_WG)
        w_out[at + t] = scale * inv_l[t], r_out[at + t] = r_l[t];
    if (c >= DK)
        return;
    for (int r = 0; r < 4; ++r) {
        const int t = 4 * rq + r, p = p0 + t;
        if (p >= g.nb)
            break;
        float4 d = acc[r] * inv_l[t];
#if NORMALIZER == 0
        d += r_l[t] * z;
#endif
        tiled_store(scale * FEATURE_GRAD_V(4, qx[r]) * d, dqb + token_of(g, blk, p) * qs + c, DK - c, da);
    }
    (void)eps, (void)den;
}
#endif

/* On the key/value grid (`g` the plan's kv_grid, its heads H_kv), dk and dv in one launch: the first
 * dk_tiles column tiles of dimension 0 are dk's, the rest dv's (a group takes one side whole, so its
 * barriers are uniform; one launch lets the two sides' groups share the device, where two kernels
 * in an in-order queue run one after the other).
 *   dk_s = phi'(k_s) (dS_b v_s + dz_b) from dS's rows read transposed, and dS's z column;
 *   dv_s = dS_b^T k~_s from dS's rows as stored.
 * sources = 0: `dsum` holds dS; sources = M: the gradient summaries G (whole), which each group
 * mixes by its block's column of Mc (mc, M x M_kv). */
__attribute__((reqd_work_group_size(BT_WG, 1, 1)))
kernel void bwd_dkv_tiled(global const STORE_T *restrict k, global const STORE_T *restrict v,
                          global const float *restrict dsum, global STORE_T *restrict dk, global STORE_T *restrict dv,
                          const mhla_grid g_arg, const float feature_eps, const int dk_tiles,
                          global const float *restrict mc, const int sources)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int lid = (int)get_local_id(0), ct = lid % BT_QV, rq = lid / BT_QV;
    const int bh = (int)get_global_id(1);
    const int groups = (g.nb + BT_TQ - 1) / BT_TQ;
    const int blk = (int)get_global_id(2) / groups;
    const int p0 = ((int)get_global_id(2) - blk * groups) * BT_TQ;
    const int tile = (int)get_group_id(0), is_dk = tile < dk_tiles;
    const int c_base = (is_dk ? tile : tile - dk_tiles) * BT_TV, c = c_base + 4 * ct;
    local float4 xl[BT_DC * BT_LQ], wl[BT_DC * BT_LW];
    float4 acc[4];
    const long step = summary_row_len(g.bh);
    const bt_matrix ds = {dsum + summary_s_offset(g.bh, 0, bh, 0), mc, step, blk, g.kv_m, sources, blk};
    const long ks = row_stride(g, DK);
    global const STORE_T *kb = k + row_base(g, bh, DK);
    const int ka = (DK % 4 == 0) & TILED_BASE_OK(k);
    if (is_dk) {
        const int va = (DV % 4 == 0) & TILED_BASE_OK(v), da = (DK % 4 == 0) & TILED_BASE_OK(dk);
        bt_product(BT_DK, v + row_base(g, bh, DV), row_stride(g, DV), va, ds, g, blk, p0, c_base, 0.0f, xl, wl, acc);
        if (c >= DK)
            return;
        const bt_matrix zm = {dsum + summary_z_offset(g.bh, 0, bh), mc, step, blk, g.kv_m, sources, blk};
        const float4 dz = bt_quad(zm, 0, c, DK);
        global STORE_T *dkb = dk + row_base(g, bh, DK);
        for (int r = 0; r < 4; ++r) {
            const int p = p0 + 4 * rq + r;
            if (p >= g.nb)
                break;
            const long off = token_of(g, blk, p) * ks;
            const float4 x = tiled_quad(kb + off, c, DK, ka);
            tiled_store((acc[r] + dz) * FEATURE_GRAD_V(4, x), dkb + off + c, DK - c, da);
        }
    } else {
        const int da = (DV % 4 == 0) & TILED_BASE_OK(dv);
        bt_product(BT_DV, kb, ks, ka, ds, g, blk, p0, c_base, feature_eps, xl, wl, acc);
        if (c >= DV)
            return;
        const long vs = row_stride(g, DV);
        global STORE_T *dvb = dv + row_base(g, bh, DV);
        for (int r = 0; r < 4; ++r) {
            const int p = p0 + 4 * rq + r;
            if (p >= g.nb)
                break;
            tiled_store(acc[r], dvb + token_of(g, blk, p) * vs + c, DV - c, da);
        }
    }
}
