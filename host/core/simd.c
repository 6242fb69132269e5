/* Which SIMD registers a CPU device's compiler targets (how wide, how many), from the device's name
 * and reported float width. No device calls here, so that tests/tune/test_cpu_row.c runs it without
 * OpenCL. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>

/* LLVM CPU names as PoCL puts them into its device names ("pthread-haswell-AMD EPYC",
 * "cpu-skylake-avx512-Intel(R) Xeon(R) ..."): PoCL compiles for that target, and its reported
 * native float width is the host's, not the target's (Debian's PoCL 3.1 with POCL_KERNELLIB_NAME=avx2
 * on an AVX-512 host reports 16 and compiles for haswell: 8 floats, 16 ymm registers; objdump of
 * its kernels shows no zmm). Checked in order: the AVX-512 names first ("skylake-avx512" also
 * contains "skylake"). */
typedef struct simd_target {
    const char *name;
    int width, registers;
} simd_target;

static const simd_target targets[] = {
    /* AVX-512: 16 floats, 32 zmm registers */
    {"avx512", 16, 32},         {"cascadelake", 16, 32},   {"cooperlake", 16, 32}, {"cannonlake", 16, 32},
    {"icelake", 16, 32},        {"tigerlake", 16, 32},     {"rocketlake", 16, 32}, {"sapphirerapids", 16, 32},
    {"emeraldrapids", 16, 32},  {"graniterapids", 16, 32}, {"znver4", 16, 32},     {"znver5", 16, 32},
    {"x86-64-v4", 16, 32},      {"knl", 16, 32},           {"knm", 16, 32},
    /* AVX and AVX2: 8 floats, 16 ymm registers */
    {"haswell", 8, 16},         {"broadwell", 8, 16},      {"skylake", 8, 16},     {"alderlake", 8, 16},
    {"raptorlake", 8, 16},      {"meteorlake", 8, 16},     {"arrowlake", 8, 16},   {"lunarlake", 8, 16},
    {"gracemont", 8, 16},       {"sierraforest", 8, 16},   {"znver1", 8, 16},      {"znver2", 8, 16},
    {"znver3", 8, 16},          {"bdver", 8, 16},          {"x86-64-v3", 8, 16},   {"sandybridge", 8, 16},
    {"ivybridge", 8, 16},       {"btver2", 8, 16},
    /* SSE: 4 floats, 16 xmm registers */
    {"nehalem", 4, 16},         {"westmere", 4, 16},       {"core2", 4, 16},       {"penryn", 4, 16},
    {"silvermont", 4, 16},      {"goldmont", 4, 16},       {"tremont", 4, 16},     {"x86-64-v2", 4, 16},
    {"btver1", 4, 16},
    /* AArch64 NEON: 4 floats, 32 registers */
    {"cortex-a", 4, 32},        {"neoverse", 4, 32},       {"apple-", 4, 32},      {"carmel", 4, 32},
};

void mhla__simd_of(const char *device_name, int reported_width, mhla_simd *out)
{
    memset(out, 0, sizeof *out);
    const int reported = reported_width > 0 ? reported_width : 1;
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; ++i) {
        /* Inside the name, after a '-' (PoCL's "<driver>-<target>-<model>"): a model name such as
         * "Intel(R) Core(TM) i7" never matches by accident. */
        const char *p = device_name ? strstr(device_name, targets[i].name) : NULL;
        if (p && p > device_name && p[-1] == '-') {
            out->width = targets[i].width < reported ? targets[i].width : reported;
            out->registers = targets[i].registers;
            snprintf(out->target, sizeof out->target, "%s", targets[i].name);
            return;
        }
    }
    /* Unknown target (a vendor CPU runtime names the model, not the target): what the device
     * reports. 16 floats per register means AVX-512 (32 registers); every narrower x86 SIMD has 16. */
    out->width = reported;
    out->registers = reported >= 16 ? 32 : 16;
    snprintf(out->target, sizeof out->target, "reported");
}
