/* Status codes, failure messages (per context and per thread) and the library version.
 * The library never prints: every failure explains itself through these messages. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char thread_message[MHLA_MESSAGE_MAX];

unsigned mhla_version(void) { return MHLA_VERSION_NUMBER; }

const char *mhla_version_string(void) { return MHLA_VERSION_STRING; }

const char *mhla_status_name(mhla_status status)
{
    switch (status) {
#define MHLA_STATUS_NAME_(name, value, text)                                                        \
    case MHLA_##name:                                                                               \
        return "MHLA_" #name;
        MHLA_STATUS_MAP(MHLA_STATUS_NAME_)
#undef MHLA_STATUS_NAME_
    }
    return "MHLA_UNKNOWN_STATUS";
}

const char *mhla_strerror(mhla_status status)
{
    switch (status) {
#define MHLA_STATUS_TEXT_(name, value, text)                                                        \
    case MHLA_##name:                                                                               \
        return text;
        MHLA_STATUS_MAP(MHLA_STATUS_TEXT_)
#undef MHLA_STATUS_TEXT_
    }
    return "unknown status";
}

const char *mhla_last_message(void) { return thread_message; }

const char *mhla_context_message(const mhla_context *ctx) { return ctx ? ctx->message : ""; }

cl_int mhla_context_cl_error(const mhla_context *ctx)
{
    if (!ctx)
        return CL_SUCCESS;
    mhla_mutex *lock = (mhla_mutex *)&ctx->message_lock; /* reading takes the lock too */
    mhla__lock(lock);
    const cl_int err = ctx->last_cl_error;
    mhla__unlock(lock);
    return err;
}

void mhla__set_cl_error(mhla_context *ctx, cl_int err)
{
    if (!ctx)
        return;
    mhla__lock(&ctx->message_lock);
    ctx->last_cl_error = err;
    mhla__unlock(&ctx->message_lock);
}

char *mhla__fmt(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    return buf;
}

static mhla_status record(mhla_context *ctx, mhla_status status, const char *text)
{
    snprintf(thread_message, sizeof thread_message, "%s", text);
    if (ctx && ctx->message != text) {
        mhla__lock(&ctx->message_lock);
        snprintf(ctx->message, sizeof ctx->message, "%s", text);
        mhla__unlock(&ctx->message_lock);
    }
    return status;
}

static mhla_status vfail(mhla_context *ctx, mhla_status status, const char *fmt, va_list ap)
{
    char text[MHLA_MESSAGE_MAX];
    vsnprintf(text, sizeof text, fmt, ap);
    return record(ctx, status, text);
}

mhla_status mhla__fail(mhla_context *ctx, mhla_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const mhla_status st = vfail(ctx, status, fmt, ap);
    va_end(ap);
    return st;
}

/* The same for companion libraries (libmhla_mpi), which cannot see mhla__fail. */
mhla_status mhla_report(mhla_context *ctx, mhla_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const mhla_status st = vfail(ctx, status, fmt, ap);
    va_end(ap);
    return st;
}

const char *mhla__cl_error_name(cl_int err)
{
    switch (err) {
#define N_(code)                                                                                    \
    case code:                                                                                      \
        return #code;
        N_(CL_SUCCESS)
        N_(CL_DEVICE_NOT_FOUND)
        N_(CL_DEVICE_NOT_AVAILABLE)
        N_(CL_COMPILER_NOT_AVAILABLE)
        N_(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        N_(CL_OUT_OF_RESOURCES)
        N_(CL_OUT_OF_HOST_MEMORY)
        N_(CL_PROFILING_INFO_NOT_AVAILABLE)
        N_(CL_MEM_COPY_OVERLAP)
        N_(CL_IMAGE_FORMAT_MISMATCH)
        N_(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        N_(CL_BUILD_PROGRAM_FAILURE)
        N_(CL_MAP_FAILURE)
        N_(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        N_(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        N_(CL_COMPILE_PROGRAM_FAILURE)
        N_(CL_LINKER_NOT_AVAILABLE)
        N_(CL_LINK_PROGRAM_FAILURE)
        N_(CL_DEVICE_PARTITION_FAILED)
        N_(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
        N_(CL_INVALID_VALUE)
        N_(CL_INVALID_DEVICE_TYPE)
        N_(CL_INVALID_PLATFORM)
        N_(CL_INVALID_DEVICE)
        N_(CL_INVALID_CONTEXT)
        N_(CL_INVALID_QUEUE_PROPERTIES)
        N_(CL_INVALID_COMMAND_QUEUE)
        N_(CL_INVALID_HOST_PTR)
        N_(CL_INVALID_MEM_OBJECT)
        N_(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        N_(CL_INVALID_IMAGE_SIZE)
        N_(CL_INVALID_SAMPLER)
        N_(CL_INVALID_BINARY)
        N_(CL_INVALID_BUILD_OPTIONS)
        N_(CL_INVALID_PROGRAM)
        N_(CL_INVALID_PROGRAM_EXECUTABLE)
        N_(CL_INVALID_KERNEL_NAME)
        N_(CL_INVALID_KERNEL_DEFINITION)
        N_(CL_INVALID_KERNEL)
        N_(CL_INVALID_ARG_INDEX)
        N_(CL_INVALID_ARG_VALUE)
        N_(CL_INVALID_ARG_SIZE)
        N_(CL_INVALID_KERNEL_ARGS)
        N_(CL_INVALID_WORK_DIMENSION)
        N_(CL_INVALID_WORK_GROUP_SIZE)
        N_(CL_INVALID_WORK_ITEM_SIZE)
        N_(CL_INVALID_GLOBAL_OFFSET)
        N_(CL_INVALID_EVENT_WAIT_LIST)
        N_(CL_INVALID_EVENT)
        N_(CL_INVALID_OPERATION)
        N_(CL_INVALID_GL_OBJECT)
        N_(CL_INVALID_BUFFER_SIZE)
        N_(CL_INVALID_MIP_LEVEL)
        N_(CL_INVALID_GLOBAL_WORK_SIZE)
        N_(CL_INVALID_PROPERTY)
        N_(CL_INVALID_IMAGE_DESCRIPTOR)
        N_(CL_INVALID_COMPILER_OPTIONS)
        N_(CL_INVALID_LINKER_OPTIONS)
        N_(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef N_
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    }
    return "CL_UNKNOWN_ERROR";
}

mhla_status mhla__status_of_cl(cl_int err)
{
    switch (err) {
    case CL_SUCCESS:
        return MHLA_OK;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_INVALID_BUFFER_SIZE:
        return MHLA_ERR_OUT_OF_DEVICE_MEMORY;
    case CL_OUT_OF_HOST_MEMORY:
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_COMPILER_NOT_AVAILABLE:
        return MHLA_ERR_BUILD_FAILED;
    case CL_DEVICE_NOT_FOUND:
    case -1001: /* CL_PLATFORM_NOT_FOUND_KHR: the ICD loader found no platform */
        return MHLA_ERR_DEVICE_NOT_FOUND;
    case CL_INVALID_MEM_OBJECT:
    case CL_INVALID_CONTEXT:
    case CL_INVALID_COMMAND_QUEUE:
    case CL_INVALID_EVENT_WAIT_LIST:
        return MHLA_ERR_INVALID_ARGUMENT;
    default:
        return MHLA_ERR_OPENCL;
    }
}

mhla_status mhla__fail_cl(mhla_context *ctx, cl_int err, const char *what, const char *file, int line)
{
    mhla__set_cl_error(ctx, (cl_int)err);
    return mhla__fail(ctx, mhla__status_of_cl(err), "%s failed: %s (%d) at %s:%d", what,
                      mhla__cl_error_name(err), (int)err, file, line);
}
