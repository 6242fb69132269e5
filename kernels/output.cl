/* Stage 3 of non-causal MHLA: each token reads the mixed summary of its block and applies the
 * normalizer (paper, official or none), fused. Also the per-token dot products the official
 * normalizer mixes (q~ at position p of block b with z_b). */
#include "common.h"
#include "tiles.h"

/* Output rows written with streaming stores (-DOUT_NT=1, CPU rows, float storage): each output
 * line is written once and not read again here, and a normal store first reads the line from
 * memory, a third of the stage's traffic. The causal read-out (causal_output.cl), whose time goes
 * to its scores, gains nothing from them and keeps plain stores (docs/tuning-notes.md "Read-out").
 * The q rows are prefetched OUT_PF token groups ahead. */
#ifndef OUT_NT
#define OUT_NT 0
#endif
#ifndef OUT_PF
#define OUT_PF 0
#endif
#define STREAM_NT OUT_NT
#define STREAM_PF OUT_PF
#include "stream.h"

/* global: (OUT_NE rounded up, B*H, M*ceil(Nb/OUT_RT)): heads before token groups, so that the groups
 * a core runs one after another read neighbouring parts of the same q rows ([B,N,H,D]). Work-item
 * (column tile, token group) keeps
 * an OUT_RT x OUT_COLS register tile; every token of the group reads the same summary rows, and
 * each token's q row is read in contiguous OUT_DC-wide pieces. */
kernel void block_output(global const STORE_T *restrict q, global const float *restrict mixed,
                         global const float *restrict den, global STORE_T *restrict out, const mhla_grid g_arg,
                         const float feature_eps, const float scale, const float eps)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int et = (int)get_global_id(0);
    const int groups = (g.nb + OUT_RT - 1) / OUT_RT;
    const int blk = (int)get_global_id(2) / groups;
    const int p0 = ((int)get_global_id(2) - blk * groups) * OUT_RT;
    const int bh = (int)get_global_id(1);
    if (et >= OUT_NE || blk >= g.m)
        return;
    /* the mixed summary of this query head's key/value head (kernels/common.h, kv_of) */
    global const float *s = mixed + summary_s_offset(kv_count(g), blk, kv_of(g, bh), 0) + et * OUT_COLS;
    global const float *z = mixed + summary_z_offset(kv_count(g), blk, kv_of(g, bh));
    global const STORE_T *qrow[OUT_RT];
    int tok[OUT_RT];
    VEC(OUT_VE) acc[OUT_RT][OUT_NV];
    float dsum[OUT_RT]; /* q~ . z~ (paper normalizer) */
    global const STORE_T *qbase = q + row_base(g, bh, DK);
    token_walk w = walk_begin(g, blk, p0);
    #pragma unroll
    for (int r = 0; r < OUT_RT; ++r) {
        tok[r] = w.t;
        qrow[r] = qbase + w.t * row_stride(g, DK);
        #pragma unroll
        for (int j = 0; j < OUT_NV; ++j)
            acc[r][j] = (VEC(OUT_VE))(0.0f);
        if (p0 + r + 1 < g.nb) /* a missing token repeats the last one; its result is not stored */
            walk_next(g, &w);
    }
    /* without it every work-item meets the memory latency of its q rows alone */
    PREFETCH_AHEAD(g, p0, OUT_RT, qrow[0], row_stride(g, DK), DK);
    READOUT_TILE(qrow, s, z, scale, feature_eps, acc, dsum);
    const int nt = NT_OK(out, OUT_VE);
    for (int r = 0; r < OUT_RT && p0 + r < g.nb; ++r) {
#if NORMALIZER == 0
        const float inv = dsum[r] + eps;
#elif NORMALIZER == 1
        const float inv = den[((long)blk * g.bh + bh) * g.nb + p0 + r] + eps;
#endif
#if NORMALIZER != 2 && OUT_RT > 1
        /* Several tokens a work-item: one division a token, then multiplies, where the tile's
         * OUT_RT x OUT_NV divisions of whole vectors queued on the divider. With one token a
         * work-item (AVX2's 1 x 8) the vector divisions overlap and stay: a division's latency
         * ahead of every store cost more (docs/tuning-notes.md "Read-out"). */
        const float rden = 1.0f / inv;
#define OUT_NORMALIZED(x) ((x) * rden)
#elif NORMALIZER != 2
#define OUT_NORMALIZED(x) ((x) / inv)
#else
#define OUT_NORMALIZED(x) (x)
#endif
        global STORE_T *orow = out + row_base(g, bh, DV) + tok[r] * row_stride(g, DV) + et * OUT_COLS;
        #pragma unroll
        for (int j = 0; j < OUT_NV; ++j)
            NT_STOREN(OUT_VE, OUT_NORMALIZED(acc[r][j]), 0, orow + j * OUT_VE, nt);
#undef OUT_NORMALIZED
    }
    NT_FENCE(); /* kernels/stream.h: streaming stores are weakly ordered */
}

/* global: (M*Nb rounded up, B*H). dots[b][bh][p] = q~_{b,p} . z_b, mixed afterwards by the
 * same GEMM as the summaries into the official denominators. */
kernel void official_dots(global const STORE_T *restrict q, global const float *restrict summary,
                          global float *restrict dots, const mhla_grid g_arg, const float feature_eps,
                          const float scale)
{
    const mhla_grid g = g_arg; /* kernels/common.h: read the struct argument once, up front */
    const int ip = (int)get_global_id(0);
    const int bh = (int)get_global_id(1);
    if (ip >= g.m * g.nb)
        return;
    const int blk = ip / g.nb;
    const int p = ip - blk * g.nb;
    const int t = token_of(g, blk, p);
    global const STORE_T *qrow = q + row_offset(g, bh, t, DK);
    global const float *z = summary + summary_z_offset(kv_count(g), blk, kv_of(g, bh)); /* its key/value head's */
    float acc = 0.0f;
    for (int d = 0; d < DK; ++d)
        acc += scale * feature(LOADN(1, d, qrow), feature_eps) * z[d];
    dots[((long)blk * g.bh + bh) * g.nb + p] = acc;
}
