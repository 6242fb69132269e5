/* Tiling of the causal kernels. Register tiles and vector widths come from the shared tuning table
 * (host/tuning.c, MHLA_TUNING), cut down to divide this configuration's sizes; what only the causal
 * kernels have (score tiles, GEMM blocks of the prefix mixtures) is data here, looked up by device
 * type, and MHLA_CAUSAL_TILING="tq=32,kt=32,gemm_rows=0" overrides it for experiments (and lets
 * the tests reach every path with small sizes). */
#include "causal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct causal_entry {
    cl_device_type type; /* 0 for any */
    int tq, kt, gemm_rows;
} causal_entry;

/* First match wins. tq tokens share a group's q~ and score tiles (32: the scores of a 64-token
 * chunk take two groups; more tokens per group means fewer groups for short sequences); kt keys
 * pass through local memory at a time. gemm_rows follows host/tuning.c's mixing choice: on CPUs
 * CLBlast's local-memory GEMM tiles are slow (ordinary memory and barriers), so the prefix kernel
 * sums every earlier chunk itself; on GPUs each row's earlier blocks of 32 chunks go to CLBlast. */
static const causal_entry table[] = {
    {CL_DEVICE_TYPE_CPU, 32, 32, 0},
    {CL_DEVICE_TYPE_GPU, 32, 32, 32},
    {0, 32, 32, 32},
};

static mhla_status apply_override(mhla_context *ctx, const char *spec, mhla_causal_tiling *t)
{
    mhla_status st = MHLA_OK;
    struct {
        const char *name;
        int *field;
        int min;
    } fields[] = {{"tq", &t->tq, 1}, {"kt", &t->kt, 1}, {"gemm_rows", &t->gemm_rows, 0}};
    const char *p = spec;
    while (*p) {
        char name[32];
        int value = 0, used = 0;
        MHLA_FAIL_IF(st, sscanf(p, "%31[a-z_]=%d%n", name, &value, &used) != 2, ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_CAUSAL_TILING='%s': expected name=value[,name=value...] (tq, kt, gemm_rows) at '%s'",
                     spec, p);
        size_t i = 0;
        while (i < sizeof fields / sizeof fields[0] && strcmp(fields[i].name, name) != 0)
            ++i;
        MHLA_FAIL_IF(st, i == sizeof fields / sizeof fields[0], ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_CAUSAL_TILING: unknown field '%s' (tq, kt, gemm_rows)", name);
        MHLA_FAIL_IF(st, value < fields[i].min || value > 1 << 16, ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_CAUSAL_TILING: %s=%d is out of range", name, value);
        *fields[i].field = value;
        p += used;
        if (*p == ',')
            ++p;
    }
cleanup:
    return st;
}

static size_t local_bytes(const mhla_causal_tiling *t, int64_t dk)
{
    return ((size_t)t->tq * (size_t)dk + (size_t)t->kt * (size_t)dk + (size_t)t->tq * (size_t)t->kt) * sizeof(float);
}

mhla_status mhla__causal_tiling_choose(mhla_context *ctx, const mhla_config *cfg, mhla_causal_tiling *out)
{
    mhla_status st = MHLA_OK;
    mhla_tuning shared;
    mhla_causal_tiling t;
    memset(&t, 0, sizeof t);

    MHLA_FORWARD_IF_ERROR(st, mhla__tuning_lookup(ctx, &shared));
    const int64_t dk = cfg->dk, dv = cfg->dv;
    const int64_t zcol = cfg->normalizer == MHLA_NORMALIZER_PAPER ? 1 : 0;
    const int64_t width = cfg->batch * cfg->heads * dk * (dv + zcol);
    t.sum_rd = mhla__pow2_divisor(dk, shared.sum_rd > 16 ? 16 : shared.sum_rd);
    t.sum_ve = mhla__pow2_divisor(dv, shared.sum_ve > 16 ? 16 : shared.sum_ve);
    t.sum_nv = mhla__pow2_divisor(dv / t.sum_ve, shared.sum_nv);
    t.out_rt = shared.out_rt;
    t.out_ve = mhla__pow2_divisor(dv, shared.out_ve > 16 ? 16 : shared.out_ve);
    t.out_nv = mhla__pow2_divisor(dv / t.out_ve, shared.out_nv);
    t.out_dc = mhla__pow2_divisor(dk, shared.out_dc > 16 ? 16 : shared.out_dc);
    t.mix_mr = shared.mix_mr;
    t.mix_nv = shared.mix_nv;
    t.pre_ve = mhla__pow2_divisor(width, 16);
    t.wg = shared.wg;

    size_t i = 0;
    while (i + 1 < sizeof table / sizeof table[0] && !(table[i].type == 0 || (ctx->limits.type & table[i].type)))
        ++i;
    t.tq = table[i].tq, t.kt = table[i].kt, t.gemm_rows = table[i].gemm_rows;
    const char *env = getenv("MHLA_CAUSAL_TILING");
    if (env && *env)
        MHLA_FORWARD_IF_ERROR(st, apply_override(ctx, env, &t));

    /* Prefix tiles must not straddle GEMM blocks; a group's tokens are whole register tiles; keys
     * pass in whole score vectors. */
    t.gemm_rows = t.gemm_rows / t.mix_mr * t.mix_mr;
    t.tq = t.tq < t.out_rt ? t.out_rt : t.tq / t.out_rt * t.out_rt;
    t.kt = (t.kt + t.out_ve - 1) / t.out_ve * t.out_ve;
    /* The output group within the device's work-group limit, then local memory, which does not
     * depend on the chunk size: halve the tiles until they fit. */
    size_t lim = ctx->limits.max_work_group_size;
    if (ctx->limits.max_work_item_sizes[0] && ctx->limits.max_work_item_sizes[0] < lim)
        lim = ctx->limits.max_work_item_sizes[0];
    while ((size_t)mhla__causal_output_wg(&t, dv) > lim && t.tq > t.out_rt)
        t.tq = (t.tq / 2 + t.out_rt - 1) / t.out_rt * t.out_rt;
    /* Still too many column tiles: wider ones (more vectors per work-item), down to one tile. */
    while ((size_t)mhla__causal_output_wg(&t, dv) > lim && dv / t.out_ve > t.out_nv) {
        const int64_t vecs = dv / t.out_ve; /* column vectors of a row */
        int nv = t.out_nv + 1;
        while (vecs % nv != 0)
            ++nv;
        t.out_nv = nv;
    }
    /* CLBlast's GEMM kernels are built for work-groups of 64 and more (a device allowing 16 fails
     * them with CL_INVALID_WORK_GROUP_SIZE): there the prefix kernel sums every earlier chunk. */
    if (lim < 64)
        t.gemm_rows = 0;
    while (local_bytes(&t, dk) > ctx->limits.local_mem_bytes && (t.tq > t.out_rt || t.kt > t.out_ve)) {
        if ((t.kt >= t.tq || t.tq <= t.out_rt) && t.kt > t.out_ve)
            t.kt = (t.kt / 2 + t.out_ve - 1) / t.out_ve * t.out_ve;
        else
            t.tq = (t.tq / 2 + t.out_rt - 1) / t.out_rt * t.out_rt;
    }
    MHLA_FAIL_IF(st, (size_t)mhla__causal_output_wg(&t, dv) > lim, ctx, MHLA_ERR_UNSUPPORTED,
                 "the causal output kernel needs groups of %d work-items for dv = %lld; %s allows %zu",
                 mhla__causal_output_wg(&t, dv), (long long)dv, ctx->device_name, lim);
    MHLA_FAIL_IF(st, local_bytes(&t, dk) > ctx->limits.local_mem_bytes, ctx, MHLA_ERR_UNSUPPORTED,
                 "the causal output kernel needs %zu bytes of local memory for dk = %lld even with the smallest "
                 "tiles; %s has %llu",
                 local_bytes(&t, dk), (long long)dk, ctx->device_name, (unsigned long long)ctx->limits.local_mem_bytes);
    *out = t;
cleanup:
    return st;
}
