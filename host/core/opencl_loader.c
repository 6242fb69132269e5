/* OpenCL opened at run time (-Dopencl_loader=dlopen): libmhla links no OpenCL library. Android has
 * no ICD loader and apps find the vendor's libOpenCL.so when they start, so this file defines the
 * OpenCL functions the library calls, hidden inside it like every mhla__ internal, each forwarding
 * to the function of the same name in the first library that opens and has all of them:
 * MHLA_OPENCL_LIBRARY alone where it is set, else the ICD loader's names and the paths where
 * Adreno, Mali and PowerVR drivers put theirs. Until one opens, every function returns
 * CL_PLATFORM_NOT_FOUND_KHR, so device enumeration finds no platform and says which libraries were
 * tried (mhla__opencl_loaded()). Objects an application made with its own OpenCL library work here
 * too: each carries its driver's dispatch table. */
#include "core/core.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL_NOT_LOADED (-1001) /* CL_PLATFORM_NOT_FOUND_KHR: what an ICD loader returns with no driver */

/* Every OpenCL function the library calls (`nm -D --undefined-only` of the ICD build lists the
 * same): X(return type, name, parameters, arguments) for those returning a status, O(...) for
 * those returning an object and reporting through errcode_ret. */
#define MHLA_CL_FUNCTIONS(X, O)                                                                     \
    X(cl_int, clGetPlatformIDs, (cl_uint n, cl_platform_id *p, cl_uint *np), (n, p, np))            \
    X(cl_int, clGetPlatformInfo, (cl_platform_id p, cl_platform_info i, size_t s, void *v, size_t *r), \
      (p, i, s, v, r))                                                                              \
    X(cl_int, clGetDeviceIDs, (cl_platform_id p, cl_device_type t, cl_uint n, cl_device_id *d, cl_uint *nd), \
      (p, t, n, d, nd))                                                                             \
    X(cl_int, clGetDeviceInfo, (cl_device_id d, cl_device_info i, size_t s, void *v, size_t *r), (d, i, s, v, r)) \
    O(cl_context, clCreateContext,                                                                  \
      (const cl_context_properties *p, cl_uint n, const cl_device_id *d,                            \
       void(CL_CALLBACK * f)(const char *, const void *, size_t, void *), void *u, cl_int *e),      \
      (p, n, d, f, u, e))                                                                           \
    X(cl_int, clRetainContext, (cl_context c), (c))                                                 \
    X(cl_int, clReleaseContext, (cl_context c), (c))                                                \
    O(cl_command_queue, clCreateCommandQueue,                                                       \
      (cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *e), (c, d, p, e))       \
    X(cl_int, clRetainCommandQueue, (cl_command_queue q), (q))                                      \
    X(cl_int, clReleaseCommandQueue, (cl_command_queue q), (q))                                     \
    X(cl_int, clGetCommandQueueInfo, (cl_command_queue q, cl_command_queue_info i, size_t s, void *v, size_t *r), \
      (q, i, s, v, r))                                                                              \
    O(cl_mem, clCreateBuffer, (cl_context c, cl_mem_flags f, size_t s, void *h, cl_int *e), (c, f, s, h, e)) \
    X(cl_int, clReleaseMemObject, (cl_mem m), (m))                                                  \
    X(cl_int, clGetMemObjectInfo, (cl_mem m, cl_mem_info i, size_t s, void *v, size_t *r), (m, i, s, v, r)) \
    O(cl_program, clCreateProgramWithSource,                                                        \
      (cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *e), (c, n, s, l, e))       \
    O(cl_program, clCreateProgramWithBinary,                                                        \
      (cl_context c, cl_uint n, const cl_device_id *d, const size_t *l, const unsigned char **b, cl_int *bs, \
       cl_int *e),                                                                                  \
      (c, n, d, l, b, bs, e))                                                                       \
    X(cl_int, clBuildProgram,                                                                       \
      (cl_program p, cl_uint n, const cl_device_id *d, const char *o,                               \
       void(CL_CALLBACK * f)(cl_program, void *), void *u),                                         \
      (p, n, d, o, f, u))                                                                           \
    X(cl_int, clGetProgramInfo, (cl_program p, cl_program_info i, size_t s, void *v, size_t *r), (p, i, s, v, r)) \
    X(cl_int, clGetProgramBuildInfo,                                                                \
      (cl_program p, cl_device_id d, cl_program_build_info i, size_t s, void *v, size_t *r), (p, d, i, s, v, r)) \
    X(cl_int, clReleaseProgram, (cl_program p), (p))                                                \
    O(cl_kernel, clCreateKernel, (cl_program p, const char *n, cl_int *e), (p, n, e))               \
    X(cl_int, clSetKernelArg, (cl_kernel k, cl_uint i, size_t s, const void *v), (k, i, s, v))      \
    X(cl_int, clGetKernelWorkGroupInfo,                                                             \
      (cl_kernel k, cl_device_id d, cl_kernel_work_group_info i, size_t s, void *v, size_t *r), (k, d, i, s, v, r)) \
    X(cl_int, clReleaseKernel, (cl_kernel k), (k))                                                  \
    X(cl_int, clEnqueueNDRangeKernel,                                                               \
      (cl_command_queue q, cl_kernel k, cl_uint w, const size_t *o, const size_t *g, const size_t *l, cl_uint n, \
       const cl_event *wl, cl_event *ev),                                                           \
      (q, k, w, o, g, l, n, wl, ev))                                                                \
    X(cl_int, clEnqueueReadBuffer,                                                                  \
      (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t s, void *p, cl_uint n, const cl_event *wl, \
       cl_event *ev),                                                                               \
      (q, m, b, o, s, p, n, wl, ev))                                                                \
    X(cl_int, clEnqueueWriteBuffer,                                                                 \
      (cl_command_queue q, cl_mem m, cl_bool b, size_t o, size_t s, const void *p, cl_uint n, const cl_event *wl, \
       cl_event *ev),                                                                               \
      (q, m, b, o, s, p, n, wl, ev))                                                                \
    X(cl_int, clEnqueueReadBufferRect,                                                              \
      (cl_command_queue q, cl_mem m, cl_bool b, const size_t *bo, const size_t *ho, const size_t *r, size_t brp, \
       size_t bsp, size_t hrp, size_t hsp, void *p, cl_uint n, const cl_event *wl, cl_event *ev),   \
      (q, m, b, bo, ho, r, brp, bsp, hrp, hsp, p, n, wl, ev))                                       \
    X(cl_int, clEnqueueWriteBufferRect,                                                             \
      (cl_command_queue q, cl_mem m, cl_bool b, const size_t *bo, const size_t *ho, const size_t *r, size_t brp, \
       size_t bsp, size_t hrp, size_t hsp, const void *p, cl_uint n, const cl_event *wl, cl_event *ev), \
      (q, m, b, bo, ho, r, brp, bsp, hrp, hsp, p, n, wl, ev))                                       \
    X(cl_int, clEnqueueCopyBuffer,                                                                  \
      (cl_command_queue q, cl_mem a, cl_mem b, size_t ao, size_t bo, size_t s, cl_uint n, const cl_event *wl, \
       cl_event *ev),                                                                               \
      (q, a, b, ao, bo, s, n, wl, ev))                                                              \
    X(cl_int, clEnqueueFillBuffer,                                                                  \
      (cl_command_queue q, cl_mem m, const void *p, size_t ps, size_t o, size_t s, cl_uint n, const cl_event *wl, \
       cl_event *ev),                                                                               \
      (q, m, p, ps, o, s, n, wl, ev))                                                               \
    X(cl_int, clEnqueueMarkerWithWaitList, (cl_command_queue q, cl_uint n, const cl_event *wl, cl_event *ev), \
      (q, n, wl, ev))                                                                               \
    X(cl_int, clEnqueueBarrierWithWaitList, (cl_command_queue q, cl_uint n, const cl_event *wl, cl_event *ev), \
      (q, n, wl, ev))                                                                               \
    X(cl_int, clWaitForEvents, (cl_uint n, const cl_event *wl), (n, wl))                            \
    X(cl_int, clGetEventProfilingInfo, (cl_event e, cl_profiling_info i, size_t s, void *v, size_t *r), \
      (e, i, s, v, r))                                                                              \
    X(cl_int, clRetainEvent, (cl_event e), (e))                                                     \
    X(cl_int, clReleaseEvent, (cl_event e), (e))                                                    \
    X(cl_int, clFinish, (cl_command_queue q), (q))

#define MHLA_CL_POINTER_(ret, name, params, args) static ret(CL_API_CALL *p_##name) params;
MHLA_CL_FUNCTIONS(MHLA_CL_POINTER_, MHLA_CL_POINTER_)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int loaded;
static char load_message[2048];
static size_t prefix_len; /* "MHLA_OPENCL_LIBRARY: " before the libraries tried, where it is set */

/* The libraries tried in order where MHLA_OPENCL_LIBRARY is not set: the ICD loader by its
 * names (the dynamic linker's search: LD_LIBRARY_PATH, the system folders), then the vendor
 * drivers Android phones carry. */
#if UINTPTR_MAX > 0xffffffffu
#define LIB_ "lib64"
#else
#define LIB_ "lib"
#endif
static const char *const candidates[] = {
    "libOpenCL.so.1",
    "libOpenCL.so",
    "/vendor/" LIB_ "/libOpenCL.so",                  /* Qualcomm Adreno, most Android vendors */
    "/system/vendor/" LIB_ "/libOpenCL.so",           /* older Android layouts */
    "/system/" LIB_ "/libOpenCL.so",
    "/vendor/" LIB_ "/egl/libGLES_mali.so",           /* Arm Mali: OpenCL inside the GLES driver */
    "/system/vendor/" LIB_ "/egl/libGLES_mali.so",
    "/vendor/" LIB_ "/libPVROCL.so",                  /* Imagination PowerVR */
    "/system/vendor/" LIB_ "/libPVROCL.so",
    "/vendor/" LIB_ "/libOpenCL_adreno.so",           /* Adreno's driver behind a vendor wrapper */
};

/* Appends "name (why)" to the message of what was tried. */
static void note_tried(const char *name, const char *why)
{
    const size_t used = strlen(load_message);
    if (used + 1 < sizeof load_message)
        snprintf(load_message + used, sizeof load_message - used, "%s%s (%s)", used > prefix_len ? "; " : "", name,
                 why);
}

/* Opens `name` and resolves every function; keeps it and returns 1 when all are there. */
static int try_library(const char *name)
{
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *err = dlerror();
        /* dlerror() repeats the name first; the reason after it is what is worth keeping. */
        const char *why = err && strstr(err, ": ") ? strstr(err, ": ") + 2 : err ? err : "not found";
        note_tried(name, why);
        return 0;
    }
    const char *missing = NULL;
#define MHLA_CL_RESOLVE_(ret, name_, params, args)                                                  \
    if (!missing) {                                                                                 \
        *(void **)&p_##name_ = dlsym(lib, #name_);                                                  \
        if (!p_##name_)                                                                             \
            missing = #name_;                                                                       \
    }
    MHLA_CL_FUNCTIONS(MHLA_CL_RESOLVE_, MHLA_CL_RESOLVE_)
#undef MHLA_CL_RESOLVE_
    if (missing) {
        char why[160];
        snprintf(why, sizeof why, "opened, but it has no %s: an OpenCL 1.2 library is needed", missing);
        note_tried(name, why);
        dlclose(lib);
        return 0;
    }
    /* Kept open for the life of the process: drivers do not unload cleanly, and contexts made
     * through it may outlive any one caller. */
    snprintf(load_message, sizeof load_message, "OpenCL from %s", name);
    return 1;
}

static void load(void)
{
    const char *forced = getenv("MHLA_OPENCL_LIBRARY");
    if (forced && *forced) {
        prefix_len = (size_t)snprintf(load_message, sizeof load_message, "MHLA_OPENCL_LIBRARY: ");
        loaded = try_library(forced);
        return;
    }
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && !loaded; ++i)
        loaded = try_library(candidates[i]);
}

int mhla__opencl_loaded(const char **message)
{
    pthread_once(&load_once, load);
    if (message)
        *message = load_message;
    return loaded;
}

#define MHLA_CL_FORWARD_(ret, name, params, args)                                                   \
    ret CL_API_CALL name params                                                                     \
    {                                                                                               \
        if (!mhla__opencl_loaded(NULL))                                                             \
            return CL_NOT_LOADED;                                                                   \
        return p_##name args;                                                                       \
    }
/* Object constructors report through their last parameter, always named e above. */
#define MHLA_CL_FORWARD_OBJECT_(ret, name, params, args)                                            \
    ret CL_API_CALL name params                                                                     \
    {                                                                                               \
        if (!mhla__opencl_loaded(NULL)) {                                                           \
            if (e)                                                                                  \
                *e = CL_NOT_LOADED;                                                                 \
            return NULL;                                                                            \
        }                                                                                           \
        return p_##name args;                                                                       \
    }
MHLA_CL_FUNCTIONS(MHLA_CL_FORWARD_, MHLA_CL_FORWARD_OBJECT_)
