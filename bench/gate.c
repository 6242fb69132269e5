/* The gate of mhla-bench's device-timed runs (bench/timing.c): by default a user event on CPUs and
 * a calibrated single work-item kernel on GPUs. A run behind an unset user event is held by the
 * runtime on the host; on the NVIDIA H100 (2026-11-27) the N = 1024 forward's three stages took
 * 0.056 ms of its 0.115, the rest lying between the gate's marker and the forward's first, time
 * every row counted. Behind a kernel of about a millisecond the run's commands wait on the device,
 * as an application's do behind its own work. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

extern const char mhla_cl_peak[]; /* kernels/peak.cl, embedded by scripts/cl2c.py */

#define GATE_US 1000.0   /* the spin's device time: longer than a run's host enqueue (one row's commands) */
#define GATE_PROBE 16384 /* steps of the calibration runs */

static cl_program gate_prog;
static cl_kernel gate_kernel;
static cl_mem gate_buf;

void bench_gate_release(void)
{
    bench_time_set_gate(NULL, 0);
    if (gate_kernel)
        clReleaseKernel(gate_kernel);
    if (gate_buf)
        clReleaseMemObject(gate_buf);
    if (gate_prog)
        clReleaseProgram(gate_prog);
    gate_kernel = NULL, gate_buf = NULL, gate_prog = NULL;
}

/* One spin of `reps` steps, its device time in ns (0 where the timestamps say nothing). */
static cl_int spin_ns(cl_command_queue queue, int reps, double *ns)
{
    const size_t one = 1;
    cl_event ev = NULL;
    cl_ulong a = 0, b = 0;
    cl_int e = clSetKernelArg(gate_kernel, 2, sizeof reps, &reps);
    if (e == CL_SUCCESS)
        e = clEnqueueNDRangeKernel(queue, gate_kernel, 1, NULL, &one, &one, 0, NULL, &ev);
    if (e == CL_SUCCESS)
        e = clWaitForEvents(1, &ev);
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a, &a, NULL);
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
    if (ev)
        clReleaseEvent(ev);
    *ns = b > a ? (double)(b - a) : 0.0;
    return e;
}

mhla_status bench_gate_setup(mhla_context *ctx, bench_options *o, char *err, size_t err_size)
{
    cl_device_id device = mhla_context_device(ctx);
    cl_device_type type = 0;
    o->gate_us = 0.0;
    if (o->gate == BENCH_GATE_AUTO)
        o->gate = clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL) == CL_SUCCESS &&
                          (type & CL_DEVICE_TYPE_GPU)
                      ? BENCH_GATE_KERNEL
                      : BENCH_GATE_EVENT;
    if (o->gate == BENCH_GATE_EVENT)
        return MHLA_OK;
    cl_int e = CL_SUCCESS;
    const char *src = mhla_cl_peak;
    const float y = 0.999f; /* a chain that stays bounded (kernels/peak.cl) */
    gate_prog = clCreateProgramWithSource(mhla_context_cl_context(ctx), 1, &src, NULL, &e);
    if (e == CL_SUCCESS)
        e = clBuildProgram(gate_prog, 1, &device, "-cl-std=CL1.2 -DPEAK_WIDTH=4 -DPEAK_FUSED=0", NULL, NULL);
    if (e == CL_SUCCESS)
        gate_kernel = clCreateKernel(gate_prog, "bench_spin", &e);
    if (e == CL_SUCCESS)
        gate_buf = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, sizeof(float), NULL, &e);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(gate_kernel, 0, sizeof gate_buf, &gate_buf);
    if (e == CL_SUCCESS)
        e = clSetKernelArg(gate_kernel, 1, sizeof y, &y);
    double ns = 0.0, best = 0.0;
    for (int i = 0; i < 3 && e == CL_SUCCESS; ++i) /* the first one also loads the kernel */
        if ((e = spin_ns(mhla_context_queue(ctx), GATE_PROBE, &ns)) == CL_SUCCESS && ns > 0.0 && (best == 0.0 || ns < best))
            best = ns;
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "the kernel gate (kernels/peak.cl's bench_spin) failed: OpenCL error %d", (int)e);
        bench_gate_release();
        return MHLA_ERR_OPENCL;
    }
    if (best == 0.0) { /* no usable timestamps: the runs are host-timed, the event gate does */
        bench_gate_release();
        o->gate = BENCH_GATE_EVENT;
        return MHLA_OK;
    }
    double reps = GATE_PROBE * GATE_US * 1e3 / best;
    reps = reps < 1024.0 ? 1024.0 : reps > (double)(1 << 28) ? (double)(1 << 28) : reps;
    o->gate_us = best * reps / GATE_PROBE * 1e-3;
    bench_time_set_gate(gate_kernel, (int)reps);
    return MHLA_OK;
}
