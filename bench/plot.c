/* mhla-bench's --plot: a hand-written SVG of device time against N on log-log axes for mhla, linear
 * and softmax attention, with the point where MHLA overtakes softmax marked. No dependencies. */
#include "bench.h"

#include <math.h>
#include <string.h>

#define W 860.0
#define H 540.0
#define LEFT 90.0
#define RIGHT 210.0 /* room for the legend */
#define TOP 64.0
#define BOTTOM 64.0

int bench_crossover(const double *n, const double *ta, const double *tb, size_t count, double *n_cross)
{
    int have_prev = 0;
    double prev_n = 0.0, prev_r = 0.0;
    for (size_t i = 0; i < count; ++i) {
        if (!(ta[i] > 0.0) || !(tb[i] > 0.0) || !(n[i] > 0.0))
            continue;
        const double r = log(tb[i] / ta[i]);
        if (r == 0.0) {
            *n_cross = n[i];
            return 1;
        }
        if (have_prev && (prev_r < 0.0) != (r < 0.0)) {
            const double f = prev_r / (prev_r - r);
            *n_cross = exp(log(prev_n) + f * (log(n[i]) - log(prev_n)));
            return 1;
        }
        have_prev = 1;
        prev_n = n[i];
        prev_r = r;
    }
    return 0;
}

typedef struct series {
    bench_op_id op;
    const char *color;
    double n[BENCH_MAX_LIST * 2], ms[BENCH_MAX_LIST * 2];
    int estimated[BENCH_MAX_LIST * 2];
    size_t count;
} series;

/* The points of `op` among rows like `ref` (same sizes, 1D or 2D as ref), one per N (the first
 * row: the first M of the list for mhla), in increasing N. */
static void collect(const bench_report *rep, const bench_row *ref, series *s)
{
    s->count = 0;
    for (size_t i = 0; i < rep->row_count; ++i) {
        const bench_row *r = &rep->rows[i];
        const double n = (double)bench_shape_n(&r->shape);
        if (r->op != s->op || !bench_row_has_time(r) || !bench_shape_same_sizes(&r->shape, &ref->shape) ||
            bench_shape_is_2d(&r->shape) != bench_shape_is_2d(&ref->shape) || s->count == BENCH_MAX_LIST * 2)
            continue;
        size_t at = 0;
        while (at < s->count && s->n[at] < n)
            ++at;
        if (at < s->count && s->n[at] == n)
            continue;
        memmove(&s->n[at + 1], &s->n[at], (s->count - at) * sizeof s->n[0]);
        memmove(&s->ms[at + 1], &s->ms[at], (s->count - at) * sizeof s->ms[0]);
        memmove(&s->estimated[at + 1], &s->estimated[at], (s->count - at) * sizeof s->estimated[0]);
        s->n[at] = n;
        s->ms[at] = r->ms_median;
        s->estimated[at] = r->status == BENCH_STATUS_ESTIMATED;
        ++s->count;
    }
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; ++s) {
        if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else
            fputc(*s, f);
    }
}

typedef struct axes {
    double x0, x1, y0, y1; /* log10 ranges */
} axes;

/* Pixel coordinates of N and of a time in ms. */
static double px(const axes *a, double n)
{
    return LEFT + (log10(n) - a->x0) / (a->x1 - a->x0) * (W - LEFT - RIGHT);
}
static double py(const axes *a, double ms)
{
    return H - BOTTOM - (log10(ms) - a->y0) / (a->y1 - a->y0) * (H - TOP - BOTTOM);
}

static void n_label(char *buf, size_t size, double n)
{
    if (n >= 1024 && fmod(n, 1024) == 0)
        snprintf(buf, size, "%.0fk", n / 1024);
    else
        snprintf(buf, size, "%.0f", n);
}

static void ms_label(char *buf, size_t size, double ms)
{
    if (ms >= 1000)
        snprintf(buf, size, "%g s", ms / 1000);
    else
        snprintf(buf, size, "%g ms", ms);
}

static void draw_axes(FILE *f, const axes *a, int is_2d)
{
    const double x_left = LEFT, x_right = W - RIGHT, y_top = TOP, y_bottom = H - BOTTOM;
    char label[32];
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#333'/>\n", x_left, y_top,
            x_right - x_left, y_bottom - y_top);
    /* x: powers of two inside the range */
    for (double n = pow(2.0, ceil(a->x0 / log10(2.0) - 1e-9)); log10(n) <= a->x1 + 1e-9; n *= 2) {
        const double x = px(a, n);
        n_label(label, sizeof label, n);
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>\n", x, y_top, x, y_bottom);
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>%s</text>\n", x, y_bottom + 18, label);
    }
    /* y: decades, with 2 and 5 as lighter lines */
    for (int e = (int)floor(a->y0); e <= (int)ceil(a->y1); ++e)
        for (int m = 1; m <= 5; m += m == 1 ? 1 : 3) {
            const double ms = m * pow(10.0, e);
            if (log10(ms) < a->y0 - 1e-9 || log10(ms) > a->y1 + 1e-9)
                continue;
            const double y = py(a, ms);
            fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s'/>\n", x_left, y, x_right, y,
                    m == 1 ? "#ccc" : "#eee");
            if (m == 1) {
                ms_label(label, sizeof label, ms);
                fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end' font-size='12'>%s</text>\n", x_left - 6, y + 4,
                        label);
            }
        }
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='13'>%s (log scale)</text>\n",
            (x_left + x_right) / 2, H - 18, is_2d ? "N = image tokens" : "sequence length N");
    fprintf(f, "<text transform='translate(22 %.1f) rotate(-90)' text-anchor='middle' font-size='13'>"
               "device time per forward (log scale)</text>\n",
            (y_top + y_bottom) / 2);
}

static void draw_series(FILE *f, const axes *a, const series *s)
{
    for (size_t i = 0; i + 1 < s->count; ++i)
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2.5'%s/>\n",
                px(a, s->n[i]), py(a, s->ms[i]), px(a, s->n[i + 1]), py(a, s->ms[i + 1]), s->color,
                s->estimated[i] || s->estimated[i + 1] ? " stroke-dasharray='6 4'" : "");
    for (size_t i = 0; i < s->count; ++i)
        fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4.5' fill='%s' stroke='%s' stroke-width='2'/>\n", px(a, s->n[i]),
                py(a, s->ms[i]), s->estimated[i] ? "white" : s->color, s->color);
}

/* MHLA/softmax crossover over the N both series have; marked on the plot, or said to be absent. */
static void draw_crossover(FILE *f, const axes *a, const series *mhla, const series *sm)
{
    double n[BENCH_MAX_LIST * 2], ta[BENCH_MAX_LIST * 2], tb[BENCH_MAX_LIST * 2], nx = 0.0;
    int est[BENCH_MAX_LIST * 2];
    size_t count = 0;
    for (size_t i = 0; i < mhla->count; ++i)
        for (size_t j = 0; j < sm->count; ++j)
            if (sm->n[j] == mhla->n[i]) {
                n[count] = mhla->n[i], ta[count] = mhla->ms[i], tb[count] = sm->ms[j];
                est[count] = mhla->estimated[i] || sm->estimated[j];
                ++count;
            }
    const double x_text = W - RIGHT + 16;
    if (count < 2) {
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>crossover: needs mhla and</text>\n", x_text, TOP + 150);
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>softmax at two N or more</text>\n", x_text, TOP + 166);
        return;
    }
    if (!bench_crossover(n, ta, tb, count, &nx)) {
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>no crossover in range:</text>\n", x_text, TOP + 150);
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>%s is faster at every N</text>\n", x_text, TOP + 166,
                tb[0] > ta[0] ? "MHLA" : "softmax");
        return;
    }
    /* MHLA's time at the crossover, interpolated in log space like N; and whether the two points
     * around it include an estimate. */
    double t = ta[0];
    int estimated = 0;
    for (size_t i = 0; i + 1 < count; ++i)
        if (nx >= n[i] && nx <= n[i + 1]) {
            const double f2 = (log(nx) - log(n[i])) / (log(n[i + 1]) - log(n[i]));
            t = exp(log(ta[i]) + f2 * (log(ta[i + 1]) - log(ta[i])));
            estimated = est[i] || est[i + 1];
        }
    const double x = px(a, nx), y = py(a, t);
    fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#555' stroke-dasharray='3 3'/>\n", x, TOP, x,
            H - BOTTOM);
    fprintf(f, "<circle cx='%.1f' cy='%.1f' r='8' fill='none' stroke='black' stroke-width='2'/>\n", x, y);
    const int left = x > (LEFT + W - RIGHT) / 2; /* the label on the side with room */
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='%s' stroke='white' stroke-width='4' "
               "paint-order='stroke'>N = %.0f</text>\n",
            left ? x - 12 : x + 12, y - 12, left ? "end" : "start", nx);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>crossover: N = %.0f</text>\n", x_text, TOP + 150, nx);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>(%s faster above it)</text>\n", x_text, TOP + 166,
            tb[count - 1] > ta[count - 1] ? "MHLA" : "softmax");
    if (estimated)
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>from estimated times</text>\n", x_text, TOP + 182);
}

int bench_write_svg(FILE *f, const bench_report *rep)
{
    series ss[3] = {{BENCH_OP_MHLA, "#d62728", {0}, {0}, {0}, 0},
                    {BENCH_OP_LINEAR, "#1f77b4", {0}, {0}, {0}, 0},
                    {BENCH_OP_SOFTMAX, "#2ca02c", {0}, {0}, {0}, 0}};
    /* The sizes plotted: those of the first timed 1D row, else of the first timed row. */
    const bench_row *ref = NULL;
    for (int pass = 0; pass < 2 && !ref; ++pass)
        for (size_t i = 0; i < rep->row_count && !ref; ++i) {
            const bench_row *r = &rep->rows[i];
            if ((r->status == BENCH_STATUS_OK || r->status == BENCH_STATUS_ESTIMATED) &&
                (pass == 1 || !bench_shape_is_2d(&r->shape)) && r->op <= BENCH_OP_SOFTMAX)
                ref = r;
        }
    axes a = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    for (size_t k = 0; k < 3; ++k) {
        if (ref)
            collect(rep, ref, &ss[k]);
        for (size_t i = 0; i < ss[k].count; ++i) {
            a.x0 = fmin(a.x0, log10(ss[k].n[i])), a.x1 = fmax(a.x1, log10(ss[k].n[i]));
            a.y0 = fmin(a.y0, log10(ss[k].ms[i])), a.y1 = fmax(a.y1, log10(ss[k].ms[i]));
        }
    }
    if (!isfinite(a.x0)) /* nothing to plot: an empty frame says so */
        a = (axes){3, 4, 0, 1};
    /* A little room around the points; whole decades in time. */
    const double xpad = a.x1 > a.x0 ? 0.04 * (a.x1 - a.x0) : 0.3;
    a.x0 -= xpad, a.x1 += xpad;
    a.y0 = floor(a.y0), a.y1 = ceil(a.y1);
    if (a.y1 <= a.y0)
        a.y1 = a.y0 + 1;

    fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n");
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' viewBox='0 0 %.0f %.0f' "
               "font-family='sans-serif'>\n",
            W, H, W, H);
    fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
    fprintf(f, "<text x='%.1f' y='26' text-anchor='middle' font-size='16' font-weight='bold'>"
               "MHLA vs linear vs softmax attention on ",
            W / 2);
    xml_text(f, rep->device.name);
    fprintf(f, "</text>\n");
    if (ref)
        fprintf(f, "<text x='%.1f' y='46' text-anchor='middle' font-size='12'>B=%lld H=%lld Dk=%lld Dv=%lld %s, "
                   "libmhla %s, median device time</text>\n",
                W / 2, (long long)ref->shape.batch, (long long)ref->shape.heads, (long long)ref->shape.dk,
                (long long)ref->shape.dv, mhla_layout_name(ref->shape.layout), rep->library_version);
    draw_axes(f, &a, ref && bench_shape_is_2d(&ref->shape));
    if (!ref)
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='14'>no timed mhla, linear or softmax "
                   "rows to plot</text>\n",
                (LEFT + W - RIGHT) / 2, (TOP + H - BOTTOM) / 2);
    for (size_t k = 0; k < 3; ++k)
        draw_series(f, &a, &ss[k]);
    const char *names[] = {"MHLA", "linear attention (M = 1)", "softmax attention"};
    for (size_t k = 0; k < 3; ++k) {
        const double y = TOP + 12 + 22.0 * (double)k, x = W - RIGHT + 16;
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='2.5'/>\n", x, y, x + 26,
                y, ss[k].color);
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>%s</text>\n", x + 32, y + 4, names[k]);
    }
    fprintf(f, "<circle cx='%.1f' cy='%.1f' r='4.5' fill='white' stroke='#555' stroke-width='2'/>\n", W - RIGHT + 29,
            TOP + 84);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>estimated, not run</text>\n", W - RIGHT + 48, TOP + 88);
    draw_crossover(f, &a, &ss[0], &ss[2]);
    fprintf(f, "</svg>\n");
    return ferror(f) ? -1 : 0;
}
