/* Shared by the device tests: deterministic inputs, one forward pass checked against the
 * double-precision reference (tolerances: mhla_reference_tolerance()). */
#ifndef MHLA_TEST_HELPERS_H
#define MHLA_TEST_HELPERS_H

#include <mhla.h>
#include <mhla_reference.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* strstr in assert_message_has */

/* Fills x[0..n) with values uniform in [lo, hi), deterministic in seed. */
void fill_uniform(float *x, size_t n, uint32_t seed, float lo, float hi);

/* Not an initializer of the library: mixing entries uniform in [-0.5, 1) ([0.05, 1) with a
 * normalizer, whose denominator signed weights could bring near 0), a stand-in for a trained Mc
 * with no structure to lean on. */
#define TEST_INIT_RANDOM ((mhla_init_kind)100)

/* Inputs of one configuration. The mixing matrix is M x M, or for causal configs R x R with
 * R = mixing_rows (0: ceil(N/C)); causal matrices get NaN strictly above the diagonal, which no
 * causal path may read. */
typedef struct test_inputs {
    float *q, *k, *v, *mix;
    size_t nq, nv, nm;
    size_t nk, no; /* k's and out's elements: nq and nv but for grouped key/value heads and cross-attention */
    int64_t rows; /* of the mixing matrix */
} test_inputs;

/* Random q, k, v for cfg (positive q/k when the feature map is `none`, as a caller who applied
 * its own map would pass) and a mixing matrix from `init`. Returns MHLA_OK or the failing status. */
mhla_status test_inputs_make(const mhla_config *cfg, mhla_init_kind init, uint32_t seed, test_inputs *in);
void test_inputs_free(test_inputs *in);

/* test_inputs_make, the q, k, v rounded to cfg->dtype's storage, a device forward through
 * mhla_forward_host and the reference on the same rounded inputs. Returns the status of the first
 * failing call; on success *err is the max relative error of docs/spec.md "Accuracy the tests hold".
 * `out`/`ref` (optional) receive the arrays, which the caller frees. Causal configs included. */
mhla_status run_against_reference(mhla_context *ctx, const mhla_config *cfg, mhla_init_kind init, uint32_t seed,
                                   double *err, float **out, double **ref);

/* Outputs start as NaN, so that an element a kernel forgets to write fails the comparison. */
void fill_nan(float *x, size_t n);
/* n floats, all NaN (malloc'd; a failed cmocka assertion when out of memory). */
float *nan_floats(size_t n);
/* n 16-bit outputs, all NaN: 0x7FFF in f16 and in bf16 (malloc'd, as nan_floats). */
uint16_t *nan16(size_t n);
/* Storage of n floats in dtype: x itself for f32, else the 16-bit bits for the device (malloc'd),
 * with x rounded to them as the device sees it. */
void *to_storage(mhla_dtype dtype, float *x, size_t n);
/* A device buffer of `bytes` filled with 0x7FFF halves: NaN as f16 and bf16, and as f32 in pairs
 * (a failed cmocka assertion if it cannot be made). */
cl_mem nan_buffer(mhla_context *ctx, size_t bytes);
/* Refills `bytes` of buf that way (waits for it). */
void nan_fill(mhla_context *ctx, cl_mem buf, size_t bytes);
/* Sets MHLA_POISON_OUTPUTS=1: the library's host calls (mhla_forward_host, the decoder's
 * _host calls) then fill their reused staging output with NaN before every run; and
 * MHLA_POISON_WORKSPACE=1: every buffer the library makes for itself starts as NaN, as a GPU's
 * fresh memory holds anything (a CPU device's is often zeros). test_context() calls it. */
void poison_outputs(void);

/* cmocka's skip() counts as a pass and its run exits 0, so that meson would call a program whose
 * every case was skipped a pass. Cases skip with test_skip(); run_group() prints how many cases
 * skipped ("cases skipped: K of N", which scripts/test.sh adds up) and returns 77 (meson's SKIP)
 * when every case of the group skipped, else cmocka's count of failures. */
extern size_t test_skipped;
#define test_skip()                                                                                 \
    do {                                                                                            \
        ++test_skipped;                                                                             \
        skip();                                                                                     \
    } while (0)
int test_group_status(int failed, size_t cases);
/* Variant runs (the same program under another tuning row, work-group limit or OpenCL
 * implementation: tests/meson.build) set MHLA_TEST_THIN=K:R to check every K-th configuration of the
 * program's lists, those numbered R, R + K, R + 2K, ... in the order the cases meet them (counted over
 * the whole program, so that a short case is not always left out). The full run on the default
 * device checks every configuration; variants with R = 0, 1, ... K - 1 together check each one again
 * on another path, at a K-th of the compiles. test_config_thinned() counts the configuration and says
 * whether to leave it out; test_group_status() prints "configurations thinned (K:R): ran X of Y". */
int test_config_thinned(void);
/* run_group(): cmocka's group run, plus:
 *  - every case without a teardown of its own gets restore_test_env(), so that a failing case cannot
 *    leave its tuning (MHLA_TUNING, the shared context's override) to the cases after it;
 *  - MHLA_TEST_FILTER, when set, runs only the cases whose names match one of its comma-separated
 *    patterns (fnmatch: `*`, `?`), as tests/mutations/ does to run the case that should catch a
 *    defect; MHLA_TEST_SKIP leaves out the cases that match one of its patterns (a variant run of a
 *    program that need not repeat every case: tests/meson.build). */
struct CMUnitTest;
int test_run_group(const char *name, const struct CMUnitTest *tests, size_t n, int (*setup)(void **),
                    int (*teardown)(void **));
#define run_group(name, tests, setup, teardown)                                                     \
    test_run_group(name, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)
/* Puts MHLA_TUNING back to its value when the program started (meson sets it for some runs, e.g.
 * row=gpu) and clears the tuning override of the group's shared context (context_setup()).
 * Always returns 0, so that it can be a cmocka teardown. */
int restore_test_env(void **state);

/* The max relative error of docs/spec.md "Accuracy the tests hold" (mhla_max_rel_err) for an output that
 * must be finite: a NaN or an infinity anywhere in `got` or `ref` gives +Inf and prints which element
 * and what it held (mhla_max_rel_err counts NaN against NaN as a match, which only the NaN-propagation
 * tests want; fmax() would drop a NaN altogether). `what` names the output in that message. */
double finite_rel_err(const float *got, const double *ref, size_t n, const char *what);
/* The same for two double arrays (the reference against another double computation). */
double finite_rel_err_double(const double *got, const double *ref, size_t n, const char *what);
/* Fails the test, naming `what`, unless finite_rel_err(got, ref, n) <= tol; returns the error. */
double expect_within(const float *got, const double *ref, size_t n, double tol, const char *what);

/* eps and feature_eps for the tests: large enough that every mode's output moves far past its
 * tolerance when a kernel drops either (the defaults, 1e-6, move it by less than the tolerance:
 * a kernel that ignored them passed). set_test_eps() puts them into cfg; expect_eps_visible()
 * checks, on the double reference, that cfg's output with the default eps, and with the default
 * feature_eps (relu-eps), differs from its own by more than `factor` times cfg's tolerance, so that
 * the case can catch either being dropped (a varlen cfg: on its packed tokens as one sequence). */
#define TEST_EPS 0.75f
#define TEST_FEATURE_EPS 0.05f
void set_test_eps(mhla_config *cfg);
void expect_eps_visible(const mhla_config *cfg, uint32_t seed, double factor);

/* A context on the default device (MHLA_DEVICE honoured), or a failed cmocka assertion. The first
 * one a program opens prints its device with say_device(). */
mhla_context *test_context(void);
/* test_context() under forced device limits (MHLA_LIMITS, e.g. "wg=64,local=16K": the context
 * keeps them, and every plan of it is fitted to them), with `tuning` set on it
 * (mhla_context_set_tuning; NULL: none). */
mhla_context *limited_context(const char *limits, const char *tuning);
/* Prints "device: <platform> <device>", the line tests/device_claims.py reads to check that a test
 * ran on the device it claims. */
void say_device(mhla_context *ctx);

/* PoCL's single-threaded `basic` device deadlocks inside clSetUserEventStatus when commands wait
 * on the user event (pocl/pocl#1177, open): tests that gate work on a user event skip it there. */
int user_event_gates_hang(mhla_context *ctx);

/* cmocka group setup and teardown: *state is a test_context(), the group's shared context (whose
 * tuning restore_test_env() clears after every case). */
int context_setup(void **state);
int context_teardown(void **state);


/* The context's last message mentions `text`. */
#define assert_message_has(ctx, text)                                                               \
    do {                                                                                            \
        if (!strstr(mhla_context_message(ctx), (text)))                                             \
            fail_msg("message '%s' does not mention '%s'", mhla_context_message(ctx), (text));      \
    } while (0)

/* plan_create on `cfg` must fail with `want`, mention `text`, leave *out NULL, and leave the same
 * message in mhla_last_message(). */
void expect_plan_error(mhla_context *ctx, const mhla_config *cfg, mhla_status want, const char *text);

/* mhla_plan_stage_times() after a forward: 1 with *t filled, or 0 when the device's profiling
 * timestamps are unusable (rusticl 22.3 reports 2 ns to 3 ns for every command), which the library
 * must then say with MHLA_ERR_UNSUPPORTED; any other outcome fails the test. */
int stage_times_or_unusable(mhla_plan *plan, mhla_stage_times *t);

/* Milliseconds on the host's monotonic clock. */
double host_ms(void);

/* CL_CONTEXT_REFERENCE_COUNT of `cl` once it is at most `most`. PoCL and rusticl drop what a finished
 * command held on worker threads after clFinish has returned, later still on a loaded machine, so
 * the count is polled while it is above `most`, for up to REFS_SETTLE_MS: a passing run returns as
 * soon as it settles, only a real leak waits the whole bound. *waited_ms (may be NULL) receives how
 * long it waited, for the failure message. A count at or below `most` returns at once. */
#define REFS_SETTLE_MS 60000.0
cl_uint context_refs_settled(cl_context cl, cl_uint most, double *waited_ms);

/* The stage times of a forward that ran between two host_ms() readings, checked against that
 * independent clock: every stage took time, and the device's span (total_ms) fits in the host's
 * wall time of the blocking call (a unit error or a span from the wrong markers exceeds it). */
void check_stage_times(const mhla_stage_times *t, double wall_ms);

/* A small 2D forward (8x8 tokens, 2x2 blocks, H = 2, Dv = 8) on ctx, within 1e-5 of the reference. */
void forward_2d_ok(mhla_context *ctx, int64_t dk, uint32_t seed);

/* A config for an N-token 1D sequence with M blocks (other fields at their defaults). */
mhla_config config_1d(int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t dk, int64_t dv);

/* Small, odd tilings (read when a plan or decoder is created) that make small tests reach every
 * path of the causal kernels: 3 tokens per work-item, 2-wide vectors, score tiles of 12 x 5,
 * prefix tiles of 2 rows x 3 vectors with a partial last one, and prefix GEMM blocks of 4 chunks
 * (CLBlast adds every earlier block). set_odd_tiling() sets MHLA_TUNING; restore_test_env(),
 * every case's teardown, puts it back. */
#define TEST_ODD_TUNING                                                                             \
    "sum_rd=2,sum_ve=2,sum_nv=1,out_rt=3,out_ve=2,out_nv=1,out_dc=2,pre_mr=2,pre_nv=3,wg=7,tq=12,kt=5,gemm_rows=4"
void set_odd_tiling(void);

/* A causal config (mhla_config_init_causal) for B sequences of N tokens in chunks of C. */
mhla_config config_causal(int64_t batch, int64_t heads, int64_t n, int64_t chunk, int64_t dk, int64_t dv);

/* Copies tokens [t0, t0 + n) of a tensor of N tokens ([B,N,H,D] or [B,H,N,D] by cfg's layout)
 * into a tensor of n tokens (slice) or back (place). */
void slice_tokens(const mhla_config *cfg, int64_t N, int64_t D, const float *src, int64_t t0, int64_t n, float *dst);
void place_tokens(const mhla_config *cfg, int64_t N, int64_t D, const float *src, int64_t t0, int64_t n, float *dst);

/* The m x m identity as a mixing matrix (each block, or chunk, sees only itself); malloc'd. */
float *identity_mixing(int64_t m);

#endif
