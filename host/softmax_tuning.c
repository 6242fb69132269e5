/* Tuning data of the softmax baseline (kernels/softmax.cl): query rows per work-group, keys per
 * local-memory tile and vector width, looked up by vendor, then device type, ending at a default.
 * MHLA_SOFTMAX_TILE="BQ,BK,VW[,COPY_ROWS]" overrides the table for experiments. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct softmax_tuning_entry {
    const char *vendor;    /* substring of CL_DEVICE_VENDOR, matched without case; NULL = any */
    cl_device_type type;   /* CL_DEVICE_TYPE_ALL = any */
    mhla_softmax_tile tile; /* vw 0 = the device's preferred float vector width */
} softmax_tuning_entry;

static const softmax_tuning_entry table[] = {
    /* PoCL and other CPU drivers: whole AVX/AVX-512 registers along the keys and the values, the
     * tiles copied row by row (contiguous, vectorized), and 256 query rows per group so that the
     * copy is amortized. PoCL 3.1 on a 2-core AVX-512 EPYC, N = 2048, H = 8, D = 64, process CPU
     * time (robust to the machine's other load), best of 5: BQ 64/128/256/512 -> 205/196/165/155
     * ms; BK 32/64/128 -> 204/165/210 ms; float4/8/16 -> 275/175/165 ms; element-wise copy 188 ms
     * against rows' 165. */
    {NULL, CL_DEVICE_TYPE_CPU, {256, 64, 0, 1}},
    /* GPUs: float4 loads from local memory and 16-key tiles keep the private score row in
     * registers (the layout of llama.cpp's OpenCL flash attention); coalesced tile copies. */
    {NULL, CL_DEVICE_TYPE_GPU, {64, 16, 4, 0}},
    /* Anything else (accelerators, unknown types). */
    {NULL, CL_DEVICE_TYPE_ALL, {32, 16, 4, 0}},
};

static int contains_nocase(const char *hay, const char *needle)
{
    const size_t n = strlen(needle);
    for (; *hay; ++hay) {
        size_t i = 0;
        while (i < n && hay[i] && (hay[i] | 32) == (needle[i] | 32))
            ++i;
        if (i == n)
            return 1;
    }
    return 0;
}

void mhla__softmax_tuning(const mhla_context *ctx, mhla_softmax_tile *tile)
{
    *tile = table[sizeof table / sizeof table[0] - 1].tile;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        const softmax_tuning_entry *e = &table[i];
        if ((e->vendor && !contains_nocase(ctx->vendor, e->vendor)) ||
            (e->type != CL_DEVICE_TYPE_ALL && !(ctx->limits.type & e->type)))
            continue;
        *tile = e->tile;
        break;
    }
    const char *env = getenv("MHLA_SOFTMAX_TILE");
    int bq = 0, bk = 0, vw = 0, rows = tile->copy_rows;
    const int fields = env ? sscanf(env, "%d,%d,%d,%d", &bq, &bk, &vw, &rows) : 0;
    if (fields >= 3 && bq > 0 && bk > 0 && vw >= 0) {
        tile->bq = bq;
        tile->bk = bk;
        tile->vw = vw;
        tile->copy_rows = rows != 0;
    }
    if (tile->vw == 0) {
        cl_uint pref = 0;
        if (clGetDeviceInfo(ctx->device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof pref, &pref, NULL) !=
            CL_SUCCESS)
            pref = 4;
        tile->vw = (int)pref;
    }
    /* The kernel's vector types: 1, 2, 4, 8 or 16 wide; the tile a multiple of that. */
    int w = 1;
    while (w < 16 && w * 2 <= tile->vw)
        w *= 2;
    tile->vw = w;
    if (tile->bk < tile->vw)
        tile->bk = tile->vw;
    tile->bk = tile->bk / tile->vw * tile->vw;
}
