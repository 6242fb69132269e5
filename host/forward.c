/* mhla_forward: argument checks, then the three stages enqueued back to back on the context's
 * queue; and mhla_forward_host, the blocking host-pointer convenience around it. */
#include "causal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *mhla__tensor_name(mhla_tensor t)
{
    static const char *names[] = {"q", "k", "v", "out", "mixing"};
    return names[t];
}

/* "[B,N,H,D] = [1,4096,8,64] f32" — what the shape needs, for messages. */
void mhla__plan_tensor_shape(const void *obj, mhla_tensor t, char *buf, size_t size)
{
    const mhla_plan *plan = obj;
    const mhla_config *c = &plan->cfg;
    if (t == MHLA_TENSOR_MIXING) {
        snprintf(buf, size, "%lld x %lld float32", (long long)c->mixing_rows, (long long)c->mixing_rows);
        return;
    }
    long long d = (t == MHLA_TENSOR_Q || t == MHLA_TENSOR_K) ? (long long)c->dk : (long long)c->dv;
    if (c->layout == MHLA_LAYOUT_BHND)
        snprintf(buf, size, "[B,H,N,D] = [%lld,%lld,%lld,%lld] %s", (long long)c->batch, (long long)c->heads,
                 (long long)plan->shape.n, d, mhla_dtype_name(c->dtype));
    else
        snprintf(buf, size, "[B,N,H,D] = [%lld,%lld,%lld,%lld] %s", (long long)c->batch, (long long)plan->shape.n,
                 (long long)c->heads, d, mhla_dtype_name(c->dtype));
}

mhla_status mhla__check_mem_named(mhla_context *ctx, const char *fn, const char *name, cl_mem buf, size_t need,
                                  const char *what)
{
    mhla_status st = MHLA_OK;
    size_t size = 0;
    cl_context owner = NULL;

    MHLA_FAIL_IF(st, !buf, ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: %s buffer is NULL", fn, name);
    cl_int err = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL);
    MHLA_FAIL_IF(st, err != CL_SUCCESS, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: %s is not a valid cl_mem (clGetMemObjectInfo: %s)", fn, name, mhla__cl_error_name(err));
    err = clGetMemObjectInfo(buf, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    MHLA_FAIL_IF(st, err != CL_SUCCESS || owner != ctx->cl, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: %s buffer belongs to another cl_context", fn, name);
    MHLA_FAIL_IF(st, size < need, ctx, MHLA_ERR_BUFFER_TOO_SMALL, "%s: %s buffer holds %zu bytes; %s needs %zu", fn,
                 name, size, what ? what : "the plan", need);
cleanup:
    return st;
}

mhla_status mhla__check_mem(mhla_context *ctx, const char *fn, mhla_tensor t, cl_mem buf, size_t need,
                            mhla_shape_fn shape, const void *obj)
{
    char what[160] = "";
    size_t size = 0;
    /* The shape is described only for a buffer that is too small: per-token calls format nothing. */
    if (buf && clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL) == CL_SUCCESS && size < need)
        shape(obj, t, what, sizeof what);
    return mhla__check_mem_named(ctx, fn, mhla__tensor_name(t), buf, need, what);
}

mhla_status mhla__check_call(mhla_context *ctx, const char *fn, const cl_mem bufs[5], int with_mixing,
                             cl_uint num_wait, const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    const cl_mem out = bufs[MHLA_TENSOR_OUT];
    MHLA_FAIL_IF(st, out == bufs[MHLA_TENSOR_Q] || out == bufs[MHLA_TENSOR_K] || out == bufs[MHLA_TENSOR_V] ||
                         (with_mixing && out == bufs[MHLA_TENSOR_MIXING]),
                 ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: out must not be the same buffer as q, k, v or mixing", fn);
    MHLA_FAIL_IF(st, (num_wait > 0) != (wait != NULL), ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: wait list of %u events with %s pointer", fn, (unsigned)num_wait, wait ? "a" : "a NULL");
cleanup:
    return st;
}

mhla_status mhla__plan_check_mem(mhla_plan *plan, const char *fn, mhla_tensor t, cl_mem buf)
{
    return mhla__check_mem(plan->ctx, fn, t, buf, mhla_plan_tensor_bytes(plan, t), mhla__plan_tensor_shape, plan);
}

mhla_status mhla__forward_check(mhla_plan *plan, const char *fn, const cl_mem bufs[5], cl_uint num_wait,
                                const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    /* A softmax plan has no mixing matrix: its argument is ignored. */
    const int last = plan->softmax ? MHLA_TENSOR_OUT : MHLA_TENSOR_MIXING;
    for (int t = MHLA_TENSOR_Q; t <= last; ++t)
        MHLA_FORWARD_IF_ERROR(st, mhla__check_mem(plan->ctx, fn, (mhla_tensor)t, bufs[t],
                                                  mhla_plan_tensor_bytes(plan, (mhla_tensor)t), mhla__plan_tensor_shape, plan));
    MHLA_FORWARD_IF_ERROR(st, mhla__check_call(plan->ctx, fn, bufs, !plan->softmax, num_wait, wait));
cleanup:
    return st;
}

mhla_status mhla__forward_mark_start(mhla_plan *plan, cl_uint num_wait, const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    /* The first marker waits for the caller's events, so the summary stage needs no wait list of
     * its own when markers are on. */
    if (ctx->profiling) {
        if (plan->marks[0])
            clReleaseEvent(plan->marks[0]);
        plan->marks[0] = NULL;
        MHLA_CL_TRY(st, ctx, clEnqueueMarkerWithWaitList(ctx->queue, num_wait, wait, &plan->marks[0]),
                    "clEnqueueMarkerWithWaitList");
    }
cleanup:
    return st;
}

mhla_status mhla_forward(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem out, cl_uint num_wait,
                         const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;

    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_forward: plan is NULL");
    ctx = plan->ctx;
    MHLA_FAIL_IF(st, plan->shard, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_forward: the plan is a shard plan: run it with mhla_shard_summaries() and "
                 "mhla_shard_output(), or mhla_forward_sharded() (libmhla_mpi)");
    const cl_mem bufs[] = {q, k, v, out, mixing};
    MHLA_FORWARD_IF_ERROR(st, mhla__forward_check(plan, "mhla_forward", bufs, num_wait, wait));
    if (plan->softmax) {
        MHLA_FORWARD_IF_ERROR(st, mhla__softmax_enqueue(plan, q, k, v, out, num_wait, wait, done));
        goto cleanup;
    }
    /* Refused before anything is enqueued (the start marker included). */
    MHLA_FAIL_IF(st, plan->cfg.causal && plan->cfg.varlen, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_forward: the plan is for packed variable-length sequences (varlen = 1): use "
                 "mhla_forward_varlen() with their cu_seqlens");
    MHLA_FORWARD_IF_ERROR(st, mhla__forward_mark_start(plan, num_wait, wait));
    plan->saved = 0;
    if (plan->cfg.causal) {
        /* its chunk summaries and prefix mixtures stay in the plan's slots for the next backward
         * (host/backward_causal.c copies them into its own layout) */
        MHLA_FORWARD_IF_ERROR(st, mhla__causal_forward(plan, q, k, v, mixing, out, num_wait, wait, done));
    } else {
        MHLA_FORWARD_IF_ERROR(st, mhla__block_summary_enqueue(plan, k, v, num_wait, wait));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[1]));
        if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL) {
            MHLA_FORWARD_IF_ERROR(st, mhla__official_dots_enqueue(plan, q));
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        }
        MHLA_FORWARD_IF_ERROR(st, mhla__mixing_enqueue(plan, mixing));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[2]));
        MHLA_FORWARD_IF_ERROR(st, mhla__output_enqueue(plan, q, out, done));
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &plan->marks[3]));
    }
    if (plan->save_for_backward) { /* for the next mhla_backward() of these buffers */
        plan->saved = 1;
        plan->saved_in[0] = q, plan->saved_in[1] = k, plan->saved_in[2] = v, plan->saved_in[3] = mixing;
    }
cleanup:
    return st;
}

/* Test switch MHLA_POISON_OUTPUTS=1 (the tests set it): the host calls fill their staging output
 * with NaN before every run. The staging buffer is reused across calls, so without it an element a
 * kernel forgets to write reads back as the previous run's value and can match the reference. */
mhla_status mhla__poison_output(mhla_context *ctx, cl_mem buf, size_t bytes)
{
    static const cl_ushort nan16 = 0x7FFF; /* NaN in f16 and bf16; two of them make an f32 NaN */
    mhla_status st = MHLA_OK;
    const char *env = getenv("MHLA_POISON_OUTPUTS");
    if (!env || strcmp(env, "1") != 0)
        return MHLA_OK;
    MHLA_CL_TRY(st, ctx, clEnqueueFillBuffer(ctx->queue, buf, &nan16, sizeof nan16, 0, bytes, 0, NULL, NULL),
                "clEnqueueFillBuffer (MHLA_POISON_OUTPUTS)");
cleanup:
    return st;
}

mhla_status mhla__forward_host(mhla_plan *plan, const char *fn, const void *q, const void *k, const void *v,
                               const float *mixing, void *out, const int32_t *cu_seqlens, size_t num_seqs)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    int enqueued = 0;

    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
    ctx = plan->ctx;
    const void *inputs[] = {q, k, v, NULL, mixing};
    const int last = plan->softmax ? MHLA_TENSOR_OUT : MHLA_TENSOR_MIXING; /* softmax: no mixing */
    for (int t = MHLA_TENSOR_Q; t <= last; ++t)
        MHLA_FAIL_IF(st, t == MHLA_TENSOR_OUT ? !out : !inputs[t], ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "%s: %s pointer is NULL", fn, mhla__tensor_name((mhla_tensor)t));
    for (int t = MHLA_TENSOR_Q; t <= last; ++t) {
        if (plan->stage[t])
            continue;
        char what[64];
        snprintf(what, sizeof what, "the host-copy buffer for %s", mhla__tensor_name((mhla_tensor)t));
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, t == MHLA_TENSOR_OUT ? CL_MEM_WRITE_ONLY : CL_MEM_READ_ONLY,
                                                      mhla_plan_tensor_bytes(plan, (mhla_tensor)t), what,
                                                      &plan->stage[t]));
    }
    enqueued = 1;
    MHLA_FORWARD_IF_ERROR(st, mhla__poison_output(ctx, plan->stage[MHLA_TENSOR_OUT],
                                                  mhla_plan_tensor_bytes(plan, MHLA_TENSOR_OUT)));
    for (int t = MHLA_TENSOR_Q; t <= last; ++t) {
        if (t == MHLA_TENSOR_OUT)
            continue;
        MHLA_CL_TRY(st, ctx,
                    clEnqueueWriteBuffer(ctx->queue, plan->stage[t], CL_FALSE, 0,
                                         mhla_plan_tensor_bytes(plan, (mhla_tensor)t), inputs[t], 0, NULL, NULL),
                    "clEnqueueWriteBuffer (host input)");
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    cl_mem *sb = plan->stage;
    if (cu_seqlens)
        MHLA_FORWARD_IF_ERROR(st, mhla_forward_varlen(plan, sb[MHLA_TENSOR_Q], sb[MHLA_TENSOR_K], sb[MHLA_TENSOR_V],
                                                      sb[MHLA_TENSOR_MIXING], cu_seqlens, num_seqs,
                                                      sb[MHLA_TENSOR_OUT], 0, NULL, NULL));
    else
        MHLA_FORWARD_IF_ERROR(st, mhla_forward(plan, sb[MHLA_TENSOR_Q], sb[MHLA_TENSOR_K], sb[MHLA_TENSOR_V],
                                               sb[MHLA_TENSOR_MIXING], sb[MHLA_TENSOR_OUT], 0, NULL, NULL));
    plan->saved = 0; /* the staging buffers are rewritten by the next host call: nothing to keep */
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_CL_TRY(st, ctx,
                clEnqueueReadBuffer(ctx->queue, plan->stage[MHLA_TENSOR_OUT], CL_TRUE, 0,
                                    mhla_plan_tensor_bytes(plan, MHLA_TENSOR_OUT), out, 0, NULL, NULL),
                "clEnqueueReadBuffer (host output)");
cleanup:
    /* Non-blocking writes may still read the caller's arrays: never return before they are done. */
    if (st != MHLA_OK && enqueued)
        clFinish(ctx->queue);
    return st;
}

mhla_status mhla_forward_host(mhla_plan *plan, const void *q, const void *k, const void *v, const float *mixing,
                              void *out)
{
    return mhla__forward_host(plan, "mhla_forward_host", q, k, v, mixing, out, NULL, 0);
}

mhla_status mhla_plan_stage_times(mhla_plan *plan, mhla_stage_times *out)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    cl_ulong t[4] = {0};

    MHLA_FAIL_IF(st, !plan || !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_plan_stage_times: %s is NULL",
                 plan ? "out" : "plan");
    ctx = plan->ctx;
    MHLA_FAIL_IF(st, !ctx->profiling, ctx, MHLA_ERR_UNSUPPORTED,
                 "mhla_plan_stage_times: the queue was created without CL_QUEUE_PROFILING_ENABLE");
    MHLA_FAIL_IF(st, plan->softmax, ctx, MHLA_ERR_UNSUPPORTED,
                 "mhla_plan_stage_times: a softmax plan runs one kernel, not stages: time the event mhla_forward() "
                 "returns");
    MHLA_FAIL_IF(st, !plan->marks[3], ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_plan_stage_times: the plan has not run a forward pass yet");
    MHLA_CL_TRY(st, ctx, clWaitForEvents(1, &plan->marks[3]), "clWaitForEvents (stage markers)");
    for (int i = 0; i < 4; ++i)
        MHLA_CL_TRY(st, ctx,
                    clGetEventProfilingInfo(plan->marks[i], CL_PROFILING_COMMAND_END, sizeof t[i], &t[i], NULL),
                    "clGetEventProfilingInfo (stage markers)");
    /* Some implementations time nothing (rusticl 22.3 on llvmpipe: every command starts at 2 ns and
     * ends at 3): a forward pass of zero length says so. */
    MHLA_FAIL_IF(st, t[3] <= t[0], ctx, MHLA_ERR_UNSUPPORTED,
                 "mhla_plan_stage_times: %s's profiling timestamps are not usable (the last forward pass "
                 "started and ended at %llu ns): time it with the host clock",
                 ctx->device_name, (unsigned long long)t[3]);
    out->summary_ms = (double)(t[1] - t[0]) * 1e-6;
    out->mixing_ms = (double)(t[2] - t[1]) * 1e-6;
    out->output_ms = (double)(t[3] - t[2]) * 1e-6;
    out->total_ms = (double)(t[3] - t[0]) * 1e-6;
cleanup:
    return st;
}
