/* The sweep of mhla-bench: the rows the options ask for (shapes x ops), which of them fit and are
 * worth running, random inputs per shape, and the timing of each row, with a progress line. */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A row of `op` on shape `s`, written at rows[count] when rows is not NULL. */
static void init_row(bench_row *rows, size_t count, bench_op_id op, const bench_shape *s)
{
    if (!rows)
        return;
    bench_row *r = &rows[count];
    memset(r, 0, sizeof *r);
    r->op = op;
    r->shape = *s;
    r->ms_median = r->ms_min = r->ms_max = NAN; /* no time until the row runs (null in the JSON) */
    r->gate_ms = r->span_ms = NAN;
    r->ratio_mhla_linear = r->ratio_softmax_mhla = r->ratio_causal_mhla = r->ratio_context = NAN;
    r->ratio_blas_mhla = r->pct_sgemm = NAN;
    r->stage_ms[0] = r->stage_ms[1] = r->stage_ms[2] = NAN;
    r->step_mean_ms = r->chunk_start_ms = r->tokens_per_s = NAN;
    r->verified = r->verify_tolerance = NAN; /* not verified until it runs */
    if (bench_op_get(op)->host && !bench_blas_available()) {
        r->status = BENCH_STATUS_SKIPPED;
        snprintf(r->note, sizeof r->note, "%s", BENCH_NO_BLAS_NOTE);
    }
}

/* The order of a shape's rows: MHLA beside its two baselines on the same blocks (linear, blas), then
 * softmax and the causal chunk form. */
static const bench_op_id shape_ops[] = {BENCH_OP_MHLA,           BENCH_OP_LINEAR,        BENCH_OP_BLAS,
                                        BENCH_OP_SOFTMAX,        BENCH_OP_MHLA_CAUSAL,   BENCH_OP_MHLA_BWD,
                                        BENCH_OP_MHLA_BWD_SAVED, BENCH_OP_LINEAR_BWD,    BENCH_OP_MHLA_CAUSAL_BWD,
                                        BENCH_OP_MHLA_CAUSAL_BWD_SAVED, BENCH_OP_MHLA_GQA, BENCH_OP_MHLA_GQA_BWD,
                                        BENCH_OP_MHLA_CROSS};

/* The key/value side of the grouped-heads and cross-attention ops: H_kv = H / BENCH_GQA_GROUP (at
 * least 1, dividing H), or the condition tokens of cross-attention. */
static void kv_side(bench_op_id op, bench_shape *s)
{
    if (op == BENCH_OP_MHLA_GQA || op == BENCH_OP_MHLA_GQA_BWD || op == BENCH_OP_DECODE_GQA) {
        s->kv_heads = s->heads % BENCH_GQA_GROUP == 0 ? s->heads / BENCH_GQA_GROUP : 1;
    } else if (op == BENCH_OP_MHLA_CROSS) {
        s->kv_t = BENCH_CROSS_TOKENS, s->kv_bt = BENCH_CROSS_BLOCKS;
    }
}

/* The rows of one shape, written at rows[count...] when rows is not NULL: the mhla rows (one per M
 * of --m, or the rule's M), then linear, blas (one per M, as mhla), softmax, and on 1D shapes
 * mhla-causal (one per chunk size). Returns the count after them. Decode rows have their own
 * contexts (decode_rows), the sgemm row its own size (plan_rows). */
static size_t shape_rows(const bench_options *o, const bench_shape *s, bench_row *rows, size_t count)
{
    for (size_t i = 0; i < sizeof shape_ops / sizeof shape_ops[0]; ++i) {
        const bench_op_id op = shape_ops[i];
        if (!(o->ops & (1u << op)) || (bench_shape_is_2d(s) && bench_op_get(op)->one_d_only))
            continue;
        /* cross-attention: an image's tokens attend to the condition tokens (which its k and v
         * buffers, the image's size, hold) */
        if (op == BENCH_OP_MHLA_CROSS && (!bench_shape_is_2d(s) || bench_shape_n(s) < BENCH_CROSS_TOKENS))
            continue;
        /* on MHLA's block grid */
        const int blocked = op == BENCH_OP_MHLA || op == BENCH_OP_BLAS || op == BENCH_OP_MHLA_BWD ||
                            op == BENCH_OP_MHLA_BWD_SAVED || op == BENCH_OP_MHLA_GQA || op == BENCH_OP_MHLA_GQA_BWD ||
                            op == BENCH_OP_MHLA_CROSS;
        const int chunked =
            op == BENCH_OP_MHLA_CAUSAL || op == BENCH_OP_MHLA_CAUSAL_BWD || op == BENCH_OP_MHLA_CAUSAL_BWD_SAVED;
        const size_t variants = blocked && o->m_count ? o->m_count : chunked ? o->chunk_count : 1;
        for (size_t v = 0; v < variants; ++v, ++count) {
            init_row(rows, count, op, s);
            if (!rows)
                continue;
            bench_row *r = &rows[count];
            kv_side(op, &r->shape);
            if (chunked)
                bench_set_chunk(&r->shape, o->chunk[v]);
            if (!blocked)
                continue; /* linear and softmax keep the 1x1x1 block grid */
            if (!o->m_count) {
                bench_default_blocks(&r->shape);
            } else if (!bench_blocks_for_m(&r->shape, o->m[v])) {
                r->status = BENCH_STATUS_SKIPPED;
                snprintf(r->note, sizeof r->note, "M = %lld does not tile the token grid", (long long)o->m[v]);
            }
        }
    }
    return count;
}

/* The decode rows of one head setting: per chunk size, one per context of --decode-context. */
static size_t decode_rows(const bench_options *o, const bench_shape *sizes, bench_row *rows, size_t count)
{
    static const bench_op_id decode_ops[2] = {BENCH_OP_DECODE, BENCH_OP_DECODE_GQA};
    for (int k = 0; k < 2; ++k) {
        if (!(o->ops & (1u << decode_ops[k])))
            continue;
        for (size_t ci = 0; ci < o->chunk_count; ++ci)
            for (size_t i = 0; i < o->decode_ctx_count; ++i, ++count) {
                bench_shape s = *sizes;
                s.t = o->decode_ctx[i], s.h = s.w = 1;
                bench_set_chunk(&s, o->chunk[ci]);
                kv_side(decode_ops[k], &s);
                init_row(rows, count, decode_ops[k], &s);
            }
    }
    return count;
}

/* All rows in order: the sgemm row, then per head dims and heads, the 1D lengths, the images, then
 * the decode contexts. */
static size_t plan_rows(const bench_options *o, bench_row *rows)
{
    size_t count = 0;
    if (o->ops & (1u << BENCH_OP_SGEMM)) { /* one square SGEMM, whatever the sweep's sizes */
        const bench_shape g = {1, 1, BENCH_SGEMM_N, 1, 1, 1, 1, 1, BENCH_SGEMM_N, BENCH_SGEMM_N, o->layout, 0, 0, 0, 0,
                               MHLA_NORMALIZER_PAPER};
        init_row(rows, count++, BENCH_OP_SGEMM, &g);
    }
    for (size_t di = 0; di < o->dims_count; ++di)
        for (size_t hi = 0; hi < o->heads_count; ++hi) {
            bench_shape s = {o->batch, o->heads[hi], 1, 1, 1, 1, 1, 1, o->dk[di], o->dv[di], o->layout, 0, 0, 0, 0,
                             o->normalizer};
            for (size_t gi = 0; gi < o->n_count + o->image_count; ++gi) {
                s.t = s.h = s.w = 1;
                if (gi < o->n_count)
                    s.t = o->n[gi];
                else
                    s.h = o->image_h[gi - o->n_count], s.w = o->image_w[gi - o->n_count];
                count = shape_rows(o, &s, rows, count);
            }
            count = decode_rows(o, &s, rows, count);
        }
    return count;
}

static void release_inputs(bench_inputs *in)
{
    cl_mem *mems[] = {&in->q, &in->k, &in->v, &in->out};
    for (size_t i = 0; i < 4; ++i)
        if (*mems[i]) {
            clReleaseMemObject(*mems[i]);
            *mems[i] = NULL;
        }
}

/* q, k, v with random data and out, for one shape. Returns 0 or -1 with the reason. */
static int make_inputs(mhla_context *ctx, const bench_shape *s, uint64_t seed, bench_inputs *in, char *err,
                       size_t err_size)
{
    const size_t rows = (size_t)(s->batch * s->heads * bench_shape_n(s));
    const size_t elems[4] = {rows * (size_t)s->dk, rows * (size_t)s->dk, rows * (size_t)s->dv, rows * (size_t)s->dv};
    cl_mem *mems[4] = {&in->q, &in->k, &in->v, &in->out};
    float *host = malloc((elems[0] > elems[2] ? elems[0] : elems[2]) * sizeof *host);
    cl_int e = host ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    for (size_t i = 0; i < 4 && e == CL_SUCCESS; ++i) {
        *mems[i] = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, elems[i] * sizeof *host, NULL, &e);
        if (e == CL_SUCCESS && i < 3) {
            bench_fill_random(host, elems[i], seed * 4 + i);
            e = clEnqueueWriteBuffer(mhla_context_queue(ctx), *mems[i], CL_TRUE, 0, elems[i] * sizeof *host, host, 0,
                                     NULL, NULL);
        }
    }
    free(host);
    if (e != CL_SUCCESS) {
        snprintf(err, err_size, "creating the inputs failed (OpenCL error %d)", (int)e);
        release_inputs(in);
        return -1;
    }
    return 0;
}

/* Why a shape cannot run on this device, or NULL: every buffer within the largest allocation and
 * all four within global memory. */
static const char *too_big(const bench_shape *s, const bench_device *dev, char *buf, size_t size)
{
    const double rows = (double)s->batch * (double)s->heads * (double)bench_shape_n(s);
    const double biggest = 4.0 * rows * (double)(s->dk > s->dv ? s->dk : s->dv);
    const double total = 4.0 * rows * (double)(2 * s->dk + 2 * s->dv);
    if (dev->max_alloc && biggest > (double)dev->max_alloc)
        snprintf(buf, size, "a %.0f MiB tensor exceeds CL_DEVICE_MAX_MEM_ALLOC_SIZE (%.0f MiB)", biggest / 1048576.0,
                 (double)dev->max_alloc / 1048576.0);
    else if (dev->global_mem && total > 0.8 * (double)dev->global_mem)
        snprintf(buf, size, "q, k, v and out need %.0f MiB, more than 80%% of the device's %.0f MiB", total / 1048576.0,
                 (double)dev->global_mem / 1048576.0);
    else
        return NULL;
    return buf;
}

int bench_estimate_instead(const bench_options *o, const bench_peak *peak, const bench_row *done, size_t n_done,
                           double budget_s, bench_row *r)
{
    const bench_op *op = bench_op_get(r->op);
    const double n = (double)bench_shape_n(&r->shape), runs = (double)(o->warmup + o->min_iters);
    if (!op->estimable) {
        if (budget_s > 0.0)
            return 0;
        r->status = BENCH_STATUS_SKIPPED;
        snprintf(r->note, sizeof r->note, "not run: no time left of the sweep's %.0f s (%s rows are never estimated)",
                 o->max_total_s, op->name);
        return 1;
    }
    /* The base: a measured row on the same kind of grid (1D or image) if there is one, else any;
     * among those the largest N. */
    const bench_row *base = NULL;
    for (size_t i = 0; i < n_done; ++i) {
        const bench_row *d = &done[i];
        if (d->status != BENCH_STATUS_OK || d->op != r->op || !bench_shape_same_sizes(&d->shape, &r->shape) ||
            d->shape.chunk != r->shape.chunk || (double)bench_shape_n(&d->shape) > n)
            continue;
        const int d_same = bench_shape_is_2d(&d->shape) == bench_shape_is_2d(&r->shape);
        const int b_same = base && bench_shape_is_2d(&base->shape) == bench_shape_is_2d(&r->shape);
        if (!base || d_same > b_same || (d_same == b_same && bench_shape_n(&d->shape) > bench_shape_n(&base->shape)))
            base = d;
    }
    if (base) {
        const double scale = op->flops(&r->shape) / op->flops(&base->shape);
        const double est = base->ms_median * scale;
        if (runs * est <= budget_s * 1e3)
            return 0;
        char grid[32];
        bench_shape_label(&base->shape, grid, sizeof grid);
        r->status = BENCH_STATUS_ESTIMATED;
        r->ms_median = est;
        r->ms_min = r->ms_max = NAN;
        snprintf(r->note, sizeof r->note,
                 "estimated from %s N=%lld by flops (x%.3g): %d runs of ~%.1f s exceed the row's %.0f s", grid,
                 (long long)bench_shape_n(&base->shape), scale, o->warmup + o->min_iters, est * 1e-3, budget_s);
        return 1;
    }
    const double floor_ms = peak->gflops > 0 ? op->flops(&r->shape) / (peak->gflops * 1e6) : 0.0;
    if (runs * floor_ms <= budget_s * 1e3)
        return 0;
    r->status = BENCH_STATUS_SKIPPED;
    snprintf(r->note, sizeof r->note, "would need over %.0f s even at the device's peak, more than the row's %.0f s",
             runs * floor_ms * 1e-3, budget_s);
    return 1;
}

/* A grid-free op (softmax) already measured at the same N on another token grid runs the very same
 * kernel launch: that time is reused rather than measured again. */
static int reuse_same_problem(const bench_row *done, size_t n_done, bench_row *r)
{
    if (!bench_op_get(r->op)->grid_free)
        return 0;
    for (size_t i = 0; i < n_done; ++i) {
        const bench_row *d = &done[i];
        if (d->status != BENCH_STATUS_OK || d->op != r->op || !bench_shape_same_sizes(&d->shape, &r->shape) ||
            bench_shape_n(&d->shape) != bench_shape_n(&r->shape))
            continue;
        char grid[32];
        bench_shape_label(&d->shape, grid, sizeof grid);
        r->status = BENCH_STATUS_OK;
        r->iters = d->iters;
        r->ms_median = d->ms_median, r->ms_min = d->ms_min, r->ms_max = d->ms_max;
        r->gate_ms = d->gate_ms, r->span_ms = d->span_ms;
        memcpy(r->stage_ms, d->stage_ms, sizeof r->stage_ms);
        r->verify_n = d->verify_n, r->verified = d->verified, r->verify_tolerance = d->verify_tolerance;
        r->verify_failed = d->verify_failed;
        snprintf(r->note, sizeof r->note, "the %s row's run: %s only sees N", grid, bench_op_get(r->op)->name);
        return 1;
    }
    return 0;
}

typedef struct run_arg {
    const bench_op *op;
    bench_case *c;
} run_arg;

static mhla_status enqueue_case(void *arg, cl_event *done)
{
    const run_arg *a = arg;
    return a->op->enqueue(a->c, done);
}

static mhla_status case_stages(void *arg, double ms[3])
{
    const run_arg *a = arg;
    return a->op->stages(a->c, ms);
}

static mhla_status prepare_case(void *arg)
{
    const run_arg *a = arg;
    return a->op->prepare(a->c);
}

static mhla_status case_step_ends(void *arg, cl_ulong *end_ns)
{
    const run_arg *a = arg;
    return a->op->step_ends(a->c, end_ns);
}

/* --kernels: one more run with every kernel's device time recorded, into r->kernels. */
static mhla_status kernel_times(mhla_context *ctx, const bench_op *op, bench_case *c, bench_row *r)
{
    mhla_status st = op->prepare ? op->prepare(c) : MHLA_OK;
    cl_event done = NULL;
    if (st == MHLA_OK)
        st = mhla_context_profile_kernels(ctx, 1);
    if (st == MHLA_OK)
        st = op->enqueue(c, &done);
    if (done) {
        clWaitForEvents(1, &done);
        clReleaseEvent(done);
    }
    if (st == MHLA_OK)
        st = mhla_context_kernel_times(ctx, r->kernels, sizeof r->kernels);
    mhla_context_profile_kernels(ctx, 0);
    return st;
}

static void run_row(mhla_context *ctx, const bench_options *o, const bench_inputs *in, bench_row *r)
{
    const bench_op *op = bench_op_get(r->op);
    bench_case c = {.ctx = ctx, .in = in};
    bench_timing t;
    char err[256] = "";
    bench_verify_row(ctx, o, r); /* once, at a small N, before the timing; a failure marks the row */
    mhla_status st = op->create(&c, &r->shape);
    if (st == MHLA_OK) {
        run_arg a = {op, &c};
        const int steps = op->step_count ? op->step_count(&c) : 0;
        const bench_job job = {op->prepare ? prepare_case : NULL,
                               enqueue_case,
                               op->stages ? case_stages : NULL,
                               steps ? case_step_ends : NULL,
                               steps,
                               steps ? op->marked_step(&c) : -1,
                               op->host,
                               &a};
        st = bench_time(mhla_context_queue(ctx), &job, o->warmup, o->target_ms, o->min_iters, o->max_iters, &t, err,
                        sizeof err);
        r->steps = steps;
        if (st == MHLA_OK && o->kernels && !op->host)
            st = kernel_times(ctx, op, &c, r);
    }
    if (st != MHLA_OK && !err[0]) /* a hook's failure: the op's own reason, or the library's */
        snprintf(err, sizeof err, "%s", c.why[0] ? c.why : mhla_context_message(ctx));
    op->destroy(&c);
    if (st == MHLA_ERR_OUT_OF_DEVICE_MEMORY || st == MHLA_ERR_UNSUPPORTED) { /* the device's limits */
        r->status = BENCH_STATUS_SKIPPED;
        snprintf(r->note, sizeof r->note, "%s", err);
        return;
    }
    if (st != MHLA_OK) {
        r->status = BENCH_STATUS_FAILED;
        snprintf(r->note, sizeof r->note, "%s: %s", mhla_status_name(st), err);
        return;
    }
    r->status = BENCH_STATUS_OK;
    r->host_clock = t.host_clock;
    r->iters = t.iters;
    r->ms_median = t.ms_median;
    r->ms_min = t.ms_min;
    r->ms_max = t.ms_max;
    memcpy(r->stage_ms, t.stage_ms, sizeof r->stage_ms);
    r->gate_ms = t.gate_ms, r->span_ms = r->steps ? NAN : t.span_ms;
    if (r->steps) { /* the row's times are per step (token); its runs' mean step and chunk start beside */
        r->ms_median = t.step_median, r->ms_min = t.step_min, r->ms_max = t.step_max;
        r->step_mean_ms = t.step_mean;
        r->chunk_start_ms = t.marked_ms;
        r->tokens_per_s = bench_tokens_per_s(r->shape.batch, t.step_mean);
    }
}

static void progress(const bench_options *o, size_t i, size_t total, const bench_row *r, double t0)
{
    if (o->quiet)
        return;
    char shape[64], blocks[32];
    bench_shape_label(&r->shape, shape, sizeof shape);
    bench_blocks_label(r, blocks, sizeof blocks);
    const int tty = isatty(fileno(stderr));
    fprintf(stderr, "%s[%zu/%zu] %-11s %-8s M=%-5s H=%lld Dk=%lld Dv=%lld  (%.0f s elapsed)%s", tty ? "\r\033[K" : "",
            i + 1, total, bench_op_get(r->op)->name, shape, blocks, (long long)r->shape.heads,
            (long long)r->shape.dk, (long long)r->shape.dv, bench_now() - t0, tty ? "" : "\n");
    fflush(stderr);
}

int bench_sweep_run(mhla_context *ctx, const bench_options *o, bench_report *rep)
{
    const size_t total = plan_rows(o, NULL);
    bench_row *rows = calloc(total ? total : 1, sizeof *rows);
    bench_inputs in = {NULL, NULL, NULL, NULL};
    const bench_shape *in_shape = NULL;
    const double t0 = bench_now();
    if (!rows)
        return -1;
    plan_rows(o, rows);
    for (size_t i = 0; i < total; ++i) {
        bench_row *r = &rows[i];
        char why[160];
        progress(o, i, total, r, t0);
        if (r->status != BENCH_STATUS_OK) /* decided while planning */
            continue;
        const int own_inputs = bench_op_get(r->op)->own_inputs;
        if (!own_inputs && too_big(&r->shape, &rep->device, why, sizeof why)) {
            r->status = BENCH_STATUS_SKIPPED;
            snprintf(r->note, sizeof r->note, "%s", why);
            continue;
        }
        /* The row's time: --max-row-s, and what is left of --max-total-s. */
        const double left = o->max_total_s > 0 ? o->max_total_s - (bench_now() - t0) : INFINITY;
        const double budget = left < o->max_row_s ? (left > 0 ? left : 0) : o->max_row_s;
        if (reuse_same_problem(rows, i, r) || bench_estimate_instead(o, &rep->peak, rows, i, budget, r))
            continue;
        if (own_inputs) {
            run_row(ctx, o, &in, r);
            continue;
        }
        /* Inputs are made once per token grid and head sizes, and shared by its ops. */
        if (in_shape && !bench_shape_same_tensors(in_shape, &r->shape)) {
            release_inputs(&in);
            in_shape = NULL;
        }
        if (!in_shape) {
            if (make_inputs(ctx, &r->shape, o->seed + i, &in, why, sizeof why)) {
                r->status = BENCH_STATUS_FAILED;
                snprintf(r->note, sizeof r->note, "%s", why);
                continue;
            }
            in_shape = &r->shape;
        }
        run_row(ctx, o, &in, r);
    }
    release_inputs(&in);
    if (!o->quiet && isatty(fileno(stderr)))
        fprintf(stderr, "\r\033[K");
    rep->rows = rows;
    rep->row_count = total;
    bench_fill_rates(rows, total, &rep->peak);
    bench_fill_ratios(rows, total);
    return 0;
}
