/* The streaming decoder: the recurrent form one token at a time (kernels/decoder.cl); P_i built
 * from Mc's row i when chunk i starts (causal_prefix_one, a GEMV over the finished summaries, or
 * decoder_prefix in parts), or with tiling.dec_next summed by the steps of chunk i - 1, each one
 * launch; prefill through the chunk path writing its summaries straight into the decoder's state.
 * Save/restore: causal/decoder_state.c. */
#include "causal/causal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mhla_decoder_destroy(mhla_decoder *dec)
{
    if (!dec)
        return;
    cl_mem mems[] = {dec->sums, dec->prefix, dec->next, dec->pref_work};
    for (size_t i = 0; i < sizeof mems / sizeof mems[0]; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    for (size_t i = 0; i < sizeof dec->stage / sizeof dec->stage[0]; ++i)
        if (dec->stage[i])
            clReleaseMemObject(dec->stage[i]);
    mhla__causal_destroy(dec->kern);
    mhla__free(dec);
}

mhla_status mhla_decoder_create(mhla_context *ctx, const mhla_config *cfg_in, int64_t capacity, mhla_decoder **out)
{
    mhla_status st = MHLA_OK;
    mhla_decoder *dec = NULL;
    mhla_config cfg;
    mhla_shape shape;
    char msg[512];

    MHLA_FAIL_IF(st, !out, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_create: out is NULL");
    *out = NULL;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_create: context is NULL");
    MHLA_FAIL_IF(st, !cfg_in, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_create: config is NULL");
    MHLA_FAIL_IF(st, cfg_in->causal != 1, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_create: a decoder needs a causal config (causal = 1, e.g. from "
                 "mhla_config_init_causal()), got causal = %d",
                 cfg_in->causal);
    MHLA_FAIL_IF(st, cfg_in->varlen != 0, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_decoder_create: a decoder runs one sequence per batch element: varlen must be 0, got %d",
                 cfg_in->varlen);
    MHLA_FAIL_IF(st, capacity < 1 || capacity > INT_MAX, ctx, MHLA_ERR_INVALID_SHAPE,
                 "mhla_decoder_create: capacity_tokens must be in 1..%d, got %lld", INT_MAX, (long long)capacity);
    cfg = *cfg_in;
    cfg.seq_t = capacity;
    cfg.seq_h = cfg.seq_w = cfg.block_t = cfg.block_h = cfg.block_w = 1;
    MHLA_FAIL_IF(st, cfg.chunk >= 1 && cfg.mixing_rows > 0 && (capacity - 1) / cfg.chunk + 1 > cfg.mixing_rows,
                 ctx, MHLA_ERR_SEQUENCE_TOO_LONG,
                 "mhla_decoder_create: a capacity of %lld tokens is longer than chunk * rows(Mc) = %lld * %lld = %lld",
                 (long long)capacity, (long long)cfg.chunk, (long long)cfg.mixing_rows,
                 (long long)(cfg.chunk * cfg.mixing_rows));
    st = mhla__config_validate(&cfg, &shape, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "mhla_decoder_create: %s", msg);
    mhla__config_resolve(&cfg);

    dec = mhla__calloc(1, sizeof *dec);
    MHLA_FAIL_IF(st, !dec, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating a decoder");
    dec->ctx = ctx;
    dec->capacity = capacity;
    dec->cap_slots = (size_t)shape.m;
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_create(ctx, &cfg, 1, &dec->kern));
    const size_t slot_bytes = dec->kern->slot_floats * sizeof(float);
    MHLA_FAIL_IF(st, (dec->cap_slots + 1 + (size_t)dec->kern->tiling.dec_next) * slot_bytes >
                         ctx->limits.global_mem_bytes,
                 ctx,
                 MHLA_ERR_OUT_OF_DEVICE_MEMORY,
                 "a decoder of %lld tokens keeps %zu chunk summaries of %zu bytes, more than the device's %llu bytes "
                 "of global memory (%s)",
                 (long long)capacity, dec->cap_slots, slot_bytes, (unsigned long long)ctx->limits.global_mem_bytes,
                 ctx->device_name);
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, dec->cap_slots * slot_bytes,
                                                  "the decoder's chunk summaries", &dec->sums));
    MHLA_FORWARD_IF_ERROR(
        st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, slot_bytes, "the decoder's prefix mixture", &dec->prefix));
    if (dec->kern->tiling.dec_next)
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, slot_bytes,
                                                      "the decoder's next prefix mixture", &dec->next));
    *out = dec;
    dec = NULL;
cleanup:
    mhla_decoder_destroy(dec);
    return st;
}

mhla_status mhla_decoder_reset(mhla_decoder *dec)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !dec, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_reset: decoder is NULL");
    dec->position = 0; /* the first step overwrites slot 0 and starts P_1 (P_0 is 0): nothing to clear */
    dec->resume = 0;
cleanup:
    return st;
}

int64_t mhla_decoder_position(const mhla_decoder *dec) { return dec ? dec->position : -1; }
int64_t mhla_decoder_capacity(const mhla_decoder *dec) { return dec ? dec->capacity : -1; }
const mhla_config *mhla_decoder_config(const mhla_decoder *dec) { return dec ? &dec->kern->cfg : NULL; }

size_t mhla_decoder_tensor_bytes(const mhla_decoder *dec, mhla_tensor tensor, int64_t n_tokens)
{
    if (!dec || n_tokens < 1)
        return 0;
    const mhla_config *c = &dec->kern->cfg;
    const size_t elem = mhla__dtype_size(c->dtype), widest = (size_t)(c->dk > c->dv ? c->dk : c->dv);
    if ((uint64_t)n_tokens > SIZE_MAX / ((size_t)dec->kern->bh * widest * elem))
        return 0; /* more bytes than a size_t holds */
    /* k and v: H_kv heads (grouped key/value heads) */
    const size_t rows = (size_t)dec->kern->bh * (size_t)n_tokens, kv_rows = (size_t)dec->kern->bh_kv * (size_t)n_tokens;
    switch (tensor) {
    case MHLA_TENSOR_Q:
        return rows * (size_t)c->dk * elem;
    case MHLA_TENSOR_K:
        return kv_rows * (size_t)c->dk * elem;
    case MHLA_TENSOR_V:
        return kv_rows * (size_t)c->dv * elem;
    case MHLA_TENSOR_OUT:
        return rows * (size_t)c->dv * elem;
    case MHLA_TENSOR_MIXING:
        return (size_t)c->mixing_rows * (size_t)c->mixing_rows * sizeof(float);
    }
    return 0;
}

/* A call's tensors, for the message of a buffer that is too small. */
typedef struct decoder_call {
    const mhla_decoder *dec;
    int64_t n; /* tokens */
} decoder_call;

static void describe(const void *obj, mhla_tensor t, char *buf, size_t size)
{
    const decoder_call *call = obj;
    const mhla_config *c = &call->dec->kern->cfg;
    const long long d = (t == MHLA_TENSOR_Q || t == MHLA_TENSOR_K) ? (long long)c->dk : (long long)c->dv;
    if (t == MHLA_TENSOR_MIXING)
        snprintf(buf, size, "%lld x %lld float32", (long long)c->mixing_rows, (long long)c->mixing_rows);
    else
        snprintf(buf, size, "%lld token(s) of [B,H,D] = [%lld,%lld,%lld] %s", (long long)call->n, (long long)c->batch,
                 (long long)(t == MHLA_TENSOR_K || t == MHLA_TENSOR_V ? call->dec->kern->bh_kv / c->batch : c->heads),
                 d, mhla_dtype_name(c->dtype));
}

/* Buffers of a call on n tokens: sizes, context, aliasing, wait list. */
static mhla_status check_buffers(mhla_decoder *dec, const char *fn, const cl_mem bufs[5], int64_t n,
                                 cl_uint num_wait, const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    const decoder_call call = {dec, n};
    for (int t = MHLA_TENSOR_Q; t <= MHLA_TENSOR_MIXING; ++t)
        MHLA_FORWARD_IF_ERROR(st, mhla__check_mem(dec->ctx, fn, (mhla_tensor)t, bufs[t],
                                                  mhla_decoder_tensor_bytes(dec, (mhla_tensor)t, n), describe, &call));
    MHLA_FORWARD_IF_ERROR(st, mhla__check_call(dec->ctx, fn, bufs, 1, num_wait, wait));
cleanup:
    return st;
}

static mhla_status check_room(mhla_decoder *dec, const char *fn, int64_t n)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, n < 1, dec->ctx, MHLA_ERR_INVALID_SHAPE, "%s: n_tokens must be >= 1, got %lld", fn, (long long)n);
    MHLA_FAIL_IF(st, n > dec->capacity - dec->position, dec->ctx, MHLA_ERR_CAPACITY_EXCEEDED,
                 "%s: %lld token(s) at position %lld would pass the decoder's capacity of %lld tokens", fn,
                 (long long)n, (long long)dec->position, (long long)dec->capacity);
cleanup:
    return st;
}

/* The chunk after chunk i, where the decoder's capacity reaches it: the row of Mc whose prefix
 * mixture chunk i's steps sum; -1 where none follows. */
static cl_int next_row(const mhla_decoder *dec, int64_t chunk)
{
    return (chunk + 1) * dec->kern->cfg.chunk < dec->capacity ? (cl_int)(chunk + 1) : -1;
}

/* The finished chunks whose share of P_{i+1} the steps of chunk i before step t have summed:
 * j < i*t/C (step t sums i*t/C <= j < i*(t+1)/C, an even split of the i of them over the C steps). */
static cl_int next_done(const mhla_decoder *dec, int64_t chunk, int64_t t)
{
    return (cl_int)(chunk * t / dec->kern->cfg.chunk);
}

/* dec_next: where the decoder resumes at `position` (after a prefill or a restored state), next as
 * the steps before would have left it: at a chunk boundary i > 0, P_i whole (the step swaps it in);
 * inside chunk i, P_{i+1}'s first next_done terms. One launch, summed as the steps sum. */
static mhla_status resume_enqueue(mhla_decoder *dec, cl_mem mixing, cl_uint num_wait, const cl_event *wait,
                                  int *launched)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = dec->ctx;
    const mhla_causal *c = dec->kern;
    const int64_t C = c->cfg.chunk, chunk = dec->position / C, t = dec->position % C;
    const cl_int rows_mc = (cl_int)c->cfg.mixing_rows;
    const cl_long width = (cl_long)c->slot_floats;
    cl_int row, count;
    *launched = 0;
    if (t == 0)
        row = (cl_int)chunk, count = (cl_int)chunk;
    else
        row = next_row(dec, chunk), count = next_done(dec, chunk, t);
    if (row <= 0) /* P_0 (0: the step reads none) or no next chunk */
        goto cleanup;
    MHLA_SET_ARGS(st, ctx, c->k_resume, 0, MHLA_ARG(dec->sums), MHLA_ARG(mixing), MHLA_ARG(dec->next),
                  MHLA_ARG(rows_mc), MHLA_ARG(width), MHLA_ARG(row), MHLA_ARG(count));
    const size_t l3[3] = {c->lws_resume, 1, 1}, g3[3] = {mhla__round_up(c->slot_floats, c->lws_resume), 1, 1};
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, c->k_resume, 1, g3, l3, num_wait, wait, NULL,
                                           "clEnqueueNDRangeKernel(decoder_resume)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    *launched = 1;
cleanup:
    return st;
}

/* P_i = sum_{j<i} Mc[i,j] S_j into prefix at chunk i's start, one pass over the finished summaries
 * (dec_next 0). */
static mhla_status chunk_start_enqueue(mhla_decoder *dec, cl_mem mixing, cl_int chunk, cl_uint num_wait,
                                       const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = dec->ctx;
    const mhla_causal *c = dec->kern;
    const cl_int rows_mc = (cl_int)c->cfg.mixing_rows;
    const cl_long width = (cl_long)c->slot_floats;
    size_t local, global;
    if (c->k_step_prefix) { /* decoder.cl's parts: a group per lws / dec_dp floats of the slot */
        local = c->lws_step_prefix;
        const size_t lanes = local / (size_t)c->tiling.dec_dp;
        global = (c->slot_floats + lanes - 1) / lanes * local;
        MHLA_SET_ARGS(st, ctx, c->k_step_prefix, 0, MHLA_ARG(dec->sums), MHLA_ARG(mixing), MHLA_ARG(dec->prefix),
                      MHLA_ARG(rows_mc), MHLA_ARG(width), MHLA_ARG(chunk));
    } else { /* causal_prefix.cl: ONE_COLS floats per work-item */
        const size_t vecs = (size_t)c->tiling.mix_mr * (size_t)c->tiling.mix_nv; /* ONE_NV */
        const size_t cols = (size_t)c->tiling.pre_ve * (vecs > 16 ? 16 : vecs);
        local = c->lws_prefix, global = mhla__round_up((c->slot_floats + cols - 1) / cols, local);
        MHLA_SET_ARGS(st, ctx, c->k_prefix_one, 0, MHLA_ARG(dec->sums), MHLA_ARG(mixing), MHLA_ARG(dec->prefix),
                      MHLA_ARG(rows_mc), MHLA_ARG(width), MHLA_ARG(chunk));
    }
    const size_t g3[3] = {global, 1, 1}, l3[3] = {local, 1, 1};
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, c->k_step_prefix ? c->k_step_prefix : c->k_prefix_one, 1, g3, l3,
                                           num_wait, wait, NULL,
                                           c->k_step_prefix ? "clEnqueueNDRangeKernel(decoder_prefix)"
                                                            : "clEnqueueNDRangeKernel(causal_prefix_one)"));
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
cleanup:
    return st;
}

/* One step on token u of tensors of n tokens. At a chunk boundary P_i is built first (dec_next 0),
 * or is the sum the previous chunk's steps made (dec_next: the two prefix buffers swap roles, and
 * the step is the only launch). */
static mhla_status step_enqueue(mhla_decoder *dec, const cl_mem bufs[5], int64_t n, int64_t u, cl_uint num_wait,
                                const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = dec->ctx;
    const mhla_causal *c = dec->kern;
    const mhla_config *cfg = &c->cfg;
    const int64_t C = cfg->chunk, t = dec->position % C;
    const cl_int chunk = (cl_int)(dec->position / C);
    const cl_int spread = c->tiling.dec_next, fresh = t == 0, last = t == C - 1;
    const cl_int rows_mc = (cl_int)cfg->mixing_rows, token = (cl_int)u;
    const cl_int j_lo = next_done(dec, chunk, t), j_hi = next_done(dec, chunk, t + 1);
    /* dec_next: the row this chunk's steps sum; -1 where a step has nothing to add (fewer earlier
     * chunks than steps: most steps of a short context), so it leaves the sum untouched */
    const cl_int nrow = spread && (fresh || last || j_lo < j_hi) ? next_row(dec, chunk) : -1;
    const mhla_grid grid = mhla__causal_grid(c, n);
    const float feature_eps = cfg->feature_eps, scale = cfg->scale, eps = cfg->eps;
    cl_mem mixing = bufs[MHLA_TENSOR_MIXING];
    /* dec_next: on a chunk's first token the sum the last chunk's steps made becomes P_i, and the
     * old P is overwritten with the new chunk's share (fresh: not read). Else nxt is never touched
     * (nrow -1). */
    cl_mem pref = dec->prefix, nxt = dec->prefix;
    if (spread)
        pref = fresh ? dec->next : dec->prefix, nxt = fresh ? dec->prefix : dec->next;

    if (spread && dec->resume) {
        int launched;
        MHLA_FORWARD_IF_ERROR(st, resume_enqueue(dec, mixing, num_wait, wait, &launched));
        if (launched)
            num_wait = 0, wait = NULL;
    } else if (!spread && fresh) {
        MHLA_FORWARD_IF_ERROR(st, chunk_start_enqueue(dec, mixing, chunk, num_wait, wait));
        num_wait = 0, wait = NULL;
    }
    cl_kernel ks = c->k_step;
    const size_t local[3] = {c->lws_step, 1, 1};
    const size_t global[3] = {c->lws_step, (size_t)c->bh_kv, 1}; /* one group per key/value head */
    MHLA_SET_ARGS(st, ctx, ks, 0, MHLA_ARG(bufs[MHLA_TENSOR_Q]), MHLA_ARG(bufs[MHLA_TENSOR_K]),
                  MHLA_ARG(bufs[MHLA_TENSOR_V]), MHLA_ARG(mixing), MHLA_ARG(dec->sums), MHLA_ARG(pref),
                  MHLA_ARG(bufs[MHLA_TENSOR_OUT]), MHLA_ARG(grid), MHLA_ARG(token), MHLA_ARG(chunk), MHLA_ARG(rows_mc),
                  MHLA_ARG(fresh), MHLA_ARG(feature_eps), MHLA_ARG(scale), MHLA_ARG(eps), MHLA_ARG(nxt),
                  MHLA_ARG(nrow), MHLA_ARG(j_lo), MHLA_ARG(j_hi), MHLA_ARG(last));
    MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, ks, 2, global, local, num_wait, wait, done,
                                           "clEnqueueNDRangeKernel(decoder_step)"));
    if (spread)
        dec->prefix = pref, dec->next = nxt;
    dec->resume = 0;
    dec->position += 1;
cleanup:
    return st;
}

/* The prefill's prefix-mixture rows, grown on demand. */
static mhla_status reserve_pref_work(mhla_decoder *dec, size_t rows)
{
    mhla_status st = MHLA_OK;
    cl_mem grown = NULL;
    if (rows <= dec->pref_work_rows)
        goto cleanup;
    MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(dec->ctx, CL_MEM_READ_WRITE,
                                                  rows * dec->kern->slot_floats * sizeof(float),
                                                  "the prefill's prefix mixtures", &grown));
    if (dec->pref_work)
        clReleaseMemObject(dec->pref_work); /* enqueued work keeps it alive until it has run */
    dec->pref_work = grown;
    dec->pref_work_rows = rows;
    grown = NULL;
cleanup:
    if (grown)
        clReleaseMemObject(grown);
    return st;
}

/* Chunks one chunk-path run of a prefill takes at most: the prefix-mixture rows it needs stay
 * bounded (a 32k-token prompt would otherwise want 512 of them next to the 512 summaries). */
#define PREFILL_RUN_CHUNKS 64

/* n tokens: recurrent steps up to the next chunk boundary, then the chunk path in runs of at most
 * PREFILL_RUN_CHUNKS chunks, each writing its chunks' summaries into their slots (the next run's
 * prefix mixtures read them); when the last run ends inside a chunk, that chunk's P_i goes to
 * `prefix` for the steps that follow. Everything that can run out of memory (the runs' chunk
 * tables, their device copies, the prefix-mixture rows) is made before the first step, so that
 * such a failure leaves the decoder as it was. */
static mhla_status prefill_enqueue(mhla_decoder *dec, const cl_mem bufs[5], int64_t n, cl_uint num_wait,
                                   const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = dec->ctx;
    mhla_causal *c = dec->kern;
    const int64_t C = c->cfg.chunk, pos0 = dec->position, into = pos0 % C;
    const int64_t head = into == 0 ? 0 : (n < C - into ? n : C - into);
    const int64_t run_tokens = PREFILL_RUN_CHUNKS * C;
    const size_t n_runs = (size_t)((n - head + run_tokens - 1) / run_tokens);
    const size_t slot_bytes = c->slot_floats * sizeof(float);
    mhla_chunk_tables *tables = NULL;
    cl_mem *uploads = NULL; /* per run: the chunk table's and the tile table's device copies */
    size_t most_chunks = 0;

    if (n_runs > 0) {
        tables = mhla__calloc(n_runs, sizeof *tables);
        uploads = mhla__calloc(2 * n_runs, sizeof *uploads);
        MHLA_FAIL_IF(st, !tables || !uploads, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY,
                     "out of host memory for the prefill's chunk tables");
    }
    for (size_t r = 0; r < n_runs; ++r) {
        const int64_t u = head + (int64_t)r * run_tokens, len = n - u < run_tokens ? n - u : run_tokens;
        MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_add(ctx, &tables[r], u, len, (pos0 + u) / C, 0, C, &c->tiling));
        MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_upload(ctx, &tables[r], &uploads[2 * r], &uploads[2 * r + 1]));
        MHLA_FORWARD_IF_ERROR(st, mhla__causal_gemm_reserve(c, &tables[r], NULL));
        if (tables[r].n_chunks > most_chunks)
            most_chunks = tables[r].n_chunks;
    }
    MHLA_FORWARD_IF_ERROR(st, reserve_pref_work(dec, most_chunks));

    for (int64_t u = 0; u < head; ++u) {
        if (u > 0)
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, step_enqueue(dec, bufs, n, u, u == 0 ? num_wait : 0, u == 0 ? wait : NULL, NULL));
    }
    for (size_t r = 0; r < n_runs; ++r) {
        const int64_t u = head + (int64_t)r * run_tokens, len = n - u < run_tokens ? n - u : run_tokens;
        mhla_causal_run run = {bufs[MHLA_TENSOR_Q], bufs[MHLA_TENSOR_K], bufs[MHLA_TENSOR_V], bufs[MHLA_TENSOR_MIXING],
                               bufs[MHLA_TENSOR_OUT], n, uploads[2 * r], uploads[2 * r + 1], &tables[r], dec->sums,
                               dec->pref_work, NULL};
        const int first = u == 0;
        if (!first)
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue(c, &run, first ? num_wait : 0, first ? wait : NULL, NULL));
        dec->position += len;
        dec->resume = 1; /* no step summed P_{i+1}'s share of these chunks */
        if (u + len == n && dec->position % C != 0) {
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
            MHLA_CL_TRY(st, ctx,
                        clEnqueueCopyBuffer(ctx->queue, dec->pref_work, dec->prefix,
                                            (tables[r].n_chunks - 1) * slot_bytes, 0, slot_bytes, 0, NULL, NULL),
                        "clEnqueueCopyBuffer (the running chunk's prefix mixture)");
        }
    }
    if (done) {
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_CL_TRY(st, ctx, clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, done), "clEnqueueMarkerWithWaitList");
    }
cleanup:
    /* Enqueued kernels hold their own references to the tables' device copies. */
    for (size_t r = 0; tables && r < n_runs; ++r)
        mhla__chunk_tables_free(&tables[r]);
    for (size_t i = 0; uploads && i < 2 * n_runs; ++i)
        if (uploads[i])
            clReleaseMemObject(uploads[i]);
    mhla__free(tables);
    mhla__free(uploads);
    return st;
}

mhla_status mhla_decoder_step(mhla_decoder *dec, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem out,
                              cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !dec, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_step: decoder is NULL");
    MHLA_FORWARD_IF_ERROR(st, check_room(dec, "mhla_decoder_step", 1));
    const cl_mem bufs[] = {q, k, v, out, mixing};
    MHLA_FORWARD_IF_ERROR(st, check_buffers(dec, "mhla_decoder_step", bufs, 1, num_wait, wait));
    MHLA_FORWARD_IF_ERROR(st, step_enqueue(dec, bufs, 1, 0, num_wait, wait, done));
cleanup:
    return st;
}

mhla_status mhla_decoder_prefill(mhla_decoder *dec, cl_mem q, cl_mem k, cl_mem v, cl_mem mixing, cl_mem out,
                                 int64_t n_tokens, cl_uint num_wait, const cl_event *wait, cl_event *done)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !dec, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_decoder_prefill: decoder is NULL");
    MHLA_FORWARD_IF_ERROR(st, check_room(dec, "mhla_decoder_prefill", n_tokens));
    const cl_mem bufs[] = {q, k, v, out, mixing};
    MHLA_FORWARD_IF_ERROR(st, check_buffers(dec, "mhla_decoder_prefill", bufs, n_tokens, num_wait, wait));
    MHLA_FORWARD_IF_ERROR(st, prefill_enqueue(dec, bufs, n_tokens, num_wait, wait, done));
cleanup:
    return st;
}

/* The device call of a host call: n steps or one prefill on the staging buffers. */
typedef struct host_run {
    mhla_decoder *dec;
    int64_t n;
    int prefill;
} host_run;

static mhla_status run_staged(void *arg)
{
    mhla_status st = MHLA_OK;
    const host_run *r = arg;
    mhla_decoder *dec = r->dec;
    if (r->prefill) {
        MHLA_FORWARD_IF_ERROR(st, prefill_enqueue(dec, dec->stage, r->n, 0, NULL, NULL));
    } else {
        for (int64_t u = 0; u < r->n; ++u) {
            if (u > 0)
                MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(dec->ctx));
            MHLA_FORWARD_IF_ERROR(st, step_enqueue(dec, dec->stage, r->n, u, 0, NULL, NULL));
        }
    }
cleanup:
    return st;
}

/* Host calls: copy the inputs into the decoder's staging buffers (grown to n tokens), run n steps
 * or one prefill, read the output back. */
static mhla_status host_call(mhla_decoder *dec, const char *fn, const void *q, const void *k, const void *v,
                             const float *mixing, void *out, int64_t n, int prefill)
{
    mhla_status st = MHLA_OK;

    MHLA_FAIL_IF(st, !dec, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: decoder is NULL", fn);
    const void *inputs[] = {q, k, v, NULL, mixing};
    for (int t = MHLA_TENSOR_Q; t <= MHLA_TENSOR_MIXING; ++t)
        MHLA_FAIL_IF(st, t == MHLA_TENSOR_OUT ? !out : !inputs[t], dec->ctx, MHLA_ERR_INVALID_ARGUMENT,
                     "%s: %s pointer is NULL", fn, mhla__tensor_name((mhla_tensor)t));
    MHLA_FORWARD_IF_ERROR(st, check_room(dec, fn, n));
    mhla_staged bufs[5];
    for (int t = MHLA_TENSOR_Q; t <= MHLA_TENSOR_MIXING; ++t) {
        const int is_out = t == MHLA_TENSOR_OUT;
        bufs[t] = (mhla_staged){mhla__tensor_name((mhla_tensor)t), inputs[t], is_out ? out : NULL,
                                mhla_decoder_tensor_bytes(dec, (mhla_tensor)t, n), CL_MEM_READ_WRITE, &dec->stage[t],
                                &dec->stage_bytes[t], is_out};
    }
    host_run r = {dec, n, prefill};
    const mhla_stage_ops ops = {run_staged, &r, "clEnqueueWriteBuffer (decoder host input)",
                                "clEnqueueReadBuffer (decoder host output)"};
    st = mhla__host_stage(dec->ctx, bufs, 5, &ops);
cleanup:
    return st;
}

mhla_status mhla_decoder_step_host(mhla_decoder *dec, const void *q, const void *k, const void *v,
                                   const float *mixing, void *out, int64_t n_tokens)
{
    return host_call(dec, "mhla_decoder_step_host", q, k, v, mixing, out, n_tokens, 0);
}

mhla_status mhla_decoder_prefill_host(mhla_decoder *dec, const void *q, const void *k, const void *v,
                                      const float *mixing, void *out, int64_t n_tokens)
{
    return host_call(dec, "mhla_decoder_prefill_host", q, k, v, mixing, out, n_tokens, 1);
}
