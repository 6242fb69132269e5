/* How a GPU application embeds libmhla: it owns the OpenCL context, queue and buffers, and lets
 * the library enqueue MHLA on its queue between its own commands. Exits non-zero on mismatch. */
#include <mhla.h>
#include <mhla_reference.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK_CL(call)                                                                              \
    do {                                                                                            \
        cl_int e_ = (call);                                                                         \
        if (e_ != CL_SUCCESS) {                                                                     \
            fprintf(stderr, "embed_queue: %s failed: %d\n", #call, (int)e_);                        \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

int main(void)
{
    /* --- the application's own OpenCL setup --- */
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    CHECK_CL(clGetPlatformIDs(1, &platform, NULL));
    CHECK_CL(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_context context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK_CL(err);
    cl_command_queue queue = clCreateCommandQueue(context, device, 0, &err);
    CHECK_CL(err);

    /* An image of 16x16 tokens, 4x4 blocks of 4x4 tokens, 2 heads of 32 dims (BNHD). */
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 2;
    cfg.seq_h = 16, cfg.seq_w = 16;
    cfg.block_h = 4, cfg.block_w = 4;
    cfg.dk = 32, cfg.dv = 32;
    const size_t n = 256, M = 16;
    const size_t qk_elems = n * 2 * 32, v_elems = n * 2 * 32;
    float *q = malloc(qk_elems * sizeof *q), *k = malloc(qk_elems * sizeof *k);
    float *v = malloc(v_elems * sizeof *v), *o = malloc(v_elems * sizeof *o);
    float mixing[16 * 16];
    double *ref = malloc(v_elems * sizeof *ref);
    if (!q || !k || !v || !o || !ref)
        return 1;
    for (size_t i = 0; i < qk_elems; ++i) {
        q[i] = sinf(0.37f * (float)i);
        k[i] = cosf(0.11f * (float)i);
    }
    for (size_t i = 0; i < v_elems; ++i)
        v[i] = sinf(0.05f * (float)i + 1.0f);

    cl_mem bq = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, qk_elems * 4, q, &err);
    CHECK_CL(err);
    cl_mem bk = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, qk_elems * 4, k, &err);
    CHECK_CL(err);
    cl_mem bv = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, v_elems * 4, v, &err);
    CHECK_CL(err);
    for (size_t i = 0; i < v_elems; ++i)
        o[i] = NAN; /* out starts as NaN: an element the library did not write fails the check below */
    cl_mem bo = clCreateBuffer(context, CL_MEM_WRITE_ONLY | CL_MEM_COPY_HOST_PTR, v_elems * 4, o, &err);
    CHECK_CL(err);
    cl_mem bm = clCreateBuffer(context, CL_MEM_READ_ONLY, sizeof mixing, NULL, &err);
    CHECK_CL(err);

    /* --- the library on the application's queue --- */
    mhla_context *mctx = NULL;
    mhla_plan *plan = NULL;
    cl_event uploaded, done;
    if (mhla_mixing_init(MHLA_INIT_LINEAR, NULL, 1, 4, 4, mixing, M * M) != MHLA_OK ||
        mhla_context_wrap(context, queue, &mctx) != MHLA_OK) {
        fprintf(stderr, "embed_queue: %s\n", mhla_last_message());
        return 1;
    }
    CHECK_CL(clEnqueueWriteBuffer(queue, bm, CL_FALSE, 0, sizeof mixing, mixing, 0, NULL, &uploaded));
    if (mhla_plan_create(mctx, &cfg, &plan) != MHLA_OK ||
        mhla_forward(plan, bq, bk, bv, bm, bo, 1, &uploaded, &done) != MHLA_OK) {
        fprintf(stderr, "embed_queue: %s\n", mhla_context_message(mctx));
        return 1;
    }
    CHECK_CL(clEnqueueReadBuffer(queue, bo, CL_TRUE, 0, v_elems * 4, o, 1, &done, NULL));

    /* --- check against the double-precision reference --- */
    if (mhla_reference_forward(&cfg, q, k, v, mixing, ref) != MHLA_OK) {
        fprintf(stderr, "embed_queue: %s\n", mhla_last_message());
        return 1;
    }
    double err_rel = mhla_max_rel_err(o, ref, v_elems);
    printf("embed_queue: %s, max_rel_err %.3g\n", mhla_context_device_name(mctx), err_rel);

    clReleaseEvent(uploaded);
    clReleaseEvent(done);
    mhla_plan_destroy(plan);
    mhla_context_destroy(mctx);
    clReleaseMemObject(bq), clReleaseMemObject(bk), clReleaseMemObject(bv);
    clReleaseMemObject(bo), clReleaseMemObject(bm);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    free(q), free(k), free(v), free(o), free(ref);
    return err_rel <= 1e-5 ? 0 : 1;
}
