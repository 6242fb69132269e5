/* The CPU row's derivation (host/tune/cpu_row.c), without a device: the SIMD target read from the
 * device name (PoCL's "<driver>-<llvm cpu>-<model>") or from the reported width, and the register
 * tiles sized to it. Compiled together with host/tune/cpu_row.c: the functions are internal. */
#include "tune/tune.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

typedef struct simd_case {
    const char *name;
    int reported;
    int width, registers;
    const char *target;
} simd_case;

static void test_simd_targets(void **state)
{
    (void)state;
    static const simd_case cases[] = {
        /* scripts/as-avx2: PoCL compiles for haswell on an AVX-512 host and reports the host's 16 */
        {"pthread-haswell-AMD EPYC", 16, 8, 16, "haswell"},
        {"pthread-skylake-avx512-AMD EPYC", 16, 16, 32, "avx512"},
        {"cpu-skylake-Intel(R) Core(TM) i7-6700", 8, 8, 16, "skylake"},
        {"pthread-znver3-AMD Ryzen 7 5800X", 8, 8, 16, "znver3"},
        {"pthread-znver4-AMD EPYC 9654", 16, 16, 32, "znver4"},
        {"cpu-x86-64-v3-QEMU", 8, 8, 16, "x86-64-v3"},
        {"pthread-nehalem-Intel", 4, 4, 16, "nehalem"},
        {"pthread-cortex-a76-ARM", 4, 4, 32, "cortex-a"},
        /* a target wider than what the device reports is capped to the report */
        {"pthread-skylake-avx512-X", 8, 8, 32, "avx512"},
        /* vendor runtimes name the model: the reported width decides */
        {"Intel(R) Core(TM) i9-11900K CPU @ 3.50GHz", 16, 16, 32, "reported"},
        {"Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", 8, 8, 16, "reported"},
        {"AMD Ryzen 9 7950X", 4, 4, 16, "reported"},
        /* a target name not after a '-' is a model's words, not PoCL's target */
        {"haswell-like board", 16, 16, 32, "reported"},
        {"", 0, 1, 16, "reported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_simd s;
        memset(&s, 0x5a, sizeof s);
        mhla__simd_of(cases[i].name, cases[i].reported, &s);
        if (s.width != cases[i].width || s.registers != cases[i].registers || strcmp(s.target, cases[i].target) != 0)
            fail_msg("'%s' reporting %d: %d floats x %d registers (%s), expected %d x %d (%s)", cases[i].name,
                     cases[i].reported, s.width, s.registers, s.target, cases[i].width, cases[i].registers,
                     cases[i].target);
    }
    mhla_simd s;
    mhla__simd_of(NULL, 8, &s);
    assert_int_equal(s.width, 8);
    assert_int_equal(s.registers, 16);
}

/* Every stage's accumulators take a quarter to a half of the registers, in vectors of the target's
 * width, and the read-out tile spans 64 columns where the accumulators allow (q~ mapped once per
 * token for D = 64). */
static void test_row_fits_registers(void **state)
{
    (void)state;
    static const mhla_simd targets[] = {{8, 16, "haswell"}, {16, 32, "avx512"}, {4, 16, "nehalem"}, {4, 32, "neon"}};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; ++i) {
        const mhla_simd *s = &targets[i];
        mhla_tuning t;
        memset(&t, 0, sizeof t);
        t.vec_forced = 1;
        mhla__cpu_row_fill(&t, s);
        const int tiles[][2] = {{t.sum_rd, t.sum_nv}, {t.out_rt, t.out_nv}, {t.mix_mr, t.mix_nv}, {t.pre_mr, t.pre_nv}};
        for (size_t k = 0; k < 4; ++k) {
            /* the summary's k~ come from local memory (sum_lk): its tile may take three quarters */
            const int acc = tiles[k][0] * tiles[k][1], most = k == 0 ? s->registers * 3 / 4 : s->registers / 2;
            if (acc * 4 < s->registers || acc > most)
                fail_msg("%s (%d registers): stage %zu holds %d accumulators (%d x %d)", s->target, s->registers, k,
                         acc, tiles[k][0], tiles[k][1]);
        }
        if (t.bwd_acc * 4 < s->registers || t.bwd_acc * 2 > s->registers)
            fail_msg("%s (%d registers): the backward's read-outs hold %d accumulators", s->target, s->registers,
                     t.bwd_acc);
        /* the causal scores: 8 independent chains (and their operands) within the registers */
        if (t.sc_rt * t.sc_kv != 8 || t.sc_rt * t.sc_kv + t.sc_kv + 1 > s->registers)
            fail_msg("%s (%d registers): causal score steps of %d x %d", s->target, s->registers, t.sc_rt, t.sc_kv);
        assert_int_equal(t.vec, s->width);
        assert_int_equal(t.vec_forced, 0);
        assert_int_equal(t.sum_ve, s->width);
        assert_int_equal(t.out_ve, s->width);
        assert_int_equal(t.mix_ve, s->width);
        assert_int_equal(t.sm_vw, s->width);
        const int cols = t.out_nv * s->width;
        if (cols != 64 && t.out_nv != s->registers / 2)
            fail_msg("%s: the read-out spans %d columns in %d vectors", s->target, cols, t.out_nv);
    }
    /* the two x86 rows the bench tables report (docs/performance.md) */
    mhla_tuning t;
    memset(&t, 0, sizeof t);
    mhla__cpu_row_fill(&t, &targets[0]);
    assert_true(t.sum_rd == 6 && t.sum_nv == 2 && t.out_rt == 1 && t.out_nv == 8 && t.mix_mr == 2 && t.bwd_acc == 8);
    mhla__cpu_row_fill(&t, &targets[1]);
    assert_true(t.sum_rd == 6 && t.sum_nv == 4 && t.out_rt == 4 && t.out_nv == 4 && t.mix_mr == 4 && t.bwd_acc == 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simd_targets),
        cmocka_unit_test(test_row_fits_registers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
