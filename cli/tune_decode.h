/* `mhla tune`'s decode stage (tune_decode.c), for cmd_tune.c: the decoder's fields (dec_dp) change no
 * forward or backward, so a candidate is checked on the decoder itself against the double reference
 * and timed on a decoder's steps. */
#ifndef MHLA_CLI_TUNE_DECODE_H
#define MHLA_CLI_TUNE_DECODE_H

#include <mhla.h>

/* A decoder of `small` (a causal configuration a few chunks long, dtype f32) on ctx with its
 * current tuning, stepped token by token through the whole sequence (a chunk start every C
 * tokens), against mhla_reference_forward() on the same inputs: *passed when within
 * mhla_reference_tolerance(). Mc's entries above the diagonal are NaN: a step that reads one is
 * wrong. Returns the status of a call that failed to run (a build failure, memory). */
mhla_status tune_decode_check(mhla_context *ctx, const mhla_config *small, int *passed);

/* A decoder prefilled with cfg->seq_t tokens of context (a multiple of cfg->chunk), its state
 * saved, and one token's device buffers. */
typedef struct tune_decode tune_decode;

mhla_status tune_decode_open(mhla_context *ctx, const mhla_config *cfg, tune_decode **out);
/* The saved state restored (untimed), then C steps, one of them a chunk start, wall-timed from an
 * idle queue to clFinish(): *ms is that time over C, a token's. */
mhla_status tune_decode_run(tune_decode *d, double *ms);
/* Releases what tune_decode_open() made; NULL is a no-op. */
void tune_decode_close(tune_decode *d);

#endif /* MHLA_CLI_TUNE_DECODE_H */
