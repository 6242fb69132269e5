/* Backward of non-causal MHLA, the per-block stage (docs/spec.md "Backward"): the official normalizer's
 * z column of dS (the gradient summaries G_i = sum_{t in i} q~_t [dO_t / den_t | dL/dden_t]^T come
 * from the forward's summary kernel, weighted: kernels/block_summary.cl); and summaries transposed
 * for the read-outs.
 * Sums run in token order: results are bit-identical run to run. */
#include "common.h"
#include "backward.h"

/* global: (ceil(DK / 4), B*H, M). The S part of a summary row, transposed into rows of
 * B*H*DV*(DK+1) floats, S^T as [B*H][DV][DK], so that the backward's read-outs
 * (kernels/backward_readout.cl) compute S x for a token's Dv-vector x (dq's S~ dO_t, dk's dS v_s)
 * from contiguous rows. Work-item (d0 / 4, bh, blk) turns rows d0 .. d0 + 3 of S into columns,
 * four neighbours of each row of S^T at a time: one work-item per row of S^T with a loop over d
 * made CPU runtimes gather across work-items (docs/tuning-notes.md "Backward"). A last group of
 * fewer than four rows (DK % 4 != 0) goes one float at a time. */
kernel void bwd_transpose_summary(global const float *restrict src, global float *restrict dst, const mhla_grid g_arg)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int d0 = (int)get_global_id(0) * 4, bh = (int)get_global_id(1), blk = (int)get_global_id(2);
    if (d0 >= DK || bh >= g.bh || blk >= g.m)
        return;
    global const float *s = src + summary_s_offset(g.bh, blk, bh, d0);
    global float *t = dst + (long)blk * g.bh * DV * (DK + 1) + (long)bh * DV * DK + d0;
    if (d0 + 4 <= DK) {
        for (int e = 0; e < DV; ++e) {
            const float4 col = (float4)(s[e], s[DV + e], s[2 * DV + e], s[3 * DV + e]);
            vstore4(col, 0, t + (long)e * DK);
        }
    } else {
        for (int d = 0; d0 + d < DK; ++d)
            for (int e = 0; e < DV; ++e)
                t[(long)e * DK + d] = s[(long)d * DV + e];
    }
}

/* global: (row of B*H_kv*DK*(DV+1) floats, M). Grouped key/value heads: a key/value head's
 * gradient summary is the sum of its H / H_kv query heads' (they all read its mixed summary), added
 * in head order into the rows of B*H_kv heads that the mixing's backward reads. `g` is the query
 * grid (bh = B*H; kv_heads = H_kv). */
kernel void bwd_group_sum(global const float *restrict src, global float *restrict dst, const mhla_grid g_arg)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int kvc = kv_count(g), group = g.heads / g.kv_heads;
    const long x = (long)get_global_id(0), s_len = (long)kvc * DK * DV;
    const int blk = (int)get_global_id(1);
    if (x >= summary_row_len(kvc) || blk >= g.m)
        return;
    const int in_s = x < s_len;
    const long within = in_s ? x : x - s_len, per_head = in_s ? DK * DV : DK;
    const int kvh = (int)(within / per_head);
    const long rest = within - (long)kvh * per_head;
    const int batch = kvh / g.kv_heads, first = batch * g.heads + (kvh - batch * g.kv_heads) * group;
    global const float *row = src + (long)blk * summary_row_len(g.bh) + (in_s ? 0 : (long)g.bh * DK * DV) + rest;
    float acc = 0.0f;
    for (int j = 0; j < group; ++j)
        acc += row[(long)(first + j) * per_head];
    dst[(long)blk * summary_row_len(kvc) + x] = acc;
}

/* Grouped key/value heads in the causal backward, which runs on H heads: k or v (`dim` columns, H_kv
 * heads) copied to every query head that reads it (global (dim, N, B*H)), and the H heads' dk or dv
 * summed, in head order, into each key/value head's (global (dim, N, B*H_kv)). `g` is the query
 * grid (heads H, kv_heads H_kv). */
kernel void bwd_kv_expand(global const STORE_T *restrict src, global STORE_T *restrict dst, const mhla_grid g_arg,
                          const int dim)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int e = (int)get_global_id(0), t = (int)get_global_id(1), bh = (int)get_global_id(2);
    if (e >= dim || t >= g.n || bh >= g.bh)
        return;
    const float x = LOADN(1, kv_row_base(g, bh, dim) + (long)t * kv_row_stride(g, dim) + e, src);
    STOREN(1, x, row_offset(g, bh, t, dim) + e, dst);
}

kernel void bwd_kv_sum(global const STORE_T *restrict src, global STORE_T *restrict dst, const mhla_grid g_arg,
                       const int dim)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int e = (int)get_global_id(0), t = (int)get_global_id(1), kvh = (int)get_global_id(2);
    const int group = g.heads / g.kv_heads;
    if (e >= dim || t >= g.n || kvh >= kv_count(g))
        return;
    const int batch = kvh / g.kv_heads, first = batch * g.heads + (kvh - batch * g.kv_heads) * group;
    float acc = 0.0f;
    for (int j = 0; j < group; ++j)
        acc += LOADN(1, row_offset(g, first + j, t, dim) + e, src);
    STOREN(1, acc, kv_row_base(g, first, dim) + (long)t * kv_row_stride(g, dim) + e, dst);
}

/* global: (DK / BWD_VK, B*H, M * parts). The official normalizer's terms through R = Mc^T r (the
 * rows of the denominators that read block b's queries), read per token with the query rows:
 *   dz_b = sum_p w_{b,p} q~_{b,p}, the z column of dS, in parts, w = scale R;
 *   dq_{b,p} += w_{b,p} phi'(q_{b,p}) z_b (z_b the block's unmixed key sum, of its key/value head),
 *     over the dq the read-out wrote (one launch fewer than a kernel of its own, and q read once).
 * Work-item (j, bh, blk * parts + part) takes vector j of the rows of tokens
 * [part * part_len, +part_len) of the block, in token order, and writes its sum into its slot of
 * `partial` ([parts][M][B*H][DK]); bwd_official_dz_sum adds the parts. Why parts: one work-item per
 * (block, head) over all of a block's tokens leaves a GPU a handful of work-items at M = 1 (linear
 * attention; docs/tuning-notes.md "On GPUs"). */
kernel void bwd_official_dz_part(global const STORE_T *restrict q, global const float *restrict rmix,
                                 global const float *restrict summary, global STORE_T *restrict dq,
                                 global float *restrict partial, const mhla_grid g_arg, const float feature_eps,
                                 const float scale, const int parts, const int part_len)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int j = (int)get_global_id(0), bh = (int)get_global_id(1), bp = (int)get_global_id(2);
    if (j >= DK / BWD_VK || bh >= g.bh || bp >= g.m * parts)
        return;
    const int blk = bp / parts, part = bp % parts;
    const int p0 = part * part_len, p1 = min(g.nb, p0 + part_len);
    global const STORE_T *qbase = q + row_base(g, bh, DK);
    global STORE_T *dqbase = dq + row_base(g, bh, DK);
    const long qs = row_stride(g, DK), at0 = ((long)blk * g.bh + bh) * g.nb;
    const VEC(BWD_VK) z = VLOADN(BWD_VK, j, summary + summary_z_offset(kv_count(g), blk, kv_of(g, bh)));
    VEC(BWD_VK) acc = (VEC(BWD_VK))(0.0f);
    if (p0 < p1) {
        token_walk w = walk_begin(g, blk, p0);
        for (int p = p0; p < p1; ++p) {
            const float wt = rmix[at0 + p] * scale;
            const VEC(BWD_VK) x = LOADN(BWD_VK, j, qbase + w.t * qs);
            acc += wt * FEATURE_V(BWD_VK, x, feature_eps);
            global STORE_T *dqrow = dqbase + w.t * qs;
            STOREN(BWD_VK, LOADN(BWD_VK, j, dqrow) + wt * FEATURE_GRAD_V(BWD_VK, x) * z, j, dqrow);
            if (p + 1 < p1)
                walk_next(g, &w);
        }
    }
    VSTOREN(BWD_VK, acc, j, partial + (((long)part * g.m + blk) * g.bh + bh) * DK);
}

/* global: (DK / BWD_VK, B*H_kv, M). The parts' sums of the query heads that share a key/value head
 * (one but for grouped heads), added in part order, then head order (bit-identical run to run),
 * written over that head's z column. */
kernel void bwd_official_dz_sum(global const float *restrict partial, global float *restrict dsum, const mhla_grid g_arg,
                                const int parts)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int j = (int)get_global_id(0), kvh = (int)get_global_id(1), blk = (int)get_global_id(2);
    const int group = g.heads / g.kv_heads, batch = kvh / g.kv_heads;
    const int first = batch * g.heads + (kvh - batch * g.kv_heads) * group;
    if (j >= DK / BWD_VK || kvh >= kv_count(g) || blk >= g.m)
        return;
    VEC(BWD_VK) acc = (VEC(BWD_VK))(0.0f);
    for (int part = 0; part < parts; ++part)
        for (int h = 0; h < group; ++h)
            acc += VLOADN(BWD_VK, j, partial + (((long)part * g.m + blk) * g.bh + first + h) * DK);
    VSTOREN(BWD_VK, acc, j, dsum + summary_z_offset(kv_count(g), blk, kvh));
}
