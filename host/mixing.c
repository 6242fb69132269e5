/* Stage 2: the mixing S~_i = sum_b Mc[i,b] S_b as one CLBlast SGEMM over [M, B*H*Dk*(Dv+1)]
 * (S and z together, since z is the summary's last column), plus the official normalizer's
 * denominators as a second SGEMM over [M, B*H*Nb]. */
#include "internal.h"

#include <clblast_c.h>

mhla_status mhla__sgemm_ld_temp_bytes(mhla_context *ctx, size_t m, size_t n, size_t k, size_t lda, size_t ldb,
                                      size_t ldc, size_t *bytes)
{
    mhla_status st = MHLA_OK;
    cl_command_queue queue = ctx->queue;
    size_t size = 0;
    CLBlastStatusCode s = CLBlastSGemmTempBufferSize(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo,
                                                     m, n, k, 0, lda, 0, ldb, 0, ldc, &queue, &size);
    if (s != CLBlastSuccess) {
        st = mhla__fail_blas(ctx, s, "CLBlastSGemmTempBufferSize", __FILE__, __LINE__);
        goto cleanup;
    }
    *bytes = size; /* already in bytes (CLBlast converts from elements) */
cleanup:
    return st;
}

mhla_status mhla__sgemm_temp_bytes(mhla_context *ctx, size_t m, size_t n, size_t k, size_t *bytes)
{
    return mhla__sgemm_ld_temp_bytes(ctx, m, n, k, k, n, n, bytes);
}

mhla_status mhla__sgemm_ld(mhla_context *ctx, size_t m, size_t n, size_t k, cl_mem a, size_t a_off, size_t lda,
                           cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc,
                           cl_mem temp, cl_event *ev)
{
    mhla_status st = MHLA_OK;
    cl_command_queue queue = ctx->queue;
    CLBlastStatusCode s;
    if (temp)
        s = CLBlastSgemmWithTempBuffer(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, 1.0f,
                                       a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, &queue, ev, temp);
    else
        s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, 1.0f, a, a_off, lda,
                         b, b_off, ldb, beta, c, c_off, ldc, &queue, ev);
    if (s != CLBlastSuccess)
        st = mhla__fail_blas(ctx, s, "CLBlastSgemm", __FILE__, __LINE__);
    return st;
}

mhla_status mhla__sgemm(mhla_context *ctx, size_t m, size_t n, size_t k, cl_mem a, size_t a_off, cl_mem b,
                        size_t b_off, cl_mem c, size_t c_off, cl_mem temp, cl_event *ev)
{
    return mhla__sgemm_ld(ctx, m, n, k, a, a_off, k, b, b_off, n, 0.0f, c, c_off, n, temp, ev);
}

/* Columns of the two GEMMs' right-hand sides. */
static size_t summary_cols(const mhla_plan *plan)
{
    return (size_t)plan->shape.bh * (size_t)plan->cfg.dk * (size_t)plan->shape.summary_cols;
}
static size_t dots_cols(const mhla_plan *plan) { return (size_t)plan->shape.bh * (size_t)plan->shape.nb; }

mhla_status mhla__mixing_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    size_t m = (size_t)plan->shape.m, t1 = 0, t2 = 0;
    MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_temp_bytes(plan->ctx, m, summary_cols(plan), m, &t1));
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL)
        MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_temp_bytes(plan->ctx, m, dots_cols(plan), m, &t2));
    plan->gemm_temp_bytes = t1 > t2 ? t1 : t2;
    if (plan->gemm_temp_bytes > 0)
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_WRITE, plan->gemm_temp_bytes,
                                                      "the mixing GEMM's temporary buffer", &plan->gemm_temp));
cleanup:
    return st;
}

mhla_status mhla__mixing_enqueue(mhla_plan *plan, cl_mem mixing)
{
    mhla_status st = MHLA_OK;
    size_t m = (size_t)plan->shape.m;
    MHLA_FORWARD_IF_ERROR(st, mhla__sgemm(plan->ctx, m, summary_cols(plan), m, mixing, 0, plan->summary, 0,
                                          plan->mixed, 0, plan->gemm_temp, NULL));
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL) {
        /* Both GEMMs share the temporary buffer; an out-of-order queue must not overlap them. */
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(plan->ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__sgemm(plan->ctx, m, dots_cols(plan), m, mixing, 0, plan->dots, 0,
                                              plan->den, 0, plan->gemm_temp, NULL));
    }
cleanup:
    return st;
}
