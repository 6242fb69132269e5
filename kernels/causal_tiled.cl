/* Causal stage 3 on GPUs (the GPU rows' ct_sq): every token's output
 *   o_t = q~_t P_i + Mc[i,i] * sum_{s in chunk i, s <= t} (q~_t . k~_s) v_s
 * (the paper normalizer's denominator fused) with both products tiled through local memory, as
 * softmax_tiled.cl arranges attention without the softmax. A group owns CT_SQ tokens of one chunk
 * and every output column. Their q~ sits in local memory transposed (one float4 read serves 4
 * tokens). The inter-chunk part q~ P_i takes P_i's rows CT_BK at a time into local memory; the
 * intra-chunk part takes CT_BK keys at a time (k~ transposed, v as stored), each work-item
 * computes a 4-token x 4-key tile of scores, the masked ones set to zero and the rest scaled by
 * Mc[i,i], the tile goes to local memory transposed, and each work-item adds it times V into 4
 * tokens x 4 columns per column tile it owns. causal_output.cl, the CPU form, holds a token row
 * per work-item step and reads each staged element for one multiply-add; here each pair of float4
 * reads feeds 16. */
#include "causal.h"
#include "tiled.h"

#ifndef CT_SQ
#define CT_SQ 32 /* tokens per group (a multiple of 4) */
#endif
#ifndef CT_BK
#define CT_BK 16 /* keys, and rows of P_i, per local tile (a multiple of 4) */
#endif
#define CT_RQ (CT_SQ / 4)         /* token quads: work-items along the tokens */
#define CT_CQ (CT_BK / 4)         /* key quads: work-items along a token's row (one key quad each) */
#define CT_WG (CT_RQ * CT_CQ)
#define CT_DVP ((DV + 3) / 4 * 4) /* output columns padded to whole float4 (the pad is zero) */
#define CT_VQ (CT_DVP / 4)        /* column quads of a row */
#define CT_NV ((CT_VQ + CT_CQ - 1) / CT_CQ) /* column quads per work-item */
#define CT_LQ (CT_RQ + 1)         /* float4 per transposed token row, padded (the copy's stores spread) */
#define CT_LK (CT_CQ + 1)         /* float4 per transposed key row, padded */
/* P_i's rows start on 16 bytes where Dk and Dv are multiples of 4 (slot_s; a padded slot's length
 * is a multiple of 16 floats) */
#define CT_P_ALIGNED (DK % 4 == 0 && DV % 4 == 0)

/* acc[j] += a b_j over the work-item's column quads cq + CT_CQ j. */
void ct_mad_row(float4 acc[CT_NV][4], const float4 a, local const float4 *row, const int cq)
{
    #pragma unroll
    for (int j = 0; j < CT_NV; ++j)
        if (cq + CT_CQ * j < CT_VQ)
            tiled_mad4x4(acc[j], a, row[cq + CT_CQ * j]);
}

/* global: (CT_WG, B*H, chunks * tiles_per_chunk), local (CT_WG, 1, 1), as causal_output.cl's (the
 * host's chunk tables and slots). Work-item (key quad cq fastest, token quad rq): tokens 4 rq.. of
 * the group's, keys 4 cq.. of each key tile, column quads cq + CT_CQ j. Tokens past the chunk
 * compute on zeros and store nothing; keys past the group's last token are zeros. pref row c is
 * chunk entry c's P (its S part, then z). */
__attribute__((reqd_work_group_size(CT_WG, 1, 1)))
kernel void causal_output_tiled(CAUSAL_OUTPUT_ARGS)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    local float4 qt[DK * CT_LQ];        /* q~ of the group's tokens, transposed: qt[d][token quad] */
    local float4 kt[DK * CT_LK];        /* the key tile's k~, transposed: kt[d][key quad] */
    local float4 vt[CT_BK * CT_VQ];     /* the key tile's v, or CT_BK rows of P_i: [row][column quad] */
    local float4 pt[CT_BK * CT_LQ];     /* Mc[i,i] times the visible scores, transposed: [key][token quad] */
#if ZCOL
    local float red[CT_SQ * CT_CQ];     /* a token's parts of its scores' sum (its work-items') */
    local float dl[CT_SQ];              /* each token's denominator so far */
#else
    (void)eps;
#endif
    const int lid = (int)get_local_id(0), cq = lid % CT_CQ, rq = lid / CT_CQ;
    const int c = (int)get_group_id(2) / tiles_per_chunk;
    const int p0 = ((int)get_group_id(2) - c * tiles_per_chunk) * CT_SQ;
    const int bh = (int)get_group_id(1);
    const int4 ch = chunks[c];
    if (p0 >= ch.y)
        return; /* the whole group: a tile past the end of a short chunk */
    const int nq = min(CT_SQ, ch.y - p0), kend = p0 + nq; /* the group's tokens see keys 0 .. kend - 1 */
    const float mii = mixing[(long)ch.z * rows_mc + ch.z];
    /* q and out of query head row bh; k, v and the prefix of its key/value head (kv_of) */
    const long qstride = row_stride(g, DK), ostride = row_stride(g, DV);
    const long kstride = kv_row_stride(g, DK), vstride = kv_row_stride(g, DV);
    const int kvh = kv_of(g, bh), kvc = kv_count(g);
    const long qbase = row_base(g, bh, DK) + (ch.x + p0) * qstride;
    const long kbase = kv_row_base(g, bh, DK) + ch.x * kstride, vbase = kv_row_base(g, bh, DV) + ch.x * vstride;

    /* neighbouring work-items, neighbouring elements of a row */
    for (int i = lid; i < CT_SQ * DK; i += CT_WG) {
        const int r = i / DK, d = i - r * DK;
        ((local float *)qt)[d * 4 * CT_LQ + r] = r < nq ? scale * feature(LOADN(1, qbase + r * qstride + d, q), feature_eps)
                                                      : 0.0f;
    }
    float4 acc[CT_NV][4];
    #pragma unroll
    for (int j = 0; j < CT_NV; ++j)
        #pragma unroll
        for (int r = 0; r < 4; ++r)
            acc[j][r] = (float4)(0.0f);
    barrier(CLK_LOCAL_MEM_FENCE);

    /* q~ P_i: chunk 0 of a sequence has no prefix, and its P row is not read. */
    if (ch.z > 0) {
        global const float *P = pref + slot_s(c, kvh, kvc);
#if ZCOL
        global const float *zp = pref + slot_z(c, kvh, kvc);
        for (int r = lid; r < CT_SQ; r += CT_WG) { /* q~ . zP by the work-item that owns dl[r] */
            float x = 0.0f;
            for (int d = 0; d < DK; ++d)
                x += ((local const float *)qt)[d * 4 * CT_LQ + r] * zp[d];
            dl[r] = x;
        }
#endif
        for (int d0 = 0; d0 < DK; d0 += CT_BK) {
            for (int i = lid; i < CT_BK * CT_VQ; i += CT_WG) {
                const int e = i / CT_VQ, cc = 4 * (i - e * CT_VQ);
                vt[i] = d0 + e < DK ? tiled_quad_f32(P + (long)(d0 + e) * DV, cc, DV, CT_P_ALIGNED) : (float4)(0.0f);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = 0; e < CT_BK && d0 + e < DK; ++e)
                ct_mad_row(acc, qt[(d0 + e) * CT_LQ + rq], vt + e * CT_VQ, cq);
            barrier(CLK_LOCAL_MEM_FENCE); /* vt is overwritten next */
        }
    }
#if ZCOL
    else {
        for (int r = lid; r < CT_SQ; r += CT_WG)
            dl[r] = 0.0f;
    }
#endif

    /* The masked intra-chunk part over keys 0 .. kend - 1 of the chunk, CT_BK at a time. */
    const int t0 = p0 + 4 * rq; /* the work-item's first token, in the chunk */
    for (int kb = 0; kb < kend; kb += CT_BK) {
        for (int i = lid; i < CT_BK * DK; i += CT_WG) {
            const int j = i / DK, d = i - j * DK;
            ((local float *)kt)[d * 4 * CT_LK + j] =
                kb + j < kend ? feature(LOADN(1, kbase + (kb + j) * kstride + d, k), feature_eps) : 0.0f;
        }
        for (int i = lid; i < CT_BK * CT_DVP; i += CT_WG) {
            const int j = i / CT_DVP, e = i - j * CT_DVP;
            ((local float *)vt)[i] = kb + j < kend && e < DV ? LOADN(1, vbase + (kb + j) * vstride + e, v) : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        float4 sc[4];
        #pragma unroll
        for (int r = 0; r < 4; ++r)
            sc[r] = (float4)(0.0f);
        #pragma unroll 8
        for (int d = 0; d < DK; ++d)
            tiled_mad4x4(sc, qt[d * CT_LQ + rq], kt[d * CT_LK + cq]);
        /* Token t sees key s <= t: a masked score is replaced (not multiplied) by zero, so a later
         * key's NaN or Inf does not reach it. */
        const int key = kb + 4 * cq;
        #pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int t = t0 + r;
            const float4 p = (float4)(key <= t ? mii * sc[r].s0 : 0.0f, key + 1 <= t ? mii * sc[r].s1 : 0.0f,
                                      key + 2 <= t ? mii * sc[r].s2 : 0.0f, key + 3 <= t ? mii * sc[r].s3 : 0.0f);
#if ZCOL
            red[(4 * rq + r) * CT_CQ + cq] = (p.s0 + p.s1) + (p.s2 + p.s3);
#endif
            tiled_put_column(pt, CT_LQ, 4 * cq, 4 * rq + r, p);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if ZCOL
        for (int r = lid; r < CT_SQ; r += CT_WG) { /* parts in a fixed order */
            float x = dl[r];
            for (int j = 0; j < CT_CQ; ++j)
                x += red[r * CT_CQ + j];
            dl[r] = x;
        }
#endif
        /* P V. A key after one of the work-item's tokens is skipped for that token, not added as
         * zero times its v (a later token's NaN or Inf in v must not reach it): only on the
         * diagonal tile. */
        if (kb + CT_BK - 1 <= t0) {
            #pragma unroll 4
            for (int s = 0; s < CT_BK; ++s)
                ct_mad_row(acc, pt[s * CT_LQ + rq], vt + s * CT_VQ, cq);
        } else {
            for (int s = 0; s < CT_BK && kb + s <= t0 + 3; ++s) {
                const float4 a = pt[s * CT_LQ + rq];
                const int ks = kb + s;
                #pragma unroll
                for (int j = 0; j < CT_NV; ++j)
                    if (cq + CT_CQ * j < CT_VQ) {
                        const float4 b = vt[s * CT_VQ + cq + CT_CQ * j];
                        if (ks <= t0)
                            acc[j][0] += a.x * b;
                        if (ks <= t0 + 1)
                            acc[j][1] += a.y * b;
                        if (ks <= t0 + 2)
                            acc[j][2] += a.z * b;
                        acc[j][3] += a.w * b; /* ks <= t0 + 3: the loop's bound */
                    }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* kt, vt and pt are overwritten next; dl's sums are done */
    }

    global STORE_T *ob = out + row_base(g, bh, DV) + (ch.x + p0) * ostride;
    const int oa = (DV % 4 == 0) & TILED_BASE_OK(out);
    for (int r = 0; r < 4; ++r) {
        const int t = 4 * rq + r;
        if (t >= nq)
            break;
#if ZCOL
        const float den = dl[t] + eps;
#endif
        #pragma unroll
        for (int j = 0; j < CT_NV; ++j) {
            const int cc = 4 * (cq + CT_CQ * j);
            if (cc < DV) {
#if ZCOL
                tiled_store(acc[j][r] / den, ob + t * ostride + cc, DV - cc, oa);
#else
                tiled_store(acc[j][r], ob + t * ostride + cc, DV - cc, oa);
#endif
            }
        }
    }
}
