/* mhla_backward's calls beyond test_backward.c's host-pointer numerics: mhla_backward_varlen on the
 * caller's device buffers (NaN-filled gradients, a wait list and a done event) against the reference,
 * and every refusal, each with its status and message and with the gradient buffers left unwritten:
 * the wrong kind of plan (varlen, plain causal, shard, softmax), bad cu_seqlens, a buffer smaller
 * than mhla_plan_tensor_bytes(), aliasing, a bad wait list. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A backward's buffers, in the order mhla_backward takes them, and the forward tensor each is shaped
 * like (what mhla_plan_tensor_bytes() sizes it by). */
enum { B_Q, B_K, B_V, B_MIX, B_DOUT, B_DQ, B_DK, B_DV, B_DMIX, N_B };
static const mhla_tensor shape_of[N_B] = {MHLA_TENSOR_Q,   MHLA_TENSOR_K,      MHLA_TENSOR_V,
                                          MHLA_TENSOR_MIXING, MHLA_TENSOR_OUT, MHLA_TENSOR_Q,
                                          MHLA_TENSOR_K,   MHLA_TENSOR_V,      MHLA_TENSOR_MIXING};
static const char *const buf_names[N_B] = {"q", "k", "v", "mixing", "dout", "dq", "dk", "dv", "dmixing"};

/* Buffers of plan's sizes: the inputs from in and dout, the gradients NaN (nan_buffer). */
static void bufs_make(mhla_context *ctx, const mhla_plan *plan, const test_inputs *in, const float *dout,
                      cl_mem b[N_B])
{
    const float *src[B_DQ] = {in->q, in->k, in->v, in->mix, dout};
    for (int i = 0; i < N_B; ++i) {
        const size_t bytes = mhla_plan_tensor_bytes(plan, shape_of[i]);
        assert_true(bytes > 0);
        if (i >= B_DQ) {
            b[i] = nan_buffer(ctx, bytes);
            continue;
        }
        cl_int err = CL_SUCCESS;
        b[i] = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)src[i], &err);
        assert_int_equal(err, CL_SUCCESS);
    }
}

static void bufs_free(cl_mem b[N_B])
{
    for (int i = 0; i < N_B; ++i)
        clReleaseMemObject(b[i]);
}

/* The gradient buffers still hold nan_buffer()'s 0x7FFF halves: a refused call wrote nothing. */
static void expect_grads_unwritten(mhla_context *ctx, const mhla_plan *plan, cl_mem b[N_B])
{
    for (int i = B_DQ; i < N_B; ++i) {
        const size_t bytes = mhla_plan_tensor_bytes(plan, shape_of[i]);
        uint16_t *h = malloc(bytes);
        assert_non_null(h);
        assert_int_equal(clEnqueueReadBuffer(mhla_context_queue(ctx), b[i], CL_TRUE, 0, bytes, h, 0, NULL, NULL),
                         CL_SUCCESS);
        for (size_t j = 0; j < bytes / 2; ++j)
            if (h[j] != 0x7FFF)
                fail_msg("%s was written by a refused call (half %zu is 0x%04x)", buf_names[i], j, (unsigned)h[j]);
        free(h);
    }
}

/* A call's status and message: `want`, and the context's message mentions `text`. */
#define EXPECT_REFUSED(call, want, ctx, text)                                                       \
    do {                                                                                            \
        const mhla_status st_ = (call);                                                             \
        if (st_ != (want))                                                                          \
            fail_msg("%s: expected %s, got %s: %s", #call, mhla_status_name(want), mhla_status_name(st_), \
                     mhla_context_message(ctx));                                                   \
        assert_message_has(ctx, text);                                                              \
    } while (0)

/* The packed batch of test_backward.c's varlen cases (an empty sequence among them), with 5 rows of
 * Mc: the kernels those cases build. */
static const int32_t cu[] = {0, 21, 21, 50, 59};
#define NSEQ 4

static mhla_config varlen_config(void)
{
    mhla_config c = config_causal(1, 2, 59, 8, 8, 8);
    c.varlen = 1;
    c.mixing_rows = 5;
    return c;
}

/* mhla_backward_varlen on the caller's buffers (so far only its _host form ran): NaN-filled
 * gradients, gated on a user event (a marker's event where such gates hang) so that the call must
 * only enqueue, its done event waited for; all four gradients within the tolerance (docs/spec.md
 * "Accuracy the tests hold") of the reference, with eps and feature_eps large enough to show (relu-eps,
 * paper). */
static void test_backward_varlen_device(void **state)
{
    mhla_context *ctx = *state;
    cl_command_queue queue = mhla_context_queue(ctx);
    mhla_config c = varlen_config();
    c.normalizer = MHLA_NORMALIZER_PAPER;
    c.feature_map = MHLA_FEATURE_RELU_EPS;
    set_test_eps(&c);
    test_inputs in;
    mhla_plan *plan = NULL;
    cl_mem b[N_B];
    assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 150, &in), MHLA_OK);
    float *dout = malloc(in.nv * sizeof *dout);
    assert_non_null(dout);
    fill_uniform(dout, in.nv, 151, -1.0f, 1.0f);
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    bufs_make(ctx, plan, &in, dout, b);
    const int gated = !user_event_gates_hang(ctx);
    cl_int err = CL_SUCCESS;
    cl_event gate = NULL, done = NULL;
    if (gated)
        gate = clCreateUserEvent(mhla_context_cl_context(ctx), &err);
    else
        err = clEnqueueMarkerWithWaitList(queue, 0, NULL, &gate);
    assert_int_equal(err, CL_SUCCESS);
    mhla_status st = mhla_backward_varlen(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], cu, NSEQ, b[B_DOUT], b[B_DQ],
                                          b[B_DK], b[B_DV], b[B_DMIX], 1, &gate, &done);
    if (st != MHLA_OK)
        fail_msg("mhla_backward_varlen: %s: %s", mhla_status_name(st), mhla_context_message(ctx));
    assert_non_null(done);
    if (gated) {
        cl_int status = CL_COMPLETE;
        assert_int_equal(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL),
                         CL_SUCCESS);
        assert_true(status != CL_COMPLETE); /* nothing ran before the gate opened */
        assert_int_equal(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    }
    assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
    double *ref[4];
    const size_t n[4] = {in.nq, in.nq, in.nv, in.nm};
    for (int j = 0; j < 4; ++j)
        ref[j] = malloc(n[j] * sizeof(double));
    assert_true(ref[0] && ref[1] && ref[2] && ref[3]);
    assert_int_equal(mhla_reference_backward_varlen(&c, in.q, in.k, in.v, in.mix, cu, NSEQ, dout, ref[0], ref[1],
                                                    ref[2], ref[3]),
                     MHLA_OK);
    const double tol = mhla_reference_backward_tolerance(MHLA_DTYPE_F32);
    for (int j = 0; j < 4; ++j) {
        float *got = malloc(n[j] * sizeof *got);
        assert_non_null(got);
        /* the done event has completed: these reads need not wait for anything */
        assert_int_equal(clEnqueueReadBuffer(queue, b[B_DQ + j], CL_TRUE, 0, n[j] * sizeof *got, got, 0, NULL, NULL),
                         CL_SUCCESS);
        const double e = expect_within(got, ref[j], n[j], tol, buf_names[B_DQ + j]);
        print_message("varlen on device buffers: %-8s %.2e (tolerance %.0e)\n", buf_names[B_DQ + j], e, tol);
        free(got), free(ref[j]);
    }
    clReleaseEvent(done);
    clReleaseEvent(gate);
    bufs_free(b);
    mhla_plan_destroy(plan);
    free(dout);
    test_inputs_free(&in);
}

/* One plan, packings of more and then fewer chunks than it ran before (the chunk table and the
 * slots grow, then are reused): every call's gradients against the reference. Before the chunk
 * table was counted without being written, a call with more chunks than the last wrote past it. */
static void test_backward_varlen_regrows(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = varlen_config();
    c.normalizer = MHLA_NORMALIZER_PAPER;
    test_inputs in;
    mhla_plan *plan = NULL;
    assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 160, &in), MHLA_OK);
    float *dout = malloc(in.nv * sizeof *dout), *got[4];
    double *ref[4];
    const size_t n[4] = {in.nq, in.nq, in.nv, in.nm};
    assert_non_null(dout);
    fill_uniform(dout, in.nv, 161, -1.0f, 1.0f);
    for (int j = 0; j < 4; ++j) {
        got[j] = malloc(n[j] * sizeof *got[j]);
        ref[j] = malloc(n[j] * sizeof *ref[j]);
        assert_true(got[j] && ref[j]);
    }
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    /* 8 chunks; 13 (two per sequence but the last); 8 again */
    static const int32_t two[] = {0, 40, 59}, seven[] = {0, 9, 18, 27, 36, 45, 54, 59};
    const struct {
        const int32_t *cu;
        size_t seqs;
    } calls[] = {{two, 2}, {seven, 7}, {two, 2}};
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; ++i) {
        for (int j = 0; j < 4; ++j)
            fill_nan(got[j], n[j]);
        mhla_status st = mhla_backward_varlen_host(plan, in.q, in.k, in.v, in.mix, calls[i].cu, calls[i].seqs, dout,
                                                   got[0], got[1], got[2], got[3]);
        if (st != MHLA_OK)
            fail_msg("call %zu: %s: %s", i, mhla_status_name(st), mhla_context_message(ctx));
        assert_int_equal(mhla_reference_backward_varlen(&c, in.q, in.k, in.v, in.mix, calls[i].cu, calls[i].seqs, dout,
                                                        ref[0], ref[1], ref[2], ref[3]),
                         MHLA_OK);
        for (int j = 0; j < 4; ++j) {
            char what[64];
            snprintf(what, sizeof what, "call %zu (%zu sequences): %s", i, calls[i].seqs, buf_names[B_DQ + j]);
            expect_within(got[j], ref[j], n[j], mhla_reference_backward_tolerance(MHLA_DTYPE_F32), what);
        }
    }
    for (int j = 0; j < 4; ++j)
        free(got[j]), free(ref[j]);
    mhla_plan_destroy(plan);
    free(dout);
    test_inputs_free(&in);
}

/* mhla_backward's argument checks on a plain plan: NULL plan; each buffer smaller than
 * mhla_plan_tensor_bytes() (named, with its size and the shape's); a gradient aliasing an input or
 * another gradient; a wait list without events; a NULL host pointer. Nothing written by any. */
static void test_backward_refusals(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = config_1d(2, 3, 96, 4, 8, 8); /* test_backward.c's 1D grid */
    c.normalizer = MHLA_NORMALIZER_PAPER;
    c.feature_map = MHLA_FEATURE_RELU_EPS;
    test_inputs in;
    mhla_plan *plan = NULL;
    cl_mem b[N_B];
    assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 3, &in), MHLA_OK);
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    bufs_make(ctx, plan, &in, in.v, b);
    /* no plan, no context: the message is the thread's */
    assert_int_equal(mhla_backward(NULL, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV], NULL,
                                   0, NULL, NULL),
                     MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "mhla_backward: plan is NULL"));
    /* each of dout, dq, dk, dv, dmixing 4 bytes short */
    for (int i = B_DOUT; i < N_B; ++i) {
        cl_mem x[N_B];
        memcpy(x, b, sizeof x);
        const size_t need = mhla_plan_tensor_bytes(plan, shape_of[i]);
        cl_int err = CL_SUCCESS;
        x[i] = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, need - 4, NULL, &err);
        assert_int_equal(err, CL_SUCCESS);
        char text[96];
        snprintf(text, sizeof text, "mhla_backward: %s buffer holds %zu bytes; ", buf_names[i], need - 4);
        EXPECT_REFUSED(mhla_backward(plan, x[B_Q], x[B_K], x[B_V], x[B_MIX], x[B_DOUT], x[B_DQ], x[B_DK], x[B_DV],
                                     x[B_DMIX], 0, NULL, NULL),
                       MHLA_ERR_BUFFER_TOO_SMALL, ctx, text);
        snprintf(text, sizeof text, " needs %zu", need);
        assert_message_has(ctx, text);
        clReleaseMemObject(x[i]);
    }
    EXPECT_REFUSED(mhla_backward(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_Q], b[B_DK], b[B_DV], NULL, 0,
                                 NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx, "dq is the same buffer as q");
    EXPECT_REFUSED(mhla_backward(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DK], NULL, 0,
                                 NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx, "dv is the same buffer as dk");
    EXPECT_REFUSED(mhla_backward(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV],
                                 b[B_MIX], 0, NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx, "dmixing is the same buffer as mixing");
    EXPECT_REFUSED(mhla_backward(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV],
                                 b[B_DOUT], 0, NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx, "dmixing is the same buffer as dout");
    EXPECT_REFUSED(mhla_backward(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV],
                                 b[B_DMIX], 1, NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx, "wait list of 1 events with a NULL pointer");
    EXPECT_REFUSED(mhla_backward_host(plan, in.q, in.k, in.v, in.mix, NULL, in.q, in.k, in.v, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx, "dout pointer is NULL");
    expect_grads_unwritten(ctx, plan, b);
    bufs_free(b);
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
}

/* Plans the backward does not take, each refused by name, nothing written: a varlen plan passed to
 * mhla_backward, a plain causal one to mhla_backward_varlen, a shard plan (sequence parallelism) and a
 * softmax baseline (MHLA_ERR_UNSUPPORTED, both forms). */
static void test_backward_wrong_plans(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = varlen_config();
    test_inputs in;
    mhla_plan *vplan = NULL, *plan = NULL;
    cl_mem b[N_B]; /* of the varlen plan's sizes, enough for every plan below */
    assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 4, &in), MHLA_OK);
    assert_int_equal(mhla_plan_create(ctx, &c, &vplan), MHLA_OK);
    bufs_make(ctx, vplan, &in, in.v, b);
    EXPECT_REFUSED(mhla_backward(vplan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV],
                                 b[B_DMIX], 0, NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx,
                   "mhla_backward: the plan is for packed variable-length sequences (varlen = 1): use "
                   "mhla_backward_varlen()");

    c.varlen = 0, c.seq_t = 40; /* one sequence, as long as its 5 rows of Mc allow */
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    EXPECT_REFUSED(mhla_backward_varlen(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], cu, NSEQ, b[B_DOUT], b[B_DQ], b[B_DK],
                                        b[B_DV], NULL, 0, NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx,
                   "mhla_backward_varlen: the plan is not for packed variable-length sequences");
    mhla_plan_destroy(plan);

    mhla_config nc = config_1d(2, 3, 96, 4, 8, 8);
    nc.normalizer = MHLA_NORMALIZER_PAPER;
    assert_int_equal(mhla_plan_create_shard(ctx, &nc, 0, 2, &plan), MHLA_OK); /* blocks 0 and 1 of 4 */
    EXPECT_REFUSED(mhla_backward(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV], NULL,
                                 0, NULL, NULL),
                   MHLA_ERR_UNSUPPORTED, ctx, "mhla_backward: the plan is a shard plan");
    EXPECT_REFUSED(mhla_backward_host(plan, in.q, in.k, in.v, in.mix, in.v, in.q, in.k, in.v, NULL),
                   MHLA_ERR_UNSUPPORTED, ctx, "mhla_backward_host: the plan is a shard plan");
    mhla_plan_destroy(plan);

    assert_int_equal(mhla_softmax_plan_create(ctx, &nc, &plan), MHLA_OK);
    EXPECT_REFUSED(mhla_backward(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV], NULL,
                                 0, NULL, NULL),
                   MHLA_ERR_UNSUPPORTED, ctx, "softmax-attention baseline, which has no backward pass");
    EXPECT_REFUSED(mhla_backward_host(plan, in.q, in.k, in.v, in.mix, in.v, in.q, in.k, in.v, NULL),
                   MHLA_ERR_UNSUPPORTED, ctx, "mhla_backward_host: the plan is a softmax-attention baseline");
    mhla_plan_destroy(plan);
    expect_grads_unwritten(ctx, vplan, b);
    mhla_plan_destroy(vplan);
    bufs_free(b);
    test_inputs_free(&in);
}

/* mhla_backward_varlen applies mhla_forward_varlen's cu_seqlens rules, each failure naming the index
 * and the values: first offset not 0, a decreasing one, a last one other than the total, a sequence
 * longer than chunk * rows(Mc) (MHLA_ERR_SEQUENCE_TOO_LONG), no sequences, NULL; nothing written. */
static void test_backward_varlen_bad_offsets(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = varlen_config();
    test_inputs in;
    mhla_plan *plan = NULL;
    cl_mem b[N_B];
    assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, 5, &in), MHLA_OK);
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    bufs_make(ctx, plan, &in, in.v, b);
    const struct {
        int32_t cu[NSEQ + 1];
        size_t nseq;
        mhla_status want;
        const char *text;
    } cases[] = {
        {{1, 21, 21, 50, 59}, NSEQ, MHLA_ERR_INVALID_ARGUMENT, "cu_seqlens[0] must be 0, got 1"},
        {{0, 21, 10, 50, 59}, NSEQ, MHLA_ERR_INVALID_ARGUMENT,
         "cu_seqlens must not decrease: cu_seqlens[2] = 10 < cu_seqlens[1] = 21"},
        {{0, 21, 21, 50, 58}, NSEQ, MHLA_ERR_INVALID_ARGUMENT,
         "cu_seqlens[4] = 58 must equal the plan's total of 59 packed tokens"},
        {{0, 9, 9, 50, 59}, NSEQ, MHLA_ERR_SEQUENCE_TOO_LONG,
         "sequence 2 (cu_seqlens[2] = 9 .. cu_seqlens[3] = 50) of 41 tokens is longer than chunk * rows(Mc) = 8 * 5 "
         "= 40"},
        {{0, 21, 21, 50, 59}, 0, MHLA_ERR_INVALID_ARGUMENT, "num_seqs must be >= 1, got 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        EXPECT_REFUSED(mhla_backward_varlen(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], cases[i].cu, cases[i].nseq,
                                            b[B_DOUT], b[B_DQ], b[B_DK], b[B_DV], b[B_DMIX], 0, NULL, NULL),
                       cases[i].want, ctx, cases[i].text);
        assert_message_has(ctx, "mhla_backward_varlen: ");
    }
    EXPECT_REFUSED(mhla_backward_varlen(plan, b[B_Q], b[B_K], b[B_V], b[B_MIX], NULL, NSEQ, b[B_DOUT], b[B_DQ],
                                        b[B_DK], b[B_DV], b[B_DMIX], 0, NULL, NULL),
                   MHLA_ERR_INVALID_ARGUMENT, ctx, "mhla_backward_varlen: cu_seqlens is NULL");
    /* the host form checks them the same way */
    float *g = nan_floats(in.nq);
    EXPECT_REFUSED(mhla_backward_varlen_host(plan, in.q, in.k, in.v, in.mix, cases[3].cu, NSEQ, in.v, g, g, g, NULL),
                   MHLA_ERR_SEQUENCE_TOO_LONG, ctx, "of 41 tokens is longer than chunk * rows(Mc) = 8 * 5 = 40");
    expect_grads_unwritten(ctx, plan, b);
    free(g);
    bufs_free(b);
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_varlen_device),
        cmocka_unit_test(test_backward_varlen_regrows),
        cmocka_unit_test(test_backward_refusals),
        cmocka_unit_test(test_backward_wrong_plans),
        cmocka_unit_test(test_backward_varlen_bad_offsets),
    };
    return run_group("backward_modes", tests, context_setup, context_teardown);
}
