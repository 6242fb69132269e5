/* Tuning knowledge as data: tile sizes per device, looked up by vendor, then device name, ending
 * at a default for the device type. MHLA_TUNING overrides fields for experiments, e.g.
 * MHLA_TUNING="sum_rd=4,out_rt=8". Kernels get the values as -D flags (host/plan.c). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tuning_entry {
    const char *vendor; /* substring of CL_DEVICE_VENDOR, or NULL for any */
    const char *device; /* substring of CL_DEVICE_NAME, or NULL for any */
    cl_device_type type; /* 0 for any */
    mhla_tuning t;
} tuning_entry;

/* First match wins, so specific rows come before the defaults. Why these numbers:
 * - CPUs (PoCL and vendor CPU runtimes) compile explicit vectors straight to SIMD registers and
 *   barely vectorize scalar work-items, so each work-item row is one float16 (an AVX-512
 *   register). The register tiles stay at 8 vectors of accumulators (summary: 8 key rows x 16
 *   columns; output: 4 tokens x 32 columns): twice that spills on PoCL 3.1 (LLVM splits each
 *   float16 into two 256-bit halves when it prefers 256-bit vectors, leaving 32 registers for
 *   everything). Work-groups are tasks, so a few per core suffice. The mixing GEMM runs in
 *   kernels/mixing.cl: CLBlast's GEMMs stage tiles in local memory behind barriers, which CPU
 *   runtimes emulate in ordinary memory (PoCL 3.1, 2 cores, N=16384, M=64, H=8, D=64:
 *   CLBlast 18-37 ms vs 3-4 ms for the kernel, measured in the same runs).
 *   Softmax (kernels/softmax.cl): whole AVX-512 registers along keys and values, tiles copied
 *   row by row (contiguous, vectorized), 256 query rows per group to amortize the copy. PoCL 3.1,
 *   2 cores, N=2048, H=8, D=64, process CPU time (robust to the machine's other load), best of 5:
 *   sm_bq 64/128/256/512 -> 205/196/165/155 ms; sm_bk 32/64/128 -> 204/165/210 ms; float4/8/16
 *   -> 275/175/165 ms; coalesced copy 188 ms against rows' 165.
 * - GPUs want many light work-items: float4 columns, smaller register tiles, enough work-groups
 *   to fill every compute unit several times, and CLBlast's tuned GEMM for the mixing. Softmax:
 *   float4 loads from local memory, 16-key tiles so that the private score row stays in registers
 *   (the layout of llama.cpp's OpenCL flash attention), coalesced tile copies. */
static const tuning_entry table[] = {
    {NULL, NULL, CL_DEVICE_TYPE_CPU, {.sum_rd = 8, .sum_ve = 16, .sum_nv = 1, .out_rt = 4, .out_ve = 16,
                                      .out_nv = 2, .out_dc = 8, .wg = 64, .groups_per_cu = 8,
                                      .split_min_len = 256, .mix_kernel = 1, .mix_mr = 8, .mix_nv = 2,
                                      .sm_bq = 256, .sm_bk = 64, .sm_vw = 0, .sm_rows = 1}},
    {NULL, NULL, CL_DEVICE_TYPE_GPU, {.sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .out_rt = 4, .out_ve = 4,
                                      .out_nv = 1, .out_dc = 4, .wg = 128, .groups_per_cu = 8,
                                      .split_min_len = 128, .mix_kernel = 0, .mix_mr = 4, .mix_nv = 1,
                                      .sm_bq = 64, .sm_bk = 16, .sm_vw = 4, .sm_rows = 0}},
    {NULL, NULL, 0, {.sum_rd = 4, .sum_ve = 4, .sum_nv = 1, .out_rt = 2, .out_ve = 4, .out_nv = 1, .out_dc = 4,
                     .wg = 64, .groups_per_cu = 4, .split_min_len = 128, .mix_kernel = 0, .mix_mr = 4,
                     .mix_nv = 1, .sm_bq = 32, .sm_bk = 16, .sm_vw = 4, .sm_rows = 0}},
};

static int matches(const tuning_entry *e, const mhla_context *ctx)
{
    if (e->vendor && !strstr(ctx->vendor, e->vendor))
        return 0;
    if (e->device && !strstr(ctx->device_name, e->device))
        return 0;
    return e->type == 0 || (ctx->limits.type & e->type) != 0;
}

static mhla_status apply_override(mhla_context *ctx, const char *spec, mhla_tuning *t)
{
    mhla_status st = MHLA_OK;
    struct {
        const char *name;
        int *field;
        int min; /* 0 for switches and "the device's choice" */
    } fields[] = {{"sum_rd", &t->sum_rd, 1}, {"sum_ve", &t->sum_ve, 1}, {"sum_nv", &t->sum_nv, 1},
                  {"out_rt", &t->out_rt, 1}, {"out_ve", &t->out_ve, 1}, {"out_nv", &t->out_nv, 1},
                  {"out_dc", &t->out_dc, 1}, {"wg", &t->wg, 1}, {"groups_per_cu", &t->groups_per_cu, 1},
                  {"split_min_len", &t->split_min_len, 1}, {"mix_kernel", &t->mix_kernel, 0},
                  {"mix_mr", &t->mix_mr, 1}, {"mix_nv", &t->mix_nv, 1}, {"sm_bq", &t->sm_bq, 1},
                  {"sm_bk", &t->sm_bk, 1}, {"sm_vw", &t->sm_vw, 0}, {"sm_rows", &t->sm_rows, 0}};
    const char *p = spec;
    while (*p) {
        char name[32];
        int value = 0, used = 0;
        MHLA_FAIL_IF(st, sscanf(p, "%31[a-z_]=%d%n", name, &value, &used) != 2, ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_TUNING='%s': expected name=value[,name=value...] at '%s'", spec, p);
        size_t i = 0;
        while (i < sizeof fields / sizeof fields[0] && strcmp(fields[i].name, name) != 0)
            ++i;
        MHLA_FAIL_IF(st, i == sizeof fields / sizeof fields[0], ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_TUNING: unknown field '%s'", name);
        MHLA_FAIL_IF(st, value < fields[i].min || value > 1 << 20, ctx,
                     MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_TUNING: %s=%d is out of range", name, value);
        *fields[i].field = value;
        p += used;
        if (*p == ',')
            ++p;
    }
cleanup:
    return st;
}

mhla_status mhla__tuning_lookup(mhla_context *ctx, mhla_tuning *out)
{
    mhla_status st = MHLA_OK;
    size_t i = 0;
    while (i + 1 < sizeof table / sizeof table[0] && !matches(&table[i], ctx))
        ++i;
    *out = table[i].t;
    const char *env = getenv("MHLA_TUNING");
    if (env && *env)
        MHLA_FORWARD_IF_ERROR(st, apply_override(ctx, env, out));
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
