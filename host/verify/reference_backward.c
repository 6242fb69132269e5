/* The double-precision reference of the backward pass (docs/spec.md "Backward"), derived from the
 * token-pair form of the forward rather than from its block summaries, so that it shares no
 * structure with the kernels: every output is
 *   o_t = sum_s w(t,s) (q~_t . k~_s) v_s / den_t,
 * with w(t,s) = Mc[i(t), j(s)] for the pairs the mode lets t see (every token non-causally; the
 * earlier chunks and the chunk's own tokens up to t causally) and
 *   den_t = 1 (none), eps + sum_s w(t,s) (q~_t . k~_s) (paper),
 *   den_t = eps + sum_s w(t,s) (q~_{j(s),p(t)} . k~_s) (official: the query at t's position in
 *           the key's block).
 * Differentiating each pair term gives the gradients below. O(N^2 (Dk + Dv)) per head: for tests
 * and --check at small sizes, not for speed. */
#include "mhla_reference.h"

#include "verify/verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* phi and its derivative (docs/spec.md "Backward": 0 at x = 0 for relu and relu-eps). */
static double phi(double x, mhla_feature_map fm, double feps)
{
    switch (fm) {
    case MHLA_FEATURE_RELU:
        return x > 0.0 ? x : 0.0;
    case MHLA_FEATURE_RELU_EPS:
        return (x > 0.0 ? x : 0.0) + feps;
    case MHLA_FEATURE_ELU1:
        return x > 0.0 ? x + 1.0 : exp(x);
    case MHLA_FEATURE_NONE:
        break;
    }
    return x;
}

static double phi_prime(double x, mhla_feature_map fm)
{
    switch (fm) {
    case MHLA_FEATURE_RELU:
    case MHLA_FEATURE_RELU_EPS:
        return x > 0.0 ? 1.0 : 0.0;
    case MHLA_FEATURE_ELU1:
        return x > 0.0 ? 1.0 : exp(x);
    case MHLA_FEATURE_NONE:
        break;
    }
    return 1.0;
}

/* One sequence of `len` query tokens and `len_kv` key/value tokens (the same ones but for
 * cross-attention): what the pair loop needs to know about each token. */
typedef struct seq_view {
    const mhla_config *c;
    int64_t n, b, h, t0, len; /* tensors of n tokens; batch b, head h, tokens t0 .. t0+len-1 */
    int64_t n_kv, heads_kv, h_kv, len_kv; /* k and v: n_kv tokens, heads_kv heads; h's kv head; len_kv keys */
    int64_t rows, cols;       /* Mc (and dMc) is rows x cols, row-major */
    int64_t *grp, *pos;       /* block (or chunk) and position of each query token */
    int64_t *grp_kv;          /* block (or chunk) of each key token */
    int64_t *at;              /* non-causal: token at (block, position), for the official normalizer */
    int64_t nb;               /* tokens per block (non-causal) */
} seq_view;

static size_t idx(const seq_view *sv, int64_t t, int64_t d, int64_t dim)
{
    const mhla_config *c = sv->c;
    const int64_t tok = sv->t0 + t;
    if (c->layout == MHLA_LAYOUT_BHND)
        return (size_t)((((sv->b * c->heads + sv->h) * sv->n) + tok) * dim + d);
    return (size_t)((((sv->b * sv->n + tok) * c->heads) + sv->h) * dim + d);
}

/* Key/value token s (of the sequence) of k, v, dk, dv. */
static size_t kidx(const seq_view *sv, int64_t s, int64_t d, int64_t dim)
{
    const int64_t tok = sv->t0 + s;
    if (sv->c->layout == MHLA_LAYOUT_BHND)
        return (size_t)((((sv->b * sv->heads_kv + sv->h_kv) * sv->n_kv) + tok) * dim + d);
    return (size_t)((((sv->b * sv->n_kv + tok) * sv->heads_kv) + sv->h_kv) * dim + d);
}

/* May t see s, and with which entry of Mc? (docs/spec.md "Non-causal MHLA" and "Causal MHLA".) */
static int pair_weight(const seq_view *sv, int64_t t, int64_t s)
{
    if (!sv->c->causal)
        return 1;
    return sv->grp_kv[s] < sv->grp[t] || (sv->grp_kv[s] == sv->grp[t] && s <= t);
}

static mhla_status sequence_backward(const seq_view *sv, const float *q, const float *k, const float *v,
                                     const float *mixing, const float *dout, double *dq, double *dk, double *dv,
                                     double *dmix)
{
    mhla_status st = MHLA_OK;
    const mhla_config *c = sv->c;
    const int64_t L = sv->len, Lk = sv->len_kv, Dk = c->dk, Dv = c->dv, R = sv->cols; /* R: Mc's leading dimension */
    const int paper = c->normalizer == MHLA_NORMALIZER_PAPER, official = c->normalizer == MHLA_NORMALIZER_OFFICIAL;
    const double scale = c->scale, feps = c->feature_eps;
    double *qt = mhla__malloc((size_t)(L * Dk) * sizeof *qt), *kt = mhla__malloc((size_t)(Lk * Dk) * sizeof *kt);
    double *dqt = mhla__calloc((size_t)(L * Dk), sizeof *dqt), *dkt = mhla__calloc((size_t)(Lk * Dk), sizeof *dkt);
    double *g = mhla__malloc((size_t)(L * Dv) * sizeof *g), *r = mhla__calloc((size_t)L, sizeof *r);
    double *num = mhla__malloc((size_t)Dv * sizeof *num);
    MHLA_FAIL_IF(st, !qt || !kt || !dqt || !dkt || !g || !r || !num, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_reference_backward: out of host memory");
    for (int64_t t = 0; t < L; ++t)
        for (int64_t d = 0; d < Dk; ++d)
            qt[t * Dk + d] = scale * phi(q[idx(sv, t, d, Dk)], c->feature_map, feps);
    for (int64_t t = 0; t < Lk; ++t)
        for (int64_t d = 0; d < Dk; ++d)
            kt[t * Dk + d] = phi(k[kidx(sv, t, d, Dk)], c->feature_map, feps);
    /* The forward, per token: o_t = num_t / den_t; then g_t = dL/dnum_t = dO_t / den_t and
     * r_t = dL/dden_t = -(dO_t . o_t) / den_t. */
    for (int64_t t = 0; t < L; ++t) {
        double den = official || paper ? c->eps : 1.0;
        memset(num, 0, (size_t)Dv * sizeof *num);
        for (int64_t s = 0; s < Lk; ++s) {
            if (!pair_weight(sv, t, s))
                continue;
            const double w = mixing[sv->grp[t] * R + sv->grp_kv[s]];
            double a = 0.0;
            for (int64_t d = 0; d < Dk; ++d)
                a += qt[t * Dk + d] * kt[s * Dk + d];
            for (int64_t e = 0; e < Dv; ++e)
                num[e] += w * a * v[kidx(sv, s, e, Dv)];
            if (paper)
                den += w * a;
            if (official) {
                const double *u = qt + sv->at[sv->grp_kv[s] * sv->nb + sv->pos[t]] * Dk;
                double a2 = 0.0;
                for (int64_t d = 0; d < Dk; ++d)
                    a2 += u[d] * kt[s * Dk + d];
                den += w * a2;
            }
        }
        double od = 0.0;
        for (int64_t e = 0; e < Dv; ++e) {
            const double o = num[e] / den, go = dout[idx(sv, t, e, Dv)];
            g[t * Dv + e] = go / den;
            od += go * o;
        }
        r[t] = (paper || official) ? -od / den : 0.0;
    }
    /* Each pair term w (q~_t . k~_s) v_s of the numerator, and its share of the denominator. */
    for (int64_t t = 0; t < L; ++t)
        for (int64_t s = 0; s < Lk; ++s) {
            if (!pair_weight(sv, t, s))
                continue;
            const int64_t i = sv->grp[t], j = sv->grp_kv[s];
            const double w = mixing[i * R + j];
            double a = 0.0, gv = 0.0;
            for (int64_t d = 0; d < Dk; ++d)
                a += qt[t * Dk + d] * kt[s * Dk + d];
            for (int64_t e = 0; e < Dv; ++e)
                gv += g[t * Dv + e] * v[kidx(sv, s, e, Dv)];
            const double da = gv + (paper ? r[t] : 0.0); /* dL/d(w a) */
            for (int64_t d = 0; d < Dk; ++d) {
                dqt[t * Dk + d] += w * da * kt[s * Dk + d];
                dkt[s * Dk + d] += w * da * qt[t * Dk + d];
            }
            for (int64_t e = 0; e < Dv; ++e)
                dv[kidx(sv, s, e, Dv)] += w * a * g[t * Dv + e];
            if (dmix)
                dmix[i * R + j] += a * da;
            if (official) {
                const int64_t u = sv->at[j * sv->nb + sv->pos[t]];
                double a2 = 0.0;
                for (int64_t d = 0; d < Dk; ++d)
                    a2 += qt[u * Dk + d] * kt[s * Dk + d];
                for (int64_t d = 0; d < Dk; ++d) {
                    dqt[u * Dk + d] += r[t] * w * kt[s * Dk + d];
                    dkt[s * Dk + d] += r[t] * w * qt[u * Dk + d];
                }
                if (dmix)
                    dmix[i * R + j] += r[t] * a2;
            }
        }
    /* Through the feature maps and the scale; a key/value head's dk sums its query heads'. */
    for (int64_t t = 0; t < L; ++t)
        for (int64_t d = 0; d < Dk; ++d)
            dq[idx(sv, t, d, Dk)] = dqt[t * Dk + d] * scale * phi_prime(q[idx(sv, t, d, Dk)], c->feature_map);
    for (int64_t t = 0; t < Lk; ++t)
        for (int64_t d = 0; d < Dk; ++d)
            dk[kidx(sv, t, d, Dk)] += dkt[t * Dk + d] * phi_prime(k[kidx(sv, t, d, Dk)], c->feature_map);
cleanup:
    mhla__free(qt), mhla__free(kt), mhla__free(dqt), mhla__free(dkt), mhla__free(g), mhla__free(r), mhla__free(num);
    return st;
}

static mhla_status run(const char *fn, const mhla_config *cfg_in, const float *q, const float *k, const float *v,
                       const float *mixing, const int32_t *cu, size_t num_seqs, const float *dout, double *dq,
                       double *dk, double *dv, double *dmixing)
{
    mhla_status st = MHLA_OK;
    mhla_config cfg;
    mhla_shape s;
    char msg[512];
    int64_t *grp = NULL, *pos = NULL, *at = NULL, *grp_kv = NULL, *pos_kv = NULL;

    MHLA_FAIL_IF(st, !cfg_in, NULL, MHLA_ERR_INVALID_ARGUMENT, "%s: config is NULL", fn);
    MHLA_FAIL_IF(st, !q || !k || !v || !mixing || !dout || !dq || !dk || !dv, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "%s: a tensor pointer is NULL (only dmixing may be)", fn);
    st = mhla__config_validate(cfg_in, &s, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, NULL, st, "%s: %s", fn, msg);
    cfg = *cfg_in;
    mhla__config_resolve(&cfg);
    MHLA_FAIL_IF(st, cfg.varlen != (cu != NULL), NULL, MHLA_ERR_INVALID_ARGUMENT,
                 cfg.varlen ? "%s: a varlen config needs mhla_reference_backward_varlen()"
                            : "%s: the config is not varlen (causal = 1, varlen = 1)",
                 fn);
    if (cu) {
        st = mhla__cu_seqlens_check(cu, num_seqs, s.n, cfg.chunk, cfg.mixing_rows, msg, sizeof msg);
        MHLA_FAIL_IF(st, st != MHLA_OK, NULL, st, "%s: %s", fn, msg);
    }
    const int64_t N = s.n, Nk = s.n_kv, rows = cfg.causal ? cfg.mixing_rows : s.m;
    const int64_t cols = cfg.causal ? cfg.mixing_rows : s.m_kv;
    const size_t nq = (size_t)(s.bh * N * cfg.dk), nk = (size_t)(s.bh_kv * Nk * cfg.dk),
                 nv = (size_t)(s.bh_kv * Nk * cfg.dv);
    memset(dq, 0, nq * sizeof *dq);
    memset(dk, 0, nk * sizeof *dk);
    memset(dv, 0, nv * sizeof *dv);
    if (dmixing)
        memset(dmixing, 0, (size_t)(rows * cols) * sizeof *dmixing);
    grp = mhla__malloc((size_t)N * sizeof *grp);
    pos = mhla__malloc((size_t)N * sizeof *pos);
    at = mhla__malloc((size_t)N * sizeof *at);
    grp_kv = mhla__malloc((size_t)Nk * sizeof *grp_kv);
    pos_kv = mhla__malloc((size_t)Nk * sizeof *pos_kv);
    MHLA_FAIL_IF(st, !grp || !pos || !at || !grp_kv || !pos_kv, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "%s: out of host memory", fn);

    seq_view sv = {.c = &cfg, .n = N, .n_kv = Nk, .heads_kv = s.heads_kv, .rows = rows, .cols = cols, .grp = grp,
                   .pos = pos, .grp_kv = cfg.causal ? grp : grp_kv, .at = at, .nb = s.nb};
    if (!cfg.causal) {
        for (int64_t t = 0; t < N; ++t) {
            mhla__ref_locate(&cfg, &s, 0, t, &grp[t], &pos[t]);
            at[grp[t] * s.nb + pos[t]] = t;
        }
        for (int64_t t = 0; t < Nk; ++t)
            mhla__ref_locate(&cfg, &s, 1, t, &grp_kv[t], &pos_kv[t]);
    }
    /* Sequences: every batch element (each one sequence), or the packed ones of a varlen batch. */
    const size_t nseq = cu ? num_seqs : (size_t)cfg.batch;
    for (size_t sq = 0; sq < nseq; ++sq) {
        sv.b = cu ? 0 : (int64_t)sq;
        sv.t0 = cu ? cu[sq] : 0;
        sv.len = cu ? (int64_t)cu[sq + 1] - cu[sq] : N;
        sv.len_kv = cu ? sv.len : Nk;
        if (cfg.causal)
            for (int64_t t = 0; t < sv.len; ++t)
                grp[t] = t / cfg.chunk, pos[t] = t % cfg.chunk;
        for (int64_t h = 0; h < cfg.heads; ++h) {
            sv.h = h;
            sv.h_kv = h / s.group;
            MHLA_FORWARD_IF_ERROR(st, sequence_backward(&sv, q, k, v, mixing, dout, dq, dk, dv, dmixing));
        }
    }
cleanup:
    mhla__free(grp), mhla__free(pos), mhla__free(at), mhla__free(grp_kv), mhla__free(pos_kv);
    return st;
}

mhla_status mhla_reference_backward(const mhla_config *cfg, const float *q, const float *k, const float *v,
                                    const float *mixing, const float *dout, double *dq, double *dk, double *dv,
                                    double *dmixing)
{
    return run("mhla_reference_backward", cfg, q, k, v, mixing, NULL, 0, dout, dq, dk, dv, dmixing);
}

mhla_status mhla_reference_backward_varlen(const mhla_config *cfg, const float *q, const float *k, const float *v,
                                           const float *mixing, const int32_t *cu_seqlens, size_t num_seqs,
                                           const float *dout, double *dq, double *dk, double *dv, double *dmixing)
{
    if (!cu_seqlens)
        return mhla__fail(NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_reference_backward_varlen: cu_seqlens is NULL");
    return run("mhla_reference_backward_varlen", cfg, q, k, v, mixing, cu_seqlens, num_seqs, dout, dq, dk, dv,
               dmixing);
}

double mhla_reference_backward_tolerance(mhla_dtype dtype)
{
    switch (dtype) {
    case MHLA_DTYPE_F32:
        return 1e-4;
    case MHLA_DTYPE_F16:
        return 5e-3;
    case MHLA_DTYPE_BF16:
        return 3e-2;
    }
    return 0.0;
}
