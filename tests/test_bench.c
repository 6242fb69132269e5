/* mhla-bench's logic without a device: the rule for M, block grids for a given M, the crossover
 * interpolation, the flops of the causal ops, the decode step statistics, the ratio and %sgemm
 * columns, the host ops' timing, options, the JSON reader, and the JSON round trip that --compare
 * relies on. (The blas op's numbers: test_bench_blas.c.) */
#include "bench.h"
#include "helpers.h"
#include "json.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static bench_shape shape_1d(int64_t n)
{
    bench_shape s = {1, 8, n, 1, 1, 1, 1, 1, 64, 64, MHLA_LAYOUT_BNHD, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER};
    return s;
}

static bench_shape shape_2d(int64_t h, int64_t w)
{
    bench_shape s = {1, 8, 1, h, w, 1, 1, 1, 64, 64, MHLA_LAYOUT_BNHD, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER};
    return s;
}

/* The paper's rule, pinned: N = 4096 -> M = 16, N = 16384 -> M = 64, and M^2 <= N. */
static void test_default_m_rule(void **state)
{
    (void)state;
    const int64_t n[] = {100, 256, 512, 1000, 1024, 2048, 4096, 16384, 65536, 131072, 262144};
    const int64_t m[] = {1, 1, 2, 2, 4, 8, 16, 64, 256, 256, 512};
    for (size_t i = 0; i < sizeof n / sizeof n[0]; ++i) {
        bench_shape s = shape_1d(n[i]);
        bench_default_blocks(&s);
        if (bench_shape_m(&s) != m[i])
            fail_msg("N=%lld: M=%lld, expected %lld", (long long)n[i], (long long)bench_shape_m(&s), (long long)m[i]);
        assert_true(bench_shape_m(&s) * bench_shape_m(&s) <= n[i]);
        assert_int_equal(n[i] % bench_shape_m(&s), 0);
    }
    /* Images get square block grids of 16x16-token blocks: 64x64 is forward_2d's 4x4. */
    const int64_t side[][2] = {{32, 32}, {64, 64}, {128, 128}, {256, 256}, {48, 48}, {64, 32}, {30, 30}};
    const int64_t grid[][2] = {{2, 2}, {4, 4}, {8, 8}, {16, 16}, {3, 3}, {2, 2}, {1, 1}};
    for (size_t i = 0; i < sizeof side / sizeof side[0]; ++i) {
        bench_shape s = shape_2d(side[i][0], side[i][1]);
        bench_default_blocks(&s);
        if (s.bh != grid[i][0] || s.bw != grid[i][1] || s.bt != 1)
            fail_msg("%lldx%lld: blocks %lldx%lld", (long long)side[i][0], (long long)side[i][1], (long long)s.bh,
                     (long long)s.bw);
    }
}

static void test_blocks_for_m(void **state)
{
    (void)state;
    bench_shape s = shape_1d(4096);
    assert_true(bench_blocks_for_m(&s, 32));
    assert_int_equal(s.bt, 32);
    assert_false(bench_blocks_for_m(&s, 3));
    assert_false(bench_blocks_for_m(&s, 0));
    s = shape_2d(64, 64);
    assert_true(bench_blocks_for_m(&s, 8));
    assert_int_equal(s.bh * s.bw, 8);
    assert_true(s.bh == 2 || s.bh == 4);
    assert_true(bench_blocks_for_m(&s, 16));
    assert_int_equal(s.bh, 4);
    assert_int_equal(s.bw, 4);
    assert_false(bench_blocks_for_m(&s, 7));
    s = shape_2d(12, 20); /* 15 = 3 x 5 is the only way */
    assert_true(bench_blocks_for_m(&s, 15));
    assert_int_equal(s.bh, 3);
    assert_int_equal(s.bw, 5);
}

static bench_shape shape_causal(int64_t n, int64_t chunk)
{
    bench_shape s = shape_1d(n);
    bench_set_chunk(&s, chunk);
    return s;
}

static double op_flops(bench_op_id op, const bench_shape *s) { return bench_op_get(op)->flops(s); }

/* The chunk form's flops, term by term (summaries and read-out, prefix mixtures, masked
 * intra-chunk pairs), and what they say about causal over non-causal: the arithmetic floor of
 * the causal chunk form's time over MHLA's, 1.75x at N = 4096 and 2.5x at N = 16384 with
 * C = Dk = Dv = 64. */
static void test_causal_flops(void **state)
{
    (void)state;
    bench_shape s = shape_causal(4096, 64);
    assert_int_equal(bench_shape_m(&s), 64);
    assert_int_equal(s.chunk, 64);
    const double bh = 8.0, d2 = 64.0 * 64.0;
    double want = bh * (4.0 * 4096 * d2 + d2 * 64 * 63 + 128.0 * 64 * (64 * 65));
    assert_true(fabs(op_flops(BENCH_OP_MHLA_CAUSAL, &s) - want) < 1.0);
    bench_shape nc = shape_1d(4096);
    assert_true(fabs(op_flops(BENCH_OP_MHLA_CAUSAL, &s) / op_flops(BENCH_OP_MHLA, &nc) - 1.754) < 1e-3);
    s = shape_causal(16384, 64), nc = shape_1d(16384);
    assert_true(fabs(op_flops(BENCH_OP_MHLA_CAUSAL, &s) / op_flops(BENCH_OP_MHLA, &nc) - 2.504) < 1e-3);
    /* C = 128 trades a quarter of the prefix for twice the intra-chunk pairs: better at 16384 only. */
    s = shape_causal(16384, 128);
    assert_true(fabs(op_flops(BENCH_OP_MHLA_CAUSAL, &s) / op_flops(BENCH_OP_MHLA, &nc) - 2.256) < 1e-3);
    s = shape_causal(4096, 128), nc = shape_1d(4096);
    assert_true(fabs(op_flops(BENCH_OP_MHLA_CAUSAL, &s) / op_flops(BENCH_OP_MHLA, &nc) - 2.068) < 1e-3);
    /* A partial last chunk: N = 100, C = 64 is one chunk of 64 and one of 36, M = 2. */
    s = shape_causal(100, 64);
    s.heads = 2, s.dk = 32, s.dv = 16;
    assert_int_equal(bench_shape_m(&s), 2);
    want = 2.0 * (4.0 * 100 * 32 * 16 + 32.0 * 16 * 2 * 1 + 48.0 * (64 * 65 + 36 * 37));
    assert_true(fabs(op_flops(BENCH_OP_MHLA_CAUSAL, &s) - want) < 1e-6);
    /* One chunk: no prefix at all. */
    s = shape_causal(64, 64);
    s.heads = 1, s.dk = s.dv = 1;
    assert_true(fabs(op_flops(BENCH_OP_MHLA_CAUSAL, &s) - (4.0 * 64 + 2.0 * 64 * 65)) < 1e-9);
    /* Bytes: q, k, v, out, four passes over M summaries of Dk x Dv, the lower triangle of Mc. */
    s = shape_causal(4096, 64);
    const double qkvo = 4.0 * 8 * 4096 * 256, sums = 8.0 * 64 * 64 * 64;
    assert_true(fabs(bench_op_get(BENCH_OP_MHLA_CAUSAL)->bytes(&s) - (qkvo + 16.0 * sums + 4.0 * 64 * 65 / 2)) < 1.0);
    /* Decode: per token, whatever the context: 4*B*H*Dk*Dv flops; one token's q, k, v, out and the
     * running summary read and written and P_i read. */
    const bench_shape d1k = shape_causal(1024, 64), d32k = shape_causal(32768, 64);
    assert_true(op_flops(BENCH_OP_DECODE, &d1k) == 4.0 * 8 * d2);
    assert_true(op_flops(BENCH_OP_DECODE, &d32k) == op_flops(BENCH_OP_DECODE, &d1k));
    assert_true(bench_op_get(BENCH_OP_DECODE)->bytes(&d1k) == 4.0 * 8 * (256 + 3 * d2));
    assert_false(bench_op_get(BENCH_OP_DECODE)->estimable);
    assert_true(bench_op_get(BENCH_OP_MHLA_CAUSAL)->estimable);
    assert_true(bench_op_get(BENCH_OP_MHLA_CAUSAL)->one_d_only && bench_op_get(BENCH_OP_DECODE)->one_d_only);
}

/* Decode runs of C steps: the per-step median over every step, the mean over a run (chunk start
 * included) as the median over runs, the marked step's median, and tokens/s from the mean. */
static void test_step_stats(void **state)
{
    (void)state;
    /* 3 runs of 4 steps; step 1 starts the chunk (slow), one run has a slow outlier step. */
    double ms[] = {1.0, 9.0, 1.0, 1.0, /* mean 3 */
                   1.0, 13.0, 1.0, 1.0, /* mean 4 */
                   2.0, 11.0, 1.0, 30.0 /* mean 11 */};
    bench_timing t;
    bench_step_stats(ms, 3, 4, 1, &t);
    assert_true(t.step_median == 1.0); /* 7 of the 12 steps take 1 ms */
    assert_true(t.step_min == 1.0 && t.step_max == 30.0);
    assert_true(t.step_mean == 4.0); /* median of 3, 4, 11: the outlier run does not move it */
    assert_true(t.marked_ms == 11.0);
    double two[] = {1.0, 3.0, 5.0, 7.0};
    bench_step_stats(two, 2, 2, -1, &t); /* even count: the middle two */
    assert_true(t.step_median == 4.0 && t.step_mean == 4.0 && isnan(t.marked_ms));
    bench_step_stats(NULL, 0, 0, -1, &t);
    assert_true(isnan(t.step_median) && isnan(t.step_mean) && isnan(t.marked_ms));
    assert_true(fabs(bench_tokens_per_s(1, 0.05) - 20000.0) < 1e-6);
    assert_true(fabs(bench_tokens_per_s(4, 0.05) - 80000.0) < 1e-6); /* a step serves every sequence */
    assert_true(isnan(bench_tokens_per_s(1, 0.0)) && isnan(bench_tokens_per_s(1, NAN)));
}

/* t_a = N and t_b = N^2 / c cross at N = c; log-log interpolation is exact for power laws. */
static void test_crossover(void **state)
{
    (void)state;
    const double n[] = {1024, 2048, 4096, 8192, 16384};
    double ta[5], tb[5], nx = 0.0;
    for (int i = 0; i < 5; ++i)
        ta[i] = n[i], tb[i] = n[i] * n[i] / 3000.0;
    assert_true(bench_crossover(n, ta, tb, 5, &nx));
    assert_true(fabs(nx - 3000.0) < 1e-6);
    /* Swapped roles cross at the same N. */
    assert_true(bench_crossover(n, tb, ta, 5, &nx));
    assert_true(fabs(nx - 3000.0) < 1e-6);
    /* Exactly equal at a point. */
    tb[2] = ta[2];
    assert_true(bench_crossover(n, ta, tb, 5, &nx));
    assert_true(nx == 2048.0 || nx == 4096.0);
    /* Never crossing, and points without a time skipped. */
    for (int i = 0; i < 5; ++i)
        tb[i] = 2.0 * ta[i];
    assert_false(bench_crossover(n, ta, tb, 5, &nx));
    const double tz[] = {0.0, 1.0, NAN, 4.0, 16.0}, tl[] = {1.0, 2.0, 4.0, 8.0, 8.0};
    /* tz/tl: 1024 and 4096 skipped, 1/2 at 2048 and 8192, 2 at 16384: halfway (in log) from 8192. */
    assert_true(bench_crossover(n, tl, tz, 5, &nx));
    assert_true(fabs(nx - sqrt(8192.0 * 16384.0)) < 1e-6);
}

static bench_row timed_row(bench_op_id op, bench_shape s, double ms, bench_status status)
{
    bench_row r;
    memset(&r, 0, sizeof r);
    r.op = op;
    r.shape = s;
    r.status = status;
    r.ms_median = r.ms_min = r.ms_max = ms;
    r.stage_ms[0] = r.stage_ms[1] = r.stage_ms[2] = NAN;
    r.iters = 3;
    return r;
}

static void test_ratios_and_rates(void **state)
{
    (void)state;
    bench_shape s = shape_1d(4096), mhla16 = s, mhla64 = s, other = shape_1d(1024);
    assert_true(bench_blocks_for_m(&mhla16, 16));
    assert_true(bench_blocks_for_m(&mhla64, 64));
    bench_row rows[] = {
        timed_row(BENCH_OP_MHLA, mhla16, 11.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_MHLA, mhla64, 12.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_LINEAR, s, 10.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_SOFTMAX, s, 330.0, BENCH_STATUS_ESTIMATED),
        timed_row(BENCH_OP_MHLA, other, 3.0, BENCH_STATUS_OK),      /* no baselines at this N */
        timed_row(BENCH_OP_LINEAR, other, 0.0, BENCH_STATUS_FAILED), /* not a time */
    };
    const size_t n = sizeof rows / sizeof rows[0];
    bench_fill_ratios(rows, n);
    assert_true(fabs(rows[0].ratio_mhla_linear - 1.1) < 1e-12);
    assert_true(fabs(rows[0].ratio_softmax_mhla - 30.0) < 1e-12);
    assert_false(rows[0].ratio_mhla_linear_estimated);
    assert_true(rows[0].ratio_softmax_mhla_estimated);
    assert_true(fabs(rows[1].ratio_mhla_linear - 1.2) < 1e-12);
    assert_true(isnan(rows[2].ratio_mhla_linear) && isnan(rows[3].ratio_softmax_mhla));
    assert_true(isnan(rows[4].ratio_mhla_linear) && isnan(rows[4].ratio_softmax_mhla));

    const bench_peak peak = {100.0, 90.0, 110.0, 8, 10.0, 9.0, 11.0, 1e8, 3, 0, 0};
    bench_fill_rates(rows, n, &peak);
    const double flops = 4.0 * 8 * 4096 * 64 * 64;
    assert_true(fabs(rows[2].flops - flops) < 1.0);
    assert_true(fabs(rows[2].gflops - flops / 10e6) < 1e-9);
    assert_true(fabs(rows[2].pct_peak_flops - rows[2].gflops) < 1e-9); /* peak 100 GFLOP/s */
    assert_true(fabs(rows[3].flops - 2.0 * 8 * 4096.0 * 4096 * 128) < 1.0);
    /* MHLA's bytes: q, k, v, out once plus four passes over the summaries and the mixing matrix. */
    const double qkvo = 4.0 * 8 * 4096 * 256, summaries = 8.0 * 16 * 64 * 65;
    assert_true(fabs(rows[0].bytes - (qkvo + 4.0 * (4.0 * summaries + 256.0))) < 1.0);
    assert_true(fabs(rows[3].bytes - qkvo) < 1.0);
    assert_true(isnan(rows[5].gflops));
    assert_true(isnan(rows[2].pct_sgemm)); /* no sgemm row in this run */
}

static bench_shape shape_sgemm(void)
{
    bench_shape s = {1, 1, BENCH_SGEMM_N, 1, 1, 1, 1, 1, BENCH_SGEMM_N, BENCH_SGEMM_N, MHLA_LAYOUT_BNHD, 0, 0, 0, 0,
                     MHLA_NORMALIZER_PAPER};
    return s;
}

/* blas/mhla: the blas row of the same tensors and M over the mhla row; %sgemm: every rate over the
 * measured sgemm row's (2*2048^3 flops), estimated rows included. */
static void test_blas_columns(void **state)
{
    (void)state;
    bench_shape s = shape_1d(4096), mhla16 = s, mhla64 = s;
    assert_true(bench_blocks_for_m(&mhla16, 16));
    assert_true(bench_blocks_for_m(&mhla64, 64));
    bench_row rows[] = {
        timed_row(BENCH_OP_SGEMM, shape_sgemm(), 100.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_MHLA, mhla16, 10.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_MHLA, mhla64, 12.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_BLAS, mhla16, 25.0, BENCH_STATUS_OK),       /* pairs with the M = 16 row only */
        timed_row(BENCH_OP_BLAS, shape_1d(1024), 5.0, BENCH_STATUS_OK), /* other tensors */
        timed_row(BENCH_OP_SOFTMAX, s, 300.0, BENCH_STATUS_ESTIMATED),
        timed_row(BENCH_OP_LINEAR, s, 0.0, BENCH_STATUS_SKIPPED),
    };
    const size_t n = sizeof rows / sizeof rows[0];
    rows[4].shape.bt = 4;
    const bench_peak peak = {100.0, 90.0, 110.0, 8, 10.0, 9.0, 11.0, 1e8, 3, 0, 0};
    bench_fill_rates(rows, n, &peak);
    bench_fill_ratios(rows, n);
    assert_true(fabs(rows[0].flops - 2.0 * 2048.0 * 2048.0 * 2048.0) < 1.0);
    assert_true(fabs(rows[0].bytes - 12.0 * 2048 * 2048) < 1.0);
    assert_true(fabs(rows[0].pct_sgemm - 100.0) < 1e-12);
    assert_true(fabs(rows[1].pct_sgemm - 100.0 * rows[1].gflops / rows[0].gflops) < 1e-9);
    assert_true(fabs(rows[5].pct_sgemm - 100.0 * rows[5].gflops / rows[0].gflops) < 1e-9);
    assert_true(isnan(rows[6].pct_sgemm));
    /* blas is credited with MHLA's flops and bytes: the same problem. */
    assert_true(rows[3].flops == rows[1].flops && rows[3].bytes == rows[1].bytes);
    assert_true(fabs(rows[1].ratio_blas_mhla - 2.5) < 1e-12);
    assert_false(rows[1].ratio_blas_mhla_estimated);
    assert_true(isnan(rows[2].ratio_blas_mhla)); /* no blas row at M = 64 */
    assert_true(isnan(rows[3].ratio_blas_mhla) && isnan(rows[0].ratio_blas_mhla));
    char label[32];
    bench_blocks_label(&rows[3], label, sizeof label);
    assert_string_equal(label, "16");
    bench_blocks_label(&rows[0], label, sizeof label);
    assert_string_equal(label, "-");
    /* An sgemm row that did not run is no reference. */
    rows[0].status = BENCH_STATUS_SKIPPED;
    bench_fill_rates(rows, n, &peak);
    assert_true(isnan(rows[1].pct_sgemm));
    assert_false(bench_op_get(BENCH_OP_SGEMM)->estimable);
    assert_true(bench_op_get(BENCH_OP_BLAS)->host && bench_op_get(BENCH_OP_SGEMM)->own_inputs);
}

typedef struct host_job {
    int runs;
    mhla_status fail_at; /* MHLA_OK: never */
} host_job;

static mhla_status host_enqueue(void *arg, cl_event *done)
{
    host_job *j = arg;
    const struct timespec ms2 = {0, 2000000};
    *done = NULL;
    nanosleep(&ms2, NULL);
    return ++j->runs == 3 ? j->fail_at : MHLA_OK;
}

/* A host op's runs are timed with the host clock around its hook (no queue, no event) and the row
 * says so with its own clock value, not the fallback's. */
static void test_host_timing(void **state)
{
    (void)state;
    host_job j = {0, MHLA_OK};
    const bench_job job = {NULL, host_enqueue, NULL, NULL, 0, -1, 1, &j};
    bench_timing t;
    char err[128];
    assert_int_equal(bench_time(NULL, &job, 1, 1.0, 3, 10, &t, err, sizeof err), MHLA_OK);
    assert_int_equal(t.iters, 3);
    assert_int_equal(j.runs, 4); /* warm-up included */
    assert_int_equal(t.host_clock, BENCH_CLOCK_HOST_OP);
    assert_true(t.ms_min >= 2.0 && t.ms_min <= t.ms_median && t.ms_median <= t.ms_max);
    assert_true(isnan(t.stage_ms[0]) && isnan(t.marked_ms));
    assert_true(isnan(t.gate_ms) && isnan(t.span_ms)); /* no device clock, no probe */
    /* A failing hook's status comes back, its explanation left to the hook's channel. */
    host_job bad = {0, MHLA_ERR_UNSUPPORTED};
    const bench_job failing = {NULL, host_enqueue, NULL, NULL, 0, -1, 1, &bad};
    assert_int_equal(bench_time(NULL, &failing, 1, 1.0, 3, 10, &t, err, sizeof err), MHLA_ERR_UNSUPPORTED);
    assert_string_equal(err, "");
}

/* causal/mhla: the chunk form over the first mhla row of the same tensors; x first: a decode row's
 * per-token median over the smallest measured context of its sizes and chunk. */
static void test_causal_ratios(void **state)
{
    (void)state;
    bench_shape s4k = shape_1d(4096), m16 = s4k, m64 = s4k;
    assert_true(bench_blocks_for_m(&m16, 16));
    assert_true(bench_blocks_for_m(&m64, 64));
    bench_shape h4 = shape_causal(1024, 64);
    h4.heads = 4;
    bench_row rows[] = {
        timed_row(BENCH_OP_MHLA, m16, 10.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_MHLA, m64, 12.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_MHLA_CAUSAL, shape_causal(4096, 64), 20.0, BENCH_STATUS_OK),
        timed_row(BENCH_OP_MHLA_CAUSAL, shape_causal(4096, 128), 25.0, BENCH_STATUS_ESTIMATED),
        timed_row(BENCH_OP_MHLA_CAUSAL, shape_causal(1024, 64), 5.0, BENCH_STATUS_OK), /* no mhla at 1024 */
        timed_row(BENCH_OP_DECODE, shape_causal(8192, 64), 0.030, BENCH_STATUS_OK),
        timed_row(BENCH_OP_DECODE, shape_causal(1024, 64), 0.025, BENCH_STATUS_OK),
        timed_row(BENCH_OP_DECODE, shape_causal(32768, 64), 0.035, BENCH_STATUS_OK),
        timed_row(BENCH_OP_DECODE, shape_causal(512, 128), 0.050, BENCH_STATUS_OK),   /* another chunk */
        timed_row(BENCH_OP_DECODE, h4, 0.010, BENCH_STATUS_OK),                      /* other sizes */
        timed_row(BENCH_OP_DECODE, shape_causal(256, 64), 0.0, BENCH_STATUS_SKIPPED), /* not a base */
    };
    const size_t n = sizeof rows / sizeof rows[0];
    bench_fill_ratios(rows, n);
    assert_true(fabs(rows[2].ratio_causal_mhla - 2.0) < 1e-12); /* over the first mhla row (M = 16) */
    assert_false(rows[2].ratio_causal_mhla_estimated);
    assert_true(fabs(rows[3].ratio_causal_mhla - 2.5) < 1e-12);
    assert_true(rows[3].ratio_causal_mhla_estimated);
    assert_true(isnan(rows[4].ratio_causal_mhla));
    assert_true(isnan(rows[0].ratio_causal_mhla) && isnan(rows[5].ratio_causal_mhla));
    assert_true(fabs(rows[5].ratio_context - 1.2) < 1e-12);
    assert_true(fabs(rows[6].ratio_context - 1.0) < 1e-12);
    assert_true(fabs(rows[7].ratio_context - 1.4) < 1e-12);
    assert_true(fabs(rows[8].ratio_context - 1.0) < 1e-12);
    assert_true(fabs(rows[9].ratio_context - 1.0) < 1e-12);
    assert_true(isnan(rows[10].ratio_context) && isnan(rows[2].ratio_context));
    /* Causal rows are told apart by their chunk: same N, other C, another case. */
    assert_false(bench_row_same_case(&rows[2], &rows[3]));
    assert_true(bench_row_same_case(&rows[2], &rows[2]));
    char label[32];
    bench_blocks_label(&rows[3], label, sizeof label);
    assert_string_equal(label, "32"); /* ceil(4096 / 128) chunks */
}

/* A softmax row estimated from a smaller N as N^2, an MHLA row as N, and a first row without any
 * measurement skipped only when even the device's peak is too slow for the row budget. */
static void test_estimates(void **state)
{
    (void)state;
    bench_options o;
    char err[64];
    char *argv[] = {"mhla-bench", "--warmup", "1", "--min-iters", "4"};
    assert_int_equal(bench_options_parse(5, argv, &o, stdout, err, sizeof err), 0);
    const bench_peak peak = {100.0, 90.0, 110.0, 8, 10.0, 9.0, 11.0, 1e8, 3, 0, 0};
    bench_shape s1k = shape_1d(1024), s4k = shape_1d(4096), s64k = shape_1d(65536);
    const bench_row done[] = {timed_row(BENCH_OP_SOFTMAX, s1k, 10.0, BENCH_STATUS_OK),
                              timed_row(BENCH_OP_SOFTMAX, s64k, 1.0, BENCH_STATUS_ESTIMATED), /* not a base */
                              timed_row(BENCH_OP_MHLA, s1k, 30.0, BENCH_STATUS_OK)};
    bench_row r = timed_row(BENCH_OP_SOFTMAX, s4k, 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, done, 3, 0.5, &r), 1); /* 5 x 160 ms > 0.5 s */
    assert_int_equal(r.status, BENCH_STATUS_ESTIMATED);
    assert_true(fabs(r.ms_median - 160.0) < 1e-9);
    assert_non_null(strstr(r.note, "N=1024"));
    r = timed_row(BENCH_OP_MHLA, s4k, 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, done, 3, 0.5, &r), 1); /* 5 x 120 ms > 0.5 s */
    assert_true(fabs(r.ms_median - 120.0) < 1e-9);
    r = timed_row(BENCH_OP_MHLA, s4k, 0.0, BENCH_STATUS_OK); /* 5 x 160 ms and 5 x 120 ms fit in 1 s */
    assert_int_equal(bench_estimate_instead(&o, &peak, done, 3, 1.0, &r), 0);
    r = timed_row(BENCH_OP_SOFTMAX, s4k, 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, done, 3, 1.0, &r), 0);
    /* No measured softmax below 64k in done[1..]: the peak bound, 2*8*65536^2*128 flops at 100 GFLOP/s. */
    r = timed_row(BENCH_OP_SOFTMAX, s64k, 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, done + 1, 2, 1.0, &r), 1);
    assert_int_equal(r.status, BENCH_STATUS_SKIPPED);
    r = timed_row(BENCH_OP_SOFTMAX, s1k, 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, done + 1, 2, 1.0, &r), 0);
    /* Nothing left of the sweep's time: even a short row is estimated. */
    r = timed_row(BENCH_OP_MHLA, s1k, 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, done, 3, 0.0, &r), 1);
    assert_true(fabs(r.ms_median - 30.0) < 1e-9);
    /* mhla-causal scales by its own flops (the prefix grows as N^2), from the same chunk only. */
    const bench_row causal[] = {timed_row(BENCH_OP_MHLA_CAUSAL, shape_causal(4096, 64), 100.0, BENCH_STATUS_OK),
                                timed_row(BENCH_OP_MHLA_CAUSAL, shape_causal(8192, 128), 1.0, BENCH_STATUS_OK)};
    r = timed_row(BENCH_OP_MHLA_CAUSAL, shape_causal(16384, 64), 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, causal, 2, 1.0, &r), 1);
    assert_int_equal(r.status, BENCH_STATUS_ESTIMATED);
    const bench_shape c4k = shape_causal(4096, 64), c16k = shape_causal(16384, 64);
    const double grow = op_flops(BENCH_OP_MHLA_CAUSAL, &c16k) / op_flops(BENCH_OP_MHLA_CAUSAL, &c4k);
    assert_true(grow > 5.7 && grow < 5.8); /* 4x the tokens, 16x the prefix */
    assert_true(fabs(r.ms_median - 100.0 * grow) < 1e-9);
    assert_non_null(strstr(r.note, "N=4096"));
    /* Decode rows are never estimated: they run while any time is left, else are skipped. */
    const bench_row dec[] = {timed_row(BENCH_OP_DECODE, shape_causal(1024, 64), 1e6, BENCH_STATUS_OK)};
    r = timed_row(BENCH_OP_DECODE, shape_causal(32768, 64), 0.0, BENCH_STATUS_OK);
    assert_int_equal(bench_estimate_instead(&o, &peak, dec, 1, 0.5, &r), 0);
    assert_int_equal(bench_estimate_instead(&o, &peak, dec, 1, 0.0, &r), 1);
    assert_int_equal(r.status, BENCH_STATUS_SKIPPED);
    assert_non_null(strstr(r.note, "never estimated"));
}

/* A parsed list against the values expected. */
static void assert_sizes(const int64_t *got, size_t count, const int64_t *want, size_t want_count)
{
    assert_int_equal(count, want_count);
    for (size_t i = 0; i < count; ++i)
        assert_int_equal(got[i], want[i]);
}
#define ASSERT_SIZES(got, count, ...)                                                                \
    do {                                                                                             \
        const int64_t want_[] = {__VA_ARGS__};                                                       \
        assert_sizes((got), (count), want_, sizeof want_ / sizeof want_[0]);                         \
    } while (0)

static void test_options(void **state)
{
    (void)state;
    bench_options o;
    char err[256];
    char *quick[] = {"mhla-bench", "--quick", "--json", "x.json"};
    assert_int_equal(bench_options_parse(4, quick, &o, stdout, err, sizeof err), 0);
    assert_true(o.quick);
    assert_int_equal(o.n_count, 3);
    assert_int_equal(o.n[2], 16384);
    assert_int_equal(o.image_count, 1);
    assert_string_equal(o.json_path, "x.json");
    char *only_n[] = {"mhla-bench", "--n", "256,512", "--dims", "64x32,80", "--ops", "softmax,mhla", "--target-ms", "1"};
    assert_int_equal(bench_options_parse(9, only_n, &o, stdout, err, sizeof err), 0);
    assert_int_equal(o.n_count, 2);
    assert_int_equal(o.image_count, 0); /* --n alone drops the image sweep */
    assert_int_equal(o.dk[0], 64);
    assert_int_equal(o.dv[0], 32);
    assert_int_equal(o.dk[1], 80);
    assert_int_equal(o.dv[1], 80);
    assert_int_equal(o.ops, (1u << BENCH_OP_SOFTMAX) | (1u << BENCH_OP_MHLA));
    assert_true(o.target_ms == 1.0);
    char *image[] = {"mhla-bench", "--image", "64x48", "--n", "none"};
    assert_int_equal(bench_options_parse(5, image, &o, stdout, err, sizeof err), 0);
    assert_int_equal(o.n_count, 0);
    assert_int_equal(o.image_h[0], 64);
    assert_int_equal(o.image_w[0], 48);
    char *bad[][3] = {{"mhla-bench", "--n", "0"},         {"mhla-bench", "--ops", "flash"},
                      {"mhla-bench", "--heads", "none"},  {"mhla-bench", "--target-ms", "x"},
                      {"mhla-bench", "--bogus", "1"},     {"mhla-bench", "--layout", "nhwc"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        err[0] = '\0';
        assert_int_equal(bench_options_parse(3, bad[i], &o, stdout, err, sizeof err), -1);
        assert_true(strlen(err) > 0);
    }
    char *missing[] = {"mhla-bench", "--json"};
    assert_int_equal(bench_options_parse(2, missing, &o, stdout, err, sizeof err), -1);
    char *unknown[] = {"mhla-bench", "--ops", "mhla,cublas"};
    assert_int_equal(bench_options_parse(3, unknown, &o, stdout, err, sizeof err), -1);
    assert_non_null(strstr(err, "'cublas'"));
    assert_non_null(strstr(err, "blas, sgemm")); /* the message lists every op */
    /* The host ops: by name always (skipped without OpenBLAS), by default only with OpenBLAS. */
    char *host_ops[] = {"mhla-bench", "--ops", "sgemm,blas,mhla"};
    assert_int_equal(bench_options_parse(3, host_ops, &o, stdout, err, sizeof err), 0);
    assert_int_equal(o.ops, (1u << BENCH_OP_SGEMM) | (1u << BENCH_OP_BLAS) | (1u << BENCH_OP_MHLA));
    const unsigned host_bits = (1u << BENCH_OP_BLAS) | (1u << BENCH_OP_SGEMM);
    char *plain[] = {"mhla-bench"};
    assert_int_equal(bench_options_parse(1, plain, &o, stdout, err, sizeof err), 0);
    assert_int_equal(o.ops & host_bits, bench_blas_available() ? host_bits : 0u);
    assert_int_equal(o.ops & ~host_bits, ((1u << BENCH_OP_COUNT) - 1) & ~host_bits); /* every device op */
    assert_int_equal(bench_options_parse(2, quick, &o, stdout, err, sizeof err), 0);
    assert_int_equal(o.ops & host_bits, bench_blas_available() ? host_bits : 0u);
    /* Causal options: chunk sizes (64 by default, the library's: C is part of the model, so not the
     * 128 timed when asked) and decode contexts (1k, 8k, 32k by default, the --n list when only --n is
     * given, their own list when given, none). */
    char *defaults[] = {"mhla-bench"};
    assert_int_equal(bench_options_parse(1, defaults, &o, stdout, err, sizeof err), 0);
    ASSERT_SIZES(o.chunk, o.chunk_count, 64); /* exactly one chunk, 64: fails on 128 */
    assert_int_equal(o.chunk[0], MHLA_DEFAULT_CHUNK);
    ASSERT_SIZES(o.decode_ctx, o.decode_ctx_count, 1024, 8192, 32768);
    assert_int_equal(bench_options_parse(2, quick, &o, stdout, err, sizeof err), 0);
    ASSERT_SIZES(o.chunk, o.chunk_count, 64); /* --quick too */
    ASSERT_SIZES(o.decode_ctx, o.decode_ctx_count, 1024, 8192, 32768);
    char *follow[] = {"mhla-bench", "--n", "256,512", "--chunk", "32,128"};
    assert_int_equal(bench_options_parse(5, follow, &o, stdout, err, sizeof err), 0);
    ASSERT_SIZES(o.decode_ctx, o.decode_ctx_count, 256, 512);
    ASSERT_SIZES(o.chunk, o.chunk_count, 32, 128);
    char *own[] = {"mhla-bench", "--decode-context", "4096", "--n", "256"};
    assert_int_equal(bench_options_parse(5, own, &o, stdout, err, sizeof err), 0);
    ASSERT_SIZES(o.decode_ctx, o.decode_ctx_count, 4096);
    ASSERT_SIZES(o.n, o.n_count, 256);
    char *none[] = {"mhla-bench", "--decode-context", "none"};
    assert_int_equal(bench_options_parse(3, none, &o, stdout, err, sizeof err), 0);
    assert_int_equal(o.decode_ctx_count, 0);
    assert_int_equal(o.n_count, 7); /* the other sweeps untouched */
    char *bad_chunk[][3] = {{"mhla-bench", "--chunk", "0"}, {"mhla-bench", "--chunk", "none"},
                            {"mhla-bench", "--decode-context", "1k"}};
    for (size_t i = 0; i < sizeof bad_chunk / sizeof bad_chunk[0]; ++i)
        assert_int_equal(bench_options_parse(3, bad_chunk[i], &o, stdout, err, sizeof err), -1);
}

static void test_json_reader(void **state)
{
    (void)state;
    char err[128];
    json_value *v = json_parse(" {\"a\": [1, -2.5e3, true, null], \"s\": \"x\\\"\\u00e9\\n\", \"o\": {}} ", err,
                               sizeof err);
    assert_non_null(v);
    const json_value *a = json_get(v, "a");
    assert_int_equal(a->type, JSON_ARRAY);
    assert_int_equal(a->count, 4);
    assert_true(json_number(&a->items[1], 0) == -2500.0);
    assert_int_equal(a->items[2].type, JSON_BOOL);
    assert_true(isnan(json_number(&a->items[3], NAN)));
    assert_string_equal(json_string(json_get(v, "s"), ""), "x\"\xc3\xa9\n");
    assert_int_equal(json_get(v, "o")->count, 0);
    assert_null(json_get(v, "missing"));
    json_free(v);
    const char *bad[] = {"", "{", "[1,]", "{\"a\" 1}", "{\"a\":1} x", "\"abc", "[1 2]", "nul"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        err[0] = '\0';
        assert_null(json_parse(bad[i], err, sizeof err));
        assert_true(strlen(err) > 0);
    }
}

#define SAMPLE_ROWS 10

static void sample_report(bench_report *rep, bench_row *rows, double scale)
{
    memset(rep, 0, sizeof *rep);
    snprintf(rep->library_version, sizeof rep->library_version, "0.1.0");
    snprintf(rep->started, sizeof rep->started, "2025-01-01T00:00:00Z");
    snprintf(rep->command, sizeof rep->command, "mhla-bench --n 4096 --json \"a b\".json");
    snprintf(rep->device.name, sizeof rep->device.name, "Device \"X\", rev 2");
    snprintf(rep->device.driver, sizeof rep->device.driver, "1.2\\3");
    rep->device.compute_units = 2;
    rep->device.max_alloc = 1ull << 40;
    rep->peak = (bench_peak){123.5, 120, 125, 16, 15.25, 14, 16, 134217728.0, 5, 0, 1};
    char err[64];
    char *argv[] = {"mhla-bench", "--quick", "--seed", "7", "--max-row-s", "8"};
    assert_int_equal(bench_options_parse(6, argv, &rep->opts, stdout, err, sizeof err), 0);
    bench_shape s = shape_1d(4096), m16 = s, img = shape_2d(64, 64);
    assert_true(bench_blocks_for_m(&m16, 16));
    bench_default_blocks(&img);
    rows[0] = timed_row(BENCH_OP_MHLA, m16, 11.0 * scale, BENCH_STATUS_OK);
    rows[0].stage_ms[0] = 6.5, rows[0].stage_ms[1] = 0.25, rows[0].stage_ms[2] = 4.0;
    rows[1] = timed_row(BENCH_OP_LINEAR, s, 10.0 * scale, BENCH_STATUS_OK);
    rows[2] = timed_row(BENCH_OP_SOFTMAX, s, 330.0 * scale, BENCH_STATUS_ESTIMATED);
    rows[2].ms_min = rows[2].ms_max = NAN;
    snprintf(rows[2].note, sizeof rows[2].note, "estimated from N=1024, \"quoted\"");
    rows[3] = timed_row(BENCH_OP_MHLA_CAUSAL, s, 0.0, BENCH_STATUS_NA);
    rows[4] = timed_row(BENCH_OP_MHLA, img, 12.0 * scale, BENCH_STATUS_OK);
    rows[4].shape.layout = MHLA_LAYOUT_BHND;
    rows[5] = timed_row(BENCH_OP_MHLA_CAUSAL, shape_causal(4096, 128), 22.0 * scale, BENCH_STATUS_OK);
    rows[5].stage_ms[0] = 5.0, rows[5].stage_ms[1] = 2.5, rows[5].stage_ms[2] = 14.0;
    for (int i = 0; i < 2; ++i) { /* decode at 1k and 32k tokens of context */
        bench_row *d = &rows[6 + i];
        *d = timed_row(BENCH_OP_DECODE, shape_causal(i ? 32768 : 1024, 64), (i ? 0.03 : 0.025) * scale,
                       BENCH_STATUS_OK);
        d->steps = 64;
        d->step_mean_ms = (i ? 0.1 : 0.03) * scale;
        d->chunk_start_ms = (i ? 4.5 : 0.1) * scale;
        d->tokens_per_s = bench_tokens_per_s(1, d->step_mean_ms);
    }
    rows[8] = timed_row(BENCH_OP_SGEMM, shape_sgemm(), 200.0 * scale, BENCH_STATUS_OK);
    rows[9] = timed_row(BENCH_OP_BLAS, m16, 22.0 * scale, BENCH_STATUS_OK); /* blas/mhla 2 */
    rows[8].host_clock = rows[9].host_clock = BENCH_CLOCK_HOST_OP;
    rep->rows = rows;
    rep->row_count = SAMPLE_ROWS;
    bench_fill_rates(rows, SAMPLE_ROWS, &rep->peak);
    bench_fill_ratios(rows, SAMPLE_ROWS);
}

static void write_report(const bench_report *rep, char *path)
{
    strcpy(path, "/tmp/mhla_bench_testXXXXXX");
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(bench_write_json(f, rep), 0);
    assert_int_equal(fclose(f), 0);
}

static void test_json_round_trip(void **state)
{
    (void)state;
    bench_report rep, back;
    bench_row rows[SAMPLE_ROWS];
    char path[64], err[256];
    sample_report(&rep, rows, 1.0);
    write_report(&rep, path);
    assert_int_equal(bench_read_json(path, &back, err, sizeof err), 0);
    unlink(path);
    assert_string_equal(back.device.name, rep.device.name);
    assert_string_equal(back.device.driver, rep.device.driver);
    assert_string_equal(back.command, rep.command);
    assert_true(back.device.max_alloc == rep.device.max_alloc);
    assert_true(back.peak.gflops == rep.peak.gflops && back.peak.vector_width == 16 && back.peak.fused == 1);
    assert_true(back.opts.target_ms == 150 && back.opts.min_iters == 3 && back.opts.seed == 7);
    assert_true(back.opts.max_row_s == 8 && back.opts.quick == 1 && back.opts.batch == 1);
    assert_int_equal(back.row_count, SAMPLE_ROWS);
    for (size_t i = 0; i < SAMPLE_ROWS; ++i) {
        const bench_row *a = &rows[i], *b = &back.rows[i];
        assert_true(bench_row_same_case(a, b));
        assert_int_equal(a->status, b->status);
        assert_string_equal(a->note, b->note);
        assert_int_equal(a->iters, b->iters);
        assert_int_equal(a->host_clock, b->host_clock);
        const double pairs[][2] = {{a->ms_median, b->ms_median},
                                   {a->ms_min, b->ms_min},
                                   {a->gflops, b->gflops},
                                   {a->ratio_mhla_linear, b->ratio_mhla_linear},
                                   {a->stage_ms[0], b->stage_ms[0]},
                                   {a->stage_ms[2], b->stage_ms[2]},
                                   {a->ratio_softmax_mhla, b->ratio_softmax_mhla},
                                   {a->ratio_causal_mhla, b->ratio_causal_mhla},
                                   {a->step_mean_ms, b->step_mean_ms},
                                   {a->chunk_start_ms, b->chunk_start_ms},
                                   {a->tokens_per_s, b->tokens_per_s},
                                   {a->ratio_context, b->ratio_context},
                                   {a->pct_sgemm, b->pct_sgemm},
                                   {a->ratio_blas_mhla, b->ratio_blas_mhla}};
        for (size_t j = 0; j < sizeof pairs / sizeof pairs[0]; ++j)
            assert_true((isnan(pairs[j][0]) && isnan(pairs[j][1])) ||
                        fabs(pairs[j][0] - pairs[j][1]) <= 1e-9 * fabs(pairs[j][0]));
    }
    assert_int_equal(back.rows[4].shape.layout, MHLA_LAYOUT_BHND);
    assert_int_equal(back.rows[4].shape.bh, 4);
    assert_int_equal(back.rows[5].shape.chunk, 128);
    assert_true(fabs(back.rows[5].ratio_causal_mhla - 2.0) < 1e-12); /* 22 ms over the M = 16 row's 11 */
    assert_int_equal(back.rows[7].steps, 64);
    assert_true(fabs(back.rows[7].ratio_context - 1.2) < 1e-12);
    assert_true(fabs(back.rows[7].tokens_per_s - 10000.0) < 1e-6);
    assert_true(fabs(back.rows[0].ratio_blas_mhla - 2.0) < 1e-12);
    assert_true(fabs(back.rows[8].pct_sgemm - 100.0) < 1e-12);
    assert_int_equal(back.rows[9].host_clock, BENCH_CLOCK_HOST_OP);
    bench_report_free(&back);
    assert_int_equal(bench_read_json("/nonexistent/x.json", &back, err, sizeof err), -1);
}

/* The small shapes rows are verified at: the row's heads, head dims, layout and block grid or
 * chunk, about 512 tokens (softmax 128, 1D). */
static void test_verify_shapes(void **state)
{
    (void)state;
    bench_shape s = shape_1d(65536), img = shape_2d(256, 256);
    assert_true(bench_blocks_for_m(&s, 256));
    bench_default_blocks(&img); /* 16 x 16 blocks of 16 x 16 tokens */
    s.layout = MHLA_LAYOUT_BHND;
    bench_shape v = bench_verify_shape(BENCH_OP_MHLA, &s);
    assert_int_equal(v.t, 512), assert_int_equal(v.bt, 256), assert_int_equal(v.layout, MHLA_LAYOUT_BHND);
    assert_int_equal(v.heads, 8), assert_int_equal(v.dk, 64), assert_int_equal(v.dv, 64);
    v = bench_verify_shape(BENCH_OP_BLAS, &s);
    assert_int_equal(v.t, 512), assert_int_equal(v.bt, 256);
    bench_shape m4 = shape_1d(4096);
    assert_true(bench_blocks_for_m(&m4, 4));
    v = bench_verify_shape(BENCH_OP_MHLA, &m4); /* 4 blocks of 128 */
    assert_int_equal(v.t, 512), assert_int_equal(v.bt, 4);
    bench_shape tiny = shape_1d(64);
    assert_true(bench_blocks_for_m(&tiny, 4));
    v = bench_verify_shape(BENCH_OP_MHLA, &tiny); /* already small: kept */
    assert_int_equal(v.t, 64), assert_int_equal(v.bt, 4);
    v = bench_verify_shape(BENCH_OP_MHLA, &img);
    assert_int_equal(v.h, 16), assert_int_equal(v.w, 16), assert_int_equal(v.bh, 16), assert_int_equal(v.bw, 16);
    bench_shape img4 = shape_2d(64, 64);
    bench_default_blocks(&img4); /* 4 x 4 blocks of 16 x 16 */
    v = bench_verify_shape(BENCH_OP_LINEAR, &img4);
    assert_int_equal(v.bh, 4), assert_int_equal(v.h, 4 * 5), assert_int_equal(v.w, 4 * 5); /* 5 = floor(sqrt(32)) */
    v = bench_verify_shape(BENCH_OP_SOFTMAX, &img);
    assert_int_equal(bench_shape_n(&v), 128), assert_false(bench_shape_is_2d(&v));
    const bench_shape c64 = shape_causal(65536, 64), c256 = shape_causal(65536, 256);
    const bench_shape d32k = shape_causal(32768, 64), d1000 = shape_causal(1000, 64);
    v = bench_verify_shape(BENCH_OP_MHLA_CAUSAL, &c64);
    assert_int_equal(v.t, 512), assert_int_equal(v.chunk, 64), assert_int_equal(v.bt, 8);
    v = bench_verify_shape(BENCH_OP_MHLA_CAUSAL, &c256);
    assert_int_equal(v.t, 641), assert_int_equal(v.bt, 3); /* two chunks and a partial one */
    v = bench_verify_shape(BENCH_OP_DECODE, &d32k);
    assert_int_equal(v.t, 512), assert_int_equal(v.chunk, 64);
    v = bench_verify_shape(BENCH_OP_DECODE, &d1000);
    assert_int_equal(v.t, 512 + 1000 % 64); /* the same offset in its chunk: the same step starts one */
    assert_false(bench_verifiable(BENCH_OP_SGEMM));
    assert_true(bench_verifiable(BENCH_OP_DECODE) && bench_verifiable(BENCH_OP_BLAS));
}

/* A row whose check failed (an error over the tolerance, or a check that could not run) is marked
 * '!' in the table with the reason in its note, and keeps verified / verify_failed in the JSON; a
 * row within the tolerance is not marked. */
static void test_verify_marks_failure(void **state)
{
    (void)state;
    bench_report rep, back;
    bench_row rows[SAMPLE_ROWS];
    char path[64], err[256], *text = NULL;
    size_t len = 0;
    sample_report(&rep, rows, 1.0);
    for (int i = 0; i < 3; ++i)
        rows[i].verify_n = 512, rows[i].verify_tolerance = 1e-5;
    bench_verify_record(&rows[0], 2.5e-7, "max_rel_err 2.5e-07 against the double reference");
    bench_verify_record(&rows[1], 3e-3, "max_rel_err 0.003 against the double reference");
    bench_verify_record(&rows[2], NAN, "MHLA_ERR_OPENCL: no device");
    assert_false(rows[0].verify_failed);
    assert_true(rows[1].verify_failed && rows[2].verify_failed);
    assert_string_equal(rows[0].note, "");
    assert_non_null(strstr(rows[1].note, "verification at N=512 failed (tolerance 1e-05): max_rel_err 0.003"));
    assert_non_null(strstr(rows[2].note, "estimated from N=1024, \"quoted\"; verification at N=512 failed"));
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    bench_write_table(out, &rep);
    fclose(out);
    assert_non_null(strstr(text, "\nmhla                  1D"));  /* verified: no mark */
    assert_non_null(strstr(text, "\n!linear               1D")); /* failed: marked */
    assert_non_null(strstr(text, "\n!softmax              1D"));
    assert_non_null(strstr(text, "! FAILED its check against the double reference"));
    free(text);
    write_report(&rep, path);
    assert_int_equal(bench_read_json(path, &back, err, sizeof err), 0);
    unlink(path);
    assert_true(fabs(back.rows[0].verified - 2.5e-7) < 1e-18 && !back.rows[0].verify_failed);
    assert_true(fabs(back.rows[1].verified - 3e-3) < 1e-15 && back.rows[1].verify_failed);
    assert_true(isnan(back.rows[2].verified) && back.rows[2].verify_failed);
    assert_int_equal(back.rows[1].verify_n, 512);
    assert_true(back.rows[1].verify_tolerance == 1e-5);
    bench_report_free(&back);
    /* a table without failed rows has no '!' */
    sample_report(&rep, rows, 1.0);
    text = NULL;
    out = open_memstream(&text, &len);
    bench_write_table(out, &rep);
    fclose(out);
    assert_null(strstr(text, "\n!"));
    assert_null(strstr(text, "FAILED its check"));
    free(text);
}

/* On the default device (skipped without one): every op of the table verifies within the
 * tolerance, and an op whose enqueue computes nothing (its output stays NaN) or whose output is
 * wrong fails its check. */
static mhla_status enqueue_nothing(bench_case *c, cl_event *done)
{
    (void)c;
    *done = clCreateUserEvent(mhla_context_cl_context(c->ctx), NULL);
    clSetUserEventStatus(*done, CL_COMPLETE);
    return MHLA_OK;
}

static mhla_status enqueue_then_spoil(bench_case *c, cl_event *done)
{
    mhla_status st = bench_op_get(BENCH_OP_MHLA)->enqueue(c, done);
    const float wrong = 1.0f; /* one element of 512 x 2 x 8 */
    if (st == MHLA_OK && (clWaitForEvents(1, done) != CL_SUCCESS ||
                          clEnqueueWriteBuffer(mhla_context_queue(c->ctx), c->in->out, CL_TRUE, 4 * 100,
                                               sizeof wrong, &wrong, 0, NULL, NULL) != CL_SUCCESS))
        st = MHLA_ERR_OPENCL;
    return st;
}

static void test_verify_on_device(void **state)
{
    (void)state;
    mhla_context *ctx = NULL;
    if (mhla_context_create(NULL, &ctx) != MHLA_OK) {
        print_message("no OpenCL device: %s\n", mhla_last_message());
        test_skip();
    }
    bench_options o;
    char err[64];
    char *argv[] = {"mhla-bench"};
    assert_int_equal(bench_options_parse(1, argv, &o, stdout, err, sizeof err), 0);
    bench_shape s = shape_1d(2048), img = shape_2d(48, 48);
    s.heads = 2, s.dk = 8, s.dv = 16, img.heads = 2, img.dk = 16, img.dv = 8, img.layout = MHLA_LAYOUT_BHND;
    bench_shape m8 = s;
    assert_true(bench_blocks_for_m(&m8, 8));
    assert_true(bench_blocks_for_m(&img, 9));
    bench_shape causal = s, decode = s;
    bench_set_chunk(&causal, 32);
    decode.t = 1000; /* verified at 552 tokens */
    bench_set_chunk(&decode, 64);
    const struct {
        bench_op_id op;
        bench_shape shape;
    } cases[] = {{BENCH_OP_MHLA, m8},           {BENCH_OP_MHLA, img},   {BENCH_OP_LINEAR, s},
                 {BENCH_OP_SOFTMAX, s},         {BENCH_OP_MHLA_CAUSAL, causal}, {BENCH_OP_DECODE, decode},
                 {BENCH_OP_BLAS, m8}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        if (cases[i].op == BENCH_OP_BLAS && !bench_blas_available())
            continue;
        bench_row r = timed_row(cases[i].op, cases[i].shape, NAN, BENCH_STATUS_OK);
        bench_verify_row(ctx, &o, &r);
        print_message("%-11s N=%-5lld verified at N=%lld: max_rel_err %.3g\n", bench_op_get(r.op)->name,
                      (long long)bench_shape_n(&r.shape), (long long)r.verify_n, r.verified);
        if (r.verify_failed || !(r.verified <= 1e-5) || r.verify_n <= 0)
            fail_msg("%s: %s", bench_op_get(r.op)->name, r.note);
    }
    bench_op broken = *bench_op_get(BENCH_OP_MHLA);
    bench_row r = timed_row(BENCH_OP_MHLA, m8, NAN, BENCH_STATUS_OK);
    broken.enqueue = enqueue_nothing;
    bench_verify_op(ctx, &o, &broken, &r);
    assert_true(r.verify_failed && isinf(r.verified)); /* NaN where a number was due */
    assert_non_null(strstr(r.note, "verification at N=512 failed"));
    r = timed_row(BENCH_OP_MHLA, m8, NAN, BENCH_STATUS_OK);
    broken.enqueue = enqueue_then_spoil;
    bench_verify_op(ctx, &o, &broken, &r);
    print_message("one spoiled element: max_rel_err %.3g, note: %s\n", r.verified, r.note);
    assert_true(r.verify_failed && r.verified > 1e-5 && isfinite(r.verified));
    mhla_context_destroy(ctx);
}

/* --compare of a run against one twice as slow: every shared timed row reads 2. */
static void test_compare(void **state)
{
    (void)state;
    bench_report a, b;
    bench_row rows_a[SAMPLE_ROWS], rows_b[SAMPLE_ROWS];
    char path_a[64], path_b[64], err[256], *text = NULL;
    size_t len = 0;
    sample_report(&a, rows_a, 1.0);
    sample_report(&b, rows_b, 2.0);
    rows_b[4].shape.layout = MHLA_LAYOUT_BNHD; /* no longer the same case */
    write_report(&a, path_a);
    write_report(&b, path_b);
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    assert_int_equal(bench_compare(path_a, path_b, out, err, sizeof err), 0);
    fclose(out);
    unlink(path_a);
    unlink(path_b);
    assert_non_null(strstr(text, "8 rows in both"));
    assert_non_null(strstr(text, "sgemm       geometric mean B/A 2.000 over 1 measured rows"));
    assert_non_null(strstr(text, "blas        geometric mean B/A 2.000 over 1 measured rows"));
    assert_non_null(strstr(text, "decode      geometric mean B/A 2.000 over 2 measured rows"));
    assert_non_null(strstr(text, "mhla        geometric mean B/A 2.000 over 1 measured rows"));
    assert_non_null(strstr(text, "linear      geometric mean B/A 2.000"));
    assert_non_null(strstr(text, "~  2.000")); /* the estimated softmax row, marked */
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_m_rule), cmocka_unit_test(test_blocks_for_m),
        cmocka_unit_test(test_crossover),      cmocka_unit_test(test_ratios_and_rates),
        cmocka_unit_test(test_causal_flops),   cmocka_unit_test(test_step_stats),
        cmocka_unit_test(test_causal_ratios),  cmocka_unit_test(test_blas_columns),
        cmocka_unit_test(test_host_timing),    cmocka_unit_test(test_estimates),
        cmocka_unit_test(test_options),        cmocka_unit_test(test_json_reader),
        cmocka_unit_test(test_json_round_trip), cmocka_unit_test(test_compare),
        cmocka_unit_test(test_verify_shapes),  cmocka_unit_test(test_verify_marks_failure),
        cmocka_unit_test(test_verify_on_device),
    };
    return run_group("bench", tests, NULL, NULL);
}
