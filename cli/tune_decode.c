/* `mhla tune`'s decode stage: the decoder's step and chunk start (dec_dp: decoder.cl in parts on GPU
 * rows; dec_next: the steps sum the next chunk's prefix) checked against the double reference on a
 * short sequence stepped token by token, and timed as the bench's decode rows are: C steps after a
 * prefilled context and one untimed step, one of the C a chunk start. */
#include "tune_decode.h"

#include "cli.h"
#include "tune_backward.h"

#include <mhla_reference.h>

#include <math.h>
#include <stdlib.h>

mhla_status tune_decode_check(mhla_context *ctx, const mhla_config *small, int *passed)
{
    const mhla_tensor shape[5] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_MIXING, MHLA_TENSOR_OUT};
    float *x[5] = {NULL};
    size_t n[5];
    double *ref = NULL;
    mhla_decoder *dec = NULL;
    mhla_status st = MHLA_OK;
    int ok = 1;
    *passed = 0;
    for (int i = 0; i < 5; ++i) {
        n[i] = mhla_config_tensor_elems(small, shape[i]);
        ok = ok && (x[i] = malloc((n[i] ? n[i] : 1) * sizeof(float))) != NULL;
    }
    ok = ok && (ref = malloc((n[4] ? n[4] : 1) * sizeof *ref)) != NULL;
    if (!ok) {
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    for (int i = 0; i < 4; ++i) /* a seed per tensor, as the backward's check */
        tune_fill(x[i], n[i], 0x243F6A8885A308D3ULL + 977ULL * (uint64_t)i);
    size_t rows = 1;
    while (rows * rows < n[3])
        ++rows;
    for (size_t i = 0; i < rows; ++i)
        for (size_t j = i + 1; j < rows; ++j)
            x[3][i * rows + j] = NAN;
    for (size_t e = 0; e < n[4]; ++e) /* NaN: an element no step writes fails the check */
        x[4][e] = NAN;
    if ((st = mhla_decoder_create(ctx, small, small->seq_t, &dec)) != MHLA_OK ||
        (st = mhla_decoder_step_host(dec, x[0], x[1], x[2], x[3], x[4], small->seq_t)) != MHLA_OK ||
        (st = mhla_reference_forward(small, x[0], x[1], x[2], x[3], ref)) != MHLA_OK)
        goto cleanup;
    *passed = mhla_max_rel_err(x[4], ref, n[4]) <= mhla_reference_tolerance(MHLA_DTYPE_F32, small->seq_t);
cleanup:
    mhla_decoder_destroy(dec);
    for (int i = 0; i < 5; ++i)
        free(x[i]);
    free(ref);
    return st;
}

struct tune_decode {
    mhla_decoder *dec;
    cl_command_queue queue;
    cl_mem b[5]; /* one token's q, k, v, out; mixing */
    void *state;
    size_t state_bytes;
};

/* A device buffer of `elems` floats from tune_fill's values for `seed`. */
static cl_mem filled(mhla_context *ctx, size_t elems, uint64_t seed, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    float *host = malloc((elems ? elems : 1) * sizeof *host);
    if (!host) {
        *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    tune_fill(host, elems, seed);
    cl_mem m = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              (elems ? elems : 1) * sizeof(float), host, err);
    free(host);
    return *err == CL_SUCCESS ? m : NULL;
}

mhla_status tune_decode_open(mhla_context *ctx, const mhla_config *cfg, tune_decode **out)
{
    *out = NULL;
    tune_decode *d = calloc(1, sizeof *d);
    if (!d)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    d->queue = mhla_context_queue(ctx);
    cl_mem ctx_b[4] = {NULL, NULL, NULL, NULL}; /* the context's q, k, v and out */
    const int64_t C = cfg->chunk > 0 ? cfg->chunk : 64, context = cfg->seq_t;
    mhla_config c = *cfg;
    c.chunk = C;
    /* the context, a run's untimed first step and its C steps; Mc covers them all */
    c.mixing_rows = (context + 1 + C + C - 1) / C;
    mhla_status st = mhla_decoder_create(ctx, &c, context + 1 + C, &d->dec);
    cl_int err = CL_SUCCESS;
    const mhla_tensor shape[5] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_OUT, MHLA_TENSOR_MIXING};
    for (int i = 0; i < 4 && st == MHLA_OK; ++i) {
        const size_t bytes = mhla_decoder_tensor_bytes(d->dec, shape[i], context);
        ctx_b[i] = filled(ctx, bytes / sizeof(float), 0x243F6A8885A308D3ULL + 977ULL * (uint64_t)i, &err);
        d->b[i] = filled(ctx, mhla_decoder_tensor_bytes(d->dec, shape[i], 1) / sizeof(float),
                         0x13198A2E03707344ULL + 977ULL * (uint64_t)i, &err);
    }
    if (st == MHLA_OK) /* Mc in [0.05, 1): every chunk's summary weighs in */
        d->b[4] = filled(ctx, mhla_decoder_tensor_bytes(d->dec, MHLA_TENSOR_MIXING, 1) / sizeof(float),
                         0xA4093822299F31D0ULL, &err);
    if (st == MHLA_OK && err != CL_SUCCESS)
        st = MHLA_ERR_OUT_OF_DEVICE_MEMORY;
    if (st == MHLA_OK)
        st = mhla_decoder_prefill(d->dec, ctx_b[0], ctx_b[1], ctx_b[2], d->b[4], ctx_b[3], context, 0, NULL, NULL);
    if (st == MHLA_OK && clFinish(d->queue) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    if (st == MHLA_OK) {
        d->state_bytes = mhla_decoder_state_size(d->dec);
        d->state = malloc(d->state_bytes ? d->state_bytes : 1);
        st = d->state ? mhla_decoder_state_read(d->dec, d->state, d->state_bytes) : MHLA_ERR_OUT_OF_HOST_MEMORY;
    }
    for (int i = 0; i < 4; ++i)
        if (ctx_b[i])
            clReleaseMemObject(ctx_b[i]);
    if (st != MHLA_OK) {
        tune_decode_close(d);
        return st;
    }
    *out = d;
    return MHLA_OK;
}

mhla_status tune_decode_run(tune_decode *d, double *ms)
{
    /* the saved state, then a step outside the time: the first step after a restore also rebuilds
     * the next chunk's prefix so far (dec_next), which a decoder that keeps stepping never does */
    mhla_status st = mhla_decoder_state_write(d->dec, d->state, d->state_bytes);
    if (st == MHLA_OK)
        st = mhla_decoder_step(d->dec, d->b[0], d->b[1], d->b[2], d->b[4], d->b[3], 0, NULL, NULL);
    if (st != MHLA_OK)
        return st;
    if (clFinish(d->queue) != CL_SUCCESS)
        return MHLA_ERR_OPENCL;
    const int64_t C = mhla_decoder_config(d->dec)->chunk;
    const double w0 = cli_now_ms();
    for (int64_t u = 0; u < C && st == MHLA_OK; ++u)
        st = mhla_decoder_step(d->dec, d->b[0], d->b[1], d->b[2], d->b[4], d->b[3], 0, NULL, NULL);
    if (st == MHLA_OK && clFinish(d->queue) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    *ms = (cli_now_ms() - w0) / (double)C;
    return st;
}

void tune_decode_close(tune_decode *d)
{
    if (!d)
        return;
    for (int i = 0; i < 5; ++i)
        if (d->b[i])
            clReleaseMemObject(d->b[i]);
    mhla_decoder_destroy(d->dec);
    free(d->state);
    free(d);
}
