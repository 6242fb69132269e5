/* What mhla-bench records about the device it ran on: names and versions for the reports, and the
 * sizes that decide which rows fit. */
#include "bench.h"

#include <string.h>

static void device_string(cl_device_id dev, cl_device_info what, char *buf, size_t size)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(dev, what, size, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[size - 1] = '\0';
}

mhla_status bench_device_read(mhla_context *ctx, bench_device *out)
{
    cl_device_id dev = mhla_context_device(ctx);
    cl_platform_id platform = NULL;
    cl_uint u = 0;
    cl_ulong ul = 0;
    memset(out, 0, sizeof *out);
    if (!dev || clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL) != CL_SUCCESS)
        return MHLA_ERR_OPENCL;
    device_string(dev, CL_DEVICE_NAME, out->name, sizeof out->name);
    device_string(dev, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor);
    device_string(dev, CL_DRIVER_VERSION, out->driver, sizeof out->driver);
    device_string(dev, CL_DEVICE_VERSION, out->device_version, sizeof out->device_version);
    device_string(dev, CL_DEVICE_OPENCL_C_VERSION, out->opencl_c, sizeof out->opencl_c);
    if (clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof out->platform_name, out->platform_name, NULL) !=
        CL_SUCCESS)
        out->platform_name[0] = '\0';
    if (clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof out->platform_version, out->platform_version,
                          NULL) != CL_SUCCESS)
        out->platform_version[0] = '\0';
    out->platform_name[sizeof out->platform_name - 1] = '\0';
    out->platform_version[sizeof out->platform_version - 1] = '\0';
    if (clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof u, &u, NULL) == CL_SUCCESS)
        out->compute_units = u;
    if (clGetDeviceInfo(dev, CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof u, &u, NULL) == CL_SUCCESS)
        out->clock_mhz = u;
    if (clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
        out->global_mem = ul;
    if (clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
        out->max_alloc = ul;
    if (clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ul, &ul, NULL) == CL_SUCCESS)
        out->local_mem = ul;
    cl_uint native = 0, preferred = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof native, &native, NULL) != CL_SUCCESS)
        native = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof preferred, &preferred, NULL) != CL_SUCCESS)
        preferred = 0;
    out->float_width = (int)(native > preferred ? native : preferred);
    if (out->float_width < 1)
        out->float_width = 1;
    return MHLA_OK;
}
