/* Thread safety as include/mhla.h states it: two threads on two contexts, and two threads sharing
 * one context with their own plans and decoders (created while the other thread creates and runs
 * its own, on a context whose programs are not built yet, so that the builds and the program list
 * are contended), each result compared with the double reference. Also: one thread's failure
 * message never shows in the other's mhla_last_message(), a tuning override replaced while the other
 * thread creates plans, and CLBlast's mixing from both threads. Run it under ThreadSanitizer too
 * (a build folder configured with -Db_sanitize=thread). */
#include "helpers.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Under gcc 12's ASan, a thread that exits with the runtime's alternate signal stack aborts with
 * "unable to unmap" (UnsetAlternateSignalStack); these threads need none. ASan reads this default
 * before ASAN_OPTIONS; other builds never call it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "use_sigaltstack=0"; }

#define ROUNDS 2

typedef struct worker {
    int id;
    mhla_context *shared; /* NULL: the worker makes its own context */
    int use_blas;         /* the worker's own context mixes with CLBlast */
    pthread_barrier_t *start;
    char error[1024]; /* the first failure, "" for none */
    int checked;      /* results compared with the reference */
} worker;

static void failf(worker *w, const char *fmt, ...)
{
    if (w->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->error, sizeof w->error, fmt, ap);
    va_end(ap);
}

/* Records a result: a failed call, or an error against the reference above cfg's tolerance. */
static void judge(worker *w, const char *label, mhla_status st, double err, const mhla_config *cfg)
{
    const double tol = mhla_reference_tolerance(cfg->dtype, cfg->seq_t * cfg->seq_h * cfg->seq_w);
    if (st != MHLA_OK)
        failf(w, "thread %d, %s: %s: %s", w->id, label, mhla_status_name(st), mhla_last_message());
    else if (!(err <= tol))
        failf(w, "thread %d, %s: max_rel_err %.3g > %.3g", w->id, label, err, tol);
    else
        ++w->checked;
}

/* One configuration against the reference through run_against_reference() (a plan of its own). */
static void check_config(worker *w, mhla_context *ctx, const mhla_config *cfg, uint32_t seed, const char *label)
{
    double err = 0;
    const mhla_status st = run_against_reference(ctx, cfg, TEST_INIT_RANDOM, seed, &err, NULL, NULL);
    judge(w, label, st, err, cfg);
}

static void check_softmax(worker *w, mhla_context *ctx, uint32_t seed)
{
    mhla_config cfg = config_1d(1, 2, 64, 1, 8, 8);
    test_inputs in;
    mhla_plan *plan = NULL;
    float *out = NULL;
    double *ref = NULL;
    if (test_inputs_make(&cfg, MHLA_INIT_PAPER, seed, &in) != MHLA_OK) {
        failf(w, "thread %d: inputs", w->id);
        return;
    }
    out = malloc(in.nv * sizeof *out), ref = malloc(in.nv * sizeof *ref);
    mhla_status st = out && ref ? mhla_softmax_plan_create(ctx, &cfg, &plan) : MHLA_ERR_OUT_OF_HOST_MEMORY;
    if (st == MHLA_OK)
        st = mhla_forward_host(plan, in.q, in.k, in.v, NULL, out);
    if (st == MHLA_OK)
        st = mhla_reference_softmax(&cfg, in.q, in.k, in.v, ref);
    judge(w, "softmax", st, st == MHLA_OK ? finite_rel_err(out, ref, in.nv, __func__) : 0, &cfg);
    mhla_plan_destroy(plan);
    free(out), free(ref);
    test_inputs_free(&in);
}

/* A varlen batch and a decoder (prefill, then steps) of one causal configuration. */
static void check_varlen_decoder(worker *w, mhla_context *ctx, uint32_t seed)
{
    mhla_config cfg = config_causal(1, 2, 48, 8, 8, 8);
    test_inputs in;
    mhla_plan *plan = NULL;
    mhla_decoder *dec = NULL;
    const int32_t cu[] = {0, 19, 48};
    if (test_inputs_make(&cfg, TEST_INIT_RANDOM, seed, &in) != MHLA_OK) {
        failf(w, "thread %d: inputs", w->id);
        return;
    }
    float *out = malloc(in.nv * sizeof *out);
    double *ref = malloc(in.nv * sizeof *ref);
    const size_t row = (size_t)(cfg.heads * cfg.dv), qrow = (size_t)(cfg.heads * cfg.dk);
    mhla_status st = out && ref ? MHLA_OK : MHLA_ERR_OUT_OF_HOST_MEMORY;
    /* the decoder over the whole sequence: 20 tokens of prompt, 28 steps */
    if (st == MHLA_OK)
        st = mhla_decoder_create(ctx, &cfg, cfg.seq_t, &dec);
    if (st == MHLA_OK)
        st = mhla_decoder_prefill_host(dec, in.q, in.k, in.v, in.mix, out, 20);
    if (st == MHLA_OK)
        st = mhla_decoder_step_host(dec, in.q + 20 * qrow, in.k + 20 * qrow, in.v + 20 * row, in.mix, out + 20 * row,
                                    28);
    if (st == MHLA_OK)
        st = mhla_reference_forward(&cfg, in.q, in.k, in.v, in.mix, ref);
    judge(w, "decoder", st, st == MHLA_OK ? finite_rel_err(out, ref, in.nv, __func__) : 0, &cfg);
    /* the same tokens as two packed sequences */
    cfg.varlen = 1;
    if (st == MHLA_OK)
        st = mhla_plan_create(ctx, &cfg, &plan);
    if (st == MHLA_OK)
        st = mhla_forward_varlen_host(plan, in.q, in.k, in.v, in.mix, cu, 2, out);
    if (st == MHLA_OK)
        st = mhla_reference_forward_varlen(&cfg, in.q, in.k, in.v, in.mix, cu, 2, ref);
    judge(w, "varlen", st, st == MHLA_OK ? finite_rel_err(out, ref, in.nv, __func__) : 0, &cfg);
    mhla_plan_destroy(plan);
    mhla_decoder_destroy(dec);
    free(out), free(ref);
    test_inputs_free(&in);
}

static void *work(void *arg)
{
    worker *w = arg;
    mhla_context *ctx = w->shared;
    if (!ctx) {
        const mhla_status st = mhla_context_create(NULL, &ctx);
        if (st != MHLA_OK) {
            failf(w, "thread %d: mhla_context_create: %s: %s", w->id, mhla_status_name(st), mhla_last_message());
            pthread_barrier_wait(w->start);
            return NULL;
        }
        if (w->use_blas && mhla_context_set_tuning(ctx, "mix_kernel=0") != MHLA_OK)
            failf(w, "thread %d: mhla_context_set_tuning: %s", w->id, mhla_last_message());
    }
    pthread_barrier_wait(w->start);
    /* A failure of this thread's own, naming a value only it uses: the other thread's failures
     * (it makes the same one with its value) must not show in this thread's message. */
    mhla_config bad = config_1d(1, 1, 8, 1, 8, 8);
    bad.heads = -(1000 + w->id);
    mhla_plan *none = NULL;
    char want[32];
    snprintf(want, sizeof want, "%lld", (long long)bad.heads);
    if (mhla_plan_create(ctx, &bad, &none) == MHLA_OK || none)
        failf(w, "thread %d: heads = %lld was accepted", w->id, (long long)bad.heads);
    for (int round = 0; round < ROUNDS; ++round) {
        const uint32_t seed = (uint32_t)(100 * w->id + round);
        /* On a shared context the second thread swaps the override (CLBlast's mixing, or none)
         * while the first creates plans: each plan takes one or the other, and both are right. */
        if (w->shared && w->id == 2 && mhla_context_set_tuning(ctx, round % 2 ? NULL : "mix_kernel=0") != MHLA_OK)
            failf(w, "thread %d: mhla_context_set_tuning: %s", w->id, mhla_last_message());
        mhla_config cfg = config_1d(2, 2, 96, 4, 8, 8);
        check_config(w, ctx, &cfg, seed, "1D paper");
        cfg.normalizer = MHLA_NORMALIZER_OFFICIAL;
        check_config(w, ctx, &cfg, seed, "1D official");
        mhla_config_init(&cfg);
        cfg.seq_h = 12, cfg.seq_w = 8, cfg.block_h = 2, cfg.block_w = 2, cfg.dk = 8, cfg.dv = 4;
        cfg.dtype = round ? MHLA_DTYPE_BF16 : MHLA_DTYPE_F16;
        check_config(w, ctx, &cfg, seed, "2D, 16-bit storage");
        cfg = config_causal(2, 2, 56, 8, 8, 8);
        check_config(w, ctx, &cfg, seed, "causal");
        check_softmax(w, ctx, seed);
        check_varlen_decoder(w, ctx, seed);
    }
    if (!strstr(mhla_last_message(), want))
        failf(w, "thread %d: mhla_last_message() is '%.200s', not this thread's failure (%s)", w->id,
              mhla_last_message(), want);
    if (!w->shared)
        mhla_context_destroy(ctx);
    return NULL;
}

static void run_workers(mhla_context *shared, int use_blas)
{
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, 2), 0);
    worker w[2];
    pthread_t th[2];
    for (int i = 0; i < 2; ++i) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i + 1, w[i].shared = shared, w[i].use_blas = use_blas && i == 1, w[i].start = &start;
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < 2; ++i)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < 2; ++i) {
        if (w[i].error[0])
            fail_msg("%s", w[i].error);
        assert_int_equal(w[i].checked, ROUNDS * 7);
    }
    printf("threads: %s, %d + %d results checked against the reference\n",
           shared ? "one shared context" : "two contexts", w[0].checked, w[1].checked);
}

static void test_two_contexts(void **state)
{
    (void)state;
    run_workers(NULL, 1); /* the second thread's context mixes with CLBlast */
}

/* A fresh context (no program built yet) shared by both threads, each with its own plans and
 * decoders; the second thread changes the context's tuning override between its rounds. */
static void test_shared_context(void **state)
{
    (void)state;
    mhla_context *ctx = test_context();
    run_workers(ctx, 0);
    mhla_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_contexts),
        cmocka_unit_test(test_shared_context),
    };
    return run_group("threads", tests, NULL, NULL);
}
