/* Launching kernels within the device's limits, ordering stages, creating checked buffers. */
#include "core/core.h"

mhla_status mhla__stage_barrier(mhla_context *ctx)
{
    mhla_status st = MHLA_OK;
    if (ctx->out_of_order)
        MHLA_CL_TRY(st, ctx, clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL),
                    "clEnqueueBarrierWithWaitList");
cleanup:
    return st;
}

cl_int mhla__kernel_wg_size(mhla_context *ctx, cl_kernel kernel, size_t *out)
{
    size_t kwg = 0;
    const cl_int err = clGetKernelWorkGroupInfo(kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL);
    if (err != CL_SUCCESS)
        return err;
    if (ctx->limits.kernel_wg_cap && kwg > ctx->limits.kernel_wg_cap)
        kwg = ctx->limits.kernel_wg_cap;
    *out = kwg;
    return CL_SUCCESS;
}

static size_t kernel_wg_limit(mhla_context *ctx, cl_kernel kernel)
{
    size_t kwg = 0;
    if (mhla__kernel_wg_size(ctx, kernel, &kwg) != CL_SUCCESS || kwg == 0)
        kwg = 1;
    return kwg < ctx->limits.max_work_group_size ? kwg : ctx->limits.max_work_group_size;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

mhla_status mhla__stage_mark(mhla_context *ctx, cl_event *mark)
{
    mhla_status st = MHLA_OK;
    if (*mark)
        clReleaseEvent(*mark);
    *mark = NULL;
    if (!ctx->stage_marks)
        return MHLA_OK;
    /* With no wait list a marker completes after every command enqueued before it (in or out of
     * order), so its end time is the end of the stage before it. */
    MHLA_CL_TRY(st, ctx, clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, mark), "clEnqueueMarkerWithWaitList");
cleanup:
    return st;
}

size_t mhla__local_size(mhla_context *ctx, cl_kernel kernel, size_t want)
{
    size_t lim = kernel_wg_limit(ctx, kernel);
    if (ctx->limits.max_work_item_sizes[0])
        lim = min_size(lim, ctx->limits.max_work_item_sizes[0]);
    const size_t ls = min_size(want, lim);
    return ls ? ls : 1;
}

void mhla__local_size_3d(mhla_context *ctx, cl_kernel kernel, const size_t extent[3], size_t want, size_t local[3])
{
    size_t total = min_size(want, kernel_wg_limit(ctx, kernel));
    if (total == 0)
        total = 1;
    for (int i = 0; i < 3; ++i) {
        size_t l = min_size(extent[i] ? extent[i] : 1, total);
        if (ctx->limits.max_work_item_sizes[i])
            l = min_size(l, ctx->limits.max_work_item_sizes[i]);
        local[i] = l ? l : 1;
        total /= local[i];
        if (total == 0)
            total = 1;
    }
}

void mhla__local_size_heads(mhla_context *ctx, cl_kernel kernel, const size_t extent[3], size_t want, size_t local[3])
{
    size_t total = min_size(want, kernel_wg_limit(ctx, kernel)), h = extent[1] ? extent[1] : 1;
    if (total == 0)
        total = 1;
    size_t lim1 = total;
    if (ctx->limits.max_work_item_sizes[1])
        lim1 = min_size(lim1, ctx->limits.max_work_item_sizes[1]);
    /* the largest divisor of the head count that fits: no head padding rounds the launch up */
    size_t l1 = min_size(h, lim1);
    while (h % l1)
        --l1;
    size_t l0 = min_size(extent[0] ? extent[0] : 1, total / l1);
    if (ctx->limits.max_work_item_sizes[0])
        l0 = min_size(l0, ctx->limits.max_work_item_sizes[0]);
    local[0] = l0 ? l0 : 1, local[1] = l1, local[2] = 1;
}

mhla_status mhla__launch(mhla_context *ctx, cl_kernel kernel, cl_uint dims, const size_t extent[3],
                         const size_t local[3], cl_uint num_wait, const cl_event *wait, cl_event *done,
                         const char *what)
{
    mhla_status st = MHLA_OK;
    size_t global[3], items = 1;
    for (cl_uint i = 0; i < dims; ++i) {
        global[i] = mhla__round_up(extent[i], local[i]);
        items *= local[i];
        MHLA_FAIL_IF(st, ctx->limits.max_work_item_sizes[i] && local[i] > ctx->limits.max_work_item_sizes[i], ctx,
                     MHLA_ERR_OPENCL, "%s: a group of %zu work-items in dimension %u, more than %zu allowed on %s",
                     what, local[i], (unsigned)i, ctx->limits.max_work_item_sizes[i], ctx->device_name);
    }
    /* A device refuses such a group itself (CL_INVALID_WORK_GROUP_SIZE); checked here too so that the
     * limits MHLA_LIMITS forces on a CPU device fail a plan that exceeds them as a GPU's would. */
    MHLA_FAIL_IF(st, items > ctx->limits.max_work_group_size ||
                         (ctx->limits.kernel_wg_cap && items > ctx->limits.kernel_wg_cap),
                 ctx, MHLA_ERR_OPENCL, "%s: a group of %zu work-items, more than the %zu the %s allows on %s", what,
                 items, items > ctx->limits.max_work_group_size ? ctx->limits.max_work_group_size
                                                                : ctx->limits.kernel_wg_cap,
                 items > ctx->limits.max_work_group_size ? "device" : "kernel", ctx->device_name);
    /* kernel profiling (core/profile.c) wants every launch's event, the caller's too */
    cl_event ev = NULL;
    const int profile = ctx->kprof_on;
    MHLA_CL_TRY(st, ctx,
                clEnqueueNDRangeKernel(ctx->queue, kernel, dims, NULL, global, local, num_wait, wait,
                                       done ? done : profile ? &ev : NULL),
                what);
    if (profile && done && *done && clRetainEvent(*done) == CL_SUCCESS)
        ev = *done;
    if (ev)
        mhla__kprof_record(ctx, what, ev);
cleanup:
    return st;
}

mhla_status mhla__set_args(mhla_context *ctx, cl_kernel kernel, const char *kernel_name, cl_uint first, size_t n,
                           const mhla_arg *args, const char *file, int line)
{
    for (size_t i = 0; i < n; ++i) {
        const cl_uint index = first + (cl_uint)i;
        const cl_int err = clSetKernelArg(kernel, index, args[i].size, args[i].value);
        if (err != CL_SUCCESS) {
            /* the kernel as the caller spelled it and the argument's place in its signature: enough to
             * find which value the device refused */
            char what[192];
            snprintf(what, sizeof what, "clSetKernelArg(%s, %u)", kernel_name, (unsigned)index);
            return mhla__fail_cl(ctx, err, what, file, line);
        }
    }
    return MHLA_OK;
}

mhla_status mhla__buffer_create(mhla_context *ctx, cl_mem_flags flags, size_t bytes, const char *what,
                                cl_mem *out)
{
    mhla_status st = MHLA_OK;
    cl_int err = CL_SUCCESS;
    void *nan = NULL;
    *out = NULL;
    if (bytes == 0)
        bytes = 4; /* OpenCL rejects empty buffers; an unused workspace slot stays valid */
    MHLA_FAIL_IF(st, bytes > ctx->limits.max_alloc_bytes, ctx, MHLA_ERR_OUT_OF_DEVICE_MEMORY,
                 "%s needs %zu bytes, more than the device's largest allocation "
                 "(CL_DEVICE_MAX_MEM_ALLOC_SIZE = %llu bytes) on %s",
                 what, bytes, (unsigned long long)ctx->limits.max_alloc_bytes, ctx->device_name);
    /* NaN from the start where the tests ask (MHLA_POISON_WORKSPACE) */
    MHLA_FORWARD_IF_ERROR(st, mhla__workspace_poison(ctx, bytes, what, &nan));
    *out = mhla__cl_create_buffer(ctx->cl, nan ? flags | CL_MEM_COPY_HOST_PTR : flags, bytes, nan, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        mhla__set_cl_error(ctx, err);
        MHLA_FAIL_IF(st, 1, ctx, mhla__status_of_cl(err), "clCreateBuffer for %s (%zu bytes) failed: %s (%d)",
                     what, bytes, mhla__cl_error_name(err), (int)err);
    }
cleanup:
    mhla__free(nan);
    return st;
}
