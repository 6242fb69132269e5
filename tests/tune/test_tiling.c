/* The tiling fit (host/tune/tiling.c) without a device: fake contexts with chosen limits (work-group
 * size, local memory, float width, CPU or GPU), the tuning the built-in rows give them, and the tiles
 * every plan kind takes: exact tiles for the CPU and GPU rows at D = 64, the rules every fit keeps
 * over a sweep of devices and head dimensions, the refusals, and the -D flags each kernel file gets.
 * Linked with the library's objects (its mhla__ functions are hidden in libmhla.so); no OpenCL call. */
#include "tune/tune.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- fake devices ------------------------------------------------------------------------------ */

typedef struct fake_device {
    const char *name;
    cl_device_type type;
    int float_width; /* as reported (CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT) */
    int native_prefetch;
} fake_device;

/* A self-attention shape of 1D blocks: m blocks of nb tokens, bh heads (the key/value side the
 * same, as config/config.c derives it). */
static mhla_shape self_shape(int64_t m, int64_t nb, int64_t bh, int64_t summary_cols)
{
    const mhla_shape s = {.n = m * nb, .m = m, .nb = nb, .pt = nb, .ph = 1, .pw = 1, .bh = bh,
                          .summary_cols = summary_cols, .heads_kv = bh, .group = 1, .n_kv = m * nb, .m_kv = m,
                          .nb_kv = nb, .pt_kv = nb, .ph_kv = 1, .pw_kv = 1, .bh_kv = bh};
    return s;
}

static const fake_device haswell = {"pthread-haswell-AMD EPYC 7B13", CL_DEVICE_TYPE_CPU, 16, 1};
static const fake_device avx512 = {"pthread-skylake-avx512-Intel(R) Xeon(R)", CL_DEVICE_TYPE_CPU, 16, 1};
static const fake_device gpu = {"Test GPU", CL_DEVICE_TYPE_GPU, 1, 0};
static const fake_device llvmpipe = {"llvmpipe (LLVM 15.0.7, 256 bits)", CL_DEVICE_TYPE_CPU, 1, 0};

static const fake_device sweep_devices[] = {
    {"pthread-haswell-AMD EPYC 7B13", CL_DEVICE_TYPE_CPU, 16, 1}, /* target narrower than the report */
    {"pthread-skylake-avx512-Intel(R) Xeon(R)", CL_DEVICE_TYPE_CPU, 16, 1},
    {"pthread-nehalem-Intel(R) Core(TM)2", CL_DEVICE_TYPE_CPU, 4, 1},
    {"pthread-cortex-a76-ARM", CL_DEVICE_TYPE_CPU, 4, 1},
    {"Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", CL_DEVICE_TYPE_CPU, 8, 0}, /* a vendor runtime */
    {"Some CPU runtime", CL_DEVICE_TYPE_CPU, 1, 0},
    {"llvmpipe (LLVM 15.0.7, 256 bits)", CL_DEVICE_TYPE_CPU, 1, 0},
    {"Test GPU", CL_DEVICE_TYPE_GPU, 1, 0},
    {"Test GPU reporting float8", CL_DEVICE_TYPE_GPU, 8, 0},
    {"Test accelerator", CL_DEVICE_TYPE_ACCELERATOR, 4, 0}, /* the default row */
};

/* A context as mhla__context_read_device() would fill it, with no OpenCL objects. */
static mhla_context *fake_context(const fake_device *d, size_t wg, uint64_t local)
{
    mhla_context *ctx = calloc(1, sizeof *ctx);
    assert_non_null(ctx);
    mhla__mutex_init(&ctx->lock);
    mhla__mutex_init(&ctx->message_lock);
    snprintf(ctx->device_name, sizeof ctx->device_name, "%s", d->name);
    snprintf(ctx->vendor, sizeof ctx->vendor, "Test vendor");
    snprintf(ctx->driver_version, sizeof ctx->driver_version, "1.0");
    snprintf(ctx->platform_version, sizeof ctx->platform_version, "OpenCL 3.0 test");
    mhla_device_limits *lim = &ctx->limits;
    lim->max_work_group_size = wg;
    lim->max_work_item_sizes[0] = lim->max_work_item_sizes[1] = lim->max_work_item_sizes[2] = wg;
    lim->local_mem_bytes = local;
    lim->max_alloc_bytes = lim->global_mem_bytes = (uint64_t)1 << 32;
    lim->opencl_c_major = 1, lim->opencl_c_minor = 2;
    lim->compute_units = 16;
    lim->type = d->type;
    lim->float_width = d->float_width;
    lim->native_prefetch = d->native_prefetch;
    mhla__simd_of(ctx->device_name, lim->float_width, &lim->simd);
    return ctx;
}

static void free_context(mhla_context *ctx)
{
    mhla__mutex_destroy(&ctx->lock);
    mhla__mutex_destroy(&ctx->message_lock);
    mhla__free(ctx->tuned_db); /* NULL: MHLA_CACHE_DIR=off (main) */
    free(ctx);
}

static mhla_config causal_config(int64_t dk, int64_t dv)
{
    mhla_config cfg;
    mhla_config_init_causal(&cfg);
    cfg.heads = 8;
    cfg.seq_t = 4096;
    cfg.dk = dk, cfg.dv = dv;
    return cfg;
}

/* The device's tuning as every plan looks it up: its built-in row, widths capped to the device. */
static mhla_tuning lookup(mhla_context *ctx, const mhla_config *cfg)
{
    mhla_tuning t;
    assert_int_equal(mhla__tuning_lookup(ctx, cfg, &t), MHLA_OK);
    return t;
}

static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* ---- mhla__fit_init ---------------------------------------------------------------------------- */

static void test_fit_init(void **state)
{
    (void)state;
    static const struct {
        size_t max_wg, item0;
        uint64_t local;
        size_t wg;
        uint64_t usable;
    } cases[] = {
        {1024, 1024, 65536, 1024, 65536 - 1024}, /* 1 KiB kept for what implementations add */
        {1024, 256, 32768, 256, 32768 - 1024},   /* the first dimension's limit is lower */
        {256, 0, 32768, 256, 32768 - 1024},      /* a dimension limit of 0 is no limit */
        {4096, 4096, 2049, 4096, 2049 - 1024},
        {64, 64, 2048, 64, 1024}, /* too little to keep 1 KiB back: half of it */
        {0, 0, 1000, 1, 500},     /* a device reporting 0 work-items still gets one */
        {16, 16, 0, 16, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_context *ctx = fake_context(&gpu, cases[i].max_wg, cases[i].local);
        ctx->limits.max_work_item_sizes[0] = cases[i].item0;
        mhla_fit fit;
        memset(&fit, 0x5a, sizeof fit);
        mhla__fit_init(ctx, &fit);
        if (fit.wg != cases[i].wg || fit.local_bytes != cases[i].usable)
            fail_msg("case %zu: fit %zu work-items, %llu bytes; expected %zu, %llu", i, fit.wg,
                     (unsigned long long)fit.local_bytes, cases[i].wg, (unsigned long long)cases[i].usable);
        free_context(ctx);
    }
}

/* ---- exact tiles at D = 64 ---------------------------------------------------------------------- */

typedef struct causal_expect {
    int out_rt, out_ve, out_nv, tq, kt, gemm_rows, mix_mr, mix_nv, pre_ve;
    int wg;          /* mhla__causal_output_wg */
    uint64_t local; /* mhla__causal_output_local */
    int ct_sq, ct_bk, cp_ti, cp_tw, cp_tj; /* the tiled read-out and prefix (0: untiled) */
    int cs_tk, cs_tn;                      /* the tiled chunk summaries (0: untiled) */
    int dec_dp;                            /* the decoder's parts (1: a work-item walks Dk) */
} causal_expect;

static void expect_causal(const fake_device *d, size_t wg, uint64_t local, int64_t dk, int64_t dv,
                          const causal_expect *e)
{
    mhla_context *ctx = fake_context(d, wg, local);
    const mhla_config cfg = causal_config(dk, dv);
    const mhla_tuning t = lookup(ctx, &cfg);
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    mhla_tiles x;
    assert_int_equal(mhla__tiles_causal(ctx, &cfg, &t, &fit, &x), MHLA_OK);
    const int got[] = {x.out_rt, x.out_ve, x.out_nv, x.tq,    x.kt,    x.gemm_rows, x.mix_mr, x.mix_nv,
                       x.pre_ve, mhla__causal_output_wg(&x, dv), x.ct_sq, x.ct_bk, x.cp_ti, x.cp_tw, x.cp_tj, x.cs_tk, x.cs_tn,
                       x.dec_dp};
    const int want[] = {e->out_rt, e->out_ve, e->out_nv, e->tq, e->kt, e->gemm_rows, e->mix_mr, e->mix_nv,
                        e->pre_ve, e->wg, e->ct_sq, e->ct_bk, e->cp_ti, e->cp_tw, e->cp_tj, e->cs_tk, e->cs_tn,
                        e->dec_dp};
    static const char *const names[] = {"out_rt", "out_ve", "out_nv", "tq", "kt", "gemm_rows", "mix_mr", "mix_nv",
                                        "pre_ve", "output work-items", "ct_sq", "ct_bk", "cp_ti", "cp_tw", "cp_tj",
                                        "cs_tk", "cs_tn", "dec_dp"};
    for (size_t i = 0; i < sizeof got / sizeof got[0]; ++i)
        if (got[i] != want[i])
            fail_msg("%s, %zu work-items, %llu bytes, D = %lldx%lld: %s = %d, expected %d", d->name, wg,
                     (unsigned long long)local, (long long)dk, (long long)dv, names[i], got[i], want[i]);
    assert_int_equal(mhla__causal_output_local(&x, dk), e->local);
    free_context(ctx);
}

static void expect_softmax(const fake_device *d, uint64_t local, int tiled, int vw, int bk, int bq, int rows,
                           uint64_t bytes)
{
    mhla_context *ctx = fake_context(d, 1024, local);
    const mhla_config cfg = causal_config(64, 64);
    const mhla_tuning t = lookup(ctx, &cfg);
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    mhla_tiles x;
    assert_int_equal(mhla__tiles_softmax(ctx, &cfg, &t, &fit, &x), MHLA_OK);
    if (x.sm_tiled != tiled || x.sm_vw != vw || x.sm_bk != bk || x.sm_bq != bq || x.sm_rows != rows)
        fail_msg("%s, %llu bytes: softmax tiled %d VW %d BK %d BQ %d rows %d; expected %d %d %d %d %d", d->name,
                 (unsigned long long)local, x.sm_tiled, x.sm_vw, x.sm_bk, x.sm_bq, x.sm_rows, tiled, vw, bk, bq, rows);
    assert_int_equal(mhla__softmax_local(&cfg, &x), bytes);
    free_context(ctx);
}

/* The forward's tiles of `d` (max_wg work-items, PoCL's 2 MiB of local memory, where the CPU row's
 * 256-token chunk of k~ rows fits) at D = 64, N = 4096, M = 4, vector width `vec`:
 * sum_rd, sum_ve, sum_nv, sum_chunk, out_rt, out_ve, out_nv, out_dc, out_pre, out_pf, out_nt,
 * mix_mr, mix_ve, mix_nv, wg, pf as `want`. */
static void expect_forward(const fake_device *d, size_t max_wg, int vec, const int want[16])
{
    mhla_context *ctx = fake_context(d, max_wg, 2u << 20);
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 8, cfg.seq_t = 4096, cfg.block_t = 4, cfg.dk = 64, cfg.dv = 64;
    const mhla_tuning t = lookup(ctx, &cfg);
    assert_int_equal(t.vec, vec);
    const mhla_shape shape = self_shape(4, 1024, 8, 65);
    mhla_tiles x;
    mhla__tiles_forward(ctx, &cfg, &shape, &t, &x);
    const int got[] = {x.sum_rd, x.sum_ve, x.sum_nv, x.sum_chunk, x.out_rt, x.out_ve, x.out_nv, x.out_dc, x.out_pre,
                       x.out_pf, x.out_nt, x.mix_mr, x.mix_ve, x.mix_nv, x.wg, x.pf};
    for (size_t i = 0; i < sizeof got / sizeof got[0]; ++i)
        if (got[i] != want[i])
            fail_msg("%s: forward tile field %zu (sum_rd, sum_ve, sum_nv, sum_chunk, out_rt, out_ve, out_nv, "
                     "out_dc, out_pre, out_pf, out_nt, mix_mr, mix_ve, mix_nv, wg, pf) = %d, expected %d",
                     d->name, i, got[i], want[i]);
    free_context(ctx);
}

/* The CPU row on an AVX2 target (PoCL compiling for haswell on a host reporting 16 floats): 8-float
 * vectors, summary 6 rows x 2 vectors (its k~ from local memory), read-out 1 token x 8 vectors (a
 * 64-wide row), mixing 2 x 4, prefix 4 x 2; prefetch instructions for the read-out's q rows and the
 * summary's next chunk (pf 2), where the runtime makes native code (PoCL), else the summary's loads.
 * The output group is 64 / 64 column tiles x 32 tokens; its arrays (32x64 + 64x32 + 32x32 floats)
 * take 20 KiB; with less, keys per pass halve first. Softmax keys halve until 64 x 129 floats fit. */
static void test_cpu_row_d64(void **state)
{
    (void)state;
    static const int forward[16] = {6, 8, 2, 256, 1, 8, 8, 4, 0, 4, 1, 2, 8, 4, 64, 2};
    expect_forward(&haswell, 4096, 8, forward);
    static const fake_device loads_only = {"pthread-haswell-AMD EPYC 7B13", CL_DEVICE_TYPE_CPU, 16, 0};
    static const int forward_loads[16] = {6, 8, 2, 256, 1, 8, 8, 4, 0, 0, 1, 2, 8, 4, 64, 1};
    expect_forward(&loads_only, 4096, 8, forward_loads);

    /* CPU rows: causal_output.cl and causal_prefix.cl (ct_sq 0, cp_ti 0) */
    const causal_expect full = {1, 8, 8, 32, 32, 0, 4, 2, 8, 32, 20480, 0, 0, 0, 0, 0, 0, 0, 1};
    expect_causal(&haswell, 4096, 65536, 64, 64, &full);
    expect_causal(&haswell, 4096, 32768, 64, 64, &full); /* llvmpipe's 32 KiB: still fits */
    const causal_expect keys16 = {1, 8, 8, 32, 16, 0, 4, 2, 8, 32, (32 * 64 + 64 * 16 + 32 * 16) * 4, 0, 0, 0, 0, 0, 0, 0, 1};
    expect_causal(&haswell, 4096, 16384, 64, 64, &keys16);
    /* AVX-512: 16-float vectors, 32 registers: read-out 4 tokens x 4 vectors, prefix 8 x 2. */
    const causal_expect wide = {4, 16, 4, 32, 32, 0, 8, 2, 16, 8, 20480, 0, 0, 0, 0, 0, 0, 0, 1};
    expect_causal(&avx512, 4096, 65536, 64, 64, &wide);

    expect_softmax(&haswell, 65536, 0, 8, 64, 256, 1, 4 * 64 * (64 + 64 + 1));
    expect_softmax(&haswell, 32768, 0, 8, 32, 256, 1, 4 * 32 * (64 + 64 + 1));
    expect_softmax(&avx512, 65536, 0, 16, 64, 256, 1, 4 * 64 * (64 + 64 + 1));
}

/* Intel's CPUs get the 'cpu-intel' row, the same derived tiles but folds every 128 tokens and the
 * forward read-out's streaming stores only with 16-wide vectors (AVX-512; the backward's at any
 * width); AMD's and any other vendor's CPUs the 'cpu' row (256, streaming stores at any width); an
 * Intel GPU Intel's GPU row (none). */
static void test_cpu_vendor_rows(void **state)
{
    (void)state;
    static const struct {
        const fake_device *d;
        const char *vendor, *row;
        int sum_chunk, out_nt, bwd_nt; /* the forward's tiles */
    } cases[] = {
        {&haswell, "GenuineIntel", "built-in row 'cpu-intel'", 128, 0, 1},
        {&avx512, "Intel(R) Corporation", "built-in row 'cpu-intel'", 128, 1, 1},
        {&haswell, "AuthenticAMD", "built-in row 'cpu'", 256, 1, 1},
        {&avx512, "Test vendor", "built-in row 'cpu'", 256, 1, 1},
        {&gpu, "Intel(R) Corporation", "built-in row 'intel-gpu'", 32, 0, 0},
    };
    const mhla_shape shape = self_shape(4, 1024, 8, 65);
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 8, cfg.seq_t = 4096, cfg.block_t = 4, cfg.dk = 64, cfg.dv = 64;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_context *ctx = fake_context(cases[i].d, 4096, 65536);
        snprintf(ctx->vendor, sizeof ctx->vendor, "%s", cases[i].vendor);
        const mhla_tuning t = lookup(ctx, &cfg);
        const size_t len = strlen(cases[i].row);
        if (strncmp(t.origin, cases[i].row, len) != 0 || (t.origin[len] != ' ' && t.origin[len] != '\0') ||
            t.sum_chunk != cases[i].sum_chunk)
            fail_msg("%s from %s: %s, sum_chunk %d; expected %s, %d", cases[i].d->name, cases[i].vendor, t.origin,
                     t.sum_chunk, cases[i].row, cases[i].sum_chunk);
        if (cases[i].d->type == CL_DEVICE_TYPE_CPU)
            assert_int_equal(t.vec, 8 * (cases[i].d == &avx512 ? 2 : 1)); /* tiles derived as in 'cpu' */
        mhla_tiles x;
        mhla__tiles_forward(ctx, &cfg, &shape, &t, &x);
        if (x.out_nt != cases[i].out_nt || x.bwd_nt != cases[i].bwd_nt)
            fail_msg("%s from %s: streaming stores %d (forward), %d (backward); expected %d, %d", cases[i].d->name,
                     cases[i].vendor, x.out_nt, x.bwd_nt, cases[i].out_nt, cases[i].bwd_nt);
        free_context(ctx);
    }
}

/* GPUs by vendor (CL_DEVICE_VENDOR as their drivers spell it) get their vendor's row, any other GPU
 * the 'gpu' row and anything neither CPU nor GPU 'default'; a GPU whose local memory is global memory
 * (ARM's Mali) the untiled kernels, whatever its row, and a CPU reporting the same (PoCL) keeps a GPU
 * row forced onto it as written, so that the tests run its tiles there, unless MHLA_LIMITS says
 * local_type=global. */
static void test_gpu_vendor_rows(void **state)
{
    (void)state;
    static const fake_device accel = {"Test accelerator", CL_DEVICE_TYPE_ACCELERATOR, 4, 0};
    static const struct {
        const fake_device *d;
        const char *vendor;
        int local_global;
        const char *force; /* MHLA_TUNING, or NULL */
        const char *row;
        int wg, dec_dp, mix_kernel, gemm_rows, tiled; /* the row's fields; tiled: the fitted forward's */
    } cases[] = {
        {&gpu, "NVIDIA Corporation", 0, NULL, "built-in row 'nvidia'", 128, 8, 0, 32, 1},
        {&gpu, "Advanced Micro Devices, Inc.", 0, NULL, "built-in row 'amd'", 256, 4, 0, 32, 1},
        {&gpu, "AMD", 0, NULL, "built-in row 'amd'", 256, 4, 0, 32, 1},
        {&gpu, "Intel(R) Corporation", 0, NULL, "built-in row 'intel-gpu'", 128, 8, 0, 32, 1},
        {&gpu, "QUALCOMM", 0, NULL, "built-in row 'mobile'", 64, 4, 1, 0, 1},
        {&gpu, "Imagination Technologies", 0, NULL, "built-in row 'mobile'", 64, 4, 1, 0, 1},
        {&gpu, "ARM", 1, NULL, "built-in row 'mobile' (local memory is global: untiled)", 64, 1, 1, 0, 0},
        {&gpu, "Test vendor", 1, NULL, "built-in row 'gpu' (local memory is global: untiled)", 128, 1, 1, 0, 0},
        {&gpu, "Test vendor", 0, NULL, "built-in row 'gpu'", 128, 8, 0, 32, 1},
        {&accel, "QUALCOMM", 0, NULL, "built-in row 'default'", 64, 4, 0, 32, 1},
        {&avx512, "ARM", 1, NULL, "built-in row 'cpu' (16 floats x 32 registers: avx512)", 64, 1, 1, 0, 0},
        {&avx512, "GenuineIntel", 1, "row=gpu", "built-in row 'gpu' (MHLA_TUNING)", 128, 8, 0, 32, 1},
        {&avx512, "GenuineIntel", 2, "row=mobile", "built-in row 'mobile' (MHLA_TUNING; local memory is global: untiled)",
         64, 1, 1, 0, 0}, /* MHLA_LIMITS=local_type=global */
        {&gpu, "ARM", 1, "row=nvidia", "built-in row 'nvidia' (MHLA_TUNING; local memory is global: untiled)", 128, 1,
         1, 0, 0},
    };
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 8, cfg.seq_t = 4096, cfg.block_t = 4, cfg.dk = 64, cfg.dv = 64;
    const mhla_shape shape = self_shape(4, 1024, 8, 65);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_context *ctx = fake_context(cases[i].d, 1024, 65536);
        snprintf(ctx->vendor, sizeof ctx->vendor, "%s", cases[i].vendor);
        ctx->limits.local_mem_global = cases[i].local_global;
        if (cases[i].force)
            setenv("MHLA_TUNING", cases[i].force, 1);
        const mhla_tuning t = lookup(ctx, &cfg);
        unsetenv("MHLA_TUNING");
        mhla_tiles x;
        mhla__tiles_forward(ctx, &cfg, &shape, &t, &x);
        const int untiled = !t.tiled && !t.tl_fuse && !t.bt_tq && !t.ct_sq && !t.cp_ti && !t.cs_tk && !t.bc_sq &&
                            !t.sm_tiled;
        if (strcmp(t.origin, cases[i].row) != 0 || t.wg != cases[i].wg || t.dec_dp != cases[i].dec_dp ||
            t.mix_kernel != cases[i].mix_kernel || t.gemm_rows != cases[i].gemm_rows || x.tiled != cases[i].tiled ||
            untiled == cases[i].tiled)
            fail_msg("%s from %s%s: %s, wg %d, dec_dp %d, mix_kernel %d, gemm_rows %d, tiled %d (every stage "
                     "untiled: %d); expected %s, %d, %d, %d, %d, %d",
                     cases[i].d->name, cases[i].vendor, cases[i].local_global ? " (local memory global)" : "",
                     t.origin, t.wg, t.dec_dp, t.mix_kernel, t.gemm_rows, x.tiled, untiled, cases[i].row, cases[i].wg,
                     cases[i].dec_dp, cases[i].mix_kernel, cases[i].gemm_rows, cases[i].tiled);
        free_context(ctx);
    }
}

/* The GPU row: float4 everywhere, 4 x 4 register tiles, CLBlast's prefix GEMMs over blocks of 32
 * chunks; the output group is 16 column vectors x 8 token tiles = 128 work-items, halving its tokens
 * under a lower limit, then widening its column tiles once the tokens are one register tile. */
static void test_gpu_row_d64(void **state)
{
    (void)state;
    static const int forward[16] = {4, 4, 1, 32, 4, 4, 1, 4, 0, 0, 0, 4, 4, 1, 128, 0};
    expect_forward(&gpu, 256, 4, forward);

    /* The tiled chunk summaries (causal_summary_tiled.cl: 64 x 64, 16 tokens a tile, 256 work-items;
     * the rows and columns halved to the group limit), read-out (causal_tiled.cl: 64 tokens x 16 keys, 64 work-items) and prefix
     * (causal_prefix_tiled.cl: 32 chunks x 64 columns, 128 work-items; no CLBlast blocks), then
     * smaller groups: the read-out's keys halved before its tokens, the prefix's columns before its
     * chunks. The untiled kernels' tiles (the fallback) are fitted as before. */
    const causal_expect g256 = {4, 4, 1, 32, 32, 0, 4, 1, 4, 128, 20480, 64, 16, 32, 64, 16, 16, 64, 8};
    expect_causal(&gpu, 256, 65536, 64, 64, &g256);
    const causal_expect g64 = {4, 4, 1, 16, 32, 0, 4, 1, 4, 64, (16 * 64 + 64 * 32 + 16 * 32) * 4, 64, 16, 32, 32, 16, 16, 32, 8};
    expect_causal(&gpu, 64, 65536, 64, 64, &g64);
    const causal_expect g16 = {4, 4, 1, 4, 32, 0, 4, 1, 4, 16, (4 * 64 + 64 * 32 + 4 * 32) * 4, 32, 8, 16, 16, 16, 16, 16, 8};
    expect_causal(&gpu, 16, 65536, 64, 64, &g16);
    const causal_expect g8 = {4, 4, 2, 4, 32, 0, 4, 1, 4, 8, (4 * 64 + 64 * 32 + 4 * 32) * 4, 32, 4, 16, 8, 16, 16, 8, 8};
    expect_causal(&gpu, 8, 65536, 64, 64, &g8);
    /* The prefix with CLBlast's blocks where the tuning turns the tiled one off (cp_ti 0), under
     * 64 work-items without them (CLBlast's GEMM kernels cannot run there). */
    setenv("MHLA_TUNING", "cp_ti=0", 1);
    const causal_expect b256 = {4, 4, 1, 32, 32, 32, 4, 1, 4, 128, 20480, 64, 16, 0, 0, 0, 16, 64, 8};
    expect_causal(&gpu, 256, 65536, 64, 64, &b256);
    const causal_expect b16 = {4, 4, 1, 4, 32, 0, 4, 1, 4, 16, (4 * 64 + 64 * 32 + 4 * 32) * 4, 32, 8, 0, 0, 0, 16, 16, 8};
    expect_causal(&gpu, 16, 65536, 64, 64, &b16);
    unsetenv("MHLA_TUNING");
    /* llvmpipe: the GPU-like row of its own, with the prefix summed in the kernel. */
    const causal_expect lp = {4, 4, 1, 32, 32, 0, 4, 1, 4, 128, 20480, 0, 0, 0, 0, 0, 0, 0, 1};
    expect_causal(&llvmpipe, 1024, 32768, 64, 64, &lp);

    /* softmax_tiled.cl: 64 queries x 16 keys, qt, kt, vt, pt, the row parts and the four rows */
    expect_softmax(&gpu, 65536, 1, 4, 16, 64, 0,
                   4 * (64 * 68 + 64 * 20 + 16 * 64 + 16 * 68 + 64 * 4 + 4 * 64));
    expect_softmax(&llvmpipe, 32768, 0, 4, 16, 64, 0, 4 * 16 * (64 + 64 + 1));

    /* rusticl's built output kernel allows 32 work-items (mhla__fit_check tightens the fit): tokens
     * halve to 8 per group. */
    mhla_context *ctx = fake_context(&llvmpipe, 1024, 32768);
    const mhla_config c64 = causal_config(64, 64);
    const mhla_tuning tl = lookup(ctx, &c64);
    const mhla_fit tight = {32, 32768 - 1024};
    mhla_tiles x;
    assert_int_equal(mhla__tiles_causal(ctx, &c64, &tl, &tight, &x), MHLA_OK);
    assert_int_equal(x.tq, 8);
    assert_int_equal(mhla__causal_output_wg(&x, 64), 32);
    free_context(ctx);
}

/* The causal backward's tiles at D = 64 on `d` with `wg` work-items, `local` bytes, N tokens and
 * chunk C, the row's tuning and then `tuning` (NULL: none): the forward's causal tiles first, as a
 * plan builds them. Returns the context (for free_context); *fit is what they were fitted to. */
static mhla_context *backward_causal_tiles(const fake_device *d, size_t wg, uint64_t local, int64_t n, int64_t chunk,
                                           const char *tuning, mhla_config *cfg, mhla_fit *fit, mhla_tiles *x)
{
    mhla_context *ctx = fake_context(d, wg, local);
    *cfg = causal_config(64, 64);
    cfg->seq_t = n;
    cfg->chunk = chunk;
    mhla_tuning t = lookup(ctx, cfg);
    if (tuning)
        assert_int_equal(mhla__tuning_apply(ctx, "test", tuning, &t), MHLA_OK);
    mhla__fit_init(ctx, fit);
    assert_int_equal(mhla__tiles_causal(ctx, cfg, &t, fit, x), MHLA_OK);
    mhla__tiles_backward(cfg, &t, x);
    mhla_shape shape;
    assert_int_equal(mhla__config_validate(cfg, &shape, NULL, 0), MHLA_OK);
    assert_int_equal(mhla__tiles_backward_causal(ctx, cfg, &shape, &t, fit, x), MHLA_OK);
    return ctx;
}

/* The causal backward's tiles of `d` with `local` bytes and chunk C: BCT_FC (0: the three
 * read-outs and bc_diag) and, when fused, bc_dqkv's work-items and local bytes. */
static void expect_fused_n(const fake_device *d, uint64_t local, int64_t n, int64_t chunk, const char *tuning, int fc,
                           size_t wg, uint64_t bytes)
{
    mhla_config cfg;
    mhla_fit fit;
    mhla_tiles x;
    mhla_context *ctx = backward_causal_tiles(d, 1024, local, n, chunk, tuning, &cfg, &fit, &x);
    if (x.bct_fc != fc)
        fail_msg("%s, %llu bytes, C = %lld%s%s: BCT_FC %d, expected %d", d->name, (unsigned long long)local,
                 (long long)chunk, tuning ? ", " : "", tuning ? tuning : "", x.bct_fc, fc);
    if (fc) {
        if (mhla__bc_fused_wg(&x, 64, 64) != wg)
            fail_msg("%s, C = %lld: bc_dqkv %zu work-items (BCT_RT %d, BCT_VE %d, BCT_NV %d), expected %zu", d->name,
                     (long long)chunk, mhla__bc_fused_wg(&x, 64, 64), x.bct_rt, x.bct_ve, x.bct_nv, wg);
        assert_int_equal(mhla__bc_fused_local(&x, 64, 64), bytes);
        assert_true(bytes <= fit.local_bytes && wg <= fit.wg);
    }
    free_context(ctx);
}

static void expect_fused(const fake_device *d, uint64_t local, int64_t chunk, const char *tuning, int fc, size_t wg,
                         uint64_t bytes)
{
    expect_fused_n(d, local, 4096, chunk, tuning, fc, wg, bytes);
}

/* backward_causal_tiled.cl's group (bc_sq tokens x bc_bk pair tokens) for `d` with `wg` work-items,
 * `local` bytes and chunk C; where it is tiled, BCT_FC is 0 (bc_dqkv is not built). */
static void expect_bc_tiled(const fake_device *d, size_t wg, uint64_t local, int64_t chunk, const char *tuning, int sq,
                            int bk)
{
    mhla_config cfg;
    mhla_fit fit;
    mhla_tiles x;
    mhla_context *ctx = backward_causal_tiles(d, wg, local, causal_config(64, 64).seq_t, chunk, tuning, &cfg, &fit, &x);
    if (x.bc_sq != sq || x.bc_bk != bk)
        fail_msg("%s, %zu work-items, %llu bytes, C = %lld%s%s: bc_sq %d, bc_bk %d; expected %d, %d", d->name, wg,
                 (unsigned long long)local, (long long)chunk, tuning ? ", " : "", tuning ? tuning : "", x.bc_sq,
                 x.bc_bk, sq, bk);
    if (sq) {
        assert_int_equal(x.bct_fc, 0);
        assert_true(mhla__bc_tiled_wg(&x) <= fit.wg && mhla__bc_tiled_local(&cfg, &x) <= fit.local_bytes);
    }
    free_context(ctx);
}

/* The GPU row's tiled causal read-outs: 64 tokens x 16 pair tokens (64 work-items, 7824 floats at
 * D = 64, 8336 with the paper normalizer's scalars); at 16 KiB the pair tiles halve, then the tokens, then the pair tiles again (32 x 4: 13008
 * bytes); no more than a chunk of 8 has; bc_sq=0 and the CPU rows keep the CPU form. */
static void test_tiled_causal_backward(void **state)
{
    (void)state;
    expect_bc_tiled(&gpu, 1024, 65536, 64, NULL, 64, 16);
    mhla_context *ctx = fake_context(&gpu, 1024, 65536);
    mhla_config cfg = causal_config(64, 64);
    mhla_tiles x;
    memset(&x, 0, sizeof x);
    x.bc_sq = 64, x.bc_bk = 16;
    assert_int_equal(mhla__bc_tiled_local(&cfg, &x), 7824 * 4);
    assert_int_equal(mhla__bc_tiled_wg(&x), 64);
    /* the paper normalizer's scalars: w rows of Dv + 1 padded to 20 quads (5 per work-item), and
     * their row parts: 64 x 68 + 64 x 20 + 16 x 80 + 16 x 68 + 64 + 16 + 64 x 4 floats */
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    assert_int_equal(mhla__bc_tiled_local(&cfg, &x), 8336 * 4);
    free_context(ctx);
    expect_bc_tiled(&gpu, 1024, 16384, 64, NULL, 32, 4);
    expect_bc_tiled(&gpu, 16, 65536, 64, NULL, 32, 8); /* 16 work-items: 8 x 2 */
    expect_bc_tiled(&gpu, 1024, 65536, 8, NULL, 8, 8);
    expect_bc_tiled(&gpu, 1024, 65536, 64, "bc_sq=0", 0, 0);
    expect_bc_tiled(&avx512, 1024, 1u << 20, 64, NULL, 0, 0);
    expect_bc_tiled(&avx512, 1024, 1u << 20, 64, "bc_sq=32", 32, 16); /* and no bc_dqkv */
}

/* The tiled summary's and read-out's register tiles (tl_rr, tl_qr): 8 key rows (tokens) a work-item
 * where the tuning asks and the group's rows are whole eights (64 x 64: 8 x 16 = 128 work-items), the
 * rows halved first under a lower limit (64: 32 x 64 in 4 x 16), 4 where the head has only 4 (Dk 4)
 * and by default. */
static void expect_summary_rows(size_t wg, int64_t dk, const char *tuning, int td, int rr, int qr)
{
    mhla_context *ctx = fake_context(&gpu, wg, 65536);
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 8, cfg.seq_t = 4096, cfg.block_t = 16, cfg.dk = dk, cfg.dv = 64;
    mhla_tuning t = lookup(ctx, &cfg);
    if (tuning)
        assert_int_equal(mhla__tuning_apply(ctx, "test", tuning, &t), MHLA_OK);
    mhla_shape shape;
    assert_int_equal(mhla__config_validate(&cfg, &shape, NULL, 0), MHLA_OK);
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    mhla_tiles x;
    memset(&x, 0, sizeof x);
    mhla__tiles_tiled(&cfg, &shape, &t, &fit, &x);
    if (x.tl_td != td || x.tl_rr != rr || x.tl_qr != qr)
        fail_msg("%zu work-items, Dk %lld, %s: tl_td %d, tl_rr %d, tl_qr %d; expected %d, %d, %d", wg, (long long)dk,
                 tuning ? tuning : "the row", x.tl_td, x.tl_rr, x.tl_qr, td, rr, qr);
    assert_true((size_t)(x.tl_td / x.tl_rr) * (size_t)(x.tl_tv / 4) <= fit.wg);
    assert_true((size_t)(x.tl_tq / x.tl_qr) * (size_t)(x.tl_tv / 4) <= fit.wg && x.tl_tq % x.tl_qr == 0);
    free_context(ctx);
}

static void test_summary_rows(void **state)
{
    (void)state;
    expect_summary_rows(256, 64, NULL, 64, 4, 4);
    expect_summary_rows(256, 64, "tl_rr=8", 64, 8, 4);
    expect_summary_rows(64, 64, "tl_rr=8", 32, 8, 4);
    expect_summary_rows(256, 4, "tl_rr=8", 4, 4, 4);
    expect_summary_rows(256, 12, "tl_rr=8", 12, 4, 4); /* 12 rows: not whole eights */
    expect_summary_rows(256, 64, "tl_qr=8", 64, 4, 8);  /* the read-out's 64 tokens in 8 x 16 */
}

/* bc_dqkv (bct_fuse): on CPU rows where a chunk's group fits local memory. AVX-512: 4 rows x 64
 * columns per work-item, 16 for a chunk of 64, (2*64*64 + 64*64 + 64 + 16) floats; the chunk rounded
 * up to 16-float vectors; a chunk too large for the local memory, the GPU row, and bct_fuse=0 keep
 * the three read-outs. */
static void test_fused_backward(void **state)
{
    (void)state;
    const uint64_t mib = 1u << 20;
    expect_fused(&avx512, mib, 64, NULL, 64, 16, (2 * 64 * 64 + 64 * 64 + 64 + 16) * 4);
    expect_fused(&avx512, mib, 100, NULL, 112, 28, (2 * 112 * 64 + 112 * 112 + 112 + 28) * 4);
    expect_fused(&avx512, mib, 128, NULL, 128, 32, (2 * 128 * 64 + 128 * 128 + 128 + 32) * 4);
    expect_fused(&avx512, 32768, 64, NULL, 0, 0, 0);      /* llvmpipe-sized local memory */
    expect_fused(&avx512, mib, 1024, NULL, 0, 0, 0);      /* 4.5 MiB for one chunk */
    /* ... unless the sequence is shorter than the chunk: 100 tokens take a group of 112 */
    expect_fused_n(&avx512, mib, 100, 1024, NULL, 112, 28, (2 * 112 * 64 + 112 * 112 + 112 + 28) * 4);
    expect_fused(&avx512, mib, 64, "bct_fuse=0", 0, 0, 0);
    expect_fused(&gpu, 65536, 64, NULL, 0, 0, 0);         /* the GPU row: unmeasured there */
    /* AVX2 (8-float vectors): one token x 8 vectors per work-item, 64 of them for a chunk of 64. */
    expect_fused(&haswell, mib, 64, NULL, 64, 64, (2 * 64 * 64 + 64 * 64 + 64 + 64) * 4);
    /* rusticl with fusion asked for (backward_rusticl_fused): its float4 tiles, 16 column tiles x 4
     * row groups for a chunk of 16. */
    expect_fused(&llvmpipe, 32768, 16, "bct_fuse=1", 16, 64, (2 * 16 * 64 + 16 * 16 + 16 + 64) * 4);
}

/* The prefix kernel's vector divides a slot's width, B*H*Dk*(Dv + z column): the paper normalizer
 * adds the column. */
static void test_prefix_width(void **state)
{
    (void)state;
    mhla_context *ctx = fake_context(&haswell, 4096, 65536);
    mhla_config cfg = causal_config(3, 4);
    cfg.heads = 1;
    const mhla_tuning t = lookup(ctx, &cfg);
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    mhla_tiles x;
    assert_int_equal(mhla__tiles_causal(ctx, &cfg, &t, &fit, &x), MHLA_OK);
    assert_int_equal(x.pre_ve, 4); /* 3 x 4 = 12 floats */
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    assert_int_equal(mhla__tiles_causal(ctx, &cfg, &t, &fit, &x), MHLA_OK);
    assert_int_equal(x.pre_ve, 1); /* 3 x 5 = 15 floats */
    cfg.dv = 5;
    assert_int_equal(mhla__tiles_causal(ctx, &cfg, &t, &fit, &x), MHLA_OK);
    assert_int_equal(x.pre_ve, 2); /* 3 x 6 = 18 floats */
    free_context(ctx);
}

/* ---- block splits (non-causal) ------------------------------------------------------------------ */

static void test_forward_splits(void **state)
{
    (void)state;
    mhla_context *ctx = fake_context(&haswell, 4096, 65536); /* 16 compute units */
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.dk = cfg.dv = 64;
    /* 256 groups per unit (4096 wanted), segments of 256 tokens or more */
    const mhla_tuning t = lookup(ctx, &cfg);
    assert_int_equal(t.groups_per_cu, 256);
    assert_int_equal(t.split_min_len, 256);
    static const struct {
        int64_t m, bh, nb;
        int splits, split_len;
    } cases[] = {
        {4, 8, 4096, 16, 256}, /* 32 groups for 4096 wanted: as many 256-token segments as fit */
        {4, 8, 512, 2, 256},   /* no segment under 256 tokens */
        {4, 8, 200, 1, 200},   /* a block shorter than one segment stays whole */
        {64, 64, 4096, 1, 4096}, /* enough groups already */
        {16, 8, 4096, 16, 256},
        {1, 43, 1000, 3, 334},
        {1, 1, 1030, 4, 258}, /* 4096 wanted, 4 allowed; the last segment 256 tokens */
        {1, 26, 1001, 3, 334},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const mhla_shape shape = self_shape(cases[i].m, cases[i].nb, cases[i].bh, 65);
        mhla_tiles x;
        mhla__tiles_forward(ctx, &cfg, &shape, &t, &x);
        if (x.splits != cases[i].splits || x.split_len != cases[i].split_len)
            fail_msg("M = %lld, B*H = %lld, %lld tokens per block: %d segments of %d; expected %d of %d",
                     (long long)cases[i].m, (long long)cases[i].bh, (long long)cases[i].nb, x.splits, x.split_len,
                     cases[i].splits, cases[i].split_len);
    }
    /* Streaming stores only for f32 output rows; prefetch only where kernels become native code. */
    const mhla_shape shape = self_shape(4, 1024, 8, 65);
    mhla_tiles x;
    cfg.dtype = MHLA_DTYPE_F16;
    mhla__tiles_forward(ctx, &cfg, &shape, &t, &x);
    assert_int_equal(x.out_nt, 0);
    assert_int_equal(x.out_pf, 4);
    ctx->limits.native_prefetch = 0;
    mhla__tiles_forward(ctx, &cfg, &shape, &t, &x);
    assert_int_equal(x.out_pf, 0);
    free_context(ctx);
}

/* The re-reads a mixing read-out adds (tl_fuse, bt_fuse) against fuse_mb, and the GPU rows' limit:
 * at B = 1, H = 8, N = 1024 (M = 4 in 4 segments: 16 pieces, 64-token groups) about 30 MiB, within
 * the 32 MiB of the GPU rows; at B = 8, N = 4096 (M = 16, whole: 64 groups of 64 tokens per block)
 * 1 GiB, which no launch saved pays for. */
static void test_fuse_rereads(void **state)
{
    (void)state;
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.dk = cfg.dv = 64;
    /* 8 heads x 4 blocks x 4 tiles x 15 extra pieces x 64 x 65 floats = 31,948,800 bytes */
    assert_true(mhla__fuse_fits(&cfg, 8, 4, 256, 64, 16, 32));
    assert_false(mhla__fuse_fits(&cfg, 8, 4, 256, 64, 16, 30));
    assert_false(mhla__fuse_fits(&cfg, 64, 16, 256, 64, 16, 32));
    assert_true(mhla__fuse_fits(&cfg, 64, 16, 256, 64, 16, 1024));
    assert_true(mhla__fuse_fits(&cfg, 64, 16, 256, 64, 1, 0));  /* one source: nothing read again */
    assert_false(mhla__fuse_fits(&cfg, 1, 1, 1, 64, 2, 0));     /* 0 MiB: never with two */
    assert_true(mhla__fuse_fits(&cfg, 8, 4, 250, 64, 16, 32));  /* a partial tile counts whole */
    assert_false(mhla__fuse_fits(&cfg, 8, 4, 257, 64, 16, 32)); /* 5 tiles: 39.9 MB */
    /* huge shapes compare without overflow */
    assert_false(mhla__fuse_fits(&cfg, INT64_C(1) << 40, INT64_C(1) << 20, INT64_C(1) << 20, 4, 1 << 20, 1 << 30));
    mhla_context *ctx = fake_context(&gpu, 1024, 49152);
    const mhla_tuning t = lookup(ctx, &cfg);
    assert_int_equal(t.fuse_mb, 32);
    free_context(ctx);
}

/* ---- rules every fit keeps ---------------------------------------------------------------------- */

#define CHECK_RULE(cond)                                                                            \
    do {                                                                                            \
        if (!(cond))                                                                                \
            fail_msg("%s, %zu work-items, %llu bytes of local memory, Dk = %lld, Dv = %lld: %s", d->name, wg, \
                     (unsigned long long)local, (long long)dk, (long long)dv, #cond);               \
    } while (0)

/* Every device of the list, under several limits, for head dimensions powers of two or not: the
 * tiles divide what they tile, vectors are powers of two within the device's width (on CPUs within
 * its SIMD target's), and the causal output and softmax kernels fit the work-group and local memory
 * limits. */
static void test_sweep(void **state)
{
    (void)state;
    static const size_t wgs[] = {4096, 1024, 256, 64, 32, 16, 8, 1};
    static const uint64_t locals[] = {65536, 32768, 16384, 4096};
    static const int64_t dims[][2] = {{64, 64}, {128, 128}, {32, 48}, {48, 32}, {24, 40}, {16, 256},
                                      {256, 256}, {3, 5}, {1, 1}, {96, 80}, {7, 64}, {64, 12}};
    size_t fits = 0;
    for (size_t di = 0; di < sizeof sweep_devices / sizeof sweep_devices[0]; ++di)
        for (size_t wi = 0; wi < sizeof wgs / sizeof wgs[0]; ++wi)
            for (size_t li = 0; li < sizeof locals / sizeof locals[0]; ++li)
                for (size_t hi = 0; hi < sizeof dims / sizeof dims[0]; ++hi) {
                    const fake_device *d = &sweep_devices[di];
                    const size_t wg = wgs[wi];
                    const uint64_t local = locals[li];
                    const int64_t dk = dims[hi][0], dv = dims[hi][1];
                    mhla_context *ctx = fake_context(d, wg, local);
                    mhla_config cfg = causal_config(dk, dv);
                    cfg.normalizer = hi % 2 ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
                    const mhla_tuning t = lookup(ctx, &cfg);
                    mhla_fit fit;
                    mhla__fit_init(ctx, &fit);
                    CHECK_RULE(fit.wg >= 1 && fit.wg <= wg);
                    CHECK_RULE(fit.local_bytes < local || local == 0);

                    /* Vector widths: powers of two, at most the float width (float4 where it is less),
                     * and on a CPU row at most what its SIMD target holds. */
                    const int cap = d->float_width > 4 ? d->float_width : 4;
                    /* sum_rd too, except where the summary's k~ come from local memory (a row count) */
                    const int widths[] = {t.sum_ve, t.out_ve, t.out_dc, t.mix_ve, t.sm_vw, t.sum_rd};
                    CHECK_RULE(!t.sum_lk || (t.sum_rd >= 1 && t.sum_rd <= 16));
                    for (size_t i = 0; i < sizeof widths / sizeof widths[0] - (t.sum_lk ? 1 : 0); ++i) {
                        CHECK_RULE(is_pow2(widths[i]) && widths[i] <= cap && widths[i] <= 16);
                        if (d->type == CL_DEVICE_TYPE_CPU && !strstr(d->name, "llvmpipe"))
                            CHECK_RULE(widths[i] <= ctx->limits.simd.width && widths[i] <= d->float_width);
                    }

                    mhla_tiles x;
                    const mhla_status cs = mhla__tiles_causal(ctx, &cfg, &t, &fit, &x);
                    /* The smallest output tiles: one register tile of tokens, one key, scalars. */
                    const uint64_t least = (uint64_t)(t.out_rt * dk + dk + t.out_rt) * sizeof(float);
                    CHECK_RULE(cs == (least <= fit.local_bytes ? MHLA_OK : MHLA_ERR_UNSUPPORTED));
                    if (cs == MHLA_OK) {
                        ++fits;
                        /* with sum_lk any count up to Dk (the last row tile overlapping), where the
                         * chunk's k~ rows and the key sums fit the local memory */
                        const uint64_t lk = ((uint64_t)t.sum_chunk + 1) * (uint64_t)dk * sizeof(float);
                        CHECK_RULE(x.sum_lk == (t.sum_lk && 2 * lk <= fit.local_bytes));
                        CHECK_RULE(x.sum_lk ? x.sum_rd == (t.sum_rd < dk ? t.sum_rd : dk)
                                            : is_pow2(x.sum_rd) && dk % x.sum_rd == 0);
                        CHECK_RULE(mhla__summary_work_items(&x, dk, dv) ==
                                   (size_t)((dk + x.sum_rd - 1) / x.sum_rd * (dv / (x.sum_ve * x.sum_nv))));
                        CHECK_RULE(is_pow2(x.sum_ve) && dv % (x.sum_ve * x.sum_nv) == 0);
                        CHECK_RULE(is_pow2(x.out_ve) && dv % (x.out_ve * x.out_nv) == 0);
                        CHECK_RULE(is_pow2(x.out_dc) && dk % x.out_dc == 0);
                        CHECK_RULE(x.out_ve <= t.out_ve && x.sum_ve <= t.sum_ve && x.out_dc <= t.out_dc);
                        CHECK_RULE(x.out_rt == t.out_rt && x.tq >= x.out_rt && x.tq % x.out_rt == 0);
                        CHECK_RULE(x.kt >= 1 && x.kt % x.out_ve == 0);
                        CHECK_RULE(x.mix_mr == t.pre_mr && x.mix_nv == t.pre_nv);
                        const int64_t width = cfg.batch * cfg.heads * dk * (dv + (hi % 2));
                        CHECK_RULE(is_pow2(x.pre_ve) && x.pre_ve <= t.mix_ve && width % x.pre_ve == 0);
                        CHECK_RULE(x.gemm_rows >= 0 && x.gemm_rows % x.mix_mr == 0 && x.gemm_rows <= t.gemm_rows);
                        CHECK_RULE(fit.wg >= 64 || x.gemm_rows == 0);
                        /* padded slots only where no CLBlast GEMM reads them (kernels/causal.h) */
                        CHECK_RULE(x.slot_pad == (x.gemm_rows == 0 && x.cp_ti == 0));
                        /* the tiled read-out and prefix: 4 x 4 tiles, groups and arrays that fit, no
                         * more than the tuning asks; the prefix's with no CLBlast blocks */
                        CHECK_RULE(x.ct_sq == 0 ? x.ct_bk == 0
                                                : t.ct_sq > 0 && x.ct_sq % 4 == 0 && x.ct_bk % 4 == 0 &&
                                                      x.ct_sq >= 4 && x.ct_sq <= t.ct_sq && x.ct_bk >= 4 &&
                                                      x.ct_bk <= t.ct_bk && mhla__causal_tiled_wg(&x) <= fit.wg &&
                                                      mhla__causal_tiled_local(&cfg, &x) <= fit.local_bytes);
                        CHECK_RULE(x.cp_ti == 0 ? x.cp_tw == 0 && x.cp_tj == 0
                                                : x.cp_ti % 4 == 0 && x.cp_tw % 4 == 0 && x.cp_ti <= t.cp_ti &&
                                                      x.cp_tw <= t.cp_tw && x.cp_tj >= 1 && x.gemm_rows == 0 &&
                                                      mhla__prefix_tiled_wg(&x) <= fit.wg &&
                                                      mhla__prefix_tiled_local(&x) <= fit.local_bytes);
                        CHECK_RULE((x.cp_ti > 0) == (t.cp_ti > 0)); /* 4 x 4 x 1 fits every device */
                        CHECK_RULE(x.cs_tk == 0 ? x.cs_tn == 0 && t.cs_tk == 0
                                                : x.cs_tn % 4 == 0 && x.cs_tn >= 4 && x.cs_tn <= t.tl_tn &&
                                                      x.cs_tk >= 1 && x.cs_tk <= t.cs_tk &&
                                                      mhla__causal_summary_tiled_wg(&x) <= fit.wg &&
                                                      mhla__causal_summary_tiled_local(&x) <= fit.local_bytes);
                        /* the decoder's parts: no more than asked or than Dk, a group of one lane
                         * per part and its arrays within the limits (1 always goes) */
                        CHECK_RULE(x.dec_dp >= 1 && x.dec_dp <= (t.dec_dp > 1 ? t.dec_dp : 1) && x.dec_dp <= dk);
                        CHECK_RULE(x.dec_dp == 1 || ((size_t)x.dec_dp <= fit.wg &&
                                                     mhla__decoder_step_local(&cfg, &x) <= fit.local_bytes));
                        const int owg = mhla__causal_output_wg(&x, dv);
                        CHECK_RULE(owg == (int)(dv / (x.out_ve * x.out_nv)) * (x.tq / x.out_rt));
                        CHECK_RULE(owg >= 1 && (size_t)owg <= fit.wg);
                        const uint64_t ol = mhla__causal_output_local(&x, dk);
                        CHECK_RULE(ol == (uint64_t)(x.tq * dk + dk * x.kt + x.tq * x.kt) * sizeof(float));
                        CHECK_RULE(ol <= fit.local_bytes);
                        CHECK_RULE(x.tq <= t.tq && x.kt <= (t.kt + x.out_ve - 1) / x.out_ve * x.out_ve);
                    }

                    const mhla_status ss = mhla__tiles_softmax(ctx, &cfg, &t, &fit, &x);
                    const uint64_t least_sm = (uint64_t)(dk + dv + 1) * sizeof(float); /* one key, scalars */
                    CHECK_RULE(ss == (least_sm <= fit.local_bytes ? MHLA_OK : MHLA_ERR_UNSUPPORTED));
                    if (ss == MHLA_OK && x.sm_tiled) { /* softmax_tiled.cl: its group and arrays fit */
                        CHECK_RULE(t.sm_tiled && x.sm_bq % 4 == 0 && x.sm_bk % 4 == 0);
                        CHECK_RULE(x.sm_bq >= 4 && x.sm_bq <= t.sm_bq && x.sm_bk >= 4 && x.sm_bk <= t.sm_bk);
                        CHECK_RULE((size_t)(x.sm_bq / 4) * (size_t)(x.sm_bk / 4) <= fit.wg);
                        const uint64_t sq = (uint64_t)x.sm_bq, bk = (uint64_t)x.sm_bk, dvp = (uint64_t)(dv + 3) / 4 * 4;
                        const uint64_t sl = mhla__softmax_local(&cfg, &x);
                        CHECK_RULE(sl == sizeof(float) * ((uint64_t)dk * (sq + 4) + (uint64_t)dk * (bk + 4) + bk * dvp +
                                                          bk * (sq + 4) + sq * (bk / 4) + 4 * sq));
                        CHECK_RULE(sl <= fit.local_bytes);
                    } else if (ss == MHLA_OK) {
                        CHECK_RULE(is_pow2(x.sm_vw) && x.sm_vw <= t.sm_vw);
                        CHECK_RULE(x.sm_bk >= x.sm_vw && x.sm_bk % x.sm_vw == 0 && x.sm_bk <= t.sm_bk);
                        const uint64_t dvp = (uint64_t)((dv + x.sm_vw - 1) / x.sm_vw * x.sm_vw);
                        const uint64_t sl = mhla__softmax_local(&cfg, &x);
                        CHECK_RULE(sl == sizeof(float) * (uint64_t)x.sm_bk * ((uint64_t)dk + dvp + 1));
                        CHECK_RULE(sl <= fit.local_bytes);
                        CHECK_RULE(x.sm_bq == t.sm_bq && x.sm_rows == (t.sm_rows != 0));
                    }

                    /* Non-causal: register tiles as the causal ones, segments covering each block. */
                    mhla_config ncfg = cfg;
                    ncfg.causal = 0;
                    const int64_t nb = 64 * (int64_t)(hi + 1) * (int64_t)(wi + 1);
                    const mhla_shape shape = self_shape(4, nb, 8, dv + 1);
                    mhla_tiles f;
                    mhla__tiles_forward(ctx, &ncfg, &shape, &t, &f);
                    CHECK_RULE((f.sum_lk || dk % f.sum_rd == 0) && f.sum_rd <= dk);
                    CHECK_RULE(dv % (f.sum_ve * f.sum_nv) == 0);
                    CHECK_RULE(dv % (f.out_ve * f.out_nv) == 0 && dk % f.out_dc == 0);
                    CHECK_RULE(f.splits >= 1 && (int64_t)f.splits * f.split_len >= nb);
                    CHECK_RULE((int64_t)(f.splits - 1) * f.split_len < nb);
                    /* the tiled forward's segments: whole local tiles, at least two */
                    CHECK_RULE(f.splits == 1 || f.split_len >= (f.tiled ? 2 * f.tl_tk : t.split_min_len));
                    CHECK_RULE(f.splits == 1 || !f.tiled || f.split_len % f.tl_tk == 0);
                    /* its groups of 4 x 4 tiles within the work-group limit, its local tiles within the
                     * local memory down to the smallest (one token; four key dimensions, 4 tokens) */
                    if (f.tiled) {
                        CHECK_RULE(f.tl_td % 4 == 0 && f.tl_tv % 4 == 0 && f.tl_tq % 4 == 0);
                        CHECK_RULE((size_t)(f.tl_td / 4) * (size_t)(f.tl_tv / 4) <= fit.wg ||
                                   (f.tl_td == 4 && f.tl_tv == 4));
                        CHECK_RULE((size_t)(f.tl_tq / 4) * (size_t)(f.tl_tv / 4) <= fit.wg || f.tl_tq == 4);
                        CHECK_RULE(f.tl_td <= dk + 3 && f.tl_tv <= dv + 3 && f.tl_dc <= dk + 3 && f.tl_dc % 4 == 0);
                        CHECK_RULE(((uint64_t)f.tl_tk * (uint64_t)(f.tl_td + f.tl_tv) + (uint64_t)f.tl_td) * 4 <=
                                       fit.local_bytes ||
                                   f.tl_tk == 1);
                        CHECK_RULE(mhla__output_tiled_local(&f) <= fit.local_bytes || (f.tl_dc == 4 && f.tl_tq == 4));
                        /* the one-launch forward (asked for here whatever the row says): its group and
                         * pool within the limits, or none (on_tv 0) */
                        mhla_tuning t1 = t;
                        t1.tl_one = 1 << 20;
                        mhla_tiles o = f;
                        mhla__tiles_one(&ncfg, &t1, &fit, &o);
                        CHECK_RULE(o.tl_one == t1.tl_one);
                        if (o.on_tv) {
                            CHECK_RULE(o.on_tv % 4 == 0 && o.on_tv <= 16 && o.on_dc % 4 == 0 && o.on_dc <= dk + 3);
                            CHECK_RULE(o.on_ks >= 1 && o.on_ks <= 4 && o.on_tk >= 1);
                            CHECK_RULE(mhla__forward_one_wg(&ncfg, &o) <= fit.wg);
                            CHECK_RULE(mhla__forward_one_local(&ncfg, &o) <= fit.local_bytes);
                        } else { /* none: not even the least (one slice of 4 columns, one token a tile,
                                    * 4 dimensions a read-out tile) fits the group or the local memory */
                            const uint64_t dk4 = (uint64_t)(dk + 3) / 4 * 4;
                            CHECK_RULE(dk4 / 4 > fit.wg || (2 * dk4 + dk4 / 4 + 4) * 16 > fit.local_bytes);
                        }
                    }
                    free_context(ctx);
                }
    assert_true(fits > 0);
}

/* ---- refusals ------------------------------------------------------------------------------------ */

static void assert_contains(const char *text, const char *part)
{
    if (!strstr(text, part))
        fail_msg("'%s' does not say '%s'", text, part);
}

/* Too little local memory for even the smallest tiles: MHLA_ERR_UNSUPPORTED naming the sizes; one
 * byte more and the smallest tiles are taken. */
static void test_too_small(void **state)
{
    (void)state;
    /* The CPU row's smallest output tiles at Dk = 64: one token, one key, scalars: 64 + 64 + 1
     * floats = 516 bytes. A 1032-byte device keeps half back: exactly 516 usable. */
    mhla_context *ctx = fake_context(&haswell, 4096, 1032);
    const mhla_config cfg = causal_config(64, 64);
    const mhla_tuning t = lookup(ctx, &cfg);
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    assert_int_equal(fit.local_bytes, 516);
    mhla_tiles x;
    assert_int_equal(mhla__tiles_causal(ctx, &cfg, &t, &fit, &x), MHLA_OK);
    assert_int_equal(x.tq, 1);
    assert_int_equal(x.kt, 1);
    assert_int_equal(x.out_ve, 1);
    assert_int_equal(x.out_nv, 64); /* the same 64 columns per work-item, as scalars */
    assert_int_equal(mhla__causal_output_local(&x, 64), 516);
    free_context(ctx);

    ctx = fake_context(&haswell, 4096, 1030);
    mhla__fit_init(ctx, &fit);
    assert_int_equal(mhla__tiles_causal(ctx, &cfg, &t, &fit, &x), MHLA_ERR_UNSUPPORTED);
    assert_contains(ctx->message, "needs 516 bytes of local memory for dk = 64");
    assert_contains(ctx->message, "pthread-haswell-AMD EPYC 7B13 has 1030 (515 usable)");
    assert_contains(mhla_last_message(), "dk = 64");

    /* Softmax with Dk = Dv = 256 needs 256 + 256 + 1 floats for one key. */
    const mhla_config big = causal_config(256, 256);
    assert_int_equal(mhla__tiles_softmax(ctx, &big, &t, &fit, &x), MHLA_ERR_UNSUPPORTED);
    assert_contains(ctx->message, "Dk = 256, Dv = 256 needs 2052 bytes of local memory even with a one-key tile");
    assert_contains(ctx->message, "has 1030 (515 usable)");
    const mhla_fit just = {4096, 2052};
    assert_int_equal(mhla__tiles_softmax(ctx, &big, &t, &just, &x), MHLA_OK);
    assert_int_equal(x.sm_bk, 1);
    assert_int_equal(x.sm_vw, 1);

    /* A fit of no work-items at all (a kernel reporting 0) cannot hold any output group. */
    const mhla_fit none = {0, 65536};
    assert_int_equal(mhla__tiles_causal(ctx, &cfg, &t, &none, &x), MHLA_ERR_UNSUPPORTED);
    assert_contains(ctx->message, "needs groups of 1 work-items for dv = 64; pthread-haswell-AMD EPYC 7B13 allows 0");
    free_context(ctx);
}

/* ---- -D flags ------------------------------------------------------------------------------------- */

/* The tiles of test_cpu_row_d64's device for a causal D = 64 configuration. */
static void cpu_causal_tiles(mhla_config *cfg, mhla_tiles *x)
{
    mhla_context *ctx = fake_context(&haswell, 4096, 2u << 20); /* PoCL's local memory */
    *cfg = causal_config(64, 64);
    const mhla_tuning t = lookup(ctx, cfg);
    mhla_fit fit;
    mhla__fit_init(ctx, &fit);
    assert_int_equal(mhla__tiles_causal(ctx, cfg, &t, &fit, x), MHLA_OK);
    mhla_tiles sm;
    assert_int_equal(mhla__tiles_softmax(ctx, cfg, &t, &fit, &sm), MHLA_OK);
    x->sm_vw = sm.sm_vw, x->sm_bk = sm.sm_bk, x->sm_rows = sm.sm_rows;
    free_context(ctx);
}

static void test_build_options(void **state)
{
    (void)state;
    mhla_config cfg;
    mhla_tiles x;
    cpu_causal_tiles(&cfg, &x);
    static const struct {
        mhla_kernel_file f;
        const char *flags;
    } cases[] = {
        {MHLA_KF_CAUSAL_OUTPUT, "-DDK=64 -DDV=64 -DLAYOUT_BHND=0 -DFEATURE_MAP=1 -DNORMALIZER=2 -DDTYPE=0 "
                                "-DOUT_RT=1 -DOUT_VE=8 -DOUT_NV=8 -DOUT_DC=4 -DOUT_NT=0 -DOUT_PRE=0 -DOUT_PF=0 "
                                "-DCAUSAL_TQ=32 -DCAUSAL_KT=32 -DCAUSAL_SRT=8 -DCAUSAL_SKV=1 -DSLOT_PAD=1"},
        {MHLA_KF_CAUSAL_SUMMARY, "-DDK=64 -DDV=64 -DLAYOUT_BHND=0 -DFEATURE_MAP=1 -DNORMALIZER=2 -DDTYPE=0 "
                                 "-DSUM_RD=6 -DSUM_VE=8 -DSUM_NV=2 -DSUM_CHUNK=256 -DSUM_KB=1 -DSUM_LK=1 "
                                 "-DSLOT_PAD=1"},
        /* rows of floats: nothing of the configuration, so one program serves every head size */
        {MHLA_KF_CAUSAL_PREFIX, "-DMIX_MR=4 -DMIX_NV=2 -DPRE_VE=8"},
        {MHLA_KF_MIXING, "-DMIX_MR=4 -DMIX_VE=8 -DMIX_NV=2"},
        /* the summary always writes z: no normalizer */
        {MHLA_KF_BLOCK_SUMMARY, "-DDK=64 -DDV=64 -DLAYOUT_BHND=0 -DFEATURE_MAP=1 -DDTYPE=0 "
                                "-DSUM_RD=6 -DSUM_VE=8 -DSUM_NV=2 -DSUM_CHUNK=256 -DSUM_KB=1 -DSUM_LK=1 -DPREFETCH=1"},
        /* a CPU row: no prefix GEMM blocks, so padded slots */
        {MHLA_KF_DECODER, "-DDK=64 -DDV=64 -DLAYOUT_BHND=0 -DFEATURE_MAP=1 -DNORMALIZER=2 -DDTYPE=0 -DSLOT_PAD=1 -DSTEP_DP=1 -DSTEP_NEXT=0 -DKV_GROUP=1"},
        /* softmax: no feature map, no normalizer */
        {MHLA_KF_SOFTMAX, "-DDK=64 -DDV=64 -DLAYOUT_BHND=0 -DDTYPE=0 -DVW=8 -DBK=64 -DCOPY_ROWS=1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_build_opts opts;
        mhla__build_options(cases[i].f, &cfg, &x, &opts);
        if (strcmp(opts.text, cases[i].flags) != 0 || opts.len != strlen(cases[i].flags))
            fail_msg("kernel file %d: '%s', expected '%s'", (int)cases[i].f, opts.text, cases[i].flags);
    }
}

/* Whether `word` occurs in `text` as a whole identifier. */
static int has_word(const char *text, const char *word)
{
    const size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word)) {
        const int before = p > text && (p[-1] == '_' || (p[-1] >= 'A' && p[-1] <= 'Z') ||
                                         (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= '0' && p[-1] <= '9'));
        const char a = p[n];
        const int after = a == '_' || (a >= 'A' && a <= 'Z') || (a >= 'a' && a <= 'z') || (a >= '0' && a <= '9');
        if (!before && !after)
            return 1;
    }
    return 0;
}

/* Flags a file gets without reading them, known: causal_output.cl shares output.cl's OUT_ group but
 * has no streaming stores or prefetch (mhla__tiles_causal leaves both 0, checked below, so they never
 * split its programs); backward_causal.cl and backward_causal_readout.cl share the BCT_ group, each
 * reading part of it (the backward's tiles vary them: a needless rebuild at worst). */
static const char *const unread[] = {"causal_output:OUT_NT", "causal_output:OUT_PF", "backward_causal:BCT_RT",
                                     "backward_causal:BCT_VE", "backward_causal:BCT_NV", "backward_causal:BCT_TQ",
                                     "backward_causal:BCT_KT", "backward_causal_readout:BCT_SR"};

static int known_unread(const char *file, const char *macro)
{
    char key[96];
    snprintf(key, sizeof key, "%s:%s", file, macro);
    for (size_t i = 0; i < sizeof unread / sizeof unread[0]; ++i)
        if (strcmp(unread[i], key) == 0)
            return 1;
    return 0;
}

/* Every -D flag a kernel file gets is a macro its source (includes inlined) reads: a flag it never
 * reads would only make the program cache build it again for nothing. */
static void test_flags_are_read(void **state)
{
    (void)state;
    static const char *const names[] = {
        [MHLA_KF_BLOCK_SUMMARY] = "block_summary", [MHLA_KF_OUTPUT] = "output", [MHLA_KF_MIXING] = "mixing",
        [MHLA_KF_CAUSAL_SUMMARY] = "causal_summary", [MHLA_KF_CAUSAL_PREFIX] = "causal_prefix",
        [MHLA_KF_CAUSAL_OUTPUT] = "causal_output", [MHLA_KF_DECODER] = "decoder", [MHLA_KF_SOFTMAX] = "softmax",
        [MHLA_KF_BACKWARD_SUMMARY] = "backward_summary", [MHLA_KF_BACKWARD_READOUT] = "backward_readout",
        [MHLA_KF_BACKWARD_MIXING] = "backward_mixing", [MHLA_KF_BACKWARD_CAUSAL] = "backward_causal",
        [MHLA_KF_BACKWARD_CAUSAL_READOUT] = "backward_causal_readout", [MHLA_KF_SUMMARY_TILED] = "summary_tiled",
        [MHLA_KF_OUTPUT_TILED] = "output_tiled", [MHLA_KF_FORWARD_ONE] = "forward_one", [MHLA_KF_BACKWARD_TILED] = "backward_tiled",
        [MHLA_KF_SOFTMAX_TILED] = "softmax_tiled", [MHLA_KF_CAUSAL_TILED] = "causal_tiled",
        [MHLA_KF_CAUSAL_PREFIX_TILED] = "causal_prefix_tiled", [MHLA_KF_CAUSAL_SUMMARY_TILED] = "causal_summary_tiled",
    };
    mhla_config cfg;
    mhla_tiles x;
    cpu_causal_tiles(&cfg, &x);
    assert_int_equal(x.out_nt, 0); /* the causal tiles' unread flags are constant */
    assert_int_equal(x.out_pf, 0);
    for (size_t f = 0; f < sizeof names / sizeof names[0]; ++f) {
        const char *source = NULL;
        for (size_t k = 0; k < mhla__embedded_kernel_count; ++k)
            if (strcmp(mhla__embedded_kernels[k].name, names[f]) == 0)
                source = mhla__embedded_kernels[k].source;
        if (!source)
            fail_msg("no embedded kernels/%s.cl", names[f]);
        mhla_build_opts opts;
        mhla__build_options((mhla_kernel_file)f, &cfg, &x, &opts);
        assert_true(opts.len > 0);
        char macro[64];
        for (const char *p = strstr(opts.text, "-D"); p; p = strstr(p + 2, "-D")) {
            size_t n = 0;
            while (p[2 + n] != '=' && p[2 + n] && n + 1 < sizeof macro) {
                macro[n] = p[2 + n];
                ++n;
            }
            macro[n] = '\0';
            if (!has_word(source, macro) && !known_unread(names[f], macro))
                fail_msg("kernels/%s.cl gets -D%s but never reads it", names[f], macro);
            if (known_unread(names[f], macro) && has_word(source, macro))
                fail_msg("kernels/%s.cl now reads %s: take it off the list of unread flags", names[f], macro);
        }
    }
}

int main(void)
{
    /* The built-in rows only: no tuning database on disk, no MHLA_TUNING from the caller. */
    setenv("MHLA_CACHE_DIR", "off", 1);
    unsetenv("MHLA_TUNING");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_init),       cmocka_unit_test(test_cpu_row_d64),
        cmocka_unit_test(test_gpu_row_d64),    cmocka_unit_test(test_cpu_vendor_rows),
        cmocka_unit_test(test_gpu_vendor_rows),
        cmocka_unit_test(test_fused_backward),    cmocka_unit_test(test_tiled_causal_backward),
        cmocka_unit_test(test_summary_rows),    cmocka_unit_test(test_prefix_width),
        cmocka_unit_test(test_forward_splits), cmocka_unit_test(test_fuse_rereads), cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_too_small),      cmocka_unit_test(test_build_options),
        cmocka_unit_test(test_flags_are_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
