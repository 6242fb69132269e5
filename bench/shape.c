/* What a row of mhla-bench runs on, below every op: its shape (token grid, block grid or chunks,
 * head sizes) and the paper's rule for the number of blocks M, the library configuration and the
 * mixing matrix of the shape, and the random values of its inputs. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>

int bench_shape_same_sizes(const bench_shape *a, const bench_shape *b)
{
    return a->batch == b->batch && a->heads == b->heads && a->dk == b->dk && a->dv == b->dv && a->layout == b->layout;
}

int bench_shape_same_tensors(const bench_shape *a, const bench_shape *b)
{
    return bench_shape_same_sizes(a, b) && a->t == b->t && a->h == b->h && a->w == b->w;
}

int64_t bench_shape_n(const bench_shape *s) { return s->t * s->h * s->w; }
int64_t bench_shape_m(const bench_shape *s) { return s->bt * s->bh * s->bw; }
int bench_shape_is_2d(const bench_shape *s) { return s->h > 1 || s->w > 1; }

/* The paper keeps M^2 <= N (Sec. 3, "Efficiency analysis"); within that, blocks of at least 256
 * tokens (16x16 patches for images) keep each block summary at full rank for head dimensions up to
 * 256 and the M x M mixing negligible. That gives N = 4096 -> M = 16 and N = 16384 -> M = 64. */
#define BENCH_MIN_BLOCK_TOKENS 256

static int64_t rule_max_m(int64_t n)
{
    int64_t m = n / BENCH_MIN_BLOCK_TOKENS;
    while (m > 1 && m * m > n)
        --m;
    return m < 1 ? 1 : m;
}

int bench_blocks_for_m(bench_shape *s, int64_t m)
{
    if (m < 1)
        return 0;
    if (!bench_shape_is_2d(s)) {
        if (s->t % m != 0)
            return 0;
        s->bt = m, s->bh = 1, s->bw = 1;
        return 1;
    }
    /* bh x bw = m dividing the sides, the most square such pair. */
    int64_t best = 0;
    for (int64_t bh = 1; bh <= m; ++bh) {
        if (m % bh != 0 || s->h % bh != 0 || s->w % (m / bh) != 0)
            continue;
        if (!best || llabs(bh - m / bh) < llabs(best - m / best))
            best = bh;
    }
    if (!best)
        return 0;
    s->bt = 1, s->bh = best, s->bw = m / best;
    return 1;
}

void bench_set_chunk(bench_shape *s, int64_t chunk)
{
    s->chunk = chunk;
    s->bt = (bench_shape_n(s) + chunk - 1) / chunk, s->bh = 1, s->bw = 1;
}

void bench_default_blocks(bench_shape *s)
{
    for (int64_t m = rule_max_m(bench_shape_n(s)); m >= 1; --m) {
        if (bench_shape_is_2d(s)) {
            /* Square block grids only, as the released vision models use. */
            const int64_t b = (int64_t)llround(sqrt((double)m));
            if (b * b != m || s->h % b != 0 || s->w % b != 0)
                continue;
        }
        if (bench_blocks_for_m(s, m))
            return;
    }
    s->bt = s->bh = s->bw = 1;
}

/* ---- configuration, mixing matrix and inputs ---------------------------------------------- */

mhla_config bench_config(const bench_shape *s)
{
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.batch = s->batch, cfg.heads = s->heads;
    cfg.seq_t = s->t, cfg.seq_h = s->h, cfg.seq_w = s->w;
    cfg.block_t = s->bt, cfg.block_h = s->bh, cfg.block_w = s->bw;
    cfg.dk = s->dk, cfg.dv = s->dv;
    cfg.layout = s->layout;
    cfg.kv_heads = s->kv_heads;
    if (s->kv_t) { /* cross-attention: a 1D key/value sequence (the official normalizer has no meaning there) */
        cfg.kv_seq_t = s->kv_t, cfg.kv_seq_h = cfg.kv_seq_w = 1;
        cfg.kv_block_t = s->kv_bt, cfg.kv_block_h = cfg.kv_block_w = 1;
    } else {
        cfg.normalizer = s->normalizer;
    }
    return cfg;
}

mhla_config bench_causal_config(const bench_shape *s)
{
    mhla_config cfg;
    mhla_config_init_causal(&cfg);
    cfg.batch = s->batch, cfg.heads = s->heads;
    cfg.seq_t = bench_shape_n(s);
    cfg.dk = s->dk, cfg.dv = s->dv;
    cfg.layout = s->layout;
    cfg.chunk = s->chunk;
    cfg.kv_heads = s->kv_heads;
    return cfg;
}

/* An M x M mixing matrix of `kind` (1D, M = bt) on the device, in *out. */
mhla_status bench_mixing_create(mhla_context *ctx, mhla_init_kind kind, int64_t bt, int64_t bh, int64_t bw,
                                cl_mem *out)
{
    return bench_mixing_create_cross(ctx, kind, bt, bh, bw, 0, out);
}

mhla_status bench_mixing_create_cross(mhla_context *ctx, mhla_init_kind kind, int64_t bt, int64_t bh, int64_t bw,
                                      int64_t kv_bt, cl_mem *out)
{
    mhla_status st = MHLA_OK;
    const int64_t qb[3] = {bt, bh, bw}, kb[3] = {kv_bt, 1, 1};
    const size_t m = (size_t)(bt * bh * bw), k = kv_bt ? (size_t)kv_bt : m;
    float *mix = malloc(m * k * sizeof *mix);
    cl_int err = CL_SUCCESS;
    if (!mix)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    st = kv_bt ? mhla_mixing_init_cross(kind, NULL, qb, kb, mix, m * k) : mhla_mixing_init(kind, NULL, bt, bh, bw, mix, m * m);
    if (st == MHLA_OK) {
        *out = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                              m * k * sizeof *mix, mix, &err);
        if (err != CL_SUCCESS)
            st = MHLA_ERR_OUT_OF_DEVICE_MEMORY;
    }
    free(mix);
    return st;
}

void bench_fill_random(float *x, size_t n, uint64_t seed)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL ^ seed;
    for (size_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((s >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f;
    }
}
