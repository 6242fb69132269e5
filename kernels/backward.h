/* Shared by the backward kernels: their tile defaults and the feature map's derivative. */
#ifndef MHLA_KERNELS_BACKWARD_H
#define MHLA_KERNELS_BACKWARD_H

/* The backward kernels' vectors (host/backward/backward.c sets them from the device's row): the vector width,
 * the widths that divide Dk and Dv, and tokens per work-item. The defaults are a build without the
 * host's flags (the kernels' syntax check), as wide as the default DK and DV allow. */
#ifndef BWD_VW
#define BWD_VW 8
#endif
#ifndef BWD_VK
#if DK % 8 == 0
#define BWD_VK 8
#else
#define BWD_VK 1
#endif
#endif
#ifndef BWD_VV
#if DV % 8 == 0
#define BWD_VV 8
#else
#define BWD_VV 1
#endif
#endif
#ifndef BWD_RT
#define BWD_RT 2
#endif

/* phi'(x) lane by lane (docs/spec.md "Backward"): 1 for x > 0 and 0 otherwise, at 0 too (relu,
 * relu-eps), exp(x) for x <= 0 (elu1), 1 for none. */
#if FEATURE_MAP == 0
#define FEATURE_GRAD_V(W, x) ((VEC(W))(1.0f))
#elif FEATURE_MAP == 1 || FEATURE_MAP == 2
#define FEATURE_GRAD_V(W, x) select((VEC(W))(0.0f), (VEC(W))(1.0f), (x) > (VEC(W))(0.0f))
#else
#define FEATURE_GRAD_V(W, x) select(exp(x), (VEC(W))(1.0f), (x) > (VEC(W))(0.0f))
#endif

/* The sum of a VEC(W)'s lanes, as a tree of halves (the same order on every device). Macros: on
 * CPUs without AVX-512 a float16 function argument changes the calling convention (a warning). */
#define BWD_HS_1(x) (x)
#define BWD_HS_2(x) ((x).s0 + (x).s1)
#define BWD_HS_4(x) BWD_HS_2((x).lo + (x).hi)
#define BWD_HS_8(x) BWD_HS_4((x).lo + (x).hi)
#define BWD_HS_16(x) BWD_HS_8((x).lo + (x).hi)
#define BWD_HSUM(W, x) CAT(BWD_HS_, W)(x)

#define BWD_NK (DK / BWD_VK) /* vectors of a Dk-wide row */
#define BWD_NV (DV / BWD_VV) /* vectors of a Dv-wide row */

/* ---- the causal backward's chunk table and slots (backward_causal*.cl) ---- */
#define SC (DV + 1)
#define ENT(k, f) tab[(k) * 8 + (f)]

long bc_slot(const int k, const int h, const int heads)
{
    return ((long)k * heads + h) * (DK * SC);
}

/* 1/den_t and dL/dden_t of the token at `at` (1 and 0 without a normalizer). */
float bct_inv(global const float *invs, const long at)
{
#if NORMALIZER == 0
    return invs[at];
#else
    (void)invs, (void)at;
    return 1.0f;
#endif
}

float bct_r(global const float *rs, const long at)
{
#if NORMALIZER == 0
    return rs[at];
#else
    (void)rs, (void)at;
    return 0.0f;
#endif
}

/* q~ of token t into qt. */
void bc_qt(global const STORE_T *q, const mhla_grid g, const int bh, const int t, const float feature_eps,
           const float scale, float *qt)
{
    global const STORE_T *row = q + row_offset(g, bh, t, DK);
    for (int d = 0; d < DK; ++d)
        qt[d] = scale * feature(LOADN(1, d, row), feature_eps);
}

float bc_dot_k(global const STORE_T *k, const mhla_grid g, const int bh, const int t, const float feature_eps,
               const float *x)
{
    global const STORE_T *row = k + row_offset(g, bh, t, DK);
    float a = 0.0f;
    for (int d = 0; d < DK; ++d)
        a += x[d] * feature(LOADN(1, d, row), feature_eps);
    return a;
}

float bc_dot_v(global const STORE_T *v, const mhla_grid g, const int bh, const int t, const float *x)
{
    global const STORE_T *row = v + row_offset(g, bh, t, DV);
    float a = 0.0f;
    for (int e = 0; e < DV; ++e)
        a += x[e] * LOADN(1, e, row);
    return a;
}

#endif /* MHLA_KERNELS_BACKWARD_H */
