/* Shared by every MHLA kernel: specialization defaults, the token grid and block indexing of
 * docs/spec.md, tensor offsets for both layouts, and the feature map. Valid OpenCL C 1.2. */
#ifndef MHLA_KERNELS_COMMON_H
#define MHLA_KERNELS_COMMON_H

/* Specializations (set by the host with -D; each has a default so the file compiles alone). */
#ifndef DK
#define DK 64 /* query/key head dimension */
#endif
#ifndef DV
#define DV 64 /* value head dimension */
#endif
#ifndef LAYOUT_BHND
#define LAYOUT_BHND 0 /* 0: [B,N,H,D]; 1: [B,H,N,D] */
#endif
#ifndef FEATURE_MAP
#define FEATURE_MAP 2 /* 0 none, 1 relu, 2 relu-eps, 3 elu1 (mhla_feature_map) */
#endif
#ifndef NORMALIZER
#define NORMALIZER 0 /* 0 paper, 1 official, 2 none (mhla_normalizer) */
#endif

/* Vectors of a chosen width W in {1, 2, 4, 8, 16}: VEC(W) is the type, VLOADN/VSTOREN load and
 * store one at element offset `o * W` (unaligned accesses are allowed, as with vloadn). */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define VEC_1 float
#define VEC_2 float2
#define VEC_4 float4
#define VEC_8 float8
#define VEC_16 float16
#define VEC(W) CAT(VEC_, W)
#define VLOAD_1(o, p) ((p)[o])
#define VLOAD_2(o, p) vload2(o, p)
#define VLOAD_4(o, p) vload4(o, p)
#define VLOAD_8(o, p) vload8(o, p)
#define VLOAD_16(o, p) vload16(o, p)
#define VLOADN(W, o, p) CAT(VLOAD_, W)(o, p)
#define VSTORE_1(x, o, p) ((p)[o] = (x))
#define VSTORE_2(x, o, p) vstore2(x, o, p)
#define VSTORE_4(x, o, p) vstore4(x, o, p)
#define VSTORE_8(x, o, p) vstore8(x, o, p)
#define VSTORE_16(x, o, p) vstore16(x, o, p)
#define VSTOREN(W, x, o, p) CAT(VSTORE_, W)(x, o, p)

/* Storage of q, k, v and the output (-DDTYPE, mhla_dtype): 0 float, 1 IEEE half through the
 * core vload_half/vstore_half (no cl_khr_fp16 needed), 2 bfloat16 as ushort, widened by a shift
 * and narrowed with round-to-nearest-even. Arithmetic and the workspace are float throughout.
 * LOADN(W, o, p) reads W elements at p + o*W as VEC(W); STOREN(W, x, o, p) writes them. */
#ifndef DTYPE
#define DTYPE 0
#endif
#if DTYPE == 0
#define STORE_T float
#define LOADN(W, o, p) VLOADN(W, o, p)
#define STOREN(W, x, o, p) VSTOREN(W, x, o, p)
#elif DTYPE == 1
#define STORE_T half
#define LOADH_1(o, p) vload_half(o, p)
#define LOADH_2(o, p) vload_half2(o, p)
#define LOADH_4(o, p) vload_half4(o, p)
#define LOADH_8(o, p) vload_half8(o, p)
#define LOADH_16(o, p) vload_half16(o, p)
#define STOREH_1(x, o, p) vstore_half_rte(x, o, p)
#define STOREH_2(x, o, p) vstore_half2_rte(x, o, p)
#define STOREH_4(x, o, p) vstore_half4_rte(x, o, p)
#define STOREH_8(x, o, p) vstore_half8_rte(x, o, p)
#define STOREH_16(x, o, p) vstore_half16_rte(x, o, p)
#define LOADN(W, o, p) CAT(LOADH_, W)(o, p)
#define STOREN(W, x, o, p) CAT(STOREH_, W)(x, o, p)
#else
#define STORE_T ushort
float bf16_load_1(const size_t o, global const ushort *p) { return as_float((uint)p[o] << 16); }
ushort bf16_round_1(const float x)
{
    const uint u = as_uint(x);
    return (ushort)(isnan(x) ? (u >> 16) | 0x40u : (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
void bf16_store_1(const float x, const size_t o, global ushort *p) { p[o] = bf16_round_1(x); }
/* Vectors as macros, not functions: a function taking or returning a vector wider than the
 * device's registers changes the calling convention (clang warns for float16 on AVX2 CPUs). The
 * stored value `x` is evaluated more than once: pass an expression without side effects. */
#define BF16_LOADV(W, o, p) CAT(as_float, W)(CAT(convert_uint, W)(CAT(vload, W)(o, p)) << 16)
#define BF16_ROUNDV(u, nan) select(((u) + 0x7FFFu + (((u) >> 16) & 1u)) >> 16, ((u) >> 16) | 0x40u, nan)
#define BF16_STOREV(W, x, o, p)                                                                     \
    CAT(vstore, W)(CAT(convert_ushort, W)(BF16_ROUNDV(CAT(as_uint, W)(x), CAT(convert_uint, W)(isnan(x)))), o, p)
#define BF16_LOAD_1(o, p) bf16_load_1(o, p)
#define BF16_LOAD_2(o, p) BF16_LOADV(2, o, p)
#define BF16_LOAD_4(o, p) BF16_LOADV(4, o, p)
#define BF16_LOAD_8(o, p) BF16_LOADV(8, o, p)
#define BF16_LOAD_16(o, p) BF16_LOADV(16, o, p)
#define BF16_STORE_1(x, o, p) bf16_store_1(x, o, p)
#define BF16_STORE_2(x, o, p) BF16_STOREV(2, x, o, p)
#define BF16_STORE_4(x, o, p) BF16_STOREV(4, x, o, p)
#define BF16_STORE_8(x, o, p) BF16_STOREV(8, x, o, p)
#define BF16_STORE_16(x, o, p) BF16_STOREV(16, x, o, p)
#define LOADN(W, o, p) CAT(BF16_LOAD_, W)(o, p)
#define STOREN(W, x, o, p) CAT(BF16_STORE_, W)(x, o, p)
#endif

/* Block summaries live in one buffer of M rows, one row per block, so that the mixing is a single
 * SGEMM over rows: each row holds S for every (batch*head, d) as Dv contiguous floats (aligned
 * rows for vector loads), then the key sums z for every (batch*head, d). */
long summary_row_len(const int bh_count)
{
    return (long)bh_count * DK * (DV + 1);
}
long summary_s_offset(const int bh_count, const int blk, const int bh, const int d)
{
    return (long)blk * summary_row_len(bh_count) + ((long)bh * DK + d) * DV;
}
long summary_z_offset(const int bh_count, const int blk, const int bh)
{
    return (long)blk * summary_row_len(bh_count) + (long)bh_count * DK * DV + (long)bh * DK;
}

/* The token grid every kernel takes by value (grid.h: the host includes the same definition). */
#include "grid.h"

/* Grouped key/value heads: the summaries hold B*H_kv heads, and query head row bh (batch-major)
 * reads the one of kv head h / (H / H_kv). The identity where H_kv = H. */
int kv_count(const mhla_grid g)
{
    return g.bh / g.heads * g.kv_heads;
}
int kv_of(const mhla_grid g, const int bh)
{
    const int batch = bh / g.heads;
    return batch * g.kv_heads + (bh - batch * g.heads) / (g.heads / g.kv_heads);
}

/* Software prefetch for CPU runtimes (-DPREFETCH=1, the CPU tuning rows): loads one element of
 * every 64-byte line of n rows of `dim` elements, `stride` apart, into a volatile sink. A group's
 * first work-item calls it for what the group reads next (block_summary.cl; faster for the
 * summary, slower for the output's q rows: docs/tuning-notes.md "Block summary", "Read-out").
 * PoCL's prefetch() is a no-op, and in [B,N,H,D] tensors one head's rows lie H*D elements apart
 * (2 KB for H = 8, D = 64), a stride the hardware prefetchers do not follow across pages, so the
 * group's own loads would meet the memory latency one line at a time; here they go out together.
 * clang's __builtin_prefetch in their place (non-blocking) was no faster in the summary's old form;
 * the summary's sum_lk form asks for its next chunk with it (prefetch_rows, -DPREFETCH=2 where the
 * host allows the builtin). */
#ifndef PREFETCH
#define PREFETCH 0
#endif
void touch_rows(global const STORE_T *row, const long stride, const int n, const int dim)
{
    volatile float sink;
    const int step = 64 / (int)sizeof(STORE_T);
    for (int i = 0; i < n; ++i, row += stride)
        for (int d = 0; d < dim; d += step)
            sink = LOADN(1, d, row);
}

/* A prefetch instruction for every 64-byte line of n rows of dim elements `stride` apart from
 * `row` (clang's builtin). A macro, not a function: only its users' switches (PREFETCH 2, stream.h's
 * STREAM_PF) may put the intrinsic into a program, since Oclgrind aborts on it and rusticl's SPIR-V
 * translator rejects it; the host turns them on only where kernels become native code (PoCL's CPU
 * device). */
#define PREFETCH_LINES(row, stride, n, dim)                                                         \
    do {                                                                                            \
        for (int i_ = 0; i_ < (n); ++i_)                                                            \
            for (int d_ = 0; d_ < (dim); d_ += 64 / (int)sizeof(STORE_T))                           \
                __builtin_prefetch((const global void *)((row) + (long)i_ * (stride) + d_), 0, 3); \
    } while (0)

/* touch_rows' lines as prefetch instructions (PREFETCH 2), else touch_rows itself. */
void prefetch_rows(global const STORE_T *row, const long stride, const int n, const int dim)
{
#if PREFETCH >= 2 && defined(__clang__)
    PREFETCH_LINES(row, stride, n, dim);
#else
    touch_rows(row, stride, n, dim);
#endif
}

/* Token index n = (f*Hs + y)*Ws + x of position p inside block blk (docs/spec.md
 * "Token grid and blocks"). */
int token_of(const mhla_grid g, const int blk, const int p)
{
    /* Blocks of whole frames (every 1D block) are runs of consecutive tokens: no divisions, which
     * cost as much as a read-out tile's first hundred multiply-adds on CPUs. */
    if (g.run == g.nb)
        return blk * g.nb + p;
    const int bw_i = blk % g.blk_w;
    const int bh_i = (blk / g.blk_w) % g.blk_h;
    const int bt_i = blk / (g.blk_w * g.blk_h);
    const int px = p % g.pw;
    const int py = (p / g.pw) % g.ph;
    const int pf = p / (g.pw * g.ph);
    return ((bt_i * g.pt + pf) * g.seq_h + bh_i * g.ph + py) * g.seq_w + bw_i * g.pw + px;
}

/* Visits the tokens of one block in position order with additions only: inner loops must not
 * pay token_of's divisions per token. */
typedef struct token_walk {
    int t;      /* current token index */
    int px, py; /* position inside the block along w and h */
} token_walk;

token_walk walk_begin(const mhla_grid g, const int blk, const int p)
{
    token_walk w;
    w.t = token_of(g, blk, p);
    /* Blocks of whole frames: walk_next only counts up (its row and frame steps add 0). */
    w.px = g.run == g.nb ? 0 : p % g.pw;
    w.py = g.run == g.nb ? 0 : (p / g.pw) % g.ph;
    return w;
}

void walk_next(const mhla_grid g, token_walk *w)
{
    ++w->t;
    if (++w->px == g.pw) {
        w->px = 0;
        w->t += g.seq_w - g.pw; /* start of the block's next row */
        if (++w->py == g.ph) {
            w->py = 0;
            w->t += (g.seq_h - g.ph) * g.seq_w; /* the block's next frame */
        }
    }
}

/* Offset of token 0 of (batch*heads + head) and the distance between consecutive tokens, in a
 * tensor with `dim` columns: row (bh, t) starts at row_base + t * row_stride. 64-bit: B*N*H*D
 * can exceed 2^31. */
long row_base(const mhla_grid g, const int bh, const int dim)
{
#if LAYOUT_BHND
    return (long)bh * g.n * dim;
#else
    const int batch = bh / g.heads;
    return ((long)batch * g.n * g.heads + (bh - batch * g.heads)) * dim;
#endif
}

long row_stride(const mhla_grid g, const int dim)
{
#if LAYOUT_BHND
    (void)g;
    return dim;
#else
    return (long)g.heads * dim;
#endif
}

/* Element offset of row (batch*heads + head, token) in a tensor with `dim` columns. */
long row_offset(const mhla_grid g, const int bh, const int token, const int dim)
{
#if LAYOUT_BHND
    return ((long)bh * g.n + token) * dim;
#else
    const int batch = bh / g.heads;
    const int head = bh - batch * g.heads;
    return (((long)batch * g.n + token) * g.heads + head) * dim;
#endif
}

/* The k and v rows query head row bh reads, in tensors of H_kv heads (and the grid's n tokens:
 * the causal modes, whose keys are the queries' tokens): row_base and row_stride of that head. */
long kv_row_base(const mhla_grid g, const int bh, const int dim)
{
    mhla_grid kg = g;
    kg.heads = g.kv_heads;
    return row_base(kg, kv_of(g, bh), dim);
}
long kv_row_stride(const mhla_grid g, const int dim)
{
    mhla_grid kg = g;
    kg.heads = g.kv_heads;
    return row_stride(kg, dim);
}

/* phi(x). Written with comparisons rather than fmax so that NaN propagates (fmax(NaN, 0) = 0). */
float feature(const float x, const float feature_eps)
{
#if FEATURE_MAP == 0
    (void)feature_eps;
    return x;
#elif FEATURE_MAP == 1
    (void)feature_eps;
    return x < 0.0f ? 0.0f : x;
#elif FEATURE_MAP == 2
    return (x < 0.0f ? 0.0f : x) + feature_eps;
#else
    (void)feature_eps;
    return x > 0.0f ? x + 1.0f : exp(x); /* elu(x) + 1 = exp(x) for x <= 0, without cancellation */
#endif
}

/* phi on a vector of width W, as `feature` does per element (select keeps NaN: NaN < 0 is false).
 * `x` must be a plain variable: it is evaluated more than once. */
#if FEATURE_MAP == 0
#define FEATURE_V(W, x, feature_eps) (x)
#elif FEATURE_MAP == 1
#define FEATURE_V(W, x, feature_eps) select((x), (VEC(W))(0.0f), (x) < (VEC(W))(0.0f))
#elif FEATURE_MAP == 2
#define FEATURE_V(W, x, feature_eps) (select((x), (VEC(W))(0.0f), (x) < (VEC(W))(0.0f)) + (feature_eps))
#else
#define FEATURE_V(W, x, feature_eps) select(exp(x), (x) + 1.0f, (x) > (VEC(W))(0.0f))
#endif

/* A step of scores: acc[r][c] += x[r * xstride + d] * (W floats at y + d * ystride + c * W) over
 * d < dx, SR rows by SK vectors, SR * SK independent multiply-add chains (one chain waits out the
 * multiply-add's latency at every d on a CPU: causal_output.cl, backward_causal_readout.cl). A
 * macro, not a function: PoCL keeps a tile in registers only when its loop is written inline. */
#define SCORE_STEPS(W, SR, SK, acc, dx, x, xstride, y, ystride)                                     \
    for (int d_ = 0; d_ < (dx); ++d_) {                                                             \
        VEC(W) y_[SK];                                                                              \
        _Pragma("unroll") for (int c_ = 0; c_ < (SK); ++c_)                                         \
            y_[c_] = VLOADN(W, 0, (y) + d_ * (ystride) + c_ * (W));                                 \
        _Pragma("unroll") for (int r_ = 0; r_ < (SR); ++r_) {                                       \
            const float x_ = (x)[r_ * (xstride) + d_];                                              \
            _Pragma("unroll") for (int c_ = 0; c_ < (SK); ++c_)                                     \
                (acc)[r_][c_] += x_ * y_[c_];                                                       \
        }                                                                                           \
    }

#endif /* MHLA_KERNELS_COMMON_H */
