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
