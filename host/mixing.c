/* Stage 2: the mixing S~_i = sum_b Mc[i,b] S_b as one SGEMM over [M, B*H*Dk*(Dv+1)] (S and z
 * together: a summary row holds both), plus the official normalizer's denominators as a second
 * SGEMM over [M, B*H*Nb]. CLBlast runs them, or kernels/mixing.cl where the device's tuning says
 * so (host/tuning.c). */
#include "internal.h"

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

/* Rows of the mixed result and of the summaries it mixes: M and M, or a shard's blocks and M. */
static size_t mixed_rows(const mhla_plan *plan) { return (size_t)plan->shape.m; }
static size_t source_rows(const mhla_plan *plan)
{
    return (size_t)(plan->shard ? plan->shard->gshape.m : plan->shape.m);
}

mhla_status mhla__mixing_setup(mhla_plan *plan)
{
    mhla_status st = MHLA_OK;
    size_t m = mixed_rows(plan), k = source_rows(plan), t1 = 0, t2 = 0;
    cl_program prog = NULL;
    if (plan->tuning.mix_kernel) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(plan->ctx, MHLA_KF_MIXING, &plan->cfg, &plan->tiles, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(plan->ctx, prog, "mixing_gemm", &plan->k_mixing));
        /* A work-group is one column tile and every row tile: its work-items read the same
         * k x cols tile of B, which then comes from cache for all but the first. */
        const size_t rows = (size_t)plan->tiles.mix_mr;
        const size_t extent[3] = {1, (m + rows - 1) / rows, 1};
        mhla__local_size_3d(plan->ctx, plan->k_mixing, extent, (size_t)plan->tiles.wg, plan->lws_mixing);
        goto cleanup;
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_ld_temp_bytes(plan->ctx, m, summary_cols(plan), k, k, summary_cols(plan),
                                                        summary_cols(plan), &t1));
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL)
        MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_ld_temp_bytes(plan->ctx, m, dots_cols(plan), k, k, dots_cols(plan),
                                                            dots_cols(plan), &t2));
    plan->gemm_temp_bytes = t1 > t2 ? t1 : t2;
    if (plan->gemm_temp_bytes > 0)
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_WRITE, plan->gemm_temp_bytes,
                                                      "the mixing GEMM's temporary buffer", &plan->gemm_temp));
cleanup:
    return st;
}

mhla_status mhla__mix(mhla_plan *plan, cl_mem a, size_t rows, size_t k, cl_mem b, cl_mem c, size_t x)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_int m = (cl_int)rows, kk = (cl_int)k;
    const cl_long xl = (cl_long)x;
    if (!plan->k_mixing)
        return mhla__sgemm_ld(ctx, rows, x, k, a, 0, k, b, 0, x, 0.0f, c, 0, x, plan->gemm_temp, NULL);
    const size_t cols = (size_t)plan->tiles.mix_nv * (size_t)plan->tiles.mix_ve, mr = (size_t)plan->tiles.mix_mr;
    const size_t extent[3] = {(x + cols - 1) / cols, (rows + mr - 1) / mr, 1};
    MHLA_SET_ARG(st, ctx, plan->k_mixing, 0, a);
    MHLA_SET_ARG(st, ctx, plan->k_mixing, 1, kk);
    MHLA_SET_ARG(st, ctx, plan->k_mixing, 2, b);
    MHLA_SET_ARG(st, ctx, plan->k_mixing, 3, c);
    MHLA_SET_ARG(st, ctx, plan->k_mixing, 4, m);
    MHLA_SET_ARG(st, ctx, plan->k_mixing, 5, kk);
    MHLA_SET_ARG(st, ctx, plan->k_mixing, 6, xl);
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, plan->k_mixing, 2, extent, plan->lws_mixing, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(mixing_gemm)"));
cleanup:
    return st;
}

mhla_status mhla__mixing_gemm(mhla_plan *plan, cl_mem a, cl_mem b, cl_mem c, size_t x)
{
    const size_t m = (size_t)plan->shape.m;
    return mhla__mix(plan, a, m, m, b, c, x);
}

mhla_status mhla__mixing_enqueue(mhla_plan *plan, cl_mem mixing)
{
    mhla_status st = MHLA_OK;
    /* A shard mixes the gathered summaries of every block with its own rows of Mc. */
    const mhla_shard *sh = plan->shard;
    cl_mem a = sh ? sh->mc_rows : mixing, s = sh ? sh->gathered : plan->summary;
    const size_t m = mixed_rows(plan), k = source_rows(plan);
    MHLA_FORWARD_IF_ERROR(st, mhla__mix(plan, a, m, k, s, plan->mixed, summary_cols(plan)));
    if (plan->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL) {
        /* Both GEMMs share the temporary buffer; an out-of-order queue must not overlap them. */
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(plan->ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__mix(plan, a, m, k, sh ? sh->gathered_dots : plan->dots, plan->den,
                                            dots_cols(plan)));
    }
cleanup:
    return st;
}
