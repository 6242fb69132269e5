/* Plan configurations: defaults, validation (every message names the field and its value),
 * derived shapes and tensor sizes. Shared by plans, the reference and the CLI. */
#include "config/config.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void mhla_config_init(mhla_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->batch = 1;
    cfg->heads = 1;
    cfg->seq_t = cfg->seq_h = cfg->seq_w = 1;
    cfg->block_t = cfg->block_h = cfg->block_w = 1;
    cfg->layout = MHLA_LAYOUT_BNHD;
    cfg->feature_map = MHLA_FEATURE_RELU_EPS;
    cfg->feature_eps = 1e-6f;
    cfg->scale = 0.0f; /* resolved to 1 */
    cfg->normalizer = MHLA_NORMALIZER_PAPER;
    cfg->eps = 1e-6f;
    cfg->dtype = MHLA_DTYPE_F32;
    cfg->causal = 0;
    cfg->chunk = MHLA_DEFAULT_CHUNK; /* the CLI and Python read it from here: one model for every caller */
    cfg->mixing_rows = 0;
}

void mhla_config_init_causal(mhla_config *cfg)
{
    if (!cfg)
        return;
    mhla_config_init(cfg);
    cfg->causal = 1;
    cfg->feature_map = MHLA_FEATURE_RELU;
    cfg->normalizer = MHLA_NORMALIZER_NONE;
    cfg->scale = 0.0f; /* resolved to Dk^-0.5 */
}

size_t mhla__dtype_size(mhla_dtype dtype) { return dtype == MHLA_DTYPE_F32 ? 4 : 2; }

#define CHECK MHLA_CHECK_MSG

/* Multiplies non-negative sizes, reporting overflow past `limit`. */
static int mul_ok(int64_t a, int64_t b, int64_t limit, int64_t *out)
{
    if (a != 0 && b > limit / a)
        return 0;
    *out = a * b;
    return 1;
}

/* The key/value side of a configuration whose query side is valid (sh filled): kv_heads and the
 * kv grid, each 0 for "as the queries'". */
static mhla_status kv_side(const mhla_config *cfg, mhla_shape *sh, char *msg, size_t msg_size)
{
    CHECK(cfg->kv_heads >= 0, MHLA_ERR_INVALID_SHAPE, "kv_heads must be >= 1 (0 = heads), got %lld",
          (long long)cfg->kv_heads);
    const int64_t hkv = cfg->kv_heads ? cfg->kv_heads : cfg->heads;
    CHECK(cfg->heads % hkv == 0, MHLA_ERR_INVALID_SHAPE,
          "kv_heads = %lld must divide heads = %lld (each key/value head serves H / H_kv query heads)",
          (long long)hkv, (long long)cfg->heads);
    const int64_t kv_seq[3] = {cfg->kv_seq_t, cfg->kv_seq_h, cfg->kv_seq_w};
    const int64_t kv_blk[3] = {cfg->kv_block_t, cfg->kv_block_h, cfg->kv_block_w};
    const int64_t q_seq[3] = {cfg->seq_t, cfg->seq_h, cfg->seq_w};
    const int64_t q_blk[3] = {cfg->block_t, cfg->block_h, cfg->block_w};
    static const char *const seq_names[3] = {"kv_seq_t", "kv_seq_h", "kv_seq_w"};
    static const char *const blk_names[3] = {"kv_block_t", "kv_block_h", "kv_block_w"};
    const int seq_given = kv_seq[0] || kv_seq[1] || kv_seq[2], blk_given = kv_blk[0] || kv_blk[1] || kv_blk[2];
    int64_t seq[3], blk[3];
    int same_grid = 1, same_blocks = 1;
    for (int i = 0; i < 3; ++i) {
        CHECK(!seq_given || kv_seq[i] >= 1, MHLA_ERR_INVALID_SHAPE,
              "%s must be >= 1 where the key/value grid is given (all three 0 = the query grid), got %lld",
              seq_names[i], (long long)kv_seq[i]);
        seq[i] = seq_given ? kv_seq[i] : q_seq[i];
        same_grid &= seq[i] == q_seq[i];
    }
    for (int i = 0; i < 3; ++i) {
        CHECK(!blk_given || kv_blk[i] >= 1, MHLA_ERR_INVALID_SHAPE,
              "%s must be >= 1 where the key/value blocks are given (all three 0 = the query blocks), got %lld",
              blk_names[i], (long long)kv_blk[i]);
        CHECK(blk_given || same_grid, MHLA_ERR_INVALID_SHAPE,
              "the key/value grid %lldx%lldx%lld differs from the query grid %lldx%lldx%lld: give its blocks "
              "(kv_block_t, kv_block_h, kv_block_w)",
              (long long)seq[0], (long long)seq[1], (long long)seq[2], (long long)q_seq[0], (long long)q_seq[1],
              (long long)q_seq[2]);
        blk[i] = blk_given ? kv_blk[i] : q_blk[i];
        same_blocks &= blk[i] == q_blk[i];
    }
    sh->heads_kv = hkv;
    sh->group = cfg->heads / hkv;
    sh->bh_kv = cfg->batch * hkv; /* <= batch * heads */
    sh->cross = !same_grid || !same_blocks;
    if (!sh->cross) {
        sh->n_kv = sh->n, sh->m_kv = sh->m, sh->nb_kv = sh->nb;
        sh->pt_kv = sh->pt, sh->ph_kv = sh->ph, sh->pw_kv = sh->pw;
        return MHLA_OK;
    }
    CHECK(!cfg->causal, MHLA_ERR_UNSUPPORTED,
          "cross-attention is non-causal: causal = 1 takes no key/value grid of its own (kv_seq %lldx%lldx%lld, "
          "kv_block %lldx%lldx%lld)",
          (long long)seq[0], (long long)seq[1], (long long)seq[2], (long long)blk[0], (long long)blk[1],
          (long long)blk[2]);
    CHECK(cfg->normalizer != MHLA_NORMALIZER_OFFICIAL, MHLA_ERR_UNSUPPORTED,
          "the official normalizer pairs query positions with key positions of the same block and has no "
          "meaning across two grids: cross-attention takes the paper or none normalizer");
    int64_t hw, n, elems;
    CHECK(mul_ok(seq[1], seq[2], INT_MAX, &hw) && mul_ok(hw, seq[0], INT_MAX, &n), MHLA_ERR_INVALID_SHAPE,
          "key/value token grid %lldx%lldx%lld has more than %d tokens", (long long)seq[0], (long long)seq[1],
          (long long)seq[2], INT_MAX);
    static const char *const axis[3] = {"T", "Hs", "Ws"};
    for (int i = 0; i < 3; ++i)
        CHECK(seq[i] % blk[i] == 0, MHLA_ERR_INVALID_SHAPE,
              "key/value token grid %s = %lld is not divisible by %s = %lld", axis[i], (long long)seq[i],
              blk_names[i], (long long)blk[i]);
    const int64_t dmax = cfg->dk > cfg->dv ? cfg->dk : cfg->dv;
    CHECK(mul_ok(sh->bh_kv, n, INT64_MAX / 8, &elems) && mul_ok(elems, dmax, INT64_MAX / 8, &elems),
          MHLA_ERR_INVALID_SHAPE, "key/value tensor of %lld x %lld x %lld elements overflows 64-bit sizes",
          (long long)sh->bh_kv, (long long)n, (long long)dmax);
    sh->n_kv = n;
    sh->m_kv = blk[0] * blk[1] * blk[2];
    sh->nb_kv = n / sh->m_kv;
    sh->pt_kv = seq[0] / blk[0], sh->ph_kv = seq[1] / blk[1], sh->pw_kv = seq[2] / blk[2];
    return MHLA_OK;
}

mhla_status mhla__config_validate(const mhla_config *cfg, mhla_shape *shape, char *msg, size_t msg_size)
{
    mhla_shape sh;
    memset(&sh, 0, sizeof sh);
    CHECK(cfg != NULL, MHLA_ERR_INVALID_ARGUMENT, "config is NULL");
    const struct {
        const char *name;
        int64_t value;
    } sizes[] = {{"batch", cfg->batch},     {"heads", cfg->heads},     {"seq_t", cfg->seq_t},
                 {"seq_h", cfg->seq_h},     {"seq_w", cfg->seq_w},     {"block_t", cfg->block_t},
                 {"block_h", cfg->block_h}, {"block_w", cfg->block_w}, {"dk", cfg->dk},
                 {"dv", cfg->dv}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        CHECK(sizes[i].value >= 1, MHLA_ERR_INVALID_SHAPE, "%s must be >= 1, got %lld", sizes[i].name,
              (long long)sizes[i].value);
    CHECK(cfg->layout == MHLA_LAYOUT_BNHD || cfg->layout == MHLA_LAYOUT_BHND, MHLA_ERR_INVALID_ARGUMENT,
          "unknown layout %d (expected 0 = BNHD or 1 = BHND)", (int)cfg->layout);
    CHECK(cfg->feature_map >= MHLA_FEATURE_NONE && cfg->feature_map <= MHLA_FEATURE_ELU1,
          MHLA_ERR_INVALID_ARGUMENT, "unknown feature map %d (expected 0..3)", (int)cfg->feature_map);
    CHECK(cfg->normalizer >= MHLA_NORMALIZER_PAPER && cfg->normalizer <= MHLA_NORMALIZER_NONE,
          MHLA_ERR_INVALID_ARGUMENT, "unknown normalizer %d (expected 0..2)", (int)cfg->normalizer);
    CHECK(cfg->dtype >= MHLA_DTYPE_F32 && cfg->dtype <= MHLA_DTYPE_BF16, MHLA_ERR_INVALID_ARGUMENT,
          "unknown dtype %d (expected 0..2)", (int)cfg->dtype);
    CHECK(cfg->causal == 0 || cfg->causal == 1, MHLA_ERR_INVALID_ARGUMENT, "causal must be 0 or 1, got %d",
          cfg->causal);
    CHECK(cfg->causal || cfg->varlen == 0, MHLA_ERR_INVALID_ARGUMENT,
          "varlen = %d needs causal mode (variable-length batches are causal only)", cfg->varlen);
    CHECK(isfinite(cfg->feature_eps) && cfg->feature_eps >= 0.0f, MHLA_ERR_INVALID_ARGUMENT,
          "feature_eps must be finite and >= 0, got %g", (double)cfg->feature_eps);
    CHECK(isfinite(cfg->eps) && cfg->eps >= 0.0f, MHLA_ERR_INVALID_ARGUMENT, "eps must be finite and >= 0, got %g",
          (double)cfg->eps);
    CHECK(isfinite(cfg->scale), MHLA_ERR_INVALID_ARGUMENT, "scale must be finite (0 = default), got %g",
          (double)cfg->scale);
    CHECK(cfg->dk <= MHLA_MAX_HEAD_DIM, MHLA_ERR_UNSUPPORTED, "dk = %lld exceeds the largest supported head dimension %d",
          (long long)cfg->dk, MHLA_MAX_HEAD_DIM);
    CHECK(cfg->dv <= MHLA_MAX_HEAD_DIM, MHLA_ERR_UNSUPPORTED, "dv = %lld exceeds the largest supported head dimension %d",
          (long long)cfg->dv, MHLA_MAX_HEAD_DIM);

    /* Token and block indices are 32-bit inside the kernels; element offsets are 64-bit. */
    int64_t hw, n, bhw, m, bh, elems;
    CHECK(mul_ok(cfg->seq_h, cfg->seq_w, INT_MAX, &hw) && mul_ok(hw, cfg->seq_t, INT_MAX, &n),
          MHLA_ERR_INVALID_SHAPE, "token grid %lldx%lldx%lld has more than %d tokens", (long long)cfg->seq_t,
          (long long)cfg->seq_h, (long long)cfg->seq_w, INT_MAX);
    CHECK(mul_ok(cfg->batch, cfg->heads, INT_MAX, &bh), MHLA_ERR_INVALID_SHAPE,
          "batch * heads = %lld * %lld exceeds %d", (long long)cfg->batch, (long long)cfg->heads, INT_MAX);
    int64_t dmax = cfg->dk > cfg->dv ? cfg->dk : cfg->dv;
    CHECK(mul_ok(bh, n, INT64_MAX / 8, &elems) && mul_ok(elems, dmax, INT64_MAX / 8, &elems),
          MHLA_ERR_INVALID_SHAPE, "tensor of %lld x %lld x %lld elements overflows 64-bit sizes",
          (long long)bh, (long long)n, (long long)dmax);

    sh.n = n;
    sh.bh = bh;
    sh.summary_cols = cfg->dv + 1;
    if (!cfg->causal) {
        CHECK(cfg->seq_t % cfg->block_t == 0, MHLA_ERR_INVALID_SHAPE,
              "token grid T = %lld is not divisible by block_t = %lld", (long long)cfg->seq_t,
              (long long)cfg->block_t);
        CHECK(cfg->seq_h % cfg->block_h == 0, MHLA_ERR_INVALID_SHAPE,
              "token grid Hs = %lld is not divisible by block_h = %lld", (long long)cfg->seq_h,
              (long long)cfg->block_h);
        CHECK(cfg->seq_w % cfg->block_w == 0, MHLA_ERR_INVALID_SHAPE,
              "token grid Ws = %lld is not divisible by block_w = %lld", (long long)cfg->seq_w,
              (long long)cfg->block_w);
        bhw = cfg->block_h * cfg->block_w;
        m = bhw * cfg->block_t; /* <= n, so no overflow */
        CHECK(cfg->mixing_rows == 0 || cfg->mixing_rows == m, MHLA_ERR_INVALID_SHAPE,
              "mixing_rows = %lld must be 0 or M = %lld in non-causal mode", (long long)cfg->mixing_rows,
              (long long)m);
        sh.m = m;
        sh.nb = n / m;
        sh.pt = cfg->seq_t / cfg->block_t;
        sh.ph = cfg->seq_h / cfg->block_h;
        sh.pw = cfg->seq_w / cfg->block_w;
    } else {
        CHECK(cfg->seq_h == 1 && cfg->seq_w == 1, MHLA_ERR_INVALID_SHAPE,
              "causal mode is 1D: the token grid must be (N,1,1), got %lldx%lldx%lld", (long long)cfg->seq_t,
              (long long)cfg->seq_h, (long long)cfg->seq_w);
        /* At most INT32_MAX: every ceil(tokens / chunk) (here, decoders, cu_seqlens) adds chunk - 1 to a
         * token count, which a chunk near INT64_MAX overflowed (found by tests/fuzz/fuzz_cu_seqlens). */
        CHECK(cfg->chunk >= 1, MHLA_ERR_INVALID_SHAPE, "chunk must be >= 1, got %lld", (long long)cfg->chunk);
        CHECK(cfg->chunk <= INT32_MAX, MHLA_ERR_INVALID_SHAPE, "chunk must be <= %d, got %lld", INT32_MAX,
              (long long)cfg->chunk);
        CHECK(cfg->mixing_rows >= 0, MHLA_ERR_INVALID_SHAPE, "mixing_rows must be >= 0, got %lld",
              (long long)cfg->mixing_rows);
        CHECK(cfg->normalizer != MHLA_NORMALIZER_OFFICIAL, MHLA_ERR_UNSUPPORTED,
              "the official normalizer is defined for block grids only; causal mode takes none or paper");
        CHECK(cfg->varlen == 0 || cfg->varlen == 1, MHLA_ERR_INVALID_ARGUMENT, "varlen must be 0 or 1, got %d",
              cfg->varlen);
        CHECK(!cfg->varlen || cfg->batch == 1, MHLA_ERR_INVALID_SHAPE,
              "varlen packs the sequences along the token axis: batch must be 1, got %lld", (long long)cfg->batch);
        sh.m = (n + cfg->chunk - 1) / cfg->chunk;
        sh.nb = cfg->chunk < n ? cfg->chunk : n;
        sh.pt = sh.nb;
        sh.ph = sh.pw = 1;
        /* Packed sequences are checked one by one against C * rows(Mc) when a call names them. */
        if (cfg->mixing_rows != 0 && !cfg->varlen)
            CHECK(cfg->mixing_rows >= sh.m, MHLA_ERR_SEQUENCE_TOO_LONG,
                  "sequence of %lld tokens is longer than chunk * rows(Mc) = %lld * %lld = %lld", (long long)n,
                  (long long)cfg->chunk, (long long)cfg->mixing_rows, (long long)(cfg->chunk * cfg->mixing_rows));
        CHECK(cfg->mixing_rows <= 1 << 20, MHLA_ERR_INVALID_SHAPE, "mixing_rows = %lld is implausibly large",
              (long long)cfg->mixing_rows);
        /* mixing_rows 0 resolves to the chunk count: the same limit, so that a configuration valid
         * as given stays valid once resolved (found by tests/fuzz/fuzz_config) */
        CHECK(cfg->mixing_rows != 0 || sh.m <= 1 << 20, MHLA_ERR_INVALID_SHAPE,
              "%lld tokens in chunks of %lld make %lld chunks, an implausibly large mixing matrix (at most %d rows)",
              (long long)n, (long long)cfg->chunk, (long long)sh.m, 1 << 20);
    }
    const mhla_status kv = kv_side(cfg, &sh, msg, msg_size);
    if (kv != MHLA_OK)
        return kv;
    if (shape)
        *shape = sh;
    return MHLA_OK;
}

mhla_status mhla_config_check(const mhla_config *cfg, char *msg, size_t msg_size)
{
    char local[512];
    mhla_status st = mhla__config_validate(cfg, NULL, local, sizeof local);
    if (st != MHLA_OK) {
        mhla__fail(NULL, st, "%s", local);
        if (msg && msg_size)
            snprintf(msg, msg_size, "%s", local);
    }
    return st;
}

void mhla__config_resolve(mhla_config *cfg)
{
    if (cfg->scale == 0.0f)
        cfg->scale = cfg->causal ? (float)(1.0 / sqrt((double)cfg->dk)) : 1.0f;
    mhla_shape sh;
    if (mhla__config_validate(cfg, &sh, NULL, 0) != MHLA_OK)
        return;
    if (cfg->mixing_rows == 0)
        cfg->mixing_rows = sh.m;
    /* The key/value side spelled out (mhla_plan_config() shows what the plan runs). */
    cfg->kv_heads = sh.heads_kv;
    if (!cfg->kv_seq_t && !cfg->kv_seq_h && !cfg->kv_seq_w)
        cfg->kv_seq_t = cfg->seq_t, cfg->kv_seq_h = cfg->seq_h, cfg->kv_seq_w = cfg->seq_w;
    if (!cfg->kv_block_t && !cfg->kv_block_h && !cfg->kv_block_w)
        cfg->kv_block_t = cfg->block_t, cfg->kv_block_h = cfg->block_h, cfg->kv_block_w = cfg->block_w;
}

size_t mhla_config_tensor_elems(const mhla_config *cfg, mhla_tensor tensor)
{
    mhla_shape sh;
    if (mhla__config_validate(cfg, &sh, NULL, 0) != MHLA_OK)
        return 0;
    return mhla__shape_tensor_elems(cfg, &sh, tensor);
}

size_t mhla__shape_tensor_elems(const mhla_config *cfg, const mhla_shape *shape, mhla_tensor tensor)
{
    const size_t rows = (size_t)shape->bh * (size_t)shape->n, kv_rows = (size_t)shape->bh_kv * (size_t)shape->n_kv;
    switch (tensor) {
    case MHLA_TENSOR_Q:
        return rows * (size_t)cfg->dk;
    case MHLA_TENSOR_K:
        return kv_rows * (size_t)cfg->dk;
    case MHLA_TENSOR_V:
        return kv_rows * (size_t)cfg->dv;
    case MHLA_TENSOR_OUT:
        return rows * (size_t)cfg->dv;
    case MHLA_TENSOR_MIXING: {
        if (!cfg->causal) /* M x M_kv */
            return (size_t)shape->m * (size_t)shape->m_kv;
        size_t r = cfg->mixing_rows ? (size_t)cfg->mixing_rows : (size_t)shape->m;
        return r * r;
    }
    }
    return 0;
}

mhla_status mhla__softmax_config(const mhla_config *cfg, mhla_config *resolved, mhla_shape *shape, char *msg,
                                 size_t msg_size)
{
    if (!cfg) {
        snprintf(msg, msg_size, "config is NULL");
        return MHLA_ERR_INVALID_ARGUMENT;
    }
    if (cfg->causal) {
        snprintf(msg, msg_size, "softmax attention plans are non-causal: causal must be 0, got %d", cfg->causal);
        return cfg->causal == 1 ? MHLA_ERR_UNSUPPORTED : MHLA_ERR_INVALID_ARGUMENT;
    }
    /* What softmax attention does not use is reset to its defaults, so that it cannot fail
     * validation: one block of all tokens, and the MHLA-only fields. */
    mhla_config c, defaults;
    mhla_config_init(&defaults);
    c = *cfg;
    c.block_t = c.block_h = c.block_w = 1;
    c.mixing_rows = 0;
    c.feature_map = defaults.feature_map;
    c.feature_eps = defaults.feature_eps;
    c.normalizer = defaults.normalizer;
    c.eps = defaults.eps;
    /* A key/value grid equal to the queries' (as mhla_plan_config() spells it out) is self-attention;
     * one of its own (cross-attention) is one block too: every query sees every key. */
    if (c.kv_seq_t == c.seq_t && c.kv_seq_h == c.seq_h && c.kv_seq_w == c.seq_w)
        c.kv_seq_t = c.kv_seq_h = c.kv_seq_w = 0;
    if (!c.kv_seq_t && !c.kv_seq_h && !c.kv_seq_w)
        c.kv_block_t = c.kv_block_h = c.kv_block_w = 0;
    else
        c.kv_block_t = c.kv_block_h = c.kv_block_w = 1;
    mhla_status st = mhla__config_validate(&c, shape, msg, msg_size);
    if (st != MHLA_OK)
        return st;
    if (c.scale == 0.0f)
        c.scale = (float)(1.0 / sqrt((double)c.dk));
    mhla__config_resolve(&c);
    *resolved = c;
    return MHLA_OK;
}
