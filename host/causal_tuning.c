/* Tiling of the causal kernels as data: looked up by vendor, then device type, ending at a
 * default; then clamped to the device. MHLA_CAUSAL_TILING="tq,kt,lws,prefix_rows,prefix_cols,
 * summary_rows,gemm_rows" overrides the table for experiments (and lets the tests reach every
 * path with small sizes). */
#include "causal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tuning_entry {
    const char *vendor;    /* substring of CL_DEVICE_VENDOR, or NULL for any */
    cl_device_type type;   /* CL_DEVICE_TYPE_ALL for any */
    mhla_causal_tiling tiling;
} tuning_entry;

/* First match wins. {tq, kt, lws, prefix_rows, prefix_cols, summary_rows}: tq x kt scores per
 * output group of lws work-items; prefix work-items of prefix_rows x prefix_cols mixtures; summary
 * work-items of summary_rows key dimensions, each v element read serving that many; gemm_rows
 * chunks per prefix block (earlier blocks through CLBlast SGEMMs, a row's own block in the kernel).
 * CPU (PoCL): a prefix group reads 4 x 64 consecutive floats of each summary, so that the strided
 * walk over the chunks touches whole cache lines and fewer pages.
 * GPU: one column per prefix work-item (a warp already reads consecutive floats); 64 work-items =
 * two warps / one wavefront; 16 x 16 score tiles in local memory. */
static const tuning_entry table[] = {
    {NULL, CL_DEVICE_TYPE_CPU, {16, 16, 64, 8, 4, 8, 32}},
    {NULL, CL_DEVICE_TYPE_GPU, {16, 16, 64, 8, 1, 8, 32}},
    {NULL, CL_DEVICE_TYPE_ALL, {16, 16, 64, 8, 1, 8, 32}},
};

size_t mhla__causal_local_bytes(const mhla_causal_tiling *t, int64_t dk)
{
    return ((size_t)t->tq * (size_t)dk + (size_t)t->kt * (size_t)dk + (size_t)t->tq * (size_t)t->kt +
            (size_t)t->tq) *
           sizeof(float);
}

static void from_table(const mhla_context *ctx, mhla_causal_tiling *t)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        const tuning_entry *e = &table[i];
        if (e->vendor && !strstr(ctx->vendor, e->vendor))
            continue;
        if (e->type != CL_DEVICE_TYPE_ALL && !(ctx->limits.type & e->type))
            continue;
        *t = e->tiling;
        return;
    }
}

mhla_status mhla__causal_tiling_choose(mhla_context *ctx, const mhla_config *cfg, mhla_causal_tiling *out)
{
    mhla_status st = MHLA_OK;
    mhla_causal_tiling t = table[sizeof table / sizeof table[0] - 1].tiling;
    from_table(ctx, &t);
    const char *env = getenv("MHLA_CAUSAL_TILING");
    if (env && *env) {
        mhla_causal_tiling e;
        MHLA_FAIL_IF(st,
                     sscanf(env, "%d,%d,%d,%d,%d,%d,%d", &e.tq, &e.kt, &e.lws, &e.prefix_rows, &e.prefix_cols,
                            &e.summary_rows, &e.gemm_rows) != 7 ||
                         e.tq < 1 || e.kt < 1 || e.lws < 1 || e.prefix_rows < 1 || e.prefix_cols < 1 ||
                         e.summary_rows < 1 || e.gemm_rows < 0,
                     ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_CAUSAL_TILING = '%s': expected seven integers "
                     "tq,kt,lws,prefix_rows,prefix_cols,summary_rows (> 0),gemm_rows (>= 0)",
                     env);
        t = e;
    }
    /* Prefix tiles must not straddle GEMM blocks. */
    t.gemm_rows = t.gemm_rows / t.prefix_rows * t.prefix_rows;
    /* Work-group size within the device's limits; the row denominators need tq <= lws. */
    size_t lim = ctx->limits.max_work_group_size;
    if (ctx->limits.max_work_item_sizes[0] && ctx->limits.max_work_item_sizes[0] < lim)
        lim = ctx->limits.max_work_item_sizes[0];
    if ((size_t)t.lws > lim)
        t.lws = (int)lim;
    if (t.tq > t.lws)
        t.tq = t.lws;
    /* Local memory does not depend on the chunk size: halve the tiles until they fit. */
    while (mhla__causal_local_bytes(&t, cfg->dk) > ctx->limits.local_mem_bytes && (t.tq > 1 || t.kt > 1)) {
        if (t.kt >= t.tq && t.kt > 1)
            t.kt /= 2;
        else
            t.tq /= 2;
    }
    MHLA_FAIL_IF(st, mhla__causal_local_bytes(&t, cfg->dk) > ctx->limits.local_mem_bytes, ctx,
                 MHLA_ERR_UNSUPPORTED,
                 "the causal output kernel needs %zu bytes of local memory for dk = %lld even with 1 x 1 tiles; "
                 "%s has %llu",
                 mhla__causal_local_bytes(&t, cfg->dk), (long long)cfg->dk, ctx->device_name,
                 (unsigned long long)ctx->limits.local_mem_bytes);
    *out = t;
cleanup:
    return st;
}
