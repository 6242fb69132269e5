/* libFuzzer harness: the CLI's .npy reader (cli/npy.c) on arbitrary file contents. npy_read()
 * must refuse or return an array whose count matches its shape and whose data is fully readable;
 * npy_to_int32() must then refuse or convert. The input is served from a memfd so that the loop
 * never touches the disk. */
#define _GNU_SOURCE /* memfd_create */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int memfd = -1;
static char path[64];
static volatile unsigned char sink; /* keeps the reads below */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("fuzz_npy", 0);
        if (memfd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
    }
    if (ftruncate(memfd, 0) != 0 || (size && pwrite(memfd, data, size, 0) != (ssize_t)size))
        abort();

    npy_array a;
    char err[256] = "";
    const npy_status st = npy_read(path, &a, err, sizeof err);
    if (st != NPY_OK) {
        if (a.data || !err[0]) /* a failure owns nothing and explains itself */
            abort();
        return 0;
    }
    size_t count = 1;
    for (int i = 0; i < a.ndim; ++i)
        count *= (size_t)a.shape[i];
    if (count != a.count || a.ndim < 0 || a.ndim > NPY_MAX_DIMS)
        abort();
    /* Every byte of the array must be there (ASan checks the reads). */
    const unsigned char *bytes = a.data;
    for (size_t i = 0; i < a.count * npy_dtype_size(a.dtype); ++i)
        sink ^= bytes[i];
    char shape[512];
    npy_shape_string(a.ndim, a.shape, shape, sizeof shape);
    int32_t *ints = NULL;
    const npy_status ist = npy_to_int32(&a, &ints, err, sizeof err);
    if ((ist == NPY_OK) != (ints != NULL))
        abort();
    if (ints && a.count)
        sink ^= (unsigned char)ints[a.count - 1];
    free(ints);
    npy_free(&a);
    return 0;
}
