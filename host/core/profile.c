/* Device time per kernel (mhla_context_profile_kernels, mhla_context_kernel_times): the events of
 * every kernel the library enqueues while profiling is on, summed by kernel name once the queue
 * has finished them. Where the stage markers (mhla_plan_stage_times) say which stage costs, this
 * says which kernel inside it, the backward's and the causal form's included. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

/* Records kept at most: a few hundred runs of the longest pass; past it, launches are counted as
 * dropped (and said so) rather than the host's memory grown without bound. */
#define KPROF_MAX 65536

struct mhla_kprof_rec {
    const char *what; /* "clEnqueueNDRangeKernel(NAME)" or "CLBlastSgemm": a string literal */
    cl_event ev;
};

void mhla__kprof_record(mhla_context *ctx, const char *what, cl_event ev)
{
    mhla__lock(&ctx->kprof_lock);
    if (ctx->kprof_on && ctx->kprof_n == ctx->kprof_cap && ctx->kprof_cap < KPROF_MAX) {
        const size_t cap = ctx->kprof_cap ? 2 * ctx->kprof_cap : 256;
        struct mhla_kprof_rec *grown = mhla__realloc(ctx->kprof, cap * sizeof *grown);
        if (grown)
            ctx->kprof = grown, ctx->kprof_cap = cap;
    }
    if (ctx->kprof_on && ctx->kprof_n < ctx->kprof_cap) {
        ctx->kprof[ctx->kprof_n].what = what;
        ctx->kprof[ctx->kprof_n++].ev = ev;
        ev = NULL;
    } else if (ctx->kprof_on) {
        ++ctx->kprof_dropped;
    }
    mhla__unlock(&ctx->kprof_lock);
    if (ev)
        clReleaseEvent(ev);
}

/* Drops the records (the caller holds kprof_lock). */
static void records_clear(mhla_context *ctx)
{
    for (size_t i = 0; i < ctx->kprof_n; ++i)
        clReleaseEvent(ctx->kprof[i].ev);
    ctx->kprof_n = 0, ctx->kprof_dropped = 0;
}

void mhla__kprof_free(mhla_context *ctx)
{
    records_clear(ctx);
    mhla__free(ctx->kprof);
    ctx->kprof = NULL, ctx->kprof_cap = 0;
}

/* The checks both switches make: ctx given, and a queue that profiles where `on` asks for times of
 * `what` ("kernels", "stages"). */
static mhla_status switch_check(mhla_context *ctx, int on, const char *fn, const char *what)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", fn);
    MHLA_FAIL_IF(st, on && !ctx->profiling, ctx, MHLA_ERR_UNSUPPORTED,
                 "%s: the context's command queue was made without CL_QUEUE_PROFILING_ENABLE, so its %s have "
                 "no device times",
                 fn, what);
cleanup:
    return st;
}

mhla_status mhla_context_profile_kernels(mhla_context *ctx, int on)
{
    const mhla_status st = switch_check(ctx, on, "mhla_context_profile_kernels", "kernels");
    if (st != MHLA_OK)
        return st;
    mhla__lock(&ctx->kprof_lock);
    records_clear(ctx);
    ctx->kprof_on = on != 0;
    mhla__unlock(&ctx->kprof_lock);
    return MHLA_OK;
}

mhla_status mhla_context_profile_stages(mhla_context *ctx, int on)
{
    const mhla_status st = switch_check(ctx, on, "mhla_context_profile_stages", "stages");
    if (st == MHLA_OK)
        ctx->stage_marks = on != 0;
    return st;
}

/* The kernel's name: NAME of "clEnqueueNDRangeKernel(NAME)", else the whole string. */
static void kernel_name(const char *what, char *out, size_t size)
{
    const char *open = strchr(what, '('), *close = open ? strchr(open, ')') : NULL;
    if (open && close && (size_t)(close - open - 1) < size)
        snprintf(out, size, "%.*s", (int)(close - open - 1), open + 1);
    else
        snprintf(out, size, "%s", what);
}

mhla_status mhla_context_kernel_times(mhla_context *ctx, char *buf, size_t size)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_kernel_times: ctx is NULL");
    MHLA_FAIL_IF(st, !buf || size == 0, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_context_kernel_times: buf is NULL or size 0");
    buf[0] = '\0';
    MHLA_CL_TRY(st, ctx, clFinish(ctx->queue), "clFinish");
    mhla__lock(&ctx->kprof_lock);
    /* one line per kernel name, in the order of first launch: sums over its launches (a pass over
     * the records; the names are few) */
    enum { NAMES = 96 };
    struct {
        const char *what;
        size_t calls;
        double ms;
        int untimed;
    } k[NAMES];
    size_t nk = 0, used = 0;
    for (size_t i = 0; i < ctx->kprof_n; ++i) {
        const char *what = ctx->kprof[i].what;
        size_t j = 0;
        while (j < nk && k[j].what != what && strcmp(k[j].what, what) != 0)
            ++j;
        if (j == nk) {
            if (nk == NAMES)
                continue;
            k[nk].what = what, k[nk].calls = 0, k[nk].ms = 0.0, k[nk].untimed = 0;
            ++nk;
        }
        cl_ulong t0 = 0, t1 = 0;
        ++k[j].calls;
        if (clGetEventProfilingInfo(ctx->kprof[i].ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) !=
                CL_SUCCESS ||
            clGetEventProfilingInfo(ctx->kprof[i].ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) != CL_SUCCESS ||
            t1 < t0)
            k[j].untimed = 1;
        else
            k[j].ms += (double)(t1 - t0) * 1e-6;
    }
    for (size_t j = 0; j < nk; ++j) {
        char name[128];
        kernel_name(k[j].what, name, sizeof name);
        const int n = k[j].untimed ? snprintf(buf + used, size - used, "%s %zu untimed\n", name, k[j].calls)
                                   : snprintf(buf + used, size - used, "%s %zu %.6f\n", name, k[j].calls, k[j].ms);
        if (n < 0 || (size_t)n >= size - used) { /* truncated: keep whole lines only */
            buf[used] = '\0';
            break;
        }
        used += (size_t)n;
    }
    if (ctx->kprof_dropped && used + 1 < size)
        snprintf(buf + used, size - used, "(dropped %zu launches past %d records)\n", ctx->kprof_dropped,
                 KPROF_MAX);
    records_clear(ctx);
    mhla__unlock(&ctx->kprof_lock);
cleanup:
    return st;
}
