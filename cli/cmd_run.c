/* `mhla run`: one MHLA forward pass over .npy files on an OpenCL device, optionally checked
 * against the double-precision reference (--check) and timed with profiling events (--repeat).
 * The causal options' rules and the decoder path (--recurrent) are in run_causal.c. */
#include "cli.h"
#include "run.h"

#include <mhla_reference.h>

#include <float.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In two parts: C99 only promises string literals of 4095 characters. */
static const char help_head[] =
    "usage: mhla run --q Q.npy --k K.npy --v V.npy --out O.npy --blocks ... [options]\n"
    "       mhla run --q Q.npy --k K.npy --v V.npy --out O.npy --causal [--chunk C] [--recurrent]\n"
    "                [--cu-seqlens CU.npy] [options]\n"
    "\n"
    "Runs MHLA (SPEC.md) on the OpenCL device and writes the output. Q and K are [B,N,H,Dk], V is\n"
    "[B,N,H,Dv] (or [B,H,N,D] with --layout bhnd), float32 or float16 .npy files, little-endian,\n"
    "C order. O.npy is [B,N,H,Dv] in the same layout: float32, or float16 when the inputs are.\n"
    "It is written to a temporary file and renamed: a failed run leaves no output behind.\n"
    "\n"
    "inputs and output:\n"
    "  --q Q.npy --k K.npy --v V.npy --out O.npy\n"
    "  --layout bnhd|bhnd            the tensors' layout (default bnhd)\n"
    "tokens and blocks:\n"
    "  --grid N|HsxWs|TxHsxWs        token grid, product N (default: N from Q, 1D)\n"
    "  --blocks M|BHxBW|BTxBHxBW     block grid dividing the token grid, with as many extents\n"
    "                                (required without --causal)\n"
    "mixing matrix (M = number of blocks; with --causal, M = ceil(N/C) chunks):\n"
    "  --mixing MC.npy               an M x M float32 matrix Mc[i][b] (e.g. a trained one); with\n"
    "                                --causal any square one with at least M rows (a model trained\n"
    "                                on longer sequences), of which the lower triangle of the\n"
    "                                leading M x M block is read\n"
    "  --init KIND[:PARAM]           else an initializer: linear, cos, exp[:SIGMA], gaussian,\n"
    "                                local[:THRES], paper, causal-uniform (default linear,\n"
    "                                causal-uniform with --causal); see 'mhla init-mixing'\n"
    "attention:\n"
    "  --feature-map none|relu|relu-eps|elu1   phi on q and k (default relu-eps; relu --causal)\n"
    "  --feature-eps X               relu-eps offset (default 1e-6)\n"
    "  --scale X                     q~ = X * phi(q), X != 0 (default 1; Dk^-0.5 with --causal)\n"
    "  --normalizer paper|official|none   (default paper; none with --causal, which does not\n"
    "                                take official)\n"
    "  --eps X                       added to every denominator (default 1e-6)\n";
static const char help_tail[] =
    "causal MHLA (SPEC.md \"Causal MHLA\"; 1D: --grid N only, no --blocks):\n"
    "  --causal                      chunkwise causal attention: token t sees tokens <= t\n"
    "  --chunk C                     chunk size (default 64; the last chunk may be partial)\n"
    "  --recurrent                   run the streaming decoder token by token instead of the chunk\n"
    "                                form (the same outputs, to rounding)\n"
    "  --cu-seqlens CU.npy           packed variable-length sequences: S+1 int32 or int64 offsets\n"
    "                                (0 first, non-decreasing, N last) over inputs of batch 1; each\n"
    "                                sequence is chunked from its own start, M is ceil(longest/C)\n"
    "device:\n"
    "  --dtype f32|f16|bf16          storage of q, k, v and the output on the device, with\n"
    "                                float32 arithmetic (default: the inputs' dtype). Inputs\n"
    "                                are rounded to it first; --check runs the reference on the\n"
    "                                rounded inputs. The output file is float16 when the inputs\n"
    "                                are float16, else float32 (bf16 values are exact in it)\n"
    "  --device SPEC                 'P:D', an index or a name substring, as MHLA_DEVICE (see\n"
    "                                'mhla info'); default: MHLA_DEVICE, else the first GPU,\n"
    "                                else the first device\n"
    "  --check                       also run the double-precision reference and print\n"
    "                                'max_rel_err <value>'; exit 3 (the output is still written)\n"
    "                                when it exceeds SPEC.md's tolerance (f32: 1e-5 up to N = 4096,\n"
    "                                1e-4 beyond; N of the longest sequence with --cu-seqlens)\n"
    "  --repeat R                    run R times after one untimed warm-up and print\n"
    "                                'time_ms median <m> min <a> max <b>' (device time per run;\n"
    "                                with --recurrent, the wall time of each run's whole token\n"
    "                                loop, host copies included)\n"
    "  --mpi                         under mpirun -np R: sequence parallelism (libmhla_mpi), each\n"
    "                                rank reading only its range of tokens (whole blocks or chunks;\n"
    "                                with --cu-seqlens, chunks of the packed sequences) on its own\n"
    "                                device (MHLA_DEVICE, else by node-local rank); rank 0 writes\n"
    "                                the output. Not with --check, --repeat or --recurrent\n"
    "\n"
    "exit codes: 0 success; 1 runtime or device failure; 2 usage or input error; 3 --check failed.\n";

/* The subcommand messages name: "run", or "grad" while cmd_grad.c prepares its job with run_prepare(). */
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

static int parse_options(run_job *job, const char *grad_help, int argc, char **argv, int *help_shown)
{
    cli_option *o = job->o;
    int rc;
    char help[sizeof help_head + sizeof help_tail];
    snprintf(help, sizeof help, "%s%s", help_head, help_tail);
    if ((rc = args_parse(cmd, grad_help ? grad_help : help, o, O_COUNT, argc, argv, help_shown)) != 0 ||
        *help_shown)
        return rc;
    static const int run_required[] = {O_Q, O_K, O_V, O_OUT, -1, -1, -1};
    static const int grad_required[] = {O_Q, O_K, O_V, O_DOUT, O_DQ, O_DK, O_DV};
    static const int diagnose_required[] = {O_Q, O_K, -1, -1, -1, -1, -1};
    const int *required = !grad_help ? run_required : strcmp(cmd, "diagnose") == 0 ? diagnose_required : grad_required;
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
    if (o[O_MIXING].value && o[O_INIT].value)
        return cli_usage(cmd, "--mixing and --init: give one (a matrix, or how to make one)");

    mhla_config *cfg = &job->cfg;
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
        /* B, N and H (and Dk between q and k) must agree; D is the last extent in both layouts. */
        const int agree = i == 0 || (memcmp(a->shape, job->in[0].shape, 3 * sizeof a->shape[0]) == 0 &&
                                     (i == 2 || a->shape[3] == job->in[0].shape[3]));
        if (!agree)
            return cli_fail(CLI_USAGE, "%s %s: shape %s does not match --q %s %s (%s must agree)", opt->name,
                            opt->value, shape[i], job->o[O_Q].value, shape[0],
                            i == 1 ? (bhnd ? "B, H, N and Dk" : "B, N, H and Dk") : (bhnd ? "B, H and N" : "B, N and H"));
    }
    job->file_dtype = job->in[0].dtype;
    const int64_t *s = job->in[0].shape;
    mhla_config *cfg = &job->cfg;
    cfg->batch = s[0];
    cfg->heads = bhnd ? s[1] : s[2];
    cfg->seq_t = bhnd ? s[2] : s[1]; /* N, until --grid shapes it */
    cfg->dk = s[3];
    cfg->dv = job->in[2].shape[3];
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

/* --grid and --blocks onto the configuration, checked against the inputs' N and each other. */
static int shape_grid(run_job *job)
{
    mhla_config *cfg = &job->cfg;
    const int64_t n = cfg->seq_t;
    int64_t grid[3] = {n, 1, 1}, blocks[3] = {1, 1, 1};
    int grid_ndim = 1, blocks_ndim = 1, rc;
    char text[96];
    if (job->o[O_GRID].value) {
        if ((rc = args_dims(cmd, &job->o[O_GRID], grid, &grid_ndim)) != 0)
            return rc;
        if (grid[0] * grid[1] * grid[2] != n)
            return cli_fail(CLI_USAGE, "--grid %s: %lld tokens, but --q %s has N = %lld", job->o[O_GRID].value,
                            (long long)(grid[0] * grid[1] * grid[2]), job->o[O_Q].value, (long long)n);
    }
    if (job->o[O_BLOCKS].value) {
        if ((rc = args_dims(cmd, &job->o[O_BLOCKS], blocks, &blocks_ndim)) != 0)
            return rc;
        if (blocks_ndim != grid_ndim)
            return cli_usage(cmd, "--blocks %s: a %dD block grid for the %dD token grid %s (give %s)",
                             job->o[O_BLOCKS].value, blocks_ndim, grid_ndim,
                             args_dims_string(grid, grid_ndim, text, sizeof text),
                             grid_ndim == 1 ? "M" : grid_ndim == 2 ? "BHxBW" : "BTxBHxBW");
        static const char *const axis[3] = {"T", "Hs", "Ws"};
        for (int d = 0; d < 3; ++d)
            if (grid[d] % blocks[d] != 0)
                return cli_fail(CLI_USAGE, "--blocks %s: does not divide the token grid %s (%s = %lld is not divisible "
                                           "by %lld)",
                                job->o[O_BLOCKS].value, args_dims_string(grid, grid_ndim, text, sizeof text), axis[d],
                                (long long)grid[d], (long long)blocks[d]);
    }
    cfg->seq_t = grid[0], cfg->seq_h = grid[1], cfg->seq_w = grid[2];
    cfg->block_t = blocks[0], cfg->block_h = blocks[1], cfg->block_w = blocks[2];
    return 0;
}

/* The mixing matrix: --mixing (M x M; causal: square with at least M rows), or --init's for M
 * blocks (causal: M = ceil(longest sequence / C) chunks). */
static int load_mixing(run_job *job)
{
    mhla_config *cfg = &job->cfg;
    const int64_t m = cfg->causal ? (job->longest + cfg->chunk - 1) / cfg->chunk
                                  : cfg->block_t * cfg->block_h * cfg->block_w;
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
                                 "chunks of %lld tokens",
                      opt->name, opt->value, shape, (long long)m, (long long)m, (long long)m, (long long)cfg->chunk);
    else if (!cfg->causal && (mc.ndim != 2 || mc.shape[0] != m || mc.shape[1] != m))
        rc = cli_fail(CLI_USAGE, "%s %s: shape %s, expected (%lld, %lld) for the %lld blocks of --blocks %s", opt->name,
                      opt->value, shape, (long long)m, (long long)m, (long long)m, job->o[O_BLOCKS].value);
    else if (cfg->causal && mc.shape[0] < m)
        rc = causal_mixing_covers(job, mc.shape[0]);
    if (rc != 0) {
        npy_free(&mc);
        return rc;
    }
    job->mixing = mc.data;
    job->mixing_rows = mc.shape[0];
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

static int cl_fail(cl_int err, const char *what) { return cli_fail(CLI_RUNTIME, "%s failed (OpenCL error %d)", what, (int)err); }

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

/* The forward pass (causal plans: the chunk form; packed ones with their offsets). */
static mhla_status forward(const run_job *job, cl_event *done)
{
    const cl_mem *b = job->buf;
    if (job->cfg.varlen)
        return mhla_forward_varlen(job->plan, b[MHLA_TENSOR_Q], b[MHLA_TENSOR_K], b[MHLA_TENSOR_V],
                                   b[MHLA_TENSOR_MIXING], job->cu_seqlens, job->num_seqs, b[MHLA_TENSOR_OUT], 0, NULL,
                                   done);
    return mhla_forward(job->plan, b[MHLA_TENSOR_Q], b[MHLA_TENSOR_K], b[MHLA_TENSOR_V], b[MHLA_TENSOR_MIXING],
                        b[MHLA_TENSOR_OUT], 0, NULL, done);
}

static int run_device(run_job *job)
{
    mhla_status st;
    int rc;
    if ((rc = run_open_context(job)) != 0)
        return rc;
    if ((st = mhla_plan_create(job->ctx, &job->cfg, &job->plan)) != MHLA_OK)
        return run_device_fail(job, st, "run");

    const int wide = job->cfg.dtype == MHLA_DTYPE_F32;
    const void *host[5] = {wide ? (void *)job->f32[0] : job->dev16[0], wide ? (void *)job->f32[1] : job->dev16[1],
                           wide ? (void *)job->f32[2] : job->dev16[2], NULL, job->mixing};
    const size_t have[5] = {job->in[0].count, job->in[1].count, job->in[2].count, job->in[2].count,
                            (size_t)(job->mixing_rows * job->mixing_rows)};
    const size_t elem = wide ? sizeof(float) : sizeof(uint16_t);
    cl_int err = CL_SUCCESS;
    for (int t = 0; t < 5; ++t) {
        const size_t bytes = mhla_plan_tensor_bytes(job->plan, (mhla_tensor)t);
        const size_t held = have[t] * (t == MHLA_TENSOR_MIXING ? sizeof(float) : elem);
        if (bytes != held) /* the plan and the files disagree: a bug here, not a user error */
            return cli_fail(CLI_RUNTIME, "internal error: tensor %d needs %zu bytes, the input holds %zu", t, bytes,
                            held);
        job->buf[t] = clCreateBuffer(mhla_context_cl_context(job->ctx),
                                     host[t] ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_WRITE_ONLY, bytes,
                                     (void *)host[t], &err);
        if (err != CL_SUCCESS)
            return cl_fail(err, "clCreateBuffer");
    }

    /* --repeat: one warm-up (the first call also builds CLBlast's GEMM), then R timed runs, each
     * from a marker enqueued before it to the end of its output event (device time). Devices whose
     * profiling timestamps are all the same (rusticl 22.3 on llvmpipe) get the host clock instead,
     * from the queue being empty to the output's event completing, and say so. */
    cl_command_queue queue = mhla_context_queue(job->ctx);
    const int64_t runs = job->repeat ? job->repeat + 1 : 1;
    double *ms = job->repeat ? malloc((size_t)job->repeat * 2 * sizeof *ms) : NULL;
    double *wall = ms ? ms + job->repeat : NULL;
    int device_clock = 0;
    if (job->repeat && !ms)
        return cli_fail(CLI_RUNTIME, "out of host memory");
    for (int64_t r = 0; r < runs && rc == 0; ++r) {
        cl_event start = NULL, done = NULL;
        cl_ulong t0 = 0, t1 = 0;
        if (job->repeat && (err = clFinish(queue)) != CL_SUCCESS)
            rc = cl_fail(err, "clFinish");
        const double w0 = cli_now_ms();
        if (rc == 0 && job->repeat && (err = clEnqueueMarkerWithWaitList(queue, 0, NULL, &start)) != CL_SUCCESS)
            rc = cl_fail(err, "clEnqueueMarkerWithWaitList");
        else if (rc == 0 && (st = forward(job, &done)) != MHLA_OK)
            rc = run_device_fail(job, st, "run");
        else if (rc == 0 && (err = clWaitForEvents(1, &done)) != CL_SUCCESS)
            rc = cl_fail(err, "clWaitForEvents (the forward pass)");
        else if (rc == 0 && job->repeat &&
                 ((err = clGetEventProfilingInfo(start, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL)) != CL_SUCCESS ||
                  (err = clGetEventProfilingInfo(done, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL)) != CL_SUCCESS))
            rc = cl_fail(err, "--repeat: clGetEventProfilingInfo");
        else if (rc == 0 && job->repeat && r > 0) {
            ms[r - 1] = t1 > t0 ? (double)(t1 - t0) * 1e-6 : 0.0;
            wall[r - 1] = cli_now_ms() - w0;
            device_clock |= t1 > t0;
        }
        if (start)
            clReleaseEvent(start);
        if (done)
            clReleaseEvent(done);
    }
    if (rc == 0 && job->repeat) {
        if (!device_clock)
            printf("timing: host clock (%s reports no usable profiling timestamps)\n",
                   mhla_context_device_name(job->ctx));
        run_print_times(device_clock ? ms : wall, (size_t)job->repeat);
    }
    free(ms);
    if (rc != 0)
        return rc;
    const size_t out_count = job->in[2].count;
    if (!(job->result = malloc(out_count * sizeof *job->result)))
        return cli_fail(CLI_RUNTIME, "out of host memory for the output");
    if (wide) {
        if ((err = clEnqueueReadBuffer(queue, job->buf[MHLA_TENSOR_OUT], CL_TRUE, 0, out_count * sizeof *job->result,
                                       job->result, 0, NULL, NULL)) != CL_SUCCESS)
            return cl_fail(err, "clEnqueueReadBuffer (the output)");
        return 0;
    }
    uint16_t *bits = malloc(out_count * sizeof *bits);
    if (!bits)
        return cli_fail(CLI_RUNTIME, "out of host memory for the output");
    err = clEnqueueReadBuffer(queue, job->buf[MHLA_TENSOR_OUT], CL_TRUE, 0, out_count * sizeof *bits, bits, 0, NULL,
                              NULL);
    if (err == CL_SUCCESS)
        mhla_convert(MHLA_DTYPE_F32, job->result, job->cfg.dtype, bits, out_count);
    free(bits);
    return err == CL_SUCCESS ? 0 : cl_fail(err, "clEnqueueReadBuffer (the output)");
}

/* ---- check and output ---------------------------------------------------------------------- */

/* --check: the reference on the same inputs; stores max_rel_err in job->check_err and prints it. */
static int check(run_job *job)
{
    const size_t n = job->in[2].count;
    double *ref = malloc(n * sizeof *ref);
    if (!ref)
        return cli_fail(CLI_RUNTIME, "--check: out of host memory for the reference");
    const mhla_status st =
        job->cfg.varlen ? mhla_reference_forward_varlen(&job->cfg, job->f32[0], job->f32[1], job->f32[2], job->mixing,
                                                        job->cu_seqlens, job->num_seqs, ref)
                        : mhla_reference_forward(&job->cfg, job->f32[0], job->f32[1], job->f32[2], job->mixing, ref);
    if (st == MHLA_OK)
        job->check_err = mhla_max_rel_err(job->result, ref, n);
    free(ref);
    if (st != MHLA_OK)
        return cli_fail(cli_exit_code(st), "--check: %s", mhla_last_message());
    printf("max_rel_err %.3g\n", job->check_err);
    return 0;
}

int run_write_output(run_job *job)
{
    char err[512];
    const void *data = job->result;
    uint16_t *half = NULL;
    if (job->file_dtype == NPY_F16) { /* float16 in, float16 out */
        if (!(half = malloc(job->in[2].count * sizeof *half)))
            return cli_fail(CLI_RUNTIME, "out of host memory for the float16 output");
        mhla_convert(MHLA_DTYPE_F16, half, MHLA_DTYPE_F32, job->result, job->in[2].count);
        data = half;
    }
    const npy_status st =
        npy_writer_commit(&job->out, job->file_dtype, 4, job->in[2].shape, data, err, sizeof err);
    cli_guard_temp(NULL);
    free(half);
    if (st != NPY_OK)
        return cli_fail(cli_npy_exit_code(st), "--out %s: %s", job->o[O_OUT].value, err);
    return 0;
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

int run_parse(run_job *job, const char *command, const char *grad_help, int argc, char **argv, int *help_shown)
{
    cmd = job->command = command;
    return parse_options(job, grad_help, argc, argv, help_shown);
}

int run_prepare(run_job *job, const char *command, const char *grad_help, int argc, char **argv, int *help_shown)
{
    int rc;
    if ((rc = run_parse(job, command, grad_help, argc, argv, help_shown)) != 0 || *help_shown)
        return rc;
    if ((rc = run_read_inputs(job)) != 0 || (rc = run_shape(job)) != 0)
        return rc;
    return 0;
}

int cmd_run(int argc, char **argv)
{
    run_job job;
    memset(&job, 0, sizeof job);
    job.out.fd = -1;
    run_model_options(job.o);
    job.o[O_OUT] = (cli_option){"--out", "O.npy", NULL};
    job.o[O_RECURRENT] = (cli_option){"--recurrent", NULL, NULL};
    job.o[O_REPEAT] = (cli_option){"--repeat", "R", NULL};
    job.o[O_MPI] = (cli_option){"--mpi", NULL, NULL};
    int help_shown = 0, rc;
    char err[512];

    if ((rc = run_parse(&job, RUN_CMD, NULL, argc, argv, &help_shown)) != 0 || help_shown)
        goto done;
    if (job.o[O_MPI].value) {
#ifdef MHLA_CLI_MPI
        rc = run_mpi(&job);
#else
        rc = cli_fail(CLI_USAGE, "--mpi: this mhla was built without MPI (install libopenmpi-dev, meson -Dmpi=enabled)");
#endif
        goto done;
    }
    if ((rc = run_read_inputs(&job)) != 0 || (rc = run_shape(&job)) != 0)
        goto done;
    /* The output's temporary exists before the work starts: a bad --out fails fast. SIGINT,
     * SIGTERM and SIGHUP wait until its guard is armed: one arriving between mkstemp and the guard
     * left the temporary behind (test_signal_removes_temporary, on a loaded machine). */
    sigset_t old_mask;
    cli_guard_hold(&old_mask);
    npy_status ws = npy_writer_open(&job.out, job.o[O_OUT].value, err, sizeof err);
    if (ws == NPY_OK)
        cli_guard_temp(job.out.tmp);
    cli_guard_release(&old_mask);
    if (ws != NPY_OK) {
        rc = cli_fail(cli_npy_exit_code(ws), "--out %s: %s", job.o[O_OUT].value, err);
        goto done;
    }
    if ((rc = job.o[O_RECURRENT].value ? causal_run_recurrent(&job) : run_device(&job)) != 0)
        goto done;
    if (job.o[O_CHECK].value && (rc = check(&job)) != 0)
        goto done;
    if ((rc = run_write_output(&job)) != 0)
        goto done;
    if (job.o[O_CHECK].value) {
        /* SPEC.md's N is a sequence's length: the longest one when several are packed. */
        const int64_t n = job.cfg.causal ? job.longest : job.cfg.seq_t * job.cfg.seq_h * job.cfg.seq_w;
        const double tol = mhla_reference_tolerance(job.cfg.dtype, n);
        if (!(job.check_err <= tol)) /* NaN fails too */
            rc = cli_fail(CLI_CHECK_FAILED, "--check: max_rel_err %.3g exceeds the tolerance %g (%s storage, N = %lld)",
                          job.check_err, tol, mhla_dtype_name(job.cfg.dtype), (long long)n);
    }
done:
    run_job_free(&job);
    return rc;
}
