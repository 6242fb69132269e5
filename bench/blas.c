/* mhla-bench's host ops. `blas`: MHLA's non-causal forward on the CPU in the GEMM formulation with
 * OpenBLAS's SGEMM, the plain-BLAS implementation a CPU user would write, timed against the
 * library on the same tensors. `sgemm`: OpenBLAS's SGEMM rate on the same cores, the reference of
 * the %sgemm column. Built without OpenBLAS, both ops exist and say why they cannot run. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef MHLA_BENCH_OPENBLAS

#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

/* Threading. The per-block GEMMs are small ([Dk x Nb] x [Nb x (Dv+1)] and [Nb x Dk] x
 * [Dk x (Dv+1)], Nb = 256 tokens at the rule's M): OpenBLAS threading each of them forks and joins
 * its pool per call, so the blocks are run in parallel instead, one thread per online CPU, each
 * calling single-threaded OpenBLAS. The obvious choice is the mixing GEMM on OpenBLAS's own threads;
 * but OpenBLAS 0.3.21's pool threads spin (yielding) for 2^28 cycles, about 0.1 s, after each
 * threaded call, longer than a whole forward, so they compete with the next block phases for the
 * cores. The mixing is therefore split into column slabs over the same threads, each slab a
 * single-threaded SGEMM of [M x M] x [M x W/slabs]: the same product, without OpenBLAS's pool.
 * Measured on the 2-core PoCL machine (B = 1, H = 8, Dk = Dv = 64; ms, median of >= 15 forwards,
 * the middle of three alternating rounds; the machine is shared):
 *                       ours, mixing in slabs   ours, mixing on OpenBLAS's   OpenBLAS threads all
 *   N = 1024  (M = 4)          1.32                      1.36                       2.51
 *   N = 4096  (M = 16)         7.99                     10.9                       13.5
 *   N = 16384 (M = 64)        36.7                      53.5                       65.9
 *   64x64 image (4x4)          7.39                      7.85                      14.1
 * With OPENBLAS_THREAD_TIMEOUT=4 in the environment (no spinning) the middle column matches the
 * first. MHLA_BENCH_BLAS_THREADING=mixing-openblas or =openblas selects the other two, for
 * experiments. */
typedef enum threading {
    THREAD_BLOCKS,          /* everything on our threads, single-threaded OpenBLAS calls */
    THREAD_MIXING_OPENBLAS, /* blocks on our threads, one mixing SGEMM on OpenBLAS's threads */
    THREAD_OPENBLAS         /* every SGEMM on OpenBLAS's threads, one call after another */
} threading;

/* One forward's sizes, arrays and workspace. sum and mixed hold the block summaries and their
 * mixtures as [M][B*H][Dk][Dv+1]: row-major [M x W], W = B*H*Dk*(Dv+1), so that the mixing is one
 * SGEMM and the summary of (batch*head bh, block b) is the Dk x (Dv+1) matrix at b*W + bh*Dk*(Dv+1). */
typedef struct blas_mhla {
    bench_shape s;
    int64_t n, m, nb, cols, w, units; /* tokens, blocks, tokens per block, Dv+1, W, B*H*M */
    int64_t slab_cols;                /* columns of a mixing slab */
    int64_t pt, ph, pw;               /* a block's extent on the token grid */
    float scale, feature_eps, eps;
    const float *q, *k, *v, *mixing;
    float *out;
    float *sum, *mixed;
    float *scratch; /* per thread: Nb x Dk (phi(k) or scale*phi(q)), Nb x (Dv+1) ([v | 1] or q~ S~) */
    int threads;
    threading how;
    struct member *members; /* threads of them */
} blas_mhla;

static int online_cpus(void)
{
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

/* Token index of position p in block blk (docs/spec.md "Token grid and blocks";
 * host/verify/reference.c). */
static int64_t token_of(const blas_mhla *w, int64_t blk, int64_t p)
{
    const bench_shape *s = &w->s;
    const int64_t bw_i = blk % s->bw, bh_i = (blk / s->bw) % s->bh, bt_i = blk / (s->bw * s->bh);
    const int64_t px = p % w->pw, py = (p / w->pw) % w->ph, pf = p / (w->pw * w->ph);
    return ((bt_i * w->pt + pf) * s->h + bh_i * w->ph + py) * s->w + bw_i * w->pw + px;
}

/* Offset of token t's row of `dim` floats for batch*head bh (b = bh / H, h = bh % H). */
static size_t row_at(const blas_mhla *w, int64_t bh, int64_t t, int64_t dim)
{
    if (w->s.layout == MHLA_LAYOUT_BHND)
        return (size_t)((bh * w->n + t) * dim);
    const int64_t b = bh / w->s.heads, h = bh % w->s.heads;
    return (size_t)(((b * w->n + t) * w->s.heads + h) * dim);
}

static float relu_eps(float x, float feature_eps) { return (x < 0.0f ? 0.0f : x) + feature_eps; }

/* Work unit u = (bh, blk) with blk varying first: S_b = phi(K_b)^T [V_b | 1], one SGEMM of
 * [Dk x Nb] x [Nb x (Dv+1)]; the column of ones makes the key sum z_b the last column. */
static void summary_unit(const blas_mhla *w, int64_t u, float *scratch)
{
    const int64_t bh = u / w->m, blk = u % w->m, dk = w->s.dk, dv = w->s.dv, c = w->cols;
    float *kt = scratch, *vt = scratch + w->nb * dk;
    for (int64_t p = 0; p < w->nb; ++p) {
        const int64_t t = token_of(w, blk, p);
        const float *kr = w->k + row_at(w, bh, t, dk);
        for (int64_t d = 0; d < dk; ++d)
            kt[p * dk + d] = relu_eps(kr[d], w->feature_eps);
        memcpy(vt + p * c, w->v + row_at(w, bh, t, dv), (size_t)dv * sizeof *vt);
        vt[p * c + dv] = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)dk, (int)c, (int)w->nb, 1.0f, kt, (int)dk, vt, (int)c,
                0.0f, w->sum + blk * w->w + bh * dk * c, (int)c);
}

/* [Nb x Dk] q~_b = scale*phi(Q_b) times [Dk x (Dv+1)] S~_b: numerators and, in the last column,
 * the paper normalizer's q~ . z~; out = numerators / (denominator + eps), scattered back. */
static void output_unit(const blas_mhla *w, int64_t u, float *scratch)
{
    const int64_t bh = u / w->m, blk = u % w->m, dk = w->s.dk, dv = w->s.dv, c = w->cols;
    float *qt = scratch, *r = scratch + w->nb * dk;
    for (int64_t p = 0; p < w->nb; ++p) {
        const float *qr = w->q + row_at(w, bh, token_of(w, blk, p), dk);
        for (int64_t d = 0; d < dk; ++d)
            qt[p * dk + d] = w->scale * relu_eps(qr[d], w->feature_eps);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)w->nb, (int)c, (int)dk, 1.0f, qt, (int)dk,
                w->mixed + blk * w->w + bh * dk * c, (int)c, 0.0f, r, (int)c);
    for (int64_t p = 0; p < w->nb; ++p) {
        const float *rp = r + p * c, inv = 1.0f / (rp[dv] + w->eps);
        float *o = w->out + row_at(w, bh, token_of(w, blk, p), dv);
        for (int64_t e = 0; e < dv; ++e)
            o[e] = rp[e] * inv;
    }
}

typedef void (*unit_fn)(const blas_mhla *w, int64_t u, float *scratch);

/* One phase over `count` units, handed out one at a time (a core slowed by other load takes fewer). */
typedef struct phase {
    unit_fn fn;
    int64_t count;
    atomic_llong next;
} phase;

/* A barrier whose count can drop to the threads that did start (pthread_barrier's cannot). */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int expected, arrived;
    unsigned generation;
} gate;

static void gate_wait(gate *g)
{
    pthread_mutex_lock(&g->mu);
    const unsigned gen = g->generation;
    if (++g->arrived == g->expected) {
        g->arrived = 0;
        ++g->generation;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->generation)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

/* One forward's team: its phases, run in order by every member with a gate between them; the
 * caller is member 0, and the single-threaded ways run the phases on it alone. */
typedef struct team {
    const blas_mhla *w;
    phase phases[3];
    int phase_count;
    gate gate;
} team;

typedef struct member {
    team *team;
    float *scratch;
    pthread_t tid;
    int started;
} member;

static void run_units(const team *t, phase *ph, float *scratch)
{
    for (int64_t u; (u = atomic_fetch_add(&ph->next, 1)) < ph->count;)
        ph->fn(t->w, u, scratch);
}

static void *run_member(void *arg)
{
    member *m = arg;
    for (int i = 0; i < m->team->phase_count; ++i) {
        if (i)
            gate_wait(&m->team->gate); /* the previous phase's results are complete */
        run_units(m->team, &m->team->phases[i], m->scratch);
    }
    return NULL;
}

/* Runs the team's phases on `threads` threads, the caller one of them; a thread that cannot be
 * started leaves its units to the others. */
static void run_team(blas_mhla *w, team *t, int threads)
{
    pthread_mutex_init(&t->gate.mu, NULL);
    pthread_cond_init(&t->gate.cv, NULL);
    t->gate.expected = threads, t->gate.arrived = 0, t->gate.generation = 0;
    int started = 1;
    for (int i = 0; i < threads; ++i) {
        w->members[i].team = t;
        w->members[i].scratch = w->scratch + (size_t)i * (size_t)(w->nb * (w->s.dk + w->cols));
        w->members[i].started = i && pthread_create(&w->members[i].tid, NULL, run_member, &w->members[i]) == 0;
        started += w->members[i].started;
    }
    /* Nobody has passed the first gate yet: it needs the caller, which has not arrived. */
    pthread_mutex_lock(&t->gate.mu);
    t->gate.expected = started;
    pthread_mutex_unlock(&t->gate.mu);
    run_member(&w->members[0]);
    for (int i = 1; i < threads; ++i)
        if (w->members[i].started)
            pthread_join(w->members[i].tid, NULL);
    pthread_cond_destroy(&t->gate.cv);
    pthread_mutex_destroy(&t->gate.mu);
}

/* Slab u of the mixing S~ = Mc S: columns [u*slab_cols, (u+1)*slab_cols) of the [M x W] operands. */
static void mixing_unit(const blas_mhla *w, int64_t u, float *scratch)
{
    (void)scratch;
    const int64_t c0 = u * w->slab_cols, c1 = c0 + w->slab_cols < w->w ? c0 + w->slab_cols : w->w;
    if (c1 > c0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)w->m, (int)(c1 - c0), (int)w->m, 1.0f,
                    w->mixing, (int)w->m, w->sum + c0, (int)w->w, 0.0f, w->mixed + c0, (int)w->w);
}

static void mixing_gemm(blas_mhla *w)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)w->m, (int)w->w, (int)w->m, 1.0f, w->mixing,
                (int)w->m, w->sum, (int)w->w, 0.0f, w->mixed, (int)w->w);
}

static void forward(blas_mhla *w)
{
    const phase sums = {.fn = summary_unit, .count = w->units}, outs = {.fn = output_unit, .count = w->units};
    const phase slabs = {.fn = mixing_unit, .count = (w->w + w->slab_cols - 1) / w->slab_cols};
    if (w->how == THREAD_BLOCKS) { /* all three phases on our threads */
        team t = {.w = w, .phases = {sums, slabs, outs}, .phase_count = 3};
        openblas_set_num_threads(1);
        run_team(w, &t, w->threads);
    } else if (w->how == THREAD_MIXING_OPENBLAS) { /* the mixing between two teams, on OpenBLAS's */
        team before = {.w = w, .phases = {sums}, .phase_count = 1};
        team after = {.w = w, .phases = {outs}, .phase_count = 1};
        openblas_set_num_threads(1);
        run_team(w, &before, w->threads);
        openblas_set_num_threads(w->threads);
        mixing_gemm(w);
        openblas_set_num_threads(1);
        run_team(w, &after, w->threads);
    } else { /* one call after another on the caller, each threaded by OpenBLAS */
        team t = {.w = w, .phases = {sums, outs}, .phase_count = 2};
        openblas_set_num_threads(w->threads);
        run_units(&t, &t.phases[0], w->scratch);
        mixing_gemm(w);
        run_units(&t, &t.phases[1], w->scratch);
    }
    openblas_set_num_threads(w->threads); /* as OpenBLAS starts, and as the sgemm row runs */
}

static void plan_free(blas_mhla *w)
{
    free(w->sum);
    free(w->mixed);
    free(w->scratch);
    free(w->members);
    w->sum = w->mixed = w->scratch = NULL;
    w->members = NULL;
}

/* Sizes and workspace of a forward of shape s; the arrays are set by the caller. */
static mhla_status plan_init(blas_mhla *w, const bench_shape *s, char *why, size_t why_size)
{
    const mhla_config cfg = bench_config(s);
    memset(w, 0, sizeof *w);
    w->s = *s;
    if (cfg.feature_map != MHLA_FEATURE_RELU_EPS || cfg.normalizer != MHLA_NORMALIZER_PAPER) {
        snprintf(why, why_size, "the blas op implements relu-eps with the paper normalizer only");
        return MHLA_ERR_UNSUPPORTED;
    }
    if (s->bt < 1 || s->bh < 1 || s->bw < 1 || s->t % s->bt || s->h % s->bh || s->w % s->bw) {
        snprintf(why, why_size, "the block grid does not tile the token grid");
        return MHLA_ERR_INVALID_SHAPE;
    }
    w->n = bench_shape_n(s), w->m = bench_shape_m(s), w->nb = w->n / w->m, w->cols = s->dv + 1;
    w->w = s->batch * s->heads * s->dk * w->cols, w->units = s->batch * s->heads * w->m;
    w->pt = s->t / s->bt, w->ph = s->h / s->bh, w->pw = s->w / s->bw;
    if (w->w > INT_MAX || w->nb * w->cols > INT_MAX) { /* cblas_sgemm's sizes are int */
        snprintf(why, why_size, "the mixing GEMM's %lld columns exceed the BLAS's int sizes", (long long)w->w);
        return MHLA_ERR_UNSUPPORTED;
    }
    w->scale = cfg.scale > 0.0f ? cfg.scale : 1.0f; /* 0: the non-causal default */
    w->feature_eps = cfg.feature_eps, w->eps = cfg.eps;
    w->threads = online_cpus();
    const char *env = getenv("MHLA_BENCH_BLAS_THREADING");
    w->how = !env                                 ? THREAD_BLOCKS
             : strcmp(env, "openblas") == 0        ? THREAD_OPENBLAS
             : strcmp(env, "mixing-openblas") == 0 ? THREAD_MIXING_OPENBLAS
                                                   : THREAD_BLOCKS;
    /* Four slabs per thread (a core slowed by other load takes fewer), whole cache lines of 16
     * floats, and at least 256 columns: a slab stays one large GEMM. */
    w->slab_cols = (w->w + 4 * w->threads - 1) / (4 * w->threads);
    w->slab_cols = w->slab_cols < 256 ? 256 : (w->slab_cols + 15) / 16 * 16;
    const size_t per_thread = (size_t)(w->nb * (s->dk + w->cols));
    w->sum = malloc((size_t)(w->m * w->w) * sizeof *w->sum);
    w->mixed = malloc((size_t)(w->m * w->w) * sizeof *w->mixed);
    w->scratch = malloc((size_t)w->threads * per_thread * sizeof *w->scratch);
    w->members = calloc((size_t)w->threads, sizeof *w->members);
    if (!w->sum || !w->mixed || !w->scratch || !w->members) {
        plan_free(w);
        snprintf(why, why_size, "out of host memory for the blas op's workspace");
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    }
    return MHLA_OK;
}

int bench_blas_available(void) { return 1; }

/* OpenBLAS (DYNAMIC_ARCH) picks its kernels from the CPU's family and model, and a model it does
 * not know (a virtual machine's generic "Intel(R) Xeon(R) Processor", a CPU newer than the build)
 * gets Prescott's SSE3 kernels: on a 2-core Xeon with AVX-512 (2026-11-26) the sgemm row read 32
 * GFLOP/s, where OpenBLAS's SkylakeX kernels reach 232 on the same cores. The blas and sgemm rows
 * are the peer the library is measured against, so they run OpenBLAS's kernels for the SIMD the CPU
 * has (OPENBLAS_CORETYPE, read once when OpenBLAS loads: hence a new exec). Only a core without
 * AVX2 kernels on a CPU with AVX2 and FMA is replaced, never a choice of the user's. */
const char *bench_blas_core_fix(const char **was)
{
    *was = NULL;
#if defined(__x86_64__) || defined(__i386__)
    static const char *const avx2_cores[] = {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen",
                                             "Excavator"};
    const char *core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") || !core || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return NULL;
    for (size_t i = 0; i < sizeof avx2_cores / sizeof avx2_cores[0]; ++i)
        if (!strcasecmp(core, avx2_cores[i]))
            return NULL;
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    *was = core;
    return avx512 ? "SkylakeX" : "Haswell";
#else
    return NULL;
#endif
}

/* openblas_get_config(), and which core mhla-bench set (bench_blas_core_fix) over OpenBLAS's own
 * choice (MHLA_BENCH_BLAS_CORE_WAS, set by main before its new exec). */
const char *bench_blas_config(void)
{
    static char text[512];
    const char *was = getenv("MHLA_BENCH_BLAS_CORE_WAS"), *now = getenv("OPENBLAS_CORETYPE");
    if (!was || !now)
        return openblas_get_config();
    snprintf(text, sizeof text, "%s (OPENBLAS_CORETYPE=%s set by mhla-bench: OpenBLAS took %s on this CPU)",
             openblas_get_config(), now, was);
    return text;
}
int bench_blas_threads(void) { return online_cpus(); }

mhla_status bench_blas_forward(const bench_shape *s, const float *q, const float *k, const float *v,
                               const float *mixing, float *out, char *why, size_t why_size)
{
    blas_mhla w;
    const mhla_status st = plan_init(&w, s, why, why_size);
    if (st != MHLA_OK)
        return st;
    w.q = q, w.k = k, w.v = v, w.mixing = mixing, w.out = out;
    forward(&w);
    plan_free(&w);
    return MHLA_OK;
}

/* What a case of the host ops holds: the blas op's host copies of the row's tensors and its
 * workspace, or the sgemm op's three matrices. */
typedef struct bench_blas {
    blas_mhla plan;
    float *q, *k, *v, *out, *mixing;
    float *a, *b, *c;
    int n; /* sgemm: the matrices' side */
} bench_blas;

void bench_blas_destroy(bench_case *c)
{
    bench_blas *b = c->blas;
    if (!b)
        return;
    plan_free(&b->plan);
    free(b->q), free(b->k), free(b->v), free(b->out), free(b->mixing);
    free(b->a), free(b->b), free(b->c);
    free(b);
    c->blas = NULL;
}

/* Reads the row's random q, k, v from the device once (the runs then only compute), and builds the
 * mixing matrix the mhla rows use. */
mhla_status bench_blas_create(bench_case *c, const bench_shape *s)
{
    mhla_status st = MHLA_OK;
    const size_t rows = (size_t)(s->batch * s->heads * bench_shape_n(s)), m = (size_t)bench_shape_m(s);
    const size_t nk = rows * (size_t)s->dk, nv = rows * (size_t)s->dv;
    const cl_command_queue queue = mhla_context_queue(c->ctx);
    bench_blas *b = c->blas = calloc(1, sizeof *b);
    cl_int e = CL_SUCCESS;
    if (!b) {
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    if ((st = plan_init(&b->plan, s, c->why, sizeof c->why)) != MHLA_OK)
        goto cleanup;
    b->q = malloc(nk * sizeof *b->q), b->k = malloc(nk * sizeof *b->k), b->v = malloc(nv * sizeof *b->v);
    b->out = malloc(nv * sizeof *b->out), b->mixing = malloc(m * m * sizeof *b->mixing);
    if (!b->q || !b->k || !b->v || !b->out || !b->mixing) {
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    if ((st = mhla_mixing_init(BENCH_MIXING_INIT, NULL, s->bt, s->bh, s->bw, b->mixing, m * m)) != MHLA_OK) {
        snprintf(c->why, sizeof c->why, "mhla_mixing_init: %s", mhla_last_message());
        goto cleanup;
    }
    e = clEnqueueReadBuffer(queue, c->in->q, CL_TRUE, 0, nk * sizeof *b->q, b->q, 0, NULL, NULL);
    if (e == CL_SUCCESS)
        e = clEnqueueReadBuffer(queue, c->in->k, CL_TRUE, 0, nk * sizeof *b->k, b->k, 0, NULL, NULL);
    if (e == CL_SUCCESS)
        e = clEnqueueReadBuffer(queue, c->in->v, CL_TRUE, 0, nv * sizeof *b->v, b->v, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
        snprintf(c->why, sizeof c->why, "reading the inputs back failed (OpenCL error %d)", (int)e);
        st = MHLA_ERR_OPENCL;
        goto cleanup;
    }
    b->plan.q = b->q, b->plan.k = b->k, b->plan.v = b->v, b->plan.mixing = b->mixing, b->plan.out = b->out;
cleanup:
    if (st == MHLA_ERR_OUT_OF_HOST_MEMORY && !c->why[0])
        snprintf(c->why, sizeof c->why, "out of host memory for the blas op's tensors");
    return st; /* the sweep calls destroy() whatever create() returned */
}

const float *bench_blas_output(const bench_case *c) { return c->blas->out; }

mhla_status bench_blas_enqueue(bench_case *c, cl_event *done)
{
    *done = NULL; /* done when this returns */
    forward(&c->blas->plan);
    return MHLA_OK;
}

mhla_status bench_sgemm_create(bench_case *c, const bench_shape *s)
{
    const size_t n = (size_t)s->t * (size_t)s->t;
    bench_blas *b = c->blas = calloc(1, sizeof *b);
    if (b) {
        b->a = malloc(n * sizeof *b->a), b->b = malloc(n * sizeof *b->b), b->c = malloc(n * sizeof *b->c);
    }
    if (!b || !b->a || !b->b || !b->c) {
        snprintf(c->why, sizeof c->why, "out of host memory for the sgemm op's matrices");
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    }
    b->n = (int)s->t;
    bench_fill_random(b->a, n, 1);
    bench_fill_random(b->b, n, 2);
    return MHLA_OK;
}

/* C = A B, row-major, no transposes, with OpenBLAS's threads on every online CPU. */
mhla_status bench_sgemm_enqueue(bench_case *c, cl_event *done)
{
    const bench_blas *b = c->blas;
    const int n = b->n;
    *done = NULL;
    openblas_set_num_threads(online_cpus());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, b->a, n, b->b, n, 0.0f, b->c, n);
    return MHLA_OK;
}

/* OpenBLAS's pool threads keep spinning for 2^28 TSC cycles after the sgemm row's threaded calls
 * (0.1 s at 2.6 GHz, 0.27 s at 1 GHz): waiting that out keeps them off the cores the next row runs
 * on (a CPU device's). Without it the first mhla row after the sgemm row measured 1.98 ms in place
 * of 1.01 ms. Once per sweep. */
void bench_sgemm_destroy(bench_case *c)
{
    const struct timespec settle = {0, 300000000};
    if (c->blas)
        nanosleep(&settle, NULL);
    bench_blas_destroy(c);
}

#else /* built without OpenBLAS: the ops exist, their rows are skipped with BENCH_NO_BLAS_NOTE */

int bench_blas_available(void) { return 0; }
const char *bench_blas_core_fix(const char **was)
{
    *was = NULL;
    return NULL;
}
const char *bench_blas_config(void) { return NULL; }
int bench_blas_threads(void) { return 0; }

mhla_status bench_blas_forward(const bench_shape *s, const float *q, const float *k, const float *v,
                               const float *mixing, float *out, char *why, size_t why_size)
{
    (void)s, (void)q, (void)k, (void)v, (void)mixing, (void)out;
    snprintf(why, why_size, "%s", BENCH_NO_BLAS_NOTE);
    return MHLA_ERR_UNSUPPORTED;
}

static mhla_status no_blas(bench_case *c, const bench_shape *s)
{
    (void)s;
    snprintf(c->why, sizeof c->why, "%s", BENCH_NO_BLAS_NOTE);
    return MHLA_ERR_UNSUPPORTED;
}

mhla_status bench_blas_create(bench_case *c, const bench_shape *s) { return no_blas(c, s); }
mhla_status bench_sgemm_create(bench_case *c, const bench_shape *s) { return no_blas(c, s); }

mhla_status bench_blas_enqueue(bench_case *c, cl_event *done)
{
    (void)c;
    *done = NULL;
    return MHLA_ERR_UNSUPPORTED;
}

mhla_status bench_sgemm_enqueue(bench_case *c, cl_event *done) { return bench_blas_enqueue(c, done); }
void bench_blas_destroy(bench_case *c) { (void)c; }
const float *bench_blas_output(const bench_case *c)
{
    (void)c;
    return NULL;
}
void bench_sgemm_destroy(bench_case *c) { (void)c; }

#endif

/* 2 n^3: one multiply-add per (i, j, l). Bytes: A and B read once, C written once. */
double bench_sgemm_flops(const bench_shape *s) { return 2.0 * (double)s->t * (double)s->t * (double)s->t; }
double bench_sgemm_bytes(const bench_shape *s) { return 3.0 * 4.0 * (double)s->t * (double)s->t; }
