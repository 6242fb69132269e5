/* `mhla selftest`: qualify a device nobody has tried, one line per path of the library, each
 * checked against the double-precision reference (mhla_selftest()). */
#include "args.h"
#include "cli.h"

#include <mhla_reference.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: mhla selftest [--device SPEC] [--quick] [--tuning SPEC]\n"
    "\n"
    "Runs every path of libmhla on the device at small shapes and compares each with the\n"
    "double-precision reference under docs/spec.md's tolerances: the forward pass on 1D, 2D and 3D\n"
    "grids with every normalizer and feature map, both layouts, odd head dimensions, M = 1;\n"
    "causal chunks (past the prefix's first tile of 32 chunks), packed varlen batches, the decoder\n"
    "step by step and after a prefill; f16 and bf16 storage on each; the softmax baseline. Prints one\n"
    "line per path, 'PASS <path> max_rel_err <x>' or 'FAIL <path> <why>', then\n"
    "'selftest: N passed, M failed'.\n"
    "Exits 0 only if every path passed (1 otherwise). The library's own buffers start as NaN\n"
    "(MHLA_POISON_WORKSPACE=1 unless set otherwise), so that a kernel reading memory nothing wrote\n"
    "fails whatever the device's fresh memory holds. Run it first on a new device (Adreno, Mali,\n"
    "Arc, ...) and send the whole output: docs/devices.md says where.\n"
    "\n"
    "  --device SPEC   the device, as MHLA_DEVICE ('P:D', an index, or a name substring)\n"
    "  --quick         about half the paths: the default feature map on 2D and 3D grids, f32 softmax\n"
    "  --tuning SPEC   tiles for the run, as MHLA_TUNING: e.g. 'row=gpu' runs the GPU row's tiled\n"
    "                  kernels on any device, 'row=cpu' the CPU row's\n";

static void print_result(const mhla_selftest_result *r, void *user)
{
    (void)user;
    if (r->passed)
        printf("PASS %s max_rel_err %.3g\n", r->path, r->max_rel_err);
    else if (r->status == MHLA_OK)
        printf("FAIL %s max_rel_err %.3g (tolerance %.3g)\n", r->path, r->max_rel_err, r->tolerance);
    else
        printf("FAIL %s %s: %s\n", r->path, mhla_status_name(r->status), r->message);
    fflush(stdout); /* a long run shows its progress */
}

int cmd_selftest(int argc, char **argv)
{
    const char *cmd = "selftest";
    int help_shown = 0, rc;
    enum { O_DEVICE, O_QUICK, O_TUNING, O_COUNT };
    cli_option o[O_COUNT] = {
        [O_DEVICE] = {"--device", "SPEC", NULL},
        [O_QUICK] = {"--quick", NULL, NULL},
        [O_TUNING] = {"--tuning", "SPEC", NULL},
    };
    if ((rc = args_parse(cmd, help, o, O_COUNT, argc, argv, &help_shown)) != 0 || help_shown)
        return rc;
    /* The library's own buffers start as NaN (unless the environment says otherwise): a kernel that
     * reads an element nothing wrote then fails here whatever the device's fresh memory holds. */
    setenv("MHLA_POISON_WORKSPACE", "1", 0);
    mhla_context *ctx = NULL;
    mhla_status st = mhla_context_create(o[O_DEVICE].value, &ctx);
    if (st != MHLA_OK)
        return o[O_DEVICE].value ? cli_fail(cli_exit_code(st), "--device %s: %s", o[O_DEVICE].value, mhla_last_message())
                                 : cli_fail(cli_exit_code(st), "selftest: %s", mhla_last_message());
    if (o[O_TUNING].value && (st = mhla_context_set_tuning(ctx, o[O_TUNING].value)) != MHLA_OK) {
        rc = cli_fail(CLI_USAGE, "--tuning %s: %s", o[O_TUNING].value, mhla_context_message(ctx));
        mhla_context_destroy(ctx);
        return rc;
    }
    char tuning[1024];
    if ((st = mhla_context_tuning(ctx, tuning, sizeof tuning)) != MHLA_OK) {
        rc = cli_fail(cli_exit_code(st), "selftest: %s", mhla_context_message(ctx));
        mhla_context_destroy(ctx);
        return rc;
    }
    mhla_device_info info;
    size_t index = 0, count = 0;
    memset(&info, 0, sizeof info);
    if (mhla_device_selected(o[O_DEVICE].value, &index) == MHLA_OK && mhla_device_list(NULL, 0, &count) == MHLA_OK &&
        index < count) {
        mhla_device_info *all = calloc(count, sizeof *all);
        if (all && mhla_device_list(all, count, &count) == MHLA_OK)
            info = all[index];
        free(all);
    }
    printf("selftest: libmhla %s on %s\n", mhla_version_string(), mhla_context_device_name(ctx));
    printf("device: %s; %s; driver %s; %s; float width %d\n", info.vendor, info.platform_version,
           info.driver_version, info.opencl_c_version, info.float_width);
    printf("tuning: %s\n", tuning);
    fflush(stdout);
    size_t passed = 0, failed = 0;
    const double t0 = cli_now_ms();
    st = mhla_selftest(ctx, o[O_QUICK].value != NULL, print_result, NULL, &passed, &failed);
    if (st != MHLA_OK) {
        rc = cli_fail(cli_exit_code(st), "selftest: %s", mhla_context_message(ctx));
        mhla_context_destroy(ctx);
        return rc;
    }
    printf("time %.1f s\n", (cli_now_ms() - t0) * 1e-3);
    printf("selftest: %zu passed, %zu failed\n", passed, failed);
    rc = failed ? cli_fail(CLI_RUNTIME, "selftest: %zu of %zu paths failed on %s (the FAIL lines above)", failed,
                           passed + failed, mhla_context_device_name(ctx))
                : CLI_OK;
    mhla_context_destroy(ctx);
    return rc;
}
