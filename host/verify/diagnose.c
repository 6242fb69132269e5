/* mhla_diagnose(): the paper's diagnosis of "global context collapse" (Sec. 3, Fig. 3) on a user's
 * own q and k. For each batch element and head it materialises the attention matrix of softmax
 * attention, linear attention (M = 1) and MHLA over the chosen query rows and all keys, in double
 * precision from the weights of docs/spec.md "Diagnosis", and measures its mean row entropy and its
 * singular values (the square roots of the eigenvalues of A A^T, verify/spectrum.c), hence its numerical
 * rank. */
#include "mhla_reference.h"

#include "verify/verify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mhla_diagnose_options_init(mhla_diagnose_options *opt)
{
    if (!opt)
        return;
    opt->max_rows = MHLA_DIAGNOSE_MAX_ROWS;
    opt->sample = 1;
    opt->seed = 1;
    opt->rank_rtol = 1e-5;
}

void mhla_diagnose_result_free(mhla_diagnose_result *res)
{
    if (!res)
        return;
    free(res->rank), free(res->entropy), free(res->sigma);
    memset(res, 0, sizeof *res);
}

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_desc(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* The query rows: all n, or r distinct ones drawn uniformly (a partial Fisher-Yates shuffle), sorted. */
static int pick_rows(int64_t n, int64_t r, uint32_t seed, int64_t *rows)
{
    if (r == n) {
        for (int64_t i = 0; i < n; ++i)
            rows[i] = i;
        return 0;
    }
    int64_t *perm = mhla__malloc((size_t)n * sizeof *perm);
    if (!perm)
        return -1;
    for (int64_t i = 0; i < n; ++i)
        perm[i] = i;
    uint64_t state = seed;
    for (int64_t i = 0; i < r; ++i) {
        const int64_t j = i + (int64_t)(splitmix64(&state) % (uint64_t)(n - i));
        const int64_t tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
        rows[i] = perm[i];
    }
    mhla__free(perm);
    qsort(rows, (size_t)r, sizeof *rows, cmp_i64);
    return 0;
}

typedef struct diag_work {
    const mhla_config *cfg;
    mhla_config kcfg; /* k's tensor: H_kv heads (grouped key/value heads) */
    const float *mixing;
    int64_t n, nk, r, dk; /* query tokens, key tokens (N_kv: cross-attention), rows, Dk */
    int64_t group;        /* query heads per key/value head */
    int64_t mix_stride;   /* Mc's row stride: M_kv, or the causal R */
    const int64_t *rows;
    const int64_t *qblk, *kblk; /* block (causal: chunk) of each query token and each key token */
    double *qk;   /* [r + nk][dk] one head's q rows, then its k rows, as stored */
    double *qkf;  /* the same with the feature map (and scale on q) applied */
    double *raw;  /* [r][nk] q_t . k_s: softmax's logits before its scale */
    double *dots; /* [r][nk] q~_t . k~_s, shared by linear attention and MHLA */
    double *a;    /* [r][nk] the kind's matrix */
    double *gram; /* [r][r] */
    double *eig;  /* [r] */
} diag_work;

/* Whether query t sees key s (causal: s <= t). */
static int sees(const diag_work *w, int64_t t, int64_t s) { return !w->cfg->causal || s <= t; }

/* Row i of the kind's matrix into w->a (normalised by sum |weight|); returns the row's entropy, or
 * -1 for a row whose weights are all zero. */
static double build_row(diag_work *w, mhla_attention_kind kind, int64_t i)
{
    const int64_t n = w->nk, t = w->rows[i];
    double *row = w->a + i * n;
    if (kind == MHLA_ATTENTION_SOFTMAX) {
        const double scale = 1.0 / sqrt((double)w->dk), *raw = w->raw + i * n;
        double top = -INFINITY;
        for (int64_t s = 0; s < n; ++s) {
            row[s] = sees(w, t, s) ? raw[s] * scale : -INFINITY;
            top = fmax(top, row[s]);
        }
        for (int64_t s = 0; s < n; ++s)
            row[s] = sees(w, t, s) ? exp(row[s] - top) : 0.0;
    } else {
        const double *dots = w->dots + i * n;
        const int64_t R = w->mix_stride, bt = w->qblk[t];
        for (int64_t s = 0; s < n; ++s)
            row[s] = !sees(w, t, s) ? 0.0
                     : kind == MHLA_ATTENTION_LINEAR ? dots[s]
                                                      : (double)w->mixing[bt * R + w->kblk[s]] * dots[s];
    }
    double total = 0.0;
    for (int64_t s = 0; s < n; ++s)
        total += fabs(row[s]);
    if (!(total > 0.0)) {
        memset(row, 0, (size_t)n * sizeof *row);
        return -1.0;
    }
    double entropy = 0.0;
    for (int64_t s = 0; s < n; ++s) {
        row[s] /= total;
        const double p = fabs(row[s]);
        if (p > 0.0)
            entropy -= p * log(p);
    }
    return entropy;
}

/* One (batch, head): its q rows and k rows gathered once, raw and with the feature map, then every
 * row's products with every key, raw (softmax) and featured (linear attention, MHLA). */
static void head_products(diag_work *w, const float *q, const float *k, int64_t b, int64_t h)
{
    const mhla_config *c = w->cfg;
    const int64_t n = w->nk, r = w->r, dk = w->dk;
    for (int64_t i = 0; i < r + n; ++i) {
        const int is_q = i < r;
        const float *x = is_q ? q : k;
        const int64_t t = is_q ? w->rows[i] : i - r;
        for (int64_t d = 0; d < dk; ++d) {
            /* q of head h; k of its key/value head, in a tensor of N_kv tokens and H_kv heads */
            const double v = is_q ? x[mhla__ref_offset(c, w->n, b, t, h, d, dk)]
                                  : x[mhla__ref_offset(&w->kcfg, n, b, t, h / w->group, d, dk)];
            w->qk[i * dk + d] = v;
            w->qkf[i * dk + d] = (is_q ? c->scale : 1.0) * mhla__ref_feature(v, c->feature_map, c->feature_eps);
        }
    }
    for (int64_t i = 0; i < r; ++i)
        for (int64_t s = 0; s < n; ++s) {
            const double *qr = w->qk + i * dk, *kr = w->qk + (r + s) * dk;
            const double *qf = w->qkf + i * dk, *kf = w->qkf + (r + s) * dk;
            double raw = 0.0, dot = 0.0;
            for (int64_t d = 0; d < dk; ++d)
                raw += qr[d] * kr[d], dot += qf[d] * kf[d];
            w->raw[i * n + s] = raw;
            w->dots[i * n + s] = dot;
        }
}

/* The singular values of w->a (r x nk), descending, into sv; 0, or -1 when out of memory. */
static int singular_values(diag_work *w, double *sv)
{
    const int64_t r = w->r, n = w->nk;
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = i; j < r; ++j) {
            const double *x = w->a + i * n, *y = w->a + j * n;
            double s = 0.0;
            for (int64_t c = 0; c < n; ++c)
                s += x[c] * y[c];
            w->gram[i * r + j] = w->gram[j * r + i] = s;
        }
    if (mhla__symmetric_eigenvalues(w->gram, r, w->eig) != 0)
        return -1;
    for (int64_t i = 0; i < r; ++i)
        sv[i] = sqrt(fmax(w->eig[i], 0.0));
    qsort(sv, (size_t)r, sizeof *sv, cmp_desc);
    return 0;
}

static mhla_status check_inputs(const mhla_config *c, const mhla_shape *sh, int64_t mix_elems, const float *q,
                                const float *k, const float *mixing, const mhla_diagnose_options *opt)
{
    mhla_status st = MHLA_OK;
    MHLA_FAIL_IF(st, opt->max_rows < 1 || opt->max_rows > 65536, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_diagnose: max_rows = %lld, expected 1..65536", (long long)opt->max_rows);
    MHLA_FAIL_IF(st, opt->sample != 0 && opt->sample != 1, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_diagnose: sample = %d, expected 0 or 1", opt->sample);
    MHLA_FAIL_IF(st, !(opt->rank_rtol > 0.0 && opt->rank_rtol < 1.0), NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_diagnose: rank_rtol = %g, expected a number in (0, 1)", opt->rank_rtol);
    const int64_t n = sh->n;
    MHLA_FAIL_IF(st, n > opt->max_rows && !opt->sample, NULL, MHLA_ERR_INVALID_SHAPE,
                 "mhla_diagnose: N = %lld tokens is over the limit of %lld materialised query rows; allow a random "
                 "sample of %lld rows, or raise the limit",
                 (long long)n, (long long)opt->max_rows, (long long)opt->max_rows);
    const size_t count = (size_t)(c->batch * n * c->heads * c->dk), kcount = (size_t)(sh->bh_kv * sh->n_kv * c->dk);
    for (size_t i = 0; i < count; ++i)
        MHLA_FAIL_IF(st, !isfinite(q[i]), NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "mhla_diagnose: q[%zu] = %g is not finite", i, (double)q[i]);
    for (size_t i = 0; i < kcount; ++i)
        MHLA_FAIL_IF(st, !isfinite(k[i]), NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "mhla_diagnose: k[%zu] = %g is not finite", i, (double)k[i]);
    const size_t mc = (size_t)mix_elems;
    for (size_t i = 0; i < mc; ++i)
        MHLA_FAIL_IF(st, !isfinite(mixing[i]), NULL, MHLA_ERR_INVALID_ARGUMENT,
                     "mhla_diagnose: mixing[%zu] = %g is not finite", i, (double)mixing[i]);
cleanup:
    return st;
}

mhla_status mhla_diagnose(const mhla_config *cfg_in, const float *q, const float *k, const float *mixing,
                          const mhla_diagnose_options *opt_in, mhla_diagnose_result *out)
{
    mhla_status st = MHLA_OK;
    mhla_diagnose_options opt;
    mhla_config cfg;
    mhla_shape shape;
    char msg[512];
    diag_work w;
    int64_t *rows = NULL, *blk = NULL;
    double *sv = NULL;
    memset(&w, 0, sizeof w);
    MHLA_FAIL_IF(st, !out, NULL, MHLA_ERR_INVALID_ARGUMENT, "mhla_diagnose: out is NULL");
    memset(out, 0, sizeof *out);
    MHLA_FAIL_IF(st, !cfg_in || !q || !k || !mixing, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_diagnose: cfg, q, k and mixing must not be NULL");
    MHLA_FAIL_IF(st, cfg_in->varlen, NULL, MHLA_ERR_INVALID_ARGUMENT,
                 "mhla_diagnose: a varlen configuration (diagnose one sequence at a time)");
    st = mhla__config_validate(cfg_in, &shape, msg, sizeof msg);
    MHLA_FAIL_IF(st, st != MHLA_OK, NULL, st, "mhla_diagnose: %s", msg);
    cfg = *cfg_in;
    mhla__config_resolve(&cfg);
    if (opt_in)
        opt = *opt_in;
    else
        mhla_diagnose_options_init(&opt);
    /* queries on the query grid; keys on the key/value grid, of H_kv heads (the same but for
     * cross-attention and grouped heads); Mc rows x cols */
    const int64_t n = shape.n, nk = shape.n_kv, H = cfg.heads, B = cfg.batch, K = MHLA_ATTENTION_KINDS;
    const int64_t mix_rows = cfg.causal ? cfg.mixing_rows : shape.m, mix_cols = cfg.causal ? cfg.mixing_rows : shape.m_kv;
    if ((st = check_inputs(&cfg, &shape, mix_rows * mix_cols, q, k, mixing, &opt)) != MHLA_OK)
        goto cleanup;
    const int64_t r = n < opt.max_rows ? n : opt.max_rows;

    w = (diag_work){.cfg = &cfg, .kcfg = cfg, .mixing = mixing, .n = n, .nk = nk, .r = r, .dk = cfg.dk,
                    .group = shape.group, .mix_stride = mix_cols};
    w.kcfg.heads = shape.heads_kv;
    rows = mhla__malloc((size_t)r * sizeof *rows);
    blk = mhla__malloc((size_t)(n + nk) * sizeof *blk);
    sv = mhla__malloc((size_t)r * sizeof *sv);
    w.qk = mhla__malloc((size_t)((r + nk) * cfg.dk) * sizeof *w.qk);
    w.qkf = mhla__malloc((size_t)((r + nk) * cfg.dk) * sizeof *w.qkf);
    w.raw = mhla__malloc((size_t)(r * nk) * sizeof *w.raw);
    w.dots = mhla__malloc((size_t)(r * nk) * sizeof *w.dots);
    w.a = mhla__malloc((size_t)(r * nk) * sizeof *w.a);
    w.gram = mhla__malloc((size_t)(r * r) * sizeof *w.gram);
    w.eig = mhla__malloc((size_t)r * sizeof *w.eig);
    out->rank = calloc((size_t)(H * K), sizeof *out->rank);
    out->entropy = calloc((size_t)(H * K), sizeof *out->entropy);
    out->sigma = calloc((size_t)(H * K * r), sizeof *out->sigma);
    MHLA_FAIL_IF(st, !rows || !blk || !sv || !w.qk || !w.qkf || !w.raw || !w.dots || !w.a || !w.gram || !w.eig || !out->rank || !out->entropy ||
                         !out->sigma,
                 NULL, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_diagnose: out of host memory for %lld x %lld matrices", (long long)r, (long long)nk);
    MHLA_FAIL_IF(st, pick_rows(n, r, opt.seed, rows) != 0, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY,
                 "mhla_diagnose: out of host memory sampling %lld of %lld rows", (long long)r, (long long)n);
    w.rows = rows;
    /* causal: the chunk; else the block, the keys' on their own grid */
    for (int64_t t = 0; t < n + nk; ++t) {
        const int kv = t >= n;
        const int64_t tok = kv ? t - n : t;
        if (cfg.causal)
            blk[t] = tok / cfg.chunk;
        else
            mhla__ref_locate(&cfg, &shape, kv, tok, &blk[t], NULL);
    }
    w.qblk = blk, w.kblk = blk + n;

    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
            head_products(&w, q, k, b, h);
            for (int kind = 0; kind < K; ++kind) {
                double entropy = 0.0;
                int64_t counted = 0;
                for (int64_t i = 0; i < r; ++i) {
                    const double e = build_row(&w, (mhla_attention_kind)kind, i);
                    if (e >= 0.0)
                        entropy += e, ++counted;
                }
                MHLA_FAIL_IF(st, singular_values(&w, sv) != 0, NULL, MHLA_ERR_OUT_OF_HOST_MEMORY,
                             "mhla_diagnose: out of host memory for the spectrum of %lld rows", (long long)r);
                int64_t rank = 0;
                for (int64_t i = 0; i < r; ++i)
                    rank += sv[i] > opt.rank_rtol * sv[0];
                const int64_t at = h * K + kind;
                out->rank[at] += (double)rank / (double)B;
                out->entropy[at] += (counted ? entropy / (double)counted : 0.0) / (double)B;
                for (int64_t i = 0; i < r; ++i)
                    out->sigma[at * r + i] += sv[i] / (double)B;
            }
        }
    out->heads = H, out->n = n, out->rows = r, out->sampled = r < n, out->rank_rtol = opt.rank_rtol;
    /* MHLA's rows are sums over the key blocks of Dk-dimensional products: rank <= M_kv * min(Nb_kv, Dk) */
    const int64_t per_block = shape.nb_kv < cfg.dk ? shape.nb_kv : cfg.dk;
    const int64_t keys = nk < r ? nk : r;
    out->rank_bound[MHLA_ATTENTION_SOFTMAX] = keys;
    out->rank_bound[MHLA_ATTENTION_LINEAR] = cfg.causal || keys < cfg.dk ? keys : cfg.dk;
    out->rank_bound[MHLA_ATTENTION_MHLA] = cfg.causal || keys < shape.m_kv * per_block ? keys : shape.m_kv * per_block;
cleanup:
    mhla__free(rows), mhla__free(blk), mhla__free(sv);
    mhla__free(w.qk), mhla__free(w.qkf), mhla__free(w.raw), mhla__free(w.dots), mhla__free(w.a), mhla__free(w.gram), mhla__free(w.eig);
    if (st != MHLA_OK && out)
        mhla_diagnose_result_free(out);
    return st;
}
