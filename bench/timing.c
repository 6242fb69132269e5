/* Timing of mhla-bench: warm-up runs, an iteration count chosen from a target time, and device time
 * from OpenCL profiling events (host ops: wall time); plus the statistics and the host clock the
 * sweep uses. */
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

void bench_step_stats(double *step_ms, int runs, int steps, int marked, bench_timing *out)
{
    double *per_run = malloc((size_t)(runs > 0 ? runs : 1) * sizeof *per_run);
    out->step_mean = out->marked_ms = NAN;
    if (per_run && runs > 0 && steps > 0) {
        for (int i = 0; i < runs; ++i) {
            double sum = 0.0;
            for (int s = 0; s < steps; ++s)
                sum += step_ms[(size_t)i * (size_t)steps + (size_t)s];
            per_run[i] = sum / steps;
        }
        out->step_mean = bench_median(per_run, (size_t)runs);
        if (marked >= 0 && marked < steps) {
            for (int i = 0; i < runs; ++i)
                per_run[i] = step_ms[(size_t)i * (size_t)steps + (size_t)marked];
            out->marked_ms = bench_median(per_run, (size_t)runs);
        }
    }
    free(per_run);
    const size_t all = runs > 0 && steps > 0 ? (size_t)runs * (size_t)steps : 0;
    out->step_median = all ? bench_median(step_ms, all) : NAN; /* sorts */
    out->step_min = all ? step_ms[0] : NAN;
    out->step_max = all ? step_ms[all - 1] : NAN;
}

/* One run's device time in ms. The run is gated behind a user event so that it starts only once
 * all its commands are enqueued: the time from the gate's marker to the last command's end is the
 * device's, with no host enqueue cost (CLBlast's included) inside it. A run of steps also gets
 * each step's time in step_ms (the ends' ns go through ends_ns, job->steps of them). Where the
 * device's timestamps are unusable (all equal: rusticl 22.3 on llvmpipe) the run is timed with
 * the host clock from the gate's opening to the last command's completion (*host set), and each
 * of its steps gets the run's mean (no step stands out: the chunk start is not measured). */
static mhla_status timed_run(cl_command_queue queue, const bench_job *job, double *ms, double *step_ms,
                             cl_ulong *ends_ns, int *host, char *err, size_t err_size)
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
    const double opened = bench_now();
    clSetUserEventStatus(gate, st == MHLA_OK ? CL_COMPLETE : -1);
    if (st != MHLA_OK) { /* explained where the hook explains itself (the context message) */
        err[0] = '\0';
        clFinish(queue);
        goto cleanup;
    }
    e = clWaitForEvents(1, &done);
    const double wall_ms = (bench_now() - opened) * 1e3;
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
    *host = t1 <= t0;
    *ms = *host ? wall_ms : (double)(t1 - t0) * 1e-6;
    if (job->steps > 0 && step_ms && *host) {
        for (int i = 0; i < job->steps; ++i)
            step_ms[i] = *ms / job->steps;
    } else if (job->steps > 0 && step_ms) {
        if ((st = job->step_ends(job->arg, ends_ns)) != MHLA_OK) {
            err[0] = '\0';
            goto cleanup;
        }
        for (int i = 0; i < job->steps; ++i) {
            const cl_ulong from = i ? ends_ns[i - 1] : t0;
            step_ms[i] = ends_ns[i] > from ? (double)(ends_ns[i] - from) * 1e-6 : 0.0;
        }
    }
cleanup:
    if (gate)
        clReleaseEvent(gate);
    if (start)
        clReleaseEvent(start);
    if (done)
        clReleaseEvent(done);
    return st;
}

/* One run of a host job (an op that computes on the host: blas, sgemm): the wall time of its
 * enqueue hook, which returns with the run done. No OpenCL event is involved: the device's clock
 * has nothing to say about host work. A run of steps gets the run's mean for each step. */
static mhla_status host_run(const bench_job *job, double *ms, double *step_ms, char *err)
{
    cl_event done = NULL;
    const double t0 = bench_now();
    const mhla_status st = job->enqueue(job->arg, &done);
    *ms = (bench_now() - t0) * 1e3;
    err[0] = '\0'; /* a failing hook explains itself */
    if (done) /* a host op leaves it NULL; tolerated */
        clReleaseEvent(done);
    for (int i = 0; job->steps > 0 && step_ms && i < job->steps; ++i)
        step_ms[i] = *ms / job->steps;
    return st;
}

static mhla_status one_run(cl_command_queue queue, const bench_job *job, double *ms, double *step_ms,
                           cl_ulong *ends_ns, int *host, char *err, size_t err_size)
{
    if (job->host) {
        *host = 0;
        return host_run(job, ms, step_ms, err);
    }
    return timed_run(queue, job, ms, step_ms, ends_ns, host, err, err_size);
}

/* The job's prepare hook, if any; *wall_ms gets its host time. */
static mhla_status prepare(const bench_job *job, double *wall_ms)
{
    const double t = bench_now();
    const mhla_status st = job->prepare ? job->prepare(job->arg) : MHLA_OK;
    *wall_ms = (bench_now() - t) * 1e3;
    return st;
}

mhla_status bench_time(cl_command_queue queue, const bench_job *job, int warmup, double target_ms, int min_iters,
                       int max_iters, bench_timing *out, char *err, size_t err_size)
{
    mhla_status st = MHLA_OK;
    double *ms = NULL, *stage[3] = {NULL, NULL, NULL}, *step_ms = NULL, one = 0.0, prep = 0.0;
    int host = 0;
    out->host_clock = 0;
    const size_t steps = job->steps > 0 ? (size_t)job->steps : 0;
    cl_ulong *ends = calloc(steps ? steps : 1, sizeof *ends);
    if (!ends) {
        snprintf(err, err_size, "out of host memory");
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    /* The first run also builds what is built lazily (CLBlast compiles its GEMM then). */
    for (int i = 0; i < warmup; ++i) {
        err[0] = '\0';
        if ((st = prepare(job, &prep)) != MHLA_OK ||
            (st = one_run(queue, job, &one, NULL, ends, &host, err, err_size)) != MHLA_OK)
            goto cleanup;
    }
    /* Runs that fill target_ms, the untimed preparation included (it takes the row's time too). */
    int iters = min_iters;
    const double per_run = one + prep;
    if (one > 0.0 && target_ms / per_run > (double)iters)
        iters = target_ms / per_run > (double)max_iters ? max_iters : (int)(target_ms / per_run + 0.5);
    if (iters < 1)
        iters = 1;
    ms = malloc((size_t)iters * sizeof *ms);
    for (int s = 0; s < 3 && job->stages; ++s)
        stage[s] = malloc((size_t)iters * sizeof *stage[s]);
    if (steps)
        step_ms = malloc((size_t)iters * steps * sizeof *step_ms);
    if (!ms || (job->stages && (!stage[0] || !stage[1] || !stage[2])) || (steps && !step_ms)) {
        snprintf(err, err_size, "out of host memory");
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    for (int i = 0; i < iters; ++i) {
        double s3[3];
        err[0] = '\0';
        if ((st = prepare(job, &prep)) != MHLA_OK ||
            (st = one_run(queue, job, &ms[i], steps ? step_ms + (size_t)i * steps : NULL, ends, &host, err,
                          err_size)) != MHLA_OK)
            goto cleanup;
        if (host)
            out->host_clock = BENCH_CLOCK_FALLBACK;
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
    bench_step_stats(step_ms, steps ? iters : 0, job->steps, job->marked_step, out);
    if (job->host)
        out->host_clock = BENCH_CLOCK_HOST_OP;
    if (out->host_clock)
        out->marked_ms = NAN; /* host-clock runs are not split into steps */
cleanup:
    free(ends);
    free(step_ms);
    free(ms);
    for (int s = 0; s < 3; ++s)
        free(stage[s]);
    return st;
}
