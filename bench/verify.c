/* mhla-bench checks itself: before a row is timed, its op runs once on a small version of the row's
 * shape (the same heads, head dims, layout, block grid or chunk, fewer tokens: what the double
 * reference can afford), through the very hooks the timing uses, from a NaN-filled output, and is
 * compared with the library's double-precision reference (mhla_reference.h). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mhla_reference.h>

/* About this many tokens per verified shape: the reference of the linear-cost ops is
 * O(B*H*N*Dk*Dv) in double precision, a few milliseconds at the sweep's sizes; softmax's is O(N^2). */
#define VERIFY_TOKENS 512
#define VERIFY_SOFTMAX_TOKENS 128
/* The backward's reference differentiates the token-pair form, O(N^2 (Dk + Dv)) per head. */
#define VERIFY_BWD_TOKENS 192

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

int bench_verifiable(bench_op_id op) { return op != BENCH_OP_SGEMM && op < BENCH_OP_COUNT; }

bench_shape bench_verify_shape(bench_op_id op, const bench_shape *s)
{
    bench_shape v = *s;
    const int64_t n = bench_shape_n(s);
    const int bwd = bench_op_is_backward(op);
    const int64_t tokens = bwd ? VERIFY_BWD_TOKENS : VERIFY_TOKENS;
    switch (op) {
    case BENCH_OP_MHLA:
    case BENCH_OP_LINEAR:
    case BENCH_OP_BLAS: /* the same block grid, smaller blocks */
    case BENCH_OP_MHLA_BWD:
    case BENCH_OP_MHLA_BWD_SAVED:
    case BENCH_OP_LINEAR_BWD:
    case BENCH_OP_MHLA_GQA:
    case BENCH_OP_MHLA_GQA_BWD:
    case BENCH_OP_MHLA_CROSS: /* (its condition tokens kept: they are few) */
        if (bench_shape_is_2d(s)) {
            const int64_t side = max64(1, (int64_t)floor(sqrt((double)tokens / (double)(s->bh * s->bw))));
            v.h = s->bh * min64(s->h / s->bh, side);
            v.w = s->bw * min64(s->w / s->bw, side);
        } else {
            v.t = s->bt * min64(s->t / s->bt, max64(1, tokens / s->bt));
        }
        break;
    case BENCH_OP_SOFTMAX: /* grid-free: a 1D sequence */
        v.t = min64(n, VERIFY_SOFTMAX_TOKENS), v.h = v.w = 1;
        break;
    case BENCH_OP_MHLA_CAUSAL: /* the same chunk size; two chunks and a partial one at least */
    case BENCH_OP_MHLA_CAUSAL_BWD:
    case BENCH_OP_MHLA_CAUSAL_BWD_SAVED:
        v.t = min64(n, max64(tokens, 2 * s->chunk + s->chunk / 2 + 1)), v.h = v.w = 1;
        bench_set_chunk(&v, s->chunk);
        break;
    case BENCH_OP_DECODE: /* a shorter context at the same offset in its chunk: the same step starts one */
    case BENCH_OP_DECODE_GQA:
        v.t = min64(n, max64(1, VERIFY_TOKENS / s->chunk) * s->chunk + n % s->chunk), v.h = v.w = 1;
        bench_set_chunk(&v, s->chunk);
        break;
    default:
        break;
    }
    return v;
}


/* Random host q, k, v for shape v and their device copies, with a NaN-filled out. */
typedef struct verify_data {
    float *q, *k, *v, *mix;
    size_t nq, nv, nm; /* q's and out's elements (k and v: as many where the shape has no key/value side) */
    size_t nk, nkv;    /* k's and v's */
    bench_inputs in;
} verify_data;

static void data_free(verify_data *d)
{
    free(d->q), free(d->k), free(d->v), free(d->mix);
    cl_mem mems[] = {d->in.q, d->in.k, d->in.v, d->in.out};
    for (int i = 0; i < 4; ++i)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    memset(d, 0, sizeof *d);
}

static mhla_status nan_fill(mhla_context *ctx, cl_mem buf, size_t bytes)
{
    const cl_uint nan32 = 0x7FC00000u;
    return clEnqueueFillBuffer(mhla_context_queue(ctx), buf, &nan32, sizeof nan32, 0, bytes, 0, NULL, NULL) ==
                   CL_SUCCESS
               ? MHLA_OK
               : MHLA_ERR_OPENCL;
}

static mhla_status data_make(mhla_context *ctx, const bench_shape *v, uint64_t seed, verify_data *d)
{
    const size_t rows = (size_t)(v->batch * v->heads * bench_shape_n(v));
    const size_t kv_rows = (size_t)(v->batch * (v->kv_heads ? v->kv_heads : v->heads) *
                                    (v->kv_t ? v->kv_t : bench_shape_n(v)));
    d->nq = rows * (size_t)v->dk, d->nv = rows * (size_t)v->dv;
    d->nk = kv_rows * (size_t)v->dk, d->nkv = kv_rows * (size_t)v->dv;
    /* v's buffer holds out's elements at least: the backward rows pass it as dO too (ops.c) */
    const size_t nvbuf = d->nkv > d->nv ? d->nkv : d->nv;
    d->q = malloc(d->nq * sizeof *d->q), d->k = malloc(d->nk * sizeof *d->k), d->v = malloc(nvbuf * sizeof *d->v);
    if (!d->q || !d->k || !d->v)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    bench_fill_random(d->q, d->nq, seed * 4 + 0);
    bench_fill_random(d->k, d->nk, seed * 4 + 1);
    bench_fill_random(d->v, nvbuf, seed * 4 + 2);
    const float *host[3] = {d->q, d->k, d->v};
    const size_t elems[4] = {d->nq, d->nk, nvbuf, d->nv};
    cl_mem *mems[4] = {&d->in.q, &d->in.k, &d->in.v, &d->in.out};
    cl_int e = CL_SUCCESS;
    for (int i = 0; i < 4 && e == CL_SUCCESS; ++i)
        *mems[i] = clCreateBuffer(mhla_context_cl_context(ctx), i < 3 ? CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR
                                                                       : CL_MEM_READ_WRITE,
                                  elems[i] * sizeof(float), i < 3 ? (void *)host[i] : NULL, &e);
    if (e != CL_SUCCESS)
        return MHLA_ERR_OUT_OF_DEVICE_MEMORY;
    return nan_fill(ctx, d->in.out, d->nv * sizeof(float));
}

/* The mixing matrix the case made (read back from the device), in d->mix. */
static mhla_status read_mixing(mhla_context *ctx, cl_mem mixing, verify_data *d)
{
    size_t bytes = 0;
    if (!mixing || clGetMemObjectInfo(mixing, CL_MEM_SIZE, sizeof bytes, &bytes, NULL) != CL_SUCCESS)
        return MHLA_ERR_OPENCL;
    d->nm = bytes / sizeof(float);
    d->mix = malloc(bytes);
    if (!d->mix)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    return clEnqueueReadBuffer(mhla_context_queue(ctx), mixing, CL_TRUE, 0, bytes, d->mix, 0, NULL, NULL) ==
                   CL_SUCCESS
               ? MHLA_OK
               : MHLA_ERR_OPENCL;
}

/* The decode op's sequence: the context's tokens, then `steps` copies of the token every step
 * feeds ([B,H,D], the first B*H*D values of the inputs), in the shape's layout; H heads (k and v:
 * the key/value heads). */
static float *decode_sequence(const bench_shape *v, const float *x, int64_t H, int64_t d, int64_t steps)
{
    const int64_t B = v->batch, N = bench_shape_n(v), total = N + steps;
    float *seq = malloc((size_t)(B * total * H * d) * sizeof *seq);
    if (!seq)
        return NULL;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < total; ++t)
            for (int64_t h = 0; h < H; ++h) {
                const int bhnd = v->layout == MHLA_LAYOUT_BHND;
                float *dst = seq + (bhnd ? ((b * H + h) * total + t) : ((b * total + t) * H + h)) * d;
                const float *src = t < N ? x + (bhnd ? ((b * H + h) * N + t) : ((b * N + t) * H + h)) * d
                                         : x + (b * H + h) * d;
                memcpy(dst, src, (size_t)d * sizeof *dst);
            }
    return seq;
}

/* The decode op against the reference of its whole sequence: the prefill's output (the context's
 * tokens) and the last step's (the last token). Runs the op's prepare and enqueue hooks. */
static mhla_status verify_decode(bench_case *c, const bench_op *op, const bench_shape *v, verify_data *d,
                                 double *err)
{
    mhla_status st = MHLA_OK;
    /* the context, the step the prepare hook takes, and the run's C steps */
    const int64_t B = v->batch, H = v->heads, N = bench_shape_n(v), C = v->chunk, total = N + 1 + C;
    const size_t tok = (size_t)(B * H * v->dv);
    cl_command_queue queue = mhla_context_queue(c->ctx);
    cl_event done = NULL;
    const int64_t HK = v->kv_heads ? v->kv_heads : H;
    float *q = decode_sequence(v, d->q, H, v->dk, C + 1), *k = decode_sequence(v, d->k, HK, v->dk, C + 1);
    float *vv = decode_sequence(v, d->v, HK, v->dv, C + 1), *out = malloc((size_t)total * tok * sizeof *out);
    float *got = malloc((size_t)total * tok * sizeof *got), *last = malloc(tok * sizeof *last);
    double *ref = malloc((size_t)total * tok * sizeof *ref), *cmp = malloc((size_t)total * tok * sizeof *cmp);
    if (!q || !k || !vv || !out || !got || !last || !ref || !cmp) {
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    if ((st = read_mixing(c->ctx, c->mixing, d)) != MHLA_OK || (st = op->prepare(c)) != MHLA_OK ||
        (st = nan_fill(c->ctx, bench_decode_step_output(c), tok * sizeof(float))) != MHLA_OK ||
        (st = op->enqueue(c, &done)) != MHLA_OK)
        goto cleanup;
    if (clWaitForEvents(1, &done) != CL_SUCCESS ||
        clEnqueueReadBuffer(queue, bench_decode_step_output(c), CL_TRUE, 0, tok * sizeof *last, last, 0, NULL,
                            NULL) != CL_SUCCESS ||
        clEnqueueReadBuffer(queue, d->in.out, CL_TRUE, 0, d->nv * sizeof(float), out, 0, NULL, NULL) != CL_SUCCESS) {
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    mhla_config cfg = bench_causal_config(v);
    cfg.seq_t = total;
    cfg.mixing_rows = (total + C - 1) / C; /* as bench_decode_create() sizes Mc */
    if ((st = mhla_reference_forward(&cfg, q, k, vv, d->mix, ref)) != MHLA_OK)
        goto cleanup;
    /* Compared: the context's tokens (the prefill's output) and the last token (the last step's);
     * the steps before it wrote the same buffer. got and cmp hold them in (b, h, t) order. */
    const int bhnd = v->layout == MHLA_LAYOUT_BHND;
    const int64_t D = v->dv;
    size_t at = 0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t <= N; ++t, at += (size_t)D) {
                const int64_t tr = t < N ? t : total - 1; /* the token in the whole sequence */
                const float *src = t < N ? out + (bhnd ? ((b * H + h) * N + t) : ((b * N + t) * H + h)) * D
                                         : last + (b * H + h) * D;
                memcpy(got + at, src, (size_t)D * sizeof *got);
                memcpy(cmp + at, ref + (bhnd ? ((b * H + h) * total + tr) : ((b * total + tr) * H + h)) * D,
                       (size_t)D * sizeof *cmp);
            }
    *err = mhla_max_rel_err(got, cmp, at);
cleanup:
    if (done)
        clReleaseEvent(done);
    free(q), free(k), free(vv), free(out), free(got), free(last), free(ref), free(cmp);
    return st;
}

/* One run of the case from a NaN-filled output; *got is the op's output (host, malloc'd). */
static mhla_status run_once(bench_case *c, const bench_op *op, verify_data *d, float **got)
{
    mhla_status st = MHLA_OK;
    cl_event done = NULL;
    *got = malloc(d->nv * sizeof **got);
    if (!*got)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    if (op->prepare && (st = op->prepare(c)) != MHLA_OK)
        return st;
    if ((st = op->enqueue(c, &done)) != MHLA_OK)
        return st;
    if (op->host) { /* done when enqueue() returns */
        memcpy(*got, bench_blas_output(c), d->nv * sizeof **got);
        return MHLA_OK;
    }
    if (clWaitForEvents(1, &done) != CL_SUCCESS ||
        clEnqueueReadBuffer(mhla_context_queue(c->ctx), d->in.out, CL_TRUE, 0, d->nv * sizeof **got, *got, 0, NULL,
                            NULL) != CL_SUCCESS)
        st = MHLA_ERR_OPENCL;
    clReleaseEvent(done);
    return st;
}

/* The reference of the forward ops (mhla, linear, blas, softmax, mhla-causal) on d's inputs. */
static mhla_status reference(bench_case *c, bench_op_id id, const bench_shape *v, verify_data *d, double *ref)
{
    mhla_status st = MHLA_OK;
    if (id == BENCH_OP_SOFTMAX) {
        const mhla_config cfg = bench_config(v);
        return mhla_reference_softmax(&cfg, d->q, d->k, d->v, ref);
    }
    const mhla_config cfg = id == BENCH_OP_MHLA_CAUSAL ? bench_causal_config(v) : bench_config(v);
    if (id == BENCH_OP_BLAS) { /* the host op keeps its mixing on the host: the mhla rows' initializer */
        const size_t m = (size_t)bench_shape_m(v);
        d->nm = m * m;
        if (!(d->mix = malloc(d->nm * sizeof *d->mix)))
            return MHLA_ERR_OUT_OF_HOST_MEMORY;
        st = mhla_mixing_init(BENCH_MIXING_INIT, NULL, v->bt, v->bh, v->bw, d->mix, d->nm);
    } else {
        st = read_mixing(c->ctx, c->mixing, d);
    }
    return st == MHLA_OK ? mhla_reference_forward(&cfg, d->q, d->k, d->v, d->mix, ref) : st;
}

/* The backward ops (dO = v, as ops.c runs them) against mhla_reference_backward(): the largest of
 * the four gradients' errors. dMc is left out at M = 1 with a normalizer (docs/spec.md "Backward": the
 * single entry then changes the output only through eps, so its gradient is rounding noise). */
static mhla_status verify_backward(bench_case *c, bench_op_id id, const bench_op *op, const bench_shape *v,
                                   verify_data *d, double *err)
{
    mhla_status st = MHLA_OK;
    cl_event done = NULL;
    cl_command_queue queue = mhla_context_queue(c->ctx);
    const mhla_config cfg = id == BENCH_OP_MHLA_CAUSAL_BWD || id == BENCH_OP_MHLA_CAUSAL_BWD_SAVED
                                ? bench_causal_config(v)
                                : bench_config(v);
    if ((st = read_mixing(c->ctx, c->mixing, d)) != MHLA_OK)
        return st;
    const size_t n[4] = {d->nq, d->nk, d->nkv, d->nm};
    float *got[4] = {NULL};
    double *ref[4] = {NULL};
    for (int i = 0; i < 4; ++i)
        if (!(got[i] = malloc(n[i] * sizeof *got[i])) || !(ref[i] = malloc(n[i] * sizeof *ref[i]))) {
            st = MHLA_ERR_OUT_OF_HOST_MEMORY;
            goto cleanup;
        }
    for (int i = 0; i < 4 && st == MHLA_OK; ++i)
        st = nan_fill(c->ctx, c->grads[i], n[i] * sizeof(float));
    if (st != MHLA_OK || (st = op->enqueue(c, &done)) != MHLA_OK)
        goto cleanup;
    if (clWaitForEvents(1, &done) != CL_SUCCESS) {
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    for (int i = 0; i < 4; ++i)
        if (clEnqueueReadBuffer(queue, c->grads[i], CL_TRUE, 0, n[i] * sizeof(float), got[i], 0, NULL, NULL) !=
            CL_SUCCESS) {
            st = MHLA_ERR_OPENCL;
            goto cleanup;
        }
    if ((st = mhla_reference_backward(&cfg, d->q, d->k, d->v, d->mix, d->v, ref[0], ref[1], ref[2], ref[3])) !=
        MHLA_OK)
        goto cleanup;
    const int with_dmix = !(d->nm == 1 && cfg.normalizer != MHLA_NORMALIZER_NONE);
    *err = 0.0;
    for (int i = 0; i < (with_dmix ? 4 : 3); ++i) {
        const double e = mhla_max_rel_err(got[i], ref[i], n[i]);
        *err = e > *err || e != e ? e : *err;
    }
cleanup:
    if (done)
        clReleaseEvent(done);
    for (int i = 0; i < 4; ++i)
        free(got[i]), free(ref[i]);
    return st;
}

void bench_verify_record(bench_row *r, double max_rel_err, const char *why)
{
    r->verified = max_rel_err;
    r->verify_failed = !(max_rel_err <= r->verify_tolerance);
    if (r->verify_failed) {
        const size_t used = strlen(r->note);
        snprintf(r->note + used, sizeof r->note - used, "%sverification at N=%lld failed (tolerance %.0e): %s",
                 used ? "; " : "", (long long)r->verify_n, r->verify_tolerance, why);
    }
}

void bench_verify_row(mhla_context *ctx, const bench_options *o, bench_row *r)
{
    bench_verify_op(ctx, o, bench_op_get(r->op), r);
}

void bench_verify_op(mhla_context *ctx, const bench_options *o, const bench_op *op, bench_row *r)
{
    const bench_shape v = bench_verify_shape(r->op, &r->shape);
    verify_data d;
    bench_case c;
    float *got = NULL;
    double *ref = NULL, err = INFINITY;
    mhla_status st = MHLA_OK;
    memset(&d, 0, sizeof d);
    memset(&c, 0, sizeof c);
    if (!bench_verifiable(r->op))
        return;
    c.ctx = ctx, c.in = &d.in;
    r->verify_n = bench_shape_n(&v);
    const int bwd = bench_op_is_backward(r->op);
    r->verify_tolerance = bwd ? mhla_reference_backward_tolerance(MHLA_DTYPE_F32)
                              : mhla_reference_tolerance(MHLA_DTYPE_F32, bench_shape_n(&v));
    if ((st = data_make(ctx, &v, o->seed + 0x5EED, &d)) == MHLA_OK && (st = op->create(&c, &v)) == MHLA_OK) {
        if (r->op == BENCH_OP_DECODE || r->op == BENCH_OP_DECODE_GQA) {
            st = verify_decode(&c, op, &v, &d, &err);
        } else if (bwd) {
            st = verify_backward(&c, r->op, op, &v, &d, &err);
        } else if ((st = run_once(&c, op, &d, &got)) == MHLA_OK) {
            if (!(ref = malloc(d.nv * sizeof *ref)))
                st = MHLA_ERR_OUT_OF_HOST_MEMORY;
            else if ((st = reference(&c, r->op, &v, &d, ref)) == MHLA_OK)
                err = mhla_max_rel_err(got, ref, d.nv);
        }
    }
    char why[320];
    if (st != MHLA_OK) /* could not verify: a failed check, saying why */
        snprintf(why, sizeof why, "%s: %s", mhla_status_name(st), c.why[0] ? c.why : mhla_context_message(ctx));
    else
        snprintf(why, sizeof why, "max_rel_err %.3g against the double reference", err);
    bench_verify_record(r, st == MHLA_OK ? err : NAN, why);
    op->destroy(&c);
    clFinish(mhla_context_queue(ctx));
    data_free(&d);
    free(got), free(ref);
}
