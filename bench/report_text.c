/* mhla-bench's text outputs: the table on stdout (and the decode rows' per-token summary after it)
 * and the --csv file (one line per row, carrying the device, versions and parameters so that each
 * line stands alone). */
#include "bench.h"

#include <math.h>
#include <string.h>

/* "12.3" or "" for NaN; `prefix` ("~" for estimates) goes before a number. */
static const char *num(char *buf, size_t size, const char *fmt, double x, const char *prefix)
{
    buf[0] = '\0';
    if (isfinite(x)) {
        const size_t p = strlen(prefix) < size ? strlen(prefix) : 0;
        memcpy(buf, prefix, p);
        snprintf(buf + p, size - p, fmt, x);
    }
    return buf;
}

static void print_header(FILE *f, const bench_report *rep)
{
    const bench_device *d = &rep->device;
    const bench_peak *p = &rep->peak;
    fprintf(f, "mhla-bench: libmhla %s on %s\n", rep->library_version, d->name);
    fprintf(f, "device     %s, %s; driver %s; %s; %s; %u compute units, %u MHz\n", d->vendor, d->platform_name,
            d->driver, d->platform_version, d->opencl_c, d->compute_units, d->clock_mhz);
    fprintf(f, "peak       %.1f GFLOP/s f32 multiply-add (float%d %s chains; %.1f..%.1f over %d runs), "
               "%.1f GB/s copy (read+write of %.0f MiB; %.1f..%.1f)\n",
            p->gflops, p->vector_width, p->fused ? "fma" : "mad", p->gflops_min, p->gflops_max, p->runs, p->gbps,
            p->copy_bytes / 1048576.0, p->gbps_min, p->gbps_max);
    int host = p->host_clock, host_ops = 0;
    for (size_t i = 0; i < rep->row_count; ++i) {
        host |= rep->rows[i].host_clock == BENCH_CLOCK_FALLBACK;
        host_ops |= rep->rows[i].host_clock == BENCH_CLOCK_HOST_OP;
    }
    if (host)
        fprintf(f, "timing     host clock: %s reports no usable profiling timestamps (each run from its start to "
                   "its last command's completion; no stage or step split)\n           ",
                d->name);
    else
        fprintf(f, "timing     device time (profiling events), ");
    fprintf(f, "median of the runs after %d warm-up; about %.0f ms per row, %d..%d runs\n", rep->opts.warmup,
            rep->opts.target_ms, rep->opts.min_iters, rep->opts.max_iters);
    if (rep->opts.gate == BENCH_GATE_KERNEL)
        fprintf(f, "           each run queued behind a %.0f us kernel on the device (--gate kernel)\n", rep->opts.gate_us);
    if (host_ops) {
        const char *blas = bench_blas_config();
        fprintf(f, "           blas and sgemm rows: host wall time (they run on the CPU, not the device), %s with "
                   "%d threads\n",
                blas ? blas : "OpenBLAS", bench_blas_threads());
    }
    fprintf(f, "flops      mhla/linear/blas 4*B*H*N*Dk*Dv, softmax 2*B*H*N^2*(Dk+Dv), mhla-causal that plus its prefix "
               "and masked intra-chunk terms, decode 4*B*H*Dk*Dv per token, sgemm 2*n^3, *-bwd twice their forward's; bytes: see bench/README.md\n\n");
}

/* The measured decode rows like `ref` (sizes and chunk) with the smallest and the largest context. */
static void context_ends(const bench_report *rep, const bench_row *ref, const bench_row **lo, const bench_row **hi)
{
    *lo = *hi = NULL;
    for (size_t i = 0; i < rep->row_count; ++i) {
        const bench_row *r = &rep->rows[i];
        if (r->op != BENCH_OP_DECODE || r->status != BENCH_STATUS_OK || !bench_shape_same_sizes(&r->shape, &ref->shape) ||
            r->shape.chunk != ref->shape.chunk)
            continue;
        if (!*lo || bench_shape_n(&r->shape) < bench_shape_n(&(*lo)->shape))
            *lo = r;
        if (!*hi || bench_shape_n(&r->shape) > bench_shape_n(&(*hi)->shape))
            *hi = r;
    }
}

/* The decode rows per token: median step, the mean over a run of C steps (one chunk start in it),
 * the chunk start alone, tokens/s, and how the per-token time moves with the context. */
static void write_decode(FILE *f, const bench_report *rep)
{
    fprintf(f, "\ndecode per token: each run restores the state after N tokens of context (untimed), then steps C "
               "tokens, one of\nwhich starts a chunk and first builds P_i from the i earlier chunks; step time = end "
               "of the previous step to its own.\n");
    fprintf(f, "%7s %3s %4s %4s %4s %10s %10s %10s %10s %10s %9s %7s\n", "context", "H", "Dk", "Dv", "C", "median ms",
            "min ms", "max ms", "mean/C ms", "start ms", "tok/s", "x first");
    for (size_t i = 0; i < rep->row_count; ++i) {
        const bench_row *r = &rep->rows[i];
        char a[48], b[48], c[48], d[48], e[48], g[48], h[48];
        if (r->op != BENCH_OP_DECODE)
            continue;
        fprintf(f, "%7lld %3lld %4lld %4lld %4lld ", (long long)bench_shape_n(&r->shape), (long long)r->shape.heads,
                (long long)r->shape.dk, (long long)r->shape.dv, (long long)r->shape.chunk);
        if (r->status != BENCH_STATUS_OK) {
            fprintf(f, "%10s  %s\n", "-", r->note);
            continue;
        }
        fprintf(f, "%10s %10s %10s %10s %10s %9s %7s\n", num(a, sizeof a, "%.4f", r->ms_median, ""),
                num(b, sizeof b, "%.4f", r->ms_min, ""), num(c, sizeof c, "%.4f", r->ms_max, ""),
                num(d, sizeof d, "%.4f", r->step_mean_ms, ""), num(e, sizeof e, "%.4f", r->chunk_start_ms, ""),
                num(g, sizeof g, "%.0f", r->tokens_per_s, ""), num(h, sizeof h, "%.2f", r->ratio_context, ""));
    }
    for (size_t i = 0; i < rep->row_count; ++i) { /* one line per series, at its largest context */
        const bench_row *lo, *hi;
        context_ends(rep, &rep->rows[i], &lo, &hi);
        if (rep->rows[i].op != BENCH_OP_DECODE || hi != &rep->rows[i] || lo == hi)
            continue;
        fprintf(f, "decode H=%lld Dk=%lld Dv=%lld C=%lld, %lld over %lld tokens of context: per-token median %.2fx, "
                   "mean over C steps %.2fx\n",
                (long long)hi->shape.heads, (long long)hi->shape.dk, (long long)hi->shape.dv,
                (long long)hi->shape.chunk, (long long)bench_shape_n(&hi->shape), (long long)bench_shape_n(&lo->shape),
                hi->ms_median / lo->ms_median, hi->step_mean_ms / lo->step_mean_ms);
    }
}

/* The line after p's (its end: the text's end where p's is the last). */
static const char *next_line(const char *p)
{
    const char *nl = strchr(p, '\n');
    return nl ? nl + 1 : p + strlen(p);
}

/* --kernels: each row's kernels, by device time, with their share of the row's run. */
static void write_kernels(FILE *f, const bench_report *rep)
{
    for (size_t i = 0; i < rep->row_count; ++i) {
        const bench_row *r = &rep->rows[i];
        if (!r->kernels[0])
            continue;
        char shape[64], name[128];
        unsigned long calls = 0;
        double ms = 0.0, total = 0.0;
        bench_shape_label(&r->shape, shape, sizeof shape);
        for (const char *p = r->kernels; *p; p = next_line(p))
            if (sscanf(p, "%127s %lu %lf", name, &calls, &ms) == 3)
                total += ms;
        fprintf(f, "\nkernels of %s %s, H=%lld Dk=%lld Dv=%lld (one run; device ms, calls, share):\n",
                bench_op_get(r->op)->name, shape, (long long)r->shape.heads, (long long)r->shape.dk,
                (long long)r->shape.dv);
        for (const char *p = r->kernels; *p; p = next_line(p)) {
            if (sscanf(p, "%127s %lu %lf", name, &calls, &ms) == 3)
                fprintf(f, "  %-28s %10.4f %5lu %5.1f%%\n", name, ms, calls, total > 0 ? 100.0 * ms / total : 0.0);
            else /* an untimed kernel, or the dropped launches' line: as the library wrote it */
                fprintf(f, "  %.*s\n", (int)strcspn(p, "\n"), p);
        }
        fprintf(f, "  %-28s %10.4f\n", "(sum of kernels)", total);
    }
}

void bench_write_table(FILE *f, const bench_report *rep)
{
    print_header(f, rep);
    fprintf(f, "%-21s %-7s %6s %5s %3s %4s %4s %9s %9s %9s %5s %8s %7s %6s %6s %6s %8s %7s %9s %7s %7s  %s\n",
            "op", "grid", "N", "M", "H", "Dk", "Dv", "median ms", "min ms", "max ms", "runs", "GFLOP/s", "GB/s",
            "%peak", "%bw", "%sgemm", "mhla/lin", "sm/mhla", "blas/mhla", "c/mhla", "bwd/fwd", "sum/mix/out %");
    int estimated = 0, causal = 0, decode = 0, unverified = 0;
    for (size_t i = 0; i < rep->row_count; ++i) {
        const bench_row *r = &rep->rows[i];
        char name[24], grid[32], blocks[32], a[48], b[48], c[48], d[48], e[48], g[48], h[48], k[48], l[48], m[48];
        char n[48], p[48], x[48], stages[48] = "";
        causal |= r->op == BENCH_OP_MHLA_CAUSAL;
        decode |= r->op == BENCH_OP_DECODE || r->op == BENCH_OP_DECODE_GQA;
        bench_shape_label(&r->shape, grid, sizeof grid);
        bench_blocks_label(r, blocks, sizeof blocks);
        unverified |= r->verify_failed;
        snprintf(name, sizeof name, "%s%s", r->verify_failed ? "!" : "", bench_op_get(r->op)->name);
        fprintf(f, "%-21s %-7s %6lld %5s %3lld %4lld %4lld ", name, grid,
                (long long)bench_shape_n(&r->shape), blocks, (long long)r->shape.heads, (long long)r->shape.dk,
                (long long)r->shape.dv);
        if (r->status == BENCH_STATUS_OK) {
            estimated |= r->ratio_mhla_linear_estimated | r->ratio_softmax_mhla_estimated |
                         r->ratio_causal_mhla_estimated | r->ratio_blas_mhla_estimated | r->ratio_bwd_fwd_estimated;
            const double *sm = r->stage_ms, sum = sm[0] + sm[1] + sm[2];
            if (sum > 0) /* each stage's share of their sum (the total adds the gaps between them) */
                snprintf(stages, sizeof stages, "%.0f/%.0f/%.0f", 100 * sm[0] / sum, 100 * sm[1] / sum,
                         100 * sm[2] / sum);
            char line[512];
            const char *ms_fmt = r->op == BENCH_OP_DECODE || r->op == BENCH_OP_DECODE_GQA ? "%.4f" : "%.3f"; /* a step: tens of microseconds */
            snprintf(line, sizeof line, "%9s %9s %9s %5d %8s %7s %6s %6s %6s %8s %7s %9s %7s %7s  %-*s%s",
                     num(a, sizeof a, ms_fmt, r->ms_median, ""),
                     num(b, sizeof b, ms_fmt, r->ms_min, ""), num(c, sizeof c, ms_fmt, r->ms_max, ""), r->iters,
                     num(d, sizeof d, "%.2f", r->gflops, ""), num(e, sizeof e, "%.2f", r->gbps, ""),
                     num(g, sizeof g, "%.1f%%", r->pct_peak_flops, ""), num(h, sizeof h, "%.1f%%", r->pct_peak_bw, ""),
                     num(p, sizeof p, "%.1f%%", r->pct_sgemm, ""),
                     num(k, sizeof k, "%.3f", r->ratio_mhla_linear, r->ratio_mhla_linear_estimated ? "~" : ""),
                     num(l, sizeof l, "%.2f", r->ratio_softmax_mhla, r->ratio_softmax_mhla_estimated ? "~" : ""),
                     num(n, sizeof n, "%.2f", r->ratio_blas_mhla, r->ratio_blas_mhla_estimated ? "~" : ""),
                     num(m, sizeof m, "%.2f", r->ratio_causal_mhla, r->ratio_causal_mhla_estimated ? "~" : ""),
                     num(x, sizeof x, "%.2f", r->ratio_bwd_fwd, r->ratio_bwd_fwd_estimated ? "~" : ""),
                     r->note[0] ? 14 : 0, stages, r->note);
            for (size_t end = strlen(line); end > 0 && line[end - 1] == ' '; --end)
                line[end - 1] = '\0'; /* no trailing blanks where the last columns are empty */
            fprintf(f, "%s\n", line);
        } else if (r->status == BENCH_STATUS_ESTIMATED) {
            estimated = 1;
            fprintf(f, "%9s  %s\n", num(a, sizeof a, "%.1f", r->ms_median, "~"), r->note);
        } else {
            fprintf(f, "%9s  %s\n", "-", r->note);
        }
    }
    fprintf(f, "\nmhla/lin: MHLA time over linear attention's (same tokens and heads); sm/mhla: softmax time over "
               "MHLA's;\nblas/mhla: the blas row's time (MHLA on the host with OpenBLAS's SGEMM, same tensors and M) "
               "over MHLA's;\n%%sgemm: GFLOP/s over the sgemm row's (OpenBLAS's %dx%dx%d SGEMM on the host, all cores);\n"
               "sum/mix/out: the shares of block summaries, mixing and output in MHLA's stage times;\n"
               "bwd/fwd: a backward row's time (dq, dk, dv, dMc) over its forward row's (same op, tensors, M).\n",
            BENCH_SGEMM_N, BENCH_SGEMM_N, BENCH_SGEMM_N);
    if (causal || decode)
        fprintf(f, "mhla-causal, decode: M is the number of chunks ceil(N/C); c/mhla: the chunk form's time over MHLA's "
                   "at the same N;\nmhla-causal sum/mix/out: chunk summaries, prefix mixtures, output. decode: one "
                   "token per run step, N tokens of context.\n");
    if (unverified)
        fprintf(f, "! FAILED its check against the double reference before timing (note; \"verified\" in the "
                   "JSON): its time is not of a correct computation.\n");
    if (estimated)
        fprintf(f, "~ estimated, not measured: a row over its time budget (--max-row-s, --max-total-s) is scaled from "
                   "a smaller N.\n");
    if (decode)
        write_decode(f, rep);
    write_kernels(f, rep);
    fprintf(f, "total %.1f s\n", rep->wall_s);
}

/* A CSV field: quoted when it holds a comma, quote or newline. */
static void csv_text(FILE *f, const char *s, int last)
{
    if (strpbrk(s, ",\"\n")) {
        fputc('"', f);
        for (; *s; ++s) {
            if (*s == '"')
                fputc('"', f);
            fputc(*s, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
    fputc(last ? '\n' : ',', f);
}

static void csv_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.10g,", x);
    else
        fputc(',', f);
}

int bench_write_csv(FILE *f, const bench_report *rep)
{
    fputs("device,vendor,driver_version,platform_version,opencl_c_version,library_version,peak_gflops,"
          "peak_copy_gbps,target_ms,min_iters,max_iters,warmup,max_row_s,op,status,grid,n,batch,heads,seq_t,seq_h,"
          "seq_w,block_t,block_h,block_w,m,dk,dv,layout,iters,ms_median,ms_min,ms_max,summary_ms,mixing_ms,output_ms,"
          "flops,bytes,gflops,gbps,"
          "pct_peak_flops,pct_peak_bw,ratio_mhla_linear,ratio_softmax_mhla,ratio_mhla_linear_estimated,"
          "ratio_softmax_mhla_estimated,chunk,steps,step_mean_ms,chunk_start_ms,tokens_per_s,ratio_causal_mhla,"
          "ratio_causal_mhla_estimated,ratio_context,pct_sgemm,ratio_blas_mhla,ratio_blas_mhla_estimated,host_clock,"
          "note\n",
          f);
    const bench_device *d = &rep->device;
    for (size_t i = 0; i < rep->row_count; ++i) {
        const bench_row *r = &rep->rows[i];
        const bench_shape *s = &r->shape;
        char grid[32];
        bench_shape_label(s, grid, sizeof grid);
        csv_text(f, d->name, 0);
        csv_text(f, d->vendor, 0);
        csv_text(f, d->driver, 0);
        csv_text(f, d->platform_version, 0);
        csv_text(f, d->opencl_c, 0);
        csv_text(f, rep->library_version, 0);
        csv_num(f, rep->peak.gflops);
        csv_num(f, rep->peak.gbps);
        csv_num(f, rep->opts.target_ms);
        fprintf(f, "%d,%d,%d,", rep->opts.min_iters, rep->opts.max_iters, rep->opts.warmup);
        csv_num(f, rep->opts.max_row_s);
        fprintf(f, "%s,%s,%s,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld,%s,%d,",
                bench_op_get(r->op)->name, bench_status_name(r->status), grid, (long long)bench_shape_n(s),
                (long long)s->batch, (long long)s->heads, (long long)s->t, (long long)s->h, (long long)s->w,
                (long long)s->bt, (long long)s->bh, (long long)s->bw, (long long)bench_shape_m(s), (long long)s->dk,
                (long long)s->dv, mhla_layout_name(s->layout), r->iters);
        const double nums[] = {r->ms_median,   r->ms_min,      r->ms_max,      r->stage_ms[0], r->stage_ms[1],
                               r->stage_ms[2], r->flops,       r->bytes,       r->gflops,      r->gbps,
                               r->pct_peak_flops, r->pct_peak_bw, r->ratio_mhla_linear, r->ratio_softmax_mhla};
        for (size_t j = 0; j < sizeof nums / sizeof nums[0]; ++j)
            csv_num(f, r->status == BENCH_STATUS_OK || r->status == BENCH_STATUS_ESTIMATED ? nums[j] : NAN);
        fprintf(f, "%d,%d,%lld,%d,", r->ratio_mhla_linear_estimated, r->ratio_softmax_mhla_estimated,
                (long long)s->chunk, r->steps);
        const double more[] = {r->step_mean_ms, r->chunk_start_ms, r->tokens_per_s, r->ratio_causal_mhla};
        for (size_t j = 0; j < sizeof more / sizeof more[0]; ++j)
            csv_num(f, r->status == BENCH_STATUS_OK || r->status == BENCH_STATUS_ESTIMATED ? more[j] : NAN);
        fprintf(f, "%d,", r->ratio_causal_mhla_estimated);
        csv_num(f, r->status == BENCH_STATUS_OK ? r->ratio_context : NAN);
        csv_num(f, r->status == BENCH_STATUS_OK || r->status == BENCH_STATUS_ESTIMATED ? r->pct_sgemm : NAN);
        csv_num(f, r->status == BENCH_STATUS_OK || r->status == BENCH_STATUS_ESTIMATED ? r->ratio_blas_mhla : NAN);
        fprintf(f, "%d,%d,", r->ratio_blas_mhla_estimated, r->host_clock);
        csv_text(f, r->note, 1);
    }
    return ferror(f) ? -1 : 0;
}
