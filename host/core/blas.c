/* The CLBlast calls of the library (row-major SGEMMs on a context's queue), and the release of
 * CLBlast's program cache with the last context that used it. */
#include "core/core.h"

#include <clblast_c.h>
#include <stdatomic.h>

/* CLBlast keeps the programs it builds in a process-wide cache, keyed by context and device, that
 * only CLBlastClearCache() empties; left alone, its static destructors release them at exit,
 * after their contexts are gone (Oclgrind then aborts with "corrupted double-linked list"), and
 * every context created and destroyed meanwhile stays alive through them. So the library counts
 * the live contexts that have called CLBlast and clears the cache when the last one goes. Another
 * thread's CLBlast call racing with the clear only rebuilds its program. */
static atomic_int blas_contexts;

static void blas_used(mhla_context *ctx)
{
    /* Threads sharing ctx may both get here first: only the one that sets the flag counts it. */
    if (!atomic_load(&ctx->used_blas) && !atomic_exchange(&ctx->used_blas, 1))
        atomic_fetch_add(&blas_contexts, 1);
}

void mhla__blas_release(mhla_context *ctx)
{
    if (atomic_exchange(&ctx->used_blas, 0) && atomic_fetch_sub(&blas_contexts, 1) == 1)
        CLBlastClearCache();
}

mhla_status mhla__sgemm_ld_temp_bytes(mhla_context *ctx, size_t m, size_t n, size_t k, size_t lda, size_t ldb,
                                      size_t ldc, size_t *bytes)
{
    mhla_status st = MHLA_OK;
    cl_command_queue queue = ctx->queue;
    size_t size = 0;
    blas_used(ctx);
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

mhla_status mhla__sgemm_ld(mhla_context *ctx, size_t m, size_t n, size_t k, cl_mem a, size_t a_off, size_t lda,
                           cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc,
                           cl_mem temp, cl_event *ev)
{
    mhla_status st = MHLA_OK;
    cl_command_queue queue = ctx->queue;
    CLBlastStatusCode s;
    blas_used(ctx);
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
