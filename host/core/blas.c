/* The CLBlast calls of the library (row-major SGEMMs on a context's queue), and the release of
 * CLBlast's program cache with the last context that used it. A build without CLBlast
 * (-Dclblast=disabled) keeps the functions, failing, and its tuning never calls them
 * (tune/tuning.c gives every device the mixing and prefix kernels). */
#include "core/core.h"
#include "core/testing.h"

#ifdef MHLA_HAVE_CLBLAST
#include <clblast_c.h>
#include <stdatomic.h>

static const char *blas_error_name(int err)
{
    switch (err) {
    case CLBlastNotImplemented:
        return "CLBlastNotImplemented";
    case CLBlastInvalidDimension:
        return "CLBlastInvalidDimension";
    case CLBlastInsufficientMemoryA:
        return "CLBlastInsufficientMemoryA";
    case CLBlastInsufficientMemoryB:
        return "CLBlastInsufficientMemoryB";
    case CLBlastInsufficientMemoryC:
        return "CLBlastInsufficientMemoryC";
    case CLBlastInsufficientMemoryTemp:
        return "CLBlastInsufficientMemoryTemp";
    case CLBlastInvalidLocalMemUsage:
        return "CLBlastInvalidLocalMemUsage";
    case CLBlastNoHalfPrecision:
        return "CLBlastNoHalfPrecision";
    case CLBlastNoDoublePrecision:
        return "CLBlastNoDoublePrecision";
    case CLBlastDatabaseError:
        return "CLBlastDatabaseError";
    case CLBlastUnknownError:
        return "CLBlastUnknownError";
    case CLBlastUnexpectedError:
        return "CLBlastUnexpectedError";
    default:
        return NULL;
    }
}

static mhla_status fail_blas(mhla_context *ctx, int err, const char *what, const char *file, int line)
{
    const char *name = blas_error_name(err);
    mhla__set_cl_error(ctx, (cl_int)err);
    if (!name && err > -1000) /* codes shared with OpenCL */
        return mhla__fail_cl(ctx, (cl_int)err, what, file, line);
    return mhla__fail(ctx, MHLA_ERR_BLAS, "%s failed: %s (%d) at %s:%d", what,
                      name ? name : "CLBlast error", err, file, line);
}

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
        st = fail_blas(ctx, s, "CLBlastSGemmTempBufferSize", __FILE__, __LINE__);
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
    /* kernel profiling (core/profile.c) wants the GEMM's event; read once (another thread may turn it
     * on or off meanwhile) */
    const int profile = ctx->kprof_on;
    cl_event own = NULL;
    if (!ev && profile)
        ev = &own;
    /* CLBlast builds the GEMM's program on its first call for a device and size class: a build that
     * fails is tried once more (the call enqueues nothing before that build), as the library's own
     * builds are (core/program.c: a compile cache another process replaced meanwhile). */
    for (int attempt = 1;; ++attempt) {
        if (mhla__fault_inject(MHLA__FAULT_BLAS_BUILD))
            s = CLBlastOpenCLBuildProgramFailure;
        else if (temp)
            s = CLBlastSgemmWithTempBuffer(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k,
                                           1.0f, a, a_off, lda, b, b_off, ldb, beta, c, c_off, ldc, &queue, ev, temp);
        else
            s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, m, n, k, 1.0f, a, a_off,
                             lda, b, b_off, ldb, beta, c, c_off, ldc, &queue, ev);
        if (s != CLBlastOpenCLBuildProgramFailure || attempt == 2)
            break;
    }
    if (s == CLBlastOpenCLBuildProgramFailure)
        st = fail_blas(ctx, s, "CLBlastSgemm (its program failed to build twice)", __FILE__, __LINE__);
    else if (s != CLBlastSuccess)
        st = fail_blas(ctx, s, "CLBlastSgemm", __FILE__, __LINE__);
    else if (profile && *ev && (ev == &own || clRetainEvent(*ev) == CL_SUCCESS))
        mhla__kprof_record(ctx, "CLBlastSgemm", *ev);
    return st;
}

#else /* built without CLBlast */

static mhla_status no_clblast(mhla_context *ctx)
{
    return mhla__fail(ctx, MHLA_ERR_UNSUPPORTED,
                      "libmhla was built without CLBlast (-Dclblast=disabled), and a tuning row asked for its GEMM");
}

void mhla__blas_release(mhla_context *ctx) { (void)ctx; }

mhla_status mhla__sgemm_ld_temp_bytes(mhla_context *ctx, size_t m, size_t n, size_t k, size_t lda, size_t ldb,
                                      size_t ldc, size_t *bytes)
{
    (void)m, (void)n, (void)k, (void)lda, (void)ldb, (void)ldc;
    *bytes = 0;
    return no_clblast(ctx);
}

mhla_status mhla__sgemm_ld(mhla_context *ctx, size_t m, size_t n, size_t k, cl_mem a, size_t a_off, size_t lda,
                           cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c, size_t c_off, size_t ldc,
                           cl_mem temp, cl_event *ev)
{
    (void)m, (void)n, (void)k, (void)a, (void)a_off, (void)lda, (void)b, (void)b_off, (void)ldb, (void)beta;
    (void)c, (void)c_off, (void)ldc, (void)temp, (void)ev;
    return no_clblast(ctx);
}
#endif
