/* The library's host allocations (host/core/alloc.c) under MHLA_MALLOC_PERTURB, which meson sets to
 * 165 for this test (and glibc's MALLOC_PERTURB_ to 0, as for every test that compiles kernels): a
 * block mhla__malloc hands out reads 165 ^ 0xff = 0x5a throughout, realloc's new bytes too while the
 * caller's stay, calloc's are zeros, and a freed block is filled with 0xa5 before glibc has it back.
 * The tests rely on this to catch host code reading memory it never wrote, with glibc's own filling
 * off (it costs a third of a cold test's time in LLVM's blocks). Linked with the library's objects
 * (its mhla__ functions are hidden in libmhla.so); no OpenCL call. */
#include "core/core.h"
#include "core/testing.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The first byte of p[from, to) that is not `want`, or -1. */
static long first_other(const unsigned char *p, size_t from, size_t to, unsigned char want)
{
    for (size_t i = from; i < to; ++i)
        if (p[i] != want)
            return (long)i;
    return -1;
}

static void expect_filled(const unsigned char *p, size_t from, size_t to, unsigned char want, const char *what)
{
    const long at = first_other(p, from, to, want);
    if (at >= 0)
        fail_msg("%s: byte %ld of [%zu, %zu) is 0x%02x, not 0x%02x: MHLA_MALLOC_PERTURB=%s not honoured", what, at,
                 from, to, p[at], want, getenv("MHLA_MALLOC_PERTURB") ? getenv("MHLA_MALLOC_PERTURB") : "(unset)");
}

static void test_new_blocks_filled(void **state)
{
    (void)state;
    const char *env = getenv("MHLA_MALLOC_PERTURB");
    if (!env || strcmp(env, "165") != 0)
        fail_msg("run with MHLA_MALLOC_PERTURB=165 (tests/meson.build), not %s", env ? env : "unset");
    const long live = mhla__live_allocations();
    for (size_t size = 1; size <= 1 << 20; size = size * 3 + 5) {
        unsigned char *p = mhla__malloc(size);
        assert_non_null(p);
        expect_filled(p, 0, size, 0x5a, "mhla__malloc");
        memset(p, 0x11, size);
        unsigned char *q = mhla__realloc(p, 2 * size + 64);
        assert_non_null(q);
        expect_filled(q, 0, size, 0x11, "mhla__realloc (the caller's bytes kept)");
        expect_filled(q, size, 2 * size + 64, 0x5a, "mhla__realloc (its new bytes)");
        mhla__free(q);
        unsigned char *z = mhla__calloc(size, 1);
        assert_non_null(z);
        expect_filled(z, 0, size, 0, "mhla__calloc");
        mhla__free(z);
    }
    unsigned char *r = mhla__realloc(NULL, 100);
    assert_non_null(r);
    expect_filled(r, 0, 100, 0x5a, "mhla__realloc(NULL)");
    mhla__free(r);
    assert_int_equal(mhla__live_allocations(), live);
}

/* A freed block is filled before free(): seen where glibc hands the same block back to the next
 * malloc of its size (its thread cache then holds two pointers in the first 16 bytes). Under ASan,
 * or another C library, the block may not come back: then nothing can be read, and the case says so. */
static void test_freed_blocks_filled(void **state)
{
    (void)state;
    unsigned char *p = mhla__malloc(256);
    assert_non_null(p);
    memset(p, 0x11, 256);
    mhla__free(p);
    unsigned char *again = malloc(256);
    assert_non_null(again);
    if ((void *)again == (void *)p)
        expect_filled(again, 16, 256, 0xa5, "mhla__free");
    else
        printf("test_freed_blocks_filled: the freed block did not come back (ASan, or not glibc): not checked\n");
    free(again);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_blocks_filled),
        cmocka_unit_test(test_freed_blocks_filled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
