/* Chunk tables: where each chunk of a (packed) batch lies, its summary slot and its prefix tiles,
 * built on the host and copied to the device for the chunk form's kernels. */
#include "causal/causal.h"

#include <string.h>

/* ---- chunk tables ------------------------------------------------------------------------ */

/* Room for one more entry of `size` bytes in a growing array: returns the (possibly moved) array,
 * or NULL when out of memory (the old array stays valid). */
static void *grow(void *arr, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return arr;
    const size_t ncap = *cap ? *cap * 2 : 64;
    void *grown = mhla__realloc(arr, ncap * size);
    if (grown)
        *cap = ncap;
    return grown;
}

#define PUSH(st, ctx, arr, n, cap, value)                                                           \
    do {                                                                                            \
        void *room_ = grow((arr), (n), &(cap), sizeof *(arr));                                      \
        MHLA_FAIL_IF(st, !room_, ctx, MHLA_ERR_OUT_OF_HOST_MEMORY, "out of host memory for chunk tables"); \
        (arr) = room_;                                                                              \
        (arr)[(n)++] = (value);                                                                     \
    } while (0)

static cl_int4 int4_of(int64_t x, int64_t y, int64_t z, int64_t w)
{
    cl_int4 e;
    e.s[0] = (cl_int)x, e.s[1] = (cl_int)y, e.s[2] = (cl_int)z, e.s[3] = (cl_int)w;
    return e;
}

mhla_status mhla__chunk_tables_add(mhla_context *ctx, mhla_chunk_tables *t, int64_t start, int64_t len,
                                   int64_t first_chunk, int64_t slot_base, int64_t chunk,
                                   const mhla_tiles *tiling)
{
    mhla_status st = MHLA_OK;
    const int64_t nchunks = (len + chunk - 1) / chunk, pr = mhla__prefix_tile_rows(tiling), gr = tiling->gemm_rows;
    int64_t tile_rows = 0; /* rows left in the open tile */
    for (int64_t c = 0; c < nchunks; ++c) {
        const int64_t i = first_chunk + c, off = c * chunk, clen = len - off < chunk ? len - off : chunk;
        /* Tiles start at multiples of mix_mr in i, so none straddles a GEMM block. */
        if (tile_rows == 0) {
            tile_rows = pr - i % pr;
            if (tile_rows > nchunks - c)
                tile_rows = nchunks - c;
            PUSH(st, ctx, t->tiles, t->n_tiles, t->cap_tiles, int4_of((int64_t)t->n_chunks, tile_rows, i, slot_base));
        }
        --tile_rows;
        /* Chunks past the first GEMM block read the earlier blocks through one SGEMM per block. */
        if (gr > 0 && i >= gr) {
            mhla_prefix_gemm *last = t->n_gemms ? &t->gemms[t->n_gemms - 1] : NULL;
            if (c > 0 && i % gr != 0 && last && last->i0 + last->rows == (size_t)i && last->slot_base == (size_t)slot_base)
                ++last->rows;
            else {
                const mhla_prefix_gemm g = {t->n_chunks, 1, (size_t)i, (size_t)(i / gr * gr), (size_t)slot_base};
                PUSH(st, ctx, t->gemms, t->n_gemms, t->cap_gemms, g);
            }
        }
        PUSH(st, ctx, t->chunks, t->n_chunks, t->cap_chunks, int4_of(start + off, clen, i, slot_base));
        if (clen > t->max_len)
            t->max_len = clen;
        if (slot_base + i + 1 > t->slots)
            t->slots = slot_base + i + 1;
    }
cleanup:
    return st;
}

void mhla__chunk_tables_free(mhla_chunk_tables *t)
{
    mhla__free(t->chunks);
    mhla__free(t->tiles);
    mhla__free(t->gemms);
    memset(t, 0, sizeof *t);
}

mhla_status mhla__chunk_tables_upload(mhla_context *ctx, const mhla_chunk_tables *t, cl_mem *chunks, cl_mem *tiles)
{
    mhla_status st = MHLA_OK;
    cl_int err = CL_SUCCESS;
    *chunks = *tiles = NULL;
    MHLA_FAIL_IF(st, t->n_chunks == 0 || t->n_tiles == 0, ctx, MHLA_ERR_INVALID_ARGUMENT,
                 "internal: an empty chunk table (no tokens to run)");
    *chunks = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                     t->n_chunks * sizeof(cl_int4), t->chunks, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (chunk table)");
    *tiles = mhla__cl_create_buffer(ctx->cl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, t->n_tiles * sizeof(cl_int4),
                                    t->tiles, &err);
    MHLA_CL_TRY(st, ctx, err, "clCreateBuffer (prefix tile table)");
cleanup:
    if (st != MHLA_OK) {
        if (*chunks)
            clReleaseMemObject(*chunks);
        *chunks = *tiles = NULL;
    }
    return st;
}

/* ---- the three stages --------------------------------------------------------------------- */
