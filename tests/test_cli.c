/* The `mhla` binary driven as a user or a script drives it: each option's effect on the output
 * checked against the double-precision reference computed here (and shown to matter on the
 * input), every error path's exit code and single stderr line, and that a failed run leaves
 * neither an output nor a temporary file behind.
 * usage: test_cli MHLA_BINARY KERNEL_SOURCE_DIR */
#include "helpers.h"
#include "npy.h"
#include "scratch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static const char *mhla_bin;   /* the built tool */
static const char *kernel_src; /* the source tree's kernels/, for MHLA_KERNEL_DIR variants */
static char root[256];         /* this run's scratch folder: captured streams and test folders */
static char dir[320];          /* the current test's working folder, where mhla runs */

/* ---- the test folder ----------------------------------------------------------------------- */

static int fresh_dir(void **state)
{
    (void)state;
    static int serial;
    snprintf(dir, sizeof dir, "%s/t%02d", root, ++serial);
    return mkdir(dir, 0755);
}

static int drop_dir(void **state)
{
    (void)state;
    scratch_remove(dir);
    return 0;
}

static const char *in_dir(const char *name) { return scratch_path(dir, name); }

/* Every name in the test folder (hidden ones too: temporaries are), sorted, space-separated. */
static const char *listing(void) { return scratch_listing(dir); }

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap && !(buf = realloc(buf, cap = 2 * cap + 8192)))
            break;
        const size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

/* ---- running the tool ---------------------------------------------------------------------- */

typedef struct result {
    int code;   /* exit status, or -1 when a signal ended it */
    int signal; /* the signal that ended it, or 0 */
    char out[16384];
    char err[16384];
} result;

/* When nonzero, the child's RLIMIT_FSIZE in bytes (with SIGXFSZ ignored): writes past it fail. */
static rlim_t child_file_limit;

/* Starts mhla in the test folder with `args`; `env` entries "NAME=VALUE" are set in the child
 * ("NAME=" unsets). MHLA_KERNEL_DIR is always cleared first, so that only a test sets it. */
static pid_t spawn(const char *const *env, const char *stdout_path, const char *const *args)
{
    char out_path[512], err_path[512];
    snprintf(out_path, sizeof out_path, "%s/stdout", root);
    snprintf(err_path, sizeof err_path, "%s/stderr", root);
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid != 0)
        return pid;
    const int o = open(stdout_path ? stdout_path : out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || chdir(dir) != 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
        _exit(126);
    if (child_file_limit) {
        const struct rlimit lim = {child_file_limit, child_file_limit};
        signal(SIGXFSZ, SIG_IGN); /* an ignored signal stays ignored across exec */
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
            _exit(126);
    }
    unsetenv("MHLA_KERNEL_DIR");
    for (const char *const *p = env; p && *p; ++p) {
        char name[128];
        const char *eq = strchr(*p, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - *p), *p);
        if (eq[1])
            setenv(name, eq + 1, 1);
        else
            unsetenv(name);
    }
    const char *argv[64] = {mhla_bin};
    int n = 1;
    while (args[n - 1] && n < 63) {
        argv[n] = args[n - 1];
        ++n;
    }
    argv[n] = NULL;
    execv(mhla_bin, (char *const *)argv);
    _exit(127);
}

static result *finish(pid_t pid)
{
    static result r;
    int status = 0;
    assert_true(pid > 0);
    while (waitpid(pid, &status, 0) < 0)
        assert_int_equal(errno, EINTR);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    char path[512];
    const char *names[2] = {"stdout", "stderr"};
    char *dst[2] = {r.out, r.err};
    for (int i = 0; i < 2; ++i) {
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        char *text = slurp(path, NULL);
        snprintf(dst[i], sizeof r.out, "%s", text ? text : "");
        free(text);
    }
    if (r.code == 126 || r.code == 127)
        fail_msg("could not start %s in %s", mhla_bin, dir);
    return &r;
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define MHLA(...) finish(spawn(NULL, NULL, ARGS(__VA_ARGS__)))
#define MHLA_ENV(env, ...) finish(spawn(env, NULL, ARGS(__VA_ARGS__)))

static void expect_ok(const result *r)
{
    if (r->code != 0)
        fail_msg("exit %d, stderr: %s", r->code, r->err);
    assert_string_equal(r->err, "");
}

/* Failed with `code`; stderr is one line "mhla: ..." containing `text`; stdout is empty. */
static void expect_fail(const result *r, int code, const char *text)
{
    if (r->code != code || !strstr(r->err, text))
        fail_msg("exit %d (expected %d), stderr '%s' (expected to contain '%s')", r->code, code, r->err, text);
    const size_t len = strlen(r->err);
    assert_true(strncmp(r->err, "mhla: ", 6) == 0);
    assert_true(len > 0 && r->err[len - 1] == '\n');
    if (strchr(r->err, '\n') != r->err + len - 1)
        fail_msg("stderr has more than one line: %s", r->err);
    if (code != 3)
        assert_string_equal(r->out, "");
}

/* ---- inputs, written independently of cli/npy.c ---------------------------------------------- */

/* A version 1.0 .npy with `header` as the dict, padded to 16 bytes as NumPy before 1.14 did. */
static void write_raw_npy(const char *name, const char *dict, const void *data, size_t bytes)
{
    char header[1024];
    int n = snprintf(header, sizeof header, "%s", dict);
    while ((10 + n + 1) % 16)
        header[n++] = ' ';
    header[n++] = '\n';
    FILE *f = fopen(in_dir(name), "wb");
    assert_non_null(f);
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xFF),
                                   (unsigned char)(n >> 8)};
    assert_int_equal(fwrite(pre, 1, 10, f), 10);
    assert_int_equal(fwrite(header, 1, (size_t)n, f), (size_t)n);
    if (bytes)
        assert_int_equal(fwrite(data, 1, bytes, f), bytes);
    assert_int_equal(fclose(f), 0);
}

static void write_npy(const char *name, const char *descr, int ndim, const int64_t *shape, const void *data,
                      size_t bytes)
{
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < ndim; ++i)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i],
                      ndim == 1 ? "," : i + 1 < ndim ? ", " : "");
    snprintf(dict + n, sizeof dict - (size_t)n, "), }");
    write_raw_npy(name, dict, data, bytes);
}

/* q, k, v of one problem, as written to q.npy, k.npy and v.npy. */
typedef struct tensors {
    int64_t b, n, h, dk, dv;
    mhla_layout layout;
    int half; /* written as float16; q/k/v hold the rounded values */
    float *q, *k, *v;
    size_t nq, nv;
} tensors;

static void write_tensor(const char *name, const tensors *t, const float *x, size_t count, int64_t d)
{
    const int64_t shape[4] = {t->b, t->layout == MHLA_LAYOUT_BHND ? t->h : t->n,
                              t->layout == MHLA_LAYOUT_BHND ? t->n : t->h, d};
    if (!t->half) {
        write_npy(name, "<f4", 4, shape, x, count * sizeof *x);
        return;
    }
    uint16_t *h = malloc(count * sizeof *h);
    assert_non_null(h);
    mhla_convert(MHLA_DTYPE_F16, h, MHLA_DTYPE_F32, x, count);
    write_npy(name, "<f2", 4, shape, h, count * sizeof *h);
    free(h);
}

/* Values uniform in [lo, 1) (v in [-1, 1)), rounded to float16 when `half`. */
static tensors make_inputs(int64_t b, int64_t n, int64_t h, int64_t dk, int64_t dv, mhla_layout layout, int half,
                           float lo)
{
    tensors t = {b, n, h, dk, dv, layout, half, NULL, NULL, NULL, (size_t)(b * n * h * dk), (size_t)(b * n * h * dv)};
    t.q = malloc(t.nq * sizeof *t.q);
    t.k = malloc(t.nq * sizeof *t.k);
    t.v = malloc(t.nv * sizeof *t.v);
    assert_true(t.q && t.k && t.v);
    fill_uniform(t.q, t.nq, 11, lo, 1.0f);
    fill_uniform(t.k, t.nq, 12, lo, 1.0f);
    fill_uniform(t.v, t.nv, 13, -1.0f, 1.0f);
    float *all[3] = {t.q, t.k, t.v};
    const size_t cnt[3] = {t.nq, t.nq, t.nv};
    for (int i = 0; half && i < 3; ++i)
        for (size_t j = 0; j < cnt[i]; ++j)
            all[i][j] = mhla_f16_to_float(mhla_float_to_f16(all[i][j]));
    write_tensor("q.npy", &t, t.q, t.nq, dk);
    write_tensor("k.npy", &t, t.k, t.nq, dk);
    write_tensor("v.npy", &t, t.v, t.nv, dv);
    return t;
}

static void free_inputs(tensors *t) { free(t->q), free(t->k), free(t->v); }

/* The configuration `mhla run` should have built: defaults, the inputs' sizes, grid and blocks. */
static mhla_config config_for(const tensors *t, const int64_t grid[3], const int64_t blocks[3])
{
    mhla_config cfg;
    mhla_config_init(&cfg);
    cfg.batch = t->b, cfg.heads = t->h, cfg.dk = t->dk, cfg.dv = t->dv, cfg.layout = t->layout;
    cfg.seq_t = grid[0], cfg.seq_h = grid[1], cfg.seq_w = grid[2];
    cfg.block_t = blocks[0], cfg.block_h = blocks[1], cfg.block_w = blocks[2];
    return cfg;
}

static float *init_mixing(mhla_init_kind kind, const double *param, const mhla_config *cfg)
{
    const size_t m = (size_t)(cfg->block_t * cfg->block_h * cfg->block_w);
    float *mc = malloc(m * m * sizeof *mc);
    assert_non_null(mc);
    assert_int_equal(mhla_mixing_init(kind, param, cfg->block_t, cfg->block_h, cfg->block_w, mc, m * m), MHLA_OK);
    return mc;
}

static double *reference(const tensors *t, const mhla_config *cfg, const float *mixing)
{
    double *ref = malloc(t->nv * sizeof *ref);
    assert_non_null(ref);
    if (mhla_reference_forward(cfg, t->q, t->k, t->v, mixing, ref) != MHLA_OK)
        fail_msg("reference: %s", mhla_last_message());
    return ref;
}

/* The distance between two references: max |a - b| / max |b|, the measure of
 * docs/spec.md "Accuracy the tests hold". */
static double distance(const double *a, const double *b, size_t n)
{
    double diff = 0, mag = 0;
    for (size_t i = 0; i < n; ++i) {
        diff = fmax(diff, fabs(a[i] - b[i]));
        mag = fmax(mag, fabs(b[i]));
    }
    return diff / mag;
}

/* An option must change the output: the reference with it (`want`) far from the one without it
 * (`other`), else the case shows nothing. Frees both. */
static void expect_matters(double *want, double *other, size_t n, const char *what)
{
    const double d = distance(other, want, n);
    free(want), free(other);
    if (!(d > 1e-3))
        fail_msg("%s: the output would hardly change without it (%g): a useless case", what, d);
}

/* The file `name`: it must be `dtype` with `ndim` extents `shape`; its values as floats. */
static float *read_floats(const char *name, npy_dtype dtype, int ndim, const int64_t *shape)
{
    npy_array a;
    char err[512], got[160], want[160];
    if (npy_read(in_dir(name), &a, err, sizeof err) != NPY_OK)
        fail_msg("%s: %s", name, err);
    npy_shape_string(a.ndim, a.shape, got, sizeof got);
    npy_shape_string(ndim, shape, want, sizeof want);
    if (a.dtype != dtype || strcmp(got, want) != 0)
        fail_msg("%s: %s %s, expected %s %s", name, npy_dtype_name(a.dtype), got, npy_dtype_name(dtype), want);
    if (dtype == NPY_F32)
        return a.data;
    float *f = malloc(a.count * sizeof *f);
    assert_non_null(f);
    mhla_convert(MHLA_DTYPE_F32, f, MHLA_DTYPE_F16, a.data, a.count);
    npy_free(&a);
    return f;
}

/* Reads the output `name`: it must be `dtype`, shaped like v; returns its values as floats. */
static float *read_output(const tensors *t, const char *name, npy_dtype dtype)
{
    const int64_t shape[4] = {t->b, t->layout == MHLA_LAYOUT_BHND ? t->h : t->n,
                              t->layout == MHLA_LAYOUT_BHND ? t->n : t->h, t->dv};
    return read_floats(name, dtype, 4, shape);
}

/* The output's max relative error against the reference of cfg and mixing. */
static double output_error(const tensors *t, const mhla_config *cfg, const float *mixing, const char *name,
                           npy_dtype dtype)
{
    float *o = read_output(t, name, dtype);
    double *ref = reference(t, cfg, mixing);
    const double e = finite_rel_err(o, ref, t->nv, __func__);
    free(o);
    free(ref);
    return e;
}

/* output_error() for the defaults (linear init) on a grid and block grid. */
static double default_error(const tensors *t, const int64_t grid[3], const int64_t blocks[3], npy_dtype dtype)
{
    const mhla_config cfg = config_for(t, grid, blocks);
    float *mc = init_mixing(MHLA_INIT_LINEAR, NULL, &cfg);
    const double e = output_error(t, &cfg, mc, "o.npy", dtype);
    free(mc);
    return e;
}

/* "max_rel_err <x>" as the last line of stdout. */
static double printed_error(const result *r)
{
    const char *line = strstr(r->out, "max_rel_err ");
    double e = -1;
    if (!line || sscanf(line, "max_rel_err %lf", &e) != 1)
        fail_msg("no max_rel_err line in '%s'", r->out);
    return e;
}

static const int64_t grid_8x8[3] = {1, 8, 8};

/* ---- help, version ------------------------------------------------------------------------- */

static void test_help_and_version(void **state)
{
    (void)state;
    const result *r = MHLA("--version");
    expect_ok(r);
    char want[128];
    snprintf(want, sizeof want, "mhla %s (libmhla %s)\n", MHLA_VERSION_STRING, mhla_version_string());
    assert_string_equal(r->out, want);

    r = MHLA("--help");
    expect_ok(r);
    const char *top[] = {"usage: mhla", "run ", "diagnose ", "init-mixing ", "info ", "exit codes"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; ++i)
        assert_non_null(strstr(r->out, top[i]));
    /* Every option of `run` is documented in its help. */
    r = MHLA("run", "--q", "x.npy", "-h");
    expect_ok(r);
    const char *run_opts[] = {"--q ", "--k ", "--v ", "--out ", "--layout ", "--grid ", "--blocks ", "--mixing ",
                              "--init ", "--feature-map ", "--feature-eps ", "--scale ", "--normalizer ", "--eps ",
                              "--causal ", "--chunk ", "--recurrent", "--cu-seqlens ", "--dtype ", "--device ",
                              "--check ", "--repeat ", "max_rel_err", "time_ms median"};
    for (size_t i = 0; i < sizeof run_opts / sizeof run_opts[0]; ++i)
        if (!strstr(r->out, run_opts[i]))
            fail_msg("'mhla run --help' does not mention %s", run_opts[i]);
    /* The chunk is part of the model: the help states the library's default, 64. */
    assert_non_null(strstr(r->out, "--chunk C                     chunk size (default 64, the library's;"));
    r = MHLA("init-mixing", "--help");
    expect_ok(r);
    assert_non_null(strstr(r->out, "--blocks "));
    assert_non_null(strstr(r->out, "--init "));
    assert_non_null(strstr(r->out, "--out "));
    r = MHLA("info", "--help");
    expect_ok(r);
    assert_non_null(strstr(r->out, "usage: mhla info"));

    expect_fail(MHLA("frob"), 2, "mhla: unknown command 'frob' (expected run, grad, diagnose, init-mixing, info, selftest or tune; see 'mhla --help')");
    const char *none[] = {NULL};
    expect_fail(finish(spawn(NULL, NULL, none)), 2, "missing command");
    /* A failed write of what was printed is a failure too. */
    expect_fail(finish(spawn(NULL, "/dev/full", ARGS("--version"))), 1, "cannot write to standard output");
    assert_string_equal(listing(), "");
}

/* ---- init-mixing --------------------------------------------------------------------------- */

static void test_init_mixing(void **state)
{
    (void)state;
    const struct {
        const char *blocks, *init; /* init NULL: the default, linear */
        int64_t bt, bh, bw;
        mhla_init_kind kind;
        double param;
        int has_param;
    } cases[] = {
        {"8", NULL, 8, 1, 1, MHLA_INIT_LINEAR, 0, 0},
        {"2x4", "exp:2", 1, 2, 4, MHLA_INIT_EXP, 2, 1},
        {"2x2x2", "local:1", 2, 2, 2, MHLA_INIT_LOCAL, 1, 1},
        {"3x3", "paper", 1, 3, 3, MHLA_INIT_PAPER, 0, 0},
        {"4X4", "cos", 1, 4, 4, MHLA_INIT_COS, 0, 0},
        {"2x3x2", "gaussian", 2, 3, 2, MHLA_INIT_GAUSSIAN, 0, 0},
        {"5", "causal-uniform", 5, 1, 1, MHLA_INIT_CAUSAL_UNIFORM, 0, 0},
        {"1", "exp", 1, 1, 1, MHLA_INIT_EXP, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const result *r = cases[i].init ? MHLA("init-mixing", "--blocks", cases[i].blocks, "--init", cases[i].init,
                                               "--out", "mc.npy")
                                        : MHLA("init-mixing", "--out=mc.npy", "--blocks", cases[i].blocks);
        expect_ok(r);
        assert_string_equal(r->out, "");
        const int64_t m = cases[i].bt * cases[i].bh * cases[i].bw;
        float *want = malloc((size_t)(m * m) * sizeof *want);
        assert_non_null(want);
        assert_int_equal(mhla_mixing_init(cases[i].kind, cases[i].has_param ? &cases[i].param : NULL, cases[i].bt,
                                          cases[i].bh, cases[i].bw, want, (size_t)(m * m)),
                         MHLA_OK);
        npy_array mc;
        char err[512];
        assert_int_equal(npy_read(in_dir("mc.npy"), &mc, err, sizeof err), NPY_OK);
        assert_int_equal(mc.dtype, NPY_F32);
        assert_int_equal(mc.ndim, 2);
        assert_int_equal(mc.shape[0], m);
        assert_int_equal(mc.shape[1], m);
        assert_memory_equal(mc.data, want, (size_t)(m * m) * sizeof *want);
        npy_free(&mc);
        free(want);
        assert_string_equal(listing(), "mc.npy");
    }
}

static void test_init_mixing_errors(void **state)
{
    (void)state;
    assert_int_equal(mkdir(in_dir("sub"), 0755), 0);
    const struct {
        const char *args[10];
        const char *text;
    } cases[] = {
        {{"init-mixing", "--out", "mc.npy"}, "init-mixing: missing --blocks M|BHxBW|BTxBHxBW (see 'mhla init-mixing --help')"},
        {{"init-mixing", "--blocks", "4"}, "init-mixing: missing --out MC.npy"},
        {{"init-mixing", "--blocks", "2x0", "--out", "mc.npy"}, "--blocks 2x0: extent 0 must be between 1 and 2147483647"},
        {{"init-mixing", "--blocks", "2x", "--out", "mc.npy"}, "--blocks 2x: expected N, HxW or TxHxW"},
        {{"init-mixing", "--blocks", "axb", "--out", "mc.npy"}, "--blocks axb: 'a' is not an integer"},
        {{"init-mixing", "--blocks", "2x2x2x2", "--out", "mc.npy"}, "--blocks 2x2x2x2: at most 3 extents"},
        {{"init-mixing", "--blocks", "-4", "--out", "mc.npy"}, "--blocks -4: extent -4 must be between 1"},
        {{"init-mixing", "--blocks", "300x300", "--out", "mc.npy"}, "--blocks 300x300: mhla_mixing_init: block grid 1x300x300 has more than 65536 blocks"},
        {{"init-mixing", "--blocks", "4", "--init", "bogus", "--out", "mc.npy"}, "--init bogus: unknown init kind 'bogus'"},
        {{"init-mixing", "--blocks", "4", "--init", "exp:-1", "--out", "mc.npy"}, "--init exp:-1: mhla_mixing_init: exp sigma must be finite and > 0, got -1"},
        {{"init-mixing", "--blocks", "4", "--init", "exp:abc", "--out", "mc.npy"}, "--init exp:abc: parameter 'abc' is not a number"},
        {{"init-mixing", "--blocks", "4", "--init", "linear:2", "--out", "mc.npy"}, "--init linear:2: linear takes no parameter"},
        {{"init-mixing", "--blocks", "4", "--out", "mc.npy", "--bogus"}, "init-mixing: unknown option '--bogus'"},
        {{"init-mixing", "--blocks", "4", "--out", "mc.npy", "extra"}, "init-mixing: unexpected argument 'extra'"},
        {{"init-mixing", "--blocks", "4", "--blocks", "4", "--out", "mc.npy"}, "--blocks: given twice"},
        {{"init-mixing", "--blocks", "4", "--out"}, "--out: missing value MC.npy"},
        {{"init-mixing", "--blocks", "4", "--out="}, "--out: empty value (expected MC.npy)"},
        {{"init-mixing", "--blocks", "4", "--out", "nodir/mc.npy"}, "--out nodir/mc.npy: cannot create a file in directory 'nodir': No such file or directory"},
        {{"init-mixing", "--blocks", "4", "--out", "sub"}, "--out sub: is a directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        expect_fail(finish(spawn(NULL, NULL, cases[i].args)), 2, cases[i].text);
        assert_string_equal(listing(), "sub");
    }
    rmdir(in_dir("sub"));
}

/* ---- run: results -------------------------------------------------------------------------- */

static void test_run_check_1d_2d_3d(void **state)
{
    (void)state;
    tensors t = make_inputs(2, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    const struct {
        const char *grid, *blocks;
        int64_t g[3], b[3];
    } cases[] = {
        {NULL, "4", {64, 1, 1}, {4, 1, 1}},
        {"8x8", "2x2", {1, 8, 8}, {1, 2, 2}},
        {"4x4x4", "2x2x2", {4, 4, 4}, {2, 2, 2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const result *r = cases[i].grid ? MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy",
                                               "--grid", cases[i].grid, "--blocks", cases[i].blocks, "--check")
                                        : MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy",
                                               "--blocks", cases[i].blocks, "--check");
        expect_ok(r);
        const double printed = printed_error(r);
        assert_true(printed >= 0 && printed <= 1e-5);
        char line[64];
        snprintf(line, sizeof line, "max_rel_err %.3g\n", printed);
        assert_string_equal(r->out, line); /* the only line */
        const double e = default_error(&t, cases[i].g, cases[i].b, NPY_F32);
        if (!(e <= mhla_reference_tolerance(MHLA_DTYPE_F32, 64)))
            fail_msg("grid %s: max_rel_err %g", cases[i].grid ? cases[i].grid : "1D", e);
        assert_string_equal(listing(), "k.npy o.npy q.npy v.npy");
    }
    free_inputs(&t);
}

static void set_fm_none(mhla_config *c) { c->feature_map = MHLA_FEATURE_NONE, c->normalizer = MHLA_NORMALIZER_NONE; }
static void set_norm_none(mhla_config *c) { c->normalizer = MHLA_NORMALIZER_NONE; }
static void set_relu(mhla_config *c) { c->feature_map = MHLA_FEATURE_RELU, c->feature_eps = 0.5f; }
static void set_feps(mhla_config *c) { c->feature_eps = 0.5f; }
static void set_elu1(mhla_config *c) { c->feature_map = MHLA_FEATURE_ELU1; }
static void set_scale(mhla_config *c) { c->scale = 2.5f, c->normalizer = MHLA_NORMALIZER_NONE; }
static void set_eps(mhla_config *c) { c->eps = 5.0f; }
static void set_official(mhla_config *c) { c->normalizer = MHLA_NORMALIZER_OFFICIAL; }

/* Cross-attention with grouped heads: Q on an 8x8 grid in 2x2 blocks, K and V of 24 tokens and one
 * head in 3 blocks; run and grad against the reference, the output shaped as Q with V's Dv, the
 * gradients as their inputs, dMc and init-mixing's matrix M x M_kv. */
static void test_run_grad_cross(void **state)
{
    (void)state;
    tensors t = make_inputs(2, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    char err[256];
    const int64_t kshape[4] = {2, 24, 1, 8}, vshape[4] = {2, 24, 1, 4}, oshape[4] = {2, 64, 2, 4};
    assert_int_equal(npy_write(in_dir("ck.npy"), NPY_F32, 4, kshape, t.k, err, sizeof err), NPY_OK);
    assert_int_equal(npy_write(in_dir("cv.npy"), NPY_F32, 4, vshape, t.v, err, sizeof err), NPY_OK);
    assert_int_equal(npy_write(in_dir("do.npy"), NPY_F32, 4, oshape, t.v, err, sizeof err), NPY_OK);
    const result *r = MHLA("init-mixing", "--blocks", "2x2", "--kv-blocks", "3", "--init", "exp", "--out", "cmc.npy");
    expect_ok(r);
    npy_array a;
    assert_int_equal(npy_read(in_dir("cmc.npy"), &a, err, sizeof err), NPY_OK);
    assert_true(a.ndim == 2 && a.shape[0] == 4 && a.shape[1] == 3);
    npy_free(&a);
    r = MHLA("run", "--q", "q.npy", "--k", "ck.npy", "--v", "cv.npy", "--out", "o.npy", "--grid", "8x8", "--blocks",
             "2x2", "--kv-blocks", "3", "--mixing", "cmc.npy", "--check");
    expect_ok(r);
    assert_true(printed_error(r) <= mhla_reference_tolerance(MHLA_DTYPE_F32, 64));
    assert_int_equal(npy_read(in_dir("o.npy"), &a, err, sizeof err), NPY_OK);
    assert_memory_equal(a.shape, oshape, sizeof oshape);
    npy_free(&a);
    r = MHLA("grad", "--q", "q.npy", "--k", "ck.npy", "--v", "cv.npy", "--dout", "do.npy", "--dq", "dq.npy", "--dk",
             "dk.npy", "--dv", "dv.npy", "--dmixing", "dmc.npy", "--grid", "8x8", "--blocks", "2x2", "--kv-grid", "4x6",
             "--kv-blocks", "1x3", "--check");
    expect_ok(r);
    assert_true(printed_error(r) <= mhla_reference_backward_tolerance(MHLA_DTYPE_F32));
    const char *names[4] = {"dk.npy", "dv.npy", "dmc.npy", "dq.npy"};
    const int64_t dmshape[2] = {4, 3}, qshape[4] = {2, 64, 2, 8};
    const int64_t *shapes[4] = {kshape, vshape, dmshape, qshape};
    for (int i = 0; i < 4; ++i) {
        assert_int_equal(npy_read(in_dir(names[i]), &a, err, sizeof err), NPY_OK);
        assert_memory_equal(a.shape, shapes[i], (size_t)a.ndim * sizeof(int64_t));
        npy_free(&a);
        scratch_remove(in_dir(names[i]));
    }
    const char *rm[] = {"ck.npy", "cv.npy", "do.npy", "cmc.npy", "o.npy"};
    for (size_t i = 0; i < sizeof rm / sizeof rm[0]; ++i)
        scratch_remove(in_dir(rm[i]));
    free_inputs(&t);
}

/* Each option changes the output as the reference says, and the input is one where it matters:
 * the reference with the option dropped (`dropped`, from the same defaults) is far from it. */
static void test_run_options(void **state)
{
    (void)state;
    const double exp_param = 1.5, local_param = 1.0;
    const struct {
        const char *args[8];
        void (*apply)(mhla_config *);   /* the expected configuration, from the defaults */
        void (*dropped)(mhla_config *); /* ... were the option ignored; NULL: same as the defaults */
        mhla_init_kind init;
        const double *param;
        int no_contrast; /* explicit defaults and device choices: nothing to contrast with */
    } cases[] = {
        {{"--feature-map", "none", "--normalizer", "none"}, set_fm_none, set_norm_none, MHLA_INIT_LINEAR, NULL, 0},
        {{"--feature-map", "relu", "--feature-eps", "0.5"}, set_relu, set_feps, MHLA_INIT_LINEAR, NULL, 0},
        {{"--feature-map", "elu1"}, set_elu1, NULL, MHLA_INIT_LINEAR, NULL, 0},
        {{"--feature-eps", "0.5"}, set_feps, NULL, MHLA_INIT_LINEAR, NULL, 0},
        {{"--scale", "2.5", "--normalizer", "none"}, set_scale, set_norm_none, MHLA_INIT_LINEAR, NULL, 0},
        {{"--eps", "5"}, set_eps, NULL, MHLA_INIT_LINEAR, NULL, 0},
        {{"--normalizer", "official"}, set_official, NULL, MHLA_INIT_LINEAR, NULL, 0},
        {{"--normalizer", "none"}, set_norm_none, NULL, MHLA_INIT_LINEAR, NULL, 0},
        {{"--init", "cos"}, NULL, NULL, MHLA_INIT_COS, NULL, 0},
        {{"--init", "exp"}, NULL, NULL, MHLA_INIT_EXP, NULL, 0},
        {{"--init", "exp:1.5"}, NULL, NULL, MHLA_INIT_EXP, &exp_param, 0},
        {{"--init", "gaussian"}, NULL, NULL, MHLA_INIT_GAUSSIAN, NULL, 0},
        {{"--init", "local"}, NULL, NULL, MHLA_INIT_LOCAL, NULL, 0},
        {{"--init", "local:1"}, NULL, NULL, MHLA_INIT_LOCAL, &local_param, 0},
        {{"--init", "paper"}, NULL, NULL, MHLA_INIT_PAPER, NULL, 0},
        {{"--init", "causal-uniform"}, NULL, NULL, MHLA_INIT_CAUSAL_UNIFORM, NULL, 0},
        {{"--feature-map", "relu-eps", "--normalizer", "paper", "--init", "linear", "--dtype", "f32"}, NULL, NULL,
         MHLA_INIT_LINEAR, NULL, 1},
        {{"--layout", "bnhd", "--device", "0"}, NULL, NULL, MHLA_INIT_LINEAR, NULL, 1},
        {{"--device", "0:0"}, NULL, NULL, MHLA_INIT_LINEAR, NULL, 1},
    };
    tensors t = make_inputs(1, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    const int64_t blocks[3] = {1, 4, 4}; /* M = 16: the initializers all differ on a 4x4 grid */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *args[24] = {"run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy",
                                "--grid=8x8", "--blocks=4x4"};
        int n = 11;
        for (int a = 0; a < 8 && cases[i].args[a]; ++a)
            args[n++] = cases[i].args[a];
        const result *r = finish(spawn(NULL, NULL, args));
        expect_ok(r);
        assert_string_equal(r->out, "");
        mhla_config cfg = config_for(&t, grid_8x8, blocks), off = cfg;
        if (cases[i].apply)
            cases[i].apply(&cfg);
        if (cases[i].dropped)
            cases[i].dropped(&off);
        float *mc = init_mixing(cases[i].init, cases[i].param, &cfg);
        float *linear = init_mixing(MHLA_INIT_LINEAR, NULL, &cfg);
        const double e = output_error(&t, &cfg, mc, "o.npy", NPY_F32);
        if (!(e <= 1e-5))
            fail_msg("%s %s: max_rel_err %g against the reference", cases[i].args[0], cases[i].args[1], e);
        if (!cases[i].no_contrast)
            expect_matters(reference(&t, &cfg, mc), reference(&t, &off, linear), t.nv, cases[i].args[0]);
        free(mc), free(linear);
        assert_string_equal(listing(), "k.npy o.npy q.npy v.npy");
    }
    free_inputs(&t);
}

static void test_run_mixing_file_and_layout(void **state)
{
    (void)state;
    tensors t = make_inputs(2, 16, 3, 8, 4, MHLA_LAYOUT_BHND, 0, -1.0f);
    const int64_t grid[3] = {16, 1, 1}, blocks[3] = {4, 1, 1};
    mhla_config cfg = config_for(&t, grid, blocks);
    /* A "trained" matrix: positive, rows not normalized, far from any initializer. */
    float mc[16];
    fill_uniform(mc, 16, 77, 0.1f, 2.0f);
    const int64_t shape[2] = {4, 4};
    write_npy("mc.npy", "<f4", 2, shape, mc, sizeof mc);
    expect_ok(MHLA("run", "--layout", "bhnd", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy",
                   "--blocks", "4", "--mixing", "mc.npy"));
    const double e = output_error(&t, &cfg, mc, "o.npy", NPY_F32);
    assert_true(e <= 1e-5);
    /* It mattered: the linear init, and the same data read as BNHD, both give other outputs. */
    float *linear = init_mixing(MHLA_INIT_LINEAR, NULL, &cfg);
    double *want = reference(&t, &cfg, mc), *other = reference(&t, &cfg, linear);
    assert_true(distance(other, want, t.nv) > 1e-3);
    free(other);
    mhla_config bnhd = cfg;
    bnhd.layout = MHLA_LAYOUT_BNHD, bnhd.heads = 16, bnhd.seq_t = 3, bnhd.block_t = 1; /* (2,3,16,D) as BNHD */
    float one = 1.0f;
    other = reference(&t, &bnhd, &one);
    assert_true(distance(other, want, t.nv) > 1e-3);
    free(want), free(other), free(linear);
    assert_string_equal(listing(), "k.npy mc.npy o.npy q.npy v.npy");
    free_inputs(&t);
}

static void test_run_device_by_name(void **state)
{
    (void)state;
    mhla_device_info info;
    size_t count = 0;
    assert_int_equal(mhla_device_list(&info, 1, &count), MHLA_OK);
    tensors t = make_inputs(1, 16, 1, 4, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    /* MHLA_DEVICE is honoured when --device is absent... */
    const char *nowhere[] = {"MHLA_DEVICE=no-such-device", NULL};
    expect_fail(MHLA_ENV(nowhere, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks",
                         "2"),
                1, "mhla: no OpenCL device matches MHLA_DEVICE 'no-such-device'");
    assert_string_equal(listing(), "k.npy q.npy v.npy");
    /* ... and --device wins over it. */
    expect_ok(MHLA_ENV(nowhere, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks",
                       "2", "--device", info.device_name, "--check"));
    const char *env[] = {"MHLA_DEVICE=0", NULL};
    expect_ok(MHLA_ENV(env, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "2"));
    const int64_t grid[3] = {16, 1, 1}, blocks[3] = {2, 1, 1};
    assert_true(default_error(&t, grid, blocks, NPY_F32) <= 1e-5);
    free_inputs(&t);
}

/* The `time_ms` line of a --repeat run: first, after the line that says the host clock timed it on
 * a device whose profiling timestamps are unusable (rusticl on llvmpipe). */
static const char *timing_line(const char *out)
{
    if (strncmp(out, "timing: host clock (", 20) == 0 && strchr(out, '\n'))
        out = strchr(out, '\n') + 1;
    if (strncmp(out, "time_ms median ", 15) != 0)
        fail_msg("no time_ms line first: '%s'", out);
    return out;
}

static void test_run_repeat(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 32, 2, 8, 8, MHLA_LAYOUT_BNHD, 0, -1.0f);
    const result *r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4",
                           "--repeat", "3");
    expect_ok(r);
    double med = -1, lo = -1, hi = -1;
    int used = 0;
    const char *line = timing_line(r->out);
    if (sscanf(line, "time_ms median %lf min %lf max %lf\n%n", &med, &lo, &hi, &used) != 3)
        fail_msg("no time_ms line: '%s'", r->out);
    assert_int_equal((size_t)used, strlen(line)); /* the only line after the clock's */
    assert_true(lo > 0 && lo <= med && med <= hi);
    /* Both lines, timing first; the output is still right after several runs. */
    r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4", "--repeat",
             "2", "--check");
    expect_ok(r);
    (void)timing_line(r->out);
    assert_true(printed_error(r) <= 1e-5);
    const int64_t grid[3] = {32, 1, 1}, blocks[3] = {4, 1, 1};
    assert_true(default_error(&t, grid, blocks, NPY_F32) <= 1e-5);
    free_inputs(&t);
}

static void test_run_float16(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 1, -1.0f);
    const int64_t grid[3] = {1, 8, 8}, blocks[3] = {1, 2, 2};
    /* float16 in, float32 on the device (--dtype f32), float16 out. */
    const result *r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--grid", "8x8",
                           "--blocks", "2x2", "--dtype", "f32", "--check");
    expect_ok(r);
    assert_true(printed_error(r) <= 1e-5); /* the float32 result, before rounding */
    /* Rounding to float16 adds at most half an ulp, 2^-11 of the largest output. */
    assert_true(default_error(&t, grid, blocks, NPY_F16) <= 1e-5 + 0x1p-11);
    /* Without --dtype, float16 inputs select f16 storage: a float16 file out, within docs/spec.md's f16
     * tolerance, and not the float32 result (the device stored 16 bits). */
    r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--grid", "8x8", "--blocks",
             "2x2", "--check");
    expect_ok(r);
    double e = printed_error(r);
    assert_true(e <= 2e-3 && e > 1e-6);
    assert_true(default_error(&t, grid, blocks, NPY_F16) <= 2e-3);
    /* --dtype bf16 on float16 inputs: bf16 storage, a float16 file out, within the bf16 tolerance. */
    r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--grid", "8x8", "--blocks",
             "2x2", "--dtype", "bf16", "--check");
    expect_ok(r);
    e = printed_error(r);
    assert_true(e <= 1.6e-2 && e > 2e-4);
    assert_true(default_error(&t, grid, blocks, NPY_F16) <= 1.6e-2);
    free_inputs(&t);
    /* float32 inputs with --dtype f16: rounded on the way in, a float32 file out. */
    t = make_inputs(1, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--grid", "8x8", "--blocks",
             "2x2", "--dtype", "f16", "--check");
    expect_ok(r);
    assert_true(printed_error(r) <= 2e-3);
    e = default_error(&t, grid, blocks, NPY_F32); /* against the unrounded inputs */
    assert_true(e <= 1e-2 && e > 1e-6);
    free_inputs(&t);
    t = make_inputs(1, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 1, -1.0f);
    /* Mixed dtypes. */
    const int64_t shape[4] = {1, 64, 2, 8};
    write_npy("k32.npy", "<f4", 4, shape, t.k, t.nq * sizeof(float));
    expect_fail(MHLA("run", "--q", "q.npy", "--k", "k32.npy", "--v", "v.npy", "--out", "o2.npy", "--blocks", "4",
                     "--dtype", "f32"),
                2, "--k k32.npy is float32 but --q q.npy is float16: the inputs must have one dtype");
    assert_string_equal(listing(), "k.npy k32.npy o.npy q.npy v.npy");
    free_inputs(&t);
}

/* ---- run --causal: results ------------------------------------------------------------------ */

/* The configuration `mhla run --causal` should have built: causal defaults (relu, scale Dk^-0.5,
 * normalizer none), the inputs' sizes, chunk C and an Mc of `rows` rows. */
static mhla_config causal_config_for(const tensors *t, int64_t chunk, int64_t rows)
{
    mhla_config cfg;
    mhla_config_init_causal(&cfg);
    cfg.batch = t->b, cfg.heads = t->h, cfg.dk = t->dk, cfg.dv = t->dv, cfg.layout = t->layout;
    cfg.seq_t = t->n, cfg.chunk = chunk, cfg.mixing_rows = rows;
    return cfg;
}

/* An m x m initializer over m chunks (causal-uniform is the causal default). */
static float *chunk_mixing(mhla_init_kind kind, int64_t m)
{
    float *mc = malloc((size_t)(m * m) * sizeof *mc);
    assert_non_null(mc);
    assert_int_equal(mhla_mixing_init(kind, NULL, m, 1, 1, mc, (size_t)(m * m)), MHLA_OK);
    return mc;
}

/* The reference of a causal cfg: packed (cfg.varlen) with `cu`, else one sequence per batch element. */
static double *causal_reference(const tensors *t, const mhla_config *cfg, const float *mc, const int32_t *cu,
                                size_t num_seqs)
{
    double *ref = malloc(t->nv * sizeof *ref);
    assert_non_null(ref);
    const mhla_status st = cfg->varlen ? mhla_reference_forward_varlen(cfg, t->q, t->k, t->v, mc, cu, num_seqs, ref)
                                       : mhla_reference_forward(cfg, t->q, t->k, t->v, mc, ref);
    if (st != MHLA_OK)
        fail_msg("reference: %s", mhla_last_message());
    return ref;
}

/* The float32 output `name` against the causal reference of cfg. */
static double causal_error(const tensors *t, const mhla_config *cfg, const float *mc, const int32_t *cu,
                           size_t num_seqs, const char *name)
{
    float *o = read_output(t, name, NPY_F32);
    double *ref = causal_reference(t, cfg, mc, cu, num_seqs);
    const double e = finite_rel_err(o, ref, t->nv, __func__);
    free(o), free(ref);
    return e;
}

/* The distance between two output files: max |a - b| / max |b|, the measure of
 * docs/spec.md "Accuracy the tests hold". */
static double files_distance(const tensors *t, const char *a, const char *b)
{
    float *x = read_output(t, a, NPY_F32), *y = read_output(t, b, NPY_F32);
    double diff = 0, mag = 0;
    for (size_t i = 0; i < t->nv; ++i) {
        diff = fmax(diff, fabs((double)x[i] - y[i]));
        mag = fmax(mag, fabs((double)y[i]));
    }
    free(x), free(y);
    return diff / mag;
}

/* `mhla run` on q.npy, k.npy, v.npy into `out` with --causal and `extra` (NULL-terminated). */
static result *run_causal(const char *out, const char *const *extra)
{
    const char *args[32] = {"run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", out, "--causal"};
    int n = 10;
    for (; extra && *extra && n < 31; ++extra)
        args[n++] = *extra;
    return finish(spawn(NULL, NULL, args));
}

/* A successful --check run: its printed error within the f32 tolerance for sequences of n tokens. */
static void expect_checked(const result *r, int64_t n)
{
    expect_ok(r);
    const double e = printed_error(r);
    if (!(e >= 0 && e <= mhla_reference_tolerance(MHLA_DTYPE_F32, n)))
        fail_msg("printed max_rel_err %g", e);
}

/* The chunk form: N not a multiple of C, N < C, C = 16, 64, 128 and run's default, both layouts.
 * Without --chunk, run uses the library's C = 64 (part of the model: Mc's rows are chunks), checked
 * against the reference at 64 and shown to differ from C = 128. */
static void test_run_causal_chunk(void **state)
{
    (void)state;
    const struct {
        int64_t b, n;
        const char *chunk; /* NULL: run's default, the library's 64 (MHLA_DEFAULT_CHUNK) */
        mhla_layout layout;
    } cases[] = {
        {2, 100, "16", MHLA_LAYOUT_BNHD}, /* 7 chunks, the last of 4 tokens */
        {2, 40, NULL, MHLA_LAYOUT_BNHD},  /* N < C: one partial chunk */
        {1, 200, NULL, MHLA_LAYOUT_BNHD}, /* 4 chunks of the default size, the last of 8 tokens */
        {1, 130, "64", MHLA_LAYOUT_BNHD}, /* 3 chunks, the last of 2 tokens */
        {1, 200, "128", MHLA_LAYOUT_BNHD}, /* 2 chunks, the last of 72 tokens */
        {2, 100, "16", MHLA_LAYOUT_BHND},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        tensors t = make_inputs(cases[i].b, cases[i].n, 2, 8, 4, cases[i].layout, 0, -1.0f);
        const char *layout = cases[i].layout == MHLA_LAYOUT_BHND ? "bhnd" : "bnhd";
        const result *r = cases[i].chunk ? run_causal("o.npy", ARGS("--chunk", cases[i].chunk, "--layout", layout,
                                                                    "--check"))
                                         : run_causal("o.npy", ARGS("--layout", layout, "--check"));
        expect_checked(r, t.n);
        char line[64];
        snprintf(line, sizeof line, "max_rel_err %.3g\n", printed_error(r));
        assert_string_equal(r->out, line); /* the only line */
        const int64_t c = cases[i].chunk ? atoi(cases[i].chunk) : 64, m = (t.n + c - 1) / c; /* run's default */
        mhla_config cfg = causal_config_for(&t, c, m);
        float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, m);
        const double e = causal_error(&t, &cfg, mc, NULL, 0, "o.npy");
        if (!(e <= mhla_reference_tolerance(MHLA_DTYPE_F32, t.n)))
            fail_msg("case %zu: max_rel_err %g against the causal reference", i, e);
        if (c == 16) { /* the chunk size mattered: C = 64 gives another output */
            mhla_config wide = causal_config_for(&t, 64, 2);
            float *mc2 = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 2);
            expect_matters(causal_reference(&t, &cfg, mc, NULL, 0), causal_reference(&t, &wide, mc2, NULL, 0), t.nv,
                           "--chunk 16");
            free(mc2);
        }
        if (!cases[i].chunk && t.n > 128) { /* the default is 64, not 128: C = 128 gives another output */
            mhla_config wide = causal_config_for(&t, 128, 2);
            float *mc2 = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 2);
            double *wide_ref = causal_reference(&t, &wide, mc2, NULL, 0);
            float *o = read_output(&t, "o.npy", NPY_F32);
            if (!(finite_rel_err(o, wide_ref, t.nv, __func__) > 1e-3))
                fail_msg("case %zu: run's default chunk gave C = 128's output", i);
            free(o), free(wide_ref), free(mc2);
        }
        free(mc);
        assert_string_equal(listing(), "k.npy o.npy q.npy v.npy");
        free_inputs(&t);
        scratch_remove(in_dir("o.npy"));
    }
}

/* --recurrent: the decoder token by token gives the chunk form's numbers (docs/spec.md
 * "Accuracy the tests hold": 1e-5), in both layouts, and with --repeat (16-bit storage:
 * test_run_causal_16bit). */
static void test_run_causal_recurrent(void **state)
{
    (void)state;
    const mhla_layout layouts[2] = {MHLA_LAYOUT_BNHD, MHLA_LAYOUT_BHND};
    for (int l = 0; l < 2; ++l) {
        tensors t = make_inputs(2, 100, 2, 8, 4, layouts[l], 0, -1.0f);
        const char *layout = l ? "bhnd" : "bnhd";
        const result *r = run_causal("chunk.npy", ARGS("--chunk", "16", "--layout", layout, "--check"));
        expect_checked(r, t.n);
        const double chunk_printed = printed_error(r);
        r = run_causal("rec.npy", ARGS("--chunk", "16", "--layout", layout, "--recurrent", "--check"));
        expect_checked(r, t.n);
        const double rec_printed = printed_error(r);
        mhla_config cfg = causal_config_for(&t, 16, 7);
        float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 7);
        const double d = files_distance(&t, "rec.npy", "chunk.npy");
        const double e_rec = causal_error(&t, &cfg, mc, NULL, 0, "rec.npy");
        const double e_chunk = causal_error(&t, &cfg, mc, NULL, 0, "chunk.npy");
        if (!(d <= 1e-5 && e_rec <= 1e-5 && e_chunk <= 1e-5))
            fail_msg("%s: recurrent vs chunk %g, vs the reference %g and %g", layout, d, e_rec, e_chunk);
        /* What was printed is what was written. */
        assert_true(fabs(rec_printed - e_rec) <= 0.01 * e_rec + 1e-12);
        assert_true(fabs(chunk_printed - e_chunk) <= 0.01 * e_chunk + 1e-12);
        free(mc);
        assert_string_equal(listing(), "chunk.npy k.npy q.npy rec.npy v.npy");
        free_inputs(&t);
        scratch_remove(in_dir("chunk.npy"));
        scratch_remove(in_dir("rec.npy"));
    }
    /* --repeat times the whole token loop: a timing line first, then the check; the output is
     * still the chunk form's after several runs (the decoder is reset between them). */
    tensors t = make_inputs(1, 70, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    const result *r = run_causal("rec.npy", ARGS("--chunk", "64", "--recurrent", "--repeat", "3", "--check"));
    expect_ok(r);
    double med = -1, lo = -1, hi = -1;
    if (sscanf(timing_line(r->out), "time_ms median %lf min %lf max %lf\n", &med, &lo, &hi) != 3)
        fail_msg("no time_ms line first: '%s'", r->out);
    assert_true(lo > 0 && lo <= med && med <= hi);
    assert_true(printed_error(r) <= 1e-5);
    mhla_config cfg = causal_config_for(&t, 64, 2);
    float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 2);
    assert_true(causal_error(&t, &cfg, mc, NULL, 0, "rec.npy") <= 1e-5);
    free(mc);
    free_inputs(&t);
}

/* A trained Mc larger than the sequence needs: only its leading ceil(N/C) block's lower triangle
 * is read (NaN everywhere else), by the chunk form and by the decoder. */
static void test_run_causal_larger_mixing(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    enum { M = 7, R = 10 }; /* ceil(100 / 16) = 7 chunks, a 10 x 10 matrix */
    float big[R * R], lead[M * M];
    fill_uniform(big, R * R, 91, 0.1f, 2.0f);
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < R; ++j)
            if (j > i || i >= M)
                big[i * R + j] = NAN;
    for (int i = 0; i < M; ++i)
        memcpy(lead + i * M, big + i * R, M * sizeof *lead);
    const int64_t s_big[2] = {R, R}, s_lead[2] = {M, M};
    write_npy("big.npy", "<f4", 2, s_big, big, sizeof big);
    write_npy("lead.npy", "<f4", 2, s_lead, lead, sizeof lead);
    expect_checked(run_causal("o_big.npy", ARGS("--chunk", "16", "--mixing", "big.npy", "--check")), t.n);
    expect_checked(run_causal("o_lead.npy", ARGS("--chunk", "16", "--mixing", "lead.npy", "--check")), t.n);
    expect_checked(run_causal("o_rec.npy", ARGS("--chunk", "16", "--mixing", "big.npy", "--recurrent", "--check")),
                   t.n);
    /* The larger matrix gives exactly its leading block's output. */
    float *a = read_output(&t, "o_big.npy", NPY_F32), *b = read_output(&t, "o_lead.npy", NPY_F32);
    assert_memory_equal(a, b, t.nv * sizeof *a);
    free(a), free(b);
    mhla_config cfg = causal_config_for(&t, 16, M);
    assert_true(causal_error(&t, &cfg, lead, NULL, 0, "o_big.npy") <= 1e-5);
    assert_true(files_distance(&t, "o_rec.npy", "o_big.npy") <= 1e-5);
    /* The matrix mattered: causal-uniform gives another output. */
    float *uniform = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, M);
    expect_matters(causal_reference(&t, &cfg, lead, NULL, 0), causal_reference(&t, &cfg, uniform, NULL, 0), t.nv,
                   "--mixing big.npy");
    free(uniform);
    assert_string_equal(listing(), "big.npy k.npy lead.npy o_big.npy o_lead.npy o_rec.npy q.npy v.npy");
    free_inputs(&t);
}

/* --cu-seqlens: sequences of 1, 63, 64, 65 and 300 tokens packed in [1,493,H,D] (int32 offsets;
 * int64 ones with an empty sequence too), by the chunk form and the decoder, in both layouts. */
static void test_run_causal_packed(void **state)
{
    (void)state;
    const int32_t cu32[6] = {0, 1, 64, 128, 193, 493};
    const int64_t cu64[7] = {0, 1, 64, 64, 128, 193, 493};
    const int32_t cu64_as32[7] = {0, 1, 64, 64, 128, 193, 493};
    const int64_t s32[1] = {6}, s64[1] = {7};
    const mhla_layout layouts[2] = {MHLA_LAYOUT_BNHD, MHLA_LAYOUT_BHND};
    for (int l = 0; l < 2; ++l) {
        tensors t = make_inputs(1, 493, 2, 8, 4, layouts[l], 0, -1.0f);
        write_npy("cu32.npy", "<i4", 1, s32, cu32, sizeof cu32);
        write_npy("cu64.npy", "<i8", 1, s64, cu64, sizeof cu64);
        const char *layout = l ? "bhnd" : "bnhd";
        mhla_config cfg = causal_config_for(&t, 64, 5); /* ceil(300 / 64) = 5 chunks */
        cfg.varlen = 1;
        float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 5);
        for (int f = 0; f < (l ? 1 : 2); ++f) { /* BHND: the int32 file only */
            const char *file = f ? "cu64.npy" : "cu32.npy";
            const int32_t *cu = f ? cu64_as32 : cu32;
            const size_t seqs = f ? 6 : 5;
            expect_checked(run_causal("chunk.npy", ARGS("--chunk", "64", "--cu-seqlens", file, "--layout", layout,
                                                        "--check")),
                           300);
            expect_checked(run_causal("rec.npy", ARGS("--chunk", "64", "--cu-seqlens", file, "--layout", layout,
                                                      "--recurrent", "--check")),
                           300);
            const double e_chunk = causal_error(&t, &cfg, mc, cu, seqs, "chunk.npy");
            const double e_rec = causal_error(&t, &cfg, mc, cu, seqs, "rec.npy");
            const double d = files_distance(&t, "rec.npy", "chunk.npy");
            if (!(e_chunk <= 1e-5 && e_rec <= 1e-5 && d <= 1e-5))
                fail_msg("%s %s: chunk %g, recurrent %g against the reference; %g apart", layout, file, e_chunk, e_rec,
                         d);
        }
        if (l == 0) { /* --repeat on a packed batch: a timing line, then the check */
            const result *r =
                run_causal("chunk.npy", ARGS("--chunk", "64", "--cu-seqlens", "cu32.npy", "--repeat", "2", "--check"));
            expect_ok(r);
            (void)timing_line(r->out);
            assert_true(printed_error(r) <= 1e-5);
            assert_true(causal_error(&t, &cfg, mc, cu32, 5, "chunk.npy") <= 1e-5);
        }
        /* The offsets mattered: one sequence of 493 tokens gives another output. */
        mhla_config whole = causal_config_for(&t, 64, 8);
        float *mc8 = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 8);
        expect_matters(causal_reference(&t, &cfg, mc, cu32, 5), causal_reference(&t, &whole, mc8, NULL, 0), t.nv,
                       "--cu-seqlens");
        free(mc8), free(mc);
        assert_string_equal(listing(), "chunk.npy cu32.npy cu64.npy k.npy q.npy rec.npy v.npy");
        free_inputs(&t);
        scratch_remove(in_dir("chunk.npy"));
        scratch_remove(in_dir("rec.npy"));
    }
    /* float16 files in BHND: f16 storage, the decoder's per-sequence gather of 2-byte elements. */
    tensors t = make_inputs(1, 493, 2, 8, 4, MHLA_LAYOUT_BHND, 1, -1.0f);
    const double tol = mhla_reference_tolerance(MHLA_DTYPE_F16, 300);
    expect_ok(run_causal("chunk.npy", ARGS("--chunk", "64", "--cu-seqlens", "cu32.npy", "--layout", "bhnd")));
    expect_ok(run_causal("rec.npy", ARGS("--chunk", "64", "--cu-seqlens", "cu32.npy", "--layout", "bhnd", "--recurrent")));
    mhla_config cfg = causal_config_for(&t, 64, 5);
    cfg.varlen = 1;
    float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 5);
    double *ref = causal_reference(&t, &cfg, mc, cu32, 5);
    float *chunk = read_output(&t, "chunk.npy", NPY_F16), *rec = read_output(&t, "rec.npy", NPY_F16);
    const double e_chunk = finite_rel_err(chunk, ref, t.nv, __func__), e_rec = finite_rel_err(rec, ref, t.nv, __func__);
    if (!(e_chunk <= tol + 0x1p-11 && e_rec <= tol + 0x1p-11))
        fail_msg("float16 BHND: chunk %g, decoder %g against the reference", e_chunk, e_rec);
    free(chunk), free(rec), free(ref), free(mc);
    free_inputs(&t);
}

static void set_paper(mhla_config *c) { c->normalizer = MHLA_NORMALIZER_PAPER; }
static void set_half_scale(mhla_config *c) { c->scale = 0.5f; }
static void set_elu(mhla_config *c) { c->feature_map = MHLA_FEATURE_ELU1; }

/* Options in causal mode, each checked against the reference and shown to matter, with the chunk
 * form and with the decoder. */
static void test_run_causal_options(void **state)
{
    (void)state;
    const struct {
        const char *args[6];
        void (*apply)(mhla_config *);
        mhla_init_kind init;
        int no_contrast;
    } cases[] = {
        {{"--normalizer", "paper"}, set_paper, MHLA_INIT_CAUSAL_UNIFORM, 0},
        {{"--normalizer", "paper", "--recurrent"}, set_paper, MHLA_INIT_CAUSAL_UNIFORM, 0},
        {{"--scale", "0.5"}, set_half_scale, MHLA_INIT_CAUSAL_UNIFORM, 0},
        {{"--feature-map", "elu1", "--recurrent"}, set_elu, MHLA_INIT_CAUSAL_UNIFORM, 0},
        {{"--init", "linear"}, NULL, MHLA_INIT_LINEAR, 0},
        {{"--normalizer", "none", "--feature-map", "relu", "--init", "causal-uniform"}, NULL, MHLA_INIT_CAUSAL_UNIFORM,
         1},
    };
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, 0.0f);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *extra[12] = {"--chunk", "16", "--check"};
        int n = 3;
        for (int a = 0; a < 6 && cases[i].args[a]; ++a)
            extra[n++] = cases[i].args[a];
        expect_checked(run_causal("o.npy", extra), t.n);
        mhla_config cfg = causal_config_for(&t, 16, 7), plain = cfg;
        if (cases[i].apply)
            cases[i].apply(&cfg);
        float *mc = chunk_mixing(cases[i].init, 7), *uniform = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 7);
        const double e = causal_error(&t, &cfg, mc, NULL, 0, "o.npy");
        if (!(e <= 1e-5))
            fail_msg("%s %s: max_rel_err %g", cases[i].args[0], cases[i].args[1], e);
        if (!cases[i].no_contrast)
            expect_matters(causal_reference(&t, &cfg, mc, NULL, 0), causal_reference(&t, &plain, uniform, NULL, 0),
                           t.nv, cases[i].args[0]);
        free(mc), free(uniform);
        assert_string_equal(listing(), "k.npy o.npy q.npy v.npy");
    }
    free_inputs(&t);
}

/* float16 and bfloat16 storage in causal mode, the chunk form and the decoder: within docs/spec.md's
 * tolerance of the reference on the rounded inputs, and of each other. Float16 files select f16
 * storage by default; --dtype f32 computes them in float32. */
static void test_run_causal_16bit(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 1, -1.0f);
    const struct {
        const char *dtype;
        mhla_dtype storage;
    } cases[] = {{"f16", MHLA_DTYPE_F16}, {"bf16", MHLA_DTYPE_BF16}, {"f32", MHLA_DTYPE_F32}, {NULL, MHLA_DTYPE_F16}};
    const mhla_config cfg = causal_config_for(&t, 16, 7);
    float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 7);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *dtype = cases[i].dtype ? cases[i].dtype : "f16";
        const double tol = mhla_reference_tolerance(cases[i].storage, t.n);
        const result *r = cases[i].dtype ? run_causal("chunk.npy", ARGS("--chunk", "16", "--dtype", dtype, "--check"))
                                         : run_causal("chunk.npy", ARGS("--chunk", "16", "--check"));
        expect_ok(r);
        const double e = printed_error(r);
        if (!(e <= tol) || (cases[i].storage != MHLA_DTYPE_F32 && !(e > 1e-6))) /* 16 bits were stored */
            fail_msg("%s: the chunk form printed %g", dtype, e);
        r = cases[i].dtype ? run_causal("rec.npy", ARGS("--chunk", "16", "--dtype", dtype, "--recurrent", "--check"))
                           : run_causal("rec.npy", ARGS("--chunk", "16", "--recurrent", "--check"));
        expect_ok(r);
        if (!(printed_error(r) <= tol))
            fail_msg("%s: the decoder printed %g", dtype, printed_error(r));
        /* The files (float16, as the inputs) against the reference on the inputs rounded to the
         * storage type, and the decoder against the chunk form. */
        tensors rounded = t;
        float *copies[3] = {NULL, NULL, NULL};
        const size_t counts[3] = {t.nq, t.nq, t.nv};
        float *const src[3] = {t.q, t.k, t.v};
        uint16_t *bits = malloc(t.nq > t.nv ? t.nq * sizeof *bits : t.nv * sizeof *bits);
        assert_non_null(bits);
        for (int x = 0; x < 3; ++x) {
            copies[x] = malloc(counts[x] * sizeof(float));
            assert_non_null(copies[x]);
            memcpy(copies[x], src[x], counts[x] * sizeof(float));
            if (cases[i].storage != MHLA_DTYPE_F32) {
                mhla_convert(cases[i].storage, bits, MHLA_DTYPE_F32, src[x], counts[x]);
                mhla_convert(MHLA_DTYPE_F32, copies[x], cases[i].storage, bits, counts[x]);
            }
        }
        free(bits);
        rounded.q = copies[0], rounded.k = copies[1], rounded.v = copies[2];
        double *ref = causal_reference(&rounded, &cfg, mc, NULL, 0);
        float *chunk = read_output(&t, "chunk.npy", NPY_F16), *rec = read_output(&t, "rec.npy", NPY_F16);
        const double e_chunk = finite_rel_err(chunk, ref, t.nv, __func__), e_rec = finite_rel_err(rec, ref, t.nv, __func__);
        double diff = 0, mag = 0;
        for (size_t j = 0; j < t.nv; ++j)
            diff = fmax(diff, fabs((double)rec[j] - chunk[j])), mag = fmax(mag, fabs((double)chunk[j]));
        if (!(e_chunk <= tol + 0x1p-11 && e_rec <= tol + 0x1p-11 && diff / mag <= tol))
            fail_msg("%s: chunk %g, decoder %g against the reference; %g apart", dtype, e_chunk, e_rec, diff / mag);
        free(chunk), free(rec), free(ref);
        for (int x = 0; x < 3; ++x)
            free(copies[x]);
        assert_string_equal(listing(), "chunk.npy k.npy q.npy rec.npy v.npy");
    }
    free(mc);
    free_inputs(&t);
}

/* ---- run: errors --------------------------------------------------------------------------- */

static void test_run_usage_errors(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    float mc[16] = {0};
    const int64_t mshape[2] = {4, 4};
    write_npy("mc.npy", "<f4", 2, mshape, mc, sizeof mc);
    assert_int_equal(mkdir(in_dir("sub"), 0755), 0);
    const char *before = "k.npy mc.npy q.npy sub v.npy";
    const struct {
        int code;
        int bare; /* 1: args alone; 0: after --q q.npy --k k.npy --v v.npy --out o.npy */
        const char *args[12];
        const char *text;
    } cases[] = {
        {2, 1, {"--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4"}, "run: missing --q Q.npy (see 'mhla run --help')"},
        {2, 1, {"--q", "q.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4"}, "run: missing --k K.npy"},
        {2, 1, {"--q", "q.npy", "--k", "k.npy", "--out", "o.npy", "--blocks", "4"}, "run: missing --v V.npy"},
        {2, 1, {"--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--blocks", "4"}, "run: missing --out O.npy"},
        {2, 0, {"--grid", "64"}, "run: missing --blocks M|BHxBW|BTxBHxBW"},
        {2, 0, {"--blocks", "4", "--bogus"}, "run: unknown option '--bogus' (see 'mhla run --help')"},
        {2, 0, {"--blocks", "4", "-x"}, "run: unknown option '-x'"},
        {2, 0, {"--blocks", "4", "extra"}, "run: unexpected argument 'extra'"},
        {2, 0, {"--blocks", "4", "--eps", "1", "--eps", "2"}, "--eps: given twice"},
        {2, 0, {"--blocks", "4", "--eps"}, "--eps: missing value X"},
        {2, 0, {"--blocks", "4", "--device="}, "--device: empty value (expected SPEC)"},
        {2, 0, {"--blocks", "4", "--check=yes"}, "--check: is a flag and takes no value, got 'yes'"},
        {2, 0, {"--blocks", "4", "--layout", "nhwc"}, "--layout nhwc: unknown layout 'nhwc' (expected bnhd|bhnd)"},
        {2, 0, {"--blocks", "4", "--feature-map", "gelu"}, "--feature-map gelu: unknown feature map 'gelu' (expected none|relu|relu-eps|elu1)"},
        {2, 0, {"--blocks", "4", "--normalizer", "softmax"}, "--normalizer softmax: unknown normalizer 'softmax' (expected paper|official|none)"},
        {2, 0, {"--blocks", "4", "--dtype", "f64"}, "--dtype f64: unknown dtype 'f64' (expected f32|f16|bf16)"},
        {2, 0, {"--blocks", "4", "--feature-eps", "abc"}, "--feature-eps abc: not a number"},
        {2, 0, {"--blocks", "4", "--feature-eps", "-1"}, "--feature-eps -1: must be >= 0"},
        {2, 0, {"--blocks", "4", "--eps", "inf"}, "--eps inf: must be finite and within the float range"},
        {2, 0, {"--blocks", "4", "--eps", "1e39"}, "--eps 1e39: must be finite and within the float range"},
        {2, 0, {"--blocks", "4", "--eps", " 1"}, "--eps  1: not a number"},
        {2, 0, {"--blocks", "4", "--scale", "0"}, "--scale 0: must be nonzero"},
        {2, 0, {"--blocks", "4", "--scale", "nan"}, "--scale nan: must be finite"},
        {2, 0, {"--blocks", "4", "--repeat", "0"}, "--repeat 0: must be between 1 and 1000000"},
        {2, 0, {"--blocks", "4", "--repeat", "2.5"}, "--repeat 2.5: not an integer"},
        {2, 0, {"--blocks", "4", "--grid", "8x"}, "--grid 8x: expected N, HxW or TxHxW"},
        {2, 0, {"--blocks", "4", "--grid", "8xa"}, "--grid 8xa: 'a' is not an integer"},
        {2, 0, {"--blocks", "4", "--grid", "0x8"}, "--grid 0x8: extent 0 must be between 1 and 2147483647"},
        {2, 0, {"--blocks", "4", "--grid", "2x2x4x4"}, "--grid 2x2x4x4: at most 3 extents"},
        {2, 0, {"--blocks", "4", "--grid", "65536x65536"}, "--grid 65536x65536: more than 2147483647 elements"},
        {2, 0, {"--blocks", "2x2", "--grid", "8x9"}, "--grid 8x9: 72 tokens, but --q q.npy has N = 64"},
        {2, 0, {"--blocks", "5"}, "--blocks 5: does not divide the token grid 64 (T = 64 is not divisible by 5)"},
        {2, 0, {"--grid", "8x8", "--blocks", "3x2"}, "--blocks 3x2: does not divide the token grid 8x8 (Hs = 8 is not divisible by 3)"},
        {2, 0, {"--grid", "4x4x4", "--blocks", "2x2x3"}, "--blocks 2x2x3: does not divide the token grid 4x4x4 (Ws = 4 is not divisible by 3)"},
        {2, 0, {"--grid", "8x8", "--blocks", "4"}, "--blocks 4: a 1D block grid for the 2D token grid 8x8 (give BHxBW)"},
        {2, 0, {"--blocks", "2x2"}, "--blocks 2x2: a 2D block grid for the 1D token grid 64 (give M)"},
        {2, 0, {"--blocks", "4", "--init", "foo"}, "--init foo: unknown init kind 'foo'"},
        {2, 0, {"--blocks", "4", "--init", "exp:0"}, "--init exp:0: mhla_mixing_init: exp sigma must be finite and > 0, got 0"},
        {2, 0, {"--blocks", "4", "--init", "local:-1"}, "local threshold must be finite and >= 0, got -1"},
        {2, 0, {"--blocks", "4", "--init", "gaussian:2"}, "--init gaussian:2: gaussian takes no parameter"},
        {2, 0, {"--blocks", "4", "--init", "exp:x"}, "--init exp:x: parameter 'x' is not a number"},
        {2, 0, {"--blocks", "4", "--init", "cos", "--mixing", "mc.npy"}, "--mixing and --init: give one"},
        {2, 0, {"--causal", "--chunk", "0"}, "--chunk 0: must be between 1 and 2147483647"},
        {2, 0, {"--causal", "--chunk", "1.5"}, "--chunk 1.5: not an integer"},
        {2, 0, {"--blocks", "4", "--chunk", "16"}, "--chunk 16: only with --causal"},
        {2, 0, {"--blocks", "4", "--recurrent"}, "--recurrent: only with --causal"},
        {2, 0, {"--blocks", "4", "--cu-seqlens", "cu.npy"}, "--cu-seqlens cu.npy: only with --causal"},
        {2, 0, {"--causal", "--blocks", "4"}, "--blocks 4: not with --causal (its blocks are chunks of --chunk tokens)"},
        {2, 0, {"--causal", "--recurrent=yes"}, "--recurrent: is a flag and takes no value, got 'yes'"},
        {2, 0, {"--causal", "--cu-seqlens"}, "--cu-seqlens: missing value CU.npy"},
        {2, 1, {"--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "nodir/o.npy", "--blocks", "4"}, "--out nodir/o.npy: cannot create a file in directory 'nodir': No such file or directory"},
        {2, 1, {"--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "sub", "--blocks", "4"}, "--out sub: is a directory"},
        {1, 0, {"--blocks", "4", "--device", "no-such-device"}, "--device no-such-device: no OpenCL device matches device spec 'no-such-device'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *args[24] = {"run"};
        int n = 1;
        if (!cases[i].bare) {
            const char *base[] = {"--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"};
            for (int a = 0; a < 8; ++a)
                args[n++] = base[a];
        }
        for (int a = 0; a < 12 && cases[i].args[a]; ++a)
            args[n++] = cases[i].args[a];
        expect_fail(finish(spawn(NULL, NULL, args)), cases[i].code, cases[i].text);
        if (strcmp(listing(), before) != 0)
            fail_msg("case %zu (%s) left: %s", i, cases[i].text, listing());
    }
    rmdir(in_dir("sub"));
    free_inputs(&t);
}

/* Input files that are missing, damaged, of the wrong kind or inconsistent with each other. */
static void test_run_input_errors(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    const size_t qb = t.nq * sizeof(float);
    const int64_t s_q[4] = {1, 64, 2, 8}, s_n32[4] = {1, 32, 2, 8}, s_dk4[4] = {1, 64, 2, 4}, s_h3[4] = {1, 64, 3, 4}, s_h3k[4] = {1, 64, 3, 8},
                  s_3d[3] = {64, 2, 8}, s_zero[4] = {1, 0, 2, 8}, s_big[4] = {1, 4, 1, 300}, s_mc5[2] = {5, 5},
                  s_mc1[1] = {16};
    float *big = calloc(4 * 300, sizeof *big);
    assert_non_null(big);
    write_npy("n32.npy", "<f4", 4, s_n32, t.q, qb / 2);
    write_npy("dk4.npy", "<f4", 4, s_dk4, t.q, qb / 2);
    write_npy("h3.npy", "<f4", 4, s_h3, t.q, 64 * 3 * 4 * sizeof(float));
    float *h3k = calloc(64 * 3 * 8, sizeof *h3k);
    assert_non_null(h3k);
    write_npy("h3k.npy", "<f4", 4, s_h3k, h3k, 64 * 3 * 8 * sizeof *h3k);
    free(h3k);
    write_npy("rank3.npy", "<f4", 3, s_3d, t.q, qb);
    write_npy("zero.npy", "<f4", 4, s_zero, NULL, 0);
    write_npy("big.npy", "<f4", 4, s_big, big, 4 * 300 * sizeof *big);
    write_npy("f8.npy", "<f8", 4, s_q, t.q, qb); /* the bytes do not matter: the dtype is refused first */
    write_npy("be.npy", ">f4", 4, s_q, t.q, qb);
    write_npy("trunc.npy", "<f4", 4, s_q, t.q, qb - 8);
    write_npy("mc5.npy", "<f4", 2, s_mc5, t.q, 25 * sizeof(float));
    write_npy("mc1.npy", "<f4", 1, s_mc1, t.q, 16 * sizeof(float));
    write_npy("mc16.npy", "<f2", 2, s_mc5, t.q, 25 * 2);
    write_raw_npy("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 64, 2, 8), }", t.q, qb);
    write_raw_npy("huge.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776, 1, 1), }",
                  t.q, 64);
    FILE *f = fopen(in_dir("text.npy"), "w");
    assert_non_null(f);
    fputs("1.0 2.0 3.0\n", f);
    fclose(f);
    free(big);
    const char *before = listing();
    char before_copy[4096];
    snprintf(before_copy, sizeof before_copy, "%s", before);
    const struct {
        const char *q, *k, *v, *extra[4];
        const char *text;
    } cases[] = {
        {"missing.npy", "k.npy", "v.npy", {0}, "--q missing.npy: cannot open: No such file or directory"},
        {"q.npy", "text.npy", "v.npy", {0}, "--k text.npy: not a .npy file"},
        {"q.npy", "k.npy", "trunc.npy", {0}, "--v trunc.npy: truncated .npy data: shape (1, 64, 2, 8) of float32 needs 4096 bytes, the file has 4088"},
        {"be.npy", "k.npy", "v.npy", {0}, "--q be.npy: big-endian float32 ('>f4') is not supported"},
        {"q.npy", "fortran.npy", "v.npy", {0}, "--k fortran.npy: Fortran-order arrays are not supported"},
        {"q.npy", "k.npy", "f8.npy", {0}, "--v f8.npy: dtype '<f8' (float64) is not supported"},
        {"huge.npy", "k.npy", "v.npy", {0}, "--q huge.npy: shape (1099511627776, 1099511627776, 1, 1) has more elements than memory can address"},
        {"rank3.npy", "k.npy", "v.npy", {0}, "--q rank3.npy: expected 4 dimensions [B,N,H,Dk] (layout bnhd), got shape (64, 2, 8)"},
        {"q.npy", "k.npy", "rank3.npy", {"--layout", "bhnd"}, "--v rank3.npy: expected 4 dimensions [B,H,N,Dv] (layout bhnd)"},
        {"q.npy", "n32.npy", "v.npy", {0}, "--v v.npy: shape (1, 64, 2, 4) does not match --k n32.npy (1, 32, 2, 8) (B, N and H must agree)"},
        {"q.npy", "dk4.npy", "v.npy", {0}, "--k dk4.npy: shape (1, 64, 2, 4) does not match --q q.npy (1, 64, 2, 8) (B and Dk must agree)"},
        {"q.npy", "k.npy", "h3.npy", {0}, "--v h3.npy: shape (1, 64, 3, 4) does not match --k k.npy (1, 64, 2, 8) (B, N and H must agree)"},
        /* cross-attention and grouped heads: k and v with their own N and H */
        {"q.npy", "n32.npy", "n32.npy", {0}, "missing --kv-blocks M|BHxBW|BTxBHxBW: the key/value grid 32x1x1 is not the query grid 64x1x1"},
        {"q.npy", "n32.npy", "n32.npy", {"--kv-blocks", "3"}, "--kv-blocks 3: does not divide the token grid 32 (T = 32 is not divisible by 3)"},
        {"q.npy", "n32.npy", "n32.npy", {"--kv-blocks", "2", "--mixing", "mc5.npy"}, "--mixing mc5.npy: shape (5, 5), expected (4, 2): rows for the 4 query blocks, columns for the 2 key/value blocks"},
        {"q.npy", "n32.npy", "n32.npy", {"--kv-grid", "4x4", "--kv-blocks", "2"}, "--kv-grid 4x4: 16 tokens, but --k n32.npy has N = 32"},
        {"q.npy", "h3k.npy", "h3k.npy", {0}, "--k h3k.npy: 3 key/value heads do not divide --q q.npy's 2 heads"},
        {"q.npy", "k.npy", "h3.npy", {"--layout", "bhnd"}, "(B, H and N must agree)"},
        {"zero.npy", "zero.npy", "zero.npy", {0}, "--q zero.npy: shape (1, 0, 2, 8): every extent must be between 1 and 2147483647"},
        {"big.npy", "big.npy", "big.npy", {"--blocks", "2"}, "--q big.npy, --v big.npy: dk = 300 exceeds the largest supported head dimension 256"},
        {"q.npy", "k.npy", "v.npy", {"--mixing", "mc5.npy"}, "--mixing mc5.npy: shape (5, 5), expected (4, 4) for the 4 blocks of --blocks 4"},
        {"q.npy", "k.npy", "v.npy", {"--mixing", "mc1.npy"}, "--mixing mc1.npy: shape (16,), expected (4, 4)"},
        {"q.npy", "k.npy", "v.npy", {"--mixing", "mc16.npy"}, "--mixing mc16.npy: dtype float16, expected float32"},
        {"q.npy", "k.npy", "v.npy", {"--mixing", "trunc.npy"}, "--mixing trunc.npy: truncated .npy data"},
        {"q.npy", "k.npy", "v.npy", {"--mixing", "nope.npy"}, "--mixing nope.npy: cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *args[24] = {"run", "--q", cases[i].q, "--k", cases[i].k, "--v", cases[i].v, "--out", "o.npy"};
        int n = 9, has_blocks = 0;
        for (int a = 0; a < 4 && cases[i].extra[a]; ++a) {
            has_blocks |= strcmp(cases[i].extra[a], "--blocks") == 0;
            args[n++] = cases[i].extra[a];
        }
        if (!has_blocks)
            args[n++] = "--blocks", args[n++] = "4";
        expect_fail(finish(spawn(NULL, NULL, args)), 2, cases[i].text);
        if (strcmp(listing(), before_copy) != 0)
            fail_msg("case %zu (%s) left: %s", i, cases[i].text, listing());
    }
    free_inputs(&t);
}

/* Every error of the causal options: exit 2, one line naming the option or file and the value, and
 * neither an output nor a temporary file left behind. */
static void test_run_causal_errors(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    const int64_t s_b2[4] = {2, 50, 2, 8}, s_mc6[2] = {6, 6}, s_rect[2] = {7, 8}, s3[1] = {3}, s4[1] = {4},
                  s2x2[2] = {2, 2}, s1[1] = {1};
    write_npy("q2.npy", "<f4", 4, s_b2, t.q, t.nq * sizeof(float)); /* the same values as B = 2, N = 50 */
    float mc[7 * 8];
    fill_uniform(mc, 7 * 8, 5, 0.1f, 1.0f);
    write_npy("mc6.npy", "<f4", 2, s_mc6, mc, 36 * sizeof(float));
    write_npy("rect.npy", "<f4", 2, s_rect, mc, sizeof mc);
    const int32_t ok[3] = {0, 50, 100}, start[3] = {2, 50, 100}, dec[4] = {0, 60, 50, 100}, end[3] = {0, 50, 99},
                  neg[3] = {0, -5, 100}, two_d[4] = {0, 50, 50, 100}, zero[1] = {0}, long_seq[3] = {0, 3, 100};
    const int64_t big[3] = {0, (int64_t)1 << 32, 100};
    const float as_float[3] = {0, 50, 100};
    write_npy("cu_ok.npy", "<i4", 1, s3, ok, sizeof ok);
    write_npy("cu_start.npy", "<i4", 1, s3, start, sizeof start);
    write_npy("cu_dec.npy", "<i4", 1, s4, dec, sizeof dec);
    write_npy("cu_end.npy", "<i4", 1, s3, end, sizeof end);
    write_npy("cu_neg.npy", "<i4", 1, s3, neg, sizeof neg);
    write_npy("cu_2d.npy", "<i4", 2, s2x2, two_d, sizeof two_d);
    write_npy("cu_one.npy", "<i4", 1, s1, zero, sizeof zero);
    write_npy("cu_long.npy", "<i4", 1, s3, long_seq, sizeof long_seq);
    write_npy("cu_big.npy", "<i8", 1, s3, big, sizeof big);
    write_npy("cu_f4.npy", "<f4", 1, s3, as_float, sizeof as_float);
    write_npy("cu_be.npy", ">i4", 1, s3, ok, sizeof ok); /* the bytes do not matter: refused first */
    char before[4096];
    snprintf(before, sizeof before, "%s", listing());
    const struct {
        const char *args[10];
        const char *text;
    } cases[] = {
        {{"--causal", "--normalizer", "official"}, "--normalizer official: not in causal mode (it is defined for block grids; --causal takes none or paper)"},
        {{"--causal", "--blocks", "4"}, "--blocks 4: not with --causal"},
        {{"--causal", "--grid", "10x10"}, "--grid 10x10: causal mode is 1D (give --grid N, or leave it out)"},
        {{"--causal", "--grid", "1x1x100"}, "--grid 1x1x100: causal mode is 1D"},
        {{"--causal", "--grid", "99"}, "--grid 99: 99 tokens, but --q q.npy has N = 100"},
        {{"--causal", "--chunk", "16", "--mixing", "mc6.npy"}, "--mixing mc6.npy: the sequence of 100 tokens is longer than chunk * rows(Mc) = 16 * 6 = 96"},
        {{"--causal", "--chunk", "16", "--mixing", "mc6.npy", "--recurrent"}, "--mixing mc6.npy: the sequence of 100 tokens is longer than chunk * rows(Mc) = 16 * 6 = 96"},
        {{"--causal", "--chunk", "16", "--mixing", "mc6.npy", "--cu-seqlens", "cu_long.npy"}, "--mixing mc6.npy: sequence 1 of --cu-seqlens cu_long.npy (cu_seqlens[1] = 3 .. cu_seqlens[2] = 100) has 97 tokens, longer than chunk * rows(Mc) = 16 * 6 = 96"},
        {{"--causal", "--mixing", "rect.npy"}, "--mixing rect.npy: shape (7, 8), expected a square matrix of at least (2, 2) for the 2 chunks of 64 tokens"},
        {{"--causal", "--cu-seqlens", "cu_start.npy"}, "--cu-seqlens cu_start.npy: cu_seqlens[0] must be 0, got 2"},
        {{"--causal", "--cu-seqlens", "cu_dec.npy"}, "--cu-seqlens cu_dec.npy: offsets must not decrease: cu_seqlens[2] = 50 < cu_seqlens[1] = 60"},
        {{"--causal", "--cu-seqlens", "cu_neg.npy", "--recurrent"}, "--cu-seqlens cu_neg.npy: offsets must not decrease: cu_seqlens[1] = -5 < cu_seqlens[0] = 0"},
        {{"--causal", "--cu-seqlens", "cu_end.npy"}, "--cu-seqlens cu_end.npy: cu_seqlens[2] = 99 must equal N = 100, the tokens of --q q.npy"},
        {{"--causal", "--cu-seqlens", "cu_f4.npy"}, "--cu-seqlens cu_f4.npy: dtype float32, expected int32 or int64 offsets"},
        {{"--causal", "--cu-seqlens", "cu_2d.npy"}, "--cu-seqlens cu_2d.npy: shape (2, 2), expected a 1-D array of S+1 >= 2 offsets"},
        {{"--causal", "--cu-seqlens", "cu_one.npy"}, "--cu-seqlens cu_one.npy: shape (1,), expected a 1-D array"},
        {{"--causal", "--cu-seqlens", "cu_big.npy"}, "--cu-seqlens cu_big.npy: int64 element 1 = 4294967296 is outside the int32 range"},
        {{"--causal", "--cu-seqlens", "cu_be.npy"}, "--cu-seqlens cu_be.npy: big-endian int32 ('>i4') is not supported"},
        {{"--causal", "--cu-seqlens", "nope.npy"}, "--cu-seqlens nope.npy: cannot open: No such file or directory"},
        {{"--blocks", "4", "--cu-seqlens", "cu_ok.npy"}, "--cu-seqlens cu_ok.npy: only with --causal"},
        {{"--causal", "--chunk", "0"}, "--chunk 0: must be between 1 and 2147483647"},
        {{"--causal", "--init", "exp:0"}, "--init exp:0: mhla_mixing_init: exp sigma must be finite and > 0, got 0"},
        {{"--causal", "--q", "cu_ok.npy"}, "--q: given twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *args[24] = {"run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy"};
        int n = 9;
        for (int a = 0; a < 10 && cases[i].args[a]; ++a)
            args[n++] = cases[i].args[a];
        expect_fail(finish(spawn(NULL, NULL, args)), 2, cases[i].text);
        if (strcmp(listing(), before) != 0)
            fail_msg("case %zu (%s) left: %s", i, cases[i].text, listing());
    }
    /* Packed sequences need batch 1; integer q/k/v are refused. */
    expect_fail(MHLA("run", "--q", "q2.npy", "--k", "q2.npy", "--v", "q2.npy", "--out", "o.npy", "--causal",
                     "--cu-seqlens", "cu_ok.npy"),
                2, "--cu-seqlens cu_ok.npy: packed sequences need batch 1 ([1,N,H,D]), but --q q2.npy has B = 2");
    expect_fail(MHLA("run", "--q", "cu_ok.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--causal"), 2,
                "--q cu_ok.npy: dtype int32, expected float32 or float16");
    assert_string_equal(listing(), before);
    free_inputs(&t);
}

/* ---- failures after the work started ----------------------------------------------------- */

/* A copy of the kernels in <dir>/<name> where `file` has `from` replaced by `to` (once). */
static const char *kernel_variant(const char *name, const char *file, const char *from, const char *to)
{
    static char kdir[600];
    snprintf(kdir, sizeof kdir, "%s/%s", dir, name);
    assert_int_equal(mkdir(kdir, 0755), 0);
    DIR *d = opendir(kernel_src);
    assert_non_null(d);
    struct dirent *e;
    int replaced = 0;
    while ((e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name);
        if (!(len > 3 && (strcmp(e->d_name + len - 3, ".cl") == 0 || strcmp(e->d_name + len - 2, ".h") == 0)))
            continue;
        char src[1024], dst[1024];
        snprintf(src, sizeof src, "%s/%s", kernel_src, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", kdir, e->d_name);
        char *text = slurp(src, NULL);
        assert_non_null(text);
        FILE *f = fopen(dst, "w");
        assert_non_null(f);
        char *at = strcmp(e->d_name, file) == 0 ? strstr(text, from) : NULL;
        if (at) {
            assert_null(strstr(at + 1, from)); /* exactly once, or the test needs updating */
            fwrite(text, 1, (size_t)(at - text), f);
            fputs(to, f);
            fputs(at + strlen(from), f);
            replaced = 1;
        } else {
            fputs(text, f);
        }
        fclose(f);
        free(text);
    }
    closedir(d);
    if (!replaced)
        fail_msg("'%s' not found in %s/%s: update this test to the kernel", from, kernel_src, file);
    return kdir;
}

static void write_sentinel_output(void)
{
    FILE *f = fopen(in_dir("o.npy"), "w");
    assert_non_null(f);
    fputs("previous output\n", f);
    fclose(f);
}

static void assert_sentinel_output(void)
{
    char *text = slurp(in_dir("o.npy"), NULL);
    assert_non_null(text);
    assert_string_equal(text, "previous output\n");
    free(text);
}

static void test_failures_leave_no_output(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 32, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    write_sentinel_output();
    char env_broken[700], env_off[700];
    /* A kernel that does not build: a runtime failure (1), its multi-line build log on one line. */
    snprintf(env_broken, sizeof env_broken, "MHLA_KERNEL_DIR=%s",
             kernel_variant("broken", "output.cl", "#include \"common.h\"\n",
                            "#include \"common.h\"\nthis is not OpenCL C;\n"));
    /* (tiled=0: a GPU's own row reads out through output_tiled.cl; output.cl is the one broken here) */
    const char *env1[] = {env_broken, "MHLA_TUNING=tiled=0", NULL};
    result *r = MHLA_ENV(env1, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy",
                                   "--blocks", "4");
    /* PoCL's compiler prints its own diagnostics count ("1 error generated.") on stderr first: the
     * driver's, not ours. Ours is the last line, and the only one. */
    char *ours = strstr(r->err, "mhla: ");
    assert_non_null(ours);
    memmove(r->err, ours, strlen(ours) + 1);
    expect_fail(r, 1, "run: building kernels/output.cl for");
    assert_non_null(strstr(r->err, " | ")); /* the log's line breaks */
    assert_sentinel_output();
    assert_string_equal(listing(), "broken k.npy o.npy q.npy v.npy");

    /* No OpenCL platform at all. */
    char env_icd[700];
    snprintf(env_icd, sizeof env_icd, "OCL_ICD_VENDORS=%s", in_dir("broken")); /* holds no .icd file */
    const char *env2[] = {env_icd, NULL};
    expect_fail(MHLA_ENV(env2, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks",
                         "4"),
                1, "no OpenCL device found");
    assert_sentinel_output();
    assert_string_equal(listing(), "broken k.npy o.npy q.npy v.npy");

    /* A kernel 0.1% off: --check prints the error and exits 3; the (complete) output is written. */
    snprintf(env_off, sizeof env_off, "MHLA_KERNEL_DIR=%s", kernel_variant("off", "output.cl", "#include \"common.h\"\n",
                                          "#include \"common.h\"\n#undef VSTOREN\n"
                                          "#define VSTOREN(W, x, o, p) CAT(VSTORE_, W)((x) * 1.001f, o, p)\n"
                                          "#undef OUT_NT\n#define OUT_NT 0\n")); /* stores through VSTOREN */
    const char *env3[] = {env_off, "MHLA_TUNING=tiled=0", NULL};
    r = MHLA_ENV(env3, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4",
                 "--check");
    expect_fail(r, 3, "--check: max_rel_err");
    assert_non_null(strstr(r->err, "exceeds the tolerance 1e-05 (f32 storage, N = 32)"));
    const double e = printed_error(r);
    assert_true(e > 5e-4 && e < 2e-3);
    const int64_t grid[3] = {32, 1, 1}, blocks[3] = {4, 1, 1};
    const double written = default_error(&t, grid, blocks, NPY_F32);
    assert_true(fabs(written - e) <= 0.01 * e); /* the output written is the one checked */
    /* Without --check the same run succeeds: only --check compares. */
    expect_ok(MHLA_ENV(env3, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4"));
    assert_string_equal(listing(), "broken k.npy o.npy off q.npy v.npy");
    free_inputs(&t);
}

/* A causal kernel 0.1% off (every vector store of causal.h's kernels): --check exits 3 and the
 * output is written all the same. */
static void test_run_causal_check_fails(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    char env_off[700];
    snprintf(env_off, sizeof env_off, "MHLA_KERNEL_DIR=%s",
             kernel_variant("off", "causal.h", "#include \"common.h\"\n",
                            "#include \"common.h\"\n#undef VSTOREN\n"
                            "#define VSTOREN(W, x, o, p) CAT(VSTORE_, W)((x) * 1.001f, o, p)\n"));
    const char *env[] = {env_off, NULL};
    result *r = MHLA_ENV(env, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--causal",
                         "--chunk", "16", "--check");
    expect_fail(r, 3, "--check: max_rel_err");
    assert_non_null(strstr(r->err, "exceeds the tolerance 1e-05 (f32 storage, N = 100)"));
    const double e = printed_error(r);
    assert_true(e > 1e-4 && e < 1e-2);
    mhla_config cfg = causal_config_for(&t, 16, 7);
    float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 7);
    const double written = causal_error(&t, &cfg, mc, NULL, 0, "o.npy");
    free(mc);
    assert_true(fabs(written - e) <= 0.01 * e); /* the output written is the one checked */
    assert_string_equal(listing(), "k.npy o.npy off q.npy v.npy");
    free_inputs(&t);
}

/* `mhla grad`: --check within the backward tolerance, every output written with its
 * shape; a perturbed kernel exits 3 with the outputs still written; a usage error writes nothing. */
static void test_grad(void **state)
{
    (void)state;
    tensors t = make_inputs(2, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    char err[256];
    const int64_t vshape[4] = {2, 64, 2, 4};
    assert_int_equal(npy_write(in_dir("do.npy"), NPY_F32, 4, vshape, t.v, err, sizeof err), NPY_OK);
    const result *r = MHLA("grad", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--dout", "do.npy", "--dq",
                           "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy", "--dmixing", "dmc.npy", "--blocks", "4",
                           "--normalizer", "official", "--check");
    expect_ok(r);
    const double e = printed_error(r);
    assert_true(e >= 0 && e <= mhla_reference_backward_tolerance(MHLA_DTYPE_F32));
    assert_non_null(strstr(r->out, "per_gradient dq "));
    assert_string_equal(listing(), "dk.npy dmc.npy do.npy dq.npy dv.npy k.npy q.npy v.npy");
    npy_array a;
    assert_int_equal(npy_read(in_dir("dmc.npy"), &a, err, sizeof err), NPY_OK);
    assert_true(a.dtype == NPY_F32 && a.ndim == 2 && a.shape[0] == 4 && a.shape[1] == 4);
    npy_free(&a);
    assert_int_equal(npy_read(in_dir("dk.npy"), &a, err, sizeof err), NPY_OK);
    assert_true(a.ndim == 4 && a.shape[3] == 8 && a.count == t.nq);
    npy_free(&a);
    scratch_remove(in_dir("dq.npy")), scratch_remove(in_dir("dk.npy")), scratch_remove(in_dir("dv.npy"));
    scratch_remove(in_dir("dmc.npy"));

    char env_off[700];
    snprintf(env_off, sizeof env_off, "MHLA_KERNEL_DIR=%s",
             kernel_variant("off", "backward_readout.cl", "* FEATURE_GRAD_V(BWD_VK, x), j,",
                            "* FEATURE_GRAD_V(BWD_VK, x) * 1.01f, j,"));
    const char *env[] = {env_off, NULL};
    r = MHLA_ENV(env, "grad", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--dout", "do.npy", "--dq", "dq.npy",
                 "--dk", "dk.npy", "--dv", "dv.npy", "--blocks", "4", "--check");
    expect_fail(r, 3, "--check: max_rel_err");
    assert_true(printed_error(r) > 5e-3 && printed_error(r) < 2e-2);
    assert_string_equal(listing(), "dk.npy do.npy dq.npy dv.npy k.npy off q.npy v.npy");
    scratch_remove(in_dir("dq.npy")), scratch_remove(in_dir("dk.npy")), scratch_remove(in_dir("dv.npy"));

    r = MHLA("grad", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--dout", "q.npy", "--dq", "dq.npy", "--dk",
             "dk.npy", "--dv", "dv.npy", "--blocks", "4");
    expect_fail(r, 2, "--dout q.npy: shape (2, 64, 2, 8), expected the output's shape (2, 64, 2, 4) (--q q.npy's with --v's Dv)");
    r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4", "--dq", "x");
    expect_fail(r, 2, "unknown option '--dq'");
    assert_string_equal(listing(), "do.npy k.npy off q.npy v.npy");
    free_inputs(&t);
}

/* ---- grad: every mode ------------------------------------------------------------------------ */

/* `mhla grad` on q.npy, k.npy, v.npy and do.npy into dq.npy, dk.npy and dv.npy, plus `extra`. */
static result *run_grad(const char *const *extra)
{
    const char *args[40] = {"grad", "--q",  "q.npy",  "--k",  "k.npy",  "--v",  "v.npy", "--dout",
                            "do.npy", "--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy"};
    int n = 15;
    for (; extra && *extra && n < 39; ++extra)
        args[n++] = *extra;
    return finish(spawn(NULL, NULL, args));
}

/* A copy of x[0..n) rounded to `storage`, as the CLI rounds its inputs (f32: unchanged). */
static float *rounded_copy(const float *x, size_t n, mhla_dtype storage)
{
    float *c = malloc(n * sizeof *c);
    uint16_t *bits = malloc(n * sizeof *bits);
    assert_true(c && bits);
    memcpy(c, x, n * sizeof *c);
    if (storage != MHLA_DTYPE_F32) {
        mhla_convert(storage, bits, MHLA_DTYPE_F32, x, n);
        mhla_convert(MHLA_DTYPE_F32, c, storage, bits, n);
    }
    free(bits);
    return c;
}

/* What one `mhla grad` run should compute: cfg (cfg.dtype the storage type), its rows x rows
 * mixing matrix, dO as do.npy holds it, and the offsets of a packed (cfg.varlen) batch. */
typedef struct grad_case {
    const tensors *t;
    mhla_config cfg;
    const float *mc;
    int64_t rows;
    const float *dout;
    const int32_t *cu;
    size_t seqs;
} grad_case;

/* The backward reference of g on its inputs rounded to cfg.dtype: dq, dk, dv, dMc (malloc'd). */
static void grad_reference(const grad_case *g, double *ref[4])
{
    const tensors *t = g->t;
    const mhla_dtype st = g->cfg.dtype;
    float *q = rounded_copy(t->q, t->nq, st), *k = rounded_copy(t->k, t->nq, st), *v = rounded_copy(t->v, t->nv, st);
    float *dout = rounded_copy(g->dout, t->nv, st);
    const size_t counts[4] = {t->nq, t->nq, t->nv, (size_t)(g->rows * g->rows)};
    for (int i = 0; i < 4; ++i)
        assert_non_null(ref[i] = malloc(counts[i] * sizeof(double)));
    const mhla_status s =
        g->cfg.varlen ? mhla_reference_backward_varlen(&g->cfg, q, k, v, g->mc, g->cu, g->seqs, dout, ref[0], ref[1],
                                                       ref[2], ref[3])
                      : mhla_reference_backward(&g->cfg, q, k, v, g->mc, dout, ref[0], ref[1], ref[2], ref[3]);
    if (s != MHLA_OK)
        fail_msg("backward reference: %s", mhla_last_message());
    free(q), free(k), free(v), free(dout);
}


/* dq.npy, dk.npy, dv.npy (`file` dtype) and, with `dmix`, dmc.npy (float32, rows x rows) against
 * the backward reference, each within the tolerance of docs/spec.md "Accuracy the tests hold" for
 * cfg.dtype (a NaN anywhere fails). bf16 storage: every value of dq, dk, dv is a bfloat16 (the device
 * stored 16 bits). Causal: dMc is exactly 0 above the diagonal. Returns the largest error of the
 * four. */
static double expect_gradients(const grad_case *g, npy_dtype file, int dmix)
{
    const tensors *t = g->t;
    double *ref[4];
    grad_reference(g, ref);
    const int bhnd = t->layout == MHLA_LAYOUT_BHND;
    const int64_t qshape[4] = {t->b, bhnd ? t->h : t->n, bhnd ? t->n : t->h, t->dk};
    const int64_t vshape[4] = {t->b, bhnd ? t->h : t->n, bhnd ? t->n : t->h, t->dv};
    const int64_t mshape[2] = {g->rows, g->rows};
    const int64_t *shapes[4] = {qshape, qshape, vshape, mshape};
    const size_t counts[4] = {t->nq, t->nq, t->nv, (size_t)(g->rows * g->rows)};
    static const char *const names[4] = {"dq.npy", "dk.npy", "dv.npy", "dmc.npy"};
    const double tol = mhla_reference_backward_tolerance(g->cfg.dtype);
    double worst = 0;
    for (int i = 0; i < (dmix ? 4 : 3); ++i) {
        float *got = read_floats(names[i], i == 3 ? NPY_F32 : file, i == 3 ? 2 : 4, shapes[i]);
        const double e = finite_rel_err(got, ref[i], counts[i], names[i]);
        if (!(e <= tol))
            fail_msg("%s: max_rel_err %g against the backward reference (%s storage, tolerance %g)", names[i], e,
                     mhla_dtype_name(g->cfg.dtype), tol);
        worst = e > worst ? e : worst;
        for (size_t j = 0; i < 3 && g->cfg.dtype == MHLA_DTYPE_BF16 && j < counts[i]; ++j) {
            uint32_t bits;
            memcpy(&bits, &got[j], sizeof bits);
            if (bits & 0xFFFFu)
                fail_msg("%s[%zu] = %.9g is not a bfloat16: not what bf16 storage holds", names[i], j, got[j]);
        }
        for (int64_t r = 0; i == 3 && g->cfg.causal && r < g->rows; ++r)
            for (int64_t c = r + 1; c < g->rows; ++c)
                if (got[r * g->rows + c] != 0.0f)
                    fail_msg("dmc.npy[%lld][%lld] = %g above the diagonal of a causal Mc", (long long)r, (long long)c,
                             got[r * g->rows + c]);
        free(got);
    }
    for (int i = 0; i < 4; ++i)
        free(ref[i]);
    return worst;
}

/* dO: values in [-1, 1), written to `name` as the tensors are (float16 when t->half). */
static float *write_dout(const tensors *t, const char *name, uint32_t seed)
{
    float *d = malloc(t->nv * sizeof *d);
    assert_non_null(d);
    fill_uniform(d, t->nv, seed, -1.0f, 1.0f);
    for (size_t i = 0; t->half && i < t->nv; ++i)
        d[i] = mhla_f16_to_float(mhla_float_to_f16(d[i]));
    write_tensor(name, t, d, t->nv, t->dv);
    return d;
}

/* Two gradient references (dq first) must differ, else the run that tells them apart shows
 * nothing. Frees both. */
static void expect_grads_differ(double *a[4], double *b[4], size_t nq, const char *what)
{
    expect_matters(a[0], b[0], nq, what);
    for (int i = 1; i < 4; ++i)
        free(a[i]), free(b[i]);
}

/* `mhla grad --causal`: the chunk form's dq, dk, dv and dMc (lower triangle only) for two sequences
 * with a partial last chunk, with the normalizers none (the default) and paper. */
static void test_grad_causal(void **state)
{
    (void)state;
    tensors t = make_inputs(2, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    float *dout = write_dout(&t, "do.npy", 21);
    float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 7); /* ceil(100 / 16) chunks */
    grad_case none = {&t, causal_config_for(&t, 16, 7), mc, 7, dout, NULL, 0}, paper = none;
    paper.cfg.normalizer = MHLA_NORMALIZER_PAPER;
    expect_ok(run_grad(ARGS("--causal", "--chunk", "16", "--dmixing", "dmc.npy")));
    expect_gradients(&none, NPY_F32, 1);
    const result *r = run_grad(ARGS("--causal", "--chunk", "16", "--normalizer", "paper", "--dmixing", "dmc.npy",
                                    "--check"));
    expect_ok(r);
    const double printed = printed_error(r);
    const double e = expect_gradients(&paper, NPY_F32, 1);
    assert_true(fabs(printed - e) <= 0.01 * e + 1e-12); /* what --check printed is what was written */
    assert_string_equal(listing(), "dk.npy dmc.npy do.npy dq.npy dv.npy k.npy q.npy v.npy");
    double *a[4], *b[4];
    grad_reference(&paper, a);
    grad_reference(&none, b);
    expect_grads_differ(a, b, t.nq, "--normalizer paper");
    free(mc), free(dout);
    free_inputs(&t);
}

/* `mhla grad --causal --cu-seqlens`: sequences of 17, 0, 33, 50 and 0 tokens packed in [1,100,H,D]
 * (empty ones in the middle and at the end), each chunked from its own start; int32 offsets with
 * the normalizer none, int64 ones with paper; dMc sums every sequence's chunks. */
static void test_grad_packed(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    const int32_t cu[6] = {0, 17, 17, 50, 100, 100};
    const int64_t cu64[6] = {0, 17, 17, 50, 100, 100}, s6[1] = {6};
    write_npy("cu.npy", "<i4", 1, s6, cu, sizeof cu);
    write_npy("cu64.npy", "<i8", 1, s6, cu64, sizeof cu64);
    float *dout = write_dout(&t, "do.npy", 22);
    float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 4); /* ceil(50 / 16) chunks */
    grad_case none = {&t, causal_config_for(&t, 16, 4), mc, 4, dout, cu, 5}, paper;
    none.cfg.varlen = 1;
    paper = none;
    paper.cfg.normalizer = MHLA_NORMALIZER_PAPER;
    expect_ok(run_grad(ARGS("--causal", "--chunk", "16", "--cu-seqlens", "cu.npy", "--dmixing", "dmc.npy")));
    expect_gradients(&none, NPY_F32, 1);
    const result *r = run_grad(ARGS("--causal", "--chunk", "16", "--cu-seqlens", "cu64.npy", "--normalizer", "paper",
                                    "--dmixing", "dmc.npy", "--check"));
    expect_ok(r);
    assert_true(printed_error(r) <= mhla_reference_backward_tolerance(MHLA_DTYPE_F32));
    expect_gradients(&paper, NPY_F32, 1);
    assert_string_equal(listing(), "cu.npy cu64.npy dk.npy dmc.npy do.npy dq.npy dv.npy k.npy q.npy v.npy");
    /* The offsets mattered: one sequence of 100 tokens (7 chunks) gives other gradients. */
    float *mc7 = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 7);
    grad_case whole = {&t, causal_config_for(&t, 16, 7), mc7, 7, dout, NULL, 0};
    double *a[4], *b[4];
    grad_reference(&none, a);
    grad_reference(&whole, b);
    expect_grads_differ(a, b, t.nq, "--cu-seqlens");
    free(mc7), free(mc), free(dout);
    free_inputs(&t);
}

/* `mhla grad --dtype f16|bf16`: float32 files rounded to f16 on the way in (dO too) and float16
 * gradients out; float16 files selecting f16 storage by default; and the causal packed path with
 * --dtype bf16 on float16 files, whose float32 gradients hold bfloat16 values (16 bits were
 * stored). Each within docs/spec.md's backward tolerance of the reference on the rounded inputs. */
static void test_grad_16bit(void **state)
{
    (void)state;
    const int64_t grid[3] = {64, 1, 1}, blocks[3] = {4, 1, 1};
    for (int half_files = 0; half_files < 2; ++half_files) {
        tensors t = make_inputs(2, 64, 2, 8, 4, MHLA_LAYOUT_BNHD, half_files, -1.0f);
        float *dout = write_dout(&t, "do.npy", 23);
        mhla_config cfg = config_for(&t, grid, blocks);
        float *mc = init_mixing(MHLA_INIT_LINEAR, NULL, &cfg);
        grad_case g = {&t, cfg, mc, 4, dout, NULL, 0};
        g.cfg.dtype = MHLA_DTYPE_F16;
        expect_ok(half_files ? run_grad(ARGS("--blocks", "4", "--dmixing", "dmc.npy"))
                             : run_grad(ARGS("--blocks", "4", "--dtype", "f16", "--dmixing", "dmc.npy")));
        expect_gradients(&g, NPY_F16, 1);
        assert_string_equal(listing(), "dk.npy dmc.npy do.npy dq.npy dv.npy k.npy q.npy v.npy");
        free(mc), free(dout);
        free_inputs(&t);
    }
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 1, -1.0f);
    const int32_t cu[5] = {0, 17, 17, 50, 100};
    const int64_t s5[1] = {5};
    write_npy("cu.npy", "<i4", 1, s5, cu, sizeof cu);
    float *dout = write_dout(&t, "do.npy", 24);
    float *mc = chunk_mixing(MHLA_INIT_CAUSAL_UNIFORM, 4);
    grad_case g = {&t, causal_config_for(&t, 16, 4), mc, 4, dout, cu, 4};
    g.cfg.varlen = 1, g.cfg.dtype = MHLA_DTYPE_BF16;
    const result *r = run_grad(ARGS("--causal", "--chunk", "16", "--cu-seqlens", "cu.npy", "--dtype", "bf16",
                                    "--dmixing", "dmc.npy", "--check"));
    expect_ok(r);
    assert_true(printed_error(r) <= mhla_reference_backward_tolerance(MHLA_DTYPE_BF16));
    expect_gradients(&g, NPY_F32, 1);
    free(mc), free(dout);
    free_inputs(&t);
}

/* expect_fail(), and stderr is exactly "mhla: <line>\n". */
static void expect_fail_line(const result *r, int code, const char *line)
{
    expect_fail(r, code, line);
    char want[1024];
    snprintf(want, sizeof want, "mhla: %s\n", line);
    assert_string_equal(r->err, want);
}

/* What `mhla grad` refuses in its causal, packed and 16-bit modes: the exit status, the one stderr
 * line, and nothing written (neither an output nor a temporary); a kernel that fails to build once
 * the outputs' temporaries exist is a runtime failure that leaves an earlier dq.npy as it was. */
static void test_grad_mode_errors(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 100, 2, 8, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    float *dout = write_dout(&t, "do.npy", 25);
    const int64_t s_b2[4] = {2, 50, 2, 8}, s_v[4] = {1, 100, 2, 4}, s_mc6[2] = {6, 6}, s3[1] = {3}, s4[1] = {4};
    write_npy("q2.npy", "<f4", 4, s_b2, t.q, t.nq * sizeof(float)); /* the same values as B = 2, N = 50 */
    uint16_t *bits = malloc(t.nv * sizeof *bits);
    assert_non_null(bits);
    mhla_convert(MHLA_DTYPE_F16, bits, MHLA_DTYPE_F32, dout, t.nv);
    write_npy("do16.npy", "<f2", 4, s_v, bits, t.nv * sizeof *bits);
    free(bits);
    float mc[36];
    fill_uniform(mc, 36, 5, 0.1f, 1.0f);
    write_npy("mc6.npy", "<f4", 2, s_mc6, mc, sizeof mc);
    write_npy("mc16.npy", "<f2", 2, s_mc6, mc, 36 * sizeof(uint16_t)); /* refused by its dtype first */
    const int32_t ok[3] = {0, 50, 100}, dec[4] = {0, 60, 50, 100}, end[3] = {0, 50, 99}, long_seq[3] = {0, 3, 100};
    const float as_float[3] = {0, 50, 100};
    write_npy("cu_ok.npy", "<i4", 1, s3, ok, sizeof ok);
    write_npy("cu_dec.npy", "<i4", 1, s4, dec, sizeof dec);
    write_npy("cu_end.npy", "<i4", 1, s3, end, sizeof end);
    write_npy("cu_long.npy", "<i4", 1, s3, long_seq, sizeof long_seq);
    write_npy("cu_f4.npy", "<f4", 1, s3, as_float, sizeof as_float);
    char before[4096];
    snprintf(before, sizeof before, "%s", listing());
    const struct {
        const char *args[10];
        const char *line;
    } cases[] = {
        {{"--blocks", "4", "--cu-seqlens", "cu_ok.npy"}, "--cu-seqlens cu_ok.npy: only with --causal (see 'mhla grad --help')"},
        {{"--causal", "--cu-seqlens", "cu_dec.npy"}, "--cu-seqlens cu_dec.npy: offsets must not decrease: cu_seqlens[2] = 50 < cu_seqlens[1] = 60"},
        {{"--causal", "--cu-seqlens", "cu_end.npy"}, "--cu-seqlens cu_end.npy: cu_seqlens[2] = 99 must equal N = 100, the tokens of --q q.npy"},
        {{"--causal", "--cu-seqlens", "cu_f4.npy"}, "--cu-seqlens cu_f4.npy: dtype float32, expected int32 or int64 offsets"},
        {{"--causal", "--cu-seqlens", "nope.npy"}, "--cu-seqlens nope.npy: cannot open: No such file or directory"},
        {{"--causal", "--chunk", "16", "--mixing", "mc6.npy", "--cu-seqlens", "cu_long.npy"}, "--mixing mc6.npy: sequence 1 of --cu-seqlens cu_long.npy (cu_seqlens[1] = 3 .. cu_seqlens[2] = 100) has 97 tokens, longer than chunk * rows(Mc) = 16 * 6 = 96"},
        {{"--causal", "--chunk", "16", "--mixing", "mc6.npy"}, "--mixing mc6.npy: the sequence of 100 tokens is longer than chunk * rows(Mc) = 16 * 6 = 96"},
        {{"--causal", "--mixing", "mc16.npy"}, "--mixing mc16.npy: dtype float16, expected float32"},
        {{"--causal", "--normalizer", "official"}, "--normalizer official: not in causal mode (it is defined for block grids; --causal takes none or paper) (see 'mhla grad --help')"},
        {{"--causal", "--grid", "10x10"}, "--grid 10x10: causal mode is 1D (give --grid N, or leave it out) (see 'mhla grad --help')"},
        {{"--causal", "--dtype", "f8"}, "--dtype f8: unknown dtype 'f8' (expected f32|f16|bf16) (see 'mhla grad --help')"},
        {{"--causal", "--recurrent"}, "grad: unknown option '--recurrent' (see 'mhla grad --help')"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const char *args[32] = {"grad", "--q",  "q.npy",  "--k",  "k.npy",  "--v",  "v.npy", "--dout",
                                "do.npy", "--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy", "--dmixing", "dmc.npy"};
        int n = 17;
        for (int a = 0; a < 10 && cases[i].args[a]; ++a)
            args[n++] = cases[i].args[a];
        expect_fail_line(finish(spawn(NULL, NULL, args)), 2, cases[i].line);
        if (strcmp(listing(), before) != 0)
            fail_msg("case %zu (%s) left: %s", i, cases[i].line, listing());
    }
    /* dO in another dtype than the inputs (whatever --dtype says); packed sequences need batch 1. */
    expect_fail_line(MHLA("grad", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--dout", "do16.npy", "--dq", "dq.npy",
                          "--dk", "dk.npy", "--dv", "dv.npy", "--causal", "--dtype", "f16"),
                     2, "--dout do16.npy is float16 but the inputs are float32");
    expect_fail_line(MHLA("grad", "--q", "q2.npy", "--k", "q2.npy", "--v", "q2.npy", "--dout", "q2.npy", "--dq", "dq.npy",
                          "--dk", "dk.npy", "--dv", "dv.npy", "--causal", "--cu-seqlens", "cu_ok.npy"),
                     2, "--cu-seqlens cu_ok.npy: packed sequences need batch 1 ([1,N,H,D]), but --q q2.npy has B = 2");
    assert_string_equal(listing(), before);

    /* The causal backward's kernel does not build: exit 1 after the outputs' temporaries were
     * made; none is left, and the dq.npy of an earlier run is untouched. */
    FILE *f = fopen(in_dir("dq.npy"), "w");
    assert_non_null(f);
    fputs("previous output\n", f);
    assert_int_equal(fclose(f), 0);
    char env_broken[700];
    snprintf(env_broken, sizeof env_broken, "MHLA_KERNEL_DIR=%s",
             kernel_variant("broken", "backward_causal.cl", "#include \"backward.h\"\n",
                            "#include \"backward.h\"\nthis is not OpenCL C;\n"));
    const char *env[] = {env_broken, NULL};
    result *r = MHLA_ENV(env, "grad", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--dout", "do.npy", "--dq",
                         "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy", "--dmixing", "dmc.npy", "--causal",
                         "--cu-seqlens", "cu_ok.npy");
    char *ours = strstr(r->err, "mhla: "); /* after the driver's own diagnostics count, as above */
    assert_non_null(ours);
    memmove(r->err, ours, strlen(ours) + 1);
    expect_fail(r, 1, "grad: building kernels/backward_causal.cl for");
    char *text = slurp(in_dir("dq.npy"), NULL);
    assert_non_null(text);
    assert_string_equal(text, "previous output\n");
    free(text);
    assert_string_equal(listing(), "broken cu_dec.npy cu_end.npy cu_f4.npy cu_long.npy cu_ok.npy do.npy do16.npy dq.npy "
                                   "k.npy mc16.npy mc6.npy q.npy q2.npy v.npy");
    free(dout);
    free_inputs(&t);
}

/* A full disk, as a file size limit: the output cannot be written, a runtime failure (1). */
static void test_output_write_failure(void **state)
{
    (void)state;
    /* A 4 MiB output against a 3 MiB limit. PoCL writes its own (smaller) files while it builds
     * kernels, so a first run without the limit fills its cache. */
    tensors t = make_inputs(64, 64, 4, 8, 64, MHLA_LAYOUT_BNHD, 0, -1.0f);
    expect_ok(MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4"));
    write_sentinel_output();
    child_file_limit = 3 << 20;
    const result *r = MHLA("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4");
    child_file_limit = 0;
    expect_fail(r, 1, "--out o.npy: cannot write the output (4194432 bytes): File too large");
    assert_sentinel_output();
    assert_string_equal(listing(), "k.npy o.npy q.npy v.npy");
    free_inputs(&t);
}

static void test_signal_removes_temporary(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 16, 1, 4, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    write_sentinel_output();
    /* Long enough to be caught running; killed as soon as its temporary output exists. */
    const pid_t pid = spawn(NULL, NULL, ARGS("run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy",
                                             "--blocks", "2", "--repeat", "1000000"));
    assert_true(pid > 0);
    int seen = 0;
    const struct timespec pause = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 6000 && !seen; ++i) { /* at most a minute */
        seen = strstr(listing(), ".o.npy.tmp-") != NULL;
        if (!seen)
            nanosleep(&pause, NULL);
    }
    kill(pid, SIGTERM);
    const result *r = finish(pid);
    assert_true(seen);
    assert_int_equal(r->signal, SIGTERM);
    assert_sentinel_output();
    assert_string_equal(listing(), "k.npy o.npy q.npy v.npy");
    free_inputs(&t);
}

/* `mhla grad` holds several temporaries (dq, dk, dv, dmixing): a signal while it works removes
 * all of them. The dk read-out kernel is made to spin, so that the process is still at work
 * whenever the signal comes. */
static void test_grad_signal_removes_temporaries(void **state)
{
    (void)state;
    tensors t = make_inputs(1, 16, 1, 4, 4, MHLA_LAYOUT_BNHD, 0, -1.0f);
    char env_spin[700];
    snprintf(env_spin, sizeof env_spin, "MHLA_KERNEL_DIR=%s",
             kernel_variant("spin", "backward_readout.cl", "* FEATURE_GRAD_V(BWD_VK, x), j,",
                            "* FEATURE_GRAD_V(BWD_VK, x) * spin_forever(), j,"));
    /* spin_forever() itself, ahead of the kernels that call it */
    char path[1024];
    snprintf(path, sizeof path, "%s/spin/backward_readout.cl", dir);
    char *text = slurp(path, NULL);
    assert_non_null(text);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const char *at = strstr(text, "#include \"backward.h\"\n");
    assert_non_null(at);
    const size_t head = (size_t)(at - text) + strlen("#include \"backward.h\"\n");
    fprintf(f, "%.*sfloat spin_forever(void);\nfloat spin_forever(void)\n{\n    volatile int s = 1;\n"
               "    while (s)\n        ;\n    return 1.0f;\n}\n%s", (int)head, text, text + head);
    assert_int_equal(fclose(f), 0);
    free(text);
    const char *env[] = {env_spin, NULL};
    const pid_t pid = spawn(env, NULL, ARGS("grad", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--dout", "v.npy",
                                            "--dq", "dq.npy", "--dk", "dk.npy", "--dv", "dv.npy", "--dmixing",
                                            "dmc.npy", "--blocks", "2"));
    assert_true(pid > 0);
    int seen = 0;
    const struct timespec pause = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 6000 && !seen; ++i) { /* at most a minute */
        const char *l = listing();
        seen = strstr(l, ".dq.npy.tmp-") && strstr(l, ".dk.npy.tmp-") && strstr(l, ".dv.npy.tmp-") &&
               strstr(l, ".dmc.npy.tmp-");
        if (!seen)
            nanosleep(&pause, NULL);
    }
    kill(pid, SIGTERM);
    const result *r = finish(pid);
    assert_true(seen);
    assert_int_equal(r->signal, SIGTERM);
    assert_string_equal(listing(), "k.npy q.npy spin v.npy");
    free_inputs(&t);
}

/* ---- info ---------------------------------------------------------------------------------- */

/* The "  device N (P:D): name" line of `mhla info` output that `pick` chooses: the one marked
 * `mark` (pick NULL), or the `nth` device whose line contains `pick`. Fills *n, *p, *d; 0 if none. */
static int info_device(const char *out, const char *pick, int nth, const char *mark, int *n, int *p, int *d)
{
    for (const char *line = strstr(out, "  device "); line; line = strstr(line + 1, "\n  device ")) {
        if (*line == '\n')
            ++line;
        const char *end = strchr(line, '\n');
        const size_t len = end ? (size_t)(end - line) : strlen(line);
        char text[512];
        snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1), line);
        if (sscanf(text, "  device %d (%d:%d): ", n, p, d) != 3)
            fail_msg("'mhla info' device line not understood: '%s'", text);
        if (pick ? strstr(text, pick) && nth-- == 0 : strstr(text, mark) != NULL)
            return 1;
    }
    return 0;
}

/* mhla info: every device with its properties, the default marked, MHLA_DEVICE's pick marked; the
 * devices' numbers are read from the listing, not assumed (a machine may list a GPU platform, or
 * rusticl, before PoCL). */
static void test_info(void **state)
{
    (void)state;
    const char *plain[] = {"MHLA_DEVICE=", NULL};
    const result *r = MHLA_ENV(plain, "info");
    expect_ok(r);
    const char *lines[] = {"platform 0: ",      "  device 0 (0:0): ", "[default]",      "    vendor ",
                           "    device version ", "    driver version ", "    OpenCL C ", "    compute units ",
                           " MHz\n",            "    global memory ", "largest buffer ", "    local memory ",
                           "    max work-group ", "    fp16 / fp64 ",  "    float width ",
                           "(the default; MHLA_DEVICE is not set)\n", "tuning: built-in row '"};
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; ++i)
        if (!strstr(r->out, lines[i]))
            fail_msg("'mhla info' lacks '%s':\n%s", lines[i], r->out);
    assert_null(strstr(r->out, "selected by MHLA_DEVICE"));
    /* the [default] device is the library's default and the one `mhla run` uses */
    int n = -1, p = -1, d = -1;
    if (!info_device(r->out, NULL, 0, "[default]", &n, &p, &d))
        fail_msg("'mhla info' marks no device [default]:\n%s", r->out);
    size_t count = 0;
    assert_int_equal(mhla_device_list(NULL, 0, &count), MHLA_OK);
    mhla_device_info *infos = calloc(count, sizeof *infos);
    assert_non_null(infos);
    assert_int_equal(mhla_device_list(infos, count, &count), MHLA_OK);
    assert_true(n >= 0 && (size_t)n < count && infos[n].is_default);
    assert_int_equal(infos[n].platform_index, p);
    assert_int_equal(infos[n].device_index, d);
    free(infos);
    char uses[128];
    snprintf(uses, sizeof uses, "mhla run uses device %d (%d:%d) ", n, p, d);
    if (!strstr(r->out, uses))
        fail_msg("'mhla info' lacks '%s':\n%s", uses, r->out);

    /* Two PoCL devices, the second picked by MHLA_DEVICE: its number read from the listing. A
     * machine without PoCL (a GPU machine running scripts/device_suite.py) has no such half. */
    if (!strstr(r->out, ": pthread-")) {
        printf("test_info: no PoCL device listed, so the POCL_DEVICES half is not run\n");
        return;
    }
    const char *two_plain[] = {"POCL_DEVICES=pthread pthread", "MHLA_DEVICE=", NULL};
    r = MHLA_ENV(two_plain, "info");
    expect_ok(r);
    if (!info_device(r->out, ": pthread-", 1, NULL, &n, &p, &d))
        fail_msg("POCL_DEVICES='pthread pthread': 'mhla info' lists no second PoCL device:\n%s", r->out);
    assert_int_equal(d, 1);
    char pick[64], spec[32];
    snprintf(spec, sizeof spec, "MHLA_DEVICE=%d", n);
    const char *two[] = {"POCL_DEVICES=pthread pthread", spec, NULL};
    r = MHLA_ENV(two, "info");
    expect_ok(r);
    snprintf(pick, sizeof pick, "  device %d (%d:1): ", n, p);
    const char *dev1 = strstr(r->out, pick);
    assert_non_null(dev1);
    assert_non_null(strstr(dev1, "[selected by MHLA_DEVICE]"));
    snprintf(uses, sizeof uses, "mhla run uses device %d (%d:1) ", n, p);
    assert_non_null(strstr(r->out, uses));
    snprintf(uses, sizeof uses, "(MHLA_DEVICE=%d)\n", n);
    assert_non_null(strstr(r->out, uses));

    const char *bad[] = {"MHLA_DEVICE=no-such-device", NULL};
    r = MHLA_ENV(bad, "info");
    assert_int_equal(r->code, 1);
    assert_non_null(strstr(r->out, "platform 0: ")); /* the list still helps */
    const char *why = "mhla: info: no OpenCL device matches MHLA_DEVICE 'no-such-device'";
    assert_true(strncmp(r->err, why, strlen(why)) == 0);
    assert_ptr_equal(strchr(r->err, '\n'), r->err + strlen(r->err) - 1);

    assert_int_equal(mkdir(in_dir("icd"), 0755), 0);
    char icd[700];
    snprintf(icd, sizeof icd, "OCL_ICD_VENDORS=%s", in_dir("icd"));
    const char *none[] = {icd, NULL};
    expect_fail(MHLA_ENV(none, "info"), 1, "info: no OpenCL device found");
    expect_fail(MHLA("info", "extra"), 2, "info: unexpected argument 'extra' (options start with --) (see 'mhla info --help')");
    expect_fail(MHLA("info", "--all"), 2, "info: unknown option '--all'");

    /* --timings: three plan creations, the cache folder it used is gone afterwards */
    r = MHLA_ENV(plain, "info", "--timings");
    expect_ok(r);
    const char *timing_lines[] = {"plan creation (B=1 H=8 64x64 tokens, 4x4 blocks, Dk=Dv=64):\n",
                                  "  empty program cache ", "  on-disk cache, new ctx ", "  same context "};
    for (size_t i = 0; i < sizeof timing_lines / sizeof timing_lines[0]; ++i)
        if (!strstr(r->out, timing_lines[i]))
            fail_msg("'mhla info --timings' lacks '%s':\n%s", timing_lines[i], r->out);
    double cold = -1, disk = -1, memory = -1;
    assert_int_equal(sscanf(strstr(r->out, "  empty program cache "), "  empty program cache %lf ms", &cold), 1);
    assert_int_equal(sscanf(strstr(r->out, "  on-disk cache, new ctx "), "  on-disk cache, new ctx %lf ms", &disk), 1);
    assert_int_equal(sscanf(strstr(r->out, "  same context "), "  same context %lf ms", &memory), 1);
    assert_true(cold >= 0 && disk >= 0 && memory >= 0);
    expect_fail(MHLA_ENV(none, "info", "--timings"), 1, "info: no OpenCL device found");
}

/* Counts the lines of `text` that start with `prefix`. */
static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        n += strncmp(p, prefix, strlen(prefix)) == 0;
    return n;
}

/* mhla selftest: one PASS line per path and a summary; a kernel 0.1% off fails the paths that use
 * it (and only those), exit 1 with one line on stderr; bad options are usage errors. */
static void test_selftest(void **state)
{
    (void)state;
    /* The CPU row's quick paths: meson's selftest_cpu_row runs the same programs (one compile of
     * them for the suite, in the shared program cache), and so does the broken variant below but
     * for output.cl. */
    const result *r = MHLA("selftest", "--quick", "--tuning", "row=cpu");
    expect_ok(r);
    const int paths = count_lines(r->out, "PASS ");
    char summary[64];
    snprintf(summary, sizeof summary, "selftest: %d passed, 0 failed\n", paths);
    assert_true(paths >= 30);
    assert_int_equal(count_lines(r->out, "FAIL "), 0);
    assert_non_null(strstr(r->out, summary));
    assert_non_null(strstr(r->out, "PASS forward-3d/official/relu-eps max_rel_err "));
    assert_non_null(strstr(r->out, "PASS decoder/prefill-step max_rel_err "));
    assert_true(strncmp(r->out, "selftest: libmhla ", 18) == 0);
    assert_non_null(strstr(r->out, "\ntuning: built-in row '"));

    char env_off[700];
    snprintf(env_off, sizeof env_off, "MHLA_KERNEL_DIR=%s", kernel_variant("off", "output.cl", "#include \"common.h\"\n",
                                          "#include \"common.h\"\n#undef VSTOREN\n"
                                          "#define VSTOREN(W, x, o, p) CAT(VSTORE_, W)((x) * 1.001f, o, p)\n"
                                          "#undef OUT_NT\n#define OUT_NT 0\n")); /* stores through VSTOREN */
    const char *env[] = {env_off, "MHLA_CACHE_DIR=off", NULL};
    r = MHLA_ENV(env, "selftest", "--quick", "--tuning", "row=cpu");
    assert_int_equal(r->code, 1);
    const int failed = count_lines(r->out, "FAIL ");
    assert_true(failed >= 10); /* every untiled non-causal forward path reads out through output.cl */
    assert_non_null(strstr(r->out, "FAIL forward-2d/paper/relu-eps max_rel_err "));
    assert_non_null(strstr(r->out, "PASS causal/none max_rel_err ")); /* not through output.cl */
    assert_non_null(strstr(r->out, "PASS softmax/f32 max_rel_err "));
    assert_non_null(strstr(r->out, "built-in row 'cpu' (mhla_context_set_tuning"));
    char line[96];
    snprintf(line, sizeof line, "selftest: %d passed, %d failed\n", count_lines(r->out, "PASS "), failed);
    assert_non_null(strstr(r->out, line));
    assert_true(strncmp(r->err, "mhla: selftest: ", 16) == 0 && strstr(r->err, " paths failed on "));
    assert_ptr_equal(strchr(r->err, '\n'), r->err + strlen(r->err) - 1);

    expect_fail(MHLA("selftest", "--tuning", "row=nope"), 2, "--tuning row=nope: mhla_context_set_tuning: unknown row 'nope'");
    expect_fail(MHLA("selftest", "--device", "no-such-device"), 1, "--device no-such-device: no OpenCL device matches");
    expect_fail(MHLA("selftest", "now"), 2, "selftest: unexpected argument 'now'");
    r = MHLA("selftest", "--help");
    expect_ok(r);
    assert_non_null(strstr(r->out, "usage: mhla selftest [--device SPEC] [--quick] [--tuning SPEC]"));
}

/* The integer after `name=` in text (at its start or after a space or comma), or -1. */
static int field_value(const char *text, const char *name)
{
    const size_t n = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name))
        if ((p == text || p[-1] == ' ' || p[-1] == ',') && p[n] == '=')
            return atoi(p + n + 1);
    return -1;
}

/* The rest of the line of `text` that starts with `prefix`, into buf ("" when there is none). */
static const char *line_after(const char *text, const char *prefix, char *buf, size_t size)
{
    const char *p = strstr(text, prefix);
    buf[0] = '\0';
    if (p) {
        p += strlen(prefix);
        snprintf(buf, size, "%.*s", (int)strcspn(p, "\n"), p);
    }
    return buf;
}

/* A kernel folder `name` whose summary kernel spins for milliseconds (its first work-item, once
 * per launch) where the preprocessor condition `cond` on its tile holds: a candidate that the
 * tuner must find faster by far more than any noise. */
static const char *slow_summary(const char *name, const char *cond)
{
    static const char anchor[] = "    const int tile_id = (int)get_global_id(0);\n";
    char spin[512];
    snprintf(spin, sizeof spin,
             "#if %s\n"
             "    if (get_global_id(0) == 0 && get_global_id(1) == 0 && get_global_id(2) == 0) {\n"
             "        volatile int spin = 0;\n"
             "        while (spin < 2000000)\n"
             "            ++spin;\n"
             "    }\n"
             "#endif\n"
             "%s",
             cond, anchor);
    return kernel_variant(name, "block_summary.cl", anchor, spin);
}

/* test_tune points this process's MHLA_CACHE_DIR at its folder to read the database back; the
 * teardown puts the variable back (a failed case included) and drops the folder. */
static char saved_cache_dir[4096];
static int had_cache_dir;

static int tune_teardown(void **state)
{
    if (had_cache_dir)
        setenv("MHLA_CACHE_DIR", saved_cache_dir, 1);
    else
        unsetenv("MHLA_CACHE_DIR");
    return drop_dir(state);
}

/* mhla tune stores what it finds and the library uses it. The summary kernel is made to spin for
 * milliseconds with the device's built-in sum_rd, so that the search's first candidate (another
 * sum_rd) wins by far more than any noise: a winner every time, which the real kernels' timings
 * cannot promise. With --dry-run the winner is reported and nothing stored; without, the entry is
 * stored, read back through the library (mhla_tuning_db_list/_get), listed by `mhla info`, applied
 * by a plan of those head dimensions ("tuned entry 16x8", its sum_rd in the tiles), `mhla run` with
 * it still matches the reference, and the --export row holds every field of the stored entry. Bad
 * shapes and a set MHLA_TUNING are usage errors. The backward stage alone (on every device: before
 * the skip) checks each candidate on the causal backward and times it: none may be wrong. */
static void test_tune(void **state)
{
    (void)state;
    char cache[700], kernels[700];
    snprintf(cache, sizeof cache, "MHLA_CACHE_DIR=%s", in_dir("cache"));
    const char *plain[] = {cache, "MHLA_TUNING=", NULL};
    expect_fail(MHLA_ENV(plain, "tune", "--shapes", "64x64@100"), 2, "--shapes 64x64@100: '64x64@100' is not DK[xDV]@N[:M]");
    expect_fail(MHLA_ENV(plain, "tune", "--budget", "1"), 2, "--budget");
    const char *tuning[] = {cache, "MHLA_TUNING=sum_rd=2", NULL};
    expect_fail(MHLA_ENV(tuning, "tune", "--budget", "5"), 2, "tune: MHLA_TUNING is set (sum_rd=2)");
    /* The causal backward's stage: its fields' candidates checked against the reference and timed.
     * The budget counts compiles: a first run that stops after its starting point builds the
     * kernels every candidate shares, so that the second reaches a candidate on a cold cache. */
    expect_ok(MHLA_ENV(plain, "tune", "--stages", "backward", "--budget", "5", "--shapes", "16x8@512:2", "--heads",
                       "2", "--dry-run"));
    const result *r = MHLA_ENV(plain, "tune", "--stages", "backward", "--budget", "10", "--shapes", "16x8@512:2",
                               "--heads", "2", "--dry-run");
    expect_ok(r);
    char bline[256];
    assert_non_null(strstr(r->out, "shape 16x8: N=512 M=2 (causal and backward: N=256,"));
    assert_non_null(strstr(r->out, " 16x8 backward start: "));
    if (!strstr(line_after(r->out, " 16x8 backward bct_fuse=", bline, sizeof bline), " ms"))
        fail_msg("no timed bct_fuse candidate in the backward stage:\n%s", r->out);
    if (strstr(r->out, "wrong against the reference") || strstr(r->out, " 16x8 summary ") ||
        strstr(r->out, " 16x8 causal "))
        fail_msg("--stages backward: a wrong candidate, or another stage searched:\n%s", r->out);
    /* The tiled plans' backward stage: the non-causal backward of the forward's shape, checked and
     * timed (a CPU row's plans are untiled: its candidates run the same kernels). 8 s: the stage's
     * starting point compiles the backward cold (2.8 s seen), and a candidate starts only with 3 s left. */
    r = MHLA_ENV(plain, "tune", "--stages", "tiled-backward", "--budget", "8", "--shapes", "16x8@512:2", "--heads",
                 "2", "--dry-run");
    expect_ok(r);
    if (!strstr(line_after(r->out, " 16x8 tiled-backward bt_tq=", bline, sizeof bline), " ms") ||
        strstr(r->out, "wrong against the reference") || strstr(r->out, " 16x8 backward "))
        fail_msg("--stages tiled-backward: no timed bt_tq candidate, a wrong one, or another stage:\n%s", r->out);
    /* The GPU rows' causal stage: a CPU row's untiled causal forward against the tiled read-out
     * (ct_sq 32, 64) and prefix (cp_ti), each checked against the reference before it is timed. */
    r = MHLA_ENV(plain, "tune", "--stages", "tiled-causal", "--budget", "5", "--shapes", "16x8@512:2", "--heads", "2",
                 "--dry-run");
    expect_ok(r);
    if (!strstr(line_after(r->out, " 16x8 tiled-causal ct_sq=32", bline, sizeof bline), " ms") ||
        strstr(r->out, "wrong against the reference") || strstr(r->out, " 16x8 causal "))
        fail_msg("--stages tiled-causal: no timed ct_sq=32 candidate, a wrong one, or another stage:\n%s", r->out);
    /* The decoder's stage: a CPU row's step walking Dk per work-item against the parts form (dec_dp 2
     * to 16: decoder.cl's STEP_DP and decoder_prefix), each checked on a decoder against the
     * reference, then timed per token after N/4 of context. */
    r = MHLA_ENV(plain, "tune", "--stages", "decode", "--budget", "5", "--shapes", "16x8@512:2", "--heads", "2",
                 "--dry-run");
    expect_ok(r);
    if (!strstr(line_after(r->out, " 16x8 decode  dec_dp=2", bline, sizeof bline), " ms") ||
        strstr(r->out, "wrong against the reference") || strstr(r->out, " 16x8 causal "))
        fail_msg("--stages decode: no timed dec_dp=2 candidate, a wrong one, or another stage:\n%s", r->out);
    r = MHLA_ENV(plain, "info");
    expect_ok(r);
    const char *row = strstr(r->out, "tuning: built-in row '");
    assert_non_null(row);
    const int builtin_rd = field_value(row, "sum_rd");
    if (builtin_rd < 1 || builtin_rd > 16 || field_value(row, "vec") < 8) {
        /* 4-wide (SSE) devices cap every sum_rd candidate to the built-in one: no winner to make */
        printf("test_tune: skipped: the built-in row (%.*s) leaves no other sum_rd to try\n",
               (int)strcspn(row, "\n"), row);
        test_skip();
    }
    char cond[64];
    snprintf(cond, sizeof cond, "SUM_RD == %d", builtin_rd);
    snprintf(kernels, sizeof kernels, "MHLA_KERNEL_DIR=%s", slow_summary("slow", cond));
    const char *env[] = {cache, "MHLA_TUNING=", kernels, NULL};
    /* The budget counts compiles: the configurations the search times (M = 2) and checks (M = 4)
     * are built first, so that a short budget reaches the first candidate on a loaded machine. */
    tensors t = make_inputs(1, 512, 2, 16, 8, MHLA_LAYOUT_BNHD, 0, -1.0f);
    expect_ok(MHLA_ENV(env, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "2"));
    expect_ok(MHLA_ENV(env, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "4"));
    /* (the summary's stage alone: the search reaches it within the budget, after no tiled stage) */
    r = MHLA_ENV(env, "tune", "--budget", "5", "--shapes", "16x8@512:2", "--heads", "2", "--stages", "summary",
                 "--dry-run");
    expect_ok(r);
    assert_non_null(strstr(r->out, "tune: "));
    assert_non_null(strstr(r->out, "shape 16x8: N=512 M=2"));
    assert_non_null(strstr(r->out, " 16x8 summary start: "));
    assert_non_null(strstr(r->out, " candidates timed, 0 discarded, "));
    char spec[512], first[64], line[256];
    snprintf(first, sizeof first, " 16x8 summary sum_rd=%d: ", builtin_rd == 4 ? 8 : 4);
    if (!strstr(line_after(r->out, first, line, sizeof line), " kept (best so far"))
        fail_msg("the first sum_rd candidate was not kept:\n%s", r->out);
    line_after(r->out, "tune: 16x8: ", spec, sizeof spec);
    if (field_value(spec, "sum_rd") == builtin_rd || field_value(spec, "sum_rd") < 1)
        fail_msg("--dry-run: found '%s', not another sum_rd than the built-in %d:\n%s", spec, builtin_rd, r->out);
    assert_null(strstr(r->out, "stored in"));
    DIR *d = opendir(in_dir("cache")); /* the program cache's folder: --dry-run added no database to it */
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, "tuning-", 7) == 0)
            fail_msg("--dry-run stored %s", e->d_name);
    if (d)
        closedir(d);

    /* Stored. */
    r = MHLA_ENV(env, "tune", "--budget", "5", "--shapes", "16x8@512:2", "--heads", "2", "--stages", "summary",
                 "--export");
    expect_ok(r);
    char db[1024], stored_in[1024];
    line_after(r->out, "database: ", db, sizeof db);
    line_after(r->out, "tune: stored in ", stored_in, sizeof stored_in);
    line_after(r->out, "tune: 16x8: ", spec, sizeof spec);
    assert_true(db[0] && strcmp(db, stored_in) == 0);
    const int tuned_rd = field_value(spec, "sum_rd");
    if (tuned_rd == builtin_rd || tuned_rd < 1)
        fail_msg("stored '%s', not another sum_rd than the built-in %d:\n%s", spec, builtin_rd, r->out);

    /* Read back through the library, on this process's own context. */
    const char *prior = getenv("MHLA_CACHE_DIR");
    had_cache_dir = prior != NULL;
    snprintf(saved_cache_dir, sizeof saved_cache_dir, "%s", prior ? prior : "");
    setenv("MHLA_CACHE_DIR", in_dir("cache"), 1);
    mhla_context *ctx = test_context();
    char path[1024], got[1024], note[512], text[2048];
    assert_int_equal(mhla_tuning_db_path(ctx, path, sizeof path), MHLA_OK);
    assert_string_equal(path, db);
    size_t count = 0;
    int64_t dims[4] = {0};
    assert_int_equal(mhla_tuning_db_list(ctx, dims, 2, &count), MHLA_OK);
    assert_int_equal(count, 1);
    assert_true(dims[0] == 16 && dims[1] == 8);
    assert_int_equal(mhla_tuning_db_get(ctx, 16, 8, got, sizeof got, note, sizeof note), MHLA_OK);
    assert_string_equal(got, spec);
    assert_non_null(strstr(note, ", N=512 M=2 H=2: forward "));
    for (int64_t other = 8; other <= 16; other += 8) { /* keyed by both head dimensions */
        assert_int_equal(mhla_tuning_db_get(ctx, other, other, got, sizeof got, NULL, 0), MHLA_OK);
        assert_string_equal(got, "");
    }
    /* A plan of those head dimensions applies it. */
    mhla_config cfg = config_1d(1, 2, 512, 2, 16, 8);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    char applied[64];
    snprintf(applied, sizeof applied, "tuned entry 16x8; summary %dx(", tuned_rd);
    if (!strstr(text, applied))
        fail_msg("the plan's tuning '%s' does not say '%s'", text, applied);
    mhla_plan_destroy(plan);
    /* --export: the row holds every field of the stored entry over the built-in row. */
    const char *exported = strstr(r->out, "{.vec = ");
    assert_non_null(exported);
    assert_non_null(strstr(r->out, mhla_context_device_name(ctx)));
    char as_spec[1024] = "";
    size_t len = 0;
    for (const char *p = exported + 1; *p && *p != '}'; ++p) {
        char name[32];
        int value = 0, used = 0;
        if (*p == '.' && sscanf(p, ".%31[a-z_] = %d%n", name, &value, &used) == 2) {
            len += (size_t)snprintf(as_spec + len, sizeof as_spec - len, "%s%s=%d", len ? "," : "", name, value);
            p += used - 1;
        }
    }
    char want_fields[2048];
    assert_int_equal(mhla_context_set_tuning(ctx, spec), MHLA_OK);
    assert_int_equal(mhla_context_tuning(ctx, want_fields, sizeof want_fields), MHLA_OK);
    assert_int_equal(mhla_context_set_tuning(ctx, as_spec), MHLA_OK);
    assert_int_equal(mhla_context_tuning(ctx, text, sizeof text), MHLA_OK);
    assert_int_equal(mhla_context_set_tuning(ctx, NULL), MHLA_OK);
    assert_non_null(strstr(want_fields, ": vec="));
    if (!strstr(text, ": vec=") || strcmp(strstr(text, ": vec="), strstr(want_fields, ": vec=")) != 0)
        fail_msg("--export's row (%s) is not the stored entry (%s):\n%s\n%s", as_spec, spec, text, want_fields);
    mhla_context_destroy(ctx);

    /* `mhla info` lists the entry; `mhla run` with it matches the reference. */
    r = MHLA_ENV(plain, "info");
    expect_ok(r);
    char heading[600], summary[64];
    snprintf(heading, sizeof heading, "  Dk=16 Dv=8 (%s):\n    summary     ", note);
    snprintf(summary, sizeof summary, "sum_rd=%d", tuned_rd);
    const char *listed = strstr(r->out, heading);
    if (!listed || !strstr(line_after(listed, "    summary     ", text, sizeof text), summary))
        fail_msg("'mhla info' does not list the entry '%s' (%s):\n%s", spec, note, r->out);
    r = MHLA_ENV(plain, "run", "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--out", "o.npy", "--blocks", "2",
                 "--check");
    expect_ok(r);
    assert_true(printed_error(r) <= 1e-5);
    const int64_t grid[3] = {512, 1, 1}, blocks[3] = {2, 1, 1};
    assert_true(default_error(&t, grid, blocks, NPY_F32) <= 1e-5);
    free_inputs(&t);

}

/* The joint pass reaches a tile that one field at a time does not: the summary kernel spins for
 * milliseconds unless its tile is 2 key rows x 4 vectors. The one-field pass never tries 2 rows (its
 * values are 4, 6, 8 and 16), and 4 vectors alone keep the spin; only the joint grid's (2, 4) is fast,
 * so it must be kept there and the search end on it. --stages summary keeps the run short. */
static void test_tune_joint(void **state)
{
    (void)state;
    char cache[700], kernels[700];
    snprintf(cache, sizeof cache, "MHLA_CACHE_DIR=%s", in_dir("cache"));
    const char *plain[] = {cache, "MHLA_TUNING=", NULL};
    expect_fail(MHLA_ENV(plain, "tune", "--stages", "summary,frob"), 2,
                "--stages summary,frob: unknown stage 'frob' (tiled, summary, output, mixing, causal, softmax, "
                "backward, tiled-backward, tiled-causal, decode)");
    const result *r = MHLA_ENV(plain, "info");
    expect_ok(r);
    const char *row = strstr(r->out, "tuning: built-in row '");
    assert_non_null(row);
    const int rd = field_value(row, "sum_rd"), nv = field_value(row, "sum_nv");
    if (field_value(row, "vec") < 8 || rd == 2 || nv == 4) {
        printf("test_tune_joint: skipped: the built-in row (%.*s) leaves no pair to move to\n",
               (int)strcspn(row, "\n"), row);
        test_skip();
    }
    const int a = 2, b = 4; /* 8 accumulator vectors: inside the joint grid's 4..16 */
    char cond[64];
    snprintf(cond, sizeof cond, "!(SUM_RD == %d && SUM_NV == %d)", a, b);
    snprintf(kernels, sizeof kernels, "MHLA_KERNEL_DIR=%s", slow_summary("slow-joint", cond));
    const char *env[] = {cache, "MHLA_TUNING=", kernels, NULL};
    r = MHLA_ENV(env, "tune", "--budget", "90", "--shapes", "64x64@512:2", "--heads", "2", "--stages", "summary",
                 "--dry-run");
    expect_ok(r);
    char line[256], want[64], spec[512];
    assert_null(strstr(r->out, " output ")); /* --stages summary: no other stage searched */
    assert_non_null(strstr(r->out, " 64x64 summary joint pass ("));
    snprintf(want, sizeof want, " 64x64 summary sum_rd=%d,sum_nv=%d,", a, b);
    if (!strstr(line_after(r->out, want, line, sizeof line), " kept"))
        fail_msg("the joint candidate sum_rd=%d,sum_nv=%d was not kept:\n%s", a, b, r->out);
    /* It may end on the same tile at twice the work-group size: nothing spinning can beat it. */
    line_after(r->out, "tune: 64x64: ", spec, sizeof spec);
    if (field_value(spec, "sum_rd") != a || field_value(spec, "sum_nv") != b)
        fail_msg("the search ended on '%s', not the sum_rd=%d,sum_nv=%d tile:\n%s", spec, a, b, r->out);
}

/* --row: the search from another built-in row than the device's, as a GPU row's fields are searched
 * on a CPU device here before a GPU's few minutes are spent on them (scripts/gpu_check.sh's tune
 * step): the stages whose fields only a tiled plan reads (the tiled forward and its backward; the
 * tiled causal forward's and the decoder's kernels are test_tune's from the CPU row) reached, each
 * candidate checked against the reference; an entry names its row and is kept only where it beats
 * the device's own. */
static void test_tune_row(void **state)
{
    (void)state;
    char cache[700];
    snprintf(cache, sizeof cache, "MHLA_CACHE_DIR=%s", in_dir("cache"));
    const char *plain[] = {cache, "MHLA_TUNING=", NULL};
    expect_fail(MHLA_ENV(plain, "tune", "--row", "nope", "--budget", "5"), 2,
                "--row nope: mhla_context_set_tuning: unknown row 'nope' (rows: ");
    expect_fail(MHLA_ENV(plain, "tune", "--row", "gpu,sum_rd=2", "--budget", "5"), 2,
                "--row gpu,sum_rd=2: not a built-in row's name");
    const result *r = MHLA_ENV(plain, "info");
    expect_ok(r);
    char own[32] = "", head[128], line[256];
    const char *row = strstr(r->out, "tuning: built-in row '");
    assert_true(row && sscanf(row, "tuning: built-in row '%31[^']", own) == 1);
    const char *other = strcmp(own, "gpu") != 0 ? "gpu" : "mobile"; /* both tile every stage */
    /* 30 s: the two stages' first pass took 15 s with every kernel compiled cold (2 cores, idle) */
    r = MHLA_ENV(plain, "tune", "--row", other, "--stages", "tiled,tiled-backward", "--budget", "30", "--shapes",
                 "16x8@512:2", "--heads", "2", "--dry-run");
    expect_ok(r);
    snprintf(head, sizeof head, ", row '%s' (--row; the device's built-in row: '%s'), budget 30 s", other, own);
    if (!strstr(r->out, head))
        fail_msg("no '%s' in:\n%s", head, r->out);
    const char *firsts[] = {" 16x8 tiled   tl_tk=", " 16x8 tiled-backward bt_tq="};
    for (size_t i = 0; i < sizeof firsts / sizeof firsts[0]; ++i)
        if (!strstr(line_after(r->out, firsts[i], line, sizeof line), " ms"))
            fail_msg("--row %s: no timed candidate '%s...':\n%s", other, firsts[i], r->out);
    if (strstr(r->out, "wrong against the reference") || strstr(r->out, " 16x8 summary ") ||
        strstr(r->out, " 16x8 backward ") || strstr(r->out, " 16x8 decode "))
        fail_msg("--row %s: a wrong candidate, or a stage not asked for:\n%s", other, r->out);
    /* whatever it found is the other row's and was timed against the device's own */
    char spec[512], want[48];
    line_after(r->out, "tune: 16x8: ", spec, sizeof spec);
    snprintf(want, sizeof want, "row=%s", other);
    if (strncmp(spec, want, strlen(want)) != 0 || !strstr(r->out, " ms with the built-in row, "))
        fail_msg("--row %s: the entry '%s' does not name its row, or was not timed against '%s':\n%s", other, spec,
                 own, r->out);

    /* The backward's check at the default shape's head dimensions, 64: its inputs are the tests'
     * (docs/spec.md's tolerance), where all-positive ones once failed every row's starting point
     * in the non-causal backward (dq 1.1e-4 to 1.3e-4 against 1e-4), and the whole search with it. */
    r = MHLA_ENV(plain, "tune", "--stages", "tiled-backward", "--budget", "5", "--shapes", "64x64@256:1", "--heads",
                 "1", "--dry-run");
    expect_ok(r);
    if (!strstr(r->out, " 64x64 tiled-backward start: "))
        fail_msg("the tiled-backward stage did not start at Dk = Dv = 64:\n%s", r->out);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s MHLA_BINARY KERNEL_SOURCE_DIR\n", argv[0]);
        return 2;
    }
    poison_outputs(); /* inherited by every mhla the tests start */
    static char bin[4096]; /* absolute: the tests run it from their own folders */
    char cwd[2048];
    if (argv[1][0] != '/' && !getcwd(cwd, sizeof cwd)) {
        perror("getcwd");
        return 1;
    }
    snprintf(bin, sizeof bin, "%s%s%s", argv[1][0] == '/' ? "" : cwd, argv[1][0] == '/' ? "" : "/", argv[1]);
    mhla_bin = bin;
    kernel_src = argv[2];
    if (scratch_make(root, sizeof root, "mhla-cli") != 0) {
        perror("mkdtemp");
        return 1;
    }
    umask(022);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_help_and_version, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_init_mixing, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_init_mixing_errors, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_usage_errors, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_input_errors, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_check_1d_2d_3d, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_options, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_mixing_file_and_layout, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_device_by_name, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_repeat, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_float16, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_chunk, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_recurrent, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_larger_mixing, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_packed, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_options, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_16bit, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_errors, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_failures_leave_no_output, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_causal_check_fails, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_grad, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_run_grad_cross, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_grad_causal, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_grad_packed, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_grad_16bit, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_grad_mode_errors, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_output_write_failure, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_signal_removes_temporary, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_grad_signal_removes_temporaries, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_info, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_selftest, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_tune, fresh_dir, tune_teardown),
        cmocka_unit_test_setup_teardown(test_tune_joint, fresh_dir, drop_dir),
        cmocka_unit_test_setup_teardown(test_tune_row, fresh_dir, drop_dir),
    };
    const int failed = run_group("cli", tests, NULL, NULL);
    scratch_remove(root);
    return failed;
}
