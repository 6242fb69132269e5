/* 16-bit stores, bit for bit: every path that writes f16 or bf16 (non-causal forward, causal chunk
 * form, varlen, decoder step and prefill, non-causal and causal backward) must round its f32 result
 * to the nearest 16-bit value, ties to even. A tolerance cannot tell rounding directions apart (an
 * f16 store that truncates is still within 2e-3), so these inputs make every output element one
 * product of three 16-bit values, computed in f32 with one rounding, whose 16-bit rounding this
 * file then predicts exactly with its own converter (not the library's mhla_float_to_f16).
 *
 * How: one mixing weight of 1 per block (identity Mc; causal: 1 on the diagonal, 0 below), and in
 * a block of Nb <= Dk tokens (a chunk of C <= Dk), token t's q and k are zero but for the entry
 * d = p(t), its position in the block. Every sum then has at most one non-zero term (x + 0 = x
 * exactly), and the remaining product a * c * v of 16-bit values rounds once in f32, however
 * the kernel groups it (any two 11-bit mantissas multiply exactly in f32). A quarter of the tokens
 * are ties, a = 1.5, c = 1, v = 1 + m * ulp with m odd: 1.5 * v lies exactly halfway between two
 * 16-bit values, half of them with an even lower neighbour (round-half-away-from-zero fails them). */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* ---- the expected bits: 16-bit rounding written out independently of the library ---------- */

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

enum rounding { NEAREST_EVEN, TOWARD_ZERO, HALF_AWAY };

/* f (finite, normal in the 16-bit type: this file's values lie in [2^-6, 8)) rounded to dt. */
static uint16_t round16(mhla_dtype dt, float f, enum rounding mode)
{
    const uint32_t u = bits_of(f);
    uint32_t kept, rest, half;
    if (dt == MHLA_DTYPE_BF16) {
        kept = u >> 16, rest = u & 0xFFFF, half = 0x8000;
    } else {
        const int e = (int)((u >> 23) & 0xFF) - 127 + 15;
        assert_true(e >= 1 && e <= 30);
        kept = ((u >> 16) & 0x8000) | ((uint32_t)e << 10) | ((u >> 13) & 0x3FF);
        rest = u & 0x1FFF, half = 0x1000;
    }
    if (mode == NEAREST_EVEN && (rest > half || (rest == half && (kept & 1))))
        ++kept; /* the magnitude grows: sign-magnitude, so this is away from zero either way */
    if (mode == HALF_AWAY && rest >= half)
        ++kept;
    return (uint16_t)kept;
}

static float value16(mhla_dtype dt, uint16_t h)
{
    return dt == MHLA_DTYPE_BF16 ? mhla_bf16_to_float(h) : mhla_f16_to_float(h);
}

/* ---- inputs --------------------------------------------------------------------------------- */

/* One test tensor: its 16-bit bits (what the device gets) and their values (what the test predicts
 * from). */
typedef struct tensor16 {
    uint16_t *h;
    float *f;
    size_t n;
} tensor16;

static tensor16 tensor_zero(size_t n)
{
    tensor16 t = {calloc(n, sizeof(uint16_t)), calloc(n, sizeof(float)), n};
    assert_true(t.h && t.f);
    return t;
}

static void tensor_free(tensor16 *t) { free(t->h), free(t->f); }

static void put(mhla_dtype dt, tensor16 *t, size_t i, float x)
{
    mhla_convert(dt, &t->h[i], MHLA_DTYPE_F32, &x, 1);
    t->f[i] = value16(dt, t->h[i]);
}

static uint64_t rng_state = 88172645463325252ULL;

static double uniform(double lo, double hi)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Fraction bits of the 16-bit type (its ulp at 1 is 2^-bits). */
static int frac_bits(mhla_dtype dt) { return dt == MHLA_DTYPE_BF16 ? 7 : 10; }

/* The inputs of one case: q, k, v (BNHD) and, for the backward, dout. Token t of row (b, h) has
 * q = a e_p, k = c e_p (p = pos[t], e_p the unit vector) and its own v; dout is one-hot at j[t]. */
typedef struct inputs16 {
    tensor16 q, k, v, dout;
    int64_t *pos, *onehot;
} inputs16;

static inputs16 inputs_make(mhla_dtype dt, const mhla_config *c, const int64_t *pos)
{
    const int64_t B = c->batch, N = c->seq_t * c->seq_h * c->seq_w, H = c->heads, Dk = c->dk, Dv = c->dv;
    inputs16 in;
    in.q = tensor_zero((size_t)(B * N * H * Dk)), in.k = tensor_zero(in.q.n);
    in.v = tensor_zero((size_t)(B * N * H * Dv)), in.dout = tensor_zero(in.v.n);
    in.pos = malloc((size_t)N * sizeof *in.pos), in.onehot = malloc((size_t)(B * N * H) * sizeof *in.onehot);
    assert_true(in.pos && in.onehot);
    memcpy(in.pos, pos, (size_t)N * sizeof *pos);
    const double ulp = ldexp(1.0, -frac_bits(dt));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < N; ++t)
            for (int64_t h = 0; h < H; ++h) {
                const int64_t row = (b * N + t) * H + h;
                assert_true(pos[t] >= 0 && pos[t] < Dk);
                const int tie = (t + h) % 4 == 1;
                put(dt, &in.q, (size_t)(row * Dk + pos[t]), tie ? 1.5f : (float)uniform(0.5, 2.0));
                put(dt, &in.k, (size_t)(row * Dk + pos[t]), tie ? 1.0f : (float)uniform(0.5, 2.0));
                /* ties: 1.5 * (1 + m ulp), m odd and below 0.3 / ulp, so that the factor is below 1.3
                 * and the product stays in [1.5, 2), where the ulp is the same; other values keep
                 * away from 0 so that every product is a normal 16-bit number */
                for (int64_t j = 0; j < Dv; ++j) {
                    const double x = tie ? 1.0 + (2.0 * floor(uniform(0.0, 0.15 / ulp)) + 1.0) * ulp
                                         : uniform(0.25, 1.0);
                    put(dt, &in.v, (size_t)(row * Dv + j), (float)((j % 2) ? -x : x));
                }
                in.onehot[row] = (int64_t)uniform(0.0, (double)Dv);
                const double e = tie ? 1.0 + (2.0 * floor(uniform(0.0, 0.15 / ulp)) + 1.0) * ulp : uniform(0.5, 2.0);
                put(dt, &in.dout, (size_t)(row * Dv + in.onehot[row]), (float)(t % 3 ? e : -e));
            }
    return in;
}

static void inputs_free(inputs16 *in)
{
    tensor_free(&in->q), tensor_free(&in->k), tensor_free(&in->v), tensor_free(&in->dout);
    free(in->pos), free(in->onehot);
}

/* a * c * v in f32 with one rounding, as the device computes it (exact in double first). */
static float product3(float a, float c, float v) { return (float)((double)a * c * v); }

/* ---- checks --------------------------------------------------------------------------------- */

/* The device's bits against round-to-nearest-even of the f32 products `want`, element for element;
 * and the proof that the case can tell: truncation would differ somewhere, and round-half-away too
 * where the output has ties (`ties`: the forward's outputs and dv, whose tie tokens' products are
 * 1.5 (1 + m ulp)). */
static void expect_bits(mhla_dtype dt, const char *what, const uint16_t *got, const float *want, size_t n, int ties)
{
    size_t rtz_differs = 0, away_differs = 0, nonzero = 0;
    for (size_t i = 0; i < n; ++i) {
        const uint16_t rne = want[i] == 0.0f ? (uint16_t)(bits_of(want[i]) >> 16) : round16(dt, want[i], NEAREST_EVEN);
        if (want[i] != 0.0f) {
            ++nonzero;
            rtz_differs += round16(dt, want[i], TOWARD_ZERO) != rne;
            away_differs += round16(dt, want[i], HALF_AWAY) != rne;
        }
        if ((got[i] & 0x7FFF) != (rne & 0x7FFF) || (rne & 0x7FFF && got[i] != rne))
            fail_msg("%s %s: element %zu is 0x%04x (%a), round-to-nearest-even of the f32 result %a is 0x%04x%s", what,
                     mhla_dtype_name(dt), i, (unsigned)got[i], (double)value16(dt, got[i]), (double)want[i],
                     (unsigned)rne,
                     got[i] == round16(dt, want[i], TOWARD_ZERO) ? " (rounded toward zero)"
                     : got[i] == round16(dt, want[i], HALF_AWAY) ? " (rounded half away from zero)"
                                                                 : "");
    }
    print_message("%-28s %-4s %zu elements bit for bit (%zu non-zero; truncation would change %zu, "
                  "half-away %zu)\n", what, mhla_dtype_name(dt), n, nonzero, rtz_differs, away_differs);
    if (!rtz_differs || (ties && !away_differs))
        fail_msg("%s %s: the inputs do not tell rounding directions apart", what, mhla_dtype_name(dt));
}

/* ---- the forward ---------------------------------------------------------------------------- */

/* o_t[j] = a_t c_t v_t[j]: the block's summary row p(t) holds token t's k v^T alone. */
static float *forward_products(const mhla_config *c, const inputs16 *in)
{
    const int64_t rows = c->batch * c->seq_t * c->seq_h * c->seq_w * c->heads, Dk = c->dk, Dv = c->dv;
    const int64_t N = c->seq_t * c->seq_h * c->seq_w;
    float *want = malloc((size_t)(rows * Dv) * sizeof *want);
    assert_non_null(want);
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t p = in->pos[(r / c->heads) % N];
        const float a = in->q.f[r * Dk + p] * (c->scale ? c->scale : 1.0f), cc = in->k.f[r * Dk + p];
        for (int64_t j = 0; j < Dv; ++j)
            want[r * Dv + j] = product3(a, cc, in->v.f[r * Dv + j]);
    }
    return want;
}

/* 2D: 8x12 tokens in 2x3 blocks of 4x4 = 16 tokens, Dk = 16: position p = (y % 4) * 4 + x % 4. */
static mhla_config grid_config(mhla_dtype dt, int64_t **pos)
{
    mhla_config c;
    mhla_config_init(&c);
    c.dtype = dt, c.batch = 2, c.heads = 2, c.seq_h = 8, c.seq_w = 12, c.block_h = 2, c.block_w = 3;
    c.dk = 16, c.dv = 32;
    c.feature_map = MHLA_FEATURE_NONE, c.normalizer = MHLA_NORMALIZER_NONE;
    *pos = malloc(96 * sizeof **pos);
    assert_non_null(*pos);
    for (int64_t y = 0; y < 8; ++y)
        for (int64_t x = 0; x < 12; ++x)
            (*pos)[y * 12 + x] = (y % 4) * 4 + x % 4;
    return c;
}


static void test_forward_rounds_to_nearest_even(void **state)
{
    mhla_context *ctx = *state;
    for (int dt = MHLA_DTYPE_F16; dt <= MHLA_DTYPE_BF16; ++dt) {
        int64_t *pos;
        mhla_config c = grid_config((mhla_dtype)dt, &pos);
        inputs16 in = inputs_make(c.dtype, &c, pos);
        float *mix = identity_mixing(6), *want = forward_products(&c, &in);
        uint16_t *out = nan16(in.v.n);
        mhla_plan *plan = NULL;
        assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
        assert_int_equal(mhla_forward_host(plan, in.q.h, in.k.h, in.v.h, mix, out), MHLA_OK);
        expect_bits(c.dtype, "forward 2D", out, want, in.v.n, 1);
        mhla_plan_destroy(plan);
        inputs_free(&in);
        free(pos), free(mix), free(want), free(out);
    }
}

/* ---- causal: chunk form, decoder, varlen ---------------------------------------------------- */

/* N tokens in chunks of C = Dk = 16, scale 1; positions restart at each sequence's start. */
static mhla_config causal_config(mhla_dtype dt, int64_t n)
{
    mhla_config c = config_causal(1, 2, n, 16, 16, 24);
    c.dtype = dt, c.scale = 1.0f;
    return c;
}

/* The causal identity: 1 on the diagonal, 0 below it, NaN above (never read). */
static float *causal_identity(int64_t r)
{
    float *mix = identity_mixing(r);
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = i + 1; j < r; ++j)
            mix[i * r + j] = NAN;
    return mix;
}

static void test_causal_rounds_to_nearest_even(void **state)
{
    mhla_context *ctx = *state;
    const int64_t N = 150, R = 10; /* the last chunk partial */
    const int32_t cu[] = {0, 37, 37, 100, 150}; /* varlen: 37 + 0 + 63 + 50, each chunked from its start */
    int64_t pos[150], pos_varlen[150];
    for (int64_t t = 0; t < N; ++t)
        pos[t] = t % 16;
    for (int s = 0; s < 4; ++s)
        for (int64_t t = cu[s]; t < cu[s + 1]; ++t)
            pos_varlen[t] = (t - cu[s]) % 16;
    for (int dt = MHLA_DTYPE_F16; dt <= MHLA_DTYPE_BF16; ++dt) {
        mhla_config c = causal_config((mhla_dtype)dt, N);
        c.mixing_rows = R;
        inputs16 in = inputs_make(c.dtype, &c, pos);
        float *mix = causal_identity(R), *want = forward_products(&c, &in);
        uint16_t *out = nan16(in.v.n);
        mhla_plan *plan = NULL;
        assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
        assert_int_equal(mhla_forward_host(plan, in.q.h, in.k.h, in.v.h, mix, out), MHLA_OK);
        expect_bits(c.dtype, "causal chunk form", out, want, in.v.n, 1);
        mhla_plan_destroy(plan);

        mhla_decoder *dec = NULL;
        assert_int_equal(mhla_decoder_create(ctx, &c, N, &dec), MHLA_OK);
        memset(out, 0xFF, in.v.n * 2);
        assert_int_equal(mhla_decoder_step_host(dec, in.q.h, in.k.h, in.v.h, mix, out, N), MHLA_OK);
        expect_bits(c.dtype, "decoder step", out, want, in.v.n, 1);
        assert_int_equal(mhla_decoder_reset(dec), MHLA_OK);
        memset(out, 0xFF, in.v.n * 2);
        assert_int_equal(mhla_decoder_prefill_host(dec, in.q.h, in.k.h, in.v.h, mix, out, N), MHLA_OK);
        expect_bits(c.dtype, "decoder prefill", out, want, in.v.n, 1);
        mhla_decoder_destroy(dec);
        inputs_free(&in);
        free(want);

        c.varlen = 1, c.mixing_rows = 4; /* the longest sequence has 4 chunks */
        in = inputs_make(c.dtype, &c, pos_varlen);
        want = forward_products(&c, &in);
        free(mix);
        mix = causal_identity(4);
        memset(out, 0xFF, in.v.n * 2);
        assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
        assert_int_equal(mhla_forward_varlen_host(plan, in.q.h, in.k.h, in.v.h, mix, cu, 4, out), MHLA_OK);
        expect_bits(c.dtype, "varlen", out, want, in.v.n, 1);
        mhla_plan_destroy(plan);
        inputs_free(&in);
        free(mix), free(want), free(out);
    }
}

/* ---- the backward ---------------------------------------------------------------------------- */

/* The gradients of these inputs, each element one product (feature map none, scale 1, normalizer
 * none). `peer(r, d)` is the row of the token in row r's block (or, causal, r's chunk at or before
 * r) whose position is d, or -1. dq~_t[d] = c_s v_s[j_t] e_t (s = peer(t, d), causal s <= t);
 * dk~_s[d] = a_t e_t v_s[j_t] (t = peer(s, d), causal t >= s); dv_s[j] = a_s c_s e_s at j = j_s. */
typedef int64_t (*peer_fn)(const mhla_config *c, const inputs16 *in, int64_t row, int64_t d, int later);

static void backward_products(const mhla_config *c, const inputs16 *in, peer_fn peer, float *want[3])
{
    const int64_t N = c->seq_t * c->seq_h * c->seq_w, rows = c->batch * N * c->heads, Dk = c->dk, Dv = c->dv;
    for (int g = 0; g < 3; ++g) {
        want[g] = calloc((size_t)(rows * (g == 2 ? Dv : Dk)), sizeof(float));
        assert_non_null(want[g]);
    }
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t p = in->pos[(r / c->heads) % N];
        const float e = in->dout.f[r * Dv + in->onehot[r]];
        for (int64_t d = 0; d < Dk; ++d) {
            const int64_t s = peer(c, in, r, d, 0), t = peer(c, in, r, d, 1);
            if (s >= 0) /* dq */
                want[0][r * Dk + d] = product3(in->k.f[s * Dk + d], in->v.f[s * Dv + in->onehot[r]], e);
            if (t >= 0) /* dk */
                want[1][r * Dk + d] = product3(in->q.f[t * Dk + d], in->dout.f[t * Dv + in->onehot[t]],
                                               in->v.f[r * Dv + in->onehot[t]]);
        }
        want[2][r * Dv + in->onehot[r]] = product3(in->q.f[r * Dk + p], in->k.f[r * Dk + p], e);
    }
}

/* 2D grid_config: the token of the same block (both directions) at position d. */
static int64_t grid_peer(const mhla_config *c, const inputs16 *in, int64_t row, int64_t d, int later)
{
    (void)in, (void)later;
    const int64_t h = row % c->heads, t = (row / c->heads) % 96, b = row / c->heads / 96;
    const int64_t y = (t / 12) / 4 * 4 + d / 4, x = (t % 12) / 4 * 4 + d % 4;
    return (b * 96 + y * 12 + x) * c->heads + h;
}

/* Causal chunks of 16: the token of the same chunk at position d, at or before the row's token
 * (later = 0) or at or after it (later = 1), if the chunk has it. */
static int64_t chunk_peer(const mhla_config *c, const inputs16 *in, int64_t row, int64_t d, int later)
{
    (void)in;
    const int64_t h = row % c->heads, t = row / c->heads, s = t / 16 * 16 + d;
    if (s >= c->seq_t || (later ? s < t : s > t))
        return -1;
    return s * c->heads + h;
}

static void expect_gradients(mhla_context *ctx, const mhla_config *c, const inputs16 *in, const float *mix,
                             peer_fn peer, const char *what)
{
    float *want[3];
    backward_products(c, in, peer, want);
    uint16_t *got[3] = {nan16(in->q.n), nan16(in->q.n), nan16(in->v.n)};
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, c, &plan), MHLA_OK);
    const mhla_status st = mhla_backward_host(plan, in->q.h, in->k.h, in->v.h, mix, in->dout.h, got[0], got[1],
                                              got[2], NULL);
    if (st != MHLA_OK)
        fail_msg("%s: %s: %s", what, mhla_status_name(st), mhla_context_message(ctx));
    static const char *const names[3] = {"dq", "dk", "dv"};
    char label[64];
    for (int g = 0; g < 3; ++g) {
        snprintf(label, sizeof label, "%s %s", what, names[g]);
        expect_bits(c->dtype, label, got[g], want[g], g == 2 ? in->v.n : in->q.n, g == 2);
        free(got[g]), free(want[g]);
    }
    mhla_plan_destroy(plan);
}

static void test_backward_rounds_to_nearest_even(void **state)
{
    mhla_context *ctx = *state;
    int64_t pos[150];
    for (int64_t t = 0; t < 150; ++t)
        pos[t] = t % 16;
    for (int dt = MHLA_DTYPE_F16; dt <= MHLA_DTYPE_BF16; ++dt) {
        int64_t *gpos;
        mhla_config c = grid_config((mhla_dtype)dt, &gpos);
        inputs16 in = inputs_make(c.dtype, &c, gpos);
        float *mix = identity_mixing(6);
        expect_gradients(ctx, &c, &in, mix, grid_peer, "backward 2D");
        inputs_free(&in);
        free(gpos), free(mix);

        c = causal_config((mhla_dtype)dt, 150);
        c.feature_map = MHLA_FEATURE_NONE;
        in = inputs_make(c.dtype, &c, pos);
        mix = causal_identity(10);
        expect_gradients(ctx, &c, &in, mix, chunk_peer, "causal backward");
        inputs_free(&in);
        free(mix);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_rounds_to_nearest_even),
        cmocka_unit_test(test_causal_rounds_to_nearest_even),
        cmocka_unit_test(test_backward_rounds_to_nearest_even),
    };
    return run_group("rounding", tests, context_setup, context_teardown);
}
