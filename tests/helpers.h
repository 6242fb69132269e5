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
    int64_t rows; /* of the mixing matrix */
} test_inputs;

/* Random q, k, v for cfg (positive q/k when the feature map is `none`, as a caller who applied
 * its own map would pass) and a mixing matrix from `init`. Returns MHLA_OK or the failing status. */
mhla_status test_inputs_make(const mhla_config *cfg, mhla_init_kind init, uint32_t seed, test_inputs *in);
void test_inputs_free(test_inputs *in);

/* test_inputs_make, the q, k, v rounded to cfg->dtype's storage, a device forward through
 * mhla_forward_host and the reference on the same rounded inputs. Returns the status of the first
 * failing call; on success *err is SPEC.md's max relative error. `out`/`ref` (optional) receive the
 * arrays, which the caller frees. Causal configs included. */
mhla_status run_against_reference(mhla_context *ctx, const mhla_config *cfg, mhla_init_kind init, uint32_t seed,
                                   double *err, float **out, double **ref);

/* Outputs start as NaN, so that an element a kernel forgets to write fails the comparison. */
void fill_nan(float *x, size_t n);
/* n floats, all NaN (malloc'd; a failed cmocka assertion when out of memory). */
float *nan_floats(size_t n);
/* A device buffer of `bytes` filled with 0x7FFF halves: NaN as f16 and bf16, and as f32 in pairs
 * (a failed cmocka assertion if it cannot be made). */
cl_mem nan_buffer(mhla_context *ctx, size_t bytes);
/* Refills `bytes` of buf that way (waits for it). */
void nan_fill(mhla_context *ctx, cl_mem buf, size_t bytes);
/* Sets MHLA_POISON_OUTPUTS=1: the library's host calls (mhla_forward_host, the decoder's
 * _host calls) then fill their reused staging output with NaN before every run. test_context()
 * calls it. */
void poison_outputs(void);

/* cmocka's skip() counts as a pass and its run exits 0, so that meson would call a program whose
 * every case was skipped a pass. Cases skip with test_skip(); run_group() returns 77 (meson's
 * SKIP) when every case of the group skipped, else cmocka's count of failures. */
extern size_t test_skipped;
#define test_skip()                                                                                 \
    do {                                                                                            \
        ++test_skipped;                                                                             \
        skip();                                                                                     \
    } while (0)
int test_group_status(int failed, size_t cases);
#define run_group(name, tests, setup, teardown)                                                     \
    test_group_status(cmocka_run_group_tests_name(name, tests, setup, teardown), sizeof(tests) / sizeof((tests)[0]))

/* A context on the default device (MHLA_DEVICE honoured), or a failed cmocka assertion. */
mhla_context *test_context(void);

/* PoCL's single-threaded `basic` device deadlocks inside clSetUserEventStatus when commands wait
 * on the user event (pocl/pocl#1177, open): tests that gate work on a user event skip it there. */
int user_event_gates_hang(mhla_context *ctx);

/* cmocka group setup and teardown: *state is a test_context(). */
int context_setup(void **state);
int context_teardown(void **state);

/* Teardown of a test that sets MHLA_TUNING: a failed check leaves the test early, and the
 * override must not outlive it. */
int unset_tiling(void **state);

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
 * (CLBlast adds every earlier block). set_odd_tiling() sets MHLA_TUNING, unset_tiling() clears
 * them. */
#define TEST_ODD_TUNING                                                                             \
    "sum_rd=2,sum_ve=2,sum_nv=1,out_rt=3,out_ve=2,out_nv=1,out_dc=2,pre_mr=2,pre_nv=3,wg=7,tq=12,kt=5,gemm_rows=4"
void set_odd_tiling(void);

/* A causal config (mhla_config_init_causal) for B sequences of N tokens in chunks of C. */
mhla_config config_causal(int64_t batch, int64_t heads, int64_t n, int64_t chunk, int64_t dk, int64_t dv);

/* Copies tokens [t0, t0 + n) of a tensor of N tokens ([B,N,H,D] or [B,H,N,D] by cfg's layout)
 * into a tensor of n tokens (slice) or back (place). */
void slice_tokens(const mhla_config *cfg, int64_t N, int64_t D, const float *src, int64_t t0, int64_t n, float *dst);
void place_tokens(const mhla_config *cfg, int64_t N, int64_t D, const float *src, int64_t t0, int64_t n, float *dst);

#endif
