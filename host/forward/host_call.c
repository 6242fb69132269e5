/* The host-memory calls of the forward (mhla_forward_host, mhla_forward_varlen_host): stage the
 * inputs in device buffers the plan keeps, run, read the output back. */
#include "forward/forward.h"

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

mhla_status mhla_forward_varlen_host(mhla_plan *plan, const void *q, const void *k, const void *v,
                                     const float *mixing, const int32_t *cu_seqlens, size_t num_seqs, void *out)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !cu_seqlens, plan ? plan->ctx : NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_forward_varlen_host: cu_seqlens pointer is NULL");
    st = mhla__forward_host(plan, "mhla_forward_varlen_host", q, k, v, mixing, out, cu_seqlens, num_seqs);
cleanup:
    return st;
}
