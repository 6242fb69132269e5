/* What `mhla run`, its causal and --mpi paths, `mhla grad` and `mhla diagnose` share: the options,
 * the inputs and their checks, the token and block grids, the mixing matrix, the device context,
 * the failure reports, the timing line and the output. Below cmd_run.c, run_recurrent.c and
 * run_mpi.c; above run_causal.c (the causal options' rules), whose functions it calls. */
#include "cli.h"
#include "run.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The subcommand messages name: "run", "grad" or "diagnose", set by run_parse(). */
static const char *cmd = RUN_CMD;

void run_job_free(run_job *job)
{
    npy_writer_abort(&job->out); /* before the guard goes: a signal between them finds no file */
    cli_guard_temp(NULL);
    for (int t = 0; t < 5; ++t)
        if (job->buf[t])
            clReleaseMemObject(job->buf[t]);
    mhla_plan_destroy(job->plan);
    mhla_decoder_destroy(job->dec);
    mhla_context_destroy(job->ctx);
    for (int i = 0; i < 3; ++i) {
        if (job->f32[i] != job->in[i].data)
            free(job->f32[i]);
        free(job->dev16[i]);
        npy_free(&job->in[i]);
    }
    free(job->mixing);
    free(job->cu_seqlens);
    free(job->result);
}

/* ---- options ------------------------------------------------------------------------------- */

/* Parses an enum option with the library's parser, which explains a bad name. */
#define PARSE_ENUM(job, index, parse_fn, dst)                                                       \
    ((job)->o[index].value && parse_fn((job)->o[index].value, &(dst)) != MHLA_OK                    \
         ? cli_usage(cmd, "%s %s: %s", (job)->o[index].name, (job)->o[index].value, mhla_last_message()) \
         : 0)

static int parse_options(run_job *job, const char *help, int argc, char **argv, int *help_shown)
{
    cli_option *o = job->o;
    int rc;
    if ((rc = args_parse(cmd, help, o, O_COUNT, argc, argv, help_shown)) != 0 || *help_shown)
        return rc;
    static const int run_required[] = {O_Q, O_K, O_V, O_OUT, -1, -1, -1};
    static const int grad_required[] = {O_Q, O_K, O_V, O_DOUT, O_DQ, O_DK, O_DV};
    static const int diagnose_required[] = {O_Q, O_K, -1, -1, -1, -1, -1};
    const int *required = strcmp(cmd, RUN_CMD) == 0        ? run_required
                          : strcmp(cmd, "diagnose") == 0 ? diagnose_required
                                                         : grad_required;
    for (size_t i = 0; i < 7 && required[i] >= 0; ++i)
        if (!o[required[i]].value)
            return cli_usage(cmd, "%s: missing %s %s", cmd, o[required[i]].name, o[required[i]].metavar);
    static const int causal_only[] = {O_CHUNK, O_RECURRENT, O_CU_SEQLENS};
    for (size_t i = 0; i < sizeof causal_only / sizeof causal_only[0]; ++i) {
        const cli_option *c = &o[causal_only[i]];
        if (c->value && c->name && !o[O_CAUSAL].value)
            return c->metavar ? cli_usage(cmd, "%s %s: only with --causal", c->name, c->value)
                              : cli_usage(cmd, "%s: only with --causal", c->name);
    }
    if (o[O_BLOCKS].value && o[O_CAUSAL].value)
        return cli_usage(cmd, "--blocks %s: not with --causal (its blocks are chunks of --chunk tokens)",
                         o[O_BLOCKS].value);
    for (int i = O_KV_GRID; i <= O_KV_BLOCKS; ++i)
        if (o[i].value && o[O_CAUSAL].value)
            return cli_usage(cmd, "%s %s: not with --causal (cross-attention is non-causal)", o[i].name, o[i].value);
    if (o[O_MIXING].value && o[O_INIT].value)
        return cli_usage(cmd, "--mixing and --init: give one (a matrix, or how to make one)");

    mhla_config *cfg = &job->cfg;
    /* Without --chunk, the library's chunk (MHLA_DEFAULT_CHUNK): it is part of the model (Mc's rows
     * are chunks), so run, grad and diagnose must agree with the library and the Python package. */
    if (o[O_CAUSAL].value)
        mhla_config_init_causal(cfg);
    else
        mhla_config_init(cfg);
    if ((rc = PARSE_ENUM(job, O_LAYOUT, mhla_layout_parse, cfg->layout)) != 0 ||
        (rc = PARSE_ENUM(job, O_FEATURE_MAP, mhla_feature_map_parse, cfg->feature_map)) != 0 ||
        (rc = PARSE_ENUM(job, O_NORMALIZER, mhla_normalizer_parse, cfg->normalizer)) != 0 ||
        (rc = PARSE_ENUM(job, O_DTYPE, mhla_dtype_parse, cfg->dtype)) != 0)
        return rc;
    if ((o[O_FEATURE_EPS].value && (rc = args_float(cmd, &o[O_FEATURE_EPS], 0.0, &cfg->feature_eps)) != 0) ||
        (o[O_EPS].value && (rc = args_float(cmd, &o[O_EPS], 0.0, &cfg->eps)) != 0) ||
        (o[O_SCALE].value && (rc = args_float(cmd, &o[O_SCALE], -FLT_MAX, &cfg->scale)) != 0))
        return rc;
    if (o[O_SCALE].value && cfg->scale == 0.0f) /* the library reads 0 as "the default" */
        return cli_usage(cmd, "--scale %s: must be nonzero (leave --scale out for the default)", o[O_SCALE].value);
    if (o[O_CHUNK].value && (rc = args_int(cmd, &o[O_CHUNK], 1, INT32_MAX, &cfg->chunk)) != 0)
        return rc;
    if (o[O_REPEAT].value && (rc = args_int(cmd, &o[O_REPEAT], 1, 1000000, &job->repeat)) != 0)
        return rc;
    if (!o[O_CAUSAL].value && !o[O_BLOCKS].value)
        return cli_usage(cmd, "%s: missing --blocks M|BHxBW|BTxBHxBW (the block grid; M = 1 is plain linear "
                                  "attention)", cmd);
    return o[O_CAUSAL].value ? causal_check_options(job) : 0;
}

void run_model_options(cli_option o[O_COUNT])
{
    static const cli_option table[O_COUNT] = {
        [O_Q] = {"--q", "Q.npy", NULL},
        [O_K] = {"--k", "K.npy", NULL},
        [O_V] = {"--v", "V.npy", NULL},
        [O_LAYOUT] = {"--layout", "bnhd|bhnd", NULL},
        [O_GRID] = {"--grid", "N|HsxWs|TxHsxWs", NULL},
        [O_BLOCKS] = {"--blocks", "M|BHxBW|BTxBHxBW", NULL},
        [O_KV_GRID] = {"--kv-grid", "N|HsxWs|TxHsxWs", NULL},
        [O_KV_BLOCKS] = {"--kv-blocks", "M|BHxBW|BTxBHxBW", NULL},
        [O_MIXING] = {"--mixing", "MC.npy", NULL},
        [O_INIT] = {"--init", "KIND[:PARAM]", NULL},
        [O_FEATURE_MAP] = {"--feature-map", "none|relu|relu-eps|elu1", NULL},
        [O_FEATURE_EPS] = {"--feature-eps", "X", NULL},
        [O_SCALE] = {"--scale", "X", NULL},
        [O_NORMALIZER] = {"--normalizer", "paper|official|none", NULL},
        [O_EPS] = {"--eps", "X", NULL},
        [O_CAUSAL] = {"--causal", NULL, NULL},
        [O_CHUNK] = {"--chunk", "C", NULL},
        [O_CU_SEQLENS] = {"--cu-seqlens", "CU.npy", NULL},
        [O_DTYPE] = {"--dtype", "f32|f16|bf16", NULL},
        [O_DEVICE] = {"--device", "SPEC", NULL},
        [O_CHECK] = {"--check", NULL, NULL},
    };
    memcpy(o, table, sizeof table);
}

/* ---- inputs -------------------------------------------------------------------------------- */

int run_read_inputs(run_job *job)
{
    static const int opt_of[3] = {O_Q, O_K, O_V};
    const char *dims_bnhd[3] = {"[B,N,H,Dk]", "[B,N,H,Dk]", "[B,N,H,Dv]"};
    const char *dims_bhnd[3] = {"[B,H,N,Dk]", "[B,H,N,Dk]", "[B,H,N,Dv]"};
    const int bhnd = job->cfg.layout == MHLA_LAYOUT_BHND;
    char err[512], shape[3][160];
    for (int i = 0; i < 3; ++i) {
        const cli_option *opt = &job->o[opt_of[i]];
        npy_array *a = &job->in[i];
        const npy_status st = job->headers_only ? npy_read_header(opt->value, a, err, sizeof err)
                                                : npy_read(opt->value, a, err, sizeof err);
        if (st != NPY_OK)
            return cli_fail(cli_npy_exit_code(st), "%s %s: %s", opt->name, opt->value, err);
        npy_shape_string(a->ndim, a->shape, shape[i], sizeof shape[i]);
        if (a->dtype != NPY_F32 && a->dtype != NPY_F16)
            return cli_fail(CLI_USAGE, "%s %s: dtype %s, expected float32 or float16", opt->name, opt->value,
                            npy_dtype_name(a->dtype));
        if (a->ndim != 4)
            return cli_fail(CLI_USAGE, "%s %s: expected 4 dimensions %s (layout %s), got shape %s", opt->name,
                            opt->value, bhnd ? dims_bhnd[i] : dims_bnhd[i], mhla_layout_name(job->cfg.layout),
                            shape[i]);
        for (int d = 0; d < 4; ++d)
            if (a->shape[d] < 1 || a->shape[d] > INT32_MAX)
                return cli_fail(CLI_USAGE, "%s %s: shape %s: every extent must be between 1 and %d", opt->name,
                                opt->value, shape[i], INT32_MAX);
        if (i > 0 && a->dtype != job->in[0].dtype)
            return cli_fail(CLI_USAGE, "%s %s is %s but --q %s is %s: the inputs must have one dtype", opt->name,
                            opt->value, npy_dtype_name(a->dtype), job->o[O_Q].value,
                            npy_dtype_name(job->in[0].dtype));
        /* k's B and Dk are q's; v's B, N and H are k's (k and v may have their own tokens and heads:
         * cross-attention, grouped key/value heads). D is the last extent in both layouts. */
        const int agree = i == 0 || (i == 1 ? a->shape[0] == job->in[0].shape[0] && a->shape[3] == job->in[0].shape[3]
                                             : memcmp(a->shape, job->in[1].shape, 3 * sizeof a->shape[0]) == 0);
        if (!agree)
            return cli_fail(CLI_USAGE, "%s %s: shape %s does not match %s %s %s (%s must agree)", opt->name,
                            opt->value, shape[i], i == 1 ? "--q" : "--k", job->o[i == 1 ? O_Q : O_K].value,
                            shape[i == 1 ? 0 : 1], i == 1 ? "B and Dk" : (bhnd ? "B, H and N" : "B, N and H"));
    }
    const int64_t *ks = job->in[1].shape, hkv = bhnd ? ks[1] : ks[2];
    const int64_t hq = bhnd ? job->in[0].shape[1] : job->in[0].shape[2];
    if (hq % hkv != 0)
        return cli_fail(CLI_USAGE, "--k %s: %lld key/value heads do not divide --q %s's %lld heads (each serves H / "
                                   "H_kv query heads)",
                        job->o[O_K].value, (long long)hkv, job->o[O_Q].value, (long long)hq);
    job->file_dtype = job->in[0].dtype;
    const int64_t *s = job->in[0].shape;
    mhla_config *cfg = &job->cfg;
    cfg->batch = s[0];
    cfg->heads = bhnd ? s[1] : s[2];
    cfg->seq_t = bhnd ? s[2] : s[1]; /* N, until --grid shapes it */
    cfg->dk = s[3];
    cfg->dv = job->in[2].shape[3];
    cfg->kv_heads = hkv;
    cfg->kv_seq_t = bhnd ? ks[2] : ks[1]; /* N_kv, until --kv-grid shapes it */
    memcpy(job->out_shape, s, sizeof job->out_shape);
    job->out_shape[3] = cfg->dv;
    job->out_count = (size_t)(s[0] * s[1] * s[2] * cfg->dv);
    if (!job->o[O_DTYPE].value) /* default storage: the inputs' dtype */
        cfg->dtype = job->file_dtype == NPY_F16 ? MHLA_DTYPE_F16 : MHLA_DTYPE_F32;
    return job->headers_only ? 0 : run_convert_inputs(job);
}

int run_convert_inputs(run_job *job)
{
    static const int opt_of[3] = {O_Q, O_K, O_V};
    const mhla_config *cfg = &job->cfg;
    for (int i = 0; i < 3; ++i) {
        if (job->file_dtype == NPY_F32) {
            job->f32[i] = job->in[i].data;
            continue;
        }
        if (!(job->f32[i] = malloc(job->in[i].count * sizeof(float))))
            return cli_fail(CLI_RUNTIME, "out of host memory widening %s to float32", job->o[opt_of[i]].value);
        mhla_convert(MHLA_DTYPE_F32, job->f32[i], MHLA_DTYPE_F16, job->in[i].data, job->in[i].count);
        npy_free(&job->in[i]);
    }
    /* 16-bit storage: the device gets the rounded bits, the reference the same rounded values. */
    for (int i = 0; i < 3 && cfg->dtype != MHLA_DTYPE_F32; ++i) {
        if (!(job->dev16[i] = malloc(job->in[i].count * sizeof(uint16_t))))
            return cli_fail(CLI_RUNTIME, "out of host memory rounding %s to %s", job->o[opt_of[i]].value,
                            mhla_dtype_name(cfg->dtype));
        mhla_convert(cfg->dtype, job->dev16[i], MHLA_DTYPE_F32, job->f32[i], job->in[i].count);
        mhla_convert(MHLA_DTYPE_F32, job->f32[i], cfg->dtype, job->dev16[i], job->in[i].count);
    }
    return 0;
}

/* A token grid option (`grid_opt`; where not given `grid_default`, else n tokens in 1D) and its block
 * grid (`blocks_opt`; 1x1x1 where not given) into grid[3] and blocks[3], checked against n and each
 * other; `tensor` names the input whose N it must match. */
static int side_grid(run_job *job, int grid_opt, int blocks_opt, const int64_t *grid_default, int64_t n,
                     const char *tensor, int64_t grid[3], int64_t blocks[3])
{
    int grid_ndim = 1, blocks_ndim = 1, rc;
    char text[96];
    const cli_option *go = &job->o[grid_opt], *bo = &job->o[blocks_opt];
    grid[0] = n, grid[1] = grid[2] = 1, blocks[0] = blocks[1] = blocks[2] = 1;
    if (grid_default && !go->value) {
        memcpy(grid, grid_default, 3 * sizeof *grid);
        grid_ndim = grid[1] == 1 && grid[2] == 1 ? 1 : grid[0] == 1 ? 2 : 3;
    }
    if (go->value) {
        if ((rc = args_dims(cmd, go, grid, &grid_ndim)) != 0)
            return rc;
        if (grid[0] * grid[1] * grid[2] != n)
            return cli_fail(CLI_USAGE, "%s %s: %lld tokens, but %s has N = %lld", go->name, go->value,
                            (long long)(grid[0] * grid[1] * grid[2]), tensor, (long long)n);
    }
    if (bo->value) {
        if ((rc = args_dims(cmd, bo, blocks, &blocks_ndim)) != 0)
            return rc;
        if (blocks_ndim != grid_ndim)
            return cli_usage(cmd, "%s %s: a %dD block grid for the %dD token grid %s (give %s)", bo->name, bo->value,
                             blocks_ndim, grid_ndim, args_dims_string(grid, grid_ndim, text, sizeof text),
                             grid_ndim == 1 ? "M" : grid_ndim == 2 ? "BHxBW" : "BTxBHxBW");
        static const char *const axis[3] = {"T", "Hs", "Ws"};
        for (int d = 0; d < 3; ++d)
            if (grid[d] % blocks[d] != 0)
                return cli_fail(CLI_USAGE, "%s %s: does not divide the token grid %s (%s = %lld is not divisible "
                                           "by %lld)",
                                bo->name, bo->value, args_dims_string(grid, grid_ndim, text, sizeof text), axis[d],
                                (long long)grid[d], (long long)blocks[d]);
    }
    return 0;
}

/* --grid and --blocks, and the key/value side's --kv-grid (default: the query grid where k and v
 * have the queries' N, else a 1D sequence of theirs) and --kv-blocks (default: --blocks where the
 * two grids are the same; required otherwise), onto the configuration. */
static int shape_grid(run_job *job)
{
    mhla_config *cfg = &job->cfg;
    const int64_t n = cfg->seq_t, n_kv = cfg->kv_seq_t;
    int64_t grid[3], blocks[3], kv_grid[3], kv_blocks[3];
    int rc;
    char qname[600], kname[600];
    snprintf(qname, sizeof qname, "--q %s", job->o[O_Q].value);
    snprintf(kname, sizeof kname, "--k %s", job->o[O_K].value);
    if ((rc = side_grid(job, O_GRID, O_BLOCKS, NULL, n, qname, grid, blocks)) != 0)
        return rc;
    cfg->seq_t = grid[0], cfg->seq_h = grid[1], cfg->seq_w = grid[2];
    cfg->block_t = blocks[0], cfg->block_h = blocks[1], cfg->block_w = blocks[2];
    if (cfg->causal) { /* one grid: k and v must be the queries' length (the library says so otherwise) */
        cfg->kv_seq_t = n_kv == n ? 0 : n_kv, cfg->kv_seq_h = cfg->kv_seq_w = n_kv == n ? 0 : 1;
        cfg->kv_block_t = cfg->kv_block_h = cfg->kv_block_w = n_kv == n ? 0 : 1;
        return 0;
    }
    const int same_n = n_kv == n;
    int64_t kv_default_grid[3] = {n_kv, 1, 1};
    if (same_n)
        memcpy(kv_default_grid, grid, sizeof grid);
    /* the query blocks are the default only on the query grid, known once --kv-grid is read */
    if ((rc = side_grid(job, O_KV_GRID, O_KV_BLOCKS, kv_default_grid, n_kv, kname, kv_grid, kv_blocks)) != 0)
        return rc;
    const int same_grid = memcmp(kv_grid, grid, sizeof grid) == 0;
    if (!job->o[O_KV_BLOCKS].value) {
        if (!same_grid)
            return cli_usage(cmd, "missing --kv-blocks M|BHxBW|BTxBHxBW: the key/value grid %lldx%lldx%lld is not the "
                                  "query grid %lldx%lldx%lld, so its blocks must be given",
                             (long long)kv_grid[0], (long long)kv_grid[1], (long long)kv_grid[2], (long long)grid[0],
                             (long long)grid[1], (long long)grid[2]);
        memcpy(kv_blocks, blocks, sizeof blocks);
    }
    cfg->kv_seq_t = kv_grid[0], cfg->kv_seq_h = kv_grid[1], cfg->kv_seq_w = kv_grid[2];
    cfg->kv_block_t = kv_blocks[0], cfg->kv_block_h = kv_blocks[1], cfg->kv_block_w = kv_blocks[2];
    return 0;
}

/* The mixing matrix: --mixing (M x M_kv; causal: square with at least M rows), or --init's for M
 * blocks (causal: M = ceil(longest sequence / C) chunks) by M_kv. */
static int load_mixing(run_job *job)
{
    mhla_config *cfg = &job->cfg;
    const int64_t m = cfg->causal ? (job->longest + cfg->chunk - 1) / cfg->chunk
                                  : cfg->block_t * cfg->block_h * cfg->block_w;
    const int64_t m_kv = cfg->causal ? m : cfg->kv_block_t * cfg->kv_block_h * cfg->kv_block_w;
    /* Mc and its initializer depend on the two block grids only (not on the token grids they divide) */
    const int cross = !cfg->causal && (cfg->kv_block_t != cfg->block_t || cfg->kv_block_h != cfg->block_h ||
                                       cfg->kv_block_w != cfg->block_w);
    job->mixing_cols = m_kv;
    const cli_option *opt = &job->o[O_MIXING];
    if (!opt->value) {
        mhla_init_kind kind = cfg->causal ? MHLA_INIT_CAUSAL_UNIFORM : MHLA_INIT_LINEAR;
        double param = 0.0;
        int has_param = 0, rc;
        if (job->o[O_INIT].value && (rc = args_init(cmd, &job->o[O_INIT], &kind, &param, &has_param)) != 0)
            return rc;
        const int64_t blocks[3] = {cfg->causal ? m : cfg->block_t, cfg->block_h, cfg->block_w};
        job->mixing_rows = m;
        char label[200];
        if (cfg->causal)
            snprintf(label, sizeof label, "--chunk %lld: %lld chunks for the mixing matrix", (long long)cfg->chunk,
                     (long long)m);
        else
            snprintf(label, sizeof label, "--blocks %s", job->o[O_BLOCKS].value);
        if (cross) {
            const int64_t kv_blocks[3] = {cfg->kv_block_t, cfg->kv_block_h, cfg->kv_block_w};
            return cli_mixing_init_cross(cmd, label, kind, has_param ? &param : NULL, blocks, kv_blocks, &job->mixing);
        }
        return cli_mixing_init(cmd, label, kind, has_param ? &param : NULL, blocks, &job->mixing);
    }
    npy_array mc;
    char err[512], shape[160];
    const npy_status st = npy_read(opt->value, &mc, err, sizeof err);
    if (st != NPY_OK)
        return cli_fail(cli_npy_exit_code(st), "%s %s: %s", opt->name, opt->value, err);
    npy_shape_string(mc.ndim, mc.shape, shape, sizeof shape);
    int rc = 0;
    if (mc.dtype != NPY_F32)
        rc = cli_fail(CLI_USAGE, "%s %s: dtype %s, expected float32", opt->name, opt->value, npy_dtype_name(mc.dtype));
    else if (cfg->causal && (mc.ndim != 2 || mc.shape[0] != mc.shape[1]))
        rc = cli_fail(CLI_USAGE, "%s %s: shape %s, expected a square matrix of at least (%lld, %lld) for the %lld "
                                 "chunk%s of %lld tokens",
                      opt->name, opt->value, shape, (long long)m, (long long)m, (long long)m, m == 1 ? "" : "s",
                      (long long)cfg->chunk);
    else if (!cfg->causal && !cross && (mc.ndim != 2 || mc.shape[0] != m || mc.shape[1] != m))
        rc = cli_fail(CLI_USAGE, "%s %s: shape %s, expected (%lld, %lld) for the %lld blocks of --blocks %s", opt->name,
                      opt->value, shape, (long long)m, (long long)m, (long long)m, job->o[O_BLOCKS].value);
    else if (cross && (mc.ndim != 2 || mc.shape[0] != m || mc.shape[1] != m_kv))
        rc = cli_fail(CLI_USAGE, "%s %s: shape %s, expected (%lld, %lld): rows for the %lld query blocks, columns for "
                                 "the %lld key/value blocks",
                      opt->name, opt->value, shape, (long long)m, (long long)m_kv, (long long)m, (long long)m_kv);
    else if (cfg->causal && mc.shape[0] < m)
        rc = causal_mixing_covers(job, mc.shape[0]);
    if (rc != 0) {
        npy_free(&mc);
        return rc;
    }
    job->mixing = mc.data;
    job->mixing_rows = mc.shape[0];
    job->mixing_cols = cfg->causal ? mc.shape[0] : mc.shape[1];
    return 0;
}

int run_shape(run_job *job)
{
    int rc;
    char msg[512];
    if ((rc = shape_grid(job)) != 0 || (job->cfg.causal && (rc = causal_shape(job)) != 0) ||
        (rc = load_mixing(job)) != 0)
        return rc;
    job->cfg.mixing_rows = job->mixing_rows;
    /* What the CLI did not check itself (head dimensions, sizes the kernels cannot index). */
    const mhla_status st = mhla_config_check(&job->cfg, msg, sizeof msg);
    if (st != MHLA_OK)
        return cli_fail(cli_exit_code(st), "--q %s, --v %s: %s", job->o[O_Q].value, job->o[O_V].value, msg);
    return 0;
}

int run_parse(run_job *job, const char *command, const char *help, int argc, char **argv, int *help_shown)
{
    cmd = job->command = command;
    return parse_options(job, help, argc, argv, help_shown);
}

int run_prepare(run_job *job, const char *command, const char *help, int argc, char **argv, int *help_shown)
{
    int rc;
    if ((rc = run_parse(job, command, help, argc, argv, help_shown)) != 0 || *help_shown)
        return rc;
    if ((rc = run_read_inputs(job)) != 0 || (rc = run_shape(job)) != 0)
        return rc;
    return 0;
}

/* ---- device -------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int run_device_fail(const run_job *job, mhla_status st, const char *what)
{
    return cli_fail(cli_exit_code(st), "%s: %s", what,
                    job->ctx && *mhla_context_message(job->ctx) ? mhla_context_message(job->ctx) : mhla_last_message());
}

void run_print_times(double *ms, size_t count)
{
    qsort(ms, count, sizeof *ms, cmp_double);
    const double median = count % 2 ? ms[count / 2] : 0.5 * (ms[count / 2 - 1] + ms[count / 2]);
    printf("time_ms median %.3f min %.3f max %.3f\n", median, ms[0], ms[count - 1]);
}

int run_open_context(run_job *job)
{
    const char *spec = job->o[O_DEVICE].value;
    const mhla_status st = mhla_context_create(spec, &job->ctx);
    if (st == MHLA_OK)
        return 0;
    return spec ? cli_fail(cli_exit_code(st), "--device %s: %s", spec, mhla_last_message())
                : cli_fail(cli_exit_code(st), "%s", mhla_last_message());
}

/* ---- output ------------------------------------------------------------------------------- */

int run_write_output(run_job *job)
{
    char err[512];
    const void *data = job->result;
    uint16_t *half = NULL;
    if (job->file_dtype == NPY_F16) { /* float16 in, float16 out */
        if (!(half = malloc(job->out_count * sizeof *half)))
            return cli_fail(CLI_RUNTIME, "out of host memory for the float16 output");
        mhla_convert(MHLA_DTYPE_F16, half, MHLA_DTYPE_F32, job->result, job->out_count);
        data = half;
    }
    const npy_status st = npy_writer_commit(&job->out, job->file_dtype, 4, job->out_shape, data, err, sizeof err);
    cli_guard_temp(NULL);
    free(half);
    if (st != NPY_OK)
        return cli_fail(cli_npy_exit_code(st), "--out %s: %s", job->o[O_OUT].value, err);
    return 0;
}
