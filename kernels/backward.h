/* Shared by the backward kernels: their tile defaults and the feature map's derivative. */
#ifndef MHLA_KERNELS_BACKWARD_H
#define MHLA_KERNELS_BACKWARD_H

#ifndef BWD_VE
#define BWD_VE 16 /* gradient-summary columns per work-item */
#endif
#define BWD_CT ((DV + 1 + BWD_VE - 1) / BWD_VE) /* column tiles of a Dk x (Dv+1) summary row */
#ifndef BWD_WG
#define BWD_WG 64 /* work-items of one dMc reduction (a power of two) */
#endif

/* phi'(x) (SPEC.md "Backward"): 1 for x > 0 and 0 otherwise (relu, relu-eps), exp(x) for x <= 0
 * (elu1), 1 for none. */
float feature_grad(const float x)
{
#if FEATURE_MAP == 0
    (void)x;
    return 1.0f;
#elif FEATURE_MAP == 1 || FEATURE_MAP == 2
    return x > 0.0f ? 1.0f : 0.0f;
#else
    return x > 0.0f ? 1.0f : exp(x);
#endif
}

/* ---- the causal backward's chunk table and slots (backward_causal*.cl) ---- */
#define SC (DV + 1)
#define ENT(k, f) tab[(k) * 8 + (f)]

long bc_slot(const int k, const int h, const int heads)
{
    return ((long)k * heads + h) * (DK * SC);
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
