/* The on-disk program cache: filled on first use, reused after, and never trusted blindly: a
 * corrupt, truncated or foreign entry is ignored and rewritten, and results stay exact. Its folder:
 * MHLA_CACHE_DIR, or MHLA_PROGRAM_CACHE_DIR for the binaries alone (the suite's setting, which each
 * case here clears first). */
#include "helpers.h"
#include "scratch.h"
#include "core/testing.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[512];

static int make_dir(void **state)
{
    (void)state;
    unsetenv("MHLA_PROGRAM_CACHE_DIR");
    return scratch_make(dir, sizeof dir, "mhla-cache");
}

static int remove_dir(void **state)
{
    (void)state;
    scratch_remove(dir);
    unsetenv("MHLA_CACHE_DIR");
    return 0;
}

/* A fresh context (no in-memory programs), one forward checked against the reference. */
static void run_once(void)
{
    mhla_context *ctx = test_context();
    mhla_config cfg = config_1d(1, 2, 96, 4, 12, 20);
    double err = 0;
    mhla_status st = run_against_reference(ctx, &cfg, MHLA_INIT_LINEAR, 3, &err, NULL, NULL);
    if (st != MHLA_OK)
        fail_msg("%s: %s", mhla_status_name(st), mhla_context_message(ctx));
    assert_true(err <= 1e-5);
    mhla_context_destroy(ctx);
}

/* Number of cache entries (*.bin) and of leftover temporaries in `folder` (0 if it is not there). */
static int count_entries_in(const char *folder, int *temporaries)
{
    int n = 0, tmp = 0;
    DIR *d = opendir(folder);
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const size_t len = strlen(e->d_name);
        if (strstr(e->d_name, ".tmp-"))
            ++tmp;
        else if (len > 4 && strcmp(e->d_name + len - 4, ".bin") == 0)
            ++n;
    }
    closedir(d);
    if (temporaries)
        *temporaries = tmp;
    return n;
}

static int count_entries(int *temporaries) { return count_entries_in(dir, temporaries); }

/* Concatenation of every entry's bytes, in name order: to see that damaged entries are rewritten. */
static char *snapshot(size_t *len)
{
    char *all = NULL;
    size_t total = 0;
    const char *names = scratch_listing(dir);
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", names);
    for (char *name = strtok(copy, " "); name; name = strtok(NULL, " ")) {
        if (!strstr(name, ".bin"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
            all = realloc(all, total + n);
            assert_non_null(all);
            memcpy(all + total, buf, n);
            total += n;
        }
        fclose(f);
    }
    *len = total;
    return all;
}

/* Applies `damage` to every entry: 0 overwrite the middle, 1 truncate, 2 change the device name
 * field (as if another driver or device had written it). */
static void damage_entries(int damage)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!strstr(e->d_name, ".bin"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        if (damage == 1) {
            assert_int_equal(truncate(path, sb.st_size / 2), 0);
            continue;
        }
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        /* the device name is the second key field: magic 8, version 4, hash 8, then len+options */
        long at = damage == 0 ? (long)(sb.st_size / 2) : 20;
        if (damage == 2) {
            unsigned len = 0;
            fseek(f, 20, SEEK_SET);
            assert_int_equal(fread(&len, sizeof len, 1, f), 1);
            at = 20 + 4 + (long)len + 4; /* first byte of the device name */
        }
        fseek(f, at, SEEK_SET);
        fputs("XX", f);
        fclose(f);
    }
    closedir(d);
}

static void test_fill_then_reuse(void **state)
{
    (void)state;
    setenv("MHLA_CACHE_DIR", dir, 1);
    run_once();
    int tmp = 0;
    const int n = count_entries(&tmp);
    /* block summaries and output at least; the mixing is a program of its own only where it runs
     * in the library's kernels and not inside the read-out (the untiled forms on a GPU row take
     * CLBlast's GEMM: 2 programs on NVIDIA's OpenCL) */
    assert_true(n >= 2);
    assert_int_equal(tmp, 0);
    run_once();
    assert_int_equal(count_entries(&tmp), n); /* reused, nothing new */
}

static void test_bad_entries_are_rebuilt(void **state)
{
    (void)state;
    setenv("MHLA_CACHE_DIR", dir, 1);
    run_once();
    const int n = count_entries(NULL);
    size_t len0 = 0;
    char *before = snapshot(&len0);
    for (int damage = 0; damage < 3; ++damage) {
        damage_entries(damage);
        size_t len1 = 0;
        char *damaged = snapshot(&len1);
        assert_true(len1 != len0 || memcmp(damaged, before, len0) != 0);
        free(damaged);
        run_once(); /* exact results from a rebuilt program */
        int tmp = 0;
        assert_int_equal(count_entries(&tmp), n);
        assert_int_equal(tmp, 0);
        size_t len2 = 0;
        char *after = snapshot(&len2); /* rewritten: the compiler's output is the same again */
        assert_int_equal(len2, len0);
        assert_memory_equal(after, before, len0);
        free(after);
    }
    free(before);
}

static void test_off_and_unwritable(void **state)
{
    (void)state;
    char sub[600];
    snprintf(sub, sizeof sub, "%s/off", dir);
    setenv("MHLA_CACHE_DIR", "off", 1);
    run_once();
    struct stat sb;
    assert_int_not_equal(stat(sub, &sb), 0);
    /* a cache folder that cannot be created (a file is in the way): compile, no error */
    snprintf(sub, sizeof sub, "%s/blocker", dir);
    FILE *f = fopen(sub, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(sub, sizeof sub, "%s/blocker/cache", dir);
    setenv("MHLA_CACHE_DIR", sub, 1);
    run_once();
}

/* MHLA_PROGRAM_CACHE_DIR takes the binaries, and only them, out of MHLA_CACHE_DIR (tests share them,
 * each with a tuning database of its own): filled and reused there; "off" keeps none; and
 * MHLA_CACHE_DIR=off still keeps nothing anywhere. */
static void test_program_folder_apart(void **state)
{
    (void)state;
    char tuning[600], programs[600];
    snprintf(tuning, sizeof tuning, "%s/tuning", dir);
    snprintf(programs, sizeof programs, "%s/programs", dir);
    setenv("MHLA_CACHE_DIR", tuning, 1);
    setenv("MHLA_PROGRAM_CACHE_DIR", programs, 1);
    run_once();
    const int n = count_entries_in(programs, NULL);
    assert_true(n >= 2); /* as in test_fill_then_reuse */
    assert_int_equal(count_entries_in(tuning, NULL), 0);
    run_once();
    assert_int_equal(count_entries_in(programs, NULL), n); /* reused */
    char other[600];
    snprintf(other, sizeof other, "%s/other", dir);
    setenv("MHLA_PROGRAM_CACHE_DIR", "off", 1);
    setenv("MHLA_CACHE_DIR", other, 1);
    run_once();
    assert_int_equal(count_entries_in(other, NULL), 0);
    setenv("MHLA_CACHE_DIR", "off", 1);
    setenv("MHLA_PROGRAM_CACHE_DIR", other, 1);
    run_once();
    assert_int_equal(count_entries_in(other, NULL), 0);
    unsetenv("MHLA_PROGRAM_CACHE_DIR");
}

/* A build that fails with an empty log (as PoCL fails one whose compile cache entry another process
 * replaced meanwhile: processes sharing a cold cache, building the same program at once) is tried
 * again, once: the forward then runs and matches the reference. Two such failures in a row are
 * reported, saying so, with nothing leaked. (A compile error, whose log says why, is built once:
 * test_errors' test_kernel_build_failure.) */
static void test_build_retried_after_empty_log(void **state)
{
    (void)state;
    setenv("MHLA_CACHE_DIR", "off", 1); /* every program built from source */
    mhla_context *ctx = test_context();
    mhla_config cfg = config_1d(1, 2, 96, 4, 12, 20);
    double err = 0;
    mhla__fault_arm(MHLA__FAULT_BUILD, 1);
    mhla_status st = run_against_reference(ctx, &cfg, MHLA_INIT_LINEAR, 3, &err, NULL, NULL);
    const int fired = mhla__fault_fired(MHLA__FAULT_BUILD);
    mhla__fault_arm(MHLA__FAULT_BUILD, 0);
    if (st != MHLA_OK)
        fail_msg("a build that failed once with an empty log: %s: %s", mhla_status_name(st), mhla_context_message(ctx));
    assert_true(fired);
    assert_true(err <= 1e-5);
    mhla_context_destroy(ctx);

    ctx = test_context();
    mhla_plan *plan = NULL;
    const long live = mhla__live_allocations();
    mhla__fault_arm_times(MHLA__FAULT_BUILD, 1, 2);
    st = mhla_plan_create(ctx, &cfg, &plan);
    mhla__fault_arm(MHLA__FAULT_BUILD, 0);
    assert_int_equal(st, MHLA_ERR_BUILD_FAILED);
    assert_null(plan);
    assert_message_has(ctx, "failed twice (the first time with an empty build log too)");
    assert_message_has(ctx, "build log:\n(empty)");
    assert_int_equal(mhla_context_cl_error(ctx), CL_BUILD_PROGRAM_FAILURE);
    assert_int_equal(mhla__live_allocations(), live);
    /* and the same context builds it the next time */
    assert_int_equal(mhla_plan_create(ctx, &cfg, &plan), MHLA_OK);
    mhla_plan_destroy(plan);
    mhla_context_destroy(ctx);

#ifdef MHLA_HAVE_CLBLAST
    /* The same for the program CLBlast builds for the mixing GEMM (mix_kernel=0: CLBlast's GEMM). */
    ctx = test_context();
    assert_int_equal(mhla_context_set_tuning(ctx, "mix_kernel=0"), MHLA_OK);
    mhla__fault_arm(MHLA__FAULT_BLAS_BUILD, 1);
    st = run_against_reference(ctx, &cfg, MHLA_INIT_LINEAR, 3, &err, NULL, NULL);
    const int blas_fired = mhla__fault_fired(MHLA__FAULT_BLAS_BUILD);
    mhla__fault_arm(MHLA__FAULT_BLAS_BUILD, 0);
    if (st != MHLA_OK)
        fail_msg("CLBlast's build failed once: %s: %s", mhla_status_name(st), mhla_context_message(ctx));
    assert_true(blas_fired); /* the plan mixes with CLBlast's GEMM */
    assert_true(err <= 1e-5);
    mhla__fault_arm_times(MHLA__FAULT_BLAS_BUILD, 1, 2);
    st = run_against_reference(ctx, &cfg, MHLA_INIT_LINEAR, 3, &err, NULL, NULL);
    mhla__fault_arm(MHLA__FAULT_BLAS_BUILD, 0);
    assert_int_equal(st, MHLA_ERR_BUILD_FAILED);
    assert_message_has(ctx, "CLBlastSgemm (its program failed to build twice)");
    mhla_context_destroy(ctx);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fill_then_reuse, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_bad_entries_are_rebuilt, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_off_and_unwritable, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_program_folder_apart, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_build_retried_after_empty_log, make_dir, remove_dir),
    };
    return run_group("program_cache", tests, NULL, NULL);
}
