/* libFuzzer harness: the CLI's option parsing (cli/args.c): argv splitting into options, and the
 * value parsers of --grid and --blocks (args_dims), --init KIND[:PARAM] (args_init), integers
 * and numbers. Input: a first byte, then NUL-separated strings. An even first byte hands the
 * first string straight to the parser it selects; an odd one parses all strings as the argv of
 * `mhla run` and then each value given. Every parser must accept a value it can represent, within
 * its documented range, or refuse it with a message; here the message goes to a buffer. */
#include "args.h"
#include "cli.h"

#include <float.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char last_error[1024];

/* The CLI's reporting (cli/main.c) without the output: formats the message, as the tool does. */
int cli_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    (void)cmd;
    return CLI_USAGE;
}

static void check_rc(int rc)
{
    if (rc != 0 && (rc != CLI_USAGE || !last_error[0]))
        abort();
}

static void parse_value(int which, const cli_option *opt)
{
    int64_t dims[3], i64;
    int ndim = 0, has_param = 0, rc;
    mhla_init_kind kind;
    double param = 0.0;
    float f;
    char text[96];
    last_error[0] = '\0';
    switch (which) {
    case 0: /* --grid, --blocks */
        rc = args_dims("run", opt, dims, &ndim);
        check_rc(rc);
        if (rc == 0) {
            if (ndim < 1 || ndim > 3 || dims[0] < 1 || dims[1] < 1 || dims[2] < 1 ||
                (__int128)dims[0] * dims[1] * dims[2] > INT32_MAX)
                abort();
            args_dims_string(dims, ndim, text, sizeof text);
        }
        break;
    case 1: /* --init */
        rc = args_init("run", opt, &kind, &param, &has_param);
        check_rc(rc);
        if (rc == 0 && mhla_init_kind_name(kind) == NULL)
            abort();
        break;
    case 2: /* --heads, --seed: integers */
        rc = args_int("run", opt, 1, 4096, &i64);
        check_rc(rc);
        if (rc == 0 && (i64 < 1 || i64 > 4096))
            abort();
        break;
    default: /* --eps, --scale: numbers */
        rc = args_float("run", opt, 0.0, &f);
        check_rc(rc);
        if (rc == 0 && !(f >= 0.0f && f <= FLT_MAX))
            abort();
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    /* The strings, each NUL-terminated in a copy of its own (ASan sees reads past any of them). */
    char *argv[64];
    int argc = 0;
    argv[argc++] = strdup("run");
    for (size_t pos = 1; pos <= size && argc < 63;) {
        const uint8_t *end = memchr(data + pos, '\0', size - pos);
        const size_t len = end ? (size_t)(end - (data + pos)) : size - pos;
        char *s = malloc(len + 1);
        if (!s)
            abort();
        memcpy(s, data + pos, len);
        s[len] = '\0';
        argv[argc++] = s;
        pos += len + 1;
    }
    argv[argc] = NULL;

    if (data[0] % 2 == 0) {
        if (argc > 1) {
            cli_option opt = {"--grid", "N|HsxWs|TxHsxWs", argv[1]};
            parse_value((data[0] >> 1) % 4, &opt);
        }
    } else {
        cli_option opts[] = {
            {"--grid", "N|HsxWs|TxHsxWs", NULL}, {"--blocks", "N|HsxWs|TxHsxWs", NULL},
            {"--init", "KIND[:PARAM]", NULL},   {"--heads", "H", NULL},
            {"--eps", "X", NULL},               {"--causal", NULL, NULL},
        };
        static const int parser[] = {0, 0, 1, 2, 3, -1};
        int help = 0;
        last_error[0] = '\0';
        const int rc = args_parse("run", "help\n", opts, sizeof opts / sizeof opts[0], argc, argv, &help);
        check_rc(rc);
        for (size_t i = 0; rc == 0 && !help && i < sizeof opts / sizeof opts[0]; ++i)
            if (opts[i].value && parser[i] >= 0)
                parse_value(parser[i], &opts[i]);
    }
    for (int i = 0; i < argc; ++i)
        free(argv[i]);
    return 0;
}
