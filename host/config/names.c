/* Names of the public enums, as the CLI and the benchmark spell them, in both directions. */
#include "config/config.h"

#include <string.h>

typedef struct name_entry {
    const char *name;
    int value;
} name_entry;

static const name_entry init_names[] = {
    {"linear", MHLA_INIT_LINEAR}, {"cos", MHLA_INIT_COS},     {"exp", MHLA_INIT_EXP},
    {"gaussian", MHLA_INIT_GAUSSIAN}, {"local", MHLA_INIT_LOCAL}, {"paper", MHLA_INIT_PAPER},
    {"causal-uniform", MHLA_INIT_CAUSAL_UNIFORM}};
static const name_entry feature_names[] = {{"none", MHLA_FEATURE_NONE},
                                           {"relu", MHLA_FEATURE_RELU},
                                           {"relu-eps", MHLA_FEATURE_RELU_EPS},
                                           {"elu1", MHLA_FEATURE_ELU1}};
static const name_entry normalizer_names[] = {
    {"paper", MHLA_NORMALIZER_PAPER}, {"official", MHLA_NORMALIZER_OFFICIAL}, {"none", MHLA_NORMALIZER_NONE}};
static const name_entry layout_names[] = {{"bnhd", MHLA_LAYOUT_BNHD}, {"bhnd", MHLA_LAYOUT_BHND}};
static const name_entry dtype_names[] = {{"f32", MHLA_DTYPE_F32}, {"f16", MHLA_DTYPE_F16}, {"bf16", MHLA_DTYPE_BF16}};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static mhla_status parse(const name_entry *table, size_t n, const char *what, const char *name, int *out)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: output pointer is NULL", what);
    MHLA_FAIL_IF(st, !name, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: name is NULL", what);
    for (size_t i = 0; i < n; ++i) {
        if (strcmp(table[i].name, name) == 0) {
            *out = table[i].value;
            goto cleanup;
        }
    }
    {
        char choices[256] = "";
        for (size_t i = 0; i < n; ++i) {
            strncat(choices, i ? "|" : "", sizeof choices - strlen(choices) - 1);
            strncat(choices, table[i].name, sizeof choices - strlen(choices) - 1);
        }
        MHLA_FAIL_IF(st, 1, NULL, MHLA_ERR_INVALID_ARGUMENT, "unknown %s '%s' (expected %s)", what, name, choices);
    }
cleanup:
    return st;
}

static const char *name_of(const name_entry *table, size_t n, int value)
{
    for (size_t i = 0; i < n; ++i)
        if (table[i].value == value)
            return table[i].name;
    return NULL;
}

#define ENUM_NAMES(type, table, what, parse_fn, name_fn)                                            \
    mhla_status parse_fn(const char *name, type *out)                                               \
    {                                                                                               \
        int v = 0;                                                                                  \
        mhla_status st = parse(table, COUNT(table), what, name, &v);                                \
        if (st == MHLA_OK)                                                                          \
            *out = (type)v;                                                                         \
        return st;                                                                                  \
    }                                                                                               \
    const char *name_fn(type value) { return name_of(table, COUNT(table), (int)value); }

ENUM_NAMES(mhla_init_kind, init_names, "init kind", mhla_init_kind_parse, mhla_init_kind_name)
ENUM_NAMES(mhla_feature_map, feature_names, "feature map", mhla_feature_map_parse, mhla_feature_map_name)
ENUM_NAMES(mhla_normalizer, normalizer_names, "normalizer", mhla_normalizer_parse, mhla_normalizer_name)
ENUM_NAMES(mhla_layout, layout_names, "layout", mhla_layout_parse, mhla_layout_name)
ENUM_NAMES(mhla_dtype, dtype_names, "dtype", mhla_dtype_parse, mhla_dtype_name)
