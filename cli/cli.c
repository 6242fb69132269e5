/* What every `mhla` subcommand shares (cli.h): the one-line error report, the exit codes of the
 * library's and the .npy module's statuses, the clock, and the guard that removes a temporary
 * output when a signal ends the process. */
#include "cli.h"

#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
