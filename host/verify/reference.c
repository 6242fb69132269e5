/* The double-precision reference: docs/spec.md's formulas evaluated directly, one batch and head at a
 * time (one sequence at a time in causal mode), for clarity rather than speed. Every kernel is
 * tested against it. */
#include "mhla_reference.h"

#include "verify/verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* phi(x) in double, NaN-propagating like the kernels. */
double mhla__ref_feature(double x, mhla_feature_map fm, double feature_eps)
{
    switch (fm) {
    case MHLA_FEATURE_NONE:
        return x;
    case MHLA_FEATURE_RELU:
        return x < 0.0 ? 0.0 : x;
    case MHLA_FEATURE_RELU_EPS:
        return (x < 0.0 ? 0.0 : x) + feature_eps;
    case MHLA_FEATURE_ELU1:
        return x > 0.0 ? x + 1.0 : exp(x);
    }
    return x;
}

/* Offset of element (batch, token, head, d) in a tensor of `dim` columns. */
size_t mhla__ref_offset(const mhla_config *c, int64_t n, int64_t b, int64_t t, int64_t h, int64_t d, int64_t dim)
{
    if (c->layout == MHLA_LAYOUT_BHND)
        return (size_t)((((b * c->heads + h) * n) + t) * dim + d);
    return (size_t)((((b * n + t) * c->heads) + h) * dim + d);
}

/* One side's grid: (T, seq_h, seq_w) tokens in blocks of (pt, ph, pw) tokens. */
typedef struct side_grid {
    int64_t seq_h, seq_w, pt, ph, pw;
} side_grid;

static side_grid side_of(const mhla_config *c, const mhla_shape *s, int kv)
{
    const side_grid q = {c->seq_h, c->seq_w, s->pt, s->ph, s->pw};
    const side_grid k = {c->kv_seq_h, c->kv_seq_w, s->pt_kv, s->ph_kv, s->pw_kv};
    return kv ? k : q;
}

void mhla__ref_locate(const mhla_config *c, const mhla_shape *s, int kv, int64_t t, int64_t *blk, int64_t *pos)
{
    const side_grid g = side_of(c, s, kv);
    const int64_t x = t % g.seq_w, y = (t / g.seq_w) % g.seq_h, f = t / (g.seq_w * g.seq_h);
    *blk = ((f / g.pt) * (g.seq_h / g.ph) + y / g.ph) * (g.seq_w / g.pw) + x / g.pw;
    if (pos)
        *pos = ((f % g.pt) * g.ph + y % g.ph) * g.pw + x % g.pw;
}

int64_t mhla__ref_token(const mhla_config *c, const mhla_shape *s, int kv, int64_t blk, int64_t p)
{
    const side_grid g = side_of(c, s, kv);
    const int64_t blk_w = g.seq_w / g.pw, blk_h = g.seq_h / g.ph;
    const int64_t bw_i = blk % blk_w, bh_i = (blk / blk_w) % blk_h, bt_i = blk / (blk_w * blk_h);
    const int64_t px = p % g.pw, py = (p / g.pw) % g.ph, pf = p / (g.pw * g.ph);
    const int64_t f = bt_i * g.pt + pf, y = bh_i * g.ph + py, x = bw_i * g.pw + px;
    return (f * g.seq_h + y) * g.seq_w + x;
}

/* Offset of element (batch, token, kv head, d) of k or v: N_kv tokens, H_kv heads. */
static size_t kv_offset(const mhla_config *c, const mhla_shape *s, int64_t b, int64_t t, int64_t h, int64_t d,
                        int64_t dim)
{
    if (c->layout == MHLA_LAYOUT_BHND)
        return (size_t)((((b * s->heads_kv + h) * s->n_kv) + t) * dim + d);
    return (size_t)((((b * s->n_kv + t) * s->heads_kv) + h) * dim + d);
}

/* Causal MHLA (docs/spec.md "Causal MHLA"), chunk form, for one sequence: batch element b, head h,
 * tokens t0 .. t0+len-1 of tensors of n tokens, chunked from t0. Mc is R x R (R = mixing_rows);
 * only Mc[i][j <= i] is read. */
static mhla_status causal_sequence(const mhla_config *c, int64_t n, int64_t b, int64_t h, int64_t t0, int64_t len,
                                   const float *q, const float *k, const float *v, const float *mixing, double *out)
{
    if (len == 0)
        return MHLA_OK; /* an empty sequence of a packed batch */
    mhla_status st = MHLA_OK;
    const int64_t C = c->chunk, M = (len + C - 1) / C, R = c->mixing_rows, Dk = c->dk, Dv = c->dv;
    const double scale = c->scale, feps = c->feature_eps;
    const int paper = c->normalizer == MHLA_NORMALIZER_PAPER;
    double *S = mhla__calloc((size_t)(M * Dk * Dv), sizeof *S), *z = mhla__calloc((size_t)(M * Dk), sizeof *z);
    double *P = mhla__calloc((size_t)(Dk * Dv), sizeof *P), *zP = mhla__calloc((size_t)Dk, sizeof *zP);
    double *qt = mhla__calloc((size_t)Dk, sizeof *qt), *num = mhla__calloc((size_t)Dv, sizeof *num);
    MHLA_FAIL_IF(st, !S || !z || !P || !zP || !qt || !num, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_reference_forward: out of host memory");
    /* k and v of query head h's key/value head, in tensors of H_kv heads (cfg resolved) */
    mhla_config kc = *c;
    kc.heads = c->kv_heads;
    const int64_t hk = h / (c->heads / c->kv_heads);
#define KT(s, d) mhla__ref_feature(k[mhla__ref_offset(&kc, n, b, t0 + (s), hk, (d), Dk)], c->feature_map, feps)
    /* S_j = sum_{s in chunk j} k~_s v_s^T, z_j = sum k~_s. */
    for (int64_t s = 0; s < len; ++s)
        for (int64_t d = 0; d < Dk; ++d) {
            const double kd = KT(s, d);
            z[(s / C) * Dk + d] += kd;
            for (int64_t e = 0; e < Dv; ++e)
                S[((s / C) * Dk + d) * Dv + e] += kd * v[mhla__ref_offset(&kc, n, b, t0 + s, hk, e, Dv)];
        }
    for (int64_t i = 0; i < M; ++i) {
        /* P_i = sum_{j<i} Mc[i,j] S_j (and z likewise). */
        memset(P, 0, (size_t)(Dk * Dv) * sizeof *P);
        memset(zP, 0, (size_t)Dk * sizeof *zP);
        for (int64_t j = 0; j < i; ++j) {
            const double w = mixing[i * R + j];
            for (int64_t x = 0; x < Dk * Dv; ++x)
                P[x] += w * S[j * Dk * Dv + x];
            for (int64_t d = 0; d < Dk; ++d)
                zP[d] += w * z[j * Dk + d];
        }
        const double mii = mixing[i * R + i];
        const int64_t end = (i + 1) * C < len ? (i + 1) * C : len;
        for (int64_t t = i * C; t < end; ++t) {
            double den_inter = 0.0, den_intra = 0.0;
            for (int64_t d = 0; d < Dk; ++d) {
                qt[d] = scale * mhla__ref_feature(q[mhla__ref_offset(c, n, b, t0 + t, h, d, Dk)], c->feature_map, feps);
                den_inter += qt[d] * zP[d];
            }
            for (int64_t e = 0; e < Dv; ++e) {
                num[e] = 0.0;
                for (int64_t d = 0; d < Dk; ++d)
                    num[e] += qt[d] * P[d * Dv + e];
            }
            /* Mc[i,i] * sum_{s in chunk i, s <= t} (q~_t . k~_s) v_s, as a separate sum. */
            double intra[MHLA_MAX_HEAD_DIM] = {0};
            for (int64_t s = i * C; s <= t; ++s) {
                double a = 0.0;
                for (int64_t d = 0; d < Dk; ++d)
                    a += qt[d] * KT(s, d);
                den_intra += a;
                for (int64_t e = 0; e < Dv; ++e)
                    intra[e] += a * v[mhla__ref_offset(&kc, n, b, t0 + s, hk, e, Dv)];
            }
            const double den = paper ? den_inter + mii * den_intra + c->eps : 1.0;
            for (int64_t e = 0; e < Dv; ++e)
                out[mhla__ref_offset(c, n, b, t0 + t, h, e, Dv)] = (num[e] + mii * intra[e]) / den;
        }
    }
#undef KT
cleanup:
    mhla__free(S), mhla__free(z), mhla__free(P), mhla__free(zP), mhla__free(qt), mhla__free(num);
    return st;
}

/* The checks every reference entry point starts with: pointers, then the plan's validation, then
 * the defaults resolved into *cfg. */
static mhla_status prepare(const char *fn, const mhla_config *cfg_in, const float *q, const float *k, const float *v,
                           const float *mixing, const double *out, mhla_config *cfg, mhla_shape *s)
{
    mhla_status st = MHLA_OK;
    char msg[512];
    MHLA_FAIL_IF(st, !cfg_in, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: config is NULL", fn);
    MHLA_FAIL_IF(st, !q || !k || !v || !mixing || !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: a tensor pointer is NULL",
                 fn);
    st = mhla__config_validate(cfg_in, s, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, NULL, st, "%s", msg);
    *cfg = *cfg_in;
    mhla__config_resolve(cfg);
cleanup:
    return st;
}

mhla_status mhla_reference_forward_varlen(const mhla_config *cfg_in, const float *q, const float *k, const float *v,
                                          const float *mixing, const int32_t *cu_seqlens, size_t num_seqs,
                                          double *out)
{
    mhla_status st = MHLA_OK;
    mhla_config cfg;
    mhla_shape s;
    char msg[512];
    MHLA_FORWARD_IF_ERROR(st, prepare("mhla_reference_forward_varlen", cfg_in, q, k, v, mixing, out, &cfg, &s));
    MHLA_FAIL_IF(st, !cfg.varlen, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_reference_forward_varlen: the config is not varlen (causal = 1, varlen = 1)");
    st = mhla__cu_seqlens_check(cu_seqlens, num_seqs, s.n, cfg.chunk, cfg.mixing_rows, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, NULL, st, "mhla_reference_forward_varlen: %s", msg);
    for (size_t q_i = 0; q_i < num_seqs; ++q_i)
        for (int64_t h = 0; h < cfg.heads; ++h)
            MHLA_FORWARD_IF_ERROR(st, causal_sequence(&cfg, s.n, 0, h, cu_seqlens[q_i],
                                                      (int64_t)cu_seqlens[q_i + 1] - cu_seqlens[q_i], q, k, v, mixing,
                                                      out));
cleanup:
    return st;
}

mhla_status mhla_reference_forward(const mhla_config *cfg_in, const float *q, const float *k, const float *v,
                                   const float *mixing, double *out)
{
    mhla_status st = MHLA_OK;
    mhla_config cfg;
    mhla_shape s;
    double *S = NULL, *Smix = NULL, *qt = NULL, *dots = NULL;

    MHLA_FORWARD_IF_ERROR(st, prepare("mhla_reference_forward", cfg_in, q, k, v, mixing, out, &cfg, &s));
    if (cfg.causal) {
        MHLA_FAIL_IF(st, cfg.varlen, NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "mhla_reference_forward: a varlen config needs mhla_reference_forward_varlen()");
        for (int64_t b = 0; b < cfg.batch; ++b)
            for (int64_t h = 0; h < cfg.heads; ++h)
                MHLA_FORWARD_IF_ERROR(st, causal_sequence(&cfg, s.n, b, h, 0, s.n, q, k, v, mixing, out));
        goto cleanup;
    }

    /* Queries: M blocks of Nb of N tokens; keys and values: M_kv blocks of Nb_kv of N_kv tokens, H_kv
     * heads (the queries' for self-attention); Mc is M x M_kv. */
    const int64_t M = s.m, Nb = s.nb, N = s.n, Dk = cfg.dk, Dv = cfg.dv, C = Dv + 1;
    const int64_t Mk = s.m_kv, Nbk = s.nb_kv;
    const double scale = cfg.scale, feps = cfg.feature_eps, eps = cfg.eps;
    S = mhla__calloc((size_t)(Mk * Dk * C), sizeof *S);
    Smix = mhla__calloc((size_t)(M * Dk * C), sizeof *Smix);
    qt = mhla__calloc((size_t)(N * Dk), sizeof *qt); /* q~ of every token, indexed by block and position */
    dots = mhla__calloc((size_t)N, sizeof *dots);
    MHLA_FAIL_IF(st, !S || !Smix || !qt || !dots, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_reference_forward: out of host memory");

    for (int64_t b = 0; b < cfg.batch; ++b) {
        for (int64_t h = 0; h < cfg.heads; ++h) {
            const int64_t hk = h / s.group; /* the key/value head query head h reads */
            /* 1. S_b = sum k~ v^T, z_b = sum k~ (stored as column Dv), over the key/value blocks. */
            memset(S, 0, (size_t)(Mk * Dk * C) * sizeof *S);
            for (int64_t blk = 0; blk < Mk; ++blk)
                for (int64_t p = 0; p < Nbk; ++p) {
                    const int64_t t = mhla__ref_token(&cfg, &s, 1, blk, p);
                    for (int64_t d = 0; d < Dk; ++d) {
                        const double kd = mhla__ref_feature(k[kv_offset(&cfg, &s, b, t, hk, d, Dk)], cfg.feature_map, feps);
                        double *row = S + (blk * Dk + d) * C;
                        for (int64_t e = 0; e < Dv; ++e)
                            row[e] += kd * v[kv_offset(&cfg, &s, b, t, hk, e, Dv)];
                        row[Dv] += kd;
                    }
                }
            /* 2. S~_i = sum_b Mc[i,b] S_b. */
            memset(Smix, 0, (size_t)(M * Dk * C) * sizeof *Smix);
            for (int64_t i = 0; i < M; ++i)
                for (int64_t blk = 0; blk < Mk; ++blk) {
                    const double w = mixing[i * Mk + blk];
                    for (int64_t x = 0; x < Dk * C; ++x)
                        Smix[i * Dk * C + x] += w * S[blk * Dk * C + x];
                }
            /* q~ per (block, position), and q~_{b,p} . z_b for the official normalizer (self-attention
             * only: config/config.c refuses it across two grids). */
            const int official = cfg.normalizer == MHLA_NORMALIZER_OFFICIAL;
            for (int64_t blk = 0; blk < M; ++blk)
                for (int64_t p = 0; p < Nb; ++p) {
                    const int64_t t = mhla__ref_token(&cfg, &s, 0, blk, p);
                    double dot = 0.0;
                    for (int64_t d = 0; d < Dk; ++d) {
                        const double qd = scale * mhla__ref_feature(q[mhla__ref_offset(&cfg, N, b, t, h, d, Dk)], cfg.feature_map, feps);
                        qt[(blk * Nb + p) * Dk + d] = qd;
                        dot += official ? qd * S[(blk * Dk + d) * C + Dv] : 0.0;
                    }
                    dots[blk * Nb + p] = dot;
                }
            /* 3. o_t = q~ S~_i / normalizer. */
            for (int64_t i = 0; i < M; ++i)
                for (int64_t p = 0; p < Nb; ++p) {
                    const int64_t t = mhla__ref_token(&cfg, &s, 0, i, p);
                    const double *qd = qt + (i * Nb + p) * Dk;
                    double den = 1.0;
                    if (cfg.normalizer == MHLA_NORMALIZER_PAPER) {
                        den = eps;
                        for (int64_t d = 0; d < Dk; ++d)
                            den += qd[d] * Smix[(i * Dk + d) * C + Dv];
                    } else if (cfg.normalizer == MHLA_NORMALIZER_OFFICIAL) {
                        den = eps;
                        for (int64_t blk = 0; blk < M; ++blk)
                            den += (double)mixing[i * M + blk] * dots[blk * Nb + p];
                    }
                    for (int64_t e = 0; e < Dv; ++e) {
                        double num = 0.0;
                        for (int64_t d = 0; d < Dk; ++d)
                            num += qd[d] * Smix[(i * Dk + d) * C + e];
                        out[mhla__ref_offset(&cfg, N, b, t, h, e, Dv)] = num / den;
                    }
                }
        }
    }
cleanup:
    mhla__free(S);
    mhla__free(Smix);
    mhla__free(qt);
    mhla__free(dots);
    return st;
}

mhla_status mhla_reference_softmax(const mhla_config *cfg_in, const float *q, const float *k, const float *v,
                                   double *out)
{
    mhla_status st = MHLA_OK;
    mhla_config cfg;
    mhla_shape s;
    char msg[512];
    double *logit = NULL;

    MHLA_FAIL_IF(st, !q || !k || !v || !out, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_reference_softmax: a tensor pointer is NULL");
    st = mhla__softmax_config(cfg_in, &cfg, &s, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, NULL, st, "mhla_reference_softmax: %s", msg);
    /* keys and values: N_kv tokens of H_kv heads (cross-attention, grouped heads) */
    const int64_t N = s.n, Nk = s.n_kv, Dk = cfg.dk, Dv = cfg.dv;
    logit = mhla__malloc((size_t)Nk * sizeof *logit);
    MHLA_FAIL_IF(st, !logit, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY, "mhla_reference_softmax: out of host memory");
    for (int64_t b = 0; b < cfg.batch; ++b)
        for (int64_t h = 0; h < cfg.heads; ++h)
            for (int64_t t = 0; t < N; ++t) {
                const int64_t hk = h / s.group;
                double mx = -INFINITY, sum = 0.0;
                for (int64_t u = 0; u < Nk; ++u) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < Dk; ++d)
                        dot += (double)q[mhla__ref_offset(&cfg, N, b, t, h, d, Dk)] * k[kv_offset(&cfg, &s, b, u, hk, d, Dk)];
                    logit[u] = cfg.scale * dot;
                    mx = fmax(mx, logit[u]);
                }
                for (int64_t u = 0; u < Nk; ++u) {
                    logit[u] = exp(logit[u] - mx); /* now the unnormalized weight */
                    sum += logit[u];
                }
                for (int64_t e = 0; e < Dv; ++e) {
                    double acc = 0.0;
                    for (int64_t u = 0; u < Nk; ++u)
                        acc += logit[u] * v[kv_offset(&cfg, &s, b, u, hk, e, Dv)];
                    out[mhla__ref_offset(&cfg, N, b, t, h, e, Dv)] = acc / sum;
                }
            }
cleanup:
    mhla__free(logit);
    return st;
}

double mhla_max_rel_err(const float *got, const double *ref, size_t n)
{
    double max_diff = 0.0, max_ref = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double g = got[i], r = ref[i];
        if (!isfinite(r) || !isfinite(g)) {
            const int same = (isnan(r) && isnan(g)) || (isinf(r) && isinf(g) && (r > 0) == (g > 0));
            if (!same)
                return INFINITY;
            continue;
        }
        max_diff = fmax(max_diff, fabs(g - r));
        max_ref = fmax(max_ref, fabs(r));
    }
    return max_ref > 0.0 ? max_diff / max_ref : max_diff;
}

double mhla_reference_tolerance(mhla_dtype dtype, int64_t n)
{
    switch (dtype) {
    case MHLA_DTYPE_F32:
        return n <= 4096 ? 1e-5 : 1e-4;
    case MHLA_DTYPE_F16:
        return 2e-3;
    case MHLA_DTYPE_BF16:
        return 1.6e-2;
    }
    return 0.0;
}
