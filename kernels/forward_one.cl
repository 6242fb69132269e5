/* Non-causal MHLA in one launch, for short sequences on GPUs, where each of the tiled forward's
 * launches (summary_tiled.cl, mixing.cl, output_tiled.cl) is mostly the gap before it. A group
 * makes its query block's mixed summary itself, S~_i = sum_b Mc[i,b] sum_{t in b} k~_t v_t^T and
 * z~_i likewise, over every key/value token, for ON_TV of its columns, keeps it in local memory
 * and reads its block's tokens out of it: no summary, no mixing and no barrier between launches,
 * for M times the summary's multiply-adds (each query block's groups walk all the keys). Hence
 * for short sequences only (tl_one bounds M x N_kv: forward/forward_one.c).
 *
 * Phase 1, the mixed summary: the group copies ON_TK tokens of one key/value block at a time into
 * local memory (k~ with the feature map and the block's weight Mc[i,b] applied on the copy, and
 * v), and each work-item adds a 4 x 4 tile (4 key rows x 4 columns) over every ON_KS-th token of
 * them: ON_KS slices of the group share a tile's tokens, so that a group has enough work-items to
 * hide the loads' latency where its 4 x 4 tiles alone would be few (Dk 64 x 16 columns: 64). The
 * key sums ride along: each work-item adds the k~ rows it multiplies anyway. The slices' partial
 * sums are then added in slice order through local memory (no atomics: the same result run to run).
 * Phase 2, the read-out: as output_tiled.cl, ON_TQ tokens a pass (4 x 4 per work-item), ON_DC
 * dimensions of q~ (transposed) a local tile, the mixed summary from local memory; each work-item
 * sums its 4 tokens' q~ . z~ beside its products (one multiply-add a float4 of q~, where a shared
 * array of them would cost a barrier). */
#include "common.h"
#include "tiled.h"

#ifndef ON_TV
#define ON_TV 16 /* columns per group (a multiple of 4) */
#endif
#ifndef ON_KS
#define ON_KS 4 /* token slices of phase 1 */
#endif
#ifndef ON_TK
#define ON_TK 16 /* tokens per local tile of phase 1 */
#endif
#ifndef ON_DC
#define ON_DC 16 /* key dimensions per local tile of phase 2 (a multiple of 4) */
#endif
#define ON_DK4 ((DK + 3) / 4 * 4)
#define ON_KQ (ON_DK4 / 4) /* float4 pieces of a k~ row */
#define ON_QV (ON_TV / 4)  /* float4 pieces of a summary row's columns */
#define ON_CELLS (ON_KQ * ON_QV)
#define ON_WG (ON_CELLS * ON_KS)
#define ON_TQ (4 * ON_WG / ON_QV) /* tokens a read-out pass: 4 a work-item */
#define ON_LQ (ON_TQ / 4 + 1)     /* transposed q~ rows in float4, padded (output_tiled.cl's TL_LQ) */
#define ON_DQ (ON_DC / 4)
#define ON_PK ((ON_TK * ON_KQ + ON_WG - 1) / ON_WG) /* k~ pieces a work-item copies per tile */
#define ON_PV ((ON_TK * ON_QV + ON_WG - 1) / ON_WG) /* v pieces */
#define ON_PQ ((ON_TQ * ON_DQ + ON_WG - 1) / ON_WG) /* q~ pieces per read-out tile */
/* Local memory (tiling.c's mhla__forward_one_local counts the same): the mixed summary and its key
 * sums for the whole launch, and one pool of float4 that phase 1's tiles, the slices' sums and
 * phase 2's tiles take in turn. */
#define ON_S4 (ON_DK4 * ON_QV)
#define ON_A4 (ON_TK * (ON_KQ + ON_QV))
#define ON_R4 (ON_KS > 1 ? ON_KS * (ON_S4 + ON_KQ) : 0)
#define ON_B4 (ON_DC * ON_LQ)
#define ON_MAX2(a, b) ((a) > (b) ? (a) : (b))
#define ON_POOL ON_MAX2(ON_A4, ON_MAX2(ON_R4, ON_B4))

/* global: (ON_WG * ceil(DV / ON_TV), B*H, M), local (ON_WG, 1, 1): a group per column tile, query
 * head and query block. g: the queries' grid, kg: the keys' and values' (cross-attention: its own
 * tokens and blocks; kg.m = g.kv_m). mc: M x kv_m. The official normalizer never comes here (its
 * denominators mix per-token dots: forward/forward_one.c). */
__attribute__((reqd_work_group_size(ON_WG, 1, 1)))
kernel void forward_one(global const STORE_T *restrict q, global const STORE_T *restrict k,
                        global const STORE_T *restrict v, global const float *restrict mc,
                        global STORE_T *restrict out, const mhla_grid g_arg, const mhla_grid kg_arg,
                        const float feature_eps, const float scale, const float eps)
{
    const mhla_grid g = g_arg, kg = kg_arg; /* kernels/common.h: read the struct arguments once, up front */
    local float4 sl[ON_S4]; /* S~ rows: ON_DK4 x ON_QV */
    local float zl[ON_DK4]; /* z~ */
    local float4 pool[ON_POOL];
    local float4 *const kl = pool;                 /* phase 1: ON_TK x ON_KQ */
    local float4 *const vl = pool + ON_TK * ON_KQ; /* phase 1: ON_TK x ON_QV */
    local float4 *const ql = pool;                 /* phase 2: ON_DC x ON_LQ */
    const int lid = (int)get_local_id(0);
    const int c_base = (int)get_group_id(0) * ON_TV;
    const int bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    const int kvh = kv_of(g, bh); /* the key/value head this query head reads */
    global const STORE_T *kb = k + row_base(kg, kvh, DK);
    global const STORE_T *vb = v + row_base(kg, kvh, DV) + c_base;
    global const STORE_T *qb = q + row_base(g, bh, DK);
    const long ks = row_stride(kg, DK), vs = row_stride(kg, DV), qs = row_stride(g, DK);
    /* whole float4 of rows: rows of 4n values from an aligned buffer (kernels/tiled.h) */
    const int ka = (DK % 4 == 0) & TILED_BASE_OK(k), va = (DV % 4 == 0) & TILED_BASE_OK(v);
    const int qa = (DK % 4 == 0) & TILED_BASE_OK(q), oa = (DV % 4 == 0) & TILED_BASE_OK(out);
    global const float *mrow = mc + (long)blk * g.kv_m;

    /* Phase 1. Work-item: slice s, column piece ct, key rows 4 rt.. */
    const int s = lid / ON_CELLS, cell = lid - s * ON_CELLS;
    const int ct = cell % ON_QV, rt = cell / ON_QV;
    float4 acc[4], kr[ON_PK], vr[ON_PV], zs = (float4)(0.0f); /* zs: key rows 4 rt.. summed */
    for (int r = 0; r < 4; ++r)
        acc[r] = (float4)(0.0f);
    const int per_block = (kg.nb + ON_TK - 1) / ON_TK, tiles = kg.m * per_block;

    /* Tile ti (block ti / per_block) into kr and vr: k~ piece i is token i / ON_KQ, dimensions
     * 4 (i % ON_KQ)..; v piece i token i / ON_QV, columns 4 (i % ON_QV)..; zeros past the block,
     * the head's dimensions and its columns. */
#define ONE_FETCH(ti_)                                                                              \
    do {                                                                                            \
        const int b_ = (ti_) / per_block, p0_ = ((ti_) - b_ * per_block) * ON_TK;                   \
        const float w_ = mrow[b_];                                                                  \
        _Pragma("unroll") for (int j_ = 0; j_ < ON_PK; ++j_) {                                      \
            const int i_ = lid + j_ * ON_WG, t_ = i_ / ON_KQ, p_ = p0_ + t_;                        \
            kr[j_] = i_ < ON_TK * ON_KQ && p_ < kg.nb                                               \
                         ? w_ * tiled_feature_quad(kb + token_of(kg, b_, p_) * ks,                  \
                                                   4 * (i_ - t_ * ON_KQ), DK, ka, feature_eps)      \
                         : (float4)(0.0f);                                                          \
        }                                                                                           \
        _Pragma("unroll") for (int j_ = 0; j_ < ON_PV; ++j_) {                                      \
            const int i_ = lid + j_ * ON_WG, t_ = i_ / ON_QV, p_ = p0_ + t_;                        \
            vr[j_] = i_ < ON_TK * ON_QV && p_ < kg.nb                                               \
                         ? tiled_quad(vb + token_of(kg, b_, p_) * vs, 4 * (i_ - t_ * ON_QV), DV - c_base, va) \
                         : (float4)(0.0f);                                                          \
        }                                                                                           \
    } while (0)

    ONE_FETCH(0);
    for (int ti = 0; ti < tiles; ++ti) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the last tile's readers are done with kl and vl */
        #pragma unroll
        for (int j = 0; j < ON_PK; ++j)
            if (lid + j * ON_WG < ON_TK * ON_KQ)
                kl[lid + j * ON_WG] = kr[j];
        #pragma unroll
        for (int j = 0; j < ON_PV; ++j)
            if (lid + j * ON_WG < ON_TK * ON_QV)
                vl[lid + j * ON_WG] = vr[j];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (ti + 1 < tiles)
            ONE_FETCH(ti + 1); /* in flight during the multiply-adds below */
        for (int t = s; t < ON_TK; t += ON_KS) {
            const float4 a = kl[t * ON_KQ + rt];
            tiled_mad4x4(acc, a, vl[t * ON_QV + ct]);
            zs += a;
        }
    }
#undef ONE_FETCH
    barrier(CLK_LOCAL_MEM_FENCE); /* kl and vl read: the region takes the slices' sums */
#if ON_KS > 1
    local float4 *const red = pool;                  /* the slices' sums: ON_KS x ON_S4 */
    local float4 *const redz = pool + ON_KS * ON_S4; /* and their key sums: ON_KS x ON_KQ */
    for (int r = 0; r < 4; ++r)
        red[s * ON_S4 + (4 * rt + r) * ON_QV + ct] = acc[r];
    if (ct == 0) /* (every column piece summed the same rows) */
        redz[s * ON_KQ + rt] = zs;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < ON_S4; e += ON_WG) {
        float4 x = red[e];
        for (int j = 1; j < ON_KS; ++j)
            x += red[j * ON_S4 + e];
        sl[e] = x;
    }
    for (int e = lid; e < ON_KQ; e += ON_WG) {
        float4 x = redz[e];
        for (int j = 1; j < ON_KS; ++j)
            x += redz[j * ON_KQ + e];
        vstore4(x, e, zl);
    }
#else
    for (int r = 0; r < 4; ++r)
        sl[(4 * rt + r) * ON_QV + ct] = acc[r];
    if (ct == 0)
        vstore4(zs, rt, zl);
#endif

    /* Phase 2. Work-item: column piece ct2, tokens 4 rq.. of the pass. */
    const int ct2 = lid % ON_QV, rq = lid / ON_QV;
    const int c = c_base + 4 * ct2;
    global STORE_T *ob = out + row_base(g, bh, DV) + c;
    const long os = row_stride(g, DV);
    for (int p0 = 0; p0 < g.nb; p0 += ON_TQ) {
        for (int r = 0; r < 4; ++r)
            acc[r] = (float4)(0.0f);
#if NORMALIZER == 0
        float4 dots = (float4)(0.0f); /* q~ . z~ of the work-item's 4 tokens (each column piece's own) */
#endif
        for (int d0 = 0; d0 < ON_DK4; d0 += ON_DC) {
            /* the slices' sums and the last tile's q~ are read: the region takes this tile */
            barrier(CLK_LOCAL_MEM_FENCE);
            #pragma unroll
            for (int j = 0; j < ON_PQ; ++j) { /* transposed: dimension-major, 4 tokens a float4 */
                const int i = lid + j * ON_WG, t = i / ON_DQ, p = p0 + t;
                if (i < ON_TQ * ON_DQ) {
                    const float4 x = p < g.nb ? scale * tiled_feature_quad(qb + token_of(g, blk, p) * qs,
                                                                           d0 + 4 * (i - t * ON_DQ), DK, qa,
                                                                           feature_eps)
                                              : (float4)(0.0f);
                    tiled_put_column(ql, ON_LQ, 4 * (i - t * ON_DQ), t, x);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            const int dn = min(ON_DC, ON_DK4 - d0);
            for (int d = 0; d < dn; ++d) {
                const float4 a = ql[d * ON_LQ + rq];
                tiled_mad4x4(acc, a, sl[(d0 + d) * ON_QV + ct2]);
#if NORMALIZER == 0
                dots += a * zl[d0 + d];
#endif
            }
        }
        for (int r = 0; r < 4 && c < DV; ++r) {
            const int p = p0 + 4 * rq + r;
            if (p >= g.nb)
                break;
#if NORMALIZER == 0
            const float4 y = acc[r] / ((r == 0 ? dots.s0 : r == 1 ? dots.s1 : r == 2 ? dots.s2 : dots.s3) + eps);
#else
            const float4 y = acc[r];
#endif
            tiled_store(y, ob + token_of(g, blk, p) * os, DV - c, oa);
        }
    }
}
