/* The shard API (mhla.h "Sharded plans") with no MPI: every shard of a sequence planned on one context,
 * the exchange of summary rows done in-process, the reassembled output checked; and its refusals. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define MAX_SHARDS 8

/* A packed batch of C = 16 (test_mpi's): sequences of 40 (chunks 16, 16, 8), 0, 37 (16, 16, 5), 3 and
 * 43 (16, 16, 11) tokens: 10 chunks, a partial one ending every sequence. */
static const int32_t cu_packed[] = {0, 40, 40, 77, 80, 123};

/* ---- what the tests expect, counted here from the configuration (not from the library) -------- */

static int64_t tokens_of(const mhla_config *c) { return c->seq_t * c->seq_h * c->seq_w; }

/* Blocks of the whole sequence: M, ceil(N/C), or the packed sequences' chunks. */
static int64_t blocks_of(const mhla_config *c, const int32_t *cu, size_t nseq)
{
    if (!c->causal)
        return c->block_t * c->block_h * c->block_w;
    if (!c->varlen)
        return (tokens_of(c) + c->chunk - 1) / c->chunk;
    int64_t n = 0;
    for (size_t s = 0; s < nseq; ++s)
        n += ((int64_t)cu[s + 1] - cu[s] + c->chunk - 1) / c->chunk;
    return n;
}

/* The first token of block g (the sequence's end for g = blocks_of()); non-causal g a whole number of
 * frames, where blocks in raster order are contiguous tokens. */
static int64_t block_start(const mhla_config *c, const int32_t *cu, size_t nseq, int64_t g)
{
    if (!c->causal)
        return g * (tokens_of(c) / blocks_of(c, cu, nseq));
    if (!c->varlen)
        return g * c->chunk < tokens_of(c) ? g * c->chunk : tokens_of(c);
    for (size_t s = 0; s < nseq; ++s) {
        const int64_t n = ((int64_t)cu[s + 1] - cu[s] + c->chunk - 1) / c->chunk;
        if (g < n)
            return cu[s] + g * c->chunk;
        g -= n;
    }
    return cu[nseq];
}

/* mhla.h: S_b and z_b (B*H*Dk*(Dv+1); causal: B*H*Dk*Dv, plus Dk for paper), then for the official
 * normalizer B*H*Nb dot products. */
static size_t row_floats_of(const mhla_config *c, const int32_t *cu, size_t nseq)
{
    const int64_t bhk = c->batch * (c->kv_heads ? c->kv_heads : c->heads) * c->dk; /* the summaries' heads */
    if (c->causal)
        return (size_t)(bhk * (c->dv + (c->normalizer == MHLA_NORMALIZER_PAPER)));
    const int64_t nb = tokens_of(c) / blocks_of(c, cu, nseq);
    return (size_t)(bhk * (c->dv + 1) + (c->normalizer == MHLA_NORMALIZER_OFFICIAL ? c->batch * c->heads * nb : 0));
}

static size_t elem_bytes(mhla_dtype t) { return t == MHLA_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t); }

/* ---- one shard: its plan and buffers ---------------------------------------------------------- */

typedef struct shard {
    mhla_plan *plan;
    cl_mem q, k, v, out;
    int64_t off, cnt, t0, n; /* blocks [off, off + cnt), tokens [t0, t0 + n) */
} shard;

/* cfg with k's and v's heads in place of the queries' (grouped key/value heads), for their tokens. */
static mhla_config kv_config(const mhla_config *cfg)
{
    mhla_config c = *cfg;
    c.heads = cfg->kv_heads ? cfg->kv_heads : cfg->heads;
    return c;
}

/* A device buffer holding tokens [t0, t0 + n) of x (an [.., N, .., D] float tensor) in cfg's storage. */
static cl_mem upload_tokens(mhla_context *ctx, const mhla_config *cfg, const float *x, int64_t d, int64_t t0, int64_t n)
{
    const size_t elems = (size_t)(cfg->batch * cfg->heads * n * d), es = elem_bytes(cfg->dtype);
    float *part = malloc(elems * sizeof *part);
    void *stored = malloc(elems * es);
    assert_non_null(part), assert_non_null(stored);
    slice_tokens(cfg, tokens_of(cfg), d, x, t0, n, part);
    assert_int_equal(mhla_convert(cfg->dtype, stored, MHLA_DTYPE_F32, part, elems), MHLA_OK);
    cl_int err = CL_SUCCESS;
    cl_mem buf = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, elems * es,
                                stored, &err);
    assert_int_equal(err, CL_SUCCESS);
    free(part), free(stored);
    return buf;
}

/* mhla_plan_shard_info() and the shard's tensor sizes against what the test counted itself. */
static void check_info(const char *name, const mhla_config *cfg, const int32_t *cu, size_t nseq, const shard *s)
{
    mhla_shard_info info;
    assert_int_equal(mhla_plan_shard_info(s->plan, &info), MHLA_OK);
    const size_t rowf = row_floats_of(cfg, cu, nseq), es = elem_bytes(cfg->dtype);
    if (info.block_offset != s->off || info.block_count != s->cnt || info.blocks != blocks_of(cfg, cu, nseq) ||
        info.token_offset != s->t0 || info.tokens != s->n || info.row_floats != rowf)
        fail_msg("%s: shard [%lld, +%lld): info says blocks [%lld, +%lld) of %lld, tokens [%lld, +%lld), %zu floats "
                 "a row; expected %lld blocks, tokens [%lld, +%lld), %zu floats",
                 name, (long long)s->off, (long long)s->cnt, (long long)info.block_offset,
                 (long long)info.block_count, (long long)info.blocks, (long long)info.token_offset,
                 (long long)info.tokens, info.row_floats, (long long)blocks_of(cfg, cu, nseq), (long long)s->t0,
                 (long long)s->n, rowf);
    assert_int_equal(info.global.seq_t, cfg->seq_t);
    assert_int_equal(info.global.dk, cfg->dk);
    assert_int_equal(info.num_seqs, cu ? nseq : 0);
    if (cu) { /* the plan's own copy */
        assert_non_null(info.cu_seqlens);
        assert_true(info.cu_seqlens != cu);
        assert_memory_equal(info.cu_seqlens, cu, (nseq + 1) * sizeof *cu);
    } else {
        assert_null(info.cu_seqlens);
    }
    const size_t per = (size_t)(cfg->batch * cfg->heads) * es;
    assert_int_equal(mhla_plan_tensor_bytes(s->plan, MHLA_TENSOR_Q), (size_t)s->n * per * (size_t)cfg->dk);
    assert_int_equal(mhla_plan_tensor_bytes(s->plan, MHLA_TENSOR_OUT), (size_t)s->n * per * (size_t)cfg->dv);
    assert_int_equal(mhla_plan_tensor_bytes(s->plan, MHLA_TENSOR_MIXING),
                     mhla_config_tensor_elems(cfg, MHLA_TENSOR_MIXING) * sizeof(float));
    if (s->cnt > 0) { /* the shard's own grid: its frames (non-causal) or its tokens */
        const mhla_config *local = mhla_plan_config(s->plan);
        assert_int_equal(tokens_of(local), s->n);
    }
}

/* mhla.h: shards equal mhla_forward() on the whole sequence bit for bit where the tuning mixes with
 * kernels/mixing.cl (causal: the prefix kernel sums every earlier chunk itself, no CLBlast blocks),
 * to rounding where CLBlast mixes. */
static int mixes_by_kernel(const mhla_plan *whole)
{
    char t[1024];
    assert_int_equal(mhla_plan_tuning(whole, t, sizeof t), MHLA_OK);
    return strstr(t, "mixing kernel") != NULL || strstr(t, "CLBlast blocks of 0 chunks") != NULL;
}

/* mhla_forward() (or _varlen) of the whole sequence on one device, as floats. */
static float *forward_whole(mhla_context *ctx, const mhla_config *cfg, const int32_t *cu, size_t nseq,
                            const test_inputs *in, int *bitwise)
{
    const size_t es = elem_bytes(cfg->dtype);
    void *q = malloc(in->nq * es), *k = malloc(in->nk * es), *v = malloc(in->nv * es), *o = malloc(in->no * es);
    float *out = nan_floats(in->no);
    assert_non_null(q), assert_non_null(k), assert_non_null(v), assert_non_null(o);
    assert_int_equal(mhla_convert(cfg->dtype, q, MHLA_DTYPE_F32, in->q, in->nq), MHLA_OK);
    assert_int_equal(mhla_convert(cfg->dtype, k, MHLA_DTYPE_F32, in->k, in->nk), MHLA_OK);
    assert_int_equal(mhla_convert(cfg->dtype, v, MHLA_DTYPE_F32, in->v, in->nv), MHLA_OK);
    assert_int_equal(mhla_convert(cfg->dtype, o, MHLA_DTYPE_F32, out, in->no), MHLA_OK);
    mhla_plan *plan = NULL;
    mhla_status st = mhla_plan_create(ctx, cfg, &plan);
    if (st == MHLA_OK)
        st = cu ? mhla_forward_varlen_host(plan, q, k, v, in->mix, cu, nseq, o)
                : mhla_forward_host(plan, q, k, v, in->mix, o);
    if (st != MHLA_OK)
        fail_msg("the whole sequence: %s: %s", mhla_status_name(st), mhla_context_message(ctx));
    *bitwise = mixes_by_kernel(plan);
    assert_int_equal(mhla_convert(MHLA_DTYPE_F32, out, cfg->dtype, o, in->no), MHLA_OK);
    mhla_plan_destroy(plan);
    free(q), free(k), free(v), free(o);
    return out;
}

/* Runs cfg in shards [bounds[s], bounds[s + 1]) (blocks or chunks) on one context: every shard's
 * summaries, its rows gathered in block order into one host array, every shard's output, the tokens
 * put back in place. The result against the double reference (docs/spec.md "Accuracy the tests hold")
 * and against mhla_forward() of the whole sequence (bit for bit where mhla.h says so, else 1e-6
 * relative). */
static void run_sharded(mhla_context *ctx, const char *name, const mhla_config *cfg, const int32_t *cu, size_t nseq,
                        const int64_t *bounds, size_t nshards, uint32_t seed)
{
    assert_true(nshards >= 1 && nshards <= MAX_SHARDS);
    test_inputs in;
    assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, seed, &in), MHLA_OK);
    if (cfg->dtype != MHLA_DTYPE_F32) { /* every side sees the inputs as stored */
        uint16_t *h = malloc(in.nv > in.nq ? in.nv * 2 : in.nq * 2);
        assert_non_null(h);
        float *xs[] = {in.q, in.k, in.v};
        const size_t ns[] = {in.nq, in.nk, in.nv};
        for (int i = 0; i < 3; ++i) {
            assert_int_equal(mhla_convert(cfg->dtype, h, MHLA_DTYPE_F32, xs[i], ns[i]), MHLA_OK);
            assert_int_equal(mhla_convert(MHLA_DTYPE_F32, xs[i], cfg->dtype, h, ns[i]), MHLA_OK);
        }
        free(h);
    }
    const int64_t blocks = blocks_of(cfg, cu, nseq);
    const size_t rowf = row_floats_of(cfg, cu, nseq), es = elem_bytes(cfg->dtype);
    assert_true(bounds[0] == 0 && bounds[nshards] == blocks); /* the test's own split covers the sequence */
    float *gathered = nan_floats((size_t)blocks * rowf), *out = nan_floats(in.no);
    const mhla_config kvc = kv_config(cfg);
    cl_int cl_err = CL_SUCCESS;
    cl_mem mix = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                in.nm * sizeof(float), in.mix, &cl_err);
    assert_int_equal(cl_err, CL_SUCCESS);
    shard sh[MAX_SHARDS];
    memset(sh, 0, sizeof sh);

    /* First half: each shard's rows, written into an array of its own and gathered in block order. */
    for (size_t i = 0; i < nshards; ++i) {
        shard *s = &sh[i];
        s->off = bounds[i], s->cnt = bounds[i + 1] - bounds[i];
        s->t0 = block_start(cfg, cu, nseq, s->off);
        s->n = block_start(cfg, cu, nseq, s->off + s->cnt) - s->t0;
        const mhla_status st = cu ? mhla_plan_create_shard_varlen(ctx, cfg, cu, nseq, s->off, s->cnt, &s->plan)
                                  : mhla_plan_create_shard(ctx, cfg, s->off, s->cnt, &s->plan);
        if (st != MHLA_OK)
            fail_msg("%s: shard [%lld, +%lld): %s: %s", name, (long long)s->off, (long long)s->cnt,
                     mhla_status_name(st), mhla_context_message(ctx));
        check_info(name, cfg, cu, nseq, s);
        float *rows = NULL;
        if (s->cnt > 0) { /* a shard of no blocks takes NULL buffers and rows */
            s->q = upload_tokens(ctx, cfg, in.q, cfg->dk, s->t0, s->n);
            s->k = upload_tokens(ctx, &kvc, in.k, cfg->dk, s->t0, s->n);
            s->v = upload_tokens(ctx, &kvc, in.v, cfg->dv, s->t0, s->n);
            s->out = nan_buffer(ctx, (size_t)(cfg->batch * cfg->heads * s->n * cfg->dv) * es);
            rows = nan_floats((size_t)(s->cnt + 1) * rowf); /* one row more, to stay NaN */
        }
        if (mhla_shard_summaries(s->plan, s->q, s->k, s->v, rows) != MHLA_OK)
            fail_msg("%s: mhla_shard_summaries: %s", name, mhla_context_message(ctx));
        for (size_t j = 0; rows && j < rowf; ++j)
            if (!isnan(rows[(size_t)s->cnt * rowf + j]))
                fail_msg("%s: shard [%lld, +%lld) wrote past its %lld rows", name, (long long)s->off,
                         (long long)s->cnt, (long long)s->cnt);
        if (rows)
            memcpy(gathered + (size_t)s->off * rowf, rows, (size_t)s->cnt * rowf * sizeof *rows);
        free(rows);
    }
    for (size_t j = 0; j < (size_t)blocks * rowf; ++j) /* every block's row came from its shard */
        if (!isfinite(gathered[j]))
            fail_msg("%s: gathered row %zu, float %zu is %g", name, j / rowf, j % rowf, (double)gathered[j]);

    /* Second half: each shard's output, its tokens put back in place. */
    void *part = malloc(in.no * es + 1);
    float *partf = malloc(in.no * sizeof *partf + 1);
    assert_non_null(part), assert_non_null(partf);
    for (size_t i = 0; i < nshards; ++i) {
        shard *s = &sh[i];
        cl_event done = NULL;
        if (mhla_shard_output(s->plan, s->q, s->k, s->v, s->cnt ? mix : NULL, gathered, s->out, &done) != MHLA_OK)
            fail_msg("%s: mhla_shard_output: %s", name, mhla_context_message(ctx));
        if (s->cnt == 0)
            continue;
        assert_non_null(done);
        assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
        clReleaseEvent(done);
        const size_t nv = (size_t)(cfg->batch * cfg->heads * s->n * cfg->dv);
        assert_int_equal(clEnqueueReadBuffer(mhla_context_queue(ctx), s->out, CL_TRUE, 0, nv * es, part, 0, NULL,
                                             NULL),
                         CL_SUCCESS);
        assert_int_equal(mhla_convert(MHLA_DTYPE_F32, partf, cfg->dtype, part, nv), MHLA_OK);
        place_tokens(cfg, tokens_of(cfg), cfg->dv, partf, s->t0, s->n, out);
    }
    free(part), free(partf);

    double *ref = malloc(in.no * sizeof *ref);
    assert_non_null(ref);
    assert_int_equal(cu ? mhla_reference_forward_varlen(cfg, in.q, in.k, in.v, in.mix, cu, nseq, ref)
                        : mhla_reference_forward(cfg, in.q, in.k, in.v, in.mix, ref),
                     MHLA_OK);
    const double err = expect_within(out, ref, in.no, mhla_reference_tolerance(cfg->dtype, tokens_of(cfg)), name);
    int bitwise = 0;
    float *whole = forward_whole(ctx, cfg, cu, nseq, &in, &bitwise);
    size_t differ = 0, first = 0;
    for (size_t j = in.no; j-- > 0;)
        if (memcmp(&out[j], &whole[j], sizeof *out) != 0)
            ++differ, first = j;
    if (bitwise && differ)
        fail_msg("%s: %zu of %zu outputs differ from mhla_forward() of the whole sequence, the first [%zu]: %.9g "
                 "against %.9g (mhla.h: bit for bit where kernels/mixing.cl mixes)",
                 name, differ, in.no, first, (double)out[first], (double)whole[first]);
    double *whole_d = malloc(in.no * sizeof *whole_d);
    assert_non_null(whole_d);
    for (size_t j = 0; j < in.no; ++j)
        whole_d[j] = whole[j];
    const double err_whole = expect_within(out, whole_d, in.no, 1e-6, name);
    print_message("    %-34s shards", name);
    for (size_t i = 0; i < nshards; ++i)
        print_message(" [%lld,+%lld)", (long long)sh[i].off, (long long)sh[i].cnt);
    print_message(" of %lld: vs reference %.2e, vs mhla_forward %s (%.2e; %s)\n", (long long)blocks, err,
                  differ ? "within rounding" : "bit-identical", err_whole,
                  bitwise ? "mixing.cl: must be bit-identical" : "CLBlast mixes: 1e-6 allowed");

    for (size_t i = 0; i < nshards; ++i) {
        cl_mem mems[] = {sh[i].q, sh[i].k, sh[i].v, sh[i].out};
        for (size_t j = 0; j < 4; ++j)
            if (mems[j])
                clReleaseMemObject(mems[j]);
        mhla_plan_destroy(sh[i].plan);
    }
    clReleaseMemObject(mix);
    test_inputs_free(&in);
    free(gathered), free(out), free(ref), free(whole), free(whole_d);
}

#define RUN(ctx, name, cfg, cu, nseq, seed, ...)                                                    \
    do {                                                                                            \
        static const int64_t b_[] = {__VA_ARGS__};                                                  \
        run_sharded(ctx, name, cfg, cu, nseq, b_, sizeof b_ / sizeof b_[0] - 1, seed);              \
    } while (0)

/* ---- the cases --------------------------------------------------------------------------------- */

/* 1D, 6 blocks of 16 tokens (test_forward's split-block dims, Dk 16, Dv 24), every normalizer with
 * eps and feature_eps far from their defaults: one shard of everything, uneven shards around an
 * empty one, and single-block shards at both ends. */
static void test_1d_normalizers(void **state)
{
    mhla_context *ctx = *state;
    for (int norm = 0; norm <= 2; ++norm) {
        mhla_config cfg = config_1d(2, 2, 96, 6, 16, 24);
        cfg.normalizer = (mhla_normalizer)norm;
        set_test_eps(&cfg);
        expect_eps_visible(&cfg, (uint32_t)(10 + norm), 10.0);
        char name[64];
        snprintf(name, sizeof name, "1d %s", mhla_normalizer_name(cfg.normalizer));
        RUN(ctx, name, &cfg, NULL, 0, (uint32_t)(10 + norm), 0, 6);
        RUN(ctx, name, &cfg, NULL, 0, (uint32_t)(20 + norm), 0, 1, 4, 4, 6);
        RUN(ctx, name, &cfg, NULL, 0, (uint32_t)(30 + norm), 0, 1, 2, 5, 6);
    }
}

/* A 2D image (test_forward's modes grid: 8x6 tokens, 2x3 blocks, official normalizer, scale 0.5):
 * one frame of 6 blocks, so its shards are all or nothing, the empty ones at offsets 0 and M. */
static void test_2d_frames(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.batch = 2, cfg.heads = 3, cfg.seq_h = 8, cfg.seq_w = 6, cfg.block_h = 2, cfg.block_w = 3;
    cfg.dk = 16, cfg.dv = 12, cfg.scale = 0.5f, cfg.normalizer = MHLA_NORMALIZER_OFFICIAL;
    RUN(ctx, "2d official", &cfg, NULL, 0, 40, 0, 6);
    RUN(ctx, "2d official", &cfg, NULL, 0, 41, 0, 0, 6, 6);
}

/* 3D grids (test_forward's): 4x6x6 tokens in 2x3x2 blocks (frames of 6 blocks, 2 frames), and 3x5x7
 * tokens in blocks of one token (frames of 35 blocks, 3 frames). */
static void test_3d_frames(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 2, cfg.seq_t = 4, cfg.seq_h = 6, cfg.seq_w = 6, cfg.block_t = 2, cfg.block_h = 3, cfg.block_w = 2;
    cfg.dk = 16, cfg.dv = 16;
    RUN(ctx, "3d 2 frames", &cfg, NULL, 0, 50, 0, 6, 12);
    RUN(ctx, "3d 2 frames", &cfg, NULL, 0, 51, 0, 0, 12, 12);
    cfg.seq_t = 3, cfg.seq_h = 5, cfg.seq_w = 7, cfg.block_t = 3, cfg.block_h = 5, cfg.block_w = 7;
    RUN(ctx, "3d 3 frames, 1-token blocks", &cfg, NULL, 0, 52, 0, 35, 35, 105);
    RUN(ctx, "3d 3 frames, 1-token blocks", &cfg, NULL, 0, 53, 0, 70, 105);
}

/* Causal, 100 tokens in 7 chunks of 16 (the last of 4), both normalizers: a shard of only the partial
 * chunk, empty shards in the middle and at the end (offset 7: token 100). */
static void test_causal_chunks(void **state)
{
    mhla_context *ctx = *state;
    for (int paper = 0; paper <= 1; ++paper) {
        mhla_config cfg = config_causal(2, 2, 100, 16, 16, 24);
        cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        const char *name = paper ? "causal paper" : "causal none";
        RUN(ctx, name, &cfg, NULL, 0, (uint32_t)(60 + paper), 0, 7);
        RUN(ctx, name, &cfg, NULL, 0, (uint32_t)(62 + paper), 0, 3, 3, 7);
        RUN(ctx, name, &cfg, NULL, 0, (uint32_t)(64 + paper), 0, 1, 6, 7, 7);
    }
}

/* Grouped key/value heads (two key/value heads for four query heads; one for four, causal): the
 * exchanged rows hold the key/value heads' summaries (row_floats_of counts B*H_kv), and k and v
 * are sliced with their own heads. The dims of the cases above: no kernel is built anew. */
static void test_grouped_heads(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_1d(2, 4, 96, 6, 16, 24);
    cfg.kv_heads = 2;
    set_test_eps(&cfg);
    RUN(ctx, "1d gqa 4/2", &cfg, NULL, 0, 70, 0, 1, 4, 4, 6);
    cfg = config_causal(2, 4, 100, 16, 16, 24);
    cfg.kv_heads = 1, cfg.normalizer = MHLA_NORMALIZER_PAPER;
    RUN(ctx, "causal mqa 4/1", &cfg, NULL, 0, 71, 0, 3, 3, 7);
}

/* Packed varlen (cu_packed, chunks: sequence 0 [0, 3), the empty one none, 2 [3, 6), 3 [6, 7),
 * 4 [7, 10)), both normalizers: shards that begin and end inside sequences (1, 2, 5, 9), between
 * them (3 across the empty sequence, 6, 7), and empty ones. */
static void test_varlen_chunks(void **state)
{
    mhla_context *ctx = *state;
    for (int paper = 0; paper <= 1; ++paper) {
        mhla_config cfg = config_causal(1, 2, 123, 16, 16, 24);
        cfg.varlen = 1, cfg.mixing_rows = 3;
        cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        const char *name = paper ? "varlen paper" : "varlen none";
        RUN(ctx, name, &cfg, cu_packed, 5, (uint32_t)(70 + paper), 0, 10);
        RUN(ctx, name, &cfg, cu_packed, 5, (uint32_t)(72 + paper), 0, 2, 3, 3, 7, 10);
        RUN(ctx, name, &cfg, cu_packed, 5, (uint32_t)(74 + paper), 0, 1, 5, 9, 10);
        RUN(ctx, name, &cfg, cu_packed, 5, (uint32_t)(76 + paper), 0, 0, 6, 10, 10);
    }
}

/* f16 storage (test_storage's varlen: 200 tokens, C = 32, paper), an empty sequence added: lengths
 * 1, 63, 0, 1, 65, 70, chunks 1, 2, 0, 1, 3, 3. */
static void test_varlen_f16(void **state)
{
    mhla_context *ctx = *state;
    static const int32_t cu[] = {0, 1, 64, 64, 65, 130, 200};
    mhla_config cfg = config_causal(1, 2, 200, 32, 16, 24);
    cfg.varlen = 1, cfg.mixing_rows = 3, cfg.dtype = MHLA_DTYPE_F16, cfg.normalizer = MHLA_NORMALIZER_PAPER;
    RUN(ctx, "varlen f16 paper", &cfg, cu, 6, 80, 0, 2, 4, 8, 10);
}

/* mhla_plan_shard_info() on shards whose numbers are written out here. */
static void test_shard_info(void **state)
{
    mhla_context *ctx = *state;
    mhla_plan *plan = NULL;
    mhla_shard_info info;
    /* 1D official, B = H = 2, Dk 16, Dv 24, blocks of 16 tokens: rows of 4*16*25 + 4*16 floats. */
    mhla_config c = config_1d(2, 2, 96, 6, 16, 24);
    c.normalizer = MHLA_NORMALIZER_OFFICIAL;
    assert_int_equal(mhla_plan_create_shard(ctx, &c, 1, 3, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_shard_info(plan, &info), MHLA_OK);
    assert_int_equal(info.block_offset, 1), assert_int_equal(info.block_count, 3), assert_int_equal(info.blocks, 6);
    assert_int_equal(info.token_offset, 16), assert_int_equal(info.tokens, 48);
    assert_int_equal(info.row_floats, 1664);
    assert_int_equal(info.global.normalizer, MHLA_NORMALIZER_OFFICIAL);
    assert_true(info.global.scale == 1.0f); /* defaults resolved */
    mhla_plan_destroy(plan);
    /* Causal paper, 7 chunks of 16 over 100 tokens: the partial last one, and an empty shard at 7. */
    mhla_config cc = config_causal(2, 2, 100, 16, 16, 24);
    cc.normalizer = MHLA_NORMALIZER_PAPER;
    assert_int_equal(mhla_plan_create_shard(ctx, &cc, 6, 1, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_shard_info(plan, &info), MHLA_OK);
    assert_int_equal(info.blocks, 7), assert_int_equal(info.token_offset, 96), assert_int_equal(info.tokens, 4);
    assert_int_equal(info.row_floats, 1600);
    assert_true(info.global.scale == 0.25f); /* Dk^-0.5 */
    assert_int_equal(info.global.mixing_rows, 7);
    mhla_plan_destroy(plan);
    assert_int_equal(mhla_plan_create_shard(ctx, &cc, 7, 0, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_shard_info(plan, &info), MHLA_OK);
    assert_int_equal(info.token_offset, 100), assert_int_equal(info.tokens, 0);
    assert_int_equal(mhla_plan_tensor_bytes(plan, MHLA_TENSOR_Q), 0);
    mhla_plan_destroy(plan);
    /* Varlen none: chunks [3, 7) are sequence 2 (tokens 40..77) and sequence 3 (77..80). */
    mhla_config cv = config_causal(1, 2, 123, 16, 16, 24);
    cv.varlen = 1, cv.mixing_rows = 3;
    assert_int_equal(mhla_plan_create_shard_varlen(ctx, &cv, cu_packed, 5, 3, 4, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_shard_info(plan, &info), MHLA_OK);
    assert_int_equal(info.blocks, 10), assert_int_equal(info.token_offset, 40), assert_int_equal(info.tokens, 40);
    assert_int_equal(info.row_floats, 2 * 16 * 24), assert_int_equal(info.num_seqs, 5);
    mhla_plan_destroy(plan);
    /* 3D, blocks of 2x2x3 tokens: the second frame of 6 blocks is tokens 72..143. */
    mhla_config c3;
    mhla_config_init(&c3);
    c3.heads = 2, c3.seq_t = 4, c3.seq_h = 6, c3.seq_w = 6, c3.block_t = 2, c3.block_h = 3, c3.block_w = 2;
    c3.dk = 16, c3.dv = 16;
    assert_int_equal(mhla_plan_create_shard(ctx, &c3, 6, 6, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_shard_info(plan, &info), MHLA_OK);
    assert_int_equal(info.token_offset, 72), assert_int_equal(info.tokens, 72), assert_int_equal(info.blocks, 12);
    assert_int_equal(info.row_floats, 2 * 16 * 17);
    assert_int_equal(mhla_plan_config(plan)->seq_t, 2); /* its own grid: one frame of blocks */
    mhla_plan_destroy(plan);
}

/* A shard creator's call must fail with `want`, mention `text` and leave the plan NULL. */
static void expect_refused(mhla_context *ctx, mhla_status st, const mhla_plan *plan, mhla_status want,
                           const char *text)
{
    if (st != want)
        fail_msg("expected %s, got %s: %s", mhla_status_name(want), mhla_status_name(st), mhla_context_message(ctx));
    assert_null(plan);
    assert_message_has(ctx, text);
}
/* `call` creates into `plan`, which starts as a pointer no creator should leave there. */
#define EXPECT_REFUSED(ctx, call, want, text)                                                       \
    do {                                                                                            \
        plan = (mhla_plan *)0x1;                                                                    \
        const mhla_status st_ = (call);                                                             \
        expect_refused(ctx, st_, plan, want, text);                                                 \
    } while (0)

/* Every refusal names what is wrong. */
static void test_refusals(void **state)
{
    mhla_context *ctx = *state;
    mhla_plan *plan = NULL, *shard = NULL;
    mhla_shard_info info;
    float rows[1] = {0};
    const mhla_config c = config_1d(2, 2, 96, 6, 16, 24);
    /* The shard calls on a plain plan, and the plain forward on a shard plan. */
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_shard_info(plan, &info), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "mhla_plan_shard_info: the plan is not a shard plan");
    assert_int_equal(mhla_shard_summaries(plan, NULL, NULL, NULL, rows), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "mhla_shard_summaries: the plan is not a shard plan");
    assert_int_equal(mhla_shard_output(plan, NULL, NULL, NULL, NULL, rows, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "mhla_shard_output: the plan is not a shard plan");
    mhla_plan_destroy(plan);
    assert_int_equal(mhla_plan_create_shard(ctx, &c, 0, 6, &shard), MHLA_OK);
    assert_int_equal(mhla_forward(shard, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "mhla_forward: the plan is a shard plan");
    mhla_plan_destroy(shard);
    shard = NULL;

    /* Blocks outside the sequence's 6 (and a causal sequence's 7 chunks). */
    const int64_t bad[][2] = {{-1, 1}, {0, -1}, {0, 7}, {5, 2}, {7, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
        EXPECT_REFUSED(ctx, mhla_plan_create_shard(ctx, &c, bad[i][0], bad[i][1], &plan),
                       MHLA_ERR_INVALID_ARGUMENT, "are not within the 6 blocks of the sequence");
    const mhla_config cc = config_causal(2, 2, 100, 16, 16, 24);
    EXPECT_REFUSED(ctx, mhla_plan_create_shard(ctx, &cc, 6, 2, &plan), MHLA_ERR_INVALID_ARGUMENT,
                   "blocks [6, 6 + 2) are not within the 7 chunks of the sequence");

    /* Not whole frames: a 2D image (one frame of 6 blocks) and a 3D grid's second frame cut. */
    mhla_config c2;
    mhla_config_init(&c2);
    c2.batch = 2, c2.heads = 3, c2.seq_h = 8, c2.seq_w = 6, c2.block_h = 2, c2.block_w = 3, c2.dk = 16, c2.dv = 12;
    EXPECT_REFUSED(ctx, mhla_plan_create_shard(ctx, &c2, 0, 3, &plan), MHLA_ERR_INVALID_SHAPE,
                   "block_offset = 0 and block_count = 3 must be multiples of block_h * block_w = 6");
    mhla_config c3 = c2;
    c3.batch = 1, c3.heads = 2, c3.seq_t = 4, c3.seq_h = 6, c3.seq_w = 6, c3.block_t = 2, c3.block_h = 3;
    c3.block_w = 2, c3.dv = 16;
    EXPECT_REFUSED(ctx, mhla_plan_create_shard(ctx, &c3, 3, 6, &plan), MHLA_ERR_INVALID_SHAPE,
                   "block_offset = 3 and block_count = 6 must be multiples of block_h * block_w = 6");

    /* A varlen configuration to mhla_plan_create_shard, a plain one to _varlen, a range past the chunks. */
    mhla_config cv = config_causal(1, 2, 123, 16, 16, 24);
    cv.varlen = 1, cv.mixing_rows = 3;
    EXPECT_REFUSED(ctx, mhla_plan_create_shard(ctx, &cv, 0, 1, &plan), MHLA_ERR_INVALID_ARGUMENT,
                   "create its shards with mhla_plan_create_shard_varlen()");
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cc, cu_packed, 5, 0, 1, &plan),
                   MHLA_ERR_INVALID_ARGUMENT, "the configuration is not for packed sequences");
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cv, cu_packed, 5, 9, 2, &plan),
                   MHLA_ERR_INVALID_ARGUMENT, "are not within the 10 chunks of the packed sequences");

    /* Bad cu_seqlens: NULL, none, not from 0, decreasing, not ending at the total, a sequence longer
     * than C * rows(Mc) = 48. */
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cv, NULL, 5, 0, 1, &plan),
                   MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens is NULL");
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cv, cu_packed, 0, 0, 1, &plan),
                   MHLA_ERR_INVALID_ARGUMENT, "num_seqs must be >= 1, got 0");
    const int32_t from1[] = {1, 40, 40, 77, 80, 123}, down[] = {0, 40, 39, 77, 80, 123};
    const int32_t short_total[] = {0, 40, 40, 77, 80, 122}, too_long[] = {0, 49, 49, 77, 80, 123};
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cv, from1, 5, 0, 1, &plan),
                   MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[0] must be 0, got 1");
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cv, down, 5, 0, 1, &plan),
                   MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[2] = 39 < cu_seqlens[1] = 40");
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cv, short_total, 5, 0, 1, &plan),
                   MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[5] = 122 must equal the plan's total of 123");
    EXPECT_REFUSED(ctx, mhla_plan_create_shard_varlen(ctx, &cv, too_long, 5, 0, 1, &plan),
                   MHLA_ERR_SEQUENCE_TOO_LONG, "of 49 tokens is longer than chunk * rows(Mc) = 16 * 3 = 48");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_1d_normalizers), cmocka_unit_test(test_2d_frames),
        cmocka_unit_test(test_3d_frames),      cmocka_unit_test(test_causal_chunks),
        cmocka_unit_test(test_varlen_chunks),  cmocka_unit_test(test_varlen_f16),
        cmocka_unit_test(test_shard_info),     cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_grouped_heads),
    };
    return run_group("shard", tests, context_setup, context_teardown);
}
