/* Contexts and devices: selection by spec and MHLA_DEVICE, wrapping an application's queue (in
 * order and out of order), two plans on one context, a second device, version and status names. */
#include "helpers.h"
#include "scratch.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static void test_version_and_status_names(void **state)
{
    (void)state;
    assert_int_equal(mhla_version(), MHLA_VERSION_NUMBER);
    assert_string_equal(mhla_version_string(), MHLA_VERSION_STRING);
    assert_string_equal(mhla_status_name(MHLA_OK), "MHLA_OK");
    assert_string_equal(mhla_status_name(MHLA_ERR_BUFFER_TOO_SMALL), "MHLA_ERR_BUFFER_TOO_SMALL");
    assert_string_equal(mhla_status_name((mhla_status)999), "MHLA_UNKNOWN_STATUS");
    /* Written out here, not generated from MHLA_STATUS_MAP: values are ABI and never reused, so a
     * renumbered, renamed, dropped or added status fails this table. */
    static const struct {
        mhla_status st;
        int value;
        const char *name;
    } table[] = {
        {MHLA_OK, 0, "MHLA_OK"},
        {MHLA_ERR_INVALID_ARGUMENT, 1, "MHLA_ERR_INVALID_ARGUMENT"},
        {MHLA_ERR_INVALID_SHAPE, 2, "MHLA_ERR_INVALID_SHAPE"},
        {MHLA_ERR_BUFFER_TOO_SMALL, 3, "MHLA_ERR_BUFFER_TOO_SMALL"},
        {MHLA_ERR_UNSUPPORTED, 4, "MHLA_ERR_UNSUPPORTED"},
        {MHLA_ERR_DEVICE_NOT_FOUND, 5, "MHLA_ERR_DEVICE_NOT_FOUND"},
        {MHLA_ERR_OUT_OF_DEVICE_MEMORY, 6, "MHLA_ERR_OUT_OF_DEVICE_MEMORY"},
        {MHLA_ERR_OUT_OF_HOST_MEMORY, 7, "MHLA_ERR_OUT_OF_HOST_MEMORY"},
        {MHLA_ERR_BUILD_FAILED, 8, "MHLA_ERR_BUILD_FAILED"},
        {MHLA_ERR_OPENCL, 9, "MHLA_ERR_OPENCL"},
        {MHLA_ERR_BLAS, 10, "MHLA_ERR_BLAS"},
        {MHLA_ERR_SEQUENCE_TOO_LONG, 11, "MHLA_ERR_SEQUENCE_TOO_LONG"},
        {MHLA_ERR_CAPACITY_EXCEEDED, 12, "MHLA_ERR_CAPACITY_EXCEEDED"},
        {MHLA_ERR_CONFIG_MISMATCH, 13, "MHLA_ERR_CONFIG_MISMATCH"},
        {MHLA_ERR_MPI, 14, "MHLA_ERR_MPI"},
        {MHLA_ERR_IO, 15, "MHLA_ERR_IO"},
    };
    const size_t n = sizeof table / sizeof table[0];
#define COUNT_ENTRY(name, value, text) +1
    assert_int_equal(0 MHLA_STATUS_MAP(COUNT_ENTRY), n);
#undef COUNT_ENTRY
    const char *unknown = mhla_strerror((mhla_status)999);
    for (size_t i = 0; i < n; ++i) {
        assert_int_equal((int)table[i].st, table[i].value);
        assert_string_equal(mhla_status_name((mhla_status)table[i].value), table[i].name);
        const char *text = mhla_strerror((mhla_status)table[i].value);
        assert_true(strlen(text) > 0 && strcmp(text, unknown) != 0);
        for (size_t j = 0; j < i; ++j) /* each status explains itself in its own words */
            assert_string_not_equal(text, mhla_strerror((mhla_status)table[j].value));
    }
    assert_string_equal(mhla_strerror(MHLA_OK), "success");
    assert_string_equal(mhla_status_name((mhla_status)(int)n), "MHLA_UNKNOWN_STATUS");
}

static void test_device_list(void **state)
{
    (void)state;
    size_t count = 0;
    assert_int_equal(mhla_device_list(NULL, 0, &count), MHLA_OK);
    assert_true(count >= 1);
    mhla_device_info *infos = calloc(count, sizeof *infos);
    assert_non_null(infos);
    assert_int_equal(mhla_device_list(infos, count, &count), MHLA_OK);
    int defaults = 0;
    for (size_t i = 0; i < count; ++i) {
        defaults += infos[i].is_default;
        assert_int_equal(infos[i].index, (int)i);
        assert_true(strlen(infos[i].device_name) > 0);
        assert_true(infos[i].max_work_group_size >= 1);
        assert_true(infos[i].max_alloc_bytes > 0);
    }
    assert_int_equal(defaults, 1);
    assert_int_equal(mhla_device_list(NULL, 0, NULL), MHLA_ERR_INVALID_ARGUMENT);
    free(infos);
}

static void test_device_specs(void **state)
{
    (void)state;
    mhla_device_info info;
    size_t count = 0;
    assert_int_equal(mhla_device_list(&info, 1, &count), MHLA_OK);
    char spec[32];
    const char *specs[3] = {"0", NULL, NULL};
    snprintf(spec, sizeof spec, "%d:%d", info.platform_index, info.device_index);
    specs[1] = spec;
    specs[2] = info.device_name; /* a name matches itself as a substring */
    for (int i = 0; i < 3; ++i) {
        mhla_context *ctx = NULL;
        mhla_status st = mhla_context_create(specs[i], &ctx);
        if (st != MHLA_OK)
            fail_msg("spec '%s': %s", specs[i], mhla_last_message());
        assert_string_equal(mhla_context_device_name(ctx), info.device_name);
        mhla_context_destroy(ctx);
    }
    mhla_context *ctx = (mhla_context *)0x1;
    assert_int_equal(mhla_context_create("99", &ctx), MHLA_ERR_DEVICE_NOT_FOUND);
    assert_null(ctx);
    assert_non_null(strstr(mhla_last_message(), "'99'"));
    assert_non_null(strstr(mhla_last_message(), info.device_name)); /* the message lists the devices */
    assert_int_equal(mhla_context_create("no-such-device-xyz", &ctx), MHLA_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(mhla_last_message(), "no-such-device-xyz"));
    assert_int_equal(mhla_context_create("0:77", &ctx), MHLA_ERR_DEVICE_NOT_FOUND);
    assert_int_equal(mhla_context_create(NULL, NULL), MHLA_ERR_INVALID_ARGUMENT);
    /* A kind that no name contains: the first device of that kind, or a message saying none is. */
    if (!info.is_gpu) {
        if (mhla_context_create("CPU", &ctx) != MHLA_OK)
            fail_msg("spec 'CPU' with a CPU device listed: %s", mhla_last_message());
        mhla_context_destroy(ctx);
    }
    if (mhla_context_create("accelerator", &ctx) == MHLA_OK)
        mhla_context_destroy(ctx); /* this machine has one */
    else
        assert_non_null(strstr(mhla_last_message(), "'accelerator': no device is of that kind"));
}

static void test_mhla_device_env(void **state)
{
    (void)state;
    const char *saved = getenv("MHLA_DEVICE");
    char *copy = saved ? strdup(saved) : NULL;
    mhla_context *ctx = NULL;
    setenv("MHLA_DEVICE", "definitely-not-a-device", 1);
    assert_int_equal(mhla_context_create(NULL, &ctx), MHLA_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(mhla_last_message(), "MHLA_DEVICE"));
    /* an explicit spec wins over the environment */
    assert_int_equal(mhla_context_create("0", &ctx), MHLA_OK);
    mhla_context_destroy(ctx);
    setenv("MHLA_DEVICE", "0", 1);
    assert_int_equal(mhla_context_create("", &ctx), MHLA_OK);
    mhla_context_destroy(ctx);
    if (copy)
        setenv("MHLA_DEVICE", copy, 1);
    else
        unsetenv("MHLA_DEVICE");
    free(copy);
}

/* mhla_device_selected() names the device mhla_context_create() would open, by the same rules. */
static void test_device_selected(void **state)
{
    (void)state;
    const char *saved = getenv("MHLA_DEVICE");
    char *copy = saved ? strdup(saved) : NULL;
    size_t count = 0, index = 99;
    assert_int_equal(mhla_device_list(NULL, 0, &count), MHLA_OK);
    mhla_device_info *infos = calloc(count, sizeof *infos);
    assert_non_null(infos);
    assert_int_equal(mhla_device_list(infos, count, &count), MHLA_OK);

    unsetenv("MHLA_DEVICE");
    assert_int_equal(mhla_device_selected(NULL, &index), MHLA_OK);
    assert_true(index < count && infos[index].is_default);
    const size_t last = count - 1;
    char spec[32];
    snprintf(spec, sizeof spec, "%d:%d", infos[last].platform_index, infos[last].device_index);
    assert_int_equal(mhla_device_selected(spec, &index), MHLA_OK);
    assert_int_equal(index, last);
    snprintf(spec, sizeof spec, "%zu", last);
    setenv("MHLA_DEVICE", spec, 1);
    index = 99;
    assert_int_equal(mhla_device_selected("", &index), MHLA_OK);
    assert_int_equal(index, last);
    /* the context opens that very device */
    mhla_context *ctx = NULL;
    mhla_context *by_index = NULL;
    assert_int_equal(mhla_context_create(NULL, &ctx), MHLA_OK);
    assert_int_equal(mhla_context_create(spec, &by_index), MHLA_OK);
    assert_ptr_equal(mhla_context_device(ctx), mhla_context_device(by_index));
    mhla_context_destroy(ctx);
    mhla_context_destroy(by_index);

    setenv("MHLA_DEVICE", "definitely-not-a-device", 1);
    assert_int_equal(mhla_device_selected(NULL, &index), MHLA_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(mhla_last_message(), "MHLA_DEVICE 'definitely-not-a-device'"));
    assert_int_equal(mhla_device_selected("nope", &index), MHLA_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(mhla_last_message(), "device spec 'nope'"));
    assert_int_equal(mhla_device_selected("0", NULL), MHLA_ERR_INVALID_ARGUMENT);
    if (copy)
        setenv("MHLA_DEVICE", copy, 1);
    else
        unsetenv("MHLA_DEVICE");
    free(copy);
    free(infos);
}

/* The application's own context and queue, in order and out of order. */
static void wrap_case(cl_command_queue_properties props)
{
    mhla_context *owner = test_context(); /* only to find the default device */
    cl_device_id dev = mhla_context_device(owner);
    cl_int err;
    cl_context clctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_command_queue queue = clCreateCommandQueue(clctx, dev, props, &err);
    if (err == CL_INVALID_QUEUE_PROPERTIES) { /* the device has no out-of-order queues */
        clReleaseContext(clctx);
        mhla_context_destroy(owner);
        test_skip();
    }
    assert_int_equal(err, CL_SUCCESS);
    mhla_context *ctx = NULL;
    assert_int_equal(mhla_context_wrap(clctx, queue, &ctx), MHLA_OK);
    assert_ptr_equal(mhla_context_queue(ctx), queue);
    assert_ptr_equal(mhla_context_cl_context(ctx), clctx);
    /* the caller may drop its references: the context holds its own */
    clReleaseCommandQueue(queue);
    forward_2d_ok(ctx, 8, 1);
    forward_2d_ok(ctx, 12, 2);
    if (!(props & CL_QUEUE_PROFILING_ENABLE)) { /* the app's queue does not profile: no stage times */
        mhla_config cfg = config_1d(1, 1, 16, 2, 4, 4);
        mhla_plan *plan = NULL;
        mhla_stage_times t;
        float x[64] = {0}, o[64], mix[4] = {1, 0, 0, 1};
        assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
        assert_int_equal(mhla_forward_host(plan, x, x, x, mix, o), MHLA_OK);
        assert_int_equal(mhla_plan_stage_times(plan, &t), MHLA_ERR_UNSUPPORTED);
        /* nor kernel times, said so; turning it off is always fine */
        assert_int_equal(mhla_context_profile_kernels(ctx, 1), MHLA_ERR_UNSUPPORTED);
        assert_message_has(ctx, "CL_QUEUE_PROFILING_ENABLE");
        assert_int_equal(mhla_context_profile_kernels(ctx, 0), MHLA_OK);
        mhla_plan_destroy(plan);
    }
    mhla_context_destroy(ctx);
    clReleaseContext(clctx);
    mhla_context_destroy(owner);
}

static void test_wrap_in_order(void **state)
{
    (void)state;
    wrap_case(0);
}

static void test_wrap_out_of_order(void **state)
{
    (void)state;
    wrap_case(CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
}

static void test_wrap_errors(void **state)
{
    (void)state;
    mhla_context *a = test_context(), *b = test_context(), *ctx = (mhla_context *)0x1;
    assert_int_equal(mhla_context_wrap(NULL, mhla_context_queue(a), &ctx), MHLA_ERR_INVALID_ARGUMENT);
    assert_null(ctx);
    assert_int_equal(mhla_context_wrap(mhla_context_cl_context(a), NULL, &ctx), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_context_wrap(mhla_context_cl_context(a), mhla_context_queue(a), NULL),
                     MHLA_ERR_INVALID_ARGUMENT);
    /* a queue of another context */
    assert_int_equal(mhla_context_wrap(mhla_context_cl_context(a), mhla_context_queue(b), &ctx),
                     MHLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(mhla_last_message(), "another cl_context"));
    mhla_context_destroy(a);
    mhla_context_destroy(b);
    mhla_context_destroy(NULL); /* accepted */
}

/* Two plans of different shapes on one context, used alternately. */
/* mhla_report() (libmhla_mpi's way to fail as the library does) records the status and message on
 * the context and the thread; NULL ctx on the thread only. mhla_plan_context() names a plan's. */
static void test_report_and_plan_context(void **state)
{
    (void)state;
    mhla_context *ctx = test_context();
    assert_int_equal(mhla_report(ctx, MHLA_ERR_MPI, "rank %d: %s", 3, "MPI_Allgather failed"), MHLA_ERR_MPI);
    assert_string_equal(mhla_context_message(ctx), "rank 3: MPI_Allgather failed");
    assert_string_equal(mhla_last_message(), "rank 3: MPI_Allgather failed");
    assert_int_equal(mhla_report(NULL, MHLA_ERR_INVALID_ARGUMENT, "no context: %s", "x"), MHLA_ERR_INVALID_ARGUMENT);
    assert_string_equal(mhla_last_message(), "no context: x");
    assert_string_equal(mhla_context_message(ctx), "rank 3: MPI_Allgather failed");
    mhla_config cfg = config_1d(1, 1, 16, 2, 4, 4);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_ptr_equal(mhla_plan_context(plan), ctx);
    assert_null(mhla_plan_context(NULL));
    mhla_plan_destroy(plan);
    mhla_context_destroy(ctx);
}

static void test_two_plans_one_context(void **state)
{
    (void)state;
    mhla_context *ctx = test_context();
    mhla_config a = config_1d(1, 2, 64, 4, 16, 8), b = config_1d(2, 1, 36, 6, 8, 24);
    b.normalizer = MHLA_NORMALIZER_OFFICIAL;
    mhla_plan *pa = NULL, *pb = NULL;
    assert_int_equal(mhla_plan_create(ctx, &a, &pa), MHLA_OK);
    assert_int_equal(mhla_plan_create(ctx, &b, &pb), MHLA_OK);
    assert_true(mhla_plan_workspace_size(pa) > 0);
    assert_int_equal(mhla_plan_tensor_bytes(pa, MHLA_TENSOR_Q), 64 * 2 * 16 * 4);
    assert_int_equal(mhla_plan_tensor_bytes(pb, MHLA_TENSOR_MIXING), 36 * 4);
    assert_true(mhla_plan_config(pa)->scale == 1.0f); /* default resolved */
    const size_t nqa = 64 * 2 * 16, nva = 64 * 2 * 8, nqb = 2 * 36 * 8, nvb = 2 * 36 * 24;
    float qa[2048], ka[2048], va[1024], oa[1024], qb[576], kb[576], vb[1728], ob[1728], ma[16], mb[36];
    double ra[1024], rb[1728];
    fill_uniform(qa, nqa, 1, -1, 1), fill_uniform(ka, nqa, 2, -1, 1), fill_uniform(va, nva, 3, -1, 1);
    fill_uniform(qb, nqb, 4, -1, 1), fill_uniform(kb, nqb, 5, -1, 1), fill_uniform(vb, nvb, 6, -1, 1);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_LINEAR, NULL, 4, 1, 1, ma, 16), MHLA_OK);
    assert_int_equal(mhla_mixing_init(MHLA_INIT_PAPER, NULL, 6, 1, 1, mb, 36), MHLA_OK);
    for (int round = 0; round < 2; ++round) {
        fill_nan(oa, nva), fill_nan(ob, nvb);
        assert_int_equal(mhla_forward_host(pa, qa, ka, va, ma, oa), MHLA_OK);
        assert_int_equal(mhla_forward_host(pb, qb, kb, vb, mb, ob), MHLA_OK);
        assert_int_equal(mhla_reference_forward(&a, qa, ka, va, ma, ra), MHLA_OK);
        assert_int_equal(mhla_reference_forward(&b, qb, kb, vb, mb, rb), MHLA_OK);
        assert_true(finite_rel_err(oa, ra, nva, __func__) <= 1e-5);
        assert_true(finite_rel_err(ob, rb, nvb, __func__) <= 1e-5);
    }
    mhla_plan_destroy(pa);
    mhla_plan_destroy(pb);
    mhla_context_destroy(ctx);
}

/* CLBlast's cached programs hold their context: once the last context that used CLBlast is
 * destroyed, the library empties CLBlast's cache, so an application's wrapped context is left
 * with only its own reference (before, CLBlast's static destructors released them at exit, after
 * the contexts were gone). */
static void test_clblast_programs_released(void **state)
{
    (void)state;
#ifndef MHLA_HAVE_CLBLAST
    printf("skipped: a build without CLBlast\n");
    test_skip();
#endif
    mhla_context *owner = test_context(); /* only to find the default device */
    cl_device_id dev = mhla_context_device(owner);
    mhla_context_destroy(owner);
    cl_int err;
    cl_context clctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_command_queue queue = clCreateCommandQueue(clctx, dev, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    /* The application's own references: the context, and the one its queue holds. */
    cl_uint own = 0, refs = 0;
    assert_int_equal(clGetContextInfo(clctx, CL_CONTEXT_REFERENCE_COUNT, sizeof own, &own, NULL), CL_SUCCESS);
    for (int round = 0; round < 2; ++round) { /* a second context on the same cl_context rebuilds */
        mhla_context *ctx = NULL;
        assert_int_equal(mhla_context_wrap(clctx, queue, &ctx), MHLA_OK);
        /* The GPU row's untiled forward: CLBlast mixes (the tiled one mixes in the library's kernels). */
        assert_int_equal(mhla_context_set_tuning(ctx, "row=gpu,tiled=0"), MHLA_OK);
        const mhla_config cfg = config_1d(1, 2, 64, 4, 8, 8);
        mhla_plan *plan = NULL;
        char text[1024];
        assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
        assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
        mhla_plan_destroy(plan);
        if (!strstr(text, "mixing by CLBlast")) /* the case tests what it claims */
            fail_msg("round %d: the plan does not mix by CLBlast: %s", round, text);
        forward_2d_ok(ctx, 8, 7);
        assert_int_equal(clGetContextInfo(clctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL), CL_SUCCESS);
        assert_true(refs > own); /* the library's programs and buffers, CLBlast's programs */
        mhla_context_destroy(ctx);
        /* rusticl drops what its finished commands held on a worker thread, a little later (later
         * still on a loaded machine): context_refs_settled() polls while the count is above. */
        assert_int_equal(clFinish(queue), CL_SUCCESS);
        double waited = 0;
        refs = context_refs_settled(clctx, own, &waited);
        if (refs != own)
            fail_msg("round %d: the application's cl_context has %u references %.1f s after mhla_context_destroy "
                     "(polled while above %u), expected its own %u",
                     round, refs, waited / 1e3, own, own);
    }
    clReleaseCommandQueue(queue);
    clReleaseContext(clctx);
}

/* mhla_context_set_tuning(): a bad override is refused naming it (and the previous one kept);
 * mhla_context_tuning() says where the values come from. */
static void test_set_tuning(void **state)
{
    (void)state;
    mhla_context *ctx = test_context();
    char text[1024];
    assert_int_equal(mhla_context_set_tuning(ctx, "row=gpu,sum_rd=2"), MHLA_OK);
    assert_int_equal(mhla_context_tuning(ctx, text, sizeof text), MHLA_OK);
    assert_non_null(strstr(text, "built-in row 'gpu' (mhla_context_set_tuning)"));
    assert_non_null(strstr(text, "sum_rd=2,"));
    assert_non_null(strstr(text, "mix_kernel=0,"));
    assert_int_equal(mhla_context_set_tuning(ctx, "row=nope"), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "unknown row 'nope'");
    assert_int_equal(mhla_context_set_tuning(ctx, "sum_ve=abc"), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "sum_ve=abc is not an integer");
    assert_int_equal(mhla_context_set_tuning(ctx, "tq=0"), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "tq=0 is out of range");
    assert_int_equal(mhla_context_set_tuning(ctx, "frob=1"), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "unknown field 'frob'");
    assert_int_equal(mhla_context_tuning(ctx, text, sizeof text), MHLA_OK); /* the last good one stays */
    assert_non_null(strstr(text, "sum_rd=2,"));
    forward_2d_ok(ctx, 12, 8);
    assert_int_equal(mhla_context_set_tuning(ctx, NULL), MHLA_OK);
    assert_int_equal(mhla_context_tuning(ctx, text, sizeof text), MHLA_OK);
    assert_null(strstr(text, "mhla_context_set_tuning"));
    assert_int_equal(mhla_context_set_tuning(NULL, "row=gpu"), MHLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mhla_context_tuning(ctx, NULL, 4), MHLA_ERR_INVALID_ARGUMENT);
    mhla_context_destroy(ctx);
}

/* The tuning database (mhla tune's): entries stored, listed, read back and used by the plans whose
 * head dimensions they name, ahead of the built-in row and behind MHLA_TUNING; a bad entry is
 * refused; a file written for another device is ignored. */
static void test_tuning_db(void **state)
{
    (void)state;
    char dir[256], path[4200], spec[256], note[256], text[2048];
    assert_int_equal(scratch_make(dir, sizeof dir, "mhla-tuning"), 0);
    const char *saved = getenv("MHLA_CACHE_DIR");
    char *copy = saved ? strdup(saved) : NULL;
    setenv("MHLA_CACHE_DIR", dir, 1);
    mhla_context *ctx = test_context();
    size_t count = 99;
    assert_int_equal(mhla_tuning_db_list(ctx, NULL, 0, &count), MHLA_OK);
    assert_int_equal(count, 0);
    assert_int_equal(mhla_tuning_db_get(ctx, 8, 8, spec, sizeof spec, note, sizeof note), MHLA_OK);
    assert_string_equal(spec, "");
    assert_int_equal(mhla_tuning_db_put(ctx, 8, 8, "sum_rd=2,mix_kernel=0,out_rt=5", "test entry"), MHLA_OK);
    assert_int_equal(mhla_tuning_db_put(ctx, 16, 12, "out_rt=2", NULL), MHLA_OK);
    assert_int_equal(mhla_tuning_db_put(ctx, 8, 8, "out_rt=3,mix_kernel=0", "replaced"), MHLA_OK); /* replaces */
    int64_t dims[8];
    assert_int_equal(mhla_tuning_db_list(ctx, dims, 4, &count), MHLA_OK);
    assert_int_equal(count, 2);
    assert_int_equal(mhla_tuning_db_get(ctx, 8, 8, spec, sizeof spec, note, sizeof note), MHLA_OK);
    assert_string_equal(spec, "out_rt=3,mix_kernel=0");
    assert_string_equal(note, "replaced");
    /* bad entries are refused, naming the value; the database keeps what it had */
    assert_int_equal(mhla_tuning_db_put(ctx, 8, 8, "sum_rd=x", NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "sum_rd=x is not an integer");
    assert_int_equal(mhla_tuning_db_put(ctx, 0, 8, "sum_rd=2", NULL), MHLA_ERR_INVALID_ARGUMENT);
    assert_message_has(ctx, "dk = 0");
    assert_int_equal(mhla_tuning_db_put(ctx, 8, 8, "sum_rd=2\nentry 1 1 x", NULL), MHLA_ERR_INVALID_ARGUMENT);
    /* a plan with these head dims uses the entry; others do not */
    mhla_config cfg = config_1d(1, 2, 64, 4, 8, 8);
    mhla_plan *plan = NULL;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    /* out_rt and mix_kernel are no vector widths: no device caps them (a GPU's row takes the tiled
     * forward, which reads neither) */
    if (!strstr(text, "tuned entry 8x8") ||
        (!strstr(text, "; tiled: ") && (!strstr(text, "output 3x") || !strstr(text, "mixing by CLBlast"))))
        fail_msg("plan tuning: %s", text);
    mhla_plan_destroy(plan);
    forward_2d_ok(ctx, 8, 11); /* 2D, Dk = Dv = 8: the tuned tiles, checked against the reference */
    cfg.dk = 16;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    assert_null(strstr(text, "tuned entry"));
    mhla_plan_destroy(plan);
    /* MHLA_TUNING still comes after the entry */
    setenv("MHLA_TUNING", "out_rt=2,tiled=0", 1); /* (tiled=0: the read-out that has out_rt) */
    cfg.dk = 8;
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    restore_test_env(NULL);
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    if (!strstr(text, "tuned entry 8x8, MHLA_TUNING") || !strstr(text, "output 2x"))
        fail_msg("plan tuning with MHLA_TUNING: %s", text);
    mhla_plan_destroy(plan);
    /* a database written for another device or library version is not read */
    assert_int_equal(mhla_tuning_db_path(ctx, path, sizeof path), MHLA_OK);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "device another device\ndriver 1\nplatform 1\nlibrary 0.0.1\nentry 8 8 out_rt=3\n");
    fclose(f);
    mhla_context *other = test_context();
    assert_int_equal(mhla_tuning_db_list(other, NULL, 0, &count), MHLA_OK);
    assert_int_equal(count, 0);
    assert_int_equal(mhla_plan_create(other, &cfg, &plan), MHLA_OK);
    assert_int_equal(mhla_plan_tuning(plan, text, sizeof text), MHLA_OK);
    assert_null(strstr(text, "tuned entry"));
    mhla_plan_destroy(plan);
    mhla_context_destroy(other);
    mhla_context_destroy(ctx);
    /* disk failures are I/O failures naming the path: a database path that is a folder (the rename
     * fails, the temporary is removed), a cache folder under a plain file (the folder cannot be made) */
    ctx = test_context();
    assert_int_equal(mhla_tuning_db_path(ctx, path, sizeof path), MHLA_OK);
    assert_int_equal(remove(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_int_equal(mhla_tuning_db_put(ctx, 8, 8, "sum_rd=2", NULL), MHLA_ERR_IO);
    assert_non_null(strstr(mhla_context_message(ctx), "cannot rename"));
    assert_non_null(strstr(mhla_context_message(ctx), path));
    assert_int_equal(rmdir(path), 0); /* empty: the temporary did not stay beside it either */
    mhla_context_destroy(ctx);
    char plain[4200], under[4300];
    snprintf(plain, sizeof plain, "%s/plain", dir);
    f = fopen(plain, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(under, sizeof under, "%s/cache", plain);
    setenv("MHLA_CACHE_DIR", under, 1);
    ctx = test_context();
    assert_int_equal(mhla_tuning_db_put(ctx, 8, 8, "sum_rd=2", NULL), MHLA_ERR_IO);
    assert_non_null(strstr(mhla_context_message(ctx), "cannot create the folder"));
    mhla_context_destroy(ctx);
    assert_int_equal(remove(plain), 0);
    /* no cache folder: no database, said so */
    setenv("MHLA_CACHE_DIR", "off", 1);
    ctx = test_context();
    assert_int_equal(mhla_tuning_db_path(ctx, path, sizeof path), MHLA_ERR_UNSUPPORTED);
    assert_int_equal(mhla_tuning_db_put(ctx, 8, 8, "sum_rd=2", NULL), MHLA_ERR_UNSUPPORTED);
    mhla_context_destroy(ctx);
    if (copy)
        setenv("MHLA_CACHE_DIR", copy, 1);
    else
        unsetenv("MHLA_CACHE_DIR");
    free(copy);
    scratch_remove(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_and_status_names),
        cmocka_unit_test(test_device_list),
        cmocka_unit_test(test_device_specs),
        cmocka_unit_test(test_mhla_device_env),
        cmocka_unit_test(test_device_selected),
        cmocka_unit_test(test_wrap_in_order),
        cmocka_unit_test(test_wrap_out_of_order),
        cmocka_unit_test(test_wrap_errors),
        cmocka_unit_test(test_report_and_plan_context),
        cmocka_unit_test(test_two_plans_one_context),
        cmocka_unit_test(test_clblast_programs_released),
        cmocka_unit_test(test_set_tuning),
        cmocka_unit_test(test_tuning_db),
    };
    return run_group("context", tests, NULL, NULL);
}
