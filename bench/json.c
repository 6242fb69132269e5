/* A small recursive-descent JSON reader (RFC 8259; \u escapes kept to the Basic Multilingual Plane)
 * and the two writer helpers mhla-bench needs. */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct parser {
    const char *p, *start;
    char *err;
    size_t err_size;
    int failed;
} parser;

static void fail(parser *ps, const char *what)
{
    if (!ps->failed)
        snprintf(ps->err, ps->err_size, "%s at byte %ld", what, (long)(ps->p - ps->start));
    ps->failed = 1;
}

static void skip_ws(parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ++ps->p;
}

static void put_utf8(char **out, unsigned cp)
{
    char *o = *out;
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    *out = o;
}

/* A string literal at ps->p (after the opening quote has been checked); malloc'd. */
static char *parse_string(parser *ps)
{
    const char *s = ++ps->p;
    size_t n = 0;
    while (s[n] && s[n] != '"')
        n += s[n] == '\\' && s[n + 1] ? 2 : 1;
    if (!s[n]) {
        fail(ps, "unterminated string");
        return NULL;
    }
    char *out = malloc(n + 1), *o = out; /* escapes never grow the text */
    if (!out) {
        fail(ps, "out of memory");
        return NULL;
    }
    while (*ps->p != '"') {
        char c = *ps->p++;
        if ((unsigned char)c < 0x20) {
            fail(ps, "control character in string");
            break;
        }
        if (c != '\\') {
            *o++ = c;
            continue;
        }
        c = *ps->p++;
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            *o++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
        } else if (c == 'u') {
            unsigned cp = 0;
            for (int i = 0; i < 4; ++i) {
                const char h = *ps->p++;
                const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                if (d < 0) {
                    fail(ps, "bad \\u escape");
                    break;
                }
                cp = cp * 16 + (unsigned)d;
            }
            put_utf8(&o, cp);
        } else {
            fail(ps, "bad escape");
        }
        if (ps->failed)
            break;
    }
    *o = '\0';
    if (ps->failed) {
        free(out);
        return NULL;
    }
    ++ps->p; /* closing quote */
    return out;
}

static int parse_value(parser *ps, json_value *v, int depth);

/* Elements of an array or members of an object, up to `close`. */
static int parse_members(parser *ps, json_value *v, int depth, char close)
{
    size_t cap = 0;
    ++ps->p;
    skip_ws(ps);
    if (*ps->p == close) {
        ++ps->p;
        return 0;
    }
    for (;;) {
        if (v->count == cap) {
            cap = cap ? 2 * cap : 8;
            json_value *items = realloc(v->items, cap * sizeof *items);
            if (items)
                v->items = items;
            char **keys = close == '}' ? realloc(v->keys, cap * sizeof *keys) : NULL;
            if (keys)
                v->keys = keys;
            if (!items || (close == '}' && !keys)) {
                fail(ps, "out of memory");
                return -1;
            }
        }
        skip_ws(ps);
        if (close == '}') {
            if (*ps->p != '"') {
                fail(ps, "expected a member name");
                return -1;
            }
            char *key = parse_string(ps);
            if (!key)
                return -1;
            v->keys[v->count] = key;
            skip_ws(ps);
            if (*ps->p != ':') {
                v->items[v->count++] = (json_value){JSON_NULL, 0, NULL, NULL, NULL, 0};
                fail(ps, "expected ':'");
                return -1;
            }
            ++ps->p;
        }
        json_value *item = &v->items[v->count++];
        memset(item, 0, sizeof *item);
        if (parse_value(ps, item, depth + 1))
            return -1;
        skip_ws(ps);
        if (*ps->p == ',') {
            ++ps->p;
            continue;
        }
        if (*ps->p == close) {
            ++ps->p;
            return 0;
        }
        fail(ps, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
        return -1;
    }
}

static int parse_value(parser *ps, json_value *v, int depth)
{
    if (depth > JSON_MAX_DEPTH) {
        fail(ps, "nested too deeply");
        return -1;
    }
    skip_ws(ps);
    const char c = *ps->p;
    if (c == '{' || c == '[') {
        v->type = c == '{' ? JSON_OBJECT : JSON_ARRAY;
        return parse_members(ps, v, depth, c == '{' ? '}' : ']');
    }
    if (c == '"') {
        v->type = JSON_STRING;
        v->string = parse_string(ps);
        return v->string ? 0 : -1;
    }
    static const struct {
        const char *word;
        json_type type;
        double value;
    } words[] = {{"null", JSON_NULL, 0}, {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; ++i)
        if (strncmp(ps->p, words[i].word, strlen(words[i].word)) == 0) {
            ps->p += strlen(words[i].word);
            v->type = words[i].type;
            v->number = words[i].value;
            return 0;
        }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char *end = NULL;
        v->type = JSON_NUMBER;
        v->number = strtod(ps->p, &end);
        ps->p = end;
        return 0;
    }
    fail(ps, c ? "unexpected character" : "unexpected end of input");
    return -1;
}

static void free_members(json_value *v)
{
    for (size_t i = 0; i < v->count; ++i) {
        free_members(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
}

json_value *json_parse(const char *text, char *err, size_t err_size)
{
    parser ps = {text, text, err, err_size, 0};
    json_value *v = calloc(1, sizeof *v);
    if (!v) {
        snprintf(err, err_size, "out of memory");
        return NULL;
    }
    if (parse_value(&ps, v, 0) == 0) {
        skip_ws(&ps);
        if (*ps.p)
            fail(&ps, "trailing characters");
    }
    if (ps.failed) {
        json_free(v);
        return NULL;
    }
    return v;
}

void json_free(json_value *v)
{
    if (!v)
        return;
    free_members(v);
    free(v);
}

const json_value *json_get(const json_value *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < obj->count; ++i)
        if (strcmp(obj->keys[i], key) == 0)
            return &obj->items[i];
    return NULL;
}

double json_number(const json_value *v, double fallback)
{
    return v && v->type == JSON_NUMBER ? v->number : fallback;
}

const char *json_string(const json_value *v, const char *fallback)
{
    return v && v->type == JSON_STRING ? v->string : fallback;
}

void json_write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; ++s) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c == '\t')
            fputs("\\t", f);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void json_write_number(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.12g", x);
    else
        fputs("null", f);
}
