/* mhla-bench --compare A.json B.json: the rows two runs share (same op and every shape parameter),
 * side by side with B's time over A's, and the geometric mean of that ratio per op. */
#include "bench.h"

#include <math.h>

static void describe(FILE *out, const char *tag, const char *path, const bench_report *r)
{
    fprintf(out, "%s  %s: %s (%s), libmhla %s, %s\n", tag, path, r->device.name, r->device.driver,
            r->library_version, r->started);
    fprintf(out, "   peak %.1f GFLOP/s, copy %.1f GB/s\n", r->peak.gflops, r->peak.gbps);
}

int bench_compare(const char *path_a, const char *path_b, FILE *out, char *err, size_t err_size)
{
    bench_report a, b;
    if (bench_read_json(path_a, &a, err, err_size))
        return -1;
    if (bench_read_json(path_b, &b, err, err_size)) {
        bench_report_free(&a);
        return -1;
    }
    describe(out, "A", path_a, &a);
    describe(out, "B", path_b, &b);
    if (a.peak.gflops > 0 && a.peak.gbps > 0)
        fprintf(out, "   B/A: peak %.3f, copy %.3f\n", b.peak.gflops / a.peak.gflops, b.peak.gbps / a.peak.gbps);
    fprintf(out, "\n%-11s %-7s %6s %5s %3s %4s %4s %11s %11s %8s %9s %9s\n", "op", "grid", "N", "M", "H", "Dk", "Dv",
            "A ms", "B ms", "B/A", "A GFLOP/s", "B GFLOP/s");
    double log_sum[BENCH_OP_COUNT] = {0};
    int count[BENCH_OP_COUNT] = {0}, matched = 0, estimated = 0;
    for (size_t i = 0; i < a.row_count; ++i) {
        const bench_row *ra = &a.rows[i], *rb = NULL;
        for (size_t j = 0; j < b.row_count && !rb; ++j)
            if (bench_row_same_case(ra, &b.rows[j]))
                rb = &b.rows[j];
        if (!rb || !bench_row_has_time(ra) || !bench_row_has_time(rb))
            continue;
        char grid[32], blocks[32];
        bench_shape_label(&ra->shape, grid, sizeof grid);
        bench_blocks_label(ra, blocks, sizeof blocks);
        const int est = ra->status == BENCH_STATUS_ESTIMATED || rb->status == BENCH_STATUS_ESTIMATED;
        const double ratio = rb->ms_median / ra->ms_median;
        fprintf(out, "%-11s %-7s %6lld %5s %3lld %4lld %4lld %s%10.3f %s%10.3f %s%7.3f %9.2f %9.2f\n",
                bench_op_get(ra->op)->name, grid, (long long)bench_shape_n(&ra->shape), blocks,
                (long long)ra->shape.heads, (long long)ra->shape.dk, (long long)ra->shape.dv,
                ra->status == BENCH_STATUS_ESTIMATED ? "~" : " ", ra->ms_median,
                rb->status == BENCH_STATUS_ESTIMATED ? "~" : " ", rb->ms_median, est ? "~" : " ", ratio,
                ra->flops / (ra->ms_median * 1e6), rb->flops / (rb->ms_median * 1e6));
        ++matched;
        estimated |= est;
        if (!est) {
            log_sum[ra->op] += log(ratio);
            ++count[ra->op];
        }
    }
    fprintf(out, "\n%d rows in both with times (A has %zu rows, B %zu).\n", matched, a.row_count, b.row_count);
    for (int op = 0; op < BENCH_OP_COUNT; ++op)
        if (count[op])
            fprintf(out, "%-11s geometric mean B/A %.3f over %d measured rows\n", bench_op_get((bench_op_id)op)->name,
                    exp(log_sum[op] / count[op]), count[op]);
    fprintf(out, "B/A > 1: B is slower.%s\n", estimated ? " ~ marks estimated times (left out of the means)." : "");
    bench_report_free(&a);
    bench_report_free(&b);
    return 0;
}
