/* A program as an application writes it, through the public headers alone: a forward, a backward
 * and a causal forward on the default device (MHLA_DEVICE picks another), each checked against the
 * double-precision reference. It is built two ways that the main build does not cover: by the
 * run-time-loaded build (-Dopencl_loader=dlopen -Dclblast=disabled, tests/integration/meson.build)
 * and by an outside CMake project against an installed prefix (tests/integration/cmake/).
 * Exit status: 0 every check passed, 1 one failed (the line says which), 77 no OpenCL device. */
#include <mhla.h>
#include <mhla_reference.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned rng = 12345u;

static float uniform(void) /* in [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) * (1.0 / 8388608.0) - 1.0);
}

static float *random_floats(size_t n)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; ++i)
        x[i] = uniform();
    return x;
}

static int failed(const char *what, mhla_status st)
{
    fprintf(stderr, "api_check: %s: %s: %s\n", what, mhla_status_name(st), mhla_last_message());
    return 1;
}

/* Prints one comparison and returns 1 when it exceeds the tolerance. */
static int compare(const char *what, const float *got, const double *ref, size_t n, double tol)
{
    const double err = mhla_max_rel_err(got, ref, n);
    printf("%-22s max rel err %.2e (tolerance %.0e)%s\n", what, err, tol, err <= tol ? "" : "  FAILED");
    return !(err <= tol);
}

/* A forward (or causal forward) of cfg against the reference; with grads, the backward too. */
static int check(mhla_context *ctx, const char *name, const mhla_config *cfg, int grads)
{
    int bad = 0;
    const size_t mix_elems = mhla_config_tensor_elems(cfg, MHLA_TENSOR_MIXING);
    mhla_plan *plan = NULL;
    const size_t nq = mhla_config_tensor_elems(cfg, MHLA_TENSOR_Q), nk = mhla_config_tensor_elems(cfg, MHLA_TENSOR_K);
    const size_t nv = mhla_config_tensor_elems(cfg, MHLA_TENSOR_V), no = mhla_config_tensor_elems(cfg, MHLA_TENSOR_OUT);
    float *q = random_floats(nq), *k = random_floats(nk), *v = random_floats(nv), *mc = random_floats(mix_elems);
    float *out = calloc(no, sizeof *out), *dout = random_floats(no);
    float *dq = calloc(nq, sizeof *dq), *dk = calloc(nk, sizeof *dk), *dv = calloc(nv, sizeof *dv);
    float *dmc = calloc(mix_elems, sizeof *dmc);
    double *ref = calloc(nq + nk + nv + no + mix_elems, sizeof *ref);
    if (!q || !k || !v || !mc || !out || !dout || !dq || !dk || !dv || !dmc || !ref) {
        fprintf(stderr, "api_check: out of host memory\n");
        bad = 1;
        goto cleanup;
    }
    mhla_status st = mhla_plan_create(ctx, cfg, &plan);
    if (st != MHLA_OK) {
        bad = failed(name, st);
        goto cleanup;
    }
    if ((st = mhla_forward_host(plan, q, k, v, mc, out)) != MHLA_OK ||
        (st = mhla_reference_forward(cfg, q, k, v, mc, ref)) != MHLA_OK) {
        bad = failed(name, st);
        goto cleanup;
    }
    char what[64];
    snprintf(what, sizeof what, "%s forward", name);
    bad |= compare(what, out, ref, no, mhla_reference_tolerance(cfg->dtype, cfg->seq_t));
    if (grads) {
        double *rq = ref, *rk = rq + nq, *rv = rk + nk, *rmc = rv + nv;
        if ((st = mhla_backward_host(plan, q, k, v, mc, dout, dq, dk, dv, dmc)) != MHLA_OK ||
            (st = mhla_reference_backward(cfg, q, k, v, mc, dout, rq, rk, rv, rmc)) != MHLA_OK) {
            bad = failed(name, st);
            goto cleanup;
        }
        const double tol = mhla_reference_backward_tolerance(cfg->dtype);
        snprintf(what, sizeof what, "%s dq", name);
        bad |= compare(what, dq, rq, nq, tol);
        snprintf(what, sizeof what, "%s dk", name);
        bad |= compare(what, dk, rk, nk, tol);
        snprintf(what, sizeof what, "%s dv", name);
        bad |= compare(what, dv, rv, nv, tol);
        snprintf(what, sizeof what, "%s dMc", name);
        bad |= compare(what, dmc, rmc, mix_elems, tol);
    }
cleanup:
    mhla_plan_destroy(plan);
    free(q), free(k), free(v), free(mc), free(out), free(dout), free(dq), free(dk), free(dv), free(dmc), free(ref);
    return bad;
}

int main(void)
{
    mhla_context *ctx = NULL;
    mhla_status st = mhla_context_create(NULL, &ctx);
    if (st == MHLA_ERR_DEVICE_NOT_FOUND) {
        printf("api_check: skipped: %s\n", mhla_last_message());
        return 77;
    }
    if (st != MHLA_OK)
        return failed("mhla_context_create", st);
    printf("libmhla %s on %s\n", mhla_version_string(), mhla_context_device_name(ctx));

    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.heads = 2, cfg.seq_t = 256, cfg.block_t = 4, cfg.dk = 32, cfg.dv = 32;
    int bad = check(ctx, "mhla", &cfg, 1);

    mhla_config causal;
    mhla_config_init_causal(&causal);
    causal.heads = 2, causal.seq_t = 200, causal.chunk = 64, causal.dk = 32, causal.dv = 32;
    bad |= check(ctx, "mhla causal", &causal, 1);

    mhla_context_destroy(ctx);
    printf("api_check: %s\n", bad ? "FAILED" : "passed");
    return bad;
}
