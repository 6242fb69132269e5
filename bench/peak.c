/* Device peak probe of mhla-bench (after clpeak): the achievable f32 multiply-add throughput, the
 * best of float4/float8/float16 chains of mad() and, where the device reports fused multiply-add,
 * of fma() (kernels/peak.cl says why both), and the copy bandwidth of a float4
 * stream, each the median over several runs timed by profiling events. */
#include "bench.h"

#include <stdio.h>

extern const char mhla_cl_peak[]; /* kernels/peak.cl, embedded by scripts/cl2c.py */

#define PEAK_CHAINS 8     /* kernels/peak.cl: chains per work-item */
#define PEAK_UNROLL 4     /* kernels/peak.cl: steps per loop iteration */
#define COPY_MAX (128u << 20) /* bytes per copy buffer: far past CPU last-level caches and GPU L2 */

typedef struct peak_launch {
    const char *name;
    cl_command_queue queue;
    cl_kernel kernel;
    size_t global, local;
    cl_int err;
} peak_launch;

static mhla_status enqueue_launch(void *arg, cl_event *done)
{
    peak_launch *l = arg;
    l->err = clEnqueueNDRangeKernel(l->queue, l->kernel, 1, NULL, &l->global, &l->local, 0, NULL, done);
    return l->err == CL_SUCCESS ? MHLA_OK : MHLA_ERR_OPENCL;
}

/* bench_time on a peak kernel, naming the kernel when its launch fails. */
static mhla_status time_launch(peak_launch *l, int runs, bench_timing *t, char *err, size_t err_size)
{
    const bench_job job = {NULL, enqueue_launch, NULL, NULL, 0, -1, 0, l};
    mhla_status st = bench_time(l->queue, &job, 1, 0.0, runs, runs, t, err, err_size);
    if (st != MHLA_OK && !err[0])
        snprintf(err, err_size, "clEnqueueNDRangeKernel(%s, %zu work-items) failed: %d", l->name, l->global,
                 (int)l->err);
    return st;
}

static size_t local_size(cl_kernel kernel, cl_device_id dev, size_t want)
{
    size_t kwg = 0;
    if (clGetKernelWorkGroupInfo(kernel, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL) != CL_SUCCESS ||
        kwg == 0)
        kwg = 1;
    return want < kwg ? want : kwg;
}

/* One FMA variant: reps calibrated so that a run takes about target_ms / runs. */
static mhla_status probe_fma(mhla_context *ctx, cl_program prog, int width, int fused, const bench_device *dev,
                             double target_ms, int runs, bench_timing *t, double *flops, char *err, size_t err_size)
{
    mhla_status st = MHLA_OK;
    cl_int e = CL_SUCCESS;
    cl_mem out = NULL;
    char name[32];
    snprintf(name, sizeof name, "peak_%s%d", fused ? "fma" : "mad", width);
    peak_launch l = {name, mhla_context_queue(ctx), clCreateKernel(prog, name, &e), 0, 0, CL_SUCCESS};
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "clCreateKernel(%s): %d", name, (int)e);
        return MHLA_ERR_OPENCL;
    }
    l.local = local_size(l.kernel, mhla_context_device(ctx), 64);
    /* About a thousand work-items per compute unit fill a GPU; a CPU needs far fewer. */
    l.global = ((size_t)(dev->compute_units ? dev->compute_units : 1) * 1024 + l.local - 1) / l.local * l.local;
    out = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_WRITE_ONLY, l.global * (size_t)width * sizeof(float),
                         NULL, &e);
    const float y = 0.999f, z = 1e-3f;
    cl_int reps = 16;
    if (e == CL_SUCCESS)
        e = clSetKernelArg(l.kernel, 0, sizeof out, &out);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(l.kernel, 1, sizeof y, &y);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(l.kernel, 2, sizeof z, &z);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(l.kernel, 3, sizeof reps, &reps);
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "setting up %s: OpenCL error %d", name, (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    /* Calibrate: one short run, then scale reps to the per-run target. */
    bench_timing cal;
    if ((st = time_launch(&l, 1, &cal, err, err_size)) != MHLA_OK)
        goto cleanup;
    const double per_run = target_ms / runs, scale = cal.ms_median > 0 ? per_run / cal.ms_median : 64.0;
    const double want = reps * (scale < 1.0 ? 1.0 : scale > 1e5 ? 1e5 : scale);
    reps = (cl_int)want;
    if ((e = clSetKernelArg(l.kernel, 3, sizeof reps, &reps)) != CL_SUCCESS) {
        snprintf(err, err_size, "setting up %s: OpenCL error %d", name, (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    st = time_launch(&l, runs, t, err, err_size);
    *flops = 2.0 * (double)width * PEAK_CHAINS * PEAK_UNROLL * (double)reps * (double)l.global;
cleanup:
    if (out)
        clReleaseMemObject(out);
    clReleaseKernel(l.kernel);
    return st;
}

static mhla_status probe_copy(mhla_context *ctx, cl_program prog, const bench_device *dev, int runs,
                              bench_timing *t, double *bytes, char *err, size_t err_size)
{
    mhla_status st = MHLA_OK;
    cl_int e = CL_SUCCESS;
    cl_mem in = NULL, out = NULL;
    peak_launch l = {"peak_copy", mhla_context_queue(ctx), clCreateKernel(prog, "peak_copy", &e), 0, 0, CL_SUCCESS};
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "clCreateKernel(peak_copy): %d", (int)e);
        return MHLA_ERR_OPENCL;
    }
    l.local = local_size(l.kernel, mhla_context_device(ctx), 64);
    uint64_t size = COPY_MAX;
    if (dev->max_alloc && size > dev->max_alloc)
        size = dev->max_alloc;
    if (dev->global_mem && size > dev->global_mem / 4)
        size = dev->global_mem / 4;
    l.global = (size_t)size / 16 / l.local * l.local;
    *bytes = (double)l.global * 16.0;
    in = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, (size_t)*bytes, NULL, &e);
    if (e == CL_SUCCESS)
        out = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, (size_t)*bytes, NULL, &e);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(l.kernel, 0, sizeof in, &in);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(l.kernel, 1, sizeof out, &out);
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "setting up peak_copy (%.0f MiB buffers): OpenCL error %d", *bytes / 1048576.0, (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    /* The warm-up run also makes the buffers resident (first touch on a CPU device). */
    st = time_launch(&l, runs, t, err, err_size);
cleanup:
    if (in)
        clReleaseMemObject(in);
    if (out)
        clReleaseMemObject(out);
    clReleaseKernel(l.kernel);
    return st;
}

mhla_status bench_peak_measure(mhla_context *ctx, const bench_device *dev, double target_ms, int runs,
                               bench_peak *out, char *err, size_t err_size)
{
    mhla_status st = MHLA_OK;
    cl_int e = CL_SUCCESS;
    const char *src = mhla_cl_peak;
    cl_device_id device = mhla_context_device(ctx);
    cl_program prog = clCreateProgramWithSource(mhla_context_cl_context(ctx), 1, &src, NULL, &e);
    /* Chains no wider than the device's registers (float4 at least): wider ones only split, and
     * without AVX-512 a float16 argument to mad() makes the compiler warn about the ABI. */
    const int widest = dev->float_width > 4 ? dev->float_width : 4;
    cl_device_fp_config fp = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) != CL_SUCCESS)
        fp = 0;
    const int has_fma = (fp & CL_FP_FMA) != 0;
    char options[64];
    snprintf(options, sizeof options, "-cl-std=CL1.2 -DPEAK_WIDTH=%d -DPEAK_FUSED=%d", widest, has_fma);
    if (e == CL_SUCCESS)
        e = clBuildProgram(prog, 1, &device, options, NULL, NULL);
    if (e != CL_SUCCESS) {
        char log[2048] = "";
        if (prog)
            clGetProgramBuildInfo(prog, device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        snprintf(err, err_size, "building kernels/peak.cl failed (OpenCL error %d): %s", (int)e, log);
        st = MHLA_ERR_BUILD_FAILED;
        goto cleanup;
    }
    out->runs = runs;
    out->gflops = 0.0;
    out->host_clock = 0;
    const int widths[] = {4, 8, 16};
    for (int fused = 0; fused <= has_fma; ++fused)
        for (size_t i = 0; i < sizeof widths / sizeof widths[0] && widths[i] <= widest; ++i) {
            bench_timing t;
            double flops = 0.0;
            st = probe_fma(ctx, prog, widths[i], fused, dev, target_ms, runs, &t, &flops, err, err_size);
            if (st != MHLA_OK)
                goto cleanup;
            out->host_clock |= t.host_clock;
            const double g = flops / t.ms_median * 1e-6;
            if (g > out->gflops) {
                out->gflops = g;
                out->gflops_min = flops / t.ms_max * 1e-6;
                out->gflops_max = flops / t.ms_min * 1e-6;
                out->vector_width = widths[i];
                out->fused = fused;
            }
        }
    bench_timing t;
    double bytes = 0.0;
    if ((st = probe_copy(ctx, prog, dev, runs, &t, &bytes, err, err_size)) != MHLA_OK)
        goto cleanup;
    out->host_clock |= t.host_clock;
    out->copy_bytes = bytes;
    out->gbps = 2.0 * bytes / t.ms_median * 1e-6; /* read + written */
    out->gbps_min = 2.0 * bytes / t.ms_max * 1e-6;
    out->gbps_max = 2.0 * bytes / t.ms_min * 1e-6;
cleanup:
    if (prog)
        clReleaseProgram(prog);
    return st;
}
