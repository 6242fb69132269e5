/* Command-line parsing: see args.h. */
#include "args.h"

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int args_parse(const char *cmd, const char *help, cli_option *opts, size_t count, int argc, char **argv,
               int *help_shown)
{
    *help_shown = 0;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(help, stdout);
            *help_shown = 1;
            return 0;
        }
    }
    for (int i = 1; i < argc; ++i) {
        const char *arg = argv[i];
        if (arg[0] != '-' || arg[1] == '\0')
            return cli_usage(cmd, "%s: unexpected argument '%s' (options start with --)", cmd, arg);
        const char *eq = strchr(arg, '=');
        const size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        cli_option *opt = NULL;
        for (size_t j = 0; j < count && !opt; ++j)
            if (opts[j].name && strlen(opts[j].name) == name_len && strncmp(opts[j].name, arg, name_len) == 0)
                opt = &opts[j];
        if (!opt)
            return cli_usage(cmd, "%s: unknown option '%.*s'", cmd, (int)name_len, arg);
        if (opt->value)
            return cli_usage(cmd, "%s: given twice", opt->name);
        if (!opt->metavar) {
            if (eq)
                return cli_usage(cmd, "%s: is a flag and takes no value, got '%s'", opt->name, eq + 1);
            opt->value = opt->name;
            continue;
        }
        const char *value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!value)
            return cli_usage(cmd, "%s: missing value %s", opt->name, opt->metavar);
        if (!*value)
            return cli_usage(cmd, "%s: empty value (expected %s)", opt->name, opt->metavar);
        opt->value = value;
    }
    return 0;
}

/* strtoll over the whole text, decimal digits with an optional sign only (no spaces, no hex). */
static int whole_int(const char *text, int64_t *out)
{
    const char *p = text + (*text == '-' || *text == '+');
    if (!isdigit((unsigned char)*p))
        return 0;
    for (const char *c = p; *c; ++c)
        if (!isdigit((unsigned char)*c))
            return 0;
    errno = 0;
    const long long v = strtoll(text, NULL, 10);
    if (errno == ERANGE)
        return 0;
    *out = v;
    return 1;
}

int args_int(const char *cmd, const cli_option *opt, int64_t min, int64_t max, int64_t *out)
{
    int64_t v;
    if (!whole_int(opt->value, &v))
        return cli_usage(cmd, "%s %s: not an integer", opt->name, opt->value);
    if (v < min || v > max)
        return cli_usage(cmd, "%s %s: must be between %lld and %lld", opt->name, opt->value, (long long)min,
                         (long long)max);
    *out = v;
    return 0;
}

int args_float(const char *cmd, const cli_option *opt, double min, float *out)
{
    char *end = NULL;
    errno = 0;
    const double v = strtod(opt->value, &end);
    if (end == opt->value || *end != '\0' || isspace((unsigned char)opt->value[0]))
        return cli_usage(cmd, "%s %s: not a number", opt->name, opt->value);
    if (!isfinite(v) || fabs(v) > FLT_MAX)
        return cli_usage(cmd, "%s %s: must be finite and within the float range", opt->name, opt->value);
    if (v < min)
        return cli_usage(cmd, "%s %s: must be >= %g", opt->name, opt->value, min);
    *out = (float)v;
    return 0;
}

int args_dims(const char *cmd, const cli_option *opt, int64_t out[3], int *ndim)
{
    int64_t ext[3];
    int n = 0;
    const char *p = opt->value;
    for (;;) {
        const char *x = p;
        while (*x && *x != 'x' && *x != 'X')
            ++x;
        if (n == 3)
            return cli_usage(cmd, "%s %s: at most 3 extents (N, HxW or TxHxW)", opt->name, opt->value);
        char part[32];
        const size_t len = (size_t)(x - p);
        int64_t v = 0;
        if (len == 0 || len >= sizeof part)
            return cli_usage(cmd, "%s %s: expected N, HxW or TxHxW with positive integers", opt->name, opt->value);
        memcpy(part, p, len);
        part[len] = '\0';
        if (!whole_int(part, &v))
            return cli_usage(cmd, "%s %s: '%s' is not an integer (expected N, HxW or TxHxW)", opt->name, opt->value,
                             part);
        if (v < 1 || v > INT32_MAX)
            return cli_usage(cmd, "%s %s: extent %s must be between 1 and %d", opt->name, opt->value, part,
                             INT32_MAX);
        ext[n++] = v;
        if (!*x)
            break;
        p = x + 1;
    }
    int64_t product = 1;
    for (int i = 0; i < n; ++i) {
        product *= ext[i]; /* each factor <= 2^31 and checked below before the next: no overflow */
        if (product > INT32_MAX)
            return cli_usage(cmd, "%s %s: more than %d elements in all", opt->name, opt->value, INT32_MAX);
    }
    out[0] = n == 3 ? ext[0] : n == 1 ? ext[0] : 1;
    out[1] = n == 3 ? ext[1] : n == 2 ? ext[0] : 1;
    out[2] = n == 3 ? ext[2] : n == 2 ? ext[1] : 1;
    *ndim = n;
    return 0;
}

const char *args_dims_string(const int64_t dims[3], int ndim, char *buf, size_t size)
{
    if (ndim == 1)
        snprintf(buf, size, "%lld", (long long)dims[0]);
    else if (ndim == 2)
        snprintf(buf, size, "%lldx%lld", (long long)dims[1], (long long)dims[2]);
    else
        snprintf(buf, size, "%lldx%lldx%lld", (long long)dims[0], (long long)dims[1], (long long)dims[2]);
    return buf;
}

int args_init(const char *cmd, const cli_option *opt, mhla_init_kind *kind, double *param, int *has_param)
{
    char name[32];
    const char *colon = strchr(opt->value, ':');
    const size_t len = colon ? (size_t)(colon - opt->value) : strlen(opt->value);
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), opt->value);
    if (len >= sizeof name || mhla_init_kind_parse(name, kind) != MHLA_OK)
        return cli_usage(cmd, "%s %s: unknown init kind '%.*s' (expected linear, cos, exp[:SIGMA], gaussian, "
                              "local[:THRES], paper or causal-uniform)",
                         opt->name, opt->value, (int)len, opt->value);
    *has_param = colon != NULL;
    if (!colon)
        return 0;
    if (*kind != MHLA_INIT_EXP && *kind != MHLA_INIT_LOCAL)
        return cli_usage(cmd, "%s %s: %s takes no parameter (only exp:SIGMA and local:THRES do)", opt->name,
                         opt->value, name);
    char *end = NULL;
    errno = 0;
    *param = strtod(colon + 1, &end);
    if (end == colon + 1 || *end != '\0' || isspace((unsigned char)colon[1]) || errno == ERANGE)
        return cli_usage(cmd, "%s %s: parameter '%s' is not a number", opt->name, opt->value, colon + 1);
    /* The library validates the parameter; a 1-block grid is the cheapest way to ask it. */
    float one;
    if (mhla_mixing_init(*kind, param, 1, 1, 1, &one, 1) != MHLA_OK)
        return cli_usage(cmd, "%s %s: %s", opt->name, opt->value, mhla_last_message());
    return 0;
}
