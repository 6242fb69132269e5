/* Tuning knowledge as data: every per-device choice of every kernel, one row per kind of device,
 * looked up by vendor, device name and device type, ending at a default; CPU rows take their
 * widths and register tiles from the device's SIMD target (tune/cpu_row.c); the rows themselves
 * and the field parser are in tune/tuning_rows.c.
 * Overrides, in order: MHLA_TUNING (experiments), then the context's own
 * (mhla_context_set_tuning), both "name=value,..." with "row=NAME" to start from a named row.
 * tune/tiling.c fits the result to a configuration and turns it into -D flags. */
#include "tune/tune.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int *widths[] = {&t->sum_ve, &t->out_ve, &t->out_dc, &t->mix_ve, &t->sm_vw, &t->sum_rd};
    /* sum_rd is a vector width only without sum_lk; with it a row count up to 16 (kernels/tiles.h) */
    const size_t n = sizeof widths / sizeof widths[0] - (t->sum_lk ? 1 : 0);
    for (size_t i = 0; i < n; ++i)
        *widths[i] = pow2_floor16(*widths[i] < vw ? *widths[i] : vw);
    if (t->sum_lk && t->sum_rd > 16)
        t->sum_rd = 16;
    t->vec = vw;
}

mhla_status mhla__tuning_lookup(mhla_context *ctx, const mhla_config *cfg, mhla_tuning *out)
{
    mhla_status st = MHLA_OK;
    mhla_tuning t;
    char tuned[1024];
    mhla__tuning_row(ctx, &t);
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
#ifndef MHLA_HAVE_CLBLAST
    /* Built without CLBlast: the mixing kernel and the prefix kernel's own sums on every device,
     * whatever a row or an override asks. */
    t.mix_kernel = 1;
    t.gemm_rows = 0;
#endif
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
        MHLA_FORWARD_IF_ERROR(st, mhla__tuning_validate(ctx, "mhla_context_set_tuning", spec));
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
    mhla__tuning_print(&t, buf, size);
cleanup:
    return st;
}
