/* mhla-bench's blas op against the double-precision reference: the host forward its rows time
 * (bench_blas_forward) on small 1D and 2D shapes, both layouts, each way of threading it, within
 * the f32 tolerance of docs/spec.md "Accuracy the tests hold", so that the blas rows measure a correct
 * computation. No device needed. */
#include "bench.h"
#include "helpers.h"

#include <mhla_reference.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* One forward of shape s (its block grid set) with random inputs, against mhla_reference_forward
 * on bench_config(s), the configuration of the mhla rows. */
static void check_shape(const bench_shape *s, uint64_t seed)
{
    const size_t rows = (size_t)(s->batch * s->heads * bench_shape_n(s)), m = (size_t)bench_shape_m(s);
    const size_t nk = rows * (size_t)s->dk, nv = rows * (size_t)s->dv;
    float *q = malloc(nk * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nv * sizeof *v);
    float *out = malloc(nv * sizeof *out), *mix = malloc(m * m * sizeof *mix);
    double *ref = malloc(nv * sizeof *ref);
    char why[256] = "";
    assert_true(q && k && v && out && mix && ref);
    bench_fill_random(q, nk, seed);
    bench_fill_random(k, nk, seed + 1);
    bench_fill_random(v, nv, seed + 2);
    for (size_t i = 0; i < nv; ++i)
        out[i] = NAN; /* every element must be written */
    assert_int_equal(mhla_mixing_init(BENCH_MIXING_INIT, NULL, s->bt, s->bh, s->bw, mix, m * m), MHLA_OK);
    const mhla_config cfg = bench_config(s);
    assert_int_equal(mhla_reference_forward(&cfg, q, k, v, mix, ref), MHLA_OK);
    const mhla_status st = bench_blas_forward(s, q, k, v, mix, out, why, sizeof why);
    if (st != MHLA_OK)
        fail_msg("bench_blas_forward: %s: %s", mhla_status_name(st), why);
    const double err = mhla_max_rel_err(out, ref, nv);
    if (!(err <= 1e-5))
        fail_msg("%lldx%lldx%lld tokens, blocks %lldx%lldx%lld, B=%lld H=%lld Dk=%lld Dv=%lld %s: max rel err %g",
                 (long long)s->t, (long long)s->h, (long long)s->w, (long long)s->bt, (long long)s->bh,
                 (long long)s->bw, (long long)s->batch, (long long)s->heads, (long long)s->dk, (long long)s->dv,
                 mhla_layout_name(s->layout), err);
    free(q), free(k), free(v), free(out), free(mix), free(ref);
}

static void check_shapes(void)
{
    /* {batch, heads, t, h, w, bt, bh, bw, dk, dv, layout, chunk} */
    const bench_shape shapes[] = {
        {2, 3, 64, 1, 1, 4, 1, 1, 16, 8, MHLA_LAYOUT_BNHD, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER},  /* 1D, 24 work units */
        {2, 3, 64, 1, 1, 4, 1, 1, 16, 8, MHLA_LAYOUT_BHND, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER},  /* the other layout */
        {1, 2, 1, 8, 12, 1, 2, 2, 8, 12, MHLA_LAYOUT_BNHD, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER}, /* an image: 4x6 blocks */
        {1, 2, 1, 8, 12, 1, 2, 2, 8, 12, MHLA_LAYOUT_BHND, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER},
        {1, 4, 96, 1, 1, 1, 1, 1, 32, 32, MHLA_LAYOUT_BNHD, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER}, /* M = 1: linear */
        {1, 8, 1024, 1, 1, 4, 1, 1, 64, 64, MHLA_LAYOUT_BNHD, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER}, /* quick sweep's 1st row: */
                                                                   /* the mixing in several slabs */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
        check_shape(&shapes[i], 10 * i + 1);
}

static void test_blas_forward(void **state)
{
    (void)state;
    if (!bench_blas_available()) {
        const bench_shape s = {1, 1, 16, 1, 1, 1, 1, 1, 4, 4, MHLA_LAYOUT_BNHD, 0, 0, 0, 0, MHLA_NORMALIZER_PAPER};
        char why[256] = "";
        float x[64] = {0};
        assert_int_equal(bench_blas_forward(&s, x, x, x, x, x, why, sizeof why), MHLA_ERR_UNSUPPORTED);
        assert_string_equal(why, BENCH_NO_BLAS_NOTE);
        test_skip();
    }
    check_shapes();
}

/* The ways the blas op does not thread by default (blas.c: the mixing on OpenBLAS's
 * threads; OpenBLAS threading every SGEMM) compute the same. */
static void test_blas_forward_other_threading(void **state)
{
    (void)state;
    if (!bench_blas_available())
        test_skip();
    const char *ways[] = {"mixing-openblas", "openblas"};
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; ++i) {
        setenv("MHLA_BENCH_BLAS_THREADING", ways[i], 1);
        check_shapes();
    }
    unsetenv("MHLA_BENCH_BLAS_THREADING");
}

/* The OpenBLAS core the bench replaces (bench_blas_core_fix): never a user's OPENBLAS_CORETYPE; where
 * it replaces one, that core had no AVX2 kernels, and the note names both cores. */
static void test_blas_core_fix(void **state)
{
    (void)state;
    if (!bench_blas_available())
        test_skip();
    char user[64] = "";
    const char *was = NULL, *env = getenv("OPENBLAS_CORETYPE");
    if (env)
        snprintf(user, sizeof user, "%s", env);
    setenv("OPENBLAS_CORETYPE", "Haswell", 1);
    assert_null(bench_blas_core_fix(&was));
    assert_null(was);
    unsetenv("OPENBLAS_CORETYPE");
    const char *core = bench_blas_core_fix(&was);
    if (core) {
        assert_non_null(was);
        assert_true(!strcmp(core, "SkylakeX") || !strcmp(core, "Haswell"));
        assert_null(strstr("HaswellSkylakeXCooperlakeSapphireRapidsZen", was));
        setenv("OPENBLAS_CORETYPE", core, 1);
        setenv("MHLA_BENCH_BLAS_CORE_WAS", was, 1);
        assert_non_null(strstr(bench_blas_config(), "set by mhla-bench"));
        assert_non_null(strstr(bench_blas_config(), was));
        unsetenv("MHLA_BENCH_BLAS_CORE_WAS");
    }
    if (env)
        setenv("OPENBLAS_CORETYPE", user, 1);
    else
        unsetenv("OPENBLAS_CORETYPE");
    assert_null(strstr(bench_blas_config(), "set by mhla-bench"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_forward),
        cmocka_unit_test(test_blas_forward_other_threading),
        cmocka_unit_test(test_blas_core_fix),
    };
    /* Without OpenBLAS only the refusal was checked: both cases skip, meson's SKIP (77), not a pass. */
    return run_group("bench_blas", tests, NULL, NULL);
}
