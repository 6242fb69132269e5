/* The op table of mhla-bench, one entry per op: what it computes, the flops and bytes it is credited
 * with, and how a run is prepared and enqueued (the decode op's hooks are in decode.c, the host
 * ops' in blas.c). The shapes, their block grids and chunks, and their configurations are shape.c. */
#include "bench.h"

#include <math.h>
#include <string.h>

/* ---- flops and bytes ------------------------------------------------------------------------- */

static double rows_of(const bench_shape *s) { return (double)s->batch * (double)s->heads * (double)bench_shape_n(s); }

/* The key/value side's rows: B*H_kv*N_kv (grouped heads, cross-attention), else rows_of(). */
static double kv_rows_of(const bench_shape *s)
{
    const double heads = (double)(s->kv_heads ? s->kv_heads : s->heads);
    return (double)s->batch * heads * (double)(s->kv_t ? s->kv_t : bench_shape_n(s));
}

/* The effective count for linear-time attention: 4*B*H*N*Dk*Dv (two products of Dk x Dv
 * per token: building the summaries and reading them out); with a key/value side of its own, the
 * summaries over its B*H_kv*N_kv rows and the read-out over the queries' B*H*N. */
static double linear_flops(const bench_shape *s)
{
    return 2.0 * (rows_of(s) + kv_rows_of(s)) * (double)s->dk * (double)s->dv;
}

/* Softmax attention: 2*B*H*N^2*(Dk + Dv) (scores and the weighted sum), 4*B*H*N^2*D for Dk = Dv. */
static double softmax_flops(const bench_shape *s)
{
    return 2.0 * rows_of(s) * (double)bench_shape_n(s) * (double)(s->dk + s->dv);
}

/* Compulsory traffic, in bytes: q, k, v read once and out written once. */
static double qkvo_bytes(const bench_shape *s)
{
    return 4.0 * (rows_of(s) + kv_rows_of(s)) * (double)(s->dk + s->dv);
}

/* Summaries of Dk x cols floats per batch, head and block (or chunk): written by the summary stage,
 * read by the mixing (causal: prefix) stage, their mixtures written by it and read by the output
 * stage, once each. */
static double workspace_bytes(const bench_shape *s, double cols)
{
    const double m = (double)bench_shape_m(s);
    return 4.0 * 4.0 * (double)s->batch * (double)(s->kv_heads ? s->kv_heads : s->heads) * m * (double)s->dk * cols;
}

/* MHLA adds its workspace, summaries of Dk x (Dv+1) (the paper normalizer's key sums), and the
 * M x M mixing matrix. */
static double mhla_bytes(const bench_shape *s)
{
    const double m = (double)bench_shape_m(s), mk = s->kv_bt ? (double)s->kv_bt : m;
    return qkvo_bytes(s) + workspace_bytes(s, (double)(s->dv + 1)) + 4.0 * m * mk;
}

/* The chunk form (docs/spec.md "Causal MHLA"), per batch and head, with M = ceil(N/C) chunks:
 * summaries and read-out as linear attention, 4*N*Dk*Dv; the prefix mixtures P_i = sum_{j<i}
 * Mc[i,j] S_j, 2*Dk*Dv per (i, j < i), 2*Dk*Dv*M(M-1)/2; the masked intra-chunk part, scores and
 * their weighted sum over the len(len+1)/2 visible pairs of each chunk, (Dk+Dv)*len(len+1). */
static double causal_flops(const bench_shape *s)
{
    const double bh = (double)s->batch * (double)s->heads, n = (double)bench_shape_n(s), c = (double)s->chunk;
    const double m = (double)bench_shape_m(s), dk = (double)s->dk, dv = (double)s->dv;
    const double full = floor(n / c), tail = n - full * c;
    const double pairs2 = full * c * (c + 1.0) + tail * (tail + 1.0); /* sum of len(len+1) */
    return bh * (4.0 * n * dk * dv + dk * dv * m * (m - 1.0) + (dk + dv) * pairs2);
}

/* Causal: summaries of Dk x Dv (normalizer none) and the lower triangle of Mc, M(M+1)/2 floats. */
static double causal_bytes(const bench_shape *s)
{
    const double m = (double)bench_shape_m(s);
    return qkvo_bytes(s) + workspace_bytes(s, (double)s->dv) + 4.0 * m * (m + 1.0) / 2.0;
}

/* The backward (docs/spec.md "Backward"), per batch and head: the gradient summaries G_i, and the
 * read-outs dq, dk and dv, four products of Dk x Dv per token, 8*N*Dk*Dv (twice the forward's);
 * the causal chunk form twice its forward's count (the prefix and its transpose, the masked part
 * for dq and for dk/dv). dMc's reduction (2*M^2*Dk*Dv) is left out, as the forward's mixing is. */
static double bwd_flops(const bench_shape *s) { return 2.0 * linear_flops(s); }
static double causal_bwd_flops(const bench_shape *s) { return 2.0 * causal_flops(s); }

/* q, k, v and dO read, dq, dk and dv written; the workspace written and read twice (S and G, their
 * mixtures). */
static double bwd_bytes(const bench_shape *s)
{
    const double m = (double)bench_shape_m(s);
    return 4.0 * rows_of(s) * (double)(2 * s->dk + 2 * s->dv) + 4.0 * kv_rows_of(s) * (double)(2 * s->dk + s->dv) +
           2.0 * workspace_bytes(s, (double)(s->dv + 1)) + 8.0 * m * m;
}

/* ---- runs through mhla_forward --------------------------------------------------------------- */

/* MHLA with the released code's default initializer (columns normalized). Linear attention is the
 * same plan on a shape whose block grid is 1x1x1 (the sweep gives it one), with mixing [[1]]. */
static mhla_status create_mhla(bench_case *c, const bench_shape *s)
{
    const mhla_config cfg = bench_config(s);
    mhla_status st = mhla_plan_create(c->ctx, &cfg, &c->plan);
    if (st == MHLA_OK)
        st = bench_mixing_create(c->ctx, BENCH_MIXING_INIT, s->bt, s->bh, s->bw, &c->mixing);
    return st;
}

/* The chunk form on a causal plan; its Mc has the rows the plan resolved (ceil(N/C)). */
static mhla_status create_causal(bench_case *c, const bench_shape *s)
{
    const mhla_config cfg = bench_causal_config(s);
    mhla_status st = mhla_plan_create(c->ctx, &cfg, &c->plan);
    if (st == MHLA_OK)
        st = bench_mixing_create(c->ctx, BENCH_CAUSAL_MIXING_INIT, mhla_plan_config(c->plan)->mixing_rows, 1, 1,
                                 &c->mixing);
    return st;
}

/* Cross-attention: its Mc is M x M_kv (the same initializer over the two block grids). */
static mhla_status create_cross(bench_case *c, const bench_shape *s)
{
    const mhla_config cfg = bench_config(s);
    mhla_status st = mhla_plan_create(c->ctx, &cfg, &c->plan);
    if (st == MHLA_OK)
        st = bench_mixing_create_cross(c->ctx, BENCH_MIXING_INIT, s->bt, s->bh, s->bw, s->kv_bt, &c->mixing);
    return st;
}

static mhla_status create_softmax(bench_case *c, const bench_shape *s)
{
    const mhla_config cfg = bench_config(s);
    return mhla_softmax_plan_create(c->ctx, &cfg, &c->plan);
}

static mhla_status enqueue_forward(bench_case *c, cl_event *done)
{
    return mhla_forward(c->plan, c->in->q, c->in->k, c->in->v, c->mixing, c->in->out, 0, NULL, done);
}

static mhla_status stages_forward(bench_case *c, double ms[3])
{
    mhla_stage_times t;
    const mhla_status st = mhla_plan_stage_times(c->plan, &t);
    if (st == MHLA_ERR_UNSUPPORTED) { /* no usable device timestamps: no stage split, no failure */
        ms[0] = ms[1] = ms[2] = NAN;
        return MHLA_OK;
    }
    ms[0] = t.summary_ms, ms[1] = t.mixing_ms, ms[2] = t.output_ms;
    return st;
}

/* The backward rows: the forward op's plan, dO = v (a read-only input, as a gradient buffer may
 * not be), and buffers for dq, dk, dv and dMc. */
static mhla_status create_grads(bench_case *c)
{
    cl_int err = CL_SUCCESS;
    static const mhla_tensor like[4] = {MHLA_TENSOR_Q, MHLA_TENSOR_K, MHLA_TENSOR_V, MHLA_TENSOR_MIXING};
    for (int i = 0; i < 4; ++i) {
        c->grads[i] = clCreateBuffer(mhla_context_cl_context(c->ctx), CL_MEM_READ_WRITE,
                                     mhla_plan_tensor_bytes(c->plan, like[i]), NULL, &err);
        if (err != CL_SUCCESS)
            return MHLA_ERR_OUT_OF_DEVICE_MEMORY;
    }
    return MHLA_OK;
}

static mhla_status create_mhla_bwd(bench_case *c, const bench_shape *s)
{
    mhla_status st = create_mhla(c, s);
    return st == MHLA_OK ? create_grads(c) : st;
}

static mhla_status create_causal_bwd(bench_case *c, const bench_shape *s)
{
    mhla_status st = create_causal(c, s);
    return st == MHLA_OK ? create_grads(c) : st;
}

/* The *-bwd-saved rows: the plan keeps its forward's summaries (mhla-causal: its chunk summaries and
 * prefix mixtures), and one forward of the row's buffers runs here (not timed): every timed
 * backward then reuses them, as the backward of a training step does right after its forward. */
static mhla_status keep_forward(bench_case *c, mhla_status st)
{
    if (st == MHLA_OK)
        st = mhla_plan_save_for_backward(c->plan, 1);
    if (st == MHLA_OK)
        st = mhla_forward(c->plan, c->in->q, c->in->k, c->in->v, c->mixing, c->in->out, 0, NULL, NULL);
    if (st == MHLA_OK && clFinish(mhla_context_queue(c->ctx)) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    return st;
}

static mhla_status create_mhla_bwd_saved(bench_case *c, const bench_shape *s)
{
    return keep_forward(c, create_mhla_bwd(c, s));
}

static mhla_status create_causal_bwd_saved(bench_case *c, const bench_shape *s)
{
    return keep_forward(c, create_causal_bwd(c, s));
}

static mhla_status enqueue_backward(bench_case *c, cl_event *done)
{
    return mhla_backward(c->plan, c->in->q, c->in->k, c->in->v, c->mixing, c->in->v, c->grads[0], c->grads[1],
                         c->grads[2], c->grads[3], 0, NULL, done);
}

static void destroy_plan(bench_case *c)
{
    for (int i = 0; i < 4; ++i)
        if (c->grads[i])
            clReleaseMemObject(c->grads[i]);
    memset(c->grads, 0, sizeof c->grads);
    mhla_plan_destroy(c->plan);
    if (c->mixing)
        clReleaseMemObject(c->mixing);
    c->plan = NULL;
    c->mixing = NULL;
}

/* Every forward starts from scratch: no prepare hook. */
#define FORWARD_HOOKS .enqueue = enqueue_forward, .destroy = destroy_plan

static const bench_op ops[BENCH_OP_COUNT] = {
    [BENCH_OP_MHLA] = {.name = "mhla", .estimable = 1, .flops = linear_flops, .bytes = mhla_bytes,
                       .create = create_mhla, .stages = stages_forward, FORWARD_HOOKS},
    [BENCH_OP_LINEAR] = {.name = "linear", .estimable = 1, .flops = linear_flops, .bytes = mhla_bytes,
                         .create = create_mhla, .stages = stages_forward, FORWARD_HOOKS},
    [BENCH_OP_SOFTMAX] = {.name = "softmax", .grid_free = 1, .estimable = 1, .flops = softmax_flops,
                          .bytes = qkvo_bytes, .create = create_softmax, FORWARD_HOOKS},
    [BENCH_OP_MHLA_CAUSAL] = {.name = "mhla-causal", .one_d_only = 1, .estimable = 1, .flops = causal_flops,
                              .bytes = causal_bytes, .create = create_causal, .stages = stages_forward,
                              FORWARD_HOOKS},
    [BENCH_OP_DECODE] = {.name = "decode", .one_d_only = 1, .flops = bench_decode_flops,
                         .bytes = bench_decode_bytes, .create = bench_decode_create,
                         .prepare = bench_decode_prepare, .enqueue = bench_decode_enqueue,
                         .step_count = bench_decode_steps, .marked_step = bench_decode_marked_step,
                         .step_ends = bench_decode_step_ends, .destroy = bench_decode_destroy},
    /* Credited with MHLA's flops and bytes: the same problem, so that GFLOP/s compare directly. */
    [BENCH_OP_BLAS] = {.name = "blas", .estimable = 1, .host = 1, .flops = linear_flops, .bytes = mhla_bytes,
                       .create = bench_blas_create, .enqueue = bench_blas_enqueue, .destroy = bench_blas_destroy},
    /* Never estimated: one fixed size, the reference every other row is read against. */
    [BENCH_OP_SGEMM] = {.name = "sgemm", .host = 1, .own_inputs = 1, .flops = bench_sgemm_flops,
                        .bytes = bench_sgemm_bytes, .create = bench_sgemm_create, .enqueue = bench_sgemm_enqueue,
                        .destroy = bench_sgemm_destroy},
    [BENCH_OP_MHLA_BWD] = {.name = "mhla-bwd", .estimable = 1, .flops = bwd_flops, .bytes = bwd_bytes,
                           .create = create_mhla_bwd, .enqueue = enqueue_backward, .destroy = destroy_plan},
    [BENCH_OP_LINEAR_BWD] = {.name = "linear-bwd", .estimable = 1, .flops = bwd_flops, .bytes = bwd_bytes,
                             .create = create_mhla_bwd, .enqueue = enqueue_backward, .destroy = destroy_plan},
    [BENCH_OP_MHLA_BWD_SAVED] = {.name = "mhla-bwd-saved", .estimable = 1, .flops = bwd_flops, .bytes = bwd_bytes,
                                 .create = create_mhla_bwd_saved, .enqueue = enqueue_backward,
                                 .destroy = destroy_plan},
    [BENCH_OP_MHLA_CAUSAL_BWD] = {.name = "mhla-causal-bwd", .one_d_only = 1, .estimable = 1,
                                  .flops = causal_bwd_flops, .bytes = bwd_bytes, .create = create_causal_bwd,
                                  .enqueue = enqueue_backward, .destroy = destroy_plan},
    [BENCH_OP_MHLA_CAUSAL_BWD_SAVED] = {.name = "mhla-causal-bwd-saved", .one_d_only = 1, .estimable = 1,
                                        .flops = causal_bwd_flops, .bytes = bwd_bytes,
                                        .create = create_causal_bwd_saved, .enqueue = enqueue_backward,
                                        .destroy = destroy_plan},
    [BENCH_OP_MHLA_GQA] = {.name = "mhla-gqa", .estimable = 1, .flops = linear_flops, .bytes = mhla_bytes,
                           .create = create_mhla, .stages = stages_forward, FORWARD_HOOKS},
    [BENCH_OP_MHLA_GQA_BWD] = {.name = "mhla-gqa-bwd", .estimable = 1, .flops = bwd_flops, .bytes = bwd_bytes,
                               .create = create_mhla_bwd, .enqueue = enqueue_backward, .destroy = destroy_plan},
    [BENCH_OP_DECODE_GQA] = {.name = "decode-gqa", .one_d_only = 1, .flops = bench_decode_flops,
                             .bytes = bench_decode_bytes, .create = bench_decode_create,
                             .prepare = bench_decode_prepare, .enqueue = bench_decode_enqueue,
                             .step_count = bench_decode_steps, .marked_step = bench_decode_marked_step,
                             .step_ends = bench_decode_step_ends, .destroy = bench_decode_destroy},
    [BENCH_OP_MHLA_CROSS] = {.name = "mhla-cross", .estimable = 1, .flops = linear_flops, .bytes = mhla_bytes,
                             .create = create_cross, .stages = stages_forward, FORWARD_HOOKS},
};

const bench_op *bench_op_get(bench_op_id id) { return id < BENCH_OP_COUNT ? &ops[id] : NULL; }

int bench_op_is_backward(bench_op_id id) { return id < BENCH_OP_COUNT && ops[id].enqueue == enqueue_backward; }

int bench_op_has_blocks(bench_op_id id)
{
    return id == BENCH_OP_MHLA || id == BENCH_OP_LINEAR || id == BENCH_OP_BLAS || id == BENCH_OP_MHLA_BWD ||
           id == BENCH_OP_LINEAR_BWD || id == BENCH_OP_MHLA_BWD_SAVED || id == BENCH_OP_MHLA_GQA ||
           id == BENCH_OP_MHLA_GQA_BWD || id == BENCH_OP_MHLA_CROSS;
}

bench_op_id bench_op_find(const char *name)
{
    for (int i = 0; i < BENCH_OP_COUNT; ++i)
        if (strcmp(ops[i].name, name) == 0)
            return (bench_op_id)i;
    return BENCH_OP_COUNT;
}
