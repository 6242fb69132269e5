/* Contexts: a device, its OpenCL context and queue (created or wrapped), its limits, and the
 * programs built for it. */
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void parse_c_version(const char *text, int *major, int *minor)
{
    /* "OpenCL C 1.2 PoCL", "OpenCL C 3.0 " — the first "d.d" after "OpenCL C". */
    *major = 1;
    *minor = 2;
    const char *p = strstr(text, "OpenCL C ");
    int a = 0, b = 0;
    if (p && sscanf(p + 9, "%d.%d", &a, &b) == 2) {
        *major = a;
        *minor = b;
    }
}

/* MHLA_LIMITS="wg=N,kwg=N,local=BYTES,local_type=global" (a K or KiB suffix: 1024 bytes): the device's
 * work-group and local-memory limits lowered to these values, never raised. Kernels are fitted to the
 * limits the context holds, so a CPU device in CI can run the GPU tiles as a phone's 64-wide groups or
 * a GPU's 16 KiB would fit them. A value the device exceeds is taken; one above the device's is
 * ignored. kwg caps what each built kernel reports (CL_KERNEL_WORK_GROUP_SIZE) below the device's
 * limit, as a GPU reports it for a kernel that needs many registers: plans sized by the device's limit
 * must fit again after building. local_type=global: the device's local memory taken as global
 * memory, as a Mali's is, on any device (a GPU row then takes its untiled forms: tune/gpu_row.c). */
static mhla_status apply_forced_limits(mhla_context *ctx)
{
    mhla_status st = MHLA_OK;
    const char *env = getenv("MHLA_LIMITS");
    if (!env || !*env)
        return MHLA_OK;
    mhla_device_limits *lim = &ctx->limits;
    const char *p = env;
    while (*p) {
        char name[16] = "";
        int len = 0;
        while (p[len] && p[len] != '=' && p[len] != ',' && len < (int)sizeof name - 1)
            name[len] = p[len], ++len;
        MHLA_FAIL_IF(st, p[len] != '=', ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_LIMITS='%s': expected name=value at '%s' (names: wg, kwg, local, local_type)", env, p);
        if (strcmp(name, "local_type") == 0) {
            const char *value = p + len + 1;
            MHLA_FAIL_IF(st, strncmp(value, "global", 6) != 0 || (value[6] && value[6] != ','), ctx,
                         MHLA_ERR_INVALID_ARGUMENT, "MHLA_LIMITS='%s': local_type takes only 'global'", env);
            lim->local_mem_global = 2;
            p = value[6] ? value + 7 : value + 6;
            continue;
        }
        char *end = NULL;
        const unsigned long long v = strtoull(p + len + 1, &end, 10);
        unsigned long long value = v;
        if (end && (*end == 'K' || *end == 'k')) {
            value = v * 1024ull;
            end += strncmp(end + 1, "iB", 2) == 0 ? 3 : 1;
        }
        /* a digit first: strtoull would take "-1" as its largest value */
        MHLA_FAIL_IF(st, p[len + 1] < '0' || p[len + 1] > '9' || end == p + len + 1 || v == 0 || (*end && *end != ','),
                     ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "MHLA_LIMITS='%s': '%s' needs a positive whole number (local takes a K suffix)", env, name);
        if (strcmp(name, "wg") == 0) {
            if (value < lim->max_work_group_size)
                lim->max_work_group_size = (size_t)value;
            for (int i = 0; i < 3; ++i)
                if (value < lim->max_work_item_sizes[i])
                    lim->max_work_item_sizes[i] = (size_t)value;
        } else if (strcmp(name, "kwg") == 0) {
            lim->kernel_wg_cap = (size_t)value;
        } else if (strcmp(name, "local") == 0) {
            if (value < lim->local_mem_bytes)
                lim->local_mem_bytes = value;
        } else {
            MHLA_FAIL_IF(st, 1, ctx, MHLA_ERR_INVALID_ARGUMENT,
                         "MHLA_LIMITS='%s': unknown limit '%s' (wg, kwg, local, local_type)", env, name);
        }
        p = *end ? end + 1 : end;
    }
cleanup:
    return st;
}

mhla_status mhla__context_read_device(mhla_context *ctx)
{
    mhla_status st = MHLA_OK;
    mhla_device_limits *lim = &ctx->limits;
    char cver[128] = "";
    cl_device_id dev = ctx->device;

    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof ctx->device_name, ctx->device_name, NULL),
                "clGetDeviceInfo(CL_DEVICE_NAME)");
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof ctx->vendor, ctx->vendor, NULL),
                "clGetDeviceInfo(CL_DEVICE_VENDOR)");
    MHLA_CL_TRY(st, ctx,
                clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof ctx->driver_version, ctx->driver_version, NULL),
                "clGetDeviceInfo(CL_DRIVER_VERSION)");
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL),
                "clGetDeviceInfo(CL_DEVICE_PLATFORM)");
    MHLA_CL_TRY(st, ctx,
                clGetPlatformInfo(ctx->platform, CL_PLATFORM_VERSION, sizeof ctx->platform_version,
                                  ctx->platform_version, NULL),
                "clGetPlatformInfo(CL_PLATFORM_VERSION)");
    MHLA_CL_TRY(st, ctx,
                clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof lim->max_work_group_size,
                                &lim->max_work_group_size, NULL),
                "clGetDeviceInfo(CL_DEVICE_MAX_WORK_GROUP_SIZE)");
    MHLA_CL_TRY(st, ctx,
                clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof lim->max_work_item_sizes,
                                lim->max_work_item_sizes, NULL),
                "clGetDeviceInfo(CL_DEVICE_MAX_WORK_ITEM_SIZES)");
    cl_ulong u = 0;
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof u, &u, NULL),
                "clGetDeviceInfo(CL_DEVICE_LOCAL_MEM_SIZE)");
    lim->local_mem_bytes = u;
    cl_device_local_mem_type local_type = CL_LOCAL;
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_TYPE, sizeof local_type, &local_type, NULL),
                "clGetDeviceInfo(CL_DEVICE_LOCAL_MEM_TYPE)");
    lim->local_mem_global = local_type == CL_GLOBAL;
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof u, &u, NULL),
                "clGetDeviceInfo(CL_DEVICE_MAX_MEM_ALLOC_SIZE)");
    lim->max_alloc_bytes = u;
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u, &u, NULL),
                "clGetDeviceInfo(CL_DEVICE_GLOBAL_MEM_SIZE)");
    lim->global_mem_bytes = u;
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof lim->type, &lim->type, NULL),
                "clGetDeviceInfo(CL_DEVICE_TYPE)");
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_OPENCL_C_VERSION, sizeof cver, cver, NULL),
                "clGetDeviceInfo(CL_DEVICE_OPENCL_C_VERSION)");
    cver[sizeof cver - 1] = '\0';
    parse_c_version(cver, &lim->opencl_c_major, &lim->opencl_c_minor);
    /* Every kernel is OpenCL C 1.2 (vloadn on private memory, restrict, static-free helpers);
     * every device of OpenCL 1.2 through 3.0 compiles it with -cl-std=CL1.2. */
    MHLA_FAIL_IF(st, lim->opencl_c_major * 10 + lim->opencl_c_minor < 12, ctx, MHLA_ERR_UNSUPPORTED,
                 "%s supports only '%s'; libmhla's kernels need OpenCL C 1.2 or later", ctx->device_name, cver);
    lim->has_fp16 = mhla__device_has_extension(dev, "cl_khr_fp16");
    cl_uint cu = 0;
    MHLA_CL_TRY(st, ctx, clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL),
                "clGetDeviceInfo(CL_DEVICE_MAX_COMPUTE_UNITS)");
    lim->compute_units = cu ? cu : 1;
    lim->float_width = mhla__device_float_width(dev);
    ctx->device_name[sizeof ctx->device_name - 1] = '\0';
    mhla__simd_of(ctx->device_name, lim->float_width, &lim->simd);
    ctx->vendor[sizeof ctx->vendor - 1] = '\0';
    ctx->driver_version[sizeof ctx->driver_version - 1] = '\0';
    ctx->platform_version[sizeof ctx->platform_version - 1] = '\0';
    lim->native_prefetch = (lim->type & CL_DEVICE_TYPE_CPU) && strstr(ctx->platform_version, "PoCL") != NULL;
    MHLA_FORWARD_IF_ERROR(st, apply_forced_limits(ctx));
cleanup:
    return st;
}

static void context_init_locks(mhla_context *ctx)
{
    mhla__mutex_init(&ctx->lock);
    mhla__mutex_init(&ctx->message_lock);
    mhla__mutex_init(&ctx->kprof_lock);
}

mhla_status mhla_context_create(const char *device_spec, mhla_context **out)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    mhla_device_ref ref;
    cl_int err = CL_SUCCESS;

    MHLA_FAIL_IF(st, !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_create: out is NULL");
    *out = NULL;
    MHLA_FORWARD_IF_ERROR(st, mhla__device_select(device_spec, &ref));
    ctx = mhla__calloc(1, sizeof *ctx);
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a context");
    context_init_locks(ctx);
    ctx->device = ref.device;
    ctx->platform = ref.platform;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ref.platform, 0};
    ctx->cl = clCreateContext(props, 1, &ref.device, NULL, NULL, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateContext");
    /* Profiling is on so that benchmarks read device time from events; its cost is a few
     * timestamps per command. */
    ctx->queue = clCreateCommandQueue(ctx->cl, ref.device, CL_QUEUE_PROFILING_ENABLE, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateCommandQueue");
    ctx->profiling = 1;
    ctx->stage_marks = 1;
    MHLA_FORWARD_IF_ERROR(st, mhla__context_read_device(ctx));
    *out = ctx;
    ctx = NULL;
cleanup:
    mhla_context_destroy(ctx); /* only on failure; the thread's message keeps the reason */
    return st;
}

mhla_status mhla_context_wrap(cl_context context, cl_command_queue queue, mhla_context **out)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = NULL;
    cl_context qctx = NULL;
    cl_command_queue_properties qprops = 0;

    MHLA_FAIL_IF(st, !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_wrap: out is NULL");
    *out = NULL;
    MHLA_FAIL_IF(st, !context, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_wrap: cl_context is NULL");
    MHLA_FAIL_IF(st, !queue, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_context_wrap: cl_command_queue is NULL");
    ctx = mhla__calloc(1, sizeof *ctx);
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a context");
    context_init_locks(ctx);
    MHLA_CL_TRY(st, ctx, clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL),
                "clGetCommandQueueInfo(CL_QUEUE_CONTEXT) on the wrapped queue");
    MHLA_FAIL_IF(st, qctx != context, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_context_wrap: the command queue belongs to another cl_context");
    MHLA_CL_TRY(st, ctx, clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof ctx->device, &ctx->device, NULL),
                "clGetCommandQueueInfo(CL_QUEUE_DEVICE)");
    MHLA_CL_TRY(st, ctx, clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL),
                "clGetCommandQueueInfo(CL_QUEUE_PROPERTIES)");
    ctx->out_of_order = (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) != 0;
    ctx->profiling = (qprops & CL_QUEUE_PROFILING_ENABLE) != 0;
    ctx->stage_marks = ctx->profiling;
    MHLA_CL_TRY(st, ctx, clRetainContext(context), "clRetainContext");
    ctx->cl = context;
    MHLA_CL_TRY(st, ctx, clRetainCommandQueue(queue), "clRetainCommandQueue");
    ctx->queue = queue;
    MHLA_FORWARD_IF_ERROR(st, mhla__context_read_device(ctx));
    *out = ctx;
    ctx = NULL;
cleanup:
    mhla_context_destroy(ctx);
    return st;
}

void mhla_context_destroy(mhla_context *ctx)
{
    if (!ctx)
        return;
    for (mhla_program_entry *e = ctx->programs, *next; e; e = next) {
        next = e->next;
        clReleaseProgram(e->program);
        mhla__free(e->key);
        mhla__free(e);
    }
    mhla__free(ctx->tuning);
    mhla__free(ctx->tuned_db);
    mhla__kprof_free(ctx);
    mhla__blas_release(ctx); /* while the queue and context are still alive */
    if (ctx->queue)
        clReleaseCommandQueue(ctx->queue);
    if (ctx->cl)
        clReleaseContext(ctx->cl);
    mhla__mutex_destroy(&ctx->lock);
    mhla__mutex_destroy(&ctx->message_lock);
    mhla__mutex_destroy(&ctx->kprof_lock);
    mhla__free(ctx);
}

cl_context mhla_context_cl_context(const mhla_context *ctx) { return ctx ? ctx->cl : NULL; }
cl_command_queue mhla_context_queue(const mhla_context *ctx) { return ctx ? ctx->queue : NULL; }
cl_device_id mhla_context_device(const mhla_context *ctx) { return ctx ? ctx->device : NULL; }
const char *mhla_context_device_name(const mhla_context *ctx) { return ctx ? ctx->device_name : ""; }
