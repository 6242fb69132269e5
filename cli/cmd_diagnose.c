/* `mhla diagnose`: the paper's diagnosis of global context collapse on the user's q and k: for
 * softmax, linear attention and MHLA, per head and on average, the numerical rank and the mean row
 * entropy of the attention matrix (mhla_diagnose(), float64 on the host), as a table on stdout and
 * optionally as JSON and an SVG plot, each written to a temporary file and renamed. */
#include "cli.h"
#include "diagnose.h"
#include "run.h"

#include <mhla_reference.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD "diagnose"

static const char help[] =
    "usage: mhla diagnose --q Q.npy --k K.npy [--v V.npy] (--blocks ... | --causal [--chunk C])\n"
    "                     [--mixing MC.npy | --init KIND] [options] [--json FILE] [--svg FILE]\n"
    "\n"
    "The paper's diagnosis of global context collapse (its Sec. 3 and Fig. 3) on your own tensors:\n"
    "the attention matrix of softmax attention (scale Dk^-0.5), linear attention (M = 1) and MHLA\n"
    "(the block grid and Mc given), built in float64 on the host from Q and K, and for each head\n"
    "(averaged over the batch) and their mean: the numerical rank (singular values above --rtol\n"
    "times the largest) and the mean row entropy in nats (the paper's sparsity measure: lower is\n"
    "more focused; at most log N). V is not needed (the matrices depend on Q and K only); given, it\n"
    "is checked against them.\n"
    "\n"
    "model options, as for 'mhla run' (see 'mhla run --help'):\n"
    "  --layout --grid --blocks --kv-grid --kv-blocks --mixing --init --feature-map --feature-eps\n"
    "  --scale --normalizer --eps --causal --chunk   (the normalizer and eps only scale rows: they\n"
    "  change nothing here). Cross-attention's matrices are query rows by key tokens.\n"
    "diagnosis:\n"
    "  --rows R                      query rows materialised per head (default 1024): every row\n"
    "                                when N <= R; else a random sample of R rows, said so\n"
    "  --no-sample                   refuse N > R instead of sampling\n"
    "  --seed S                      the sample's seed (default 1)\n"
    "  --rtol X                      rank threshold relative to the largest singular value\n"
    "                                (default 1e-5; below ~1e-6 it meets the float64 noise of the\n"
    "                                eigenvalues of A A^T it is computed from)\n"
    "  --json FILE                   everything, the singular values included\n"
    "  --svg FILE                    the spectra and the entropies as a plot\n"
    "Cost: O(R^2 N + R^3) per head and attention kind: about a second per matrix at R = N = 1024.\n"
    "\n"
    "exit codes: 0 success; 1 runtime failure; 2 usage or input error.\n";

static const char *const kind_names[MHLA_ATTENTION_KINDS] = {"softmax", "linear", "mhla"};

static void print_table(const run_job *job, const mhla_diagnose_result *r)
{
    const mhla_config *c = &job->cfg;
    printf("diagnose: N = %lld tokens, %s%lld query rows, H = %lld, Dk = %lld; %s %lld %s (%s); feature map %s\n",
           (long long)r->n, r->sampled ? "a random sample of " : "all ", (long long)r->rows, (long long)r->heads,
           (long long)c->dk, c->causal ? "causal, chunks of" : "MHLA over", c->causal ? (long long)c->chunk
                                                                                       : (long long)(c->block_t * c->block_h * c->block_w),
           c->causal ? "tokens" : "blocks", job->o[O_MIXING].value ? job->o[O_MIXING].value : "Mc from --init",
           mhla_feature_map_name(c->feature_map));
    printf("rank: singular values above %g x the largest; entropy: mean row entropy in nats (log N = %.3f)\n",
           r->rank_rtol, log((double)r->n));
    printf("%-6s %14s %9s %14s %9s %14s %9s\n", "head", "softmax rank", "entropy", "linear rank", "entropy",
           "mhla rank", "entropy");
    for (int64_t h = 0; h <= r->heads; ++h) {
        if (h < r->heads)
            printf("%-6lld", (long long)h);
        else
            printf("%-6s", "mean");
        for (int a = 0; a < MHLA_ATTENTION_KINDS; ++a) {
            double rank, entropy;
            if (h < r->heads)
                rank = r->rank[h * MHLA_ATTENTION_KINDS + a], entropy = r->entropy[h * MHLA_ATTENTION_KINDS + a];
            else
                diagnose_mean(r, a, &rank, &entropy);
            printf(" %14.1f %9.4f", rank, entropy);
        }
        printf("\n");
    }
    if (c->causal)
        printf("rank bounds: %lld, the rows, for all three (the causal masks leave no bound below it)\n",
               (long long)r->rank_bound[0]);
    else
        printf("rank bounds: softmax %lld, linear %lld (Dk), mhla %lld (the sum over blocks of min(tokens in the "
               "block, Dk))\n",
               (long long)r->rank_bound[0], (long long)r->rank_bound[1], (long long)r->rank_bound[2]);
}

static int write_json(FILE *f, const run_job *job, const mhla_diagnose_result *r)
{
    const mhla_config *c = &job->cfg;
    fprintf(f, "{\n  \"n\": %lld,\n  \"rows\": %lld,\n  \"sampled\": %s,\n  \"rank_rtol\": %.17g,\n", (long long)r->n,
            (long long)r->rows, r->sampled ? "true" : "false", r->rank_rtol);
    fprintf(f, "  \"config\": {\"batch\": %lld, \"heads\": %lld, \"dk\": %lld, \"grid\": [%lld, %lld, %lld], "
               "\"blocks\": [%lld, %lld, %lld], \"causal\": %s, \"chunk\": %lld, \"feature_map\": \"%s\", "
               "\"scale\": %.9g, \"mixing_rows\": %lld},\n",
            (long long)c->batch, (long long)c->heads, (long long)c->dk, (long long)c->seq_t, (long long)c->seq_h,
            (long long)c->seq_w, (long long)c->block_t, (long long)c->block_h, (long long)c->block_w,
            c->causal ? "true" : "false", (long long)c->chunk, mhla_feature_map_name(c->feature_map), (double)c->scale,
            (long long)c->mixing_rows);
    fprintf(f, "  \"rank_bound\": {\"softmax\": %lld, \"linear\": %lld, \"mhla\": %lld},\n", (long long)r->rank_bound[0],
            (long long)r->rank_bound[1], (long long)r->rank_bound[2]);
    fprintf(f, "  \"mean\": {");
    for (int a = 0; a < MHLA_ATTENTION_KINDS; ++a) {
        double rank, entropy;
        diagnose_mean(r, a, &rank, &entropy);
        fprintf(f, "%s\"%s\": {\"rank\": %.17g, \"entropy\": %.17g}", a ? ", " : "", kind_names[a], rank, entropy);
    }
    fprintf(f, "},\n  \"heads\": [\n");
    for (int64_t h = 0; h < r->heads; ++h) {
        fprintf(f, "    {\"head\": %lld", (long long)h);
        for (int a = 0; a < MHLA_ATTENTION_KINDS; ++a) {
            const int64_t at = h * MHLA_ATTENTION_KINDS + a;
            fprintf(f, ", \"%s\": {\"rank\": %.17g, \"entropy\": %.17g, \"sigma\": [", kind_names[a], r->rank[at],
                    r->entropy[at]);
            for (int64_t i = 0; i < r->rows; ++i)
                fprintf(f, "%s%.17g", i ? ", " : "", r->sigma[at * r->rows + i]);
            fprintf(f, "]}");
        }
        fprintf(f, "}%s\n", h + 1 < r->heads ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    return ferror(f) ? -1 : 0;
}

/* One text output: a temporary beside the target (npy_writer's, so a signal removes it too),
 * written, flushed, synced and renamed over the target. */
static int write_text(const cli_option *opt, const run_job *job, const mhla_diagnose_result *r, int svg)
{
    npy_writer w;
    char err[512];
    memset(&w, 0, sizeof w);
    w.fd = -1;
    sigset_t old_mask;
    cli_guard_hold(&old_mask);
    const npy_status ws = npy_writer_open(&w, opt->value, err, sizeof err);
    if (ws == NPY_OK)
        cli_guard_temp(w.tmp);
    cli_guard_release(&old_mask);
    if (ws != NPY_OK)
        return cli_fail(cli_npy_exit_code(ws), "%s %s: %s", opt->name, opt->value, err);
    FILE *f = fdopen(w.fd, "w");
    int rc = f ? 0 : -1;
    if (f) {
        w.fd = -1; /* the FILE owns it now */
        char title[160];
        snprintf(title, sizeof title, "Global context collapse: %s", job->o[O_Q].value);
        rc = svg ? diagnose_svg(f, r, title) : write_json(f, job, r);
        if (fflush(f) != 0 || fsync(fileno(f)) != 0)
            rc = -1;
        if (fclose(f) != 0)
            rc = -1;
    }
    if (rc == 0 && rename(w.tmp, w.path) != 0)
        rc = -1;
    if (rc == 0) {
        free(w.tmp), free(w.path);
        memset(&w, 0, sizeof w);
        w.fd = -1;
    }
    npy_writer_abort(&w); /* removes the temporary after a failure */
    cli_guard_temp(NULL);
    return rc ? cli_fail(CLI_RUNTIME, "%s %s: writing failed", opt->name, opt->value) : 0;
}

int cmd_diagnose(int argc, char **argv)
{
    run_job job;
    memset(&job, 0, sizeof job);
    job.out.fd = -1;
    run_model_options(job.o);
    job.o[O_CHECK] = job.o[O_DTYPE] = job.o[O_DEVICE] = job.o[O_CU_SEQLENS] = (cli_option){NULL, NULL, NULL};
    job.o[O_ROWS] = (cli_option){"--rows", "R", NULL};
    job.o[O_NO_SAMPLE] = (cli_option){"--no-sample", NULL, NULL};
    job.o[O_SEED] = (cli_option){"--seed", "S", NULL};
    job.o[O_RTOL] = (cli_option){"--rtol", "X", NULL};
    job.o[O_JSON] = (cli_option){"--json", "FILE", NULL};
    job.o[O_SVG] = (cli_option){"--svg", "FILE", NULL};
    mhla_diagnose_options opt;
    mhla_diagnose_options_init(&opt);
    mhla_diagnose_result res;
    memset(&res, 0, sizeof res);
    int help_shown = 0, rc;
    int64_t seed = 1;
    float rtol = 0.0f;
    if ((rc = run_parse(&job, CMD, help, argc, argv, &help_shown)) != 0 || help_shown)
        goto done;
    if ((job.o[O_ROWS].value && (rc = args_int(CMD, &job.o[O_ROWS], 1, 65536, &opt.max_rows)) != 0) ||
        (job.o[O_SEED].value && (rc = args_int(CMD, &job.o[O_SEED], 0, UINT32_MAX, &seed)) != 0) ||
        (job.o[O_RTOL].value && (rc = args_float(CMD, &job.o[O_RTOL], 0.0, &rtol)) != 0))
        goto done;
    if (job.o[O_RTOL].value && !(rtol > 0.0f && rtol < 1.0f)) {
        rc = cli_usage(CMD, "--rtol %s: expected a number between 0 and 1", job.o[O_RTOL].value);
        goto done;
    }
    opt.seed = (uint32_t)seed;
    opt.sample = job.o[O_NO_SAMPLE].value == NULL;
    if (job.o[O_RTOL].value)
        opt.rank_rtol = rtol;
    if (!job.o[O_V].value) /* not needed: reading K in its place keeps run's shape checks */
        job.o[O_V].value = job.o[O_K].value;
    if ((rc = run_read_inputs(&job)) != 0 || (rc = run_shape(&job)) != 0)
        goto done;
    const mhla_status st = mhla_diagnose(&job.cfg, job.f32[0], job.f32[1], job.mixing, &opt, &res);
    if (st != MHLA_OK) {
        rc = cli_fail(cli_exit_code(st), "%s", mhla_last_message());
        goto done;
    }
    if ((job.o[O_JSON].value && (rc = write_text(&job.o[O_JSON], &job, &res, 0)) != 0) ||
        (job.o[O_SVG].value && (rc = write_text(&job.o[O_SVG], &job, &res, 1)) != 0))
        goto done;
    print_table(&job, &res);
done:
    mhla_diagnose_result_free(&res);
    run_job_free(&job);
    return rc;
}
