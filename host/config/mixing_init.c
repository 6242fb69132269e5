/* Mixing-matrix initializers (docs/spec.md "Mixing-matrix initializers"), computed in double on the host
 * and stored as float. */
#include "config/config.h"

#include <math.h>
#include <stdlib.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Distance between query block i of a (bt, bh, bw) block grid and key block j of a (kt, kh, kw)
 * one: the Euclidean distance between their centres, each key block's centre mapped onto the query
 * block grid's coordinates ((c + 0.5) * query blocks / key blocks along each axis; docs/spec.md
 * "Mixing-matrix initializers"). With the same grid on both sides it is the distance between the two
 * blocks' grid coordinates. */
static double block_distance(int64_t i, int64_t j, const int64_t qb[3], const int64_t kb[3])
{
    const int64_t qi[3] = {i / (qb[1] * qb[2]), (i / qb[2]) % qb[1], i % qb[2]};
    const int64_t kj[3] = {j / (kb[1] * kb[2]), (j / kb[2]) % kb[1], j % kb[2]};
    double sum = 0.0;
    for (int a = 0; a < 3; ++a) {
        const double x = (double)qi[a] + 0.5, y = ((double)kj[a] + 0.5) * (double)qb[a] / (double)kb[a];
        sum += (x - y) * (x - y);
    }
    return sqrt(sum);
}

/* Scales each of the n lines of w (line a: w[a * stride + b * step], b < len) to sum to 1: the rows of
 * an m x k matrix with (n, len, stride, step) = (m, k, k, 1), its columns with (k, m, 1, k). */
static void normalize(double *w, int64_t n, int64_t len, int64_t stride, int64_t step)
{
    for (int64_t a = 0; a < n; ++a) {
        double sum = 0.0;
        for (int64_t b = 0; b < len; ++b)
            sum += w[a * stride + b * step];
        for (int64_t b = 0; b < len; ++b)
            w[a * stride + b * step] /= sum;
    }
}

/* Both initializers: an m x k matrix for query blocks qb and key blocks kb. */
static mhla_status init(const char *fn, mhla_init_kind kind, const double *param, const int64_t qb[3],
                        const int64_t kb[3], float *out, size_t out_count)
{
    mhla_status st = MHLA_OK;
    double *w = NULL;

    MHLA_FAIL_IF(st, !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    MHLA_FAIL_IF(st, kind < MHLA_INIT_LINEAR || kind > MHLA_INIT_CAUSAL_UNIFORM, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: unknown init kind %d", fn, (int)kind);
    for (int side = 0; side < 2; ++side) {
        const int64_t *b = side ? kb : qb;
        const char *what = side ? "key/value block grid" : "block grid";
        MHLA_FAIL_IF(st, b[0] < 1 || b[1] < 1 || b[2] < 1, NULL, MHLA_ERR_INVALID_SHAPE,
                     "%s: %s %lldx%lldx%lld has a non-positive extent", fn, what, (long long)b[0], (long long)b[1],
                     (long long)b[2]);
        MHLA_FAIL_IF(st, b[0] > 65536 || b[1] > 65536 || b[2] > 65536 || b[0] * b[1] * b[2] > 65536, NULL,
                     MHLA_ERR_INVALID_SHAPE, "%s: %s %lldx%lldx%lld has more than 65536 blocks", fn, what,
                     (long long)b[0], (long long)b[1], (long long)b[2]);
    }
    const int64_t m = qb[0] * qb[1] * qb[2], k = kb[0] * kb[1] * kb[2];
    MHLA_FAIL_IF(st, out_count < (size_t)(m * k), NULL, MHLA_ERR_BUFFER_TOO_SMALL,
                 "%s: out holds %zu floats; M x M%s = %lld x %lld needs %lld", fn, out_count, qb == kb ? "" : "_kv",
                 (long long)m, (long long)k, (long long)(m * k));
    double p = 0.0;
    if (kind == MHLA_INIT_EXP) {
        p = param ? *param : 3.0;
        MHLA_FAIL_IF(st, !(p > 0.0) || !isfinite(p), NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "%s: exp sigma must be finite and > 0, got %g", fn, p);
    } else if (kind == MHLA_INIT_LOCAL) {
        p = param ? *param : 1.5;
        MHLA_FAIL_IF(st, !(p >= 0.0) || !isfinite(p), NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "%s: local threshold must be finite and >= 0, got %g", fn, p);
    }
    if (m == 1 && k == 1) { /* every kind gives [[1]] (the released code divides by zero here) */
        out[0] = 1.0f;
        goto cleanup;
    }
    w = mhla__malloc((size_t)(m * k) * sizeof *w);
    MHLA_FAIL_IF(st, !w, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "%s: out of host memory", fn);

    double dmax = 0.0;
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < k; ++j)
            dmax = fmax(dmax, block_distance(i, j, qb, kb));
    if (dmax == 0.0) /* (one block on one side centred on the other's: every distance 0) */
        dmax = 1.0;
    for (int64_t i = 0; i < m; ++i) {
        double row_max = 0.0; /* max_k d(i,k), for the paper's init */
        for (int64_t j = 0; j < k; ++j)
            row_max = fmax(row_max, block_distance(i, j, qb, kb));
        for (int64_t j = 0; j < k; ++j) {
            const double d = block_distance(i, j, qb, kb);
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
                x = row_max > 0.0 ? 1.0 - d / row_max : 1.0;
                break;
            case MHLA_INIT_CAUSAL_UNIFORM:
                x = j <= i ? 1.0 / (double)(i + 1) : 0.0;
                break;
            }
            w[i * k + j] = x;
        }
    }
    if (kind == MHLA_INIT_PAPER) /* rows sum to 1 */
        normalize(w, m, k, k, 1);
    else if (kind != MHLA_INIT_GAUSSIAN && kind != MHLA_INIT_CAUSAL_UNIFORM)
        /* columns sum to 1: the released 1x1 convolution's weight normalization. A square matrix's
         * column holds its own diagonal entry (distance 0), so no sum is zero; a cross one's column
         * may not (local), and a column of zeros stays zeros. */
        for (int64_t j = 0; j < k; ++j) {
            double sum = 0.0;
            for (int64_t i = 0; i < m; ++i)
                sum += w[i * k + j];
            for (int64_t i = 0; i < m && sum != 0.0; ++i)
                w[i * k + j] /= sum;
        }
    for (int64_t i = 0; i < m * k; ++i)
        out[i] = (float)w[i];
cleanup:
    mhla__free(w);
    return st;
}

mhla_status mhla_mixing_init(mhla_init_kind kind, const double *param, int64_t bt, int64_t bh, int64_t bw, float *out,
                             size_t out_count)
{
    const int64_t b[3] = {bt, bh, bw};
    return init("mhla_mixing_init", kind, param, b, b, out, out_count);
}

mhla_status mhla_mixing_init_cross(mhla_init_kind kind, const double *param, const int64_t blocks[3],
                                   const int64_t kv_blocks[3], float *out, size_t out_count)
{
    if (!blocks || !kv_blocks)
        return mhla__fail(NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_mixing_init_cross: %s is NULL",
                          blocks ? "kv_blocks" : "blocks");
    if (kind == MHLA_INIT_CAUSAL_UNIFORM)
        return mhla__fail(NULL, MHLA_ERR_INVALID_ARGUMENT,
                          "mhla_mixing_init_cross: causal-uniform is for causal chunks; cross-attention is non-causal");
    return init("mhla_mixing_init_cross", kind, param, blocks, kv_blocks, out, out_count);
}
