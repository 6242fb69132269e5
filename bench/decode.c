/* mhla-bench's decode op: a streaming decoder (mhla_decoder_*) prefilled once with the row's N
 * tokens of context and its state saved; every run restores that state and takes one step (both
 * untimed: the first step after a restore also rebuilds what the state does not hold), then steps C
 * tokens, so that exactly one of them starts a chunk; each step is timed from the previous step's
 * end to its own. */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

typedef struct bench_decode {
    mhla_decoder *dec;
    cl_mem io[4];        /* q, k, v, out of one token for every batch element and head ([B,H,D]) */
    void *state;         /* the decoder's state at the end of the context (mhla_decoder_state_read) */
    size_t state_size;
    int steps, marked;   /* steps per run; the one that starts a chunk */
    cl_event *events;    /* the last run's steps, each one's done event */
} bench_decode;

/* Flops of one step, as linear attention credits one token: 2*B*(H_kv + H)*Dk*Dv (update the
 * running summary of each key/value head, read it out for each query head); the step's share of the
 * next chunk's P is in the time, not in this count. */
double bench_decode_flops(const bench_shape *s)
{
    const double hkv = (double)(s->kv_heads ? s->kv_heads : s->heads);
    return 2.0 * (double)s->batch * (hkv + (double)s->heads) * (double)s->dk * (double)s->dv;
}

/* Bytes of one step: q read and out written for one token of each query head; k, v, the running
 * summary S_cur read and written and P_i read (Dk x Dv each, normalizer none) of each key/value
 * head, f32. (With dec_next a step also reads and writes the next chunk's prefix and reads about
 * i/C finished summaries: not counted, as the chunk start's pass is not.) */
double bench_decode_bytes(const bench_shape *s)
{
    const double hkv = (double)(s->kv_heads ? s->kv_heads : s->heads);
    return 4.0 * (double)s->batch *
           ((double)s->heads * (double)(s->dk + s->dv) + hkv * (double)(s->dk + s->dv + 3 * s->dk * s->dv));
}

static void release_events(bench_decode *d)
{
    for (int i = 0; d->events && i < d->steps; ++i)
        if (d->events[i]) {
            clReleaseEvent(d->events[i]);
            d->events[i] = NULL;
        }
}

void bench_decode_destroy(bench_case *c)
{
    bench_decode *d = c->decode;
    if (d) {
        clFinish(mhla_context_queue(c->ctx)); /* nothing of the decoder's may still run */
        release_events(d);
        free(d->events);
        for (int i = 0; i < 4; ++i)
            if (d->io[i])
                clReleaseMemObject(d->io[i]);
        mhla_decoder_destroy(d->dec);
        free(d->state);
        free(d);
    }
    if (c->mixing)
        clReleaseMemObject(c->mixing);
    c->decode = NULL;
    c->mixing = NULL;
}

/* One token's q, k, v (random: the first bytes of the row's inputs) and out. */
static mhla_status make_step_buffers(bench_case *c, bench_decode *d)
{
    const mhla_tensor tensors[4] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_OUT};
    const cl_mem from[3] = {c->in->q, c->in->k, c->in->v};
    cl_int e = CL_SUCCESS;
    for (int i = 0; i < 4 && e == CL_SUCCESS; ++i) {
        const size_t bytes = mhla_decoder_tensor_bytes(d->dec, tensors[i], 1);
        d->io[i] = clCreateBuffer(mhla_context_cl_context(c->ctx), CL_MEM_READ_WRITE, bytes, NULL, &e);
        if (e == CL_SUCCESS && i < 3)
            e = clEnqueueCopyBuffer(mhla_context_queue(c->ctx), from[i], d->io[i], 0, 0, bytes, 0, NULL, NULL);
    }
    return e == CL_SUCCESS ? MHLA_OK : MHLA_ERR_OUT_OF_DEVICE_MEMORY;
}

mhla_status bench_decode_create(bench_case *c, const bench_shape *s)
{
    mhla_status st = MHLA_OK;
    const int64_t context = bench_shape_n(s), chunk = s->chunk;
    bench_decode *d = calloc(1, sizeof *d);
    if (!d)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    c->decode = d;
    d->steps = (int)chunk;
    /* a run's steps are at positions context + 1 .. context + C; context + 1 + marked is a multiple of C */
    d->marked = (int)((chunk - (context + 1) % chunk) % chunk);
    /* Room for the context, the untimed step and one run of steps; Mc covers them all. */
    mhla_config cfg = bench_causal_config(s);
    cfg.mixing_rows = (context + 1 + chunk + chunk - 1) / chunk;
    st = mhla_decoder_create(c->ctx, &cfg, context + 1 + chunk, &d->dec);
    if (st == MHLA_OK)
        st = bench_mixing_create(c->ctx, BENCH_CAUSAL_MIXING_INIT, cfg.mixing_rows, 1, 1, &c->mixing);
    if (st == MHLA_OK)
        st = make_step_buffers(c, d);
    if (st == MHLA_OK)
        st = mhla_decoder_prefill(d->dec, c->in->q, c->in->k, c->in->v, c->mixing, c->in->out, context, 0, NULL,
                                  NULL);
    if (st == MHLA_OK) { /* state_read waits for the prefill */
        d->state_size = mhla_decoder_state_size(d->dec);
        d->state = malloc(d->state_size);
        d->events = calloc((size_t)d->steps, sizeof *d->events);
        st = d->state && d->events ? mhla_decoder_state_read(d->dec, d->state, d->state_size)
                                   : MHLA_ERR_OUT_OF_HOST_MEMORY;
    }
    /* Up to the chunk start, a first launch of each step kernel (PoCL compiles a kernel for its
     * local size then), so that the warm-up run's time, which sets the number of runs, is a run's. */
    for (int i = 0; st == MHLA_OK && i <= d->marked + 1; ++i)
        st = mhla_decoder_step(d->dec, d->io[0], d->io[1], d->io[2], c->mixing, d->io[3], 0, NULL, NULL);
    if (st == MHLA_OK && clFinish(mhla_context_queue(c->ctx)) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    return st; /* the sweep destroys the case either way; runs restore the saved state first */
}

/* The saved state, and the step after it, which also rebuilds the next chunk's prefix mixture so
 * far (the state does not hold it; a decoder that keeps stepping never does this again), done
 * before the run is gated. */
mhla_status bench_decode_prepare(bench_case *c)
{
    bench_decode *d = c->decode;
    release_events(d);
    mhla_status st = mhla_decoder_state_write(d->dec, d->state, d->state_size);
    if (st == MHLA_OK)
        st = mhla_decoder_step(d->dec, d->io[0], d->io[1], d->io[2], c->mixing, d->io[3], 0, NULL, NULL);
    if (st == MHLA_OK && clFinish(mhla_context_queue(c->ctx)) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    return st;
}

mhla_status bench_decode_enqueue(bench_case *c, cl_event *done)
{
    bench_decode *d = c->decode;
    mhla_status st = MHLA_OK;
    release_events(d);
    for (int i = 0; i < d->steps && st == MHLA_OK; ++i)
        st = mhla_decoder_step(d->dec, d->io[0], d->io[1], d->io[2], c->mixing, d->io[3], i ? 1 : 0,
                               i ? &d->events[i - 1] : NULL, &d->events[i]);
    if (st == MHLA_OK && clRetainEvent(d->events[d->steps - 1]) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    if (st == MHLA_OK)
        *done = d->events[d->steps - 1];
    return st;
}

int bench_decode_steps(const bench_case *c) { return c->decode->steps; }

cl_mem bench_decode_step_output(const bench_case *c) { return c->decode->io[3]; }

int bench_decode_marked_step(const bench_case *c) { return c->decode->marked; }

mhla_status bench_decode_step_ends(bench_case *c, cl_ulong *end_ns)
{
    const bench_decode *d = c->decode;
    for (int i = 0; i < d->steps; ++i)
        if (!d->events[i] || clGetEventProfilingInfo(d->events[i], CL_PROFILING_COMMAND_END, sizeof end_ns[i],
                                                     &end_ns[i], NULL) != CL_SUCCESS)
            return MHLA_ERR_OPENCL;
    return MHLA_OK;
}
