/* `mhla tune`: searches the tuning fields of each stage for the device and a few shapes, in the way
 * CLBlast's tuners and Triton's autotune do, and stores the winners in the device's tuning database
 * (mhla_tuning_db_put), which plans then use by themselves. Every candidate is checked against the
 * double reference before it is timed (mhla_selftest_config; the causal backward's fields, which no
 * forward reads, on the backward itself: tune_backward.c; the decoder's on a decoder: tune_decode.c);
 * a wrong one is discarded. The search
 * is coordinate descent from the device's built-in row: one field at a time, each stage timed by
 * its own device time (mhla_plan_stage_times), a change kept only when it wins by more than the
 * noise margin; then a joint pass over the fields that only pay together (a stage's register tile
 * rows x vectors x vector width x work-group size); the whole forward (and the causal backward,
 * when a backward field changed) is timed again against the built-in row at the end, alternately,
 * and the entry is stored only if it is faster without slowing the other down; a decoder field is
 * kept only if the decoder's steps are faster with it. */
#include "args.h"
#include "cli.h"
#include "tune_backward.h"
#include "tune_decode.h"

#include <mhla_reference.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char help[] =
    "usage: mhla tune [--device SPEC] [--budget SECONDS] [--shapes LIST] [--heads H] [--stages LIST]\n"
    "                 [--row NAME] [--export] [--dry-run]\n"
    "\n"
    "Searches the tiles, vector widths, work-group sizes, block splits and the mixing GEMM (built-in\n"
    "kernel or CLBlast) of each stage, the causal score tiles, the softmax tiles, the causal\n"
    "backward's kernels (fused or not, bc_diag's work-items, read-out accumulators, the GPU rows'\n"
    "tiled read-outs) and the decoder's step for this device,\n"
    "one field at a time from its built-in tuning row, then jointly (each stage's register tile rows x\n"
    "vectors x vector width x work-group size). Each candidate is checked against the double\n"
    "reference first (a wrong one is discarded), then timed (device time per stage, median of runs).\n"
    "The winner is timed again against the built-in row over the whole forward (and the causal\n"
    "backward, when it changed a backward field; decode steps, when it changed the decoder's) and\n"
    "kept only if faster. It goes to the device's\n"
    "tuning database (keyed by device, driver and library version), which every plan with the same\n"
    "head dimensions then uses; `mhla info` shows the entries.\n"
    "\n"
    "  --device SPEC     the device, as MHLA_DEVICE\n"
    "  --budget SECONDS  time for the whole search, first compiles included (default 120)\n"
    "  --shapes LIST     comma-separated DK[xDV]@N[:M] (default 64x64@16384: Dk = Dv = 64, N = 16384,\n"
    "                    M from the paper's rule M^2 <= N with blocks of >= 256 tokens); the causal\n"
    "                    and backward stages run N/4 tokens in chunks of 64, softmax 2048 tokens\n"
    "  --heads H         heads of the timed problems (default 8)\n"
    "  --stages LIST     only these stages, comma-separated: tiled (the GPU rows' forward), summary,\n"
    "                    output, mixing, causal, softmax, backward (the causal backward),\n"
    "                    tiled-backward (the GPU rows' non-causal backward), tiled-causal (the GPU\n"
    "                    rows' causal forward), decode (the decoder's steps in parts, and whether\n"
    "                    they sum the next chunk's prefix; default all)\n"
    "  --row NAME        start from this built-in row (gpu, nvidia, amd, mobile, cpu, ...) instead of\n"
    "                    the device's own: a GPU row's fields searched on another device; an entry\n"
    "                    is stored with its row, and only where it beats the device's own row\n"
    "  --export          also print each entry as a row for host/tune/tuning_rows.c's built-in table\n"
    "                    (a GPU's as the fields of its vendor's row: nvidia, amd, intel-gpu,\n"
    "                    mobile)\n"
    "  --dry-run         search and report, but store nothing\n";

#define MAX_SHAPES 8
#define MAX_FIELDS 24
#define RUNS 7            /* timed runs per candidate (after one warm-up): the median is kept */
#define SLOW_MS 100.0     /* a warm-up longer than this (llvmpipe, softmax): 3 runs, not RUNS */
#define MARGIN 0.03       /* a change must win by 3%: less is within the shared machine's noise */
#define CONFIRM_ROUNDS 3  /* alternate final timings of the built-in row and the winner */

typedef struct tune_shape {
    int64_t dk, dv, n, m;
} tune_shape;

/* The spec being built: "row=NAME" then name=value pairs in the order they were set. */
typedef struct tune_spec {
    char row[32];
    char name[MAX_FIELDS][24];
    int value[MAX_FIELDS];
    int count;
} tune_spec;

typedef struct tuner {
    mhla_context *ctx;
    int64_t heads;
    double t0, deadline;
    int stage_clock; /* the device's stage times are usable (else: the forward's host time) */
    int candidates, discarded;
    unsigned stages; /* bit k: stages[k] is searched (--stages) */
    char device_row[32]; /* the device's own built-in row: what an entry must beat */
} tuner;

/* ---- specs ----------------------------------------------------------------------------------- */

static void spec_set(tune_spec *s, const char *name, int value)
{
    for (int i = 0; i < s->count; ++i)
        if (strcmp(s->name[i], name) == 0) {
            s->value[i] = value;
            return;
        }
    if (s->count < MAX_FIELDS) {
        snprintf(s->name[s->count], sizeof s->name[0], "%s", name);
        s->value[s->count++] = value;
    }
}

/* "row=cpu-wide,sum_nv=2" (with_row) or "sum_nv=2". */
static void spec_text(const tune_spec *s, int with_row, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    if (with_row)
        len += (size_t)snprintf(buf + len, size - len, "row=%s", s->row);
    for (int i = 0; i < s->count && len < size; ++i)
        len += (size_t)snprintf(buf + len, size - len, "%s%s=%d", len ? "," : "", s->name[i], s->value[i]);
}

/* The value of `name` in mhla_context_tuning()'s text ("... name=value ..."), or -1. */
static int field_in(const char *text, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name))
        if ((p == text || p[-1] == ' ' || p[-1] == ',') && p[n] == '=')
            return atoi(p + n + 1);
    return -1;
}

/* The effective tuning (after the device's caps) of `spec` on the tuner's context. */
static mhla_status effective(tuner *t, const tune_spec *spec, char *text, size_t size)
{
    char s[1024];
    spec_text(spec, 1, s, sizeof s);
    mhla_status st = mhla_context_set_tuning(t->ctx, s);
    return st == MHLA_OK ? mhla_context_tuning(t->ctx, text, size) : st;
}

/* ---- checking and timing --------------------------------------------------------------------- */

static double elapsed_s(const tuner *t) { return (cli_now_ms() - t->t0) * 1e-3; }

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* A small problem with the same head dimensions and tiles: what every candidate must get right. */
static mhla_config small_config(const mhla_config *big, int kind)
{
    mhla_config c = *big;
    c.batch = 1, c.heads = 2;
    if (kind == 2 || big->causal) {
        c.seq_t = big->causal ? 150 : 70; /* partial chunks of 64 */
        c.mixing_rows = 0;
    } else {
        c.seq_t = 512, c.block_t = 4; /* long enough for two 64-key... block segments of 128 */
    }
    return c;
}

/* Random device inputs for cfg (mixing: M x M, or the causal rows, uniform in [0.05, 1)). */
static mhla_status make_buffers(mhla_context *ctx, const mhla_config *cfg, cl_mem b[5])
{
    const size_t sizes[5] = {
        mhla_config_tensor_elems(cfg, MHLA_TENSOR_Q), mhla_config_tensor_elems(cfg, MHLA_TENSOR_K),
        mhla_config_tensor_elems(cfg, MHLA_TENSOR_V), mhla_config_tensor_elems(cfg, MHLA_TENSOR_OUT),
        mhla_config_tensor_elems(cfg, MHLA_TENSOR_MIXING)};
    size_t most = 0;
    for (int i = 0; i < 5; ++i)
        most = sizes[i] > most ? sizes[i] : most;
    float *host = malloc(most * sizeof *host);
    if (!host)
        return MHLA_ERR_OUT_OF_HOST_MEMORY;
    tune_fill(host, most, 0x243F6A8885A308D3ULL);
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 5 && err == CL_SUCCESS; ++i)
        b[i] = clCreateBuffer(mhla_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              (sizes[i] ? sizes[i] : 1) * sizeof(float), host, &err);
    free(host);
    return err == CL_SUCCESS ? MHLA_OK : MHLA_ERR_OUT_OF_DEVICE_MEMORY;
}

/* Checks `spec` on a small problem, then times it on cfg. kind: 0 the forward, 1 the causal forward,
 * 2 softmax, 3 the causal backward (of the causal cfg), 4 the non-causal backward, 5 decode (a token's
 * steps after cfg's tokens of context). ms[0..2]: the forward stages' medians (NaN without stage
 * times, and for kinds 2 to 5), ms[3] the whole run's (decode: a token's). *wrong is set for a
 * candidate that fails the check. */
static mhla_status measure(tuner *t, const tune_spec *spec, const mhla_config *cfg, int kind, double ms[4],
                           int *wrong)
{
    const int softmax = kind == 2, backward = kind == 3 || kind == 4, decode = kind == 5;
    mhla_status st = MHLA_OK;
    mhla_plan *plan = NULL;
    tune_backward *bwd = NULL;
    tune_decode *dec = NULL;
    cl_mem b[5] = {NULL, NULL, NULL, NULL, NULL};
    double runs[4][RUNS];
    char s[1024];
    *wrong = 0;
    spec_text(spec, 1, s, sizeof s);
    if ((st = mhla_context_set_tuning(t->ctx, s)) != MHLA_OK)
        return st;
    const mhla_config small = small_config(cfg, kind);
    mhla_selftest_result r;
    int passed = 0;
    if (backward)
        st = tune_backward_check(t->ctx, &small, &passed);
    else if (decode)
        st = tune_decode_check(t->ctx, &small, &passed);
    else if ((st = mhla_selftest_config(t->ctx, &small, softmax, 7, &r)) == MHLA_OK)
        passed = r.passed;
    if (st != MHLA_OK)
        return st;
    if (!passed) {
        *wrong = 1;
        return MHLA_OK;
    }
    if (backward)
        st = tune_backward_open(t->ctx, cfg, &bwd);
    else if (decode)
        st = tune_decode_open(t->ctx, cfg, &dec);
    else if ((st = softmax ? mhla_softmax_plan_create(t->ctx, cfg, &plan) : mhla_plan_create(t->ctx, cfg, &plan)) ==
             MHLA_OK)
        st = make_buffers(t->ctx, cfg, b);
    if (st != MHLA_OK)
        goto cleanup;
    cl_command_queue queue = mhla_context_queue(t->ctx);
    int runs_wanted = RUNS;
    for (int i = -1; i < runs_wanted && st == MHLA_OK; ++i) { /* run -1: the warm-up (a backward: its workspace) */
        double wall = 0;
        if (backward) {
            st = tune_backward_run(bwd, &wall);
        } else if (decode) {
            st = tune_decode_run(dec, &wall);
        } else {
            cl_event done = NULL;
            clFinish(queue);
            const double w0 = cli_now_ms();
            st = mhla_forward(plan, b[0], b[1], b[2], b[4], b[3], 0, NULL, &done);
            if (st == MHLA_OK && clWaitForEvents(1, &done) != CL_SUCCESS)
                st = MHLA_ERR_OPENCL;
            wall = cli_now_ms() - w0;
            if (done)
                clReleaseEvent(done);
        }
        if (i < 0 && wall > SLOW_MS)
            runs_wanted = 3;
        if (st != MHLA_OK || i < 0)
            continue;
        mhla_stage_times times;
        if (kind < 2 && t->stage_clock && mhla_plan_stage_times(plan, &times) == MHLA_OK) {
            runs[0][i] = times.summary_ms, runs[1][i] = times.mixing_ms, runs[2][i] = times.output_ms;
            runs[3][i] = times.total_ms;
        } else {
            if (kind < 2)
                t->stage_clock = 0; /* rusticl 22.3: no usable timestamps, the forward's host time */
            runs[0][i] = runs[1][i] = runs[2][i] = NAN;
            runs[3][i] = wall; /* softmax, the backward and decode have no stage times: the wall time */
        }
    }
    for (int k = 0; k < 4 && st == MHLA_OK; ++k)
        ms[k] = median(runs[k], runs_wanted);
cleanup:
    for (int i = 0; i < 5; ++i)
        if (b[i])
            clReleaseMemObject(b[i]);
    mhla_plan_destroy(plan);
    tune_backward_close(bwd);
    tune_decode_close(dec);
    return st;
}

/* ---- the search ------------------------------------------------------------------------------ */

typedef struct tune_field {
    const char *name;
    int count;
    int values[6];
} tune_field;

typedef struct tune_stage {
    const char *name;
    int objective; /* index into measure()'s ms: 0 summary, 1 mixing, 2 output, 3 the whole run */
    int kind;      /* measure()'s: 0 the forward of the shape, 1 causal (N/4 tokens, chunks of 64), 2 softmax
                      (2048), 3 the causal backward (1's problem), 4 the backward of 0's problem, 5 decode
                      (a token's steps after 1's tokens of context) */
    tune_field fields[12];
    /* The joint pass: a register tile's rows and vectors, its vector width and the work-group size
     * together (NULL: the stage has none). */
    const char *rows_field, *nv_field, *ve_field;
    int row_count, row_values[6];
    int rows_in_dk, cols_in_dv; /* the tile's rows lie along Dk, its columns along Dv: larger ones are
                                   cut down to a tile the grid holds already (host/tune/tiling.c) */
} tune_stage;

/* What each stage may change, and the values tried (a value the device's caps turn into the
 * current one measures the same and is not kept). */
static const tune_stage stages[] = {
    /* The tiled forward (GPU rows; tiled=1 on a CPU is tried once): its fields over the whole
     * forward, which it changes at all three stages (the segments are added inside the mixing). First:
     * on a GPU visit of a few minutes, the fields its forward runs with. */
    {"tiled", 3, 0,
     {{"tiled", 2, {1, 0}}, {"tl_tk", 3, {16, 32, 64}}, {"tl_tn", 2, {32, 64}}, {"tl_tq", 3, {32, 64, 128}},
      {"tl_dc", 3, {16, 32, 64}}, {"tl_fuse", 3, {0, 16, 64}}, {"groups_per_cu", 4, {2, 4, 8, 16}},
      {"mix_mr", 3, {4, 8, 16}}, {"tl_rr", 2, {4, 8}}, {"tl_qr", 2, {4, 8}}, {"tl_one", 3, {0, 4096, 16384}},
      {NULL, 0, {0}}},
     NULL, NULL, NULL, 0, {0}, 0, 0},
    {"summary", 0, 0,
     {{"sum_rd", 4, {4, 6, 8, 16}}, {"sum_nv", 3, {1, 2, 4}}, {"sum_chunk", 4, {32, 64, 128, 256}},
      {"sum_lk", 2, {0, 1}}, {"sum_kb", 2, {0, 1}}, {"pf", 2, {0, 1}}, {"wg", 4, {32, 64, 128, 256}},
      {"groups_per_cu", 4, {4, 8, 64, 256}}, {NULL, 0, {0}}},
     "sum_rd", "sum_nv", "sum_ve", 5, {2, 4, 6, 8, 16}, 1, 1},
    {"output", 2, 0,
     {{"out_rt", 4, {2, 4, 6, 8}}, {"out_nv", 3, {1, 2, 4}}, {"out_dc", 3, {4, 8, 16}}, {"out_nt", 2, {0, 1}},
      {"out_pre", 2, {0, 1}}, {"out_pf", 4, {0, 2, 4, 8}},
      {NULL, 0, {0}}},
     "out_rt", "out_nv", "out_ve", 6, {1, 2, 3, 4, 6, 8}, 0, 1},
    {"mixing", 1, 0, {{"mix_kernel", 2, {1, 0}}, {"mix_mr", 3, {2, 4, 8}}, {"mix_nv", 3, {1, 2, 4}}, {NULL, 0, {0}}},
     "mix_mr", "mix_nv", "mix_ve", 3, {2, 4, 8}, 0, 0},
    {"causal", 3, 1,
     {{"tq", 3, {16, 32, 64}}, {"kt", 3, {16, 32, 64}}, {"sc_rt", 4, {1, 2, 4, 8}}, {"sc_kv", 2, {1, 2}},
      {"gemm_rows", 2, {0, 32}}, {"pre_mr", 3, {2, 4, 8}}, {"pre_nv", 3, {1, 2, 4}}, {NULL, 0, {0}}},
     "pre_mr", "pre_nv", "mix_ve", 3, {2, 4, 8}, 0, 0},
    {"softmax", 3, 2,
     {{"sm_bq", 5, {32, 64, 128, 256, 512}}, {"sm_bk", 4, {16, 32, 64, 128}}, {"sm_vw", 3, {4, 8, 16}},
      {"sm_rows", 2, {0, 1}}, {NULL, 0, {0}}},
     NULL, NULL, NULL, 0, {0}, 0, 0},
    /* The fields only the backward reads: the fused group per (chunk, head) or three read-outs and
     * bc_diag, bc_diag's work-items, the read-outs' accumulator vectors, the rows per work-item of
     * dMc's products, the GPU rows' tiled read-outs (bc_sq 0: the CPU form) and dMc's products in
     * work-group tiles (dm_t 0: the CPU form; the non-causal backward's too). */
    {"backward", 3, 3,
     {{"bct_fuse", 2, {0, 1}}, {"dg_parts", 3, {1, 8, 32}}, {"bwd_acc", 3, {4, 8, 16}}, {"dmix_tm", 3, {2, 3, 4}},
      {"bc_sq", 3, {0, 32, 64}}, {"bc_bk", 3, {8, 16, 32}}, {"dm_t", 4, {0, 16, 32, 64}}, {NULL, 0, {0}}},
     NULL, NULL, NULL, 0, {0}, 0, 0},
    /* The tiled plans' backward (GPU rows): its read-outs' token groups and local tiles, and the
     * blocks within which they mix S~ and dS themselves, timed over the non-causal backward of the
     * forward's shape (bt_tq 0: the untiled read-outs). */
    {"tiled-backward", 3, 4,
     {{"bt_tq", 4, {0, 16, 32, 64}}, {"bt_dc", 3, {8, 16, 32}}, {"bt_fuse", 3, {0, 4, 16}}, {NULL, 0, {0}}},
     NULL, NULL, NULL, 0, {0}, 0, 0},
    /* The GPU rows' causal forward: its tiled read-out's token groups and key tiles, its tiled
     * prefix's groups of chunks and columns and its tiles of earlier chunks, its tiled chunk
     * summaries' tokens per tile, timed over the causal forward (ct_sq, cp_ti, cs_tk 0: the untiled
     * kernels, the prefix with CLBlast's blocks). */
    {"tiled-causal", 3, 1,
     {{"ct_sq", 3, {0, 32, 64}}, {"ct_bk", 3, {8, 16, 32}}, {"cp_ti", 4, {0, 16, 32, 64}}, {"cp_tw", 3, {32, 64, 128}},
      {"cp_tj", 3, {8, 16, 32}}, {"cs_tk", 4, {0, 8, 16, 32}}, {NULL, 0, {0}}},
     NULL, NULL, NULL, 0, {0}, 0, 0},
    /* The decoder: its step's parts of Dk and its chunk start's parts of the earlier chunks, and
     * whether the steps sum the next chunk's prefix instead (dec_next), timed per token over C steps
     * after the causal stages' N of context (tune_decode.c). */
    {"decode", 3, 5, {{"dec_dp", 5, {1, 2, 4, 8, 16}}, {"dec_next", 2, {0, 1}}, {NULL, 0, {0}}}, NULL, NULL, NULL, 0,
     {0}, 0, 0},
};
#define STAGE_COUNT (sizeof stages / sizeof stages[0])

static mhla_config stage_config(const tuner *t, const tune_shape *s, int kind)
{
    mhla_config c;
    if (kind == 1 || kind == 3 || kind == 5) { /* the backward's and decode's are the causal forward's */
        mhla_config_init_causal(&c);
        c.seq_t = s->n / 4 > 256 ? s->n / 4 : 256;
    } else {
        mhla_config_init(&c);
        c.seq_t = kind == 2 ? 2048 : s->n;
        c.block_t = kind == 2 ? 1 : s->m;
    }
    c.heads = t->heads, c.dk = s->dk, c.dv = s->dv;
    return c;
}

/* Times `trial` against the best so far (base: its times); keeps it in *best when it wins by more
 * than the margin twice, the second time against a fresh baseline. */
static void try_candidate(tuner *t, const tune_shape *s, const tune_stage *stage, const mhla_config *cfg, int obj,
                          const tune_spec *trial, const char *label, tune_spec *best, double base[4], int *changed)
{
    double ms[4];
    int wrong = 0;
    ++t->candidates;
    mhla_status st = measure(t, trial, cfg, stage->kind, ms, &wrong);
    if (st != MHLA_OK || wrong) {
        ++t->discarded;
        printf("[%6.1f s] %lldx%lld %-7s %s: %s\n", elapsed_s(t), (long long)s->dk, (long long)s->dv, stage->name,
               label, wrong ? "wrong against the reference: discarded" : mhla_status_name(st));
        return;
    }
    int better = ms[obj] < base[obj] * (1.0 - MARGIN);
    if (better) { /* a win within the machine's noise is common: it must win again, timed anew */
        double again[4], base_again[4];
        int w2 = 0;
        if (measure(t, best, cfg, stage->kind, base_again, &w2) == MHLA_OK &&
            measure(t, trial, cfg, stage->kind, again, &w2) == MHLA_OK && !w2) {
            better = again[obj] < base_again[obj] * (1.0 - MARGIN);
            ms[obj] = 0.5 * (ms[obj] + again[obj]);
            if (!better) /* the first baseline was the outlier: later candidates race the fresh one */
                memcpy(base, base_again, 4 * sizeof *base);
        } else {
            better = 0;
        }
    }
    printf("[%6.1f s] %lldx%lld %-7s %s: %.3f ms%s (best so far %.3f)\n", elapsed_s(t), (long long)s->dk,
           (long long)s->dv, stage->name, label, ms[obj], better ? " kept" : "", better ? ms[obj] : base[obj]);
    fflush(stdout);
    if (better) {
        *best = *trial;
        memcpy(base, ms, 4 * sizeof *base);
        *changed = 1;
    }
}

/* The fuse_mb a candidate that mixes inside the read-outs (tl_fuse, bt_fuse) needs on this shape,
 * into *mb: its plan with the bound lifted says what each mixing read-out reads again ("30.5 MiB
 * read again"), and the smallest whole MiB over the most of them admits them all; 0 where none
 * mixes (split blocks, more blocks than the candidate takes). Without it the candidate would time
 * the row's launches again wherever the row's bound keeps the mixing apart, and a bound raised just
 * that far leaves larger problems (more heads, batches, tokens) unfused, as the row does. */
static mhla_status fuse_need_mb(tuner *t, const tune_spec *trial, const mhla_config *cfg, int kind, int *mb)
{
    tune_spec lifted = *trial;
    spec_set(&lifted, "fuse_mb", 1 << 20);
    char s[1024], text[2048];
    spec_text(&lifted, 1, s, sizeof s);
    *mb = 0;
    mhla_status st = mhla_context_set_tuning(t->ctx, s);
    if (st == MHLA_OK && kind == 4) { /* the backward's read-outs: described once a backward has run */
        tune_backward *bwd = NULL;
        double wall = 0;
        if ((st = tune_backward_open(t->ctx, cfg, &bwd)) == MHLA_OK && (st = tune_backward_run(bwd, &wall)) == MHLA_OK)
            st = tune_backward_tuning(bwd, text, sizeof text);
        tune_backward_close(bwd);
    } else if (st == MHLA_OK) {
        mhla_plan *plan = NULL;
        if ((st = mhla_plan_create(t->ctx, cfg, &plan)) == MHLA_OK)
            st = mhla_plan_tuning(plan, text, sizeof text);
        mhla_plan_destroy(plan);
    }
    if (st != MHLA_OK)
        return st;
    double most = -1.0;
    static const char unit[] = " MiB read again";
    for (const char *p = strstr(text, unit); p; p = strstr(p + 1, unit)) {
        const char *num = p;
        while (num > text && (num[-1] == '.' || (num[-1] >= '0' && num[-1] <= '9')))
            --num;
        const double v = num < p ? atof(num) : -1.0;
        most = v > most ? v : most;
    }
    /* printed to a tenth: the next whole MiB over it plus that rounding */
    *mb = most > 0.0 ? (int)ceil(most + 0.05) : 0;
    return MHLA_OK;
}

/* One stage's coordinate descent from *best (*changed set when it kept a change). Returns 0, 1 when
 * the budget ran out, or an exit code (negated) when the starting point itself fails. */
static int search_stage(tuner *t, const tune_shape *s, const tune_stage *stage, tune_spec *best, int *changed)
{
    mhla_status st;
    double base[4];
    int wrong = 0;
    const mhla_config cfg = stage_config(t, s, stage->kind);
    char text[1024];
    if (cli_now_ms() + 3e3 > t->deadline)
        return 1;
    if ((st = measure(t, best, &cfg, stage->kind, base, &wrong)) != MHLA_OK)
        return -cli_fail(cli_exit_code(st), "tune: %s: %s", stage->name, mhla_context_message(t->ctx));
    if (wrong)
        return -cli_fail(CLI_RUNTIME, "tune: %s: the starting tiles fail the reference check on %s (run mhla selftest)",
                         stage->name, mhla_context_device_name(t->ctx));
    const int obj = t->stage_clock ? stage->objective : 3;
    printf("[%6.1f s] %lldx%lld %-7s start: %.3f ms\n", elapsed_s(t), (long long)s->dk, (long long)s->dv,
           stage->name, base[obj]);
    for (const tune_field *f = stage->fields; f->name; ++f) {
        if ((st = effective(t, best, text, sizeof text)) != MHLA_OK)
            return -cli_fail(cli_exit_code(st), "tune: %s", mhla_context_message(t->ctx));
        const int current = field_in(text, f->name);
        for (int i = 0; i < f->count; ++i) {
            if (f->values[i] == current)
                continue;
            if (cli_now_ms() + 3e3 > t->deadline) /* a candidate takes a second or two, its compile included */
                return 1;
            /* a one-launch bound under this shape's M x N leaves its plan as it is: nothing to time */
            if (strcmp(f->name, "tl_one") == 0 && f->values[i] > 0 &&
                (int64_t)f->values[i] < (int64_t)cfg.block_t * cfg.seq_t)
                continue;
            tune_spec trial = *best;
            spec_set(&trial, f->name, f->values[i]);
            /* A value the device's caps or this build turn back into the current one (a vector
             * width past the device's; CLBlast's GEMMs in a build without CLBlast) would time the
             * same kernels again. */
            char eff[1024] = "";
            if (effective(t, &trial, eff, sizeof eff) == MHLA_OK && field_in(eff, f->name) == current)
                continue;
            char label[64];
            snprintf(label, sizeof label, "%s=%d", f->name, f->values[i]);
            if ((strcmp(f->name, "tl_fuse") == 0 || strcmp(f->name, "bt_fuse") == 0) && f->values[i] > 0) {
                int need = 0;
                if (fuse_need_mb(t, &trial, &cfg, stage->kind, &need) == MHLA_OK &&
                    need > field_in(eff, "fuse_mb")) {
                    spec_set(&trial, "fuse_mb", need);
                    snprintf(label, sizeof label, "%s=%d,fuse_mb=%d", f->name, f->values[i], need);
                }
            }
            try_candidate(t, s, stage, &cfg, obj, &trial, label, best, base, changed);
        }
    }
    return 0;
}

/* The fields of mhla_context_tuning()'s text after its origin: two specs with the same text build
 * the same kernels. */
static const char *fields_of(const char *text)
{
    const char *p = strstr(text, ": vec=");
    return p ? p + 2 : text;
}

#define JOINT_SEEN 160

/* The joint pass of one stage: the register tile's rows x vectors (4 to 16 accumulator vectors:
 * fewer starve the multiply-adds, more than 16 spill on every CPU and GPU we know) x its vector
 * width (the current one, then half) x the work-group size (the current one, then twice), from
 * the best so far; what the one-field pass cannot reach when a better tile needs two fields to
 * move at once (4 x 2 from 8 x 1). Candidates with the same effective tuning as one already timed,
 * or wider than the head dimensions (cut down to a tile of the grid), are skipped. Returns 0, 1 when
 * the budget ran out, or a negated exit code. */
static int joint_stage(tuner *t, const tune_shape *s, const tune_stage *stage, tune_spec *best, int *changed)
{
    if (!stage->rows_field)
        return 0;
    mhla_status st;
    double base[4];
    int wrong = 0;
    const mhla_config cfg = stage_config(t, s, stage->kind);
    char text[1024];
    static char seen[JOINT_SEEN][1024];
    int nseen = 0;
    if (cli_now_ms() + 3e3 > t->deadline)
        return 1;
    if ((st = measure(t, best, &cfg, stage->kind, base, &wrong)) != MHLA_OK || wrong)
        return -cli_fail(wrong ? CLI_RUNTIME : cli_exit_code(st), "tune: %s: %s", stage->name,
                         wrong ? "the best tiles so far fail the reference check" : mhla_context_message(t->ctx));
    if ((st = effective(t, best, text, sizeof text)) != MHLA_OK)
        return -cli_fail(cli_exit_code(st), "tune: %s", mhla_context_message(t->ctx));
    snprintf(seen[nseen++], sizeof seen[0], "%s", fields_of(text));
    const int obj = t->stage_clock ? stage->objective : 3;
    const int ve0 = field_in(text, stage->ve_field), wg0 = field_in(text, "wg");
    printf("[%6.1f s] %lldx%lld %-7s joint pass (%s x %s x %s x wg): %.3f ms\n", elapsed_s(t), (long long)s->dk,
           (long long)s->dv, stage->name, stage->rows_field, stage->nv_field, stage->ve_field, base[obj]);
    static const int nv_values[] = {1, 2, 4, 8};
    for (int vi = 0; vi < 2; ++vi) {
        const int ve = vi ? ve0 / 2 : ve0;
        if (ve < 1)
            continue;
        for (int wi = 0; wi < 2; ++wi) {
            const int wg = wi ? wg0 * 2 : wg0;
            for (int ri = 0; ri < stage->row_count; ++ri)
                for (int ni = 0; ni < 4; ++ni) {
                    const int rows = stage->row_values[ri], nv = nv_values[ni];
                    if (rows * nv < 4 || rows * nv > 16 || (stage->rows_in_dk && rows > s->dk) ||
                        (stage->cols_in_dv && ve * nv > s->dv))
                        continue;
                    tune_spec trial = *best;
                    spec_set(&trial, stage->rows_field, rows);
                    spec_set(&trial, stage->nv_field, nv);
                    spec_set(&trial, stage->ve_field, ve);
                    spec_set(&trial, "wg", wg);
                    if (effective(t, &trial, text, sizeof text) != MHLA_OK)
                        continue;
                    int dup = 0;
                    for (int k = 0; k < nseen && !dup; ++k)
                        dup = strcmp(seen[k], fields_of(text)) == 0;
                    if (dup)
                        continue;
                    if (nseen < JOINT_SEEN)
                        snprintf(seen[nseen++], sizeof seen[0], "%s", fields_of(text));
                    if (cli_now_ms() + 3e3 > t->deadline)
                        return 1;
                    char label[96];
                    snprintf(label, sizeof label, "%s=%d,%s=%d,%s=%d,wg=%d", stage->rows_field, rows,
                             stage->nv_field, nv, stage->ve_field, ve, wg);
                    try_candidate(t, s, stage, &cfg, obj, &trial, label, best, base, changed);
                }
        }
    }
    return 0;
}

/* The kind of the stage the field `name` belongs to where no forward reads it: 3 the causal backward,
 * 4 the non-causal one, 5 decode; 0 for a forward field. */
static int field_kind(const char *name)
{
    for (size_t k = 0; k < STAGE_COUNT; ++k)
        for (const tune_field *f = stages[k].fields; stages[k].kind >= 3 && f->name; ++f)
            if (strcmp(name, f->name) == 0)
                return stages[k].kind;
    return 0;
}

/* The backward kind (3, 4) of the field `name`, or 0. */
static int backward_kind(const char *name)
{
    const int k = field_kind(name);
    return k == 3 || k == 4 ? k : 0;
}

/* How many of `spec`'s fields are of the kind `want` (0 the forward's, 3 or 4 the backward's, 5 the
 * decoder's). */
static int count_fields(const tune_spec *spec, int want)
{
    int n = 0;
    for (int i = 0; i < spec->count; ++i)
        n += field_kind(spec->name[i]) == want;
    return n;
}

/* `spec` without the decoder's fields. */
static void drop_decode_fields(tune_spec *spec)
{
    int kept = 0;
    for (int i = 0; i < spec->count; ++i)
        if (field_kind(spec->name[i]) != 5) {
            memmove(spec->name[kept], spec->name[i], sizeof spec->name[0]);
            spec->value[kept++] = spec->value[i];
        }
    spec->count = kept;
}

/* The backward `spec` is confirmed on: the non-causal one where it changed a tiled-backward field
 * (those read nothing else), else the causal one (0 without backward fields). */
static int confirm_kind(const tune_spec *spec)
{
    int kind = 0;
    for (int i = 0; i < spec->count; ++i) {
        const int k = backward_kind(spec->name[i]);
        kind = k == 4 || kind == 4 ? 4 : k ? k : kind;
    }
    return kind;
}

/* The problems of measure() kinds kinds[0..n) (n <= 2: the forward and a backward, or decode alone)
 * with the device's built-in row (not --row's: an entry replaces the device's own) and with `best`,
 * timed alternately round by round: medians into out[k][0] (built-in) and out[k][1] (best); a run
 * that fails the reference check counts as infinitely slow. */
static mhla_status confirm(tuner *t, const tune_shape *s, const tune_spec *best, const int *kinds, int n,
                           double out[][2])
{
    mhla_status st = MHLA_OK;
    tune_spec row;
    memset(&row, 0, sizeof row);
    snprintf(row.row, sizeof row.row, "%s", t->device_row);
    double times[2][2][CONFIRM_ROUNDS], ms[4]; /* [kind][built-in, best][round] */
    int wrong = 0;
    const mhla_config cfg[2] = {stage_config(t, s, kinds[0]), stage_config(t, s, n > 1 ? kinds[1] : kinds[0])};
    for (int r = 0; r < CONFIRM_ROUNDS && st == MHLA_OK; ++r)
        for (int which = 0; which < n && st == MHLA_OK; ++which)
            for (int tuned = 0; tuned < 2 && st == MHLA_OK; ++tuned)
                if ((st = measure(t, tuned ? best : &row, &cfg[which], kinds[which], ms, &wrong)) == MHLA_OK)
                    times[which][tuned][r] = wrong ? INFINITY : ms[3];
    for (int which = 0; which < n && st == MHLA_OK; ++which)
        for (int tuned = 0; tuned < 2; ++tuned)
            out[which][tuned] = median(times[which][tuned], CONFIRM_ROUNDS);
    return st;
}

/* Why the confirmed timings (fwd[], bwd[]: built-in, tuned; bwd only when `backward`, the backward
 * confirmed on: 3 causal, 4 non-causal) do not earn the entry its place, or NULL to store it:
 * faster over the forward, or over that backward when a backward field changed, and the other not
 * slower by more than the margin (a training step runs both, and a loss within the noise is none).
 * An entry of backward fields alone must be faster over the backward: its forward builds the same
 * kernels, and any difference is noise. */
static const char *not_stored_why(const double fwd[2], const double bwd[2], int backward, int forward_fields,
                                  char *buf, size_t size)
{
    const int fwd_faster = fwd[1] < fwd[0], fwd_ok = fwd[1] <= fwd[0] * (1.0 + MARGIN);
    const char *which = backward == 4 ? "backward" : "causal backward";
    if (!backward)
        return fwd_faster ? NULL : "not faster over the whole forward";
    const int bwd_faster = bwd[1] < bwd[0], bwd_ok = bwd[1] <= bwd[0] * (1.0 + MARGIN);
    if (!forward_fields) {
        if (bwd_faster)
            return NULL;
        snprintf(buf, size, "backward fields only, and not faster over the %s", which);
    } else if ((fwd_faster && bwd_ok) || (bwd_faster && fwd_ok)) {
        return NULL;
    } else if (!fwd_faster && !bwd_faster) {
        snprintf(buf, size, "faster over neither the forward nor the %s", which);
    } else if (fwd_faster) {
        snprintf(buf, size, "the forward is faster, but the %s %.1f%% slower (more than %.0f%%)", which,
                 100.0 * (bwd[1] - bwd[0]) / bwd[0], MARGIN * 100);
    } else {
        snprintf(buf, size, "the %s is faster, but the forward %.1f%% slower (more than %.0f%%)", which,
                 100.0 * (fwd[1] - fwd[0]) / fwd[0], MARGIN * 100);
    }
    return buf;
}

/* The entry as a row of host/tune/tuning_rows.c's table, every field written out. */
static void print_export(tuner *t, const char *device_spec, const tune_shape *s, const tune_spec *best,
                         const char *note)
{
    char text[1024];
    if (effective(t, best, text, sizeof text) != MHLA_OK)
        return;
    mhla_device_info info;
    size_t index = 0, count = 0;
    memset(&info, 0, sizeof info);
    if (mhla_device_selected(device_spec, &index) == MHLA_OK && mhla_device_list(NULL, 0, &count) == MHLA_OK) {
        mhla_device_info *all = calloc(count ? count : 1, sizeof *all);
        if (all && mhla_device_list(all, count, &count) == MHLA_OK && index < count)
            info = all[index];
        free(all);
    }
    /* A GPU whose vendor has a row of its own (the library matched it: "built-in row 'nvidia'...")
     * gets that row's fields: what one device of a vendor was tuned to is the best start for its
     * others. Any other device, a row for this device name alone. */
    char row[32] = "";
    if (info.is_gpu && sscanf(text, "built-in row '%31[a-z-]'", row) == 1 &&
        (strcmp(row, "gpu") == 0 || strcmp(row, "default") == 0))
        row[0] = '\0';
    printf("/* %s, driver %s: mhla tune, %lldx%lld: %s */\n", mhla_context_device_name(t->ctx), info.driver_version,
           (long long)s->dk, (long long)s->dv, note);
    if (*row)
        printf("/* the fields of the '%s' row (its vendor's GPUs) */\n {", row);
    else
        printf("{\"tuned\", NULL, \"%s\", %s, %s,\n {", mhla_context_device_name(t->ctx),
               info.is_gpu ? "CL_DEVICE_TYPE_GPU" : "CL_DEVICE_TYPE_CPU", info.is_gpu ? "ROW_GPU" : "ROW_AS_WRITTEN");
    /* Every field as mhla_context_tuning() prints them ("ORIGIN: vec=16 sum_rd=8,sum_ve=16,..."),
     * in its order: the library's one list, not a copy of it here. */
    const char *p = strstr(text, ": vec=");
    p = p ? p + 2 : text + strlen(text);
    char name[32];
    int value = 0, used = 0;
    for (int i = 0; sscanf(p, "%31[a-z_]=%d%n", name, &value, &used) == 2; ++i) {
        printf("%s.%s = %d", i == 0 ? "" : i % 8 ? ", " : ",\n  ", name, value);
        p += used;
        p += *p == ' ' || *p == ',';
    }
    printf(*row ? "}\n" : "}},\n");
}

/* Runs one search (search_stage or joint_stage) over every stage in order until the budget runs
 * out (*out_of_time); returns CLI_OK or the exit code of a stage whose starting point failed. */
static int each_stage(tuner *t, const tune_shape *s,
                      int (*search)(tuner *, const tune_shape *, const tune_stage *, tune_spec *, int *),
                      tune_spec *best, int *changed, int *out_of_time)
{
    for (size_t k = 0; k < STAGE_COUNT && !*out_of_time; ++k) {
        if (!(t->stages >> k & 1u))
            continue;
        const int r = search(t, s, &stages[k], best, changed);
        if (r < 0)
            return -r;
        *out_of_time = r == 1;
    }
    return CLI_OK;
}

/* "64x64@16384:64" (DV, M optional) into s. */
static int parse_shape(const char *text, tune_shape *s)
{
    long long dk = 0, dv = 0, n = 0, m = 0;
    int used = 0;
    if (sscanf(text, "%lld%n", &dk, &used) != 1)
        return 0;
    text += used;
    dv = dk;
    if (*text == 'x' && sscanf(text + 1, "%lld%n", &dv, &used) == 1)
        text += 1 + used;
    if (*text != '@' || sscanf(text + 1, "%lld%n", &n, &used) != 1)
        return 0;
    text += 1 + used;
    if (*text == ':' && sscanf(text + 1, "%lld%n", &m, &used) == 1)
        text += 1 + used;
    if (*text || dk < 1 || dk > MHLA_MAX_HEAD_DIM || dv < 1 || dv > MHLA_MAX_HEAD_DIM || n < 256 || n > (1 << 24) ||
        m < 0 || (m && n % m))
        return 0;
    if (!m) /* the paper's rule: the largest M with M^2 <= N, dividing N, blocks of at least 256 tokens */
        for (long long c = 1; c * c <= n; ++c)
            if (n % c == 0 && n / c >= 256)
                m = c;
    s->dk = dk, s->dv = dv, s->n = n, s->m = m;
    return 1;
}

int cmd_tune(int argc, char **argv)
{
    const char *cmd = "tune";
    int help_shown = 0, rc;
    enum { O_DEVICE, O_BUDGET, O_SHAPES, O_HEADS, O_STAGES, O_ROW, O_EXPORT, O_DRY, O_COUNT };
    cli_option o[O_COUNT] = {
        [O_DEVICE] = {"--device", "SPEC", NULL},   [O_BUDGET] = {"--budget", "SECONDS", NULL},
        [O_SHAPES] = {"--shapes", "LIST", NULL},   [O_HEADS] = {"--heads", "H", NULL},
        [O_STAGES] = {"--stages", "LIST", NULL},   [O_EXPORT] = {"--export", NULL, NULL},
        [O_DRY] = {"--dry-run", NULL, NULL},       [O_ROW] = {"--row", "NAME", NULL},
    };
    if ((rc = args_parse(cmd, help, o, O_COUNT, argc, argv, &help_shown)) != 0 || help_shown)
        return rc;
    int64_t budget = 120, heads = 8;
    if (o[O_BUDGET].value && (rc = args_int(cmd, &o[O_BUDGET], 5, 86400, &budget)) != 0)
        return rc;
    if (o[O_HEADS].value && (rc = args_int(cmd, &o[O_HEADS], 1, 1024, &heads)) != 0)
        return rc;
    tune_shape shapes[MAX_SHAPES];
    size_t nshapes = 0;
    char list[512];
    snprintf(list, sizeof list, "%s", o[O_SHAPES].value ? o[O_SHAPES].value : "64x64@16384");
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (nshapes == MAX_SHAPES || !parse_shape(tok, &shapes[nshapes]))
            return cli_usage(cmd, "--shapes %s: '%s' is not DK[xDV]@N[:M] (head dims 1..%d, N >= 256, M dividing N; "
                                  "at most %d shapes)",
                             o[O_SHAPES].value, tok, MHLA_MAX_HEAD_DIM, MAX_SHAPES);
        ++nshapes;
    }
    unsigned stage_mask = o[O_STAGES].value ? 0u : (1u << STAGE_COUNT) - 1u;
    if (o[O_STAGES].value) {
        snprintf(list, sizeof list, "%s", o[O_STAGES].value);
        for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
            size_t k = 0;
            while (k < STAGE_COUNT && strcmp(stages[k].name, tok) != 0)
                ++k;
            if (k == STAGE_COUNT)
                return cli_usage(cmd,
                                 "--stages %s: unknown stage '%s' (tiled, summary, output, mixing, causal, softmax, "
                                 "backward, tiled-backward, tiled-causal, decode)",
                                 o[O_STAGES].value, tok);
            stage_mask |= 1u << k;
        }
        if (!stage_mask)
            return cli_usage(cmd, "--stages '%s' names no stage", o[O_STAGES].value);
    }
    tuner t;
    memset(&t, 0, sizeof t);
    t.heads = heads;
    t.stages = stage_mask;
    t.stage_clock = 1;
    mhla_status st = mhla_context_create(o[O_DEVICE].value, &t.ctx);
    if (st != MHLA_OK)
        return o[O_DEVICE].value
                   ? cli_fail(cli_exit_code(st), "--device %s: %s", o[O_DEVICE].value, mhla_last_message())
                   : cli_fail(cli_exit_code(st), "tune: %s", mhla_last_message());
    char db[4200] = "(no cache folder: nothing is stored)", text[1024];
    mhla_tuning_db_path(t.ctx, db, sizeof db);
    tune_spec start;
    memset(&start, 0, sizeof start);
    if ((st = mhla_context_tuning(t.ctx, text, sizeof text)) != MHLA_OK) {
        rc = cli_fail(cli_exit_code(st), "tune: %s", mhla_context_message(t.ctx));
        goto done;
    }
    /* Start from the device's built-in row, whatever a tuned entry or MHLA_TUNING says. */
    const char *q = strstr(text, "row '");
    if (getenv("MHLA_TUNING") && *getenv("MHLA_TUNING")) {
        rc = cli_fail(CLI_USAGE, "tune: MHLA_TUNING is set (%s): unset it, the search starts from the built-in row",
                      getenv("MHLA_TUNING"));
        goto done;
    }
    if (!q || sscanf(q + 5, "%31[^']", start.row) != 1) {
        rc = cli_fail(CLI_RUNTIME, "tune: cannot tell the device's tuning row from '%s'", text);
        goto done;
    }
    snprintf(t.device_row, sizeof t.device_row, "%s", start.row);
    const char *from = o[O_ROW].value;
    if (from) { /* a row's name alone: "gpu,sum_rd=2" would start from fields nobody searched */
        char spec[64];
        const int named = strlen(from) < sizeof start.row &&
                          from[strspn(from, "abcdefghijklmnopqrstuvwxyz0123456789-")] == '\0';
        snprintf(spec, sizeof spec, "row=%s", named ? from : "");
        if (!named || (st = mhla_context_set_tuning(t.ctx, spec)) != MHLA_OK) {
            rc = cli_fail(CLI_USAGE, "--row %s: %s", from,
                          named ? mhla_context_message(t.ctx)
                                : "not a built-in row's name (gpu, nvidia, mobile, cpu, ...)");
            goto done;
        }
        mhla_context_set_tuning(t.ctx, NULL);
        snprintf(start.row, sizeof start.row, "%s", from);
    }
    t.t0 = cli_now_ms();
    t.deadline = t.t0 + (double)budget * 1e3;
    if (strcmp(start.row, t.device_row) != 0)
        printf("tune: %s, row '%s' (--row; the device's built-in row: '%s'), budget %lld s, %zu shape(s), H=%lld\n",
               mhla_context_device_name(t.ctx), start.row, t.device_row, (long long)budget, nshapes, (long long)heads);
    else
        printf("tune: %s, built-in row '%s', budget %lld s, %zu shape(s), H=%lld\n", mhla_context_device_name(t.ctx),
               start.row, (long long)budget, nshapes, (long long)heads);
    printf("database: %s\n", db);
    fflush(stdout);
    rc = CLI_OK;
    for (size_t i = 0; i < nshapes && rc == CLI_OK; ++i) {
        tune_shape *s = &shapes[i];
        tune_spec best = start;
        int out_of_time = 0;
        printf("shape %lldx%lld: N=%lld M=%lld (causal and backward: N=%lld, chunks of 64; softmax: N=2048)\n",
               (long long)s->dk, (long long)s->dv, (long long)s->n, (long long)s->m,
               (long long)(s->n / 4 > 256 ? s->n / 4 : 256));
        /* Passes over every stage while the last one changed something (a stage's best can move
         * once another stage's changed), at most three, within the budget. */
        for (int pass = 0, changed = 1; pass < 3 && changed && !out_of_time && rc == CLI_OK; ++pass) {
            changed = 0;
            if (pass > 0)
                printf("[%6.1f s] pass %d\n", elapsed_s(&t), pass + 1);
            rc = each_stage(&t, s, search_stage, &best, &changed, &out_of_time);
        }
        /* Then the joint pass over each stage's register tile, vector width and work-group size. */
        if (!out_of_time && rc == CLI_OK) {
            int changed = 0;
            printf("[%6.1f s] joint pass\n", elapsed_s(&t));
            rc = each_stage(&t, s, joint_stage, &best, &changed, &out_of_time);
        }
        if (rc != CLI_OK)
            break;
        if (out_of_time)
            printf("[%6.1f s] budget reached: the search stops here\n", elapsed_s(&t));
        char spec[1024], note[512], decode_note[96] = "";
        double times[2][2] = {{0, 0}, {0, 0}}, dec[1][2] = {{0, 0}};
        double *fwd = times[0], *bwd = times[1];
        /* The decoder's fields first: kept only where its steps are faster with them (no forward
         * or backward reads them). */
        if (count_fields(&best, 5)) {
            const int decode_kind = 5;
            if ((st = confirm(&t, s, &best, &decode_kind, 1, dec)) != MHLA_OK) {
                rc = cli_fail(cli_exit_code(st), "tune: %s", mhla_context_message(t.ctx));
                break;
            }
            const int faster = dec[0][1] < dec[0][0];
            printf("      decode %.4f ms a token with the built-in row, %.4f ms tuned (%+.1f%%, medians of %d "
                   "alternate runs; N=%lld)%s\n",
                   dec[0][0], dec[0][1], 100.0 * (dec[0][1] - dec[0][0]) / dec[0][0], CONFIRM_ROUNDS,
                   (long long)stage_config(&t, s, 5).seq_t, faster ? "" : ": the decoder's fields are left out");
            if (faster)
                snprintf(decode_note, sizeof decode_note, ", decode %.4f -> %.4f ms a token", dec[0][0], dec[0][1]);
            else
                drop_decode_fields(&best);
        }
        /* An entry from --row's row names it (the library lays an entry over the device's own row),
         * and is timed over the forward even with no field changed. */
        const int row_switch = strcmp(best.row, t.device_row) != 0;
        spec_text(&best, row_switch, spec, sizeof spec);
        if (!best.count && !row_switch) {
            printf("tune: %lldx%lld: nothing beats the built-in row by %.0f%%: nothing stored\n", (long long)s->dk,
                   (long long)s->dv, MARGIN * 100);
            continue;
        }
        const int backward = confirm_kind(&best); /* 0, or the backward to confirm on (3, 4) */
        /* decoder fields alone: their confirmation above is the entry's */
        const int decode_only = count_fields(&best, 0) == 0 && !backward && !row_switch;
        const int kinds[2] = {0, backward};
        if (!decode_only && (st = confirm(&t, s, &best, kinds, 1 + !!backward, times)) != MHLA_OK) {
            rc = cli_fail(cli_exit_code(st), "tune: %s", mhla_context_message(t.ctx));
            break;
        }
        const time_t now = time(NULL);
        char day[16], why_buf[160];
        strftime(day, sizeof day, "%Y-%m-%d", gmtime(&now));
        int len = snprintf(note, sizeof note, "tuned %s, N=%lld M=%lld H=%lld", day, (long long)s->n, (long long)s->m,
                           (long long)heads);
        if (!decode_only && len > 0 && (size_t)len < sizeof note)
            len += snprintf(note + len, sizeof note - (size_t)len, ": forward %.3f -> %.3f ms", fwd[0], fwd[1]);
        if (backward && len > 0 && (size_t)len < sizeof note)
            len += snprintf(note + len, sizeof note - (size_t)len, ", %s %.3f -> %.3f ms",
                            backward == 4 ? "backward" : "causal backward", bwd[0], bwd[1]);
        if (len > 0 && (size_t)len < sizeof note)
            snprintf(note + len, sizeof note - (size_t)len, "%s%s", decode_only ? ":" : "",
                     decode_only ? decode_note + 1 : decode_note);
        printf("tune: %lldx%lld: %s\n", (long long)s->dk, (long long)s->dv, spec);
        if (!decode_only)
            printf("      forward %.3f ms with the built-in row, %.3f ms tuned (%+.1f%%, medians of %d alternate "
                   "runs)\n",
                   fwd[0], fwd[1], 100.0 * (fwd[1] - fwd[0]) / fwd[0], CONFIRM_ROUNDS);
        if (backward)
            printf("      backward %.3f ms with the built-in row, %.3f ms tuned (%+.1f%%, medians of %d alternate "
                   "runs; %s, N=%lld)\n",
                   bwd[0], bwd[1], 100.0 * (bwd[1] - bwd[0]) / bwd[0], CONFIRM_ROUNDS,
                   backward == 4 ? "non-causal" : "causal", (long long)stage_config(&t, s, backward).seq_t);
        const char *why =
            decode_only ? NULL : not_stored_why(fwd, bwd, backward, count_fields(&best, 0) > 0 || row_switch, why_buf,
                                                  sizeof why_buf);
        if (why) {
            printf("tune: %lldx%lld: %s: nothing stored\n", (long long)s->dk, (long long)s->dv, why);
            continue;
        }
        if (o[O_EXPORT].value)
            print_export(&t, o[O_DEVICE].value, s, &best, note);
        if (o[O_DRY].value)
            continue;
        if ((st = mhla_tuning_db_put(t.ctx, s->dk, s->dv, spec, note)) != MHLA_OK) {
            rc = cli_fail(cli_exit_code(st), "tune: %s", mhla_context_message(t.ctx));
            break;
        }
        printf("tune: stored in %s\n", db);
    }
    printf("tune: %d candidates timed, %d discarded, %.1f s\n", t.candidates, t.discarded, elapsed_s(&t));
done:
    mhla_context_destroy(t.ctx);
    return rc;
}
