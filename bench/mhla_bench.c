/* mhla-bench: MHLA against linear attention (M = 1) and softmax attention on one OpenCL device,
 * read against the device's measured peak. The README's main job runs `mhla-bench --quick`.
 * Exit status: 0, 1 when the device or an output file fails, 2 for bad options, 3 when a row
 * failed or failed its check against the reference (the table still prints). */
#include "bench.h"
#ifdef MHLA_BENCH_MPI
#include "bench_mpi.h"
#endif

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Written to a temporary beside the target and renamed over it: a full disk or a failed write
 * leaves the previous file (or none), never a truncated report. */
static int write_file(const char *path, int (*writer)(FILE *, const bench_report *), const bench_report *rep)
{
    char tmp[4096];
    int rc = -1;
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) < (int)sizeof tmp) {
        FILE *f = fopen(tmp, "w");
        rc = f ? writer(f, rep) : -1;
        if (f && fclose(f) != 0)
            rc = -1;
        if (rc == 0 && rename(tmp, path) != 0)
            rc = -1;
        if (rc && f)
            remove(tmp);
    }
    if (rc)
        fprintf(stderr, "mhla-bench: cannot write %s\n", path);
    return rc;
}

static void fill_identity(bench_report *rep, const bench_options *o, int argc, char **argv)
{
    snprintf(rep->library_version, sizeof rep->library_version, "%s", mhla_version_string());
    const time_t now = time(NULL);
    struct tm utc;
    if (gmtime_r(&now, &utc))
        strftime(rep->started, sizeof rep->started, "%Y-%m-%dT%H:%M:%SZ", &utc);
    size_t len = 0;
    for (int i = 0; i < argc && len + 1 < sizeof rep->command; ++i) {
        const int w = snprintf(rep->command + len, sizeof rep->command - len, "%s%s", i ? " " : "", argv[i]);
        len += w > 0 ? (size_t)w : 0;
    }
    rep->opts = *o;
    rep->opts.device = rep->opts.json_path = rep->opts.csv_path = rep->opts.plot_path = NULL;
    rep->opts.compare[0] = rep->opts.compare[1] = NULL;
}

int main(int argc, char **argv)
{
    bench_options o;
    bench_report rep;
    mhla_context *ctx = NULL;
    char err[1024] = "";
    for (int i = 1; i < argc; ++i) /* --mpi: a mode of its own, under mpirun (bench/mpi.c) */
        if (!strcmp(argv[i], "--mpi")) {
#ifdef MHLA_BENCH_MPI
            return bench_mpi_main(argc, argv);
#else
            fprintf(stderr, "mhla-bench: --mpi: built without MPI (install libopenmpi-dev, meson -Dmpi=enabled)\n");
            return 2;
#endif
        }
    /* OpenBLAS reads OPENBLAS_CORETYPE once, when it loads: a fallback core is replaced by a new exec
     * of this program with it set (bench/blas.c; set, it is never replaced again, so this runs once);
     * where the exec fails, OpenBLAS's own choice stays. */
    const char *was = NULL, *core = bench_blas_core_fix(&was);
    if (core) {
        if (setenv("MHLA_BENCH_BLAS_CORE_WAS", was, 1) == 0 && setenv("OPENBLAS_CORETYPE", core, 1) == 0)
            execv("/proc/self/exe", argv);
        unsetenv("MHLA_BENCH_BLAS_CORE_WAS");
        unsetenv("OPENBLAS_CORETYPE");
    }
    int rc = bench_options_parse(argc, argv, &o, stdout, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        fprintf(stderr, "mhla-bench: %s\n", err);
        return 2;
    }
    if (o.compare[0]) {
        if (bench_compare(o.compare[0], o.compare[1], stdout, err, sizeof err) == 0)
            return 0;
        fprintf(stderr, "mhla-bench: %s\n", err);
        return 1;
    }

    const double t0 = bench_now();
    memset(&rep, 0, sizeof rep);
    fill_identity(&rep, &o, argc, argv);
    mhla_status st = mhla_context_create(o.device, &ctx);
    if (st == MHLA_OK && o.no_stage_marks)
        st = mhla_context_profile_stages(ctx, 0);
    if (st == MHLA_OK)
        st = bench_device_read(ctx, &rep.device);
    if (st != MHLA_OK) {
        fprintf(stderr, "mhla-bench: %s\n", ctx ? "cannot read the device's properties" : mhla_last_message());
        mhla_context_destroy(ctx);
        return 1;
    }
    if (!o.quiet)
        fprintf(stderr, "mhla-bench: measuring the peak of %s...\n", rep.device.name);
    /* Per FMA variant: a few runs of ~50 ms (quick) or ~150 ms, enough for a stable median. */
    st = bench_peak_measure(ctx, &rep.device, o.quick ? 150.0 : 750.0, o.quick ? 3 : 5, &rep.peak, err, sizeof err);
    if (st != MHLA_OK) {
        fprintf(stderr, "mhla-bench: peak probe: %s\n", err);
        mhla_context_destroy(ctx);
        return 1;
    }
    if ((st = bench_gate_setup(ctx, &o, err, sizeof err)) != MHLA_OK) {
        fprintf(stderr, "mhla-bench: %s\n", err);
        mhla_context_destroy(ctx);
        return 1;
    }
    rep.opts.gate = o.gate, rep.opts.gate_us = o.gate_us;
    const int failed = bench_sweep_run(ctx, &o, &rep);
    bench_gate_release();
    if (failed) {
        fprintf(stderr, "mhla-bench: out of host memory\n");
        mhla_context_destroy(ctx);
        return 1;
    }
    mhla_context_destroy(ctx);
    rep.wall_s = bench_now() - t0;

    bench_write_table(stdout, &rep);
    rc = 0;
    if (o.json_path && write_file(o.json_path, bench_write_json, &rep))
        rc = 1;
    if (o.csv_path && write_file(o.csv_path, bench_write_csv, &rep))
        rc = 1;
    if (o.plot_path && write_file(o.plot_path, bench_write_svg, &rep))
        rc = 1;
    size_t unverified = 0;
    for (size_t i = 0; i < rep.row_count; ++i) {
        unverified += rep.rows[i].verify_failed != 0;
        if (rc == 0 && (rep.rows[i].status == BENCH_STATUS_FAILED || rep.rows[i].verify_failed))
            rc = 3;
    }
    if (unverified) /* the table marks them '!'; a script must not take their figures as good */
        fprintf(stderr, "mhla-bench: %zu row(s) failed the check against the double reference (marked '!')\n",
                unverified);
    bench_report_free(&rep);
    return rc;
}
