/* Device peak probes for mhla-bench (in the manner of clpeak): the achievable f32 multiply-add
 * throughput and copy bandwidth, so that every benchmark row can be read as a fraction of what
 * the device can do. Built by bench/peak.c, not by the library. */

/* Independent multiply-add chains per work-item: enough to cover the FMA latency of a CPU core
 * (4-5 cycles x 2 pipes) without spilling; GPUs hide latency across work-items anyway. */
#define PEAK_CHAINS 8

/* Two forms of the multiply-add: mad() lets the compiler pick whatever is fastest, and fma() is
 * the fused instruction. Neither is the faster everywhere: PoCL's kernel library compiles mad() as
 * a multiply and an add (on Intel cores both use the same two ports, so a mad() probe reads about
 * half of what fma() reaches: docs/tuning-notes.md "The bench's reference rows"), while a device
 * without fused hardware emulates fma() in software. The host builds the fma() kernels only where
 * the device reports CL_FP_FMA and keeps the faster form.
 * x = x * y + z keeps every chain bounded (|y| < 1 gives the fixed point z / (1 - y)), so no
 * value overflows or becomes denormal (which is slow on CPUs), and the compiler cannot fold a
 * chain whose y and z arrive at run time. */
#define PEAK_STEP(OP)                                                                               \
    a0 = OP(a0, y, z);                                                                              \
    a1 = OP(a1, y, z);                                                                              \
    a2 = OP(a2, y, z);                                                                              \
    a3 = OP(a3, y, z);                                                                              \
    a4 = OP(a4, y, z);                                                                              \
    a5 = OP(a5, y, z);                                                                              \
    a6 = OP(a6, y, z);                                                                              \
    a7 = OP(a7, y, z);

/* Each work-item runs reps * 4 * PEAK_CHAINS multiply-adds of its vector width (2 flops per lane)
 * and writes its whole vector, so that no lane is dead code. */
#define PEAK_FMA_KERNEL(name, T, OP)                                                                \
    kernel void name(global T *restrict out, const float ys, const float zs, const int reps)        \
    {                                                                                               \
        const T y = (T)(ys), z = (T)(zs);                                                           \
        const float seed = (float)get_global_id(0) * 1e-7f;                                         \
        T a0 = (T)(seed), a1 = a0 + (T)(1e-3f), a2 = a0 + (T)(2e-3f), a3 = a0 + (T)(3e-3f);         \
        T a4 = a0 + (T)(4e-3f), a5 = a0 + (T)(5e-3f), a6 = a0 + (T)(6e-3f), a7 = a0 + (T)(7e-3f);   \
        for (int r = 0; r < reps; ++r) {                                                            \
            PEAK_STEP(OP)                                                                           \
            PEAK_STEP(OP)                                                                           \
            PEAK_STEP(OP)                                                                           \
            PEAK_STEP(OP)                                                                           \
        }                                                                                           \
        const T s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));                              \
        out[get_global_id(0)] = s;                                                                  \
    }

/* The host builds the chains up to the device's float width (at least 4): a wider vector would only
 * be split, and passing one to mad() changes the ABI on CPUs without it (a compiler warning). */
#ifndef PEAK_WIDTH
#define PEAK_WIDTH 4
#endif
#if PEAK_WIDTH >= 8
#define PEAK_IF8(x) x
#else
#define PEAK_IF8(x)
#endif
#if PEAK_WIDTH >= 16
#define PEAK_IF16(x) x
#else
#define PEAK_IF16(x)
#endif
/* peak_mad4, peak_mad8, peak_mad16 (and peak_fma*): chains of OP, up to PEAK_WIDTH. */
#define PEAK_KERNELS(OP)                                                                            \
    PEAK_FMA_KERNEL(peak_##OP##4, float4, OP)                                                       \
    PEAK_IF8(PEAK_FMA_KERNEL(peak_##OP##8, float8, OP))                                             \
    PEAK_IF16(PEAK_FMA_KERNEL(peak_##OP##16, float16, OP))
PEAK_KERNELS(mad)
#if PEAK_FUSED
PEAK_KERNELS(fma)
#endif

/* One float4 per work-item read and written: what a streaming kernel can move per second. */
kernel void peak_copy(global const float4 *restrict in, global float4 *restrict out)
{
    const size_t i = get_global_id(0);
    out[i] = in[i];
}

/* mhla-bench's gate on GPUs (bench/gate.c): one work-item's chain of `reps` dependent
 * multiply-adds, a device-side wait of a calibrated length that a run's commands queue up behind
 * (a user event holds them on the host instead, and some runtimes then take tens of microseconds to
 * start them). The result is written so that the chain is not dead code. */
kernel void bench_spin(global float *restrict out, const float y, const int reps)
{
    float a = (float)get_global_id(0) * 1e-7f;
    for (int r = 0; r < reps; ++r)
        a = mad(a, y, 0.5f);
    out[0] = a;
}
