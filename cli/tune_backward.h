/* `mhla tune`'s causal backward stage (tune_backward.c), for cmd_tune.c: the check of a candidate
 * against the double reference, the timed problem, and the inputs both fill. */
#ifndef MHLA_CLI_TUNE_BACKWARD_H
#define MHLA_CLI_TUNE_BACKWARD_H

#include <mhla.h>

#include <stddef.h>
#include <stdint.h>

/* n floats uniform in [lo, hi) from a fixed-seed generator: the same values for the same seed, so
 * that every candidate is timed and checked on the same inputs. */
void tune_fill_range(float *x, size_t n, uint64_t seed, float lo, float hi);
/* The same in [0.05, 1): the timed problems' inputs (positive: no denominator near 0). */
void tune_fill(float *x, size_t n, uint64_t seed);

/* The causal backward of `small` (a causal configuration a few chunks long, dtype f32) on ctx with
 * its current tuning, against mhla_reference_backward() on the same inputs: *passed when dq, dk,
 * dv and dMc are each within mhla_reference_backward_tolerance(MHLA_DTYPE_F32). Returns the
 * status of a call that failed to run (a build failure, memory). */
mhla_status tune_backward_check(mhla_context *ctx, const mhla_config *small, int *passed);

/* A causal backward problem on the device: a plan of cfg (no saved summaries: the plain backward,
 * which recomputes the forward's) and its input and gradient buffers. */
typedef struct tune_backward tune_backward;

mhla_status tune_backward_open(mhla_context *ctx, const mhla_config *cfg, tune_backward **out);
/* One mhla_backward() with dMc, wall-timed from an idle queue to clFinish(), into *ms. */
mhla_status tune_backward_run(tune_backward *b, double *ms);
/* The plan's description after a run (mhla_plan_tuning, its backward's part included). */
mhla_status tune_backward_tuning(const tune_backward *b, char *buf, size_t size);
/* Releases what tune_backward_open() made; NULL is a no-op. */
void tune_backward_close(tune_backward *b);

#endif /* MHLA_CLI_TUNE_BACKWARD_H */
