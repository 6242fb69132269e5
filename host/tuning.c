/* Tuning knowledge as data: every per-device choice of every kernel, one row per kind of device,
 * looked up by vendor, device name and device type, ending at a default; CPU rows take their
 * widths and register tiles from the device's SIMD target (host/cpu_row.c).
 * Overrides, in order: MHLA_TUNING (experiments), then the context's own
 * (mhla_context_set_tuning), both "name=value,..." with "row=NAME" to start from a named row.
 * host/tiling.c fits the result to a configuration and turns it into -D flags. */
#include "internal.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tuning_row {
    const char *name;    /* for row=NAME and for messages */
    const char *vendor;  /* substring of CL_DEVICE_VENDOR, or NULL for any */
    const char *device;  /* substring of CL_DEVICE_NAME, or NULL for any */
    cl_device_type type; /* 0 for any */
    int registers;       /* CPU rows: register tiles derived (host/cpu_row.c) for this many vector
                            registers, 0 for the device's own count; -1: the row's tiles as written */
    mhla_tuning t;
} tuning_row;

/* First match wins, so specific rows come before the defaults. Why these numbers:
 * - CPUs (PoCL, vendor CPU runtimes) compile explicit vectors straight to SIMD registers and
 *   barely vectorize scalar work-items, so each work-item row is one vector as wide as the
 *   registers the compiler targets, and the register tiles are sized to how many there are:
 *   both derived from the device (host/cpu_row.c: 16 floats x 32 registers with AVX-512, 8 x 16
 *   with AVX2). Wider vectors never help: without AVX-512 a float16 argument or return value
 *   changes the calling convention (clang warns, and PoCL prints the warning on stderr).
 *   The summary prefetches its next chunk (pf, kernels/common.h) and folds its partial sums
 *   every 128 tokens (sum_chunk): each fold is a barrier, and CPU runtimes pass every work-item
 *   of the group through it (PoCL 3.1, 2-core EPYC, the summary loop alone on L2-resident rows:
 *   119-149 GFLOP/s folding every 32 tokens, 143-175 every 128, 155-175 never; the whole summary
 *   stage at N=16384, M=64 and 65536, M=128, paired runs: 2 to 12% faster, 5% in the median).
 *   Work-groups are tasks, so a few per core suffice. The mixing GEMM runs in kernels/mixing.cl:
 *   CLBlast's GEMMs stage tiles in local memory behind barriers, which CPU runtimes emulate in
 *   ordinary memory (PoCL 3.1, 2 cores, N=16384, M=64, H=8, D=64: CLBlast 18-37 ms vs 3-4 ms for
 *   the kernel, measured in the same runs); likewise the causal prefix sums every earlier chunk
 *   itself (gemm_rows 0).
 *   Softmax (kernels/softmax.cl): whole registers along keys and values, tiles copied row by row
 *   (contiguous, vectorized), 256 query rows per group to amortize the copy. PoCL 3.1, 2 cores,
 *   N=2048, H=8, D=64, process CPU time, best of 5: sm_bq 64/128/256/512 -> 205/196/165/155 ms;
 *   sm_bk 32/64/128 -> 204/165/210 ms; float4/8/16 -> 275/175/165 ms; coalesced copy 188 ms
 *   against rows' 165.
 * - GPUs want many light work-items: float4 columns, smaller register tiles, enough work-groups
 *   to fill every compute unit several times, CLBlast's tuned GEMM for the mixing and for the
 *   causal prefix blocks of 32 chunks. Softmax: float4 loads from local memory, 16-key tiles so
 *   that the private score row stays in registers (the layout of llama.cpp's OpenCL flash
 *   attention), coalesced tile copies. Not yet measured on a GPU (docs/devices.md).
 * - Mesa's llvmpipe (rusticl) is a CPU device that runs work-items as SIMD lanes, 8 at a time
 *   (256 bits), like a GPU; it reports a float width of 1. See docs/devices.md for its figures.
 * - Anything else: GPU-like choices with smaller tiles. */
static const tuning_row rows[] = {
    {"llvmpipe", NULL, "llvmpipe", 0, -1,
     {.vec = 4, .sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .sum_chunk = 32, .out_rt = 4, .out_ve = 4, .out_nv = 1,
      .out_dc = 4, .out_nt = 0, .out_pre = 0, .out_pf = 0, .wg = 64, .groups_per_cu = 8, .split_min_len = 128, .pf = 0,
      .mix_kernel = 1, .mix_mr = 4, .mix_ve = 4, .mix_nv = 1, .pre_mr = 4, .pre_nv = 1, .tq = 32, .kt = 32,
      .gemm_rows = 0, .sm_bq = 64, .sm_bk = 16, .sm_vw = 4, .sm_rows = 0, .dg_parts = 1}},
    /* CPU rows: the fields below; the vector widths and register tiles of every stage come from
     * the SIMD target (host/cpu_row.c). 'cpu' takes every CPU device; 'cpu-wide' (32 registers at
     * the device's width) only by name. */
    {"cpu", NULL, NULL, CL_DEVICE_TYPE_CPU, 0,
     {.sum_chunk = 128, .out_dc = 8, .out_nt = 1, .out_pre = 1, .out_pf = 4, .wg = 64, .groups_per_cu = 8,
      .split_min_len = 256, .pf = 1, .mix_kernel = 1, .tq = 32, .kt = 32, .gemm_rows = 0, .sm_bq = 256, .sm_bk = 64,
      .sm_rows = 1, .dg_parts = 1}},
    {"cpu-wide", NULL, NULL, CL_DEVICE_TYPE_CPU, 32,
     {.sum_chunk = 128, .out_dc = 8, .out_nt = 1, .out_pre = 1, .out_pf = 4, .wg = 64, .groups_per_cu = 8,
      .split_min_len = 256, .pf = 1, .mix_kernel = 1, .tq = 32, .kt = 32, .gemm_rows = 0, .sm_bq = 256, .sm_bk = 64,
      .sm_rows = 1, .dg_parts = 1}},
    {"gpu", NULL, NULL, CL_DEVICE_TYPE_GPU, -1,
     {.vec = 4, .sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .sum_chunk = 32, .out_rt = 4, .out_ve = 4, .out_nv = 1,
      .out_dc = 4, .out_nt = 0, .out_pre = 0, .out_pf = 0, .wg = 128, .groups_per_cu = 8, .split_min_len = 128, .pf = 0,
      .mix_kernel = 0, .mix_mr = 4, .mix_ve = 4, .mix_nv = 1, .pre_mr = 4, .pre_nv = 1, .tq = 32, .kt = 32,
      .gemm_rows = 32, .sm_bq = 64, .sm_bk = 16, .sm_vw = 4, .sm_rows = 0, .dg_parts = 32}},
    {"default", NULL, NULL, 0, -1,
     {.vec = 4, .sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .sum_chunk = 32, .out_rt = 2, .out_ve = 4, .out_nv = 1,
      .out_dc = 4, .out_nt = 0, .out_pre = 0, .out_pf = 0, .wg = 64, .groups_per_cu = 4, .split_min_len = 128, .pf = 0,
      .mix_kernel = 0, .mix_mr = 4, .mix_ve = 4, .mix_nv = 1, .pre_mr = 4, .pre_nv = 1, .tq = 32, .kt = 32,
      .gemm_rows = 32, .sm_bq = 32, .sm_bk = 16, .sm_vw = 4, .sm_rows = 0, .dg_parts = 8}},
};
#define ROW_COUNT (sizeof rows / sizeof rows[0])

/* Row r as the starting point of a tuning: CPU rows get their tiles for ctx's SIMD target (or,
 * without a context, for 16-float registers capped later to the device's width). */
static void row_start(const mhla_context *ctx, size_t r, const char *where, mhla_tuning *t)
{
    *t = rows[r].t;
    char derived[64] = "";
    if (rows[r].registers >= 0) {
        mhla_simd s = {16, 16, "reported"};
        if (ctx)
            s = ctx->limits.simd;
        if (rows[r].registers > 0)
            s.registers = rows[r].registers;
        mhla__cpu_row_fill(t, &s);
        snprintf(derived, sizeof derived, "%d floats x %d registers: %s", s.width, s.registers, s.target);
    }
    /* "built-in row 'cpu' (MHLA_TUNING; 8 floats x 16 registers: haswell)" */
    const char *sep = where && *derived ? "; " : "";
    if (where || *derived)
        snprintf(t->origin, sizeof t->origin, "built-in row '%s' (%s%s%s)", rows[r].name, where ? where : "", sep,
                 derived);
    else
        snprintf(t->origin, sizeof t->origin, "built-in row '%s'", rows[r].name);
}

static int matches(const tuning_row *r, const mhla_context *ctx)
{
    if (r->vendor && !strstr(ctx->vendor, r->vendor))
        return 0;
    if (r->device && !strstr(ctx->device_name, r->device))
        return 0;
    return r->type == 0 || (ctx->limits.type & r->type) != 0;
}

/* The fields MHLA_TUNING may set, with their smallest valid value (0 for switches and "the
 * device's choice"). */
typedef struct tuning_field {
    const char *name;
    size_t offset;
    int min;
} tuning_field;
#define FIELD(name, min) {#name, offsetof(mhla_tuning, name), min}
static const tuning_field fields[] = {
    FIELD(vec, 0),        FIELD(sum_rd, 1),     FIELD(sum_ve, 1),        FIELD(sum_nv, 1),
    FIELD(sum_chunk, 1),
    FIELD(out_rt, 1),     FIELD(out_ve, 1),     FIELD(out_nv, 1),        FIELD(out_dc, 1),
    FIELD(out_nt, 0),     FIELD(out_pre, 0),      FIELD(out_pf, 0),
    FIELD(wg, 1),         FIELD(groups_per_cu, 1), FIELD(split_min_len, 1), FIELD(pf, 0),
    FIELD(mix_kernel, 0), FIELD(mix_mr, 1),     FIELD(mix_ve, 1),        FIELD(mix_nv, 1),
    FIELD(pre_mr, 1),     FIELD(pre_nv, 1),     FIELD(tq, 1),            FIELD(kt, 1),
    FIELD(gemm_rows, 0),  FIELD(sm_bq, 1),
    FIELD(sm_bk, 1),      FIELD(sm_vw, 1),      FIELD(sm_rows, 0),       FIELD(dg_parts, 1),
};
#undef FIELD
#define FIELD_COUNT (sizeof fields / sizeof fields[0])

static void append_origin(mhla_tuning *t, const char *what)
{
    const size_t len = strlen(t->origin);
    snprintf(t->origin + len, sizeof t->origin - len, "%s%s", len ? ", " : "", what);
}

mhla_status mhla__tuning_apply(mhla_context *ctx, const char *where, const char *spec, mhla_tuning *t)
{
    mhla_status st = MHLA_OK;
    const char *p = spec;
    int fields_set = 0;
    while (*p) {
        char name[32], value_text[32];
        int used = 0;
        MHLA_FAIL_IF(st, sscanf(p, "%31[a-z_]=%31[^,]%n", name, value_text, &used) != 2, ctx,
                     MHLA_ERR_INVALID_ARGUMENT, "%s='%s': expected name=value[,name=value...] at '%s'", where, spec, p);
        if (strcmp(name, "row") == 0) {
            size_t r = 0;
            while (r < ROW_COUNT && strcmp(rows[r].name, value_text) != 0)
                ++r;
            MHLA_FAIL_IF(st, r == ROW_COUNT, ctx, MHLA_ERR_INVALID_ARGUMENT,
                         "%s: unknown row '%s' (rows: llvmpipe, cpu-wide, cpu, gpu, default)", where, value_text);
            row_start(ctx, r, where, t);
            fields_set = 0;
        } else {
            size_t i = 0;
            while (i < FIELD_COUNT && strcmp(fields[i].name, name) != 0)
                ++i;
            MHLA_FAIL_IF(st, i == FIELD_COUNT, ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: unknown field '%s'", where, name);
            char *end = NULL;
            const long value = strtol(value_text, &end, 10);
            MHLA_FAIL_IF(st, !end || *end || end == value_text, ctx, MHLA_ERR_INVALID_ARGUMENT,
                         "%s: %s=%s is not an integer", where, name, value_text);
            MHLA_FAIL_IF(st, value < fields[i].min || value > 1 << 20, ctx, MHLA_ERR_INVALID_ARGUMENT,
                         "%s: %s=%ld is out of range (%d..%d)", where, name, value, fields[i].min, 1 << 20);
            *(int *)((char *)t + fields[i].offset) = (int)value;
            if (strcmp(name, "vec") == 0)
                t->vec_forced = value > 0;
            if (!fields_set++)
                append_origin(t, where);
        }
        p += used;
        if (*p == ',')
            ++p;
    }
cleanup:
    return st;
}

/* Largest power of two in 1..16 not above x (x >= 1). */
static int pow2_floor16(int x)
{
    int w = 1;
    while (w < 16 && w * 2 <= x)
        w *= 2;
    return w;
}

/* Vector widths within what the device handles: the row's vec (0: the device's float width),
 * and never wider than the device's float width where that is 4 or more (wider vectors are split,
 * and change the calling convention on CPUs); devices reporting 1 or 2 (most GPUs: their lanes are
 * work-items) take up to float4, the widest load most of them issue per work-item. An override
 * that sets vec itself is an experiment (or a test reaching the wide code on any device) and is
 * honoured up to 16. */
static void cap_widths(const mhla_context *ctx, mhla_tuning *t)
{
    const int dev = ctx->limits.float_width > 0 ? ctx->limits.float_width : 1;
    const int hard = t->vec_forced ? 16 : pow2_floor16(dev > 4 ? dev : 4);
    int vw = pow2_floor16(t->vec > 0 ? t->vec : dev);
    if (vw > hard)
        vw = hard;
    int *widths[] = {&t->sum_rd, &t->sum_ve, &t->out_ve, &t->out_dc, &t->mix_ve, &t->sm_vw};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; ++i)
        *widths[i] = pow2_floor16(*widths[i] < vw ? *widths[i] : vw);
    t->vec = vw;
}

mhla_status mhla__tuning_lookup(mhla_context *ctx, const mhla_config *cfg, mhla_tuning *out)
{
    mhla_status st = MHLA_OK;
    mhla_tuning t;
    char tuned[1024];
    size_t r = 0;
    while (r + 1 < ROW_COUNT && !matches(&rows[r], ctx))
        ++r;
    row_start(ctx, r, NULL, &t);
    /* A tuned entry was checked and timed on this very device and driver: it comes before the
     * experiments' overrides, after the built-in row. One that no longer parses (written by a
     * later library version, edited by hand) is ignored rather than failing every plan. */
    if (cfg && mhla__tuned_entry(ctx, cfg->dk, cfg->dv, tuned, sizeof tuned)) {
        mhla_tuning trial = t;
        char where[64];
        snprintf(where, sizeof where, "tuned entry %lldx%lld", (long long)cfg->dk, (long long)cfg->dv);
        if (mhla__tuning_apply(NULL, where, tuned, &trial) == MHLA_OK)
            t = trial;
    }
    const char *env = getenv("MHLA_TUNING");
    if (env && *env)
        MHLA_FORWARD_IF_ERROR(st, mhla__tuning_apply(ctx, "MHLA_TUNING", env, &t));
    /* Under the context's lock: another thread may replace the override meanwhile. */
    mhla__lock(&ctx->lock);
    st = ctx->tuning ? mhla__tuning_apply(ctx, "mhla_context_set_tuning", ctx->tuning, &t) : MHLA_OK;
    mhla__unlock(&ctx->lock);
    if (st != MHLA_OK)
        goto cleanup;
    cap_widths(ctx, &t);
    *out = t;
cleanup:
    return st;
}

int mhla__pow2_divisor(int64_t n, int cap)
{
    int w = 1;
    while (w * 2 <= cap && n % (w * 2) == 0)
        w *= 2;
    return w;
}

mhla_status mhla_context_set_tuning(mhla_context *ctx, const char *spec)
{
    mhla_status st = MHLA_OK;
    char *copy = NULL;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_set_tuning: context is NULL");
    if (spec && *spec) {
        mhla_tuning scratch = rows[0].t; /* validation: the same parser, on a copy */
        MHLA_FORWARD_IF_ERROR(st, mhla__tuning_apply(ctx, "mhla_context_set_tuning", spec, &scratch));
        copy = mhla__malloc(strlen(spec) + 1);
        MHLA_FAIL_IF(st, !copy, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory storing a tuning override");
        strcpy(copy, spec);
    }
    mhla__lock(&ctx->lock);
    char *previous = ctx->tuning;
    ctx->tuning = copy;
    mhla__unlock(&ctx->lock);
    copy = previous; /* freed below */
cleanup:
    mhla__free(copy);
    return st;
}

mhla_status mhla_context_tuning(mhla_context *ctx, char *buf, size_t size)
{
    mhla_status st = MHLA_OK;
    mhla_tuning t;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_tuning: context is NULL");
    MHLA_FAIL_IF(st, !buf || size == 0, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_tuning: buf is NULL or size 0");
    MHLA_FORWARD_IF_ERROR(st, mhla__tuning_lookup(ctx, NULL, &t));
    snprintf(buf, size,
             "%s: vec=%d sum_rd=%d,sum_ve=%d,sum_nv=%d,sum_chunk=%d out_rt=%d,out_ve=%d,out_nv=%d,out_dc=%d,"
             "out_nt=%d,out_pre=%d,out_pf=%d wg=%d groups_per_cu=%d split_min_len=%d pf=%d "
             "mix_kernel=%d,mix_mr=%d,mix_ve=%d,mix_nv=%d "
             "pre_mr=%d,pre_nv=%d tq=%d,kt=%d,gemm_rows=%d "
             "sm_bq=%d,sm_bk=%d,sm_vw=%d,sm_rows=%d dg_parts=%d",
             t.origin, t.vec, t.sum_rd, t.sum_ve, t.sum_nv, t.sum_chunk, t.out_rt, t.out_ve, t.out_nv, t.out_dc,
             t.out_nt, t.out_pre, t.out_pf, t.wg, t.groups_per_cu, t.split_min_len, t.pf, t.mix_kernel, t.mix_mr,
             t.mix_ve, t.mix_nv, t.pre_mr, t.pre_nv, t.tq, t.kt, t.gemm_rows,
             t.sm_bq, t.sm_bk, t.sm_vw, t.sm_rows, t.dg_parts);
cleanup:
    return st;
}
