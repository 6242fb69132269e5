/* Shared by every MHLA kernel: specialization defaults, the token grid and block indexing of
 * SPEC.md, tensor offsets for both layouts, and the feature map. Valid OpenCL C 1.2. */
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

/* Columns of a block summary row: Dv values, then the key sum z (a value column of ones). */
#define SCOLS (DV + 1)

/* Sizes that vary per call without a rebuild. Only 32-bit ints, so the layout matches the host's
 * struct on every device. */
typedef struct mhla_grid {
    int n;            /* tokens per sequence */
    int heads;        /* H */
    int seq_h, seq_w; /* token grid extents (T is implied by n) */
    int pt, ph, pw;   /* tokens per block along t, h, w */
    int blk_h, blk_w; /* blocks along h, w */
    int nb;           /* tokens per block */
    int m;            /* blocks */
    int bh;           /* batch * heads */
} mhla_grid;

/* Token index n = (f*Hs + y)*Ws + x of position p inside block blk (SPEC.md "Token grid"). */
int token_of(const mhla_grid g, const int blk, const int p)
{
    const int bw_i = blk % g.blk_w;
    const int bh_i = (blk / g.blk_w) % g.blk_h;
    const int bt_i = blk / (g.blk_w * g.blk_h);
    const int px = p % g.pw;
    const int py = (p / g.pw) % g.ph;
    const int pf = p / (g.pw * g.ph);
    return ((bt_i * g.pt + pf) * g.seq_h + bh_i * g.ph + py) * g.seq_w + bw_i * g.pw + px;
}

/* Element offset of row (batch*heads + head, token) in a tensor with `dim` columns. 64-bit:
 * B*N*H*D can exceed 2^31. */
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

#endif /* MHLA_KERNELS_COMMON_H */
