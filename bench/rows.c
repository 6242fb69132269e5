/* Rows of an mhla-bench report: status names, labels, matching, and the columns derived from the
 * measured times (rates, % of peak and of the sgemm row, the MHLA/linear, softmax/MHLA,
 * blas/MHLA, causal/MHLA and decode context ratios, decode tokens/s). */
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
           a->shape.bh == b->shape.bh && a->shape.bw == b->shape.bw && a->shape.chunk == b->shape.chunk;
}

int bench_row_has_time(const bench_row *r)
{
    return (r->status == BENCH_STATUS_OK || r->status == BENCH_STATUS_ESTIMATED) && r->ms_median > 0.0;
}

void bench_fill_rates(bench_row *rows, size_t count, const bench_peak *peak)
{
    const bench_row *sgemm = NULL; /* the measured sgemm row: %sgemm's reference */
    for (size_t i = 0; i < count; ++i) {
        bench_row *r = &rows[i];
        const bench_op *op = bench_op_get(r->op);
        r->flops = op->flops(&r->shape);
        r->bytes = op->bytes(&r->shape);
        r->gflops = r->gbps = r->pct_peak_flops = r->pct_peak_bw = NAN;
        if (!bench_row_has_time(r))
            continue;
        r->gflops = r->flops / (r->ms_median * 1e6);
        r->gbps = r->bytes / (r->ms_median * 1e6);
        if (peak->gflops > 0.0)
            r->pct_peak_flops = 100.0 * r->gflops / peak->gflops;
        if (peak->gbps > 0.0)
            r->pct_peak_bw = 100.0 * r->gbps / peak->gbps;
        if (r->op == BENCH_OP_SGEMM && r->status == BENCH_STATUS_OK && !sgemm)
            sgemm = r;
    }
    for (size_t i = 0; i < count; ++i)
        rows[i].pct_sgemm = sgemm && isfinite(rows[i].gflops) ? 100.0 * rows[i].gflops / sgemm->gflops : NAN;
}

/* The row of `op` with the tensors of `like` (and its block grid too when same_blocks) that has a
 * time, or NULL. */
static const bench_row *find_timed(const bench_row *rows, size_t count, bench_op_id op, const bench_row *like,
                                   int same_blocks)
{
    const bench_shape *s = &like->shape;
    for (size_t i = 0; i < count; ++i) {
        const bench_shape *t = &rows[i].shape;
        if (rows[i].op == op && bench_row_has_time(&rows[i]) && bench_shape_same_tensors(t, s) &&
            (!same_blocks || (t->bt == s->bt && t->bh == s->bh && t->bw == s->bw)))
            return &rows[i];
    }
    return NULL;
}

double bench_tokens_per_s(int64_t batch, double step_mean_ms)
{
    return step_mean_ms > 0.0 ? (double)batch * 1e3 / step_mean_ms : NAN;
}

/* The measured decode row of r's sizes and chunk with the smallest context, or NULL. */
static const bench_row *first_context(const bench_row *rows, size_t count, const bench_row *r)
{
    const bench_row *first = NULL;
    for (size_t i = 0; i < count; ++i) {
        const bench_row *d = &rows[i];
        if (d->op == r->op && d->status == BENCH_STATUS_OK && d->ms_median > 0.0 &&
            bench_shape_same_sizes(&d->shape, &r->shape) && d->shape.chunk == r->shape.chunk &&
            (!first || bench_shape_n(&d->shape) < bench_shape_n(&first->shape)))
            first = d;
    }
    return first;
}

void bench_fill_ratios(bench_row *rows, size_t count)
{
    for (size_t i = 0; i < count; ++i) {
        bench_row *r = &rows[i];
        r->ratio_mhla_linear = r->ratio_softmax_mhla = r->ratio_causal_mhla = r->ratio_context = NAN;
        r->ratio_blas_mhla = NAN;
        r->ratio_mhla_linear_estimated = r->ratio_softmax_mhla_estimated = r->ratio_causal_mhla_estimated = 0;
        r->ratio_blas_mhla_estimated = 0;
        r->ratio_bwd_fwd = NAN;
        r->ratio_bwd_fwd_estimated = 0;
        if (!bench_row_has_time(r))
            continue;
        const int self = r->status == BENCH_STATUS_ESTIMATED;
        const bench_op_id fwd = r->op == BENCH_OP_MHLA_BWD || r->op == BENCH_OP_MHLA_BWD_SAVED ? BENCH_OP_MHLA
                                : r->op == BENCH_OP_LINEAR_BWD        ? BENCH_OP_LINEAR
                                : r->op == BENCH_OP_MHLA_CAUSAL_BWD || r->op == BENCH_OP_MHLA_CAUSAL_BWD_SAVED
                                    ? BENCH_OP_MHLA_CAUSAL
                                : r->op == BENCH_OP_MHLA_GQA_BWD ? BENCH_OP_MHLA_GQA
                                                                      : BENCH_OP_COUNT;
        const bench_row *f = fwd != BENCH_OP_COUNT ? find_timed(rows, count, fwd, r, 1) : NULL;
        if (f) {
            r->ratio_bwd_fwd = r->ms_median / f->ms_median;
            r->ratio_bwd_fwd_estimated = self || f->status == BENCH_STATUS_ESTIMATED;
        }
        if (r->op == BENCH_OP_MHLA_CAUSAL) {
            const bench_row *mhla = find_timed(rows, count, BENCH_OP_MHLA, r, 0);
            if (mhla) {
                r->ratio_causal_mhla = r->ms_median / mhla->ms_median;
                r->ratio_causal_mhla_estimated = self || mhla->status == BENCH_STATUS_ESTIMATED;
            }
        }
        if ((r->op == BENCH_OP_DECODE || r->op == BENCH_OP_DECODE_GQA) && !self) { /* measured rows only: decode is never estimated */
            const bench_row *first = first_context(rows, count, r);
            if (first)
                r->ratio_context = r->ms_median / first->ms_median;
        }
        if (r->op != BENCH_OP_MHLA)
            continue;
        const bench_row *lin = find_timed(rows, count, BENCH_OP_LINEAR, r, 0);
        const bench_row *sm = find_timed(rows, count, BENCH_OP_SOFTMAX, r, 0);
        const bench_row *blas = find_timed(rows, count, BENCH_OP_BLAS, r, 1); /* the same M */
        if (lin) {
            r->ratio_mhla_linear = r->ms_median / lin->ms_median;
            r->ratio_mhla_linear_estimated = self || lin->status == BENCH_STATUS_ESTIMATED;
        }
        if (sm) {
            r->ratio_softmax_mhla = sm->ms_median / r->ms_median;
            r->ratio_softmax_mhla_estimated = self || sm->status == BENCH_STATUS_ESTIMATED;
        }
        if (blas) {
            r->ratio_blas_mhla = blas->ms_median / r->ms_median;
            r->ratio_blas_mhla_estimated = self || blas->status == BENCH_STATUS_ESTIMATED;
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
    if (!bench_op_has_blocks(r->op) && !s->chunk)
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
