/* The streaming decoder: every configuration (token-by-token decoding over several chunks,
 * prompt-then-decode splits, every feature map with eps and feature_eps large enough to show, the
 * C = 2 and C = 4 tilings, state save/restore and forking, the device calls with events) checked
 * against the double reference (docs/spec.md "Accuracy the tests hold": 1e-5), never against the
 * chunk-form kernels, which could share a bug with the decoder's; a whole-sequence prefill also equals
 * the chunk form bit for bit. Capacity and the errors. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* Feeds tokens [t0, t0 + n) of the full inputs to the decoder (prefill or n steps) and places its
 * outputs at the same tokens of `out`. */
static mhla_status feed(mhla_decoder *dec, const mhla_config *cfg, const test_inputs *in, int64_t t0, int64_t n,
                        int prefill, float *out)
{
    const int64_t N = cfg->seq_t, B = cfg->batch, H = cfg->heads;
    mhla_config kv = *cfg; /* k and v: H_kv heads (grouped key/value heads) */
    kv.heads = cfg->kv_heads ? cfg->kv_heads : cfg->heads;
    float *q = malloc((size_t)(B * n * H * cfg->dk) * 4), *k = malloc((size_t)(B * n * kv.heads * cfg->dk) * 4);
    float *v = malloc((size_t)(B * n * kv.heads * cfg->dv) * 4), *o = nan_floats((size_t)(B * n * H * cfg->dv));
    assert_non_null(q), assert_non_null(k), assert_non_null(v), assert_non_null(o);
    slice_tokens(cfg, N, cfg->dk, in->q, t0, n, q);
    slice_tokens(&kv, N, cfg->dk, in->k, t0, n, k);
    slice_tokens(&kv, N, cfg->dv, in->v, t0, n, v);
    mhla_status st = prefill ? mhla_decoder_prefill_host(dec, q, k, v, in->mix, o, n)
                             : mhla_decoder_step_host(dec, q, k, v, in->mix, o, n);
    if (st == MHLA_OK)
        place_tokens(cfg, N, cfg->dv, o, t0, n, out);
    free(q), free(k), free(v), free(o);
    return st;
}

/* A schedule: segments of prefill ('p') or steps ('s'), e.g. "p40 s29". Reads the segment at *p into
 * kind and n and moves *p past it; 0 at the end. */
static int next_segment(const char **p, char *kind, int *n)
{
    while (**p == ' ')
        ++*p;
    if (!**p)
        return 0;
    int used = 0;
    assert_int_equal(sscanf(*p, "%c%d%n", kind, n, &used), 2);
    *p += used;
    return 1;
}

/* Runs a schedule on a fresh decoder of capacity N and returns the whole sequence's output. */
static float *run_schedule(mhla_context *ctx, const mhla_config *cfg, const test_inputs *in, const char *schedule)
{
    mhla_decoder *dec = NULL;
    mhla_status st = mhla_decoder_create(ctx, cfg, cfg->seq_t, &dec);
    if (st != MHLA_OK)
        fail_msg("mhla_decoder_create: %s: %s", mhla_status_name(st), mhla_context_message(ctx));
    float *out = nan_floats(in->no);
    int64_t t = 0;
    char kind = 0;
    int n = 0;
    for (const char *p = schedule; next_segment(&p, &kind, &n);) {
        st = feed(dec, cfg, in, t, n, kind == 'p', out);
        if (st != MHLA_OK)
            fail_msg("%s at token %lld: %s: %s", schedule, (long long)t, mhla_status_name(st),
                     mhla_context_message(ctx));
        t += n;
        assert_int_equal(mhla_decoder_position(dec), t);
    }
    assert_int_equal(t, cfg->seq_t);
    mhla_decoder_destroy(dec);
    return out;
}

/* The launches of the steps a schedule takes on a decoder of chunk C, one a token: its 's' tokens
 * and the tokens a prefill takes to the next chunk boundary first. *prefills: its 'p' segments. */
static int schedule_steps(const char *schedule, int64_t C, int *prefills)
{
    int64_t t = 0, steps = 0;
    char kind = 0;
    int n = 0;
    *prefills = 0;
    for (const char *p = schedule; next_segment(&p, &kind, &n);) {
        const int64_t into = t % C, head = kind == 's' ? n : into == 0 ? 0 : n < C - into ? n : C - into;
        steps += head;
        *prefills += kind == 'p';
        t += n;
    }
    return (int)steps;
}

/* Launches of kernel `name` in mhla_context_kernel_times' lines ("name count ms"); 0 if none. */
static int kernel_launches(const char *times, const char *name)
{
    const size_t len = strlen(name);
    for (const char *line = times; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            return atoi(line + len + 1);
    return 0;
}

/* The chunk form's output (a causal plan), NaN-filled before the run: the bits a whole-sequence
 * prefill must equal. */
static float *chunk_run(mhla_context *ctx, const mhla_config *cfg, const test_inputs *in)
{
    float *out = nan_floats(in->no);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_forward_host(plan, in->q, in->k, in->v, in->mix, out), MHLA_OK);
    mhla_plan_destroy(plan);
    return out;
}

/* The double-precision reference of the whole sequence: what every decoder output is held to. */
static double *reference_run(const mhla_config *cfg, const test_inputs *in)
{
    double *ref = malloc(in->no * sizeof *ref);
    assert_non_null(ref);
    assert_int_equal(mhla_reference_forward(cfg, in->q, in->k, in->v, in->mix, ref), MHLA_OK);
    return ref;
}

/* out against the reference within 1e-5 (docs/spec.md "Accuracy the tests hold"); returns the error. */
static double check_reference(const float *out, const double *ref, size_t n, const char *what)
{
    const double err = finite_rel_err(out, ref, n, __func__);
    if (!(err <= 1e-5))
        fail_msg("%s: vs reference %.3g", what, err);
    return err;
}

/* Decoding token by token over several chunks equals the reference (<= 1e-5, docs/spec.md
 * "Accuracy the tests hold"): C in {16, 64, 128}, both normalizers, both layouts, B = 2, H = 2,
 * Dk != Dv. */
static void test_decode_equals_reference(void **state)
{
    mhla_context *ctx = *state;
    const int64_t chunks[] = {16, 64, 128};
    double worst = 0.0;
    for (size_t c = 0; c < 3; ++c)
        for (int paper = 0; paper <= 1; ++paper)
            for (int layout = 0; layout <= 1; ++layout) {
                if (c > 0 && layout) /* the layouts once, the chunk sizes in BNHD */
                    continue;
                const int64_t C = chunks[c], N = 3 * C + 5;
                mhla_config cfg = config_causal(2, 2, N, C, 24, 16);
                cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
                cfg.layout = (mhla_layout)layout;
                test_inputs in;
                assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, (uint32_t)(c * 4 + (size_t)paper * 2 + (size_t)layout), &in),
                                 MHLA_OK);
                float *dec = run_schedule(ctx, &cfg, &in, N == 53 ? "s53" : N == 197 ? "s197" : "s389");
                double *ref = reference_run(&cfg, &in);
                char what[96];
                snprintf(what, sizeof what, "C=%lld %s %s", (long long)C, mhla_normalizer_name(cfg.normalizer),
                         mhla_layout_name(cfg.layout));
                worst = fmax(worst, check_reference(dec, ref, in.nv, what));
                free(dec), free(ref);
                test_inputs_free(&in);
            }
    print_message("decode vs reference: worst max_rel_err %.3g\n", worst);
}

/* Prompts through the chunk path then decoding, in many splits: at and off chunk boundaries, a
 * prefill continuing mid-chunk (its head goes through steps), several prefills. A whole-sequence
 * prefill is the chunk form itself (bit for bit). */
static void test_prompt_then_decode(void **state)
{
    mhla_context *ctx = *state;
    const char *schedules[] = {"p40 s29", "p1 s68", "p16 s53", "p32 s37", "s5 p30 s3 p31", "p20 p20 p29", "s17 p52"};
    double worst = 0.0;
    for (int paper = 0; paper <= 1; ++paper) {
        mhla_config cfg = config_causal(2, 2, 69, 16, 24, 16);
        cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        test_inputs in;
        assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, (uint32_t)(20 + paper), &in), MHLA_OK);
        float *chunk_f = chunk_run(ctx, &cfg, &in);
        double *ref = reference_run(&cfg, &in);
        float *whole = run_schedule(ctx, &cfg, &in, "p69");
        assert_memory_equal(whole, chunk_f, in.nv * sizeof *whole);
        check_reference(whole, ref, in.nv, "p69");
        for (size_t s = 0; s < sizeof schedules / sizeof schedules[0]; ++s) {
            float *out = run_schedule(ctx, &cfg, &in, schedules[s]);
            char what[64];
            snprintf(what, sizeof what, "%s (%s)", schedules[s], mhla_normalizer_name(cfg.normalizer));
            worst = fmax(worst, check_reference(out, ref, in.nv, what));
            free(out);
        }
        free(whole), free(chunk_f), free(ref);
        test_inputs_free(&in);
    }
    print_message("prompt-then-decode vs reference: worst max_rel_err %.3g\n", worst);
}

/* What the cases above leave at the defaults: feature maps other than relu (relu-eps with
 * feature_eps = TEST_FEATURE_EPS, none, elu1), eps = TEST_EPS under the paper normalizer (the
 * defaults, 1e-6, move no output past 1e-5, so a step or prefill that dropped them passed) and a
 * scale of 0.3, not Dk^-0.5; token by token, prefill then steps mid-chunk, and one whole prefill
 * (the chunk path), each against the reference. Three modes, not every pair: each costs its own
 * kernels (about a second each to build, cold). */
static void test_decode_maps_and_eps(void **state)
{
    mhla_context *ctx = *state;
    const struct {
        mhla_feature_map fm;
        mhla_normalizer norm;
    } modes[] = {
        {MHLA_FEATURE_RELU_EPS, MHLA_NORMALIZER_PAPER},
        {MHLA_FEATURE_NONE, MHLA_NORMALIZER_PAPER},
        {MHLA_FEATURE_ELU1, MHLA_NORMALIZER_NONE},
    };
    const char *schedules[] = {"s69", "s5 p44 s20", "p69"};
    double worst = 0.0;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; ++m) {
        mhla_config cfg = config_causal(2, 2, 69, 16, 8, 8); /* the Dk, Dv of test_state_errors */
        cfg.feature_map = modes[m].fm;
        cfg.normalizer = modes[m].norm;
        cfg.scale = 0.3f;
        set_test_eps(&cfg);
        const uint32_t seed = (uint32_t)(80 + m);
        expect_eps_visible(&cfg, seed, 10);
        test_inputs in;
        assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, seed, &in), MHLA_OK);
        double *ref = reference_run(&cfg, &in);
        for (size_t s = 0; s < sizeof schedules / sizeof schedules[0]; ++s) {
            float *out = run_schedule(ctx, &cfg, &in, schedules[s]);
            char what[96];
            snprintf(what, sizeof what, "%s %s scale 0.3, test eps: %s", mhla_feature_map_name(cfg.feature_map),
                     mhla_normalizer_name(cfg.normalizer), schedules[s]);
            worst = fmax(worst, check_reference(out, ref, in.nv, what));
            free(out);
        }
        free(ref);
        test_inputs_free(&in);
    }
    print_message("decoder, feature maps and eps: worst max_rel_err vs reference %.3g\n", worst);
}

/* With odd tilings and chunks of 4 tokens (prefix GEMM blocks of 4 chunks): decoding and prefills
 * that start inside a GEMM block still equal the reference. */
static void test_odd_tiling(void **state)
{
    mhla_context *ctx = *state;
    set_odd_tiling();
    const char *schedules[] = {"s69", "p40 s29", "s5 p30 s3 p31", "s17 p52", "p69"};
    double worst = 0.0;
    for (int paper = 0; paper <= 1; ++paper) {
        mhla_config cfg = config_causal(2, 2, 69, 4, 24, 40); /* 18 chunks */
        cfg.normalizer = paper ? MHLA_NORMALIZER_PAPER : MHLA_NORMALIZER_NONE;
        test_inputs in;
        assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, (uint32_t)(70 + paper), &in), MHLA_OK);
        double *ref = reference_run(&cfg, &in);
        for (size_t s = 0; s < sizeof schedules / sizeof schedules[0]; ++s) {
            float *out = run_schedule(ctx, &cfg, &in, schedules[s]);
            char what[64];
            snprintf(what, sizeof what, "odd tiling %s (%s)", schedules[s], mhla_normalizer_name(cfg.normalizer));
            worst = fmax(worst, check_reference(out, ref, in.nv, what));
            free(out);
        }
        free(ref);
        test_inputs_free(&in);
    }
    restore_test_env(NULL);
    print_message("decoder, odd tiling (C = 4): worst max_rel_err vs reference %.3g\n", worst);
}

/* The GPU row's step in parts (decoder.cl's STEP_DP > 1: the key dimensions split over a group's
 * work-items) within forced device limits, against the reference: 64-wide groups and 16 KiB (8
 * column lanes for 25 columns, Dk 20 in parts of uneven length) with the chunk start's prefix in
 * parts of the earlier chunks (decoder_prefix); then with the next chunk's prefix summed by the
 * steps (dec_next: one launch a step, chunk starts included, and decoder_resume only where a step
 * follows a prefill): grouped heads in two passes of query heads (8 on one key/value head) at 128
 * and 32 KiB in [B,H,N,D], resumed inside a chunk; three query heads per key/value head at 1024 and
 * 48 KiB with chunks of 4 (15 chunk starts, up to 4 earlier chunks a step); and head dimensions
 * 128 with 4 query heads at 16 KiB, where the parts' sums fit only in fewer parts (dec_dp 8 -> 4,
 * and 2 on rusticl, whose kernels take twice their arrays), resumed at a chunk start. Steps and
 * prefills mixed. */
static void test_step_parts_limits(void **state)
{
    (void)state;
    static const char *const limits[] = {"wg=64,local=16K", "wg=128,local=32K", "wg=1024,local=48K", "wg=256,local=16K"};
    static const char *const schedules[] = {"s30 p50 s70", "s37 p20 s43", "s60", "s3 p13 s8"};
    static const char *const tunings[] = {"row=gpu", "row=gpu,dec_next=1", "row=gpu,dec_next=1",
                                          "row=gpu,dec_next=1"};
    mhla_config cfgs[4];
    cfgs[0] = config_causal(1, 2, 150, 8, 20, 24);
    cfgs[0].normalizer = MHLA_NORMALIZER_PAPER;
    cfgs[1] = config_causal(1, 8, 100, 16, 64, 64);
    cfgs[1].kv_heads = 1;
    cfgs[1].layout = MHLA_LAYOUT_BHND;
    cfgs[2] = config_causal(2, 6, 60, 4, 32, 16);
    cfgs[2].kv_heads = 2;
    cfgs[2].normalizer = MHLA_NORMALIZER_PAPER;
    cfgs[2].feature_map = MHLA_FEATURE_ELU1;
    cfgs[3] = config_causal(1, 4, 24, 8, 128, 128);
    cfgs[3].kv_heads = 1;
    cfgs[3].normalizer = MHLA_NORMALIZER_PAPER;
    double worst = 0.0;
    for (size_t c = 0; c < 4; ++c) {
        if (test_config_thinned()) /* (the portability runs: every decoder built here is a compile) */
            continue;
        mhla_context *ctx = limited_context(limits[c], tunings[c]);
        assert_int_equal(mhla_context_profile_kernels(ctx, 1), MHLA_OK);
        test_inputs in;
        assert_int_equal(test_inputs_make(&cfgs[c], TEST_INIT_RANDOM, (uint32_t)(150 + c), &in), MHLA_OK);
        float *out = run_schedule(ctx, &cfgs[c], &in, schedules[c]);
        char times[2048], what[160];
        assert_int_equal(mhla_context_kernel_times(ctx, times, sizeof times), MHLA_OK);
        int prefills;
        const int steps = schedule_steps(schedules[c], cfgs[c].chunk, &prefills), next = c > 0;
        if (kernel_launches(times, "decoder_step") != steps || kernel_launches(times, "causal_prefix_one") ||
            (next ? kernel_launches(times, "decoder_prefix") || kernel_launches(times, "decoder_resume") > prefills
                  : !kernel_launches(times, "decoder_prefix") || kernel_launches(times, "decoder_resume")))
            fail_msg("MHLA_LIMITS=%s, %s, %s: not the parts form%s (%d steps, %d prefills):\n%s", limits[c],
                     tunings[c], schedules[c], next ? " in one launch a step" : "", steps, prefills, times);
        double *ref = reference_run(&cfgs[c], &in);
        snprintf(what, sizeof what, "MHLA_LIMITS=%s, %s, Dk %lld Dv %lld, H %lld on %lld, C %lld, %s", limits[c],
                 tunings[c],
                 (long long)cfgs[c].dk, (long long)cfgs[c].dv, (long long)cfgs[c].heads,
                 (long long)(cfgs[c].kv_heads ? cfgs[c].kv_heads : cfgs[c].heads), (long long)cfgs[c].chunk,
                 schedules[c]);
        worst = fmax(worst, check_reference(out, ref, in.no, what));
        free(out), free(ref);
        test_inputs_free(&in);
        mhla_context_destroy(ctx);
    }
    print_message("decoder in parts, forced limits: worst max_rel_err vs reference %.3g\n", worst);
}

/* A prompt of more chunks than one chunk-path run takes (64): 151 chunks of 2 tokens, from the
 * start and from inside a chunk; later runs read the summaries the earlier runs wrote. */
static void test_long_prefill(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_causal(1, 2, 301, 2, 8, 8);
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, MHLA_INIT_CAUSAL_UNIFORM, 75, &in), MHLA_OK);
    float *chunk_f = chunk_run(ctx, &cfg, &in);
    double *ref = reference_run(&cfg, &in);
    float *whole = run_schedule(ctx, &cfg, &in, "p301");
    assert_memory_equal(whole, chunk_f, in.nv * sizeof *whole); /* the same kernels and summation order */
    check_reference(whole, ref, in.nv, "p301 (C = 2)");
    float *split = run_schedule(ctx, &cfg, &in, "s3 p290 s8");
    check_reference(split, ref, in.nv, "s3 p290 s8 (C = 2)");
    free(whole), free(split), free(chunk_f), free(ref);
    test_inputs_free(&in);
}

/* Save at a mid-chunk position and at a chunk boundary, restore into another decoder (of another
 * capacity) and continue: bit for bit the same outputs as the original decoder, and the
 * reference's within 1e-5. Fork: the restored decoder continues with other tokens, checked against the reference
 * on the spliced sequence. Reset: a decoder reused from position 0 repeats its first outputs. With the
 * device's row, and with the next chunk's prefix summed by the steps (dec_next) in both forms of the
 * step: the state does not hold that sum, and the restored decoder rebuilds it (decoder_resume) in the
 * steps' order. */
static void state_save_restore(mhla_context *ctx, const char *tuning)
{
    const int64_t N = 69, C = 16, cuts[] = {40, 32};
    mhla_config cfg = config_causal(2, 2, N, C, 24, 16);
    cfg.normalizer = MHLA_NORMALIZER_PAPER;
    cfg.mixing_rows = 5; /* the model's Mc, whatever each decoder's capacity */
    test_inputs in, other;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 30, &in), MHLA_OK);
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 31, &other), MHLA_OK);
    memcpy(other.mix, in.mix, in.nm * sizeof *in.mix);
    double *full_ref = reference_run(&cfg, &in);
    const size_t W = 2 * 2 * 24 * 17 * sizeof(float); /* one summary slot, z column included */
    for (int c = 0; c < 2; ++c) {
        const int64_t cut = cuts[c];
        float *a = nan_floats(in.nv), *b = nan_floats(in.nv), *f = nan_floats(in.nv), *first = nan_floats(in.nv);
        mhla_decoder *da = NULL, *db = NULL;
        assert_int_equal(mhla_decoder_create(ctx, &cfg, N, &da), MHLA_OK);
        assert_int_equal(mhla_decoder_create(ctx, &cfg, 80, &db), MHLA_OK);
        assert_int_equal(mhla_decoder_state_size(da), 128);
        assert_int_equal(feed(da, &cfg, &in, 0, 7, 1, a), MHLA_OK);
        assert_int_equal(feed(da, &cfg, &in, 7, cut - 7, 0, a), MHLA_OK);
        const size_t size = mhla_decoder_state_size(da);
        /* 40 = 2 chunks + 8 tokens: 3 summaries and P_2; 32: 2 summaries, no P */
        assert_int_equal(size, 128 + (c == 0 ? 4 : 2) * W);
        unsigned char *saved = malloc(size);
        assert_int_equal(mhla_decoder_state_read(da, saved, size), MHLA_OK);
        assert_memory_equal(saved, "MHLADEC", 8);
        int64_t pos;
        memcpy(&pos, saved + 80, 8);
        assert_int_equal(pos, cut);
        assert_int_equal(mhla_decoder_state_write(db, saved, size), MHLA_OK);
        assert_int_equal(mhla_decoder_position(db), cut);
        memcpy(b, a, in.nv * 4);
        memcpy(f, a, in.nv * 4);
        assert_int_equal(feed(da, &cfg, &in, cut, N - cut, 0, a), MHLA_OK);
        assert_int_equal(feed(db, &cfg, &in, cut, N - cut, 0, b), MHLA_OK);
        if (memcmp(a, b, in.nv * 4) != 0)
            fail_msg("%s, restored at %lld: not the original decoder's bits", tuning, (long long)cut);
        char what[96];
        snprintf(what, sizeof what, "%s, restored at %lld", tuning, (long long)cut);
        check_reference(a, full_ref, in.nv, what);

        /* fork: the same saved context, other continuation tokens */
        test_inputs spliced = in;
        spliced.q = malloc(in.nq * 4), spliced.k = malloc(in.nq * 4), spliced.v = malloc(in.nv * 4);
        memcpy(spliced.q, in.q, in.nq * 4), memcpy(spliced.k, in.k, in.nq * 4), memcpy(spliced.v, in.v, in.nv * 4);
        const int64_t rq = 2 * 24, rv = 2 * 16; /* floats per token per batch element (H * D) */
        for (int64_t bb = 0; bb < 2; ++bb) {
            memcpy(spliced.q + (bb * N + cut) * rq, other.q + (bb * N + cut) * rq, (size_t)((N - cut) * rq) * 4);
            memcpy(spliced.k + (bb * N + cut) * rq, other.k + (bb * N + cut) * rq, (size_t)((N - cut) * rq) * 4);
            memcpy(spliced.v + (bb * N + cut) * rv, other.v + (bb * N + cut) * rv, (size_t)((N - cut) * rv) * 4);
        }
        assert_int_equal(mhla_decoder_state_write(db, saved, size), MHLA_OK);
        assert_int_equal(feed(db, &cfg, &spliced, cut, N - cut, 1, f), MHLA_OK);
        double *ref = malloc(in.nv * sizeof *ref);
        assert_int_equal(mhla_reference_forward(&cfg, spliced.q, spliced.k, spliced.v, in.mix, ref), MHLA_OK);
        const double err = finite_rel_err(f, ref, in.nv, __func__);
        if (!(err <= 1e-5))
            fail_msg("%s, fork at %lld: vs reference %.3g", tuning, (long long)cut, err);

        /* reset: the same first tokens give the same bits */
        assert_int_equal(mhla_decoder_reset(da), MHLA_OK);
        assert_int_equal(mhla_decoder_position(da), 0);
        assert_int_equal(feed(da, &cfg, &in, 0, 7, 1, first), MHLA_OK);
        assert_memory_equal(first, a, (size_t)(7 * 2 * 16) * 4); /* batch 0's first 7 tokens */
        free(ref), free(spliced.q), free(spliced.k), free(spliced.v);
        free(saved), free(a), free(b), free(f), free(first);
        mhla_decoder_destroy(da), mhla_decoder_destroy(db);
    }
    free(full_ref);
    test_inputs_free(&in), test_inputs_free(&other);
}

static void test_state_save_restore(void **state)
{
    static const char *const tunings[] = {NULL, "dec_next=1", "row=gpu,dec_next=1"};
    for (size_t r = 0; r < sizeof tunings / sizeof tunings[0]; ++r) {
        assert_int_equal(mhla_context_set_tuning(*state, tunings[r]), MHLA_OK);
        state_save_restore(*state, tunings[r] ? tunings[r] : "the device's row");
    }
}

/* mhla_decoder_state_write must refuse buf with `want` and a message mentioning `text`, and leave
 * the decoder at `position`. */
static void expect_state_refused(mhla_context *ctx, mhla_decoder *dec, const void *buf, size_t size,
                                 mhla_status want, const char *text, int64_t position)
{
    const mhla_status st = mhla_decoder_state_write(dec, buf, size);
    if (st != want)
        fail_msg("state write (%s): expected %s, got %s: %s", text, mhla_status_name(want), mhla_status_name(st),
                 mhla_context_message(ctx));
    assert_message_has(ctx, text);
    assert_int_equal(mhla_decoder_position(dec), position);
}

/* Restoring a state into a decoder that differs in one field the state depends on (each of them),
 * or a damaged state (each header check): refused with a message naming the field and both values,
 * and the decoder left as it was: same position, and its next tokens still the reference's. After
 * all that, the state restores and the sequence continues as the reference. */
static void test_state_errors(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_causal(1, 2, 50, 16, 8, 8);
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 40, &in), MHLA_OK);
    double *ref = reference_run(&cfg, &in);
    float *out = nan_floats(in.nv);
    mhla_decoder *dec = NULL, *other = NULL;
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 50, &dec), MHLA_OK);
    assert_int_equal(feed(dec, &cfg, &in, 0, 20, 1, out), MHLA_OK);
    const size_t size = mhla_decoder_state_size(dec);
    unsigned char *s = malloc(size + 8), *bad = malloc(size + 8);
    assert_int_equal(mhla_decoder_state_read(dec, s, size - 1), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_message_has(ctx, "state at position 20 takes");
    assert_int_equal(mhla_decoder_state_read(dec, s, size), MHLA_OK);

    /* one field changed from cfg's (batch 1, heads 2, dk 8, dv 8, chunk 16, relu, feature_eps 1e-6,
     * normalizer none), or a capacity below the state's position */
    struct {
        int64_t batch, heads, dk, dv, chunk;
        mhla_feature_map fm;
        float feature_eps;
        mhla_normalizer norm;
        int64_t capacity;
        mhla_status want;
        const char *text;
    } cases[] = {
        {2, 2, 8, 8, 16, MHLA_FEATURE_RELU, 1e-6f, MHLA_NORMALIZER_NONE, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with batch = 1, this decoder has batch = 2"},
        {1, 3, 8, 8, 16, MHLA_FEATURE_RELU, 1e-6f, MHLA_NORMALIZER_NONE, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with heads = 2, this decoder has heads = 3"},
        {1, 2, 16, 8, 16, MHLA_FEATURE_RELU, 1e-6f, MHLA_NORMALIZER_NONE, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with dk = 8, this decoder has dk = 16"},
        {1, 2, 8, 16, 16, MHLA_FEATURE_RELU, 1e-6f, MHLA_NORMALIZER_NONE, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with dv = 8, this decoder has dv = 16"},
        {1, 2, 8, 8, 32, MHLA_FEATURE_RELU, 1e-6f, MHLA_NORMALIZER_NONE, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with chunk = 16, this decoder has chunk = 32"},
        {1, 2, 8, 8, 16, MHLA_FEATURE_ELU1, 1e-6f, MHLA_NORMALIZER_NONE, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with feature_map = 1, this decoder has feature_map = 3"},
        {1, 2, 8, 8, 16, MHLA_FEATURE_RELU, 0.05f, MHLA_NORMALIZER_NONE, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with feature_eps = 1e-06, this decoder has 0.05"},
        {1, 2, 8, 8, 16, MHLA_FEATURE_RELU, 1e-6f, MHLA_NORMALIZER_PAPER, 50, MHLA_ERR_INVALID_ARGUMENT,
         "saved with normalizer = 2, this decoder has normalizer = 0"},
        {1, 2, 8, 8, 16, MHLA_FEATURE_RELU, 1e-6f, MHLA_NORMALIZER_NONE, 19, MHLA_ERR_CAPACITY_EXCEEDED,
         "the state is at position 20, past this decoder's capacity of 19 tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        mhla_config c = cfg;
        c.batch = cases[i].batch, c.heads = cases[i].heads, c.dk = cases[i].dk, c.dv = cases[i].dv;
        c.chunk = cases[i].chunk, c.feature_map = cases[i].fm, c.feature_eps = cases[i].feature_eps;
        c.normalizer = cases[i].norm;
        c.seq_t = 12;       /* 7 tokens before the refused state, 5 after */
        c.mixing_rows = 4; /* enough for every capacity here */
        test_inputs ci;
        assert_int_equal(test_inputs_make(&c, TEST_INIT_RANDOM, (uint32_t)(41 + i), &ci), MHLA_OK);
        double *cref = reference_run(&c, &ci);
        float *o = nan_floats(ci.nv);
        assert_int_equal(mhla_decoder_create(ctx, &c, cases[i].capacity, &other), MHLA_OK);
        /* steps only: a prefill would build the chunk path's kernels for each of these configs */
        assert_int_equal(feed(other, &c, &ci, 0, 7, 0, o), MHLA_OK);
        expect_state_refused(ctx, other, s, size, cases[i].want, cases[i].text, 7);
        assert_int_equal(feed(other, &c, &ci, 7, 5, 0, o), MHLA_OK);
        check_reference(o, cref, ci.nv, cases[i].text);
        mhla_decoder_destroy(other);
        free(o), free(cref);
        test_inputs_free(&ci);
    }

    /* the header: a decoder of cfg at position 5 refuses each damaged copy of s */
    const size_t row = 2 * 8; /* floats of one token's output (B = 1, BNHD: tokens are contiguous) */
    float *first = nan_floats(in.nv);
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 50, &other), MHLA_OK);
    assert_int_equal(feed(other, &cfg, &in, 0, 5, 1, first), MHLA_OK);
    expect_state_refused(ctx, other, s, size - 4, MHLA_ERR_BUFFER_TOO_SMALL, "truncated", 5);
    expect_state_refused(ctx, other, s, 100, MHLA_ERR_BUFFER_TOO_SMALL, "fewer than the state's 128-byte header", 5);
    memcpy(bad, s, size);
    memset(bad + size, 0, 8);
    expect_state_refused(ctx, other, bad, size + 8, MHLA_ERR_INVALID_ARGUMENT, "a state at position 20 takes", 5);
    bad[0] = 'X';
    expect_state_refused(ctx, other, bad, size, MHLA_ERR_INVALID_ARGUMENT, "bad magic", 5);
    memcpy(bad, s, size);
    bad[8] = 9; /* version */
    expect_state_refused(ctx, other, bad, size, MHLA_ERR_INVALID_ARGUMENT, "format version 9", 5);
    memcpy(bad, s, size);
    bad[12] = 64; /* header bytes */
    expect_state_refused(ctx, other, bad, size, MHLA_ERR_INVALID_ARGUMENT, "with a 64-byte header", 5);
    memcpy(bad, s, size);
    const uint32_t swapped = 0x04030201u; /* the mark as the other byte order reads it */
    memcpy(bad + 16, &swapped, 4);
    expect_state_refused(ctx, other, bad, size, MHLA_ERR_INVALID_ARGUMENT, "another byte order (mark 0x04030201)", 5);
    memcpy(bad, s, size);
    bad[88] = 7; /* summaries that do not match the position */
    expect_state_refused(ctx, other, bad, size, MHLA_ERR_INVALID_ARGUMENT, "corrupt header", 5);
    /* Positions far outside: INT64_MAX overflowed the summary count (tests/fuzz, fuzz_decoder_state). */
    memcpy(bad, s, size);
    const int64_t far = INT64_MAX, negative = -1;
    memcpy(bad + 80, &far, 8);
    expect_state_refused(ctx, other, bad, size, MHLA_ERR_CAPACITY_EXCEEDED, "past this decoder's capacity", 5);
    memcpy(bad + 80, &negative, 8);
    expect_state_refused(ctx, other, bad, size, MHLA_ERR_INVALID_ARGUMENT, "corrupt header: position -1", 5);
    /* untouched by all that: its next tokens are the reference's */
    assert_int_equal(feed(other, &cfg, &in, 5, 5, 0, first), MHLA_OK);
    check_reference(first, ref, 10 * row, "steps after the refused states");
    /* and the saved state still restores: dec's first 20 tokens and other's continuation from them */
    assert_int_equal(mhla_decoder_state_write(other, s, size), MHLA_OK);
    assert_int_equal(mhla_decoder_position(other), 20);
    assert_int_equal(feed(other, &cfg, &in, 20, 30, 1, out), MHLA_OK);
    check_reference(out, ref, in.nv, "restored after the refusals");
    mhla_decoder_destroy(other), mhla_decoder_destroy(dec);
    free(s), free(bad), free(out), free(first), free(ref);
    test_inputs_free(&in);
}

/* Past the capacity: refused with position and capacity named, nothing consumed. */
static void test_capacity(void **state)
{
    mhla_context *ctx = *state;
    mhla_config cfg = config_causal(1, 1, 21, 8, 4, 4);
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 50, &in), MHLA_OK);
    float *out = malloc(in.nv * 4);
    mhla_decoder *dec = NULL;
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 20, &dec), MHLA_OK);
    assert_int_equal(mhla_decoder_capacity(dec), 20);
    assert_int_equal(feed(dec, &cfg, &in, 0, 18, 0, out), MHLA_OK);
    assert_int_equal(feed(dec, &cfg, &in, 18, 3, 1, out), MHLA_ERR_CAPACITY_EXCEEDED);
    assert_message_has(ctx, "3 token(s) at position 18 would pass the decoder's capacity of 20 tokens");
    assert_int_equal(mhla_decoder_position(dec), 18);
    assert_int_equal(feed(dec, &cfg, &in, 18, 2, 0, out), MHLA_OK);
    assert_int_equal(feed(dec, &cfg, &in, 20, 1, 0, out), MHLA_ERR_CAPACITY_EXCEEDED);
    assert_message_has(ctx, "1 token(s) at position 20 would pass the decoder's capacity of 20 tokens");
    assert_int_equal(mhla_decoder_position(dec), 20);
    mhla_decoder_destroy(dec);
    free(out);
    test_inputs_free(&in);
}

/* mhla_decoder_step/prefill on the caller's buffers: they wait for the caller's event and return
 * one without blocking; one step's q is [B,H,D] whatever the layout. */
static void test_device_calls(void **state)
{
    mhla_context *ctx = *state;
    cl_context clctx = mhla_context_cl_context(ctx);
    cl_command_queue queue = mhla_context_queue(ctx);
    mhla_config cfg = config_causal(2, 3, 40, 16, 8, 8);
    cfg.layout = MHLA_LAYOUT_BHND;
    test_inputs in;
    assert_int_equal(test_inputs_make(&cfg, TEST_INIT_RANDOM, 60, &in), MHLA_OK);
    double *ref = reference_run(&cfg, &in);
    mhla_decoder *dec = NULL;
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 40, &dec), MHLA_OK);
    assert_int_equal(mhla_decoder_tensor_bytes(dec, MHLA_TENSOR_Q, 1), 2 * 3 * 8 * 4);
    assert_int_equal(mhla_decoder_tensor_bytes(dec, MHLA_TENSOR_MIXING, 1), 3 * 3 * 4);
    assert_int_equal(mhla_decoder_tensor_bytes(dec, MHLA_TENSOR_Q, 0), 0);
    const size_t pq = 2 * 30 * 3 * 8 * 4, sq = 2 * 3 * 8 * 4;
    cl_int err;
    cl_mem q = clCreateBuffer(clctx, CL_MEM_READ_WRITE, pq, NULL, &err);
    cl_mem k = clCreateBuffer(clctx, CL_MEM_READ_WRITE, pq, NULL, &err);
    cl_mem v = clCreateBuffer(clctx, CL_MEM_READ_WRITE, pq, NULL, &err);
    cl_mem o = nan_buffer(ctx, pq);
    cl_mem m = clCreateBuffer(clctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, in.nm * 4, in.mix, &err);
    assert_int_equal(err, CL_SUCCESS);
    float *buf = malloc(pq), *out = nan_floats(in.nv);
    /* a 30-token prompt, gated by a user event */
    const float *srcs[] = {in.q, in.k, in.v};
    cl_mem dsts[] = {q, k, v};
    for (int i = 0; i < 3; ++i) {
        slice_tokens(&cfg, 40, 8, srcs[i], 0, 30, buf);
        assert_int_equal(clEnqueueWriteBuffer(queue, dsts[i], CL_TRUE, 0, pq, buf, 0, NULL, NULL), CL_SUCCESS);
    }
    /* gated by a user event, except where such gates hang (user_event_gates_hang) */
    const int gated = !user_event_gates_hang(ctx);
    cl_event gate = gated ? clCreateUserEvent(clctx, &err) : NULL, done = NULL;
    assert_int_equal(mhla_decoder_prefill(dec, q, k, v, m, o, 30, gated ? 1 : 0, gated ? &gate : NULL, &done),
                     MHLA_OK);
    if (gated) {
        cl_int status = CL_COMPLETE;
        assert_int_equal(clGetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL),
                         CL_SUCCESS);
        assert_true(status != CL_COMPLETE);
        assert_int_equal(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
        clReleaseEvent(gate);
    }
    assert_int_equal(clEnqueueReadBuffer(queue, o, CL_TRUE, 0, pq, buf, 1, &done, NULL), CL_SUCCESS);
    place_tokens(&cfg, 40, 8, buf, 0, 30, out);
    clReleaseEvent(done);
    /* then 10 single steps on [B,H,D] buffers */
    for (int64_t t = 30; t < 40; ++t) {
        for (int i = 0; i < 3; ++i) {
            slice_tokens(&cfg, 40, 8, srcs[i], t, 1, buf);
            assert_int_equal(clEnqueueWriteBuffer(queue, dsts[i], CL_TRUE, 0, sq, buf, 0, NULL, NULL), CL_SUCCESS);
        }
        nan_fill(ctx, o, sq);
        done = NULL;
        assert_int_equal(mhla_decoder_step(dec, q, k, v, m, o, 0, NULL, &done), MHLA_OK);
        assert_int_equal(clEnqueueReadBuffer(queue, o, CL_TRUE, 0, sq, buf, 1, &done, NULL), CL_SUCCESS);
        clReleaseEvent(done);
        place_tokens(&cfg, 40, 8, buf, t, 1, out);
    }
    check_reference(out, ref, in.nv, "device prefill + steps");
    /* buffer checks name the call and the shape */
    assert_int_equal(mhla_decoder_reset(dec), MHLA_OK);
    cl_mem small = clCreateBuffer(clctx, CL_MEM_READ_WRITE, sq - 4, NULL, &err);
    assert_int_equal(mhla_decoder_step(dec, small, k, v, m, o, 0, NULL, NULL), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_message_has(ctx, "mhla_decoder_step: q buffer holds 188 bytes; 1 token(s) of [B,H,D] = [2,3,8] f32 needs 192");
    assert_int_equal(mhla_decoder_prefill(dec, q, k, v, m, o, 31, 0, NULL, NULL), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(mhla_decoder_step(dec, q, k, v, m, q, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "out must not be the same buffer");
    assert_int_equal(mhla_decoder_step(dec, q, k, v, NULL, o, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "mixing buffer is NULL");
    assert_int_equal(mhla_decoder_position(dec), 0);
    assert_int_equal(clFinish(queue), CL_SUCCESS);
    cl_mem mems[] = {q, k, v, o, m, small};
    for (int i = 0; i < 6; ++i)
        clReleaseMemObject(mems[i]);
    mhla_decoder_destroy(dec);
    free(buf), free(out), free(ref);
    test_inputs_free(&in);
}

static void test_create_errors(void **state)
{
    mhla_context *ctx = *state;
    mhla_decoder *dec = (mhla_decoder *)0x1;
    mhla_config cfg = config_causal(1, 1, 1, 64, 8, 8);
    cfg.mixing_rows = 4;
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 300, &dec), MHLA_ERR_SEQUENCE_TOO_LONG);
    assert_null(dec);
    assert_message_has(ctx, "capacity of 300 tokens is longer than chunk * rows(Mc) = 64 * 4 = 256");
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 256, &dec), MHLA_OK);
    assert_int_equal(mhla_decoder_config(dec)->mixing_rows, 4);
    assert_true(fabsf(mhla_decoder_config(dec)->scale - 1.0f / sqrtf(8.0f)) < 1e-7f);
    mhla_decoder_destroy(dec);
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 0, &dec), MHLA_ERR_INVALID_SHAPE);
    assert_message_has(ctx, "capacity_tokens must be in 1..");
    mhla_config nc = config_1d(1, 1, 16, 4, 8, 8);
    assert_int_equal(mhla_decoder_create(ctx, &nc, 16, &dec), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "needs a causal config");
    cfg.varlen = 1;
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 16, &dec), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "varlen must be 0");
    cfg.varlen = 0, cfg.normalizer = MHLA_NORMALIZER_OFFICIAL;
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 16, &dec), MHLA_ERR_UNSUPPORTED);
    assert_int_equal(mhla_decoder_create(NULL, &cfg, 16, &dec), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_decoder_create(ctx, NULL, 16, &dec), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_decoder_create(ctx, &cfg, 16, NULL), MHLA_ERR_INVALID_ARGUMENT);
    float x[8] = {0};
    assert_int_equal(mhla_decoder_step_host(NULL, x, x, x, x, x, 1), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_decoder_reset(NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_decoder_position(NULL), -1);
    assert_int_equal(mhla_decoder_state_size(NULL), 0);
    assert_null(mhla_decoder_config(NULL));
    mhla_decoder_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_equals_reference),
        cmocka_unit_test(test_prompt_then_decode),
        cmocka_unit_test(test_decode_maps_and_eps),
        cmocka_unit_test(test_odd_tiling),
        cmocka_unit_test(test_step_parts_limits),
        cmocka_unit_test(test_long_prefill),
        cmocka_unit_test(test_state_save_restore),
        cmocka_unit_test(test_state_errors),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_device_calls),
        cmocka_unit_test(test_create_errors),
    };
    return run_group("decoder", tests, context_setup, context_teardown);
}
