/* Test helpers: see helpers.h. */
#include "helpers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

void fill_uniform(float *x, size_t n, uint32_t seed, float lo, float hi)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL ^ seed;
    for (size_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL; /* PCG-style LCG step */
        const float u = (float)((s >> 40) & 0xFFFFFF) / 16777216.0f;
        x[i] = lo + (hi - lo) * u;
    }
}

size_t test_skipped = 0;

static long thin_every = -1, thin_rest; /* -1: MHLA_TEST_THIN not read yet; 0: every configuration */
static size_t thin_seen, thin_ran;

int test_config_thinned(void)
{
    if (thin_every < 0) {
        const char *env = getenv("MHLA_TEST_THIN");
        char *end = NULL;
        thin_every = env && *env ? strtol(env, &end, 10) : 0;
        thin_rest = end && *end == ':' ? strtol(end + 1, NULL, 10) : 0;
        if (thin_every < 1 || thin_rest < 0 || thin_rest >= thin_every)
            thin_every = 0, thin_rest = 0; /* a malformed value checks everything, never less */
    }
    const size_t i = thin_seen++;
    if (thin_every > 1 && (long)(i % (size_t)thin_every) != thin_rest)
        return 1;
    ++thin_ran;
    return 0;
}

int test_group_status(int failed, size_t cases)
{
    if (thin_every > 1)
        printf("configurations thinned (MHLA_TEST_THIN=%ld:%ld): ran %zu of %zu\n", thin_every, thin_rest, thin_ran,
               thin_seen);
    if (test_skipped)
        printf("cases skipped: %zu of %zu\n", test_skipped, cases);
    if (failed)
        return failed;
    if (test_skipped >= cases) {
        printf("every case skipped: exit 77 (meson's SKIP)\n");
        return 77;
    }
    return 0;
}

/* MHLA_TUNING as the program found it (NULL: unset), and the group's shared context. */
static char *initial_tuning;
static int initial_tuning_read;
static mhla_context *shared_ctx;

static void read_initial_tuning(void)
{
    if (initial_tuning_read)
        return;
    const char *t = getenv("MHLA_TUNING");
    initial_tuning = t ? strdup(t) : NULL;
    initial_tuning_read = 1;
}

/* Whether `name` matches one of the comma-separated fnmatch patterns of `list` (`empty` when the
 * list is unset or empty). */
static int listed(const char *list, const char *name, int empty)
{
    if (!list || !*list)
        return empty;
    char pattern[256];
    for (const char *p = list; *p;) {
        const size_t len = strcspn(p, ",");
        snprintf(pattern, sizeof pattern, "%.*s", (int)(len < sizeof pattern ? len : sizeof pattern - 1), p);
        if (fnmatch(pattern, name, 0) == 0)
            return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

int restore_test_env(void **state)
{
    (void)state;
    read_initial_tuning();
    if (initial_tuning)
        setenv("MHLA_TUNING", initial_tuning, 1);
    else
        unsetenv("MHLA_TUNING");
    if (shared_ctx)
        mhla_context_set_tuning(shared_ctx, NULL);
    return 0;
}

int test_run_group(const char *name, const struct CMUnitTest *tests, size_t n, int (*setup)(void **),
                    int (*teardown)(void **))
{
    read_initial_tuning();
    struct CMUnitTest *cases = malloc(n * sizeof *cases);
    if (!cases) {
        printf("out of host memory for %zu test cases\n", n);
        return 1;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!listed(getenv("MHLA_TEST_FILTER"), tests[i].name, 1) || listed(getenv("MHLA_TEST_SKIP"), tests[i].name, 0))
            continue;
        cases[kept] = tests[i];
        if (!cases[kept].teardown_func)
            cases[kept].teardown_func = restore_test_env;
        ++kept;
    }
    const int failed = _cmocka_run_group_tests(name, cases, kept, setup, teardown);
    free(cases);
    return test_group_status(failed, kept);
}

/* Prints the first element of x (float or double) that is not finite, and returns 1 if any is. */
static int report_nonfinite(const char *what, const char *which, const float *xf, const double *xd, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        const double x = xf ? (double)xf[i] : xd[i];
        if (!isfinite(x)) {
            print_message("%s: %s[%zu] is %g (an output that must be finite)\n", what, which, i, x);
            return 1;
        }
    }
    return 0;
}

double finite_rel_err(const float *got, const double *ref, size_t n, const char *what)
{
    if (report_nonfinite(what, "reference", NULL, ref, n) | report_nonfinite(what, "output", got, NULL, n))
        return INFINITY;
    return mhla_max_rel_err(got, ref, n);
}

double finite_rel_err_double(const double *got, const double *ref, size_t n, const char *what)
{
    if (report_nonfinite(what, "reference", NULL, ref, n) | report_nonfinite(what, "output", NULL, got, n))
        return INFINITY;
    double max_diff = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < n; ++i) {
        max_diff = fmax(max_diff, fabs(got[i] - ref[i]));
        max_ref = fmax(max_ref, fabs(ref[i]));
    }
    return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

double expect_within(const float *got, const double *ref, size_t n, double tol, const char *what)
{
    const double err = finite_rel_err(got, ref, n, what);
    if (!(err <= tol))
        fail_msg("%s: max relative error %.3g above %.3g", what, err, tol);
    return err;
}

void set_test_eps(mhla_config *cfg)
{
    cfg->eps = TEST_EPS;
    cfg->feature_eps = TEST_FEATURE_EPS;
}

/* max_rel_err of the reference of `changed` against the reference of `cfg`, on the same inputs. */
static double reference_shift(const mhla_config *cfg, const mhla_config *changed, const test_inputs *in)
{
    double *a = malloc(in->nv * sizeof *a), *b = malloc(in->nv * sizeof *b);
    float *af = malloc(in->nv * sizeof *af);
    if (!a || !b || !af)
        fail_msg("out of host memory");
    assert_int_equal(mhla_reference_forward(cfg, in->q, in->k, in->v, in->mix, a), MHLA_OK);
    assert_int_equal(mhla_reference_forward(changed, in->q, in->k, in->v, in->mix, b), MHLA_OK);
    for (size_t i = 0; i < in->nv; ++i)
        af[i] = (float)b[i];
    const double shift = finite_rel_err(af, a, in->nv, "eps check");
    free(a), free(b), free(af);
    return shift;
}

void expect_eps_visible(const mhla_config *cfg_in, uint32_t seed, double factor)
{
    mhla_config whole = *cfg_in; /* a varlen batch: its packed tokens as one sequence, the same formula */
    whole.varlen = 0;
    whole.mixing_rows = 0;
    const mhla_config *cfg = cfg_in->varlen ? &whole : cfg_in;
    test_inputs in;
    assert_int_equal(test_inputs_make(cfg, TEST_INIT_RANDOM, seed, &in), MHLA_OK);
    const double tol = mhla_reference_tolerance(cfg->dtype, cfg->seq_t * cfg->seq_h * cfg->seq_w);
    if (cfg->normalizer != MHLA_NORMALIZER_NONE) {
        mhla_config d = *cfg;
        d.eps = 1e-6f;
        const double shift = reference_shift(cfg, &d, &in);
        if (!(shift > factor * tol))
            fail_msg("eps %g moves the %s output by only %.3g (need > %g x %.0e): the case could not catch "
                     "a kernel that drops eps", (double)cfg->eps, mhla_normalizer_name(cfg->normalizer), shift,
                     factor, tol);
    }
    if (cfg->feature_map == MHLA_FEATURE_RELU_EPS) {
        mhla_config d = *cfg;
        d.feature_eps = 1e-6f;
        const double shift = reference_shift(cfg, &d, &in);
        if (!(shift > factor * tol))
            fail_msg("feature_eps %g moves the output by only %.3g (need > %g x %.0e): the case could not "
                     "catch a kernel that drops feature_eps", (double)cfg->feature_eps, shift, factor, tol);
    }
    test_inputs_free(&in);
}

void fill_nan(float *x, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        x[i] = NAN;
}

float *nan_floats(size_t n)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x)
        fail_msg("out of host memory for %zu floats", n);
    fill_nan(x, n);
    return x;
}

uint16_t *nan16(size_t n)
{
    uint16_t *x = malloc((n ? n : 1) * sizeof *x);
    if (!x)
        fail_msg("out of host memory for %zu halves", n);
    for (size_t i = 0; i < n; ++i)
        x[i] = 0x7FFF;
    return x;
}

void *to_storage(mhla_dtype dtype, float *x, size_t n)
{
    if (dtype == MHLA_DTYPE_F32)
        return x;
    uint16_t *bits = malloc((n ? n : 1) * sizeof *bits);
    if (!bits)
        fail_msg("out of host memory for %zu halves", n);
    mhla_convert(dtype, bits, MHLA_DTYPE_F32, x, n);
    mhla_convert(MHLA_DTYPE_F32, x, dtype, bits, n);
    return bits;
}

void nan_fill(mhla_context *ctx, cl_mem buf, size_t bytes)
{
    const cl_ushort nan16 = 0x7FFF;
    cl_int err = clEnqueueFillBuffer(mhla_context_queue(ctx), buf, &nan16, sizeof nan16, 0, bytes, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clFinish(mhla_context_queue(ctx));
    if (err != CL_SUCCESS)
        fail_msg("filling a %zu-byte buffer with NaN: %d", bytes, (int)err);
}

cl_mem nan_buffer(mhla_context *ctx, size_t bytes)
{
    cl_int err = CL_SUCCESS;
    cl_mem buf = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        fail_msg("clCreateBuffer(%zu bytes): %d", bytes, (int)err);
    nan_fill(ctx, buf, bytes);
    return buf;
}

void poison_outputs(void)
{
    setenv("MHLA_POISON_OUTPUTS", "1", 1);
    setenv("MHLA_POISON_WORKSPACE", "1", 1);
}

void say_device(mhla_context *ctx)
{
    cl_platform_id platform = NULL;
    char name[256] = "";
    clGetDeviceInfo(mhla_context_device(ctx), CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof name, name, NULL);
    printf("device: %s %s\n", name, mhla_context_device_name(ctx));
}

mhla_context *test_context(void)
{
    static int said;
    mhla_context *ctx = NULL;
    poison_outputs();
    mhla_status st = mhla_context_create(NULL, &ctx);
    if (st != MHLA_OK)
        fail_msg("mhla_context_create: %s: %s", mhla_status_name(st), mhla_last_message());
    if (!said)
        say_device(ctx);
    said = 1;
    return ctx;
}

mhla_context *limited_context(const char *limits, const char *tuning)
{
    assert_int_equal(setenv("MHLA_LIMITS", limits, 1), 0);
    mhla_context *ctx = test_context();
    unsetenv("MHLA_LIMITS");
    if (tuning && mhla_context_set_tuning(ctx, tuning) != MHLA_OK)
        fail_msg("MHLA_LIMITS=%s, tuning '%s': %s", limits, tuning, mhla_context_message(ctx));
    return ctx;
}

int user_event_gates_hang(mhla_context *ctx)
{
    return strncmp(mhla_context_device_name(ctx), "basic-", 6) == 0;
}

int stage_times_or_unusable(mhla_plan *plan, mhla_stage_times *t)
{
    const mhla_status st = mhla_plan_stage_times(plan, t);
    if (st == MHLA_OK)
        return 1;
    if (st != MHLA_ERR_UNSUPPORTED || !strstr(mhla_last_message(), "profiling timestamps are not usable"))
        fail_msg("mhla_plan_stage_times: %s: %s", mhla_status_name(st), mhla_last_message());
    print_message("stage times: %s\n", mhla_last_message());
    return 0;
}

float *identity_mixing(int64_t m)
{
    float *mix = calloc((size_t)(m * m), sizeof *mix);
    assert_non_null(mix);
    for (int64_t i = 0; i < m; ++i)
        mix[i * m + i] = 1.0f;
    return mix;
}

double host_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

cl_uint context_refs_settled(cl_context cl, cl_uint most, double *waited_ms)
{
    const double start = host_ms();
    long pause_us = 1000; /* doubling to 50 ms: quick when it settles at once, few queries when not */
    cl_uint refs = 0;
    for (;;) {
        const cl_int err = clGetContextInfo(cl, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL);
        if (err != CL_SUCCESS)
            fail_msg("clGetContextInfo(CL_CONTEXT_REFERENCE_COUNT): %d", (int)err);
        if (refs <= most || host_ms() - start >= REFS_SETTLE_MS)
            break;
        const struct timespec pause = {0, pause_us * 1000};
        nanosleep(&pause, NULL);
        pause_us = pause_us < 25000 ? pause_us * 2 : 50000;
    }
    if (waited_ms)
        *waited_ms = host_ms() - start;
    return refs;
}

void check_stage_times(const mhla_stage_times *t, double wall_ms)
{
    print_message("stages %.3f + %.3f + %.3f ms, span %.3f ms, host wall %.3f ms\n", t->summary_ms, t->mixing_ms,
                  t->output_ms, t->total_ms, wall_ms);
    if (!(t->summary_ms > 0 && t->mixing_ms > 0 && t->output_ms > 0))
        fail_msg("a stage took no time: %g, %g, %g ms", t->summary_ms, t->mixing_ms, t->output_ms);
    /* 0.05 ms: the two clocks' granularity (PoCL's timestamps are the host's own clock) */
    if (!(t->total_ms > 0 && t->total_ms <= wall_ms + 0.05))
        fail_msg("device span %g ms outside (0, %g ms], the host's wall time of the call", t->total_ms, wall_ms);
}

void forward_2d_ok(mhla_context *ctx, int64_t dk, uint32_t seed)
{
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 2, cfg.seq_h = 8, cfg.seq_w = 8, cfg.block_h = 2, cfg.block_w = 2, cfg.dk = dk, cfg.dv = 8;
    double err = 0;
    mhla_status st = run_against_reference(ctx, &cfg, MHLA_INIT_LINEAR, seed, &err, NULL, NULL);
    if (st != MHLA_OK)
        fail_msg("%s: %s", mhla_status_name(st), mhla_context_message(ctx));
    if (!(err <= 1e-5))
        fail_msg("2D forward (Dk = %lld) vs reference: %.3g", (long long)dk, err);
}

int context_setup(void **state)
{
    *state = shared_ctx = test_context();
    return *state ? 0 : -1;
}

int context_teardown(void **state)
{
    mhla_context_destroy(*state);
    shared_ctx = NULL;
    return 0;
}

void set_odd_tiling(void)
{
    setenv("MHLA_TUNING", TEST_ODD_TUNING, 1);
}

void expect_plan_error(mhla_context *ctx, const mhla_config *cfg, mhla_status want, const char *text)
{
    mhla_plan *plan = (mhla_plan *)0x1;
    mhla_status st = mhla_plan_create(ctx, cfg, &plan);
    if (st != want)
        fail_msg("expected %s, got %s: %s", mhla_status_name(want), mhla_status_name(st), mhla_context_message(ctx));
    assert_null(plan);
    assert_message_has(ctx, text);
    assert_string_equal(mhla_last_message(), mhla_context_message(ctx));
}

mhla_config config_1d(int64_t batch, int64_t heads, int64_t n, int64_t m, int64_t dk, int64_t dv)
{
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.batch = batch;
    cfg.heads = heads;
    cfg.seq_t = n;
    cfg.block_t = m;
    cfg.dk = dk;
    cfg.dv = dv;
    return cfg;
}

mhla_config config_causal(int64_t batch, int64_t heads, int64_t n, int64_t chunk, int64_t dk, int64_t dv)
{
    mhla_config cfg;
    mhla_config_init_causal(&cfg);
    cfg.batch = batch;
    cfg.heads = heads;
    cfg.seq_t = n;
    cfg.chunk = chunk;
    cfg.dk = dk;
    cfg.dv = dv;
    return cfg;
}

/* Moves n tokens between a tensor of N tokens (at t0) and one of n tokens, either direction. */
static void copy_tokens(const mhla_config *cfg, int64_t N, int64_t D, const float *src, int64_t t0, int64_t n,
                        float *dst, int to_small)
{
    const int64_t B = cfg->batch, H = cfg->heads;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < n; ++t) {
                size_t big, small;
                if (cfg->layout == MHLA_LAYOUT_BHND) {
                    big = (size_t)(((b * H + h) * N + t0 + t) * D);
                    small = (size_t)(((b * H + h) * n + t) * D);
                } else {
                    big = (size_t)(((b * N + t0 + t) * H + h) * D);
                    small = (size_t)(((b * n + t) * H + h) * D);
                }
                if (to_small)
                    memcpy(dst + small, src + big, (size_t)D * sizeof *dst);
                else
                    memcpy(dst + big, src + small, (size_t)D * sizeof *dst);
            }
}

void slice_tokens(const mhla_config *cfg, int64_t N, int64_t D, const float *src, int64_t t0, int64_t n, float *dst)
{
    copy_tokens(cfg, N, D, src, t0, n, dst, 1);
}

void place_tokens(const mhla_config *cfg, int64_t N, int64_t D, const float *src, int64_t t0, int64_t n, float *dst)
{
    copy_tokens(cfg, N, D, src, t0, n, dst, 0);
}

void test_inputs_free(test_inputs *in)
{
    free(in->q), free(in->k), free(in->v), free(in->mix);
    memset(in, 0, sizeof *in);
}

mhla_status test_inputs_make(const mhla_config *cfg, mhla_init_kind init, uint32_t seed, test_inputs *in)
{
    mhla_status st = MHLA_OK;
    memset(in, 0, sizeof *in);
    in->nq = mhla_config_tensor_elems(cfg, MHLA_TENSOR_Q);
    in->nv = mhla_config_tensor_elems(cfg, MHLA_TENSOR_V);
    in->nm = mhla_config_tensor_elems(cfg, MHLA_TENSOR_MIXING);
    in->nk = mhla_config_tensor_elems(cfg, MHLA_TENSOR_K);
    in->no = mhla_config_tensor_elems(cfg, MHLA_TENSOR_OUT);
    in->q = malloc(in->nq * sizeof(float)), in->k = malloc(in->nk * sizeof(float));
    in->v = malloc(in->nv * sizeof(float)), in->mix = malloc(in->nm * sizeof(float));
    if (!in->q || !in->k || !in->v || !in->mix || in->nq == 0) {
        test_inputs_free(in);
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    }
    const float lo = cfg->feature_map == MHLA_FEATURE_NONE ? 0.05f : -1.0f;
    fill_uniform(in->q, in->nq, seed * 3 + 1, lo, 1.0f);
    fill_uniform(in->k, in->nk, seed * 3 + 2, lo, 1.0f);
    fill_uniform(in->v, in->nv, seed * 3 + 3, -1.0f, 1.0f);
    if (cfg->causal) {
        in->rows = 1;
        while ((size_t)(in->rows * in->rows) < in->nm)
            ++in->rows;
    } else {
        in->rows = cfg->block_t * cfg->block_h * cfg->block_w;
    }
    if (init == TEST_INIT_RANDOM) /* signed weights would leave a denominator near 0 */
        fill_uniform(in->mix, in->nm, seed * 3 + 4, cfg->normalizer == MHLA_NORMALIZER_NONE ? -0.5f : 0.05f, 1.0f);
    else if (cfg->causal)
        st = mhla_mixing_init(init, NULL, in->rows, 1, 1, in->mix, in->nm);
    else
        st = mhla_mixing_init(init, NULL, cfg->block_t, cfg->block_h, cfg->block_w, in->mix, in->nm);
    if (st != MHLA_OK) {
        test_inputs_free(in);
        return st;
    }
    if (cfg->causal)
        for (int64_t i = 0; i < in->rows; ++i)
            for (int64_t j = i + 1; j < in->rows; ++j)
                in->mix[i * in->rows + j] = NAN;
    return MHLA_OK;
}

/* Rounds x to the storage type and back, as the device will see it; fills `stored` (the bits
 * passed to mhla_forward_host) when the type is not f32. */
static void round_to_storage(mhla_dtype dtype, float *x, uint16_t *stored, size_t n)
{
    if (dtype == MHLA_DTYPE_F32)
        return;
    mhla_convert(dtype, stored, MHLA_DTYPE_F32, x, n);
    mhla_convert(MHLA_DTYPE_F32, x, dtype, stored, n);
}

mhla_status run_against_reference(mhla_context *ctx, const mhla_config *cfg, mhla_init_kind init, uint32_t seed,
                                   double *err, float **out_keep, double **ref_keep)
{
    mhla_status st = MHLA_OK;
    mhla_plan *plan = NULL;
    test_inputs in;
    float *out = NULL;
    double *ref = NULL;
    uint16_t *q16 = NULL, *k16 = NULL, *v16 = NULL, *o16 = NULL;
    if ((st = test_inputs_make(cfg, init, seed, &in)) != MHLA_OK)
        return st;
    const int half = cfg->dtype != MHLA_DTYPE_F32;
    /* the output has the query side's tokens and heads: cross-attention and grouped key/value heads
     * have other counts in k and v */
    out = nan_floats(in.no);
    ref = malloc(in.no * sizeof *ref);
    if (half) {
        q16 = malloc(in.nq * 2), k16 = malloc(in.nk * 2);
        v16 = malloc(in.nv * 2), o16 = malloc(in.no * 2);
        for (size_t i = 0; o16 && i < in.no; ++i)
            o16[i] = 0x7FFF; /* NaN as f16 and bf16 */
    }
    if (!out || !ref || (half && (!q16 || !k16 || !v16 || !o16))) {
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    round_to_storage(cfg->dtype, in.q, q16, in.nq);
    round_to_storage(cfg->dtype, in.k, k16, in.nk);
    round_to_storage(cfg->dtype, in.v, v16, in.nv);
    if ((st = mhla_plan_create(ctx, cfg, &plan)) != MHLA_OK)
        goto cleanup;
    if (half) {
        if ((st = mhla_forward_host(plan, q16, k16, v16, in.mix, o16)) != MHLA_OK)
            goto cleanup;
        mhla_convert(MHLA_DTYPE_F32, out, cfg->dtype, o16, in.no);
    } else if ((st = mhla_forward_host(plan, in.q, in.k, in.v, in.mix, out)) != MHLA_OK) {
        goto cleanup;
    }
    if ((st = mhla_reference_forward(cfg, in.q, in.k, in.v, in.mix, ref)) != MHLA_OK)
        goto cleanup;
    *err = finite_rel_err(out, ref, in.no, "output");
    if (out_keep) {
        *out_keep = out;
        out = NULL;
    }
    if (ref_keep) {
        *ref_keep = ref;
        ref = NULL;
    }
cleanup:
    mhla_plan_destroy(plan);
    test_inputs_free(&in);
    free(out), free(ref);
    free(q16), free(k16), free(v16), free(o16);
    return st;
}
