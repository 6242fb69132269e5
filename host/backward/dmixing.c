/* What the backward forms share: a workspace buffer counted in the plan's, dMc[i,b] = <A_i, B_b> in a
 * fixed order (kernels/backward_mixing.cl: partial sums per chunk of the rows, then their sum), and
 * Mc^T for the non-causal forms' dS = Mc^T G. */
#include "backward/backward.h"

mhla_status mhla__backward_buffer(mhla_plan *plan, size_t bytes, const char *what, cl_mem *out)
{
    mhla_status st = MHLA_OK;
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(plan->ctx, CL_MEM_READ_WRITE, bytes, what, out));
    plan->workspace_bytes += bytes;
cleanup:
    return st;
}

mhla_status mhla__backward_dmixing_setup(mhla_plan *plan, mhla_bwd *b, size_t rows, size_t xmax, cl_program *prog)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_BACKWARD_MIXING, &plan->cfg, &b->tiles, prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, *prog, "bwd_dmixing_part", &b->k_dmixing));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, *prog, "bwd_dmixing_reduce", &b->k_dmix_reduce));
    /* Chunks of 1024 floats keep 2*rows rows of one in cache; at least `rows` floats each keep the
     * partial sums within `rows` summed rows (chunks * rows^2 <= (xmax / rows + 1) * rows^2). From
     * 128 rows (a causal plan's chunks at long N), 4096 floats: (rows/4)^2 >= 1024 work-items per
     * chunk still, and a fourth of the tiles' start-up, lane sums and partial sums (256 rows: the
     * causal backward at N = 16384, C = 64; docs/tuning-notes.md "Causal backward"). */
    const size_t floor_len = rows >= 128 ? 4096 : 1024;
    b->dmix_len = mhla__round_up(rows > floor_len ? rows : floor_len, 16);
    b->dmix_chunks = (xmax + b->dmix_len - 1) / b->dmix_len;
    MHLA_FORWARD_IF_ERROR(st, mhla__backward_buffer(plan, b->dmix_chunks * rows * rows * sizeof(float),
                                                    "the partial sums of dMc", &b->dmix_part));
cleanup:
    return st;
}

mhla_status mhla__backward_dmixing(mhla_plan *plan, mhla_bwd *b, cl_mem a, cl_mem bm, size_t off, size_t x,
                                   cl_mem out, cl_int m, cl_int cols, cl_int ldo, cl_int accumulate, cl_int lower)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_long xl = (cl_long)x;
    const cl_long len = (cl_long)b->dmix_len, offl = (cl_long)off;
    const cl_int chunks = (cl_int)((x + b->dmix_len - 1) / b->dmix_len);
    const size_t tm = (size_t)b->tiles.bwd_tm; /* kernels/backward_mixing.cl's BWD_TM */
    const size_t extent[3] = {((size_t)cols + tm - 1) / tm, ((size_t)m + tm - 1) / tm, (size_t)chunks};
    const size_t rext[3] = {(size_t)cols, (size_t)m, 1};
    size_t local[3], rlocal[3];
    mhla__local_size_3d(ctx, b->k_dmixing, extent, (size_t)plan->tiles.wg, local);
    mhla__local_size_3d(ctx, b->k_dmix_reduce, rext, (size_t)plan->tiles.wg, rlocal);
    MHLA_SET_ARGS(st, ctx, b->k_dmixing, 0, MHLA_ARG(a), MHLA_ARG(bm), MHLA_ARG(b->dmix_part), MHLA_ARG(xl),
                  MHLA_ARG(m), MHLA_ARG(cols), MHLA_ARG(len), MHLA_ARG(offl), MHLA_ARG(lower));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_dmixing, 3, extent, local, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_dmixing_part)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    MHLA_SET_ARGS(st, ctx, b->k_dmix_reduce, 0, MHLA_ARG(b->dmix_part), MHLA_ARG(out), MHLA_ARG(m), MHLA_ARG(cols),
                  MHLA_ARG(chunks),
                  MHLA_ARG(ldo), MHLA_ARG(accumulate));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_dmix_reduce, 2, rext, rlocal, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_dmixing_reduce)"));
cleanup:
    return st;
}

mhla_status mhla__backward_mixing_transpose(mhla_plan *plan, mhla_bwd *b, cl_mem mixing)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = plan->ctx;
    const cl_int m = (cl_int)plan->shape.m, m_kv = (cl_int)plan->shape.m_kv, lda = m_kv;
    const size_t ext[3] = {(size_t)m, (size_t)m_kv, 1}, local[3] = {1, 1, 1};
    MHLA_SET_ARGS(st, ctx, b->k_transpose, 0, MHLA_ARG(mixing), MHLA_ARG(b->mix_t), MHLA_ARG(m), MHLA_ARG(m_kv),
                  MHLA_ARG(lda));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, b->k_transpose, 2, ext, local, 0, NULL, NULL,
                                           "clEnqueueNDRangeKernel(bwd_transpose)"));
cleanup:
    return st;
}
