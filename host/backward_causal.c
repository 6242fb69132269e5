/* The causal chunk form's backward (placeholder until its kernels land). */
#include "backward.h"

mhla_status mhla__backward_causal_setup(mhla_plan *plan, mhla_bwd *b)
{
    (void)b;
    return mhla__fail(plan->ctx, MHLA_ERR_UNSUPPORTED, "mhla_backward: causal plans are not supported yet");
}

void mhla__backward_causal_destroy(mhla_bwd *b) { (void)b; }

mhla_status mhla__backward_causal_enqueue(mhla_plan *plan, mhla_bwd *b, cl_mem q, cl_mem k, cl_mem v,
                                          cl_mem mixing, const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout,
                                          cl_mem dq, cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait,
                                          const cl_event *wait)
{
    (void)b, (void)q, (void)k, (void)v, (void)mixing, (void)cu_seqlens, (void)num_seqs, (void)dout, (void)dq;
    (void)dk, (void)dv, (void)dmixing, (void)num_wait, (void)wait;
    return mhla__fail(plan->ctx, MHLA_ERR_UNSUPPORTED, "mhla_backward: causal plans are not supported yet");
}
