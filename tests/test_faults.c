/* Fault injection (host/core/testing.h): for k = 1, 2, ... the k-th host allocation, then the k-th
 * clCreateBuffer, of a call fails, until the call completes. Every failure must return the named
 * status of the fault, explain itself, free everything it allocated (live allocations and the
 * cl_context's reference count as before), and leave the caller's output (a sentinel) and a
 * decoder's position and state as they were. The run that completes is checked against the double
 * reference. Paths: plan and decoder creation on a cold context (programs built or loaded from the
 * disk cache), the forward (own mixing kernel and CLBlast), softmax, causal, varlen, the
 * decoder's step and prefill, and the backward (non-causal and causal; its output is dq, dk, dv and
 * dmixing one after another, held to the backward's tolerance). The counts tried and survived are
 * printed per path. */
#include "helpers.h"
#include "core/testing.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#define SENTINEL 0xA5

typedef enum path_kind { P_CREATE, P_FORWARD, P_VARLEN, P_STEP, P_PREFILL, P_BACKWARD } path_kind;

typedef struct fault_path {
    const char *name;
    path_kind kind;
    mhla_config cfg;
    int softmax;        /* a softmax plan */
    const char *tuning; /* mhla_context_set_tuning() of the path's context, or NULL */
    /* varlen */
    int32_t cu[4];
    size_t num_seqs;
    /* decoder: tokens consumed before the armed call, and tokens it consumes */
    int64_t before, count;
} fault_path;

typedef struct fault_tally {
    long tried, survived, absorbed; /* absorbed: the fault fired, the call recovered and succeeded */
} fault_tally;

/* The path's inputs and reference output, computed once. */
typedef struct path_data {
    test_inputs in;
    double *ref;
    size_t out_elems; /* of the armed call's output */
    size_t out_offset; /* decoder paths: the armed call's first output element in `ref` (BNHD, B=1) */
} path_data;

/* Wrapped so that the test holds its own reference to the cl_context: after a call and its cleanup
 * the count is what it was, or a program, kernel, queue or buffer leaked (each retains it). */
typedef struct test_ctx {
    cl_context cl;
    cl_command_queue queue;
    mhla_context *ctx;
} test_ctx;

/* The spec calls CL_CONTEXT_REFERENCE_COUNT a debugging aid; PoCL keeps it exact (every buffer,
 * program, kernel, queue and event retains its context), rusticl counts its own internal references
 * too. The OpenCL leak checks run on PoCL; the host-allocation checks everywhere. */
static int refs_exact;

static void ctx_open(test_ctx *t, const char *tuning)
{
    static cl_device_id dev; /* the test device (MHLA_DEVICE honoured), found once */
    if (!dev) {
        mhla_context *probe = test_context();
        dev = mhla_context_device(probe);
        assert_int_equal(clRetainDevice(dev), CL_SUCCESS);
        mhla_context_destroy(probe);
        cl_platform_id platform = NULL;
        char name[256] = "";
        assert_int_equal(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL), CL_SUCCESS);
        assert_int_equal(clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof name - 1, name, NULL), CL_SUCCESS);
        refs_exact = strstr(name, "Portable Computing Language") != NULL;
        if (!refs_exact)
            printf("faults: OpenCL objects are not counted on '%s' (the host allocations are)\n", name);
    }
    cl_int err = CL_SUCCESS;
    t->cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    t->queue = clCreateCommandQueue(t->cl, dev, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(mhla_context_wrap(t->cl, t->queue, &t->ctx), MHLA_OK);
    if (tuning)
        assert_int_equal(mhla_context_set_tuning(t->ctx, tuning), MHLA_OK);
}

static cl_uint cl_refs(const test_ctx *t)
{
    cl_uint refs = 0;
    assert_int_equal(clGetContextInfo(t->cl, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL), CL_SUCCESS);
    return refs;
}

/* The context's reference count once the runtime has let go of what earlier calls' commands held
 * (PoCL releases them after the commands complete, asynchronously): after clFinish, read until three
 * reads 2 ms apart agree. A count read while such releases are pending is too high, and the settled
 * count after the call then looks like an over-release (seen once on a loaded machine: 9 against 11). */
static cl_uint cl_refs_steady(const test_ctx *t)
{
    assert_int_equal(clFinish(t->queue), CL_SUCCESS);
    cl_uint last = cl_refs(t);
    const double start = host_ms();
    for (int same = 0; same < 2 && host_ms() - start < REFS_SETTLE_MS;) {
        const struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL);
        const cl_uint now = cl_refs(t);
        same = now == last ? same + 1 : 0;
        last = now;
    }
    return last;
}

static void ctx_close(test_ctx *t)
{
    mhla_context_destroy(t->ctx);
    clReleaseCommandQueue(t->queue);
    double waited = 0;
    const cl_uint refs = refs_exact ? context_refs_settled(t->cl, 1, &waited) : 1;
    if (refs != 1)
        fail_msg("the cl_context holds %u references %.1f s after mhla_context_destroy (polled while above 1): "
                 "an OpenCL object leaked",
                 refs, waited / 1e3);
    clReleaseContext(t->cl);
}

static void data_make(const fault_path *p, path_data *d)
{
    memset(d, 0, sizeof *d);
    d->out_elems = 1;
    if (p->kind == P_CREATE)
        return; /* nothing runs */
    assert_int_equal(test_inputs_make(&p->cfg, TEST_INIT_RANDOM, 14, &d->in), MHLA_OK);
    if (p->kind == P_BACKWARD) { /* dout = v; the gradients dq, dk, dv, dmixing end to end */
        const size_t nq = d->in.nq, nv = d->in.nv;
        d->out_elems = 2 * nq + nv + d->in.nm;
        d->ref = malloc(d->out_elems * sizeof *d->ref);
        assert_non_null(d->ref);
        assert_int_equal(mhla_reference_backward(&p->cfg, d->in.q, d->in.k, d->in.v, d->in.mix, d->in.v, d->ref,
                                                 d->ref + nq, d->ref + 2 * nq, d->ref + 2 * nq + nv),
                         MHLA_OK);
        return;
    }
    d->ref = malloc(d->in.nv * sizeof *d->ref);
    assert_non_null(d->ref);
    if (p->softmax)
        assert_int_equal(mhla_reference_softmax(&p->cfg, d->in.q, d->in.k, d->in.v, d->ref), MHLA_OK);
    else if (p->kind == P_VARLEN)
        assert_int_equal(
            mhla_reference_forward_varlen(&p->cfg, d->in.q, d->in.k, d->in.v, d->in.mix, p->cu, p->num_seqs, d->ref),
            MHLA_OK);
    else
        assert_int_equal(mhla_reference_forward(&p->cfg, d->in.q, d->in.k, d->in.v, d->in.mix, d->ref), MHLA_OK);
    d->out_elems = d->in.nv;
    d->out_offset = 0;
    if (p->kind == P_STEP || p->kind == P_PREFILL) { /* batch 1, BNHD: token t is a contiguous row */
        const size_t row = (size_t)(p->cfg.heads * p->cfg.dv);
        d->out_offset = (size_t)p->before * row;
        d->out_elems = (size_t)p->count * row;
    }
}

static void data_free(path_data *d)
{
    test_inputs_free(&d->in);
    free(d->ref);
}

static void *offset_rows(const float *x, const fault_path *p, int64_t t0, int64_t d)
{
    return (void *)(x + (size_t)(t0 * p->cfg.heads * d));
}

static int sentinel_intact(const unsigned char *out, size_t bytes)
{
    for (size_t i = 0; i < bytes; ++i)
        if (out[i] != SENTINEL)
            return 0;
    return 1;
}

/* One attempt with the k-th fault of `kind` armed around the path's call (k = 0: none). Returns
 * whether the fault fired; checks everything a failure must leave as it was. */
static int attempt(test_ctx *t, const fault_path *p, const path_data *d, mhla__fault_kind kind, long k,
                   fault_tally *tally)
{
    mhla_context *ctx = t->ctx;
    mhla_plan *plan = NULL;
    mhla_decoder *dec = NULL;
    unsigned char *state = NULL, *state_after = NULL;
    size_t state_bytes = 0;
    float *out = malloc(d->out_elems * sizeof *out);
    float *scratch = malloc(d->in.nv * sizeof *scratch);
    assert_non_null(out), assert_non_null(scratch);
    memset(out, SENTINEL, d->out_elems * sizeof *out);
    mhla_status st = MHLA_OK, created = MHLA_OK;
    const long live_start = mhla__live_allocations();

    /* Decoder paths: a decoder that has consumed `before` tokens, its state saved (unarmed). */
    if (p->kind == P_STEP || p->kind == P_PREFILL) {
        assert_int_equal(mhla_decoder_create(ctx, &p->cfg, p->cfg.seq_t, &dec), MHLA_OK);
        if (p->before > 0)
            assert_int_equal(mhla_decoder_prefill_host(dec, d->in.q, d->in.k, d->in.v, d->in.mix, scratch, p->before),
                             MHLA_OK);
        state_bytes = mhla_decoder_state_size(dec);
        state = malloc(state_bytes), state_after = malloc(state_bytes);
        assert_non_null(state), assert_non_null(state_after);
        assert_int_equal(mhla_decoder_state_read(dec, state, state_bytes), MHLA_OK);
    }
    const long live = mhla__live_allocations();
    const cl_uint refs = refs_exact ? cl_refs_steady(t) : cl_refs(t);

    mhla__fault_arm(kind, k);
    switch (p->kind) {
    case P_CREATE:
        if (p->cfg.causal && p->cfg.seq_t == 0)
            st = mhla_decoder_create(ctx, &p->cfg, 40, &dec);
        else if (p->softmax)
            st = mhla_softmax_plan_create(ctx, &p->cfg, &plan);
        else if (p->cfg.varlen) /* a varlen shard: chunks [1, 4) of the packed list */
            st = mhla_plan_create_shard_varlen(ctx, &p->cfg, p->cu, p->num_seqs, 1, 3, &plan);
        else
            st = mhla_plan_create(ctx, &p->cfg, &plan);
        break;
    case P_FORWARD:
    case P_VARLEN:
        st = created = p->softmax ? mhla_softmax_plan_create(ctx, &p->cfg, &plan)
                                  : mhla_plan_create(ctx, &p->cfg, &plan);
        if (st == MHLA_OK)
            st = p->kind == P_VARLEN
                     ? mhla_forward_varlen_host(plan, d->in.q, d->in.k, d->in.v, d->in.mix, p->cu, p->num_seqs, out)
                     : mhla_forward_host(plan, d->in.q, d->in.k, d->in.v, d->in.mix, out);
        break;
    case P_BACKWARD: {
        const size_t nq = d->in.nq, nv = d->in.nv;
        st = created = mhla_plan_create(ctx, &p->cfg, &plan);
        if (st == MHLA_OK)
            st = mhla_backward_host(plan, d->in.q, d->in.k, d->in.v, d->in.mix, d->in.v, out, out + nq, out + 2 * nq,
                                    out + 2 * nq + nv);
        break;
    }
    case P_STEP:
    case P_PREFILL: {
        const void *q = offset_rows(d->in.q, p, p->before, p->cfg.dk);
        const void *kk = offset_rows(d->in.k, p, p->before, p->cfg.dk);
        const void *v = offset_rows(d->in.v, p, p->before, p->cfg.dv);
        st = p->kind == P_STEP ? mhla_decoder_step_host(dec, q, kk, v, d->in.mix, out, p->count)
                               : mhla_decoder_prefill_host(dec, q, kk, v, d->in.mix, out, p->count);
        break;
    }
    }
    const int fired = mhla__fault_fired(kind);
    mhla__fault_arm(kind, 0);
    /* A creation that failed must have left its handle NULL. */
    if (p->kind == P_CREATE)
        created = st;
    if (created != MHLA_OK && (plan || (p->kind == P_CREATE && dec)))
        fail_msg("%s: a failed creation left a handle", p->name);
    /* The call's output (the decoder keeps its own outputs) */
    const int out_written = st == MHLA_OK && p->kind != P_CREATE;
    if (out_written) {
        const double err = finite_rel_err(out, d->ref + d->out_offset, d->out_elems, __func__);
        const double tol = p->kind == P_BACKWARD ? mhla_reference_backward_tolerance(p->cfg.dtype)
                                                 : mhla_reference_tolerance(p->cfg.dtype, p->cfg.seq_t);
        if (!(err <= tol))
            fail_msg("%s (fault %s #%ld %s): max_rel_err %.3g > %.3g", p->name, kind ? "buffer" : "alloc", k,
                     fired ? "fired and was absorbed" : "not reached", err, tol);
    } else if (!sentinel_intact((const unsigned char *)out, d->out_elems * sizeof *out)) {
        fail_msg("%s: a failed call (fault #%ld) wrote into the caller's output", p->name, k);
    }
    if (fired) {
        ++tally->tried;
        if (st == MHLA_OK) {
            ++tally->absorbed;
        } else {
            const mhla_status want =
                kind == MHLA__FAULT_ALLOC ? MHLA_ERR_OUT_OF_HOST_MEMORY : MHLA_ERR_OUT_OF_DEVICE_MEMORY;
            if (st != want)
                fail_msg("%s: %s fault #%ld returned %s, not %s: %s", p->name, kind ? "buffer" : "alloc", k,
                         mhla_status_name(st), mhla_status_name(want), mhla_last_message());
            if (!*mhla_last_message() || !*mhla_context_message(ctx))
                fail_msg("%s: fault #%ld failed with %s and no message", p->name, k, mhla_status_name(st));
        }
    } else if (st != MHLA_OK) {
        fail_msg("%s: the call failed with no fault armed to fire: %s: %s", p->name, mhla_status_name(st),
                 mhla_last_message());
    }
    if (dec && p->kind != P_CREATE) {
        if (st != MHLA_OK) {
            if (mhla_decoder_position(dec) != p->before)
                fail_msg("%s: fault #%ld moved the decoder to %lld", p->name, k, (long long)mhla_decoder_position(dec));
            assert_int_equal(mhla_decoder_state_size(dec), state_bytes);
            assert_int_equal(mhla_decoder_state_read(dec, state_after, state_bytes), MHLA_OK);
            if (memcmp(state, state_after, state_bytes) != 0)
                fail_msg("%s: fault #%ld changed the decoder's state", p->name, k);
        } else {
            assert_int_equal(mhla_decoder_position(dec), p->before + p->count);
        }
    }
    mhla_plan_destroy(plan);
    if (p->kind == P_CREATE)
        mhla_decoder_destroy(dec), dec = NULL;
    assert_int_equal(clFinish(t->queue), CL_SUCCESS);
    /* A warm context gains nothing from a call; a cold one keeps the programs it built (ctx_close()
     * checks that context as a whole), and so does the warm-up call (k = 0). */
    const int steady = k > 0 && p->kind != P_CREATE;
    if (steady && (st != MHLA_OK || !dec) && mhla__live_allocations() != live)
        fail_msg("%s: %s fault #%ld: %ld host allocations live after the call, %ld before", p->name,
                 kind ? "buffer" : "alloc", k, mhla__live_allocations(), live);
    /* The decoder (still alive here) retains nothing new after a failure: its staging buffers are
     * kept only by a call that succeeds (a failure may have dropped one it had, to grow it). */
    if (refs_exact && steady && (st != MHLA_OK || !dec)) {
        double waited = 0;
        const cl_uint after = context_refs_settled(t->cl, refs, &waited);
        if (dec ? after > refs : after != refs)
            fail_msg("%s: %s fault #%ld: the cl_context has %u references %.1f s after the call (polled while "
                     "above %u), %u before",
                     p->name, kind ? "buffer" : "alloc", k, after, waited / 1e3, refs, refs);
    }
    if (fired && st != MHLA_OK)
        ++tally->survived; /* every check above passed */
    mhla_decoder_destroy(dec);
    if (steady && mhla__live_allocations() != live_start)
        fail_msg("%s: %ld host allocations live after the attempt, %ld before", p->name, mhla__live_allocations(),
                 live_start);
    free(out), free(scratch), free(state), free(state_after);
    return fired;
}

static void run_path(const fault_path *p)
{
    path_data d;
    data_make(p, &d);
    fault_tally tally[2] = {{0, 0, 0}, {0, 0, 0}};
    test_ctx warm;
    if (p->kind != P_CREATE) {
        ctx_open(&warm, p->tuning);
        attempt(&warm, p, &d, MHLA__FAULT_ALLOC, 0, &tally[0]); /* builds the programs once */
    }
    for (int kind = 0; kind < 2; ++kind) {
        long k = 1;
        for (;; ++k) {
            /* Plan creation runs on a fresh context each time: its programs are built (or read from
             * the disk cache) inside the armed call. */
            test_ctx cold, *t = &warm;
            if (p->kind == P_CREATE) {
                const long before = mhla__live_allocations();
                ctx_open(&cold, p->tuning);
                t = &cold;
                const int fired = attempt(t, p, &d, (mhla__fault_kind)kind, k, &tally[kind]);
                ctx_close(&cold);
                if (mhla__live_allocations() != before)
                    fail_msg("%s: %ld host allocations outlive the context", p->name,
                             mhla__live_allocations() - before);
                if (!fired)
                    break;
            } else if (!attempt(t, p, &d, (mhla__fault_kind)kind, k, &tally[kind])) {
                break;
            }
            assert_true(k < 100000);
        }
        assert_int_equal(tally[kind].tried, k - 1);
        assert_int_equal(tally[kind].survived + tally[kind].absorbed, tally[kind].tried);
    }
    if (p->kind != P_CREATE)
        ctx_close(&warm);
    /* Parsed by nothing: the closing note quotes it. */
    printf("faults %-22s alloc: %3ld tried, %3ld survived (%ld absorbed); clCreateBuffer: %3ld tried, %3ld survived "
           "(%ld absorbed)\n",
           p->name, tally[0].tried, tally[0].survived + tally[0].absorbed, tally[0].absorbed, tally[1].tried,
           tally[1].survived + tally[1].absorbed, tally[1].absorbed);
    fflush(stdout);
    data_free(&d);
}

static mhla_config forward_cfg(void)
{
    mhla_config c = config_1d(1, 2, 48, 4, 8, 8);
    return c;
}

static void test_create(void **state)
{
    (void)state;
    fault_path p = {.name = "plan_create", .kind = P_CREATE, .cfg = forward_cfg()};
    run_path(&p);
    p.name = "plan_create_official";
    p.cfg.normalizer = MHLA_NORMALIZER_OFFICIAL;
    run_path(&p);
    p.name = "plan_create_softmax";
    p.cfg = forward_cfg();
    p.softmax = 1;
    run_path(&p);
    p.softmax = 0;
    p.name = "plan_create_causal";
    p.cfg = config_causal(1, 2, 40, 8, 8, 8);
    run_path(&p);
    p.name = "decoder_create";
    p.cfg.seq_t = 0; /* attempt(): a decoder of capacity 40 */
    run_path(&p);
    /* Sequences of 13, 0 and 27 tokens in chunks of 8: the shard's chunks 1 .. 3 begin inside
     * the first and end inside the last. */
    p.name = "shard_varlen_create";
    p.cfg = config_causal(1, 2, 40, 8, 8, 8);
    p.cfg.varlen = 1;
    const int32_t cu[4] = {0, 13, 13, 40};
    memcpy(p.cu, cu, sizeof cu);
    p.num_seqs = 3;
    run_path(&p);
}

static void test_forward(void **state)
{
    (void)state;
    fault_path p = {.name = "forward", .kind = P_FORWARD, .cfg = forward_cfg()};
    run_path(&p);
    /* Long blocks split into segments (the reduce stage), the official normalizer's buffers, and
     * CLBlast for the mixing. */
    p.name = "forward_split_official";
    p.cfg = config_1d(1, 1, 256, 2, 4, 4);
    p.cfg.normalizer = MHLA_NORMALIZER_OFFICIAL;
    p.tuning = "split_min_len=16,groups_per_cu=64";
    run_path(&p);
    p.name = "forward_clblast";
    p.cfg = forward_cfg();
    p.tuning = "mix_kernel=0";
    run_path(&p);
    p.tuning = NULL;
    p.name = "softmax";
    p.softmax = 1;
    run_path(&p);
}

static void test_causal(void **state)
{
    (void)state;
    fault_path p = {.name = "causal", .kind = P_FORWARD, .cfg = config_causal(2, 2, 40, 8, 8, 8)};
    run_path(&p);
    p.name = "causal_gemm_prefix";
    p.cfg = config_causal(1, 1, 96, 4, 4, 4);
    p.tuning = "gemm_rows=4";
    run_path(&p);
}

static void test_varlen(void **state)
{
    (void)state;
    fault_path p = {.name = "varlen", .kind = P_VARLEN, .cfg = config_causal(1, 2, 40, 8, 8, 8),
                    .cu = {0, 13, 13, 40}, .num_seqs = 3};
    p.cfg.varlen = 1;
    run_path(&p);
}

static void test_backward(void **state)
{
    (void)state;
    fault_path p = {.name = "backward", .kind = P_BACKWARD, .cfg = forward_cfg()};
    run_path(&p);
    /* Long blocks (the recomputed summaries are split) and the official normalizer's terms. */
    p.name = "backward_split_official";
    p.cfg = config_1d(1, 1, 256, 2, 4, 4);
    p.cfg.normalizer = MHLA_NORMALIZER_OFFICIAL;
    p.tuning = "split_min_len=16,groups_per_cu=64";
    run_path(&p);
    p.name = "backward_causal";
    p.cfg = config_causal(2, 2, 40, 8, 8, 8);
    p.cfg.normalizer = MHLA_NORMALIZER_PAPER;
    p.tuning = NULL;
    run_path(&p);
}

static void test_decoder(void **state)
{
    (void)state;
    /* Steps that cross a chunk boundary (a prefix mixture is built), and a prefill of a partial
     * chunk, whole chunks and a partial last one, both after 5 tokens of context. */
    fault_path p = {.name = "decoder_step", .kind = P_STEP, .cfg = config_causal(1, 2, 40, 8, 8, 8), .before = 5,
                    .count = 6};
    run_path(&p);
    p.name = "decoder_prefill";
    p.kind = P_PREFILL;
    p.count = 30;
    run_path(&p);
    p.name = "decoder_prefill_gemm"; /* the prefix mixtures' earlier blocks through CLBlast */
    p.cfg = config_causal(1, 1, 96, 4, 4, 4);
    p.tuning = "gemm_rows=4";
    p.count = 80;
    run_path(&p);
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *text = malloc(1 << 16);
    assert_non_null(text);
    *n = fread(text, 1, 1 << 16, f);
    fclose(f);
    return text;
}

/* mhla_tuning_db_put() rewrites a file of the caller's: a failure must leave it as it was (an
 * allocation that failed while reading it once made the rewrite drop every other entry). */
static void test_tuning_db(void **state)
{
    (void)state;
    char dir[] = "/tmp/mhla-faults-XXXXXX", path[4200];
    assert_non_null(mkdtemp(dir));
    const char *saved = getenv("MHLA_CACHE_DIR");
    char *restore = saved ? strdup(saved) : NULL;
    assert_int_equal(setenv("MHLA_CACHE_DIR", dir, 1), 0);
    mhla_context *ctx = test_context();
    assert_int_equal(mhla_tuning_db_put(ctx, 64, 64, "wg=32", "first"), MHLA_OK);
    assert_int_equal(mhla_tuning_db_put(ctx, 32, 32, "wg=16", "second"), MHLA_OK);
    assert_int_equal(mhla_tuning_db_path(ctx, path, sizeof path), MHLA_OK);
    size_t n_before = 0, n_after = 0;
    char *before = slurp(path, &n_before);
    fault_tally tally = {0, 0, 0};
    for (long k = 1;; ++k) {
        const long live = mhla__live_allocations();
        mhla__fault_arm(MHLA__FAULT_ALLOC, k);
        const mhla_status st = mhla_tuning_db_put(ctx, 16, 16, "wg=8", "third");
        const int fired = mhla__fault_fired(MHLA__FAULT_ALLOC);
        mhla__fault_arm(MHLA__FAULT_ALLOC, 0);
        if (mhla__live_allocations() > live) /* fewer: the context dropped its copy of the file */
            fail_msg("tuning_db_put: alloc fault #%ld: %ld allocations live after, %ld before", k,
                     mhla__live_allocations(), live);
        if (!fired) {
            assert_int_equal(st, MHLA_OK);
            break;
        }
        ++tally.tried;
        if (st == MHLA_OK) {
            ++tally.absorbed;
            break; /* the file holds the new entry: later faults would start from another file */
        }
        if (st != MHLA_ERR_OUT_OF_HOST_MEMORY)
            fail_msg("tuning_db_put: alloc fault #%ld returned %s: %s", k, mhla_status_name(st), mhla_last_message());
        char *after = slurp(path, &n_after);
        if (n_after != n_before || memcmp(before, after, n_before) != 0)
            fail_msg("tuning_db_put: alloc fault #%ld changed the database:\n%.*s", k, (int)n_after, after);
        free(after);
        ++tally.survived;
    }
    char spec[128];
    assert_int_equal(mhla_tuning_db_get(ctx, 64, 64, spec, sizeof spec, NULL, 0), MHLA_OK);
    assert_string_equal(spec, "wg=32");
    assert_int_equal(mhla_tuning_db_get(ctx, 16, 16, spec, sizeof spec, NULL, 0), MHLA_OK);
    assert_string_equal(spec, "wg=8");
    printf("faults %-22s alloc: %3ld tried, %3ld survived (%ld absorbed)\n", "tuning_db_put", tally.tried,
           tally.survived + tally.absorbed, tally.absorbed);
    mhla_context_destroy(ctx);
    free(before);
    remove(path);
    remove(dir);
    if (restore)
        setenv("MHLA_CACHE_DIR", restore, 1);
    else
        unsetenv("MHLA_CACHE_DIR");
    free(restore);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create),  cmocka_unit_test(test_forward), cmocka_unit_test(test_causal),
        cmocka_unit_test(test_varlen),  cmocka_unit_test(test_decoder), cmocka_unit_test(test_tuning_db),
        cmocka_unit_test(test_backward),
    };
    return run_group("faults", tests, NULL, NULL);
}
