/* The CPU tuning row derived from the device: which SIMD registers the device's compiler targets
 * (how wide, how many), and the register tiles of every stage sized to them. No device calls here:
 * everything comes from what the context read (name, type, reported float width), so that the
 * unit test (tests/test_cpu_row.c) runs it without OpenCL. */
#include "internal.h"

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

/* Register tiles for `registers` vector registers of `width` floats: half of the registers hold
 * accumulators, the rest the loaded vectors, broadcasts and addresses (with 16 registers, 12
 * accumulators spilled in every stage on PoCL 3.1 for haswell; with 8 they do not).
 * - Summary (k~ v^T): SUM_RD key rows x 2 vectors: 4 x 2 with 16 registers, 8 x 2 with 32.
 * - Read-out (q~ S): as many vectors as make 64 columns, up to the accumulators (q~ is mapped once
 *   per column tile and per token, so one tile across a D = 64 row maps it once), and the tokens
 *   that fill the rest: 1 x 8 with 8-float registers (16 of them), 4 x 4 with 16-float (32).
 * - Mixing and the causal prefix: rows x 2 vectors, 4 x 2 and 8 x 2.
 * Measured on PoCL 3.1 (2-core AMD EPYC, N = 4096, M = 16, H = 8, D = 64, mhla-bench medians, one
 * run each, haswell target through scripts/as-avx2): the former fixed row (summary 8 x 1, read-out
 * 4 x 2) 54-62 GFLOP/s; summary 4 x 2 and read-out 2 x 4 76-80; read-out 3 x 4, 4 x 2, 6 x 2 and
 * 5 x 2 62-72. With the q rows prefetched (kernels/output.cl), read-out 1 x 8 against 2 x 4, three
 * alternated rounds, forward minima: N = 16384 25.3-28.5 against 30.2-36.1 ms, N = 4096 6.0-6.9
 * against 6.2-6.4 (and `mhla tune`'s joint pass chose it). AVX-512 (skylake-avx512 target):
 * read-out 4 x 4 108 GFLOP/s against 83-95 for 4 x 2. bench/README.md "AVX2 and AVX-512 rows". */
void mhla__cpu_row_fill(mhla_tuning *t, const mhla_simd *s)
{
    const int acc = s->registers >= 32 ? 16 : 8;
    t->vec = s->width;
    t->vec_forced = 0;
    t->sum_ve = t->out_ve = t->mix_ve = t->sm_vw = s->width;
    t->sum_nv = 2, t->sum_rd = acc / 2;
    const int wide = 64 / (s->width > 0 ? s->width : 16); /* vectors of a 64-column row */
    t->out_nv = wide < acc ? (wide > 0 ? wide : 1) : acc;
    t->out_rt = acc / t->out_nv;
    t->mix_nv = 2, t->mix_mr = acc / 2;
    t->pre_nv = 2, t->pre_mr = acc / 2;
}
