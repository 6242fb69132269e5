/* Timing of mhla-bench: warm-up runs, an iteration count chosen from a target time, and device time
 * from OpenCL profiling events; plus the statistics and the host clock the sweep uses. */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One run's device time in ms. The run is gated behind a user event so that it starts only once
 * all its commands are enqueued: the time from the gate's marker to the last command's end is the
 * device's, with no host enqueue cost (CLBlast's included) inside it. */
static mhla_status timed_run(cl_command_queue queue, const bench_job *job, double *ms, char *err, size_t err_size)
{
    mhla_status st = MHLA_OK;
    cl_context clctx = NULL;
    cl_event gate = NULL, start = NULL, done = NULL;
    cl_ulong t0 = 0, t1 = 0;
    cl_int e = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof clctx, &clctx, NULL);
    if (e == CL_SUCCESS)
        gate = clCreateUserEvent(clctx, &e);
    if (e == CL_SUCCESS)
        e = clEnqueueMarkerWithWaitList(queue, 1, &gate, &start);
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "could not enqueue the timing marker (OpenCL error %d)", (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    st = job->enqueue(job->arg, &done);
    clSetUserEventStatus(gate, st == MHLA_OK ? CL_COMPLETE : -1);
    if (st != MHLA_OK) { /* explained where the hook explains itself (the context message) */
        err[0] = '\0';
        clFinish(queue);
        goto cleanup;
    }
    e = clWaitForEvents(1, &done);
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "no profiling information (OpenCL error %d): the queue needs "
                                "CL_QUEUE_PROFILING_ENABLE", (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    *ms = t1 > t0 ? (double)(t1 - t0) * 1e-6 : 0.0;
cleanup:
    if (gate)
        clReleaseEvent(gate);
    if (start)
        clReleaseEvent(start);
    if (done)
        clReleaseEvent(done);
    return st;
}

mhla_status bench_time(cl_command_queue queue, const bench_job *job, int warmup, double target_ms, int min_iters,
                       int max_iters, bench_timing *out, char *err, size_t err_size)
{
    mhla_status st = MHLA_OK;
    double *ms = NULL, *stage[3] = {NULL, NULL, NULL}, one = 0.0;
    /* The first run also builds what is built lazily (CLBlast compiles its GEMM then). */
    for (int i = 0; i < warmup; ++i)
        if ((st = timed_run(queue, job, &one, err, err_size)) != MHLA_OK)
            return st;
    int iters = min_iters;
    if (one > 0.0 && target_ms / one > (double)iters)
        iters = target_ms / one > (double)max_iters ? max_iters : (int)(target_ms / one + 0.5);
    if (iters < 1)
        iters = 1;
    ms = malloc((size_t)iters * sizeof *ms);
    for (int s = 0; s < 3 && job->stages; ++s)
        stage[s] = malloc((size_t)iters * sizeof *stage[s]);
    if (!ms || (job->stages && (!stage[0] || !stage[1] || !stage[2]))) {
        snprintf(err, err_size, "out of host memory");
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    for (int i = 0; i < iters; ++i) {
        double s3[3];
        if ((st = timed_run(queue, job, &ms[i], err, err_size)) != MHLA_OK)
            goto cleanup;
        if (job->stages && (st = job->stages(job->arg, s3)) != MHLA_OK)
            goto cleanup;
        for (int s = 0; s < 3 && job->stages; ++s)
            stage[s][i] = s3[s];
    }
    out->iters = iters;
    out->ms_median = bench_median(ms, (size_t)iters); /* sorts */
    out->ms_min = ms[0];
    out->ms_max = ms[iters - 1];
    for (int s = 0; s < 3; ++s)
        out->stage_ms[s] = job->stages ? bench_median(stage[s], (size_t)iters) : NAN;
cleanup:
    free(ms);
    for (int s = 0; s < 3; ++s)
        free(stage[s]);
    return st;
}
