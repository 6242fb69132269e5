/* mhla-bench's command line: defaults (the full sweep, or the README's --quick one), list options,
 * and the usage text. */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: mhla-bench [options]\n"
    "       mhla-bench --compare A.json B.json\n"
    "\n"
    "Benchmarks MHLA against linear attention (MHLA with M = 1) and softmax attention on one OpenCL\n"
    "device, after measuring the device's peak multiply-add throughput and copy bandwidth; with\n"
    "OpenBLAS, also against MHLA computed on the host with SGEMM calls (blas) and OpenBLAS's SGEMM\n"
    "rate (sgemm, the reference of the %sgemm column).\n"
    "\n"
    "sweep (lists are comma-separated; giving only --n or only --image drops the other sweep):\n"
    "  --n LIST          1D sequence lengths (default 1024,2048,...,65536; 'none' for no 1D rows)\n"
    "  --image LIST      2D images, SIDE or HxW tokens (default 32,64,128,256; 'none' for none)\n"
    "  --heads LIST      heads H (default 8)\n"
    "  --dims LIST       head dims, D or DKxDV (default 64)\n"
    "  --m LIST          MHLA block counts M (default: M^2 <= N with blocks of >= 256 tokens)\n"
    "  --batch B         batch size (default 1)\n"
    "  --layout L        bnhd or bhnd (default bnhd)\n"
    "  --normalizer N    paper, official or none: the non-causal self-attention rows' (mhla,\n"
    "                    linear, their -bwd and -gqa rows; default paper). Cross-attention, causal\n"
    "                    and decode rows keep theirs (paper; none)\n"
    "  --ops LIST        mhla,linear,softmax,mhla-causal,decode,blas,sgemm,mhla-bwd,linear-bwd,\n"
    "                    mhla-causal-bwd,mhla-bwd-saved,mhla-causal-bwd-saved,mhla-gqa,mhla-gqa-bwd,\n"
    "                    decode-gqa,mhla-cross (default all; blas and sgemm only in a build with\n"
    "                    OpenBLAS, else their rows are skipped). *-gqa: H_kv = H/4 key/value heads;\n"
    "                    mhla-cross: each image's blocks attending to 256 condition tokens in 4 blocks\n"
    "  --chunk LIST      causal chunk sizes C of the mhla-causal(-bwd) and decode rows (default\n"
    "                    " MHLA_STRINGIFY(MHLA_DEFAULT_CHUNK) ", the library's; other chunks when given)\n"
    "  --decode-context LIST\n"
    "                    decode rows: tokens of context before the timed steps (default\n"
    "                    1024,8192,32768; the --n list when --n is given; 'none' for none)\n"
    "timing:\n"
    "  --target-ms MS    measured time per row, about (default 1000; --quick 150)\n"
    "  --min-iters N     at least N timed runs per row (default 5; --quick 3)\n"
    "  --max-iters N     at most N timed runs per row (default 1000)\n"
    "  --warmup N        untimed runs first (default 1)\n"
    "  --max-row-s S     estimate, not run, a row that would take longer (default 120; --quick 45)\n"
    "  --max-total-s S   ... or longer than what is left of S for the sweep (default none; --quick 90)\n"
    "  --quick           N = 1024,4096,16384, a 64x64 image, short timing, rows within 45 s and the\n"
    "                    sweep within 90 s: under two minutes on a 2-core CPU with PoCL, first\n"
    "                    compiles included (the README's first command)\n"
    "output:\n"
    "  --json FILE       everything: device, driver, versions, peak, parameters, rows\n"
    "  --csv FILE        one line per row, with the device and parameters on each\n"
    "  --plot FILE.svg   time vs N, log-log, mhla/linear/softmax, crossover marked\n"
    "  --quiet           no progress line on stderr\n"
    "  --kernels         after each row's timed runs, one more with every kernel's device time\n"
    "                    recorded (mhla_context_profile_kernels): a table per row after the main\n"
    "                    one, and each JSON row's \"kernels\"\n"
    "  --no-stage-marks  the forwards without the marker events between their stages\n"
    "                    (mhla_context_profile_stages(ctx, 0)), as a context without profiling runs\n"
    "                    them: no sum/mix/out split\n"
    "other:\n"
    "  --device SPEC     as MHLA_DEVICE: \"P:D\", an index, or a name substring\n"
    "  --gate G          what a timed run waits behind until all its commands are enqueued: event (a\n"
    "                    user event), kernel (a single work-item kernel of about 1 ms), auto (default:\n"
    "                    kernel on GPUs, event elsewhere)\n"
    "  --seed N          random inputs' seed (default 1)\n"
    "  --compare A B     per-row ratios of two --json files (B over A)\n"
    "  --help\n";

static void set_defaults(bench_options *o, int quick)
{
    memset(o, 0, sizeof *o);
    o->quick = quick;
    static const int64_t full_n[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536};
    static const int64_t quick_n[] = {1024, 4096, 16384};
    static const int64_t full_image[] = {32, 64, 128, 256};
    /* Decoding's claim is a per-token time flat in the context: 1k to 32k tokens show it, and cost
     * a few seconds even with --quick (one prefill each, then short runs of C steps). */
    static const int64_t decode_ctx[] = {1024, 8192, 32768};
    const int64_t *n = quick ? quick_n : full_n;
    o->n_count = quick ? 3 : 7;
    memcpy(o->n, n, o->n_count * sizeof *n);
    o->image_count = quick ? 1 : 4;
    for (size_t i = 0; i < o->image_count; ++i)
        o->image_h[i] = o->image_w[i] = quick ? 64 : full_image[i];
    o->decode_ctx_count = 3;
    memcpy(o->decode_ctx, decode_ctx, sizeof decode_ctx);
    o->chunk[0] = MHLA_DEFAULT_CHUNK; /* C is part of the model: the library's default, as everywhere */
    o->chunk_count = 1;
    o->heads[0] = 8;
    o->heads_count = 1;
    o->dk[0] = o->dv[0] = 64;
    o->dims_count = 1;
    o->batch = 1;
    o->layout = MHLA_LAYOUT_BNHD;
    o->normalizer = MHLA_NORMALIZER_PAPER;
    o->ops = (1u << BENCH_OP_COUNT) - 1;
    if (!bench_blas_available()) /* asked for by name, their rows say why they did not run */
        o->ops &= ~((1u << BENCH_OP_BLAS) | (1u << BENCH_OP_SGEMM));
    o->target_ms = quick ? 150.0 : 1000.0;
    o->min_iters = quick ? 3 : 5;
    o->max_iters = 1000;
    o->warmup = 1;
    o->max_row_s = quick ? 45.0 : 120.0;
    o->max_total_s = quick ? 90.0 : 0.0;
    o->seed = 1;
}

/* A positive integer, or a pair "AxB" of them when b is not NULL (a single value gives a = b). */
static int parse_size(const char *s, int64_t *a, int64_t *b)
{
    char *end = NULL;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || x < 1)
        return 0;
    *a = x;
    if (b) {
        *b = x;
        if (*end == 'x') {
            const char *rest = end + 1;
            x = strtoll(rest, &end, 10);
            if (errno || end == rest || x < 1)
                return 0;
            *b = x;
        }
    }
    return *end == '\0';
}

/* Comma-separated sizes into a (and b for pairs); "none" is the empty list where allowed. */
static int parse_list(const char *arg, int64_t *a, int64_t *b, size_t *count, int allow_none, char *err,
                      size_t err_size, const char *opt)
{
    char buf[1024];
    *count = 0;
    if (allow_none && strcmp(arg, "none") == 0)
        return 0;
    if (strlen(arg) >= sizeof buf) {
        snprintf(err, err_size, "%s: list too long", opt);
        return -1;
    }
    strcpy(buf, arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*count == BENCH_MAX_LIST) {
            snprintf(err, err_size, "%s: more than %d entries", opt, BENCH_MAX_LIST);
            return -1;
        }
        if (!parse_size(tok, &a[*count], b ? &b[*count] : NULL)) {
            snprintf(err, err_size, "%s: '%s' is not a positive integer%s", opt, tok, b ? " or AxB pair" : "");
            return -1;
        }
        ++*count;
    }
    if (*count == 0) {
        snprintf(err, err_size, "%s: empty list", opt);
        return -1;
    }
    return 0;
}

static int parse_ops(const char *arg, unsigned *ops, char *err, size_t err_size)
{
    char buf[256];
    *ops = 0;
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const bench_op_id id = bench_op_find(tok);
        if (id == BENCH_OP_COUNT) {
            snprintf(err, err_size, "--ops: unknown op '%s' (mhla, linear, softmax, mhla-causal, decode, blas, sgemm, "
                     "mhla-bwd, linear-bwd, mhla-causal-bwd, mhla-bwd-saved, mhla-causal-bwd-saved, mhla-gqa, "
                     "mhla-gqa-bwd, decode-gqa, mhla-cross)",
                     tok);
            return -1;
        }
        *ops |= 1u << id;
    }
    if (!*ops) {
        snprintf(err, err_size, "--ops: empty list");
        return -1;
    }
    return 0;
}

static int parse_number(const char *arg, double lo, double *out)
{
    char *end = NULL;
    errno = 0;
    const double x = strtod(arg, &end);
    if (errno || end == arg || *end || !(x >= lo))
        return 0;
    *out = x;
    return 1;
}

static int parse_int(const char *arg, int lo, int *out)
{
    double x = 0.0;
    if (!parse_number(arg, lo, &x) || x != (double)(int)x)
        return 0;
    *out = (int)x;
    return 1;
}

int bench_options_parse(int argc, char **argv, bench_options *o, FILE *out, char *err, size_t err_size)
{
    int quick = 0, n_given = 0, image_given = 0, decode_given = 0;
    for (int i = 1; i < argc; ++i)
        quick |= strcmp(argv[i], "--quick") == 0;
    set_defaults(o, quick);
    for (int i = 1; i < argc; ++i) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            fputs(usage, out);
            return 1;
        }
        if (strcmp(opt, "--quick") == 0)
            continue; /* applied with the defaults */
        if (strcmp(opt, "--quiet") == 0) {
            o->quiet = 1;
            continue;
        }
        if (strcmp(opt, "--kernels") == 0) {
            o->kernels = 1;
            continue;
        }
        if (strcmp(opt, "--no-stage-marks") == 0) {
            o->no_stage_marks = 1;
            continue;
        }
        if (i + 1 >= argc) {
            snprintf(err, err_size, "%s needs a value (see --help)", opt);
            return -1;
        }
        const char *arg = argv[++i];
        int ok = 1;
        double x = 0.0;
        if (strcmp(opt, "--n") == 0) {
            n_given = 1;
            if (parse_list(arg, o->n, NULL, &o->n_count, 1, err, err_size, opt))
                return -1;
        } else if (strcmp(opt, "--image") == 0) {
            image_given = 1;
            if (parse_list(arg, o->image_h, o->image_w, &o->image_count, 1, err, err_size, opt))
                return -1;
        } else if (strcmp(opt, "--heads") == 0) {
            if (parse_list(arg, o->heads, NULL, &o->heads_count, 0, err, err_size, opt))
                return -1;
        } else if (strcmp(opt, "--dims") == 0) {
            if (parse_list(arg, o->dk, o->dv, &o->dims_count, 0, err, err_size, opt))
                return -1;
        } else if (strcmp(opt, "--decode-context") == 0) {
            decode_given = 1;
            if (parse_list(arg, o->decode_ctx, NULL, &o->decode_ctx_count, 1, err, err_size, opt))
                return -1;
        } else if (strcmp(opt, "--chunk") == 0) {
            if (parse_list(arg, o->chunk, NULL, &o->chunk_count, 0, err, err_size, opt))
                return -1;
        } else if (strcmp(opt, "--m") == 0) {
            if (parse_list(arg, o->m, NULL, &o->m_count, 0, err, err_size, opt))
                return -1;
        } else if (strcmp(opt, "--batch") == 0) {
            ok = parse_size(arg, &o->batch, NULL);
        } else if (strcmp(opt, "--layout") == 0) {
            ok = mhla_layout_parse(arg, &o->layout) == MHLA_OK;
        } else if (strcmp(opt, "--normalizer") == 0) {
            ok = mhla_normalizer_parse(arg, &o->normalizer) == MHLA_OK;
        } else if (strcmp(opt, "--ops") == 0) {
            if (parse_ops(arg, &o->ops, err, err_size))
                return -1;
        } else if (strcmp(opt, "--target-ms") == 0) {
            ok = parse_number(arg, 0.0, &o->target_ms);
        } else if (strcmp(opt, "--min-iters") == 0) {
            ok = parse_int(arg, 1, &o->min_iters);
        } else if (strcmp(opt, "--max-iters") == 0) {
            ok = parse_int(arg, 1, &o->max_iters);
        } else if (strcmp(opt, "--warmup") == 0) {
            ok = parse_int(arg, 0, &o->warmup);
        } else if (strcmp(opt, "--max-row-s") == 0) {
            ok = parse_number(arg, 0.0, &o->max_row_s);
        } else if (strcmp(opt, "--max-total-s") == 0) {
            ok = parse_number(arg, 0.0, &o->max_total_s);
        } else if (strcmp(opt, "--seed") == 0) {
            ok = parse_number(arg, 0.0, &x) && x <= 4294967295.0;
            o->seed = (uint32_t)x;
        } else if (strcmp(opt, "--device") == 0) {
            o->device = arg;
        } else if (strcmp(opt, "--gate") == 0) {
            ok = 1;
            if (strcmp(arg, "auto") == 0)
                o->gate = BENCH_GATE_AUTO;
            else if (strcmp(arg, "event") == 0)
                o->gate = BENCH_GATE_EVENT;
            else if (strcmp(arg, "kernel") == 0)
                o->gate = BENCH_GATE_KERNEL;
            else
                ok = 0;
        } else if (strcmp(opt, "--json") == 0) {
            o->json_path = arg;
        } else if (strcmp(opt, "--csv") == 0) {
            o->csv_path = arg;
        } else if (strcmp(opt, "--plot") == 0) {
            o->plot_path = arg;
        } else if (strcmp(opt, "--compare") == 0) {
            if (i + 1 >= argc) {
                snprintf(err, err_size, "--compare needs two JSON files");
                return -1;
            }
            o->compare[0] = arg;
            o->compare[1] = argv[++i];
        } else {
            snprintf(err, err_size, "unknown option '%s' (see --help)", opt);
            return -1;
        }
        if (!ok) {
            snprintf(err, err_size, "%s: invalid value '%s' (see --help)", opt, arg);
            return -1;
        }
    }
    if (o->max_iters < o->min_iters) {
        snprintf(err, err_size, "--max-iters %d is below --min-iters %d", o->max_iters, o->min_iters);
        return -1;
    }
    /* Asking for one sweep means that sweep only. */
    if (n_given && !image_given)
        o->image_count = 0;
    if (image_given && !n_given)
        o->n_count = 0;
    /* Decoding follows the lengths asked for unless given its own. */
    if (n_given && !decode_given) {
        memcpy(o->decode_ctx, o->n, o->n_count * sizeof o->n[0]);
        o->decode_ctx_count = o->n_count;
    }
    return 0;
}
