/* Shared by the device tests: deterministic inputs, one forward pass checked against the
 * double-precision reference (tolerances: mhla_reference_tolerance()). */
#ifndef MHLA_TEST_HELPERS_H
#define MHLA_TEST_HELPERS_H

#include <mhla.h>
#include <mhla_reference.h>

#include <stddef.h>
#include <stdint.h>

/* Fills x[0..n) with values uniform in [lo, hi), deterministic in seed. */
void fill_uniform(float *x, size_t n, uint32_t seed, float lo, float hi);

/* Random q, k, v for cfg (positive q/k when the feature map is `none`, as a caller who applied
 * its own map would pass), a mixing matrix from `init`, a device forward through
 * mhla_forward_host and the reference. Returns the status of the first failing call; on success
 * *err is SPEC.md's max relative error. `out`/`ref` (optional) receive the arrays, which the caller
 * frees. */
mhla_status run_against_reference(mhla_context *ctx, const mhla_config *cfg, mhla_init_kind init, uint32_t seed,
                                   double *err, float **out, double **ref);

/* A context on the default device (MHLA_DEVICE honoured), or a failed cmocka assertion. */
mhla_context *test_context(void);

/* A config for an N-token 1D sequence with M blocks (other fields at their defaults). */
mhla_config config_1d(int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t dk, int64_t dv);

#endif
