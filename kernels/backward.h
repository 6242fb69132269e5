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

#endif /* MHLA_KERNELS_BACKWARD_H */
