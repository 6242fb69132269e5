/* The host-memory calls of the forward (mhla_forward_host, mhla_forward_varlen_host): stage the
 * inputs in device buffers the plan keeps, run, read the output back. */
#include "forward/forward.h"

/* The device call on the plan's staging buffers. */
typedef struct forward_run {
    mhla_plan *plan;
    const int32_t *cu_seqlens;
    size_t num_seqs;
} forward_run;

static mhla_status run(void *arg)
{
    mhla_status st = MHLA_OK;
    const forward_run *r = arg;
    cl_mem *sb = r->plan->stage;
    if (r->cu_seqlens)
        MHLA_FORWARD_IF_ERROR(st, mhla_forward_varlen(r->plan, sb[MHLA_TENSOR_Q], sb[MHLA_TENSOR_K], sb[MHLA_TENSOR_V],
                                                      sb[MHLA_TENSOR_MIXING], r->cu_seqlens, r->num_seqs,
                                                      sb[MHLA_TENSOR_OUT], 0, NULL, NULL));
    else
        MHLA_FORWARD_IF_ERROR(st, mhla_forward(r->plan, sb[MHLA_TENSOR_Q], sb[MHLA_TENSOR_K], sb[MHLA_TENSOR_V],
                                               sb[MHLA_TENSOR_MIXING], sb[MHLA_TENSOR_OUT], 0, NULL, NULL));
    r->plan->saved = 0; /* the staging buffers are rewritten by the next host call: nothing to keep */
cleanup:
    return st;
}

mhla_status mhla__forward_host(mhla_plan *plan, const char *fn, const void *q, const void *k, const void *v,
                               const float *mixing, void *out, const int32_t *cu_seqlens, size_t num_seqs)
{
    mhla_status st = MHLA_OK;

    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
    const void *inputs[] = {q, k, v, NULL, mixing};
    const int last = plan->ops->takes_mixing ? MHLA_TENSOR_MIXING : MHLA_TENSOR_OUT; /* softmax: no mixing */
    for (int t = MHLA_TENSOR_Q; t <= last; ++t)
        MHLA_FAIL_IF(st, t == MHLA_TENSOR_OUT ? !out : !inputs[t], plan->ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "%s: %s pointer is NULL", fn, mhla__tensor_name((mhla_tensor)t));
    mhla_staged bufs[5];
    for (int t = MHLA_TENSOR_Q; t <= last; ++t) {
        const int is_out = t == MHLA_TENSOR_OUT;
        bufs[t] = (mhla_staged){mhla__tensor_name((mhla_tensor)t), inputs[t], is_out ? out : NULL,
                                mhla_plan_tensor_bytes(plan, (mhla_tensor)t),
                                is_out ? CL_MEM_WRITE_ONLY : CL_MEM_READ_ONLY, &plan->stage[t], NULL, is_out};
    }
    forward_run r = {plan, cu_seqlens, num_seqs};
    const mhla_stage_ops ops = {run, &r, "clEnqueueWriteBuffer (host input)", "clEnqueueReadBuffer (host output)"};
    st = mhla__host_stage(plan->ctx, bufs, (size_t)last + 1, &ops);
cleanup:
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
