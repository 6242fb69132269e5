/* The `mhla` command: exit codes, the one-line error report and the signal guard (cli.c), the
 * mixing initializer (cmd_init_mixing.c), and the subcommands' entry points (main.c calls them). */
#ifndef MHLA_CLI_H
#define MHLA_CLI_H

#include <signal.h>
#include "npy.h"

#include <mhla.h>

/* Exit codes (README "The command line", `mhla --help`). */
enum {
    CLI_OK = 0,
    CLI_RUNTIME = 1,     /* device, driver, memory or output write failure */
    CLI_USAGE = 2,       /* bad option or value, bad or inconsistent input file */
    CLI_CHECK_FAILED = 3 /* --check: the output is further from the reference than allowed
                            (docs/spec.md "Accuracy the tests hold") */
};

/* Prints "mhla: <message>" as one line on stderr (line breaks inside the message, e.g. a kernel
 * build log, become " | ") and returns `code`. */
int cli_fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* cli_fail(CLI_USAGE, ...) with " (see 'mhla <cmd> --help')" appended. */
int cli_usage(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The exit code of a failed library call: validation statuses are usage errors (2), the rest
 * (device, build, memory, OpenCL) runtime failures (1). */
int cli_exit_code(mhla_status status);

/* The exit code of a failed .npy read or write: a bad file or an uncreatable output is a usage
 * error (2), a failed write or allocation a runtime failure (1). */
int cli_npy_exit_code(npy_status status);

/* Wall-clock milliseconds (CLOCK_MONOTONIC), for the timings the tool prints. */
double cli_now_ms(void);

/* Adds a temporary output file (up to 8) to those removed if SIGINT, SIGTERM or SIGHUP ends the
 * process; NULL clears them all. */
void cli_guard_temp(const char *path);
/* Hold SIGINT, SIGTERM and SIGHUP from before a temporary is created until cli_guard_temp() has it:
 * one arriving in between would leave the file behind. */
void cli_guard_hold(sigset_t *old);
void cli_guard_release(const sigset_t *old);

/* The M x M matrix of an initializer for a block grid (bt, bh, bw), malloc'd into *out; a bad grid
 * is reported after `label` (e.g. "--blocks 4x4"). Returns 0, CLI_USAGE or CLI_RUNTIME. */
int cli_mixing_init(const char *cmd, const char *label, mhla_init_kind kind, const double *param,
                    const int64_t blocks[3], float **out);
/* The M x M_kv matrix of cross-attention (kv_blocks NULL: cli_mixing_init()'s). */
int cli_mixing_init_cross(const char *cmd, const char *label, mhla_init_kind kind, const double *param,
                          const int64_t blocks[3], const int64_t kv_blocks[3], float **out);

int cmd_run(int argc, char **argv);
int cmd_grad(int argc, char **argv);
int cmd_diagnose(int argc, char **argv);
int cmd_init_mixing(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_selftest(int argc, char **argv);
int cmd_tune(int argc, char **argv);

#endif /* MHLA_CLI_H */
