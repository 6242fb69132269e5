/* cli/npy.c: the .npy reader on hand-made files (versions 1.0/2.0/3.0, NumPy's spacing and its
 * variants, every kind of damage), and the atomic writer (round trips, NumPy's header layout,
 * no partial or temporary file left behind when creating or writing fails). */
#include "npy.h"
#include "scratch.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[256];

static int make_dir(void **state)
{
    (void)state;
    return scratch_make(dir, sizeof dir, "mhla-npy");
}

static int remove_dir(void **state)
{
    (void)state;
    scratch_remove(dir);
    return 0;
}

static const char *path_of(const char *name) { return scratch_path(dir, name); }

static const char *listing(void) { return scratch_listing(dir); }

static void write_bytes(const char *name, const void *bytes, size_t len)
{
    FILE *f = fopen(path_of(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* A .npy of `version` (1, 2 or 3) with `header` verbatim, then `data_len` bytes of `data`. */
static void craft(const char *name, int version, const char *header, const void *data, size_t data_len)
{
    const size_t hlen = strlen(header), pre = version == 1 ? 10 : 12;
    unsigned char *buf = malloc(pre + hlen + data_len + 1);
    assert_non_null(buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; ++i)
        buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, header, hlen);
    if (data_len)
        memcpy(buf + pre + hlen, data, data_len);
    write_bytes(name, buf, pre + hlen + data_len);
    free(buf);
}

/* npy_read must fail with `want` and a message containing `text`, leaving no allocation. */
static void expect_read_error(const char *name, npy_status want, const char *text)
{
    npy_array a;
    char err[512] = "";
    const npy_status st = npy_read(path_of(name), &a, err, sizeof err);
    if (st != want || !strstr(err, text))
        fail_msg("%s: status %d '%s', expected %d with '%s'", name, (int)st, err, (int)want, text);
    assert_null(a.data);
    assert_null(strchr(err, '\n')); /* one line */
}

static const float six[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -7.0f};

static void test_headers_numpy_writes(void **state)
{
    (void)state;
    /* NumPy 1.x/2.x: sorted keys, padding to 64 with spaces and '\n', growth-axis spaces. */
    const char *variants[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }                                    \n",
        "{'descr':'<f4','fortran_order':False,'shape':(2,3)}\n",                          /* no spaces */
        "  { \"shape\" : ( 2 , 3 , ) ,\t\"fortran_order\": False , 'descr': '<f4' , }  \n", /* order, quotes */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }\n",                 /* Python 2 longs */
        "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3)}",                       /* native, no '\n' */
        "{'descr': '|f4', 'fortran_order': False, 'shape': (2, 3)}\n",
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; ++v) {
        for (int version = 1; version <= 3; ++version) {
            craft("h.npy", version, variants[v], six, sizeof six);
            npy_array a;
            char err[512] = "";
            if (npy_read(path_of("h.npy"), &a, err, sizeof err) != NPY_OK)
                fail_msg("variant %zu, version %d: %s", v, version, err);
            assert_int_equal(a.dtype, NPY_F32);
            assert_int_equal(a.ndim, 2);
            assert_int_equal(a.shape[0], 2);
            assert_int_equal(a.shape[1], 3);
            assert_int_equal(a.count, 6);
            assert_memory_equal(a.data, six, sizeof six);
            npy_free(&a);
            assert_null(a.data);
        }
    }
}

static void test_scalar_empty_and_1d(void **state)
{
    (void)state;
    npy_array a;
    char err[512] = "";
    craft("s.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", six, 4);
    assert_int_equal(npy_read(path_of("s.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.count, 1);
    npy_free(&a);
    craft("e.npy", 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (3, 0), }\n", NULL, 0);
    assert_int_equal(npy_read(path_of("e.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(a.dtype, NPY_F16);
    assert_int_equal(a.count, 0);
    npy_free(&a);
    const uint16_t halves[5] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x8000};
    craft("one.npy", 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }\n", halves, sizeof halves);
    assert_int_equal(npy_read(path_of("one.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(a.ndim, 1);
    assert_memory_equal(a.data, halves, sizeof halves);
    npy_free(&a);
    npy_free(NULL);
}

static void test_damaged_files(void **state)
{
    (void)state;
    const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n";
    write_bytes("short.npy", "\x93NUM", 4);
    expect_read_error("short.npy", NPY_ERR_INPUT, "not a .npy file");
    write_bytes("text.npy", "hello, this is not an array\n", 28);
    expect_read_error("text.npy", NPY_ERR_INPUT, "not a .npy file");
    write_bytes("pre.npy", "\x93NUMPY\x02\x00\x10", 9 + 1);
    expect_read_error("pre.npy", NPY_ERR_INPUT, "truncated .npy preamble");
    craft("v4.npy", 4, ok, six, sizeof six);
    expect_read_error("v4.npy", NPY_ERR_INPUT, "unsupported .npy format version 4.0");
    /* a header length past the end of the file */
    unsigned char big[10 + 20];
    memcpy(big, "\x93NUMPY\x01\x00\xff\x7f", 10);
    memcpy(big + 10, "{'descr': '<f4', 'fo", 20);
    write_bytes("hdr.npy", big, sizeof big);
    expect_read_error("hdr.npy", NPY_ERR_INPUT, "truncated .npy header: it declares 32767 bytes, the file has 20");
    craft("data.npy", 1, ok, six, sizeof six - 3);
    expect_read_error("data.npy", NPY_ERR_INPUT, "truncated .npy data: shape (2, 3) of float32 needs 24 bytes, the file has 21");
    craft("extra.npy", 1, ok, six, sizeof six);
    FILE *f = fopen(path_of("extra.npy"), "ab");
    assert_non_null(f);
    fputs("junk", f);
    fclose(f);
    expect_read_error("extra.npy", NPY_ERR_INPUT, "4 bytes follow the data");
    craft("empty.npy", 1, "", NULL, 0);
    expect_read_error("empty.npy", NPY_ERR_INPUT, "malformed .npy header at byte 0 (expected '{')");
}

static void test_huge_declared_shapes(void **state)
{
    (void)state;
    /* 2^80 elements: the product overflows before anything is allocated. */
    craft("huge.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }\n",
          six, sizeof six);
    expect_read_error("huge.npy", NPY_ERR_INPUT, "has more elements than memory can address");
    /* 4 TiB: representable, so only comparing with the file size stops it; an attempt to allocate
     * would have failed with NPY_ERR_NO_MEMORY instead of this message. */
    craft("big.npy", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1073741824, 1024), }\n", six, sizeof six);
    expect_read_error("big.npy", NPY_ERR_INPUT, "needs 4398046511104 bytes, the file has 24");
    craft("digits.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", six,
          sizeof six);
    expect_read_error("digits.npy", NPY_ERR_INPUT, "exceeds");
    char many[512] = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (int i = 0; i < 33; ++i)
        strcat(many, "1, ");
    strcat(many, "), }\n");
    craft("dims.npy", 1, many, six, 4);
    expect_read_error("dims.npy", NPY_ERR_INPUT, "more than 32 dimensions");
    /* A version 2.0 header larger than the 1 MiB limit, in a file that really is that large. */
    const size_t n = (1u << 20) + 64;
    char *pad = malloc(n + 1);
    assert_non_null(pad);
    memset(pad, ' ', n);
    const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    memcpy(pad, ok, strlen(ok));
    pad[n - 1] = '\n';
    pad[n] = '\0';
    craft("pad.npy", 2, pad, six, sizeof six);
    free(pad);
    expect_read_error("pad.npy", NPY_ERR_INPUT, "implausibly large");
}

static void test_unsupported_content(void **state)
{
    (void)state;
    const struct {
        const char *header;
        const char *text;
    } cases[] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (6,), }", "big-endian float32 ('>f4') is not supported"},
        {"{'descr': '>f2', 'fortran_order': False, 'shape': (12,), }", "big-endian float16 ('>f2')"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", "Fortran-order arrays are not supported"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", "dtype '<f8' (float64) is not supported"},
        {"{'descr': '<u4', 'fortran_order': False, 'shape': (6,), }", "dtype '<u4' (uint32) is not supported"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (12,), }", "dtype '<i2' (int16) is not supported: float32 ('<f4'), float16 ('<f2'), int32 ('<i4') or int64 ('<i8') expected"},
        {"{'descr': '>i4', 'fortran_order': False, 'shape': (6,), }", "big-endian int32 ('>i4') is not supported"},
        {"{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", "big-endian int64 ('>i8')"},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (24,), }", "dtype '|u1' is not supported"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", "object arrays ('|O') are not supported"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,), }", "structured dtype"},
        {"{'descr': '<f4', 'shape': (6,), }", "lacks the key 'fortran_order'"},
        {"{'fortran_order': False, 'shape': (6,), }", "lacks the key 'descr'"},
        {"{'descr': '<f4', 'fortran_order': False, }", "lacks the key 'shape'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1}", "unexpected key 'extra'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}", "key 'descr' appears twice"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6) }", "one extent needs a trailing comma"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-6,) }", "a non-negative integer in 'shape'"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (6,) }", "True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,) ", "',' or '}'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} trailing", "only padding after '}'"},
        {"{'descr: '<f4', 'fortran_order': False, 'shape': (6,)}", "expected ':' after a key"},
        {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (6,)}", "a quoted dtype"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        craft("bad.npy", 1, cases[i].header, six, sizeof six);
        expect_read_error("bad.npy", NPY_ERR_INPUT, cases[i].text);
    }
}

/* int32 and int64 (cu_seqlens offsets): every byte-order spelling of the host's order, the values
 * as written, and npy_to_int32()'s range check naming the element. */
static void test_integers(void **state)
{
    (void)state;
    const int32_t i32[6] = {0, 1, 64, -7, INT32_MAX, INT32_MIN};
    const char *orders[] = {"<", "|", "="};
    npy_array a;
    char err[512] = "", header[128];
    int32_t *v = NULL;
    for (size_t o = 0; o < sizeof orders / sizeof orders[0]; ++o) {
        snprintf(header, sizeof header, "{'descr': '%si4', 'fortran_order': False, 'shape': (6,), }\n", orders[o]);
        craft("i4.npy", 1, header, i32, sizeof i32);
        if (npy_read(path_of("i4.npy"), &a, err, sizeof err) != NPY_OK)
            fail_msg("'%si4': %s", orders[o], err);
        assert_int_equal(a.dtype, NPY_I32);
        assert_string_equal(npy_dtype_name(a.dtype), "int32");
        assert_int_equal(a.ndim, 1);
        assert_int_equal(a.count, 6);
        assert_memory_equal(a.data, i32, sizeof i32);
        assert_int_equal(npy_to_int32(&a, &v, err, sizeof err), NPY_OK);
        assert_memory_equal(v, i32, sizeof i32);
        free(v);
        npy_free(&a);
    }
    /* int64 within the int32 range converts exactly, the extremes included. */
    const int64_t i64[6] = {0, 1, 64, -7, INT32_MAX, INT32_MIN};
    craft("i8.npy", 3, "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }\n", i64, sizeof i64);
    assert_int_equal(npy_read(path_of("i8.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(a.dtype, NPY_I64);
    assert_string_equal(npy_dtype_name(a.dtype), "int64");
    assert_int_equal(npy_dtype_size(a.dtype), 8);
    assert_memory_equal(a.data, i64, sizeof i64);
    assert_int_equal(npy_to_int32(&a, &v, err, sizeof err), NPY_OK);
    assert_memory_equal(v, i32, sizeof i32);
    free(v);
    npy_free(&a);
    /* One past either end of int32 is refused, naming the element and its value. */
    const struct {
        int64_t bad;
        const char *text;
    } out_of_range[] = {
        {(int64_t)INT32_MAX + 1, "int64 element 2 = 2147483648 is outside the int32 range -2147483648..2147483647"},
        {(int64_t)INT32_MIN - 1, "int64 element 2 = -2147483649 is outside the int32 range"},
        {INT64_MAX, "int64 element 2 = 9223372036854775807 is outside"},
    };
    for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; ++i) {
        const int64_t w[4] = {0, 5, out_of_range[i].bad, 9};
        craft("big8.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }\n", w, sizeof w);
        assert_int_equal(npy_read(path_of("big8.npy"), &a, err, sizeof err), NPY_OK);
        v = (int32_t *)&a; /* must be cleared */
        assert_int_equal(npy_to_int32(&a, &v, err, sizeof err), NPY_ERR_INPUT);
        assert_null(v);
        if (!strstr(err, out_of_range[i].text))
            fail_msg("'%s' lacks '%s'", err, out_of_range[i].text);
        npy_free(&a);
    }
    /* Floats are not offsets; an empty integer array converts to nothing. */
    craft("f.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }\n", six, sizeof six);
    assert_int_equal(npy_read(path_of("f.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(npy_to_int32(&a, &v, err, sizeof err), NPY_ERR_INPUT);
    assert_null(v);
    assert_string_equal(err, "dtype float32, expected int32 or int64");
    npy_free(&a);
    craft("e.npy", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (0,), }\n", NULL, 0);
    assert_int_equal(npy_read(path_of("e.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(npy_to_int32(&a, &v, err, sizeof err), NPY_OK);
    assert_non_null(v);
    free(v);
    npy_free(&a);
    assert_int_equal(npy_to_int32(NULL, &v, err, sizeof err), NPY_ERR_ARGUMENT);
    assert_int_equal(npy_to_int32(&a, NULL, err, sizeof err), NPY_ERR_ARGUMENT);
    craft("trunc8.npy", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }\n", i64, 28);
    expect_read_error("trunc8.npy", NPY_ERR_INPUT, "truncated .npy data: shape (4,) of int64 needs 32 bytes, the file has 28");
}

static void test_not_a_file(void **state)
{
    (void)state;
    expect_read_error("missing.npy", NPY_ERR_INPUT, "cannot open: No such file or directory");
    assert_int_equal(mkdir(path_of("sub.npy"), 0755), 0);
    expect_read_error("sub.npy", NPY_ERR_INPUT, "is a directory");
    rmdir(path_of("sub.npy"));
    npy_array a;
    assert_int_equal(npy_read(NULL, &a, NULL, 0), NPY_ERR_ARGUMENT);
}

/* Reads back `name` and checks its layout byte by byte: NumPy's version 1.0 header. */
static void check_written(const char *name, const char *descr, const char *shape_text, size_t data_bytes)
{
    struct stat sb;
    assert_int_equal(stat(path_of(name), &sb), 0);
    FILE *f = fopen(path_of(name), "rb");
    assert_non_null(f);
    unsigned char pre[10];
    assert_int_equal(fread(pre, 1, 10, f), 10);
    assert_memory_equal(pre, "\x93NUMPY\x01\x00", 8);
    const size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    char *header = calloc(1, hlen + 1);
    assert_non_null(header);
    assert_int_equal(fread(header, 1, hlen, f), hlen);
    fclose(f);
    assert_int_equal((10 + hlen) % 64, 0);
    assert_int_equal(header[hlen - 1], '\n');
    char expect[256];
    snprintf(expect, sizeof expect, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape_text);
    assert_memory_equal(header, expect, strlen(expect));
    for (size_t i = strlen(expect); i + 1 < hlen; ++i)
        assert_int_equal(header[i], ' ');
    assert_int_equal((size_t)sb.st_size, 10 + hlen + data_bytes);
    assert_int_equal(sb.st_mode & 0777, 0644); /* 0666 less the umask 022 set in main() */
    free(header);
}

/* npy_write() of a 1-D array, then its bytes (check_written) and npy_read()'s dtype and values. */
static void round_trip_1d(const char *name, npy_dtype dtype, const char *descr, int64_t count, const void *data)
{
    char err[512] = "", shape_text[32];
    const size_t bytes = (size_t)count * npy_dtype_size(dtype);
    snprintf(shape_text, sizeof shape_text, "(%lld,)", (long long)count);
    assert_int_equal(npy_write(path_of(name), dtype, 1, &count, data, err, sizeof err), NPY_OK);
    check_written(name, descr, shape_text, bytes);
    npy_array a;
    assert_int_equal(npy_read(path_of(name), &a, err, sizeof err), NPY_OK);
    assert_int_equal(a.dtype, dtype);
    assert_int_equal(a.count, (size_t)count);
    assert_memory_equal(a.data, data, bytes);
    npy_free(&a);
}

static void test_write_round_trip(void **state)
{
    (void)state;
    char err[512] = "";
    const int64_t shape[4] = {1, 2, 1, 3};
    assert_int_equal(npy_write(path_of("o32.npy"), NPY_F32, 4, shape, six, err, sizeof err), NPY_OK);
    check_written("o32.npy", "<f4", "(1, 2, 1, 3)", sizeof six);
    npy_array a;
    assert_int_equal(npy_read(path_of("o32.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(a.ndim, 4);
    assert_memory_equal(a.shape, shape, sizeof shape);
    assert_memory_equal(a.data, six, sizeof six);
    npy_free(&a);

    const uint16_t halves[3] = {0x3C00, 0x7C00, 0x0001};
    const int64_t one[1] = {3};
    round_trip_1d("o16.npy", NPY_F16, "<f2", 3, halves);
    /* Integer arrays too (int32 and int64, as --cu-seqlens takes them). */
    const int32_t offsets[4] = {0, 1, 64, 493};
    const int64_t wide[2] = {-1, (int64_t)1 << 40};
    round_trip_1d("i4.npy", NPY_I32, "<i4", 4, offsets);
    round_trip_1d("i8.npy", NPY_I64, "<i8", 2, wide);
    unlink(path_of("i4.npy"));
    unlink(path_of("i8.npy"));

    assert_int_equal(npy_write(path_of("o0.npy"), NPY_F32, 0, NULL, six, err, sizeof err), NPY_OK);
    check_written("o0.npy", "<f4", "()", 4);
    /* Overwriting replaces the file whole. */
    assert_int_equal(npy_write(path_of("o32.npy"), NPY_F32, 1, one, six, err, sizeof err), NPY_OK);
    check_written("o32.npy", "<f4", "(3,)", 12);
    assert_string_equal(listing(), "o0.npy o16.npy o32.npy");
}

/* A rank's token range (mhla run --mpi): only indices [start, start + len) along one axis, and
 * the header alone; ranges outside the shape are refused, naming them. */
static void test_read_range(void **state)
{
    (void)state;
    char err[512] = "";
    float x[2 * 5 * 3];
    for (int i = 0; i < 30; ++i)
        x[i] = (float)i;
    const int64_t shape[3] = {2, 5, 3};
    assert_int_equal(npy_write(path_of("r.npy"), NPY_F32, 3, shape, x, err, sizeof err), NPY_OK);
    npy_array a;
    assert_int_equal(npy_read_range(path_of("r.npy"), 1, 1, 3, &a, err, sizeof err), NPY_OK);
    const int64_t want_shape[3] = {2, 3, 3};
    assert_memory_equal(a.shape, want_shape, sizeof want_shape);
    assert_int_equal(a.count, 18);
    for (int b = 0; b < 2; ++b)
        for (int t = 0; t < 3; ++t)
            for (int d = 0; d < 3; ++d)
                assert_true(((float *)a.data)[(b * 3 + t) * 3 + d] == x[(b * 5 + 1 + t) * 3 + d]);
    npy_free(&a);
    assert_int_equal(npy_read_range(path_of("r.npy"), 1, 5, 0, &a, err, sizeof err), NPY_OK); /* empty */
    assert_int_equal(a.count, 0);
    npy_free(&a);
    assert_int_equal(npy_read_header(path_of("r.npy"), &a, err, sizeof err), NPY_OK);
    assert_memory_equal(a.shape, shape, sizeof shape);
    assert_null(a.data);
    assert_int_equal(npy_read_range(path_of("r.npy"), 1, 3, 3, &a, err, sizeof err), NPY_ERR_INPUT);
    assert_non_null(strstr(err, "[3, 6) along axis 1"));
    assert_int_equal(npy_read_range(path_of("r.npy"), 3, 0, 1, &a, err, sizeof err), NPY_ERR_INPUT);
    assert_int_equal(npy_read_range(path_of("r.npy"), 1, -1, 1, &a, err, sizeof err), NPY_ERR_ARGUMENT);
}

static void test_writer_temporary(void **state)
{
    (void)state;
    char err[512] = "";
    npy_writer w;
    assert_int_equal(npy_writer_open(&w, path_of("t.npy"), err, sizeof err), NPY_OK);
    /* The temporary is hidden, beside the target, and the target does not exist yet. */
    const char *names = listing();
    assert_true(strncmp(names, ".t.npy.tmp-", 11) == 0);
    assert_null(strchr(names, ' '));
    npy_writer_abort(&w);
    assert_string_equal(listing(), "");
    npy_writer_abort(&w); /* twice is harmless */
    npy_writer_abort(NULL);

    assert_int_equal(npy_writer_open(&w, path_of("nodir/t.npy"), err, sizeof err), NPY_ERR_CREATE);
    assert_non_null(strstr(err, "/nodir': No such file or directory"));
    assert_int_equal(mkdir(path_of("d.npy"), 0755), 0);
    assert_int_equal(npy_writer_open(&w, path_of("d.npy"), err, sizeof err), NPY_ERR_CREATE);
    assert_non_null(strstr(err, "is a directory"));
    assert_int_equal(npy_writer_open(&w, path_of("d.npy/"), err, sizeof err), NPY_ERR_CREATE);
    rmdir(path_of("d.npy"));
    assert_string_equal(listing(), "");

    /* Bad arguments close the writer and remove its temporary. */
    assert_int_equal(npy_writer_open(&w, path_of("t.npy"), err, sizeof err), NPY_OK);
    const int64_t neg[1] = {-1};
    assert_int_equal(npy_writer_commit(&w, NPY_F32, 1, neg, six, err, sizeof err), NPY_ERR_ARGUMENT);
    assert_string_equal(listing(), "");
    assert_int_equal(npy_writer_open(&w, path_of("t.npy"), err, sizeof err), NPY_OK);
    const int64_t one[1] = {1};
    assert_int_equal(npy_writer_commit(&w, (npy_dtype)4, 1, one, six, err, sizeof err), NPY_ERR_ARGUMENT);
    assert_string_equal(listing(), "");
}

static void test_write_failure_leaves_nothing(void **state)
{
    (void)state;
    char err[512] = "";
    const int64_t shape[1] = {6};
    assert_int_equal(npy_write(path_of("keep.npy"), NPY_F32, 1, shape, six, err, sizeof err), NPY_OK);
    /* A file size limit makes the data write fail (EFBIG) after the header went out. */
    enum { N = 4096 };
    static float data[N];
    const int64_t big[1] = {N};
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 1024;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    const npy_status st = npy_write(path_of("keep.npy"), NPY_F32, 1, big, data, err, sizeof err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(st, NPY_ERR_WRITE);
    assert_non_null(strstr(err, "cannot write the output"));
    /* The old file is untouched and no temporary remains. */
    assert_string_equal(listing(), "keep.npy");
    npy_array a;
    assert_int_equal(npy_read(path_of("keep.npy"), &a, err, sizeof err), NPY_OK);
    assert_int_equal(a.count, 6);
    npy_free(&a);
    unlink(path_of("keep.npy"));
}

static void test_shape_string(void **state)
{
    (void)state;
    char buf[64];
    const int64_t s[3] = {2, 30, 4};
    assert_string_equal(npy_shape_string(0, s, buf, sizeof buf), "()");
    assert_string_equal(npy_shape_string(1, s, buf, sizeof buf), "(2,)");
    assert_string_equal(npy_shape_string(3, s, buf, sizeof buf), "(2, 30, 4)");
    assert_string_equal(npy_shape_string(3, s, buf, 6), "(2, 3"); /* cut, still terminated */
}

int main(void)
{
    umask(022);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_headers_numpy_writes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_scalar_empty_and_1d, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_damaged_files, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_huge_declared_shapes, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_unsupported_content, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_integers, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_not_a_file, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_write_round_trip, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_read_range, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_writer_temporary, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_write_failure_leaves_nothing, make_dir, remove_dir),
        cmocka_unit_test(test_shape_string),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
