/* A minimal timed and checked forward (the main job before mhla-bench): MHLA on a generated
 * 64x64-token image on the default device, timed with OpenCL profiling events and checked against
 * the C reference. */
#include <mhla.h>
#include <mhla_reference.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define REPEAT 10

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; ++i) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((seed >> 40) & 0xFFFFFF) / 8388608.0f - 1.0f; /* uniform in [-1, 1) */
    }
}

int main(void)
{
    mhla_context *ctx = NULL;
    mhla_plan *plan = NULL;
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.batch = 1, cfg.heads = 8;
    cfg.seq_h = 64, cfg.seq_w = 64; /* N = 4096 tokens */
    cfg.block_h = 4, cfg.block_w = 4; /* M = 16 blocks of 16x16 tokens (M^2 <= N) */
    cfg.dk = 64, cfg.dv = 64;
    int rc = 1;
    const size_t nq = mhla_config_tensor_elems(&cfg, MHLA_TENSOR_Q), nv = mhla_config_tensor_elems(&cfg, MHLA_TENSOR_V);
    float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nv * 4), *o = malloc(nv * 4), mix[16 * 16];
    double *ref = malloc(nv * 8), ms[REPEAT];
    cl_mem buf[5] = {NULL};
    if (!q || !k || !v || !o || !ref)
        goto done;
    fill(q, nq, 1), fill(k, nq, 2), fill(v, nv, 3);

    if (mhla_context_create(NULL, &ctx) != MHLA_OK || mhla_mixing_init(MHLA_INIT_LINEAR, NULL, 1, 4, 4, mix, 256) ||
        mhla_plan_create(ctx, &cfg, &plan) != MHLA_OK) {
        fprintf(stderr, "forward_2d: %s\n", mhla_last_message());
        goto done;
    }
    printf("device     %s\n", mhla_context_device_name(ctx));
    printf("input      B=1 H=8 image 64x64 tokens (N=4096), blocks 4x4 (M=16), Dk=Dv=64, relu-eps, paper\n");
    cl_context clctx = mhla_context_cl_context(ctx);
    cl_command_queue queue = mhla_context_queue(ctx);
    const void *host[5] = {q, k, v, NULL, mix};
    cl_int err = CL_SUCCESS;
    for (int t = 0; t < 5; ++t) {
        const size_t bytes = mhla_plan_tensor_bytes(plan, (mhla_tensor)t);
        buf[t] = clCreateBuffer(clctx, host[t] ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_WRITE_ONLY, bytes,
                                (void *)host[t], &err);
        if (err != CL_SUCCESS) {
            fprintf(stderr, "forward_2d: clCreateBuffer failed (%d)\n", (int)err);
            goto done;
        }
    }
    /* Device time from the first stage's start to the last stage's end: a marker before and the
     * output event after (the first call also builds CLBlast's GEMM, so it is a warm-up). */
    for (int r = -1; r < REPEAT; ++r) {
        cl_event start, end;
        if (clEnqueueMarkerWithWaitList(queue, 0, NULL, &start) != CL_SUCCESS ||
            mhla_forward(plan, buf[0], buf[1], buf[2], buf[4], buf[3], 0, NULL, &end) != MHLA_OK) {
            fprintf(stderr, "forward_2d: %s\n", mhla_context_message(ctx));
            goto done;
        }
        clWaitForEvents(1, &end);
        cl_ulong t0 = 0, t1 = 0;
        clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
        clGetEventProfilingInfo(end, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
        if (r >= 0)
            ms[r] = (double)(t1 - t0) * 1e-6;
        clReleaseEvent(start), clReleaseEvent(end);
    }
    mhla_stage_times st;
    if (mhla_plan_stage_times(plan, &st) == MHLA_OK)
        printf("stages     summary %.3f ms, mixing %.3f ms, output %.3f ms (last run)\n", st.summary_ms, st.mixing_ms,
               st.output_ms);
    clEnqueueReadBuffer(queue, buf[3], CL_TRUE, 0, nv * 4, o, 0, NULL, NULL);
    qsort(ms, REPEAT, sizeof ms[0], cmp_double);
    const double flops = 4.0 * 8 * 4096 * 64 * 64;
    printf("time_ms    median %.3f min %.3f max %.3f (%d runs, device time)\n", ms[REPEAT / 2], ms[0], ms[REPEAT - 1],
           REPEAT);
    printf("throughput %.2f GFLOP/s effective (4*B*H*N*Dk*Dv / median)\n", flops / (ms[REPEAT / 2] * 1e-3) * 1e-9);
    if (mhla_reference_forward(&cfg, q, k, v, mix, ref) != MHLA_OK) {
        fprintf(stderr, "forward_2d: %s\n", mhla_last_message());
        goto done;
    }
    const double e = mhla_max_rel_err(o, ref, nv);
    printf("check      max_rel_err %.3g vs double reference (tolerance 1e-5): %s\n", e, e <= 1e-5 ? "ok" : "FAILED");
    rc = e <= 1e-5 ? 0 : 3;
done:
    for (int t = 0; t < 5; ++t)
        if (buf[t])
            clReleaseMemObject(buf[t]);
    mhla_plan_destroy(plan);
    mhla_context_destroy(ctx);
    free(q), free(k), free(v), free(o), free(ref);
    return rc;
}
