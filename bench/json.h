/* A small JSON reader and writer helpers for mhla-bench's --json and --compare (no dependency). */
#ifndef MHLA_BENCH_JSON_H
#define MHLA_BENCH_JSON_H

#include <stddef.h>
#include <stdio.h>

typedef enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value {
    json_type type;
    double number; /* JSON_NUMBER; JSON_BOOL as 0/1 */
    char *string;  /* JSON_STRING */
    struct json_value *items; /* JSON_ARRAY elements, JSON_OBJECT member values */
    char **keys;              /* JSON_OBJECT member names, parallel to items */
    size_t count;
} json_value;

/* Parses a whole document. Returns NULL with the reason (and byte offset) in err. */
json_value *json_parse(const char *text, char *err, size_t err_size);
void json_free(json_value *v);
/* Member `key` of an object, or NULL (also for non-objects and NULL). */
const json_value *json_get(const json_value *obj, const char *key);
/* The number, or `fallback` for anything else (null included). */
double json_number(const json_value *v, double fallback);
/* The string, or `fallback`. */
const char *json_string(const json_value *v, const char *fallback);

/* Writes s as a JSON string literal, escaped. */
void json_write_string(FILE *f, const char *s);
/* Writes x with 12 significant digits, or null when it is not finite. */
void json_write_number(FILE *f, double x);

#endif /* MHLA_BENCH_JSON_H */
