/* Rows of an mhla-bench report: status names, labels, matching, and the columns derived from the
 * measured times (rates, % of peak, the MHLA/linear and softmax/MHLA ratios). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {"ok", "estimated", "skipped", "n/a", "failed"};

const char *bench_status_name(bench_status s)
{
    return (unsigned)s < sizeof status_names / sizeof status_names[0] ? status_names[s] : "failed";
}

bench_status bench_status_parse(const char *name)
{
    for (size_t i = 0; i < sizeof status_names / sizeof status_names[0]; ++i)
        if (name && strcmp(name, status_names[i]) == 0)
            return (bench_status)i;
    return BENCH_STATUS_FAILED;
}

int bench_row_same_case(const bench_row *a, const bench_row *b)
{
    return a->op == b->op && bench_shape_same_tensors(&a->shape, &b->shape) && a->shape.bt == b->shape.bt &&
           a->shape.bh == b->shape.bh && a->shape.bw == b->shape.bw;
}

static int has_time(const bench_row *r)
{
    return (r->status == BENCH_STATUS_OK || r->status == BENCH_STATUS_ESTIMATED) && r->ms_median > 0.0;
}

void bench_fill_rates(bench_row *rows, size_t count, const bench_peak *peak)
{
    for (size_t i = 0; i < count; ++i) {
        bench_row *r = &rows[i];
        const bench_op *op = bench_op_get(r->op);
        r->flops = op->flops(&r->shape);
        r->bytes = op->bytes(&r->shape);
        r->gflops = r->gbps = r->pct_peak_flops = r->pct_peak_bw = NAN;
        if (!has_time(r))
            continue;
        r->gflops = r->flops / (r->ms_median * 1e6);
        r->gbps = r->bytes / (r->ms_median * 1e6);
        if (peak->gflops > 0.0)
            r->pct_peak_flops = 100.0 * r->gflops / peak->gflops;
        if (peak->gbps > 0.0)
            r->pct_peak_bw = 100.0 * r->gbps / peak->gbps;
    }
}

/* The row of `op` with the tensors of `like` that has a time, or NULL. */
static const bench_row *find_timed(const bench_row *rows, size_t count, bench_op_id op, const bench_row *like)
{
    for (size_t i = 0; i < count; ++i)
        if (rows[i].op == op && has_time(&rows[i]) && bench_shape_same_tensors(&rows[i].shape, &like->shape))
            return &rows[i];
    return NULL;
}

void bench_fill_ratios(bench_row *rows, size_t count)
{
    for (size_t i = 0; i < count; ++i) {
        bench_row *r = &rows[i];
        r->ratio_mhla_linear = r->ratio_softmax_mhla = NAN;
        r->ratio_mhla_linear_estimated = r->ratio_softmax_mhla_estimated = 0;
        if (r->op != BENCH_OP_MHLA || !has_time(r))
            continue;
        const bench_row *lin = find_timed(rows, count, BENCH_OP_LINEAR, r);
        const bench_row *sm = find_timed(rows, count, BENCH_OP_SOFTMAX, r);
        const int self = r->status == BENCH_STATUS_ESTIMATED;
        if (lin) {
            r->ratio_mhla_linear = r->ms_median / lin->ms_median;
            r->ratio_mhla_linear_estimated = self || lin->status == BENCH_STATUS_ESTIMATED;
        }
        if (sm) {
            r->ratio_softmax_mhla = sm->ms_median / r->ms_median;
            r->ratio_softmax_mhla_estimated = self || sm->status == BENCH_STATUS_ESTIMATED;
        }
    }
}

void bench_shape_label(const bench_shape *s, char *buf, size_t size)
{
    if (s->t > 1 && bench_shape_is_2d(s))
        snprintf(buf, size, "%lldx%lldx%lld", (long long)s->t, (long long)s->h, (long long)s->w);
    else if (bench_shape_is_2d(s))
        snprintf(buf, size, "%lldx%lld", (long long)s->h, (long long)s->w);
    else
        snprintf(buf, size, "1D");
}

void bench_blocks_label(const bench_row *r, char *buf, size_t size)
{
    const bench_shape *s = &r->shape;
    if (r->op != BENCH_OP_MHLA && r->op != BENCH_OP_LINEAR)
        snprintf(buf, size, "-");
    else if (s->bt > 1 && bench_shape_is_2d(s))
        snprintf(buf, size, "%lldx%lldx%lld", (long long)s->bt, (long long)s->bh, (long long)s->bw);
    else if (bench_shape_is_2d(s) && bench_shape_m(s) > 1)
        snprintf(buf, size, "%lldx%lld", (long long)s->bh, (long long)s->bw);
    else
        snprintf(buf, size, "%lld", (long long)bench_shape_m(s));
}

void bench_report_free(bench_report *rep)
{
    free(rep->rows);
    rep->rows = NULL;
    rep->row_count = 0;
}
