/* mhla_forward: argument checks, then the three stages enqueued back to back on the context's
 * queue (the host-memory calls around it: forward/host_call.c); and the stage times it records. */
#include "forward/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* Refused before anything is enqueued (the start marker included). */
    MHLA_FAIL_IF(st, plan->cfg.causal && plan->cfg.varlen, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_forward: the plan is for packed variable-length sequences (varlen = 1): use "
                 "mhla_forward_varlen() with their cu_seqlens");
    if (plan->ops->stages) {
        MHLA_FORWARD_IF_ERROR(st, mhla__forward_mark_start(plan, num_wait, wait));
        plan->saved = 0;
    }
    MHLA_FORWARD_IF_ERROR(st, plan->ops->forward(plan, bufs, num_wait, wait, done)); /* the variant's */
    if (plan->save_for_backward && plan->ops->stages) { /* for the next mhla_backward() of these buffers */
        plan->saved = 1;
        plan->saved_in[0] = q, plan->saved_in[1] = k, plan->saved_in[2] = v, plan->saved_in[3] = mixing;
    }
cleanup:
    return st;
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
    MHLA_FAIL_IF(st, !ctx->stage_marks, ctx, MHLA_ERR_UNSUPPORTED,
                 "mhla_plan_stage_times: stage markers are off (mhla_context_profile_stages(ctx, 0))");
    MHLA_FAIL_IF(st, !plan->ops->stages, ctx, MHLA_ERR_UNSUPPORTED,
                 "mhla_plan_stage_times: a %s plan runs one kernel, not stages: time the event mhla_forward() "
                 "returns",
                 plan->ops->name);
    /* (all four: markers turned on or off while a forward was enqueued leave some out) */
    MHLA_FAIL_IF(st, !plan->marks[0] || !plan->marks[1] || !plan->marks[2] || !plan->marks[3], ctx,
                 MHLA_ERR_INVALID_ARGUMENT, "mhla_plan_stage_times: the plan has not run a forward pass with stage "
                 "markers yet");
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
