/* The chunk form of causal MHLA (docs/spec.md "Causal MHLA"): its kernels (causal_summary.cl,
 * causal_prefix.cl, causal_output.cl, and decoder.cl for decoders), and one enqueue of the three
 * stages over chunk tables (causal/chunk_tables.c). */
#include "causal/causal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mhla_grid mhla__causal_grid(const mhla_causal *c, int64_t n)
{
    mhla_grid g;
    memset(&g, 0, sizeof g);
    g.n = (cl_int)n;
    g.heads = (cl_int)c->cfg.heads;
    g.seq_h = g.seq_w = g.pt = g.ph = g.pw = g.blk_h = g.blk_w = g.nb = g.m = 1;
    g.bh = (cl_int)c->bh;
    g.kv_heads = (cl_int)(c->bh_kv / c->cfg.batch);
    g.kv_m = 1;
    return g;
}

mhla_grid mhla__causal_kv_grid(const mhla_causal *c, int64_t n)
{
    mhla_grid g = mhla__causal_grid(c, n);
    g.heads = g.kv_heads;
    g.bh = (cl_int)c->bh_kv;
    return g;
}

/* Register tiles of one chunk's summary: the work-items a chunk's summary takes. */
static size_t summary_tiles(const mhla_causal *c)
{
    return mhla__summary_work_items(&c->tiling, c->cfg.dk, c->cfg.dv);
}

static void release_kernels(mhla_causal *c)
{
    cl_kernel *kernels[] = {&c->k_summary, &c->k_prefix,       &c->k_prefix_one,  &c->k_output,
                            &c->k_step,    &c->k_prefix_tiled, &c->k_step_prefix, &c->k_resume};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i) {
        if (*kernels[i])
            clReleaseKernel(*kernels[i]);
        *kernels[i] = NULL;
    }
}

void mhla__causal_destroy(mhla_causal *c)
{
    if (!c)
        return;
    release_kernels(c);
    if (c->gemm_temp)
        clReleaseMemObject(c->gemm_temp);
    mhla__free(c);
}

/* The kernels for c->tiling. *refit is set when a built kernel reports less than its tiles need
 * (work-items per group, local memory): *fit is then tightened for another try. */
static mhla_status build_kernels(mhla_causal *c, int with_step, mhla_fit *fit, int *refit)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = c->ctx;
    const mhla_config *cfg = &c->cfg;
    const mhla_tiles *t = &c->tiling;
    cl_program prog = NULL;
    const char *what = t->ct_sq ? "causal_output_tiled" : "causal_output";

    *refit = 0;
    /* The output kernel first: its tiles are the ones a device may refuse. It is built for exactly
     * this many work-items per group: the tiled form's where the tuning asks for it and it fits
     * (tune/tiling.c), else the CPU form's. */
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, t->ct_sq ? MHLA_KF_CAUSAL_TILED : MHLA_KF_CAUSAL_OUTPUT, cfg, t,
                                                &prog));
    MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, what, &c->k_output));
    c->lws_output = t->ct_sq ? mhla__causal_tiled_wg(t) : (size_t)mhla__causal_output_wg(t, cfg->dv);
    int r = mhla__fit_check(ctx, c->k_output, c->lws_output,
                            t->ct_sq ? mhla__causal_tiled_local(cfg, t) : mhla__causal_output_local(t, cfg->dk), fit);
    if (r == 0 && with_step) {
        what = "decoder_step";
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_DECODER, cfg, t, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "decoder_step", &c->k_step));
        const size_t dp = (size_t)t->dec_dp;
        if (dp > 1) {
            /* The parts form: groups of whole column lanes, a lane for each summary column where the
             * kernel allows (with 64 lanes, the paper normalizer's z column at Dv = 64 gave lane 0
             * two chains, and a step's time is its longest), one per part at least; where the built
             * kernels allow less (work-items, local memory), fewer parts and a rebuild. */
            r = mhla__fit_check(ctx, c->k_step, dp, mhla__decoder_step_local(cfg, t), fit);
            c->lws_step = mhla__local_size(ctx, c->k_step, (size_t)c->scols * dp) / dp * dp;
            if (r == 0 && !t->dec_next) {
                what = "decoder_prefix";
                MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, what, &c->k_step_prefix));
                r = mhla__fit_check(ctx, c->k_step_prefix, dp, 64 * dp * sizeof(float), fit);
                c->lws_step_prefix = mhla__local_size(ctx, c->k_step_prefix, 64 * dp) / dp * dp;
            }
        } else {
            /* A work-item walks Dk: its arrays (q~, k~, numerators: a few KiB) cannot shrink, and a
             * device without room for them is refused. */
            mhla_fit step_fit = *fit;
            r = mhla__fit_check(ctx, c->k_step, 1, mhla__decoder_step_local(cfg, t), &step_fit);
            MHLA_FAIL_IF(st, r > 0, ctx, MHLA_ERR_UNSUPPORTED,
                         "the decoder's step kernel (dk = %lld, dv = %lld) needs more local memory than %s has "
                         "(%llu bytes)",
                         (long long)cfg->dk, (long long)cfg->dv, ctx->device_name,
                         (unsigned long long)ctx->limits.local_mem_bytes);
            c->lws_step = mhla__local_size(ctx, c->k_step, 64);
        }
        if (t->dec_next) { /* a float per work-item, no local memory: any group fits */
            MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "decoder_resume", &c->k_resume));
            c->lws_resume = mhla__local_size(ctx, c->k_resume, 256);
        }
    }
    if (r == 0 && t->cp_ti) {
        what = "causal_prefix_tiled";
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_CAUSAL_PREFIX_TILED, cfg, t, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, what, &c->k_prefix_tiled));
        r = mhla__fit_check(ctx, c->k_prefix_tiled, mhla__prefix_tiled_wg(t), mhla__prefix_tiled_local(t), fit);
    }
    if (r == 0 && t->cs_tk) { /* the tiled summaries: built for exactly their group */
        what = "causal_summary_tiled";
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_CAUSAL_SUMMARY_TILED, cfg, t, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, what, &c->k_summary));
        c->lws_summary = mhla__causal_summary_tiled_wg(t);
        r = mhla__fit_check(ctx, c->k_summary, c->lws_summary, mhla__causal_summary_tiled_local(t), fit);
    }
    MHLA_FAIL_IF(st, r < 0, ctx, MHLA_ERR_OPENCL, "clGetKernelWorkGroupInfo(%s) failed on %s", what,
                 ctx->device_name);
    if (r > 0) {
        *refit = 1;
        goto cleanup;
    }
    if (!t->cs_tk) {
        MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_CAUSAL_SUMMARY, cfg, t, &prog));
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_summary", &c->k_summary));
        /* One chunk per group (the kernel's barriers count the chunk's tokens). */
        c->lws_summary = mhla__local_size(ctx, c->k_summary,
                                          summary_tiles(c) < (size_t)t->wg ? summary_tiles(c) : (size_t)t->wg);
    }
    /* causal_prefix.cl: a run's prefix where it is not tiled, and a decoder's chunk start (one
     * chunk's mixture, causal_prefix_one) where its steps do not sum it (dec_next) and decoder.cl's
     * parts form does not build it. The prefix mixtures see slots as rows of floats: only their
     * tiles specialize them. */
    const int one = with_step && t->dec_dp == 1 && !t->dec_next;
    if (t->cp_ti && !one)
        goto cleanup;
    MHLA_FORWARD_IF_ERROR(st, mhla__program_for(ctx, MHLA_KF_CAUSAL_PREFIX, cfg, t, &prog));
    c->lws_prefix = (size_t)t->wg;
    if (one) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_prefix_one", &c->k_prefix_one));
        c->lws_prefix = mhla__local_size(ctx, c->k_prefix_one, c->lws_prefix);
    }
    if (!t->cp_ti) {
        MHLA_FORWARD_IF_ERROR(st, mhla__kernel_create(ctx, prog, "causal_prefix", &c->k_prefix));
        c->lws_prefix = mhla__local_size(ctx, c->k_prefix, c->lws_prefix);
    }
cleanup:
    return st;
}

/* mhla__fit_build's steps for the causal kernels. */
typedef struct causal_try {
    mhla_causal *c;
    int with_step;
} causal_try;

static mhla_status attempt(void *arg, mhla_fit *fit, int *refit)
{
    mhla_status st = MHLA_OK;
    causal_try *t = arg;
    MHLA_FORWARD_IF_ERROR(st, mhla__tiles_causal(t->c->ctx, &t->c->cfg, &t->c->tuning, fit, &t->c->tiling));
    MHLA_FORWARD_IF_ERROR(st, build_kernels(t->c, t->with_step, fit, refit));
cleanup:
    return st;
}

static void release_try(void *arg) { release_kernels(((causal_try *)arg)->c); }

static void why_not(void *arg, const mhla_fit *fit, char *buf, size_t size)
{
    const mhla_causal *c = ((const causal_try *)arg)->c;
    snprintf(buf, size,
             "the causal output kernel does not fit %s (%zu work-items, %llu bytes of local memory usable) even "
             "with %d-token groups and %d-key passes",
             c->ctx->device_name, fit->wg, (unsigned long long)fit->local_bytes, c->tiling.tq, c->tiling.kt);
}

size_t mhla__causal_slot_stride(size_t used)
{
    return (((used + 15) / 16) | 1) * 16;
}

cl_int mhla__causal_slots_read(const mhla_causal *c, cl_mem buf, size_t first, size_t count, void *host)
{
    const size_t at[3] = {0, first, 0}, zero[3] = {0, 0, 0}, region[3] = {c->slot_used * sizeof(float), count, 1};
    return clEnqueueReadBufferRect(c->ctx->queue, buf, CL_TRUE, at, zero, region, c->slot_floats * sizeof(float), 0,
                                   region[0], 0, host, 0, NULL, NULL);
}

cl_int mhla__causal_slots_write(const mhla_causal *c, cl_mem buf, size_t first, size_t count, const void *host)
{
    const size_t at[3] = {0, first, 0}, zero[3] = {0, 0, 0}, region[3] = {c->slot_used * sizeof(float), count, 1};
    return clEnqueueWriteBufferRect(c->ctx->queue, buf, CL_TRUE, at, zero, region, c->slot_floats * sizeof(float), 0,
                                    region[0], 0, host, 0, NULL, NULL);
}

mhla_status mhla__causal_create(mhla_context *ctx, const mhla_config *cfg, int with_step, mhla_causal **out)
{
    mhla_status st = MHLA_OK;
    mhla_causal *c = NULL;

    *out = NULL;
    c = mhla__calloc(1, sizeof *c);
    MHLA_FAIL_IF(st, !c, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory creating the causal kernels");
    c->ctx = ctx;
    c->cfg = *cfg;
    c->bh = cfg->batch * cfg->heads;
    c->bh_kv = cfg->batch * (cfg->kv_heads ? cfg->kv_heads : cfg->heads);
    c->scols = cfg->dv + (cfg->normalizer == MHLA_NORMALIZER_PAPER ? 1 : 0);
    c->slot_used = (size_t)c->bh_kv * (size_t)cfg->dk * (size_t)c->scols;
    MHLA_FORWARD_IF_ERROR(st, mhla__tuning_lookup(ctx, cfg, &c->tuning));
    /* A device may allow fewer work-items, or less local memory, for the built output kernel than
     * for the device in general (rusticl on llvmpipe: 32 work-items, twice the arrays' bytes):
     * smaller tiles and a rebuild, a few times at most (each try at least halves something). */
    causal_try t = {c, with_step};
    const mhla_fit_loop loop = {attempt, release_try, why_not, &t, 8};
    MHLA_FORWARD_IF_ERROR(st, mhla__fit_build(ctx, &loop));
    /* the kernels were built for this layout (SLOT_PAD, kernels/causal.h) */
    c->slot_floats = c->tiling.slot_pad ? mhla__causal_slot_stride(c->slot_used) : c->slot_used;
    *out = c;
    c = NULL;
cleanup:
    mhla__causal_destroy(c);
    return st;
}

/* The prefix GEMMs of a run: CLBlast's temporary buffer sized for the largest, then one SGEMM
 * per block, accumulating into the rows the kernel wrote. */
mhla_status mhla__causal_gemm_reserve(mhla_causal *c, const mhla_chunk_tables *t, size_t *need_out)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = c->ctx;
    const size_t W = c->slot_floats, R = (size_t)c->cfg.mixing_rows;
    size_t need = 0;
    for (size_t g = 0; g < t->n_gemms; ++g) {
        size_t bytes = 0;
        MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_ld_temp_bytes(ctx, t->gemms[g].rows, W, t->gemms[g].k, R, W, W, &bytes));
        need = bytes > need ? bytes : need;
    }
    if (need > c->gemm_temp_bytes) {
        cl_mem grown = NULL;
        MHLA_FORWARD_IF_ERROR(st, mhla__buffer_create(ctx, CL_MEM_READ_WRITE, need,
                                                      "the prefix GEMMs' temporary buffer", &grown));
        if (c->gemm_temp)
            clReleaseMemObject(c->gemm_temp); /* enqueued work keeps it alive until it has run */
        c->gemm_temp = grown;
        c->gemm_temp_bytes = need;
    }
    if (need_out)
        *need_out = need;
cleanup:
    return st;
}

static mhla_status prefix_gemms(mhla_causal *c, const mhla_causal_run *run)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = c->ctx;
    const mhla_chunk_tables *t = run->tables;
    const size_t W = c->slot_floats, R = (size_t)c->cfg.mixing_rows;
    size_t need = 0;
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_gemm_reserve(c, t, &need));
    for (size_t g = 0; g < t->n_gemms; ++g) {
        const mhla_prefix_gemm *j = &t->gemms[g];
        if (g > 0) /* they share the temporary buffer */
            MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, mhla__sgemm_ld(ctx, j->rows, W, j->k, run->mixing, j->i0 * R, R, run->sums,
                                                 j->slot_base * W, W, 1.0f, run->pref, j->prow * W, W,
                                                 need ? c->gemm_temp : NULL, NULL));
    }
cleanup:
    return st;
}

mhla_status mhla__causal_enqueue_summaries(mhla_causal *c, const mhla_causal_run *run, cl_uint num_wait,
                                           const cl_event *wait)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = c->ctx;
    const mhla_chunk_tables *t = run->tables;
    const mhla_grid grid = mhla__causal_kv_grid(c, run->n);
    const float feature_eps = c->cfg.feature_eps;
    cl_kernel ks = c->k_summary;

    /* 1. S_j of every chunk into its slot, per key/value head. */
    {
        const size_t local[3] = {c->lws_summary, 1, 1};
        const size_t tn = (size_t)c->tiling.cs_tn; /* the tiled form: groups of tn rows x tn columns */
        const size_t tiles = tn ? c->lws_summary * (((size_t)c->cfg.dk + tn - 1) / tn) * (((size_t)c->cfg.dv + tn - 1) / tn)
                                : summary_tiles(c);
        const size_t extent[3] = {tiles, (size_t)c->bh_kv, t->n_chunks};
        MHLA_SET_ARGS(st, ctx, ks, 0, MHLA_ARG(run->k), MHLA_ARG(run->v), MHLA_ARG(run->chunks), MHLA_ARG(run->sums),
                      MHLA_ARG(grid), MHLA_ARG(feature_eps));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, ks, 3, extent, local, num_wait, wait, NULL,
                                               tn ? "clEnqueueNDRangeKernel(causal_summary_tiled)"
                                                  : "clEnqueueNDRangeKernel(causal_summary)"));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (run->marks)
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &run->marks[0]));
cleanup:
    return st;
}

mhla_status mhla__causal_enqueue_rest(mhla_causal *c, const mhla_causal_run *run, cl_event *done)
{
    mhla_status st = MHLA_OK;
    mhla_context *ctx = c->ctx;
    const mhla_config *cfg = &c->cfg;
    const mhla_chunk_tables *t = run->tables;
    const mhla_grid grid = mhla__causal_grid(c, run->n);
    const cl_int rows_mc = (cl_int)cfg->mixing_rows, gemm_rows = (cl_int)c->tiling.gemm_rows;
    const cl_long width = (cl_long)c->slot_floats;
    const float feature_eps = cfg->feature_eps, scale = cfg->scale, eps = cfg->eps;
    const int64_t span = t->max_len < 1 ? 1 : t->max_len;
    const int group_tokens = c->tiling.ct_sq ? c->tiling.ct_sq : c->tiling.tq; /* the output's */
    const cl_int tiles_per_chunk = (cl_int)((span + group_tokens - 1) / group_tokens);
    cl_kernel kp = c->k_prefix, ko = c->k_output;

    /* 2. P_i of every chunk: on GPU rows one tiled product over every earlier chunk; else the
     *    kernel sums each row's own block of chunks (one launch over all tiles), then CLBlast adds
     *    the earlier blocks. */
    if (c->tiling.cp_ti) {
        cl_kernel kt = c->k_prefix_tiled;
        const size_t wg = mhla__prefix_tiled_wg(&c->tiling);
        const size_t local[3] = {wg, 1, 1};
        const size_t extent[3] = {wg * ((c->slot_floats + (size_t)c->tiling.cp_tw - 1) / (size_t)c->tiling.cp_tw),
                                  t->n_tiles, 1};
        MHLA_SET_ARGS(st, ctx, kt, 0, MHLA_ARG(run->sums), MHLA_ARG(run->mixing), MHLA_ARG(run->tiles),
                      MHLA_ARG(run->pref), MHLA_ARG(rows_mc), MHLA_ARG(width));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kt, 2, extent, local, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(causal_prefix_tiled)"));
    } else {
        const size_t cols = (size_t)c->tiling.pre_ve * (size_t)c->tiling.mix_nv; /* of one work-item */
        const cl_int n_tiles = (cl_int)t->n_tiles;
        const size_t local[3] = {t->n_tiles < c->lws_prefix ? t->n_tiles : c->lws_prefix, 1, 1};
        const size_t extent[3] = {t->n_tiles, (c->slot_floats + cols - 1) / cols, 1};
        MHLA_SET_ARGS(st, ctx, kp, 0, MHLA_ARG(run->sums), MHLA_ARG(run->mixing), MHLA_ARG(run->tiles),
                      MHLA_ARG(run->pref), MHLA_ARG(rows_mc), MHLA_ARG(width), MHLA_ARG(gemm_rows), MHLA_ARG(n_tiles));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, kp, 2, extent, local, 0, NULL, NULL,
                                               "clEnqueueNDRangeKernel(causal_prefix)"));
    }
    if (t->n_gemms > 0) {
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
        MHLA_FORWARD_IF_ERROR(st, prefix_gemms(c, run));
    }
    MHLA_FORWARD_IF_ERROR(st, mhla__stage_barrier(ctx));
    if (run->marks)
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &run->marks[1]));
    /* 3. Every token's output. */
    {
        const size_t local[3] = {c->lws_output, 1, 1};
        const size_t global[3] = {c->lws_output, (size_t)c->bh, t->n_chunks * (size_t)tiles_per_chunk};
        MHLA_SET_ARGS(st, ctx, ko, 0, MHLA_ARG(run->q), MHLA_ARG(run->k), MHLA_ARG(run->v), MHLA_ARG(run->pref),
                      MHLA_ARG(run->mixing), MHLA_ARG(run->chunks), MHLA_ARG(run->out), MHLA_ARG(grid),
                      MHLA_ARG(rows_mc), MHLA_ARG(tiles_per_chunk), MHLA_ARG(feature_eps), MHLA_ARG(scale),
                      MHLA_ARG(eps));
        MHLA_FORWARD_IF_ERROR(st, mhla__launch(ctx, ko, 3, global, local, 0, NULL, done,
                                               c->tiling.ct_sq ? "clEnqueueNDRangeKernel(causal_output_tiled)"
                                                               : "clEnqueueNDRangeKernel(causal_output)"));
    }
    if (run->marks)
        MHLA_FORWARD_IF_ERROR(st, mhla__stage_mark(ctx, &run->marks[2]));
cleanup:
    return st;
}

mhla_status mhla__causal_enqueue(mhla_causal *c, const mhla_causal_run *run, cl_uint num_wait, const cl_event *wait,
                                 cl_event *done)
{
    mhla_status st = MHLA_OK;
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue_summaries(c, run, num_wait, wait));
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue_rest(c, run, done));
cleanup:
    return st;
}

mhla_status mhla__causal_enqueue_once(mhla_causal *c, mhla_causal_run *run, cl_uint num_wait, const cl_event *wait,
                                      cl_event *done)
{
    mhla_status st = MHLA_OK;
    run->chunks = run->tiles = NULL;
    MHLA_FORWARD_IF_ERROR(st, mhla__chunk_tables_upload(c->ctx, run->tables, &run->chunks, &run->tiles));
    MHLA_FORWARD_IF_ERROR(st, mhla__causal_enqueue(c, run, num_wait, wait, done));
cleanup:
    /* Enqueued kernels hold their own references to the tables. */
    if (run->chunks)
        clReleaseMemObject(run->chunks);
    if (run->tiles)
        clReleaseMemObject(run->tiles);
    run->chunks = run->tiles = NULL;
    return st;
}
