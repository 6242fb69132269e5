/* `mhla info`: every OpenCL platform and device with the limits that matter to MHLA, and which
 * device `mhla run` uses (the default, or what MHLA_DEVICE selects). */
#include "args.h"
#include "cli.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: mhla info [--timings]\n"
    "\n"
    "Lists every OpenCL platform and device in the order device specs index them, with their\n"
    "limits, and marks the device `mhla run` uses: the first GPU, else the first device, unless\n"
    "MHLA_DEVICE (or run --device) selects another by 'P:D', index or name substring.\n"
    "Exits 1 when there is no OpenCL device or MHLA_DEVICE matches none.\n"
    "\n"
    "  --timings   also time plan creation on that device (B=1 H=8, 64x64 tokens, 4x4 blocks,\n"
    "              Dk=Dv=64): with an empty program cache, from the on-disk cache in a new context,\n"
    "              and from the context's memory. The driver's own cache (PoCL keeps one) can make\n"
    "              the first figure smaller than a true first build.\n";

/* Milliseconds to create (and destroy) a plan on a new context, or on `keep` when given. */
static int time_plan(mhla_context **keep, double *ms)
{
    mhla_context *ctx = keep ? *keep : NULL;
    mhla_plan *plan = NULL;
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 8, cfg.seq_h = 64, cfg.seq_w = 64, cfg.block_h = 4, cfg.block_w = 4, cfg.dk = 64, cfg.dv = 64;
    mhla_status st = ctx ? MHLA_OK : mhla_context_create(NULL, &ctx);
    if (st != MHLA_OK)
        return cli_fail(cli_exit_code(st), "info --timings: %s", mhla_last_message());
    const double t0 = cli_now_ms();
    st = mhla_plan_create(ctx, &cfg, &plan);
    *ms = cli_now_ms() - t0;
    mhla_plan_destroy(plan);
    if (st != MHLA_OK) {
        int rc = cli_fail(cli_exit_code(st), "info --timings: %s", mhla_context_message(ctx));
        mhla_context_destroy(ctx);
        if (keep)
            *keep = NULL; /* the caller must not destroy it again */
        return rc;
    }
    if (keep)
        *keep = ctx;
    else
        mhla_context_destroy(ctx);
    return CLI_OK;
}

/* Removes a folder holding only files (the cache entries this command wrote). */
static void remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d)) != NULL;) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir); /* a leftover temporary folder is not worth failing the command */
}

/* Cold, disk-cache and in-memory plan creation, with MHLA_CACHE_DIR pointed at a fresh folder (and
 * no MHLA_PROGRAM_CACHE_DIR, which would keep the binaries elsewhere). */
static int print_timings(void)
{
    char dir[] = "/tmp/mhla-info-cache-XXXXXX";
    if (!mkdtemp(dir))
        return cli_fail(CLI_RUNTIME, "info --timings: cannot create a temporary folder in /tmp");
    const char *saved = getenv("MHLA_CACHE_DIR"), *saved_programs = getenv("MHLA_PROGRAM_CACHE_DIR");
    char *copy = saved ? strdup(saved) : NULL, *copy_programs = saved_programs ? strdup(saved_programs) : NULL;
    setenv("MHLA_CACHE_DIR", dir, 1);
    unsetenv("MHLA_PROGRAM_CACHE_DIR");
    mhla_context *ctx = NULL;
    double cold = 0, disk = 0, memory = 0;
    int rc = time_plan(NULL, &cold);
    if (rc == CLI_OK)
        rc = time_plan(&ctx, &disk);
    if (rc == CLI_OK)
        rc = time_plan(&ctx, &memory);
    mhla_context_destroy(ctx);
    if (copy)
        setenv("MHLA_CACHE_DIR", copy, 1);
    else
        unsetenv("MHLA_CACHE_DIR");
    if (copy_programs)
        setenv("MHLA_PROGRAM_CACHE_DIR", copy_programs, 1);
    free(copy), free(copy_programs);
    remove_flat_dir(dir);
    if (rc != CLI_OK)
        return rc;
    printf("plan creation (B=1 H=8 64x64 tokens, 4x4 blocks, Dk=Dv=64):\n");
    printf("  empty program cache     %9.1f ms\n", cold);
    printf("  on-disk cache, new ctx  %9.1f ms\n", disk);
    printf("  same context            %9.1f ms\n", memory);
    return CLI_OK;
}

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

/* Which stage a tuning field belongs to (host/tune/tuning_rows.c's fields, by prefix). */
static const char *stage_of(const char *field)
{
    static const struct {
        const char *prefix, *stage;
    } map[] = {{"sum_", "summary"}, {"wg", "summary"}, {"groups_per_cu", "summary"}, {"split_min_len", "summary"},
               {"pf", "summary"},   {"out_", "output"}, {"mix_", "mixing"},       {"tq", "causal"},
               {"kt", "causal"},    {"sc_", "causal"},  {"gemm_rows", "causal"}, {"pre_", "causal"}, {"sm_", "softmax"},
               {"bct_", "backward"}, {"dg_parts", "backward"}, {"bwd_", "backward"}, {"dmix_", "backward"},
               {"vec", "every stage"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; ++i)
        if (strncmp(field, map[i].prefix, strlen(map[i].prefix)) == 0)
            return map[i].stage;
    return "other";
}

/* The device's tuning database: per head-dimension pair, what each stage takes from it (the rest
 * comes from the built-in row above). */
static void print_tuned(mhla_context *ctx)
{
    char path[4200], spec[1024], note[1024];
    size_t count = 0;
    if (mhla_tuning_db_path(ctx, path, sizeof path) != MHLA_OK) {
        printf("tuned entries: none (no cache folder)\n");
        return;
    }
    if (mhla_tuning_db_list(ctx, NULL, 0, &count) != MHLA_OK || count == 0) {
        printf("tuned entries: none (mhla tune writes them to %s)\n", path);
        return;
    }
    int64_t *dims = calloc(2 * count, sizeof *dims);
    if (!dims || mhla_tuning_db_list(ctx, dims, count, &count) != MHLA_OK) {
        free(dims);
        return;
    }
    printf("tuned entries (%s), used by plans with these head dims before MHLA_TUNING:\n", path);
    static const char *const stages[] = {"summary", "output", "mixing", "causal", "softmax", "backward",
                                         "every stage"};
    for (size_t i = 0; i < count; ++i) {
        if (mhla_tuning_db_get(ctx, dims[2 * i], dims[2 * i + 1], spec, sizeof spec, note, sizeof note) != MHLA_OK)
            continue;
        printf("  Dk=%lld Dv=%lld (%s):\n", (long long)dims[2 * i], (long long)dims[2 * i + 1], note);
        for (size_t k = 0; k < sizeof stages / sizeof stages[0]; ++k) {
            char fields[1024] = "";
            size_t len = 0;
            char copy[1024];
            snprintf(copy, sizeof copy, "%s", spec);
            for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
                char name[64];
                if (sscanf(tok, "%63[^=]", name) == 1 && strcmp(stage_of(name), stages[k]) == 0)
                    len += (size_t)snprintf(fields + len, sizeof fields - len, "%s%s", len ? "," : "", tok);
            }
            printf("    %-11s %s\n", stages[k], len ? fields : "(built-in row)");
        }
    }
    free(dims);
}

int cmd_info(int argc, char **argv)
{
    const char *cmd = "info";
    int help_shown = 0, rc;
    mhla_device_info *infos = NULL;
    size_t count = 0, selected = 0;

    cli_option opts[] = {{"--timings", NULL, NULL}};
    if ((rc = args_parse(cmd, help, opts, 1, argc, argv, &help_shown)) != 0 || help_shown)
        return rc;
    mhla_status st = mhla_device_list(NULL, 0, &count);
    if (st != MHLA_OK)
        return cli_fail(cli_exit_code(st), "info: %s", mhla_last_message());
    if (count == 0) { /* the library's reason: where the OpenCL loader looked for drivers */
        mhla_device_selected(NULL, &selected);
        return cli_fail(CLI_RUNTIME, "info: %s", mhla_last_message());
    }
    if (!(infos = calloc(count, sizeof *infos)))
        return cli_fail(CLI_RUNTIME, "info: out of host memory");
    if ((st = mhla_device_list(infos, count, &count)) != MHLA_OK) {
        free(infos);
        return cli_fail(cli_exit_code(st), "info: %s", mhla_last_message());
    }
    const char *env = getenv("MHLA_DEVICE");
    const mhla_status sel = mhla_device_selected(NULL, &selected);

    int platform = -1;
    for (size_t i = 0; i < count; ++i) {
        const mhla_device_info *d = &infos[i];
        if (d->platform_index != platform) {
            platform = d->platform_index;
            printf("platform %d: %s (%s)\n", platform, d->platform_name, d->platform_version);
        }
        printf("  device %d (%d:%d): %s%s%s\n", d->index, d->platform_index, d->device_index, d->device_name,
               d->is_default ? "  [default]" : "",
               sel == MHLA_OK && selected == i && env && *env ? "  [selected by MHLA_DEVICE]" : "");
        printf("    vendor            %s\n", d->vendor);
        printf("    type              %s\n", d->is_gpu ? "GPU" : "not a GPU (CPU or accelerator)");
        printf("    device version    %s\n", d->device_version);
        printf("    driver version    %s\n", d->driver_version);
        printf("    OpenCL C          %s\n", d->opencl_c_version);
        printf("    compute units     %u at %u MHz\n", d->compute_units, d->max_clock_mhz);
        printf("    global memory     %.1f MiB (largest buffer %.1f MiB)\n", mib(d->global_mem_bytes),
               mib(d->max_alloc_bytes));
        printf("    local memory      %.1f KiB\n", (double)d->local_mem_bytes / 1024.0);
        printf("    max work-group    %zu\n", d->max_work_group_size);
        printf("    fp16 / fp64       %s / %s\n", d->has_fp16 ? "yes" : "no", d->has_fp64 ? "yes" : "no");
        printf("    float width       %d\n", d->float_width);
    }
    if (sel != MHLA_OK) {
        free(infos);
        return cli_fail(cli_exit_code(sel), "info: %s", mhla_last_message());
    }
    printf("mhla run uses device %zu (%d:%d) %s", selected, infos[selected].platform_index,
           infos[selected].device_index, infos[selected].device_name);
    if (env && *env)
        printf(" (MHLA_DEVICE=%s)\n", env);
    else
        printf(" (the default; MHLA_DEVICE is not set)\n");
    free(infos);
    /* The tuning its plans start from (host/tune/tuning.c, after MHLA_TUNING). */
    mhla_context *ctx = NULL;
    char tuning[1024];
    if ((st = mhla_context_create(NULL, &ctx)) != MHLA_OK)
        return cli_fail(cli_exit_code(st), "info: %s", mhla_last_message());
    st = mhla_context_tuning(ctx, tuning, sizeof tuning);
    if (st != MHLA_OK) {
        rc = cli_fail(cli_exit_code(st), "info: %s", mhla_context_message(ctx));
        mhla_context_destroy(ctx);
        return rc;
    }
    printf("tuning: %s\n", tuning);
    print_tuned(ctx);
    mhla_context_destroy(ctx);
    return opts[0].value ? print_timings() : CLI_OK;
}
