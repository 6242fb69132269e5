/* `mhla`: dispatch to the subcommands, --help and --version; what they share is cli.c. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: mhla <command> [options]\n"
    "\n"
    "Multi-Head Linear Attention (arXiv 2601.07832) on an OpenCL device, on NumPy .npy files.\n"
    "\n"
    "commands:\n"
    "  run          MHLA forward pass: --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
    "  grad         its backward pass: ... --dout DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy\n"
    "  diagnose     rank and entropy of softmax, linear and MHLA attention on your Q, K\n"
    "  init-mixing  write an initial M x M mixing matrix: --blocks ... --init KIND --out MC.npy\n"
    "  info         list the OpenCL platforms and devices, and which one is used\n"
    "  selftest     check every path on a device against the double reference\n"
    "  tune         search the device's tiles and store the fastest (the tuning database)\n"
    "\n"
    "  mhla <command> --help   the command's options\n"
    "  mhla --version          the version\n"
    "\n"
    "exit codes: 0 success; 1 runtime or device failure; 2 usage or input error;\n"
    "            3 run/grad --check found the output outside docs/spec.md's tolerance.\n"
    "Errors are one line on stderr. MHLA_DEVICE picks the default device (see 'mhla info').\n";

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } commands[] = {{"run", cmd_run}, {"grad", cmd_grad}, {"diagnose", cmd_diagnose},
                    {"init-mixing", cmd_init_mixing}, {"info", cmd_info}, {"selftest", cmd_selftest},
                    {"tune", cmd_tune}};

    int rc = -1;
    if (argc < 2) {
        rc = cli_fail(CLI_USAGE,
                      "missing command: run, grad, diagnose, init-mixing, info, selftest or tune (see 'mhla --help')");
    } else if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, stdout);
        rc = CLI_OK;
    } else if (strcmp(argv[1], "--version") == 0) {
        printf("mhla %s (libmhla %s)\n", MHLA_VERSION_STRING, mhla_version_string());
        rc = CLI_OK;
    }
    for (size_t i = 0; rc < 0 && i < sizeof commands / sizeof commands[0]; ++i)
        if (strcmp(argv[1], commands[i].name) == 0)
            rc = commands[i].run(argc - 1, argv + 1);
    if (rc < 0)
        rc = cli_fail(CLI_USAGE,
                      "unknown command '%s' (expected run, grad, diagnose, init-mixing, info, selftest or tune; "
                      "see 'mhla --help')",
                      argv[1]);
    /* What was printed is part of the result: a full disk or a closed pipe is a failure. */
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == CLI_OK)
        rc = cli_fail(CLI_RUNTIME, "cannot write to standard output: %s", strerror(errno));
    return rc;
}
