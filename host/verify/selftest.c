/* mhla_selftest(): every path of the library on the context's device at small shapes, each
 * checked against the double-precision reference under the tolerances of docs/spec.md
 * "Accuracy the tests hold". What a user runs first on a device nobody here has seen (`mhla selftest`),
 * and what the test suites run on each OpenCL implementation. Outputs are device buffers filled with NaN
 * before each run, so an element a kernel forgets to write fails the comparison. */
#include "mhla_reference.h"

#include "verify/verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum case_kind { RUN_FORWARD, RUN_VARLEN, RUN_DECODER_STEP, RUN_DECODER_PREFILL, RUN_SOFTMAX } case_kind;

typedef struct selftest_case {
    char name[64];
    case_kind kind;
    mhla_config cfg;
    const int32_t *cu; /* RUN_VARLEN: offsets */
    size_t seqs;
} selftest_case;

/* Deterministic inputs (no dependence on the C library's rand). */
static void fill(float *x, size_t n, uint32_t seed, float lo, float hi)
{
    uint64_t s = 0x2545F4914F6CDD1DULL ^ ((uint64_t)seed * 0x9E3779B97F4A7C15ULL);
    for (size_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = lo + (hi - lo) * (float)((s >> 40) & 0xFFFFFF) / 16777216.0f;
    }
}

/* ---- the cases ------------------------------------------------------------------------------- */

static const int32_t varlen_offsets[] = {0, 1, 17, 17, 50, 63};

/* B = 2, H = 2, Dk = 16, Dv = 12 over n tokens: m blocks (non-causal), or chunks of `chunk`. */
static mhla_config small_config(int causal, int64_t n, int64_t m_or_chunk)
{
    mhla_config c;
    if (causal)
        mhla_config_init_causal(&c), c.chunk = m_or_chunk;
    else
        mhla_config_init(&c), c.block_t = m_or_chunk;
    c.batch = 2, c.heads = 2, c.dk = 16, c.dv = 12, c.seq_t = n;
    return c;
}


/* Adds a case; returns the count. */
static size_t add(selftest_case *cases, size_t n, case_kind kind, const mhla_config *cfg, const char *fmt,
                  const char *a, const char *b)
{
    selftest_case *c = &cases[n];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->cfg = *cfg;
    snprintf(c->name, sizeof c->name, fmt, a ? a : "", b ? b : "");
    if (kind == RUN_VARLEN) {
        c->cu = varlen_offsets;
        c->seqs = sizeof varlen_offsets / sizeof varlen_offsets[0] - 1;
    }
    return n + 1;
}

#define MAX_CASES 96

/* The matrix: forward over 1D/2D/3D grids x normalizers x feature maps (quick: the default map,
 * plus every map on 1D), layouts and odd sizes; causal, varlen, decoder; f16/bf16 storage on each
 * path; softmax. */
static size_t make_cases(int quick, selftest_case *cases)
{
    size_t n = 0;
    static const char *grid_names[] = {"1d", "2d", "3d"};
    for (int g = 0; g < 3; ++g)
        for (int norm = 0; norm <= 2; ++norm)
            for (int fm = 0; fm <= 3; ++fm) {
                if (quick && fm != MHLA_FEATURE_RELU_EPS && !(g == 0 && norm == 0))
                    continue;
                mhla_config c = small_config(0, 48, 4);
                if (g == 1)
                    c.seq_t = 1, c.seq_h = 8, c.seq_w = 6, c.block_t = 1, c.block_h = 2, c.block_w = 3;
                else if (g == 2)
                    c.seq_t = 4, c.seq_h = 4, c.seq_w = 4, c.block_t = 2, c.block_h = 2, c.block_w = 2;
                c.normalizer = (mhla_normalizer)norm;
                c.feature_map = (mhla_feature_map)fm;
                char what[48];
                snprintf(what, sizeof what, "%s/%s", mhla_normalizer_name(c.normalizer),
                         mhla_feature_map_name(c.feature_map));
                n = add(cases, n, RUN_FORWARD, &c, "forward-%s/%s", grid_names[g], what);
            }
    mhla_config c = small_config(0, 48, 4);
    c.layout = MHLA_LAYOUT_BHND;
    n = add(cases, n, RUN_FORWARD, &c, "forward-1d/%s%s", "bhnd", NULL);
    c = small_config(0, 45, 3);
    c.dk = 24, c.dv = 40, c.batch = 1, c.heads = 3;
    n = add(cases, n, RUN_FORWARD, &c, "forward-1d/%s%s", "dk24-dv40", NULL);
    c = small_config(0, 40, 1);
    n = add(cases, n, RUN_FORWARD, &c, "forward-1d/%s%s", "m1-linear", NULL);
    /* grouped key/value heads (one of the two heads': multi-query) and cross-attention: an 8x6 image
     * in 2x3 blocks attending to 20 tokens in 4 blocks; causal grouped heads below */
    c = small_config(0, 48, 4);
    c.kv_heads = 1;
    n = add(cases, n, RUN_FORWARD, &c, "forward-1d/%s%s", "gqa", NULL);
    c = small_config(0, 1, 4);
    c.seq_h = 8, c.seq_w = 6, c.block_t = 1, c.block_h = 2, c.block_w = 3, c.kv_heads = 1;
    c.kv_seq_t = 20, c.kv_seq_h = c.kv_seq_w = 1, c.kv_block_t = 4, c.kv_block_h = c.kv_block_w = 1;
    n = add(cases, n, RUN_FORWARD, &c, "cross/%s%s", "2d-1d-gqa", NULL);
    if (!quick) { /* long blocks are split in segments and reduced */
        c = small_config(0, 1024, 2);
        c.batch = 1, c.heads = 1;
        n = add(cases, n, RUN_FORWARD, &c, "forward-1d/%s%s", "split-blocks", NULL);
    }

    c = small_config(1, 100, 16); /* a partial last chunk */
    n = add(cases, n, RUN_FORWARD, &c, "causal/%s%s", "none", NULL);
    c.normalizer = MHLA_NORMALIZER_PAPER;
    n = add(cases, n, RUN_FORWARD, &c, "causal/%s%s", "paper", NULL);
    c = small_config(1, 37, 7);
    c.layout = MHLA_LAYOUT_BHND, c.dk = 8, c.dv = 20;
    n = add(cases, n, RUN_FORWARD, &c, "causal/%s%s", "bhnd-c7", NULL);
    c.kv_heads = 1;
    n = add(cases, n, RUN_FORWARD, &c, "causal/%s%s", "bhnd-c7-gqa", NULL);
    /* 38 chunks: past the prefix's first 32 earlier chunks (CLBlast's blocks where a row has
     * gemm_rows 32 and the prefix untiled, the GPU rows' tiles of cp_ti 32 chunks). */
    c = small_config(1, 600, 16);
    c.batch = 1, c.heads = 1, c.dk = 8, c.dv = 8;
    n = add(cases, n, RUN_FORWARD, &c, "causal/%s%s", "38-chunks", NULL);
    c = small_config(1, 63, 16);
    c.batch = 1, c.varlen = 1;
    n = add(cases, n, RUN_VARLEN, &c, "varlen/%s%s", "none", NULL);
    c.normalizer = MHLA_NORMALIZER_PAPER;
    n = add(cases, n, RUN_VARLEN, &c, "varlen/%s%s", "paper", NULL);
    c = small_config(1, 40, 16);
    n = add(cases, n, RUN_DECODER_STEP, &c, "decoder/%s%s", "step", NULL);
    c.normalizer = MHLA_NORMALIZER_PAPER;
    n = add(cases, n, RUN_DECODER_STEP, &c, "decoder/%s%s", "step-paper", NULL);
    n = add(cases, n, RUN_DECODER_PREFILL, &c, "decoder/%s%s", "prefill-step", NULL);

    for (int dt = MHLA_DTYPE_F16; dt <= MHLA_DTYPE_BF16; ++dt) {
        const char *dn = mhla_dtype_name((mhla_dtype)dt);
        c = small_config(0, 1, 4);
        c.seq_h = 8, c.seq_w = 6, c.block_h = 2, c.block_w = 3, c.block_t = 1, c.dtype = (mhla_dtype)dt;
        n = add(cases, n, RUN_FORWARD, &c, "forward-2d/%s%s", dn, NULL);
        c = small_config(1, 100, 16);
        c.dtype = (mhla_dtype)dt;
        n = add(cases, n, RUN_FORWARD, &c, "causal/%s%s", dn, NULL);
        c = small_config(1, 63, 16);
        c.batch = 1, c.varlen = 1, c.dtype = (mhla_dtype)dt;
        n = add(cases, n, RUN_VARLEN, &c, "varlen/%s%s", dn, NULL);
        c = small_config(1, 40, 16);
        c.dtype = (mhla_dtype)dt;
        n = add(cases, n, RUN_DECODER_STEP, &c, "decoder/%s%s", dn, NULL);
    }

    for (int dt = MHLA_DTYPE_F32; dt <= MHLA_DTYPE_BF16; ++dt) {
        if (quick && dt != MHLA_DTYPE_F32)
            continue;
        c = small_config(0, 70, 1);
        c.dtype = (mhla_dtype)dt;
        n = add(cases, n, RUN_SOFTMAX, &c, "softmax/%s%s", mhla_dtype_name((mhla_dtype)dt), NULL);
    }
    c = small_config(0, 33, 1);
    c.layout = MHLA_LAYOUT_BHND, c.dk = 24, c.dv = 20;
    n = add(cases, n, RUN_SOFTMAX, &c, "softmax/%s%s", "bhnd-dk24-dv20", NULL);
    return n;
}

/* ---- one case ---------------------------------------------------------------------------------- */

typedef struct run_state {
    mhla_context *ctx;
    const selftest_case *tc;
    float *q, *k, *v, *mix, *out;
    double *ref;
    void *q_dev, *k_dev, *v_dev, *out_dev; /* what the device reads and writes (f32, or 16-bit) */
    size_t nq, nv, nm;
    size_t nk, nkv, no; /* k's, v's and out's elements (nq, nv and nv but for cross-attention and grouped heads) */
    int64_t rows; /* of the mixing matrix */
} run_state;

static size_t elem_size(mhla_dtype t) { return t == MHLA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t); }

/* A device buffer holding `bytes` of `host`, or filled with NaN (host NULL) in the storage type. */
static mhla_status device_buffer(mhla_context *ctx, const void *host, size_t bytes, mhla_dtype t, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    cl_context cl = mhla_context_cl_context(ctx);
    *out = mhla__cl_create_buffer(cl, host ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE, bytes,
                          (void *)host, &err);
    if (err != CL_SUCCESS)
        return mhla__fail_cl(ctx, err, "clCreateBuffer (selftest)", __FILE__, __LINE__);
    if (!host) {
        const uint32_t nan32 = 0x7FC00000u;
        const uint16_t nan16 = t == MHLA_DTYPE_F16 ? 0x7E00u : 0x7FC0u;
        const void *pattern = t == MHLA_DTYPE_F32 ? (const void *)&nan32 : (const void *)&nan16;
        /* Waited for: the context's queue may run out of order. */
        cl_event filled = NULL;
        err = clEnqueueFillBuffer(mhla_context_queue(ctx), *out, pattern, elem_size(t), 0, bytes, 0, NULL, &filled);
        if (err == CL_SUCCESS)
            err = clWaitForEvents(1, &filled);
        if (filled)
            clReleaseEvent(filled);
        if (err != CL_SUCCESS)
            return mhla__fail_cl(ctx, err, "clEnqueueFillBuffer (selftest)", __FILE__, __LINE__);
    }
    return MHLA_OK;
}

static void release(cl_mem *m)
{
    if (*m)
        clReleaseMemObject(*m);
    *m = NULL;
}

/* Rounds x to the storage type (what the device sees) and keeps its bits in `stored`. */
static void to_storage(mhla_dtype t, float *x, void *stored, size_t n)
{
    if (t == MHLA_DTYPE_F32) {
        memcpy(stored, x, n * sizeof *x);
        return;
    }
    mhla_convert(t, stored, MHLA_DTYPE_F32, x, n);
    mhla_convert(MHLA_DTYPE_F32, x, t, stored, n);
}

static mhla_status make_inputs(run_state *s, uint32_t seed)
{
    const mhla_config *c = &s->tc->cfg;
    const mhla_dtype t = c->dtype;
    s->nq = mhla_config_tensor_elems(c, MHLA_TENSOR_Q);
    s->nv = mhla_config_tensor_elems(c, MHLA_TENSOR_V);
    s->nk = mhla_config_tensor_elems(c, MHLA_TENSOR_K);
    s->nkv = s->nv;
    s->no = mhla_config_tensor_elems(c, MHLA_TENSOR_OUT);
    s->rows = c->causal ? (c->mixing_rows ? c->mixing_rows : (c->seq_t + c->chunk - 1) / c->chunk)
                        : c->block_t * c->block_h * c->block_w;
    s->nm = c->causal ? (size_t)(s->rows * s->rows) : mhla_config_tensor_elems(c, MHLA_TENSOR_MIXING); /* M x M_kv */
    s->q = mhla__malloc(s->nq * sizeof(float)), s->k = mhla__malloc(s->nk * sizeof(float));
    s->v = mhla__malloc(s->nkv * sizeof(float)), s->out = mhla__malloc(s->no * sizeof(float));
    s->mix = mhla__malloc(s->nm * sizeof(float)), s->ref = mhla__malloc(s->no * sizeof(double));
    s->q_dev = mhla__malloc(s->nq * elem_size(t)), s->k_dev = mhla__malloc(s->nk * elem_size(t));
    s->v_dev = mhla__malloc(s->nkv * elem_size(t)), s->out_dev = mhla__malloc(s->no * elem_size(t));
    if (!s->q || !s->k || !s->v || !s->out || !s->mix || !s->ref || !s->q_dev || !s->k_dev || !s->v_dev ||
        !s->out_dev)
        return mhla__fail(s->ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the selftest's inputs");
    /* Positive q, k for the identity feature map (as a caller who applied its own map passes). */
    const float lo = c->feature_map == MHLA_FEATURE_NONE ? 0.05f : -1.0f;
    fill(s->q, s->nq, seed * 4 + 1, lo, 1.0f);
    fill(s->k, s->nk, seed * 4 + 2, lo, 1.0f);
    fill(s->v, s->nkv, seed * 4 + 3, -1.0f, 1.0f);
    /* A stand-in for a trained Mc: positive weights where a denominator must stay away from 0;
     * causal matrices get NaN above the diagonal, which no causal path may read. */
    fill(s->mix, s->nm, seed * 4 + 4, c->normalizer == MHLA_NORMALIZER_NONE ? -0.5f : 0.05f, 1.0f);
    if (c->causal)
        for (int64_t i = 0; i < s->rows; ++i)
            for (int64_t j = i + 1; j < s->rows; ++j)
                s->mix[i * s->rows + j] = NAN;
    to_storage(t, s->q, s->q_dev, s->nq);
    to_storage(t, s->k, s->k_dev, s->nk);
    to_storage(t, s->v, s->v_dev, s->nkv);
    return MHLA_OK;
}

static void free_inputs(run_state *s)
{
    void *p[] = {s->q, s->k, s->v, s->mix, s->out, s->ref, s->q_dev, s->k_dev, s->v_dev, s->out_dev};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; ++i)
        mhla__free(p[i]);
}

/* mhla_forward (or varlen, or softmax) on device buffers; out read back into s->out_dev. */
static mhla_status run_plan(run_state *s)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = s->ctx;
    const mhla_config *c = &s->tc->cfg;
    const size_t es = elem_size(c->dtype);
    mhla_plan *plan = NULL;
    cl_mem b[5] = {NULL, NULL, NULL, NULL, NULL};
    cl_event done = NULL;
    if (s->tc->kind == RUN_SOFTMAX)
        MHLA_FORWARD_IF_ERROR(st, mhla_softmax_plan_create(ctx, c, &plan));
    else
        MHLA_FORWARD_IF_ERROR(st, mhla_plan_create(ctx, c, &plan));
    MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, s->q_dev, s->nq * es, c->dtype, &b[MHLA_TENSOR_Q]));
    MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, s->k_dev, s->nk * es, c->dtype, &b[MHLA_TENSOR_K]));
    MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, s->v_dev, s->nkv * es, c->dtype, &b[MHLA_TENSOR_V]));
    MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, NULL, s->no * es, c->dtype, &b[MHLA_TENSOR_OUT]));
    MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, s->mix, s->nm * sizeof(float), MHLA_DTYPE_F32,
                                            &b[MHLA_TENSOR_MIXING]));
    if (s->tc->kind == RUN_VARLEN)
        MHLA_FORWARD_IF_ERROR(st, mhla_forward_varlen(plan, b[0], b[1], b[2], b[4], s->tc->cu, s->tc->seqs, b[3], 0,
                                                      NULL, &done));
    else
        MHLA_FORWARD_IF_ERROR(st, mhla_forward(plan, b[0], b[1], b[2], b[4], b[3], 0, NULL, &done));
    MHLA_CL_TRY(st, ctx,
                clEnqueueReadBuffer(mhla_context_queue(ctx), b[MHLA_TENSOR_OUT], CL_TRUE, 0, s->no * es, s->out_dev,
                                    1, &done, NULL),
                "clEnqueueReadBuffer (selftest output)");
cleanup:
    if (done)
        clReleaseEvent(done);
    clFinish(mhla_context_queue(ctx));
    for (int i = 0; i < 5; ++i)
        release(&b[i]);
    mhla_plan_destroy(plan);
    return st;
}

/* The decoder over whole sequences: prefill of the first 21 tokens (RUN_DECODER_PREFILL), then one
 * step per token, each into a NaN-filled one-token output. */
static mhla_status run_decoder(run_state *s)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = s->ctx;
    cl_command_queue queue = mhla_context_queue(ctx);
    const mhla_config *c = &s->tc->cfg;
    const mhla_dtype t = c->dtype;
    const size_t es = elem_size(t), bh = (size_t)(c->batch * c->heads);
    const int64_t n = c->seq_t, prompt = s->tc->kind == RUN_DECODER_PREFILL ? 21 : 0;
    mhla_decoder *dec = NULL;
    cl_event done = NULL; /* waited for: the context's queue may run out of order */
    cl_mem b[5] = {NULL, NULL, NULL, NULL, NULL}, pb[5] = {NULL, NULL, NULL, NULL, NULL};
    unsigned char *one = mhla__malloc(bh * (size_t)(c->dk > c->dv ? c->dk : c->dv) * es);
    MHLA_FAIL_IF(st, !one, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the selftest");
    MHLA_FORWARD_IF_ERROR(st, mhla_decoder_create(ctx, c, n, &dec));
    MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, s->mix, s->nm * sizeof(float), MHLA_DTYPE_F32,
                                            &b[MHLA_TENSOR_MIXING]));
    if (prompt > 0) { /* [B, prompt, H, D]: the leading tokens of the BNHD tensors are contiguous per batch */
        for (int tt = 0; tt < 4; ++tt) {
            if (tt == MHLA_TENSOR_OUT) {
                const size_t bytes = (size_t)c->batch * (size_t)prompt * (size_t)c->heads * (size_t)c->dv * es;
                MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, NULL, bytes, t, &pb[tt]));
                continue;
            }
            const int64_t d = tt == MHLA_TENSOR_V ? c->dv : c->dk;
            const unsigned char *src = tt == MHLA_TENSOR_Q ? s->q_dev : tt == MHLA_TENSOR_K ? s->k_dev : s->v_dev;
            const size_t row = (size_t)(prompt * c->heads * d) * es, stride = (size_t)(n * c->heads * d) * es;
            unsigned char *tmp = mhla__malloc(row * (size_t)c->batch);
            MHLA_FAIL_IF(st, !tmp, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the selftest");
            for (int64_t bb = 0; bb < c->batch; ++bb)
                memcpy(tmp + (size_t)bb * row, src + (size_t)bb * stride, row);
            st = device_buffer(ctx, tmp, row * (size_t)c->batch, t, &pb[tt]);
            mhla__free(tmp);
            if (st != MHLA_OK)
                goto cleanup;
        }
        MHLA_FORWARD_IF_ERROR(st, mhla_decoder_prefill(dec, pb[MHLA_TENSOR_Q], pb[MHLA_TENSOR_K], pb[MHLA_TENSOR_V],
                                                       b[MHLA_TENSOR_MIXING], pb[MHLA_TENSOR_OUT], prompt, 0, NULL,
                                                       &done));
        MHLA_CL_TRY(st, ctx, clWaitForEvents(1, &done), "clWaitForEvents (selftest prefill)");
        clReleaseEvent(done);
        done = NULL;
        const size_t row = (size_t)(prompt * c->heads * c->dv) * es, stride = (size_t)(n * c->heads * c->dv) * es;
        for (int64_t bb = 0; bb < c->batch; ++bb)
            MHLA_CL_TRY(st, ctx,
                        clEnqueueReadBuffer(queue, pb[MHLA_TENSOR_OUT], CL_TRUE, (size_t)bb * row, row,
                                            (unsigned char *)s->out_dev + (size_t)bb * stride, 0, NULL, NULL),
                        "clEnqueueReadBuffer (selftest prefill)");
    }
    for (int tt = 0; tt < 4; ++tt) {
        const int64_t d = tt == MHLA_TENSOR_Q || tt == MHLA_TENSOR_K ? c->dk : c->dv;
        MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, NULL, bh * (size_t)d * es, t, &b[tt]));
    }
    for (int64_t tok = prompt; tok < n; ++tok) {
        /* token tok of [B,N,H,D] is B runs of H*D elements: one token's [B,H,D] */
        for (int tt = 0; tt < 3; ++tt) {
            const int64_t d = tt == MHLA_TENSOR_V ? c->dv : c->dk;
            const unsigned char *src = tt == MHLA_TENSOR_Q ? s->q_dev : tt == MHLA_TENSOR_K ? s->k_dev : s->v_dev;
            const size_t run = (size_t)(c->heads * d) * es;
            for (int64_t bb = 0; bb < c->batch; ++bb)
                memcpy(one + (size_t)bb * run, src + (size_t)((bb * n + tok) * c->heads * d) * es, run);
            MHLA_CL_TRY(st, ctx,
                        clEnqueueWriteBuffer(queue, b[tt], CL_TRUE, 0, run * (size_t)c->batch, one, 0, NULL, NULL),
                        "clEnqueueWriteBuffer (selftest step)");
        }
        MHLA_FORWARD_IF_ERROR(st, mhla_decoder_step(dec, b[0], b[1], b[2], b[4], b[3], 0, NULL, &done));
        MHLA_CL_TRY(st, ctx, clWaitForEvents(1, &done), "clWaitForEvents (selftest step)");
        clReleaseEvent(done);
        done = NULL;
        const size_t run = (size_t)(c->heads * c->dv) * es;
        MHLA_CL_TRY(st, ctx, clEnqueueReadBuffer(queue, b[MHLA_TENSOR_OUT], CL_TRUE, 0, run * (size_t)c->batch, one, 0,
                                                 NULL, NULL),
                    "clEnqueueReadBuffer (selftest step)");
        for (int64_t bb = 0; bb < c->batch; ++bb)
            memcpy((unsigned char *)s->out_dev + (size_t)((bb * n + tok) * c->heads * c->dv) * es,
                   one + (size_t)bb * run, run);
        /* the next step's output starts as NaN again */
        release(&b[MHLA_TENSOR_OUT]);
        MHLA_FORWARD_IF_ERROR(st, device_buffer(ctx, NULL, run * (size_t)c->batch, t, &b[MHLA_TENSOR_OUT]));
    }
cleanup:
    if (done)
        clReleaseEvent(done);
    clFinish(queue);
    for (int i = 0; i < 5; ++i)
        release(&b[i]), release(&pb[i]);
    mhla_decoder_destroy(dec);
    mhla__free(one);
    return st;
}

/* Runs one case into *r. */
static void run_case(mhla_context *ctx, const selftest_case *tc, uint32_t seed, mhla_selftest_result *r)
{
    run_state s;
    memset(&s, 0, sizeof s);
    s.ctx = ctx, s.tc = tc;
    const mhla_config *c = &tc->cfg;
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", tc->name);
    r->max_rel_err = NAN;
    int64_t longest = c->seq_t * c->seq_h * c->seq_w;
    if (tc->kind == RUN_VARLEN) {
        longest = 0;
        for (size_t i = 0; i < tc->seqs; ++i)
            if (tc->cu[i + 1] - tc->cu[i] > longest)
                longest = tc->cu[i + 1] - tc->cu[i];
    }
    r->tolerance = mhla_reference_tolerance(c->dtype, longest);
    mhla_status st = make_inputs(&s, seed);
    if (st == MHLA_OK)
        st = tc->kind == RUN_DECODER_STEP || tc->kind == RUN_DECODER_PREFILL ? run_decoder(&s) : run_plan(&s);
    if (st == MHLA_OK) {
        if (c->dtype == MHLA_DTYPE_F32)
            memcpy(s.out, s.out_dev, s.no * sizeof(float));
        else
            mhla_convert(MHLA_DTYPE_F32, s.out, c->dtype, s.out_dev, s.no);
        if (tc->kind == RUN_SOFTMAX)
            st = mhla_reference_softmax(c, s.q, s.k, s.v, s.ref);
        else if (tc->kind == RUN_VARLEN)
            st = mhla_reference_forward_varlen(c, s.q, s.k, s.v, s.mix, tc->cu, tc->seqs, s.ref);
        else
            st = mhla_reference_forward(c, s.q, s.k, s.v, s.mix, s.ref);
        if (st != MHLA_OK)
            snprintf(r->message, sizeof r->message, "reference: %s", mhla_last_message());
    } else {
        /* the first line of the message: a build log follows it */
        const char *msg = *mhla_context_message(ctx) ? mhla_context_message(ctx) : mhla_last_message();
        snprintf(r->message, sizeof r->message, "%.*s", (int)strcspn(msg, "\n"), msg);
    }
    r->status = st;
    if (st == MHLA_OK) {
        r->max_rel_err = mhla_max_rel_err(s.out, s.ref, s.no);
        r->passed = r->max_rel_err <= r->tolerance;
        if (!r->passed)
            snprintf(r->message, sizeof r->message, "max_rel_err %.3g above the tolerance %.3g", r->max_rel_err,
                     r->tolerance);
    }
    free_inputs(&s);
}

mhla_status mhla_selftest(mhla_context *ctx, int quick, mhla_selftest_fn fn, void *user, size_t *passed,
                          size_t *failed)
{
    mhla_status st = MHLA_OK;
    selftest_case *cases = NULL;
    size_t ok = 0, bad = 0;
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_selftest: context is NULL");
    cases = mhla__calloc(MAX_CASES, sizeof *cases);
    MHLA_FAIL_IF(st, !cases, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for the selftest");
    const size_t n = make_cases(quick, cases);
    for (size_t i = 0; i < n; ++i) {
        mhla_selftest_result r;
        run_case(ctx, &cases[i], (uint32_t)(i + 1), &r);
        if (r.passed)
            ++ok;
        else
            ++bad;
        if (fn)
            fn(&r, user);
    }
    if (passed)
        *passed = ok;
    if (failed)
        *failed = bad;
cleanup:
    mhla__free(cases);
    return st;
}

mhla_status mhla_selftest_config(mhla_context *ctx, const mhla_config *cfg, int softmax, uint32_t seed,
                                 mhla_selftest_result *out)
{
    mhla_status st = MHLA_OK;
    char msg[256];
    MHLA_FAIL_IF(st, !ctx, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_selftest_config: context is NULL");
    MHLA_FAIL_IF(st, !cfg || !out, ctx, MHLA_ERR_INVALID_ARGUMENT, "mhla_selftest_config: %s is NULL",
                 cfg ? "out" : "cfg");
    MHLA_FAIL_IF(st, cfg->varlen, ctx, MHLA_ERR_UNSUPPORTED,
                 "mhla_selftest_config: packed varlen configurations need their offsets (mhla_selftest covers them)");
    if (!softmax) { /* the same refusal a plan would give, before any input is made */
        st = mhla_config_check(cfg, msg, sizeof msg);
        MHLA_FAIL_IF(st, st != MHLA_OK, ctx, st, "mhla_selftest_config: %s", msg);
    }
    selftest_case tc;
    memset(&tc, 0, sizeof tc);
    tc.kind = softmax ? RUN_SOFTMAX : RUN_FORWARD;
    tc.cfg = *cfg;
    snprintf(tc.name, sizeof tc.name, "%s", softmax ? "softmax" : cfg->causal ? "causal" : "forward");
    run_case(ctx, &tc, seed, out);
cleanup:
    return st;
}
