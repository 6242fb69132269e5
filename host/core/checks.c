/* Argument checks shared by every public call that takes device buffers: a buffer of the right
 * context and size, no output aliasing an input, a consistent wait list; and the NaN poison of
 * host calls' staged outputs and of the library's new buffers (tests). */
#include "core/core.h"

#include <string.h>

const char *mhla__tensor_name(mhla_tensor t)
{
    static const char *names[] = {"q", "k", "v", "out", "mixing"};
    return names[t];
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

/* The poison's value: NaN in f16 and bf16; two of them make an f32 NaN. */
#define POISON_HALF 0x7FFF

/* A test switch: its variable is "1". */
static int switched_on(const char *name)
{
    const char *env = getenv(name);
    return env && strcmp(env, "1") == 0;
}

/* Test switch MHLA_POISON_OUTPUTS=1 (the tests set it): the host calls fill their staging output
 * with NaN before every run. The staging buffer is reused across calls, so without it an element a
 * kernel forgets to write reads back as the previous run's value and can match the reference. */
mhla_status mhla__poison_output(mhla_context *ctx, cl_mem buf, size_t bytes)
{
    static const cl_ushort nan16 = POISON_HALF;
    mhla_status st = MHLA_OK;
    if (!switched_on("MHLA_POISON_OUTPUTS"))
        return MHLA_OK;
    MHLA_CL_TRY(st, ctx, clEnqueueFillBuffer(ctx->queue, buf, &nan16, sizeof nan16, 0, bytes, 0, NULL, NULL),
                "clEnqueueFillBuffer (MHLA_POISON_OUTPUTS)");
cleanup:
    return st;
}

/* Test switch MHLA_POISON_WORKSPACE=1 (the tests and `mhla selftest` set it): a new buffer of the
 * library's starts as NaN. A CPU device's fresh memory is often zeros, a GPU's holds whatever was
 * there: a kernel that reads an element nothing wrote, counting on zeros, then fails on every device
 * alike. The buffer is made from this host copy rather than filled on the queue, which may hold the
 * caller's commands behind an event not yet set. */
mhla_status mhla__workspace_poison(mhla_context *ctx, size_t bytes, const char *what, void **copy)
{
    mhla_status st = MHLA_OK;
    *copy = NULL;
    if (!switched_on("MHLA_POISON_WORKSPACE") || bytes % sizeof(cl_ushort) != 0)
        return MHLA_OK;
    cl_ushort *nan = mhla__malloc(bytes);
    MHLA_FAIL_IF(st, !nan, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "out of host memory for the NaN poison of %s (%zu bytes, MHLA_POISON_WORKSPACE)", what, bytes);
    for (size_t i = 0; i < bytes / sizeof *nan; ++i)
        nan[i] = POISON_HALF;
    *copy = nan;
cleanup:
    return st;
}
