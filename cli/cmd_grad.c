/* `mhla grad`: the backward pass (docs/spec.md "Backward") over .npy files: every model option `run`
 * takes, dO from --dout, and dq, dk, dv (and dMc) written only once all of them are computed;
 * --check compares them with the double-precision backward reference. */
#include "cli.h"
#include "run.h"

#include <mhla_reference.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: mhla grad --q Q.npy --k K.npy --v V.npy --dout DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy\n"
    "                 [--dmixing DMC.npy] [--mixing MC.npy | --init KIND] (--blocks ... | --causal ...)\n"
    "                 [options]\n"
    "\n"
    "Gradients of the MHLA output (as 'mhla run' computes it) against DO = dL/dO: DQ, DK, DV shaped\n"
    "like Q, K, V, and with --dmixing the M x M_kv (causal: rows x rows) float32 dL/dMc, summed over\n"
    "batch and heads. DO has the output's shape (Q's, with V's head dimension) and the inputs' dtype.\n"
    "With grouped key/value heads, DK and DV sum the gradients of the query heads that share each.\n"
    "Outputs are float32, or float16 under --dtype f16;\n"
    "each is written to a temporary file, and all are renamed into place only once every gradient\n"
    "is computed.\n"
    "\n"
    "model options, as for 'mhla run' (see 'mhla run --help'):\n"
    "  --layout --grid --blocks --kv-grid --kv-blocks --mixing --init --feature-map --feature-eps\n"
    "  --scale --normalizer --eps --causal --chunk --cu-seqlens --dtype --device\n"
    "  --check                       also run the double-precision backward reference and print\n"
    "                                'max_rel_err <value>', the largest of the four gradients'\n"
    "                                errors (then 'per_gradient dq <e> dk <e> dv <e> dmixing <e>');\n"
    "                                exit 3 (outputs still written) above docs/spec.md's\n"
    "                                tolerance (f32 1e-4, f16 5e-3, bf16 3e-2). dMc is left out where\n"
    "                                it is zero up to rounding (M = 1 with a normalizer)\n"
    "\n"
    "exit codes: 0 success; 1 runtime or device failure; 2 usage or input error; 3 --check failed.\n";

#define CMD "grad"
enum { G_DQ, G_DK, G_DV, G_DMIX, G_COUNT };
static const int grad_opt[G_COUNT] = {O_DQ, O_DK, O_DV, O_DMIXING};
static const char *const grad_name[G_COUNT] = {"dq", "dk", "dv", "dmixing"};

typedef struct grad_job {
    run_job run;
    npy_array dout_file;
    float *dout;       /* dO as float, rounded to the storage type */
    uint16_t *dout16;  /* its bits in f16/bf16 storage */
    void *dev[G_COUNT]; /* the gradients as the device wrote them (cfg.dtype; dmixing float) */
    float *f32[G_COUNT];
    size_t count[G_COUNT];
    npy_writer out[G_COUNT];
} grad_job;

static void grad_free(grad_job *g)
{
    for (int i = 0; i < G_COUNT; ++i) {
        npy_writer_abort(&g->out[i]);
        if (g->dev[i] != g->f32[i])
            free(g->dev[i]);
        free(g->f32[i]);
    }
    if (g->dout != g->dout_file.data)
        free(g->dout);
    free(g->dout16);
    npy_free(&g->dout_file);
    run_job_free(&g->run);
}

/* --dout: the output's shape and the inputs' dtype; widened and rounded as the inputs are. */
static int read_dout(grad_job *g)
{
    run_job *job = &g->run;
    const cli_option *opt = &job->o[O_DOUT];
    char err[512], shape[160], oshape[160];
    const npy_status st = npy_read(opt->value, &g->dout_file, err, sizeof err);
    if (st != NPY_OK)
        return cli_fail(cli_npy_exit_code(st), "%s %s: %s", opt->name, opt->value, err);
    const npy_array *a = &g->dout_file;
    npy_shape_string(a->ndim, a->shape, shape, sizeof shape);
    npy_shape_string(4, job->out_shape, oshape, sizeof oshape);
    if (a->ndim != 4 || memcmp(a->shape, job->out_shape, 4 * sizeof a->shape[0]) != 0)
        return cli_fail(CLI_USAGE, "%s %s: shape %s, expected the output's shape %s (--q %s's with --v's Dv)",
                        opt->name, opt->value, shape, oshape, job->o[O_Q].value);
    if (a->dtype != job->file_dtype)
        return cli_fail(CLI_USAGE, "%s %s is %s but the inputs are %s", opt->name, opt->value,
                        npy_dtype_name(a->dtype), npy_dtype_name(job->file_dtype));
    const size_t n = a->count;
    g->dout = a->data;
    if (a->dtype == NPY_F16) {
        if (!(g->dout = malloc(n * sizeof(float))))
            return cli_fail(CLI_RUNTIME, "out of host memory widening %s", opt->value);
        mhla_convert(MHLA_DTYPE_F32, g->dout, MHLA_DTYPE_F16, a->data, n);
    }
    if (job->cfg.dtype != MHLA_DTYPE_F32) {
        if (!(g->dout16 = malloc(n * sizeof(uint16_t))))
            return cli_fail(CLI_RUNTIME, "out of host memory rounding %s", opt->value);
        mhla_convert(job->cfg.dtype, g->dout16, MHLA_DTYPE_F32, g->dout, n);
        mhla_convert(MHLA_DTYPE_F32, g->dout, job->cfg.dtype, g->dout16, n);
    }
    return 0;
}

/* The gradients on the device, widened to float into g->f32. */
static int run_device(grad_job *g, int want_dmix)
{
    run_job *job = &g->run;
    mhla_status st;
    int rc;
    if ((rc = run_open_context(job)) != 0)
        return rc;
    if ((st = mhla_plan_create(job->ctx, &job->cfg, &job->plan)) != MHLA_OK)
        return run_device_fail(job, st, CMD);
    const int wide = job->cfg.dtype == MHLA_DTYPE_F32;
    const size_t elem = wide ? sizeof(float) : sizeof(uint16_t);
    g->count[G_DQ] = job->in[0].count;
    g->count[G_DK] = job->in[1].count;
    g->count[G_DV] = job->in[2].count;
    g->count[G_DMIX] = (size_t)(job->mixing_rows * job->mixing_cols);
    for (int i = 0; i < G_COUNT; ++i) {
        if (i == G_DMIX && !want_dmix)
            continue;
        g->f32[i] = malloc(g->count[i] * sizeof(float));
        g->dev[i] = (wide || i == G_DMIX) ? (void *)g->f32[i] : malloc(g->count[i] * elem);
        if (!g->f32[i] || !g->dev[i])
            return cli_fail(CLI_RUNTIME, "out of host memory for %s", grad_name[i]);
    }
    const void *q = wide ? (void *)job->f32[0] : job->dev16[0], *k = wide ? (void *)job->f32[1] : job->dev16[1];
    const void *v = wide ? (void *)job->f32[2] : job->dev16[2], *dout = wide ? (void *)g->dout : g->dout16;
    st = job->cfg.varlen ? mhla_backward_varlen_host(job->plan, q, k, v, job->mixing, job->cu_seqlens, job->num_seqs,
                                                     dout, g->dev[G_DQ], g->dev[G_DK], g->dev[G_DV], g->f32[G_DMIX])
                         : mhla_backward_host(job->plan, q, k, v, job->mixing, dout, g->dev[G_DQ], g->dev[G_DK],
                                              g->dev[G_DV], g->f32[G_DMIX]);
    if (st != MHLA_OK)
        return run_device_fail(job, st, CMD);
    for (int i = 0; i < G_DMIX && !wide; ++i)
        mhla_convert(MHLA_DTYPE_F32, g->f32[i], job->cfg.dtype, g->dev[i], g->count[i]);
    return 0;
}

/* --check: the backward reference on the same (rounded) inputs; *err gets the largest error. */
static int check(grad_job *g, double *worst)
{
    run_job *job = &g->run;
    double *ref[G_COUNT] = {NULL};
    int rc = 0;
    for (int i = 0; i < G_COUNT && rc == 0; ++i)
        if (!(ref[i] = malloc(g->count[i] * sizeof(double))))
            rc = cli_fail(CLI_RUNTIME, "--check: out of host memory for the reference");
    mhla_status st = MHLA_OK;
    if (rc == 0)
        st = job->cfg.varlen
                 ? mhla_reference_backward_varlen(&job->cfg, job->f32[0], job->f32[1], job->f32[2], job->mixing,
                                                  job->cu_seqlens, job->num_seqs, g->dout, ref[0], ref[1], ref[2],
                                                  ref[3])
                 : mhla_reference_backward(&job->cfg, job->f32[0], job->f32[1], job->f32[2], job->mixing, g->dout,
                                           ref[0], ref[1], ref[2], ref[3]);
    if (rc == 0 && st != MHLA_OK)
        rc = cli_fail(cli_exit_code(st), "--check: %s", mhla_last_message());
    /* With one block and a normalizer, scaling Mc leaves O unchanged but for eps: dMc is 0 up to
     * rounding, and its relative error measures nothing. */
    const int mix_checked = !(job->mixing_rows == 1 && job->cfg.normalizer != MHLA_NORMALIZER_NONE);
    double e[G_COUNT] = {0};
    *worst = 0.0;
    for (int i = 0; i < G_COUNT && rc == 0; ++i) {
        if (i == G_DMIX && !mix_checked)
            continue;
        e[i] = mhla_max_rel_err(g->f32[i], ref[i], g->count[i]);
        *worst = isnan(e[i]) || e[i] > *worst ? e[i] : *worst;
    }
    if (rc == 0) {
        printf("max_rel_err %.3g\n", *worst);
        printf("per_gradient dq %.3g dk %.3g dv %.3g dmixing %.3g%s\n", e[G_DQ], e[G_DK], e[G_DV], e[G_DMIX],
               mix_checked ? "" : " (not checked: 0 up to rounding at M = 1 with a normalizer)");
    }
    for (int i = 0; i < G_COUNT; ++i)
        free(ref[i]);
    return rc;
}

/* Every gradient is computed before the first is committed (written, synced, renamed); a write
 * that fails part-way leaves the outputs committed before it. */
static int write_outputs(grad_job *g, int want_dmix)
{
    run_job *job = &g->run;
    const int half = job->cfg.dtype == MHLA_DTYPE_F16;
    char err[512];
    for (int i = 0; i < G_COUNT; ++i) {
        if (i == G_DMIX && !want_dmix)
            continue;
        const int64_t mshape[2] = {job->mixing_rows, job->mixing_cols};
        const int64_t *shape = i == G_DMIX ? mshape : job->in[i == G_DV ? 2 : i].shape;
        const void *data = g->f32[i];
        uint16_t *bits = NULL;
        if (half && i != G_DMIX) {
            if (!(bits = malloc(g->count[i] * sizeof *bits)))
                return cli_fail(CLI_RUNTIME, "out of host memory for the float16 %s", grad_name[i]);
            mhla_convert(MHLA_DTYPE_F16, bits, MHLA_DTYPE_F32, g->f32[i], g->count[i]);
            data = bits;
        }
        const npy_status st = npy_writer_commit(&g->out[i], half && i != G_DMIX ? NPY_F16 : NPY_F32,
                                                i == G_DMIX ? 2 : 4, shape, data, err, sizeof err);
        free(bits);
        if (st != NPY_OK)
            return cli_fail(cli_npy_exit_code(st), "%s %s: %s", job->o[grad_opt[i]].name, job->o[grad_opt[i]].value,
                            err);
    }
    return 0;
}

int cmd_grad(int argc, char **argv)
{
    grad_job g;
    memset(&g, 0, sizeof g);
    g.run.out.fd = -1;
    for (int i = 0; i < G_COUNT; ++i)
        g.out[i].fd = -1;
    run_model_options(g.run.o);
    g.run.o[O_DOUT] = (cli_option){"--dout", "DO.npy", NULL};
    g.run.o[O_DQ] = (cli_option){"--dq", "DQ.npy", NULL};
    g.run.o[O_DK] = (cli_option){"--dk", "DK.npy", NULL};
    g.run.o[O_DV] = (cli_option){"--dv", "DV.npy", NULL};
    g.run.o[O_DMIXING] = (cli_option){"--dmixing", "DMC.npy", NULL};
    int help_shown = 0, rc;
    char err[512];
    double worst = 0.0;
    if ((rc = run_prepare(&g.run, CMD, help, argc, argv, &help_shown)) != 0 || help_shown)
        goto done;
    if ((rc = read_dout(&g)) != 0)
        goto done;
    const int want_dmix = g.run.o[O_DMIXING].value != NULL, check_on = g.run.o[O_CHECK].value != NULL;
    /* The outputs' temporaries exist before the work starts: a bad path fails fast. Each is in
     * the signal guard before a signal can arrive (cli_guard_hold). */
    for (int i = 0; i < G_COUNT; ++i) {
        const cli_option *opt = &g.run.o[grad_opt[i]];
        if (!opt->value)
            continue;
        sigset_t old_mask;
        cli_guard_hold(&old_mask);
        const npy_status ws = npy_writer_open(&g.out[i], opt->value, err, sizeof err);
        if (ws == NPY_OK)
            cli_guard_temp(g.out[i].tmp);
        cli_guard_release(&old_mask);
        if (ws != NPY_OK) {
            rc = cli_fail(cli_npy_exit_code(ws), "%s %s: %s", opt->name, opt->value, err);
            goto done;
        }
    }
    if ((rc = run_device(&g, want_dmix || check_on)) != 0)
        goto done;
    if (check_on && (rc = check(&g, &worst)) != 0)
        goto done;
    if ((rc = write_outputs(&g, want_dmix)) != 0)
        goto done;
    if (check_on) {
        const double tol = mhla_reference_backward_tolerance(g.run.cfg.dtype);
        if (!(worst <= tol))
            rc = cli_fail(CLI_CHECK_FAILED, "--check: max_rel_err %.3g exceeds the backward tolerance %g (%s storage)",
                          worst, tol, mhla_dtype_name(g.run.cfg.dtype));
    }
done:
    grad_free(&g); /* aborts the temporaries still open, then the guard lets them go */
    cli_guard_temp(NULL);
    return rc;
}
