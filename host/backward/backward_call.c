/* mhla_backward, mhla_backward_varlen and their host-pointer conveniences: the argument checks
 * (shapes, aliasing, events), then the stages (backward/backward.c, backward/backward_causal.c). */
#include "backward/backward.h"

#include <stdio.h>
#include <string.h>

/* Gradient buffers, after the inputs, in the order messages name them. */
enum { IN_Q, IN_K, IN_V, IN_MIXING, IN_DOUT, OUT_DQ, OUT_DK, OUT_DV, OUT_DMIXING, N_BUFS };
static const char *const buf_names[N_BUFS] = {"q", "k", "v", "mixing", "dout", "dq", "dk", "dv", "dmixing"};

/* The forward tensor each buffer is shaped like. */
static const mhla_tensor shape_of[N_BUFS] = {MHLA_TENSOR_Q, MHLA_TENSOR_K,   MHLA_TENSOR_V,
                                             MHLA_TENSOR_MIXING, MHLA_TENSOR_OUT, MHLA_TENSOR_Q,
                                             MHLA_TENSOR_K, MHLA_TENSOR_V,   MHLA_TENSOR_MIXING};

static size_t buf_bytes(const mhla_plan *plan, int i)
{
    return mhla_plan_tensor_bytes(plan, shape_of[i]);
}

static mhla_status check(mhla_plan *plan, const char *fn, const cl_mem bufs[N_BUFS], cl_uint num_wait,
                         const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    MHLA_FAIL_IF(st, mhla__backward_ops(plan)->refusal, ctx, MHLA_ERR_UNSUPPORTED, "%s: %s", fn,
                 mhla__backward_ops(plan)->refusal);
    MHLA_FAIL_IF(st, plan->shard, ctx, MHLA_ERR_UNSUPPORTED,
                 "%s: the plan is a shard plan (sequence parallelism): the backward runs on whole-sequence plans "
                 "only", fn);
    for (int i = 0; i < N_BUFS; ++i) {
        if (i == OUT_DMIXING && !bufs[i])
            continue; /* not wanted */
        char what[160];
        mhla__plan_tensor_shape(plan, shape_of[i], what, sizeof what);
        MHLA_FORWARD_IF_ERROR(st, mhla__check_mem_named(ctx, fn, buf_names[i], bufs[i], buf_bytes(plan, i), what));
    }
    /* A gradient written over an input (or another gradient) would be read after it changed. */
    for (int g = OUT_DQ; g < N_BUFS; ++g)
        for (int o = 0; o < g; ++o)
            MHLA_FAIL_IF(st, bufs[g] && bufs[g] == bufs[o], ctx, MHLA_ERR_INVALID_ARGUMENT,
                         "%s: %s is the same buffer as %s: gradients need buffers of their own", fn, buf_names[g],
                         buf_names[o]);
    MHLA_FAIL_IF(st, (num_wait > 0) != (wait != NULL), ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: wait list of %u events with %s pointer", fn, (unsigned)num_wait, wait ? "a" : "a NULL");
cleanup:
    return st;
}

static mhla_status run(mhla_plan *plan, const char *fn, const cl_mem bufs[N_BUFS], const int32_t *cu_seqlens,
                       size_t num_seqs, cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    mhla_bwd *b = NULL;

    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
    ctx = plan->ctx;
    MHLA_FORWARD_IF_ERROR(st, check(plan, fn, bufs, num_wait, wait));
    MHLA_FAIL_IF(st, !cu_seqlens && plan->cfg.varlen, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: the plan is for packed variable-length sequences (varlen = 1): use mhla_backward_varlen() "
                 "with their cu_seqlens",
                 fn);
    MHLA_FAIL_IF(st, cu_seqlens && !plan->cfg.varlen, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: the plan is not for packed variable-length sequences (causal = 1, varlen = 1)", fn);
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_get(plan, &b));
    /* the variant's backward (backward/backward.c, mhla__backward_ops) */
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_ops(plan)->enqueue(plan, b, bufs, cu_seqlens, num_seqs, num_wait, wait));
    if (done) /* with no wait list, a marker follows everything enqueued before it, in any queue */
        MHLA_CL_TRY(st, ctx, clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, done), "clEnqueueMarkerWithWaitList");
cleanup:
    return st;
}

mhla_status mhla_backward(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem dout, cl_mem dq,
                          cl_mem dk, cl_mem dv, cl_mem dmixing, cl_uint num_wait, const cl_event *wait,
                          cl_event *done)
{
    const cl_mem bufs[N_BUFS] = {q, k, v, mixing, dout, dq, dk, dv, dmixing};
    return run(plan, "mhla_backward", bufs, NULL, 0, num_wait, wait, done);
}

mhla_status mhla_backward_varlen(mhla_plan *plan, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing,
                                 const int32_t *cu_seqlens, size_t num_seqs, cl_mem dout, cl_mem dq, cl_mem dk,
                                 cl_mem dv, cl_mem dmixing, cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    const cl_mem bufs[N_BUFS] = {q, k, v, mixing, dout, dq, dk, dv, dmixing};
    if (plan && !cu_seqlens)
        return mhla__fail(plan->ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_backward_varlen: cu_seqlens is NULL");
    return run(plan, "mhla_backward_varlen", bufs, cu_seqlens, num_seqs, num_wait, wait, done);
}

/* The device call of a host convenience, on the staged buffers. */
typedef struct host_run {
    mhla_plan *plan;
    const char *fn;
    cl_mem *const *slot; /* per buffer, its staging buffer; NULL: dmixing not wanted */
    const int32_t *cu_seqlens;
    size_t num_seqs;
} host_run;

static mhla_status run_staged(void *arg)
{
    const host_run *r = arg;
    cl_mem dev[N_BUFS];
    for (int i = 0; i < N_BUFS; ++i)
        dev[i] = r->slot[i] ? *r->slot[i] : NULL;
    r->plan->saved = 0; /* the forward's staging buffers have new contents */
    return run(r->plan, r->fn, dev, r->cu_seqlens, r->num_seqs, 0, NULL, NULL);
}

/* Both host conveniences: stage the inputs (the forward's staging buffers for q, k, v and mixing),
 * run, read every gradient back. Blocking. */
static mhla_status run_host(mhla_plan *plan, const char *fn, const void *const in[5], void *const out[4],
                            const int32_t *cu_seqlens, size_t num_seqs)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    mhla_bwd *b = NULL;
    cl_mem *slot[N_BUFS] = {NULL};
    mhla_staged bufs[N_BUFS];
    size_t n = 0;

    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
    ctx = plan->ctx;
    MHLA_FAIL_IF(st, mhla__backward_ops(plan)->refusal, ctx, MHLA_ERR_UNSUPPORTED, "%s: %s", fn,
                 mhla__backward_ops(plan)->refusal);
    MHLA_FAIL_IF(st, plan->shard, ctx, MHLA_ERR_UNSUPPORTED,
                 "%s: the plan is a shard plan (sequence parallelism): the backward runs on whole-sequence plans "
                 "only", fn);
    for (int i = 0; i < N_BUFS - 1; ++i)
        MHLA_FAIL_IF(st, i < 5 ? !in[i] : !out[i - 5], ctx, MHLA_ERR_INVALID_ARGUMENT, "%s: %s pointer is NULL", fn,
                     buf_names[i]);
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_get(plan, &b));
    static const int forward_stage[4] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_MIXING};
    for (int i = 0; i < N_BUFS; ++i) {
        if (i == OUT_DMIXING && !out[3])
            continue;
        const int input = i <= IN_DOUT;
        slot[i] = i < IN_DOUT ? &plan->stage[forward_stage[i]] : &b->stage[i - IN_DOUT];
        bufs[n++] = (mhla_staged){buf_names[i], input ? in[i] : NULL, input ? NULL : out[i - OUT_DQ],
                                  buf_bytes(plan, i), input ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE, slot[i], NULL, 0};
    }
    host_run r = {plan, fn, slot, cu_seqlens, num_seqs};
    const mhla_stage_ops ops = {run_staged, &r, "clEnqueueWriteBuffer (host input)",
                                "clEnqueueReadBuffer (host gradient)"};
    st = mhla__host_stage(ctx, bufs, n, &ops);
cleanup:
    return st;
}

mhla_status mhla_backward_host(mhla_plan *plan, const void *q, const void *k, const void *v, const float *mixing,
                               const void *dout, void *dq, void *dk, void *dv, float *dmixing)
{
    const void *const in[5] = {q, k, v, mixing, dout};
    void *const out[4] = {dq, dk, dv, dmixing};
    return run_host(plan, "mhla_backward_host", in, out, NULL, 0);
}

mhla_status mhla_backward_varlen_host(mhla_plan *plan, const void *q, const void *k, const void *v,
                                      const float *mixing, const int32_t *cu_seqlens, size_t num_seqs,
                                      const void *dout, void *dq, void *dk, void *dv, float *dmixing)
{
    const void *const in[5] = {q, k, v, mixing, dout};
    void *const out[4] = {dq, dk, dv, dmixing};
    if (plan && !cu_seqlens)
        return mhla__fail(plan->ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_backward_varlen_host: cu_seqlens is NULL");
    return run_host(plan, "mhla_backward_varlen_host", in, out, cu_seqlens, num_seqs);
}

mhla_status mhla_plan_save_for_backward(mhla_plan *plan, int enable)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !plan, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_plan_save_for_backward: plan is NULL");
    MHLA_FAIL_IF(st, enable != 0 && enable != 1, plan->ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_plan_save_for_backward: enable is %d (0 or 1)", enable);
    plan->save_for_backward = enable;
    plan->saved = 0; /* from the next forward on */
cleanup:
    return st;
}
