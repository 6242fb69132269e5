/* Softmax attention on GPUs (the GPU rows' sm_tiled): softmax.cl's online softmax with the two
 * products as tiled matrix products through local memory, as FlashAttention arranges them. A group
 * owns SM_SQ queries; for each tile of SM_BK keys it copies the keys (transposed) and values into
 * local memory, each work-item computes a 4-query x 4-key tile of scores from the group's queries
 * (transposed in local memory: one float4 read serves 4 queries) and the key tile, the rows' maxima
 * and sums are reduced across a row's work-items through local memory, the probabilities go to
 * local memory (transposed), and each work-item adds P times V into 4 queries x 4 value columns
 * per column tile it owns. Where softmax.cl's work-item holds a whole query row and reads every key
 * and value element from local memory for one multiply-add, here each pair of float4 reads feeds
 * 16 multiply-adds. Memory stays O(N): no N x N buffer exists. */
#include "common.h"
#include "tiled.h"

#ifndef SM_SQ
#define SM_SQ 32 /* queries per group (a multiple of 4) */
#endif
#ifndef SM_BK
#define SM_BK 16 /* keys per local tile (a multiple of 4) */
#endif
#define SM_RQ (SM_SQ / 4)           /* row quads: work-items along the queries */
#define SM_CQ (SM_BK / 4)           /* column quads: work-items along a row (one key quad each) */
#define SM_WG (SM_RQ * SM_CQ)
#define SM_DVP ((DV + 3) / 4 * 4)   /* value columns padded to whole float4 (the pad is zero) */
#define SM_NV ((SM_DVP / 4 + SM_CQ - 1) / SM_CQ) /* value column quads per work-item */
#define SM_LQ (SM_RQ + 1)           /* float4 per transposed query row, padded (the copy's stores spread) */
#define SM_LK (SM_CQ + 1)           /* float4 per transposed key row, padded */

/* global: (SM_WG * ceil(N / SM_SQ), B*H), local (SM_WG, 1). Work-item (column quad cq fastest, row
 * quad rq): queries 4 rq.. of the group's; keys 4 cq.. of each tile; value columns 4 (cq + SM_CQ j)..
 * `g` is the queries' grid, `kg` the keys' and values' (their N_kv tokens and H_kv heads: the same
 * grid but for cross-attention and grouped key/value heads). Queries past the last compute on zeros
 * and store nothing; keys past the last score -inf. */
__attribute__((reqd_work_group_size(SM_WG, 1, 1)))
kernel void softmax_tiled(global const STORE_T *restrict q, global const STORE_T *restrict k,
                          global const STORE_T *restrict v, global STORE_T *restrict out, const mhla_grid g_arg,
                          const float scale, const mhla_grid kg_arg)
{
    const mhla_grid g = g_arg, kg = kg_arg; /* kernels/common.h: read the struct arguments once, up front */
    local float4 qt[DK * SM_LQ];          /* scale q, transposed: qt[d][row quad] */
    local float4 kt[DK * SM_LK];          /* the key tile, transposed: kt[d][key quad] */
    local float4 vt[SM_BK * (SM_DVP / 4)]; /* the value tile: vt[key][column quad] */
    local float4 pt[SM_BK * SM_LQ];       /* probabilities, transposed: pt[key][row quad] */
    local float red[SM_SQ * SM_CQ];       /* a row's parts (its work-items' maxima, then sums) */
    local float row_m[SM_SQ], row_l[SM_SQ], row_alpha[SM_SQ], row_shift[SM_SQ];
    const int lid = (int)get_local_id(0), cq = lid % SM_CQ, rq = lid / SM_CQ;
    const int t0 = (int)get_group_id(0) * SM_SQ;
    const int bh = (int)get_global_id(1);
    const int kvh = kv_of(g, bh); /* the key/value head of this query head */
    const long qbase = row_base(g, bh, DK), qstride = row_stride(g, DK);
    const long kbase = row_base(kg, kvh, DK), kstride = row_stride(kg, DK);
    const long vbase = row_base(kg, kvh, DV), vstride = row_stride(kg, DV);

    for (int i = lid; i < SM_SQ * DK; i += SM_WG) { /* neighbouring work-items, neighbouring elements */
        const int r = i / DK, d = i - r * DK;
        const long at = qbase + (long)(t0 + r) * qstride + d;
        ((local float *)qt)[d * 4 * SM_LQ + r] = t0 + r < g.n ? scale * LOADN(1, at, q) : 0.0f;
    }
    for (int r = lid; r < SM_SQ; r += SM_WG)
        row_m[r] = -INFINITY, row_l[r] = 0.0f;
    float4 acc[SM_NV][4];
    for (int j = 0; j < SM_NV; ++j)
        for (int r = 0; r < 4; ++r)
            acc[j][r] = (float4)(0.0f);

    for (int s0 = 0; s0 < kg.n; s0 += SM_BK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done */
        for (int i = lid; i < SM_BK * DK; i += SM_WG) {
            const int j = i / DK, d = i - j * DK;
            ((local float *)kt)[d * 4 * SM_LK + j] = s0 + j < kg.n ? LOADN(1, kbase + (long)(s0 + j) * kstride + d, k)
                                                                   : 0.0f;
        }
        for (int i = lid; i < SM_BK * SM_DVP; i += SM_WG) {
            const int j = i / SM_DVP, e = i - j * SM_DVP;
            ((local float *)vt)[i] = s0 + j < kg.n && e < DV ? LOADN(1, vbase + (long)(s0 + j) * vstride + e, v) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        /* scores: sc[r] = keys 4 cq.. of query 4 rq + r */
        float4 sc[4];
        for (int r = 0; r < 4; ++r)
            sc[r] = (float4)(0.0f);
        #pragma unroll 8
        for (int d = 0; d < DK; ++d)
            tiled_mad4x4(sc, qt[d * SM_LQ + rq], kt[d * SM_LK + cq]);
        const int key = s0 + 4 * cq;
        for (int r = 0; r < 4; ++r) {
            sc[r] = (float4)(key < kg.n ? sc[r].s0 : -INFINITY, key + 1 < kg.n ? sc[r].s1 : -INFINITY,
                             key + 2 < kg.n ? sc[r].s2 : -INFINITY, key + 3 < kg.n ? sc[r].s3 : -INFINITY);
            red[(4 * rq + r) * SM_CQ + cq] = fmax(fmax(sc[r].s0, sc[r].s1), fmax(sc[r].s2, sc[r].s3));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* each row's new maximum, by one work-item, parts in a fixed order */
        for (int r = lid; r < SM_SQ; r += SM_WG) {
            float m = row_m[r];
            for (int c = 0; c < SM_CQ; ++c)
                m = fmax(m, red[r * SM_CQ + c]);
            /* While every score so far is -inf (only infinite inputs do that) the shift stays finite,
             * so exp(-inf - shift) = 0 instead of exp(-inf + inf) = NaN. */
            const float shift = m == -INFINITY ? 0.0f : m;
            row_alpha[r] = exp(row_m[r] - shift); /* rescales what was summed against the old maximum */
            row_shift[r] = shift, row_m[r] = m;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < 4; ++r) {
            const int row = 4 * rq + r;
            const float4 p = exp(sc[r] - row_shift[row]);
            red[row * SM_CQ + cq] = (p.s0 + p.s1) + (p.s2 + p.s3);
            tiled_put_column(pt, SM_LQ, 4 * cq, row, p); /* keys 4 cq.. of this query */
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = lid; r < SM_SQ; r += SM_WG) {
            float l = 0.0f;
            for (int c = 0; c < SM_CQ; ++c)
                l += red[r * SM_CQ + c];
            row_l[r] = row_l[r] * row_alpha[r] + l;
        }
        /* acc = acc alpha + P V over the tile's keys */
        const float4 alpha = (float4)(row_alpha[4 * rq], row_alpha[4 * rq + 1], row_alpha[4 * rq + 2],
                                      row_alpha[4 * rq + 3]);
        for (int j = 0; j < SM_NV; ++j) {
            acc[j][0] *= alpha.s0, acc[j][1] *= alpha.s1, acc[j][2] *= alpha.s2, acc[j][3] *= alpha.s3;
        }
        #pragma unroll 4
        for (int s = 0; s < SM_BK; ++s) {
            const float4 a = pt[s * SM_LQ + rq];
            #pragma unroll
            for (int j = 0; j < SM_NV; ++j)
                if (cq + SM_CQ * j < SM_DVP / 4)
                    tiled_mad4x4(acc[j], a, vt[s * (SM_DVP / 4) + cq + SM_CQ * j]);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* row_l's last sums */
    const long obase = row_base(g, bh, DV), ostride = row_stride(g, DV);
    const int oa = (DV % 4 == 0) & TILED_BASE_OK(out);
    for (int r = 0; r < 4; ++r) {
        const int t = t0 + 4 * rq + r;
        if (t >= g.n)
            break;
        const float l = row_l[4 * rq + r];
        for (int j = 0; j < SM_NV; ++j) {
            const int c = 4 * (cq + SM_CQ * j);
            if (c < DV)
                tiled_store(acc[j][r] / l, out + obase + (long)t * ostride + c, DV - c, oa);
        }
    }
}
