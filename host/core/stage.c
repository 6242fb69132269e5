/* The host-pointer calls' copies (mhla_forward_host, mhla_backward_host, the decoder's): staging
 * buffers made on first use and kept by the caller, inputs written, the run, outputs read back. */
#include "core/core.h"

#include <stdio.h>

static size_t buf_size(const mhla_staged *b) { return b->mem_bytes ? *b->mem_bytes : b->bytes; }

mhla_status mhla__host_stage(mhla_context *ctx, mhla_staged *bufs, size_t n, const mhla_stage_ops *ops)
{
    mhla_status st = MHLA_OK;
    int enqueued = 0;
    size_t outputs = 0;

    for (size_t i = 0; i < n; ++i) {
        mhla_staged *b = &bufs[i];
        outputs += b->out != NULL;
        if (*b->mem && (!b->mem_bytes || *b->mem_bytes >= b->bytes))
            continue;
        char what[64];
        snprintf(what, sizeof what, "the host-copy buffer for %s", b->name);
        if (*b->mem)
            clReleaseMemObject(*b->mem); /* too small for this call: grown, never shrunk */
        *b->mem = NULL;
        if (b->mem_bytes)
            *b->mem_bytes = 0;
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, b->flags, b->bytes, what, b->mem));
        if (b->mem_bytes)
            *b->mem_bytes = b->bytes;
    }
    enqueued = 1;
    for (size_t i = 0; i < n; ++i)
        if (bufs[i].poison)
            MHLA_FORWARD_IF_ERROR(st, mhla__poison_output(ctx, *bufs[i].mem, buf_size(&bufs[i])));
    for (size_t i = 0; i < n; ++i)
        if (bufs[i].in)
            MHLA_CL_TRY(st, ctx,
                        clEnqueueWriteBuffer(ctx->queue, *bufs[i].mem, CL_FALSE, 0, bufs[i].bytes, bufs[i].in, 0,
                                             NULL, NULL),
                        ops->write_what);
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_FORWARD_IF_ERROR(st, ops->run(ops->arg));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    /* One output: its blocking read waits for everything before it. Several: read side by side,
     * then wait once (on an out-of-order queue a blocking read waits for itself only). */
    for (size_t i = 0; i < n; ++i)
        if (bufs[i].out)
            MHLA_CL_TRY(st, ctx,
                        clEnqueueReadBuffer(ctx->queue, *bufs[i].mem, outputs == 1 ? CL_TRUE : CL_FALSE, 0,
                                            bufs[i].bytes, bufs[i].out, 0, NULL, NULL),
                        ops->read_what);
    if (outputs > 1)
        MHLA_CL_TRY(st, ctx, clFinish(ctx->queue), "clFinish");
cleanup:
    /* Non-blocking copies may still use the caller's arrays: never return before they are done. */
    if (st != MHLA_OK && enqueued)
        clFinish(ctx->queue);
    return st;
}
