/* Bad input: each case gets its named status and a message naming the offending value, and
 * nothing crashes or leaks a half-made handle. */
#include "helpers.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static void test_sizes(void **state)
{
    mhla_context *ctx = *state;
    mhla_config base = config_1d(1, 2, 16, 4, 8, 8), c;
    struct {
        int64_t *field;
        int64_t value;
        const char *text;
    } cases[] = {
        {&c.batch, 0, "batch must be >= 1, got 0"},   {&c.heads, -2, "heads must be >= 1, got -2"},
        {&c.seq_t, 0, "seq_t must be >= 1, got 0"},   {&c.seq_h, -1, "seq_h must be >= 1, got -1"},
        {&c.seq_w, 0, "seq_w must be >= 1, got 0"},   {&c.block_t, 0, "block_t must be >= 1, got 0"},
        {&c.block_h, -5, "block_h must be >= 1, got -5"}, {&c.block_w, 0, "block_w must be >= 1, got 0"},
        {&c.dk, 0, "dk must be >= 1, got 0"},         {&c.dv, -64, "dv must be >= 1, got -64"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        c = base;
        *cases[i].field = cases[i].value;
        expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, cases[i].text);
    }
}

static void test_grid_not_divisible(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = config_1d(1, 1, 10, 3, 8, 8);
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "T = 10 is not divisible by block_t = 3");
    mhla_config_init(&c);
    c.seq_h = 6, c.seq_w = 9, c.block_h = 2, c.block_w = 4, c.dk = c.dv = 4;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "Ws = 9 is not divisible by block_w = 4");
    c.block_w = 3, c.block_h = 4;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "Hs = 6 is not divisible by block_h = 4");
    char msg[256];
    assert_int_equal(mhla_config_check(&c, msg, sizeof msg), MHLA_ERR_INVALID_SHAPE);
    assert_non_null(strstr(msg, "block_h = 4"));
}

static void test_unsupported_head_dims(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = config_1d(1, 1, 16, 4, 300, 8);
    expect_plan_error(ctx, &c, MHLA_ERR_UNSUPPORTED, "dk = 300");
    c.dk = 8, c.dv = MHLA_MAX_HEAD_DIM + 1;
    expect_plan_error(ctx, &c, MHLA_ERR_UNSUPPORTED, "dv = 257");
}

static void test_unknown_enums_and_values(void **state)
{
    mhla_context *ctx = *state;
    mhla_config base = config_1d(1, 1, 16, 4, 8, 8), c;
    c = base, c.layout = (mhla_layout)7;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "unknown layout 7");
    c = base, c.feature_map = (mhla_feature_map)9;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "unknown feature map 9");
    c = base, c.normalizer = (mhla_normalizer)-1;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "unknown normalizer -1");
    c = base, c.dtype = (mhla_dtype)5;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "unknown dtype 5");
    c = base, c.causal = 2;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "causal must be 0 or 1, got 2");
    c = base, c.eps = NAN;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "eps must be finite");
    c = base, c.feature_eps = -1.0f;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "feature_eps must be finite and >= 0, got -1");
    c = base, c.scale = INFINITY;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_ARGUMENT, "scale must be finite");
    c = base, c.mixing_rows = 5;
    expect_plan_error(ctx, &c, MHLA_ERR_INVALID_SHAPE, "mixing_rows = 5");
    mhla_feature_map fm;
    mhla_normalizer nm;
    mhla_layout lay;
    mhla_dtype dt;
    assert_int_equal(mhla_feature_map_parse("gelu", &fm), MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "'gelu'"));
    assert_int_equal(mhla_normalizer_parse("", &nm), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_layout_parse("nhd", &lay), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_dtype_parse("f64", &dt), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_dtype_parse(NULL, &dt), MHLA_ERR_INVALID_ARGUMENT);
}

static void test_null_handles(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c = config_1d(1, 1, 16, 4, 8, 8);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(NULL, &c, &plan), MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "context is NULL"));
    assert_int_equal(mhla_plan_create(ctx, NULL, &plan), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_plan_create(ctx, &c, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_forward(NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "plan is NULL"));
    assert_int_equal(mhla_forward_host(NULL, NULL, NULL, NULL, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    float x[16 * 8], m[16];
    const char *names[] = {"q pointer", "k pointer", "v pointer", "mixing pointer", "out pointer"};
    const void *args[5][5] = {{NULL, x, x, m, x}, {x, NULL, x, m, x}, {x, x, NULL, m, x},
                              {x, x, x, NULL, x}, {x, x, x, m, NULL}};
    for (int i = 0; i < 5; ++i) {
        assert_int_equal(mhla_forward_host(plan, args[i][0], args[i][1], args[i][2], args[i][3], (void *)args[i][4]),
                         MHLA_ERR_INVALID_ARGUMENT);
        assert_message_has(ctx, names[i]);
    }
    assert_int_equal(mhla_plan_workspace_size(NULL), 0);
    assert_int_equal(mhla_plan_tensor_bytes(NULL, MHLA_TENSOR_Q), 0);
    assert_int_equal(mhla_plan_tensor_bytes(plan, (mhla_tensor)17), 0);
    assert_null(mhla_plan_config(NULL));
    assert_string_equal(mhla_context_message(NULL), "");
    mhla_plan_destroy(plan);
    mhla_plan_destroy(NULL);
}

/* The self-test calls: their refusals name the argument; one configuration is really compared (its
 * error nonzero and within the tolerance of its storage), and a configuration a plan would refuse
 * is refused with the plan's message. */
static void test_selftest_calls(void **state)
{
    mhla_context *ctx = *state;
    mhla_selftest_result r;
    mhla_config c = config_1d(1, 2, 64, 4, 16, 8);
    assert_int_equal(mhla_selftest(NULL, 1, NULL, NULL, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_selftest_config(NULL, &c, 0, 1, &r), MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "context is NULL"));
    assert_int_equal(mhla_selftest_config(ctx, NULL, 0, 1, &r), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "cfg is NULL");
    assert_int_equal(mhla_selftest_config(ctx, &c, 0, 1, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "out is NULL");
    mhla_config packed = config_causal(1, 2, 64, 16, 8, 16);
    packed.varlen = 1;
    assert_int_equal(mhla_selftest_config(ctx, &packed, 0, 1, &r), MHLA_ERR_UNSUPPORTED);
    assert_message_has(ctx, "packed varlen configurations need their offsets");
    mhla_config odd = c;
    odd.block_w = 3; /* 64 tokens do not split into 3 blocks */
    assert_int_not_equal(mhla_selftest_config(ctx, &odd, 0, 1, &r), MHLA_OK);
    assert_message_has(ctx, "mhla_selftest_config: ");

    const struct {
        mhla_dtype dtype;
        int causal, softmax;
        const char *path;
    } runs[] = {{MHLA_DTYPE_F32, 0, 0, "forward"}, {MHLA_DTYPE_F16, 1, 0, "causal"}, {MHLA_DTYPE_F32, 0, 1, "softmax"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; ++i) {
        mhla_config k = runs[i].causal ? config_causal(1, 2, 64, 16, 8, 16) : c;
        k.dtype = runs[i].dtype;
        memset(&r, 0x5a, sizeof r);
        assert_int_equal(mhla_selftest_config(ctx, &k, runs[i].softmax, 7, &r), MHLA_OK);
        if (strcmp(r.path, runs[i].path) != 0 || r.status != MHLA_OK || !r.passed || r.message[0] != '\0')
            fail_msg("%s: path '%s', status %d, passed %d, '%s'", runs[i].path, r.path, r.status, r.passed, r.message);
        /* compared, not assumed: float arithmetic leaves some error against the double reference */
        if (!(r.max_rel_err > 0 && r.max_rel_err <= r.tolerance && r.tolerance == mhla_reference_tolerance(k.dtype, 64)))
            fail_msg("%s: max_rel_err %g, tolerance %g (docs/spec.md: %g)", runs[i].path, r.max_rel_err, r.tolerance,
                     mhla_reference_tolerance(k.dtype, 64));
    }
}

/* Device buffers: NULL, too small (CL_MEM_SIZE), another context's, aliased output, bad wait list. */
static void test_device_buffers(void **state)
{
    mhla_context *ctx = *state;
    cl_context clctx = mhla_context_cl_context(ctx);
    mhla_config c = config_1d(1, 2, 16, 4, 8, 6);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    const size_t qb = mhla_plan_tensor_bytes(plan, MHLA_TENSOR_Q), vb = mhla_plan_tensor_bytes(plan, MHLA_TENSOR_V);
    const size_t mb = mhla_plan_tensor_bytes(plan, MHLA_TENSOR_MIXING);
    assert_int_equal(qb, 16 * 2 * 8 * 4);
    assert_int_equal(mb, 16 * 4);
    cl_int err;
    cl_mem q = clCreateBuffer(clctx, CL_MEM_READ_WRITE, qb, NULL, &err);
    cl_mem k = clCreateBuffer(clctx, CL_MEM_READ_WRITE, qb, NULL, &err);
    cl_mem v = clCreateBuffer(clctx, CL_MEM_READ_WRITE, vb, NULL, &err);
    cl_mem o = clCreateBuffer(clctx, CL_MEM_READ_WRITE, vb, NULL, &err);
    cl_mem mix = clCreateBuffer(clctx, CL_MEM_READ_WRITE, mb, NULL, &err);
    cl_mem small = clCreateBuffer(clctx, CL_MEM_READ_WRITE, qb - 4, NULL, &err);
    cl_mem small_mix = clCreateBuffer(clctx, CL_MEM_READ_WRITE, mb - 4, NULL, &err);
    cl_mem small_out = clCreateBuffer(clctx, CL_MEM_READ_WRITE, vb - 4, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);

    assert_int_equal(mhla_forward(plan, NULL, k, v, mix, o, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "q buffer is NULL");
    assert_int_equal(mhla_forward(plan, q, k, v, NULL, o, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "mixing buffer is NULL");
    assert_int_equal(mhla_forward(plan, q, small, v, mix, o, 0, NULL, NULL), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_message_has(ctx, "k buffer holds 1020 bytes; [B,N,H,D] = [1,16,2,8] f32 needs 1024");
    assert_int_equal(mhla_forward(plan, q, k, v, small_mix, o, 0, NULL, NULL), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_message_has(ctx, "mixing buffer holds 60 bytes; 4 x 4 float32 needs 64");
    assert_int_equal(mhla_forward(plan, q, k, v, mix, small_out, 0, NULL, NULL), MHLA_ERR_BUFFER_TOO_SMALL);
    assert_message_has(ctx, "out buffer holds 764 bytes; [B,N,H,D] = [1,16,2,6] f32 needs 768");
    assert_int_equal(mhla_forward(plan, q, k, v, mix, v, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "out must not be the same buffer");
    assert_int_equal(mhla_forward(plan, q, k, v, mix, o, 2, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "wait list of 2 events");

    /* a buffer of another OpenCL context */
    mhla_context *other = test_context();
    cl_mem foreign = clCreateBuffer(mhla_context_cl_context(other), CL_MEM_READ_WRITE, qb, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(mhla_forward(plan, foreign, k, v, mix, o, 0, NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "q buffer belongs to another cl_context");
    clReleaseMemObject(foreign);
    mhla_context_destroy(other);

    /* the right buffers still work after all that: the output (NaN before) is the reference's */
    test_inputs in;
    assert_int_equal(test_inputs_make(&c, MHLA_INIT_LINEAR, 12, &in), MHLA_OK);
    cl_command_queue queue = mhla_context_queue(ctx);
    assert_int_equal(clEnqueueWriteBuffer(queue, q, CL_TRUE, 0, qb, in.q, 0, NULL, NULL), CL_SUCCESS);
    assert_int_equal(clEnqueueWriteBuffer(queue, k, CL_TRUE, 0, qb, in.k, 0, NULL, NULL), CL_SUCCESS);
    assert_int_equal(clEnqueueWriteBuffer(queue, v, CL_TRUE, 0, vb, in.v, 0, NULL, NULL), CL_SUCCESS);
    assert_int_equal(clEnqueueWriteBuffer(queue, mix, CL_TRUE, 0, mb, in.mix, 0, NULL, NULL), CL_SUCCESS);
    nan_fill(ctx, o, vb);
    assert_int_equal(mhla_forward(plan, q, k, v, mix, o, 0, NULL, NULL), MHLA_OK);
    float *out = nan_floats(in.nv);
    double *ref = malloc(in.nv * sizeof *ref);
    assert_non_null(ref);
    assert_int_equal(clEnqueueReadBuffer(queue, o, CL_TRUE, 0, vb, out, 0, NULL, NULL), CL_SUCCESS);
    assert_int_equal(mhla_reference_forward(&c, in.q, in.k, in.v, in.mix, ref), MHLA_OK);
    assert_true(finite_rel_err(out, ref, in.nv, __func__) <= 1e-5);
    free(out), free(ref);
    test_inputs_free(&in);
    cl_mem all[] = {q, k, v, o, mix, small, small_mix, small_out};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        clReleaseMemObject(all[i]);
    mhla_plan_destroy(plan);
}

/* A workspace or tensor larger than the device can allocate is a status, not a crash. The sizes
 * are derived from the device's own limit, so the case holds on any device. */
static void test_out_of_device_memory(void **state)
{
    mhla_context *ctx = *state;
    mhla_device_info info;
    size_t count = 0;
    /* Workspace: M blocks of 64 heads x 256 x 257 floats = 16.8 MB each. */
    const uint64_t per_block = 64ull * 256 * 257 * 4;
    cl_ulong max_alloc = 0;
    assert_int_equal(clGetDeviceInfo(mhla_context_device(ctx), CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc,
                                     &max_alloc, NULL),
                     CL_SUCCESS);
    cl_ulong global = 0;
    assert_int_equal(clGetDeviceInfo(mhla_context_device(ctx), CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global,
                                     NULL),
                     CL_SUCCESS);
    int64_t m = (int64_t)(max_alloc / per_block) + 1;
    mhla_config c = config_1d(1, 64, m, m, 256, 256);
    /* The two summary buffers together may already exceed the device's memory (llvmpipe: its
     * largest allocation is all of it), which is checked first; otherwise one of them is too big. */
    if (2 * (uint64_t)m * per_block > global) {
        expect_plan_error(ctx, &c, MHLA_ERR_OUT_OF_DEVICE_MEMORY, "the plan's workspace needs");
        assert_message_has(ctx, "bytes of global memory");
    } else {
        expect_plan_error(ctx, &c, MHLA_ERR_OUT_OF_DEVICE_MEMORY, "the block summaries needs");
        assert_message_has(ctx, "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
    }

    /* Staging for mhla_forward_host: q alone exceeds the limit (the workspace is small). The host
     * arrays are never read because the allocation fails first. */
    const uint64_t per_token = 64ull * 256 * 4;
    const int64_t n = (int64_t)(max_alloc / per_token) + 1;
    if (n > 1 << 30) /* the device could allocate it after all: nothing to show here */
        test_skip();
    c = config_1d(1, 64, n, 1, 256, 256);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    float dummy[1] = {0};
    assert_int_equal(mhla_forward_host(plan, dummy, dummy, dummy, dummy, dummy), MHLA_ERR_OUT_OF_DEVICE_MEMORY);
    assert_message_has(ctx, "the host-copy buffer for q needs");
    mhla_plan_destroy(plan);
    (void)info, (void)count;
}

/* The GPU row's tiled forward at Dk = Dv = 64 in a context made under MHLA_LIMITS=limits: its
 * groups must be tiled and hold 64 work-items at most (32 x 32 summaries, 32 tokens x 32 columns
 * read out), or less where the device builds the kernels for fewer (llvmpipe). */
static void check_tiled_in_64(const char *limits)
{
    setenv("MHLA_LIMITS", limits, 1);
    mhla_context *ctx = test_context();
    unsetenv("MHLA_LIMITS");
    assert_int_equal(mhla_context_set_tuning(ctx, "row=gpu"), MHLA_OK);
    mhla_config c = config_1d(1, 2, 256, 4, 64, 64);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    char text[512];
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    int td = 0, tv = 0, tq = 0, cols = 0;
    const char *sum = strstr(text, "tiled: summary groups of "), *outp = strstr(text, "output groups of ");
    if (!sum || !outp || sscanf(sum, "tiled: summary groups of %dx%d", &td, &tv) != 2 ||
        sscanf(outp, "output groups of %d tokens x %d columns", &tq, &cols) != 2 || td > 32 || tv > 32 ||
        (td / 4) * (tv / 4) > 64 || (tq / 4) * (cols / 4) > 64 || td < 4 || tq < 4)
        fail_msg("MHLA_LIMITS=%s: the plan says '%s'", limits, text);
    mhla_plan_destroy(plan);
    mhla_context_destroy(ctx);
}

/* MHLA_LIMITS (the test option that lowers the device's work-group and local-memory limits): a
 * malformed one fails the context naming it; a valid one reaches the tiles (the GPU row's tiled
 * forward in groups of 64: 32 x 32), kwg the tiles refitted after building, where the plan started
 * from the device's own limit, and local_type=global the untiled forms of a GPU row. */
static void test_forced_limits(void **state)
{
    (void)state;
    static const char *const bad[][2] = {{"wg=0", "'wg' needs a positive whole number"},
                                         {"kwg=-1", "'kwg' needs a positive whole number"},
                                         {"local=16Q", "'local' needs a positive whole number"},
                                         {"frob=4", "unknown limit 'frob'"},
                                         {"wg", "expected name=value"},
                                         {"local_type=shared", "local_type takes only 'global'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        setenv("MHLA_LIMITS", bad[i][0], 1);
        mhla_context *ctx = NULL;
        assert_int_equal(mhla_context_create(NULL, &ctx), MHLA_ERR_INVALID_ARGUMENT);
        assert_null(ctx);
        if (!strstr(mhla_last_message(), bad[i][1]) || !strstr(mhla_last_message(), bad[i][0]))
            fail_msg("MHLA_LIMITS=%s: '%s' does not say '%s'", bad[i][0], mhla_last_message(), bad[i][1]);
    }
    check_tiled_in_64("wg=64,local=16KiB");
    check_tiled_in_64("kwg=64");

    mhla_config c = config_1d(1, 2, 256, 4, 64, 64);
    mhla_plan *plan = NULL;
    char text[512];
    mhla_context *ctx = NULL;
    /* local_type=global (a Mali's local memory): a GPU row takes its untiled forms, and says so */
    setenv("MHLA_LIMITS", "local_type=global,wg=128", 1);
    ctx = test_context();
    unsetenv("MHLA_LIMITS");
    assert_int_equal(mhla_context_set_tuning(ctx, "row=mobile"), MHLA_OK);
    char tuning[2048];
    assert_int_equal(mhla_context_tuning(ctx, tuning, sizeof tuning), MHLA_OK);
    if (!strstr(tuning, "built-in row 'mobile' (mhla_context_set_tuning; local memory is global: untiled)") ||
        !strstr(tuning, " tiled=0,") || !strstr(tuning, "bc_sq=0") || !strstr(tuning, "dec_dp=1"))
        fail_msg("MHLA_LIMITS=local_type=global, row=mobile: %s", tuning);
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    if (strstr(text, "tiled:"))
        fail_msg("MHLA_LIMITS=local_type=global, row=mobile: the plan says '%s'", text);
    mhla_plan_destroy(plan);
    mhla_context_destroy(ctx);
}

/* A kernel that fails to build: its build log reaches the caller (through MHLA_KERNEL_DIR, the
 * development switch that loads kernels from disk). */
static void test_kernel_build_failure(void **state)
{
    (void)state;
    char dir[] = "/tmp/mhla_badkernel_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/block_summary.cl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("kernel void block_summary(global float *x) { x[0] = undeclared_identifier_xyz; }\n", f);
    fclose(f);
    setenv("MHLA_KERNEL_DIR", dir, 1);
    mhla_context *ctx = test_context(); /* fresh: no program cached */
    /* the untiled summary, block_summary.cl (a GPU's own row takes summary_tiled.cl) */
    assert_int_equal(mhla_context_set_tuning(ctx, "tiled=0"), MHLA_OK);
    mhla_config c = config_1d(1, 1, 16, 4, 8, 8);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_ERR_BUILD_FAILED);
    assert_null(plan);
    assert_message_has(ctx, "building kernels/block_summary.cl");
    assert_message_has(ctx, "undeclared_identifier_xyz"); /* from the compiler's log */
    /* built once: only a failure with an empty log is tried again */
    if (strstr(mhla_context_message(ctx), "twice"))
        fail_msg("a compile error was built twice: %s", mhla_context_message(ctx));
    assert_int_equal(mhla_context_cl_error(ctx), CL_BUILD_PROGRAM_FAILURE);
    /* a missing kernel file is reported by name */
    unlink(path);
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "block_summary.cl");
    unsetenv("MHLA_KERNEL_DIR");
    rmdir(dir);
    /* and without the switch the same context builds the embedded kernels */
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    mhla_plan_destroy(plan);
    mhla_context_destroy(ctx);
}

static void test_unsupported_combinations(void **state)
{
    mhla_context *ctx = *state;
    mhla_config c;
    mhla_config_init_causal(&c);
    c.seq_t = 16, c.dk = 8, c.dv = 8;
    c.normalizer = MHLA_NORMALIZER_OFFICIAL; /* defined over block grids only */
    expect_plan_error(ctx, &c, MHLA_ERR_UNSUPPORTED, "the official normalizer is defined for block grids only");
    c.normalizer = MHLA_NORMALIZER_NONE;
    c.dtype = MHLA_DTYPE_BF16; /* every storage type is supported in causal mode too */
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &c, &plan), MHLA_OK);
    mhla_plan_destroy(plan);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_grid_not_divisible),
        cmocka_unit_test(test_unsupported_head_dims),
        cmocka_unit_test(test_unknown_enums_and_values),
        cmocka_unit_test(test_null_handles),
        cmocka_unit_test(test_selftest_calls),
        cmocka_unit_test(test_device_buffers),
        cmocka_unit_test(test_out_of_device_memory),
        cmocka_unit_test(test_kernel_build_failure),
        cmocka_unit_test(test_forced_limits),
        cmocka_unit_test(test_unsupported_combinations),
    };
    return run_group("errors", tests, context_setup, context_teardown);
}
