/* `mhla run --causal`: the rules of the causal options and the packed offsets of --cu-seqlens,
 * which run_common.c applies while it prepares a job. The chunk form (with or without
 * --cu-seqlens) is cmd_run.c's forward pass on a causal plan; --recurrent is run_recurrent.c. */
#include "cli.h"
#include "run.h"

#include <string.h>

int causal_check_options(run_job *job)
{
    const cli_option *o = job->o;
    if (job->cfg.normalizer == MHLA_NORMALIZER_OFFICIAL)
        return cli_usage(job->command, "--normalizer %s: not in causal mode (it is defined for block grids; --causal "
                                  "takes none or paper)",
                         o[O_NORMALIZER].value);
    return 0;
}

/* Reads --cu-seqlens into job->cu_seqlens and checks it against the N packed tokens: S+1 offsets,
 * 0 first, never decreasing (an empty sequence is allowed, as the library allows it), N last. */
static int read_cu_seqlens(run_job *job, int64_t n)
{
    const cli_option *opt = &job->o[O_CU_SEQLENS];
    npy_array a;
    char err[512], shape[160];
    npy_status st = npy_read(opt->value, &a, err, sizeof err);
    if (st != NPY_OK)
        return cli_fail(cli_npy_exit_code(st), "%s %s: %s", opt->name, opt->value, err);
    npy_shape_string(a.ndim, a.shape, shape, sizeof shape);
    int rc = 0;
    if (a.dtype != NPY_I32 && a.dtype != NPY_I64)
        rc = cli_fail(CLI_USAGE, "%s %s: dtype %s, expected int32 or int64 offsets", opt->name, opt->value,
                      npy_dtype_name(a.dtype));
    else if (a.ndim != 1 || a.count < 2)
        rc = cli_fail(CLI_USAGE, "%s %s: shape %s, expected a 1-D array of S+1 >= 2 offsets (0, then where each "
                                 "sequence ends)",
                      opt->name, opt->value, shape);
    else if ((st = npy_to_int32(&a, &job->cu_seqlens, err, sizeof err)) != NPY_OK)
        rc = cli_fail(cli_npy_exit_code(st), "%s %s: %s", opt->name, opt->value, err);
    const size_t count = a.count;
    npy_free(&a);
    if (rc != 0)
        return rc;
    const int32_t *cu = job->cu_seqlens;
    const size_t s_count = count - 1;
    if (cu[0] != 0)
        return cli_fail(CLI_USAGE, "%s %s: cu_seqlens[0] must be 0, got %d", opt->name, opt->value, (int)cu[0]);
    job->longest = 0;
    for (size_t s = 0; s < s_count; ++s) {
        if (cu[s + 1] < cu[s])
            return cli_fail(CLI_USAGE, "%s %s: offsets must not decrease: cu_seqlens[%zu] = %d < cu_seqlens[%zu] = %d",
                            opt->name, opt->value, s + 1, (int)cu[s + 1], s, (int)cu[s]);
        if (cu[s + 1] - cu[s] > job->longest)
            job->longest = cu[s + 1] - cu[s];
    }
    if (cu[s_count] != n)
        return cli_fail(CLI_USAGE, "%s %s: cu_seqlens[%zu] = %d must equal N = %lld, the tokens of --q %s", opt->name,
                        opt->value, s_count, (int)cu[s_count], (long long)n, job->o[O_Q].value);
    job->num_seqs = s_count;
    return 0;
}

int causal_shape(run_job *job)
{
    const cli_option *grid = &job->o[O_GRID];
    if (grid->value && strpbrk(grid->value, "xX"))
        return cli_usage(job->command, "--grid %s: causal mode is 1D (give --grid N, or leave it out)", grid->value);
    mhla_config *cfg = &job->cfg;
    job->longest = cfg->seq_t;
    if (!job->o[O_CU_SEQLENS].value)
        return 0;
    if (cfg->batch != 1)
        return cli_fail(CLI_USAGE,
                        "--cu-seqlens %s: packed sequences need batch 1 ([1,N,H,D]), but --q %s has B = %lld",
                        job->o[O_CU_SEQLENS].value, job->o[O_Q].value, (long long)cfg->batch);
    const int rc = read_cu_seqlens(job, cfg->seq_t);
    cfg->varlen = rc == 0;
    return rc;
}

int causal_mixing_covers(const run_job *job, int64_t rows)
{
    const cli_option *mix = &job->o[O_MIXING];
    const int64_t c = job->cfg.chunk;
    if (!job->cu_seqlens)
        return cli_fail(CLI_USAGE, "%s %s: the sequence of %lld tokens is longer than chunk * rows(Mc) = %lld * %lld "
                                   "= %lld",
                        mix->name, mix->value, (long long)job->longest, (long long)c, (long long)rows,
                        (long long)(c * rows));
    const int32_t *cu = job->cu_seqlens;
    size_t s = 0;
    while (s + 1 < job->num_seqs && cu[s + 1] - cu[s] != job->longest)
        ++s;
    return cli_fail(CLI_USAGE, "%s %s: sequence %zu of --cu-seqlens %s (cu_seqlens[%zu] = %d .. cu_seqlens[%zu] = %d) "
                               "has %lld tokens, longer than chunk * rows(Mc) = %lld * %lld = %lld",
                    mix->name, mix->value, s, job->o[O_CU_SEQLENS].value, s, (int)cu[s], s + 1, (int)cu[s + 1],
                    (long long)job->longest, (long long)c, (long long)rows, (long long)(c * rows));
}
