/* host/verify: the plain C double-precision references (forward, softmax, backward), the self-test
 * that checks the device against them, and diagnose (rank and spectrum of the attention
 * matrices). Depends on every layer below (the self-test runs the public calls). */
#ifndef MHLA_VERIFY_H
#define MHLA_VERIFY_H

#include "mhla_reference.h"

#include "config/config.h"

/* The double reference's elements (verify/reference.c), shared with verify/diagnose.c: phi(x), and the
 * offset of element (batch b, token t, head h, column d) in a tensor of n tokens and dim columns. */
double mhla__ref_feature(double x, mhla_feature_map fm, double feature_eps);
size_t mhla__ref_offset(const mhla_config *c, int64_t n, int64_t b, int64_t t, int64_t h, int64_t d, int64_t dim);

/* The token grids and their blocks (docs/spec.md "Token grid and blocks"), of a resolved c (kv_seq_*
 * spelled out) on the query side (kv = 0) or the key/value side (kv = 1), for the references and
 * verify/diagnose.c: the block and position in it of token t (pos may be NULL), and the token at
 * position p of block blk. */
void mhla__ref_locate(const mhla_config *c, const mhla_shape *s, int kv, int64_t t, int64_t *blk, int64_t *pos);
int64_t mhla__ref_token(const mhla_config *c, const mhla_shape *s, int kv, int64_t blk, int64_t p);

/* The eigenvalues of the symmetric n x n matrix a (row-major, overwritten), ascending, into w
 * (verify/spectrum.c): Householder reduction to tridiagonal form, then bisection with Sturm counts.
 * Returns 0, or -1 when out of host memory. */
int mhla__symmetric_eigenvalues(double *a, int64_t n, double *w);

#endif /* MHLA_VERIFY_H */
