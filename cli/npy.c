/* The .npy reader and writer: see npy.h. The format is NumPy's NEP 1
 * (numpy/lib/format.py): magic "\x93NUMPY", version, little-endian header length (2 bytes in
 * 1.0, 4 in 2.0/3.0), an ASCII (3.0: UTF-8) Python dict literal, then the raw data. */
#include "npy.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64                 /* NumPy's ARRAY_ALIGN since 1.14 */
#define NPY_MAX_HEADER (1u << 20)    /* NumPy itself refuses headers over 10 kB by default */

static npy_status fail(npy_status st, char *err, size_t err_size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static npy_status fail(npy_status st, char *err, size_t err_size, const char *fmt, ...)
{
    if (err && err_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Each dtype's NumPy name, type code (after the byte-order character) and size. */
static const struct {
    const char *name, *code;
    size_t size;
} dtypes[] = {
    [NPY_F32] = {"float32", "f4", 4},
    [NPY_F16] = {"float16", "f2", 2},
    [NPY_I32] = {"int32", "i4", 4},
    [NPY_I64] = {"int64", "i8", 8},
};
#define NPY_DTYPE_COUNT (sizeof dtypes / sizeof dtypes[0])

static int dtype_known(npy_dtype dtype) { return (unsigned)dtype < NPY_DTYPE_COUNT; }

const char *npy_dtype_name(npy_dtype dtype) { return dtype_known(dtype) ? dtypes[dtype].name : "unknown"; }

size_t npy_dtype_size(npy_dtype dtype) { return dtype_known(dtype) ? dtypes[dtype].size : 0; }

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* Reverses the bytes of each of `count` elements of `size` bytes in place. */
static void swap_bytes(void *data, size_t count, size_t size)
{
    unsigned char *p = data;
    for (size_t i = 0; i < count; ++i, p += size)
        for (size_t a = 0, b = size - 1; a < b; ++a, --b) {
            const unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

const char *npy_shape_string(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i <= ndim && used < size; ++i) {
        const int w = i == ndim ? snprintf(buf + used, size - used, "%s", ndim == 1 ? ",)" : ")")
                                : snprintf(buf + used, size - used, "%s%lld", i ? ", " : "(", (long long)shape[i]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (ndim == 0)
        snprintf(buf, size, "()");
    return buf;
}

void npy_free(npy_array *a)
{
    if (!a)
        return;
    free(a->data);
    a->data = NULL;
}

npy_status npy_to_int32(const npy_array *a, int32_t **out, char *err, size_t err_size)
{
    if (!out)
        return fail(NPY_ERR_ARGUMENT, err, err_size, "npy_to_int32: out is NULL");
    *out = NULL;
    if (!a || (!a->data && a->count))
        return fail(NPY_ERR_ARGUMENT, err, err_size, "npy_to_int32: no array");
    if (a->dtype != NPY_I32 && a->dtype != NPY_I64)
        return fail(NPY_ERR_INPUT, err, err_size, "dtype %s, expected int32 or int64", npy_dtype_name(a->dtype));
    int32_t *v = malloc(a->count ? a->count * sizeof *v : 1);
    if (!v)
        return fail(NPY_ERR_NO_MEMORY, err, err_size, "out of host memory for %zu int32 values", a->count);
    if (a->dtype == NPY_I32) {
        if (a->count)
            memcpy(v, a->data, a->count * sizeof *v);
    } else {
        const int64_t *w = a->data;
        for (size_t i = 0; i < a->count; ++i) {
            if (w[i] < INT32_MIN || w[i] > INT32_MAX) {
                free(v);
                return fail(NPY_ERR_INPUT, err, err_size, "int64 element %zu = %lld is outside the int32 range %d..%d",
                            i, (long long)w[i], INT32_MIN, INT32_MAX);
            }
            v[i] = (int32_t)w[i];
        }
    }
    *out = v;
    return NPY_OK;
}

/* ---- reading ----------------------------------------------------------------------------- */

/* Reads exactly n bytes; returns 0 on success, else an errno value (0 read -> EIO "short"). */
static int read_full(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n > (size_t)1 << 30 ? (size_t)1 << 30 : n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return errno;
        if (r == 0)
            return EIO; /* the file shrank since fstat */
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The header dict, as far as parsed. */
typedef struct header_fields {
    char descr[32];
    int fortran_order;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
    int have_descr, have_fortran, have_shape;
} header_fields;

typedef struct parser {
    const char *s;
    size_t len, pos;
    char *err;
    size_t err_size;
} parser;

static void skip_space(parser *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                               p->s[p->pos] == '\r'))
        ++p->pos;
}

/* "malformed header at byte 12 (expected ...): {'descr' ..." with the header quoted, cut short. */
static npy_status malformed(parser *p, const char *expected)
{
    char quote[61];
    size_t n = 0;
    for (size_t i = 0; i < p->len && n < sizeof quote - 1; ++i)
        quote[n++] = isprint((unsigned char)p->s[i]) ? p->s[i] : ' ';
    quote[n] = '\0';
    return fail(NPY_ERR_INPUT, p->err, p->err_size, "malformed .npy header at byte %zu (expected %s): %s%s", p->pos,
                expected, quote, p->len > n ? "..." : "");
}

static int accept_char(parser *p, char c)
{
    skip_space(p);
    if (p->pos < p->len && p->s[p->pos] == c) {
        ++p->pos;
        return 1;
    }
    return 0;
}

/* A Python string literal in ' or " quotes, without escapes (NumPy never writes any). */
static npy_status parse_string(parser *p, char *out, size_t size, const char *what)
{
    skip_space(p);
    if (p->pos >= p->len || (p->s[p->pos] != '\'' && p->s[p->pos] != '"'))
        return malformed(p, what);
    const char q = p->s[p->pos++];
    size_t n = 0;
    while (p->pos < p->len && p->s[p->pos] != q) {
        if (p->s[p->pos] == '\\' || n + 1 >= size)
            return malformed(p, what);
        out[n++] = p->s[p->pos++];
    }
    if (p->pos >= p->len)
        return malformed(p, "a closing quote");
    ++p->pos;
    out[n] = '\0';
    return NPY_OK;
}

/* A non-negative Python int literal, with the 'L' suffix of files written by Python 2. */
static npy_status parse_extent(parser *p, int64_t *out)
{
    skip_space(p);
    const size_t start = p->pos;
    int64_t v = 0;
    while (p->pos < p->len && isdigit((unsigned char)p->s[p->pos])) {
        const int d = p->s[p->pos] - '0';
        if (v > (INT64_MAX - d) / 10)
            return fail(NPY_ERR_INPUT, p->err, p->err_size, "shape extent at byte %zu exceeds %lld", start,
                        (long long)INT64_MAX);
        v = v * 10 + d;
        ++p->pos;
    }
    if (p->pos == start)
        return malformed(p, "a non-negative integer in 'shape'");
    if (p->pos < p->len && p->s[p->pos] == 'L')
        ++p->pos;
    *out = v;
    return NPY_OK;
}

static npy_status parse_shape(parser *p, header_fields *h)
{
    npy_status st;
    if (!accept_char(p, '('))
        return malformed(p, "a tuple for 'shape'");
    h->ndim = 0;
    int trailing_comma = 0;
    while (!accept_char(p, ')')) {
        if (h->ndim == NPY_MAX_DIMS)
            return fail(NPY_ERR_INPUT, p->err, p->err_size, "shape has more than %d dimensions", NPY_MAX_DIMS);
        if ((st = parse_extent(p, &h->shape[h->ndim])) != NPY_OK)
            return st;
        ++h->ndim;
        trailing_comma = accept_char(p, ',');
        if (!trailing_comma) {
            if (!accept_char(p, ')'))
                return malformed(p, "',' or ')' in 'shape'");
            break;
        }
    }
    if (h->ndim == 1 && !trailing_comma)
        return malformed(p, "a tuple for 'shape': one extent needs a trailing comma, (n,)");
    return NPY_OK;
}

static npy_status parse_bool(parser *p, int *out)
{
    skip_space(p);
    const char *rest = p->s + p->pos;
    const size_t left = p->len - p->pos;
    if (left >= 4 && strncmp(rest, "True", 4) == 0) {
        *out = 1;
        p->pos += 4;
    } else if (left >= 5 && strncmp(rest, "False", 5) == 0) {
        *out = 0;
        p->pos += 5;
    } else {
        return malformed(p, "True or False for 'fortran_order'");
    }
    return NPY_OK;
}

static npy_status parse_header(const char *text, size_t len, header_fields *h, char *err, size_t err_size)
{
    parser p = {text, len, 0, err, err_size};
    npy_status st;
    memset(h, 0, sizeof *h);
    if (!accept_char(&p, '{'))
        return malformed(&p, "'{'");
    while (!accept_char(&p, '}')) {
        char key[32];
        if ((st = parse_string(&p, key, sizeof key, "a quoted key or '}'")) != NPY_OK)
            return st;
        if (!accept_char(&p, ':'))
            return malformed(&p, "':' after a key");
        int *seen;
        if (strcmp(key, "descr") == 0) {
            seen = &h->have_descr;
            skip_space(&p);
            if (p.pos < p.len && p.s[p.pos] == '[')
                return fail(NPY_ERR_INPUT, err, err_size,
                            "structured dtype (a list of fields) is not supported: float32, float16, int32 or "
                            "int64 expected");
            st = parse_string(&p, h->descr, sizeof h->descr, "a quoted dtype for 'descr'");
        } else if (strcmp(key, "fortran_order") == 0) {
            seen = &h->have_fortran;
            st = parse_bool(&p, &h->fortran_order);
        } else if (strcmp(key, "shape") == 0) {
            seen = &h->have_shape;
            st = parse_shape(&p, h);
        } else {
            return fail(NPY_ERR_INPUT, err, err_size,
                        "unexpected key '%s' in the .npy header (expected 'descr', 'fortran_order', 'shape')", key);
        }
        if (st != NPY_OK)
            return st;
        if (*seen)
            return fail(NPY_ERR_INPUT, err, err_size, "key '%s' appears twice in the .npy header", key);
        *seen = 1;
        if (!accept_char(&p, ',')) {
            if (!accept_char(&p, '}'))
                return malformed(&p, "',' or '}' after a value");
            break;
        }
    }
    skip_space(&p); /* NumPy pads with spaces and ends with '\n' */
    if (p.pos != p.len)
        return malformed(&p, "only padding after '}'");
    const char *missing = !h->have_descr ? "descr" : !h->have_fortran ? "fortran_order" : !h->have_shape ? "shape" : NULL;
    if (missing)
        return fail(NPY_ERR_INPUT, err, err_size, "the .npy header lacks the key '%s'", missing);
    return NPY_OK;
}

/* Maps a descr to a dtype; *swap tells whether the data is in the other byte order. */
static npy_status decode_descr(const char *descr, npy_dtype *dtype, int *swap, char *err, size_t err_size)
{
    /* '=' is the host's order; '|' ("not applicable") and no prefix are what NumPy reads as the
     * host's order too (np.dtype('|f4') is float32). */
    const int prefixed = strchr("<>=|", descr[0]) != NULL && descr[0] != '\0';
    const char order = prefixed ? descr[0] : '=';
    const char *type = prefixed ? descr + 1 : descr;
    const int little = order == '<' || (order != '>' && host_is_little_endian());
    for (size_t d = 0; d < NPY_DTYPE_COUNT; ++d) {
        if (strcmp(type, dtypes[d].code) != 0)
            continue;
        *dtype = (npy_dtype)d;
        if (!little)
            return fail(NPY_ERR_INPUT, err, err_size,
                        "big-endian %s ('%s') is not supported: save it little-endian, e.g. a.astype('<%s')",
                        npy_dtype_name(*dtype), descr, type);
        *swap = !host_is_little_endian();
        return NPY_OK;
    }
    if (type[0] == 'O')
        return fail(NPY_ERR_INPUT, err, err_size,
                    "object arrays ('%s') are not supported: float32, float16, int32 or int64 expected", descr);
    const char *name = strcmp(type, "f8") == 0   ? " (float64)"
                       : strcmp(type, "i2") == 0 ? " (int16)"
                       : strcmp(type, "u4") == 0 ? " (uint32)"
                       : strcmp(type, "u8") == 0 ? " (uint64)"
                                                 : "";
    return fail(NPY_ERR_INPUT, err, err_size,
                "dtype '%s'%s is not supported: float32 ('<f4'), float16 ('<f2'), int32 ('<i4') or int64 ('<i8') "
                "expected",
                descr, name);
}

/* pread until done (or an error: its errno). */
static int pread_full(int fd, void *buf, size_t n, uint64_t at)
{
    unsigned char *p = buf;
    while (n > 0) {
        const ssize_t got = pread(fd, p, n, (off_t)at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? errno : EIO;
        p += got, n -= (size_t)got, at += (uint64_t)got;
    }
    return 0;
}

/* npy_read (axis -1), the header only (axis -2), or indices [start, start + len) along `axis`. */
static npy_status read_part(const char *path, int axis, int64_t start, int64_t len, npy_array *out, char *err,
                            size_t err_size);

npy_status npy_read(const char *path, npy_array *out, char *err, size_t err_size)
{
    return read_part(path, -1, 0, 0, out, err, err_size);
}

npy_status npy_read_header(const char *path, npy_array *out, char *err, size_t err_size)
{
    return read_part(path, -2, 0, 0, out, err, err_size);
}

npy_status npy_read_range(const char *path, int axis, int64_t start, int64_t len, npy_array *out, char *err,
                          size_t err_size)
{
    if (axis < 0 || start < 0 || len < 0)
        return fail(NPY_ERR_ARGUMENT, err, err_size, "npy_read_range: axis %d, start %lld, len %lld", axis,
                    (long long)start, (long long)len);
    return read_part(path, axis, start, len, out, err, err_size);
}

static npy_status read_part(const char *path, int axis, int64_t start, int64_t len, npy_array *out, char *err,
                            size_t err_size)
{
    npy_status st = NPY_OK;
    int fd = -1, e = 0;
    char *header = NULL;
    void *data = NULL;
    header_fields h;

    if (!path || !out)
        return fail(NPY_ERR_ARGUMENT, err, err_size, "npy_read: path or out is NULL");
    memset(out, 0, sizeof *out);
    do {
        fd = open(path, O_RDONLY);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        st = fail(NPY_ERR_INPUT, err, err_size, "cannot open: %s", strerror(errno));
        goto cleanup;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = fail(NPY_ERR_INPUT, err, err_size, "cannot stat: %s", strerror(errno));
        goto cleanup;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = fail(NPY_ERR_INPUT, err, err_size, "%s", S_ISDIR(sb.st_mode) ? "is a directory" : "not a regular file");
        goto cleanup;
    }
    const uint64_t file_size = (uint64_t)sb.st_size;
    unsigned char pre[12];
    if (file_size < 10 || (e = read_full(fd, pre, 10)) != 0 || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        st = file_size >= 10 && e != 0
                 ? fail(NPY_ERR_INPUT, err, err_size, "cannot read: %s", strerror(e))
                 : fail(NPY_ERR_INPUT, err, err_size,
                        "not a .npy file (no \\x93NUMPY magic and version in its %llu bytes)",
                        (unsigned long long)file_size);
        goto cleanup;
    }
    const int major = pre[6], minor = pre[7];
    uint64_t hlen, preamble;
    if (major == 1 && minor == 0) {
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
        preamble = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (file_size < 12 || (e = read_full(fd, pre + 10, 2)) != 0) {
            st = fail(NPY_ERR_INPUT, err, err_size, "truncated .npy preamble (%llu bytes)",
                      (unsigned long long)file_size);
            goto cleanup;
        }
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
        preamble = 12;
    } else {
        st = fail(NPY_ERR_INPUT, err, err_size, "unsupported .npy format version %d.%d (1.0, 2.0 and 3.0 are)", major,
                  minor);
        goto cleanup;
    }
    if (hlen > file_size - preamble) {
        st = fail(NPY_ERR_INPUT, err, err_size,
                  "truncated .npy header: it declares %llu bytes, the file has %llu after the preamble",
                  (unsigned long long)hlen, (unsigned long long)(file_size - preamble));
        goto cleanup;
    }
    if (hlen > NPY_MAX_HEADER) {
        st = fail(NPY_ERR_INPUT, err, err_size, ".npy header of %llu bytes is implausibly large (limit %u)",
                  (unsigned long long)hlen, NPY_MAX_HEADER);
        goto cleanup;
    }
    header = malloc((size_t)hlen + 1);
    if (!header) {
        st = fail(NPY_ERR_NO_MEMORY, err, err_size, "out of host memory for a %llu-byte header",
                  (unsigned long long)hlen);
        goto cleanup;
    }
    if ((e = read_full(fd, header, (size_t)hlen)) != 0) {
        st = fail(NPY_ERR_INPUT, err, err_size, "cannot read the .npy header: %s", strerror(e));
        goto cleanup;
    }
    header[hlen] = '\0';
    if ((st = parse_header(header, (size_t)hlen, &h, err, err_size)) != NPY_OK)
        goto cleanup;
    int swap = 0;
    if ((st = decode_descr(h.descr, &out->dtype, &swap, err, err_size)) != NPY_OK)
        goto cleanup;
    if (h.fortran_order) {
        st = fail(NPY_ERR_INPUT, err, err_size,
                  "Fortran-order arrays are not supported: save a C-order copy (np.ascontiguousarray)");
        goto cleanup;
    }

    /* Size checks before any allocation: a header may declare anything. */
    const size_t item = npy_dtype_size(out->dtype);
    const uint64_t limit = (uint64_t)(SIZE_MAX < INT64_MAX ? SIZE_MAX : INT64_MAX) / item;
    uint64_t count = 1;
    char shape_text[512];
    npy_shape_string(h.ndim, h.shape, shape_text, sizeof shape_text);
    for (int i = 0; i < h.ndim; ++i) {
        if (h.shape[i] != 0 && count > limit / (uint64_t)h.shape[i]) {
            st = fail(NPY_ERR_INPUT, err, err_size, "shape %s has more elements than memory can address",
                      shape_text);
            goto cleanup;
        }
        count *= (uint64_t)h.shape[i];
    }
    const uint64_t data_bytes = count * item, have = file_size - preamble - hlen;
    if (have != data_bytes) {
        st = have < data_bytes
                 ? fail(NPY_ERR_INPUT, err, err_size,
                        "truncated .npy data: shape %s of %s needs %llu bytes, the file has %llu", shape_text,
                        npy_dtype_name(out->dtype), (unsigned long long)data_bytes, (unsigned long long)have)
                 : fail(NPY_ERR_INPUT, err, err_size,
                        "%llu bytes follow the data of shape %s %s (%llu bytes): not one .npy array",
                        (unsigned long long)(have - data_bytes), shape_text, npy_dtype_name(out->dtype),
                        (unsigned long long)data_bytes);
        goto cleanup;
    }
    if (axis == -2) { /* the header alone: shape and count, no data */
        out->ndim = h.ndim;
        memcpy(out->shape, h.shape, sizeof h.shape);
        out->count = (size_t)count;
        goto cleanup;
    }
    if (axis >= 0) {
        if (axis >= h.ndim || start > h.shape[axis] || len > h.shape[axis] - start) {
            st = fail(NPY_ERR_INPUT, err, err_size, "indices [%lld, %lld) along axis %d are outside shape %s",
                      (long long)start, (long long)(start + len), axis, shape_text);
            goto cleanup;
        }
        /* Each outer index holds one contiguous run of len * inner elements. */
        uint64_t outer = 1, inner = 1;
        for (int i = 0; i < axis; ++i)
            outer *= (uint64_t)h.shape[i];
        for (int i = axis + 1; i < h.ndim; ++i)
            inner *= (uint64_t)h.shape[i];
        const uint64_t run = (uint64_t)len * inner * item, base = preamble + hlen;
        data = malloc(outer * run > 0 ? (size_t)(outer * run) : 1);
        if (!data) {
            st = fail(NPY_ERR_NO_MEMORY, err, err_size, "out of host memory for %llu bytes of data",
                      (unsigned long long)(outer * run));
            goto cleanup;
        }
        for (uint64_t o = 0; o < outer && run; ++o)
            if ((e = pread_full(fd, (unsigned char *)data + o * run, (size_t)run,
                                base + (o * (uint64_t)h.shape[axis] + (uint64_t)start) * inner * item)) != 0) {
                st = fail(NPY_ERR_INPUT, err, err_size, "cannot read the .npy data: %s", strerror(e));
                goto cleanup;
            }
        count = outer * (uint64_t)len * inner;
        h.shape[axis] = len;
    } else {
        data = malloc(data_bytes ? (size_t)data_bytes : 1);
        if (!data) {
            st = fail(NPY_ERR_NO_MEMORY, err, err_size, "out of host memory for %llu bytes of data",
                      (unsigned long long)data_bytes);
            goto cleanup;
        }
        if ((e = read_full(fd, data, (size_t)data_bytes)) != 0) {
            st = fail(NPY_ERR_INPUT, err, err_size, "cannot read the .npy data: %s", strerror(e));
            goto cleanup;
        }
    }
    if (swap)
        swap_bytes(data, (size_t)count, item);
    out->ndim = h.ndim;
    memcpy(out->shape, h.shape, sizeof h.shape);
    out->count = (size_t)count;
    out->data = data;
    data = NULL;
cleanup:
    if (fd >= 0)
        close(fd);
    free(header);
    free(data);
    return st;
}

/* ---- writing ----------------------------------------------------------------------------- */

static int write_full(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (size_t)1 << 30 ? (size_t)1 << 30 : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

npy_status npy_writer_open(npy_writer *w, const char *path, char *err, size_t err_size)
{
    if (!w || !path)
        return fail(NPY_ERR_ARGUMENT, err, err_size, "npy_writer_open: writer or path is NULL");
    memset(w, 0, sizeof *w);
    w->fd = -1;
    const size_t len = strlen(path);
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    struct stat sb;
    if (*base == '\0' || (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)))
        return fail(NPY_ERR_CREATE, err, err_size, "is a directory, not a file name");
    const size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0; /* keeps the '/' */
    w->path = malloc(len + 1);
    w->tmp = malloc(len + sizeof "/..tmp-XXXXXX" + 1);
    if (!w->path || !w->tmp) { /* nothing created yet: free, do not abort (w->tmp holds no name) */
        free(w->path);
        free(w->tmp);
        w->path = w->tmp = NULL;
        return fail(NPY_ERR_NO_MEMORY, err, err_size, "out of host memory");
    }
    memcpy(w->path, path, len + 1);
    snprintf(w->tmp, len + sizeof "/..tmp-XXXXXX" + 1, "%.*s.%s.tmp-XXXXXX", (int)dir_len, path, base);
    w->fd = mkstemp(w->tmp);
    if (w->fd < 0) {
        const int e = errno;
        char dir[4096]; /* the directory as given, without its final '/' (but "/" itself) */
        snprintf(dir, sizeof dir, "%.*s", dir_len > 1 ? (int)dir_len - 1 : 1, dir_len ? path : ".");
        free(w->tmp);
        w->tmp = NULL;
        npy_writer_abort(w);
        return fail(NPY_ERR_CREATE, err, err_size, "cannot create a file in directory '%s': %s", dir, strerror(e));
    }
    /* mkstemp makes the file 0600; an output gets what any new file would (0666 less the umask).
     * umask() can only be read by setting it, so this must run before other threads create files
     * (the CLI opens its output before it starts OpenCL). */
    const mode_t mask = umask(0);
    umask(mask);
    fchmod(w->fd, 0666 & ~mask); /* best effort: a failure only leaves the file private */
    return NPY_OK;
}

void npy_writer_abort(npy_writer *w)
{
    if (!w)
        return;
    if (w->tmp) {
        if (w->fd >= 0)
            close(w->fd);
        unlink(w->tmp);
        free(w->tmp);
    }
    free(w->path);
    memset(w, 0, sizeof *w);
    w->fd = -1;
}

/* The version 1.0 header for dtype and shape, padded to NPY_ALIGN; returns its length. */
static size_t format_header(char *buf, size_t size, npy_dtype dtype, int ndim, const int64_t *shape)
{
    char shape_text[NPY_MAX_DIMS * 22 + 4];
    npy_shape_string(ndim, shape, shape_text, sizeof shape_text);
    int n = snprintf(buf + 10, size - 10, "{'descr': '<%s', 'fortran_order': False, 'shape': %s, }",
                     dtypes[dtype].code, shape_text);
    size_t total = 10 + (size_t)n + 1; /* + the final '\n' */
    const size_t pad = NPY_ALIGN - total % NPY_ALIGN; /* as NumPy: 1..64 spaces */
    memset(buf + 10 + n, ' ', pad);
    total += pad;
    buf[total - 1] = '\n';
    memcpy(buf, NPY_MAGIC "\x01\x00", 8);
    const size_t hlen = total - 10;
    buf[8] = (char)(hlen & 0xFF);
    buf[9] = (char)(hlen >> 8);
    return total;
}

npy_status npy_writer_commit(npy_writer *w, npy_dtype dtype, int ndim, const int64_t *shape, const void *data,
                             char *err, size_t err_size)
{
    npy_status st = NPY_OK;
    void *swapped = NULL;
    int e = 0;
    const char *step = "write";

    if (!w || !w->tmp || (!shape && ndim > 0) || !data || ndim < 0 || ndim > NPY_MAX_DIMS || !dtype_known(dtype)) {
        npy_writer_abort(w);
        return fail(NPY_ERR_ARGUMENT, err, err_size, "npy_writer_commit: no open writer, or bad data, rank or dtype");
    }
    size_t count = 1;
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] < 0 || (shape[i] != 0 && count > SIZE_MAX / 8 / (size_t)shape[i])) {
            st = fail(NPY_ERR_ARGUMENT, err, err_size, "npy_writer_commit: bad extent %lld", (long long)shape[i]);
            goto cleanup;
        }
        count *= (size_t)shape[i];
    }
    const size_t item = npy_dtype_size(dtype), bytes = count * item;
    char header[NPY_MAX_DIMS * 22 + 200];
    const size_t hbytes = format_header(header, sizeof header, dtype, ndim, shape);
    if (!host_is_little_endian()) {
        swapped = malloc(bytes ? bytes : 1);
        if (!swapped) {
            st = fail(NPY_ERR_NO_MEMORY, err, err_size, "out of host memory");
            goto cleanup;
        }
        memcpy(swapped, data, bytes);
        swap_bytes(swapped, count, item);
        data = swapped;
    }
    if ((e = write_full(w->fd, header, hbytes)) == 0 && (e = write_full(w->fd, data, bytes)) == 0) {
        step = "sync";
        if (fsync(w->fd) != 0)
            e = errno;
    }
    if (e == 0) {
        step = "close";
        const int fd = w->fd;
        w->fd = -1;
        if (close(fd) != 0)
            e = errno;
    }
    if (e == 0) {
        step = "rename";
        if (rename(w->tmp, w->path) != 0)
            e = errno;
    }
    if (e != 0) {
        st = fail(NPY_ERR_WRITE, err, err_size, "cannot %s the output (%zu bytes): %s", step, hbytes + bytes,
                  strerror(e));
        goto cleanup;
    }
    free(w->tmp); /* renamed: nothing left to remove */
    w->tmp = NULL;
cleanup:
    free(swapped);
    npy_writer_abort(w);
    return st;
}

npy_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, const void *data, char *err,
                     size_t err_size)
{
    npy_writer w;
    npy_status st = npy_writer_open(&w, path, err, err_size);
    if (st != NPY_OK)
        return st;
    return npy_writer_commit(&w, dtype, ndim, shape, data, err, err_size);
}
