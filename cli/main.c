/* `mhla`: dispatch to the subcommands, --help and --version, and the error reporting they share. */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    "            3 run/grad --check found the output outside SPEC.md's tolerance.\n"
    "Errors are one line on stderr. MHLA_DEVICE picks the default device (see 'mhla info').\n";

static void vreport(const char *fmt, va_list ap, const char *suffix)
{
    va_list copy;
    va_copy(copy, ap);
    const int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!msg) {
        fputs("mhla: out of host memory reporting an error\n", stderr);
        return;
    }
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    /* One line, whatever the message holds: runs of line breaks become " | ", and trailing
     * white space goes. */
    size_t end = (size_t)n;
    while (end > 0 && (msg[end - 1] == '\n' || msg[end - 1] == '\r' || msg[end - 1] == ' ' || msg[end - 1] == '\t'))
        --end;
    fputs("mhla: ", stderr);
    for (size_t i = 0; i < end; ++i) {
        if (msg[i] == '\n' || msg[i] == '\r') {
            while (i + 1 < end && (msg[i + 1] == '\n' || msg[i + 1] == '\r'))
                ++i;
            fputs(" | ", stderr);
        } else {
            fputc(msg[i] == '\t' || msg[i] == '\f' || msg[i] == '\v' ? ' ' : msg[i], stderr);
        }
    }
    fputs(suffix, stderr);
    fputc('\n', stderr);
    free(msg);
}

int cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap, "");
    va_end(ap);
    return code;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    char hint[64];
    snprintf(hint, sizeof hint, " (see 'mhla %s --help')", cmd);
    va_list ap;
    va_start(ap, fmt);
    vreport(fmt, ap, hint);
    va_end(ap);
    return CLI_USAGE;
}

double cli_now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int cli_exit_code(mhla_status status)
{
    switch (status) {
    case MHLA_OK:
        return CLI_OK;
    case MHLA_ERR_INVALID_ARGUMENT:
    case MHLA_ERR_INVALID_SHAPE:
    case MHLA_ERR_BUFFER_TOO_SMALL:
    case MHLA_ERR_UNSUPPORTED:
    case MHLA_ERR_SEQUENCE_TOO_LONG:
        return CLI_USAGE;
    default:
        return CLI_RUNTIME;
    }
}

int cli_npy_exit_code(npy_status status)
{
    switch (status) {
    case NPY_OK:
        return CLI_OK;
    case NPY_ERR_INPUT:
    case NPY_ERR_CREATE:
        return CLI_USAGE;
    default:
        return CLI_RUNTIME;
    }
}

/* The signal handler may only touch these and call async-signal-safe functions. */
#define GUARD_MAX 8 /* mhla grad writes up to five outputs */
static char guarded_temp[GUARD_MAX][4096];
static volatile sig_atomic_t guard_count;

static void remove_temp_and_die(int sig)
{
    for (sig_atomic_t i = 0; i < guard_count; ++i)
        unlink(guarded_temp[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_guard_temp(const char *path)
{
    static int installed;
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = remove_temp_and_die;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        installed = 1;
    }
    if (!path) {
        guard_count = 0;
        return;
    }
    const sig_atomic_t n = guard_count;
    if (n >= GUARD_MAX || strlen(path) >= sizeof guarded_temp[0])
        return;
    memcpy(guarded_temp[n], path, strlen(path) + 1);
    atomic_signal_fence(memory_order_seq_cst); /* the handler never sees a half-copied path */
    guard_count = n + 1;
}

void cli_guard_hold(sigset_t *old)
{
    sigset_t held;
    sigemptyset(&held);
    sigaddset(&held, SIGINT);
    sigaddset(&held, SIGTERM);
    sigaddset(&held, SIGHUP);
    sigprocmask(SIG_BLOCK, &held, old);
}

void cli_guard_release(const sigset_t *old) { sigprocmask(SIG_SETMASK, old, NULL); }

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } commands[] = {{"run", cmd_run}, {"grad", cmd_grad}, {"diagnose", cmd_diagnose}, {"init-mixing", cmd_init_mixing}, {"info", cmd_info}, {"selftest", cmd_selftest}, {"tune", cmd_tune}};

    int rc = -1;
    if (argc < 2) {
        rc = cli_fail(CLI_USAGE, "missing command: run, grad, diagnose, init-mixing, info, selftest or tune (see 'mhla --help')");
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
        rc = cli_fail(CLI_USAGE, "unknown command '%s' (expected run, grad, diagnose, init-mixing, info, selftest or tune; see 'mhla --help')",
                      argv[1]);
    /* What was printed is part of the result: a full disk or a closed pipe is a failure. */
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == CLI_OK)
        rc = cli_fail(CLI_RUNTIME, "cannot write to standard output: %s", strerror(errno));
    return rc;
}
