/* `mhla run --causal --recurrent`: the streaming decoder, token by token, over each sequence (each
 * batch element, or each packed one of --cu-seqlens), into the job's output. */
#include "cli.h"
#include "run.h"

#include <stdlib.h>
#include <string.h>

/* What the decoder reads and writes, in the storage type: q, k, v and the output (`out` is
 * job->result for f32, else 16-bit patterns converted into it after the run). */
typedef struct decode_io {
    unsigned char *x[4];
    size_t elem;                /* 4 or 2 bytes */
    unsigned char *scratch[4]; /* BHND packed sequences: q, k, v, out of the longest one */
} decode_io;

/* Tokens [start, start + len) of a packed BHND tensor [1,H,total,d], copied into (gather) or back
 * from (scatter) a [1,H,len,d] one: there a sequence's tokens are not contiguous. */
static void bhnd_copy(unsigned char *packed, unsigned char *seq, int gather, size_t elem, int64_t heads,
                      int64_t total, int64_t d, int64_t start, int64_t len)
{
    const size_t row = (size_t)d * elem, bytes = (size_t)len * row;
    for (int64_t h = 0; h < heads; ++h) {
        unsigned char *p = packed + (size_t)(h * total + start) * row, *s = seq + (size_t)h * bytes;
        memcpy(gather ? s : p, gather ? p : s, bytes);
    }
}

/* One run of the decoder over every sequence: the whole input (each batch element a sequence), or
 * each packed one from position 0. BNHD sequences are contiguous and read in place; BHND ones go
 * through io->scratch. */
static mhla_status decode_all(run_job *job, const decode_io *io)
{
    const mhla_config *cfg = &job->cfg;
    if (!cfg->varlen) {
        mhla_status st = mhla_decoder_reset(job->dec);
        return st == MHLA_OK ? mhla_decoder_step_host(job->dec, io->x[0], io->x[1], io->x[2], job->mixing, io->x[3],
                                                      cfg->seq_t)
                             : st;
    }
    const int bhnd = cfg->layout == MHLA_LAYOUT_BHND;
    const int64_t h = cfg->heads, total = cfg->seq_t, d[4] = {cfg->dk, cfg->dk, cfg->dv, cfg->dv};
    for (size_t s = 0; s < job->num_seqs; ++s) {
        const int64_t start = job->cu_seqlens[s], len = job->cu_seqlens[s + 1] - start;
        if (len == 0) /* an empty sequence: no tokens, no output */
            continue;
        unsigned char *seq[4];
        for (int t = 0; t < 4; ++t) {
            seq[t] = bhnd ? io->scratch[t] : io->x[t] + (size_t)(start * h * d[t]) * io->elem;
            if (bhnd && t < 3)
                bhnd_copy(io->x[t], seq[t], 1, io->elem, h, total, d[t], start, len);
        }
        mhla_status st = mhla_decoder_reset(job->dec);
        if (st == MHLA_OK)
            st = mhla_decoder_step_host(job->dec, seq[0], seq[1], seq[2], job->mixing, seq[3], len);
        if (st != MHLA_OK)
            return st;
        if (bhnd)
            bhnd_copy(io->x[3], seq[3], 0, io->elem, h, total, d[3], start, len);
    }
    return MHLA_OK;
}

int causal_run_recurrent(run_job *job)
{
    int rc = run_open_context(job);
    if (rc != 0)
        return rc;
    mhla_config cfg = job->cfg;
    cfg.varlen = 0; /* the decoder takes one sequence per batch element; packed ones one by one */
    mhla_status st = mhla_decoder_create(job->ctx, &cfg, job->longest, &job->dec);
    if (st != MHLA_OK)
        return run_device_fail(job, st, "--recurrent");
    const size_t out_count = job->out_count;
    const int wide = cfg.dtype == MHLA_DTYPE_F32;
    decode_io io = {{NULL}, wide ? sizeof(float) : sizeof(uint16_t), {NULL}};
    for (int t = 0; t < 3; ++t)
        io.x[t] = wide ? (unsigned char *)job->f32[t] : (unsigned char *)job->dev16[t];
    if (!(job->result = malloc(out_count * sizeof *job->result)) ||
        !(io.x[3] = wide ? (unsigned char *)job->result : malloc(out_count * io.elem)))
        return cli_fail(CLI_RUNTIME, "out of host memory for the output");
    const int64_t d[4] = {cfg.dk, cfg.dk, cfg.dv, cfg.dv};
    for (int t = 0; t < 4 && job->cfg.varlen && cfg.layout == MHLA_LAYOUT_BHND; ++t)
        if (!(io.scratch[t] = malloc((size_t)(job->longest * cfg.heads * d[t]) * io.elem)) && rc == 0)
            rc = cli_fail(CLI_RUNTIME, "out of host memory for a sequence of %lld tokens", (long long)job->longest);
    /* --repeat: one warm-up, then R timed runs of the whole token loop (wall time: the decoder's
     * host calls block, and each copies its sequence in and its output out once). */
    const int64_t runs = job->repeat ? job->repeat + 1 : 1;
    double *ms = job->repeat ? malloc((size_t)job->repeat * sizeof *ms) : NULL;
    if (job->repeat && !ms && rc == 0)
        rc = cli_fail(CLI_RUNTIME, "out of host memory");
    for (int64_t r = 0; r < runs && rc == 0; ++r) {
        const double t0 = cli_now_ms();
        if ((st = decode_all(job, &io)) != MHLA_OK)
            rc = run_device_fail(job, st, "--recurrent");
        else if (r > 0)
            ms[r - 1] = cli_now_ms() - t0;
    }
    if (rc == 0 && job->repeat)
        run_print_times(ms, (size_t)job->repeat);
    if (rc == 0 && !wide) /* the stored 16-bit outputs, as floats for --check and the file */
        mhla_convert(MHLA_DTYPE_F32, job->result, cfg.dtype, io.x[3], out_count);
    free(ms);
    if (!wide)
        free(io.x[3]);
    for (int t = 0; t < 4; ++t)
        free(io.scratch[t]);
    return rc;
}
