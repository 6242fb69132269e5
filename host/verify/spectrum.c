/* Eigenvalues of a symmetric matrix, for mhla_diagnose()'s singular values (the eigenvalues of the
 * Gram matrix A A^T). Householder reflections reduce it to a tridiagonal matrix with the same
 * eigenvalues (backward stable: each eigenvalue moves by about n * DBL_EPSILON * ||A||), then
 * bisection on Sturm counts finds each eigenvalue to that accuracy. Bisection is chosen over the
 * QL iteration for being short and obviously right; it costs O(n^2) per 60 halvings, small next
 * to the O(n^3) reduction. */
#include "verify/verify.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The number of eigenvalues of the tridiagonal (diag, off) below x: the negative pivots of the
 * LDL^T factorisation of T - x I (off[i] couples rows i-1 and i). */
static int64_t count_below(const double *diag, const double *off, int64_t n, double x, double tiny)
{
    int64_t count = 0;
    double pivot = 1.0;
    for (int64_t i = 0; i < n; ++i) {
        pivot = diag[i] - x - (i > 0 ? off[i] * off[i] / pivot : 0.0);
        if (fabs(pivot) < tiny) /* an exact zero pivot: perturb it, as LAPACK's dstebz does */
            pivot = -tiny;
        count += pivot < 0.0;
    }
    return count;
}

int mhla__symmetric_eigenvalues(double *a, int64_t n, double *w)
{
    if (n <= 0)
        return 0;
    double *diag = mhla__malloc((size_t)n * sizeof *diag), *off = mhla__malloc((size_t)n * sizeof *off);
    double *v = mhla__malloc((size_t)n * sizeof *v), *p = mhla__malloc((size_t)n * sizeof *p);
    if (!diag || !off || !v || !p) {
        mhla__free(diag), mhla__free(off), mhla__free(v), mhla__free(p);
        return -1;
    }
    off[0] = 0.0;
    /* Column k: a reflection H = I - beta v v^T maps a[k+1..n-1][k] onto alpha e_1; the trailing
     * block becomes H A22 H = A22 - v w^T - w v^T with p = beta A22 v, w = p - (beta/2)(p.v) v. */
    for (int64_t k = 0; k + 2 < n; ++k) {
        const int64_t m = n - k - 1;
        double norm2 = 0.0;
        for (int64_t i = 0; i < m; ++i) {
            v[i] = a[(k + 1 + i) * n + k];
            norm2 += v[i] * v[i];
        }
        if (norm2 == 0.0) {
            off[k + 1] = 0.0;
            continue;
        }
        const double alpha = v[0] > 0.0 ? -sqrt(norm2) : sqrt(norm2), x0 = v[0];
        v[0] -= alpha;
        const double vv = norm2 - x0 * x0 + v[0] * v[0]; /* |v|^2: only v[0] changed */
        off[k + 1] = alpha;
        if (vv == 0.0)
            continue;
        const double beta = 2.0 / vv;
        double pv = 0.0;
        for (int64_t i = 0; i < m; ++i) {
            const double *row = a + (k + 1 + i) * n + k + 1;
            double s = 0.0;
            for (int64_t j = 0; j < m; ++j)
                s += row[j] * v[j];
            p[i] = beta * s;
            pv += p[i] * v[i];
        }
        const double half = 0.5 * beta * pv;
        for (int64_t i = 0; i < m; ++i)
            p[i] -= half * v[i]; /* p is w from here on */
        for (int64_t i = 0; i < m; ++i) {
            double *row = a + (k + 1 + i) * n + k + 1;
            for (int64_t j = 0; j < m; ++j)
                row[j] -= v[i] * p[j] + p[i] * v[j];
        }
    }
    for (int64_t i = 0; i < n; ++i)
        diag[i] = a[i * n + i];
    if (n >= 2)
        off[n - 1] = a[(n - 1) * n + n - 2];

    /* Gershgorin bounds hold every eigenvalue; bisect each one inside them. */
    double lo = diag[0], hi = diag[0], norm = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double r = (i > 0 ? fabs(off[i]) : 0.0) + (i + 1 < n ? fabs(off[i + 1]) : 0.0);
        lo = fmin(lo, diag[i] - r);
        hi = fmax(hi, diag[i] + r);
        norm = fmax(norm, fabs(diag[i]) + r);
    }
    const double tiny = DBL_MIN + DBL_EPSILON * norm * 1e-3, tol = 2.0 * DBL_EPSILON * norm;
    for (int64_t j = 0; j < n; ++j) { /* the j-th smallest: count_below(x) <= j < count_below(y) */
        double x = lo, y = hi;
        while (y - x > tol && y - x > DBL_EPSILON * fmax(fabs(x), fabs(y))) {
            const double mid = 0.5 * (x + y);
            if (mid <= x || mid >= y)
                break;
            if (count_below(diag, off, n, mid, tiny) > j)
                y = mid;
            else
                x = mid;
        }
        w[j] = 0.5 * (x + y);
    }
    mhla__free(diag), mhla__free(off), mhla__free(v), mhla__free(p);
    return 0;
}
