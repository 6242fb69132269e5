/* Test helpers: see helpers.h. */
#include "helpers.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

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

mhla_context *test_context(void)
{
    mhla_context *ctx = NULL;
    mhla_status st = mhla_context_create(NULL, &ctx);
    if (st != MHLA_OK)
        fail_msg("mhla_context_create: %s: %s", mhla_status_name(st), mhla_last_message());
    return ctx;
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

mhla_status run_against_reference(mhla_context *ctx, const mhla_config *cfg, mhla_init_kind init, uint32_t seed,
                                   double *err, float **out_keep, double **ref_keep)
{
    mhla_status st = MHLA_OK;
    mhla_plan *plan = NULL;
    const size_t nq = mhla_config_tensor_elems(cfg, MHLA_TENSOR_Q);
    const size_t nv = mhla_config_tensor_elems(cfg, MHLA_TENSOR_V);
    const size_t nm = mhla_config_tensor_elems(cfg, MHLA_TENSOR_MIXING);
    float *q = malloc(nq * sizeof *q), *k = malloc(nq * sizeof *k), *v = malloc(nv * sizeof *v);
    float *out = malloc(nv * sizeof *out), *mix = malloc(nm * sizeof *mix);
    double *ref = malloc(nv * sizeof *ref);
    if (!q || !k || !v || !out || !mix || !ref || nq == 0) {
        st = MHLA_ERR_OUT_OF_HOST_MEMORY;
        goto cleanup;
    }
    const float lo = cfg->feature_map == MHLA_FEATURE_NONE ? 0.05f : -1.0f;
    fill_uniform(q, nq, seed * 3 + 1, lo, 1.0f);
    fill_uniform(k, nq, seed * 3 + 2, lo, 1.0f);
    fill_uniform(v, nv, seed * 3 + 3, -1.0f, 1.0f);
    if ((st = mhla_mixing_init(init, NULL, cfg->block_t, cfg->block_h, cfg->block_w, mix, nm)) != MHLA_OK)
        goto cleanup;
    if ((st = mhla_plan_create(ctx, cfg, &plan)) != MHLA_OK)
        goto cleanup;
    if ((st = mhla_forward_host(plan, q, k, v, mix, out)) != MHLA_OK)
        goto cleanup;
    if ((st = mhla_reference_forward(cfg, q, k, v, mix, ref)) != MHLA_OK)
        goto cleanup;
    *err = mhla_max_rel_err(out, ref, nv);
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
    free(q), free(k), free(v), free(out), free(mix), free(ref);
    return st;
}
