/* `mhla diagnose --svg`: the singular-value spectra of softmax, linear attention and MHLA (mean over
 * heads, each divided by its largest, log scale, the rank threshold drawn), and bars of their mean
 * row entropy, labelled with the ranks. Hand-written SVG in the style of mhla-bench's --plot. */
#include "diagnose.h"

#include <math.h>
#include <stdio.h>

#define W 860.0
#define H 540.0
#define LEFT 80.0
#define SPLIT 560.0 /* spectra left of it, entropy bars right */
#define TOP 70.0
#define BOTTOM 64.0

static const char *const colors[MHLA_ATTENTION_KINDS] = {"#2ca02c", "#1f77b4", "#d62728"}; /* as the bench */

void diagnose_mean(const mhla_diagnose_result *r, int kind, double *rank, double *entropy)
{
    *rank = *entropy = 0.0;
    for (int64_t h = 0; h < r->heads; ++h) {
        *rank += r->rank[h * MHLA_ATTENTION_KINDS + kind] / (double)r->heads;
        *entropy += r->entropy[h * MHLA_ATTENTION_KINDS + kind] / (double)r->heads;
    }
}

int diagnose_svg(FILE *f, const mhla_diagnose_result *r, const char *title)
{
    const double x0 = LEFT, x1 = SPLIT - 30, y0 = TOP, y1 = H - BOTTOM;
    const double lo = -8.0; /* log10 of the smallest relative singular value drawn */
    const int64_t rows = r->rows;
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' viewBox='0 0 %.0f %.0f' "
               "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            W, H, W, H);
    fprintf(f, "<text x='%.1f' y='26' text-anchor='middle' font-size='16' font-weight='bold'>%s</text>\n", W / 2,
            title);
    fprintf(f, "<text x='%.1f' y='46' text-anchor='middle' font-size='12'>N = %lld tokens, %lld %squery rows, "
               "%lld heads; rank: singular values above %g of the largest</text>\n",
            W / 2, (long long)r->n, (long long)rows, r->sampled ? "sampled " : "", (long long)r->heads, r->rank_rtol);
    /* spectra: x = index (1..rows, linear), y = sigma_i / sigma_1 (log) */
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#333'/>\n", x0, y0, x1 - x0,
            y1 - y0);
    for (int e = 0; e >= (int)lo; --e) {
        const double y = y0 + (0.0 - e) / (0.0 - lo) * (y1 - y0);
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s'/>\n", x0, y, x1, y, "#ddd");
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end' font-size='12'>1e%d</text>\n", x0 - 6, y + 4, e);
    }
    const double yt = y0 + (0.0 - log10(r->rank_rtol)) / (0.0 - lo) * (y1 - y0);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#555' stroke-dasharray='4 3'/>\n", x0, yt, x1,
            yt);
    for (int q = 0; q <= 4; ++q) {
        const double x = x0 + q / 4.0 * (x1 - x0);
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>%lld</text>\n", x, y1 + 18,
                (long long)(1 + q * (rows - 1) / 4));
    }
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='13'>singular value index</text>\n",
            (x0 + x1) / 2, H - 18);
    fprintf(f, "<text transform='translate(22 %.1f) rotate(-90)' text-anchor='middle' font-size='13'>"
               "sigma_i / sigma_1, mean over heads (log scale)</text>\n",
            (y0 + y1) / 2);
    for (int kind = 0; kind < MHLA_ATTENTION_KINDS; ++kind) {
        double top = 0.0;
        for (int64_t h = 0; h < r->heads; ++h)
            top += r->sigma[(h * MHLA_ATTENTION_KINDS + kind) * rows] / (double)r->heads;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", colors[kind]);
        for (int64_t i = 0; i < rows && top > 0.0; ++i) {
            double s = 0.0;
            for (int64_t h = 0; h < r->heads; ++h)
                s += r->sigma[(h * MHLA_ATTENTION_KINDS + kind) * rows + i] / (double)r->heads;
            const double v = fmax(log10(fmax(s / top, 1e-300)), lo);
            const double x = x0 + (rows > 1 ? (double)i / (double)(rows - 1) : 0.5) * (x1 - x0);
            fprintf(f, "%.1f,%.1f ", x, y0 + (0.0 - v) / (0.0 - lo) * (y1 - y0));
        }
        fprintf(f, "'/>\n");
    }
    /* entropy bars with the ranks */
    const double bx0 = SPLIT + 20, bx1 = W - 30, maxe = log((double)r->n);
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#333'/>\n", bx0, y0, bx1 - bx0,
            y1 - y0);
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='13'>mean row entropy (nats; top: log N = "
               "%.2f)</text>\n",
            (bx0 + bx1) / 2, H - 18, maxe);
    static const char *const names[MHLA_ATTENTION_KINDS] = {"softmax", "linear", "MHLA"};
    for (int kind = 0; kind < MHLA_ATTENTION_KINDS; ++kind) {
        double rank, entropy;
        diagnose_mean(r, kind, &rank, &entropy);
        const double slot = (bx1 - bx0) / MHLA_ATTENTION_KINDS, x = bx0 + kind * slot + 0.2 * slot;
        const double h = maxe > 0.0 ? entropy / maxe * (y1 - y0) : 0.0;
        fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'/>\n", x, y1 - h, 0.6 * slot, h,
                colors[kind]);
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>%.2f</text>\n", x + 0.3 * slot,
                y1 - h - 6, entropy);
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>%s</text>\n", x + 0.3 * slot,
                y1 + 18, names[kind]);
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' fill='%s'>%s: rank %.1f (bound %lld)</text>\n",
                x0 + 12, y0 + 20 + 18 * kind, colors[kind], names[kind], rank,
                (long long)r->rank_bound[kind]);
    }
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
