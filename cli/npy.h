/* NumPy .npy files (format versions 1.0, 2.0 and 3.0) of float32, float16, int32 or int64,
 * little-endian, C order: a reader that validates everything before it allocates, and an atomic
 * writer. */
#ifndef MHLA_CLI_NPY_H
#define MHLA_CLI_NPY_H

#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 32 /* NumPy 1.x's NPY_MAXDIMS */

typedef enum npy_status {
    NPY_OK = 0,
    NPY_ERR_INPUT = 1,     /* the file cannot be opened or read, or is not a supported .npy */
    NPY_ERR_CREATE = 2,    /* the output's temporary file cannot be created (directory, rights) */
    NPY_ERR_WRITE = 3,     /* writing, syncing or renaming the output failed */
    NPY_ERR_NO_MEMORY = 4, /* host allocation failed */
    NPY_ERR_ARGUMENT = 5   /* a NULL pointer, a bad rank or a negative extent from the caller */
} npy_status;

typedef enum npy_dtype {
    NPY_F32 = 0, /* '<f4' */
    NPY_F16 = 1, /* '<f2', stored as uint16_t bit patterns */
    NPY_I32 = 2, /* '<i4' (offsets such as cu_seqlens) */
    NPY_I64 = 3  /* '<i8' */
} npy_dtype;

/* "float32", "float16", "int32" or "int64", as NumPy names them. */
const char *npy_dtype_name(npy_dtype dtype);
size_t npy_dtype_size(npy_dtype dtype);

typedef struct npy_array {
    npy_dtype dtype;
    int ndim;                     /* 0 for a scalar array */
    int64_t shape[NPY_MAX_DIMS];  /* extents, C order */
    size_t count;                 /* product of the extents (1 for a scalar) */
    void *data;                   /* count elements in host byte order; free with npy_free() */
} npy_array;

/*! npy_read() :
 * Reads a whole .npy file. The header must be a dict with exactly the keys 'descr' ('<f4', '<f2',
 * '<i4', '<i8';
 * '=' and '|' mean the host's order), 'fortran_order' (False) and 'shape' (a tuple of
 * non-negative ints), in any order, with any spacing and an optional trailing comma. The data
 * size the header declares is compared with the file's size before anything is allocated: a
 * shorter file is truncated, a longer one has bytes after the array.
 * @err, @err_size: receives a one-line explanation on failure (without the path).
 * @return NPY_OK (out filled, out->data owned by the caller), NPY_ERR_INPUT, NPY_ERR_NO_MEMORY
 *         or NPY_ERR_ARGUMENT; on failure *out holds no allocation. */
npy_status npy_read(const char *path, npy_array *out, char *err, size_t err_size);

/*! npy_read_header() : npy_read() without the data: out->shape and out->count are the file's,
 * out->data is NULL. The same checks (the file's size against the header included). */
npy_status npy_read_header(const char *path, npy_array *out, char *err, size_t err_size);

/*! npy_read_range() : npy_read() of indices [start, start + len) along `axis` only (a rank's token
 * range): out->shape is the file's with shape[axis] = len; only those bytes are read (one pread per
 * outer index). Indices outside the file's shape are NPY_ERR_INPUT, naming them. */
npy_status npy_read_range(const char *path, int axis, int64_t start, int64_t len, npy_array *out, char *err,
                          size_t err_size);

/*! npy_free() : frees out->data and clears it. Accepts NULL and a zeroed array. */
void npy_free(npy_array *a);

/*! npy_to_int32() :
 * The elements of an int32 or int64 array as int32, malloc'd into *out (a.count of them, at least
 * one byte allocated). An int64 element outside the int32 range is refused, naming its index and
 * value; so is a float array.
 * @return NPY_OK, NPY_ERR_INPUT (dtype or range), NPY_ERR_NO_MEMORY or NPY_ERR_ARGUMENT; on
 *         failure *out is NULL. */
npy_status npy_to_int32(const npy_array *a, int32_t **out, char *err, size_t err_size);

/*! npy_shape_string() : "(2, 8, 4)" ("(5,)" for one dimension, "()" for none) into buf. */
const char *npy_shape_string(int ndim, const int64_t *shape, char *buf, size_t size);

/* An output written atomically: a temporary file beside the target, renamed over it only once
 * everything is written and synced, so that a failure never leaves a partial file behind. */
typedef struct npy_writer {
    char *path; /* target */
    char *tmp;  /* the temporary while it exists, else NULL */
    int fd;
} npy_writer;

/*! npy_writer_open() :
 * Creates the temporary file (".<name>.tmp-XXXXXX" in the target's directory, mode 0666 less the
 * umask) so that an unwritable destination is reported before any work is done. Reads the umask
 * by setting it: call it before other threads start creating files.
 * @return NPY_OK, NPY_ERR_CREATE, NPY_ERR_NO_MEMORY or NPY_ERR_ARGUMENT. */
npy_status npy_writer_open(npy_writer *w, const char *path, char *err, size_t err_size);

/*! npy_writer_commit() :
 * Writes a version 1.0 .npy (header padded with spaces and '\n' to a multiple of 64 bytes, as
 * NumPy writes it) of `count` = product(shape) elements of `dtype` in host order, syncs it and
 * renames it over the target. On failure the temporary is removed. The writer is closed either
 * way (npy_writer_abort() is then a no-op).
 * @return NPY_OK, NPY_ERR_WRITE, NPY_ERR_NO_MEMORY or NPY_ERR_ARGUMENT. */
npy_status npy_writer_commit(npy_writer *w, npy_dtype dtype, int ndim, const int64_t *shape, const void *data,
                             char *err, size_t err_size);

/*! npy_writer_abort() : removes the temporary, if any, and releases the writer. Accepts NULL and
 * a writer that was committed, aborted or never opened (zeroed). */
void npy_writer_abort(npy_writer *w);

/*! npy_write() : npy_writer_open() then npy_writer_commit(). */
npy_status npy_write(const char *path, npy_dtype dtype, int ndim, const int64_t *shape, const void *data, char *err,
                     size_t err_size);

#endif /* MHLA_CLI_NPY_H */
