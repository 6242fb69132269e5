/* Mixing-matrix initializers (docs/spec.md "Mixing-matrix initializers"), computed in double on the host
 * and stored as float. */
#include "config/config.h"

#include <math.h>
#include <stdlib.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Euclidean distance between the block-grid coordinates of blocks i and j. */
static double block_distance(int64_t i, int64_t j, int64_t bh, int64_t bw)
{
    const double it = (double)(i / (bh * bw)), ih = (double)((i / bw) % bh), iw = (double)(i % bw);
    const double jt = (double)(j / (bh * bw)), jh = (double)((j / bw) % bh), jw = (double)(j % bw);
    return sqrt((it - jt) * (it - jt) + (ih - jh) * (ih - jh) + (iw - jw) * (iw - jw));
}

/* Scales each of the m lines of w (line a: w[a * stride + b * step], b < m) to sum to 1: rows with
 * (stride, step) = (m, 1), columns with (1, m). */
static void normalize(double *w, int64_t m, int64_t stride, int64_t step)
{
    for (int64_t a = 0; a < m; ++a) {
        double sum = 0.0;
        for (int64_t b = 0; b < m; ++b)
            sum += w[a * stride + b * step];
        for (int64_t b = 0; b < m; ++b)
            w[a * stride + b * step] /= sum;
    }
}

mhla_status mhla_mixing_init(mhla_init_kind kind, const double *param, int64_t bt, int64_t bh, int64_t bw, float *out,
                             size_t out_count)
{
    mhla_status st = MHLA_OK;
    double *w = NULL;

    MHLA_FAIL_IF(st, !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_mixing_init: out is NULL");
    MHLA_FAIL_IF(st, kind < MHLA_INIT_LINEAR || kind > MHLA_INIT_CAUSAL_UNIFORM, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_mixing_init: unknown init kind %d", (int)kind);
    MHLA_FAIL_IF(st, bt < 1 || bh < 1 || bw < 1, NULL, MHLA_ERR_INVALID_SHAPE,
                 "mhla_mixing_init: block grid %lldx%lldx%lld has a non-positive extent", (long long)bt,
                 (long long)bh, (long long)bw);
    MHLA_FAIL_IF(st, bt > 65536 || bh > 65536 || bw > 65536 || bt * bh * bw > 65536, NULL, MHLA_ERR_INVALID_SHAPE,
                 "mhla_mixing_init: block grid %lldx%lldx%lld has more than 65536 blocks", (long long)bt,
                 (long long)bh, (long long)bw);
    const int64_t m = bt * bh * bw;
    MHLA_FAIL_IF(st, out_count < (size_t)(m * m), NULL, MHLA_ERR_BUFFER_TOO_SMALL,
                 "mhla_mixing_init: out holds %zu floats; M x M = %lld x %lld needs %lld", out_count, (long long)m,
                 (long long)m, (long long)(m * m));
    double p = 0.0;
    if (kind == MHLA_INIT_EXP) {
        p = param ? *param : 3.0;
        MHLA_FAIL_IF(st, !(p > 0.0) || !isfinite(p), NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "mhla_mixing_init: exp sigma must be finite and > 0, got %g", p);
    } else if (kind == MHLA_INIT_LOCAL) {
        p = param ? *param : 1.5;
        MHLA_FAIL_IF(st, !(p >= 0.0) || !isfinite(p), NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "mhla_mixing_init: local threshold must be finite and >= 0, got %g", p);
    }
    if (m == 1) { /* every kind gives [[1]] (the released code divides by zero here) */
        out[0] = 1.0f;
        goto cleanup;
    }
    w = mhla__malloc((size_t)(m * m) * sizeof *w);
    MHLA_FAIL_IF(st, !w, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "mhla_mixing_init: out of host memory");

    double dmax = 0.0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j)
            dmax = fmax(dmax, block_distance(i, j, bh, bw));
    for (int64_t i = 0; i < m; ++i) {
        double row_max = 0.0; /* max_k d(i,k), for the paper's init */
        for (int64_t k = 0; k < m; ++k)
            row_max = fmax(row_max, block_distance(i, k, bh, bw));
        for (int64_t j = 0; j < m; ++j) {
            const double d = block_distance(i, j, bh, bw);
            double x = 0.0;
            switch (kind) {
            case MHLA_INIT_LINEAR:
                x = 1.0 - d / dmax;
                break;
            case MHLA_INIT_COS:
                x = cos(d / dmax * M_PI / 4.0);
                break;
            case MHLA_INIT_EXP:
                x = exp(-d / p);
                break;
            case MHLA_INIT_GAUSSIAN: {
                const double s = dmax / 3.0;
                x = exp(-d * d / (2.0 * s * s));
                break;
            }
            case MHLA_INIT_LOCAL:
                x = d <= p ? 1.0 : 0.0;
                break;
            case MHLA_INIT_PAPER:
                x = 1.0 - d / row_max;
                break;
            case MHLA_INIT_CAUSAL_UNIFORM:
                x = j <= i ? 1.0 / (double)(i + 1) : 0.0;
                break;
            }
            w[i * m + j] = x;
        }
    }
    if (kind == MHLA_INIT_PAPER) /* rows sum to 1 */
        normalize(w, m, m, 1);
    else if (kind != MHLA_INIT_GAUSSIAN && kind != MHLA_INIT_CAUSAL_UNIFORM)
        /* columns sum to 1: the released 1x1 convolution's weight normalization; each column
         * holds its own diagonal entry (distance 0), so no sum is zero */
        normalize(w, m, 1, m);
    for (int64_t i = 0; i < m * m; ++i)
        out[i] = (float)w[i];
cleanup:
    mhla__free(w);
    return st;
}
