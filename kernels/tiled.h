/* The tiled kernels' row pieces (summary_tiled.cl, output_tiled.cl): four consecutive values of a
 * row as one float4, zeros past the row's end. Where a row holds whole float4 (its length a multiple
 * of 4, f32 storage) the piece is read as one aligned 16-byte load: vload4 promises only the
 * alignment of a float, and a GPU compiler then splits it into four loads. */
#ifndef MHLA_KERNELS_TILED_H
#define MHLA_KERNELS_TILED_H

/* A caller's buffer starts wherever its memory does (CL_MEM_USE_HOST_PTR: PoCL uses the caller's
 * memory as it is, and an aligned load from a misaligned one faults): its own address decides,
 * once per work-item, as kernels/stream.h's NT_OK does. The library's own buffers are aligned. */
#define TILED_BASE_OK(buf) ((((uintptr_t)(buf)) & (uintptr_t)15) == 0)

/* The summaries' rows ([M][B*H][Dk][Dv], then z: kernels/common.h) start on 16 bytes where Dk and Dv
 * are multiples of 4. */
#define TILED_SUMMARY_ALIGNED (DK % 4 == 0 && DV % 4 == 0)

/* row[c..c+3] of a row with `left` values from `row` on; `aligned`: the row and c are 16-byte
 * aligned (the same for every work-item of a launch). */
float4 tiled_quad(global const STORE_T *row, const int c, const int left, const int aligned)
{
    if (c + 4 <= left) {
#if DTYPE == 0
        if (aligned)
            return *(global const float4 *)(row + c);
#endif
        return LOADN(4, 0, row + c);
    }
    (void)aligned;
    float4 x = (float4)(0.0f);
    if (c < left)
        x.s0 = LOADN(1, c, row);
    if (c + 1 < left)
        x.s1 = LOADN(1, c + 1, row);
    if (c + 2 < left)
        x.s2 = LOADN(1, c + 2, row);
    return x;
}

/* The same from a row of floats (the mixed summaries). */
float4 tiled_quad_f32(global const float *row, const int c, const int left, const int aligned)
{
    if (c + 4 <= left)
        return aligned ? *(global const float4 *)(row + c) : vload4(0, row + c);
    float4 x = (float4)(0.0f);
    if (c < left)
        x.s0 = row[c];
    if (c + 1 < left)
        x.s1 = row[c + 1];
    if (c + 2 < left)
        x.s2 = row[c + 2];
    return x;
}

/* The same through the feature map; zeros (not phi(0)) past the row's end. */
float4 tiled_feature_quad(global const STORE_T *row, const int c, const int left, const int aligned,
                          const float feature_eps)
{
    const float4 x = tiled_quad(row, c, left, aligned);
    float4 f = (float4)(feature(x.s0, feature_eps), feature(x.s1, feature_eps), feature(x.s2, feature_eps),
                        feature(x.s3, feature_eps));
    if (c + 4 > left)
        f = (float4)(c < left ? f.s0 : 0.0f, c + 1 < left ? f.s1 : 0.0f, c + 2 < left ? f.s2 : 0.0f, 0.0f);
    return f;
}

/* x into p[0..3] of a float row with `left` values from p on. */
void tiled_store_f32(const float4 x, global float *p, const int left, const int aligned)
{
    if (left >= 4) {
        if (aligned)
            *(global float4 *)p = x;
        else
            vstore4(x, 0, p);
        return;
    }
    p[0] = x.s0;
    if (left > 1)
        p[1] = x.s1;
    if (left > 2)
        p[2] = x.s2;
}

/* x into row[0..3] of a stored row with `left` values from row on (the read-outs' rows). */
void tiled_store(const float4 x, global STORE_T *row, const int left, const int aligned)
{
#if DTYPE == 0
    tiled_store_f32(x, row, left, aligned);
#else
    (void)aligned;
    if (left >= 4) {
        STOREN(4, x, 0, row);
        return;
    }
    STOREN(1, x.s0, 0, row);
    if (left > 1)
        STOREN(1, x.s1, 1, row);
    if (left > 2)
        STOREN(1, x.s2, 2, row);
#endif
}

/* x's four values into rows d..d+3 at column `col` (in floats) of a local array whose rows are
 * `row4` float4: a piece of a token's row stored transposed, so that one float4 read of a row then
 * serves 4 tokens (the read-outs' tiles of q~, dO, v or k~, and a summary's rows read transposed). */
void tiled_put_column(local float4 *a, const int row4, const int d, const int col, const float4 x)
{
    local float *c = (local float *)a + col;
    c[(d + 0) * 4 * row4] = x.s0;
    c[(d + 1) * 4 * row4] = x.s1;
    c[(d + 2) * 4 * row4] = x.s2;
    c[(d + 3) * 4 * row4] = x.s3;
}

/* acc += a b^T for a work-item's 4 x 4 tile: the rows of a (4 key rows, or 4 tokens) times the row b
 * (4 columns) read from local memory once per step. */
void tiled_mad4x4(float4 acc[4], const float4 a, const float4 b)
{
    acc[0] += a.x * b;
    acc[1] += a.y * b;
    acc[2] += a.z * b;
    acc[3] += a.w * b;
}

#endif
