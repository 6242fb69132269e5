/* Command-line parsing shared by the subcommands: the option table, and the value parsers
 * (integers, numbers, "N", "HsxWs" and "TxHsxWs" grids, "KIND[:PARAM]"). Each parser reports a
 * bad value itself, naming the option and the value, and returns CLI_USAGE; 0 on success. */
#ifndef MHLA_CLI_ARGS_H
#define MHLA_CLI_ARGS_H

#include <mhla.h>

#include <stddef.h>
#include <stdint.h>

typedef struct cli_option {
    const char *name;    /* "--grid" */
    const char *metavar; /* "N|HsxWs|TxHsxWs" for an option with a value; NULL for a flag */
    const char *value;   /* after parsing: the value (a flag: its name), or NULL when absent */
} cli_option;

/* Parses argv[1..argc) ("--name value", "--name=value", flags) into `opts` for subcommand `cmd`
 * (argv[0]). An unknown option, a positional argument, a missing or empty value, a value given to
 * a flag and an option given twice are usage errors. "-h"/"--help" anywhere prints `help` to
 * stdout and sets *help_shown. Returns 0 or CLI_USAGE. */
int args_parse(const char *cmd, const char *help, cli_option *opts, size_t count, int argc, char **argv,
               int *help_shown);

/* An integer in [min, max]. */
int args_int(const char *cmd, const cli_option *opt, int64_t min, int64_t max, int64_t *out);

/* A finite number that fits a float, >= min. */
int args_float(const char *cmd, const cli_option *opt, double min, float *out);

/* A token or block grid: "N" -> (N,1,1), "HsxWs" -> (1,Hs,Ws), "TxHsxWs" -> (T,Hs,Ws); every
 * extent >= 1 and their product at most INT32_MAX. *ndim receives 1, 2 or 3. */
int args_dims(const char *cmd, const cli_option *opt, int64_t out[3], int *ndim);

/* "KIND" or "KIND:PARAM" for mhla_mixing_init() (PARAM only for exp and local), validated.
 * *has_param tells whether PARAM was given. */
int args_init(const char *cmd, const cli_option *opt, mhla_init_kind *kind, double *param, int *has_param);

/* "8", "8x8" or "4x8x8" for a grid as args_dims() returned it. */
const char *args_dims_string(const int64_t dims[3], int ndim, char *buf, size_t size);

#endif /* MHLA_CLI_ARGS_H */
