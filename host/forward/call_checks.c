/* Argument checks of the calls on a plan (its tensors' buffers and sizes) and the profiling marker
 * that starts a forward's stage times: shared by mhla_forward, the varlen, host and shard calls. */
#include "forward/forward.h"

#include <stdio.h>

/* "[B,N,H,D] = [1,4096,8,64] f32" — what the shape needs, for messages. */
void mhla__plan_tensor_shape(const void *obj, mhla_tensor t, char *buf, size_t size)
{
    const mhla_plan *plan = obj;
    const mhla_config *c = &plan->cfg;
    if (t == MHLA_TENSOR_MIXING) {
        snprintf(buf, size, "%lld x %lld float32", (long long)c->mixing_rows,
                 (long long)(c->causal ? c->mixing_rows : plan->shape.m_kv));
        return;
    }
    long long d = (t == MHLA_TENSOR_Q || t == MHLA_TENSOR_K) ? (long long)c->dk : (long long)c->dv;
    /* k and v: the key/value side's tokens and heads */
    const int kv = t == MHLA_TENSOR_K || t == MHLA_TENSOR_V;
    const long long n = (long long)(kv ? plan->shape.n_kv : plan->shape.n);
    const long long h = (long long)(kv ? plan->shape.heads_kv : c->heads);
    if (c->layout == MHLA_LAYOUT_BHND)
        snprintf(buf, size, "[B,H,N,D] = [%lld,%lld,%lld,%lld] %s", (long long)c->batch, h, n, d,
                 mhla_dtype_name(c->dtype));
    else
        snprintf(buf, size, "[B,N,H,D] = [%lld,%lld,%lld,%lld] %s", (long long)c->batch, n, h, d,
                 mhla_dtype_name(c->dtype));
}

mhla_status mhla__plan_check_mem(mhla_plan *plan, const char *fn, mhla_tensor t, cl_mem buf)
{
    return mhla__check_mem(plan->ctx, fn, t, buf, mhla_plan_tensor_bytes(plan, t), mhla__plan_tensor_shape, plan);
}

mhla_status mhla__forward_check(mhla_plan *plan, const char *fn, const cl_mem bufs[5], cl_uint num_wait,
                                const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    /* A variant without a mixing matrix (softmax) ignores its argument. */
    const int last = plan->ops->takes_mixing ? MHLA_TENSOR_MIXING : MHLA_TENSOR_OUT;
    for (int t = MHLA_TENSOR_Q; t <= last; ++t)
        MHLA_FORWARD_IF_ERROR(st, mhla__check_mem(plan->ctx, fn, (mhla_tensor)t, bufs[t],
                                                  mhla_plan_tensor_bytes(plan, (mhla_tensor)t), mhla__plan_tensor_shape, plan));
    MHLA_FORWARD_IF_ERROR(st, mhla__check_call(plan->ctx, fn, bufs, plan->ops->takes_mixing, num_wait, wait));
cleanup:
    return st;
}

mhla_status mhla__forward_mark_start(mhla_plan *plan, cl_uint num_wait, const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    /* The first marker waits for the caller's events, so the summary stage needs no wait list of
     * its own when markers are on. */
    if (plan->marks[0])
        clReleaseEvent(plan->marks[0]);
    plan->marks[0] = NULL;
    if (ctx->stage_marks) {
        MHLA_CL_TRY(st, ctx, clEnqueueMarkerWithWaitList(ctx->queue, num_wait, wait, &plan->marks[0]),
                    "clEnqueueMarkerWithWaitList");
    }
cleanup:
    return st;
}
