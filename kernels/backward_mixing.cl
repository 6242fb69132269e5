/* Backward of the mixing (docs/spec.md "Backward"): Mc^T, which the forward's mixing GEMM multiplies
 * the gradient summaries by (dS_b = sum_i Mc[i,b] G_i), and dMc[i,b] = sum over batch, heads and
 * summary entries of A_i . B_b (<G_i, S_b>, plus the official normalizer's r_i . dots_b). The sum
 * is split into chunks of `len` floats (the host's: at least 1024, so that 2*M rows of a chunk stay
 * in cache, and at least M, so that the partial sums, chunks x M x M floats, are no larger than a
 * summary row times M): each work-item takes a BWD_TM x BWD_TM tile of (i, b) over one chunk, and
 * bwd_dmixing_reduce adds the chunks' partial sums in chunk order. Every sum
 * has a fixed order and no atomics are used: bit-identical run to run. */
#include "common.h"
#include "backward.h"

#ifndef BWD_TM
#define BWD_TM 4 /* rows of A (and of B) per work-item: BWD_TM^2 accumulator vectors of BWD_VW (dmix_tm) */
#endif

/* global: (M, K). dst[b][i] = src[i][b]: src M x K with leading dimension lda, dst K x M (Mc^T; Mc
 * is M x M_kv for cross-attention). */
kernel void bwd_transpose(global const float *restrict src, global float *restrict dst, const int m, const int k,
                          const int lda)
{
    const int i = (int)get_global_id(0), b = (int)get_global_id(1);
    if (i < m && b < k)
        dst[(long)b * m + i] = src[(long)i * lda + b];
}

/* The operands of partial sum c: chunks 0 .. chunks1 - 1 are the first pair's (a, bm: rows of x
 * floats from `off`, a causal plan's sequence starting at its first slot), the chunks after them the
 * second pair's (a2, bm2: rows of x2 floats; the official normalizer's r and dots, whose products
 * add to the same dMc). Chunk k of a pair covers its x-values [k*len, (k+1)*len). */
#define DMIX_PAIR(c_)                                                                                  \
    const int second = (c_) >= chunks1;                                                                \
    global const float *a = (second ? a2_arg : a_arg) + off, *bm = (second ? bm2_arg : bm_arg) + off; \
    const long x = second ? x2 : x_arg;                                                                \
    const long x0 = (long)((c_) - (second ? chunks1 : 0)) * len, x1 = min(x0 + len, x)
/* Every form's arguments, as host/backward/dmixing.c sets them. */
#define DMIX_ARGS                                                                                      \
    global const float *restrict a_arg, global const float *restrict bm_arg, global float *restrict part, \
        const long x_arg, const int rows, const int cols, const long len, const long off, const int lower, \
        global const float *restrict a2_arg, global const float *restrict bm2_arg, const long x2,       \
        const int chunks1

/* global: (ceil(cols/BWD_TM), ceil(rows/BWD_TM), chunks). part[(c*rows + i)*cols + b] = sum of
 * a[i][x] * bm[b][x] over chunk c's x (DMIX_PAIR), lanes added last as a tree of
 * halves (BWD_HSUM: a chunk is short, so 16 lanes added one after another weighed on every chunk;
 * docs/tuning-notes.md "Causal backward"). Rows past the last repeat it (their sums are not
 * stored), so every work-item runs the same loop. `lower` (the causal form, whose dMc is lower triangular): tiles with
 * no pair b < i store zeros instead. */
kernel void bwd_dmixing_part(DMIX_ARGS)
{
    const int b0 = (int)get_global_id(0) * BWD_TM, i0 = (int)get_global_id(1) * BWD_TM, c = (int)get_global_id(2);
    DMIX_PAIR(c);
    if (b0 >= cols || i0 >= rows || x0 >= x) /* the launch is rounded up to whole groups */
        return;
    if (lower && b0 >= i0 + BWD_TM) {
        for (int r = 0; r < BWD_TM && i0 + r < rows; ++r)
            for (int s = 0; s < BWD_TM && b0 + s < cols; ++s)
                part[((long)c * rows + i0 + r) * cols + b0 + s] = 0.0f;
        return;
    }
    global const float *ar[BWD_TM], *br[BWD_TM];
    VEC(BWD_VW) acc[BWD_TM][BWD_TM];
    #pragma unroll
    for (int r = 0; r < BWD_TM; ++r) {
        ar[r] = a + (long)min(i0 + r, rows - 1) * x + x0;
        br[r] = bm + (long)min(b0 + r, cols - 1) * x + x0;
        #pragma unroll
        for (int s = 0; s < BWD_TM; ++s)
            acc[r][s] = (VEC(BWD_VW))(0.0f);
    }
    const int nvec = (int)((x1 - x0) / BWD_VW);
    for (int j = 0; j < nvec; ++j) {
        VEC(BWD_VW) av[BWD_TM], bv[BWD_TM];
        #pragma unroll
        for (int r = 0; r < BWD_TM; ++r) {
            av[r] = VLOADN(BWD_VW, j, ar[r]);
            bv[r] = VLOADN(BWD_VW, j, br[r]);
        }
        #pragma unroll
        for (int r = 0; r < BWD_TM; ++r)
            #pragma unroll
            for (int s = 0; s < BWD_TM; ++s)
                acc[r][s] += av[r] * bv[s];
    }
    for (int r = 0; r < BWD_TM && i0 + r < rows; ++r)
        for (int s = 0; s < BWD_TM && b0 + s < cols; ++s) {
            float sum = BWD_HSUM(BWD_VW, acc[r][s]);
            for (long j = x0 + (long)nvec * BWD_VW; j < x1; ++j)
                sum += ar[r][j - x0] * br[s][j - x0];
            part[((long)c * rows + i0 + r) * cols + b0 + s] = sum;
        }
}

#ifdef DM_T
/* The same partial sums by work-group tiles (GPUs: dm_t): a group of (DM_T/4)^2 work-items owns
 * DM_T rows of a and DM_T rows of bm over chunk c's x, brings DM_K x-values of each row at a time
 * into local memory (consecutive work-items read consecutive floats of a row), stored across (x
 * by row, padded to keep float4 reads aligned and the stores spread over the banks), and each
 * work-item adds 4 x 4 products of its rows per x-value in x order. bwd_dmixing_part's work-items
 * each read their own 8 rows straight from memory: on a GPU, neighbours far apart and long
 * chains. global: (ceil(cols/DM_T) * DM_T/4, ceil(rows/DM_T) * DM_T/4, chunks); local: (DM_T/4,
 * DM_T/4, 1). `lower`: tiles with no pair b < i store zeros, as bwd_dmixing_part's. */
#define DM_K 16         /* x-values per local tile (host/tune/tune.h's MHLA_DM_K) */
#define DM_W (DM_T / 4) /* work-items along each side of the tile */
#define DM_LD (DM_T + 4) /* floats per x-value in the local tiles */
kernel void bwd_dmixing_tiled(DMIX_ARGS)
{
    local float as[DM_K * DM_LD], bs[DM_K * DM_LD];
    const int tb = (int)get_local_id(0), ti = (int)get_local_id(1), lid = ti * DM_W + tb;
    const int b0 = (int)get_group_id(0) * DM_T, i0 = (int)get_group_id(1) * DM_T, c = (int)get_group_id(2);
    DMIX_PAIR(c); /* the same for the whole group */
    const int ib = b0 + 4 * tb, ii = i0 + 4 * ti; /* this work-item's first column and row */
    float4 acc[4] = {(float4)(0.0f), (float4)(0.0f), (float4)(0.0f), (float4)(0.0f)};
    if (!(lower && b0 >= i0 + DM_T)) { /* the same for the whole group: its barriers are all or none */
        for (long xk = x0; xk < x1; xk += DM_K) {
            for (int e = lid; e < DM_T * DM_K; e += DM_W * DM_W) {
                const int row = e / DM_K, kx = e - row * DM_K;
                const long xx = xk + kx;
                as[kx * DM_LD + row] = i0 + row < rows && xx < x1 ? a[(long)(i0 + row) * x + xx] : 0.0f;
                bs[kx * DM_LD + row] = b0 + row < cols && xx < x1 ? bm[(long)(b0 + row) * x + xx] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kx = 0; kx < DM_K; ++kx) {
                const float4 av = vload4(ti, as + kx * DM_LD), bv = vload4(tb, bs + kx * DM_LD);
                acc[0] += av.s0 * bv;
                acc[1] += av.s1 * bv;
                acc[2] += av.s2 * bv;
                acc[3] += av.s3 * bv;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    for (int r = 0; r < 4 && ii + r < rows; ++r) {
        global float *out = part + ((long)c * rows + ii + r) * cols;
        const float v[4] = {acc[r].s0, acc[r].s1, acc[r].s2, acc[r].s3};
        for (int s = 0; s < 4 && ib + s < cols; ++s)
            out[ib + s] = v[s];
    }
}
#endif

/* global: (cols, rows): out[i*ldo + b] (+= when accumulate) = the sum of the chunks' partial sums,
 * in chunk order. */
kernel void bwd_dmixing_reduce(global const float *restrict part, global float *restrict out, const int rows,
                               const int cols, const int chunks, const int ldo, const int accumulate)
{
    const int b = (int)get_global_id(0), i = (int)get_global_id(1);
    if (b >= cols || i >= rows)
        return;
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c)
        sum += part[((long)c * rows + i) * cols + b];
    out[(long)i * ldo + b] = accumulate ? out[(long)i * ldo + b] + sum : sum;
}
