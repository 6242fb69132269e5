/* Device peak probes for mhla-bench (in the manner of clpeak): the achievable f32 multiply-add
 * throughput and copy bandwidth, so that every benchmark row can be read as a fraction of what
 * the device can do. Built by bench/peak.c, not by the library. */

/* Independent multiply-add chains per work-item: enough to cover the FMA latency of a CPU core
 * (4-5 cycles x 2 pipes) without spilling; GPUs hide latency across work-items anyway. */
#define PEAK_CHAINS 8

/* x = x * y + z keeps every chain bounded (|y| < 1 gives the fixed point z / (1 - y)), so no
 * value overflows or becomes denormal (which is slow on CPUs), and the compiler cannot fold a
 * chain whose y and z arrive at run time. */
#define PEAK_STEP                                                                                \
    a0 = mad(a0, y, z);                                                                             \
    a1 = mad(a1, y, z);                                                                             \
    a2 = mad(a2, y, z);                                                                             \
    a3 = mad(a3, y, z);                                                                             \
    a4 = mad(a4, y, z);                                                                             \
    a5 = mad(a5, y, z);                                                                             \
    a6 = mad(a6, y, z);                                                                             \
    a7 = mad(a7, y, z);

/* Each work-item runs reps * 4 * PEAK_CHAINS multiply-adds of its vector width (2 flops per lane)
 * and writes its whole vector, so that no lane is dead code. */
#define PEAK_FMA_KERNEL(name, T)                                                                    \
    kernel void name(global T *restrict out, const float ys, const float zs, const int reps)   \
    {                                                                                               \
        const T y = (T)(ys), z = (T)(zs);                                                           \
        const float seed = (float)get_global_id(0) * 1e-7f;                                         \
        T a0 = (T)(seed), a1 = a0 + (T)(1e-3f), a2 = a0 + (T)(2e-3f), a3 = a0 + (T)(3e-3f);         \
        T a4 = a0 + (T)(4e-3f), a5 = a0 + (T)(5e-3f), a6 = a0 + (T)(6e-3f), a7 = a0 + (T)(7e-3f);   \
        for (int r = 0; r < reps; ++r) {                                                            \
            PEAK_STEP                                                                            \
            PEAK_STEP                                                                            \
            PEAK_STEP                                                                            \
            PEAK_STEP                                                                            \
        }                                                                                           \
        const T s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));                              \
        out[get_global_id(0)] = s;                                                                  \
    }

/* The host builds the chains up to the device's float width (at least 4): a wider vector would only
 * be split, and passing one to mad() changes the ABI on CPUs without it (a compiler warning). */
#ifndef PEAK_WIDTH
#define PEAK_WIDTH 4
#endif
PEAK_FMA_KERNEL(peak_fma4, float4)
#if PEAK_WIDTH >= 8
PEAK_FMA_KERNEL(peak_fma8, float8)
#endif
#if PEAK_WIDTH >= 16
PEAK_FMA_KERNEL(peak_fma16, float16)
#endif

/* One float4 per work-item read and written: what a streaming kernel can move per second. */
kernel void peak_copy(global const float4 *restrict in, global float4 *restrict out)
{
    const size_t i = get_global_id(0);
    out[i] = in[i];
}
