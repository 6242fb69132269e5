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

/* The kernel gate (bench/gate.c), or none: the user event. Its length doubles whenever a run's
 * commands took the host longer to enqueue than most of it: the device must not wait for them. */
static cl_kernel gate_spin;
static int gate_reps, gate_reps_max;

void bench_time_set_gate(cl_kernel spin, int reps)
{
    gate_spin = spin;
    gate_reps = reps;
    gate_reps_max = reps < (1 << 26) ? reps * 16 : 1 << 30; /* (a first run's lazy compiles must not grow it on) */
}

double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The median of v's finite values (NAN when there are none); reorders v. */
static double bench_median_finite(double *v, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; ++i)
        if (isfinite(v[i]))
            v[k++] = v[i];
    return k ? bench_median(v, k) : NAN;
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
 * device's, with no host enqueue cost (CLBlast's included) inside it, less the device time of a
 * 4-byte fill enqueued first (the probe: *gate_ms from the gate's marker to its start, the
 * runtime's latency in starting the gated commands; *span_ms from its end to the run's). A run of steps also gets
 * each step's time in step_ms (the ends' ns go through ends_ns, job->steps of them). Where the
 * device's timestamps are unusable (all equal: rusticl 22.3 on llvmpipe) the run is timed with
 * the host clock from the gate's opening to the last command's completion (*host set), and each
 * of its steps gets the run's mean (no step stands out: the chunk start is not measured). */
/* The probe's scratch buffer and whether the queue runs out of order (then the run's commands wait
 * for the probe by a barrier): made once per bench_time. */
typedef struct run_probe {
    cl_mem buf;
    int out_of_order;
} run_probe;

static mhla_status timed_run(cl_command_queue queue, const bench_job *job, const run_probe *rp, double *ms,
                             double *step_ms, cl_ulong *ends_ns, int *host, double *gate_ms, double *span_ms,
                             char *err, size_t err_size)
{
    mhla_status st = MHLA_OK;
    cl_context clctx = NULL;
    cl_event gate = NULL, start = NULL, done = NULL, probe = NULL;
    const cl_uint zero = 0;
    cl_ulong t0 = 0, t1 = 0, p0 = 0, p1 = 0;
    *gate_ms = *span_ms = NAN;
    cl_int e = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof clctx, &clctx, NULL);
    if (e == CL_SUCCESS && !gate_spin)
        gate = clCreateUserEvent(clctx, &e);
    const double enqueue_from = bench_now();
    if (e == CL_SUCCESS && gate_spin) {
        const size_t one = 1;
        e = clSetKernelArg(gate_spin, 2, sizeof gate_reps, &gate_reps);
        if (e == CL_SUCCESS)
            e = clEnqueueNDRangeKernel(queue, gate_spin, 1, NULL, &one, &one, 0, NULL, &start);
    } else if (e == CL_SUCCESS) {
        e = clEnqueueMarkerWithWaitList(queue, 1, &gate, &start);
    }
    if (e == CL_SUCCESS) /* the probe waits for the marker (an out-of-order queue too) */
        e = clEnqueueFillBuffer(queue, rp->buf, &zero, sizeof zero, 0, sizeof zero, 1, &start, &probe);
    if (e == CL_SUCCESS && rp->out_of_order) /* the run's commands after the probe */
        e = clEnqueueBarrierWithWaitList(queue, 1, &probe, NULL);
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "could not enqueue the timing marker (OpenCL error %d)", (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    st = job->enqueue(job->arg, &done);
    const double opened = bench_now();
    if (gate)
        clSetUserEventStatus(gate, st == MHLA_OK ? CL_COMPLETE : -1);
    else
        clFlush(queue);
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
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(probe, CL_PROFILING_COMMAND_START, sizeof p0, &p0, NULL);
    if (e == CL_SUCCESS)
        e = clGetEventProfilingInfo(probe, CL_PROFILING_COMMAND_END, sizeof p1, &p1, NULL);
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "no profiling information (OpenCL error %d): the queue needs "
                                "CL_QUEUE_PROFILING_ENABLE", (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    *host = t1 <= t0;
    /* the probe's own device time is not the run's (a device whose probe times make no sense: the
     * plain marker-to-end time) */
    const int probe_ok = !*host && t0 <= p0 && p0 <= p1 && p1 <= t1;
    const cl_ulong probe_ns = probe_ok ? p1 - p0 : 0;
    *ms = *host ? wall_ms : (double)(t1 - t0 - probe_ns) * 1e-6;
    if (probe_ok)
        *gate_ms = (double)(p0 - t0) * 1e-6, *span_ms = (double)(t1 - p1) * 1e-6;
    if (gate_spin && !*host) { /* the spin's device time against the host's enqueue of what follows it */
        cl_ulong s0 = 0;
        if (clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_START, sizeof s0, &s0, NULL) == CL_SUCCESS &&
            t0 > s0 && (opened - enqueue_from) * 1e9 > 0.8 * (double)(t0 - s0) && gate_reps < gate_reps_max)
            gate_reps *= 2;
    }
    if (job->steps > 0 && step_ms && *host) {
        for (int i = 0; i < job->steps; ++i)
            step_ms[i] = *ms / job->steps;
    } else if (job->steps > 0 && step_ms) {
        if ((st = job->step_ends(job->arg, ends_ns)) != MHLA_OK) {
            err[0] = '\0';
            goto cleanup;
        }
        for (int i = 0; i < job->steps; ++i) {
            const cl_ulong from = i ? ends_ns[i - 1] : t0 + probe_ns;
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
    if (probe)
        clReleaseEvent(probe);
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

static mhla_status one_run(cl_command_queue queue, const bench_job *job, const run_probe *rp, double *ms,
                           double *step_ms, cl_ulong *ends_ns, int *host, double *gate_ms, double *span_ms, char *err,
                           size_t err_size)
{
    if (job->host) {
        *host = 0;
        *gate_ms = *span_ms = NAN;
        return host_run(job, ms, step_ms, err);
    }
    return timed_run(queue, job, rp, ms, step_ms, ends_ns, host, gate_ms, span_ms, err, err_size);
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
    double *ms = NULL, *stage[3] = {NULL, NULL, NULL}, *step_ms = NULL, *gates = NULL, *spans = NULL, one = 0.0,
           prep = 0.0, g1 = 0.0, s1 = 0.0;
    int host = 0;
    run_probe rp = {NULL, 0};
    out->host_clock = 0;
    const size_t steps = job->steps > 0 ? (size_t)job->steps : 0;
    cl_ulong *ends = calloc(steps ? steps : 1, sizeof *ends);
    if (!ends) {
        snprintf(err, err_size, "out of host memory");
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    if (!job->host) {
        cl_context clctx = NULL;
        cl_command_queue_properties qprops = 0;
        cl_int e = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof clctx, &clctx, NULL);
        if (e == CL_SUCCESS)
            rp.buf = clCreateBuffer(clctx, CL_MEM_READ_WRITE, sizeof(cl_uint), NULL, &e);
        if (e == CL_SUCCESS)
            e = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL);
        if (e != CL_SUCCESS) {
            snprintf(err, err_size, "could not make the timing probe's buffer (OpenCL error %d)", (int)e);
            st = MHLA_ERR_OPENCL;
            goto cleanup;
        }
        rp.out_of_order = (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) != 0;
    }
    /* The first run also builds what is built lazily (CLBlast compiles its GEMM then). */
    for (int i = 0; i < warmup; ++i) {
        err[0] = '\0';
        if ((st = prepare(job, &prep)) != MHLA_OK ||
            (st = one_run(queue, job, &rp, &one, NULL, ends, &host, &g1, &s1, err, err_size)) != MHLA_OK)
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
    gates = malloc((size_t)iters * sizeof *gates);
    spans = malloc((size_t)iters * sizeof *spans);
    for (int s = 0; s < 3 && job->stages; ++s)
        stage[s] = malloc((size_t)iters * sizeof *stage[s]);
    if (steps)
        step_ms = malloc((size_t)iters * steps * sizeof *step_ms);
    if (!ms || !gates || !spans || (job->stages && (!stage[0] || !stage[1] || !stage[2])) || (steps && !step_ms)) {
        snprintf(err, err_size, "out of host memory");
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    for (int i = 0; i < iters; ++i) {
        double s3[3];
        err[0] = '\0';
        if ((st = prepare(job, &prep)) != MHLA_OK ||
            (st = one_run(queue, job, &rp, &ms[i], steps ? step_ms + (size_t)i * steps : NULL, ends, &host,
                          &gates[i], &spans[i], err, err_size)) != MHLA_OK)
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
    out->gate_ms = bench_median_finite(gates, (size_t)iters);
    out->span_ms = bench_median_finite(spans, (size_t)iters);
    for (int s = 0; s < 3; ++s)
        out->stage_ms[s] = job->stages ? bench_median(stage[s], (size_t)iters) : NAN;
    bench_step_stats(step_ms, steps ? iters : 0, job->steps, job->marked_step, out);
    if (job->host)
        out->host_clock = BENCH_CLOCK_HOST_OP;
    if (out->host_clock)
        out->marked_ms = NAN; /* host-clock runs are not split into steps */
cleanup:
    if (rp.buf)
        clReleaseMemObject(rp.buf);
    free(ends);
    free(step_ms);
    free(ms);
    free(gates);
    free(spans);
    for (int s = 0; s < 3; ++s)
        free(stage[s]);
    return st;
}
