/* `mhla info`: every OpenCL platform and device with the limits that matter to MHLA, and which
 * device `mhla run` uses (the default, or what MHLA_DEVICE selects). */
#include "args.h"
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>

static const char help[] =
    "usage: mhla info\n"
    "\n"
    "Lists every OpenCL platform and device in the order device specs index them, with their\n"
    "limits, and marks the device `mhla run` uses: the first GPU, else the first device, unless\n"
    "MHLA_DEVICE (or run --device) selects another by 'P:D', index or name substring.\n"
    "Exits 1 when there is no OpenCL device or MHLA_DEVICE matches none.\n";

static double mib(uint64_t bytes) { return (double)bytes / (1024.0 * 1024.0); }

int cmd_info(int argc, char **argv)
{
    const char *cmd = "info";
    int help_shown = 0, rc;
    mhla_device_info *infos = NULL;
    size_t count = 0, selected = 0;

    if ((rc = args_parse(cmd, help, NULL, 0, argc, argv, &help_shown)) != 0 || help_shown)
        return rc;
    mhla_status st = mhla_device_list(NULL, 0, &count);
    if (st != MHLA_OK)
        return cli_fail(cli_exit_code(st), "info: %s", mhla_last_message());
    if (count == 0)
        return cli_fail(CLI_RUNTIME, "info: no OpenCL device found: no platform is installed or none has a device "
                                     "(on Debian: apt-get install pocl-opencl-icd for the CPU device)");
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
    return CLI_OK;
}
